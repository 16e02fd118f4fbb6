/* bench/ddp — the step time of DistilBERT config B (dim 256, 4 layers, 4 heads,
 * ffn 1024, vocab 30522, seq 64, global batch 32; dropout on, AdamW) on:
 *
 *   EM_NUM_THREADS=2 ./bench_ddp                     1 process x 2 threads
 *   EM_NUM_THREADS=1 mpirun -np 2 ./bench_ddp        2 processes x 1 thread, DDP
 *
 * Each rank takes global_batch / world rows. A step is forward, backward,
 * em_ddp_finish_backward (the communication backward did not hide), AdamW and
 * zero_grad; medians over --steps after --warmup. Under DDP the step time is
 * the slowest rank's. --sync-after turns the overlap off (no_sync during
 * backward, then one all-reduce of the whole gradient buffer) to show what
 * the bucketed overlap saves. Prints one summary line and, under DDP, the
 * bucket map and timeline of the last step.
 *
 * Flags: --steps N (10) --warmup N (2) --batch N (32, global) --seq N (64)
 *        --layers N (4) --sync-after --bucket-cap-mb X (25)
 */
#include "ember.h"
#include "distributed/ddp/ddp_internal.h"
#include "distributed/distributed.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) { return 1e3 * bench_now(); }

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

enum { T_STEP, T_FWD, T_BWD, T_FINISH, T_OPT, T_N };

int main(int argc, char **argv)
{
    int steps = 10, warmup = 2, batch = 32, seq = 64, layers = 4;
    bool sync_after = false;
    double cap_mb = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc) seq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc) layers = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--bucket-cap-mb") && i + 1 < argc) cap_mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--sync-after")) sync_after = true;
        else {
            fprintf(stderr, "usage: %s [--steps N] [--warmup N] [--batch N] [--seq N] [--layers N] "
                    "[--bucket-cap-mb X] [--sync-after]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    em_process_group *pg = NULL;
    if (em_pg_init(NULL, &pg) != EM_OK) {
        fprintf(stderr, "em_pg_init: %s\n", em_last_error());
        return 1;
    }
    int rank = em_pg_rank(pg), world = em_pg_world_size(pg);
    if (batch % world) {
        if (!rank) fprintf(stderr, "the global batch %d does not split over %d ranks\n", batch, world);
        return 2;
    }
    int64_t B = batch / world, S = seq;

    em_set_seed(1234);
    em_distilbert_config cfg = {.vocab_size = 30522, .n_layers = layers, .n_heads = 4, .dim = 256, .hidden_dim = 1024};
    em_distilbert_seqcls *model = em_distilbert_seqcls_new(&cfg);
    if (!model) {
        fprintf(stderr, "model: %s\n", em_last_error());
        return 1;
    }
    em_module *m = &model->base;
    em_module_train(m, true);
    em_ddp *ddp = NULL;
    if (world > 1 && em_ddp_new(m, pg, &(em_ddp_opts){.bucket_cap_mb = cap_mb}, &ddp) != EM_OK) {
        fprintf(stderr, "em_ddp_new: %s\n", em_last_error());
        return 1;
    }
    em_named_tensors ps = em_module_named_parameters(m);
    em_tensor **params = malloc(sizeof *params * (size_t)ps.n);
    for (int i = 0; i < ps.n; i++) params[i] = ps.items[i].tensor;
    em_optimizer *opt = em_adamw_new(params, ps.n, &(em_adamw_opts){.lr = 1e-4});
    free(params);
    int64_t n_params = em_module_num_parameters(m, true);

    double *t[T_N];
    for (int k = 0; k < T_N; k++) t[k] = calloc((size_t)steps, sizeof(double));
    uint64_t seed = 99 + (uint64_t)rank;
    for (int s = 0; s < warmup + steps; s++) {
        double t0 = now_ms(), t1 = 0, t2 = 0, t3 = 0, t4 = 0;
        EM_SCOPE {
            em_tensor *ids = em_empty(2, (int64_t[]){B, S}, EM_I64, EM_CPU);
            em_tensor *mask = em_ones(2, (int64_t[]){B, S}, EM_I64, EM_CPU);
            em_tensor *labels = em_empty(1, (int64_t[]){B}, EM_I64, EM_CPU);
            int64_t *pi = em_data_ptr(ids), *pl = em_data_ptr(labels);
            for (int64_t i = 0; i < B * S; i++) pi[i] = (int64_t)(mix(&seed) % 30522);
            for (int64_t i = 0; i < B; i++) pl[i] = (int64_t)(mix(&seed) % 2);
            em_seqcls_output out = em_distilbert_seqcls_forward(model, &(em_seqcls_inputs){
                .input_ids = ids, .attention_mask = mask, .labels = labels});
            t1 = now_ms();
            if (ddp) {
                em_ddp_set_require_sync(ddp, !sync_after);
                em__ddp_mark_backward_begin(ddp);
            }
            em_backward(out.loss);
            t2 = now_ms();
        }
        if (ddp) {
            if (em_ddp_finish_backward(ddp) != EM_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, em_last_error());
                return 1;
            }
            if (sync_after && em_pg_all_reduce(pg, em_module_flat_grads(m, EM_F32), EM_RED_AVG) != EM_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, em_last_error());
                return 1;
            }
        }
        t3 = now_ms();
        em_optimizer_step(opt);
        em_optimizer_zero_grad_ex(opt, false);
        t4 = now_ms();
        if (s < warmup) continue;
        double v[T_N] = {t4 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3};
        if (world > 1) EM_SCOPE {   /* the slowest rank's times (outside the timed region) */
            em_tensor *x = em_from_data(v, 1, (int64_t[]){T_N}, EM_F64);
            em_pg_all_reduce(pg, x, EM_RED_MAX);
            memcpy(v, em_data_ptr(x), sizeof v);
        }
        for (int k = 0; k < T_N; k++) t[k][s - warmup] = v[k];
    }
    double med[T_N];
    for (int k = 0; k < T_N; k++) med[k] = bench_median(t[k], steps);
    if (rank == 0) {
        printf("bench_ddp: DistilBERT dim 256, %d layers, 4 heads, ffn 1024, vocab 30522 (%.2fM parameters), "
               "seq %d, global batch %d\n", layers, (double)n_params / 1e6, seq, batch);
        printf("%d process(es) x %d thread(s)%s: step %.1f ms (forward %.1f, backward %.1f, exposed all-reduce %.1f, "
               "AdamW %.1f), %.1f samples/s, median of %d\n", world, em_num_threads(),
               world > 1 ? (sync_after ? ", DDP without overlap (one all-reduce after backward)" : ", DDP") : "",
               med[T_STEP], med[T_FWD], med[T_BWD], med[T_FINISH], med[T_OPT], 1e3 * batch / med[T_STEP], steps);
        if (ddp && !sync_after) {
            em_ddp_bucket_info info[64];
            int nb = em_ddp_buckets(ddp, info, 64);
            printf("last step, rank 0: %d buckets (ms since backward began)\n", nb);
            for (int b = 0; b < nb && b < 64; b++)
                printf("  bucket %2d: %3d params, %8.2f MB  ready %7.1f  start %7.1f  end %7.1f\n", b, info[b].n_params,
                       4e-6 * (double)info[b].numel, info[b].ready_ms, info[b].start_ms, info[b].end_ms);
        }
    }
    for (int k = 0; k < T_N; k++) free(t[k]);
    em_named_tensors_free(&ps);
    em_optimizer_free(opt);
    em_ddp_free(ddp);
    em_module_free(m);
    em_pg_free(pg);
    return 0;
}
