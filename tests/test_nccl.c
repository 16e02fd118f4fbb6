/* The `cuda` suite: the process group's NCCL backend (distributed/pg/pg_nccl.c)
 * with real NCCL calls, every result compared with a value computed on the
 * CPU here.
 *
 * Run as a world of one (no launcher: a one-rank NCCL communicator, no MPI)
 * or as every rank of mpirun -np N, rank r on cuda:<local rank>. Inputs
 * depend on the rank, so the expected values (sums, maxima, the gathered
 * rows in rank order, the scattered slices) differ between ranks and worlds.
 *   - all_reduce sum / avg / max / min over f32, f64, bf16, i64, bool; its
 *     input made by kernels queued just before the call (64 MiB, so a
 *     collective not ordered after them would read stale data), its result
 *     read by a kernel queued right after;
 *   - broadcast from the last rank; all_gather with equal and with different
 *     dim-0 sizes per rank, and of a 0-d tensor; reduce_scatter (sum, avg);
 *   - the async all-reduce, waited in reverse order;
 *   - routing: every CUDA collective goes through NCCL (em__pg_nccl_count),
 *     CPU tensors never do;
 *   - DDP on CUDA: bucketed (several buckets, and the rebuild after the
 *     first step), the gradients equal those of the same model without DDP
 *     on the whole batch, over two steps;
 *   - the Accelerator: the prepared model and each batch of a prepared
 *     loader on cuda:<local rank>, backward through it.
 * Exits 77 (skipped) without a GPU, in a build without NCCL, and when a node
 * has fewer GPUs than ranks: NCCL cannot put two ranks of one communicator on
 * one GPU ("Duplicate GPU detected"), so the lent one-GPU machine runs the
 * world of one only.
 *
 * EMBER_NCCL_SELFTEST=1 runs the same cases with the CPU in the GPU's place
 * (through MPI, without the NCCL routing checks): it checks the harness and
 * its expected values on a machine without a GPU.
 * Plain C, no Check: Check forks, which neither a CUDA context nor MPI survives.
 * One PASS line per case on rank 0; exit 1 when a check failed on any rank.
 */
#include "ember.h"
#include "distributed/distributed.h"
#include "distributed/pg/pg_internal.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rank_check.h"

static em_device g_dev;
static bool g_self;   /* EMBER_NCCL_SELFTEST=1: the CPU in the GPU's place (checks the harness; no NCCL) */

/* ---- tensors from formulas, and their values back -------------------------------- */
typedef double (*fill_fn)(int64_t i, int rank);

/* f(i, rank) for each element, as dt on dev (through f64 on the CPU). */
static em_tensor *make(em_device dev, em_dtype dt, int nd, const int64_t *shape, fill_fn f, int rank)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = f(i, rank);
    em_tensor *t = em_from_data(v, nd, shape, EM_F64);
    free(v);
    return em_to(em_to_dtype(t, dt), dev);
}

/* t's values as doubles (malloc'd; the caller frees). */
static double *values(em_tensor *t)
{
    em_tensor *h = em_contiguous(em_to_dtype(em_to(t, EM_CPU), EM_F64));
    int64_t n = em_numel(h);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (n) memcpy(v, em_data_ptr(h), sizeof(double) * (size_t)n);
    return v;
}

/* Max |got - want| / (|want| + 1) over n; reports the first bad element. */
static double compare(const char *what, em_tensor *t, const double *want, int64_t n, double tol)
{
    CHECK(em_numel(t) == n, "%s: %lld elements, want %lld", what, (long long)em_numel(t), (long long)n);
    if (em_numel(t) != n) return INFINITY;
    double *got = values(t), worst = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(got[i] - want[i]) / (fabs(want[i]) + 1);
        if (!(e <= worst)) worst = e;
        if (bad < 0 && !(e <= tol)) bad = i;
    }
    CHECK(bad < 0, "%s: element %lld is %.9g, want %.9g (max rel err %.3g)", what, (long long)bad,
          bad >= 0 ? got[bad] : 0.0, bad >= 0 ? want[bad] : 0.0, worst);
    free(got);
    return worst;
}

