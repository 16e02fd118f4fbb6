/* ember — the registry of optimizer kinds: the one place that names them
 * all, and em_optimizer_new, which builds any of them by torch's class name.
 * A kind (optim_internal.h em__optim_kind) is one file of its own that
 * defines `const em__optim_kind em__<x>_kind`; registering it is one X(<x>)
 * below (and its file in optim/meson.build). optimizer.c names no kind. */
#include "optim/optim_internal.h"

#include <string.h>

#define EM__OPTIM_KINDS(X) X(sgd) X(adamw) X(adam)

#define DECLARE(x) extern const em__optim_kind em__##x##_kind;
EM__OPTIM_KINDS(DECLARE)
#undef DECLARE

static const em__optim_kind *const kinds[] = {
#define ROW(x) &em__##x##_kind,
    EM__OPTIM_KINDS(ROW)
#undef ROW
};

const em__optim_kind *em__optim_kind_named(const char *name)
{
    for (size_t i = 0; name && i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(kinds[i]->name, name)) return kinds[i];
    return NULL;
}

em_optimizer *em_optimizer_new(const char *kind, const em_param_group *groups, int n_groups,
                               const em_optimizer_opts *opts)
{
    static const char op[] = "em_optimizer_new";
    const em__optim_kind *k = em__optim_kind_named(kind);
    if (!k) {
        char names[256] = "";
        for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", kinds[i]->name);
        em__misuse(op, "unknown optimizer '%s' (ember has %s)", kind ? kind : "(null)", names);
        return NULL;
    }
    em_optimizer_opts o = opts ? *opts : (em_optimizer_opts){0};
    em__group d = k->defaults;
    d.lr = em__opt_value(o.defaults.lr, k->defaults.lr);
    d.weight_decay = em__opt_value(o.defaults.weight_decay, k->defaults.weight_decay);
    k->resolve(&o.defaults, &k->defaults, &d);
    return em__optimizer_new(k, &d, o.flag, o.maximize, groups, n_groups, op);
}
