/* ember — the DataLoader: walks the batch schedule of the current epoch
 * (sampler.c) and collates each batch (collate.c), on prefetch threads or in
 * the caller's thread.
 *
 * Workers. Batch k of the epoch is loaded into ring slot k % depth. Workers
 * take the next unloaded k under the lock while k < pos + depth (pos: the
 * next batch the consumer returns), so the slots in use always hold distinct
 * batches, and the consumer takes them strictly in order: the order never
 * depends on the number of workers or on timing. A worker has no scope open,
 * so the tensors it makes are owned by nobody until the consumer hands them
 * to its own current scope (em__scope_adopt); the mutex hand-over orders the
 * writes, and no tensor is ever touched by two threads at once (refcounts are
 * not atomic).
 *
 * Repositioning (end of epoch, set_epoch, skip, load_state, an error) stops
 * the ring: no new work is handed out, the consumer waits until no worker is
 * loading, and drops the batches loaded ahead. Only then may the schedule be
 * rebuilt, so workers read it without the lock. */
#include "data/loader_internal.h"
#include "tensor/construct.h"
#include "tensor/support.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

enum { SLOT_EMPTY, SLOT_LOADING, SLOT_READY };

typedef struct slot {
    int64_t k;
    int state;
    em_status st;
    em_batch b;          /* unowned tensors while READY */
    char err[512];       /* the worker's em_last_error when st != EM_OK */
} slot;

typedef struct worker {
    em_dataloader *dl;
    pthread_t thread;
    em_sample *samples;  /* scratch: one batch */
} worker;

struct em_dataloader {
    const em_dataset *ds;
    em_dataloader_opts o;           /* resolved */
    int64_t n, len, max_rows;
    em_batch_schedule sched;
    int64_t sched_epoch;            /* epoch of sched; -1: none */
    int64_t epoch, pos;             /* the next batch returned is batch pos of epoch */
    bool at_end;                    /* the batch just returned was the epoch's last */
    em_status status;
    em_sample *samples;             /* scratch for loading in the caller's thread */

    int nw, depth, started;
    worker *workers;
    slot *ring;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    bool running, quit;
    int64_t next_load;
    int busy;
};

#define DL_CHECK(cond, op, ret, ...) do { if (!(cond)) { em__misuse(op, __VA_ARGS__); return ret; } } while (0)

