/* ember — autocast regions, the op policy and the weight cast cache
 * (amp.h "Autocast"; reference §5.2).
 *
 * tensor/ knows nothing of amp: its op front-ends call em__autocast_hook on
 * each floating input when the hook is set (tensor/hooks.h). The first
 * region installs the hook; from then on it returns its input unchanged
 * unless this thread is inside an enabled region and the op's policy asks
 * for another dtype.
 */
#include "amp/amp.h"
#include "tensor/construct.h"
#include "tensor/hooks.h"
#include "tensor/support.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the policy table ------------------------------------------------------------ */
typedef enum { KEEP = 0, LOW, F32 } policy;

static const uint8_t op_policy[EM_NUM_OPS] = {
    /* matmul-class: the region's low dtype (attention goes through matmul; linear's
     * bias is cast too, as torch's, so its output is low as well) */
    [EM_OP_MATMUL] = LOW, [EM_OP_LINEAR] = LOW,
    /* numerically touchy: f32 */
    [EM_OP_SOFTMAX] = F32, [EM_OP_LOG_SOFTMAX] = F32, [EM_OP_LAYER_NORM] = F32,
    [EM_OP_CROSS_ENTROPY] = F32,
    [EM_OP_SUM] = F32, [EM_OP_MEAN] = F32, [EM_OP_VAR] = F32, [EM_OP_LOGSUMEXP] = F32, [EM_OP_NORM] = F32,
    [EM_OP_EXP] = F32, [EM_OP_LOG] = F32, [EM_OP_POW] = F32, [EM_OP_RSQRT] = F32,
    /* everything else (elementwise, gelu, dropout, embedding, max/min, indexing,
     * the backward kernels): KEEP, the dtype it is given */
};

/* ---- per-thread state ---------------------------------------------------------------- */
#define MAX_DEPTH 64

/* One cached cast. The entry holds a reference to its source, so the source's
 * address and storage cannot be reused while the entry lives. */
typedef struct entry {
    em_tensor *src, *cast;   /* owned references */
    em_storage *storage;
    uint32_t version;
    int64_t offset;
    int ndim;
    int64_t shape[EM_MAX_DIMS], stride[EM_MAX_DIMS];
    bool has_ag;             /* the source carries autograd metadata */
    bool no_grad;            /* made with grad mode off from such a source: the cast has no history */
    em_dtype dtype;          /* of the cast */
} entry;

typedef struct state {
    int depth;
    em_dtype dtypes[MAX_DEPTH];   /* per open region; EM_F32 = disabled */
    entry *cache;
    int64_t n, cap, sweep_at;
    em_tensor **owned;            /* casts made outside any scope */
    int64_t n_owned, cap_owned;
    int64_t casts, hits;
    int64_t regions;              /* bf16/f16 regions opened, ever */
} state;

static _Thread_local state st;

static bool enabled(void) { return st.depth > 0 && st.dtypes[st.depth - 1] != EM_F32; }

bool em_autocast_enabled(void) { return enabled(); }
em_dtype em_autocast_dtype(void) { return st.depth ? st.dtypes[st.depth - 1] : EM_F32; }
int em_autocast_depth(void) { return st.depth; }

em_autocast_stats em_autocast_stats_get(void)
{
    return (em_autocast_stats){.casts = st.casts, .cache_hits = st.hits, .cached = st.n, .regions = st.regions};
}

void em_autocast_stats_reset(void) { st.casts = st.hits = 0; }

/* ---- the cache ----------------------------------------------------------------------- */
static void entry_drop(entry *e)
{
    em_release(e->cast);
    em_release(e->src);
}

static bool grad_mode(void) { return em__grad_mode_hook && em__grad_mode_hook(); }

/* A source with history cast with grad mode off gives a cast without history:
 * serving it in grad mode would cut the gradient, serving a grad-mode cast with
 * grad mode off would record history under no_grad. So such entries also match
 * on the mode (torch's cache matches on neither: a cast cached under no_grad
 * comes back without history once grad mode is on again). */
