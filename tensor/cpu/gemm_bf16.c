/* ember — bf16 GEMM on the CPU (DESIGN.md §2 "Threads and GEMM", §3 "amp").
 *
 * em_cpu_gemm_bf16 computes C = op(A) op(B) with A and B in bf16, products
 * accumulated in f32, and C written as bf16 (rounded to nearest even once,
 * at the end) or as f32. It runs oneDNN's matmul primitive: Debian's
 * OpenBLAS 0.3.21 has no cblas_sbgemm, and oneDNN 2.6 has no bf16 GEMM
 * function, only the primitive. On a CPU with AVX-512 BF16 (vdpbf16ps) the
 * primitive runs at about twice the f32 rate (docs/PERFORMANCE.md, "amp").
 *
 * Primitives are costly to build (tens of microseconds), so each thread keeps
 * a small cache of them keyed by the call's geometry, with memory objects
 * whose data handles are set per call. A transposed operand is described by
 * its strides, so it is never copied. When the primitive cannot be built, or
 * oneDNN picked its reference implementation (slower than converting), the
 * call converts to f32 and goes through em_cpu_gemm instead: slower, same
 * result up to f32 summation order. As in gemm.c, EMBER_GEMM=openblas, or
 * running under valgrind without EMBER_GEMM (memcheck flags oneDNN's JIT
 * kernels), turns oneDNN off here too: every call then takes that route, and
 * the matmul kernel computes bf16 in f32.
 *
 * Tolerance: against an f32 GEMM of the same (bf16-valued) inputs, the f32
 * result differs only by summation order; rounded to bf16 the result is
 * within one bf16 ulp (2^-8 relative) of it. tests/test_amp.c checks 1e-2
 * relative (of the row's magnitude) against an f32 GEMM of the f32 inputs.
 *
 * With oneMKL loaded (mkl.c), the calls with an f32 C and no bias (weight
 * gradients, the activation-gradient sink) may run on its
 * cblas_gemm_bf16bf16f32 instead, where the GEMM picker measured it faster
 * for the class (gemm_pick.c, "bf16" lines) or EMBER_GEMM=mkl forces it.
 *
 * f16 is not handled here: an f16 matmul on the CPU converts to f32 and runs
 * the f32 GEMM (emulation; k_matmul.c).
 */
#include "tensor/cpu/cpu.h"

#include "ember_config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if EMBER_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

/* ---- the f32 route (no oneDNN, or no usable primitive) ------------------------------ */

/* Converts the stored rows x cols block at p (leading dim ld) to f32, contiguous. */
static void to_f32(float *dst, const void *p, int64_t rows, int64_t cols, int64_t ld)
{
    for (int64_t r = 0; r < rows; r++)
        em__convert_n(dst + r * cols, EM_F32, (const uint16_t *)p + r * ld, EM_BF16, cols);
}

static em_status via_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                         const void *b, int64_t ldb, const uint16_t *bias, void *c, em_dtype cdt, int64_t ldc, bool acc)
{
    /* stored shapes: A is [m,k] or, transposed, [k,m]; B is [k,n] or [n,k] */
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    bool direct_c = cdt == EM_F32;
    size_t na = (size_t)(ar * ac), nb = (size_t)(br * bc), nc = direct_c ? 0 : (size_t)(m * n);
    float *buf = em__malloc((na + nb + nc) * sizeof(float));
    if (!buf) return EM_ERR_OOM;
    float *fa = buf, *fb = buf + na, *fc = direct_c ? c : buf + na + nb;
    to_f32(fa, a, ar, ac, lda);
    to_f32(fb, b, br, bc, ldb);
    em_cpu_gemm(EM_GEMM_F32, ta, tb, m, n, k, 1.0, fa, ac, fb, bc, acc ? 1.0 : 0.0, fc, direct_c ? ldc : n);
    if (bias)   /* added to the f32 result, then rounded once */
        for (int64_t r = 0; r < m; r++) {
            float *row = fc + r * (direct_c ? ldc : n);
            for (int64_t j = 0; j < n; j++) row[j] += em__bf16_to_f32(bias[j]);
        }
    if (!direct_c)
        for (int64_t r = 0; r < m; r++) em__convert_n((uint16_t *)c + r * ldc, EM_BF16, fc + r * n, EM_F32, n);
    em__free(buf);
    return EM_OK;
}

#if EMBER_HAVE_ONEDNN

