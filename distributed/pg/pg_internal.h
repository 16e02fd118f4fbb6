/* ember — distributed/pg/: internals of the process group. Not installed.
 *
 * The files, each calling by name only the ones on the lines below it (and
 * the generic code reaching a transport only through its table):
 *
 *   pg.c             the public calls: the environment, validation, routing a
 *                    job to the comm thread (CPU tensors) or to the CUDA transport
 *   transports.c     the registry: which transport carries what (the one file
 *                    that names them)
 *   pg_mpi.c  pg_shm.c  pg_nccl.c
 *                    the transports, each one const em__pg_transport; they never
 *                    call each other (pg_shm.c sets itself up through the
 *                    carrier's byte allgather, pg_mpi.c learns of dead peers
 *                    through em__pg_dead_peer)
 *   comm_thread.c    the queue and the thread that runs every CPU job: the
 *                    carrier's header exchange, then the first transport that
 *                    takes the job
 *   pg_common.c      job names and failure messages, the clock and backoff,
 *                    the broken flag, and the group services that go through
 *                    the tables (dead peers, laggards, setup allgather)
 *   pg_reduce.c      elementwise reductions
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
#include "tensor/construct.h"
#include "tensor/numeric.h"
#include "tensor/support.h"

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

/* One collective. Buffers belong to the caller, who keeps them alive until
 * the job is done. The transport that runs it writes only status, msg,
 * counts, the data buffers and (CUDA) event. */
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
    const char *fn;                /* the public call, for misuse messages */
    double t0;                     /* when it started (the timeout counts from here) */

    em_status status;              /* set by the transport */
    char msg[640];
    int done;                      /* under pg->lock */
    struct em__pg_job *next;
    /* async bookkeeping (pg.c) */
    em_tensor *hold;               /* a reference kept until em_work_wait */
    em_process_group *pg;
    /* CUDA jobs: run on the caller's thread, never queued */
    bool cuda;
    int device;                    /* the CUDA ordinal of the tensors */
    void *event;                   /* cudaEvent_t recorded after the collective, until waited */
} em__pg_job;

/* ---- the transport table ----------------------------------------------------
 * What a transport is: one const em__pg_transport in its own file, whose
 * slots the generic code (pg.c, comm_thread.c, pg_common.c) calls; the shape
 * of torch.distributed's Backend, and of tensor/'s em_backend. A NULL slot is
 * something this transport does not do. Slots of a CPU transport run on the
 * communication thread (but open, on the caller's); slots of the CUDA one on
 * the caller's thread. Failures go into job->status / job->msg, or into msg
 * for setup; only open sets em_last_error().
 *   pg_mpi.c   the carrier: joins the world, exchanges every CPU collective's
 *              header, carries every CPU job nobody else takes, and lends
 *              the others a byte allgather for their setup;
 *   pg_shm.c   fast: all-reduces between ranks on one node; knows which
 *              node-local peer lags or died;
 *   pg_nccl.c  CUDA tensors, on the caller's thread, ordered by CUDA events. */
typedef struct em__pg_transport {
    const char *name;              /* "mpi", "shm", "nccl" */

    /* Caller's thread, in em_pg_init with world > 1, before the comm thread
     * starts (MPI_Init_thread). Sets em_last_error() on failure. */
    em_status (*open)(em_process_group *pg);
    /* Comm thread, once, before any job: the carrier first, then the fast
     * ones in order. EM_OK may leave the transport unused (takes says no);
     * any failure leaves the group unusable, with msg. */
    em_status (*setup)(em_process_group *pg, char *msg, size_t cap);
    /* em_pg_free, or a failed em_pg_init: frees its state (none: no-op). When
     * the group is broken it must not wait for peers. */
    void (*close)(em_process_group *pg);

    /* Whether it carries this job (asked after the header exchange). NULL: every one. */
    bool (*takes)(const em_process_group *pg, const em__pg_job *job);
    /* CPU: runs the job to its end (deadline: job->t0 + the group's timeout). */
    void (*run)(em_process_group *pg, em__pg_job *job);
    /* CUDA: issues the job without waiting. */
    em_status (*start)(em_process_group *pg, em__pg_job *job);
    /* CUDA: waits for a started job (its failed start: returns that status). */
    em_status (*wait)(em_process_group *pg, em__pg_job *job);

    /* The carrier's: every rank's header of job (op, dtype, reduction, root,
     * shape, number) compared before it runs; ranks that disagree all fail
     * with EM_ERR_INVALID naming both sides. Fills all_gather's counts. */
    em_status (*agree)(em_process_group *pg, em__pg_job *job);
    /* The carrier's: a small allgather of `bytes` per rank, with the group's
     * timeout, for setup; what names it in msg. */
    em_status (*allgather_bytes)(em_process_group *pg, const void *mine, void *all, int bytes, const char *what,
                                 char *msg, size_t cap);

    /* Diagnostics: publishes that this rank entered collective seq; writes
     * "; rank 1 is at collective #7" for peers behind seq (nothing when it
     * cannot tell); true with "rank 1 (pid 123)" when a peer is gone. */
    void (*enter)(em_process_group *pg, uint64_t seq);
    void (*laggards)(em_process_group *pg, uint64_t seq, char *buf, size_t cap);
    bool (*dead_peer)(em_process_group *pg, char *buf, size_t cap);
} em__pg_transport;

