/* ember tests — the process group, run as every rank of a world:
 *
 *   test_pg              every collective and dtype against values computed
 *                        here; a world of one when started without mpirun
 *   test_pg timeout      rank 0 waits for a collective the others skip: it must
 *                        fail with EM_ERR_TIMEOUT after the 2 s timeout
 *   test_pg kill         rank 1 kills itself; the others must not hang
 *
 * Not a Check suite: Check forks, which MPI does not survive. One line per
 * passed check on rank 0 (every rank reports failures); exit status 1 when any
 * check failed on this rank. Values are small multiples of 0.5, so sums are
 * exact in every dtype and comparisons are exact except for avg (one ulp).
 */
#include "ember.h"
#include "distributed/distributed.h"
#include "ember_config.h"

#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if EMBER_HAVE_MPI
#include <mpi.h>
#endif

#include "rank_check.h"


static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* rank r's element i: a multiple of 0.5 in [-8, 8.5] for floats; integers
 * with a rank-dependent large part for i64 (beyond 2^32). */
static double val(int r, int64_t i, em_dtype dt)
{
    double v = (double)((r * 31 + i * 7) % 17) - 8.0;
    if (em_dtype_is_float(dt))
        return v + 0.5 * (double)(i % 2);
    if (dt == EM_I64)
        return v + (double)r * 3e9;
    if (dt == EM_BOOL)
        return (double)((r + i) % 3 == 0);
    return v;
}

static em_tensor *make(int r, int64_t n, em_dtype dt)
{
    double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++)
        d[i] = val(r, i, dt);
    em_tensor *t = em_to_dtype(em_from_data(d, 1, (int64_t[]){n}, EM_F64), dt);
    free(d);
    return t;
}

/* The values of t as doubles (a scope-owned f64 copy). */
static const double *as_f64(em_tensor *t)
{
    em_tensor *c = em_contiguous(em_to_dtype(t, EM_F64));
    return em_data_ptr(c);
}

/* ref values rounded into dt, as doubles */
static const double *rounded(const double *ref, int64_t n, em_dtype dt)
{
    return as_f64(em_to_dtype(em_from_data(ref, 1, (int64_t[]){n}, EM_F64), dt));
}

static double ulp(em_dtype dt)
{
    switch (dt) {
    case EM_F16: return ldexp(1, -10);
    case EM_BF16: return ldexp(1, -7);
    case EM_F32: return ldexp(1, -23);
    case EM_F64: return ldexp(1, -52);
    default: return 0;
    }
}

static const char *red_name[] = {"sum", "avg", "max", "min"};

/* ---- all_reduce ---- */

static void test_all_reduce(em_process_group *pg, em_dtype dt, em_reduce_op op, int64_t n)
{
    EM_SCOPE {
        em_tensor *t = make(g_rank, n, dt);
        em_status s = em_pg_all_reduce(pg, t, op);
        CHECK(s == EM_OK, "%s", em_last_error());
        double *ref = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            double acc = val(0, i, dt);
            for (int q = 1; q < g_world; q++) {
                double v = val(q, i, dt);
                acc = op == EM_RED_MAX ? fmax(acc, v) : op == EM_RED_MIN ? fmin(acc, v) : acc + v;
            }
            ref[i] = op == EM_RED_AVG ? acc / g_world : acc;
        }
        const double *want = rounded(ref, n, dt), *got = as_f64(t);
        int64_t bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            double tol = op == EM_RED_AVG ? ulp(dt) * fabs(want[i]) * 1.01 : 0;
            if (!(fabs(got[i] - want[i]) <= tol))
                bad = i;
        }
        CHECK(bad < 0, "all_reduce %s %s n=%lld: element %lld is %.17g, want %.17g", red_name[op],
              em_dtype_name(dt), (long long)n, (long long)bad, bad >= 0 ? got[bad] : 0, bad >= 0 ? want[bad] : 0);
        free(ref);
    }
}

