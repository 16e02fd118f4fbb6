/* ember — CUDA CAT, INDEX_SELECT, GATHER, SCATTER_ADD (contracts in
 * tensor/ops.h; semantics of tensor/cpu/k_index.c). Inputs may be any
 * strided view; outputs are contiguous. Indices (i64; GATHER and SCATTER_ADD
 * also take i32) were range-checked by the op.
 *
 * CAT, INDEX_SELECT and GATHER move raw elements (every dtype). SCATTER_ADD
 * adds in the element's dtype (f16/bf16 through f32, integers wrap) and is
 * deterministic: one thread per position off the scatter dim walks the index
 * along the dim in order; those positions own disjoint output elements, so
 * there are no atomics and the order of additions is fixed.
 */
#include "tensor/cuda/k_elementwise.cuh"

using namespace emcu;

namespace {

__device__ inline int64_t load_index(const void *p, bool i64, int64_t off)
{
    return i64 ? ((const int64_t *)p)[off] : ((const int32_t *)p)[off];
}

template <class B> struct MoveF {
    B *o;
    const B *a;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = a[off[1]]; }
};

/* dst[...] = src[...] over src's shape, any strides. */
em_status copy_view(cudaStream_t s, const Tv &dst, const Tv &src)
{
    const Tv *ops[2] = {&dst, &src};
    Iter<2> it = iter_make<2>(ops);
    int64_t n = tv_numel(src);
#define EM_MOVE(S)                                                                    \
    {                                                                                 \
        using B = typename Bits<S>::type;                                             \
        return launch_iter(s, it, n, MoveF<B>{(B *)dst.p, (const B *)src.p});         \
    }
    EM_SIZE_CASES(em_dtype_size(src.dt), EM_MOVE)
#undef EM_MOVE
    return EM_OK;
}

/* out (contiguous, shape oshape) from x through an index along dim. */
struct IdxArgs {
    int nd, dim;
    int64_t n;
    int64_t oshape[EM_MAX_DIMS], xstride[EM_MAX_DIMS], istride[EM_MAX_DIMS];
    bool i64, gather;
};

template <class B> __global__ void index_k(IdxArgs a, B *out, const B *x, const void *idx)
{
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < a.n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = e, xoff = 0, ioff = 0;
        for (int d = a.nd - 1; d >= 0; d--) {
            int64_t i = q % a.oshape[d];
            q /= a.oshape[d];
            if (d != a.dim) xoff += i * a.xstride[d];
            if (a.gather) ioff += i * a.istride[d];
            else if (d == a.dim) ioff = i * a.istride[0];
        }
        xoff += load_index(idx, a.i64, ioff) * a.xstride[a.dim];
        out[e] = x[xoff];
    }
}

em_status run_index(cudaStream_t s, const IdxArgs &a, const Tv &out, const Tv &x, const void *idx)
{
    if (a.n == 0) return EM_OK;
#define EM_INDEX(S)                                                                                         \
    {                                                                                                       \
        using B = typename Bits<S>::type;                                                                   \
        index_k<B><<<blocks_for(a.n), kThreads, 0, s>>>(a, (B *)out.p, (const B *)x.p, idx);                 \
        break;                                                                                              \
    }
    EM_SIZE_CASES(em_dtype_size(x.dt), EM_INDEX)
#undef EM_INDEX
    EM_CU_LAUNCHED();
    return EM_OK;
}

/* ---- scatter_add ------------------------------------------------------------------------------ */
struct ScatterArgs {
    int nd, dim;
    int64_t tasks, J;
    int64_t ishape[EM_MAX_DIMS], istride[EM_MAX_DIMS], sstride[EM_MAX_DIMS], ostride[EM_MAX_DIMS];
    bool i64;
};

template <class T> __device__ inline T add_elem(T a, T b)
{
    if constexpr (std::is_integral<T>::value) {
        using U = typename std::make_unsigned<T>::type;
        return (T)((U)a + (U)b);
    } else {
        using C = typename Compute<T>::type;
        return store_c<T>(load_c<C>(a) + load_c<C>(b));
    }
}

template <class T> __global__ void scatter_add_k(ScatterArgs a, T *out, const T *src, const void *idx)
{
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < a.tasks; t += (int64_t)gridDim.x * blockDim.x) {
        int64_t q = t, io = 0, so = 0, oo = 0;
        for (int d = a.nd - 1; d >= 0; d--) {
            if (d == a.dim) continue;
            int64_t i = q % a.ishape[d];
            q /= a.ishape[d];
            io += i * a.istride[d];
            so += i * a.sstride[d];
            oo += i * a.ostride[d];
        }
        const int64_t od = a.nd ? a.ostride[a.dim] : 0, ijs = a.nd ? a.istride[a.dim] : 0, sjs = a.nd ? a.sstride[a.dim] : 0;
        for (int64_t j = 0; j < a.J; j++) {
            T *o = out + oo + load_index(idx, a.i64, io + j * ijs) * od;
            *o = add_elem(*o, src[so + j * sjs]);
        }
    }
}

}   // namespace

