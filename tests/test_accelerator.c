/* ember tests — the Accelerator in a world of one (distributed.h): prepare,
 * gradient accumulation (K micro-batches equal one big batch, and the short
 * last window equals its own big batch), the sync pattern driven by the
 * dataloader's end_of_dataloader, optimizer/scheduler no-ops and the
 * scheduler rule (fp16 skipped steps included), clipping, gather_for_metrics,
 * save_state/load_state (a bit-identical continuation from fresh objects,
 * atomic overwrite, automatic naming with total_limit sorted numerically, the
 * iteration counter restored), the environment's precedence, the one-time
 * warnings for the common mistakes (direct em_backward, forgotten zero_grad
 * with its divergence, a second prepare; stderr captured), and misuse.
 *
 * The toy task: 4 token ids per sample read as features (id / 10), a 2-layer
 * tanh MLP (optionally with dropout, to exercise the RNG state) and
 * cross-entropy on a 0/1 label. References are built with plain ember calls
 * (no accelerator) on the concatenated big batch. */
#include "check_util.h"
#include "toy_model.h"
#include "distributed/distributed.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the toy dataset (toy_model.h): label 1 when the ids sum past 18 ------------- */
static toy_ds *toy_new(int64_t n, uint64_t seed)
{
    toy_ds *t = toy_ds_alloc(n);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        int sum = 0;
        for (int k = 0; k < FEAT; k++) sum += t->ids[i * FEAT + k] = (int32_t)(tu_next(&s) % 10);
        t->labels[i] = sum > 18;
    }
    return t;
}


/* A copy of m's parameter values into a second model (same architecture). */
static void copy_params(toy_model *dst, toy_model *src)
{
    int n, n2;
    em_tensor **a = params_of(dst, &n), **b = params_of(src, &n2);
    ck_assert_int_eq(n, n2);
    EM_NO_GRAD {
        for (int i = 0; i < n; i++) em_copy_(a[i], b[i]);
    }
    free(a);
    free(b);
}

/* One plain SGD step on the big batch [from, from + n): the reference. */
static void reference_step(toy_model *m, em_optimizer *opt, toy_ds *ds, int64_t from, int64_t n)
{
    EM_SCOPE {
        em_tensor *ids, *labels;
        toy_rows(ds, from, n, &ids, &labels);
        em_backward(toy_loss(m, ids, labels));
        em_optimizer_step(opt);
        em_optimizer_zero_grad_ex(opt, false);
    }
}

static void assert_params_close(toy_model *a, toy_model *b, double rtol)
{
    int64_t na, nb;
    float *x = snapshot(a, &na), *y = snapshot(b, &nb);
    ck_assert_int_eq(na, nb);
    double *dx = malloc(sizeof(double) * (size_t)na), *dy = malloc(sizeof(double) * (size_t)na);
    for (int64_t i = 0; i < na; i++) dx[i] = x[i], dy[i] = y[i];
    tu_assert_close(dx, dy, na, rtol, 1e-7);
    free(dx), free(dy), free(x), free(y);
}

static em_dataloader *loader(toy_ds *ds, int64_t bs, bool shuffle)
{
    em_dataloader *dl;
    ck_assert_int_eq(em_dataloader_new(&ds->base, &(em_dataloader_opts){ .batch_size = bs, .shuffle = shuffle }, &dl),
                     EM_OK);
    return dl;
}

/* A run (toy_model.h) over ds, which it then owns: a fresh toy model without
 * dropout and a loader of batches of bs; the test adds the optimizer, the
 * scheduler and the accelerator, and frees it all with toy_run_free. */
static toy_run run_of(toy_ds *ds, int64_t bs, bool shuffle)
{
    toy_run r = { .ds = ds, .m = toy_model_new(0) };
    r.p = params_of(r.m, &r.n);
    r.dl = loader(ds, bs, shuffle);
    return r;
}

/* A run (toy_model.h) of just ds (which it then owns) and its loader of batches
 * of bs, prepared on an accelerator of one with the default options. */
static toy_run loader_run(toy_ds *ds, int64_t bs)
{
    toy_run r = { .ds = ds, .dl = loader(ds, bs, false), .acc = em_accelerator_new(NULL) };
    ck_assert_int_eq(em_accelerator_prepare_dataloader(r.acc, r.dl), EM_OK);
    return r;
}

/* Trains K-accumulated micro-steps over one epoch of N samples in batches of
 * bs, and compares with plain SGD on the windows' big batches. */
static void check_windows(int64_t N, int64_t bs, int K)
{
    em_set_seed(7);
    toy_run r = run_of(toy_new(N, 11), bs, false);
    toy_model *ref = toy_model_new(0);
    em_module_flatten(&ref->base);
    copy_params(ref, r.m);
    em_tensor **pr = params_of(ref, &r.n);
    r.opt = em_sgd_new(r.p, r.n, &(em_sgd_opts){ .lr = 0.5 });
    em_optimizer *opt_ref = em_sgd_new(pr, r.n, &(em_sgd_opts){ .lr = 0.5 });
    r.acc = em_accelerator_new(&(em_accelerator_opts){ .gradient_accumulation_steps = K });
    ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, NULL), EM_OK);

    int64_t L = em_dataloader_len(r.dl), micro = 0, window_start = 0;
    for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) {
        int64_t before_n;
        float *before = snapshot(r.m, &before_n);
        EM_ACCUMULATE(r.acc, &r.m->base) {
            ck_assert_int_eq(toy_run_step(&r, toy_loss(r.m, b.input_ids, b.labels), 0), EM_OK);
        }
        micro++;
        bool expect_sync = micro % K == 0 || micro == L;
        ck_assert_msg(em_accelerator_sync_gradients(r.acc) == expect_sync, "micro-step %lld: sync %d", (long long)micro,
                      em_accelerator_sync_gradients(r.acc));
        int64_t after_n;
        float *after = snapshot(r.m, &after_n);
        if (!expect_sync) {
            ck_assert_msg(memcmp(before, after, sizeof(float) * (size_t)after_n) == 0,
                          "the optimizer stepped on non-sync micro-step %lld", (long long)micro);
        } else {
            int64_t rows = micro * bs < N ? micro * bs - window_start : N - window_start;
            reference_step(ref, opt_ref, r.ds, window_start, rows);
            window_start += rows;
            assert_params_close(r.m, ref, 2e-6);
        }
        free(before), free(after);
    }
    ck_assert_int_eq(micro, L);
    ck_assert_int_eq(window_start, N);
    ck_assert_int_eq(em_accelerator_optimizer_steps(r.acc), (L + K - 1) / K);
    toy_run_free(&r);
    em_optimizer_free(opt_ref), free(pr), em_module_free(&ref->base);
}

