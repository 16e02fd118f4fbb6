/* bench_ops — throughput of ember's hot CPU ops, against the libraries
 * underneath, in one process (docs/PERFORMANCE.md, "## ops (issue 2)").
 *
 *   GEMM (f32): em_matmul vs cblas_sgemm and dnnl_sgemm called directly on
 *   the same buffers (and oneMKL's cblas_sgemm where ember loaded it), at 512/1024/2048 squares, the DistilBERT linear shapes
 *   (1024 tokens; forward x W^T, backward dY W and dY^T X) and the attention
 *   batches (96 heads x 128 tokens). GFLOP/s, ember/best, share of the
 *   418 GFLOP/s nominal AVX-512 peak and of an FMA loop measured here.
 *
 *   Memory-bound ops on 16M f32 elements: em_add, em_gelu, em_softmax (rows
 *   of 1024), em_layer_norm (D = 768), a transposed copy (em_contiguous of a
 *   [4096,4096] transpose), in GB/s counting bytes read + written,
 *   against the fastest plain copy (memcpy on 1 thread, memcpy split over
 *   all threads, an OpenMP copy loop) measured in the same run.
 *
 * Every figure is the median of several timed repetitions after warmup; the
 * contenders of one row are timed round-robin, so that a busy moment on a
 * shared machine slows them alike.
 * Usage: bench_ops [--tsv] [--quick]   (--tsv: tab-separated, for
 * bench/ops_peer.py). The environment is used as it is (OPENBLAS_CORETYPE,
 * EM_NUM_THREADS/OMP_NUM_THREADS) and printed.
 */
#include "ember.h"
#include "tensor/tensor_internal.h"
#include "tensor/cpu/cpu.h"

#include "ember_config.h"
#include "bench/bench_util.h"

#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if EMBER_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif


/* The library ember ran a case on: EMBER_GEMM's choice, or the one measured
 * for the case's class (gemm_pick.c; a batch runs one thread per matrix). */
static const char *picked(bool ta, bool tb, int64_t m, int64_t n, int64_t k)
{
    switch (em__gemm_mode()) {
    case EM__GEMM_OPENBLAS: return "openblas (forced)";
    case EM__GEMM_ONEDNN: return "onednn (forced)";
    case EM__GEMM_RULE: return em__gemm_prefers_onednn(ta, tb, m, n, k) ? "onednn (rule)" : "openblas (rule)";
    case EM__GEMM_MKL: return "mkl (forced)";
    default: break;
    }
    int lib = em__gemm_known(ta, tb, m, n, k, em_num_threads());
    if (!lib) lib = em__gemm_known(ta, tb, m, n, k, 1);
    return lib == EM__GEMM_ONEDNN ? "onednn" : lib == EM__GEMM_OPENBLAS ? "openblas" : lib == EM__GEMM_MKL ? "mkl" : "?";
}

#define NOMINAL_PEAK 418.0   /* GFLOP/s, AVX-512 FMA, 2 cores (DESIGN.md) */

static bool tsv, quick;

/* Median seconds of each of n functions on the same ctx, timed round-robin
 * (one call of each per round) so that a busy moment on the machine slows
 * every contender alike and ratios stay fair. 2 warmup calls each, then
 * enough rounds for about 0.4 s per function (5..41; fewer with --quick). */
typedef void (*bench_fn)(void *ctx);
#define MAX_ROUNDS 41
static void median_times(int n, const bench_fn *fns, void *const *ctxs, double *out)
{
    double est = 0;
    for (int f = 0; f < n; f++) {
        fns[f](ctxs[f]);
        double t0 = bench_now();
        fns[f](ctxs[f]);
        est = fmax(est, bench_now() - t0);
    }
    int reps = est > 0 ? (int)(0.4 / est) : MAX_ROUNDS;
    int lo = quick ? 3 : 5, hi = quick ? 9 : MAX_ROUNDS;
    reps = reps < lo ? lo : reps > hi ? hi : reps;
    double t[4][MAX_ROUNDS];
    for (int r = 0; r < reps; r++)
        for (int f = 0; f < n; f++) {
            double t0 = bench_now();
            fns[f](ctxs[f]);
            t[f][r] = bench_now() - t0;
        }
    for (int f = 0; f < n; f++) {
        qsort(t[f], (size_t)reps, sizeof(double), bench_cmp_double);
        out[f] = t[f][reps / 2];
    }
}

