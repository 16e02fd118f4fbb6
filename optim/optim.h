/** @file
 * ember — optim/: optimizers with param groups, LR schedulers, grad clipping
 * (DESIGN.md §3 "optim").
 *
 * Parity (tests/test_optim.c against tests/fixtures/optim_golden.safetensors):
 *   - em_adamw_* is torch.optim.AdamW (single-tensor path, the CPU default)
 *     step for step: decoupled decay first with the group's current lr, lerp
 *     of the first moment, bias correction in double, eps added after the
 *     bias-corrected sqrt, amsgrad, maximize, per-parameter step counters.
 *   - em_sgd_* is torch.optim.SGD: weight decay added to the gradient,
 *     momentum buffer = the first gradient on its first step, dampening,
 *     nesterov, maximize.
 *   - The schedulers are LambdaLR with the lambdas of transformers'
 *     get_{linear,cosine,constant}_schedule_with_warmup.
 *   - em_clip_grad_norm is torch.nn.utils.clip_grad_norm_.
 *
 * Ownership:
 *   - An optimizer retains its parameters (and owns its state tensors) until
 *     em_optimizer_free. A scheduler borrows its optimizer, which must outlive it.
 *   - Arrays passed in (params, groups, names) are only read during the call.
 *
 * Updates run on the parameters' data directly, with no autograd recording,
 * and bump the storage version (like torch's in-place updates under no_grad):
 * a graph that saved a parameter cannot be back-propagated after a step.
 *
 * Parameters: leaves, contiguous, f32 or f64, on the CPU (AdamW: or on a CUDA
 * device, updated by one fused multi-tensor kernel per group with the CPU
 * loop's arithmetic; SGD is CPU-only) (master weights stay f32:
 * DESIGN.md "amp"). Their state (moments, momentum buffers) has the parameter's
 * dtype, as in torch. Parameters whose .grad is NULL are skipped, as in torch.
 * When consecutive parameters of a group are adjacent views of one storage (a
 * flat parameter buffer, DESIGN.md "Flat parameter and gradient storage"), their
 * state is one flat buffer too, and when their gradients are adjacent views of
 * one gradient buffer the update is ONE OpenMP pass over the whole span.
 *
 * Failure: bad arguments (negative lr, betas outside [0,1), a group index out of
 * range, a parameter listed twice) are misuse (handler, aborts). Outside
 * failures return an em_status (or NULL) with em_last_error(): OOM, I/O, a
 * state file that does not fit this optimizer (which is then left unchanged).
 */
#ifndef EMBER_OPTIM_H
#define EMBER_OPTIM_H

#include "tensor/tensor.h"
#include "nn/nn.h"   /* em_module: optimizers over a module's parameters */

