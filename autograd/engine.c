/* ember — the autograd engine: recording nodes, and running backward.
 *
 * Recording: tensor/ calls record() after every op. When grad mode is on and
 * an input requires grad, record() makes a node: edges to the nodes of the
 * inputs (a leaf's edge goes to its AccumulateGrad node), aliases of the
 * tensors the op's rule needs, and the geometry of inputs and outputs.
 *
 * Backward: discover the reachable nodes with an explicit stack (no recursion:
 * a chain of any length works), count each node's incoming edges, then run
 * nodes from a max-heap on their sequence number (newest first, like PyTorch),
 * each once all of its gradients have arrived. Each node's work runs in its
 * own scope, so temporaries die as soon as the node is done. */
#include "autograd/autograd_internal.h"
#include "tensor/grow.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local bool grad_disabled;
static _Atomic uint64_t next_seq = 1;
static _Atomic uint64_t next_epoch = 1;

bool em_is_grad_enabled(void) { return !grad_disabled; }
bool em_set_grad_enabled(bool enabled)
{
    bool prev = !grad_disabled;
    grad_disabled = !enabled;
    return prev;
}

/* ---- nodes and metadata ------------------------------------------------------ */
static void hook_list_free(em_hook_list *l)
{
    free(l->items);
    *l = (em_hook_list){0};
}

static bool hook_list_add(em_hook_list *l, void (*fn)(void), void *user)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 4;
        void *p = realloc(l->items, sizeof *l->items * (size_t)cap);
        if (!p) return false;
        l->items = p;
        l->cap = cap;
    }
    l->items[l->n].fn = fn;
    l->items[l->n++].user = user;
    return true;
}

/* Frees the saved tensors. Like PyTorch, only a node that saved something
 * refuses a second backward. */
static void release_saved(em_node *n)
{
    bool had = n->fn ? em__fn_release_saved(n->fn) : false;
    for (int i = 0; i < EM_KARGS_IN; i++) { had |= n->saved.in[i] != NULL; em_release(n->saved.in[i]); n->saved.in[i] = NULL; }
    for (int j = 0; j < EM_KARGS_OUT; j++) { had |= n->saved.out[j] != NULL; em_release(n->saved.out[j]); n->saved.out[j] = NULL; }
    n->released |= had;
}

/* Drops one reference; frees nodes iteratively (a long chain must not recurse). */
static void node_release(em_node *first)
{
    em_node *stack_small[64], **stack = stack_small;
    int sp = 0, cap = 64;
    if (first) stack[sp++] = first;
    while (sp) {
        em_node *n = stack[--sp];
        if (--n->refcount > 0) continue;
        release_saved(n);
        for (int j = 0; j < EM_NODE_MAX_OUT; j++) {
            em_release(n->grad_buf[j]);
            hook_list_free(&n->pre_hooks[j]);
        }
        hook_list_free(&n->post_hooks);
        if (n->fn) em__fn_free(n->fn);
        for (int i = 0; i < n->n_in; i++) {
            if (!n->next[i].node) continue;
            if (sp == cap) {
                em_node **bigger = malloc(sizeof *bigger * (size_t)cap * 2);
                if (!bigger) abort();   /* freeing must not fail half-way */
                memcpy(bigger, stack, sizeof *stack * (size_t)sp);
                if (stack != stack_small) free(stack);
                stack = bigger;
                cap *= 2;
            }
            stack[sp++] = n->next[i].node;
        }
        free(n->next);
        free(n->in);
        free(n);
    }
    if (stack != stack_small) free(stack);
}

static void meta_free(em_tensor *t)
{
    struct em_autograd_meta *m = t->ag;
    if (m->acc) {
        m->acc->leaf = NULL;
        node_release(m->acc);
    }
    node_release(m->grad_fn);
    em_release(m->grad);
    free(m);
    t->ag = NULL;
}

static struct em_autograd_meta *meta_of(em_tensor *t)
{
    if (!t->ag) {
        t->ag = em__calloc(1, sizeof *t->ag);
    }
    return t->ag;
}

