/** @file
 * ember — autograd/: reverse-mode automatic differentiation (DESIGN.md §3).
 *
 * Every op of tensor.h records a node when grad mode is on and one of its
 * inputs requires grad. em_backward walks those nodes from the loss, newest
 * first, and adds gradients into the .grad of the leaves.
 *
 * Ownership:
 *   - A tensor's grad (em_grad) belongs to the tensor: do not release it.
 *   - Nodes hold references to the tensors they saved, and release them after
 *     backward unless retain_graph was asked for.
 *   - Hooks' user pointers stay the caller's.
 * Misuse (aborts through the misuse handler): backward twice through a freed
 * graph, backward from a non-scalar without a gradient, backward from a tensor
 * that does not require grad, an in-place change to a saved tensor.
 */
#ifndef EMBER_AUTOGRAD_H
#define EMBER_AUTOGRAD_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A recorded op in the graph (opaque): the grad_fn of the tensors it made. */
typedef struct em_node em_node;

/* ---- leaves and grad mode --------------------------------------------------- */
/** Marks t (a leaf: made by the user, not by a recorded op) as requiring grad, or
 * clears the mark. Returns t (no new reference). Misuse: t is not a leaf, or
 * requires_grad for a non-float dtype. NULL on OOM. */
em_tensor *em_requires_grad_(em_tensor *t, bool requires_grad);
/** Whether gradients flow to t: a leaf marked so, or the result of a recorded op. */
bool em_requires_grad(const em_tensor *t);
/** Whether t was not made by a recorded op (plain tensors are leaves too). */
bool em_is_leaf(const em_tensor *t);
/** The accumulated gradient of a leaf, or NULL. Owned by t. */
em_tensor *em_grad(const em_tensor *t);
/** Replaces t's gradient (NULL clears it, like `p.grad = None`). The tensor is retained.
 * Misuse: grad's shape or dtype differs from t's. */
void em_set_grad(em_tensor *t, em_tensor *grad);
/** A new tensor sharing t's storage, without history (it does not require grad).
 * Owned like an op result. */
em_tensor *em_detach(em_tensor *t);
/** The node that made t ("add", "matmul", ...), or NULL for leaves. */
const char *em_grad_fn_name(const em_tensor *t);

/** Whether ops record for autograd on this thread (true unless turned off). */
bool em_is_grad_enabled(void);
/** Turns recording on or off on this thread; returns the previous mode. */
bool em_set_grad_enabled(bool enabled);
/** EM_NO_GRAD { ... } — recording off inside; do not return/break out of it. */
#define EM_NO_GRAD for (int em__g_ = 0, em__p_ = em_set_grad_enabled(false); !em__g_; em__g_ = 1, em_set_grad_enabled(em__p_))

/* ---- backward ------------------------------------------------------------------ */
/** Options of em_backward_ex; a zeroed struct means em_backward. */
typedef struct em_backward_opts {
    em_tensor *grad;      /**< d(root): required unless root has one element (then 1) */
    bool retain_graph;    /**< keep saved tensors for another backward               */
} em_backward_opts;
/** Back-propagates from root (one element: d(root) = 1) and accumulates into
 * the .grad of every leaf that requires grad; then frees the graph's saved
 * tensors. NULL root: nothing. Misuse: see the file comment. */
void em_backward(em_tensor *root);
/** em_backward with a gradient for a non-scalar root (root's shape) and/or
 * retain_graph. opts may be NULL. */
void em_backward_ex(em_tensor *root, const em_backward_opts *opts);

/* ---- hooks --------------------------------------------------------------------- */
/** Called with t's gradient as soon as it is computed (before it is accumulated
 * into a leaf's .grad or passed on). Return a replacement (owned by the current
 * scope, e.g. an op result) or NULL to keep the gradient as it is. */
typedef em_tensor *(*em_grad_hook)(em_tensor *grad, void *user);
/** Registers fn on t (which must require grad; misuse otherwise). Hooks run in
 * registration order, each on the previous one's result. */
void em_register_hook(em_tensor *t, em_grad_hook fn, void *user);
/** Called on a leaf right after its .grad was accumulated (DDP starts bucket
 * all-reduces from here). Hooks fire in the order they were registered. */
typedef void (*em_post_accumulate_hook)(em_tensor *leaf, void *user);
/** Registers fn on leaf, which must be a leaf that requires grad (misuse otherwise). */
void em_register_post_accumulate_grad_hook(em_tensor *leaf, em_post_accumulate_hook fn, void *user);
/** Removes the hook registered on t as (fn, user) (torch's handle.remove();
 * here the pair is the handle). Returns true when one was found and removed,
 * false otherwise (also for a tensor with no autograd history). Only the first
 * match goes; later hooks keep their order. Not from inside a hook that runs
 * on the same tensor during backward. */
bool em_remove_hook(em_tensor *t, em_grad_hook fn, void *user);
/** em_remove_hook for a post-accumulate-grad hook on a leaf. */
bool em_remove_post_accumulate_grad_hook(em_tensor *leaf, em_post_accumulate_hook fn, void *user);

