/* bench_amp — what mixed precision buys on this CPU (docs/PERFORMANCE.md, "amp").
 *
 *   matmul: em_matmul GFLOP/s in f32 and in bf16 (oneDNN, f32 accumulation)
 *   at the DistilBERT-base shapes of one step at batch 8 x seq 128 = 1024
 *   tokens: the linears forward (x W^T), their backward (dY W, dY^T X), and
 *   the attention products (96 heads x 128 tokens). bf16/f32 ratio per shape.
 *
 *   train step: one full DistilBertForSequenceClassification step (forward
 *   with the loss, backward, AdamW, zero_grad) for configs A and B, in f32 and
 *   with the forward under EM_AUTOCAST_REGION(EM_BF16) (what
 *   Accelerator(mixed_precision="bf16") does), dropout on, random ids, no
 *   padding. Median ms/step after 2 warmup steps, tokens/s, bf16/f32 speedup.
 *
 * bench/amp/amp_peer.py runs the same work in PyTorch (CPU bf16 autocast) and,
 * given --ember, this program in the same environment, and prints the ratios.
 * Usage: bench_amp [--matmul] [--train] [--config A|B] [--steps N] [--csv] [--cpu-time] [--profile]
 * --profile: the last bf16 step's per-op kernel time (forward, backward, optimizer);
 * --bf16-only: skip the f32 steps (for profilers).
 */
#include "ember.h"
#include "bench/bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool csv, profile, bf16_only;   /* --profile: the last bf16 step's per-op split */
/* --cpu-time: time with the process's CPU clock instead of the wall clock.
 * For A/B comparisons on a shared, oversubscribed machine with 1 thread
 * (EM_NUM_THREADS=1), where waiting for a core would swamp wall times. */
static clockid_t clock_id = CLOCK_MONOTONIC;

static double now(void) { return bench_clock_s(clock_id); }

/* ---- matmul ------------------------------------------------------------------------------- */
typedef struct shape {
    const char *key, *name;
    int64_t batch, m, n, k;
    bool ta, tb;   /* operand stored transposed (passed as a transposed view) */
} shape;

static const shape shapes[] = {
    {"qkv", "qkv/out x W^T    [1024,768]x[768,768]", 1, 1024, 768, 768, false, true},
    {"ffn1", "ffn1 x W^T       [1024,768]x[768,3072]", 1, 1024, 3072, 768, false, true},
    {"ffn2", "ffn2 x W^T       [1024,3072]x[3072,768]", 1, 1024, 768, 3072, false, true},
    {"ffn2_dx", "ffn2 dX = dY W   [1024,768]x[768,3072]", 1, 1024, 3072, 768, false, false},
    {"ffn1_dw", "ffn1 dW = dY^T X [3072,1024]x[1024,768]", 1, 3072, 768, 1024, true, false},
    {"attn_qk", "attn q k^T       96x[128,64]x[64,128]", 96, 128, 128, 64, false, true},
    {"attn_pv", "attn p v         96x[128,128]x[128,64]", 96, 128, 64, 128, false, false},
};

/* Seconds per em_matmul of one shape in dtype dt: median of reps after warmup. */
static double time_matmul(const shape *s, em_dtype dt)
{
    double t[15];
    int reps = 0;
    em_scope_begin();
    int64_t as[3] = {s->batch, s->ta ? s->k : s->m, s->ta ? s->m : s->k};
    int64_t bs[3] = {s->batch, s->tb ? s->n : s->k, s->tb ? s->k : s->n};
    int nd = s->batch > 1 ? 3 : 2;
    em_tensor *a = em_to_dtype(em_randn(nd, as + (3 - nd), EM_F32, EM_CPU), dt);
    em_tensor *b = em_to_dtype(em_randn(nd, bs + (3 - nd), EM_F32, EM_CPU), dt);
    if (s->ta) a = em_transpose(a, -1, -2);
    if (s->tb) b = em_transpose(b, -1, -2);
    double total = 0;
    for (int r = -2; r < 15 && (r < 5 || total < 1.0); r++) {
        double t0 = now();
        EM_SCOPE { em_matmul(a, b); }
        double dt_ = now() - t0;
        if (r >= 0) t[reps++] = dt_, total += dt_;
    }
    em_scope_end();
    return bench_median(t, reps);
}

static void bench_matmul(void)
{
    if (csv) printf("matmul,shape,f32_gflops,bf16_gflops,ratio\n");
    else printf("%-42s %10s %10s %7s\n", "matmul (GFLOP/s)", "f32", "bf16", "ratio");
    double sum32 = 0, sum16 = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *s = &shapes[i];
        double fl = 2.0 * (double)s->batch * (double)s->m * (double)s->n * (double)s->k;
        double t32 = time_matmul(s, EM_F32), t16 = time_matmul(s, EM_BF16);
        sum32 += t32, sum16 += t16;
        if (csv) printf("matmul,%s,%.1f,%.1f,%.2f\n", s->key, fl / t32 * 1e-9, fl / t16 * 1e-9, t32 / t16);
        else printf("%-42s %10.1f %10.1f %6.2fx\n", s->name, fl / t32 * 1e-9, fl / t16 * 1e-9, t32 / t16);
        fflush(stdout);
    }
    if (csv) printf("matmul,all,,,%.2f\n", sum32 / sum16);
    else printf("%-42s %10s %10s %6.2fx\n", "all shapes (total time)", "", "", sum32 / sum16);
}

