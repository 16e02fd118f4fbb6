/* ember — op ADAMW_STEP on CUDA (contract in tensor/ops.h; the caller is
 * optim/adamw.c through tensor/fused.h), with a multi-tensor core.
 *
 * Multi-tensor apply: the spans are cut into chunks of kChunk elements; a
 * table of chunks (pointers already offset to the chunk, a span index) and
 * the spans' scalars, rounded once to the dtype on the host, go to the
 * device in one copy, and ONE launch per dtype updates everything, a block
 * per chunk. Each element runs optim/adamw.c's loop operation for operation,
 * in the parameter's dtype, with correctly rounded intrinsics (__fmul_rn,
 * __fdiv_rn, __fsqrt_rn, ...) so that nvcc cannot contract a multiply and an
 * add the CPU keeps apart; the two multiply-adds the CPU fuses (when it has
 * FMA: the lerp and the addcmul) are __fmaf_rn here when `fma` is set.
 * Results are then bit-identical to the CPU's (and torch's) for every
 * element: no reduction, no order to differ.
 *
 * The table lives in scratch device memory from the caching allocator,
 * released in stream order; the host copy is pageable, which cudaMemcpyAsync
 * stages before it returns, so it can be freed at once.
 */
#include "tensor/cuda/cuda_common.cuh"

#include <vector>

using namespace emcu;