/* Non-exact f32 values: every rank must end with bit-identical results
 * (DDP relies on it). */
static void test_identical(em_process_group *pg, int64_t n)
{
    EM_SCOPE {
        em_set_seed(1234 + (uint64_t)g_rank);
        em_tensor *t = em_randn(1, (int64_t[]){n}, EM_F32, EM_CPU);
        CHECK(em_pg_all_reduce(pg, t, EM_RED_AVG) == EM_OK, "%s", em_last_error());
        em_tensor *all = NULL;
        CHECK(em_pg_all_gather(pg, t, &all) == EM_OK, "%s", em_last_error());
        if (all) {
            const float *a = em_data_ptr(all);
            int differ = 0;
            for (int q = 1; q < g_world; q++)
                differ += memcmp(a, a + (size_t)q * (size_t)n, sizeof(float) * (size_t)n) != 0;
            CHECK(differ == 0, "all_reduce results differ across ranks (n=%lld)", (long long)n);
        }
    }
    pass("all_reduce avg f32 n=%lld: bit-identical on every rank", (long long)n);
}

/* ---- broadcast ---- */

static void test_broadcast(em_process_group *pg, em_dtype dt, int64_t n)
{
    for (int root = 0; root < g_world; root++) {
        EM_SCOPE {
            em_tensor *t = make(g_rank, n, dt);
            CHECK(em_pg_broadcast(pg, t, root) == EM_OK, "%s", em_last_error());
            const double *want = as_f64(make(root, n, dt)), *got = as_f64(t);
            CHECK(n == 0 || memcmp(want, got, sizeof(double) * (size_t)n) == 0, "broadcast %s from root %d", em_dtype_name(dt), root);
        }
    }
    pass("broadcast %s n=%lld from every root", em_dtype_name(dt), (long long)n);
}

/* ---- all_gather, with dim-0 sizes that differ by rank ---- */

static int64_t rows_of(int q, int variant) { return variant == 0 ? q + 1 : variant == 1 ? (q == 0 ? 0 : 2 * q) : 3; }

static void test_all_gather(em_process_group *pg, em_dtype dt, int variant)
{
    EM_SCOPE {
        int64_t cols = 3, mine = rows_of(g_rank, variant);
        double *d = malloc(sizeof(double) * (size_t)(mine * cols + 1));
        for (int64_t i = 0; i < mine * cols; i++)
            d[i] = g_rank * 100 + (double)i;
        em_tensor *t = em_to_dtype(em_from_data(d, 2, (int64_t[]){mine, cols}, EM_F64), dt);
        free(d);
        em_tensor *out = NULL;
        CHECK(em_pg_all_gather(pg, t, &out) == EM_OK, "%s", em_last_error());
        int64_t total = 0;
        for (int q = 0; q < g_world; q++)
            total += rows_of(q, variant);
        CHECK(out && out->ndim == 2 && out->shape[0] == total && out->shape[1] == cols && out->dtype == dt,
              "all_gather out shape");
        if (out && out->shape[0] == total) {
            const double *got = as_f64(out);
            int64_t row = 0, bad = 0;
            for (int q = 0; q < g_world; q++) {
                for (int64_t i = 0; i < rows_of(q, variant) * cols; i++)
                    bad += got[row * cols + i] != q * 100 + (double)i;
                row += rows_of(q, variant);
            }
            CHECK(bad == 0, "all_gather %s variant %d: %lld wrong values", em_dtype_name(dt), variant, (long long)bad);
        }
    }
}

