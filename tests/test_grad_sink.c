/* Gradient sinks (autograd/engine.c em__grad_sink): a rule adding its gradient
 * into a leaf's .grad itself. Embedding's rule does, so its [V,D] gradient is
 * never made dense. Checked here:
 *   - the rows its ids picked get exactly the bits of .grad + the dense
 *     gradient (f32, f64, bf16), across two accumulating backwards; rows no id
 *     picked keep their bits, even a -0.0 (the dense add would make it +0.0:
 *     that is how the tests see the sink was taken);
 *   - the sink is declined, and the result still right, when the leaf has a
 *     tensor hook (which must still run), a second producer, or no .grad yet;
 *   - post-accumulate hooks fire once, after the gradient is in .grad;
 *   - linear's weight gradient goes into an f32/f64 .grad by the GEMM itself
 *     (em__matmul_into, beta = 1): with a zeroed .grad the bits are those of
 *     the dense em_matmul, otherwise .grad + g^T x, and no add op runs;
 *   - under bf16 autocast that gradient goes into the f32 weight's .grad
 *     through its cast, unrounded: within f32 rounding of the f64 product of
 *     the bf16 operands (a bf16-rounded gradient would be off by up to 2^-9),
 *     with no add op in the backward.
 */
#include "check_util.h"
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { V = 40, D = 24, N = 30 };

static const int64_t ids_v[N] = {3, 7, 3, 0, 39, 7, 7, 12, 3, 5, 5, 21, 22, 23, 3, 0, 0, 39, 38, 12,
                                 1, 2, 3, 4, 5, 6, 7, 8, 9, 7};
/* rows no id above picks: 10, 11, 13 .. 20, 24 .. 37 */
enum { UNTOUCHED = 30, NEG_ZERO_AT = UNTOUCHED * D + 5 };

static em_tensor *ids_tensor(void)
{
    em_tensor *t = em_empty(EM_SHAPE(N), EM_I64, EM_CPU);
    memcpy(em_data_ptr(t), ids_v, sizeof ids_v);
    return t;
}

/* a leaf [V,D] of dtype dt whose .grad is set to random values, -0.0 at NEG_ZERO_AT */
static em_tensor *weight_with_grad(em_dtype dt)
{
    em_tensor *w = em_requires_grad_(em_to_dtype(em_randn(EM_SHAPE(V, D), EM_F32, EM_CPU), dt), true);
    em_tensor *g = em_contiguous(em_to_dtype(em_randn(EM_SHAPE(V, D), EM_F32, EM_CPU), dt));
    em__store((char *)em_data_ptr(g) + (size_t)NEG_ZERO_AT * em_dtype_size(dt), dt, -0.0);
    em_set_grad(w, g);
    return w;
}

static size_t row_bytes(em_dtype dt) { return (size_t)D * em_dtype_size(dt); }

START_TEST(sink_matches_dense_bits)
{
    static const em_dtype dts[] = {EM_F32, EM_F64, EM_BF16};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) EM_SCOPE {
        em_dtype dt = dts[d];
        em_tensor *ids = ids_tensor();
        em_tensor *w = weight_with_grad(dt);
        em_tensor *expect = em_clone(em_grad(w));
        for (int step = 0; step < 2; step++) {
            for (int pad = -1; pad <= 7; pad += 8) {   /* without and with padding_idx 7 */
                em_tensor *r = em_to_dtype(em_randn(EM_SHAPE(N, D), EM_F32, EM_CPU), dt);
                em_tensor *e = pad < 0 ? em_embedding(w, ids) : em__embedding_ex(w, ids, pad);
                em_backward(em_sum(em_mul(e, r), 0, NULL, false));   /* d e = r exactly */
                expect = em_add(expect, em_embedding_backward(r, ids, V, pad));
            }
        }
        const char *got = em_data_ptr(em_grad(w)), *want = em_data_ptr(expect);
        for (int v = 0; v < V; v++) {
            bool picked = false;
            for (int i = 0; i < N; i++) picked |= ids_v[i] == v;
            size_t off = (size_t)v * row_bytes(dt);
            if (picked)
                ck_assert_msg(!memcmp(got + off, want + off, row_bytes(dt)), "%s: row %d differs from the dense add",
                              em_dtype_name(dt), v);
        }
        /* untouched rows: their bits as set, -0.0 included (the dense add gives +0.0) */
        double z = em__load(got + (size_t)NEG_ZERO_AT * em_dtype_size(dt), dt);
        ck_assert_msg(z == 0 && signbit(z), "%s: the untouched -0.0 became %g: the sink was not taken",
                      em_dtype_name(dt), z);
    }
}
END_TEST

