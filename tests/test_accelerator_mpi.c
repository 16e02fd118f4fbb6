/* ember tests — the Accelerator as every rank of a world (mpirun -np 2 / -np 3;
 * a world of one without mpirun):
 *
 *   - gather_for_metrics returns every sample exactly once for uneven N
 *     (loop-back duplicates dropped), with and without split_batches;
 *   - DDP training through the Accelerator (SGD with momentum, accumulation
 *     over 2 micro-steps, a short last window) gives the same parameters as
 *     one process training on the concatenated batches, within 1e-6 relative;
 *   - save_state / load_state: N steps, save, fresh objects, load, N more
 *     steps equals 2N steps, bit for bit, on every rank (shuffle, dropout,
 *     AdamW, a warmup schedule, bf16 autocast), with one random_states file
 *     per rank;
 *   - the process helpers (split_between_processes, reduce, main-process-first);
 *   - a buffer that differs across ranks is rank 0's again after a
 *     synchronizing em_accelerator_backward (torch's broadcast_buffers);
 *   - a checkpoint written from every rank (em_save_pretrained on each) warns
 *     once on each rank but the main one, naming the fix; the fix
 *     (em_accelerator_save_model) warns nowhere.
 *
 * Not a Check suite: Check forks, which MPI does not survive. One line per
 * passed check on rank 0 (every rank reports failures); exit status 1 when any
 * check failed on this rank. */
#include "ember.h"
#include "distributed/distributed.h"
#include "capture.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rank_check.h"
#define TOY_HIDDEN 16
#include "toy_model.h"


/* ---- the toy dataset (toy_model.h): label = a 0/1 rule or the index -------------- */
static toy_ds *toy_new(int64_t n, bool label_is_index)
{
    toy_ds *t = toy_ds_alloc(n);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int64_t i = 0; i < n; i++) {
        int sum = 0;
        for (int k = 0; k < FEAT; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            sum += t->ids[i * FEAT + k] = (int32_t)((s >> 33) % 10);
        }
        t->labels[i] = label_is_index ? i : sum > 18;
    }
    return t;
}


/* ---- gather_for_metrics ------------------------------------------------------------ */
static void check_gather(int64_t N, int64_t bs, bool split, bool shuffle)
{
    if (split && bs % g_world) return;
    toy_ds *ds = toy_new(N, true);
    em_dataloader *dl;
    CHECK_OK(em_dataloader_new(&ds->base, &(em_dataloader_opts){ .batch_size = bs, .shuffle = shuffle }, &dl));
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){ .split_batches = split });
    CHECK_OK(em_accelerator_prepare_dataloader(acc, dl));
    int *seen = calloc((size_t)N, sizeof(int));
    int64_t total = 0;
    for (int epoch = 0; epoch < 2; epoch++)
        for (em_batch b; em_accelerator_next(acc, dl, &b);) {
            em_tensor *out;
            CHECK_OK(em_accelerator_gather_for_metrics(acc, 1, &b.labels, &out));
            for (int64_t i = 0; i < out->shape[0]; i++) {
                int64_t v = (int64_t)em_get(out, (int64_t[]){i});
                if (v >= 0 && v < N) seen[v]++;
            }
            total += out->shape[0];
        }
    bool exact = total == 2 * N;
    for (int64_t i = 0; i < N; i++) exact &= seen[i] == 2;
    CHECK(exact, "N=%lld bs=%lld split=%d: gathered %lld rows over 2 epochs, want %lld, each sample twice",
          (long long)N, (long long)bs, split, (long long)total, (long long)(2 * N));
    free(seen);
    em_accelerator_free(acc);
    em_dataloader_free(dl);
    em_dataset_free(&ds->base);
}

