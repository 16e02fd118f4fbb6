/* ember — the process group: joining the world described by the launcher's
 * environment, validating collective calls, and the world of one.
 *
 * It names no transport: it takes them from the registry (transports.c) and
 * calls them through their tables (pg_internal.h).
 *
 * A world of one (no launcher) makes no MPI call at all: collectives on CPU
 * tensors are no-ops or copies. A larger world opens the carrier (MPI),
 * starts the communication thread (comm_thread.c) and hands it every
 * collective on CPU tensors as a job; synchronous calls wait for their job,
 * em_pg_all_reduce_async returns it as an em_work.
 *
 * CUDA tensors go to the CUDA transport (NCCL) in every world, a world of one
 * included (a one-rank communicator): issued on the caller's thread, ordered
 * after the compute stream's work; the synchronous calls return once the
 * result is there. all_gather first exchanges the dim-0 sizes over MPI (not
 * in a world of one). A build without NCCL treats a CUDA tensor as misuse.
 *
 * Errors: misuse (a NULL group, a non-contiguous tensor, a CUDA tensor
 * without NCCL or on another GPU than the group's, AVG of integers,
 * mismatched shapes on this rank) goes to the misuse handler.
 * Failures between ranks come back as em_status with em_last_error() set on
 * the calling thread: EM_ERR_INVALID when ranks called different collectives
 * or different sizes (the group stays usable), EM_ERR_TIMEOUT or EM_ERR_COMM
 * when a collective did not finish in time or a peer died. After those two
 * the group is unusable: every later collective fails at once, em_pg_free
 * skips MPI_Finalize (which would wait for the stuck peers), and the program
 * should exit non-zero; mpirun then stops the other ranks.
 */
#include "distributed/pg/pg_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct em_work {
    em__pg_job job;
};

/* The CUDA transport, or NULL when this ember has none (built without NCCL). */
static const em__pg_transport *cuda_transport(const em__pg_registry *tp)
{
    const em__pg_transport *t = tp->cuda;
    return t && t->start && t->wait ? t : NULL;
}

bool em__pg_cuda_built(void) { return cuda_transport(&em__pg_transports) != NULL; }

/* Closes the CPU transports: the fast ones in reverse order, then the carrier. */
static void close_cpu(em_process_group *pg)
{
    const em__pg_registry *tp = pg->tp;
    for (int i = EM__PG_MAX_FAST - 1; i >= 0; i--)
        if (tp->fast[i] && tp->fast[i]->close)
            tp->fast[i]->close(pg);
    if (tp->carrier->close)
        tp->carrier->close(pg);
}

/* ---- the environment ---- */

/* *found is set when the variable exists; a malformed value is an error. */
static em_status env_int(const char *name, int *out, bool *found)
{
    const char *v = getenv(name);
    *found = v && *v;
    if (!*found)
        return EM_OK;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < 0 || x > INT_MAX)
        return em__fail(EM_ERR_INVALID, "em_pg_init: %s='%s' is not a non-negative integer", name, v);
    *out = (int)x;
    return EM_OK;
}

/* The first of the names that is set. */
static em_status env_first(const char *const *names, int n, int *out, bool *found)
{
    for (int i = 0; i < n; i++) {
        em_status s = env_int(names[i], out, found);
        if (s != EM_OK || *found)
            return s;
    }
    return EM_OK;
}

