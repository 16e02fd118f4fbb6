/* ember tests — cat, stack, index_select, gather, scatter_add against plain
 * reference loops over logical indices. */
#include "check_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const em_dtype all_dtypes[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_BOOL};
#define N_DTYPES (int)(sizeof all_dtypes / sizeof *all_dtypes)

static void unravel(int64_t e, int nd, const int64_t *shape, int64_t *pos)
{
    for (int d = nd - 1; d >= 0; d--) {
        pos[d] = shape[d] ? e % shape[d] : 0;
        e = shape[d] ? e / shape[d] : 0;
    }
}

static int64_t ravel(const int64_t *pos, int nd, const int64_t *shape)
{
    int64_t e = 0;
    for (int d = 0; d < nd; d++) e = e * shape[d] + pos[d];
    return e;
}

static void assert_shape(const em_tensor *t, int nd, const int64_t *shape)
{
    ck_assert_int_eq(t->ndim, nd);
    for (int d = 0; d < nd; d++) ck_assert_int_eq(t->shape[d], shape[d]);
}

/* Exact equality of element values (these ops move elements, never round). */
static void assert_values(em_tensor *t, const double *want, int64_t n)
{
    double *got = tu_to_doubles(t);
    int64_t bad = -1;   /* one ck_assert per tensor: Check logs every assertion */
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (!(got[i] == want[i] || (isnan(got[i]) && isnan(want[i])))) bad = i;
    ck_assert_msg(bad < 0, "element %lld: got %g want %g", (long long)bad, bad < 0 ? 0 : got[bad],
                  bad < 0 ? 0 : want[bad]);
    free(got);
}

/* Three inputs in assorted layouts, sized differently along `dim`. */
static void make_cat_inputs(em_dtype dt, int dim, em_tensor **ts, uint64_t seed)
{
    int64_t base[3] = {3, 4, 5};
    int64_t s0[3], s1[3], s2[3];
    memcpy(s0, base, sizeof base);
    memcpy(s1, base, sizeof base);
    memcpy(s2, base, sizeof base);
    s0[dim] = 2;
    s1[dim] = 1;
    s2[dim] = 3;
    ts[0] = tu_rand_tensor(3, s0, dt, -5, 5, seed, NULL);
    /* ts[1]: a transposed view of the right shape */
    int64_t t1[3] = {s1[2], s1[1], s1[0]};
    ts[1] = em_transpose(tu_rand_tensor(3, t1, dt, -5, 5, seed + 1, NULL), 0, 2);
    /* ts[2]: a narrowed view (non-contiguous along dim 2) */
    int64_t t2[3] = {s2[0], s2[1], s2[2] + 3};
    ts[2] = em_narrow(tu_rand_tensor(3, t2, dt, -5, 5, seed + 2, NULL), 2, 1, s2[2]);
}

static void check_cat(int n, em_tensor **ts, int dim)
{
    int nd = ts[0]->ndim;
    int d = dim < 0 ? dim + nd : dim;
    em_tensor *out = em_cat(n, ts, dim);
    ck_assert_ptr_nonnull(out);
    ck_assert_int_eq(out->dtype, ts[0]->dtype);
    int64_t shape[EM_MAX_DIMS];
    memcpy(shape, ts[0]->shape, sizeof(int64_t) * (size_t)nd);
    shape[d] = 0;
    for (int i = 0; i < n; i++) shape[d] += ts[i]->shape[d];
    assert_shape(out, nd, shape);
    int64_t total = em_numel(out);
    double *want = malloc(sizeof(double) * (size_t)(total + 1));
    double *src[8] = {0};
    for (int i = 0; i < n; i++) src[i] = tu_to_doubles(ts[i]);
    for (int64_t e = 0; e < total; e++) {
        int64_t pos[EM_MAX_DIMS] = {0};
        unravel(e, nd, shape, pos);
        int i = 0;
        while (pos[d] >= ts[i]->shape[d]) pos[d] -= ts[i++]->shape[d];
        want[e] = src[i][ravel(pos, nd, ts[i]->shape)];
    }
    assert_values(out, want, total);
    for (int i = 0; i < n; i++) free(src[i]);
    free(want);
}

