/* ember — the optimizer base: param groups, state allocation, the fused step
 * loop, zero_grad, accessors, the weight-decay grouping rule, and state
 * save/load (contracts in optim.h).
 *
 * State layout: on the first step of a group (torch also allocates lazily),
 * each run of parameters that are adjacent in one storage (a flat parameter
 * buffer) gets ONE flat zeroed buffer per state kind, and each parameter's
 * state is a view of it. When the gradients of such a run are adjacent views
 * of one gradient buffer too, and the parameters share a step count, one
 * kernel call updates the whole run. */
#include "optim/optim_internal.h"
#include "autograd/autograd.h"
#include "tensor/grow.h"

#include <strings.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool em__opt_plain;

double em__opt_value(double v, double def)
{
    if (v == 0.0) return signbit(v) ? 0.0 : def;
    return v;
}

/* b starts where a ends, in the same storage, both contiguous and of one dtype. */
static bool follows(const em_tensor *a, const em_tensor *b)
{
    return a->storage == b->storage && a->dtype == b->dtype && em_is_contiguous(a) && em_is_contiguous(b) &&
           b->offset == a->offset + em_numel(a);
}

/* ---- construction ---------------------------------------------------------------- */
static em__group resolve(const em_optimizer *o, const em_param_group *pg, const em__group *d)
{
    em__group g = *d;
    g.n = 0;
    g.params = NULL;
    g.ps = NULL;
    g.n_alloc = 0;
    g.has_initial_lr = false;
    g.lr = em__opt_value(pg->lr, d->lr);
    g.weight_decay = em__opt_value(pg->weight_decay, d->weight_decay);
    o->kind->resolve(pg, d, &g);
    return g;
}

/* Misuse checks of one parameter: EM_OK, EM_ERR_INVALID after a misuse
 * message, or the pending error when p is NULL from an earlier failure. */
static em_status check_param(const em_optimizer *o, em_tensor *p, int g, int i, const char *op)
{
    if (!p) return em_last_status() != EM_OK ? em_last_status() : EM_ERR_INVALID;
    const char *why = !em_is_leaf(p)                               ? "is not a leaf (made by an op; optimize leaves)"
                      : p->dtype != EM_F32 && p->dtype != EM_F64 ? "is not f32 or f64 (master weights stay f32)"
                      : !em_is_contiguous(p)                       ? "is not contiguous"
                                                                   : NULL;
    if (why) {
        em__misuse(op, "parameter %d of group %d (%s %s) %s", i, g, em__shape_str(p), em_dtype_name(p->dtype), why);
        return EM_ERR_INVALID;
    }
    /* torch: "some parameters appear in more than one parameter group" */
    for (int h = 0; h < o->n_groups; h++)
        for (int j = 0; j < o->groups[h].n; j++)
            if (o->groups[h].params[j] == p) {
                em__misuse(op, "parameter %d of group %d (%s) is already in group %d", i, g, em__shape_str(p), h);
                return EM_ERR_INVALID;
            }
    return EM_OK;
}

/* Appends a group. EM_ERR_INVALID after misuse, EM_ERR_OOM. */
static em_status add_group(em_optimizer *o, const em_param_group *pg, const char *op)
{
    int gi = o->n_groups;
    if (pg->n_params < 0 || (pg->n_params > 0 && !pg->params)) {
        em__misuse(op, "group %d: %d parameters at %p", gi, pg->n_params, (const void *)pg->params);
        return EM_ERR_INVALID;
    }
    for (int i = 0; i < pg->n_params; i++) {
        em_status st = check_param(o, pg->params[i], gi, i, op);
        if (st != EM_OK) return st;
        for (int j = 0; j < i; j++)
            if (pg->params[j] == pg->params[i]) {
                em__misuse(op, "parameter %d of group %d (%s) is listed twice (as %d too)", i, gi,
                           em__shape_str(pg->params[i]), j);
                return EM_ERR_INVALID;
            }
    }
    em__group g = resolve(o, pg, &o->defaults);
    if (!o->kind->check(o, &g, op)) return EM_ERR_INVALID;
    if (o->n_groups == o->cap_groups) {
        int cap = o->cap_groups ? 2 * o->cap_groups : 4;
        em__group *ng = em__realloc(o->groups, sizeof *ng * (size_t)cap);
        if (!ng) return EM_ERR_OOM;
        o->groups = ng;
        o->cap_groups = cap;
    }
    size_t n = (size_t)(pg->n_params ? pg->n_params : 1);
    g.params = em__malloc(sizeof *g.params * n);
    g.ps = em__calloc(n, sizeof *g.ps);
    if (!g.params || !g.ps) {
        em__free(g.params);
        em__free(g.ps);
        return EM_ERR_OOM;
    }
    g.n = pg->n_params;
    for (int i = 0; i < g.n; i++) g.params[i] = em_retain(pg->params[i]);
    o->groups[o->n_groups++] = g;
    return EM_OK;
}

