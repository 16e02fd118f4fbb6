/* ember tests — dtype conversion (tensor/convert.c).
 *
 * References are independent of the implementation:
 *   - decoding f16/bf16 bit patterns with ldexp from sign/exponent/fraction;
 *   - rounding to f16/bf16 by looking up the two neighbouring representable
 *     values in a sorted table of all finite values and comparing distances
 *     (ties to the even bit pattern), and, for f16, gcc's _Float16 casts;
 *   - integer conversions written out with explicit range tests.
 */
#include "check_util.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Check's ck_assert records every passing assertion with a write(2); hot
 * loops use this instead, which only reports failures. */
#define CHECK(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

/* ---- independent references ------------------------------------------------ */

typedef struct fmt {
    int mant, bias;              /* fraction bits, exponent bias */
    int nfinite;                 /* number of non-negative finite patterns */
    double *val;                 /* val[k] = value of pattern k, ascending */
} fmt;

static double decode(uint16_t h, int mant, int bias)
{
    int expbits = 15 - mant;
    int sign = h >> 15, ex = (h >> mant) & ((1 << expbits) - 1), fr = h & ((1 << mant) - 1);
    double v;
    if (ex == (1 << expbits) - 1) v = fr ? NAN : INFINITY;
    else if (ex == 0) v = ldexp(fr, 1 - bias - mant);
    else v = ldexp(fr + (1 << mant), ex - bias - mant);
    return sign ? -v : v;
}

static fmt F16 = {10, 15, 0x7c00, NULL}, BF16 = {7, 127, 0x7f80, NULL};

static void fmt_init(fmt *f)
{
    if (f->val) return;
    f->val = malloc(sizeof(double) * (size_t)f->nfinite);
    for (int k = 0; k < f->nfinite; k++) f->val[k] = decode((uint16_t)k, f->mant, f->bias);
}

/* Nearest representable value by neighbour search; returns the bit pattern.
 * NaN returns the canonical quiet NaN of the sign (callers compare NaN-ness). */
static uint16_t ref_round(fmt *f, double x)
{
    fmt_init(f);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)f->nfinite;
    if (isnan(x)) return sign | inf | (uint16_t)(1 << (f->mant - 1));
    double a = fabs(x);
    double max = f->val[f->nfinite - 1], prev = f->val[f->nfinite - 2];
    if (a >= max + (max - prev) / 2) return sign | inf;   /* the tie goes to inf (max is odd) */
    int lo = 0, hi = f->nfinite - 1;                        /* largest k with val[k] <= a */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (f->val[mid] <= a) lo = mid; else hi = mid - 1;
    }
    if (f->val[lo] == a || lo == f->nfinite - 1) return sign | (uint16_t)lo;
    double dlo = a - f->val[lo], dhi = f->val[lo + 1] - a;
    int k = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
    return sign | (uint16_t)k;
}

static int is_quiet_nan16(uint16_t h, int mant)
{
    int expbits = 15 - mant;
    uint16_t em = (uint16_t)(((1 << expbits) - 1) << mant);
    return (h & em) == em && (h & (1 << (mant - 1)));
}

/* Compares an implementation result with the reference pattern. */
static void check16(uint16_t got, uint16_t want, int mant, double input, const char *what)
{
    if (is_quiet_nan16(want, mant)) {
        CHECK(is_quiet_nan16(got, mant) && (got & 0x8000) == (want & 0x8000),
                      "%s(%a): got %04x, want a quiet NaN of sign %d", what, input, got, want >> 15);
    } else {
        CHECK(got == want, "%s(%a): got %04x, want %04x", what, input, got, want);
    }
}

static float f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t bits_of_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Values worth testing around a format: every value, every midpoint between
 * neighbours, the f32 values just above/below each midpoint, and the
 * overflow boundary. Fills out (f32) and returns the count. */
