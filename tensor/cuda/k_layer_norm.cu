/* ember — CUDA LAYER_NORM and LAYER_NORM_BWD (contracts in tensor/ops.h;
 * formulas of tensor/cpu/k_layer_norm.c).
 *
 * Forward: one block per row. Mean and biased variance accumulate in f64 in
 * two passes (mean, then squared deviations), as the CPU; the row is then
 * normalized in the compute type (f32, or f64 for f64) with mean and
 * rstd = 1/sqrt(var + eps) rounded to the statistics dtype first.
 *
 * Backward: with xh = (x - mean) * rstd and g = dy * w,
 *   dx = rstd * (g - mean(g) - xh * mean(g * xh))   one block per row;
 *   dw = sum_rows dy * xh, db = sum_rows dy         per column, rows cut into
 * a fixed number of chunks (from the shape) whose f64 partial sums are added
 * in chunk order: deterministic, no atomics.
 */
#include "tensor/cuda/cuda_common.cuh"

using namespace emcu;

namespace {

template <class T>
__global__ void __launch_bounds__(512) ln_fwd(Rows<2> R, T *y, const T *x, const T *w, int64_t ws, const T *b, int64_t bs, void *mean,
                       void *rstd, em_dtype sdt, double eps)
{
    using C = typename Compute<T>::type;
    __shared__ double shm[32];
    const int64_t D = R.n;
    for (int64_t r = blockIdx.x; r < R.nrows; r += gridDim.x) {
        int64_t off[2];
        row_offsets(R, r, off);
        T *yr = y + off[0];
        const T *xr = x + off[1];
        double s = 0.0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += to_double(xr[j * R.rs[1]]);
        s = block_reduce(s, Sum(), 0.0, shm);
        double m = D ? s / (double)D : 0.0, v = 0.0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            double d = to_double(xr[j * R.rs[1]]) - m;
            v += d * d;
        }
        v = block_reduce(v, Sum(), 0.0, shm);
        double rs_d = 1.0 / sqrt((D ? v / (double)D : 0.0) + eps);
        C mu = (C)m, rs = (C)rs_d;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            C wj = w ? load_c<C>(w[j * ws]) : (C)1, bj = b ? load_c<C>(b[j * bs]) : (C)0;
            yr[j * R.rs[0]] = store_c<T>((load_c<C>(xr[j * R.rs[1]]) - mu) * rs * wj + bj);
        }
        if (threadIdx.x == 0) {
            if (sdt == EM_F64) {
                ((double *)mean)[r] = (double)mu;
                ((double *)rstd)[r] = (double)rs;
            } else {
                ((float *)mean)[r] = (float)mu;
                ((float *)rstd)[r] = (float)rs;
            }
        }
    }
}

template <class T> em_status ln_fwd_t(const em_kargs *k, cudaStream_t s)
{
    const em_tensor *x = k->in[0], *w = k->in[1], *b = k->in[2];
    em_tensor *mean = k->out[1], *rstd = k->out[2];
    const em_tensor *ts[2] = {k->out[0], x};
    Rows<2> R = rows_make<2>(ts, x->ndim - 1);
    if (R.nrows == 0) return EM_OK;
    Tv wv = w ? tv_of(w) : Tv{}, bv = b ? tv_of(b) : Tv{};
    ln_fwd<T><<<(unsigned)(R.nrows < 65536 ? R.nrows : 65536), row_threads(R.n), 0, s>>>(
        R, (T *)tv_of(k->out[0]).p, (const T *)tv_of(x).p, w ? (const T *)wv.p : nullptr, w ? wv.stride[0] : 0,
        b ? (const T *)bv.p : nullptr, b ? bv.stride[0] : 0, tv_of(mean).p, tv_of(rstd).p, mean->dtype, k->f[0]);
    EM_CU_LAUNCHED();
    return EM_OK;
}

/* ---- backward --------------------------------------------------------------------------------- */
struct Stats {
    const void *mean, *rstd;
    em_dtype dt;
    Geo gm, gr;   /* element r of each, in logical order */
};

__device__ inline void stats_at(const Stats &st, int64_t r, double *mu, double *rs)
{
    *mu = load_any(st.mean, st.dt, geo_offset(st.gm, r));
    *rs = load_any(st.rstd, st.dt, geo_offset(st.gr, r));
}

/* dx for each row; R's operands: dx, dy, x. */
template <class T> __global__ void __launch_bounds__(512) ln_bwd_dx(Rows<3> R, T *dx, const T *dy, const T *x, const T *w, int64_t ws, Stats st)
{
    using C = typename Compute<T>::type;
    __shared__ C shm[32];
    const int64_t D = R.n;
    for (int64_t r = blockIdx.x; r < R.nrows; r += gridDim.x) {
        int64_t off[3];
        row_offsets(R, r, off);
        T *o = dx + off[0];
        const T *g = dy + off[1], *xr = x + off[2];
        double mu_d, rs_d;
        stats_at(st, r, &mu_d, &rs_d);
        C mu = (C)mu_d, rs = (C)rs_d;
        C a = 0, c = 0;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            C wj = w ? load_c<C>(w[j * ws]) : (C)1;
            C gj = load_c<C>(g[j * R.rs[1]]) * wj;
            a += gj;
            c += gj * ((load_c<C>(xr[j * R.rs[2]]) - mu) * rs);
        }
        a = block_reduce(a, Sum(), (C)0, shm);
        c = block_reduce(c, Sum(), (C)0, shm);
        C ma = a / (C)D, mc = c / (C)D;
        for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
            C wj = w ? load_c<C>(w[j * ws]) : (C)1;
            C xh = (load_c<C>(xr[j * R.rs[2]]) - mu) * rs;
            o[j * R.rs[0]] = store_c<T>(rs * (load_c<C>(g[j * R.rs[1]]) * wj - ma - xh * mc));
        }
    }
}

