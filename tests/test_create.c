/* Creation and copying: zeros/ones/full/scalar/arange/eye, the *_like forms,
 * fill_ (on views), copy_ across every dtype pair and layout, clone, to_dtype, to. */
#include "check_util.h"
#include "tensor/tensor_internal.h"
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const em_dtype all_dtypes[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_BOOL};
#define N_DTYPES (int)(sizeof all_dtypes / sizeof *all_dtypes)

static bool is_int(em_dtype dt) { return dt == EM_I64 || dt == EM_I32; }

/* v as dtype dt stores it, for values exactly representable in every float
 * dtype: integers truncate toward zero, bool is v != 0. */
static double as_dtype(double v, em_dtype dt)
{
    if (dt == EM_BOOL) return v != 0;
    if (is_int(dt)) return trunc(v);
    return v;
}

static void assert_all(em_tensor *t, double want)
{
    double *v = tu_to_doubles(t);
    int64_t bad = -1;
    for (int64_t i = 0; i < em_numel(t) && bad < 0; i++)
        if (v[i] != want) bad = i;
    ck_assert_msg(bad < 0, "%s element %lld is %g, want %g", em_dtype_name(t->dtype), (long long)bad,
                  bad < 0 ? 0 : v[bad], want);
    free(v);
}

static void assert_geometry(const em_tensor *t, int nd, const int64_t *shape, em_dtype dt)
{
    ck_assert_int_eq(t->ndim, nd);
    for (int d = 0; d < nd; d++) ck_assert_int_eq(t->shape[d], shape[d]);
    ck_assert_int_eq(t->dtype, dt);
    ck_assert(em_is_contiguous(t));
    ck_assert(em_device_eq(t->device, EM_CPU));
}

/* ---- filled tensors --------------------------------------------------------------- */

START_TEST(zeros_ones_full_scalar)
{
    int64_t live = tu_live_bytes();
    const int64_t big[] = {129, 517};   /* several threads' worth */
    for (int d = 0; d < N_DTYPES; d++) EM_SCOPE {
        em_dtype dt = all_dtypes[d];
        em_tensor *z = em_zeros(EM_SHAPE(2, 3), dt, EM_CPU);
        assert_geometry(z, 2, (int64_t[]){2, 3}, dt);
        assert_all(z, 0);
        assert_all(em_ones(EM_SHAPE(4), dt, EM_CPU), 1);
        assert_all(em_full(2, big, -2.5, dt, EM_CPU), as_dtype(-2.5, dt));
        assert_all(em_full(2, big, 0, dt, EM_CPU), 0);
        em_tensor *s = em_scalar(7.5, dt, EM_CPU);
        assert_geometry(s, 0, NULL, dt);
        ck_assert_double_eq(em_item(s), as_dtype(7.5, dt));
        em_tensor *e = em_zeros(EM_SHAPE(3, 0, 2), dt, EM_CPU);   /* empty */
        assert_geometry(e, 3, (int64_t[]){3, 0, 2}, dt);
        ck_assert_int_eq(em_numel(e), 0);
        em_tensor *zl = em_zeros_like(em_transpose(em_ones(EM_SHAPE(3, 5), dt, EM_CPU), 0, 1));
        assert_geometry(zl, 2, (int64_t[]){5, 3}, dt);
        assert_all(zl, 0);
        em_tensor *el = em_empty_like(s);
        assert_geometry(el, 0, NULL, dt);
        ck_assert_ptr_ne(el->storage, s->storage);
    }
    EM_SCOPE {   /* rounding of the value into the dtype */
        ck_assert_double_eq(em_item(em_scalar(0.1, EM_F32, EM_CPU)), (double)0.1f);
        ck_assert_double_eq(em_item(em_scalar(1e6, EM_F16, EM_CPU)), INFINITY);
        ck_assert_double_eq(em_item(em_scalar(-3.99, EM_I32, EM_CPU)), -3);
        ck_assert_double_eq(em_item(em_scalar(0.25, EM_BOOL, EM_CPU)), 1);
        ck_assert(isnan(em_item(em_scalar(NAN, EM_BF16, EM_CPU))));
    }
    ck_assert_int_eq(tu_live_bytes(), live);
}
END_TEST

/* ---- arange, eye -------------------------------------------------------------------- */

