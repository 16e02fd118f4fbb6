/* ember — the CPU kernels of fused attention: op SDPA (contract in
 * tensor/ops.h) and its fused backward, op SDPA_BWD.
 *
 * bf16 on a CPU with AMX goes to k_sdpa_amx.c instead (same blocks, softmax,
 * dropout and masking, shared through k_sdpa.h; products on tile multiplies).
 *
 * One thread takes one (batch, head) pair at a time. It keeps K and V (and
 * their transposes) in scratch as the compute type -- f32 for f32, bf16 and
 * f16 inputs (loaded with em__convert_n, rounded once on store), f64 for f64
 * -- with rows and columns zero-padded to a multiple of 16, and runs the
 * query rows in blocks of QB as small GEMMs (gemm_* below; fused multiply-adds
 * for bf16 and f16 inputs, a product then a sum for f32, as before issue 17):
 *
 *   forward:   S = scale Qb K^T (keys j >= len set to the dtype's lowest value,
 *              as the composed masked_fill); P = softmax(S); lse = logsumexp(S);
 *              Pd = dropout(P); Ob = Pd V
 *   backward:  S, P, Pd recomputed as the forward did; dV += Pd^T dOb;
 *              dP = dropout(dOb V^T); D = rowsum(P dP); dS = P (dP - D) (0 at
 *              masked keys); dQb = scale dS K; dK += scale dS^T Qb
 *
 * Nothing [Sq,Sk]-sized is kept: scratch is O((QB + D) Sk) per thread.
 *
 * Dropout: element e of the [B,H,Sq,Sk] weights (row-major) uses Philox
 * counter offset + e/4, lane e%4, kept iff (bits >> 8) >= ceil(p 2^24) and
 * scaled by (float)(1/(1-p)) -- em_dropout's mask and arithmetic on the
 * composed path's weights, so both paths drop the same elements.
 *
 * Every (b, h) pair is computed by one thread in a fixed order, so results
 * do not depend on the thread count. The f64 instance is what gradcheck
 * differentiates (tests/test_gradcheck.c): the same code as the f32 one, with
 * a plain-loop GEMM.
 */
#include "tensor/cpu/k_sdpa.h"
#include "tensor/cpu/k_nn_rows.h"
#include "tensor/cpu/vmath.h"

EM__WIDE_VECTORS   /* 512-bit loops where the target has them; the sums stay narrow (row passes, below) */

/* ---- small GEMMs: C[M,N] (+)= A[M,K] B[K,N], N a multiple of 16 -------------------------
 * B and C row-major (ldb, ldc); A(i, k) at A[i * ai + k * ak], so that A may be a
 * transposed matrix (ai = 1, ak = its row length) without a copy. */

typedef float v16f __attribute__((vector_size(64), aligned(4)));

/* R rows x 16 columns of C in registers (R = 8, then 4): R independent FMA
 * chains over K, enough to keep both FMA ports busy at 8. Every element is the
 * same sum in the same order (0 + a_0 b_0 + a_1 b_1 + ...) whatever block
 * computes it, so the block size does not change a result's bits. */
#define GEMM_ROWS(R, MADD)                                                                          \
    for (; i + (R) <= M; i += (R))                                                                  \
        for (int64_t j = 0; j < N; j += 16) {                                                       \
            v16f c[R];                                                                              \
            _Pragma("GCC unroll 8") for (int r = 0; r < (R); r++) c[r] = (v16f){0};                 \
            const float *a = A + i * ai;                                                            \
            for (int64_t k = 0; k < K; k++) {                                                       \
                v16f b = *(const v16f *)(B + k * ldb + j);                                          \
                const float *ak_ = a + k * ak;                                                      \
                _Pragma("GCC unroll 8") for (int r = 0; r < (R); r++) c[r] = MADD(ak_[r * ai], b, c[r]); \
            }                                                                                       \
            _Pragma("GCC unroll 8") for (int r = 0; r < (R); r++) {                                 \
                v16f *o = (v16f *)(C + (i + r) * ldc + j);                                          \
                if (acc) *o += c[r];                                                                \
                else *o = c[r];                                                                     \
            }                                                                                       \
        }

