/* ember — front-ends made for autograd (declared in tensor/op_grad.h): the
 * GELU backward kernels, embedding with a padding_idx, and scaled dot-product
 * attention composed from recorded ops. */
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

static bool same_shape(const em_tensor *a, const em_tensor *b)
{
    return a->ndim == b->ndim && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim);
}

/* ---- gelu backward --------------------------------------------------------------- */

em_tensor *em__gelu_backward(em_tensor *x, em_tensor *dy, bool tanh_approx)
{
    const char *op = tanh_approx ? "em_gelu_tanh_backward" : "em_gelu_backward";
    EM_PROPAGATE_NULL(x, dy);
    EM_CHECK(em_dtype_is_float(x->dtype) && x->dtype == dy->dtype, op,
             "x and dy must share a floating-point dtype, got %s and %s", em_dtype_name(x->dtype),
             em_dtype_name(dy->dtype));
    EM_CHECK(same_shape(x, dy), op, "x %s and dy %s differ in shape", em__shape_str(x), em__shape_str(dy));
    EM_CHECK(em_device_eq(x->device, dy->device), op, "x and dy are on different devices");
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *dx = em__empty(x->ndim, x->shape, x->dtype, x->device);
    em_kargs k = {.op = tanh_approx ? EM_OP_GELU_TANH_BWD : EM_OP_GELU_BWD, .in = {x, dy}, .out = {dx}};
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
