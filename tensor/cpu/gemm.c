/* ember — the CPU's one GEMM interface (DESIGN.md §2 "Threads and GEMM").
 *
 * em_cpu_gemm computes C = alpha * op(A) op(B) + beta * C on row-major
 * matrices and picks the library per call:
 *
 *   - f64: OpenBLAS (cblas_dgemm) always; oneDNN has no f64 GEMM.
 *   - f32, by EMBER_GEMM (read once):
 *       unset or "auto": the library measured fastest for the call's class
 *         (gemm_pick.c: timed on first use, kept in a file so that the choice
 *         is the same in every run and on every rank of the machine);
 *       "openblas": OpenBLAS only (oneDNN never runs, bf16 included);
 *       "onednn": dnnl_sgemm for every f32 call;
 *       "mkl": oneMKL's cblas_sgemm for every f32 call, where oneMKL is loaded
 *         (mkl.c: EMBER_MKL or meson -Dmkl_root; else warned about, auto);
 *       "rule": the table below, measured by hand on one AMD EPYC (Zen 4) in
 *         issue 2 and kept for comparison (and for results bit-identical to
 *         runs before issue 17). On an Intel Xeon (Sapphire Rapids) it is
 *         wrong for about half the fine-tuning shapes (docs/PERFORMANCE.md).
 *     Under valgrind, without EMBER_GEMM, oneDNN is off: its JIT kernels read
 *     up to 32 bytes past the ends of oneDNN's own packing buffers (harmless
 *     on hardware, "Invalid read" under memcheck). An unknown value is warned
 *     about once and means auto.
 *   - oneDNN failing (it may allocate scratch) falls back to OpenBLAS, as
 *     does MKL for a size past INT_MAX (its LP64 interface).
 *
 * The "rule" table (AMD EPYC Zen 4, 2 threads): oneDNN, except OpenBLAS
 *   1. for tiny products, m*n*k < 64^3; 2. for n < 4; 3. for B transposed
 *   with k >= 2048 and n <= 1024; and, outside an OpenMP region, 4. for B
 *   transposed with m < 1024 and 5. for A transposed with m <= 256.
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
#include <stdio.h>
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


bool em__on_valgrind(void) { return RUNNING_ON_VALGRIND != 0; }

/* EMBER_GEMM, read on first use (a race only reads the same value twice).
 * A build without oneDNN ignores it: OpenBLAS takes every product. */
int em__gemm_mode(void)
{
    static int mode = EM__GEMM_UNSET;
    int m = __atomic_load_n(&mode, __ATOMIC_ACQUIRE);
    if (m != EM__GEMM_UNSET) return m;
    const char *e = getenv("EMBER_GEMM");
    char why[600] = "";   /* said by the one thread that sets the mode */
    if (!e || !*e) m = RUNNING_ON_VALGRIND ? EM__GEMM_OPENBLAS : EM__GEMM_AUTO;
    else if (!strcmp(e, "openblas")) m = EM__GEMM_OPENBLAS;
    else if (!strcmp(e, "onednn")) m = EM__GEMM_ONEDNN;
    else if (!strcmp(e, "rule")) m = EM__GEMM_RULE;
    else if (!strcmp(e, "mkl") && em__mkl_available()) m = EM__GEMM_MKL;
    else if (!strcmp(e, "mkl")) {
        snprintf(why, sizeof why, "ember: EMBER_GEMM=mkl, but oneMKL is not loaded (%s); using auto\n",
                 em__mkl_status());
        m = EM__GEMM_AUTO;
    } else {
        if (strcmp(e, "auto") != 0)
            snprintf(why, sizeof why, "ember: EMBER_GEMM=%.200s is not one of auto, openblas, onednn, mkl, rule; "
                                      "using auto\n", e);
        m = EM__GEMM_AUTO;
    }
    int unset = EM__GEMM_UNSET;
    if (__atomic_compare_exchange_n(&mode, &unset, m, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        if (why[0]) fputs(why, stderr);
        return m;
    }
    return unset;   /* another thread set it first (the same value) and said why */
}

/* The hand-made rule above (EMBER_GEMM=rule); bench/ops.c reports it too. */
bool em__gemm_prefers_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k)
{
    (void)trans_a;
#if EMBER_HAVE_ONEDNN
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
    em_num_threads();   /* the libraries size themselves by this thread's OpenMP count */
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
    if (t == EM_GEMM_F32) {
        int lib = EM__GEMM_OPENBLAS;
#if EMBER_HAVE_ONEDNN
        switch (em__gemm_mode()) {
        case EM__GEMM_AUTO: lib = em__gemm_pick(trans_a, trans_b, m, n, k, a, lda, b, ldb); break;
        case EM__GEMM_RULE:
            lib = em__gemm_prefers_onednn(trans_a, trans_b, m, n, k) ? EM__GEMM_ONEDNN : EM__GEMM_OPENBLAS;
            break;
        case EM__GEMM_ONEDNN: lib = EM__GEMM_ONEDNN; break;
        case EM__GEMM_MKL: lib = EM__GEMM_MKL; break;
        default: break;
        }
#endif
        em__gemm_f32_with(lib, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    blas_gemm(t, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void em__gemm_f32_with(int lib, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                       const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc)
{
    if (lib == EM__GEMM_MKL && em__mkl_sgemm(trans_a, trans_b, m, n, k, (float)alpha, a, lda, b, ldb, (float)beta, c, ldc))
        return;
#if EMBER_HAVE_ONEDNN
    if (lib == EM__GEMM_ONEDNN && dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, (float)alpha, a, lda,
                                              b, ldb, (float)beta, c, ldc) == dnnl_success)
        return;
#endif
    blas_gemm(EM_GEMM_F32, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
