/* ember — nn/: modules, layers, losses, DistilBERT/BERT (DESIGN.md §3 "nn").
 *
 * A module embeds em_module as its FIRST member, so a pointer to the layer is
 * also a pointer to its em_module. It registers its parameters, buffers and
 * children by name; em_module_named_parameters then yields Hugging Face's
 * dotted names ("distilbert.transformer.layer.0.attention.q_lin.weight").
 *
 * Ownership:
 *   - A module owns (holds one reference to) its parameters and buffers, and
 *     owns its children: em_module_free frees the whole tree.
 *   - Parameter tensors keep their identity for the module's whole life:
 *     em_module_flatten and em_module_to move their data but never replace
 *     the em_tensor structs, so pointers taken earlier stay valid.
 * Forward functions return op results owned by the caller's scope.
 */
#ifndef EMBER_NN_H
#define EMBER_NN_H

#include "autograd/autograd.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_module em_module;

typedef struct em_module_entry {
    char *name;          /* local name ("weight", "0", "attention") */
    union { em_tensor *tensor; em_module *module; };
    bool persistent;     /* buffers: saved in checkpoints */
} em_module_entry;

struct em_module {
    const char *type;                 /* "Linear", "DistilBertModel", ...          */
    void (*destroy)(em_module *m);    /* frees what the subtype owns besides the registry; may be NULL */
    bool training;
    int n_params, n_buffers, n_children;
    em_module_entry *params, *buffers, *children;
    int cap_params, cap_buffers, cap_children;
    /* after em_module_flatten (root only): one buffer per dtype, owned */
    em_tensor *flat_params[EM_NUM_DTYPES], *flat_grads[EM_NUM_DTYPES];
};

/* ---- building a module ---------------------------------------------------------- */
/* Initializes the base of a module (zeroed registry, training mode). */
void em_module_init(em_module *m, const char *type, void (*destroy)(em_module *m));
/* Registers t as a parameter (requires grad) under a local name; the module
 * takes one reference (the caller keeps its own, if any). Returns t. */
em_tensor *em_module_register_parameter(em_module *m, const char *name, em_tensor *t);
em_tensor *em_module_register_buffer(em_module *m, const char *name, em_tensor *t, bool persistent);
/* Adopts child (the module frees it). Returns child. */
em_module *em_module_register_child(em_module *m, const char *name, em_module *child);
/* Frees the module tree (children first), releasing parameters and buffers. NULL is ok. */
void em_module_free(em_module *m);

/* ---- walking a module ------------------------------------------------------------- */
typedef struct em_named_tensor {
    char *name;          /* full dotted name, owned by the list */
    em_tensor *tensor;   /* borrowed from the module */
} em_named_tensor;
typedef struct em_named_tensors {
    int n;
    em_named_tensor *items;
} em_named_tensors;
/* Parameters in registration order (depth first, a module's own before its
 * children's), each tensor once even if shared. Free with em_named_tensors_free. */
em_named_tensors em_module_named_parameters(const em_module *m);
/* Persistent buffers (for checkpoints); all buffers when include_nonpersistent. */
em_named_tensors em_module_named_buffers(const em_module *m, bool include_nonpersistent);
void em_named_tensors_free(em_named_tensors *l);
/* The parameter or persistent buffer with this dotted name, or NULL. */
em_tensor *em_module_get(const em_module *m, const char *dotted_name);
/* The child at a dotted path ("distilbert.transformer"), or NULL. */
em_module *em_module_child(const em_module *m, const char *dotted_path);
int64_t em_module_num_parameters(const em_module *m, bool only_trainable);

/* ---- modes and bulk operations ------------------------------------------------------ */
void em_module_train(em_module *m, bool training);   /* the whole tree; eval = train(false) */
bool em_module_is_training(const em_module *m);
/* Clears gradients: set_to_none drops them (torch's default); otherwise zeroes
 * them in place. After em_module_flatten gradients are always zeroed in place
 * (one memset per flat buffer), so they stay views of the flat buffer. */
void em_module_zero_grad(em_module *m, bool set_to_none);
/* Calls fn on every module of the tree, children first, then m (torch's apply). */
void em_module_apply(em_module *m, void (*fn)(em_module *m, void *user), void *user);
/* Moves every parameter and buffer to dev in place (tensor identities kept).
 * Returns EM_OK or EM_ERR_OOM (then nothing moved). */
em_status em_module_to(em_module *m, em_device dev);
/* Flat parameter storage (DESIGN.md §3): moves all parameters of one dtype
 * and device into one contiguous buffer, in registration order, each
 * parameter a view into it; gradients get the same layout in a second buffer
 * (each .grad a zeroed view). Idempotent. EM_ERR_OOM leaves m unchanged. */
em_status em_module_flatten(em_module *m);
/* After em_module_flatten: the flat parameter and gradient buffers of dtype
 * (1-d tensors owned by the module), or NULL. */
em_tensor *em_module_flat_params(const em_module *m, em_dtype dt);
em_tensor *em_module_flat_grads(const em_module *m, em_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
