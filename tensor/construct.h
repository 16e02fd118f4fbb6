/* ember — making tensors from inside ember: storages, new tensors and views
 * owned by the current scope, references that scopes and modules hold, and
 * shape helpers. For the layers that build tensors by hand (nn's unpadding,
 * data's collation, autograd's saved aliases, optim's state). Not installed. */
#ifndef EMBER_TENSOR_CONSTRUCT_H
#define EMBER_TENSOR_CONSTRUCT_H

#include "tensor/support.h"

/* ---- storage ------------------------------------------------------------ */
struct em_storage {
    void *data;          /* owned; freed through the device allocator at refcount 0 */
    size_t nbytes;
    em_device device;
    int32_t refcount;    /* one per tensor (view) that points here */
    uint32_t version;    /* bumped by every in-place write; autograd checks it */
};


/* ---- device memory -------------------------------------------------------- */
em_storage *em__storage_new(size_t nbytes, em_device dev);   /* NULL + EM_ERR_OOM */
/* The CPU caching allocator (alloc.c): 64-byte aligned, blocks reused by size
 * class so a steady loop never returns to the system. */
void *em__cpu_alloc(size_t nbytes);
void em__cpu_free(void *p, size_t nbytes);
void em__storage_release(em_storage *s);

/* ---- tensor construction ------------------------------------------------- */
/* A new contiguous tensor, owned by the current scope (see tensor.h). */
em_tensor *em__empty(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
/* A view of base's storage with the given geometry, owned by the current scope. */
em_tensor *em__view_of(em_tensor *base, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset);
/* References that a scope or a module holds (em_tensor.held): taken and given
 * back only through these, so that em_release can refuse a caller's release of
 * a reference it does not own (tensor.c). */
em_tensor *em__retain_held(em_tensor *t);
void em__release_held(em_tensor *t);
/* Hands a freshly made reference to the current scope (no-op at top level). */
em_tensor *em__scope_adopt(em_tensor *t);
void em__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
int em__wrap_dim(int dim, int ndim, const char *op);   /* -1 and misuse if out of range */
/* NumPy broadcast of two shapes into out; false if incompatible. */
bool em__broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);
/* A new reference-counted header over t's storage and geometry, without
 * autograd metadata and NOT owned by any scope (the caller releases it). */
em_tensor *em__alias(em_tensor *t);

#endif