START_TEST(test_accumulation_equals_big_batch)
{
    check_windows(16, 2, 4);   /* two full windows of 4 micro-batches */
    check_windows(12, 3, 1);   /* no accumulation */
}
END_TEST

START_TEST(test_short_last_window)
{
    check_windows(10, 2, 4);   /* L = 5: windows of 4 and 1 */
    check_windows(12, 2, 4);   /* L = 6: windows of 4 and 2 */
    check_windows(18, 3, 4);   /* L = 6 again, batches of 3 */
}
END_TEST

/* The scheduler steps once per optimizer step that happened: over two epochs
 * of L = 5 batches with K = 2 (syncs at micro-steps 2, 4, 5 of each epoch). */
static double lr_lambda(int64_t s, void *user)
{
    (void)user;
    return 1.0 / (double)(s + 1);
}

START_TEST(test_sync_pattern_and_scheduler_rule)
{
    em_set_seed(3);
    toy_run r = run_of(toy_new(10, 5), 2, true);
    r.opt = em_adamw_new(r.p, r.n, &(em_adamw_opts){ .lr = 1e-2 });
    r.sched = em_lambda_lr_new(r.opt, lr_lambda, NULL);
    r.acc = em_accelerator_new(&(em_accelerator_opts){ .gradient_accumulation_steps = 2 });
    ck_assert(em_accelerator_sync_gradients(r.acc));   /* before any micro-step */
    ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, r.sched), EM_OK);
    const bool pattern[5] = { false, true, false, true, true };
    int micro = 0;
    for (int epoch = 0; epoch < 2; epoch++)
        for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) {
            bool eod = em_dataloader_end_of_dataloader(r.dl);
            int64_t sched_before = em_scheduler_last_epoch(r.sched);
            /* the Python loop of issue 6, without an accumulate block: each
             * backward is a micro-step of its own */
            ck_assert_int_eq(toy_run_step(&r, toy_loss(r.m, b.input_ids, b.labels), 0), EM_OK);
            bool sync = em_accelerator_sync_gradients(r.acc);
            ck_assert_msg(sync == pattern[micro % 5], "micro-step %d: sync %d", micro, sync);
            ck_assert_int_eq(eod, micro % 5 == 4);
            ck_assert_int_eq(em_scheduler_last_epoch(r.sched) - sched_before, sync ? 1 : 0);
            if (!sync) {   /* the gradients accumulate: zero_grad was a no-op */
                em_tensor *g = em_grad(r.p[0]);
                ck_assert_ptr_nonnull(g);
                ck_assert(em_item(em_sum(em_abs(g), 0, NULL, false)) > 0);
            }
            micro++;
        }
    ck_assert_int_eq(micro, 10);
    ck_assert_int_eq(em_accelerator_step(r.acc), 10);
    ck_assert_int_eq(em_accelerator_optimizer_steps(r.acc), 6);
    ck_assert_int_eq(em_scheduler_last_epoch(r.sched), 6);
    ck_assert_double_eq_tol(em_optimizer_lr(r.opt, 0), 1e-2 / 7.0, 1e-15);
    toy_run_free(&r);
}
END_TEST

/* fp16 on the CPU: a scale so large that the scaled gradients overflow makes
 * the GradScaler skip the step; the scheduler must not step then. */
START_TEST(test_fp16_skipped_step_skips_scheduler)
{
    em_set_seed(3);
    toy_run r = run_of(toy_new(8, 5), 4, false);
    r.opt = em_sgd_new(r.p, r.n, &(em_sgd_opts){ .lr = 0.1 });
    r.sched = em_lambda_lr_new(r.opt, lr_lambda, NULL);
    r.acc = em_accelerator_new(&(em_accelerator_opts){
        .mixed_precision = EM_MP_FP16, .scaler = { .init_scale = 1e38 } });
    ck_assert_ptr_nonnull(em_accelerator_grad_scaler(r.acc));
    ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, r.sched), EM_OK);
    int64_t cnt;
    float *before = snapshot(r.m, &cnt);
    em_batch b;
    EM_SCOPE {
        ck_assert(em_accelerator_next(r.acc, r.dl, &b));
        em_tensor *loss;
        EM_AUTOCAST(r.acc) {
            ck_assert(em_autocast_enabled());
            ck_assert_int_eq(em_autocast_dtype(), EM_F16);
            loss = toy_loss(r.m, b.input_ids, b.labels);
        }
        ck_assert_int_eq(em_accelerator_backward(r.acc, loss), EM_OK);
        ck_assert_int_eq(em_accelerator_optimizer_step(r.acc, r.opt), EM_OK);
        em_accelerator_scheduler_step(r.acc, r.sched);
        em_accelerator_optimizer_zero_grad(r.acc, r.opt);
    }
    ck_assert(em_accelerator_optimizer_step_was_skipped(r.acc));
    ck_assert_int_eq(em_accelerator_optimizer_steps(r.acc), 0);
    ck_assert_int_eq(em_scheduler_last_epoch(r.sched), 0);
    ck_assert_double_eq(em_grad_scaler_get_scale(em_accelerator_grad_scaler(r.acc)), (double)(float)(1e38 * 0.5));
    int64_t cnt2;
    float *after = snapshot(r.m, &cnt2);
    ck_assert(memcmp(before, after, sizeof(float) * (size_t)cnt) == 0);
    /* with a sane scale the next step happens, and so does the scheduler's */
    em_grad_scaler_update_to(em_accelerator_grad_scaler(r.acc), 1024);
    EM_SCOPE {
        ck_assert(em_accelerator_next(r.acc, r.dl, &b));
        em_tensor *loss;
        EM_AUTOCAST(r.acc) { loss = toy_loss(r.m, b.input_ids, b.labels); }
        ck_assert_int_eq(toy_run_step(&r, loss, 0), EM_OK);
    }
    ck_assert(!em_accelerator_optimizer_step_was_skipped(r.acc));
    ck_assert_int_eq(em_accelerator_optimizer_steps(r.acc), 1);
    ck_assert_int_eq(em_scheduler_last_epoch(r.sched), 1);
    free(before), free(after);
    toy_run_free(&r);
}
END_TEST

START_TEST(test_bf16_autocast_region)
{
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){ .mixed_precision = EM_MP_BF16 });
    ck_assert_int_eq(em_accelerator_mixed_precision(acc), EM_MP_BF16);
    ck_assert_ptr_null(em_accelerator_grad_scaler(acc));
    EM_AUTOCAST(acc) { ck_assert_int_eq(em_autocast_dtype(), EM_BF16); }
    ck_assert_int_eq(em_autocast_depth(), 0);
    em_accelerator_free(acc);
    acc = em_accelerator_new(&(em_accelerator_opts){ .mixed_precision = EM_MP_NO });
    EM_AUTOCAST(acc) { ck_assert(!em_autocast_enabled()); }
    em_accelerator_free(acc);
}
END_TEST

