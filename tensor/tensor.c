/* ember — tensors: construction, refcounts, element access, devices, threads. */
#include "tensor/tensor_internal.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void (*em__ag_free_hook)(em_tensor *t);
em_status (*em__record_hook)(const em_kargs *k);
bool (*em__grad_mode_hook)(void);
em_tensor *(*em__autocast_hook)(em_op op, int arg, em_tensor *t);

/* ---- devices and threads ---------------------------------------------------- */
bool em_device_eq(em_device a, em_device b) { return a.type == b.type && a.index == b.index; }

const char *em_device_str(em_device d, char buf[16])
{
    if (d.type == EM_DEVICE_CPU) snprintf(buf, 16, "cpu");
    else if (d.type == EM_DEVICE_CUDA) snprintf(buf, 16, "cuda:%d", d.index);
    else snprintf(buf, 16, "type%d:%d", d.type, d.index);   /* not a device; callers refuse it */
    return buf;
}

/* The thread count: one for the process (EM_NUM_THREADS, else OMP_NUM_THREADS,
 * else the cores), but OpenMP keeps it per thread (omp_set_num_threads sets the
 * calling thread's count only). So each thread applies the process's count when
 * it first meets it, or meets a new one: every op passes here (em__dispatch), as
 * every GEMM does, so libraries sized by omp_get_max_threads() follow it in a
 * worker thread too. */
static _Atomic int nthreads;
static _Atomic unsigned nthreads_gen = 1;
static _Thread_local unsigned nthreads_applied;

static int threads_from_env(void)
{
    const char *e = getenv("EM_NUM_THREADS");
    if (e && *e) {
        char *end;
        long n = strtol(e, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\n') end++;
        if (!*end && n > 0 && n <= 65536) return (int)n;
        static _Atomic bool said;
        if (!atomic_exchange(&said, true))
            fprintf(stderr, "ember: EM_NUM_THREADS=%s is not a thread count from 1 to 65536; ignored\n", e);
    }
    e = getenv("OMP_NUM_THREADS");   /* libgomp's syntax: a count, or a list whose first is this level's */
    int n = e ? atoi(e) : 0;
    return n > 0 ? n : omp_get_num_procs();
}

int em_num_threads(void)
{
    /* the generation before the count: a count set in between comes with a
     * newer generation, so this thread applies it at its next call */
    unsigned g = atomic_load(&nthreads_gen);
    int n = atomic_load(&nthreads);
    if (!n) {
        int want = threads_from_env(), zero = 0;
        if (atomic_compare_exchange_strong(&nthreads, &zero, want)) atomic_fetch_add(&nthreads_gen, 1);
        n = atomic_load(&nthreads);
    }
    if (nthreads_applied != g) {
        nthreads_applied = g;
        omp_set_num_threads(n);
    }
    return n;
}

void em_set_num_threads(int n)
{
    atomic_store(&nthreads, n > 0 ? n : omp_get_num_procs());
    atomic_fetch_add(&nthreads_gen, 1);
    em_num_threads();   /* this thread now; the others at their next op */
}

/* ---- geometry ----------------------------------------------------------------- */
void em__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        /* wraps, never overflows (UB): only a shape with no elements gets this far
         * with a product past 2^63 (em__empty refuses the others), and the strides
         * of an empty tensor address no memory */
        (void)__builtin_mul_overflow(s, shape[d] > 0 ? shape[d] : 1, &s);
    }
}

int64_t em_numel(const em_tensor *t)
{
    if (!em__live(t, "em_numel")) return 0;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

bool em_is_contiguous(const em_tensor *t)
{
    if (!em__live(t, "em_is_contiguous")) return false;
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 0) return true;
        if (t->shape[d] != 1 && t->stride[d] != s) return false;
        s *= t->shape[d];
    }
    return true;
}

int em__wrap_dim(int dim, int ndim, const char *op)
{
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        em__misuse(op, "dimension %d out of range for a %d-d tensor", dim, ndim);
        return -1;
    }
    return dim < 0 ? dim + n : dim;
}

int64_t em_size(const em_tensor *t, int dim)
{
    if (!em__live(t, "em_size")) return 0;
    int d = em__wrap_dim(dim, t->ndim, "em_size");
    return d < 0 || t->ndim == 0 ? 1 : t->shape[d];
}

