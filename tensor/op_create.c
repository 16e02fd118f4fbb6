/* ember — creation and copying: zeros/ones/full/scalar/arange/eye, the *_like
 * forms, fill_, copy_, clone, and dtype/device conversion.
 * (em_empty and em_from_data live in tensor.c, em_contiguous in view.c.)
 *
 * Values given as double are converted to the tensor's dtype by the rules of
 * convert.c: floats round to nearest even, integers truncate toward zero,
 * bool is v != 0.
 */
#include "tensor/tensor_internal.h"

#include <math.h>

/* An output that will not be returned: the scope frees it, or we do at top level. */
static em_tensor *discard(em_tensor *t)
{
    if (t && em_scope_depth() == 0) em_release(t);
    return NULL;
}

static em_status dispatch1(em_op op, em_tensor *out, em_tensor *in, double f0, double f1)
{
    em_kargs k = {.op = op, .in = {in}, .out = {out}, .f = {f0, f1}};
    return em__dispatch(&k);
}

/* out is an existing tensor the caller sees change (em_fill_, em_copy_). */
static em_status dispatch_inplace(em_op op, em_tensor *out, em_tensor *in, double f0)
{
    em_kargs k = {.op = op, .in = {in}, .out = {out}, .f = {f0}, .inplace = true};
    return em__dispatch(&k);
}

/* A new tensor of the given geometry filled with v. */
static em_tensor *filled(int ndim, const int64_t *shape, double v, em_dtype dt, em_device dev)
{
    em_tensor *t = em__empty(ndim, shape, dt, dev);
    if (!t) return NULL;
    return dispatch1(EM_OP_FILL, t, NULL, v, 0) == EM_OK ? t : discard(t);
}

em_tensor *em_zeros(int ndim, const int64_t *shape, em_dtype dt, em_device dev)
{
    return filled(ndim, shape, 0.0, dt, dev);
}

em_tensor *em_ones(int ndim, const int64_t *shape, em_dtype dt, em_device dev)
{
    return filled(ndim, shape, 1.0, dt, dev);
}

em_tensor *em_full(int ndim, const int64_t *shape, double value, em_dtype dt, em_device dev)
{
    return filled(ndim, shape, value, dt, dev);
}

em_tensor *em_scalar(double value, em_dtype dt, em_device dev)
{
    int64_t none[1] = {0};
    return filled(0, none, value, dt, dev);
}

/* Like torch.arange: ceil((end - start) / step) values start + i*step. */
em_tensor *em_arange(double start, double end, double step, em_dtype dt, em_device dev)
{
    EM_CHECK(isfinite(start) && isfinite(end) && isfinite(step), "em_arange",
             "start %g, end %g and step %g must be finite", start, end, step);
    EM_CHECK(step != 0, "em_arange", "step must be nonzero");
    EM_CHECK(end == start || (end > start) == (step > 0), "em_arange",
             "step %g moves away from end: start %g, end %g", step, start, end);
    double len = ceil((end - start) / step);
    EM_CHECK(len < 9.0e15, "em_arange", "%g elements are too many", len);
    int64_t n = (int64_t)len;
    em_tensor *t = em__empty(1, &n, dt, dev);
    if (!t) return NULL;
    return dispatch1(EM_OP_ARANGE, t, NULL, start, step) == EM_OK ? t : discard(t);
}

em_tensor *em_eye(int64_t n, int64_t m, em_dtype dt, em_device dev)
{
    EM_CHECK(n >= 0 && m >= 0, "em_eye", "sizes must be non-negative, got %lld x %lld", (long long)n, (long long)m);
    int64_t shape[2] = {n, m};
    em_tensor *t = em__empty(2, shape, dt, dev);
    if (!t) return NULL;
    return dispatch1(EM_OP_EYE, t, NULL, 0, 0) == EM_OK ? t : discard(t);
}

em_tensor *em_empty_like(em_tensor *t)
{
    EM_PROPAGATE_NULL(t);
    return em__empty(t->ndim, t->shape, t->dtype, t->device);
}

em_tensor *em_zeros_like(em_tensor *t)
{
    EM_PROPAGATE_NULL(t);
    return filled(t->ndim, t->shape, 0.0, t->dtype, t->device);
}

/* In-place writes must not reach one element through two indices: a dim of
 * stride 0 (an expanded view) would make the result depend on the order. */
static bool writable(const em_tensor *t, int *dim)
{
    for (int d = 0; d < t->ndim; d++)
        if (t->stride[d] == 0 && t->shape[d] > 1) {
            *dim = d;
            return false;
        }
    return true;
}

