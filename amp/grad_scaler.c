/* ember — GradScaler: dynamic loss scaling, as torch.amp.GradScaler
 * (amp.h "GradScaler"; reference §5.1; torch/amp/grad_scaler.py and
 * aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp).
 *
 * State: the scale (f32, as torch's 0-d float tensor), the growth tracker
 * (int32), and per key (an optimizer's address) since the last update: its
 * stage (READY, UNSCALED, STEPPED) and its found_inf (0 or 1, f32; one value
 * per key instead of torch's per-device map).
 *
 * Unscaling takes the gradient tensors it is given (amp/ calls neither
 * autograd nor optim; the loop's owner collects them). Contiguous f32/f64
 * gradients go to the op UNSCALE (tensor/fused.h), one call per stretch of
 * gradients on one device: one kernel over all of them and one read of its
 * found_inf flag, as torch's _amp_foreach_non_finite_check_and_unscale_. A
 * run of gradients that are adjacent views of one storage (a flat gradient
 * buffer) is passed as one view, so the CPU kernel makes one OpenMP pass.
 * Gradients with odd strides or other dtypes go through ordinary ops.
 */
#include "amp/amp.h"
#include "tensor/fused.h"
#include "tensor/construct.h"
#include "tensor/support.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { READY = 0, UNSCALED, STEPPED };

typedef struct opt_state {   /* one per key (an optimizer's address, never dereferenced) */
    const void *key;
    int stage;
    float found_inf;
    bool checked;        /* a gradient was seen: torch's non-empty found_inf_per_device */
    bool last_skipped;   /* kept across update(): em_grad_scaler_step_was_skipped */
} opt_state;

struct em_grad_scaler {
    bool enabled;
    float scale;
    double growth_factor, backoff_factor;
    int64_t growth_interval;
    int32_t growth_tracker;
    opt_state *opts;
    int n_opts, cap_opts;
    /* em_grad_scaler_scale made a scaled loss since the last unscale or
     * update: the gradients of its backward still carry the scale (read by
     * the loop's owner through em_grad_scaler_grads_scaled) */
    bool scaled_grads;
};

static const char unscaled_twice[] = "unscale_() has already been called on this optimizer since the last update().";
static const char unscale_after_step[] = "unscale_() is being called after step().";
static const char stepped_twice[] = "step() has already been called since the last update().";
static const char no_checks_opt[] = "No inf checks were recorded for this optimizer.";
static const char no_checks[] = "No inf checks were recorded prior to update.";
static const char fp16_grads[] = "Attempting to unscale FP16 gradients.";
static const char empty_state[] =
    "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler.";

/* ---- construction ------------------------------------------------------------------- */
em_grad_scaler *em_grad_scaler_new(const em_grad_scaler_opts *opts)
{
    static const char op[] = "em_grad_scaler_new";
    em_grad_scaler_opts o = opts ? *opts : (em_grad_scaler_opts){0};
    double init = o.init_scale != 0 ? o.init_scale : 65536.0;
    double growth = o.growth_factor != 0 ? o.growth_factor : 2.0;
    double backoff = o.backoff_factor != 0 ? o.backoff_factor : 0.5;
    int64_t interval = o.growth_interval != 0 ? o.growth_interval : 2000;
    EM_CHECK(growth > 1.0, op, "The growth factor must be > 1.0. (got %g)", growth);
    EM_CHECK(backoff < 1.0, op, "The backoff factor must be < 1.0. (got %g)", backoff);
    /* checked as the f32 it becomes: 1e39 was inf, 1e-50 was 0, and either left the scaler stuck */
    EM_CHECK((float)init >= FLT_MIN && isfinite((float)init), op,
             "init_scale must be a finite float32 of at least %g (the smallest normal float), got %g", (double)FLT_MIN,
             init);
    EM_CHECK(interval > 0, op, "growth_interval must be > 0, got %lld", (long long)interval);
    em_grad_scaler *s = em__calloc(1, sizeof *s);
    if (!s) return NULL;
    s->enabled = !o.disabled;
    s->scale = (float)init;
    s->growth_factor = growth;
    s->backoff_factor = backoff;
    s->growth_interval = interval;
    return s;
}