static int hook_calls;
static double hook_seen;

static em_tensor *double_it(em_tensor *g, void *user)
{
    (void)user;
    hook_calls++;
    return em_mul_scalar(g, 2.0);
}

static void post_hook(em_tensor *leaf, void *user)
{
    (void)user;
    hook_calls++;
    hook_seen = em_get(em_grad(leaf), (int64_t[]){3, 0});
}

/* Integer-valued data, so every path's sums are exact and comparable with ==. */
static em_tensor *int_leaf(void)
{
    em_tensor *w = em_requires_grad_(em_ones(EM_SHAPE(V, D), EM_F32, EM_CPU), true);
    em_set_grad(w, em_full(EM_SHAPE(V, D), 1.0, EM_F32, EM_CPU));
    return w;
}

/* dL/de = 1 everywhere, so row v gets (times picked) and row 3 gets 5 */
static void backward_ones(em_tensor *w, em_tensor *extra)
{
    em_tensor *l = em_sum(em_embedding(w, ids_tensor()), 0, NULL, false);
    if (extra) l = em_add(l, em_sum(extra, 0, NULL, false));
    em_backward(l);
}

START_TEST(sink_declined_when_it_would_change_the_result)
{
    EM_SCOPE {
        /* a tensor hook must see (and here double) the gradient */
        em_tensor *w = int_leaf();
        hook_calls = 0;
        em_register_hook(w, double_it, NULL);
        backward_ones(w, NULL);
        ck_assert_int_eq(hook_calls, 1);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 1.0 + 2 * 5);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){11, 0}), 1.0);

        /* a second producer: w also feeds a sum */
        w = int_leaf();
        backward_ones(w, w);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 1.0 + 5 + 1);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){11, 0}), 1.0 + 1);

        /* no .grad yet: the dense gradient becomes it */
        w = em_requires_grad_(em_ones(EM_SHAPE(V, D), EM_F32, EM_CPU), true);
        backward_ones(w, NULL);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 5.0);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){11, 0}), 0.0);
        /* ...and the next backward adds into it through the sink */
        backward_ones(w, NULL);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 10.0);
    }
}
END_TEST

START_TEST(sink_fires_post_accumulate_hooks)
{
    EM_SCOPE {
        em_tensor *w = int_leaf();
        hook_calls = 0;
        hook_seen = -1;
        em_register_post_accumulate_grad_hook(w, post_hook, NULL);
        backward_ones(w, NULL);
        ck_assert_int_eq(hook_calls, 1);
        ck_assert_double_eq(hook_seen, 1.0 + 5);
    }
}
END_TEST

/* The number of calls of op `name` in the profile since the last reset. */
START_TEST(linear_weight_gradient_into_grad)
{
    static const em_dtype dts[] = {EM_F32, EM_F64};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) EM_SCOPE {
        em_dtype dt = dts[d];
        em_tensor *x = em_to_dtype(em_randn(EM_SHAPE(33, 20), EM_F32, EM_CPU), dt);
        em_tensor *r = em_to_dtype(em_randn(EM_SHAPE(33, 12), EM_F32, EM_CPU), dt);
        em_tensor *w = em_requires_grad_(em_to_dtype(em_randn(EM_SHAPE(12, 20), EM_F32, EM_CPU), dt), true);
        em_tensor *xt = em_transpose(em_contiguous(em_transpose(x, 0, 1)), 0, 1);   /* x as a transposed view */
        em_tensor *dense = em_matmul(em_transpose(r, 0, 1), x);                  /* d loss / d w */
        for (int layout = 0; layout < 2; layout++) {
            em_set_grad(w, em_zeros(EM_SHAPE(12, 20), dt, EM_CPU));
            em_profile_reset();
            em_profile_enable(true);
            em_backward(em_sum(em_mul(em_linear(layout ? xt : x, w, NULL), r), 0, NULL, false));
            em_profile_enable(false);
            ck_assert_int_eq(tu_profiled_calls("add"), 0);   /* the GEMM added it */
            ck_assert_int_eq(tu_profiled_calls("matmul"), 1);
            ck_assert_msg(!memcmp(em_data_ptr(em_grad(w)), em_data_ptr(dense), 12 * 20 * em_dtype_size(dt)),
                          "%s: a zeroed .grad plus the sunk gradient differs from em_matmul's bits", em_dtype_name(dt));
        }
        /* a second backward adds to it: 2 * dense, up to the rounding of one addition */
        em_backward(em_sum(em_mul(em_linear(x, w, NULL), r), 0, NULL, false));
        em_tensor *want = em_mul_scalar(dense, 2.0);
        for (int64_t i = 0; i < 12; i++)
            for (int64_t j = 0; j < 20; j++) {
                double a = em_get(em_grad(w), (int64_t[]){i, j}), b = em_get(want, (int64_t[]){i, j});
                ck_assert_msg(fabs(a - b) <= 1e-6 * (fabs(b) + 1), "%s [%lld,%lld]: %g, want %g", em_dtype_name(dt),
                              (long long)i, (long long)j, a, b);
            }
    }
}
END_TEST