/* ---- formulas: small integers, exact in every dtype used ---------------------------- */
static double f_mod7(int64_t i, int r) { return (double)(i % 7) + r; }
static double f_mod5_neg(int64_t i, int r) { return (double)((i * 3 + r * 5) % 11) - 5; }
static double f_bool(int64_t i, int r) { return (double)(((i + r) % 3) == 0); }
static double f_rows(int64_t i, int r) { return 16.0 * r + (double)(i % 16); }   /* exact in bf16 up to 8 ranks */
static double f_zero(int64_t i, int r) { (void)i; (void)r; return 0; }

/* ---- 1. all_reduce ---------------------------------------------------------------- */
static void test_all_reduce(em_process_group *pg)
{
    uint64_t c0 = em__pg_nccl_count(pg);
    int W = g_world;
    EM_SCOPE {
        /* f32 sum, 16 Mi elements: made by kernels queued just before, read by one right after */
        int64_t n = 1 << 24;
        em_tensor *x = make(g_dev, EM_F32, 1, &n, f_zero, g_rank);
        em_tensor *one = em_scalar(1.0, EM_F32, g_dev);
        for (int k = 0; k < 4; k++) x = em_add(x, one);              /* 4 */
        x = em_add(x, make(g_dev, EM_F32, 1, &n, f_mod7, g_rank));  /* (i % 7) + r + 4 */
        CHECK_OK(em_pg_all_reduce(pg, x, EM_RED_SUM));
        em_tensor *y = em_mul(x, em_scalar(2.0, EM_F32, g_dev));
        double *want = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) want[i] = 2.0 * (W * (double)(i % 7 + 4) + W * (W - 1) / 2.0);
        compare("all_reduce sum f32 (16Mi, then x2)", y, want, n, 0);
        free(want);

        /* avg f32 and f64, max and min i64, sum bf16, max/min bool */
        int64_t m = 1001;
        struct { em_dtype dt; em_reduce_op op; fill_fn f; double tol; const char *name; } cases[] = {
            {EM_F32, EM_RED_AVG, f_mod7, 1e-7, "avg f32"},
            {EM_F64, EM_RED_AVG, f_mod7, 1e-15, "avg f64"},
            {EM_F64, EM_RED_SUM, f_mod5_neg, 0, "sum f64"},
            {EM_I64, EM_RED_MAX, f_mod5_neg, 0, "max i64"},
            {EM_I64, EM_RED_MIN, f_mod5_neg, 0, "min i64"},
            {EM_I32, EM_RED_SUM, f_mod5_neg, 0, "sum i32"},
            {EM_BF16, EM_RED_SUM, f_mod7, 0, "sum bf16"},
            {EM_F16, EM_RED_MAX, f_mod5_neg, 0, "max f16"},
            {EM_BOOL, EM_RED_MAX, f_bool, 0, "max (or) bool"},
            {EM_BOOL, EM_RED_MIN, f_bool, 0, "min (and) bool"},
        };
        double *w = malloc(sizeof(double) * (size_t)m);
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            em_tensor *t = make(g_dev, cases[c].dt, 1, &m, cases[c].f, g_rank);
            CHECK_OK(em_pg_all_reduce(pg, t, cases[c].op));
            for (int64_t i = 0; i < m; i++) {
                double acc = cases[c].op == EM_RED_MAX ? -INFINITY : cases[c].op == EM_RED_MIN ? INFINITY : 0;
                for (int q = 0; q < W; q++) {
                    double v = cases[c].f(i, q);
                    acc = cases[c].op == EM_RED_MAX ? fmax(acc, v) : cases[c].op == EM_RED_MIN ? fmin(acc, v) : acc + v;
                }
                w[i] = cases[c].op == EM_RED_AVG ? acc / W : acc;
            }
            char what[64];
            snprintf(what, sizeof what, "all_reduce %s", cases[c].name);
            compare(what, t, w, m, cases[c].tol);
        }
        free(w);
        /* a 0-d tensor, and an empty one */
        em_tensor *s = em_scalar(g_rank + 0.5, EM_F32, g_dev);
        CHECK_OK(em_pg_all_reduce(pg, s, EM_RED_SUM));
        double ws = W * W / 2.0;
        compare("all_reduce of a 0-d tensor", s, &ws, 1, 0);
        em_tensor *e = em_empty(1, (int64_t[]){0}, EM_F32, g_dev);
        CHECK_OK(em_pg_all_reduce(pg, e, EM_RED_SUM));
    }
    uint64_t used = em__pg_nccl_count(pg) - c0;
    CHECK(g_self || used == 13, "%llu collectives reached NCCL, want 13", (unsigned long long)used);
    pass("all_reduce on %s: sum/avg/max/min over f32, f64, f16, bf16, i64, i32, bool (world %d)",
         em_device_str(g_dev, (char[16]){0}), W);
}

