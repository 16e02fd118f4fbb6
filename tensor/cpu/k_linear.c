/* ember — EM_OP_LINEAR on the CPU (contract in tensor/ops.h): y = x w^T + b.
 *
 * Two passes, on purpose: the MATMUL kernel on x and a transposed header of w
 * (the GEMM reads w in place with its trans flag), then the ADD kernel with
 * the bias broadcast over the rows, in place on y. These are the very kernel
 * calls em_matmul(x, transpose(w)) then em_add(., b) make, so the result is
 * bit-identical to that composition (which nn's Linear used before this op).
 * Folding the bias into the GEMM (beta = 1 over a pre-filled y) would round
 * differently (b enters the sum first, not last).
 */
#include "tensor/cpu/cpu.h"

int em_cpu_LINEAR(const em_kargs *k)
{
    em_tensor *b = k->in[0], *x = k->in[1], *w = k->in[2], *y = k->out[0];
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
