/* ember — SGD, as torch.optim.SGD's single-tensor path:
 *
 *     g = -g                          (maximize)
 *     g = g + wd * p                  (weight decay, when wd != 0)
 *     buf = g                         (momentum != 0, the buffer's first step)
 *     buf = buf * momentum + (1 - dampening) * g      (later steps)
 *     g = nesterov ? g + momentum * buf : buf
 *     p = p + (-lr) * g
 *
 * Scalars are rounded once to the parameter dtype, as torch rounds its Scalar
 * arguments; each operation rounds in torch's order, add-with-alpha fused
 * (fma) where the CPU has FMA, as torch's kernels do (optim_internal.h). */
#include "optim/optim_internal.h"

#include <stdlib.h>

#include <math.h>

enum { MOM, DAMP };   /* em__group.hp: momentum, dampening */

#define SGD_GRAIN 16384

typedef struct sgd_consts {
    double sign, wd, momentum, damp1, neg_lr;
    bool first, nesterov;
} sgd_consts;

/* torch's add(x, y, alpha) is fma(y, alpha, x) where it fuses */
#define SGD_KERNEL(NAME, T, MADD, ATTR)                                                                         \
    static ATTR void NAME(T *restrict p, const T *restrict g, T *restrict buf, int64_t b, int64_t e,          \
                          const sgd_consts *c)                                                                  \
    {                                                                                                           \
        const T sign = (T)c->sign, wd = (T)c->wd, mom = (T)c->momentum, damp1 = (T)c->damp1;                   \
        const T neg_lr = (T)c->neg_lr;                                                                          \
        const bool decay = c->wd != 0;                                                                          \
        if (!buf) {                                                                                             \
            for (int64_t i = b; i < e; i++) {                                                                   \
                T gi = g[i] * sign;                                                                             \
                if (decay) gi = MADD(p[i], wd, gi);                                                             \
                p[i] = MADD(gi, neg_lr, p[i]);                                                                  \
            }                                                                                                   \
            return;                                                                                             \
        }                                                                                                       \
        for (int64_t i = b; i < e; i++) {                                                                       \
            T gi = g[i] * sign;                                                                                 \
            if (decay) gi = MADD(p[i], wd, gi);                                                                 \
            T bm = buf[i] * mom;                                                                                \
            T bi = c->first ? gi : MADD(gi, damp1, bm);                                                         \
            buf[i] = bi;                                                                                        \
            gi = c->nesterov ? MADD(bi, mom, gi) : bi;                                                          \
            p[i] = MADD(gi, neg_lr, p[i]);                                                                      \
        }                                                                                                       \
    }
SGD_KERNEL(sgd_float, float, EM__MADD_PLAIN, )
SGD_KERNEL(sgd_double, double, EM__MADD_PLAIN, )
SGD_KERNEL(sgd_float_fma, float, fmaf, EM__FMA_TARGET)
SGD_KERNEL(sgd_double_fma, double, fma, EM__FMA_TARGET)

static void sgd_update(const em_optimizer *o, const em__group *g, const em__span *sp)
{
    sgd_consts c = {
        .sign = o->maximize ? -1.0 : 1.0,
        .wd = g->weight_decay,
        .momentum = g->hp[MOM],
        .damp1 = 1 - g->hp[DAMP],
        .neg_lr = -g->lr,
        .first = sp->step == 0,
        .nesterov = o->flag,
    };
    bool mom = g->hp[MOM] != 0;
    if (sp->dtype == EM_F32) {
        float *p = sp->p, *buf = mom ? sp->s[0] : NULL;
        const float *gr = sp->g;
        if (em__opt_have_fma()) EM__PARALLEL_RANGE(sp->n, SGD_GRAIN, sgd_float_fma(p, gr, buf, b, e, &c));
        else EM__PARALLEL_RANGE(sp->n, SGD_GRAIN, sgd_float(p, gr, buf, b, e, &c));
    } else {
        double *p = sp->p, *buf = mom ? sp->s[0] : NULL;
        const double *gr = sp->g;
        if (em__opt_have_fma()) EM__PARALLEL_RANGE(sp->n, SGD_GRAIN, sgd_double_fma(p, gr, buf, b, e, &c));
        else EM__PARALLEL_RANGE(sp->n, SGD_GRAIN, sgd_double(p, gr, buf, b, e, &c));
    }
}

