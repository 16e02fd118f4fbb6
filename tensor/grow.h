/* ember — growing an array by doubling: scope lists (tensor/scope.c),
 * autograd's ready heap (autograd/engine.c), the optimizer's string lists
 * (optim/optimizer.c). Internal, header-only. */
#ifndef EMBER_TENSOR_GROW_H
#define EMBER_TENSOR_GROW_H

#include <stddef.h>
#include <stdint.h>

/* items (*cap elements of elem bytes) reallocated by realloc_fn to twice *cap
 * elements, or first when *cap is 0: the system realloc for bookkeeping that
 * the allocation-failure switch must not reach, em__realloc otherwise. Returns
 * the new array and updates *cap, or returns NULL leaving items and *cap as
 * they were. */
static inline void *em__grow(void *items, size_t elem, int64_t *cap, int64_t first,
                             void *(*realloc_fn)(void *, size_t))
{
    int64_t n = *cap ? 2 * *cap : first;
    void *p = realloc_fn(items, elem * (size_t)n);
    if (p) *cap = n;
    return p;
}

#endif
