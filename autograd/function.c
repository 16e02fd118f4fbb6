/* ember — custom autograd functions (contract in autograd.h, "custom functions"):
 * em_function_apply runs the user's forward with recording off and, when an
 * input requires grad, records one node of op id EM_CUSTOM_FUNCTION whose
 * context (this file's em_function_ctx) holds the function, the saved
 * tensors (aliases, with their versions), scalars and flags. The engine calls
 * em__fn_backward for such nodes and em__fn_release_saved / em__fn_free as it
 * does for built-in nodes' saved tensors.
 */
#include "autograd/autograd_internal.h"
#include "amp/amp.h"

#include <string.h>

enum { MAX_SCALARS = 8 };

struct em_function_ctx {
    const em_function *f;
    void *user;
    int n_in, n_out;
    bool *needs;                 /* [n_in] */
    bool non_diff[EM_NODE_MAX_OUT];
    bool in_forward;             /* save/mark calls are legal only now */
    bool save_failed;            /* out of memory while saving */
    int n_saved, cap_saved;
    em_tensor **saved;           /* aliases (owned) */
    uint32_t *versions;
    double scalars[MAX_SCALARS];
};

const char *em__fn_name(const em_function_ctx *c) { return c && c->f->name ? c->f->name : "CustomFunction"; }

bool em__fn_release_saved(em_function_ctx *c)
{
    bool had = c->n_saved > 0;
    for (int i = 0; i < c->n_saved; i++) em_release(c->saved[i]);
    c->n_saved = 0;
    return had;
}

void em__fn_free(em_function_ctx *c)
{
    if (!c) return;
    em__fn_release_saved(c);
    em__free(c->saved);
    em__free(c->versions);
    em__free(c->needs);
    em__free(c);
}

void em__fn_check_versions(const em_node *n)
{
    const em_function_ctx *c = n->fn;
    for (int i = 0; i < c->n_saved; i++)
        if (c->saved[i]->storage->version != c->versions[i])
            em__misuse("em_backward",
                       "a tensor that %s saved for backward (saved tensor %d, shape %s) was modified by an in-place "
                       "op after it was saved: version %u, expected %u",
                       em__fn_name(c), i, em__shape_str(c->saved[i]), c->saved[i]->storage->version, c->versions[i]);
}

/* ---- the context API ------------------------------------------------------------------- */

void em_ctx_save_for_backward(em_function_ctx *ctx, int n, em_tensor *const *t)
{
    if (!ctx->in_forward) {
        em__misuse("em_ctx_save_for_backward", "%s: call it from forward", em__fn_name(ctx));
        return;
    }
    for (int i = 0; i < n; i++) {
        if (!t[i]) {
            em__misuse("em_ctx_save_for_backward", "%s: tensor %d of %d is NULL", em__fn_name(ctx), i, n);
            return;
        }
        if (ctx->n_saved == ctx->cap_saved) {
            int cap = ctx->cap_saved ? 2 * ctx->cap_saved : 4;
            em_tensor **s = em__malloc(sizeof *s * (size_t)cap);
            uint32_t *v = em__malloc(sizeof *v * (size_t)cap);
            if (!s || !v) {
                em__free(s), em__free(v);
                ctx->save_failed = true;   /* apply reports EM_ERR_OOM */
                return;
            }
            if (ctx->n_saved) {
                memcpy(s, ctx->saved, sizeof *s * (size_t)ctx->n_saved);
                memcpy(v, ctx->versions, sizeof *v * (size_t)ctx->n_saved);
            }
            em__free(ctx->saved), em__free(ctx->versions);
            ctx->saved = s, ctx->versions = v, ctx->cap_saved = cap;
        }
        em_tensor *a = em__alias(t[i]);   /* no history: saving does not keep the graph alive */
        if (!a) {
            ctx->save_failed = true;
            return;
        }
        ctx->saved[ctx->n_saved] = a;
        ctx->versions[ctx->n_saved++] = t[i]->storage->version;
    }
}

em_tensor *em_ctx_saved(const em_function_ctx *ctx, int i) { return i >= 0 && i < ctx->n_saved ? ctx->saved[i] : NULL; }
int em_ctx_n_saved(const em_function_ctx *ctx) { return ctx->n_saved; }

void em_ctx_set_scalar(em_function_ctx *ctx, int slot, double v)
{
    if (slot < 0 || slot >= MAX_SCALARS) {
        em__misuse("em_ctx_set_scalar", "%s: slot %d is not in [0, %d)", em__fn_name(ctx), slot, MAX_SCALARS);
        return;
    }
    ctx->scalars[slot] = v;
}

double em_ctx_scalar(const em_function_ctx *ctx, int slot)
{
    if (slot < 0 || slot >= MAX_SCALARS) {
        em__misuse("em_ctx_scalar", "%s: slot %d is not in [0, %d)", em__fn_name(ctx), slot, MAX_SCALARS);
        return 0;
    }
    return ctx->scalars[slot];
}

bool em_ctx_needs_input_grad(const em_function_ctx *ctx, int i) { return i >= 0 && i < ctx->n_in && ctx->needs[i]; }