static em_node *node_new(int op, int n_in)
{
    em_node *n = em__calloc(1, sizeof *n);
    if (!n) return NULL;
    n->next = em__calloc((size_t)(n_in ? n_in : 1), sizeof *n->next);
    n->in = em__calloc((size_t)(n_in ? n_in : 1), sizeof *n->in);
    if (!n->next || !n->in) {
        free(n->next);
        free(n->in);
        free(n);
        return NULL;
    }
    n->op = op;
    n->n_in = n_in;
    n->seq = next_seq++;
    return n;
}

/* The AccumulateGrad node of a leaf that requires grad, made on first use. */
static em_node *acc_node(em_tensor *leaf)
{
    struct em_autograd_meta *m = leaf->ag;
    if (!m->acc) {
        em_node *n = node_new(EM_ACCUMULATE_GRAD, 0);
        if (!n) return NULL;
        n->leaf = leaf;
        n->seq = UINT64_MAX;   /* like PyTorch: accumulate as soon as ready, so DDP hooks fire early */
        n->refcount = 1;       /* held by the leaf's metadata */
        n->n_out = 1;
        n->out[0].ndim = leaf->ndim;
        memcpy(n->out[0].shape, leaf->shape, sizeof n->out[0].shape);
        n->out[0].dtype = leaf->dtype;
        n->out[0].device = leaf->device;
        n->device = leaf->device;
        m->acc = n;
    }
    return m->acc;
}

static bool needs_grad(const em_tensor *t) { return t && t->ag && t->ag->requires_grad; }

em_node *em__node_new(int op, int n_in) { return node_new(op, n_in); }

bool em__node_link_inputs(em_node *n, int n_in, em_tensor *const *in)
{
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) continue;
        n->in[i].device = in[i]->device;
        n->in[i].ndim = in[i]->ndim;
        memcpy(n->in[i].shape, in[i]->shape, sizeof n->in[i].shape);
        n->in[i].dtype = in[i]->dtype;
        if (!needs_grad(in[i])) continue;
        em_node *target = in[i]->ag->grad_fn ? in[i]->ag->grad_fn : acc_node(in[i]);
        if (!target) return false;
        target->refcount++;
        n->next[i] = (em_edge){target, in[i]->ag->grad_fn ? in[i]->ag->output_nr : 0};
    }
    return true;
}

bool em__node_adopt_output(em_node *n, em_tensor *out, int j)
{
    struct em_autograd_meta *m = meta_of(out);
    if (!m) return false;
    m->requires_grad = true;
    n->refcount++;   /* before the release: out may already hold n (the old node and n the same) */
    node_release(m->grad_fn);
    m->grad_fn = n;
    m->output_nr = j;
    return true;
}

void em__node_drop(em_node *n)
{
    n->refcount++;
    node_release(n);
}

static void set_geom(struct em_geom *g, const em_tensor *t)
{
    if (!t) return;
    g->device = t->device;
    g->ndim = t->ndim;
    memcpy(g->shape, t->shape, sizeof g->shape);
    g->dtype = t->dtype;
}