/* c + a b: a rounded product then a rounded sum (ISO C mode does not contract
 * them), or one fused multiply-add. */
#define MUL_ADD(a, b, c) ((c) + (a) * (b))
#if defined(__AVX512F__)
#include <immintrin.h>
#define FUSED_MADD(a, b, c) ((v16f)_mm512_fmadd_ps(_mm512_set1_ps(a), (__m512)(b), (__m512)(c)))
#else
#define FUSED_MADD(a, b, c) MUL_ADD(a, b, c)
#endif

/* fma: one fused multiply-add per step (twice the throughput), for bf16 and
 * f16 inputs, whose results round to 8 or 11 bits anyway. f32 inputs keep the
 * product-then-sum of earlier versions, so their results stay bit for bit. */
static void gemm_f32(bool fma, int64_t M, int64_t N, int64_t K, const float *A, int64_t ai, int64_t ak,
                     const float *B, int64_t ldb, float *C, int64_t ldc, bool acc)
{
    int64_t i = 0;
    if (fma) {
        GEMM_ROWS(8, FUSED_MADD)
        GEMM_ROWS(4, FUSED_MADD)
    } else {
        GEMM_ROWS(8, MUL_ADD)
        GEMM_ROWS(4, MUL_ADD)
    }
    for (; i < M; i++)
        for (int64_t j = 0; j < N; j += 16) {
            v16f c0 = {0};
            for (int64_t k = 0; k < K; k++) {
                v16f b = *(const v16f *)(B + k * ldb + j);
                c0 = fma ? FUSED_MADD(A[i * ai + k * ak], b, c0) : MUL_ADD(A[i * ai + k * ak], b, c0);
            }
            v16f *o = (v16f *)(C + i * ldc + j);
            if (acc) *o += c0;
            else *o = c0;
        }
}

static void gemm_f64(bool fma, int64_t M, int64_t N, int64_t K, const double *A, int64_t ai, int64_t ak, const double *B,
                     int64_t ldb, double *C, int64_t ldc, bool acc)
{
    (void)fma;
    for (int64_t i = 0; i < M; i++) {
        double *c = C + i * ldc;
        if (!acc)
            for (int64_t j = 0; j < N; j++) c[j] = 0;
        for (int64_t k = 0; k < K; k++) {
            double a = A[i * ai + k * ak];
            for (int64_t j = 0; j < N; j++) c[j] += a * B[k * ldb + j];
        }
    }
}

/* ---- loading and storing rows ------------------------------------------------------ */

/* n elements of t from element offset off, stride st, into dst (as cdt), zeros up to np. */
static void load_vec(void *dst, em_dtype cdt, const em_tensor *t, int64_t off, int64_t st, int64_t n, int64_t np)
{
    const char *base = (const char *)t->storage->data;
    if (st == 1 && cdt == EM_F32 && t->dtype == EM_F32) {   /* f32 rows, inline: a row of 64 is 4 vectors, */
        const float *src = (const float *)base + off;       /* which a libc call per row cost more than */
        float *d = dst;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = src[i];
        for (int64_t i = n; i < np; i++) d[i] = 0;
        return;
    }
    size_t es = em_dtype_size(t->dtype), cs = em_dtype_size(cdt);
    if (st == 1 && cdt == EM_F32 && t->dtype == EM_BF16) {   /* the autocast case, inline: bf16 is f32's top half */
        const uint16_t *src = (const uint16_t *)base + off;
        uint32_t *d = dst;
#pragma omp simd
        for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)src[i] << 16;
    } else if (st == 1 && cdt == t->dtype) memcpy(dst, base + (size_t)off * es, (size_t)n * es);
    else if (st == 1) em__convert_n(dst, cdt, base + (size_t)off * es, t->dtype, n);
    else
        for (int64_t i = 0; i < n; i++)
            em__store((char *)dst + (size_t)i * cs, cdt, em__load(base + (size_t)(off + i * st) * es, t->dtype));
    memset((char *)dst + (size_t)n * cs, 0, (size_t)(np - n) * cs);
}

