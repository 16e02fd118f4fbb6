/* gradcheck over the whole op table (DESIGN.md §3 "autograd"): every op with
 * em_op_table[op].differentiable must have at least one case below, or the
 * loop fails naming the op. Each case builds f64 leaves (broadcast shapes,
 * non-contiguous views, several dims for reductions; inputs away from the
 * kinks of relu/abs/max/...), checks that the graph really contains the op,
 * and compares the analytic gradient with central differences using the
 * op's own tolerances from em_rules. Also: identical gradients from two runs
 * of the same graph, torch's tie/padding conventions, and scaled dot-product
 * attention (forward against plain loops, gradcheck with a padding mask and
 * dropout). */
#include "check_util.h"
#include "autograd/autograd_internal.h"
#include "tensor/op_grad.h"
#include "tensor/cpu/k_sdpa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- inputs --------------------------------------------------------------------------- */
static uint64_t rng = 0x5eed;

static void fill(em_tensor *t, double (*gen)(int64_t e, void *c), void *c)
{
    int64_t idx[EM_MAX_DIMS] = {0};
    for (int64_t e = 0; e < em_numel(t); e++) {
        em_set(t, idx, gen(e, c));
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

typedef struct { double lo, hi; bool away; } range;
static double gen_uniform(int64_t e, void *c)
{
    (void)e;
    const range *r = c;
    double v = tu_uniform(&rng, r->lo, r->hi);
    return r->away && (tu_next(&rng) & 1) ? -v : v;
}

typedef struct { double lo, gap; int64_t *perm; } grid;
static double gen_grid(int64_t e, void *c)
{
    const grid *g = c;
    return g->lo + g->gap * (double)g->perm[e];
}

static em_tensor *grad_leaf(em_tensor *t) { return em_requires_grad_(t, true); }

/* U[lo,hi) f64 leaf */
static em_tensor *R(int nd, const int64_t *sh, double lo, double hi)
{
    em_tensor *t = em_empty(nd, sh, EM_F64, EM_CPU);
    fill(t, gen_uniform, &(range){lo, hi, false});
    return grad_leaf(t);
}

/* |v| in [lo,hi) with a random sign: away from the kinks at 0 */
static em_tensor *R_away(int nd, const int64_t *sh, double lo, double hi)
{
    em_tensor *t = em_empty(nd, sh, EM_F64, EM_CPU);
    fill(t, gen_uniform, &(range){lo, hi, true});
    return grad_leaf(t);
}

/* A non-contiguous leaf of shape sh: the transpose of a [.., sh[-1], sh[-2]] tensor
 * (values as R, or as R_away when away). */
static em_tensor *R_tr(int nd, const int64_t *sh, double lo, double hi, bool away)
{
    int64_t s[EM_MAX_DIMS];
    memcpy(s, sh, sizeof(int64_t) * (size_t)nd);
    s[nd - 1] = sh[nd - 2], s[nd - 2] = sh[nd - 1];
    em_tensor *base = em_empty(nd, s, EM_F64, EM_CPU);
    fill(base, gen_uniform, &(range){lo, hi, away});
    em_tensor *t = em_transpose(base, -1, -2);
    ck_assert(!em_is_contiguous(t));
    return grad_leaf(t);
}
static em_tensor *R_t(int nd, const int64_t *sh, double lo, double hi) { return R_tr(nd, sh, lo, hi, false); }

/* Distinct values lo + gap*k, k a shuffled 0..n-1: no ties, no kinks. */
static em_tensor *R_distinct(int nd, const int64_t *sh, double lo, double gap)
{
    em_tensor *t = em_empty(nd, sh, EM_F64, EM_CPU);
    int64_t n = em_numel(t), *perm = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(tu_next(&rng) % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    fill(t, gen_grid, &(grid){lo, gap, perm});
    free(perm);
    return grad_leaf(t);
}

static em_tensor *I64(int nd, const int64_t *sh, const int64_t *v) { return em_from_data(v, nd, sh, EM_I64); }
static em_tensor *B(int nd, const int64_t *sh, const uint8_t *v) { return em_from_data(v, nd, sh, EM_BOOL); }
#define V64(...) (const int64_t[]){__VA_ARGS__}
#define VB(...) (const uint8_t[]){__VA_ARGS__}

/* ---- the cases ------------------------------------------------------------------------------
 * MK(name, ...) builds the inputs x[0..]; F(name, expr) is the function checked. */
#define MK(name, ...) static void mk_##name(em_tensor **x) { __VA_ARGS__; }
#define F(name, expr) static em_tensor *f_##name(int n_, em_tensor **x, void *u_) { (void)n_; (void)u_; return (expr); }

MK(view_copy, x[0] = R_t(EM_SHAPE(4, 3), -1, 1))
F(view_copy, em_unsqueeze(em_reshape(x[0], EM_SHAPE(2, 6)), 1))
MK(view_flat, x[0] = R(EM_SHAPE(2, 3, 4), -1, 1))
F(view_flat, em_squeeze(em_view(em_flatten(x[0], 0, 1), EM_SHAPE(6, 1, 4)), 1))
MK(x234, x[0] = R(EM_SHAPE(2, 3, 4), -1, 1))
F(permute, em_permute(x[0], (int[]){2, 0, 1}))
F(narrow, em_narrow(x[0], 2, 1, 2))
F(select, em_select(x[0], 1, 2))
MK(x31, x[0] = R(EM_SHAPE(3, 1), -1, 1))
F(expand, em_expand(x[0], EM_SHAPE(2, 3, 4)))
MK(xt43, x[0] = R_t(EM_SHAPE(4, 3), -1, 1))
F(clone, em_clone(x[0]))

MK(add_bc, x[0] = R(EM_SHAPE(2, 3, 4), -1, 1); x[1] = R(EM_SHAPE(4), -1, 1))
F(add, em_add(x[0], x[1]))
MK(add_bc2, x[0] = R_t(EM_SHAPE(3, 2), -1, 1); x[1] = R(EM_SHAPE(2, 1, 4), -1, 1))
F(sub, em_sub(em_narrow(x[0], 1, 1, 1), x[1]))
MK(mul_bc, x[0] = R_t(EM_SHAPE(4, 3), -1, 1); x[1] = R(EM_SHAPE(3), -1, 1))
F(mul, em_mul(x[0], x[1]))
F(mul_rev, em_mul(x[1], x[0]))
MK(div_bc, x[0] = R(EM_SHAPE(2, 3), -1, 1); x[1] = R_away(EM_SHAPE(3), 0.5, 2))
F(div, em_div(x[0], x[1]))
F(div_rev, em_div(x[1], em_add_scalar(em_abs(x[0]), 0.5)))
MK(pow_bc, x[0] = R(EM_SHAPE(2, 3), 0.5, 2); x[1] = R(EM_SHAPE(3), -1.5, 2))
F(pow, em_pow(x[0], x[1]))
F(pow_scalar, em_pow_scalar(x[0], 3.0))
MK(ext_bc, x[0] = R_distinct(EM_SHAPE(3, 4), -1, 0.1); x[1] = R_distinct(EM_SHAPE(4), -0.95, 0.3))
F(maximum, em_maximum(x[0], x[1]))
F(minimum, em_minimum(x[1], x[0]))

MK(x34, x[0] = R(EM_SHAPE(3, 4), -2, 2))
MK(x34t, x[0] = R_t(EM_SHAPE(3, 4), -2, 2))
MK(x34pos, x[0] = R(EM_SHAPE(3, 4), 0.5, 2))
MK(x34away, x[0] = R_away(EM_SHAPE(3, 4), 0.1, 2))
/* unary_ops.h: the inputs of each grad domain ([3,4] and a transposed [3,4]), and f_<name> */
MK(x34post, x[0] = R_t(EM_SHAPE(3, 4), 0.5, 2))
MK(x34awayt, x[0] = R_tr(EM_SHAPE(3, 4), 0.1, 2, true))
#define mk_un_ANY mk_x34
#define mk_un_ANY_t mk_x34t
#define mk_un_POSITIVE mk_x34pos
#define mk_un_POSITIVE_t mk_x34post
#define mk_un_NONZERO mk_x34away
#define mk_un_NONZERO_t mk_x34awayt
#define UN_F(NAME, name, ...) F(name, em_##name(x[0]))
EM_UNARY_OPS(UN_F)

MK(where, x[0] = R(EM_SHAPE(3, 4), -1, 1); x[1] = R(EM_SHAPE(4), -1, 1); x[2] = B(EM_SHAPE(3, 1), VB(1, 0, 1)))
F(where, em_where(x[2], x[0], x[1]))
MK(masked_fill, x[0] = R_t(EM_SHAPE(3, 4), -1, 1); x[1] = B(EM_SHAPE(4), VB(0, 1, 0, 1)))
F(masked_fill, em_masked_fill(x[0], x[1], 7.0))

F(sum_dims, em_sum(x[0], EM_DIMS(0, 2), false))
F(sum_all, em_sum(x[0], 0, NULL, false))
F(mean_dim, em_mean(x[0], EM_DIMS(1), true))
F(mean_all, em_mean(x[0], 0, NULL, false))
F(var_dims, em_var(x[0], EM_DIMS(0, 2), 1.0, false))
F(var_last, em_var(x[0], EM_DIMS(-1), 0.0, true))
F(logsumexp, em_logsumexp(x[0], EM_DIMS(1), false))
F(logsumexp_all, em_logsumexp(x[0], EM_DIMS(0, 1), true))
F(norm2, em_norm(x[0], 2.0, EM_DIMS(1), false))
F(norm1, em_norm(x[0], 1.0, 0, NULL, false))
F(norm3, em_norm(x[0], 3.0, EM_DIMS(0), true))
F(norm_half, em_norm(x[0], 1.5, EM_DIMS(1), false))
MK(distinct34, x[0] = R_distinct(EM_SHAPE(3, 4), -0.53, 0.1))   /* distinct |x| too */
F(norm_inf, em_norm(x[0], INFINITY, EM_DIMS(1), false))
F(max_idx, em_max(x[0], 1, false, &(em_tensor *){NULL}))
F(max_all, em_max_all(x[0]))
F(min_idx, em_min(x[0], 0, true, &(em_tensor *){NULL}))
F(min_noidx, em_min(x[0], 1, false, NULL))

MK(mm_3x2, x[0] = R(EM_SHAPE(2, 3, 4), -1, 1); x[1] = R(EM_SHAPE(4, 5), -1, 1))
F(matmul, em_matmul(x[0], x[1]))
MK(mm_bcast, x[0] = R(EM_SHAPE(2, 1, 3, 4), -1, 1); x[1] = R_t(EM_SHAPE(3, 4, 2), -1, 1))
MK(mm_vec, x[0] = R(EM_SHAPE(4), -1, 1); x[1] = R_t(EM_SHAPE(4, 3), -1, 1))
F(matmul_vec_rev, em_matmul(x[1], em_narrow(x[0], 0, 0, 3)))
MK(linear3d, x[0] = R(EM_SHAPE(2, 3, 4), -1, 1); x[1] = R(EM_SHAPE(5, 4), -1, 1); x[2] = R(EM_SHAPE(5), -1, 1))
F(linear, em_linear(x[0], x[1], x[2]))
F(linear_nobias, em_linear(x[0], x[1], NULL))
MK(linear_t, x[0] = R_t(EM_SHAPE(3, 4), -1, 1); x[1] = R_t(EM_SHAPE(2, 4), -1, 1); x[2] = R(EM_SHAPE(2), -1, 1))
MK(linear_k1, x[0] = R(EM_SHAPE(3, 1), -1, 1); x[1] = R(EM_SHAPE(2, 1), -1, 1); x[2] = R(EM_SHAPE(2), -1, 1))

F(softmax, em_softmax(x[0], 1))
F(softmax0, em_softmax(x[0], 0))
F(log_softmax, em_log_softmax(x[0], -1))

MK(layer_norm, x[0] = R(EM_SHAPE(2, 3, 5), -2, 2); x[1] = R(EM_SHAPE(5), 0.5, 1.5); x[2] = R(EM_SHAPE(5), -1, 1))
F(layer_norm, em_layer_norm(x[0], x[1], x[2], 1e-5, NULL, NULL))
MK(layer_norm_plain, x[0] = R_t(EM_SHAPE(4, 6), -2, 2))
F(layer_norm_plain, em_layer_norm(x[0], NULL, NULL, 1e-5, NULL, NULL))

MK(embedding, x[0] = R(EM_SHAPE(6, 3), -1, 1); x[1] = I64(EM_SHAPE(2, 4), V64(1, 5, 1, 0, 3, 3, 3, 5)))
F(embedding, em_embedding(x[0], x[1]))
MK(x45, x[0] = R(EM_SHAPE(4, 5), -1, 1))
F(dropout, em_dropout(x[0], 0.3, 42, 3, NULL))

MK(ce, x[0] = R(EM_SHAPE(5, 4), -2, 2); x[1] = I64(EM_SHAPE(5), V64(1, 0, 3, -100, 2)))
F(ce_mean, em_cross_entropy(x[0], x[1], -100, EM_REDUCE_MEAN))
F(ce_sum, em_cross_entropy(x[0], x[1], -100, EM_REDUCE_SUM))
F(ce_none, em_cross_entropy(x[0], x[1], -100, EM_REDUCE_NONE))

MK(cat, x[0] = R(EM_SHAPE(2, 3), -1, 1); x[1] = R_t(EM_SHAPE(2, 2), -1, 1); x[2] = R(EM_SHAPE(2, 1), -1, 1);
   x[3] = R(EM_SHAPE(0), -1, 1))
F(cat, em_cat(4, (em_tensor *[]){x[0], x[3], x[1], x[2]}, 1))
F(stack, em_stack(2, (em_tensor *[]){em_narrow(x[0], 1, 0, 2), em_narrow(x[0], 1, 2, 2)}, 0))
F(stack_mixed, em_stack(2, (em_tensor *[]){x[1], em_narrow(x[0], 1, 0, 2)}, 2))

MK(index_select, x[0] = R(EM_SHAPE(4, 3), -1, 1); x[1] = I64(EM_SHAPE(3), V64(2, 0, 2)))
F(index_select, em_index_select(x[0], 0, x[1]))
F(index_select1, em_index_select(x[0], 1, em_narrow(x[1], 0, 1, 2)))
MK(gather, x[0] = R_t(EM_SHAPE(3, 4), -1, 1); x[1] = I64(EM_SHAPE(3, 2), V64(0, 3, 3, 3, 1, 2)))
F(gather, em_gather(x[0], 1, x[1]))
MK(scatter_add, x[0] = R(EM_SHAPE(3, 4), -1, 1); x[1] = I64(EM_SHAPE(2, 3), V64(0, 2, 1, 2, 2, 0));
   x[2] = R(EM_SHAPE(2, 4), -1, 1))
F(scatter_add, em_scatter_add(x[0], 0, x[1], x[2]))

MK(sdpa, x[0] = R(EM_SHAPE(2, 2, 3, 4), -1, 1); x[1] = R_t(EM_SHAPE(2, 2, 3, 4), -1, 1);
   x[2] = R(EM_SHAPE(2, 2, 3, 4), -1, 1); x[3] = em_from_data((const int32_t[]){3, 2}, EM_SHAPE(2), EM_I32))
F(sdpa_fused, em__sdpa(x[0], x[1], x[2], x[3], 0.0, 0, 0, false))
F(sdpa_fused_nomask, em__sdpa(x[0], x[1], x[2], NULL, 0.0, 0, 0, false))
F(sdpa_fused_dropout, em__sdpa(x[0], x[1], x[2], x[3], 0.3, 5, 9, false))
F(sdpa_fused_padq, em__sdpa(x[0], x[1], x[2], x[3], 0.3, 5, 9, true))
/* packed rows (tensor/op_sdpa_packed.c): sequences of 3 and 2 rows in [1,2,5,4], padded length 3 */
MK(sdpa_packed, x[0] = R(EM_SHAPE(1, 2, 5, 4), -1, 1); x[1] = R_t(EM_SHAPE(1, 2, 5, 4), -1, 1);
   x[2] = R(EM_SHAPE(1, 2, 5, 4), -1, 1); x[3] = em_from_data((const int32_t[]){3, 2}, EM_SHAPE(2), EM_I32);
   x[4] = I64(EM_SHAPE(2), V64(0, 3)))
F(sdpa_packed, em__sdpa_packed(x[0], x[1], x[2], x[3], x[4], 3, 0.3, 5, 9))

typedef struct gc_case {
    em_op op;
    const char *label;
    int n;
    void (*make)(em_tensor **x);
    em_gradcheck_fn f;
} gc_case;

#define C(OP, label, n, mk, f) {EM_OP_##OP, label, n, mk_##mk, f_##f}
#define UN_CASES(NAME, name, dtypes, cost, f, backward, ref, domain, ...) \
    C(NAME, #name ", " #domain " inputs", 1, un_##domain, name),                                  \
    C(NAME, #name ", " #domain " inputs, a transposed view", 1, un_##domain##_t, name),
static const gc_case cases[] = {
    C(VIEW, "reshape of a transposed [4,3] (copies), unsqueeze", 1, view_copy, view_copy),
    C(VIEW, "flatten, view, squeeze", 1, view_flat, view_flat),
    C(PERMUTE, "permute [2,3,4] by (2,0,1)", 1, x234, permute),
    C(NARROW, "narrow dim 2", 1, x234, narrow),
    C(SELECT, "select dim 1", 1, x234, select),
    C(EXPAND, "expand [3,1] to [2,3,4]", 1, x31, expand),
    C(COPY, "clone of a transposed view", 1, xt43, clone),
    C(ADD, "[2,3,4] + [4]", 2, add_bc, add),
    C(SUB, "[3,1] column of a transposed view - [2,1,4]", 2, add_bc2, sub),
    C(MUL, "transposed [4,3] * [3]", 2, mul_bc, mul),
    C(MUL, "[3] * transposed [4,3]", 2, mul_bc, mul_rev),
    C(DIV, "[2,3] / [3]", 2, div_bc, div),
    C(DIV, "[3] / [2,3]", 2, div_bc, div_rev),
    C(POW, "[2,3] ^ [3]", 2, pow_bc, pow),
    C(POW, "[2,3] ^ 3", 2, pow_bc, pow_scalar),
    C(MAXIMUM, "maximum [3,4], [4] (no ties)", 2, ext_bc, maximum),
    C(MINIMUM, "minimum [4], [3,4] (no ties)", 2, ext_bc, minimum),
    EM_UNARY_OPS(UN_CASES)   /* two per row of tensor/unary_ops.h */
    C(WHERE, "where([3,1], [3,4], [4])", 3, where, where),
    C(MASKED_FILL, "masked_fill transposed [3,4] with [4]", 2, masked_fill, masked_fill),
    C(SUM, "sum dims (0,2)", 1, x234, sum_dims),
    C(SUM, "sum all of a transposed view", 1, x34t, sum_all),
    C(MEAN, "mean dim 1 keepdim, transposed", 1, x34t, mean_dim),
    C(MEAN, "mean all", 1, x234, mean_all),
    C(VAR, "var dims (0,2), correction 1", 1, x234, var_dims),
    C(VAR, "var last dim, correction 0, keepdim", 1, x34t, var_last),
    C(LOGSUMEXP, "logsumexp dim 1", 1, x34t, logsumexp),
    C(LOGSUMEXP, "logsumexp dims (0,1) keepdim", 1, x34, logsumexp_all),
    C(NORM, "2-norm dim 1", 1, x34t, norm2),
    C(NORM, "1-norm all, away from 0", 1, x34away, norm1),
    C(NORM, "3-norm dim 0", 1, x34away, norm3),
    C(NORM, "1.5-norm dim 1", 1, x34away, norm_half),
    C(NORM, "inf-norm dim 1, distinct |x|", 1, distinct34, norm_inf),
    C(MAX, "max dim 1 with indices", 1, distinct34, max_idx),
    C(MAX, "max_all", 1, distinct34, max_all),
    C(MIN, "min dim 0 keepdim with indices", 1, distinct34, min_idx),
    C(MIN, "min dim 1 without indices", 1, distinct34, min_noidx),
    C(MATMUL, "[2,3,4] @ [4,5]", 2, mm_3x2, matmul),
    C(MATMUL, "[2,1,3,4] @ transposed [3,4,2] (batch broadcast)", 2, mm_bcast, matmul),
    C(MATMUL, "[4] @ transposed [4,3]", 2, mm_vec, matmul),
    C(MATMUL, "transposed [4,3] @ [3]", 2, mm_vec, matmul_vec_rev),
    C(LINEAR, "[2,3,4] x [5,4]^T + [5]", 3, linear3d, linear),
    C(LINEAR, "[2,3,4] x [5,4]^T, no bias", 2, linear3d, linear_nobias),
    C(LINEAR, "transposed [3,4] x transposed [2,4]^T + [2]", 3, linear_t, linear),
    C(LINEAR, "in_features 1: [3,1] x [2,1]^T + [2]", 3, linear_k1, linear),
    C(SOFTMAX, "softmax dim 1", 1, x34, softmax),
    C(SOFTMAX, "softmax dim 0 of a transposed view", 1, x34t, softmax0),
    C(LOG_SOFTMAX, "log_softmax dim -1", 1, x34t, log_softmax),
    C(LAYER_NORM, "layer_norm [2,3,5] with weight and bias", 3, layer_norm, layer_norm),
    C(LAYER_NORM, "layer_norm of a transposed [4,6], no affine", 1, layer_norm_plain, layer_norm_plain),
    C(EMBEDDING, "embedding [6,3] with repeated ids [2,4]", 2, embedding, embedding),
    C(DROPOUT, "dropout p=0.3, fixed seed/offset", 1, x45, dropout),
    C(CROSS_ENTROPY, "cross_entropy mean, one ignored row", 2, ce, ce_mean),
    C(CROSS_ENTROPY, "cross_entropy sum", 2, ce, ce_sum),
    C(CROSS_ENTROPY, "cross_entropy none", 2, ce, ce_none),
    C(SDPA, "fused sdpa [2,2,3,4], transposed k, key lengths (3, 2)", 4, sdpa, sdpa_fused),
    C(SDPA, "fused sdpa without a mask", 3, sdpa, sdpa_fused_nomask),
    C(SDPA, "fused sdpa, key lengths (3, 2), dropout p=0.3", 4, sdpa, sdpa_fused_dropout),
    C(SDPA, "fused sdpa, dropout, padding queries skipped", 4, sdpa, sdpa_fused_padq),
    C(SDPA, "fused sdpa over packed rows (3 and 2 of [1,2,5,4]), dropout p=0.3", 5, sdpa_packed, sdpa_packed),
    C(CAT, "cat dim 1 with a transposed input and a legacy [0]", 4, cat, cat),
    C(CAT, "stack dim 0", 1, x34, stack),
    C(CAT, "stack dim 2, mixed layouts", 4, cat, stack_mixed),
    C(INDEX_SELECT, "index_select dim 0, repeated index", 2, index_select, index_select),
    C(INDEX_SELECT, "index_select dim 1", 2, index_select, index_select1),
    C(GATHER, "gather dim 1 of a transposed view", 2, gather, gather),
    C(SCATTER_ADD, "scatter_add dim 0, src larger than index", 3, scatter_add, scatter_add),
};
#define N_CASES (int)(sizeof cases / sizeof *cases)

/* Whether the graph behind t holds a node of op. */
static bool graph_has(const em_tensor *t, em_op op)
{
    if (!t->ag || !t->ag->grad_fn) return false;
    em_node *stack[512], *seen[512];
    int sp = 0, ns = 0;
    stack[sp++] = t->ag->grad_fn;
    while (sp) {
        em_node *nd = stack[--sp];
        if (nd->op == (int)op) return true;
        for (int i = 0; i < nd->n_in; i++) {
            em_node *c = nd->next[i].node;
            bool known = false;
            for (int j = 0; j < ns && !known; j++) known = seen[j] == c;
            if (!c || known || sp == 512 || ns == 512) continue;
            seen[ns++] = c;
            stack[sp++] = c;
        }
    }
    return false;
}

/* One iteration per op of the table. */
START_TEST(gradcheck_every_op)
{
    em_op op = (em_op)_i;
    const em_op_def *def = &em_op_table[op];
    const em_rule *rule = &em_rules[op];
    ck_assert_msg(def->differentiable == (rule->backward != NULL), "op %s: differentiable is %d but it %s a rule",
                  def->name, def->differentiable, rule->backward ? "has" : "lacks");
    int found = 0;
    int64_t live = tu_live_bytes();
    for (int c = 0; c < N_CASES; c++) {
        if (cases[c].op != op) continue;
        found++;
        EM_SCOPE {
            em_tensor *x[6] = {0};
            cases[c].make(x);
            em_tensor *out = cases[c].f(cases[c].n, x, NULL);
            ck_assert_msg(out && graph_has(out, op), "op %s, case \"%s\": the graph has no %s node", def->name,
                          cases[c].label, def->name);
            char report[512];
            bool ok = em_gradcheck(cases[c].f, cases[c].n, x, NULL, rule->gc_eps, rule->gc_atol, rule->gc_rtol,
                                   report, sizeof report);
            ck_assert_msg(ok, "op %s, case \"%s\": gradcheck failed: %s", def->name, cases[c].label, report);
        }
    }
    ck_assert_msg(tu_live_bytes() == live, "op %s: %lld bytes still live after its cases' scopes closed", def->name,
                  (long long)(tu_live_bytes() - live));
    ck_assert_msg(!def->differentiable || found > 0, "op %s is differentiable but has no gradcheck case",
                  def->name);
}
END_TEST

/* ---- conventions at kinks, padding_idx ------------------------------------------------------ */
static em_tensor *f_cube(int n, em_tensor **in, void *user)
{
    (void)n, (void)user;
    return em_mul(em_mul(in[0], in[0]), in[0]);
}

/* 0 for eps/atol/rtol means the defaults (it used to give "numeric -nan");
 * a float32 input is refused with a reason instead of failing noisily. */
START_TEST(defaults_and_f64_only)
{
    char report[256];
    EM_SCOPE {
        em_tensor *x = em_requires_grad_(em_randn(EM_SHAPE(5), EM_F64, EM_CPU), true);
        ck_assert_msg(em_gradcheck(f_cube, 1, &x, NULL, 0, 0, 0, report, sizeof report), "%s", report);
        em_tensor *y = em_requires_grad_(em_randn(EM_SHAPE(5), EM_F32, EM_CPU), true);
        ck_assert(!em_gradcheck(f_cube, 1, &y, NULL, 0, 0, 0, report, sizeof report));
        ck_assert_msg(strstr(report, "input 0 is float32: gradcheck needs float64 inputs"), "%s", report);
    }
}
END_TEST

START_TEST(maximum_ties_split_half)
{
    EM_SCOPE {
        em_tensor *a = grad_leaf(em_from_data((double[]){1, 2, 3}, EM_SHAPE(3), EM_F64));
        em_tensor *b = grad_leaf(em_from_data((double[]){1, 5, 0}, EM_SHAPE(3), EM_F64));
        em_backward(em_sum(em_maximum(a, b), 0, NULL, false));
        double ga[] = {0.5, 0, 1}, gb[] = {0.5, 1, 0};
        for (int64_t i = 0; i < 3; i++) {
            ck_assert_double_eq(em_get(em_grad(a), &i), ga[i]);
            ck_assert_double_eq(em_get(em_grad(b), &i), gb[i]);
        }
        /* relu'(0) = 0 and abs'(0) = 0, as torch */
        em_tensor *z = grad_leaf(em_zeros(EM_SHAPE(2), EM_F64, EM_CPU));
        em_backward(em_sum(em_add(em_relu(z), em_abs(z)), 0, NULL, false));
        ck_assert_double_eq(em_get(em_grad(z), (int64_t[]){0}), 0.0);
    }
}
END_TEST

START_TEST(embedding_padding_rows_get_no_gradient)
{
    EM_SCOPE {
        em_tensor *w = R(EM_SHAPE(5, 3), -1, 1);
        em_tensor *ids = I64(EM_SHAPE(2, 3), V64(2, 0, 2, 4, 0, 0));
        em_tensor *out = em__embedding_ex(w, ids, 2);
        ck_assert_double_eq(em_get(out, (int64_t[]){0, 0, 1}), em_get(w, (int64_t[]){2, 1}));
        em_backward(em_sum(out, 0, NULL, false));
        double count[5] = {3, 0, 0, 0, 1};   /* row 2 is padding: 0 although it appears twice */
        for (int64_t v = 0; v < 5; v++)
            for (int64_t d = 0; d < 3; d++) ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){v, d}), count[v]);
    }
}
END_TEST

/* ---- the same graph twice gives bit-identical gradients ---------------------------------------- */
static void mlp_grads(double *out, int64_t *n_out)
{
    EM_SCOPE {
        uint64_t s = 99;
        em_tensor *x = tu_rand_tensor(EM_SHAPE(64, 96), EM_F32, -1, 1, s++, NULL);
        em_tensor *w1 = grad_leaf(tu_rand_tensor(EM_SHAPE(96, 256), EM_F32, -0.1, 0.1, s++, NULL));
        em_tensor *b1 = grad_leaf(tu_rand_tensor(EM_SHAPE(256), EM_F32, -0.1, 0.1, s++, NULL));
        em_tensor *gam = grad_leaf(tu_rand_tensor(EM_SHAPE(256), EM_F32, 0.5, 1.5, s++, NULL));
        em_tensor *bet = grad_leaf(tu_rand_tensor(EM_SHAPE(256), EM_F32, -0.1, 0.1, s++, NULL));
        em_tensor *w2 = grad_leaf(tu_rand_tensor(EM_SHAPE(256, 10), EM_F32, -0.1, 0.1, s++, NULL));
        int64_t tg[64];
        for (int i = 0; i < 64; i++) tg[i] = (i * 7) % 10;
        em_tensor *target = I64(EM_SHAPE(64), tg);
        em_tensor *h = em_gelu(em_add(em_matmul(x, w1), b1));
        h = em_layer_norm(h, gam, bet, 1e-5, NULL, NULL);
        h = em_dropout(h, 0.1, 5, 0, NULL);
        em_tensor *logits = em_matmul(h, w2);
        em_tensor *loss = em_add(em_cross_entropy(logits, target, -100, EM_REDUCE_MEAN),
                                 em_mean(em_softmax(logits, -1), EM_DIMS(0, 1), false));
        em_backward(loss);
        em_tensor *ps[] = {w1, b1, gam, bet, w2};
        int64_t k = 0;
        for (int i = 0; i < 5; i++) {
            double *g = tu_to_doubles(em_grad(ps[i]));
            memcpy(out + k, g, sizeof(double) * (size_t)em_numel(ps[i]));
            k += em_numel(ps[i]);
            free(g);
        }
        *n_out = k;
    }
}

START_TEST(same_graph_twice_gives_identical_gradients)
{
    int64_t cap = 96 * 256 + 3 * 256 + 2560, n1 = 0, n2 = 0;
    double *g1 = malloc(sizeof(double) * (size_t)cap), *g2 = malloc(sizeof(double) * (size_t)cap);
    mlp_grads(g1, &n1);
    mlp_grads(g2, &n2);
    ck_assert_int_eq(n1, cap);
    ck_assert_int_eq(n1, n2);
    ck_assert_msg(memcmp(g1, g2, sizeof(double) * (size_t)n1) == 0, "gradients differ between two identical runs");
    double norm = 0;
    for (int64_t i = 0; i < n1; i++) norm += g1[i] * g1[i];
    ck_assert(norm > 0 && isfinite(norm));
    free(g1);
    free(g2);
}
END_TEST

enum { SB = 2, SH = 2, SS = 3, SD = 4 };   /* attention test sizes */

/* ---- the unary _BWD kernels against their f64 reference derivative ------------------------------ */
typedef struct bwd_case {
    em_op op;
    const char *name;
    double (*dref)(double x);
    double lo, hi;
} bwd_case;
#define BWD_DREF(NAME, name, df, dref, ...) static double dref_##name(double x) { return dref; }
#define BWD_CASE(NAME, name, df, dref, values, parity) {EM_OP_##NAME, #name, dref_##name, BWD_KEEP values},
#define BWD_KEEP(...) __VA_ARGS__
EM_UNARY_BWD_OPS(BWD_DREF)
static const bwd_case bwd_cases[] = {EM_UNARY_BWD_OPS(BWD_CASE)};
#define N_BWD_CASES (int)(sizeof bwd_cases / sizeof *bwd_cases)

static const em_dtype grad_dtypes[] = {EM_F32, EM_F64, EM_F16, EM_BF16};

/* _i: dtype (low 2 bits), contiguous/transposed x (bit 2), the case (the rest); x
 * over the row's value range and a few special values */
START_TEST(unary_backward_kernels_match_reference)
{
    em_dtype dt = grad_dtypes[_i & 3];
    bool transposed = _i >> 2 & 1;
    const bwd_case *bc = &bwd_cases[_i >> 3];
    double rtol = dt == EM_F64 ? 1e-12 : dt == EM_F32 ? 2e-6 : dt == EM_F16 ? 2e-3 : 1.6e-2;
    double atol = dt == EM_F64 ? 1e-14 : dt == EM_F32 ? 1e-6 : 1e-3;
    EM_SCOPE {
        int64_t r = 64, c = 300;   /* 19200 elements: several threads */
        em_tensor *x = tu_rand_tensor(EM_SHAPE(transposed ? c : r, transposed ? r : c), dt, bc->lo, bc->hi, 3 + _i, NULL);
        em_tensor *dy = tu_rand_tensor(EM_SHAPE(r, c), dt, -2, 2, 50 + _i, NULL);
        if (transposed) x = em_transpose(x, 0, 1);
        const double special[] = {0.0, -0.0, 1e-30, -1e-30, 1e-7, 10, -10, 20, -20, 0.5};
        for (int64_t j = 0; j < 10; j++) em_set(x, (int64_t[]){1, j}, special[j]);
        em_tensor *dx = em__unary_backward(bc->op, x, dy);
        ck_assert_int_eq(dx->dtype, dt);
        double *xv = tu_to_doubles(x), *gv = tu_to_doubles(dy), *got = tu_to_doubles(dx);
        double *ref = malloc(sizeof(double) * (size_t)(r * c));
        for (int64_t e = 0; e < r * c; e++) ref[e] = gv[e] * bc->dref(xv[e]);
        double ratio = tu_close_ratio(got, ref, r * c, rtol, atol);
        ck_assert_msg(ratio <= 1.0, "%s %s_backward%s: not close, ratio %g", em_dtype_name(dt), bc->name,
                      transposed ? " (transposed x)" : "", ratio);
        free(xv), free(gv), free(got), free(ref);
        /* empty tensors are fine */
        em_tensor *ex = em_empty(EM_SHAPE(0, 5), dt, EM_CPU);
        ck_assert_int_eq(em_numel(em__unary_backward(bc->op, ex, ex)), 0);
    }
}
END_TEST

START_TEST(unary_backward_rejects_mixed_dtypes)
{
    tu_expect_misuse("em_gelu_backward: x and dy must share a floating-point dtype");
    em__unary_backward(EM_OP_GELU, em_zeros(EM_SHAPE(3), EM_F32, EM_CPU), em_zeros(EM_SHAPE(3), EM_F64, EM_CPU));
}
END_TEST

START_TEST(unary_backward_rejects_shape_mismatch)
{
    tu_expect_misuse("em_gelu_tanh_backward: x [2,3] and dy [3,2] differ in shape");
    em__unary_backward(EM_OP_GELU_TANH, em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU),
                       em_zeros(EM_SHAPE(3, 2), EM_F32, EM_CPU));
}
END_TEST

START_TEST(unary_backward_rejects_an_op_without_a_kernel)
{
    tu_expect_misuse("em__unary_backward: exp has no _BWD kernel");
    em__unary_backward(EM_OP_EXP, em_zeros(EM_SHAPE(3), EM_F32, EM_CPU), em_zeros(EM_SHAPE(3), EM_F32, EM_CPU));
}
END_TEST

START_TEST(sdpa_rejects_bad_mask)
{
    tu_expect_misuse("mask [2,1,1,4] does not broadcast to the scores [2,2,3,3]");
    em_tensor *q = em_zeros(EM_SHAPE(SB, SH, SS, SD), EM_F32, EM_CPU);
    em_scaled_dot_product_attention(q, q, q, em_zeros(EM_SHAPE(2, 1, 1, 4), EM_BOOL, EM_CPU), 0.0, 0, 0);
}
END_TEST

/* ---- scaled dot-product attention ----------------------------------------------------------------- */
START_TEST(sdpa_forward_matches_loops)
{
    EM_SCOPE {
        em_tensor *q = R(EM_SHAPE(SB, SH, SS, SD), -1, 1), *k = R(EM_SHAPE(SB, SH, SS, SD), -1, 1);
        em_tensor *v = R(EM_SHAPE(SB, SH, SS, SD), -1, 1);
        /* batch 1: the last key is padding; batch 0: every key is masked (uniform weights, as HF) */
        uint8_t keep[SB][SS] = {{0, 0, 0}, {1, 1, 0}};
        em_tensor *mask = B(EM_SHAPE(SB, 1, 1, SS), &keep[0][0]);
        em_tensor *out = em_scaled_dot_product_attention(q, k, v, mask, 0.0, 0, 0);
        ck_assert_int_eq(out->ndim, 4);
        for (int64_t b = 0; b < SB; b++)
            for (int64_t h = 0; h < SH; h++)
                for (int64_t i = 0; i < SS; i++) {
                    double s[SS], mx = -INFINITY, tot = 0;
                    for (int64_t j = 0; j < SS; j++) {
                        double dot = 0;
                        for (int64_t d = 0; d < SD; d++)
                            dot += em_get(q, (int64_t[]){b, h, i, d}) * em_get(k, (int64_t[]){b, h, j, d});
                        s[j] = keep[b][j] ? dot / sqrt((double)SD) : -1.7976931348623157e308;
                        mx = s[j] > mx ? s[j] : mx;
                    }
                    for (int64_t j = 0; j < SS; j++) tot += (s[j] = exp(s[j] - mx));
                    for (int64_t d = 0; d < SD; d++) {
                        double ref = 0;
                        for (int64_t j = 0; j < SS; j++) ref += s[j] / tot * em_get(v, (int64_t[]){b, h, j, d});
                        double got = em_get(out, (int64_t[]){b, h, i, d});
                        ck_assert_msg(fabs(got - ref) <= 1e-12 + 1e-12 * fabs(ref), "out[%lld,%lld,%lld,%lld] = %.17g, "
                                      "expected %.17g", (long long)b, (long long)h, (long long)i, (long long)d, got, ref);
                    }
                }
    }
}
END_TEST

static em_tensor *f_sdpa(int n, em_tensor **x, void *u)
{
    (void)n, (void)u;
    return em_scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0.2, 7, 11);
}

