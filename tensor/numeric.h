/* ember — numbers element by element: dtype conversion (round to nearest
 * even), the Philox4x32-10 generator that every device shares, and the two
 * tools of CPU loops over contiguous elements (the FMA target, and splitting
 * a range over OpenMP threads). For kernels, and for layers that read or
 * write raw tensor data (data's dense tensors, optim's CPU loops, the tests). Not installed. */
#ifndef EMBER_TENSOR_NUMERIC_H
#define EMBER_TENSOR_NUMERIC_H

#include "tensor/tensor.h"

/* ---- per-element conversion (tensor/convert.c) ----------------------------- */
double em__load(const void *p, em_dtype dt);
void em__store(void *p, em_dtype dt, double v);   /* rounds to nearest even; ints truncate toward 0 */
/* Contiguous bulk conversion of n elements (vectorized for f32<->f16/bf16). */
void em__convert_n(void *dst, em_dtype ddt, const void *src, em_dtype sdt, int64_t n);
uint16_t em__f32_to_bf16(float f);
float em__bf16_to_f32(uint16_t h);
uint16_t em__f32_to_f16(float f);
float em__f16_to_f32(uint16_t h);

/* ---- Philox4x32-10 (tensor/rng.c) ------------------------------------------
 * The four 32-bit outputs for counter `counter` under key `seed`. Identical on
 * every device: CUDA kernels implement the same function. */
void em__philox(uint64_t seed, uint64_t counter, uint32_t out[4]);
/* 16 consecutive blocks at once: x[j] = em__philox(seed, first + j), the same
 * bits (AVX-512 lanes where available). */
void em__philox_batch16(uint64_t seed, uint64_t first, uint32_t x[16][4]);
/* The full-width generator (128-bit counter, 64-bit key), as in Random123. */
void em__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* u in [0,1) from 24 random bits: (x >> 8) * 2^-24 (exactly representable in f32). */
static inline float em__u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }


/* ---- CPU loops over contiguous elements ---------------------------------------
 * EM__FMA_TARGET compiles a function for AVX2+FMA (x86; nothing elsewhere), and
 * em__cpu_has_fma says whether this CPU runs it: together they give loops whose
 * multiply-adds are fused exactly where torch's vectorized kernels fuse them. */
#if defined(__x86_64__) || defined(__i386__)
#define EM__FMA_TARGET __attribute__((target("avx2,fma")))
static inline bool em__cpu_has_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
#define EM__FMA_TARGET
static inline bool em__cpu_has_fma(void)
{
#ifdef __FP_FAST_FMAF
    return true;
#else
    return false;
#endif
}
#endif
#define EM__MADD_PLAIN(a, b, c) ((a) * (b) + (c))

/* EM__WIDE_VECTORS, placed right after a kernel file's includes whose floating-point loops
 * are element-wise (no `omp simd reduction(+ ...)`, so the vector width cannot
 * change a result's bits): vectorize with 512-bit registers where -march
 * gives AVX-512. gcc's tuning for recent Intel cores (and -march=native on
 * them) stops at 256 bits; the compute-bound element-wise kernels (GELU and
 * its backward, conversions, AdamW) then run at about half the width the
 * core has. Measured on a Xeon with AMX (docs/PERFORMANCE.md, issue 17): GELU
 * forward 1.5x, backward 1.4x. Without AVX-512 it changes nothing. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define EM__WIDE_VECTORS _Pragma("GCC target(\"prefer-vector-width=512\")")
#else
#define EM__WIDE_VECTORS
#endif
/* The same for one function of a file that also holds reductions whose bits
 * depend on the width (k_reduce.c's column sums): not inlined, since a caller's
 * own preference would win once the function is inlined into it. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define EM__WIDE_VECTORS_FN __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define EM__WIDE_VECTORS_FN
#endif
/* The converse, for a reduction in a file under EM__WIDE_VECTORS whose bits were
 * fixed at gcc's default width for recent Intel cores (256 bits: 8 partial sums
 * for f32, 4 for f64, then gcc's horizontal tree): k_sdpa.c's softmax sums. Not
 * inlined, for the same reason. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define EM__NARROW_VECTORS_FN __attribute__((target("prefer-vector-width=256"), noinline))
#else
#define EM__NARROW_VECTORS_FN
#endif

/* Runs BODY with int64_t variables b, e bound to pieces of [0, n) on OpenMP
 * threads (one piece when n < grain or inside a parallel region). Pieces start
 * on multiples of 64 elements. The includer includes <omp.h>. */
#define EM__PARALLEL_RANGE(n_, grain_, BODY)                                                         \
    do {                                                                                            \
        int64_t em__n = (n_), em__nt = em__n / (grain_);                                            \
        if (em__nt > em_num_threads()) em__nt = em_num_threads();                                   \
        if (em__nt <= 1 || omp_in_parallel()) {                                                     \
            int64_t b = 0, e = em__n;                                                               \
            BODY;                                                                                   \
        } else {                                                                                    \
            _Pragma("omp parallel num_threads((int)em__nt)") {                                      \
                int64_t em__t = omp_get_thread_num(), em__T = omp_get_num_threads();                \
                int64_t b = em__t == 0 ? 0 : (em__n * em__t / em__T) & ~(int64_t)63;                \
                int64_t e = em__t == em__T - 1 ? em__n : (em__n * (em__t + 1) / em__T) & ~(int64_t)63; \
                if (b < e) { BODY; }                                                                \
            }                                                                                       \
        }                                                                                           \
    } while (0)

#endif
