/* ember — scopes: every op result is owned by the innermost open scope and
 * released when it ends (DESIGN.md §2 "Memory"). Scopes are per thread. */
#include "tensor/tensor_internal.h"
#include "tensor/grow.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct scope {
    em_tensor **items;
    int64_t n, cap;
} scope;

static _Thread_local scope *stack;
static _Thread_local int depth, stack_cap;

/* A thread's scope bookkeeping goes when the thread ends (a pthread key's
 * destructor runs in the ending thread, whose _Thread_local variables are
 * still there); the main thread's stays until the process ends. */
static pthread_key_t stack_key;
static pthread_once_t stack_key_once = PTHREAD_ONCE_INIT;

static void free_stack(void *unused)
{
    (void)unused;
    for (int i = 0; i < stack_cap; i++) free(stack[i].items);
    free(stack);
    stack = NULL;
    depth = stack_cap = 0;
}

static void make_stack_key(void) { (void)pthread_key_create(&stack_key, free_stack); }

int em_scope_depth(void) { return depth; }

void em_scope_begin(void)
{
    if (depth == stack_cap) {
        if (!stack_cap) {   /* this thread's first scope: arrange for its bookkeeping to go with it */
            pthread_once(&stack_key_once, make_stack_key);
            (void)pthread_setspecific(stack_key, (void *)1);
        }
        int cap = stack_cap ? 2 * stack_cap : 16;
        scope *s = realloc(stack, sizeof *s * (size_t)cap);
        if (!s) {
            em__misuse("em_scope_begin", "out of memory for scope %d", depth + 1);
            return;
        }
        for (int i = stack_cap; i < cap; i++) s[i] = (scope){0};
        stack = s;
        stack_cap = cap;
    }
    stack[depth++].n = 0;
}

void em_scope_end(void)
{
    if (depth == 0) {
        em__misuse("em_scope_end", "no scope is open (unbalanced em_scope_begin/em_scope_end)");
        return;
    }
    scope *s = &stack[--depth];
    /* newest first: views are released before the tensors they were made from */
    for (int64_t i = s->n - 1; i >= 0; i--) em__release_held(s->items[i]);
    s->n = 0;
}

/* Appends t to scope s. Scope bookkeeping uses the system allocator and never
 * fails by the test switch: a tensor that exists must always be owned. */
static bool scope_push(scope *s, em_tensor *t)
{
    if (s->n == s->cap) {
        em_tensor **items = em__grow(s->items, sizeof *items, &s->cap, 64, realloc);
        if (!items) return false;
        s->items = items;
    }
    s->items[s->n++] = t;
    t->held++;   /* the caller's reference becomes the scope's */
    return true;
}

em_tensor *em__scope_adopt(em_tensor *t)
{
    if (!t || depth == 0) return t;
    if (!scope_push(&stack[depth - 1], t)) {
        em_release(t);
        em__fail(EM_ERR_OOM, "out of memory recording a tensor in its scope");
        return NULL;
    }
    return t;
}

em_tensor *em_keep(em_tensor *t)
{
    if (!t || !em__live(t, "em_keep")) return NULL;
    if (depth == 0) {
        em__misuse("em_keep", "no scope is open; outside a scope the caller already owns the tensor");
        return NULL;
    }
    em_retain(t);
    if (depth >= 2 && !scope_push(&stack[depth - 2], t)) {
        em_release(t);
        em__fail(EM_ERR_OOM, "out of memory keeping a tensor in the parent scope");
        return NULL;
    }
    return t;
}
