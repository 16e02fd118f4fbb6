/* ember tests — optim/:
 *   - AdamW (defaults + linear warmup, amsgrad + decay, maximize + betas) and
 *     SGD (nesterov + decay, dampening + maximize) follow PyTorch's parameter
 *     trajectories (tests/fixtures/optim_golden.safetensors, made by
 *     tools/make-optim-fixture.py) within 1e-6 relative, with separate
 *     parameters and with parameters that are views of one flat buffer (the
 *     fused path), including a parameter without a gradient at one step; the
 *     final state equals torch's state_dict key for key;
 *   - f64 parameters against an independent textbook reference;
 *   - the fused pass over a flat buffer equals per-parameter passes, bit for bit;
 *   - the four schedulers' lr sequences equal transformers' exactly;
 *   - clip_grad_norm against torch: normal, clamped, inf-norm, 1-norm, inf and
 *     NaN gradients, error_if_nonfinite;
 *   - weight-decay grouping on DistilBERT's real parameter names equals the
 *     transformers Trainer's decay set;
 *   - state save/load continues bit-identically; mismatched states fail with
 *     clear errors and leave the optimizer unchanged; OOM at every allocation
 *     of the first step; misuse aborts.
 */
#include "check_util.h"
#include "optim/optim_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NP 4
#define NSTEPS 5
static const int NDIM[NP] = {2, 1, 3, 1};
static const int64_t SHAPE[NP][3] = {{4, 3}, {5}, {2, 3, 2}, {7}};
#define NO_GRAD_STEP 2
#define NO_GRAD_PARAM 3

/* ---- helpers ------------------------------------------------------------------------ */
static em_safetensors *open_fixture(void)
{
    em_safetensors *st = NULL;
    em_status s = em_safetensors_open(tu_fixture_path("optim_golden.safetensors"), &st);
    ck_assert_msg(s == EM_OK, "cannot open the optim fixture: %s", em_last_error());
    return st;
}

