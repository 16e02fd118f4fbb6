/* ember tests — amp/:
 *   - GradScaler against torch.amp.GradScaler on scripted finite/inf/-inf/NaN
 *     gradients (tests/fixtures/scaler_golden.safetensors, made by
 *     tools/make-scaler-fixture.py): unscaled gradients, found_inf, skipped
 *     steps, parameters, scale and growth tracker after every update, the
 *     final state_dict; torch's defaults over 2010 steps (growth after 2000
 *     clean steps), two optimizers, f32 overflow of the grown scale; with
 *     separate gradients and with gradients that are views of one flat
 *     buffer (the fused pass), bit for bit;
 *   - torch's error messages (misuse), disabled scalers, state save/load,
 *     strided gradients, unscale-before-clip;
 *   - a training run with injected inf/NaN gradients skips exactly those
 *     steps (parameters bit-identical, optimizer and scheduler not stepped);
 *     fp16 autocast with dynamic loss scaling on the CPU;
 *   - the autocast policy (matmul low precision, softmax/layer_norm/losses/
 *     reductions/exp/log/pow f32, others keep), promotion, nesting, f64 left
 *     alone; weights cast once per region (counted), recast after an in-place
 *     update, the cache bounded and emptied; gradients reach f32 master
 *     weights; no-grad casts do not poison a later grad-mode forward;
 *   - bf16 matmul within 1e-2 relative of f32 (layouts, batches), f16 within
 *     1e-3 (emulated in f32); the internal bf16 GEMM (oneDNN) exact on
 *     integer data for every transpose combination and both output dtypes;
 *   - a small DistilBERT trained under bf16 autocast ends within 2% of the f32
 *     run's loss.
 */
#include "check_util.h"
#include "tensor/cpu/cpu.h"
#include "tensor/tensor_internal.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------- */
static em_safetensors *open_fixture(void)
{
    em_safetensors *st = NULL;
    em_status s = em_safetensors_open(tu_fixture_path("scaler_golden.safetensors"), &st);
    ck_assert_msg(s == EM_OK, "cannot open the scaler fixture: %s", em_last_error());
    return st;
}

static const char *fmt_name(const char *fmt, va_list ap)
{
    static char name[160];
    vsnprintf(name, sizeof name, fmt, ap);
    return name;
}

