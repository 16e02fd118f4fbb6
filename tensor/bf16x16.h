/* ember — 16 bf16 values to and from one AVX-512 f32 vector, with the exact
 * semantics of em__bf16_to_f32 / em__f32_to_bf16 (tensor/numeric.h): widening
 * quiets a NaN; narrowing rounds to nearest even, keeps subnormals (which
 * vcvtneps2bf16 alone would flush) and quiets a NaN. Used by convert.c's bulk
 * loops and by the CPU kernels that read and write bf16 directly.
 *
 * Defined only where the target has AVX-512F/BW/VL (EM__HAVE_BF16X16); the masked
 * forms touch only the lanes of `mask`, so a row's tail needs no scalar loop. */
#ifndef EMBER_BF16X16_H
#define EMBER_BF16X16_H

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#include <stdint.h>

#define EM__HAVE_BF16X16 1

static inline __attribute__((always_inline)) __m512 em__bf16x16_widen(__m256i h)
{
    __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    return _mm512_castsi512_ps(_mm512_mask_or_epi32(u, nan, u, _mm512_set1_epi32(0x400000)));
}

static inline __attribute__((always_inline)) __m256i em__bf16x16_narrow(__m512 f)
{
    __m512i u = _mm512_castps_si512(f);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
#if defined(__AVX512BF16__)
    /* vcvtneps2bf16 rounds to nearest even and quiets NaNs, but flushes
     * subnormal inputs: only vectors holding one take the integer path. */
    __mmask16 sub = _mm512_testn_epi32_mask(u, inf) & _mm512_test_epi32_mask(u, absmask);
    if (!sub) return (__m256i)_mm512_cvtneps_pbh(f);
#endif
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                                   _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
                                  16);
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, absmask), inf);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

static inline __attribute__((always_inline)) __m512 em__bf16x16_load(const uint16_t *p)
{
    return em__bf16x16_widen(_mm256_loadu_si256((const __m256i *)p));
}
static inline __attribute__((always_inline)) __m512 em__bf16x16_load_mask(const uint16_t *p, __mmask16 m)
{
    return em__bf16x16_widen(_mm256_maskz_loadu_epi16(m, p));
}
static inline __attribute__((always_inline)) void em__bf16x16_store(uint16_t *p, __m512 f)
{
    _mm256_storeu_si256((__m256i *)p, em__bf16x16_narrow(f));
}
static inline __attribute__((always_inline)) void em__bf16x16_store_mask(uint16_t *p, __mmask16 m, __m512 f)
{
    _mm256_mask_storeu_epi16(p, m, em__bf16x16_narrow(f));
}
#endif

#endif