static em_tensor *get(em_safetensors *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static em_tensor *get(em_safetensors *st, const char *fmt, ...)
{
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    em_tensor *t = em_safetensors_get(st, name);
    ck_assert_msg(t != NULL, "fixture has no tensor %s: %s", name, em_last_error());
    return t;
}

static bool has_name(const em_safetensors *st, const char *name)
{
    for (int i = 0; i < em_safetensors_count(st); i++)
        if (!strcmp(em_safetensors_name(st, i), name)) return true;
    return false;
}

/* max over elements of |got-want| / (atol + rtol|want|); asserts shapes equal and <= 1 */
static double expect_close(const char *what, em_tensor *got, em_tensor *want, double rtol, double atol)
{
    tu_expect_tensor_close(what, got, want, rtol, atol);
    double *g = tu_to_doubles(got), *w = tu_to_doubles(want), worst_rel = 0;   /* all within tolerance */
    for (int64_t i = 0; i < em_numel(want); i++)
        if (w[i] != 0 && isfinite(w[i])) worst_rel = fmax(worst_rel, fabs(g[i] - w[i]) / fabs(w[i]));
    free(g);
    free(w);
    return worst_rel;
}

static bool bit_equal(em_tensor *a, em_tensor *b)
{
    return em_numel(a) == em_numel(b) && a->dtype == b->dtype &&
           !memcmp(em_data_ptr(a), em_data_ptr(b), (size_t)em_numel(a) * em_dtype_size(a->dtype));
}

/* scratch/name; the first call of a test makes the scratch directory */
static const char *tmp_path(const char *name)
{
    if (!tu_scratch()[0]) ck_assert_ptr_nonnull(tu_scratch_new("optim"));
    return tu_scratch_path(name);
}

static void cleanup_tmp(void) { ck_assert_int_eq(tu_scratch_remove(), 0); }

/* ---- torch trajectories ----------------------------------------------------------------- */
typedef struct run_cfg {
    const char *name;
    em_optimizer *(*make)(em_tensor **p);
    bool sched;
} run_cfg;

static em_optimizer *mk_adamw_sched(em_tensor **p) { return em_adamw_new(p, NP, NULL); }
static em_optimizer *mk_adamw_ams(em_tensor **p)
{
    return em_adamw_new(p, NP, &(em_adamw_opts){.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
}
static em_optimizer *mk_adamw_max(em_tensor **p)
{
    return em_adamw_new(p, NP, &(em_adamw_opts){.lr = 5e-3, .betas = {0.8, 0.99}, .eps = 1e-6,
                                                 .weight_decay = EM_ZERO, .maximize = true});
}
static em_optimizer *mk_sgd(em_tensor **p)
{
    return em_sgd_new(p, NP, &(em_sgd_opts){.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-2});
}
static em_optimizer *mk_sgd_damp(em_tensor **p)
{
    return em_sgd_new(p, NP, &(em_sgd_opts){.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .maximize = true});
}

/* Adam has no typed constructor: it is reached by torch's class name */
static em_optimizer *mk_adam_l2(em_tensor **p)
{
    em_param_group g = {.params = p, .n_params = NP};
    return em_optimizer_new("Adam", &g, 1, &(em_optimizer_opts){.defaults = {.lr = 1e-2, .weight_decay = 0.1}});
}
static em_optimizer *mk_adam_ams_max(em_tensor **p)
{
    em_param_group g = {.params = p, .n_params = NP};
    em_optimizer_opts o = {.defaults = {.lr = 5e-3, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.05},
                           .flag = true, .maximize = true};
    return em_optimizer_new("Adam", &g, 1, &o);
}

static const run_cfg RUNS[] = {
    {"adamw_sched", mk_adamw_sched, true}, {"adamw_ams", mk_adamw_ams, false}, {"adamw_max", mk_adamw_max, false},
    {"sgd", mk_sgd, false},                {"sgd_damp", mk_sgd_damp, false},   {"adam_l2", mk_adam_l2, false},
    {"adam_ams_max", mk_adam_ams_max, false},
};

/* Where the CPU has FMA, ember fuses exactly where torch's kernels fuse and
 * every value must equal torch's bit for bit. Without FMA (or with the plain
 * kernels forced) each fused multiply-add becomes two roundings: then 1e-6
 * relative, plus 1e-7 absolute (an ulp at the values' scale of 1) for the
 * entries that cancel to near zero. */
static double RTOL, ATOL;
static void set_tolerance(void)
{
    bool exact = em__opt_have_fma();
    RTOL = exact ? 0 : 1e-6;
    ATOL = exact ? 0 : 1e-7;
}

/* Runs one fixture configuration; flat: params (and grads) are adjacent views of
 * one buffer. Returns the worst relative deviation of the trajectory. */
static double run_fixture(const run_cfg *c, bool flat)
{
    em_safetensors *st = open_fixture();
    em_scope_begin();
    em_tensor *p[NP], *gv[NP];
    int64_t total = 0;
    for (int i = 0; i < NP; i++) total += em_numel(get(st, "init.p%d", i));
    em_tensor *pflat = em_zeros(1, &total, EM_F32, EM_CPU), *gflat = em_zeros(1, &total, EM_F32, EM_CPU);
    int64_t off = 0;
    for (int i = 0; i < NP; i++) {
        em_tensor *init = get(st, "init.p%d", i);
        if (flat) {
            p[i] = em_view(em_narrow(pflat, 0, off, em_numel(init)), NDIM[i], SHAPE[i]);
            gv[i] = em_view(em_narrow(gflat, 0, off, em_numel(init)), NDIM[i], SHAPE[i]);
            em_copy_(p[i], init);
            off += em_numel(init);
        } else {
            p[i] = em_clone(init);
        }
        em_requires_grad_(p[i], true);
    }
    em_optimizer *o = c->make(p);
    ck_assert_ptr_nonnull(o);
    em_scheduler *s = c->sched ? em_linear_schedule_with_warmup(o, 2, 10) : NULL;
    em_tensor *lrs = get(st, "%s.lr", c->name);
    double worst = 0;
    for (int64_t k = 0; k < NSTEPS; k++) {
        for (int i = 0; i < NP; i++) {
            if (k == NO_GRAD_STEP && i == NO_GRAD_PARAM) {
                ck_assert(!has_name(st, "grad.2.p3"));
                em_set_grad(p[i], NULL);
            } else if (flat) {
                em_copy_(gv[i], get(st, "grad.%d.p%d", (int)k, i));
                em_set_grad(p[i], gv[i]);
            } else {
                em_set_grad(p[i], em_clone(get(st, "grad.%d.p%d", (int)k, i)));
            }
        }
        ck_assert_msg(em_optimizer_lr(o, 0) == em_get(lrs, &k), "%s step %d: lr %.17g, torch used %.17g", c->name,
                      (int)k, em_optimizer_lr(o, 0), em_get(lrs, &k));
        ck_assert_int_eq(em_optimizer_step(o), EM_OK);
        if (s) em_scheduler_step(s);
        for (int i = 0; i < NP; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s%s step %d p%d", c->name, flat ? " (flat)" : "", (int)k, i);
            worst = fmax(worst, expect_close(what, p[i], get(st, "%s.step%d.p%d", c->name, (int)k, i), RTOL, ATOL));
        }
    }
    bool adam = c->name[0] == 'a';
    for (int i = 0; i < NP; i++)
        ck_assert(em_optimizer_param_step(o, 0, i) == (i == NO_GRAD_PARAM ? NSTEPS - 1 : NSTEPS) || !adam);
    if (flat)   /* one flat state buffer per kind, shared by the four parameters */
        for (int i = 1; i < NP; i++) ck_assert_ptr_eq(o->groups[0].ps[i].state[0]->storage, o->groups[0].ps[0].state[0]->storage);

    /* the saved state is torch's state_dict, key for key */
    const char *path = tmp_path("state.safetensors");
    ck_assert_int_eq(em_optimizer_state_save(o, path), EM_OK);
    em_safetensors *saved = NULL;
    ck_assert_int_eq(em_safetensors_open(path, &saved), EM_OK);
    char prefix[64];
    int n_torch = 0, plen = snprintf(prefix, sizeof prefix, "%s.state.", c->name);
    for (int t = 0; t < em_safetensors_count(st); t++) n_torch += !strncmp(em_safetensors_name(st, t), prefix, (size_t)plen);
    ck_assert_int_eq(em_safetensors_count(saved), n_torch);
    for (int t = 0; t < em_safetensors_count(saved); t++) {
        const char *name = em_safetensors_name(saved, t);
        em_tensor *want = get(st, "%s.%s", c->name, name), *got = em_safetensors_get(saved, name);
        ck_assert_int_eq(got->dtype, want->dtype);
        worst = fmax(worst, expect_close(name, got, want, RTOL, ATOL));
    }
    em_safetensors_close(saved);
    em_scheduler_free(s);
    em_optimizer_free(o);
    em_scope_end();
    em_safetensors_close(st);
    cleanup_tmp();
    return worst;
}

static void trajectories(bool plain)
{
    em__opt_plain = plain;
    set_tolerance();
    for (size_t r = 0; r < sizeof RUNS / sizeof *RUNS; r++)
        for (int flat = 0; flat < 2; flat++) {
            double w = run_fixture(&RUNS[r], flat);
            fprintf(stderr, "# %-12s %-8s %s kernels: worst relative deviation from torch %.3g\n", RUNS[r].name,
                    flat ? "flat" : "separate", em__opt_have_fma() ? "fma" : "plain", w);
        }
    em__opt_plain = false;
}

TU_TEST(trajectories_match_torch, trajectories(false))

TU_TEST(trajectories_match_torch_unfused, trajectories(true))

/* ---- f64 and the fused pass ---------------------------------------------------------------- */
/* Textbook AdamW (Loshchilov & Hutter with torch's eps placement), in f64. */
START_TEST(adamw_f64_matches_textbook)
{
    em_scope_begin();
    const double lr = 3e-2, b1 = 0.3, b2 = 0.9, eps = 1e-7, wd = 0.05;   /* b1 < 0.5: lerp's other branch */
    enum { N = 37 };
    double ref[N], m[N] = {0}, v[N] = {0}, vmax[N] = {0};
    em_tensor *p = em_requires_grad_(tu_rand_tensor(EM_SHAPE(N), EM_F64, -1, 1, 11, ref), true);
    em_optimizer *o = em_adamw_new(&p, 1, &(em_adamw_opts){.lr = lr, .betas = {b1, b2}, .eps = eps,
                                                            .weight_decay = wd, .amsgrad = true});
    for (int t = 1; t <= 6; t++) {
        double g[N];
        em_set_grad(p, tu_rand_tensor(EM_SHAPE(N), EM_F64, -2.0 / t, 3.0 / t, 100 + (uint64_t)t, g));
        ck_assert_int_eq(em_optimizer_step(o), EM_OK);
        for (int i = 0; i < N; i++) {
            ref[i] -= lr * wd * ref[i];
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
            vmax[i] = fmax(vmax[i], v[i]);
            double mhat = m[i] / (1 - pow(b1, t)), vhat = vmax[i] / (1 - pow(b2, t));
            ref[i] -= lr * mhat / (sqrt(vhat) + eps);
        }
        tu_assert_values_close(p, ref, N, 1e-12, 1e-15);
    }
    em_optimizer_free(o);
    em_scope_end();
}
END_TEST

START_TEST(sgd_f64_matches_textbook)
{
    em_scope_begin();
    const double lr = 0.2, mom = 0.7, damp = 0.25, wd = 0.01;
    enum { N = 29 };
    double ref[N], buf[N];
    em_tensor *p = em_requires_grad_(tu_rand_tensor(EM_SHAPE(N), EM_F64, -1, 1, 5, ref), true);
    em_optimizer *o = em_sgd_new(&p, 1, &(em_sgd_opts){.lr = lr, .momentum = mom, .dampening = damp,
                                                        .weight_decay = wd});
    for (int t = 0; t < 5; t++) {
        double g[N];
        em_set_grad(p, tu_rand_tensor(EM_SHAPE(N), EM_F64, -1, 1, 200 + (uint64_t)t, g));
        ck_assert_int_eq(em_optimizer_step(o), EM_OK);
        for (int i = 0; i < N; i++) {
            double d = g[i] + wd * ref[i];
            buf[i] = t == 0 ? d : mom * buf[i] + (1 - damp) * d;
            ref[i] -= lr * buf[i];
        }
        tu_assert_values_close(p, ref, N, 1e-13, 1e-15);
    }
    em_optimizer_free(o);
    em_scope_end();
}
END_TEST

/* Big parameters (several OpenMP pieces): one fused pass over a flat buffer
 * gives exactly what separate per-parameter passes give. */
START_TEST(fused_pass_equals_separate)
{
    em_scope_begin();
    enum { K = 3 };
    const int64_t n[K] = {70001, 1, 50000};
    int64_t total = n[0] + n[1] + n[2];
    em_tensor *flat = tu_rand_tensor(EM_SHAPE(total), EM_F32, -1, 1, 7, NULL);
    em_tensor *gflat = em_zeros(EM_SHAPE(total), EM_F32, EM_CPU);
    em_tensor *pf[K], *ps[K], *gf[K];
    for (int i = 0, off = 0; i < K; off += (int)n[i], i++) {
        pf[i] = em_requires_grad_(em_narrow(flat, 0, off, n[i]), true);
        ps[i] = em_requires_grad_(em_clone(em_narrow(flat, 0, off, n[i])), true);
        gf[i] = em_narrow(gflat, 0, off, n[i]);
    }
    em_adamw_opts opts = {.lr = 1e-2, .amsgrad = true};
    em_optimizer *of = em_adamw_new(pf, K, &opts), *os = em_adamw_new(ps, K, &opts);
    for (int t = 0; t < 3; t++) {
        em_copy_(gflat, tu_rand_tensor(EM_SHAPE(total), EM_F32, -1, 1, 50 + (uint64_t)t, NULL));
        for (int i = 0; i < K; i++) {
            em_set_grad(pf[i], gf[i]);
            em_set_grad(ps[i], em_clone(gf[i]));
        }
        uint32_t v0 = flat->storage->version;
        ck_assert_int_eq(em_optimizer_step(of), EM_OK);
        ck_assert_int_eq(em_optimizer_step(os), EM_OK);
        ck_assert_uint_gt(flat->storage->version, v0);
        for (int i = 0; i < K; i++) ck_assert_msg(bit_equal(pf[i], ps[i]), "param %d differs at step %d", i, t);
    }
    ck_assert_ptr_eq(of->groups[0].ps[0].state[2]->storage, of->groups[0].ps[2].state[2]->storage);
    ck_assert_ptr_ne(os->groups[0].ps[0].state[2]->storage, os->groups[0].ps[2].state[2]->storage);
    em_optimizer_free(of);
    em_optimizer_free(os);
    em_scope_end();
}
END_TEST

/* ---- schedulers -------------------------------------------------------------------------------- */
static double halve_every_3(int64_t s, void *user) { return pow(*(double *)user, (double)(s / 3)); }

START_TEST(schedulers_match_transformers_exactly)
{
    em_safetensors *st = open_fixture();
    em_scope_begin();
    const char *names[] = {"linear", "linear0", "cosine", "constant"};
    for (int k = 0; k < 4; k++) {
        em_tensor *a = em_requires_grad_(em_zeros(EM_SHAPE(1), EM_F32, EM_CPU), true);
        em_tensor *b = em_requires_grad_(em_zeros(EM_SHAPE(1), EM_F32, EM_CPU), true);
        em_param_group groups[2] = {{.params = &a, .n_params = 1}, {.params = &b, .n_params = 1, .lr = 3e-4}};
        em_optimizer *o = em_sgd_new_groups(groups, 2, &(em_sgd_opts){.lr = 1e-3});
        em_scheduler *s = k == 0   ? em_linear_schedule_with_warmup(o, 2, 10)
                          : k == 1 ? em_linear_schedule_with_warmup(o, 0, 10)
                          : k == 2 ? em_cosine_schedule_with_warmup(o, 3, 10, 0)
                                   : em_constant_schedule_with_warmup(o, 4);
        em_tensor *want = get(st, "sched.%s", names[k]);
        for (int64_t r = 0; r < 13; r++) {
            if (r) em_scheduler_step(s);
            ck_assert_int_eq(em_scheduler_last_epoch(s), r);
            for (int64_t g = 0; g < 2; g++) {
                double w = em_get(want, (int64_t[]){r, g});
                ck_assert_msg(em_scheduler_get_last_lr(s, (int)g) == w && em_optimizer_lr(o, (int)g) == w,
                              "%s row %d group %d: %.17g, transformers %.17g", names[k], (int)r, (int)g,
                              em_scheduler_get_last_lr(s, (int)g), w);
            }
        }
        em_scheduler_free(s);
        em_optimizer_free(o);
    }
    /* LambdaLR with a user function, and a second scheduler keeps initial_lr */
    em_tensor *a = em_requires_grad_(em_zeros(EM_SHAPE(1), EM_F32, EM_CPU), true);
    em_optimizer *o = em_sgd_new(&a, 1, &(em_sgd_opts){.lr = 0.8});
    double half = 0.5;
    em_scheduler *s = em_lambda_lr_new(o, halve_every_3, &half);
    for (int i = 0; i < 7; i++) em_scheduler_step(s);
    ck_assert(em_optimizer_lr(o, 0) == 0.8 * 0.25);
    em_scheduler *s2 = em_constant_schedule_with_warmup(o, 0);
    ck_assert(em_optimizer_lr(o, 0) == 0.8);   /* initial_lr, not the scheduled 0.2 */
    em_scheduler_free(s2);
    em_scheduler_free(s);
    em_optimizer_free(o);
    em_scope_end();
    em_safetensors_close(st);
}
END_TEST

/* ---- clipping ------------------------------------------------------------------------------------ */
START_TEST(clip_grad_norm_matches_torch)
{
    em_safetensors *st = open_fixture();
    em_scope_begin();
    struct { const char *name; double max_norm, p; } cases[] = {
        {"normal", 1.0, 2}, {"small", 100.0, 2}, {"inf_norm", 0.5, INFINITY},
        {"p1", 2.0, 1},     {"has_inf", 1.0, 2}, {"has_nan", 1.0, 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        em_tensor *ps[4];
        for (int j = 0; j < 3; j++) {
            em_tensor *g = get(st, "clip.%s.in.g%d", cases[c].name, j);
            ps[j] = em_requires_grad_(em_zeros_like(g), true);
            em_set_grad(ps[j], em_clone(g));
        }
        ps[3] = em_requires_grad_(em_zeros(EM_SHAPE(2), EM_F32, EM_CPU), true);   /* no grad: skipped */
        double total = -1, want = em_item(get(st, "clip.%s.norm", cases[c].name));
        ck_assert_int_eq(em_clip_grad_norm(ps, 4, cases[c].max_norm, &(em_clip_grad_opts){.norm_type = cases[c].p},
                                           &total), EM_OK);
        ck_assert_msg(isnan(want) ? isnan(total) : isinf(want) ? total == want : fabs(total - want) <= 1e-6 * want,
                      "%s: total norm %.9g, torch %.9g", cases[c].name, total, want);
        for (int j = 0; j < 3; j++) {
            char what[64];
            snprintf(what, sizeof what, "clip %s g%d", cases[c].name, j);
            expect_close(what, em_grad(ps[j]), get(st, "clip.%s.out.g%d", cases[c].name, j), 1e-6, 1e-9);
        }
        ck_assert_ptr_null(em_grad(ps[3]));
    }
    /* p = 3 against an independent f64 reference; f64 gradients stay f64 */
    double ref[10];
    em_tensor *q = em_requires_grad_(em_zeros(EM_SHAPE(10), EM_F64, EM_CPU), true);
    em_set_grad(q, tu_rand_tensor(EM_SHAPE(10), EM_F64, -2, 2, 9, ref));
    double s3 = 0, total = 0;
    for (int i = 0; i < 10; i++) s3 += pow(fabs(ref[i]), 3);
    ck_assert_int_eq(em_clip_grad_norm(&q, 1, 0.5, &(em_clip_grad_opts){.norm_type = 3}, &total), EM_OK);
    ck_assert_double_eq_tol(total, cbrt(s3), 1e-12 * cbrt(s3));
    double coef = fmin(0.5 / (cbrt(s3) + 1e-6), 1.0), *got = tu_to_doubles(em_grad(q));
    for (int i = 0; i < 10; i++) ref[i] *= coef;
    tu_assert_close(got, ref, 10, 1e-14, 1e-16);
    free(got);
    /* bf16 gradients: norms and coefficient rounded to bf16, as torch */
    em_tensor *h = em_requires_grad_(em_zeros(EM_SHAPE(3), EM_BF16, EM_CPU), true);
    em_set_grad(h, em_to_dtype(em_from_data((float[]){3, 4, 0}, EM_SHAPE(3), EM_F32), EM_BF16));
    ck_assert_int_eq(em_clip_grad_norm(&h, 1, 1.0, NULL, &total), EM_OK);
    ck_assert(total == 5.0);
    ck_assert_int_eq(em_grad(h)->dtype, EM_BF16);
    double hc = em__bf16_to_f32(em__f32_to_bf16(1.0f / 5.0f));   /* 1/(5+1e-6) in bf16 is 1/5's */
    for (int i = 0; i < 2; i++)
        ck_assert(em_get(em_grad(h), (int64_t[]){i}) == em__bf16_to_f32(em__f32_to_bf16((float)((3 + i) * hc))));
    /* over an optimizer's parameters = over the same list */
    em_tensor *r[2] = {em_requires_grad_(em_zeros(EM_SHAPE(4), EM_F32, EM_CPU), true),
                       em_requires_grad_(em_zeros(EM_SHAPE(4), EM_F32, EM_CPU), true)};
    em_set_grad(r[0], em_full(EM_SHAPE(4), 2.0, EM_F32, EM_CPU));
    em_set_grad(r[1], em_full(EM_SHAPE(4), 1.0, EM_F32, EM_CPU));
    em_param_group rg[2] = {{.params = r, .n_params = 1}, {.params = r + 1, .n_params = 1}};
    em_optimizer *ro = em_sgd_new_groups(rg, 2, NULL);
    ck_assert_int_eq(em_optimizer_clip_grad_norm(ro, 1.0, NULL, &total), EM_OK);
    ck_assert_double_eq_tol(total, sqrt(20.0), 1e-6);
    ck_assert_double_eq_tol(em_get(em_grad(r[1]), (int64_t[]){0}), 1 / sqrt(20.0), 1e-6);
    em_optimizer_free(ro);
    /* no gradients at all: 0, nothing touched */
    em_tensor *none = em_requires_grad_(em_zeros(EM_SHAPE(3), EM_F32, EM_CPU), true);
    total = -1;
    ck_assert_int_eq(em_clip_grad_norm(&none, 1, 1.0, NULL, &total), EM_OK);
    ck_assert(total == 0);
    em_scope_end();
    em_safetensors_close(st);
}
END_TEST

START_TEST(clip_error_if_nonfinite)
{
    em_safetensors *st = open_fixture();
    em_scope_begin();
    em_tensor *ps[3];
    for (int j = 0; j < 3; j++) {
        em_tensor *g = get(st, "clip.has_inf.in.g%d", j);
        ps[j] = em_requires_grad_(em_zeros_like(g), true);
        em_set_grad(ps[j], em_clone(g));
    }
    double total = 0;
    em_status s = em_clip_grad_norm(ps, 3, 1.0, &(em_clip_grad_opts){.error_if_nonfinite = true}, &total);
    ck_assert_int_eq(s, EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "non-finite"), "message: %s", em_last_error());
    ck_assert(isinf(total));
    for (int j = 0; j < 3; j++) expect_close("untouched", em_grad(ps[j]), get(st, "clip.has_inf.in.g%d", j), 0, 0);
    em_clear_error();
    em_scope_end();
    em_safetensors_close(st);
}
END_TEST

/* ---- weight-decay grouping --------------------------------------------------------------------- */
/* Splits a comma-separated list into a malloc'd array of malloc'd strings. */
static int split_list(const char *s, char ***out)
{
    char *dup = strdup(s), *save = NULL;
    int n = 0;
    char **v = malloc(sizeof *v * (strlen(s) + 1));
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) v[n++] = strdup(tok);
    free(dup);
    *out = v;
    return n;
}

START_TEST(no_decay_rule_equals_trainer_on_distilbert)
{
    em_safetensors *st = open_fixture();
    em_scope_begin();
    char **names, **ndims, **trainer, **substr;
    int n = split_list(em_safetensors_metadata(st, "distilbert.names"), &names);
    ck_assert_int_eq(split_list(em_safetensors_metadata(st, "distilbert.ndims"), &ndims), n);
    int nt = split_list(em_safetensors_metadata(st, "distilbert.trainer_decay"), &trainer);
    int ns = split_list(em_safetensors_metadata(st, "distilbert.substring_decay"), &substr);
    ck_assert_int_ge(n, 30);
    em_tensor **ps = malloc(sizeof *ps * (size_t)n), **buf = malloc(sizeof *buf * (size_t)n);
    int n_extra = 0;
    for (int i = 0; i < n; i++) {
        ps[i] = em_requires_grad_(atoi(ndims[i]) == 2 ? em_zeros(EM_SHAPE(2, 2), EM_F32, EM_CPU)
                                                      : em_zeros(EM_SHAPE(2), EM_F32, EM_CPU), true);
        bool decay = !em_param_no_decay(names[i], ps[i]);
        ck_assert_msg(decay == tu_in_list(trainer, nt, names[i]), "%s: ember %s, Trainer %s", names[i],
                      decay ? "decays" : "does not decay", decay ? "does not" : "does");
        /* HF's substring rule decays exactly the per-layer norms on top */
        if (tu_in_list(substr, ns, names[i]) && !decay) {
            ck_assert_msg(strstr(names[i], "sa_layer_norm.weight") || strstr(names[i], "output_layer_norm.weight"),
                          "%s", names[i]);
            n_extra++;
        }
    }
    ck_assert_int_eq(n_extra, 4);   /* 2 layers x (sa_layer_norm, output_layer_norm) */
    ck_assert_int_eq(ns, nt + n_extra);
    /* the grouping helper: order kept, explicit zero decay in group 1 */
    em_param_group g[2];
    ck_assert_int_eq(em_param_groups_no_decay((const char *const *)names, ps, n, 0.01, buf, g), 2);
    ck_assert_int_eq(g[0].n_params, nt);
    ck_assert_int_eq(g[1].n_params, n - nt);
    for (int i = 0, a = 0, b = 0; i < n; i++) {
        bool decay = tu_in_list(trainer, nt, names[i]);
        ck_assert_ptr_eq(decay ? g[0].params[a++] : g[1].params[b++], ps[i]);
    }
    em_optimizer *o = em_adamw_new_groups(g, 2, NULL);
    ck_assert(em_optimizer_group(o, 0).weight_decay == 0.01);
    ck_assert(em_optimizer_group(o, 1).weight_decay == 0.0);   /* not AdamW's default 1e-2 */
    em_optimizer_free(o);
    /* names alone (2-d tensors) */
    em_tensor *w2 = em_zeros(EM_SHAPE(2, 2), EM_F32, EM_CPU);
    const char *no[] = {"encoder.norm.weight", "x.final_norm.weight", "blk.RMSNorm.weight", "m.LayerNorm.weight",
                        "a.bias_scale", "norm"};
    const char *yes[] = {"decoder.normal.weight", "a.b_normx.weight", "enorm.weight", "q_lin.weight"};
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) ck_assert_msg(em_param_no_decay(no[i], w2), "%s", no[i]);
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) ck_assert_msg(!em_param_no_decay(yes[i], w2), "%s", yes[i]);
    for (int i = 0; i < n; i++) free(names[i]), free(ndims[i]);
    for (int i = 0; i < nt; i++) free(trainer[i]);
    for (int i = 0; i < ns; i++) free(substr[i]);
    free(names), free(ndims), free(trainer), free(substr), free(ps), free(buf);
    em_scope_end();
    em_safetensors_close(st);
}
END_TEST