static void test_gather_for_metrics(void)
{
    const int64_t Ns[] = { 1, 2, 5, 7, 10, 11, 12, 24, 25, 37 };
    for (size_t i = 0; i < sizeof Ns / sizeof *Ns; i++)
        for (int64_t bs = 1; bs <= 6; bs++) {
            check_gather(Ns[i], bs, false, i % 2);
            check_gather(Ns[i], bs * g_world, true, i % 2 == 0);
        }
    pass("gather_for_metrics: exact counts for uneven N on %d ranks (with and without split_batches)", g_world);
}

/* ---- DDP through the Accelerator == one process on the concatenated batches -------- */
static void test_ddp_equals_single(void)
{
    const int64_t bs = 3, L = 5, K = 2;   /* per rank: 5 batches, windows of 2, 2 and 1 */
    int64_t N = bs * g_world * L;
    toy_ds *ds = toy_new(N, false);
    em_set_seed(100 + (uint64_t)g_rank);   /* different inits: DDP must broadcast rank 0's */
    toy_model *m = toy_model_new(0);
    em_set_seed(100);
    toy_model *ref = toy_model_new(0);     /* rank 0's init, built locally */
    em_module_flatten(&ref->base);
    int n;
    em_tensor **p = params_of(m, &n), **pr = params_of(ref, &n);
    em_sgd_opts so = { .lr = 0.3, .momentum = 0.9 };
    em_optimizer *opt = em_sgd_new(p, n, &so), *opt_ref = em_sgd_new(pr, n, &so);
    em_dataloader *dl;
    CHECK_OK(em_dataloader_new(&ds->base, &(em_dataloader_opts){ .batch_size = bs }, &dl));
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){ .gradient_accumulation_steps = (int)K });
    CHECK_OK(em_accelerator_prepare(acc, &m->base, opt, dl, NULL));
    CHECK(em_dataloader_len(dl) == L, "len %lld", (long long)em_dataloader_len(dl));
    for (int epoch = 0; epoch < 2; epoch++) {
        int64_t micro = 0;
        for (em_batch b; em_accelerator_next(acc, dl, &b);) {
            EM_ACCUMULATE(acc, &m->base) {
                CHECK_OK(em_accelerator_backward(acc, toy_loss(m, b.input_ids, b.labels)));
                CHECK_OK(em_accelerator_optimizer_step(acc, opt));
                em_accelerator_optimizer_zero_grad(acc, opt);
            }
            micro++;
        }
        CHECK(micro == L, "micro %lld", (long long)micro);
        /* the reference: per window, the mean over its micro-steps of the
         * mean loss of the global batch (all ranks' rows of that micro-step) */
        for (int64_t w0 = 0; w0 < L; w0 += K) {
            int64_t wl = L - w0 < K ? L - w0 : K;
            EM_SCOPE {
                em_tensor *loss = NULL;
                for (int64_t k = w0; k < w0 + wl; k++) {
                    int64_t rows = bs * g_world;
                    em_tensor *ids, *lab;
                    toy_rows(ds, k * rows, rows, &ids, &lab);
                    em_tensor *l = toy_loss(ref, ids, lab);
                    loss = loss ? em_add(loss, l) : l;
                }
                em_backward(em_mul_scalar(loss, 1.0 / (double)wl));
                em_optimizer_step(opt_ref);
                em_optimizer_zero_grad_ex(opt_ref, false);
            }
        }
    }
    int64_t cnt;
    float *a = snapshot(m, &cnt), *r = snapshot(ref, &cnt);
    /* |a - r| <= 1e-6 |r| + 1e-7 element-wise: 1e-6 relative, with an
     * absolute floor for elements that are nearly zero */
    double worst = 0, worst_abs = 0;
    for (int64_t i = 0; i < cnt; i++) {
        double d = fabs((double)a[i] - r[i]);
        worst = fmax(worst, d / (1e-6 * fabs((double)r[i]) + 1e-7));
        worst_abs = fmax(worst_abs, d);
    }
    int failed = g_failed;
    CHECK(worst <= 1, "|a - r| / (1e-6 |r| + 1e-7) reaches %g (largest |a - r| %g)", worst, worst_abs);
    /* every rank holds the same parameters, bit for bit */
    EM_SCOPE {
        em_tensor *flat = em_module_flat_params(&m->base, EM_F32);
        em_tensor *mx = em_accelerator_reduce(acc, flat, EM_RED_MAX), *mn = em_accelerator_reduce(acc, flat, EM_RED_MIN);
        CHECK(memcmp(em_data_ptr(mx), em_data_ptr(mn), sizeof(float) * (size_t)cnt) == 0, "replicas differ");
    }
    CHECK(em_accelerator_optimizer_steps(acc) == 6, "optimizer steps %lld", (long long)em_accelerator_optimizer_steps(acc));
    free(a), free(r);
    em_accelerator_free(acc);
    em_dataloader_free(dl);
    em_optimizer_free(opt), em_optimizer_free(opt_ref);
    free(p), free(pr);
    em_module_free(&m->base), em_module_free(&ref->base);
    em_dataset_free(&ds->base);
    if (g_failed == failed)
        pass("DDP via the Accelerator (K=2, short last window, 2 epochs) equals one process on the concatenated "
             "batches: largest |difference| %.3g", worst_abs);
}

