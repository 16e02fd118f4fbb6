/* Elementwise ops against independent f64 references: every binary, compare
 * and unary op, where and masked_fill, over broadcasting (size-1 dims, 0-d,
 * different ranks), empty tensors, non-contiguous inputs (transposed, narrowed,
 * expanded) and every dtype each op accepts. */
#include "check_util.h"
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs in several layouts --------------------------------------------------- */

typedef enum { L_CONTIG, L_TRANSPOSED, L_NARROWED, L_EXPANDED, L_COUNT } layout;
static const char *const layout_names[] = {"contiguous", "transposed", "narrowed", "expanded"};

/* A tensor of logical shape (nd, shape) in layout `lay`, values uniform in
 * [lo, hi) (integral for integer dtypes). *vals gets the values in row-major
 * order (malloc'd). The tensor belongs to the current scope. */
static em_tensor *base(int nd, const int64_t *shape, em_dtype dt, double lo, double hi, uint64_t seed);

static em_tensor *make(int nd, const int64_t *shape, em_dtype dt, layout lay, double lo, double hi, uint64_t seed,
                       double **vals)
{
    int64_t bs[EM_MAX_DIMS];
    memcpy(bs, shape, sizeof(int64_t) * (size_t)nd);
    em_tensor *t;
    if (nd >= 2 && lay == L_TRANSPOSED) {
        bs[nd - 1] = shape[nd - 2];
        bs[nd - 2] = shape[nd - 1];
        t = em_transpose(base(nd, bs, dt, lo, hi, seed), -1, -2);
    } else if (nd >= 1 && lay == L_NARROWED) {
        bs[nd - 1] += 3;
        t = em_narrow(base(nd, bs, dt, lo, hi, seed), nd - 1, 2, shape[nd - 1]);
    } else if (nd >= 1 && lay == L_EXPANDED && shape[0] != 1) {
        bs[0] = 1;
        t = em_expand(base(nd, bs, dt, lo, hi, seed), nd, shape);
    } else {
        t = base(nd, shape, dt, lo, hi, seed);
    }
    ck_assert_ptr_nonnull(t);
    *vals = tu_to_doubles(t);
    return t;
}

/* When set, float tensors hold integral values too (so comparisons see ties). */
static bool discrete;

static em_tensor *base(int nd, const int64_t *shape, em_dtype dt, double lo, double hi, uint64_t seed)
{
    em_tensor *t = tu_rand_tensor(nd, shape, dt, lo, hi, seed, NULL);
    if (!discrete || !em_dtype_is_float(dt)) return t;
    int64_t idx[EM_MAX_DIMS] = {0}, n = em_numel(t);
    for (int64_t e = 0; e < n; e++) {
        em_set(t, idx, floor(em_get(t, idx)));
        for (int d = nd - 1; d >= 0 && ++idx[d] == shape[d]; d--) idx[d] = 0;
    }
    return t;
}

/* Large shapes run for the dtypes with their own paths through chunks and
 * threads (f32, and bf16 through the f16/bf16 chunks), to keep the test fast. */
static bool big_dtype(em_dtype dt) { return dt == EM_F32 || dt == EM_BF16; }

/* NumPy broadcast written for the test (independent of em__broadcast_shapes). */
static int bcast(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i - (n - na) >= 0 ? a[i - (n - na)] : 1, y = i - (n - nb) >= 0 ? b[i - (n - nb)] : 1;
        out[i] = x == 1 ? y : x;
    }
    return n;
}

/* Row-major index into an operand of shape (nt, ts) for the output element e of (n, shape). */
static int64_t src_index(int64_t e, int n, const int64_t *shape, int nt, const int64_t *ts)
{
    int64_t idx = 0, mul = 1;
    for (int d = n - 1; d >= 0; d--) {
        int64_t i = e % shape[d];
        e /= shape[d];
        int td = d - (n - nt);
        if (td < 0) continue;
        if (ts[td] != 1) idx += i * mul;
        mul *= ts[td];
    }
    return idx;
}

static int64_t numel_of(int n, const int64_t *s)
{
    int64_t m = 1;
    for (int i = 0; i < n; i++) m *= s[i];
    return m;
}

static void assert_shape(const em_tensor *t, int n, const int64_t *s)
{
    ck_assert_int_eq(t->ndim, n);
    for (int i = 0; i < n; i++) ck_assert_int_eq(t->shape[i], s[i]);
}

typedef struct tol { double rtol, atol; } tol;
static tol tol_of(em_dtype dt)
{
    switch (dt) {
    case EM_F32: return (tol){1e-6, 1e-7};
    case EM_F64: return (tol){1e-12, 1e-14};
    case EM_F16: return (tol){1e-3, 1e-5};
    case EM_BF16: return (tol){1e-2, 1e-6};
    default: return (tol){0, 0};
    }
}