/* ---- semantics --------------------------------------------------------------------------------- */
/* zero_grad(set_to_none = false) fills each run of gradients that lie end to end
 * in one buffer once, whatever the groups' order, and writes nothing else: a
 * gradient between two of the optimizer's that the optimizer does not hold keeps
 * its values. */
START_TEST(zero_grad_fills_adjacent_runs_once)
{
    em_scope_begin();
    em_tensor *flat = em_full(EM_SHAPE(10), 7.0, EM_F32, EM_CPU);
    const int64_t at[3] = {0, 3, 5}, len[3] = {3, 2, 5};
    em_tensor *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = em_requires_grad_(em_ones(1, &len[i], EM_F32, EM_CPU), true);
        em_set_grad(p[i], em_narrow(flat, 0, at[i], len[i]));
    }
    em_profile_reset();
    em_profile_enable(true);
    /* a and c only: two runs, b untouched */
    em_optimizer *o1 = em_adamw_new((em_tensor *[]){p[2], p[0]}, 2, NULL);
    em_optimizer_zero_grad_ex(o1, false);
    ck_assert_int_eq(tu_profiled_calls("fill"), 2);
    for (int64_t e = 0; e < 10; e++)
        ck_assert_double_eq(em_get(flat, &e), e >= 3 && e < 5 ? 7.0 : 0.0);
    /* all three, over two groups in another order: one fill of the buffer */
    em_fill_(flat, 7.0);
    em_profile_reset();
    em_optimizer *o2 = em_adamw_new((em_tensor *[]){p[2], p[1]}, 2, NULL);
    ck_assert_int_eq(em_optimizer_add_param_group(o2, &(em_param_group){.params = &p[0], .n_params = 1}), EM_OK);
    em_optimizer_zero_grad_ex(o2, false);
    ck_assert_int_eq(tu_profiled_calls("fill"), 1);
    for (int64_t e = 0; e < 10; e++) ck_assert_double_eq(em_get(flat, &e), 0.0);
    em_profile_enable(false);
    for (int i = 0; i < 3; i++) ck_assert_ptr_eq(em_grad(p[i])->storage, flat->storage);
    em_optimizer_free(o1);
    em_optimizer_free(o2);
    em_scope_end();
}
END_TEST