/* Clipping: the total norm before clipping, the gradients scaled to max_norm,
 * and nothing on a non-sync micro-step. */
START_TEST(test_clip_grad_norm)
{
    em_set_seed(9);
    toy_run r = run_of(toy_new(8, 2), 2, false);
    r.opt = em_sgd_new(r.p, r.n, NULL);
    r.acc = em_accelerator_new(&(em_accelerator_opts){ .gradient_accumulation_steps = 2 });
    ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, NULL), EM_OK);
    int micro = 0;
    for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) EM_ACCUMULATE(r.acc, &r.m->base) {
        em_accelerator_backward(r.acc, toy_loss(r.m, b.input_ids, b.labels));
        double sq = 0;
        for (int i = 0; i < r.n; i++) {
            double *g = tu_to_doubles(em_grad(r.p[i]));
            for (int64_t k = 0; k < em_numel(r.p[i]); k++) sq += g[k] * g[k];
            free(g);
        }
        double norm = em_accelerator_clip_grad_norm(r.acc, &r.m->base, 1e-3);
        if (micro % 2 == 0) {
            ck_assert(isnan(norm));
        } else {
            ck_assert_double_eq_tol(norm, sqrt(sq), 1e-5 * sqrt(sq));
            double sq2 = 0;
            for (int i = 0; i < r.n; i++) {
                double *g = tu_to_doubles(em_grad(r.p[i]));
                for (int64_t k = 0; k < em_numel(r.p[i]); k++) sq2 += g[k] * g[k];
                free(g);
            }
            double want = sqrt(sq) * fmin(1e-3 / (sqrt(sq) + 1e-6), 1.0);
            ck_assert_double_eq_tol(sqrt(sq2), want, 1e-5 * want);
        }
        em_accelerator_optimizer_zero_grad(r.acc, r.opt);
        micro++;
    }
    ck_assert_int_eq(micro, 4);
    toy_run_free(&r);
}
END_TEST

/* gather_for_metrics in a world of one: every sample exactly once; 0-d
 * tensors count as one row; the helpers of a world of one. */
/* break out of the batch loop: em_accelerator_end_loop closes the open batch
 * scope at once (depth back to where the loop began, the batch freed), and
 * the loader continues where it stopped. */
START_TEST(test_early_break_end_loop)
{
    toy_run r = loader_run(toy_new(12, 3), 2);
    int depth = em_scope_depth(), seen = 0;
    for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) {
        if (++seen == 2) {
            ck_assert_int_eq(em_scope_depth(), depth + 1);   /* the batch's scope is open here */
            em_accelerator_end_loop(r.acc, r.dl);
            break;
        }
    }
    ck_assert_int_eq(em_scope_depth(), depth);
    em_accelerator_end_loop(r.acc, r.dl);   /* nothing open: a no-op */
    ck_assert_int_eq(em_scope_depth(), depth);
    ck_assert_int_eq(em_dataloader_state(r.dl).batch, 2);
    int rest = 0;
    for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) rest++;
    ck_assert_int_eq(rest, 4);   /* 6 batches per epoch: it continued from batch 2 */
    toy_run_free(&r);
}
END_TEST

/* max_steps ends the loop where it is driven: after 3 optimizer steps
 * (6 micro-steps with K = 2) every em_accelerator_next returns false, in
 * this epoch and the next, with no scope left open; then free_all frees
 * what prepare was given, leak-free. */
START_TEST(test_max_steps_and_free_all)
{
    toy_run r = run_of(toy_new(40, 5), 2, false);   /* 20 batches of 2 */
    r.acc = em_accelerator_new(&(em_accelerator_opts){ .gradient_accumulation_steps = 2, .max_steps = 3 });
    r.opt = em_sgd_new(r.p, r.n, &(em_sgd_opts){ .lr = 0.1 });
    r.sched = em_linear_schedule_with_warmup(r.opt, 1, 10);
    em_dataloader *eval = loader(r.ds, 4, false);
    ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, r.sched), EM_OK);
    ck_assert_int_eq(em_accelerator_prepare_dataloader(r.acc, eval), EM_OK);
    int depth = em_scope_depth(), batches = 0, epochs = 0;
    for (int epoch = 0; epoch < 5 && !em_accelerator_reached_max_steps(r.acc); epoch++, epochs++)
        for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) {
            batches++;
            EM_ACCUMULATE(r.acc, &r.m->base) {
                ck_assert_int_eq(toy_run_step(&r, toy_loss(r.m, b.input_ids, b.labels), 0), EM_OK);
            }
        }
    ck_assert_int_eq(batches, 6);
    ck_assert_int_eq(epochs, 1);
    ck_assert_int_eq(em_accelerator_optimizer_steps(r.acc), 3);
    ck_assert(em_accelerator_reached_max_steps(r.acc));
    ck_assert_int_eq(em_scope_depth(), depth);
    for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) ck_abort_msg("a batch past max_steps");
    ck_assert_int_eq(em_scope_depth(), depth);
    int eval_batches = 0;   /* an evaluation loader (no backward on it) is not stopped */
    EM_NO_GRAD for (em_batch b; em_accelerator_next(r.acc, eval, &b);) eval_batches++;
    ck_assert_int_eq(eval_batches, 10);
    /* early stopping on one process: the trigger is seen once */
    ck_assert(!em_accelerator_check_trigger(r.acc));
    em_accelerator_set_trigger(r.acc);
    ck_assert(em_accelerator_check_trigger(r.acc));
    ck_assert(!em_accelerator_check_trigger(r.acc));
    em_accelerator_free_all(r.acc);   /* and the model, optimizer, scheduler and loaders */
    free(r.p);
    em_dataset_free(&r.ds->base);
}
END_TEST

