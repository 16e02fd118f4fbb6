/* The `cuda` suite: fused attention (op SDPA through cuDNN, tensor/cuda/
 * k_sdpa_cudnn.cu) against the composed path on CUDA and against the CPU in
 * f32. Exits 77 (skipped) when no GPU is registered. Plain C, no Check (a
 * CUDA context does not survive fork()).
 *
 * For bf16 and f16, q, k, v [2,3,33,64] (k a transposed view, v a slice of
 * a wider tensor) with a right-padding key mask (batch 1 keeps 20 of 33
 * keys) and without a mask, em_scaled_dot_product_attention must:
 *   - take the fused path (its output's grad_fn is "sdpa": one node);
 *   - match, forward within 1e-2 and the gradients of q, k, v within 2e-2
 *     (|x - r| <= tol (|r| + max|r|)), both the composed ops on CUDA (same
 *     dtype) and the CPU's composed path in f32;
 *   - build its two plans once: a second identical step only hits the cache.
 * Also: a head dim of 12 (cuDNN wants multiples of 8), dropout, and a mask
 * that is not a right padding all take the composed path, with the same
 * results as before the fused path existed.
 * EMBER_CUDA_SELFTEST=1 runs everything with the CPU as the device (the loop
 * kernel plays cuDNN's part; no fused-path or plan-cache checks). */
#include "ember.h"
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* tensor/cuda/k_sdpa_cudnn.cu; absent from builds without CUDA */
extern void em__cuda_sdpa_plan_stats(int64_t *builds, int64_t *hits) __attribute__((weak));

#include "count_check.h"

static bool self_test;
static em_device dev;

static uint64_t rng_state = 0x5d9a;
static double uniform(double lo, double hi)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(rng_state >> 11) / 9007199254740992.0;
}

/* f32 CPU tensor of shape, U[lo,hi) */
static em_tensor *rand_cpu(int nd, const int64_t *shape, double lo, double hi)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)uniform(lo, hi);
    em_tensor *t = em_from_data(v, nd, shape, EM_F32);
    free(v);
    return t;
}

static double *doubles(em_tensor *t, int64_t *n)
{
    em_tensor *h = em_contiguous(em_to_dtype(em_to(t, EM_CPU), EM_F64));
    *n = em_numel(h);
    double *v = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
    memcpy(v, em_data_ptr(h), sizeof(double) * (size_t)*n);
    return v;
}

/* worst |a - r| / (tol (|r| + max|r|)); > 1 fails */
static double worst_ratio(em_tensor *a, em_tensor *r, double tol)
{
    if (!a || !r) return INFINITY;
    int64_t na, nr;
    double *x = doubles(a, &na), *y = doubles(r, &nr), mx = 0, worst = 0;
    if (na != nr) worst = INFINITY;
    for (int64_t i = 0; i < nr && na == nr; i++) mx = fmax(mx, fabs(y[i]));
    for (int64_t i = 0; i < nr && na == nr; i++) {
        double q = fabs(x[i] - y[i]) / (tol * (fabs(y[i]) + mx) + 1e-300);
        if (!(q <= worst)) worst = isnan(q) ? INFINITY : q;
    }
    free(x), free(y);
    return worst;
}

/* The composed path, written out with public ops (op_grad.c's sdpa_composed). */
static em_tensor *composed(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask)
{
    em_tensor *s = em_matmul(em_mul_scalar(q, 1.0 / sqrt((double)q->shape[3])), em_transpose(k, 2, 3));
    if (mask) {
        double low = q->dtype == EM_F16 ? -65504.0 : q->dtype == EM_BF16 ? -3.3895313892515355e38 : -3.4028234663852886e38;
        s = em_masked_fill(s, em_eq(mask, em_scalar(0, EM_BOOL, mask->device)), low);
    }
    return em_matmul(em_softmax(s, -1), v);
}

typedef struct run {
    em_tensor *out, *g[3];
    const char *fn;
} run;

/* Forward on the given leaves' copies (dtype dt, device d), then backward of
 * sum(out * w); fused = the public op, else the composed ops. Results are
 * owned by the enclosing scope. */
