/* ember tests — DDP (distributed/ddp/ddp.c), run as every rank of a world
 * (mpirun -np 2 and -np 3; also a world of one without mpirun).
 *
 * Every rank trains a DDP model on its shard of each batch and, locally, a
 * reference model (same init as rank 0) on the whole batch in one process;
 * after a few SGD/AdamW steps the parameters must agree within 1e-6 relative
 * (max |ddp - ref| / max |ref| per parameter, f32), and be bitwise equal
 * across ranks. Cases: one bucket and many; accumulation under no_sync; a
 * parameter unused on some ranks (with set_to_none zero_grad); a rebuild that
 * groups non-adjacent parameters; the bucket map against an independent
 * implementation of the assignment rule; models that differ across ranks.
 *
 * Not a Check suite: Check forks, which MPI does not survive. One PASS line
 * per case on rank 0 (every rank reports failures); exit status 1 when a
 * check failed on any rank.
 */
#include "ember.h"
#include "distributed/ddp/ddp_internal.h"
#include "distributed/distributed.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rank_check.h"


/* splitmix64: data independent of ember's RNG */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static em_tensor *rand_tensor(int64_t rows, int64_t cols, uint64_t seed)
{
    em_tensor *t = em_empty(2, (int64_t[]){rows, cols}, EM_F32, EM_CPU);
    float *p = em_data_ptr(t);
    for (int64_t i = 0; i < rows * cols; i++) p[i] = (float)((double)(mix(&seed) >> 11) / 9007199254740992.0 * 2 - 1);
    return t;
}

/* ---- models -------------------------------------------------------------------- */
enum { IN = 6, H = 16, OUT = 4, ABC = 8 };
enum { MODEL_MLP, MODEL_ABC };

typedef struct net {
    em_module base;
    int kind;
    em_nn_linear *l1, *l2, *l3, *extra, *extra2;   /* MLP: l1 l2 l3 [extra] [extra2] */
    em_nn_linear *a, *b, *c;                       /* ABC: registered a, b, c */
} net;

static net *net_new(int kind, uint64_t seed, int64_t h2, bool extra2)
{
    net *m = calloc(1, sizeof *m);
    em_module_init(&m->base, kind == MODEL_MLP ? "MLP" : "ABC", NULL);
    m->kind = kind;
    em_set_seed(seed);
    if (kind == MODEL_MLP) {
        m->l1 = (em_nn_linear *)em_module_register_child(&m->base, "l1", (em_module *)em_nn_linear_new(IN, H, NULL));
        m->l2 = (em_nn_linear *)em_module_register_child(&m->base, "l2", (em_module *)em_nn_linear_new(H, h2, NULL));
        m->l3 = (em_nn_linear *)em_module_register_child(&m->base, "l3", (em_module *)em_nn_linear_new(h2, OUT, NULL));
        m->extra = (em_nn_linear *)em_module_register_child(&m->base, "extra", (em_module *)em_nn_linear_new(OUT, OUT, NULL));
        if (extra2)
            m->extra2 = (em_nn_linear *)em_module_register_child(&m->base, "extra2",
                                                                 (em_module *)em_nn_linear_new(OUT, OUT, NULL));
    } else {
        m->a = (em_nn_linear *)em_module_register_child(&m->base, "a", (em_module *)em_nn_linear_new(ABC, ABC, NULL));
        m->b = (em_nn_linear *)em_module_register_child(&m->base, "b", (em_module *)em_nn_linear_new(ABC, ABC, NULL));
        m->c = (em_nn_linear *)em_module_register_child(&m->base, "c", (em_module *)em_nn_linear_new(ABC, ABC, NULL));
    }
    return m;
}

static int in_dim(const net *m) { return m->kind == MODEL_MLP ? IN : ABC; }
static int out_dim(const net *m) { return m->kind == MODEL_MLP ? OUT : ABC; }

/* MLP: l3(tanh(l2(tanh(l1 x)))), then extra when use_extra.
 * ABC: b(tanh(a x) + tanh(c x)): gradients arrive b, then c and a. */
