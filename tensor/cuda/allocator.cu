/* ember — the CUDA caching allocator (one per device), after PyTorch's.
 *
 * Requests are rounded up to 512 bytes. Requests up to 1 MiB come from 2 MiB
 * segments (the small pool); larger ones from 20 MiB segments when under
 * 10 MiB, else from a segment of their own size rounded to 2 MiB (the large
 * pool). A free block is found best-fit (smallest size that fits, among the
 * blocks of the same stream), split when the rest is worth keeping (>= 512
 * bytes small, > 1 MiB large), and merged with its free neighbours when it
 * comes back. Segments are only returned to the system by empty_cache, or
 * when cudaMalloc fails (then the cache is emptied and the call retried), so
 * a steady loop never calls cudaMalloc.
 *
 * Stream order: a block belongs to the stream it was allocated on (the
 * device's compute stream); kernels on that stream that use a freed block
 * run after the earlier kernels that used it, so it is reused at once. A
 * block also used on another stream (recorded with em__cuda_record_stream)
 * gets an event on each such stream when freed and waits for them before it
 * is reused.
 *
 * Pinned host memory (em__cuda_host_alloc) is cached by power-of-two size.
 */
#include "tensor/cuda/cuda_common.cuh"

#include <deque>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallSize = 1u << 20;
constexpr size_t kSmallSegment = 2u << 20;
constexpr size_t kLargeSegment = 20u << 20;
constexpr size_t kMinLargeAlloc = 10u << 20;
constexpr size_t kRoundLarge = 2u << 20;

struct Block {
    char *ptr;
    size_t size;
    cudaStream_t stream;
    bool small;
    bool allocated = false;     /* handed out, or waiting for events */
    int pending = 0;            /* events to wait for before reuse */
    Block *prev = nullptr, *next = nullptr;   /* neighbours in the segment */
    std::vector<cudaStream_t> uses;           /* other streams that used it */
    Block(char *p, size_t s, cudaStream_t st, bool sm) : ptr(p), size(s), stream(st), small(sm) {}
};

struct BlockLess {
    bool operator()(const Block *a, const Block *b) const
    {
        if (a->stream != b->stream) return (uintptr_t)a->stream < (uintptr_t)b->stream;
        if (a->size != b->size) return a->size < b->size;
        return (uintptr_t)a->ptr < (uintptr_t)b->ptr;
    }
};
using Pool = std::set<Block *, BlockLess>;

struct DevPool {
    std::mutex mu;
    Pool small, large;
    std::unordered_map<const void *, Block *> live;
    std::deque<std::pair<cudaEvent_t, Block *>> events;
    std::vector<cudaEvent_t> spare_events;
    int64_t reserved = 0, in_use = 0, n_system = 0;
};

DevPool pools[EM_CUDA_MAX_DEVICES];

size_t round_size(size_t n) { return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock; }

