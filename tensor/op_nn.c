/* ember — front-ends of the fused NN ops (tensor.h "linear algebra and NN
 * kernels", plus the internal ones of tensor/op_nn.h).
 *
 * Each op checks its arguments (misuse: op name, what is wrong, the shapes),
 * then opens a scope for its intermediates and outputs, dispatches, and keeps
 * the results it returns into the caller's scope. Ids and targets are read
 * on the CPU (copied there when they live on a device) and every one is
 * checked before dispatch.
 */
#include "tensor/op_nn.h"
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <math.h>

static bool same_shape(const em_tensor *a, const em_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static bool is_index_dtype(em_dtype dt) { return dt == EM_I64 || dt == EM_I32; }

/* Element i (row-major) of a CPU i64/i32 tensor of any layout. */
static int64_t index_value(const em_tensor *t, int64_t i)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0 && i > 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    const void *p = t->storage->data;
    return t->dtype == EM_I64 ? ((const int64_t *)p)[off] : ((const int32_t *)p)[off];
}

/* Misuse (and false) when an element of idx lies outside [0, n) and is not
 * `except` (when has_except). False without a message on an outside failure. */
static bool check_indices(const char *op, em_tensor *idx, int64_t n, bool has_except, int64_t except,
                          const char *what, const char *of_name, const em_tensor *of)
{
    em_scope_begin();
    em_tensor *h = idx->device.type == EM_DEVICE_CPU ? idx : em_to(idx, EM_CPU);
    int64_t bad = -1, val = 0, count = h ? em_numel(h) : 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t v = index_value(h, i);
        if ((v < 0 || v >= n) && !(has_except && v == except)) {
            bad = i, val = v;
            break;
        }
    }
    em_scope_end();
    if (!h) return false;
    if (bad >= 0) {
        em__misuse(op, "%s %lld at position %lld is out of range [0, %lld) for %s %s", what, (long long)val,
                   (long long)bad, (long long)n, of_name, em__shape_str(of));
        return false;
    }
    return true;
}

/* Keeps r into the caller's scope when ok; NULL otherwise. */
static em_tensor *keep_if(bool ok, em_tensor *r) { return ok && r ? em_keep(r) : NULL; }

/* The tail of a front-end whose kernel writes three outputs: dispatches k when
 * ok (its outputs were allocated), keeps out[0] as the result and, when that
 * succeeded, out[1] and out[2] into *extra1 and *extra2 (each NULL when not
 * asked for), and ends the front-end's scope. */
static em_tensor *dispatch_keep3(bool ok, em_kargs *k, em_tensor **extra1, em_tensor **extra2)
{
    if (ok) ok = em__dispatch(k) == EM_OK;
    em_tensor *r = keep_if(ok, k->out[0]);
    if (r && extra1) *extra1 = em_keep(k->out[1]);
    if (r && extra2) *extra2 = em_keep(k->out[2]);
    em_scope_end();
    return r;
}

/* On the CPU, a tensor whose last dim is strided (a transposed view) reads one
 * cache line an element in the row kernels' gathers (cross-entropy's logits
 * [2048,1024]: 7.2 ms against 0.53; layer_norm's backward dy: 7.4 against
 * 0.43); a contiguous copy (the iterator's tiles; recorded, so gradients flow)
 * costs less. Other devices' kernels take their strides as before. Called
 * inside the op's scope; NULL on an outside failure (error set). */
static em_tensor *rows_contiguous(em_tensor *t)
{
    if (t->device.type != EM_DEVICE_CPU || t->ndim < 1 || t->stride[t->ndim - 1] == 1 || t->shape[t->ndim - 1] < 16)
        return t;
    return em_contiguous(t);
}

/* ---- softmax ------------------------------------------------------------------ */

static em_tensor *softmax_op(em_tensor *t, int dim, em_op opc, const char *op)
{
    t = em__autocast(opc, 0, t);   /* in an autocast region: f32 */
    EM_PROPAGATE_NULL_IN(op, t);
    EM_CHECK(em_dtype_is_float(t->dtype), op, "expected a floating-point tensor, got %s %s",
             em_dtype_name(t->dtype), em__shape_str(t));
    int d = em__wrap_dim(dim, t->ndim, op);
    if (d < 0) return NULL;
    em_scope_begin();
    em_tensor *x = em_contiguous(t);   /* the kernel contract: a contiguous input */
    em_tensor *y = x ? em__empty(t->ndim, t->shape, t->dtype, t->device) : NULL;
    em_kargs k = {.op = opc, .in = {x}, .out = {y}, .i = {t->ndim ? d : -1}};
    em_tensor *r = keep_if(y && em__dispatch(&k) == EM_OK, y);
    em_scope_end();
    return r;
}