/* ---- recording (the hook tensor/ calls after every op) ------------------------ */
static em_status record(const em_kargs *k)
{
    if (grad_disabled) return EM_OK;
    const em_op_def *def = &em_op_table[k->op];
    int n_in = k->op == EM_OP_CAT ? k->nlist : def->n_in;
    em_tensor *const *ins = k->op == EM_OP_CAT ? k->list : k->in;
    bool any = false;
    for (int i = 0; i < n_in; i++) any |= needs_grad(ins[i]);
    if (!any || !def->differentiable) return EM_OK;
    /* In place (em_copy_ into an existing tensor): like PyTorch, the written
     * tensor takes this node as its history, unless it is a leaf that
     * requires grad, whose value backward needs. */
    if (k->inplace && needs_grad(k->out[0]) && !k->out[0]->ag->grad_fn) {
        em__misuse(def->name, "a leaf tensor that requires grad (shape %s) is used in an in-place op; "
                   "write into a copy, or do it under EM_NO_GRAD", em__shape_str(k->out[0]));
        return EM_ERR_INVALID;
    }
    const em_rule *r = &em_rules[k->op];
    if (!r->backward) {
        em__misuse(def->name, "no backward rule for this op yet");
        return EM_ERR_UNSUPPORTED;
    }
    em_node *n = node_new(k->op, n_in);
    if (!n) return EM_ERR_OOM;
    n->n_out = r->n_diff_out ? r->n_diff_out : def->n_out;
    n->device = k->out[0]->device;
    n->saved.op = k->op;
    memcpy(n->saved.f, k->f, sizeof k->f);
    memcpy(n->saved.i, k->i, sizeof k->i);
    n->saved.nlist = k->nlist;
    for (int i = 0; i < n_in; i++) {
        set_geom(&n->in[i], ins[i]);
        if (!needs_grad(ins[i])) continue;
        em_node *target = ins[i]->ag->grad_fn ? ins[i]->ag->grad_fn : acc_node(ins[i]);
        if (!target) goto oom;
        target->refcount++;
        n->next[i] = (em_edge){target, ins[i]->ag->grad_fn ? ins[i]->ag->output_nr : 0};
    }
    for (int i = 0; i < EM_KARGS_IN && i < n_in; i++) {
        if (!(r->save_in >> i & 1) || !k->in[i]) continue;
        if (!(n->saved.in[i] = em__alias(k->in[i]))) goto oom;
        n->saved_version[i] = k->in[i]->storage->version;
    }
    for (int j = 0; j < def->n_out && j < EM_KARGS_OUT; j++) {
        set_geom(&n->out[j], k->out[j]);
        if (!((r->save_out | r->hint_out) >> j & 1) || !k->out[j]) continue;
        if (!(n->saved.out[j] = em__alias(k->out[j]))) goto oom;
        n->saved_version[EM_KARGS_IN + j] = k->out[j]->storage->version;
    }
    for (int j = 0; j < n->n_out; j++) {
        struct em_autograd_meta *m = meta_of(k->out[j]);
        if (!m) goto oom;
        m->requires_grad = true;
        node_release(m->grad_fn);   /* an in-place op replaces the history */
        m->grad_fn = n;
        m->output_nr = j;
        n->refcount++;
    }
    return EM_OK;
oom:
    /* outputs that already point at n keep it alive; they die with their scope */
    n->refcount++;
    node_release(n);
    return EM_ERR_OOM;
}

__attribute__((constructor)) static void install_hooks(void)
{
    em__record_hook = record;
    em__ag_free_hook = meta_free;
    em__grad_mode_hook = em_is_grad_enabled;
}

/* ---- leaves ---------------------------------------------------------------------- */
em_tensor *em_requires_grad_(em_tensor *t, bool requires_grad)
{
    EM_PROPAGATE_NULL(t);
    EM_CHECK(!(t->ag && t->ag->grad_fn), "em_requires_grad_",
             "only leaves can change requires_grad; this tensor was made by %s (use em_detach)", em_grad_fn_name(t));
    EM_CHECK(!requires_grad || em_dtype_is_float(t->dtype), "em_requires_grad_",
             "only floating-point tensors can require grad, not %s", em_dtype_name(t->dtype));
    if (!requires_grad && !t->ag) return t;
    struct em_autograd_meta *m = meta_of(t);
    if (!m) return NULL;
    m->requires_grad = requires_grad;
    return t;
}

bool em_requires_grad(const em_tensor *t) { return em__live(t, "em_requires_grad") && needs_grad(t); }
bool em_is_leaf(const em_tensor *t) { return em__live(t, "em_is_leaf") && !(t->ag && t->ag->grad_fn); }
em_tensor *em_grad(const em_tensor *t) { return em__live(t, "em_grad") && t->ag ? t->ag->grad : NULL; }

void em_set_grad(em_tensor *t, em_tensor *grad)
{
    if (!em__live(t, "em_set_grad") || (grad && !em__live(grad, "em_set_grad"))) return;
    if (grad && (grad->ndim != t->ndim || memcmp(grad->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) ||
                 grad->dtype != t->dtype)) {
        em__misuse("em_set_grad", "gradient %s %s does not match tensor %s %s", em__shape_str(grad),
                   em_dtype_name(grad->dtype), em__shape_str(t), em_dtype_name(t->dtype));
        return;
    }
    struct em_autograd_meta *m = meta_of(t);
    if (!m) return;
    em_retain(grad);
    em_release(m->grad);
    m->grad = grad;
}