START_TEST(sdpa_gradcheck_with_padding_mask_and_dropout)
{
    EM_SCOPE {
        em_tensor *x[4] = {R(EM_SHAPE(SB, SH, SS, SD), -1, 1), R(EM_SHAPE(SB, SH, SS, SD), -1, 1),
                           R_t(EM_SHAPE(SB, SH, SS, SD), -1, 1),
                           B(EM_SHAPE(SB, 1, 1, SS), VB(1, 1, 1, 1, 0, 1))};
        char report[512];
        const em_rule *r = &em_rules[EM_OP_SOFTMAX];
        bool ok = em_gradcheck(f_sdpa, 4, x, NULL, r->gc_eps, r->gc_atol, r->gc_rtol, report, sizeof report);
        ck_assert_msg(ok, "sdpa gradcheck: %s", report);
        /* the masked key gets no gradient */
        em_tensor *out = f_sdpa(4, x, NULL);
        for (int i = 0; i < 3; i++) em_set_grad(x[i], NULL);
        em_backward(em_sum(out, 0, NULL, false));
        for (int64_t d = 0; d < SD; d++) {
            ck_assert_double_eq(em_get(em_grad(x[1]), (int64_t[]){1, 0, 1, d}), 0.0);
            ck_assert_double_eq(em_get(em_grad(x[2]), (int64_t[]){1, 1, 1, d}), 0.0);
        }
    }
}
END_TEST

