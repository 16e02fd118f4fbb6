/* The `cuda` suite: every kernel op on CUDA against the CPU (DESIGN.md §2
 * "Devices and dispatch"), plus the CUDA runtime (caching allocator,
 * copies, errors). Exits 77 (skipped) when no GPU is registered.
 *
 * The op-table loop: every kernel op of tensor/ops.h has a row below (a
 * missing row fails the run). A row's case builds its inputs on the CPU from
 * a seed (so both devices see the same values), moves them to the device,
 * runs the op through the public API and returns its outputs. Each case runs
 * for every dtype the row lists and for several layouts (contiguous,
 * broadcast, transposed/narrowed views, a long row), once on the CPU and once
 * on cuda:0; the CUDA outputs are compared with the CPU's:
 *   |cuda - cpu| <= tol * (|cpu| + max|cpu|) elementwise, NaN/inf matching,
 *   tol: f32 1e-5, TF32 5e-4, f16/bf16 1e-2, f64 1e-10; 0 (bit-identical)
 *   for rows marked exact (copies, indexing, comparisons, extremes, and the
 *   Philox ops RAND, BERNOULLI, DROPOUT), integer and bool outputs always exact.
 * Before each CUDA run the allocator's cache is filled with NaN-poisoned
 * blocks, so an output element a kernel forgets to write shows up.
 *
 * Then the fused multi-tensor kernels against the CPU: AdamW (5 steps, two
 * groups, amsgrad, f32/f64), GradScaler's unscale (bit-identical gradients;
 * found_inf from a planted inf or NaN skips the step), and cuBLASLt's
 * epilogue GEMM (em_backend.linear) against matmul + add (+ gelu_tanh).
 *
 * This program does not use Check: Check forks each test, and a CUDA context
 * does not survive fork(). It forks once itself, first, to check that loading
 * ember initializes no CUDA (a child forked before the first CUDA use must be
 * able to use the GPU).
 *
 * EMBER_CUDA_BENCH=1 also times a few kernels (median of 5 runs after a
 * warm-up; wall clock around em_backend.synchronize) for tools/gpu-check.
 * EMBER_CUDA_SELFTEST=1 runs the op loop with the CPU in the place of the
 * GPU (checks the harness itself on a machine without one).
 */
#include "ember.h"
#include "tensor/fused.h"
#include "tensor/op_grad.h"
#include "tensor/op_nn.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static em_device gpu;          /* cuda:0, or the CPU in self-test mode */
#include "count_check.h"

/* ---- inputs -------------------------------------------------------------------- */
typedef struct ctx {
    em_device dev;
    em_dtype dt;
    int variant;
    uint64_t seed;
    double tol;   /* set by a case to override the dtype's tolerance (TF32) */
} ctx;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A tensor of dt on c->dev with U[lo, hi) values (integers: floor; bool: upper half). */
static em_tensor *gen_dt(ctx *c, em_dtype dt, int nd, const int64_t *shape, double lo, double hi)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    uint64_t s = 0x1234567ull + 977 * c->seed++;
    for (int64_t i = 0; i < n; i++) {
        double u = lo + (hi - lo) * ((double)(splitmix(&s) >> 11) / 9007199254740992.0);
        if (dt == EM_I64 || dt == EM_I32) u = floor(u);
        if (dt == EM_BOOL) u = u >= (lo + hi) / 2;
        v[i] = u;
    }
    em_tensor *h = em_from_data(v, nd, shape, EM_F64);
    free(v);
    return em_to(em_to_dtype(h, dt), c->dev);
}
static em_tensor *gen(ctx *c, int nd, const int64_t *shape, double lo, double hi)
{
    return gen_dt(c, c->dt, nd, shape, lo, hi);
}
/* Ids in [0, V) of the given dtype (i64 or i32). */
static em_tensor *ids(ctx *c, em_dtype dt, int nd, const int64_t *shape, int64_t V)
{
    return gen_dt(c, dt, nd, shape, 0, (double)V);
}
static bool is_int(em_dtype dt) { return dt == EM_I64 || dt == EM_I32 || dt == EM_BOOL; }

typedef int (*case_fn)(ctx *c, em_tensor **out);   /* #outputs; 0: no such variant */

/* ---- cases: creation and copy --------------------------------------------------------- */
static int c_fill(ctx *c, em_tensor **o)
{
    if (c->variant == 0) {
        o[0] = em_full(EM_SHAPE(3, 1029), 2.5, c->dt, c->dev);
        return 1;
    }
    if (c->variant == 1) {   /* a strided view, and zeros (memset path) */
        em_tensor *z = em_full(EM_SHAPE(7, 9), 1.0, c->dt, c->dev);
        em_fill_(em_narrow(em_transpose(z, 0, 1), 0, 2, 5), is_int(c->dt) ? -3 : -0.75);
        o[0] = z;
        o[1] = em_zeros(EM_SHAPE(4, 5), c->dt, c->dev);
        return 2;
    }
    return 0;
}

static int c_arange(ctx *c, em_tensor **o)
{
    if (c->variant > 0) return 0;
    o[0] = is_int(c->dt) ? em_arange(-5, 300, 3, c->dt, c->dev) : em_arange(-2, 7, 0.25, c->dt, c->dev);
    return 1;
}

static int c_eye(ctx *c, em_tensor **o)
{
    if (c->variant > 0) return 0;
    o[0] = em_eye(5, 7, c->dt, c->dev);
    o[1] = em_eye(6, 3, c->dt, c->dev);
    return 2;
}

static int c_copy(ctx *c, em_tensor **o)
{
    static const em_dtype all[] = {EM_F32, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_BOOL};
    if (c->variant > 2) return 0;
    em_tensor *x = gen(c, EM_SHAPE(13, 17), -70, 70);
    if (c->variant == 1) x = em_transpose(x, 0, 1);
    if (c->variant == 2) x = em_narrow(em_transpose(gen(c, EM_SHAPE(19, 13), -70, 70), 0, 1), 1, 2, 15);
    for (int j = 0; j < 3; j++) o[j] = em_to_dtype(x, all[(3 * c->variant + j) % 7]);   /* every target over 3 variants */
    o[3] = em_contiguous(x);
    return 4;
}

/* ---- elementwise ---------------------------------------------------------------------- */
typedef em_tensor *(*bin_fn)(em_tensor *, em_tensor *);

static int binary(ctx *c, em_tensor **o, bin_fn fn, double lo, double hi, double blo, double bhi)
{
    em_tensor *a, *b;
    switch (c->variant) {
    case 0: a = gen(c, EM_SHAPE(37, 53), lo, hi); b = gen(c, EM_SHAPE(37, 53), blo, bhi); break;
    case 1: a = gen(c, EM_SHAPE(4, 1, 6), lo, hi); b = gen(c, EM_SHAPE(5, 1), blo, bhi); break;
    case 2:
        a = em_transpose(gen(c, EM_SHAPE(53, 37), lo, hi), 0, 1);
        b = em_narrow(gen(c, EM_SHAPE(37, 60), blo, bhi), 1, 3, 53);
        break;
    case 3: a = gen(c, EM_SHAPE(4099), lo, hi); b = gen(c, 0, NULL, blo, bhi); break;   /* vector path + tail, scalar b */
    case 4: a = gen(c, 0, NULL, lo, hi); b = gen(c, EM_SHAPE(3, 1000), blo, bhi); break;
    default: return 0;
    }
    o[0] = fn(a, b);
    return 1;
}

/* f32 with a half operand: one kernel on the CPU, casts first on CUDA; same values */
static int mixed(ctx *c, em_tensor **o, bin_fn fn)
{
    if (c->dt != EM_BF16 && c->dt != EM_F16) return 0;
    em_tensor *h = gen(c, EM_SHAPE(37, 53), -50, 50), *f = em_to_dtype(gen(c, EM_SHAPE(53), -50, 50), EM_F32);
    o[0] = fn(f, h);
    o[1] = fn(h, f);
    return 2;
}
static int c_add(ctx *c, em_tensor **o) { return c->variant == 5 ? mixed(c, o, em_add) : binary(c, o, em_add, -50, 50, -50, 50); }
static int c_sub(ctx *c, em_tensor **o) { return c->variant == 5 ? mixed(c, o, em_sub) : binary(c, o, em_sub, -50, 50, -50, 50); }
static int c_mul(ctx *c, em_tensor **o) { return binary(c, o, em_mul, -50, 50, -50, 50); }
static int c_div(ctx *c, em_tensor **o) { return binary(c, o, em_div, -5, 5, 0.5, 4); }
static int c_maximum(ctx *c, em_tensor **o) { return binary(c, o, em_maximum, -5, 5, -5, 5); }
static int c_minimum(ctx *c, em_tensor **o) { return binary(c, o, em_minimum, -5, 5, -5, 5); }
static int c_pow(ctx *c, em_tensor **o)
{
    if (is_int(c->dt)) return binary(c, o, em_pow, -4, 5, 0, 4);
    if (c->variant == 5 || c->variant == 6) {   /* the one-element exponent shortcuts */
        em_tensor *a = gen(c, EM_SHAPE(1000), 0.25, 3);
        o[0] = em_pow_scalar(a, c->variant == 5 ? 2.0 : 0.5);
        o[1] = em_pow_scalar(a, c->variant == 5 ? -1.0 : 3.0);
        o[2] = em_pow_scalar(a, c->variant == 5 ? -0.5 : 1.7);
        return 3;
    }
    return binary(c, o, em_pow, 0.25, 3, -2, 2);
}
/* comparisons: values from a small set, so that ties occur */
static int c_eq(ctx *c, em_tensor **o) { return binary(c, o, em_eq, -2, 3, -2, 3); }
static int c_ne(ctx *c, em_tensor **o) { return binary(c, o, em_ne, -2, 3, -2, 3); }
static int c_lt(ctx *c, em_tensor **o) { return binary(c, o, em_lt, -2, 3, -2, 3); }
static int c_le(ctx *c, em_tensor **o) { return binary(c, o, em_le, -2, 3, -2, 3); }
static int c_gt(ctx *c, em_tensor **o) { return binary(c, o, em_gt, -2, 3, -2, 3); }
static int c_ge(ctx *c, em_tensor **o) { return binary(c, o, em_ge, -2, 3, -2, 3); }

typedef em_tensor *(*un_fn)(em_tensor *);
static int unary(ctx *c, em_tensor **o, un_fn fn, double lo, double hi)
{
    em_tensor *a;
    switch (c->variant) {
    case 0: a = gen(c, EM_SHAPE(33, 65), lo, hi); break;
    case 1: a = em_transpose(gen(c, EM_SHAPE(65, 33), lo, hi), 0, 1); break;
    case 2: a = gen(c, EM_SHAPE(10007), lo, hi); break;
    default: return 0;
    }
    o[0] = fn(a);
    return 1;
}
/* c_un_<name>: one case per row of tensor/unary_ops.h, over its parity range */
#define UN_KEEP(...) __VA_ARGS__
#define UN_CASE_FN(NAME, name, dtypes, cost, f, backward, ref, domain, values, parity) \
    static int c_un_##name(ctx *c, em_tensor **o) { return unary(c, o, em_##name, UN_KEEP parity); }