static bool same_place(const entry *e, const em_tensor *t, em_dtype dt)
{
    if (e->storage != t->storage || e->offset != t->offset || e->ndim != t->ndim || e->dtype != dt ||
        e->has_ag != (t->ag != NULL) || (t->ag && e->no_grad == grad_mode()))
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (e->shape[d] != t->shape[d] || e->stride[d] != t->stride[d]) return false;
    return true;
}

/* Drops entries whose source and its storage only the cache still holds: no
 * one can pass that data again, and its memory should go when its owner lets
 * it go. A dead view of a live weight (x W^T by em_matmul passes a fresh transpose
 * of its weight each call) stays: the next view of that weight, with the same
 * geometry, reuses its cast. */
static void sweep(void)
{
    int64_t w = 0;
    for (int64_t i = 0; i < st.n; i++) {
        if (st.cache[i].src->refcount <= 1 && st.cache[i].src->storage->refcount <= 1) entry_drop(&st.cache[i]);
        else st.cache[w++] = st.cache[i];
    }
    st.n = w;
    st.sweep_at = 2 * st.n > 32 ? 2 * st.n : 32;
}

static void cache_clear(void)
{
    for (int64_t i = 0; i < st.n; i++) entry_drop(&st.cache[i]);
    st.n = 0;
    free(st.cache);
    st.cache = NULL;
    st.cap = st.sweep_at = 0;
}

/* Gives the region the one reference to c that the caller holds, outside any
 * scope (inside one, the scope owns it). NULL (c released) on OOM. Bookkeeping
 * uses the system allocator, as scope.c does. */
static em_tensor *region_own(em_tensor *c)
{
    if (em_scope_depth() > 0) return em__scope_adopt(c);
    if (st.n_owned == st.cap_owned) {
        int64_t cap = st.cap_owned ? 2 * st.cap_owned : 64;
        em_tensor **m = realloc(st.owned, sizeof *m * (size_t)cap);
        if (!m) {
            em_release(c);
            em__fail(EM_ERR_OOM, "out of memory recording an autocast cast");
            return NULL;
        }
        st.owned = m, st.cap_owned = cap;
    }
    st.owned[st.n_owned++] = c;
    return c;
}

/* em_to_dtype(t, dt) in t's memory order: a transposed or permuted view of a
 * dense block (x W^T by em_matmul passes its weight transposed; attention permutes
 * its heads) is cast as that block, a contiguous vectorized conversion, and
 * viewed back, instead of being gathered element by element (about 40x
 * slower for a transposed [3072,768] weight). The views are recorded ops, so
 * gradients flow as through em_to_dtype, and the cast's gradient arrives in
 * the block's order too. Results belong to the current scope. */
