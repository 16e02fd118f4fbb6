/* ember — internal front-ends of the NN kernels that tensor.h does not expose
 * (autograd's backward rules call them). Same rules as every op: arguments
 * are checked (misuse names the op and the shapes), the result is a new
 * reference owned by the current scope, NULL on an outside failure.
 *
 * Saved statistics: layer_norm's mean/rstd and cross-entropy's lse are f32,
 * except for f64 inputs, where they are f64 (so f64 gradchecks stay exact).
 */
#ifndef EMBER_OP_NN_H
#define EMBER_OP_NN_H

#include "tensor/tensor.h"

/* Whether a and b (named an and bn in the messages) share a floating-point
 * dtype, a shape and a device; otherwise a misuse in op, checked in that
 * order: "<an> and <bn> must share a floating-point dtype, got ...",
 * "<an> [..] and <bn> [..] differ in shape", "<an> and <bn> are on different
 * devices". For backward front-ends (x or y against dy). */
bool em__check_same(const char *op, const char *an, const em_tensor *a, const char *bn, const em_tensor *b);

/* dx of softmax (log = false) or log_softmax (log = true) over dim, from the
 * forward output y and the incoming gradient dy (same shape and float dtype,
 * any layout):  softmax: dx = y * (dy - sum(dy * y));
 *           log_softmax: dx = dy - exp(y) * sum(dy). */
em_tensor *em__softmax_backward(em_tensor *y, em_tensor *dy, int dim, bool log);

/* em_cross_entropy that also returns the per-row log-sum-exp of the logits
 * ([N]) in *lse when lse is non-NULL, for em__cross_entropy_backward. */
/* Dropout's backward, g * mask / (1 - p): em_dropout's key and arithmetic,
 * with the forward's mask (a contiguous bool tensor of g's shape, as
 * em_dropout's *mask gives it) read instead of regenerated where the kernel
 * can. mask NULL, or not such a tensor (another shape, dtype, layout or
 * device): regenerated from the key. */
em_tensor *em__dropout_masked(em_tensor *g, em_tensor *mask, double p, uint64_t seed, uint64_t offset);

em_tensor *em__cross_entropy(em_tensor *logits, em_tensor *target, int64_t ignore_index, em_reduction red,
                             em_tensor **lse);
/* em_cross_entropy_backward from a saved lse (one pass over the logits instead of two). */
em_tensor *em__cross_entropy_backward(em_tensor *dloss, em_tensor *logits, em_tensor *target, em_tensor *lse,
                                      int64_t ignore_index, em_reduction red);

#endif
