/* ember — what the CPU's fused attention kernels share (k_sdpa.c: f32/f64 and
 * the f32-math path for f16/bf16; k_sdpa_amx.c: bf16 products on AMX tiles):
 * the pair geometry, the key lengths, the dropout mask of a block of weights,
 * row stores, the f32 transpose and the softmax of a block of scores. Small
 * static inline helpers; the contracts are k_sdpa.c's file comment. */
#ifndef EMBER_CPU_K_SDPA_H
#define EMBER_CPU_K_SDPA_H

#include "tensor/bf16x16.h"
#include "tensor/cpu/cpu.h"
#include "tensor/cpu/transpose.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { QB = 64 };   /* query rows per block */

static inline int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* torch.finfo(dt).min, as op_grad.c's composed path fills masked scores. */
static inline double lowest(em_dtype dt)
{
    switch (dt) {
    case EM_F64: return -DBL_MAX;
    case EM_F16: return -65504.0;
    case EM_BF16: return -3.3895313892515355e38;
    default: return -FLT_MAX;
    }
}

/* ---- rows of the outputs -------------------------------------------------------------- */

/* An output of the fused kernels is [B,H,S,D] with its last dim contiguous
 * (stride[3] == 1) and any other strides: the op allocates [B,H,S,D] itself,
 * or a [B,S,H,D] storage seen through a permuted view, so that the heads'
 * merge back to [B,S,H*D] is a view and not a copy (tensor/op_grad.c). Row s
 * of pair (b, h) starts at off4; rows of a pair are one run when
 * stride[2] == D. */
static inline int64_t off4(const em_tensor *t, int64_t b, int64_t h, int64_t s)
{
    return t->offset + b * t->stride[0] + h * t->stride[1] + s * t->stride[2];
}

/* Asks for rows s0 .. s0 + rows of pair (b, h) of t to be brought into L2
 * (prefetcht1) while the thread still computes the pair before it; nothing
 * when t's last dim is strided. In a training step q, k, v and dout come cold
 * from memory (a linear wrote them long before), and a pair's rows lie one
 * [S,H,D] row apart: the hardware prefetchers do not follow them in time.
 * Hints only: results are unchanged. */
static inline void prefetch_pair(const em_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t rows)
{
    if (!t || (t->shape[3] > 1 && t->stride[3] != 1)) return;   /* rows not contiguous: not worth it */
    size_t es = em_dtype_size(t->dtype), span = (size_t)t->shape[3] * es;
    const char *base = (const char *)t->storage->data;
    for (int64_t s = s0; s < s0 + rows; s++) {
        const char *row = base + (size_t)off4(t, b, h, s) * es;
        for (size_t o = 0; o < span; o += 64) __builtin_prefetch(row + o, 0, 2);
        __builtin_prefetch(row + span - 1, 0, 2);
    }
}

/* n elements at element offset off of t from src (cdt). */
static inline void store_vec(em_tensor *t, int64_t off, const void *src, em_dtype cdt, int64_t n)
{
    em__convert_n((char *)t->storage->data + (size_t)off * em_dtype_size(t->dtype), t->dtype, src, cdt, n);
}

/* Rows s0 .. s0 + R of pair (b, h) of t, D values each, from src (cdt, row stride ld). */
static inline void store_rows_at(em_tensor *t, int64_t b, int64_t h, int64_t s0, const void *src, em_dtype cdt,
                                 int64_t R, int64_t D, int64_t ld)
{
    size_t cs = em_dtype_size(cdt);
    if (D == ld && t->stride[2] == D) store_vec(t, off4(t, b, h, s0), src, cdt, R * D);   /* one run */
#if defined(EM__HAVE_BF16X16)
    else if (t->dtype == EM_BF16 && cdt == EM_F32)   /* rows apart: inline, em__convert_n's bits */
        for (int64_t r = 0; r < R; r++) {
            uint16_t *o = (uint16_t *)t->storage->data + off4(t, b, h, s0 + r);
            const float *x = (const float *)src + r * ld;
            for (int64_t j = 0; j < D; j += 16) {
                __mmask16 m = D - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (D - j)) - 1);
                em__bf16x16_store_mask(o + j, m, _mm512_maskz_loadu_ps(m, x + j));
            }
        }
