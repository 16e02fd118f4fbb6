/** @file
 * ember — distributed/pg/: the process group, torch.distributed's
 * ProcessGroup for ember (DESIGN.md §3 "distributed").
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
#ifndef EMBER_PG_H
#define EMBER_PG_H

#include "tensor/tensor.h"

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

/* caller locations for misuse messages (tensor.h's EM__AT) */
#ifndef EMBER_BUILDING
#include "distributed/pg/pg_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
