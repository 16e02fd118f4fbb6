/* ember — the backward rules of the op table, and their gradcheck settings.
 *
 * One row per op (indexed like em_op_table). A rule reads the node's saved
 * aliases (n->saved.in/out, as asked by save_in/save_out), the geometry of its
 * inputs (n->in[i]) and outputs (n->out[j]) and its parameters
 * (n->saved.f/i), and writes gin[i] for the inputs that need a gradient
 * (n->next[i].node != NULL). Rules run with grad mode off inside a scope the
 * engine owns, so every temporary they make dies when the node is done.
 *
 * Rules compose device-independent ops wherever that costs nothing, so CUDA
 * gets them for free; the fused ops (softmax, layer_norm, gelu, embedding,
 * cross-entropy) call their backward kernels. Formulas follow PyTorch's
 * derivatives.yaml, including its choices at kinks: relu'(0) = 0, abs'(0) = 0,
 * maximum/minimum split ties half and half, max/min route the gradient to the
 * saved index (or share it evenly among ties when no index was kept).
 *
 * Rows with backward == NULL belong to ops that are not differentiable. Ops
 * whose extra outputs are indices, masks or statistics have n_diff_out = 1:
 * gradients flowing into those outputs are not propagated.
 */
#include "autograd/autograd_internal.h"
#include "tensor/fused.h"
#include "tensor/op_grad.h"
#include "tensor/op_nn.h"

#include <math.h>
#include <string.h>

#define NEEDS(i) (n->next[i].node != NULL)
#define IN(i) (n->saved.in[i])
#define OUT(j) (n->saved.out[j])
#define GEOM(i) n->in[i].ndim, n->in[i].shape
#define OGEOM(j) n->out[j].ndim, n->out[j].shape
/* A 0-d constant of the gradient's dtype on the node's device. */
#define CONST(v) em_scalar(v, g[0]->dtype, n->device)

static int64_t geom_numel(const struct em_geom *gm)
{
    int64_t e = 1;
    for (int d = 0; d < gm->ndim; d++) e *= gm->shape[d];
    return e;
}

/* The dims set in a reduction's bitmask, as a list; returns how many. */
static int mask_dims(int64_t mask, int ndim, int *dims)
{
    int nd = 0;
    for (int d = 0; d < ndim; d++)
        if (mask >> d & 1) dims[nd++] = d;
    return nd;
}

/* A float tensor (dtype dt) of 1 where b is true, 0 elsewhere. */
static em_tensor *as_float(em_tensor *b, em_dtype dt) { return em_to_dtype(b, dt); }

/* sign(x) in x's dtype, with sign(0) = 0 (torch's sgn). */
static em_tensor *sign_of(em_tensor *x)
{
    em_tensor *z = em_scalar(0, x->dtype, x->device);
    return em_sub(as_float(em_gt(x, z), x->dtype), as_float(em_lt(x, z), x->dtype));
}

/* t (smaller than or equal to shape in every dim) placed at the origin of a
 * zero tensor of `shape`; t itself when the shapes already agree. */
static em_tensor *pad_to(em_tensor *t, int ndim, const int64_t *shape)
{
    if (!t || (t->ndim == ndim && !memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim))) return t;
    em_tensor *z = em_zeros(ndim, shape, t->dtype, t->device), *win = z;
    for (int d = 0; d < ndim && win; d++) win = em_narrow(win, d, 0, t->shape[d]);
    if (win) em_copy_(win, t);
    return z;
}

/* ---- views ------------------------------------------------------------------- */
static void bw_view(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_reshape(g[0], GEOM(0));
}

static void bw_permute(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    int inv[EM_MAX_DIMS];
    for (int i = 0; i < n->in[0].ndim; i++) inv[(n->saved.i[0] >> (4 * i)) & 15] = i;
    gin[0] = em_permute(g[0], inv);
}