void em_ctx_mark_non_differentiable(em_function_ctx *ctx, int j)
{
    if (!ctx->in_forward || j < 0 || j >= ctx->n_out) {
        em__misuse("em_ctx_mark_non_differentiable", "%s: output %d of %d, from forward only", em__fn_name(ctx), j,
                   ctx->n_out);
        return;
    }
    ctx->non_diff[j] = true;
}

void *em_ctx_user(const em_function_ctx *ctx) { return ctx->user; }

/* ---- apply and backward -------------------------------------------------------------- */

static void clear_outputs(int n_out, em_tensor **out)
{
    for (int j = 0; j < n_out; j++) out[j] = NULL;
}

em_status em_function_apply(const em_function *f, int n_in, em_tensor *const *in, int n_out, em_tensor **out,
                            void *user)
{
    static const char op[] = "em_function_apply";
    if (!f || !f->forward || !f->backward || n_in < 0 || (n_in && !in) || n_out < 1 || n_out > EM_NODE_MAX_OUT || !out) {
        em__misuse(op, "needs a function with forward and backward, n_in >= 0 inputs and 1..%d outputs (got %d, %d)",
                   EM_NODE_MAX_OUT, n_in, n_out);
        if (out && n_out > 0 && n_out <= EM_NODE_MAX_OUT) clear_outputs(n_out, out);
        return EM_ERR_INVALID;
    }
    clear_outputs(n_out, out);
    for (int i = 0; i < n_in; i++)
        if (!in[i]) return em__fail(EM_ERR_INVALID, "%s: %s: input %d is NULL (a failed op before it?)", op,
                                    f->name ? f->name : "function", i);
    em_function_ctx *c = em__calloc(1, sizeof *c);
    bool *needs = em__calloc((size_t)(n_in ? n_in : 1), sizeof *needs);
    if (!c || !needs) {
        em__free(c), em__free(needs);
        return EM_ERR_OOM;
    }
    *c = (em_function_ctx){.f = f, .user = user, .n_in = n_in, .n_out = n_out, .needs = needs, .in_forward = true};
    bool record = em_is_grad_enabled(), any = false;
    for (int i = 0; i < n_in; i++) any |= needs[i] = record && em_requires_grad(in[i]);

    bool prev = em_set_grad_enabled(false);
    em_status st = f->forward(c, n_in, in, n_out, out);
    em_set_grad_enabled(prev);
    c->in_forward = false;
    for (int j = 0; st == EM_OK && j < n_out; j++) {
        if (!out[j]) {
            st = em__fail(EM_ERR_INVALID, "%s: %s: forward returned EM_OK but left output %d NULL", op,
                          em__fn_name(c), j);
            break;
        }
        for (int i = 0; i < n_in; i++)
            if (out[j] == in[i]) {
                em__misuse(op, "%s: output %d is input %d itself; return a new tensor (em_clone it)", em__fn_name(c),
                           j, i);
                st = EM_ERR_INVALID;
            }
        for (int k = 0; k < j; k++)
            if (out[j] == out[k]) {   /* one tensor cannot be two outputs of the node (two gradients, one slot) */
                em__misuse(op, "%s: outputs %d and %d are the same tensor; return a new tensor for each (em_clone it)",
                           em__fn_name(c), k, j);
                st = EM_ERR_INVALID;
            }
    }
    if (st == EM_OK && c->save_failed) st = EM_ERR_OOM;   /* backward would miss a saved tensor */
    if (st != EM_OK || !any) {
        if (st != EM_OK) clear_outputs(n_out, out);   /* scope-owned results die with the scope */
        em__fn_free(c);
        return st;
    }
    em_node *n = em__node_new(EM_CUSTOM_FUNCTION, n_in);
    if (!n) {
        em__fn_free(c);
        clear_outputs(n_out, out);
        return EM_ERR_OOM;
    }
    n->fn = c;
    n->n_out = n_out;
    n->device = out[0]->device;
    bool ok = em__node_link_inputs(n, n_in, in);
    for (int j = 0; j < n_out; j++) {
        n->out[j].ndim = out[j]->ndim;
        memcpy(n->out[j].shape, out[j]->shape, sizeof n->out[j].shape);
        n->out[j].dtype = out[j]->dtype;
        n->out[j].device = out[j]->device;
    }
    for (int j = 0; ok && j < n_out; j++)
        if (!c->non_diff[j]) ok = em__node_adopt_output(n, out[j], j);
    em__node_drop(n);   /* the outputs that adopted it keep it alive */
    if (!ok) {
        clear_outputs(n_out, out);
        return EM_ERR_OOM;
    }
    return EM_OK;
}

void em__fn_backward(em_node *n, em_tensor *const *gout, em_tensor **gin)
{
    em_function_ctx *c = n->fn;
    em_tensor *g[EM_NODE_MAX_OUT];
    for (int j = 0; j < c->n_out; j++)   /* a non-differentiable output's gradient is always zero */
        g[j] = c->non_diff[j] ? em_zeros(n->out[j].ndim, n->out[j].shape, n->out[j].dtype, n->device) : gout[j];
    em_autocast_begin(EM_F32);   /* backward outside any autocast region, as torch runs it */
    c->f->backward(c, c->n_out, g, c->n_in, gin);
    em_autocast_end();
    for (int i = 0; i < c->n_in; i++)
        if (!c->needs[i]) gin[i] = NULL;   /* a gradient nobody asked for is dropped */
}