/* ---- row passes ------------------------------------------------------------------------
 * The file vectorizes at 512 bits where the target has AVX-512 (EM__WIDE_VECTORS, above)
 * except for the two sums -- the softmax denominator and backward's rowsum(P dP) -- whose
 * lane order fixes their bits: they keep the 256-bit width (8 f32 or 4 f64 partial sums)
 * that gcc gave them before, in EM__NARROW_VECTORS_FN functions. */

#define ROW_SUMS(T, SFX)                                                                                  \
    static EM__NARROW_VECTORS_FN T row_sum_##SFX(const T *s, int64_t n)                                   \
    {                                                                                                     \
        T sum = 0;                                                                                        \
        _Pragma("omp simd reduction(+ : sum)") for (int64_t j = 0; j < n; j++) sum += s[j];               \
        return sum;                                                                                       \
    }                                                                                                     \
    static EM__NARROW_VECTORS_FN T row_dot_##SFX(const T *a, const T *b, int64_t n)                       \
    {                                                                                                     \
        T sum = 0;                                                                                        \
        _Pragma("omp simd reduction(+ : sum)") for (int64_t j = 0; j < n; j++) sum += a[j] * b[j];        \
        return sum;                                                                                       \
    }
ROW_SUMS(float, f32)
ROW_SUMS(double, f64)

static void softmax_rows_f32(float *S, int64_t R, const pair_geom *pg, float scale, float low, float *lse)
{
    EM__SDPA_SOFTMAX_ROWS(float, em__expf, logf, row_sum_f32, S, R, pg, scale, low, lse)
}

static void softmax_rows_f64(double *S, int64_t R, const pair_geom *pg, double scale, double low, float *lse)
{
    EM__SDPA_SOFTMAX_ROWS(double, exp, log, row_sum_f64, S, R, pg, scale, low, lse)
}

/* ---- per-thread scratch ---------------------------------------------------------------- */

typedef struct scratch {
    int64_t sk;                        /* keys (set before scratch_new) */
    void *k, *kt, *v, *vt, *dk, *dv;   /* [Skp,Dp] or [Dp,Skp] */
    void *q, *g, *o;                   /* [QB,Dp] */
    void *s, *p, *t;                   /* [QB,Skp] each */
    uint32_t *bits;
    uint8_t *keep;                     /* [QB,Skp] */
    void *block;
    bool fma;                          /* gemm_f32's fused multiply-adds: bf16/f16 inputs */
} scratch;

static bool scratch_new(scratch *w, size_t cs, int64_t sk, int64_t d)
{
    size_t kd = (size_t)(pad16(sk) * pad16(d)), qd = (size_t)(QB * pad16(d)), qk = (size_t)(QB * pad16(sk));
    size_t sizes[12] = {kd, kd, kd, kd, kd, kd, qd, qd, qd, qk, qk, qk};
    size_t nb = (size_t)((QB * sk + 3) / 4 + 16) * 4, total = 0;
    for (int i = 0; i < 12; i++) total += (sizes[i] * cs + 63) & ~(size_t)63;
    total += nb * sizeof(uint32_t) + qk;
    char *m = em__malloc(total);
    w->block = m;
    if (!m) return false;
    void **slots[12] = {&w->k, &w->kt, &w->v, &w->vt, &w->dk, &w->dv, &w->q, &w->g, &w->o, &w->s, &w->p, &w->t};
    for (int i = 0; i < 12; i++) {
        *slots[i] = m;
        m += (sizes[i] * cs + 63) & ~(size_t)63;
    }
    w->bits = (uint32_t *)m;
    w->keep = (uint8_t *)(m + nb * sizeof(uint32_t));
    return true;
}

/* ---- the pair kernels, for compute type T (float or double) ---------------------------- */

