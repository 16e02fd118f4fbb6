/* ember — the CUDA elementwise launchers shared by the kernel files: a
 * grid-stride kernel over an Iter (any strides, broadcasting, merged dims;
 * one merged dim needs no division), and 4-wide vectorized kernels for
 * contiguous unary and binary ops (an operand may also be one broadcast
 * element). Functors are called with the element offsets of every operand.
 */
#ifndef EMBER_CUDA_K_ELEMENTWISE_CUH
#define EMBER_CUDA_K_ELEMENTWISE_CUH

#include "tensor/cuda/cuda_common.cuh"

namespace emcu {

template <int N, class F> __global__ void iter_kernel(Iter<N> it, int64_t n, F f)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    int64_t off[N];
    if (it.nd <= 1) {
        for (; i < n; i += step) {
#pragma unroll
            for (int k = 0; k < N; k++) off[k] = it.nd ? i * it.stride[k][0] : 0;
            f(off);
        }
    } else if (n <= 0x7fffffff) {
        for (; i < n; i += step) {
            iter_offsets<uint32_t, N>(it, (uint32_t)i, off);
            f(off);
        }
    } else {
        for (; i < n; i += step) {
            iter_offsets<int64_t, N>(it, i, off);
            f(off);
        }
    }
}

/* Runs f over every element of it (n elements) on stream s. */
template <int N, class F> static inline em_status launch_iter(cudaStream_t s, const Iter<N> &it, int64_t n, F f)
{
    if (n <= 0) return EM_OK;
    iter_kernel<N, F><<<blocks_for(n, 4), kThreads, 0, s>>>(it, n, f);
    EM_CU_LAUNCHED();
    return EM_OK;
}

template <class T> struct alignas(4 * sizeof(T)) Vec4 { T v[4]; };

static inline bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* o[i] = op(a[i]) over n contiguous elements; a_s: a is one element. */
template <class T, class O, class Op>
__global__ void unary_contig(O *o, const T *a, int64_t n, bool a_s, bool vec, Op op)
{
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (vec) {
        int64_t ng = n / 4;
        for (int64_t g = tid; g < ng; g += step) {
            Vec4<T> va;
            if (a_s) {
#pragma unroll
                for (int j = 0; j < 4; j++) va.v[j] = a[0];
            } else {
                va = ((const Vec4<T> *)a)[g];
            }
            Vec4<O> vo;
#pragma unroll
            for (int j = 0; j < 4; j++) vo.v[j] = op(va.v[j]);
            ((Vec4<O> *)o)[g] = vo;
        }
        done = ng * 4;
    }
    for (int64_t i = done + tid; i < n; i += step) o[i] = op(a[a_s ? 0 : i]);
}

/* o[i] = op(a[i], b[i]) over n contiguous elements; a_s/b_s: one element. */
template <class T, class O, class Op>
__global__ void binary_contig(O *o, const T *a, const T *b, int64_t n, bool a_s, bool b_s, bool vec, Op op)
{
    int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (vec) {
        int64_t ng = n / 4;
        for (int64_t g = tid; g < ng; g += step) {
            Vec4<T> va, vb;
            if (a_s) {
#pragma unroll
                for (int j = 0; j < 4; j++) va.v[j] = a[0];
            } else {
                va = ((const Vec4<T> *)a)[g];
            }
            if (b_s) {
#pragma unroll
                for (int j = 0; j < 4; j++) vb.v[j] = b[0];
            } else {
                vb = ((const Vec4<T> *)b)[g];
            }
            Vec4<O> vo;
#pragma unroll
            for (int j = 0; j < 4; j++) vo.v[j] = op(va.v[j], vb.v[j]);
            ((Vec4<O> *)o)[g] = vo;
        }
        done = ng * 4;
    }
    for (int64_t i = done + tid; i < n; i += step) o[i] = op(a[a_s ? 0 : i], b[b_s ? 0 : i]);
}

template <class T, class O, class Op> struct UnaryF {
    O *o;
    const T *a;
    Op op;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = op(a[off[1]]); }
};
template <class T, class O, class Op> struct BinaryF {
    O *o;
    const T *a, *b;
    Op op;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = op(a[off[1]], b[off[2]]); }
};

/* out = op(in) elementwise, in broadcast to out's shape. */
template <class T, class O, class Op> static em_status run_unary(cudaStream_t s, const Tv &out, const Tv &in, Op op)
{
    const Tv *ops[2] = {&out, &in};
    Iter<2> it = iter_make<2>(ops);
    int64_t n = tv_numel(out);
    if (n == 0) return EM_OK;
    bool as = iter_scalar(it, 1);
    if (iter_contig(it, 0) && (iter_contig(it, 1) || as)) {
        bool vec = aligned(out.p, sizeof(Vec4<O>)) && (as || aligned(in.p, sizeof(Vec4<T>)));
        unary_contig<T, O, Op><<<blocks_for(n, 4), kThreads, 0, s>>>((O *)out.p, (const T *)in.p, n, as, vec, op);
        EM_CU_LAUNCHED();
        return EM_OK;
    }
    return launch_iter(s, it, n, UnaryF<T, O, Op>{(O *)out.p, (const T *)in.p, op});
}

/* out = op(a, b) elementwise, a and b broadcast to out's shape. */
template <class T, class O, class Op>
static em_status run_binary(cudaStream_t s, const Tv &out, const Tv &a, const Tv &b, Op op)
{
    const Tv *ops[3] = {&out, &a, &b};
    Iter<3> it = iter_make<3>(ops);
    int64_t n = tv_numel(out);
    if (n == 0) return EM_OK;
    bool as = iter_scalar(it, 1), bs = iter_scalar(it, 2);
    if (iter_contig(it, 0) && (iter_contig(it, 1) || as) && (iter_contig(it, 2) || bs)) {
        bool vec = aligned(out.p, sizeof(Vec4<O>)) && (as || aligned(a.p, sizeof(Vec4<T>))) &&
                   (bs || aligned(b.p, sizeof(Vec4<T>)));
        binary_contig<T, O, Op><<<blocks_for(n, 4), kThreads, 0, s>>>((O *)out.p, (const T *)a.p, (const T *)b.p, n, as,
                                                                       bs, vec, op);
        EM_CU_LAUNCHED();
        return EM_OK;
    }
    return launch_iter(s, it, n, BinaryF<T, O, Op>{(O *)out.p, (const T *)a.p, (const T *)b.p, op});
}

}   // namespace emcu

#endif
