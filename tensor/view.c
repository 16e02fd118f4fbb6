/* ember — views: new geometry over the same storage, never a copy.
 * Each view is recorded as one of the view ops (VIEW, PERMUTE, NARROW, SELECT,
 * EXPAND) so that autograd can route gradients back through it. */
#include "tensor/tensor_internal.h"

#include <string.h>

static em_tensor *recorded(em_op op, em_tensor *in, em_tensor *out, int64_t i0, int64_t i1, int64_t i2)
{
    if (out && em__record_hook) {
        em_kargs k = {.op = op, .in = {in}, .out = {out}, .i = {i0, i1, i2}};
        if (em__record_hook(&k) != EM_OK) return NULL;   /* out stays in the scope, which frees it */
    }
    return out;
}

/* Strides for viewing t as `shape` without copying, or false. Walks the old
 * dims from the innermost, splitting them into chunks that are contiguous in
 * themselves; each chunk must map onto a run of new dims of the same size. */
static bool view_strides(const em_tensor *t, int ndim, const int64_t *shape, int64_t *stride)
{
    if (em_numel(t) == 0 || t->ndim == 0) {
        em__contiguous_strides(ndim, shape, stride);
        return true;
    }
    int vd = ndim - 1;
    int64_t base = t->stride[t->ndim - 1], tnumel = 1, vnumel = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tnumel *= t->shape[td];
        bool chunk_ends = td == 0 || (t->shape[td - 1] != 1 && t->stride[td - 1] != tnumel * base);
        if (!chunk_ends) continue;
        while (vd >= 0 && (vnumel < tnumel || shape[vd] == 1)) {
            stride[vd] = vnumel * base;
            vnumel *= shape[vd];
            vd--;
        }
        if (vnumel != tnumel) return false;
        if (td > 0) {
            base = t->stride[td - 1];
            tnumel = vnumel = 1;
        }
    }
    return vd == -1;
}

static bool infer_shape(const em_tensor *t, int ndim, const int64_t *in, int64_t *out, const char *op)
{
    int neg = -1;
    int64_t known = 1, n = em_numel(t);
    if (ndim < 0 || ndim > EM_MAX_DIMS) {
        em__misuse(op, "%d dims requested; at most %d are supported", ndim, EM_MAX_DIMS);
        return false;
    }
    for (int d = 0; d < ndim; d++) {
        out[d] = in[d];
        if (in[d] == -1) {
            if (neg >= 0) { em__misuse(op, "only one dimension can be -1 in %s", em__dims_str(ndim, in)); return false; }
            neg = d;
        } else if (in[d] < 0) {
            em__misuse(op, "invalid size %lld in %s", (long long)in[d], em__dims_str(ndim, in));
            return false;
        } else {
            known *= in[d];
        }
    }
    if (neg >= 0) {
        if (known == 0 || n % known) {
            em__misuse(op, "shape %s is invalid for input of shape %s", em__dims_str(ndim, in), em__shape_str(t));
            return false;
        }
        out[neg] = n / known;
        known *= out[neg];
    }
    if (known != n) {
        em__misuse(op, "shape %s is invalid for input of shape %s (%lld elements)", em__dims_str(ndim, in),
                   em__shape_str(t), (long long)n);
        return false;
    }
    return true;
}

em_tensor *em_view(em_tensor *t, int ndim, const int64_t *shape)
{
    EM_PROPAGATE_NULL(t);
    int64_t sh[EM_MAX_DIMS], st[EM_MAX_DIMS];
    if (!infer_shape(t, ndim, shape, sh, "em_view")) return NULL;
    EM_CHECK(view_strides(t, ndim, sh, st), "em_view",
             "cannot view %s as %s without a copy: the tensor is not contiguous there; use em_reshape",
             em__shape_str(t), em__dims_str(ndim, sh));
    return recorded(EM_OP_VIEW, t, em__view_of(t, ndim, sh, st, t->offset), 0, 0, 0);
}

