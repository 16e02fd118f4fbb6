/* ember — em_graph_dot: the recorded graph of a tensor as Graphviz DOT.
 *
 * Layout of the output (render with `dot -Tsvg graph.dot > graph.svg`):
 *   - one box per recorded op: its name, then the shape and dtype of each
 *     differentiable output ("matmul\n[256,1024] float32");
 *   - one filled ellipse per leaf that requires grad (its AccumulateGrad node):
 *     shape, dtype and "requires_grad";
 *   - one dashed grey ellipse per input that needs no gradient (data, targets,
 *     constants): shape and dtype; such inputs are drawn once per use, since
 *     the graph keeps only their geometry, not their identity;
 *   - a green ellipse for the tensor itself, below the op that made it;
 *   - edges run from inputs to the ops that consumed them, so the graph reads
 *     top (inputs) to bottom (the result).
 *
 * The walk uses an explicit stack and a hash set of visited nodes: a chain of
 * any length works, and a node reached through several paths is drawn once.
 * The text is built in memory, then written to "<path>.tmp.<pid>", synced and
 * renamed over path, so path is either the old file or the whole new one.
 * Failures (OOM, I/O) return a status with em_last_error() naming the path.
 */
#include "autograd/autograd_internal.h"
#include "tensor/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- a growable text buffer --------------------------------------------------- */
typedef struct dbuf {
    char *p;
    size_t len, cap;
    bool oom;
} dbuf;

static void put(dbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(dbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) { b->oom = true; return; }
        if ((size_t)n < room) { b->len += (size_t)n; return; }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len <= (size_t)n) cap *= 2;
        char *q = em__realloc(b->p, cap);
        if (!q) { b->oom = true; return; }
        b->p = q;
        b->cap = cap;
    }
}

/* ---- a set of visited nodes: pointer -> id (open addressing) ------------------- */
typedef struct nodeset {
    struct slot { const em_node *key; int64_t id; } *s;
    size_t cap, n;   /* cap is a power of two; kept at most half full */
} nodeset;