em_tensor *em_softmax(em_tensor *t, int dim) { return softmax_op(t, dim, EM_OP_SOFTMAX, "em_softmax"); }
em_tensor *em_log_softmax(em_tensor *t, int dim) { return softmax_op(t, dim, EM_OP_LOG_SOFTMAX, "em_log_softmax"); }

bool em__check_same(const char *op, const char *an, const em_tensor *a, const char *bn, const em_tensor *b)
{
    if (!(em_dtype_is_float(a->dtype) && a->dtype == b->dtype))
        em__misuse(op, "%s and %s must share a floating-point dtype, got %s and %s", an, bn, em_dtype_name(a->dtype),
                   em_dtype_name(b->dtype));
    else if (!same_shape(a, b))
        em__misuse(op, "%s %s and %s %s differ in shape", an, em__shape_str(a), bn, em__shape_str(b));
    else if (!em_device_eq(a->device, b->device))
        em__misuse(op, "%s and %s are on different devices", an, bn);
    else
        return true;
    return false;
}

em_tensor *em__softmax_backward(em_tensor *y, em_tensor *dy, int dim, bool log)
{
    const char *op = log ? "em_log_softmax_backward" : "em_softmax_backward";
    EM_PROPAGATE_NULL(y, dy);
    if (!em__check_same(op, "y", y, "dy", dy)) return NULL;
    int d = em__wrap_dim(dim, y->ndim, op);
    if (d < 0) return NULL;
    em_scope_begin();
    em_tensor *dx = em__empty(y->ndim, y->shape, y->dtype, y->device);
    em_kargs k = {.op = log ? EM_OP_LOG_SOFTMAX_BWD : EM_OP_SOFTMAX_BWD, .in = {y, dy}, .out = {dx},
                  .i = {y->ndim ? d : -1}};
    em_tensor *r = keep_if(dx && em__dispatch(&k) == EM_OK, dx);
    em_scope_end();
    return r;
}

/* ---- layer_norm -------------------------------------------------------------------- */

/* w is NULL or a [D] vector of x's dtype and device. */
static bool check_affine(const char *op, const em_tensor *x, const em_tensor *w, const char *name)
{
    if (!w) return true;
    int64_t D = x->shape[x->ndim - 1];
    if (w->ndim != 1 || w->shape[0] != D) {
        em__misuse(op, "%s %s does not match the last dim %lld of input %s", name, em__shape_str(w),
                   (long long)D, em__shape_str(x));
        return false;
    }
    if (w->dtype != x->dtype || !em_device_eq(w->device, x->device)) {
        em__misuse(op, "%s (%s) must have the dtype and device of input %s (%s)", name,
                   em_dtype_name(w->dtype), em__shape_str(x), em_dtype_name(x->dtype));
        return false;
    }
    return true;
}

/* mean/rstd: float, R = numel(x) / D elements, shaped as x without its last
 * dim (or with it as 1, as torch's native_layer_norm returns them). */
static bool check_stat(const char *op, const em_tensor *x, const em_tensor *s, const char *name)
{
    bool ok = em_dtype_is_float(s->dtype) && em_device_eq(s->device, x->device);
    int lead = x->ndim - 1;
    if (ok && s->ndim == lead + 1) ok = s->shape[lead] == 1;
    else ok = ok && s->ndim == lead;
    for (int d = 0; ok && d < lead; d++) ok = s->shape[d] == x->shape[d];
    if (!ok)
        em__misuse(op, "%s %s (%s) does not match input %s: expected a float tensor of its leading shape", name,
                   em__shape_str(s), em_dtype_name(s->dtype), em__shape_str(x));
    return ok;
}

