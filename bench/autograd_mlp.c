/* bench_autograd_mlp — the cost of backward against forward for a 2-layer MLP
 * (issue 3: backward <= 2.2x forward, "no wasted copies").
 *
 *     logits = act(x W1^T + b1) W2^T + b2,  loss = cross_entropy(logits, y), mean
 *     x [256, 1024] (no grad), W1 [1024, 1024], W2 [out, 1024], f32
 *
 * Configs: relu and gelu with out = 1024, relu with out = 10. The forward is
 * timed with recording on (the forward whose graph backward walks); backward
 * includes accumulating into the .grad of the four parameters, which are
 * cleared (em_set_grad(p, NULL), like zero_grad(set_to_none=True)) outside the
 * timed region. Also timed: the same forward under EM_NO_GRAD (the cost of
 * recording). Every figure is the median of the repetitions after warmup.
 *
 * The backward does 2 GEMMs per layer where the forward does 1 (x needs no
 * gradient, so the first layer's dX is skipped): 3 GEMMs against 2 with
 * out = 1024, hence a floor near 1.5x before the elementwise work.
 *
 * Usage: bench_autograd_mlp [--csv] [--quick]. bench/autograd_mlp_peer.py runs
 * the same work in PyTorch and, given --ember, this program too.
 */
#include "ember.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BATCH = 256, IN = 1024, HIDDEN = 1024 };

static bool csv, quick;

typedef struct config {
    const char *name;
    bool gelu;
    int64_t out;
} config;

typedef struct mlp {
    em_tensor *w1, *b1, *w2, *b2, *x, *y;
} mlp;

static em_tensor *param(int ndim, const int64_t *shape, double scale)
{
    em_tensor *r = em_rand(ndim, shape, EM_F32, EM_CPU);
    em_tensor *p = em_mul_scalar(em_add_scalar(r, -0.5), 2 * scale);   /* U(-scale, scale) */
    em_release(r);
    return p;
}

static mlp make_mlp(const config *c)
{
    double s = 1.0 / 32.0;   /* 1/sqrt(1024), nn.Linear's bound */
    mlp m = {
        .w1 = param(EM_SHAPE(HIDDEN, IN), s), .b1 = param(EM_SHAPE(HIDDEN), s),
        .w2 = param(EM_SHAPE(c->out, HIDDEN), s), .b2 = param(EM_SHAPE(c->out), s),
        .x = em_randn(EM_SHAPE(BATCH, IN), EM_F32, EM_CPU),
    };
    int64_t *labels = malloc(sizeof *labels * BATCH);
    for (int i = 0; i < BATCH; i++) labels[i] = (i * 7) % c->out;
    m.y = em_from_data(labels, EM_SHAPE(BATCH), EM_I64);
    free(labels);
    em_tensor *ps[] = {m.w1, m.b1, m.w2, m.b2};
    for (int i = 0; i < 4; i++) em_requires_grad_(ps[i], true);
    return m;
}

static void free_mlp(mlp *m)
{
    em_tensor *ts[] = {m->w1, m->b1, m->w2, m->b2, m->x, m->y};
    for (int i = 0; i < 6; i++) em_release(ts[i]);
}

static em_tensor *forward(const config *c, const mlp *m)
{
    em_tensor *h = em_add(em_matmul(m->x, em_transpose(m->w1, 0, 1)), m->b1);
    h = c->gelu ? em_gelu(h) : em_relu(h);
    em_tensor *logits = em_add(em_matmul(h, em_transpose(m->w2, 0, 1)), m->b2);
    return em_cross_entropy(logits, m->y, -100, EM_REDUCE_MEAN);
}

typedef struct result {
    double fwd, bwd, fwd_nograd, peak_mb;
} result;

static result run(const config *c)
{
    enum { MAX_REPS = 41 };
    mlp m = make_mlp(c);
    em_tensor *ps[] = {m.w1, m.b1, m.w2, m.b2};
    int warmup = quick ? 2 : 3, reps = quick ? 7 : 21;
    double tf[MAX_REPS], tb[MAX_REPS], tn[MAX_REPS];
    em_memory_reset_peak(EM_CPU);
    for (int r = -warmup; r < reps; r++) {
        double t0, t1, t2;
        EM_SCOPE {
            t0 = bench_now();
            em_tensor *loss = forward(c, &m);
            t1 = bench_now();
            em_backward(loss);
            t2 = bench_now();
        }
        for (int i = 0; i < 4; i++) em_set_grad(ps[i], NULL);
        double t3 = bench_now(), t4;
        EM_SCOPE {
            EM_NO_GRAD { forward(c, &m); }
            t4 = bench_now();
        }
        if (r < 0) continue;
        tf[r] = t1 - t0;
        tb[r] = t2 - t1;
        tn[r] = t4 - t3;
    }
    result res = {bench_median(tf, reps), bench_median(tb, reps), bench_median(tn, reps),
                  (double)em_memory_stats_get(EM_CPU).peak_bytes / (1 << 20)};
    free_mlp(&m);
    return res;
}

int main(int argc, char **argv)
{
    bench_flags(argc, argv, "bench_autograd_mlp", "--csv", &csv, &quick);
    em_set_seed(0);
    const config configs[] = {
        {"relu out=1024", false, 1024},
        {"gelu out=1024", true, 1024},
        {"relu out=10", false, 10},
    };
    const char *core = getenv("OPENBLAS_CORETYPE");
    if (csv) {
        printf("info,threads,%d\ninfo,openblas_core,%s\n", em_num_threads(), core ? core : "(unset)");
        printf("mlp,config,fwd_ms,bwd_ms,ratio,fwd_nograd_ms,peak_mb\n");
    } else {
        printf("bench_autograd_mlp: batch %d, in %d, hidden %d, f32, %d threads, OPENBLAS_CORETYPE=%s\n", BATCH, IN,
               HIDDEN, em_num_threads(), core ? core : "(unset)");
        printf("%-14s %9s %9s %9s %14s %9s\n", "config", "fwd ms", "bwd ms", "bwd/fwd", "fwd no-grad ms", "peak MB");
    }
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        result r = run(&configs[i]);
        if (csv)
            printf("mlp,%s,%.3f,%.3f,%.3f,%.3f,%.1f\n", configs[i].name, 1e3 * r.fwd, 1e3 * r.bwd, r.bwd / r.fwd,
                   1e3 * r.fwd_nograd, r.peak_mb);
        else
            printf("%-14s %9.3f %9.3f %9.2f %14.3f %9.1f\n", configs[i].name, 1e3 * r.fwd, 1e3 * r.bwd, r.bwd / r.fwd,
                   1e3 * r.fwd_nograd, r.peak_mb);
    }
    return 0;
}