#define SDPA_TYPED(T, SFX, EXP, LOG)                                                                              \
    /* K, K^T, V (and V^T when vt) of pair (b, h), keys j < skb, into scratch, zero-padded */                     \
    static void load_kv_##SFX(const em_tensor *kk, const em_tensor *v, const pair_geom *pg, scratch *w, int64_t b, \
                              int64_t h, bool vt)                                                                 \
    {                                                                                                             \
        int64_t D = kk->shape[3], Skb = pg->skb, Skbp = pg->skbp, Dp = pad16(D);                                  \
        em_dtype cdt = sizeof(T) == 8 ? EM_F64 : EM_F32;                                                          \
        T *K = w->k, *KT = w->kt, *V = w->v, *VT = w->vt;                                                         \
        /* rows j >= Skb are zero padding (load_vec pads each row's columns) */                                  \
        memset(K + Skb * Dp, 0, sizeof(T) * (size_t)((Skbp - Skb) * Dp));                                        \
        memset(V + Skb * Dp, 0, sizeof(T) * (size_t)((Skbp - Skb) * Dp));                                        \
        for (int64_t j = 0; j < Skb; j++) {                                                                       \
            load_vec(K + j * Dp, cdt, kk, pair_row(kk, pg, h, j), kk->stride[3], D, Dp);                           \
            load_vec(V + j * Dp, cdt, v, pair_row(v, pg, h, j), v->stride[3], D, Dp);                              \
        }                                                                                                         \
        transpose_##SFX(KT, Skbp, K, Dp, Skbp, Dp);                                                               \
        if (vt) transpose_##SFX(VT, Skbp, V, Dp, Skbp, Dp);                                                       \
    }                                                                                                             \
                                                                                                                  \
    /* Rows i0..i0+R of pair (b, h): the queries into w->q, then P = softmax(S) (in w->s, rows of skbp) and,     \
     * when dropout is on, the keep flags; lse (when non-NULL) gets logsumexp of each row of S. */                \
    static void weights_##SFX(const em_tensor *q, const pair_geom *pg, double scale_d, const drop *dr, scratch *w, \
                              int64_t b, int64_t h, int64_t i0, int64_t R, float *lse)                            \
    {                                                                                                             \
        int64_t H = q->shape[1], Sq = pg->sq, D = q->shape[3], Dp = pad16(D);                                    \
        int64_t Skb = pg->skb, Skbp = pg->skbp;                                                                   \
        em_dtype cdt = sizeof(T) == 8 ? EM_F64 : EM_F32;                                                          \
        T *Qb = w->q, *S = w->s;                                                                                  \
        for (int64_t r = 0; r < R; r++) load_vec(Qb + r * Dp, cdt, q, pair_row(q, pg, h, i0 + r), q->stride[3], D, Dp); \
        gemm_##SFX(w->fma, R, Skbp, Dp, Qb, Dp, 1, (const T *)w->kt, Skbp, S, Skbp, false);                               \
        if (dr->p > 0) keep_block(dr, (b * H + h) * Sq + i0, R, pg->sk, Skb, w->bits, w->keep);                   \
        T scale = (T)scale_d, low = (T)lowest(q->dtype);                                                          \
        softmax_rows_##SFX(S, R, pg, scale, low, lse);                                                            \
    }                                                                                                             \
                                                                                                                  \
    /* dst = dropout(src) with the keep flags of weights_* (R rows of n) */                                       \
    static void apply_drop_##SFX(T *dst, const T *src, const drop *dr, const uint8_t *keep, int64_t R, int64_t n)  \
    {                                                                                                             \
        T ds = (T)(float)(1.0 / (1.0 - dr->p));                                                                   \
        if (sizeof(T) == 8) ds = (T)(1.0 / (1.0 - dr->p));                                                        \
        _Pragma("omp simd") for (int64_t e = 0; e < R * n; e++) dst[e] = keep[e] ? src[e] * ds : 0;               \
    }                                                                                                             \
                                                                                                                  \
    static void forward_pair_##SFX(const em_kargs *k, const pair_src *ps, const drop *dr, scratch *w, int64_t b,\
                                   int64_t h)                                                                 \
    {                                                                                                             \
        const em_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2];                                             \
        em_tensor *out = k->out[0], *lse = k->out[1];                                                             \
        int64_t H = q->shape[1], D = q->shape[3], Dp = pad16(D);                                              \
        pair_geom pg = geom_of(ps, b);                                                                        \
        em_dtype cdt = sizeof(T) == 8 ? EM_F64 : EM_F32;                                                          \
        load_kv_##SFX(kk, v, &pg, w, b, h, false);                                                                \
        float *lp = (float *)lse->storage->data + lse->offset;                                                    \
        int64_t base = (pg.tb * H + h) * q->shape[2] + pg.row0;   /* lse: [B,H,Sq,1] or [1,H,N,1] */          \
        for (int64_t i0 = 0; i0 < pg.sqb; i0 += QB) {                                                             \
            int64_t R = pg.sqb - i0 < QB ? pg.sqb - i0 : QB, row0 = base + i0;                                    \
            weights_##SFX(q, &pg, k->f[0], dr, w, b, h, i0, R, lp + row0);                                        \
            T *P = w->s;                                                                                          \
            if (dr->p > 0) apply_drop_##SFX(P, P, dr, w->keep, R, pg.skbp);                                       \
            T *Ob = w->o;                                                                                         \
            gemm_##SFX(w->fma, R, Dp, pg.skbp, P, pg.skbp, 1, (const T *)w->v, Dp, Ob, Dp, false);                        \
            store_rows_at(out, pg.tb, h, pg.row0 + i0, Ob, cdt, R, D, Dp);                                    \
        }                                                                                                         \
        /* padding queries: 0 */                                                                                  \
        zero_rows_at(out, pg.tb, h, pg.row0 + pg.sqb, pg.sq_rows - pg.sqb, D);                                \
        for (int64_t i = pg.sqb; i < pg.sq_rows; i++) lp[base + i] = 0;                                       \
    }                                                                                                             \
                                                                                                                  \
    /* t: [dq, dk, dv, q, k, v, lens, dout] */                                                                    \
    static void backward_pair_##SFX(em_tensor *const *t, const pair_src *ps, double sc, const drop *dr, scratch *w,\
                                    int64_t b, int64_t h)                                                     \
    {                                                                                                             \
        em_tensor *dq = t[0], *dk = t[1], *dv = t[2];                                                             \
        const em_tensor *q = t[3], *kk = t[4], *v = t[5], *g = t[7];                                              \
        int64_t D = q->shape[3], Dp = pad16(D);                                                               \
        pair_geom pg = geom_of(ps, b);                                                                        \
        int64_t Skbp = pg.skbp, len = pg.len;                                                                     \
        em_dtype cdt = sizeof(T) == 8 ? EM_F64 : EM_F32;                                                          \
        load_kv_##SFX(kk, v, &pg, w, b, h, true);                                                                 \
        T *dK = w->dk, *dV = w->dv, *Qb = w->q, *G = w->g, *dQb = w->o, *P = w->s, *dP = w->p, *Tr = w->t;        \
        memset(dK, 0, sizeof(T) * (size_t)(Skbp * Dp));                                                           \
        memset(dV, 0, sizeof(T) * (size_t)(Skbp * Dp));                                                           \
        T scale = (T)sc;                                                                                          \
        for (int64_t i0 = 0; i0 < pg.sqb; i0 += QB) {                                                             \
            int64_t R = pg.sqb - i0 < QB ? pg.sqb - i0 : QB;                                                      \
            weights_##SFX(q, &pg, sc, dr, w, b, h, i0, R, NULL);                                                  \
            for (int64_t r = 0; r < R; r++) load_vec(G + r * Dp, cdt, g, pair_row(g, &pg, h, i0 + r), g->stride[3], D, Dp); \
            /* dV += Pd^T dO (Pd in Tr when dropout is on) */                                                     \
            const T *Pd = P;                                                                                      \
            if (dr->p > 0) apply_drop_##SFX(Tr, P, dr, w->keep, R, Skbp), Pd = Tr;                                \
            gemm_##SFX(w->fma, Skbp, Dp, R, Pd, 1, Skbp, G, Dp, dV, Dp, true);                                            \
            /* dP = dropout(dO V^T); D = rowsum(P dP); dS = scale P (dP - D), 0 at masked keys */                 \
            gemm_##SFX(w->fma, R, Skbp, Dp, G, Dp, 1, (const T *)w->vt, Skbp, dP, Skbp, false);                           \
            if (dr->p > 0) apply_drop_##SFX(dP, dP, dr, w->keep, R, Skbp);                                        \
            for (int64_t r = 0; r < R; r++) {                                                                     \
                T *pr = P + r * Skbp, *dr_ = dP + r * Skbp, dsum = 0;                                             \
                dsum = row_dot_##SFX(pr, dr_, Skbp);                                                              \
                _Pragma("omp simd") for (int64_t j = 0; j < Skbp; j++) dr_[j] =                                   \
                    j < len ? pr[j] * (dr_[j] - dsum) * scale : 0;                                                \
            }                                                                                                     \
            /* dQb = dS K; dK += dS^T Qb */                                                                       \
            gemm_##SFX(w->fma, R, Dp, Skbp, dP, Skbp, 1, (const T *)w->k, Dp, dQb, Dp, false);                            \
            store_rows_at(dq, pg.tb, h, pg.row0 + i0, dQb, cdt, R, D, Dp);                                    \
            gemm_##SFX(w->fma, Skbp, Dp, R, dP, 1, Skbp, Qb, Dp, dK, Dp, true);                                           \
        }                                                                                                         \
        zero_rows_at(dq, pg.tb, h, pg.row0 + pg.sqb, pg.sq_rows - pg.sqb, D);                                 \
        store_rows_at(dk, pg.tb, h, pg.row0, dK, cdt, pg.skb, D, Dp);                                         \
        store_rows_at(dv, pg.tb, h, pg.row0, dV, cdt, pg.skb, D, Dp);                                         \
        zero_rows_at(dk, pg.tb, h, pg.row0 + pg.skb, pg.sk_rows - pg.skb, D);                                 \
        zero_rows_at(dv, pg.tb, h, pg.row0 + pg.skb, pg.sk_rows - pg.skb, D);                                 \
    }