static void test_all_gather_values(em_process_group *pg)
{
    /* rows of rank q start at the sum of earlier ranks' rows */
    EM_SCOPE {
        em_tensor *t = em_full(2, (int64_t[]){g_rank + 1, 2}, (double)g_rank, EM_I64, EM_CPU);
        em_tensor *out = NULL;
        CHECK(em_pg_all_gather(pg, t, &out) == EM_OK, "%s", em_last_error());
        int64_t row = 0, bad = 0;
        const int64_t *o = out ? em_data_ptr(out) : NULL;
        for (int q = 0; o && q < g_world; q++)
            for (int64_t k = 0; k <= q; k++, row++)
                bad += o[row * 2] != q || o[row * 2 + 1] != q;
        CHECK(o && bad == 0, "all_gather rows out of place");
        /* a scalar gathers into [world] */
        em_tensor *sc = em_scalar(g_rank * 2.0, EM_F32, EM_CPU), *so = NULL;
        CHECK(em_pg_all_gather(pg, sc, &so) == EM_OK, "%s", em_last_error());
        CHECK(so && so->ndim == 1 && so->shape[0] == g_world, "scalar all_gather shape");
        for (int q = 0; so && q < g_world; q++)
            CHECK(((float *)em_data_ptr(so))[q] == 2.0f * (float)q, "scalar all_gather value %d", q);
    }
    pass("all_gather: variable dim-0 sizes land in rank order; a scalar gathers into [world]");
}

/* ---- reduce_scatter ---- */

static void test_reduce_scatter(em_process_group *pg, em_dtype dt, em_reduce_op op)
{
    EM_SCOPE {
        int64_t n = 5, cols = 2, total = g_world * n * cols;
        em_tensor *in = em_reshape(make(g_rank, total, dt), 2, (int64_t[]){g_world * n, cols});
        em_tensor *out = em_empty(2, (int64_t[]){n, cols}, dt, EM_CPU);
        CHECK(em_pg_reduce_scatter(pg, in, out, op) == EM_OK, "%s", em_last_error());
        double ref[10];
        for (int64_t j = 0; j < n * cols; j++) {
            int64_t i = g_rank * n * cols + j;
            double acc = val(0, i, dt);
            for (int q = 1; q < g_world; q++) {
                double v = val(q, i, dt);
                acc = op == EM_RED_MAX ? fmax(acc, v) : op == EM_RED_MIN ? fmin(acc, v) : acc + v;
            }
            ref[j] = op == EM_RED_AVG ? acc / g_world : acc;
        }
        const double *want = rounded(ref, n * cols, dt), *got = as_f64(out);
        for (int64_t j = 0; j < n * cols; j++) {
            double tol = op == EM_RED_AVG ? ulp(dt) * fabs(want[j]) * 1.01 : 0;
            CHECK(fabs(got[j] - want[j]) <= tol, "reduce_scatter %s %s [%lld]: %g want %g", red_name[op],
                  em_dtype_name(dt), (long long)j, got[j], want[j]);
        }
    }
}

/* ---- barrier ---- */

static void test_barrier(em_process_group *pg)
{
    CHECK(em_pg_barrier(pg) == EM_OK, "%s", em_last_error());
    double t0 = now();
    if (g_rank == 0)
        usleep(300 * 1000);
    CHECK(em_pg_barrier(pg) == EM_OK, "%s", em_last_error());
    double waited = now() - t0;
    if (g_world > 1)
        CHECK(waited > 0.25, "rank %d left the barrier after %.3f s; rank 0 arrived after 0.3 s", g_rank, waited);
    pass("barrier: nobody leaves before the last rank arrives");
}

/* ---- async ---- */