/* ---- train step ---------------------------------------------------------------------------- */
static const bench_config configs[] = {
    {"A", 768, 6, 12, 3072, 30522, 128, 8},
    {"B", 256, 4, 4, 1024, 30522, 64, 32},
};

/* Median seconds per step; *loss gets the last loss. */
static double train(const bench_config *c, bool bf16, int steps, double *loss)
{
    em_distilbert_seqcls *m = bench_distilbert(c, "bench_amp");
    if (!m) exit(1);
    em_named_tensors ps = em_module_named_parameters(&m->base);
    em_tensor **params = malloc(sizeof *params * (size_t)ps.n);
    for (int i = 0; i < ps.n; i++) params[i] = ps.items[i].tensor;
    em_optimizer *opt = em_adamw_new(params, ps.n, &(em_adamw_opts){.lr = 5e-5});
    em_tensor *input_ids, *labels;
    bench_batch(c, &input_ids, &labels);
    double *t = malloc(sizeof *t * (size_t)steps);
    for (int r = -2; r < steps; r++) {
        bool prof = profile && bf16 && r == steps - 1;
        if (prof) em_profile_reset(), em_profile_enable(true);
        double t0 = now();
        EM_SCOPE {
            em_seqcls_output o;
            em_seqcls_inputs in = {.input_ids = input_ids, .labels = labels};
            if (bf16) {
                EM_AUTOCAST_REGION(EM_BF16) { o = em_distilbert_seqcls_forward(m, &in); }
            } else {
                o = em_distilbert_seqcls_forward(m, &in);
            }
            if (prof) em_profile_print(stdout, "bf16 forward"), em_profile_reset();
            em_backward(o.loss);
            *loss = em_item(o.loss);
        }
        if (prof) em_profile_print(stdout, "bf16 backward"), em_profile_reset();
        em_optimizer_step(opt);
        if (prof) em_profile_print(stdout, "bf16 optimizer"), em_profile_enable(false);
        em_module_zero_grad(&m->base, false);
        if (r >= 0) t[r] = now() - t0;
    }
    double med = bench_median(t, steps);
    em_release(input_ids), em_release(labels);
    em_optimizer_free(opt);
    em_named_tensors_free(&ps);
    em_module_free(&m->base);
    free(params), free(t);
    return med;
}

static void bench_train(const char *only, int steps)
{
    if (csv) printf("train,config,f32_ms,bf16_ms,f32_tokens_s,bf16_tokens_s,speedup,f32_loss,bf16_loss\n");
    else printf("%-6s %10s %10s %12s %12s %8s\n", "train", "f32 ms", "bf16 ms", "f32 tok/s", "bf16 tok/s", "speedup");
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        const bench_config *c = &configs[i];
        if (only && strcmp(only, c->name)) continue;
        double l32 = NAN, l16, t32 = bf16_only ? NAN : train(c, false, steps, &l32), t16 = train(c, true, steps, &l16);
        double tok = (double)(c->batch * c->seq);
        if (csv)
            printf("train,%s,%.1f,%.1f,%.0f,%.0f,%.2f,%.5f,%.5f\n", c->name, 1e3 * t32, 1e3 * t16, tok / t32, tok / t16,
                   t32 / t16, l32, l16);
        else
            printf("%-6s %10.1f %10.1f %12.0f %12.0f %7.2fx\n", c->name, 1e3 * t32, 1e3 * t16, tok / t32, tok / t16,
                   t32 / t16);
        fflush(stdout);
    }
}

int main(int argc, char **argv)
{
    bool mm = false, tr = false;
    const char *only = NULL;
    int steps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--csv")) csv = true;
        else if (!strcmp(argv[i], "--matmul")) mm = true;
        else if (!strcmp(argv[i], "--train")) tr = true;
        else if (!strcmp(argv[i], "--cpu-time")) clock_id = CLOCK_PROCESS_CPUTIME_ID;
        else if (!strcmp(argv[i], "--profile")) profile = true;
        else if (!strcmp(argv[i], "--bf16-only")) bf16_only = true;
        else if (!strcmp(argv[i], "--config") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--matmul] [--train] [--config A|B] [--steps N] [--csv] [--cpu-time] [--profile] [--bf16-only]\n", argv[0]);
            return 2;
        }
    }
    if (!mm && !tr) mm = tr = true;
    if (steps < 1) steps = 1;
    const char *clk = clock_id == CLOCK_MONOTONIC ? "wall" : "process CPU";
    if (csv) printf("info,threads,%d\ninfo,steps,%d\ninfo,clock,%s\n", em_num_threads(), steps, clk);
    else printf("bench_amp: %d threads, %s time; train: median of %d steps after 2 warmup\n", em_num_threads(), clk,
                steps);
    bench_print_libraries(csv);
    if (mm) bench_matmul();
    if (tr) bench_train(only, steps);
    return 0;
}
