/** @file
 * ember — distributed/accelerate/: Hugging Face Accelerate's Accelerator on
 * top of DDP and the process group (DESIGN.md §3 "distributed"; semantics:
 * reference/accelerate-semantics.md §1-§3), and torch's GradScaler steps
 * that drive an optimizer.
 */
#ifndef EMBER_ACCELERATOR_H
#define EMBER_ACCELERATOR_H

#include "amp/amp.h"
#include "data/data.h"
#include "distributed/ddp/ddp.h"
#include "distributed/pg/pg.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Accelerator -------------------------------------------------------------------
 * Hugging Face Accelerate's Accelerator, call for call (DESIGN.md §3 table;
 * semantics: reference/accelerate-semantics.md §1-§2). One training loop runs
 * unchanged on 1 process or on N under `ember launch`:
 *
 *     em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){ .mixed_precision = EM_MP_BF16 });
 *     em_accelerator_prepare(acc, model, opt, dl, sched);
 *     for (int epoch = 0; epoch < 3; epoch++)
 *         for (em_batch b; em_accelerator_next(acc, dl, &b);)      // one scope per batch
 *             EM_ACCUMULATE(acc, model) {
 *                 em_seqcls_output out;
 *                 EM_AUTOCAST(acc) { out = em_seqcls_forward(model, &(em_seqcls_inputs){ ... }); }
 *                 em_accelerator_backward(acc, out.loss);
 *                 em_accelerator_optimizer_step(acc, opt);
 *                 em_accelerator_scheduler_step(acc, sched);
 *                 em_accelerator_optimizer_zero_grad(acc, opt);
 *             }
 *
 * Where ember differs from Accelerate, on purpose (reference §0 and §8 list
 * Accelerate's traps):
 *   - Short last window. Micro-steps are grouped in windows of K =
 *     gradient_accumulation_steps, counted from the start of each epoch of the
 *     active dataloader; the last window of an epoch has L % K micro-steps
 *     (L = batches per epoch on this rank) and ends with a forced sync.
 *     em_accelerator_backward divides the loss by the length of the CURRENT
 *     window, so every optimizer step averages the micro-batches it got, the
 *     short last one included (Accelerate always divides by K and so
 *     under-weights it). Without a dataloader every window has K micro-steps.
 *   - Scheduler rule (stated once, here): em_accelerator_scheduler_step steps
 *     the scheduler exactly ONCE per optimizer step that really happened; it is
 *     a no-op on non-sync micro-steps and after an fp16 step that the
 *     GradScaler skipped. Size schedules in optimizer steps of this rank:
 *     num_training_steps = epochs * ceil(em_dataloader_len(dl) / K), read from
 *     the PREPARED loader (per-rank length). Accelerate instead steps
 *     num_processes times, for schedules sized on the unprepared loader.
 *   - load_state restores every counter: the micro-step, the optimizer-step
 *     count, each prepared dataloader's (epoch, batch) position (iteration
 *     resumes mid-epoch, with the same data order) and the checkpoint
 *     iteration of automatic naming (Accelerate forgets the last two).
 *   - Automatic checkpoint naming sorts checkpoint_<n> folders numerically
 *     (checkpoint_10 after checkpoint_9), deletes the oldest beyond
 *     total_limit only AFTER the new checkpoint is complete, and never reuses
 *     a number.
 *   - fp16 works on the CPU (Accelerate silently trains in f32 there): the
 *     autocast region runs matmuls in f16 and a GradScaler scales the loss.
 *   - Clipping on a non-sync micro-step does nothing (the gradients are
 *     partial, and under fp16 still scaled) and returns NAN.
 *   - Constructor arguments win over the environment for both
 *     mixed_precision and gradient_accumulation_steps (Accelerate lets
 *     ACCELERATE_GRADIENT_ACCUMULATION_STEPS override the argument).
 * The model handle stays the user's own em_module*: DDP is a companion object
 * kept inside the accelerator, so unwrap_model returns the model itself and
 * checkpoint names never get a "module." prefix.
 *
 * Threads: one thread drives an accelerator. Failure: outside failures return
 * an em_status with em_last_error(); misuse (NULL objects, an object that
 * was not prepared where one must be) goes to the misuse handler. */
