/* ember — the MPI backend of the process group (CPU tensors; OpenMPI).
 *
 * Everything after MPI_Init runs on the communication thread (comm_thread.c),
 * so MPI_THREAD_SERIALIZED is enough. Every collective starts with a header
 * exchange (an allgather of op, dtype, reduction, root, shape and collective
 * number): ranks that called different collectives, or the same one with
 * different sizes, all see it and all return EM_ERR_INVALID with a message
 * naming both sides, instead of hanging or mixing up data. The header
 * allgather is also the barrier and carries all_gather's dim-0 sizes.
 *
 * Data then moves with non-blocking MPI (MPI_Iallreduce, ...) polled with
 * MPI_Test until done or until the group's timeout, so nothing waits forever.
 * MPI errors are returned (MPI_ERRORS_RETURN on our own duplicate of
 * MPI_COMM_WORLD), not fatal.
 *
 * It is the group's carrier (em__pg_mpi_transport; pg_internal.h): besides
 * running jobs it exchanges the headers (agree) before the comm thread picks
 * who runs a job, so large all-reduces between ranks on one node can go
 * through shared memory instead (pg_shm.c, which it never calls), and it
 * lends other transports a byte allgather for their setup.
 */
#include "distributed/pg/pg_internal.h"

#include "ember_config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if EMBER_HAVE_MPI
#include <mpi.h>

struct em__pg_mpi {
    MPI_Comm comm;
    bool have_comm;
    bool we_initialized;
    float *scratch;          /* f32 room for f16/bf16 reductions, grown on demand */
    size_t scratch_cap;      /* floats */
};

#define HDR_N 16
#define HDR_MAGIC 0x656d6267ll   /* "embg" */
/* magic, seq, kind, dtype, red, root, numel, ndim, shape[8] */
enum { H_MAGIC, H_SEQ, H_KIND, H_DTYPE, H_RED, H_ROOT, H_NUMEL, H_NDIM, H_SHAPE };

static void mpi_err_str(int rc, char *buf, size_t cap)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(buf, cap, "%s", s);
}

/* On the caller's thread, before the comm thread starts: MPI_Init_thread
 * when needed, and the check that MPI agrees with the environment. */
static em_status mpi_open(em_process_group *pg)
{
    em__pg_mpi *m = calloc(1, sizeof *m);
    if (!m)
        return em__fail(EM_ERR_OOM, "em_pg_init: out of memory");
    pg->mpi = m;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return em__fail(EM_ERR_COMM, "em_pg_init: MPI_Init_thread failed on rank %d of %d", pg->rank, pg->world);
        m->we_initialized = true;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return em__fail(EM_ERR_UNSUPPORTED,
                        "em_pg_init: this MPI provides thread level %d; ember needs MPI_THREAD_SERIALIZED", provided);
    int r = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r != pg->rank || n != pg->world)
        return em__fail(EM_ERR_COMM,
                        "em_pg_init: the environment says rank %d of %d but MPI says rank %d of %d; "
                        "start the program with mpirun or `ember launch`", pg->rank, pg->world, r, n);
    return EM_OK;
}

/* Polls req until it completes or the timeout (counted from t0) passes.
 * EM_OK, EM_ERR_TIMEOUT, or EM_ERR_COMM with *mpi_rc set (MPI_SUCCESS when a
 * node-local peer died: `dead` names it). */
static em_status poll_req(em_process_group *pg, MPI_Request *req, double t0, int *mpi_rc, char *dead, size_t cap)
{
    double next_check = t0 + 0.25;
    for (long it = 0;; it++) {
        int flag = 0;
        int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            *mpi_rc = rc;
            return EM_ERR_COMM;
        }
        if (flag)
            return EM_OK;
        double now = em__pg_now(), waited = now - t0;
        if (waited > pg->timeout_s)
            return EM_ERR_TIMEOUT;
        if (now > next_check) {
            next_check = now + 0.25;
            if (dead && em__pg_dead_peer(pg, dead, cap)) {
                *mpi_rc = MPI_SUCCESS;
                return EM_ERR_COMM;
            }
        }
        em__pg_backoff(it, waited);
    }
}

