/* ember — CUDA elementwise kernels: FILL ARANGE EYE, COPY, binary arithmetic
 * and comparisons (inputs broadcast to the output by the kernel), the unary
 * ops and their _BWD kernels (generated from tensor/unary_ops.h), WHERE and
 * MASKED_FILL (contracts in tensor/ops.h; semantics as the CPU kernels in
 * tensor/cpu/k_elementwise.c).
 *
 * f16/bf16 compute in f32 and round once (nearest even); f64 computes in
 * f64; integers wrap (two's complement) as torch; max/min propagate NaN;
 * conversions (COPY) give exactly em__convert_n's bits. Transcendentals use
 * CUDA's libdevice (within 2 ulp of the CPU's, not bit-identical).
 */
#include "tensor/cuda/k_elementwise.cuh"

using namespace emcu;

namespace {

/* ---- per-element math in the compute type --------------------------------------------- */
__device__ inline float m_exp(float x) { return expf(x); }
__device__ inline double m_exp(double x) { return exp(x); }
__device__ inline float m_log(float x) { return logf(x); }
__device__ inline double m_log(double x) { return log(x); }
__device__ inline float m_sqrt(float x) { return sqrtf(x); }
__device__ inline double m_sqrt(double x) { return sqrt(x); }
__device__ inline float m_tanh(float x) { return tanhf(x); }
__device__ inline double m_tanh(double x) { return tanh(x); }
__device__ inline float m_sin(float x) { return sinf(x); }
__device__ inline double m_sin(double x) { return sin(x); }
__device__ inline float m_cos(float x) { return cosf(x); }
__device__ inline double m_cos(double x) { return cos(x); }
__device__ inline float m_pow(float x, float y) { return powf(x, y); }
__device__ inline double m_pow(double x, double y) { return pow(x, y); }
__device__ inline float m_abs(float x) { return fabsf(x); }
__device__ inline double m_abs(double x) { return fabs(x); }
__device__ inline float m_erfc(float x) { return erfcf(x); }
__device__ inline double m_erfc(double x) { return erfc(x); }
template <class C> __device__ inline C m_sigmoid(C x)
{
    C e = m_exp(-(x < 0 ? -x : x));
    return x >= 0 ? (C)1 / ((C)1 + e) : e / ((C)1 + e);
}

template <class C> constexpr bool is_int = std::is_integral<C>::value;
template <class C> using U = typename std::make_unsigned<C>::type;

/* integers wrap (two's complement), as torch */
template <class C> __device__ inline C m_neg(C x)
{
    if constexpr (is_int<C>) return (C)(0 - (U<C>)x);
    else return -x;
}
__device__ inline int64_t m_abs(int64_t x) { return x < 0 ? m_neg(x) : x; }
__device__ inline int32_t m_abs(int32_t x) { return x < 0 ? m_neg(x) : x; }
template <class C> __device__ inline C m_gelu(C x) { return (C)0.5 * x * m_erfc(-x * (C)0.70710678118654752440); }
template <class C> __device__ inline C m_gelu_tanh(C x)
{
    C u = (C)0.79788456080286535588 * (x + (C)0.044715 * x * x * x);
    return (C)0.5 * x * ((C)1 + m_tanh(u));
}

/* gelu'(x) (tensor/cpu/k_elementwise.c's formulas) */
__device__ inline float m_gelu_grad(float x)
{
    float pdf = 0.39894228040143267794f * expf(-0.5f * x * x);
    return 0.5f * erfcf(-x * 0.70710678118654752440f) + x * pdf;
}
__device__ inline double m_gelu_grad(double x)
{
    return 0.5 * erfc(-x * 0.70710678118654752440) + x * 0.39894228040143267794 * exp(-0.5 * x * x);
}
__device__ inline float m_gelu_tanh_grad(float x)
{
    float x2 = x * x;
    float u2 = 2.0f * 0.79788456080286535588f * fmaf(0.044715f * x, x2, x);
    float du = 0.79788456080286535588f * fmaf(3.0f * 0.044715f, x2, 1.0f);
    float s = m_sigmoid(u2), sm = m_sigmoid(-u2);
    return fmaf(2.0f * x * s, sm * du, s);
}
__device__ inline double m_gelu_tanh_grad(double x)
{
    double x2 = x * x, t = tanh(0.79788456080286535588 * (x + 0.044715 * x * x2));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.79788456080286535588 * (1.0 + 3.0 * 0.044715 * x2);
}

/* Integer power by squaring, wrapping; negative exponents as the CPU's ipow. */
__device__ inline int64_t ipow(int64_t x, int64_t y)
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

struct KAdd { template <class C> __device__ static C f(C x, C y) { if constexpr (is_int<C>) return (C)((U<C>)x + (U<C>)y); else return x + y; } };
struct KSub { template <class C> __device__ static C f(C x, C y) { if constexpr (is_int<C>) return (C)((U<C>)x - (U<C>)y); else return x - y; } };
struct KMul { template <class C> __device__ static C f(C x, C y) { if constexpr (is_int<C>) return (C)((U<C>)x * (U<C>)y); else return x * y; } };
struct KDiv { template <class C> __device__ static C f(C x, C y) { return x / y; } };
struct KMax { template <class C> __device__ static C f(C x, C y) { return x > y || x != x ? x : y; } };
struct KMin { template <class C> __device__ static C f(C x, C y) { return x < y || x != x ? x : y; } };
struct KPow { template <class C> __device__ static C f(C x, C y) { if constexpr (is_int<C>) return (C)ipow((int64_t)x, (int64_t)y); else return m_pow(x, y); } };
struct KEq { template <class C> __device__ static bool f(C x, C y) { return x == y; } };
struct KNe { template <class C> __device__ static bool f(C x, C y) { return x != y; } };
struct KLt { template <class C> __device__ static bool f(C x, C y) { return x < y; } };
struct KLe { template <class C> __device__ static bool f(C x, C y) { return x <= y; } };
struct KGt { template <class C> __device__ static bool f(C x, C y) { return x > y; } };
struct KGe { template <class C> __device__ static bool f(C x, C y) { return x >= y; } };

/* A binary op on storage values: load to the compute type, apply, store as O. */
template <class T, class O, class K> struct Bin {
    __device__ O operator()(T x, T y) const
    {
        using C = typename Compute<T>::type;
        return store_c<O>(K::template f<C>(load_c<C>(x), load_c<C>(y)));
    }
};

/* pow with a one-element exponent takes the CPU's shortcuts (x*x for 2, ...). */
template <class T> struct PowScalar {
    __device__ T operator()(T xs, T ys) const
    {
        using C = typename Compute<T>::type;
        C x = load_c<C>(xs), e = load_c<C>(ys), r;
        if (e == 2) r = x * x;
        else if (e == 3) r = x * x * x;
        else if (e == 1) r = x;
        else if (e == (C)0.5) r = m_sqrt(x);
        else if (e == (C)-0.5) r = (C)1 / m_sqrt(x);
        else if (e == -1) r = (C)1 / x;
        else if (e == -2) r = (C)1 / (x * x);
        else r = m_pow(x, e);
        return store_c<T>(r);
    }
};

template <class T, class O, class K> em_status bin_t(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    return run_binary<T, O>(s, tv_of(k->out[0]), tv_of(k->in[0]), tv_of(k->in[1]), Bin<T, O, K>{});
}

em_status unsupported(const em_kargs *k, em_dtype dt)
{
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
}

/* Arithmetic ops: the float dtypes, and the integers when INTS. */
template <class K, bool INTS> em_status arith(const em_kargs *k)
{
    em_dtype dt = k->in[0]->dtype;
    switch (dt) {
    case EM_F32: return bin_t<float, float, K>(k);
    case EM_F64: return bin_t<double, double, K>(k);
    case EM_F16: return bin_t<f16_t, f16_t, K>(k);
    case EM_BF16: return bin_t<bf16_t, bf16_t, K>(k);
    default: break;
    }
    if constexpr (INTS) {
        if (dt == EM_I64) return bin_t<int64_t, int64_t, K>(k);
        if (dt == EM_I32) return bin_t<int32_t, int32_t, K>(k);
    }
    return unsupported(k, dt);
}

template <class K> em_status compare(const em_kargs *k)
{
    em_dtype dt = k->in[0]->dtype;
    switch (dt) {
    case EM_F32: return bin_t<float, uint8_t, K>(k);
    case EM_F64: return bin_t<double, uint8_t, K>(k);
    case EM_F16: return bin_t<f16_t, uint8_t, K>(k);
    case EM_BF16: return bin_t<bf16_t, uint8_t, K>(k);
    case EM_I64: return bin_t<int64_t, uint8_t, K>(k);
    case EM_I32: return bin_t<int32_t, uint8_t, K>(k);
    case EM_BOOL: return bin_t<uint8_t, uint8_t, K>(k);
    default: return unsupported(k, dt);
    }
}

template <class T> em_status pow_t(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]), a = tv_of(k->in[0]), b = tv_of(k->in[1]);
    if (tv_numel(b) == 1) return run_binary<T, T>(s, o, a, b, PowScalar<T>{});
    return run_binary<T, T>(s, o, a, b, Bin<T, T, KPow>{});
}

