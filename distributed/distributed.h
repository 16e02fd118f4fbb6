/* ember — distributed/: the process group, DDP and the Accelerator
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

#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- process group ------------------------------------------------------------ */
typedef struct em_process_group em_process_group;
typedef enum em_reduce_op { EM_RED_SUM = 0, EM_RED_AVG, EM_RED_MAX, EM_RED_MIN } em_reduce_op;

typedef struct em_pg_opts {
    double timeout_s;   /* 0 -> EMBER_TIMEOUT env, then 600 s */
} em_pg_opts;

/* Joins the world described by the environment (OMPI_COMM_WORLD_RANK/SIZE/
 * LOCAL_RANK; a world of one when absent). Calls MPI_Init when world > 1. */
em_status em_pg_init(const em_pg_opts *opts, em_process_group **out);
void em_pg_free(em_process_group *pg);   /* MPI_Finalize when it initialized MPI */
int em_pg_rank(const em_process_group *pg);
int em_pg_world_size(const em_process_group *pg);
int em_pg_local_rank(const em_process_group *pg);

/* In place on t (contiguous). AVG divides by the world size. */
em_status em_pg_all_reduce(em_process_group *pg, em_tensor *t, em_reduce_op op);
em_status em_pg_broadcast(em_process_group *pg, em_tensor *t, int root);
/* Concatenates every rank's t along dim 0 (dim-0 sizes may differ; other dims
 * must agree) into *out, a new tensor owned by the current scope. */
em_status em_pg_all_gather(em_process_group *pg, em_tensor *t, em_tensor **out);
/* in: [world * n, ...]; out: [n, ...] gets the reduction of every rank's slice `rank`. */
em_status em_pg_reduce_scatter(em_process_group *pg, em_tensor *in, em_tensor *out, em_reduce_op op);
em_status em_pg_barrier(em_process_group *pg);

/* Asynchronous all-reduce on the communication thread. t must stay alive and
 * untouched until em_work_wait returns. */
typedef struct em_work em_work;
em_work *em_pg_all_reduce_async(em_process_group *pg, em_tensor *t, em_reduce_op op);
em_status em_work_wait(em_work *w);   /* frees w */

/* ---- DDP ------------------------------------------------------------------------ */
typedef struct em_ddp em_ddp;
typedef struct em_ddp_opts {
    double bucket_cap_mb;       /* 0 -> 25; the first bucket is capped at 1 MiB */
    double first_bucket_cap_mb; /* 0 -> 1 */
} em_ddp_opts;
/* Wraps model (flattened first: gradients become views of one buffer, and a
 * bucket is a slice of it). Broadcasts the parameters from rank 0 and checks
 * that every rank has the same parameter shapes. */
em_status em_ddp_new(em_module *model, em_process_group *pg, const em_ddp_opts *opts, em_ddp **out);
void em_ddp_free(em_ddp *d);
/* no_sync: while false, backward accumulates locally and starts no all-reduce. */
void em_ddp_set_require_sync(em_ddp *d, bool sync);
/* Call after em_backward: waits for every bucket, reduces the buckets whose
 * gradients never arrived (parameters unused this step: zeros, the same on
 * every rank), and averages. */
em_status em_ddp_finish_backward(em_ddp *d);
/* For teaching: the bucket map and a timeline of the last step. */
typedef struct em_ddp_bucket_info {
    int index, n_params;
    int64_t offset, numel;           /* slice of the flat gradient buffer */
    double ready_ms, start_ms, end_ms;   /* since backward began */
} em_ddp_bucket_info;
int em_ddp_buckets(const em_ddp *d, em_ddp_bucket_info *out, int cap);

/* ---- Accelerator ------------------------------------------------------------------- */
typedef enum em_mixed_precision { EM_MP_NO = 0, EM_MP_BF16, EM_MP_FP16 } em_mixed_precision;

typedef struct em_accelerator_opts {
    em_mixed_precision mixed_precision;      /* EM_MP_NO; env EMBER_MIXED_PRECISION is a fallback */
    int gradient_accumulation_steps;         /* 0 -> 1 */
    bool cpu;                                /* force the CPU */
    bool split_batches;                      /* dataloader sharding (reference §2.3) */
    int even_batches;                        /* 0 -> true, -1 -> false */
    const char *project_dir;                 /* for automatic checkpoint naming */
    bool automatic_checkpoint_naming;
    int total_limit;                         /* 0 -> keep all */
    em_ddp_opts ddp;
    em_pg_opts pg;
} em_accelerator_opts;

typedef struct em_accelerator em_accelerator;
em_accelerator *em_accelerator_new(const em_accelerator_opts *opts);
void em_accelerator_free(em_accelerator *acc);

/* Prepares the objects in place, in any order: models (moved, flattened,
 * wrapped in DDP when world > 1), optimizers, dataloaders (re-sharded for this
 * rank) and schedulers. Returns EM_OK or an error. */