static em_tensor *get(em_safetensors *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static em_tensor *get(em_safetensors *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *name = fmt_name(fmt, ap);
    va_end(ap);
    em_tensor *t = em_safetensors_get(st, name);
    ck_assert_msg(t != NULL, "fixture has no tensor %s: %s", name, em_last_error());
    return t;
}

static const char *meta(em_safetensors *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *meta(em_safetensors *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *name = fmt_name(fmt, ap);
    va_end(ap);
    const char *v = em_safetensors_metadata(st, name);
    ck_assert_msg(v != NULL, "fixture has no metadata %s", name);
    return v;
}

static bool same_shape(const em_tensor *a, const em_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* Bit-level equality of values (NaN matches NaN; the sign of inf counts). */
static void expect_equal(const char *what, int step, em_tensor *got, em_tensor *want)
{
    ck_assert_msg(same_shape(got, want), "%s step %d: shape %s, want %s", what, step, em__shape_str(got),
                  em__shape_str(want));
    double *g = tu_to_doubles(got), *w = tu_to_doubles(want);
    for (int64_t i = 0; i < em_numel(want); i++) {
        bool ok = isnan(w[i]) ? isnan(g[i]) : g[i] == w[i];
        if (!ok) ck_abort_msg("%s step %d [%lld]: got %.9g, want %.9g", what, step, (long long)i, g[i], w[i]);
    }
    free(g);
    free(w);
}

/* ||got - want|| / ||want|| (2-norms over all elements). */
static double rel_err(em_tensor *got, em_tensor *want)
{
    ck_assert(same_shape(got, want));
    double *g = tu_to_doubles(got), *w = tu_to_doubles(want), num = 0, den = 0;
    for (int64_t i = 0; i < em_numel(want); i++) {
        num += (g[i] - w[i]) * (g[i] - w[i]);
        den += w[i] * w[i];
    }
    free(g);
    free(w);
    return sqrt(num / (den > 0 ? den : 1));
}

static bool bits_equal(em_tensor *a, em_tensor *b)
{
    ck_assert(same_shape(a, b) && a->dtype == b->dtype);
    em_tensor *ca = em_contiguous(a), *cb = em_contiguous(b);
    bool eq = !memcmp(em_data_ptr(ca), em_data_ptr(cb), (size_t)em_numel(a) * em_dtype_size(a->dtype));
    return eq;
}

/* A leaf parameter (requires grad) with U[-r, r) values. */
static em_tensor *param(int ndim, const int64_t *shape, double r, uint64_t seed)
{
    return em_requires_grad_(tu_rand_tensor(ndim, shape, EM_F32, -r, r, seed, NULL), true);
}

/* ---- GradScaler vs torch ----------------------------------------------------------------- */
#define MAXO 2
#define MAXP 4

static void run_scenario(const char *name, bool flat)
{
    em_safetensors *fx = open_fixture();
    em_scope_begin();
    double init, growth, backoff, lrs[MAXO] = {0};
    long long interval;
    ck_assert_int_eq(sscanf(meta(fx, "%s.opts", name), "%lf,%lf,%lf,%lld", &init, &growth, &backoff, &interval), 4);
    int n_opts = atoi(meta(fx, "%s.n_opts", name)), steps = atoi(meta(fx, "%s.steps", name));
    ck_assert(n_opts >= 1 && n_opts <= MAXO && steps > 0);
    ck_assert_int_eq(sscanf(meta(fx, "%s.lr", name), "%lf,%lf", &lrs[0], &lrs[1]), n_opts);

    em_grad_scaler *sc = em_grad_scaler_new(&(em_grad_scaler_opts){
        .init_scale = init, .growth_factor = growth, .backoff_factor = backoff, .growth_interval = interval});
    ck_assert_ptr_nonnull(sc);
    expect_equal("scaled_loss", -1, em_grad_scaler_scale(sc, em_scalar(1.2345, EM_F32, EM_CPU)),
                 get(fx, "%s.scaled_loss", name));

    em_tensor *P[MAXO][MAXP], *G[MAXO][MAXP], *grads[MAXO][MAXP], *unscaled[MAXO][MAXP], *params[MAXO][MAXP];
    int np[MAXO];
    em_optimizer *opt[MAXO];
    for (int o = 0; o < n_opts; o++) {
        np[o] = atoi(meta(fx, "%s.n_params.%d", name, o));
        ck_assert(np[o] >= 1 && np[o] <= MAXP);
        int64_t total = 0;
        for (int i = 0; i < np[o]; i++) {
            P[o][i] = em_requires_grad_(em_clone(get(fx, "%s.init.%d.p%d", name, o, i)), true);
            grads[o][i] = get(fx, "%s.grad.%d.p%d", name, o, i);
            unscaled[o][i] = get(fx, "%s.unscaled.%d.p%d", name, o, i);
            params[o][i] = get(fx, "%s.param.%d.p%d", name, o, i);
            total += em_numel(P[o][i]);
        }
        if (flat) {   /* gradients: adjacent views of one buffer */
            em_tensor *buf = em_zeros(1, &total, EM_F32, EM_CPU);
            int64_t off = 0;
            for (int i = 0; i < np[o]; i++) {
                G[o][i] = em_view(em_narrow(buf, 0, off, em_numel(P[o][i])), P[o][i]->ndim, P[o][i]->shape);
                em_set_grad(P[o][i], G[o][i]);
                off += em_numel(P[o][i]);
            }
        }
        opt[o] = em_sgd_new(P[o], np[o], &(em_sgd_opts){.lr = lrs[o]});
        ck_assert_ptr_nonnull(opt[o]);
    }
    em_tensor *scale = get(fx, "%s.scale", name), *tracker = get(fx, "%s.tracker", name);
    em_tensor *found[MAXO], *stepped_ref[MAXO];
    for (int o = 0; o < n_opts; o++) {
        found[o] = get(fx, "%s.found_inf.%d", name, o);
        stepped_ref[o] = get(fx, "%s.stepped.%d", name, o);
    }

    for (int t = 0; t < steps; t++) {
        em_scope_begin();
        for (int o = 0; o < n_opts; o++)
            for (int i = 0; i < np[o]; i++) {
                em_tensor *g = em_select(grads[o][i], 0, t);
                if (flat) em_copy_(G[o][i], g);
                else em_set_grad(P[o][i], em_clone(g));
            }
        for (int o = 0; o < n_opts; o++) {
            ck_assert_int_eq(em_grad_scaler_unscale_(sc, opt[o]), EM_OK);
            for (int i = 0; i < np[o]; i++)
                expect_equal("unscaled grad", t, em_grad(P[o][i]), em_select(unscaled[o][i], 0, t));
            bool stepped = false;
            ck_assert_int_eq(em_grad_scaler_step(sc, opt[o], &stepped), EM_OK);
            int64_t idx = t;
            ck_assert_msg(stepped == (em_get(stepped_ref[o], &idx) != 0), "%s step %d opt %d: stepped %d", name, t,
                          o, stepped);
            ck_assert(em_grad_scaler_step_was_skipped(sc, opt[o]) == (em_get(found[o], &idx) != 0));
            for (int i = 0; i < np[o]; i++) expect_equal("param", t, P[o][i], em_select(params[o][i], 0, t));
        }
        em_grad_scaler_update(sc);
        int64_t idx = t;
        ck_assert_msg(em_grad_scaler_get_scale(sc) == em_get(scale, &idx), "%s step %d: scale %.9g, want %.9g", name,
                      t, em_grad_scaler_get_scale(sc), em_get(scale, &idx));
        ck_assert_msg(em_grad_scaler_growth_tracker(sc) == (int64_t)em_get(tracker, &idx),
                      "%s step %d: tracker %lld, want %g", name, t, (long long)em_grad_scaler_growth_tracker(sc),
                      em_get(tracker, &idx));
        em_scope_end();
    }
    em_grad_scaler_state sd = em_grad_scaler_state_dict(sc);
    double want[5];
    ck_assert_int_eq(sscanf(meta(fx, "%s.state_dict", name), "%lf,%lf,%lf,%lf,%lf", &want[0], &want[1], &want[2],
                            &want[3], &want[4]), 5);
    ck_assert(sd.enabled);
    ck_assert(sd.scale == want[0] && sd.growth_factor == want[1] && sd.backoff_factor == want[2]);
    ck_assert(sd.growth_interval == (int64_t)want[3] && sd.growth_tracker == (int64_t)want[4]);
    for (int o = 0; o < n_opts; o++) em_optimizer_free(opt[o]);
    em_grad_scaler_free(sc);
    em_scope_end();
    em_safetensors_close(fx);
}

START_TEST(scaler_matches_torch)
{
    static const char *const names[] = {"interval3", "two_opts", "overflow", "defaults"};
    for (int flat = 0; flat < 2; flat++)
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) run_scenario(names[i], flat);
}
END_TEST

/* ---- GradScaler: the rest of its contract ----------------------------------------------------- */
/* One SGD over a [3] parameter whose gradient is g (owned like op results). */
static em_optimizer *one_param(em_tensor **p, double g)
{
    *p = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true);
    em_set_grad(*p, em_full(EM_SHAPE(3), g, EM_F32, EM_CPU));
    return em_sgd_new(p, 1, &(em_sgd_opts){.lr = 0.5});
}

START_TEST(scaler_defaults_and_disabled)
{
    em_scope_begin();
    em_grad_scaler *s = em_grad_scaler_new(NULL);
    ck_assert(em_grad_scaler_is_enabled(s));
    ck_assert(em_grad_scaler_get_scale(s) == 65536.0 && em_grad_scaler_growth_tracker(s) == 0);
    ck_assert(em_grad_scaler_get_growth_factor(s) == 2.0 && em_grad_scaler_get_backoff_factor(s) == 0.5);
    ck_assert(em_grad_scaler_get_growth_interval(s) == 2000);
    em_tensor *loss = em_scalar(0.75, EM_F32, EM_CPU);
    ck_assert(em_item(em_grad_scaler_scale(s, loss)) == 0.75 * 65536.0);
    /* a 0-d bf16 loss promotes to f32 (torch: 0-d * 0-d f32); a [2] one keeps bf16 */
    ck_assert_int_eq(em_grad_scaler_scale(s, em_scalar(1.0, EM_BF16, EM_CPU))->dtype, EM_F32);
    ck_assert_int_eq(em_grad_scaler_scale(s, em_ones(EM_SHAPE(2), EM_BF16, EM_CPU))->dtype, EM_BF16);
    em_grad_scaler_free(s);

    s = em_grad_scaler_new(&(em_grad_scaler_opts){.disabled = true});
    ck_assert(!em_grad_scaler_is_enabled(s));
    ck_assert(em_grad_scaler_get_scale(s) == 1.0);
    ck_assert_ptr_eq(em_grad_scaler_scale(s, loss), loss);
    em_tensor *p;
    em_optimizer *opt = one_param(&p, INFINITY);
    bool stepped = false;
    ck_assert_int_eq(em_grad_scaler_unscale_(s, opt), EM_OK);
    ck_assert(isinf(em_get(em_grad(p), (int64_t[]){0})));   /* untouched */
    ck_assert_int_eq(em_grad_scaler_step(s, opt, &stepped), EM_OK);
    ck_assert(stepped);                                       /* a disabled scaler always steps */
    em_grad_scaler_update(s);
    ck_assert(!em_grad_scaler_state_dict(s).enabled);
    em_optimizer_free(opt);
    em_grad_scaler_free(s);
    em_scope_end();
}
END_TEST

START_TEST(scaler_state_save_load)
{
    em_scope_begin();
    char path[] = "/tmp/ember_scaler_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    em_grad_scaler *a = em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 3.0, .growth_interval = 5});
    em_tensor *p;
    em_optimizer *opt = one_param(&p, 6.0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(em_grad_scaler_step(a, opt, NULL), EM_OK);
        em_grad_scaler_update(a);
    }
    ck_assert_int_eq(em_grad_scaler_growth_tracker(a), 3);
    ck_assert_int_eq(em_grad_scaler_state_save(a, path), EM_OK);
    em_grad_scaler *b = em_grad_scaler_new(NULL);
    ck_assert_int_eq(em_grad_scaler_state_load(b, path), EM_OK);
    em_grad_scaler_state sa = em_grad_scaler_state_dict(a), sb = em_grad_scaler_state_dict(b);
    ck_assert(sa.scale == sb.scale && sa.growth_factor == sb.growth_factor && sa.backoff_factor == sb.backoff_factor);
    ck_assert(sa.growth_interval == sb.growth_interval && sa.growth_tracker == sb.growth_tracker);
    ck_assert(sb.scale == 3.0 && sb.growth_interval == 5 && sb.growth_tracker == 3);
    /* two more clean steps: both grow at the same step */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(em_grad_scaler_step(b, opt, NULL), EM_OK);
        em_grad_scaler_update(b);
    }
    ck_assert(em_grad_scaler_get_scale(b) == 6.0 && em_grad_scaler_growth_tracker(b) == 0);

    /* a disabled scaler's state cannot be loaded into an enabled one (torch's RuntimeError) */
    em_grad_scaler *off = em_grad_scaler_new(&(em_grad_scaler_opts){.disabled = true});
    ck_assert_int_eq(em_grad_scaler_state_save(off, path), EM_OK);
    ck_assert_int_eq(em_grad_scaler_state_load(b, path), EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "possibly because it was saved from a disabled instance"));
    ck_assert(em_grad_scaler_get_scale(b) == 6.0);   /* unchanged */
    ck_assert_int_eq(em_grad_scaler_state_load(off, path), EM_OK);   /* no-op on a disabled one */

    /* not a scaler state: a malformed file is EM_ERR_FORMAT and changes nothing */
    const char *keys[] = {"format", "enabled", "scale"}, *vals[] = {"ember.grad_scaler/1", "true", "abc"};
    ck_assert_int_eq(em_safetensors_save(path, 0, NULL, NULL, 3, keys, vals), EM_OK);
    ck_assert_int_eq(em_grad_scaler_state_load(b, path), EM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "scale"));
    ck_assert(em_grad_scaler_get_scale(b) == 6.0);
    ck_assert_int_ne(em_grad_scaler_state_load(b, "/nonexistent/scaler.safetensors"), EM_OK);
    /* a scale the f32 scaler cannot hold (inf once narrowed, or subnormal): refused the same way */
    for (int k = 0; k < 2; k++) {
        const char *keys7[] = {"format", "enabled", "scale", "growth_factor", "backoff_factor", "growth_interval",
                               "_growth_tracker"};
        const char *vals7[] = {"ember.grad_scaler/1", "true", k ? "1e-45" : "1e39", "2", "0.5", "2000", "0"};
        ck_assert_int_eq(em_safetensors_save(path, 0, NULL, NULL, 7, keys7, vals7), EM_OK);
        ck_assert_int_eq(em_grad_scaler_state_load(b, path), EM_ERR_FORMAT);
        ck_assert_ptr_nonnull(strstr(em_last_error(), "scale"));
        ck_assert(em_grad_scaler_get_scale(b) == 6.0);
    }

    /* load_state_dict through the struct, and update_to */
    em_grad_scaler_state st = {.enabled = true, .scale = 128, .growth_factor = 3, .backoff_factor = 0.25,
                               .growth_interval = 7, .growth_tracker = 2};
    ck_assert_int_eq(em_grad_scaler_load_state_dict(b, &st), EM_OK);
    ck_assert(em_grad_scaler_get_scale(b) == 128 && em_grad_scaler_get_growth_factor(b) == 3);
    em_grad_scaler_update_to(b, 0.1);
    ck_assert(em_grad_scaler_get_scale(b) == (double)0.1f && em_grad_scaler_growth_tracker(b) == 2);
    unlink(path);
    em_grad_scaler_free(a);
    em_grad_scaler_free(b);
    em_grad_scaler_free(off);
    em_optimizer_free(opt);
    em_scope_end();
}
END_TEST