START_TEST(defaults_skip_and_zero_grad)
{
    em_scope_begin();
    em_tensor *a = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true);
    em_tensor *b = em_requires_grad_(em_ones(EM_SHAPE(2), EM_F32, EM_CPU), true);
    em_tensor *ps[2] = {a, b};
    em_optimizer *o = em_adamw_new(ps, 2, NULL);
    ck_assert_str_eq(em_optimizer_name(o), "AdamW");
    em_param_group g = em_optimizer_group(o, 0);
    ck_assert(g.lr == 1e-3 && g.betas[0] == 0.9 && g.betas[1] == 0.999 && g.eps == 1e-8 && g.weight_decay == 1e-2);
    em_set_grad(a, em_ones(EM_SHAPE(3), EM_F32, EM_CPU));
    ck_assert_int_eq(em_optimizer_step(o), EM_OK);
    ck_assert(em_optimizer_param_step(o, 0, 0) == 1 && em_optimizer_param_step(o, 0, 1) == 0);
    ck_assert(em_get(b, (int64_t[]){0}) == 1.0);   /* no grad: untouched, even by weight decay */
    /* first step: p*(1-lr*wd) - lr*g/|g| (m/sqrt(v) = 1 after bias correction) */
    ck_assert_double_eq_tol(em_get(a, (int64_t[]){1}), 1 - 1e-3 * 1e-2 - 1e-3, 1e-6);
    em_tensor *ga = em_grad(a);
    em_optimizer_zero_grad_ex(o, false);
    ck_assert_ptr_eq(em_grad(a), ga);
    ck_assert(em_get(ga, (int64_t[]){2}) == 0.0);
    em_optimizer_zero_grad(o);
    ck_assert_ptr_null(em_grad(a));
    ck_assert_ptr_null(em_grad(b));
    /* SGD defaults, add_param_group inheriting the options, set_lr */
    em_optimizer *s = em_sgd_new(&a, 1, NULL);
    ck_assert(em_optimizer_lr(s, 0) == 1e-3 && em_optimizer_group(s, 0).momentum == 0);
    ck_assert_int_eq(em_optimizer_add_param_group(s, &(em_param_group){.params = &b, .n_params = 1, .momentum = 0.5}),
                     EM_OK);
    ck_assert_int_eq(em_optimizer_num_groups(s), 2);
    ck_assert(em_optimizer_lr(s, 1) == 1e-3 && em_optimizer_group(s, 1).momentum == 0.5);
    em_optimizer_set_lr(s, 1, 0.25);
    ck_assert(em_optimizer_lr(s, 1) == 0.25);
    em_set_grad(b, em_full(EM_SHAPE(2), 2.0, EM_F32, EM_CPU));
    ck_assert_int_eq(em_optimizer_step(s), EM_OK);
    ck_assert(em_get(b, (int64_t[]){0}) == 1.0 - 0.25 * 2.0);
    em_optimizer_free(s);
    em_optimizer_free(o);
    em_scope_end();
}
END_TEST