namespace {

constexpr int64_t kChunk = 1 << 16;   /* elements per block */

/* One contiguous run of the update: n elements of p, g, m, v and vmax (NULL
 * without amsgrad) of `dtype`, with the op's scalars in double. */
struct Span {
    void *p;
    const void *g;
    void *m, *v, *vmax;
    int64_t n;
    em_dtype dtype;
    double decay, w1, beta2, w2, bc2_sqrt, neg_step, eps, sign;
    bool small, l2;
};
constexpr int kAdamThreads = 512;

struct Chunk {
    void *p;
    const void *g;
    void *m, *v, *vmax;
    int64_t n;
    int span;
};

template <class T> struct Consts {
    T decay, coef, beta2, w2, bc2s, neg_step, eps, sign;
    int small, l2;   /* l2: decay is Adam's wd, added to the gradient */
};

/* Correctly rounded operations that nvcc never fuses. */
__device__ inline float mul_(float a, float b) { return __fmul_rn(a, b); }
__device__ inline float add_(float a, float b) { return __fadd_rn(a, b); }
__device__ inline float sub_(float a, float b) { return __fsub_rn(a, b); }
__device__ inline float div_(float a, float b) { return __fdiv_rn(a, b); }
__device__ inline float sqrt_(float a) { return __fsqrt_rn(a); }
__device__ inline float fma_(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ inline double mul_(double a, double b) { return __dmul_rn(a, b); }
__device__ inline double add_(double a, double b) { return __dadd_rn(a, b); }
__device__ inline double sub_(double a, double b) { return __dsub_rn(a, b); }
__device__ inline double div_(double a, double b) { return __ddiv_rn(a, b); }
__device__ inline double sqrt_(double a) { return __dsqrt_rn(a); }
__device__ inline double fma_(double a, double b, double c) { return __fma_rn(a, b, c); }

template <bool FMA, class T> __device__ inline T madd(T a, T b, T c) { return FMA ? fma_(a, b, c) : add_(mul_(a, b), c); }

/* optim/adamw.c's ADAMW_KERNEL body, element i of one chunk. */
template <class T, bool FMA, bool AMS>
__global__ void __launch_bounds__(kAdamThreads) adamw_kernel(const Chunk *chunks, const Consts<T> *consts)
{
    const Chunk c = chunks[blockIdx.x];
    const Consts<T> k = consts[c.span];
    T *p = (T *)c.p, *m = (T *)c.m, *v = (T *)c.v, *vmax = (T *)c.vmax;
    const T *g = (const T *)c.g;
    for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
        T gi = mul_(g[i], k.sign), pi, mo = m[i];
        if (k.l2) pi = p[i], gi = madd<FMA>(pi, k.decay, gi);
        else pi = mul_(p[i], k.decay);
        T mi = madd<FMA>(k.coef, sub_(gi, mo), k.small ? mo : gi);
        T vb = mul_(v[i], k.beta2);
        T vi = madd<FMA>(mul_(k.w2, gi), gi, vb);
        T den = vi;
        if (AMS) {
            T mx = vmax[i];
            mx = (vi > mx || vi != vi) ? vi : mx;
            vmax[i] = mx;
            den = mx;
        }
        T d = add_(div_(sqrt_(den), k.bc2s), k.eps);
        p[i] = add_(pi, div_(mul_(k.neg_step, mi), d));
        m[i] = mi;
        v[i] = vi;
    }
}

/* The spans of dtype T: one table copy and one launch. */
template <class T>
em_status run(int dev, cudaStream_t s, const Span *spans, int n, em_dtype dt, bool fma, bool ams)
{
    std::vector<Consts<T>> consts;
    std::vector<Chunk> chunks;
    for (int i = 0; i < n; i++) {
        const Span &a = spans[i];
        if (a.dtype != dt || a.n <= 0) continue;
        if ((a.vmax != nullptr) != ams)
            return em__fail(EM_ERR_INVALID, "cuda adamw: span %d %s max_exp_avg_sq, span 0 %s", i,
                            a.vmax ? "has" : "lacks", ams ? "has" : "lacks");
        /* the scalars exactly as adamw.c rounds them (host IEEE arithmetic in T) */
        T w1 = (T)a.w1;
        Consts<T> c = {(T)a.decay, a.small ? w1 : -((T)1 - w1), (T)a.beta2, (T)a.w2, (T)a.bc2_sqrt, (T)a.neg_step,
                       (T)a.eps, (T)a.sign, a.small ? 1 : 0, a.l2 ? 1 : 0};
        int span = (int)consts.size();
        consts.push_back(c);
        size_t es = sizeof(T);
        for (int64_t b = 0; b < a.n; b += kChunk) {
            int64_t off = b * (int64_t)es;
            chunks.push_back(Chunk{(char *)a.p + off, (const char *)a.g + off, (char *)a.m + off, (char *)a.v + off,
                                   a.vmax ? (char *)a.vmax + off : nullptr, a.n - b < kChunk ? a.n - b : kChunk,
                                   span});
        }
    }
    if (chunks.empty()) return EM_OK;
    if (chunks.size() > 0x7fffffffu) return em__fail(EM_ERR_UNSUPPORTED, "cuda adamw: too many chunks");
    size_t cb = chunks.size() * sizeof(Chunk), kb = consts.size() * sizeof(Consts<T>);
    size_t kofs = (cb + 255) / 256 * 256;
    std::vector<char> host(kofs + kb);
    memcpy(host.data(), chunks.data(), cb);
    memcpy(host.data() + kofs, consts.data(), kb);
    Scratch table;
    EM_TRY(table.get(host.size(), dev));
    EM_CU(cudaMemcpyAsync(table.p, host.data(), host.size(), cudaMemcpyHostToDevice, s));
    const Chunk *dc = table.as<const Chunk>();
    const Consts<T> *dk = (const Consts<T> *)(table.as<char>() + kofs);
    unsigned grid = (unsigned)chunks.size();
#define EM_ADAMW_LAUNCH(F, A) adamw_kernel<T, F, A><<<grid, kAdamThreads, 0, s>>>(dc, dk)
    if (fma && ams) EM_ADAMW_LAUNCH(true, true);
    else if (fma) EM_ADAMW_LAUNCH(true, false);
    else if (ams) EM_ADAMW_LAUNCH(false, true);
    else EM_ADAMW_LAUNCH(false, false);
#undef EM_ADAMW_LAUNCH
    EM_CU_LAUNCHED();
    return EM_OK;
}

/* Every span at once (one table copy and one launch per dtype): kept so that
 * a caller with many spans could batch them; the op passes one. */
em_status adamw_spans(int dev, const Span *spans, int n, bool fma)
{
    if (n <= 0) return EM_OK;
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    bool ams = spans[0].vmax != nullptr;
    for (int i = 0; i < n; i++)
        if (spans[i].dtype != EM_F32 && spans[i].dtype != EM_F64)
            return em__fail(EM_ERR_UNSUPPORTED, "cuda adamw: span %d is %s (f32 or f64 only)", i,
                            em_dtype_name(spans[i].dtype));
    EM_TRY(run<float>(dev, s, spans, n, EM_F32, fma, ams));
    EM_TRY(run<double>(dev, s, spans, n, EM_F64, fma, ams));
    return EM_OK;
}

}   // namespace

extern "C" int em_cuda_ADAMW_STEP(const em_kargs *k)
{
    em_tensor *p = k->out[0], *vm = k->out[3];
    const double *f = k->f;
    Span a = {em_data_ptr(p), em_data_ptr(k->in[0]), em_data_ptr(k->out[1]), em_data_ptr(k->out[2]),
              vm ? em_data_ptr(vm) : nullptr, em_numel(p), p->dtype, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7],
              k->i[0] != 0, k->i[2] != 0};
    return adamw_spans(p->device.index, &a, 1, k->i[1] != 0);
}