EM_UNARY_OPS(UN_CASE_FN)

static int c_where(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_tensor *cond = gen_dt(c, EM_BOOL, c->variant ? 2 : 2, c->variant ? (int64_t[]){1, 40} : (int64_t[]){30, 40}, 0, 1);
    em_tensor *x = gen(c, EM_SHAPE(30, 40), -9, 9);
    em_tensor *y = c->variant ? em_transpose(gen(c, EM_SHAPE(40, 30), -9, 9), 0, 1) : gen(c, EM_SHAPE(30, 1), -9, 9);
    o[0] = em_where(cond, x, y);
    return 1;
}

static int c_masked_fill(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_tensor *x = c->variant ? em_transpose(gen(c, EM_SHAPE(40, 30), -9, 9), 0, 1) : gen(c, EM_SHAPE(30, 40), -9, 9);
    em_tensor *m = gen_dt(c, EM_BOOL, EM_SHAPE(1, 40), 0, 1);
    o[0] = em_masked_fill(x, m, c->dt == EM_BOOL ? 1 : -7);
    return 1;
}

/* ---- reductions ---------------------------------------------------------------------------- */
/* The input of reduction variant v: contiguous, transposed, long rows, a tall column. */
static em_tensor *red_input(ctx *c, double lo, double hi)
{
    switch (c->variant) {
    case 0: case 1: case 2: return gen(c, EM_SHAPE(6, 7, 45), lo, hi);
    case 3: return em_transpose(gen(c, EM_SHAPE(45, 7, 6), lo, hi), 0, 2);
    case 4: return gen(c, EM_SHAPE(3, 70001), lo, hi);
    case 5: return gen(c, EM_SHAPE(40000, 9), lo, hi);
    case 6: return gen(c, EM_SHAPE(2, 0, 5), lo, hi);
    default: return NULL;
    }
}
static const int *red_dims(int v, int *n)
{
    static const int d0[] = {2}, d1[] = {0}, d2[] = {0, 2}, d4[] = {1}, d5[] = {0};
    switch (v) {
    case 0: *n = 1; return d0;
    case 1: *n = 1; return d1;
    case 2: *n = 0; return NULL;   /* all dims */
    case 3: *n = 2; return d2;
    case 4: *n = 1; return d4;
    case 5: *n = 1; return d5;
    default: *n = 1; return d4;
    }
}

static int c_sum(ctx *c, em_tensor **o)
{
    em_tensor *x = red_input(c, -3, 3);
    if (!x) return 0;
    int n;
    const int *d = red_dims(c->variant, &n);
    o[0] = em_sum(x, n, d, false);
    return 1;
}
static int c_mean(ctx *c, em_tensor **o)
{
    em_tensor *x = red_input(c, -3, 3);
    if (!x) return 0;
    int n;
    const int *d = red_dims(c->variant, &n);
    o[0] = em_mean(x, n, d, true);
    return 1;
}
static int c_var(ctx *c, em_tensor **o)
{
    em_tensor *x = red_input(c, 100, 103);   /* an offset: the two-pass variance keeps its accuracy */
    if (!x) return 0;
    int n;
    const int *d = red_dims(c->variant, &n);
    o[0] = em_var(x, n, d, 1, false);
    o[1] = em_var(x, n, d, 0, false);
    return 2;
}
static int c_logsumexp(ctx *c, em_tensor **o)
{
    em_tensor *x = red_input(c, -20, 20);
    if (!x) return 0;
    int n;
    const int *d = red_dims(c->variant, &n);
    o[0] = em_logsumexp(x, n, d, false);
    return 1;
}
static int c_norm(ctx *c, em_tensor **o)
{
    em_tensor *x = red_input(c, -3, 3);
    if (!x) return 0;
    int n;
    const int *d = red_dims(c->variant, &n);
    o[0] = em_norm(x, 2, n, d, false);
    o[1] = em_norm(x, 1, n, d, false);
    o[2] = em_norm(x, INFINITY, n, d, false);
    o[3] = em_norm(x, 3, n, d, false);
    return 4;
}
static int extreme(ctx *c, em_tensor **o, em_op op)
{
    if (c->variant == 6) return 0;   /* a zero-size dim is misuse for extremes */
    em_tensor *x = red_input(c, -4, 4);
    if (!x) return 0;
    int dim = c->variant == 1 || c->variant == 5 ? 0 : c->variant == 3 ? 1 : c->variant == 4 ? 1 : 2;
    if (c->variant == 2) {
        o[0] = op == EM_OP_MIN ? em_min_all(x) : em_max_all(x);
        return 1;
    }
    if (op == EM_OP_ARGMAX) {
        o[0] = em_argmax(x, dim, false);
        return 1;
    }
    em_tensor *idx = NULL;
    o[0] = op == EM_OP_MAX ? em_max(x, dim, true, &idx) : em_min(x, dim, false, &idx);
    o[1] = idx;
    return 2;
}
static int c_max(ctx *c, em_tensor **o) { return extreme(c, o, EM_OP_MAX); }
static int c_min(ctx *c, em_tensor **o) { return extreme(c, o, EM_OP_MIN); }
static int c_argmax(ctx *c, em_tensor **o) { return extreme(c, o, EM_OP_ARGMAX); }

/* ---- matmul ------------------------------------------------------------------------------------ */
static int c_matmul(ctx *c, em_tensor **o)
{
    em_tensor *a, *b;
    switch (c->variant) {
    case 0: a = gen(c, EM_SHAPE(33, 70), -1, 1); b = gen(c, EM_SHAPE(70, 21), -1, 1); break;
    case 1: a = gen(c, EM_SHAPE(3, 17, 40), -1, 1); b = gen(c, EM_SHAPE(40, 25), -1, 1); break;   /* folded batch */
    case 2: a = gen(c, EM_SHAPE(2, 3, 9, 40), -1, 1); b = gen(c, EM_SHAPE(3, 40, 11), -1, 1); break;   /* broadcast batch */
    case 3:   /* transposed operands, batched */
        a = em_transpose(gen(c, EM_SHAPE(4, 40, 9), -1, 1), 1, 2);
        b = em_transpose(gen(c, EM_SHAPE(4, 13, 40), -1, 1), 1, 2);
        break;
    case 4:   /* vectors, a K of 0, and a non-GEMM-ready operand */
        o[0] = em_matmul(gen(c, EM_SHAPE(40), -1, 1), gen(c, EM_SHAPE(40), -1, 1));
        o[1] = em_matmul(gen(c, EM_SHAPE(5, 0), -1, 1), gen(c, EM_SHAPE(0, 3), -1, 1));
        o[2] = em_matmul(em_narrow(em_transpose(gen(c, EM_SHAPE(8, 4, 12), -1, 1), 0, 2), 0, 1, 7),
                         gen(c, EM_SHAPE(8, 6), -1, 1));
        return 3;
    case 5:   /* TF32 */
        if (c->dt != EM_F32) return 0;
        em_set_float32_matmul_precision("high");
        o[0] = em_matmul(gen(c, EM_SHAPE(64, 256), -1, 1), gen(c, EM_SHAPE(256, 48), -1, 1));
        em_set_float32_matmul_precision("highest");
        c->tol = 5e-4;
        return 1;
    case 6: {   /* MATMUL i[0]: added into a C (a weight gradient's sink), g^T x with g transposed;
                 * f16/bf16 operands add into an f32 C */
        em_dtype cdt = c->dt == EM_F64 ? EM_F64 : EM_F32;
        em_tensor *acc = gen_dt(c, cdt, EM_SHAPE(21, 33), -1, 1);
        em_tensor *g = gen(c, EM_SHAPE(70, 21), -1, 1), *x = gen(c, EM_SHAPE(70, 33), -1, 1);
        o[0] = em__matmul_into(acc, em_transpose(g, 0, 1), x) ? acc : NULL;   /* NULL: reported with the error */
        return 1;
    }
    default: return 0;
    }
    o[0] = em_matmul(a, b);
    return 1;
}

/* linear: the cuBLASLt bias epilogue where it takes the case, cuBLAS + add where it declines */
static int c_linear(ctx *c, em_tensor **o)
{
    switch (c->variant) {
    case 0:
        o[0] = em_linear(gen(c, EM_SHAPE(33, 70), -1, 1), gen(c, EM_SHAPE(21, 70), -1, 1), gen(c, EM_SHAPE(21), -1, 1));
        return 1;
    case 1: o[0] = em_linear(gen(c, EM_SHAPE(3, 17, 40), -1, 1), gen(c, EM_SHAPE(25, 40), -1, 1), NULL); return 1;
    case 2:   /* transposed x and weight */
        o[0] = em_linear(em_transpose(gen(c, EM_SHAPE(40, 33), -1, 1), 0, 1),
                         em_transpose(gen(c, EM_SHAPE(40, 24), -1, 1), 0, 1), gen(c, EM_SHAPE(24), -1, 1));
        return 1;
    case 3:   /* a strided bias (the fallback), K = 0 (y = bias), no rows */
        o[0] = em_linear(gen(c, EM_SHAPE(2, 9, 16), -1, 1), gen(c, EM_SHAPE(12, 16), -1, 1),
                         em_select(gen(c, EM_SHAPE(12, 2), -1, 1), 1, 1));
        o[1] = em_linear(gen(c, EM_SHAPE(5, 0), -1, 1), gen(c, EM_SHAPE(3, 0), -1, 1), gen(c, EM_SHAPE(3), -1, 1));
        o[2] = em_linear(gen(c, EM_SHAPE(0, 7), -1, 1), gen(c, EM_SHAPE(3, 7), -1, 1), gen(c, EM_SHAPE(3), -1, 1));
        return 3;
    case 4:   /* TF32 */
        if (c->dt != EM_F32) return 0;
        em_set_float32_matmul_precision("high");
        o[0] = em_linear(gen(c, EM_SHAPE(64, 256), -1, 1), gen(c, EM_SHAPE(48, 256), -1, 1), gen(c, EM_SHAPE(48), -1, 1));
        em_set_float32_matmul_precision("highest");
        c->tol = 5e-4;
        return 1;
    default: return 0;
    }
}