/* The fused CPU kernel (em__sdpa, tensor/cpu/k_sdpa.c) against the composed ops written out here:
 * the same dropout mask, so forward and every gradient agree to rounding (f64), and to f32
 * rounding in f32. The public op takes the fused path for a right-padding mask: its result is
 * em__sdpa's, bit for bit, and it does not depend on the thread count. */
/* max |a - b| over max |b| (normwise), via doubles */
static double max_rel_err(em_tensor *a, em_tensor *b)
{
    ck_assert_int_eq(em_numel(a), em_numel(b));
    double *x = tu_to_doubles(a), *y = tu_to_doubles(b), num = 0, den = 0;
    for (int64_t i = 0; i < em_numel(a); i++) {
        num = fmax(num, fabs(x[i] - y[i]));
        den = fmax(den, fabs(y[i]));
    }
    free(x), free(y);
    return num / (den > 0 ? den : 1);
}

static em_tensor *composed_by_hand(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask, double p, uint64_t seed,
                                   uint64_t off)
{
    em_tensor *s = em_mul_scalar(em_matmul(q, em_transpose(k, 2, 3)), 1.0 / sqrt((double)q->shape[3]));
    s = em_masked_fill(s, em_eq(mask, em_scalar(0, EM_BOOL, EM_CPU)), q->dtype == EM_F64 ? -1.7976931348623157e308 : -3.4028234663852886e38);
    return em_matmul(em_dropout(em_softmax(s, -1), p, seed, off, NULL), v);
}

