/* ember — the NCCL backend of the process group (CUDA tensors).
 *
 * The group's CUDA transport (em__pg_nccl_transport; pg_internal.h): pg.c
 * sends every collective on a CUDA tensor here, through the table; CPU
 * tensors keep the MPI and shared-memory path. Everything runs on the
 * caller's thread, in program order: an NCCL call only enqueues work on a
 * stream, so no queue is needed.
 *
 * The communicator. Made at the first CUDA collective, on the device of its
 * tensor (one device per rank: a later tensor on another device is misuse).
 * Rank 0 makes an ncclUniqueId and sends it to the others as a broadcast job
 * queued on the communication thread (em__pg_submit: the carrier, MPI, runs
 * it with the group's timeout and the header check, so ranks that disagree
 * fail instead of hanging). A world of one
 * makes no MPI call: it uses a one-rank communicator, so the same code path
 * (streams, events, in-place and out-of-place kernels) runs with one GPU.
 * The communicator is non-blocking (ncclConfig_t.blocking = 0): a call that
 * answers ncclInProgress is polled with ncclCommGetAsyncError until it
 * settles, under the group's timeout, so even a rank that never joins the
 * communicator's creation cannot hang the others forever.
 *
 * Ordering. For each collective: record an event on the device's compute
 * stream and make the communication stream wait for it (the collective sees
 * every kernel queued before the call), issue the NCCL call on the
 * communication stream, record a completion event there. Waiting (the sync
 * collectives at once, em_work_wait for the async all-reduce) makes the
 * compute stream wait for that event, so later kernels see the result, then
 * polls the event on the host until it completed. DDP issues its buckets with
 * the async all-reduce while backward is still queuing kernels, so the
 * reduction of a bucket overlaps the backward of the layers before it; the
 * host only blocks in em_ddp_finish_backward, after the whole backward is
 * queued. The caller's references keep the buffers alive until then (the
 * async work holds one), and memory freed after the wait is reused in
 * compute-stream order, which is after the collective.
 *
 * Reductions: sum, avg (ncclAvg), max, min in the tensor's dtype; f16 and
 * bf16 are reduced by NCCL in their own type (not in f32 and rounded once as
 * on the CPU path), so with more than two ranks the result may differ from
 * the CPU path in the last bit. bool (u8) max/min are or/and.
 * all_gather with different dim-0 sizes per rank: the sizes come from the
 * MPI header exchange (pg.c), then one ncclAllGather when they agree, else
 * one ncclBroadcast per rank (each rank the root of its own rows) in one
 * NCCL group.
 *
 * No header exchange before the other collectives (it would put a host round
 * trip in front of every DDP bucket): ranks that call different CUDA
 * collectives, or the same with other sizes, wait until the timeout, whose
 * message names the op, the bytes, the device, the rank and the NCCL
 * collective number.
 *
 * Failure: CUDA errors are EM_ERR_DEVICE, NCCL errors EM_ERR_COMM (misuse
 * reported by NCCL, such as two ranks on one GPU: EM_ERR_INVALID), a wait past
 * the timeout EM_ERR_TIMEOUT after ncclCommAbort. After EM_ERR_COMM, a
 * timeout or a CUDA error the whole group is broken, as with MPI.
 */
#include "distributed/pg/pg_internal.h"

#include "ember_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if EMBER_HAVE_CUDA && EMBER_HAVE_NCCL
#include "tensor/cuda/cuda_api.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "ember's NCCL backend needs NCCL 2.14 or later (non-blocking communicators)"
#endif

#define SPARE_EVENTS 64

struct em__pg_nccl {
    ncclComm_t comm;
    int device;                 /* the communicator's CUDA ordinal; -1 before it exists */
    bool ready;                 /* comm is usable */
    em_status failed;           /* creation failed or the comm was aborted: CUDA collectives fail at once */
    char failmsg[560];
    uint64_t seq;               /* NCCL collectives issued (for messages) */
    uint64_t count;             /* ... that reached the stream (tests) */
    cudaEvent_t spare[SPARE_EVENTS];
    int n_spare;
};