/* Gets the samples of batch k and collates them, in the calling thread. */
static em_status load_batch(em_dataloader *dl, int64_t k, em_sample *samples, em_batch *out)
{
    *out = (em_batch){0};
    const int64_t *ix = dl->sched.indices + dl->sched.offsets[k];
    int64_t m = dl->sched.offsets[k + 1] - dl->sched.offsets[k];
    for (int64_t i = 0; i < m; i++) {
        em_clear_error();   /* a get that fails without a word must not borrow an older message */
        samples[i] = (em_sample){0};
        em_status st = em_dataset_get(dl->ds, ix[i], &samples[i]);
        if (st != EM_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", em_last_status() != EM_OK ? em_last_error() : "");
            return em__fail(st, "dataloader: batch %lld of epoch %lld, dataset index %lld: %s", (long long)k,
                            (long long)dl->epoch, (long long)ix[i],
                            msg[0] ? msg : "the dataset's get failed without a message");
        }
        if (samples[i].len < 0 || (samples[i].len > 0 && !samples[i].ids))   /* as em_collate refuses */
            return em__fail(EM_ERR_INVALID, "dataloader: batch %lld of epoch %lld, dataset index %lld: the sample "
                            "has %s", (long long)k, (long long)dl->epoch, (long long)ix[i],
                            samples[i].len < 0 ? "a negative length" : "a length but no ids");
    }
    em_status st = em__collate_raw(samples, m, dl->o.pad_to_multiple_of, dl->o.pad_id, out);
    if (st != EM_OK && st != EM_ERR_OOM) {   /* name the batch, and the dataset indices behind its samples */
        char msg[512], map[600] = "";
        snprintf(msg, sizeof msg, "%s", em_last_error());
        int64_t i = 0;
        for (int64_t w = 0; i < m && w < (int64_t)sizeof map - 48; i++)
            w += snprintf(map + w, sizeof map - (size_t)w, "%s%lld->%lld", i ? ", " : "", (long long)i, (long long)ix[i]);
        return em__fail(st, "dataloader: batch %lld of epoch %lld: %s (sample -> dataset index: %s%s)", (long long)k,
                        (long long)dl->epoch, msg, map, i < m ? ", ..." : "");
    }
    return st;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    em_dataloader *dl = w->dl;
    pthread_mutex_lock(&dl->mu);
    while (!dl->quit) {
        if (!(dl->running && dl->next_load < dl->len && dl->next_load < dl->pos + dl->depth)) {
            pthread_cond_wait(&dl->work_cv, &dl->mu);
            continue;
        }
        int64_t k = dl->next_load++;
        slot *s = &dl->ring[k % dl->depth];
        s->k = k;
        s->state = SLOT_LOADING;
        dl->busy++;
        pthread_mutex_unlock(&dl->mu);

        em_batch b;
        em_status st = load_batch(dl, k, w->samples, &b);
        pthread_mutex_lock(&dl->mu);
        s->b = b;
        s->st = st;
        if (st != EM_OK) snprintf(s->err, sizeof s->err, "%s", em_last_error());
        s->state = SLOT_READY;
        dl->busy--;
        pthread_cond_broadcast(&dl->done_cv);
    }
    pthread_mutex_unlock(&dl->mu);
    return NULL;
}

/* Stops the ring (lock held): no new work, wait for loads in flight, drop
 * what was loaded ahead. */
static void ring_stop_locked(em_dataloader *dl)
{
    dl->running = false;
    while (dl->busy) pthread_cond_wait(&dl->done_cv, &dl->mu);
    for (int i = 0; i < dl->depth; i++) {
        if (dl->ring[i].state == SLOT_READY) em_batch_release(&dl->ring[i].b);
        dl->ring[i].state = SLOT_EMPTY;
    }
}

static void ring_stop(em_dataloader *dl)
{
    if (!dl->nw) return;
    pthread_mutex_lock(&dl->mu);
    ring_stop_locked(dl);
    pthread_mutex_unlock(&dl->mu);
}

void em_dataloader_free(em_dataloader *dl)
{
    if (!dl) return;
    if (dl->started) {
        pthread_mutex_lock(&dl->mu);
        ring_stop_locked(dl);
        dl->quit = true;
        pthread_cond_broadcast(&dl->work_cv);
        pthread_mutex_unlock(&dl->mu);
        for (int i = 0; i < dl->started; i++) pthread_join(dl->workers[i].thread, NULL);
    }
    if (dl->nw) {
        pthread_mutex_destroy(&dl->mu);
        pthread_cond_destroy(&dl->work_cv);
        pthread_cond_destroy(&dl->done_cv);
    }
    for (int i = 0; dl->workers && i < dl->nw; i++) em__free(dl->workers[i].samples);
    em__free(dl->workers);
    em__free(dl->ring);
    em__free(dl->samples);
    em_batch_schedule_free(&dl->sched);
    if (dl->o.owns_dataset) em_dataset_free((em_dataset *)dl->ds);
    em__free(dl);
}

