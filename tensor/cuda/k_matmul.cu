/* ember — CUDA MATMUL through cuBLAS (contract in tensor/ops.h: in[0] = A
 * [B..,M,K], in[1] = B [B..,K,N] with out's batch dims, stride 0 where
 * broadcast; out[0] = C [B..,M,N] contiguous; one float dtype).
 *
 * cuBLAS is column-major: the row-major C = A B is computed as the
 * column-major C^T = B^T A^T, so each operand is passed as it lies in memory,
 * with a transpose flag when its column (not its row) is contiguous: a
 * transposed view is never copied. Batch dims that merge into one stride per
 * operand run as one strided-batched GEMM (a broadcast operand has stride
 * 0); A [B..,M,K] times a B shared by every batch, with A's rows evenly
 * spaced, folds into one [B*M, K] GEMM. Other batch layouts loop over the
 * outer batch dims.
 *
 * Precision: f32 computes in f32, or with TF32 tensor cores when
 * em_set_float32_matmul_precision("high") allows it; f16 and bf16 compute
 * with f32 accumulation (reduced-precision split-K reductions are disallowed);
 * f64 in f64. One cuBLAS handle per device, on the device's compute stream,
 * with a 32 MiB workspace from the caching allocator (so cuBLAS never calls
 * cudaMalloc in a steady loop). cuBLAS is deterministic run to run on one GPU.
 */
#include "tensor/cuda/k_elementwise.cuh"

#include <cublas_v2.h>
#include <limits.h>
#include <mutex>

using namespace emcu;

#define EM_BLAS(...)                                                                                     \
    do {                                                                                                 \
        cublasStatus_t em_blas_s_ = (__VA_ARGS__);                                                       \
        if (em_blas_s_ != CUBLAS_STATUS_SUCCESS)                                                         \
            return em__fail(EM_ERR_DEVICE, "cuBLAS: %s failed: %s (%s:%d)", #__VA_ARGS__,                \
                            cublasGetStatusString(em_blas_s_), __FILE__, __LINE__);                      \
    } while (0)