/** The accelerator's mixed-precision mode (Accelerate's mixed_precision). */
typedef enum em_mixed_precision {
    EM_MP_DEFAULT = 0,   /**< env EMBER_MIXED_PRECISION (no|bf16|fp16), else no */
    EM_MP_NO,            /**< "no": full precision */
    EM_MP_BF16,          /**< autocast regions in bf16; no scaler */
    EM_MP_FP16           /**< autocast regions in f16 + GradScaler (on the CPU too) */
} em_mixed_precision;

/** Options of em_accelerator_new (NULL: all defaults, environment included). */
typedef struct em_accelerator_opts {
    em_mixed_precision mixed_precision;      /**< default: EMBER_MIXED_PRECISION, else no */
    int gradient_accumulation_steps;         /**< 0 -> env EMBER_GRADIENT_ACCUMULATION_STEPS, then 1 */
    bool cpu;                                /**< force the CPU (env EMBER_USE_CPU=true too) */
    bool split_batches;                      /**< dataloader sharding (reference §2.3) */
    int even_batches;                        /**< 0 -> true, -1 -> false */
    const char *project_dir;                 /**< automatic naming: `<project_dir>/checkpoints/checkpoint_<n>` */
    bool automatic_checkpoint_naming;        /**< save_state/load_state with dir NULL number checkpoints */
    int total_limit;                         /**< 0 -> keep all checkpoints */
    /** load_state normally refuses a checkpoint saved with another mixed
     * precision, accumulation, model class, parameter set or model config;
     * true: it prints each difference and loads anyway. */
    bool ignore_mismatched_config;
    em_ddp_opts ddp;                         /**< for the DDP companions */
    em_pg_opts pg;                           /**< for joining the world */
    em_grad_scaler_opts scaler;              /**< fp16 only; zero fields: torch's defaults */
    /** An existing process group to use (borrowed: it must outlive the
     * accelerator). NULL: the process-wide world, joined (em_pg_init with
     * .pg) by the first accelerator that needs it and left at exit, since MPI
     * cannot start again once finalized (Accelerate's PartialState is a
     * singleton too); later accelerators share it and their .pg is unused. */
    em_process_group *process_group;
    /** Stop after this many optimizer steps (HF Trainer's max_steps; 0: no
     * limit): once em_accelerator_optimizer_steps reaches it,
     * em_accelerator_next returns false without opening a scope on every
     * training loader (one whose batches fed an em_accelerator_backward), in
     * this epoch and every later one; evaluation loaders keep working.
     * em_accelerator_reached_max_steps is then true. Every rank steps
     * together, so every rank stops at the same batch. */
    int64_t max_steps;
} em_accelerator_opts;

/** Hugging Face Accelerate's Accelerator (opaque), as the section comment above
 * describes: made by em_accelerator_new, freed by em_accelerator_free. */
typedef struct em_accelerator em_accelerator;
/** NULL with em_last_error() on failure (the world could not be joined, a bad
 * environment value such as EMBER_MIXED_PRECISION=fp8). opts may be NULL. */
em_accelerator *em_accelerator_new(const em_accelerator_opts *opts);
/** Frees the DDP companions and the scaler; the prepared objects stay the
 * caller's, and the world stays joined (see .process_group). NULL is ok. */
void em_accelerator_free(em_accelerator *acc);
/** The whole teardown in one call: em_accelerator_free, then every object
 * prepared on acc, in a safe order (schedulers, optimizers, dataloaders,
 * models). Datasets and tokenizers stay the caller's. NULL is ok. */
void em_accelerator_free_all(em_accelerator *acc);

/** Prepares the objects in place, in any order, and returns EM_OK or an error:
 *   - models: moved to the device, flattened (em_module_flatten), and given a
 *     DDP companion when world > 1 (parameters broadcast from rank 0);
 *   - optimizers: registered (their step/zero_grad then go through the
 *     accelerator);
 *   - dataloaders: re-sharded for this rank (em_dataloader_reshard with
 *     num_processes, process_index, split_batches, even_batches, and rank 0's
 *     shuffle seed, so every rank walks the same permutation);
 *   - schedulers: registered (for save_state and the stepping rule).
 * A NULL object is skipped. Preparing an object twice is a no-op (it warns once). Collective:
 * every rank prepares the same models in the same order. */
