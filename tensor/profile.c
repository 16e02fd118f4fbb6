/* ember — per-op kernel timing (tensor.h "profiling"). Off, dispatch pays one
 * predictable branch; on, it reads the monotonic clock around each kernel and
 * adds the time to its op's counters (relaxed atomics: ops may run on several
 * threads). CPU kernels are timed whole; a CUDA kernel's time is its launch
 * only (the device runs asynchronously). A kernel that runs another op's
 * kernel directly is counted once, under its own op. EMBER_PROFILE=1 in the
 * environment turns it on at load and prints the table at exit. */
#include "tensor/tensor_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

bool em__profile_on;
static uint64_t prof_ns[EM_NUM_OPS], prof_calls[EM_NUM_OPS];

uint64_t em__profile_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void em__profile_add(em_op op, uint64_t ns)
{
    __atomic_fetch_add(&prof_ns[op], ns, __ATOMIC_RELAXED);
    __atomic_fetch_add(&prof_calls[op], 1, __ATOMIC_RELAXED);
}

void em_profile_enable(bool on) { __atomic_store_n(&em__profile_on, on, __ATOMIC_RELAXED); }

void em_profile_reset(void)
{
    for (int op = 0; op < EM_NUM_OPS; op++) {
        __atomic_store_n(&prof_ns[op], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&prof_calls[op], 0, __ATOMIC_RELAXED);
    }
}

void em_profile_print(FILE *f, const char *title)
{
    if (!f) f = stderr;
    int order[EM_NUM_OPS], n = 0;
    uint64_t ns[EM_NUM_OPS], total = 0;
    for (int op = 0; op < EM_NUM_OPS; op++) {
        ns[op] = __atomic_load_n(&prof_ns[op], __ATOMIC_RELAXED);
        total += ns[op];
        if (__atomic_load_n(&prof_calls[op], __ATOMIC_RELAXED)) order[n++] = op;
    }
    for (int i = 1; i < n; i++)   /* by time, largest first (insertion sort: < 100 ops) */
        for (int j = i; j > 0 && ns[order[j]] > ns[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    fprintf(f, "ember profile: kernel time by op%s%s\n%-24s %10s %11s %7s\n", title ? " - " : "", title ? title : "",
            "op", "calls", "ms", "share");
    for (int i = 0; i < n; i++)
        fprintf(f, "%-24s %10llu %11.3f %6.1f%%\n", em_op_table[order[i]].name,
                (unsigned long long)__atomic_load_n(&prof_calls[order[i]], __ATOMIC_RELAXED), ns[order[i]] / 1e6,
                total ? 100.0 * (double)ns[order[i]] / (double)total : 0.0);
    fprintf(f, "%-24s %10s %11.3f\n", "total", "", total / 1e6);
}

static void print_at_exit(void) { em_profile_print(stderr, "the whole process (EMBER_PROFILE)"); }

__attribute__((constructor)) static void profile_from_env(void)
{
    const char *e = getenv("EMBER_PROFILE");
    if (e && *e && strcmp(e, "0")) {
        em__profile_on = true;
        atexit(print_at_exit);
    }
}
