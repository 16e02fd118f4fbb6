/* bench_allreduce — all-reduce bandwidth of ember's process group, run as
 * every rank of `mpirun -np N` (docs/PERFORMANCE.md, "## allreduce (issue 6)").
 *
 * For each size (1, 25 and 100 MiB of f32 by default), after warmup: the
 * median time of em_pg_all_reduce(SUM) over the repetitions, each started
 * after a barrier (and the best one, telling a busy machine apart), with
 *   algorithm bandwidth = bytes / time
 *   bus bandwidth       = algbw * 2 (N - 1) / N   (the NCCL-tests convention)
 * The result is checked once per size. Environment as set: EMBER_SHM=0 makes
 * MPI carry everything (OpenMPI's own all-reduce), EMBER_SHM_MIN_BYTES moves
 * the threshold. allreduce_peer.py runs the same with torch.distributed/gloo.
 *
 * Usage: mpirun -np 2 bench_allreduce [--csv] [--quick] [SIZE_MIB ...]
 */
#include "ember.h"
#include "distributed/distributed.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what)
{
    fprintf(stderr, "bench_allreduce: %s: %s\n", what, em_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    bool csv = false, quick = false;
    double sizes[16];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--csv") == 0)
            csv = true;
        else if (strcmp(argv[i], "--quick") == 0)
            quick = true;
        else if (nsizes < 16)
            sizes[nsizes++] = atof(argv[i]);
    }
    if (nsizes == 0) {
        sizes[0] = 1;
        sizes[1] = 25;
        sizes[2] = 100;
        nsizes = 3;
    }
    em_process_group *pg;
    if (em_pg_init(NULL, &pg) != EM_OK)
        die("em_pg_init");
    int rank = em_pg_rank(pg), world = em_pg_world_size(pg);
    const char *shm = getenv("EMBER_SHM");
    if (rank == 0 && !csv) {
        printf("all_reduce (sum, f32) over %d ranks; path: %s\n", world,
               world == 1 ? "none (world of one)" : shm && strcmp(shm, "0") == 0 ? "MPI only (EMBER_SHM=0)" : "shared memory (headers over MPI)");
        printf("%10s %6s %11s %11s %12s %12s %12s\n", "size MiB", "reps", "median ms", "best ms", "algbw GB/s", "busbw GB/s", "best busbw");
    }
    if (rank == 0 && csv)
        printf("size_mib,reps,median_ms,algbw_gbs,busbw_gbs,best_ms,best_busbw_gbs\n");
    for (int s = 0; s < nsizes; s++) {
        int64_t n = (int64_t)(sizes[s] * 1048576.0 / 4.0);
        size_t bytes = (size_t)n * 4;
        em_tensor *t = em_full(1, (int64_t[]){n}, 1.0 + rank, EM_F32, EM_CPU);
        if (!t)
            die("em_full");
        /* check once: sum of (1 + q) over the ranks */
        if (em_pg_all_reduce(pg, t, EM_RED_SUM) != EM_OK)
            die("all_reduce");
        float want = (float)(world * (world + 1) / 2);
        const float *p = em_data_ptr(t);
        if (p[0] != want || p[n / 2] != want || p[n - 1] != want) {
            fprintf(stderr, "bench_allreduce: rank %d: wrong sum %g (want %g)\n", rank, p[0], want);
            return 1;
        }
        em_pg_all_reduce(pg, t, EM_RED_SUM);   /* second warmup */
        /* about 1 s per size (0.3 with --quick), 5..50 repetitions, agreed by all ranks */
        double t0 = bench_now();
        em_pg_barrier(pg);
        em_pg_all_reduce(pg, t, EM_RED_SUM);
        em_tensor *est = em_scalar(bench_now() - t0, EM_F64, EM_CPU);
        em_pg_all_reduce(pg, est, EM_RED_MAX);
        double one = em_item(est);
        em_release(est);
        int reps = (int)((quick ? 0.3 : 1.0) / (one > 1e-6 ? one : 1e-6));
        reps = reps < 5 ? 5 : reps > 50 ? 50 : reps;
        double times[50];
        for (int r = 0; r < reps; r++) {
            if (em_pg_barrier(pg) != EM_OK)
                die("barrier");
            double a = bench_now();
            if (em_pg_all_reduce(pg, t, EM_RED_SUM) != EM_OK)
                die("all_reduce");
            times[r] = bench_now() - a;
        }
        /* the slowest rank's time is the collective's time */
        em_tensor *tt = em_from_data(times, 1, (int64_t[]){reps}, EM_F64);
        em_pg_all_reduce(pg, tt, EM_RED_MAX);
        memcpy(times, em_data_ptr(tt), sizeof(double) * (size_t)reps);
        em_release(tt);
        qsort(times, (size_t)reps, sizeof(double), bench_cmp_double);
        double med = times[reps / 2];
        double algbw = (double)bytes / med / 1e9;
        double bus = world > 1 ? 2.0 * (world - 1) / world : 1.0, busbw = algbw * bus;
        double best = times[0], best_bus = (double)bytes / best / 1e9 * bus;
        if (rank == 0) {
            if (csv)
                printf("%g,%d,%.4f,%.3f,%.3f,%.4f,%.3f\n", sizes[s], reps, med * 1e3, algbw, busbw, best * 1e3, best_bus);
            else
                printf("%10g %6d %11.3f %11.3f %12.3f %12.3f %12.3f\n", sizes[s], reps, med * 1e3, best * 1e3, algbw,
                       busbw, best_bus);
            fflush(stdout);
        }
        em_release(t);
    }
    em_pg_free(pg);
    return 0;
}