bool em__pg_nccl_built(void) { return true; }

uint64_t em__pg_nccl_count(const em_process_group *pg) { return pg && pg->nccl ? pg->nccl->count : 0; }

/* ---- a broken group ---- */

/* Aborts the communicator (peers stuck in a collective with us stay stuck
 * until their own timeout; mpirun stops them when we exit) and marks the
 * group unusable. */
static void break_group(em_process_group *pg, const char *msg)
{
    em__pg_nccl *n = pg->nccl;
    if (n && n->ready) {
        (void)ncclCommAbort(n->comm);
        n->ready = false;
    }
    if (n) {
        n->failed = EM_ERR_COMM;
        snprintf(n->failmsg, sizeof n->failmsg, "an earlier CUDA collective failed: %.500s", msg);
    }
    em__pg_break(pg, msg);
}

/* ---- errors ---- */

static em_status status_of(ncclResult_t r)
{
    switch (r) {
    case ncclUnhandledCudaError: return EM_ERR_DEVICE;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return EM_ERR_INVALID;
    default: return EM_ERR_COMM;
    }
}

/* "<job> on rank 0 of 2 (cuda:0): <call> failed: <NCCL's name> (<its last error>)" */
static em_status nccl_fail(em_process_group *pg, em__pg_job *job, ncclResult_t r, const char *call, ncclComm_t comm)
{
    char what[160];
    const char *last = ncclGetLastError(comm);
    return em__pg_job_fail(job, status_of(r), "%s on rank %d of %d (cuda:%d): %s failed: %s%s%s%s",
                           em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, job->device, call,
                           ncclGetErrorString(r), last && *last ? " (" : "", last && *last ? last : "",
                           last && *last ? ")" : "");
}

static em_status cuda_fail(em_process_group *pg, em__pg_job *job, cudaError_t e, const char *call)
{
    char what[160];
    (void)cudaGetLastError();
    return em__pg_job_fail(job, EM_ERR_DEVICE, "%s on rank %d of %d (cuda:%d): CUDA: %s failed: %s: %s",
                           em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, job->device, call,
                           cudaGetErrorName(e), cudaGetErrorString(e));
}

/* The job failed on this rank in a way that leaves the peers inside a
 * collective (or the CUDA context unusable): the group is broken. */
static em_status fail_broken(em_process_group *pg, em__pg_job *job)
{
    if (job->status == EM_ERR_COMM || job->status == EM_ERR_TIMEOUT || job->status == EM_ERR_DEVICE)
        break_group(pg, job->msg);
    return job->status;
}

/* A non-blocking communicator may answer ncclInProgress: poll until the call
 * settled. *timed_out when the group's timeout (from t0) passed first. */
static ncclResult_t settle(em_process_group *pg, ncclComm_t comm, ncclResult_t r, double t0, bool *timed_out)
{
    *timed_out = false;
    for (long it = 0; r == ncclInProgress; it++) {
        double waited = em__pg_now() - t0;
        if (waited > pg->timeout_s) {
            *timed_out = true;
            return r;
        }
        em__pg_backoff(it, waited);
        ncclResult_t a = ncclSuccess, q = ncclCommGetAsyncError(comm, &a);
        r = q != ncclSuccess ? q : a;
    }
    return r;
}

/* ---- events: completion events, recycled ---- */

static cudaError_t event_get(em__pg_nccl *n, cudaEvent_t *ev)
{
    if (n->n_spare > 0) {
        *ev = n->spare[--n->n_spare];
        return cudaSuccess;
    }
    return cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
}

/* A recorded event may be re-recorded at once: waits already queued keep the
 * state they captured. */
static void event_put(em__pg_nccl *n, cudaEvent_t ev)
{
    if (n->n_spare < SPARE_EVENTS) n->spare[n->n_spare++] = ev;
    else (void)cudaEventDestroy(ev);
}

/* ---- the communicator ---- */

/* Rank 0's unique id, sent over MPI as 1 + 16 int64 words: NCCL's status on
 * rank 0, then the id (so a failure there reaches every rank). */
