/* ember — autograd/ internals: nodes, tensor metadata and the rule table. */
#ifndef EMBER_AUTOGRAD_INTERNAL_H
#define EMBER_AUTOGRAD_INTERNAL_H

#include "autograd/autograd.h"
#include "tensor/construct.h"
#include "tensor/fused.h"
#include "tensor/hooks.h"
#include "tensor/support.h"

#define EM_NODE_MAX_OUT EM_KARGS_OUT
#define EM_ACCUMULATE_GRAD EM_NUM_OPS   /* the op id of a leaf's AccumulateGrad node */
#define EM_CUSTOM_FUNCTION (EM_NUM_OPS + 1)   /* the op id of an em_function's node */

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
    em_function_ctx *fn;             /* EM_CUSTOM_FUNCTION: the function and its saved state (owned) */
    em_hook_list pre_hooks[EM_NODE_MAX_OUT];   /* em_grad_hook, per output */
    /* AccumulateGrad only */
    em_tensor *leaf;                 /* weak: cleared when the leaf dies         */
    em_hook_list post_hooks;         /* em_post_accumulate_hook                  */
    /* backward bookkeeping */
    em_tensor *grad_buf[EM_NODE_MAX_OUT];
    int deps;
    bool sunk;                       /* this backward's gradient went into a leaf's .grad upstream (em__grad_sink) */
    int bypassed;                    /* consumers that added around this cast (em__pending_sink_cast) */
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
    /* bit j: save output j as a hint, a shortcut the rule may take (GELU's f32
     * backward reads y = gelu(x)). If an in-place op changes it before the
     * backward, the rule finds saved.out[j] NULL and takes the long way, where
     * a save_out tensor would be an error. */
    uint8_t hint_out;
    int n_diff_out;       /* outputs that carry gradient (0 = all of the op's) */
    /* gradcheck (f64): step and tolerance for this op */
    double gc_eps, gc_atol, gc_rtol;
} em_rule;

extern const em_rule em_rules[EM_NUM_OPS];

/* The node's name: the op's, "AccumulateGrad", or a custom function's. */
const char *em__node_name(const em_node *n);

/* Custom functions (autograd/function.c), for the engine: */
const char *em__fn_name(const em_function_ctx *c);
void em__fn_free(em_function_ctx *c);               /* the context and its saved tensors */
bool em__fn_release_saved(em_function_ctx *c);      /* drops saved tensors; true when there were any */
void em__fn_check_versions(const em_node *n);       /* misuse when a saved tensor changed in place */
void em__fn_backward(em_node *n, em_tensor *const *gout, em_tensor **gin);
/* engine.c's recording pieces that function.c reuses */
em_node *em__node_new(int op, int n_in);
bool em__node_link_inputs(em_node *n, int n_in, em_tensor *const *in);   /* edges + input geometry */
bool em__node_adopt_output(em_node *n, em_tensor *out, int j);           /* out's grad_fn := n, output j */
void em__node_drop(em_node *n);                                          /* releases a node never adopted */

/* A gradient sink: the leaf .grad into which a rule may add input i's gradient
 * itself (in place, with the bits accumulate() would give), instead of returning
 * it in gin[i] -- so a gradient that is mostly zeros (embedding's) or one a GEMM
 * could add (beta = 1) needs no dense temporary and no second pass. Non-NULL
 * only when that addition is all the engine would do with gin[i]: the input is a
 * leaf's AccumulateGrad node, this node is its only producer in this backward,
 * it has no gradient hooks (em_register_hook) and the leaf already has a
 * contiguous .grad of the given dtype and the input's shape and device. A
 * non-NULL return commits the rule: it must add into it and leave gin[i] NULL;
 * the AccumulateGrad node then only fires its post-accumulate hooks (DDP's
 * buckets see the gradient as usual). */
em_tensor *em__grad_sink(em_node *n, int i, em_dtype dt);
/* The same one cast further: input i is the dtype cast (COPY) of a leaf whose
 * .grad has dtype dt (autocast's bf16 copy of an f32 weight), the cast's only
 * consumer is this node, and the leaf's AccumulateGrad node qualifies as above.
 * The rule then adds its gradient, converted to dt, into that .grad; the cast
 * node is skipped (no [N,K] gradient in the low dtype, no conversion, no add). */
em_tensor *em__grad_sink_cast(em_node *n, int i, em_dtype dt);
/* The same for an activation: input i is, through at most one reshape (VIEW)
 * whose only producer is this node, the widening cast (COPY, f32 -> bf16/f16:
 * autocast's copy of an f32 activation) of an f32 tensor that needs a
 * gradient. Returns that tensor's pending f32 gradient buffer (the engine's,
 * contiguous, the f32 tensor's shape; made, zeroed, when nothing is pending
 * yet), into which the rule adds input i's gradient itself, in f32 and
 * unrounded, instead of returning a low-dtype gin[i] that the engine would
 * sum with the cast's other consumers' in the low dtype, convert and add. The
 * cast may have other consumers: those still send their gradients through it
 * (the cast's backward then runs as usual); when none does, it is skipped.
 * NULL (no sink) when the cast or the view carries gradient hooks, or the
 * pending buffer is shared with another tensor. A non-NULL return commits
 * the rule as em__grad_sink's does. */
em_tensor *em__pending_sink_cast(em_node *n, int i);

/* Sums g over the dims that broadcasting added or expanded, back to shape. */
em_tensor *em__sum_to(em_tensor *g, int ndim, const int64_t *shape);

#endif