START_TEST(arange_values)
{
    EM_SCOPE {
        typedef struct { double start, end, step; em_dtype dt; int64_t n; } acase;
        const acase cases[] = {
            {0, 10, 1, EM_F32, 10},   {0, 1, 0.1, EM_F64, 10},   {5, -5, -2.5, EM_F32, 4},
            {0, 10, 3, EM_I64, 4},    {-3, 4, 2, EM_I32, 4},     {3, 3, 1, EM_F32, 0},
            {0, 5, 0.5, EM_BF16, 10}, {1, 2, 0.25, EM_F16, 4},   {0, 100000, 1, EM_F32, 100000},
            {0.5, 3.2, 1, EM_F64, 3},
        };
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            const acase *c = &cases[k];
            em_tensor *t = em_arange(c->start, c->end, c->step, c->dt, EM_CPU);
            assert_geometry(t, 1, &c->n, c->dt);
            double *v = tu_to_doubles(t);
            for (int64_t i = 0; i < c->n; i++) {
                double want = c->start + (double)i * c->step;
                if (c->dt == EM_F32) want = (float)want;
                ck_assert_msg(v[i] == want, "arange case %zu [%lld] = %g, want %g", k, (long long)i, v[i], want);
            }
            free(v);
        }
    }
}
END_TEST

START_TEST(eye_values)
{
    const int64_t sizes[][2] = {{3, 3}, {2, 4}, {4, 2}, {0, 3}, {1, 1}};
    for (int d = 0; d < N_DTYPES; d++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) EM_SCOPE {
            em_tensor *t = em_eye(sizes[k][0], sizes[k][1], all_dtypes[d], EM_CPU);
            assert_geometry(t, 2, sizes[k], all_dtypes[d]);
            for (int64_t i = 0; i < sizes[k][0]; i++)
                for (int64_t j = 0; j < sizes[k][1]; j++)
                    ck_assert_double_eq(em_get(t, (int64_t[]){i, j}), i == j ? 1 : 0);
        }
}
END_TEST

/* ---- fill_ ------------------------------------------------------------------------ */

START_TEST(fill_on_views)
{
    for (int d = 0; d < N_DTYPES; d++) EM_SCOPE {
        em_dtype dt = all_dtypes[d];
        em_tensor *base = em_zeros(EM_SHAPE(6, 7), dt, EM_CPU);
        /* a strided view: rows 1..4, columns 2..6, transposed */
        em_tensor *v = em_transpose(em_narrow(em_narrow(base, 0, 1, 4), 1, 2, 5), 0, 1);
        uint32_t version = base->storage->version;
        ck_assert_ptr_eq(em_fill_(v, 3), v);
        ck_assert_uint_gt(base->storage->version, version);
        for (int64_t i = 0; i < 6; i++)
            for (int64_t j = 0; j < 7; j++) {
                bool inside = i >= 1 && i < 5 && j >= 2;
                ck_assert_double_eq(em_get(base, (int64_t[]){i, j}), inside ? as_dtype(3, dt) : 0);
            }
        em_fill_(em_select(base, 1, 0), -1);   /* a column */
        for (int64_t i = 0; i < 6; i++) ck_assert_double_eq(em_get(base, (int64_t[]){i, 0}), as_dtype(-1, dt));
        em_tensor *s = em_scalar(0, dt, EM_CPU);   /* 0-d */
        em_fill_(s, 1);
        ck_assert_double_eq(em_item(s), 1);
    }
    EM_SCOPE {   /* a large non-contiguous fill runs on several threads */
        em_tensor *base = em_zeros(EM_SHAPE(400, 300), EM_F32, EM_CPU);
        em_fill_(em_narrow(base, 1, 0, 299), 2);
        double *v = tu_to_doubles(base);
        int64_t bad = -1;
        for (int64_t i = 0; i < 400 * 300 && bad < 0; i++)
            if (v[i] != (i % 300 == 299 ? 0 : 2)) bad = i;
        ck_assert_msg(bad < 0, "element %lld wrong", (long long)bad);
        free(v);
    }
}
END_TEST

/* Fills past em__fill_stream_bytes take non-temporal stores: every element of
 * a view that starts off any alignment and ends in a partial store gets the
 * value, each element size (1, 2, 4, 8 bytes), and the neighbours outside the
 * view keep theirs. */