em_status em_dataloader_new(const em_dataset *ds, const em_dataloader_opts *opts, em_dataloader **out)
{
    DL_CHECK(out, "em_dataloader_new", EM_ERR_INVALID, "out is NULL");
    *out = NULL;
    DL_CHECK(ds, "em_dataloader_new", EM_ERR_INVALID, "the dataset is NULL");
    DL_CHECK(ds->ops && ds->ops->len && ds->ops->get, "em_dataloader_new", EM_ERR_INVALID,
             "the dataset's ops table %s", !ds->ops ? "is NULL" : !ds->ops->len ? "has no len" : "has no get");
    DL_CHECK(!(opts && opts->owns_dataset) || ds->ops->free, "em_dataloader_new", EM_ERR_INVALID,
             "owns_dataset is set, but the dataset's ops table has no free");
    em_dataloader_opts o;
    em_status st = em__dl_resolve(opts, &o);
    if (st != EM_OK) return st;
    int64_t n = em_dataset_len(ds);
    if (n < 0) return em__fail(EM_ERR_INVALID, "dataloader: the dataset reports a negative length %lld", (long long)n);

    em_dataloader *dl = em__calloc(1, sizeof *dl);
    if (!dl) return EM_ERR_OOM;
    dl->ds = ds;
    dl->o = o;
    dl->n = n;
    dl->len = em__schedule_count(n, &o);
    dl->max_rows = em__schedule_max_rows(&o);
    /* a batch holds each index once, except when even batches loop back to fill a rank's
     * last one: size the scratch by the dataset then (a batch_size of 10^9 over ten items
     * asked for 80 GB) */
    if (!(o.even_batches == EM_TOK_ON && o.num_processes > 1) && dl->max_rows > n) dl->max_rows = n > 0 ? n : 1;
    dl->sched_epoch = -1;
    dl->nw = o.num_workers;
    dl->samples = em__malloc(sizeof(em_sample) * (size_t)dl->max_rows);
    if (!dl->samples) goto oom;
    if (dl->nw) {
        int64_t depth = (int64_t)o.num_workers * o.prefetch_factor;
        dl->depth = depth > (1 << 20) ? 1 << 20 : (int)depth;
        dl->workers = em__calloc((size_t)dl->nw, sizeof *dl->workers);
        dl->ring = em__calloc((size_t)dl->depth, sizeof *dl->ring);
        if (!dl->workers || !dl->ring) goto oom;
        for (int i = 0; i < dl->nw; i++) {
            dl->workers[i].dl = dl;
            if (!(dl->workers[i].samples = em__malloc(sizeof(em_sample) * (size_t)dl->max_rows))) goto oom;
        }
        pthread_mutex_init(&dl->mu, NULL);
        pthread_cond_init(&dl->work_cv, NULL);
        pthread_cond_init(&dl->done_cv, NULL);
        for (int i = 0; i < dl->nw; i++) {
            int e = pthread_create(&dl->workers[i].thread, NULL, worker_main, &dl->workers[i]);
            if (e) {
                dl->o.owns_dataset = false;   /* on failure the caller keeps the dataset */
                em_dataloader_free(dl);
                return em__fail(EM_ERR_OOM, "dataloader: cannot start worker thread %d of %d: %s", i + 1,
                                o.num_workers, strerror(e));
            }
            dl->started++;
        }
    }
    *out = dl;
    return EM_OK;
oom:
    dl->o.owns_dataset = false;   /* on failure the caller keeps the dataset */
    em_dataloader_free(dl);
    return em__fail(EM_ERR_OOM, "dataloader: out of memory");
}

int64_t em_dataloader_len(const em_dataloader *dl)
{
    DL_CHECK(dl, "em_dataloader_len", -1, "the dataloader is NULL");
    return dl->len;
}

int64_t em_dataloader_remainder(const em_dataloader *dl)
{
    DL_CHECK(dl, "em_dataloader_remainder", -1, "the dataloader is NULL");
    if (dl->o.drop_last) return -1;
    int64_t total = dl->o.split_batches ? dl->o.batch_size : dl->o.batch_size * dl->o.num_processes;
    return dl->n % total;
}

em_status em_dataloader_status(const em_dataloader *dl)
{
    DL_CHECK(dl, "em_dataloader_status", EM_ERR_INVALID, "the dataloader is NULL");
    return dl->status;
}

bool em_dataloader_end_of_dataloader(const em_dataloader *dl)
{
    DL_CHECK(dl, "em_dataloader_end_of_dataloader", false, "the dataloader is NULL");
    return dl->at_end;
}

