/* ember — the CPU kernels of the fused ops ADAMW_STEP and UNSCALE (contracts
 * in tensor/ops.h; front-ends in tensor/op_fused.c).
 *
 * ADAMW_STEP runs torch.optim.AdamW's (or, with L2 decay, Adam's) single-
 * tensor update operation for operation (the math and its order are explained in optim/adamw.c): every
 * scalar rounded once to the dtype, torch's fused multiply-adds where the op
 * asks for them (i[1]; a CPU with AVX2+FMA, as torch's vectorized kernels),
 * none otherwise, so trajectories are bit-identical to torch's and to CUDA's
 * kernel (tensor/cuda/k_adamw.cu). UNSCALE multiplies by inv_scale and flags
 * inf/NaN on the exponent bits, as torch's _amp_foreach_non_finite_check_and_
 * unscale_. */
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define FMA_TARGET __attribute__((target("avx2,fma")))
static bool cpu_has_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
#define FMA_TARGET
static bool cpu_has_fma(void)
{
#ifdef __FP_FAST_FMAF
    return true;
#else
    return false;
#endif
}
#endif
#define MADD_PLAIN(a, b, c) ((a) * (b) + (c))

#define ADAMW_GRAIN 8192

/* Runs BODY with b, e bound to pieces of [0, n) on OpenMP threads (one piece
 * when n < grain or inside a parallel region); pieces start on multiples of
 * 64 elements. Elementwise, so the split never changes a result. */
#define PARALLEL(n_, grain_, BODY)                                                                  \
    do {                                                                                            \
        int64_t n__ = (n_), nt__ = n__ / (grain_);                                                  \
        if (nt__ > em_num_threads()) nt__ = em_num_threads();                                       \
        if (nt__ <= 1 || omp_in_parallel()) {                                                       \
            int64_t b = 0, e = n__;                                                                 \
            BODY;                                                                                   \
        } else {                                                                                    \
            _Pragma("omp parallel num_threads((int)nt__)") {                                        \
                int64_t t__ = omp_get_thread_num(), T__ = omp_get_num_threads();                    \
                int64_t b = t__ == 0 ? 0 : (n__ * t__ / T__) & ~(int64_t)63;                        \
                int64_t e = t__ == T__ - 1 ? n__ : (n__ * (t__ + 1) / T__) & ~(int64_t)63;          \
                if (b < e) { BODY; }                                                                \
            }                                                                                       \
        }                                                                                           \
    } while (0)

/* lerp as torch's: base + coef*(g - m), with (base, coef) = (m, w1) or
 * (g, -(1-w1)); addcmul v*beta2 + (w2*g)*g; both fused where torch fuses. */
#define ADAMW_KERNEL(NAME, T, SQRT, MADD, ATTR)                                                                 \
    static ATTR void NAME(T *restrict p, const T *restrict g, T *restrict m, T *restrict v, T *restrict vmax,  \
                          int64_t b, int64_t e, const double *f, bool small, bool l2)                          \
    {                                                                                                           \
        const T decay = (T)f[0], w1 = (T)f[1], coef = small ? w1 : -((T)1 - w1);                               \
        const T beta2 = (T)f[2], w2 = (T)f[3], bc2s = (T)f[4], neg_step = (T)f[5];                              \
        const T eps = (T)f[6], sign = (T)f[7];                                                                 \
        if (l2) {   /* torch.optim.Adam: g = g + wd p (add with alpha), p not decayed                   */ \
            for (int64_t i = b; i < e; i++) {                                                                   \
                T pi = p[i], gi = MADD(pi, decay, g[i] * sign), mo = m[i];                                      \
                T mi = MADD(coef, gi - mo, small ? mo : gi);                                                    \
                T vb = v[i] * beta2;                                                                            \
                T vi = MADD(w2 * gi, gi, vb);                                                                   \
                T mx = vi;                                                                                      \
                if (vmax) {                                                                                     \
                    mx = vmax[i];                                                                               \
                    mx = (vi > mx || vi != vi) ? vi : mx;                                                       \
                    vmax[i] = mx;                                                                               \
                }                                                                                               \
                T d = SQRT(mx) / bc2s + eps;                                                                    \
                p[i] = pi + neg_step * mi / d;                                                                  \
                m[i] = mi;                                                                                      \
                v[i] = vi;                                                                                      \
            }                                                                                                   \
        } else if (vmax) {                                                                                      \
            for (int64_t i = b; i < e; i++) {                                                                   \
                T gi = g[i] * sign, pi = p[i] * decay, mo = m[i];                                               \
                T mi = MADD(coef, gi - mo, small ? mo : gi);                                                    \
                T vb = v[i] * beta2;                                                                            \
                T vi = MADD(w2 * gi, gi, vb);                                                                   \
                T mx = vmax[i];                                                                                 \
                mx = (vi > mx || vi != vi) ? vi : mx;                                                           \
                T d = SQRT(mx) / bc2s + eps;                                                                    \
                p[i] = pi + neg_step * mi / d;                                                                  \
                m[i] = mi;                                                                                      \
                v[i] = vi;                                                                                      \
                vmax[i] = mx;                                                                                   \
            }                                                                                                   \
        } else {                                                                                                \
            for (int64_t i = b; i < e; i++) {                                                                   \
                T gi = g[i] * sign, pi = p[i] * decay, mo = m[i];                                               \
                T mi = MADD(coef, gi - mo, small ? mo : gi);                                                    \
                T vb = v[i] * beta2;                                                                            \
                T vi = MADD(w2 * gi, gi, vb);                                                                   \
                T d = SQRT(vi) / bc2s + eps;                                                                    \
                p[i] = pi + neg_step * mi / d;                                                                  \
                m[i] = mi;                                                                                      \
                v[i] = vi;                                                                                      \
            }                                                                                                   \
        }                                                                                                       \
    }