START_TEST(test_gather_for_metrics_single)
{
    toy_run r = loader_run(toy_new(10, 1), 4);
    int64_t total = 0, sum = 0;
    for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) {
        em_tensor *out[2];
        em_tensor *in[2] = { b.labels, em_sum(b.labels, 0, NULL, false) };
        ck_assert_int_eq(em_accelerator_gather_for_metrics(r.acc, 2, in, out), EM_OK);
        total += out[0]->shape[0];
        ck_assert_int_eq(out[1]->ndim, 1);
        ck_assert_int_eq(out[1]->shape[0], 1);
        sum += (int64_t)em_item(out[1]);
    }
    ck_assert_int_eq(total, 10);
    int64_t want = 0;
    for (int i = 0; i < 10; i++) want += r.ds->labels[i];
    ck_assert_int_eq(sum, want);
    ck_assert(em_accelerator_is_main_process(r.acc) && em_accelerator_is_local_main_process(r.acc));
    ck_assert(em_accelerator_is_last_process(r.acc));
    ck_assert_int_eq(em_accelerator_num_processes(r.acc), 1);
    int64_t b0, e0;
    em_accelerator_split_between_processes(r.acc, 7, &b0, &e0);
    ck_assert(b0 == 0 && e0 == 7);
    EM_SCOPE {
        em_tensor *t = em_arange(0, 5, 1, EM_F32, EM_CPU);
        em_tensor *red = em_accelerator_reduce(r.acc, t, EM_RED_SUM);
        ck_assert_double_eq(em_item(em_sum(red, 0, NULL, false)), 10);
    }
    int ran = 0;
    EM_ON_MAIN_PROCESS(r.acc) ran++;
    EM_MAIN_PROCESS_FIRST(r.acc) { ran++; }
    ck_assert_int_eq(ran, 2);
    toy_run_free(&r);
}
END_TEST

/* ---- checkpoints -------------------------------------------------------------------------- */

/* One training setup (toy_model.h), built the same way every time. */
static void run_new(toy_run *r, const em_accelerator_opts *o)
{
    em_set_seed(1234);
    r->ds = toy_new(20, 77);
    r->m = toy_model_new(0.25);
    r->p = params_of(r->m, &r->n);
    const char *names[64];
    em_named_tensors ps = em_module_named_parameters(&r->m->base);
    for (int i = 0; i < ps.n; i++) names[i] = ps.items[i].name;
    em_tensor *buf[64];
    em_param_group groups[2];
    int ng = em_param_groups_no_decay(names, r->p, r->n, 0.01, buf, groups);
    r->opt = em_adamw_new_groups(groups, ng, &(em_adamw_opts){ .lr = 3e-2 });
    em_named_tensors_free(&ps);
    r->sched = em_linear_schedule_with_warmup(r->opt, 3, 40);
    ck_assert_int_eq(em_dataloader_new(&r->ds->base, &(em_dataloader_opts){ .batch_size = 3, .shuffle = true }, &r->dl),
                     EM_OK);
    r->acc = em_accelerator_new(o);
    ck_assert_ptr_nonnull(r->acc);
    ck_assert_int_eq(em_accelerator_prepare(r->acc, &r->m->base, r->opt, r->dl, r->sched), EM_OK);
}

static void check_resume(em_mixed_precision mp, int N)
{
    ck_assert_ptr_nonnull(tu_scratch_new("test-acc"));
    char dir[300];
    snprintf(dir, sizeof dir, "%s/state", tu_scratch());
    em_accelerator_opts o = { .gradient_accumulation_steps = 2, .mixed_precision = mp };
    toy_run a, b, c;
    run_new(&a, &o);   /* L = 7 batches per epoch (the last of 2), K = 2 */
    ck_assert_int_eq(toy_run_train(&a, 2 * N, false), EM_OK);
    int64_t na;
    float *pa = snapshot(a.m, &na);

    run_new(&b, &o);
    ck_assert_int_eq(toy_run_train(&b, N, false), EM_OK);
    ck_assert(em_accelerator_sync_gradients(b.acc));
    ck_assert_int_eq(em_accelerator_save_state(b.acc, dir), EM_OK);
    em_loader_state saved_pos = em_dataloader_state(b.dl);
    int64_t saved_steps = em_accelerator_optimizer_steps(b.acc);
    toy_run_free(&b);

    run_new(&c, &o);
    EM_SCOPE { em_rand(EM_SHAPE(100), EM_F32, EM_CPU); }   /* disturb the RNG: load_state must restore it */
    ck_assert_int_eq(em_accelerator_load_state(c.acc, dir), EM_OK);
    ck_assert_int_eq(em_accelerator_step(c.acc), N);
    ck_assert_int_eq(em_accelerator_optimizer_steps(c.acc), saved_steps);
    em_loader_state pos = em_dataloader_state(c.dl);
    ck_assert(pos.epoch == saved_pos.epoch && pos.batch == saved_pos.batch);
    ck_assert_int_eq(toy_run_train(&c, N, false), EM_OK);
    int64_t nc;
    float *pc = snapshot(c.m, &nc);
    ck_assert_int_eq(na, nc);
    for (int64_t i = 0; i < na; i++)
        ck_assert_msg(memcmp(&pa[i], &pc[i], sizeof(float)) == 0, "parameter element %lld: %.9g vs %.9g", (long long)i,
                      pa[i], pc[i]);
    ck_assert_int_eq(em_accelerator_optimizer_steps(a.acc), em_accelerator_optimizer_steps(c.acc));
    ck_assert_int_eq(em_scheduler_last_epoch(a.sched), em_scheduler_last_epoch(c.sched));
    ck_assert_int_eq(em_accelerator_step(a.acc), em_accelerator_step(c.acc));
    ck_assert(em_rng_get_state().offset > 0);
    free(pa), free(pc);
    toy_run_free(&a);
    toy_run_free(&c);
    tu_scratch_remove();
}

START_TEST(test_save_load_bit_identical)
{
    check_resume(EM_MP_NO, 9);   /* saved at micro-step 9: epoch 1, batch 2, a sync step */
    check_resume(EM_MP_NO, 7);   /* saved at the end of epoch 0 */
}
END_TEST

START_TEST(test_save_load_bit_identical_fp16)
{
    check_resume(EM_MP_FP16, 9);   /* the scaler's scale and tracker travel too */
}
END_TEST

static bool exists(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0;
}

