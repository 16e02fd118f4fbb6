/* ember — DDP: bucketed gradient all-reduce overlapped with backward
 * (DESIGN.md §3 "distributed"; reference/accelerate-semantics.md §4).
 *
 * Layout. em_ddp_new flattens the model (em_module_flatten): the parameters
 * of one dtype are views of one flat buffer in registration order, and each
 * .grad is a view of a flat gradient buffer with the same layout. A bucket is
 * a set of parameters; its gradients are slices of that gradient buffer, and
 * the bucket is all-reduced IN PLACE there (no copy in, no copy out): the
 * gradients the optimizer reads are the bucket's storage.
 *
 * Construction (collective: every rank calls it):
 *   1. all_gather a signature of every rank's parameters and buffers (names,
 *      dtypes, shapes, requires_grad); any difference is EM_ERR_INVALID with
 *      a message naming the rank and the first differing parameter, the same
 *      message on every rank;
 *   2. broadcast the flat parameter buffers and every buffer from rank 0;
 *   3. assign buckets and register a post-accumulate-grad hook per parameter.
 *
 * Buckets. PyTorch's compute_bucket_assignment_by_size: walk the trainable
 * parameters in an order; per dtype, add each to the open bucket and close it
 * once its bytes reach the limit, which is first_bucket_cap_mb (1 MiB) for a
 * dtype's first bucket and bucket_cap_mb (25 MiB) after. Buckets are numbered
 * in the order of their first parameter in the walk.
 *   - Initially the walk is the REVERSE registration order (backward usually
 *     finishes the last layers first). PyTorch 2.x instead starts with one
 *     giant bucket; we keep the reverse order, because launching strictly in
 *     bucket order (below) keeps every rank consistent even when the guess is
 *     wrong: a wrong guess costs overlap, never correctness.
 *   - Rebuilt once: the hooks record the order in which gradients arrive
 *     during the first synced backward. At the end of that step's
 *     em_ddp_finish_backward, rank 0's order (parameters that never arrived
 *     appended in reverse registration order) is broadcast and the buckets
 *     are reassigned by walking it, so every rank gets the same buckets.
 *   - The flat buffers keep registration order after the rebuild. Parameters,
 *     gradients and the optimizer's state mirror that layout (one fused
 *     optimizer pass, one memset for zero_grad, checkpoints in registration
 *     order); moving them mid-training would invalidate state the optimizer
 *     already built. When a model registers its layers in forward order the
 *     observed order is the reverse registration order (up to the order of
 *     parameters inside a layer), so each bucket is still one contiguous
 *     slice. When it is not, a bucket is made of several contiguous runs of
 *     adjacent parameters, each all-reduced in place by its own call: one
 *     more collective per extra run, still no copy.
 *
 * Overlap. A hook fires right after a parameter's gradient is accumulated
 * (AccumulateGrad runs as soon as it is ready, so early in backward). When the
 * last gradient of a bucket has arrived the bucket is ready; ready buckets are
 * launched STRICTLY IN BUCKET ORDER (a ready bucket waits for every earlier
 * one), each as em_pg_all_reduce_async(AVG) on the communication thread while
 * backward goes on. Because every rank launches the same buckets in the same
 * order, the collectives match across ranks whatever order the gradients
 * arrive in on each rank. em_ddp_finish_backward launches what is left, waits
 * for everything, and the gradients are then the average over ranks (AVG:
 * sum, then divide by the world size, on the communication thread).
 *
 * Parameters that got no gradient this step (unused in this rank's forward:
 * their hook never fired). No global flag is exchanged. Their bucket never
 * becomes ready during backward, so it and every later bucket wait for
 * em_ddp_finish_backward, which on every rank launches all remaining buckets
 * in bucket order. An unused parameter contributes its CURRENT gradient to
 * the average: zeros after a zero_grad (in place, the flat buffer's memset),
 * or what no_sync steps accumulated. If its .grad was dropped (set to NULL by
 * a set_to_none zero_grad) or replaced by a tensor outside the flat buffer,
 * that tensor is copied into the bucket view (NULL: zeros) and .grad points
 * at the view again. After finish_backward every trainable parameter on every
 * rank has a .grad (the averaged view) — zero for a parameter no rank used —
 * so optimizers step the same parameters on every rank and replicas stay
 * identical. (PyTorch leaves globally unused parameters' .grad None instead;
 * with flat storage a zero gradient is what a single process would see too.)
 *
 * no_sync: with em_ddp_set_require_sync(d, false) the hooks return at once:
 * gradients accumulate locally in the flat buffer, nothing is launched, and
 * em_ddp_finish_backward does nothing. The next synced backward reduces the
 * accumulated sums.
 *
 * Threads: hooks and em_ddp_* run on the thread that runs backward; MPI runs
 * on the process group's communication thread. A bucket being reduced and
 * the gradients backward is still accumulating are disjoint slices.
 */
