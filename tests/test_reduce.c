/* ember tests — reductions (sum, mean, var, logsumexp, norm, max, min, argmax,
 * max_all, min_all) against plain f64 reference loops written here. */
#include "check_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { R_SUM, R_MEAN, R_VAR, R_LSE, R_NORM, R_MAX, R_MIN, R_ARGMAX, R_NOPS };
static const char *op_names[R_NOPS] = {"sum", "mean", "var", "logsumexp", "norm", "max", "min", "argmax"};

/* ---- the reference ---------------------------------------------------------- */

/* Reduces x (row-major values of `shape`) over the dims in `mask`, in the
 * keepdim layout. idx (may be NULL) gets the first index of the extreme along
 * the single reduced dim for R_MAX/R_MIN/R_ARGMAX. Returns the output count. */
static int64_t ref_reduce(int op, const double *x, int ndim, const int64_t *shape, int mask, double param,
                          double *out, int64_t *idx)
{
    int64_t n = 1, nout = 1, R = 1, ostride[EM_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        ostride[d] = nout;
        n *= shape[d];
        if (mask >> d & 1) R *= shape[d];
        else nout *= shape[d];
    }
    double *a = calloc((size_t)(nout ? nout : 1), sizeof(double));
    double *b = calloc((size_t)(nout ? nout : 1), sizeof(double));
    int64_t *ai = calloc((size_t)(nout ? nout : 1), sizeof(int64_t));
    char *seen = calloc((size_t)(nout ? nout : 1), 1);
    for (int pass = 0; pass < 2; pass++) {
        int64_t pos[EM_MAX_DIMS] = {0};
        for (int64_t e = 0; e < n; e++) {
            int64_t o = 0, r = 0;
            for (int d = 0; d < ndim; d++) {
                if (mask >> d & 1) r = r * shape[d] + pos[d];
                else o += pos[d] * ostride[d];
            }
            double v = x[e];
            bool is_ext = op == R_MAX || op == R_MIN || op == R_ARGMAX || op == R_LSE ||
                          (op == R_NORM && isinf(param));
            if (pass == 0 && is_ext) {
                double c = op == R_NORM ? fabs(v) : v;
                bool better;
                if (!seen[o]) better = true;
                else if (isnan(a[o])) better = false;
                else if (isnan(c)) better = true;
                else better = op == R_MIN ? c < a[o] : c > a[o];
                if (better) { a[o] = c; ai[o] = r; }
                seen[o] = 1;
            } else if (pass == 0) {
                a[o] += op == R_NORM ? pow(fabs(v), param) : v;
            } else if (op == R_VAR) {
                double m = a[o] / (double)R;
                b[o] += (v - m) * (v - m);
            } else if (op == R_LSE && isfinite(a[o])) {
                b[o] += exp(v - a[o]);
            }
            for (int d = ndim - 1; d >= 0; d--) {
                if (++pos[d] < shape[d]) break;
                pos[d] = 0;
            }
        }
    }
    for (int64_t o = 0; o < nout; o++) {
        double v;
        switch (op) {
        case R_SUM: v = a[o]; break;
        case R_MEAN: v = a[o] / (double)R; break;
        case R_VAR: v = b[o] / fmax(0.0, (double)R - param); break;
        case R_LSE: v = !seen[o] ? -INFINITY : isfinite(a[o]) ? a[o] + log(b[o]) : a[o]; break;
        case R_NORM: v = isinf(param) ? (seen[o] ? a[o] : 0.0) : pow(a[o], 1.0 / param); break;
        case R_ARGMAX: v = (double)ai[o]; break;
        default: v = a[o]; break;
        }
        out[o] = v;
        if (idx) idx[o] = ai[o];
    }
    free(a);
    free(b);
    free(ai);
    free(seen);
    return nout;
}

/* ---- helpers ------------------------------------------------------------------ */

static double rtol_of(em_dtype dt)
{
    switch (dt) {
    case EM_F64: return 1e-12;
    case EM_F32: return 2e-6;
    case EM_F16: return 1.5e-3;
    case EM_BF16: return 1e-2;
    default: return 0;
    }
}

/* Dims of mask, every other one written negatively, so both spellings run. */
static int mask_dims(int mask, int ndim, int *dims)
{
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (mask >> d & 1) {
            dims[n] = (n % 2) ? d - ndim : d;
            n++;
        }
    return n;
}