bool em_grad_scaler_grads_scaled(const em_grad_scaler *s, double *scale)
{
    if (!s || !s->enabled || !s->scaled_grads) return false;
    if (scale) *scale = s->scale;
    return true;
}

void em_grad_scaler_free(em_grad_scaler *s)
{
    if (!s) return;
    em__free(s->opts);
    em__free(s);
}

static opt_state *find(const em_grad_scaler *s, const void *key)
{
    for (int i = 0; i < s->n_opts; i++)
        if (s->opts[i].key == key) return &s->opts[i];
    return NULL;
}

/* key's record, made on first use (torch's defaultdict); NULL on OOM. */
static opt_state *record(em_grad_scaler *s, const void *key)
{
    opt_state *r = find(s, key);
    if (r) return r;
    if (s->n_opts == s->cap_opts) {
        int cap = s->cap_opts ? 2 * s->cap_opts : 4;
        opt_state *m = em__realloc(s->opts, sizeof *m * (size_t)cap);
        if (!m) return NULL;
        s->opts = m;
        s->cap_opts = cap;
    }
    r = &s->opts[s->n_opts++];
    *r = (opt_state){.key = key};
    return r;
}

/* ---- scale ---------------------------------------------------------------------------- */
em_tensor *em_grad_scaler_scale(em_grad_scaler *s, em_tensor *loss)
{
    EM_PROPAGATE_NULL(loss);
    EM_CHECK(s, "em_grad_scaler_scale", "the scaler is NULL");
    if (!s->enabled) return em__scope_adopt(em_retain(loss));
    EM_CHECK(em_dtype_is_float(loss->dtype), "em_grad_scaler_scale", "expected a floating-point loss, got %s %s",
             em_dtype_name(loss->dtype), em__shape_str(loss));
    /* torch: outputs * scale (a 0-d f32 tensor). A 0-d 16-bit loss promotes to
     * f32; a bigger one keeps its dtype, multiplied in f32. f64 stays f64. */
    em_dtype sdt = loss->dtype == EM_F64 ? EM_F64 : EM_F32;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *y = em_mul(loss, em_scalar((double)s->scale, sdt, loss->device));
    if (y && loss->ndim > 0 && loss->dtype != y->dtype) y = em_to_dtype(y, loss->dtype);
    if (y) r = em_keep(y);
    em_scope_end();
    if (r) s->scaled_grads = true;
    return r;
}

/* ---- unscale ---------------------------------------------------------------------------- */
/* Through ops (odd strides, other dtypes): non-finite iff g*0 has a NaN,
 * then g = g * inv in place. EM_OK or the op's failure. */
static em_status unscale_by_ops(em_tensor *g, float inv, bool *bad)
{
    em_status st = EM_OK;
    em_scope_begin();
    em_tensor *probe = em_sum(em_mul_scalar(g, 0.0), 0, NULL, false);
    em_tensor *host = probe ? em_to(probe, EM_CPU) : NULL;
    if (!host) st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
    else {
        if (isnan(em_item(host))) *bad = true;
        em_dtype sdt = g->dtype == EM_F64 ? EM_F64 : EM_F32;   /* torch's opmath */
        if (inv != 1.0f && !em_copy_(g, em_mul(g, em_scalar((double)inv, sdt, g->device))))
            st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
    }
    em_scope_end();
    return st;
}

/* A gradient the fused op takes: contiguous f32/f64 (the dtypes an
 * optimizer's parameters, and so their gradients, have). */
static bool fused_ok(em_tensor *g) { return em_is_contiguous(g) && (g->dtype == EM_F32 || g->dtype == EM_F64); }

/* The runs for one UNSCALE op: gradients of one device, where adjacent
 * contiguous gradients of one storage (a flat gradient buffer) are merged
 * into one run, so the kernel makes one pass over the buffer. A run is a
 * header in hdr[] (em__run_header: no allocation once hdr is made). */
typedef struct runs {
    em_tensor **t;   /* t[i] = &hdr[i] */
    em_tensor *hdr;
    int n;
    int64_t end;     /* the last run's end offset in its storage */
} runs;

static em_status flush_runs(runs *r, float inv, bool *bad)
{
    em_status st = em__unscale(r->t, r->n, inv, bad);
    r->n = 0;
    return st;
}