/* ---- nn ------------------------------------------------------------------------------------------ */
static em_tensor *sm_input(ctx *c, int *dim)
{
    switch (c->variant) {
    case 0: *dim = -1; return gen(c, EM_SHAPE(7, 129), -6, 6);
    case 1: *dim = 0; return gen(c, EM_SHAPE(33, 21), -6, 6);   /* one thread per row */
    case 2: *dim = 1; return em_transpose(gen(c, EM_SHAPE(3000, 3), -6, 6), 0, 1);   /* long rows */
    case 3: *dim = -1; return gen(c, EM_SHAPE(50, 5), -6, 6);
    default: return NULL;
    }
}
static int c_softmax(ctx *c, em_tensor **o)
{
    int dim;
    em_tensor *x = sm_input(c, &dim);
    if (!x) return 0;
    o[0] = em_softmax(x, dim);
    return 1;
}
static int c_log_softmax(ctx *c, em_tensor **o)
{
    int dim;
    em_tensor *x = sm_input(c, &dim);
    if (!x) return 0;
    o[0] = em_log_softmax(x, dim);
    return 1;
}
static int softmax_bwd(ctx *c, em_tensor **o, bool log)
{
    int dim;
    em_tensor *x = sm_input(c, &dim);
    if (!x) return 0;
    em_tensor *y = log ? em_log_softmax(x, dim) : em_softmax(x, dim);
    em_tensor *dy = gen(c, x->ndim, x->shape, -1, 1);
    if (c->variant == 2) dy = em_transpose(gen(c, EM_SHAPE(3000, 3), -1, 1), 0, 1);
    o[0] = em__softmax_backward(y, dy, dim, log);
    return 1;
}
static int c_softmax_bwd(ctx *c, em_tensor **o) { return softmax_bwd(c, o, false); }
static int c_log_softmax_bwd(ctx *c, em_tensor **o) { return softmax_bwd(c, o, true); }

/* the unary _BWD ops (c_bwd_<name>: unary_ops.h's DERIV rows), x over the parity range */
static int unary_bwd(ctx *c, em_tensor **o, em_op op, double lo, double hi)
{
    if (c->variant > 1) return 0;
    em_tensor *x = gen(c, EM_SHAPE(31, 40), lo, hi), *dy = gen(c, EM_SHAPE(31, 40), -1, 1);
    if (c->variant) x = em_transpose(gen(c, EM_SHAPE(40, 31), lo, hi), 0, 1);
    o[0] = em__unary_backward(op, x, dy);
    return 1;
}
#define BWD_CASE_FN(NAME, name, df, dref, values, parity) \
    static int c_bwd_##name(ctx *c, em_tensor **o) { return unary_bwd(c, o, EM_OP_##NAME, UN_KEEP parity); }
EM_UNARY_BWD_OPS(BWD_CASE_FN)

static int c_layer_norm(ctx *c, em_tensor **o)
{
    if (c->variant > 2) return 0;
    int64_t D = c->variant == 2 ? 1030 : 33;
    em_tensor *x = gen(c, EM_SHAPE(2, 6, D), 5, 9);
    em_tensor *w = c->variant == 1 ? NULL : gen(c, 1, &D, 0.5, 1.5);
    em_tensor *b = c->variant == 1 ? NULL : gen(c, 1, &D, -1, 1);
    em_tensor *mean = NULL, *rstd = NULL;
    o[0] = em_layer_norm(x, w, b, 1e-5, &mean, &rstd);
    o[1] = mean;
    o[2] = rstd;
    return 3;
}
static int c_layer_norm_bwd(ctx *c, em_tensor **o)
{
    if (c->variant > 2) return 0;
    int64_t D = c->variant == 2 ? 1030 : 33, R = c->variant == 2 ? 300 : 12;
    em_tensor *x = gen(c, EM_SHAPE(R, D), -2, 2);
    em_tensor *w = c->variant == 1 ? NULL : gen(c, 1, &D, 0.5, 1.5);
    em_tensor *mean = NULL, *rstd = NULL;
    em_layer_norm(x, w, NULL, 1e-5, &mean, &rstd);
    em_tensor *dy = c->variant == 1 ? em_transpose(gen(c, EM_SHAPE(D, R), -1, 1), 0, 1) : gen(c, EM_SHAPE(R, D), -1, 1);
    em_tensor *dw = NULL, *db = NULL;
    o[0] = em_layer_norm_backward(dy, x, mean, rstd, w, &dw, &db);
    o[1] = dw;
    o[2] = db;
    return 3;
}

static int c_embedding(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_tensor *w = gen(c, EM_SHAPE(11, 37), -3, 3);
    if (c->variant) w = em_transpose(gen(c, EM_SHAPE(37, 11), -3, 3), 0, 1);
    o[0] = em_embedding(w, ids(c, EM_I64, EM_SHAPE(3, 5), 11));
    o[1] = em_embedding(w, ids(c, EM_I32, EM_SHAPE(9), 11));
    return 2;
}
static int c_embedding_bwd(ctx *c, em_tensor **o)
{
    if (c->variant == 2) {   /* EMBEDDING_BWD i[1]: picked rows added into dw, the others untouched */
        em_tensor *id = ids(c, EM_I64, EM_SHAPE(4, 50), 13);
        em_tensor *dw = gen(c, EM_SHAPE(15, 70), -1, 1);
        o[0] = em__embedding_backward_into(dw, gen(c, EM_SHAPE(4, 50, 70), -1, 1), id, 2) ? dw : NULL;
        return 1;
    }
    if (c->variant > 1) return 0;
    em_tensor *id = ids(c, c->variant ? EM_I32 : EM_I64, EM_SHAPE(4, 50), 13);   /* many repeats */
    em_tensor *dy = gen(c, EM_SHAPE(4, 50, 70), -1, 1);
    o[0] = em_embedding_backward(dy, id, 13, -1);
    o[1] = em_embedding_backward(dy, id, 15, 2);
    return 2;
}

static int c_dropout(ctx *c, em_tensor **o)
{
    if (c->variant > 3) return 0;
    if (c->variant == 3) {   /* the backward's form: the forward's mask given (in[1]; CUDA may regenerate it) */
        em_tensor *g = gen(c, EM_SHAPE(7, 1001), -3, 3), *mask = NULL;
        em_dropout(g, 0.3, 0x5eed, 78, &mask);
        o[0] = em__dropout_masked(g, mask, 0.3, 0x5eed, 78);
        return 1;
    }
    em_tensor *x = gen(c, EM_SHAPE(7, 1001), -3, 3);
    if (c->variant == 1) x = em_transpose(gen(c, EM_SHAPE(1001, 7), -3, 3), 0, 1);
    double p = c->variant == 2 ? 0.0 : 0.3;
    em_tensor *mask = NULL;
    o[0] = em_dropout(x, p, 0x5eed, 77, &mask);
    o[1] = mask;
    if (c->variant == 2) {
        o[2] = em_dropout(x, 1.0, 1, 2, NULL);
        return 3;
    }
    return 2;
}

static int c_cross_entropy(ctx *c, em_tensor **o)
{
    if (c->variant > 2) return 0;
    int64_t N = c->variant == 2 ? 9 : 24, C = c->variant == 2 ? 5000 : 10;
    em_tensor *x = gen(c, EM_SHAPE(N, C), -5, 5);
    if (c->variant == 1) x = em_transpose(gen(c, EM_SHAPE(C, N), -5, 5), 0, 1);
    em_tensor *t = ids(c, EM_I64, 1, &N, (double)C);
    o[0] = em_cross_entropy(x, t, 3, EM_REDUCE_MEAN);   /* rows with target 3 ignored */
    o[1] = em_cross_entropy(x, t, -100, EM_REDUCE_SUM);
    o[2] = em_cross_entropy(x, t, -100, EM_REDUCE_NONE);
    return 3;
}
static int c_cross_entropy_bwd(ctx *c, em_tensor **o)
{
    if (c->variant > 2) return 0;
    int64_t N = 24, C = c->variant == 2 ? 3000 : 10;
    em_tensor *x = gen(c, EM_SHAPE(N, C), -5, 5);
    em_tensor *t = ids(c, EM_I64, 1, &N, (double)C);
    o[0] = em_cross_entropy_backward(gen(c, 0, NULL, 0.5, 2), x, t, 3, EM_REDUCE_MEAN);
    o[1] = em_cross_entropy_backward(gen(c, 0, NULL, 0.5, 2), x, t, -100, EM_REDUCE_SUM);
    o[2] = em_cross_entropy_backward(gen(c, 1, &N, -1, 1), x, t, 5, EM_REDUCE_NONE);
    return 3;
}

/* ---- indexing ---------------------------------------------------------------------------------------- */
static int c_cat(ctx *c, em_tensor **o)
{
    if (c->variant > 0) return 0;
    em_tensor *ts[3] = {gen(c, EM_SHAPE(4, 3, 5), -9, 9), em_transpose(gen(c, EM_SHAPE(5, 7, 4), -9, 9), 0, 2),
                        gen(c, EM_SHAPE(4, 0, 5), -9, 9)};
    o[0] = em_cat(3, ts, 1);
    em_tensor *us[2] = {gen(c, EM_SHAPE(2, 3), -9, 9), gen(c, EM_SHAPE(5, 3), -9, 9)};
    o[1] = em_cat(2, us, 0);
    return 2;
}
static int c_index_select(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_tensor *x = gen(c, EM_SHAPE(5, 6, 4), -9, 9);
    if (c->variant) x = em_transpose(gen(c, EM_SHAPE(4, 6, 5), -9, 9), 0, 2);
    o[0] = em_index_select(x, 1, ids(c, EM_I64, EM_SHAPE(7), 6));
    o[1] = em_index_select(x, 0, ids(c, EM_I32, EM_SHAPE(3), 5));
    return 2;
}
static int c_gather(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_tensor *x = gen(c, EM_SHAPE(4, 6), -9, 9);
    if (c->variant) x = em_transpose(gen(c, EM_SHAPE(6, 4), -9, 9), 0, 1);
    o[0] = em_gather(x, 1, ids(c, EM_I64, EM_SHAPE(4, 9), 6));
    o[1] = em_gather(x, 0, ids(c, EM_I32, EM_SHAPE(3, 6), 4));
    return 2;
}
static int c_scatter_add(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_tensor *t = gen(c, EM_SHAPE(5, 6), -9, 9);
    em_tensor *src = gen(c, EM_SHAPE(7, 6), -9, 9);
    if (c->variant) src = em_transpose(gen(c, EM_SHAPE(6, 7), -9, 9), 0, 1);
    o[0] = em_scatter_add(t, 0, ids(c, EM_I64, EM_SHAPE(7, 6), 5), src);
    o[1] = em_scatter_add(t, 1, ids(c, EM_I32, EM_SHAPE(5, 3), 6), gen(c, EM_SHAPE(5, 3), -9, 9));
    return 2;
}

