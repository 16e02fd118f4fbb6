/* ember — the batch schedule: the epoch's order (sequential, or a Philox
 * permutation of (seed, epoch)), cut into batches, then sharded across ranks
 * exactly as Accelerate's BatchSamplerShard (data.h, em_batch_schedule_make).
 *
 * The schedule is computed by one walk (plan_run) that is run twice: once to
 * count batches and indices, once to write them. Positions in the walk are
 * positions in the epoch's order; `order` maps them to dataset indices. */
#include "data/loader_internal.h"
#include "tensor/support.h"

#include <string.h>

em_status em__dl_resolve(const em_dataloader_opts *opts, em_dataloader_opts *o)
{
    *o = opts ? *opts : (em_dataloader_opts){0};
    if (o->batch_size < 0)
        return em__fail(EM_ERR_INVALID, "dataloader: batch_size must be >= 0 (0 means 1), got %lld",
                        (long long)o->batch_size);
    if (o->batch_size == 0) o->batch_size = 1;
    if (o->num_processes < 0)
        return em__fail(EM_ERR_INVALID, "dataloader: num_processes must be >= 0 (0 means 1), got %d", o->num_processes);
    if (o->num_processes == 0) o->num_processes = 1;
    /* the schedule holds batch_size x processes positions a step: refuse what no memory holds
     * (it wrapped the scratch's size, or looped for ever filling a last batch) */
    if (o->batch_size > ((int64_t)1 << 40) / o->num_processes)
        return em__fail(EM_ERR_INVALID, "dataloader: batch_size %lld across %d process(es) is more than 2^40 samples a "
                        "step", (long long)o->batch_size, o->num_processes);
    if (o->process_index < 0 || o->process_index >= o->num_processes)
        return em__fail(EM_ERR_INVALID, "dataloader: process_index %d is outside [0, %d)", o->process_index,
                        o->num_processes);
    if (o->split_batches && o->batch_size % o->num_processes != 0)
        return em__fail(EM_ERR_INVALID,
                        "dataloader: with split_batches the batch size (%lld) must be a round multiple of the "
                        "number of processes (%d)", (long long)o->batch_size, o->num_processes);
    if ((unsigned)o->even_batches > EM_TOK_OFF)
        return em__fail(EM_ERR_INVALID, "dataloader: even_batches has the unknown value %d", (int)o->even_batches);
    if (o->even_batches == EM_TOK_DEFAULT) o->even_batches = EM_TOK_ON;
    if (o->num_workers < 0)
        return em__fail(EM_ERR_INVALID, "dataloader: num_workers must be >= 0, got %d", o->num_workers);
    if (o->prefetch_factor < 0)
        return em__fail(EM_ERR_INVALID, "dataloader: prefetch_factor must be >= 0 (0 means 2), got %d",
                        o->prefetch_factor);
    if (o->prefetch_factor == 0) o->prefetch_factor = 2;
    if (o->pad_to_multiple_of < 0)
        return em__fail(EM_ERR_INVALID, "dataloader: pad_to_multiple_of must be >= 0, got %lld",
                        (long long)o->pad_to_multiple_of);
    if (o->seed == 0) o->seed = em_get_seed();
    return EM_OK;
}

int64_t em__schedule_max_rows(const em_dataloader_opts *o)
{
    return o->split_batches && o->num_processes > 1 ? o->batch_size / o->num_processes : o->batch_size;
}

/* ---- the walk ----------------------------------------------------------- */
typedef struct plan {
    const int64_t *order;   /* NULL: identity                    */
    int64_t *idx, *off;     /* NULL: count only                  */
    int64_t nb, ni;         /* batches and indices emitted so far */
} plan;

static inline void put(plan *p, int64_t pos)
{
    if (p->idx) p->idx[p->ni] = p->order ? p->order[pos] : pos;
    p->ni++;
}
static inline void put_range(plan *p, int64_t start, int64_t count)
{
    for (int64_t j = 0; j < count; j++) put(p, start + j);
}
static inline void close_batch(plan *p)
{
    p->nb++;
    if (p->off) p->off[p->nb] = p->ni;
}

/* Accelerate's BatchSampler + BatchSamplerShard over positions 0..n-1
 * (accelerate/data_loader.py, _iter_with_split / _iter_with_no_split). */
