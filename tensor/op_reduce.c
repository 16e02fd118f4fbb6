/* ember — reduction ops (tensor.h "reductions").
 *
 * Each op resolves its dims into a bitmask, checks dtypes, allocates the
 * keepdim-shaped output (the kernel contract in ops.h), dispatches, and for
 * keepdim=false returns a view with the reduced dims squeezed out.
 * Dtypes: sum takes every dtype (i64/i32/bool sum into i64, as torch);
 * mean/var/logsumexp/norm need a float dtype; max/min keep the input dtype;
 * argmax and the max/min indices are i64.
 * Empty reductions follow torch: sum 0, mean/var NaN, logsumexp -inf, norm 0;
 * max/min/argmax over a zero-size dim is misuse.
 */
#include "tensor/tensor_internal.h"

#include <math.h>

/* dims -> bitmask over t's dims; -1 after a misuse report. A 0-d tensor
 * accepts dim 0 and -1 (as torch), which reduce nothing. */
static int64_t dims_mask(const char *op, const em_tensor *t, int ndims, const int *dims)
{
    if (ndims < 0 || ndims > EM_MAX_DIMS || (ndims > 0 && !dims)) {
        em__misuse(op, "bad dims list (ndims %d) for input %s", ndims, em__shape_str(t));
        return -1;
    }
    if (ndims == 0) return ((int64_t)1 << t->ndim) - 1;
    int64_t mask = 0;
    for (int i = 0; i < ndims; i++) {
        int n = t->ndim ? t->ndim : 1;
        int d = dims[i];
        if (d < -n || d >= n) {
            em__misuse(op, "dim %d is out of range for input %s (expected %d to %d)", dims[i],
                       em__shape_str(t), -n, n - 1);
            return -1;
        }
        if (t->ndim == 0) continue;
        if (d < 0) d += n;
        if (mask >> d & 1) {
            em__misuse(op, "dim %d appears more than once in the dims list (input %s)", d, em__shape_str(t));
            return -1;
        }
        mask |= (int64_t)1 << d;
    }
    return mask;
}

static void keep_shape(const em_tensor *t, int64_t mask, int64_t *shape)
{
    for (int d = 0; d < t->ndim; d++) shape[d] = (mask >> d & 1) ? 1 : t->shape[d];
}

/* Runs op into a keepdim-shaped output; keepdim=false returns a view without
 * the reduced dims. Intermediates live in a local scope: em_release on a
 * scope-owned tensor would free it under the scope. */
static em_tensor *squeezed(em_tensor *r, int64_t mask, bool keepdim)
{
    if (!r || keepdim || mask == 0) return r;
    int64_t shape[EM_MAX_DIMS];
    int nd = 0;
    for (int d = 0; d < r->ndim; d++)
        if (!(mask >> d & 1)) shape[nd++] = r->shape[d];
    return em_view(r, nd, shape);
}

static em_tensor *run_reduce(em_op op, em_tensor *t, int64_t mask, em_dtype out_dt, double f0, bool keepdim)
{
    int64_t shape[EM_MAX_DIMS];
    keep_shape(t, mask, shape);
    em_tensor *res = NULL;
    em_scope_begin();
    em_tensor *out = em__empty(t->ndim, shape, out_dt, t->device);
    em_kargs k = {.op = op, .in = {t}, .out = {out}, .i = {mask}, .f = {f0}};
    if (out && em__dispatch(&k) == EM_OK) res = em_keep(squeezed(out, mask, keepdim));
    em_scope_end();
    return res;
}

static bool need_float(const char *op, const em_tensor *t)
{
    if (em_dtype_is_float(t->dtype)) return true;
    em__misuse(op, "needs a floating-point tensor, got %s %s", em_dtype_name(t->dtype), em__shape_str(t));
    return false;
}

em_tensor *em_sum(em_tensor *t, int ndims, const int *dims, bool keepdim)
{
    t = em__autocast(EM_OP_SUM, 0, t);   /* in an autocast region: f32 */
    EM_PROPAGATE_NULL(t);
    int64_t mask = dims_mask("em_sum", t, ndims, dims);
    if (mask < 0) return NULL;
    em_dtype out_dt = em_dtype_is_float(t->dtype) ? t->dtype : EM_I64;
    return run_reduce(EM_OP_SUM, t, mask, out_dt, 0, keepdim);
}

/* The front-end of a floating reduction (mean, var, logsumexp, norm): autocast
 * (f32 in a region), NULL in NULL out, dims and a float dtype checked, then the
 * parameter (param_ok, else misuse with param_msg, a format of param and the
 * input's shape), each misuse naming name. */