em_status em_grad_scaler_unscale_grads(em_grad_scaler *s, const void *key, int n, em_tensor *const *grads)
{
    static const char op[] = "em_grad_scaler_unscale_grads";
    if (!s || !key || n < 0 || (n > 0 && !grads)) {
        em__misuse(op, "the scaler, the key and the gradient array must be given (n = %d)", n);
        return EM_ERR_INVALID;
    }
    if (!s->enabled) return EM_OK;
    opt_state *r = record(s, key);
    if (!r) return em__fail(EM_ERR_OOM, "out of memory recording the optimizer's scaler state");
    if (r->stage == UNSCALED) { em__misuse(op, "%s", unscaled_twice); return EM_ERR_INVALID; }
    if (r->stage == STEPPED) { em__misuse(op, "%s", unscale_after_step); return EM_ERR_INVALID; }

    /* torch checks every gradient before touching any */
    for (int i = 0; i < n; i++) {
        em_tensor *gr = grads[i];
        if (gr && !em__live(gr, op)) return EM_ERR_INVALID;
        if (gr && gr->dtype == EM_F16) { em__misuse(op, "%s", fp16_grads); return EM_ERR_INVALID; }
    }

    float inv = (float)(1.0 / (double)s->scale);
    bool bad = !isfinite(inv), seen = false;   /* a scale that cannot be undone is a step skipped, not NaN weights */
    em_status st = EM_OK;
    runs rn = {0};
    if (n && (!(rn.t = em__malloc(sizeof *rn.t * (size_t)n)) || !(rn.hdr = em__malloc(sizeof *rn.hdr * (size_t)n)))) {
        em__free(rn.t);
        return EM_ERR_OOM;
    }
    for (int i = 0; i < n && st == EM_OK; i++) {
        em_tensor *gr = grads[i];
        if (!gr) continue;
        seen = true;
        if (!fused_ok(gr)) {
            st = unscale_by_ops(gr, inv, &bad);
            continue;
        }
        em_tensor *last = rn.n ? rn.t[rn.n - 1] : NULL;
        if (last && !em_device_eq(gr->device, last->device)) {
            if ((st = flush_runs(&rn, inv, &bad)) != EM_OK) break;
            last = NULL;
        }
        if (last && gr->storage == last->storage && gr->dtype == last->dtype && gr->offset == rn.end) {
            last->shape[0] += em_numel(gr);   /* grow the run over the next gradient */
        } else {
            em__run_header(&rn.hdr[rn.n], gr, em_numel(gr));
            rn.t[rn.n] = &rn.hdr[rn.n];
            rn.n++;
        }
        rn.end = gr->offset + em_numel(gr);
    }
    if (st == EM_OK) st = flush_runs(&rn, inv, &bad);
    em__free(rn.t);
    em__free(rn.hdr);
    if (st != EM_OK) return st;
    /* the gradients changed in place: a graph that saved one must notice */
    for (int i = 0; i < n; i++)
        if (grads[i]) grads[i]->storage->version++;
    r->found_inf = bad ? 1.0f : 0.0f;
    r->checked = seen;
    r->stage = UNSCALED;
    s->scaled_grads = false;
    return EM_OK;
}

/* ---- step and update ---------------------------------------------------------------------- */
em_status em_grad_scaler_prepare_step(em_grad_scaler *s, const void *key, int n, em_tensor *const *grads, bool *step)
{
    static const char op[] = "em_grad_scaler_prepare_step";
    if (step) *step = false;
    if (!s || !key || !step) {
        em__misuse(op, "the scaler, the key and step must not be NULL");
        return EM_ERR_INVALID;
    }
    if (!s->enabled) {
        *step = true;
        return EM_OK;
    }
    opt_state *r = record(s, key);
    if (!r) return em__fail(EM_ERR_OOM, "out of memory recording the optimizer's scaler state");
    if (r->stage == STEPPED) { em__misuse(op, "%s", stepped_twice); return EM_ERR_INVALID; }
    if (r->stage == READY) {
        em_status st = em_grad_scaler_unscale_grads(s, key, n, grads);
        if (st != EM_OK) return st;
        r = find(s, key);
    }
    if (!r->checked) { em__misuse(op, "%s", no_checks_opt); return EM_ERR_INVALID; }
    *step = r->found_inf == 0.0f;
    r->stage = STEPPED;
    r->last_skipped = !*step;
    return EM_OK;
}