static em_tensor *call_op(int op, em_tensor *x, int ndims, const int *dims, double param, bool keepdim,
                          em_tensor **idx)
{
    switch (op) {
    case R_SUM: return em_sum(x, ndims, dims, keepdim);
    case R_MEAN: return em_mean(x, ndims, dims, keepdim);
    case R_VAR: return em_var(x, ndims, dims, param, keepdim);
    case R_LSE: return em_logsumexp(x, ndims, dims, keepdim);
    case R_NORM: return em_norm(x, param, ndims, dims, keepdim);
    case R_MAX: return em_max(x, dims[0], keepdim, idx);
    case R_MIN: return em_min(x, dims[0], keepdim, idx);
    default: return em_argmax(x, dims[0], keepdim);
    }
}

static em_dtype out_dtype(int op, em_dtype in)
{
    if (op == R_ARGMAX) return EM_I64;
    if (op == R_SUM && !em_dtype_is_float(in)) return EM_I64;
    return in;
}

/* Runs op on x (any view) over mask and compares values, shape, dtype and
 * (for max/min) indices with the reference. all_spelling: mask covering all
 * dims is passed as ndims=0. */
static void check_one(int op, em_tensor *x, int mask, double param, bool keepdim, bool all_spelling)
{
    double *xv = tu_to_doubles(x);
    int64_t nout = 1;
    for (int d = 0; d < x->ndim; d++)
        if (!(mask >> d & 1)) nout *= x->shape[d];
    double *ref = malloc(sizeof(double) * (size_t)(nout + 1));
    int64_t *ridx = malloc(sizeof(int64_t) * (size_t)(nout + 1));
    ref_reduce(op, xv, x->ndim, x->shape, mask, param, ref, ridx);

    int dims[EM_MAX_DIMS];
    int nd = mask_dims(mask, x->ndim, dims);
    if (all_spelling && mask == (1 << x->ndim) - 1) nd = 0;
    em_tensor *idx = NULL;
    /* ask for indices in some calls, pass NULL in the others */
    bool want_idx = (op == R_MAX || op == R_MIN) && (!keepdim || (mask & 1));
    em_tensor *r = call_op(op, x, nd, dims, param, keepdim, want_idx ? &idx : NULL);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->dtype, out_dtype(op, x->dtype));
    /* shape: keepdim keeps ndim with 1s, otherwise the reduced dims vanish */
    int k = 0;
    for (int d = 0; d < x->ndim; d++) {
        bool red = mask >> d & 1;
        if (keepdim) ck_assert_int_eq(r->shape[d], red ? 1 : x->shape[d]);
        else if (!red) {
            ck_assert_msg(r->shape[k] == x->shape[d], "%s mask 0x%x dim %d: got %lld want %lld", op_names[op], mask, d, (long long)r->shape[k], (long long)x->shape[d]);
            k++;
        }
    }
    ck_assert_int_eq(r->ndim, keepdim ? x->ndim : k);
    ck_assert_int_eq(em_numel(r), nout);

    double *got = tu_to_doubles(r);
    double rt = rtol_of(r->dtype);
    double ratio = tu_close_ratio(got, ref, nout, rt, rt * 1e-3);
    ck_assert_msg(ratio <= 1.0, "%s %s mask 0x%x keepdim %d: not close (ratio %g) got %g want %g", op_names[op],
                  em_dtype_name(x->dtype), mask, keepdim, ratio, nout ? got[0] : 0.0, nout ? ref[0] : 0.0);
    if (idx) {
        ck_assert_int_eq(idx->dtype, EM_I64);
        ck_assert_int_eq(idx->ndim, r->ndim);
        double *gi = tu_to_doubles(idx);
        int64_t bad = -1;   /* one ck_assert per tensor: Check logs every assertion */
        for (int64_t o = 0; o < nout && bad < 0; o++)
            if (gi[o] != (double)ridx[o]) bad = o;
        ck_assert_msg(bad < 0, "%s index %lld: got %g want %lld", op_names[op], (long long)bad,
                      bad < 0 ? 0 : gi[bad], bad < 0 ? 0LL : (long long)ridx[bad]);
        free(gi);
    }
    free(got);
    free(xv);
    free(ref);
    free(ridx);
}

