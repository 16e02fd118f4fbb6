/* ember — the fused attention's bf16 pair kernels on AMX (tile matrix
 * multiplies, tdpbf16ps): the same computation as k_sdpa.c's (same blocks of
 * QB query rows, same softmax, dropout mask and masking, f32 statistics),
 * with every product taken by the tile unit on bf16 operands, summed in f32:
 *
 *   forward:   S = Q K^T; P = softmax(S); Pd = dropout(P); O = bf16(Pd) V
 *   backward:  dV^T += dO^T bf16(Pd); dP = dropout(dO V^T); D = rowsum(P dP);
 *              dS = scale P (dP - D); dQ = bf16(dS) K; dK^T += Q^T bf16(dS)
 *
 * Q, K, V and dO are bf16 already, so their products are exact; P (after
 * dropout) and dS are rounded to bf16 before they are multiplied, as the
 * composed bf16 path rounds its weights and their gradient before its matmuls
 * (torch's autocast does the same), where k_sdpa.c keeps f32 copies. The rest
 * of the arithmetic (softmax, D, dS) stays in f32, as in k_sdpa.c.
 *
 * A tile product C[16,16] += A[16,32] B[32,16] takes A row-major (pairs along
 * the sum adjacent) and B "pair-interleaved": 16 rows of 16 32-bit words, word
 * (kk, j) holding (b[2kk][j], b[2kk+1][j]). B operands come from row-major
 * matrices by a word transpose (K^T, V^T: the pairs are adjacent in the rows)
 * or by interleaving row pairs (V, K, Pd, dS). The two products that sum over
 * query rows are computed transposed (dV^T, dK^T: A = dO^T, Q^T, each a word
 * transpose of an interleave) and transposed back once per pair. Head dims,
 * key counts and query blocks are padded to 32 with zeros.
 *
 * Needs a target with AMX-BF16 (-march=native on a Sapphire Rapids class Xeon)
 * and the kernel's permission for tile data (arch_prctl, asked once); where
 * either is missing em__sdpa_amx_ok is false and k_sdpa.c runs. Threads,
 * determinism and dropout are k_sdpa.c's: one thread per (b, h) pair, in a
 * fixed order; the tile unit's sums are deterministic.
 */
#include "tensor/cpu/k_sdpa.h"
#include "tensor/cpu/vmath.h"

/* 512-bit vectors for gcc's own loops here (softmax, dropout, dS), although the
 * softmax sums are reductions whose order the width sets: these kernels are
 * bf16 only, whose results may change (test_gradcheck bounds them); the f32
 * kernels of k_sdpa.c keep gcc's width and their bits. */
EM__WIDE_VECTORS

static bool amx_on = true;

bool em__sdpa_amx_set(bool on)
{
    bool was = __atomic_load_n(&amx_on, __ATOMIC_RELAXED);
    __atomic_store_n(&amx_on, on, __ATOMIC_RELAXED);
    return was;
}

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__linux__)

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

static pthread_once_t perm_once = PTHREAD_ONCE_INIT;
static bool permitted;

static void ask_permission(void) { permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0; }

bool em__sdpa_amx_ok(const em_tensor *q)
{
    if (q->dtype != EM_BF16 || !__atomic_load_n(&amx_on, __ATOMIC_RELAXED)) return false;
    pthread_once(&perm_once, ask_permission);
    return permitted;
}

static int64_t pad32(int64_t n) { return (n + 31) & ~(int64_t)31; }

/* ---- tiles -------------------------------------------------------------------------------------- */

