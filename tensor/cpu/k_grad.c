/* ember — CPU kernels that exist only for backward passes (contracts in
 * tensor/ops.h): GELU_BWD and GELU_TANH_BWD, dx = dy * gelu'(x).
 *
 *   erf form:  gelu(x) = x Phi(x)             gelu'(x) = Phi(x) + x phi(x)
 *   tanh form: gelu(x) = x/2 (1 + tanh(u)),   u = c (x + a x^3), c = sqrt(2/pi), a = 0.044715
 *              gelu'(x) = (1 + t)/2 + x/2 (1 - t^2) u',  t = tanh(u), u' = c (1 + 3 a x^2)
 *
 * The rows come from em__iter_run (iter.h): any strides, OpenMP across rows
 * and row pieces. f32 rows that are contiguous run a branch-free `omp simd`
 * loop on vmath.h's functions; f64 uses libm; f16/bf16 rows are converted to
 * f32 in chunks, computed there, and rounded back (nearest even).
 */
#include "tensor/cpu/cpu.h"
#include "tensor/cpu/iter.h"
#include "tensor/cpu/vmath.h"

#include <math.h>
#include <string.h>

#define GELU_A 0.044715
#define SQRT_2_OVER_PI 0.79788456080286535588
#define INV_SQRT_2PI 0.39894228040143267794

/* ---- one element -------------------------------------------------------------- */

/* Phi(x) comes from em__gelu_erff(x) / x, which keeps the forward kernel's
 * accuracy (5e-7 relative) and vectorizes; near 0 (where the quotient is
 * inexact or 0/0) Phi is 1/2 to far below f32 resolution. */
static inline __attribute__((always_inline)) float gelu_grad_f32(float x)
{
    float phi_cdf = fabsf(x) < 1e-20f ? 0.5f : em__gelu_erff(x) / x;
    float pdf = (float)INV_SQRT_2PI * em__expf(-0.5f * x * x);
    return phi_cdf + x * pdf;
}

/* With s = sigmoid(2u): (1 + t)/2 = s and (1 - t^2)/4 = s sigmoid(-2u), so
 * gelu'(x) = s + 2 x s sigmoid(-2u) u'. Both sigmoids are accurate in their
 * tails, where 1 - t*t would cancel. */
static inline float gelu_tanh_grad_f32(float x)
{
    float x2 = x * x;
    float u2 = 2.0f * (float)SQRT_2_OVER_PI * EM__FMAF((float)GELU_A * x, x2, x);
    float du = (float)SQRT_2_OVER_PI * EM__FMAF(3.0f * (float)GELU_A, x2, 1.0f);
    float s = em__sigmoidf(u2), sm = em__sigmoidf(-u2);
    return EM__FMAF(2.0f * x * s, sm * du, s);
}

static inline double gelu_grad_f64(double x)
{
    return 0.5 * erfc(-x * 0.70710678118654752440) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}

static inline double gelu_tanh_grad_f64(double x)
{
    double x2 = x * x, t = tanh(SQRT_2_OVER_PI * (x + GELU_A * x * x2));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_A * x2);
}

/* ---- rows: p[0] = dx, p[1] = x, p[2] = dy ----------------------------------------- */

#define GRAD_ROW(NAME, T, GRAD)                                                           \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx)                    \
    {                                                                                     \
        (void)ctx;                                                                        \
        if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == sizeof(T)) {               \
            T *o = (T *)p[0];                                                             \
            const T *x = (const T *)p[1], *g = (const T *)p[2];                           \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = g[i] * GRAD(x[i]); \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) {                                             \
                T x = *(const T *)(p[1] + i * s[1]), g = *(const T *)(p[2] + i * s[2]);   \
                *(T *)(p[0] + i * s[0]) = g * GRAD(x);                                    \
            }                                                                             \
        }                                                                                 \
    }
GRAD_ROW(gelu_row_f32, float, gelu_grad_f32)
GRAD_ROW(gelu_row_f64, double, gelu_grad_f64)
GRAD_ROW(gelu_tanh_row_f32, float, gelu_tanh_grad_f32)
GRAD_ROW(gelu_tanh_row_f64, double, gelu_tanh_grad_f64)

/* f16/bf16: every operand shares the dtype (the front-end checks it). */
enum { CHUNK = 256 };
typedef struct half_ctx { em_iter_fn f32_row; em_dtype dt; } half_ctx;

static void load_half(float *dst, const char *src, int64_t stride, em_dtype dt, int64_t n)
{
    if (stride == 2) {
        em__convert_n(dst, EM_F32, src, dt, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + i * stride, 2);
        dst[i] = dt == EM_F16 ? em__f16_to_f32(h) : em__bf16_to_f32(h);
    }
}

static void half_row(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const half_ctx *c = vctx;
    _Alignas(64) float o[CHUNK], x[CHUNK], g[CHUNK];
    char *q[3] = {(char *)o, (char *)x, (char *)g};
    const int64_t qs[3] = {sizeof(float), sizeof(float), sizeof(float)};
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        load_half(x, p[1] + i0 * s[1], s[1], c->dt, m);
        load_half(g, p[2] + i0 * s[2], s[2], c->dt, m);
        c->f32_row(q, qs, m, NULL);
        char *dst = p[0] + i0 * s[0];
        if (s[0] == 2) {
            em__convert_n(dst, c->dt, o, EM_F32, m);
            continue;
        }
        for (int64_t i = 0; i < m; i++) {
            uint16_t h = c->dt == EM_F16 ? em__f32_to_f16(o[i]) : em__f32_to_bf16(o[i]);
            memcpy(dst + i * s[0], &h, 2);
        }
    }
}

static int gelu_backward(const em_kargs *k, em_iter_fn row_f32, em_iter_fn row_f64)
{
    em_tensor *ts[3] = {k->out[0], k->in[0], k->in[1]};
    em_dtype dt = ts[0]->dtype;
    for (int i = 1; i < 3; i++)
        if (ts[i]->dtype != dt)
            return em__fail(EM_ERR_UNSUPPORTED, "cpu: %s: operands differ in dtype (%s, %s)",
                            em_op_table[k->op].name, em_dtype_name(dt), em_dtype_name(ts[i]->dtype));
    switch (dt) {
    case EM_F32: em__iter_run(3, ts, row_f32, NULL, EM_ITER_GRAIN_HEAVY); return EM_OK;
    case EM_F64: em__iter_run(3, ts, row_f64, NULL, EM_ITER_GRAIN_HEAVY); return EM_OK;
    case EM_F16:
    case EM_BF16: {
        half_ctx c = {.f32_row = row_f32, .dt = dt};
        em__iter_run(3, ts, half_row, &c, EM_ITER_GRAIN_HEAVY);
        return EM_OK;
    }
    default:
        return em__fail(EM_ERR_UNSUPPORTED, "cpu: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
    }
}

int em_cpu_GELU_BWD(const em_kargs *k) { return gelu_backward(k, gelu_row_f32, gelu_row_f64); }
int em_cpu_GELU_TANH_BWD(const em_kargs *k) { return gelu_backward(k, gelu_tanh_row_f32, gelu_tanh_row_f64); }