static em_status bootstrap(em_process_group *pg, em__pg_job *job, ncclUniqueId *id)
{
    enum { WORDS = 1 + (sizeof(ncclUniqueId) + 7) / 8 };
    int64_t w[WORDS];
    memset(w, 0, sizeof w);
    if (pg->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        w[0] = r;
        if (r == ncclSuccess) memcpy(w + 1, id, sizeof *id);
    }
    em__pg_job b;
    memset(&b, 0, sizeof b);
    b.kind = EM__PG_BROADCAST;
    b.dtype = EM_I64;
    b.buf = w;
    b.numel = WORDS;
    b.ndim = 1;
    b.shape[0] = WORDS;
    b.root = 0;
    em__pg_submit(pg, &b);
    em__pg_wait(pg, &b);
    if (b.status != EM_OK)
        return em__pg_job_fail(job, b.status, "sending rank 0's NCCL unique id over MPI failed: %s", b.msg);
    if (w[0] != ncclSuccess)
        return em__pg_job_fail(job, EM_ERR_COMM, "rank 0 could not make an NCCL unique id: ncclGetUniqueId failed: %s",
                               ncclGetErrorString((ncclResult_t)w[0]));
    memcpy(id, w + 1, sizeof *id);
    return EM_OK;
}

static em_status comm_create(em_process_group *pg, em__pg_nccl *n, em__pg_job *job)
{
    int dev = job->device;
    double t0 = em__pg_now();
    void *stream;
    if (em__cuda_begin(dev, &stream) != EM_OK)   /* makes dev current: NCCL binds the comm to it */
        return em__pg_job_fail(job, EM_ERR_DEVICE, "making the NCCL communicator on cuda:%d: %s", dev, em_last_error());
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (pg->world == 1) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) return nccl_fail(pg, job, r, "ncclGetUniqueId", NULL);
    } else {
        em_status s = bootstrap(pg, job, &id);
        if (s != EM_OK) return s;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, pg->world, id, pg->rank, &cfg);
    bool timed_out = false;
    if (comm) r = settle(pg, comm, r, t0, &timed_out);
    if (timed_out) {
        (void)ncclCommAbort(comm);
        return em__pg_job_fail(job, EM_ERR_TIMEOUT,
                               "making the NCCL communicator on cuda:%d (rank %d of %d) timed out after %g s "
                               "(did every rank reach its first CUDA collective?); the process group is unusable now: "
                               "exit non-zero and let the launcher stop the other ranks",
                               dev, pg->rank, pg->world, pg->timeout_s);
    }
    if (r != ncclSuccess) {
        char last[256];
        const char *l = ncclGetLastError(comm);
        snprintf(last, sizeof last, "%s", l ? l : "");
        if (comm) (void)ncclCommAbort(comm);
        return em__pg_job_fail(job, status_of(r),
                               "making the NCCL communicator on cuda:%d (rank %d of %d) failed: %s%s%s%s%s", dev,
                               pg->rank, pg->world, ncclGetErrorString(r), *last ? " (" : "", last, *last ? ")" : "",
                               r == ncclInvalidUsage ? "; every rank needs a GPU of its own (two ranks on one GPU "
                                                       "cannot share a communicator)" : "");
    }
    n->comm = comm;
    n->device = dev;
    n->ready = true;
    return EM_OK;
}

/* The communicator, made on first use; misuse when job's tensor is on another
 * device than the communicator's. */
