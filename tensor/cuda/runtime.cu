/* ember — the CUDA runtime: device discovery, per-device streams, copies,
 * and the backend table (DESIGN.md §2 "Devices and dispatch").
 *
 * Lazy initialization. Nothing here calls the CUDA runtime at load: a
 * constructor only registers a probe (em__register_backend_probe), which
 * dispatch runs on the first em__backend(EM_DEVICE_CUDA), i.e. the first
 * CUDA use (a tensor made or moved to EM_CUDA(i), a device query). The probe
 * asks how many GPUs there are (cudaGetDeviceCount, the first driver call)
 * and hands over the backend table when there is at least one. Without one
 * (no driver, no device, or CUDA_VISIBLE_DEVICES="") EM_CUDA devices are "not
 * available". The reason: a process that initialized the driver before
 * fork() cannot use CUDA in the child, and Check runs every CPU test in a
 * forked child; CPU-only paths therefore never reach this file. Every other
 * entry point (em__cuda_device_count for NCCL, the allocator, streams) goes
 * through devices(), which runs the same one-time query.
 *
 * Each device gets, on first use, a compute stream (every kernel, cuBLAS
 * call and copy of that device) and a communication stream (NCCL), both
 * non-blocking with respect to the legacy default stream.
 *
 * Copies (em_backend.memcpy): host <-> device copies are queued on the
 * compute stream and waited for, as torch's non_blocking=False copies, so
 * the host buffer may be reused as soon as the call returns and a D2H result
 * is there to read. Device <-> device copies between two GPUs wait for the
 * source device's queued work first, then run on the destination's stream.
 */
#include "tensor/cuda/cuda_common.cuh"

#include <mutex>
#include <stdio.h>

namespace {

struct Ctx {
    std::once_flag once;
    em_status status = EM_OK;
    char error[256] = "";
    cudaStream_t compute = nullptr, comm = nullptr;
};

int n_devices = 0;
std::once_flag devices_once;
Ctx ctxs[EM_CUDA_MAX_DEVICES];

/* GPUs usable here (at most EM_CUDA_MAX_DEVICES); the first call initializes the driver. */
int devices()
{
    std::call_once(devices_once, [] {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
            (void)cudaGetLastError();
            n = 0;
        }
        n_devices = n < EM_CUDA_MAX_DEVICES ? n : EM_CUDA_MAX_DEVICES;
    });
    return n_devices;
}

void ctx_init(int dev, Ctx &c)
{
    cudaError_t e = cudaStreamCreateWithFlags(&c.compute, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c.comm, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        c.status = EM_ERR_DEVICE;
        snprintf(c.error, sizeof c.error, "CUDA: cudaStreamCreateWithFlags failed on cuda:%d: %s: %s", dev,
                 cudaGetErrorName(e), cudaGetErrorString(e));
    }
}

/* Makes dev current on this thread (the runtime keeps the current device per thread). */
em_status set_device(int dev)
{
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess) (void)cudaGetLastError();
    if (cur != dev) EM_CU(cudaSetDevice(dev));
    return EM_OK;
}

em_status check_index(int dev)
{
    if (dev < 0 || dev >= devices())
        return em__fail(EM_ERR_INVALID, "CUDA: there is no device cuda:%d (%d present)", dev, devices());
    return EM_OK;
}

Ctx *ctx_of(int dev)
{
    if (check_index(dev) != EM_OK || set_device(dev) != EM_OK) return nullptr;
    Ctx &c = ctxs[dev];
    std::call_once(c.once, [&] { ctx_init(dev, c); });
    if (c.status != EM_OK) {
        em__fail(c.status, "%s", c.error);
        return nullptr;
    }
    return &c;
}

}   // namespace

extern "C" em_status em__cuda_error(const char *call, int err, const char *file, int line)
{
    cudaError_t e = (cudaError_t)err;
    (void)cudaGetLastError();   /* clears a non-sticky error so later calls can succeed */
    return em__fail(EM_ERR_DEVICE, "CUDA: %s failed: %s: %s (%s:%d)", call, cudaGetErrorName(e), cudaGetErrorString(e),
                    file, line);
}