ADAMW_KERNEL(adamw_float, float, sqrtf, MADD_PLAIN, )
ADAMW_KERNEL(adamw_double, double, sqrt, MADD_PLAIN, )
ADAMW_KERNEL(adamw_float_fma, float, sqrtf, fmaf, FMA_TARGET)
ADAMW_KERNEL(adamw_double_fma, double, sqrt, fma, FMA_TARGET)

int em_cpu_ADAMW_STEP(const em_kargs *k)
{
    em_tensor *p = k->out[0], *m = k->out[1], *v = k->out[2], *vm = k->out[3], *g = k->in[0];
    int64_t n = em_numel(p);
    bool small = k->i[0] != 0, fused = k->i[1] != 0 && cpu_has_fma(), l2 = k->i[2] != 0;
    const double *f = k->f;
    if (p->dtype == EM_F32) {
        float *pp = em_data_ptr(p), *mp = em_data_ptr(m), *vp = em_data_ptr(v), *xp = vm ? em_data_ptr(vm) : NULL;
        const float *gp = em_data_ptr(g);
        if (fused) PARALLEL(n, ADAMW_GRAIN, adamw_float_fma(pp, gp, mp, vp, xp, b, e, f, small, l2));
        else PARALLEL(n, ADAMW_GRAIN, adamw_float(pp, gp, mp, vp, xp, b, e, f, small, l2));
    } else {
        double *pp = em_data_ptr(p), *mp = em_data_ptr(m), *vp = em_data_ptr(v), *xp = vm ? em_data_ptr(vm) : NULL;
        const double *gp = em_data_ptr(g);
        if (fused) PARALLEL(n, ADAMW_GRAIN, adamw_double_fma(pp, gp, mp, vp, xp, b, e, f, small, l2));
        else PARALLEL(n, ADAMW_GRAIN, adamw_double(pp, gp, mp, vp, xp, b, e, f, small, l2));
    }
    return EM_OK;
}

#define UNSCALE_GRAIN 32768

/* Multiplies n f32 values by inv in place; true when one was inf or NaN
 * (detected on the exponent bits, so the loop vectorizes). */
static bool unscale_f32(float *p, int64_t n, float inv)
{
    unsigned bad = 0;
    bool mul = inv != 1.0f;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n >= 2 * UNSCALE_GRAIN)
    for (int64_t i = 0; i < n; i++) {
        float v = p[i];
        uint32_t u;
        memcpy(&u, &v, 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
        if (mul) p[i] = v * inv;
    }
    return bad != 0;
}

static bool unscale_f64(double *p, int64_t n, float inv)
{
    unsigned bad = 0;
    double d = (double)inv;
    bool mul = inv != 1.0f;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n >= 2 * UNSCALE_GRAIN)
    for (int64_t i = 0; i < n; i++) {
        double v = p[i];
        uint64_t u;
        memcpy(&u, &v, 8);
        bad |= (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
        if (mul) p[i] = v * d;
    }
    return bad != 0;
}

int em_cpu_UNSCALE(const em_kargs *k)
{
    float inv = (float)k->f[0];
    bool bad = false;
    for (int i = 0; i < k->nlist; i++) {
        em_tensor *t = k->list[i];
        bad |= t->dtype == EM_F32 ? unscale_f32(em_data_ptr(t), em_numel(t), inv)
                                  : unscale_f64(em_data_ptr(t), em_numel(t), inv);
    }
    *(float *)em_data_ptr(k->out[0]) = bad ? 1.0f : 0.0f;
    return EM_OK;
}