static dnnl_engine_t engine;
static bool fast;   /* oneDNN runs bf16 natively on this CPU */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
    if (em__gemm_mode() == EM__GEMM_OPENBLAS) return;   /* oneDNN off: engine stays NULL */
    if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        engine = NULL;
        return;
    }
    /* AVX-512 BF16 (or AMX); without it oneDNN emulates bf16, slower than f32 */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    fast = (isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) == (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

#define CACHE_SLOTS 48

typedef struct prim_entry {
    bool used, usable;            /* usable: a non-reference primitive was built */
    bool ta, tb, acc;             /* acc: C += (a sum post-op), f32 C only */
    bool bias;                    /* + a bf16 bias [n] per row, before the one rounding */
    em_dtype cdt;
    int64_t m, n, k, lda, ldb, ldc;
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, dst, bia;
} prim_entry;

/* Per thread: calls from inside an OpenMP region (the batched matmul) run
 * concurrently, and a stream or a memory object must not be shared. */
static _Thread_local prim_entry cache[CACHE_SLOTS];
static _Thread_local unsigned victim;
static _Thread_local dnnl_stream_t stream;

static void entry_clear(prim_entry *e)
{
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->src) dnnl_memory_destroy(e->src);
    if (e->wei) dnnl_memory_destroy(e->wei);
    if (e->dst) dnnl_memory_destroy(e->dst);
    if (e->bia) dnnl_memory_destroy(e->bia);
    memset(e, 0, sizeof *e);
}

/* Builds the primitive for one geometry into e (usable = false on failure, or
 * when oneDNN would run its reference kernel). */
static void entry_build(prim_entry *e)
{
    /* strides in elements: a transposed operand is the transpose of a row-major [.., ld] matrix */
    dnnl_dims_t ad = {e->m, e->k}, as = {e->ta ? 1 : e->lda, e->ta ? e->lda : 1};
    dnnl_dims_t bd = {e->k, e->n}, bs = {e->tb ? 1 : e->ldb, e->tb ? e->ldb : 1};
    dnnl_dims_t cd = {e->m, e->n}, cs = {e->ldc, 1};
    dnnl_dims_t zd = {1, e->n}, zs = {e->n, 1};
    dnnl_memory_desc_t amd, bmd, cmd, zmd;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_data_type_t cty = e->cdt == EM_BF16 ? dnnl_bf16 : dnnl_f32;
    if (e->acc && (dnnl_primitive_attr_create(&attr) != dnnl_success || dnnl_post_ops_create(&po) != dnnl_success ||
                   dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
                   dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)) {
        if (po) dnnl_post_ops_destroy(po);
        if (attr) dnnl_primitive_attr_destroy(attr);
        e->usable = false;
        return;
    }
    bool ok = dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs) == dnnl_success &&
              dnnl_memory_desc_init_by_strides(&cmd, 2, cd, cty, cs) == dnnl_success &&
              (!e->bias || dnnl_memory_desc_init_by_strides(&zmd, 2, zd, dnnl_bf16, zs) == dnnl_success) &&
              dnnl_matmul_desc_init(&md, &amd, &bmd, e->bias ? &zmd : NULL, &cmd) == dnnl_success &&
              dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL) == dnnl_success;
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (ok) {
        const char *impl = NULL;
        ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
             strncmp(impl, "ref", 3) != 0;
    }
    ok = ok && dnnl_primitive_create(&e->prim, pd) == dnnl_success &&
         dnnl_memory_create(&e->src, &amd, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&e->wei, &bmd, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         dnnl_memory_create(&e->dst, &cmd, engine, DNNL_MEMORY_NONE) == dnnl_success &&
         (!e->bias || dnnl_memory_create(&e->bia, &zmd, engine, DNNL_MEMORY_NONE) == dnnl_success);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (!ok) {
        prim_entry keep = *e;
        keep.prim = NULL, keep.src = keep.wei = keep.dst = keep.bia = NULL;
        entry_clear(e);
        *e = keep;   /* remember the geometry as unusable */
    }
    e->usable = ok;
}

static prim_entry *lookup(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                          int64_t ldc, em_dtype cdt, bool acc, bool bias)
{
    for (int i = 0; i < CACHE_SLOTS; i++) {
        prim_entry *e = &cache[i];
        if (e->used && e->m == m && e->n == n && e->k == k && e->lda == lda && e->ldb == ldb && e->ldc == ldc &&
            e->ta == ta && e->tb == tb && e->cdt == cdt && e->acc == acc && e->bias == bias)
            return e;
    }
    prim_entry *e = &cache[victim++ % CACHE_SLOTS];
    entry_clear(e);
    *e = (prim_entry){.used = true, .ta = ta, .tb = tb, .acc = acc, .bias = bias, .cdt = cdt, .m = m, .n = n,
                      .k = k, .lda = lda, .ldb = ldb, .ldc = ldc};
    entry_build(e);
    return e;
}