/* ---- random: the global generator, re-seeded so both devices draw the same counters ---------------- */
static int c_rand(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_set_seed(1234);
    o[0] = em_rand(EM_SHAPE(3, 1001), c->dt, c->dev);
    if (c->variant) o[1] = em_uniform_(em_transpose(em_zeros(EM_SHAPE(9, 7), c->dt, c->dev), 0, 1), -2, 5);
    return c->variant ? 2 : 1;
}
static int c_randn(ctx *c, em_tensor **o)
{
    if (c->variant > 0) return 0;
    em_set_seed(99);
    o[0] = em_randn(EM_SHAPE(5, 999), c->dt, c->dev);
    c->tol = c->dt == EM_F64 ? 1e-12 : c->tol;
    return 1;
}
static int c_bernoulli(ctx *c, em_tensor **o)
{
    if (c->variant > 0) return 0;
    em_set_seed(5);
    o[0] = em_bernoulli(EM_SHAPE(4, 1003), 0.37, c->dev);
    o[1] = em_bernoulli(EM_SHAPE(10), 1.0, c->dev);
    return 2;
}

/* fused attention: cuDNN on CUDA for f16/bf16 (em__sdpa composes what it declines), loops on the CPU */
static int c_sdpa(ctx *c, em_tensor **o)
{
    if (c->variant > 2) return 0;
    if (c->variant == 2) {   /* packed rows (em__sdpa_packed): sequences of 9 and 5 rows, padded length 9 */
        em_tensor *q = gen(c, EM_SHAPE(1, 3, 14, 16), -1, 1), *k = gen(c, EM_SHAPE(1, 3, 14, 16), -1, 1);
        em_tensor *v = gen(c, EM_SHAPE(1, 3, 14, 16), -1, 1);
        em_tensor *lens = em_to(em_from_data((const int32_t[]){9, 5}, EM_SHAPE(2), EM_I32), c->dev);
        em_tensor *starts = em_to(em_from_data((const int64_t[]){0, 9}, EM_SHAPE(2), EM_I64), c->dev);
        o[0] = em__sdpa_packed(q, k, v, lens, starts, 9, 0.0, 0, 0);
        return 1;
    }
    em_tensor *q = gen(c, EM_SHAPE(2, 3, 17, 16), -1, 1), *k = gen(c, EM_SHAPE(2, 3, 9, 16), -1, 1);
    em_tensor *v = gen(c, EM_SHAPE(2, 3, 9, 16), -1, 1);
    em_tensor *lens = c->variant ? em_to(em_from_data((const int32_t[]){9, 5}, EM_SHAPE(2), EM_I32), c->dev) : NULL;
    o[0] = em__sdpa(q, k, v, lens, 0.0, 0, 0, false);
    return 1;
}

/* ---- fused ops (tensor/fused.h): AdamW's update, GradScaler's unscale, SDPA's backward ---------------- */
static int c_adamw_step(ctx *c, em_tensor **o)
{
    if (c->variant > 3) return 0;
    bool ams = c->variant == 1 || c->variant == 3;
    em_tensor *p = gen(c, EM_SHAPE(70001), -1, 1), *g = gen(c, EM_SHAPE(70001), -1, 1);
    em_tensor *m = gen(c, EM_SHAPE(70001), -0.1, 0.1), *v = gen(c, EM_SHAPE(70001), 0, 0.01);
    em_tensor *vm = ams ? gen(c, EM_SHAPE(70001), 0, 0.02) : NULL;
    em_adamw_scalars k = {.decay = 1 - 1e-3 * 0.01, .w1 = 0.1, .beta2 = 0.999, .w2 = 0.001,
                          .bc2_sqrt = sqrt(1 - pow(0.999, 3)), .neg_step = -1e-3 / (1 - pow(0.9, 3)), .eps = 1e-8,
                          .sign = ams ? -1 : 1, .small = c->variant != 1, .fma = c->variant != 2};
    if (c->variant == 3) k.decay = 0.05, k.l2 = true;   /* Adam's decay, in the gradient */
    if (em__adamw_step(p, g, m, v, vm, &k) != EM_OK) return 0;
    o[0] = p, o[1] = m, o[2] = v, o[3] = vm;
    return ams ? 4 : 3;
}
static int c_unscale(ctx *c, em_tensor **o)
{
    if (c->variant > 1) return 0;
    em_tensor *a = gen(c, EM_SHAPE(3, 40000), -9, 9), *b = gen(c, EM_SHAPE(17), -9, 9);
    if (c->variant) em_fill_(em_narrow(a, 1, 5, 1), NAN);
    em_tensor *ts[2] = {a, b};
    bool found = false;
    if (em__unscale(ts, 2, 1.0f / 1024, &found) != EM_OK) return 0;
    o[0] = em_scalar(found, EM_BOOL, EM_CPU), o[1] = a, o[2] = b;
    return 3;
}
/* SDPA_BWD through autograd's rule: q, k, v's gradients of <sdpa(q, k, v), dout> */
static int c_sdpa_bwd(ctx *c, em_tensor **o)
{
    if (c->variant > 3) return 0;
    if (c->variant == 3) {   /* packed rows with dropout: CUDA composes the padded op around index gathers */
        em_tensor *q = em_requires_grad_(gen(c, EM_SHAPE(1, 3, 14, 16), -1, 1), true);
        em_tensor *k = em_requires_grad_(gen(c, EM_SHAPE(1, 3, 14, 16), -1, 1), true);
        em_tensor *v = em_requires_grad_(gen(c, EM_SHAPE(1, 3, 14, 16), -1, 1), true);
        em_tensor *dout = gen(c, EM_SHAPE(1, 3, 14, 16), -1, 1);
        em_tensor *lens = em_to(em_from_data((const int32_t[]){9, 5}, EM_SHAPE(2), EM_I32), c->dev);
        em_tensor *starts = em_to(em_from_data((const int64_t[]){0, 9}, EM_SHAPE(2), EM_I64), c->dev);
        em_tensor *y = em__sdpa_packed(q, k, v, lens, starts, 9, 0.25, 77, 3);
        em_backward(em_sum(em_mul(y, dout), 0, NULL, false));
        o[0] = em_grad(q), o[1] = em_grad(k), o[2] = em_grad(v);
        return 3;
    }
    em_tensor *q = em_requires_grad_(gen(c, EM_SHAPE(2, 3, 17, 16), -1, 1), true);
    em_tensor *k = em_requires_grad_(gen(c, EM_SHAPE(2, 3, 9, 16), -1, 1), true);
    em_tensor *v = em_requires_grad_(gen(c, EM_SHAPE(2, 3, 9, 16), -1, 1), true);
    em_tensor *dout = gen(c, EM_SHAPE(2, 3, 17, 16), -1, 1);
    em_tensor *lens = c->variant ? em_to(em_from_data((const int32_t[]){9, 5}, EM_SHAPE(2), EM_I32), c->dev) : NULL;
    em_tensor *y = em__sdpa(q, k, v, lens, c->variant == 2 ? 0.25 : 0.0, 77, 3, false);
    em_backward(em_sum(em_mul(y, dout), 0, NULL, false));
    o[0] = em_grad(q), o[1] = em_grad(k), o[2] = em_grad(v);
    return 3;
}

/* ---- the table ------------------------------------------------------------------------------------------- */
#define DT(x) (1u << (x))
#define FLOATS (DT(EM_F32) | DT(EM_F64) | DT(EM_F16) | DT(EM_BF16))
#define NUMS (FLOATS | DT(EM_I64) | DT(EM_I32))
#define ALL (NUMS | DT(EM_BOOL))

typedef struct row {
    case_fn fn;
    unsigned dtypes;
    bool exact;
} row;

/* unary_ops.h's rows: a NUMERIC op is integer-exact arithmetic, so bit for bit */
#define UN_ROW_NUMERIC(name) {c_un_##name, NUMS, true}
#define UN_ROW_FLOATING(name) {c_un_##name, FLOATS, false}
#define UN_ROW(NAME, name, dtypes, ...) [EM_OP_##NAME] = UN_ROW_##dtypes(name),
#define BWD_ROW(NAME, name, ...) [EM_OP_##NAME##_BWD] = {c_bwd_##name, FLOATS, false},

static const row rows[EM_NUM_OPS] = {
    [EM_OP_FILL] = {c_fill, ALL, true},
    [EM_OP_ARANGE] = {c_arange, NUMS, true},
    [EM_OP_EYE] = {c_eye, ALL, true},
    [EM_OP_COPY] = {c_copy, ALL, true},
    [EM_OP_ADD] = {c_add, NUMS, false},
    [EM_OP_SUB] = {c_sub, NUMS, false},
    [EM_OP_MUL] = {c_mul, NUMS, false},
    [EM_OP_DIV] = {c_div, FLOATS, false},
    [EM_OP_POW] = {c_pow, NUMS, false},
    [EM_OP_MAXIMUM] = {c_maximum, NUMS, true},
    [EM_OP_MINIMUM] = {c_minimum, NUMS, true},
    [EM_OP_EQ] = {c_eq, ALL, true},
    [EM_OP_NE] = {c_ne, ALL, true},
    [EM_OP_LT] = {c_lt, ALL, true},
    [EM_OP_LE] = {c_le, ALL, true},
    [EM_OP_GT] = {c_gt, ALL, true},
    [EM_OP_GE] = {c_ge, ALL, true},
    EM_UNARY_OPS(UN_ROW)   /* tensor/unary_ops.h */
    [EM_OP_WHERE] = {c_where, ALL, true},
    [EM_OP_MASKED_FILL] = {c_masked_fill, ALL, true},
    [EM_OP_SUM] = {c_sum, ALL, false},
    [EM_OP_MEAN] = {c_mean, FLOATS, false},
    [EM_OP_VAR] = {c_var, FLOATS, false},
    [EM_OP_LOGSUMEXP] = {c_logsumexp, FLOATS, false},
    [EM_OP_NORM] = {c_norm, FLOATS, false},
    [EM_OP_MAX] = {c_max, NUMS, true},
    [EM_OP_MIN] = {c_min, NUMS, true},
    [EM_OP_ARGMAX] = {c_argmax, NUMS, true},
    [EM_OP_MATMUL] = {c_matmul, FLOATS, false},
    [EM_OP_SOFTMAX] = {c_softmax, FLOATS, false},
    [EM_OP_LOG_SOFTMAX] = {c_log_softmax, FLOATS, false},
    [EM_OP_SOFTMAX_BWD] = {c_softmax_bwd, FLOATS, false},
    [EM_OP_LOG_SOFTMAX_BWD] = {c_log_softmax_bwd, FLOATS, false},
    EM_UNARY_BWD_OPS(BWD_ROW)
    [EM_OP_LAYER_NORM] = {c_layer_norm, FLOATS, false},
    [EM_OP_LAYER_NORM_BWD] = {c_layer_norm_bwd, FLOATS, false},
    [EM_OP_EMBEDDING] = {c_embedding, ALL, true},
    [EM_OP_EMBEDDING_BWD] = {c_embedding_bwd, FLOATS, false},
    [EM_OP_DROPOUT] = {c_dropout, FLOATS, true},
    [EM_OP_CROSS_ENTROPY] = {c_cross_entropy, FLOATS, false},
    [EM_OP_CROSS_ENTROPY_BWD] = {c_cross_entropy_bwd, FLOATS, false},
    [EM_OP_CAT] = {c_cat, ALL, true},
    [EM_OP_INDEX_SELECT] = {c_index_select, ALL, true},
    [EM_OP_GATHER] = {c_gather, ALL, true},
    [EM_OP_SCATTER_ADD] = {c_scatter_add, NUMS, false},
    [EM_OP_RAND] = {c_rand, FLOATS, true},
    [EM_OP_RANDN] = {c_randn, FLOATS, false},
    [EM_OP_BERNOULLI] = {c_bernoulli, DT(EM_BOOL), true},
    [EM_OP_SDPA] = {c_sdpa, FLOATS, false},
    [EM_OP_LINEAR] = {c_linear, FLOATS, false},
    [EM_OP_ADAMW_STEP] = {c_adamw_step, DT(EM_F32) | DT(EM_F64), true},
    [EM_OP_UNSCALE] = {c_unscale, DT(EM_F32) | DT(EM_F64), true},
    [EM_OP_SDPA_BWD] = {c_sdpa_bwd, FLOATS, false},
};

