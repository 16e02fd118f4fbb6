/* ember — CUDA SOFTMAX, LOG_SOFTMAX and their backward kernels (contracts in
 * tensor/ops.h; formulas of tensor/cpu/k_nn.c):
 *   softmax:          y = exp(x - max) * (1 / sum exp(x - max))
 *   log_softmax:      y = (x - max) - log(sum exp(x - max))
 *   softmax bwd:      dx = y * (dy - sum(dy * y))
 *   log_softmax bwd:  dx = dy - exp(y) * sum(dy)
 * The max ignores NaN (a NaN still poisons the sum, as torch); a row of only
 * -inf gives NaN. f16/bf16/f32 compute in f32, f64 in f64.
 *
 * A row is the set of elements along `dim`. When dim is the output's
 * innermost dim, one block handles a row (fixed shuffle trees: deterministic);
 * otherwise one thread walks a row, so that adjacent threads read adjacent
 * rows. Inputs may have any strides.
 */
#include "tensor/cuda/cuda_common.cuh"

using namespace emcu;

namespace {

/* ---- forward ------------------------------------------------------------------------------ */
template <class T, bool LOG> __global__ void __launch_bounds__(512) softmax_block(Rows<2> R, T *y, const T *x)
{
    using C = typename Compute<T>::type;
    __shared__ C shm[32];
    for (int64_t r = blockIdx.x; r < R.nrows; r += gridDim.x) {
        int64_t off[2];
        row_offsets(R, r, off);
        T *yr = y + off[0];
        const T *xr = x + off[1];
        C m = -INFINITY;
        for (int64_t j = threadIdx.x; j < R.n; j += blockDim.x) m = MaxNoNan()(m, load_c<C>(xr[j * R.rs[1]]));
        m = block_reduce(m, MaxNoNan(), (C)-INFINITY, shm);
        C sum = 0;
        for (int64_t j = threadIdx.x; j < R.n; j += blockDim.x) sum += c_exp<C>(load_c<C>(xr[j * R.rs[1]]) - m);
        sum = block_reduce(sum, Sum(), (C)0, shm);
        if (LOG) {
            C ls = c_log<C>(sum);
            for (int64_t j = threadIdx.x; j < R.n; j += blockDim.x)
                yr[j * R.rs[0]] = store_c<T>((load_c<C>(xr[j * R.rs[1]]) - m) - ls);
        } else {
            C inv = (C)1 / sum;
            for (int64_t j = threadIdx.x; j < R.n; j += blockDim.x)
                yr[j * R.rs[0]] = store_c<T>(c_exp<C>(load_c<C>(xr[j * R.rs[1]]) - m) * inv);
        }
    }
}

template <class T, bool LOG> __global__ void softmax_thread(Rows<2> R, T *y, const T *x)
{
    using C = typename Compute<T>::type;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < R.nrows; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[2];
        row_offsets(R, r, off);
        T *yr = y + off[0];
        const T *xr = x + off[1];
        C m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < R.n; j++) m = MaxNoNan()(m, load_c<C>(xr[j * R.rs[1]]));
        for (int64_t j = 0; j < R.n; j++) sum += c_exp<C>(load_c<C>(xr[j * R.rs[1]]) - m);
        C ls = c_log<C>(sum), inv = (C)1 / sum;
        for (int64_t j = 0; j < R.n; j++) {
            C v = load_c<C>(xr[j * R.rs[1]]) - m;
            yr[j * R.rs[0]] = store_c<T>(LOG ? v - ls : c_exp<C>(v) * inv);
        }
    }
}

template <class T, bool LOG> em_status softmax_t(const em_kargs *k, cudaStream_t s)
{
    const em_tensor *ts[2] = {k->out[0], k->in[0]};
    Rows<2> R = rows_make<2>(ts, (int)k->i[0]);
    if (R.nrows == 0 || R.n == 0) return EM_OK;
    T *y = (T *)tv_of(k->out[0]).p;
    const T *x = (const T *)tv_of(k->in[0]).p;
    if (R.rs[0] == 1 && R.n > 16) {
        softmax_block<T, LOG><<<(unsigned)(R.nrows < 65536 ? R.nrows : 65536), row_threads(R.n), 0, s>>>(R, y, x);
    } else {
        softmax_thread<T, LOG><<<blocks_for(R.nrows), kThreads, 0, s>>>(R, y, x);
    }
    EM_CU_LAUNCHED();
    return EM_OK;
}

