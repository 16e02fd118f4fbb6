/* ember — memory: host allocation hooks, the fail-the-Nth switch, per-device
 * live/peak counters, the CPU caching allocator and storages.
 *
 * The CPU allocator keeps freed blocks in size classes (a quarter of a power
 * of two apart) and hands them out again, so a steady training loop does not
 * go back to glibc, which mmaps and zero-faults large blocks anew each time.
 * Cached bytes are capped (EM_CPU_CACHE_MB, default 8192); em_empty_cache
 * returns everything to the system. EM_CPU_HUGEPAGES=1 gives blocks of
 * 2 MiB and more huge pages (system_alloc below). */
#include "tensor/tensor_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- the fail-the-Nth switch (tests) ---------------------------------------- */
static _Atomic int64_t fail_countdown;
static _Atomic bool fail_sticky, fail_tripped;

void em_alloc_fail_after(int64_t n, bool sticky)
{
    atomic_store(&fail_tripped, false);
    atomic_store(&fail_sticky, sticky);
    atomic_store(&fail_countdown, n);
}

bool em__alloc_should_fail(void)
{
    if (atomic_load(&fail_tripped)) return atomic_load(&fail_sticky);
    if (atomic_load(&fail_countdown) <= 0) return false;
    if (atomic_fetch_sub(&fail_countdown, 1) == 1) {
        atomic_store(&fail_tripped, true);
        return true;
    }
    return false;
}

void *em__malloc(size_t n)
{
    void *p = em__alloc_should_fail() ? NULL : malloc(n ? n : 1);
    if (!p) em__fail(EM_ERR_OOM, "out of memory allocating %zu host bytes", n);
    return p;
}

char *em__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = em__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void *em__calloc(size_t n, size_t size)
{
    void *p = em__alloc_should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1);
    if (!p) em__fail(EM_ERR_OOM, "out of memory allocating %zu x %zu host bytes", n, size);
    return p;
}

void *em__realloc(void *old, size_t n)
{
    void *p = em__alloc_should_fail() ? NULL : realloc(old, n ? n : 1);
    if (!p) em__fail(EM_ERR_OOM, "out of memory reallocating to %zu host bytes", n);
    return p;
}

void em__free(void *p) { free(p); }

/* ---- per-device statistics ------------------------------------------------- */
#define MAX_DEV_INDEX 16
static em_memory_stats stats[EM_NUM_DEVICE_TYPES][MAX_DEV_INDEX];
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

static em_memory_stats *stats_of(em_device d)
{
    return &stats[d.type][d.index >= 0 && d.index < MAX_DEV_INDEX ? d.index : 0];
}

em_memory_stats em_memory_stats_get(em_device dev)
{
    pthread_mutex_lock(&stats_lock);
    em_memory_stats s = *stats_of(dev);
    pthread_mutex_unlock(&stats_lock);
    const em_backend *be = dev.type != EM_DEVICE_CPU ? em__backend((em_device_type)dev.type) : NULL;
    if (be && be->cache_stats) be->cache_stats(dev.index, &s.cached_bytes, &s.n_system_allocs);   /* the device's own cache */
    return s;
}

void em_memory_reset_peak(em_device dev)
{
    pthread_mutex_lock(&stats_lock);
    stats_of(dev)->peak_bytes = stats_of(dev)->live_bytes;
    pthread_mutex_unlock(&stats_lock);
}

static void stats_add(em_device d, int64_t live_delta, int64_t cached_delta, int sys)
{
    pthread_mutex_lock(&stats_lock);
    em_memory_stats *s = stats_of(d);
    s->live_bytes += live_delta;
    if (s->live_bytes > s->peak_bytes) s->peak_bytes = s->live_bytes;
    s->cached_bytes += cached_delta;
    if (live_delta > 0) s->n_allocs++;
    s->n_system_allocs += sys;
    pthread_mutex_unlock(&stats_lock);
}