/* ---- custom functions (torch.autograd.Function) -------------------------------- */
/** An op written in C with its own backward (autograd/function.c). Define the
 * two callbacks, then call em_function_apply where the op is used:
 *
 *     static em_status fwd(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
 *     {   em_ctx_save_for_backward(ctx, 1, in);          // x, for the derivative
 *         out[0] = em_mul(in[0], em_sigmoid(in[0]));       // silu(x) = x sigmoid(x)
 *         return out[0] ? EM_OK : em_last_status(); }
 *     static void bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
 *     {   em_tensor *x = em_ctx_saved(ctx, 0), *s = em_sigmoid(x);
 *         if (em_ctx_needs_input_grad(ctx, 0))           // silu' = s (1 + x - x s)
 *             gin[0] = em_mul(gout[0], em_mul(s, em_add_scalar(em_sub(x, em_mul(x, s)), 1))); }
 *     static const em_function silu_fn = {.name = "SiLU", .forward = fwd, .backward = bwd};
 *     ...
 *     em_tensor *y;
 *     em_function_apply(&silu_fn, 1, &x, 1, &y, NULL);
 *
 * Contract:
 *   - forward runs with recording off (its ops build no graph) and under the
 *     caller's autocast region; it writes n_out NEW tensors (op results, owned
 *     by the current scope, none of them one of the inputs) into out[] and
 *     returns EM_OK, or an error status (em_function_apply then returns it and records
 *     nothing). Scalars go to em_ctx_set_scalar, tensors to
 *     em_ctx_save_for_backward (inputs or outputs; they are version-checked:
 *     an in-place change before backward is misuse, as for built-in ops).
 *   - backward runs during em_backward with recording off, autocast off, inside
 *     a scope that owns what it makes. gout[j] is the gradient of out[j]
 *     (zeros when out[j] was not used; never NULL). It writes gin[i] for the
 *     inputs with em_ctx_needs_input_grad(ctx, i) true, of in[i]'s shape (NULL
 *     means a zero gradient); a wrong shape is misuse naming the function.
 *   - An output marked with em_ctx_mark_non_differentiable (from forward) does
 *     not require grad, and its gout is always zeros.
 *   - When recording is off or no input requires grad, only forward runs.
 *   - gradcheck (f64), DDP's hooks and gradient accumulation see the node like
 *     any built-in op.
 * n_in >= 0; 1 <= n_out <= 4. The em_function must outlive the graph. */
typedef struct em_function_ctx em_function_ctx;
/** A custom function: its name and its two callbacks (see em_function_ctx). */
typedef struct em_function {
    const char *name;   /**< em_grad_fn_name and messages ("SiLU") */
    /** computes out[0..n_out) from in[0..n_in) (see the contract above) */
    em_status (*forward)(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out);
    /** writes gin[i] from gout[0..n_out) for the inputs that need it */
    void (*backward)(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin);
} em_function;
/** Runs f on in[0..n_in) into out[0..n_out) and records one node when grad mode is
 * on and an input requires grad. user reaches the callbacks via em_ctx_user.
 * Returns EM_OK, forward's error, or EM_ERR_OOM / EM_ERR_INVALID (misuse) with
 * out[] all NULL. */
em_status em_function_apply(const em_function *f, int n_in, em_tensor *const *in, int n_out, em_tensor **out,
                            void *user);
/** Keeps n tensors for backward (aliases; call once or more, from forward). */
void em_ctx_save_for_backward(em_function_ctx *ctx, int n, em_tensor *const *t);
/** The i-th saved tensor (in save order), borrowed; NULL past the end. */
em_tensor *em_ctx_saved(const em_function_ctx *ctx, int i);
/** How many tensors forward saved. */
int em_ctx_n_saved(const em_function_ctx *ctx);
/** Keeps a scalar for backward in slot 0..7, like ctx.k = 3 in torch. */
void em_ctx_set_scalar(em_function_ctx *ctx, int slot, double v);
/** The scalar in slot 0..7 (0 when never set). */
double em_ctx_scalar(const em_function_ctx *ctx, int slot);
/** Whether backward must produce in[i]'s gradient (torch's ctx.needs_input_grad[i]). */
bool em_ctx_needs_input_grad(const em_function_ctx *ctx, int i);
/** Marks out[j] as not differentiable (an index, a mask); call from forward. */
void em_ctx_mark_non_differentiable(em_function_ctx *ctx, int j);
/** The user pointer given to em_function_apply. */
void *em_ctx_user(const em_function_ctx *ctx);

/* ---- gradcheck ------------------------------------------------------------------ */
/** f maps n f64 inputs to one f64 output. Compares the analytic gradient of
 * sum(out * w) (w random, fixed) with central differences of step eps.
 * Returns true when |analytic - numeric| <= atol + rtol*|numeric| everywhere;
 * writes the worst mismatch into report (cap bytes) either way. */
typedef em_tensor *(*em_gradcheck_fn)(int n, em_tensor **inputs, void *user);
/** Runs the check on inputs[0..n) (f64; those that require grad are checked,
 * and their .grad is cleared first). report may be NULL. eps, atol, rtol: 0
 * means torch's defaults (1e-6, 1e-5, 1e-3); negative ones are misuse. An
 * input that requires grad and is not f64 makes it return false at once,
 * with the reason in report. */
bool em_gradcheck(em_gradcheck_fn f, int n, em_tensor **inputs, void *user, double eps, double atol,
                  double rtol, char *report, size_t cap);

/* ---- graph export ---------------------------------------------------------------- */
/** Writes the graph that produced t as Graphviz DOT: one box per node (op name,
 * output shape and dtype), leaves as ellipses. Atomic write. */
em_status em_graph_dot(em_tensor *t, const char *path);

#ifndef EMBER_BUILDING
#include "autograd/autograd_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
