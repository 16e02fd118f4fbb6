/* ember test — a built-in distributed sanity check, as `accelerate test`.
 *
 * `ember test [--num_processes N] [--config_file FILE]` re-runs this very
 * binary as `ember __selftest` through `ember launch` (so through the same
 * resolution of flags, environment and config, and the same mpirun command
 * line). The number of processes: the flag, else EMBER_NUM_PROCESSES or the
 * config's num_processes, else 2 when mpirun is on the PATH, else 1.
 *
 * Every rank of `ember __selftest` (hidden from `ember help`) joins the group
 * through an Accelerator and checks, agreeing on each verdict across ranks so
 * that all ranks stop together: all_reduce (sum, avg, max), broadcast from the
 * first and the last rank, all_gather with a different row count per rank,
 * split_between_processes, and a tiny DDP training (a linear layer, MSE, SGD,
 * 5 steps, each rank on its slice of the global batch) against one process
 * training the same model on the whole batch. The main process then prints
 * "Test is a success! You are ready for your distributed training!".
 * Exit status: 0 success, 1 a check failed, 2 bad usage. */
#include "launch_config.h"
#include "distributed/distributed.h"
#include "ember.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ember_cmd_launch(int argc, char **argv);

static const char USAGE[] =
    "usage: ember test [options]\n"
    "  --num_processes N     processes to test with (default: the config's, else 2 with mpirun, else 1)\n"
    "  --config_file FILE    read this config instead of the default one\n";

static bool on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path) return false;
    char buf[PATH_MAX];
    for (const char *p = path; *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, p, prog);
        if (n && access(buf, X_OK) == 0) return true;
        p += n + (e ? 1 : 0);
    }
    return false;
}

int ember_cmd_test(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"num_processes", required_argument, 0, 'n'}, {"config_file", required_argument, 0, 'f'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *np_flag = NULL, *config_file = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'n': np_flag = optarg; break;
        case 'f': config_file = optarg; break;
        case 'h': fputs(USAGE, stdout); return 0;
        default: fputs(USAGE, stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ember test: unexpected argument '%s'\n%s", argv[optind], USAGE);
        return 2;
    }
    char np[32];
    if (np_flag) {
        snprintf(np, sizeof np, "%s", np_flag);
    } else {
        launch_config c;
        launch_config_init(&c);
        launch_config_apply_env(&c);
        char path[4096];
        if (!launch_config_load(&c, config_file ? config_file : launch_config_default_path(path, sizeof path), !config_file)) {
            launch_config_free(&c);
            return 2;
        }
        if (c.s[CFG_NUM_PROCESSES].value) snprintf(np, sizeof np, "%s", launch_config_get(&c, CFG_NUM_PROCESSES));
        else snprintf(np, sizeof np, "%d", on_path("mpirun") ? 2 : 1);
        launch_config_free(&c);
    }
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "ember test: cannot find the ember binary (/proc/self/exe)\n");
        return 1;
    }
    self[len] = 0;
    char *args[16];
    int n = 0;
    args[n++] = "launch";
    args[n++] = "--num_processes";
    args[n++] = np;
    if (config_file) {
        args[n++] = "--config_file";
        args[n++] = (char *)config_file;
    }
    args[n++] = self;
    args[n++] = "__selftest";
    args[n] = NULL;
    printf("Running: ember launch --num_processes %s %s __selftest\n", np, self);
    fflush(stdout);
    return ember_cmd_launch(n, args);   /* execs; returns only on failure */
}

/* ---- the checks, on every rank ---------------------------------------------------- */

static em_accelerator *g_acc;
static int g_rank;

/* Every rank's verdict: true when all ranks passed. Prints the failure on the
 * rank that saw it and the result on the main process. */
static bool agree(bool ok, const char *what)
{
    if (!ok) fprintf(stderr, "rank %d: FAILED: %s\n", g_rank, what);
    em_scope_begin();
    em_tensor *t = em_full(0, NULL, ok ? 0.0 : 1.0, EM_F32, EM_CPU);
    em_status st = em_pg_all_reduce(em_accelerator_process_group(g_acc), t, EM_RED_MAX);
    bool all = st == EM_OK && em_item(t) == 0.0;
    if (st != EM_OK) fprintf(stderr, "rank %d: all_reduce of the verdict failed: %s\n", g_rank, em_last_error());
    em_scope_end();
    em_accelerator_print(g_acc, "%-44s %s\n", what, all ? "ok" : "FAILED");
    return all;
}

static bool values_are(em_tensor *t, const float *want, int64_t n)
{
    if (!t || em_numel(t) != n) return false;
    const float *got = em_data_ptr(t);
    for (int64_t i = 0; i < n; i++)
        if (got[i] != want[i]) return false;
    return true;
}