/* ---- transports.c: the registry, the one place that names the transports ---- */
#define EM__PG_MAX_FAST 4
typedef struct em__pg_registry {
    const em__pg_transport *carrier;                 /* CPU (MPI) */
    const em__pg_transport *fast[EM__PG_MAX_FAST];   /* CPU, offered each job before the carrier (shm); NULL ends */
    const em__pg_transport *cuda;                    /* CUDA tensors (NCCL): no start slot when not built */
} em__pg_registry;
extern const em__pg_registry em__pg_transports;
extern const em__pg_transport em__pg_mpi_transport, em__pg_shm_transport, em__pg_nccl_transport;

/* Each transport's own state, opaque outside its file. */
typedef struct em__pg_mpi em__pg_mpi;
typedef struct em__pg_shm em__pg_shm;
typedef struct em__pg_nccl em__pg_nccl;

struct em_process_group {
    int rank, world, local_rank;
    double timeout_s;
    uint64_t seq;                  /* collectives issued (caller side) */
    const em__pg_registry *tp;     /* its transports */

    /* comm thread (comm_thread.c); only when world > 1 */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;           /* jobs queued or stop */
    pthread_cond_t done;           /* a job finished */
    em__pg_job *head, *tail;
    bool stop;

    /* after a timeout or a transport failure the group is unusable: later
     * collectives fail at once with this message (em__pg_break) */
    bool broken;
    char broken_msg[640];

    em__pg_mpi *mpi;
    em__pg_shm *shm;
    em__pg_nccl *nccl;             /* made at the first CUDA collective */
};

/* ---- comm_thread.c ---- */
/* Starts the thread, which sets up the CPU transports (setup slots) first. */
em_status em__pg_thread_start(em_process_group *pg);
void em__pg_thread_stop(em_process_group *pg);   /* drains the queue, joins */
/* Queues a CPU job (numbered here unless it has a number); em__pg_wait waits for it. */
void em__pg_submit(em_process_group *pg, em__pg_job *job);
void em__pg_wait(em_process_group *pg, em__pg_job *job);

/* ---- pg_common.c: what every file of pg/ may call ---- */
const char *em__pg_kind_name(int kind);
const char *em__pg_red_name(int red);
double em__pg_now(void);
/* Pause between polls: spins first, then yields, then sleeps (waited_s long). */
void em__pg_backoff(long iter, double waited_s);
/* Fills job->status/msg; the format is prefixed by nothing. */
em_status em__pg_job_fail(em__pg_job *job, em_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "all_reduce of 4096 bytes (f32[1024])" into buf. */
const char *em__pg_job_str(const em__pg_job *job, char *buf, size_t cap);
/* Fills job->status/msg with a timeout message naming the op, the rank, the
 * world, the bytes, the collective number and the laggards; `detail` (may be
 * NULL) is appended. */
em_status em__pg_timeout(em_process_group *pg, em__pg_job *job, const char *detail);
/* Whether the group is unusable (then msg says why); em__pg_break makes it
 * so, keeping the first reason ("an earlier collective failed: <msg>"). */
bool em__pg_broken(em_process_group *pg, char *msg, size_t cap);
void em__pg_break(em_process_group *pg, const char *msg);
/* The CPU transports' diagnostics, through their tables (see the slots). */
void em__pg_enter(em_process_group *pg, uint64_t seq);
void em__pg_laggards(em_process_group *pg, uint64_t seq, char *buf, size_t cap);
bool em__pg_dead_peer(em_process_group *pg, char *buf, size_t cap);
/* The carrier's allgather_bytes, for a transport's setup; the barrier is one
 * of a byte per rank. */
em_status em__pg_setup_allgather(em_process_group *pg, const void *mine, void *all, int bytes, const char *what,
                                 char *msg, size_t cap);
em_status em__pg_setup_barrier(em_process_group *pg, const char *what, char *msg, size_t cap);

/* ---- pg_reduce.c: reductions the transports share ---- */
/* dst[i] = op over src[0..n_src-1][i], sources combined in order; AVG divides
 * by n_src. f16/bf16 accumulate in f32 and round once. dst2 (may be NULL)
 * receives a copy of dst. dst may alias a source. */
void em__pg_reduce_into(void *dst, void *dst2, const void *const *src, int n_src, int64_t n,
                        em_dtype dt, em_reduce_op op);
/* p[i] /= world, in place, for f32/f64 (the AVG step after an MPI sum). */
void em__pg_divide(void *p, int64_t n, em_dtype dt, int world);

/* ---- for the layers above (pg.c) and the tests (pg_nccl.c) ---- */
/* Whether CUDA tensors can take part in collectives (a CUDA transport is
 * built in: false without CUDA or without NCCL). */
bool em__pg_cuda_built(void);
/* The same, asked of NCCL itself, and the collectives issued through it so
 * far (the tests check the routing with them). */
bool em__pg_nccl_built(void);
uint64_t em__pg_nccl_count(const em_process_group *pg);

#endif
