/* ember — the CUDA runtime's C interface (tensor/cuda/runtime.cu,
 * allocator.cu), for the layers that may know about CUDA: distributed/
 * (NCCL) and the build of tensor/cuda itself. Only compiled with CUDA.
 *
 * Streams: every kernel of device d runs on one compute stream per device;
 * communication (NCCL) runs on a second stream, ordered against the first
 * with events (em__cuda_stream_wait). Streams travel as void * (cudaStream_t).
 *
 * Memory: device memory comes from a caching allocator per device (size
 * classes, block splitting, blocks reused in stream order), so a steady loop
 * never calls cudaMalloc. A block used on a stream other than the compute
 * stream must be recorded (em__cuda_record_stream) before it is freed.
 *
 * Failure: functions returning em_status report CUDA errors as
 * EM_ERR_DEVICE with the failing call and its file:line (em_last_error()).
 */
#ifndef EMBER_CUDA_API_H
#define EMBER_CUDA_API_H

#ifdef __cplusplus
/* tensor_internal.h has no C++ guard: give its declarations C linkage here
 * (its system headers first, outside the block). */
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
extern "C" {
#endif
#include "tensor/tensor_internal.h"

#define EM_CUDA_MAX_DEVICES 16

int em__cuda_device_count(void);   /* 0 when there is no usable GPU */
/* Makes dev current on this thread and returns its compute stream in *stream
 * (creating the device's streams and handles on first use). */
em_status em__cuda_begin(int dev, void **stream);
void *em__cuda_comm_stream(int dev);   /* NULL on failure (error set) */
/* Makes `waiter` wait, on the device, for the work queued on `signaller` so
 * far; the host does not block. */
em_status em__cuda_stream_wait(int dev, void *waiter, void *signaller);
/* Marks device memory p (a pointer the allocator returned) as used on
 * `stream`: its block is not reused before that stream's work queued up to
 * the free has finished. */
em_status em__cuda_record_stream(int dev, const void *p, void *stream);
/* Formats "CUDA: <call> failed: <name>: <text> (<file>:<line>)", sets it as the
 * last error and returns EM_ERR_DEVICE. */
em_status em__cuda_error(const char *call, int err, const char *file, int line);

/* The caching allocator (allocator.cu). Device blocks are 512-byte aligned. */
void *em__cuda_alloc(size_t nbytes, int dev);   /* NULL when the device is out of memory */
void em__cuda_free(void *p, size_t nbytes, int dev);
void em__cuda_empty_cache(int dev);
void em__cuda_cache_stats(int dev, int64_t *cached_bytes, int64_t *n_system_allocs);
void *em__cuda_host_alloc(size_t nbytes);       /* pinned, cached; NULL on failure */
void em__cuda_host_free(void *p, size_t nbytes);

#ifdef __cplusplus
}
#endif
#endif
