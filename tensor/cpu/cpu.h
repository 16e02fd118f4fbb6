/* ember — the CPU backend's kernels: em_cpu_<OP> implements EM_OP_<OP>
 * (contract in tensor/ops.h);
 * views have no kernel. Files: k_elementwise.c (creation, copy, binary,
 * unary, where; k_gelu_bf16.c its bf16 GELU rows), k_reduce.c, k_matmul.c +
 * gemm.c + gemm_bf16.c, k_linear.c, k_nn.c (softmax, layer_norm, embedding,
 * dropout, cross_entropy), k_index.c (cat, index_select, gather, scatter_add),
 * k_sdpa.c (sdpa and its backward; k_sdpa_amx.c bf16 on AMX, k_sdpa.h their
 * shared helpers), k_fused.c (adamw_step, unscale), ../rng.c (random). */
#ifndef EMBER_CPU_H
#define EMBER_CPU_H


#include "tensor/tensor_internal.h"

#define EM_CPU_DECL(name) int em_cpu_##name(const em_kargs *k);
EM_KERNEL_OP_LIST(EM_CPU_DECL)
#undef EM_CPU_DECL

/* k_gelu_bf16.c: GELU and GELU_BWD rows on bf16 operands (em_iter_fn; p[0] the
 * output, then x (and dy)), bf16 in and out with f32 math; defined where
 * tensor/bf16x16.h is (EM__HAVE_BF16X16). k_elementwise.c runs them when every
 * operand is bf16. */
void em__gelu_bf16_loop(char **p, const int64_t *s, int64_t n, void *ctx);
void em__gelu_bwd_bf16_loop(char **p, const int64_t *s, int64_t n, void *ctx);

/* Internal GEMM interface (gemm.c): C[m,n] = alpha * op(A) op(B) + beta * C,
 * row-major, lda/ldb/ldc in elements. Picks OpenBLAS or oneDNN per shape. */
typedef enum { EM_GEMM_F32, EM_GEMM_F64 } em_gemm_type;
void em_cpu_gemm(em_gemm_type t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                 double beta, void *c, int64_t ldc);

/* k_elementwise.c: dst = src element by element (dtype conversion included),
 * through the iterator (any strides, transposed inputs in tiles); dst and src
 * have one shape. The COPY kernel's body, for kernels that copy blocks. */
void em__cpu_copy(em_tensor *dst, const em_tensor *src);

/* Which library runs GEMMs (gemm.c): EMBER_GEMM ("auto", the default: measured
 * per class by gemm_pick.c; "openblas"; "onednn"; "mkl", where oneMKL is loaded;
 * "rule": the old hand-made table), read on first use; unset, OpenBLAS alone
 * under valgrind (oneDNN's JIT code confuses it). EM__GEMM_OPENBLAS: oneDNN
 * never runs, bf16 included. The library values double as gemm_pick.c's. */
enum { EM__GEMM_UNSET, EM__GEMM_RULE, EM__GEMM_OPENBLAS, EM__GEMM_ONEDNN, EM__GEMM_AUTO, EM__GEMM_MKL };
int em__gemm_mode(void);
/* true under valgrind (gemm.c; its client request is a no-op sequence on hardware) */
bool em__on_valgrind(void);
/* The fixed table of EMBER_GEMM=rule (gemm.c): true where it sends f32 to oneDNN. */
bool em__gemm_prefers_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k);
/* One f32 GEMM on the library lib (EM__GEMM_OPENBLAS, _ONEDNN or _MKL; oneDNN
 * failing, or MKL not loaded, falls back to OpenBLAS). */
void em__gemm_f32_with(int lib, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                       const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c, int64_t ldc);
/* gemm_pick.c: the library for this call's class (EM__GEMM_OPENBLAS,
 * EM__GEMM_ONEDNN, or EM__GEMM_MKL where oneMKL is loaded), measured on these operands on a miss and persisted;
 * _known: the choice already made for a class (threads as the pick counts
 * them), 0 when none; _size_class: the class of one dimension; _cache_file:
 * the file choices persist in ("" = memory only); _identity: what the file
 * name hashes; _forget: empties the in-memory table and re-reads
 * EMBER_CACHE_DIR on the next miss (tests). */
int em__gemm_pick(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb);
/* The same for a bf16 GEMM with an f32 C, where oneMKL is loaded: EM__GEMM_ONEDNN
 * or EM__GEMM_MKL (line "bf16 ..." of the same file). */
int em__gemm_pick_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                       const void *b, int64_t ldb);
int em__gemm_known(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int threads);
int64_t em__gemm_size_class(int64_t x);
const char *em__gemm_cache_file(void);
void em__gemm_identity(char *buf, size_t n);
/* k_elementwise.c: the FILL size (bytes) from which contiguous rows are written
 * with non-temporal stores (from the L2 size and the thread count). */
int64_t em__fill_stream_bytes(void);
/* The CPU's model name (/proc/cpuinfo's "model name"; "unknown" without one). */
void em__cpu_model(char *buf, size_t n);
void em__gemm_forget(void);
/* oneMKL, loaded at run time where asked for (mkl.c: EMBER_MKL, meson
 * -Dmkl_root): _available loads it on first use (false: not asked for, or it
 * failed, said once on stderr); _version: "" when off; _status: a line for
 * `ember env`; _sgemm: one f32 GEMM, false (nothing done) when off or a size
 * passes INT_MAX. */
bool em__mkl_available(void);
const char *em__mkl_version(void);
const char *em__mkl_status(void);
bool em__mkl_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* bf16 A and B, f32 C = op(A) op(B) + beta C (cblas_gemm_bf16bf16f32); false
 * when off, when this oneMKL lacks it, or when a size passes INT_MAX. */
bool em__mkl_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                       const uint16_t *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* bf16 GEMM (gemm_bf16.c): C[m,n] = op(A) op(B), A and B bf16, f32 accumulation,
 * C of c_dtype (EM_BF16 or EM_F32). _fast: oneDNN runs bf16 natively here (else
 * the call converts to f32 and the matmul kernel prefers its own f32 path). */
bool em_cpu_gemm_bf16_fast(void);
em_status em_cpu_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                           const void *b, int64_t ldb, void *c, em_dtype c_dtype, int64_t ldc);
/* The same with an f32 C added into: C += op(A) op(B) (oneDNN's sum post-op;
 * beta = 1 on the f32 route). Each C element gets the f32 sum of its exact
 * products added once, no bf16 rounding in between. */
em_status em_cpu_gemm_bf16_acc(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                               const void *b, int64_t ldb, float *c, int64_t ldc);
/* A matrix's GEMM layout (k_matmul.c): rows x cols with strides s0, s1 (elements)
 * as a row-major matrix (*trans false) or the transpose of one, leading dim *ld;
 * false when neither stride is 1 (or ld would pass INT_MAX). */
bool em__gemm_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld);
/* One bf16 GEMM with an f32 C on the library lib (EM__GEMM_ONEDNN: the
 * primitive; EM__GEMM_MKL: oneMKL, else the primitive), C = or += (acc); the
 * GEMM picker times the two with it. */
em_status em__gemm_bf16_f32_with(int lib, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a,
                                 int64_t lda, const void *b, int64_t ldb, float *c, int64_t ldc, bool acc);
/* The same with a bf16 bias[n] added to every row of the f32 sum before C's one
 * rounding (oneDNN's bias argument): LINEAR's epilogue in bf16. */
em_status em_cpu_gemm_bf16_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a,
                                int64_t lda, const void *b, int64_t ldb, const uint16_t *bias, void *c,
                                em_dtype c_dtype, int64_t ldc);


#endif
