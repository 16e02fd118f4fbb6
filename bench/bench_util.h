/* ember benchmarks — the helpers every bench program shares: clocks, the
 * median of repeated timings, and paths under ../shared/data. Header-only
 * (static inline): each bench is one executable. */
#ifndef EMBER_BENCH_UTIL_H
#define EMBER_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_clock_s(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* Wall seconds (monotonic), and this thread's CPU seconds. */
static inline double bench_now(void) { return bench_clock_s(CLOCK_MONOTONIC); }
static inline double bench_cpu_now(void) { return bench_clock_s(CLOCK_THREAD_CPUTIME_ID); }

/* qsort comparator of doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (the upper one for even n); v is left as it was. */
static inline double bench_median(const double *v, int n)
{
    double *c = malloc(sizeof *c * (size_t)n);
    if (!c) return v[n / 2];
    memcpy(c, v, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, bench_cmp_double);
    double m = c[n / 2];
    free(c);
    return m;
}

/* rel under $EMBER_SHARED_DATA, else ../shared/data (two live results at once). */
static inline const char *bench_shared(const char *rel)
{
    static char buf[2][1024];
    static int k;
    const char *root = getenv("EMBER_SHARED_DATA");
    char *b = buf[k++ % 2];
    snprintf(b, sizeof buf[0], "%s/%s", root && *root ? root : "../shared/data", rel);
    return b;
}

#endif
