/* ember — a GEMM with a fused bias epilogue through cuBLASLt (em__cuda_linear,
 * contract in cuda_common.cuh; LINEAR's first choice): out = a @ b + bias, the
 * bias (one per output column) added by the GEMM kernel as it stores the
 * tile, which saves the separate add pass over out that matmul + add costs.
 *
 * Layout as k_matmul.cu: row-major C = A B is the column-major C^T = B^T A^T;
 * each operand is passed as it lies in memory with a transpose flag when its
 * column (not its row) is contiguous, so nn's linear, which multiplies by a
 * transposed view of its weight, copies nothing. f32 (TF32 when
 * em_set_float32_matmul_precision allows), bf16 and f16 with f32 accumulation;
 * split-K reductions only in the compute type. Anything else (f64, a layout
 * cuBLASLt cannot take, no algorithm from the heuristic) returns
 * EM_ERR_UNSUPPORTED without touching out, and the caller keeps the cuBLAS
 * matmul + add path.
 *
 * One cuBLASLt handle per device (created on first use, under a mutex); the
 * workspace comes from the caching allocator per call, in stream order.
 */
#include "tensor/cuda/cuda_common.cuh"

#include <cublasLt.h>
#include <limits.h>
#include <mutex>

using namespace emcu;

#define EM_LT(...)                                                                                       \
    do {                                                                                                 \
        cublasStatus_t em_lt_s_ = (__VA_ARGS__);                                                         \
        if (em_lt_s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return em__fail(EM_ERR_DEVICE, "cuBLASLt: %s failed: %s (%s:%d)", #__VA_ARGS__,              \
                            cublasGetStatusString(em_lt_s_), __FILE__, __LINE__);                        \
    } while (0)

namespace {

constexpr size_t kLtWorkspace = 32u << 20;

struct Lt {
    std::mutex mu;
    cublasLtHandle_t h = nullptr;
};
Lt lts[EM_CUDA_MAX_DEVICES];

/* Descriptors, destroyed at scope exit whatever happens. */
struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Descs()
    {
        if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
        if (d) (void)cublasLtMatrixLayoutDestroy(d);
        if (b) (void)cublasLtMatrixLayoutDestroy(b);
        if (a) (void)cublasLtMatrixLayoutDestroy(a);
        if (op) (void)cublasLtMatmulDescDestroy(op);
    }
};

/* A rows x cols row-major operand with strides (s0, s1) as cuBLASLt's
 * column-major matrix: trans = false: the [cols, rows] matrix of leading dim
 * s0; true: its transpose, [rows, cols] of leading dim s1. */
bool lt_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld)
{
    int64_t minr = rows > 1 ? rows : 1, minc = cols > 1 ? cols : 1;
    if (cols == 1 || s1 == 1) {
        int64_t l = rows <= 1 ? minc : s0;
        if (l >= minc && l <= INT_MAX) return *trans = false, *ld = l, true;
    }
    if (rows == 1 || s0 == 1) {
        int64_t l = cols <= 1 ? minr : s1;
        if (l >= minr && l <= INT_MAX) return *trans = true, *ld = l, true;
    }
    return false;
}

/* Largest power of two (<= 256) dividing the address: the alignment hint the heuristic needs. */
uint32_t align_of(const void *p)
{
    uint32_t a = 256;
    while (a > 1 && ((uintptr_t)p & (a - 1))) a >>= 1;
    return a;
}