/* palette 1: eight tiles of 16 rows x 64 bytes (C: 0-3, A: 4-5, B: 6-7) */
typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* A constant in memory: gcc 12 does not see ldtilecfg read its operand, and
 * dropped the stores of a configuration built on the stack (a #GP here). */
static const tile_config config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

void em__sdpa_amx_begin(void) { _tile_loadconfig(&config); }

void em__sdpa_amx_end(void) { _tile_release(); }

/* C[M,N] (+)= A[M,K] B[K,N]: A bf16 row-major (lda elements), B words [K/2][ldb]
 * pair-interleaved, C f32 (ldc). M, N and K multiples of 32. 2 x 2 tiles of C at a time. */
static void mm(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint32_t *B, int64_t ldb,
               float *C, int64_t ldc, bool acc)
{
    for (int64_t i = 0; i < M; i += 32)
        for (int64_t j = 0; j < N; j += 32) {
            float *c = C + i * ldc + j;
            if (acc) {
                _tile_loadd(0, c, ldc * 4);
                _tile_loadd(1, c + 16, ldc * 4);
                _tile_loadd(2, c + 16 * ldc, ldc * 4);
                _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
            } else {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for (int64_t k = 0; k < K; k += 32) {
                _tile_loadd(4, A + i * lda + k, lda * 2);
                _tile_loadd(5, A + (i + 16) * lda + k, lda * 2);
                _tile_loadd(6, B + (k / 2) * ldb + j, ldb * 4);
                _tile_loadd(7, B + (k / 2) * ldb + j + 16, ldb * 4);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c, ldc * 4);
            _tile_stored(1, c + 16, ldc * 4);
            _tile_stored(2, c + 16 * ldc, ldc * 4);
            _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
        }
}

/* ---- operand layouts ------------------------------------------------------------------------------ */

/* The 32-bit words of src [rows][cols] (bf16) transposed into dst [cols/2][rows]:
 * word (p, r) = (src[r][2p], src[r][2p+1]). rows a multiple of 16, cols of 32. */
static void transpose_words(uint32_t *dst, const uint16_t *src, int64_t rows, int64_t cols)
{
    transpose_f32((float *)dst, rows, (const float *)src, cols / 2, rows, cols / 2);
}

/* f32 rows [R][n] (row stride lds) to bf16 rows [Rp][ldd], zero past R rows and n columns */
static void round_rows(uint16_t *dst, int64_t ldd, const float *src, int64_t lds, int64_t R, int64_t Rp, int64_t n)
{
    for (int64_t r = 0; r < R; r++) {
        em__convert_n(dst + r * ldd, EM_BF16, src + r * lds, EM_F32, n);
        memset(dst + r * ldd + n, 0, sizeof(uint16_t) * (size_t)(ldd - n));
    }
    memset(dst + R * ldd, 0, sizeof(uint16_t) * (size_t)((Rp - R) * ldd));
}

/* R rows from r0 of t's pair (b, h) (bf16, any strides) into dst [Rp][Dp], zero-padded */
static void load_rows(uint16_t *dst, const em_tensor *t, int64_t b, int64_t h, int64_t r0, int64_t R, int64_t Rp,
                      int64_t D, int64_t Dp)
{
    for (int64_t r = 0; r < R; r++) {
        const uint16_t *src = (const uint16_t *)t->storage->data + off4(t, b, h, r0 + r);
        uint16_t *o = dst + r * Dp;
        int64_t st = t->stride[3];
        if (st == 1) memcpy(o, src, sizeof(uint16_t) * (size_t)D);
        else
            for (int64_t c = 0; c < D; c++) o[c] = src[c * st];
        memset(o + D, 0, sizeof(uint16_t) * (size_t)(Dp - D));
    }
    memset(dst + R * Dp, 0, sizeof(uint16_t) * (size_t)((Rp - R) * Dp));
}

/* ---- scratch ----------------------------------------------------------------------------------- */

typedef struct amx_ws {
    uint16_t *k, *v;               /* rows [Kp][Dp] */
    uint32_t *kt, *vt;             /* word transposes [Dp/2][Kp] */
    uint16_t *ki, *vi;             /* row-pair interleaves [Kp/2][Dp][2] */
    uint16_t *q, *g, *qt, *gt;     /* [QB][Dp]; transposes [Dp][QB] */
    float *s, *dp;                 /* [QB][Kp] */
    uint16_t *p16, *pi;            /* bf16 weights [QB][Kp], their interleave */
    float *o, *dkt, *dvt, *dkv;    /* [QB][Dp]; [Dp][Kp] x 2; [Kp][Dp] */
    uint32_t *bits;
    uint8_t *keep;                 /* [QB][pad16(Sk)] */
} amx_ws;

static size_t layout(amx_ws *w, char *base, int64_t sk, int64_t d)
{
    int64_t kp = pad32(sk), dp = pad32(d);
    size_t off = 0;
#define SLOT(field, type, n)                                                   \
    do {                                                                       \
        if (w) w->field = (type *)(base + off);                                \
        off += ((size_t)(n) * sizeof(type) + 63) & ~(size_t)63;                \
    } while (0)
    SLOT(k, uint16_t, kp * dp); SLOT(v, uint16_t, kp * dp);
    SLOT(kt, uint32_t, kp * dp / 2); SLOT(vt, uint32_t, kp * dp / 2);
    SLOT(ki, uint16_t, kp * dp); SLOT(vi, uint16_t, kp * dp);
    SLOT(q, uint16_t, QB * dp); SLOT(g, uint16_t, QB * dp); SLOT(qt, uint16_t, QB * dp); SLOT(gt, uint16_t, QB * dp);
    SLOT(s, float, QB * kp); SLOT(dp, float, QB * kp);
    SLOT(p16, uint16_t, QB * kp); SLOT(pi, uint16_t, QB * kp);
    SLOT(o, float, QB * dp); SLOT(dkt, float, kp * dp); SLOT(dvt, float, kp * dp); SLOT(dkv, float, kp * dp);
    SLOT(bits, uint32_t, ((QB * sk + 3) / 4 + 16) * 4);
    SLOT(keep, uint8_t, QB * pad16(sk));
#undef SLOT
    return off;
}

size_t em__sdpa_amx_scratch(int64_t sk, int64_t d) { return layout(NULL, NULL, sk, d); }

/* ---- the pair kernels ------------------------------------------------------------------------------ */

/* A row's sum at this file's width (512 bits where the target has AVX-512) */
static inline float row_sum(const float *s, int64_t n)
{
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) sum += s[j];
    return sum;
}

/* S = Q K^T for the block's rows (Q in w->q, [Rp][Dp]), then softmax over rows of
 * Kp (the -inf padding past skb) and the keep flags, as k_sdpa.c */
static void weights(const amx_ws *w, const em_tensor *q, const pair_geom *pg, int64_t Kp, double scale_d,
                    const drop *dr, int64_t b, int64_t h, int64_t i0, int64_t R, int64_t Rp, int64_t Dp, float *lse)
{
    int64_t H = q->shape[1], Sq = pg->sq;
    mm(Rp, Kp, Dp, w->q, Dp, w->kt, Kp, w->s, Kp, false);
    if (dr->p > 0) keep_block(dr, (b * H + h) * Sq + i0, R, pg->sk, pg->skb, w->bits, w->keep);
    pair_geom wide = *pg;
    wide.skbp = Kp;
    float scale = (float)scale_d, low = (float)lowest(q->dtype);
    EM__SDPA_SOFTMAX_ROWS(float, em__expf, logf, row_sum, w->s, R, &wide, scale, low, lse)
}

/* dst = dropout(src) on R rows of Kp (keep rows of pad16(skb), as keep_block writes them) */
static void apply_drop(float *dst, const float *src, const drop *dr, const uint8_t *keep, int64_t R, int64_t Kp,
                       int64_t skbp)
{
    float ds = (float)(1.0 / (1.0 - dr->p));
    for (int64_t r = 0; r < R; r++) {
        const uint8_t *kr = keep + r * skbp;
        float *d = dst + r * Kp;
        const float *s = src + r * Kp;
#pragma omp simd
        for (int64_t j = 0; j < skbp; j++) d[j] = kr[j] ? s[j] * ds : 0;
        for (int64_t j = skbp; j < Kp; j++) d[j] = 0;
    }
}

/* K and V rows (keys j < skb), zero rows to Kp */
static void load_kv(const amx_ws *w, const em_tensor *k, const em_tensor *v, const pair_geom *pg, int64_t h,
                    int64_t Kp, int64_t D, int64_t Dp)
{
    load_rows(w->k, k, pg->tb, h, pg->row0, pg->skb, Kp, D, Dp);
    load_rows(w->v, v, pg->tb, h, pg->row0, pg->skb, Kp, D, Dp);
}

void em__sdpa_amx_forward(const em_kargs *k, const pair_src *ps, const drop *dr, char *ws, int64_t b, int64_t h)
{
    const em_tensor *q = k->in[0], *kk = k->in[1], *v = k->in[2];
    em_tensor *out = k->out[0], *lse = k->out[1];
    int64_t H = q->shape[1], D = q->shape[3], Dp = pad32(D);
    pair_geom pg = geom_of(ps, b);
    int64_t Kp = pad32(pg.skb);
    amx_ws w;
    layout(&w, ws, ps->sk, D);
    load_kv(&w, kk, v, &pg, h, Kp, D, Dp);
    transpose_words(w.kt, w.k, Kp, Dp);   /* S = Q K^T */
    interleave_rows(w.vi, w.v, Dp, Kp, Dp);   /* O = P V */
    float *lp = (float *)lse->storage->data + lse->offset;
    int64_t base = (pg.tb * H + h) * q->shape[2] + pg.row0;   /* lse: [B,H,Sq,1] or [1,H,N,1] */
    for (int64_t i0 = 0; i0 < pg.sqb; i0 += QB) {
        int64_t R = pg.sqb - i0 < QB ? pg.sqb - i0 : QB, Rp = pad32(R), row0 = base + i0;
        load_rows(w.q, q, pg.tb, h, pg.row0 + i0, R, Rp, D, Dp);
        weights(&w, q, &pg, Kp, k->f[0], dr, b, h, i0, R, Rp, Dp, lp + row0);
        if (dr->p > 0) apply_drop(w.s, w.s, dr, w.keep, R, Kp, pg.skbp);
        round_rows(w.p16, Kp, w.s, Kp, R, Rp, Kp);
        mm(Rp, Dp, Kp, w.p16, Kp, (const uint32_t *)w.vi, Dp, w.o, Dp, false);
        store_rows_at(out, pg.tb, h, pg.row0 + i0, w.o, EM_F32, R, D, Dp);
    }
    zero_rows_at(out, pg.tb, h, pg.row0 + pg.sqb, pg.sq_rows - pg.sqb, D);
    for (int64_t i = pg.sqb; i < pg.sq_rows; i++) lp[base + i] = 0;
}

/* t: [dq, dk, dv, q, k, v, lens, dout] */
void em__sdpa_amx_backward(em_tensor *const *t, const pair_src *ps, double sc, const drop *dr, char *ws, int64_t b,
                           int64_t h)
{
    em_tensor *dq = t[0], *dk = t[1], *dv = t[2];
    const em_tensor *q = t[3], *kk = t[4], *v = t[5], *g = t[7];
    int64_t D = q->shape[3], Dp = pad32(D);
    pair_geom pg = geom_of(ps, b);
    int64_t Kp = pad32(pg.skb), len = pg.len;
    amx_ws w;
    layout(&w, ws, ps->sk, D);
    load_kv(&w, kk, v, &pg, h, Kp, D, Dp);
    transpose_words(w.kt, w.k, Kp, Dp);       /* S = Q K^T */
    transpose_words(w.vt, w.v, Kp, Dp);       /* dP = dO V^T */
    interleave_rows(w.ki, w.k, Dp, Kp, Dp);   /* dQ = dS K */
    memset(w.dkt, 0, sizeof(float) * (size_t)(Kp * Dp));
    memset(w.dvt, 0, sizeof(float) * (size_t)(Kp * Dp));
    float scale = (float)sc;
    for (int64_t i0 = 0; i0 < pg.sqb; i0 += QB) {
        int64_t R = pg.sqb - i0 < QB ? pg.sqb - i0 : QB, Rp = pad32(R);
        load_rows(w.q, q, pg.tb, h, pg.row0 + i0, R, Rp, D, Dp);
        load_rows(w.g, g, pg.tb, h, pg.row0 + i0, R, Rp, D, Dp);   /* dO rows */
        weights(&w, q, &pg, Kp, sc, dr, b, h, i0, R, Rp, Dp, NULL);
        /* dV^T += dO^T bf16(Pd) */
        if (dr->p > 0) apply_drop(w.dp, w.s, dr, w.keep, R, Kp, pg.skbp);
        round_rows(w.p16, Kp, dr->p > 0 ? w.dp : w.s, Kp, R, Rp, Kp);
        interleave_rows(w.pi, w.p16, Kp, Rp, Kp);
        transpose_bf16(w.gt, Rp, w.g, Dp, Rp, Dp);   /* A = dO^T: pairs of rows adjacent */
        mm(Dp, Kp, Rp, w.gt, Rp, (const uint32_t *)w.pi, Kp, w.dvt, Kp, true);
        /* dP = dropout(dO V^T); D = rowsum(P dP); dS = scale P (dP - D), 0 at masked keys */
        mm(Rp, Kp, Dp, w.g, Dp, w.vt, Kp, w.dp, Kp, false);
        if (dr->p > 0) apply_drop(w.dp, w.dp, dr, w.keep, R, Kp, pg.skbp);
        for (int64_t r = 0; r < R; r++) {
            float *pr = w.s + r * Kp, *dr_ = w.dp + r * Kp, dsum = 0;
#pragma omp simd reduction(+ : dsum)
            for (int64_t j = 0; j < Kp; j++) dsum += pr[j] * dr_[j];
#pragma omp simd
            for (int64_t j = 0; j < Kp; j++) dr_[j] = j < len ? pr[j] * (dr_[j] - dsum) * scale : 0;
        }
        round_rows(w.p16, Kp, w.dp, Kp, R, Rp, Kp);   /* bf16(dS) */
        /* dQ = bf16(dS) K */
        mm(Rp, Dp, Kp, w.p16, Kp, (const uint32_t *)w.ki, Dp, w.o, Dp, false);
        store_rows_at(dq, pg.tb, h, pg.row0 + i0, w.o, EM_F32, R, D, Dp);
        /* dK^T += Q^T bf16(dS) */
        interleave_rows(w.pi, w.p16, Kp, Rp, Kp);
        transpose_bf16(w.qt, Rp, w.q, Dp, Rp, Dp);
        mm(Dp, Kp, Rp, w.qt, Rp, (const uint32_t *)w.pi, Kp, w.dkt, Kp, true);
    }
    zero_rows_at(dq, pg.tb, h, pg.row0 + pg.sqb, pg.sq_rows - pg.sqb, D);
    transpose_f32(w.dkv, Dp, w.dkt, Kp, Dp, Kp);
    store_rows_at(dk, pg.tb, h, pg.row0, w.dkv, EM_F32, pg.skb, D, Dp);
    transpose_f32(w.dkv, Dp, w.dvt, Kp, Dp, Kp);
    store_rows_at(dv, pg.tb, h, pg.row0, w.dkv, EM_F32, pg.skb, D, Dp);
    zero_rows_at(dk, pg.tb, h, pg.row0 + pg.skb, pg.sk_rows - pg.skb, D);
    zero_rows_at(dv, pg.tb, h, pg.row0 + pg.skb, pg.sk_rows - pg.skb, D);
}

#else

bool em__sdpa_amx_ok(const em_tensor *q)
{
    (void)q;
    return false;
}
void em__sdpa_amx_begin(void) {}
void em__sdpa_amx_end(void) {}
size_t em__sdpa_amx_scratch(int64_t sk, int64_t d)
{
    (void)sk, (void)d;
    return 0;
}
void em__sdpa_amx_forward(const em_kargs *k, const pair_src *ps, const drop *dr, char *ws, int64_t b, int64_t h)
{
    (void)k, (void)ps, (void)dr, (void)ws, (void)b, (void)h;
}
void em__sdpa_amx_backward(em_tensor *const *t, const pair_src *ps, double sc, const drop *dr, char *ws, int64_t b,
                           int64_t h)
{
    (void)t, (void)ps, (void)sc, (void)dr, (void)ws, (void)b, (void)h;
}

#endif