bool em_grad_scaler_is_unscaled(const em_grad_scaler *s, const void *key)
{
    const opt_state *r = s ? find(s, key) : NULL;
    return r && r->stage == UNSCALED;
}

static void forget_steps(em_grad_scaler *s)
{
    s->scaled_grads = false;
    for (int i = 0; i < s->n_opts; i++) {
        s->opts[i].stage = READY;
        s->opts[i].found_inf = 0.0f;
        s->opts[i].checked = false;
    }
}

/* _amp_update_scale_cpu_: found_inf is the sum over optimizers. */
static void update_scale(em_grad_scaler *s, float found_inf)
{
    if (found_inf != 0.0f) {
        /* never below the smallest normal float: backing off through subnormals reached 0,
         * where 1/scale is inf, every gradient NaN, and growth never brings it back */
        float ns = (float)((double)s->scale * s->backoff_factor);
        s->scale = ns >= FLT_MIN ? ns : FLT_MIN;
        s->growth_tracker = 0;
        return;
    }
    int32_t successful = s->growth_tracker + 1;
    if (successful == s->growth_interval) {
        float grown = (float)((double)s->scale * s->growth_factor);
        if (isfinite(grown)) s->scale = grown;
        s->growth_tracker = 0;
    } else {
        s->growth_tracker = successful;
    }
}

void em_grad_scaler_update(em_grad_scaler *s)
{
    if (!s) { em__misuse("em_grad_scaler_update", "the scaler is NULL"); return; }
    if (!s->enabled) return;
    float found = 0.0f;
    int n = 0;
    for (int i = 0; i < s->n_opts; i++)
        if (s->opts[i].checked) found += s->opts[i].found_inf, n++;
    if (n == 0) { em__misuse("em_grad_scaler_update", "%s", no_checks); return; }
    update_scale(s, found);
    forget_steps(s);
}

void em_grad_scaler_update_to(em_grad_scaler *s, double new_scale)
{
    if (!s) { em__misuse("em_grad_scaler_update_to", "the scaler is NULL"); return; }
    if (!s->enabled) return;
    s->scale = (float)new_scale;
    forget_steps(s);
}

/* ---- queries ---------------------------------------------------------------------------- */
bool em_grad_scaler_step_was_skipped(const em_grad_scaler *s, const void *key)
{
    const opt_state *r = s ? find(s, key) : NULL;
    return r && r->last_skipped;
}

bool em_grad_scaler_is_enabled(const em_grad_scaler *s) { return s && s->enabled; }
double em_grad_scaler_get_scale(const em_grad_scaler *s) { return s && s->enabled ? (double)s->scale : 1.0; }
int64_t em_grad_scaler_growth_tracker(const em_grad_scaler *s) { return s && s->enabled ? s->growth_tracker : 0; }
double em_grad_scaler_get_growth_factor(const em_grad_scaler *s) { return s->growth_factor; }
double em_grad_scaler_get_backoff_factor(const em_grad_scaler *s) { return s->backoff_factor; }
int64_t em_grad_scaler_get_growth_interval(const em_grad_scaler *s) { return s->growth_interval; }
void em_grad_scaler_set_growth_factor(em_grad_scaler *s, double v) { s->growth_factor = v; }
void em_grad_scaler_set_backoff_factor(em_grad_scaler *s, double v) { s->backoff_factor = v; }
void em_grad_scaler_set_growth_interval(em_grad_scaler *s, int64_t v) { s->growth_interval = v; }

/* ---- state -------------------------------------------------------------------------------- */
em_grad_scaler_state em_grad_scaler_state_dict(const em_grad_scaler *s)
{
    if (!s || !s->enabled) return (em_grad_scaler_state){0};
    return (em_grad_scaler_state){.enabled = true, .scale = (double)s->scale, .growth_factor = s->growth_factor,
                                  .backoff_factor = s->backoff_factor, .growth_interval = s->growth_interval,
                                  .growth_tracker = s->growth_tracker};
}