/* Waits for a job's request; on failure fills the job's message. */
static em_status wait_job(em_process_group *pg, em__pg_job *job, MPI_Request *req, double t0, const char *stage)
{
    int mrc = 0;
    char dead[96];
    em_status s = poll_req(pg, req, t0, &mrc, dead, sizeof dead);
    if (s == EM_ERR_TIMEOUT)
        return em__pg_timeout(pg, job, stage);
    if (s == EM_ERR_COMM && mrc == MPI_SUCCESS) {
        char what[160];
        return em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d failed: %s exited (%s)",
                               em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, dead, stage);
    }
    if (s == EM_ERR_COMM) {
        char what[160], es[MPI_MAX_ERROR_STRING];
        mpi_err_str(mrc, es, sizeof es);
        return em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d failed (%s): %s",
                               em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, stage, es);
    }
    return EM_OK;
}

/* Starting a non-blocking call can fail too. */
static em_status start_failed(em_process_group *pg, em__pg_job *job, int rc, const char *call)
{
    char what[160], es[MPI_MAX_ERROR_STRING];
    mpi_err_str(rc, es, sizeof es);
    return em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d: %s failed: %s",
                           em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, call, es);
}

/* For other transports' setup (em__pg_setup_allgather). */
static em_status allgather_bytes(em_process_group *pg, const void *mine, void *all, int bytes, const char *what,
                                 char *msg, size_t cap)
{
    MPI_Request req;
    double t0 = em__pg_now();
    int rc = MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, pg->mpi->comm, &req);
    int mrc = rc;
    em_status s = rc == MPI_SUCCESS ? poll_req(pg, &req, t0, &mrc, NULL, 0) : EM_ERR_COMM;
    if (s == EM_ERR_TIMEOUT)
        snprintf(msg, cap, "%s on rank %d of %d timed out after %g s", what, pg->rank, pg->world, pg->timeout_s);
    else if (s != EM_OK) {
        char es[MPI_MAX_ERROR_STRING];
        mpi_err_str(mrc, es, sizeof es);
        snprintf(msg, cap, "%s on rank %d of %d failed: %s", what, pg->rank, pg->world, es);
    }
    return s;
}

/* On the comm thread, once: our own duplicate of MPI_COMM_WORLD. */
static em_status mpi_setup(em_process_group *pg, char *msg, size_t cap)
{
    em__pg_mpi *m = pg->mpi;
    MPI_Request req;
    double t0 = em__pg_now();
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, &req);
    int mrc = rc;
    em_status s = rc == MPI_SUCCESS ? poll_req(pg, &req, t0, &mrc, NULL, 0) : EM_ERR_COMM;
    if (s == EM_ERR_TIMEOUT) {
        snprintf(msg, cap, "joining the process group on rank %d of %d timed out after %g s (another rank never called em_pg_init?)",
                 pg->rank, pg->world, pg->timeout_s);
        return s;
    }
    if (s != EM_OK) {
        char es[MPI_MAX_ERROR_STRING];
        mpi_err_str(mrc, es, sizeof es);
        snprintf(msg, cap, "MPI_Comm_idup on rank %d of %d failed: %s", pg->rank, pg->world, es);
        return s;
    }
    m->have_comm = true;
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    return EM_OK;
}

/* MPI_Finalize unless the group is broken (which would hang) or MPI was
 * initialized by someone else. */
static void mpi_close(em_process_group *pg)
{
    em__pg_mpi *m = pg->mpi;
    if (!m)
        return;
    /* A broken group may have a collective in flight that peers never
     * joined: MPI_Finalize (and MPI_Comm_free) would wait for it forever.
     * Exiting without them makes mpirun stop the other ranks. */
    if (!pg->broken) {
        if (m->have_comm)
            MPI_Comm_free(&m->comm);
        if (m->we_initialized)
            MPI_Finalize();
    }
    free(m->scratch);
    free(m);
    pg->mpi = NULL;
}

