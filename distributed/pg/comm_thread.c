/* ember — the communication thread of a process group (world > 1).
 *
 * It owns every MPI call after MPI_Init: jobs are queued by the caller's
 * thread (synchronous collectives enqueue and wait; async ones return an
 * em_work) and run one at a time, in queue order, so a rank's collectives
 * reach MPI in its program order. Nothing here blocks without a deadline:
 * backends poll their requests (em__pg_backoff between polls) and give up
 * with em__pg_timeout once the group's timeout has passed. That poll loop is
 * the watchdog: a job can never wait longer than the timeout, and after a
 * timeout or a transport failure the group is marked broken, so every later
 * job fails at once instead of waiting again.
 */
#include "distributed/pg/pg_internal.h"

#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

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

static void *comm_main(void *arg)
{
    em_process_group *pg = arg;
    pthread_mutex_lock(&pg->lock);
    for (;;) {
        while (!pg->head && !pg->stop)
            pthread_cond_wait(&pg->wake, &pg->lock);
        em__pg_job *job = pg->head;
        if (!job)
            break;   /* stop requested and the queue is drained */
        pg->head = job->next;
        if (!pg->head)
            pg->tail = NULL;
        bool broken = pg->broken;
        pthread_mutex_unlock(&pg->lock);

        if (broken) {
            char what[160];
            em__pg_job_fail(job, EM_ERR_COMM, "%s on rank %d of %d not started: %s",
                            em__pg_job_str(job, what, sizeof what), pg->rank, pg->world, pg->broken_msg);
        } else {
            job->status = EM_OK;
            job->msg[0] = 0;
            em__pg_mpi_run(pg, job);
        }

        pthread_mutex_lock(&pg->lock);
        if (!broken && (job->status == EM_ERR_TIMEOUT || job->status == EM_ERR_COMM)) {
            pg->broken = true;
            snprintf(pg->broken_msg, sizeof pg->broken_msg, "an earlier collective failed: %.580s", job->msg);
        }
        job->done = 1;
        pthread_cond_broadcast(&pg->done);
    }
    pthread_mutex_unlock(&pg->lock);
    return NULL;
}

/* The setup job runs first, on the thread itself, so that the communicator
 * and the shared memory are made by the thread that will use them. */
typedef struct setup_arg {
    em_process_group *pg;
    em_status status;
    char msg[640];
} setup_arg;

static void *comm_start(void *arg)
{
    setup_arg *sa = arg;
    em_process_group *pg = sa->pg;
    sa->status = em__pg_mpi_setup(pg, sa->msg, sizeof sa->msg);
    pthread_mutex_lock(&pg->lock);
    if (sa->status != EM_OK) {
        pg->broken = true;
        snprintf(pg->broken_msg, sizeof pg->broken_msg, "setup failed: %.600s", sa->msg);
    }
    pg->thread_started = true;   /* tells em__pg_thread_start that setup is over */
    pthread_cond_broadcast(&pg->done);
    pthread_mutex_unlock(&pg->lock);
    return comm_main(pg);
}

em_status em__pg_thread_start(em_process_group *pg)
{
    pthread_mutex_init(&pg->lock, NULL);
    pthread_cond_init(&pg->wake, NULL);
    pthread_cond_init(&pg->done, NULL);
    setup_arg sa = {.pg = pg};
    pthread_t th;
    int rc = pthread_create(&th, NULL, comm_start, &sa);
    if (rc != 0)
        return em__fail(EM_ERR_COMM, "em_pg_init: cannot start the communication thread: %s", strerror(rc));
    pthread_mutex_lock(&pg->lock);
    while (!pg->thread_started)
        pthread_cond_wait(&pg->done, &pg->lock);
    pg->thread = th;
    pthread_mutex_unlock(&pg->lock);
    if (sa.status != EM_OK)
        return em__fail(sa.status, "em_pg_init: %s", sa.msg);
    return EM_OK;
}

void em__pg_thread_stop(em_process_group *pg)
{
    if (!pg->thread_started)
        return;
    pthread_mutex_lock(&pg->lock);
    pg->stop = true;
    pthread_cond_broadcast(&pg->wake);
    pthread_mutex_unlock(&pg->lock);
    pthread_join(pg->thread, NULL);
    pg->thread_started = false;
    pthread_cond_destroy(&pg->wake);
    pthread_cond_destroy(&pg->done);
    pthread_mutex_destroy(&pg->lock);
}

void em__pg_submit(em_process_group *pg, em__pg_job *job)
{
    job->done = 0;
    job->next = NULL;
    pthread_mutex_lock(&pg->lock);
    if (!job->seq)
        job->seq = ++pg->seq;   /* the data step of an all_gather keeps its header's number */
    if (pg->tail)
        pg->tail->next = job;
    else
        pg->head = job;
    pg->tail = job;
    pthread_cond_signal(&pg->wake);
    pthread_mutex_unlock(&pg->lock);
}

/* No deadline here: the comm thread finishes every job within the timeout
 * (jobs queued behind it wait for it, each with its own deadline). */
void em__pg_wait(em_process_group *pg, em__pg_job *job)
{
    pthread_mutex_lock(&pg->lock);
    while (!job->done)
        pthread_cond_wait(&pg->done, &pg->lock);
    pthread_mutex_unlock(&pg->lock);
}
