/* examples/04_ddp.c — tutorial step 4: DDP with 2 processes, and what overlaps with what.
 *
 *     ./build/cli/ember launch --num_processes 2 ./build/examples/04_ddp [trace.json]
 *     (or simply ./build/examples/04_ddp: a world of one, same output shape)
 *
 * Distributed data parallel, without the Accelerator around it so you can see
 * the parts: a process group (distributed/pg/pg.c), and em_ddp
 * (distributed/ddp/ddp.c) wrapping a model. Each rank computes gradients on its
 * own batch; DDP averages them across ranks DURING backward:
 *
 *   - em_ddp_new flattens the model: every gradient becomes a view of ONE flat
 *     buffer, and a BUCKET is a slice of that buffer (about bucket_cap_mb,
 *     the first one smaller), filled in the reverse order of the parameters,
 *     since backward produces the last layer's gradients first;
 *   - it registers a post-accumulate hook on every parameter; when the last
 *     gradient of a bucket has arrived, the hook hands the slice to the
 *     communication thread as an asynchronous all-reduce, and backward goes
 *     on computing the earlier layers meanwhile;
 *   - em_ddp_finish_backward waits for every bucket and divides by the world size.
 *
 * The program prints the bucket map, then writes the last step's timeline as
 * a Chrome trace (open it in chrome://tracing or https://ui.perfetto.dev):
 * one row per rank for backward and each parameter's gradient, one row for
 * the buckets' all-reduces. Times are milliseconds since that rank's
 * backward began. A bucket's "ready" is when its last gradient arrived, its
 * all-reduce span runs from launch to when em_ddp_finish_backward saw it
 * complete (DDP observes the end when it waits, so a bucket that finished
 * early still shows its end at the wait).
 * Exits 1 if the replicas' parameters differ after training.
 */
#include "ember.h"
#include "distributed/distributed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { IN = 128, HID = 512, OUT = 10, BATCH = 64, STEPS = 4, MAX_PARAMS = 16, MAX_BUCKETS = 32 };

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A plain MLP as a module tree: four Linear children, registered by name. */
typedef struct mlp {
    em_module base;
    em_nn_linear *fc[4];
} mlp;

static mlp *mlp_new(void)
{
    static const int64_t sizes[5] = {IN, HID, HID, HID, OUT};
    mlp *m = calloc(1, sizeof *m);
    em_module_init(&m->base, "MLP", NULL);
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "fc%d", i);
        m->fc[i] = (em_nn_linear *)em_module_register_child(&m->base, name,
                                                           (em_module *)em_nn_linear_new(sizes[i], sizes[i + 1], NULL));
    }
    return m;
}

static em_tensor *mlp_forward(mlp *m, em_tensor *x)
{
    for (int i = 0; i < 3; i++) x = em_relu(em_nn_linear_forward(m->fc[i], x));
    return em_nn_linear_forward(m->fc[3], x);
}

/* Our own post-accumulate hook, registered AFTER DDP's, so it runs right
 * after DDP saw the same gradient: it records when each gradient arrived. */
static double grad_at[MAX_PARAMS];
static void note_grad(em_tensor *leaf, void *user)
{
    (void)leaf;
    grad_at[(intptr_t)user] = now_ms();
}