/* narrow and select: the gradient lands in the same window of a zero tensor */
static void bw_window(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *z = em_zeros(GEOM(0), n->in[0].dtype, n->device);
    em_tensor *win = n->op == EM_OP_NARROW ? em_narrow(z, (int)n->saved.i[0], n->saved.i[1], n->saved.i[2])
                                           : em_select(z, (int)n->saved.i[0], n->saved.i[1]);
    em_copy_(win, g[0]);
    gin[0] = z;
}

static void bw_expand(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em__sum_to(g[0], GEOM(0));
}

/* COPY also converts dtypes (em_to_dtype): the gradient goes back to the
 * input's dtype. Cross-device copies need the input's device, which the
 * node's geometry does not keep yet (see the report of issue 3). */
static void bw_copy(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_to_dtype(em_to(g[0], n->in[0].device), n->in[0].dtype);
}

/* ---- binary: gradients are reduced back to each input's (broadcast) shape ------ */

/* t in input i's dtype: an add or sub of f32 with a bf16/f16 operand runs
 * without a cast on the CPU (op_elementwise.c), so the f32 gradient goes back
 * converted, as the cast's own backward would have converted it. */
static em_tensor *in_dtype(em_node *n, int i, em_tensor *t)
{
    return t && t->dtype != n->in[i].dtype ? em_to_dtype(t, n->in[i].dtype) : t;
}

static void bw_add(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = in_dtype(n, 0, em__sum_to(g[0], GEOM(0)));
    if (NEEDS(1)) gin[1] = in_dtype(n, 1, em__sum_to(g[0], GEOM(1)));
}

static void bw_sub(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = in_dtype(n, 0, em__sum_to(g[0], GEOM(0)));
    if (NEEDS(1)) gin[1] = in_dtype(n, 1, em__sum_to(em_neg(g[0]), GEOM(1)));
}

static void bw_mul(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = em__sum_to(em_mul(g[0], IN(1)), GEOM(0));
    if (NEEDS(1)) gin[1] = em__sum_to(em_mul(g[0], IN(0)), GEOM(1));
}

/* a / b: da = g / b, db = -g a / b^2 */
static void bw_div(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = em__sum_to(em_div(g[0], IN(1)), GEOM(0));
    if (NEEDS(1)) gin[1] = em__sum_to(em_neg(em_div(em_mul(g[0], IN(0)), em_mul(IN(1), IN(1)))), GEOM(1));
}

/* a ^ b: da = g b a^(b-1) (0 where b == 0), db = g a^b log(a) (0 where a == 0
 * and b >= 0), as torch's pow_backward_self / pow_backward_exponent. */
static void bw_pow(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *a = IN(0), *b = IN(1), *zero = CONST(0);
    if (NEEDS(0)) {
        em_tensor *d = em_mul(g[0], em_mul(b, em_pow(a, em_add_scalar(b, -1))));
        gin[0] = em__sum_to(em_masked_fill(d, em_eq(b, zero), 0), GEOM(0));
    }
    if (NEEDS(1)) {
        em_tensor *d = em_mul(g[0], em_mul(OUT(0), em_log(a)));
        em_tensor *where0 = em_where(em_eq(a, zero), em_ge(b, zero), em_scalar(0, EM_BOOL, n->device));
        gin[1] = em__sum_to(em_masked_fill(d, where0, 0), GEOM(1));
    }
}

/* maximum/minimum: the winner takes g, ties split it half and half (torch >= 1.7). */
static void bw_extremum2(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *a = IN(0), *b = IN(1);
    em_dtype dt = g[0]->dtype;
    bool mx = n->op == EM_OP_MAXIMUM;
    em_tensor *half_tie = em_mul_scalar(as_float(em_eq(a, b), dt), 0.5);
    if (NEEDS(0)) {
        em_tensor *win = as_float(mx ? em_gt(a, b) : em_lt(a, b), dt);
        gin[0] = em__sum_to(em_mul(g[0], em_add(win, half_tie)), GEOM(0));
    }
    if (NEEDS(1)) {
        em_tensor *win = as_float(mx ? em_lt(a, b) : em_gt(a, b), dt);
        gin[1] = em__sum_to(em_mul(g[0], em_add(win, half_tie)), GEOM(1));
    }
}