static size_t hash_ptr(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static bool set_grow(nodeset *h)
{
    size_t cap = h->cap ? 2 * h->cap : 256;
    struct slot *s = em__calloc(cap, sizeof *s);
    if (!s) return false;
    for (size_t i = 0; i < h->cap; i++) {
        if (!h->s[i].key) continue;
        size_t j = hash_ptr(h->s[i].key, cap);
        while (s[j].key) j = (j + 1) & (cap - 1);
        s[j] = h->s[i];
    }
    em__free(h->s);
    h->s = s;
    h->cap = cap;
    return true;
}

/* The id of k, adding it (with the next free id) when new: *fresh tells which.
 * Returns -1 on OOM. */
static int64_t set_id(nodeset *h, const em_node *k, bool *fresh)
{
    if (2 * (h->n + 1) > h->cap && !set_grow(h)) return -1;
    size_t j = hash_ptr(k, h->cap);
    while (h->s[j].key && h->s[j].key != k) j = (j + 1) & (h->cap - 1);
    *fresh = !h->s[j].key;
    if (*fresh) {
        h->s[j].key = k;
        h->s[j].id = (int64_t)h->n++;
    }
    return h->s[j].id;
}

/* ---- drawing ---------------------------------------------------------------------- */
static const char *geom_str(const struct em_geom *g)
{
    return em__dims_str(g->ndim, g->shape);
}

static void draw_node(dbuf *b, int64_t id, const em_node *n)
{
    if (n->op == EM_ACCUMULATE_GRAD) {
        /* the leaf's own geometry when it is alive; the node keeps a copy otherwise */
        const em_tensor *leaf = n->leaf;
        const char *shape = leaf ? em__shape_str(leaf) : geom_str(&n->out[0]);
        em_dtype dt = leaf ? leaf->dtype : n->out[0].dtype;
        put(b, "  n%lld [shape=ellipse, style=filled, fillcolor=\"#dae8fc\", label=\"%s %s\\nrequires_grad\"];\n",
            (long long)id, shape, em_dtype_name(dt));
        return;
    }
    put(b, "  n%lld [shape=box, label=\"%s", (long long)id, em__node_name(n));
    for (int j = 0; j < n->n_out; j++) put(b, "\\n%s %s", geom_str(&n->out[j]), em_dtype_name(n->out[j].dtype));
    put(b, "\"];\n");
}

/* Inputs without a gradient edge. LAYER_NORM's weight and bias are optional
 * (NULL leaves a zeroed geometry; a real one is 1-d), so 0-d there means absent. */
static bool input_present(const em_node *n, int i)
{
    return !(n->op == EM_OP_LAYER_NORM && i > 0 && n->in[i].ndim == 0);
}

/* Emits the whole graph of t into b. Returns false on OOM. */
static bool build(dbuf *b, em_tensor *t)
{
    put(b, "digraph ember {\n"
           "  node [fontname=\"Helvetica\", fontsize=10];\n"
           "  edge [arrowsize=0.7];\n");
    const char *root_label = em__shape_str(t);
    struct em_autograd_meta *m = t->ag;
    em_node *start = m && m->requires_grad ? (m->grad_fn ? m->grad_fn : m->acc) : NULL;
    if (!start) {
        /* a leaf (or a tensor outside autograd): the graph is the tensor alone */
        bool rg = m && m->requires_grad;
        put(b, "  out [shape=ellipse, style=filled, fillcolor=\"%s\", label=\"%s %s%s\"];\n}\n",
            rg ? "#dae8fc" : "#d5e8d4", root_label, em_dtype_name(t->dtype), rg ? "\\nrequires_grad" : "");
        return !b->oom;
    }

    nodeset seen = {0};
    em_node **stack = NULL;
    size_t sp = 0, cap = 0;
    int64_t consts = 0;
    bool ok = true, fresh;
    int64_t sid = set_id(&seen, start, &fresh);
    if (sid < 0) ok = false;
    /* a leaf that requires grad is its own ellipse; anything else gets an output node */
    if (ok && start->op != EM_ACCUMULATE_GRAD)
        put(b, "  out [shape=ellipse, style=filled, fillcolor=\"#d5e8d4\", label=\"%s %s\"];\n  n%lld -> out;\n",
            root_label, em_dtype_name(t->dtype), (long long)sid);
    if (ok) {
        stack = em__malloc(sizeof *stack * 64);
        cap = 64;
        if (!stack) ok = false;
        else stack[sp++] = start;
    }
    while (ok && sp) {
        em_node *n = stack[--sp];
        bool f;
        int64_t id = set_id(&seen, n, &f);   /* already present: never fails */
        draw_node(b, id, n);
        for (int i = 0; i < n->n_in && ok; i++) {
            em_node *c = n->next[i].node;
            if (!c) {
                if (!input_present(n, i)) continue;
                put(b, "  c%lld [shape=ellipse, style=dashed, color=grey50, fontcolor=grey35, label=\"%s %s\"];\n"
                       "  c%lld -> n%lld [color=grey50];\n",
                    (long long)consts, geom_str(&n->in[i]), em_dtype_name(n->in[i].dtype), (long long)consts,
                    (long long)id);
                consts++;
                continue;
            }
            int64_t cid = set_id(&seen, c, &fresh);
            if (cid < 0) { ok = false; break; }
            put(b, "  n%lld -> n%lld;\n", (long long)cid, (long long)id);
            if (!fresh) continue;
            if (sp == cap) {
                em_node **s = em__realloc(stack, sizeof *s * cap * 2);
                if (!s) { ok = false; break; }
                stack = s;
                cap *= 2;
            }
            stack[sp++] = c;
        }
    }
    put(b, "}\n");
    em__free(stack);
    em__free(seen.s);
    return ok && !b->oom;
}

em_status em_graph_dot(em_tensor *t, const char *path)
{
    if (!path) {
        em__misuse("em_graph_dot", "path must not be NULL");
        return EM_ERR_INVALID;
    }
    if (!t) {   /* an earlier failure: keep its error */
        em_status s = em_last_status();
        return s != EM_OK ? s : em__fail(EM_ERR_INVALID, "%s: em_graph_dot was given a NULL tensor", path);
    }
    dbuf b = {0};
    if (!build(&b, t)) {
        em__free(b.p);
        return em__fail(EM_ERR_OOM, "%s: out of memory building the DOT graph", path);
    }
    size_t plen = strlen(path);
    char *tmp = em__malloc(plen + 32);
    if (!tmp) {
        em__free(b.p);
        return em__fail(EM_ERR_OOM, "%s: out of memory writing the DOT graph", path);
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    em_status s = EM_OK;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) {
        int err = errno;
        s = em__fail(err == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO,
                     "%s: cannot write the DOT graph: creating '%s' failed: %s", path, tmp, strerror(err));
    } else {
        bool ok = em__write_all(fd, b.p, b.len) && fsync(fd) == 0;
        int err = errno;
        if (close(fd) != 0 && ok) {
            ok = false;
            err = errno;
        }
        if (!ok) {
            s = em__fail(EM_ERR_IO, "%s: cannot write the DOT graph: writing '%s' failed: %s", path, tmp,
                         strerror(err));
            unlink(tmp);
        } else if (rename(tmp, path) != 0) {
            s = em__fail(EM_ERR_IO, "%s: cannot write the DOT graph: renaming '%s' over it failed: %s", path, tmp,
                         strerror(errno));
            unlink(tmp);
        }
    }
    em__free(tmp);
    em__free(b.p);
    return s;
}
