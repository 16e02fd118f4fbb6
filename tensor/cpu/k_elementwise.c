/* ember — CPU elementwise kernels: creation (FILL, ARANGE, EYE), COPY, binary
 * arithmetic, comparisons, unary math and its _BWD kernels (generated from
 * tensor/unary_ops.h), WHERE and MASKED_FILL (contracts in tensor/ops.h; the
 * op functions in op_elementwise.c/op_create.c/op_grad.c validate).
 *
 * Every kernel runs through em__iter_run (iter.h), which hands an inner loop
 * one row at a time with byte strides. The loops below specialise the row for
 * the cases that matter — all operands contiguous, one input a broadcast
 * scalar (stride 0) — as plain `omp simd` loops that gcc vectorizes, and keep
 * one general strided loop for everything else.
 *
 * Dtypes: f32, f64, i64, i32 (and u8 for bool) have typed loops. f16 and bf16
 * are storage types: their rows are converted to f32 in chunks of 256, run
 * through the f32 loop, and converted back (round to nearest even).
 * Integer arithmetic wraps (two's complement), as in PyTorch.
 */
#include "tensor/cpu/cpu.h"
#include "tensor/cpu/iter.h"
#include "tensor/cpu/vmath.h"
#include "tensor/bf16x16.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

EM__WIDE_VECTORS   /* element-wise loops only: tensor/numeric.h */

static bool is_half(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

/* ---- f16/bf16 through f32 ------------------------------------------------------ */

enum { CHUNK = 256 };

typedef struct half_ctx {
    em_iter_fn fn;   /* the f32 loop (non-half operands pass through unchanged) */
    void *ctx;
    int nops;
    em_dtype dt[EM_ITER_MAX_OPS];
} half_ctx;

static void half_to_f32(float *dst, const char *src, int64_t stride, em_dtype dt, int64_t n)
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

static void f32_to_half(char *dst, int64_t stride, em_dtype dt, const float *src, int64_t n)
{
    if (stride == 2) {
        em__convert_n(dst, dt, src, EM_F32, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = dt == EM_F16 ? em__f32_to_f16(src[i]) : em__f32_to_bf16(src[i]);
        memcpy(dst + i * stride, &h, 2);
    }
}

static void half_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const half_ctx *c = vctx;
    _Alignas(64) float buf[EM_ITER_MAX_OPS][CHUNK];
    char *q[EM_ITER_MAX_OPS];
    int64_t qs[EM_ITER_MAX_OPS];
    for (int i = 1; i < c->nops; i++)   /* broadcast half scalars: convert once */
        if (is_half(c->dt[i]) && s[i] == 0) half_to_f32(buf[i], p[i], 0, c->dt[i], 1);
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        for (int i = 0; i < c->nops; i++) {
            char *src = p[i] + i0 * s[i];
            if (!is_half(c->dt[i])) {
                q[i] = src;
                qs[i] = s[i];
            } else {
                q[i] = (char *)buf[i];
                qs[i] = s[i] == 0 ? 0 : (int64_t)sizeof(float);
                if (i > 0 && s[i] != 0) half_to_f32(buf[i], src, s[i], c->dt[i], m);
            }
        }
        c->fn(q, qs, m, c->ctx);
        if (is_half(c->dt[0])) f32_to_half(p[0] + i0 * s[0], s[0], c->dt[0], buf[0], m);
    }
}

/* Runs fn (a loop for the f32 form when any operand is f16/bf16) over ts. */
static void run(int nops, em_tensor *const *ts, em_iter_fn fn, void *ctx, int64_t grain)
{
    bool half = false;
    for (int i = 0; i < nops; i++) half |= is_half(ts[i]->dtype);
    if (!half) {
        em__iter_run(nops, ts, fn, ctx, grain);
        return;
    }
    half_ctx hc = {.fn = fn, .ctx = ctx, .nops = nops};
    for (int i = 0; i < nops; i++) hc.dt[i] = ts[i]->dtype;
    em__iter_run(nops, ts, half_loop, &hc, grain);
}

/* Plain integer types by element size, for loops that only move bytes. */
#define SIZE_SWITCH(size, MACRO) \
    switch (size) {              \
    case 1: MACRO(uint8_t); break;  \
    case 2: MACRO(uint16_t); break; \
    case 4: MACRO(uint32_t); break; \
    default: MACRO(uint64_t); break; \
    }

/* ---- FILL, ARANGE, EYE ---------------------------------------------------------- */