static int64_t probe_values(fmt *f, float *out)
{
    fmt_init(f);
    int64_t n = 0;
    for (int k = 0; k < f->nfinite; k++) {
        for (int s = 0; s < 2; s++) {
            double v = s ? -f->val[k] : f->val[k];
            out[n++] = (float)v;
            /* the midpoint above val[k]; past the max it is the overflow threshold */
            double next = k + 1 < f->nfinite ? f->val[k + 1] : f->val[k] + (f->val[k] - f->val[k - 1]);
            double mid = (f->val[k] + next) / 2;   /* exact: few bits */
            float m = (float)(s ? -mid : mid);
            out[n++] = m;
            out[n++] = nextafterf(m, INFINITY);
            out[n++] = nextafterf(m, -INFINITY);
        }
    }
    out[n++] = INFINITY;
    out[n++] = -INFINITY;
    out[n++] = NAN;
    out[n++] = -NAN;
    out[n++] = f32_from_bits(0x7f800001);   /* signaling NaN */
    out[n++] = f32_from_bits(0xffa00000);
    out[n++] = f32_from_bits(0x00000001);   /* f32 subnormals */
    out[n++] = f32_from_bits(0x807fffff);
    out[n++] = f32_from_bits(0x00400000);
    out[n++] = 3.4028235e38f;
    return n;
}

/* ---- decoding: all 65,536 patterns ------------------------------------------ */

/* Every 16-bit pattern of a format with mant fraction bits and exponent bias
 * (name, its dtype dt) decoded by dec and by em__load: the reference value with
 * its sign, or a NaN of the same sign that keeps the payload in the top
 * fraction bits. */
static void check_decode_all(const char *name, int mant, int bias, float (*dec)(uint16_t), em_dtype dt)
{
    const uint32_t payload = (1u << (mant - 1)) - 1;
    for (uint32_t h = 0; h < 65536; h++) {
        double want = decode((uint16_t)h, mant, bias);
        float got = dec((uint16_t)h);
        if (isnan(want)) {
            uint32_t u = bits_of_f32(got);
            CHECK(isnan(got) && (u & 0x400000) && (u >> 31) == (h >> 15), "%s %04x -> %08x", name, h, u);
            CHECK(((u >> (23 - mant)) & payload) == (h & payload), "%s NaN payload %04x", name, h);
        } else {
            CHECK(got == want && !!signbit(got) == !!signbit(want), "%s %04x -> %a want %a", name, h, got, want);
            CHECK(em__load(&(uint16_t){(uint16_t)h}, dt) == want, "em__load %s %04x", name, h);
        }
    }
}

TU_TEST(test_f16_to_f32_all, check_decode_all("f16", 10, 15, em__f16_to_f32, EM_F16))
TU_TEST(test_bf16_to_f32_all, check_decode_all("bf16", 7, 127, em__bf16_to_f32, EM_BF16))

/* ---- rounding f32 -> f16 / bf16 ----------------------------------------------- */

static void check_f32_to_fmt(fmt *f, uint16_t (*conv)(float), const char *what, const float *vals, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint16_t want = ref_round(f, vals[i]);
        check16(conv(vals[i]), want, f->mant, vals[i], what);
#ifdef __FLT16_MAX__
        if (f == &F16) {   /* second, independent reference: the compiler's cast */
            _Float16 h = (_Float16)vals[i];
            uint16_t hb;
            memcpy(&hb, &h, 2);
            check16(hb, want, 10, vals[i], "_Float16");
        }
#endif
    }
}