static em_status comm_get(em_process_group *pg, em__pg_job *job, const char *fn)
{
    em__pg_nccl *n = pg->nccl;
    if (!n) {
        n = em__calloc(1, sizeof *n);
        if (!n) return em__pg_job_fail(job, EM_ERR_OOM, "out of memory for the NCCL state");
        n->device = -1;
        pg->nccl = n;
    }
    if (n->ready) {
        if (job->device == n->device) return EM_OK;
        em__misuse(fn, "the tensor is on cuda:%d, but this process group's NCCL communicator is on cuda:%d "
                   "(made by its first CUDA collective): each rank uses one GPU", job->device, n->device);
        return em__pg_job_fail(job, EM_ERR_INVALID, "tensor on cuda:%d, communicator on cuda:%d", job->device,
                               n->device);
    }
    if (n->failed != EM_OK) return em__pg_job_fail(job, n->failed, "%s", n->failmsg);
    em_status s = comm_create(pg, n, job);
    if (s != EM_OK) {
        /* sticky: every later CUDA collective fails with the same message */
        n->failed = s;
        snprintf(n->failmsg, sizeof n->failmsg, "%.550s", job->msg);
        fail_broken(pg, job);
    }
    return s;
}

/* ---- the collectives ---- */

static ncclDataType_t nccl_type(em_dtype dt)
{
    switch (dt) {
    case EM_F32: return ncclFloat32;
    case EM_F64: return ncclFloat64;
    case EM_F16: return ncclFloat16;
    case EM_BF16: return ncclBfloat16;
    case EM_I64: return ncclInt64;
    case EM_I32: return ncclInt32;
    default: return ncclUint8;   /* bool */
    }
}

static ncclRedOp_t nccl_op(em_reduce_op op)
{
    switch (op) {
    case EM_RED_AVG: return ncclAvg;
    case EM_RED_MAX: return ncclMax;
    case EM_RED_MIN: return ncclMin;
    default: return ncclSum;
    }
}

/* Issues job's NCCL call(s) on s; *call names the one that failed. */
static ncclResult_t issue(em_process_group *pg, em__pg_job *job, ncclComm_t comm, cudaStream_t s, const char **call)
{
    ncclDataType_t ty = nccl_type(job->dtype);
    switch (job->kind) {
    case EM__PG_ALL_REDUCE:
        *call = "ncclAllReduce";
        if (job->numel == 0) return ncclSuccess;
        return ncclAllReduce(job->buf, job->buf, (size_t)job->numel, ty, nccl_op(job->red), comm, s);
    case EM__PG_BROADCAST:
        *call = "ncclBroadcast";
        if (job->numel == 0) return ncclSuccess;
        return ncclBroadcast(job->buf, job->buf, (size_t)job->numel, ty, job->root, comm, s);
    case EM__PG_REDUCE_SCATTER:
        *call = "ncclReduceScatter";
        if (job->out_numel == 0) return ncclSuccess;
        return ncclReduceScatter(job->buf, job->out, (size_t)job->out_numel, ty, nccl_op(job->red), comm, s);
    case EM__PG_ALL_GATHER_DATA: {
        int64_t row = 1;
        for (int d = 1; d < job->ndim; d++) row *= job->shape[d];
        size_t es = em_dtype_size(job->dtype);
        bool same = true;
        for (int q = 1; q < pg->world; q++) same &= job->counts[q] == job->counts[0];
        if (job->out_numel == 0) return ncclSuccess;
        if (same) {
            *call = "ncclAllGather";
            return ncclAllGather(job->buf, job->out, (size_t)(job->counts[0] * row), ty, comm, s);
        }
        /* variable sizes: each rank broadcasts its own rows into place */
        *call = "ncclGroupStart";
        ncclResult_t r = ncclGroupStart();
        if (r != ncclSuccess) return r;
        *call = "ncclBroadcast";
        size_t off = 0;
        for (int q = 0; q < pg->world && r == ncclSuccess; q++) {
            size_t n = (size_t)job->counts[q] * (size_t)row;
            char *dst = (char *)job->out + off * es;
            if (n) r = ncclBroadcast(q == pg->rank ? job->buf : dst, dst, n, ty, q, comm, s);
            off += n;
        }
        ncclResult_t e = ncclGroupEnd();   /* always closes the group */
        if (r == ncclSuccess) {
            *call = "ncclGroupEnd";
            r = e;
        }
        return r;
    }
    default:
        *call = "(no NCCL call for this collective)";
        return ncclInvalidUsage;
    }
}