static const em_dtype all_dtypes[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_BOOL};
static const em_dtype numeric_dtypes[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32};
static const em_dtype float_dtypes[] = {EM_F32, EM_F64, EM_F16, EM_BF16};

/* Broadcast shape pairs: equal, trailing, size-1 on both sides, different
 * ranks, 0-d on either side, empty, and one large enough for several threads
 * and several f16/bf16 chunks. */
typedef struct shape_case { int na; int64_t a[4]; int nb; int64_t b[4]; } shape_case;
static const shape_case shape_cases[] = {
    {2, {3, 4}, 2, {3, 4}},
    {2, {3, 4}, 1, {4}},
    {2, {3, 1}, 2, {1, 4}},
    {3, {2, 3, 5}, 2, {3, 1}},
    {1, {5}, 3, {2, 3, 5}},
    {0, {0}, 2, {2, 3}},
    {2, {4, 2}, 0, {0}},
    {0, {0}, 0, {0}},
    {2, {0, 3}, 1, {3}},
    {2, {2, 0}, 2, {2, 1}},
    {2, {300, 257}, 2, {300, 257}},
    {2, {260, 260}, 1, {260}},
};
#define N_SHAPE_CASES (sizeof shape_cases / sizeof *shape_cases)

/* ---- binary ops -------------------------------------------------------------------- */

typedef em_tensor *(*binop)(em_tensor *, em_tensor *);
typedef struct bin_case {
    const char *name;
    binop fn;
    double alo, ahi, blo, bhi;   /* input ranges */
    bool float_only, compare;
} bin_case;

static double ref_binary(const char *name, double x, double y, em_dtype dt)
{
    bool isint = dt == EM_I64 || dt == EM_I32;
    if (!strcmp(name, "add")) return x + y;
    if (!strcmp(name, "sub")) return x - y;
    if (!strcmp(name, "mul")) return x * y;
    if (!strcmp(name, "div")) return x / y;
    if (!strcmp(name, "pow")) {
        if (!isint) return pow(x, y);
        double r = 1;
        for (int i = 0; i < (int)y; i++) r *= x;
        return r;
    }
    if (!strcmp(name, "maximum")) return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
    if (!strcmp(name, "minimum")) return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
    if (!strcmp(name, "eq")) return x == y;
    if (!strcmp(name, "ne")) return x != y;
    if (!strcmp(name, "lt")) return x < y;
    if (!strcmp(name, "le")) return x <= y;
    if (!strcmp(name, "gt")) return x > y;
    if (!strcmp(name, "ge")) return x >= y;
    ck_abort_msg("no reference for %s", name);
    return 0;
}

static const bin_case bin_cases[] = {
    {"add", em_add, -10, 10, -10, 10, false, false},
    {"sub", em_sub, -10, 10, -10, 10, false, false},
    {"mul", em_mul, -10, 10, -10, 10, false, false},
    {"div", em_div, -10, 10, 0.25, 4, true, false},
    {"pow", em_pow, 0.5, 3, -2, 4, false, false},
    {"maximum", em_maximum, -10, 10, -10, 10, false, false},
    {"minimum", em_minimum, -10, 10, -10, 10, false, false},
};

/* Runs one case and compares with the reference, rounded to the output dtype
 * for f16/bf16 only by the tolerance. */
static void check_binary(const bin_case *c, const shape_case *sc, em_dtype dt, layout la, layout lb, uint64_t seed)
{
    EM_SCOPE {
        double *va, *vb;
        double alo = c->alo, ahi = c->ahi, blo = c->blo, bhi = c->bhi;
        if ((dt == EM_I64 || dt == EM_I32) && !strcmp(c->name, "pow")) alo = -3, ahi = 4, blo = 0, bhi = 5;
        em_tensor *a = make(sc->na, sc->a, dt, la, alo, ahi, seed, &va);
        em_tensor *b = make(sc->nb, sc->b, dt, lb, blo, bhi, seed + 1, &vb);
        int64_t os[EM_MAX_DIMS];
        int on = bcast(sc->na, sc->a, sc->nb, sc->b, os);
        int64_t n = numel_of(on, os);
        em_tensor *r = c->fn(a, b);
        ck_assert_ptr_nonnull(r);
        assert_shape(r, on, os);
        ck_assert_int_eq(r->dtype, c->compare ? EM_BOOL : dt);
        ck_assert(em_is_contiguous(r));
        double *got = tu_to_doubles(r), *ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
        for (int64_t e = 0; e < n; e++)
            ref[e] = ref_binary(c->name, va[src_index(e, on, os, sc->na, sc->a)], vb[src_index(e, on, os, sc->nb, sc->b)], dt);
        tol t = c->compare ? (tol){0, 0} : tol_of(dt);
        double ratio = tu_close_ratio(got, ref, n, t.rtol, t.atol);
        ck_assert_msg(ratio <= 1.0, "%s %s %s x %s, layouts %s/%s: ratio %g", c->name, em_dtype_name(dt),
                      em__dims_str(sc->na, sc->a), em__dims_str(sc->nb, sc->b), layout_names[la], layout_names[lb], ratio);
        free(va), free(vb), free(got), free(ref);
    }
}

