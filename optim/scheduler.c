/* ember — LR schedulers: LambdaLR and transformers' warmup schedules
 * (contracts in optim.h). Every lambda is written the way the Python source
 * computes it, operation for operation, so the lr sequences are bit-identical. */
#include "optim/optim_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum sched_kind { K_LAMBDA, K_LINEAR, K_COSINE, K_CONSTANT } sched_kind;
static const char *const kind_names[] = {"lambda", "linear_with_warmup", "cosine_with_warmup",
                                         "constant_with_warmup"};

struct em_scheduler {
    em_optimizer *opt;   /* borrowed */
    sched_kind kind;
    em_lr_lambda fn;
    void *user;
    int64_t warmup, total;
    double cycles;
    int n_groups;
    double *base_lrs, *last_lrs;
    int64_t last_epoch;
};

/* _get_linear_schedule_with_warmup_lr_lambda */
static double linear_lambda(int64_t s, int64_t w, int64_t t)
{
    if (s < w) return (double)s / (double)(w > 1 ? w : 1);
    double r = (double)(t - s) / (double)(t - w > 1 ? t - w : 1);
    return r > 0.0 ? r : 0.0;   /* max(0.0, r) */
}

/* _get_cosine_schedule_with_warmup_lr_lambda (min_lr_rate 0: factor*1 + 0) */
static double cosine_lambda(int64_t s, int64_t w, int64_t t, double cycles)
{
    if (s < w) return (double)s / (double)(w > 1 ? w : 1);
    double progress = (double)(s - w) / (double)(t - w > 1 ? t - w : 1);
    double factor = 0.5 * (1.0 + cos(M_PI * cycles * 2.0 * progress));
    factor = factor * (1 - 0.0) + 0.0;
    return factor > 0 ? factor : 0.0;   /* max(0, factor) */
}

/* _get_constant_schedule_with_warmup_lr_lambda */
static double constant_lambda(int64_t s, int64_t w)
{
    if (s < w) return (double)s / (w > 1 ? (double)w : 1.0);
    return 1.0;
}

static double lambda_at(const em_scheduler *s, int64_t step)
{
    switch (s->kind) {
    case K_LINEAR: return linear_lambda(step, s->warmup, s->total);
    case K_COSINE: return cosine_lambda(step, s->warmup, s->total, s->cycles);
    case K_CONSTANT: return constant_lambda(step, s->warmup);
    default: return s->fn(step, s->user);
    }
}

/* lr = initial_lr * f(last_epoch) for every group. */
static void apply(em_scheduler *s)
{
    for (int g = 0; g < s->n_groups; g++) {
        double lr = s->base_lrs[g] * lambda_at(s, s->last_epoch);
        s->opt->groups[g].lr = lr;
        s->last_lrs[g] = lr;
    }
}

static em_scheduler *sched_new(em_optimizer *opt, sched_kind kind, const char *op)
{
    EM_CHECK(opt, op, "optimizer is NULL");
    em_scheduler *s = em__calloc(1, sizeof *s);
    if (!s) return NULL;
    s->opt = opt;
    s->kind = kind;
    s->n_groups = opt->n_groups;
    s->base_lrs = em__malloc(sizeof(double) * (size_t)s->n_groups);
    s->last_lrs = em__malloc(sizeof(double) * (size_t)s->n_groups);
    if (!s->base_lrs || !s->last_lrs) {
        em_scheduler_free(s);
        return NULL;
    }
    return s;
}

/* torch's LRScheduler.__init__ with last_epoch=-1: record initial_lr, then the
 * initial step (last_epoch 0). */
static em_scheduler *sched_start(em_scheduler *s)
{
    if (!s) return NULL;
    for (int g = 0; g < s->n_groups; g++) {
        em__group *G = &s->opt->groups[g];
        if (!G->has_initial_lr) {
            G->initial_lr = G->lr;
            G->has_initial_lr = true;
        }
        s->base_lrs[g] = G->initial_lr;
    }
    s->last_epoch = 0;
    apply(s);
    return s;
}