/* Hands the worker-made (unowned) tensors to the caller's current scope. */
static em_status hand_over(em_batch *b)
{
    em_tensor **t[6];
    int n = em_batch_tensors(b, t);
    for (int i = 0; i < n; i++)
        if (*t[i] && !em__scope_adopt(*t[i])) {   /* it released t[i]; t[0..i) belong to the scope now */
            for (int j = i + 1; j < n; j++) em_release(*t[j]);
            *b = (em_batch){0};
            return EM_ERR_OOM;
        }
    return EM_OK;
}

/* The schedule of the current epoch, built when the ring is stopped. */
static em_status ensure_schedule(em_dataloader *dl)
{
    if (dl->sched_epoch == dl->epoch) return EM_OK;
    em_batch_schedule_free(&dl->sched);
    dl->sched_epoch = -1;
    em_status st = em_batch_schedule_make(dl->n, &dl->o, dl->epoch, &dl->sched);
    if (st == EM_OK) dl->sched_epoch = dl->epoch;
    return st;
}

static bool fail(em_dataloader *dl, em_status st)
{
    dl->status = st;
    return false;
}

bool em_dataloader_next(em_dataloader *dl, em_batch *out)
{
    DL_CHECK(dl && out, "em_dataloader_next", false, "%s is NULL", dl ? "out" : "the dataloader");
    *out = (em_batch){0};
    dl->at_end = false;
    dl->status = EM_OK;
    if (dl->pos >= dl->len) {   /* end of the epoch: the next call starts the next one */
        ring_stop(dl);
        dl->epoch++;
        dl->pos = 0;
        return false;
    }
    em_batch b;
    em_status st;
    if (!dl->nw) {
        if ((st = ensure_schedule(dl)) != EM_OK) return fail(dl, st);
        /* a private scope: a failure midway frees what was made */
        em_scope_begin();
        st = load_batch(dl, dl->pos, dl->samples, &b);
        if (st == EM_OK && !em__batch_keep(&b)) st = EM_ERR_OOM;
        em_scope_end();
        if (st != EM_OK) return fail(dl, st);
        dl->pos++;
    } else {
        /* dl->pos is read by the workers: it changes only under the lock */
        pthread_mutex_lock(&dl->mu);
        if (!dl->running) {
            if ((st = ensure_schedule(dl)) != EM_OK) {
                pthread_mutex_unlock(&dl->mu);
                return fail(dl, st);
            }
            dl->next_load = dl->pos;
            dl->running = true;
            pthread_cond_broadcast(&dl->work_cv);
        }
        slot *s = &dl->ring[dl->pos % dl->depth];
        while (!(s->state == SLOT_READY && s->k == dl->pos)) pthread_cond_wait(&dl->done_cv, &dl->mu);
        b = s->b;
        st = s->st;
        s->b = (em_batch){0};
        s->state = SLOT_EMPTY;
        if (st == EM_OK) st = hand_over(&b);
        if (st != EM_OK) {   /* stop; a next call reloads from this batch */
            ring_stop_locked(dl);
            pthread_mutex_unlock(&dl->mu);
            if (s->st != EM_OK) em__fail(st, "%s", s->err);
            return fail(dl, st);
        }
        dl->pos++;   /* frees the slot for batch pos - 1 + depth */
        pthread_cond_broadcast(&dl->work_cv);
        pthread_mutex_unlock(&dl->mu);
    }
    *out = b;
    dl->at_end = dl->pos == dl->len;
    return true;
}

/* Moves to batch `pos` of `epoch`, dropping whatever was loaded ahead. */
static void reposition(em_dataloader *dl, int64_t epoch, int64_t pos)
{
    if (dl->nw) pthread_mutex_lock(&dl->mu);
    if (dl->nw) ring_stop_locked(dl);
    dl->epoch = epoch;
    dl->pos = pos;
    dl->at_end = false;
    dl->status = EM_OK;
    if (dl->nw) pthread_mutex_unlock(&dl->mu);
}