SDPA_TYPED(float, f32, em__expf, logf)
SDPA_TYPED(double, f64, exp, log)

/* The thread's next pair (a static schedule: its own): its rows of q, k, v (and dout) into L2 */
static void prefetch_next(const pair_src *ps, int64_t H, int64_t bh, const em_tensor *q, const em_tensor *k,
                          const em_tensor *v, const em_tensor *dout)
{
    pair_geom n = geom_of(ps, bh / H);
    int64_t h = bh % H;
    prefetch_pair(q, n.tb, h, n.row0, n.sq_rows);
    prefetch_pair(k, n.tb, h, n.row0, n.sk_rows);
    prefetch_pair(v, n.tb, h, n.row0, n.sk_rows);
    if (dout) prefetch_pair(dout, n.tb, h, n.row0, n.sq_rows);
}

/* SDPA: in[0..4] = q, k, v, lens, starts (packed rows, tensor/ops.h); i[3] = S when packed */
int em_cpu_SDPA(const em_kargs *k)
{
    const em_tensor *q = k->in[0], *kk = k->in[1], *starts = k->in[4];
    pair_src ps = {.lens = k->in[3], .starts = starts, .sq = starts ? k->i[3] : q->shape[2],
                   .sk = starts ? k->i[3] : kk->shape[2], .pad_queries = k->i[2] != 0};
    int64_t B = starts ? starts->shape[0] : q->shape[0], H = q->shape[1], Sq = ps.sq, D = q->shape[3], Sk = ps.sk;
    if (B * H * Sq == 0 || D == 0) return EM_OK;   /* nothing to write (Sk = 0 is refused by the op) */
    drop dr = drop_of(k->f[1], (uint64_t)k->i[0], (uint64_t)k->i[1]);
    bool dbl = q->dtype == EM_F64, amx = em__sdpa_amx_ok(q);   /* bf16 on AMX: k_sdpa_amx.c */
    size_t cs = dbl ? sizeof(double) : sizeof(float);
    int failed = 0;
#pragma omp parallel num_threads(threads_for(B * H * Sq * Sk * D, B * H)) reduction(| : failed)
    {
        scratch w = {.sk = Sk, .fma = q->dtype == EM_BF16 || q->dtype == EM_F16};
        char *ws = amx ? em__malloc(em__sdpa_amx_scratch(Sk, D)) : NULL;
        if (amx ? !ws : !scratch_new(&w, cs, Sk, D)) failed = 1;
        if (amx) em__sdpa_amx_begin();
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (failed) continue;
            if (bh + 1 < B * H) prefetch_next(&ps, H, bh + 1, q, kk, k->in[2], NULL);
            if (amx) em__sdpa_amx_forward(k, &ps, &dr, ws, bh / H, bh % H);
            else if (dbl) forward_pair_f64(k, &ps, &dr, &w, bh / H, bh % H);
            else forward_pair_f32(k, &ps, &dr, &w, bh / H, bh % H);
        }
        if (amx) em__sdpa_amx_end();
        em__free(w.block);
        em__free(ws);
    }
    return failed ? EM_ERR_OOM : EM_OK;
}