/* Any layout (em__dispatch bumps the storage version). */
em_tensor *em_fill_(em_tensor *t, double value)
{
    EM_PROPAGATE_NULL(t);
    int d = 0;
    EM_CHECK(writable(t, &d), "em_fill_", "cannot write in place to %s: dim %d is expanded (stride 0)",
             em__shape_str(t), d);
    return dispatch_inplace(EM_OP_FILL, t, NULL, value) == EM_OK ? t : NULL;
}

/* Bytes of a contiguous src to a contiguous dst of the same dtype on another
 * device, through the non-CPU side's backend. */
static em_status copy_bytes(em_tensor *dst, em_tensor *src)
{
    em_device_type bt = dst->device.type != EM_DEVICE_CPU ? (em_device_type)dst->device.type
                                                          : (em_device_type)src->device.type;
    const em_backend *be = em__backend(bt);
    if (!be) return em__fail(EM_ERR_UNSUPPORTED, "no backend for device type %d", (int)bt);
    size_t n = (size_t)em_numel(src) * em_dtype_size(src->dtype);
    if (n == 0) return EM_OK;
    return be->memcpy(em_data_ptr(dst), dst->device, em_data_ptr(src), src->device, n);
}

/* src on another device: move it to dst's device as a contiguous tensor of
 * its own dtype (em_to), then convert/scatter there with that device's COPY. */
static em_status copy_across(em_tensor *dst, em_tensor *src)
{
    if (src->dtype == dst->dtype && em_is_contiguous(src) && em_is_contiguous(dst)) {
        em_status st = copy_bytes(dst, src);
        if (st == EM_OK) dst->storage->version++;
        return st;
    }
    em_status st = EM_ERR_OOM;
    em_scope_begin();
    em_tensor *moved = em_to(src, dst->device);
    if (moved) st = dispatch_inplace(EM_OP_COPY, dst, moved, 0);
    em_scope_end();
    return st;
}

em_tensor *em_copy_(em_tensor *dst, em_tensor *src)
{
    EM_PROPAGATE_NULL(dst, src);
    bool same = dst->ndim == src->ndim;
    for (int d = 0; same && d < dst->ndim; d++) same = dst->shape[d] == src->shape[d];
    EM_CHECK(same, "em_copy_", "shape mismatch: dst %s, src %s", em__shape_str(dst), em__shape_str(src));
    int d = 0;
    EM_CHECK(writable(dst, &d), "em_copy_", "cannot write in place to %s: dim %d is expanded (stride 0)",
             em__shape_str(dst), d);
    em_status st = em_device_eq(dst->device, src->device) ? dispatch_inplace(EM_OP_COPY, dst, src, 0)
                                                          : copy_across(dst, src);
    return st == EM_OK ? dst : NULL;
}

em_tensor *em_clone(em_tensor *t)
{
    EM_PROPAGATE_NULL(t);
    em_tensor *c = em__empty(t->ndim, t->shape, t->dtype, t->device);
    if (!c) return NULL;
    return dispatch1(EM_OP_COPY, c, t, 0, 0) == EM_OK ? c : discard(c);
}

em_tensor *em_to_dtype(em_tensor *t, em_dtype dt)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK((unsigned)dt < EM_NUM_DTYPES, "em_to_dtype", "unknown dtype %d", (int)dt);
    if (t->dtype == dt) return em__scope_adopt(em_retain(t));
    em_tensor *c = em__empty(t->ndim, t->shape, dt, t->device);
    if (!c) return NULL;
    return dispatch1(EM_OP_COPY, c, t, 0, 0) == EM_OK ? c : discard(c);
}

/* A contiguous copy on dev, of t's dtype. The transfer is a byte copy through
 * the backend; a strided t is first made contiguous on its own device. */
em_tensor *em_to(em_tensor *t, em_device dev)
{
    EM_PROPAGATE_NULL(t);
    if (em_device_eq(t->device, dev)) return em__scope_adopt(em_retain(t));
    char why[160];
    EM_CHECK(em__backend((em_device_type)dev.type), "em_to", "%s", em__backend_absent(dev, why));
    em_tensor *out = NULL;
    em_scope_begin();
    em_tensor *c = em_contiguous(t);
    em_tensor *o = c ? em__empty(t->ndim, t->shape, t->dtype, dev) : NULL;
    if (o && copy_bytes(o, c) == EM_OK) out = em_keep(o);
    em_scope_end();
    return out;
}