/* All float ops over one dim set. */
static void check_float_ops(em_tensor *x, int mask, bool keepdim)
{
    check_one(R_SUM, x, mask, 0, keepdim, true);
    check_one(R_MEAN, x, mask, 0, keepdim, false);
    check_one(R_VAR, x, mask, 1, keepdim, true);
    check_one(R_VAR, x, mask, 0, keepdim, false);
    check_one(R_LSE, x, mask, 0, keepdim, false);
    check_one(R_NORM, x, mask, 2, keepdim, true);
    check_one(R_NORM, x, mask, 1, keepdim, false);
    check_one(R_NORM, x, mask, INFINITY, keepdim, false);
    check_one(R_NORM, x, mask, 3.5, keepdim, false);
}

/* Single-dim ops (max/min/argmax) over each dim of x. */
static void check_extremes(em_tensor *x)
{
    for (int d = 0; d < x->ndim; d++)
        for (int kd = 0; kd < 2; kd++) {
            check_one(R_MAX, x, 1 << d, 0, kd, false);
            check_one(R_MIN, x, 1 << d, 0, kd, false);
            check_one(R_ARGMAX, x, 1 << d, 0, kd, false);
        }
}

/* Every subset of dims, both keepdims. */
static void check_all_masks(em_tensor *x)
{
    for (int mask = 1; mask < (1 << x->ndim); mask++)   /* ndims = 0 means all dims */
        for (int kd = 0; kd < 2; kd++) check_float_ops(x, mask, kd);
    check_extremes(x);
}

/* ---- tests ------------------------------------------------------------------- */

START_TEST(test_all_dim_sets_every_float_dtype)
{
    static const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16};
    int64_t before = tu_live_bytes();
    EM_SCOPE {
        for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
            em_tensor *x = tu_rand_tensor(EM_SHAPE(3, 4, 5), dts[i], -2, 2, 11 + i, NULL);
            check_all_masks(x);
            em_tensor *y = tu_rand_tensor(EM_SHAPE(2, 3, 2, 4), dts[i], -1, 3, 21 + i, NULL);
            check_all_masks(y);
        }
    }
    ck_assert_int_eq(tu_live_bytes(), before);   /* every intermediate was freed */
}
END_TEST

START_TEST(test_non_contiguous_views)
{
    EM_SCOPE {
        em_tensor *base = tu_rand_tensor(EM_SHAPE(6, 5, 7), EM_F32, -3, 3, 5, NULL);
        em_tensor *tr = em_transpose(base, 0, 2);                 /* [7,5,6] */
        check_all_masks(tr);
        em_tensor *perm = em_permute(base, (int[]){1, 2, 0});     /* [5,7,6] */
        check_all_masks(perm);
        em_tensor *nar = em_narrow(em_narrow(base, 1, 1, 3), 2, 2, 4);   /* [6,3,4] */
        check_all_masks(nar);
        em_tensor *row = tu_rand_tensor(EM_SHAPE(1, 9), EM_F64, -1, 1, 6, NULL);
        em_tensor *ex = em_expand(row, EM_SHAPE(4, 9));           /* stride 0 on dim 0 */
        check_all_masks(ex);
        em_tensor *b16 = tu_rand_tensor(EM_SHAPE(4, 10), EM_BF16, -1, 1, 7, NULL);
        check_all_masks(em_transpose(b16, 0, 1));
        em_tensor *h16 = tu_rand_tensor(EM_SHAPE(4, 10), EM_F16, -1, 1, 8, NULL);
        check_all_masks(em_narrow(h16, 1, 3, 6));
    }
}
END_TEST

/* Large enough for the row/column fast paths, the thread split over outputs,
 * and the split of a single output's range into chunks. */