START_TEST(test_cat_every_dim_and_dtype)
{
    int64_t before = tu_live_bytes();
    EM_SCOPE {
        for (int di = 0; di < N_DTYPES; di++)
            for (int dim = -3; dim < 3; dim++) {
                em_tensor *ts[3];
                make_cat_inputs(all_dtypes[di], dim < 0 ? dim + 3 : dim, ts, 100 + (uint64_t)di * 10 + (uint64_t)dim);
                check_cat(3, ts, dim);
                check_cat(1, ts + 2, dim);
            }
        /* an expanded (stride 0) input */
        em_tensor *row = tu_rand_tensor(EM_SHAPE(1, 6), EM_F32, -1, 1, 7, NULL);
        em_tensor *ts[2] = {em_expand(row, EM_SHAPE(4, 6)), tu_rand_tensor(EM_SHAPE(2, 6), EM_F32, -1, 1, 8, NULL)};
        check_cat(2, ts, 0);
        check_cat(2, ts, -2);
        /* big enough for the threaded copy */
        em_tensor *big[2] = {tu_rand_tensor(EM_SHAPE(300, 200), EM_F32, -1, 1, 9, NULL),
                             em_transpose(tu_rand_tensor(EM_SHAPE(100, 300), EM_F32, -1, 1, 10, NULL), 0, 1)};
        check_cat(2, big, 1);
        /* transposed inputs of every dtype (the iterator's tiled copy), along both dims */
        for (int di = 0; di < N_DTYPES; di++) {
            em_tensor *tr[2] = {tu_rand_tensor(EM_SHAPE(40, 70), all_dtypes[di], -5, 5, 11, NULL),
                                em_transpose(tu_rand_tensor(EM_SHAPE(70, 40), all_dtypes[di], -5, 5, 12, NULL), 0, 1)};
            check_cat(2, tr, 0);
            check_cat(2, tr, 1);
        }
    }
    ck_assert_int_eq(tu_live_bytes(), before);
}
END_TEST

START_TEST(test_cat_empty_inputs)
{
    EM_SCOPE {
        em_tensor *a = tu_rand_tensor(EM_SHAPE(2, 3), EM_F32, -1, 1, 1, NULL);
        em_tensor *e = em_zeros(EM_SHAPE(2, 0), EM_F32, EM_CPU);
        em_tensor *b = tu_rand_tensor(EM_SHAPE(2, 4), EM_F32, -1, 1, 2, NULL);
        em_tensor *ts[3] = {e, a, b};
        check_cat(3, ts, 1);
        em_tensor *ts2[3] = {a, e, b};
        check_cat(3, ts2, -1);
        /* torch's legacy rule: a 1-d [0] joins anything */
        em_tensor *legacy = em_zeros(EM_SHAPE(0), EM_F32, EM_CPU);
        em_tensor *ts3[3] = {legacy, a, legacy};
        em_tensor *r = em_cat(3, ts3, 0);
        assert_shape(r, 2, (int64_t[]){2, 3});
        double *av = tu_to_doubles(a);
        assert_values(r, av, 6);
        free(av);
        /* all empty */
        em_tensor *ts4[2] = {e, e};
        em_tensor *r4 = em_cat(2, ts4, 0);
        assert_shape(r4, 2, (int64_t[]){4, 0});
        em_tensor *ts5[2] = {legacy, legacy};
        assert_shape(em_cat(2, ts5, 0), 1, (int64_t[]){0});
    }
}
END_TEST