void em_dataloader_set_epoch(em_dataloader *dl, int64_t epoch)
{
    DL_CHECK(dl, "em_dataloader_set_epoch", , "the dataloader is NULL");
    DL_CHECK(epoch >= 0, "em_dataloader_set_epoch", , "epoch %lld is negative", (long long)epoch);
    reposition(dl, epoch, 0);
}

void em_dataloader_skip_first_batches(em_dataloader *dl, int64_t n)
{
    DL_CHECK(dl, "em_dataloader_skip_first_batches", , "the dataloader is NULL");
    DL_CHECK(n >= 0, "em_dataloader_skip_first_batches", , "cannot skip %lld batches", (long long)n);
    reposition(dl, dl->epoch, n < dl->len ? n : dl->len);
}

em_loader_state em_dataloader_state(const em_dataloader *dl)
{
    DL_CHECK(dl, "em_dataloader_state", (em_loader_state){0}, "the dataloader is NULL");
    return (em_loader_state){ .epoch = dl->epoch, .batch = dl->pos };
}

em_status em_dataloader_load_state(em_dataloader *dl, em_loader_state s)
{
    DL_CHECK(dl, "em_dataloader_load_state", EM_ERR_INVALID, "the dataloader is NULL");
    if (s.epoch < 0 || s.batch < 0 || s.batch > dl->len)
        return em__fail(EM_ERR_INVALID,
                        "dataloader: saved state (epoch %lld, batch %lld) does not fit this loader of %lld batches "
                        "per epoch", (long long)s.epoch, (long long)s.batch, (long long)dl->len);
    reposition(dl, s.epoch, s.batch);
    return EM_OK;
}

em_dataloader_opts em_dataloader_options(const em_dataloader *dl)
{
    DL_CHECK(dl, "em_dataloader_options", (em_dataloader_opts){0}, "the dataloader is NULL");
    return dl->o;
}

em_status em_dataloader_reshard(em_dataloader *dl, const em_dataloader_opts *sharding)
{
    DL_CHECK(dl && sharding, "em_dataloader_reshard", EM_ERR_INVALID, "%s is NULL",
             dl ? "sharding" : "the dataloader");
    em_dataloader_opts want = dl->o, o;
    want.num_processes = sharding->num_processes;
    want.process_index = sharding->process_index;
    want.split_batches = sharding->split_batches;
    want.even_batches = sharding->even_batches;
    if (sharding->seed) want.seed = sharding->seed;
    em_status st = em__dl_resolve(&want, &o);
    if (st != EM_OK) return st;
    int64_t rows = em__schedule_max_rows(&o);
    if (dl->nw) pthread_mutex_lock(&dl->mu);
    if (dl->nw) ring_stop_locked(dl);   /* no worker is loading now: their scratch may be replaced */
    if (rows > dl->max_rows) {
        em_sample *p = em__realloc(dl->samples, sizeof(em_sample) * (size_t)rows);
        if (p) dl->samples = p;
        for (int i = 0; p && i < dl->nw; i++)
            if ((p = em__realloc(dl->workers[i].samples, sizeof(em_sample) * (size_t)rows)))
                dl->workers[i].samples = p;
        if (!p) {   /* the arrays that grew stay valid; the capacity stays the old one */
            if (dl->nw) pthread_mutex_unlock(&dl->mu);
            return em__fail(EM_ERR_OOM, "dataloader: out of memory");
        }
        dl->max_rows = rows;
    }
    dl->o = o;
    dl->len = em__schedule_count(dl->n, &o);
    em_batch_schedule_free(&dl->sched);
    dl->sched_epoch = -1;
    dl->pos = 0;
    dl->at_end = false;
    dl->status = EM_OK;
    if (dl->nw) pthread_mutex_unlock(&dl->mu);
    return EM_OK;
}