em_status lt_linear(em_tensor *out, em_tensor *a, em_tensor *b, em_tensor *bias)
{
    const em_dtype dt = out->dtype;
    cudaDataType ty;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    switch (dt) {
    case EM_F32:
        ty = CUDA_R_32F;
        if (em__matmul_allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
        break;
    case EM_BF16: ty = CUDA_R_16BF; break;
    case EM_F16: ty = CUDA_R_16F; break;
    default: return em__fail(EM_ERR_UNSUPPORTED, "cuda linear: no epilogue GEMM for %s", em_dtype_name(dt));
    }
    if (a->ndim != 2 || b->ndim != 2 || out->ndim != 2 || a->dtype != dt || b->dtype != dt ||
        a->shape[1] != b->shape[0] || out->shape[0] != a->shape[0] || out->shape[1] != b->shape[1] ||
        !em_is_contiguous(out) || (bias && (bias->ndim != 1 || bias->shape[0] != out->shape[1] || bias->dtype != dt ||
                                            !em_is_contiguous(bias))))
        return em__fail(EM_ERR_UNSUPPORTED, "cuda linear: unsupported operands %s x %s -> %s", em__shape_str(a),
                        em__shape_str(b), em__shape_str(out));
    const int dev = out->device.index;
    const int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1];
    if (M == 0 || N == 0 || K == 0 || N > INT_MAX || M > INT_MAX)
        return em__fail(EM_ERR_UNSUPPORTED, "cuda linear: empty or oversized GEMM [%lld,%lld]x[%lld,%lld]",
                        (long long)M, (long long)K, (long long)K, (long long)N);
    bool ta, tb;
    int64_t lda, ldb;
    if (!lt_layout(M, K, a->stride[0], a->stride[1], &ta, &lda) || !lt_layout(K, N, b->stride[0], b->stride[1], &tb, &ldb))
        return em__fail(EM_ERR_UNSUPPORTED, "cuda linear: operand strides cuBLASLt cannot take");
    cudaStream_t s;
    EM_TRY(begin(dev, &s));
    const void *pa = em_data_ptr(a), *pb = em_data_ptr(b);
    void *pd = em_data_ptr(out);
    const void *pbias = bias ? em_data_ptr(bias) : nullptr;
    if (pbias && align_of(pbias) < 16) return em__fail(EM_ERR_UNSUPPORTED, "cuda linear: bias not 16-byte aligned");

    std::lock_guard<std::mutex> lock(lts[dev].mu);
    if (!lts[dev].h) EM_LT(cublasLtCreate(&lts[dev].h));
    cublasLtHandle_t h = lts[dev].h;
    Descs D;
    /* column-major D^T [N, M] = op(B) [N, K] * op(A) [K, M]: Lt's "A" is our b, its "B" our a */
    EM_LT(cublasLtMatmulDescCreate(&D.op, compute, CUDA_R_32F));
    cublasOperation_t opA = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    EM_LT(cublasLtMatmulDescSetAttribute(D.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA));
    EM_LT(cublasLtMatmulDescSetAttribute(D.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB));
    cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    EM_LT(cublasLtMatmulDescSetAttribute(D.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) {
        int32_t bt = (int32_t)ty;
        EM_LT(cublasLtMatmulDescSetAttribute(D.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pbias, sizeof pbias));
        EM_LT(cublasLtMatmulDescSetAttribute(D.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    /* stored shapes (before op): b is [N, K] (ld ldb) or, transposed, [K, N]; a likewise */
    EM_LT(cublasLtMatrixLayoutCreate(&D.a, ty, tb ? K : N, tb ? N : K, ldb));
    EM_LT(cublasLtMatrixLayoutCreate(&D.b, ty, ta ? M : K, ta ? K : M, lda));
    EM_LT(cublasLtMatrixLayoutCreate(&D.d, ty, N, M, N));
    EM_LT(cublasLtMatmulPreferenceCreate(&D.pref));
    size_t ws = kLtWorkspace;
    uint32_t redmask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;   /* no split-K reduction in bf16/f16 */
    uint32_t al_a = align_of(pb), al_b = align_of(pa), al_d = align_of(pd);
    EM_LT(cublasLtMatmulPreferenceSetAttribute(D.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    EM_LT(cublasLtMatmulPreferenceSetAttribute(D.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &redmask,
                                               sizeof redmask));
    EM_LT(cublasLtMatmulPreferenceSetAttribute(D.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    EM_LT(cublasLtMatmulPreferenceSetAttribute(D.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    EM_LT(cublasLtMatmulPreferenceSetAttribute(D.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    EM_LT(cublasLtMatmulPreferenceSetAttribute(D.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    cublasLtMatmulHeuristicResult_t res = {};
    int nres = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, D.op, D.a, D.b, D.d, D.d, D.pref, 1, &res, &nres);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || (hs == CUBLAS_STATUS_SUCCESS && nres == 0))
        return em__fail(EM_ERR_UNSUPPORTED, "cuda linear: cuBLASLt has no algorithm for [%lld,%lld]x[%lld,%lld] %s",
                        (long long)M, (long long)K, (long long)K, (long long)N, em_dtype_name(dt));
    EM_LT(hs);
    Scratch work;
    if (res.workspaceSize) EM_TRY(work.get(res.workspaceSize, dev));
    const float one = 1.0f, zero = 0.0f;
    EM_LT(cublasLtMatmul(h, D.op, &one, pb, D.a, pa, D.b, &zero, pd, D.d, pd, D.d, &res.algo, work.p,
                         res.workspaceSize, s));
    return EM_OK;
}

}   // namespace

extern "C" em_status em__cuda_linear(em_tensor *out, em_tensor *a, em_tensor *b, em_tensor *bias)
{
    return lt_linear(out, a, b, bias);
}
