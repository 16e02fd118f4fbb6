/* ember — the pointwise unary ops: one row per op, and everything else about
 * the op is generated from its row (CONTRIBUTING.md "Adding a tensor op"):
 *
 *   ops.h, optable.c        EM_OP_<NAME> and its op-table row (class UNARY); for a DERIV
 *                           backward also EM_OP_<NAME>_BWD ("<name>_backward", class NN)
 *   op_elementwise.c        the front-end em_<name>(a): dtype check, autocast, output, dispatch
 *   cpu/k_elementwise.c     em_cpu_<NAME>: f32 and f64 loops (i64 and i32 for NUMERIC); f16
 *                           and bf16 through the f32 loop; em_cpu_<NAME>_BWD likewise
 *   cuda/k_elementwise.cu   em_cuda_<NAME> (and _BWD): the same expression compiled for the device
 *   autograd/rules.c        the backward rule's row (and its rule, for DERIV)
 *   tests                   the value test against `ref` (test_elementwise.c), gradcheck,
 *                           contiguous and transposed, and the _BWD kernel against its reference
 *                           derivative (test_gradcheck.c), CUDA against the CPU (test_cuda.c)
 *
 * Only the public declaration of em_<name>, with its doc comment, is written
 * by hand (tensor/tensor.h; then tools/gen-at-macros). Ops of other kinds
 * (binary, reductions, ops with parameters) are written out by hand: ops.h.
 *
 * X(U, NAME, name, dtypes, cost, f, backward, ref, grad_domain, values, parity)
 *   U            passed through (EM_UNARY_LIST's second argument)
 *   NAME, name   EM_OP_<NAME>; em_<name>, and "name" in messages and graphs
 *   dtypes       FLOATING: f32 f64 f16 bf16. NUMERIC: also i64 i32; f must then round
 *                nothing (sign, selection, wrapping integer arithmetic): the CUDA parity
 *                test compares NUMERIC ops bit for bit
 *   cost         HEAVY (tens of cycles an element: more threads sooner) or LIGHT
 *   f            f(x): an expression in x of the compute type C (float, double, or the
 *                integer type). It is compiled as C for the CPU and as C++ for CUDA, so
 *                it may use operators, casts, constants written (C)k (a bare 0.5 would
 *                compute in double), and the m_* functions both define:
 *                  m_neg m_abs m_exp m_log m_sqrt m_tanh m_sin m_cos m_sigmoid
 *                  m_gelu m_gelu_tanh m_gelu_grad m_gelu_tanh_grad
 *                (f32 on the CPU: vmath.h's vectorizing forms for exp, tanh, sigmoid,
 *                gelu and gelu_tanh; libm otherwise; CUDA: libdevice).
 *   backward     DERIV(df, dref): the gradient is dy * df, df = f'(x) written as f is,
 *                computed by the fused kernel <NAME>_BWD from the saved input; dref is
 *                f'(x) in double, the test's reference. DERIV_Y(df, dref): the same, and
 *                autograd also keeps the output y as a hint, passed to the _BWD kernel as
 *                in[2] (a kernel may read it for a shortcut with the same result, or
 *                ignore it: GELU's f32 CPU kernel takes Phi(x) as y / x, ops.h). Or
 *                RULE(fn, save_in, save_out):
 *                fn in autograd/rules.c composes the gradient from ops.
 *   ref          f(x) in double (math.h), the value test's reference
 *   grad_domain  gradcheck's inputs (f64, [3,4] and a transposed [3,4]):
 *                ANY U[-2,2); POSITIVE U[0.5,2); NONZERO |x| in [0.1,2), for kinks at 0
 *   values       (lo, hi): the value test's inputs (every dtype, several layouts)
 *   parity       (lo, hi): the CUDA parity test's inputs
 *
 * The columns are macro-expanded where the list is expanded, so a file that
 * expands it must not define an object-like macro named like a column's tokens
 * (NUMERIC, ANY, x, C, ...; tests/test_cuda.c calls its dtype mask NUMS).
 */
#ifndef EMBER_UNARY_OPS_H
#define EMBER_UNARY_OPS_H

