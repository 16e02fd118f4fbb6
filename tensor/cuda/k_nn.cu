/* ember — CUDA EMBEDDING (+ BWD), DROPOUT and CROSS_ENTROPY (+ BWD)
 * (contracts in tensor/ops.h; semantics of tensor/cpu/k_nn.c).
 *
 * Ids and targets were validated by the ops before dispatch; the kernels
 * still never read out of bounds: an out-of-range id gives a zero row, an
 * out-of-range target is treated as ignored (no error is reported from the
 * device, which would need a synchronization).
 *
 * Determinism (no atomics):
 *   - EMBEDDING_BWD sorts the row numbers by id with a stable radix sort
 *     (CUB), then one block per vocabulary row sums its dy rows in
 *     increasing row order (f32 accumulation; f64 for f64), as the CPU;
 *   - CROSS_ENTROPY's mean/sum adds the per-row losses in a fixed tree (f64).
 * DROPOUT's mask is bit-identical to the CPU's: element e (row-major) uses
 * Philox counter offset + e/4, lane e%4, and is kept iff (bits >> 8) >= ceil(p 2^24).
 */
#include "tensor/cuda/cuda_common.cuh"

#include <cub/cub.cuh>

using namespace emcu;

namespace {

__device__ inline int64_t load_id(const void *p, bool i64, int64_t off)
{
    return i64 ? ((const int64_t *)p)[off] : ((const int32_t *)p)[off];
}

/* ---- embedding ---------------------------------------------------------------------------- */
template <class B>
__global__ void __launch_bounds__(512) embed(B *out, const B *w, int64_t ws0, int64_t ws1, const void *ids, bool i64, Geo ig, int64_t N,
                      int64_t D, int64_t V)
{
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        int64_t id = load_id(ids, i64, geo_offset(ig, n));
        bool ok = id >= 0 && id < V;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) out[n * D + j] = ok ? w[id * ws0 + j * ws1] : (B)0;
    }
}

/* keys[n] = id of row n, vals[n] = n. */
__global__ void embed_keys(const void *ids, bool i64, Geo ig, int64_t N, uint32_t *keys, int64_t *vals)
{
    for (int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; n < N; n += (int64_t)gridDim.x * blockDim.x) {
        keys[n] = (uint32_t)load_id(ids, i64, geo_offset(ig, n));
        vals[n] = n;
    }
}

/* base[i] = offset of dy row vals[i]. */
__global__ void embed_bases(Rows<1> R, const int64_t *vals, int64_t N, int64_t *base)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[1];
        row_offsets(R, vals[i], off);
        base[i] = off[0];
    }
}

