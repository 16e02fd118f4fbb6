/* ember — Adam, as torch.optim.Adam's single-tensor path (the CPU default):
 * AdamW's update (optim/adamw.c) with the weight decay added to the gradient
 * (L2, torch's grad.add(param, alpha=weight_decay), after maximize's
 * negation) instead of decaying the parameter. Defaults as torch: lr 1e-3,
 * betas (0.9, 0.999), eps 1e-8, weight_decay 0; amsgrad is the kind's switch.
 * Built with em_optimizer_new("Adam", ...); saves and loads torch's keys. */
#include "optim/optim_internal.h"

static em_status adam_update_ops(const em_optimizer *o, const em__group *g, const em__span *sps, int n, em_device dev)
{
    (void)dev;
    return em__adam_update_ops(o, g, sps, n, true);
}

const em__optim_kind em__adam_kind = {
    .name = "Adam",
    .defaults = {.lr = 1e-3, .hp = {[EM__ADAM_B1] = 0.9, [EM__ADAM_B2] = 0.999, [EM__ADAM_EPS] = 1e-8}},
    EM__ADAM_FAMILY_SLOTS,
    .update_ops = adam_update_ops,
};