static em_tensor *to_dtype_memory_order(em_tensor *t, em_dtype dt)
{
    if (t->ndim < 2 || em_is_contiguous(t)) return em_to_dtype(t, dt);
    int perm[EM_MAX_DIMS], inv[EM_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {   /* dims by stride, outermost first (insertion sort: stable) */
        int d = i, j = i;
        while (j > 0 && t->stride[perm[j - 1]] < t->stride[d]) perm[j] = perm[j - 1], j--;
        perm[j] = d;
    }
    em_tensor *block = em_permute(t, perm);
    if (!block || !em_is_contiguous(block)) return block ? em_to_dtype(t, dt) : NULL;   /* not dense: gather */
    for (int i = 0; i < t->ndim; i++) inv[perm[i]] = i;
    em_tensor *c = em_to_dtype(block, dt);
    return c ? em_permute(c, inv) : NULL;
}

/* A cast of t to dt that the caller owns (made in a private scope, then kept
 * by one reference); NULL on OOM. */
static em_tensor *cast_unscoped(em_tensor *t, em_dtype dt)
{
    em_scope_begin();
    em_tensor *c = em_retain(to_dtype_memory_order(t, dt));
    em_scope_end();
    return c;
}

/* The low-precision cast of an f32 tensor, from the cache when it holds one
 * for t's storage, geometry and version. The result stays owned by the cache. */
static em_tensor *cached_cast(em_tensor *t, em_dtype dt)
{
    for (int64_t i = 0; i < st.n; i++) {
        entry *e = &st.cache[i];
        if (!same_place(e, t, dt)) continue;
        if (e->version == t->storage->version) {
            st.hits++;
            return e->cast;
        }
        /* written in place since (an optimizer step): this entry is stale */
        entry_drop(e);
        st.cache[i] = st.cache[--st.n];
        break;
    }
    if (st.n >= st.sweep_at) sweep();
    em_tensor *c = cast_unscoped(t, dt);
    if (!c) return NULL;
    st.casts++;
    /* A source with history whose cast recorded none was cast with grad mode
     * off: cached as such (same_place serves it only with grad mode off, so
     * an inference loop in one region casts each weight once). A cast with
     * history from a source without (the source's own grad mode notwithstanding)
     * cannot happen: em_to_dtype records only what has history. */
    bool no_grad = t->ag && !c->ag && !grad_mode(), cacheable = true;
    if (cacheable && st.n == st.cap) {
        int64_t cap = st.cap ? 2 * st.cap : 64;
        entry *m = realloc(st.cache, sizeof *m * (size_t)cap);
        if (m) st.cache = m, st.cap = cap;
        else cacheable = false;   /* no room: still correct, just not cached */
    }
    if (!cacheable) return region_own(c);
    entry *e = &st.cache[st.n++];
    *e = (entry){.src = em_retain(t), .cast = c, .storage = t->storage, .version = t->storage->version,
                 .offset = t->offset, .ndim = t->ndim, .has_ag = t->ag != NULL, .no_grad = no_grad, .dtype = dt};
    memcpy(e->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    memcpy(e->stride, t->stride, sizeof(int64_t) * (size_t)t->ndim);
    return c;
}

/* A cast owned by the current scope, or by the region outside any scope. */
static em_tensor *plain_cast(em_tensor *t, em_dtype dt)
{
    em_tensor *c = cast_unscoped(t, dt);
    if (!c) return NULL;
    st.casts++;
    return region_own(c);
}

/* ---- the hook ----------------------------------------------------------------------- */
static em_tensor *autocast_hook(em_op op, int arg, em_tensor *t)
{
    (void)arg;
    if (!t || !enabled() || (unsigned)op >= EM_NUM_OPS) return t;
    policy p = (policy)op_policy[op];
    if (p == KEEP || !em_dtype_is_float(t->dtype) || t->dtype == EM_F64) return t;
    em_dtype want = p == LOW ? st.dtypes[st.depth - 1] : EM_F32;
    if (t->dtype == want) return t;
    if (p == LOW && t->dtype == EM_F32) return cached_cast(t, want);
    return plain_cast(t, want);
}

/* ---- regions ------------------------------------------------------------------------- */
static pthread_once_t hook_once = PTHREAD_ONCE_INIT;
static void install_hook(void) { em__autocast_hook = autocast_hook; }

void em_autocast_begin(em_dtype dtype)
{
    if (dtype != EM_BF16 && dtype != EM_F16 && dtype != EM_F32) {
        em__misuse("em_autocast_begin", "dtype must be bfloat16 or float16 (or float32 to disable autocast), got %s",
                   (unsigned)dtype < EM_NUM_DTYPES ? em_dtype_name(dtype) : "an unknown dtype");
        return;
    }
    if (st.depth == MAX_DEPTH) {
        em__misuse("em_autocast_begin", "more than %d nested autocast regions", MAX_DEPTH);
        return;
    }
    pthread_once(&hook_once, install_hook);
    st.dtypes[st.depth++] = dtype;
    if (dtype != EM_F32) st.regions++;
}

void em_autocast_end(void)
{
    if (st.depth == 0) {
        em__misuse("em_autocast_end", "no autocast region is open (unbalanced em_autocast_begin/em_autocast_end)");
        return;
    }
    if (--st.depth > 0) return;
    cache_clear();
    for (int64_t i = st.n_owned - 1; i >= 0; i--) em_release(st.owned[i]);
    free(st.owned);
    st.owned = NULL;
    st.n_owned = st.cap_owned = 0;
}

em_tensor *em_autocast_output_f32(em_tensor *t)
{
    EM_PROPAGATE_NULL(t);
    if (t->dtype == EM_BF16 || t->dtype == EM_F16) return em_to_dtype(t, EM_F32);
    return em__scope_adopt(em_retain(t));
}
