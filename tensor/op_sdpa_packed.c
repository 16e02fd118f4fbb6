/* ember — fused attention over packed rows (declared in tensor/op_grad.h): op
 * SDPA with in[4] (tensor/ops.h), the layout an encoder runs on when it drops a
 * right-padded batch's padding rows (nn/unpad.c).
 *
 * q, k, v are [1,H,N,D]: the N real tokens of B sequences, sequence b in rows
 * starts[b] .. starts[b] + lens[b] - 1, the sequences one after another from row
 * 0 (flash-attention's "varlen" layout). Each sequence attends to itself only.
 * The values are those of em__sdpa on the padded [B,H,S,D] batch with key
 * lengths lens and padding queries (S >= every length): the same blocks, the
 * same dropout mask (numbered over [B,H,S,S]), so the rows agree bit for bit;
 * only no row of padding is read, written or copied.
 *
 * A device whose kernel declines (CUDA) gets the padded computation composed
 * around it: rows gathered into [B,H,S,D], em__sdpa, rows gathered back. */
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <string.h>

/* Tests reach the composed paths on the CPU through this (em__sdpa_packed_set_composed) */
static _Atomic int composed_level;

int em__sdpa_packed_set_composed(int level)
{
    int was = composed_level;
    composed_level = level;
    return was;
}

int em__sdpa_packed_composed(void) { return composed_level; }

/* Whether a padded batch of B sequences of S rows, H heads of D, can be
 * numbered and sized: S below 2^31 and B*H*(S+1)^2*(D+64) within int64 (the
 * dropout numbering is B*H*S*S; the kernels' work estimates and scratch are
 * products of S, S and D). A larger S is no real batch's; refused by name. */
static bool fits_padded(int64_t B, int64_t H, int64_t S, int64_t D)
{
    int64_t t;
    return S <= INT32_MAX && !__builtin_mul_overflow(B, H, &t) && !__builtin_mul_overflow(t, S + 1, &t) &&
           !__builtin_mul_overflow(t, S + 1, &t) && !__builtin_mul_overflow(t, D + 64, &t);
}

/* lens and starts read back as host int64 (B values each); false when they do
 * not tile rows 0 .. n - 1 in order with lengths in [1, S] (error set). */
static bool host_rows(const char *op, em_tensor *lens, em_tensor *starts, int64_t n, int64_t S, int64_t **len_out,
                      int64_t **start_out)
{
    int64_t B = lens->shape[0];
    int64_t *l = em__malloc(sizeof(int64_t) * (size_t)(2 * B + 1));
    bool ok = l != NULL;
    em_scope_begin();
    em_tensor *hl = ok ? em_contiguous(em_to(em_to_dtype(lens, EM_I64), EM_CPU)) : NULL;
    em_tensor *hs = ok ? em_contiguous(em_to(em_to_dtype(starts, EM_I64), EM_CPU)) : NULL;
    ok = hl && hs;
    int64_t at = 0;
    for (int64_t b = 0; ok && b < B; b++) {
        l[b] = ((const int64_t *)em_data_ptr(hl))[b];
        l[B + b] = ((const int64_t *)em_data_ptr(hs))[b];
        if (l[b] < 1 || l[b] > S || l[B + b] != at || l[b] > n - at) {   /* at <= n: no overflow */
            em__misuse(op, "sequence %lld: start %lld, length %lld (the sequences must follow one another from row 0, "
                       "each 1 to S = %lld rows)", (long long)b, (long long)l[B + b], (long long)l[b], (long long)S);
            ok = false;
        }
        at += ok ? l[b] : 0;
    }
    if (ok && at != n) {
        em__misuse(op, "the sequences cover %lld rows, q has %lld", (long long)at, (long long)n);
        ok = false;
    }
    em_scope_end();
    if (!ok) {
        em__free(l);
        return false;
    }
    *len_out = l;
    *start_out = l + B;
    return true;
}

/* Index vectors on dev (scope-owned i64): unpack [B*S] (padded position -> packed
 * row; a padding position takes its sequence's first row, or `pad_row` when >= 0)
 * and pack [n] (packed row -> padded position). */
static bool row_index(const int64_t *len, const int64_t *start, int64_t B, int64_t S, int64_t n, int64_t pad_row,
                      em_device dev, em_tensor **unpack, em_tensor **pack)
{
    int64_t *u = em__malloc(sizeof(int64_t) * (size_t)(B * S)), *p = em__malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    bool ok = u && p;
    for (int64_t b = 0; ok && b < B; b++)
        for (int64_t s = 0; s < S; s++) {
            u[b * S + s] = s < len[b] ? start[b] + s : pad_row >= 0 ? pad_row : start[b];
            if (s < len[b]) p[start[b] + s] = b * S + s;
        }
    *unpack = ok ? em_to(em_from_data(u, 1, (int64_t[]){B * S}, EM_I64), dev) : NULL;
    *pack = ok ? em_to(em_from_data(p, 1, (int64_t[]){n}, EM_I64), dev) : NULL;
    em__free(u), em__free(p);
    return *unpack && *pack;
}

/* [1,H,N,D] -> [B,H,S,D] through the unpack index */
static em_tensor *to_padded(em_tensor *x, em_tensor *unpack, int64_t B, int64_t S)
{
    int64_t H = x->shape[1], D = x->shape[3];
    em_tensor *r = em_reshape(em_index_select(x, 2, unpack), 4, (int64_t[]){H, B, S, D});
    return em_permute(r, (const int[]){1, 0, 2, 3});
}

/* [B,H,S,D] -> [1,H,N,D] through the pack index */
static em_tensor *to_packed(em_tensor *x, em_tensor *pack)
{
    int64_t B = x->shape[0], H = x->shape[1], S = x->shape[2], D = x->shape[3];
    em_tensor *hb = em_reshape(em_permute(x, (const int[]){1, 0, 2, 3}), 4, (int64_t[]){1, H, B * S, D});
    return em_index_select(hb, 2, pack);
}