#endif
    else if (t->dtype == EM_F32 && cdt == EM_F32)   /* rows apart, inline: no call a row */
        for (int64_t r = 0; r < R; r++) {
            float *o = (float *)t->storage->data + off4(t, b, h, s0 + r);
            const float *x = (const float *)src + r * ld;
#pragma omp simd
            for (int64_t j = 0; j < D; j++) o[j] = x[j];
        }
    else
        for (int64_t r = 0; r < R; r++) store_vec(t, off4(t, b, h, s0 + r), (const char *)src + (size_t)(r * ld) * cs, cdt, D);
}

/* Rows s0 .. s0 + R of pair (b, h) of t (D values each) set to 0. */
static inline void zero_rows_at(em_tensor *t, int64_t b, int64_t h, int64_t s0, int64_t R, int64_t D)
{
    size_t es = em_dtype_size(t->dtype);
    char *base = (char *)t->storage->data;
    if (R <= 0) return;
    if (t->stride[2] == D) memset(base + (size_t)off4(t, b, h, s0) * es, 0, (size_t)(R * D) * es);
    else
        for (int64_t r = 0; r < R; r++) memset(base + (size_t)off4(t, b, h, s0 + r) * es, 0, (size_t)D * es);
}

static inline int64_t key_len(const em_tensor *lens, int64_t b, int64_t sk)
{
    if (!lens) return sk;
    const char *lp = (const char *)lens->storage->data;
    int64_t len = (int64_t)em__load(lp + (size_t)(lens->offset + b * lens->stride[0]) * em_dtype_size(lens->dtype),
                                    lens->dtype);
    return len < 0 ? 0 : len > sk ? sk : len;
}

/* ---- dropout -------------------------------------------------------------------------- */

typedef struct drop {
    double p;
    uint64_t seed, offset;
    uint32_t thr;
} drop;

static inline drop drop_of(double p, uint64_t seed, uint64_t offset)
{
    return (drop){.p = p, .seed = seed, .offset = offset, .thr = (uint32_t)ceil(p * 16777216.0)};
}

/* keep[r * pad16(skb) + j], j < skb, for the weights of the global rows r0 .. r0 + R
 * (rows of sk; contiguous in the [B,H,Sq,Sk] order, so one run of Philox counters),
 * 0 for the padding columns; bits: scratch of ((R sk + 3) / 4 + 16) * 4 */
static inline void keep_block(const drop *dr, int64_t r0, int64_t R, int64_t sk, int64_t skb, uint32_t *bits, uint8_t *keep)
{
    int64_t skbp = pad16(skb);
    uint64_t e0 = (uint64_t)r0 * (uint64_t)sk, first = dr->offset + e0 / 4;
    int64_t lane0 = (int64_t)(e0 % 4), nblocks = (lane0 + (R - 1) * sk + skb + 3) / 4;
    for (int64_t b = 0; b < nblocks; b += 16)
        em__philox_batch16(dr->seed, first + (uint64_t)b, (uint32_t(*)[4])(bits + 4 * b));
    for (int64_t r = 0; r < R; r++) {
        const uint32_t *br = bits + lane0 + r * sk;
        uint8_t *kr = keep + r * skbp;
#pragma omp simd
        for (int64_t j = 0; j < skb; j++) kr[j] = (br[j] >> 8) >= dr->thr;
        memset(kr + skb, 0, (size_t)(skbp - skb));
    }
}

/* Where the pairs of one call find their rows. Padded (starts NULL): q, k, v and
 * the outputs are [B,H,Sq,D] / [B,H,Sk,D] and pair (b, h) holds rows 0.. of batch b.
 * Packed (the op's in[4]): they are [1,H,N,D], sequence b holds rows starts[b] ..
 * starts[b] + lens[b] - 1 of dim 2, and sq = sk = the padded length S (i[3]) that
 * the dropout mask's [B,H,S,S] numbering and the statistics' rows still follow. */
typedef struct pair_src {
    const em_tensor *lens, *starts;
    int64_t sq, sk;
    bool pad_queries;
} pair_src;

/* What one (b, h) pair computes: keys j < skb (the key length, or every key when it
 * is 0: HF's uniform weights over masked keys), queries i < sqb (the key length too
 * when the op's i[2] says queries past it are padding). Its rows in the tensors:
 * row row0 + s of batch index tb (b and 0 padded; 0 and starts[b] packed), sq_rows
 * query and sk_rows key rows in all (sq and sk padded; the length twice packed). */