/* ---- measured FMA peak ------------------------------------------------------ */

__attribute__((target("avx512f"))) static double fma_loop_avx512(long iters)
{
    double sink = 0;
#pragma omp parallel reduction(+ : sink)
    {
        __m512 acc[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
        for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
        for (long it = 0; it < iters; it++)
            for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
        __m512 s = acc[0];
        for (int i = 1; i < 12; i++) s = _mm512_add_ps(s, acc[i]);
        sink += _mm512_reduce_add_ps(s);
    }
    return sink;
}

/* GFLOP/s of 12 independent FMA chains per thread on zmm registers. */
static double measured_peak(void)
{
    if (!__builtin_cpu_supports("avx512f")) return 0;
    long iters = quick ? 5000000 : 40000000;
    fma_loop_avx512(iters / 10);
    double t0 = bench_now();
    volatile double s = fma_loop_avx512(iters);
    (void)s;
    double t = bench_now() - t0;
    return 2.0 * 16 * 12 * (double)iters * omp_get_max_threads() / t / 1e9;
}

/* ---- GEMM --------------------------------------------------------------------- */

typedef struct gemm_case {
    const char *name;
    int64_t batch, m, n, k;
    bool ta, tb;
} gemm_case;

typedef struct gemm_ctx {
    const gemm_case *c;
    em_tensor *a, *b;            /* operands as ember sees them (views when transposed) */
    const float *pa, *pb;        /* the same storage for the direct calls */
    float *pc;
} gemm_ctx;

static void run_ember(void *p)
{
    gemm_ctx *g = p;
    EM_SCOPE { em_matmul(g->a, g->b); }
}

static void run_openblas(void *p)
{
    gemm_ctx *g = p;
    const gemm_case *c = g->c;
    int lda = (int)(c->ta ? c->m : c->k), ldb = (int)(c->tb ? c->k : c->n);
    for (int64_t i = 0; i < c->batch; i++)
        cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, (int)c->m,
                    (int)c->n, (int)c->k, 1.0f, g->pa + i * c->m * c->k, lda, g->pb + i * c->k * c->n, ldb, 0.0f,
                    g->pc + i * c->m * c->n, (int)c->n);
}

#if EMBER_HAVE_ONEDNN
static void run_onednn(void *p)
{
    gemm_ctx *g = p;
    const gemm_case *c = g->c;
    int64_t lda = c->ta ? c->m : c->k, ldb = c->tb ? c->k : c->n;
    for (int64_t i = 0; i < c->batch; i++)
        dnnl_sgemm(c->ta ? 'T' : 'N', c->tb ? 'T' : 'N', c->m, c->n, c->k, 1.0f, g->pa + i * c->m * c->k, lda,
                   g->pb + i * c->k * c->n, ldb, 0.0f, g->pc + i * c->m * c->n, c->n);
}
#endif

/* oneMKL's sgemm, where ember loaded it (tensor/cpu/mkl.c: EMBER_MKL, -Dmkl_root) */
static void run_mkl(void *p)
{
    gemm_ctx *g = p;
    const gemm_case *c = g->c;
    int64_t lda = c->ta ? c->m : c->k, ldb = c->tb ? c->k : c->n;
    for (int64_t i = 0; i < c->batch; i++)
        em__mkl_sgemm(c->ta, c->tb, c->m, c->n, c->k, 1.0f, g->pa + i * c->m * c->k, lda, g->pb + i * c->k * c->n, ldb,
                      0.0f, g->pc + i * c->m * c->n, c->n);
}

