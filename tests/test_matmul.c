/* ember tests — em_matmul (tensor/op_matmul.c, tensor/cpu/k_matmul.c, gemm.c).
 *
 * The reference is a naive f64 triple loop over the operands' logical values
 * (read element by element with em_get), with torch.matmul's promotion and
 * batch-broadcast rules written out independently here. Every case also
 * checks the result's shape and that no bytes stay live after the scope.
 *
 * Tolerance: per element |got - ref| <= tol_acc * sum_k |a_ik b_kj| +
 * eps_out * |ref|, where tol_acc bounds the accumulation error of the compute
 * type (f32: 1e-5, which covers K*2^-24 for the K <= 160 used here; f64: 1e-12)
 * and eps_out is the rounding of the output dtype (f16 2^-11, bf16 2^-8).
 */
#include "check_util.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference ---------------------------------------------------------- */

typedef struct ref_out {
    int ndim;
    int64_t shape[EM_MAX_DIMS];
    int64_t n;
    double *val, *absdot;   /* value and sum_k |a b| per output element */
} ref_out;

/* Row-major flat index of idx within shape (ndim dims). */
static int64_t flat(int ndim, const int64_t *shape, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < ndim; d++) f = f * shape[d] + idx[d];
    return f;
}

static ref_out reference(em_tensor *a, em_tensor *b)
{
    double *A = tu_to_doubles(a), *B = tu_to_doubles(b);
    /* promote 1-d operands: a [K] -> [1,K], b [K] -> [K,1] */
    int na = a->ndim == 1 ? 2 : a->ndim, nb = b->ndim == 1 ? 2 : b->ndim;
    int64_t sa[EM_MAX_DIMS], sb[EM_MAX_DIMS];
    if (a->ndim == 1) { sa[0] = 1; sa[1] = a->shape[0]; } else memcpy(sa, a->shape, sizeof(int64_t) * (size_t)na);
    if (b->ndim == 1) { sb[0] = b->shape[0]; sb[1] = 1; } else memcpy(sb, b->shape, sizeof(int64_t) * (size_t)nb);
    int64_t M = sa[na - 2], K = sa[na - 1], N = sb[nb - 1];
    /* batch dims aligned from the right */
    int bna = na - 2, bnb = nb - 2, bno = bna > bnb ? bna : bnb;
    int64_t bo[EM_MAX_DIMS];
    for (int d = 0; d < bno; d++) {
        int da = d - (bno - bna), db = d - (bno - bnb);
        int64_t x = da >= 0 ? sa[da] : 1, y = db >= 0 ? sb[db] : 1;
        ck_assert_msg(x == y || x == 1 || y == 1, "reference: batch dims do not broadcast");
        bo[d] = x == 1 ? y : x;
    }
    int64_t nbatch = 1;
    for (int d = 0; d < bno; d++) nbatch *= bo[d];
    ref_out r = {0};
    r.n = nbatch * M * N;
    r.val = calloc((size_t)(r.n ? r.n : 1), sizeof(double));
    r.absdot = calloc((size_t)(r.n ? r.n : 1), sizeof(double));
    for (int64_t bi = 0; bi < nbatch; bi++) {
        int64_t idx[EM_MAX_DIMS], ia[EM_MAX_DIMS] = {0}, ib[EM_MAX_DIMS] = {0}, rem = bi;
        for (int d = bno - 1; d >= 0; d--) { idx[d] = rem % bo[d]; rem /= bo[d]; }
        for (int d = 0; d < bna; d++) ia[d] = sa[d] == 1 ? 0 : idx[d + bno - bna];
        for (int d = 0; d < bnb; d++) ib[d] = sb[d] == 1 ? 0 : idx[d + bno - bnb];
        int64_t abase = flat(bna, sa, ia) * M * K, bbase = flat(bnb, sb, ib) * K * N;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, s_abs = 0;
                for (int64_t p = 0; p < K; p++) {
                    double x = A[abase + i * K + p] * B[bbase + p * N + j];
                    s += x;
                    s_abs += fabs(x);
                }
                r.val[(bi * M + i) * N + j] = s;
                r.absdot[(bi * M + i) * N + j] = s_abs;
            }
    }
    /* result shape: batch, then M unless a was 1-d, then N unless b was 1-d */
    for (int d = 0; d < bno; d++) r.shape[r.ndim++] = bo[d];
    if (a->ndim != 1) r.shape[r.ndim++] = M;
    if (b->ndim != 1) r.shape[r.ndim++] = N;
    free(A);
    free(B);
    return r;
}