START_TEST(test_large_fast_paths)
{
    EM_SCOPE {
        em_tensor *a = tu_rand_tensor(EM_SHAPE(64, 3000), EM_F32, -1, 1, 31, NULL);
        for (int m = 1; m < 4; m++) check_float_ops(a, m, false);
        check_extremes(a);
        em_tensor *b = tu_rand_tensor(EM_SHAPE(150000, 3), EM_F32, -1, 1, 32, NULL);   /* narrow columns */
        em_tensor *c = tu_rand_tensor(EM_SHAPE(20000, 40), EM_F32, -1, 1, 33, NULL);    /* wide columns */
        em_tensor *d = tu_rand_tensor(EM_SHAPE(6, 20000, 5), EM_F64, -1, 1, 34, NULL);  /* middle dim */
        em_tensor *h = tu_rand_tensor(EM_SHAPE(300, 700), EM_BF16, -1, 1, 35, NULL);
        const struct { int op; em_tensor *x; int mask; double param; bool keepdim, all_spelling; } cases[] = {
            {R_SUM, b, 1, 0, false, false}, {R_VAR, b, 1, 1, true, false}, {R_MAX, b, 1, 0, false, false},
            {R_SUM, b, 3, 0, false, true},
            {R_SUM, c, 1, 0, false, false}, {R_LSE, c, 1, 0, false, false}, {R_MIN, c, 1, 0, true, false},
            {R_ARGMAX, c, 1, 0, false, false}, {R_NORM, c, 1, 2, false, false},
            {R_SUM, d, 2, 0, false, false}, {R_MEAN, d, 5, 0, true, false}, {R_MAX, d, 2, 0, false, false},
            {R_SUM, em_transpose(d, 0, 2), 3, 0, false, false},
            {R_SUM, h, 1, 0, false, false}, {R_SUM, h, 2, 0, false, false}, {R_MAX, h, 1, 0, false, false},
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
            check_one(cases[i].op, cases[i].x, cases[i].mask, cases[i].param, cases[i].keepdim, cases[i].all_spelling);
    }
}
END_TEST

/* 16M f32 values: the sum must hold 1e-6 relative accuracy, and be the same
 * bits for 1 thread and for several. */
START_TEST(test_sum_16m_accuracy_and_determinism)
{
    const int64_t n = (int64_t)1 << 24;
    float *h = malloc(sizeof(float) * (size_t)n);
    uint64_t st = 99;
    double ref = 0, ref_sq = 0;
    for (int64_t i = 0; i < n; i++) {
        h[i] = (float)tu_uniform(&st, 0.0, 1.0) + 0.1f;
        ref += h[i];
        ref_sq += (double)h[i] * h[i];
    }
    EM_SCOPE {
        em_tensor *x = em_from_data(h, 1, &n, EM_F32);
        int nt = em_num_threads();
        em_set_num_threads(1);
        double s1 = em_item(em_sum(x, 0, NULL, false));
        em_set_num_threads(nt > 1 ? nt : 2);
        double s2 = em_item(em_sum(x, 0, NULL, false));
        em_set_num_threads(nt);
        ck_assert_msg(fabs(s2 - ref) <= 1e-6 * ref, "sum %.9g ref %.9g", s2, ref);
        ck_assert_msg(s1 == s2, "1 thread %.9g, many %.9g", s1, s2);
        double m = em_item(em_mean(x, 0, NULL, false));
        ck_assert(fabs(m - ref / (double)n) <= 1e-6 * ref / (double)n);
        double nrm = em_item(em_norm(x, 2, 0, NULL, false));
        ck_assert(fabs(nrm - sqrt(ref_sq)) <= 1e-6 * sqrt(ref_sq));
        /* the same data as 4096 rows and as columns */
        em_tensor *m2 = em_view(x, EM_SHAPE(4096, 4096));
        em_tensor *cs = em_sum(m2, EM_DIMS(0), false);
        double tot = 0;
        double *cv = tu_to_doubles(cs);
        for (int i = 0; i < 4096; i++) tot += cv[i];
        free(cv);
        ck_assert(fabs(tot - ref) <= 1e-6 * ref);
    }
    free(h);
}
END_TEST

START_TEST(test_empty_tensors)
{
    EM_SCOPE {
        em_tensor *e = em_zeros(EM_SHAPE(0, 3), EM_F32, EM_CPU);
        /* reduce the empty dim: identity values per op, shape [3] */
        em_tensor *s = em_sum(e, EM_DIMS(0), false);
        ck_assert_int_eq(s->ndim, 1);
        ck_assert_int_eq(s->shape[0], 3);
        for (int64_t i = 0; i < 3; i++) ck_assert(em_get(s, &i) == 0.0);
        ck_assert(isnan(em_get(em_mean(e, EM_DIMS(0), false), (int64_t[]){1})));
        ck_assert(isnan(em_get(em_var(e, EM_DIMS(0), 1, false), (int64_t[]){1})));
        double l = em_get(em_logsumexp(e, EM_DIMS(0), false), (int64_t[]){2});
        ck_assert(isinf(l) && l < 0);
        ck_assert(em_get(em_norm(e, 2, EM_DIMS(0), false), (int64_t[]){0}) == 0.0);
        ck_assert(em_get(em_norm(e, INFINITY, EM_DIMS(0), false), (int64_t[]){0}) == 0.0);
        /* reduce the non-empty dim: an empty result */
        em_tensor *s1 = em_sum(e, EM_DIMS(1), true);
        ck_assert_int_eq(s1->ndim, 2);
        ck_assert_int_eq(s1->shape[0], 0);
        ck_assert_int_eq(s1->shape[1], 1);
        em_tensor *mx = em_max(e, 1, false, NULL);
        ck_assert_int_eq(mx->ndim, 1);
        ck_assert_int_eq(mx->shape[0], 0);
        /* all dims: scalars */
        em_tensor *all = em_sum(e, 0, NULL, false);
        ck_assert_int_eq(all->ndim, 0);
        ck_assert(em_item(all) == 0.0);
        ck_assert(isnan(em_item(em_mean(e, 0, NULL, false))));
        em_tensor *ei = em_zeros(EM_SHAPE(2, 0), EM_I32, EM_CPU);
        em_tensor *si = em_sum(ei, EM_DIMS(1), false);
        ck_assert_int_eq(si->dtype, EM_I64);
        ck_assert(em_get(si, (int64_t[]){1}) == 0.0);
    }
}
END_TEST

START_TEST(test_scalar_input)
{
    EM_SCOPE {
        em_tensor *x = em_scalar(2.5, EM_F32, EM_CPU);
        ck_assert(em_item(em_sum(x, 0, NULL, false)) == 2.5);
        em_tensor *s = em_sum(x, EM_DIMS(0), true);
        ck_assert_int_eq(s->ndim, 0);
        ck_assert(em_item(s) == 2.5);
        ck_assert(em_item(em_mean(x, EM_DIMS(-1), false)) == 2.5);
        em_tensor *idx = NULL;
        ck_assert(em_item(em_max(x, 0, false, &idx)) == 2.5);
        ck_assert(em_item(idx) == 0.0);
        ck_assert(em_item(em_max_all(x)) == 2.5);
    }
}
END_TEST

START_TEST(test_integer_and_bool)
{
    EM_SCOPE {
        static const em_dtype dts[] = {EM_I64, EM_I32, EM_BOOL};
        for (size_t i = 0; i < 3; i++) {
            em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 3, 5), dts[i], -50, 50, 41 + i, NULL);
            for (int mask = 1; mask < 8; mask++) {
                check_one(R_SUM, x, mask, 0, false, true);
                check_one(R_SUM, x, mask, 0, true, false);
            }
            check_extremes(x);
            check_extremes(em_transpose(x, 0, 2));
        }
        /* i64 sums stay exact beyond 2^53 */
        int64_t big[3] = {((int64_t)1 << 60) + 1, 3, ((int64_t)1 << 58) + 7};
        em_tensor *b = em_from_data(big, 1, (int64_t[]){3}, EM_I64);
        em_tensor *s = em_sum(b, 0, NULL, false);
        ck_assert_int_eq(s->dtype, EM_I64);
        ck_assert(((int64_t *)em_data_ptr(s))[0] == big[0] + big[1] + big[2]);
        em_tensor *mx = em_max_all(b);
        ck_assert(((int64_t *)em_data_ptr(mx))[0] == big[0]);
        em_tensor *mn = em_min_all(b);
        ck_assert(((int64_t *)em_data_ptr(mn))[0] == 3);
        /* a large int tensor through the threaded path */
        em_tensor *l = tu_rand_tensor(EM_SHAPE(300, 400), EM_I32, -1000, 1000, 45, NULL);
        check_one(R_SUM, l, 1, 0, false, false);
        check_one(R_SUM, l, 2, 0, false, false);
        check_one(R_MAX, l, 2, 0, false, false);
    }
}
END_TEST