static MPI_Datatype mpi_type(em_dtype dt)
{
    switch (dt) {
    case EM_F32: return MPI_FLOAT;
    case EM_F64: return MPI_DOUBLE;
    case EM_I64: return MPI_INT64_T;
    case EM_I32: return MPI_INT32_T;
    case EM_BOOL: return MPI_UINT8_T;
    case EM_F16:
    case EM_BF16: return MPI_UINT16_T;   /* moved raw; reduced in f32 */
    default: return MPI_BYTE;
    }
}

static MPI_Op mpi_op(em_reduce_op op)
{
    return op == EM_RED_MAX ? MPI_MAX : op == EM_RED_MIN ? MPI_MIN : MPI_SUM;
}

static float *scratch(em_process_group *pg, em__pg_job *job, size_t floats)
{
    em__pg_mpi *m = pg->mpi;
    if (floats > m->scratch_cap) {
        float *p = realloc(m->scratch, floats * sizeof(float));
        if (!p) {
            char what[160];
            em__pg_job_fail(job, EM_ERR_OOM, "%s on rank %d: out of memory for the f32 reduction buffer",
                            em__pg_job_str(job, what, sizeof what), pg->rank);
            return NULL;
        }
        m->scratch = p;
        m->scratch_cap = floats;
    }
    return m->scratch;
}

/* ---- header exchange ---- */

static const char *hdr_shape(const int64_t *h)
{
    int nd = (int)h[H_NDIM];
    return em__dims_str(nd < 0 ? 0 : nd > 8 ? 8 : nd, h + H_SHAPE);
}

static const char *hdr_dtype(const int64_t *h)
{
    return h[H_DTYPE] >= 0 && h[H_DTYPE] < EM_NUM_DTYPES ? em_dtype_name((em_dtype)h[H_DTYPE]) : "?";
}

/* Compares every rank's header with rank 0's, so that all ranks report the
 * same pair. */