/* SDPA_BWD: in[0..7] = q, k, v, lens, out, lse, dout, starts; i[3] = S when packed;
 * out[0..2] = dq, dk, dv. out and lse go unused: P is recomputed as the forward
 * did, and D = rowsum(P dP), not out . dout. */
int em_cpu_SDPA_BWD(const em_kargs *ka)
{
    em_tensor *q = ka->in[0], *k = ka->in[1], *v = ka->in[2], *lens = ka->in[3], *dout = ka->in[6];
    em_tensor *starts = ka->in[7], *dq = ka->out[0], *dk = ka->out[1], *dv = ka->out[2];
    double scale = ka->f[0], dropout_p = ka->f[1];
    uint64_t seed = (uint64_t)ka->i[0], offset = (uint64_t)ka->i[1];
    pair_src ps = {.lens = lens, .starts = starts, .sq = starts ? ka->i[3] : q->shape[2],
                   .sk = starts ? ka->i[3] : k->shape[2], .pad_queries = ka->i[2] != 0 && lens};
    int64_t B = starts ? starts->shape[0] : q->shape[0], H = q->shape[1], Sq = ps.sq, D = q->shape[3], Sk = ps.sk;
    if ((dq->stride[3] != 1 || dk->stride[3] != 1 || dv->stride[3] != 1) && D > 1)   /* see k_sdpa.h's rows */
        return EM_ERR_UNSUPPORTED;
    if (B * H == 0 || D == 0 || Sk == 0) return EM_ERR_UNSUPPORTED;
    drop dr = drop_of(dropout_p, seed, offset);
    bool dbl = q->dtype == EM_F64, amx = em__sdpa_amx_ok(q);   /* bf16 on AMX: k_sdpa_amx.c */
    size_t cs = dbl ? sizeof(double) : sizeof(float);
    em_tensor *t[8] = {dq, dk, dv, q, k, v, lens, dout};
    int failed = 0;
#pragma omp parallel num_threads(threads_for(B * H * (Sq + 1) * Sk * D, B * H)) reduction(| : failed)
    {
        scratch w = {.sk = Sk, .fma = q->dtype == EM_BF16 || q->dtype == EM_F16};
        char *ws = amx ? em__malloc(em__sdpa_amx_scratch(Sk, D)) : NULL;
        if (amx ? !ws : !scratch_new(&w, cs, Sk, D)) failed = 1;
        if (amx) em__sdpa_amx_begin();
#pragma omp for schedule(static)
        for (int64_t bh = 0; bh < B * H; bh++) {
            if (failed) continue;
            if (bh + 1 < B * H) prefetch_next(&ps, H, bh + 1, q, k, v, dout);
            if (amx) em__sdpa_amx_backward(t, &ps, scale, &dr, ws, bh / H, bh % H);
            else if (dbl) backward_pair_f64(t, &ps, scale, &dr, &w, bh / H, bh % H);
            else backward_pair_f32(t, &ps, scale, &dr, &w, bh / H, bh % H);
        }
        if (amx) em__sdpa_amx_end();
        em__free(w.block);
        em__free(ws);
    }
    return failed ? em__fail(EM_ERR_OOM, "sdpa backward: out of memory for scratch") : EM_OK;
}