em_tensor *em_reshape(em_tensor *t, int ndim, const int64_t *shape)
{
    EM_PROPAGATE_NULL(t);
    int64_t sh[EM_MAX_DIMS], st[EM_MAX_DIMS];
    if (!infer_shape(t, ndim, shape, sh, "em_reshape")) return NULL;
    if (view_strides(t, ndim, sh, st)) return recorded(EM_OP_VIEW, t, em__view_of(t, ndim, sh, st, t->offset), 0, 0, 0);
    em_tensor *c = em_clone(t);
    if (!c) return NULL;
    em__contiguous_strides(ndim, sh, st);
    return recorded(EM_OP_VIEW, c, em__view_of(c, ndim, sh, st, c->offset), 0, 0, 0);
}

em_tensor *em_permute(em_tensor *t, const int *dims)
{
    EM_PROPAGATE_NULL(t);
    int64_t sh[EM_MAX_DIMS], st[EM_MAX_DIMS];
    bool seen[EM_MAX_DIMS] = {0};
    int64_t packed = 0;
    for (int i = 0; i < t->ndim; i++) {
        int d = em__wrap_dim(dims[i], t->ndim, "em_permute");
        if (d < 0) return NULL;
        EM_CHECK(!seen[d], "em_permute", "dimension %d repeats in the permutation of %s", d, em__shape_str(t));
        seen[d] = true;
        sh[i] = t->shape[d];
        st[i] = t->stride[d];
        packed |= (int64_t)d << (4 * i);
    }
    return recorded(EM_OP_PERMUTE, t, em__view_of(t, t->ndim, sh, st, t->offset), packed, 0, 0);
}

em_tensor *em_transpose(em_tensor *t, int d0, int d1)
{
    EM_PROPAGATE_NULL(t);
    int a = em__wrap_dim(d0, t->ndim, "em_transpose"), b = em__wrap_dim(d1, t->ndim, "em_transpose");
    if (a < 0 || b < 0) return NULL;
    int dims[EM_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) dims[i] = i;
    if (t->ndim) { dims[a] = b; dims[b] = a; }
    return em_permute(t, dims);
}

em_tensor *em_narrow(em_tensor *t, int dim, int64_t start, int64_t length)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK(t->ndim > 0, "em_narrow", "cannot narrow a 0-d tensor");
    int d = em__wrap_dim(dim, t->ndim, "em_narrow");
    if (d < 0) return NULL;
    if (start < 0) start += t->shape[d];
    EM_CHECK(start >= 0 && length >= 0 && start + length <= t->shape[d], "em_narrow",
             "range [%lld, %lld) is out of bounds for dim %d of %s", (long long)start,
             (long long)(start + length), d, em__shape_str(t));
    int64_t sh[EM_MAX_DIMS];
    memcpy(sh, t->shape, sizeof sh);
    sh[d] = length;
    return recorded(EM_OP_NARROW, t, em__view_of(t, t->ndim, sh, t->stride, t->offset + start * t->stride[d]), d, start, length);
}

em_tensor *em_select(em_tensor *t, int dim, int64_t index)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK(t->ndim > 0, "em_select", "cannot select from a 0-d tensor");
    int d = em__wrap_dim(dim, t->ndim, "em_select");
    if (d < 0) return NULL;
    if (index < 0) index += t->shape[d];
    EM_CHECK(index >= 0 && index < t->shape[d], "em_select", "index %lld out of range for dim %d of %s",
             (long long)index, d, em__shape_str(t));
    int64_t sh[EM_MAX_DIMS], st[EM_MAX_DIMS];
    for (int i = 0, j = 0; i < t->ndim; i++) {
        if (i == d) continue;
        sh[j] = t->shape[i];
        st[j++] = t->stride[i];
    }
    return recorded(EM_OP_SELECT, t, em__view_of(t, t->ndim - 1, sh, st, t->offset + index * t->stride[d]), d, index, 0);
}

em_tensor *em_expand(em_tensor *t, int ndim, const int64_t *shape)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK(ndim >= t->ndim && ndim <= EM_MAX_DIMS, "em_expand", "cannot expand %s to %s: fewer dims than the tensor",
             em__shape_str(t), em__dims_str(ndim, shape));
    int64_t sh[EM_MAX_DIMS], st[EM_MAX_DIMS];
    int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        int64_t have = i < lead ? 1 : t->shape[i - lead];
        int64_t want = shape[i] == -1 ? have : shape[i];
        EM_CHECK(shape[i] != -1 || i >= lead, "em_expand", "-1 is not allowed for the new leading dim %d", i);
        EM_CHECK(have == want || have == 1, "em_expand", "cannot expand %s to %s: dim %d has size %lld, not 1",
                 em__shape_str(t), em__dims_str(ndim, shape), i, (long long)have);
        sh[i] = want;
        st[i] = i < lead || (have == 1 && want != 1) ? 0 : t->stride[i - lead];
    }
    return recorded(EM_OP_EXPAND, t, em__view_of(t, ndim, sh, st, t->offset), 0, 0, 0);
}