static void check_matmul(em_tensor *a, em_tensor *b, const char *what)
{
    ref_out r = reference(a, b);
    em_tensor *c = em_matmul(a, b);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->dtype, a->dtype);
    ck_assert_msg(c->ndim == r.ndim, "%s: ndim %d, want %d", what, c->ndim, r.ndim);
    for (int d = 0; d < r.ndim; d++)
        ck_assert_msg(c->shape[d] == r.shape[d], "%s: dim %d is %lld, want %lld", what, d,
                      (long long)c->shape[d], (long long)r.shape[d]);
    ck_assert_int_eq(em_numel(c), r.n);
    double tol_acc = a->dtype == EM_F64 ? 1e-12 : 1e-5;
    double eps_out = a->dtype == EM_F16 ? ldexp(1, -11) : a->dtype == EM_BF16 ? ldexp(1, -8) : 0;
    double *got = tu_to_doubles(c);
    for (int64_t e = 0; e < r.n; e++) {
        double bound = tol_acc * r.absdot[e] + eps_out * fabs(r.val[e]) + 1e-300;
        ck_assert_msg(fabs(got[e] - r.val[e]) <= bound, "%s (%s): element %lld is %.17g, want %.17g (bound %g)",
                      what, em_dtype_name(a->dtype), (long long)e, got[e], r.val[e], bound);
    }
    free(got);
    free(r.val);
    free(r.absdot);
}

static const em_dtype float_dtypes[] = {EM_F32, EM_F64, EM_F16, EM_BF16};
#define NDT (int)(sizeof float_dtypes / sizeof *float_dtypes)

static em_tensor *rnd(em_dtype dt, uint64_t seed, int ndim, const int64_t *shape)
{
    return tu_rand_tensor(ndim, shape, dt, -1, 1, seed, NULL);
}

/* Runs body-generated cases for every float dtype inside a scope, and checks
 * that the scope gives every byte back. */
#define FOR_DTYPES(dt) for (int di_ = 0; di_ < NDT; di_++) for (em_dtype dt = float_dtypes[di_], once_ = 1; once_; once_ = 0)

static void leak_check_begin(int64_t *live) { *live = tu_live_bytes(); em_scope_begin(); }
static void leak_check_end(int64_t live)
{
    em_scope_end();
    ck_assert_int_eq(tu_live_bytes(), live);
}

/* ---- cases ------------------------------------------------------------------ */

START_TEST(test_2d)
{
    static const int64_t mkn[][3] = {{1, 1, 1}, {3, 5, 4}, {7, 1, 9}, {1, 13, 6}, {33, 17, 64}, {65, 70, 90},
                                     {4, 768, 2}};
    int64_t live;
    FOR_DTYPES(dt) {
        for (size_t i = 0; i < sizeof mkn / sizeof *mkn; i++) {
            leak_check_begin(&live);
            em_tensor *a = rnd(dt, 10 + i, EM_SHAPE(mkn[i][0], mkn[i][1]));
            em_tensor *b = rnd(dt, 100 + i, EM_SHAPE(mkn[i][1], mkn[i][2]));
            check_matmul(a, b, "2-d");
            leak_check_end(live);
        }
    }
}
END_TEST