#include "autograd/autograd_internal.h"
#include "distributed/ddp/ddp_internal.h"
#include "tensor/support.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct ddp_param {
    struct ddp_slot { em_ddp *d; int idx; } slot;   /* the hook's user pointer */
    em_tensor *t;        /* retained */
    em_tensor *gview;    /* retained: this parameter's view of the flat gradient buffer */
    char *name;
    em_dtype dtype;
    int64_t offset, numel;   /* in the flat buffer of its dtype, in elements */
    bool trainable;      /* requires grad: in a bucket, hooked */
    bool hooked;
    int bucket;
    bool ready;          /* gradient arrived (or accounted for) this step */
} ddp_param;

typedef struct ddp_run {
    int64_t offset, numel;
    em_tensor *view;     /* retained 1-d slice of the flat gradient buffer */
    em_work *work;       /* in flight, or NULL */
} ddp_run;

typedef struct ddp_bucket {
    em_dtype dtype;
    int n_params, *params;
    int n_runs;
    ddp_run *runs;
    int64_t numel;
    int pending;         /* gradients still to arrive this step */
    bool launched;
    double ready_ms, start_ms, end_ms;
} ddp_bucket;

struct em_ddp {
    em_module *model;
    em_process_group *pg;
    double first_cap_bytes, cap_bytes;
    int n_params, n_train;
    ddp_param *params;
    em_tensor *flat_grads[EM_NUM_DTYPES];   /* retained */
    int n_buckets;
    ddp_bucket *buckets;
    int next_launch;     /* buckets [0, next_launch) are launched */
    bool require_sync;
    bool in_step;        /* a hook fired since the last finish_backward */
    bool t0_marked;
    double t0;
    bool rebuilt;
    bool sync_buffers;   /* torch's broadcast_buffers: em_ddp_sync_buffers broadcasts */
    int n_buffers;       /* at construction; 0 makes em_ddp_sync_buffers free */
    int *observed, n_observed;   /* arrival order of the first synced backward */
    em_status err;       /* first launch failure of this step */
    char errmsg[512];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* ==== 1. every rank holds the same model ============================================== */

enum { SIG_COLS = 5 + EM_MAX_DIMS };   /* kind, dtype, ndim, requires_grad, numel, shape[8] */
enum { SIG_HEADER = 0, SIG_PARAM = 1, SIG_BUFFER = 2 };

static void sig_row(int64_t *row, int kind, const em_tensor *t)
{
    memset(row, 0, sizeof(int64_t) * SIG_COLS);
    row[0] = kind;
    row[1] = t->dtype;
    row[2] = t->ndim;
    row[3] = em_requires_grad(t);
    row[4] = em_numel(t);
    for (int k = 0; k < t->ndim; k++) row[5 + k] = t->shape[k];
}

/* "\"fc1.bias\" f32[16]" */
static const char *sig_str(const int64_t *row, const char *name, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "\"%s\" %s%s%s", name, em_dtype_name((em_dtype)row[1]),
                     em__dims_str((int)row[2], row + 5), row[0] == SIG_PARAM && !row[3] ? " (frozen)" : "");
    (void)n;
    return buf;
}

/* One rank's part of the gathered signature. */
typedef struct sig_view {
    const int64_t *rows;     /* header row, then params, then buffers */
    int n_params, n_buffers;
    int64_t numel;
    const char **names;      /* n_params + n_buffers, into the gathered blob */
} sig_view;