/* Issues job (filled by pg.c: kind ALL_REDUCE, BROADCAST, REDUCE_SCATTER or
 * ALL_GATHER_DATA with counts; cuda, device, buf, out, fn set) without
 * waiting. On failure job->status/msg are set and no event is left; a tensor
 * on another device than the communicator's is misuse, named after job->fn. */
static em_status nccl_start(em_process_group *pg, em__pg_job *job)
{
    job->status = EM_OK;
    job->msg[0] = 0;
    job->event = NULL;
    job->done = 0;
    char broken[640];
    if (em__pg_broken(pg, broken, sizeof broken)) {
        char what[160];
        return em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d not started: %s",
                               em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, broken);
    }
    em_status st = comm_get(pg, job, job->fn);
    if (st != EM_OK) return st;
    em__pg_nccl *n = pg->nccl;
    void *cv;
    if (em__cuda_begin(n->device, &cv) != EM_OK)
        return em__pg_job_fail(job, EM_ERR_DEVICE, "%s", em_last_error());
    cudaStream_t compute = cv, comm_s = em__cuda_comm_stream(n->device);
    if (!comm_s) return em__pg_job_fail(job, EM_ERR_DEVICE, "%s", em_last_error());
    job->seq = ++n->seq;
    job->t0 = em__pg_now();

    cudaEvent_t ready, done;
    cudaError_t e = event_get(n, &ready);
    if (e != cudaSuccess) return cuda_fail(pg, job, e, "cudaEventCreateWithFlags");
    e = event_get(n, &done);
    if (e != cudaSuccess) {
        event_put(n, ready);
        return cuda_fail(pg, job, e, "cudaEventCreateWithFlags");
    }
    /* the collective sees every kernel queued on the compute stream so far */
    e = cudaEventRecord(ready, compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(comm_s, ready, 0);
    event_put(n, ready);
    if (e != cudaSuccess) {
        event_put(n, done);
        cuda_fail(pg, job, e, "cudaEventRecord/cudaStreamWaitEvent (compute -> comm)");
        return fail_broken(pg, job);
    }
    const char *call = "";
    ncclResult_t r = issue(pg, job, n->comm, comm_s, &call);
    bool timed_out = false;
    r = settle(pg, n->comm, r, job->t0, &timed_out);
    if (timed_out || r != ncclSuccess) {
        event_put(n, done);
        if (timed_out) {
            char what[160];
            em__pg_job_fail(job, EM_ERR_TIMEOUT,
                            "%s on rank %d of %d (cuda:%d) could not be queued within %g s (NCCL collective #%llu, "
                            "%s); the process group is unusable now: exit non-zero and let the launcher stop the "
                            "other ranks", em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, job->device,
                            pg->timeout_s, (unsigned long long)job->seq, call);
        } else {
            nccl_fail(pg, job, r, call, n->comm);
        }
        return fail_broken(pg, job);
    }
    e = cudaEventRecord(done, comm_s);
    if (e != cudaSuccess) {
        event_put(n, done);
        cuda_fail(pg, job, e, "cudaEventRecord (completion)");
        return fail_broken(pg, job);
    }
    job->event = done;
    n->count++;
    return EM_OK;
}

/* Makes the device's compute stream wait for job->event, then polls it (and
 * ncclCommGetAsyncError) on the host until it completed or the group's
 * timeout passed: then ncclCommAbort, EM_ERR_TIMEOUT naming op, rank, world,
 * bytes and device, and the group is broken. Sets job->status/msg; returns
 * the failed start's status as it is. */
