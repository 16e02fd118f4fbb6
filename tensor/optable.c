/* ember — the op table: one row per op (DESIGN.md §2 "Ops"). */
#include "tensor/ops.h"

#include <assert.h>
#include <stddef.h>

#define ROW(op, nm, ni, no, c, d) [EM_OP_##op] = {.name = nm, .n_in = ni, .n_out = no, .cls = c, .differentiable = d}
#define UNARY_ROW(NAME, name, ...) ROW(NAME, #name, 1, 1, EM_CLASS_UNARY, true),
#define UNARY_BWD_ROW(NAME, name, ...) ROW(NAME##_BWD, #name "_backward", 3, 1, EM_CLASS_NN, false),

const em_op_def em_op_table[EM_NUM_OPS] = {
    ROW(VIEW, "view", 1, 1, EM_CLASS_VIEW, true),
    ROW(PERMUTE, "permute", 1, 1, EM_CLASS_VIEW, true),
    ROW(NARROW, "narrow", 1, 1, EM_CLASS_VIEW, true),
    ROW(SELECT, "select", 1, 1, EM_CLASS_VIEW, true),
    ROW(EXPAND, "expand", 1, 1, EM_CLASS_VIEW, true),
    ROW(FILL, "fill", 0, 1, EM_CLASS_CREATE, false),
    ROW(ARANGE, "arange", 0, 1, EM_CLASS_CREATE, false),
    ROW(EYE, "eye", 0, 1, EM_CLASS_CREATE, false),
    ROW(COPY, "copy", 1, 1, EM_CLASS_COPY, true),
    ROW(ADD, "add", 2, 1, EM_CLASS_BINARY, true),
    ROW(SUB, "sub", 2, 1, EM_CLASS_BINARY, true),
    ROW(MUL, "mul", 2, 1, EM_CLASS_BINARY, true),
    ROW(DIV, "div", 2, 1, EM_CLASS_BINARY, true),
    ROW(POW, "pow", 2, 1, EM_CLASS_BINARY, true),
    ROW(MAXIMUM, "maximum", 2, 1, EM_CLASS_BINARY, true),
    ROW(MINIMUM, "minimum", 2, 1, EM_CLASS_BINARY, true),
    ROW(EQ, "eq", 2, 1, EM_CLASS_COMPARE, false),
    ROW(NE, "ne", 2, 1, EM_CLASS_COMPARE, false),
    ROW(LT, "lt", 2, 1, EM_CLASS_COMPARE, false),
    ROW(LE, "le", 2, 1, EM_CLASS_COMPARE, false),
    ROW(GT, "gt", 2, 1, EM_CLASS_COMPARE, false),
    ROW(GE, "ge", 2, 1, EM_CLASS_COMPARE, false),
    EM_UNARY_OPS(UNARY_ROW)   /* tensor/unary_ops.h */
    ROW(WHERE, "where", 3, 1, EM_CLASS_SELECT, true),
    ROW(MASKED_FILL, "masked_fill", 2, 1, EM_CLASS_SELECT, true),
    ROW(SUM, "sum", 1, 1, EM_CLASS_REDUCE, true),
    ROW(MEAN, "mean", 1, 1, EM_CLASS_REDUCE, true),
    ROW(VAR, "var", 1, 1, EM_CLASS_REDUCE, true),
    ROW(LOGSUMEXP, "logsumexp", 1, 1, EM_CLASS_REDUCE, true),
    ROW(NORM, "norm", 1, 1, EM_CLASS_REDUCE, true),
    ROW(MAX, "max", 1, 2, EM_CLASS_REDUCE, true),
    ROW(MIN, "min", 1, 2, EM_CLASS_REDUCE, true),
    ROW(ARGMAX, "argmax", 1, 1, EM_CLASS_REDUCE, false),
    ROW(MATMUL, "matmul", 2, 1, EM_CLASS_LINALG, true),
    ROW(SOFTMAX, "softmax", 1, 1, EM_CLASS_NN, true),
    ROW(LOG_SOFTMAX, "log_softmax", 1, 1, EM_CLASS_NN, true),
    ROW(SOFTMAX_BWD, "softmax_backward", 2, 1, EM_CLASS_NN, false),
    ROW(LOG_SOFTMAX_BWD, "log_softmax_backward", 2, 1, EM_CLASS_NN, false),
    EM_UNARY_BWD_OPS(UNARY_BWD_ROW)
    ROW(LAYER_NORM, "layer_norm", 3, 3, EM_CLASS_NN, true),
    ROW(LAYER_NORM_BWD, "layer_norm_backward", 5, 3, EM_CLASS_NN, false),
    ROW(EMBEDDING, "embedding", 2, 1, EM_CLASS_NN, true),
    ROW(EMBEDDING_BWD, "embedding_backward", 2, 1, EM_CLASS_NN, false),
    ROW(DROPOUT, "dropout", 2, 2, EM_CLASS_NN, true),
    ROW(CROSS_ENTROPY, "cross_entropy", 2, 2, EM_CLASS_NN, true),
    ROW(CROSS_ENTROPY_BWD, "cross_entropy_backward", 4, 1, EM_CLASS_NN, false),
    ROW(CAT, "cat", 0, 1, EM_CLASS_SHAPE, true),
    ROW(INDEX_SELECT, "index_select", 2, 1, EM_CLASS_INDEX, true),
    ROW(GATHER, "gather", 2, 1, EM_CLASS_INDEX, true),
    ROW(SCATTER_ADD, "scatter_add", 3, 1, EM_CLASS_INDEX, true),
    ROW(RAND, "rand", 0, 1, EM_CLASS_RANDOM, false),
    ROW(RANDN, "randn", 0, 1, EM_CLASS_RANDOM, false),
    ROW(BERNOULLI, "bernoulli", 0, 1, EM_CLASS_RANDOM, false),
    ROW(SDPA, "sdpa", 5, 2, EM_CLASS_NN, true),
    ROW(LINEAR, "linear", 3, 1, EM_CLASS_LINALG, true),
    ROW(ADAMW_STEP, "adamw_step", 1, 4, EM_CLASS_FUSED, false),
    ROW(UNSCALE, "unscale", 0, 1, EM_CLASS_FUSED, false),
    ROW(SDPA_BWD, "sdpa_backward", 8, 3, EM_CLASS_FUSED, false),
};

/* Adding an op to EM_OP_LIST without a row here leaves a NULL name; the count
 * check below catches a changed list, tests/test_optable.c catches a gap. The
 * count is of the rows written out here: unary_ops.h's rows make their own. */
#define ONE(...) +1
static_assert(EM_NUM_OPS == 56 EM_UNARY_OP_NAMES(ONE) EM_UNARY_BWD_NAMES(ONE),
              "op list changed: add its row above and update this count");