static em_tensor *forward(net *m, em_tensor *x, bool use_extra)
{
    if (m->kind == MODEL_ABC)
        return em_nn_linear_forward(m->b, em_add(em_tanh(em_nn_linear_forward(m->a, x)),
                                                 em_tanh(em_nn_linear_forward(m->c, x))));
    em_tensor *h = em_tanh(em_nn_linear_forward(m->l1, x));
    h = em_tanh(em_nn_linear_forward(m->l2, h));
    em_tensor *y = em_nn_linear_forward(m->l3, h);
    return use_extra ? em_nn_linear_forward(m->extra, y) : y;
}

static em_optimizer *make_opt(net *m, bool adamw)
{
    em_named_tensors ps = em_module_named_parameters(&m->base);
    em_tensor **p = malloc(sizeof *p * (size_t)ps.n);
    for (int i = 0; i < ps.n; i++) p[i] = ps.items[i].tensor;
    em_optimizer *o = adamw ? em_adamw_new(p, ps.n, &(em_adamw_opts){.lr = 1e-2, .weight_decay = 1e-2})
                            : em_sgd_new(p, ps.n, &(em_sgd_opts){.lr = 0.05, .momentum = 0.9});
    free(p);
    em_named_tensors_free(&ps);
    return o;
}

/* max over parameters of max|a-b| / max|b|; exact copies give 0 */
static double param_rel_err(net *got, net *ref, char *worst, size_t cap)
{
    em_named_tensors a = em_module_named_parameters(&got->base), b = em_module_named_parameters(&ref->base);
    double w = a.n == b.n ? 0 : INFINITY;
    for (int i = 0; i < a.n && i < b.n; i++) {
        const float *x = em_data_ptr(a.items[i].tensor), *y = em_data_ptr(b.items[i].tensor);
        double diff = 0, mag = 0;
        for (int64_t k = 0; k < em_numel(b.items[i].tensor); k++) {
            diff = fmax(diff, fabs((double)x[k] - (double)y[k]));
            mag = fmax(mag, fabs((double)y[k]));
        }
        double r = diff / (mag > 0 ? mag : 1);
        if (r > w || isnan(diff)) {
            w = isnan(diff) ? INFINITY : r;
            snprintf(worst, cap, "%s", a.items[i].name);
        }
    }
    em_named_tensors_free(&a);
    em_named_tensors_free(&b);
    return w;
}

/* true when t (contiguous f32) is bitwise the same on every rank */
static bool same_on_every_rank(em_process_group *pg, em_tensor *t)
{
    bool same = true;
    EM_SCOPE {
        em_tensor *hi = em_clone(t), *lo = em_clone(t);
        CHECK(em_pg_all_reduce(pg, hi, EM_RED_MAX) == EM_OK, "%s", em_last_error());
        CHECK(em_pg_all_reduce(pg, lo, EM_RED_MIN) == EM_OK, "%s", em_last_error());
        same = memcmp(em_data_ptr(hi), em_data_ptr(lo), sizeof(float) * (size_t)em_numel(t)) == 0 &&
               memcmp(em_data_ptr(hi), em_data_ptr(t), sizeof(float) * (size_t)em_numel(t)) == 0;
    }
    return same;
}

/* ---- the parity harness ------------------------------------------------------------- */
enum { EXTRA_NONE, EXTRA_ODD_RANKS, EXTRA_ALL };

typedef struct cfg {
    const char *name;
    int model;
    bool adamw;
    double first_cap_mb, cap_mb;   /* 0: defaults */
    int steps, accum;              /* accum: K micro-batches per optimizer step */
    int extra;                     /* who runs the `extra` layer */
    bool set_to_none;              /* zero_grad drops the gradients */
    int rows;                      /* rows per rank per micro-batch */
    /* called after em_ddp_new (step -1) and after each synced finish_backward */
    void (*inspect)(em_ddp *d, net *m, int step);
} cfg;

static bool uses_extra(const cfg *c, int rank)
{
    return c->extra == EXTRA_ALL || (c->extra == EXTRA_ODD_RANKS && rank % 2 == 1);
}