/* Gradients that are not contiguous views go through ops; the result is the same. */
START_TEST(scaler_strided_grads)
{
    em_scope_begin();
    em_tensor *p = em_requires_grad_(em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU), true);
    double ref[6];
    em_tensor *gt = tu_rand_tensor(EM_SHAPE(3, 2), EM_F32, -100, 100, 11, ref);
    em_tensor *g = em_transpose(gt, 0, 1);   /* [2,3], strides (1,2) */
    ck_assert(!em_is_contiguous(g));
    em_set_grad(p, g);
    em_optimizer *opt = em_sgd_new(&p, 1, NULL);
    em_grad_scaler *s = em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 4.0});
    ck_assert_int_eq(em_grad_scaler_unscale_(s, opt), EM_OK);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            double want = (double)((float)ref[j * 2 + i] * 0.25f);
            ck_assert(em_get(em_grad(p), (int64_t[]){i, j}) == want);
        }
    bool stepped;
    ck_assert_int_eq(em_grad_scaler_step(s, opt, &stepped), EM_OK);
    ck_assert(stepped);
    em_grad_scaler_update(s);
    /* now a NaN in the strided gradient: found, skipped */
    em_set(gt, (int64_t[]){2, 1}, NAN);
    double before = em_get(p, (int64_t[]){1, 2});
    ck_assert_int_eq(em_grad_scaler_step(s, opt, &stepped), EM_OK);
    ck_assert(!stepped && em_grad_scaler_step_was_skipped(s, opt));
    ck_assert(em_get(p, (int64_t[]){1, 2}) == before);
    em_grad_scaler_update(s);
    ck_assert(em_grad_scaler_get_scale(s) == 2.0);
    em_optimizer_free(opt);
    em_grad_scaler_free(s);
    em_scope_end();
}
END_TEST

/* em_grad_scaler_clip_grad_norm unscales first, and step() then does not unscale again. */
START_TEST(scaler_clip_unscales_first)
{
    em_scope_begin();
    em_tensor *p;
    em_optimizer *opt = one_param(&p, 3.0 * 1024);   /* true gradient 3 per element: norm 3*sqrt(3) */
    em_grad_scaler *s = em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 1024});
    double total = 0;
    ck_assert_int_eq(em_grad_scaler_clip_grad_norm(s, opt, 1.0, &total), EM_OK);
    ck_assert_double_eq_tol(total, 3.0 * sqrt(3.0), 1e-5);
    double g = em_get(em_grad(p), (int64_t[]){0});
    ck_assert_double_eq_tol(g, 1.0 / sqrt(3.0), 1e-5);
    ck_assert_int_eq(em_grad_scaler_step(s, opt, NULL), EM_OK);
    ck_assert_double_eq_tol(em_get(p, (int64_t[]){0}), 1.0 - 0.5 / sqrt(3.0), 1e-5);
    em_grad_scaler_update(s);
    em_optimizer_free(opt);
    em_grad_scaler_free(s);
    em_scope_end();
}
END_TEST

/* Clipping before unscaling is the Accelerator's to catch (it owns the
 * loop's scaler; amp/ only scales): em_clip_grad_norm on gradients that an
 * fp16 accelerator's backward scaled warns once, naming the scale. */
START_TEST(scaler_warns_clip_before_unscale)
{
    em_scope_begin();
    em_tensor *p = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true);
    em_optimizer *opt = em_sgd_new(&p, 1, &(em_sgd_opts){.lr = 0.5});
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){.mixed_precision = EM_MP_FP16, .cpu = true,
                                                                    .scaler = {.init_scale = 1024}});
    ck_assert_int_eq(em_accelerator_prepare_optimizer(acc, opt), EM_OK);
    double total;
    em_tensor *loss = NULL;
    /* the right order: the accelerator's clip unscales first; no warning, the true norm */
    EM_AUTOCAST(acc) { loss = em_mul_scalar(em_sum(p, 0, NULL, false), 3.0); }   /* d loss / dp = 3 */
    ck_assert_int_eq(em_accelerator_backward(acc, loss), EM_OK);
    ck_assert(em_get(em_grad(p), (int64_t[]){0}) == 3.0 * 1024);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    total = em_accelerator_clip_grad_norm(acc, NULL, 100.0);
    char *err = tu_capture_stderr_end();
    ck_assert_ptr_nonnull(err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 0);
    free(err);
    ck_assert_double_eq_tol(total, 3.0 * sqrt(3.0), 1e-5);
    ck_assert_int_eq(em_accelerator_optimizer_step(acc, opt), EM_OK);
    em_accelerator_optimizer_zero_grad(acc, opt);
    /* the mistake: clip straight after the scaled backward, twice */
    EM_AUTOCAST(acc) { loss = em_mul_scalar(em_sum(p, 0, NULL, false), 3.0); }   /* d loss / dp = 3 */
    ck_assert_int_eq(em_accelerator_backward(acc, loss), EM_OK);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    ck_assert_int_eq(em_clip_grad_norm(&p, 1, 100.0, NULL, &total), EM_OK);
    double first = total;
    ck_assert_int_eq(em_clip_grad_norm(&p, 1, 100.0, NULL, &total), EM_OK);
    err = tu_capture_stderr_end();
    ck_assert_ptr_nonnull(err);
    ck_assert_msg(tu_count_of(err, "ember: warning: em_clip_grad_norm:") == 1, "stderr: %s", err);
    ck_assert_ptr_nonnull(strstr(err, "loss scale (1024)"));
    ck_assert_ptr_nonnull(strstr(err, "em_grad_scaler_unscale_(scaler, opt)"));
    ck_assert_ptr_nonnull(strstr(err, "em_accelerator_clip_grad_norm"));
    free(err);
    /* what the warning is about: the scaled norm, 1024x the true one, was clipped */
    ck_assert_double_eq_tol(first, 1024 * 3.0 * sqrt(3.0), 1e-2);
    em_accelerator_free(acc);
    em_optimizer_free(opt);
    em_scope_end();
}
END_TEST

/* ---- misuse: torch's messages ------------------------------------------------------------------ */
/* A default GradScaler in *s and an SGD over one parameter with a gradient. */
static em_optimizer *scaled_sgd(em_grad_scaler **s)
{
    em_tensor *p;
    em_optimizer *opt = one_param(&p, 1.0);
    *s = em_grad_scaler_new(NULL);
    return opt;
}

TU_MISUSE(misuse_unscale_twice, "unscale_() has already been called on this optimizer since the last update().",
          em_grad_scaler *s; em_optimizer *opt = scaled_sgd(&s); em_grad_scaler_unscale_(s, opt);
          em_grad_scaler_unscale_(s, opt))
TU_MISUSE(misuse_unscale_after_step, "unscale_() is being called after step().",
          em_grad_scaler *s; em_optimizer *opt = scaled_sgd(&s); em_grad_scaler_step(s, opt, NULL);
          em_grad_scaler_unscale_(s, opt))
TU_MISUSE(misuse_step_twice, "step() has already been called since the last update().",
          em_grad_scaler *s; em_optimizer *opt = scaled_sgd(&s); em_grad_scaler_step(s, opt, NULL);
          em_grad_scaler_step(s, opt, NULL))
TU_MISUSE(misuse_update_without_checks, "No inf checks were recorded prior to update.",
          em_grad_scaler_update(em_grad_scaler_new(NULL)))
TU_MISUSE(misuse_step_without_grads, "No inf checks were recorded for this optimizer.",
          em_tensor *p = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true);
          em_grad_scaler_step(em_grad_scaler_new(NULL), em_sgd_new(&p, 1, NULL), NULL))
TU_MISUSE(misuse_growth_factor, "The growth factor must be > 1.0.",
          em_grad_scaler_new(&(em_grad_scaler_opts){.growth_factor = 0.9}))
TU_MISUSE(misuse_backoff_factor, "The backoff factor must be < 1.0.",
          em_grad_scaler_new(&(em_grad_scaler_opts){.backoff_factor = 1.5}))

TU_MISUSE(misuse_init_scale_overflows_f32, "init_scale must be a finite float32",
          em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 1e39}))
TU_MISUSE(misuse_init_scale_underflows_f32, "init_scale must be a finite float32",
          em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 1e-50}))

/* Hundreds of overflowing steps in a row back the scale off to the smallest
 * normal float, never to 0 (where 1/scale is inf, every unscaled gradient NaN,
 * and growth never brings it back); clean steps then step and grow again. */