/** What each object given to em_accelerator_prepare_list is; EM_PREP_END ends the list early. */
typedef enum em_prepare_kind { EM_PREP_END = 0, EM_PREP_MODEL, EM_PREP_OPTIMIZER, EM_PREP_DATALOADER, EM_PREP_SCHEDULER } em_prepare_kind;
/** Prepares objs[i] (of kind kinds[i]) for i in [0, n), schedulers after the
 * rest; the first failure is returned. */
em_status em_accelerator_prepare_list(em_accelerator *acc, int n, const em_prepare_kind *kinds, void *const *objs);
/** Prepares a model, an optimizer, a dataloader and a scheduler (any may be NULL). */
#define em_accelerator_prepare(acc, model, opt, dl, sched) \
    em_accelerator_prepare_list((acc), 4, (em_prepare_kind[]){EM_PREP_MODEL, EM_PREP_OPTIMIZER, EM_PREP_DATALOADER, EM_PREP_SCHEDULER}, (void *[]){(model), (opt), (dl), (sched)})
/** Prepares one model. */
#define em_accelerator_prepare_model(acc, m) em_accelerator_prepare_list((acc), 1, (em_prepare_kind[]){EM_PREP_MODEL}, (void *[]){(m)})
/** Prepares one optimizer. */
#define em_accelerator_prepare_optimizer(acc, o) em_accelerator_prepare_list((acc), 1, (em_prepare_kind[]){EM_PREP_OPTIMIZER}, (void *[]){(o)})
/** Prepares one dataloader. */
#define em_accelerator_prepare_dataloader(acc, d) em_accelerator_prepare_list((acc), 1, (em_prepare_kind[]){EM_PREP_DATALOADER}, (void *[]){(d)})
/** Prepares one scheduler. */
#define em_accelerator_prepare_scheduler(acc, s) em_accelerator_prepare_list((acc), 1, (em_prepare_kind[]){EM_PREP_SCHEDULER}, (void *[]){(s)})

/** `for batch in loader`: `for (em_batch b; em_accelerator_next(acc, dl, &b);) { ... }`.
 * Ends the scope of the previous batch of dl (and any scope opened after it
 * and still open, e.g. by an inner loop left with break), opens a new scope,
 * and fetches the next batch into it; at the end of the epoch it closes the
 * scope and returns false (a failure of the loader too: check
 * em_dataloader_status). It also marks dl as the active loader, whose
 * end_of_dataloader and remainder drive accumulation and gather_for_metrics.
 * With plain em_dataloader_next the active loader is the prepared one whose
 * position changed since the accelerator last looked. */
bool em_accelerator_next(em_accelerator *acc, em_dataloader *dl, em_batch *out);
/** Leaving that loop early (break, max_train_steps, early stopping):
 *
 *     for (em_batch b; em_accelerator_next(acc, dl, &b);) {
 *         ...
 *         if (done) { em_accelerator_end_loop(acc, dl); break; }
 *     }
 *
 * closes the batch scope em_accelerator_next opened (and any opened after it),
 * so the last batch's tensors are freed now and em_scope_depth() is back where
 * the loop began. Without it the scope stays open until dl's next
 * em_accelerator_next or em_accelerator_free, which then closes it. The
 * loader stays where it stopped: the next em_accelerator_next continues
 * there. No-op when dl has no open batch scope. */
void em_accelerator_end_loop(em_accelerator *acc, em_dataloader *dl);
/** Whether opts.max_steps optimizer steps were taken (false without a limit):
 * `for (epoch = 0; epoch < E && !em_accelerator_reached_max_steps(acc); epoch++)`. */
bool em_accelerator_reached_max_steps(const em_accelerator *acc);
/** Early stopping across ranks (Accelerate's set_trigger / check_trigger):
 * a rank that wants to stop calls set_trigger; check_trigger (collective,
 * every rank at the same point) returns true on every rank when any rank set
 * it since the last check, and clears it. So all ranks leave the loop at the
 * same step, instead of one waiting forever in the next collective:
 *
 *     if (val_loss > best) em_accelerator_set_trigger(acc);
 *     if (em_accelerator_check_trigger(acc)) { em_accelerator_end_loop(acc, dl); break; }
 */