START_TEST(test_1d)
{
    int64_t live;
    FOR_DTYPES(dt) {
        leak_check_begin(&live);
        em_tensor *v5 = rnd(dt, 1, EM_SHAPE(5)), *w5 = rnd(dt, 2, EM_SHAPE(5));
        check_matmul(v5, w5, "dot");
        em_tensor *d = em_matmul(v5, w5);
        ck_assert_int_eq(d->ndim, 0);
        check_matmul(v5, rnd(dt, 3, EM_SHAPE(5, 7)), "vec x mat");
        check_matmul(rnd(dt, 4, EM_SHAPE(6, 5)), w5, "mat x vec");
        check_matmul(v5, rnd(dt, 5, EM_SHAPE(3, 5, 4)), "vec x batched");
        check_matmul(rnd(dt, 6, EM_SHAPE(2, 3, 4, 5)), w5, "batched x vec");
        check_matmul(rnd(dt, 7, EM_SHAPE(1)), rnd(dt, 8, EM_SHAPE(1)), "dot of one");
        check_matmul(rnd(dt, 9, EM_SHAPE(200)), rnd(dt, 10, EM_SHAPE(200, 300)), "long vec x mat");
        leak_check_end(live);
    }
}
END_TEST

START_TEST(test_batch_broadcast)
{
    static const struct { int na; int64_t sa[5]; int nb; int64_t sb[5]; } cs[] = {
        {3, {2, 3, 4}, 3, {2, 4, 5}},          /* plain batch */
        {3, {2, 3, 4}, 2, {4, 5}},             /* shared B: folded into one GEMM */
        {3, {37, 1, 7}, 2, {7, 3}},            /* M = 1, folded */
        {2, {4, 5}, 3, {2, 5, 6}},             /* shared A */
        {5, {2, 1, 3, 4, 5}, 3, {3, 5, 6}},    /* broadcast over several dims */
        {4, {5, 1, 6, 7}, 4, {1, 4, 7, 3}},    /* both broadcast */
        {3, {1, 3, 4}, 3, {2, 4, 5}},
        {3, {64, 8, 8}, 3, {64, 8, 8}},        /* many small: batch-parallel */
        {3, {24, 12, 8}, 4, {2, 1, 8, 12}},    /* batch-parallel with broadcast */
        {3, {3, 40, 50}, 3, {3, 50, 60}},
    };
    int64_t live;
    FOR_DTYPES(dt) {
        for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
            leak_check_begin(&live);
            check_matmul(rnd(dt, 20 + i, cs[i].na, cs[i].sa), rnd(dt, 40 + i, cs[i].nb, cs[i].sb), "batch");
            leak_check_end(live);
        }
    }
}
END_TEST

START_TEST(test_transposed_views)
{
    int64_t live;
    FOR_DTYPES(dt) {
        leak_check_begin(&live);
        /* A^T B, A B^T, A^T B^T at a size that reaches the BLAS libraries */
        em_tensor *at = em_transpose(rnd(dt, 1, EM_SHAPE(70, 90)), 0, 1);   /* [90,70] */
        em_tensor *bt = em_transpose(rnd(dt, 2, EM_SHAPE(50, 70)), 0, 1);   /* [70,50] */
        check_matmul(at, rnd(dt, 3, EM_SHAPE(70, 50)), "A^T B");
        check_matmul(rnd(dt, 4, EM_SHAPE(90, 70)), bt, "A B^T");
        check_matmul(at, bt, "A^T B^T");
        /* batched transposes, and a shared transposed weight (linear layer) */
        em_tensor *abt = em_transpose(rnd(dt, 5, EM_SHAPE(4, 9, 6)), 1, 2);   /* [4,6,9] */
        em_tensor *bbt = em_transpose(rnd(dt, 6, EM_SHAPE(4, 5, 9)), 1, 2);   /* [4,9,5] */
        check_matmul(abt, bbt, "batched A^T B^T");
        em_tensor *w = rnd(dt, 7, EM_SHAPE(12, 9));                            /* [out,in] */
        check_matmul(rnd(dt, 8, EM_SHAPE(3, 5, 9)), em_transpose(w, 0, 1), "x W^T");
        /* batch dim and matrix dim swapped: rows of A are not evenly strided */
        em_tensor *p = em_transpose(rnd(dt, 9, EM_SHAPE(6, 3, 9)), 0, 1);      /* [3,6,9] */
        check_matmul(p, em_transpose(w, 0, 1), "permuted x W^T");
        /* size-1 dims with odd strides */
        check_matmul(em_transpose(rnd(dt, 10, EM_SHAPE(9, 1)), 0, 1), rnd(dt, 11, EM_SHAPE(9, 4)), "[1,K] view");
        check_matmul(rnd(dt, 12, EM_SHAPE(3, 9)), em_transpose(rnd(dt, 13, EM_SHAPE(1, 9)), 0, 1), "[K,1] view");
        leak_check_end(live);
    }
}
END_TEST