static em_status check_headers(em_process_group *pg, em__pg_job *job, const int64_t *all)
{
    const int64_t *h0 = all;
    for (int q = 1; q < pg->world; q++) {
        const int64_t *h = all + (size_t)q * HDR_N;
        const char *name = em__pg_kind_name((int)h0[H_KIND]);
        if (h[H_MAGIC] != HDR_MAGIC || h0[H_MAGIC] != HDR_MAGIC)
            return em__pg_job_fail(job, EM_ERR_COMM, "collective #%llu: corrupt header from rank %d",
                                   (unsigned long long)job->seq, h[H_MAGIC] != HDR_MAGIC ? q : 0);
        if (h[H_KIND] != h0[H_KIND])
            return em__pg_job_fail(job, EM_ERR_INVALID,
                                   "collective mismatch at collective #%llu: rank 0 called %s (%s%s), rank %d called %s (%s%s)",
                                   (unsigned long long)h0[H_SEQ], name, hdr_dtype(h0), hdr_shape(h0), q,
                                   em__pg_kind_name((int)h[H_KIND]), hdr_dtype(h), hdr_shape(h));
        if (h[H_SEQ] != h0[H_SEQ])
            return em__pg_job_fail(job, EM_ERR_INVALID,
                                   "ranks out of step in %s: rank 0 is at collective #%lld, rank %d at #%lld",
                                   name, (long long)h0[H_SEQ], q, (long long)h[H_SEQ]);
        if (h0[H_KIND] == EM__PG_BARRIER)
            continue;
        if (h[H_DTYPE] != h0[H_DTYPE])
            return em__pg_job_fail(job, EM_ERR_INVALID,
                                   "%s mismatch at collective #%llu: rank 0 has %s%s, rank %d has %s%s",
                                   name, (unsigned long long)job->seq, hdr_dtype(h0), hdr_shape(h0), q,
                                   hdr_dtype(h), hdr_shape(h));
        if ((h0[H_KIND] == EM__PG_ALL_REDUCE || h0[H_KIND] == EM__PG_REDUCE_SCATTER) && h[H_RED] != h0[H_RED])
            return em__pg_job_fail(job, EM_ERR_INVALID,
                                   "%s mismatch at collective #%llu: rank 0 reduces with %s, rank %d with %s",
                                   name, (unsigned long long)job->seq, em__pg_red_name((int)h0[H_RED]), q,
                                   em__pg_red_name((int)h[H_RED]));
        if (h0[H_KIND] == EM__PG_BROADCAST && h[H_ROOT] != h0[H_ROOT])
            return em__pg_job_fail(job, EM_ERR_INVALID,
                                   "broadcast mismatch at collective #%llu: rank 0 broadcasts from root %lld, rank %d from root %lld",
                                   (unsigned long long)job->seq, (long long)h0[H_ROOT], q, (long long)h[H_ROOT]);
        if (h0[H_KIND] == EM__PG_ALL_GATHER) {
            bool same = h[H_NDIM] == h0[H_NDIM];
            for (int d = 1; same && d < h0[H_NDIM] && d < 8; d++)
                same = h[H_SHAPE + d] == h0[H_SHAPE + d];
            if (!same)
                return em__pg_job_fail(job, EM_ERR_INVALID,
                                       "all_gather mismatch at collective #%llu: rank 0 has %s%s, rank %d has %s%s "
                                       "(only dim 0 may differ)", (unsigned long long)job->seq,
                                       hdr_dtype(h0), hdr_shape(h0), q, hdr_dtype(h), hdr_shape(h));
        } else if (h[H_NUMEL] != h0[H_NUMEL]) {
            size_t es = em_dtype_size((em_dtype)h0[H_DTYPE]);
            return em__pg_job_fail(job, EM_ERR_INVALID,
                                   "%s mismatch at collective #%llu: rank 0 has %lld elements (%lld bytes, %s%s), "
                                   "rank %d has %lld elements (%lld bytes, %s%s)",
                                   name, (unsigned long long)job->seq, (long long)h0[H_NUMEL],
                                   (long long)(h0[H_NUMEL] * (int64_t)es), hdr_dtype(h0), hdr_shape(h0), q,
                                   (long long)h[H_NUMEL], (long long)(h[H_NUMEL] * (int64_t)es), hdr_dtype(h), hdr_shape(h));
        }
    }
    return EM_OK;
}

/* The header exchange before every job but all_gather's data step (the comm
 * thread's run_job calls it before choosing who runs the job). */
static em_status agree(em_process_group *pg, em__pg_job *job)
{
    int64_t mine[HDR_N] = {0};
    mine[H_MAGIC] = HDR_MAGIC;
    mine[H_SEQ] = (int64_t)job->seq;
    mine[H_KIND] = job->kind;
    mine[H_DTYPE] = job->dtype;
    mine[H_RED] = job->red;
    mine[H_ROOT] = job->root;
    mine[H_NUMEL] = job->numel;
    mine[H_NDIM] = job->ndim;
    for (int d = 0; d < job->ndim && d < 8; d++)
        mine[H_SHAPE + d] = job->shape[d];
    int64_t stack_all[HDR_N * 8];
    int64_t *all = pg->world <= 8 ? stack_all : malloc(sizeof(int64_t) * HDR_N * (size_t)pg->world);
    if (!all)
        return em__pg_job_fail(job, EM_ERR_OOM, "out of memory for the collective header");
    MPI_Request req;
    int rc = MPI_Iallgather(mine, HDR_N, MPI_INT64_T, all, HDR_N, MPI_INT64_T, pg->mpi->comm, &req);
    em_status s = rc != MPI_SUCCESS ? start_failed(pg, job, rc, "MPI_Iallgather")
                                    : wait_job(pg, job, &req, job->t0, "waiting for the other ranks to join it");
    if (s == EM_OK)
        s = check_headers(pg, job, all);
    if (s == EM_OK && job->kind == EM__PG_ALL_GATHER)
        for (int q = 0; q < pg->world; q++)
            job->counts[q] = all[(size_t)q * HDR_N + H_SHAPE];
    if (all != stack_all)
        free(all);
    return s;
}