static run step(em_tensor *const *base, em_tensor *w, em_tensor *mask, em_dtype dt, em_device d, bool fused,
                double dropout)
{
    run r = {0};
    em_tensor *x[3];
    for (int i = 0; i < 3; i++) x[i] = em_requires_grad_(em_contiguous(em_to_dtype(em_to(base[i], d), dt)), true);
    /* k as a transposed view of [B,H,D,S], v as a narrow of [B,H,S,2D] */
    em_tensor *k = em_transpose(em_contiguous(em_transpose(x[1], 2, 3)), 2, 3);
    int64_t vs[4] = {x[2]->shape[0], x[2]->shape[1], x[2]->shape[2], 2 * x[2]->shape[3]};
    em_tensor *wide = em_zeros(4, vs, dt, d);
    em_tensor *v = em_add(em_narrow(wide, 3, 0, x[2]->shape[3]), x[2]);
    em_tensor *m = mask ? em_to(mask, d) : NULL;
    r.out = fused ? em_scaled_dot_product_attention(x[0], k, v, m, dropout, 3, 0) : composed(x[0], k, v, m);
    if (!r.out) return r;
    r.fn = em_grad_fn_name(r.out);
    em_backward(em_sum(em_mul(r.out, em_to_dtype(em_to(w, d), dt)), 0, NULL, false));
    for (int i = 0; i < 3; i++) r.g[i] = em_grad(x[i]);
    return r;
}

static void compare(const char *what, run a, run b, double tol_fwd, double tol_bwd)
{
    static const char *names[] = {"dq", "dk", "dv"};
    double w = worst_ratio(a.out, b.out, tol_fwd);
    CHECK(w <= 1, "%s: forward differs (worst err/tol %.3g)", what, w);
    printf("  %-44s out %.3g", what, w);
    for (int i = 0; i < 3; i++) {
        w = worst_ratio(a.g[i], b.g[i], tol_bwd);
        CHECK(w <= 1, "%s: %s differs (worst err/tol %.3g)", what, names[i], w);
        printf(" %s %.3g", names[i], w);
    }
    printf("\n");
}

static void test_dtype(em_dtype dt, bool with_mask)
{
    em_scope_begin();
    const int64_t B = 2, H = 3, S = 33, D = 64;
    int64_t shape[4] = {B, H, S, D};
    em_tensor *base[3] = {rand_cpu(4, shape, -2, 2), rand_cpu(4, shape, -2, 2), rand_cpu(4, shape, -1, 1)};
    em_tensor *w = rand_cpu(4, shape, -1, 1);
    uint8_t keep[2][33];
    for (int j = 0; j < S; j++) keep[0][j] = 1, keep[1][j] = j < 20;
    em_tensor *mask = with_mask ? em_from_data(keep, 4, (int64_t[]){B, 1, 1, S}, EM_BOOL) : NULL;
    char what[96];
    snprintf(what, sizeof what, "%s %s", em_dtype_name(dt), with_mask ? "padded" : "no mask");

    int64_t b0 = 0, h0 = 0, b1 = 0, h1 = 0, b2 = 0, h2 = 0;
    if (!self_test && em__cuda_sdpa_plan_stats) em__cuda_sdpa_plan_stats(&b0, &h0);
    run fused = step(base, w, mask, dt, dev, true, 0.0);
    CHECK(fused.out && fused.g[0] && fused.g[1] && fused.g[2], "%s: the fused step failed: %s", what, em_last_error());
    if (!self_test)
        CHECK(fused.fn && !strcmp(fused.fn, "sdpa"), "%s: the fused path was not taken (grad_fn %s); run with "
              "EMBER_VERBOSE=1 for cuDNN's reason", what, fused.fn ? fused.fn : "none");
    run comp = step(base, w, mask, dt, dev, false, 0.0);
    run cpu = step(base, w, mask, EM_F32, EM_CPU, true, 0.0);
    CHECK(cpu.fn && strcmp(cpu.fn, "sdpa") != 0, "%s: the CPU must keep the composed path", what);
    if (fused.out && comp.out && cpu.out) {
        char w2[128];
        snprintf(w2, sizeof w2, "%s: fused vs composed (%s)", what, self_test ? "cpu" : "cuda");
        compare(w2, fused, comp, 1e-2, 2e-2);
        snprintf(w2, sizeof w2, "%s: fused vs cpu f32", what);
        compare(w2, fused, cpu, 1e-2, 2e-2);
    }
    if (!self_test && em__cuda_sdpa_plan_stats) {
        em__cuda_sdpa_plan_stats(&b1, &h1);
        run again = step(base, w, mask, dt, dev, true, 0.0);
        em__cuda_sdpa_plan_stats(&b2, &h2);
        CHECK(again.out && b2 == b1 && h2 >= h1 + 2, "%s: second step: %lld new plans (want 0), %lld cache hits "
              "(want 2)", what, (long long)(b2 - b1), (long long)(h2 - h1));
        CHECK(b1 - b0 <= 2, "%s: first step built %lld plans (at most 2: forward and backward)", what,
              (long long)(b1 - b0));
        double wr = worst_ratio(again.out, fused.out, 1e-6);
        CHECK(wr <= 1, "%s: a second identical step gives a different output (%.3g)", what, wr);
    }
    em_scope_end();
}