/* Compares every rank with rank 0; writes the first difference into msg. */
static bool sig_compare(const sig_view *v, int world, char *msg, size_t cap)
{
    char a[256], b[256];
    for (int q = 1; q < world; q++) {
        const sig_view *x = &v[q], *r = &v[0];
        for (int kind = SIG_PARAM; kind <= SIG_BUFFER; kind++) {
            int nx = kind == SIG_PARAM ? x->n_params : x->n_buffers;
            int nr = kind == SIG_PARAM ? r->n_params : r->n_buffers;
            int bx = kind == SIG_PARAM ? 0 : x->n_params, br = kind == SIG_PARAM ? 0 : r->n_params;
            const char *what = kind == SIG_PARAM ? "parameter" : "buffer";
            char count[256] = "";
            if (nx != nr)
                snprintf(count, sizeof count, "rank %d has %d %ss (%lld parameter elements) but rank 0 has %d "
                         "(%lld); ", q, nx, what, (long long)x->numel, nr, (long long)r->numel);
            for (int i = 0; i < (nx < nr ? nx : nr); i++) {
                const int64_t *rx = x->rows + SIG_COLS * (1 + bx + i), *rr = r->rows + SIG_COLS * (1 + br + i);
                const char *sx = x->names[bx + i], *sr = r->names[br + i];
                if (strcmp(sx, sr) || memcmp(rx, rr, sizeof(int64_t) * SIG_COLS)) {
                    snprintf(msg, cap, "%sthe first difference is %s %d: %s on rank %d, %s on rank 0", count, what, i,
                             sig_str(rx, sx, a, sizeof a), q, sig_str(rr, sr, b, sizeof b));
                    return false;
                }
            }
            if (nx > nr) {
                const int64_t *rx = x->rows + SIG_COLS * (1 + bx + nr);
                snprintf(msg, cap, "%sthe first extra %s on rank %d is %s", count, what, q,
                         sig_str(rx, x->names[bx + nr], a, sizeof a));
                return false;
            }
            if (nx < nr) {
                const int64_t *rr = r->rows + SIG_COLS * (1 + br + nx);
                snprintf(msg, cap, "%srank %d lacks rank 0's %s %s", count, q, what,
                         sig_str(rr, r->names[br + nx], b, sizeof b));
                return false;
            }
        }
    }
    return true;
}

/* Gathers every rank's signature and compares it with rank 0's. Collective;
 * every rank reaches the same verdict and message. */
static em_status verify_same_model(em_process_group *pg, const em_named_tensors *ps, const em_named_tensors *bs)
{
    int world = em_pg_world_size(pg);
    int64_t rows = 1 + ps->n + bs->n, nchars = 0, numel = 0;
    for (int i = 0; i < ps->n; i++) nchars += (int64_t)strlen(ps->items[i].name) + 1, numel += em_numel(ps->items[i].tensor);
    for (int i = 0; i < bs->n; i++) nchars += (int64_t)strlen(bs->items[i].name) + 1;
    em_status st = EM_OK;
    char msg[1024] = "";
    sig_view *v = NULL;
    em_scope_begin();
    em_tensor *sig = em_zeros(2, (int64_t[]){rows, SIG_COLS}, EM_I64, EM_CPU);
    em_tensor *names = em_zeros(1, (int64_t[]){nchars}, EM_I32, EM_CPU);
    em_tensor *all_sig = NULL, *all_names = NULL;
    if (!sig || !names) st = EM_ERR_OOM;
    if (st == EM_OK) {
        int64_t *s = em_data_ptr(sig);
        int32_t *c = em_data_ptr(names);
        s[0] = SIG_HEADER, s[1] = ps->n, s[2] = bs->n, s[3] = numel;
        for (int i = 0; i < ps->n + bs->n; i++) {
            bool p = i < ps->n;
            const em_named_tensor *nt = p ? &ps->items[i] : &bs->items[i - ps->n];
            sig_row(s + SIG_COLS * (1 + i), p ? SIG_PARAM : SIG_BUFFER, nt->tensor);
            for (const char *ch = nt->name;; ch++) {
                *c++ = (unsigned char)*ch;
                if (!*ch) break;
            }
        }
        st = em_pg_all_gather(pg, sig, &all_sig);
        if (st == EM_OK) st = em_pg_all_gather(pg, names, &all_names);
    }
    const char **name_ptrs = NULL;
    char *blob = NULL;
    if (st == EM_OK) {
        /* split the gathered rows and names per rank */
        int64_t total_rows = all_sig->shape[0], total_chars = all_names->shape[0];
        const int64_t *s = em_data_ptr(all_sig);
        const int32_t *c = em_data_ptr(all_names);
        v = em__calloc((size_t)world, sizeof *v);
        name_ptrs = em__calloc((size_t)(total_rows > 0 ? total_rows : 1), sizeof *name_ptrs);
        blob = em__malloc((size_t)total_chars + 1);
        if (!v || !name_ptrs || !blob) st = EM_ERR_OOM;
        for (int64_t k = 0; st == EM_OK && k < total_chars; k++) blob[k] = (char)c[k];
        int64_t row = 0, ch = 0, np = 0;
        for (int q = 0; st == EM_OK && q < world; q++) {
            const int64_t *h = s + SIG_COLS * row;
            v[q] = (sig_view){.rows = h, .n_params = (int)h[1], .n_buffers = (int)h[2], .numel = h[3],
                              .names = name_ptrs + np};
            int64_t n = h[1] + h[2];
            if (h[0] != SIG_HEADER || row + 1 + n > total_rows) {
                st = em__fail(EM_ERR_COMM, "em_ddp_new: the gathered model signatures are malformed");
                break;
            }
            for (int64_t i = 0; i < n; i++) {
                name_ptrs[np++] = blob + ch;
                while (ch < total_chars && blob[ch]) ch++;
                ch++;
            }
            row += 1 + n;
        }
        if (st == EM_OK && !sig_compare(v, world, msg, sizeof msg))
            st = EM_ERR_INVALID;
    } else if (st != EM_OK && em_last_status() != EM_OK) {
        snprintf(msg, sizeof msg, "%s", em_last_error());
    }
    em__free(v);
    em__free(name_ptrs);
    em__free(blob);
    em_scope_end();
    if (st == EM_ERR_INVALID)
        return em__fail(st, "em_ddp_new: DDP needs the same model on every rank: %s", msg);
    if (st != EM_OK)
        return em__fail(st, "em_ddp_new: checking the model across ranks failed: %s", msg);
    return EM_OK;
}