/* ---- running and comparing ------------------------------------------------------------------------------------ */
#define MAX_OUT 4
#define MAX_VARIANTS 8

typedef struct result {
    int n;
    int nd[MAX_OUT];
    int64_t shape[MAX_OUT][EM_MAX_DIMS];
    em_dtype dt[MAX_OUT];
    int64_t numel[MAX_OUT];
    double *v[MAX_OUT];
} result;

static void result_free(result *r)
{
    for (int i = 0; i < r->n; i++) free(r->v[i]);
    r->n = 0;
}

/* Fills the allocator's cache with NaN-filled blocks of many sizes. */
static void poison(em_device dev)
{
    static const int64_t sizes[] = {16, 256, 1024, 8192, 65536, 400000, 3000000};
    em_scope_begin();
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) em_full(1, &sizes[i], NAN, EM_F32, dev);
    em_scope_end();
}

/* Runs a case on dev; false (with a message) when it failed to produce its outputs. */
static bool run_case(const row *rw, em_device dev, em_dtype dt, int variant, result *res, double *tol, bool *skip)
{
    ctx c = {.dev = dev, .dt = dt, .variant = variant, .seed = 1 + (uint64_t)variant * 1000, .tol = 0};
    em_tensor *out[MAX_OUT] = {0};
    *skip = false;
    res->n = 0;
    em_scope_begin();
    int n = rw->fn(&c, out);
    bool ok = true;
    if (n == 0) *skip = true;
    for (int i = 0; i < n && ok; i++) {
        if (!out[i]) {
            fprintf(stderr, "  output %d is NULL: %s\n", i, em_last_error());
            ok = false;
            break;
        }
        em_tensor *h = em_contiguous(em_to_dtype(em_to(out[i], EM_CPU), EM_F64));
        if (!h) {
            fprintf(stderr, "  moving output %d to the CPU failed: %s\n", i, em_last_error());
            ok = false;
            break;
        }
        res->nd[i] = h->ndim;
        memcpy(res->shape[i], h->shape, sizeof(int64_t) * (size_t)h->ndim);
        res->dt[i] = out[i]->dtype;
        res->numel[i] = em_numel(h);
        res->v[i] = malloc(sizeof(double) * (size_t)(res->numel[i] ? res->numel[i] : 1));
        if (res->numel[i]) memcpy(res->v[i], em_data_ptr(h), sizeof(double) * (size_t)res->numel[i]);
        res->n++;
    }
    em_scope_end();
    *tol = c.tol;
    return ok;
}

static double default_tol(em_dtype dt)
{
    switch (dt) {
    case EM_F32: return 1e-5;
    case EM_F64: return 1e-10;
    case EM_F16: case EM_BF16: return 1e-2;
    default: return 0;
    }
}

/* Worst |g - r| / (tol (|r| + max|r|)) (or exact mismatch count); prints the first offender. */
static bool compare(const char *what, const result *g, const result *r, double tol, double *worst)
{
    *worst = 0;
    if (g->n != r->n) {
        fprintf(stderr, "  %s: %d outputs on the device, %d on the CPU\n", what, g->n, r->n);
        return false;
    }
    for (int i = 0; i < r->n; i++) {
        bool same = g->nd[i] == r->nd[i] && g->dt[i] == r->dt[i];
        for (int d = 0; same && d < r->nd[i]; d++) same = g->shape[i][d] == r->shape[i][d];
        if (!same) {
            fprintf(stderr, "  %s: output %d differs in shape or dtype\n", what, i);
            return false;
        }
        double t = (r->dt[i] == EM_I64 || r->dt[i] == EM_I32 || r->dt[i] == EM_BOOL) ? 0 : tol;
        double mx = 0;
        for (int64_t e = 0; e < r->numel[i]; e++)
            if (isfinite(r->v[i][e]) && fabs(r->v[i][e]) > mx) mx = fabs(r->v[i][e]);
        for (int64_t e = 0; e < r->numel[i]; e++) {
            double a = g->v[i][e], b = r->v[i][e];
            bool bad;
            double ratio = 0;
            if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) bad = !(isnan(a) && isnan(b)) && a != b;
            else if (t == 0) bad = a != b;
            else {
                ratio = fabs(a - b) / (t * (fabs(b) + mx) + 1e-300);
                bad = ratio > 1;
            }
            if (ratio > *worst) *worst = ratio;
            if (bad) {
                fprintf(stderr, "  %s: output %d element %lld: device %.17g, cpu %.17g (tol %g)\n", what, i, (long long)e,
                        a, b, t);
                return false;
            }
        }
    }
    return true;
}

static int op_loop(void)
{
    int bad_rows = 0;
    printf("%-18s %-9s %4s %s\n", "op", "dtype", "runs", "worst err/tol");
    for (int op = 0; op < EM_NUM_OPS; op++) {
        if (em_op_table[op].cls == EM_CLASS_VIEW) continue;
        const row *rw = &rows[op];
        if (!rw->fn) {
            fprintf(stderr, "FAIL: op %s has no row in tests/test_cuda.c\n", em_op_table[op].name);
            failures++;
            continue;
        }
        for (int dt = 0; dt < EM_NUM_DTYPES; dt++) {
            if (!(rw->dtypes & DT(dt))) continue;
            int runs = 0;
            double worst = 0;
            bool ok = true;
            for (int v = 0; v < MAX_VARIANTS && ok; v++) {
                result rc = {0}, rg = {0};
                double tol_c, tol_g;
                bool skip_c, skip_g;
                char what[96];
                snprintf(what, sizeof what, "%s %s variant %d", em_op_table[op].name, em_dtype_name((em_dtype)dt), v);
                em_clear_error();
                bool okc = run_case(rw, EM_CPU, (em_dtype)dt, v, &rc, &tol_c, &skip_c);
                if (skip_c) {
                    result_free(&rc);
                    continue;
                }
                poison(gpu);
                bool okg = run_case(rw, gpu, (em_dtype)dt, v, &rg, &tol_g, &skip_g);
                checks++;
                double w = 0, tol = rw->exact ? 0 : (tol_c ? tol_c : default_tol((em_dtype)dt));
                if (!okc || !okg) {
                    fprintf(stderr, "  %s: the %s run failed\n", what, okc ? "device" : "CPU");
                    ok = false;
                } else {
                    ok = compare(what, &rg, &rc, tol, &w);
                }
                if (w > worst) worst = w;
                runs++;
                result_free(&rc);
                result_free(&rg);
            }
            printf("%-18s %-9s %4d %s%.3g\n", em_op_table[op].name, em_dtype_name((em_dtype)dt), runs,
                   ok ? "" : "FAIL ", worst);
            if (!ok) {
                failures++;
                bad_rows++;
            }
        }
    }
    return bad_rows;
}

/* ---- the runtime ------------------------------------------------------------------------------------------------------ */

static void cache_stats(em_device dev, int64_t *cached, int64_t *nsys)
{
    const em_backend *be = em__backend((em_device_type)dev.type);
    *cached = *nsys = 0;
    if (be && be->cache_stats) be->cache_stats(dev.index, cached, nsys);
}

/* One step of a small MLP-like workload, all intermediates scope-owned. */
static void step(em_tensor *x, em_tensor *w1, em_tensor *w2)
{
    em_scope_begin();
    em_tensor *h = em_gelu(em_matmul(x, w1));
    em_tensor *y = em_softmax(em_matmul(h, w2), -1);
    em_tensor *l = em_sum(em_log(em_add_scalar(y, 1e-6)), 0, NULL, false);
    em_tensor *g = em__unary_backward(EM_OP_GELU, h, h);
    (void)l;
    (void)g;
    em_scope_end();
}