START_TEST(test_save_state_layout_and_overwrite)
{
    ck_assert_ptr_nonnull(tu_scratch_new("test-acc"));
    char dir[300];
    snprintf(dir, sizeof dir, "%s/ckpt", tu_scratch());
    toy_run r;
    run_new(&r, &(em_accelerator_opts){ .mixed_precision = EM_MP_FP16 });
    ck_assert_int_eq(toy_run_train(&r, 2, false), EM_OK);
    ck_assert_int_eq(em_accelerator_save_state(r.acc, dir), EM_OK);
    const char *files[] = { "model.safetensors", "optimizer.safetensors", "scheduler.safetensors",
                            "scaler.safetensors", "random_states_0.json", "accelerator_state.json" };
    for (int i = 0; i < 6; i++) ck_assert_msg(exists(dir, files[i]), "%s missing", files[i]);
    ck_assert(!exists(tu_scratch(), "ckpt.tmp-ember"));
    /* the model file holds the unwrapped names */
    em_safetensors *sf;
    char path[400];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(em_safetensors_open(path, &sf), EM_OK);
    ck_assert_int_eq(em_safetensors_count(sf), 4);
    const char *want[] = { "l1.weight", "l1.bias", "l2.weight", "l2.bias" };
    for (int i = 0; i < 4; i++) {
        bool found = false;
        for (int k = 0; k < 4; k++) found |= !strcmp(em_safetensors_name(sf, k), want[i]);
        ck_assert_msg(found, "model.safetensors lacks %s", want[i]);
    }
    em_safetensors_close(sf);
    /* a second save replaces the first, atomically */
    ck_assert_int_eq(toy_run_train(&r, 2, false), EM_OK);
    ck_assert_int_eq(em_accelerator_save_state(r.acc, dir), EM_OK);
    ck_assert(!exists(tu_scratch(), "ckpt.tmp-ember"));
    ck_assert(!exists(tu_scratch(), "ckpt.old-ember"));
    toy_run r2;
    run_new(&r2, &(em_accelerator_opts){ .mixed_precision = EM_MP_FP16 });
    ck_assert_int_eq(em_accelerator_load_state(r2.acc, dir), EM_OK);
    ck_assert_int_eq(em_accelerator_step(r2.acc), 4);
    /* a stale temporary folder from a crashed save is cleaned up */
    char stale[400];
    snprintf(stale, sizeof stale, "%s.tmp-ember", dir);
    mkdir(stale, 0777);
    ck_assert_int_eq(em_accelerator_save_state(r.acc, dir), EM_OK);
    ck_assert(!exists(tu_scratch(), "ckpt.tmp-ember"));
    toy_run_free(&r);
    toy_run_free(&r2);
    tu_scratch_remove();
}
END_TEST

/* A checkpoint that does not fit: a missing file, another world, another
 * model shape. The model stays unchanged. */
START_TEST(test_load_state_mismatch)
{
    ck_assert_ptr_nonnull(tu_scratch_new("test-acc"));
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/ckpt", tu_scratch());
    toy_run r;
    run_new(&r, NULL);
    ck_assert_int_eq(toy_run_train(&r, 2, false), EM_OK);
    ck_assert_int_eq(em_accelerator_save_state(r.acc, dir), EM_OK);
    ck_assert_int_eq(em_accelerator_load_state(r.acc, tu_scratch()), EM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "accelerator_state.json"));

    /* another model shape */
    em_set_seed(5);
    toy_model *m = calloc(1, sizeof *m);
    em_module_init(&m->base, "Toy", NULL);
    m->l1 = (em_nn_linear *)em_module_register_child(&m->base, "l1", &em_nn_linear_new(FEAT, 6, NULL)->base);
    m->drop = (em_nn_dropout *)em_module_register_child(&m->base, "drop", &em_nn_dropout_new(0)->base);
    m->l2 = (em_nn_linear *)em_module_register_child(&m->base, "l2", &em_nn_linear_new(6, 2, NULL)->base);
    int n;
    em_tensor **p = params_of(m, &n);
    em_optimizer *opt = em_adamw_new(p, n, NULL);
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, 3, 40);
    em_dataloader *dl;
    em_dataloader_new(&r.ds->base, &(em_dataloader_opts){ .batch_size = 3 }, &dl);
    em_accelerator *acc = em_accelerator_new(NULL);
    ck_assert_int_eq(em_accelerator_prepare(acc, &m->base, opt, dl, sched), EM_OK);
    int64_t cnt;
    float *before = snapshot(m, &cnt);
    ck_assert_int_eq(em_accelerator_load_state(acc, dir), EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "l1.weight"));
    float *after = snapshot(m, &cnt);
    ck_assert(memcmp(before, after, sizeof(float) * (size_t)cnt) == 0);
    free(before), free(after);
    em_accelerator_free(acc);

    /* the same model, but an optimizer of another kind: the optimizer's file is
     * refused after the model's file has checked out, and the weights must not
     * have been copied in (they were, before every object was checked first) */
    {
        toy_run r2;
        run_new(&r2, NULL);
        em_sgd_opts so = { .lr = 0.1, .momentum = 0.9 };
        em_optimizer *sgd = em_sgd_new(r2.p, r2.n, &so);
        em_accelerator *acc2 = em_accelerator_new(NULL);
        em_dataloader *dl2;
        em_dataloader_new(&r2.ds->base, &(em_dataloader_opts){ .batch_size = 3 }, &dl2);
        em_scheduler *sched2 = em_linear_schedule_with_warmup(sgd, 3, 40);
        ck_assert_int_eq(em_accelerator_prepare(acc2, &r2.m->base, sgd, dl2, sched2), EM_OK);
        int64_t cnt2;
        float *b2 = snapshot(r2.m, &cnt2);
        ck_assert_int_ne(em_accelerator_load_state(acc2, dir), EM_OK);
        ck_assert_msg(strstr(em_last_error(), "optimizer"), "refused for another reason: %s", em_last_error());
        float *a2 = snapshot(r2.m, &cnt2);
        ck_assert_msg(memcmp(b2, a2, sizeof(float) * (size_t)cnt2) == 0,
                      "a load_state that failed (%s) changed the model", em_last_error());
        free(b2), free(a2);
        em_accelerator_free(acc2);
        em_dataloader_free(dl2);
        em_scheduler_free(sched2);
        em_optimizer_free(sgd);
        toy_run_free(&r2);
    }

    /* other prepared counts */
    acc = em_accelerator_new(NULL);
    ck_assert_int_eq(em_accelerator_prepare(acc, &m->base, opt, NULL, NULL), EM_OK);
    ck_assert_int_eq(em_accelerator_load_state(acc, dir), EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "were prepared"));
    em_accelerator_free(acc);

    /* a corrupt counters file (the manifest removed, as in a checkpoint of an
     * older ember: the JSON's own checks are what is tested here) */
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ck_assert_int_eq(remove(path), 0);
    snprintf(path, sizeof path, "%s/accelerator_state.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"format\": \"ember.accelerator_state/1\", \"world_size\": 1, \"step\": -3}", f);
    fclose(f);
    ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "step"));

    em_dataloader_free(dl);
    em_scheduler_free(sched);
    em_optimizer_free(opt);
    free(p);
    em_module_free(&m->base);
    toy_run_free(&r);
    tu_scratch_remove();
}
END_TEST

/* Rewrites a file of a checkpoint folder with one substitution (from -> to). */
static void edit_file(const char *dir, const char *name, const char *from, const char *to)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *at = strstr(buf, from);
    ck_assert_msg(at != NULL, "%s has no \"%s\": %s", name, from, buf);
    char out[8400];
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - buf), buf, to, at + strlen(from));
    f = fopen(path, "wb");
    fputs(out, f);
    fclose(f);
}