void em_accelerator_set_trigger(em_accelerator *acc);
/** See em_accelerator_set_trigger. A failed all-reduce counts as a trigger
 * (the error stays in em_last_error). Collective. */
bool em_accelerator_check_trigger(em_accelerator *acc);

/** Divides loss by the length of the current accumulation window, scales it
 * under fp16, runs em_backward, and on sync steps finishes DDP's all-reduce
 * (on non-sync steps DDP is in no_sync). Outside an EM_ACCUMULATE block each
 * backward is a micro-step of its own (as if wrapped in one). */
em_status em_accelerator_backward(em_accelerator *acc, em_tensor *loss);
/** Accumulation context: EM_ACCUMULATE(acc, model) { forward; backward; step; }
 * One micro-step: sync_gradients = end_of_dataloader || the window is full;
 * on non-sync steps model's DDP companion skips its all-reduce (no_sync).
 * model NULL: every prepared model. Do not break/return out of the block. */
void em_accelerator_accumulate_begin(em_accelerator *acc, em_module *model);
void em_accelerator_accumulate_end(em_accelerator *acc);   /**< ends the micro-step that accumulate_begin opened */
/** EM_ACCUMULATE(acc, model) { ... }: one micro-step (accumulate_begin ... accumulate_end). */
#define EM_ACCUMULATE(acc, model) \
    for (int em__a_ = (em_accelerator_accumulate_begin((acc), (model)), 0); !em__a_; em__a_ = (em_accelerator_accumulate_end(acc), 1))
/** Whether the current micro-step ends a window (true before any micro-step). */
bool em_accelerator_sync_gradients(const em_accelerator *acc);
int em_accelerator_gradient_accumulation_steps(const em_accelerator *acc);   /**< K, as resolved at creation */

/** The prepared optimizer's step and zero_grad: no-ops on non-sync
 * micro-steps. Under fp16 the step unscales (unless clipping did), skips on
 * inf/NaN gradients and updates the scale. zero_grad zeroes in place (the
 * gradients stay views of the flat buffer that DDP reduces).
 * The scheduler steps once per optimizer step that happened (the rule above). */
em_status em_accelerator_optimizer_step(em_accelerator *acc, em_optimizer *opt);
/** opt's zero_grad on sync micro-steps only, in place (see above). */
void em_accelerator_optimizer_zero_grad(em_accelerator *acc, em_optimizer *opt);
/** Steps sched once per optimizer step that happened (the scheduler rule above). */
void em_accelerator_scheduler_step(em_accelerator *acc, em_scheduler *sched);
/** Whether the last optimizer step of any prepared optimizer was skipped (fp16 overflow). */
bool em_accelerator_optimizer_step_was_skipped(const em_accelerator *acc);
/** Real optimizer steps so far (skipped ones not counted). */
int64_t em_accelerator_optimizer_steps(const em_accelerator *acc);

/** Autocast region for the configured mixed precision (bf16 or f16 matmuls;
 * nothing with EM_MP_NO). Do not break/return out of the block. */
void em_accelerator_autocast_begin(em_accelerator *acc);
void em_accelerator_autocast_end(em_accelerator *acc);   /**< closes the region autocast_begin opened */
/** EM_AUTOCAST(acc) { forward } — the autocast region as a block. */
#define EM_AUTOCAST(acc) \
    for (int em__c_ = (em_accelerator_autocast_begin(acc), 0); !em__c_; em__c_ = (em_accelerator_autocast_end(acc), 1))
em_mixed_precision em_accelerator_mixed_precision(const em_accelerator *acc);   /**< as resolved (never EM_MP_DEFAULT) */
em_grad_scaler *em_accelerator_grad_scaler(em_accelerator *acc);   /**< NULL unless fp16 */

/** Unscales (fp16) every prepared optimizer, then clips model's gradients like
 * torch.nn.utils.clip_grad_norm_ (model NULL: every prepared optimizer's
 * parameters); returns the total norm before clipping. NAN (nothing done) on
 * a non-sync micro-step or on failure. */