bool em__broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out)
{
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int64_t x = i < n - na ? 1 : a[i - (n - na)];
        int64_t y = i < n - nb ? 1 : b[i - (n - nb)];
        if (x != y && x != 1 && y != 1) return false;
        out[i] = x == 1 ? y : x;
    }
    *nout = n;
    return true;
}

/* ---- tensor headers and their quarantine -------------------------------------------
 * A released header is not freed at once: its magic is cleared and it waits in a
 * FIFO of the last QUARANTINE releases, so a stale pointer still reads a dead
 * header (not reused memory) and the entry check names the mistake. The oldest
 * is freed when the ring is full; a pointer kept past QUARANTINE later releases
 * may go unnoticed (ASan builds catch those). One mutex: releases are rare next
 * to the kernels they bracket. */
#define QUARANTINE 1024
#define DEAD_MAGIC 0xdeadbe11u
static pthread_mutex_t quarantine_lock = PTHREAD_MUTEX_INITIALIZER;
static em_tensor *quarantine[QUARANTINE];
static unsigned quarantine_next;

static void header_free(em_tensor *t)
{
    t->magic = DEAD_MAGIC;
    pthread_mutex_lock(&quarantine_lock);
    em_tensor *old = quarantine[quarantine_next];
    quarantine[quarantine_next] = t;
    quarantine_next = (quarantine_next + 1) % QUARANTINE;
    pthread_mutex_unlock(&quarantine_lock);
    em__free(old);
}

/* At exit, so leak checkers see only real leaks. */
__attribute__((destructor)) static void quarantine_drain(void)
{
    pthread_mutex_lock(&quarantine_lock);
    for (int i = 0; i < QUARANTINE; i++) em__free(quarantine[i]), quarantine[i] = NULL;
    pthread_mutex_unlock(&quarantine_lock);
}

void em__misuse_dead(const em_tensor *t, const char *op)
{
    if (t->magic == DEAD_MAGIC)
        em__misuse(op, "tensor %p was released (its last reference went, by em_release or at the end of the "
                       "scope that made it) and is used again; keep it with em_retain, or make it outside the scope",
                   (const void *)t);
    else
        em__misuse(op, "%p is not an ember tensor (a stale or corrupted pointer)", (const void *)t);
}

/* ---- construction and refcounts -------------------------------------------------- */
static em_tensor *tensor_new(em_storage *s, int ndim, const int64_t *shape, const int64_t *stride,
                             int64_t offset, em_dtype dt)
{
    em_tensor *t = em__calloc(1, sizeof *t);
    if (!t) return NULL;
    t->storage = s;
    t->offset = offset;
    t->ndim = ndim;
    if (ndim) {
        memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
        memcpy(t->stride, stride, sizeof(int64_t) * (size_t)ndim);
    }
    t->dtype = dt;
    t->device = s->device;
    t->refcount = 1;
    t->magic = EM_TENSOR_LIVE;
    return t;
}

em_tensor *em__empty(int ndim, const int64_t *shape, em_dtype dt, em_device dev)
{
    EM_CHECK(ndim >= 0 && ndim <= EM_MAX_DIMS, "em_empty", "%d dims requested; at most %d are supported", ndim, EM_MAX_DIMS);
    EM_CHECK((unsigned)dt < EM_NUM_DTYPES, "em_empty", "unknown dtype %d", (int)dt);
    int64_t n = 1, bytes;
    bool overflow = false, empty = false;
    for (int d = 0; d < ndim; d++) {
        EM_CHECK(shape[d] >= 0, "em_empty", "negative size %lld in shape %s", (long long)shape[d], em__dims_str(ndim, shape));
        overflow |= __builtin_mul_overflow(n, shape[d], &n);
        empty |= shape[d] == 0;
    }
    if (empty) n = 0, overflow = false;   /* no elements, whatever the other sizes */
    /* a shape from outside (a config, a file) must not wrap into a small allocation */
    if (overflow || __builtin_mul_overflow(n, (int64_t)em_dtype_size(dt), &bytes)) {
        em__fail(EM_ERR_OOM, "em_empty: shape %s of %s has more than 2^63 bytes", em__dims_str(ndim, shape),
                 em_dtype_name(dt));
        return NULL;
    }
    int64_t stride[EM_MAX_DIMS];
    em__contiguous_strides(ndim, shape, stride);
    em_storage *s = em__storage_new((size_t)bytes, dev);
    if (!s) return NULL;
    em_tensor *t = tensor_new(s, ndim, shape, stride, 0, dt);
    if (!t) {
        em__storage_release(s);
        return NULL;
    }
    return em__scope_adopt(t);
}