/* ---- save_state / load_state ----------------------------------------------------------- */

static void run_new(toy_run *r)
{
    em_set_seed(4321);
    r->ds = toy_new(29, false);
    r->m = toy_model_new(0.2);
    r->p = params_of(r->m, &r->n);
    r->opt = em_adamw_new(r->p, r->n, &(em_adamw_opts){ .lr = 2e-2 });
    r->sched = em_linear_schedule_with_warmup(r->opt, 2, 30);
    CHECK_OK(em_dataloader_new(&r->ds->base, &(em_dataloader_opts){ .batch_size = 2, .shuffle = true }, &r->dl));
    r->acc = em_accelerator_new(&(em_accelerator_opts){ .gradient_accumulation_steps = 2,
                                                        .mixed_precision = EM_MP_BF16 });
    CHECK_OK(em_accelerator_prepare(r->acc, &r->m->base, r->opt, r->dl, r->sched));
}

static void test_save_load_resume(const char *dir)
{
    /* per rank: ceil(29 / (2 * world)) batches per epoch; save after N micro-steps, a sync step */
    int failed = g_failed;
    toy_run a, b, c;
    run_new(&a);
    int64_t L = em_dataloader_len(a.dl);
    int N = (int)(L + 2);   /* into the second epoch, at the end of its first window */
    CHECK_OK(toy_run_train(&a, 2 * N, true));
    run_new(&b);
    CHECK_OK(toy_run_train(&b, N, true));
    CHECK(em_accelerator_sync_gradients(b.acc), "saving at a non-sync step");
    CHECK_OK(em_accelerator_save_state(b.acc, dir));
    toy_run_free(&b);
    char path[512];
    snprintf(path, sizeof path, "%s/random_states_%d.json", dir, g_rank);
    struct stat sb;
    CHECK(stat(path, &sb) == 0, "%s missing", path);
    run_new(&c);
    EM_SCOPE { em_rand(EM_SHAPE(10 + g_rank), EM_F32, EM_CPU); }
    CHECK_OK(em_accelerator_load_state(c.acc, dir));
    CHECK_OK(toy_run_train(&c, N, true));
    int64_t na, nc;
    float *pa = snapshot(a.m, &na), *pc = snapshot(c.m, &nc);
    CHECK(na == nc && memcmp(pa, pc, sizeof(float) * (size_t)na) == 0, "the resumed run differs");
    CHECK(em_scheduler_last_epoch(a.sched) == em_scheduler_last_epoch(c.sched), "scheduler %lld vs %lld",
          (long long)em_scheduler_last_epoch(a.sched), (long long)em_scheduler_last_epoch(c.sched));
    free(pa), free(pc);
    toy_run_free(&a), toy_run_free(&c);
    if (g_failed == failed)
        pass("save_state/load_state on %d ranks: %d + save + load + %d micro-steps == %d, bit for bit", g_world, N, N, 2 * N);
}