/* A [batch, rows, cols] operand, or its last two dims transposed as a view. */
static em_tensor *operand(int64_t batch, int64_t rows, int64_t cols, bool trans, const float **data)
{
    em_tensor *t = batch > 1 ? em_rand(EM_SHAPE(batch, trans ? cols : rows, trans ? rows : cols), EM_F32, EM_CPU)
                             : em_rand(EM_SHAPE(trans ? cols : rows, trans ? rows : cols), EM_F32, EM_CPU);
    *data = em_data_ptr(t);
    return trans ? em_transpose(t, -1, -2) : t;
}

static void bench_gemm(double peak)
{
    static const gemm_case cases[] = {
        {"square 512", 1, 512, 512, 512, false, false},
        {"square 1024", 1, 1024, 1024, 1024, false, false},
        {"square 2048", 1, 2048, 2048, 2048, false, false},
        {"attn/out fwd x W^T", 1, 1024, 768, 768, false, true},
        {"attn/out dX = dY W", 1, 1024, 768, 768, false, false},
        {"attn/out dW = dY^T X", 1, 768, 768, 1024, true, false},
        {"ffn1 fwd x W^T", 1, 1024, 3072, 768, false, true},
        {"ffn1 dX = dY W", 1, 1024, 768, 3072, false, false},
        {"ffn1 dW = dY^T X", 1, 3072, 768, 1024, true, false},
        {"ffn2 fwd x W^T", 1, 1024, 768, 3072, false, true},
        {"ffn2 dX = dY W", 1, 1024, 3072, 768, false, false},
        {"ffn2 dW = dY^T X", 1, 768, 3072, 1024, true, false},
        /* all-MiniLM-L6-v2 fine-tuned with unpadding (bench/finetune): about 425 real tokens a batch */
        {"minilm fwd x W^T", 1, 425, 384, 384, false, true},
        {"minilm ffn1 fwd", 1, 425, 1536, 384, false, true},
        {"minilm ffn2 fwd", 1, 425, 384, 1536, false, true},
        {"minilm ffn2 dX", 1, 425, 1536, 384, false, false},
        {"minilm ffn1 dW", 1, 1536, 384, 425, true, false},
        {"minilm ffn2 dW", 1, 384, 1536, 425, true, false},
        {"attn scores QK^T [96]", 96, 128, 128, 64, false, true},
        {"attn context PV [96]", 96, 128, 64, 128, false, false},
    };
    if (tsv) {
        printf("gemm\tcase\tbatch\tm\tn\tk\tember\topenblas\tonednn\tlib\tmkl\n");
    } else {
        printf("\nGEMM, f32, GFLOP/s (median)   nominal peak %.0f, measured FMA peak %.0f; oneMKL: %s\n", NOMINAL_PEAK,
               peak, em__mkl_status());
        printf("%-22s %5s %5s %5s %4s | %7s %8s %7s %7s | %6s %6s %6s | %s\n", "case", "m", "n", "k", "bat", "ember",
               "openblas", "onednn", "mkl", "e/best", "%418", "%meas", "picked");
    }
    const bool mkl = em__mkl_available();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const gemm_case *c = &cases[i];
        if (quick && c->m * c->n * c->k > (int64_t)1100 * 1100 * 1100) continue;
        double gemm_best = 0, t_e, t_b, t_d = INFINITY, t_m = INFINITY;
        EM_SCOPE {
            gemm_ctx g = {.c = c};
            g.a = operand(c->batch, c->m, c->k, c->ta, &g.pa);
            g.b = operand(c->batch, c->k, c->n, c->tb, &g.pb);
            g.pc = malloc(sizeof(float) * (size_t)(c->batch * c->m * c->n));
            memset(g.pc, 0, sizeof(float) * (size_t)(c->batch * c->m * c->n));
            /* ember, OpenBLAS, then oneDNN and oneMKL where present (an absent one: INFINITY) */
            bench_fn fns[4] = {run_ember, run_openblas};
            int nf = 2, at_d = -1, at_m = -1;
#if EMBER_HAVE_ONEDNN
            at_d = nf, fns[nf++] = run_onednn;
#endif
            if (mkl) at_m = nf, fns[nf++] = run_mkl;
            void *ctxs[] = {&g, &g, &g, &g};
            double t[4] = {0, 0, INFINITY, INFINITY};
            median_times(nf, fns, ctxs, t);
            t_e = t[0];
            t_b = t[1];
            if (at_d >= 0) t_d = t[at_d];
            if (at_m >= 0) t_m = t[at_m];
            free(g.pc);
        }
        double flop = 2.0 * (double)(c->batch * c->m * c->n * c->k);
        double ge = flop / t_e / 1e9, gb = flop / t_b / 1e9, gd = flop / t_d / 1e9, gm = flop / t_m / 1e9;
        gemm_best = fmax(gb, fmax(gd, gm));
        const char *lib = picked(c->ta, c->tb, c->m, c->n, c->k);
        if (tsv)
            printf("gemm\t%s\t%lld\t%lld\t%lld\t%lld\t%.1f\t%.1f\t%.1f\t%s\t%.1f\n", c->name, (long long)c->batch,
                   (long long)c->m, (long long)c->n, (long long)c->k, ge, gb, gd, lib, gm);
        else
            printf("%-22s %5lld %5lld %5lld %4lld | %7.1f %8.1f %7.1f %7.1f | %6.2f %5.0f%% %5.0f%% | %s\n", c->name,
                   (long long)c->m, (long long)c->n, (long long)c->k, (long long)c->batch, ge, gb, gd, gm,
                   ge / gemm_best, 100 * ge / NOMINAL_PEAK, peak > 0 ? 100 * ge / peak : 0.0, lib);
        fflush(stdout);
    }
}

