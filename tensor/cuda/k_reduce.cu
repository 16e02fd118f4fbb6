/* ember — CUDA reductions: SUM MEAN VAR LOGSUMEXP NORM MAX MIN ARGMAX
 * (contract in tensor/ops.h; semantics of tensor/cpu/k_reduce.c).
 *
 * Plan: the input's kept dims (the output's order) and reduced dims are
 * merged where their strides allow; output o reduces R elements, indexed r
 * in row-major order of the reduced dims (for one reduced dim, r is the
 * position along it: the index MAX/MIN/ARGMAX return).
 *
 * Two kernels fold elements into (value, index) accumulators:
 *   block:  one block per (output, chunk) walks the chunk with all its
 *           threads, then a fixed shuffle tree combines the threads;
 *   thread: one thread per (output, chunk) walks the chunk alone, used when
 *           R is small or the outputs are contiguous and the reduced stride is
 *           not (sum over the leading dims: threads read adjacent outputs).
 * When there are few outputs, R is cut into chunks whose partials are then
 * combined in chunk order. Chunk counts and block sizes depend only on the
 * shapes, so results are bit-identical run to run (no atomics anywhere).
 * Float inputs accumulate in f64 (f16/bf16 load through f32); integer and
 * bool inputs use exact int64 (SUM wraps, as torch). Extremes: NaN wins and
 * the first index is kept on ties. VAR and LOGSUMEXP take two passes (mean,
 * then squared deviations; max, then sum of exp(x - max)).
 */
#include "tensor/cuda/cuda_common.cuh"

using namespace emcu;