START_TEST(test_noncontiguous)
{
    int64_t live;
    FOR_DTYPES(dt) {
        leak_check_begin(&live);
        /* narrowed columns: row stride larger than the row (a valid lda) */
        em_tensor *a = em_narrow(rnd(dt, 1, EM_SHAPE(20, 30)), 1, 3, 17);     /* [20,17] */
        em_tensor *b = em_narrow(rnd(dt, 2, EM_SHAPE(17, 40)), 1, 5, 11);     /* [17,11] */
        check_matmul(a, b, "narrowed");
        check_matmul(em_narrow(rnd(dt, 3, EM_SHAPE(4, 20, 30)), 2, 1, 17), em_narrow(b, 0, 0, 17), "batched narrowed");
        /* neither stride is 1: the front-end makes it contiguous */
        em_tensor *s = em_select(rnd(dt, 4, EM_SHAPE(8, 17, 3)), 2, 1);        /* [8,17] strides (51,3) */
        check_matmul(s, b, "strided both dims");
        em_tensor *sb = em_select(rnd(dt, 5, EM_SHAPE(17, 11, 2)), 2, 0);     /* [17,11] strides (22,2) */
        check_matmul(a, sb, "strided B");
        /* expanded (stride 0) matrix dims */
        em_tensor *col = rnd(dt, 6, EM_SHAPE(17, 1));
        check_matmul(a, em_expand(col, EM_SHAPE(17, 6)), "expanded B columns");
        em_tensor *row = rnd(dt, 7, EM_SHAPE(1, 17));
        check_matmul(em_expand(row, EM_SHAPE(5, 17)), b, "expanded A rows");
        /* batch dims that are narrowed and selected from bigger tensors */
        em_tensor *bb = em_narrow(rnd(dt, 8, EM_SHAPE(6, 17, 11)), 0, 1, 4);   /* [4,17,11] */
        check_matmul(em_narrow(rnd(dt, 9, EM_SHAPE(4, 3, 20)), 2, 2, 17), bb, "narrowed batch");
        leak_check_end(live);
    }
}
END_TEST

START_TEST(test_empty)
{
    int64_t live;
    FOR_DTYPES(dt) {
        leak_check_begin(&live);
        check_matmul(rnd(dt, 1, EM_SHAPE(0, 5)), rnd(dt, 2, EM_SHAPE(5, 3)), "M=0");
        check_matmul(rnd(dt, 1, EM_SHAPE(4, 5)), rnd(dt, 2, EM_SHAPE(5, 0)), "N=0");
        check_matmul(rnd(dt, 1, EM_SHAPE(0, 4, 5)), rnd(dt, 2, EM_SHAPE(5, 3)), "batch=0");
        check_matmul(rnd(dt, 1, EM_SHAPE(0)), rnd(dt, 2, EM_SHAPE(0)), "dot of empty");
        /* K = 0: zeros, even where the output memory held garbage before */
        em_tensor *z = em_matmul(rnd(dt, 3, EM_SHAPE(2, 4, 0)), rnd(dt, 4, EM_SHAPE(0, 6)));
        ck_assert_int_eq(z->ndim, 3);
        ck_assert_int_eq(em_numel(z), 48);
        double *v = tu_to_doubles(z);
        for (int e = 0; e < 48; e++) ck_assert(v[e] == 0.0 && !signbit(v[e]));
        free(v);
        check_matmul(rnd(dt, 3, EM_SHAPE(3, 0)), rnd(dt, 4, EM_SHAPE(0, 2)), "K=0");
        leak_check_end(live);
    }
}
END_TEST

