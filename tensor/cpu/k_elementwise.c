/* ember — CPU elementwise kernels: creation (FILL, ARANGE, EYE), COPY, binary
 * arithmetic, comparisons, unary math, WHERE and MASKED_FILL (contracts in
 * tensor/ops.h; the op functions in op_elementwise.c/op_create.c validate).
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

#include <math.h>
#include <string.h>

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

typedef struct fill_ctx { uint64_t bits; size_t size; bool zero; } fill_ctx;

static void fill_loop(char **p, const int64_t *s, int64_t n, void *vctx)
{
    const fill_ctx *c = vctx;
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

int em_cpu_COPY(const em_kargs *k)
{
    em_tensor *ts[2] = {k->out[0], k->in[0]};
    copy_ctx c = {.ddt = ts[0]->dtype, .sdt = ts[1]->dtype,
                  .dsize = em_dtype_size(ts[0]->dtype), .ssize = em_dtype_size(ts[1]->dtype)};
    em__iter_run(2, ts, copy_loop, &c, 0);
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

/* ---- unary loops ------------------------------------------------------------------ */
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
#define DEF_UN(NAME, T, EXPR) \
    static void NAME(char **p, const int64_t *s, int64_t n, void *ctx) { (void)ctx; UN_BODY(T, EXPR) }

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

DEF_UN(neg_f32, float, -x)            DEF_UN(neg_f64, double, -x)
DEF_UN(neg_i64, int64_t, (int64_t)(0 - (uint64_t)x))
DEF_UN(neg_i32, int32_t, (int32_t)(0 - (uint32_t)x))
DEF_UN(abs_f32, float, fabsf(x))      DEF_UN(abs_f64, double, fabs(x))
DEF_UN(abs_i64, int64_t, x < 0 ? (int64_t)(0 - (uint64_t)x) : x)
DEF_UN(abs_i32, int32_t, x < 0 ? (int32_t)(0 - (uint32_t)x) : x)
DEF_UN(relu_f32, float, x <= 0 ? 0.0f : x)   DEF_UN(relu_f64, double, x <= 0 ? 0.0 : x)
DEF_UN(relu_i64, int64_t, x < 0 ? 0 : x)     DEF_UN(relu_i32, int32_t, x < 0 ? 0 : x)
DEF_UN(exp_f32, float, em__expf(x))          DEF_UN(exp_f64, double, exp(x))
DEF_UN(log_f32, float, logf(x))              DEF_UN(log_f64, double, log(x))
DEF_UN(sqrt_f32, float, sqrtf(x))            DEF_UN(sqrt_f64, double, sqrt(x))
DEF_UN(rsqrt_f32, float, 1.0f / sqrtf(x))    DEF_UN(rsqrt_f64, double, 1.0 / sqrt(x))
DEF_UN(tanh_f32, float, em__tanhf(x))        DEF_UN(tanh_f64, double, tanh(x))
DEF_UN(sigmoid_f32, float, em__sigmoidf(x))  DEF_UN(sigmoid_f64, double, sigmoid_d(x))
DEF_UN(gelu_f32, float, em__gelu_erff(x))    DEF_UN(gelu_f64, double, gelu_d(x))
DEF_UN(gelu_tanh_f32, float, em__gelu_tanhf(x)) DEF_UN(gelu_tanh_f64, double, gelu_tanh_d(x))
DEF_UN(sin_f32, float, sinf(x))              DEF_UN(sin_f64, double, sin(x))
DEF_UN(cos_f32, float, cosf(x))              DEF_UN(cos_f64, double, cos(x))

/* ---- the op -> loop tables ---------------------------------------------------------
 * f16/bf16 use the EM_F32 entry (see run()); an empty slot is a dtype the op
 * does not take (the op function rejects it before dispatch). */