static void test_async(em_process_group *pg)
{
    EM_SCOPE {
        enum { K = 3 };
        int64_t sizes[K] = {1 << 20, 1000, 300000};
        em_tensor *t[K];
        em_work *w[K];
        for (int k = 0; k < K; k++) {
            t[k] = em_full(1, (int64_t[]){sizes[k]}, (double)(g_rank + k), EM_F32, EM_CPU);
            w[k] = em_pg_all_reduce_async(pg, t[k], EM_RED_SUM);
            CHECK(w[k] != NULL, "async submit %d", k);
        }
        /* compute while the reductions run */
        em_tensor *a = em_randn(2, (int64_t[]){256, 256}, EM_F32, EM_CPU);
        em_tensor *m = em_matmul(a, a);
        CHECK(m != NULL, "matmul during async all_reduce");
        for (int k = K - 1; k >= 0; k--) {   /* waiting out of order is fine */
            CHECK(em_work_wait(w[k]) == EM_OK, "%s", em_last_error());
            double want = 0;
            for (int q = 0; q < g_world; q++)
                want += q + k;
            const float *p = em_data_ptr(t[k]);
            int64_t bad = 0;
            for (int64_t i = 0; i < sizes[k]; i++)
                bad += p[i] != (float)want;
            CHECK(bad == 0, "async all_reduce %d: %lld wrong", k, (long long)bad);
        }
    }
    pass("async all_reduce: three in flight while computing, waited in reverse order");
}

/* ---- mismatches: a clear error on every rank, and the group still works ---- */

static void test_mismatch(em_process_group *pg)
{
    if (g_world == 1)
        return;
    EM_SCOPE {
        int64_t n = g_rank == 0 ? 10 : 20;
        em_tensor *t = em_ones(1, (int64_t[]){n}, EM_F32, EM_CPU);
        em_status s = em_pg_all_reduce(pg, t, EM_RED_SUM);
        const char *e = em_last_error();
        CHECK(s == EM_ERR_INVALID, "size mismatch gave status %d", s);
        CHECK(strstr(e, "all_reduce mismatch") && strstr(e, "rank 0 has 10 elements (40 bytes") &&
              strstr(e, "has 20 elements (80 bytes"), "message: %s", e);
        if (g_rank == 0)
            printf("  message: %s\n", e);
        pass("all_reduce of 10 vs 20 floats: EM_ERR_INVALID naming both sizes");

        em_tensor *u = em_ones(1, (int64_t[]){4}, EM_F32, EM_CPU);
        s = g_rank == 0 ? em_pg_all_reduce(pg, u, EM_RED_SUM) : em_pg_broadcast(pg, u, 0);
        e = em_last_error();
        CHECK(s == EM_ERR_INVALID && strstr(e, "rank 0 called all_reduce") && strstr(e, "called broadcast"),
              "kind mismatch: %d %s", s, e);
        pass("all_reduce vs broadcast: EM_ERR_INVALID naming both");

        em_tensor *v = em_ones(1, (int64_t[]){4}, g_rank == 0 ? EM_F32 : EM_F64, EM_CPU);
        s = em_pg_all_reduce(pg, v, EM_RED_SUM);
        e = em_last_error();
        CHECK(s == EM_ERR_INVALID && strstr(e, "rank 0 has float32[4]") && strstr(e, "has float64[4]"), "dtype mismatch: %d %s", s, e);
        s = em_pg_all_reduce(pg, u, g_rank == 0 ? EM_RED_SUM : EM_RED_MAX);
        CHECK(s == EM_ERR_INVALID && strstr(em_last_error(), "reduces with sum"), "op mismatch: %s", em_last_error());
        em_tensor *g = em_ones(2, (int64_t[]){2, g_rank == 0 ? 3 : 4}, EM_F32, EM_CPU), *go = NULL;
        s = em_pg_all_gather(pg, g, &go);
        CHECK(s == EM_ERR_INVALID && strstr(em_last_error(), "only dim 0 may differ"), "gather mismatch: %s", em_last_error());
        pass("dtype, reduction and all_gather row-shape mismatches: EM_ERR_INVALID");

        em_fill_(u, 1.0);
        CHECK(em_pg_all_reduce(pg, u, EM_RED_SUM) == EM_OK, "after mismatches: %s", em_last_error());
        CHECK(((float *)em_data_ptr(u))[3] == (float)g_world, "after mismatches: wrong sum");
        pass("the group works after mismatches");
    }
}

/* ---- misuse goes to the handler (one that returns, so no fork is needed) ---- */

static char misuse_msg[1024];
static void keep_msg(const char *m, void *user) { (void)user; snprintf(misuse_msg, sizeof misuse_msg, "%s", m); }

