/* ember — shared internals of the CUDA kernels (C++17, nvcc only).
 *
 *   - error checks: every CUDA call goes through EM_CU (returns EM_ERR_DEVICE
 *     with the call and file:line), every launch is followed by EM_CU_LAUNCHED;
 *   - dtypes on the device: storage types (f16_t and bf16_t hold raw bits)
 *     and conversions that give exactly the bits tensor/convert.c gives
 *     (round to nearest even, NaN payloads, saturating float -> int);
 *   - strided iteration: tensor views (Tv), NumPy broadcasting to an output
 *     shape and dim merging (Iter), offsets from a linear index;
 *   - deterministic block reductions (fixed shuffle trees, no atomics);
 *   - Philox4x32-10, bit-identical to tensor/rng.c;
 *   - scratch device memory from the caching allocator (Scratch).
 */
#ifndef EMBER_CUDA_COMMON_CUH
#define EMBER_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "tensor/cuda/cuda_api.h"

/* ---- errors ------------------------------------------------------------------- */
#define EM_CU(...)                                                                      \
    do {                                                                                \
        cudaError_t em_cu_e_ = (__VA_ARGS__);                                           \
        if (em_cu_e_ != cudaSuccess) return em__cuda_error(#__VA_ARGS__, (int)em_cu_e_, __FILE__, __LINE__); \
    } while (0)
#define EM_CU_LAUNCHED() EM_CU(cudaGetLastError())
#define EM_TRY(...)                                \
    do {                                           \
        em_status em_try_s_ = (__VA_ARGS__);       \
        if (em_try_s_ != EM_OK) return em_try_s_;  \
    } while (0)

/* ---- kernel entry points (the backend table, runtime.cu) ---------------------- */
#define EM_CUDA_DECL(name) extern "C" int em_cuda_##name(const em_kargs *k);
EM_KERNEL_OP_LIST(EM_CUDA_DECL)
#undef EM_CUDA_DECL
/* out = a @ b + bias in ONE cuBLASLt GEMM with the bias in its epilogue
 * (k_lt_matmul.cu; LINEAR's first choice, k_linear.cu): a [M,K], b [K,N]
 * (either may be a transposed view), bias [N] contiguous or NULL, out [M,N]
 * contiguous, one float dtype. EM_ERR_UNSUPPORTED, out untouched, for a case
 * it does not take (f64, a layout or alignment cuBLASLt cannot take). */
extern "C" em_status em__cuda_linear(em_tensor *out, em_tensor *a, em_tensor *b, em_tensor *bias);

namespace emcu {

/* ---- launch geometry ------------------------------------------------------------ */
constexpr int kThreads = 256;
/* Blocks for n work items at `per` items per thread; loops are grid-stride, so
 * the cap only bounds the grid. Depends on n alone (never on the device), so
 * any result that depends on the grid is the same on every GPU. */
static inline unsigned blocks_for(int64_t n, int per = 1, int threads = kThreads)
{
    int64_t b = (n + (int64_t)threads * per - 1) / ((int64_t)threads * per);
    if (b < 1) b = 1;
    if (b > 65536) b = 65536;
    return (unsigned)b;
}

/* Device and compute stream of a kernel call: out[0]'s device, else in[0]'s. */
static inline int kdev(const em_kargs *k)
{
    const em_tensor *t = k->out[0] ? k->out[0] : k->in[0];
    return t->device.index;
}
static inline em_status begin(int dev, cudaStream_t *s)
{
    void *p = nullptr;
    em_status st = em__cuda_begin(dev, &p);
    *s = (cudaStream_t)p;
    return st;
}

/* Scratch device memory, freed (to the cache, in stream order) at scope exit. */
struct Scratch {
    void *p = nullptr;
    size_t n = 0;
    int dev = 0;
    Scratch() = default;
    Scratch(const Scratch &) = delete;
    Scratch &operator=(const Scratch &) = delete;
    ~Scratch()
    {
        if (p) em__cuda_free(p, n, dev);
    }
    /* EM_ERR_OOM when the device is out of memory. */
    em_status get(size_t nbytes, int device)
    {
        dev = device;
        n = nbytes ? nbytes : 1;
        p = em__cuda_alloc(n, dev);
        return p ? EM_OK : em__fail(EM_ERR_OOM, "CUDA: out of memory allocating %zu scratch bytes on cuda:%d", n, dev);
    }
    template <class T> T *as() const { return (T *)p; }
};

/* ---- storage types and exact conversions ----------------------------------------- */
struct f16_t { uint16_t x; };
struct bf16_t { uint16_t x; };

__host__ __device__ inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
__host__ __device__ inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
__host__ __device__ inline uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* convert.c's round_to_small: sign * m * 2^(e - p) to M fraction bits, bias B, RNE. */
__host__ __device__ inline uint16_t round_to_small(uint32_t sign, int e, uint64_t m, int p, int M, int B)
{
    const uint32_t inf = (uint32_t)(2 * B + 1) << M;
    if (m == 0) return (uint16_t)sign;
    if (e > B) return (uint16_t)(sign | inf);
    int te = e < 1 - B ? 1 - B : e;
    int drop = p - M + (te - e);
    uint64_t q = 0;
    if (drop < 64) {
        q = m >> drop;
        uint64_t rem = m & ((UINT64_C(1) << drop) - 1), half = UINT64_C(1) << (drop - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
    }
    uint32_t bits = ((uint32_t)(te + B - 1) << M) + (uint32_t)q;
    if (bits >= inf) bits = inf;
    return (uint16_t)(sign | bits);
}

__host__ __device__ inline uint16_t f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000, ex = (u >> 23) & 0xff, fr = u & 0x7fffff;
    if (ex == 0xff) return fr ? (uint16_t)(sign | 0x7e00 | ((u >> 13) & 0x3ff)) : (uint16_t)(sign | 0x7c00);
    if (ex == 0) return round_to_small(sign, -126, fr, 23, 10, 15);
    return round_to_small(sign, (int)ex - 127, fr | 0x800000, 23, 10, 15);
}

__host__ __device__ inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, ex = (h >> 10) & 0x1f, fr = h & 0x3ff;
    if (ex == 0x1f) return bits_f32(sign | 0x7f800000 | (fr ? 0x400000 | (fr << 13) : 0));
    if (ex == 0) {
        float v = (float)fr * 5.9604644775390625e-8f;   /* 2^-24 */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((ex + 112) << 23) | (fr << 13));
}

__host__ __device__ inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

__host__ __device__ inline float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    if ((u & 0x7fffffff) > 0x7f800000) u |= 0x400000;
    return bits_f32(u);
}