em_status em_pg_init(const em_pg_opts *opts, em_process_group **out)
{
    if (!out) {
        em__misuse("em_pg_init", "out is NULL");
        return EM_ERR_INVALID;
    }
    *out = NULL;
    if (opts && !(opts->timeout_s >= 0)) {
        em__misuse("em_pg_init", "timeout_s is %g; it must be >= 0 (0 means EMBER_TIMEOUT, then 600 s)", opts->timeout_s);
        return EM_ERR_INVALID;
    }
    int world = 1, rank = 0, local = 0;
    bool has_world, has_rank, has_local;
    static const char *const world_names[] = {"OMPI_COMM_WORLD_SIZE", "EMBER_WORLD_SIZE"};
    static const char *const rank_names[] = {"OMPI_COMM_WORLD_RANK", "EMBER_RANK"};
    static const char *const local_names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "EMBER_LOCAL_RANK"};
    em_status s = env_first(world_names, 2, &world, &has_world);
    if (s == EM_OK)
        s = env_first(rank_names, 2, &rank, &has_rank);
    if (s == EM_OK)
        s = env_first(local_names, 2, &local, &has_local);
    if (s != EM_OK)
        return s;
    if (!has_local)
        local = rank;
    if (world < 1 || rank >= world)
        return em__fail(EM_ERR_INVALID, "em_pg_init: the environment says rank %d of a world of %d", rank, world);

    double timeout = opts && opts->timeout_s > 0 ? opts->timeout_s : 0;
    if (timeout == 0) {
        const char *e = getenv("EMBER_TIMEOUT");
        if (e && *e) {
            char *end;
            timeout = strtod(e, &end);
            if (*end || !(timeout > 0) || !isfinite(timeout))
                return em__fail(EM_ERR_INVALID, "em_pg_init: EMBER_TIMEOUT='%s' is not a positive number of seconds", e);
        } else {
            timeout = 600;
        }
    }

    em_process_group *pg = em__calloc(1, sizeof *pg);
    if (!pg)
        return EM_ERR_OOM;
    pg->rank = rank;
    pg->world = world;
    pg->local_rank = local;
    pg->timeout_s = timeout;
    pg->tp = &em__pg_transports;
    if (world > 1) {
        s = pg->tp->carrier->open ? pg->tp->carrier->open(pg) : EM_OK;
        if (s == EM_OK)
            s = em__pg_thread_start(pg);
        if (s != EM_OK) {
            /* A failed start leaves MPI in an unknown state: do not finalize. */
            pg->broken = true;
            em__pg_thread_stop(pg);
            close_cpu(pg);
            em__free(pg);
            return s;
        }
    }
    *out = pg;
    return EM_OK;
}

void em_pg_free(em_process_group *pg)
{
    if (!pg)
        return;
    if (pg->tp->cuda && pg->tp->cuda->close)
        pg->tp->cuda->close(pg);   /* before MPI goes */
    if (pg->world > 1) {
        em__pg_thread_stop(pg);
        close_cpu(pg);
    }
    em__free(pg);
}

int em_pg_rank(const em_process_group *pg) { return pg ? pg->rank : 0; }
int em_pg_world_size(const em_process_group *pg) { return pg ? pg->world : 1; }
int em_pg_local_rank(const em_process_group *pg) { return pg ? pg->local_rank : 0; }

/* ---- validation ---- */

/* Misuse when the group or the tensor cannot take part; false (with the
 * earlier error left in place) for a NULL tensor. */
static bool check_tensor(em_process_group *pg, em_tensor *t, const char *op, const char *what)
{
    if (!pg) {
        em__misuse(op, "process group is NULL");
        return false;
    }
    if (!t)
        return false;
    if (t->device.type == EM_DEVICE_CUDA && !cuda_transport(pg->tp)) {
        char dev[16];
        em__misuse(op, "%s is on %s; this process group takes CPU tensors (this ember was built without NCCL)", what,
                   em_device_str(t->device, dev));
        return false;
    }
    if (t->device.type != EM_DEVICE_CPU && t->device.type != EM_DEVICE_CUDA) {
        char dev[16];
        em__misuse(op, "%s is on %s; this process group takes CPU and CUDA tensors", what, em_device_str(t->device, dev));
        return false;
    }
    if (!em_is_contiguous(t)) {
        em__misuse(op, "%s %s must be contiguous (strides %s)", what, em__shape_str(t),
                   em__dims_str(t->ndim, t->stride));
        return false;
    }
    return true;
}

static bool check_reduction(em_tensor *t, em_reduce_op op, const char *fn)
{
    if ((unsigned)op > EM_RED_MIN) {
        em__misuse(fn, "unknown reduction %d", (int)op);
        return false;
    }
    if (t->dtype == EM_BOOL && (op == EM_RED_SUM || op == EM_RED_AVG)) {
        em__misuse(fn, "%s of a bool tensor; use max (or) or min (and)", em__pg_red_name(op));
        return false;
    }
    if (op == EM_RED_AVG && !em_dtype_is_float(t->dtype)) {
        em__misuse(fn, "avg of a %s tensor; avg needs a floating dtype", em_dtype_name(t->dtype));
        return false;
    }
    return true;
}

static em_status failed_input(void)
{
    return em_last_status() != EM_OK ? em_last_status() : EM_ERR_INVALID;
}

static bool is_cuda(const em_tensor *t) { return t->device.type == EM_DEVICE_CUDA; }

