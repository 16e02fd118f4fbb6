/* ember — shape and index ops: cat, stack, index_select, gather, scatter_add
 * (tensor.h). Each validates shapes, dtypes, devices and every index value
 * (torch's rules), allocates the contiguous output and dispatches.
 * Index tensors are i64 or i32; indices are never negative (as torch).
 */
#include "tensor/tensor_internal.h"

#include <inttypes.h>

static bool is_index_dtype(em_dtype dt) { return dt == EM_I64 || dt == EM_I32; }

/* Wraps dim into [0, ndim); misuse (and -1) when out of range. */
static int wrap_dim(const char *op, int dim, int ndim, const em_tensor *t)
{
    if (dim < -ndim || dim >= ndim) {
        em__misuse(op, "dim %d is out of range for input %s (expected %d to %d)", dim, em__shape_str(t), -ndim,
                   ndim - 1);
        return -1;
    }
    return dim < 0 ? dim + ndim : dim;
}

/* Checks that every index is in [0, size); misuse naming the first bad one.
 * Reads a CPU copy when the index lives on another device. */
static bool check_indices(const char *op, em_tensor *index, int64_t size, int dim, const em_tensor *t)
{
    int64_t n = em_numel(index);
    if (n == 0) return true;
    em_tensor *h = index;
    em_scope_begin();   /* owns the CPU copy, if one is made */
    if (index->device.type != EM_DEVICE_CPU) h = em_to(index, EM_CPU);
    if (!h) {
        em_scope_end();
        return false;
    }
    const size_t es = em_dtype_size(h->dtype);
    const char *base = (const char *)h->storage->data + h->offset * (int64_t)es;
    int64_t pos[EM_MAX_DIMS] = {0}, shape[EM_MAX_DIMS], off = 0, bad = 0, distinct = 1;
    for (int d = 0; d < h->ndim; d++) {   /* a broadcast dim (stride 0) repeats values: read each once */
        shape[d] = h->stride[d] == 0 ? 1 : h->shape[d];
        distinct *= shape[d];
    }
    bool ok = true;
    if (em_is_contiguous(h)) {   /* the usual case: a min/max sweep the compiler vectorizes (an N-d walk: 1.5 ns a value) */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        if (h->dtype == EM_I32) {
            const int32_t *v = (const int32_t *)base;
#pragma omp simd reduction(min : lo) reduction(max : hi)
            for (int64_t e = 0; e < n; e++) lo = v[e] < lo ? v[e] : lo, hi = v[e] > hi ? v[e] : hi;
        } else {
            const int64_t *v = (const int64_t *)base;
#pragma omp simd reduction(min : lo) reduction(max : hi)
            for (int64_t e = 0; e < n; e++) lo = v[e] < lo ? v[e] : lo, hi = v[e] > hi ? v[e] : hi;
        }
        if (lo >= 0 && hi < size) distinct = 0;   /* all in range: skip the walk, which finds the first bad one */
    }
    for (int64_t e = 0; e < distinct && ok; e++) {
        const char *p = base + off * (int64_t)es;
        int64_t v = h->dtype == EM_I32 ? *(const int32_t *)p : *(const int64_t *)p;
        if (v < 0 || v >= size) { ok = false; bad = v; }
        for (int d = h->ndim - 1; d >= 0; d--) {
            off += h->stride[d];
            if (++pos[d] < shape[d]) break;
            off -= pos[d] * h->stride[d];
            pos[d] = 0;
        }
    }
    em_scope_end();
    if (!ok)
        em__misuse(op, "index %" PRId64 " is out of range for dim %d of size %" PRId64 " (input %s, index %s)", bad,
                   dim, size, em__shape_str(t), em__shape_str(index));
    return ok;
}

/* Allocates out (contiguous, shape/dtype/device given), optionally copies
 * `init` into it, fills k->out[0] and dispatches. Returns out, or NULL with
 * nothing left behind (a local scope owns out until it succeeds). */
static em_tensor *dispatch_new(em_kargs *k, int ndim, const int64_t *shape, em_dtype dt, em_device dev,
                               em_tensor *init)
{
    em_tensor *res = NULL;
    em_scope_begin();
    em_tensor *out = em__empty(ndim, shape, dt, dev);
    k->out[0] = out;
    if (out && (!init || em_copy_(out, init)) && em__dispatch(k) == EM_OK) res = em_keep(out);
    em_scope_end();
    return res;
}

