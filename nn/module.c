/* ember — the module base: a registry of named parameters, buffers and
 * children, walks over the tree, and flat parameter storage. */
#include "nn/nn.h"
#include "nn/nn_internal.h"
#include "tensor/construct.h"
#include "tensor/support.h"

#include <stdlib.h>
#include <string.h>

void em_module_init(em_module *m, const char *type, void (*destroy)(em_module *m))
{
    memset(m, 0, sizeof *m);
    m->type = type;
    m->destroy = destroy;
    m->training = true;
}

static em_module_entry *push(em_module_entry **arr, int *n, int *cap, const char *name, const char *what)
{
    for (int i = 0; i < *n; i++)
        if (!strcmp((*arr)[i].name, name)) {
            em__misuse(what, "the name \"%s\" is already registered", name);
            return NULL;
        }
    if (strchr(name, '.') || !*name) {
        em__misuse(what, "invalid name \"%s\": names are non-empty and contain no '.'", name);
        return NULL;
    }
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 8;
        em_module_entry *a = realloc(*arr, sizeof *a * (size_t)c);
        if (!a) {
            em__misuse(what, "out of memory registering \"%s\"", name);
            return NULL;
        }
        *arr = a;
        *cap = c;
    }
    em_module_entry *e = &(*arr)[(*n)++];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    return e;
}

em_tensor *em_module_register_parameter(em_module *m, const char *name, em_tensor *t)
{
    if (!t) return NULL;
    em_module_entry *e = push(&m->params, &m->n_params, &m->cap_params, name, "em_module_register_parameter");
    if (!e) return NULL;
    if (!em_requires_grad_(t, true)) {   /* out of memory for its metadata: unregister */
        free(e->name);
        m->n_params--;
        return NULL;
    }
    e->tensor = em__retain_held(t);
    return t;
}

em_tensor *em_module_register_buffer(em_module *m, const char *name, em_tensor *t, bool persistent)
{
    if (!t) return NULL;
    em_module_entry *e = push(&m->buffers, &m->n_buffers, &m->cap_buffers, name, "em_module_register_buffer");
    if (!e) return NULL;
    e->tensor = em__retain_held(t);
    e->persistent = persistent;
    return t;
}

em_module *em_module_register_child(em_module *m, const char *name, em_module *child)
{
    if (!child) return NULL;
    em_module_entry *e = push(&m->children, &m->n_children, &m->cap_children, name, "em_module_register_child");
    if (!e) return NULL;
    e->module = child;
    return child;
}

void em_module_free(em_module *m)
{
    if (!m) return;
    for (int i = 0; i < m->n_children; i++) {
        em_module_free(m->children[i].module);
        free(m->children[i].name);
    }
    for (int i = 0; i < m->n_params; i++) {
        em__release_held(m->params[i].tensor);
        free(m->params[i].name);
    }
    for (int i = 0; i < m->n_buffers; i++) {
        em__release_held(m->buffers[i].tensor);
        free(m->buffers[i].name);
    }
    for (int d = 0; d < EM_NUM_DTYPES; d++) {
        em_release(m->flat_params[d]);
        em_release(m->flat_grads[d]);
    }
    free(m->params);
    free(m->buffers);
    free(m->children);
    if (m->destroy) m->destroy(m);
    else free(m);
}

/* ---- walks ------------------------------------------------------------------------ */
typedef struct walk {
    em_named_tensors out;
    int cap;
    bool params, nonpersistent;
} walk;

static void add(walk *w, const char *prefix, const char *name, em_tensor *t)
{
    for (int i = 0; i < w->out.n; i++)
        if (w->out.items[i].tensor == t) return;   /* shared (tied) tensors appear once */
    if (w->out.n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 64;
        w->out.items = realloc(w->out.items, sizeof *w->out.items * (size_t)w->cap);
        if (!w->out.items) abort();
    }
    size_t len = strlen(prefix) + strlen(name) + 2;
    char *full = malloc(len);
    if (!full) abort();
    snprintf(full, len, "%s%s%s", prefix, *prefix ? "." : "", name);
    w->out.items[w->out.n++] = (em_named_tensor){full, t};
}