/* ---- 2. broadcast, all_gather, reduce_scatter ---------------------------------------- */
static void test_broadcast(em_process_group *pg)
{
    int root = g_world - 1;
    EM_SCOPE {
        int64_t shape[2] = {33, 65};
        em_tensor *t = make(g_dev, EM_F32, 2, shape, f_rows, g_rank);
        t = em_sub(t, em_scalar(1.0, EM_F32, g_dev));   /* a kernel right before */
        CHECK_OK(em_pg_broadcast(pg, t, root));
        double *w = malloc(sizeof(double) * 33 * 65);
        for (int64_t i = 0; i < 33 * 65; i++) w[i] = f_rows(i, root) - 1;
        compare("broadcast f32 from the last rank", t, w, 33 * 65, 0);
        free(w);
        int64_t k = 17;
        em_tensor *b = make(g_dev, EM_I64, 1, &k, f_rows, g_rank);
        CHECK_OK(em_pg_broadcast(pg, b, 0));
        double wb[17];
        for (int64_t i = 0; i < 17; i++) wb[i] = f_rows(i, 0);
        compare("broadcast i64 from rank 0", b, wb, 17, 0);
    }
    pass("broadcast (from rank %d and from rank 0)", root);
}

/* Every rank's rows(q) x cols block of f_rows, gathered in rank order. */
static void check_gather(em_process_group *pg, int64_t (*rows)(int q), int64_t cols, em_dtype dt, const char *what)
{
    EM_SCOPE {
        int64_t mine[2] = {rows(g_rank), cols};
        em_tensor *t = make(g_dev, dt, 2, mine, f_rows, g_rank);
        t = em_add(t, em_scalar(0.0, dt, g_dev));   /* a kernel right before */
        em_tensor *out = NULL;
        CHECK_OK(em_pg_all_gather(pg, t, &out));
        int64_t total = 0;
        for (int q = 0; q < g_world; q++) total += rows(q);
        if (out) {
            CHECK(out->ndim == 2 && out->shape[0] == total && out->shape[1] == cols && em_device_eq(out->device, g_dev)
                  && out->dtype == dt, "%s: out is %s %s", what, em_dtype_name(out->dtype), em__shape_str(out));
            double *w = malloc(sizeof(double) * (size_t)(total * cols + 1));
            int64_t k = 0;
            for (int q = 0; q < g_world; q++)
                for (int64_t i = 0; i < rows(q) * cols; i++) w[k++] = f_rows(i, q);
            compare(what, em_mul(out, em_scalar(1.0, dt, g_dev)), w, total * cols, 0);
            free(w);
        }
    }
}
static int64_t rows_equal(int q) { (void)q; return 5; }
static int64_t rows_vary(int q) { return q == 1 ? 0 : 2 * q + 1; }   /* 1, 0, 5, 7, ...: rank 1 has none */