namespace {

enum { K_SUM, K_SQDEV, K_SUMEXP, K_ABS, K_SQ, K_POW, K_MAXABS, K_MAX, K_MIN };

__host__ __device__ inline bool is_extreme(int kind) { return kind >= K_MAXABS; }

struct RPlan {
    int nk, nr;
    int64_t ksize[EM_MAX_DIMS], kstride[EM_MAX_DIMS];
    int64_t rsize[EM_MAX_DIMS], rstride[EM_MAX_DIMS];
    int64_t nout, R;
    bool outer;
};

RPlan plan_make(const Tv &in, int64_t mask)
{
    RPlan pl;
    memset(&pl, 0, sizeof pl);
    pl.nout = 1;
    pl.R = 1;
    for (int d = 0; d < in.nd; d++) {
        int64_t n = in.shape[d], s = in.stride[d];
        bool red = (mask >> d) & 1;
        if (red) pl.R *= n;
        else pl.nout *= n;
        if (n == 1) continue;
        int &cnt = red ? pl.nr : pl.nk;
        int64_t *sz = red ? pl.rsize : pl.ksize, *st = red ? pl.rstride : pl.kstride;
        if (cnt > 0 && st[cnt - 1] == s * n) {
            sz[cnt - 1] *= n;
            st[cnt - 1] = s;
        } else {
            sz[cnt] = n;
            st[cnt] = s;
            cnt++;
        }
    }
    pl.outer = pl.nk > 0 && pl.kstride[pl.nk - 1] == 1 && pl.ksize[pl.nk - 1] >= 8 &&
               !(pl.nr > 0 && pl.rstride[pl.nr - 1] == 1);
    return pl;
}

__device__ inline int64_t kept_offset(const RPlan &pl, int64_t o)
{
    int64_t off = 0;
    for (int d = pl.nk - 1; d >= 0; d--) {
        off += (o % pl.ksize[d]) * pl.kstride[d];
        o /= pl.ksize[d];
    }
    return off;
}

__device__ inline int64_t red_offset(const RPlan &pl, int64_t r)
{
    if (pl.nr == 1) return r * pl.rstride[0];
    int64_t off = 0;
    for (int d = pl.nr - 1; d >= 0; d--) {
        off += (r % pl.rsize[d]) * pl.rstride[d];
        r /= pl.rsize[d];
    }
    return off;
}

template <class A> struct Acc {
    A v;
    int64_t i;
};

__device__ inline bool nan_of(double v) { return v != v; }
__device__ inline bool nan_of(int64_t) { return false; }

template <class A> __device__ inline Acc<A> identity(int kind)
{
    Acc<A> a;
    a.i = INT64_MAX;
    if constexpr (std::is_same<A, double>::value) a.v = kind == K_MAX ? -INFINITY : kind == K_MIN ? INFINITY : 0.0;
    else a.v = kind == K_MAX ? INT64_MIN : kind == K_MIN ? INT64_MAX : 0;
    return a;
}

/* a and b fold disjoint element sets; for extremes NaN wins and ties keep the lower index. */
template <class A> __device__ inline Acc<A> merge(int kind, Acc<A> a, Acc<A> b)
{
    if (!is_extreme(kind)) {
        if constexpr (std::is_same<A, int64_t>::value) a.v = (int64_t)((uint64_t)a.v + (uint64_t)b.v);
        else a.v += b.v;
        return a;
    }
    bool an = nan_of(a.v), bn = nan_of(b.v);
    if (an || bn) return (an && bn) ? (b.i < a.i ? b : a) : (an ? a : b);
    bool better = kind == K_MIN ? b.v < a.v : b.v > a.v;
    return better || (b.v == a.v && b.i < a.i) ? b : a;
}

struct Spec {
    int kind;
    double pw;          /* K_POW exponent */
    const Acc<double> *prm_src;   /* pass-1 results, or NULL */
    int prm_mode;       /* 1: mean = v / R; 2: shift = v if finite else 0 */
    double R;
};

__device__ inline double prm_of(const Spec &sp, int64_t o)
{
    if (!sp.prm_src) return 0.0;
    double v = sp.prm_src[o].v;
    return sp.prm_mode == 1 ? v / sp.R : (isfinite(v) ? v : 0.0);
}

template <class T, class A> __device__ inline A elem(const Spec &sp, T raw, double prm)
{
    if constexpr (std::is_same<A, int64_t>::value) {
        if constexpr (std::is_same<T, uint8_t>::value) return raw != 0;
        else return (int64_t)raw;
    } else {
        double x = to_double(raw);
        switch (sp.kind) {
        case K_SQDEV: return (x - prm) * (x - prm);
        case K_SUMEXP: return exp(x - prm);
        case K_ABS: case K_MAXABS: return fabs(x);
        case K_SQ: return x * x;
        case K_POW: return pow(fabs(x), sp.pw);
        default: return x;
        }
    }
}

template <class A> __device__ inline Acc<A> shfl_down(Acc<A> a, int o)
{
    Acc<A> b;
    b.v = __shfl_down_sync(0xffffffffu, a.v, o);
    b.i = __shfl_down_sync(0xffffffffu, a.i, o);
    return b;
}

/* Thread 0 gets the merge of the block's accumulators (a fixed tree). */
template <class A> __device__ inline Acc<A> block_merge(int kind, Acc<A> a, Acc<A> *shm)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = merge(kind, a, shfl_down(a, o));
    __syncthreads();
    if (lane == 0) shm[w] = a;
    __syncthreads();
    if (w == 0) {
        a = lane < nw ? shm[lane] : identity<A>(kind);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a = merge(kind, a, shfl_down(a, o));
    }
    return a;
}

template <class T, class A>
__global__ void reduce_block(const T *base, RPlan pl, Spec sp, int64_t nchunks, Acc<A> *part)
{
    __shared__ Acc<A> shm[32];
    int64_t total = pl.nout * nchunks;
    for (int64_t w = blockIdx.x; w < total; w += gridDim.x) {
        int64_t o = w / nchunks, c = w % nchunks;
        const T *p = base + kept_offset(pl, o);
        int64_t r0 = pl.R * c / nchunks, r1 = pl.R * (c + 1) / nchunks;
        double prm = prm_of(sp, o);
        Acc<A> a = identity<A>(sp.kind);
        for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
            a = merge(sp.kind, a, Acc<A>{elem<T, A>(sp, p[red_offset(pl, r)], prm), r});
        a = block_merge(sp.kind, a, shm);
        if (threadIdx.x == 0) part[w] = a;
    }
}