/* Partial column sums of chunk c: pw[c][j] = sum dy * xh, pb[c][j] = sum dy. */
template <class T>
__global__ void ln_bwd_cols(Rows<3> R, const T *dy, const T *x, Stats st, int64_t nch, double *pw, double *pb)
{
    using C = typename Compute<T>::type;
    const int64_t D = R.n, total = nch * D;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = t / D, j = t % D;   /* adjacent threads: adjacent columns */
        double sw = 0.0, sb = 0.0;
        for (int64_t r = R.nrows * c / nch; r < R.nrows * (c + 1) / nch; r++) {
            int64_t off[3];
            row_offsets(R, r, off);
            double mu_d, rs_d;
            stats_at(st, r, &mu_d, &rs_d);
            C g = load_c<C>(dy[off[1] + j * R.rs[1]]);
            C xh = (load_c<C>(x[off[2] + j * R.rs[2]]) - (C)mu_d) * (C)rs_d;
            sw += (double)(g * xh);
            sb += (double)g;
        }
        if (pw) pw[t] = sw;
        if (pb) pb[t] = sb;
    }
}

template <class T> __global__ void ln_bwd_sum(int64_t D, int64_t nch, const double *part, T *out)
{
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < D; j += (int64_t)gridDim.x * blockDim.x) {
        double s = 0.0;
        for (int64_t c = 0; c < nch; c++) s += part[c * D + j];
        out[j] = from_double<T>(s);
    }
}

template <class T> em_status ln_bwd_t(const em_kargs *k, cudaStream_t s, int dev)
{
    const em_tensor *dy = k->in[0], *x = k->in[1], *mean = k->in[2], *rstd = k->in[3], *w = k->in[4];
    em_tensor *dx = k->out[0], *dw = k->out[1], *db = k->out[2];
    const em_tensor *ts[3] = {dx, dy, x};
    Rows<3> R = rows_make<3>(ts, x->ndim - 1);
    const int64_t D = R.n;
    Stats st = {tv_of(mean).p, tv_of(rstd).p, mean->dtype, geo_of(tv_of(mean)), geo_of(tv_of(rstd))};
    if (rstd->dtype != mean->dtype)
        return em__fail(EM_ERR_UNSUPPORTED, "cuda: layer_norm_backward: mean and rstd differ in dtype");
    Tv wv = w ? tv_of(w) : Tv{};
    const T *wp = w ? (const T *)wv.p : nullptr;
    int64_t ws = w ? wv.stride[0] : 0;
    if (R.nrows > 0 && D > 0) {
        ln_bwd_dx<T><<<(unsigned)(R.nrows < 65536 ? R.nrows : 65536), row_threads(D), 0, s>>>(
            R, (T *)tv_of(dx).p, (const T *)tv_of(dy).p, (const T *)tv_of(x).p, wp, ws, st);
        EM_CU_LAUNCHED();
    }
    if (!dw && !db) return EM_OK;
    if (D == 0) return EM_OK;
    int64_t nch = R.nrows / 64;
    if (nch < 1) nch = 1;
    if (nch > 256) nch = 256;
    Scratch part;
    EM_TRY(part.get(sizeof(double) * (size_t)(2 * nch * D), dev));
    double *pw = dw ? part.as<double>() : nullptr, *pb = db ? part.as<double>() + nch * D : nullptr;
    if (R.nrows == 0) {   /* no rows: the sums are 0 */
        EM_CU(cudaMemsetAsync(part.p, 0, sizeof(double) * (size_t)(2 * nch * D), s));
    } else {
        ln_bwd_cols<T><<<blocks_for(nch * D), kThreads, 0, s>>>(R, (const T *)tv_of(dy).p, (const T *)tv_of(x).p, st,
                                                                nch, pw, pb);
        EM_CU_LAUNCHED();
    }
    if (dw) {
        ln_bwd_sum<T><<<blocks_for(D), kThreads, 0, s>>>(D, nch, pw, (T *)tv_of(dw).p);
        EM_CU_LAUNCHED();
    }
    if (db) {
        ln_bwd_sum<T><<<blocks_for(D), kThreads, 0, s>>>(D, nch, pb, (T *)tv_of(db).p);
        EM_CU_LAUNCHED();
    }
    return EM_OK;
}

}   // namespace

extern "C" int em_cuda_LAYER_NORM(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    em_dtype dt = k->in[0]->dtype;
#define EM_LN(T) return ln_fwd_t<T>(k, s)
    EM_FLOAT_CASES(dt, EM_LN)
#undef EM_LN
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: layer_norm does not take %s", em_dtype_name(dt));
}

extern "C" int em_cuda_LAYER_NORM_BWD(const em_kargs *k)
{
    int dev = kdev(k);
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    em_dtype dt = k->out[0]->dtype;
    if (k->in[0]->dtype != dt || k->in[1]->dtype != dt || (k->in[4] && k->in[4]->dtype != dt))
        return em__fail(EM_ERR_UNSUPPORTED, "cuda: layer_norm_backward: operands differ in dtype");
#define EM_LN_BWD(T) return ln_bwd_t<T>(k, s, dev)
    EM_FLOAT_CASES(dt, EM_LN_BWD)
#undef EM_LN_BWD
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: layer_norm_backward does not take %s", em_dtype_name(dt));
}