em_tensor *em_layer_norm(em_tensor *x, em_tensor *weight, em_tensor *bias, double eps, em_tensor **mean,
                         em_tensor **rstd)
{
    static const char op[] = "em_layer_norm";
    if (mean) *mean = NULL;
    if (rstd) *rstd = NULL;
    /* in an autocast region: f32 */
    em_tensor *w32 = em__autocast(EM_OP_LAYER_NORM, 1, weight), *b32 = em__autocast(EM_OP_LAYER_NORM, 2, bias);
    if ((weight && !w32) || (bias && !b32)) return NULL;
    weight = w32, bias = b32;
    x = em__autocast(EM_OP_LAYER_NORM, 0, x);
    EM_PROPAGATE_NULL(x);
    EM_CHECK(em_dtype_is_float(x->dtype), op, "expected a floating-point input, got %s %s",
             em_dtype_name(x->dtype), em__shape_str(x));
    EM_CHECK(x->ndim >= 1, op, "input must have at least 1 dim, got a 0-d tensor");
    EM_CHECK(eps >= 0.0, op, "eps must be >= 0, got %g", eps);
    if (!check_affine(op, x, weight, "weight") || !check_affine(op, x, bias, "bias")) return NULL;
    em_dtype sdt = x->dtype == EM_F64 ? EM_F64 : EM_F32;
    em_scope_begin();
    em_tensor *xc = em_contiguous(x);   /* the kernel contract: a contiguous input */
    em_tensor *y = em__empty(x->ndim, x->shape, x->dtype, x->device);
    em_tensor *mu = em__empty(x->ndim - 1, x->shape, sdt, x->device);
    em_tensor *rs = em__empty(x->ndim - 1, x->shape, sdt, x->device);
    em_kargs k = {.op = EM_OP_LAYER_NORM, .in = {xc, weight, bias}, .out = {y, mu, rs}, .f = {eps}};
    return dispatch_keep3(xc && y && mu && rs, &k, mean, rstd);
}

em_tensor *em_layer_norm_backward(em_tensor *dy, em_tensor *x, em_tensor *mean, em_tensor *rstd,
                                  em_tensor *weight, em_tensor **dweight, em_tensor **dbias)
{
    static const char op[] = "em_layer_norm_backward";
    if (dweight) *dweight = NULL;
    if (dbias) *dbias = NULL;
    EM_PROPAGATE_NULL(dy, x, mean, rstd);
    EM_CHECK(em_dtype_is_float(x->dtype) && dy->dtype == x->dtype, op,
             "dy and x must share a floating-point dtype, got %s and %s", em_dtype_name(dy->dtype),
             em_dtype_name(x->dtype));
    EM_CHECK(x->ndim >= 1, op, "input must have at least 1 dim, got a 0-d tensor");
    EM_CHECK(same_shape(dy, x), op, "dy %s and x %s differ in shape", em__shape_str(dy), em__shape_str(x));
    EM_CHECK(em_device_eq(dy->device, x->device), op, "dy and x are on different devices");
    if (!check_stat(op, x, mean, "mean") || !check_stat(op, x, rstd, "rstd") ||
        !check_affine(op, x, weight, "weight"))
        return NULL;
    int64_t D = x->shape[x->ndim - 1];
    em_scope_begin();
    if (!(dy = rows_contiguous(dy)) || !(x = rows_contiguous(x))) {
        em_scope_end();
        return NULL;
    }
    em_tensor *dx = em__empty(x->ndim, x->shape, x->dtype, x->device);
    em_tensor *dw = dweight ? em__empty(1, &D, x->dtype, x->device) : NULL;
    em_tensor *db = dbias ? em__empty(1, &D, x->dtype, x->device) : NULL;
    em_kargs k = {.op = EM_OP_LAYER_NORM_BWD, .in = {dy, x, mean, rstd, weight}, .out = {dx, dw, db}};
    return dispatch_keep3(dx && (dw || !dweight) && (db || !dbias), &k, dweight, dbias);
}

/* ---- embedding ------------------------------------------------------------------------ */