template <class T, class A>
__global__ void reduce_thread(const T *base, RPlan pl, Spec sp, int64_t nchunks, Acc<A> *part)
{
    int64_t total = pl.nout * nchunks;
    for (int64_t w = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; w < total; w += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = w % pl.nout, c = w / pl.nout;   /* adjacent threads: adjacent outputs */
        const T *p = base + kept_offset(pl, o);
        int64_t r0 = pl.R * c / nchunks, r1 = pl.R * (c + 1) / nchunks;
        double prm = prm_of(sp, o);
        Acc<A> a = identity<A>(sp.kind);
        for (int64_t r = r0; r < r1; r++) a = merge(sp.kind, a, Acc<A>{elem<T, A>(sp, p[red_offset(pl, r)], prm), r});
        part[o * nchunks + c] = a;
    }
}

template <class A> __global__ void combine_chunks(int kind, int64_t nout, int64_t nchunks, const Acc<A> *part, Acc<A> *res)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < nout; o += (int64_t)gridDim.x * blockDim.x) {
        Acc<A> a = part[o * nchunks];
        for (int64_t c = 1; c < nchunks; c++) a = merge(kind, a, part[o * nchunks + c]);
        res[o] = a;
    }
}

/* One pass: res[o] = the fold of output o's elements. */
template <class T, class A>
em_status pass(cudaStream_t s, int dev, const T *base, const RPlan &pl, const Spec &sp, Acc<A> *res)
{
    bool per_thread = pl.outer || pl.R <= 32;
    int64_t nchunks = 1;
    if (per_thread && pl.nout < 65536) {
        int64_t want = (65536 + pl.nout - 1) / pl.nout, most = pl.R / 256 > 1 ? pl.R / 256 : 1;
        nchunks = want < most ? want : most;
    } else if (!per_thread && pl.nout < 512) {
        int64_t want = (1024 + pl.nout - 1) / pl.nout, most = pl.R / 4096 > 1 ? pl.R / 4096 : 1;
        nchunks = want < most ? want : most;
    }
    Scratch part;
    Acc<A> *dst = res;
    if (nchunks > 1) {
        EM_TRY(part.get(sizeof(Acc<A>) * (size_t)(pl.nout * nchunks), dev));
        dst = part.as<Acc<A>>();
    }
    int64_t work = pl.nout * nchunks;
    if (per_thread) reduce_thread<T, A><<<blocks_for(work), kThreads, 0, s>>>(base, pl, sp, nchunks, dst);
    else reduce_block<T, A><<<(unsigned)(work < 65536 ? work : 65536), kThreads, 0, s>>>(base, pl, sp, nchunks, dst);
    EM_CU_LAUNCHED();
    if (nchunks > 1) {
        combine_chunks<A><<<blocks_for(pl.nout), kThreads, 0, s>>>(sp.kind, pl.nout, nchunks, dst, res);
        EM_CU_LAUNCHED();
    }
    return EM_OK;
}

/* ---- finishing: results -> outputs ------------------------------------------------------- */
struct Fin {
    int op;
    double R, corr, p;
    int norm_kind;
};

template <class O, class A>
__global__ void finish(Fin f, int64_t nout, const Acc<A> *a, const Acc<A> *b, O *out, int64_t *idx)
{
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < nout; o += (int64_t)gridDim.x * blockDim.x) {
        if constexpr (std::is_same<A, int64_t>::value) {
            int64_t v = a[o].v;
            if (f.op == EM_OP_ARGMAX) {
                ((int64_t *)out)[o] = a[o].i;
                continue;
            }
            if constexpr (std::is_same<O, uint8_t>::value) out[o] = v != 0;
            else if constexpr (std::is_integral<O>::value) out[o] = (O)v;
            else out[o] = from_double<O>((double)v);
            if (idx) idx[o] = a[o].i;
        } else {
            double v = a[o].v, r = v;
            switch (f.op) {
            case EM_OP_MEAN: r = v / f.R; break;
            case EM_OP_VAR: {
                double dof = f.R - f.corr;
                r = b[o].v / (dof < 0 ? 0.0 : dof);
                break;
            }
            case EM_OP_LOGSUMEXP: r = isfinite(v) ? v + log(b[o].v) : v; break;
            case EM_OP_NORM: r = f.norm_kind == K_SQ ? sqrt(v) : f.norm_kind == K_POW ? pow(v, 1.0 / f.p) : v; break;
            case EM_OP_ARGMAX: ((int64_t *)out)[o] = a[o].i; continue;
            default: break;
            }
            out[o] = from_double<O>(r);
            if (idx) idx[o] = a[o].i;
        }
    }
}