em_optimizer *em__optimizer_new(const em__optim_kind *k, const em__group *defaults, bool flag, bool maximize,
                                const em_param_group *groups, int n_groups, const char *op)
{
    EM_CHECK(n_groups > 0 && groups, op, "no parameter groups given (%d)", n_groups);
    int total = 0;
    for (int g = 0; g < n_groups; g++) total += groups[g].n_params > 0 ? groups[g].n_params : 0;
    EM_CHECK(total > 0, op, "got an empty parameter list (%d group%s, no parameters)", n_groups,
             n_groups == 1 ? "" : "s");
    em_optimizer *o = em__calloc(1, sizeof *o);
    if (!o) return NULL;
    o->kind = k;
    o->defaults = *defaults;
    o->flag = flag;
    o->maximize = maximize;
    if (!k->check(o, &o->defaults, op)) {
        em__free(o);
        return NULL;
    }
    for (int g = 0; g < n_groups; g++)
        if (add_group(o, &groups[g], op) != EM_OK) {
            em_optimizer_free(o);
            return NULL;
        }
    return o;
}

em_status em_optimizer_add_param_group(em_optimizer *o, const em_param_group *group)
{
    if (!o || !group) {
        em__misuse("em_optimizer_add_param_group", "optimizer and group must be given");
        return EM_ERR_INVALID;
    }
    return add_group(o, group, "em_optimizer_add_param_group");
}

void em_optimizer_free(em_optimizer *o)
{
    if (!o) return;
    for (int g = 0; g < o->n_groups; g++) {
        em__group *gr = &o->groups[g];
        for (int i = 0; i < gr->n; i++) {
            for (int s = 0; s < EM__OPT_MAX_STATE; s++) em_release(gr->ps[i].state[s]);
            em_release(gr->params[i]);
        }
        em__free(gr->params);
        em__free(gr->ps);
    }
    em__free(o->groups);
    em__free(o);
}

/* ---- state and step --------------------------------------------------------------- */
/* Makes sure every parameter of g has `need` state tensors (zeros). On OOM the
 * tensors added by this call are released and g is as before. */
static em_status alloc_state(em__group *g, int need)
{
    if (g->n_alloc >= need) return EM_OK;
    em_status st = EM_OK;
    em_scope_begin();
    for (int i = 0; i < g->n && st == EM_OK;) {
        int j = i + 1;
        int64_t total = em_numel(g->params[i]);
        while (j < g->n && follows(g->params[j - 1], g->params[j]) &&
               em_device_eq(g->params[j]->device, g->params[i]->device))
            total += em_numel(g->params[j++]);
        for (int k = g->n_alloc; k < need && st == EM_OK; k++) {
            em_tensor *flat = em_zeros(1, &total, g->params[i]->dtype, g->params[i]->device);
            int64_t off = 0;
            for (int q = i; q < j && flat; q++) {
                em_tensor *p = g->params[q];
                em_tensor *v = em_view(em_narrow(flat, 0, off, em_numel(p)), p->ndim, p->shape);
                if (!v) break;
                g->ps[q].state[k] = em_retain(v);
                off += em_numel(p);
            }
            if (!flat || off != total) st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
        }
        i = j;
    }
    em_scope_end();
    if (st != EM_OK) {
        for (int i = 0; i < g->n; i++)
            for (int k = g->n_alloc; k < EM__OPT_MAX_STATE; k++) {
                em_release(g->ps[i].state[k]);
                g->ps[i].state[k] = NULL;
            }
        return st;
    }
    g->n_alloc = need;
    return EM_OK;
}

/* Counts one update on the parameters of g in [from, to) that have a gradient. */
static void bump_steps(em__group *g, em_tensor *const *gr, int from, int to)
{
    for (int q = from; q < to; q++)
        if (gr[q]) {
            g->ps[q].step += 1;
            g->params[q]->storage->version++;
        }
}

/* Updates the parameters of g that have a gradient (gr[i], contiguous, or NULL),
 * one kernel call per run of adjacent parameters: the kind's CPU loop (update)
 * for CPU parameters when it has one; else the runs are collected in buf (room
 * for g->n) and updated by the kind's update_ops, one call per stretch of
 * parameters on one device. Fails only there; the parameters before the
 * failing call stay updated. */