static void run_parity(em_process_group *pg, const cfg *c)
{
    int W = g_world, K = c->accum ? c->accum : 1;
    int64_t N = c->rows ? c->rows : 5;
    net *ref = net_new(c->model, 42, H, false);
    net *dm = net_new(c->model, 42 + 1000 * (uint64_t)g_rank, H, false);   /* rank 0's init must win */
    CHECK(em_module_flatten(&ref->base) == EM_OK, "%s", em_last_error());
    em_ddp *d = NULL;
    em_status st = em_ddp_new(&dm->base, pg, &(em_ddp_opts){.first_bucket_cap_mb = c->first_cap_mb,
                                                           .bucket_cap_mb = c->cap_mb}, &d);
    CHECK(st == EM_OK && d, "%s: em_ddp_new: %s", c->name, em_last_error());
    if (!d) return;
    char worst[128] = "";
    CHECK(param_rel_err(dm, ref, worst, sizeof worst) == 0, "%s: parameters not broadcast from rank 0 (%s)", c->name, worst);
    if (c->inspect) c->inspect(d, dm, -1);
    em_optimizer *od = make_opt(dm, c->adamw), *orf = make_opt(ref, c->adamw);
    int ind = in_dim(dm), outd = out_dim(dm);
    for (int s = 0; s < c->steps; s++) {
        int64_t rows = (int64_t)K * W * N;
        EM_SCOPE {
            em_tensor *x = rand_tensor(rows, ind, 1000 + (uint64_t)s), *y = rand_tensor(rows, outd, 2000 + (uint64_t)s);
            /* DDP: micro-batch k of rank r is rows [(k W + r) N, +N) */
            for (int k = 0; k < K; k++) {
                bool sync = k == K - 1;
                em_ddp_set_require_sync(d, sync);
                EM_SCOPE {
                    int64_t r0 = ((int64_t)k * W + g_rank) * N;
                    em_tensor *loss = em_mse_loss(forward(dm, em_narrow(x, 0, r0, N), uses_extra(c, g_rank)),
                                                  em_narrow(y, 0, r0, N), EM_REDUCE_MEAN);
                    if (K > 1) loss = em_mul_scalar(loss, 1.0 / K);
                    em_backward(loss);
                }
                CHECK(em_ddp_finish_backward(d) == EM_OK, "%s: finish: %s", c->name, em_last_error());
                if (!sync && W > 1 && s == 0 && k == 0) {
                    /* no_sync: the gradients are still this rank's own */
                    em_tensor *g = em_grad(dm->l1 ? dm->l1->weight : dm->a->weight);
                    CHECK(!same_on_every_rank(pg, g), "%s: no_sync gradients were reduced", c->name);
                }
            }
            if (c->inspect) c->inspect(d, dm, s);
            CHECK(em_optimizer_step(od) == EM_OK, "%s", em_last_error());
            em_optimizer_zero_grad_ex(od, c->set_to_none);
            /* the reference: one process, the whole batch */
            EM_SCOPE {
                em_tensor *loss;
                if (c->extra == EXTRA_ODD_RANKS) {
                    /* each rank's forward differs: sum of the shards' mean losses / (W K) */
                    loss = NULL;
                    for (int k = 0; k < K; k++)
                        for (int r = 0; r < W; r++) {
                            int64_t r0 = ((int64_t)k * W + r) * N;
                            em_tensor *l = em_mse_loss(forward(ref, em_narrow(x, 0, r0, N), uses_extra(c, r)),
                                                       em_narrow(y, 0, r0, N), EM_REDUCE_MEAN);
                            loss = loss ? em_add(loss, l) : l;
                        }
                    loss = em_mul_scalar(loss, 1.0 / (W * K));
                } else {
                    loss = em_mse_loss(forward(ref, x, uses_extra(c, 0)), y, EM_REDUCE_MEAN);
                }
                em_backward(loss);
            }
            CHECK(em_optimizer_step(orf) == EM_OK, "%s", em_last_error());
            em_optimizer_zero_grad_ex(orf, c->set_to_none);
        }
    }
    double err = param_rel_err(dm, ref, worst, sizeof worst);
    CHECK(err <= 1e-6, "%s: after %d steps the DDP parameters differ from one process on the whole batch: "
          "%g relative (%s)", c->name, c->steps, err, worst);
    CHECK(same_on_every_rank(pg, em_module_flat_params(&dm->base, EM_F32)), "%s: replicas differ", c->name);
    pass("%s: %d ranks, %d steps, %d buckets, max relative error %.2g", c->name, W, c->steps,
         em_ddp_buckets(d, NULL, 0), err);
    em_optimizer_free(od);
    em_optimizer_free(orf);
    em_ddp_free(d);
    em_module_free(&dm->base);
    em_module_free(&ref->base);
}

