/* ember — dtype metadata and dtype conversion (DESIGN.md §2 "Dtypes").
 *
 * Rules, the same on every path (per element, bulk, vectorized):
 *   - Narrowing float conversions (f64->f32, f64/f32->f16, f64/f32->bf16)
 *     round once to nearest, ties to even. f64->f16 and f64->bf16 round
 *     directly from the double (never via f32, which would round twice).
 *     Values beyond the largest finite value round to +-inf as IEEE RNE does
 *     (f16: |v| >= 65520 -> inf). Subnormals are produced and read exactly.
 *   - NaN stays NaN, quiet, sign kept, payload truncated to the top bits of
 *     the target mantissa (exactly what F16C's vcvtps2ph, AVX-512 BF16's
 *     vcvtneps2bf16 and vcvtph2ps do). Widening a NaN quiets it too.
 *   - Float -> int truncates toward zero like a C cast, but is defined
 *     everywhere: out-of-range values saturate to the type's min/max,
 *     NaN becomes 0.
 *   - Anything -> bool is v != 0 (so NaN -> true, as in C and PyTorch).
 *   - int64 -> float rounds once from the integer (no detour via a rounded
 *     double that could create a false tie).
 *
 * The vectorized f32<->f16/bf16 loops are compiled when the target has the
 * instructions (__F16C__, __AVX512F__, __AVX512BF16__: the default build uses
 * -march=native; bf16 through tensor/bf16x16.h) and produce the same bits as the scalar code, which
 * tests/test_convert.c checks on every input class.
 */
#include "tensor/tensor_internal.h"
#include "tensor/bf16x16.h"

#include <math.h>
#include <string.h>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

EM__WIDE_VECTORS   /* element-wise loops only: tensor/numeric.h */

/* ---- dtype metadata -------------------------------------------------------- */

static const size_t dtype_sizes[EM_NUM_DTYPES] = {
    [EM_F32] = 4, [EM_F64] = 8, [EM_F16] = 2, [EM_BF16] = 2,
    [EM_I64] = 8, [EM_I32] = 4, [EM_BOOL] = 1,
};
/* PyTorch's names (torch.float32 ...), without the "torch." prefix. */
static const char *const dtype_names[EM_NUM_DTYPES] = {
    [EM_F32] = "float32", [EM_F64] = "float64", [EM_F16] = "float16", [EM_BF16] = "bfloat16",
    [EM_I64] = "int64", [EM_I32] = "int32", [EM_BOOL] = "bool",
};

size_t em_dtype_size(em_dtype dt)
{
    return (unsigned)dt < EM_NUM_DTYPES ? dtype_sizes[dt] : 0;
}

const char *em_dtype_name(em_dtype dt)
{
    return (unsigned)dt < EM_NUM_DTYPES ? dtype_names[dt] : "invalid";
}

bool em_dtype_is_float(em_dtype dt)
{
    return dt == EM_F32 || dt == EM_F64 || dt == EM_F16 || dt == EM_BF16;
}

/* ---- scalar float formats ----------------------------------------------------- */

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* Rounds sign * m * 2^(e - p) (m < 2^(p+1), m's leading bit at p for normal
 * inputs) to a binary format with M fraction bits and exponent bias B
 * (f16: M=10, B=15; bf16: M=7, B=127), ties to even. Returns the bit pattern.
 * The quantum of the result is 2^(max(e, 1-B) - M); rounding carries into the
 * exponent field by plain integer addition, which also turns the largest
 * finite value + half an ulp into inf and the largest subnormal into the
 * smallest normal. */
static uint16_t round_to_small(uint32_t sign, int e, uint64_t m, int p, int M, int B)
{
    const uint32_t inf = (uint32_t)(2 * B + 1) << M;
    if (m == 0) return (uint16_t)sign;
    if (e > B) return (uint16_t)(sign | inf);
    int te = e < 1 - B ? 1 - B : e;
    int drop = p - M + (te - e);            /* > 0 for every (source, target) pair here */
    uint64_t q = 0;
    if (drop < 64) {
        q = m >> drop;
        uint64_t rem = m & ((UINT64_C(1) << drop) - 1), half = UINT64_C(1) << (drop - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
    } /* else: m < 2^(p+1) <= half a quantum, rounds to zero */
    uint32_t bits = ((uint32_t)(te + B - 1) << M) + (uint32_t)q;
    if (bits >= inf) bits = inf;
    return (uint16_t)(sign | bits);
}

/* f16 NaN from f32 bits: quiet bit set, sign kept, payload truncated (as vcvtps2ph). */
static inline uint16_t f32_nan_to_f16(uint32_t u)
{
    return (uint16_t)(((u >> 16) & 0x8000) | 0x7e00 | ((u >> 13) & 0x3ff));
}

uint16_t em__f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000, ex = (u >> 23) & 0xff, fr = u & 0x7fffff;
    if (ex == 0xff) return fr ? f32_nan_to_f16(u) : (uint16_t)(sign | 0x7c00);
    if (ex == 0) return round_to_small(sign, -126, fr, 23, 10, 15);
    return round_to_small(sign, (int)ex - 127, fr | 0x800000, 23, 10, 15);
}

