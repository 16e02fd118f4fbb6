/* ember — EM_OP_LINEAR on CUDA (contract in tensor/ops.h): y = x w^T + b.
 *
 * First choice: one cuBLASLt GEMM with the bias in its epilogue
 * (k_lt_matmul.cu, em__cuda_linear), which saves the separate
 * pass over y that the add costs. When cuBLASLt declines the case (f64, a
 * layout or alignment it cannot take, no algorithm; EM_ERR_UNSUPPORTED, y
 * untouched) the kernel composes the cuBLAS MATMUL kernel and the ADD kernel
 * (bias broadcast over the rows, in place on y), as em_matmul + em_add would,
 * and the decline leaves no error behind. w^T is a header on the stack: both
 * GEMM paths read w in place with a transpose flag.
 */
#include "tensor/cuda/cuda_common.cuh"

namespace {

/* The caller's last error, put back after a declined fast path. */
struct SavedError {
    em_status status;
    char msg[1024];
    SavedError() : status(em_last_status())
    {
        strncpy(msg, em_last_error(), sizeof msg - 1);
        msg[sizeof msg - 1] = 0;
    }
    void restore() const
    {
        if (status == EM_OK) em_clear_error();
        else em__fail(status, "%s", msg);
    }
};

}   // namespace

extern "C" int em_cuda_LINEAR(const em_kargs *k)
{
    em_tensor *b = k->in[0], *x = k->in[1], *w = k->in[2], *y = k->out[0];
    em_tensor wt = *w;   /* w^T [K,N], read-only */
    wt.shape[0] = w->shape[1], wt.shape[1] = w->shape[0];
    wt.stride[0] = w->stride[1], wt.stride[1] = w->stride[0];
    if (!b || em_is_contiguous(b)) {
        SavedError saved;
        em_status s = em__cuda_linear(y, x, &wt, b);
        if (s != EM_ERR_UNSUPPORTED) return s;
        saved.restore();
    }
    em_kargs mm = {};
    mm.op = EM_OP_MATMUL, mm.in[0] = x, mm.in[1] = &wt, mm.out[0] = y;
    EM_TRY((em_status)em_cuda_MATMUL(&mm));
    if (!b) return EM_OK;
    em_kargs add = {};
    add.op = EM_OP_ADD, add.in[0] = y, add.in[1] = b, add.out[0] = y;
    return em_cuda_ADD(&add);
}