/* ==== 2. rank 0's values everywhere ==================================================== */

/* Every buffer from rank 0 (a strided one through a contiguous copy). */
static em_status broadcast_buffer_list(em_process_group *pg, const em_named_tensors *bs)
{
    em_status st = EM_OK;
    for (int i = 0; i < bs->n && st == EM_OK; i++) {
        em_tensor *b = bs->items[i].tensor;
        if (em_is_contiguous(b)) {
            st = em_pg_broadcast(pg, b, 0);
            continue;
        }
        em_scope_begin();
        em_tensor *c = em_contiguous(b);
        st = c ? em_pg_broadcast(pg, c, 0) : EM_ERR_OOM;
        if (st == EM_OK) EM_NO_GRAD { if (!em_copy_(b, c)) st = EM_ERR_OOM; }
        em_scope_end();
    }
    return st;
}

static em_status broadcast_states(em_process_group *pg, em_module *m, const em_named_tensors *bs)
{
    em_status st = EM_OK;
    for (int dt = 0; dt < EM_NUM_DTYPES && st == EM_OK; dt++)
        if (m->flat_params[dt]) st = em_pg_broadcast(pg, m->flat_params[dt], 0);
    if (st == EM_OK) st = broadcast_buffer_list(pg, bs);
    if (st != EM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", em_last_error());
        return em__fail(st, "em_ddp_new: broadcasting the parameters from rank 0 failed: %s", msg);
    }
    return EM_OK;
}

/* ==== 3. buckets ======================================================================== */

static void free_buckets(em_ddp *d)
{
    for (int b = 0; b < d->n_buckets; b++) {
        for (int r = 0; r < d->buckets[b].n_runs; r++) em_release(d->buckets[b].runs[r].view);
        em__free(d->buckets[b].runs);
        em__free(d->buckets[b].params);
    }
    em__free(d->buckets);
    d->buckets = NULL;
    d->n_buckets = 0;
}

static int cmp_offset_ctx_sort(const void *a, const void *b, void *ctx)
{
    const ddp_param *p = ctx;
    int64_t x = p[*(const int *)a].offset, y = p[*(const int *)b].offset;
    return (x > y) - (x < y);
}

/* Walks order (every trainable parameter once) and replaces the buckets. On
 * failure (OOM) the old buckets stay. */
