/** @file
 * ember — distributed/ddp/: DistributedDataParallel over a process group
 * (DESIGN.md §3 "distributed"; semantics: reference/accelerate-semantics.md §4).
 * Gradients are all-reduced in buckets, in place in the model's flat gradient
 * buffer, while backward runs (how: ddp.c's opening comment).
 */
#ifndef EMBER_DDP_H
#define EMBER_DDP_H

#include "distributed/pg/pg.h"
#include "nn/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

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

/* caller locations for misuse messages (tensor.h's EM__AT) */
#ifndef EMBER_BUILDING
#include "distributed/ddp/ddp_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