static void test_misuse(em_process_group *pg)
{
    em_misuse_handler old = em_set_misuse_handler(keep_msg, NULL);
    EM_SCOPE {
        em_tensor *m = em_zeros(2, (int64_t[]){4, 6}, EM_F32, EM_CPU);
        misuse_msg[0] = 0;
        em_status s = em_pg_all_reduce(pg, em_transpose(m, 0, 1), EM_RED_SUM);
        CHECK(s != EM_OK && strstr(misuse_msg, "em_pg_all_reduce") && strstr(misuse_msg, "contiguous"), "%s", misuse_msg);
        em_tensor *i = em_zeros(1, (int64_t[]){3}, EM_I64, EM_CPU);
        misuse_msg[0] = 0;
        s = em_pg_all_reduce(pg, i, EM_RED_AVG);
        CHECK(s != EM_OK && strstr(misuse_msg, "avg needs a floating dtype"), "%s", misuse_msg);
        misuse_msg[0] = 0;
        s = em_pg_broadcast(pg, i, g_world);
        CHECK(s != EM_OK && strstr(misuse_msg, "root"), "%s", misuse_msg);
        em_tensor *out = em_zeros(1, (int64_t[]){3}, EM_F32, EM_CPU);
        misuse_msg[0] = 0;
        s = em_pg_reduce_scatter(pg, em_zeros(1, (int64_t[]){3 * g_world + 1}, EM_F32, EM_CPU), out, EM_RED_SUM);
        CHECK(s != EM_OK && strstr(misuse_msg, "world * n"), "%s", misuse_msg);
    }
    em_set_misuse_handler(old, NULL);
    pass("misuse (non-contiguous, avg of i64, bad root, bad reduce_scatter shapes) reaches the handler");
}

static int run_all(void)
{
    em_process_group *pg = rank_join(0);
    if (!pg) return 1;
    const char *env_world = getenv("OMPI_COMM_WORLD_SIZE");
    CHECK(g_world == (env_world ? atoi(env_world) : 1), "world %d vs the environment", g_world);
    CHECK(em_pg_local_rank(pg) >= 0 && em_pg_local_rank(pg) < g_world, "local rank %d", em_pg_local_rank(pg));
#if EMBER_HAVE_MPI
    if (g_world == 1) {
        int inited = 1;
        MPI_Initialized(&inited);
        CHECK(!inited, "a world of one initialized MPI");
        pass("world of one: no MPI");
    }
#endif
    pass("init: rank %d of %d", g_rank, g_world);

    static const em_dtype dts[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32};
    /* With shared memory on, every size takes it by default; tests/meson.build
     * also runs -np 3 with a 64 KiB threshold (1000 on MPI, 300000 on shared
     * memory, interleaved) and a 2-step ring of 64 KiB steps (wrapping). */
    static const int64_t sizes[] = {1, 1000, 300000};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int op = EM_RED_SUM; op <= EM_RED_MIN; op++) {
            if (op == EM_RED_AVG && !em_dtype_is_float(dts[d]))
                continue;
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
                test_all_reduce(pg, dts[d], (em_reduce_op)op, sizes[k]);
            pass("all_reduce %s %s at 1, 1000 and 300000 elements", red_name[op], em_dtype_name(dts[d]));
        }
    test_all_reduce(pg, EM_BOOL, EM_RED_MAX, 1000);
    test_all_reduce(pg, EM_BOOL, EM_RED_MIN, 1000);
    test_all_reduce(pg, EM_F32, EM_RED_SUM, 0);
    test_all_reduce(pg, EM_F32, EM_RED_SUM, 5000000);   /* grows the shared segments */
    test_all_reduce(pg, EM_F32, EM_RED_SUM, 300001);    /* ragged chunks, back to a smaller size */
    pass("all_reduce bool max/min, empty, 5M and ragged sizes");
    test_identical(pg, 300000);
    test_identical(pg, 999);

    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        test_broadcast(pg, dts[d], 1000);
    test_broadcast(pg, EM_BOOL, 7);
    test_broadcast(pg, EM_F32, 0);

    for (int variant = 0; variant < 3; variant++)
        for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
            test_all_gather(pg, dts[d], variant);
    pass("all_gather every dtype, with dim-0 sizes q+1, (0, 2q) and equal");
    test_all_gather_values(pg);

    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
        for (int op = EM_RED_SUM; op <= EM_RED_MIN; op++)
            if (op != EM_RED_AVG || em_dtype_is_float(dts[d]))
                test_reduce_scatter(pg, dts[d], (em_reduce_op)op);
    pass("reduce_scatter every dtype and reduction");

    test_barrier(pg);
    test_async(pg);
    test_mismatch(pg);
    test_misuse(pg);

    rank_verdict(pg);   /* everyone agrees on the outcome before leaving */
    em_pg_free(pg);
    return g_failed ? 1 : 0;
}