static void plan_run(int64_t n, const em_dataloader_opts *o, plan *p)
{
    const int64_t bs = o->batch_size, P = o->num_processes, r = o->process_index;
    const bool even = o->even_batches != EM_TOK_OFF;
    const int64_t nfull = n / bs, tail = n % bs;
    const int64_t nb = nfull + (tail && !o->drop_last);   /* batches of the plain batch sampler */
#define BLEN(k) ((k) < nfull ? bs : tail)

    if (P == 1) {   /* Accelerate leaves a single process's loader unsharded */
        for (int64_t k = 0; k < nb; k++) {
            put_range(p, k * bs, BLEN(k));
            close_batch(p);
        }
        return;
    }

    if (o->split_batches) {
        const int64_t bl = bs / P;
        for (int64_t k = 0; k < nfull; k++) {
            put_range(p, k * bs + bl * r, bl);
            close_batch(p);
        }
        if (nb == nfull) return;   /* no incomplete batch (or drop_last) */
        const int64_t last = nfull * bs;
        if (!even) {
            if (tail > bl * r) {
                int64_t end = tail < bl * (r + 1) ? tail : bl * (r + 1);
                put_range(p, last + bl * r, end - bl * r);
                close_batch(p);
            }
            return;
        }
        /* last batch + the first batch repeated (the first batch is the last
         * one itself when there is only one) */
        const int64_t m = BLEN(0);
        for (int64_t j = bl * r; j < bl * (r + 1); j++) put(p, j < tail ? last + j : (j - tail) % m);
        close_batch(p);
        return;
    }

    /* no split: batch k to rank k % P, a round dealt when its last batch is full */
    int64_t pending = -1;
    for (int64_t k = 0; k < nb; k++) {
        if (k % P == r) pending = k;
        if (k % P == P - 1 && BLEN(k) == bs) {
            put_range(p, pending * bs, bs);
            close_batch(p);
            pending = -1;
        }
    }
    if (o->drop_last || n == 0) return;
    if (!even) {
        if (pending >= 0) {
            put_range(p, pending * bs, BLEN(pending));
            close_batch(p);
        }
        return;
    }
    if (pending >= 0 && BLEN(pending) == bs) {
        put_range(p, pending * bs, bs);
        close_batch(p);
    }
    /* Loop back: the initial data is the first P batches, i.e. positions
     * 0..m-1, repeated (doubled until it holds P*bs, which the padding never
     * exceeds), so its j-th element is position j % m. */
    const int64_t m = P * bs < n ? P * bs : n;
    int64_t idx = nb - 1, cur_start = idx * bs, cur_len = BLEN(idx);
    if (cur_len == bs) {   /* the last batch was full: it was dealt already */
        cur_len = 0;
        idx++;
    }
    int64_t cycle = 0;
    while (idx % P != 0 || cur_len > 0) {
        int64_t need = bs - cur_len;
        if (idx % P == r) {
            put_range(p, cur_start, cur_len);
            for (int64_t j = 0; j < need; j++) put(p, (cycle + j) % m);
            close_batch(p);
        }
        cycle += need;
        cur_len = 0;
        idx++;
    }
#undef BLEN
}

int64_t em__schedule_count(int64_t n, const em_dataloader_opts *o)
{
    plan p = {0};
    plan_run(n, o, &p);
    return p.nb;
}

/* The epoch's order: a Philox permutation, documented as em_randperm(n, seed,
 * epoch << 40) so a user can reproduce it. */
static em_status epoch_order(int64_t n, uint64_t seed, int64_t epoch, int64_t **out)
{
    *out = em__malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    if (!*out) return EM_ERR_OOM;
    em_status st = EM_OK;
    em_scope_begin();
    em_tensor *perm = em_randperm(n, seed, (uint64_t)epoch << 40);
    if (!perm) st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
    else if (n) memcpy(*out, em_data_ptr(perm), sizeof(int64_t) * (size_t)n);
    em_scope_end();
    if (st != EM_OK) {
        em__free(*out);
        *out = NULL;
    }
    return st;
}

em_status em_batch_schedule_make(int64_t n, const em_dataloader_opts *opts, int64_t epoch, em_batch_schedule *out)
{
    if (!out) {
        em__misuse("em_batch_schedule_make", "out is NULL");
        return EM_ERR_INVALID;
    }
    *out = (em_batch_schedule){0};
    em_dataloader_opts o;
    em_status st = em__dl_resolve(opts, &o);
    if (st != EM_OK) return st;
    if (n < 0) return em__fail(EM_ERR_INVALID, "batch schedule: dataset length %lld is negative", (long long)n);
    if (epoch < 0) return em__fail(EM_ERR_INVALID, "batch schedule: epoch %lld is negative", (long long)epoch);

    plan p = {0};
    if (o.shuffle && (st = epoch_order(n, o.seed, epoch, (int64_t **)&p.order)) != EM_OK) return st;
    plan count = p;
    plan_run(n, &o, &count);
    p.off = em__malloc(sizeof(int64_t) * (size_t)(count.nb + 1));
    p.idx = em__malloc(sizeof(int64_t) * (size_t)(count.ni ? count.ni : 1));
    if (!p.off || !p.idx) {
        em__free(p.off);
        em__free(p.idx);
        em__free((void *)p.order);
        return EM_ERR_OOM;
    }
    p.off[0] = 0;
    plan_run(n, &o, &p);
    em__free((void *)p.order);
    *out = (em_batch_schedule){ .n_batches = p.nb, .offsets = p.off, .indices = p.idx };
    return EM_OK;
}

void em_batch_schedule_free(em_batch_schedule *s)
{
    if (!s) return;
    em__free(s->offsets);
    em__free(s->indices);
    *s = (em_batch_schedule){0};
}