em_tensor *em_detach(em_tensor *t)
{
    EM_PROPAGATE_NULL(t);
    return em__scope_adopt(em__alias(t));
}

const char *em_grad_fn_name(const em_tensor *t)
{
    if (!em__live(t, "em_grad_fn_name") || !t->ag || !t->ag->grad_fn) return NULL;
    return em__node_name(t->ag->grad_fn);
}

/* ---- hooks ------------------------------------------------------------------------ */
void em_register_hook(em_tensor *t, em_grad_hook fn, void *user)
{
    if (!em__live(t, "em_register_hook")) return;
    if (!needs_grad(t)) {
        em__misuse("em_register_hook", "cannot register a hook on a tensor that does not require grad");
        return;
    }
    em_node *n = t->ag->grad_fn ? t->ag->grad_fn : acc_node(t);
    int nr = t->ag->grad_fn ? t->ag->output_nr : 0;
    if (!n || !hook_list_add(&n->pre_hooks[nr], (void (*)(void))fn, user))
        em__misuse("em_register_hook", "out of memory");
}

/* Drops the first (fn, user) entry of l, keeping the others' order. */
static bool hook_list_remove(em_hook_list *l, void (*fn)(void), void *user)
{
    for (int i = 0; i < l->n; i++)
        if (l->items[i].fn == fn && l->items[i].user == user) {
            memmove(&l->items[i], &l->items[i + 1], sizeof *l->items * (size_t)(l->n - i - 1));
            l->n--;
            return true;
        }
    return false;
}

bool em_remove_hook(em_tensor *t, em_grad_hook fn, void *user)
{
    if (!t || !t->ag) return false;
    em_node *n = t->ag->grad_fn ? t->ag->grad_fn : t->ag->acc;
    int nr = t->ag->grad_fn ? t->ag->output_nr : 0;
    return n && hook_list_remove(&n->pre_hooks[nr], (void (*)(void))fn, user);
}

bool em_remove_post_accumulate_grad_hook(em_tensor *leaf, em_post_accumulate_hook fn, void *user)
{
    if (!leaf || !leaf->ag || leaf->ag->grad_fn || !leaf->ag->acc) return false;
    return hook_list_remove(&leaf->ag->acc->post_hooks, (void (*)(void))fn, user);
}

void em_register_post_accumulate_grad_hook(em_tensor *leaf, em_post_accumulate_hook fn, void *user)
{
    if (!em__live(leaf, "em_register_post_accumulate_grad_hook")) return;
    if (!needs_grad(leaf) || leaf->ag->grad_fn) {
        em__misuse("em_register_post_accumulate_grad_hook", "the tensor must be a leaf that requires grad");
        return;
    }
    em_node *n = acc_node(leaf);
    if (!n || !hook_list_add(&n->post_hooks, (void (*)(void))fn, user))
        em__misuse("em_register_post_accumulate_grad_hook", "out of memory");
}

/* ---- backward -------------------------------------------------------------------- */
typedef struct heap {
    em_node **a;
    int n;
    int64_t cap;
} heap;

static bool heap_push(heap *h, em_node *x)
{
    if (h->n == h->cap) {
        em_node **a = em__grow(h->a, sizeof *a, &h->cap, 64, realloc);
        if (!a) return false;
        h->a = a;
    }
    int i = h->n++;
    while (i > 0 && h->a[(i - 1) / 2]->seq < x->seq) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = x;
    return true;
}

static em_node *heap_pop(heap *h)
{
    em_node *top = h->a[0], *last = h->a[--h->n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->a[c + 1]->seq > h->a[c]->seq) c++;
        if (h->a[c]->seq <= last->seq) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n) h->a[i] = last;
    return top;
}