/* stream: the fill is larger than the caches can hold (em_cpu_FILL decides), so
 * contiguous rows are written with non-temporal stores: no read-for-ownership
 * of lines that are only overwritten, half the memory traffic of plain stores
 * (zero_grad of a 66.9M-parameter model: 14 ms -> 6.2 ms on the Intel Xeon
 * kind; docs/PERFORMANCE.md). The values written are the same. */
typedef struct fill_ctx { uint64_t bits; size_t size; bool zero, stream; } fill_ctx;

#if defined(__SSE2__)
#include <immintrin.h>
#if defined(__AVX512F__)
#define STREAM_W 64   /* bytes per non-temporal store */
#define STREAM_T __m512i
#define STREAM_LOAD(p) _mm512_loadu_si512(p)
#define STREAM_STORE(p, v) _mm512_stream_si512((void *)(p), v)
#else
#define STREAM_W 16
#define STREAM_T __m128i
#define STREAM_LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define STREAM_STORE(p, v) _mm_stream_si128((__m128i *)(p), v)
#endif
/* n elements of `size` bytes at p (element-aligned), each the low `size` bytes of
 * bits: plain stores up to a STREAM_W boundary and for the tail, non-temporal
 * stores between, then a store fence (the stores are weakly ordered; the fence
 * makes them visible before the region's barrier). */
static void stream_fill(char *p, int64_t n, size_t size, uint64_t bits)
{
    char *end = p + (size_t)n * size;
    for (; p < end && ((uintptr_t)p & (STREAM_W - 1)); p += size) memcpy(p, &bits, size);
    unsigned char pat[STREAM_W];
    for (size_t i = 0; i < STREAM_W; i += size) memcpy(pat + i, &bits, size);
    STREAM_T v = STREAM_LOAD(pat);
    for (; p + STREAM_W <= end; p += STREAM_W) STREAM_STORE(p, v);
    for (; p < end; p += size) memcpy(p, &bits, size);
    _mm_sfence();
}
#endif

/* The fill size from which stores stream past the caches, from the CPU's L2 size
 * (sysconf; 1 MiB when unknown): four times the threads' L2 in all (the thread
 * count at first use), and at least 8 MiB. The L3 size is no guide: a VM may
 * report the host's whole L3. Rows shorter than 4 KiB keep plain stores. */
int64_t em__fill_stream_bytes(void)
{
    static int64_t v;
    int64_t b = __atomic_load_n(&v, __ATOMIC_RELAXED);
    if (!b) {
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        b = 4 * (int64_t)(l2 > 0 ? l2 : 1 << 20) * em_num_threads();
        if (b < ((int64_t)8 << 20)) b = (int64_t)8 << 20;
        __atomic_store_n(&v, b, __ATOMIC_RELAXED);
    }
    return b;
}

static void fill_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const fill_ctx *c = vctx;
#if defined(__SSE2__)
    /* short rows keep plain stores: a fence per row would cost more than it saves */
    if (c->stream && s[0] == (int64_t)c->size && n * (int64_t)c->size >= 4096) {
        stream_fill(p[0], n, c->size, c->bits);
        return;
    }
#endif
    if (c->zero && s[0] == (int64_t)c->size) {
        memset(p[0], 0, (size_t)n * c->size);
        return;
    }
#define FILL_T(T)                                                     \
    {                                                                 \
        T v;                                                          \
        memcpy(&v, &c->bits, sizeof v);                               \
        if (s[0] == sizeof(T)) {                                      \
            T *o = (T *)p[0];                                         \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = v; \
        } else {                                                      \
            for (int64_t i = 0; i < n; i++) *(T *)(p[0] + i * s[0]) = v; \
        }                                                             \
    }
    SIZE_SWITCH(c->size, FILL_T)
#undef FILL_T
}

/* The bit pattern of v in dt (for 1-byte and 2-byte dtypes, the low bytes). */
static uint64_t value_bits(double v, em_dtype dt)
{
    uint64_t bits = 0;
    em__store(&bits, dt, v);
    return bits;
}

int em_cpu_FILL(const em_kargs *k)
{
    em_tensor *o = k->out[0];
    fill_ctx c = {.bits = value_bits(k->f[0], o->dtype), .size = em_dtype_size(o->dtype)};
    c.zero = c.bits == 0;
    c.stream = (double)em_numel(o) * (double)c.size >= (double)em__fill_stream_bytes();
    em__iter_run(1, &k->out[0], fill_loop, &c, 0);
    return EM_OK;
}

typedef struct arange_ctx { double start, step; char *base; em_dtype dt; } arange_ctx;

