/* ember — EM_OP_MATMUL on the CPU (contract in tensor/ops.h).
 *
 * in[0] = A [B..,M,K], in[1] = B [B..,K,N], both with out's batch dims (stride 0
 * where broadcast), out[0] = C [B..,M,N] contiguous, all of one float dtype.
 *
 * Each batch matrix goes to em_cpu_gemm (gemm.c) as a pointer, a trans flag
 * and a leading dimension, whenever its layout allows ("direct"): one of its
 * two strides is 1 and the other a valid leading dimension. Otherwise, and
 * for f16 (computed in f32: emulation), the matrix is packed into a contiguous
 * scratch buffer of the compute type first. bf16 computes in bf16 with f32
 * accumulation through oneDNN (gemm_bf16.c) where the CPU runs it natively,
 * and like f16 elsewhere. Broadcast (stride-0) batch dims
 * are never materialized: a matrix shared by every batch index is packed
 * once, and A [B..,M,K] times a shared B is folded into one [B*M,K] GEMM when
 * A's rows are evenly strided across its batch dims.
 *
 * Threads: many small matrices run in parallel over the batch, each GEMM
 * single-threaded; large ones run one after another and GEMM threads itself.
 */
#include "tensor/cpu/cpu.h"

#include <limits.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Parallelize over the batch (each GEMM single-threaded) when the matrices
 * are small (below this many flops, 2*M*N*K, each), or when there are at
 * least BATCH_PER_THREAD of them per thread, so they share out evenly.
 * Measured here (docs/PERFORMANCE.md): 96 products of 128x128x64 run ~1.9x
 * faster that way than one after another with GEMM's own threads, and 96 of
 * 384^3 still ~1.1x faster. */
#define BATCH_PARALLEL_FLOPS (2.0 * 192 * 192 * 192)
#define BATCH_PER_THREAD 4

typedef struct mat {
    const char *p;          /* element 0 of the view */
    em_dtype dt;
    int64_t rows, cols;     /* the matrix: [M,K] for A, [K,N] for B */
    int64_t s0, s1;         /* its strides, in elements */
    const int64_t *bs;      /* batch strides (aligned with C's batch dims) */
    bool invariant;         /* the same matrix for every batch index */
    bool direct;            /* handed to GEMM without packing */
    bool trans;             /* GEMM flag: stored as the transpose */
    int64_t ld;             /* GEMM leading dimension */
    const void *packed;     /* pre-packed once when invariant and not direct */
} mat;

/* Whether a rows x cols matrix with strides (s0, s1) is a row-major matrix
 * (trans = false) or the transpose of one (trans = true) with a leading
 * dimension the BLAS accepts. Size-1 dims may carry any stride. */
bool em__gemm_layout(int64_t rows, int64_t cols, int64_t s0, int64_t s1, bool *trans, int64_t *ld)
{
    int64_t minr = rows > 1 ? rows : 1, minc = cols > 1 ? cols : 1;
    if (cols == 1 || s1 == 1) {
        int64_t l = rows <= 1 ? minc : s0;
        if (l >= minc && l <= INT_MAX) { *trans = false; *ld = l; return true; }
    }
    if (rows == 1 || s0 == 1) {
        int64_t l = cols <= 1 ? minr : s1;
        if (l >= minr && l <= INT_MAX) { *trans = true; *ld = l; return true; }
    }
    return false;
}

static em_dtype compute_dtype(em_dtype dt)
{
    if (dt == EM_BF16 && em_cpu_gemm_bf16_fast()) return EM_BF16;
    return dt == EM_F64 ? EM_F64 : EM_F32;
}

/* Packing stores the transpose when the matrix is column-contiguous, so the
 * copy reads and writes rows (and converts with em__convert_n). */
static bool pack_transposed(const mat *m) { return m->s0 == 1 && m->s1 != 1 && m->rows > 1; }

/* Copies matrix m at element offset `off` into dst (contiguous, compute
 * dtype), in the orientation pack_transposed() tells. */
static void pack(void *dst, const mat *m, int64_t off)
{
    em_dtype cdt = compute_dtype(m->dt);
    size_t es = em_dtype_size(m->dt), ces = em_dtype_size(cdt);
    bool tr = pack_transposed(m);
    int64_t nr = tr ? m->cols : m->rows, nc = tr ? m->rows : m->cols;
    int64_t sr = tr ? m->s1 : m->s0, sc = tr ? m->s0 : m->s1;
    const char *src = m->p + (size_t)off * es;
    for (int64_t r = 0; r < nr; r++) {
        char *d = (char *)dst + (size_t)(r * nc) * ces;
        const char *s = src + (size_t)(r * sr) * es;
        if (sc == 1 || nc == 1) {
            if (m->dt == cdt) memcpy(d, s, (size_t)nc * ces);
            else em__convert_n(d, cdt, s, m->dt, nc);
        } else if (m->dt == EM_F32) {
            for (int64_t c = 0; c < nc; c++) ((float *)d)[c] = ((const float *)s)[c * sc];
        } else if (m->dt == EM_F64) {
            for (int64_t c = 0; c < nc; c++) ((double *)d)[c] = ((const double *)s)[c * sc];
        } else {
            for (int64_t c = 0; c < nc; c++) em__store(d + (size_t)c * ces, cdt, em__load(s + (size_t)(c * sc) * es, m->dt));
        }
    }
}