__host__ __device__ inline uint16_t f64_to_small(double d, int M, int B)
{
    uint64_t u = f64_bits(d);
    uint32_t sign = (uint32_t)(u >> 48) & 0x8000;
    int ex = (int)((u >> 52) & 0x7ff);
    uint64_t fr = u & ((UINT64_C(1) << 52) - 1);
    uint32_t expall = (uint32_t)(2 * B + 1) << M;
    if (ex == 0x7ff) return (uint16_t)(sign | expall | (fr ? (1u << (M - 1)) | (uint32_t)(fr >> (52 - M)) : 0));
    if (ex == 0) return round_to_small(sign, -1022, fr, 52, M, B);
    return round_to_small(sign, ex - 1023, fr | (UINT64_C(1) << 52), 52, M, B);
}

/* convert.c's i64_to_f64_odd: a double that rounds to narrower formats as v does. */
__host__ __device__ inline double i64_to_f64_odd(int64_t v)
{
    uint64_t a = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (a < (UINT64_C(1) << 53)) return (double)v;
    int s = 0;
    while ((a >> s) >= (UINT64_C(1) << 53)) s++;
    uint64_t kept = (a >> s) | ((a & ((UINT64_C(1) << s) - 1)) != 0);
    double r = ldexp((double)kept, s);
    return v < 0 ? -r : r;
}