/* ---- bucket maps ---------------------------------------------------------------------- */
/* The assignment rule, written again independently: parameter sizes (bytes)
 * in the walk order; a bucket closes once it holds >= its limit. Returns the
 * number of buckets; sizes[b] gets each bucket's parameter count. */
static int expected_buckets(const int64_t *bytes, int n, double first, double cap, int *counts)
{
    int nb = 0;
    double acc = 0;
    bool open = false;
    for (int i = 0; i < n; i++) {
        if (!open) counts[nb++] = 0, acc = 0, open = true;
        counts[nb - 1]++;
        acc += (double)bytes[i];
        if (acc >= (nb == 1 ? first : cap)) open = false;
    }
    return nb;
}

static void check_map(em_ddp *d, net *m, const int *walk, int n, double first_mb, double cap_mb, const char *when)
{
    em_named_tensors ps = em_module_named_parameters(&m->base);
    int64_t bytes[32], offs[32], numels[32], off = 0;
    for (int i = 0; i < ps.n && i < 32; i++) numels[i] = em_numel(ps.items[i].tensor), offs[i] = off, off += numels[i];
    for (int i = 0; i < n; i++) bytes[i] = 4 * numels[walk[i]];
    int counts[32];
    int nb = expected_buckets(bytes, n, first_mb * 1048576, cap_mb * 1048576, counts);
    em_ddp_bucket_info info[32];
    int got = em_ddp_buckets(d, info, 32);
    CHECK(got == nb, "%s: %d buckets, expected %d", when, got, nb);
    int pos = 0;
    for (int b = 0; b < got && b < nb; b++) {
        int64_t lo = INT64_MAX, total = 0;
        for (int k = 0; k < counts[b]; k++) {
            int i = walk[pos++];
            lo = offs[i] < lo ? offs[i] : lo;
            total += numels[i];
        }
        CHECK(info[b].index == b && info[b].n_params == counts[b] && info[b].numel == total && info[b].offset == lo,
              "%s: bucket %d is (%d params, offset %lld, %lld elements), expected (%d, %lld, %lld)", when, b,
              info[b].n_params, (long long)info[b].offset, (long long)info[b].numel, counts[b], (long long)lo,
              (long long)total);
    }
    em_named_tensors_free(&ps);
}

/* MLP, caps 256 B then 1 KiB: params l1.w l1.b l2.w l2.b l3.w l3.b extra.w extra.b */
static const double MAP_FIRST = 256.0 / 1048576, MAP_CAP = 1024.0 / 1048576;
static void inspect_mlp_map(em_ddp *d, net *m, int step)
{
    const int reverse[] = {7, 6, 5, 4, 3, 2, 1, 0};
    check_map(d, m, reverse, 8, MAP_FIRST, MAP_CAP, step < 0 ? "initial map" : "rebuilt map");
    CHECK(em__ddp_rebuilt(d) == (step >= 0), "rebuilt %d at step %d", em__ddp_rebuilt(d), step);
    if (step < 0) return;
    em_ddp_bucket_info info[16];
    int nb = em_ddp_buckets(d, info, 16);
    for (int b = 0; b < nb; b++) {
        CHECK(em__ddp_bucket_runs(d, b) == 1, "bucket %d has %d runs", b, em__ddp_bucket_runs(d, b));
        CHECK(info[b].ready_ms >= 0 && info[b].start_ms >= info[b].ready_ms - 1e-9 && info[b].end_ms >= info[b].start_ms,
              "bucket %d timeline ready %g start %g end %g", b, info[b].ready_ms, info[b].start_ms, info[b].end_ms);
        if (b) CHECK(info[b].start_ms >= info[b - 1].start_ms, "bucket %d launched before bucket %d", b, b - 1);
    }
}