/* Ties: the FIRST index of the extreme wins, in both kernel orientations. */
START_TEST(test_index_tie_breaking)
{
    EM_SCOPE {
        float row[10] = {1, 3, 3, -2, 3, -2, 0, 1, -2, 3};
        em_tensor *r = em_from_data(row, 1, (int64_t[]){10}, EM_F32);
        em_tensor *idx = NULL;
        ck_assert(em_item(em_max(r, 0, false, &idx)) == 3.0);
        ck_assert(em_item(idx) == 1.0);
        ck_assert(em_item(em_min(r, 0, false, &idx)) == -2.0);
        ck_assert(em_item(idx) == 3.0);
        ck_assert(em_item(em_argmax(r, 0, false)) == 1.0);
        /* columns (wide rows of equal values): every column ties at row 0 */
        em_tensor *z = em_zeros(EM_SHAPE(7, 40), EM_F32, EM_CPU);
        em_tensor *ai = em_argmax(z, 0, false);
        for (int64_t j = 0; j < 40; j++) ck_assert(em_get(ai, &j) == 0.0);
        /* a tie placed late in some columns, early in others */
        for (int64_t j = 0; j < 40; j++) {
            em_set(z, (int64_t[]){6 - j % 7, j}, 5.0);
            em_set(z, (int64_t[]){6, j}, 5.0);
        }
        check_extremes(z);
        ai = em_argmax(z, 0, false);
        for (int64_t j = 0; j < 40; j++) ck_assert(em_get(ai, &j) == (double)(6 - j % 7));
        em_tensor *zi = em_zeros(EM_SHAPE(5, 9), EM_I64, EM_CPU);
        ck_assert(em_item(em_argmax(em_narrow(zi, 1, 2, 1), 0, false)) == 0.0);
    }
}
END_TEST