size_t segment_size(size_t n)
{
    if (n <= kSmallSize) return kSmallSegment;
    if (n < kMinLargeAlloc) return kLargeSegment;
    return (n + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

/* Puts a block that nobody uses back in its pool, merged with free neighbours. */
void release_block(DevPool &dp, Block *b)
{
    Pool &pool = b->small ? dp.small : dp.large;
    b->allocated = false;
    if (Block *p = b->prev; p && !p->allocated) {
        pool.erase(p);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        delete b;
        b = p;
    }
    if (Block *n = b->next; n && !n->allocated) {
        pool.erase(n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        delete n;
    }
    pool.insert(b);
}

/* Releases the blocks whose events have completed (all of them when `wait`). */
void process_events(DevPool &dp, bool wait)
{
    while (!dp.events.empty()) {
        auto [ev, b] = dp.events.front();
        cudaError_t e = wait ? cudaEventSynchronize(ev) : cudaEventQuery(ev);
        if (e == cudaErrorNotReady) break;
        if (e != cudaSuccess) (void)cudaGetLastError();   /* a broken event: treat as done */
        dp.spare_events.push_back(ev);
        dp.events.pop_front();
        if (--b->pending == 0) release_block(dp, b);
    }
}

/* Frees every whole segment that is unused. */
void release_cached(DevPool &dp, Pool &pool)
{
    for (auto it = pool.begin(); it != pool.end();) {
        Block *b = *it;
        if (!b->prev && !b->next) {
            (void)cudaFree(b->ptr);
            dp.reserved -= (int64_t)b->size;
            it = pool.erase(it);
            delete b;
        } else {
            ++it;
        }
    }
}

}   // namespace

extern "C" void *em__cuda_alloc(size_t nbytes, int dev)
{
    if (dev < 0 || dev >= EM_CUDA_MAX_DEVICES) return nullptr;
    cudaStream_t stream;
    if (emcu::begin(dev, &stream) != EM_OK) return nullptr;
    DevPool &dp = pools[dev];
    size_t size = round_size(nbytes);
    bool small = size <= kSmallSize;
    std::lock_guard<std::mutex> lock(dp.mu);
    process_events(dp, false);
    Pool &pool = small ? dp.small : dp.large;
    Block key(nullptr, size, stream, small);
    auto it = pool.lower_bound(&key);
    Block *b;
    if (it != pool.end() && (*it)->stream == stream) {
        b = *it;
        pool.erase(it);
    } else {
        size_t seg = segment_size(size);
        void *p = nullptr;
        if (cudaMalloc(&p, seg) != cudaSuccess) {
            (void)cudaGetLastError();
            process_events(dp, true);
            release_cached(dp, dp.small);
            release_cached(dp, dp.large);
            if (cudaMalloc(&p, seg) != cudaSuccess) {
                (void)cudaGetLastError();
                return nullptr;
            }
        }
        dp.reserved += (int64_t)seg;
        dp.n_system++;
        b = new Block((char *)p, seg, stream, small);
    }
    size_t rest = b->size - size;
    if (small ? rest >= kMinBlock : rest > kSmallSize) {
        Block *r = new Block(b->ptr + size, rest, stream, small);
        r->prev = b;
        r->next = b->next;
        if (b->next) b->next->prev = r;
        b->next = r;
        b->size = size;
        pool.insert(r);
    }
    b->allocated = true;
    dp.live[b->ptr] = b;
    dp.in_use += (int64_t)b->size;
    return b->ptr;
}

extern "C" void em__cuda_free(void *p, size_t nbytes, int dev)
{
    (void)nbytes;
    if (!p || dev < 0 || dev >= EM_CUDA_MAX_DEVICES) return;
    DevPool &dp = pools[dev];
    std::lock_guard<std::mutex> lock(dp.mu);
    auto it = dp.live.find(p);
    if (it == dp.live.end()) return;   /* not ours: ignore rather than corrupt the pools */
    Block *b = it->second;
    dp.live.erase(it);
    dp.in_use -= (int64_t)b->size;
    if (b->uses.empty()) {
        release_block(dp, b);
        return;
    }
    (void)cudaSetDevice(dev);
    for (cudaStream_t s : b->uses) {
        cudaEvent_t ev;
        if (!dp.spare_events.empty()) {
            ev = dp.spare_events.back();
            dp.spare_events.pop_back();
        } else if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            (void)cudaStreamSynchronize(s);   /* no event: wait here instead */
            continue;
        }
        if (cudaEventRecord(ev, s) != cudaSuccess) {
            (void)cudaGetLastError();
            dp.spare_events.push_back(ev);
            (void)cudaStreamSynchronize(s);
            continue;
        }
        dp.events.emplace_back(ev, b);
        b->pending++;
    }
    b->uses.clear();
    if (b->pending == 0) release_block(dp, b);
}

extern "C" em_status em__cuda_record_stream(int dev, const void *p, void *stream)
{
    if (dev < 0 || dev >= EM_CUDA_MAX_DEVICES) return em__fail(EM_ERR_INVALID, "CUDA: no device %d", dev);
    DevPool &dp = pools[dev];
    std::lock_guard<std::mutex> lock(dp.mu);
    auto it = dp.live.find(p);
    if (it == dp.live.end()) return em__fail(EM_ERR_INVALID, "CUDA: record_stream: %p is not a live allocation", p);
    Block *b = it->second;
    cudaStream_t s = (cudaStream_t)stream;
    if (s == b->stream) return EM_OK;
    for (cudaStream_t u : b->uses)
        if (u == s) return EM_OK;
    b->uses.push_back(s);
    return EM_OK;
}

extern "C" void em__cuda_empty_cache(int dev)
{
    if (dev < 0 || dev >= em__cuda_device_count()) return;
    DevPool &dp = pools[dev];
    if (cudaSetDevice(dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return;
    }
    std::lock_guard<std::mutex> lock(dp.mu);
    process_events(dp, true);
    release_cached(dp, dp.small);
    release_cached(dp, dp.large);
    for (cudaEvent_t ev : dp.spare_events) (void)cudaEventDestroy(ev);
    dp.spare_events.clear();
}

extern "C" void em__cuda_cache_stats(int dev, int64_t *cached_bytes, int64_t *n_system_allocs)
{
    int64_t c = 0, n = 0;
    if (dev >= 0 && dev < EM_CUDA_MAX_DEVICES) {
        DevPool &dp = pools[dev];
        std::lock_guard<std::mutex> lock(dp.mu);
        c = dp.reserved - dp.in_use;
        n = dp.n_system;
    }
    if (cached_bytes) *cached_bytes = c;
    if (n_system_allocs) *n_system_allocs = n;
}

/* ---- pinned host memory ------------------------------------------------------------------ */
namespace {
std::mutex host_mu;
std::unordered_map<size_t, std::vector<void *>> host_free_lists;   /* size class -> blocks */

size_t host_class(size_t n)
{
    size_t c = 4096;
    while (c < n) c <<= 1;
    return c;
}
}   // namespace

extern "C" void *em__cuda_host_alloc(size_t nbytes)
{
    size_t c = host_class(nbytes);
    {
        std::lock_guard<std::mutex> lock(host_mu);
        auto &list = host_free_lists[c];
        if (!list.empty()) {
            void *p = list.back();
            list.pop_back();
            return p;
        }
    }
    void *p = nullptr;
    if (cudaHostAlloc(&p, c, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return p;
}

extern "C" void em__cuda_host_free(void *p, size_t nbytes)
{
    if (!p) return;
    std::lock_guard<std::mutex> lock(host_mu);
    host_free_lists[host_class(nbytes)].push_back(p);
}
