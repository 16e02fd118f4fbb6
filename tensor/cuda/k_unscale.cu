/* ember — op UNSCALE on CUDA (contract in tensor/ops.h; the caller is
 * amp/grad_scaler.c through tensor/fused.h), torch's
 * _amp_foreach_non_finite_check_and_unscale_.
 *
 * Every tensor is cut into chunks of kChunk elements; one table of chunks
 * goes to the device in one copy, and ONE launch multiplies every element by
 * inv_scale (f32: v * inv rounded to f32; f64: v * (double)inv, as the CPU
 * kernel) and sets the op's flag out[0] (zeroed first, in stream order) to 1
 * when an element was inf or NaN before scaling. No synchronization here: the
 * front-end's one read of the flag is the call's only wait.
 */
#include "tensor/cuda/cuda_common.cuh"

#include <vector>

using namespace emcu;

namespace {

constexpr int64_t kChunk = 1 << 16;
constexpr int kUnscaleThreads = 512;

struct UChunk {
    void *p;
    int64_t n;
    int dbl;   /* f64 (else f32) */
};

template <bool MUL> __global__ void __launch_bounds__(kUnscaleThreads) unscale_kernel(const UChunk *chunks, float inv, float *found)
{
    const UChunk c = chunks[blockIdx.x];
    int bad = 0;
    if (c.dbl) {
        double *p = (double *)c.p, d = (double)inv;
        for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
            double v = p[i];
            bad |= !isfinite(v);
            if (MUL) p[i] = __dmul_rn(v, d);
        }
    } else {
        float *p = (float *)c.p;
        for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
            float v = p[i];
            bad |= !isfinite(v);
            if (MUL) p[i] = __fmul_rn(v, inv);
        }
    }
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found = 1.0f;   /* every writer writes 1 */
}

}   // namespace

extern "C" int em_cuda_UNSCALE(const em_kargs *k)
{
    em_tensor *const *t = k->list;
    const int n = k->nlist, dev = k->out[0]->device.index;
    const float inv = (float)k->f[0];
    float *dfound = (float *)em_data_ptr(k->out[0]);
    std::vector<UChunk> chunks;
    for (int i = 0; i < n; i++) {
        em_tensor *x = t[i];
        if (!x) continue;
        if (x->device.type != EM_DEVICE_CUDA || x->device.index != dev || !em_is_contiguous(x) ||
            (x->dtype != EM_F32 && x->dtype != EM_F64))
            return em__fail(EM_ERR_UNSUPPORTED, "cuda unscale: tensor %d (%s %s) is not a contiguous f32/f64 tensor "
                            "of cuda:%d", i, em__shape_str(x), em_dtype_name(x->dtype), dev);
        int64_t numel = em_numel(x);
        size_t es = em_dtype_size(x->dtype);
        char *base = (char *)em_data_ptr(x);
        for (int64_t b = 0; b < numel; b += kChunk)
            chunks.push_back(UChunk{base + b * (int64_t)es, numel - b < kChunk ? numel - b : kChunk,
                                    x->dtype == EM_F64});
    }
    if (chunks.size() > 0x7fffffffu) return em__fail(EM_ERR_UNSUPPORTED, "cuda unscale: too many chunks");
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    EM_CU(cudaMemsetAsync(dfound, 0, sizeof(float), s));
    if (chunks.empty()) return EM_OK;
    Scratch table;
    EM_TRY(table.get(chunks.size() * sizeof(UChunk), dev));
    EM_CU(cudaMemcpyAsync(table.p, chunks.data(), chunks.size() * sizeof(UChunk), cudaMemcpyHostToDevice, s));
    const UChunk *dc = table.as<const UChunk>();
    unsigned grid = (unsigned)chunks.size();
    if (inv != 1.0f) unscale_kernel<true><<<grid, kUnscaleThreads, 0, s>>>(dc, inv, dfound);
    else unscale_kernel<false><<<grid, kUnscaleThreads, 0, s>>>(dc, inv, dfound);
    EM_CU_LAUNCHED();
    return EM_OK;
}