START_TEST(large_fills_stream)
{
    static const em_dtype dts[] = {EM_BOOL, EM_BF16, EM_F32, EM_I64};
    static const double vals[] = {1, -2.5, 0.75, -3};
    for (int d = 0; d < 4; d++) EM_SCOPE {
        em_dtype dt = dts[d];
        size_t es = em_dtype_size(dt);
        int64_t n = em__fill_stream_bytes() / (int64_t)es + 37;   /* over the threshold, odd tail */
        em_tensor *base = em_zeros(EM_SHAPE(n + 4), dt, EM_CPU);
        em_tensor *v = em_narrow(base, 0, 1, n + 1);              /* starts one element in */
        for (int pass = 0; pass < 2; pass++) {
            double want = pass ? 0 : vals[d];                     /* a value, then zero over it */
            em_fill_(v, want);
            uint64_t bits = 0;
            em__store(&bits, dt, want);
            const char *p = em_data_ptr(base);
            int64_t bad = -1;
            for (int64_t i = 0; i < n + 4 && bad < 0; i++) {
                uint64_t got = 0;
                memcpy(&got, p + (size_t)i * es, es);
                bool inside = i >= 1 && i <= n + 1;
                if (got != (inside ? bits : 0)) bad = i;
            }
            ck_assert_msg(bad < 0, "%s pass %d: element %lld of %lld wrong", em_dtype_name(dt), pass, (long long)bad,
                          (long long)(n + 4));
        }
    }
}
END_TEST

/* ---- copy_ -------------------------------------------------------------------------- */