/* ---- unary: one functor per row of tensor/unary_ops.h ---------------------------------- */
#define UN_FUNCTOR(NAME, name, dtypes, cost, expr, ...) \
    struct U_##NAME { template <class C> __device__ static C f(C x) { return expr; } };
EM_UNARY_OPS(UN_FUNCTOR)

template <class T, class K> struct Un {
    __device__ T operator()(T x) const
    {
        using C = typename Compute<T>::type;
        return store_c<T>(K::template f<C>(load_c<C>(x)));
    }
};

template <class T, class K> em_status un_t(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    return run_unary<T, T>(s, tv_of(k->out[0]), tv_of(k->in[0]), Un<T, K>{});
}

template <class K, bool INTS> em_status unary(const em_kargs *k)
{
    em_dtype dt = k->in[0]->dtype;
    switch (dt) {
    case EM_F32: return un_t<float, K>(k);
    case EM_F64: return un_t<double, K>(k);
    case EM_F16: return un_t<f16_t, K>(k);
    case EM_BF16: return un_t<bf16_t, K>(k);
    default: break;
    }
    if constexpr (INTS) {
        if (dt == EM_I64) return un_t<int64_t, K>(k);
        if (dt == EM_I32) return un_t<int32_t, K>(k);
    }
    return unsupported(k, dt);
}