static em_status assign_buckets(em_ddp *d, const int *order, int n)
{
    int *bucket_of = em__calloc((size_t)d->n_params + 1, sizeof *bucket_of);
    int open[EM_NUM_DTYPES], nb = 0;
    bool first[EM_NUM_DTYPES];
    double bytes[EM_NUM_DTYPES] = {0};
    if (!bucket_of) return EM_ERR_OOM;
    for (int k = 0; k < EM_NUM_DTYPES; k++) open[k] = -1, first[k] = true;
    for (int pos = 0; pos < n; pos++) {
        const ddp_param *p = &d->params[order[pos]];
        int dt = p->dtype;
        if (open[dt] < 0) open[dt] = nb++, bytes[dt] = 0;
        bucket_of[order[pos]] = open[dt];
        bytes[dt] += (double)p->numel * (double)em_dtype_size(p->dtype);
        if (bytes[dt] >= (first[dt] ? d->first_cap_bytes : d->cap_bytes)) open[dt] = -1, first[dt] = false;
    }
    ddp_bucket *bk = em__calloc((size_t)(nb ? nb : 1), sizeof *bk);
    em_status st = bk ? EM_OK : EM_ERR_OOM;
    for (int pos = 0; pos < n && st == EM_OK; pos++) bk[bucket_of[order[pos]]].n_params++;
    for (int b = 0; b < nb && st == EM_OK; b++) {
        bk[b].params = em__malloc(sizeof(int) * (size_t)bk[b].n_params);
        if (!bk[b].params) st = EM_ERR_OOM;
        bk[b].n_params = 0;
    }
    for (int pos = 0; pos < n && st == EM_OK; pos++) {
        ddp_bucket *B = &bk[bucket_of[order[pos]]];
        B->params[B->n_params++] = order[pos];
        B->dtype = d->params[order[pos]].dtype;
    }
    /* runs: the bucket's parameters by offset, adjacent ones merged */
    em_scope_begin();
    for (int b = 0; b < nb && st == EM_OK; b++) {
        ddp_bucket *B = &bk[b];
        int *sorted = em__malloc(sizeof(int) * (size_t)B->n_params);
        B->runs = em__calloc((size_t)B->n_params, sizeof *B->runs);
        if (!sorted || !B->runs) {
            em__free(sorted);
            st = EM_ERR_OOM;
            break;
        }
        memcpy(sorted, B->params, sizeof(int) * (size_t)B->n_params);
        qsort_r(sorted, (size_t)B->n_params, sizeof *sorted, cmp_offset_ctx_sort, d->params);
        for (int k = 0; k < B->n_params; k++) {
            const ddp_param *p = &d->params[sorted[k]];
            ddp_run *last = B->n_runs ? &B->runs[B->n_runs - 1] : NULL;
            if (last && last->offset + last->numel == p->offset) last->numel += p->numel;
            else B->runs[B->n_runs++] = (ddp_run){.offset = p->offset, .numel = p->numel};
            B->numel += p->numel;
        }
        em__free(sorted);
        for (int r = 0; r < B->n_runs && st == EM_OK; r++) {
            em_tensor *v = em_narrow(d->flat_grads[B->dtype], 0, B->runs[r].offset, B->runs[r].numel);
            if (v) B->runs[r].view = em_retain(v);
            else st = EM_ERR_OOM;
        }
        B->pending = B->n_params;
    }
    em_scope_end();
    em__free(bucket_of);
    if (st != EM_OK) {
        for (int b = 0; bk && b < nb; b++) {
            for (int r = 0; r < bk[b].n_runs; r++) em_release(bk[b].runs[r].view);
            em__free(bk[b].runs);
            em__free(bk[b].params);
        }
        em__free(bk);
        return em__fail(EM_ERR_OOM, "em_ddp: out of memory assigning %d buckets", nb);
    }
    free_buckets(d);
    d->buckets = bk;
    d->n_buckets = nb;
    for (int b = 0; b < nb; b++)
        for (int k = 0; k < bk[b].n_params; k++) d->params[bk[b].params[k]].bucket = b;
    return EM_OK;
}

/* ==== 4. the hook and the launches ======================================================== */

static void set_error(em_ddp *d, em_status s, const char *what)
{
    if (d->err != EM_OK) return;
    d->err = s;
    snprintf(d->errmsg, sizeof d->errmsg, "%s: %s", what, em_last_error());
}

static void launch(em_ddp *d, int b, double now)
{
    ddp_bucket *B = &d->buckets[b];
    B->start_ms = now - d->t0;
    B->launched = true;
    for (int r = 0; r < B->n_runs; r++) {
        B->runs[r].work = em_pg_all_reduce_async(d->pg, B->runs[r].view, EM_RED_AVG);
        if (!B->runs[r].work) set_error(d, em_last_status() != EM_OK ? em_last_status() : EM_ERR_COMM, "launching a bucket");
    }
}

/* Launches the ready buckets that follow the last launched one, in order. */
static void launch_ready(em_ddp *d)
{
    double now = now_ms();
    while (d->next_launch < d->n_buckets && d->buckets[d->next_launch].pending == 0) launch(d, d->next_launch++, now);
}

static void begin_step(em_ddp *d, double now)
{
    if (d->in_step) return;
    d->in_step = true;
    if (!d->t0_marked) d->t0 = now;
}

/* Makes p's .grad the bucket view again, carrying over what the current
 * .grad holds (NULL: zeros). */
