/* ember — AdamW, as torch.optim.AdamW's single-tensor path (the CPU default):
 *
 *     step += 1
 *     p  = p * (1 - lr*wd)                       (decoupled decay first, current lr)
 *     m  = lerp(m, g, 1 - beta1)
 *     v  = v * beta2 + (1 - beta2) * g * g
 *     vmax = max(vmax, v)                        (amsgrad; NaN propagates)
 *     d  = sqrt(v or vmax) / sqrt(1 - beta2^step) + eps
 *     p  = p + (-lr / (1 - beta1^step)) * m / d
 *
 * Scalars are computed in double as Python computes them (pow, not sqrt, for
 * the square root of the bias correction) and rounded once to the parameter
 * dtype; every tensor operation rounds to that dtype in torch's order, with
 * torch's fused multiply-adds where the CPU has FMA (optim_internal.h). One
 * pass per span does all of it for each element: the op ADAMW_STEP, whose
 * kernels (tensor/cpu/k_fused.c, tensor/cuda/k_adamw.cu) implement the loop. */
#include "optim/optim_internal.h"
#include "tensor/fused.h"

#include <stdlib.h>

#include <math.h>

enum { B1 = EM__ADAM_B1, B2 = EM__ADAM_B2, EPS = EM__ADAM_EPS };

static em_adamw_scalars consts_of(const em_optimizer *o, const em__group *g, const em__span *sp, bool l2)
{
    double step = sp->step + 1;
    double bias_correction1 = 1 - pow(g->hp[B1], step);
    double bias_correction2 = 1 - pow(g->hp[B2], step);
    double step_size = g->lr / bias_correction1;
    em_adamw_scalars c = {
        .decay = g->weight_decay != 0 ? 1 - g->lr * g->weight_decay : 1.0,
        .w1 = 1 - g->hp[B1],
        .beta2 = g->hp[B2],
        .w2 = 1 - g->hp[B2],
        .bc2_sqrt = pow(bias_correction2, 0.5),
        .neg_step = -step_size,
        .eps = g->hp[EPS],
        .sign = o->maximize ? -1.0 : 1.0,
        .fma = em__opt_have_fma(),
    };
    c.small = fabs(sp->dtype == EM_F32 ? (double)(float)c.w1 : c.w1) < 0.5;
    if (l2 && g->weight_decay != 0) c.decay = g->weight_decay, c.l2 = true;   /* Adam: wd p joins the gradient */
    return c;
}

/* Each span is one ADAMW_STEP op (tensor/fused.h) on whatever device holds
 * it; the CPU's kernel (tensor/cpu/k_fused.c) and CUDA's run the update above
 * operation for operation. The span's tensors are headers on the stack
 * (em__run_header), so nothing is allocated between the first update and
 * the last: on the CPU the step cannot fail half-way. */
em_status em__adam_update_ops(const em_optimizer *o, const em__group *g, const em__span *sps, int n, bool l2)
{
    em_status st = EM_OK;
    for (int k = 0; k < n && st == EM_OK; k++) {
        const em__span *sp = &sps[k];
        if (sp->n == 0) continue;
        em_adamw_scalars c = consts_of(o, g, sp, l2);
        em_tensor p, gr, m, v, vm;
        em__run_header(&p, sp->tp, sp->n), em__run_header(&gr, sp->tg, sp->n);
        em__run_header(&m, sp->ts[0], sp->n), em__run_header(&v, sp->ts[1], sp->n);
        if (o->flag) em__run_header(&vm, sp->ts[2], sp->n);
        st = em__adamw_step(&p, &gr, &m, &v, o->flag ? &vm : NULL, &c);
    }
    return st;
}

static em_status adamw_update_ops(const em_optimizer *o, const em__group *g, const em__span *sps, int n, em_device dev)
{
    (void)dev;
    return em__adam_update_ops(o, g, sps, n, false);
}

int em__adam_n_state(const em_optimizer *o, const em__group *g) { return o->flag ? 3 : 2; }