bool em_cpu_gemm_bf16_fast(void)
{
    pthread_once(&once, init);
    return engine && fast;
}

static em_status onednn_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                             const void *b, int64_t ldb, const uint16_t *bias, void *c, em_dtype c_dtype, int64_t ldc,
                             bool acc)
{
    if (m <= 0 || n <= 0 || (acc && k <= 0)) return EM_OK;
    if (k <= 0 && bias) return via_f32(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, c_dtype, ldc, acc);
    if (k <= 0) {   /* an empty sum: zeros (all-zero bits in bf16 and f32) */
        for (int64_t r = 0; r < m; r++) memset((char *)c + (size_t)(r * ldc) * em_dtype_size(c_dtype), 0,
                                               (size_t)n * em_dtype_size(c_dtype));
        return EM_OK;
    }
    pthread_once(&once, init);
    if (engine && !stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success)
        stream = NULL;
    prim_entry *e = engine && stream ? lookup(trans_a, trans_b, m, n, k, lda, ldb, ldc, c_dtype, acc, bias != NULL) : NULL;
    if (e && e->usable) {
        dnnl_memory_set_data_handle(e->src, (void *)a);
        dnnl_memory_set_data_handle(e->wei, (void *)b);
        dnnl_memory_set_data_handle(e->dst, c);
        if (bias) dnnl_memory_set_data_handle(e->bia, (void *)bias);
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->src}, {DNNL_ARG_WEIGHTS, e->wei}, {DNNL_ARG_DST, e->dst},
                                   {DNNL_ARG_BIAS, e->bia}};
        if (dnnl_primitive_execute(e->prim, stream, bias ? 4 : 3, args) == dnnl_success &&
            dnnl_stream_wait(stream) == dnnl_success)
            return EM_OK;
    }
    return via_f32(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, c_dtype, ldc, acc);
}

#else /* no oneDNN: always the f32 route */

bool em_cpu_gemm_bf16_fast(void) { return false; }

static em_status onednn_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                             const void *b, int64_t ldb, const uint16_t *bias, void *c, em_dtype c_dtype, int64_t ldc,
                             bool acc)
{
    if (m <= 0 || n <= 0) return EM_OK;
    return via_f32(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, c_dtype, ldc, acc);
}

#endif

em_status em__gemm_bf16_f32_with(int lib, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a,
                                 int64_t lda, const void *b, int64_t ldb, float *c, int64_t ldc, bool acc)
{
    if (m <= 0 || n <= 0 || (acc && k <= 0)) return EM_OK;
    if (lib == EM__GEMM_MKL && k > 0 && em__mkl_gemm_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, acc ? 1.0f : 0.0f, c, ldc))
        return EM_OK;
    return onednn_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, NULL, c, EM_F32, ldc, acc);
}

/* oneMKL takes the f32-C calls (no bias) where it is loaded and picked (or
 * forced, EMBER_GEMM=mkl); every other call, and every call without it, is
 * oneDNN's as before. EMBER_GEMM=openblas/onednn keep their meaning. */
static em_status gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                           const void *b, int64_t ldb, const uint16_t *bias, void *c, em_dtype c_dtype, int64_t ldc,
                           bool acc)
{
    if (c_dtype == EM_F32 && !bias && m > 0 && n > 0 && k > 0 && em__mkl_available()) {
        int mode = em__gemm_mode(), lib = EM__GEMM_ONEDNN;
        if (mode == EM__GEMM_MKL) lib = EM__GEMM_MKL;
        else if (mode == EM__GEMM_AUTO) lib = em__gemm_pick_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb);
        if (lib == EM__GEMM_MKL) return em__gemm_bf16_f32_with(lib, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, acc);
    }
    return onednn_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, c_dtype, ldc, acc);
}

em_status em_cpu_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                           const void *b, int64_t ldb, void *c, em_dtype c_dtype, int64_t ldc)
{
    return gemm_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, NULL, c, c_dtype, ldc, false);
}

em_status em_cpu_gemm_bf16_acc(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                               const void *b, int64_t ldb, float *c, int64_t ldc)
{
    return gemm_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, NULL, c, EM_F32, ldc, true);
}

em_status em_cpu_gemm_bf16_bias(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a,
                                int64_t lda, const void *b, int64_t ldb, const uint16_t *bias, void *c,
                                em_dtype c_dtype, int64_t ldc)
{
    return gemm_bf16(trans_a, trans_b, m, n, k, a, lda, b, ldb, bias, c, c_dtype, ldc, false);
}