template <bool LOG> em_status softmax(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    em_dtype dt = k->in[0]->dtype;
#define EM_SOFTMAX(T) return softmax_t<T, LOG>(k, s)
    EM_FLOAT_CASES(dt, EM_SOFTMAX)
#undef EM_SOFTMAX
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
}

/* ---- backward: in[0] = y, in[1] = dy -> out[0] = dx ---------------------------------------------- */
template <class T, bool LOG> __global__ void __launch_bounds__(512) softmax_bwd_block(Rows<3> R, T *dx, const T *y, const T *dy)
{
    using C = typename Compute<T>::type;
    __shared__ C shm[32];
    for (int64_t r = blockIdx.x; r < R.nrows; r += gridDim.x) {
        int64_t off[3];
        row_offsets(R, r, off);
        T *o = dx + off[0];
        const T *yr = y + off[1], *g = dy + off[2];
        C sum = 0;
        for (int64_t j = threadIdx.x; j < R.n; j += blockDim.x) {
            C gj = load_c<C>(g[j * R.rs[2]]);
            sum += LOG ? gj : gj * load_c<C>(yr[j * R.rs[1]]);
        }
        sum = block_reduce(sum, Sum(), (C)0, shm);
        for (int64_t j = threadIdx.x; j < R.n; j += blockDim.x) {
            C yj = load_c<C>(yr[j * R.rs[1]]), gj = load_c<C>(g[j * R.rs[2]]);
            o[j * R.rs[0]] = store_c<T>(LOG ? gj - c_exp<C>(yj) * sum : yj * (gj - sum));
        }
    }
}

template <class T, bool LOG> __global__ void softmax_bwd_thread(Rows<3> R, T *dx, const T *y, const T *dy)
{
    using C = typename Compute<T>::type;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < R.nrows; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[3];
        row_offsets(R, r, off);
        T *o = dx + off[0];
        const T *yr = y + off[1], *g = dy + off[2];
        C sum = 0;
        for (int64_t j = 0; j < R.n; j++) {
            C gj = load_c<C>(g[j * R.rs[2]]);
            sum += LOG ? gj : gj * load_c<C>(yr[j * R.rs[1]]);
        }
        for (int64_t j = 0; j < R.n; j++) {
            C yj = load_c<C>(yr[j * R.rs[1]]), gj = load_c<C>(g[j * R.rs[2]]);
            o[j * R.rs[0]] = store_c<T>(LOG ? gj - c_exp<C>(yj) * sum : yj * (gj - sum));
        }
    }
}

template <class T, bool LOG> em_status softmax_bwd_t(const em_kargs *k, cudaStream_t s)
{
    const em_tensor *ts[3] = {k->out[0], k->in[0], k->in[1]};
    Rows<3> R = rows_make<3>(ts, (int)k->i[0]);
    if (R.nrows == 0 || R.n == 0) return EM_OK;
    T *dx = (T *)tv_of(k->out[0]).p;
    const T *y = (const T *)tv_of(k->in[0]).p, *dy = (const T *)tv_of(k->in[1]).p;
    if (R.rs[0] == 1 && R.n > 16) {
        softmax_bwd_block<T, LOG><<<(unsigned)(R.nrows < 65536 ? R.nrows : 65536), row_threads(R.n), 0, s>>>(R, dx, y, dy);
    } else {
        softmax_bwd_thread<T, LOG><<<blocks_for(R.nrows), kThreads, 0, s>>>(R, dx, y, dy);
    }
    EM_CU_LAUNCHED();
    return EM_OK;
}

template <bool LOG> em_status softmax_bwd(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    em_dtype dt = k->out[0]->dtype;
    if (k->in[0]->dtype != dt || k->in[1]->dtype != dt)
        return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s: operands differ in dtype", em_op_table[k->op].name);
#define EM_SOFTMAX_BWD(T) return softmax_bwd_t<T, LOG>(k, s)
    EM_FLOAT_CASES(dt, EM_SOFTMAX_BWD)
#undef EM_SOFTMAX_BWD
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
}

}   // namespace

extern "C" int em_cuda_SOFTMAX(const em_kargs *k) { return softmax<false>(k); }
extern "C" int em_cuda_LOG_SOFTMAX(const em_kargs *k) { return softmax<true>(k); }
extern "C" int em_cuda_SOFTMAX_BWD(const em_kargs *k) { return softmax_bwd<false>(k); }
extern "C" int em_cuda_LOG_SOFTMAX_BWD(const em_kargs *k) { return softmax_bwd<true>(k); }