#define ARITH_ROW(name) {[EM_F32] = name##_f32, [EM_F64] = name##_f64, [EM_I64] = name##_i64, [EM_I32] = name##_i32}
#define CMP_ROW(name) \
    {[EM_F32] = name##_f32, [EM_F64] = name##_f64, [EM_I64] = name##_i64, [EM_I32] = name##_i32, [EM_BOOL] = name##_u8}
#define FLOAT_ROW(name) {[EM_F32] = name##_f32, [EM_F64] = name##_f64}

static const em_iter_fn loops[EM_NUM_OPS][EM_NUM_DTYPES] = {
    [EM_OP_ADD] = ARITH_ROW(add), [EM_OP_SUB] = ARITH_ROW(sub), [EM_OP_MUL] = ARITH_ROW(mul),
    [EM_OP_DIV] = FLOAT_ROW(div), [EM_OP_POW] = ARITH_ROW(pow),
    [EM_OP_MAXIMUM] = ARITH_ROW(max), [EM_OP_MINIMUM] = ARITH_ROW(min),
    [EM_OP_EQ] = CMP_ROW(eq), [EM_OP_NE] = CMP_ROW(ne), [EM_OP_LT] = CMP_ROW(lt),
    [EM_OP_LE] = CMP_ROW(le), [EM_OP_GT] = CMP_ROW(gt), [EM_OP_GE] = CMP_ROW(ge),
    [EM_OP_NEG] = ARITH_ROW(neg), [EM_OP_ABS] = ARITH_ROW(abs), [EM_OP_RELU] = ARITH_ROW(relu),
    [EM_OP_EXP] = FLOAT_ROW(exp), [EM_OP_LOG] = FLOAT_ROW(log), [EM_OP_SQRT] = FLOAT_ROW(sqrt),
    [EM_OP_RSQRT] = FLOAT_ROW(rsqrt), [EM_OP_TANH] = FLOAT_ROW(tanh), [EM_OP_SIGMOID] = FLOAT_ROW(sigmoid),
    [EM_OP_GELU] = FLOAT_ROW(gelu), [EM_OP_GELU_TANH] = FLOAT_ROW(gelu_tanh),
    [EM_OP_SIN] = FLOAT_ROW(sin), [EM_OP_COS] = FLOAT_ROW(cos),
};

/* Ops whose element costs tens of cycles get a smaller grain (more threads sooner). */
static int64_t grain_of(em_op op)
{
    switch (op) {
    case EM_OP_POW: case EM_OP_EXP: case EM_OP_LOG: case EM_OP_TANH: case EM_OP_SIGMOID:
    case EM_OP_GELU: case EM_OP_GELU_TANH: case EM_OP_SIN: case EM_OP_COS:
        return EM_ITER_GRAIN_HEAVY;
    default:
        return EM_ITER_GRAIN;
    }
}

/* Binary, compare and unary kernels: out[0] then the inputs, looked up by the
 * first input's dtype. */
static int run_table(const em_kargs *k, int nin)
{
    em_dtype dt = k->in[0]->dtype;
    em_iter_fn fn = loops[k->op][is_half(dt) ? EM_F32 : dt];
    if (!fn)
        return em__fail(EM_ERR_UNSUPPORTED, "cpu: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
    em_tensor *ts[3] = {k->out[0], k->in[0], nin > 1 ? k->in[1] : NULL};
    run(1 + nin, ts, fn, NULL, grain_of(k->op));
    return EM_OK;
}

#define BINARY_KERNEL(OP) int em_cpu_##OP(const em_kargs *k) { return run_table(k, 2); }
#define UNARY_KERNEL(OP) int em_cpu_##OP(const em_kargs *k) { return run_table(k, 1); }
BINARY_KERNEL(ADD) BINARY_KERNEL(SUB) BINARY_KERNEL(MUL) BINARY_KERNEL(DIV) BINARY_KERNEL(POW)
BINARY_KERNEL(MAXIMUM) BINARY_KERNEL(MINIMUM)
BINARY_KERNEL(EQ) BINARY_KERNEL(NE) BINARY_KERNEL(LT) BINARY_KERNEL(LE) BINARY_KERNEL(GT) BINARY_KERNEL(GE)
UNARY_KERNEL(NEG) UNARY_KERNEL(ABS) UNARY_KERNEL(EXP) UNARY_KERNEL(LOG) UNARY_KERNEL(SQRT)
UNARY_KERNEL(RSQRT) UNARY_KERNEL(TANH) UNARY_KERNEL(SIGMOID) UNARY_KERNEL(RELU) UNARY_KERNEL(GELU)
UNARY_KERNEL(GELU_TANH) UNARY_KERNEL(SIN) UNARY_KERNEL(COS)

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