/* ABC, three 8x8 layers (288 B each), caps 288 B then 576 B. Registration
 * a|b|c. Initially (reverse) [c], [b a]. Observed: b, then c, a (c's ops are
 * newer than a's) -> [b], [c a]: a and c are not adjacent, so 2 runs. */
static const double ABC_FIRST = 288.0 / 1048576, ABC_CAP = 576.0 / 1048576;
static void inspect_abc(em_ddp *d, net *m, int step)
{
    if (step < 0) {
        const int reverse[] = {5, 4, 3, 2, 1, 0};
        check_map(d, m, reverse, 6, ABC_FIRST, ABC_CAP, "ABC initial map");
        CHECK(em__ddp_bucket_runs(d, 0) == 1 && em__ddp_bucket_runs(d, 1) == 1, "initial runs %d %d",
              em__ddp_bucket_runs(d, 0), em__ddp_bucket_runs(d, 1));
        return;
    }
    em_ddp_bucket_info info[4];
    int nb = em_ddp_buckets(d, info, 4);
    CHECK(nb == 2, "ABC rebuilt: %d buckets", nb);
    if (nb != 2) return;
    CHECK(info[0].offset == 72 && info[0].numel == 72 && info[0].n_params == 2, "ABC bucket 0: offset %lld numel %lld",
          (long long)info[0].offset, (long long)info[0].numel);
    CHECK(info[1].offset == 0 && info[1].numel == 144 && info[1].n_params == 4 && em__ddp_bucket_runs(d, 1) == 2,
          "ABC bucket 1: offset %lld numel %lld runs %d", (long long)info[1].offset, (long long)info[1].numel,
          em__ddp_bucket_runs(d, 1));
}

/* default caps: everything in one bucket */
static void inspect_one_bucket(em_ddp *d, net *m, int step)
{
    em_ddp_bucket_info info[4];
    int nb = em_ddp_buckets(d, info, 4);
    int64_t total = em_module_num_parameters(&m->base, true);
    CHECK(nb == 1 && info[0].offset == 0 && info[0].numel == total, "%d buckets (first %lld elements of %lld)", nb,
          nb ? (long long)info[0].numel : 0LL, (long long)total);
}

/* Default caps on ten 1024x1024 layers (4 MiB each): bucket 0 holds the last
 * layer (>= 1 MiB), bucket 1 the next seven (>= 25 MiB), bucket 2 the rest. */
static void test_default_caps(em_process_group *pg)
{
    net *m = calloc(1, sizeof *m);
    em_module_init(&m->base, "Wide", NULL);
    em_set_seed(5);
    for (int i = 0; i < 10; i++) {
        char name[8];
        snprintf(name, sizeof name, "%d", i);
        em_module_register_child(&m->base, name, (em_module *)em_nn_linear_new(1024, 1024, NULL));
    }
    em_ddp *d = NULL;
    CHECK(em_ddp_new(&m->base, pg, NULL, &d) == EM_OK, "%s", em_last_error());
    int reverse[20];
    for (int i = 0; i < 20; i++) reverse[i] = 19 - i;
    check_map(d, m, reverse, 20, 1.0, 25.0, "default caps");
    em_ddp_bucket_info info[4];
    CHECK(em_ddp_buckets(d, info, 4) == 3 && info[0].n_params == 2 && info[1].n_params == 14 && info[2].n_params == 4,
          "default caps: %d buckets", em_ddp_buckets(d, info, 4));
    em_ddp_free(d);
    em_module_free(&m->base);
    pass("default caps: 1 MiB first bucket, then 25 MiB, in reverse registration order");
}

