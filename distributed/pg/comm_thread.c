/* ember — the communication thread of a process group (world > 1).
 *
 * It sets up the CPU transports and runs every CPU job, reaching them only
 * through their tables (pg_internal.h), so every MPI call after MPI_Init
 * happens on it. Jobs are queued by the caller's thread (synchronous
 * collectives enqueue and wait; async ones return an em_work) and run one at
 * a time, in queue order, so a rank's collectives reach the wire in its
 * program order. Nothing here blocks without a deadline: transports poll
 * their requests (em__pg_backoff between polls) and give up with
 * em__pg_timeout once the group's timeout has passed. That poll loop is the
 * watchdog: a job can never wait longer than the timeout, and after a timeout
 * or a transport failure the group is marked broken, so every later job fails
 * at once instead of waiting again. The CUDA transport's bootstrap queues an
 * MPI broadcast here too (em__pg_submit, em__pg_wait).
 */
#include "distributed/pg/pg_internal.h"

#include <stdio.h>
#include <string.h>

/* One job: the carrier's header exchange (all_gather's data step has none:
 * its header went with the sizes), then the first fast transport that takes
 * it, else the carrier. */
static void run_job(em_process_group *pg, em__pg_job *job)
{
    const em__pg_registry *tp = pg->tp;
    job->t0 = em__pg_now();
    em__pg_enter(pg, job->seq);
    if (job->kind != EM__PG_ALL_GATHER_DATA && tp->carrier->agree && tp->carrier->agree(pg, job) != EM_OK)
        return;
    for (int i = 0; i < EM__PG_MAX_FAST && tp->fast[i]; i++) {
        const em__pg_transport *t = tp->fast[i];
        if (t->run && (!t->takes || t->takes(pg, job))) {
            t->run(pg, job);
            return;
        }
    }
    tp->carrier->run(pg, job);
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
            run_job(pg, job);
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

/* Setup runs first, on the thread itself, so that the communicator and the
 * shared memory are made by the thread that will use them: the carrier, then
 * the fast transports in order; the first failure ends it. */
static em_status setup_transports(em_process_group *pg, char *msg, size_t cap)
{
    const em__pg_registry *tp = pg->tp;
    em_status s = tp->carrier->setup ? tp->carrier->setup(pg, msg, cap) : EM_OK;
    for (int i = 0; s == EM_OK && i < EM__PG_MAX_FAST && tp->fast[i]; i++)
        if (tp->fast[i]->setup)
            s = tp->fast[i]->setup(pg, msg, cap);
    return s;
}

typedef struct setup_arg {
    em_process_group *pg;
    em_status status;
    char msg[640];
} setup_arg;

static void *comm_start(void *arg)
{
    setup_arg *sa = arg;
    em_process_group *pg = sa->pg;
    sa->status = setup_transports(pg, sa->msg, sizeof sa->msg);
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