const char *em__node_name(const em_node *n)
{
    if (n->op == EM_CUSTOM_FUNCTION) return em__fn_name(n->fn);
    return n->op == EM_ACCUMULATE_GRAD ? "AccumulateGrad" : em_op_table[n->op].name;
}

/* A saved tensor changed in place since it was saved is an error, except a
 * hint (em_rule.hint_out), which is dropped: the rule then works without it. */
static void check_versions(em_node *n)
{
    if (n->fn) em__fn_check_versions(n);
    for (int i = 0; i < EM_KARGS_IN + EM_KARGS_OUT; i++) {
        em_tensor *s = i < EM_KARGS_IN ? n->saved.in[i] : n->saved.out[i - EM_KARGS_IN];
        if (!s || s->storage->version == n->saved_version[i]) continue;
        int j = i - EM_KARGS_IN;
        if (j >= 0 && n->op < EM_NUM_OPS && (em_rules[n->op].hint_out >> j & 1)) {
            em_release(s);
            n->saved.out[j] = NULL;
        } else
            em__misuse("em_backward",
                       "a tensor that %s saved for backward (%s %d, shape %s) was modified by an in-place op "
                       "after it was saved: version %u, expected %u",
                       em__node_name(n), i < EM_KARGS_IN ? "input" : "output",
                       i < EM_KARGS_IN ? i : i - EM_KARGS_IN, em__shape_str(s), s->storage->version,
                       n->saved_version[i]);
    }
}

/* Adds g into the leaf's .grad (in place when a .grad exists, so views of a
 * flat gradient buffer stay views), then fires the post-accumulate hooks.
 * stealable: g is the engine's own buffer (never a hook's result, which may be
 * a tensor the user still holds), so it may become the .grad itself. */
static void accumulate(em_node *n, em_tensor *g, bool stealable)
{
    em_tensor *leaf = n->leaf;
    if (!leaf) return;
    struct em_autograd_meta *m = leaf->ag;
    if (g->dtype != leaf->dtype) g = em_to_dtype(g, leaf->dtype);
    if (!m->grad) {
        /* Steal g when nothing else can see it (like PyTorch's AccumulateGrad):
         * one reference (the engine's buffer or the node's scope), the only
         * view of its storage, dense from the start of the storage. Else copy. */
        bool own = stealable && g->refcount == 1 && g->storage->refcount == 1 && g->offset == 0 && em_is_contiguous(g) &&
                   g->storage->nbytes == (size_t)em_numel(g) * em_dtype_size(g->dtype) && !g->ag;
        m->grad = own ? em_retain(g) : em_retain(em_clone(g));
    } else if (em_is_contiguous(m->grad)) {
        em__add_into(m->grad, g);
    } else {
        em_tensor *sum = em_add(m->grad, g);
        em_retain(sum);
        em_release(m->grad);
        m->grad = sum;
    }
    for (int i = 0; i < n->post_hooks.n; i++)
        ((em_post_accumulate_hook)n->post_hooks.items[i].fn)(leaf, n->post_hooks.items[i].user);
}

/* Whether node c may take no gradient from its one remaining producer: that
 * producer is the last edge into it, nothing is pending and no hook would see it. */
static bool sole_producer(const em_node *c) { return c && c->deps == 1 && !c->grad_buf[0] && !c->pre_hooks[0].n; }

/* The leaf .grad behind AccumulateGrad node c, for a gradient of geometry want
 * and dtype dt, or NULL. */
static em_tensor *sink_of(const em_node *c, const struct em_geom *want, em_dtype dt)
{
    if (!sole_producer(c) || c->op != EM_ACCUMULATE_GRAD || !c->leaf) return NULL;
    em_tensor *g = c->leaf->ag->grad;
    if (!g || g->dtype != dt || g->dtype != c->leaf->dtype || !em_is_contiguous(g) ||
        !em_device_eq(g->device, want->device) || g->ndim != want->ndim ||
        memcmp(g->shape, want->shape, sizeof(int64_t) * (size_t)g->ndim))
        return NULL;
    return g;
}