namespace {

constexpr size_t kWorkspace = 32u << 20;

struct Blas {
    std::mutex mu;   /* one GEMM at a time per handle */
    cublasHandle_t h = nullptr;
};
Blas blas[EM_CUDA_MAX_DEVICES];

/* The device's handle (created on first use); call with blas[dev].mu held. */
em_status handle_of(int dev, cudaStream_t s, cublasHandle_t *out)
{
    Blas &b = blas[dev];
    if (!b.h) {
        cublasHandle_t h;
        EM_BLAS(cublasCreate(&h));
        void *ws = em__cuda_alloc(kWorkspace, dev);   /* kept for the life of the process */
        cublasStatus_t st = cublasSetStream(h, s);
        if (st == CUBLAS_STATUS_SUCCESS && ws) st = cublasSetWorkspace(h, ws, kWorkspace);
        if (st == CUBLAS_STATUS_SUCCESS)
            st = cublasSetMathMode(h, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
        if (st != CUBLAS_STATUS_SUCCESS) {
            (void)cublasDestroy(h);
            if (ws) em__cuda_free(ws, kWorkspace, dev);
            EM_BLAS(st);
        }
        b.h = h;
    }
    *out = b.h;
    return EM_OK;
}

/* Whether a rows x cols matrix with strides (s0, s1) is a row-major matrix
 * (trans = false, leading dim s0) or the transpose of one (trans = true,
 * leading dim s1) that cuBLAS accepts; size-1 dims may carry any stride.
 * Same rule as the CPU's (tensor/cpu/k_matmul.c). */
bool gemm_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld)
{
    int64_t minr = rows > 1 ? rows : 1, minc = cols > 1 ? cols : 1;
    if (cols == 1 || s1 == 1) {
        int64_t l = rows <= 1 ? minc : s0;
        if (l >= minc && l <= INT_MAX) {
            *trans = false;
            *ld = l;
            return true;
        }
    }
    if (rows == 1 || s0 == 1) {
        int64_t l = cols <= 1 ? minr : s1;
        if (l >= minr && l <= INT_MAX) {
            *trans = true;
            *ld = l;
            return true;
        }
    }
    return false;
}

struct Operand {
    const char *p;
    int64_t rows, cols;
    bool trans;
    int64_t ld;
    int64_t bstride[EM_MAX_DIMS];   /* batch strides, aligned with C's batch dims */
};

template <class B> struct MoveF {
    B *o;
    const B *a;
    __device__ void operator()(const int64_t *off) const { o[off[0]] = a[off[1]]; }
};

/* An operand cuBLAS can take: the tensor itself when its layout allows, else
 * a contiguous copy of it (every batch index materialized) in scratch. */
em_status operand_of(cudaStream_t s, int dev, const em_tensor *t, int nb, Scratch &scratch, Operand *op)
{
    Tv v = tv_of(t);
    op->p = v.p;
    op->rows = v.shape[nb];
    op->cols = v.shape[nb + 1];
    for (int d = 0; d < nb; d++) op->bstride[d] = v.stride[d];
    if (gemm_layout(op->rows, op->cols, v.stride[nb], v.stride[nb + 1], &op->trans, &op->ld)) return EM_OK;
    size_t es = em_dtype_size(t->dtype);
    int64_t n = tv_numel(v);
    EM_TRY(scratch.get((size_t)n * es, dev));
    Tv c = v;
    c.p = scratch.as<char>();
    int64_t st = 1;
    for (int d = v.nd - 1; d >= 0; d--) {
        c.stride[d] = st;
        st *= v.shape[d];
    }
    const Tv *ops[2] = {&c, &v};
    Iter<2> it = iter_make<2>(ops);
#define EM_PACK(S)                                                                   \
    {                                                                                \
        using B = typename Bits<S>::type;                                            \
        EM_TRY(launch_iter(s, it, n, MoveF<B>{(B *)c.p, (const B *)v.p}));          \
        break;                                                                       \
    }
    EM_SIZE_CASES(es, EM_PACK)
#undef EM_PACK
    op->p = c.p;
    op->trans = false;
    op->ld = op->cols > 1 ? op->cols : 1;
    for (int d = 0; d < nb; d++) op->bstride[d] = c.stride[d];
    return EM_OK;
}

struct Types {
    cudaDataType ab, c;
    cublasComputeType_t compute;
    bool dbl;
};

bool types_of(em_dtype dt, Types *t)
{
    switch (dt) {
    case EM_F32:
        *t = {CUDA_R_32F, CUDA_R_32F, em__matmul_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, false};
        return true;
    case EM_F64: *t = {CUDA_R_64F, CUDA_R_64F, CUBLAS_COMPUTE_64F, true}; return true;
    case EM_F16: *t = {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, false}; return true;
    case EM_BF16: *t = {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, false}; return true;
    default: return false;
    }
}

em_status matmul(const em_kargs *k)
{
    int dev = kdev(k);
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    em_tensor *out = k->out[0];
    Types ty;
    /* i[0] with bf16/f16 operands into an f32 C (a weight gradient under autocast) */
    bool mixed = k->i[0] && out->dtype == EM_F32 && k->in[0]->dtype == k->in[1]->dtype &&
                 (k->in[0]->dtype == EM_BF16 || k->in[0]->dtype == EM_F16);
    if (mixed && types_of(k->in[0]->dtype, &ty)) ty.c = CUDA_R_32F;
    else if (!types_of(out->dtype, &ty) || k->in[0]->dtype != out->dtype || k->in[1]->dtype != out->dtype)
        return em__fail(EM_ERR_UNSUPPORTED, "cuda: matmul does not take %s x %s -> %s", em_dtype_name(k->in[0]->dtype),
                        em_dtype_name(k->in[1]->dtype), em_dtype_name(out->dtype));
    const int nd = out->ndim, nb = nd - 2;
    const int64_t M = out->shape[nd - 2], N = out->shape[nd - 1], K = k->in[0]->shape[nd - 1];
    int64_t total = em_numel(out);
    if (total == 0) return EM_OK;
    size_t es = em_dtype_size(out->dtype), ies = em_dtype_size(k->in[0]->dtype);   /* C's and A/B's element sizes */
    char *C = (char *)tv_of(out).p;
    bool into = k->i[0] != 0;   /* C += A B: beta 1 */
    if (into && ((ty.c != CUDA_R_32F && ty.c != CUDA_R_64F) || !em_is_contiguous(out)))
        return em__fail(EM_ERR_UNSUPPORTED, "cuda: matmul adds into f32/f64 output only, got %s", em_dtype_name(out->dtype));
    if (K == 0) {
        if (!into) EM_CU(cudaMemsetAsync(C, 0, (size_t)total * es, s));
        return EM_OK;
    }
    Scratch pa, pb;
    Operand A, B;
    EM_TRY(operand_of(s, dev, k->in[0], nb, pa, &A));
    EM_TRY(operand_of(s, dev, k->in[1], nb, pb, &B));

    /* Batch dims of size > 1, merged where A, B and C all allow. */
    int64_t size[EM_MAX_DIMS], sa[EM_MAX_DIMS], sb[EM_MAX_DIMS], sc[EM_MAX_DIMS];
    int n = 0;
    int64_t cst = M * N, cstr[EM_MAX_DIMS];
    for (int d = nb - 1; d >= 0; d--) {
        cstr[d] = cst;
        cst *= out->shape[d];
    }
    for (int d = 0; d < nb; d++) {
        int64_t z = out->shape[d];
        if (z == 1) continue;
        if (n > 0 && sa[n - 1] == A.bstride[d] * z && sb[n - 1] == B.bstride[d] * z && sc[n - 1] == cstr[d] * z) {
            size[n - 1] *= z;
            sa[n - 1] = A.bstride[d];
            sb[n - 1] = B.bstride[d];
            sc[n - 1] = cstr[d];
        } else {
            size[n] = z;
            sa[n] = A.bstride[d];
            sb[n] = B.bstride[d];
            sc[n] = cstr[d];
            n++;
        }
    }
    int64_t m = M, batch = n ? size[n - 1] : 1;
    int64_t strideA = n ? sa[n - 1] : 0, strideB = n ? sb[n - 1] : 0, strideC = n ? sc[n - 1] : 0;
    if (n == 1 && strideB == 0 && !A.trans && strideA == M * A.ld && M * batch <= INT_MAX) {
        m = M * batch;   /* fold the batch into A's rows */
        batch = 1;
    }
    int64_t outer = 1;
    for (int i = 0; i + 1 < n; i++) outer *= size[i];

    const float one_f = 1.0f, zero_f = 0.0f;
    const double one_d = 1.0, zero_d = 0.0;
    const void *alpha = ty.dbl ? (const void *)&one_d : (const void *)&one_f;
    const void *beta = ty.dbl ? (into ? (const void *)&one_d : (const void *)&zero_d)
                              : (into ? (const void *)&one_f : (const void *)&zero_f);
    std::lock_guard<std::mutex> lock(blas[dev].mu);
    cublasHandle_t h;
    EM_TRY(handle_of(dev, s, &h));
    for (int64_t o = 0; o < outer; o++) {
        int64_t q = o, oa = 0, ob = 0, oc = 0;
        for (int i = n - 2; i >= 0; i--) {
            int64_t j = q % size[i];
            q /= size[i];
            oa += j * sa[i];
            ob += j * sb[i];
            oc += j * sc[i];
        }
        EM_BLAS(cublasGemmStridedBatchedEx_64(h, B.trans ? CUBLAS_OP_T : CUBLAS_OP_N, A.trans ? CUBLAS_OP_T : CUBLAS_OP_N,
                                              N, m, K, alpha, B.p + ob * (int64_t)ies, ty.ab, B.ld, strideB,
                                              A.p + oa * (int64_t)ies, ty.ab, A.ld, strideA, beta, C + oc * (int64_t)es,
                                              ty.c, N, strideC, batch, ty.compute, CUBLAS_GEMM_DEFAULT));
    }
    return EM_OK;
}

}   // namespace

extern "C" int em_cuda_MATMUL(const em_kargs *k) { return matmul(k); }