float em__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, ex = (h >> 10) & 0x1f, fr = h & 0x3ff;
    if (ex == 0x1f) return bits_f32(sign | 0x7f800000 | (fr ? 0x400000 | (fr << 13) : 0));
    if (ex == 0) {   /* zero or subnormal: fr * 2^-24, exact in f32 */
        float v = (float)fr * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((ex + 112) << 23) | (fr << 13));
}

uint16_t em__f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    /* bf16 is the top half of f32: add just under half of the dropped half,
     * plus the kept lsb (ties to even); the carry may ripple into the
     * exponent, which is exactly rounding up (to inf past the max). */
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

float em__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffff) > 0x7f800000) u |= 0x400000;   /* quiet a signaling NaN */
    return bits_f32(u);
}

/* Directly from double: one rounding. */
static uint16_t f64_to_small(double d, int M, int B)
{
    uint64_t u = f64_bits(d);
    uint32_t sign = (uint32_t)(u >> 48) & 0x8000;
    int ex = (int)((u >> 52) & 0x7ff);
    uint64_t fr = u & ((UINT64_C(1) << 52) - 1);
    uint32_t expall = (uint32_t)(2 * B + 1) << M;
    if (ex == 0x7ff)
        return (uint16_t)(sign | expall | (fr ? (1u << (M - 1)) | (uint32_t)(fr >> (52 - M)) : 0));
    if (ex == 0) return round_to_small(sign, -1022, fr, 52, M, B);
    return round_to_small(sign, ex - 1023, fr | (UINT64_C(1) << 52), 52, M, B);
}

static inline uint16_t f64_to_f16(double d) { return f64_to_small(d, 10, 15); }
static inline uint16_t f64_to_bf16(double d) { return f64_to_small(d, 7, 127); }

/* A double that rounds to every narrower format exactly as v itself would:
 * exact below 2^53, else v rounded to 53 bits "to odd" (the sticky bit kept
 * in the lsb), which rules out a false tie in a second rounding to <= 51 bits. */
static double i64_to_f64_odd(int64_t v)
{
    uint64_t a = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (a < (UINT64_C(1) << 53)) return (double)v;
    int s = 0;
    while ((a >> s) >= (UINT64_C(1) << 53)) s++;
    uint64_t kept = (a >> s) | ((a & ((UINT64_C(1) << s) - 1)) != 0);
    double r = ldexp((double)kept, s);
    return v < 0 ? -r : r;
}

/* ---- per element ------------------------------------------------------------- */

double em__load(const void *p, em_dtype dt)
{
    switch (dt) {
    case EM_F32: { float v; memcpy(&v, p, 4); return v; }
    case EM_F64: { double v; memcpy(&v, p, 8); return v; }
    case EM_F16: { uint16_t v; memcpy(&v, p, 2); return em__f16_to_f32(v); }
    case EM_BF16: { uint16_t v; memcpy(&v, p, 2); return em__bf16_to_f32(v); }
    case EM_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case EM_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case EM_BOOL: return *(const uint8_t *)p != 0;
    default: return 0;
    }
}