START_TEST(binary_ops_match_reference)
{
    int64_t live = tu_live_bytes();
    const bin_case *c = &bin_cases[_i];
    for (size_t d = 0; d < sizeof numeric_dtypes / sizeof *numeric_dtypes; d++) {
        em_dtype dt = numeric_dtypes[d];
        if (c->float_only && !em_dtype_is_float(dt)) continue;
        for (size_t s = 0; s < N_SHAPE_CASES; s++) {
            bool big = shape_cases[s].na == 2 && shape_cases[s].a[0] >= 100;
            if (big && !big_dtype(dt)) continue;
            for (int la = 0; la < L_COUNT; la++)
                for (int lb = 0; lb < L_COUNT; lb++) {
                    if (big && (la != lb || la > L_TRANSPOSED)) continue;
                    check_binary(c, &shape_cases[s], dt, (layout)la, (layout)lb, 1000 * s + 10 * la + lb);
                }
        }
    }
    ck_assert_int_eq(tu_live_bytes(), live);
}
END_TEST

static const bin_case cmp_cases[] = {
    {"eq", em_eq, 0, 0, 0, 0, false, true}, {"ne", em_ne, 0, 0, 0, 0, false, true},
    {"lt", em_lt, 0, 0, 0, 0, false, true}, {"le", em_le, 0, 0, 0, 0, false, true},
    {"gt", em_gt, 0, 0, 0, 0, false, true}, {"ge", em_ge, 0, 0, 0, 0, false, true},
};

START_TEST(compare_ops_match_reference)
{
    /* few distinct values, so equal pairs are common */
    bin_case c = cmp_cases[_i];
    c.alo = c.blo = -3, c.ahi = c.bhi = 3;
    discrete = true;
    for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++) {
        em_dtype dt = all_dtypes[d];
        for (size_t s = 0; s < N_SHAPE_CASES; s++) {
            bool big = shape_cases[s].na == 2 && shape_cases[s].a[0] >= 100;
            if (big && !big_dtype(dt)) continue;
            for (int la = 0; la < L_COUNT; la++)
                check_binary(&c, &shape_cases[s], dt, (layout)la, (layout)(L_COUNT - 1 - la), 77 * s + la);
        }
    }
    discrete = false;
}
END_TEST

/* Signed zeros, NaN and infinities in comparisons. */
START_TEST(compare_special_floats)
{
    EM_SCOPE {
        const float av[] = {1, 2, 3, NAN, -0.0f, INFINITY}, bv[] = {1, 3, 2, NAN, 0.0f, INFINITY};
        em_tensor *a = em_from_data(av, EM_SHAPE(6), EM_F32), *b = em_from_data(bv, EM_SHAPE(6), EM_F32);
        const int eq[] = {1, 0, 0, 0, 1, 1}, lt[] = {0, 1, 0, 0, 0, 0}, ge[] = {1, 0, 1, 0, 1, 1}, ne[] = {0, 1, 1, 1, 0, 0};
        em_tensor *re = em_eq(a, b), *rl = em_lt(a, b), *rg = em_ge(a, b), *rn = em_ne(a, b);
        for (int64_t i = 0; i < 6; i++) {
            ck_assert_int_eq((int)em_get(re, &i), eq[i]);
            ck_assert_int_eq((int)em_get(rl, &i), lt[i]);
            ck_assert_int_eq((int)em_get(rg, &i), ge[i]);
            ck_assert_int_eq((int)em_get(rn, &i), ne[i]);
        }
    }
}
END_TEST

START_TEST(maximum_minimum_propagate_nan)
{
    for (size_t d = 0; d < sizeof float_dtypes / sizeof *float_dtypes; d++) EM_SCOPE {
        em_dtype dt = float_dtypes[d];
        em_tensor *a = em_empty(EM_SHAPE(4), dt, EM_CPU), *b = em_empty(EM_SHAPE(4), dt, EM_CPU);
        const double av[] = {NAN, 1, NAN, -2}, bv[] = {1, NAN, NAN, 3};
        for (int64_t i = 0; i < 4; i++) em_set(a, &i, av[i]), em_set(b, &i, bv[i]);
        em_tensor *mx = em_maximum(a, b), *mn = em_minimum(a, b);
        for (int64_t i = 0; i < 3; i++) {
            ck_assert(isnan(em_get(mx, &i)));
            ck_assert(isnan(em_get(mn, &i)));
        }
        int64_t i = 3;
        ck_assert_double_eq(em_get(mx, &i), 3);
        ck_assert_double_eq(em_get(mn, &i), -2);
    }
}
END_TEST