START_TEST(no_leak_and_oom_at_every_allocation)
{
    int64_t base = tu_live_bytes();
    em_scope_begin();
    em_tensor *ps[3];
    for (int i = 0; i < 3; i++)
        ps[i] = em_requires_grad_(tu_rand_tensor(EM_SHAPE(5 + i, 3), EM_F32, -1, 1, 30 + (uint64_t)i, NULL), true);
    em_tensor *before[3];
    for (int i = 0; i < 3; i++) {
        before[i] = em_clone(ps[i]);
        em_set_grad(ps[i], em_transpose(em_ones(EM_SHAPE(3, 5 + i), EM_F32, EM_CPU), 0, 1));   /* strided grads */
    }
    int fails = 0;
    for (int64_t n = 1; n < 200; n++) {
        em_optimizer *o = em_adamw_new(ps, 3, &(em_adamw_opts){.amsgrad = true});
        em_alloc_fail_after(n, false);
        em_status s = em_optimizer_step(o);
        em_alloc_fail_after(0, false);
        if (s == EM_OK) {
            em_optimizer_free(o);
            break;
        }
        ck_assert_int_eq(s, EM_ERR_OOM);
        fails++;
        for (int i = 0; i < 3; i++) {
            ck_assert(bit_equal(ps[i], before[i]));
            ck_assert(em_optimizer_param_step(o, 0, i) == 0);
        }
        ck_assert_int_eq(em_optimizer_step(o), EM_OK);   /* and it recovers */
        em_optimizer_free(o);
        EM_NO_GRAD {
            for (int i = 0; i < 3; i++) em_copy_(ps[i], before[i]);
        }
    }
    ck_assert_int_gt(fails, 3);
    em_clear_error();
    em_scope_end();
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

/* ---- checkpoints ------------------------------------------------------------------------------- */
static void set_grads(em_tensor **p, int n, int step, int skip_until)
{
    for (int i = 0; i < n; i++) {
        if (i == 1 && step < skip_until) {
            em_set_grad(p[i], NULL);
            continue;
        }
        em_set_grad(p[i], tu_rand_tensor(p[i]->ndim, p[i]->shape, p[i]->dtype, -1, 1, 1000 + 10 * (uint64_t)step + (uint64_t)i, NULL));
    }
}

static em_optimizer *mk_rt(em_tensor **p, bool sgd)
{
    em_param_group g[2] = {{.params = p, .n_params = 2}, {.params = p + 2, .n_params = 1, .lr = 3e-3, .weight_decay = EM_ZERO}};
    return sgd ? em_sgd_new_groups(g, 2, &(em_sgd_opts){.lr = 0.05, .momentum = 0.9, .dampening = 0.1})
               : em_adamw_new_groups(g, 2, &(em_adamw_opts){.lr = 1e-2, .amsgrad = true});
}

/* Steps from..to-1 of the round trip on the 3 parameters p: set_grads(p, 3, t, 4), an
 * optimizer step (asserted EM_OK) and a scheduler step each. */
static void run_steps(em_tensor **p, em_optimizer *o, em_scheduler *s, int from, int to)
{
    for (int t = from; t < to; t++) {
        set_grads(p, 3, t, 4);
        ck_assert_int_eq(em_optimizer_step(o), EM_OK);
        em_scheduler_step(s);
    }
}

static void round_trip(bool sgd)
{
    em_scope_begin();
    em_tensor *a[3], *b[3];
    for (int i = 0; i < 3; i++) {
        a[i] = em_requires_grad_(tu_rand_tensor(EM_SHAPE(3, 2 + i), EM_F32, -1, 1, 70 + (uint64_t)i, NULL), true);
        b[i] = em_requires_grad_(em_clone(em_detach(a[i])), true);
    }
    /* a: 6 uninterrupted steps */
    em_optimizer *oa = mk_rt(a, sgd);
    em_scheduler *sa = em_cosine_schedule_with_warmup(oa, 1, 6, 0);
    run_steps(a, oa, sa, 0, 6);
    /* b: 3 steps (param 1 without grad so far: no state), save, rebuild, load, 3 more */
    em_optimizer *ob = mk_rt(b, sgd);
    em_scheduler *sb = em_cosine_schedule_with_warmup(ob, 1, 6, 0);
    run_steps(b, ob, sb, 0, 3);
    const char *op = tmp_path("opt.safetensors"), *sp = tmp_path("sched.safetensors");
    ck_assert_int_eq(em_optimizer_state_save(ob, op), EM_OK);
    ck_assert_int_eq(em_scheduler_state_save(sb, sp), EM_OK);
    em_scheduler_free(sb);
    em_optimizer_free(ob);
    em_tensor *c[3];
    for (int i = 0; i < 3; i++) c[i] = em_requires_grad_(em_clone(em_detach(b[i])), true);
    em_optimizer *oc = mk_rt(c, sgd);
    set_grads(c, 3, 9, 0);   /* some state for param 1 that the load must reset */
    ck_assert_int_eq(em_optimizer_step(oc), EM_OK);
    EM_NO_GRAD {
        for (int i = 0; i < 3; i++) em_copy_(c[i], b[i]);
    }
    em_scheduler *sc = em_cosine_schedule_with_warmup(oc, 1, 6, 0);
    ck_assert_int_eq(em_optimizer_state_load(oc, op), EM_OK);
    ck_assert_int_eq(em_scheduler_state_load(sc, sp), EM_OK);
    ck_assert_int_eq(em_scheduler_last_epoch(sc), 3);
    ck_assert(em_optimizer_param_step(oc, 0, 1) == 0);
    run_steps(c, oc, sc, 3, 6);
    for (int i = 0; i < 3; i++) ck_assert_msg(bit_equal(a[i], c[i]), "param %d differs after the round trip", i);
    for (int g = 0; g < 2; g++) ck_assert(em_optimizer_lr(oa, g) == em_optimizer_lr(oc, g));
    em_scheduler_free(sa);
    em_scheduler_free(sc);
    em_optimizer_free(oa);
    em_optimizer_free(oc);
    em_scope_end();
    cleanup_tmp();
}

TU_TEST(state_round_trip_adamw, round_trip(false))
TU_TEST(state_round_trip_sgd, round_trip(true))

START_TEST(state_load_rejects_mismatches)
{
    em_scope_begin();
    em_tensor *p[3];
    for (int i = 0; i < 3; i++) p[i] = em_requires_grad_(tu_rand_tensor(EM_SHAPE(4, 3), EM_F32, -1, 1, 3, NULL), true);
    em_optimizer *o = em_adamw_new(p, 3, &(em_adamw_opts){.amsgrad = true});
    set_grads(p, 3, 0, 0);
    ck_assert_int_eq(em_optimizer_step(o), EM_OK);
    const char *path = tmp_path("adamw.safetensors"), *spath = tmp_path("sgd.safetensors");
    ck_assert_int_eq(em_optimizer_state_save(o, path), EM_OK);
    em_optimizer *s = em_sgd_new(p, 3, &(em_sgd_opts){.momentum = 0.9});
    ck_assert_int_eq(em_optimizer_step(s), EM_OK);
    ck_assert_int_eq(em_optimizer_state_save(s, spath), EM_OK);

    /* the wrong kind */
    ck_assert_int_eq(em_optimizer_state_load(s, path), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "AdamW") && strstr(em_last_error(), "SGD"), "%s", em_last_error());
    /* transposed shapes: the message names the key and both shapes; nothing changes */
    em_tensor *q[3];
    for (int i = 0; i < 3; i++) q[i] = em_requires_grad_(em_zeros(EM_SHAPE(3, 4), EM_F32, EM_CPU), true);
    em_optimizer *t = em_adamw_new(q, 3, &(em_adamw_opts){.amsgrad = true, .lr = 0.5});
    ck_assert_int_eq(em_optimizer_state_load(t, path), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "state.0.") && strstr(em_last_error(), "[4,3]") &&
                  strstr(em_last_error(), "[3,4]"), "%s", em_last_error());
    ck_assert(em_optimizer_lr(t, 0) == 0.5 && em_optimizer_param_step(t, 0, 0) == 0);
    /* group layout */
    em_param_group g2[2] = {{.params = q, .n_params = 2}, {.params = q + 2, .n_params = 1}};
    em_optimizer *u = em_adamw_new_groups(g2, 2, &(em_adamw_opts){.amsgrad = true});
    ck_assert_int_eq(em_optimizer_state_load(u, path), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "parameter groups"), "%s", em_last_error());
    em_optimizer *w = em_adamw_new(q, 2, &(em_adamw_opts){.amsgrad = true});
    ck_assert_int_eq(em_optimizer_state_load(w, path), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "3 parameters"), "%s", em_last_error());
    /* amsgrad switch */
    em_optimizer *x = em_adamw_new(p, 3, NULL);
    ck_assert_int_eq(em_optimizer_state_load(x, path), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "amsgrad"), "%s", em_last_error());
    /* a moment that is not finite (a run whose gradients were NaN saved it): refused
     * by name, the optimizer unchanged, rather than NaN weights a step later */
    em_tensor *nq[3];
    for (int i = 0; i < 3; i++) nq[i] = em_requires_grad_(em_zeros(EM_SHAPE(4, 3), EM_F32, EM_CPU), true);
    em_optimizer *nan_o = em_adamw_new(nq, 3, NULL);
    for (int i = 0; i < 3; i++) em_set_grad(nq[i], em_full(2, (int64_t[]){4, 3}, i == 1 ? NAN : 0.5, EM_F32, EM_CPU));
    ck_assert_int_eq(em_optimizer_step(nan_o), EM_OK);
    const char *nan_path = tmp_path("nan.safetensors");
    ck_assert_int_eq(em_optimizer_state_save(nan_o, nan_path), EM_OK);
    em_optimizer *fresh = em_adamw_new(p, 3, &(em_adamw_opts){.lr = 0.25});
    ck_assert_int_eq(em_optimizer_state_load(fresh, nan_path), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "state.1.exp_avg") && strstr(em_last_error(), "non-finite"), "%s",
                  em_last_error());
    ck_assert(em_optimizer_lr(fresh, 0) == 0.25 && em_optimizer_param_step(fresh, 0, 0) == 0);
    em_optimizer_free(nan_o), em_optimizer_free(fresh);
    /* missing and malformed files */
    ck_assert_int_ne(em_optimizer_state_load(x, tmp_path("absent.safetensors")), EM_OK);
    const char *keys[] = {"format", "optimizer", "param_groups", "param_groups.0.params"};
    const char *vals[] = {"ember.optimizer/1", "AdamW", "1", "0,1,2"};
    const char *bad = tmp_path("bad.safetensors");
    ck_assert_int_eq(em_safetensors_save(bad, 0, NULL, NULL, 4, keys, vals), EM_OK);
    ck_assert_int_eq(em_optimizer_state_load(x, bad), EM_ERR_FORMAT);
    ck_assert_msg(strstr(em_last_error(), "param_groups.0.lr"), "%s", em_last_error());
    em_scheduler *xs = em_linear_schedule_with_warmup(x, 1, 2);
    ck_assert_int_eq(em_scheduler_state_load(xs, bad), EM_ERR_FORMAT);
    em_scheduler_free(xs);
    /* a scheduler state of another kind */
    em_scheduler *lin = em_linear_schedule_with_warmup(o, 1, 5), *cosn = em_cosine_schedule_with_warmup(o, 1, 5, 0);
    const char *sched = tmp_path("sched.safetensors");
    ck_assert_int_eq(em_scheduler_state_save(lin, sched), EM_OK);
    ck_assert_int_eq(em_scheduler_state_load(cosn, sched), EM_ERR_INVALID);
    em_scheduler_free(lin);
    em_scheduler_free(cosn);
    em_clear_error();
    em_optimizer *all[] = {o, s, t, u, w, x};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) em_optimizer_free(all[i]);
    em_scope_end();
    cleanup_tmp();
}
END_TEST