double em_accelerator_clip_grad_norm(em_accelerator *acc, em_module *model, double max_norm);
/** Gathers each tensor across ranks along dim 0 (0-d tensors count as one
 * row; dim-0 sizes may differ by rank) and, on the last batch of the active
 * dataloader, keeps only the first `remainder` rows: exactly the real
 * samples, with the loop-back duplicates dropped. out[i] belong to the
 * current scope. Collective. */
em_status em_accelerator_gather_for_metrics(em_accelerator *acc, int n, em_tensor *const *in, em_tensor **out);
/** Gathers t across ranks along dim 0 into *out (current scope), keeping every row. Collective. */
em_status em_accelerator_gather(em_accelerator *acc, em_tensor *t, em_tensor **out);
/** A new tensor (current scope): t reduced across ranks (SUM, AVG, MAX, MIN).
 * NULL on failure. Collective. */
em_tensor *em_accelerator_reduce(em_accelerator *acc, em_tensor *t, em_reduce_op op);

/** Full training state into dir, atomically: it is written into
 * "<dir>.tmp-ember" and renamed (an existing dir is swapped out, then
 * removed). Layout (safetensors + JSON, no pickle):
 *
 *     model.safetensors, model_<i>.safetensors   unwrapped parameters + persistent buffers
 *     optimizer.safetensors, optimizer_<i>...    em_optimizer_state_save
 *     scheduler.safetensors, scheduler_<i>...    em_scheduler_state_save
 *     scaler.safetensors                         em_grad_scaler_state_save (fp16)
 *     random_states_<rank>.json                  each rank: its RNG state, its loaders' positions
 *     accelerator_state.json                     counters: step, optimizer_steps, iteration (the
 *                                                next automatic number), epoch, world_size, counts
 *     manifest.json                              size and CRC-32C of every file above, and the run's
 *                                                fingerprint (ember version, world size, mixed
 *                                                precision, accumulation, each model's class,
 *                                                parameter digest and config.json)
 *
 * (index i > 0 in prepare order). dir NULL: automatic naming
 * (`<project_dir>/checkpoints/checkpoint_<iteration>`; iteration += 1; then
 * the oldest beyond total_limit are deleted). Save at a sync step: gradients
 * are not saved. Collective. */
em_status em_accelerator_save_state(em_accelerator *acc, const char *dir);
/** Restores all of the above from dir (NULL: the latest automatic
 * checkpoint), into objects prepared in the same order. Before anything
 * changes it verifies manifest.json: a file whose size or CRC-32C differs is
 * EM_ERR_FORMAT naming it ("the file is damaged"); another mixed precision,
 * accumulation, model class or model config is EM_ERR_INVALID naming the
 * field (opts.ignore_mismatched_config: printed, then loaded). A folder
 * without a manifest (an older ember's) loads with a warning. A checkpoint
 * that does not fit (other parameter names or shapes, counts, world size),
 * counters no run reaches (window_pos past the accumulation, more optimizer
 * steps than micro-steps, another rank's random_states file) and non-finite
 * weights are EM_ERR_INVALID naming the file and field. Collective. */
em_status em_accelerator_load_state(em_accelerator *acc, const char *dir);
/** The number the next automatic checkpoint gets. */
int64_t em_accelerator_iteration(const em_accelerator *acc);
/** em_save_pretrained of the unwrapped model on the main process, and the
 * tokenizer files of the tokenizer attached with em_accelerator_set_tokenizer
 * (if any), then a barrier (call it on every rank). The folder then loads back
 * whole: classify, em_seqcls_from_pretrained + em_tokenizer_from_pretrained,
 * or transformers' Auto* classes. */
em_status em_accelerator_save_model(em_accelerator *acc, em_module *model, const char *dir);
/** Attaches the tokenizer that em_accelerator_save_model saves beside the model
 * (borrowed: it must outlive the accelerator, or be detached with NULL). */
void em_accelerator_set_tokenizer(em_accelerator *acc, const em_tokenizer *tok);