START_TEST(integer_arithmetic_wraps)
{
    EM_SCOPE {
        const int32_t av[] = {INT32_MAX, INT32_MIN, 3, -2}, bv[] = {1, 1, 2, 3};
        em_tensor *a = em_from_data(av, EM_SHAPE(4), EM_I32), *b = em_from_data(bv, EM_SHAPE(4), EM_I32);
        const int32_t *s = em_data_ptr(em_add(a, b)), *d = em_data_ptr(em_sub(a, b));
        const int32_t *p = em_data_ptr(em_pow(a, b)), *n = em_data_ptr(em_neg(a));
        ck_assert_int_eq(s[0], INT32_MIN);
        ck_assert_int_eq(d[1], INT32_MAX);
        ck_assert_int_eq(p[2], 9);
        ck_assert_int_eq(p[3], -8);
        ck_assert_int_eq(n[1], INT32_MIN);
        const int64_t big[] = {INT64_MAX, 5}, neg[] = {-1, -1};
        em_tensor *x = em_from_data(big, EM_SHAPE(2), EM_I64), *y = em_from_data(neg, EM_SHAPE(2), EM_I64);
        const int64_t *m = em_data_ptr(em_mul(x, y)), *q = em_data_ptr(em_pow(x, y));
        ck_assert(m[0] == -INT64_MAX && m[1] == -5);
        ck_assert(q[0] == 0 && q[1] == 0);   /* x^-1 truncates to 0 for |x| > 1 */
    }
}
END_TEST

/* ---- scalar forms -------------------------------------------------------------------- */

START_TEST(scalar_forms)
{
    const double exps[] = {2, 3, 1, 0.5, -0.5, -1, -2, 1.7, 0};
    for (size_t d = 0; d < sizeof float_dtypes / sizeof *float_dtypes; d++) EM_SCOPE {
        em_dtype dt = float_dtypes[d];
        tol t = tol_of(dt);
        double *v;
        em_tensor *a = make(EM_SHAPE(7, 45), dt, L_TRANSPOSED, 0.25, 4, 5 + d, &v);
        int64_t n = 7 * 45;
        double *ref = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) ref[i] = v[i] + 1.5;
        double *got = tu_to_doubles(em_add_scalar(a, 1.5));
        tu_assert_close(got, ref, n, t.rtol, t.atol);
        free(got);
        for (int64_t i = 0; i < n; i++) ref[i] = v[i] * -3.25;
        got = tu_to_doubles(em_mul_scalar(a, -3.25));
        tu_assert_close(got, ref, n, t.rtol, t.atol);
        free(got);
        for (size_t k = 0; k < sizeof exps / sizeof *exps; k++) {
            double e = em_item(em_scalar(exps[k], dt, EM_CPU));   /* the exponent as dt stores it */
            for (int64_t i = 0; i < n; i++) ref[i] = pow(v[i], e);
            em_tensor *r = em_pow_scalar(a, exps[k]);
            assert_shape(r, 2, (int64_t[]){7, 45});
            got = tu_to_doubles(r);
            ck_assert_msg(tu_close_ratio(got, ref, n, t.rtol, t.atol) <= 1, "pow %g %s", exps[k], em_dtype_name(dt));
            free(got);
        }
        free(ref);
        free(v);
    }
    EM_SCOPE {   /* integers take integral scalars */
        const int64_t av[] = {-3, 0, 7};
        em_tensor *a = em_from_data(av, EM_SHAPE(3), EM_I64);
        const int64_t *s = em_data_ptr(em_add_scalar(a, 5)), *m = em_data_ptr(em_mul_scalar(a, -2));
        const int64_t *p = em_data_ptr(em_pow_scalar(a, 2));
        ck_assert(s[0] == 2 && s[1] == 5 && s[2] == 12);
        ck_assert(m[0] == 6 && m[1] == 0 && m[2] == -14);
        ck_assert(p[0] == 9 && p[1] == 0 && p[2] == 49);
    }
}
END_TEST

/* ---- unary ops --------------------------------------------------------------------------- */

/* One case per row of tensor/unary_ops.h: its op, its reference in double
 * (ref_<name>) and its value range. */
typedef struct un_case {
    const char *name;
    em_tensor *(*fn)(em_tensor *);
    double (*ref)(double x);
    double lo, hi;
    bool ints;   /* also takes i64/i32 */
} un_case;

#define UN_INTS_NUMERIC true
#define UN_INTS_FLOATING false
#define UN_REF(NAME, name, dtypes, cost, f, backward, ref, ...) \
    static double ref_##name(double x) { return ref; }