/* Values every dtype holds exactly (for its own rule): small integers and halves. */
static em_tensor *sample(int nd, const int64_t *shape, em_dtype dt, uint64_t seed)
{
    em_tensor *t = em_empty(nd, shape, dt, EM_CPU);
    int64_t n = em_numel(t), idx[EM_MAX_DIMS] = {0};
    uint64_t st = seed;
    for (int64_t e = 0; e < n; e++) {
        double v = floor(tu_uniform(&st, -16, 16)) / 2;   /* -8 .. 7.5 in steps of 0.5 */
        em_set(t, idx, v);
        for (int d = nd - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
    return t;
}

typedef enum { V_CONTIG, V_TRANSPOSED, V_NARROWED, V_COUNT } vlayout;

/* A [rows, cols] view in layout `lay` over a fresh base, zero-filled. */
static em_tensor *dst_view(int64_t rows, int64_t cols, em_dtype dt, vlayout lay)
{
    switch (lay) {
    case V_TRANSPOSED: return em_transpose(em_zeros(EM_SHAPE(cols, rows), dt, EM_CPU), 0, 1);
    case V_NARROWED: return em_narrow(em_zeros(EM_SHAPE(rows, cols + 5), dt, EM_CPU), 1, 3, cols);
    default: return em_zeros(EM_SHAPE(rows, cols), dt, EM_CPU);
    }
}

static em_tensor *src_view(int64_t rows, int64_t cols, em_dtype dt, vlayout lay, uint64_t seed)
{
    switch (lay) {
    case V_TRANSPOSED: return em_transpose(sample(EM_SHAPE(cols, rows), dt, seed), 0, 1);
    case V_NARROWED: return em_narrow(sample(EM_SHAPE(rows + 2, cols), dt, seed), 0, 1, rows);
    default: return sample(EM_SHAPE(rows, cols), dt, seed);
    }
}

START_TEST(copy_every_dtype_pair_and_layout)
{
    int64_t live = tu_live_bytes();
    const int64_t sizes[][2] = {{3, 5}, {70, 300}, {0, 4}};
    for (int sd = 0; sd < N_DTYPES; sd++)
        for (int dd = 0; dd < N_DTYPES; dd++)
            for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
                for (int ls = 0; ls < V_COUNT; ls++)
                    for (int ld = 0; ld < V_COUNT; ld++) EM_SCOPE {
                        em_dtype sdt = all_dtypes[sd], ddt = all_dtypes[dd];
                        int64_t r = sizes[z][0], c = sizes[z][1];
                        if (z == 1 && ls != ld) continue;   /* the large size: matching layouts only */
                        em_tensor *src = src_view(r, c, sdt, (vlayout)ls, 100 * sd + dd);
                        em_tensor *dst = dst_view(r, c, ddt, (vlayout)ld);
                        uint32_t version = dst->storage->version;
                        ck_assert_ptr_eq(em_copy_(dst, src), dst);
                        ck_assert_uint_gt(dst->storage->version, version);
                        double *sv = tu_to_doubles(src), *dv = tu_to_doubles(dst);
                        int64_t bad = -1;   /* one assertion per case: Check is slow per assertion */
                        for (int64_t i = 0; i < r * c && bad < 0; i++)
                            if (dv[i] != as_dtype(sv[i], ddt)) bad = i;
                        ck_assert_msg(bad < 0, "%s -> %s, layouts %d/%d, [%lld]: %g from %g", em_dtype_name(sdt),
                                      em_dtype_name(ddt), ls, ld, (long long)bad, bad < 0 ? 0 : dv[bad], bad < 0 ? 0 : sv[bad]);
                        free(sv), free(dv);
                        if (ld == V_NARROWED) {   /* the columns around the view are untouched */
                            bool clean = true;
                            for (int64_t i = 0; i < r; i++) {
                                char *row = (char *)dst->storage->data + i * (c + 5) * (int64_t)em_dtype_size(ddt);
                                for (int64_t j = 0; j < c + 5; j++)
                                    if ((j < 3 || j >= 3 + c) && em__load(row + j * (int64_t)em_dtype_size(ddt), ddt) != 0)
                                        clean = false;
                            }
                            ck_assert_msg(clean, "%s -> %s: copy_ wrote outside the narrowed view", em_dtype_name(sdt),
                                          em_dtype_name(ddt));
                        }
                    }
    ck_assert_int_eq(tu_live_bytes(), live);
}
END_TEST

/* Conversions that round: f64 -> f32/bf16 to nearest even, float -> int toward zero. */
/* A contiguous copy of a transposed layout runs in tiles (the iterator, tensor/cpu/iter.c)
 * once both dims reach a tile: every dtype pair, sizes that are not multiples
 * of the tile, a narrowed (offset) source, 3-d permutes whose stride-1 dim is
 * not next to the last, and an expanded outer dim. Values as the element-wise
 * copy gives them. */
START_TEST(copy_transposed_in_tiles)
{
    int64_t live = tu_live_bytes();
    for (int sd = 0; sd < N_DTYPES; sd++)
        for (int dd = 0; dd < N_DTYPES; dd++)
            for (int lay = 0; lay < 5; lay++) EM_SCOPE {
                    em_dtype sdt = all_dtypes[sd], ddt = all_dtypes[dd];
                    if (lay > 1 && sd != dd && sd != 0) continue;   /* 3-d layouts: same dtype, or from the first */
                    em_tensor *src;
                    switch (lay) {
                    case 0: src = em_transpose(sample(EM_SHAPE(70, 97), sdt, 7 + (uint64_t)sd), 0, 1); break;
                    case 1: src = em_transpose(em_narrow(sample(EM_SHAPE(45, 66), sdt, 8), 0, 3, 40), 0, 1); break;
                    case 2: src = em_permute(sample(EM_SHAPE(3, 40, 50), sdt, 9), (int[]){0, 2, 1}); break;
                    case 3: src = em_permute(sample(EM_SHAPE(40, 3, 50), sdt, 10), (int[]){2, 1, 0}); break;
                    default: src = em_expand(em_transpose(sample(EM_SHAPE(1, 36, 33), sdt, 11), 1, 2), EM_SHAPE(4, 33, 36));
                    }
                    em_tensor *dst = em_empty(src->ndim, src->shape, ddt, EM_CPU);
                    ck_assert_ptr_eq(em_copy_(dst, src), dst);
                    double *sv = tu_to_doubles(src), *dv = tu_to_doubles(dst);
                    int64_t bad = -1;
                    for (int64_t i = 0; i < em_numel(src) && bad < 0; i++)
                        if (dv[i] != as_dtype(sv[i], ddt)) bad = i;
                    ck_assert_msg(bad < 0, "%s -> %s, layout %d, [%lld]: %g from %g", em_dtype_name(sdt),
                                  em_dtype_name(ddt), lay, (long long)bad, bad < 0 ? 0 : dv[bad], bad < 0 ? 0 : sv[bad]);
                    free(sv), free(dv);
                }
    ck_assert_int_eq(tu_live_bytes(), live);
}
END_TEST

START_TEST(copy_rounds)
{
    EM_SCOPE {
        const double src[] = {0.1, 1.0 / 3, -2.7, 2.7, 1e10, 65519.0, -0.5, 3.0000001};
        int64_t n = sizeof src / sizeof *src;
        em_tensor *s = em_from_data(src, 1, &n, EM_F64);
        em_tensor *f = em_to_dtype(s, EM_F32), *i = em_to_dtype(s, EM_I32), *b = em_to_dtype(s, EM_BOOL);
        for (int64_t k = 0; k < n; k++) {
            ck_assert_double_eq(em_get(f, &k), (double)(float)src[k]);
            if (fabs(src[k]) < 2e9) ck_assert_double_eq(em_get(i, &k), trunc(src[k]));
            ck_assert_double_eq(em_get(b, &k), 1);
        }
        /* 1 + 2^-8 is a tie in bf16 between 1 and 1 + 2^-7: even is 1 */
        em_tensor *tie = em_to_dtype(em_full(EM_SHAPE(300), 1.0 + 1.0 / 256, EM_F32, EM_CPU), EM_BF16);
        ck_assert_double_eq(em_get(tie, (int64_t[]){299}), 1.0);
    }
}
END_TEST

START_TEST(copy_from_expanded_and_0d)
{
    EM_SCOPE {
        em_tensor *row = sample(EM_SHAPE(1, 6), EM_F32, 5);
        em_tensor *dst = em_zeros(EM_SHAPE(4, 6), EM_F64, EM_CPU);
        em_copy_(dst, em_expand(row, EM_SHAPE(4, 6)));
        for (int64_t i = 0; i < 4; i++)
            for (int64_t j = 0; j < 6; j++)
                ck_assert_double_eq(em_get(dst, (int64_t[]){i, j}), em_get(row, (int64_t[]){0, j}));
        em_tensor *a = em_scalar(2.5, EM_F16, EM_CPU), *b = em_scalar(0, EM_I64, EM_CPU);
        em_copy_(b, a);
        ck_assert_double_eq(em_item(b), 2);
    }
}
END_TEST

/* ---- clone, to_dtype, to ------------------------------------------------------------- */

START_TEST(clone_is_independent)
{
    for (int d = 0; d < N_DTYPES; d++) EM_SCOPE {
        em_dtype dt = all_dtypes[d];
        em_tensor *a = sample(EM_SHAPE(5, 4), dt, 9 + d);
        em_tensor *t = em_transpose(a, 0, 1);
        em_tensor *c = em_clone(t);
        assert_geometry(c, 2, (int64_t[]){4, 5}, dt);
        ck_assert_ptr_ne(c->storage, a->storage);
        double *want = tu_to_doubles(t), *got = tu_to_doubles(c);
        for (int i = 0; i < 20; i++) ck_assert_double_eq(got[i], want[i]);
        em_set(c, (int64_t[]){0, 0}, 1);
        em_set(a, (int64_t[]){1, 0}, 0);
        ck_assert_double_eq(em_get(a, (int64_t[]){0, 0}), want[0]);   /* a unchanged by writes to c */
        ck_assert_double_eq(em_get(c, (int64_t[]){0, 1}), want[1]);   /* c unchanged by writes to a */
        free(want), free(got);
    }
}
END_TEST

START_TEST(to_dtype_and_to)
{
    EM_SCOPE {
        em_tensor *a = sample(EM_SHAPE(3, 3), EM_F32, 1);
        int32_t rc = a->refcount;
        em_tensor *same = em_to_dtype(a, EM_F32);
        ck_assert_ptr_eq(same, a);   /* already f32: the same tensor, one more reference */
        ck_assert_int_eq(a->refcount, rc + 1);
        ck_assert_ptr_eq(em_to(a, EM_CPU), a);
        ck_assert_int_eq(a->refcount, rc + 2);
        for (int d = 0; d < N_DTYPES; d++) {
            em_tensor *c = em_to_dtype(em_transpose(a, 0, 1), all_dtypes[d]);
            if (all_dtypes[d] != EM_F32) assert_geometry(c, 2, (int64_t[]){3, 3}, all_dtypes[d]);
            for (int64_t i = 0; i < 3; i++)
                for (int64_t j = 0; j < 3; j++)
                    ck_assert_double_eq(em_get(c, (int64_t[]){i, j}), as_dtype(em_get(a, (int64_t[]){j, i}), all_dtypes[d]));
        }
    }
    /* at top level the caller owns the references */
    em_tensor *t = em_ones(EM_SHAPE(2), EM_F32, EM_CPU);
    em_tensor *u = em_to_dtype(t, EM_F32);
    ck_assert_int_eq(t->refcount, 2);
    em_release(u);
    em_release(t);
}
END_TEST

START_TEST(null_propagates)
{
    EM_SCOPE {
        em_tensor *a = em_ones(EM_SHAPE(2), EM_F32, EM_CPU);
        ck_assert_ptr_null(em_copy_(a, NULL));
        ck_assert_ptr_null(em_copy_(NULL, a));
        ck_assert_ptr_null(em_clone(NULL));
        ck_assert_ptr_null(em_fill_(NULL, 1));
        ck_assert_ptr_null(em_to_dtype(NULL, EM_F64));
        ck_assert_ptr_null(em_zeros_like(NULL));
    }
}
END_TEST

/* ---- misuse ------------------------------------------------------------------------- */

START_TEST(misuse_copy_shape)
{
    tu_expect_misuse("em_copy_: shape mismatch: dst [2,3], src [3,2]");
    em_copy_(em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU), em_zeros(EM_SHAPE(3, 2), EM_F32, EM_CPU));
}
END_TEST

START_TEST(misuse_copy_into_expanded)
{
    tu_expect_misuse("em_copy_: cannot write in place to [4,3]: dim 0 is expanded");
    em_tensor *e = em_expand(em_zeros(EM_SHAPE(1, 3), EM_F32, EM_CPU), EM_SHAPE(4, 3));
    em_copy_(e, em_ones(EM_SHAPE(4, 3), EM_F32, EM_CPU));
}
END_TEST

START_TEST(misuse_fill_expanded)
{
    tu_expect_misuse("em_fill_: cannot write in place to [2,5]: dim 1 is expanded");
    em_fill_(em_expand(em_zeros(EM_SHAPE(2, 1), EM_F32, EM_CPU), EM_SHAPE(2, 5)), 1);
}
END_TEST

START_TEST(misuse_arange_zero_step)
{
    tu_expect_misuse("em_arange: step must be nonzero");
    em_arange(0, 5, 0, EM_F32, EM_CPU);
}
END_TEST

START_TEST(misuse_arange_wrong_sign)
{
    tu_expect_misuse("em_arange: step -1 moves away from end");
    em_arange(0, 5, -1, EM_F32, EM_CPU);
}
END_TEST

START_TEST(misuse_arange_nonfinite)
{
    tu_expect_misuse("em_arange: start 0, end inf and step 1 must be finite");
    em_arange(0, INFINITY, 1, EM_F32, EM_CPU);
}
END_TEST

START_TEST(misuse_eye_negative)
{
    tu_expect_misuse("em_eye: sizes must be non-negative");
    em_eye(-1, 3, EM_F32, EM_CPU);
}
END_TEST

/* A shape whose element count or byte size does not fit in 63 bits is an
 * error (status and message), never a wrapped, too-small allocation. */
START_TEST(shape_overflow_is_an_error)
{
    const int64_t shapes[][3] = { { 1ll << 62, 1, 1 }, { 1ll << 32, 1ll << 32, 4 }, { 1ll << 61, 2, 1 } };
    const int nd[] = { 1, 3, 2 };
    for (int i = 0; i < 3; i++) {
        em_clear_error();
        em_tensor *t = em_empty(nd[i], shapes[i], EM_F32, EM_CPU);
        ck_assert_msg(t == NULL, "shape %d: a tensor came back", i);
        ck_assert_int_eq(em_last_status(), EM_ERR_OOM);
        ck_assert_msg(strstr(em_last_error(), "more than 2^63 bytes"), "message: %s", em_last_error());
    }
    /* a zero-sized dimension makes any other size fine: no elements */
    EM_SCOPE {
        em_tensor *z = em_empty(3, (int64_t[]){ 1ll << 62, 0, 1ll << 62 }, EM_F32, EM_CPU);
        ck_assert_ptr_nonnull(z);
        ck_assert_int_eq(em_numel(z), 0);
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("create");
    tu_add_tests(tu_case(s, "ops", 600), zeros_ones_full_scalar, shape_overflow_is_an_error, arange_values,
                 eye_values, fill_on_views, large_fills_stream, copy_every_dtype_pair_and_layout, copy_transposed_in_tiles, copy_rounds,
                 copy_from_expanded_and_0d, clone_is_independent, to_dtype_and_to, null_propagates);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_copy_shape, misuse_copy_into_expanded,
                        misuse_fill_expanded, misuse_arange_zero_step, misuse_arange_wrong_sign,
                        misuse_arange_nonfinite, misuse_eye_negative);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