START_TEST(scaler_backoff_stops_at_the_smallest_normal)
{
    em_scope_begin();
    em_grad_scaler *sc = em_grad_scaler_new(&(em_grad_scaler_opts){.growth_interval = 1});
    em_tensor *p;
    em_optimizer *opt = one_param(&p, 1.0);
    for (int i = 0; i < 300; i++) {
        em_set_grad(p, em_full(EM_SHAPE(3), INFINITY, EM_F32, EM_CPU));
        ck_assert_int_eq(em_grad_scaler_step(sc, opt, NULL), EM_OK);
        em_grad_scaler_update(sc);
    }
    ck_assert_msg(em_grad_scaler_get_scale(sc) >= FLT_MIN, "scale %g", em_grad_scaler_get_scale(sc));
    double before = em_grad_scaler_get_scale(sc);
    em_set_grad(p, em_full(EM_SHAPE(3), 1e-30, EM_F32, EM_CPU));
    ck_assert_int_eq(em_grad_scaler_step(sc, opt, NULL), EM_OK);
    ck_assert(!em_grad_scaler_step_was_skipped(sc, opt));
    ck_assert(isfinite(em_get(p, (int64_t[]){0})));
    em_grad_scaler_update(sc);
    ck_assert(em_grad_scaler_get_scale(sc) > before);
    em_grad_scaler_free(sc);
    em_optimizer_free(opt);
    em_scope_end();
}
END_TEST

/* ---- a training run with injected inf/NaN gradients ----------------------------------------------- */
#define MLP_N 32
#define MLP_IN 8
#define MLP_H 16
#define MLP_C 3

typedef struct mlp {
    em_tensor *w1, *b1, *w2, *b2, *x, *y;
} mlp;

static mlp mlp_new(uint64_t seed)
{
    mlp m;
    m.w1 = param(EM_SHAPE(MLP_IN, MLP_H), 0.5, seed + 1);
    m.b1 = param(EM_SHAPE(MLP_H), 0.1, seed + 2);
    m.w2 = param(EM_SHAPE(MLP_H, MLP_C), 0.5, seed + 3);
    m.b2 = param(EM_SHAPE(MLP_C), 0.1, seed + 4);
    m.x = tu_rand_tensor(EM_SHAPE(MLP_N, MLP_IN), EM_F32, -1, 1, seed + 5, NULL);
    int64_t lab[MLP_N];
    for (int i = 0; i < MLP_N; i++) lab[i] = (i * 7 + 3) % MLP_C;
    m.y = em_from_data(lab, EM_SHAPE(MLP_N), EM_I64);
    return m;
}

static em_tensor *mlp_loss(const mlp *m)
{
    em_tensor *h = em_gelu(em_add(em_matmul(m->x, m->w1), m->b1));
    em_tensor *logits = em_add(em_matmul(h, m->w2), m->b2);
    return em_cross_entropy(logits, m->y, -100, EM_REDUCE_MEAN);
}

START_TEST(training_skips_injected_steps)
{
    em_scope_begin();
    mlp m = mlp_new(100);
    em_tensor *ps[4] = {m.w1, m.b1, m.w2, m.b2};
    em_optimizer *opt = em_adamw_new(ps, 4, &(em_adamw_opts){.lr = 1e-2});
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, 0, 40);   /* no warmup: step 0 has lr > 0 */
    em_grad_scaler *s = em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 1024, .growth_interval = 4});
    /* 0: none, 1: an inf in a gradient, 2: a NaN, 3: -inf */
    static const int inject[16] = {0, 0, 0, 1, 0, 0, 0, 2, 3, 0, 0, 0, 0, 1, 0, 0};
    double first = 0, last = 0, scale_ref = 1024;
    int tracker_ref = 0, n_stepped = 0;
    for (int t = 0; t < 16; t++) {
        em_scope_begin();
        em_tensor *before[4];
        for (int i = 0; i < 4; i++) before[i] = em_clone(ps[i]);
        em_tensor *loss = mlp_loss(&m);
        if (t == 0) first = em_item(loss);
        last = em_item(loss);
        em_backward(em_grad_scaler_scale(s, loss));
        if (t == 0) {
            /* unscaling a power-of-two scale gives the true gradients bit for bit */
            em_tensor *g_scaled = em_clone(em_grad(m.w1));
            em_set_grad(m.w1, NULL);
            em_set_grad(m.b1, NULL);
            em_set_grad(m.w2, NULL);
            em_set_grad(m.b2, NULL);
            em_backward(mlp_loss(&m));
            em_tensor *g_true = em_clone(em_grad(m.w1));
            em_set_grad(m.w1, NULL);
            em_set_grad(m.b1, NULL);
            em_set_grad(m.w2, NULL);
            em_set_grad(m.b2, NULL);
            em_backward(em_grad_scaler_scale(s, mlp_loss(&m)));
            ck_assert(bits_equal(em_grad(m.w1), g_scaled));
            ck_assert_int_eq(em_grad_scaler_unscale_(s, opt), EM_OK);
            ck_assert(bits_equal(em_grad(m.w1), g_true));
        }
        static const double bad[4] = {0, INFINITY, NAN, -INFINITY};
        if (inject[t]) em_set(em_grad(inject[t] == 2 ? m.b1 : m.w2), (int64_t[]){1, 2}, bad[inject[t]]);
        if (inject[t] == 2) em_set(em_grad(m.b1), (int64_t[]){5}, NAN);
        bool stepped = false;
        ck_assert_int_eq(em_grad_scaler_step(s, opt, &stepped), EM_OK);
        if (stepped) em_scheduler_step(sched);   /* no scheduler step on a skipped step */
        em_grad_scaler_update(s);
        ck_assert_msg(stepped == !inject[t], "step %d: stepped %d", t, stepped);
        ck_assert(em_grad_scaler_step_was_skipped(s, opt) == (inject[t] != 0));
        for (int i = 0; i < 4; i++) ck_assert_msg(bits_equal(ps[i], before[i]) == !stepped, "step %d param %d", t, i);
        /* the scale, by the rule */
        if (inject[t]) scale_ref *= 0.5, tracker_ref = 0;
        else if (++tracker_ref == 4) scale_ref *= 2, tracker_ref = 0;
        n_stepped += stepped;
        ck_assert(em_grad_scaler_get_scale(s) == scale_ref && em_grad_scaler_growth_tracker(s) == tracker_ref);
        em_optimizer_zero_grad(opt);
        em_scope_end();
    }
    ck_assert_int_eq(n_stepped, 12);
    ck_assert(em_optimizer_param_step(opt, 0, 0) == 12);
    ck_assert_int_eq(em_scheduler_last_epoch(sched), 12);
    ck_assert_msg(last < first, "loss %g -> %g", first, last);
    em_scheduler_free(sched);
    em_optimizer_free(opt);
    em_grad_scaler_free(s);
    em_scope_end();
}
END_TEST

/* fp16 autocast with dynamic loss scaling, on the CPU (Accelerate ignores fp16 there). */
START_TEST(fp16_training_on_cpu)
{
    em_scope_begin();
    mlp m = mlp_new(200);
    em_tensor *ps[4] = {m.w1, m.b1, m.w2, m.b2};
    em_optimizer *opt = em_adamw_new(ps, 4, &(em_adamw_opts){.lr = 1e-2});
    /* a scale so large that the first backward overflows f16: the scaler must back off */
    em_grad_scaler *s = em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 1e9});
    double first = 0, last = 0;
    int skipped = 0;
    for (int t = 0; t < 30; t++) {
        em_scope_begin();
        em_tensor *loss;
        EM_AUTOCAST_REGION(EM_F16)
        {
            ck_assert_int_eq(em_matmul(m.x, m.w1)->dtype, EM_F16);
            loss = mlp_loss(&m);
        }
        ck_assert_int_eq(loss->dtype, EM_F32);
        if (t == 0) first = em_item(loss);
        last = em_item(loss);
        em_backward(em_grad_scaler_scale(s, loss));
        ck_assert_int_eq(em_grad(m.w1)->dtype, EM_F32);   /* master weights' gradients */
        bool stepped;
        ck_assert_int_eq(em_grad_scaler_step(s, opt, &stepped), EM_OK);
        skipped += !stepped;
        em_grad_scaler_update(s);
        em_optimizer_zero_grad(opt);
        em_scope_end();
    }
    ck_assert_msg(skipped >= 1 && skipped < 20, "skipped %d", skipped);
    ck_assert(em_grad_scaler_get_scale(s) < 1e9);
    ck_assert_msg(last < first, "loss %g -> %g", first, last);
    em_optimizer_free(opt);
    em_grad_scaler_free(s);
    em_scope_end();
}
END_TEST

