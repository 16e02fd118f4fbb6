/* ember — GradScaler's fused non-finite check and unscale on CUDA
 * (em_backend.unscale; the caller is amp/grad_scaler.c), torch's
 * _amp_foreach_non_finite_check_and_unscale_.
 *
 * Every gradient is cut into chunks of kChunk elements; one table (a
 * found_inf word, then the chunks) goes to the device in one copy, ONE
 * launch multiplies every element by inv_scale (f32: v * inv rounded to f32;
 * f64: v * (double)inv, as the CPU path) and sets the word when an element
 * was inf or NaN before scaling, and one device-to-host copy of the word,
 * waited for, gives the answer: a single synchronization per call.
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

template <bool MUL> __global__ void __launch_bounds__(kUnscaleThreads) unscale_kernel(const UChunk *chunks, float inv, int *found)
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
    if (__syncthreads_or(bad) && threadIdx.x == 0) *found = 1;   /* every writer writes 1 */
}

}   // namespace

extern "C" em_status em__cuda_unscale(int dev, em_tensor *const *t, int n, float inv, bool *found_inf)
{
    *found_inf = false;
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
    if (chunks.empty()) return EM_OK;
    if (chunks.size() > 0x7fffffffu) return em__fail(EM_ERR_UNSUPPORTED, "cuda unscale: too many chunks");
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    constexpr size_t kHead = 256;   /* the found_inf word, then the chunks */
    std::vector<char> host(kHead + chunks.size() * sizeof(UChunk), 0);
    memcpy(host.data() + kHead, chunks.data(), chunks.size() * sizeof(UChunk));
    Scratch table;
    EM_TRY(table.get(host.size(), dev));
    EM_CU(cudaMemcpyAsync(table.p, host.data(), host.size(), cudaMemcpyHostToDevice, s));
    int *dfound = table.as<int>();
    const UChunk *dc = (const UChunk *)(table.as<char>() + kHead);
    unsigned grid = (unsigned)chunks.size();
    if (inv != 1.0f) unscale_kernel<true><<<grid, kUnscaleThreads, 0, s>>>(dc, inv, dfound);
    else unscale_kernel<false><<<grid, kUnscaleThreads, 0, s>>>(dc, inv, dfound);
    EM_CU_LAUNCHED();
    int found = 0;
    EM_CU(cudaMemcpyAsync(&found, dfound, sizeof found, cudaMemcpyDeviceToHost, s));
    EM_CU(cudaStreamSynchronize(s));
    *found_inf = found != 0;
    return EM_OK;
}