/* ---- unary ------------------------------------------------------------------------ */
static void bw_neg(em_node *n, em_tensor *const *g, em_tensor **gin) { gin[0] = em_neg(g[0]); }
static void bw_abs(em_node *n, em_tensor *const *g, em_tensor **gin) { gin[0] = em_mul(g[0], sign_of(IN(0))); }
static void bw_exp(em_node *n, em_tensor *const *g, em_tensor **gin) { gin[0] = em_mul(g[0], OUT(0)); }
static void bw_log(em_node *n, em_tensor *const *g, em_tensor **gin) { gin[0] = em_div(g[0], IN(0)); }

/* y = sqrt(x): g / (2y) */
static void bw_sqrt(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_div(g[0], em_mul_scalar(OUT(0), 2.0));
}

/* y = x^-1/2: -g y^3 / 2 */
static void bw_rsqrt(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *y = OUT(0);
    gin[0] = em_mul(g[0], em_mul_scalar(em_mul(y, em_mul(y, y)), -0.5));
}

/* y = tanh(x): g (1 - y^2) */
static void bw_tanh(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_mul(g[0], em_sub(CONST(1), em_mul(OUT(0), OUT(0))));
}

/* y = sigmoid(x): g y (1 - y) */
static void bw_sigmoid(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_mul(g[0], em_mul(OUT(0), em_sub(CONST(1), OUT(0))));
}

/* relu: g where the output is positive (so relu'(0) = 0, as torch) */
static void bw_relu(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_masked_fill(g[0], em_le(OUT(0), CONST(0)), 0);
}

/* the DERIV rows of tensor/unary_ops.h: dy * f'(x) by the op's _BWD kernel;
 * DERIV_Y rows also pass the forward's output (a hint: NULL when not kept) */
static void bw_unary(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em__unary_backward_y((em_op)n->op, IN(0), OUT(0), g[0]);
}

static void bw_sin(em_node *n, em_tensor *const *g, em_tensor **gin) { gin[0] = em_mul(g[0], em_cos(IN(0))); }
static void bw_cos(em_node *n, em_tensor *const *g, em_tensor **gin) { gin[0] = em_mul(g[0], em_neg(em_sin(IN(0)))); }

/* ---- select ------------------------------------------------------------------------ */
/* where(cond, x, y): g goes to x where cond, to y elsewhere */
static void bw_where(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *zero = CONST(0);
    if (NEEDS(1)) gin[1] = em__sum_to(em_where(IN(0), g[0], zero), GEOM(1));
    if (NEEDS(2)) gin[2] = em__sum_to(em_where(IN(0), zero, g[0]), GEOM(2));
}

static void bw_masked_fill(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_masked_fill(g[0], IN(1), 0);
}

/* ---- reductions -----------------------------------------------------------------------
 * The kernels' outputs keep the reduced dims as size 1 (i[0] is their bitmask),
 * so g broadcasts straight back over the input. */
static void bw_sum(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_expand(g[0], GEOM(0));
}

static void bw_mean(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    int64_t in = geom_numel(&n->in[0]), out = geom_numel(&n->out[0]);
    double count = out ? (double)in / (double)out : 0.0;
    gin[0] = em_expand(em_mul_scalar(g[0], 1.0 / count), GEOM(0));
}

/* var = sum((x - mean)^2) / (N - correction): g 2 (x - mean) / (N - correction) */
static void bw_var(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    int dims[EM_MAX_DIMS], nd = mask_dims(n->saved.i[0], n->in[0].ndim, dims);
    double count = (double)geom_numel(&n->in[0]) / (double)(geom_numel(&n->out[0]) ? geom_numel(&n->out[0]) : 1);
    em_tensor *x = IN(0), *centered = em_sub(x, em_mean(x, nd, dims, true));
    gin[0] = em_mul(g[0], em_mul_scalar(centered, 2.0 / (count - n->saved.f[0])));
}

/* logsumexp: g softmax(x) = g exp(x - out) */
static void bw_logsumexp(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_mul(g[0], em_exp(em_sub(IN(0), OUT(0))));
}