__device__ inline int64_t lower_bound(const uint32_t *k, int64_t n, uint32_t v)
{
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (k[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* dw[v] = sum of the dy rows whose id is v, in increasing row order; into: dw[v] +=
 * that sum (rounded to T first, as adding the dense result would), rows with no
 * id (and pad) untouched. */
template <class T>
__global__ void __launch_bounds__(512) embed_rows(T *dw, const T *dy, int64_t gs, const uint32_t *keys, const int64_t *base, int64_t N, int64_t V,
                           int64_t D, int64_t pad, bool into)
{
    using C = typename Compute<T>::type;
    __shared__ int64_t range[2];
    for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
        __syncthreads();
        if (threadIdx.x == 0) {
            range[0] = lower_bound(keys, N, (uint32_t)v);
            range[1] = lower_bound(keys, N, (uint32_t)v + 1);
        }
        __syncthreads();
        int64_t lo = range[0], hi = v == pad ? range[0] : range[1];
        if (into && lo == hi) continue;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            C acc = 0;
            for (int64_t i = lo; i < hi; i++) acc += load_c<C>(dy[base[i] + j * gs]);
            dw[v * D + j] = into ? store_c<T>(load_c<C>(dw[v * D + j]) + load_c<C>(store_c<T>(acc))) : store_c<T>(acc);
        }
    }
}

template <class T> em_status embed_bwd_t(const em_kargs *k, cudaStream_t s, int dev)
{
    const em_tensor *dy = k->in[0], *ids = k->in[1];
    em_tensor *dw = k->out[0];
    int64_t V = dw->shape[0], D = dw->shape[1], N = em_numel(ids), pad = k->i[0];
    bool into = k->i[1] != 0;
    T *dwp = (T *)tv_of(dw).p;
    if (V * D == 0) return EM_OK;
    if (N == 0 || D == 0) {
        if (!into) EM_CU(cudaMemsetAsync(dwp, 0, sizeof(T) * (size_t)(V * D), s));
        return EM_OK;
    }
    if (V > 0xffffffffLL)
        return em__fail(EM_ERR_UNSUPPORTED, "cuda: embedding_backward: %lld embeddings is beyond 2^32", (long long)V);
    int end_bit = 1;
    while (end_bit < 32 && ((uint64_t)1 << end_bit) < (uint64_t)V) end_bit++;
    size_t tmp_bytes = 0;
    EM_CU(cub::DeviceRadixSort::SortPairs(nullptr, tmp_bytes, (uint32_t *)nullptr, (uint32_t *)nullptr,
                                          (int64_t *)nullptr, (int64_t *)nullptr, (int)N, 0, end_bit, s));
    size_t nkeys = sizeof(uint32_t) * (size_t)N, nvals = sizeof(int64_t) * (size_t)N;
    size_t kpad = (nkeys + 255) / 256 * 256, vpad = (nvals + 255) / 256 * 256;
    Scratch buf;
    EM_TRY(buf.get(2 * kpad + 3 * vpad + tmp_bytes, dev));
    char *p = buf.as<char>();
    uint32_t *keys = (uint32_t *)p, *skeys = (uint32_t *)(p + kpad);
    int64_t *vals = (int64_t *)(p + 2 * kpad), *svals = (int64_t *)(p + 2 * kpad + vpad);
    int64_t *base = (int64_t *)(p + 2 * kpad + 2 * vpad);
    void *tmp = p + 2 * kpad + 3 * vpad;
    Tv iv = tv_of(ids);
    embed_keys<<<blocks_for(N), kThreads, 0, s>>>(iv.p, ids->dtype == EM_I64, geo_of(iv), N, keys, vals);
    EM_CU_LAUNCHED();
    EM_CU(cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, keys, skeys, vals, svals, (int)N, 0, end_bit, s));
    const em_tensor *ts[1] = {dy};
    Rows<1> R = rows_make<1>(ts, dy->ndim - 1);
    embed_bases<<<blocks_for(N), kThreads, 0, s>>>(R, svals, N, base);
    EM_CU_LAUNCHED();
    embed_rows<T><<<(unsigned)(V < 65536 ? V : 65536), row_threads(D), 0, s>>>(dwp, (const T *)tv_of(dy).p, R.rs[0],
                                                                                skeys, base, N, V, D, pad, into);
    EM_CU_LAUNCHED();
    return EM_OK;
}

/* ---- dropout ------------------------------------------------------------------------------------ */
template <class T>
__global__ void dropout_k(const T *x, Geo gx, T *y, uint8_t *mask, int64_t n, uint64_t seed, uint64_t offset, uint32_t thr,
                          int mode, float scale_f, double scale_d)
{
    int64_t ng = (n + 3) / 4;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < ng; g += (int64_t)gridDim.x * blockDim.x) {
        uint32_t bits[4] = {0, 0, 0, 0};
        if (mode == 2) philox(seed, offset + (uint64_t)g, bits);
#pragma unroll
        for (int l = 0; l < 4; l++) {
            int64_t e = g * 4 + l;
            if (e >= n) break;
            bool keep = mode == 0 ? true : mode == 1 ? false : (bits[l] >> 8) >= thr;
            if (mask) mask[e] = keep;
            T v;
            if (!keep) v = store_c<T>(0.0f);
            else if constexpr (std::is_same<T, double>::value) v = x[geo_offset(gx, e)] * scale_d;
            else v = store_c<T>(load_c<float>(x[geo_offset(gx, e)]) * scale_f);
            y[e] = v;
        }
    }
}

template <class T> em_status dropout_t(const em_kargs *k, cudaStream_t s)
{
    Tv x = tv_of(k->in[0]);
    int64_t n = tv_numel(x);
    if (n == 0) return EM_OK;
    double p = k->f[0];
    int mode = p <= 0.0 ? 0 : p >= 1.0 ? 1 : 2;
    uint32_t thr = (uint32_t)ceil(p * 16777216.0);
    double scale_d = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    uint8_t *mask = k->out[1] ? (uint8_t *)tv_of(k->out[1]).p : nullptr;
    dropout_k<T><<<blocks_for((n + 3) / 4), kThreads, 0, s>>>((const T *)x.p, geo_of(x), (T *)tv_of(k->out[0]).p, mask, n,
                                                             (uint64_t)k->i[0], (uint64_t)k->i[1], thr, mode,
                                                             (float)scale_d, scale_d);
    EM_CU_LAUNCHED();
    return EM_OK;
}

/* ---- cross-entropy ------------------------------------------------------------------------------ */
struct CeArgs {
    int64_t N, C, xs0, xs1;
    const int64_t *tg;
    int64_t ts;
    int64_t ignore;
    int red;
};

