/* bench_train_step — one full training step of DistilBertForSequenceClassification
 * (issue 4): forward with the loss, backward, AdamW, the linear warmup
 * scheduler, and zeroing the gradients, in training mode (dropout on).
 *
 *   config  dim layers heads  ffn  vocab  seq batch
 *   A       768    6     12  3072  30522  128    8   (distilbert-base)
 *   B       256    4      4  1024  30522   64   32
 *   C       128    2      2   512   8192   32   64
 *
 * Inputs are random ids without padding (attention_mask all ones), 2 labels.
 * AdamW: lr 5e-5, weight decay 0.01 except biases and LayerNorm weights
 * (em_param_groups_no_decay), get_linear_schedule_with_warmup(10, 1000).
 * Parameters are flat (em_distilbert_seqcls_new), so zero_grad is one memset
 * and AdamW one pass. Reports the median step of the repetitions after
 * warmup, its phases, tokens/s (batch*seq / step), and the process's peak RSS
 * (each config runs in its own child process, so peaks do not mix).
 *
 * Usage: bench_train_step [--config A|B|C] [--steps N] [--csv] [--profile]
 * Threads: 2 (the peer's count) unless EM_NUM_THREADS or OMP_NUM_THREADS is set.
 * bench/train_step/torch_peer.py runs the same step with transformers and,
 * given --ember, this program too, in the same environment.
 */
#include "ember.h"
#include "optim/optim.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const bench_config configs[] = {
    {"A", 768, 6, 12, 3072, 30522, 128, 8},
    {"B", 256, 4, 4, 1024, 30522, 64, 32},
    {"C", 128, 2, 2, 512, 8192, 32, 64},
};

static bool csv, profile;   /* --profile: the last step's per-op kernel time, forward and backward */

static int run(const bench_config *c, int steps)
{
    em_distilbert_seqcls *m = bench_distilbert(c, "bench_train_step");
    if (!m) return 1;
    em_named_tensors ps = em_module_named_parameters(&m->base);
    const char **names = malloc(sizeof *names * (size_t)ps.n);
    em_tensor **params = malloc(sizeof *params * (size_t)ps.n), **buf = malloc(sizeof *buf * (size_t)ps.n);
    for (int i = 0; i < ps.n; i++) names[i] = ps.items[i].name, params[i] = ps.items[i].tensor;
    em_param_group groups[2];
    int ng = em_param_groups_no_decay(names, params, ps.n, 0.01, buf, groups);
    em_optimizer *opt = em_adamw_new_groups(groups, ng, &(em_adamw_opts){.lr = 5e-5});
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, 10, 1000);

    /* random ids in [1, vocab), labels in {0, 1}: fixed for the run */
    int64_t B = c->batch, S = c->seq;
    em_tensor *input_ids, *labels;
    bench_batch(c, &input_ids, &labels);
    em_tensor *mask = em_ones(2, (int64_t[]){B, S}, EM_I64, EM_CPU);
    em_module_train(&m->base, true);

    int warmup = 2, n = steps;
    double *t_step = calloc((size_t)n, sizeof(double)), *t_fwd = calloc((size_t)n, sizeof(double)),
           *t_bwd = calloc((size_t)n, sizeof(double)), *t_opt = calloc((size_t)n, sizeof(double));
    double loss = 0;
    em_memory_reset_peak(EM_CPU);
    for (int r = -warmup; r < n; r++) {
        bool prof = profile && r == n - 1;   /* the last step's per-op split, outside the medians' effect */
        if (prof) em_profile_reset(), em_profile_enable(true);
        double t0 = bench_now(), t1, t2;
        EM_SCOPE {
            em_seqcls_output o = em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){input_ids, mask, NULL, labels});
            t1 = bench_now();
            if (prof) em_profile_print(stdout, "forward"), em_profile_reset();
            em_backward(o.loss);
            loss = em_item(o.loss);
        }
        if (prof) em_profile_print(stdout, "backward"), em_profile_enable(false);
        t2 = bench_now();
        em_optimizer_step(opt);
        em_scheduler_step(sched);
        em_module_zero_grad(&m->base, false);
        double t3 = bench_now();
        if (r >= 0) t_step[r] = t3 - t0, t_fwd[r] = t1 - t0, t_bwd[r] = t2 - t1, t_opt[r] = t3 - t2;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double step = bench_median(t_step, n), tok = (double)(B * S) / step;
    em_memory_stats ms = em_memory_stats_get(EM_CPU);
    if (csv)
        printf("train_step,%s,%.3f,%.1f,%.3f,%.3f,%.3f,%.1f,%.1f,%lld,%.6f\n", c->name, 1e3 * step, tok,
               1e3 * bench_median(t_fwd, n), 1e3 * bench_median(t_bwd, n), 1e3 * bench_median(t_opt, n), ru.ru_maxrss / 1024.0,
               (double)ms.peak_bytes / (1 << 20), (long long)em_module_num_parameters(&m->base, false), loss);
    else
        printf("%-6s %9.1f %10.0f %8.1f %8.1f %8.1f %10.0f %10.0f %12lld\n", c->name, 1e3 * step, tok,
               1e3 * bench_median(t_fwd, n), 1e3 * bench_median(t_bwd, n), 1e3 * bench_median(t_opt, n), ru.ru_maxrss / 1024.0,
               (double)ms.peak_bytes / (1 << 20), (long long)em_module_num_parameters(&m->base, false));
    fflush(stdout);
    em_release(input_ids), em_release(mask), em_release(labels);
    em_scheduler_free(sched);
    em_optimizer_free(opt);
    em_named_tensors_free(&ps);
    em_module_free(&m->base);
    free(names), free(params), free(buf);
    free(t_step), free(t_fwd), free(t_bwd), free(t_opt);
    return 0;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    int steps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv")) csv = true;
        else if (!strcmp(argv[i], "--profile")) profile = true;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--config A|B|C] [--steps N] [--csv] [--profile]\n", argv[0]);
            return 2;
        }
    }
    if (steps < 1) steps = 1;
    /* 2 threads, as the peer, unless the environment says otherwise */
    if (!getenv("EM_NUM_THREADS") && !getenv("OMP_NUM_THREADS")) em_set_num_threads(2);
    if (csv)
        printf("info,threads,%d\ninfo,steps,%d\ntrain_step,config,ms_step,tokens_s,fwd_ms,bwd_ms,opt_ms,peak_rss_mib,"
               "peak_tensor_mib,params,loss\n", em_num_threads(), steps);
    else
        printf("bench_train_step: %d threads, f32, median of %d steps after 2 warmup\n%-6s %9s %10s %8s %8s %8s %10s "
               "%10s %12s\n", em_num_threads(), steps, "config", "ms/step", "tokens/s", "fwd", "bwd", "opt",
               "peakRSS MiB", "tensor MiB", "params");
    bench_print_libraries(csv);
    fflush(stdout);
    int rc = 0;
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        if (only && strcmp(only, configs[i].name)) continue;
        pid_t pid = fork();   /* one process per config: its own peak RSS */
        if (pid == 0) _exit(run(&configs[i], steps));
        int st = 0;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) rc = 1;
    }
    return rc;
}
