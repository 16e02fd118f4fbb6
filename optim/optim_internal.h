/* ember — optim/ internals: the optimizer object, its groups and per-parameter
 * state, and the interface each optimizer kind (sgd.c, adamw.c) implements.
 * Not installed. */
#ifndef EMBER_OPTIM_INTERNAL_H
#define EMBER_OPTIM_INTERNAL_H

#include "optim/optim.h"
#include "tensor/construct.h"
#include "tensor/numeric.h"
#include "tensor/support.h"

#include <omp.h>

#define EM__OPT_MAX_STATE 3   /* state tensors per parameter, at most */
#define EM__OPT_MAX_HP 4      /* a kind's own hyperparameters per group, at most */

/* One parameter and its state. state[k] are views of a flat buffer that the
 * parameter shares with its neighbours in storage (see alloc in optimizer.c);
 * NULL until the group's state is allocated. */
typedef struct em__pstate {
    em_tensor *state[EM__OPT_MAX_STATE];   /* owned references          */
    double step;   /* updates so far: torch's state["step"] (AdamW); for SGD,
                      > 0 means the momentum buffer holds a value        */
} em__pstate;

typedef struct em__group {
    int n;
    em_tensor **params;     /* n owned references                              */
    em__pstate *ps;         /* n entries                                       */
    int n_alloc;            /* state tensors allocated per parameter so far    */
    double lr, initial_lr;  /* initial_lr is valid when has_initial_lr         */
    bool has_initial_lr;    /* set by the first scheduler built on this group  */
    double weight_decay;
    double hp[EM__OPT_MAX_HP];   /* the kind's own (AdamW: beta1, beta2, eps; SGD: momentum, dampening) */
} em__group;

/* A group's hyperparameters in a state file (keys "param_groups.<g>.<name>"):
 * the generic ones are written by optimizer.c, a kind's own by its
 * save_meta / load_meta through these. */