static void test_all_gather(em_process_group *pg)
{
    uint64_t c0 = em__pg_nccl_count(pg);
    check_gather(pg, rows_equal, 7, EM_F32, "all_gather f32, 5 rows per rank");
    check_gather(pg, rows_vary, 3, EM_I64, "all_gather i64, different rows per rank");
    check_gather(pg, rows_vary, 9, EM_BF16, "all_gather bf16, different rows per rank");
    EM_SCOPE {
        em_tensor *s = em_scalar(g_rank * 2.0, EM_F64, g_dev), *out = NULL;
        CHECK_OK(em_pg_all_gather(pg, s, &out));
        double w[64];
        for (int q = 0; q < g_world && q < 64; q++) w[q] = q * 2.0;
        if (out) compare("all_gather of a 0-d tensor", out, w, g_world, 0);
    }
    uint64_t used = em__pg_nccl_count(pg) - c0;
    CHECK(g_self || used == 4, "%llu all_gathers reached NCCL, want 4", (unsigned long long)used);
    pass("all_gather: equal and different dim-0 sizes, 0-d");
}

static void test_reduce_scatter(em_process_group *pg)
{
    int W = g_world;
    EM_SCOPE {
        int64_t n = 1000, in_shape[2] = {W * n, 3}, out_shape[2] = {n, 3};
        for (int avg = 0; avg < 2; avg++) {
            em_tensor *in = make(g_dev, EM_F32, 2, in_shape, f_mod7, g_rank);
            in = em_mul(in, em_scalar(2.0, EM_F32, g_dev));   /* a kernel right before */
            em_tensor *out = em_full(2, out_shape, -1.0, EM_F32, g_dev);
            CHECK_OK(em_pg_reduce_scatter(pg, in, out, avg ? EM_RED_AVG : EM_RED_SUM));
            double *w = malloc(sizeof(double) * (size_t)(n * 3));
            for (int64_t i = 0; i < n * 3; i++) {
                double acc = 0;
                for (int q = 0; q < W; q++) acc += 2 * f_mod7(g_rank * n * 3 + i, q);
                w[i] = avg ? acc / W : acc;
            }
            compare(avg ? "reduce_scatter avg f32" : "reduce_scatter sum f32", out, w, n * 3, avg ? 1e-7 : 0);
            free(w);
        }
    }
    pass("reduce_scatter: sum and avg, this rank's slice");
}

/* ---- 3. async -------------------------------------------------------------------------- */
static void test_async(em_process_group *pg)
{
    int W = g_world;
    EM_SCOPE {
        int64_t n = 1 << 20;
        em_tensor *t[3];
        em_work *w[3];
        for (int k = 0; k < 3; k++) {
            t[k] = em_add(make(g_dev, EM_F32, 1, &n, f_mod7, g_rank), em_scalar(k, EM_F32, g_dev));
            w[k] = em_pg_all_reduce_async(pg, t[k], k == 2 ? EM_RED_AVG : EM_RED_SUM);
            CHECK(w[k] != NULL, "async %d: %s", k, em_last_error());
        }
        for (int k = 2; k >= 0; k--)
            if (w[k]) CHECK_OK(em_work_wait(w[k]));
        double *want = malloc(sizeof(double) * (size_t)n);
        for (int k = 0; k < 3; k++) {
            for (int64_t i = 0; i < n; i++) {
                double s = 0;
                for (int q = 0; q < W; q++) s += f_mod7(i, q) + k;
                want[i] = k == 2 ? s / W : s;
            }
            compare("async all_reduce", em_add(t[k], em_scalar(0.0, EM_F32, g_dev)), want, n, k == 2 ? 1e-7 : 0);
        }
        free(want);
    }
    pass("async all_reduce: three in flight, waited in reverse order");
}