static void arange_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const arange_ctx *c = vctx;
    int64_t i0 = (p[0] - c->base) / (int64_t)em_dtype_size(c->dt);   /* out is contiguous */
    double a = c->start, d = c->step;
    switch (c->dt) {
    case EM_F32: for (int64_t i = 0; i < n; i++) ((float *)p[0])[i] = (float)(a + (double)(i0 + i) * d); break;
    case EM_F64: for (int64_t i = 0; i < n; i++) ((double *)p[0])[i] = a + (double)(i0 + i) * d; break;
    default:
        for (int64_t i = 0; i < n; i++) em__store(p[0] + i * s[0], c->dt, a + (double)(i0 + i) * d);
    }
}

int em_cpu_ARANGE(const em_kargs *k)
{
    em_tensor *o = k->out[0];
    arange_ctx c = {.start = k->f[0], .step = k->f[1], .base = em_data_ptr(o), .dt = o->dtype};
    em__iter_run(1, &k->out[0], arange_loop, &c, 0);
    return EM_OK;
}

int em_cpu_EYE(const em_kargs *k)
{
    em_tensor *o = k->out[0];
    size_t es = em_dtype_size(o->dtype);
    int64_t n = o->shape[0], m = o->shape[1];
    char *d = em_data_ptr(o);
    if (n * m == 0) return EM_OK;
    memset(d, 0, (size_t)(n * m) * es);
    uint64_t one = value_bits(1.0, o->dtype);
    for (int64_t i = 0; i < n && i < m; i++) memcpy(d + (i * m + i) * (int64_t)es, &one, es);
    return EM_OK;
}

/* ---- COPY ------------------------------------------------------------------------ */

typedef struct copy_ctx { em_dtype ddt, sdt; size_t dsize, ssize; } copy_ctx;

/* Moves n elements of `size` bytes between strided rows. */
static void move_elems(char *dst, int64_t ds, const char *src, int64_t ss, size_t size, int64_t n)
{
    if (ds == (int64_t)size && ss == (int64_t)size) {
        memcpy(dst, src, (size_t)n * size);
        return;
    }
#define MOVE_T(T) for (int64_t i = 0; i < n; i++) *(T *)(dst + i * ds) = *(const T *)(src + i * ss)
    SIZE_SWITCH(size, MOVE_T)
#undef MOVE_T
}

static void copy_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const copy_ctx *c = vctx;
    if (c->ddt == c->sdt) {
        move_elems(p[0], s[0], p[1], s[1], c->dsize, n);
        return;
    }
    if (s[0] == (int64_t)c->dsize && s[1] == (int64_t)c->ssize) {
        em__convert_n(p[0], c->ddt, p[1], c->sdt, n);
        return;
    }
    /* strided conversion: gather, convert in bulk, scatter */
    _Alignas(64) char sb[CHUNK * 8], db[CHUNK * 8];
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        move_elems(sb, (int64_t)c->ssize, p[1] + i0 * s[1], s[1], c->ssize, m);
        em__convert_n(db, c->ddt, sb, c->sdt, m);
        move_elems(p[0] + i0 * s[0], s[0], db, (int64_t)c->dsize, c->dsize, m);
    }
}

void em__cpu_copy(em_tensor *dst, const em_tensor *src)
{
    em_tensor *ts[2] = {dst, (em_tensor *)src};
    copy_ctx c = {.ddt = dst->dtype, .sdt = src->dtype, .dsize = em_dtype_size(dst->dtype),
                  .ssize = em_dtype_size(src->dtype)};
    em__iter_run(2, ts, copy_loop, &c, 0);
}

int em_cpu_COPY(const em_kargs *k)
{
    em__cpu_copy(k->out[0], k->in[0]);
    return EM_OK;
}

/* ---- binary and comparison loops ------------------------------------------------------
 * BIN_BODY: the row loop for out = EXPR(x, y), with x, y of type TI and out of TO. */