/* clang-format off */
#define EM_UNARY_LIST(X, U)                                                                                          \
    X(U, NEG, neg, NUMERIC, LIGHT, m_neg(x), RULE(bw_neg, 0, 0), -x, ANY, (-5, 5), (-9, 9))                          \
    X(U, ABS, abs, NUMERIC, LIGHT, m_abs(x), RULE(bw_abs, 1, 0), fabs(x), NONZERO, (-5, 5), (-9, 9))                 \
    X(U, EXP, exp, FLOATING, HEAVY, m_exp(x), RULE(bw_exp, 0, 1), exp(x), ANY, (-20, 20), (-8, 8))                   \
    X(U, LOG, log, FLOATING, HEAVY, m_log(x), RULE(bw_log, 1, 0), log(x), POSITIVE, (0.01, 100), (0.01, 100))        \
    X(U, SQRT, sqrt, FLOATING, LIGHT, m_sqrt(x), RULE(bw_sqrt, 0, 1), sqrt(x), POSITIVE, (0, 100), (0, 100))         \
    X(U, RSQRT, rsqrt, FLOATING, LIGHT, (C)1 / m_sqrt(x), RULE(bw_rsqrt, 0, 1), 1 / sqrt(x), POSITIVE, (0.01, 100),  \
      (0.01, 100))                                                                                                   \
    X(U, TANH, tanh, FLOATING, HEAVY, m_tanh(x), RULE(bw_tanh, 0, 1), tanh(x), ANY, (-6, 6), (-5, 5))                \
    X(U, SIGMOID, sigmoid, FLOATING, HEAVY, m_sigmoid(x), RULE(bw_sigmoid, 0, 1), 1 / (1 + exp(-x)), ANY, (-30, 30), \
      (-12, 12))                                                                                                     \
    X(U, RELU, relu, NUMERIC, LIGHT, x <= 0 ? (C)0 : x, RULE(bw_relu, 0, 1), isnan(x) ? x : x > 0 ? x : 0, NONZERO,  \
      (-5, 5), (-9, 9))                                                                                              \
    X(U, GELU, gelu, FLOATING, HEAVY, m_gelu(x),                                                                     \
      DERIV_Y(m_gelu_grad(x), 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI)),              \
      0.5 * x * (1 + erf(x / sqrt(2.0))), ANY, (-8, 8), (-6, 6))                                                     \
    X(U, GELU_TANH, gelu_tanh, FLOATING, HEAVY, m_gelu_tanh(x),                                                      \
      DERIV(m_gelu_tanh_grad(x), 0.5 * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) +                     \
                                     0.5 * x * (1 - pow(tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)), 2)) *     \
                                         sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x)),                               \
      0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))), ANY, (-6, 6), (-6, 6))                      \
    X(U, SIN, sin, FLOATING, HEAVY, m_sin(x), RULE(bw_sin, 1, 0), sin(x), ANY, (-10, 10), (-6, 6))                   \
    X(U, COS, cos, FLOATING, HEAVY, m_cos(x), RULE(bw_cos, 1, 0), cos(x), ANY, (-10, 10), (-6, 6))                   \
    X(U, SILU, silu, FLOATING, HEAVY, x * m_sigmoid(x),                                                              \
      DERIV(m_sigmoid(x) * ((C)1 + x * ((C)1 - m_sigmoid(x))), 1 / (1 + exp(-x)) * (1 + x * exp(-x) / (1 + exp(-x)))), \
      x / (1 + exp(-x)), ANY, (-20, 20), (-12, 12))
/* clang-format on */

/* ---- views of the list, for the files that expand it ---------------------------------------------
 * EM_UNARY_OPS(X):       X(NAME, name, dtypes, cost, f, backward, ref, grad_domain, values, parity)
 * EM_UNARY_OP_NAMES(X):  X(NAME)
 * EM_UNARY_BWD_OPS(X):   X(NAME, name, df, dref, values, parity) for the DERIV(_Y) rows
 * EM_UNARY_BWD_NAMES(X): X(NAME_BWD) for the DERIV(_Y) rows */
#define EM_UNARY_OPS(X) EM_UNARY_LIST(EM__UN_ALL, X)
#define EM_UNARY_OP_NAMES(X) EM_UNARY_LIST(EM__UN_NAME, X)
#define EM_UNARY_BWD_OPS(X) EM_UNARY_LIST(EM__UN_BWD, X)
#define EM_UNARY_BWD_NAMES(X) EM_UNARY_LIST(EM__UN_BWD_NAME, X)

#define EM__UN_ALL(X, ...) X(__VA_ARGS__)
#define EM__UN_NAME(X, NAME, ...) X(NAME)
/* `EM__UN_IF_##bw(...)` keeps its argument for DERIV(...) and DERIV_Y(...) and drops it for RULE(...);
 * EM__UN_DF_##bw and EM__UN_DREF_##bw pick DERIV's two fields. */
#define EM__UN_BWD(X, NAME, name, dt, cost, f, bw, ref, dom, values, parity) \
    EM__UN_IF_##bw(X(NAME, name, EM__UN_DF_##bw, EM__UN_DREF_##bw, values, parity))
#define EM__UN_BWD_NAME(X, NAME, name, dt, cost, f, bw, ...) EM__UN_IF_##bw(X(NAME##_BWD))
#define EM__UN_IF_DERIV(df, dref) EM__UN_KEEP
#define EM__UN_IF_DERIV_Y(df, dref) EM__UN_KEEP
#define EM__UN_IF_RULE(fn, si, so) EM__UN_DROP
#define EM__UN_DF_DERIV(df, dref) df
#define EM__UN_DF_DERIV_Y(df, dref) df
#define EM__UN_DREF_DERIV(df, dref) dref
#define EM__UN_DREF_DERIV_Y(df, dref) dref
#define EM__UN_DF_RULE(fn, si, so)
#define EM__UN_DREF_RULE(fn, si, so)
#define EM__UN_KEEP(...) __VA_ARGS__
#define EM__UN_DROP(...)

#endif