/* ---- autocast policy ---------------------------------------------------------------------------- */
START_TEST(autocast_policy)
{
    em_scope_begin();
    em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 8), EM_F32, -1, 1, 1, NULL);
    em_tensor *w = tu_rand_tensor(EM_SHAPE(8, 5), EM_F32, -1, 1, 2, NULL);
    em_tensor *lw = em_ones(EM_SHAPE(5), EM_F32, EM_CPU), *lb = em_zeros(EM_SHAPE(5), EM_F32, EM_CPU);
    int64_t tg[4] = {0, 1, 4, 2};
    em_tensor *target = em_from_data(tg, EM_SHAPE(4), EM_I64);
    ck_assert(!em_autocast_enabled() && em_autocast_depth() == 0 && em_autocast_dtype() == EM_F32);
    EM_AUTOCAST_REGION(EM_BF16)
    {
        ck_assert(em_autocast_enabled() && em_autocast_depth() == 1 && em_autocast_dtype() == EM_BF16);
        em_tensor *y = em_matmul(x, w);
        ck_assert_int_eq(y->dtype, EM_BF16);
        /* f32 ops */
        ck_assert_int_eq(em_softmax(y, -1)->dtype, EM_F32);
        ck_assert_int_eq(em_log_softmax(y, -1)->dtype, EM_F32);
        ck_assert_int_eq(em_layer_norm(y, lw, lb, 1e-5, NULL, NULL)->dtype, EM_F32);
        ck_assert_int_eq(em_layer_norm(y, NULL, NULL, 1e-5, NULL, NULL)->dtype, EM_F32);
        ck_assert_int_eq(em_cross_entropy(y, target, -100, EM_REDUCE_MEAN)->dtype, EM_F32);
        ck_assert_int_eq(em_sum(y, 0, NULL, false)->dtype, EM_F32);
        ck_assert_int_eq(em_mean(y, EM_DIMS(1), false)->dtype, EM_F32);
        ck_assert_int_eq(em_var(y, EM_DIMS(1), 1, false)->dtype, EM_F32);
        ck_assert_int_eq(em_logsumexp(y, EM_DIMS(1), false)->dtype, EM_F32);
        ck_assert_int_eq(em_norm(y, 2, 0, NULL, false)->dtype, EM_F32);
        ck_assert_int_eq(em_exp(y)->dtype, EM_F32);
        ck_assert_int_eq(em_log(em_abs(y))->dtype, EM_F32);
        ck_assert_int_eq(em_rsqrt(em_abs(y))->dtype, EM_F32);
        ck_assert_int_eq(em_pow(em_abs(y), y)->dtype, EM_F32);
        ck_assert_int_eq(em_pow_scalar(y, 2)->dtype, EM_F32);
        /* the exponent is not rounded to bf16 first: 1/3 in f32 */
        em_tensor *two = em_full(EM_SHAPE(1), 2.0, EM_BF16, EM_CPU);
        ck_assert(em_item(em_pow_scalar(two, 1.0 / 3.0)) == (double)powf(2.0f, (float)(1.0 / 3.0)));
        /* ops in no list keep their input dtype */
        ck_assert_int_eq(em_gelu(y)->dtype, EM_BF16);
        ck_assert_int_eq(em_relu(y)->dtype, EM_BF16);
        ck_assert_int_eq(em_tanh(y)->dtype, EM_BF16);
        ck_assert_int_eq(em_mul_scalar(y, 3)->dtype, EM_BF16);
        ck_assert_int_eq(em_max_all(y)->dtype, EM_BF16);
        ck_assert_int_eq(em_dropout(y, 0.5, 1, 0, NULL)->dtype, EM_BF16);
        /* promotion: bf16 with f32 computes in f32 */
        ck_assert_int_eq(em_add(y, lb)->dtype, EM_F32);
        ck_assert_int_eq(em_gt(y, em_zeros(EM_SHAPE(5), EM_F32, EM_CPU))->dtype, EM_BOOL);
        /* f64 is never cast */
        em_tensor *x64 = em_to_dtype(x, EM_F64), *w64 = em_to_dtype(w, EM_F64);
        ck_assert_int_eq(em_matmul(x64, w64)->dtype, EM_F64);
        ck_assert_int_eq(em_softmax(x64, -1)->dtype, EM_F64);
        /* integers are never cast */
        ck_assert_int_eq(em_sum(target, 0, NULL, false)->dtype, EM_I64);
        /* values: softmax of the bf16 product equals softmax of its f32 value exactly */
        ck_assert(bits_equal(em_softmax(y, -1), em_softmax(em_to_dtype(y, EM_F32), -1)));
        ck_assert_double_le(rel_err(em_to_dtype(y, EM_F32), em_matmul(em_to_dtype(em_to_dtype(x, EM_BF16), EM_F32),
                                                                      em_to_dtype(em_to_dtype(w, EM_BF16), EM_F32))),
                            1e-2);
        /* nesting */
        EM_AUTOCAST_REGION(EM_F32)
        {
            ck_assert(!em_autocast_enabled() && em_autocast_depth() == 2);
            ck_assert_int_eq(em_matmul(x, w)->dtype, EM_F32);
            ck_assert_int_eq(em_softmax(y, -1)->dtype, EM_BF16);   /* off: runs in its input dtype */
            EM_AUTOCAST_REGION(EM_F16) { ck_assert_int_eq(em_matmul(x, w)->dtype, EM_F16); }
        }
        ck_assert_int_eq(em_matmul(x, w)->dtype, EM_BF16);
        ck_assert_int_eq(em_autocast_output_f32(y)->dtype, EM_F32);
        ck_assert_ptr_eq(em_autocast_output_f32(x), x);
    }
    ck_assert(!em_autocast_enabled() && em_autocast_depth() == 0);
    /* outside: no policy, but the promotion stays */
    ck_assert_int_eq(em_matmul(x, w)->dtype, EM_F32);
    ck_assert_int_eq(em_softmax(em_to_dtype(x, EM_BF16), -1)->dtype, EM_BF16);
    ck_assert_int_eq(em_mul(em_to_dtype(x, EM_BF16), x)->dtype, EM_F32);
    ck_assert_int_eq(em_sub(em_to_dtype(x, EM_F16), em_to_dtype(x, EM_BF16))->dtype, EM_F32);
    em_scope_end();
}
END_TEST

/* Promotion is differentiable: each input gets its gradient in its own dtype. */
START_TEST(promotion_gradients)
{
    em_scope_begin();
    em_tensor *a = em_requires_grad_(em_full(EM_SHAPE(3), 1.5, EM_BF16, EM_CPU), true);
    em_tensor *b = em_requires_grad_(em_full(EM_SHAPE(3), 0.25, EM_F32, EM_CPU), true);
    em_tensor *y = em_mul(a, b);
    ck_assert_int_eq(y->dtype, EM_F32);
    em_backward(em_sum(y, 0, NULL, false));
    ck_assert_int_eq(em_grad(a)->dtype, EM_BF16);
    ck_assert_int_eq(em_grad(b)->dtype, EM_F32);
    ck_assert(em_get(em_grad(a), (int64_t[]){1}) == 0.25 && em_get(em_grad(b), (int64_t[]){2}) == 1.5);
    em_scope_end();
}
END_TEST

/* f32 + bf16 (and - , either order, f16 too, broadcast) on the CPU runs as one
 * add: no cast op, the same bits as casting first (forward and both
 * gradients, the half operand's gradient back in its dtype). */
START_TEST(mixed_add_without_cast)
{
    const em_dtype halves[2] = {EM_BF16, EM_F16};
    for (int hi = 0; hi < 2; hi++)
        for (int op = 0; op < 2; op++)
            for (int order = 0; order < 2; order++)
                for (int bcast = 0; bcast < 2; bcast++) EM_SCOPE {
                        em_dtype ht = halves[hi];
                        int64_t fs[2] = {33, 70}, hs[2] = {bcast ? 1 : 33, 70};
                        em_tensor *f = param(2, fs, 3.0, 11 + (uint64_t)hi), *h0 = param(2, hs, 3.0, 21 + (uint64_t)op);
                        em_tensor *h = em_requires_grad_(em_to_dtype(em_detach(h0), ht), true);
                        em_tensor *f2 = em_requires_grad_(em_detach(em_clone(f)), true);
                        em_tensor *h2 = em_requires_grad_(em_detach(em_clone(h)), true);
                        em_tensor *(*fn)(em_tensor *, em_tensor *) = op ? em_sub : em_add;
                        em_tensor *y = order ? fn(h, f) : fn(f, h);
                        em_tensor *hw = em_to_dtype(h2, EM_F32);
                        em_tensor *y2 = order ? fn(hw, f2) : fn(f2, hw);
                        ck_assert_int_eq(y->dtype, EM_F32);
                        ck_assert_str_eq(em_grad_fn_name(y), op ? "sub" : "add");   /* no cast in between */
                        ck_assert(bits_equal(y, y2));
                        em_tensor *w = param(2, fs, 1.0, 31);
                        em_backward(em_sum(em_mul(y, w), 0, NULL, false));
                        em_backward(em_sum(em_mul(y2, w), 0, NULL, false));
                        ck_assert_int_eq(em_grad(h)->dtype, ht);
                        ck_assert(bits_equal(em_grad(h), em_grad(h2)) && bits_equal(em_grad(f), em_grad(f2)));
                    }
}
END_TEST

/* An f32 tensor used both as it is and through a cast to bf16/f16 (autocast's
 * pattern): when the cast's backward runs after the f32 use's, the engine adds
 * the half gradient into the pending f32 one without converting it first
 * (engine.c, cast_into_pending). Either order gives a + f32(g_half) bit for bit. */