static void test_runtime(void)
{
    const em_backend *be = em__backend((em_device_type)gpu.type);
    /* copies: odd sizes, both directions, and a strided destination */
    em_scope_begin();
    for (int64_t n = 1; n < 5000; n = n * 3 + 1) {
        em_tensor *h = em_arange(0, (double)n, 1, EM_I32, EM_CPU);
        em_tensor *d = em_to(h, gpu), *back = em_to(d, EM_CPU);
        CHECK(back && memcmp(em_data_ptr(back), em_data_ptr(h), (size_t)n * 4) == 0, "round trip of %lld i32", (long long)n);
    }
    em_tensor *dst = em_zeros(EM_SHAPE(6, 4), EM_F32, gpu);
    em_tensor *src = em_arange(0, 24, 1, EM_F64, EM_CPU);
    em_copy_(em_transpose(dst, 0, 1), em_view(src, EM_SHAPE(4, 6)));
    em_tensor *back = em_to(dst, EM_CPU);
    CHECK(back && em_get(back, (int64_t[]){5, 3}) == 23 && em_get(back, (int64_t[]){1, 2}) == 13,
          "em_copy_ from a CPU f64 tensor into a transposed CUDA f32 view");
    em_scope_end();

    /* a steady loop never goes back to cudaMalloc, and frees what it allocates */
    em_scope_begin();
    em_tensor *x = em_rand(EM_SHAPE(64, 128), EM_F32, gpu), *w1 = em_rand(EM_SHAPE(128, 256), EM_F32, gpu);
    em_tensor *w2 = em_rand(EM_SHAPE(256, 32), EM_F32, gpu);
    step(x, w1, w2);
    step(x, w1, w2);
    int64_t cached0, nsys0, cached1, nsys1;
    cache_stats(gpu, &cached0, &nsys0);
    int64_t live0 = em_memory_stats_get(gpu).live_bytes;
    for (int i = 0; i < 20; i++) step(x, w1, w2);
    cache_stats(gpu, &cached1, &nsys1);
    CHECK(nsys1 == nsys0, "a steady loop called cudaMalloc %lld more times", (long long)(nsys1 - nsys0));
    CHECK(em_memory_stats_get(gpu).live_bytes == live0, "live bytes moved from %lld to %lld", (long long)live0,
          (long long)em_memory_stats_get(gpu).live_bytes);
    em_scope_end();
    if (be->synchronize) CHECK(be->synchronize(gpu.index) == EM_OK, "synchronize: %s", em_last_error());
    if (be->empty_cache) {
        em_empty_cache(gpu);   /* alloc.c may route this to the backend ... */
        be->empty_cache(gpu.index);   /* ... and this certainly does */
        int64_t cached2, nsys2;
        cache_stats(gpu, &cached2, &nsys2);
        CHECK(cached2 < cached1 || cached1 == 0, "empty_cache kept %lld of %lld cached bytes", (long long)cached2,
              (long long)cached1);
    }
    /* an allocation the device cannot hold fails with EM_ERR_OOM, not a crash */
    em_clear_error();
    em_scope_begin();
    em_tensor *huge = em_empty(EM_SHAPE(1 << 20, 1 << 20, 64), EM_F32, gpu);
    CHECK(huge == NULL && em_last_status() == EM_ERR_OOM, "a 256 TiB tensor: %s", em_last_error());
    em_tensor *after = em_ones(EM_SHAPE(10), EM_F32, gpu);
    CHECK(after != NULL && em_item(em_sum(em_to(after, EM_CPU), 0, NULL, false)) == 10, "the device works after an OOM");
    em_scope_end();
    /* pinned host memory */
    if (be->host_alloc) {
        void *p = be->host_alloc(1 << 20);
        CHECK(p != NULL, "pinned host allocation");
        if (p) {
            memset(p, 1, 1 << 20);
            be->host_free(p, 1 << 20);
            void *q = be->host_alloc(1000000);
            CHECK(q == p, "pinned blocks are reused");
            be->host_free(q, 1000000);
        }
    }
    /* several GPUs: copies between them, and an op on the second */
    if (be->device_count && be->device_count() > 1) {
        em_scope_begin();
        em_tensor *a = em_rand(EM_SHAPE(100, 50), EM_F32, EM_CPU);
        em_tensor *b = em_to(em_to(em_to(a, gpu), EM_CUDA(1)), EM_CPU);
        CHECK(b && memcmp(em_data_ptr(a), em_data_ptr(b), 100 * 50 * 4) == 0, "cuda:0 -> cuda:1 copy");
        em_tensor *m = em_to(em_matmul(em_to(a, EM_CUDA(1)), em_transpose(em_to(a, EM_CUDA(1)), 0, 1)), EM_CPU);
        em_tensor *r = em_matmul(a, em_transpose(a, 0, 1));
        CHECK(m && r && fabs(em_item(em_sum(em_sub(m, r), 0, NULL, false))) < 1e-2, "matmul on cuda:1");
        em_scope_end();
    }
}

/* ---- a DistilBERT training step (forward with the loss, backward) on both devices ------------------------------
 * Two models from the same seed, one moved to the GPU; the same batch (with
 * padding); the global generator re-seeded before each forward, so dropout
 * draws the same Philox masks on both. The loss and every parameter's
 * gradient must agree (f32: 1e-4, normwise per tensor). AdamW is CPU-only
 * (optim/), so the step stops at the gradients. */
static em_distilbert_config tiny_config(void)
{
    return (em_distilbert_config){.vocab_size = 500, .n_layers = 2, .n_heads = 4, .dim = 64, .hidden_dim = 128,
                                  .num_labels = 2};
}

/* A fixed batch of B sequences of S tokens (a few padded) with labels, on dev;
 * forward with the loss only (the caller runs backward). */
static em_seqcls_output seqcls_forward_only(em_distilbert_seqcls *m, em_device dev, int64_t B, int64_t S,
                                            int64_t vocab);

static em_seqcls_output seqcls_step(em_distilbert_seqcls *m, em_device dev, int64_t B, int64_t S, int64_t vocab)
{
    em_seqcls_output o = seqcls_forward_only(m, dev, B, S, vocab);
    if (o.loss) em_backward(o.loss);
    return o;
}

static em_seqcls_output seqcls_forward_only(em_distilbert_seqcls *m, em_device dev, int64_t B, int64_t S,
                                            int64_t vocab)
{
    int64_t *ids = malloc(sizeof *ids * (size_t)(B * S)), *msk = malloc(sizeof *msk * (size_t)(B * S));
    int64_t *lab = malloc(sizeof *lab * (size_t)B);
    uint64_t x = 88172645463325252ull;
    for (int64_t i = 0; i < B * S; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = 1 + (int64_t)(x % (uint64_t)(vocab - 1));
        msk[i] = (i % S) < S - (i / S) % 3;   /* a few padded positions */
    }
    for (int64_t i = 0; i < B; i++) lab[i] = i % 2;
    em_seqcls_inputs in = {em_to(em_from_data(ids, EM_SHAPE(B, S), EM_I64), dev),
                           em_to(em_from_data(msk, EM_SHAPE(B, S), EM_I64), dev), NULL,
                           em_to(em_from_data(lab, EM_SHAPE(B), EM_I64), dev)};
    free(ids), free(msk), free(lab);
    em_set_seed(11);
    return em_distilbert_seqcls_forward(m, &in);
}

static void test_distilbert_step(void)
{
    em_distilbert_config cfg = tiny_config();
    em_set_seed(7);
    em_distilbert_seqcls *mc = em_distilbert_seqcls_new(&cfg);
    em_set_seed(7);
    em_distilbert_seqcls *mg = em_distilbert_seqcls_new(&cfg);
    CHECK(mc && mg && em_module_to(&mg->base, gpu) == EM_OK, "building and moving the model: %s", em_last_error());
    if (!mc || !mg) return;
    em_module_train(&mc->base, true);
    em_module_train(&mg->base, true);
    em_scope_begin();
    em_seqcls_output oc = seqcls_step(mc, EM_CPU, 4, 16, cfg.vocab_size);
    em_seqcls_output og = seqcls_step(mg, gpu, 4, 16, cfg.vocab_size);
    CHECK(oc.loss && og.loss, "forward: %s", em_last_error());
    if (oc.loss && og.loss) {
        double lc = em_item(oc.loss), lg = em_item(em_to(og.loss, EM_CPU));
        CHECK(fabs(lc - lg) <= 1e-5 * fabs(lc), "distilbert loss: cpu %.9g, cuda %.9g", lc, lg);
        em_named_tensors pc = em_module_named_parameters(&mc->base), pg = em_module_named_parameters(&mg->base);
        int bad = 0, with_grad = 0;
        for (int i = 0; i < pc.n && i < pg.n; i++) {
            em_tensor *gc = em_grad(pc.items[i].tensor), *gg = em_grad(pg.items[i].tensor);
            if (!gc && !gg) continue;
            if (!gc || !gg) {
                bad++;
                fprintf(stderr, "  %s: a gradient on one device only\n", pc.items[i].name);
                continue;
            }
            with_grad++;
            result r = {0}, g = {0};
            em_tensor *hs[2] = {gc, em_to(gg, EM_CPU)};
            result *rs[2] = {&r, &g};
            for (int k = 0; k < 2; k++) {
                em_tensor *h = em_contiguous(em_to_dtype(hs[k], EM_F64));
                rs[k]->n = 1;
                rs[k]->nd[0] = h->ndim;
                memcpy(rs[k]->shape[0], h->shape, sizeof(int64_t) * (size_t)h->ndim);
                rs[k]->dt[0] = hs[k]->dtype;
                rs[k]->numel[0] = em_numel(h);
                rs[k]->v[0] = malloc(sizeof(double) * (size_t)(em_numel(h) + 1));
                memcpy(rs[k]->v[0], em_data_ptr(h), sizeof(double) * (size_t)em_numel(h));
            }
            double w;
            if (!compare(pc.items[i].name, &g, &r, 1e-4, &w)) bad++;
            result_free(&r);
            result_free(&g);
        }
        CHECK(bad == 0 && with_grad > 10, "distilbert gradients: %d of %d differ", bad, with_grad);
        printf("distilbert step (tiny, dropout on): loss cpu %.7f cuda %.7f, %d gradients compared\n", lc, lg,
               with_grad);
        em_named_tensors_free(&pc);
        em_named_tensors_free(&pg);
    }
    em_scope_end();
    em_module_free(&mc->base);
    em_module_free(&mg->base);
}

/* ---- fused multi-tensor kernels: AdamW and GradScaler's unscale -----------------------------------------------------
 * The same tensors (made on the CPU from a seed) on the CPU and, as clones, on
 * the device (so in self-test mode the two sides never share storage); both
 * sides run the same public calls. Sizes straddle the kernels' 65536-element
 * chunks; the first three tensors are adjacent views of one flat buffer (the
 * optimizer's span path), the others separate. */
enum { NFUSED = 6 };
static const int64_t fused_n[NFUSED] = {70001, 1, 300, 65536, 131073, 7};

/* x itself on the CPU side, else a device clone of it (a new storage even when gpu is the CPU). */
static em_tensor *side(em_tensor *x, bool dev) { return dev ? em_clone(em_to(x, gpu)) : x; }

/* NFUSED tensors of dt from `seed`, N(0, scale): t[0..2] views of one flat buffer. */
static void fused_tensors(bool dev, em_dtype dt, uint64_t seed, double scale, em_tensor **t)
{
    int64_t nflat = fused_n[0] + fused_n[1] + fused_n[2], off = 0;
    em_set_seed(seed);
    em_tensor *flat = side(em_to_dtype(em_mul_scalar(em_randn(1, &nflat, EM_F64, EM_CPU), scale), dt), dev);
    for (int i = 0; i < 3; off += fused_n[i], i++) t[i] = em_narrow(flat, 0, off, fused_n[i]);
    for (int i = 3; i < NFUSED; i++)
        t[i] = side(em_to_dtype(em_mul_scalar(em_randn(1, &fused_n[i], EM_F64, EM_CPU), scale), dt), dev);
}

/* max|a - b| / max|b| (as f64 on the CPU; a NaN in either, a size or dtype
 * mismatch, or a failed copy: infinity); *same: bit-identical. */
static double rel_diff(em_tensor *a, em_tensor *b, bool *same)
{
    *same = false;
    double r = INFINITY;
    em_scope_begin();
    em_tensor *ha = em_contiguous(em_to(a, EM_CPU)), *hb = em_contiguous(em_to(b, EM_CPU));
    if (ha && hb && em_numel(ha) == em_numel(hb) && ha->dtype == hb->dtype) {
        *same = !memcmp(em_data_ptr(ha), em_data_ptr(hb), (size_t)em_numel(ha) * em_dtype_size(ha->dtype));
        em_tensor *da = em_to_dtype(ha, EM_F64), *db = em_to_dtype(hb, EM_F64);
        const double *x = em_data_ptr(da), *y = em_data_ptr(db);
        double num = 0, den = 0;
        bool nan = false;
        for (int64_t i = 0; i < em_numel(da); i++) {
            nan |= isnan(x[i]) || isnan(y[i]);
            num = fmax(num, fabs(x[i] - y[i]));
            den = fmax(den, fabs(y[i]));
        }
        r = nan ? INFINITY : num == 0 ? 0 : num / den;
    }
    em_scope_end();
    return r;
}