/* ---- memory-bound ops ---------------------------------------------------------- */

#define MEM_N ((int64_t)16 << 20)   /* 16M f32 elements = 64 MiB per tensor */

typedef struct mem_ctx {
    em_tensor *x, *y, *w, *b;
    char *src, *dst;
    int which;
} mem_ctx;

enum { M_ADD, M_GELU, M_SOFTMAX, M_LAYER_NORM, M_TRANSPOSE, M_MEMCPY1, M_MEMCPYN, M_COPYLOOP };

static void run_mem(void *p)
{
    mem_ctx *m = p;
    size_t nbytes = (size_t)MEM_N * 4;
    switch (m->which) {
    case M_ADD: EM_SCOPE { em_add(m->x, m->y); } break;
    case M_GELU: EM_SCOPE { em_gelu(m->x); } break;
    case M_SOFTMAX: EM_SCOPE { em_softmax(m->x, -1); } break;
    case M_LAYER_NORM: EM_SCOPE { em_layer_norm(m->x, m->w, m->b, 1e-12, NULL, NULL); } break;
    case M_TRANSPOSE: EM_SCOPE { em_contiguous(em_transpose(m->x, 0, 1)); } break;
    case M_MEMCPY1: memcpy(m->dst, m->src, nbytes); break;
    case M_MEMCPYN:
#pragma omp parallel
        {
            int nt = omp_get_num_threads(), id = omp_get_thread_num();
            size_t chunk = (nbytes / (size_t)nt + 63) & ~(size_t)63;
            size_t lo = chunk * (size_t)id, hi = lo + chunk < nbytes ? lo + chunk : nbytes;
            if (lo < hi) memcpy(m->dst + lo, m->src + lo, hi - lo);
        }
        break;
    case M_COPYLOOP: {
        const float *src = (const float *)m->src;
        float *dst = (float *)m->dst;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < MEM_N; i++) dst[i] = src[i];
        break;
    }
    }
}

