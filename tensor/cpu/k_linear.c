/* ember — EM_OP_LINEAR on the CPU (contract in tensor/ops.h): y = x w^T + b.
 *
 * Two passes, on purpose: the MATMUL kernel on x and a transposed header of w
 * (the GEMM reads w in place with its trans flag), then the ADD kernel with
 * the bias broadcast over the rows, in place on y. These are the very kernel
 * calls em_matmul(x, transpose(w)) then em_add(., b) make, so the result is
 * bit-identical to that composition (which nn's Linear used before this op).
 * Folding the bias into the GEMM (beta = 1 over a pre-filled y) would round
 * differently (b enters the sum first, not last).
 *
 * Except in bf16 on oneDNN (issue 17): there the bias is the primitive's
 * epilogue, added to the f32 sum before y's one rounding to bf16, as torch's
 * addmm and the CUDA kernel's cuBLASLt epilogue do (the two-pass form rounded
 * twice and read and wrote y a second time: 0.21 against 0.11 ms for
 * 2048x256x256 here). f32 keeps its two passes and its bits.
 */
#include "tensor/cpu/cpu.h"

/* bf16 with a bias on oneDNN: the bias is the GEMM's epilogue (one rounding of
 * x w^T + b, as torch's addmm; no second pass over y). false: not this case. */
static bool bf16_epilogue(em_tensor *b, em_tensor *x, em_tensor *w, em_tensor *y, em_status *st)
{
    if (!b || y->dtype != EM_BF16 || x->dtype != EM_BF16 || w->dtype != EM_BF16 || b->dtype != EM_BF16 ||
        b->ndim != 1 || (b->shape[0] > 1 && b->stride[0] != 1) || !em_is_contiguous(y) || !em_cpu_gemm_bf16_fast())
        return false;
    int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    bool ta, tb;
    int64_t lda, ldb;
    /* B = w^T [K,N]: w's strides swapped */
    if (!em__gemm_layout(M, K, x->stride[0], x->stride[1], &ta, &lda) ||
        !em__gemm_layout(K, N, w->stride[1], w->stride[0], &tb, &ldb))
        return false;
    *st = em_cpu_gemm_bf16_bias(ta, tb, M, N, K, em_data_ptr(x), lda, em_data_ptr(w), ldb, em_data_ptr(b),
                                em_data_ptr(y), EM_BF16, N);
    return true;
}

int em_cpu_LINEAR(const em_kargs *k)
{
    em_tensor *b = k->in[0], *x = k->in[1], *w = k->in[2], *y = k->out[0];
    em_status st;
    if (bf16_epilogue(b, x, w, y, &st)) return st;
    /* w^T [K,N]: a header on the stack, read-only for the matmul kernel */
    em_tensor wt = *w;
    wt.shape[0] = w->shape[1], wt.shape[1] = w->shape[0];
    wt.stride[0] = w->stride[1], wt.stride[1] = w->stride[0];
    em_kargs mm = {.op = EM_OP_MATMUL, .in = {x, &wt}, .out = {y}};
    em_status s = em_cpu_MATMUL(&mm);
    if (s != EM_OK || !b) return s;
    /* y += b: each element read and written once, at the same index */
    em_kargs add = {.op = EM_OP_ADD, .in = {y, b}, .out = {y}};
    return em_cpu_ADD(&add);
}
