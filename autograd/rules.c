/* ember — the backward rules of the op table, and their gradcheck settings.
 *
 * One row per op (indexed like em_op_table). A rule reads the node's saved
 * aliases (n->saved.in/out, as asked by save_in/save_out), the geometry of its
 * inputs (n->in[i]) and its parameters (n->saved.f/i), and writes gin[i] for
 * the inputs that need a gradient (n->next[i].node != NULL). It composes
 * device-independent ops wherever that costs nothing, so CUDA gets it free.
 * Rows with backward == NULL belong to ops that are not differentiable. */
#include "autograd/autograd_internal.h"

#include <math.h>
#include <string.h>

#define NEEDS(i) (n->next[i].node != NULL)
#define IN(i) (n->saved.in[i])
#define OUT(j) (n->saved.out[j])
#define GEOM(i) n->in[i].ndim, n->in[i].shape

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

static void bw_copy(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_to_dtype(g[0], n->in[0].dtype);
}

/* ---- binary ------------------------------------------------------------------- */
static void bw_add(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = em__sum_to(g[0], GEOM(0));
    if (NEEDS(1)) gin[1] = em__sum_to(g[0], GEOM(1));
}

static void bw_sub(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = em__sum_to(g[0], GEOM(0));
    if (NEEDS(1)) gin[1] = em__sum_to(em_neg(g[0]), GEOM(1));
}

static void bw_mul(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = em__sum_to(em_mul(g[0], IN(1)), GEOM(0));
    if (NEEDS(1)) gin[1] = em__sum_to(em_mul(g[0], IN(0)), GEOM(1));
}

/* ---- linear algebra ---------------------------------------------------------- */
/* The kernel's operands are [B..,M,K] x [B..,K,N] (the front-end made 1-d
 * operands 2-d with recorded views), so the rule is the 2-d one, batched. */
static void bw_matmul(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    if (NEEDS(0)) gin[0] = em__sum_to(em_matmul(g[0], em_transpose(IN(1), -1, -2)), GEOM(0));
    if (NEEDS(1)) gin[1] = em__sum_to(em_matmul(em_transpose(IN(0), -1, -2), g[0]), GEOM(1));
}

/* ---- reductions ------------------------------------------------------------------ */
/* Kernel outputs keep the reduced dims as size 1, so g broadcasts back. */
static void bw_sum(em_node *n, em_tensor *const *g, em_tensor **gin)
{
    gin[0] = em_contiguous(em_expand(g[0], GEOM(0)));
}

#define DIFF(fn, si, so, eps, atol, rtol) {.backward = fn, .save_in = si, .save_out = so, .gc_eps = eps, .gc_atol = atol, .gc_rtol = rtol}
#define GC 1e-6, 1e-7, 1e-5   /* the default gradcheck settings (f64) */

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
    [EM_OP_MATMUL] = DIFF(bw_matmul, 3, 0, GC),
    [EM_OP_SUM] = DIFF(bw_sum, 0, 0, GC),
};