static em_status step_group(const em_optimizer *o, em__group *g, em_tensor *const *gr, em__span *buf)
{
    int ns = o->kind->n_state(o, g);
    int nbuf = 0, from = 0;   /* buf: the runs of parameters [from, i) for update_ops */
    em_device bdev = EM_CPU;
#define FLUSH_OPS(to)                                                  \
    do {                                                               \
        if (nbuf) {                                                    \
            em_status st_ = o->kind->update_ops(o, g, buf, nbuf, bdev); \
            if (st_ != EM_OK) return st_;                              \
            bump_steps(g, gr, from, (to));                             \
            nbuf = 0;                                                  \
        }                                                              \
    } while (0)
    for (int i = 0; i < g->n;) {
        if (!gr[i]) {
            i++;
            continue;
        }
        em_tensor *p = g->params[i];
        if (nbuf && !em_device_eq(p->device, bdev)) FLUSH_OPS(i);
        em__span sp = {.p = em_data_ptr(p), .g = em_data_ptr(gr[i]), .tp = p, .tg = gr[i], .n = em_numel(p),
                       .dtype = p->dtype, .step = g->ps[i].step};
        for (int k = 0; k < ns; k++) sp.s[k] = em_data_ptr(sp.ts[k] = g->ps[i].state[k]);
        int j = i + 1;
        for (; j < g->n && gr[j] && g->ps[j].step == g->ps[i].step && follows(g->params[j - 1], g->params[j]) &&
               follows(gr[j - 1], gr[j]);
             j++) {
            bool ok = true;
            for (int k = 0; k < ns && ok; k++) ok = follows(g->ps[j - 1].state[k], g->ps[j].state[k]);
            if (!ok) break;
            sp.n += em_numel(g->params[j]);
        }
        if (p->device.type != EM_DEVICE_CPU || !o->kind->update) {
            if (!nbuf) from = i, bdev = p->device;
            buf[nbuf++] = sp;
        } else {
            if (sp.n > 0) o->kind->update(o, g, &sp);
            bump_steps(g, gr, i, j);
        }
        i = j;
    }
    FLUSH_OPS(g->n);
#undef FLUSH_OPS
    return EM_OK;
}

em_status em_optimizer_step(em_optimizer *o)
{
    if (!o) {
        em__misuse("em_optimizer_step", "optimizer is NULL");
        return EM_ERR_INVALID;
    }
    int total = 0;
    for (int g = 0; g < o->n_groups; g++) total += o->groups[g].n;
    em_tensor **gr = em__calloc((size_t)(total ? total : 1), sizeof *gr);
    if (!gr) return EM_ERR_OOM;
    em__span *buf = NULL;   /* spans for update_ops (step_group), made when a parameter needs it */
    em_status st = EM_OK;
    em_scope_begin();
    /* everything that can fail happens before the first update */
    for (int g = 0, q = 0; g < o->n_groups && st == EM_OK; g++) {
        em__group *G = &o->groups[g];
        for (int i = 0; i < G->n && st == EM_OK; i++, q++) {
            em_tensor *p = G->params[i], *gd = em_grad(p);
            if (!gd) continue;
            bool on_cpu = p->device.type == EM_DEVICE_CPU && gd->device.type == EM_DEVICE_CPU;
            if (!on_cpu || !o->kind->update) {
                char dev[16], gdev[16];
                if (!o->kind->update_ops) {
                    st = em__fail(EM_ERR_UNSUPPORTED, "em_optimizer_step: parameter %d of group %d is on %s; %s "
                                  "updates CPU parameters only", i, g, em_device_str(p->device, dev), o->kind->name);
                    break;
                }
                if (!em_device_eq(p->device, gd->device)) {
                    st = em__fail(EM_ERR_INVALID, "em_optimizer_step: parameter %d of group %d is on %s, its gradient "
                                  "on %s", i, g, em_device_str(p->device, dev), em_device_str(gd->device, gdev));
                    break;
                }
                if ((st = o->kind->update_ops(o, G, NULL, 0, p->device)) != EM_OK) break;
                if (!buf && !(buf = em__malloc(sizeof *buf * (size_t)total))) {
                    st = EM_ERR_OOM;
                    break;
                }
            }
            if (!em_is_contiguous(gd) && !(gd = em_contiguous(gd))) st = em_last_status();
            gr[q] = gd;
        }
        if (st == EM_OK) st = alloc_state(G, o->kind->n_state(o, G));
    }
    for (int g = 0, q = 0; g < o->n_groups && st == EM_OK; q += o->groups[g].n, g++)
        st = step_group(o, &o->groups[g], gr + q, buf);
    em_scope_end();
    em__free(gr);
    em__free(buf);
    return st;
}

void em_optimizer_zero_grad(em_optimizer *o) { em_optimizer_zero_grad_ex(o, true); }