/* ---- helpers ---------------------------------------------------------------------------- */
static void test_helpers(int64_t tag)
{
    em_accelerator *acc = em_accelerator_new(NULL);
    CHECK(em_accelerator_num_processes(acc) == g_world, "world");
    CHECK(em_accelerator_is_main_process(acc) == (g_rank == 0), "main");
    CHECK(em_accelerator_is_last_process(acc) == (g_rank == g_world - 1), "last");
    /* split_between_processes covers [0, n) exactly once */
    for (int64_t n = 0; n < 12; n++) {
        int64_t b, e;
        em_accelerator_split_between_processes(acc, n, &b, &e);
        EM_SCOPE {
            em_tensor *t = em_from_data(&(int64_t){e - b}, 1, (int64_t[]){1}, EM_I64);
            em_tensor *s = em_accelerator_reduce(acc, t, EM_RED_SUM);
            CHECK(em_item(s) == (double)n, "split of %lld covers %g", (long long)n, em_item(s));
            int64_t q = n / g_world, r = n % g_world;
            CHECK(b == g_rank * q + (g_rank < r ? g_rank : r) && e - b == q + (g_rank < r), "split of %lld", (long long)n);
        }
    }
    /* main_process_first: rank 0 writes, the others read after it */
    char path[128];
    snprintf(path, sizeof path, "/tmp/ember-acc-mpi-first-%lld", (long long)tag);
    EM_MAIN_PROCESS_FIRST(acc) {
        if (em_accelerator_is_main_process(acc)) {
            FILE *f = fopen(path, "w");
            fputs("ok", f);
            fclose(f);
        } else {
            struct stat sb;
            CHECK(stat(path, &sb) == 0, "rank 0 did not go first");
        }
    }
    em_accelerator_wait_for_everyone(acc);
    EM_ON_MAIN_PROCESS(acc) remove(path);
    /* early stopping: the last rank alone sets the trigger at step 3; every
     * rank's check_trigger says so at that step, and only then */
    int stopped_at = -1;
    for (int step = 0; step < 6 && stopped_at < 0; step++) {
        if (step == 3 && em_accelerator_is_last_process(acc)) em_accelerator_set_trigger(acc);
        if (em_accelerator_check_trigger(acc)) stopped_at = step;
    }
    CHECK(stopped_at == 3, "rank %d stopped at step %d, not 3", g_rank, stopped_at);
    CHECK(!em_accelerator_check_trigger(acc), "the trigger was not cleared");
    em_accelerator_free(acc);
    pass("process helpers: split_between_processes, reduce, main_process_first, check_trigger");
}