/* p-norm (torch's norm_backward): 0 where the norm is 0.
 *   p = 1: g sign(x);  p = 2: g x / norm;  p = inf: g sign(x) shared among the
 *   elements where |x| == norm;  else g sign(x) |x|^(p-1) / norm^(p-1). */
static void bw_norm(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    double p = n->saved.f[0];
    em_tensor *x = IN(0), *nrm = OUT(0), *d;
    if (p == 1.0) {
        d = sign_of(x);
    } else if (p == 2.0) {
        d = em_div(x, nrm);
    } else if (isinf(p)) {
        int dims[EM_MAX_DIMS], nd = mask_dims(n->saved.i[0], n->in[0].ndim, dims);
        em_tensor *hit = as_float(em_eq(em_abs(x), nrm), x->dtype);
        d = em_div(em_mul(sign_of(x), hit), em_sum(hit, nd, dims, true));
    } else {
        d = em_div(em_mul(sign_of(x), em_pow_scalar(em_abs(x), p - 1)), em_pow_scalar(nrm, p - 1));
    }
    if (p != 1.0) d = em_masked_fill(d, em_eq(nrm, CONST(0)), 0);
    gin[0] = em_mul(g[0], d);
}

/* max/min along a dim: g goes to the saved index (out[1]). Without indices
 * (em_max_all, or em_max called without them), g is shared evenly among the
 * elements equal to the extreme, as torch's amax/amin backward. */
static void bw_extreme(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    int dims[EM_MAX_DIMS], nd = mask_dims(n->saved.i[0], n->in[0].ndim, dims);
    if (n->in[0].ndim == 0) {
        gin[0] = em_reshape(g[0], GEOM(0));
    } else if (OUT(1) && nd == 1) {
        em_tensor *z = em_zeros(GEOM(0), g[0]->dtype, n->device);
        gin[0] = em_scatter_add(z, dims[0], OUT(1), g[0]);
    } else {
        em_tensor *hit = as_float(em_eq(IN(0), OUT(0)), g[0]->dtype);
        gin[0] = em_mul(g[0], em_div(hit, em_sum(hit, nd, dims, true)));
    }
}

/* ---- linear algebra ---------------------------------------------------------- */
/* The kernel's operands are [B..,M,K] x [B..,K,N] (the front-end made 1-d
 * operands 2-d and broadcast batch dims with recorded views, whose own rules
 * undo that), so the rule is the 2-d one, batched. */
/* An operand stored transposed (x W^T: W^T is a view with unit stride on its
 * rows) gets its gradient in the same layout, as (g^T a)^T, so that the view's
 * rule hands the leaf a contiguous gradient (no transposing copy). */
static bool is_transposed(const em_tensor *t)
{
    return t->ndim >= 2 && t->stride[t->ndim - 2] == 1 && t->stride[t->ndim - 1] != 1 && t->shape[t->ndim - 2] > 1;
}

static void bw_matmul(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) {
        em_tensor *d = is_transposed(IN(0)) ? em_transpose(em_matmul(IN(1), em_transpose(g[0], -1, -2)), -1, -2)
                                            : em_matmul(g[0], em_transpose(IN(1), -1, -2));
        gin[0] = em__sum_to(d, GEOM(0));
    }
    if (NEEDS(1)) {
        em_tensor *d = is_transposed(IN(1)) ? em_transpose(em_matmul(em_transpose(g[0], -1, -2), IN(0)), -1, -2)
                                            : em_matmul(em_transpose(IN(0), -1, -2), g[0]);
        gin[1] = em__sum_to(d, GEOM(1));
    }
}

/* y = x w^T + b; in: b [N] or NULL, x [M,K], w [N,K] (the front-end made x
 * 2-d with recorded views). The gradients of the composition em_matmul(x,
 * transpose(w)) + b, made by the same ops in the same layouts as bw_matmul
 * and bw_add made them for it (nn's Linear recorded that composition before
 * LINEAR existed), so the CPU gives the same bits: dx = g w (or (w^T g^T)^T for a transposed x),
 * dw = g^T x (x^T g, transposed, when K = 1), db = g summed over the rows. */