template <class T, class A> em_status reduce_t(const em_kargs *k)
{
    int dev = kdev(k);
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    Tv in = tv_of(k->in[0]);
    RPlan pl = plan_make(in, k->i[0]);
    if (pl.nout == 0) return EM_OK;
    Fin f = {k->op, (double)pl.R, k->f[0], k->f[0], K_SUM};
    Spec sp = {K_SUM, 0.0, nullptr, 0, (double)pl.R};
    bool two = false;
    switch (k->op) {
    case EM_OP_VAR: two = true; break;
    case EM_OP_LOGSUMEXP: sp.kind = K_MAX; two = true; break;
    case EM_OP_NORM: {
        double p = k->f[0];
        sp.kind = isinf(p) ? K_MAXABS : p == 1 ? K_ABS : p == 2 ? K_SQ : K_POW;
        sp.pw = p;
        f.norm_kind = sp.kind;
        break;
    }
    case EM_OP_MAX: case EM_OP_ARGMAX: sp.kind = K_MAX; break;
    case EM_OP_MIN: sp.kind = K_MIN; break;
    default: break;
    }
    Scratch acc;
    EM_TRY(acc.get(sizeof(Acc<A>) * (size_t)pl.nout * (two ? 2 : 1), dev));
    Acc<A> *a = acc.as<Acc<A>>(), *b = two ? a + pl.nout : nullptr;
    const T *base = (const T *)in.p;
    EM_TRY(pass<T, A>(s, dev, base, pl, sp, a));
    if (two) {
        if constexpr (std::is_same<A, double>::value) {
            Spec sp2 = {k->op == EM_OP_VAR ? K_SQDEV : K_SUMEXP, 0.0, a, k->op == EM_OP_VAR ? 1 : 2, (double)pl.R};
            EM_TRY(pass<T, A>(s, dev, base, pl, sp2, b));
        }
    }
    Tv out = tv_of(k->out[0]);
    int64_t *idx = k->op != EM_OP_ARGMAX && k->out[1] ? (int64_t *)tv_of(k->out[1]).p : nullptr;
#define EM_FINISH(O)                                                                                      \
    finish<O, A><<<blocks_for(pl.nout), kThreads, 0, s>>>(f, pl.nout, a, b, (O *)out.p, idx);             \
    EM_CU_LAUNCHED();                                                                                     \
    return EM_OK;
    EM_DTYPE_CASES(out.dt, EM_FINISH)
#undef EM_FINISH
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s: output dtype %s", em_op_table[k->op].name, em_dtype_name(out.dt));
}

em_status reduce(const em_kargs *k)
{
    em_dtype dt = k->in[0]->dtype;
    switch (dt) {
    case EM_F32: return reduce_t<float, double>(k);
    case EM_F64: return reduce_t<double, double>(k);
    case EM_F16: return reduce_t<f16_t, double>(k);
    case EM_BF16: return reduce_t<bf16_t, double>(k);
    default: break;
    }
    bool int_op = k->op == EM_OP_SUM || k->op == EM_OP_MAX || k->op == EM_OP_MIN || k->op == EM_OP_ARGMAX;
    if (int_op) {
        switch (dt) {
        case EM_I64: return reduce_t<int64_t, int64_t>(k);
        case EM_I32: return reduce_t<int32_t, int64_t>(k);
        case EM_BOOL: return reduce_t<uint8_t, int64_t>(k);
        default: break;
        }
    }
    return em__fail(EM_ERR_UNSUPPORTED, "cuda: %s does not take %s", em_op_table[k->op].name, em_dtype_name(dt));
}

}   // namespace

extern "C" int em_cuda_SUM(const em_kargs *k) { return reduce(k); }
extern "C" int em_cuda_MEAN(const em_kargs *k) { return reduce(k); }
extern "C" int em_cuda_VAR(const em_kargs *k) { return reduce(k); }
extern "C" int em_cuda_LOGSUMEXP(const em_kargs *k) { return reduce(k); }
extern "C" int em_cuda_NORM(const em_kargs *k) { return reduce(k); }
extern "C" int em_cuda_MAX(const em_kargs *k) { return reduce(k); }
extern "C" int em_cuda_MIN(const em_kargs *k) { return reduce(k); }
extern "C" int em_cuda_ARGMAX(const em_kargs *k) { return reduce(k); }