/* ---- the "checkpoint from every rank" warning ---------------------------------------------- */
static void test_save_from_every_rank(int64_t tag)
{
    int failed = g_failed;
    em_accelerator *acc = em_accelerator_new(NULL);
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&(em_distilbert_config){
        .vocab_size = 50, .max_position_embeddings = 16, .n_layers = 1, .n_heads = 2, .dim = 8, .hidden_dim = 16});
    CHECK(m != NULL, "model: %s", em_last_error());
    if (!m) { em_accelerator_free(acc); return; }
    CHECK_OK(em_accelerator_prepare(acc, &m->base, NULL, NULL, NULL));
    char good[256], bad[256];
    snprintf(good, sizeof good, "/tmp/ember-acc-mpi-%lld/model-main", (long long)tag);
    snprintf(bad, sizeof bad, "/tmp/ember-acc-mpi-%lld/model-rank%d", (long long)tag, g_rank);
    /* buffers follow rank 0 after a backward that syncs: break position_ids off rank 0 */
    em_tensor *pos = m->distilbert->embeddings->position_ids;
    if (g_rank != 0) EM_NO_GRAD { em_fill_(pos, 3.0); }
    EM_SCOPE {
        int64_t ids[2 * 5] = {1, 7, 9, 4, 2, 1, 3, 3, 8, 2}, lab[2] = {0, 1};
        em_seqcls_output out = em_distilbert_seqcls_forward(
            m, &(em_seqcls_inputs){.input_ids = em_from_data(ids, EM_SHAPE(2, 5), EM_I64),
                                   .labels = em_from_data(lab, EM_SHAPE(2), EM_I64)});
        CHECK_OK(em_accelerator_backward(acc, out.loss));
    }
    bool synced = true;
    for (int64_t j = 0; j < 16; j++) synced &= em_get(pos, (int64_t[]){0, j}) == (double)j;
    CHECK(synced, "rank %d: position_ids not rank 0's after a synchronizing backward", g_rank);

    CHECK(tu_capture_stderr_begin() == 0, "capture");
    CHECK_OK(em_accelerator_save_model(acc, &m->base, good));   /* the fix: main process only */
    char *err = tu_capture_stderr_end();
    CHECK(err && tu_count_of(err, "ember: warning:") == 0, "save_model warned: %s", err ? err : "(no capture)");
    free(err);
    CHECK(tu_capture_stderr_begin() == 0, "capture");
    for (int i = 0; i < 2; i++) CHECK_OK(em_save_pretrained(&m->base, bad));   /* the mistake, twice */
    err = tu_capture_stderr_end();
    int want = g_rank == 0 ? 0 : 1;
    CHECK(err && tu_count_of(err, "ember: warning: em_save_pretrained:") == want, "rank %d: %d warnings, want %d: %s",
          g_rank, tu_count_of(err, "ember: warning:"), want, err ? err : "(no capture)");
    CHECK(!err || want == 0 || (strstr(err, "em_accelerator_save_model") && strstr(err, "em_accelerator_is_main_process")),
          "the warning names no fix: %s", err);
    free(err);
    em_accelerator_wait_for_everyone(acc);
    em_accelerator_free(acc);
    em_module_free(&m->base);
    if (g_failed == failed)
        pass("buffers synced by backward; save_pretrained from every rank: %d warning(s) on the other ranks, none "
             "for save_model", g_world - 1);
}

int main(void)
{
    em_accelerator *acc = em_accelerator_new(NULL);
    if (!acc) {
        fprintf(stderr, "cannot join the world: %s\n", em_last_error());
        return 1;
    }
    g_rank = em_accelerator_process_index(acc);
    g_world = em_accelerator_num_processes(acc);
    /* one checkpoint folder for the job: rank 0 picks it, the others learn it */
    int64_t tag = 0;
    if (g_rank == 0) tag = (int64_t)getpid() * 1000 + (int64_t)(time(NULL) % 1000);
    EM_SCOPE {
        em_tensor *t = em_from_data(&tag, 1, (int64_t[]){1}, EM_I64);
        CHECK_OK(em_pg_broadcast(em_accelerator_process_group(acc), t, 0));
        tag = *(int64_t *)em_data_ptr(t);
    }
    em_accelerator_free(acc);
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/ember-acc-mpi-%lld/state", (long long)tag);

    test_helpers(tag);
    test_gather_for_metrics();
    test_ddp_equals_single();
    test_save_load_resume(dir);
    test_save_from_every_rank(tag);

    if (g_rank == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf /tmp/ember-acc-mpi-%lld", (long long)tag);
        if (system(cmd) != 0) fprintf(stderr, "could not remove the checkpoint folder\n");
    }
    if (g_failed) fprintf(stderr, "rank %d: %d checks failed\n", g_rank, g_failed);
    return g_failed ? 1 : 0;
}