/* ---- the collectives ---- */

#define MAX_COUNT (1 << 30)   /* elements per MPI call: counts are ints */

static em_status mpi_all_reduce(em_process_group *pg, em__pg_job *job, double t0)
{
    bool half = job->dtype == EM_F16 || job->dtype == EM_BF16;
    void *data = job->buf;
    MPI_Datatype ty = mpi_type(job->dtype);
    size_t es = em_dtype_size(job->dtype);
    if (half) {
        float *f = scratch(pg, job, (size_t)job->numel);
        if (!f)
            return job->status;
        em__convert_n(f, EM_F32, job->buf, job->dtype, job->numel);
        data = f;
        ty = MPI_FLOAT;
        es = sizeof(float);
    }
    for (int64_t off = 0; off < job->numel; off += MAX_COUNT) {
        int cnt = (int)(job->numel - off < MAX_COUNT ? job->numel - off : MAX_COUNT);
        MPI_Request req;
        int rc = MPI_Iallreduce(MPI_IN_PLACE, (char *)data + (size_t)off * es, cnt, ty, mpi_op(job->red),
                                pg->mpi->comm, &req);
        if (rc != MPI_SUCCESS)
            return start_failed(pg, job, rc, "MPI_Iallreduce");
        em_status s = wait_job(pg, job, &req, t0, "in MPI_Iallreduce");
        if (s != EM_OK)
            return s;
    }
    if (job->red == EM_RED_AVG)
        em__pg_divide(data, job->numel, half ? EM_F32 : job->dtype, pg->world);
    if (half)
        em__convert_n(job->buf, job->dtype, data, EM_F32, job->numel);
    return EM_OK;
}

static em_status mpi_broadcast(em_process_group *pg, em__pg_job *job, double t0)
{
    size_t bytes = (size_t)job->numel * em_dtype_size(job->dtype);
    for (size_t off = 0; off < bytes; off += MAX_COUNT) {
        int cnt = (int)(bytes - off < MAX_COUNT ? bytes - off : MAX_COUNT);
        MPI_Request req;
        int rc = MPI_Ibcast((char *)job->buf + off, cnt, MPI_BYTE, job->root, pg->mpi->comm, &req);
        if (rc != MPI_SUCCESS)
            return start_failed(pg, job, rc, "MPI_Ibcast");
        em_status s = wait_job(pg, job, &req, t0, "in MPI_Ibcast");
        if (s != EM_OK)
            return s;
    }
    return EM_OK;
}

static em_status mpi_reduce_scatter(em_process_group *pg, em__pg_job *job, double t0)
{
    if (job->out_numel > INT_MAX)
        return em__pg_job_fail(job, EM_ERR_UNSUPPORTED, "reduce_scatter of more than %d elements per rank", INT_MAX);
    bool half = job->dtype == EM_F16 || job->dtype == EM_BF16;
    const void *in = job->buf;
    void *out = job->out;
    MPI_Datatype ty = mpi_type(job->dtype);
    if (half) {
        float *f = scratch(pg, job, (size_t)(job->numel + job->out_numel));
        if (!f)
            return job->status;
        em__convert_n(f, EM_F32, job->buf, job->dtype, job->numel);
        in = f;
        out = f + job->numel;
        ty = MPI_FLOAT;
    }
    MPI_Request req;
    int rc = MPI_Ireduce_scatter_block(in, out, (int)job->out_numel, ty, mpi_op(job->red), pg->mpi->comm, &req);
    if (rc != MPI_SUCCESS)
        return start_failed(pg, job, rc, "MPI_Ireduce_scatter_block");
    em_status s = wait_job(pg, job, &req, t0, "in MPI_Ireduce_scatter_block");
    if (s != EM_OK)
        return s;
    if (job->red == EM_RED_AVG)
        em__pg_divide(out, job->out_numel, half ? EM_F32 : job->dtype, pg->world);
    if (half)
        em__convert_n(job->out, job->dtype, out, EM_F32, job->out_numel);
    return EM_OK;
}

