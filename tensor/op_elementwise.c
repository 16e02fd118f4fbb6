/* ember — elementwise ops: binary arithmetic and comparisons with NumPy
 * broadcasting, scalar forms, unary math, where and masked_fill.
 *
 * Each op validates once (dtypes, devices, shapes), allocates the output in
 * the current scope and dispatches one kernel (contracts in ops.h). Operands
 * share one dtype, with one promotion, torch's: a binary op given two
 * different dtypes among f32, f16 and bf16 casts both to f32 first (recorded
 * casts, so gradients flow back in each input's dtype); any other mismatch
 * is misuse. Comparisons return EM_BOOL. In an autocast region (amp/), exp,
 * log, rsqrt and pow compute in f32.
 */
#include "tensor/tensor_internal.h"

#include <math.h>
#include <string.h>

/* Whether kernels get inputs expanded to the output's shape (aliases with
 * stride 0 on broadcast dims, released right after dispatch) or the caller's
 * own tensors, broadcastable to the output. Autograd's record hook needs the
 * caller's tensors (their grad metadata and shapes, to sum gradients back to
 * them), so this is false; the CPU kernels broadcast themselves (iter.h). */
static const bool expand_inputs = false;

/* The input header a kernel gets for t broadcast to (nd, shape): t itself
 * (+1 ref) when its shape already is that, else an alias with stride 0 on the
 * broadcast dims. The caller releases it. NULL on OOM. */
static em_tensor *expanded(em_tensor *t, int nd, const int64_t *shape)
{
    if (!expand_inputs || (t->ndim == nd && memcmp(t->shape, shape, sizeof(int64_t) * (size_t)nd) == 0))
        return em_retain(t);
    em_tensor *a = em__alias(t);
    if (!a) return NULL;
    int lead = nd - t->ndim;
    for (int d = 0; d < nd; d++) {
        int td = d - lead;
        a->shape[d] = shape[d];
        a->stride[d] = td >= 0 && t->shape[td] == shape[d] ? t->stride[td] : 0;
    }
    a->ndim = nd;
    return a;
}

/* An output that will not be returned: the scope frees it, or we do at top level. */
static em_tensor *discard(em_tensor *out)
{
    if (out && em_scope_depth() == 0) em_release(out);
    return NULL;
}

/* Allocates out (nd, shape, odt) on in[0]'s device, runs op on the expanded
 * inputs, and returns out (NULL on failure). */
static em_tensor *launch(em_op op, int nin, em_tensor *const *in, int nd, const int64_t *shape, em_dtype odt,
                         double f0)
{
    em_tensor *out = em__empty(nd, shape, odt, in[0]->device);
    if (!out) return NULL;
    em_kargs k = {.op = op, .out = {out}, .f = {f0}};
    bool ok = true;
    for (int i = 0; i < nin; i++) ok &= (k.in[i] = expanded(in[i], nd, shape)) != NULL;
    em_status st = ok ? em__dispatch(&k) : EM_ERR_OOM;
    for (int i = 0; i < nin; i++) em_release(k.in[i]);
    return st == EM_OK ? out : discard(out);
}

static const char *dev_name(em_device d)
{
    static _Thread_local char buf[4][16];   /* a ring: up to 4 names in one message */
    static _Thread_local unsigned next;
    return em_device_str(d, buf[next++ % 4]);
}

/* ---- binary and comparison ops ------------------------------------------------------- */

typedef enum { ANY, NUMERIC, FLOATING } dtype_rule;

static bool accepts(dtype_rule r, em_dtype dt)
{
    return r == ANY || (r == NUMERIC ? dt != EM_BOOL : em_dtype_is_float(dt));
}

static const char *rule_text(dtype_rule r)
{
    return r == FLOATING ? "a floating dtype (float32, float64, float16, bfloat16)" : "a numeric dtype (not bool)";
}

static bool is_16_or_32(em_dtype dt) { return dt == EM_F32 || dt == EM_F16 || dt == EM_BF16; }
static bool is_half(em_dtype dt) { return dt == EM_F16 || dt == EM_BF16; }