START_TEST(test_stack_every_dim)
{
    EM_SCOPE {
        for (int di = 0; di < N_DTYPES; di++)
            for (int dim = -4; dim < 4; dim++) {
                int d = dim < 0 ? dim + 4 : dim;
                em_tensor *ts[3] = {
                    tu_rand_tensor(EM_SHAPE(2, 3, 4), all_dtypes[di], -5, 5, 200 + (uint64_t)di, NULL),
                    em_transpose(tu_rand_tensor(EM_SHAPE(4, 3, 2), all_dtypes[di], -5, 5, 300 + (uint64_t)di, NULL), 0, 2),
                    em_narrow(tu_rand_tensor(EM_SHAPE(2, 3, 6), all_dtypes[di], -5, 5, 400 + (uint64_t)di, NULL), 2, 2, 4),
                };
                em_tensor *out = em_stack(3, ts, dim);
                int64_t shape[4], k = 0;
                for (int j = 0; j < 4; j++) shape[j] = j == d ? 3 : ts[0]->shape[k++];
                assert_shape(out, 4, shape);
                double *src[3] = {tu_to_doubles(ts[0]), tu_to_doubles(ts[1]), tu_to_doubles(ts[2])};
                double want[72];
                for (int64_t e = 0; e < 72; e++) {
                    int64_t pos[4], sp[3];
                    unravel(e, 4, shape, pos);
                    k = 0;
                    for (int j = 0; j < 4; j++)
                        if (j != d) sp[k++] = pos[j];
                    want[e] = src[pos[d]][ravel(sp, 3, ts[0]->shape)];
                }
                assert_values(out, want, 72);
                for (int i = 0; i < 3; i++) free(src[i]);
            }
        /* stacking 0-d tensors gives a 1-d tensor */
        em_tensor *sc[2] = {em_scalar(1.5, EM_F32, EM_CPU), em_scalar(-2, EM_F32, EM_CPU)};
        em_tensor *v = em_stack(2, sc, 0);
        assert_shape(v, 1, (int64_t[]){2});
        assert_values(v, (double[]){1.5, -2}, 2);
    }
}
END_TEST

/* out against x gathered along dim: each position p of out takes x at p with
 * dim replaced by the index at p[dim] (select: index_select's 1-d index) or
 * at p (gather: the index has out's shape). Same dtype, exact values. */
static void check_gathered(em_tensor *out, em_tensor *x, int dim, em_tensor *index, bool select)
{
    int nd = x->ndim, d = dim < 0 ? dim + nd : dim;
    ck_assert_int_eq(out->dtype, x->dtype);
    double *xv = tu_to_doubles(x), *iv = tu_to_doubles(index);
    int64_t n = em_numel(out);
    double *want = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t e = 0; e < n; e++) {
        int64_t pos[EM_MAX_DIMS];
        unravel(e, nd, out->shape, pos);
        pos[d] = (int64_t)iv[select ? pos[d] : e];
        want[e] = xv[ravel(pos, nd, x->shape)];
    }
    assert_values(out, want, n);
    free(xv), free(iv), free(want);
}

/* index_select of x (any view) along dim with index (any 1-d view). */
static void check_index_select(em_tensor *x, int dim, em_tensor *index)
{
    em_tensor *out = em_index_select(x, dim, index);
    int64_t shape[EM_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[dim < 0 ? dim + x->ndim : dim] = em_numel(index);
    assert_shape(out, x->ndim, shape);
    check_gathered(out, x, dim, index, true);
}

START_TEST(test_index_select)
{
    EM_SCOPE {
        for (int di = 0; di < N_DTYPES; di++) {
            em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 5, 6), all_dtypes[di], -9, 9, 500 + (uint64_t)di, NULL);
            em_tensor *xt = em_transpose(x, 0, 2);   /* [6,5,4] */
            for (int dim = -3; dim < 3; dim++) {
                int d = dim < 0 ? dim + 3 : dim;
                em_tensor *i64 = tu_rand_tensor(EM_SHAPE(7), EM_I64, 0, (double)x->shape[d], 600 + (uint64_t)d, NULL);
                check_index_select(x, dim, i64);
                em_tensor *i32 = tu_rand_tensor(EM_SHAPE(3), EM_I32, 0, (double)xt->shape[d], 700 + (uint64_t)d, NULL);
                check_index_select(xt, dim, i32);
            }
        }
        em_tensor *x = tu_rand_tensor(EM_SHAPE(8, 3), EM_F32, -1, 1, 1, NULL);
        /* a strided index: column 1 of an [n,2] tensor */
        int64_t pairs[10] = {9, 7, 9, 0, 9, 7, 9, 7, 9, 3};
        em_tensor *idx2 = em_select(em_from_data(pairs, 2, (int64_t[]){5, 2}, EM_I64), 1, 1);
        check_index_select(x, 0, idx2);
        /* empty index, 0-d index, empty input */
        em_tensor *none = em_zeros(EM_SHAPE(0), EM_I64, EM_CPU);
        assert_shape(em_index_select(x, 1, none), 2, (int64_t[]){8, 0});
        em_tensor *zero_d = em_scalar(2, EM_I64, EM_CPU);
        check_index_select(x, 1, zero_d);
        em_tensor *ex = em_zeros(EM_SHAPE(0, 3), EM_F32, EM_CPU);
        assert_shape(em_index_select(ex, 1, idx2 = em_from_data((int64_t[]){2, 0}, 1, (int64_t[]){2}, EM_I64)), 2,
                     (int64_t[]){0, 2});
        /* large: threaded, rows of an embedding-like table */
        em_tensor *tab = tu_rand_tensor(EM_SHAPE(1000, 64), EM_F32, -1, 1, 2, NULL);
        em_tensor *ids = tu_rand_tensor(EM_SHAPE(3000), EM_I64, 0, 1000, 3, NULL);
        check_index_select(tab, 0, ids);
        check_index_select(tab, 1, tu_rand_tensor(EM_SHAPE(2000), EM_I32, 0, 64, 4, NULL));
    }
}
END_TEST