START_TEST(sdpa_fused_cpu_matches_composed_with_dropout)
{
    const em_dtype dts[2] = {EM_F64, EM_F32};
    for (int di = 0; di < 2; di++) EM_SCOPE {
            em_dtype dt = dts[di];
            const int64_t Bn = 2, Hn = 3, Sq = 5, Sk = 7, Dn = 8;
            em_tensor *x[3], *y[3];
            for (int i = 0; i < 3; i++) {
                int64_t s = i == 0 ? Sq : Sk;
                /* [B,S,H,D] storage seen as [B,H,S,D]: the layout of the model's head split */
                em_tensor *base = em_to_dtype(R(EM_SHAPE(Bn, s, Hn, Dn), -1, 1), dt);
                x[i] = em_requires_grad_(em_detach(em_clone(base)), true);
                y[i] = em_requires_grad_(em_detach(em_clone(base)), true);
            }
            em_tensor *xq = em_transpose(x[0], 1, 2), *xk = em_transpose(x[1], 1, 2), *xv = em_transpose(x[2], 1, 2);
            em_tensor *yq = em_transpose(y[0], 1, 2), *yk = em_transpose(y[1], 1, 2), *yv = em_transpose(y[2], 1, 2);
            uint8_t keep[2][7] = {{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0, 0}};
            em_tensor *mask = B(EM_SHAPE(Bn, 1, 1, Sk), &keep[0][0]);
            em_tensor *lens = em_from_data((const int32_t[]){7, 3}, EM_SHAPE(2), EM_I32);
            em_tensor *fused = em__sdpa(xq, xk, xv, lens, 0.25, 42, 1000, false);
            em_tensor *ref = composed_by_hand(yq, yk, yv, mask, 0.25, 42, 1000);
            ck_assert_int_eq(fused->dtype, dt);
            double tol = dt == EM_F64 ? 1e-13 : 2e-6;
            double e = max_rel_err(fused, ref);
            ck_assert_msg(e <= tol, "%s: fused vs composed forward: %g", em_dtype_name(dt), e);
            /* the same elements are dropped: exact zeros of a column of v show where */
            em_tensor *w = em_to_dtype(R(EM_SHAPE(Bn, Hn, Sq, Dn), -1, 1), dt);
            em_backward(em_sum(em_mul(fused, w), 0, NULL, false));
            em_backward(em_sum(em_mul(ref, w), 0, NULL, false));
            const char *names[3] = {"q", "k", "v"};
            for (int i = 0; i < 3; i++) {
                double ge = max_rel_err(em_grad(x[i]), em_grad(y[i]));
                ck_assert_msg(ge <= (dt == EM_F64 ? 1e-12 : 1e-5), "%s: d%s fused vs composed: %g", em_dtype_name(dt),
                              names[i], ge);
            }
            /* padded keys get no gradient */
            for (int64_t j = 3; j < Sk; j++)
                for (int64_t h = 0; h < Hn; h++)
                    for (int64_t d = 0; d < Dn; d++) {
                        ck_assert_double_eq(em_get(em_grad(x[1]), (int64_t[]){1, j, h, d}), 0.0);
                        ck_assert_double_eq(em_get(em_grad(x[2]), (int64_t[]){1, j, h, d}), 0.0);
                    }
            /* the public op routes a right-padding mask to the fused kernel; threads do not matter */
            em_tensor *pub = em_scaled_dot_product_attention(xq, xk, xv, mask, 0.25, 42, 1000);
            ck_assert(tu_bytes_equal(pub, fused));
            int nt = em_num_threads();
            em_set_num_threads(1);
            em_tensor *one = em__sdpa(xq, xk, xv, lens, 0.25, 42, 1000, false);
            em_set_num_threads(nt);
            ck_assert(tu_bytes_equal(one, fused));
            /* pad_queries: the real query rows are the same bits; padding rows (batch 1, i >= 3) are 0 */
            em_tensor *pq = em__sdpa(xq, xk, xv, lens, 0.25, 42, 1000, true);
            for (int64_t h = 0; h < Hn; h++)
                for (int64_t i = 0; i < Sq; i++)
                    for (int64_t d = 0; d < Dn; d++) {
                        double got = em_get(pq, (int64_t[]){1, h, i, d}), want = em_get(fused, (int64_t[]){1, h, i, d});
                        ck_assert_msg(i < 3 ? got == want : got == 0.0, "pad_queries [1,%lld,%lld,%lld]: %g vs %g",
                                      (long long)h, (long long)i, (long long)d, got, want);
                    }
            ck_assert(tu_bytes_equal(em_select(pq, 0, 0), em_select(fused, 0, 0)));
            /* bf16: within bf16 rounding of the f32 result */
            if (dt == EM_F32) {
                /* the f32-math kernel (k_sdpa.c) for bf16 inputs, the dot kernels off */
                bool dot_was = em__sdpa_amx_set(false);
                em_tensor *h = em__sdpa(em_to_dtype(xq, EM_BF16), em_to_dtype(xk, EM_BF16), em_to_dtype(xv, EM_BF16),
                                        lens, 0.25, 42, 1000, false);
                em__sdpa_amx_set(dot_was);
                em_tensor *hr = em__sdpa(em_to_dtype(em_to_dtype(xq, EM_BF16), EM_F32),
                                         em_to_dtype(em_to_dtype(xk, EM_BF16), EM_F32),
                                         em_to_dtype(em_to_dtype(xv, EM_BF16), EM_F32), lens, 0.25, 42, 1000, false);
                ck_assert_int_eq(h->dtype, EM_BF16);
                /* f32 compute, one rounding; bf16 inputs take fused multiply-adds in the
                 * kernel's small GEMMs (f32 inputs do not), and on these inputs that one
                 * rounding to bf16 still lands on the f32 path's bits */
                ck_assert(tu_bytes_equal(h, em_to_dtype(hr, EM_BF16)));
                /* the AMX kernels (k_sdpa_amx.c, where the target and kernel allow): P and
                 * dS rounded to bf16 before their products, as the composed bf16 path
                 * does, so within a few bf16 roundings (2^-8 each) of the f32 result */
                em_tensor *bq = em_requires_grad_(em_to_dtype(em_detach(xq), EM_BF16), true);
                em_tensor *bk = em_requires_grad_(em_to_dtype(em_detach(xk), EM_BF16), true);
                em_tensor *bv = em_requires_grad_(em_to_dtype(em_detach(xv), EM_BF16), true);
                em_tensor *fq = em_requires_grad_(em_to_dtype(em_detach(bq), EM_F32), true);
                em_tensor *fk = em_requires_grad_(em_to_dtype(em_detach(bk), EM_F32), true);
                em_tensor *fv = em_requires_grad_(em_to_dtype(em_detach(bv), EM_F32), true);
                em_tensor *hd = em__sdpa(bq, bk, bv, lens, 0.25, 42, 1000, false);
                em_tensor *hf = em__sdpa(fq, fk, fv, lens, 0.25, 42, 1000, false);
                double he = max_rel_err(hd, hf);
                ck_assert_msg(he <= 8e-3, "bf16 fused forward vs f32: %g", he);
                em_tensor *wb = em_to_dtype(w, EM_BF16);
                em_backward(em_sum(em_mul(hd, wb), 0, NULL, false));
                em_backward(em_sum(em_mul(hf, em_to_dtype(wb, EM_F32)), 0, NULL, false));
                em_tensor *bx[3] = {bq, bk, bv}, *fx[3] = {fq, fk, fv};
                for (int i = 0; i < 3; i++) {
                    double ge = max_rel_err(em_grad(bx[i]), em_grad(fx[i]));
                    ck_assert_msg(ge <= 8e-3, "bf16 fused d%s vs f32: %g", names[i], ge);
                }
            }
        }
}
END_TEST

