/* ember — front-ends made for autograd (declared in tensor/op_grad.h): the
 * unary _BWD kernels (gelu's, ...), embedding with a padding_idx, and scaled
 * dot-product attention: composed from recorded ops, or the fused op SDPA on
 * CUDA. */
#include "tensor/op_grad.h"
#include "tensor/op_nn.h"
#include "tensor/tensor_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

static bool same_shape(const em_tensor *a, const em_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* ---- the unary _BWD ops (tensor/unary_ops.h's DERIV rows) ------------------------- */

#define BWD_OP(NAME, name, ...) [EM_OP_##NAME] = EM_OP_##NAME##_BWD,
#define BWD_NAME(NAME, name, ...) [EM_OP_##NAME] = "em_" #name "_backward",
static const em_op bwd_op[EM_NUM_OPS] = {EM_UNARY_BWD_OPS(BWD_OP)};
static const char *const bwd_name[EM_NUM_OPS] = {EM_UNARY_BWD_OPS(BWD_NAME)};

em_tensor *em__unary_backward(em_op op, em_tensor *x, em_tensor *dy) { return em__unary_backward_y(op, x, NULL, dy); }

em_tensor *em__unary_backward_y(em_op op, em_tensor *x, em_tensor *y, em_tensor *dy)
{
    if ((unsigned)op >= EM_NUM_OPS || !bwd_name[op]) {
        em__misuse("em__unary_backward", "%s has no _BWD kernel (only the DERIV rows of tensor/unary_ops.h have one)",
                   (unsigned)op < EM_NUM_OPS ? em_op_table[op].name : "(not an op)");
        return NULL;
    }
    const char *name = bwd_name[op];
    EM_PROPAGATE_NULL_IN(name, x, dy);
    EM_CHECK(em_dtype_is_float(x->dtype) && x->dtype == dy->dtype, name,
             "x and dy must share a floating-point dtype, got %s and %s", em_dtype_name(x->dtype),
             em_dtype_name(dy->dtype));
    EM_CHECK(same_shape(x, dy), name, "x %s and dy %s differ in shape", em__shape_str(x), em__shape_str(dy));
    EM_CHECK(em_device_eq(x->device, dy->device), name, "x and dy are on different devices");
    if (y && (y->dtype != x->dtype || !same_shape(x, y) || !em_device_eq(x->device, y->device))) y = NULL;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *dx = em__empty(x->ndim, x->shape, x->dtype, x->device);
    em_kargs k = {.op = bwd_op[op], .in = {x, dy, y}, .out = {dx}};
    if (dx && em__dispatch(&k) == EM_OK) r = em_keep(dx);
    em_scope_end();
    return r;
}

/* ---- embedding with padding_idx ---------------------------------------------------- */

/* Position of the first id outside [0, n), or -1 (also -1 with *failed on OOM). */
static int64_t first_bad_id(em_tensor *ids, int64_t n, int64_t *value, bool *failed)
{
    int64_t bad = -1;
    em_scope_begin();
    em_tensor *h = ids->device.type == EM_DEVICE_CPU ? ids : em_to(ids, EM_CPU);
    *failed = !h;
    int64_t count = h ? em_numel(h) : 0, pos[EM_MAX_DIMS] = {0}, off = h ? h->offset : 0;
    for (int64_t i = 0; i < count && bad < 0; i++) {
        const void *p = h->storage->data;
        int64_t v = h->dtype == EM_I64 ? ((const int64_t *)p)[off] : ((const int32_t *)p)[off];
        if (v < 0 || v >= n) bad = i, *value = v;
        for (int d = h->ndim - 1; d >= 0; d--) {
            off += h->stride[d];
            if (++pos[d] < h->shape[d]) break;
            off -= pos[d] * h->stride[d];
            pos[d] = 0;
        }
    }
    em_scope_end();
    return bad;
}

em_tensor *em__embedding_ex(em_tensor *weight, em_tensor *ids, int64_t padding_idx)
{
    static const char op[] = "em_embedding";
    EM_PROPAGATE_NULL(weight, ids);
    EM_CHECK(weight->ndim == 2, op, "weight must be 2-d [num_embeddings, dim], got %s", em__shape_str(weight));
    EM_CHECK(ids->dtype == EM_I64 || ids->dtype == EM_I32, op, "ids must be i64 or i32, got %s %s",
             em_dtype_name(ids->dtype), em__shape_str(ids));
    EM_CHECK(ids->ndim < EM_MAX_DIMS, op, "ids %s have too many dims (the result adds one; at most %d)",
             em__shape_str(ids), EM_MAX_DIMS);
    EM_CHECK(em_device_eq(weight->device, ids->device), op, "weight and ids are on different devices");
    EM_CHECK(padding_idx >= -1 && padding_idx < weight->shape[0], op,
             "padding_idx %lld is out of range for weight %s (use -1 for none)", (long long)padding_idx,
             em__shape_str(weight));
    bool failed;
    int64_t value = 0, bad = first_bad_id(ids, weight->shape[0], &value, &failed);
    if (failed) return NULL;
    EM_CHECK(bad < 0, op, "id %lld at position %lld is out of range [0, %lld) for weight %s", (long long)value,
             (long long)bad, (long long)weight->shape[0], em__shape_str(weight));
    int64_t shape[EM_MAX_DIMS];
    memcpy(shape, ids->shape, sizeof(int64_t) * (size_t)ids->ndim);
    shape[ids->ndim] = weight->shape[1];
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *out = em__empty(ids->ndim + 1, shape, weight->dtype, weight->device);
    /* i[1] = 1 tells the backward rule that i[0] holds padding_idx (ops.h) */
    em_kargs k = {.op = EM_OP_EMBEDDING, .in = {weight, ids}, .out = {out}, .i = {padding_idx, 1}};
    if (out && em__dispatch(&k) == EM_OK) r = em_keep(out);
    em_scope_end();
    return r;
}

/* ---- scaled dot-product attention ---------------------------------------------------- */

/* torch.finfo(dt).min: what Hugging Face fills masked scores with, so a fully
 * masked row softmaxes to uniform weights instead of NaN. */
static double finfo_min(em_dtype dt)
{
    switch (dt) {
    case EM_F64: return -DBL_MAX;
    case EM_F16: return -65504.0;
    case EM_BF16: return -3.3895313892515355e38;
    default: return -FLT_MAX;
    }
}

/* The composed path: recorded ops, as Hugging Face writes it. q, k, v are
 * checked; mask NULL or bool broadcastable to the scores. */
static em_tensor *sdpa_composed(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask, double dropout_p,
                                uint64_t seed, uint64_t offset)
{
    em_tensor *out = NULL;
    em_scope_begin();
    em_tensor *qs = em_mul_scalar(q, 1.0 / sqrt((double)q->shape[3]));
    em_tensor *scores = em_matmul(qs, em_transpose(k, 2, 3));
    if (mask && scores) {
        em_tensor *masked_out = em_eq(mask, em_scalar(0, EM_BOOL, mask->device));
        scores = em_masked_fill(scores, masked_out, finfo_min(q->dtype));
    }
    em_tensor *w = em_softmax(scores, -1);
    if (dropout_p > 0.0) w = em_dropout(w, dropout_p, seed, offset, NULL);
    out = em_matmul(w, v);
    if (out) em_keep(out);
    em_scope_end();
    return out;
}

/* [B,1,1,Sk] bool: key j of batch b kept when j < lens[b]. */
em_tensor *em__sdpa_lens_mask(em_tensor *lens, int64_t sk)
{
    EM_PROPAGATE_NULL(lens);
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *j = em_reshape(em_arange(0, (double)sk, 1, EM_I64, lens->device), 4, (int64_t[]){1, 1, 1, sk});
    em_tensor *l = em_reshape(em_to_dtype(lens, EM_I64), 4, (int64_t[]){lens->shape[0], 1, 1, 1});
    em_tensor *m = em_lt(j, l);
    if (m) r = em_keep(m);
    em_scope_end();
    return r;
}

em_tensor *em__sdpa_result(const int64_t shape[4], em_dtype dtype, em_device device)
{
    if (device.type != EM_DEVICE_CPU) return em__empty(4, shape, dtype, device);
    int64_t bshd[4] = {shape[0], shape[2], shape[1], shape[3]};
    return em_permute(em__empty(4, bshd, dtype, device), (const int[]){0, 2, 1, 3});
}

em_tensor *em__sdpa(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *lens, double dropout_p, uint64_t seed,
                    uint64_t offset, bool pad_queries)
{
    static const char op[] = "em__sdpa";
    EM_PROPAGATE_NULL(q, k, v);
    EM_CHECK(q->ndim == 4 && k->ndim == 4 && v->ndim == 4 && em_dtype_is_float(q->dtype) && k->dtype == q->dtype &&
                 v->dtype == q->dtype && same_shape(k, v) && k->shape[0] == q->shape[0] &&
                 k->shape[1] == q->shape[1] && k->shape[3] == q->shape[3],
             op, "q %s, k %s, v %s must be [B,H,Sq,D], [B,H,Sk,D] of one float dtype", em__shape_str(q),
             em__shape_str(k), em__shape_str(v));
    EM_CHECK(em_device_eq(q->device, k->device) && em_device_eq(q->device, v->device), op,
             "q, k, v are on different devices");
    EM_CHECK(!lens || (lens->ndim == 1 && lens->shape[0] == q->shape[0] &&
                       (lens->dtype == EM_I32 || lens->dtype == EM_I64) && em_device_eq(lens->device, q->device)),
             op, "lens must be i32/i64 [%lld] on q's device, got %s %s", (long long)q->shape[0],
             lens ? em_dtype_name(lens->dtype) : "", lens ? em__shape_str(lens) : "");
    EM_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, "dropout_p must be in [0, 1), got %g", dropout_p);
    EM_CHECK(k->shape[2] > 0, op, "k and v have no keys (%s)", em__shape_str(k));
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *l32 = lens ? em_contiguous(em_to_dtype(lens, EM_I32)) : NULL;
    int64_t oshape[4] = {q->shape[0], q->shape[1], q->shape[2], q->shape[3]};
    int64_t lshape[4] = {q->shape[0], q->shape[1], q->shape[2], 1};
    em_tensor *out = em__sdpa_result(oshape, q->dtype, q->device), *lse = em__empty(4, lshape, EM_F32, q->device);
    if (out && lse && (!lens || l32)) {
        em_kargs ka = {.op = EM_OP_SDPA, .in = {q, k, v, l32}, .out = {out, lse},
                       .f = {1.0 / sqrt((double)q->shape[3]), dropout_p}, .i = {(int64_t)seed, (int64_t)offset, pad_queries && lens}};
        em_status s = em__dispatch(&ka);
        if (s == EM_OK) r = em_keep(out);
        else if (s == EM_ERR_UNSUPPORTED)   /* the backend declined (no error set): compose */
            r = em_keep(sdpa_composed(q, k, v, lens ? em__sdpa_lens_mask(l32, k->shape[2]) : NULL, dropout_p, seed,
                                      offset));
    }
    em_scope_end();
    return r;
}

/* Key lengths from a key-padding mask, for the fused path. A device mask's
 * are cached for the last mask seen on this thread (the layers of one forward
 * share it, so the device-to-host read happens once per forward); a CPU
 * mask's are computed each call (a scan of B x Sk bytes), uncached. The cache holds an alias
 * of the mask, so its storage cannot be freed and reused under the key.
 * Returns true with *lens (scope-owned i32 [B] on q's device) when the mask
 * is constant over heads and query rows and every batch row keeps a
 * non-empty prefix of keys (right padding); false otherwise (or on OOM). */
static _Thread_local struct {
    em_tensor *mask;     /* alias, owned */
    uint32_t version;
    em_tensor *lens;     /* owned, NULL when the mask is not a prefix mask */
} lens_cache;

static bool same_geometry(const em_tensor *a, const em_tensor *b)
{
    return a->storage == b->storage && a->offset == b->offset && same_shape(a, b) &&
           !memcmp(a->stride, b->stride, sizeof(int64_t) * (size_t)a->ndim);
}

static bool key_lengths(em_tensor *mask, em_tensor *q, int64_t sk, em_tensor **lens)
{
    int64_t B = q->shape[0], shape[4] = {1, 1, 1, 1};
    for (int d = 0; d < mask->ndim; d++) shape[4 - mask->ndim + d] = mask->shape[d];
    if (shape[1] != 1 || shape[2] != 1 || shape[3] != sk) return false;
    bool cache = mask->device.type != EM_DEVICE_CPU;   /* a CPU mask is read in place: nothing to save */
    if (cache && lens_cache.mask && same_geometry(lens_cache.mask, mask) &&
        lens_cache.version == mask->storage->version) {
        *lens = lens_cache.lens;
        return *lens != NULL;
    }
    em_tensor *fresh = NULL;
    bool ok = true;
    em_scope_begin();
    em_tensor *h = em_contiguous(em_to(em_reshape(mask, 2, (int64_t[]){shape[0], sk}), EM_CPU));
    int32_t *l = em__malloc(sizeof(int32_t) * (size_t)B);
    ok = h && l;
    for (int64_t b = 0; ok && b < B; b++) {
        const uint8_t *row = (const uint8_t *)h->storage->data + h->offset + (shape[0] == 1 ? 0 : b) * sk;
        int64_t n = 0;
        while (n < sk && row[n]) n++;
        for (int64_t j = n; j < sk && ok; j++) ok = !row[j];
        ok = ok && n > 0;   /* a row with no key: HF's uniform weights, which the fused engine does not give */
        if (ok) l[b] = (int32_t)n;
    }
    if (ok) fresh = em_to(em_from_data(l, 1, (int64_t[]){B}, EM_I32), q->device);
    if (fresh) em_retain(fresh);
    em__free(l);
    em_scope_end();
    if (!cache) {   /* hand the reference to the caller's scope */
        *lens = fresh ? em__scope_adopt(fresh) : NULL;
        return fresh != NULL;
    }
    em_tensor *alias = em__alias(mask);
    if (!alias) {
        em_release(fresh);
        return false;
    }
    em_release(lens_cache.mask);
    em_release(lens_cache.lens);
    lens_cache.mask = alias;
    lens_cache.version = mask->storage->version;
    lens_cache.lens = fresh;
    *lens = fresh;
    return fresh != NULL;
}

em_tensor *em_scaled_dot_product_attention(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask,
                                           double dropout_p, uint64_t seed, uint64_t offset)
{
    static const char op[] = "em_scaled_dot_product_attention";
    EM_PROPAGATE_NULL(q, k, v);
    EM_CHECK(q->ndim == 4 && k->ndim == 4 && v->ndim == 4, op, "q, k, v must be 4-d [B,H,S,Dh], got %s, %s, %s",
             em__shape_str(q), em__shape_str(k), em__shape_str(v));
    EM_CHECK(em_dtype_is_float(q->dtype) && k->dtype == q->dtype && v->dtype == q->dtype, op,
             "q, k, v must share a floating-point dtype, got %s, %s, %s", em_dtype_name(q->dtype),
             em_dtype_name(k->dtype), em_dtype_name(v->dtype));
    EM_CHECK(em_device_eq(q->device, k->device) && em_device_eq(q->device, v->device), op,
             "q, k, v are on different devices");
    EM_CHECK(same_shape(k, v) && k->shape[0] == q->shape[0] && k->shape[1] == q->shape[1] &&
                 k->shape[3] == q->shape[3],
             op, "shapes do not fit: q %s, k %s, v %s (expected q [B,H,Sq,Dh], k and v [B,H,Sk,Dh])",
             em__shape_str(q), em__shape_str(k), em__shape_str(v));
    EM_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, op, "dropout_p must be in [0, 1), got %g", dropout_p);
    int64_t sshape[4] = {q->shape[0], q->shape[1], q->shape[2], k->shape[2]};
    if (mask) {
        int nd;
        int64_t bs[EM_MAX_DIMS];
        EM_CHECK(mask->dtype == EM_BOOL && em_device_eq(mask->device, q->device), op,
                 "mask must be a bool tensor on q's device, got %s %s", em_dtype_name(mask->dtype),
                 em__shape_str(mask));
        EM_CHECK(em__broadcast_shapes(mask->ndim, mask->shape, 4, sshape, &nd, bs) && nd == 4 &&
                     !memcmp(bs, sshape, sizeof sshape),
                 op, "mask %s does not broadcast to the scores %s", em__shape_str(mask), em__dims_str(4, sshape));
    }
    /* The fused path, op SDPA, for no mask or a right-padding key mask (and at
     * least one key):
     *   - the CPU: every float dtype, with or without dropout (tensor/cpu/k_sdpa.c,
     *     the same Philox mask as the composed path's em_dropout);
     *   - CUDA: cuDNN (tensor/cuda/k_sdpa_cudnn.cu) for half types without dropout
     *     (ember's Philox masks must match the CPU's bit for bit, which cuDNN's
     *     dropout would not) and a head dim cuDNN takes; em__sdpa composes the
     *     same ops when cuDNN declines the shape.
     * Everything else composes below. */
    int64_t dh = q->shape[3];
    bool cpu = q->device.type == EM_DEVICE_CPU;
    if (k->shape[2] > 0 &&
        (cpu || (dropout_p == 0.0 && q->device.type == EM_DEVICE_CUDA && (q->dtype == EM_F16 || q->dtype == EM_BF16) &&
                 dh % 8 == 0 && dh <= 128))) {
        em_tensor *lens = NULL, *r = NULL;
        bool fused = false;
        em_scope_begin();   /* owns a CPU mask's lens */
        if (!mask || key_lengths(mask, q, k->shape[2], &lens)) {
            fused = true;
            r = em__sdpa(q, k, v, lens, dropout_p, seed, offset, false);
            if (r) em_keep(r);
        }
        em_scope_end();
        if (fused) return r;
    }
    return sdpa_composed(q, k, v, mask, dropout_p, seed, offset);
}