template <class T>
__global__ void __launch_bounds__(512) ce_rows(CeArgs a, const T *x, void *lse, em_dtype ldt, double *rl, T *loss_none)
{
    using Cm = typename Compute<T>::type;
    __shared__ Cm shm[32];
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        const T *row = x + n * a.xs0;
        Cm m = -INFINITY;
        for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x) m = MaxNoNan()(m, load_c<Cm>(row[j * a.xs1]));
        m = block_reduce(m, MaxNoNan(), (Cm)-INFINITY, shm);
        Cm sum = 0;
        for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x) sum += c_exp<Cm>(load_c<Cm>(row[j * a.xs1]) - m);
        sum = block_reduce(sum, Sum(), (Cm)0, shm);
        if (threadIdx.x == 0) {
            int64_t t = a.tg[n * a.ts];
            bool ign = t == a.ignore || t < 0 || t >= a.C;
            double ls = log((double)sum), l = (double)m + ls;
            if (ldt == EM_F64) ((double *)lse)[n] = l;
            else ((float *)lse)[n] = (float)l;
            double v = ign ? 0.0 : ((double)m - (double)load_c<Cm>(row[t * a.xs1])) + ls;
            rl[n] = v;
            if (loss_none) loss_none[n] = from_double<T>(v);
        }
    }
}

/* loss = sum or mean of rl over the rows whose target is not ignore_index (one block). */
template <class T> __global__ void __launch_bounds__(1024) ce_reduce(CeArgs a, const double *rl, T *loss)
{
    __shared__ double shm[32];
    __shared__ int64_t shc[32];
    double s = 0.0;
    int64_t c = 0;
    for (int64_t n = threadIdx.x; n < a.N; n += blockDim.x) {
        s += rl[n];
        c += a.tg[n * a.ts] != a.ignore;
    }
    s = block_reduce(s, Sum(), 0.0, shm);
    c = block_reduce(c, Sum(), (int64_t)0, shc);
    if (threadIdx.x == 0) loss[0] = from_double<T>(a.red == EM_REDUCE_SUM ? s : (c ? s / (double)c : NAN));
}

template <class T> em_status ce_t(const em_kargs *k, cudaStream_t s, int dev)
{
    const em_tensor *x = k->in[0], *tg = k->in[1];
    em_tensor *loss = k->out[0], *lse = k->out[1];
    CeArgs a = {x->shape[0], x->shape[1], x->stride[0], x->stride[1], (const int64_t *)tv_of(tg).p, tg->stride[0],
                k->i[0], (int)k->i[1]};
    Scratch rl;
    EM_TRY(rl.get(sizeof(double) * (size_t)(a.N ? a.N : 1), dev));
    T *lp = (T *)tv_of(loss).p;
    if (a.N > 0) {
        ce_rows<T><<<(unsigned)(a.N < 65536 ? a.N : 65536), row_threads(a.C), 0, s>>>(
            a, (const T *)tv_of(x).p, tv_of(lse).p, lse->dtype, rl.as<double>(), a.red == EM_REDUCE_NONE ? lp : nullptr);
        EM_CU_LAUNCHED();
    }
    if (a.red != EM_REDUCE_NONE) {
        ce_reduce<T><<<1, 1024, 0, s>>>(a, rl.as<double>(), lp);
        EM_CU_LAUNCHED();
    }
    return EM_OK;
}

/* scale[0] = dloss (sum) or dloss / #non-ignored rows (mean; 0 when none). */
__global__ void __launch_bounds__(1024) ce_scale(CeArgs a, const void *dl, em_dtype dldt, double *scale)
{
    __shared__ int64_t shc[32];
    int64_t c = 0;
    for (int64_t n = threadIdx.x; n < a.N; n += blockDim.x) c += a.tg[n * a.ts] != a.ignore;
    c = block_reduce(c, Sum(), (int64_t)0, shc);
    if (threadIdx.x == 0) {
        double v = load_any(dl, dldt, 0);
        scale[0] = a.red == EM_REDUCE_MEAN ? (c ? v / (double)c : 0.0) : v;
    }
}

template <class T>
__global__ void __launch_bounds__(512) ce_bwd_rows(CeArgs a, const T *x, const void *lse, em_dtype ldt, int64_t lss, const void *dl,
                            em_dtype dldt, int64_t dls, const double *scale_all, T *dx)
{
    using Cm = typename Compute<T>::type;
    for (int64_t n = blockIdx.x; n < a.N; n += gridDim.x) {
        int64_t t = a.tg[n * a.ts];
        bool ign = t == a.ignore || t < 0 || t >= a.C;
        double sc = ign ? 0.0 : a.red == EM_REDUCE_NONE ? load_any(dl, dldt, n * dls) : scale_all[0];
        Cm l = (Cm)load_any(lse, ldt, n * lss), sf = (Cm)sc;
        const T *row = x + n * a.xs0;
        T *o = dx + n * a.C;
        for (int64_t j = threadIdx.x; j < a.C; j += blockDim.x) {
            Cm v = ign ? (Cm)0 : c_exp<Cm>(load_c<Cm>(row[j * a.xs1]) - l) * sf;
            if (!ign && j == t) v -= sf;
            o[j] = store_c<T>(v);
        }
    }
}