START_TEST(autocast_weight_gradient_unrounded)
{
    EM_SCOPE {
        em_tensor *x = em_randn(EM_SHAPE(40, 24), EM_F32, EM_CPU);
        em_tensor *r = em_randn(EM_SHAPE(40, 16), EM_F32, EM_CPU);
        em_tensor *w = em_requires_grad_(em_randn(EM_SHAPE(16, 24), EM_F32, EM_CPU), true);
        em_set_grad(w, em_zeros(EM_SHAPE(16, 24), EM_F32, EM_CPU));
        em_tensor *y = NULL;
        EM_AUTOCAST_REGION(EM_BF16) { y = em_linear(x, w, NULL); }
        ck_assert_int_eq(y->dtype, EM_BF16);
        em_profile_reset();
        em_profile_enable(true);
        em_backward(em_sum(em_mul(em_to_dtype(y, EM_F32), r), 0, NULL, false));
        em_profile_enable(false);
        ck_assert_int_eq(tu_profiled_calls("add"), 0);   /* nothing added the gradient afterwards */
        /* reference: the bf16 values of g (= r) and x, multiplied in f64 */
        em_tensor *g16 = em_to_dtype(em_to_dtype(r, EM_BF16), EM_F64), *x16 = em_to_dtype(em_to_dtype(x, EM_BF16), EM_F64);
        em_tensor *ref = em_matmul(em_transpose(g16, 0, 1), x16);
        double worst = 0;
        for (int64_t i = 0; i < 16; i++)
            for (int64_t j = 0; j < 24; j++) {
                double a = em_get(em_grad(w), (int64_t[]){i, j}), b = em_get(ref, (int64_t[]){i, j});
                double e = fabs(a - b) / (fabs(b) + 1e-3);
                worst = e > worst ? e : worst;
            }
        ck_assert_msg(worst < 2e-6, "relative error %g: the weight gradient was rounded on its way", worst);
    }
}
END_TEST

/* The activation's gradient through autocast's cast (em__pending_sink_cast):
 * x [M,K] f32 feeds three bf16 linears (one cached cast, three consumers) and
 * an f32 path. x.grad is r0 + sum_i bf16(r_i) bf16(w_i), with each term in f32
 * and unrounded when the linears add into x's pending gradient themselves;
 * rounded to bf16 on the way (the composed path) it is off by up to 2^-9.
 * mode 0: autocast (the sink; no add of [M,K] runs); mode 1: a hook on the
 * cast's output declines it (the hook sees the bf16 sum, the result is the
 * rounded one); mode 2: an explicit cast that also feeds an element-wise op
 * (the cast's backward then runs for that consumer alone). */
static em_tensor *count_hook(em_tensor *g, void *user)
{
    (*(int *)user)++;
    ck_assert_int_eq(g->dtype, EM_BF16);
    return NULL;
}