/* rank 0 calls an all_reduce that the others skip */
static int run_timeout(void)
{
    em_process_group *pg = rank_join(2);
    if (!pg) return 1;
    em_tensor *t = em_ones(1, (int64_t[]){1024}, EM_F32, EM_CPU);
    CHECK(em_pg_all_reduce(pg, t, EM_RED_SUM) == EM_OK, "warm-up: %s", em_last_error());
    if (g_rank == 0) {
        double t0 = now();
        em_status s = em_pg_all_reduce(pg, t, EM_RED_SUM);
        double took = now() - t0;
        const char *e = em_last_error();
        printf("  message: %s\n", e);
        CHECK(s == EM_ERR_TIMEOUT, "status %d", s);
        CHECK(took >= 1.9 && took < 3.5, "failed after %.2f s with a 2 s timeout", took);
        char want[96];
        snprintf(want, sizeof want, "all_reduce of 4096 bytes (float32[1024]) on rank 0 of %d timed out after 2 s", g_world);
        CHECK(strstr(e, want) != NULL, "message lacks '%s'", want);
        /* the group is unusable now: the next collective fails at once */
        t0 = now();
        s = em_pg_barrier(pg);
        CHECK(s == EM_ERR_COMM && now() - t0 < 0.5 && strstr(em_last_error(), "an earlier collective failed"),
              "after a timeout: %d %s", s, em_last_error());
        if (!g_failed)
            printf("PASS timeout: EM_ERR_TIMEOUT after %.2f s, then the group refuses work\n", took);
        fflush(stdout);
        em_pg_free(pg);   /* no MPI_Finalize: mpirun stops the other ranks */
        em_release(t);
        return g_failed ? 1 : 0;
    }
    sleep(30);   /* stopped by mpirun once rank 0 exits */
    em_pg_free(pg);
    em_release(t);
    return 0;
}

/* rank 1 dies; the others are in an all_reduce */
static int run_kill(void)
{
    em_process_group *pg = rank_join(20);
    if (!pg) return 1;
    em_tensor *t = em_ones(1, (int64_t[]){1 << 20}, EM_F32, EM_CPU);
    CHECK(em_pg_all_reduce(pg, t, EM_RED_SUM) == EM_OK, "warm-up: %s", em_last_error());
    if (g_rank == 1)
        raise(SIGKILL);
    usleep(100 * 1000);
    em_status s = em_pg_all_reduce(pg, t, EM_RED_SUM);
    fprintf(stderr, "rank %d: all_reduce after rank 1 died: %s: %s\n", g_rank, em_status_name(s), em_last_error());
    em_pg_free(pg);
    em_release(t);
    return s == EM_OK ? 0 : 1;   /* non-zero: the job fails */
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "all";
    if (strcmp(mode, "timeout") == 0)
        return run_timeout();
    if (strcmp(mode, "kill") == 0)
        return run_kill();
    return run_all();
}