static void job_from(em__pg_job *job, int kind, em_tensor *t)
{
    memset(job, 0, sizeof *job);
    job->kind = kind;
    if (!t)
        return;
    job->cuda = is_cuda(t);
    job->device = t->device.index;
    job->dtype = t->dtype;
    job->buf = em_data_ptr(t);
    job->numel = em_numel(t);
    job->ndim = t->ndim;
    memcpy(job->shape, t->shape, sizeof job->shape);
    if (t->ndim == 0) {   /* a scalar travels as [1] */
        job->ndim = 1;
        job->shape[0] = 1;
    }
}

static em_status run_sync(em_process_group *pg, em__pg_job *job, const char *fn)
{
    em__pg_submit(pg, job);
    em__pg_wait(pg, job);
    if (job->status != EM_OK)
        return em__fail(job->status, "%s: %s", fn, job->msg);
    return EM_OK;
}

/* A CUDA job through the CUDA transport, waited for (the compute stream and the host). */
static em_status run_cuda(em_process_group *pg, em__pg_job *job, const char *fn)
{
    const em__pg_transport *t = cuda_transport(pg->tp);
    job->fn = fn;
    if (t->start(pg, job) == EM_OK)
        t->wait(pg, job);
    if (job->status != EM_OK)
        return em__fail(job->status, "%s: %s", fn, job->msg);
    return EM_OK;
}

/* ---- collectives ---- */

em_status em_pg_all_reduce(em_process_group *pg, em_tensor *t, em_reduce_op op)
{
    const char *fn = "em_pg_all_reduce";
    if (!check_tensor(pg, t, fn, "tensor"))
        return failed_input();
    if (!check_reduction(t, op, fn))
        return EM_ERR_INVALID;
    t->storage->version++;
    if (pg->world == 1 && !is_cuda(t))
        return EM_OK;   /* sum, max, min and avg of one value are that value */
    em__pg_job job;
    job_from(&job, EM__PG_ALL_REDUCE, t);
    job.red = op;
    return job.cuda ? run_cuda(pg, &job, fn) : run_sync(pg, &job, fn);
}

em_status em_pg_broadcast(em_process_group *pg, em_tensor *t, int root)
{
    const char *fn = "em_pg_broadcast";
    if (!check_tensor(pg, t, fn, "tensor"))
        return failed_input();
    if (root < 0 || root >= pg->world) {
        em__misuse(fn, "root %d is not a rank of this world of %d", root, pg->world);
        return EM_ERR_INVALID;
    }
    if (pg->world == 1 && !is_cuda(t))
        return EM_OK;
    if (pg->rank != root)
        t->storage->version++;
    em__pg_job job;
    job_from(&job, EM__PG_BROADCAST, t);
    job.root = root;
    return job.cuda ? run_cuda(pg, &job, fn) : run_sync(pg, &job, fn);
}

em_status em_pg_all_gather(em_process_group *pg, em_tensor *t, em_tensor **out)
{
    const char *fn = "em_pg_all_gather";
    if (!out) {
        em__misuse(fn, "out is NULL");
        return EM_ERR_INVALID;
    }
    *out = NULL;
    if (!check_tensor(pg, t, fn, "tensor"))
        return failed_input();
    if (pg->world == 1 && !is_cuda(t)) {
        em_tensor *r;
        em_scope_begin();
        r = em_clone(t);
        if (r && r->ndim == 0)
            r = em_view(r, 1, (int64_t[]){1});
        if (r)
            em_keep(r);
        em_scope_end();
        *out = r;
        return r ? EM_OK : failed_input();
    }
    em__pg_job job;
    job_from(&job, EM__PG_ALL_GATHER, t);
    job.counts = em__malloc(sizeof(int64_t) * (size_t)pg->world);
    if (!job.counts)
        return EM_ERR_OOM;
    /* the dim-0 sizes (and the check that the other dims agree) over MPI,
     * for CUDA tensors too; a world of one knows them */
    em_status s = EM_OK;
    if (pg->world > 1)
        s = run_sync(pg, &job, fn);
    else
        job.counts[0] = job.shape[0];
    if (s == EM_OK) {
        int64_t shape[EM_MAX_DIMS], total = 0;
        memcpy(shape, job.shape, sizeof shape);
        for (int q = 0; q < pg->world; q++)
            total += job.counts[q];
        shape[0] = total;
        /* In a scope of its own, so that a failure frees it; failing to
         * allocate leaves the peers in the data step until they time out. */
        em_scope_begin();
        em_tensor *r = em__empty(job.ndim, shape, t->dtype, t->device);
        if (!r) {
            s = EM_ERR_OOM;
        } else {
            uint64_t seq = job.seq;
            int64_t *counts = job.counts;
            job_from(&job, EM__PG_ALL_GATHER_DATA, t);
            job.seq = seq;
            job.counts = counts;
            job.out = em_data_ptr(r);
            job.out_numel = em_numel(r);
            s = job.cuda ? run_cuda(pg, &job, fn) : run_sync(pg, &job, fn);
            if (s == EM_OK)
                *out = em_keep(r);
        }
        em_scope_end();
    }
    em__free(job.counts);
    return s;
}

