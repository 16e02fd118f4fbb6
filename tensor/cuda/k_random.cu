/* ember — CUDA RAND, RANDN, BERNOULLI (contracts in tensor/ops.h; the
 * per-element mappings are tensor/rng.c's, described there).
 *
 * One thread per Philox4x32-10 block: element e of the contiguous output
 * uses counter offset + e/4, lane e%4. RAND and BERNOULLI are bit-identical
 * to the CPU (integer and correctly rounded f32/f64 arithmetic); RANDN's
 * Box-Muller uses CUDA's f64 log/sin/cos, so its values may differ from the
 * CPU's in the last ulp of f64 (which almost never survives rounding to f32).
 */
#include "tensor/cuda/cuda_common.cuh"

using namespace emcu;

namespace {

/* The largest value of a 16-bit float format strictly below the pattern b. */
__device__ inline uint16_t step_down16(uint16_t b)
{
    if ((b & 0x7fff) == 0) return 0x8001;
    return (b & 0x8000) ? (uint16_t)(b + 1) : (uint16_t)(b - 1);
}

struct RandArgs {
    int64_t n;
    uint64_t seed, offset;
    double low, high;
    float lowf, highf, rangef;
};

template <class T> __device__ inline T rand_value(const RandArgs &a, uint32_t x)
{
    float u = u32_to_unit(x);
    if constexpr (std::is_same<T, float>::value) {
        float v = fmaf(a.rangef, u, a.lowf);
        return v >= a.highf && a.highf > a.lowf ? nextafterf(a.highf, -INFINITY) : v;
    } else if constexpr (std::is_same<T, double>::value) {
        double v = fma(a.high - a.low, (double)u, a.low);
        return v >= a.high && a.high > a.low ? nextafter(a.high, -(double)INFINITY) : v;
    } else {
        T h = from_f32<T>(fmaf(a.rangef, u, a.lowf));
        if ((double)to_f32(h) >= a.high && a.high > a.low) h.x = step_down16(h.x);
        return h;
    }
}

template <class T> __global__ void rand_k(RandArgs a, T *out)
{
    int64_t nb = (a.n + 3) / 4;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < nb; g += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x[4];
        philox(a.seed, a.offset + (uint64_t)g, x);
#pragma unroll
        for (int l = 0; l < 4; l++)
            if (g * 4 + l < a.n) out[g * 4 + l] = rand_value<T>(a, x[l]);
    }
}

template <class T> __global__ void randn_k(RandArgs a, T *out)
{
    const double two32 = 4294967296.0, two_pi = 6.283185307179586476925286766559;
    int64_t nb = (a.n + 3) / 4;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < nb; g += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x[4];
        philox(a.seed, a.offset + (uint64_t)g, x);
        double z[4];
#pragma unroll
        for (int l = 0; l < 4; l += 2) {
            double r = sqrt(-2.0 * log(((double)x[l] + 1.0) / two32));
            double t = two_pi * ((double)x[l + 1] / two32);
            z[l] = r * cos(t);
            z[l + 1] = r * sin(t);
        }
#pragma unroll
        for (int l = 0; l < 4; l++) {
            if (g * 4 + l >= a.n) break;
            double v = __dadd_rn(a.low, __dmul_rn(a.high, z[l]));   /* mean + std * z, unfused as the CPU */
            if constexpr (std::is_same<T, float>::value) out[g * 4 + l] = (float)v;
            else out[g * 4 + l] = from_double<T>(v);
        }
    }
}

__global__ void bernoulli_k(RandArgs a, uint8_t *out)
{
    int64_t nb = (a.n + 3) / 4;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < nb; g += (int64_t)gridDim.x * blockDim.x) {
        uint32_t x[4];
        philox(a.seed, a.offset + (uint64_t)g, x);
#pragma unroll
        for (int l = 0; l < 4; l++)
            if (g * 4 + l < a.n) out[g * 4 + l] = (double)u32_to_unit(x[l]) < a.low;
    }
}

RandArgs args_of(const em_kargs *k)
{
    RandArgs a;
    a.n = em_numel(k->out[0]);
    a.seed = (uint64_t)k->i[0];
    a.offset = (uint64_t)k->i[1];
    a.low = k->f[0];
    a.high = k->f[1];
    a.lowf = (float)a.low;
    a.highf = (float)a.high;
    a.rangef = (float)(a.high - a.low);
    return a;
}

template <bool NORMAL> em_status draw(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    RandArgs a = args_of(k);
    if (a.n == 0) return EM_OK;
    void *out = tv_of(k->out[0]).p;
    unsigned nb = blocks_for((a.n + 3) / 4);
#define EM_DRAW(T)                                                                        \
    if (NORMAL) randn_k<T><<<nb, kThreads, 0, s>>>(a, (T *)out);                           \
    else rand_k<T><<<nb, kThreads, 0, s>>>(a, (T *)out);                                   \
    EM_CU_LAUNCHED();                                                                      \
    return EM_OK;
    EM_FLOAT_CASES(k->out[0]->dtype, EM_DRAW)
#undef EM_DRAW
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s does not take %s", em_op_table[k->op].name,
                    em_dtype_name(k->out[0]->dtype));
}

}   // namespace

extern "C" int em_cuda_RAND(const em_kargs *k) { return draw<false>(k); }
extern "C" int em_cuda_RANDN(const em_kargs *k) { return draw<true>(k); }

extern "C" int em_cuda_BERNOULLI(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    RandArgs a = args_of(k);
    if (a.n == 0) return EM_OK;
    bernoulli_k<<<blocks_for((a.n + 3) / 4), kThreads, 0, s>>>(a, (uint8_t *)tv_of(k->out[0]).p);
    EM_CU_LAUNCHED();
    return EM_OK;
}