#define BIN_BODY(TI, TO, EXPR)                                                               \
    char *po = p[0], *pa = p[1], *pb = p[2];                                                 \
    const int64_t so = s[0], sa = s[1], sb = s[2];                                           \
    if (so == sizeof(TO) && sa == sizeof(TI) && sb == sizeof(TI)) {                          \
        TO *o = (TO *)po;                                                                    \
        const TI *A = (const TI *)pa, *B = (const TI *)pb;                                   \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                \
            TI x = A[i], y = B[i];                                                           \
            o[i] = (EXPR);                                                                   \
        }                                                                                    \
    } else if (so == sizeof(TO) && sa == sizeof(TI) && sb == 0) {                            \
        TO *o = (TO *)po;                                                                    \
        const TI *A = (const TI *)pa;                                                        \
        const TI y = *(const TI *)pb;                                                        \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                \
            TI x = A[i];                                                                     \
            o[i] = (EXPR);                                                                   \
        }                                                                                    \
    } else if (so == sizeof(TO) && sa == 0 && sb == sizeof(TI)) {                            \
        TO *o = (TO *)po;                                                                    \
        const TI *B = (const TI *)pb;                                                        \
        const TI x = *(const TI *)pa;                                                        \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                \
            TI y = B[i];                                                                     \
            o[i] = (EXPR);                                                                   \
        }                                                                                    \
    } else {                                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                    \
            TI x = *(const TI *)(pa + i * sa), y = *(const TI *)(pb + i * sb);               \
            *(TO *)(po + i * so) = (EXPR);                                                   \
        }                                                                                    \
    }

#define DEF_BIN(NAME, TI, TO, EXPR) \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) { (void)ctx; BIN_BODY(TI, TO, EXPR) }

/* Integer expressions: wrap through the unsigned type (signed overflow is UB in C). */
#define W_ADD(T, U) (T)((U)x + (U)y)
#define W_SUB(T, U) (T)((U)x - (U)y)
#define W_MUL(T, U) (T)((U)x * (U)y)
#define I_MAX(T, U) (x > y ? x : y)
#define I_MIN(T, U) (x < y ? x : y)
#define I_POW(T, U) (T)ipow((int64_t)x, (int64_t)y)

/* Integer power by squaring, wrapping like PyTorch. Negative exponents give
 * 1 / x^-y truncated: 1 for x == 1, +-1 for x == -1, else 0. */
static inline int64_t ipow(int64_t x, int64_t y)
{
    if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
    uint64_t r = 1, b = (uint64_t)x;
    while (y) {
        if (y & 1) r *= b;
        b *= b;
        y >>= 1;
    }
    return (int64_t)r;
}

/* NaN-propagating maximum/minimum, as torch.maximum/minimum. */
#define F_MAX (x > y || x != x ? x : y)
#define F_MIN (x < y || x != x ? x : y)