static bool check_collectives(em_process_group *pg, int rank, int world)
{
    bool all = true;
    em_scope_begin();
    float v[2] = {(float)(rank + 1), (float)(2 * (rank + 1))};
    float tri = (float)world * (float)(world + 1) / 2;
    em_tensor *t = em_from_data(v, 1, (int64_t[]){2}, EM_F32);
    bool ok = em_pg_all_reduce(pg, t, EM_RED_SUM) == EM_OK && values_are(t, (float[]){tri, 2 * tri}, 2);
    all &= agree(ok, "all_reduce sum");
    t = em_from_data(v, 1, (int64_t[]){2}, EM_F32);
    ok = em_pg_all_reduce(pg, t, EM_RED_AVG) == EM_OK &&
         fabsf(((float *)em_data_ptr(t))[0] - tri / (float)world) <= 1e-6f * tri;
    all &= agree(ok, "all_reduce avg");
    t = em_from_data(v, 1, (int64_t[]){2}, EM_F32);
    ok = em_pg_all_reduce(pg, t, EM_RED_MAX) == EM_OK && values_are(t, (float[]){(float)world, 2.0f * (float)world}, 2);
    all &= agree(ok, "all_reduce max");

    for (int root = 0; root < world; root += world > 1 ? world - 1 : 1) {
        float b[3] = {0, 0, 0};
        if (rank == root) b[0] = 42.0f, b[1] = -7.5f, b[2] = (float)root;
        t = em_from_data(b, 1, (int64_t[]){3}, EM_F32);
        ok = em_pg_broadcast(pg, t, root) == EM_OK && values_are(t, (float[]){42.0f, -7.5f, (float)root}, 3);
        all &= agree(ok, root == 0 ? "broadcast from rank 0" : "broadcast from the last rank");
    }

    /* rank r contributes r + 1 rows of [r, r] */
    int64_t rows = rank + 1;
    float *g = malloc(sizeof(float) * 2 * (size_t)rows);
    for (int64_t i = 0; i < 2 * rows; i++) g[i] = (float)rank;
    t = em_from_data(g, 2, (int64_t[]){rows, 2}, EM_F32);
    free(g);
    em_tensor *out = NULL;
    ok = em_pg_all_gather(pg, t, &out) == EM_OK && out && out->ndim == 2 &&
         out->shape[0] == (int64_t)world * (world + 1) / 2 && out->shape[1] == 2;
    if (ok) {
        const float *o = em_data_ptr(out);
        int64_t k = 0;
        for (int r = 0; r < world && ok; r++)
            for (int64_t i = 0; i < 2 * (r + 1); i++, k++) ok &= o[k] == (float)r;
    }
    all &= agree(ok, "all_gather (uneven sizes)");
    all &= agree(em_pg_barrier(pg) == EM_OK, "barrier");
    em_scope_end();
    return all;
}

static bool check_split(em_process_group *pg, int rank, int world)
{
    bool all = true;
    em_scope_begin();
    for (int64_t n = 0; n <= 2 * world + 1; n += world + 1) {
        int64_t b, e;
        em_accelerator_split_between_processes(g_acc, n, &b, &e);
        /* every rank's [b, e) gathered: contiguous, in rank order, covering [0, n), sizes within 1 */
        int64_t mine[2] = {b, e};
        em_tensor *t = em_from_data(mine, 2, (int64_t[]){1, 2}, EM_I64), *out = NULL;
        bool ok = em_pg_all_gather(pg, t, &out) == EM_OK && out && out->shape[0] == world;
        if (ok) {
            const int64_t *o = em_data_ptr(out);
            int64_t at = 0, lo = INT64_MAX, hi = 0;
            for (int r = 0; r < world; r++) {
                ok &= o[2 * r] == at && o[2 * r + 1] >= o[2 * r];
                at = o[2 * r + 1];
                int64_t sz = o[2 * r + 1] - o[2 * r];
                lo = sz < lo ? sz : lo;
                hi = sz > hi ? sz : hi;
            }
            ok &= at == n && hi - lo <= 1;
        }
        (void)rank;
        all &= agree(ok, n == 0 ? "split_between_processes (0 items)" : "split_between_processes");
    }
    em_scope_end();
    return all;
}

enum { FEAT = 4, PER_RANK = 4, STEPS = 5 };

static void param_list(em_module *m, em_tensor **out, int *n)
{
    em_named_tensors l = em_module_named_parameters(m);
    *n = l.n;
    for (int i = 0; i < l.n; i++) out[i] = l.items[i].tensor;
    em_named_tensors_free(&l);
}