/* gather / scatter_add references over the index's positions. */
static void check_gather(em_tensor *x, int dim, em_tensor *index)
{
    em_tensor *out = em_gather(x, dim, index);
    assert_shape(out, x->ndim, index->shape);
    check_gathered(out, x, dim, index, false);
}

static void check_scatter_add(em_tensor *self, int dim, em_tensor *index, em_tensor *src, double rtol)
{
    int nd = self->ndim, d = dim < 0 ? dim + nd : dim;
    double *before = tu_to_doubles(self);
    em_tensor *out = em_scatter_add(self, dim, index, src);
    assert_shape(out, nd, self->shape);
    ck_assert_int_eq(out->dtype, self->dtype);
    double *want = tu_to_doubles(self), *iv = tu_to_doubles(index), *sv = tu_to_doubles(src);
    int64_t n = em_numel(index);
    for (int64_t e = 0; e < n; e++) {
        int64_t pos[EM_MAX_DIMS];
        unravel(e, nd, index->shape, pos);
        double v = sv[ravel(pos, nd, src->shape)];
        pos[d] = (int64_t)iv[e];
        want[ravel(pos, nd, self->shape)] += v;
    }
    double *got = tu_to_doubles(out);
    int64_t m = em_numel(out);
    tu_assert_close(got, want, m, rtol, rtol);
    /* self is untouched */
    double *after = tu_to_doubles(self);
    int64_t changed = 0;
    for (int64_t i = 0; i < m; i++) changed += !(after[i] == before[i] || (isnan(after[i]) && isnan(before[i])));
    ck_assert_int_eq(changed, 0);
    free(before);
    free(after);
    free(want);
    free(iv);
    free(sv);
    free(got);
}