/* ---- the CPU caching allocator -------------------------------------------- */
#define NBUCKETS 512   /* open-addressed table: rounded size -> free list */
typedef struct free_block { struct free_block *next; } free_block;
static struct { size_t size; free_block *head; } buckets[NBUCKETS];
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t cache_cap = -1;

static size_t round_size(size_t n)
{
    if (n <= 512) return (n + 63) & ~(size_t)63;
    int k = 63 - __builtin_clzll((unsigned long long)(n - 1));   /* 2^k < n <= 2^(k+1) */
    size_t step = (size_t)1 << (k - 2);
    return (n + step - 1) / step * step;
}

/* Bucket index for a rounded size; inserts the size when absent. -1 when full. */
static int bucket_of(size_t size)
{
    unsigned h = (unsigned)((size >> 6) * 2654435761u) % NBUCKETS;
    for (int i = 0; i < NBUCKETS; i++, h = (h + 1) % NBUCKETS) {
        if (buckets[h].size == size) return (int)h;
        if (buckets[h].size == 0) {
            buckets[h].size = size;
            return (int)h;
        }
    }
    return -1;
}

/* With EM_CPU_HUGEPAGES=1, blocks of at least HUGE bytes start on a 2 MiB
 * boundary and ask the kernel for transparent huge pages (MADV_HUGEPAGE;
 * Debian's default THP mode is "madvise", so otherwise every block is 4 KiB
 * pages). Off by default, as torch's THP_MEM_ALLOC_ENABLE: measured on the
 * 2-vCPU cloud VMs (docs/PERFORMANCE.md), a step that streams through tens of
 * megabytes runs 2-7% faster on huge pages (fewer two-level TLB walks), but
 * the first touch of a 2 MiB page the guest has not used before waits for
 * the host to back it (256 MiB: 2.7 s, against 0.09 s in 4 KiB pages), and a
 * whole fine-tune (bench/finetune) took 28.2-28.8 s of wall time against
 * 25.0-26.0. Only whole 2 MiB pages inside the requested bytes are advised,
 * so resident memory does not grow. */
#define HUGE ((size_t)2 << 20)

static bool hugepages_on(void)
{
    static int on = -1;   /* read once; a race reads the same value twice */
    if (on < 0) {
        const char *e = getenv("EM_CPU_HUGEPAGES");
        on = e && !strcmp(e, "1");
        if (e && *e && strcmp(e, "0") && strcmp(e, "1"))
            fprintf(stderr, "ember: EM_CPU_HUGEPAGES=%s is not 0 or 1; huge pages stay off\n", e);
    }
    return on;
}

/* A block of r bytes (the size class) for a first request of n <= r: huge
 * pages only over the first n bytes, so the class's slack, never touched by
 * this request, costs no resident memory. */
static void *system_alloc(size_t n, size_t r)
{
    if (n < HUGE || !hugepages_on()) return aligned_alloc(64, r);
    void *p = NULL;
    if (posix_memalign(&p, HUGE, r)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n & ~(HUGE - 1), MADV_HUGEPAGE);   /* advice only: a failure leaves small pages */
#endif
    return p;
}

void *em__cpu_alloc(size_t n)
{
    size_t r = round_size(n);
    pthread_mutex_lock(&cache_lock);
    int b = bucket_of(r);
    if (b >= 0 && buckets[b].head) {
        free_block *blk = buckets[b].head;
        buckets[b].head = blk->next;
        pthread_mutex_unlock(&cache_lock);
        stats_add(EM_CPU, 0, -(int64_t)r, 0);
        return blk;
    }
    pthread_mutex_unlock(&cache_lock);
    void *p = system_alloc(n, r);
    if (p) stats_add(EM_CPU, 0, 0, 1);
    return p;
}

/* EM_CPU_CACHE_MB: a whole number of MiB, 0 to cache nothing; past 2^43 MiB
 * it is no limit. Unset, empty or not a number: 8192, with a word on stderr
 * for the last. */