em_tensor *em_embedding(em_tensor *weight, em_tensor *ids)
{
    static const char op[] = "em_embedding";
    EM_PROPAGATE_NULL(weight, ids);
    EM_CHECK(weight->ndim == 2, op, "weight must be 2-d [num_embeddings, dim], got %s", em__shape_str(weight));
    EM_CHECK(is_index_dtype(ids->dtype), op, "ids must be i64 or i32, got %s %s", em_dtype_name(ids->dtype),
             em__shape_str(ids));
    EM_CHECK(ids->ndim < EM_MAX_DIMS, op, "ids %s have too many dims (the result adds one; at most %d)",
             em__shape_str(ids), EM_MAX_DIMS);
    EM_CHECK(em_device_eq(weight->device, ids->device), op, "weight and ids are on different devices");
    if (!check_indices(op, ids, weight->shape[0], false, 0, "id", "weight", weight)) return NULL;
    int64_t shape[EM_MAX_DIMS];
    for (int d = 0; d < ids->ndim; d++) shape[d] = ids->shape[d];
    shape[ids->ndim] = weight->shape[1];
    em_scope_begin();
    /* [ids..., D]: the contract's [N, D], contiguous */
    em_tensor *out = em__empty(ids->ndim + 1, shape, weight->dtype, weight->device);
    em_kargs k = {.op = EM_OP_EMBEDDING, .in = {weight, ids}, .out = {out}};
    em_tensor *r = keep_if(out && em__dispatch(&k) == EM_OK, out);
    em_scope_end();
    return r;
}

/* The checks of em_embedding_backward (and of its accumulating form): dy on success, else NULL. */
static em_tensor *check_embedding_backward(const char *op, em_tensor *dy, em_tensor *ids, int64_t num_embeddings,
                                           int64_t padding_idx)
{
    EM_CHECK(em_dtype_is_float(dy->dtype), op, "dy must be floating-point, got %s %s", em_dtype_name(dy->dtype),
             em__shape_str(dy));
    EM_CHECK(is_index_dtype(ids->dtype), op, "ids must be i64 or i32, got %s %s", em_dtype_name(ids->dtype),
             em__shape_str(ids));
    bool match = dy->ndim == ids->ndim + 1;
    for (int d = 0; match && d < ids->ndim; d++) match = dy->shape[d] == ids->shape[d];
    EM_CHECK(match, op, "dy %s must be ids' shape %s plus one trailing dim", em__shape_str(dy),
             em__shape_str(ids));
    EM_CHECK(em_device_eq(dy->device, ids->device), op, "dy and ids are on different devices");
    EM_CHECK(num_embeddings >= 0, op, "num_embeddings must be >= 0, got %lld", (long long)num_embeddings);
    EM_CHECK(padding_idx < num_embeddings, op, "padding_idx %lld is out of range for num_embeddings %lld",
             (long long)padding_idx, (long long)num_embeddings);
    if (!check_indices(op, ids, num_embeddings, false, 0, "id", "dy", dy)) return NULL;
    return dy;
}

em_tensor *em_embedding_backward(em_tensor *dy, em_tensor *ids, int64_t num_embeddings, int64_t padding_idx)
{
    static const char op[] = "em_embedding_backward";
    EM_PROPAGATE_NULL(dy, ids);
    if (!check_embedding_backward(op, dy, ids, num_embeddings, padding_idx)) return NULL;
    int64_t shape[2] = {num_embeddings, dy->shape[dy->ndim - 1]};
    em_scope_begin();
    em_tensor *dw = em__empty(2, shape, dy->dtype, dy->device);
    em_kargs k = {.op = EM_OP_EMBEDDING_BWD, .in = {dy, ids}, .out = {dw}, .i = {padding_idx < 0 ? -1 : padding_idx}};
    em_tensor *r = keep_if(dw && em__dispatch(&k) == EM_OK, dw);
    em_scope_end();
    return r;
}

bool em__embedding_backward_into(em_tensor *dw, em_tensor *dy, em_tensor *ids, int64_t padding_idx)
{
    static const char op[] = "em__embedding_backward_into";
    if (!dw || !dy || !ids) return false;
    if (!em__live(dw, op) || !em__live(dy, op) || !em__live(ids, op)) return false;
    if (dw->ndim != 2 || !em_is_contiguous(dw) || dw->dtype != dy->dtype || !em_device_eq(dw->device, dy->device) ||
        dw->shape[1] != dy->shape[dy->ndim - 1]) {
        em__misuse(op, "dw %s (%s) must be a contiguous [V, %lld] of dy's dtype %s and device", em__shape_str(dw),
                   em_dtype_name(dw->dtype), (long long)dy->shape[dy->ndim - 1], em_dtype_name(dy->dtype));
        return false;
    }
    if (!check_embedding_backward(op, dy, ids, dw->shape[0], padding_idx)) return false;
    em_kargs k = {.op = EM_OP_EMBEDDING_BWD, .in = {dy, ids}, .out = {dw}, .i = {padding_idx < 0 ? -1 : padding_idx, 1}};
    return em__dispatch(&k) == EM_OK;
}

