/* ember — autograd/ internals: nodes, tensor metadata and the rule table. */
#ifndef EMBER_AUTOGRAD_INTERNAL_H
#define EMBER_AUTOGRAD_INTERNAL_H

#include "autograd/autograd.h"
#include "tensor/tensor_internal.h"

#define EM_NODE_MAX_OUT EM_KARGS_OUT
#define EM_ACCUMULATE_GRAD EM_NUM_OPS   /* the op id of a leaf's AccumulateGrad node */

typedef struct em_hook_list {
    int n, cap;
    struct { void (*fn)(void); void *user; } *items;   /* cast to the hook's type at the call */
} em_hook_list;

/* One edge: the gradient of a node's input i goes to output `nr` of `node`. */
typedef struct em_edge {
    em_node *node;   /* owned reference; NULL when that input needs no gradient */
    int nr;
} em_edge;

/* A recorded op. Refcounted: tensors' metadata and other nodes' edges hold it. */
struct em_node {
    int32_t refcount;
    int op;                          /* em_op, or EM_ACCUMULATE_GRAD             */
    uint64_t seq;                    /* creation order; backward runs newest first */
    int n_in, n_out;                 /* edges / differentiable outputs          */
    em_edge *next;                   /* n_in edges                               */
    /* What the rule may read: aliases (no history) of the inputs/outputs the
     * rule table asks to save, plus the op's scalar parameters. */
    em_kargs saved;
    uint32_t saved_version[EM_KARGS_IN + EM_KARGS_OUT];
    bool released;                   /* saved tensors freed after backward       */
    /* Geometry of inputs (n_in rows) and outputs, always kept (cheap). */
    struct em_geom { int ndim; int64_t shape[EM_MAX_DIMS]; em_dtype dtype; em_device device; } *in, out[EM_NODE_MAX_OUT];
    em_device device;
    em_hook_list pre_hooks[EM_NODE_MAX_OUT];   /* em_grad_hook, per output */
    /* AccumulateGrad only */
    em_tensor *leaf;                 /* weak: cleared when the leaf dies         */
    em_hook_list post_hooks;         /* em_post_accumulate_hook                  */
    /* backward bookkeeping */
    em_tensor *grad_buf[EM_NODE_MAX_OUT];
    int deps;
    uint64_t visit;
};

struct em_autograd_meta {
    bool requires_grad;
    em_tensor *grad;     /* leaves: accumulated gradient (owned)              */
    em_node *grad_fn;    /* non-leaves: the node that made this tensor (owned) */
    int output_nr;
    em_node *acc;        /* leaves: AccumulateGrad node (owned), made lazily   */
};

/* A backward rule: given the node (saved tensors, geometry, params) and the
 * gradients of its outputs (never NULL: missing ones are zeros), writes the
 * gradient of each input i with node->next[i].node != NULL into gin[i]
 * (results of ops, owned by the engine's scope; NULL means zero). Runs with
 * grad mode off. */
typedef void (*em_backward_fn)(em_node *n, em_tensor *const *gout, em_tensor **gin);

typedef struct em_rule {
    em_backward_fn backward;
    uint8_t save_in;      /* bit i: save an alias of input i  */
    uint8_t save_out;     /* bit j: save an alias of output j */
    int n_diff_out;       /* outputs that carry gradient (0 = all of the op's) */
    /* gradcheck (f64): step and tolerance for this op */
    double gc_eps, gc_atol, gc_rtol;
} em_rule;

extern const em_rule em_rules[EM_NUM_OPS];

/* Sums g over the dims that broadcasting added or expanded, back to shape. */
em_tensor *em__sum_to(em_tensor *g, int ndim, const int64_t *shape);

#endif
