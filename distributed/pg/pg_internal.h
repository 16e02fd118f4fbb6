/* ember — distributed/pg/: internals of the process group, shared by pg.c (the
 * public API and the world of one), comm_thread.c (the queue, the thread that
 * runs every collective, waiting with deadlines), pg_mpi.c (the MPI backend),
 * pg_shm.c (the shared-memory all-reduce for ranks on one node) and
 * pg_nccl.c (NCCL for CUDA tensors).
 * Not installed.
 *
 * Threads: when world > 1, every MPI call happens on the communication
 * thread. The public functions validate their arguments on the caller's
 * thread, fill an em__pg_job, enqueue it and (for the synchronous ones) wait
 * for it. Jobs run one at a time, in the order they were enqueued, so every
 * rank issues its collectives in its program order. CUDA tensors take NCCL
 * instead, issued on the caller's thread in program order (NCCL calls only
 * enqueue work on a stream); only their bootstrap and all_gather's size
 * exchange go through the MPI queue.
 */
#ifndef EMBER_PG_INTERNAL_H
#define EMBER_PG_INTERNAL_H

#include "distributed/pg/pg.h"
#include "tensor/tensor_internal.h"

#include <pthread.h>
#include <stdatomic.h>

typedef enum em__pg_kind {
    EM__PG_ALL_REDUCE = 1,
    EM__PG_BROADCAST,
    EM__PG_ALL_GATHER,        /* header exchange only: gathers the dim-0 sizes */
    EM__PG_ALL_GATHER_DATA,   /* the data step of the same all_gather (no header) */
    EM__PG_REDUCE_SCATTER,
    EM__PG_BARRIER,
    EM__PG_NUM_KINDS
} em__pg_kind;

const char *em__pg_kind_name(int kind);
const char *em__pg_red_name(int red);

/* One collective. Buffers belong to the caller, who keeps them alive until
 * the job is done. The comm thread writes only status, msg, counts and the
 * data buffers. */
typedef struct em__pg_job {
    int kind;                      /* em__pg_kind */
    em_reduce_op red;
    em_dtype dtype;
    int root;
    void *buf;                     /* all_reduce/broadcast: in and out; all_gather/reduce_scatter: input */
    int64_t numel;                 /* elements of buf */
    void *out;                     /* reduce_scatter, all_gather data: the output */
    int64_t out_numel;
    int ndim;                      /* the caller's shape, for the header and messages */
    int64_t shape[EM_MAX_DIMS];
    int64_t *counts;               /* all_gather: [world] dim-0 sizes, written by the header step */
    uint64_t seq;                  /* collective number on this rank (1, 2, ...), for messages */

    em_status status;              /* set by the comm thread */
    char msg[640];
    int done;                      /* under pg->lock */
    struct em__pg_job *next;
    /* async bookkeeping (pg.c) */
    em_tensor *hold;               /* a reference kept until em_work_wait */
    em_process_group *pg;
    /* CUDA jobs (pg_nccl.c): run by NCCL on the caller's thread, never queued */
    bool cuda;
    int device;                    /* the CUDA ordinal of the tensors */
    void *event;                   /* cudaEvent_t recorded after the collective, until waited */
    double t0;                     /* when it was issued (the timeout counts from here) */
} em__pg_job;

typedef struct em__pg_mpi em__pg_mpi;   /* pg_mpi.c */
typedef struct em__pg_shm em__pg_shm;   /* pg_shm.c */
typedef struct em__pg_nccl em__pg_nccl; /* pg_nccl.c */

struct em_process_group {
    int rank, world, local_rank;
    double timeout_s;
    uint64_t seq;                  /* collectives issued (caller side) */

    /* comm thread (comm_thread.c); only when world > 1 */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;           /* jobs queued or stop */
    pthread_cond_t done;           /* a job finished */
    em__pg_job *head, *tail;
    bool stop;

    /* after a timeout or a transport failure the group is unusable: later
     * collectives fail at once with this message (written by the comm thread) */
    bool broken;
    char broken_msg[640];

    em__pg_mpi *mpi;
    em__pg_shm *shm;
    em__pg_nccl *nccl;             /* made at the first CUDA collective */
};

/* ---- comm_thread.c ---- */
em_status em__pg_thread_start(em_process_group *pg);
void em__pg_thread_stop(em_process_group *pg);   /* drains the queue, joins */
void em__pg_submit(em_process_group *pg, em__pg_job *job);
void em__pg_wait(em_process_group *pg, em__pg_job *job);
double em__pg_now(void);
/* Pause between polls: spins first, then yields, then sleeps (waited_s long). */
void em__pg_backoff(long iter, double waited_s);
/* Fills job->status/msg with a timeout message naming the op, the rank, the
 * world, the bytes and the collective number; `detail` (may be NULL) is appended. */