__host__ __device__ inline int64_t sat_i64(double v)
{
    if (v != v) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
__host__ __device__ inline int32_t sat_i32(double v)
{
    if (v != v) return 0;
    if (v >= 2147483648.0) return INT32_MAX;
    if (v <= -2147483649.0) return INT32_MIN;
    return (int32_t)v;
}

/* to_double: exact for every storage type except i64 beyond 2^53 (see cvt). */
__host__ __device__ inline double to_double(float v) { return v; }
__host__ __device__ inline double to_double(double v) { return v; }
__host__ __device__ inline double to_double(f16_t v) { return f16_to_f32(v.x); }
__host__ __device__ inline double to_double(bf16_t v) { return bf16_to_f32(v.x); }
__host__ __device__ inline double to_double(int64_t v) { return (double)v; }
__host__ __device__ inline double to_double(int32_t v) { return v; }
__host__ __device__ inline double to_double(uint8_t v) { return v != 0; }

/* from_double<T>: em__store's rounding. */
template <class T> __host__ __device__ inline T from_double(double v);
template <> __host__ __device__ inline float from_double<float>(double v) { return (float)v; }
template <> __host__ __device__ inline double from_double<double>(double v) { return v; }
template <> __host__ __device__ inline f16_t from_double<f16_t>(double v) { return f16_t{f64_to_small(v, 10, 15)}; }
template <> __host__ __device__ inline bf16_t from_double<bf16_t>(double v) { return bf16_t{f64_to_small(v, 7, 127)}; }
template <> __host__ __device__ inline int64_t from_double<int64_t>(double v) { return sat_i64(v); }
template <> __host__ __device__ inline int32_t from_double<int32_t>(double v) { return sat_i32(v); }
template <> __host__ __device__ inline uint8_t from_double<uint8_t>(double v) { return v != 0; }

/* The f32 compute value of a storage element (f16/bf16/f32), and back. */
__device__ inline float to_f32(float v) { return v; }
__device__ inline float to_f32(f16_t v) { return f16_to_f32(v.x); }
__device__ inline float to_f32(bf16_t v) { return bf16_to_f32(v.x); }
template <class T> __device__ inline T from_f32(float v);
template <> __device__ inline float from_f32<float>(float v) { return v; }
template <> __device__ inline f16_t from_f32<f16_t>(float v) { return f16_t{f32_to_f16(v)}; }
template <> __device__ inline bf16_t from_f32<bf16_t>(float v) { return bf16_t{f32_to_bf16(v)}; }

/* The type arithmetic runs in: f32 for the 16-bit floats, the type itself otherwise. */
template <class T> struct Compute { using type = T; };
template <> struct Compute<f16_t> { using type = float; };
template <> struct Compute<bf16_t> { using type = float; };

template <class C, class T> __device__ inline C load_c(T v)
{
    if constexpr (std::is_same<T, f16_t>::value || std::is_same<T, bf16_t>::value) return (C)to_f32(v);
    else return (C)v;
}
template <class T, class C> __device__ inline T store_c(C v)
{
    if constexpr (std::is_same<T, f16_t>::value || std::is_same<T, bf16_t>::value) return from_f32<T>((float)v);
    else return (T)v;
}

/* One element of dtype S to dtype D, exactly as em__convert_n. */
template <class D, class S> __device__ inline D cvt(S v)
{
    if constexpr (std::is_same<D, S>::value) {
        if constexpr (std::is_same<D, uint8_t>::value) return (uint8_t)(v != 0);
        else return v;
    } else if constexpr (std::is_same<S, int64_t>::value) {
        if constexpr (std::is_same<D, float>::value) return (float)v;
        else if constexpr (std::is_same<D, double>::value) return (double)v;
        else if constexpr (std::is_same<D, f16_t>::value || std::is_same<D, bf16_t>::value)
            return from_double<D>(i64_to_f64_odd(v));
        else if constexpr (std::is_same<D, int32_t>::value)
            return (int32_t)(v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v);
        else return (uint8_t)(v != 0);
    } else if constexpr (std::is_same<S, float>::value && (std::is_same<D, bf16_t>::value || std::is_same<D, f16_t>::value)) {
        return from_f32<D>(v);
    } else {
        return from_double<D>(to_double(v));
    }
}

/* Calls f.template operator()<T>() with the storage type of dt. */
#define EM_DTYPE_CASES(dt, F)                          \
    switch (dt) {                                      \
    case EM_F32: F(float); break;                      \
    case EM_F64: F(double); break;                     \
    case EM_F16: F(emcu::f16_t); break;                \
    case EM_BF16: F(emcu::bf16_t); break;              \
    case EM_I64: F(int64_t); break;                    \
    case EM_I32: F(int32_t); break;                    \
    case EM_BOOL: F(uint8_t); break;                   \
    default: break;                                    \
    }
#define EM_FLOAT_CASES(dt, F)                          \
    switch (dt) {                                      \
    case EM_F32: F(float); break;                      \
    case EM_F64: F(double); break;                     \
    case EM_F16: F(emcu::f16_t); break;                \
    case EM_BF16: F(emcu::bf16_t); break;              \
    default: break;                                    \
    }

/* ---- strided views and iteration ----------------------------------------------------- */

/* A tensor view as kernels see it: the address of its element 0, strides in elements. */
struct Tv {
    char *p;
    em_dtype dt;
    int nd;
    int64_t shape[EM_MAX_DIMS];
    int64_t stride[EM_MAX_DIMS];
};

static inline Tv tv_of(const em_tensor *t)
{
    Tv v;
    v.p = t->storage->data ? (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype) : nullptr;
    v.dt = t->dtype;
    v.nd = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        v.shape[d] = t->shape[d];
        v.stride[d] = t->stride[d];
    }
    return v;
}