#define UN_CASE(NAME, name, dtypes, cost, f, backward, ref, domain, values, parity) \
    {#name, em_##name, ref_##name, UN_KEEP values, UN_INTS_##dtypes},
#define UN_KEEP(...) __VA_ARGS__
EM_UNARY_OPS(UN_REF)
static const un_case un_cases[] = {EM_UNARY_OPS(UN_CASE)};
#define N_UN_CASES (int)(sizeof un_cases / sizeof *un_cases)

typedef struct un_shape { int nd; int64_t s[3]; } un_shape;
static const un_shape un_shapes[] = {{3, {2, 3, 5}}, {0, {0}}, {1, {7}}, {3, {3, 0, 2}}, {2, {300, 257}}};

START_TEST(unary_ops_match_reference)
{
    const un_case *c = &un_cases[_i];
    for (size_t d = 0; d < sizeof numeric_dtypes / sizeof *numeric_dtypes; d++) {
        em_dtype dt = numeric_dtypes[d];
        if (!c->ints && !em_dtype_is_float(dt)) continue;
        for (size_t s = 0; s < sizeof un_shapes / sizeof *un_shapes; s++)
            for (int lay = 0; lay < L_COUNT; lay++) EM_SCOPE {
                int nd = un_shapes[s].nd;
                const int64_t *shape = un_shapes[s].s;
                bool big = numel_of(nd, shape) > 10000;
                if (big && (!big_dtype(dt) || lay > L_TRANSPOSED)) continue;
                double *v;
                /* exp beyond 11 overflows f16 (max 65504) */
                double hi = dt == EM_F16 && c->fn == em_exp ? 10 : c->hi;
                em_tensor *a = make(nd, shape, dt, (layout)lay, c->lo, hi, 31 * s + lay, &v);
                em_tensor *r = c->fn(a);
                ck_assert_ptr_nonnull(r);
                assert_shape(r, nd, shape);
                ck_assert_int_eq(r->dtype, dt);
                int64_t n = numel_of(nd, shape);
                double *got = tu_to_doubles(r), *ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
                for (int64_t i = 0; i < n; i++) ref[i] = c->ref(v[i]);
                tol t = tol_of(dt);
                double ratio = tu_close_ratio(got, ref, n, t.rtol, t.atol);
                ck_assert_msg(ratio <= 1.0, "%s %s %s %s: ratio %g", c->name, em_dtype_name(dt), em__dims_str(nd, shape),
                              layout_names[lay], ratio);
                free(v), free(got), free(ref);
            }
    }
}
END_TEST

/* Special values through the f32 vector paths: inf, NaN, overflow, the tails. */
START_TEST(unary_special_values)
{
    EM_SCOPE {
        const float xs[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.0f, 89.0f, -87.0f, -100.0f, -104.5f, 1e-8f, -1e-8f, 0.54f, 0.56f, 20.0f, -20.0f};
        int64_t n = sizeof xs / sizeof *xs;
        em_tensor *x = em_from_data(xs, 1, &n, EM_F32);
        em_tensor *(*fns[])(em_tensor *) = {em_exp, em_tanh, em_sigmoid, em_gelu, em_gelu_tanh, em_relu};
        for (int f = 0; f < 6; f++) {
            const un_case *c = NULL;
            for (int j = 0; j < N_UN_CASES && !c; j++) c = un_cases[j].fn == fns[f] ? &un_cases[j] : NULL;
            ck_assert_ptr_nonnull(c);
            double *got = tu_to_doubles(fns[f](x)), ref[16];
            for (int64_t i = 0; i < n; i++) ref[i] = (float)c->ref(xs[i]);
            /* exp(-104.5) is below half the smallest subnormal: 0; sigmoid/gelu tails underflow too */
            ck_assert_msg(tu_close_ratio(got, ref, n, 1e-6, 3e-45) <= 1, "%s: ratio %g", c->name,
                          tu_close_ratio(got, ref, n, 1e-6, 3e-45));
            free(got);
        }
    }
}
END_TEST

/* ---- where, masked_fill ------------------------------------------------------------------ */

/* Inputs read across their rows (transposed views) against a contiguous
 * output run in tiles (tensor/cpu/iter.c): one transposed operand beside a
 * contiguous one, a broadcast row or column, 3-d with an outer dim, sizes that
 * are no multiple of a tile, and mixed f32 + bf16 (the staged half loop).
 * Values as the reference; unary results bit for bit as on a contiguous copy. */
START_TEST(transposed_operands_in_tiles)
{
    const em_dtype dts[] = {EM_F32, EM_F64, EM_BF16, EM_F16, EM_I64, EM_I32};
    const int64_t shapes[][4] = {{2, 70, 130}, {3, 3, 40, 70}};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int sh = 0; sh < 2; sh++)
            for (int other = 0; other < 4; other++) EM_SCOPE {
                    em_dtype dt = dts[d];
                    int nd = (int)shapes[sh][0];
                    const int64_t *os = shapes[sh] + 1;
                    double *va, *vb;
                    em_tensor *a = make(nd, os, dt, L_TRANSPOSED, -10, 10, 31 + d, &va);
                    int64_t bs[3];
                    memcpy(bs, os, sizeof bs);
                    int bnd = nd;
                    if (other == 1) bs[nd - 2] = 1;                       /* a broadcast row */
                    if (other == 2) bs[nd - 1] = 1;                       /* a broadcast column */
                    em_dtype bt = other == 3 ? (dt == EM_F32 ? EM_BF16 : dt) : dt;   /* f32 + bf16 */
                    em_tensor *b = make(bnd, bs, bt, L_CONTIG, -10, 10, 41 + d, &vb);
                    em_tensor *r = em_add(a, b);
                    int64_t n = em_numel(r);
                    double *got = tu_to_doubles(r), *ref = malloc(sizeof(double) * (size_t)n);
                    for (int64_t e = 0; e < n; e++)
                        ref[e] = va[e] + vb[src_index(e, nd, os, bnd, bs)];
                    tol t = tol_of(r->dtype);
                    double ratio = tu_close_ratio(got, ref, n, t.rtol, t.atol);
                    ck_assert_msg(ratio <= 1.0, "add %s + %s, %d-d, case %d: ratio %g", em_dtype_name(dt),
                                  em_dtype_name(bt), nd, other, ratio);
                    if (em_dtype_is_float(dt) && other == 0) {
                        em_tensor *g = em_gelu(a), *gc = em_gelu(em_contiguous(a));
                        ck_assert_msg(!memcmp(em_data_ptr(g), em_data_ptr(gc), (size_t)n * em_dtype_size(dt)),
                                      "gelu %s of a transposed view", em_dtype_name(dt));
                    }
                    free(va), free(vb), free(got), free(ref);
                }
}
END_TEST