/* A tiny DDP training through the Accelerator against one process on the whole batch. */
static bool check_ddp(int rank, int world)
{
    int64_t nglob = (int64_t)PER_RANK * world;
    float *x = malloc(sizeof(float) * (size_t)(nglob * FEAT)), *y = malloc(sizeof(float) * (size_t)nglob);
    for (int64_t i = 0; i < nglob; i++) {
        float s = 0;
        for (int j = 0; j < FEAT; j++) {
            x[i * FEAT + j] = (float)sin(0.7 * (double)(i * FEAT + j) + 0.3);
            s += (float)(j + 1) * x[i * FEAT + j];
        }
        y[i] = 0.5f * s - 0.25f;
    }
    em_module *model = (em_module *)em_nn_linear_new(FEAT, 1, NULL);
    em_module *ref = (em_module *)em_nn_linear_new(FEAT, 1, NULL);
    bool ok = model && ref && em_accelerator_prepare_model(g_acc, model) == EM_OK;
    em_tensor *p[8], *q[8];
    int np = 0, nq = 0;
    em_optimizer *opt = NULL, *ropt = NULL;
    if (ok) {
        param_list(model, p, &np);
        param_list(ref, q, &nq);
        ok = np == nq && np > 0;
        for (int i = 0; ok && i < np; i++) {   /* the reference starts from rank 0's weights, as DDP does */
            ok = em_numel(p[i]) == em_numel(q[i]);
            if (ok) memcpy(em_data_ptr(q[i]), em_data_ptr(p[i]), sizeof(float) * (size_t)em_numel(p[i]));
        }
        opt = em_sgd_new(p, np, &(em_sgd_opts){.lr = 0.1});
        ropt = em_sgd_new(q, nq, &(em_sgd_opts){.lr = 0.1});
        ok = ok && opt && ropt && em_accelerator_prepare_optimizer(g_acc, opt) == EM_OK;
    }
    for (int step = 0; ok && step < STEPS; step++) {
        em_scope_begin();
        em_tensor *xr = em_from_data(x + (int64_t)rank * PER_RANK * FEAT, 2, (int64_t[]){PER_RANK, FEAT}, EM_F32);
        em_tensor *yr = em_from_data(y + (int64_t)rank * PER_RANK, 2, (int64_t[]){PER_RANK, 1}, EM_F32);
        em_tensor *loss = em_mse_loss(em_nn_linear_forward((em_nn_linear *)model, xr), yr, EM_REDUCE_MEAN);
        ok = loss && em_accelerator_backward(g_acc, loss) == EM_OK && em_accelerator_optimizer_step(g_acc, opt) == EM_OK;
        em_accelerator_optimizer_zero_grad(g_acc, opt);

        em_tensor *xa = em_from_data(x, 2, (int64_t[]){nglob, FEAT}, EM_F32);
        em_tensor *ya = em_from_data(y, 2, (int64_t[]){nglob, 1}, EM_F32);
        em_tensor *rl = em_mse_loss(em_nn_linear_forward((em_nn_linear *)ref, xa), ya, EM_REDUCE_MEAN);
        ok = ok && rl;
        if (ok) {
            em_backward(rl);
            ok = em_optimizer_step(ropt) == EM_OK;
            em_module_zero_grad(ref, true);
        }
        em_scope_end();
    }
    double worst = 0;
    for (int i = 0; ok && i < np; i++) {
        const float *a = em_data_ptr(p[i]), *b = em_data_ptr(q[i]);
        for (int64_t k = 0; k < em_numel(p[i]); k++) {
            double d = fabs((double)a[k] - (double)b[k]) / (1e-6 + fabs((double)b[k]));
            worst = d > worst ? d : worst;
        }
    }
    if (ok && worst > 1e-5) {
        fprintf(stderr, "rank %d: DDP parameters differ from one process by %.3g (relative)\n", rank, worst);
        ok = false;
    }
    bool all = agree(ok, "DDP training equals one process");
    em_optimizer_free(opt);
    em_optimizer_free(ropt);
    em_module_free(model);
    em_module_free(ref);
    free(x);
    free(y);
    return all;
}

int ember_cmd_selftest(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* plain f32, no accumulation, whatever the config says: the checks compare exact values */
    g_acc = em_accelerator_new(&(em_accelerator_opts){
        .mixed_precision = EM_MP_NO, .gradient_accumulation_steps = 1, .cpu = true, .pg = {.timeout_s = 60}});
    if (!g_acc) {
        fprintf(stderr, "ember __selftest: cannot join the process group: %s\n", em_last_error());
        return 1;
    }
    em_process_group *pg = em_accelerator_process_group(g_acc);
    int world = em_pg_world_size(pg);
    g_rank = em_pg_rank(pg);
    em_accelerator_print(g_acc, "ember test: %d process%s\n", world, world == 1 ? "" : "es");
    bool ok = check_collectives(pg, g_rank, world);
    ok = ok && check_split(pg, g_rank, world);
    ok = ok && check_ddp(g_rank, world);
    if (ok) em_accelerator_print(g_acc, "Test is a success! You are ready for your distributed training!\n");
    else em_accelerator_print(g_acc, "ember test FAILED (see the messages above)\n");
    em_accelerator_free(g_acc);
    return ok ? 0 : 1;
}