START_TEST(cast_gradient_added_unconverted)
{
    const em_dtype halves[2] = {EM_BF16, EM_F16};
    for (int hi = 0; hi < 2; hi++)
        for (int order = 0; order < 2; order++) EM_SCOPE {
                em_dtype ht = halves[hi];
                int64_t sh[2] = {33, 70};
                em_tensor *x = param(2, sh, 3.0, 41);
                em_tensor *a = tu_rand_tensor(2, sh, EM_F32, -2, 2, 42, NULL);
                em_tensor *wh = em_to_dtype(tu_rand_tensor(2, sh, EM_F32, -2, 2, 43, NULL), ht);
                em_tensor *yh, *yf;
                if (order == 0) {   /* cast first: its backward runs last, onto the pending f32 gradient */
                    yh = em_mul(em_to_dtype(x, ht), wh);
                    yf = em_mul(x, a);
                } else {
                    yf = em_mul(x, a);
                    yh = em_mul(em_to_dtype(x, ht), wh);
                }
                em_tensor *loss = em_add(em_sum(yf, 0, NULL, false), em_sum(em_to_dtype(yh, EM_F32), 0, NULL, false));
                em_backward(loss);
                em_tensor *want = em_add(a, em_to_dtype(wh, EM_F32));
                ck_assert_msg(em_grad(x) && em_grad(x)->dtype == EM_F32 && bits_equal(em_grad(x), want),
                              "%s order %d", em_dtype_name(ht), order);
            }
}
END_TEST

START_TEST(weights_cast_once_per_region)
{
    em_scope_begin();
    em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 8), EM_F32, -1, 1, 3, NULL);
    em_tensor *w = param(EM_SHAPE(8, 5), 1, 4);
    em_tensor *w2 = param(EM_SHAPE(6, 8), 1, 5);   /* used as nn's linear does: through a transposed view */
    em_autocast_stats_reset();
    em_tensor *loss;
    EM_AUTOCAST_REGION(EM_BF16)
    {
        em_tensor *y1 = em_matmul(x, w), *y2 = em_matmul(x, w), *y3 = em_matmul(em_neg(x), w);
        em_autocast_stats st = em_autocast_stats_get();
        ck_assert_int_eq(st.casts, 3);        /* x, w, -x */
        ck_assert_int_eq(st.cache_hits, 3);   /* x and w again, w for -x */
        em_tensor *z1 = em_matmul(x, em_transpose(w2, 0, 1)), *z2 = em_matmul(x, em_transpose(w2, 0, 1));
        st = em_autocast_stats_get();
        ck_assert_int_eq(st.casts, 4);        /* one more: w2^T, once */
        ck_assert_int_eq(st.cache_hits, 6);   /* x twice, w2^T once */
        /* an in-place write (an optimizer step) invalidates the cast */
        em_set(w, (int64_t[]){0, 0}, 0.5);
        em_tensor *y4 = em_matmul(x, w);
        st = em_autocast_stats_get();
        ck_assert_int_eq(st.casts, 5);
        ck_assert(em_get(em_to_dtype(y4, EM_F32), (int64_t[]){0, 0}) !=
                  em_get(em_to_dtype(y1, EM_F32), (int64_t[]){0, 0}) || em_get(x, (int64_t[]){0, 0}) == 0);
        loss = em_add(em_add(em_sum(y1, 0, NULL, false), em_sum(y2, 0, NULL, false)),
                      em_add(em_sum(z1, 0, NULL, false), em_sum(z2, 0, NULL, false)));
        loss = em_add(loss, em_sum(y3, 0, NULL, false));
    }
    ck_assert_int_eq(em_autocast_stats_get().cached, 0);   /* emptied at region end */
    ck_assert_int_eq(loss->dtype, EM_F32);
    em_backward(loss);
    /* d loss / dw = (x + x - x)^T 1 = column sums of x, for every column; reached f32 master weights */
    ck_assert_int_eq(em_grad(w)->dtype, EM_F32);
    ck_assert_int_eq(em_grad(w2)->dtype, EM_F32);
    for (int i = 0; i < 8; i++) {
        double cs = 0;
        for (int r = 0; r < 4; r++) cs += em_get(x, (int64_t[]){r, i});
        for (int j = 0; j < 5; j++)
            ck_assert_double_eq_tol(em_get(em_grad(w), (int64_t[]){i, j}), cs, 2e-2 * (fabs(cs) + 1));
        for (int j = 0; j < 6; j++)
            ck_assert_double_eq_tol(em_get(em_grad(w2), (int64_t[]){j, i}), 2 * cs, 4e-2 * (fabs(cs) + 1));
    }
    em_scope_end();
}
END_TEST

/* A no-grad forward in a region must not leave a history-less cast that a
 * later grad-mode forward in the same region picks up. */
START_TEST(no_grad_cast_not_reused)
{
    em_scope_begin();
    em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 8), EM_F32, -1, 1, 6, NULL);
    em_tensor *w = param(EM_SHAPE(8, 5), 1, 7);
    EM_AUTOCAST_REGION(EM_BF16)
    {
        EM_NO_GRAD { ck_assert_int_eq(em_matmul(x, w)->dtype, EM_BF16); }
        em_tensor *y = em_matmul(x, w);
        ck_assert(em_requires_grad(y));
        em_backward(em_sum(y, 0, NULL, false));   /* backward inside the region works too */
    }
    ck_assert_ptr_nonnull(em_grad(w));
    double cs = 0;
    for (int r = 0; r < 4; r++) cs += em_get(x, (int64_t[]){r, 3});
    ck_assert_double_eq_tol(em_get(em_grad(w), (int64_t[]){3, 1}), cs, 2e-2 * (fabs(cs) + 1));
    em_scope_end();
}
END_TEST

/* An inference loop in one region (classify's): with grad mode off, a weight's
 * cast is made once and served to every later no-grad use of the region, and
 * a grad-mode use after them still gets a cast with history (above). */
START_TEST(no_grad_casts_cached_for_no_grad)
{
    em_scope_begin();
    em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 8), EM_F32, -1, 1, 6, NULL);
    em_tensor *w = param(EM_SHAPE(8, 5), 1, 7);
    em_autocast_stats_reset();
    EM_AUTOCAST_REGION(EM_BF16)
    {
        for (int i = 0; i < 3; i++) EM_SCOPE EM_NO_GRAD {   /* a new batch each time */
                em_tensor *xi = tu_rand_tensor(EM_SHAPE(4, 8), EM_F32, -1, 1, 10 + (uint64_t)i, NULL);
                ck_assert(!em_requires_grad(em_matmul(xi, w)));
            }
        em_autocast_stats st = em_autocast_stats_get();
        ck_assert_int_eq(st.casts, 4);        /* w once, x (no history) three times: each batch is new data */
        ck_assert_int_eq(st.cache_hits, 2);   /* w's cast, for the second and third batch */
        em_tensor *y = em_matmul(x, w);
        ck_assert(em_requires_grad(y));       /* grad mode: a cast with history, not the cached one */
        ck_assert_int_eq(em_autocast_stats_get().casts, 6);
    }
    em_scope_end();
}
END_TEST

/* A long region with per-step scopes: the cache stays bounded and every byte comes back. */
START_TEST(cache_bounded_and_freed)
{
    em_tensor *w = param(EM_SHAPE(16, 8), 1, 8);   /* top level: the test owns it */
    int64_t live0 = tu_live_bytes();
    em_autocast_stats_reset();
    EM_AUTOCAST_REGION(EM_BF16)
    {
        for (int i = 0; i < 300; i++) {
            EM_SCOPE
            {
                em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 8), EM_F32, -1, 1, 100 + i, NULL);
                em_backward(em_sum(em_matmul(x, em_transpose(w, 0, 1)), 0, NULL, false));
            }
            ck_assert_int_le(em_autocast_stats_get().cached, 80);
        }
        /* w^T is cast once and reused while w does not change (backward does not
         * change w); each step also casts x to bf16 and sum's input back to f32 */
        ck_assert_int_eq(em_autocast_stats_get().cache_hits, 299);
        ck_assert_int_eq(em_autocast_stats_get().casts, 2 * 300 + 1);
        /* outside any scope: casts the region owns, released at its end */
        em_tensor *x = tu_rand_tensor(EM_SHAPE(4, 16), EM_F32, -1, 1, 9, NULL);
        em_tensor *mm = em_matmul(x, w), *y = em_softmax(mm, -1);
        em_release(y);
        em_release(mm);
        em_release(x);
    }
    em_set_grad(w, NULL);
    ck_assert_int_eq(tu_live_bytes(), live0);
    em_release(w);
}
END_TEST

TU_MISUSE(misuse_autocast_dtype, "em_autocast_begin: dtype must be bfloat16 or float16", em_autocast_begin(EM_F64))
TU_MISUSE(misuse_autocast_unbalanced, "no autocast region is open", em_autocast_end())
TU_MISUSE(misuse_matmul_mixed_outside, "em_matmul: operands differ in dtype",
          em_matmul(em_ones(EM_SHAPE(2, 2), EM_BF16, EM_CPU), em_ones(EM_SHAPE(2, 2), EM_F32, EM_CPU)))