static void walk_tree(walk *w, const em_module *m, const char *prefix)
{
    if (w->params)
        for (int i = 0; i < m->n_params; i++) add(w, prefix, m->params[i].name, m->params[i].tensor);
    else
        for (int i = 0; i < m->n_buffers; i++)
            if (m->buffers[i].persistent || w->nonpersistent) add(w, prefix, m->buffers[i].name, m->buffers[i].tensor);
    for (int i = 0; i < m->n_children; i++) {
        size_t len = strlen(prefix) + strlen(m->children[i].name) + 2;
        char *p = malloc(len);
        if (!p) abort();
        snprintf(p, len, "%s%s%s", prefix, *prefix ? "." : "", m->children[i].name);
        walk_tree(w, m->children[i].module, p);
        free(p);
    }
}

em_named_tensors em_module_named_parameters(const em_module *m)
{
    walk w = {.params = true};
    walk_tree(&w, m, "");
    return w.out;
}

em_named_tensors em_module_named_buffers(const em_module *m, bool include_nonpersistent)
{
    walk w = {.params = false, .nonpersistent = include_nonpersistent};
    walk_tree(&w, m, "");
    return w.out;
}

em_tensor **em_module_parameters(const em_module *m, int *n)
{
    em_named_tensors l = em_module_named_parameters(m);
    em_tensor **p = malloc(sizeof *p * (size_t)(l.n ? l.n : 1));
    for (int i = 0; p && i < l.n; i++) p[i] = l.items[i].tensor;
    *n = p ? l.n : 0;
    em_named_tensors_free(&l);
    return p;
}

void em_named_tensors_free(em_named_tensors *l)
{
    for (int i = 0; i < l->n; i++) free(l->items[i].name);
    free(l->items);
    *l = (em_named_tensors){0};
}

em_module *em_module_child(const em_module *m, const char *path)
{
    while (m && *path) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);
        const em_module *next = NULL;
        for (int i = 0; i < m->n_children; i++)
            if (strlen(m->children[i].name) == len && !strncmp(m->children[i].name, path, len)) next = m->children[i].module;
        m = next;
        path = dot ? dot + 1 : path + len;
    }
    return (em_module *)m;
}

em_tensor *em_module_get(const em_module *m, const char *dotted)
{
    const char *dot = strrchr(dotted, '.');
    const em_module *owner = m;
    const char *leaf = dotted;
    if (dot) {
        char path[512];
        size_t len = (size_t)(dot - dotted);
        if (len >= sizeof path) return NULL;
        memcpy(path, dotted, len);
        path[len] = 0;
        owner = em_module_child(m, path);
        leaf = dot + 1;
    }
    if (!owner) return NULL;
    for (int i = 0; i < owner->n_params; i++)
        if (!strcmp(owner->params[i].name, leaf)) return owner->params[i].tensor;
    for (int i = 0; i < owner->n_buffers; i++)
        if (owner->buffers[i].persistent && !strcmp(owner->buffers[i].name, leaf)) return owner->buffers[i].tensor;
    return NULL;
}

int64_t em_module_num_parameters(const em_module *m, bool only_trainable)
{
    em_named_tensors l = em_module_named_parameters(m);
    int64_t n = 0;
    for (int i = 0; i < l.n; i++)
        if (!only_trainable || em_requires_grad(l.items[i].tensor)) n += em_numel(l.items[i].tensor);
    em_named_tensors_free(&l);
    return n;
}

/* ---- modes and bulk operations ----------------------------------------------------- */
void em_module_apply(em_module *m, void (*fn)(em_module *m, void *user), void *user)
{
    for (int i = 0; i < m->n_children; i++) em_module_apply(m->children[i].module, fn, user);
    fn(m, user);
}

static void set_training(em_module *m, void *user) { m->training = *(bool *)user; }
void em_module_train(em_module *m, bool training) { em_module_apply(m, set_training, &training); }
bool em_module_is_training(const em_module *m) { return m->training; }

void em_module_zero_grad(em_module *m, bool set_to_none)
{
    bool flat = false;
    for (int d = 0; d < EM_NUM_DTYPES; d++)
        if (m->flat_grads[d]) {
            em_fill_(m->flat_grads[d], 0.0);
            flat = true;
        }
    if (flat) return;
    em_named_tensors l = em_module_named_parameters(m);
    for (int i = 0; i < l.n; i++) {
        em_tensor *g = em_grad(l.items[i].tensor);
        if (!g) continue;
        if (set_to_none) em_set_grad(l.items[i].tensor, NULL);
        else em_fill_(g, 0.0);
    }
    em_named_tensors_free(&l);
}