static em_tensor *float_reduce(em_op opc, const char *name, em_tensor *t, int ndims, const int *dims, double param,
                               bool param_ok, const char *param_msg, bool keepdim)
{
    t = em__autocast(opc, 0, t);   /* in an autocast region: f32 */
    EM_PROPAGATE_NULL_IN(name, t);
    int64_t mask = dims_mask(name, t, ndims, dims);
    if (mask < 0 || !need_float(name, t)) return NULL;
    EM_CHECK(param_ok, name, param_msg, param, em__shape_str(t));
    return run_reduce(opc, t, mask, t->dtype, param, keepdim);
}

em_tensor *em_mean(em_tensor *t, int ndims, const int *dims, bool keepdim)
{
    return float_reduce(EM_OP_MEAN, "em_mean", t, ndims, dims, 0, true, NULL, keepdim);
}

em_tensor *em_var(em_tensor *t, int ndims, const int *dims, double correction, bool keepdim)
{
    return float_reduce(EM_OP_VAR, "em_var", t, ndims, dims, correction, correction >= 0 && isfinite(correction),
                        "correction must be >= 0, got %g (input %s)", keepdim);
}

em_tensor *em_logsumexp(em_tensor *t, int ndims, const int *dims, bool keepdim)
{
    return float_reduce(EM_OP_LOGSUMEXP, "em_logsumexp", t, ndims, dims, 0, true, NULL, keepdim);
}

em_tensor *em_norm(em_tensor *t, double p, int ndims, const int *dims, bool keepdim)
{
    return float_reduce(EM_OP_NORM, "em_norm", t, ndims, dims, p, p > 0 && !isnan(p) && !(isinf(p) && p < 0),
                        "p must be > 0 or INFINITY, got %g (input %s)", keepdim);
}

/* max/min/argmax along one dim. */
static em_tensor *extreme(const char *name, em_op op, em_tensor *t, int dim, bool keepdim, em_tensor **indices)
{
    EM_PROPAGATE_NULL_IN(name, t);
    int64_t mask = dims_mask(name, t, 1, &dim);
    if (mask < 0) return NULL;
    int d = t->ndim ? (dim < 0 ? dim + t->ndim : dim) : 0;
    EM_CHECK(t->ndim == 0 || t->shape[d] > 0, name, "cannot reduce over a zero-size dimension (dim %d of %s)", d,
             em__shape_str(t));
    int64_t shape[EM_MAX_DIMS];
    keep_shape(t, mask, shape);
    em_tensor *res = NULL, *ires = NULL;
    em_scope_begin();
    em_tensor *out = em__empty(t->ndim, shape, op == EM_OP_ARGMAX ? EM_I64 : t->dtype, t->device);
    em_tensor *idx = indices && out ? em__empty(t->ndim, shape, EM_I64, t->device) : NULL;
    em_kargs k = {.op = op, .in = {t}, .out = {out, idx}, .i = {mask}};
    if (out && (idx || !indices) && em__dispatch(&k) == EM_OK) {
        res = squeezed(out, mask, keepdim);
        ires = indices ? squeezed(idx, mask, keepdim) : NULL;
        if (!res || (indices && !ires)) res = ires = NULL;
        res = em_keep(res);
        ires = em_keep(ires);
    }
    em_scope_end();
    if (indices) *indices = ires;
    return res;
}

em_tensor *em_max(em_tensor *t, int dim, bool keepdim, em_tensor **indices)
{
    return extreme("em_max", EM_OP_MAX, t, dim, keepdim, indices);
}

em_tensor *em_min(em_tensor *t, int dim, bool keepdim, em_tensor **indices)
{
    return extreme("em_min", EM_OP_MIN, t, dim, keepdim, indices);
}

em_tensor *em_argmax(em_tensor *t, int dim, bool keepdim)
{
    return extreme("em_argmax", EM_OP_ARGMAX, t, dim, keepdim, NULL);
}

static em_tensor *extreme_all(const char *name, em_op op, em_tensor *t)
{
    EM_PROPAGATE_NULL_IN(name, t);
    EM_CHECK(em_numel(t) > 0, name, "cannot reduce over a zero-size dimension (input %s has no elements)",
             em__shape_str(t));
    int64_t mask = ((int64_t)1 << t->ndim) - 1;
    return run_reduce(op, t, mask, t->dtype, 0, false);
}

em_tensor *em_max_all(em_tensor *t) { return extreme_all("em_max_all", EM_OP_MAX, t); }
em_tensor *em_min_all(em_tensor *t) { return extreme_all("em_min_all", EM_OP_MIN, t); }