#ifdef __cplusplus
extern "C" {
#endif

/** Option fields whose default is not zero read 0 as "the default"; pass
 * EM_ZERO (negative zero) to ask for an actual 0, e.g.
 * `&(em_adamw_opts){ .weight_decay = EM_ZERO }` turns AdamW's decay off. */
#define EM_ZERO (-0.0)

/* ---- param groups ------------------------------------------------------------ */
/** One group of parameters with its own hyperparameters (torch's param_groups).
 * In a group given to a constructor, 0 means "the optimizer's option" and
 * EM_ZERO an explicit 0; fields of the other optimizer kind are ignored.
 * em_optimizer_group returns the resolved values. */
typedef struct em_param_group {
    em_tensor *const *params;   /**< n_params tensors */
    int n_params;               /**< entries of params (0: an empty group) */
    double lr;                  /**< learning rate */
    double weight_decay;        /**< decay factor (AdamW: decoupled; SGD, Adam: added to the gradient) */
    /** @{ */
    double momentum, dampening; /**< SGD   */
    /** @} */
    /** @{ */
    double betas[2], eps;       /**< AdamW, Adam */
    /** @} */
} em_param_group;

/** An optimizer (opaque): made by em_optimizer_new, or the typed em_sgd_new /
 * em_adamw_new and their _groups forms; freed by em_optimizer_free. */
typedef struct em_optimizer em_optimizer;

/** torch.optim.SGD. Defaults: lr 1e-3 (torch 2.x), everything else 0/false.
 * nesterov needs momentum > 0 and dampening 0 (misuse otherwise). */
typedef struct em_sgd_opts {
    double lr;                                  /**< learning rate; 0 -> 1e-3 */
    /** @{ */
    double momentum, dampening, weight_decay;   /**< torch's meanings; 0 by default */
    /** @} */
    /** @{ */
    bool nesterov, maximize;                    /**< Nesterov momentum; ascend instead of descend */
    /** @} */
} em_sgd_opts;

/** torch.optim.AdamW. Defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 1e-2 (EM_ZERO for none), amsgrad and maximize off. */
typedef struct em_adamw_opts {
    double lr;             /**< learning rate; 0 -> 1e-3 */
    double betas[2];       /**< moment decay rates; 0 -> 0.9, 0.999 */
    double eps;            /**< added to the denominator; 0 -> 1e-8 */
    double weight_decay;   /**< decoupled decay; 0 -> 1e-2, EM_ZERO for none */
    /** @{ */
    bool amsgrad, maximize;   /**< AMSGrad's max of second moments; ascend instead of descend */
    /** @} */
} em_adamw_opts;

/** One group holding params[0..n). opts may be NULL (defaults). NULL on OOM
 * (or when a parameter is NULL from an earlier failure). Misuse: see the file
 * comment. The caller frees the result with em_optimizer_free. */
em_optimizer *em_sgd_new(em_tensor *const *params, int n, const em_sgd_opts *opts);
/** AdamW over one group holding params[0..n), as em_sgd_new. */
em_optimizer *em_adamw_new(em_tensor *const *params, int n, const em_adamw_opts *opts);
/** SGD(model.parameters()): one group of every parameter of m (em_module_parameters order). */
em_optimizer *em_sgd_new_module(em_module *m, const em_sgd_opts *opts);
/** AdamW(model.parameters()): one group of every parameter of m. */
em_optimizer *em_adamw_new_module(em_module *m, const em_adamw_opts *opts);
/** Several groups (some may be empty, but not all). */
em_optimizer *em_sgd_new_groups(const em_param_group *groups, int n_groups, const em_sgd_opts *opts);
/** AdamW over several groups, as em_sgd_new_groups. */
em_optimizer *em_adamw_new_groups(const em_param_group *groups, int n_groups, const em_adamw_opts *opts);
/** Options of em_optimizer_new. */
typedef struct em_optimizer_opts {
    /** The groups' defaults (params ignored): 0 fields take the kind's own
     * defaults (torch's), EM_ZERO is an explicit 0; fields the kind does not
     * use are ignored. */
    em_param_group defaults;
    bool maximize;   /**< ascend instead of descend */
    bool flag;       /**< the kind's own switch: amsgrad (AdamW, Adam), nesterov (SGD) */
} em_optimizer_opts;

/** Any registered optimizer by torch's class name ("SGD", "AdamW", "Adam"),
 * over n_groups groups (as em_sgd_new_groups). opts may be NULL (the kind's
 * defaults). The typed constructors above are shorthands for the kinds they
 * name. Misuse: an unknown name (the message lists the known ones), and the
 * kind's own checks. NULL on OOM. */
em_optimizer *em_optimizer_new(const char *kind, const em_param_group *groups, int n_groups,
                               const em_optimizer_opts *opts);
/** torch's add_param_group: the new group's zero fields take the optimizer's options. */
em_status em_optimizer_add_param_group(em_optimizer *opt, const em_param_group *group);
void em_optimizer_free(em_optimizer *opt);   /**< releases parameters and state; NULL is ok */

/** One update of every parameter that has a gradient. EM_ERR_OOM if the state
 * (allocated on the first step, as in torch) cannot be; EM_ERR_UNSUPPORTED for
 * parameters on a device the optimizer has no kernel for. Nothing is updated
 * on failure, except when a device kernel fails (EM_ERR_DEVICE): the groups
 * before it stay updated. */
em_status em_optimizer_step(em_optimizer *opt);
/** Drops every parameter's gradient (torch 2.x's set_to_none=True). */
void em_optimizer_zero_grad(em_optimizer *opt);
/** set_to_none=false fills the gradients with zeros in place instead: use it
 * when gradients are views of a flat gradient buffer, which must stay views. */
void em_optimizer_zero_grad_ex(em_optimizer *opt, bool set_to_none);

const char *em_optimizer_name(const em_optimizer *opt);   /**< "AdamW" or "SGD" */
int em_optimizer_num_groups(const em_optimizer *opt);   /**< parameter groups (0 for NULL) */
/** Group g with its resolved hyperparameters; .params points into the
 * optimizer (valid until the next add_param_group or free). */
em_param_group em_optimizer_group(const em_optimizer *opt, int g);
/** The gradients of opt's parameters (em_grad of each; NULL where a parameter
 * has none), group after group: a new array of *n borrowed pointers; free()
 * it. For em_grad_scaler_unscale_grads / em_grad_scaler_prepare_step. NULL
 * with *n = 0 for an optimizer without parameters; NULL with *n = -1 and
 * EM_ERR_OOM recorded when the array cannot be allocated. */
em_tensor **em_optimizer_grads(const em_optimizer *opt, int *n);
double em_optimizer_lr(const em_optimizer *opt, int g);   /**< group g's current lr; misuse when g is out of range */
void em_optimizer_set_lr(em_optimizer *opt, int g, double lr);   /**< sets group g's lr (finite, >= 0; misuse otherwise) */
/** Updates of group g's i-th parameter so far: torch's state["step"] for AdamW
 * (0 before its first update). For SGD, which keeps no step, > 0 means the
 * momentum buffer is set (after a state load: 1). */
double em_optimizer_param_step(const em_optimizer *opt, int g, int i);

/* ---- checkpoints ------------------------------------------------------------
 * The state is one safetensors file, laid out like torch's state_dict():
 *   tensors   state.<i>.step            f32 0-d (AdamW)
 *             state.<i>.exp_avg, state.<i>.exp_avg_sq[, state.<i>.max_exp_avg_sq]  (AdamW)
 *             state.<i>.momentum_buffer  (SGD with momentum)
 *     where <i> numbers the parameters across groups in order, and only
 *     parameters that have state (have been updated) appear, as in torch;
 *   metadata  "format" = "ember.optimizer/1", "optimizer" = "AdamW"|"SGD",
 *             "param_groups" = the group count,
 *             "param_groups.<g>.params" = "i,j,..." (the indices of its params),
 *             "param_groups.<g>.<key>" = every hyperparameter ("lr", "initial_lr"
 *             when a scheduler set it, "weight_decay", "betas" = "b1,b2", "eps",
 *             "momentum", "dampening", "amsgrad", "maximize", "nesterov"),
 *             numbers printed with 17 significant digits (exact round trip).
 * Loading checks that the optimizer kind, group count, group sizes and every
 * tensor's shape match, converts float state to the parameter's dtype (as
 * torch does), replaces the groups' hyperparameters by the saved ones (as
 * torch's load_state_dict), and resets the state of parameters the file does
 * not mention. A mismatch is EM_ERR_INVALID (a malformed file EM_ERR_FORMAT),
 * the message names the key and the shapes, and the optimizer is unchanged. */
/** Writes opt's state to path in the layout above (atomically, through
 * em_safetensors_save; state held on a GPU is copied to the host first, and
 * loading copies it back to the parameters' device). EM_ERR_IO or EM_ERR_OOM
 * on failure. */
em_status em_optimizer_state_save(const em_optimizer *opt, const char *path);
/** Loads a file from em_optimizer_state_save into opt, checked as described
 * above: EM_ERR_INVALID on a mismatch, EM_ERR_FORMAT on a malformed file (both
 * naming the key), and opt unchanged on any failure. */
em_status em_optimizer_state_load(em_optimizer *opt, const char *path);

/* ---- weight-decay grouping ---------------------------------------------------
 * The rule (transformers' Trainer, not the examples' substring rule; see
 * reference §0.11 and §6): a parameter gets NO weight decay when
 *   (a) it has at most one dimension — every bias and every LayerNorm weight
 *       (this stands in for the Trainer's isinstance(module, nn.LayerNorm)
 *       test, which C cannot make), or
 *   (b) its lowercased name matches one of the Trainer's patterns: contains
 *       "bias", "layernorm" or "rmsnorm", or has a dotted component "norm" or
 *       one ending in "_norm".
 * HF's example rule, no_decay = ["bias", "LayerNorm.weight"] as substrings,
 * decays DistilBERT's sa_layer_norm.weight and output_layer_norm.weight; this
 * rule does not (for DistilBERT and BERT it equals the Trainer's decay set,
 * which the test checks on the real parameter names). It differs from the
 * Trainer only for a 1-d parameter that is neither a bias nor in a norm layer
 * (a learned scale, say): the Trainer decays it, this rule does not. */
/** Whether the parameter called name gets no weight decay by the rule above:
 * param has at most one dim, or name (case-insensitively) contains "bias",
 * "layernorm" or "rmsnorm", or has a dotted component "norm" or ending in
 * "_norm". Either argument may be NULL (its test is then skipped). */
bool em_param_no_decay(const char *name, const em_tensor *param);
/** Splits named parameters (names[i] for params[i]) into out[0] (decayed, with
 * weight_decay) and out[1] (not decayed, weight_decay EM_ZERO), keeping their
 * order. buf (n entries, the caller's) receives the tensors: out[0].params and
 * out[1].params point into it. Either group may be empty. Returns 2, the number
 * of groups, to pass to em_*_new_groups. */
int em_param_groups_no_decay(const char *const *names, em_tensor *const *params, int n, double weight_decay,
                             em_tensor **buf, em_param_group out[2]);

/* ---- LR schedulers -------------------------------------------------------------
 * LambdaLR semantics: construction records each group's initial_lr (its lr,
 * unless a scheduler already recorded one) and sets lr = initial_lr * f(0);
 * each em_scheduler_step sets lr = initial_lr * f(last_epoch + 1), in double,
 * exactly as Python computes it. Call it once after every optimizer step. */
/** An LR scheduler (opaque) over one optimizer's groups, with the LambdaLR
 * semantics above. Free it with em_scheduler_free before the optimizer. */
typedef struct em_scheduler em_scheduler;
/** The multiplier f(step) of the initial lr; user is the pointer given to em_lambda_lr_new. */
typedef double (*em_lr_lambda)(int64_t step, void *user);

/** torch's LambdaLR with f (user passed to it); sets every group's lr to
 * initial_lr * f(0) at once. NULL on OOM; misuse when f or opt is NULL. */
em_scheduler *em_lambda_lr_new(em_optimizer *opt, em_lr_lambda f, void *user);
/** transformers.get_linear_schedule_with_warmup: f(s) = s/max(1,W) for s < W,
 * else max(0, (T-s)/max(1,T-W)). With W > 0 the first step runs at lr 0. */
em_scheduler *em_linear_schedule_with_warmup(em_optimizer *opt, int64_t num_warmup_steps,
                                             int64_t num_training_steps);
/** get_cosine_schedule_with_warmup: after warmup, max(0, (1+cos(pi*c*2*progress))/2);
 * num_cycles c: 0 -> 0.5 (half a cosine, down to 0 at T). Past T the curve
 * rises again, as HF's does. */
em_scheduler *em_cosine_schedule_with_warmup(em_optimizer *opt, int64_t num_warmup_steps,
                                             int64_t num_training_steps, double num_cycles);
/** get_constant_schedule_with_warmup: s/max(1,W) for s < W, then 1. */
em_scheduler *em_constant_schedule_with_warmup(em_optimizer *opt, int64_t num_warmup_steps);

/** Advances one step: lr = initial_lr * f(last_epoch + 1) in every group.
 * Misuse when the optimizer gained groups since the scheduler was made. */
void em_scheduler_step(em_scheduler *s);
/** The lr the scheduler last set in group (misuse out of range). */
double em_scheduler_get_last_lr(const em_scheduler *s, int group);
/** Steps taken (0 right after construction; -1 for NULL). */
int64_t em_scheduler_last_epoch(const em_scheduler *s);
/** A safetensors file with no tensors; metadata "format" = "ember.scheduler/1",
 * "kind", "last_epoch", "base_lrs" (comma-separated, 17 digits), "last_lrs".
 * Loading restores last_epoch and the lrs it records (like torch's
 * load_state_dict, it does not touch the optimizer: load its state too); the
 * kind and group count must match (EM_ERR_INVALID otherwise). */
em_status em_scheduler_state_save(const em_scheduler *s, const char *path);
/** Restores a state from em_scheduler_state_save, as described above; I/O and
 * format errors name path, and s is unchanged on failure. */
em_status em_scheduler_state_load(em_scheduler *s, const char *path);
/** Frees s (the optimizer keeps its current lrs); NULL is ok. */
void em_scheduler_free(em_scheduler *s);

/* ---- gradient clipping ---------------------------------------------------------
 * torch.nn.utils.clip_grad_norm_: the total norm of the gradients of params
 * (those without one skipped) is the norm of their per-tensor norms; each
 * gradient is then multiplied in place by min(max_norm / (total + 1e-6), 1).
 * The arithmetic follows torch's in the gradients' dtype (f32: norms rounded to
 * f32, coefficient = max_norm * (1 / (total + 1e-6f)) in f32); sums are
 * accumulated in f64. A nonfinite total is returned as it is, and, as in torch,
 * the gradients are still multiplied (an inf total zeroes finite gradients and
 * turns infinite ones into NaN; a NaN total makes every gradient NaN).
 * Gradients on a GPU are reduced there by ops, in f64, one read-back each (the
 * order of the additions is the device's: the last bits may differ from the
 * CPU's), and scaled there. */
/** Options of the clipping functions; zeroed (or a NULL pointer) means torch's defaults. */
typedef struct em_clip_grad_opts {
    double norm_type;          /**< 0 -> 2; INFINITY for the max-norm; any p > 0 */
    bool error_if_nonfinite;   /**< nonfinite total: EM_ERR_INVALID, gradients untouched */
} em_clip_grad_opts;
/** *total_norm (may be NULL) receives the norm before clipping, 0 when no
 * parameter has a gradient. opts may be NULL. */
em_status em_clip_grad_norm(em_tensor *const *params, int n, double max_norm, const em_clip_grad_opts *opts,
                            double *total_norm);
/** The same over every parameter of an optimizer, in group order. */
em_status em_optimizer_clip_grad_norm(em_optimizer *opt, double max_norm, const em_clip_grad_opts *opts,
                                      double *total_norm);

#ifndef EMBER_BUILDING
#include "optim/optim_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