em_status em_grad_scaler_load_state_dict(em_grad_scaler *s, const em_grad_scaler_state *st)
{
    if (!s || !st) {
        em__misuse("em_grad_scaler_load_state_dict", "the scaler and the state must not be NULL");
        return EM_ERR_INVALID;
    }
    if (!s->enabled) return EM_OK;
    if (!st->enabled) return em__fail(EM_ERR_INVALID, "%s", empty_state);
    s->scale = (float)st->scale;
    s->growth_factor = st->growth_factor;
    s->backoff_factor = st->backoff_factor;
    s->growth_interval = st->growth_interval;
    s->growth_tracker = (int32_t)st->growth_tracker;
    return EM_OK;
}

em_status em_grad_scaler_state_save(const em_grad_scaler *s, const char *path)
{
    if (!s || !path) {
        em__misuse("em_grad_scaler_state_save", "the scaler and the path must not be NULL");
        return EM_ERR_INVALID;
    }
    char v[5][40];
    const char *keys[7] = {"format", "enabled", "scale", "growth_factor", "backoff_factor", "growth_interval",
                           "_growth_tracker"};
    const char *vals[7] = {"ember.grad_scaler/1", s->enabled ? "true" : "false", v[0], v[1], v[2], v[3], v[4]};
    snprintf(v[0], sizeof v[0], "%.17g", (double)s->scale);
    snprintf(v[1], sizeof v[1], "%.17g", s->growth_factor);
    snprintf(v[2], sizeof v[2], "%.17g", s->backoff_factor);
    snprintf(v[3], sizeof v[3], "%lld", (long long)s->growth_interval);
    snprintf(v[4], sizeof v[4], "%lld", (long long)s->growth_tracker);
    return em_safetensors_save(path, 0, NULL, NULL, s->enabled ? 7 : 2, keys, vals);
}

static bool parse_double(const char *t, double *out)
{
    if (!t || !*t) return false;
    char *end;
    errno = 0;
    *out = strtod(t, &end);
    return *end == '\0' && errno == 0;
}

static bool parse_int(const char *t, int64_t lo, int64_t hi, int64_t *out)
{
    if (!t || !*t) return false;
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    if (*end || errno || v < lo || v > hi) return false;
    *out = v;
    return true;
}

em_status em_grad_scaler_state_load(em_grad_scaler *s, const char *path)
{
    if (!s || !path) {
        em__misuse("em_grad_scaler_state_load", "the scaler and the path must not be NULL");
        return EM_ERR_INVALID;
    }
    em_safetensors *f = NULL;
    em_status st = em_safetensors_open(path, &f);
    if (st != EM_OK) return st;
    const char *fmt = em_safetensors_metadata(f, "format"), *en = em_safetensors_metadata(f, "enabled");
    em_grad_scaler_state g = {0};
    const char *bad = NULL;
    if (!fmt || strcmp(fmt, "ember.grad_scaler/1") != 0) bad = "format";
    else if (!en || (strcmp(en, "true") != 0 && strcmp(en, "false") != 0)) bad = "enabled";
    else if ((g.enabled = strcmp(en, "true") == 0)) {
        if (!parse_double(em_safetensors_metadata(f, "scale"), &g.scale) || !((float)g.scale >= FLT_MIN) ||
            !isfinite((float)g.scale))   /* as the f32 it becomes (1e39 would be inf) */
            bad = "scale";
        else if (!parse_double(em_safetensors_metadata(f, "growth_factor"), &g.growth_factor) ||
                 !(g.growth_factor > 1.0) || !isfinite(g.growth_factor))
            bad = "growth_factor";
        else if (!parse_double(em_safetensors_metadata(f, "backoff_factor"), &g.backoff_factor) ||
                 !(g.backoff_factor < 1.0) || !(g.backoff_factor > 0))
            bad = "backoff_factor";
        else if (!parse_int(em_safetensors_metadata(f, "growth_interval"), 1, INT32_MAX, &g.growth_interval))
            bad = "growth_interval";
        else if (!parse_int(em_safetensors_metadata(f, "_growth_tracker"), 0, INT32_MAX, &g.growth_tracker))
            bad = "_growth_tracker";
    }
    em_safetensors_close(f);
    if (bad) return em__fail(EM_ERR_FORMAT, "%s: grad scaler state: missing or invalid \"%s\"", path, bad);
    st = em_grad_scaler_load_state_dict(s, &g);
    if (st != EM_OK) return em__fail(st, "%s: %s", path, empty_state);
    return EM_OK;
}