static bool have_kernel(em_op op)
{
    const em_backend *be = em__backend(EM_DEVICE_CPU);
    return be && be->kernels[op];
}

/* Bandwidth of the ops against the fastest of three plain copies, the copy
 * timed round-robin with each op so that their ratio shares one moment. */
static void bench_memory(void)
{
    mem_ctx cp = {0}, m = {0};
    size_t nbytes = (size_t)MEM_N * 4;
    cp.src = aligned_alloc(64, nbytes);
    cp.dst = aligned_alloc(64, nbytes);
    memset(cp.src, 1, nbytes);
    memset(cp.dst, 0, nbytes);
    static const struct { const char *name; int which; } copies[] = {
        {"memcpy, 1 thread", M_MEMCPY1}, {"memcpy, all threads", M_MEMCPYN}, {"copy loop, all threads", M_COPYLOOP}};
    mem_ctx cc[3] = {cp, cp, cp};
    bench_fn fns[3] = {run_mem, run_mem, run_mem};
    void *ctxs[3];
    double t[3], bw[3];
    for (int i = 0; i < 3; i++) { cc[i].which = copies[i].which; ctxs[i] = &cc[i]; }
    median_times(3, fns, ctxs, t);
    int best = 0;
    for (int i = 0; i < 3; i++) {
        bw[i] = 2.0 * (double)nbytes / t[i] / 1e9;
        if (bw[i] > bw[best]) best = i;
    }
    cp.which = copies[best].which;
    if (tsv) {
        printf("mem\tcase\telements\tbytes\tgbps\tcopy_gbps\n");
        for (int i = 0; i < 3; i++)
            printf("mem\t%s\t%lld\t%.0f\t%.2f\t%.2f\n", copies[i].name, (long long)MEM_N, 2.0 * (double)nbytes, bw[i],
                   bw[best]);
    } else {
        printf("\nMemory-bound ops, f32, 16M elements, GB/s of bytes read + written (median);\n"
               "/copy: against the fastest plain copy (%s), timed in the same rounds\n", copies[best].name);
        printf("%-30s %10s %8s | %7s %7s %7s\n", "op", "elements", "MB", "GB/s", "copy", "/copy");
        for (int i = 0; i < 3; i++)
            printf("%-30s %10lld %8.0f | %7.1f %7.1f %7.2f\n", copies[i].name, (long long)MEM_N, 2.0 * nbytes / 1e6,
                   bw[i], bw[best], bw[i] / bw[best]);
    }
    static const struct { const char *name; int which; em_op op; int64_t rows, cols; double bytes_per_elt; } ops[] = {
        {"em_add (a + b)", M_ADD, EM_OP_ADD, 1, MEM_N, 12},          /* read 2, write 1 */
        {"em_gelu", M_GELU, EM_OP_GELU, 1, MEM_N, 8},
        {"em_softmax [16384,1024] dim -1", M_SOFTMAX, EM_OP_SOFTMAX, 16384, 1024, 8},
        {"em_layer_norm [21845,768]", M_LAYER_NORM, EM_OP_LAYER_NORM, 21845, 768, 8},
        {"contiguous(x^T) [4096,4096]", M_TRANSPOSE, EM_OP_COPY, 4096, 4096, 8},   /* power-of-two rows */
    };
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        if (!have_kernel(ops[i].op)) {
            if (tsv) printf("mem\t%s\t\t\t\t\n", ops[i].name);
            else printf("%-30s   (no CPU kernel in this build)\n", ops[i].name);
            continue;
        }
        double gbps, cbps, bytes, n = (double)(ops[i].rows * ops[i].cols);
        EM_SCOPE {
            m.which = ops[i].which;
            m.x = em_rand(EM_SHAPE(ops[i].rows, ops[i].cols), EM_F32, EM_CPU);
            m.y = em_rand(EM_SHAPE(ops[i].rows, ops[i].cols), EM_F32, EM_CPU);
            m.w = em_rand(EM_SHAPE(ops[i].cols), EM_F32, EM_CPU);
            m.b = em_rand(EM_SHAPE(ops[i].cols), EM_F32, EM_CPU);
            bytes = ops[i].bytes_per_elt * n;
            bench_fn f2[2] = {run_mem, run_mem};
            void *c2[2] = {&m, &cp};
            double t2[2];
            median_times(2, f2, c2, t2);
            gbps = bytes / t2[0] / 1e9;
            cbps = 2.0 * (double)nbytes / t2[1] / 1e9;
        }
        if (tsv) printf("mem\t%s\t%.0f\t%.0f\t%.2f\t%.2f\n", ops[i].name, n, bytes, gbps, cbps);
        else printf("%-30s %10.0f %8.0f | %7.1f %7.1f %7.2f\n", ops[i].name, n, bytes / 1e6, gbps, cbps, gbps / cbps);
        fflush(stdout);
    }
    free(cp.src);
    free(cp.dst);
}