extern "C" int em__cuda_device_count(void) { return devices(); }

extern "C" em_status em__cuda_begin(int dev, void **stream)
{
    Ctx *c = ctx_of(dev);
    if (!c) return em_last_status() != EM_OK ? em_last_status() : EM_ERR_DEVICE;
    *stream = c->compute;
    return EM_OK;
}

extern "C" void *em__cuda_comm_stream(int dev)
{
    Ctx *c = ctx_of(dev);
    return c ? c->comm : nullptr;
}

extern "C" em_status em__cuda_stream_wait(int dev, void *waiter, void *signaller)
{
    EM_TRY(check_index(dev));
    EM_TRY(set_device(dev));
    cudaEvent_t ev;
    EM_CU(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, (cudaStream_t)signaller);
    if (e == cudaSuccess) e = cudaStreamWaitEvent((cudaStream_t)waiter, ev, 0);
    (void)cudaEventDestroy(ev);   /* destroying a recorded event is fine: the wait stays */
    EM_CU(e);
    return EM_OK;
}

/* ---- the backend table ------------------------------------------------------------- */
namespace {

void *cuda_alloc(size_t n, int dev) { return em__cuda_alloc(n, dev); }
void cuda_free(void *p, size_t n, int dev) { em__cuda_free(p, n, dev); }

em_status cuda_memcpy(void *dst, em_device dd, const void *src, em_device sd, size_t n)
{
    if (n == 0) return EM_OK;
    bool dcuda = dd.type == EM_DEVICE_CUDA, scuda = sd.type == EM_DEVICE_CUDA;
    int dev = dcuda ? dd.index : sd.index;
    cudaStream_t s;
    if (dcuda && scuda && dd.index != sd.index) {
        cudaStream_t ss;
        EM_TRY(emcu::begin(sd.index, &ss));
        EM_CU(cudaStreamSynchronize(ss));   /* src is complete */
        EM_TRY(emcu::begin(dev, &s));
        EM_CU(cudaMemcpyPeerAsync(dst, dd.index, src, sd.index, n, s));
        return EM_OK;
    }
    EM_TRY(emcu::begin(dev, &s));
    EM_CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
    if (!dcuda || !scuda) EM_CU(cudaStreamSynchronize(s));
    return EM_OK;
}

em_status cuda_sync(int dev)
{
    EM_TRY(check_index(dev));
    EM_TRY(set_device(dev));
    EM_CU(cudaDeviceSynchronize());
    return EM_OK;
}

int cuda_count(void) { return devices(); }

em_backend table;

}   // namespace

/* Referenced by the link line (tensor/cuda/meson.build) so that a static
 * libember keeps this object, and with it the constructor below. */
extern "C" int em__cuda_link_anchor;
int em__cuda_link_anchor = 1;

/* The probe dispatch runs on the first CUDA use: the table when a GPU is here. */
static const em_backend *em_cuda_probe(void) { return devices() > 0 ? &table : nullptr; }

/* At load: fill the table and register the probe; no CUDA call (see the top). */
__attribute__((constructor)) static void em_cuda_register(void)
{
    table.name = "cuda";
    table.type = EM_DEVICE_CUDA;
    table.alloc = cuda_alloc;
    table.free = cuda_free;
    table.memcpy = cuda_memcpy;
    table.synchronize = cuda_sync;
#define EM_CUDA_SLOT(name) table.kernels[EM_OP_##name] = em_cuda_##name;
    EM_KERNEL_OP_LIST(EM_CUDA_SLOT)
#undef EM_CUDA_SLOT
    table.device_count = cuda_count;
    table.empty_cache = em__cuda_empty_cache;
    table.cache_stats = em__cuda_cache_stats;
    table.host_alloc = em__cuda_host_alloc;
    table.host_free = em__cuda_host_free;
    em__register_backend_probe(EM_DEVICE_CUDA, em_cuda_probe);
}
