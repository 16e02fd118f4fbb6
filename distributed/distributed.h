/** @file
 * ember — distributed/: the process group, DDP and the Accelerator
 * (DESIGN.md §3 "distributed"; semantics: reference/accelerate-semantics.md §1-§4).
 *
 * A program started without a launcher is a world of one and needs no MPI.
 * Under `ember launch` (mpirun) every rank runs the same program; rank, world
 * size and local rank come from the launcher's environment.
 *
 * Failure: collectives return em_status. A collective that waits longer than
 * the timeout fails with EM_ERR_TIMEOUT and a message naming the op, the ranks
 * and the sizes; a peer that died gives EM_ERR_COMM. Misuse (tensors of the
 * wrong device, mismatched shapes on one rank) goes to the misuse handler.
 */
#ifndef EMBER_DISTRIBUTED_H
#define EMBER_DISTRIBUTED_H

#include "amp/amp.h"
#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- process group ------------------------------------------------------------
 * Collectives on contiguous CPU tensors of f32, f64, f16, bf16 (reduced in
 * f32, rounded once), i64, i32 and bool (max/min only). Every rank must call
 * the same collectives in the same order; each one first exchanges a small
 * header (op, dtype, shape), so ranks that disagree all get EM_ERR_INVALID
 * naming both sides ("rank 0 has 10 elements (40 bytes, float32[10]), rank 1
 * has 20 elements ..."), and the group stays usable.
 * Nothing waits forever: a collective that takes longer than the timeout
 * returns EM_ERR_TIMEOUT ("all_reduce of 4096 bytes (float32[1024]) on rank 0
 * of 2 timed out after 5 s ..."); a node-local peer that died gives
 * EM_ERR_COMM. After either, the group is unusable: later collectives fail at
 * once, em_pg_free skips MPI_Finalize (it would wait for the stuck peers), and
 * the program should exit non-zero; mpirun then stops the other ranks (it also
 * does so by itself when a rank is killed).
 * Transport: MPI (all MPI calls on one communication thread). When every rank
 * is on one node, all-reduces move their data through shared memory instead
 * (EMBER_SHM=0 turns that off; EMBER_SHM_MIN_BYTES sets a size below which
 * MPI keeps them).
 * Issue a group's collectives from one thread at a time: their order is the
 * contract between ranks. */
/** The process group (opaque): this rank's view of the world, as the section
 * comment above describes. Made by em_pg_init, freed by em_pg_free. */
typedef struct em_process_group em_process_group;
/** How a collective combines the ranks' values (AVG: floating dtypes only). */
typedef enum em_reduce_op { EM_RED_SUM = 0, EM_RED_AVG, EM_RED_MAX, EM_RED_MIN } em_reduce_op;

/** Options of em_pg_init (NULL: defaults). */
typedef struct em_pg_opts {
    double timeout_s;   /**< 0 -> EMBER_TIMEOUT env, then 600 s */
} em_pg_opts;

/** Joins the world described by the environment: OMPI_COMM_WORLD_SIZE/RANK/
 * LOCAL_RANK (mpirun), else EMBER_WORLD_SIZE/EMBER_RANK/EMBER_LOCAL_RANK; a
 * world of one when absent, which makes no MPI call at all. When world > 1 it
 * calls MPI_Init_thread (unless MPI is initialized) and checks that MPI agrees.
 * *out is the caller's: free it with em_pg_free. */
em_status em_pg_init(const em_pg_opts *opts, em_process_group **out);
/** MPI_Finalize when it initialized MPI and the group is not broken. Wait for
 * every em_work first. Collective: every rank calls it. */
void em_pg_free(em_process_group *pg);
int em_pg_rank(const em_process_group *pg);         /**< this rank, in [0, world size) */
int em_pg_world_size(const em_process_group *pg);   /**< number of ranks (1 without a launcher) */
int em_pg_local_rank(const em_process_group *pg);   /**< this rank's index on its node */

/** In place on t (contiguous). AVG (floating dtypes) divides by the world size.
 * Every rank ends with bitwise the same values. */
em_status em_pg_all_reduce(em_process_group *pg, em_tensor *t, em_reduce_op op);
/** Copies root's t into t on every other rank, in place (same shape and dtype
 * everywhere). Misuse: root outside the world. */
em_status em_pg_broadcast(em_process_group *pg, em_tensor *t, int root);
/** Concatenates every rank's t along dim 0, in rank order (dim-0 sizes may
 * differ, zero included; other dims must agree; a 0-d t counts as [1]) into
 * *out, a new tensor owned by the current scope. */
em_status em_pg_all_gather(em_process_group *pg, em_tensor *t, em_tensor **out);
/** in: [world * n, ...]; out: [n, ...] gets the reduction of every rank's slice `rank`. */
em_status em_pg_reduce_scatter(em_process_group *pg, em_tensor *in, em_tensor *out, em_reduce_op op);
/** Returns once every rank has called it (or with EM_ERR_TIMEOUT / EM_ERR_COMM). */
em_status em_pg_barrier(em_process_group *pg);

/** Asynchronous all-reduce on the communication thread: returns at once (NULL
 * on misuse or OOM). Works run in submission order, with the synchronous
 * collectives of this rank, so every rank must submit in the same order. t
 * must stay untouched until em_work_wait returns (the work holds a reference,
 * so it stays alive). Waiting in any order is fine. */
typedef struct em_work em_work;
/** Submits an all-reduce of t (as em_pg_all_reduce) and returns its work handle; wait on it with em_work_wait. */
em_work *em_pg_all_reduce_async(em_process_group *pg, em_tensor *t, em_reduce_op op);
em_status em_work_wait(em_work *w);   /**< frees w; the error, if any, is set on this thread */

/* ---- DDP ------------------------------------------------------------------------ */
/** A DistributedDataParallel companion of one model (opaque): it all-reduces the
 * gradients in buckets while backward runs. Made by em_ddp_new. */
typedef struct em_ddp em_ddp;
/** Options of em_ddp_new (NULL: torch's defaults). */
typedef struct em_ddp_opts {
    double bucket_cap_mb;       /**< 0 -> 25; the first bucket is capped at 1 MiB */
    double first_bucket_cap_mb; /**< 0 -> 1 */
    bool keep_local_buffers;    /**< torch's broadcast_buffers=False: em_ddp_sync_buffers does nothing */
} em_ddp_opts;
/** Wraps model (flattened first: gradients become views of one buffer, and a
 * bucket is a slice of it). Broadcasts the parameters from rank 0 and checks
 * that every rank has the same parameter shapes. */
em_status em_ddp_new(em_module *model, em_process_group *pg, const em_ddp_opts *opts, em_ddp **out);
/** Waits for its pending all-reduces, removes its hooks and frees d (the model stays); NULL is ok. */
void em_ddp_free(em_ddp *d);
/** torch's DDP buffer sync before each forward: broadcasts every buffer
 * (persistent or not) from rank 0 so that running statistics agree. The
 * Accelerator calls it at the end of every em_accelerator_backward that
 * synchronizes gradients (so no forward-only pass, e.g. evaluation, joins a
 * collective). A no-op for a model without
 * buffers, a world of one, or keep_local_buffers. EM_ERR_* naming the failed
 * broadcast (e.g. a timeout) otherwise; NULL is misuse. */
em_status em_ddp_sync_buffers(em_ddp *d);
/** no_sync: while false, backward accumulates locally and starts no all-reduce. */
void em_ddp_set_require_sync(em_ddp *d, bool sync);
/** Call after em_backward: waits for every bucket, reduces the buckets whose
 * gradients never arrived (parameters unused this step: zeros, the same on
 * every rank), and averages. */
em_status em_ddp_finish_backward(em_ddp *d);
/** For teaching: the bucket map and a timeline of the last step. */
typedef struct em_ddp_bucket_info {
    /** @{ bucket number and parameters in it */
    int index, n_params;
    /** @} */
    /** @{ */
    int64_t offset, numel;           /**< slice of the flat gradient buffer */
    /** @} */
    /** @{ */
    double ready_ms, start_ms, end_ms;   /**< since backward began */
    /** @} */
} em_ddp_bucket_info;
/** Writes up to cap buckets' info into out (may be NULL) and returns the bucket count. */
int em_ddp_buckets(const em_ddp *d, em_ddp_bucket_info *out, int cap);

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

/* ---- progress and logging ------------------------------------------------------------
 * A tqdm-like progress bar and a JSONL scalar logger. Both act on the main
 * process only (acc NULL: this process counts as the main one); on the other
 * ranks they exist but do nothing, so the same loop runs everywhere.
 *
 * Progress output goes to stderr (as tqdm's does; stdout stays clean for
 * results). On a terminal it is one line redrawn in place (at most every
 * 0.1 s, and on the last update):
 *     desc  42% |████      | 420/1000 [00:12<00:17, 34.5 it/s, loss=0.4321]
 * Elsewhere (a file, a pipe, CI) the same text without the bar, one line each
 * time another 10% is done, or 30 s have passed, and at the end. Rate = n /
 * elapsed since em_progress_new; ETA = (total - n) / rate. total <= 0: an
 * unknown total ("420it [00:12, 34.5 it/s]"). NULL only on OOM. */
/** A tqdm-like progress bar (opaque), as described above. */
typedef struct em_progress em_progress;
/** A progress bar of total iterations labelled desc (copied); free it with em_progress_free. */
em_progress *em_progress_new(em_accelerator *acc, int64_t total, const char *desc);
/** n more iterations done; loss NAN: none (the last loss given stays shown).
 * Reaching total ends the bar; later updates are ignored. */
void em_progress_update(em_progress *p, int64_t n, double loss);
/** Prints the final state if it was not shown yet. NULL is ok. */
void em_progress_free(em_progress *p);
/** For tests and special outputs: the stream (NULL: stderr), terminal mode
 * (0: isatty of the stream, 1: yes, -1: no) and the clock in seconds
 * (NULL: CLOCK_MONOTONIC). */
typedef struct em_progress_opts {
    FILE *out;                     /**< the stream; NULL: stderr */
    int tty;                       /**< 0: isatty(out), 1: terminal mode, -1: line mode */
    double (*clock)(void *user);   /**< seconds; NULL: CLOCK_MONOTONIC */
    void *clock_user;              /**< passed to clock */
} em_progress_opts;
/** em_progress_new with options (NULL: the defaults). */
em_progress *em_progress_new_opts(em_accelerator *acc, int64_t total, const char *desc, const em_progress_opts *opts);
/** The text of one progress line (bar_width 0: no bar), as snprintf. */
int em_progress_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t total, double elapsed_s,
                       double loss, int bar_width);

/** Scalars to a JSONL file on the main process: each em_logger_log appends one
 * line {"step": 12, "loss": 0.4321, ...} with a single write(2) on a file
 * opened O_APPEND (never half a line on disk). NaN/inf are written as null.
 * em_logger_new: NULL with em_last_error() naming the path when the file
 * cannot be opened (on the main process; other ranks open nothing).
 * em_logger_log: EM_ERR_IO naming the path when the write fails. */
typedef struct em_logger em_logger;
/** A logger appending to path (created if needed); free it with em_logger_free. */
em_logger *em_logger_new(em_accelerator *acc, const char *path);
/** Appends {"step": step, names[i]: values[i], ...} (n pairs) as one line; a no-op off the main process. */
em_status em_logger_log(em_logger *lg, int64_t step, int n, const char *const *names, const double *values);
/** One scalar: em_logger_log with n = 1 (accelerator.log({name: value}, step=step)). */
em_status em_logger_log_scalar(em_logger *lg, int64_t step, const char *name, double value);
/** Closes the file and frees lg; NULL is ok. */
void em_logger_free(em_logger *lg);

/** Scalars as a TensorBoard event file on the main process (what
 * torch.utils.tensorboard's SummaryWriter.add_scalar writes). One file
 * `<logdir>/events.out.tfevents.<time>.<host>.<pid>.0` per writer, one
 * TFRecord-framed Event per em_tb_writer_add_scalars call, each written with
 * a single write(2). Other ranks get a writer that writes nothing. */
typedef struct em_tb_writer em_tb_writer;
/** A writer for a new event file in logdir (created if missing; its parent
 * must exist). NULL with em_last_error() naming the folder or file when it
 * cannot be created; the caller frees it with em_tb_writer_free. */
em_tb_writer *em_tb_writer_new(em_accelerator *acc, const char *logdir);
/** One event at step with n scalars (tag names[i], value values[i] rounded to
 * f32, as TensorBoard stores them). EM_ERR_IO naming the file when the write
 * fails, after which the writer writes nothing more; a no-op off the main
 * process. A NULL writer or a missing name is misuse. */
em_status em_tb_writer_add_scalars(em_tb_writer *w, int64_t step, int n, const char *const *names,
                                   const double *values);
/** One scalar (SummaryWriter.add_scalar(tag, value, step)): em_tb_writer_add_scalars with n = 1. */
em_status em_tb_writer_add_scalar(em_tb_writer *w, int64_t step, const char *tag, double value);
/** The event file's path (owned by w), or NULL on other ranks. */
const char *em_tb_writer_path(const em_tb_writer *w);
/** Closes the file and frees w; NULL is ok. */
void em_tb_writer_free(em_tb_writer *w);

/* caller locations for misuse messages (tensor.h's EM__AT) */
#ifndef EMBER_BUILDING
#include "distributed/distributed_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