/* Checkpoint integrity: a manifest with every file's CRC-32C and the run's
 * fingerprint. A flipped byte, another precision or accumulation, counters
 * out of range, a foreign rank's file and NaN weights are all refused with
 * the file named; ignore_mismatched_config overrides a changed setting. */
START_TEST(test_checkpoint_integrity)
{
    ck_assert_ptr_nonnull(tu_scratch_new("test-acc"));
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/ckpt", tu_scratch());
    toy_run r;
    run_new(&r, &(em_accelerator_opts){ .mixed_precision = EM_MP_NO });
    ck_assert_int_eq(toy_run_train(&r, 4, false), EM_OK);
    ck_assert_int_eq(em_accelerator_save_state(r.acc, dir), EM_OK);
    ck_assert(exists(dir, "manifest.json"));
    ck_assert_msg(em_accelerator_load_state(r.acc, dir) == EM_OK, "an intact checkpoint: %s", em_last_error());

    /* one flipped bit in the middle of the weights */
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "r+b");
    fseek(f, -6, SEEK_END);
    int c = fgetc(f);
    fseek(f, -6, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
    ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_ERR_FORMAT);
    ck_assert_msg(strstr(em_last_error(), "model.safetensors: CRC-32C") && strstr(em_last_error(), "damaged"), "%s",
                  em_last_error());
    f = fopen(path, "r+b");
    fseek(f, -6, SEEK_END);
    fputc(c, f);
    fclose(f);
    ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_OK);

    /* another mixed precision, another accumulation: refused, or overridden on request */
    toy_run o;
    run_new(&o, &(em_accelerator_opts){ .mixed_precision = EM_MP_BF16 });
    ck_assert_int_eq(em_accelerator_load_state(o.acc, dir), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "saved with mixed_precision no, and this run has bf16"), "%s", em_last_error());
    toy_run_free(&o);
    run_new(&o, &(em_accelerator_opts){ .mixed_precision = EM_MP_NO, .gradient_accumulation_steps = 2 });
    ck_assert_int_eq(em_accelerator_load_state(o.acc, dir), EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "gradient_accumulation_steps 1"));
    toy_run_free(&o);
    run_new(&o, &(em_accelerator_opts){ .mixed_precision = EM_MP_BF16, .ignore_mismatched_config = true });
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    em_status st = em_accelerator_load_state(o.acc, dir);
    char *err = tu_capture_stderr_end();
    ck_assert_int_eq(st, EM_OK);
    ck_assert_msg(strstr(err, "mixed_precision was no when saved and is bf16 now"), "%s", err);
    free(err);
    toy_run_free(&o);

    /* a manifest that no longer lists a file load_state reads (an edited file could
     * then pass unverified): the listed entry moved to an intact copy of it */
    {
        char from[420], to[420];
        snprintf(from, sizeof from, "%s/accelerator_state.json", dir);
        snprintf(to, sizeof to, "%s/accelerator_state.json.copy", dir);
        size_t len;
        char *bytes = tu_read_file(from, &len);
        tu_write_file(to, bytes, len);
        free(bytes);
        edit_file(dir, "manifest.json", "\"accelerator_state.json\":", "\"accelerator_state.json.copy\":");
        ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_ERR_FORMAT);
        ck_assert_msg(strstr(em_last_error(), "does not list accelerator_state.json"), "%s", em_last_error());
        edit_file(dir, "manifest.json", "\"accelerator_state.json.copy\":", "\"accelerator_state.json\":");
        ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_OK);
    }

    /* without a manifest (an older checkpoint), the counters are still checked */
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    ck_assert_int_eq(remove(path), 0);
    edit_file(dir, "accelerator_state.json", "\"window_pos\":\t1", "\"window_pos\":\t99");
    ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "window_pos 99 does not fit"), "%s", em_last_error());
    edit_file(dir, "accelerator_state.json", "\"window_pos\":\t99", "\"window_pos\":\t1");
    edit_file(dir, "accelerator_state.json", "\"optimizer_steps\":\t[", "\"optimizer_steps\":\t[99");
    ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "more than the 4 micro-steps"), "%s", em_last_error());
    edit_file(dir, "accelerator_state.json", "\"optimizer_steps\":\t[99", "\"optimizer_steps\":\t[");
    edit_file(dir, "random_states_0.json", "\"rank\":\t0", "\"rank\":\t1");
    ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "says rank 1; it is rank 0's file"), "%s", em_last_error());
    edit_file(dir, "random_states_0.json", "\"rank\":\t1", "\"rank\":\t0");
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    st = em_accelerator_load_state(r.acc, dir);
    err = tu_capture_stderr_end();
    ck_assert_int_eq(st, EM_OK);
    ck_assert_msg(strstr(err, "has no manifest.json"), "%s", err);
    free(err);

    /* NaN weights are saved (the run's own state), but never resumed from */
    em_tensor *w = r.p[0];
    EM_NO_GRAD { em_fill_(w, NAN); }
    ck_assert_int_eq(em_accelerator_save_state(r.acc, dir), EM_OK);
    ck_assert_int_eq(em_accelerator_load_state(r.acc, dir), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "holds a non-finite value (element 0)"), "%s", em_last_error());
    toy_run_free(&r);
    tu_scratch_remove();
}
END_TEST

/* Automatic naming: checkpoint_<n> under <project_dir>/checkpoints, total_limit
 * keeps the newest by NUMBER (checkpoint_10 after checkpoint_9), load_state
 * restores the iteration (Accelerate forgets it), numbers are never reused. */