em_tensor *em_broadcast_to(em_tensor *t, int ndim, const int64_t *shape) { return em_expand(t, ndim, shape); }

em_tensor *em_squeeze(em_tensor *t, int dim)
{
    EM_PROPAGATE_NULL(t);
    if (t->ndim == 0) return recorded(EM_OP_VIEW, t, em__view_of(t, 0, t->shape, t->stride, t->offset), 0, 0, 0);
    int d = em__wrap_dim(dim, t->ndim, "em_squeeze");
    if (d < 0) return NULL;
    EM_CHECK(t->shape[d] == 1, "em_squeeze", "dim %d of %s has size %lld, not 1", d, em__shape_str(t), (long long)t->shape[d]);
    int64_t sh[EM_MAX_DIMS], st[EM_MAX_DIMS];
    for (int i = 0, j = 0; i < t->ndim; i++) {
        if (i == d) continue;
        sh[j] = t->shape[i];
        st[j++] = t->stride[i];
    }
    return recorded(EM_OP_VIEW, t, em__view_of(t, t->ndim - 1, sh, st, t->offset), 0, 0, 0);
}

em_tensor *em_unsqueeze(em_tensor *t, int dim)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK(t->ndim < EM_MAX_DIMS, "em_unsqueeze", "%s already has the maximum of %d dims", em__shape_str(t), EM_MAX_DIMS);
    int d = em__wrap_dim(dim, t->ndim + 1, "em_unsqueeze");
    if (d < 0) return NULL;
    int64_t sh[EM_MAX_DIMS], st[EM_MAX_DIMS];
    for (int i = 0, j = 0; i <= t->ndim; i++) {
        if (i == d) {
            sh[i] = 1;
            st[i] = d < t->ndim ? t->stride[d] * t->shape[d] : 1;
            continue;
        }
        sh[i] = t->shape[j];
        st[i] = t->stride[j++];
    }
    return recorded(EM_OP_VIEW, t, em__view_of(t, t->ndim + 1, sh, st, t->offset), 0, 0, 0);
}

em_tensor *em_flatten(em_tensor *t, int start_dim, int end_dim)
{
    EM_PROPAGATE_NULL(t);
    if (t->ndim == 0) return em_reshape(t, 1, (int64_t[]){1});
    int a = em__wrap_dim(start_dim, t->ndim, "em_flatten"), b = em__wrap_dim(end_dim, t->ndim, "em_flatten");
    if (a < 0 || b < 0) return NULL;
    EM_CHECK(a <= b, "em_flatten", "start_dim %d comes after end_dim %d", a, b);
    int64_t sh[EM_MAX_DIMS];
    int n = 0;
    for (int i = 0; i < a; i++) sh[n++] = t->shape[i];
    int64_t m = 1;
    for (int i = a; i <= b; i++) m *= t->shape[i];
    sh[n++] = m;
    for (int i = b + 1; i < t->ndim; i++) sh[n++] = t->shape[i];
    return em_reshape(t, n, sh);
}

em_tensor *em_contiguous(em_tensor *t)
{
    EM_PROPAGATE_NULL(t);
    if (em_is_contiguous(t)) return em__scope_adopt(em_retain(t));
    return em_clone(t);
}

int em_split(em_tensor *t, int64_t size, int dim, em_tensor **out, int max_out)
{
    if (!t) return 0;
    int d = em__wrap_dim(dim, t->ndim, "em_split");
    if (d < 0) return 0;
    if (size <= 0) {
        em__misuse("em_split", "split size must be positive, got %lld", (long long)size);
        return 0;
    }
    int64_t len = t->shape[d];
    int n = (int)((len + size - 1) / size);
    if (len == 0) n = 1;
    for (int i = 0; i < n && i < max_out; i++) {
        int64_t start = (int64_t)i * size;
        out[i] = em_narrow(t, d, start, len - start < size ? len - start : size);
    }
    return n;
}