/* The optimizer state of dev (held on the GPU) saves through host copies,
 * loads back onto the device unchanged (save, load, save: the same bytes), and
 * equals the state of cpu, the same run on the CPU, within tol. */
static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool same = fa && fb;
    for (int ca = 0, cb = 0; same && ca != EOF;) {
        ca = fgetc(fa), cb = fgetc(fb);
        same = ca == cb;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}
static void check_state_round_trip(em_optimizer *dev, em_optimizer *cpu, double tol)
{
    char pa[96], pb[96], pc[96];
    snprintf(pa, sizeof pa, "/tmp/ember-test-cuda-%ld-dev.safetensors", (long)getpid());
    snprintf(pb, sizeof pb, "/tmp/ember-test-cuda-%ld-cpu.safetensors", (long)getpid());
    snprintf(pc, sizeof pc, "/tmp/ember-test-cuda-%ld-dev2.safetensors", (long)getpid());
    CHECK(em_optimizer_state_save(dev, pa) == EM_OK, "adamw state save (device): %s", em_last_error());
    CHECK(em_optimizer_state_load(dev, pa) == EM_OK, "adamw state load (device): %s", em_last_error());
    CHECK(em_optimizer_state_save(dev, pc) == EM_OK, "adamw state save again: %s", em_last_error());
    CHECK(em_optimizer_state_save(cpu, pb) == EM_OK, "adamw state save (cpu): %s", em_last_error());
    CHECK(same_file(pa, pc), "adamw state: save, load, save on the device changed the file");
    em_safetensors *sa = NULL, *sb = NULL;
    if (em_safetensors_open(pa, &sa) == EM_OK && em_safetensors_open(pb, &sb) == EM_OK) {
        CHECK(em_safetensors_count(sa) == em_safetensors_count(sb), "adamw state: %d tensors on the device, %d on the cpu",
              em_safetensors_count(sa), em_safetensors_count(sb));
        for (int i = 0; i < em_safetensors_count(sa); i++) {
            const char *name = em_safetensors_name(sa, i);
            em_tensor *tb = em_safetensors_get(sb, name);
            bool same;
            double r = tb ? rel_diff(em_safetensors_get(sa, name), tb, &same) : INFINITY;
            CHECK(r <= tol, "adamw state %s: device vs cpu relative difference %.3g", name, r);
        }
    } else {
        CHECK(0, "adamw state files: %s", em_last_error());
    }
    em_safetensors_close(sa);
    em_safetensors_close(sb);
    remove(pa), remove(pb), remove(pc);
}

/* AdamW on the device against optim's CPU loop: two groups (weight decay 0.1
 * with lr 1e-2; none with lr 3e-3), 5 steps with fresh gradients, parameter
 * 4 without a gradient at step 2. f32 within 1e-6 relative (the kernel mirrors
 * the CPU loop, so it is expected bit-identical); f64 within 1e-12. */
static void test_fused_adamw(void)
{
    for (int dti = 0; dti < 2; dti++)
        for (int ams = 0; ams < 2; ams++) {
            em_dtype dt = dti ? EM_F64 : EM_F32;
            double tol = dti ? 1e-12 : 1e-6, worst = 0;
            int n_same = 0, n_cmp = 0;
            bool ok = true;
            em_scope_begin();
            em_tensor *p[2][NFUSED];
            em_optimizer *o[2];
            for (int d = 0; d < 2; d++) {
                fused_tensors(d, dt, 41, 1.0, p[d]);
                for (int i = 0; i < NFUSED; i++) em_requires_grad_(p[d][i], true);
                em_param_group groups[2] = {{.params = p[d], .n_params = 4, .lr = 1e-2, .weight_decay = 0.1},
                                            {.params = p[d] + 4, .n_params = 2, .lr = 3e-3, .weight_decay = EM_ZERO}};
                em_adamw_opts opts = {.amsgrad = ams, .maximize = ams && dti, .betas = {0.8, 0.95}};
                o[d] = em_adamw_new_groups(groups, 2, &opts);
            }
            CHECK(o[0] && o[1], "adamw: building the optimizers: %s", em_last_error());
            for (int t = 0; t < 5 && ok && o[0] && o[1]; t++) {
                for (int d = 0; d < 2; d++) {
                    em_tensor *g[NFUSED];
                    fused_tensors(d, dt, 100 + (uint64_t)t, t == 3 ? 1e-3 : 1.0, g);
                    for (int i = 0; i < NFUSED; i++) em_set_grad(p[d][i], t == 2 && i == 4 ? NULL : g[i]);
                    em_status st = em_optimizer_step(o[d]);
                    CHECK(st == EM_OK, "adamw step %d on %s: %s", t, d ? "the device" : "the CPU", em_last_error());
                    ok &= st == EM_OK;
                }
                for (int i = 0; i < NFUSED && ok; i++) {
                    bool same;
                    double r = rel_diff(p[1][i], p[0][i], &same);
                    n_same += same;
                    n_cmp++;
                    worst = fmax(worst, r);
                    CHECK(r <= tol, "adamw %s%s step %d param %d: relative difference %.3g (tol %g)",
                          em_dtype_name(dt), ams ? " amsgrad" : "", t, i, r, tol);
                }
            }
            for (int i = 0; i < NFUSED && ok; i++)
                CHECK(em_optimizer_param_step(o[1], i < 4 ? 0 : 1, i < 4 ? i : i - 4) == (i == 4 ? 4 : 5),
                      "adamw: param %d counted %g steps", i, em_optimizer_param_step(o[1], i < 4 ? 0 : 1, i < 4 ? i : i - 4));
            printf("fused adamw %s%s: 5 steps, worst relative difference %.3g, %d of %d params bit-identical\n",
                   em_dtype_name(dt), ams ? " amsgrad" : "", worst, n_same, n_cmp);
            if (ok) check_state_round_trip(o[1], o[0], tol);
            em_optimizer_free(o[0]);
            em_optimizer_free(o[1]);
            em_scope_end();
        }
}

/* GradScaler's unscale on device gradients against the CPU: finite gradients
 * are unscaled to the same bits (f32 and f64 parameters; inv_scale 1/3000 is
 * inexact) and the step runs; an inf or a NaN planted in the second chunk of
 * one gradient sets found_inf: the step is skipped and the scale backs off. */
static void test_fused_unscale(void)
{
    for (int inject = 0; inject < 3; inject++) {   /* none, inf, NaN */
        em_scope_begin();
        em_tensor *p[2][NFUSED + 1], *g[2][NFUSED + 1], *before[NFUSED + 1];
        em_optimizer *o[2];
        em_grad_scaler *s[2];
        for (int d = 0; d < 2; d++) {
            fused_tensors(d, EM_F32, 7, 1.0, p[d]);
            fused_tensors(d, EM_F32, 8, 3000.0, g[d]);
            em_set_seed(9);   /* one f64 parameter too */
            p[d][NFUSED] = side(em_randn(EM_SHAPE(1000), EM_F64, EM_CPU), d);
            g[d][NFUSED] = side(em_mul_scalar(em_randn(EM_SHAPE(1000), EM_F64, EM_CPU), 3000.0), d);
            if (d == 1 && inject) em_fill_(em_narrow(g[d][0], 0, 66000, 1), inject == 1 ? INFINITY : NAN);
            for (int i = 0; i <= NFUSED; i++) {
                em_requires_grad_(p[d][i], true);
                em_set_grad(p[d][i], g[d][i]);
            }
            o[d] = em_adamw_new(p[d], NFUSED + 1, &(em_adamw_opts){.lr = 1e-2});
            s[d] = em_grad_scaler_new(&(em_grad_scaler_opts){.init_scale = 3000.0});
        }
        for (int i = 0; i <= NFUSED; i++) before[i] = em_clone(em_to(p[1][i], EM_CPU));
        em_status st0 = em_grad_scaler_unscale_(s[0], o[0]), st1 = em_grad_scaler_unscale_(s[1], o[1]);
        CHECK(st0 == EM_OK && st1 == EM_OK, "unscale: %s", em_last_error());
        int n_same = 0;
        for (int i = 0; i <= NFUSED && !inject; i++) {
            bool same;
            double r = rel_diff(g[1][i], g[0][i], &same);
            n_same += same;
            CHECK(same, "unscale: gradient %d differs from the CPU's (relative %.3g)", i, r);
        }
        bool stepped = !inject;
        CHECK(em_grad_scaler_step(s[1], o[1], &stepped) == EM_OK && stepped == !inject,
              "scaler step with %s: stepped %d: %s", inject == 0 ? "finite gradients" : inject == 1 ? "an inf" : "a NaN",
              stepped, em_last_error());
        em_grad_scaler_update(s[1]);
        double want = inject ? 1500.0 : 3000.0;
        CHECK(em_grad_scaler_get_scale(s[1]) == want, "scale after update: %g, expected %g",
              em_grad_scaler_get_scale(s[1]), want);
        for (int i = 0; i <= NFUSED; i++) {
            bool same;
            rel_diff(p[1][i], before[i], &same);
            CHECK(same == (bool)inject, "param %d %s", i, inject ? "changed by a skipped step" : "not updated");
        }
        if (!inject) printf("fused unscale: %d of %d gradients bit-identical to the CPU's\n", n_same, NFUSED + 1);
        for (int d = 0; d < 2; d++) {
            em_optimizer_free(o[d]);
            em_grad_scaler_free(s[d]);
        }
        em_scope_end();
    }
    /* the op itself (tensor/fused.h): inv == 1 checks without multiplying */
    {
        em_scope_begin();
        em_tensor *a = em_to(em_arange(0, 200000, 1, EM_F32, EM_CPU), gpu), *b = em_ones(EM_SHAPE(3), EM_F64, gpu);
        em_tensor *ts[2] = {a, b};
        bool found = false;
        CHECK(em__unscale(ts, 2, 1.0f, &found) == EM_OK && !found, "unscale op, finite: found %d: %s", found,
              em_last_error());
        em_fill_(em_narrow(b, 0, 2, 1), -INFINITY);
        found = false;
        CHECK(em__unscale(ts, 2, 0.5f, &found) == EM_OK && found, "unscale op, -inf in an f64 tensor");
        em_tensor *h = em_to(a, EM_CPU);
        CHECK(h && em_get(h, (int64_t[]){199999}) == 99999.5 && em_get(h, (int64_t[]){3}) == 1.5,
              "unscale op: a[199999] = %g, a[3] = %g", h ? em_get(h, (int64_t[]){199999}) : NAN,
              h ? em_get(h, (int64_t[]){3}) : NAN);
        em_scope_end();
    }
}