START_TEST(test_automatic_naming_total_limit)
{
    ck_assert_ptr_nonnull(tu_scratch_new("test-acc"));
    em_accelerator_opts o = { .project_dir = tu_scratch(), .automatic_checkpoint_naming = true, .total_limit = 3 };
    toy_run r;
    run_new(&r, &o);
    for (int i = 0; i < 12; i++) {
        ck_assert_int_eq(toy_run_train(&r, 1, false), EM_OK);
        ck_assert_int_eq(em_accelerator_iteration(r.acc), i);
        ck_assert_int_eq(em_accelerator_save_state(r.acc, NULL), EM_OK);
    }
    char base[300];
    snprintf(base, sizeof base, "%s/checkpoints", tu_scratch());
    int count = 0;
    DIR *d = opendir(base);
    for (struct dirent *e; (e = readdir(d));) count += e->d_name[0] != '.';
    closedir(d);
    ck_assert_int_eq(count, 3);
    ck_assert(exists(base, "checkpoint_9") && exists(base, "checkpoint_10") && exists(base, "checkpoint_11"));
    ck_assert_int_eq(em_accelerator_iteration(r.acc), 12);

    /* a fresh run must not silently write checkpoint_0 next to them */
    toy_run r2;
    run_new(&r2, &o);
    ck_assert_int_eq(em_accelerator_save_state(r2.acc, NULL), EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "checkpoint_11"));
    /* load_state(NULL): the latest by number, with its iteration */
    ck_assert_int_eq(em_accelerator_load_state(r2.acc, NULL), EM_OK);
    ck_assert_int_eq(em_accelerator_iteration(r2.acc), 12);
    ck_assert_int_eq(em_accelerator_step(r2.acc), 12);
    ck_assert_int_eq(em_accelerator_save_state(r2.acc, NULL), EM_OK);
    ck_assert(exists(base, "checkpoint_12") && !exists(base, "checkpoint_9"));
    toy_run_free(&r2);
    /* loading an older one continues after the newest */
    toy_run r3;
    run_new(&r3, &o);
    char older[400];
    snprintf(older, sizeof older, "%s/checkpoint_10", base);
    ck_assert_int_eq(em_accelerator_load_state(r3.acc, older), EM_OK);
    ck_assert_int_eq(em_accelerator_step(r3.acc), 11);
    ck_assert_int_eq(em_accelerator_iteration(r3.acc), 13);
    toy_run_free(&r3);
    /* without automatic naming, save_state(NULL) is an error */
    toy_run r4;
    run_new(&r4, NULL);
    ck_assert_int_eq(em_accelerator_save_state(r4.acc, NULL), EM_ERR_INVALID);
    ck_assert_int_eq(em_accelerator_load_state(r4.acc, NULL), EM_ERR_INVALID);
    toy_run_free(&r4);
    toy_run_free(&r);
    tu_scratch_remove();
}
END_TEST

/* Constructor arguments win over the environment; the environment fills in. */
START_TEST(test_env_precedence)
{
    setenv("EMBER_GRADIENT_ACCUMULATION_STEPS", "3", 1);
    setenv("EMBER_MIXED_PRECISION", "bf16", 1);
    em_accelerator *acc = em_accelerator_new(NULL);
    ck_assert_int_eq(em_accelerator_gradient_accumulation_steps(acc), 3);
    ck_assert_int_eq(em_accelerator_mixed_precision(acc), EM_MP_BF16);
    em_accelerator_free(acc);
    acc = em_accelerator_new(&(em_accelerator_opts){ .gradient_accumulation_steps = 2, .mixed_precision = EM_MP_NO });
    ck_assert_int_eq(em_accelerator_gradient_accumulation_steps(acc), 2);
    ck_assert_int_eq(em_accelerator_mixed_precision(acc), EM_MP_NO);
    em_accelerator_free(acc);
    setenv("EMBER_MIXED_PRECISION", "fp8", 1);
    ck_assert_ptr_null(em_accelerator_new(NULL));
    ck_assert_int_eq(em_last_status(), EM_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "EMBER_MIXED_PRECISION"));
    setenv("EMBER_MIXED_PRECISION", "no", 1);
    setenv("EMBER_GRADIENT_ACCUMULATION_STEPS", "x", 1);
    ck_assert_ptr_null(em_accelerator_new(NULL));
    ck_assert_int_eq(em_last_status(), EM_ERR_INVALID);
    unsetenv("EMBER_GRADIENT_ACCUMULATION_STEPS");
    unsetenv("EMBER_MIXED_PRECISION");
}
END_TEST

/* A training step under the accelerator returns to its starting live bytes. */
START_TEST(test_no_leak_per_step)
{
    toy_run r;
    run_new(&r, &(em_accelerator_opts){ .gradient_accumulation_steps = 2 });
    ck_assert_int_eq(toy_run_train(&r, 4, false), EM_OK);   /* optimizer state allocated */
    int64_t live = tu_live_bytes();
    ck_assert_int_eq(toy_run_train(&r, 4, false), EM_OK);
    ck_assert_int_eq(tu_live_bytes(), live);
    toy_run_free(&r);
}
END_TEST

/* ---- the common mistakes' one-time warnings ----------------------------------------------- */
/* Trains the toy model for `epochs` epochs of 32 samples in batches of 8
 * with SGD (lr 1) through an accelerator with the options o, with the
 * backward through the accelerator or direct, and with or without zero_grad.
 * Returns the mean loss over the last half of the epochs (the one epoch
 * when epochs is 1); *err gets the captured stderr. */
static double train_toy(const em_accelerator_opts *o, bool acc_backward, bool zero_grad, int epochs, char **err)
{
    em_set_seed(11);
    toy_run r = run_of(toy_new(32, 7), 8, false);
    r.opt = em_sgd_new(r.p, r.n, &(em_sgd_opts){ .lr = 1.0 });
    r.acc = em_accelerator_new(o);
    ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, NULL), EM_OK);
    double mean = 0;
    int counted = 0;
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    for (int e = 0; e < epochs; e++) {
        bool count = e >= epochs / 2;
        for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) {
            em_tensor *loss;
            EM_AUTOCAST(r.acc) { loss = toy_loss(r.m, b.input_ids, b.labels); }
            if (count) mean += em_item(loss), counted++;
            if (acc_backward) ck_assert_int_eq(em_accelerator_backward(r.acc, loss), EM_OK);
            else em_backward(loss);
            ck_assert_int_eq(em_accelerator_optimizer_step(r.acc, r.opt), EM_OK);
            if (zero_grad) em_accelerator_optimizer_zero_grad(r.acc, r.opt);
        }
    }
    *err = tu_capture_stderr_end();
    ck_assert_ptr_nonnull(*err);
    toy_run_free(&r);
    return mean / counted;
}

/* em_backward called directly under the fp16 scaler: one warning naming the fix. */
START_TEST(test_warn_direct_backward_fp16)
{
    const em_accelerator_opts fp16 = { .mixed_precision = EM_MP_FP16 };
    char *err;
    train_toy(&fp16, false, true, 2, &err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 1);
    ck_assert_int_eq(tu_count_of(err, "call em_accelerator_backward(acc, loss) instead of em_backward(loss)"), 1);
    free(err);
    /* the fix: no warning */
    train_toy(&fp16, true, true, 2, &err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 0);
    free(err);
    /* under accumulation too; without mixed precision or accumulation direct is fine */
    train_toy(&(em_accelerator_opts){ .gradient_accumulation_steps = 2 }, false, true, 1, &err);
    ck_assert_int_eq(tu_count_of(err, "instead of em_backward"), 1);
    free(err);
    train_toy(&(em_accelerator_opts){ .mixed_precision = EM_MP_NO }, false, true, 1, &err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 0);
    free(err);
}
END_TEST