/* Storage, then offset: gradients that are adjacent views of one buffer sort next to each other */
static int by_place(const void *a, const void *b)
{
    const em_tensor *x = *(em_tensor *const *)a, *y = *(em_tensor *const *)b;
    if (x->storage != y->storage) return (uintptr_t)x->storage < (uintptr_t)y->storage ? -1 : 1;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Zeroes the gradients: each run of them that lie end to end in one storage (a
 * flattened module's gradient buffer, whatever the groups' order) in one fill,
 * which streams past the caches when it is large (em_fill_), instead of one fill
 * a parameter. Only those gradients' elements are written. */
static void zero_grads(em_optimizer *o)
{
    int n = 0, k = 0;
    for (int g = 0; g < o->n_groups; g++) n += o->groups[g].n;
    em_tensor **gs = em__malloc(sizeof *gs * (size_t)(n ? n : 1));
    for (int g = 0; g < o->n_groups; g++)
        for (int i = 0; i < o->groups[g].n; i++) {
            em_tensor *gd = em_grad(o->groups[g].params[i]);
            if (!gd) continue;
            if (gs && em_is_contiguous(gd)) gs[k++] = gd;
            else em_fill_(gd, 0.0);
        }
    if (!gs) return;
    qsort(gs, (size_t)k, sizeof *gs, by_place);
    for (int i = 0; i < k;) {
        int j = i + 1;
        int64_t total = em_numel(gs[i]);
        while (j < k && follows(gs[j - 1], gs[j])) total += em_numel(gs[j++]);
        if (j == i + 1) em_fill_(gs[i], 0.0);
        else EM_SCOPE {
                em_tensor *run = em__view_of(gs[i], 1, &total, (const int64_t[]){1}, gs[i]->offset);
                if (run) em_fill_(run, 0.0);
                else   /* out of memory for a view header: one at a time */
                    for (int r = i; r < j; r++) em_fill_(gs[r], 0.0);
            }
        i = j;
    }
    em__free(gs);
}

void em_optimizer_zero_grad_ex(em_optimizer *o, bool set_to_none)
{
    if (!o) {
        em__misuse("em_optimizer_zero_grad", "optimizer is NULL");
        return;
    }
    EM_NO_GRAD {
        if (set_to_none)
            for (int g = 0; g < o->n_groups; g++)
                for (int i = 0; i < o->groups[g].n; i++)
                    if (em_grad(o->groups[g].params[i])) em_set_grad(o->groups[g].params[i], NULL);
        if (!set_to_none) zero_grads(o);
    }
}

/* ---- accessors ---------------------------------------------------------------------- */
static const em__group *group_at(const em_optimizer *o, int g, const char *op)
{
    if (!o) {
        em__misuse(op, "optimizer is NULL");
        return NULL;
    }
    if (g < 0 || g >= o->n_groups) {
        em__misuse(op, "group %d out of range: the optimizer has %d group%s", g, o->n_groups,
                   o->n_groups == 1 ? "" : "s");
        return NULL;
    }
    return &o->groups[g];
}

const char *em_optimizer_name(const em_optimizer *o) { return o ? o->kind->name : NULL; }
int em_optimizer_num_groups(const em_optimizer *o) { return o ? o->n_groups : 0; }

em_param_group em_optimizer_group(const em_optimizer *o, int g)
{
    const em__group *G = group_at(o, g, "em_optimizer_group");
    if (!G) return (em_param_group){0};
    em_param_group pg = {.params = G->params, .n_params = G->n, .lr = G->lr, .weight_decay = G->weight_decay};
    o->kind->to_public(o, G, &pg);
    return pg;
}

em_param_group em__module_group(em_module *m, const char *op)
{
    int n = 0;
    if (!m) em__misuse(op, "the module is NULL");
    em_tensor **ps = m ? em_module_parameters(m, &n) : NULL;
    return (em_param_group){.params = ps, .n_params = n};
}

em_tensor **em_optimizer_grads(const em_optimizer *o, int *n)
{
    *n = 0;
    if (!o) return NULL;
    int total = 0;
    for (int g = 0; g < o->n_groups; g++) total += o->groups[g].n;
    if (!total) return NULL;
    em_tensor **out = em__malloc(sizeof *out * (size_t)total);
    if (!out) {
        *n = -1;
        return NULL;
    }
    for (int g = 0; g < o->n_groups; g++)
        for (int i = 0; i < o->groups[g].n; i++) out[(*n)++] = em_grad(o->groups[g].params[i]);
    return out;
}

double em_optimizer_lr(const em_optimizer *o, int g)
{
    const em__group *G = group_at(o, g, "em_optimizer_lr");
    return G ? G->lr : NAN;
}

void em_optimizer_set_lr(em_optimizer *o, int g, double lr)
{
    const em__group *G = group_at(o, g, "em_optimizer_set_lr");
    if (!G) return;
    if (!(lr >= 0) || isinf(lr)) {
        em__misuse("em_optimizer_set_lr", "invalid learning rate %g for group %d (must be finite and >= 0)", lr, g);
        return;
    }
    o->groups[g].lr = lr;
}

double em_optimizer_param_step(const em_optimizer *o, int g, int i)
{
    const em__group *G = group_at(o, g, "em_optimizer_param_step");
    if (!G) return NAN;
    if (i < 0 || i >= G->n) {
        em__misuse("em_optimizer_param_step", "parameter %d out of range: group %d has %d", i, g, G->n);
        return NAN;
    }
    return G->ps[i].step;
}

/* ---- weight-decay grouping ------------------------------------------------------------ */
static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (!strncasecmp(hay, needle, n)) return true;
    return false;
}