em_status em_pg_reduce_scatter(em_process_group *pg, em_tensor *in, em_tensor *out, em_reduce_op op)
{
    const char *fn = "em_pg_reduce_scatter";
    if (!check_tensor(pg, in, fn, "in") || !check_tensor(pg, out, fn, "out"))
        return failed_input();
    if (!check_reduction(in, op, fn))
        return EM_ERR_INVALID;
    if (!em_device_eq(in->device, out->device)) {
        char a[16], b[16];
        em__misuse(fn, "in is on %s and out on %s; they must be on one device", em_device_str(in->device, a),
                   em_device_str(out->device, b));
        return EM_ERR_INVALID;
    }
    bool ok = in->dtype == out->dtype && in->ndim >= 1 && in->ndim == out->ndim &&
              in->shape[0] == (int64_t)pg->world * out->shape[0];
    for (int d = 1; ok && d < in->ndim; d++)
        ok = in->shape[d] == out->shape[d];
    if (!ok) {
        em__misuse(fn, "in %s %s and out %s %s: in must be [world * n, ...] = [%d * n, ...] and out [n, ...] "
                   "of the same dtype", em_dtype_name(in->dtype), em__shape_str(in), em_dtype_name(out->dtype),
                   em__shape_str(out), pg->world);
        return EM_ERR_INVALID;
    }
    out->storage->version++;
    if (pg->world == 1 && !is_cuda(in))
        return em_copy_(out, in) ? EM_OK : failed_input();
    em__pg_job job;
    job_from(&job, EM__PG_REDUCE_SCATTER, in);
    job.red = op;
    job.out = em_data_ptr(out);
    job.out_numel = em_numel(out);
    return job.cuda ? run_cuda(pg, &job, fn) : run_sync(pg, &job, fn);
}

em_status em_pg_barrier(em_process_group *pg)
{
    if (!pg) {
        em__misuse("em_pg_barrier", "process group is NULL");
        return EM_ERR_INVALID;
    }
    if (pg->world == 1)
        return EM_OK;
    em__pg_job job;
    job_from(&job, EM__PG_BARRIER, NULL);
    return run_sync(pg, &job, "em_pg_barrier");
}

/* ---- async ---- */

em_work *em_pg_all_reduce_async(em_process_group *pg, em_tensor *t, em_reduce_op op)
{
    const char *fn = "em_pg_all_reduce_async";
    if (!check_tensor(pg, t, fn, "tensor") || !check_reduction(t, op, fn))
        return NULL;
    em_work *w = em__calloc(1, sizeof *w);
    if (!w)
        return NULL;
    job_from(&w->job, EM__PG_ALL_REDUCE, t);
    w->job.red = op;
    w->job.pg = pg;
    w->job.hold = em_retain(t);   /* released by em_work_wait */
    t->storage->version++;
    if (w->job.cuda) {
        w->job.fn = fn;
        cuda_transport(pg->tp)->start(pg, &w->job);   /* a failure waits in the job for em_work_wait */
    } else if (pg->world == 1) {
        w->job.done = 1;
    } else {
        em__pg_submit(pg, &w->job);
    }
    return w;
}

em_status em_work_wait(em_work *w)
{
    if (!w)
        return failed_input();
    em_process_group *pg = w->job.pg;
    if (w->job.cuda)
        cuda_transport(pg->tp)->wait(pg, &w->job);
    else if (pg->world > 1)
        em__pg_wait(pg, &w->job);
    em_status s = w->job.status;
    if (s != EM_OK)
        em__fail(s, "em_pg_all_reduce_async: %s", w->job.msg);
    em_release(w->job.hold);
    em__free(w);
    return s;
}