bool em__adam_check(const em_optimizer *o, const em__group *g, const char *op)
{
    const char *what = NULL;
    double val = 0;
    if (!(g->lr >= 0) || isinf(g->lr)) what = "learning rate", val = g->lr;
    else if (!(g->hp[EPS] >= 0) || isinf(g->hp[EPS])) what = "epsilon value", val = g->hp[EPS];
    else if (!(g->hp[B1] >= 0 && g->hp[B1] < 1)) what = "beta parameter at index 0", val = g->hp[B1];
    else if (!(g->hp[B2] >= 0 && g->hp[B2] < 1)) what = "beta parameter at index 1", val = g->hp[B2];
    else if (!(g->weight_decay >= 0) || isinf(g->weight_decay)) what = "weight_decay value", val = g->weight_decay;
    if (what) em__misuse(op, "invalid %s: %g", what, val);
    return !what;
}

/* ---- hyperparameters: betas, eps and the amsgrad switch (Adam's too) ---- */
void em__adam_resolve(const em_param_group *pg, const em__group *d, em__group *g)
{
    g->hp[B1] = em__opt_value(pg->betas[0], d->hp[B1]);
    g->hp[B2] = em__opt_value(pg->betas[1], d->hp[B2]);
    g->hp[EPS] = em__opt_value(pg->eps, d->hp[EPS]);
}

void em__adam_to_public(const em_optimizer *o, const em__group *g, em_param_group *pg)
{
    pg->betas[0] = g->hp[B1], pg->betas[1] = g->hp[B2], pg->eps = g->hp[EPS];
}

bool em__adam_save_meta(const em_optimizer *o, const em__group *g, em__meta_out *out)
{
    return em__meta_put(out, "betas", "%.17g,%.17g", g->hp[B1], g->hp[B2]) &&
           em__meta_put(out, "eps", "%.17g", g->hp[EPS]) && em__meta_put(out, "amsgrad", "%s", o->flag ? "true" : "false");
}

em_status em__adam_load_meta(const em_optimizer *o, const em__meta_in *in, em__group *g)
{
    double betas[2];
    em_status s = em__meta_flag(in, "amsgrad", o->flag);
    if (!s) s = em__meta_pair(in, "betas", 0, 1, betas);
    if (!s) s = em__meta_num(in, "eps", 0, INFINITY, &g->hp[EPS]);
    if (!s) g->hp[B1] = betas[0], g->hp[B2] = betas[1];
    return s;
}

const em__optim_kind em__adamw_kind = {
    .name = "AdamW",
    .defaults = {.lr = 1e-3, .weight_decay = 1e-2, .hp = {[B1] = 0.9, [B2] = 0.999, [EPS] = 1e-8}},
    EM__ADAM_FAMILY_SLOTS,
    .update_ops = adamw_update_ops,
};

static em_optimizer *adamw_new(const em_param_group *groups, int n_groups, const em_adamw_opts *opts, const char *op)
{
    em_adamw_opts o = opts ? *opts : (em_adamw_opts){0};
    const em__group *k = &em__adamw_kind.defaults;
    em__group d = {
        .lr = em__opt_value(o.lr, k->lr),
        .hp[B1] = em__opt_value(o.betas[0], k->hp[B1]),
        .hp[B2] = em__opt_value(o.betas[1], k->hp[B2]),
        .hp[EPS] = em__opt_value(o.eps, k->hp[EPS]),
        .weight_decay = em__opt_value(o.weight_decay, k->weight_decay),
    };
    return em__optimizer_new(&em__adamw_kind, &d, o.amsgrad, o.maximize, groups, n_groups, op);
}

em_optimizer *em_adamw_new(em_tensor *const *params, int n, const em_adamw_opts *opts)
{
    em_param_group g = {.params = params, .n_params = n};
    return adamw_new(&g, 1, opts, "em_adamw_new");
}

em_optimizer *em_adamw_new_groups(const em_param_group *groups, int n_groups, const em_adamw_opts *opts)
{
    return adamw_new(groups, n_groups, opts, "em_adamw_new_groups");
}

em_optimizer *em_adamw_new_module(em_module *m, const em_adamw_opts *opts)
{
    em_param_group g = em__module_group(m, "em_adamw_new_module");
    em_optimizer *o = m ? adamw_new(&g, 1, opts, "em_adamw_new_module") : NULL;
    free((void *)g.params);
    return o;
}