bool em_param_no_decay(const char *name, const em_tensor *param)
{
    if (param && param->ndim <= 1) return true;
    if (!name) return false;
    if (contains_ci(name, "bias") || contains_ci(name, "layernorm") || contains_ci(name, "rmsnorm")) return true;
    /* dotted components: "norm" itself, or ending in "_norm" */
    for (const char *c = name;;) {
        const char *dot = strchr(c, '.');
        size_t len = dot ? (size_t)(dot - c) : strlen(c);
        if ((len == 4 && !strncasecmp(c, "norm", 4)) || (len >= 5 && !strncasecmp(c + len - 5, "_norm", 5)))
            return true;
        if (!dot) return false;
        c = dot + 1;
    }
}

int em_param_groups_no_decay(const char *const *names, em_tensor *const *params, int n, double weight_decay,
                             em_tensor **buf, em_param_group out[2])
{
    if (n < 0 || (n > 0 && (!names || !params || !buf)) || !out) {
        em__misuse("em_param_groups_no_decay", "names, params, buf and out must be given (n=%d)", n);
        return 0;
    }
    int nd = 0, k = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++)
            if (em_param_no_decay(names[i], params[i]) == (pass == 1)) buf[k++] = params[i];
        if (pass == 0) nd = k;
    }
    out[0] = (em_param_group){.params = buf, .n_params = nd, .weight_decay = weight_decay == 0 ? EM_ZERO : weight_decay};
    out[1] = (em_param_group){.params = buf + nd, .n_params = n - nd, .weight_decay = EM_ZERO};
    return 2;
}

/* ---- checkpoints ---------------------------------------------------------------------- */
#define FORMAT_OPT "ember.optimizer/1"

/* A growable list of malloc'd strings. */
typedef struct strlist {
    int n;
    int64_t cap;
    char **v;
} strlist;