/* NaN is the max and the min (torch), its first position is the index, and
 * it propagates through sum/mean/var/logsumexp/norm. */
START_TEST(test_nan_and_inf)
{
    EM_SCOPE {
        float row[6] = {1, 2, NAN, 7, NAN, -1};
        em_tensor *r = em_from_data(row, 1, (int64_t[]){6}, EM_F32);
        em_tensor *idx = NULL;
        ck_assert(isnan(em_item(em_max(r, 0, false, &idx))));
        ck_assert(em_item(idx) == 2.0);
        ck_assert(isnan(em_item(em_min(r, 0, false, &idx))));
        ck_assert(em_item(idx) == 2.0);
        ck_assert(em_item(em_argmax(r, 0, false)) == 2.0);
        ck_assert(isnan(em_item(em_max_all(r))));
        ck_assert(isnan(em_item(em_min_all(r))));
        ck_assert(isnan(em_item(em_sum(r, 0, NULL, false))));
        ck_assert(isnan(em_item(em_logsumexp(r, 0, NULL, false))));
        ck_assert(isnan(em_item(em_norm(r, INFINITY, 0, NULL, false))));
        ck_assert(isnan(em_item(em_var(r, 0, NULL, 1, false))));
        /* NaN in a column-oriented reduction, in a bf16 tensor */
        em_tensor *c = tu_rand_tensor(EM_SHAPE(9, 16), EM_BF16, -1, 1, 51, NULL);
        em_set(c, (int64_t[]){4, 3}, NAN);
        em_set(c, (int64_t[]){7, 3}, NAN);
        check_extremes(c);
        for (int m = 1; m < 4; m++) check_float_ops(c, m, false);
        /* logsumexp with infinities */
        float ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
        double l = em_item(em_logsumexp(em_from_data(ninf, 1, (int64_t[]){3}, EM_F32), 0, NULL, false));
        ck_assert(isinf(l) && l < 0);
        float pinf[3] = {1, INFINITY, -INFINITY};
        l = em_item(em_logsumexp(em_from_data(pinf, 1, (int64_t[]){3}, EM_F32), 0, NULL, false));
        ck_assert(isinf(l) && l > 0);
        /* big values: no overflow */
        double bigv[2] = {1000, 1000};
        l = em_item(em_logsumexp(em_from_data(bigv, 1, (int64_t[]){2}, EM_F64), 0, NULL, false));
        ck_assert(fabs(l - (1000 + log(2.0))) < 1e-12);
    }
}
END_TEST