/* Points t at `storage` (contiguous, at offset), keeping the em_tensor itself. */
static void rehome(em_tensor *t, em_storage *storage, int64_t offset)
{
    storage->refcount++;
    em__storage_release(t->storage);
    t->storage = storage;
    t->device = storage->device;
    t->offset = offset;
    em__contiguous_strides(t->ndim, t->shape, t->stride);
}

em_status em_module_to(em_module *m, em_device dev)
{
    em_named_tensors ps = em_module_named_parameters(m), bs = em_module_named_buffers(m, true);
    int n = ps.n + bs.n;
    em_tensor **moved = calloc((size_t)(n ? n : 1), sizeof *moved);
    em_status st = moved ? EM_OK : EM_ERR_OOM;
    /* copy everything first, so that a failure leaves m untouched */
    for (int i = 0; i < n && st == EM_OK; i++) {
        em_tensor *t = i < ps.n ? ps.items[i].tensor : bs.items[i - ps.n].tensor;
        if (em_device_eq(t->device, dev)) continue;
        EM_NO_GRAD { moved[i] = em_contiguous(em_to(t, dev)); }
        if (!moved[i]) st = em_last_status() ? em_last_status() : EM_ERR_OOM;
    }
    for (int i = 0; i < n; i++) {
        if (!moved[i]) continue;
        if (st == EM_OK) {
            em_tensor *t = i < ps.n ? ps.items[i].tensor : bs.items[i - ps.n].tensor;
            rehome(t, moved[i]->storage, moved[i]->offset);
            if (em_grad(t)) em_set_grad(t, NULL);
        }
        em_release(moved[i]);
    }
    free(moved);
    em_named_tensors_free(&ps);
    em_named_tensors_free(&bs);
    if (st == EM_OK)
        for (int d = 0; d < EM_NUM_DTYPES; d++) {   /* flat buffers no longer describe the layout */
            em_release(m->flat_params[d]);
            em_release(m->flat_grads[d]);
            m->flat_params[d] = m->flat_grads[d] = NULL;
        }
    return st;
}

em_status em_module_flatten(em_module *m)
{
    em_named_tensors ps = em_module_named_parameters(m);
    em_status st = EM_OK;
    for (int d = 0; d < EM_NUM_DTYPES && st == EM_OK; d++) {
        if (m->flat_params[d]) continue;
        int64_t total = 0;
        em_device dev = EM_CPU;
        for (int i = 0; i < ps.n; i++)
            if (ps.items[i].tensor->dtype == (em_dtype)d) {
                total += em_numel(ps.items[i].tensor);
                dev = ps.items[i].tensor->device;
            }
        if (!total) continue;
        /* the module owns the two buffers: made in a scope, then retained */
        em_tensor *fp = NULL, *fg = NULL;
        EM_SCOPE {
            fp = em_retain(em_empty(1, &total, (em_dtype)d, dev));
            fg = fp ? em_retain(em_zeros(1, &total, (em_dtype)d, dev)) : NULL;
        }
        if (!fp || !fg) {
            em_release(fp);
            em_release(fg);
            st = EM_ERR_OOM;
            break;
        }
        int64_t off = 0;
        for (int i = 0; i < ps.n; i++) {
            em_tensor *t = ps.items[i].tensor;
            if (t->dtype != (em_dtype)d) continue;
            int64_t cnt = em_numel(t);
            EM_SCOPE {
                em_tensor *dst = em_view(em_narrow(fp, 0, off, cnt), t->ndim, t->shape);
                EM_NO_GRAD { em_copy_(dst, t); }
            }
            rehome(t, fp->storage, off);
            EM_SCOPE {
                em_tensor *gv = em_view(em_narrow(fg, 0, off, cnt), t->ndim, t->shape);
                em_tensor *old = em_grad(t);
                if (old) EM_NO_GRAD { em_copy_(gv, old); }
                em_set_grad(t, gv);
            }
            off += cnt;
        }
        m->flat_params[d] = fp;
        m->flat_grads[d] = fg;
    }
    em_named_tensors_free(&ps);
    return st;
}

void em__free_labels(char **labels, int n)
{
    if (!labels) return;
    for (int i = 0; i < n; i++) em__free(labels[i]);
    em__free(labels);
}

em_module *em__flattened(em_module *m)
{
    if (m && em_module_flatten(m) != EM_OK) {
        em_module_free(m);
        return NULL;
    }
    return m;
}

em_tensor *em_module_flat_params(const em_module *m, em_dtype dt) { return m->flat_params[dt]; }
em_tensor *em_module_flat_grads(const em_module *m, em_dtype dt) { return m->flat_grads[dt]; }
