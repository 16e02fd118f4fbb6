/* ember — em_linear: y = x w^T + b as one recorded op (torch.nn.functional.linear).
 *
 * x [..., K] is flattened to [M, K] and the result [M, N] viewed back to
 * [..., N] through the public view ops, inside a private scope, as em_matmul
 * does: the layer above sees recorded views around one LINEAR node, whose
 * kernel gets 2-d GEMM-ready operands (ops.h LINEAR). On the CPU the kernel
 * runs the same GEMM and the same bias add as em_matmul(x, transpose(w)) +
 * b, so the numbers are those of that composition bit for bit; on CUDA the
 * bias rides in the GEMM's epilogue (cuBLASLt) where it can.
 */
#include "tensor/tensor_internal.h"

em_tensor *em_linear(em_tensor *x, em_tensor *w, em_tensor *b)
{
    static const char op[] = "em_linear";
    em_tensor *b_given = b;
    x = em__autocast(EM_OP_LINEAR, 1, x);   /* in an autocast region: the low dtype, bias too */
    w = em__autocast(EM_OP_LINEAR, 2, w);
    b = em__autocast(EM_OP_LINEAR, 0, b);   /* positions as in the kernel's in[] (ops.h) */
    EM_PROPAGATE_NULL(x, w);
    if (b_given && !b) return NULL;   /* the bias's cast failed (OOM) */
    char d0[16], d1[16];
    EM_CHECK(em_device_eq(x->device, w->device) && (!b || em_device_eq(x->device, b->device)), op,
             "operands on different devices: x on %s, weight on %s%s%s", em_device_str(x->device, d0),
             em_device_str(w->device, d1), b ? ", bias on " : "", b ? em_device_str(b->device, (char[16]){0}) : "");
    EM_CHECK(x->dtype == w->dtype && (!b || b->dtype == x->dtype), op,
             "operands differ in dtype: x %s, weight %s%s%s", em_dtype_name(x->dtype), em_dtype_name(w->dtype),
             b ? ", bias " : "", b ? em_dtype_name(b->dtype) : "");
    EM_CHECK(em_dtype_is_float(x->dtype), op, "expected floating-point operands, got %s", em_dtype_name(x->dtype));
    EM_CHECK(x->ndim >= 1 && w->ndim == 2 && x->shape[x->ndim - 1] == w->shape[1], op,
             "x %s must be [..., in_features] and weight %s [out_features, in_features]", em__shape_str(x),
             em__shape_str(w));
    EM_CHECK(!b || (b->ndim == 1 && b->shape[0] == w->shape[0]), op, "bias %s must be [out_features] = [%lld]",
             b ? em__shape_str(b) : "", (long long)w->shape[0]);

    const int64_t K = w->shape[1], N = w->shape[0];
    int64_t M = 1;
    for (int d = 0; d < x->ndim - 1; d++) M *= x->shape[d];
    em_tensor *result = NULL;
    em_scope_begin();
    em_tensor *x2 = x->ndim == 2 ? x : em_reshape(x, 2, (int64_t[]){M, K});   /* copies only a non-viewable x */
    if (x2 && !em__gemm_ready(x2)) x2 = em_contiguous(x2);
    em_tensor *w2 = em__gemm_ready(w) ? w : em_contiguous(w);
    em_tensor *out = x2 && w2 ? em__empty(2, (int64_t[]){M, N}, x->dtype, x->device) : NULL;
    if (out) {
        em_kargs k = {.op = EM_OP_LINEAR, .in = {b, x2, w2}, .out = {out}};   /* bias first: ops.h */
        if (em__dispatch(&k) == EM_OK) {
            result = out;
            if (x->ndim != 2) {
                int64_t shape[EM_MAX_DIMS];
                for (int d = 0; d < x->ndim - 1; d++) shape[d] = x->shape[d];
                shape[x->ndim - 1] = N;
                result = em_view(out, x->ndim, shape);
            }
        }
    }
    if (result) em_keep(result);
    em_scope_end();
    return result;
}