/* Larger f32 products, through the library that the GEMM rule picks, at the
 * DistilBERT hidden size: all four transpose combinations; and a batch of
 * matrices big enough that GEMM threads inside each one. */
START_TEST(test_large_f32)
{
    int64_t live;
    leak_check_begin(&live);
    em_tensor *a = rnd(EM_F32, 1, EM_SHAPE(96, 768)), *at = em_transpose(rnd(EM_F32, 2, EM_SHAPE(768, 96)), 0, 1);
    em_tensor *b = rnd(EM_F32, 3, EM_SHAPE(768, 80)), *bt = em_transpose(rnd(EM_F32, 4, EM_SHAPE(80, 768)), 0, 1);
    check_matmul(a, b, "NN");
    check_matmul(at, b, "TN");
    check_matmul(a, bt, "NT");
    check_matmul(at, bt, "TT");
    check_matmul(rnd(EM_F32, 5, EM_SHAPE(2, 200, 192)), rnd(EM_F32, 6, EM_SHAPE(2, 192, 200)), "batch of large");
    leak_check_end(live);
}
END_TEST

/* ---- misuse ------------------------------------------------------------------- */

START_TEST(test_misuse_inner)
{
    tu_expect_misuse("em_matmul: cannot multiply [8,768] by [512,768]: inner dimensions 768 and 512 differ");
    em_matmul(em_zeros(EM_SHAPE(8, 768), EM_F32, EM_CPU), em_zeros(EM_SHAPE(512, 768), EM_F32, EM_CPU));
}
END_TEST

START_TEST(test_misuse_dot)
{
    tu_expect_misuse("em_matmul: cannot multiply [3] by [4]: inner dimensions 3 and 4 differ");
    em_matmul(em_zeros(EM_SHAPE(3), EM_F32, EM_CPU), em_zeros(EM_SHAPE(4), EM_F32, EM_CPU));
}
END_TEST

START_TEST(test_misuse_scalar)
{
    tu_expect_misuse("em_matmul: operands must be at least 1-d");
    em_matmul(em_scalar(2, EM_F32, EM_CPU), em_zeros(EM_SHAPE(3), EM_F32, EM_CPU));
}
END_TEST

START_TEST(test_misuse_dtype)
{
    tu_expect_misuse("em_matmul: operands differ in dtype: float32 [2,3] and float64 [3,4]");
    em_matmul(em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU), em_zeros(EM_SHAPE(3, 4), EM_F64, EM_CPU));
}
END_TEST

START_TEST(test_misuse_int)
{
    tu_expect_misuse("em_matmul: expected floating-point operands, got int64 [2,3]");
    em_matmul(em_zeros(EM_SHAPE(2, 3), EM_I64, EM_CPU), em_zeros(EM_SHAPE(3, 4), EM_I64, EM_CPU));
}
END_TEST

START_TEST(test_misuse_batch)
{
    tu_expect_misuse("em_matmul: cannot broadcast the batch dims of [2,3,4] and [5,4,6]");
    em_matmul(em_zeros(EM_SHAPE(2, 3, 4), EM_F32, EM_CPU), em_zeros(EM_SHAPE(5, 4, 6), EM_F32, EM_CPU));
}
END_TEST

START_TEST(test_null_propagates)
{
    EM_SCOPE { ck_assert_ptr_null(em_matmul(NULL, em_zeros(EM_SHAPE(3), EM_F32, EM_CPU))); }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("matmul");
    tu_add_tests(tu_case(s, "forward", 0), test_2d, test_1d, test_batch_broadcast, test_transposed_views,
                 test_noncontiguous, test_empty, test_large_f32, test_null_propagates);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), test_misuse_inner, test_misuse_dot, test_misuse_scalar,
                        test_misuse_dtype, test_misuse_int, test_misuse_batch);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