/* The CPU kernels write their outputs (o; dq, dk, dv) as [B,H,S,D] views of
 * [B,S,H,D] storage, so that merging the heads back is a view (em__sdpa_result),
 * and read dout with any strides. Every layout gives the same bits: a strided
 * dout and [B,S,H,D] gradients against contiguous ones, NaN-filled first so
 * that an element left unwritten (a padding row's zeros included) shows. f32,
 * and bf16 on both kernels (AMX where it runs, the f32-math one). */
START_TEST(sdpa_cpu_layouts_give_the_same_bits)
{
    const int64_t Bn = 2, Hn = 3, Sq = 69, Sk = 40, Dn = 40;
    const int64_t qs[4] = {Bn, Hn, Sq, Dn}, ks[4] = {Bn, Hn, Sk, Dn}, ls[4] = {Bn, Hn, Sq, 1};
    for (int variant = 0; variant < 3; variant++) EM_SCOPE {
            em_dtype dt = variant == 0 ? EM_F32 : EM_BF16;
            bool amx_was = em__sdpa_amx_set(variant != 2);
            em_tensor *q = em_transpose(em_to_dtype(R(EM_SHAPE(Bn, Sq, Hn, Dn), -1, 1), dt), 1, 2);
            em_tensor *k = em_transpose(em_to_dtype(R(EM_SHAPE(Bn, Sk, Hn, Dn), -1, 1), dt), 1, 2);
            em_tensor *v = em_transpose(em_to_dtype(R(EM_SHAPE(Bn, Sk, Hn, Dn), -1, 1), dt), 1, 2);
            em_tensor *lens = em_from_data((const int32_t[]){40, 29}, EM_SHAPE(2), EM_I32);
            em_tensor *o = em__sdpa(q, k, v, lens, 0.1, 9, 77, true);
            ck_assert_msg(em_is_contiguous(em_permute(o, (const int[]){0, 2, 1, 3})),
                          "%s: the output is not [B,S,H,D] in memory", em_dtype_name(dt));
            ck_assert(tu_bytes_equal(em_contiguous(o), em_contiguous(em__sdpa(q, k, v, lens, 0.1, 9, 77, true))));
            em_tensor *g_strided = em_transpose(em_to_dtype(R(EM_SHAPE(Bn, Sq, Hn, Dn), -1, 1), dt), 1, 2);
            em_tensor *g_contig = em_contiguous(g_strided);
            em_tensor *lse = em_empty(4, ls, EM_F32, EM_CPU);
            em_tensor *a[3], *c[3];
            const int64_t *shp[3] = {qs, ks, ks};
            for (int i = 0; i < 3; i++) {
                a[i] = em__sdpa_result(shp[i], dt, EM_CPU);
                c[i] = em_empty(4, shp[i], dt, EM_CPU);
                em_fill_(a[i], NAN);
                em_fill_(c[i], NAN);
            }
            ck_assert_int_eq(em__sdpa_backward(a[0], a[1], a[2], q, k, v, lens, 0.125, o, lse, g_strided, 0.1, 9, 77,
                                               true), EM_OK);
            ck_assert_int_eq(em__sdpa_backward(c[0], c[1], c[2], q, k, v, lens, 0.125, o, lse, g_contig, 0.1, 9, 77,
                                               true), EM_OK);
            for (int i = 0; i < 3; i++) {
                ck_assert_msg(tu_bytes_equal(em_contiguous(a[i]), c[i]), "%s variant %d: gradient %d differs by layout",
                              em_dtype_name(dt), variant, i);
                ck_assert_msg(em_item(em_sum(em_to_dtype(em_ne(c[i], c[i]), EM_F32), 0, NULL, false)) == 0, "gradient %d: unwritten", i);
            }
            em__sdpa_amx_set(amx_was);
        }
}
END_TEST