/* ---- 4. routing: CPU tensors never reach NCCL ------------------------------------------- */
static void test_routing(em_process_group *pg)
{
    uint64_t c0 = em__pg_nccl_count(pg);
    EM_SCOPE {
        int64_t n = 64;
        em_tensor *t = make(EM_CPU, EM_F32, 1, &n, f_mod7, g_rank), *out = NULL;
        CHECK_OK(em_pg_all_reduce(pg, t, EM_RED_SUM));
        CHECK_OK(em_pg_broadcast(pg, t, 0));
        CHECK_OK(em_pg_all_gather(pg, t, &out));
        CHECK(out && out->device.type == EM_DEVICE_CPU, "a CPU all_gather gave a tensor on another device");
    }
    CHECK(em__pg_nccl_count(pg) == c0, "CPU collectives went through NCCL");
    pass("routing: CPU tensors through MPI (or nothing in a world of one), CUDA tensors through NCCL");
}

/* ---- 5. DDP on CUDA --------------------------------------------------------------------- */
enum { IN = 6, H = 48, OUT = 4, B = 8 };
typedef struct mlp {
    em_module base;
    em_nn_linear *l1, *l2, *l3;
} mlp;

static mlp *mlp_new(uint64_t seed)
{
    mlp *m = calloc(1, sizeof *m);
    em_module_init(&m->base, "MLP", NULL);
    em_set_seed(seed);
    m->l1 = (em_nn_linear *)em_module_register_child(&m->base, "l1", (em_module *)em_nn_linear_new(IN, H, NULL));
    m->l2 = (em_nn_linear *)em_module_register_child(&m->base, "l2", (em_module *)em_nn_linear_new(H, H, NULL));
    m->l3 = (em_nn_linear *)em_module_register_child(&m->base, "l3", (em_module *)em_nn_linear_new(H, OUT, NULL));
    return m;
}

static em_tensor *mlp_loss(mlp *m, em_tensor *x)
{
    em_tensor *h = em_tanh(em_nn_linear_forward(m->l1, x));
    h = em_tanh(em_nn_linear_forward(m->l2, h));
    em_tensor *y = em_nn_linear_forward(m->l3, h);
    return em_mean(em_mul(y, y), 0, NULL, false);
}

static double f_input(int64_t i, int r) { (void)r; return sin(0.37 * (double)i + 0.1); }

static void test_ddp(em_process_group *pg)
{
    mlp *dm = mlp_new(42), *ref = mlp_new(42);
    CHECK_OK(em_module_to(&dm->base, g_dev));
    CHECK_OK(em_module_to(&ref->base, g_dev));
    em_ddp *ddp = NULL;
    uint64_t c0 = em__pg_nccl_count(pg);
    /* tiny buckets (caps of 512 and 1024 bytes): {l3}, {l2}, {l1} */
    CHECK_OK(em_ddp_new(&dm->base, pg, &(em_ddp_opts){.bucket_cap_mb = 0.001, .first_bucket_cap_mb = 0.0005}, &ddp));
    if (!ddp) {
        em_module_free(&dm->base);
        em_module_free(&ref->base);
        return;
    }
    CHECK(g_self || em__pg_nccl_count(pg) > c0, "em_ddp_new broadcast no CUDA parameter through NCCL");
    int nb = em_ddp_buckets(ddp, NULL, 0);
    CHECK(nb >= 3, "%d buckets; the caps should make at least 3", nb);
    for (int step = 0; step < 2; step++) {
        uint64_t c1 = em__pg_nccl_count(pg);
        EM_SCOPE {
            /* the whole batch: world * B rows; this rank's shard: rows [rank*B, rank*B + B) */
            int64_t all[2] = {(int64_t)g_world * B, IN};
            em_tensor *x = make(g_dev, EM_F32, 2, all, f_input, step);
            em_tensor *mine = em_narrow(x, 0, (int64_t)g_rank * B, B);
            em_backward(mlp_loss(dm, mine));
            CHECK_OK(em_ddp_finish_backward(ddp));
            em_backward(mlp_loss(ref, x));
        }
        uint64_t used = em__pg_nccl_count(pg) - c1;
        CHECK(g_self || used >= (uint64_t)nb, "step %d: %llu bucket all-reduces reached NCCL, want >= %d", step,
              (unsigned long long)used, nb);
        em_named_tensors a = em_module_named_parameters(&dm->base), b = em_module_named_parameters(&ref->base);
        for (int i = 0; i < a.n && i < b.n; i++) EM_SCOPE {
            em_tensor *ga = em_grad(a.items[i].tensor), *gb = em_grad(b.items[i].tensor);
            CHECK(ga && gb, "step %d: %s has no gradient", step, a.items[i].name);
            if (ga && gb) {
                CHECK(em_device_eq(ga->device, g_dev), "step %d: %s's gradient left the GPU", step, a.items[i].name);
                double *w = values(gb);
                char what[96];
                snprintf(what, sizeof what, "step %d: DDP gradient of %s", step, a.items[i].name);
                compare(what, ga, w, em_numel(gb), g_world == 1 ? 1e-6 : 2e-6);
                free(w);
            }
        }
        em_named_tensors_free(&a);
        em_named_tensors_free(&b);
        em_module_zero_grad(&dm->base, false);
        em_module_zero_grad(&ref->base, true);
    }
    nb = em_ddp_buckets(ddp, NULL, 0);
    em_ddp_free(ddp);
    em_module_free(&dm->base);
    em_module_free(&ref->base);
    pass("DDP on %s: %d buckets through NCCL, gradients equal to the whole batch without DDP, 2 steps",
         em_device_str(g_dev, (char[16]){0}), nb);
}