START_TEST(test_max_all_min_all)
{
    EM_SCOPE {
        em_tensor *x = tu_rand_tensor(EM_SHAPE(5, 6, 7), EM_F32, -9, 9, 61, NULL);
        double *v = tu_to_doubles(x);
        double mx = -INFINITY, mn = INFINITY;
        for (int i = 0; i < 210; i++) { mx = fmax(mx, v[i]); mn = fmin(mn, v[i]); }
        free(v);
        em_tensor *a = em_max_all(x);
        ck_assert_int_eq(a->ndim, 0);
        ck_assert(em_item(a) == mx);
        ck_assert(em_item(em_min_all(x)) == mn);
        ck_assert(em_item(em_max_all(em_permute(x, (int[]){2, 0, 1}))) == mx);
        ck_assert(em_item(em_min_all(em_to_dtype(x, EM_F64))) == mn);
    }
}
END_TEST

/* ---- misuse ------------------------------------------------------------------ */

START_TEST(misuse_dim_out_of_range)
{
    tu_expect_misuse("dim 3 is out of range");
    em_tensor *x = em_zeros(EM_SHAPE(2, 3, 4), EM_F32, EM_CPU);
    em_sum(x, EM_DIMS(3), false);
}
END_TEST

START_TEST(misuse_negative_dim_out_of_range)
{
    tu_expect_misuse("dim -4 is out of range");
    em_tensor *x = em_zeros(EM_SHAPE(2, 3, 4), EM_F32, EM_CPU);
    em_max(x, -4, false, NULL);
}
END_TEST

START_TEST(misuse_duplicate_dim)
{
    tu_expect_misuse("appears more than once");
    em_tensor *x = em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU);
    em_mean(x, EM_DIMS(1, -1), false);
}
END_TEST

START_TEST(misuse_mean_of_int)
{
    tu_expect_misuse("needs a floating-point tensor");
    em_tensor *x = em_zeros(EM_SHAPE(2, 3), EM_I64, EM_CPU);
    em_mean(x, 0, NULL, false);
}
END_TEST

START_TEST(misuse_max_zero_size_dim)
{
    tu_expect_misuse("cannot reduce over a zero-size dimension");
    em_tensor *x = em_zeros(EM_SHAPE(2, 0), EM_F32, EM_CPU);
    em_max(x, 1, false, NULL);
}
END_TEST

START_TEST(misuse_argmax_zero_size_dim)
{
    tu_expect_misuse("cannot reduce over a zero-size dimension");
    em_tensor *x = em_zeros(EM_SHAPE(0, 4), EM_F32, EM_CPU);
    em_argmax(x, 0, false);
}
END_TEST

START_TEST(misuse_max_all_empty)
{
    tu_expect_misuse("cannot reduce over a zero-size dimension");
    em_tensor *x = em_zeros(EM_SHAPE(3, 0), EM_F32, EM_CPU);
    em_max_all(x);
}
END_TEST

START_TEST(misuse_norm_bad_p)
{
    tu_expect_misuse("p must be > 0");
    em_tensor *x = em_zeros(EM_SHAPE(3), EM_F32, EM_CPU);
    em_norm(x, -1, 0, NULL, false);
}
END_TEST

START_TEST(misuse_var_bad_correction)
{
    tu_expect_misuse("correction must be >= 0");
    em_tensor *x = em_zeros(EM_SHAPE(3), EM_F32, EM_CPU);
    em_var(x, 0, NULL, -1, false);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("reduce");
    tu_add_tests(tu_case(s, "forward", 0), test_all_dim_sets_every_float_dtype, test_non_contiguous_views,
                 test_large_fast_paths, test_sum_16m_accuracy_and_determinism, test_empty_tensors,
                 test_scalar_input, test_integer_and_bool, test_index_tie_breaking, test_nan_and_inf,
                 test_max_all_min_all);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_dim_out_of_range, misuse_negative_dim_out_of_range,
                        misuse_duplicate_dim, misuse_mean_of_int, misuse_max_zero_size_dim,
                        misuse_argmax_zero_size_dim, misuse_max_all_empty, misuse_norm_bad_p,
                        misuse_var_bad_correction);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
