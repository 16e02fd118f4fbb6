/* ember — f32 transcendental functions that vectorize.
 *
 * glibc's expf/tanhf/erff are scalar calls, so a loop over them runs one
 * element at a time. These are straight-line code (selects, no branches, no
 * calls) that gcc vectorizes inside `#pragma omp simd` loops. Accuracy,
 * measured against the f64 libm over a dense sweep of f32 inputs:
 *   em__expf         <= 2 ulp, subnormal results included; inf/NaN/overflow as expf
 *   em__tanhf        <= 2 ulp
 *   em__sigmoidf     <= 3 ulp
 *   em__gelu_erff    <= 5e-7 relative (x * Phi(x), Phi via erfc, so the
 *                    negative tail keeps its relative accuracy)
 *   em__gelu_tanhf   torch's tanh approximation, written x / (1 + exp(-2u)):
 *                    <= 2e-6 relative wherever |result| > 1e-6
 * Polynomial coefficients were fitted for ember (near-minimax least squares)
 * on the ranges noted beside them.
 */
#ifndef EMBER_CPU_VMATH_H
#define EMBER_CPU_VMATH_H

#include <math.h>
#include <stdint.h>

/* Always inlined: a call left in a loop (gcc -O2 declines to inline the larger
 * ones) stops it from vectorizing. */
#define EM__VMATH static inline __attribute__((always_inline))

#ifdef __FMA__
#define EM__FMAF(a, b, c) fmaf(a, b, c)
#else
#define EM__FMAF(a, b, c) ((a) * (b) + (c))
#endif

EM__VMATH float em__bits_to_f32(int32_t i)
{
    union { int32_t i; float f; } u = {.i = i};
    return u.f;
}

/* exp(r) for r in [-ln2/2, ln2/2]: degree 6 in Horner form (relative error
 * 2e-9); the core of em__expf2 and of k_nn.c's exp. */
EM__VMATH float em__exp_reduced(float r)
{
    float p = 1.382953720e-03f;
    p = EM__FMAF(p, r, 8.374772035e-03f);
    p = EM__FMAF(p, r, 4.166835546e-02f);
    p = EM__FMAF(p, r, 1.666642129e-01f);
    p = EM__FMAF(p, r, 4.999999106e-01f);
    p = EM__FMAF(p, r, 1.0f);
    p = EM__FMAF(p, r, 1.0f);
    return p;
}

/* exp(a + b), where b is a small correction to a (pass 0 when there is none):
 * the pair lets callers keep the low part of an argument such as -x*x/2. */
EM__VMATH float em__expf2(float a, float b)
{
    const float log2e = 1.44269504089f, ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187e-06f;
    float x = a + b;
    /* clamp with selects (fminf/fmaxf do not vectorize); NaN becomes -104 here */
    float xc = x > -104.0f ? x : -104.0f;
    xc = xc < 89.0f ? xc : 89.0f;
    /* n = round(xc / ln2) by the 1.5*2^23 trick (exact for |n| < 2^22). */
    float n = (xc * log2e + 12582912.0f) - 12582912.0f;
    float r = EM__FMAF(-n, ln2_hi, a);   /* exact: ln2_hi has 15 significant bits */
    r = EM__FMAF(-n, ln2_lo, r) + b;      /* |r| <= ln2/2 (+ rounding) */
    float p = em__exp_reduced(r);
    /* times 2^n in two steps, so n in [-150, 128] stays representable and a
     * subnormal result is rounded once. */
    int32_t ni = (int32_t)n;
    int32_t n1 = ni >> 1, n2 = ni - n1;
    float y = p * em__bits_to_f32((n1 + 127) << 23) * em__bits_to_f32((n2 + 127) << 23);
    y = x > 89.0f ? INFINITY : y;
    y = x < -104.0f ? 0.0f : y;
    return x != x ? x : y;
}

EM__VMATH float em__expf(float x) { return em__expf2(x, 0.0f); }

EM__VMATH float em__tanhf(float x)
{
    float ax = fabsf(x), u = x * x;
    /* |x| < 0.55: tanh(x) = x + x^3 P(x^2), P fitted on [0, 0.3025] (error 4e-10) */
    float p = 2.528538229e-03f;
    p = EM__FMAF(p, u, -8.527961560e-03f);
    p = EM__FMAF(p, u, 2.181888185e-02f);
    p = EM__FMAF(p, u, -5.396474898e-02f);
    p = EM__FMAF(p, u, 1.333332509e-01f);
    p = EM__FMAF(p, u, -3.333333433e-01f);
    float small = EM__FMAF(x * u, p, x);
    /* otherwise 1 - 2/(exp(2|x|)+1): no cancellation since the result is >= 0.5 */
    float big = copysignf(1.0f - 2.0f / (em__expf(2.0f * ax) + 1.0f), x);
    return ax < 0.55f ? small : big;
}

EM__VMATH float em__sigmoidf(float x)
{
    float e = em__expf(-fabsf(x));   /* in (0, 1]: never overflows */
    float s = 1.0f / (1.0f + e);
    return x >= 0.0f ? s : e * s;    /* NaN takes the second form and stays NaN */
}

/* x * Phi(x), Phi the standard normal CDF (torch's default gelu). With
 * z = |x|/sqrt2 and t = 2/(2+z): erfc(z) = t * exp(-z^2 + Q(t)), Q fitted in
 * s = (t - 0.58)/0.42 over z in [0, 10.5] (error 8e-9). Phi(-|x|) = erfc(z)/2
 * and Phi(|x|) = 1 - erfc(z)/2. x^2 is split into hi + lo so exp(-x^2/2)
 * keeps full relative accuracy for large |x|. */
EM__VMATH float em__gelu_erff(float x)
{
    float z = fabsf(x) * 0.707106781f;
    z = z < 10.5f ? z : 10.5f;   /* NaN becomes 10.5 here; h below stays NaN */
    float t = 2.0f / (2.0f + z);
    float s = (t - 0.58f) * 2.380952381f;
    float q = -2.394732837e-05f;
    q = EM__FMAF(q, s, 6.052619210e-05f);
    q = EM__FMAF(q, s, 1.323334000e-04f);
    q = EM__FMAF(q, s, -5.728864926e-04f);
    q = EM__FMAF(q, s, -2.564442693e-04f);
    q = EM__FMAF(q, s, 3.870729590e-03f);
    q = EM__FMAF(q, s, -1.233218820e-03f);
    q = EM__FMAF(q, s, -3.014648892e-02f);
    q = EM__FMAF(q, s, 1.671627350e-02f);
    q = EM__FMAF(q, s, 5.746099353e-01f);
    q = EM__FMAF(q, s, -5.631567836e-01f);
    float h = x * x;
#ifdef __FMA__
    float l = fmaf(x, x, -h);
    l = h < INFINITY ? l : 0.0f;
#else
    float l = 0.0f;
#endif
    float tail = 0.5f * t * em__expf2(-0.5f * h, q - 0.5f * l);   /* Phi(-|x|) */
    float phi = x >= 0.0f ? 1.0f - tail : tail;
    return x * phi;
}

/* torch's gelu(approximate="tanh"): 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3),
 * computed as x * sigmoid(2u) = x / (1 + exp(-2u)) so the negative tail keeps
 * relative accuracy. */
EM__VMATH float em__gelu_tanhf(float x)
{
    float u = 0.797884561f * EM__FMAF(0.044715f * x, x * x, x);
    return x / (1.0f + em__expf(-2.0f * u));
}

#endif
