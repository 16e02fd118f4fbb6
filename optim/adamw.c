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
 * pass per span does all of it for each element. */
#include "optim/optim_internal.h"

#include <stdlib.h>

#include <math.h>

enum { B1, B2, EPS };   /* em__group.hp: beta1, beta2, eps */

#define ADAMW_GRAIN 8192

typedef struct adamw_consts {
    double decay;      /* 1 - lr*wd, or 1 when wd == 0 (p*1 is exact)           */
    double w1;         /* lerp weight 1 - beta1                                 */
    bool small;        /* |w1| < 0.5: m + w1*(g-m); else g - (1-w1)*(g-m)       */
    double beta2, w2;  /* v*beta2 + w2*g*g                                      */
    double bc2_sqrt, neg_step, eps;
    double sign;       /* -1 with maximize (negation is exact)                  */
} adamw_consts;

/* lerp as torch's: base + coef*(g - m), with (base, coef) = (m, w) or
 * (g, w - 1) = (g, -(1-w)), fused where torch fuses (see optim_internal.h);
 * addcmul v + ((1-beta2)*g)*g likewise. */
#define ADAMW_KERNEL(NAME, T, SQRT, MADD, ATTR)                                                                 \
    static ATTR void NAME(T *restrict p, const T *restrict g, T *restrict m, T *restrict v, T *restrict vmax,  \
                          int64_t b, int64_t e, const adamw_consts *c)                                         \
    {                                                                                                           \
        const T decay = (T)c->decay, w1 = (T)c->w1, coef = c->small ? w1 : -((T)1 - w1);                       \
        const T beta2 = (T)c->beta2, w2 = (T)c->w2, bc2s = (T)c->bc2_sqrt, neg_step = (T)c->neg_step;           \
        const T eps = (T)c->eps, sign = (T)c->sign;                                                            \
        const bool small = c->small;                                                                            \
        if (vmax) {                                                                                             \
            for (int64_t i = b; i < e; i++) {                                                                   \
                T gi = g[i] * sign, pi = p[i] * decay, mo = m[i];                                               \
                T mi = MADD(coef, gi - mo, small ? mo : gi);                                                    \
                T vb = v[i] * beta2;                                                                            \
                T vi = MADD(w2 * gi, gi, vb);                                                                   \
                T mx = vmax[i];                                                                                 \
                mx = (vi > mx || vi != vi) ? vi : mx;                                                           \
                T d = SQRT(mx) / bc2s + eps;                                                                    \
                p[i] = pi + neg_step * mi / d;                                                                  \
                m[i] = mi;                                                                                      \
                v[i] = vi;                                                                                      \
                vmax[i] = mx;                                                                                   \
            }                                                                                                   \
        } else {                                                                                                \
            for (int64_t i = b; i < e; i++) {                                                                   \
                T gi = g[i] * sign, pi = p[i] * decay, mo = m[i];                                               \
                T mi = MADD(coef, gi - mo, small ? mo : gi);                                                    \
                T vb = v[i] * beta2;                                                                            \
                T vi = MADD(w2 * gi, gi, vb);                                                                   \
                T d = SQRT(vi) / bc2s + eps;                                                                    \
                p[i] = pi + neg_step * mi / d;                                                                  \
                m[i] = mi;                                                                                      \
                v[i] = vi;                                                                                      \
            }                                                                                                   \
        }                                                                                                       \
    }
ADAMW_KERNEL(adamw_float, float, sqrtf, EM__MADD_PLAIN, )
ADAMW_KERNEL(adamw_double, double, sqrt, EM__MADD_PLAIN, )
ADAMW_KERNEL(adamw_float_fma, float, sqrtf, fmaf, EM__OPT_FMA_TARGET)
ADAMW_KERNEL(adamw_double_fma, double, sqrt, fma, EM__OPT_FMA_TARGET)

static adamw_consts consts_of(const em_optimizer *o, const em__group *g, const em__span *sp)
{
    double step = sp->step + 1;
    double bias_correction1 = 1 - pow(g->hp[B1], step);
    double bias_correction2 = 1 - pow(g->hp[B2], step);
    double step_size = g->lr / bias_correction1;
    adamw_consts c = {
        .decay = g->weight_decay != 0 ? 1 - g->lr * g->weight_decay : 1.0,
        .w1 = 1 - g->hp[B1],
        .beta2 = g->hp[B2],
        .w2 = 1 - g->hp[B2],
        .bc2_sqrt = pow(bias_correction2, 0.5),
        .neg_step = -step_size,
        .eps = g->hp[EPS],
        .sign = o->maximize ? -1.0 : 1.0,
    };
    c.small = fabs(sp->dtype == EM_F32 ? (double)(float)c.w1 : c.w1) < 0.5;
    return c;
}