/* ---- dropout ---------------------------------------------------------------------------- */

em_tensor *em_dropout(em_tensor *x, double p, uint64_t seed, uint64_t offset, em_tensor **mask)
{
    static const char op[] = "em_dropout";
    if (mask) *mask = NULL;
    EM_PROPAGATE_NULL(x);
    EM_CHECK(em_dtype_is_float(x->dtype), op, "expected a floating-point input, got %s %s",
             em_dtype_name(x->dtype), em__shape_str(x));
    EM_CHECK(p >= 0.0 && p <= 1.0, op, "p must be in [0, 1], got %g", p);
    em_scope_begin();
    /* the CPU kernel's strided path decomposes every element's index, and reads a
     * transposed view one cache line an element ([2048,1024] f32: 13.6 ms against
     * 0.98 contiguous); a contiguous copy (recorded: gradients flow) takes the fast
     * path, same values and mask */
    if (x->device.type == EM_DEVICE_CPU && !em_is_contiguous(x) && !(x = em_contiguous(x))) {
        em_scope_end();
        return NULL;
    }
    em_tensor *y = em__empty(x->ndim, x->shape, x->dtype, x->device);
    em_tensor *m = em__empty(x->ndim, x->shape, EM_BOOL, x->device);
    em_kargs k = {.op = EM_OP_DROPOUT, .in = {x}, .out = {y, m}, .f = {p}, .i = {(int64_t)seed, (int64_t)offset}};
    em_tensor *r = keep_if(y && m && em__dispatch(&k) == EM_OK, y);
    if (r && mask) *mask = em_keep(m);
    em_scope_end();
    return r;
}

em_tensor *em__dropout_masked(em_tensor *g, em_tensor *mask, double p, uint64_t seed, uint64_t offset)
{
    EM_PROPAGATE_NULL(g);
    bool usable = mask && em__live(mask, "em_dropout") && mask->dtype == EM_BOOL && em_is_contiguous(mask) &&
                  same_shape(mask, g) &&
                  em_device_eq(mask->device, g->device);
    if (!usable || !em_dtype_is_float(g->dtype)) return em_dropout(g, p, seed, offset, NULL);
    em_scope_begin();
    em_tensor *y = em__empty(g->ndim, g->shape, g->dtype, g->device);
    em_kargs k = {.op = EM_OP_DROPOUT, .in = {g, mask}, .out = {y}, .f = {p}, .i = {(int64_t)seed, (int64_t)offset}};
    em_tensor *r = keep_if(y && em__dispatch(&k) == EM_OK, y);
    em_scope_end();
    return r;
}

/* ---- cross-entropy -------------------------------------------------------------------------- */

static bool check_ce(const char *op, em_tensor *logits, em_tensor *target, int64_t ignore_index, em_reduction red)
{
    if (logits->ndim != 2 || !em_dtype_is_float(logits->dtype)) {
        em__misuse(op, "logits must be a 2-d [N, C] floating-point tensor, got %s %s",
                   em_dtype_name(logits->dtype), em__shape_str(logits));
        return false;
    }
    if (target->dtype != EM_I64 || target->ndim != 1 || target->shape[0] != logits->shape[0]) {
        em__misuse(op, "target must be i64 [%lld] for logits %s, got %s %s", (long long)logits->shape[0],
                   em__shape_str(logits), em_dtype_name(target->dtype), em__shape_str(target));
        return false;
    }
    if (!em_device_eq(logits->device, target->device)) {
        em__misuse(op, "logits and target are on different devices");
        return false;
    }
    if ((unsigned)red > EM_REDUCE_NONE) {
        em__misuse(op, "unknown reduction %d", (int)red);
        return false;
    }
    return check_indices(op, target, logits->shape[1], true, ignore_index, "target", "logits", logits);
}