static void mat_init(mat *m, em_tensor *t, int nb)
{
    m->p = em_data_ptr(t);
    m->dt = t->dtype;
    m->rows = t->shape[nb];
    m->cols = t->shape[nb + 1];
    m->s0 = t->stride[nb];
    m->s1 = t->stride[nb + 1];
    m->bs = t->stride;
    m->invariant = true;
    for (int d = 0; d < nb; d++)
        if (t->shape[d] > 1 && t->stride[d] != 0) m->invariant = false;
    m->direct = t->dtype == compute_dtype(t->dtype) && em__gemm_layout(m->rows, m->cols, m->s0, m->s1, &m->trans, &m->ld);
    m->packed = NULL;
}

/* GEMM geometry of a matrix that is packed (not direct). */
static void packed_geometry(mat *m)
{
    m->trans = pack_transposed(m);
    m->ld = m->trans ? m->rows : m->cols;
}

/* Whether A's batch dims continue its row stride, so that A is one matrix of
 * batch*M rows; on success *s0 is the row stride of that matrix. */
static bool rows_fold(const em_tensor *a, int nb, int64_t *s0)
{
    int64_t rows = a->shape[nb], stride = a->stride[nb];
    bool have = rows > 1;
    for (int d = nb - 1; d >= 0; d--) {
        if (a->shape[d] == 1) continue;
        if (!have) { stride = a->stride[d]; rows = a->shape[d]; have = true; continue; }
        if (a->stride[d] != rows * stride) return false;
        rows *= a->shape[d];
    }
    *s0 = stride;
    return true;
}

typedef struct plan {
    mat A, B;
    char *c;                 /* out data */
    em_dtype cdt, odt;       /* compute and out dtypes */
    int nb;
    const int64_t *bshape;   /* C's batch dims */
    int64_t M, N, K;
    /* per-thread scratch, in elements of the compute type: A at 0 (when it is
     * packed per batch), B at sb, C at sc (when out is not the compute type) */
    int64_t sb, sc, slot;
    bool into;   /* MATMUL i[0]: C += A B (f32/f64, C the compute type) */
} plan;

/* One batch matrix: C[bi] = A[bi] B[bi], with this thread's scratch. Fails
 * only when the bf16 GEMM's f32 fallback cannot get memory. */
static em_status run_one(const plan *P, int64_t bi, char *scratch)
{
    int64_t oa = 0, ob = 0, rem = bi;
    for (int d = P->nb - 1; d >= 0; d--) {
        int64_t i = rem % P->bshape[d];
        rem /= P->bshape[d];
        oa += i * P->A.bs[d];
        ob += i * P->B.bs[d];
    }
    size_t ces = em_dtype_size(P->cdt), oes = em_dtype_size(P->odt);
    const void *pa, *pb;
    char *sa = scratch, *sb = scratch + (size_t)P->sb * ces, *sc = scratch + (size_t)P->sc * ces;
    if (P->A.direct) pa = P->A.p + (size_t)oa * em_dtype_size(P->A.dt);
    else if (P->A.packed) pa = P->A.packed;
    else { pack(sa, &P->A, oa); pa = sa; }
    if (P->B.direct) pb = P->B.p + (size_t)ob * em_dtype_size(P->B.dt);
    else if (P->B.packed) pb = P->B.packed;
    else { pack(sb, &P->B, ob); pb = sb; }
    char *c = P->c + (size_t)(bi * P->M * P->N) * oes;
    bool direct_c = P->odt == P->cdt;
    if (P->cdt == EM_BF16)   /* out is bf16 too: written directly */
        return em_cpu_gemm_bf16(P->A.trans, P->B.trans, P->M, P->N, P->K, pa, P->A.ld, pb, P->B.ld, c, EM_BF16, P->N);
    em_cpu_gemm(P->cdt == EM_F64 ? EM_GEMM_F64 : EM_GEMM_F32, P->A.trans, P->B.trans, P->M, P->N, P->K,
                1.0, pa, P->A.ld, pb, P->B.ld, P->into ? 1.0 : 0.0, direct_c ? c : sc, P->N);
    if (!direct_c) em__convert_n(c, P->odt, sc, P->cdt, P->M * P->N);
    return EM_OK;
}

/* MATMUL i[0] with bf16 A and B into an f32 C (a weight gradient into its f32
 * .grad under autocast): one bf16 GEMM adding into C. */