/* The bf16 AMX kernels against the f32-math kernel on the same bf16 inputs, on
 * shapes that exercise their padding: two query blocks, the second of odd
 * length (7, padded to 32); 40 keys (64 padded); head dim 40 (64 padded); a
 * key padding of 29 in batch 1; dropout. Where AMX (or the kernel's
 * permission for it) is missing both paths are the f32-math kernel: the test
 * says so on stdout instead of claiming a comparison it did not make. */
START_TEST(sdpa_bf16_amx_matches_f32_math)
{
    EM_SCOPE {
        int64_t Bn = 2, Hn = 2, Sq = 71, Sk = 40, Dn = 40;
        em_tensor *lens = em_from_data((const int32_t[]){40, 29}, EM_SHAPE(2), EM_I32);
        em_tensor *x[3], *y[3], *out[2];
        for (int i = 0; i < 3; i++) {
            em_tensor *r = em_detach(em_to_dtype(R(EM_SHAPE(Bn, Hn, i ? Sk : Sq, Dn), -2, 2), EM_BF16));
            y[i] = em_requires_grad_(em_clone(r), true);
            x[i] = em_requires_grad_(r, true);
        }
        em_tensor *w = em_to_dtype(R(EM_SHAPE(Bn, Hn, Sq, Dn), -1, 1), EM_BF16);
        if (!em__sdpa_amx_ok(x[0]))
            printf("sdpa_bf16_amx_matches_f32_math: no AMX here (or no permission): only the f32-math kernel ran\n");
        for (int path = 0; path < 2; path++) {
            bool was = em__sdpa_amx_set(path == 0);
            em_tensor **v = path ? y : x;
            out[path] = em__sdpa(v[0], v[1], v[2], lens, 0.15, 7, 99, false);
            em_backward(em_sum(em_mul(out[path], w), 0, NULL, false));
            em__sdpa_amx_set(was);
        }
        double e = max_rel_err(out[0], out[1]);
        ck_assert_msg(e <= 8e-3, "forward: amx vs f32-math %g", e);
        for (int i = 0; i < 3; i++) {
            double ge = max_rel_err(em_grad(x[i]), em_grad(y[i]));
            ck_assert_msg(ge <= 8e-3, "gradient %d: amx vs f32-math %g", i, ge);
        }
        /* padded keys of batch 1 get no gradient on either path */
        for (int64_t j = 29; j < Sk; j++)
            ck_assert_double_eq(em_get(em_grad(x[1]), (int64_t[]){1, 1, j, 3}), 0.0);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gradcheck");
    TCase *tc = tcase_create("ops");
    tcase_add_loop_test(tc, gradcheck_every_op, 0, EM_NUM_OPS);
    tcase_add_test(tc, maximum_ties_split_half);
    tcase_add_test(tc, sdpa_bf16_amx_matches_f32_math);
    tcase_add_test(tc, defaults_and_f64_only);
    tcase_add_test(tc, embedding_padding_rows_get_no_gradient);
    tcase_add_test(tc, same_graph_twice_gives_identical_gradients);
    tcase_add_test(tc, sdpa_forward_matches_loops);
    tcase_add_test(tc, sdpa_gradcheck_with_padding_mask_and_dropout);
    tcase_add_test(tc, sdpa_fused_cpu_matches_composed_with_dropout);
    tcase_add_test(tc, sdpa_cpu_layouts_give_the_same_bits);
    tcase_add_loop_test(tc, unary_backward_kernels_match_reference, 0, 8 * N_BWD_CASES);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("misuse");
    tu_add_misuse_test(tm, unary_backward_rejects_mixed_dtypes);
    tu_add_misuse_test(tm, unary_backward_rejects_shape_mismatch);
    tu_add_misuse_test(tm, unary_backward_rejects_an_op_without_a_kernel);
    tu_add_misuse_test(tm, sdpa_rejects_bad_mask);
    suite_add_tcase(s, tm);
    return tu_run_suite(s);
}
