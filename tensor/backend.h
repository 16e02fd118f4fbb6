/* ember — device backends and dispatch: the kernel table each device fills,
 * its registration, and the one call every op makes. For tensor/, its
 * backends (cpu/, cuda/) and the tests that check them; no layer above
 * tensor/ includes it (ops reach devices through tensor.h and fused.h). Not installed. */
#ifndef EMBER_TENSOR_BACKEND_H
#define EMBER_TENSOR_BACKEND_H

#include "tensor/construct.h"
#include "tensor/ops.h"

/* ---- dispatch -------------------------------------------------------------
 * Runs k->op on the device of its first output (or first input), through the
 * device's backend table, then calls the record hook. Misuse when the device
 * has no kernel for the op; returns the kernel's status. */
em_status em__dispatch(em_kargs *k);
/* Profiling (tensor/profile.c): dispatch times each kernel while em__profile_on. */
extern bool em__profile_on;
uint64_t em__profile_now(void);
void em__profile_add(em_op op, uint64_t ns);
/* The GEMM kernels' rule (op_matmul.c): t's last two dims form a row-major
 * matrix or the transpose of one, with a leading dimension BLAS accepts; the
 * matmul and linear front-ends copy an operand that fails it. */
bool em__gemm_ready(const em_tensor *t);

/* A device backend: memory plus one kernel slot per op (NULL = unsupported). */
typedef struct em_backend {
    const char *name;
    em_device_type type;
    void *(*alloc)(size_t nbytes, int device_index);
    void (*free)(void *p, size_t nbytes, int device_index);
    /* Copies nbytes between host and device memory (either side may be this device). */
    em_status (*memcpy)(void *dst, em_device ddev, const void *src, em_device sdev, size_t nbytes);
    em_status (*synchronize)(int device_index);
    em_kernel kernels[EM_NUM_OPS];
    /* Optional (NULL on the CPU, whose allocator lives in alloc.c): */
    int (*device_count)(void);
    void (*empty_cache)(int device_index);   /* returns cached blocks to the system */
    /* Bytes the device's caching allocator holds unused, and its system allocations so far. */
    void (*cache_stats)(int device_index, int64_t *cached_bytes, int64_t *n_system_allocs);
    /* Page-locked host memory for fast transfers (the DataLoader's batches), from a cache. */
    void *(*host_alloc)(size_t nbytes);
    void (*host_free)(void *p, size_t nbytes);
} em_backend;

void em__register_backend(const em_backend *b);
/* A backend found on first use: `probe` (registered at load, without touching
 * the device) runs once, on the first em__backend(type), and returns the
 * table or NULL (no such device here). CUDA registers this way so that no
 * driver call happens at load or on CPU-only paths (a CUDA context made
 * before fork() is unusable in the child: Check's fork-mode tests). */
void em__register_backend_probe(em_device_type type, const em_backend *(*probe)(void));
const em_backend *em__backend(em_device_type type);   /* NULL when not registered (or the probe found none) */
/* Why dev has no backend, for a message: an unknown type, a build without
 * it, or a build with it on a machine without the device. Writes why. */
const char *em__backend_absent(em_device dev, char why[160]);
extern const em_backend em__cpu_backend;

/* The f32 GEMM precision (em_set_float32_matmul_precision): true for
 * "high"/"medium", where backends with TF32 may use it. */
bool em__matmul_allow_tf32(void);

#endif