/* ---- the unary _BWD kernels: dx = dy * f'(x) (unary_ops.h's DERIV rows) ---------------------- */
#define BWD_FUNCTOR(NAME, name, df, ...) \
    struct D_##NAME { template <class C> __device__ static C f(C x) { return df; } };
EM_UNARY_BWD_OPS(BWD_FUNCTOR)

template <class T, class K> struct Bwd {
    __device__ T operator()(T x, T g) const
    {
        using C = typename Compute<T>::type;
        C xc = load_c<C>(x);
        return store_c<T>(load_c<C>(g) * K::template f<C>(xc));
    }
};

template <class K> em_status unary_bwd(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]), x = tv_of(k->in[0]), g = tv_of(k->in[1]);
    if (x.dt != o.dt || g.dt != o.dt)
        return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s: operands differ in dtype (%s, %s, %s)", em_op_table[k->op].name,
                        em_dtype_name(o.dt), em_dtype_name(x.dt), em_dtype_name(g.dt));
    switch (o.dt) {
    case EM_F32: return run_binary<float, float>(s, o, x, g, Bwd<float, K>{});
    case EM_F64: return run_binary<double, double>(s, o, x, g, Bwd<double, K>{});
    case EM_F16: return run_binary<f16_t, f16_t>(s, o, x, g, Bwd<f16_t, K>{});
    case EM_BF16: return run_binary<bf16_t, bf16_t>(s, o, x, g, Bwd<bf16_t, K>{});
    default: return unsupported(k, o.dt);
    }
}

/* ---- FILL, ARANGE, EYE ------------------------------------------------------------------------ */
uint64_t value_bits(double v, em_dtype dt)
{
    uint64_t bits = 0;
    em__store(&bits, dt, v);
    return bits;
}

template <class B> struct FillF {
    B *o;
    B v;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = v; }
};

template <class T> struct ArangeF {
    T *o;
    double start, step;
    __device__ void operator()(const int64_t *off) const
    {
        double v = start + (double)off[0] * step;
        if constexpr (std::is_same<T, float>::value) o[off[0]] = (float)v;
        else o[off[0]] = from_double<T>(v);
    }
};

template <class B> struct EyeF {
    B *o;
    int64_t m;
    B one;
    __device__ void operator()(const int64_t *off) const
    {
        int64_t i = off[0] / m, j = off[0] % m;
        o[off[0]] = i == j ? one : (B)0;
    }
};