/* Cases the fused path must leave to the composed ops. */
static void test_fallbacks(void)
{
    em_scope_begin();
    int64_t shape[4] = {2, 2, 9, 12};   /* head dim 12: not a multiple of 8 */
    em_tensor *base[3] = {rand_cpu(4, shape, -1, 1), rand_cpu(4, shape, -1, 1), rand_cpu(4, shape, -1, 1)};
    em_tensor *w = rand_cpu(4, shape, -1, 1);
    run a = step(base, w, NULL, EM_BF16, dev, true, 0.0), c = step(base, w, NULL, EM_F32, EM_CPU, true, 0.0);
    CHECK(a.fn && strcmp(a.fn, "sdpa") != 0, "head dim 12 must compose (grad_fn %s)", a.fn ? a.fn : "none");
    compare("bf16 head dim 12 (composed) vs cpu f32", a, c, 1e-2, 2e-2);

    int64_t shape2[4] = {2, 2, 9, 16};
    em_tensor *base2[3] = {rand_cpu(4, shape2, -1, 1), rand_cpu(4, shape2, -1, 1), rand_cpu(4, shape2, -1, 1)};
    em_tensor *w2 = rand_cpu(4, shape2, -1, 1);
    run dr = step(base2, w2, NULL, EM_BF16, dev, true, 0.1);
    CHECK(dr.fn && strcmp(dr.fn, "sdpa") != 0, "dropout must compose (grad_fn %s)", dr.fn ? dr.fn : "none");
    /* key 0 masked, the rest kept: not a right padding */
    uint8_t keep[2][9] = {{0, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}};
    em_tensor *mask = em_from_data(keep, 4, (int64_t[]){2, 1, 1, 9}, EM_BOOL);
    run lp = step(base2, w2, mask, EM_BF16, dev, true, 0.0), lc = step(base2, w2, mask, EM_F32, EM_CPU, true, 0.0);
    CHECK(lp.fn && strcmp(lp.fn, "sdpa") != 0, "a left-padding mask must compose (grad_fn %s)", lp.fn ? lp.fn : "none");
    compare("bf16 left padding (composed) vs cpu f32", lp, lc, 1e-2, 2e-2);
    em_scope_end();
}

int main(void)
{
    self_test = getenv("EMBER_CUDA_SELFTEST") && atoi(getenv("EMBER_CUDA_SELFTEST"));
    if (!self_test && !em__backend(EM_DEVICE_CUDA)) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    dev = self_test ? EM_CPU : EM_CUDA(0);
    const em_dtype dts[] = {EM_BF16, EM_F16};
    for (int i = 0; i < 2; i++)
        for (int m = 1; m >= 0; m--) test_dtype(dts[i], m);
    if (!self_test) test_fallbacks();
    printf("\n%d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