START_TEST(autocast_activation_gradient_through_cast)
{
    enum { M = 48, K = 40, NO = 24 };
    for (int mode = 0; mode < 3; mode++) EM_SCOPE {
            em_tensor *x = em_requires_grad_(em_randn(EM_SHAPE(M, K), EM_F32, EM_CPU), true);
            em_tensor *r0 = em_randn(EM_SHAPE(M, K), EM_F32, EM_CPU), *w[3], *r[3], *y[3];
            for (int i = 0; i < 3; i++) {
                w[i] = em_to_dtype(em_randn(EM_SHAPE(NO, K), EM_F32, EM_CPU), EM_BF16);
                r[i] = em_randn(EM_SHAPE(M, NO), EM_F32, EM_CPU);
            }
            em_tensor *xs = em_mul(x, em_scalar(1.0, EM_F32, EM_CPU));   /* a non-leaf, as an encoder's activation */
            em_tensor *extra = NULL;
            int hooked = 0;
            if (mode == 0) {
                EM_AUTOCAST_REGION(EM_BF16) {
                    for (int i = 0; i < 3; i++) y[i] = em_linear(xs, w[i], NULL);
                }
            } else {
                em_tensor *xb = em_to_dtype(xs, EM_BF16);
                if (mode == 1) em_register_hook(xb, count_hook, &hooked);
                for (int i = 0; i < 3; i++) y[i] = em_linear(xb, w[i], NULL);
                if (mode == 2) extra = em_sum(em_to_dtype(em_mul(xb, xb), EM_F32), 0, NULL, false);
            }
            em_tensor *loss = em_sum(em_mul(xs, r0), 0, NULL, false);
            for (int i = 0; i < 3; i++) loss = em_add(loss, em_sum(em_mul(em_to_dtype(y[i], EM_F32), r[i]), 0, NULL, false));
            if (extra) loss = em_add(loss, extra);
            em_profile_reset();
            em_profile_enable(true);
            em_backward(loss);
            em_profile_enable(false);
            if (mode == 0) ck_assert_int_eq(tu_profiled_calls("add"), 0);   /* the GEMMs added into x's gradient */
            if (mode == 1) ck_assert_int_eq(hooked, 1);
            /* reference in f64: r0 + sum_i bf16(r_i) w_i (+ 2 xb for mode 2) */
            em_tensor *ref = em_to_dtype(r0, EM_F64);
            for (int i = 0; i < 3; i++)
                ref = em_add(ref, em_matmul(em_to_dtype(em_to_dtype(r[i], EM_BF16), EM_F64), em_to_dtype(w[i], EM_F64)));
            if (mode == 2) ref = em_add(ref, em_mul_scalar(em_to_dtype(em_to_dtype(x, EM_BF16), EM_F64), 2.0));
            /* the largest error relative to the gradient's rms: f32 sums of
             * unrounded terms stay near 1e-7, bf16-rounded terms reach 1e-3 */
            double worst = 0, ss = 0;
            for (int64_t a = 0; a < M; a++)
                for (int64_t b = 0; b < K; b++) {
                    double got = em_get(em_grad(x), (int64_t[]){a, b}), want = em_get(ref, (int64_t[]){a, b});
                    worst = fabs(got - want) > worst ? fabs(got - want) : worst;
                    ss += want * want;
                }
            worst /= sqrt(ss / (M * K));
            if (mode == 1) ck_assert_msg(worst > 1e-4, "mode 1: relative error %g: was the hook's cast bypassed?", worst);
            else ck_assert_msg(worst < 1e-5, "mode %d: relative error %g: the gradient was rounded on its way", mode, worst);
            ck_assert_msg(worst < 5e-2, "mode %d: relative error %g", mode, worst);   /* bf16 roundings: up to 2e-2 seen */
        }
}
END_TEST

START_TEST(misuse_matmul_into_bf16)
{
    tu_expect_misuse("em__matmul_into: expected c [M,N] += a [M,K] b [K,N]");
    em_tensor *a = em_zeros(EM_SHAPE(4, 4), EM_BF16, EM_CPU);
    em__matmul_into(em_zeros(EM_SHAPE(4, 4), EM_BF16, EM_CPU), a, a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grad_sink");
    tu_add_tests(tu_case(s, "grad_sink", 120), sink_matches_dense_bits, sink_declined_when_it_would_change_the_result,
                 sink_fires_post_accumulate_hooks, linear_weight_gradient_into_grad, autocast_weight_gradient_unrounded,
                 autocast_activation_gradient_through_cast);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_matmul_into_bf16);
    return tu_run_suite(s);
}