static void bw_linear(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *x = IN(1), *w = IN(2);
    if (NEEDS(1)) {
        /* under autocast, x is the bf16/f16 cast of an f32 activation: dx = g w
         * goes by the GEMM (beta = 1), in f32 and unrounded, into that
         * activation's pending gradient (em__pending_sink_cast), instead of
         * rounding to bf16, summing the cast's consumers in bf16, converting
         * and adding (torch's order) */
        em_dtype dt = g[0]->dtype;
        em_tensor *sink = (dt == EM_BF16 || dt == EM_F16) && x->dtype == dt && w->dtype == dt && g[0]->ndim == 2 &&
                                  x->ndim == 2 && !is_transposed(x)
                              ? em__pending_sink_cast(n, 1)
                              : NULL;
        if (sink) em__matmul_into(em_reshape(sink, 2, x->shape), g[0], w);   /* a failure is recorded as an em_matmul's */
        else
            gin[1] = is_transposed(x) ? em_transpose(em_matmul(em_transpose(w, 0, 1), em_transpose(g[0], 0, 1)), 0, 1)
                                      : em_matmul(g[0], w);
    }
    if (NEEDS(2)) {
        /* dW = g^T x, added by the GEMM (beta = 1) straight into an existing .grad
         * when the engine offers it (no [N,K] temporary, no separate add): the
         * weight's own f32/f64 .grad, or under autocast, where w is the bf16/f16
         * cast of an f32 weight, that weight's f32 .grad, unrounded (torch rounds
         * the gradient to bf16, then converts and adds it) */
        em_dtype dt = g[0]->dtype;
        bool gemm = w->shape[1] > 1 && x->dtype == dt && g[0]->ndim == 2;
        em_tensor *sink = NULL;
        if (gemm && (dt == EM_F32 || dt == EM_F64)) sink = em__grad_sink(n, 2, dt);
        else if (gemm && (dt == EM_BF16 || dt == EM_F16)) sink = em__grad_sink_cast(n, 2, EM_F32);
        if (sink) em__matmul_into(sink, em_transpose(g[0], 0, 1), x);   /* a failure is recorded as an em_matmul's */
        else
            gin[2] = w->shape[1] > 1 ? em_matmul(em_transpose(g[0], 0, 1), x)
                                     : em_transpose(em_matmul(em_transpose(x, 0, 1), g[0]), 0, 1);
    }
    if (NEEDS(0)) gin[0] = em__sum_to(g[0], GEOM(0));
}

/* ---- fused NN ops -------------------------------------------------------------------- */
static void bw_softmax(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em__softmax_backward(OUT(0), g[0], (int)n->saved.i[0], n->op == EM_OP_LOG_SOFTMAX);
}

/* in: x, weight or NULL, bias or NULL; out: y, mean, rstd (statistics: no gradient) */
static void bw_layer_norm(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *dw = NULL, *db = NULL;
    em_tensor *dx = em_layer_norm_backward(g[0], IN(0), OUT(1), OUT(2), IN(1), NEEDS(1) ? &dw : NULL,
                                           NEEDS(2) ? &db : NULL);
    if (NEEDS(0)) gin[0] = dx;
    if (NEEDS(1)) gin[1] = dw;
    if (NEEDS(2)) gin[2] = db;
}

/* dw: rows of g added into the rows their ids picked; padding_idx rows stay 0
 * (i[1] says whether i[0] holds a padding_idx: em__embedding_ex). Into the
 * weight's .grad directly when the engine offers it (em__grad_sink): a [V,D]
 * gradient of which at most N rows are not zero then costs no [V,D] fill and
 * no [V,D] add. */
static void bw_embedding(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    int64_t pad = n->saved.i[1] ? n->saved.i[0] : -1;
    em_tensor *sink = em__grad_sink(n, 0, g[0]->dtype);
    if (sink) em__embedding_backward_into(sink, g[0], IN(1), pad);
    else gin[0] = em_embedding_backward(g[0], IN(1), n->in[0].shape[0], pad);
}