static em_status nccl_wait(em_process_group *pg, em__pg_job *job)
{
    em__pg_nccl *n = pg->nccl;
    if (!job->event || !n) {   /* the start failed: its status stands */
        job->done = 1;
        return job->status;
    }
    cudaEvent_t ev = job->event;
    job->event = NULL;
    job->done = 1;
    if (!n->ready) {   /* an earlier failure aborted the communicator: this result is garbage */
        char what[160];
        (void)cudaEventDestroy(ev);
        return em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d (cuda:%d) did not complete: %s",
                               em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, job->device, n->failmsg);
    }
    void *cv;
    if (em__cuda_begin(job->device, &cv) != EM_OK) {
        em__pg_job_fail(job, EM_ERR_DEVICE, "%s", em_last_error());
        return fail_broken(pg, job);
    }
    /* later kernels on the compute stream see the result */
    cudaError_t e = cudaStreamWaitEvent((cudaStream_t)cv, ev, 0);
    if (e != cudaSuccess) {
        cuda_fail(pg, job, e, "cudaStreamWaitEvent (comm -> compute)");
        return fail_broken(pg, job);
    }
    /* the host waits too, with the timeout (and watches NCCL's async errors) */
    for (long it = 0;; it++) {
        e = cudaEventQuery(ev);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) {
            cuda_fail(pg, job, e, "cudaEventQuery");
            return fail_broken(pg, job);   /* the event stays: the context may be gone */
        }
        double waited = em__pg_now() - job->t0;
        if (n->ready && (it & 31) == 0) {
            ncclResult_t a = ncclSuccess, q = ncclCommGetAsyncError(n->comm, &a);
            if (q == ncclSuccess && a != ncclSuccess && a != ncclInProgress) q = a;
            if (q != ncclSuccess) {
                nccl_fail(pg, job, q, "the communicator (ncclCommGetAsyncError)", n->comm);
                job->status = EM_ERR_COMM;
                fail_broken(pg, job);
                (void)cudaEventDestroy(ev);   /* released once the aborted work is gone */
                return job->status;
            }
        }
        if (waited > pg->timeout_s) {
            char what[160];
            em__pg_job_fail(job, EM_ERR_TIMEOUT,
                            "%s on rank %d of %d (cuda:%d) timed out after %g s (NCCL collective #%llu; a rank "
                            "that called another collective, or other sizes, or never got here); the NCCL "
                            "communicator was aborted and the process group is unusable now: exit non-zero and "
                            "let the launcher stop the other ranks",
                            em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, job->device, pg->timeout_s,
                            (unsigned long long)job->seq);
            fail_broken(pg, job);
            (void)cudaEventDestroy(ev);
            return job->status;
        }
        em__pg_backoff(it, waited);
    }
    event_put(n, ev);
    return job->status;
}

/* Destroys the communicator (aborts it when the group is broken). */
static void nccl_close(em_process_group *pg)
{
    em__pg_nccl *n = pg->nccl;
    if (!n) return;
    int cur = -1;
    if (n->device >= 0 && (cudaGetDevice(&cur) != cudaSuccess || cur != n->device) &&
        cudaSetDevice(n->device) != cudaSuccess)
        (void)cudaGetLastError();
    if (n->ready) {
        char msg[640];
        bool timed_out = false;
        ncclResult_t r = ncclSuccess;
        if (!em__pg_broken(pg, msg, sizeof msg)) {
            /* flushes what is queued; non-blocking: settle with the timeout */
            r = ncclCommFinalize(n->comm);
            r = settle(pg, n->comm, r, em__pg_now(), &timed_out);
        }
        if (em__pg_broken(pg, msg, sizeof msg) || timed_out || r != ncclSuccess) (void)ncclCommAbort(n->comm);
        else if (ncclCommDestroy(n->comm) != ncclSuccess) (void)ncclCommAbort(n->comm);
        n->ready = false;
    }
    for (int i = 0; i < n->n_spare; i++) (void)cudaEventDestroy(n->spare[i]);
    em__free(n);
    pg->nccl = NULL;
}

const em__pg_transport em__pg_nccl_transport = {
    .name = "nccl",
    .close = nccl_close,
    .start = nccl_start,
    .wait = nccl_wait,
};

#else /* built without CUDA or NCCL */

bool em__pg_nccl_built(void) { return false; }

uint64_t em__pg_nccl_count(const em_process_group *pg)
{
    (void)pg;
    return 0;
}

/* No slots: pg.c treats a CUDA tensor as misuse. */
const em__pg_transport em__pg_nccl_transport = {.name = "nccl"};

#endif