em_tensor *em__cross_entropy(em_tensor *logits, em_tensor *target, int64_t ignore_index, em_reduction red,
                             em_tensor **lse)
{
    static const char op[] = "em_cross_entropy";
    if (lse) *lse = NULL;
    logits = em__autocast(EM_OP_CROSS_ENTROPY, 0, logits);   /* in an autocast region: f32 */
    EM_PROPAGATE_NULL(logits, target);
    if (!check_ce(op, logits, target, ignore_index, red)) return NULL;
    em_dtype sdt = logits->dtype == EM_F64 ? EM_F64 : EM_F32;
    em_scope_begin();
    if (!(logits = rows_contiguous(logits))) {
        em_scope_end();
        return NULL;
    }
    em_tensor *loss = em__empty(red == EM_REDUCE_NONE ? 1 : 0, logits->shape, logits->dtype, logits->device);
    em_tensor *l = em__empty(1, logits->shape, sdt, logits->device);
    em_kargs k = {.op = EM_OP_CROSS_ENTROPY, .in = {logits, target}, .out = {loss, l}, .i = {ignore_index, red}};
    em_tensor *r = keep_if(loss && l && em__dispatch(&k) == EM_OK, loss);
    if (r && lse) *lse = em_keep(l);
    em_scope_end();
    return r;
}

em_tensor *em_cross_entropy(em_tensor *logits, em_tensor *target, int64_t ignore_index, em_reduction red)
{
    return em__cross_entropy(logits, target, ignore_index, red, NULL);
}

static bool check_dloss(const char *op, const em_tensor *dloss, const em_tensor *logits, em_reduction red)
{
    bool ok = em_dtype_is_float(dloss->dtype) && em_device_eq(dloss->device, logits->device);
    if (red == EM_REDUCE_NONE) ok = ok && dloss->ndim == 1 && dloss->shape[0] == logits->shape[0];
    else ok = ok && em_numel(dloss) == 1;
    if (!ok)
        em__misuse(op, "dloss %s (%s) must be a float %s for logits %s", em__shape_str(dloss),
                   em_dtype_name(dloss->dtype), red == EM_REDUCE_NONE ? "[N] tensor" : "scalar",
                   em__shape_str(logits));
    return ok;
}

em_tensor *em__cross_entropy_backward(em_tensor *dloss, em_tensor *logits, em_tensor *target, em_tensor *lse,
                                      int64_t ignore_index, em_reduction red)
{
    static const char op[] = "em_cross_entropy_backward";
    EM_PROPAGATE_NULL(dloss, logits, target, lse);
    if (!check_ce(op, logits, target, ignore_index, red) || !check_dloss(op, dloss, logits, red)) return NULL;
    EM_CHECK(em_dtype_is_float(lse->dtype) && lse->ndim == 1 && lse->shape[0] == logits->shape[0] &&
                 em_device_eq(lse->device, logits->device),
             op, "lse %s (%s) must be a float [N] tensor for logits %s", em__shape_str(lse),
             em_dtype_name(lse->dtype), em__shape_str(logits));
    em_scope_begin();
    if (!(logits = rows_contiguous(logits))) {
        em_scope_end();
        return NULL;
    }
    em_tensor *dx = em__empty(2, logits->shape, logits->dtype, logits->device);
    em_kargs k = {.op = EM_OP_CROSS_ENTROPY_BWD, .in = {logits, target, lse, dloss}, .out = {dx},
                  .i = {ignore_index, red}};
    em_tensor *r = keep_if(dx && em__dispatch(&k) == EM_OK, dx);
    em_scope_end();
    return r;
}

em_tensor *em_cross_entropy_backward(em_tensor *dloss, em_tensor *logits, em_tensor *target,
                                     int64_t ignore_index, em_reduction red)
{
    static const char op[] = "em_cross_entropy_backward";
    EM_PROPAGATE_NULL(dloss, logits, target);
    if (!check_ce(op, logits, target, ignore_index, red) || !check_dloss(op, dloss, logits, red)) return NULL;
    em_scope_begin();
    em_tensor *lse = NULL;
    em_tensor *loss = em__cross_entropy(logits, target, ignore_index, EM_REDUCE_NONE, &lse);
    em_tensor *dx = loss ? em__cross_entropy_backward(dloss, logits, target, lse, ignore_index, red) : NULL;
    em_tensor *r = keep_if(dx != NULL, dx);
    em_scope_end();
    return r;
}