static em_tensor *binary(em_op op, const char *name, dtype_rule rule, em_tensor *a, em_tensor *b)
{
    a = em__autocast(op, 0, a);
    b = em__autocast(op, 1, b);
    EM_PROPAGATE_NULL_IN(name, a, b);
    EM_CHECK(em_device_eq(a->device, b->device), name, "device mismatch %s vs %s", dev_name(a->device),
             dev_name(b->device));
    if ((op == EM_OP_ADD || op == EM_OP_SUB) && a->device.type == EM_DEVICE_CPU &&
        ((a->dtype == EM_F32 && is_half(b->dtype)) || (is_half(a->dtype) && b->dtype == EM_F32))) {
        /* f32 with f16/bf16 on the CPU: no cast, the kernel widens the half
         * operand in chunks (the same f32 sum; the residual stream's adds under
         * autocast). The rule converts that operand's gradient back. */
        int nd;
        int64_t shape[EM_MAX_DIMS];
        EM_CHECK(em__broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape), name,
                 "cannot broadcast %s with %s", em__shape_str(a), em__shape_str(b));
        em_tensor *in[2] = {a, b};
        return launch(op, 2, in, nd, shape, EM_F32, 0);
    }
    if (a->dtype != b->dtype && is_16_or_32(a->dtype) && is_16_or_32(b->dtype)) {
        /* f32 with f16/bf16, or f16 with bf16: both in f32 */
        em_scope_begin();
        em_tensor *r = binary(op, name, rule, em_to_dtype(a, EM_F32), em_to_dtype(b, EM_F32));
        if (r) em_keep(r);
        em_scope_end();
        return r;
    }
    EM_CHECK(a->dtype == b->dtype, name, "dtype mismatch %s vs %s", em_dtype_name(a->dtype), em_dtype_name(b->dtype));
    EM_CHECK(accepts(rule, a->dtype), name, "needs %s, got %s", rule_text(rule), em_dtype_name(a->dtype));
    int nd;
    int64_t shape[EM_MAX_DIMS];
    EM_CHECK(em__broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, &nd, shape), name,
             "cannot broadcast %s with %s", em__shape_str(a), em__shape_str(b));
    bool cmp = em_op_table[op].cls == EM_CLASS_COMPARE;
    em_tensor *in[2] = {a, b};
    return launch(op, 2, in, nd, shape, cmp ? EM_BOOL : a->dtype, 0);
}

em_tensor *em_add(em_tensor *a, em_tensor *b) { return binary(EM_OP_ADD, "em_add", NUMERIC, a, b); }
em_tensor *em_sub(em_tensor *a, em_tensor *b) { return binary(EM_OP_SUB, "em_sub", NUMERIC, a, b); }
em_tensor *em_mul(em_tensor *a, em_tensor *b) { return binary(EM_OP_MUL, "em_mul", NUMERIC, a, b); }
/* True division, as torch's `/`: floating dtypes only (convert integers first). */
em_tensor *em_div(em_tensor *a, em_tensor *b) { return binary(EM_OP_DIV, "em_div", FLOATING, a, b); }
em_tensor *em_pow(em_tensor *a, em_tensor *b) { return binary(EM_OP_POW, "em_pow", NUMERIC, a, b); }
em_tensor *em_maximum(em_tensor *a, em_tensor *b) { return binary(EM_OP_MAXIMUM, "em_maximum", NUMERIC, a, b); }
em_tensor *em_minimum(em_tensor *a, em_tensor *b) { return binary(EM_OP_MINIMUM, "em_minimum", NUMERIC, a, b); }
em_tensor *em_eq(em_tensor *a, em_tensor *b) { return binary(EM_OP_EQ, "em_eq", ANY, a, b); }
em_tensor *em_ne(em_tensor *a, em_tensor *b) { return binary(EM_OP_NE, "em_ne", ANY, a, b); }
em_tensor *em_lt(em_tensor *a, em_tensor *b) { return binary(EM_OP_LT, "em_lt", ANY, a, b); }
em_tensor *em_le(em_tensor *a, em_tensor *b) { return binary(EM_OP_LE, "em_le", ANY, a, b); }
em_tensor *em_gt(em_tensor *a, em_tensor *b) { return binary(EM_OP_GT, "em_gt", ANY, a, b); }
em_tensor *em_ge(em_tensor *a, em_tensor *b) { return binary(EM_OP_GE, "em_ge", ANY, a, b); }

/* a OP s with s as a 0-d tensor of a's dtype. There is no type promotion, so
 * an integer tensor takes only integral scalars (torch would promote a + 0.5
 * to float; silently truncating would differ). */
static em_tensor *with_scalar(em_tensor *(*fn)(em_tensor *, em_tensor *), const char *name, em_tensor *a, double s)
{
    EM_PROPAGATE_NULL_IN(name, a);
    EM_CHECK(em_dtype_is_float(a->dtype) || a->dtype == EM_BOOL || s == trunc(s), name,
             "scalar %g is not an integer, and the tensor is %s (convert it to a float dtype first)", s,
             em_dtype_name(a->dtype));
    em_scope_begin();
    em_tensor *r = fn(a, em_scalar(s, a->dtype, a->device));
    em_keep(r);
    em_scope_end();
    return r;
}