typedef struct pair_geom {
    int64_t sk, skb, skbp, sq, sqb, len;
    int64_t tb, row0, sq_rows, sk_rows;
} pair_geom;

static inline pair_geom geom_of(const pair_src *ps, int64_t b)
{
    int64_t sq = ps->sq, sk = ps->sk;
    pair_geom g = {.sk = sk, .sq = sq, .len = key_len(ps->lens, b, sk), .tb = b, .sq_rows = sq, .sk_rows = sk};
    g.skb = g.len > 0 ? g.len : sk;
    g.skbp = pad16(g.skb);
    g.sqb = ps->pad_queries && g.len > 0 && g.len < sq ? g.len : sq;
    if (ps->starts) {   /* the op checked lens[b] >= 1 and the rows' range */
        const char *sp = (const char *)ps->starts->storage->data;
        g.row0 = (int64_t)em__load(sp + (size_t)(ps->starts->offset + b * ps->starts->stride[0]) *
                                            em_dtype_size(ps->starts->dtype), ps->starts->dtype);
        g.tb = 0;
        g.sq_rows = g.sk_rows = g.len;
    }
    return g;
}

/* Row s of pair (tb, h) in t, as geom_of placed it */
static inline int64_t pair_row(const em_tensor *t, const pair_geom *pg, int64_t h, int64_t s)
{
    return off4(t, pg->tb, h, pg->row0 + s);
}

/* Softmax of R rows of scores S (rows of pg->skbp, type T) in place: keys j < len
 * scaled by scale, keys len <= j < skb set to low (the dtype's lowest, as the
 * composed masked_fill), the padding columns -inf (exp gives them 0); lse (when
 * non-NULL) gets each row's logsumexp. EXP and LOG: T's exp and log; ROWSUM(s, n):
 * the sum of a row, a function of the includer's (the vector width of its
 * reduction fixes the denominator's bits; k_sdpa.c's "row passes"). */
#define EM__SDPA_SOFTMAX_ROWS(T, EXP, LOG, ROWSUM, S, R, pg, scale, low, lse)                              \
    for (int64_t r_ = 0; r_ < (R); r_++) {                                                               \
        T *s_ = (S) + r_ * (pg)->skbp, mx_ = -INFINITY;                                                    \
        const int64_t len_ = (pg)->len, skb_ = (pg)->skb, skbp_ = (pg)->skbp;                              \
        _Pragma("omp simd reduction(max : mx_)") for (int64_t j = 0; j < skbp_; j++) {                     \
            T x_ = j < len_ ? s_[j] * (scale) : j < skb_ ? (low) : (T)-INFINITY;                           \
            s_[j] = x_;                                                                                    \
            mx_ = x_ > mx_ ? x_ : mx_;                                                                     \
        }                                                                                                  \
        _Pragma("omp simd") for (int64_t j = 0; j < skbp_; j++) s_[j] = EXP(s_[j] - mx_);                  \
        T sum_ = ROWSUM(s_, skbp_), inv_ = (T)1 / sum_;                                                    \
        _Pragma("omp simd") for (int64_t j = 0; j < skbp_; j++) s_[j] *= inv_;                             \
        if (lse) (lse)[r_] = (float)(mx_ + LOG(sum_));                                                     \
    }

/* k_sdpa_amx.c: the bf16 pair kernels with AMX tile products (P and dS rounded
 * to bf16 before their products, as the composed bf16 path rounds them);
 * em__sdpa_amx_ok says whether they take a call (bf16, an AMX target, the
 * kernel's permission). A thread brackets its pairs with _begin (loads the tile
 * configuration) and _end, and gives each call em__sdpa_amx_scratch bytes. */
bool em__sdpa_amx_ok(const em_tensor *q);
/* Turns the AMX kernels off (tests compare both paths); returns the previous setting. */
bool em__sdpa_amx_set(bool on);
size_t em__sdpa_amx_scratch(int64_t sk, int64_t d);
void em__sdpa_amx_begin(void);
void em__sdpa_amx_end(void);
void em__sdpa_amx_forward(const em_kargs *k, const pair_src *ps, const drop *dr, char *ws, int64_t b, int64_t h);
void em__sdpa_amx_backward(em_tensor *const *t, const pair_src *ps, double sc, const drop *dr, char *ws, int64_t b,
                           int64_t h);

#endif