/* A contiguous 1-d walk over n elements (offset = index). */
Iter<1> linear(int64_t n)
{
    Iter<1> it;
    it.nd = 1;
    it.size[0] = n;
    it.stride[0][0] = 1;
    return it;
}

/* ---- COPY --------------------------------------------------------------------------------------- */
template <class D, class S> struct CopyF {
    D *o;
    const S *a;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = cvt<D, S>(a[off[1]]); }
};
template <class B> struct MoveF {
    B *o;
    const B *a;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = a[off[1]]; }
};

template <class D> em_status copy_from(cudaStream_t s, const Tv &o, const Tv &a, const Iter<2> &it, int64_t n)
{
#define EM_COPY_SRC(S) return launch_iter(s, it, n, CopyF<D, S>{(D *)o.p, (const S *)a.p})
    EM_DTYPE_CASES(a.dt, EM_COPY_SRC)
#undef EM_COPY_SRC
    return EM_ERR_UNSUPPORTED;
}

/* ---- WHERE, MASKED_FILL ------------------------------------------------------------------------------ */
template <class B> struct WhereF {
    B *o;
    const uint8_t *c;
    const B *x, *y;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = c[off[1]] ? x[off[2]] : y[off[3]]; }
};
template <class B> struct MaskedFillF {
    B *o;
    const B *x;
    const uint8_t *m;
    B v;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = m[off[2]] ? v : x[off[1]]; }
};

}   // namespace

/* ---- entry points ------------------------------------------------------------------------------------ */

extern "C" int em_cuda_FILL(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]);
    int64_t n = tv_numel(o);
    if (n == 0) return EM_OK;
    size_t es = em_dtype_size(o.dt);
    uint64_t bits = value_bits(k->f[0], o.dt);
    const Tv *ops[1] = {&o};
    Iter<1> it = iter_make<1>(ops);
    if (bits == 0 && iter_contig(it, 0)) {
        EM_CU(cudaMemsetAsync(o.p, 0, (size_t)n * es, s));
        return EM_OK;
    }
#define EM_FILL(S)                                                                  \
    {                                                                               \
        using B = typename Bits<S>::type;                                           \
        return launch_iter(s, it, n, FillF<B>{(B *)o.p, (B)bits});                  \
    }
    EM_SIZE_CASES(es, EM_FILL)
#undef EM_FILL
    return EM_OK;
}

extern "C" int em_cuda_ARANGE(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]);   /* contiguous */
    int64_t n = tv_numel(o);
#define EM_ARANGE(T) return launch_iter(s, linear(n), n, ArangeF<T>{(T *)o.p, k->f[0], k->f[1]})
    EM_DTYPE_CASES(o.dt, EM_ARANGE)
#undef EM_ARANGE
    return unsupported(k, o.dt);
}

extern "C" int em_cuda_EYE(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]);   /* contiguous [n, m] */
    int64_t n = tv_numel(o), m = o.shape[1];
    if (n == 0) return EM_OK;
    uint64_t one = value_bits(1.0, o.dt);
#define EM_EYE(S)                                                                   \
    {                                                                               \
        using B = typename Bits<S>::type;                                           \
        return launch_iter(s, linear(n), n, EyeF<B>{(B *)o.p, m, (B)one});          \
    }
    EM_SIZE_CASES(em_dtype_size(o.dt), EM_EYE)
#undef EM_EYE
    return EM_OK;
}

extern "C" int em_cuda_COPY(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]), a = tv_of(k->in[0]);
    int64_t n = tv_numel(o);
    if (n == 0) return EM_OK;
    const Tv *ops[2] = {&o, &a};
    Iter<2> it = iter_make<2>(ops);
    size_t es = em_dtype_size(o.dt);
    if (o.dt == a.dt) {
        if (iter_contig(it, 0) && iter_contig(it, 1)) {
            if (o.p != a.p) EM_CU(cudaMemcpyAsync(o.p, a.p, (size_t)n * es, cudaMemcpyDeviceToDevice, s));
            return EM_OK;
        }
#define EM_MOVE(S)                                                                  \
    {                                                                               \
        using B = typename Bits<S>::type;                                           \
        return launch_iter(s, it, n, MoveF<B>{(B *)o.p, (const B *)a.p});           \
    }
        EM_SIZE_CASES(es, EM_MOVE)
#undef EM_MOVE
    }