/* ---- misuse ------------------------------------------------------------------------------------- */
static em_tensor *leaf(void) { return em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true); }

START_TEST(misuse_negative_lr)
{
    tu_expect_misuse("invalid learning rate");
    em_tensor *p = leaf();
    em_adamw_new(&p, 1, &(em_adamw_opts){.lr = -1});
}
END_TEST

START_TEST(misuse_bad_beta)
{
    tu_expect_misuse("beta parameter at index 1");
    em_tensor *p = leaf();
    em_adamw_new(&p, 1, &(em_adamw_opts){.betas = {0.9, 1.0}});
}
END_TEST

START_TEST(misuse_nesterov_without_momentum)
{
    tu_expect_misuse("nesterov momentum requires a momentum and zero dampening");
    em_tensor *p = leaf();
    em_sgd_new(&p, 1, &(em_sgd_opts){.lr = 0.1, .nesterov = true});
}
END_TEST

START_TEST(misuse_unknown_optimizer_name)
{
    tu_expect_misuse("unknown optimizer 'Lion' (ember has SGD, AdamW");
    em_tensor *p = leaf();
    em_optimizer_new("Lion", &(em_param_group){.params = &p, .n_params = 1}, 1, NULL);
}
END_TEST

START_TEST(misuse_group_out_of_range)
{
    tu_expect_misuse("group 2 out of range: the optimizer has 1 group");
    em_tensor *p = leaf();
    em_optimizer *o = em_sgd_new(&p, 1, NULL);
    em_optimizer_lr(o, 2);
}
END_TEST

