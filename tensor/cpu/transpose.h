/* ember — matrix transposes for the CPU kernels, in registers where the target
 * has AVX-512: dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols.
 * transpose_f32/_f64 take rows and cols that are multiples of 16 (the f32 one
 * also moves any 32-bit words: k_sdpa_amx.c transposes bf16 pairs with it);
 * transpose_bf16 takes any sizes (32 x 32 blocks, scalar edges); interleave_rows
 * pairs bf16 rows into 32-bit words (AMX's and vdpbf16ps's operand layout).
 * Pure data movement: no value changes. */
#ifndef EMBER_CPU_TRANSPOSE_H
#define EMBER_CPU_TRANSPOSE_H

#include <stdint.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
/* One 16 x 16 f32 block through registers (unpack, in-lane shuffle, two 128-bit lane shuffles). */
static inline void transpose16_f32(float *dst, int64_t ldd, const float *src, int64_t lds)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
#endif

static inline void transpose_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols)
{
#if defined(__AVX512F__)
    for (int64_t r = 0; r < rows; r += 16)
        for (int64_t c = 0; c < cols; c += 16) transpose16_f32(dst + c * ldd + r, ldd, src + r * lds + c, lds);
#else
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++) dst[c * ldd + r] = src[r * lds + c];
#endif
}

static inline void transpose_f64(double *dst, int64_t ldd, const double *src, int64_t lds, int64_t rows, int64_t cols)
{
    for (int64_t c = 0; c < cols; c++)
        for (int64_t r = 0; r < rows; r++) dst[c * ldd + r] = src[r * lds + c];
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* dst [rows/2][cols][2] from src rows (bf16, row stride lds): word (t, c) = (src[2t][c], src[2t+1][c]).
 * rows even, cols a multiple of 32. */
static inline void interleave_rows(uint16_t *dst, const uint16_t *src, int64_t lds, int64_t rows, int64_t cols)
{
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37,
                                        5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54,
                                        22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
    for (int64_t t = 0; t < rows / 2; t++) {
        const uint16_t *a = src + 2 * t * lds, *b = a + lds;
        uint16_t *o = dst + t * cols * 2;
        for (int64_t c = 0; c < cols; c += 32) {
            __m512i va = _mm512_loadu_si512(a + c), vb = _mm512_loadu_si512(b + c);
            _mm512_storeu_si512(o + 2 * c, _mm512_permutex2var_epi16(va, lo, vb));
            _mm512_storeu_si512(o + 2 * c + 32, _mm512_permutex2var_epi16(va, hi, vb));
        }
    }
}

/* One 32 x 32 bf16 block: rows paired into 32-bit words, then two 16 x 16 word
 * transposes, each giving 16 rows of dst of 32 values. */
static inline void transpose32_bf16(uint16_t *dst, int64_t ldd, const uint16_t *src, int64_t lds)
{
    _Alignas(64) uint32_t w[16][32];   /* word (t, c) = (src[2t][c], src[2t+1][c]) */
    interleave_rows((uint16_t *)w, src, lds, 32, 32);
    /* transposed, row c holds src[0..31][c] */
    transpose16_f32((float *)dst, ldd / 2, (const float *)&w[0][0], 32);
    transpose16_f32((float *)(dst + 16 * ldd), ldd / 2, (const float *)&w[0][16], 32);
}
#endif

/* Any sizes; the vector blocks need an even ldd (dst rows of 32-bit words). */
static inline void transpose_bf16(uint16_t *dst, int64_t ldd, const uint16_t *src, int64_t lds, int64_t rows,
                                  int64_t cols)
{
    int64_t r0 = 0, c0 = 0;
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (ldd % 2 == 0 && ((uintptr_t)dst & 3) == 0) {
        r0 = rows & ~(int64_t)31, c0 = cols & ~(int64_t)31;
        for (int64_t r = 0; r < r0; r += 32)
            for (int64_t c = 0; c < c0; c += 32) transpose32_bf16(dst + c * ldd + r, ldd, src + r * lds + c, lds);
    }
#endif
    for (int64_t c = 0; c < cols; c++)   /* the edges: columns past c0 for every row, rows past r0 */
        for (int64_t r = c < c0 ? r0 : 0; r < rows; r++) dst[c * ldd + r] = src[r * lds + c];
}

#endif