START_TEST(test_f32_to_f16_rounding)
{
    float *vals = malloc(sizeof(float) * 300000);
    int64_t n = probe_values(&F16, vals);
    check_f32_to_fmt(&F16, em__f32_to_f16, "em__f32_to_f16", vals, n);
    /* named cases */
    ck_assert_uint_eq(em__f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(em__f32_to_f16(65519.996f), 0x7bff);
    ck_assert_uint_eq(em__f32_to_f16(65520.0f), 0x7c00);       /* max + half ulp: tie -> inf */
    ck_assert_uint_eq(em__f32_to_f16(-1e10f), 0xfc00);
    ck_assert_uint_eq(em__f32_to_f16(0x1p-24f), 0x0001);       /* min subnormal */
    ck_assert_uint_eq(em__f32_to_f16(0x1p-25f), 0x0000);       /* tie -> even (0) */
    ck_assert_uint_eq(em__f32_to_f16(0x1.000002p-25f), 0x0001);
    ck_assert_uint_eq(em__f32_to_f16(0x3p-25f), 0x0002);       /* 1.5 * min: tie -> even (2) */
    ck_assert_uint_eq(em__f32_to_f16(0x1.ffcp-15f), 0x0400);   /* largest subnormal + half ulp: tie -> min normal */
    ck_assert_uint_eq(em__f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    ck_assert_uint_eq(em__f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
    ck_assert_uint_eq(em__f32_to_f16(-0.0f), 0x8000);
    /* random f32 bit patterns */
    uint64_t st = 1;
    for (int i = 0; i < 300000; i++) vals[i] = f32_from_bits((uint32_t)tu_next(&st));
    check_f32_to_fmt(&F16, em__f32_to_f16, "em__f32_to_f16", vals, 300000);
    free(vals);
}
END_TEST

START_TEST(test_f32_to_bf16_rounding)
{
    float *vals = malloc(sizeof(float) * 300000);
    int64_t n = probe_values(&BF16, vals);
    check_f32_to_fmt(&BF16, em__f32_to_bf16, "em__f32_to_bf16", vals, n);
    ck_assert_uint_eq(em__f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);          /* tie -> even */
    ck_assert_uint_eq(em__f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);          /* tie -> even (up) */
    ck_assert_uint_eq(em__f32_to_bf16(1.0f + 0x1.02p-8f), 0x3f81);
    ck_assert_uint_eq(em__f32_to_bf16(3.4028235e38f), 0x7f80);           /* f32 max rounds to inf */
    ck_assert_uint_eq(em__f32_to_bf16(f32_from_bits(0x7f7f7fff)), 0x7f7f);
    ck_assert_uint_eq(em__f32_to_bf16(f32_from_bits(0x007fffff)), 0x0080); /* subnormal rounds to min normal */
    ck_assert_uint_eq(em__f32_to_bf16(f32_from_bits(0x00008000)), 0x0000); /* tie -> even */
    ck_assert_uint_eq(em__f32_to_bf16(f32_from_bits(0x00018000)), 0x0002);
    ck_assert_uint_eq(em__f32_to_bf16(f32_from_bits(0x7f800001)), 0x7fc0); /* sNaN -> qNaN */
    uint64_t st = 2;
    for (int i = 0; i < 300000; i++) vals[i] = f32_from_bits((uint32_t)tu_next(&st));
    check_f32_to_fmt(&BF16, em__f32_to_bf16, "em__f32_to_bf16", vals, 300000);
    free(vals);
}
END_TEST

/* ---- f64 -> f16 / bf16 round once, directly from double ------------------------ */

static uint16_t store16(em_dtype dt, double v)
{
    uint16_t h;
    em__store(&h, dt, v);
    return h;
}

START_TEST(test_f64_direct_rounding)
{
    /* 1 + 2^-11 + 2^-40 is above the f16 midpoint of 1 and 1+2^-10, but its
     * f32 rounding is the midpoint itself, which would then round down. */
    double d = 1.0 + 0x1p-11 + 0x1p-40;
    ck_assert_uint_eq(store16(EM_F16, d), 0x3c01);
    ck_assert_uint_eq(em__f32_to_f16((float)d), 0x3c00);   /* the double-rounding trap */
    ck_assert_uint_eq(store16(EM_F16, -d), 0xbc01);
    double b = 1.0 + 0x1p-8 + 0x1p-40;
    ck_assert_uint_eq(store16(EM_BF16, b), 0x3f81);
    ck_assert_uint_eq(em__f32_to_bf16((float)b), 0x3f80);
    ck_assert_uint_eq(store16(EM_F16, 65519.999999), 0x7bff);
    ck_assert_uint_eq(store16(EM_F16, 65520.0), 0x7c00);
    ck_assert_uint_eq(store16(EM_F16, 1e300), 0x7c00);
    ck_assert_uint_eq(store16(EM_BF16, -1e300), 0xff80);
    ck_assert_uint_eq(store16(EM_F16, 1e-300), 0x0000);
    ck_assert_uint_eq(store16(EM_BF16, 0x1p-134), 0x0000);             /* half of min subnormal: tie -> 0 */
    ck_assert_uint_eq(store16(EM_BF16, 0x1.0000000001p-134), 0x0001);
    ck_assert_uint_eq(store16(EM_BF16, 0x1p-1074), 0x0000);            /* double subnormal */
    ck_assert(is_quiet_nan16(store16(EM_F16, NAN), 10));
    ck_assert(is_quiet_nan16(store16(EM_BF16, -NAN), 7) && (store16(EM_BF16, -NAN) & 0x8000));

    /* Around every midpoint of both formats, and random doubles. */
    fmt *fs[2] = {&F16, &BF16};
    em_dtype dts[2] = {EM_F16, EM_BF16};
    for (int w = 0; w < 2; w++) {
        fmt *f = fs[w];
        fmt_init(f);
        for (int k = 0; k + 1 < f->nfinite; k++) {
            double mid = (f->val[k] + f->val[k + 1]) / 2;
            double probes[6] = {mid, nextafter(mid, INFINITY), nextafter(mid, -INFINITY),
                                mid * (1 + 0x1p-40), mid * (1 - 0x1p-40), f->val[k]};
            for (int p = 0; p < 6; p++)
                for (int s = 0; s < 2; s++) {
                    double x = s ? -probes[p] : probes[p];
                    check16(store16(dts[w], x), ref_round(f, x), f->mant, x, "em__store(f64)");
#ifdef __FLT16_MAX__
                    if (w == 0) {
                        _Float16 h = (_Float16)x;
                        uint16_t hb;
                        memcpy(&hb, &h, 2);
                        check16(hb, ref_round(f, x), 10, x, "_Float16(f64)");
                    }
#endif
                }
        }
        uint64_t st = 3;
        for (int i = 0; i < 200000; i++) {
            uint64_t u = tu_next(&st);
            double x;
            memcpy(&x, &u, 8);
            if (i % 2) x = ldexp(tu_uniform(&st, -1, 1), (int)(tu_next(&st) % 300) - 150);
            check16(store16(dts[w], x), ref_round(f, x), f->mant, x, "em__store(f64 random)");
        }
    }
}
END_TEST

/* ---- bulk == scalar ------------------------------------------------------------ */

START_TEST(test_bulk_matches_scalar)
{
    const int64_t n = 2000003;   /* odd: exercises vector tails and the threaded path */
    float *f = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n);
    uint16_t *h = malloc(2 * (size_t)n);
    uint64_t st = 4;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)tu_next(&st);
        if (i % 7 == 3) u &= 0x807fffff;         /* more f32 subnormals (bf16 fix-up path) */
        if (i % 11 == 5) u = 0x477fe000 + (uint32_t)(i % 8192) - 4096; /* around f16 overflow */
        if (i % 13 == 6) u = (u & 0x80000000) | 0x33000000 | (u & 0x7fffff); /* f16 subnormal range */
        f[i] = f32_from_bits(u);
    }
    em__convert_n(h, EM_BF16, f, EM_F32, n);
    for (int64_t i = 0; i < n; i++)
        CHECK(h[i] == em__f32_to_bf16(f[i]), "bf16 bulk %08x: %04x vs %04x", bits_of_f32(f[i]), h[i],
                      em__f32_to_bf16(f[i]));
    em__convert_n(h, EM_F16, f, EM_F32, n);
    for (int64_t i = 0; i < n; i++)
        CHECK(h[i] == em__f32_to_f16(f[i]), "f16 bulk %08x: %04x vs %04x", bits_of_f32(f[i]), h[i],
                      em__f32_to_f16(f[i]));

    /* widening: every pattern, many times over, at odd offsets */
    for (int64_t i = 0; i < n; i++) h[i] = (uint16_t)(i * 40503u);
    for (int w = 0; w < 2; w++) {
        em_dtype dt = w ? EM_BF16 : EM_F16;
        for (int64_t off = 0; off < 3; off++) {
            em__convert_n(g, EM_F32, h + off, dt, n - off);
            for (int64_t i = 0; i < n - off; i++) {
                float want = w ? em__bf16_to_f32(h[off + i]) : em__f16_to_f32(h[off + i]);
                CHECK(bits_of_f32(g[i]) == bits_of_f32(want), "%s bulk widen %04x", em_dtype_name(dt),
                              h[off + i]);
            }
        }
    }
    free(f);
    free(g);
    free(h);
}
END_TEST