static void repoint_grad(ddp_param *p)
{
    em_tensor *g = em_grad(p->t);
    if (g == p->gview) return;
    em_scope_begin();
    EM_NO_GRAD {
        if (g) em_copy_(p->gview, g);
        else em_fill_(p->gview, 0.0);
    }
    em_scope_end();
    em_set_grad(p->t, p->gview);
}

static void mark_ready(em_ddp *d, int i, double now)
{
    ddp_param *p = &d->params[i];
    p->ready = true;
    ddp_bucket *B = &d->buckets[p->bucket];
    if (--B->pending == 0) B->ready_ms = now - d->t0;
}

static void on_grad_ready(em_tensor *leaf, void *user)
{
    struct ddp_slot *s = user;
    em_ddp *d = s->d;
    if (!d->require_sync) return;   /* no_sync: accumulate locally */
    double now = now_ms();
    begin_step(d, now);
    ddp_param *p = &d->params[s->idx];
    if (p->ready) {
        em__misuse("em_ddp", "parameter \"%s\" received a gradient twice in one synced step: call "
                   "em_ddp_finish_backward after each em_backward (did you forget it after the previous one?), "
                   "or run the earlier backwards under em_ddp_set_require_sync(d, false)", p->name);
        return;
    }
    repoint_grad(p);
    (void)leaf;
    if (!d->rebuilt) d->observed[d->n_observed++] = s->idx;
    mark_ready(d, s->idx, now);
    launch_ready(d);
}

static void unhook(ddp_param *p)
{
    if (p->hooked) em_remove_post_accumulate_grad_hook(p->t, on_grad_ready, &p->slot);
    p->hooked = false;
}

/* ==== 5. the rebuild ======================================================================= */

static em_status rebuild(em_ddp *d)
{
    int n = d->n_train;
    int *order = em__malloc(sizeof(int) * (size_t)(n ? n : 1));
    bool *seen = em__calloc((size_t)d->n_params + 1, sizeof *seen);
    em_status st = order && seen ? EM_OK : EM_ERR_OOM;
    em_scope_begin();
    em_tensor *t = st == EM_OK ? em_empty(1, (int64_t[]){n}, EM_I64, EM_CPU) : NULL;
    if (st == EM_OK && !t) st = EM_ERR_OOM;
    if (st == EM_OK) {
        int64_t *o = em_data_ptr(t), k = 0;
        for (int j = 0; j < d->n_observed; j++) o[k++] = d->observed[j], seen[d->observed[j]] = true;
        for (int i = d->n_params - 1; i >= 0; i--)
            if (d->params[i].trainable && !seen[i]) o[k++] = i;
        st = em_pg_broadcast(d->pg, t, 0);
        /* rank 0's order: a permutation of the trainable parameters (the models agree) */
        memset(seen, 0, sizeof *seen * (size_t)d->n_params);
        for (int j = 0; st == EM_OK && j < n; j++) {
            int64_t i = o[j];
            if (i < 0 || i >= d->n_params || !d->params[i].trainable || seen[i])
                st = em__fail(EM_ERR_COMM, "em_ddp_finish_backward: rank 0's gradient order is malformed");
            else
                seen[i] = true, order[j] = (int)i;
        }
    }
    em_scope_end();
    if (st == EM_OK) st = assign_buckets(d, order, n);
    em__free(order);
    em__free(seen);
    if (st == EM_OK) d->rebuilt = true;
    return st;
}

/* ==== the public API ========================================================================= */

