/* ember tests — checks for the plain (non-Check) tests that run as every rank
 * of an mpirun job: Check forks, which MPI and CUDA do not survive.
 *
 * Each including file has its own g_rank, g_world and g_failed (set g_rank
 * and g_world once the group is up: rank_join does). CHECK counts a failure
 * and prints it with the rank and file:line, and the test goes on; a test's
 * main returns non-zero when g_failed > 0 (rank_verdict makes every rank fail
 * when one did). pass() prints "PASS <what>" on rank 0 only. */
#ifndef EMBER_TEST_RANK_CHECK_H
#define EMBER_TEST_RANK_CHECK_H

#include "ember.h"

#include <stdarg.h>
#include <stdio.h>

static int g_rank, g_world, g_failed;

#define CHECK(cond, ...) do {                                                              \
        if (!(cond)) {                                                                      \
            g_failed++;                                                                     \
            fprintf(stderr, "FAIL rank %d %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                                   \
            fprintf(stderr, "\n");                                                          \
        }                                                                                   \
    } while (0)
/* expr returns an em_status: anything but EM_OK fails, with em_last_error(). */
#define CHECK_OK(expr) do { em_status s_ = (expr); CHECK(s_ == EM_OK, "%s: %s", em_status_name(s_), em_last_error()); } while (0)

static void pass(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void pass(const char *fmt, ...)
{
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    printf("PASS ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

/* Joins the process group (em_pg_init; timeout_s 0: the default) and sets
 * g_rank and g_world; NULL, after printing why, when it cannot. */
static em_process_group *rank_join(double timeout_s) __attribute__((unused));
static em_process_group *rank_join(double timeout_s)
{
    em_process_group *pg = NULL;
    if (em_pg_init(&(em_pg_opts){.timeout_s = timeout_s}, &pg) != EM_OK) {
        fprintf(stderr, "em_pg_init: %s\n", em_last_error());
        return NULL;
    }
    g_rank = em_pg_rank(pg);
    g_world = em_pg_world_size(pg);
    return pg;
}

/* Every rank's verdict: the failed checks of all ranks summed; rank 0 prints
 * "OK: ..." or "FAILED: n failed checks over w ranks"; then this rank fails
 * (g_failed > 0) when any rank did. */
static void rank_verdict(em_process_group *pg) __attribute__((unused));
static void rank_verdict(em_process_group *pg)
{
    EM_SCOPE {
        em_tensor *f = em_scalar((double)g_failed, EM_I64, EM_CPU);
        CHECK(em_pg_all_reduce(pg, f, EM_RED_SUM) == EM_OK, "%s", em_last_error());
        if (g_rank == 0)
            printf("%s: %lld failed checks over %d ranks\n", em_item(f) == 0 ? "OK" : "FAILED", (long long)em_item(f),
                   g_world);
        if (em_item(f) != 0) g_failed = g_failed ? g_failed : 1;
    }
}

#endif