template <class T> em_status ce_bwd_t(const em_kargs *k, cudaStream_t s, int dev)
{
    const em_tensor *x = k->in[0], *tg = k->in[1], *lse = k->in[2], *dl = k->in[3];
    CeArgs a = {x->shape[0], x->shape[1], x->stride[0], x->stride[1], (const int64_t *)tv_of(tg).p, tg->stride[0],
                k->i[0], (int)k->i[1]};
    if (a.N == 0) return EM_OK;
    Scratch scale;
    EM_TRY(scale.get(sizeof(double), dev));
    if (a.red != EM_REDUCE_NONE) {
        ce_scale<<<1, 1024, 0, s>>>(a, tv_of(dl).p, dl->dtype, scale.as<double>());
        EM_CU_LAUNCHED();
    }
    ce_bwd_rows<T><<<(unsigned)(a.N < 65536 ? a.N : 65536), row_threads(a.C), 0, s>>>(
        a, (const T *)tv_of(x).p, tv_of(lse).p, lse->dtype, lse->ndim ? lse->stride[0] : 0, tv_of(dl).p, dl->dtype,
        dl->ndim ? dl->stride[0] : 0, scale.as<double>(), (T *)tv_of(k->out[0]).p);
    EM_CU_LAUNCHED();
    return EM_OK;
}

em_status no_dtype(const em_kargs *k, em_dtype dt)
{
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
}

}   // namespace

extern "C" int em_cuda_EMBEDDING(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    const em_tensor *w = k->in[0], *ids = k->in[1];
    Tv wv = tv_of(w), iv = tv_of(ids);
    int64_t V = w->shape[0], D = w->shape[1], N = em_numel(ids);
    if (N == 0 || D == 0) return EM_OK;
    void *out = tv_of(k->out[0]).p;
#define EM_EMBED(S)                                                                                           \
    {                                                                                                         \
        using B = typename Bits<S>::type;                                                                     \
        embed<B><<<(unsigned)(N < 65536 ? N : 65536), row_threads(D), 0, s>>>(                                 \
            (B *)out, (const B *)wv.p, wv.stride[0], wv.stride[1], iv.p, ids->dtype == EM_I64, geo_of(iv), N, D, V); \
        break;                                                                                                \
    }
    switch (em_dtype_size(w->dtype)) {
    case 1: EM_EMBED(1)
    case 2: EM_EMBED(2)
    case 4: EM_EMBED(4)
    default: EM_EMBED(8)
    }
#undef EM_EMBED
    EM_CU_LAUNCHED();
    return EM_OK;
}

extern "C" int em_cuda_EMBEDDING_BWD(const em_kargs *k)
{
    int dev = kdev(k);
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    em_dtype dt = k->out[0]->dtype;
    if (k->in[0]->dtype != dt) return no_dtype(k, k->in[0]->dtype);
#define EM_EMB_BWD(T) return embed_bwd_t<T>(k, s, dev)
    EM_FLOAT_CASES(dt, EM_EMB_BWD)
#undef EM_EMB_BWD
    return no_dtype(k, dt);
}

extern "C" int em_cuda_DROPOUT(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    em_dtype dt = k->in[0]->dtype;
    if (k->out[0]->dtype != dt) return no_dtype(k, k->out[0]->dtype);
#define EM_DROPOUT(T) return dropout_t<T>(k, s)
    EM_FLOAT_CASES(dt, EM_DROPOUT)
#undef EM_DROPOUT
    return no_dtype(k, dt);
}

extern "C" int em_cuda_CROSS_ENTROPY(const em_kargs *k)
{
    int dev = kdev(k);
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    em_dtype dt = k->in[0]->dtype;
    if (k->out[0]->dtype != dt) return no_dtype(k, k->out[0]->dtype);
#define EM_CE(T) return ce_t<T>(k, s, dev)
    EM_FLOAT_CASES(dt, EM_CE)
#undef EM_CE
    return no_dtype(k, dt);
}

extern "C" int em_cuda_CROSS_ENTROPY_BWD(const em_kargs *k)
{
    int dev = kdev(k);
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    em_dtype dt = k->in[0]->dtype;
    if (k->out[0]->dtype != dt) return no_dtype(k, k->out[0]->dtype);
#define EM_CE_BWD(T) return ce_bwd_t<T>(k, s, dev)
    EM_FLOAT_CASES(dt, EM_CE_BWD)
#undef EM_CE_BWD
    return no_dtype(k, dt);
}