static int64_t cache_cap_from_env(void)
{
    const char *e = getenv("EM_CPU_CACHE_MB");
    long long mb = 8192;
    if (e && *e) {
        char *end;
        errno = 0;
        long long v = strtoll(e, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\n') end++;
        if (*end || end == e || v < 0)
            fprintf(stderr, "ember: EM_CPU_CACHE_MB=%s is not a number of MiB (0 or more); using 8192\n", e);
        else mb = errno == ERANGE || v > (INT64_MAX >> 20) ? (INT64_MAX >> 20) : v;
    }
    return (int64_t)mb << 20;
}

void em__cpu_free(void *p, size_t n)
{
    if (!p) return;
    size_t r = round_size(n);
    if (cache_cap < 0) cache_cap = cache_cap_from_env();
    if (em_memory_stats_get(EM_CPU).cached_bytes + (int64_t)r <= cache_cap) {
        pthread_mutex_lock(&cache_lock);
        int b = bucket_of(r);
        if (b >= 0) {
            free_block *blk = p;
            blk->next = buckets[b].head;
            buckets[b].head = blk;
            pthread_mutex_unlock(&cache_lock);
            stats_add(EM_CPU, 0, (int64_t)r, 0);
            return;
        }
        pthread_mutex_unlock(&cache_lock);
    }
    free(p);
}

static void cpu_empty_cache(void)
{
    int64_t freed = 0;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < NBUCKETS; i++) {
        while (buckets[i].head) {
            free_block *b = buckets[i].head;
            buckets[i].head = b->next;
            free(b);
            freed += (int64_t)buckets[i].size;
        }
    }
    pthread_mutex_unlock(&cache_lock);
    stats_add(EM_CPU, 0, -freed, 0);
}

void em_empty_cache(em_device dev)
{
    if (dev.type == EM_DEVICE_CPU) {
        cpu_empty_cache();
        return;
    }
    const em_backend *be = em__backend((em_device_type)dev.type);
    if (be && be->empty_cache) be->empty_cache(dev.index);
}

/* ---- user-installed allocators -------------------------------------------- */
static em_allocator custom[EM_NUM_DEVICE_TYPES];
static bool has_custom[EM_NUM_DEVICE_TYPES];

void em_set_allocator(em_device_type type, const em_allocator *a)
{
    has_custom[type] = a != NULL;
    if (a) custom[type] = *a;
}

/* ---- storages --------------------------------------------------------------- */
em_storage *em__storage_new(size_t nbytes, em_device dev)
{
    const em_backend *be = em__backend((em_device_type)dev.type);
    if (!be) {
        char why[160];
        em__misuse("em_empty", "%s", em__backend_absent(dev, why));
        return NULL;
    }
    if (be->device_count && (dev.index < 0 || dev.index >= be->device_count())) {
        char b[16];
        em__misuse("em_empty", "device %s does not exist (%d present)", em_device_str(dev, b), be->device_count());
        return NULL;
    }
    em_storage *s = em__malloc(sizeof *s);
    if (!s) return NULL;
    void *data = NULL;
    if (nbytes) {
        if (!em__alloc_should_fail())
            data = has_custom[dev.type] ? custom[dev.type].alloc(nbytes, custom[dev.type].user)
                                        : be->alloc(nbytes, dev.index);
        if (!data) {
            char b[16];
            em__free(s);
            em__fail(EM_ERR_OOM, "out of memory allocating %zu bytes on %s", nbytes, em_device_str(dev, b));
            return NULL;
        }
    }
    *s = (em_storage){.data = data, .nbytes = nbytes, .device = dev, .refcount = 1};
    stats_add(dev, (int64_t)nbytes, 0, 0);
    return s;
}

void em__storage_release(em_storage *s)
{
    if (!s || --s->refcount > 0) return;
    if (s->data) {
        if (has_custom[s->device.type]) custom[s->device.type].free(s->data, s->nbytes, custom[s->device.type].user);
        else em__backend((em_device_type)s->device.type)->free(s->data, s->nbytes, s->device.index);
    }
    stats_add(s->device, -(int64_t)s->nbytes, 0, 0);
    em__free(s);
}