START_TEST(test_gather)
{
    EM_SCOPE {
        for (int di = 0; di < N_DTYPES; di++) {
            em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 5, 6), all_dtypes[di], -9, 9, 800 + (uint64_t)di, NULL);
            for (int dim = -3; dim < 3; dim++) {
                int d = dim < 0 ? dim + 3 : dim;
                /* index smaller than x off dim, larger along dim */
                int64_t ishape[3] = {3, 4, 5};
                ishape[d] = 9;
                em_tensor *idx = tu_rand_tensor(3, ishape, di % 2 ? EM_I32 : EM_I64, 0, (double)x->shape[d],
                                                900 + (uint64_t)d, NULL);
                check_gather(x, dim, idx);
                /* transposed input and transposed index */
                em_tensor *xt = em_transpose(x, 0, 2);   /* [6,5,4] */
                int64_t jshape[3] = {2, 5, 3};
                jshape[d] = 4;
                int64_t tshape[3] = {jshape[2], jshape[1], jshape[0]};
                em_tensor *it = em_transpose(tu_rand_tensor(3, tshape, EM_I64, 0, (double)xt->shape[d],
                                                            950 + (uint64_t)d, NULL), 0, 2);
                check_gather(xt, dim, it);
            }
        }
        /* empty index */
        em_tensor *x = tu_rand_tensor(EM_SHAPE(3, 4), EM_F32, -1, 1, 1, NULL);
        assert_shape(em_gather(x, 1, em_zeros(EM_SHAPE(3, 0), EM_I64, EM_CPU)), 2, (int64_t[]){3, 0});
        /* large: threaded */
        em_tensor *big = tu_rand_tensor(EM_SHAPE(400, 300), EM_F32, -1, 1, 2, NULL);
        check_gather(big, 1, tu_rand_tensor(EM_SHAPE(400, 250), EM_I64, 0, 300, 3, NULL));
        check_gather(big, 0, tu_rand_tensor(EM_SHAPE(500, 300), EM_I64, 0, 400, 4, NULL));
    }
}
END_TEST

/* f16/bf16 get small integer values, so every partial sum is exact in the
 * dtype and the f64 reference must match bit for bit. */
static em_tensor *scatter_vals(int nd, const int64_t *shape, em_dtype dt, uint64_t seed)
{
    if (dt == EM_F16 || dt == EM_BF16) return em_to_dtype(tu_rand_tensor(nd, shape, EM_I32, -4, 5, seed, NULL), dt);
    return tu_rand_tensor(nd, shape, dt, -4, 4, seed, NULL);
}

