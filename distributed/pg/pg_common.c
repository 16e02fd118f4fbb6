/* ember — what every file of the process group may call (pg_internal.h,
 * "pg_common.c"): job names and failure messages, the clock and the polling
 * backoff, the group's broken flag, and the group services that reach the
 * transports only through their tables: publishing the collective a rank
 * entered, dead peers and laggards for messages, and the carrier's byte
 * allgather for the other transports' setup. It calls no other file of pg/.
 */
#include "distributed/pg/pg_internal.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

const char *em__pg_kind_name(int kind)
{
    static const char *names[EM__PG_NUM_KINDS] = {
        [EM__PG_ALL_REDUCE] = "all_reduce", [EM__PG_BROADCAST] = "broadcast",
        [EM__PG_ALL_GATHER] = "all_gather", [EM__PG_ALL_GATHER_DATA] = "all_gather",
        [EM__PG_REDUCE_SCATTER] = "reduce_scatter", [EM__PG_BARRIER] = "barrier",
    };
    return kind > 0 && kind < EM__PG_NUM_KINDS ? names[kind] : "unknown collective";
}

const char *em__pg_red_name(int red)
{
    static const char *names[] = {"sum", "avg", "max", "min"};
    return red >= 0 && red < 4 ? names[red] : "?";
}

double em__pg_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Spinning keeps latency low for the small, quick collectives DDP issues;
 * yielding lets a compute thread on the same core run; past 5 ms the peers
 * are busy elsewhere (still computing), and short sleeps leave the core to
 * that compute; past a second, nobody notices half a millisecond. MPI's
 * progress engine only advances inside MPI_Test, so polls stay frequent. */
void em__pg_backoff(long iter, double waited_s)
{
    if (iter < 128) {
        for (int i = 0; i < 16; i++)
            cpu_relax();
    } else if (waited_s < 0.005) {
        sched_yield();
    } else {
        struct timespec ts = {0, waited_s < 1.0 ? 20 * 1000 : 500 * 1000};
        nanosleep(&ts, NULL);
    }
}

em_status em__pg_job_fail(em__pg_job *job, em_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job->msg, sizeof job->msg, fmt, ap);
    va_end(ap);
    job->status = s;
    return s;
}

const char *em__pg_job_str(const em__pg_job *job, char *buf, size_t cap)
{
    size_t es = em_dtype_size(job->dtype);
    if (job->kind == EM__PG_BARRIER)
        snprintf(buf, cap, "barrier");
    else
        snprintf(buf, cap, "%s of %lld bytes (%s%s)", em__pg_kind_name(job->kind),
                 (long long)(job->numel * (int64_t)es), em_dtype_name(job->dtype),
                 em__dims_str(job->ndim, job->shape));
    return buf;
}

em_status em__pg_timeout(em_process_group *pg, em__pg_job *job, const char *detail)
{
    char what[160], lag[160];
    em__pg_job_str(job, what, sizeof what);
    em__pg_laggards(pg, job->seq, lag, sizeof lag);
    return em__pg_job_fail(job, EM_ERR_TIMEOUT,
                           "%s on rank %d of %d timed out after %g s (collective #%llu%s%s%s); "
                           "the process group is unusable now: exit non-zero and let the launcher stop the other ranks",
                           what, pg->rank, pg->world, pg->timeout_s, (unsigned long long)job->seq,
                           detail ? ", " : "", detail ? detail : "", lag);
}

/* ---- the broken flag (the comm thread sets it too, under pg->lock) ---- */

bool em__pg_broken(em_process_group *pg, char *msg, size_t cap)
{
    bool locked = pg->thread_started;
    if (locked) pthread_mutex_lock(&pg->lock);
    bool b = pg->broken;
    if (b) snprintf(msg, cap, "%s", pg->broken_msg);
    if (locked) pthread_mutex_unlock(&pg->lock);
    return b;
}

void em__pg_break(em_process_group *pg, const char *msg)
{
    bool locked = pg->thread_started;
    if (locked) pthread_mutex_lock(&pg->lock);
    if (!pg->broken) {
        pg->broken = true;
        snprintf(pg->broken_msg, sizeof pg->broken_msg, "an earlier collective failed: %.580s", msg);
    }
    if (locked) pthread_mutex_unlock(&pg->lock);
}

/* ---- group services, through the tables of the CPU transports ---- */

/* The carrier, then the fast transports; NULL past the last. */
static const em__pg_transport *cpu_transport(const em_process_group *pg, int i)
{
    if (i == 0)
        return pg->tp->carrier;
    return i - 1 < EM__PG_MAX_FAST ? pg->tp->fast[i - 1] : NULL;
}

void em__pg_enter(em_process_group *pg, uint64_t seq)
{
    const em__pg_transport *t;
    for (int i = 0; (t = cpu_transport(pg, i)); i++)
        if (t->enter)
            t->enter(pg, seq);
}

void em__pg_laggards(em_process_group *pg, uint64_t seq, char *buf, size_t cap)
{
    const em__pg_transport *t;
    buf[0] = 0;
    for (int i = 0; !buf[0] && (t = cpu_transport(pg, i)); i++)
        if (t->laggards)
            t->laggards(pg, seq, buf, cap);
}

bool em__pg_dead_peer(em_process_group *pg, char *buf, size_t cap)
{
    const em__pg_transport *t;
    for (int i = 0; (t = cpu_transport(pg, i)); i++)
        if (t->dead_peer && t->dead_peer(pg, buf, cap))
            return true;
    return false;
}

em_status em__pg_setup_allgather(em_process_group *pg, const void *mine, void *all, int bytes, const char *what,
                                 char *msg, size_t cap)
{
    const em__pg_transport *c = pg->tp->carrier;
    if (!c || !c->allgather_bytes) {
        snprintf(msg, cap, "%s: no transport carries it", what);
        return EM_ERR_UNSUPPORTED;
    }
    return c->allgather_bytes(pg, mine, all, bytes, what, msg, cap);
}

em_status em__pg_setup_barrier(em_process_group *pg, const char *what, char *msg, size_t cap)
{
    char a = 1, all[1024];
    char *buf = pg->world <= (int)sizeof all ? all : malloc((size_t)pg->world);
    if (!buf) {
        snprintf(msg, cap, "%s: out of memory", what);
        return EM_ERR_OOM;
    }
    em_status s = em__pg_setup_allgather(pg, &a, buf, 1, what, msg, cap);
    if (buf != all)
        free(buf);
    return s;
}