extern "C" int em_cuda_CAT(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    Tv out = tv_of(k->out[0]);
    int dim = (int)k->i[0];
    int64_t at = 0, es = (int64_t)em_dtype_size(out.dt);
    for (int j = 0; j < k->nlist; j++) {
        const em_tensor *t = k->list[j];
        if (em_numel(t) == 0) continue;   /* torch's skipped 1-d [0] inputs included */
        Tv src = tv_of(t), dst = out;
        dst.p = out.p + at * out.stride[dim] * es;
        for (int d = 0; d < out.nd; d++) dst.shape[d] = src.shape[d];
        EM_TRY(copy_view(s, dst, src));
        at += t->shape[dim];
    }
    return EM_OK;
}

extern "C" int em_cuda_INDEX_SELECT(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    const em_tensor *x = k->in[0], *index = k->in[1];
    Tv out = tv_of(k->out[0]), xv = tv_of(x);
    IdxArgs a;
    memset(&a, 0, sizeof a);
    a.nd = out.nd;
    a.dim = (int)k->i[0];
    a.n = tv_numel(out);
    for (int d = 0; d < out.nd; d++) {
        a.oshape[d] = out.shape[d];
        a.xstride[d] = xv.stride[d];
    }
    a.istride[0] = index->ndim ? index->stride[0] : 0;
    a.i64 = index->dtype == EM_I64;
    a.gather = false;
    return run_index(s, a, out, xv, tv_of(index).p);
}

extern "C" int em_cuda_GATHER(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    const em_tensor *x = k->in[0], *index = k->in[1];
    Tv out = tv_of(k->out[0]), xv = tv_of(x);
    IdxArgs a;
    memset(&a, 0, sizeof a);
    a.nd = index->ndim;
    a.dim = index->ndim ? (int)k->i[0] : 0;
    a.n = tv_numel(out);
    for (int d = 0; d < index->ndim; d++) {
        a.oshape[d] = index->shape[d];
        a.istride[d] = index->stride[d];
    }
    for (int d = 0; d < x->ndim && d < EM_MAX_DIMS; d++) a.xstride[d] = xv.stride[d];
    if (x->ndim == 0) a.xstride[0] = 0;
    a.i64 = index->dtype == EM_I64;
    a.gather = true;
    return run_index(s, a, out, xv, tv_of(index).p);
}

extern "C" int em_cuda_SCATTER_ADD(const em_kargs *k)
{
    cudaStream_t s;
    EM_TRY(begin(kdev(k), &s));
    em_tensor *out = k->out[0];
    const em_tensor *index = k->in[1], *src = k->in[2];
    int64_t n = em_numel(index);
    if (n == 0) return EM_OK;
    ScatterArgs a;
    memset(&a, 0, sizeof a);
    a.nd = index->ndim;
    a.dim = index->ndim ? (int)k->i[0] : 0;
    a.J = index->ndim ? index->shape[a.dim] : 1;
    a.tasks = n / a.J;
    for (int d = 0; d < index->ndim; d++) {
        a.ishape[d] = index->shape[d];
        a.istride[d] = index->stride[d];
        a.sstride[d] = src->stride[d];
        a.ostride[d] = out->stride[d];
    }
    if (index->ndim == 0 && out->ndim > 0) {   /* one element: dim 0 of out */
        a.nd = 1;
        a.ishape[0] = 1;
        a.ostride[0] = out->stride[0];
    }
    a.i64 = index->dtype == EM_I64;
    void *op = tv_of(out).p, *ip = tv_of(index).p;
    const void *sp = tv_of(src).p;
#define EM_SCATTER(T)                                                                                       \
    scatter_add_k<T><<<blocks_for(a.tasks), kThreads, 0, s>>>(a, (T *)op, (const T *)sp, ip);               \
    EM_CU_LAUNCHED();                                                                                       \
    return EM_OK;
    switch (out->dtype) {
    case EM_F32: EM_SCATTER(float)
    case EM_F64: EM_SCATTER(double)
    case EM_F16: EM_SCATTER(f16_t)
    case EM_BF16: EM_SCATTER(bf16_t)
    case EM_I64: EM_SCATTER(int64_t)
    case EM_I32: EM_SCATTER(int32_t)
    default: break;
    }
#undef EM_SCATTER
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: scatter_add does not take %s", em_dtype_name(out->dtype));
}