/* ---- timing (EMBER_CUDA_BENCH=1) ------------------------------------------------------------------------------------ */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*bench_fn)(em_tensor **in);
static void b_matmul(em_tensor **in) { em_matmul(in[0], in[1]); }
static void b_add(em_tensor **in) { em_add(in[0], in[1]); }
static void b_gelu(em_tensor **in) { em_gelu(in[0]); }
static void b_softmax(em_tensor **in) { em_softmax(in[0], -1); }
static void b_layer_norm(em_tensor **in) { em_layer_norm(in[0], in[1], in[2], 1e-12, NULL, NULL); }
static void b_sum(em_tensor **in) { em_sum(in[0], EM_DIMS(0), false); }
static void b_cast(em_tensor **in) { em_to_dtype(in[0], EM_BF16); }
static em_optimizer *bench_opt;
static void b_adamw(em_tensor **in) { (void)in; em_optimizer_step(bench_opt); }

/* Median seconds per call of fn, over 5 runs of `iters` calls after a warm-up. */
static double time_it(bench_fn fn, em_tensor **in, int iters)
{
    const em_backend *be = em__backend((em_device_type)gpu.type);
    double t[5];
    for (int r = -1; r < 5; r++) {
        be->synchronize(gpu.index);
        double t0 = now();
        em_scope_begin();
        for (int i = 0; i < iters; i++) fn(in);
        em_scope_end();
        be->synchronize(gpu.index);
        if (r >= 0) t[r] = (now() - t0) / iters;
    }
    qsort(t, 5, sizeof *t, cmp_d);
    return t[2];
}

static void bench(void)
{
    printf("\nbench (cuda:0, median of 5)\n%-34s %10s %12s\n", "kernel", "us/call", "rate");
    em_scope_begin();
    for (int dt = 0; dt < 2; dt++) {
        em_dtype d = dt ? EM_BF16 : EM_F32;
        em_tensor *a = em_to_dtype(em_randn(EM_SHAPE(4096, 4096), EM_F32, gpu), d);
        em_tensor *b = em_to_dtype(em_randn(EM_SHAPE(4096, 4096), EM_F32, gpu), d);
        em_tensor *in[2] = {a, b};
        double s = time_it(b_matmul, in, 20);
        printf("%-34s %10.1f %9.1f TF/s\n", dt ? "matmul 4096^3 bf16" : "matmul 4096^3 f32", s * 1e6,
               2.0 * 4096 * 4096 * 4096 / s / 1e12);
    }
    em_set_float32_matmul_precision("high");
    {
        em_tensor *in[2] = {em_randn(EM_SHAPE(4096, 4096), EM_F32, gpu), em_randn(EM_SHAPE(4096, 4096), EM_F32, gpu)};
        double s = time_it(b_matmul, in, 20);
        printf("%-34s %10.1f %9.1f TF/s\n", "matmul 4096^3 f32 (TF32)", s * 1e6, 2.0 * 4096 * 4096 * 4096 / s / 1e12);
    }
    em_set_float32_matmul_precision("highest");
    /* DistilBERT config A (dim 768, 6 layers, batch 8, seq 128): forward with the loss and backward, f32 */
    em_set_seed(0);
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&(em_distilbert_config){.num_labels = 2});
    if (m && em_module_to(&m->base, gpu) == EM_OK) {
        em_module_train(&m->base, true);
        const em_backend *be = em__backend((em_device_type)gpu.type);
        double t[5];
        for (int r = -2; r < 5; r++) {
            be->synchronize(gpu.index);
            double t0 = now();
            em_scope_begin();
            seqcls_step(m, gpu, 8, 128, 30522);
            em_scope_end();
            em_module_zero_grad(&m->base, false);
            be->synchronize(gpu.index);
            if (r >= 0) t[r] = now() - t0;
        }
        qsort(t, 5, sizeof *t, cmp_d);
        printf("%-34s %10.1f %9.0f tok/s\n", "distilbert A fwd+bwd f32", t[2] * 1e6, 8 * 128 / t[2]);
    } else {
        printf("distilbert A: %s\n", em_last_error());
    }
    /* The same model, a full training step as issue 8's bench asks: forward with the loss under
     * bf16 autocast, backward, AdamW (the fused kernel), zero_grad. MFU counts 6 FLOPs per
     * parameter per token for the GEMMs (embeddings excluded) plus the attention products, against
     * the H200's measured bf16 GEMM ceiling of about 790 TFLOP/s (../shared/GPU.md). */
    if (m) {
        em_named_tensors ps = em_module_named_parameters(&m->base);
        em_tensor **pv = malloc(sizeof *pv * (size_t)ps.n);
        for (int i = 0; i < ps.n; i++) pv[i] = ps.items[i].tensor;
        em_optimizer *opt = em_adamw_new(pv, ps.n, &(em_adamw_opts){.lr = 2e-5});
        const em_backend *be = em__backend((em_device_type)gpu.type);
        double t[5];
        bool ok = opt != NULL;
        for (int r = -2; r < 5 && ok; r++) {
            be->synchronize(gpu.index);
            double t0 = now();
            em_scope_begin();
            em_seqcls_output o = {0};
            EM_AUTOCAST_REGION(EM_BF16) { o = seqcls_forward_only(m, gpu, 8, 128, 30522); }
            ok = o.loss != NULL;
            if (ok) em_backward(o.loss);
            em_scope_end();
            ok = ok && em_optimizer_step(opt) == EM_OK;
            em_optimizer_zero_grad(opt);
            be->synchronize(gpu.index);
            if (r >= 0) t[r] = now() - t0;
        }
        if (ok) {
            qsort(t, 5, sizeof *t, cmp_d);
            double L = 6, D = 768, F = 3072, S = 128, B = 8, tok = B * S;
            double flops = 6.0 * tok * (L * (4 * D * D + 2 * D * F) + D * D + 2 * D) + 3.0 * L * B * 4 * S * S * D;
            printf("%-34s %10.1f %9.0f tok/s\n", "distilbert A step bf16+adamw", t[2] * 1e6, tok / t[2]);
            printf("distilbert A step bf16+adamw: %.1f TFLOP/s, MFU %.1f%% of 790 TFLOP/s\n", flops / t[2] / 1e12,
                   100.0 * flops / t[2] / 790e12);
        } else {
            printf("distilbert A step bf16: %s\n", em_last_error());
        }
        em_optimizer_free(opt);
        free(pv);
        em_named_tensors_free(&ps);
    }
    if (m) em_module_free(&m->base);
    int64_t n = 64 << 20;
    em_tensor *x = em_randn(1, &n, EM_F32, gpu), *y = em_randn(1, &n, EM_F32, gpu);
    em_tensor *in2[2] = {x, y};
    double s = time_it(b_add, in2, 20);
    printf("%-34s %10.1f %9.0f GB/s\n", "add 64M f32", s * 1e6, 12.0 * n / s / 1e9);
    s = time_it(b_gelu, in2, 20);
    printf("%-34s %10.1f %9.0f GB/s\n", "gelu 64M f32", s * 1e6, 8.0 * n / s / 1e9);
    s = time_it(b_cast, in2, 20);
    printf("%-34s %10.1f %9.0f GB/s\n", "f32 -> bf16 64M", s * 1e6, 6.0 * n / s / 1e9);
    s = time_it(b_sum, in2, 20);
    printf("%-34s %10.1f %9.0f GB/s\n", "sum 64M f32", s * 1e6, 4.0 * n / s / 1e9);
    em_tensor *att = em_randn(EM_SHAPE(32 * 12 * 128, 128), EM_F32, gpu);
    em_tensor *in3[1] = {att};
    s = time_it(b_softmax, in3, 50);
    printf("%-34s %10.1f %9.0f GB/s\n", "softmax [49152,128] f32", s * 1e6, 8.0 * 49152 * 128 / s / 1e9);
    int64_t D = 768;
    em_tensor *ln[3] = {em_randn(EM_SHAPE(4096, 768), EM_F32, gpu), em_ones(1, &D, EM_F32, gpu), em_zeros(1, &D, EM_F32, gpu)};
    s = time_it(b_layer_norm, ln, 50);
    printf("%-34s %10.1f %9.0f GB/s\n", "layer_norm [4096,768] f32", s * 1e6, 8.0 * 4096 * 768 / s / 1e9);
    /* fused AdamW: 66M f32 parameters in 100 tensors (DistilBERT-sized), 28 bytes moved per element */
    {
        em_tensor *ps[100];
        int64_t pn = 660000, total = 0;
        for (int i = 0; i < 100; i++) {
            ps[i] = em_requires_grad_(em_randn(1, &pn, EM_F32, gpu), true);
            em_set_grad(ps[i], em_randn(1, &pn, EM_F32, gpu));
            total += pn;
        }
        bench_opt = em_adamw_new(ps, 100, &(em_adamw_opts){.lr = 1e-4});
        s = time_it(b_adamw, NULL, 10);
        printf("%-34s %10.1f %9.0f GB/s\n", "adamw step 66M f32 (fused)", s * 1e6, 28.0 * (double)total / s / 1e9);
        em_optimizer_free(bench_opt);
    }
    em_scope_end();
}

/* Lazy CUDA initialization (tensor/cuda/runtime.cu): loading ember makes no
 * driver call, so a child forked before this process's first CUDA use can
 * use the GPU; were CUDA initialized at load, the child's first CUDA call
 * would fail. (Check's fork-mode suites rely on the same property.) Returns
 * the child's status: 0 ok, 77 no GPU (from the child's own probe), else a failure. */
static int forked_child_uses_gpu(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return 0;   /* cannot fork: nothing to learn */
    if (pid == 0) {
        if (!em__backend(EM_DEVICE_CUDA)) _exit(77);
        em_tensor *h = em_to(em_to(em_arange(0, 1000, 1, EM_F32, EM_CPU), EM_CUDA(0)), EM_CPU);
        if (!h) fprintf(stderr, "child: %s\n", em_last_error());
        _exit(h && em_get(h, (int64_t[]){999}) == 999 ? 0 : 1);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

int main(void)
{
    bool self = getenv("EMBER_CUDA_SELFTEST") && atoi(getenv("EMBER_CUDA_SELFTEST"));
    if (!self) {
        int r = forked_child_uses_gpu();   /* before this process touches CUDA */
        if (r == 77) {
            printf("no CUDA device: skipped\n");
            return 77;
        }
        CHECK(r == 0, "a child forked before the first CUDA use could not use the GPU (exit %d): CUDA initialized at load?", r);
    }
    if (!self && !em__backend(EM_DEVICE_CUDA)) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    gpu = self ? EM_CPU : EM_CUDA(0);
    int bad = op_loop();
    if (!self) test_runtime();
    test_distilbert_step();   /* in self-test mode: the CPU against itself */
    test_fused_adamw();
    test_fused_unscale();
    if (!self && getenv("EMBER_CUDA_BENCH") && atoi(getenv("EMBER_CUDA_BENCH"))) bench();
    printf("\n%d checks, %d failed (%d op rows)\n", checks, failures, bad);
    return failures ? 1 : 0;
}