/* ---- every dtype pair ------------------------------------------------------------ */

/* The expected bytes of v stored as dt, written independently. For float
 * targets a NaN expectation is checked as "is NaN". */
static void ref_store(void *p, em_dtype dt, double v)
{
    switch (dt) {
    case EM_F64: memcpy(p, &v, 8); break;
    case EM_F32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case EM_F16: { uint16_t x = ref_round(&F16, v); memcpy(p, &x, 2); break; }
    case EM_BF16: { uint16_t x = ref_round(&BF16, v); memcpy(p, &x, 2); break; }
    case EM_I64: {
        int64_t x;
        if (isnan(v)) x = 0;
        else if (trunc(v) >= ldexp(1, 63)) x = INT64_MAX;
        else if (trunc(v) < -ldexp(1, 63)) x = INT64_MIN;
        else x = (int64_t)trunc(v);
        memcpy(p, &x, 8);
        break;
    }
    case EM_I32: {
        double t = trunc(v);
        int32_t x = isnan(v) ? 0 : t > 2147483647.0 ? INT32_MAX : t < -2147483648.0 ? INT32_MIN : (int32_t)t;
        memcpy(p, &x, 4);
        break;
    }
    case EM_BOOL: *(uint8_t *)p = !(v == 0); break;
    default: break;
    }
}