START_TEST(test_scatter_add)
{
    static const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32};
    static const double tol[] = {1e-6, 1e-12, 0, 0, 0, 0};
    EM_SCOPE {
        for (int di = 0; di < 6; di++) {
            em_dtype dt = dts[di];
            for (int dim = -3; dim < 3; dim++) {
                int d = dim < 0 ? dim + 3 : dim;
                em_tensor *self = scatter_vals(EM_SHAPE(4, 5, 6), dt, 1000 + (uint64_t)di);
                /* index: smaller than self off dim, duplicates along dim */
                int64_t ishape[3] = {3, 4, 5};
                ishape[d] = 7;
                em_tensor *idx = tu_rand_tensor(3, ishape, di % 2 ? EM_I32 : EM_I64, 0, (double)self->shape[d],
                                                1100 + (uint64_t)d, NULL);
                /* src larger than index in every dim */
                int64_t sshape[3] = {ishape[0] + 1, ishape[1], ishape[2] + 2};
                em_tensor *src = scatter_vals(3, sshape, dt, 1200 + (uint64_t)d);
                check_scatter_add(self, dim, idx, src, tol[di]);
                /* non-contiguous self, index and src */
                em_tensor *st = em_transpose(scatter_vals(EM_SHAPE(6, 5, 4), dt, 1300), 0, 2);
                em_tensor *srt = em_narrow(src, 2, 1, ishape[2]);
                int64_t rshape[3] = {ishape[2], ishape[1], ishape[0]};
                em_tensor *it = em_transpose(tu_rand_tensor(3, rshape, EM_I64, 0, (double)self->shape[d],
                                                            1400 + (uint64_t)d, NULL), 0, 2);
                check_scatter_add(st, dim, it, srt, tol[di]);
            }
        }
        /* every index hits the same slot: the additions happen in a fixed order */
        em_tensor *self = em_zeros(EM_SHAPE(3, 40), EM_F32, EM_CPU);
        em_tensor *idx = em_zeros(EM_SHAPE(2000, 40), EM_I64, EM_CPU);
        em_tensor *src = tu_rand_tensor(EM_SHAPE(2000, 40), EM_F32, -1, 1, 5, NULL);
        check_scatter_add(self, 0, idx, src, 1e-4);
        int nt = em_num_threads();
        em_set_num_threads(1);
        em_tensor *r1 = em_scatter_add(self, 0, idx, src);
        em_set_num_threads(nt > 1 ? nt : 2);
        em_tensor *r2 = em_scatter_add(self, 0, idx, src);
        em_set_num_threads(nt);
        ck_assert(memcmp(em_data_ptr(r1), em_data_ptr(r2), sizeof(float) * 120) == 0);
        /* large random scatter (threaded path) */
        em_tensor *big = tu_rand_tensor(EM_SHAPE(300, 400), EM_F64, -1, 1, 6, NULL);
        check_scatter_add(big, 1, tu_rand_tensor(EM_SHAPE(300, 300), EM_I64, 0, 400, 7, NULL),
                          tu_rand_tensor(EM_SHAPE(300, 300), EM_F64, -1, 1, 8, NULL), 1e-12);
        /* index_add's shape (index_select's backward): one index per row, broadcast along the row, into and
         * from views with offsets; the row kernel gives the element kernel's bits (a materialized index takes
         * that one) */
        for (int di = 0; di < 4; di++) {
            em_dtype dt = dts[di];
            for (int big_rows = 0; big_rows < 2; big_rows++) {
                int64_t R1 = big_rows ? 30 : 5, R2 = big_rows ? 40 : 6;   /* 1200 columns: several tasks */
                em_tensor *base = tu_rand_tensor(EM_SHAPE(9, R1, R2), dt, -3, 3, 1500 + (uint64_t)di, NULL);
                em_tensor *self_v = em_narrow(base, 0, 2, 6);   /* offset 2 rows */
                em_tensor *srcb = tu_rand_tensor(EM_SHAPE(12, R1, R2), dt, -3, 3, 1600 + (uint64_t)di, NULL);
                em_tensor *src_v = em_narrow(srcb, 0, 1, 10);
                em_tensor *i1 = em_reshape(tu_rand_tensor(EM_SHAPE(10), EM_I64, 0, 6, 1700, NULL), 3,
                                           (int64_t[]){10, 1, 1});
                em_tensor *ib = em_expand(i1, 3, (int64_t[]){10, R1, R2});
                em_tensor *fast = em_scatter_add(self_v, 0, ib, src_v);
                em_tensor *slow = em_scatter_add(self_v, 0, em_contiguous(ib), src_v);
                ck_assert_msg(memcmp(em_data_ptr(em_contiguous(fast)), em_data_ptr(em_contiguous(slow)),
                                     (size_t)em_numel(fast) * em_dtype_size(dt)) == 0,
                              "%s: row scatter_add differs from the element kernel", em_dtype_name(dt));
                em_tensor *sv = scatter_vals(EM_SHAPE(10, R1, R2), dt, 1800);
                check_scatter_add(scatter_vals(EM_SHAPE(6, R1, R2), dt, 1900), 0, ib, sv, tol[di]);
            }
        }
        /* empty index: a plain copy */
        em_tensor *s2 = tu_rand_tensor(EM_SHAPE(2, 3), EM_F32, -1, 1, 9, NULL);
        check_scatter_add(s2, 0, em_zeros(EM_SHAPE(0, 3), EM_I64, EM_CPU), em_zeros(EM_SHAPE(1, 3), EM_F32, EM_CPU), 0);
    }
}
END_TEST

/* ---- misuse ------------------------------------------------------------------ */

static em_tensor *zeros(int ndim, const int64_t *shape, em_dtype dt) { return em_zeros(ndim, shape, dt, EM_CPU); }
#define Z(dt, ...) zeros(EM_SHAPE(__VA_ARGS__), EM_##dt)

TU_MISUSE(misuse_cat_shape_mismatch, "sizes must match except in dim 0",
          em_tensor *ts[2] = {Z(F32, 2, 3), Z(F32, 2, 4)}; em_cat(2, ts, 0);)
TU_MISUSE(misuse_cat_ndim_mismatch, "same number of dims",
          em_tensor *ts[2] = {Z(F32, 2, 3), Z(F32, 2, 3, 1)}; em_cat(2, ts, 0);)
TU_MISUSE(misuse_cat_dtype_mismatch, "share a dtype",
          em_tensor *ts[2] = {Z(F32, 2, 3), Z(F64, 2, 3)}; em_cat(2, ts, 0);)