typedef struct em__meta_out em__meta_out;
typedef struct em__meta_in em__meta_in;
/* Adds "<name>" = printf(fmt, ...) to the group's keys; false on OOM. */
bool em__meta_put(em__meta_out *out, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reads a finite number >= lo and < hi; EM_ERR_FORMAT naming the file and key
 * when missing or malformed, EM_ERR_INVALID when out of range. */
em_status em__meta_num(const em__meta_in *in, const char *name, double lo, double hi, double *out);
/* Reads "a,b" (torch's betas) into out[0], out[1], each in [lo, hi). */
em_status em__meta_pair(const em__meta_in *in, const char *name, double lo, double hi, double out[2]);
/* Reads a boolean that must equal want (a switch the optimizer was built with). */
em_status em__meta_flag(const em__meta_in *in, const char *name, bool want);

/* A contiguous run of elements updated by one kernel call: one parameter, or
 * several that are adjacent in their storage, with gradients and state
 * adjacent too, and the same step count. The raw pointers serve a kind's CPU
 * loop (update); the tensors (the run's first parameter, gradient and state,
 * whose storages hold all n elements from their offsets) serve update_ops. */
typedef struct em__span {
    void *p;                          /* parameter data      */
    const void *g;                    /* gradient data       */
    void *s[EM__OPT_MAX_STATE];       /* state data          */
    em_tensor *tp, *tg, *ts[EM__OPT_MAX_STATE];
    int64_t n;                        /* elements            */
    em_dtype dtype;                   /* EM_F32 or EM_F64    */
    double step;                      /* step count before this update */
} em__span;

typedef struct em__optim_kind {
    const char *name;                                   /* torch's class name: "AdamW", "SGD" */
    em__group defaults;                                 /* torch's defaults: lr, weight_decay, hp[] */
    const char *state_names[EM__OPT_MAX_STATE];         /* torch's state keys */
    bool has_step;                                      /* state["step"] is saved */
    /* Its hyperparameters: from a public group (zero fields take d's, as
     * em__opt_value), back to the public view, and to / from a state file
     * (its torch keys; its optimizer-wide switch too). */
    void (*resolve)(const em_param_group *pg, const em__group *d, em__group *g);
    void (*to_public)(const em_optimizer *o, const em__group *g, em_param_group *pg);
    bool (*save_meta)(const em_optimizer *o, const em__group *g, em__meta_out *out);
    em_status (*load_meta)(const em_optimizer *o, const em__meta_in *in, em__group *g);
    /* State tensors a parameter of g needs (AdamW: 2, or 3 with amsgrad; SGD: 1
     * when g's momentum != 0, else 0). */
    int (*n_state)(const em_optimizer *o, const em__group *g);
    /* Misuse check of g's resolved hyperparameters (op names the caller). */
    bool (*check)(const em_optimizer *o, const em__group *g, const char *op);
    /* A kind implements one or both (update wins on the CPU):
     * update: one span of CPU parameters in place (no allocation, cannot fail);
     * update_ops: n spans of parameters on one device dev (any, the CPU too)
     * through tensor ops (tensor/fused.h), so every backend with those ops
     * runs it; with n == 0 only checks that dev can. EM_OK, or the op's
     * failure (the spans before it stay updated). */
    void (*update)(const em_optimizer *o, const em__group *g, const em__span *sp);
    em_status (*update_ops)(const em_optimizer *o, const em__group *g, const em__span *sps, int n, em_device dev);
} em__optim_kind;

struct em_optimizer {
    const em__optim_kind *kind;
    int n_groups, cap_groups;
    em__group *groups;
    em__group defaults;   /* resolved options; n = 0, no params */
    bool maximize;        /* optimizer-wide switches: torch's maximize, */
    bool flag;            /* and the kind's own (AdamW: amsgrad; SGD: nesterov) */
};

/* The Adam family (optim/adamw.c): what AdamW and Adam share. hp[] holds
 * beta1, beta2, eps; the kind's switch is amsgrad. update_ops runs one
 * ADAMW_STEP op per span, with the weight decay decoupled (AdamW) or, with
 * l2, added to the gradient (Adam). */
enum { EM__ADAM_B1, EM__ADAM_B2, EM__ADAM_EPS };
void em__adam_resolve(const em_param_group *pg, const em__group *d, em__group *g);
void em__adam_to_public(const em_optimizer *o, const em__group *g, em_param_group *pg);
bool em__adam_save_meta(const em_optimizer *o, const em__group *g, em__meta_out *out);
em_status em__adam_load_meta(const em_optimizer *o, const em__meta_in *in, em__group *g);
int em__adam_n_state(const em_optimizer *o, const em__group *g);
bool em__adam_check(const em_optimizer *o, const em__group *g, const char *op);
em_status em__adam_update_ops(const em_optimizer *o, const em__group *g, const em__span *sps, int n, bool l2);
/* The em__optim_kind slots the family shares (all but name, defaults and update_ops). */
#define EM__ADAM_FAMILY_SLOTS                                                                           \
    .state_names = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, .has_step = true, .resolve = em__adam_resolve, \
    .to_public = em__adam_to_public, .save_meta = em__adam_save_meta, .load_meta = em__adam_load_meta,        \
    .n_state = em__adam_n_state, .check = em__adam_check

/* The registered kinds (optim/kinds.c): the kind named name (torch's class
 * name, case-sensitive), or NULL. */
const em__optim_kind *em__optim_kind_named(const char *name);
/* Builds an optimizer of kind k: defaults and switches already resolved by the
 * caller; each group's zero fields take the defaults. op names the public
 * function for misuse messages. NULL on OOM or misuse. */
em_optimizer *em__optimizer_new(const em__optim_kind *k, const em__group *defaults, bool flag, bool maximize,
                                const em_param_group *groups, int n_groups, const char *op);
/* One group of every parameter of m (em_module_parameters; free() .params),
 * for the *_new_module constructors; misuse in op when m is NULL. */
em_param_group em__module_group(em_module *m, const char *op);
/* v, except that +0 means "default" and -0 (EM_ZERO) means 0. */
double em__opt_value(double v, double def);

/* FMA, as torch. PyTorch's AVX2/AVX-512 CPU kernels fuse `x + a*b`: lerp and
 * add-with-alpha explicitly (vec::fmadd), addcmul by the compiler's
 * contraction. On CPUs without FMA torch runs its default kernels, unfused.
 * The optimizer kernels are compiled twice, unfused (ISO C: no contraction) and
 * with EM__FMA_TARGET and explicit fma() where torch fuses, and dispatch on
 * em__opt_have_fma(), so that trajectories agree with torch's bit for bit. */
extern bool em__opt_plain;   /* tests: force the unfused kernels */
static inline bool em__opt_have_fma(void) { return !em__opt_plain && em__cpu_has_fma(); }

/* A hook from above (installed by distributed/'s Accelerator, which owns the
 * loop's GradScaler): true when gradients about to be clipped may still carry
 * an fp16 loss scale, *scale getting it; clip_grad_norm then warns once.
 * NULL: no check. optim/ never calls amp/. */
extern bool (*em__clip_scale_probe)(double *scale);

#endif
