/* ember tests — checks for the plain (non-Check) tests that run as every rank
 * of an mpirun job: Check forks, which MPI and CUDA do not survive.
 *
 * Each including file has its own g_rank, g_world and g_failed (set g_rank
 * and g_world once the group is up). CHECK counts a failure and prints it
 * with the rank and file:line, and the test goes on; a test's main returns
 * non-zero when g_failed > 0. pass() prints "PASS <what>" on rank 0 only. */
#ifndef EMBER_TEST_RANK_CHECK_H
#define EMBER_TEST_RANK_CHECK_H

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

#endif