/* ---- bf16 / f16 matmul tolerance ------------------------------------------------------------------ */
/* |got - ref| <= tol * (|a| |b|)_ij for C = A B, with a, b the f32 inputs
 * (rows/cols read through any layout), ref the f64 product. */
static void check_matmul(em_tensor *a, em_tensor *b, em_dtype dt, double tol)
{
    em_scope_begin();
    em_tensor *c = em_matmul(em_to_dtype(a, dt), em_to_dtype(b, dt));
    ck_assert_int_eq(c->dtype, dt);
    int nd = c->ndim;
    int64_t M = c->shape[nd - 2], N = c->shape[nd - 1], K = a->shape[a->ndim - 1];
    int64_t batch = em_numel(c) / (M * N);   /* a is [M,K] or [batch,M,K]; b likewise */
    ck_assert(a->ndim == b->ndim);
    em_tensor *ae = em_contiguous(a), *be = em_contiguous(b);
    double *A = tu_to_doubles(ae), *B = tu_to_doubles(be), *C = tu_to_doubles(c), worst = 0;
    for (int64_t q = 0; q < batch; q++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0, sa = 0;
                for (int64_t k = 0; k < K; k++) {
                    double x = A[(q * M + i) * K + k], y = B[(q * K + k) * N + j];
                    s += x * y;
                    sa += fabs(x * y);
                }
                double r = fabs(C[(q * M + i) * N + j] - s) / (sa > 0 ? sa : 1);
                if (r > worst) worst = r;
            }
    ck_assert_msg(worst <= tol, "%s matmul %s x %s: error %g of |a||b| > %g", em_dtype_name(dt), em__shape_str(a),
                  em__shape_str(b), worst, tol);
    free(A);
    free(B);
    free(C);
    em_scope_end();
}

START_TEST(low_precision_matmul_tolerance)
{
    em_scope_begin();
    /* DistilBERT-like shapes (rows cut down), both operand layouts */
    em_tensor *x = tu_rand_tensor(EM_SHAPE(64, 768), EM_F32, -1, 1, 21, NULL);
    em_tensor *w = tu_rand_tensor(EM_SHAPE(256, 768), EM_F32, -1, 1, 22, NULL);
    em_tensor *wt = em_transpose(w, 0, 1);                                   /* linear: x W^T */
    em_tensor *g = tu_rand_tensor(EM_SHAPE(64, 256), EM_F32, -1, 1, 23, NULL);
    em_tensor *xt = em_transpose(x, 0, 1);                                   /* dW = g^T x style */
    em_tensor *q = tu_rand_tensor(EM_SHAPE(6, 32, 64), EM_F32, -1, 1, 24, NULL);
    em_tensor *k = tu_rand_tensor(EM_SHAPE(6, 32, 64), EM_F32, -1, 1, 25, NULL);
    static const em_dtype dts[2] = {EM_BF16, EM_F16};
    static const double tols[2] = {1e-2, 1e-3};
    for (int d = 0; d < 2; d++) {
        check_matmul(x, wt, dts[d], tols[d]);
        check_matmul(g, w, dts[d], tols[d]);
        check_matmul(xt, g, dts[d], tols[d]);
        check_matmul(q, em_transpose(k, 1, 2), dts[d], tols[d]);   /* attention scores, batched */
    }
    /* bf16 against the f32 product of the same f32 inputs: within 1e-2 relative (normwise) */
    em_tensor *c32 = em_matmul(x, wt), *c16 = em_matmul(em_to_dtype(x, EM_BF16), em_to_dtype(wt, EM_BF16));
    ck_assert_double_le(rel_err(em_to_dtype(c16, EM_F32), c32), 1e-2);
    em_scope_end();
}
END_TEST

/* The internal bf16 GEMM directly: every transpose combination, leading
 * dimensions wider than the matrices, bf16 and f32 outputs, k = 0; with a bf16
 * bias (LINEAR's epilogue) and adding into an f32 C (a weight gradient's sink).
 * Values are integers (A's up to 97, sums up to 27,000), so every product and sum is exact
 * in f32 and the bf16 output is the exact result rounded once: with the bias,
 * sums past 256 tell one rounding of s + bias from a rounding of s and another
 * after the add. */
static void check_gemm_bf16(void)
{
    enum { M = 37, N = 29, K = 70, LD = 80 };
    uint16_t *a = calloc(LD * LD, 2), *b = calloc(LD * LD, 2), *c16 = calloc(LD * LD, 2), bias[N];
    float *c32 = calloc(LD * LD, 4);
    for (int j = 0; j < N; j++) bias[j] = em__f32_to_bf16((float)(j % 7 - 3));
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            /* op(A)[i][p] = (5i + 2p) % 97 + 1, op(B)[p][j] = (3p + j) % 5 */
            for (int i = 0; i < M; i++)
                for (int p = 0; p < K; p++) a[ta ? p * LD + i : i * LD + p] = em__f32_to_bf16((float)((5 * i + 2 * p) % 97 + 1));
            for (int p = 0; p < K; p++)
                for (int j = 0; j < N; j++) b[tb ? j * LD + p : p * LD + j] = em__f32_to_bf16((float)((3 * p + j) % 5));
            ck_assert_int_eq(em_cpu_gemm_bf16(ta, tb, M, N, K, a, LD, b, LD, c16, EM_BF16, LD), EM_OK);
            ck_assert_int_eq(em_cpu_gemm_bf16(ta, tb, M, N, K, a, LD, b, LD, c32, EM_F32, LD), EM_OK);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int p = 0; p < K; p++) s += (double)((5 * i + 2 * p) % 97 + 1) * ((3 * p + j) % 5);
                    ck_assert_msg(c32[i * LD + j] == s, "ta %d tb %d [%d,%d]: f32 %g, want %g", ta, tb, i, j,
                                  c32[i * LD + j], s);
                    ck_assert(em__bf16_to_f32(c16[i * LD + j]) == em__bf16_to_f32(em__f32_to_bf16((float)s)));
                }
            ck_assert_int_eq(em_cpu_gemm_bf16_bias(ta, tb, M, N, K, a, LD, b, LD, bias, c16, EM_BF16, LD), EM_OK);
            for (int i = 0; i < M; i++) c32[i * LD] = 0.5f, c32[i * LD + N - 1] = -2.0f;   /* added into */
            for (int i = 0; i < M; i++)
                for (int j = 1; j < N - 1; j++) c32[i * LD + j] = (float)(i - j);
            ck_assert_int_eq(em_cpu_gemm_bf16_acc(ta, tb, M, N, K, a, LD, b, LD, c32, LD), EM_OK);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double s = 0;
                    for (int p = 0; p < K; p++) s += (double)((5 * i + 2 * p) % 97 + 1) * ((3 * p + j) % 5);
                    float want = em__bf16_to_f32(em__f32_to_bf16((float)(s + (j % 7 - 3))));
                    ck_assert_msg(em__bf16_to_f32(c16[i * LD + j]) == want, "ta %d tb %d [%d,%d]: bias: %g, want %g",
                                  ta, tb, i, j, em__bf16_to_f32(c16[i * LD + j]), want);
                    double before = j == 0 ? 0.5 : j == N - 1 ? -2.0 : (double)(i - j);
                    ck_assert_msg(c32[i * LD + j] == before + s, "ta %d tb %d [%d,%d]: acc %g, want %g", ta, tb, i, j,
                                  c32[i * LD + j], before + s);
                }
        }
    c32[0] = 5.0f;
    ck_assert_int_eq(em_cpu_gemm_bf16(false, false, 3, 4, 0, a, LD, b, LD, c32, EM_F32, LD), EM_OK);
    ck_assert(c32[0] == 0.0f && c32[2 * LD + 3] == 0.0f);   /* an empty sum is zero */
    free(a), free(b), free(c16), free(c32);
}

TU_TEST(gemm_bf16_contract, check_gemm_bf16())

/* The same through the f32 route that runs without oneDNN (EMBER_GEMM=openblas,
 * read once per process: this test runs in its own forked process). */
START_TEST(gemm_bf16_contract_without_onednn)
{
    setenv("EMBER_GEMM", "openblas", 1);
    check_gemm_bf16();
    /* and the matmul kernel then computes bf16 in f32: still within tolerance */
    em_scope_begin();
    em_tensor *x = tu_rand_tensor(EM_SHAPE(16, 96), EM_F32, -1, 1, 31, NULL);
    em_tensor *w = tu_rand_tensor(EM_SHAPE(40, 96), EM_F32, -1, 1, 32, NULL);
    check_matmul(x, em_transpose(w, 0, 1), EM_BF16, 1e-2);
    em_scope_end();
    unsetenv("EMBER_GEMM");
}
END_TEST

/* ---- a small DistilBERT under bf16 autocast vs f32 ----------------------------------------------- */
#define DB_B 64
#define DB_S 16
#define DB_V 1024
#define DB_STEPS 20
#define DB_TAIL 4