em_scheduler *em_lambda_lr_new(em_optimizer *opt, em_lr_lambda f, void *user)
{
    EM_CHECK(f, "em_lambda_lr_new", "the lr lambda is NULL");
    em_scheduler *s = sched_new(opt, K_LAMBDA, "em_lambda_lr_new");
    if (s) {
        s->fn = f;
        s->user = user;
    }
    return sched_start(s);
}

em_scheduler *em_linear_schedule_with_warmup(em_optimizer *opt, int64_t num_warmup_steps, int64_t num_training_steps)
{
    static const char *op = "em_linear_schedule_with_warmup";
    EM_CHECK(num_warmup_steps >= 0 && num_training_steps >= 0, op,
             "step counts must be >= 0 (num_warmup_steps %lld, num_training_steps %lld)", (long long)num_warmup_steps,
             (long long)num_training_steps);
    em_scheduler *s = sched_new(opt, K_LINEAR, op);
    if (s) {
        s->warmup = num_warmup_steps;
        s->total = num_training_steps;
    }
    return sched_start(s);
}

em_scheduler *em_cosine_schedule_with_warmup(em_optimizer *opt, int64_t num_warmup_steps, int64_t num_training_steps,
                                             double num_cycles)
{
    static const char *op = "em_cosine_schedule_with_warmup";
    EM_CHECK(num_warmup_steps >= 0 && num_training_steps >= 0, op,
             "step counts must be >= 0 (num_warmup_steps %lld, num_training_steps %lld)", (long long)num_warmup_steps,
             (long long)num_training_steps);
    double c = em__opt_value(num_cycles, 0.5);
    EM_CHECK(isfinite(c), op, "num_cycles must be finite, got %g", c);
    em_scheduler *s = sched_new(opt, K_COSINE, op);
    if (s) {
        s->warmup = num_warmup_steps;
        s->total = num_training_steps;
        s->cycles = c;
    }
    return sched_start(s);
}

em_scheduler *em_constant_schedule_with_warmup(em_optimizer *opt, int64_t num_warmup_steps)
{
    static const char *op = "em_constant_schedule_with_warmup";
    EM_CHECK(num_warmup_steps >= 0, op, "num_warmup_steps must be >= 0, got %lld", (long long)num_warmup_steps);
    em_scheduler *s = sched_new(opt, K_CONSTANT, op);
    if (s) s->warmup = num_warmup_steps;
    return sched_start(s);
}

static bool check_groups(const em_scheduler *s, const char *op)
{
    if (!s) {
        em__misuse(op, "scheduler is NULL");
        return false;
    }
    if (s->opt->n_groups != s->n_groups) {
        em__misuse(op, "the optimizer has %d parameter groups; the scheduler was made for %d", s->opt->n_groups,
                   s->n_groups);
        return false;
    }
    return true;
}

void em_scheduler_step(em_scheduler *s)
{
    if (!check_groups(s, "em_scheduler_step")) return;
    s->last_epoch++;
    apply(s);
}

double em_scheduler_get_last_lr(const em_scheduler *s, int group)
{
    if (!s) {
        em__misuse("em_scheduler_get_last_lr", "scheduler is NULL");
        return NAN;
    }
    if (group < 0 || group >= s->n_groups) {
        em__misuse("em_scheduler_get_last_lr", "group %d out of range: the scheduler has %d group%s", group,
                   s->n_groups, s->n_groups == 1 ? "" : "s");
        return NAN;
    }
    return s->last_lrs[group];
}

int64_t em_scheduler_last_epoch(const em_scheduler *s) { return s ? s->last_epoch : -1; }

void em_scheduler_free(em_scheduler *s)
{
    if (!s) return;
    em__free(s->base_lrs);
    em__free(s->last_lrs);
    em__free(s);
}

