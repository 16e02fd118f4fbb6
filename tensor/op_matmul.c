/* ember — em_matmul, with torch.matmul's semantics:
 *   1-d x 1-d      -> dot product, a 0-d tensor;
 *   1-d a          -> treated as [1,K], the 1 removed from the result;
 *   1-d b          -> treated as [K,1], the 1 removed from the result;
 *   N-d x M-d      -> batch dims (all but the last two) broadcast, NumPy-style.
 * The operands keep their layout: a transposed operand reaches the kernel as
 * a strided view (GEMM's trans flag), and broadcast batch dims as stride 0.
 * Only an operand whose matrix has neither stride 1, or no valid leading
 * dimension, is made contiguous first.
 *
 * The reshaping goes through the public view ops (unsqueeze, expand, squeeze)
 * inside a private scope, so that the layer above sees an ordinary chain of
 * recorded ops; only the result leaves the scope.
 */
#include "tensor/tensor_internal.h"
#include "tensor/op_grad.h"

#include <limits.h>

bool em__gemm_ready(const em_tensor *t)
{
    int nd = t->ndim;
    int64_t rows = t->shape[nd - 2], cols = t->shape[nd - 1];
    int64_t s0 = t->stride[nd - 2], s1 = t->stride[nd - 1];
    int64_t minr = rows > 1 ? rows : 1, minc = cols > 1 ? cols : 1;
    if (cols == 1 || s1 == 1) {
        int64_t l = rows <= 1 ? minc : s0;
        if (l >= minc && l <= INT_MAX) return true;
    }
    if (rows == 1 || s0 == 1) {
        int64_t l = cols <= 1 ? minr : s1;
        if (l >= minr && l <= INT_MAX) return true;
    }
    return false;
}

/* x made GEMM-ready (contiguous when needed), then expanded to [batch.., r, c].
 * NULL on OOM. Both results belong to the current (private) scope. */
static em_tensor *prepare(em_tensor *x, int nd, const int64_t *bshape)
{
    if (!em__gemm_ready(x)) x = em_contiguous(x);
    if (!x) return NULL;
    int64_t shape[EM_MAX_DIMS];
    bool same = x->ndim == nd;
    for (int d = 0; d < nd - 2; d++) {
        shape[d] = bshape[d];
        if (same && x->shape[d] != bshape[d]) same = false;
    }
    if (same) return x;
    shape[nd - 2] = x->shape[x->ndim - 2];
    shape[nd - 1] = x->shape[x->ndim - 1];
    return em_expand(x, nd, shape);
}

bool em__matmul_into(em_tensor *c, em_tensor *a, em_tensor *b)
{
    static const char op[] = "em__matmul_into";
    if (!c || !a || !b || !em__live(c, op) || !em__live(a, op) || !em__live(b, op)) return false;
    bool half_in = c->dtype == EM_F32 && (a->dtype == EM_BF16 || a->dtype == EM_F16);   /* under autocast */
    bool ok = a->ndim == 2 && b->ndim == 2 && c->ndim == 2 && (c->dtype == EM_F32 || c->dtype == EM_F64) &&
              (a->dtype == c->dtype || half_in) && b->dtype == a->dtype && em_device_eq(a->device, c->device) &&
              em_device_eq(b->device, c->device) && em_is_contiguous(c) && a->shape[1] == b->shape[0] &&
              c->shape[0] == a->shape[0] && c->shape[1] == b->shape[1];
    if (!ok) {
        em__misuse(op, "expected c [M,N] += a [M,K] b [K,N], c contiguous, one f32/f64 dtype (or bf16/f16 a and b "
                   "into an f32 c) and device; got %s %s, "
                   "%s %s, %s %s", em_dtype_name(c->dtype), em__shape_str(c), em_dtype_name(a->dtype),
                   em__shape_str(a), em_dtype_name(b->dtype), em__shape_str(b));
        return false;
    }
    bool done = false;
    em_scope_begin();
    em_tensor *av = em__gemm_ready(a) ? a : em_contiguous(a), *bv = em__gemm_ready(b) ? b : em_contiguous(b);
    if (av && bv) {
        em_kargs k = {.op = EM_OP_MATMUL, .in = {av, bv}, .out = {c}, .i = {1}};
        done = em__dispatch(&k) == EM_OK;
    }
    em_scope_end();
    return done;
}

