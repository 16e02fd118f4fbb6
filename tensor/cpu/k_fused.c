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

EM__WIDE_VECTORS   /* element-wise loops only: tensor/numeric.h */

#define ADAMW_GRAIN 8192

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
ADAMW_KERNEL(adamw_float, float, sqrtf, EM__MADD_PLAIN, )
ADAMW_KERNEL(adamw_double, double, sqrt, EM__MADD_PLAIN, )
ADAMW_KERNEL(adamw_float_fma, float, sqrtf, fmaf, EM__FMA_TARGET)
ADAMW_KERNEL(adamw_double_fma, double, sqrt, fma, EM__FMA_TARGET)

int em_cpu_ADAMW_STEP(const em_kargs *k)
{
    em_tensor *p = k->out[0], *m = k->out[1], *v = k->out[2], *vm = k->out[3], *g = k->in[0];
    int64_t n = em_numel(p);
    bool small = k->i[0] != 0, fused = k->i[1] != 0 && em__cpu_has_fma(), l2 = k->i[2] != 0;
    const double *f = k->f;
    if (p->dtype == EM_F32) {
        float *pp = em_data_ptr(p), *mp = em_data_ptr(m), *vp = em_data_ptr(v), *xp = vm ? em_data_ptr(vm) : NULL;
        const float *gp = em_data_ptr(g);
        if (fused) EM__PARALLEL_RANGE(n, ADAMW_GRAIN, adamw_float_fma(pp, gp, mp, vp, xp, b, e, f, small, l2));
        else EM__PARALLEL_RANGE(n, ADAMW_GRAIN, adamw_float(pp, gp, mp, vp, xp, b, e, f, small, l2));
    } else {
        double *pp = em_data_ptr(p), *mp = em_data_ptr(m), *vp = em_data_ptr(v), *xp = vm ? em_data_ptr(vm) : NULL;
        const double *gp = em_data_ptr(g);
        if (fused) EM__PARALLEL_RANGE(n, ADAMW_GRAIN, adamw_double_fma(pp, gp, mp, vp, xp, b, e, f, small, l2));
        else EM__PARALLEL_RANGE(n, ADAMW_GRAIN, adamw_double(pp, gp, mp, vp, xp, b, e, f, small, l2));
    }
    return EM_OK;
}

#define UNSCALE_GRAIN 32768

/* Multiplies n values of T by inv in place (f64: by (double)inv); true when one
 * was inf or NaN, detected on the exponent bits (held in the unsigned U), so
 * the loop vectorizes. */
#define UNSCALE_LOOP(NAME, T, U, EXP)                                                                   \
    static bool NAME(T *p, int64_t n, float inv)                                                        \
    {                                                                                                   \
        unsigned bad = 0;                                                                               \
        const T d = (T)inv;                                                                             \
        const bool mul = inv != 1.0f;                                                                   \
        _Pragma("omp parallel for reduction(| : bad) schedule(static) if (n >= 2 * UNSCALE_GRAIN)")     \
        for (int64_t i = 0; i < n; i++) {                                                               \
            T v = p[i];                                                                                 \
            U u;                                                                                        \
            memcpy(&u, &v, sizeof u);                                                                   \
            bad |= (u & EXP) == EXP;                                                                    \
            if (mul) p[i] = v * d;                                                                      \
        }                                                                                               \
        return bad != 0;                                                                                \
    }
UNSCALE_LOOP(unscale_f32, float, uint32_t, 0x7f800000u)
UNSCALE_LOOP(unscale_f64, double, uint64_t, 0x7ff0000000000000ull)

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