em_status em_ddp_new(em_module *model, em_process_group *pg, const em_ddp_opts *opts, em_ddp **out)
{
    static const char op[] = "em_ddp_new";
    if (!out) {
        em__misuse(op, "out is NULL");
        return EM_ERR_INVALID;
    }
    *out = NULL;
    if (!model || !pg) {
        em__misuse(op, "%s is NULL", !model ? "model" : "process group");
        return EM_ERR_INVALID;
    }
    em_ddp_opts o = opts ? *opts : (em_ddp_opts){0};
    if (o.bucket_cap_mb < 0 || o.first_bucket_cap_mb < 0) {
        em__misuse(op, "bucket caps must be positive (bucket_cap_mb %g, first_bucket_cap_mb %g)", o.bucket_cap_mb,
                   o.first_bucket_cap_mb);
        return EM_ERR_INVALID;
    }
    em_status st = em_module_flatten(model);
    if (st != EM_OK) return st;
    em_named_tensors ps = em_module_named_parameters(model), bs = em_module_named_buffers(model, true);
    st = verify_same_model(pg, &ps, &bs);
    if (st == EM_OK) st = broadcast_states(pg, model, &bs);
    em_ddp *d = NULL;
    if (st == EM_OK) {
        d = em__calloc(1, sizeof *d);
        if (d) {
            d->params = em__calloc((size_t)(ps.n ? ps.n : 1), sizeof *d->params);
            d->observed = em__malloc(sizeof(int) * (size_t)(ps.n ? ps.n : 1));
        }
        if (!d || !d->params || !d->observed) st = em__fail(EM_ERR_OOM, "%s: out of memory", op);
    }
    if (st == EM_OK) {
        d->model = model;
        d->pg = pg;
        d->require_sync = true;
        d->sync_buffers = !o.keep_local_buffers;
        d->n_buffers = bs.n;
        d->first_cap_bytes = (o.first_bucket_cap_mb > 0 ? o.first_bucket_cap_mb : 1.0) * 1048576.0;
        d->cap_bytes = (o.bucket_cap_mb > 0 ? o.bucket_cap_mb : 25.0) * 1048576.0;
        for (int dt = 0; dt < EM_NUM_DTYPES; dt++) d->flat_grads[dt] = em_retain(model->flat_grads[dt]);
    }
    /* the parameter table: offsets in the flat buffers, gradient views */
    for (int i = 0; st == EM_OK && i < ps.n; i++) {
        em_tensor *t = ps.items[i].tensor;
        ddp_param *p = &d->params[i];
        em_tensor *fp = model->flat_params[t->dtype], *fg = model->flat_grads[t->dtype];
        p->slot = (struct ddp_slot){d, i};
        p->t = em_retain(t);
        p->name = strdup(ps.items[i].name);
        p->dtype = t->dtype;
        p->numel = em_numel(t);
        p->trainable = em_requires_grad(t);
        d->n_params++;
        if (!p->name) {
            st = em__fail(EM_ERR_OOM, "%s: out of memory", op);
            break;
        }
        if (!fp || !fg || t->storage != fp->storage || !em_is_contiguous(t)) {
            st = em__fail(EM_ERR_INVALID, "%s: parameter \"%s\" is not a view of the model's flat parameter buffer "
                          "(was it replaced or moved after em_module_flatten?)", op, p->name);
            break;
        }
        p->offset = t->offset - fp->offset;
        if (!p->trainable) continue;
        em_tensor *g = em_grad(t);
        if (g && g->storage == fg->storage && g->offset == fg->offset + p->offset && em_is_contiguous(g) &&
            em_numel(g) == p->numel) {
            p->gview = em_retain(g);
        } else {
            em_scope_begin();
            em_tensor *v = em_view(em_narrow(fg, 0, p->offset, p->numel), t->ndim, t->shape);
            if (v) p->gview = em_retain(v);
            em_scope_end();
            if (!p->gview) {
                st = em__fail(EM_ERR_OOM, "%s: out of memory", op);
                break;
            }
            repoint_grad(p);
        }
        d->n_train++;
    }
    /* initial buckets: reverse registration order */
    if (st == EM_OK) {
        int *order = em__malloc(sizeof(int) * (size_t)(d->n_train ? d->n_train : 1)), k = 0;
        if (!order) st = em__fail(EM_ERR_OOM, "%s: out of memory", op);
        for (int i = d->n_params - 1; order && i >= 0; i--)
            if (d->params[i].trainable) order[k++] = i;
        if (st == EM_OK) st = assign_buckets(d, order, k);
        em__free(order);
    }
    for (int i = 0; st == EM_OK && i < d->n_params; i++) {
        ddp_param *p = &d->params[i];
        if (!p->trainable) continue;
        em_register_post_accumulate_grad_hook(p->t, on_grad_ready, &p->slot);
        p->hooked = true;
    }
    em_named_tensors_free(&ps);
    em_named_tensors_free(&bs);
    if (st != EM_OK) {
        em_ddp_free(d);
        return st;
    }
    *out = d;
    return EM_OK;
}

void em_ddp_free(em_ddp *d)
{
    if (!d) return;
    for (int b = 0; b < d->n_buckets; b++)   /* the comm thread must be done with our slices */
        for (int r = 0; r < d->buckets[b].n_runs; r++)
            if (d->buckets[b].runs[r].work) em_work_wait(d->buckets[b].runs[r].work);
    for (int i = 0; i < d->n_params; i++) {
        ddp_param *p = &d->params[i];
        unhook(p);
        em_release(p->gview);
        em_release(p->t);
        free(p->name);
    }
    free_buckets(d);
    for (int dt = 0; dt < EM_NUM_DTYPES; dt++) em_release(d->flat_grads[dt]);
    em__free(d->params);
    em__free(d->observed);
    em__free(d);
}