START_TEST(misuse_param_in_two_groups)
{
    tu_expect_misuse("is already in group 0");
    em_tensor *p = leaf();
    em_param_group g[2] = {{.params = &p, .n_params = 1}, {.params = &p, .n_params = 1}};
    em_adamw_new_groups(g, 2, NULL);
}
END_TEST

START_TEST(misuse_empty_parameter_list)
{
    tu_expect_misuse("empty parameter list");
    em_adamw_new(NULL, 0, NULL);
}
END_TEST

START_TEST(misuse_non_leaf_param)
{
    tu_expect_misuse("is not a leaf");
    em_tensor *p = em_mul_scalar(leaf(), 2.0);
    em_sgd_new(&p, 1, NULL);
}
END_TEST

START_TEST(misuse_integer_param)
{
    tu_expect_misuse("is not f32 or f64");
    em_tensor *p = em_zeros(EM_SHAPE(2), EM_BF16, EM_CPU);
    em_sgd_new(&p, 1, NULL);
}
END_TEST

START_TEST(misuse_set_negative_lr)
{
    tu_expect_misuse("invalid learning rate -0.1");
    em_tensor *p = leaf();
    em_optimizer_set_lr(em_sgd_new(&p, 1, NULL), 0, -0.1);
}
END_TEST