/* torch's legacy rule: a 1-d tensor of shape [0] may join a cat of any shape. */
static bool legacy_empty(const em_tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

em_tensor *em_cat(int n, em_tensor *const *ts, int dim)
{
    EM_CHECK(n > 0 && ts, "em_cat", "needs at least one tensor (got %d)", n);
    for (int i = 0; i < n; i++)
        if (!ts[i]) return NULL;
    int ref = 0;
    for (int i = 0; i < n; i++)
        if (!legacy_empty(ts[i])) { ref = i; break; }
    const em_tensor *r = ts[ref];
    EM_CHECK(r->ndim > 0, "em_cat", "cannot concatenate a 0-d tensor (tensor %d is %s)", ref, em__shape_str(r));
    int d = wrap_dim("em_cat", dim, r->ndim, r);
    if (d < 0) return NULL;
    int64_t shape[EM_MAX_DIMS];
    for (int i = 0; i < r->ndim; i++) shape[i] = r->shape[i];
    shape[d] = 0;
    for (int i = 0; i < n; i++) {
        const em_tensor *t = ts[i];
        EM_CHECK(t->dtype == r->dtype, "em_cat", "tensors must share a dtype: tensor %d is %s but tensor %d is %s",
                 ref, em_dtype_name(r->dtype), i, em_dtype_name(t->dtype));
        EM_CHECK(em_device_eq(t->device, r->device), "em_cat", "tensors must share a device (tensor %d differs)", i);
        if (legacy_empty(t) && r->ndim != 1) continue;
        EM_CHECK(t->ndim == r->ndim, "em_cat",
                 "tensors must have the same number of dims: tensor %d is %s but tensor %d is %s", ref,
                 em__shape_str(r), i, em__shape_str(t));
        for (int j = 0; j < r->ndim; j++)
            EM_CHECK(j == d || t->shape[j] == r->shape[j], "em_cat",
                     "sizes must match except in dim %d: tensor %d is %s but tensor %d is %s", d, ref,
                     em__shape_str(r), i, em__shape_str(t));
        shape[d] += t->shape[d];
    }
    em_kargs k = {.op = EM_OP_CAT, .list = ts, .nlist = n, .i = {d}};
    return dispatch_new(&k, r->ndim, shape, r->dtype, r->device, NULL);
}

em_tensor *em_stack(int n, em_tensor *const *ts, int dim)
{
    EM_CHECK(n > 0 && ts, "em_stack", "needs at least one tensor (got %d)", n);
    for (int i = 0; i < n; i++)
        if (!ts[i]) return NULL;
    const em_tensor *r = ts[0];
    for (int i = 1; i < n; i++) {
        bool same = ts[i]->ndim == r->ndim;
        for (int j = 0; same && j < r->ndim; j++) same = ts[i]->shape[j] == r->shape[j];
        EM_CHECK(same, "em_stack", "tensors must have equal shapes: tensor 0 is %s but tensor %d is %s",
                 em__shape_str(r), i, em__shape_str(ts[i]));
    }
    EM_CHECK(r->ndim < EM_MAX_DIMS, "em_stack", "result would have more than %d dims (tensors are %s)", EM_MAX_DIMS,
             em__shape_str(r));
    int d = wrap_dim("em_stack", dim, r->ndim + 1, r);
    if (d < 0) return NULL;
    em_tensor **us = em__malloc(sizeof *us * (size_t)n);
    if (!us) return NULL;
    em_tensor *out = NULL;
    em_scope_begin();
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = (us[i] = em_unsqueeze(ts[i], d)) != NULL;
    if (ok) out = em_cat(n, us, d);
    if (out) em_keep(out);
    em_scope_end();
    em__free(us);
    return out;
}

em_tensor *em_index_select(em_tensor *t, int dim, em_tensor *index)
{
    EM_PROPAGATE_NULL(t, index);
    EM_CHECK(is_index_dtype(index->dtype), "em_index_select", "index must be i64 or i32, got %s %s",
             em_dtype_name(index->dtype), em__shape_str(index));
    EM_CHECK(index->ndim <= 1, "em_index_select", "index must be 1-d, got %s", em__shape_str(index));
    EM_CHECK(em_device_eq(t->device, index->device), "em_index_select", "input and index are on different devices");
    EM_CHECK(t->ndim > 0, "em_index_select", "input must have at least one dim, got %s", em__shape_str(t));
    int d = wrap_dim("em_index_select", dim, t->ndim, t);
    if (d < 0) return NULL;
    if (!check_indices("em_index_select", index, t->shape[d], d, t)) return NULL;
    int64_t shape[EM_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
    shape[d] = em_numel(index);
    /* The kernel takes a 1-d i64 index (ops.h): convert i32, view 0-d as [1]. */
    em_tensor *res = NULL;
    em_scope_begin();
    em_tensor *idx = index->dtype == EM_I64 ? index : em_to_dtype(index, EM_I64);
    if (idx && idx->ndim == 0) idx = em_view(idx, 1, (int64_t[]){1});
    em_kargs k = {.op = EM_OP_INDEX_SELECT, .in = {t, idx}, .i = {d}};
    if (idx) res = em_keep(dispatch_new(&k, t->ndim, shape, t->dtype, t->device, NULL));
    em_scope_end();
    return res;
}

/* Shared checks of gather and scatter_add; returns the wrapped dim or -1. */
static int check_gather_like(const char *op, const em_tensor *t, int dim, const em_tensor *index)
{
    if (!is_index_dtype(index->dtype)) {
        em__misuse(op, "index must be i64 or i32, got %s %s", em_dtype_name(index->dtype), em__shape_str(index));
        return -1;
    }
    if (!em_device_eq(t->device, index->device)) {
        em__misuse(op, "input and index are on different devices");
        return -1;
    }
    if (index->ndim != t->ndim) {
        em__misuse(op, "index must have as many dims as the input: index %s, input %s", em__shape_str(index),
                   em__shape_str(t));
        return -1;
    }
    int d = wrap_dim(op, dim, t->ndim ? t->ndim : 1, t);
    if (d < 0) return -1;
    for (int j = 0; j < t->ndim; j++)
        if (j != d && index->shape[j] > t->shape[j]) {
            em__misuse(op, "index %s is larger than input %s in dim %d", em__shape_str(index), em__shape_str(t), j);
            return -1;
        }
    return d;
}

em_tensor *em_gather(em_tensor *t, int dim, em_tensor *index)
{
    EM_PROPAGATE_NULL(t, index);
    int d = check_gather_like("em_gather", t, dim, index);
    if (d < 0) return NULL;
    if (!check_indices("em_gather", index, t->ndim ? t->shape[d] : 1, d, t)) return NULL;
    em_kargs k = {.op = EM_OP_GATHER, .in = {t, index}, .i = {d}};
    return dispatch_new(&k, index->ndim, index->shape, t->dtype, t->device, NULL);
}

em_tensor *em_scatter_add(em_tensor *t, int dim, em_tensor *index, em_tensor *src)
{
    EM_PROPAGATE_NULL(t, index, src);
    EM_CHECK(t->dtype != EM_BOOL, "em_scatter_add", "cannot add into a bool tensor %s", em__shape_str(t));
    EM_CHECK(src->dtype == t->dtype, "em_scatter_add", "src must have the input's dtype: input %s, src %s",
             em_dtype_name(t->dtype), em_dtype_name(src->dtype));
    EM_CHECK(em_device_eq(t->device, src->device), "em_scatter_add", "input and src are on different devices");
    int d = check_gather_like("em_scatter_add", t, dim, index);
    if (d < 0) return NULL;
    EM_CHECK(src->ndim == t->ndim, "em_scatter_add", "src must have as many dims as the input: src %s, input %s",
             em__shape_str(src), em__shape_str(t));
    for (int j = 0; j < t->ndim; j++)
        EM_CHECK(index->shape[j] <= src->shape[j], "em_scatter_add", "index %s is larger than src %s in dim %d",
                 em__shape_str(index), em__shape_str(src), j);
    if (!check_indices("em_scatter_add", index, t->ndim ? t->shape[d] : 1, d, t)) return NULL;
    /* ops.h: out[0] holds a copy of self when the kernel starts. */
    em_kargs k = {.op = EM_OP_SCATTER_ADD, .in = {t, index, src}, .i = {d}};
    return dispatch_new(&k, t->ndim, t->shape, t->dtype, t->device, t);
}
