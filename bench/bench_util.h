/* ember benchmarks — the helpers every bench program shares: clocks, the
 * median of repeated timings, paths under ../shared/data, and the DistilBERT
 * train-step setup (train_step, amp). Header-only (static inline): each bench
 * is one executable. */
#ifndef EMBER_BENCH_UTIL_H
#define EMBER_BENCH_UTIL_H

#include "ember.h"

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
/* The GEMM libraries this run uses (tensor/cpu/gemm_pick.c's identity: CPU,
 * OpenBLAS, oneDNN, and oneMKL where loaded), as an "info,libraries,..." CSV
 * line or a "libraries: ..." line, so that every table says what it ran on. */
void em__gemm_identity(char *buf, size_t n);
static inline void bench_print_libraries(bool csv)
{
    char id[1024];
    em__gemm_identity(id, sizeof id);
    for (char *p = id; *p; p++)
        if (*p == ',') *p = ' ';   /* one CSV field */
    printf(csv ? "info,libraries,%s\n" : "libraries: %s\n", id);
}

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

/* The command line of a bench with --quick and one output switch out_flag
 * ("--csv", "--tsv"): sets *out and *quick; anything else prints "usage: name
 * [out_flag] [--quick]" and exits 2. */
static inline void bench_flags(int argc, char **argv, const char *name, const char *out_flag, bool *out, bool *quick)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], out_flag)) *out = true;
        else if (!strcmp(argv[i], "--quick")) *quick = true;
        else {
            fprintf(stderr, "usage: %s [%s] [--quick]\n", name, out_flag);
            exit(2);
        }
    }
}

/* ---- the DistilBERT train step (bench/train_step, bench/amp) ------------------------ */
typedef struct bench_config {
    const char *name;
    int64_t dim, layers, heads, ffn, vocab, seq, batch;
} bench_config;

/* A fresh DistilBertForSequenceClassification of c with 2 labels, seed 0; NULL
 * after printing "who: <error>" when it cannot be built. */
static inline em_distilbert_seqcls *bench_distilbert(const bench_config *c, const char *who)
{
    em_set_seed(0);
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&(em_distilbert_config){
        .vocab_size = c->vocab, .n_layers = c->layers, .n_heads = c->heads, .dim = c->dim, .hidden_dim = c->ffn,
        .num_labels = 2});
    if (!m) fprintf(stderr, "%s: %s\n", who, em_last_error());
    return m;
}

/* c's fixed batch, new tensors the caller releases: input ids [batch, seq], a
 * xorshift stream in [1, vocab); labels [batch], i % 2. */
static inline void bench_batch(const bench_config *c, em_tensor **input_ids, em_tensor **labels)
{
    int64_t B = c->batch, S = c->seq;
    int64_t *ids = malloc(sizeof *ids * (size_t)(B * S)), *lab = malloc(sizeof *lab * (size_t)B);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < B * S; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = 1 + (int64_t)(x % (uint64_t)(c->vocab - 1));
    }
    for (int64_t i = 0; i < B; i++) lab[i] = i % 2;
    *input_ids = em_from_data(ids, 2, (int64_t[]){B, S}, EM_I64);
    *labels = em_from_data(lab, 1, (int64_t[]){B}, EM_I64);
    free(ids), free(lab);
}

#endif
