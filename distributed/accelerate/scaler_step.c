/* ember — torch's scaler.unscale_(opt) / scaler.step(opt) / clip, in the
 * loop's layer (contract in accelerator.h "GradScaler with an optimizer"):
 * amp.h's scaler takes tensors and returns flags; these collect an
 * optimizer's gradients for it and step the optimizer when it says so. */
#include "distributed/accelerate/accelerator.h"
#include "tensor/support.h"

#include <stdlib.h>

em_status em_grad_scaler_unscale_(em_grad_scaler *s, em_optimizer *opt)
{
    if (!s || !opt) {
        em__misuse("em_grad_scaler_unscale_", "the scaler and the optimizer must not be NULL");
        return EM_ERR_INVALID;
    }
    int n;
    em_tensor **g = em_optimizer_grads(opt, &n);
    if (n < 0) return EM_ERR_OOM;
    em_status st = em_grad_scaler_unscale_grads(s, opt, n, g);
    free(g);
    return st;
}

em_status em_grad_scaler_step(em_grad_scaler *s, em_optimizer *opt, bool *stepped)
{
    if (stepped) *stepped = false;
    if (!s || !opt) {
        em__misuse("em_grad_scaler_step", "the scaler and the optimizer must not be NULL");
        return EM_ERR_INVALID;
    }
    int n;
    em_tensor **g = em_optimizer_grads(opt, &n);
    if (n < 0) return EM_ERR_OOM;
    bool ok = false;
    em_status st = em_grad_scaler_prepare_step(s, opt, n, g, &ok);
    free(g);
    if (st == EM_OK && ok) st = em_optimizer_step(opt);
    if (stepped) *stepped = st == EM_OK && ok;
    return st;
}

em_status em_grad_scaler_clip_grad_norm(em_grad_scaler *s, em_optimizer *opt, double max_norm, double *total_norm)
{
    if (s && opt && em_grad_scaler_is_enabled(s) && !em_grad_scaler_is_unscaled(s, opt)) {
        em_status st = em_grad_scaler_unscale_(s, opt);
        if (st != EM_OK) return st;
    }
    return em_optimizer_clip_grad_norm(opt, max_norm, NULL, total_norm);
}