#define EM_COPY_DST(D) return copy_from<D>(s, o, a, it, n)
    EM_DTYPE_CASES(o.dt, EM_COPY_DST)
#undef EM_COPY_DST
    return unsupported(k, o.dt);
}

extern "C" int em_cuda_ADD(const em_kargs *k) { return arith<KAdd, true>(k); }
extern "C" int em_cuda_SUB(const em_kargs *k) { return arith<KSub, true>(k); }
extern "C" int em_cuda_MUL(const em_kargs *k) { return arith<KMul, true>(k); }
extern "C" int em_cuda_DIV(const em_kargs *k) { return arith<KDiv, false>(k); }
extern "C" int em_cuda_MAXIMUM(const em_kargs *k) { return arith<KMax, true>(k); }
extern "C" int em_cuda_MINIMUM(const em_kargs *k) { return arith<KMin, true>(k); }
extern "C" int em_cuda_POW(const em_kargs *k)
{
    em_dtype dt = k->in[0]->dtype;
    switch (dt) {
    case EM_F32: return pow_t<float>(k);
    case EM_F64: return pow_t<double>(k);
    case EM_F16: return pow_t<f16_t>(k);
    case EM_BF16: return pow_t<bf16_t>(k);
    case EM_I64: return bin_t<int64_t, int64_t, KPow>(k);
    case EM_I32: return bin_t<int32_t, int32_t, KPow>(k);
    default: return unsupported(k, dt);
    }
}
extern "C" int em_cuda_EQ(const em_kargs *k) { return compare<KEq>(k); }
extern "C" int em_cuda_NE(const em_kargs *k) { return compare<KNe>(k); }
extern "C" int em_cuda_LT(const em_kargs *k) { return compare<KLt>(k); }
extern "C" int em_cuda_LE(const em_kargs *k) { return compare<KLe>(k); }
extern "C" int em_cuda_GT(const em_kargs *k) { return compare<KGt>(k); }
extern "C" int em_cuda_GE(const em_kargs *k) { return compare<KGe>(k); }

#define UN_INTS_NUMERIC true
#define UN_INTS_FLOATING false
#define UN_ENTRY(NAME, name, dtypes, ...) \
    extern "C" int em_cuda_##NAME(const em_kargs *k) { return unary<U_##NAME, UN_INTS_##dtypes>(k); }
#define BWD_ENTRY(NAME, ...) extern "C" int em_cuda_##NAME##_BWD(const em_kargs *k) { return unary_bwd<D_##NAME>(k); }
EM_UNARY_OPS(UN_ENTRY)
EM_UNARY_BWD_OPS(BWD_ENTRY)

extern "C" int em_cuda_WHERE(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]), c = tv_of(k->in[0]), x = tv_of(k->in[1]), y = tv_of(k->in[2]);
    const Tv *ops[4] = {&o, &c, &x, &y};
    Iter<4> it = iter_make<4>(ops);
    int64_t n = tv_numel(o);
#define EM_WHERE(S)                                                                                              \
    {                                                                                                            \
        using B = typename Bits<S>::type;                                                                        \
        return launch_iter(s, it, n, WhereF<B>{(B *)o.p, (const uint8_t *)c.p, (const B *)x.p, (const B *)y.p}); \
    }
    EM_SIZE_CASES(em_dtype_size(o.dt), EM_WHERE)
#undef EM_WHERE
    return EM_OK;
}

extern "C" int em_cuda_MASKED_FILL(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv o = tv_of(k->out[0]), x = tv_of(k->in[0]), m = tv_of(k->in[1]);
    const Tv *ops[3] = {&o, &x, &m};
    Iter<3> it = iter_make<3>(ops);
    int64_t n = tv_numel(o);
    uint64_t bits = value_bits(k->f[0], o.dt);
#define EM_MASKED(S)                                                                                         \
    {                                                                                                        \
        using B = typename Bits<S>::type;                                                                    \
        return launch_iter(s, it, n, MaskedFillF<B>{(B *)o.p, (const B *)x.p, (const uint8_t *)m.p, (B)bits}); \
    }
    EM_SIZE_CASES(em_dtype_size(o.dt), EM_MASKED)
#undef EM_MASKED
    return EM_OK;
}