static inline int64_t tv_numel(const Tv &v)
{
    int64_t n = 1;
    for (int d = 0; d < v.nd; d++) n *= v.shape[d];
    return n;
}

/* Operands walked in lockstep over operand 0's shape: merged dims (size-1
 * dims dropped, neighbours merged where every operand allows), innermost
 * last; operands of fewer dims or size-1 dims broadcast (stride 0). */
template <int N> struct Iter {
    int nd;
    int64_t size[EM_MAX_DIMS];
    int64_t stride[N][EM_MAX_DIMS];
};

template <int N> static inline Iter<N> iter_make(const Tv *const *ops)
{
    const Tv &o = *ops[0];
    int64_t st[N][EM_MAX_DIMS];
    for (int k = 0; k < N; k++) {
        int lead = o.nd - ops[k]->nd;
        for (int d = 0; d < o.nd; d++) {
            int td = d - lead;
            st[k][d] = td >= 0 && ops[k]->shape[td] == o.shape[d] ? ops[k]->stride[td] : 0;
        }
    }
    Iter<N> it;
    it.nd = 0;
    for (int d = 0; d < o.nd; d++) {
        if (o.shape[d] == 1) continue;
        int n = it.nd;
        bool merge = n > 0;
        for (int k = 0; k < N && merge; k++) merge = it.stride[k][n - 1] == st[k][d] * o.shape[d];
        if (merge) {
            it.size[n - 1] *= o.shape[d];
            for (int k = 0; k < N; k++) it.stride[k][n - 1] = st[k][d];
        } else {
            it.size[n] = o.shape[d];
            for (int k = 0; k < N; k++) it.stride[k][n] = st[k][d];
            it.nd++;
        }
    }
    return it;
}

/* Whether operand k walks memory contiguously (one merged dim of stride 1, or one element). */
template <int N> static inline bool iter_contig(const Iter<N> &it, int k)
{
    return it.nd == 0 || (it.nd == 1 && it.stride[k][0] == 1);
}
/* Whether operand k is one element repeated (every stride 0). */
template <int N> static inline bool iter_scalar(const Iter<N> &it, int k)
{
    for (int d = 0; d < it.nd; d++)
        if (it.stride[k][d] != 0) return false;
    return true;
}

/* Element offsets of linear index i (row-major over it.size). I is uint32_t
 * when the element count fits, which makes the divisions cheap. */
template <class I, int N> __device__ inline void iter_offsets(const Iter<N> &it, I i, int64_t *off)
{
#pragma unroll
    for (int k = 0; k < N; k++) off[k] = 0;
    for (int d = it.nd - 1; d >= 0; d--) {
        I sz = (I)it.size[d];
        I q = i % sz;
        i /= sz;
#pragma unroll
        for (int k = 0; k < N; k++) off[k] += (int64_t)q * it.stride[k][d];
    }
}

/* Offset of logical (row-major) element i of a view. */
struct Geo {
    int nd;
    int64_t size[EM_MAX_DIMS], stride[EM_MAX_DIMS];
};
static inline Geo geo_of(const Tv &v)
{
    const Tv *ops[1] = {&v};
    Iter<1> it = iter_make<1>(ops);
    Geo g;
    g.nd = it.nd;
    for (int d = 0; d < it.nd; d++) {
        g.size[d] = it.size[d];
        g.stride[d] = it.stride[0][d];
    }
    return g;
}
__device__ inline int64_t geo_offset(const Geo &g, int64_t i)
{
    if (g.nd == 1) return i * g.stride[0];
    int64_t off = 0;
    for (int d = g.nd - 1; d >= 0; d--) {
        int64_t q = i % g.size[d];
        i /= g.size[d];
        off += q * g.stride[d];
    }
    return off;
}