em_tensor *em_add_scalar(em_tensor *a, double s) { return with_scalar(em_add, "em_add_scalar", a, s); }
em_tensor *em_mul_scalar(em_tensor *a, double s) { return with_scalar(em_mul, "em_mul_scalar", a, s); }
/* In an autocast region a is cast to f32 first, so the exponent is not rounded to a's 16-bit dtype. */
em_tensor *em_pow_scalar(em_tensor *a, double s)
{
    return with_scalar(em_pow, "em_pow_scalar", em__autocast(EM_OP_POW, 0, a), s);
}

/* ---- unary ops ----------------------------------------------------------------------- */

static em_tensor *unary(em_op op, const char *name, dtype_rule rule, em_tensor *a)
{
    a = em__autocast(op, 0, a);
    EM_PROPAGATE_NULL_IN(name, a);
    EM_CHECK(accepts(rule, a->dtype), name, "needs %s, got %s", rule_text(rule), em_dtype_name(a->dtype));
    return launch(op, 1, &a, a->ndim, a->shape, a->dtype, 0);
}

/* em_<name> for every row of tensor/unary_ops.h (declared by hand in tensor.h:
 * the _Static_assert stops the build when a declaration is missing). */
#define UNARY_FRONT_END(NAME, name, dtypes, ...)                                                   \
    _Static_assert(sizeof &em_##name, "declare em_" #name " in tensor/tensor.h");                  \
    em_tensor *em_##name(em_tensor *a) { return unary(EM_OP_##NAME, "em_" #name, dtypes, a); }
EM_UNARY_OPS(UNARY_FRONT_END)

/* ---- where, masked_fill ------------------------------------------------------------------ */

em_tensor *em_where(em_tensor *cond, em_tensor *x, em_tensor *y)
{
    EM_PROPAGATE_NULL(cond, x, y);
    EM_CHECK(em_device_eq(cond->device, x->device) && em_device_eq(x->device, y->device), "em_where",
             "device mismatch: cond on %s, x on %s, y on %s", dev_name(cond->device), dev_name(x->device),
             dev_name(y->device));
    EM_CHECK(cond->dtype == EM_BOOL, "em_where", "cond must be bool, got %s", em_dtype_name(cond->dtype));
    EM_CHECK(x->dtype == y->dtype, "em_where", "dtype mismatch %s vs %s", em_dtype_name(x->dtype),
             em_dtype_name(y->dtype));
    int n1, nd;
    int64_t s1[EM_MAX_DIMS], shape[EM_MAX_DIMS];
    EM_CHECK(em__broadcast_shapes(cond->ndim, cond->shape, x->ndim, x->shape, &n1, s1) &&
                 em__broadcast_shapes(n1, s1, y->ndim, y->shape, &nd, shape),
             "em_where", "cannot broadcast cond %s, x %s and y %s", em__shape_str(cond), em__shape_str(x),
             em__shape_str(y));
    em_tensor *in[3] = {cond, x, y};
    return launch(EM_OP_WHERE, 3, in, nd, shape, x->dtype, 0);
}

/* value is converted to x's dtype as em_fill_ does (integers truncate toward 0). */
em_tensor *em_masked_fill(em_tensor *x, em_tensor *mask, double value)
{
    EM_PROPAGATE_NULL(x, mask);
    EM_CHECK(em_device_eq(x->device, mask->device), "em_masked_fill", "device mismatch %s vs %s",
             dev_name(x->device), dev_name(mask->device));
    EM_CHECK(mask->dtype == EM_BOOL, "em_masked_fill", "mask must be bool, got %s", em_dtype_name(mask->dtype));
    int nd;
    int64_t shape[EM_MAX_DIMS];
    bool ok = em__broadcast_shapes(x->ndim, x->shape, mask->ndim, mask->shape, &nd, shape) && nd == x->ndim &&
              memcmp(shape, x->shape, sizeof(int64_t) * (size_t)nd) == 0;
    EM_CHECK(ok, "em_masked_fill", "mask %s does not broadcast to x %s", em__shape_str(mask), em__shape_str(x));
    em_tensor *in[2] = {x, mask};
    return launch(EM_OP_MASKED_FILL, 2, in, x->ndim, x->shape, x->dtype, value);
}