START_TEST(misuse_scheduler_after_new_group)
{
    tu_expect_misuse("the scheduler was made for 1");
    em_tensor *p = leaf(), *q = leaf();
    em_optimizer *o = em_sgd_new(&p, 1, NULL);
    em_scheduler *s = em_linear_schedule_with_warmup(o, 1, 10);
    em_optimizer_add_param_group(o, &(em_param_group){.params = &q, .n_params = 1});
    em_scheduler_step(s);
}
END_TEST

START_TEST(misuse_clip_norm_type)
{
    tu_expect_misuse("norm_type must be > 0");
    em_tensor *p = leaf();
    em_clip_grad_norm(&p, 1, 1.0, &(em_clip_grad_opts){.norm_type = -2}, NULL);
}
END_TEST

/* A step changes parameters in place: a graph that saved one cannot be
 * back-propagated afterwards (torch: "modified by an inplace operation"). */
START_TEST(misuse_backward_after_step)
{
    tu_expect_misuse("modified by an in-place op");
    em_tensor *p = leaf();
    em_tensor *y = em_sum(em_mul(p, p), 0, NULL, false);
    em_set_grad(p, em_ones(EM_SHAPE(3), EM_F32, EM_CPU));
    em_optimizer_step(em_sgd_new(&p, 1, NULL));
    em_backward(y);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tu_case(s, "core", 0);
    tu_add_tests(tc, trajectories_match_torch, trajectories_match_torch_unfused, adamw_f64_matches_textbook,
                 sgd_f64_matches_textbook, fused_pass_equals_separate, schedulers_match_transformers_exactly,
                 clip_grad_norm_matches_torch, clip_error_if_nonfinite,
                 no_decay_rule_equals_trainer_on_distilbert, defaults_skip_and_zero_grad,
                 zero_grad_fills_adjacent_runs_once,
                 no_leak_and_oom_at_every_allocation, state_round_trip_adamw, state_round_trip_sgd,
                 state_load_rejects_mismatches);
    tu_add_misuse_tests(tc, misuse_negative_lr, misuse_bad_beta, misuse_nesterov_without_momentum,
                        misuse_unknown_optimizer_name, misuse_group_out_of_range, misuse_param_in_two_groups, misuse_empty_parameter_list,
                        misuse_non_leaf_param, misuse_integer_param, misuse_set_negative_lr,
                        misuse_scheduler_after_new_group, misuse_clip_norm_type, misuse_backward_after_step);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