int main(int argc, char **argv)
{
    const char *trace_path = argc > 1 ? argv[1] : "ddp_trace.json";
    em_process_group *pg = NULL;
    if (em_pg_init(NULL, &pg) != EM_OK) {   /* reads the launcher's environment */
        fprintf(stderr, "process group: %s\n", em_last_error());
        return 1;
    }
    int rank = em_pg_rank(pg), world = em_pg_world_size(pg);

    em_set_seed(7 + rank);   /* different initial weights per rank, on purpose: */
    mlp *model = mlp_new();  /* em_ddp_new broadcasts rank 0's to everyone       */
    em_ddp *ddp = NULL;
    if (em_ddp_new(&model->base, pg, &(em_ddp_opts){.bucket_cap_mb = 0.5, .first_bucket_cap_mb = 0.25}, &ddp)) {
        fprintf(stderr, "ddp: %s\n", em_last_error());
        return 1;
    }
    em_named_tensors named = em_module_named_parameters(&model->base);
    em_tensor *params[MAX_PARAMS];
    for (int i = 0; i < named.n; i++) {
        params[i] = named.items[i].tensor;
        em_register_post_accumulate_grad_hook(params[i], note_grad, (void *)(intptr_t)i);
    }
    em_optimizer *opt = em_sgd_new(params, named.n, &(em_sgd_opts){.lr = 0.05, .momentum = 0.9});

    /* Train a few steps on per-rank random data (the first step also lets DDP
     * rebuild its buckets in the order gradients really arrived). */
    double t_bw0 = 0, t_bw1 = 0, t_fin = 0;
    for (int step = 0; step < STEPS; step++) {
        EM_SCOPE {
            em_tensor *x = em_randn(EM_SHAPE(BATCH, IN), EM_F32, EM_CPU);   /* this rank's batch */
            em_tensor *y = em_mul_scalar(em_rand(EM_SHAPE(BATCH), EM_F32, EM_CPU), OUT);
            em_tensor *loss = em_cross_entropy_loss(mlp_forward(model, x), em_to_dtype(y, EM_I64), NULL);
            t_bw0 = now_ms();
            em_backward(loss);                 /* hooks launch bucket all-reduces as they fill */
            t_bw1 = now_ms();
            em_status st = em_ddp_finish_backward(ddp);   /* wait for all, average */
            t_fin = now_ms();
            if (st != EM_OK) fprintf(stderr, "rank %d: %s\n", rank, em_last_error());
            em_optimizer_step(opt);
            em_module_zero_grad(&model->base, false);   /* in place: grads stay views of the flat buffer */
            if (rank == 0) printf("step %d  loss %.4f (rank 0's batch)\n", step, em_item(loss));
        }
    }

    /* ---- the bucket map ------------------------------------------------------- */
    em_ddp_bucket_info bk[MAX_BUCKETS];
    int nb = em_ddp_buckets(ddp, bk, MAX_BUCKETS);
    if (nb > MAX_BUCKETS) nb = MAX_BUCKETS;
    if (rank == 0) {
        em_tensor *flat = em_module_flat_grads(&model->base, EM_F32);
        printf("\n%d processes; flat gradient buffer: %lld floats; %d buckets\n", world,
               (long long)em_numel(flat), nb);
        printf("bucket  params  offset     numel   ready_ms  start_ms  end_ms\n");
        for (int b = 0; b < nb; b++)
            printf("%6d  %6d  %8lld  %8lld  %8.3f  %8.3f  %7.3f\n", bk[b].index, bk[b].n_params,
                   (long long)bk[b].offset, (long long)bk[b].numel, bk[b].ready_ms, bk[b].start_ms, bk[b].end_ms);
        printf("parameter slices of the flat buffer:\n");
        for (int i = 0; i < named.n; i++) {
            int64_t off = (int64_t)((float *)em_data_ptr(em_grad(params[i])) - (float *)em_data_ptr(flat));
            printf("  %-11s [%8lld, %8lld)\n", named.items[i].name, (long long)off,
                   (long long)(off + em_numel(params[i])));
        }
    }

    /* ---- the timeline, gathered on rank 0 --------------------------------------
     * Row layout per rank: backward end, finish end, the first gradient's time
     * (DDP's time zero), each parameter's arrival, then per bucket ready/start/end.
     * All relative to this rank's backward start. */
    int nrow = 3 + named.n + 3 * nb;
    double first = INFINITY;
    for (int i = 0; i < named.n; i++) first = fmin(first, grad_at[i]);
    double row[3 + MAX_PARAMS + 3 * MAX_BUCKETS];
    row[0] = t_bw1 - t_bw0;
    row[1] = t_fin - t_bw0;
    row[2] = first - t_bw0;
    for (int i = 0; i < named.n; i++) row[3 + i] = grad_at[i] - t_bw0;
    for (int b = 0; b < nb; b++) {   /* DDP's times count from the first gradient */
        row[3 + named.n + 3 * b + 0] = bk[b].ready_ms + row[2];
        row[3 + named.n + 3 * b + 1] = bk[b].start_ms + row[2];
        row[3 + named.n + 3 * b + 2] = bk[b].end_ms + row[2];
    }
    int rc = 0;
    EM_SCOPE {
        em_tensor *mine = em_from_data(row, EM_SHAPE(1, nrow), EM_F64), *all = NULL;
        em_status st = em_pg_all_gather(pg, mine, &all);
        /* replicas must agree: the max and min of a parameter checksum across ranks */
        double sum = em_item(em_sum(em_module_flat_params(&model->base, EM_F32), 0, NULL, false));
        em_tensor *hi = em_scalar(sum, EM_F64, EM_CPU), *lo = em_scalar(sum, EM_F64, EM_CPU);
        if (st == EM_OK) st = em_pg_all_reduce(pg, hi, EM_RED_MAX);
        if (st == EM_OK) st = em_pg_all_reduce(pg, lo, EM_RED_MIN);
        if (st != EM_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, em_last_error());
            rc = 1;
        } else if (em_item(hi) != em_item(lo)) {
            fprintf(stderr, "replicas differ: parameter sums %.9g vs %.9g\n", em_item(hi), em_item(lo));
            rc = 1;
        } else if (rank == 0) {
            printf("replicas identical after %d steps (parameter sum %.6f on every rank)\n", STEPS, sum);
            FILE *f = fopen(trace_path, "w");
            if (!f) {
                perror(trace_path);
                rc = 1;
            } else {
                /* Chrome trace format: "X" events with ts/dur in microseconds; pid = rank, tid = row */
                fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
                for (int r = 0; r < world; r++) {
                    const double *v = (const double *)em_data_ptr(all) + (size_t)r * nrow;
                    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},\n", r, r);
                    fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"backward (compute)\"}},\n", r);
                    fprintf(f, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":1,\"args\":{\"name\":\"bucket all-reduce (comm thread)\"}},\n", r);
                    fprintf(f, "{\"ph\":\"X\",\"name\":\"em_backward\",\"pid\":%d,\"tid\":0,\"ts\":0,\"dur\":%.1f},\n", r, 1e3 * v[0]);
                    fprintf(f, "{\"ph\":\"X\",\"name\":\"em_ddp_finish_backward (wait + average)\",\"pid\":%d,\"tid\":0,\"ts\":%.1f,\"dur\":%.1f},\n",
                            r, 1e3 * v[0], 1e3 * (v[1] - v[0]));
                    for (int i = 0; i < named.n; i++)
                        fprintf(f, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"grad %s\",\"pid\":%d,\"tid\":0,\"ts\":%.1f},\n",
                                named.items[i].name, r, 1e3 * v[3 + i]);
                    for (int b = 0; b < nb; b++) {
                        const double *e = v + 3 + named.n + 3 * b;
                        fprintf(f, "{\"ph\":\"i\",\"s\":\"t\",\"name\":\"bucket %d ready\",\"pid\":%d,\"tid\":1,\"ts\":%.1f},\n",
                                b, r, 1e3 * e[0]);
                        fprintf(f, "{\"ph\":\"X\",\"name\":\"all-reduce bucket %d (%lld floats)\",\"pid\":%d,\"tid\":1,\"ts\":%.1f,\"dur\":%.1f},\n",
                                b, (long long)bk[b].numel, r, 1e3 * e[1], 1e3 * (e[2] - e[1]));
                    }
                }
                /* a last event without a trailing comma keeps the JSON strict */
                fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":0,\"args\":{\"sort_index\":0}}\n]}\n");
                rc = fclose(f) != 0;
                printf("timeline of the last step written to %s (open in chrome://tracing or ui.perfetto.dev)\n",
                       trace_path);
            }
        }
    }

    em_named_tensors_free(&named);
    em_optimizer_free(opt);
    em_ddp_free(ddp);
    em_module_free(&model->base);
    em_pg_free(pg);
    return rc;
}