/* dropout is linear in x: g * mask / (1 - p), with the forward's mask (its
 * out[1], saved: one byte an element, and no random numbers drawn again), or
 * the mask the forward read (a backward recorded under create_graph). With
 * neither, the key (seed, offset) regenerates the same mask. */
static void bw_dropout(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *mask = OUT(1) ? OUT(1) : IN(1);
    gin[0] = em__dropout_masked(g[0], mask, n->saved.f[0], (uint64_t)n->saved.i[0], (uint64_t)n->saved.i[1]);
}

/* in: logits, target; out: loss, lse (saved, so backward is one pass) */
static void bw_cross_entropy(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em__cross_entropy_backward(g[0], IN(0), IN(1), OUT(1), n->saved.i[0], (em_reduction)n->saved.i[1]);
}

/* The composed gradient of SDPA on [B,H,S,D] operands (lens: the node's key
 * lengths or NULL), recomputing the weights P and their dropout Pd (the same
 * mask): dV = Pd^T g, dS = softmax_backward(P, dropout(g V^T)) (0 at masked keys,
 * as the composed forward's masked_fill gives), dQ = s dS K, dK = s dS^T Q. An
 * em__sdpa_grad_fn; ctx is the node. */
static void sdpa_composed_grad(void *ctx, em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *g, em_tensor **gin)
{
    em_node *n = ctx;
    em_tensor *lens = IN(3);
    double scale = n->saved.f[0], p_drop = n->saved.f[1];
    uint64_t seed = (uint64_t)n->saved.i[0], offset = (uint64_t)n->saved.i[1];
    em_tensor *s = em_mul_scalar(em_matmul(q, em_transpose(k, 2, 3)), scale), *keep = NULL;
    if (lens) {
        keep = em_eq(em__sdpa_lens_mask(lens, k->shape[2]), em_scalar(0, EM_BOOL, n->device));
        s = em_masked_fill(s, keep, s ? (s->dtype == EM_F64 ? -1.7976931348623157e308
                                         : s->dtype == EM_F16 ? -65504.0
                                         : s->dtype == EM_BF16 ? -3.3895313892515355e38 : -3.4028234663852886e38) : 0);
    }
    em_tensor *p = em_softmax(s, -1);
    em_tensor *pd = p_drop > 0 ? em_dropout(p, p_drop, seed, offset, NULL) : p;
    if (NEEDS(2)) gin[2] = em_matmul(em_transpose(pd, 2, 3), g);
    if (!NEEDS(0) && !NEEDS(1)) return;
    em_tensor *dpd = em_matmul(g, em_transpose(v, 2, 3));
    if (p_drop > 0) dpd = em_dropout(dpd, p_drop, seed, offset, NULL);   /* the same mask and scale: [B,H,Sq,Sk] */
    em_tensor *ds = em__softmax_backward(p, dpd, -1, false);
    if (keep) ds = em_masked_fill(ds, keep, 0);
    if (NEEDS(0)) gin[0] = em_mul_scalar(em_matmul(ds, k), scale);
    if (NEEDS(1)) gin[1] = em_mul_scalar(em_matmul(em_transpose(ds, 2, 3), q), scale);
}

/* in: q, k, v, lens or NULL, starts or NULL (packed rows: em__sdpa_packed, i[3] =
 * S); out: o, lse (statistics: no gradient); f[1], i[0], i[1]: the dropout p and
 * its Philox key. The fused backward, op SDPA_BWD, when the device's kernel takes
 * the case (the CPU's tensor/cpu/k_sdpa.c, cuDNN's tensor/cuda/k_sdpa_cudnn.cu);
 * else the composed gradient (packed rows: on the padded batch, em__sdpa_packed_grad). */