static inline int64_t sat_i64(double v)
{
    if (v != v) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

static inline int32_t sat_i32(double v)
{
    if (v != v) return 0;
    if (v >= 2147483648.0) return INT32_MAX;
    if (v <= -2147483649.0) return INT32_MIN;
    return (int32_t)v;
}

void em__store(void *p, em_dtype dt, double v)
{
    switch (dt) {
    case EM_F32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case EM_F64: memcpy(p, &v, 8); break;
    case EM_F16: { uint16_t x = f64_to_f16(v); memcpy(p, &x, 2); break; }
    case EM_BF16: { uint16_t x = f64_to_bf16(v); memcpy(p, &x, 2); break; }
    case EM_I64: { int64_t x = sat_i64(v); memcpy(p, &x, 8); break; }
    case EM_I32: { int32_t x = sat_i32(v); memcpy(p, &x, 4); break; }
    case EM_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
    }
}

/* int64 source: every target rounds once from the integer. */
static void store_from_i64(void *p, em_dtype dt, int64_t v)
{
    switch (dt) {
    case EM_F32: { float x = (float)v; memcpy(p, &x, 4); break; }   /* C rounds once */
    case EM_F64: { double x = (double)v; memcpy(p, &x, 8); break; }
    case EM_F16: { uint16_t x = f64_to_f16(i64_to_f64_odd(v)); memcpy(p, &x, 2); break; }
    case EM_BF16: { uint16_t x = f64_to_bf16(i64_to_f64_odd(v)); memcpy(p, &x, 2); break; }
    case EM_I64: memcpy(p, &v, 8); break;
    case EM_I32: {
        int32_t x = v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
        memcpy(p, &x, 4);
        break;
    }
    case EM_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
    }
}

/* ---- bulk, vectorized where the target allows ----------------------------------
 * Each *_n function converts [0, n) of a contiguous range; the vector loop
 * handles whole vectors and the scalar functions above finish the tail. */

static void f32_to_bf16_n(uint16_t *d, const float *s, int64_t n)
{
    int64_t i = 0;
#if defined(EM__HAVE_BF16X16)
    for (; i + 16 <= n; i += 16) em__bf16x16_store(d + i, _mm512_loadu_ps(s + i));
#endif
    for (; i < n; i++) d[i] = em__f32_to_bf16(s[i]);
}

static void bf16_to_f32_n(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
#if defined(EM__HAVE_BF16X16)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, em__bf16x16_load(s + i));
#endif
    for (; i < n; i++) d[i] = em__bf16_to_f32(s[i]);
}

static void f32_to_f16_n(uint16_t *d, const float *s, int64_t n)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) d[i] = em__f32_to_f16(s[i]);
}

static void f16_to_f32_n(float *d, const uint16_t *s, int64_t n)
{
    int64_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
#elif defined(__F16C__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#endif
    for (; i < n; i++) d[i] = em__f16_to_f32(s[i]);
}

static void convert_chunk(void *dst, em_dtype ddt, const void *src, em_dtype sdt, int64_t n)
{
    if (sdt == EM_F32 && ddt == EM_BF16) { f32_to_bf16_n(dst, src, n); return; }
    if (sdt == EM_BF16 && ddt == EM_F32) { bf16_to_f32_n(dst, src, n); return; }
    if (sdt == EM_F32 && ddt == EM_F16) { f32_to_f16_n(dst, src, n); return; }
    if (sdt == EM_F16 && ddt == EM_F32) { f16_to_f32_n(dst, src, n); return; }
    if (sdt == EM_F32 && ddt == EM_F64) {
        const float *s = src; double *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i];
        return;
    }
    if (sdt == EM_F64 && ddt == EM_F32) {
        const double *s = src; float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i];
        return;
    }
    size_t ss = em_dtype_size(sdt), ds = em_dtype_size(ddt);
    const char *s = src;
    char *d = dst;
    if (sdt == EM_I64) {
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, s + (size_t)i * ss, 8);
            store_from_i64(d + (size_t)i * ds, ddt, v);
        }
        return;
    }
    /* Every other source is exact in double, so load + store rounds once. */
    for (int64_t i = 0; i < n; i++) em__store(d + (size_t)i * ds, ddt, em__load(s + (size_t)i * ss, sdt));
}

void em__convert_n(void *dst, em_dtype ddt, const void *src, em_dtype sdt, int64_t n)
{
    if (n <= 0) return;
    size_t ss = em_dtype_size(sdt), ds = em_dtype_size(ddt);
    if (sdt == ddt && sdt != EM_BOOL) {   /* bool is normalized to 0/1 below */
        memmove(dst, src, (size_t)n * ss);
        return;
    }
    /* Chunks large enough to amortize a thread wake-up; small n stays serial. */
    const int64_t chunk = 32768;
    int64_t nchunks = (n + chunk - 1) / chunk;
    if (nchunks == 1) {
        convert_chunk(dst, ddt, src, sdt, n);
        return;
    }
    #pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t lo = c * chunk, len = n - lo < chunk ? n - lo : chunk;
        convert_chunk((char *)dst + (size_t)lo * ds, ddt, (const char *)src + (size_t)lo * ss, sdt, len);
    }
}
