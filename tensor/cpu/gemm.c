/* ember — the CPU's one GEMM interface (DESIGN.md §2 "Threads and GEMM").
 *
 * em_cpu_gemm computes C = alpha * op(A) op(B) + beta * C on row-major
 * matrices and picks the library per call:
 *
 *   - f64: OpenBLAS (cblas_dgemm) always; oneDNN has no f64 GEMM.
 *   - f32: oneDNN (dnnl_sgemm) when this build has it, except where OpenBLAS
 *     was measured faster (docs/PERFORMANCE.md, "## ops (issue 2)"):
 *       1. tiny products, m*n*k < 64^3: oneDNN's per-call overhead dominates
 *          (at 16^3 OpenBLAS is ~3x faster, at 32^3 ~1.4x);
 *       2. n < 4 (e.g. a 2-class head, [1024,768] x [768,2]): OpenBLAS ~1.7x;
 *       3. B transposed with k >= 2048 and n <= 1024 (the DistilBERT FFN
 *          output projection x[1024,3072] @ W[768,3072]^T): OpenBLAS ~1.1x.
 *       4. B transposed (a Linear's forward, x @ W^T) with m < 1024 rows, on
 *          the full thread pool: OpenBLAS 1.0-2.5x in a sweep of m 32..768
 *          against n, k in {256, 768, 1024, 3072} (40 of 42 shapes; oneDNN
 *          falls to 87-109 GFLOP/s at m = 768, OpenBLAS holds 176-199);
 *       5. A transposed (a Linear's weight gradient dY^T X) with m <= 256,
 *          on the full pool: OpenBLAS 1.1-2x in the same sweep (oneDNN wins
 *          from m = 512).
 *     Rules 4 and 5 were measured with 2 threads; inside an OpenMP region
 *     (the batched matmul's single-threaded calls) they do not apply.
 *     Everywhere else measured (squares 64..2048, the DistilBERT linear
 *     shapes at 1024 tokens forward and backward, attention-sized batches)
 *     oneDNN is 5-50% faster.
 *   - oneDNN failing (it may allocate scratch) falls back to OpenBLAS.
 *   - EMBER_GEMM=openblas in the environment turns oneDNN off (read once);
 *     EMBER_GEMM=onednn forces it for every f32 call (for measuring);
 *     anything else means the rule. Under valgrind, without EMBER_GEMM,
 *     oneDNN is off: its JIT kernels read up to 32 bytes past the ends of
 *     oneDNN's own packing buffers (harmless on hardware, "Invalid read"
 *     under memcheck).
 *
 * Threads: both libraries run on libgomp's pool. Called inside an OpenMP
 * parallel region (the batched matmul does this for small matrices), each
 * runs single-threaded in the calling thread.
 *
 * Sizes: CBLAS takes int; dims above INT_MAX are split into chunks. Leading
 * dimensions must fit in an int (the matmul kernel packs operands otherwise).
 */
#include "tensor/cpu/cpu.h"

#include "ember_config.h"

#include <cblas.h>
#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#if EMBER_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>   /* RUNNING_ON_VALGRIND: a no-op instruction sequence on hardware */
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

bool em__gemm_prefers_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k);

/* EMBER_GEMM, read on first use (a race only reads the same value twice).
 * A build without oneDNN ignores it: OpenBLAS takes every product. */
int em__gemm_mode(void)
{
    static int mode = EM__GEMM_UNSET;
    int m = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (m == EM__GEMM_UNSET) {
        const char *e = getenv("EMBER_GEMM");
        if (!e) m = RUNNING_ON_VALGRIND ? EM__GEMM_OPENBLAS : EM__GEMM_RULE;
        else m = !strcmp(e, "openblas") ? EM__GEMM_OPENBLAS : !strcmp(e, "onednn") ? EM__GEMM_ONEDNN : EM__GEMM_RULE;
        __atomic_store_n(&mode, m, __ATOMIC_RELAXED);
    }
    return m;
}

/* The documented rule above; exposed (internal) so bench/ops.c can report it. */
bool em__gemm_prefers_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k)
{
    (void)trans_a;
#if EMBER_HAVE_ONEDNN
    int mode = em__gemm_mode();
    if (mode != EM__GEMM_RULE) return mode == EM__GEMM_ONEDNN;
    if ((double)m * (double)n * (double)k < 64.0 * 64.0 * 64.0) return false;
    if (n < 4) return false;
    if (trans_b && k >= 2048 && n <= 1024) return false;
    if (!omp_in_parallel()) {
        if (trans_b && !trans_a && m < 1024) return false;
        if (trans_a && !trans_b && m <= 256) return false;
    }
    return true;
#else
    (void)trans_b; (void)m; (void)n; (void)k;
    return false;
#endif
}

/* One CBLAS call; every size fits in an int here. */
static void blas_call(em_gemm_type t, bool ta, bool tb, int m, int n, int k, double alpha,
                      const void *a, int lda, const void *b, int ldb, double beta, void *c, int ldc)
{
    enum CBLAS_TRANSPOSE oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
    if (t == EM_GEMM_F32)
        cblas_sgemm(CblasRowMajor, oa, ob, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc);
    else
        cblas_dgemm(CblasRowMajor, oa, ob, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* OpenBLAS for any sizes: splits m, n and k into chunks that fit in an int
 * (k chunks accumulate into C with beta = 1 after the first). */
static void blas_gemm(em_gemm_type t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                      const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    const int64_t chunk = (int64_t)1 << 30;
    size_t es = t == EM_GEMM_F32 ? 4 : 8;
    const char *A = a, *B = b;
    char *C = c;
    for (int64_t i = 0; i < m; i += chunk) {
        int mi = (int)(m - i < chunk ? m - i : chunk);
        for (int64_t j = 0; j < n; j += chunk) {
            int nj = (int)(n - j < chunk ? n - j : chunk);
            for (int64_t p = 0; p < k; p += chunk) {
                int kp = (int)(k - p < chunk ? k - p : chunk);
                /* element (i,p) of op(A) and (p,j) of op(B) */
                const char *ap = A + es * (size_t)(ta ? p * lda + i : i * lda + p);
                const char *bp = B + es * (size_t)(tb ? j * ldb + p : p * ldb + j);
                blas_call(t, ta, tb, mi, nj, kp, alpha, ap, (int)lda, bp, (int)ldb,
                          p == 0 ? beta : 1.0, C + es * (size_t)(i * ldc + j), (int)ldc);
            }
        }
    }
}

void em_cpu_gemm(em_gemm_type t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                 double beta, void *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        /* C = beta * C; libraries differ on k = 0, so do it here. */
        size_t es = t == EM_GEMM_F32 ? 4 : 8;
        for (int64_t i = 0; i < m; i++) {
            char *row = (char *)c + es * (size_t)(i * ldc);
            if (beta == 0) { memset(row, 0, es * (size_t)n); continue; }
            for (int64_t j = 0; j < n; j++) {
                if (t == EM_GEMM_F32) ((float *)row)[j] *= (float)beta;
                else ((double *)row)[j] *= beta;
            }
        }
        return;
    }
#if EMBER_HAVE_ONEDNN
    if (t == EM_GEMM_F32 && em__gemm_prefers_onednn(trans_a, trans_b, m, n, k)) {
        dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, (float)alpha,
                                     a, lda, b, ldb, (float)beta, c, ldc);
        if (s == dnnl_success) return;
    }
#endif
    blas_gemm(t, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