/* Config C's model (dim 128, 2 layers, 2 heads, ffn 512; vocab cut to 1024)
 * on one fixed batch: the label says whether the marker token 5 occurs in the
 * sequence, flipped for a tenth of the examples (which the model must
 * memorize).
 * Full-batch AdamW gives a smooth curve that both runs follow (here from
 * 0.69 to about 0.15 in 20 steps). Returns the mean loss of the last DB_TAIL
 * steps. */
/* The model, seeded, and the fixed batch (ids [DB_B,DB_S], labels [DB_B]). */
static em_distilbert_seqcls *db_model(void)
{
    em_set_seed(1234);
    em_distilbert_config cfg = {.vocab_size = DB_V, .max_position_embeddings = 64, .n_layers = 2, .n_heads = 2,
                                .dim = 128, .hidden_dim = 512, .dropout = EM_ZERO, .attention_dropout = EM_ZERO,
                                .seq_classif_dropout = EM_ZERO, .num_labels = 2};
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&cfg);
    ck_assert_ptr_nonnull(m);
    return m;
}

static void db_batch(int64_t *ids, int64_t *labels)
{
    uint64_t rs = 99;
    for (int b = 0; b < DB_B; b++) {
        for (int s = 0; s < DB_S; s++) ids[b * DB_S + s] = s == 0 ? 1 : 6 + (int64_t)(tu_next(&rs) % (DB_V - 6));
        bool marked = b % 2;
        if (marked) ids[b * DB_S + 1 + (int64_t)(tu_next(&rs) % (DB_S - 1))] = 5;
        labels[b] = marked ^ (b % 10 == 3);
    }
}

/* The loss of one forward, f32 or under bf16 autocast. */
static em_tensor *db_loss(em_distilbert_seqcls *m, const int64_t *ids, const int64_t *labels, bool bf16)
{
    em_seqcls_inputs in = {.input_ids = em_from_data(ids, EM_SHAPE(DB_B, DB_S), EM_I64),
                           .labels = em_from_data(labels, EM_SHAPE(DB_B), EM_I64)};
    em_seqcls_output out;
    if (bf16) {
        EM_AUTOCAST_REGION(EM_BF16) { out = em_distilbert_seqcls_forward(m, &in); }
    } else {
        out = em_distilbert_seqcls_forward(m, &in);
    }
    return out.loss;
}

static double train_distilbert(bool bf16, double *losses)
{
    em_distilbert_seqcls *m = db_model();
    em_named_tensors np = em_module_named_parameters(&m->base);
    em_tensor **ps = malloc(sizeof *ps * (size_t)np.n);
    for (int i = 0; i < np.n; i++) ps[i] = np.items[i].tensor;
    em_optimizer *opt = em_adamw_new(ps, np.n, &(em_adamw_opts){.lr = 1e-3});
    int64_t ids[DB_B * DB_S], labels[DB_B];
    db_batch(ids, labels);
    double tail = 0;
    for (int t = 0; t < DB_STEPS; t++) {
        em_scope_begin();
        em_tensor *loss = db_loss(m, ids, labels, bf16);
        ck_assert_int_eq(loss->dtype, EM_F32);
        losses[t] = em_item(loss);
        if (t >= DB_STEPS - DB_TAIL) tail += losses[t] / DB_TAIL;
        em_backward(loss);
        ck_assert_int_eq(em_optimizer_step(opt), EM_OK);
        em_optimizer_zero_grad_ex(opt, false);
        em_scope_end();
    }
    em_optimizer_free(opt);
    free(ps);
    em_named_tensors_free(&np);
    em_module_free(&m->base);
    return tail;
}

/* Both runs learn, and end near each other. Twenty full-batch AdamW steps
 * amplify rounding differences chaotically (Adam normalizes each weight's
 * step, so tiny gradient differences become whole steps): measured on seeds
 * 1-6 and 1234, the bf16 tail lay from 13 % below to 5 % above the f32 one,
 * with or without issue 17's unrounded activation gradients, and for one seed
 * from 0.1 % to 2.2 % by the build's flags alone. A tight bound on the tail
 * only held for a lucky seed; how closely bf16 follows f32 is checked step by
 * step on the gradients themselves (distilbert_bf16_gradients_track_f32). */
START_TEST(distilbert_bf16_tracks_f32)
{
    double l32[DB_STEPS], l16[DB_STEPS];
    double f32 = train_distilbert(false, l32), bf16 = train_distilbert(true, l16);
    ck_assert_msg(f32 < 0.5 * l32[0], "f32 run did not learn: %g -> %g", l32[0], f32);
    ck_assert_msg(bf16 < 0.5 * l16[0], "bf16 run did not learn: %g -> %g", l16[0], bf16);
    if (fabs(bf16 - f32) > 0.2 * f32)
        for (int t = 0; t < DB_STEPS; t++) printf("step %2d  f32 %.5f  bf16 %.5f\n", t, l32[t], l16[t]);
    ck_assert_msg(fabs(bf16 - f32) <= 0.2 * f32, "bf16 %g vs f32 %g (first %g / %g)", bf16, f32, l16[0], l32[0]);
}
END_TEST

/* One step of the same model on train_distilbert's batch from the same
 * weights: every parameter's bf16 autocast gradient within 3 % (L2, relative)
 * of its f32 gradient, all of them within 1.5 % (measured: at most 0.70 % a
 * parameter, 0.47 % in all; 0.98 % / 0.54 % when each consumer's activation
 * gradient was rounded to bf16 on its way, as before issue 17's sink). A
 * lost, doubled or misrouted gradient is off by 50-100 %. k_lin's bias is left
 * out: softmax does not change when every key's score shifts by the same
 * amount, so its exact gradient is 0 and both runs give rounding noise. */
static em_named_tensors one_step_grads(bool bf16, em_module **model)
{
    em_distilbert_seqcls *m = db_model();
    int64_t ids[DB_B * DB_S], labels[DB_B];
    db_batch(ids, labels);
    EM_SCOPE { em_backward(db_loss(m, ids, labels, bf16)); }
    *model = &m->base;
    return em_module_named_parameters(&m->base);
}

START_TEST(distilbert_bf16_gradients_track_f32)
{
    em_module *m32, *m16;
    em_named_tensors p32 = one_step_grads(false, &m32), p16 = one_step_grads(true, &m16);
    ck_assert_int_eq(p32.n, p16.n);
    double err2 = 0, norm2 = 0;
    int checked = 0;
    for (int i = 0; i < p32.n; i++) EM_SCOPE {
            if (strstr(p32.items[i].name, "k_lin.bias")) continue;
            em_tensor *g32 = em_grad(p32.items[i].tensor), *g16 = em_grad(p16.items[i].tensor);
            ck_assert_msg(g32 && g16, "%s: no gradient", p32.items[i].name);
            ck_assert_int_eq(g16->dtype, EM_F32);
            double e = em_item(em_norm(em_sub(g16, g32), 2.0, 0, NULL, false));
            double n = em_item(em_norm(g32, 2.0, 0, NULL, false));
            ck_assert_msg(n > 0 && e <= 0.03 * n, "%s: bf16 gradient off by %.2f %% of the f32 one", p32.items[i].name,
                          100 * e / n);
            err2 += e * e, norm2 += n * n, checked++;
        }
    ck_assert_int_ge(checked, 30);
    ck_assert_msg(sqrt(err2 / norm2) <= 0.015, "all gradients: off by %.2f %%", 100 * sqrt(err2 / norm2));
    em_named_tensors_free(&p32), em_named_tensors_free(&p16);
    em_module_free(m32), em_module_free(m16);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("amp");
    tu_add_tests(tu_case(s, "scaler", 0), scaler_matches_torch, scaler_defaults_and_disabled, scaler_state_save_load,
                 scaler_strided_grads, scaler_clip_unscales_first, scaler_warns_clip_before_unscale,
                 training_skips_injected_steps, fp16_training_on_cpu);
    TCase *ta = tu_case(s, "autocast", 0);
    tu_add_tests(ta, autocast_policy, promotion_gradients, weights_cast_once_per_region, no_grad_cast_not_reused,
                 no_grad_casts_cached_for_no_grad,
                 cache_bounded_and_freed, low_precision_matmul_tolerance, gemm_bf16_contract);
    if (!getenv("CK_FORK") || strcmp(getenv("CK_FORK"), "no") != 0)   /* needs a fresh process */
        tcase_add_test(ta, gemm_bf16_contract_without_onednn);
    tcase_add_test(ta, distilbert_bf16_tracks_f32);
    tcase_add_test(ta, distilbert_bf16_gradients_track_f32);
    tcase_add_test(ta, mixed_add_without_cast);
    tcase_add_test(ta, cast_gradient_added_unconverted);
    tcase_add_test(ta, scaler_backoff_stops_at_the_smallest_normal);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_unscale_twice, misuse_unscale_after_step, misuse_step_twice,
                        misuse_update_without_checks, misuse_step_without_grads, misuse_growth_factor,
                        misuse_backoff_factor, misuse_autocast_dtype, misuse_autocast_unbalanced,
                        misuse_matmul_mixed_outside, misuse_init_scale_overflows_f32,
                        misuse_init_scale_underflows_f32);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