em_tensor *em__grad_sink(em_node *n, int i, em_dtype dt)
{
    em_node *c = i < n->n_in ? n->next[i].node : NULL;
    em_tensor *g = c ? sink_of(c, &n->in[i], dt) : NULL;
    if (g) c->sunk = true;
    return g;
}

em_tensor *em__grad_sink_cast(em_node *n, int i, em_dtype dt)
{
    em_node *cast = i < n->n_in ? n->next[i].node : NULL;
    if (!sole_producer(cast) || cast->op != EM_OP_COPY || cast->n_in != 1 || !cast->next[0].node ||
        cast->in[0].dtype != dt || !em_device_eq(cast->in[0].device, n->in[i].device))
        return NULL;
    em_node *acc = cast->next[0].node;
    em_tensor *g = sink_of(acc, &cast->in[0], dt);
    if (g) cast->sunk = acc->sunk = true;
    return g;
}

em_tensor *em__pending_sink_cast(em_node *n, int i)
{
    em_node *v = i < n->n_in ? n->next[i].node : NULL, *cast = v;
    if (v && v->op == EM_OP_VIEW) {
        if (!sole_producer(v) || v->n_in != 1) return NULL;
        cast = v->next[0].node;
    } else {
        v = NULL;
    }
    if (!cast || cast->op != EM_OP_COPY || cast->n_in != 1 || cast->pre_hooks[0].n || !cast->next[0].node ||
        cast->in[0].dtype != EM_F32 || (cast->out[0].dtype != EM_BF16 && cast->out[0].dtype != EM_F16))
        return NULL;
    em_node *c = cast->next[0].node;
    int nr = cast->next[0].nr;
    const struct em_geom *want = &cast->in[0];
    em_tensor *g = c->grad_buf[nr];
    if (g) {
        /* the engine's own buffer, seen by nothing else: adding into it in
         * place is what the out-of-place em_add of the engine would give it */
        if (g->refcount != 1 || g->storage->refcount != 1 || g->ag || g->dtype != EM_F32 || g->offset != 0 ||
            !em_is_contiguous(g) || g->ndim != want->ndim ||
            memcmp(g->shape, want->shape, sizeof(int64_t) * (size_t)g->ndim))
            return NULL;
    } else {
        g = em_zeros(want->ndim, want->shape, EM_F32, want->device);
        if (!g) return NULL;
        c->grad_buf[nr] = em_retain(g);
    }
    if (v) v->sunk = true;
    cast->bypassed++;
    return g;
}

/* The backward of a widening cast (COPY of f32 to bf16/f16, as autocast
 * records) whose input already holds a pending f32 gradient: the half gradient
 * goes on as it is, and the accumulation adds it with one mixed-dtype add
 * (op_elementwise.c: f32 + half, the same bits as converting it first), one
 * pass over the tensor fewer. Returns whether it did so. */
static bool cast_into_pending(em_node *n, em_tensor *const *gout, em_tensor **gin)
{
    if (n->op != EM_OP_COPY || n->n_in != 1 || n->in[0].dtype != EM_F32) return false;
    em_node *c = n->next[0].node;
    em_tensor *acc = c ? c->grad_buf[n->next[0].nr] : NULL, *g = gout[0];
    if (!acc || acc->dtype != EM_F32 || (g->dtype != EM_BF16 && g->dtype != EM_F16) ||
        !em_device_eq(n->in[0].device, g->device) || !em_device_eq(acc->device, g->device))
        return false;
    gin[0] = g;
    return true;
}

void em_backward(em_tensor *root) { em_backward_ex(root, &(em_backward_opts){0}); }

/* Nonzero while this thread runs a backward pass: the pass keeps its
 * bookkeeping in the nodes (visit, deps, grad_buf), so a second pass started
 * from inside it (a custom backward or a hook calling em_backward) would
 * corrupt the first one's and lose gradients in silence. */
static _Thread_local int in_backward;

static void backward_pass(em_tensor *root, const em_backward_opts *opts);