/* ---- models that differ -------------------------------------------------------------------- */
static void test_mismatch(em_process_group *pg)
{
    if (g_world == 1) return;
    char want[256];
    for (int variant = 0; variant < 2; variant++) {
        bool odd = g_rank == g_world - 1;
        net *m = variant == 0 ? net_new(MODEL_MLP, 7, odd ? H + 1 : H, false) : net_new(MODEL_MLP, 7, H, odd);
        em_ddp *d = NULL;
        em_status st = em_ddp_new(&m->base, pg, NULL, &d);
        const char *msg = em_last_error();
        CHECK(st == EM_ERR_INVALID && !d, "variant %d: status %s", variant, em_status_name(st));
        if (variant == 0)
            snprintf(want, sizeof want, "the first difference is parameter 2: \"l2.weight\" float32[%d,%d] on rank %d, "
                     "\"l2.weight\" float32[%d,%d] on rank 0", H + 1, H, g_world - 1, H, H);
        else
            snprintf(want, sizeof want, "rank %d has 10 parameters (%d parameter elements) but rank 0 has 8", g_world - 1,
                     (IN * H + H) + (H * H + H) + (H * OUT + OUT) + 2 * (OUT * OUT + OUT));
        CHECK(strstr(msg, want) && strstr(msg, "same model on every rank"), "variant %d: message \"%s\" lacks \"%s\"",
              variant, msg, want);
        if (variant == 1)
            CHECK(strstr(msg, "\"extra2.weight\" float32[4,4]"), "message \"%s\" does not name extra2.weight", msg);
        if (g_rank == 0) printf("  (message: %s)\n", msg);
        em_module_free(&m->base);
    }
    /* the group is still usable */
    EM_SCOPE {
        em_tensor *t = em_scalar(1, EM_F32, EM_CPU);
        CHECK(em_pg_all_reduce(pg, t, EM_RED_SUM) == EM_OK && em_item(t) == g_world, "group unusable after a mismatch");
    }
    pass("different models: EM_ERR_INVALID naming the rank and the first differing parameter");
}

/* ---- misuse -------------------------------------------------------------------------------- */
static char misuse_msg[1024];
static void keep_msg(const char *m, void *user) { (void)user; snprintf(misuse_msg, sizeof misuse_msg, "%s", m); }

static void test_misuse(em_process_group *pg)
{
    net *m = net_new(MODEL_MLP, 3, H, false);
    em_ddp *d = NULL;
    CHECK(em_ddp_new(&m->base, pg, NULL, &d) == EM_OK, "%s", em_last_error());
    em_misuse_handler old = em_set_misuse_handler(keep_msg, NULL);
    EM_SCOPE {
        em_tensor *x = rand_tensor(3, IN, 5), *y = rand_tensor(3, OUT, 6);
        em_backward(em_mse_loss(forward(m, x, false), y, EM_REDUCE_MEAN));
        misuse_msg[0] = 0;
        em_ddp_set_require_sync(d, false);
        CHECK(strstr(misuse_msg, "between a synced em_backward and em_ddp_finish_backward"), "got \"%s\"", misuse_msg);
        CHECK(em__ddp_require_sync(d), "require_sync changed mid-step");
        misuse_msg[0] = 0;
        em_backward(em_mse_loss(forward(m, x, false), y, EM_REDUCE_MEAN));   /* forgot finish_backward */
        CHECK(strstr(misuse_msg, "received a gradient twice in one synced step"), "got \"%s\"", misuse_msg);
    }
    em_set_misuse_handler(old, NULL);
    CHECK(em_ddp_finish_backward(d) == EM_OK, "%s", em_last_error());
    em_ddp_free(d);
    em_module_free(&m->base);
    pass("misuse: no_sync switched mid-step, a second backward without finish_backward");
}

/* em_ddp_free removes the hooks: the model trains alone afterwards */
static void test_free_unhooks(em_process_group *pg)
{
    net *m = net_new(MODEL_MLP, 9, H, false);
    em_ddp *d = NULL;
    CHECK(em_ddp_new(&m->base, pg, NULL, &d) == EM_OK, "%s", em_last_error());
    em_ddp_free(d);
    EM_SCOPE {
        em_tensor *x = rand_tensor(3, IN, 5), *y = rand_tensor(3, OUT, 6);
        em_backward(em_mse_loss(forward(m, x, false), y, EM_REDUCE_MEAN));
        em_backward(em_mse_loss(forward(m, x, false), y, EM_REDUCE_MEAN));
    }
    em_module_free(&m->base);
    pass("em_ddp_free unhooks the parameters");
}