typedef enum em_prepare_kind { EM_PREP_END = 0, EM_PREP_MODEL, EM_PREP_OPTIMIZER, EM_PREP_DATALOADER, EM_PREP_SCHEDULER } em_prepare_kind;
em_status em_accelerator_prepare_list(em_accelerator *acc, int n, const em_prepare_kind *kinds, void *const *objs);
#define em_accelerator_prepare(acc, model, opt, dl, sched) \
    em_accelerator_prepare_list((acc), 4, (em_prepare_kind[]){EM_PREP_MODEL, EM_PREP_OPTIMIZER, EM_PREP_DATALOADER, EM_PREP_SCHEDULER}, (void *[]){(model), (opt), (dl), (sched)})

/* Divides loss by the accumulation steps of the current window (the short last
 * window of an epoch is weighted by its real length), scales it under fp16,
 * runs backward, and finishes DDP's all-reduce on sync steps. */
em_status em_accelerator_backward(em_accelerator *acc, em_tensor *loss);
/* Accumulation context: EM_ACCUMULATE(acc, model) { forward; backward; step; } */
void em_accelerator_accumulate_begin(em_accelerator *acc, em_module *model);
void em_accelerator_accumulate_end(em_accelerator *acc);
#define EM_ACCUMULATE(acc, model) \
    for (int em__a_ = (em_accelerator_accumulate_begin((acc), (model)), 0); !em__a_; em__a_ = (em_accelerator_accumulate_end(acc), 1))
bool em_accelerator_sync_gradients(const em_accelerator *acc);

/* The prepared optimizer and scheduler steps: no-ops on non-sync micro-steps;
 * the scheduler also skips when the optimizer step was skipped (fp16 overflow).
 * Rule: the scheduler steps once per optimizer step that happened. */
em_status em_accelerator_optimizer_step(em_accelerator *acc, em_optimizer *opt);
void em_accelerator_optimizer_zero_grad(em_accelerator *acc, em_optimizer *opt);
void em_accelerator_scheduler_step(em_accelerator *acc, em_scheduler *sched);
bool em_accelerator_optimizer_step_was_skipped(const em_accelerator *acc);

/* Autocast region for the configured mixed precision. */
void em_accelerator_autocast_begin(em_accelerator *acc);
void em_accelerator_autocast_end(em_accelerator *acc);
#define EM_AUTOCAST(acc) \
    for (int em__c_ = (em_accelerator_autocast_begin(acc), 0); !em__c_; em__c_ = (em_accelerator_autocast_end(acc), 1))

/* Unscales (fp16) then clips like torch.nn.utils.clip_grad_norm_; returns the total norm. */
double em_accelerator_clip_grad_norm(em_accelerator *acc, em_module *model, double max_norm);
/* Gathers each tensor across ranks (dim 0) and, on the last batch of a
 * prepared dataloader, drops the padded duplicates. out[i] owned by the scope. */
em_status em_accelerator_gather_for_metrics(em_accelerator *acc, int n, em_tensor *const *in, em_tensor **out);
em_status em_accelerator_gather(em_accelerator *acc, em_tensor *t, em_tensor **out);
/* Sum (or mean) across ranks into a new tensor. */
em_tensor *em_accelerator_reduce(em_accelerator *acc, em_tensor *t, em_reduce_op op);

/* Full training state: models, optimizers, schedulers, scaler, RNG, dataloader
 * positions and the accelerator's counters, as safetensors + JSON, atomically
 * (written to a temporary folder, then renamed). dir NULL -> automatic naming. */
em_status em_accelerator_save_state(em_accelerator *acc, const char *dir);
em_status em_accelerator_load_state(em_accelerator *acc, const char *dir);
/* save_pretrained of the unwrapped model on the main process only. */
em_status em_accelerator_save_model(em_accelerator *acc, em_module *model, const char *dir);

void em_accelerator_wait_for_everyone(em_accelerator *acc);
bool em_accelerator_is_main_process(const em_accelerator *acc);
bool em_accelerator_is_local_main_process(const em_accelerator *acc);
int em_accelerator_process_index(const em_accelerator *acc);
int em_accelerator_num_processes(const em_accelerator *acc);
em_device em_accelerator_device(const em_accelerator *acc);
em_module *em_accelerator_unwrap_model(em_accelerator *acc, em_module *model);
em_process_group *em_accelerator_process_group(em_accelerator *acc);
/* printf on the local main process only. */
void em_accelerator_print(em_accelerator *acc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* [begin, end) of n items for this rank (Accelerate's split_between_processes). */
void em_accelerator_split_between_processes(const em_accelerator *acc, int64_t n, int64_t *begin, int64_t *end);
int64_t em_accelerator_step(const em_accelerator *acc);   /* micro-steps so far */

#ifdef __cplusplus
}
#endif
#endif
