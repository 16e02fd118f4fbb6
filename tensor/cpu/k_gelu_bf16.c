/* ember — GELU (erf form) and its backward on bf16 operands, read and written
 * as bf16 with f32 math in one pass (no f32 staging buffers).
 *
 * Why a second GELU: the f32 kernel (vmath.h's em__gelu_erff, 5e-7 relative)
 * must keep its bits, and it costs about 60 vector operations per 16 values
 * (a divide, an 11-term polynomial, an exp with a split argument); the
 * backward adds a second exp and a second divide. A bf16 result has 8
 * significant bits, so this form trades digits the rounding drops anyway for
 * speed:
 *   z = |x|/sqrt2, t = 2/(2+z)      reciprocal estimate + one Newton step
 *   E = exp(-x^2/2)                 degree-6 exp, scaled by vscalefps
 *   Phi(-|x|) = t/2 * E * R(s)      R(t) = erfc(z) exp(z^2) / t, fitted for
 *                                   ember in s = (t-0.58)/0.42, degree 8
 *                                   (2e-7 relative over z in [0, 10.5])
 *   gelu(x)  = x Phi(x)             gelu'(x) = Phi(x) + x E / sqrt(2 pi)
 * Before rounding the f32 value is within about 1e-6 relative of the exact
 * one (checked against f64 in tests/test_gelu_bf16.c), so the bf16 result is
 * the correctly rounded one except where the exact value lies within that
 * distance of a rounding boundary. One exp serves both terms of the backward.
 * NaN propagates; gelu(-inf) is NaN and gelu(+inf) +inf, as the f32 kernel.
 *
 * Only where the target has AVX-512F/BW/VL (the default -march=native build
 * on the Xeons and Zen 4 seen so far); elsewhere the table entries stay NULL
 * and bf16 GELU runs through the f32 loop as before. Every row shape (strided
 * or not) goes through the same vector code, so the bits do not depend on
 * layout or on how the iterator splits the work. */
#include "tensor/cpu/cpu.h"
#include "tensor/bf16x16.h"

#include <string.h>

#if defined(EM__HAVE_BF16X16)

/* Phi(x) and E = exp(-x^2/2) for 16 lanes. */
static inline __attribute__((always_inline)) __m512 gelu_phi(__m512 x, __m512 *e_out)
{
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    __m512 z = _mm512_min_ps(_mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.707106781f)),
                             _mm512_set1_ps(10.5f));   /* NaN -> 10.5 (vminps returns the 2nd operand) */
    __m512 d = _mm512_add_ps(two, z);
    __m512 r = _mm512_rcp14_ps(d);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));   /* 1/d to about 2^-28 */
    __m512 t = _mm512_add_ps(r, r);
    __m512 s = _mm512_fmsub_ps(t, _mm512_set1_ps(2.380952381f), _mm512_set1_ps(1.380952381f));
    __m512 q = _mm512_set1_ps(-5.911985863e-05f);
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(2.346646033e-05f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(6.170192501e-04f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(-6.842400180e-04f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(-6.325384136e-03f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(6.310758181e-03f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(1.035208851e-01f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(3.271877468e-01f));
    q = _mm512_fmadd_ps(q, s, _mm512_set1_ps(5.694087148e-01f));
    /* E = exp(a), a = -x^2/2 clamped to [-104, 0] (NaN -> -104: vmaxps returns the 2nd operand) */
    __m512 a = _mm512_max_ps(_mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-0.5f)), x), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(1.44269504089f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), a);
    f = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), f);
    __m512 p = _mm512_set1_ps(1.382953720e-03f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(8.374772035e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(4.166835546e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.666642129e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(4.999999106e-01f));
    p = _mm512_fmadd_ps(p, f, one);
    p = _mm512_fmadd_ps(p, f, one);
    __m512 e = _mm512_scalef_ps(p, n);
    *e_out = e;
    __m512 tail = _mm512_mul_ps(_mm512_mul_ps(r, e), q);   /* t/2 = r */
    __mmask16 pos = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
    return _mm512_mask_sub_ps(tail, pos, one, tail);
}

static inline __attribute__((always_inline)) __m512 gelu16(__m512 x)
{
    __m512 e;
    return _mm512_mul_ps(x, gelu_phi(x, &e));
}

static inline __attribute__((always_inline)) __m512 gelu_bwd16(__m512 x, __m512 dy)
{
    __m512 e, phi = gelu_phi(x, &e);
    __m512 g = _mm512_fmadd_ps(_mm512_mul_ps(x, e), _mm512_set1_ps(0.39894228040143267794f), phi);
    return _mm512_mul_ps(dy, g);
}

/* Gathers up to 16 values of a strided bf16 row into a packed buffer. */
static void gather16(uint16_t *dst, const char *src, int64_t stride, int64_t m)
{
    for (int64_t i = 0; i < m; i++) memcpy(dst + i, src + i * stride, 2);
}

/* p[0] = y, p[1] = x: y = gelu(x). */
void em__gelu_bf16_loop(char **p, const int64_t *s, int64_t n, void *ctx)
{
    (void)ctx;
    if (s[0] == 2 && s[1] == 2) {
        uint16_t *y = (uint16_t *)p[0];
        const uint16_t *x = (const uint16_t *)p[1];
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) em__bf16x16_store(y + i, gelu16(em__bf16x16_load(x + i)));
        if (i < n) {
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
            em__bf16x16_store_mask(y + i, m, gelu16(em__bf16x16_load_mask(x + i, m)));
        }
        return;
    }
    for (int64_t i = 0; i < n; i += 16) {
        int64_t m = n - i < 16 ? n - i : 16;
        uint16_t xb[16] = {0}, yb[16];
        gather16(xb, p[1] + i * s[1], s[1], m);
        em__bf16x16_store(yb, gelu16(em__bf16x16_load(xb)));
        for (int64_t j = 0; j < m; j++) memcpy(p[0] + (i + j) * s[0], yb + j, 2);
    }
}

/* p[0] = dx, p[1] = x, p[2] = dy: dx = dy * gelu'(x). */
void em__gelu_bwd_bf16_loop(char **p, const int64_t *s, int64_t n, void *ctx)
{
    (void)ctx;
    if (s[0] == 2 && s[1] == 2 && s[2] == 2) {
        uint16_t *dx = (uint16_t *)p[0];
        const uint16_t *x = (const uint16_t *)p[1], *dy = (const uint16_t *)p[2];
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            em__bf16x16_store(dx + i, gelu_bwd16(em__bf16x16_load(x + i), em__bf16x16_load(dy + i)));
        if (i < n) {
            __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
            em__bf16x16_store_mask(dx + i, m,
                                   gelu_bwd16(em__bf16x16_load_mask(x + i, m), em__bf16x16_load_mask(dy + i, m)));
        }
        return;
    }
    for (int64_t i = 0; i < n; i += 16) {
        int64_t m = n - i < 16 ? n - i : 16;
        uint16_t xb[16] = {0}, gb[16] = {0}, db[16];
        gather16(xb, p[1] + i * s[1], s[1], m);
        gather16(gb, p[2] + i * s[2], s[2], m);   /* stride 0 (a broadcast dy) reads one value m times */
        em__bf16x16_store(db, gelu_bwd16(em__bf16x16_load(xb), em__bf16x16_load(gb)));
        for (int64_t j = 0; j < m; j++) memcpy(p[0] + (i + j) * s[0], db + j, 2);
    }
}

#endif