static int is_nan_bytes(const void *p, em_dtype dt)
{
    return em_dtype_is_float(dt) && isnan(em__load(p, dt));
}

START_TEST(test_all_pairs)
{
    const double vals[] = {0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.75, -3.999, 0.1, 1e-8, -6e-8, 255.0, 256.5,
                           65504.0, 65519.0, 65520.0, -70000.5, 1e10, -1e10, 2147483647.0, 2147483648.0,
                           -2147483648.0, -2147483649.0, 9.3e18, -9.3e18, 1e300, -1e300, 3.4028235e38,
                           INFINITY, -INFINITY, NAN, 0x1p-24, 0x1p-133, 123456789.0};
    enum { N = sizeof vals / sizeof *vals };
    for (int s = 0; s < EM_NUM_DTYPES; s++) {
        char src[N * 8];
        size_t ss = em_dtype_size((em_dtype)s);
        for (int i = 0; i < N; i++) em__store(src + i * ss, (em_dtype)s, vals[i]);
        for (int i = 0; i < N; i++) {   /* the stored source matches its own reference */
            char want[8];
            ref_store(want, (em_dtype)s, vals[i]);
            if (is_nan_bytes(want, (em_dtype)s)) CHECK(is_nan_bytes(src + i * ss, (em_dtype)s), "store %s of NaN", em_dtype_name((em_dtype)s));
            else CHECK(!memcmp(want, src + i * ss, ss), "store %s of %g", em_dtype_name((em_dtype)s), vals[i]);
        }
        for (int d = 0; d < EM_NUM_DTYPES; d++) {
            char dst[N * 8], dst2[N * 8];
            size_t ds = em_dtype_size((em_dtype)d);
            em__convert_n(dst, (em_dtype)d, src, (em_dtype)s, N);
            for (int i = 0; i < N; i++) {
                /* exact, except INT64_MAX -> 2^63, which every target maps like INT64_MAX */
                double v = em__load(src + i * ss, (em_dtype)s);
                char want[8];
                ref_store(want, (em_dtype)d, v);
                em__store(dst2 + i * ds, (em_dtype)d, v);
                if (is_nan_bytes(want, (em_dtype)d)) {
                    CHECK(is_nan_bytes(dst + i * ds, (em_dtype)d), "convert_n NaN -> %s", em_dtype_name((em_dtype)d));
                    CHECK(is_nan_bytes(dst2 + i * ds, (em_dtype)d), "store NaN -> %s", em_dtype_name((em_dtype)d));
                } else {
                    CHECK(!memcmp(want, dst + i * ds, ds), "convert_n %s -> %s of %.17g",
                                  em_dtype_name((em_dtype)s), em_dtype_name((em_dtype)d), v);
                    CHECK(!memcmp(want, dst2 + i * ds, ds), "load/store %s -> %s of %.17g",
                                  em_dtype_name((em_dtype)s), em_dtype_name((em_dtype)d), v);
                }
            }
        }
    }
}
END_TEST