#define DEF_ARITH(NAME, FEXPR, IEXPR)                       \
    DEF_BIN(NAME##_f32, float, float, FEXPR)                \
    DEF_BIN(NAME##_f64, double, double, FEXPR)              \
    DEF_BIN(NAME##_i64, int64_t, int64_t, IEXPR(int64_t, uint64_t)) \
    DEF_BIN(NAME##_i32, int32_t, int32_t, IEXPR(int32_t, uint32_t))

DEF_ARITH(add, x + y, W_ADD)
DEF_ARITH(sub, x - y, W_SUB)
DEF_ARITH(mul, x * y, W_MUL)
DEF_ARITH(max, F_MAX, I_MAX)
DEF_ARITH(min, F_MIN, I_MIN)
DEF_BIN(div_f32, float, float, x / y)
DEF_BIN(div_f64, double, double, x / y)
DEF_BIN(pow_i64, int64_t, int64_t, I_POW(int64_t, uint64_t))
DEF_BIN(pow_i32, int32_t, int32_t, I_POW(int32_t, uint32_t))

/* pow with a broadcast scalar exponent takes PyTorch's shortcuts for the
 * common exponents (x*x for 2, sqrt for 0.5, ...); otherwise libm's pow. */
#define DEF_POW(NAME, T, POW, SQRT)                                                          \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx)                       \
    {                                                                                        \
        (void)ctx;                                                                           \
        if (s[2] == 0 && s[0] == sizeof(T) && s[1] == sizeof(T)) {                           \
            T e = *(const T *)p[2], *o = (T *)p[0];                                          \
            const T *A = (const T *)p[1];                                                    \
            if (e == 2) { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = A[i] * A[i]; return; } \
            if (e == 3) { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = A[i] * A[i] * A[i]; return; } \
            if (e == 1) { memmove(o, A, (size_t)n * sizeof(T)); return; }                    \
            if (e == 0.5) { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = SQRT(A[i]); return; } \
            if (e == -0.5) { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = 1 / SQRT(A[i]); return; } \
            if (e == -1) { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = 1 / A[i]; return; } \
            if (e == -2) { _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = 1 / (A[i] * A[i]); return; } \
        }                                                                                    \
        BIN_BODY(T, T, POW(x, y))                                                            \
    }
DEF_POW(pow_f32, float, powf, sqrtf)
DEF_POW(pow_f64, double, pow, sqrt)

#define DEF_CMP(NAME, OPER)                              \
    DEF_BIN(NAME##_f32, float, uint8_t, x OPER y)        \
    DEF_BIN(NAME##_f64, double, uint8_t, x OPER y)       \
    DEF_BIN(NAME##_i64, int64_t, uint8_t, x OPER y)      \
    DEF_BIN(NAME##_i32, int32_t, uint8_t, x OPER y)      \
    DEF_BIN(NAME##_u8, uint8_t, uint8_t, x OPER y)
DEF_CMP(eq, ==)
DEF_CMP(ne, !=)
DEF_CMP(lt, <)
DEF_CMP(le, <=)
DEF_CMP(gt, >)
DEF_CMP(ge, >=)

/* ---- unary loops: one per row of tensor/unary_ops.h ------------------------------------
 * UN_BODY: the row loop for out = EXPR(x); in the list's expressions C names the
 * compute type (the loop's T). */
#define UN_BODY(T, EXPR)                                                          \
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {                                 \
        T *o = (T *)p[0];                                                         \
        const T *A = (const T *)p[1];                                             \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                     \
            T x = A[i];                                                           \
            o[i] = (EXPR);                                                        \
        }                                                                         \
    } else {                                                                      \
        for (int64_t i = 0; i < n; i++) {                                         \
            T x = *(const T *)(p[1] + i * s[1]);                                  \
            *(T *)(p[0] + i * s[0]) = (EXPR);                                     \
        }                                                                         \
    }
#define DEF_UN(NAME, T, EXPR)                                                     \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx)            \
    {                                                                             \
        typedef T C __attribute__((unused));                                      \
        (void)ctx;                                                                \
        UN_BODY(T, EXPR)                                                          \
    }
/* dx = dy * f'(x): p[0] = dx, p[1] = x, p[2] = dy (BIN_BODY's x and y) */
#define DEF_BWD(NAME, T, DF)                                                      \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx)            \
    {                                                                             \
        typedef T C __attribute__((unused));                                      \
        (void)ctx;                                                                \
        BIN_BODY(T, T, y * (DF))                                                  \
    }

/* The m_* functions of the list's expressions, chosen by the argument's type:
 * f32 takes vmath.h's vectorizing forms where there is one, f64 libm. */
static inline double sigmoid_d(double x)
{
    double e = exp(-fabs(x));
    return x >= 0 ? 1 / (1 + e) : e / (1 + e);
}
static inline double gelu_d(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752440); }
static inline double gelu_tanh_d(double x)
{
    double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1 + tanh(u));
}

/* gelu'(x), erf form: Phi(x) + x phi(x). In f32, Phi(x) comes from
 * em__gelu_erff(x) / x, which keeps the forward kernel's accuracy (5e-7
 * relative) and vectorizes; near 0 (where the quotient is inexact or 0/0) Phi
 * is 1/2 to far below f32 resolution. */
#define GELU_A 0.044715
#define SQRT_2_OVER_PI 0.79788456080286535588
#define INV_SQRT_2PI 0.39894228040143267794
/* gelu'(x) given gx = em__gelu_erff(x): the forward's output, when autograd
 * kept it (GELU_BWD's in[2]), is the same value, so reading it skips the erf
 * and gives the same bits. */
static inline __attribute__((always_inline)) float gelu_grad_given_f32(float x, float gx)
{
    float phi_cdf = fabsf(x) < 1e-20f ? 0.5f : gx / x;
    float pdf = (float)INV_SQRT_2PI * em__expf(-0.5f * x * x);
    return phi_cdf + x * pdf;
}
static inline __attribute__((always_inline)) float gelu_grad_f32(float x)
{
    return gelu_grad_given_f32(x, em__gelu_erff(x));
}
static inline double gelu_grad_f64(double x)
{
    return 0.5 * erfc(-x * 0.70710678118654752440) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}

/* gelu'(x), tanh form: gelu(x) = x/2 (1 + tanh(u)), u = c (x + a x^3), so
 * gelu'(x) = (1 + t)/2 + x/2 (1 - t^2) u', t = tanh(u), u' = c (1 + 3 a x^2).
 * In f32, with s = sigmoid(2u): (1 + t)/2 = s and (1 - t^2)/4 = s sigmoid(-2u),
 * so gelu'(x) = s + 2 x s sigmoid(-2u) u'; both sigmoids are accurate in their
 * tails, where 1 - t*t would cancel. */
static inline float gelu_tanh_grad_f32(float x)
{
    float x2 = x * x;
    float u2 = 2.0f * (float)SQRT_2_OVER_PI * EM__FMAF((float)GELU_A * x, x2, x);
    float du = (float)SQRT_2_OVER_PI * EM__FMAF(3.0f * (float)GELU_A, x2, 1.0f);
    float s = em__sigmoidf(u2), sm = em__sigmoidf(-u2);
    return EM__FMAF(2.0f * x * s, sm * du, s);
}
static inline double gelu_tanh_grad_f64(double x)
{
    double x2 = x * x, t = tanh(SQRT_2_OVER_PI * (x + GELU_A * x * x2));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_A * x2);
}

/* Negation and |x|; integers wrap (two's complement), as torch. */
static inline float neg_f(float x) { return -x; }
static inline double neg_d(double x) { return -x; }
static inline int64_t neg_l(int64_t x) { return (int64_t)(0 - (uint64_t)x); }
static inline int32_t neg_i(int32_t x) { return (int32_t)(0 - (uint32_t)x); }
static inline int64_t abs_l(int64_t x) { return x < 0 ? neg_l(x) : x; }
static inline int32_t abs_i(int32_t x) { return x < 0 ? neg_i(x) : x; }

#define m_neg(x) _Generic((x), float: neg_f, double: neg_d, int64_t: neg_l, int32_t: neg_i)(x)
#define m_abs(x) _Generic((x), float: fabsf, double: fabs, int64_t: abs_l, int32_t: abs_i)(x)
#define m_exp(x) _Generic((x), float: em__expf, double: exp)(x)
#define m_log(x) _Generic((x), float: logf, double: log)(x)
#define m_sqrt(x) _Generic((x), float: sqrtf, double: sqrt)(x)
#define m_tanh(x) _Generic((x), float: em__tanhf, double: tanh)(x)
#define m_sin(x) _Generic((x), float: sinf, double: sin)(x)
#define m_cos(x) _Generic((x), float: cosf, double: cos)(x)
#define m_sigmoid(x) _Generic((x), float: em__sigmoidf, double: sigmoid_d)(x)
#define m_gelu(x) _Generic((x), float: em__gelu_erff, double: gelu_d)(x)
#define m_gelu_tanh(x) _Generic((x), float: em__gelu_tanhf, double: gelu_tanh_d)(x)
#define m_gelu_grad(x) _Generic((x), float: gelu_grad_f32, double: gelu_grad_f64)(x)
#define m_gelu_tanh_grad(x) _Generic((x), float: gelu_tanh_grad_f32, double: gelu_tanh_grad_f64)(x)

/* un_<name>_f32/_f64 (and _i64/_i32 for NUMERIC), bwd_<name>_f32/_f64 */
#define UN_LOOPS_FLOATING(name, f) DEF_UN(un_##name##_f32, float, f) DEF_UN(un_##name##_f64, double, f)
#define UN_LOOPS_NUMERIC(name, f) \
    UN_LOOPS_FLOATING(name, f) DEF_UN(un_##name##_i64, int64_t, f) DEF_UN(un_##name##_i32, int32_t, f)
#define UN_LOOPS(NAME, name, dtypes, cost, f, ...) UN_LOOPS_##dtypes(name, f)
#define BWD_LOOPS(NAME, name, df, ...) DEF_BWD(bwd_##name##_f32, float, df) DEF_BWD(bwd_##name##_f64, double, df)
EM_UNARY_OPS(UN_LOOPS)
EM_UNARY_BWD_OPS(BWD_LOOPS)

/* ---- the op -> loop tables ---------------------------------------------------------
 * f16/bf16 use the EM_F32 entry (see run()); an empty slot is a dtype the op
 * does not take (the op function rejects it before dispatch). */
#define ARITH_ROW(name) {[EM_F32] = name##_f32, [EM_F64] = name##_f64, [EM_I64] = name##_i64, [EM_I32] = name##_i32}
#define CMP_ROW(name) \
    {[EM_F32] = name##_f32, [EM_F64] = name##_f64, [EM_I64] = name##_i64, [EM_I32] = name##_i32, [EM_BOOL] = name##_u8}
#define FLOAT_ROW(name) {[EM_F32] = name##_f32, [EM_F64] = name##_f64}
#define UN_ROW_FLOATING(name) FLOAT_ROW(un_##name)
#define UN_ROW_NUMERIC(name) ARITH_ROW(un_##name)
#define UN_ROW(NAME, name, dtypes, ...) [EM_OP_##NAME] = UN_ROW_##dtypes(name),
#define BWD_ROW(NAME, name, ...) [EM_OP_##NAME##_BWD] = FLOAT_ROW(bwd_##name),

static const em_iter_fn loops[EM_NUM_OPS][EM_NUM_DTYPES] = {
    [EM_OP_ADD] = ARITH_ROW(add), [EM_OP_SUB] = ARITH_ROW(sub), [EM_OP_MUL] = ARITH_ROW(mul),
    [EM_OP_DIV] = FLOAT_ROW(div), [EM_OP_POW] = ARITH_ROW(pow),
    [EM_OP_MAXIMUM] = ARITH_ROW(max), [EM_OP_MINIMUM] = ARITH_ROW(min),
    [EM_OP_EQ] = CMP_ROW(eq), [EM_OP_NE] = CMP_ROW(ne), [EM_OP_LT] = CMP_ROW(lt),
    [EM_OP_LE] = CMP_ROW(le), [EM_OP_GT] = CMP_ROW(gt), [EM_OP_GE] = CMP_ROW(ge),
    EM_UNARY_OPS(UN_ROW)
    EM_UNARY_BWD_OPS(BWD_ROW)
};

/* Loops that take bf16 operands directly (every operand bf16), bypassing the
 * f32 staging of run(): k_gelu_bf16.c. */
static const em_iter_fn bf16_loops[EM_NUM_OPS] = {
#if defined(EM__HAVE_BF16X16)
    [EM_OP_GELU] = em__gelu_bf16_loop, [EM_OP_GELU_BWD] = em__gelu_bwd_bf16_loop,
#else
    NULL,   /* none without AVX-512: every bf16 op stages through f32 */
#endif
};

/* Ops whose element costs tens of cycles get a smaller grain (more threads
 * sooner): pow, the unary ops marked HEAVY, and every unary _BWD. */
#define HEAVY_IS_HEAVY true
#define HEAVY_IS_LIGHT false
#define HEAVY_ROW(NAME, name, dtypes, cost, ...) [EM_OP_##NAME] = HEAVY_IS_##cost,
#define HEAVY_BWD_ROW(NAME, ...) [EM_OP_##NAME##_BWD] = true,
static const bool heavy[EM_NUM_OPS] = {[EM_OP_POW] = true, EM_UNARY_OPS(HEAVY_ROW) EM_UNARY_BWD_OPS(HEAVY_BWD_ROW)};

/* Binary, compare and unary kernels: out[0] then the inputs, looked up by the
 * first input's dtype. */
static int run_table(const em_kargs *k, int nin)
{
    em_dtype dt = k->in[0]->dtype;
    em_iter_fn fn = loops[k->op][is_half(dt) ? EM_F32 : dt];
    if (!fn)
        return em__fail(EM_ERR_UNSUPPORTED, "cpu: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
    em_tensor *ts[3] = {k->out[0], k->in[0], nin > 1 ? k->in[1] : NULL};
    int64_t grain = heavy[k->op] ? EM_ITER_GRAIN_HEAVY : EM_ITER_GRAIN;
    bool all_bf16 = true;
    for (int i = 0; i <= nin; i++) all_bf16 &= ts[i]->dtype == EM_BF16;
    if (all_bf16 && bf16_loops[k->op]) {
        em__iter_run(1 + nin, ts, bf16_loops[k->op], NULL, grain);
        return EM_OK;
    }
    run(1 + nin, ts, fn, NULL, grain);
    return EM_OK;
}

/* GELU_BWD in f32 given y = gelu(x) (in[2]): p[0] = dx, p[1] = x, p[2] = dy,
 * p[3] = y; dx = dy * gelu'(x) with gelu_grad_f32's bits. */
static void bwd_gelu_given_y_f32(char **p, const int64_t *s, int64_t n, void *ctx)
{
    (void)ctx;
    if (s[0] == 4 && s[1] == 4 && s[2] == 4 && s[3] == 4) {
        float *o = (float *)p[0];
        const float *X = (const float *)p[1], *G = (const float *)p[2], *Y = (const float *)p[3];
#pragma omp simd
        for (int64_t i = 0; i < n; i++) o[i] = G[i] * gelu_grad_given_f32(X[i], Y[i]);
    } else {
        for (int64_t i = 0; i < n; i++) {
            float x = *(const float *)(p[1] + i * s[1]), y = *(const float *)(p[3] + i * s[3]);
            *(float *)(p[0] + i * s[0]) = *(const float *)(p[2] + i * s[2]) * gelu_grad_given_f32(x, y);
        }
    }
}

/* The unary _BWD kernels: dx, x and dy share one dtype (the front-end checks).
 * in[2], the forward's output, is read only by GELU in f32; half dtypes would
 * give y rounded, and f64's gelu'(x) does not go through gelu(x). */
static int run_bwd(const em_kargs *k)
{
    em_dtype dt = k->out[0]->dtype, xt = k->in[0]->dtype, gt = k->in[1]->dtype;
    if (xt != dt || gt != dt)
        return em__fail(EM_ERR_UNSUPPORTED, "cpu: %s: operands differ in dtype (%s, %s, %s)", em_op_table[k->op].name,
                        em_dtype_name(dt), em_dtype_name(xt), em_dtype_name(gt));
    if (k->op == EM_OP_GELU_BWD && dt == EM_F32 && k->in[2] && k->in[2]->dtype == EM_F32) {
        em_tensor *ts[4] = {k->out[0], k->in[0], k->in[1], k->in[2]};
        em__iter_run(4, ts, bwd_gelu_given_y_f32, NULL, EM_ITER_GRAIN_HEAVY);
        return EM_OK;
    }
    return run_table(k, 2);
}

#define BINARY_KERNEL(OP) int em_cpu_##OP(const em_kargs *k) { return run_table(k, 2); }
#define UNARY_KERNEL(OP, ...) int em_cpu_##OP(const em_kargs *k) { return run_table(k, 1); }
#define UNARY_BWD_KERNEL(OP, ...) int em_cpu_##OP##_BWD(const em_kargs *k) { return run_bwd(k); }
BINARY_KERNEL(ADD) BINARY_KERNEL(SUB) BINARY_KERNEL(MUL) BINARY_KERNEL(DIV) BINARY_KERNEL(POW)
BINARY_KERNEL(MAXIMUM) BINARY_KERNEL(MINIMUM)
BINARY_KERNEL(EQ) BINARY_KERNEL(NE) BINARY_KERNEL(LT) BINARY_KERNEL(LE) BINARY_KERNEL(GT) BINARY_KERNEL(GE)
EM_UNARY_OPS(UNARY_KERNEL)
EM_UNARY_BWD_OPS(UNARY_BWD_KERNEL)

/* ---- WHERE and MASKED_FILL: they only move bytes, so any dtype by its size ---------- */

static void where_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    size_t size = *(const size_t *)vctx;
#define WHERE_T(T)                                                                               \
    if (s[0] == sizeof(T) && s[1] == 1 && s[2] == sizeof(T) && s[3] == sizeof(T)) {              \
        T *o = (T *)p[0];                                                                        \
        const uint8_t *c = (const uint8_t *)p[1];                                                \
        const T *x = (const T *)p[2], *y = (const T *)p[3];                                      \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : y[i];           \
    } else {                                                                                     \
        for (int64_t i = 0; i < n; i++)                                                          \
            *(T *)(p[0] + i * s[0]) = *(const uint8_t *)(p[1] + i * s[1]) ? *(const T *)(p[2] + i * s[2]) \
                                                                          : *(const T *)(p[3] + i * s[3]); \
    }
    SIZE_SWITCH(size, WHERE_T)
#undef WHERE_T
}

int em_cpu_WHERE(const em_kargs *k)
{
    em_tensor *ts[4] = {k->out[0], k->in[0], k->in[1], k->in[2]};
    size_t size = em_dtype_size(k->out[0]->dtype);
    em__iter_run(4, ts, where_loop, &size, 0);
    return EM_OK;
}

static void masked_fill_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const fill_ctx *c = vctx;
#define MASKED_T(T)                                                                              \
    {                                                                                            \
        T v;                                                                                     \
        memcpy(&v, &c->bits, sizeof v);                                                          \
        if (s[0] == sizeof(T) && s[1] == sizeof(T) && s[2] == 1) {                               \
            T *o = (T *)p[0];                                                                    \
            const T *x = (const T *)p[1];                                                        \
            const uint8_t *m = (const uint8_t *)p[2];                                            \
            _Pragma("omp simd") for (int64_t i = 0; i < n; i++) o[i] = m[i] ? v : x[i];          \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                      \
                *(T *)(p[0] + i * s[0]) = *(const uint8_t *)(p[2] + i * s[2]) ? v : *(const T *)(p[1] + i * s[1]); \
        }                                                                                        \
    }
    SIZE_SWITCH(c->size, MASKED_T)
#undef MASKED_T
}

int em_cpu_MASKED_FILL(const em_kargs *k)
{
    em_tensor *ts[3] = {k->out[0], k->in[0], k->in[1]};
    em_dtype dt = k->out[0]->dtype;
    fill_ctx c = {.bits = value_bits(k->f[0], dt), .size = em_dtype_size(dt)};
    em__iter_run(3, ts, masked_fill_loop, &c, 0);
    return EM_OK;
}