/* Rows along `dim` of N tensors of one shape (ts[0]'s): row r (row-major over
 * the other dims) starts at offsets it(r); its n elements are rs[k] apart.
 * dim = -1 (a 0-d tensor): one row of one element. */
template <int N> struct Rows {
    Iter<N> it;                 /* the dims other than `dim`: row r -> offsets */
    int64_t n, nrows;
    int64_t rs[N];              /* strides along dim */
};

template <int N> static inline Rows<N> rows_make(const em_tensor *const *ts, int dim)
{
    Tv v[N];
    const Tv *ops[N];
    Rows<N> R;
    for (int k = 0; k < N; k++) {
        v[k] = tv_of(ts[k]);
        R.rs[k] = dim >= 0 ? v[k].stride[dim] : 0;
        if (dim >= 0) v[k].shape[dim] = 1;
        ops[k] = &v[k];
    }
    R.n = dim >= 0 ? ts[0]->shape[dim] : 1;
    R.nrows = tv_numel(v[0]);
    R.it = iter_make<N>(ops);
    return R;
}

template <int N> __device__ inline void row_offsets(const Rows<N> &R, int64_t r, int64_t *off)
{
    if (R.nrows <= 0x7fffffff) iter_offsets<uint32_t, N>(R.it, (uint32_t)r, off);
    else iter_offsets<int64_t, N>(R.it, r, off);
}

/* Threads per block for a block-per-row kernel over rows of n (a multiple of 32). */
static inline unsigned row_threads(int64_t n)
{
    if (n >= 2048) return 512;
    if (n >= 256) return 256;
    unsigned t = (unsigned)((n + 31) / 32 * 32);
    return t < 32 ? 32 : t;
}

/* Element off of a float tensor of dtype dt (the statistics of layer_norm, ...), as double. */
__device__ inline double load_any(const void *p, em_dtype dt, int64_t off)
{
    switch (dt) {
    case EM_F32: return ((const float *)p)[off];
    case EM_F64: return ((const double *)p)[off];
    case EM_F16: return f16_to_f32(((const uint16_t *)p)[off]);
    case EM_BF16: return bf16_to_f32(((const uint16_t *)p)[off]);
    case EM_I64: return (double)((const int64_t *)p)[off];
    case EM_I32: return ((const int32_t *)p)[off];
    default: return ((const uint8_t *)p)[off] != 0;
    }
}

/* Unsigned integer type of an element size, for kernels that only move bytes. */
template <int S> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };
#define EM_SIZE_CASES(size, F) \
    switch (size) {            \
    case 1: F(1); break;       \
    case 2: F(2); break;       \
    case 4: F(4); break;       \
    default: F(8); break;      \
    }

/* exp and log in the compute type (libdevice: within 2 ulp). */
template <class C> __device__ inline C c_exp(C x);
template <> __device__ inline float c_exp<float>(float x) { return expf(x); }
template <> __device__ inline double c_exp<double>(double x) { return exp(x); }
template <class C> __device__ inline C c_log(C x);
template <> __device__ inline float c_log<float>(float x) { return logf(x); }
template <> __device__ inline double c_log<double>(double x) { return log(x); }

/* ---- deterministic block reductions (blockDim.x a multiple of 32, <= 1024) ---------- */
template <class T, class Op> __device__ inline T warp_reduce(T v, Op op)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

/* Every thread gets op over the block's values; `id` is op's identity; shm holds 32 T. */
template <class T, class Op> __device__ inline T block_reduce(T v, Op op, T id, T *shm)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_reduce(v, op);
    __syncthreads();   /* shm may still be read from a previous call */
    if (lane == 0) shm[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < nw ? shm[lane] : id;
        v = warp_reduce(v, op);
        if (lane == 0) shm[0] = v;
    }
    __syncthreads();
    return shm[0];
}

struct Sum { template <class T> __device__ T operator()(T a, T b) const { return a + b; } };
/* Max ignoring NaN (softmax's row max: a NaN still poisons the sum). */
struct MaxNoNan { template <class T> __device__ T operator()(T a, T b) const { return b > a ? b : a; } };

/* ---- Philox4x32-10, as tensor/rng.c ------------------------------------------------------ */
__device__ inline void philox(uint64_t seed, uint64_t counter, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; r++) {
        if (r) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}
__device__ inline float u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

}   // namespace emcu

#endif