em_status em__pg_timeout(em_process_group *pg, em__pg_job *job, const char *detail);
/* Fills job->status/msg; the format is prefixed by nothing. */
em_status em__pg_job_fail(em__pg_job *job, em_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "all_reduce of 4096 bytes (f32[1024])" into buf. */
const char *em__pg_job_str(const em__pg_job *job, char *buf, size_t cap);

/* ---- pg_mpi.c ---- (all but init run on the comm thread) */
/* MPI_Init_thread when needed (on the caller's thread, before the comm thread
 * starts), checks rank/size against the environment. */
em_status em__pg_mpi_init(em_process_group *pg);
/* On the comm thread, once: dup the communicator, set up shared memory. */
em_status em__pg_mpi_setup(em_process_group *pg, char *msg, size_t cap);
/* MPI_Finalize unless the group is broken (which would hang) or MPI was
 * initialized by someone else. */
void em__pg_mpi_finalize(em_process_group *pg);
void em__pg_mpi_run(em_process_group *pg, em__pg_job *job);
/* A small allgather of `bytes` per rank (setup and shm bookkeeping), with the
 * group's timeout. what names it in messages. */
em_status em__pg_mpi_allgather_bytes(em_process_group *pg, const void *mine, void *all, int bytes,
                                     const char *what, char *msg, size_t cap);
em_status em__pg_mpi_barrier(em_process_group *pg, const char *what, char *msg, size_t cap);
/* Which node-local peers have not reached collective `seq` (from shared
 * memory), as " (waiting for rank 1)", or "" when unknown. */
void em__pg_laggards(em_process_group *pg, uint64_t seq, char *buf, size_t cap);

/* ---- pg_shm.c ---- */
/* Called by setup when every rank is on this node. Failure leaves pg->shm NULL
 * (MPI carries everything) unless it is a timeout. */
em_status em__pg_shm_setup(em_process_group *pg, char *msg, size_t cap);
void em__pg_shm_free(em_process_group *pg);
/* Publishes that this rank entered collective seq (for timeout messages). */
void em__pg_shm_enter(em_process_group *pg, uint64_t seq);
uint64_t em__pg_shm_peer_seq(em_process_group *pg, int rank);
/* True when the shared-memory path should take this all_reduce. */
bool em__pg_shm_wants(em_process_group *pg, const em__pg_job *job);
/* The all-reduce itself, after the header exchange agreed. Returns false when
 * it declined (its buffers could not grow, on every rank alike: MPI takes the
 * job); true when it ran the job, whose status tells how it went. */
bool em__pg_shm_all_reduce(em_process_group *pg, em__pg_job *job, double t0);
/* True when a node-local peer process is gone; writes "rank 1 (pid 123)". */
bool em__pg_shm_dead_peer(em_process_group *pg, char *buf, size_t cap);

/* ---- pg_nccl.c ---- (CUDA tensors; everything on the caller's thread)
 * The NCCL communicator is made at the first CUDA collective, on the device
 * of its tensor: rank 0's ncclUniqueId travels by an MPI broadcast job (a
 * world of one makes it locally: a one-rank communicator, no MPI). Each
 * collective is ordered after the work queued so far on the device's compute
 * stream (an event), runs on the communication stream, and records a
 * completion event in job->event. */
/* False when ember was built without CUDA or without NCCL. */
bool em__pg_nccl_built(void);
/* Issues job (filled by pg.c: kind ALL_REDUCE, BROADCAST, REDUCE_SCATTER or
 * ALL_GATHER_DATA with counts; cuda, device, buf, out set) without waiting.
 * On failure job->status/msg are set and no event is left. fn names the
 * public call in misuse messages (a tensor on another device than the
 * communicator's). */
em_status em__pg_nccl_start(em_process_group *pg, em__pg_job *job, const char *fn);
/* Makes the device's compute stream wait for job->event, then polls it (and
 * ncclCommGetAsyncError) on the host until it completed or the group's
 * timeout passed: then ncclCommAbort, EM_ERR_TIMEOUT naming op, rank, world,
 * bytes and device, and the group is broken. Sets job->status/msg; no-op when
 * the start failed. */
em_status em__pg_nccl_wait(em_process_group *pg, em__pg_job *job);
/* Destroys the communicator (aborts it when the group is broken). */
void em__pg_nccl_free(em_process_group *pg);
/* Collectives issued through NCCL so far (tests check the routing). */
uint64_t em__pg_nccl_count(const em_process_group *pg);

/* ---- pg_reduce.c: reductions the backends share ---- */
/* dst[i] = op over src[0..n_src-1][i], sources combined in order; AVG divides
 * by n_src. f16/bf16 accumulate in f32 and round once. dst2 (may be NULL)
 * receives a copy of dst. dst may alias a source. */
void em__pg_reduce_into(void *dst, void *dst2, const void *const *src, int n_src, int64_t n,
                        em_dtype dt, em_reduce_op op);
/* p[i] /= world, in place, for f32/f64 (the AVG step after an MPI sum). */
void em__pg_divide(void *p, int64_t n, em_dtype dt, int world);

#endif