/* ---- 6. the Accelerator on the GPU -------------------------------------------------------- */
typedef struct seq_ds {
    em_dataset base;
    int32_t ids[40][IN];
    int64_t label[40];
} seq_ds;
static int64_t seq_len(const em_dataset *ds) { (void)ds; return 40; }
static em_status seq_get(const em_dataset *ds, int64_t i, em_sample *out)
{
    const seq_ds *s = (const seq_ds *)ds;
    *out = (em_sample){.ids = s->ids[i], .type_ids = NULL, .len = IN, .label = s->label[i]};
    return EM_OK;
}
static void seq_free(em_dataset *ds) { (void)ds; }
static const em_dataset_ops seq_ops = {.len = seq_len, .get = seq_get, .free = seq_free};

static void test_accelerator(em_process_group *pg)
{
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){.process_group = pg});
    CHECK(acc != NULL, "em_accelerator_new: %s", em_last_error());
    if (!acc) return;
    em_device want = g_self ? EM_CPU : EM_CUDA(em_pg_local_rank(pg));
    CHECK(em_device_eq(em_accelerator_device(acc), want), "the accelerator chose %s",
          em_device_str(em_accelerator_device(acc), (char[16]){0}));
    static seq_ds ds;
    ds.base.ops = &seq_ops;
    for (int i = 0; i < 40; i++) {
        for (int k = 0; k < IN; k++) ds.ids[i][k] = (i * 7 + k * 3) % 11;
        ds.label[i] = i % 2;
    }
    em_dataloader *dl = NULL;
    CHECK_OK(em_dataloader_new(&ds.base, &(em_dataloader_opts){.batch_size = 4}, &dl));
    mlp *m = mlp_new(7);
    CHECK_OK(em_accelerator_prepare_model(acc, &m->base));
    CHECK_OK(em_accelerator_prepare_dataloader(acc, dl));
    em_named_tensors ps = em_module_named_parameters(&m->base);
    for (int i = 0; i < ps.n; i++)
        CHECK(em_device_eq(ps.items[i].tensor->device, want), "parameter %s is on %s", ps.items[i].name,
              em_device_str(ps.items[i].tensor->device, (char[16]){0}));
    int batches = 0;
    for (em_batch b; em_accelerator_next(acc, dl, &b);) {
        batches++;
        em_tensor *ts[] = {b.input_ids, b.attention_mask, b.token_type_ids, b.labels};
        for (int k = 0; k < 4; k++)
            CHECK(ts[k] && em_device_eq(ts[k]->device, want), "batch %d: tensor %d is not on the GPU", batches, k);
        em_tensor *x = em_to_dtype(b.input_ids, EM_F32);
        CHECK_OK(em_accelerator_backward(acc, mlp_loss(m, x)));
        em_module_zero_grad(&m->base, false);
    }
    CHECK(em_dataloader_status(dl) == EM_OK, "the loader failed: %s", em_last_error());
    CHECK(batches == (int)em_dataloader_len(dl), "%d batches of %lld", batches, (long long)em_dataloader_len(dl));
    for (int i = 0; i < ps.n; i++) {
        em_tensor *g = em_grad(ps.items[i].tensor);
        CHECK(g && em_device_eq(g->device, want), "parameter %s: no gradient on the GPU", ps.items[i].name);
    }
    em_named_tensors_free(&ps);
    em_accelerator_free(acc);
    em_dataloader_free(dl);
    em_module_free(&m->base);
    pass("Accelerator: model and %d batches on %s, backward through it", batches,
         em_device_str(want, (char[16]){0}));
}

