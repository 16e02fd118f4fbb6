/* ember — internal front-ends used by autograd's backward rules, and ops
 * composed for autograd (tensor/op_grad.c). Same rules as every op: arguments
 * are checked (misuse names the op and the shapes), the result is a new
 * reference owned by the current scope, NULL on an outside failure.
 */
#ifndef EMBER_OP_GRAD_H
#define EMBER_OP_GRAD_H

#include "tensor/ops.h"
#include "tensor/tensor.h"

/* dx = dy * f'(x) for a unary op f with a fused backward (a DERIV row of
 * tensor/unary_ops.h: EM_OP_GELU, EM_OP_GELU_TANH, ...; another op is misuse)
 * through its _BWD kernel. x and dy: same shape, same float dtype and device,
 * any layout. Misuse names em_<name>_backward. */
em_tensor *em__unary_backward(em_op op, em_tensor *x, em_tensor *dy);
/* The same, given y = f(x), the forward's output (or NULL), which the kernel
 * may read for a shortcut with the same bits (ops.h, <unary>_BWD). A y that
 * is not x's shape, dtype and device is not passed on. */
em_tensor *em__unary_backward_y(em_op op, em_tensor *x, em_tensor *y, em_tensor *dy);

/* em_embedding that records padding_idx for autograd: the gradient rows of
 * padding_idx stay zero (torch's nn.Embedding(padding_idx=...)). padding_idx
 * is -1 (none) or in [0, V). The forward result equals em_embedding's. */
em_tensor *em__embedding_ex(em_tensor *weight, em_tensor *ids, int64_t padding_idx);
/* em_embedding_backward added into dw ([V,D], contiguous, dy's dtype and device)
 * in place: each row some id picked gets += the (rounded) sum of its dy rows, so
 * the bits are those of dw + em_embedding_backward(...) on those rows; rows no
 * id picked, and padding_idx's, are not touched. For autograd's gradient sink.
 * Returns false (error set) on bad arguments or a failed kernel. */
bool em__embedding_backward_into(em_tensor *dw, em_tensor *dy, em_tensor *ids, int64_t padding_idx);
/* c += a b in place (GEMM with beta = 1): c [M,N] contiguous, a [M,K], b [K,N] (any
 * GEMM-ready strides), one dtype, f32 or f64, one device; or a and b bf16 (f16)
 * with an f32 c: their exact products summed in f32 and added into c, never
 * rounded to bf16. Where c holds zeros and the dtypes agree the bits are
 * em_matmul(a, b)'s (the GEMM adds its partial sums into c either way).
 * For autograd's gradient sink (linear's weight gradient). false (error set) on
 * bad arguments or a failed kernel. */
bool em__matmul_into(em_tensor *c, em_tensor *a, em_tensor *b);

/* Scaled dot-product attention, as Hugging Face DistilBERT computes it:
 *   w = softmax((q / sqrt(Dh)) k^T, masked_fill(!mask, finfo(dtype).min)), dim -1)
 *   out = dropout(w, dropout_p, seed, offset) v
 * q [B,H,Sq,Dh], k and v [B,H,Sk,Dh] (same float dtype and device); mask is
 * NULL or bool broadcastable to [B,H,Sq,Sk] — typically [B,1,1,Sk], true =
 * attend (keep). dropout_p in [0,1); the dropout mask is keyed by (seed,
 * offset) like em_dropout's. Returns [B,H,Sq,Dh]; from the CPU's fused kernel
 * a view of [B,Sq,H,Dh] memory (as torch's flash kernels return theirs), so
 * that transpose(1, 2) and a reshape to [B,Sq,H*Dh] cost no copy: em_reshape
 * or em_contiguous it, since em_view of other shapes may refuse it.
 * With a mask that is NULL or a right-padding key mask (constant over heads
 * and query rows, each row a non-empty prefix of keys; read to the host once
 * per mask, cached) it runs em__sdpa, one autograd node: on the CPU for every
 * float dtype, dropout included (tensor/cpu/k_sdpa.c); on CUDA with f16/bf16,
 * no dropout and Dh a multiple of 8 up to 128 (cuDNN's flash attention).
 * Otherwise it is composed from recorded ops (matmul, mul, masked_fill,
 * softmax, dropout, matmul), whose backward stores the [B,H,Sq,Sk] weights.
 * Both paths drop the same weights; they differ only by rounding (the fused
 * CPU kernel computes in f32, or f64 for f64, and rounds its output once). */