static int sgd_n_state(const em_optimizer *o, const em__group *g) { return g->hp[MOM] != 0 ? 1 : 0; }

static bool sgd_check(const em_optimizer *o, const em__group *g, const char *op)
{
    if (!(g->lr >= 0) || isinf(g->lr)) em__misuse(op, "invalid learning rate: %g", g->lr);
    else if (!(g->hp[MOM] >= 0) || isinf(g->hp[MOM])) em__misuse(op, "invalid momentum value: %g", g->hp[MOM]);
    else if (!(g->weight_decay >= 0) || isinf(g->weight_decay))
        em__misuse(op, "invalid weight_decay value: %g", g->weight_decay);
    else if (!isfinite(g->hp[DAMP])) em__misuse(op, "invalid dampening value: %g", g->hp[DAMP]);
    else if (o->flag && (g->hp[MOM] <= 0 || g->hp[DAMP] != 0))
        em__misuse(op, "nesterov momentum requires a momentum and zero dampening (momentum %g, dampening %g)",
                   g->hp[MOM], g->hp[DAMP]);
    else return true;
    return false;
}

/* ---- hyperparameters: momentum, dampening and the nesterov switch ---- */
static void sgd_resolve(const em_param_group *pg, const em__group *d, em__group *g)
{
    g->hp[MOM] = em__opt_value(pg->momentum, d->hp[MOM]);
    g->hp[DAMP] = em__opt_value(pg->dampening, d->hp[DAMP]);
}

static void sgd_to_public(const em_optimizer *o, const em__group *g, em_param_group *pg)
{
    pg->momentum = g->hp[MOM], pg->dampening = g->hp[DAMP];
}

static bool sgd_save_meta(const em_optimizer *o, const em__group *g, em__meta_out *out)
{
    return em__meta_put(out, "momentum", "%.17g", g->hp[MOM]) && em__meta_put(out, "dampening", "%.17g", g->hp[DAMP]) &&
           em__meta_put(out, "nesterov", "%s", o->flag ? "true" : "false");
}

static em_status sgd_load_meta(const em_optimizer *o, const em__meta_in *in, em__group *g)
{
    em_status s = em__meta_flag(in, "nesterov", o->flag);
    if (!s) s = em__meta_num(in, "momentum", 0, INFINITY, &g->hp[MOM]);
    if (!s) s = em__meta_num(in, "dampening", -INFINITY, INFINITY, &g->hp[DAMP]);
    return s;
}

const em__optim_kind em__sgd_kind = {
    .name = "SGD",
    .defaults = {.lr = 1e-3},
    .state_names = {"momentum_buffer"},
    .has_step = false,
    .resolve = sgd_resolve,
    .to_public = sgd_to_public,
    .save_meta = sgd_save_meta,
    .load_meta = sgd_load_meta,
    .n_state = sgd_n_state,
    .check = sgd_check,
    .update = sgd_update,
};

static em_optimizer *sgd_new(const em_param_group *groups, int n_groups, const em_sgd_opts *opts, const char *op)
{
    em_sgd_opts o = opts ? *opts : (em_sgd_opts){0};
    const em__group *k = &em__sgd_kind.defaults;
    em__group d = {
        .lr = em__opt_value(o.lr, k->lr),
        .hp[MOM] = em__opt_value(o.momentum, k->hp[MOM]),
        .hp[DAMP] = em__opt_value(o.dampening, k->hp[DAMP]),
        .weight_decay = em__opt_value(o.weight_decay, k->weight_decay),
    };
    return em__optimizer_new(&em__sgd_kind, &d, o.nesterov, o.maximize, groups, n_groups, op);
}

em_optimizer *em_sgd_new(em_tensor *const *params, int n, const em_sgd_opts *opts)
{
    em_param_group g = {.params = params, .n_params = n};
    return sgd_new(&g, 1, opts, "em_sgd_new");
}

em_optimizer *em_sgd_new_groups(const em_param_group *groups, int n_groups, const em_sgd_opts *opts)
{
    return sgd_new(groups, n_groups, opts, "em_sgd_new_groups");
}

em_optimizer *em_sgd_new_module(em_module *m, const em_sgd_opts *opts)
{
    em_param_group g = em__module_group(m, "em_sgd_new_module");
    em_optimizer *o = m ? sgd_new(&g, 1, opts, "em_sgd_new_module") : NULL;
    free((void *)g.params);
    return o;
}