/* Heavy ops run long rows in prefetched blocks of 1024 elements (iter.c):
 * the same bits as pieces too short to be blocked, for a contiguous row, a
 * strided one and a broadcast input, forward and backward. */
START_TEST(heavy_ops_in_prefetched_blocks)
{
    const em_dtype dts[] = {EM_F32, EM_BF16, EM_F64};
    const int64_t n = 2 * 1024 + 1000 + 37, piece = 1000;   /* blocked: >= 2048 in one row */
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int layout = 0; layout < 2; layout++) EM_SCOPE {
                em_dtype dt = dts[d];
                em_tensor *base = em_to_dtype(em_randn(EM_SHAPE(2 * n), EM_F32, EM_CPU), dt);
                /* layout 1: every other element (stride 2) */
                em_tensor *x = layout ? em_select(em_view(base, 2, (int64_t[]){n, 2}), 1, 1)
                                      : em_narrow(base, 0, 1, n);
                em_tensor *dy = em_to_dtype(em_randn(EM_SHAPE(n), EM_F32, EM_CPU), dt);
                em_tensor *e = em_full(EM_SHAPE(1), 1.5, dt, EM_CPU);   /* broadcast exponent */
                em_tensor *xa = em_abs(x);
                em_tensor *whole[3] = {em_gelu(x), em__unary_backward(EM_OP_GELU, x, dy), em_pow(xa, e)};
                for (int64_t o = 0; o < n; o += piece) {
                    int64_t m = n - o < piece ? n - o : piece;
                    em_tensor *xs = em_narrow(x, 0, o, m), *ds = em_narrow(dy, 0, o, m);
                    em_tensor *parts[3] = {em_gelu(xs), em__unary_backward(EM_OP_GELU, xs, ds),
                                           em_pow(em_narrow(xa, 0, o, m), e)};
                    for (int f = 0; f < 3; f++) {
                        em_tensor *w = em_contiguous(em_narrow(whole[f], 0, o, m));
                        ck_assert_msg(!memcmp(em_data_ptr(w), em_data_ptr(em_contiguous(parts[f])),
                                              (size_t)m * em_dtype_size(dt)),
                                      "op %d, %s, layout %d, elements %lld..%lld", f, em_dtype_name(dt), layout,
                                      (long long)o, (long long)(o + m));
                    }
                }
            }
}
END_TEST