em_tensor *em_matmul(em_tensor *a, em_tensor *b)
{
    a = em__autocast(EM_OP_MATMUL, 0, a);   /* in an autocast region: the low dtype */
    b = em__autocast(EM_OP_MATMUL, 1, b);
    EM_PROPAGATE_NULL(a, b);
    EM_CHECK(em_device_eq(a->device, b->device), "em_matmul", "operands on different devices: %s %s and %s %s",
             em_device_str(a->device, (char[16]){0}), em__shape_str(a),
             em_device_str(b->device, (char[16]){0}), em__shape_str(b));
    EM_CHECK(a->dtype == b->dtype, "em_matmul", "operands differ in dtype: %s %s and %s %s",
             em_dtype_name(a->dtype), em__shape_str(a), em_dtype_name(b->dtype), em__shape_str(b));
    EM_CHECK(em_dtype_is_float(a->dtype), "em_matmul", "expected floating-point operands, got %s %s and %s",
             em_dtype_name(a->dtype), em__shape_str(a), em__shape_str(b));
    EM_CHECK(a->ndim >= 1 && b->ndim >= 1, "em_matmul", "operands must be at least 1-d, got %s and %s",
             em__shape_str(a), em__shape_str(b));
    int64_t ka = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    EM_CHECK(ka == kb, "em_matmul", "cannot multiply %s by %s: inner dimensions %lld and %lld differ",
             em__shape_str(a), em__shape_str(b), (long long)ka, (long long)kb);

    /* batch dims: all but the matrix dims (a 1-d operand has none) */
    int nba = a->ndim > 2 ? a->ndim - 2 : 0, nbb = b->ndim > 2 ? b->ndim - 2 : 0;
    int nbo = 0;
    int64_t bshape[EM_MAX_DIMS];
    EM_CHECK(em__broadcast_shapes(nba, a->shape, nbb, b->shape, &nbo, bshape), "em_matmul",
             "cannot broadcast the batch dims of %s and %s: %s vs %s", em__shape_str(a), em__shape_str(b),
             em__dims_str(nba, a->shape), em__dims_str(nbb, b->shape));
    int nd = nbo + 2;
    int64_t M = a->ndim == 1 ? 1 : a->shape[a->ndim - 2];
    int64_t N = b->ndim == 1 ? 1 : b->shape[b->ndim - 1];
    int64_t oshape[EM_MAX_DIMS];
    for (int d = 0; d < nbo; d++) oshape[d] = bshape[d];
    oshape[nd - 2] = M;
    oshape[nd - 1] = N;

    em_tensor *result = NULL;
    em_scope_begin();
    em_tensor *av = a->ndim == 1 ? em_unsqueeze(a, 0) : a;   /* [K] -> [1,K] */
    em_tensor *bv = b->ndim == 1 ? em_unsqueeze(b, 1) : b;   /* [K] -> [K,1] */
    if (av) av = prepare(av, nd, bshape);
    if (bv) bv = prepare(bv, nd, bshape);
    em_tensor *out = av && bv ? em__empty(nd, oshape, a->dtype, a->device) : NULL;
    if (out) {
        em_kargs k = {.op = EM_OP_MATMUL, .in = {av, bv}, .out = {out}};
        if (em__dispatch(&k) == EM_OK) {
            result = out;
            if (b->ndim == 1 && result) result = em_squeeze(result, nd - 1);
            if (a->ndim == 1 && result) result = em_squeeze(result, nd - 2);
        }
    }
    if (result) em_keep(result);
    em_scope_end();
    return result;
}