void em_backward_ex(em_tensor *root, const em_backward_opts *opts)
{
    if (!root) return;
    if (in_backward) {
        em__misuse("em_backward", "called from inside a backward pass (a custom function's backward or a gradient "
                   "hook): not supported; compute that gradient before or after the outer em_backward");
        return;
    }
    in_backward = 1;
    backward_pass(root, opts);
    in_backward = 0;
}

static void backward_pass(em_tensor *root, const em_backward_opts *opts)
{
    if (!needs_grad(root)) {
        em__misuse("em_backward", "the tensor (shape %s) does not require grad and has no grad_fn: "
                   "did you mark any input with em_requires_grad_?", em__shape_str(root));
        return;
    }
    em_tensor *grad = opts ? opts->grad : NULL;
    if (!grad && em_numel(root) != 1) {
        em__misuse("em_backward", "grad can be implicitly created only for one-element tensors; pass "
                   "em_backward_opts.grad of shape %s", em__shape_str(root));
        return;
    }
    if (grad && (grad->ndim != root->ndim || memcmp(grad->shape, root->shape, sizeof(int64_t) * (size_t)root->ndim))) {
        em__misuse("em_backward", "gradient of shape %s does not match the tensor's shape %s", em__shape_str(grad),
                   em__shape_str(root));
        return;
    }
    bool retain = opts && opts->retain_graph;
    bool prev = em_set_grad_enabled(false);
    em_scope_begin();
    if (!grad) grad = em_ones(root->ndim, root->shape, root->dtype, root->device);
    em_node *start = root->ag->grad_fn ? root->ag->grad_fn : acc_node(root);
    int start_nr = root->ag->grad_fn ? root->ag->output_nr : 0;

    /* discover: count incoming edges of every reachable node */
    uint64_t epoch = next_epoch++;
    em_node **stack = NULL;
    int sp = 0, cap = 0;
    heap ready = {0};
    bool oom = false;
#define PUSH(x) do { if (sp == cap) { cap = cap ? 2 * cap : 64; em_node **s_ = realloc(stack, sizeof *s_ * (size_t)cap); \
    if (!s_) { oom = true; break; } stack = s_; } stack[sp++] = (x); } while (0)
    start->visit = epoch;
    start->deps = 0;
    PUSH(start);
    while (sp && !oom) {
        em_node *n = stack[--sp];
        for (int i = 0; i < n->n_in; i++) {
            em_node *c = n->next[i].node;
            if (!c) continue;
            if (c->visit != epoch) {
                c->visit = epoch;
                c->deps = 0;
                PUSH(c);
            }
            c->deps++;
        }
    }