START_TEST(where_matches_reference)
{
    typedef struct { int nc; int64_t c[3]; int nx; int64_t x[3]; int ny; int64_t y[3]; } wcase;
    const wcase cases[] = {
        {2, {3, 4}, 2, {3, 4}, 2, {3, 4}},
        {2, {3, 1}, 1, {4}, 0, {0}},
        {1, {4}, 3, {2, 3, 1}, 2, {3, 4}},
        {0, {0}, 2, {2, 2}, 1, {2}},
        {2, {0, 4}, 1, {4}, 1, {1}},
        {2, {200, 300}, 2, {200, 300}, 1, {300}},
    };
    for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++)
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
            for (int lay = 0; lay < L_COUNT; lay++) EM_SCOPE {
                const wcase *w = &cases[k];
                em_dtype dt = all_dtypes[d];
                if (w->x[0] >= 100 && (!big_dtype(dt) || lay > L_TRANSPOSED)) continue;
                double *vc, *vx, *vy;
                em_tensor *c = make(w->nc, w->c, EM_BOOL, (layout)lay, 0, 1, k, &vc);
                em_tensor *x = make(w->nx, w->x, dt, (layout)((lay + 1) % L_COUNT), -50, 50, k + 1, &vx);
                em_tensor *y = make(w->ny, w->y, dt, (layout)((lay + 2) % L_COUNT), -50, 50, k + 2, &vy);
                int64_t s1[EM_MAX_DIMS], os[EM_MAX_DIMS];
                int n1 = bcast(w->nc, w->c, w->nx, w->x, s1), on = bcast(n1, s1, w->ny, w->y, os);
                em_tensor *r = em_where(c, x, y);
                assert_shape(r, on, os);
                ck_assert_int_eq(r->dtype, dt);
                int64_t n = numel_of(on, os);
                double *got = tu_to_doubles(r);
                int64_t bad = -1;
                for (int64_t e = 0; e < n && bad < 0; e++) {
                    double want = vc[src_index(e, on, os, w->nc, w->c)] != 0 ? vx[src_index(e, on, os, w->nx, w->x)]
                                                                             : vy[src_index(e, on, os, w->ny, w->y)];
                    if (got[e] != want) bad = e;
                }
                ck_assert_msg(bad < 0, "where %s case %zu layout %d elem %lld", em_dtype_name(dt), k, lay, (long long)bad);
                free(vc), free(vx), free(vy), free(got);
            }
}
END_TEST

START_TEST(masked_fill_matches_reference)
{
    typedef struct { int nx; int64_t x[3]; int nm; int64_t m[3]; } mcase;
    const mcase cases[] = {{2, {3, 4}, 2, {3, 4}}, {3, {2, 3, 4}, 2, {3, 1}}, {2, {2, 5}, 0, {0}},
                           {0, {0}, 0, {0}}, {2, {0, 3}, 1, {3}}, {2, {300, 200}, 1, {200}}};
    const double value = -2.5;
    for (size_t d = 0; d < sizeof all_dtypes / sizeof *all_dtypes; d++)
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
            for (int lay = 0; lay < L_COUNT; lay++) EM_SCOPE {
                const mcase *w = &cases[k];
                em_dtype dt = all_dtypes[d];
                if (w->x[0] >= 100 && (!big_dtype(dt) || lay > L_TRANSPOSED)) continue;
                double *vx, *vm;
                em_tensor *x = make(w->nx, w->x, dt, (layout)lay, -50, 50, k, &vx);
                em_tensor *m = make(w->nm, w->m, EM_BOOL, (layout)(L_COUNT - 1 - lay), 0, 1, k + 9, &vm);
                em_tensor *r = em_masked_fill(x, m, value);
                assert_shape(r, w->nx, w->x);
                int64_t n = numel_of(w->nx, w->x);
                /* the fill value as the dtype stores it: ints truncate, bool is != 0 */
                double fv = dt == EM_BOOL ? 1 : (dt == EM_I64 || dt == EM_I32) ? -2 : value;
                double *got = tu_to_doubles(r);
                int64_t bad = -1;
                for (int64_t e = 0; e < n && bad < 0; e++)
                    if (got[e] != (vm[src_index(e, w->nx, w->x, w->nm, w->m)] != 0 ? fv : vx[e])) bad = e;
                ck_assert_msg(bad < 0, "masked_fill %s case %zu layout %d elem %lld", em_dtype_name(dt), k, lay, (long long)bad);
                free(vx), free(vm), free(got);
            }
}
END_TEST

/* Results are new tensors: the inputs are untouched, and outputs never alias them. */
START_TEST(outputs_are_fresh)
{
    EM_SCOPE {
        double *v;
        em_tensor *a = make(EM_SHAPE(4, 5), EM_F32, L_CONTIG, -1, 1, 3, &v);
        em_tensor *r = em_add(a, a);
        ck_assert_ptr_ne(r->storage, a->storage);
        double *after = tu_to_doubles(a);
        tu_assert_close(after, v, 20, 0, 0);
        free(v), free(after);
    }
}
END_TEST

/* NULL in, NULL out: a failed earlier op propagates without a second message. */
START_TEST(null_propagates)
{
    EM_SCOPE {
        em_tensor *a = em_ones(EM_SHAPE(2), EM_F32, EM_CPU);
        ck_assert_ptr_null(em_add(a, NULL));
        ck_assert_ptr_null(em_exp(NULL));
        ck_assert_ptr_null(em_where(NULL, a, a));
        ck_assert_ptr_null(em_masked_fill(a, NULL, 0));
        ck_assert_ptr_null(em_add_scalar(NULL, 1));
    }
}
END_TEST

/* ---- misuse ----------------------------------------------------------------------------- */

START_TEST(misuse_broadcast)
{
    tu_expect_misuse("em_add: cannot broadcast [2,3] with [4]");
    em_add(em_ones(EM_SHAPE(2, 3), EM_F32, EM_CPU), em_ones(EM_SHAPE(4), EM_F32, EM_CPU));
}
END_TEST