static void bw_sdpa(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    em_tensor *q = IN(0), *k = IN(1), *v = IN(2), *lens = IN(3), *starts = IN(4);
    double scale = n->saved.f[0], p_drop = n->saved.f[1];
    uint64_t seed = (uint64_t)n->saved.i[0], offset = (uint64_t)n->saved.i[1];
    bool pad_queries = n->saved.i[2] != 0;
    int64_t S = n->saved.i[3];
    {
        /* the CPU kernels read dout with any strides and write gradients in
         * em__sdpa_result's layout (no copies around the heads' split and merge) */
        bool cpu = n->device.type == EM_DEVICE_CPU;
        em_tensor *dout = cpu ? g[0] : em_contiguous(g[0]);
        em_tensor *dq = em__sdpa_result(n->in[0].shape, q->dtype, n->device);
        em_tensor *dk = em__sdpa_result(n->in[1].shape, k->dtype, n->device);
        em_tensor *dv = em__sdpa_result(n->in[2].shape, v->dtype, n->device);
        if (dout && dq && dk && dv &&
            (starts ? em__sdpa_backward_packed(dq, dk, dv, q, k, v, lens, starts, S, scale, OUT(0), OUT(1), dout,
                                               p_drop, seed, offset)
                    : em__sdpa_backward(dq, dk, dv, q, k, v, lens, scale, OUT(0), OUT(1), dout, p_drop, seed,
                                        offset, pad_queries)) == EM_OK) {
            if (NEEDS(0)) gin[0] = dq;
            if (NEEDS(1)) gin[1] = dk;
            if (NEEDS(2)) gin[2] = dv;
            return;
        }
    }
    if (starts) em__sdpa_packed_grad(q, k, v, lens, starts, S, g[0], sdpa_composed_grad, n, gin);
    else sdpa_composed_grad(n, q, k, v, g[0], gin);
}

/* ---- shape and index ops ----------------------------------------------------------------- */
/* cat: each input gets its slice of g along dim (a view, no copy) */
static void bw_cat(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    int d = (int)n->saved.i[0];
    int64_t at = 0;
    for (int i = 0; i < n->n_in; i++) {
        const struct em_geom *gm = &n->in[i];
        bool skipped = gm->ndim != n->out[0].ndim;   /* torch's legacy 1-d [0] input */
        int64_t len = skipped ? 0 : gm->shape[d];
        if (NEEDS(i)) gin[i] = skipped ? em_zeros(gm->ndim, gm->shape, gm->dtype, n->device) : em_narrow(g[0], d, at, len);
        at += len;
    }
}

/* index_select: index_add of g into zeros, as a scatter_add with the 1-d index
 * broadcast along every other dim. */
static void bw_index_select(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    int d = (int)n->saved.i[0];
    int64_t shape[EM_MAX_DIMS];
    for (int j = 0; j < g[0]->ndim; j++) shape[j] = j == d ? g[0]->shape[j] : 1;
    em_tensor *idx = em_expand(em_reshape(IN(1), g[0]->ndim, shape), g[0]->ndim, g[0]->shape);
    gin[0] = em_scatter_add(em_zeros(GEOM(0), g[0]->dtype, n->device), d, idx, g[0]);
}

static void bw_gather(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_scatter_add(em_zeros(GEOM(0), g[0]->dtype, n->device), (int)n->saved.i[0], IN(1), g[0]);
}

/* scatter_add(self, dim, index, src): self gets g; src gets g gathered at
 * index, zero where src is larger than index. */
static void bw_scatter_add(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = g[0];
    if (NEEDS(2)) gin[2] = pad_to(em_gather(g[0], (int)n->saved.i[0], IN(1)), GEOM(2));
}

/* ---- the table ------------------------------------------------------------------------------ */
/* tol is one of the GC_* triples below (eps, atol, rtol); TOL expands it first. */
#define TOL_(eps, atol, rtol) .gc_eps = eps, .gc_atol = atol, .gc_rtol = rtol
#define TOL(...) TOL_(__VA_ARGS__)
#define DIFF(fn, si, so, tol) {.backward = fn, .save_in = si, .save_out = so, TOL(tol)}
#define DIFF1(fn, si, so, tol) {.backward = fn, .save_in = si, .save_out = so, .n_diff_out = 1, TOL(tol)}
#define GC 1e-6, 1e-7, 1e-5     /* the default gradcheck settings (f64) */
/* unary_ops.h's rows: RULE(fn, save_in, save_out) names a rule above; DERIV(...) takes bw_unary */
#define UNARY_RULE_RULE(fn, si, so) DIFF(fn, si, so, GC)
#define UNARY_RULE_DERIV(df, dref) DIFF(bw_unary, 1, 0, GC)
#define UNARY_RULE_DERIV_Y(df, dref) {.backward = bw_unary, .save_in = 1, .hint_out = 1, TOL(GC)}
#define UNARY_RULE(NAME, name, dtypes, cost, f, backward, ...) [EM_OP_##NAME] = UNARY_RULE_##backward,

