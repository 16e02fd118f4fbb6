/* ember — internal front-ends used by autograd's backward rules, and ops
 * composed for autograd (tensor/op_grad.c). Same rules as every op: arguments
 * are checked (misuse names the op and the shapes), the result is a new
 * reference owned by the current scope, NULL on an outside failure.
 */
#ifndef EMBER_OP_GRAD_H
#define EMBER_OP_GRAD_H

#include "tensor/tensor.h"

/* dx = dy * gelu'(x) for the erf form (tanh_approx false) or torch's tanh
 * approximation. x and dy: same shape, same float dtype and device, any layout. */
em_tensor *em__gelu_backward(em_tensor *x, em_tensor *dy, bool tanh_approx);

/* em_embedding that records padding_idx for autograd: the gradient rows of
 * padding_idx stay zero (torch's nn.Embedding(padding_idx=...)). padding_idx
 * is -1 (none) or in [0, V). The forward result equals em_embedding's. */
em_tensor *em__embedding_ex(em_tensor *weight, em_tensor *ids, int64_t padding_idx);

/* Scaled dot-product attention, as Hugging Face DistilBERT computes it:
 *   w = softmax((q / sqrt(Dh)) k^T, masked_fill(!mask, finfo(dtype).min)), dim -1)
 *   out = dropout(w, dropout_p, seed, offset) v
 * q [B,H,Sq,Dh], k and v [B,H,Sk,Dh] (same float dtype and device); mask is
 * NULL or bool broadcastable to [B,H,Sq,Sk] — typically [B,1,1,Sk], true =
 * attend (keep). dropout_p in [0,1); the dropout mask is keyed by (seed,
 * offset) like em_dropout's. Returns [B,H,Sq,Dh].
 * It is composed from recorded ops (matmul, mul, masked_fill, softmax,
 * dropout, matmul), so its backward comes from their rules; it does store
 * the [B,H,Sq,Sk] weights. A fused, blocked kernel is future work. */
em_tensor *em_scaled_dot_product_attention(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask,
                                           double dropout_p, uint64_t seed, uint64_t offset);

#endif
