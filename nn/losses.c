/* ember — losses as torch.nn.functional computes them, built on the
 * differentiable ops (the fused cross-entropy kernel, elementwise ops and
 * reductions), so autograd differentiates them with no rule of their own. */
#include "nn/nn_internal.h"
#include "tensor/construct.h"
#include "tensor/support.h"

#include <string.h>

static em_tensor *reduce(em_tensor *per, em_reduction red)
{
    switch (red) {
    case EM_REDUCE_MEAN: return em_mean(per, 0, NULL, false);
    case EM_REDUCE_SUM: return em_sum(per, 0, NULL, false);
    case EM_REDUCE_NONE: return em__pass_through(per);
    }
    return NULL;
}

/* Ends the loss's own scope, keeping loss (NULL stays NULL) in the caller's. */
static em_tensor *kept(em_tensor *loss)
{
    em_tensor *r = loss ? em_keep(loss) : NULL;
    em_scope_end();
    return r;
}

/* Whether the prediction p (named pn in the message) and target share a float
 * dtype; otherwise a misuse in op. */
static bool same_float_dtype(const char *op, const char *pn, const em_tensor *p, const em_tensor *target)
{
    if (em_dtype_is_float(p->dtype) && p->dtype == target->dtype) return true;
    em__misuse(op, "%s and target must share a float dtype, got %s and %s", pn, em_dtype_name(p->dtype),
               em_dtype_name(target->dtype));
    return false;
}

em_tensor *em_cross_entropy_loss(em_tensor *logits, em_tensor *target, const em_cross_entropy_opts *opts)
{
    static const char op[] = "em_cross_entropy_loss";
    em_cross_entropy_opts o = opts ? *opts : (em_cross_entropy_opts){0};
    int64_t ignore = o.ignore_index == 0 ? -100 : o.ignore_index == EM_IGNORE_CLASS_0 ? 0 : o.ignore_index;
    EM_PROPAGATE_NULL(logits, target);
    EM_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, op, "label_smoothing must be in [0, 1], got %g",
             o.label_smoothing);
    EM_CHECK((unsigned)o.reduction <= EM_REDUCE_NONE, op, "unknown reduction %d", (int)o.reduction);
    EM_CHECK(logits->ndim == 2 && em_dtype_is_float(logits->dtype), op,
             "logits must be float [N, C], got %s %s", em_dtype_name(logits->dtype), em__shape_str(logits));
    EM_CHECK((target->dtype == EM_I64 || target->dtype == EM_I32) && target->ndim == 1 &&
                 target->shape[0] == logits->shape[0],
             op, "target must be i64/i32 [N] matching logits %s, got %s %s", em__shape_str(logits),
             em_dtype_name(target->dtype), em__shape_str(target));
    em_scope_begin();
    em_tensor *t = em_to_dtype(target, EM_I64);
    em_tensor *loss = em_cross_entropy(logits, t, ignore, o.label_smoothing > 0 ? EM_REDUCE_NONE : o.reduction);
    if (o.label_smoothing > 0 && loss) {
        /* torch: (1-e) * nll + e * mean_c(-log p), over the rows not ignored */
        double e = o.label_smoothing;
        int64_t C = logits->shape[1];
        em_tensor *valid = em_to_dtype(em_ne(t, em_scalar((double)ignore, EM_I64, t->device)), logits->dtype);
        em_tensor *smooth = em_mul_scalar(em_sum(em_log_softmax(logits, 1), EM_DIMS(1), false), -1.0 / (double)C);
        em_tensor *per = em_add(em_mul_scalar(loss, 1.0 - e), em_mul(em_mul_scalar(smooth, e), valid));
        if (o.reduction == EM_REDUCE_MEAN) loss = em_div(em_sum(per, 0, NULL, false), em_sum(valid, 0, NULL, false));
        else loss = reduce(per, o.reduction);
    }
    return kept(loss);
}

em_tensor *em_mse_loss(em_tensor *input, em_tensor *target, em_reduction red)
{
    static const char op[] = "em_mse_loss";
    EM_PROPAGATE_NULL(input, target);
    if (!same_float_dtype(op, "input", input, target)) return NULL;
    EM_CHECK((unsigned)red <= EM_REDUCE_NONE, op, "unknown reduction %d", (int)red);
    int nd;
    int64_t bs[EM_MAX_DIMS];
    EM_CHECK(em__broadcast_shapes(input->ndim, input->shape, target->ndim, target->shape, &nd, bs), op,
             "input %s and target %s do not broadcast", em__shape_str(input), em__shape_str(target));
    em_scope_begin();
    em_tensor *d = em_sub(input, target);
    em_tensor *loss = reduce(em_mul(d, d), red);
    return kept(loss);
}

em_tensor *em_bce_with_logits_loss(em_tensor *logits, em_tensor *target, em_reduction red)
{
    static const char op[] = "em_bce_with_logits_loss";
    EM_PROPAGATE_NULL(logits, target);
    if (!same_float_dtype(op, "logits", logits, target)) return NULL;
    EM_CHECK(logits->ndim == target->ndim && !memcmp(logits->shape, target->shape, sizeof(int64_t) * (size_t)logits->ndim),
             op, "logits %s and target %s must have the same shape", em__shape_str(logits), em__shape_str(target));
    EM_CHECK((unsigned)red <= EM_REDUCE_NONE, op, "unknown reduction %d", (int)red);
    em_scope_begin();
    /* loss = (1 - y) x + softplus(-x), softplus(-x) = logsumexp([0, -x]): stable for
     * any x, and its gradient sigmoid(x) - y is exact everywhere (x = 0 included). */
    em_tensor *negx = em_neg(logits);
    em_tensor *pair[2] = {em_zeros_like(logits), negx};
    em_tensor *sp = em_logsumexp(em_stack(2, pair, -1), EM_DIMS(-1), false);
    em_tensor *per = em_add(em_mul(em_add_scalar(em_neg(target), 1.0), logits), sp);
    em_tensor *loss = reduce(per, red);
    return kept(loss);
}