const em_rule em_rules[EM_NUM_OPS] = {
    [EM_OP_VIEW] = DIFF(bw_view, 0, 0, GC),
    [EM_OP_PERMUTE] = DIFF(bw_permute, 0, 0, GC),
    [EM_OP_NARROW] = DIFF(bw_window, 0, 0, GC),
    [EM_OP_SELECT] = DIFF(bw_window, 0, 0, GC),
    [EM_OP_EXPAND] = DIFF(bw_expand, 0, 0, GC),
    [EM_OP_COPY] = DIFF(bw_copy, 0, 0, GC),
    [EM_OP_ADD] = DIFF(bw_add, 0, 0, GC),
    [EM_OP_SUB] = DIFF(bw_sub, 0, 0, GC),
    [EM_OP_MUL] = DIFF(bw_mul, 3, 0, GC),
    [EM_OP_DIV] = DIFF(bw_div, 3, 0, GC),
    [EM_OP_POW] = DIFF(bw_pow, 3, 1, GC),
    [EM_OP_MAXIMUM] = DIFF(bw_extremum2, 3, 0, GC),
    [EM_OP_MINIMUM] = DIFF(bw_extremum2, 3, 0, GC),
    EM_UNARY_OPS(UNARY_RULE)   /* tensor/unary_ops.h */
    [EM_OP_WHERE] = DIFF(bw_where, 1, 0, GC),
    [EM_OP_MASKED_FILL] = DIFF(bw_masked_fill, 2, 0, GC),
    [EM_OP_SUM] = DIFF(bw_sum, 0, 0, GC),
    [EM_OP_MEAN] = DIFF(bw_mean, 0, 0, GC),
    [EM_OP_VAR] = DIFF(bw_var, 1, 0, GC),
    [EM_OP_LOGSUMEXP] = DIFF(bw_logsumexp, 1, 1, GC),
    [EM_OP_NORM] = DIFF(bw_norm, 1, 1, GC),
    [EM_OP_MAX] = DIFF1(bw_extreme, 1, 3, GC),
    [EM_OP_MIN] = DIFF1(bw_extreme, 1, 3, GC),
    [EM_OP_MATMUL] = DIFF(bw_matmul, 3, 0, GC),
    [EM_OP_LINEAR] = DIFF(bw_linear, 6, 0, GC),
    [EM_OP_SOFTMAX] = DIFF(bw_softmax, 0, 1, GC),
    [EM_OP_LOG_SOFTMAX] = DIFF(bw_softmax, 0, 1, GC),
    [EM_OP_LAYER_NORM] = DIFF1(bw_layer_norm, 3, 6, GC),
    [EM_OP_EMBEDDING] = DIFF(bw_embedding, 2, 0, GC),
    [EM_OP_DROPOUT] = DIFF1(bw_dropout, 2, 2, GC),
    [EM_OP_CROSS_ENTROPY] = DIFF1(bw_cross_entropy, 3, 2, GC),
    [EM_OP_SDPA] = DIFF1(bw_sdpa, 31, 3, GC),
    [EM_OP_CAT] = DIFF(bw_cat, 0, 0, GC),
    [EM_OP_INDEX_SELECT] = DIFF(bw_index_select, 2, 0, GC),
    [EM_OP_GATHER] = DIFF(bw_gather, 2, 0, GC),
    [EM_OP_SCATTER_ADD] = DIFF(bw_scatter_add, 2, 0, GC),
};
