/* ember — tensor/ internals shared by the tensor layer, its backends and the
 * layers above (autograd, amp). Not installed. */
#ifndef EMBER_TENSOR_INTERNAL_H
#define EMBER_TENSOR_INTERNAL_H

#include "tensor/tensor.h"
#include "tensor/ops.h"

#include <stdarg.h>

/* ---- storage ------------------------------------------------------------ */
struct em_storage {
    void *data;          /* owned; freed through the device allocator at refcount 0 */
    size_t nbytes;
    em_device device;
    int32_t refcount;    /* one per tensor (view) that points here */
    uint32_t version;    /* bumped by every in-place write; autograd checks it */
};

/* ---- errors -------------------------------------------------------------
 * em__misuse: formats "ember: <op>: <msg> (<caller>)" and calls the handler.
 * The default handler aborts; a test handler may return, in which case the op
 * returns NULL. em__fail: records an outside failure; returns the status. */
void em__misuse(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
em_status em__fail(em_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The common mistakes that still run (DESIGN: warn once, name the fix): the
 * first call with *once == false prints "ember: warning: <op>: <msg>" to
 * stderr and sets *once; later calls print nothing. The caller owns the flag
 * (a static for once per process). */
void em__warn_once(bool *once, const char *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "[2,3,4]" in a small thread-local ring of buffers (8 live at once). */
const char *em__shape_str(const em_tensor *t);
const char *em__dims_str(int ndim, const int64_t *shape);

/* Misuse check inside a function returning a pointer. */
#define EM_CHECK(cond, op, ...) do { if (!(cond)) { em__misuse(op, __VA_ARGS__); return NULL; } } while (0)
/* NULL in, NULL out: an earlier failure propagates without a second message.
 * A released tensor (stale pointer) is a misuse error named after the function. */
#define EM_PROPAGATE_NULL(...) EM_PROPAGATE_NULL_IN(__func__, __VA_ARGS__)
/* The same, where the public name is a variable (a helper shared by several ops). */
#define EM_PROPAGATE_NULL_IN(op, ...) do { em_tensor *em__in_[] = {__VA_ARGS__}; \
    for (size_t em__i = 0; em__i < sizeof em__in_ / sizeof *em__in_; em__i++) \
        if (!em__in_[em__i] || !em__live(em__in_[em__i], op)) return NULL; } while (0)
/* Whether t (not NULL) is a live tensor; otherwise reports misuse in op and
 * returns false. One load and compare: cheap enough for every entry point. */
void em__misuse_dead(const em_tensor *t, const char *op);
static inline bool em__live(const em_tensor *t, const char *op)
{
    if (__builtin_expect(t->magic == EM_TENSOR_LIVE, 1)) return true;
    em__misuse_dead(t, op);
    return false;
}

/* CRC-32C (Castagnoli) of n bytes; _update continues a running value (start
 * with 0), so update(update(0, a), b) is the CRC of a then b. tensor/crc32c.c */
uint32_t em__crc32c(const void *data, size_t n);
uint32_t em__crc32c_update(uint32_t crc, const void *data, size_t n);

/* The whole file at path in a new em__malloc'd buffer (*size bytes plus a
 * NUL; free with em__free). EM_ERR_NOT_FOUND (absent) or EM_ERR_IO naming
 * path with the reason; EM_ERR_FORMAT when larger than max bytes (0: no
 * limit); EM_ERR_OOM. tensor/readfile.c */
em_status em__read_file(const char *path, size_t max, char **data, size_t *size);

/* ---- host allocations (metadata, scratch) ---------------------------------
 * Every allocation, host metadata included, goes through these so the
 * fail-the-Nth switch reaches it. On failure they set EM_ERR_OOM. */
void *em__malloc(size_t n);
void *em__calloc(size_t n, size_t size);
void *em__realloc(void *p, size_t n);
/* A copy of s in em__malloc memory (free with em__free); NULL on OOM (recorded). */
char *em__strdup(const char *s);
void em__free(void *p);
bool em__alloc_should_fail(void);   /* consumes one tick of the fail-Nth switch */

/* Installs ember's allocation hooks into cJSON (once; tensor/json.c). */
void em__json_init(void);
/* What a cJSON value is, for messages ("a string", "an array", "missing" for NULL). */
const char *em__json_kind(const void *cjson_value);

/* ---- device memory -------------------------------------------------------- */
em_storage *em__storage_new(size_t nbytes, em_device dev);   /* NULL + EM_ERR_OOM */
/* The CPU caching allocator (alloc.c): 64-byte aligned, blocks reused by size
 * class so a steady loop never returns to the system. */
void *em__cpu_alloc(size_t nbytes);
void em__cpu_free(void *p, size_t nbytes);
void em__storage_release(em_storage *s);

/* ---- tensor construction ------------------------------------------------- */
/* A new contiguous tensor, owned by the current scope (see tensor.h). */
em_tensor *em__empty(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
/* A view of base's storage with the given geometry, owned by the current scope. */
em_tensor *em__view_of(em_tensor *base, int ndim, const int64_t *shape, const int64_t *stride, int64_t offset);
/* References that a scope or a module holds (em_tensor.held): taken and given
 * back only through these, so that em_release can refuse a caller's release of
 * a reference it does not own (tensor.c). */
em_tensor *em__retain_held(em_tensor *t);
void em__release_held(em_tensor *t);
/* Hands a freshly made reference to the current scope (no-op at top level). */
em_tensor *em__scope_adopt(em_tensor *t);
void em__contiguous_strides(int ndim, const int64_t *shape, int64_t *stride);
int em__wrap_dim(int dim, int ndim, const char *op);   /* -1 and misuse if out of range */
/* NumPy broadcast of two shapes into out; false if incompatible. */
bool em__broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b, int *nout, int64_t *out);

/* ---- hooks for the layers above (tensor/ knows nothing of them) ----------- */
/* Called when a tensor is freed, to free t->ag. Set by autograd/. */
extern void (*em__ag_free_hook)(em_tensor *t);
/* Called after every op's kernel ran; autograd records a node here. A failure
 * (OOM) makes the op fail: it returns NULL with the error set. */
extern em_status (*em__record_hook)(const em_kargs *k);
/* Autocast (amp/, DESIGN.md §3 "amp"). When set, op front-ends pass each
 * floating input through it at entry: arg is the input's position. It returns
 * t itself or a cast of t made by em_to_dtype (a recorded COPY, so gradients
 * flow back through it), valid until the op returns (owned by the current
 * scope or by amp). NULL on OOM. Front-ends call it through em__autocast. */
extern em_tensor *(*em__autocast_hook)(em_op op, int arg, em_tensor *t);
static inline em_tensor *em__autocast(em_op op, int arg, em_tensor *t)
{
    return em__autocast_hook && t ? em__autocast_hook(op, arg, t) : t;
}
/* A new reference-counted header over t's storage and geometry, without
 * autograd metadata and NOT owned by any scope (the caller releases it). */
em_tensor *em__alias(em_tensor *t);

/* ---- dispatch -------------------------------------------------------------
 * Runs k->op on the device of its first output (or first input), through the
 * device's backend table, then calls the record hook. Misuse when the device
 * has no kernel for the op; returns the kernel's status. */
em_status em__dispatch(em_kargs *k);
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

/* ---- per-element conversion (tensor/convert.c) ----------------------------- */
double em__load(const void *p, em_dtype dt);
void em__store(void *p, em_dtype dt, double v);   /* rounds to nearest even; ints truncate toward 0 */
/* Contiguous bulk conversion of n elements (vectorized for f32<->f16/bf16). */
void em__convert_n(void *dst, em_dtype ddt, const void *src, em_dtype sdt, int64_t n);
uint16_t em__f32_to_bf16(float f);
float em__bf16_to_f32(uint16_t h);
uint16_t em__f32_to_f16(float f);
float em__f16_to_f32(uint16_t h);

/* ---- Philox4x32-10 (tensor/rng.c) ------------------------------------------
 * The four 32-bit outputs for counter `counter` under key `seed`. Identical on
 * every device: CUDA kernels implement the same function. */
void em__philox(uint64_t seed, uint64_t counter, uint32_t out[4]);
/* 16 consecutive blocks at once: x[j] = em__philox(seed, first + j), the same
 * bits (AVX-512 lanes where available). */
void em__philox_batch16(uint64_t seed, uint64_t first, uint32_t x[16][4]);
/* The full-width generator (128-bit counter, 64-bit key), as in Random123. */
void em__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* u in [0,1) from 24 random bits: (x >> 8) * 2^-24 (exactly representable in f32). */
static inline float em__u32_to_unit(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

#endif