int main(void)
{
    unsetenv("EMBER_USE_CPU");   /* the suite's CPU switch; this test is the GPU path */
    em_process_group *pg = rank_join(120);
    if (!pg) return 1;
    const em_backend *cb = em__backend(EM_DEVICE_CUDA);
    int ndev = cb && cb->device_count ? cb->device_count() : 0;
    int local = em_pg_local_rank(pg);
    /* every rank must agree to skip: the largest reason wins */
    g_self = getenv("EMBER_NCCL_SELFTEST") && atoi(getenv("EMBER_NCCL_SELFTEST"));
    int64_t why = g_self ? 0 : !em__pg_nccl_built() ? 3 : ndev == 0 ? 2 : local >= ndev ? 1 : 0;
    if (g_world > 1) EM_SCOPE {
        em_tensor *t = em_from_data(&why, 1, (int64_t[]){1}, EM_I64);
        if (em_pg_all_reduce(pg, t, EM_RED_MAX) == EM_OK) why = *(int64_t *)em_data_ptr(t);
        else why = -1;
    }
    if (why != 0) {
        if (g_rank == 0 || why < 0)
            printf("test_nccl: skipped: %s\n",
                   why == 3 ? "this ember was built without NCCL"
                   : why == 2 ? "no CUDA device"
                   : why == 1 ? "fewer GPUs than ranks on a node (NCCL needs one GPU per rank)"
                              : em_last_error());
        em_pg_free(pg);
        return why < 0 ? 1 : 77;
    }
    g_dev = g_self ? EM_CPU : EM_CUDA(local);
    if (g_rank == 0) printf("test_nccl: world %d, rank 0 on %s (%d GPUs)%s\n", g_world, em_device_str(g_dev, (char[16]){0}),
                            ndev, g_self ? ", self-test: the CPU in the GPU's place" : "");

    test_all_reduce(pg);
    test_broadcast(pg);
    test_all_gather(pg);
    test_reduce_scatter(pg);
    test_async(pg);
    test_routing(pg);
    test_ddp(pg);
    test_accelerator(pg);

    /* every rank's verdict */
    int64_t bad = g_failed;
    if (g_world > 1) EM_SCOPE {
        em_tensor *t = em_from_data(&bad, 1, (int64_t[]){1}, EM_I64);
        if (em_pg_all_reduce(pg, t, EM_RED_MAX) == EM_OK) bad = *(int64_t *)em_data_ptr(t);
    }
    em_pg_free(pg);
    if (g_rank == 0) printf("test_nccl: %s\n", bad ? "FAILED" : "all passed");
    return bad ? 1 : 0;
}