#undef PUSH
    free(stack);
    if (oom || !grad) {
        em_scope_end();
        em_set_grad_enabled(prev);
        em__misuse("em_backward", "out of memory while ordering the graph");
        return;
    }
    start->grad_buf[start_nr] = em_retain(grad);
    heap_push(&ready, start);

    while (ready.n) {
        em_node *n = heap_pop(&ready);
        if (n->released) {
            em__misuse("em_backward", "trying to backward through the graph a second time (%s's saved tensors were "
                       "freed by the first backward); pass .retain_graph = true to the first em_backward_ex",
                       em__node_name(n));
            break;
        }
        check_versions(n);
        if (n->bypassed) {
            /* every consumer that sent a gradient went around this cast */
            n->sunk = n->sunk || !n->grad_buf[0];
            n->bypassed = 0;
        }
        if (n->sunk) {
            /* a rule upstream added the gradient into the leaf's .grad itself
             * (em__grad_sink): an AccumulateGrad node only fires its hooks, a
             * cast between them only passes readiness on */
            n->sunk = false;
            if (n->op == EM_ACCUMULATE_GRAD) {
                em_tensor *leaf = n->leaf;
                for (int i = 0; leaf && i < n->post_hooks.n; i++)
                    ((em_post_accumulate_hook)n->post_hooks.items[i].fn)(leaf, n->post_hooks.items[i].user);
            } else {
                for (int i = 0; i < n->n_in; i++) {
                    em_node *c = n->next[i].node;
                    if (c && --c->deps == 0) heap_push(&ready, c);
                }
                if (!retain) release_saved(n);
            }
            continue;
        }
        em_scope_begin();
        em_tensor *gout[EM_NODE_MAX_OUT] = {0}, *gin[EM_KARGS_IN] = {0};
        em_tensor **gin_list = gin;
        for (int j = 0; j < n->n_out; j++) {
            gout[j] = n->grad_buf[j] ? n->grad_buf[j]
                                     : em_zeros(n->out[j].ndim, n->out[j].shape, n->out[j].dtype, n->device);
            for (int h = 0; h < n->pre_hooks[j].n; h++) {
                em_tensor *r = ((em_grad_hook)n->pre_hooks[j].items[h].fn)(gout[j], n->pre_hooks[j].items[h].user);
                if (!r) continue;
                const struct em_geom *want = &n->out[j];
                if (r->ndim != want->ndim || memcmp(r->shape, want->shape, sizeof(int64_t) * (size_t)r->ndim)) {
                    /* torch: "hook has changed the size of value" */
                    em__misuse("em_backward", "gradient hook %d of %s returned shape %s for a gradient of shape %s", h,
                               em__node_name(n), em__shape_str(r), em__dims_str(want->ndim, want->shape));
                    continue;
                }
                gout[j] = r->dtype == want->dtype ? r : em_to_dtype(r, want->dtype);
            }
        }
        if (n->op == EM_ACCUMULATE_GRAD) {
            accumulate(n, gout[0], gout[0] == n->grad_buf[0]);
        } else {
            if (n->n_in > EM_KARGS_IN) gin_list = em__calloc((size_t)n->n_in, sizeof *gin_list);
            if (gin_list && n->op == EM_CUSTOM_FUNCTION) em__fn_backward(n, gout, gin_list);
            else if (gin_list && !cast_into_pending(n, gout, gin_list)) em_rules[n->op].backward(n, gout, gin_list);
            for (int i = 0; i < n->n_in; i++) {
                em_node *c = n->next[i].node;
                if (!c) continue;
                em_tensor *g = gin_list ? gin_list[i] : NULL;
                if (g) {
                    const struct em_geom *want = &n->in[i];
                    if (g->ndim != want->ndim || memcmp(g->shape, want->shape, sizeof(int64_t) * (size_t)g->ndim))
                        em__misuse("em_backward", "the backward rule of %s gave input %d a gradient of shape %s, "
                                   "expected %s", em__node_name(n), i, em__shape_str(g), em__dims_str(want->ndim, want->shape));
                    if (g->dtype != want->dtype && em_dtype_is_float(want->dtype))   /* as torch: cast to the input's */
                        g = em_to_dtype(g, want->dtype);
                    int nr = n->next[i].nr;
                    if (!c->grad_buf[nr]) {
                        c->grad_buf[nr] = em_retain(g);
                    } else {
                        em_tensor *sum = em_add(c->grad_buf[nr], g);
                        em_release(c->grad_buf[nr]);
                        c->grad_buf[nr] = em_retain(sum);
                    }
                }
                if (--c->deps == 0) heap_push(&ready, c);
            }
            if (gin_list != gin) em__free(gin_list);
        }
        for (int j = 0; j < EM_NODE_MAX_OUT; j++) {
            em_release(n->grad_buf[j]);
            n->grad_buf[j] = NULL;
        }
        em_scope_end();
        if (!retain && n->op != EM_ACCUMULATE_GRAD) release_saved(n);
    }
    free(ready.a);
    em_scope_end();
    em_set_grad_enabled(prev);
}

/* ---- shared by rules --------------------------------------------------------------- */
em_tensor *em__sum_to(em_tensor *g, int ndim, const int64_t *shape)
{
    if (g->ndim == ndim && !memcmp(g->shape, shape, sizeof(int64_t) * (size_t)ndim)) return g;
    int dims[EM_MAX_DIMS], nd = 0, lead = g->ndim - ndim;
    for (int i = 0; i < g->ndim; i++)
        if (i < lead || (shape[i - lead] == 1 && g->shape[i] != 1)) dims[nd++] = i;
    em_tensor *s = nd ? em_sum(g, nd, dims, true) : g;
    return em_reshape(s, ndim, shape);
}