em_tensor *em__sdpa_packed(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *lens, em_tensor *starts, int64_t S,
                           double dropout_p, uint64_t seed, uint64_t offset)
{
    static const char op[] = "em__sdpa_packed";
    EM_PROPAGATE_NULL(q, k, v, lens, starts);
    EM_CHECK(q->ndim == 4 && q->shape[0] == 1 && em_dtype_is_float(q->dtype) && k->dtype == q->dtype &&
                 v->dtype == q->dtype && k->ndim == 4 && v->ndim == 4 &&
                 !memcmp(k->shape, q->shape, sizeof(int64_t) * 4) && !memcmp(v->shape, q->shape, sizeof(int64_t) * 4),
             op, "q %s, k %s, v %s must be [1,H,N,D] of one float dtype", em__shape_str(q), em__shape_str(k),
             em__shape_str(v));
    EM_CHECK(em_device_eq(q->device, k->device) && em_device_eq(q->device, v->device) &&
                 em_device_eq(lens->device, q->device) && em_device_eq(starts->device, q->device),
             op, "q, k, v, lens and starts are on different devices");
    EM_CHECK(lens->ndim != 1 || lens->shape[0] > 0, op, "needs at least one sequence (lens is empty)");
    EM_CHECK(lens->ndim == 1 && starts->ndim == 1 && lens->shape[0] == starts->shape[0] &&
                 (lens->dtype == EM_I32 || lens->dtype == EM_I64) &&
                 (starts->dtype == EM_I32 || starts->dtype == EM_I64),
             op, "lens %s %s and starts %s %s must be i32/i64 [B]", em_dtype_name(lens->dtype), em__shape_str(lens),
             em_dtype_name(starts->dtype), em__shape_str(starts));
    EM_CHECK(S >= 1 && dropout_p >= 0.0 && dropout_p < 1.0, op, "S = %lld must be >= 1 and dropout_p (%g) in [0, 1)",
             (long long)S, dropout_p);
    int64_t B = lens->shape[0], n = q->shape[2], *len = NULL, *start = NULL;
    EM_CHECK(fits_padded(B, q->shape[1], S, q->shape[3]), op,
             "S = %lld is too large for %lld sequences of %lld heads of %lld: the padded batch's B*H*S*S dropout "
             "numbering (and its S*D work) must fit in 64 bits", (long long)S, (long long)B, (long long)q->shape[1],
             (long long)q->shape[3]);
    if (!host_rows(op, lens, starts, n, S, &len, &start)) return NULL;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *l32 = em_contiguous(em_to_dtype(lens, EM_I32)), *s64 = em_contiguous(em_to_dtype(starts, EM_I64));
    int64_t lshape[4] = {1, q->shape[1], n, 1};
    em_tensor *out = em__sdpa_result(q->shape, q->dtype, q->device), *lse = em__empty(4, lshape, EM_F32, q->device);
    if (out && lse && l32 && s64) {
        em_kargs ka = {.op = EM_OP_SDPA, .in = {q, k, v, l32, s64}, .out = {out, lse},
                       .f = {1.0 / sqrt((double)q->shape[3]), dropout_p},
                       .i = {(int64_t)seed, (int64_t)offset, 1, S}};
        em_status s = composed_level == 1 ? EM_ERR_UNSUPPORTED : em__dispatch(&ka);
        em_tensor *unpack, *pack;
        if (s == EM_OK) r = em_keep(out);
        else if (s == EM_ERR_UNSUPPORTED && row_index(len, start, B, S, n, -1, q->device, &unpack, &pack))
            r = em_keep(to_packed(em__sdpa(to_padded(q, unpack, B, S), to_padded(k, unpack, B, S),
                                           to_padded(v, unpack, B, S), l32, dropout_p, seed, offset, true),
                                  pack));
    }
    em_scope_end();
    em__free(len);
    return r;
}

/* The gradient when the device's fused backward declines: q, k, v gathered into
 * the padded batch (padding positions repeat a real row: masked as keys, and
 * their queries get dout 0), dout with zero rows there, the padded gradient
 * composed by grad(), its rows gathered back. grad is autograd's composed rule
 * (autograd/rules.c), called on padded tensors with *gin[3] to fill. */
bool em__sdpa_packed_grad(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *lens, em_tensor *starts, int64_t S,
                          em_tensor *dout, em__sdpa_grad_fn grad, void *ctx, em_tensor **gin)
{
    int64_t B = lens->shape[0], n = q->shape[2], *len = NULL, *start = NULL;
    if (!host_rows("sdpa backward (packed rows)", lens, starts, n, S, &len, &start)) return false;
    em_tensor *unpack, *pack, *zunpack, *zpack;
    bool ok = row_index(len, start, B, S, n, -1, q->device, &unpack, &pack) &&
              row_index(len, start, B, S, n, n, q->device, &zunpack, &zpack);
    em__free(len);
    if (!ok) return false;
    int64_t zshape[4] = {1, dout->shape[1], 1, dout->shape[3]};
    em_tensor *dz = em_cat(2, (em_tensor *[]){dout, em_zeros(4, zshape, dout->dtype, dout->device)}, 2);
    em_tensor *pg[3] = {NULL, NULL, NULL};
    grad(ctx, to_padded(q, unpack, B, S), to_padded(k, unpack, B, S), to_padded(v, unpack, B, S),
         to_padded(dz, zunpack, B, S), pg);
    for (int i = 0; i < 3; i++) gin[i] = pg[i] ? to_packed(pg[i], pack) : NULL;
    return true;
}