void em_ddp_set_require_sync(em_ddp *d, bool sync)
{
    if (!d) {
        em__misuse("em_ddp_set_require_sync", "DDP is NULL");
        return;
    }
    if (d->in_step && sync != d->require_sync) {
        em__misuse("em_ddp_set_require_sync", "called between a synced em_backward and em_ddp_finish_backward: "
                   "finish the step first (no_sync must wrap whole forward+backward passes)");
        return;
    }
    d->require_sync = sync;
}

em_status em_ddp_finish_backward(em_ddp *d)
{
    if (!d) {
        em__misuse("em_ddp_finish_backward", "DDP is NULL");
        return EM_ERR_INVALID;
    }
    if (!d->require_sync) return EM_OK;   /* no_sync: gradients stay local */
    double now = now_ms();
    begin_step(d, now);
    /* parameters whose gradient never arrived contribute their current .grad */
    for (int i = 0; i < d->n_params; i++) {
        ddp_param *p = &d->params[i];
        if (!p->trainable || p->ready) continue;
        repoint_grad(p);
        mark_ready(d, i, now);
    }
    launch_ready(d);
    em_status st = d->err;
    char msg[600];
    snprintf(msg, sizeof msg, "%s", d->errmsg);
    for (int b = 0; b < d->n_buckets; b++) {
        ddp_bucket *B = &d->buckets[b];
        for (int r = 0; r < B->n_runs; r++) {
            if (!B->runs[r].work) continue;
            em_status s = em_work_wait(B->runs[r].work);
            B->runs[r].work = NULL;
            if (s != EM_OK && st == EM_OK) {
                st = s;
                snprintf(msg, sizeof msg, "bucket %d (%lld elements): %s", b, (long long)B->numel, em_last_error());
            }
        }
        B->end_ms = now_ms() - d->t0;
        B->pending = B->n_params;
        B->launched = false;
    }
    for (int i = 0; i < d->n_params; i++) d->params[i].ready = false;
    d->next_launch = 0;
    d->in_step = false;
    d->t0_marked = false;
    d->err = EM_OK;
    d->errmsg[0] = 0;
    if (st != EM_OK) return em__fail(st, "em_ddp_finish_backward: %s", msg);
    if (!d->rebuilt) {
        st = rebuild(d);
        if (st != EM_OK) {
            snprintf(msg, sizeof msg, "%s", em_last_error());
            return em__fail(st, "em_ddp_finish_backward: rebuilding the buckets: %s", msg);
        }
    }
    return EM_OK;
}

int em_ddp_buckets(const em_ddp *d, em_ddp_bucket_info *out, int cap)
{
    if (!d) return 0;
    for (int b = 0; b < d->n_buckets && b < cap && out; b++) {
        const ddp_bucket *B = &d->buckets[b];
        /* offset: the bucket's first slice (its only one unless a rebuild grouped non-adjacent parameters) */
        out[b] = (em_ddp_bucket_info){.index = b, .n_params = B->n_params, .offset = B->n_runs ? B->runs[0].offset : 0,
                                      .numel = B->numel, .ready_ms = B->ready_ms, .start_ms = B->start_ms,
                                      .end_ms = B->end_ms};
    }
    return d->n_buckets;
}

/* ---- internal ---- */
em_status em_ddp_sync_buffers(em_ddp *d)
{
    if (!d) {
        em__misuse("em_ddp_sync_buffers", "DDP is NULL");
        return EM_ERR_INVALID;
    }
    if (!d->sync_buffers || d->n_buffers == 0 || em_pg_world_size(d->pg) == 1) return EM_OK;
    em_named_tensors bs = em_module_named_buffers(d->model, true);
    em_status st = broadcast_buffer_list(d->pg, &bs);
    em_named_tensors_free(&bs);
    if (st != EM_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", em_last_error());
        return em__fail(st, "em_ddp_sync_buffers: broadcasting the buffers from rank 0 failed: %s", msg);
    }
    return EM_OK;
}

void em__ddp_mark_backward_begin(em_ddp *d)
{
    d->t0 = now_ms();
    d->t0_marked = true;
}
bool em__ddp_require_sync(const em_ddp *d) { return d->require_sync; }
bool em__ddp_rebuilt(const em_ddp *d) { return d->rebuilt; }
int em__ddp_bucket_runs(const em_ddp *d, int b) { return b >= 0 && b < d->n_buckets ? d->buckets[b].n_runs : 0; }
em_module *em__ddp_module(const em_ddp *d) { return d->model; }