static int matmul_bf16_into_f32(em_tensor *a, em_tensor *b, em_tensor *c)
{
    int64_t M = c->shape[0], N = c->shape[1], K = a->shape[1];
    bool ta, tb;
    int64_t lda, ldb;
    if (c->ndim != 2 || !em_is_contiguous(c) || !em__gemm_layout(M, K, a->stride[0], a->stride[1], &ta, &lda) ||
        !em__gemm_layout(K, N, b->stride[0], b->stride[1], &tb, &ldb))
        return em__fail(EM_ERR_UNSUPPORTED, "cpu: matmul into f32 from bf16 takes 2-d GEMM-ready operands");
    if (M == 0 || N == 0 || K == 0) return EM_OK;
    return em_cpu_gemm_bf16_acc(ta, tb, M, N, K, em_data_ptr(a), lda, em_data_ptr(b), ldb, em_data_ptr(c), N);
}

int em_cpu_MATMUL(const em_kargs *k)
{
    em_tensor *a = k->in[0], *b = k->in[1], *c = k->out[0];
    if (k->i[0] && a->dtype == EM_BF16 && b->dtype == EM_BF16 && c->dtype == EM_F32) return matmul_bf16_into_f32(a, b, c);
    int nd = c->ndim, nb = nd - 2;
    plan P = {.c = em_data_ptr(c), .odt = c->dtype, .cdt = compute_dtype(c->dtype), .nb = nb,
              .bshape = c->shape, .M = c->shape[nd - 2], .N = c->shape[nd - 1], .K = a->shape[nd - 1],
              .into = k->i[0] != 0};
    if (P.into && (P.odt != P.cdt || !em_is_contiguous(c)))
        return em__fail(EM_ERR_UNSUPPORTED, "cpu: matmul adds into %s output only when contiguous f32/f64",
                        em_dtype_name(c->dtype));
    int64_t batch = 1;
    for (int d = 0; d < nb; d++) batch *= c->shape[d];
    if (batch == 0 || P.M == 0 || P.N == 0) return EM_OK;
    if (P.K == 0) {   /* empty sum: zeros (all-zero bits in every float dtype); into: nothing to add */
        if (!P.into) memset(P.c, 0, (size_t)(batch * P.M * P.N) * em_dtype_size(c->dtype));
        return EM_OK;
    }
    mat_init(&P.A, a, nb);
    mat_init(&P.B, b, nb);

    /* A [B..,M,K] times one shared B: one GEMM of batch*M rows. */
    int64_t fold_s0;
    if (batch > 1 && P.B.invariant && rows_fold(a, nb, &fold_s0)) {
        P.A.rows = P.M = batch * P.M;
        P.A.s0 = fold_s0;
        P.A.direct = a->dtype == P.cdt && em__gemm_layout(P.A.rows, P.A.cols, P.A.s0, P.A.s1, &P.A.trans, &P.A.ld);
        P.A.invariant = true;
        P.nb = 0;
        batch = 1;
    }
    if (!P.A.direct) packed_geometry(&P.A);
    if (!P.B.direct) packed_geometry(&P.B);

    size_t ces = em_dtype_size(P.cdt);
    /* pre-pack operands shared by every batch index once */
    bool share_a = !P.A.direct && P.A.invariant && batch > 1, share_b = !P.B.direct && P.B.invariant && batch > 1;
    char *shared = NULL;
    if (share_a || share_b) {
        shared = em__malloc((size_t)((share_a ? P.M * P.K : 0) + (share_b ? P.K * P.N : 0)) * ces);
        if (!shared) return EM_ERR_OOM;
        char *q = shared;
        if (share_a) { pack(q, &P.A, 0); P.A.packed = q; q += (size_t)(P.M * P.K) * ces; }
        if (share_b) { pack(q, &P.B, 0); P.B.packed = q; }
    }
    P.sb = !P.A.direct && !P.A.packed ? P.M * P.K : 0;
    P.sc = P.sb + (!P.B.direct && !P.B.packed ? P.K * P.N : 0);
    P.slot = P.sc + (P.odt == P.cdt ? 0 : P.M * P.N);

    double flops = 2.0 * (double)P.M * (double)P.N * (double)P.K;
    int nthreads = 1;
#ifdef _OPENMP
    int maxt = omp_get_max_threads();
    if (batch > 1 && !omp_in_parallel() && (flops < BATCH_PARALLEL_FLOPS || batch >= (int64_t)BATCH_PER_THREAD * maxt))
        nthreads = maxt;
    if (nthreads > batch) nthreads = (int)batch;
#endif
    size_t slot = (size_t)P.slot * ces;
    char *scratch = NULL;
    if (slot) {
        scratch = em__malloc(slot * (size_t)nthreads);
        if (!scratch) { em__free(shared); return EM_ERR_OOM; }
    }
    em_status st = EM_OK;
    if (nthreads > 1) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int64_t bi = 0; bi < batch; bi++) {
#ifdef _OPENMP
            char *mine = scratch ? scratch + slot * (size_t)omp_get_thread_num() : NULL;
#else
            char *mine = scratch;
#endif
            em_status e = run_one(&P, bi, mine);
            if (e != EM_OK) {
#pragma omp atomic write
                st = e;
            }
        }
    } else {
        for (int64_t bi = 0; bi < batch && st == EM_OK; bi++) st = run_one(&P, bi, scratch);
    }
    em__free(scratch);
    em__free(shared);
    return st;
}