/* Forgetting zero_grad: one warning naming the fix, and the run diverges
 * (SGD on ever-summed gradients: the loss oscillates with a growing
 * amplitude, hence the mean over epochs 21-40) where the fixed run learns. */
START_TEST(test_warn_forgotten_zero_grad_diverges)
{
    const em_accelerator_opts no = { .mixed_precision = EM_MP_NO };
    char *err;
    double first_ok = train_toy(&no, true, true, 1, &err);   /* the first epoch's mean loss */
    free(err);
    double fixed = train_toy(&no, true, true, 40, &err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 0);
    free(err);
    double broken = train_toy(&no, true, false, 40, &err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 1);
    ck_assert_int_eq(tu_count_of(err, "call em_accelerator_optimizer_zero_grad(acc, opt) after"), 1);
    free(err);
    fprintf(stderr, "zero_grad: first epoch %.4f, epochs 21-40 fixed %.4f, forgotten %.4f\n", first_ok, fixed,
            broken);
    ck_assert(fixed < first_ok);
    ck_assert(!(broken < 4 * first_ok));   /* NaN or large: diverged */
}
END_TEST

/* mixed_precision bf16 without any autocast region: the forward ran in f32; one warning says how
 * to wrap it, and a wrapped forward gets none. */
START_TEST(test_warn_mixed_precision_without_autocast)
{
    for (int wrapped = 0; wrapped < 2; wrapped++) {
        em_set_seed(3);
        toy_run r = run_of(toy_new(16, 5), 8, false);
        r.opt = em_sgd_new(r.p, r.n, &(em_sgd_opts){ .lr = 0.1 });
        r.acc = em_accelerator_new(&(em_accelerator_opts){ .mixed_precision = EM_MP_BF16 });
        ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, NULL), EM_OK);
        ck_assert_int_eq(tu_capture_stderr_begin(), 0);
        for (em_batch b; em_accelerator_next(r.acc, r.dl, &b);) {
            em_tensor *loss = NULL;
            if (wrapped) EM_AUTOCAST(r.acc) { loss = toy_loss(r.m, b.input_ids, b.labels); }
            else loss = toy_loss(r.m, b.input_ids, b.labels);
            ck_assert_int_eq(toy_run_step(&r, loss, 0), EM_OK);
        }
        char *err = tu_capture_stderr_end();
        ck_assert_ptr_nonnull(err);
        ck_assert_int_eq(tu_count_of(err, "no autocast region has run yet"), wrapped ? 0 : 1);
        ck_assert_int_eq(tu_count_of(err, "EM_AUTOCAST(acc)"), wrapped ? 0 : 1);
        free(err);
        em_accelerator_free_all(r.acc);   /* and the model, optimizer and loader prepared on it */
        free(r.p);
        em_dataset_free(&r.ds->base);
    }
}
END_TEST

/* A second prepare of the same objects: one warning per kind, nothing re-registered. */
START_TEST(test_warn_prepare_twice)
{
    toy_run r = run_of(toy_new(8, 5), 4, false);
    r.opt = em_sgd_new(r.p, r.n, NULL);
    r.sched = em_lambda_lr_new(r.opt, lr_lambda, NULL);
    r.acc = em_accelerator_new(NULL);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, r.sched), EM_OK);
    char *err = tu_capture_stderr_end();
    ck_assert_ptr_nonnull(err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 0);
    free(err);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(em_accelerator_prepare_model(r.acc, &r.m->base), EM_OK);
        ck_assert_int_eq(em_accelerator_prepare(r.acc, &r.m->base, r.opt, r.dl, r.sched), EM_OK);
    }
    err = tu_capture_stderr_end();
    ck_assert_ptr_nonnull(err);
    ck_assert_int_eq(tu_count_of(err, "ember: warning:"), 4);
    ck_assert_int_eq(tu_count_of(err, "this model was already prepared"), 1);
    ck_assert_int_eq(tu_count_of(err, "this optimizer was already prepared"), 1);
    ck_assert_int_eq(tu_count_of(err, "this dataloader was already prepared"), 1);
    ck_assert_int_eq(tu_count_of(err, "this scheduler was already prepared"), 1);
    free(err);
    em_accelerator_free_all(r.acc);   /* each object once, though prepared four times */
    free(r.p);
    em_dataset_free(&r.ds->base);
}
END_TEST

/* ---- misuse ---------------------------------------------------------------------------------- */
START_TEST(test_misuse_unprepared_optimizer)
{
    em_accelerator *acc = em_accelerator_new(NULL);
    toy_model *m = toy_model_new(0);
    int n;
    em_tensor **p = params_of(m, &n);
    em_optimizer *opt = em_sgd_new(p, n, NULL);
    char expect[160];   /* distributed.h's functions name the caller's file:line too */
    snprintf(expect, sizeof expect, "em_accelerator_optimizer_step: the optimizer was not prepared "
             "(em_accelerator_prepare) (test_accelerator.c:%d)", __LINE__ + 2);
    tu_expect_misuse(expect);
    em_accelerator_optimizer_step(acc, opt);
}
END_TEST

START_TEST(test_misuse_nested_accumulate)
{
    em_accelerator *acc = em_accelerator_new(NULL);
    tu_expect_misuse("do not nest");
    EM_ACCUMULATE(acc, NULL) { EM_ACCUMULATE(acc, NULL) {} }
}
END_TEST

START_TEST(test_misuse_unprepared_loader)
{
    em_accelerator *acc = em_accelerator_new(NULL);
    toy_ds *ds = toy_new(4, 1);
    em_dataloader *dl = loader(ds, 2, false);
    em_batch b;
    tu_expect_misuse("was not prepared");
    em_accelerator_next(acc, dl, &b);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("accelerator");
    tu_add_tests(tu_no_leaks(tu_case(s, "core", 120)), test_accumulation_equals_big_batch, test_short_last_window,
                 test_sync_pattern_and_scheduler_rule, test_fp16_skipped_step_skips_scheduler,
                 test_bf16_autocast_region, test_clip_grad_norm, test_gather_for_metrics_single,
                 test_early_break_end_loop, test_max_steps_and_free_all, test_save_load_bit_identical,
                 test_save_load_bit_identical_fp16, test_save_state_layout_and_overwrite,
                 test_load_state_mismatch, test_checkpoint_integrity, test_automatic_naming_total_limit,
                 test_env_precedence, test_no_leak_per_step, test_warn_direct_backward_fp16,
                 test_warn_forgotten_zero_grad_diverges, test_warn_prepare_twice,
                 test_warn_mixed_precision_without_autocast);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), test_misuse_unprepared_optimizer,
                        test_misuse_nested_accumulate, test_misuse_unprepared_loader);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