em_tensor *em__view_of(em_tensor *base, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset)
{
    em_tensor *t = tensor_new(base->storage, ndim, shape, stride, offset, base->dtype);
    if (!t) return NULL;
    base->storage->refcount++;
    return em__scope_adopt(t);
}

em_tensor *em__alias(em_tensor *t)
{
    em_tensor *a = tensor_new(t->storage, t->ndim, t->shape, t->stride, t->offset, t->dtype);
    if (a) t->storage->refcount++;
    return a;
}

em_tensor *em_empty(int ndim, const int64_t *shape, em_dtype dt, em_device dev)
{
    return em__empty(ndim, shape, dt, dev);
}

em_tensor *em_from_data(const void *data, int ndim, const int64_t *shape, em_dtype dt)
{
    em_tensor *t = em__empty(ndim, shape, dt, EM_CPU);
    if (t && t->storage->nbytes) memcpy(t->storage->data, data, t->storage->nbytes);
    return t;
}

em_tensor *em_retain(em_tensor *t)
{
    if (t && em__live(t, "em_retain")) t->refcount++;
    else t = NULL;
    return t;
}

em_tensor *em__retain_held(em_tensor *t)
{
    if (t && em__live(t, "em_retain")) t->refcount++, t->held++;
    else t = NULL;
    return t;
}

void em__release_held(em_tensor *t)
{
    if (!t || !em__live(t, "em_release")) return;
    t->held--;
    em_release(t);
}

void em_release(em_tensor *t)
{
    if (!t || !em__live(t, "em_release")) return;
    if (t->refcount <= t->held) {   /* the caller owns none of the references left */
        em__misuse("em_release",
                   "tensor %s: every reference left belongs to a scope or a module (a result made inside "
                   "EM_SCOPE, or a registered parameter); they release it themselves. Release only what you own: "
                   "results made outside any scope, and your em_retain's",
                   em__shape_str(t));
        return;
    }
    if (--t->refcount > 0) return;
    if (t->ag && em__ag_free_hook) em__ag_free_hook(t);
    em__storage_release(t->storage);
    header_free(t);
}

/* ---- element access (slow; tests and teaching) ----------------------------------- */
static char *elem_ptr(em_tensor *t, const int64_t *idx, const char *op)
{
    if (!em__live(t, op)) return NULL;
    if (t->device.type != EM_DEVICE_CPU) {
        em__misuse(op, "tensor is on a CUDA device; move it to the CPU with em_to first");
        return NULL;
    }
    int64_t off = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (idx[d] < 0 || idx[d] >= t->shape[d]) {
            em__misuse(op, "index %lld out of range for dim %d of %s", (long long)idx[d], d, em__shape_str(t));
            return NULL;
        }
        off += idx[d] * t->stride[d];
    }
    return (char *)t->storage->data + off * (int64_t)em_dtype_size(t->dtype);
}

double em_get(em_tensor *t, const int64_t *idx)
{
    char *p = elem_ptr(t, idx, "em_get");
    return p ? em__load(p, t->dtype) : 0.0;
}

void em_set(em_tensor *t, const int64_t *idx, double v)
{
    char *p = elem_ptr(t, idx, "em_set");
    if (!p) return;
    em__store(p, t->dtype, v);
    t->storage->version++;
}

double em_item(em_tensor *t)
{
    if (!em__live(t, "em_item")) return 0.0;
    if (em_numel(t) != 1) {
        em__misuse("em_item", "tensor of shape %s has %lld elements, not 1", em__shape_str(t), (long long)em_numel(t));
        return 0.0;
    }
    int64_t zero[EM_MAX_DIMS] = {0};
    return em_get(t, zero);
}

void *em_data_ptr(em_tensor *t)
{
    if (!em__live(t, "em_data_ptr") || !t->storage->data) return NULL;
    return (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype);
}
