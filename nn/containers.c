/* ember — containers (nn.h): Sequential and ModuleList, whose children are
 * registered as "0", "1", ... like torch's, so parameter names ("0.weight")
 * and checkpoints match; and em_module_forward, the one-input forward slot
 * that layers, Sequential and user modules fill. */
#include "nn/nn_internal.h"
#include "tensor/support.h"

#include <stdio.h>
#include <string.h>

em_tensor *em_module_forward(em_module *m, em_tensor *x)
{
    if (!m || !m->forward) {
        em__misuse("em_module_forward", "%s has no one-input forward (set em_module.forward, or call its own forward)",
                   m ? m->type : "NULL module");
        return NULL;
    }
    return m->forward(m, x);
}

static em_tensor *sequential_fwd(em_module *m, em_tensor *x)
{
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *h = x;
    for (int i = 0; i < m->n_children && h; i++) {
        em_module *c = m->children[i].module;
        if (!c->forward) {
            em__misuse("Sequential", "child %s (%s) has no one-input forward", m->children[i].name, c->type);
            h = NULL;
            break;
        }
        h = c->forward(c, h);
    }
    if (h) r = em_keep(h);
    em_scope_end();
    return r;
}

static em_module *container_new(const char *type, bool sequential)
{
    em_module *m = em__module_alloc(sizeof *m, type);
    if (m && sequential) m->forward = sequential_fwd;
    return m;
}

em_module *em_nn_sequential_new(void) { return container_new("Sequential", true); }
em_module *em_nn_module_list_new(void) { return container_new("ModuleList", false); }

em_module *em_nn_sequential_of(int n, em_module *const *children)
{
    em_module *s = em_nn_sequential_new();
    bool ok = s != NULL;
    for (int i = 0; i < n; i++) {
        if (ok && !(children[i] && em_nn_append(s, children[i]))) {
            ok = false;
            if (children[i] && s && s->n_children <= i) em_module_free(children[i]);   /* not adopted */
            continue;
        }
        if (!ok) em_module_free(children[i]);
    }
    if (!ok) {
        em_module_free(s);
        return NULL;
    }
    return s;
}

em_module *em_nn_append(em_module *container, em_module *child)
{
    if (!container || (strcmp(container->type, "Sequential") && strcmp(container->type, "ModuleList"))) {
        em__misuse("em_nn_append", "%s is not a Sequential or a ModuleList", container ? container->type : "NULL");
        return NULL;
    }
    char name[24];
    snprintf(name, sizeof name, "%d", container->n_children);
    return em_module_register_child(container, name, child);
}

int em_module_num_children(const em_module *m) { return m ? m->n_children : 0; }

em_module *em_module_child_at(const em_module *m, int i)
{
    if (!m || i < 0 || i >= m->n_children) {
        em__misuse("em_module_child_at", "child %d of %s, which has %d", i, m ? m->type : "NULL", m ? m->n_children : 0);
        return NULL;
    }
    return m->children[i].module;
}