/** A barrier across ranks (a failure is printed to stderr). Collective. */
void em_accelerator_wait_for_everyone(em_accelerator *acc);
bool em_accelerator_is_main_process(const em_accelerator *acc);         /**< rank 0 */
bool em_accelerator_is_local_main_process(const em_accelerator *acc);   /**< local rank 0 of its node */
bool em_accelerator_is_last_process(const em_accelerator *acc);         /**< rank world-1 */
int em_accelerator_process_index(const em_accelerator *acc);            /**< this rank */
int em_accelerator_local_process_index(const em_accelerator *acc);      /**< this rank on its node */
int em_accelerator_num_processes(const em_accelerator *acc);            /**< world size */
em_device em_accelerator_device(const em_accelerator *acc);             /**< where prepared models live */
/** The model itself: DDP is a companion, not a wrapper (see above). */
em_module *em_accelerator_unwrap_model(em_accelerator *acc, em_module *model);
em_process_group *em_accelerator_process_group(em_accelerator *acc);   /**< borrowed; NULL before one is joined */
/** printf on the local main process only (flushed). */
void em_accelerator_print(em_accelerator *acc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** [begin, end) of n items for this rank (Accelerate's split_between_processes:
 * q, r = divmod(n, P); rank i gets q + (i < r) items starting at i*q + min(i, r)). */
void em_accelerator_split_between_processes(const em_accelerator *acc, int64_t n, int64_t *begin, int64_t *end);
int64_t em_accelerator_step(const em_accelerator *acc);   /**< micro-steps so far */

/** Run-on-process helpers (Accelerate's decorators and context managers):
 *   EM_ON_MAIN_PROCESS(acc) { ... }         the body runs on rank 0 only
 *   EM_ON_LOCAL_MAIN_PROCESS(acc) { ... }   on each node's local rank 0
 *   EM_ON_PROCESS(acc, i) { ... }           on rank i
 *   EM_MAIN_PROCESS_FIRST(acc) { ... }      rank 0 runs the body, then the others
 * (the last one is collective; do not break/return out of it). */
#define EM_ON_MAIN_PROCESS(acc) if (em_accelerator_is_main_process(acc))
/** The next statement runs on each node's local rank 0. */
#define EM_ON_LOCAL_MAIN_PROCESS(acc) if (em_accelerator_is_local_main_process(acc))
/** The next statement runs on rank i. */
#define EM_ON_PROCESS(acc, i) if (em_accelerator_process_index(acc) == (i))
/** Non-main ranks wait here for rank 0 (EM_MAIN_PROCESS_FIRST's start). */
void em_accelerator_main_process_first_begin(em_accelerator *acc);
/** Rank 0 releases the others here (EM_MAIN_PROCESS_FIRST's end). */
void em_accelerator_main_process_first_end(em_accelerator *acc);
/** EM_MAIN_PROCESS_FIRST(acc) { ... }: rank 0 runs the block, then the others. Collective. */
#define EM_MAIN_PROCESS_FIRST(acc) \
    for (int em__m_ = (em_accelerator_main_process_first_begin(acc), 0); !em__m_; em__m_ = (em_accelerator_main_process_first_end(acc), 1))

/* ---- GradScaler with an optimizer --------------------------------------------------
 * torch's scaler.unscale_(opt), scaler.step(opt) and the clip that follows
 * an unscale, as thin wrappers over amp.h's tensor-level scaler: they live
 * here, in the loop's layer, because they drive an optimizer and amp/ does
 * not (amp.h "GradScaler"). The Accelerator uses them; a hand-written fp16
 * loop may too (examples/05_mixed_precision.c). */
/** em_grad_scaler_unscale_grads on opt's gradients (key: opt). Misuse when
 * called twice, or after step, before update(). */
em_status em_grad_scaler_unscale_(em_grad_scaler *s, em_optimizer *opt);
/** em_grad_scaler_prepare_step on opt's gradients, then em_optimizer_step
 * unless an inf or NaN was found; *stepped (may be NULL) tells whether it
 * stepped: when it did not, do not step the LR scheduler either. The
 * optimizer's own failure is returned. */
em_status em_grad_scaler_step(em_grad_scaler *s, em_optimizer *opt, bool *stepped);
/** Unscales opt's gradients (unless done since the last update) and clips
 * them: em_optimizer_clip_grad_norm on true gradients. */
em_status em_grad_scaler_clip_grad_norm(em_grad_scaler *s, em_optimizer *opt, double max_norm, double *total_norm);

/* caller locations for misuse messages (tensor.h's EM__AT) */
#ifndef EMBER_BUILDING
#include "distributed/accelerate/accelerator_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