/* ---- main ---------------------------------------------------------------------- */

/* The fixed cost of one op on a tiny tensor, everything but the arithmetic:
 * the front-end checks (the handle's magic word among them), dispatch, the
 * allocation and the scope's release into the header quarantine. ns per op,
 * median of 7 runs of 200,000 ops (em_add of two [8] f32 tensors, and a view,
 * each inside its own EM_SCOPE). */
static void bench_overhead(void)
{
    em_tensor *a = em_ones(EM_SHAPE(8), EM_F32, EM_CPU), *b = em_ones(EM_SHAPE(8), EM_F32, EM_CPU);
    const int n = quick ? 50000 : 200000, reps = 7;
    const char *names[2] = {"op overhead: em_add [8] f32", "op overhead: em_transpose view"};
    for (int which = 0; which < 2; which++) {
        double t[7];
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now();
            for (int i = 0; i < n; i++)
                EM_SCOPE {
                    if (which == 0) em_add(a, b);
                    else em_transpose(a, 0, 0);
                }
            t[r] = (bench_now() - t0) / n * 1e9;
        }
        for (int i = 1; i < reps; i++)   /* insertion sort for the median */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
        if (tsv) printf("overhead\t%s\t%.1f\n", names[which], t[reps / 2]);
        else printf("%-34s %8.1f ns/op (median of %d x %d)\n", names[which], t[reps / 2], reps, n);
    }
    em_release(a);
    em_release(b);
}

int main(int argc, char **argv)
{
    bench_flags(argc, argv, "bench_ops", "--tsv", &tsv, &quick);
    em_set_seed(1);
    int threads = em_num_threads();   /* sets OpenMP's thread count first */
    char model[256];
    em__cpu_model(model, sizeof model);
    const char *ct = getenv("OPENBLAS_CORETYPE");
    double peak = measured_peak();
    char dnnl_ver[32] = "none";
#if EMBER_HAVE_ONEDNN
    const dnnl_version_t *v = dnnl_version();
    snprintf(dnnl_ver, sizeof dnnl_ver, "%d.%d.%d", v->major, v->minor, v->patch);
#endif
    if (tsv) {
        printf("info\tcpu\t%s\ninfo\tthreads\t%d\ninfo\tOPENBLAS_CORETYPE\t%s\ninfo\topenblas_core\t%s\ninfo\tonednn\t%s\n"
               "info\tmeasured_peak\t%.1f\n", model, threads, ct ? ct : "(unset)", openblas_get_corename(),
               dnnl_ver, peak);
    } else {
        printf("bench_ops: %s, %d threads, OPENBLAS_CORETYPE=%s (OpenBLAS core %s), oneDNN %s\n", model,
               threads, ct ? ct : "(unset)", openblas_get_corename(), dnnl_ver);
    }
    bench_overhead();
    if (getenv("BENCH_OPS_OVERHEAD_ONLY")) return 0;   /* for a quick before/after of the fixed cost */
    bench_gemm(peak);
    bench_memory();
    return 0;
}