em_tensor *em_scaled_dot_product_attention(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask,
                                           double dropout_p, uint64_t seed, uint64_t offset);

/* The fused attention op SDPA (tensor/ops.h), recorded as ONE autograd node:
 * dropout(softmax((q / sqrt(D)) k^T, keys j >= lens[b] filled with
 * finfo(dtype).min), dropout_p, seed, offset) v, which is
 * em_scaled_dot_product_attention with the mask j < lens[b]. q [B,H,Sq,D], k
 * and v [B,H,Sk,D] (Sk > 0); lens NULL or i32/i64 [B] on q's device;
 * dropout_p in [0, 1). When the device's kernel declines the case (cuDNN takes
 * only f16 and bf16 without dropout, some head dims and layouts) it returns
 * the composed ops' result instead. On the CPU it runs tensor/cpu/k_sdpa.c.
 * pad_queries (with lens): query rows i >= lens[b] are padding whose output
 * nobody reads; the CPU kernel skips them (writes 0), a fallback computes them.
 * On the CPU the result is a [B,H,Sq,D] view of a [B,Sq,H,D] storage: the
 * heads' merge, permute(0, 2, 1, 3) and a reshape to [B,Sq,H*D], is then a view,
 * not a copy (em__sdpa_result). */
/* An empty [B,H,S,D] tensor for an attention output or gradient (scope-owned):
 * on the CPU a permuted view of a contiguous [B,S,H,D] (the layout the heads
 * were split from and are merged back into), elsewhere contiguous. */
em_tensor *em__sdpa_result(const int64_t shape[4], em_dtype dtype, em_device device);

em_tensor *em__sdpa(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *lens, double dropout_p, uint64_t seed,
                    uint64_t offset, bool pad_queries);
/* Fused attention over packed rows (tensor/op_sdpa_packed.c): q, k, v [1,H,N,D],
 * sequence b in rows starts[b] .. starts[b] + lens[b] - 1, the sequences in order
 * from row 0, each 1 to S rows; the values of em__sdpa on the padded [B,H,S,D]
 * batch with padding queries. -> [1,H,N,D] (em__sdpa_result's layout), or NULL
 * with the error set. */
em_tensor *em__sdpa_packed(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *lens, em_tensor *starts, int64_t S,
                           double dropout_p, uint64_t seed, uint64_t offset);
/* The padded gradient of q, k, v [B,H,S,D] given dout, into gin[0..2] (a NULL
 * entry: not needed); ctx is the caller's. */
typedef void (*em__sdpa_grad_fn)(void *ctx, em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *dout,
                                 em_tensor **gin);
/* The packed op's gradient through grad on the padded batch, for a device whose
 * fused backward declines; false (error set) when lens/starts do not tile q's rows
 * or memory runs out. gin[0..2]: [1,H,N,D] scope-owned, NULL where grad gave none. */
bool em__sdpa_packed_grad(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *lens, em_tensor *starts, int64_t S,
                          em_tensor *dout, em__sdpa_grad_fn grad, void *ctx, em_tensor **gin);
/* For tests: 1 composes em__sdpa_packed's forward, 2 declines its fused backward
 * (em__sdpa_backward_packed), 0 (the default) neither; returns the previous level. */
int em__sdpa_packed_set_composed(int level);
int em__sdpa_packed_composed(void);
/* The bool key mask [B,1,1,Sk] (j < lens[b]) of lens [B] (for the rule and the fallback). */
em_tensor *em__sdpa_lens_mask(em_tensor *lens, int64_t sk);

#endif