START_TEST(test_int_semantics)
{
    int64_t i64;
    int32_t i32;
    uint8_t b;
    em__store(&i64, EM_I64, -2.9); ck_assert_int_eq(i64, -2);
    em__store(&i64, EM_I64, 2.9); ck_assert_int_eq(i64, 2);
    em__store(&i64, EM_I64, NAN); ck_assert_int_eq(i64, 0);
    em__store(&i64, EM_I64, 1e19); ck_assert_int_eq(i64, INT64_MAX);
    em__store(&i64, EM_I64, -INFINITY); ck_assert_int_eq(i64, INT64_MIN);
    em__store(&i64, EM_I64, -9223372036854775808.0); ck_assert_int_eq(i64, INT64_MIN);
    em__store(&i32, EM_I32, 2147483647.9); ck_assert_int_eq(i32, INT32_MAX);
    em__store(&i32, EM_I32, 2147483648.0); ck_assert_int_eq(i32, INT32_MAX);
    em__store(&i32, EM_I32, -2147483648.9); ck_assert_int_eq(i32, INT32_MIN);
    em__store(&i32, EM_I32, -1e12); ck_assert_int_eq(i32, INT32_MIN);
    em__store(&i32, EM_I32, NAN); ck_assert_int_eq(i32, 0);
    em__store(&b, EM_BOOL, NAN); ck_assert_int_eq(b, 1);
    em__store(&b, EM_BOOL, -0.0); ck_assert_int_eq(b, 0);
    em__store(&b, EM_BOOL, 1e-300); ck_assert_int_eq(b, 1);
    b = 7;
    ck_assert(em__load(&b, EM_BOOL) == 1.0);
    uint8_t bb[3] = {0, 2, 255}, out[3];
    em__convert_n(out, EM_BOOL, bb, EM_BOOL, 3);
    ck_assert(out[0] == 0 && out[1] == 1 && out[2] == 1);

    /* int64 -> float rounds once from the integer: 2^60 + 2^52 + 1 is just
     * above a bf16 tie, but its double is exactly on it. */
    int64_t big[4] = {(INT64_C(1) << 60) + (INT64_C(1) << 52) + 1, -((INT64_C(1) << 60) + (INT64_C(1) << 52) + 1),
                      (INT64_C(1) << 60) + (INT64_C(1) << 52), INT64_MAX};
    uint16_t h[4];
    em__convert_n(h, EM_BF16, big, EM_I64, 4);
    ck_assert_uint_eq(h[0], 0x5d81);   /* 2^60 * (1 + 2^-7) */
    ck_assert_uint_eq(h[1], 0xdd81);
    ck_assert_uint_eq(h[2], 0x5d80);   /* the exact tie goes to even */
    ck_assert_uint_eq(h[3], 0x5f00);   /* 2^63 */
    em__convert_n(h, EM_F16, big, EM_I64, 4);
    ck_assert_uint_eq(h[0], 0x7c00);
    ck_assert_uint_eq(h[1], 0xfc00);
    float f[4];
    em__convert_n(f, EM_F32, big, EM_I64, 4);
    ck_assert_msg(f[0] == 0x1.01p60f && f[1] == -0x1.01p60f && f[2] == 0x1.01p60f && f[3] == 0x1p63f, "%a %a %a %a", f[0], f[1],
                  f[2], f[3]);
    int32_t i32s[4];
    em__convert_n(i32s, EM_I32, big, EM_I64, 4);
    ck_assert(i32s[0] == INT32_MAX && i32s[1] == INT32_MIN);
}
END_TEST

START_TEST(test_dtype_meta)
{
    const char *names[EM_NUM_DTYPES] = {"float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"};
    const size_t sizes[EM_NUM_DTYPES] = {4, 8, 2, 2, 8, 4, 1};
    for (int d = 0; d < EM_NUM_DTYPES; d++) {
        ck_assert_str_eq(em_dtype_name((em_dtype)d), names[d]);
        ck_assert_uint_eq(em_dtype_size((em_dtype)d), sizes[d]);
        ck_assert(em_dtype_is_float((em_dtype)d) == (d <= EM_BF16));
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("convert");
    tu_add_tests(tu_case(s, "convert", 120), test_dtype_meta, test_f16_to_f32_all, test_bf16_to_f32_all,
                 test_f32_to_f16_rounding, test_f32_to_bf16_rounding, test_f64_direct_rounding,
                 test_bulk_matches_scalar, test_all_pairs, test_int_semantics);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