static em_status mpi_all_gather(em_process_group *pg, em__pg_job *job, double t0)
{
    int64_t row = 1;
    for (int d = 1; d < job->ndim; d++)
        row *= job->shape[d];
    size_t row_bytes = (size_t)row * em_dtype_size(job->dtype);
    if (row_bytes == 0)
        return EM_OK;
    int world = pg->world;
    int *cnt = malloc(sizeof(int) * 2 * (size_t)world);
    if (!cnt)
        return em__pg_job_fail(job, EM_ERR_OOM, "all_gather: out of memory");
    int *displ = cnt + world;
    int64_t total = 0;
    for (int q = 0; q < world; q++) {
        if (job->counts[q] > INT_MAX || total > INT_MAX) {
            free(cnt);
            return em__pg_job_fail(job, EM_ERR_UNSUPPORTED, "all_gather of more than %d rows", INT_MAX);
        }
        cnt[q] = (int)job->counts[q];
        displ[q] = (int)total;
        total += job->counts[q];
    }
    MPI_Datatype rowt;
    em_status s = EM_OK;
    if (row_bytes > INT_MAX || MPI_Type_contiguous((int)row_bytes, MPI_BYTE, &rowt) != MPI_SUCCESS) {
        free(cnt);
        return em__pg_job_fail(job, EM_ERR_UNSUPPORTED, "all_gather rows of %zu bytes", row_bytes);
    }
    MPI_Type_commit(&rowt);
    MPI_Request req;
    int rc = MPI_Iallgatherv(job->buf, cnt[pg->rank], rowt, job->out, cnt, displ, rowt, pg->mpi->comm, &req);
    if (rc != MPI_SUCCESS)
        s = start_failed(pg, job, rc, "MPI_Iallgatherv");
    else
        s = wait_job(pg, job, &req, t0, "in MPI_Iallgatherv");
    MPI_Type_free(&rowt);
    free(cnt);
    return s;
}

/* After agree (the comm thread's run_job). */
static void mpi_run(em_process_group *pg, em__pg_job *job)
{
    double t0 = job->t0;
    switch (job->kind) {
    case EM__PG_ALL_REDUCE: mpi_all_reduce(pg, job, t0); break;
    case EM__PG_BROADCAST: mpi_broadcast(pg, job, t0); break;
    case EM__PG_REDUCE_SCATTER: mpi_reduce_scatter(pg, job, t0); break;
    case EM__PG_ALL_GATHER_DATA: mpi_all_gather(pg, job, t0); break;
    default: break;   /* barrier, all_gather sizes: the header exchange was all */
    }
}

const em__pg_transport em__pg_mpi_transport = {
    .name = "mpi",
    .open = mpi_open,
    .setup = mpi_setup,
    .close = mpi_close,
    .run = mpi_run,
    .agree = agree,
    .allgather_bytes = allgather_bytes,
};

#else /* !EMBER_HAVE_MPI */

static em_status mpi_missing(em_process_group *pg)
{
    return em__fail(EM_ERR_UNSUPPORTED,
                    "em_pg_init: the environment asks for rank %d of %d, but this ember was built without MPI",
                    pg->rank, pg->world);
}

/* Only open: a world of more than one cannot start, so nothing else is called. */
const em__pg_transport em__pg_mpi_transport = {.name = "mpi", .open = mpi_missing};

#endif