/* ---- state ----------------------------------------------------------------------------- */
#define FORMAT_SCHED "ember.scheduler/1"

/* "%.17g,%.17g,..." of n doubles (malloc'd). */
static char *join(const double *x, int n)
{
    char *s = em__malloc((size_t)n * 26 + 1);
    if (!s) return NULL;
    size_t k = 0;
    s[0] = 0;
    for (int i = 0; i < n; i++) k += (size_t)sprintf(s + k, i ? ",%.17g" : "%.17g", x[i]);
    return s;
}

/* Parses exactly n comma-separated finite doubles. */
static bool split(const char *s, double *x, int n)
{
    if (!s) return false;
    for (int i = 0; i < n; i++) {
        char *end;
        x[i] = strtod(s, &end);
        if (end == s || !isfinite(x[i]) || *end != (i == n - 1 ? '\0' : ',')) return false;
        s = end + 1;
    }
    return true;
}

em_status em_scheduler_state_save(const em_scheduler *s, const char *path)
{
    if (!s || !path) {
        em__misuse("em_scheduler_state_save", "scheduler and path must be given");
        return EM_ERR_INVALID;
    }
    char epoch[24];
    snprintf(epoch, sizeof epoch, "%lld", (long long)s->last_epoch);
    char *base = join(s->base_lrs, s->n_groups), *last = join(s->last_lrs, s->n_groups);
    em_status st = EM_ERR_OOM;
    if (base && last) {
        const char *keys[] = {"format", "kind", "last_epoch", "base_lrs", "last_lrs"};
        const char *vals[] = {FORMAT_SCHED, kind_names[s->kind], epoch, base, last};
        st = em_safetensors_save(path, 0, NULL, NULL, 5, keys, vals);
    }
    em__free(base);
    em__free(last);
    return st;
}

em_status em_scheduler_state_load(em_scheduler *s, const char *path)
{
    if (!s || !path) {
        em__misuse("em_scheduler_state_load", "scheduler and path must be given");
        return EM_ERR_INVALID;
    }
    em_safetensors *st = NULL;
    em_status r = em_safetensors_open(path, &st);
    if (r != EM_OK) return r;
    const char *fmt = em_safetensors_metadata(st, "format"), *kind = em_safetensors_metadata(st, "kind");
    const char *ep = em_safetensors_metadata(st, "last_epoch");
    double *base = em__malloc(sizeof(double) * (size_t)(s->n_groups + 1));
    double *last = em__malloc(sizeof(double) * (size_t)(s->n_groups + 1));
    char *end = NULL;
    long long epoch = ep ? strtoll(ep, &end, 10) : -1;
    if (!base || !last) r = EM_ERR_OOM;
    else if (!fmt || strcmp(fmt, FORMAT_SCHED) || !kind || !ep || end == ep || *end || epoch < 0)
        r = em__fail(EM_ERR_FORMAT, "%s: not an ember scheduler state (format=%s, last_epoch=%s)", path,
                     fmt ? fmt : "absent", ep ? ep : "absent");
    else if (strcmp(kind, kind_names[s->kind]))
        r = em__fail(EM_ERR_INVALID, "%s: a %s schedule cannot be loaded into a %s scheduler", path, kind,
                     kind_names[s->kind]);
    else if (!split(em_safetensors_metadata(st, "base_lrs"), base, s->n_groups) ||
             !split(em_safetensors_metadata(st, "last_lrs"), last, s->n_groups))
        r = em__fail(EM_ERR_INVALID, "%s: base_lrs/last_lrs do not hold %d finite lrs (one per group)", path,
                     s->n_groups);
    else {
        s->last_epoch = epoch;
        memcpy(s->base_lrs, base, sizeof(double) * (size_t)s->n_groups);
        memcpy(s->last_lrs, last, sizeof(double) * (size_t)s->n_groups);
    }
    em__free(base);
    em__free(last);
    em_safetensors_close(st);
    return r;
}