/* Buffers (running statistics) follow rank 0: at construction and at every
 * em_ddp_sync_buffers; keep_local_buffers leaves each rank's own. */
static void test_buffers(em_process_group *pg)
{
    int failed = g_failed;
    for (int keep = 0; keep < 2; keep++) {
        net *m = net_new(MODEL_MLP, 12, H, false);
        em_tensor *stats = em_module_register_buffer(&m->base, "running_mean",
                                                     em_full(EM_SHAPE(5), 10.0 + g_rank, EM_F32, EM_CPU), false);
        em_release(stats);   /* made outside any scope: ours to release; the module holds its own reference */
        em_ddp *d = NULL;
        CHECK(em_ddp_new(&m->base, pg, &(em_ddp_opts){.keep_local_buffers = keep}, &d) == EM_OK, "%s", em_last_error());
        CHECK(em_get(stats, (int64_t[]){4}) == 10.0, "construction: rank %d has %g", g_rank, em_get(stats, (int64_t[]){4}));
        EM_NO_GRAD { em_fill_(stats, 100.0 + g_rank); }   /* each rank's forward updated its statistics */
        CHECK(em_ddp_sync_buffers(d) == EM_OK, "%s", em_last_error());
        double want = keep ? 100.0 + g_rank : 100.0;
        for (int64_t i = 0; i < 5; i++)
            CHECK(em_get(stats, &i) == want, "keep_local_buffers=%d: rank %d has %g, want %g", keep, g_rank,
                  em_get(stats, &i), want);
        em_ddp_free(d);
        em_module_free(&m->base);
    }
    if (g_failed == failed) pass("buffers: broadcast from rank 0 at construction and by em_ddp_sync_buffers; kept with keep_local_buffers");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    em_process_group *pg = rank_join(60);
    if (!pg) return 1;

    const cfg cases[] = {
        {.name = "SGD, default caps (one bucket)", .model = MODEL_MLP, .steps = 4, .inspect = inspect_one_bucket},
        {.name = "AdamW, small caps (many buckets), map and rebuild", .model = MODEL_MLP, .adamw = true,
         .first_cap_mb = MAP_FIRST, .cap_mb = MAP_CAP, .steps = 4, .extra = EXTRA_ALL, .inspect = inspect_mlp_map},
        {.name = "no_sync accumulation over 3 micro-batches = one big batch", .model = MODEL_MLP, .adamw = true,
         .first_cap_mb = MAP_FIRST, .cap_mb = MAP_CAP, .steps = 3, .accum = 3},
        {.name = "`extra` used on odd ranks only, set_to_none zero_grad", .model = MODEL_MLP,
         .first_cap_mb = MAP_FIRST, .cap_mb = MAP_CAP, .steps = 4, .extra = EXTRA_ODD_RANKS, .set_to_none = true},
        {.name = "`extra` used on odd ranks only, AdamW, accumulation", .model = MODEL_MLP, .adamw = true,
         .first_cap_mb = MAP_FIRST, .cap_mb = MAP_CAP, .steps = 3, .accum = 2, .extra = EXTRA_ODD_RANKS},
        {.name = "`extra` unused everywhere", .model = MODEL_MLP, .first_cap_mb = MAP_FIRST, .cap_mb = MAP_CAP,
         .steps = 3, .extra = EXTRA_NONE},
        {.name = "rebuild groups non-adjacent parameters (2 runs)", .model = MODEL_ABC, .adamw = true,
         .first_cap_mb = ABC_FIRST, .cap_mb = ABC_CAP, .steps = 4, .inspect = inspect_abc},
        {.name = "bigger batch", .model = MODEL_MLP, .adamw = true, .first_cap_mb = MAP_FIRST, .cap_mb = MAP_CAP,
         .steps = 3, .rows = 64},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_parity(pg, &cases[i]);
    test_default_caps(pg);
    test_mismatch(pg);
    test_misuse(pg);
    test_free_unhooks(pg);
    test_buffers(pg);

    rank_verdict(pg);
    em_pg_free(pg);
    return g_failed ? 1 : 0;
}