START_TEST(misuse_dtype_mismatch)
{
    tu_expect_misuse("em_mul: dtype mismatch float32 vs float64");
    em_mul(em_ones(EM_SHAPE(2), EM_F32, EM_CPU), em_ones(EM_SHAPE(2), EM_F64, EM_CPU));
}
END_TEST

START_TEST(misuse_int_div)
{
    tu_expect_misuse("em_div: needs a floating dtype");
    em_div(em_ones(EM_SHAPE(2), EM_I64, EM_CPU), em_ones(EM_SHAPE(2), EM_I64, EM_CPU));
}
END_TEST

START_TEST(misuse_bool_add)
{
    tu_expect_misuse("em_add: needs a numeric dtype (not bool), got bool");
    em_add(em_ones(EM_SHAPE(2), EM_BOOL, EM_CPU), em_ones(EM_SHAPE(2), EM_BOOL, EM_CPU));
}
END_TEST

START_TEST(misuse_int_exp)
{
    tu_expect_misuse("em_exp: needs a floating dtype");
    em_exp(em_ones(EM_SHAPE(2), EM_I32, EM_CPU));
}
END_TEST

START_TEST(misuse_fractional_scalar_on_int)
{
    tu_expect_misuse("em_add_scalar: scalar 0.5 is not an integer");
    em_add_scalar(em_ones(EM_SHAPE(2), EM_I64, EM_CPU), 0.5);
}
END_TEST

START_TEST(misuse_where_cond_dtype)
{
    tu_expect_misuse("em_where: cond must be bool, got float32");
    em_tensor *x = em_ones(EM_SHAPE(2), EM_F32, EM_CPU);
    em_where(x, x, x);
}
END_TEST

START_TEST(misuse_where_broadcast)
{
    tu_expect_misuse("em_where: cannot broadcast cond [3], x [2] and y [2]");
    em_tensor *x = em_ones(EM_SHAPE(2), EM_F32, EM_CPU);
    em_where(em_ones(EM_SHAPE(3), EM_BOOL, EM_CPU), x, x);
}
END_TEST

START_TEST(misuse_where_dtype)
{
    tu_expect_misuse("em_where: dtype mismatch float32 vs int64");
    em_where(em_ones(EM_SHAPE(2), EM_BOOL, EM_CPU), em_ones(EM_SHAPE(2), EM_F32, EM_CPU),
             em_ones(EM_SHAPE(2), EM_I64, EM_CPU));
}
END_TEST

START_TEST(misuse_masked_fill_shape)
{
    /* the mask broadcasts to x, never the other way */
    tu_expect_misuse("em_masked_fill: mask [2,3] does not broadcast to x [3]");
    em_masked_fill(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), em_ones(EM_SHAPE(2, 3), EM_BOOL, EM_CPU), 0);
}
END_TEST

START_TEST(misuse_masked_fill_dtype)
{
    tu_expect_misuse("em_masked_fill: mask must be bool, got int64");
    em_masked_fill(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), em_ones(EM_SHAPE(3), EM_I64, EM_CPU), 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("elementwise");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, binary_ops_match_reference, 0, sizeof bin_cases / sizeof *bin_cases);
    tcase_add_loop_test(tc, compare_ops_match_reference, 0, sizeof cmp_cases / sizeof *cmp_cases);
    tcase_add_test(tc, compare_special_floats);
    tcase_add_test(tc, maximum_minimum_propagate_nan);
    tcase_add_test(tc, integer_arithmetic_wraps);
    tcase_add_test(tc, scalar_forms);
    tcase_add_loop_test(tc, unary_ops_match_reference, 0, N_UN_CASES);
    tcase_add_test(tc, unary_special_values);
    tcase_add_test(tc, transposed_operands_in_tiles);
    tcase_add_test(tc, heavy_ops_in_prefetched_blocks);
    tcase_add_test(tc, where_matches_reference);
    tcase_add_test(tc, masked_fill_matches_reference);
    tcase_add_test(tc, outputs_are_fresh);
    tcase_add_test(tc, null_propagates);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("misuse");
    tu_add_misuse_test(tm, misuse_broadcast);
    tu_add_misuse_test(tm, misuse_dtype_mismatch);
    tu_add_misuse_test(tm, misuse_int_div);
    tu_add_misuse_test(tm, misuse_bool_add);
    tu_add_misuse_test(tm, misuse_int_exp);
    tu_add_misuse_test(tm, misuse_fractional_scalar_on_int);
    tu_add_misuse_test(tm, misuse_where_cond_dtype);
    tu_add_misuse_test(tm, misuse_where_broadcast);
    tu_add_misuse_test(tm, misuse_where_dtype);
    tu_add_misuse_test(tm, misuse_masked_fill_shape);
    tu_add_misuse_test(tm, misuse_masked_fill_dtype);
    suite_add_tcase(s, tm);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