TU_MISUSE(misuse_cat_bad_dim, "dim 2 is out of range", em_tensor *ts[1] = {Z(F32, 2, 3)}; em_cat(1, ts, 2);)
TU_MISUSE(misuse_cat_no_tensors, "needs at least one tensor", em_cat(0, NULL, 0);)
TU_MISUSE(misuse_stack_unequal, "equal shapes", em_tensor *ts[2] = {Z(F32, 2, 3), Z(F32, 3, 2)}; em_stack(2, ts, 0);)
TU_MISUSE(misuse_stack_bad_dim, "dim -4 is out of range", em_tensor *ts[1] = {Z(F32, 2, 3)}; em_stack(1, ts, -4);)
TU_MISUSE(misuse_index_select_out_of_range, "index 5 is out of range for dim 1 of size 5",
          em_tensor *x = Z(F32, 2, 5);
          em_tensor *i = em_from_data((int64_t[]){0, 4, 5, 1}, 1, (int64_t[]){4}, EM_I64);
          em_index_select(x, 1, i);)
TU_MISUSE(misuse_index_select_negative, "index -1 is out of range for dim 0 of size 2",
          em_tensor *x = Z(F32, 2, 5); em_tensor *i = em_from_data((int32_t[]){1, -1}, 1, (int64_t[]){2}, EM_I32);
          em_index_select(x, 0, i);)
TU_MISUSE(misuse_index_select_float_index, "index must be i64 or i32",
          em_tensor *x = Z(F32, 2, 5); em_index_select(x, 0, Z(F32, 2));)
TU_MISUSE(misuse_index_select_2d_index, "index must be 1-d",
          em_tensor *x = Z(F32, 2, 5); em_index_select(x, 0, Z(I64, 2, 1));)
TU_MISUSE(misuse_gather_out_of_range, "index 3 is out of range for dim 0 of size 3",
          em_tensor *x = Z(F32, 3, 2);
          em_tensor *i = em_from_data((int64_t[]){0, 3}, 2, (int64_t[]){1, 2}, EM_I64); em_gather(x, 0, i);)
TU_MISUSE(misuse_gather_ndim, "as many dims as the input", em_tensor *x = Z(F32, 3, 2); em_gather(x, 0, Z(I64, 3));)
TU_MISUSE(misuse_gather_index_too_big, "larger than input",
          em_tensor *x = Z(F32, 3, 2); em_gather(x, 0, Z(I64, 1, 3));)
TU_MISUSE(misuse_scatter_add_out_of_range, "index 4 is out of range for dim 1 of size 4",
          em_tensor *x = Z(F32, 2, 4); em_tensor *i = em_from_data((int64_t[]){4}, 2, (int64_t[]){1, 1}, EM_I64);
          em_scatter_add(x, 1, i, Z(F32, 1, 1));)
TU_MISUSE(misuse_scatter_add_src_too_small, "larger than src",
          em_tensor *x = Z(F32, 2, 4); em_scatter_add(x, 0, Z(I64, 2, 2), Z(F32, 1, 2));)
TU_MISUSE(misuse_scatter_add_dtype, "src must have the input's dtype",
          em_tensor *x = Z(F32, 2, 4); em_scatter_add(x, 0, Z(I64, 1, 1), Z(F64, 1, 1));)

static Suite *make_suite(void)
{
    Suite *s = suite_create("index");
    tu_add_tests(tu_case(s, "forward", 0), test_cat_every_dim_and_dtype, test_cat_empty_inputs,
                 test_stack_every_dim, test_index_select, test_gather, test_scatter_add);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_cat_shape_mismatch, misuse_cat_ndim_mismatch,
                        misuse_cat_dtype_mismatch, misuse_cat_bad_dim, misuse_cat_no_tensors,
                        misuse_stack_unequal, misuse_stack_bad_dim, misuse_index_select_out_of_range,
                        misuse_index_select_negative, misuse_index_select_float_index,
                        misuse_index_select_2d_index, misuse_gather_out_of_range, misuse_gather_ndim,
                        misuse_gather_index_too_big, misuse_scatter_add_out_of_range,
                        misuse_scatter_add_src_too_small, misuse_scatter_add_dtype);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