static void adamw_update(const em_optimizer *o, const em__group *g, const em__span *sp)
{
    adamw_consts c = consts_of(o, g, sp);
    bool ams = o->flag;
    if (sp->dtype == EM_F32) {
        float *p = sp->p, *m = sp->s[0], *v = sp->s[1], *vm = ams ? sp->s[2] : NULL;
        const float *gr = sp->g;
        if (em__opt_have_fma()) EM__OPT_PARALLEL(sp->n, ADAMW_GRAIN, adamw_float_fma(p, gr, m, v, vm, b, e, &c));
        else EM__OPT_PARALLEL(sp->n, ADAMW_GRAIN, adamw_float(p, gr, m, v, vm, b, e, &c));
    } else {
        double *p = sp->p, *m = sp->s[0], *v = sp->s[1], *vm = ams ? sp->s[2] : NULL;
        const double *gr = sp->g;
        if (em__opt_have_fma()) EM__OPT_PARALLEL(sp->n, ADAMW_GRAIN, adamw_double_fma(p, gr, m, v, vm, b, e, &c));
        else EM__OPT_PARALLEL(sp->n, ADAMW_GRAIN, adamw_double(p, gr, m, v, vm, b, e, &c));
    }
}

/* Parameters on a device: the same scalars per span, and one call of the
 * backend's multi-tensor kernel, which runs the loop above operation for
 * operation (tensor_internal.h, em_adamw_span). */
static em_status adamw_update_device(const em_optimizer *o, const em__group *g, const em__span *sps, int n,
                                     em_device dev)
{
    const em_backend *be = em__backend((em_device_type)dev.type);
    if (!be || !be->adamw) {
        char b[16];
        return em__fail(EM_ERR_UNSUPPORTED, "em_optimizer_step: AdamW has no kernel on %s", em_device_str(dev, b));
    }
    if (n == 0) return EM_OK;
    em_adamw_span *a = em__malloc(sizeof *a * (size_t)n);
    if (!a) return EM_ERR_OOM;
    for (int k = 0; k < n; k++) {
        adamw_consts c = consts_of(o, g, &sps[k]);
        a[k] = (em_adamw_span){.p = sps[k].p, .g = sps[k].g, .m = sps[k].s[0], .v = sps[k].s[1],
                               .vmax = o->flag ? sps[k].s[2] : NULL, .n = sps[k].n, .dtype = sps[k].dtype,
                               .decay = c.decay, .w1 = c.w1, .beta2 = c.beta2, .w2 = c.w2, .bc2_sqrt = c.bc2_sqrt,
                               .neg_step = c.neg_step, .eps = c.eps, .sign = c.sign, .small = c.small};
    }
    em_status st = be->adamw(dev.index, a, n, em__opt_have_fma());
    em__free(a);
    return st;
}

static int adamw_n_state(const em_optimizer *o, const em__group *g) { return o->flag ? 3 : 2; }

static bool adamw_check(const em_optimizer *o, const em__group *g, const char *op)
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

/* ---- hyperparameters: betas, eps and the amsgrad switch ---- */
static void adamw_resolve(const em_param_group *pg, const em__group *d, em__group *g)
{
    g->hp[B1] = em__opt_value(pg->betas[0], d->hp[B1]);
    g->hp[B2] = em__opt_value(pg->betas[1], d->hp[B2]);
    g->hp[EPS] = em__opt_value(pg->eps, d->hp[EPS]);
}

static void adamw_to_public(const em_optimizer *o, const em__group *g, em_param_group *pg)
{
    pg->betas[0] = g->hp[B1], pg->betas[1] = g->hp[B2], pg->eps = g->hp[EPS];
}

static bool adamw_save_meta(const em_optimizer *o, const em__group *g, em__meta_out *out)
{
    return em__meta_put(out, "betas", "%.17g,%.17g", g->hp[B1], g->hp[B2]) &&
           em__meta_put(out, "eps", "%.17g", g->hp[EPS]) && em__meta_put(out, "amsgrad", "%s", o->flag ? "true" : "false");
}

static em_status adamw_load_meta(const em_optimizer *o, const em__meta_in *in, em__group *g)
{
    double betas[2];
    em_status s = em__meta_flag(in, "amsgrad", o->flag);
    if (!s) s = em__meta_pair(in, "betas", 0, 1, betas);
    if (!s) s = em__meta_num(in, "eps", 0, INFINITY, &g->hp[EPS]);
    if (!s) g->hp[B1] = betas[0], g->hp[B2] = betas[1];
    return s;
}

static const em__optim_kind adamw_kind = {
    .name = "AdamW",
    .state_names = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
    .has_step = true,
    .resolve = adamw_resolve,
    .to_public = adamw_to_public,
    .save_meta = adamw_save_meta,
    .load_meta = adamw_load_meta,
    .n_state = adamw_n_state,
    .check = adamw_check,
    .update = adamw_update,
    .update_device = adamw_update_device,
};

static em_optimizer *adamw_new(const em_param_group *groups, int n_groups, const em_adamw_opts *opts, const char *op)
{
    em_adamw_opts o = opts ? *opts : (em_adamw_opts){0};
    em__group d = {
        .lr = em__opt_value(o.lr, 1e-3),
        .hp[B1] = em__opt_value(o.betas[0], 0.9),
        .hp[B2] = em__opt_value(o.betas[1], 0.999),
        .hp[EPS] = em__opt_value(o.eps, 1e-8),
        .weight_decay = em__opt_value(o.weight_decay, 1e-2),
    };
    return em__optimizer_new(&adamw_kind, &d, o.amsgrad, o.maximize, groups, n_groups, op);
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