static bool sl_add(strlist *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool sl_add(strlist *l, const char *fmt, ...)
{
    if (l->n == l->cap) {
        char **v = em__grow(l->v, sizeof *v, &l->cap, 32, em__realloc);
        if (!v) return false;
        l->v = v;
    }
    va_list ap, aq;
    va_start(ap, fmt);
    va_copy(aq, ap);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = len >= 0 ? em__malloc((size_t)len + 1) : NULL;
    if (s) vsnprintf(s, (size_t)len + 1, fmt, aq);
    va_end(aq);
    if (!s) return false;
    l->v[l->n++] = s;
    return true;
}

static void sl_free(strlist *l)
{
    for (int i = 0; i < l->n; i++) em__free(l->v[i]);
    em__free(l->v);
}

/* "first,first+1,...,first+n-1" */
static char *index_list(int first, int n)
{
    char *s = em__malloc((size_t)n * 12 + 1);
    if (!s) return NULL;
    size_t k = 0;
    s[0] = 0;
    for (int i = 0; i < n; i++) k += (size_t)sprintf(s + k, i ? ",%d" : "%d", first + i);
    return s;
}

/* ---- a kind's own keys (optim_internal.h) ---- */
struct em__meta_out {
    strlist *keys, *vals;
    int g;
};
struct em__meta_in {
    em_safetensors *st;
    const char *path;
    int g;
};

bool em__meta_put(em__meta_out *out, const char *name, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return sl_add(out->keys, "param_groups.%d.%s", out->g, name) && sl_add(out->vals, "%s", buf);
}

em_status em_optimizer_state_save(const em_optimizer *o, const char *path)
{
    if (!o || !path) {
        em__misuse("em_optimizer_state_save", "optimizer and path must be given");
        return EM_ERR_INVALID;
    }
    const em__optim_kind *K = o->kind;
    strlist names = {0}, keys = {0}, vals = {0};
    int total = 0;
    for (int g = 0; g < o->n_groups; g++) total += o->groups[g].n;
    em_tensor **ts = em__malloc(sizeof *ts * (size_t)(total * (EM__OPT_MAX_STATE + 1) + 1));
    bool ok = ts != NULL;
    em_status st = EM_OK;
    em_scope_begin();
    ok = ok && sl_add(&keys, "format") && sl_add(&vals, FORMAT_OPT) && sl_add(&keys, "optimizer") &&
         sl_add(&vals, "%s", K->name) && sl_add(&keys, "param_groups") && sl_add(&vals, "%d", o->n_groups);
    for (int g = 0, base = 0; g < o->n_groups && ok; base += o->groups[g].n, g++) {
        const em__group *G = &o->groups[g];
        char *list = index_list(base, G->n);
        ok = list && sl_add(&keys, "param_groups.%d.params", g) && sl_add(&vals, "%s", list);
        em__free(list);
#define META(key, ...) (ok = ok && sl_add(&keys, "param_groups.%d." key, g) && sl_add(&vals, __VA_ARGS__))
        META("lr", "%.17g", G->lr);
        if (G->has_initial_lr) META("initial_lr", "%.17g", G->initial_lr);
        META("weight_decay", "%.17g", G->weight_decay);
        META("maximize", "%s", o->maximize ? "true" : "false");
#undef META
        em__meta_out mo = {&keys, &vals, g};
        ok = ok && K->save_meta(o, G, &mo);
        int ns = K->n_state(o, G);
        for (int i = 0; i < G->n && ok; i++) {
            if (G->ps[i].step <= 0 || (ns == 0 && !K->has_step)) continue;
            if (K->has_step) {
                ts[names.n] = em_scalar((float)G->ps[i].step, EM_F32, EM_CPU);
                ok = ts[names.n] && sl_add(&names, "state.%d.step", base + i);
            }
            for (int k = 0; k < ns && ok; k++) {
                em_tensor *s = G->ps[i].state[k];   /* state on a GPU: a host copy (this scope's) */
                ts[names.n] = s->device.type == EM_DEVICE_CPU ? s : em_to(s, EM_CPU);
                ok = ts[names.n] && sl_add(&names, "state.%d.%s", base + i, K->state_names[k]);
            }
        }
    }
    if (!ok) st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
    else
        st = em_safetensors_save_checked(path, names.n, (const char *const *)names.v, ts, keys.n,
                                 (const char *const *)keys.v, (const char *const *)vals.v);
    em_scope_end();
    sl_free(&names);
    sl_free(&keys);
    sl_free(&vals);
    em__free(ts);
    return st;
}

static bool parse_num(const char *s, double *out)
{
    if (!s || !*s) return false;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool parse_bool(const char *s, bool *out)
{
    if (!s) return false;
    if (!strcmp(s, "true")) *out = true;
    else if (!strcmp(s, "false")) *out = false;
    else return false;
    return true;
}

static const char *meta_get(const em__meta_in *in, const char *name, char *key, size_t cap)
{
    snprintf(key, cap, "param_groups.%d.%s", in->g, name);
    return em_safetensors_metadata(in->st, key);
}

static em_status bad_meta(const em__meta_in *in, const char *key, const char *v)
{
    return em__fail(EM_ERR_FORMAT, "%s: metadata '%s' is missing or malformed (%s)", in->path, key, v ? v : "absent");
}

static em_status in_range(const em__meta_in *in, const char *key, double v, double lo, double hi)
{
    if (v >= lo && v < hi) return EM_OK;
    return em__fail(EM_ERR_INVALID, "%s: group %d has an out-of-range hyperparameter (%s = %g)", in->path, in->g,
                    key, v);
}

em_status em__meta_num(const em__meta_in *in, const char *name, double lo, double hi, double *out)
{
    char key[96];
    const char *v = meta_get(in, name, key, sizeof key);
    if (!v || !parse_num(v, out)) return bad_meta(in, key, v);
    return in_range(in, key, *out, lo, hi);
}

em_status em__meta_pair(const em__meta_in *in, const char *name, double lo, double hi, double out[2])
{
    char key[96], *end;
    const char *v = meta_get(in, name, key, sizeof key);
    if (!v) return bad_meta(in, key, v);
    out[0] = strtod(v, &end);
    if (end == v || *end != ',' || !isfinite(out[0]) || !parse_num(end + 1, &out[1])) return bad_meta(in, key, v);
    em_status s = in_range(in, key, out[0], lo, hi);
    return s ? s : in_range(in, key, out[1], lo, hi);
}

em_status em__meta_flag(const em__meta_in *in, const char *name, bool want)
{
    char key[96];
    bool flag;
    const char *v = meta_get(in, name, key, sizeof key);
    if (!v || !parse_bool(v, &flag)) return bad_meta(in, key, v);
    if (flag != want)
        return em__fail(EM_ERR_INVALID, "%s: saved with %s=%s, this optimizer has %s=%s", in->path, name, v, name,
                        want ? "true" : "false");
    return EM_OK;
}

/* Reads group g's hyperparameters from the file into ng (a copy of the group).
 * EM_OK, or a failure naming the key. */
static em_status load_group_meta(const em_optimizer *o, em_safetensors *st, const char *path, int g, em__group *ng,
                                 int *ids, int total)
{
    char key[96];
    const char *v;
    const em__optim_kind *K = o->kind;
#define GET(name) (snprintf(key, sizeof key, "param_groups.%d.%s", g, name), v = em_safetensors_metadata(st, key))
#define BAD_META() em__fail(EM_ERR_FORMAT, "%s: metadata '%s' is missing or malformed (%s)", path, key, v ? v : "absent")
    if (!GET("params")) return BAD_META();
    int n = 0;
    bool ids_ok = true;
    for (const char *c = v; *c;) {
        char *end;
        long id = strtol(c, &end, 10);
        if (end == c || (*end && *end != ',')) return BAD_META();
        ids_ok &= id >= 0 && id < total;
        if (n < ng->n) ids[n] = (int)id;
        n++;
        c = *end ? end + 1 : end;
    }
    if (n != ng->n)
        return em__fail(EM_ERR_INVALID, "%s: saved group %d has %d parameters, this optimizer's group %d has %d", path,
                        g, n, g, ng->n);
    if (!ids_ok) return BAD_META();
    if (!GET("lr") || !parse_num(v, &ng->lr)) return BAD_META();
    if (!GET("weight_decay") || !parse_num(v, &ng->weight_decay)) return BAD_META();
    ng->has_initial_lr = GET("initial_lr") != NULL;
    if (ng->has_initial_lr && !parse_num(v, &ng->initial_lr)) return BAD_META();
#undef GET
#undef BAD_META
    if (!(ng->lr >= 0 && ng->weight_decay >= 0 && (!ng->has_initial_lr || ng->initial_lr >= 0) &&
          isfinite(ng->lr) && isfinite(ng->weight_decay) && (!ng->has_initial_lr || isfinite(ng->initial_lr))))
        return em__fail(EM_ERR_INVALID, "%s: group %d has an out-of-range hyperparameter", path, g);
    em__meta_in mi = {st, path, g};
    em_status s = em__meta_flag(&mi, "maximize", o->maximize);
    return s ? s : K->load_meta(o, &mi, ng);
}

/* The first element of a loaded state tensor that is not finite (or, with
 * nonneg, below 0), or -1. */
static int64_t first_bad_state(em_tensor *x, bool nonneg)
{
    int64_t n = em_numel(x), found = -1;
    EM_SCOPE {
        em_tensor *c = em_contiguous(em_to_dtype(x, EM_F64));
        const double *v = c ? em_data_ptr(c) : NULL;
        for (int64_t i = 0; v && i < n && found < 0; i++)
            if (!isfinite(v[i]) || (nonneg && v[i] < 0)) found = i;
    }
    return found;
}

em_status em_optimizer_state_load(em_optimizer *o, const char *path)
{
    if (!o || !path) {
        em__misuse("em_optimizer_state_load", "optimizer and path must be given");
        return EM_ERR_INVALID;
    }
    const em__optim_kind *K = o->kind;
    enum { NK = EM__OPT_MAX_STATE + 1, STEP = EM__OPT_MAX_STATE };
    em_safetensors *st = NULL;
    em_status s = em_safetensors_open(path, &st);
    if (s != EM_OK) return s;
    int total = 0;
    for (int g = 0; g < o->n_groups; g++) total += o->groups[g].n;
    em__group *ng = em__calloc((size_t)o->n_groups, sizeof *ng);
    int *pos_of_id = em__malloc(sizeof(int) * (size_t)(total + 1));
    int *ids = em__malloc(sizeof(int) * (size_t)(total + 1));
    em_tensor **loaded = em__calloc((size_t)total * NK + 1, sizeof *loaded);
    em_scope_begin();
    if (!ng || !pos_of_id || !ids || !loaded) {
        s = EM_ERR_OOM;
        goto done;
    }
    const char *v = em_safetensors_metadata(st, "format"), *kind = em_safetensors_metadata(st, "optimizer");
    const char *ngs = em_safetensors_metadata(st, "param_groups");
    if (!v || strcmp(v, FORMAT_OPT) || !kind || !ngs) {
        s = em__fail(EM_ERR_FORMAT, "%s: not an ember optimizer state (metadata format=%s)", path, v ? v : "absent");
        goto done;
    }
    if (strcmp(kind, K->name)) {
        s = em__fail(EM_ERR_INVALID, "%s: the state of a %s optimizer cannot be loaded into %s", path, kind, K->name);
        goto done;
    }
    if (atoi(ngs) != o->n_groups) {
        s = em__fail(EM_ERR_INVALID, "%s: saved with %s parameter groups, this optimizer has %d", path, ngs,
                     o->n_groups);
        goto done;
    }
    for (int i = 0; i < total; i++) pos_of_id[i] = -1;
    for (int g = 0, base = 0; g < o->n_groups; base += o->groups[g].n, g++) {
        ng[g] = o->groups[g];
        if ((s = load_group_meta(o, st, path, g, &ng[g], ids, total)) != EM_OK) goto done;
        for (int i = 0; i < ng[g].n; i++) {
            if (pos_of_id[ids[i]] >= 0) {
                s = em__fail(EM_ERR_FORMAT, "%s: parameter index %d appears twice in param_groups", path, ids[i]);
                goto done;
            }
            pos_of_id[ids[i]] = base + i;
        }
    }
    /* position -> (group, index) */
    int *grp_of = ids;   /* reuse: ids is no longer needed */
    for (int g = 0, base = 0; g < o->n_groups; base += o->groups[g].n, g++)
        for (int i = 0; i < o->groups[g].n; i++) grp_of[base + i] = g;
    for (int t = 0; t < em_safetensors_count(st); t++) {
        const char *name = em_safetensors_name(st, t);
        char *end;
        long id = strncmp(name, "state.", 6) ? -1 : strtol(name + 6, &end, 10);
        int k = -1;
        if (id >= 0 && id < total && end != name + 6 && *end == '.') {
            if (K->has_step && !strcmp(end + 1, "step")) k = STEP;
            for (int q = 0; q < EM__OPT_MAX_STATE && k < 0; q++)
                if (K->state_names[q] && !strcmp(end + 1, K->state_names[q])) k = q;
        }
        int pos = k >= 0 ? pos_of_id[id] : -1, g = 0, i = 0;
        if (pos >= 0) {
            g = grp_of[pos];
            i = pos;
            for (int h = 0; h < g; h++) i -= o->groups[h].n;
        }
        if (pos < 0 || (k != STEP && k >= K->n_state(o, &ng[g]))) {
            s = em__fail(EM_ERR_INVALID, "%s: unexpected tensor '%s' for this %s optimizer", path, name, K->name);
            goto done;
        }
        em_tensor *x = em_safetensors_get(st, name), *p = o->groups[g].params[i];
        if (!x) {
            s = em_last_status();
            goto done;
        }
        bool shape_ok = k == STEP ? em_numel(x) == 1
                                  : x->ndim == p->ndim && !memcmp(x->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
        if (!shape_ok || !em_dtype_is_float(x->dtype)) {
            s = em__fail(EM_ERR_INVALID, "%s: '%s' is %s %s, but parameter %ld (group %d, index %d) is %s %s", path,
                         name, em__shape_str(x), em_dtype_name(x->dtype), id, g, i, em__shape_str(p),
                         em_dtype_name(p->dtype));
            goto done;
        }
        if (k == STEP && !(em_item(x) >= 0 && isfinite(em_item(x)))) {
            s = em__fail(EM_ERR_INVALID, "%s: '%s' = %g is not a step count", path, name, em_item(x));
            goto done;
        }
        /* a moment that is not finite (or a second moment below 0) would turn the
         * parameters into NaN at the next step: refused, as load_state refuses weights */
        const char *sn = k == STEP ? NULL : K->state_names[k];
        int64_t bad = k == STEP ? -1 : first_bad_state(x, sn && strstr(sn, "_sq"));
        if (bad >= 0) {
            s = em__fail(EM_ERR_INVALID, "%s: '%s' holds %s at element %lld: refusing to load it", path, name,
                         sn && strstr(sn, "_sq") ? "a non-finite or negative value" : "a non-finite value",
                         (long long)bad);
            goto done;
        }
        loaded[(size_t)pos * NK + (size_t)k] = x;
    }
    /* every parameter with state has all of it */
    for (int pos = 0; pos < total; pos++) {
        em_tensor **L = loaded + (size_t)pos * NK;
        int g = grp_of[pos], ns = K->n_state(o, &ng[g]), have = 0, need = ns + (K->has_step ? 1 : 0);
        for (int k = 0; k < NK; k++) have += L[k] != NULL;
        if (have && have != need) {
            int id = 0;
            while (pos_of_id[id] != pos) id++;
            s = em__fail(EM_ERR_INVALID, "%s: state.%d has %d of the %d tensors %s keeps per parameter", path, id,
                         have, need, K->name);
            goto done;
        }
    }
    for (int g = 0; g < o->n_groups; g++)
        if ((s = alloc_state(&o->groups[g], K->n_state(o, &ng[g]))) != EM_OK) goto done;
    /* apply: nothing fails from here on */
    EM_NO_GRAD {
        for (int g = 0, base = 0; g < o->n_groups; base += o->groups[g].n, g++) {
            em__group *G = &o->groups[g];
            G->lr = ng[g].lr;
            G->initial_lr = ng[g].initial_lr;
            G->has_initial_lr = ng[g].has_initial_lr;
            G->weight_decay = ng[g].weight_decay;
            memcpy(G->hp, ng[g].hp, sizeof G->hp);
            int ns = K->n_state(o, G);
            for (int i = 0; i < G->n; i++) {
                em_tensor **L = loaded + (size_t)(base + i) * NK;
                bool has = false;
                for (int k = 0; k < NK; k++) has |= L[k] != NULL;
                for (int k = 0; k < G->n_alloc; k++) {
                    if (has && k < ns) em_copy_(G->ps[i].state[k], L[k]);
                    else em_fill_(G->ps[i].state[k], 0.0);
                }
                G->ps[i].step = !has ? 0 : K->has_step ? em_item(L[STEP]) : 1;
            }
        }
    }
done:
    em_scope_end();
    em_safetensors_close(st);
    em__free(ng);
    em__free(pos_of_id);
    em__free(ids);
    em__free(loaded);
    return s;
}
