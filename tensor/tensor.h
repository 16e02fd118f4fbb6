/** @file
 * ember — tensor/: storage, dtypes, devices, views, memory, RNG, ops.
 *
 * Ownership (DESIGN.md §2 "Memory"):
 *   - Every function that returns an em_tensor* returns a NEW reference.
 *   - Inside an open scope (em_scope_begin/EM_SCOPE) that reference belongs to
 *     the scope and is dropped at em_scope_end, unless the caller em_keep()s it
 *     into the parent scope or em_retain()s it.
 *   - Outside any scope the caller owns the reference and must em_release() it.
 *   - The one rule: em_release only references you own (results made outside
 *     any scope, and your em_retain's). Whoever else holds one -- a scope, a
 *     module that registered the tensor -- releases its own; an em_release
 *     that would take theirs is misuse (tensor.c checks em_tensor.held).
 *   - Views share storage with their base; the storage lives while any view does.
 *
 * Failure (DESIGN.md §2 "Errors"):
 *   - Misuse (bad shapes, dtypes, devices, dims) goes to the misuse handler,
 *     which prints "ember: <op>: <what> (<caller file>:<line>)" and aborts.
 *   - Outside failures (OOM, I/O, corrupt files) return NULL or an em_status,
 *     and em_last_error() tells why. An op given a NULL input returns NULL and
 *     leaves the first error in place, so chains of ops propagate failure.
 *
 * Every op below follows these rules unless its comment says otherwise; the
 * comments add the shapes, the dtypes, and what counts as misuse.
 */
#ifndef EMBER_TENSOR_H
#define EMBER_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The most dims a tensor may have; shapes and strides are arrays of this size. */
#define EM_MAX_DIMS 8

/** Element types. Float ops take EM_F32, EM_F64, EM_F16 and EM_BF16; indices are
 * EM_I64 or EM_I32; comparisons and masks are EM_BOOL (one byte, 0 or 1). */
typedef enum em_dtype {
    EM_F32 = 0, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_BOOL,
    EM_NUM_DTYPES
} em_dtype;

/** The kind of device a storage lives on. EM_DEVICE_CUDA needs a CUDA build. */
typedef enum em_device_type { EM_DEVICE_CPU = 0, EM_DEVICE_CUDA = 1, EM_NUM_DEVICE_TYPES } em_device_type;

/** A device: its type and, for CUDA, its ordinal. Compare with em_device_eq. */
typedef struct em_device {
    int8_t type;   /**< em_device_type */
    int8_t index;  /**< CUDA ordinal; 0 for the CPU */
} em_device;

/** The CPU device. */
#define EM_CPU ((em_device){EM_DEVICE_CPU, 0})
/** CUDA device number i. */
#define EM_CUDA(i) ((em_device){EM_DEVICE_CUDA, (int8_t)(i)})

/** What a function that can fail because of the outside world returns:
 * EM_OK, or why it failed (em_last_error has the message). */
typedef enum em_status {
    EM_OK = 0,
    EM_ERR_OOM,         /**< an allocation failed (or was made to fail)          */
    EM_ERR_IO,          /**< open/read/write/rename failed                        */
    EM_ERR_FORMAT,      /**< a file or string from outside is malformed           */
    EM_ERR_INVALID,     /**< a value from outside is out of range / inconsistent  */
    EM_ERR_NOT_FOUND,   /**< a named file, key or tensor is absent                */
    EM_ERR_UNSUPPORTED, /**< valid request that this build/device cannot do       */
    EM_ERR_DEVICE,      /**< CUDA / cuBLAS / cuDNN failure                        */
    EM_ERR_COMM,        /**< MPI / NCCL failure, a peer rank died                 */
    EM_ERR_TIMEOUT,     /**< a collective waited past its timeout                 */
    EM_NUM_STATUS
} em_status;

/** The reference-counted memory block behind tensors (opaque; see
 * tensor_internal.h). Views of one tensor share it. */
typedef struct em_storage em_storage;
struct em_autograd_meta;

/** A tensor is a strided view of a storage. Fields are public for reading;
 * change them only through ember's functions. */
typedef struct em_tensor {
    em_storage *storage;           /**< shared with views; NULL never for live tensors */
    int64_t offset;                /**< first element, in elements of dtype           */
    int ndim;                      /**< 0 = scalar                                    */
    int64_t shape[EM_MAX_DIMS];    /**< outermost first                               */
    int64_t stride[EM_MAX_DIMS];   /**< in elements; 0 on broadcast dims              */
    em_dtype dtype;                /**< element type                                */
    em_device device;              /**< where the storage lives                     */
    int32_t refcount;              /**< references held (em_retain, em_release)     */
    int32_t held;                  /**< of those, the ones scopes and modules hold: em_release refuses them */
    struct em_autograd_meta *ag;   /**< owned by autograd/; NULL for plain tensors    */
    uint32_t magic;                /**< EM_TENSOR_LIVE while alive; the API checks it on entry, so a tensor used
                                        or released after its last release is a misuse error, not a crash */
} em_tensor;

/** em_tensor.magic of a live tensor. A released tensor's header is kept a
 * while (a quarantine of recent frees) with another value, so a stale pointer
 * passed to ember is caught and named instead of reading reused memory. */
#define EM_TENSOR_LIVE 0x7e1150a1u

/* ---- errors ------------------------------------------------------------- */
const char *em_last_error(void);      /**< message of the last outside failure on this thread */
/** The status of the last outside failure on this thread (EM_OK after em_clear_error). */
em_status em_last_status(void);
/** Forgets the last error of this thread: empty message, EM_OK. */
void em_clear_error(void);
/** A short static name for a status ("out of memory", "not found", ...). */
const char *em_status_name(em_status s);
/** Receives each misuse message, "ember: op: what (file:line)". The default
 * prints it and aborts; a handler that returns makes the op return NULL (or 0). */
typedef void (*em_misuse_handler)(const char *message, void *user);
/** Replaces the misuse handler (NULL restores print+abort). Returns the old one.
 * Process-wide, not per thread. */
em_misuse_handler em_set_misuse_handler(em_misuse_handler h, void *user);

/* ---- dtypes and devices ------------------------------------------------- */
/** Bytes per element of dt (0 for an invalid dtype). */
size_t em_dtype_size(em_dtype dt);
/** torch's name of dt ("float32", "bfloat16", "int64", "bool", ...); "invalid" otherwise. */
const char *em_dtype_name(em_dtype dt);
/** Whether dt is one of the four floating types. */
bool em_dtype_is_float(em_dtype dt);
/** Whether a and b are the same device (type and index). */
bool em_device_eq(em_device a, em_device b);
/** Writes "cpu" or "cuda:N" into buf (16 bytes, the caller's) and returns buf; "typeT:N" for a type that is no device. */
const char *em_device_str(em_device d, char buf[16]);
/** How many devices of this type the machine has for ember (torch.cuda.device_count()):
 * 1 for the CPU; for CUDA, 0 in a build without CUDA or on a machine without a
 * usable GPU. The first CUDA query initializes the driver (not before fork()). */
int em_device_count(em_device_type type);
/** Threads used by CPU kernels: EM_NUM_THREADS, then OMP_NUM_THREADS, then cores
 * (read once, at the first call). */
int em_num_threads(void);
/** Sets the CPU kernel thread count (and OpenMP's); n <= 0 means one per core. */
void em_set_num_threads(int n);

/* ---- memory: refcounts, scopes, allocators ------------------------------ */
em_tensor *em_retain(em_tensor *t);   /**< +1 reference; returns t               */
void em_release(em_tensor *t);        /**< -1 reference; frees at 0; NULL is ok  */
/** Opens a scope on this thread: op results made until the matching
 * em_scope_end belong to it. Scopes nest. */
void em_scope_begin(void);
/** Closes the innermost scope, releasing its references newest first. Misuse
 * when no scope is open. */
void em_scope_end(void);
/** Open scopes on this thread (0: top level, where the caller owns results). */
int em_scope_depth(void);
/** Moves one reference of t out of the current scope into the parent scope
 * (or to the caller, when the parent is the top level). Returns t (NULL for
 * NULL). Misuse outside any scope; NULL with EM_ERR_OOM if the parent cannot grow. */
em_tensor *em_keep(em_tensor *t);
/** EM_SCOPE { ... } — do not `return`/`break` out of the block: the scope would stay open. */
#define EM_SCOPE for (int em__s_ = (em_scope_begin(), 0); !em__s_; em__s_ = (em_scope_end(), 1))

/** A device allocator (em_set_allocator): alloc returns nbytes or NULL; free
 * gets the same size back. user is passed through. */
typedef struct em_allocator {
    void *(*alloc)(size_t nbytes, void *user);   /**< NULL on failure */
    void (*free)(void *ptr, size_t nbytes, void *user);   /**< releases what alloc returned */
    void *user;                                           /**< passed to both */
} em_allocator;
/** Memory counters of one device (em_memory_stats_get). */
typedef struct em_memory_stats {
    /** @{ */
    int64_t live_bytes, peak_bytes;   /**< bytes held by live storages now, and their most since the last reset */
    /** @} */
    int64_t cached_bytes;             /**< bytes the caching allocator keeps for reuse */
    /** @{ */
    int64_t n_allocs, n_system_allocs;   /**< storages allocated, and of those the allocations that reached the system (cache misses) */
    /** @} */
} em_memory_stats;
/** A snapshot of dev's counters (for CUDA, the cache figures come from its backend). */
em_memory_stats em_memory_stats_get(em_device dev);
/** Sets dev's peak_bytes to its current live_bytes. */
void em_memory_reset_peak(em_device dev);
/** Installs a custom allocator for a device type (NULL restores the default).
 * Only call while no storage of that device is alive. */
void em_set_allocator(em_device_type type, const em_allocator *a);
/** Testing switch: the n-th allocation from now (1 = the next) fails with
 * EM_ERR_OOM, and so do all later ones while `sticky`. n = 0 disables. */
void em_alloc_fail_after(int64_t n, bool sticky);
/** Returns the blocks dev's caching allocator keeps to the system (torch.cuda.empty_cache). */
void em_empty_cache(em_device dev);

/* ---- creation ----------------------------------------------------------- */
/** A new contiguous tensor of the given shape (ndim entries, ndim <= EM_MAX_DIMS),
 * its values uninitialized. Misuse: a negative size, an invalid dtype. NULL on OOM. */
em_tensor *em_empty(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
/** As em_empty, filled with 0. */
em_tensor *em_zeros(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
/** As em_empty, filled with 1. */
em_tensor *em_ones(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
/** As em_empty, filled with value converted to dt (floats round to nearest
 * even, integers truncate toward zero, bool is value != 0). */
em_tensor *em_full(int ndim, const int64_t *shape, double value, em_dtype dt, em_device dev);
/** A 0-d tensor holding value (converted to dt as em_full does). */
em_tensor *em_scalar(double value, em_dtype dt, em_device dev);
/** 1-d: the ceil((end - start) / step) values start + i*step, as torch.arange.
 * Misuse: a nonfinite argument, step 0, or a step that moves away from end. */
em_tensor *em_arange(double start, double end, double step, em_dtype dt, em_device dev);
/** An [n, m] matrix with ones on the diagonal, zeros elsewhere. Misuse: n or m negative. */
em_tensor *em_eye(int64_t n, int64_t m, em_dtype dt, em_device dev);
/** Copies host data (contiguous, of dtype dt, numel elements) into a new CPU
 * tensor; data stays the caller's. NULL on OOM. */
em_tensor *em_from_data(const void *data, int ndim, const int64_t *shape, em_dtype dt);
/** An uninitialized contiguous tensor of t's shape, dtype and device. */
em_tensor *em_empty_like(em_tensor *t);
/** A zero tensor of t's shape, dtype and device. */
em_tensor *em_zeros_like(em_tensor *t);
em_tensor *em_fill_(em_tensor *t, double value);       /**< in place, any layout; returns t (no new reference); misuse on an expanded (stride 0) dim */
/** Shape helper: EM_SHAPE(2,3) -> 2, (int64_t[]){2,3} */
#define EM_SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* ---- element access (CPU, for tests and teaching; slow) ----------------- */
double em_item(em_tensor *t);                    /**< one-element CPU tensor -> double; misuse otherwise */
double em_get(em_tensor *t, const int64_t *idx); /**< element at idx (ndim entries) of a CPU tensor; misuse out of range */
void em_set(em_tensor *t, const int64_t *idx, double v);   /**< writes one element as em_get reads it (bumps the storage version) */
void *em_data_ptr(em_tensor *t);                 /**< address of element 0 of the view (a device pointer for CUDA); borrowed */
int64_t em_numel(const em_tensor *t);            /**< number of elements (1 for 0-d) */
bool em_is_contiguous(const em_tensor *t);       /**< row-major with no gaps (size-1 dims ignored) */
int64_t em_size(const em_tensor *t, int dim);    /**< size of dim; negative dims count from the end; misuse out of range */

/* ---- views (never copy) -------------------------------------------------
 * A view shares t's storage (writes through it show in t) and is recorded for
 * autograd; the result is a new reference like any op result. */
em_tensor *em_view(em_tensor *t, int ndim, const int64_t *shape);     /**< -1 infers; misuse if not viewable */
em_tensor *em_reshape(em_tensor *t, int ndim, const int64_t *shape);  /**< view when possible, else copy */
em_tensor *em_transpose(em_tensor *t, int d0, int d1);                /**< swaps two dims */
em_tensor *em_permute(em_tensor *t, const int *dims);                 /**< ndim entries */
em_tensor *em_narrow(em_tensor *t, int dim, int64_t start, int64_t length);   /**< [start, start+length) of dim; misuse past its end */
em_tensor *em_select(em_tensor *t, int dim, int64_t index);           /**< element index of dim; drops dim */
em_tensor *em_expand(em_tensor *t, int ndim, const int64_t *shape);   /**< size-1 dims repeated with stride 0 (new leading dims allowed); -1 keeps; in-place writes to it are misuse */
em_tensor *em_broadcast_to(em_tensor *t, int ndim, const int64_t *shape);   /**< em_expand by another name */
em_tensor *em_squeeze(em_tensor *t, int dim);                         /**< removes dim, which must have size 1 */
em_tensor *em_unsqueeze(em_tensor *t, int dim);                       /**< inserts a size-1 dim at dim (in [-ndim-1, ndim]) */
em_tensor *em_flatten(em_tensor *t, int start_dim, int end_dim);      /**< merges dims start..end (inclusive); a view when possible, else a copy */
em_tensor *em_contiguous(em_tensor *t);   /**< t itself (+1 ref) when already contiguous */
em_tensor *em_clone(em_tensor *t);        /**< a contiguous copy (recorded: gradients flow back) */
em_tensor *em_to(em_tensor *t, em_device dev);       /**< a contiguous copy on dev; +1 ref of t when already there; misuse for a device this build lacks */
em_tensor *em_to_dtype(em_tensor *t, em_dtype dt);   /**< converted copy (recorded); +1 ref of t when already dt */
/** Copies src into dst (same shape; any layouts, dtypes, devices). Returns dst
 * (no new reference). Misuse: shapes differ, dst has an expanded dim. */
em_tensor *em_copy_(em_tensor *dst, em_tensor *src);
/** Splits along dim into pieces of `size` (last may be shorter). Writes up to
 * max_out views to out (each a new reference); returns the number of pieces,
 * which may exceed max_out. Misuse: size <= 0. */
int em_split(em_tensor *t, int64_t size, int dim, em_tensor **out, int max_out);

/* ---- elementwise (NumPy broadcasting; operands share dtype and device) --
 * Binary ops: the result has the broadcast shape and the operands' dtype,
 * except that f32 with f16/bf16 (or f16 with bf16) computes in f32. Misuse: a
 * device or dtype mismatch, shapes that do not broadcast, a dtype the op does
 * not take. Unary ops keep shape and dtype. */
em_tensor *em_add(em_tensor *a, em_tensor *b);       /**< a + b (numeric dtypes: not bool) */
em_tensor *em_sub(em_tensor *a, em_tensor *b);       /**< a - b (numeric dtypes) */
em_tensor *em_mul(em_tensor *a, em_tensor *b);       /**< a * b (numeric dtypes) */
em_tensor *em_div(em_tensor *a, em_tensor *b);       /**< a / b, true division (float dtypes only) */
em_tensor *em_pow(em_tensor *a, em_tensor *b);       /**< a ** b (numeric dtypes) */
em_tensor *em_maximum(em_tensor *a, em_tensor *b);   /**< elementwise max (numeric dtypes) */
em_tensor *em_minimum(em_tensor *a, em_tensor *b);   /**< elementwise min (numeric dtypes) */
em_tensor *em_eq(em_tensor *a, em_tensor *b);   /**< a == b, EM_BOOL (comparisons take every dtype) */
em_tensor *em_ne(em_tensor *a, em_tensor *b);   /**< a != b, EM_BOOL */
em_tensor *em_lt(em_tensor *a, em_tensor *b);   /**< a < b, EM_BOOL */
em_tensor *em_le(em_tensor *a, em_tensor *b);   /**< a <= b, EM_BOOL */
em_tensor *em_gt(em_tensor *a, em_tensor *b);   /**< a > b, EM_BOOL */
em_tensor *em_ge(em_tensor *a, em_tensor *b);   /**< a >= b, EM_BOOL */
/** a + s, the scalar as a 0-d tensor of a's dtype: no promotion, so an integer
 * a takes only an integral s (misuse otherwise). */
em_tensor *em_add_scalar(em_tensor *a, double s);
/** a * s, with s as em_add_scalar takes it. */
em_tensor *em_mul_scalar(em_tensor *a, double s);
/** a ** s, with s as em_add_scalar takes it (in an autocast region a is f32 first). */
em_tensor *em_pow_scalar(em_tensor *a, double s);

em_tensor *em_neg(em_tensor *a);       /**< -a (numeric dtypes) */
em_tensor *em_abs(em_tensor *a);       /**< |a| (numeric dtypes) */
em_tensor *em_exp(em_tensor *a);       /**< e^a (float dtypes, as every op below but relu) */
em_tensor *em_log(em_tensor *a);       /**< natural log */
em_tensor *em_sqrt(em_tensor *a);      /**< square root */
em_tensor *em_rsqrt(em_tensor *a);     /**< 1 / sqrt(a) */
em_tensor *em_tanh(em_tensor *a);      /**< hyperbolic tangent */
em_tensor *em_sigmoid(em_tensor *a);   /**< 1 / (1 + e^-a) */
em_tensor *em_relu(em_tensor *a);      /**< max(a, 0) (numeric dtypes) */
em_tensor *em_gelu(em_tensor *a);        /**< erf form, as torch's default */
em_tensor *em_gelu_tanh(em_tensor *a);   /**< approximate="tanh"          */
em_tensor *em_sin(em_tensor *a);         /**< sine */
em_tensor *em_cos(em_tensor *a);         /**< cosine */
em_tensor *em_silu(em_tensor *a);        /**< a * sigmoid(a), torch's silu (swish) */

em_tensor *em_where(em_tensor *cond, em_tensor *x, em_tensor *y);   /**< cond ? x : y, all three broadcast; cond EM_BOOL, x and y one dtype */
/** x with value (converted to x's dtype) where mask is true; mask is EM_BOOL
 * and broadcasts to x's shape (misuse otherwise). */
em_tensor *em_masked_fill(em_tensor *x, em_tensor *mask, double value);

/* ---- reductions ----------------------------------------------------------
 * dims: ndims entries (negative allowed); ndims = 0 reduces every dim. */
/** Sum over dims (keepdim keeps them as size 1). Every dtype: integers and
 * bool sum into i64. An empty reduction is 0. Misuse: a dim out of range or repeated. */
em_tensor *em_sum(em_tensor *t, int ndims, const int *dims, bool keepdim);
/** Mean over dims, as em_sum; float dtypes only (NaN for an empty reduction). */
em_tensor *em_mean(em_tensor *t, int ndims, const int *dims, bool keepdim);
/** Variance over dims with Bessel-style correction (1: unbiased, 0: population;
 * misuse below 0); float dtypes only. */
em_tensor *em_var(em_tensor *t, int ndims, const int *dims, double correction, bool keepdim);
/** log(sum(exp(t))) over dims, computed stably; float dtypes only (-inf when empty). */
em_tensor *em_logsumexp(em_tensor *t, int ndims, const int *dims, bool keepdim);
em_tensor *em_norm(em_tensor *t, double p, int ndims, const int *dims, bool keepdim); /**< p-norm over dims (p: 1, 2, INFINITY, any > 0; misuse otherwise); float dtypes */
/** max/min along one dim; *indices (i64) gets the first index of the extreme when non-NULL.
 * Both results are new references; the values keep t's dtype. Misuse: a zero-size dim. */
em_tensor *em_max(em_tensor *t, int dim, bool keepdim, em_tensor **indices);
/** The minimum along dim, as em_max. */
em_tensor *em_min(em_tensor *t, int dim, bool keepdim, em_tensor **indices);
em_tensor *em_argmax(em_tensor *t, int dim, bool keepdim);   /**< i64 index of the first maximum along dim */
em_tensor *em_max_all(em_tensor *t);   /**< 0-d maximum of every element; misuse when t is empty */
em_tensor *em_min_all(em_tensor *t);   /**< 0-d minimum of every element; misuse when t is empty */
/** Dims helper: EM_DIMS(0, -1) -> 2, (int[]){0, -1} */
#define EM_DIMS(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__}

/* ---- linear algebra and NN kernels -------------------------------------- */
/** [..., M, K] x [..., K, N] -> [..., M, N], batch dims broadcast; 1-d operands as torch.matmul.
 * Same float dtype and device; misuse when the inner sizes differ. */
em_tensor *em_matmul(em_tensor *a, em_tensor *b);
/** torch.nn.functional.linear: x [..., in] @ weight^T + bias -> [..., out], one
 * recorded op. weight [out, in], bias [out] or NULL; one float dtype and device
 * (misuse otherwise). On the CPU the same numbers as em_matmul(x, em_transpose(
 * weight, 0, 1)) then em_add(., bias); on CUDA the bias is fused into the GEMM
 * (cuBLASLt epilogue) where possible. In an autocast region all three operands
 * take the region's low dtype, as em_matmul's. */
em_tensor *em_linear(em_tensor *x, em_tensor *weight, em_tensor *bias);
/** As torch.set_float32_matmul_precision: "highest" (the default: full f32)
 * or "high"/"medium" (f32 GEMMs may use TF32 tensor cores, about 1e-3
 * relative error, on devices that have them; the CPU always computes in f32).
 * Any other string is misuse. The getter returns the current name. */
void em_set_float32_matmul_precision(const char *precision);
/** The current f32 matmul precision: "highest", "high" or "medium" (static string). */
const char *em_get_float32_matmul_precision(void);
/** softmax over dim (negative counts from the end), same shape and dtype; float
 * dtypes only (in an autocast region it runs in f32). */
em_tensor *em_softmax(em_tensor *t, int dim);
/** log(softmax(t)) over dim, computed stably; as em_softmax. */
em_tensor *em_log_softmax(em_tensor *t, int dim);
/** Normalizes over the last dim. weight/bias: [D] or NULL. mean/rstd (f32, or
 * f64 for f64 x; x's shape without its last dim) are returned as new
 * references when the pointers are non-NULL. x: float, at least 1-d; eps >= 0. */
em_tensor *em_layer_norm(em_tensor *x, em_tensor *weight, em_tensor *bias, double eps,
                         em_tensor **mean, em_tensor **rstd);
/** The backward of em_layer_norm from its saved mean/rstd: returns dx (x's shape);
 * writes dweight/dbias ([D], new references) when the pointers are non-NULL. */
em_tensor *em_layer_norm_backward(em_tensor *dy, em_tensor *x, em_tensor *mean, em_tensor *rstd,
                                  em_tensor *weight, em_tensor **dweight, em_tensor **dbias);
/** weight [V, D], ids (i64 or i32) of any shape -> [..., D] rows of weight.
 * Misuse: an id outside [0, V), weight and ids on different devices. */
em_tensor *em_embedding(em_tensor *weight, em_tensor *ids);
/** Scatter-adds dy [..., D] rows into a zero [V, D] (V = num_embeddings);
 * rows of padding_idx (>=0) stay zero; -1: no padding row. dy is float. */
em_tensor *em_embedding_backward(em_tensor *dy, em_tensor *ids, int64_t num_embeddings, int64_t padding_idx);
/** Inverted dropout with a Philox mask keyed by (seed, offset): keeps with
 * probability 1-p and scales by 1/(1-p). *mask (EM_BOOL, a new reference)
 * when non-NULL. x is float; p in [0, 1] (misuse otherwise). */
em_tensor *em_dropout(em_tensor *x, double p, uint64_t seed, uint64_t offset, em_tensor **mask);
/** How a loss reduces its per-row values: their mean, their sum, or none (a tensor of them). */
typedef enum em_reduction { EM_REDUCE_MEAN = 0, EM_REDUCE_SUM, EM_REDUCE_NONE } em_reduction;
/** logits [N, C] (float), target i64 [N]. ignore_index rows add nothing and do
 * not count in the mean. A 0-d loss, or [N] for EM_REDUCE_NONE. Misuse: shapes
 * or dtypes off, a target outside [0, C) that is not ignore_index. */
em_tensor *em_cross_entropy(em_tensor *logits, em_tensor *target, int64_t ignore_index, em_reduction red);
/** dloss: scalar (mean/sum) or [N] (none). Returns dlogits [N, C]. */
em_tensor *em_cross_entropy_backward(em_tensor *dloss, em_tensor *logits, em_tensor *target,
                                     int64_t ignore_index, em_reduction red);
/** Concatenates ts[0..n) along dim: one dtype and device, equal sizes but in
 * dim (a 1-d [0] tensor may join any cat, as in torch). Misuse: n < 1, 0-d inputs. */
em_tensor *em_cat(int n, em_tensor *const *ts, int dim);
/** Stacks n tensors of equal shape along a new dim -> [..., n, ...]. */
em_tensor *em_stack(int n, em_tensor *const *ts, int dim);
/** The slices index[i] (1-d or 0-d, i64/i32, each in [0, size of dim)) of t
 * along dim, in index order; dim gets numel(index) entries. */
em_tensor *em_index_select(em_tensor *t, int dim, em_tensor *index);
/** out[i][j] = t[index[i][j]][j] for dim 0 (torch.gather): out has index's shape;
 * index i64/i32 with t's ndim, no larger than t in the other dims. */
em_tensor *em_gather(em_tensor *t, int dim, em_tensor *index);
/** out = copy of t; out[index[i][j]][j] += src[i][j] (dim 0 example). src has
 * t's dtype (not bool) and ndim; index as em_gather's, no larger than src. */
em_tensor *em_scatter_add(em_tensor *t, int dim, em_tensor *index, em_tensor *src);

/* ---- random (Philox4x32-10 keyed by (seed, offset)) --------------------- */
/** Seeds the global generator and resets its offset to 0 (process-wide). */
void em_set_seed(uint64_t seed);
/** The global generator's seed (0 until em_set_seed). */
uint64_t em_get_seed(void);
/** The global generator: each draw takes `seed` and advances the offset by
 * the counters it used, so the same seed replays the same stream. */
typedef struct em_rng_state { /** @{ the key, and the next free counter */ uint64_t seed, offset; /** @} */ } em_rng_state;
/** The global generator's (seed, offset), for checkpoints. */
em_rng_state em_rng_get_state(void);
/** Restores a state from em_rng_get_state: later draws replay from there. */
void em_rng_set_state(em_rng_state s);
/** Reserves n 128-bit Philox counters of the global stream; returns the first. */
uint64_t em_rng_reserve(uint64_t n);
em_tensor *em_rand(int ndim, const int64_t *shape, em_dtype dt, em_device dev);   /**< U[0,1) from the global stream; dt a float dtype */
em_tensor *em_randn(int ndim, const int64_t *shape, em_dtype dt, em_device dev);  /**< N(0,1) from the global stream; dt a float dtype */
em_tensor *em_bernoulli(int ndim, const int64_t *shape, double p, em_device dev); /**< EM_BOOL, true with probability p (in [0, 1]) */
em_tensor *em_randperm(int64_t n, uint64_t seed, uint64_t offset);               /**< a permutation of 0..n-1, i64 on the CPU; depends only on (n, seed, offset) */
/** Fills float t in place with U[low, high) from the global stream; returns t
 * (no new reference). Misuse: low > high, a nonfinite bound, an expanded dim. */
em_tensor *em_uniform_(em_tensor *t, double low, double high);
/** Fills float t in place with N(mean, std^2) (std >= 0); as em_uniform_. */
em_tensor *em_normal_(em_tensor *t, double mean, double std);

/* ---- printing ----------------------------------------------------------- */
/** Like PyTorch's repr: "tensor([[1., 2.],\n        [3., 4.]])", summarised ("...")
 * beyond 1000 elements, then a newline, to f (NULL: stdout). CPU and CUDA tensors. */
void em_tensor_print(em_tensor *t, FILE *f);
/** Writes the repr into buf (truncated to cap, always NUL-terminated when cap > 0);
 * returns the full length, as snprintf. */
size_t em_tensor_repr(em_tensor *t, char *buf, size_t cap);

/* ---- safetensors -------------------------------------------------------- */
typedef struct em_safetensors em_safetensors;   /**< an mmap'd, validated file */
/** Maps and validates path (header JSON, dtypes, shapes, offsets that tile the
 * data exactly) into *out, which the caller closes. On failure *out is NULL:
 * EM_ERR_NOT_FOUND, EM_ERR_IO, EM_ERR_FORMAT or EM_ERR_UNSUPPORTED naming path. */
em_status em_safetensors_open(const char *path, em_safetensors **out);
/** Unmaps and frees st; NULL is ok. Tensors read from it stay valid (they are copies). */
void em_safetensors_close(em_safetensors *st);
/** Tensors in the file (0 for NULL). */
int em_safetensors_count(const em_safetensors *st);
const char *em_safetensors_name(const em_safetensors *st, int i);   /**< name of tensor i (file order), owned by st; misuse out of range */
/** The `__metadata__` value of key (owned by st), or NULL. */
const char *em_safetensors_metadata(const em_safetensors *st, const char *key);
/** A new CPU tensor holding a copy of the named tensor (NULL + EM_ERR_NOT_FOUND if absent). */
em_tensor *em_safetensors_get(em_safetensors *st, const char *name);
/** Writes tensors atomically (a temporary file named after path and the pid,
 * fsync, rename). metadata: n_meta key/value pairs.
 * Tensors must be on the CPU (any layout); misuse for NULL names or a reserved name;
 * EM_ERR_IO naming path when writing fails. */
em_status em_safetensors_save(const char *path, int n, const char *const *names, em_tensor *const *ts,
                              int n_meta, const char *const *meta_keys, const char *const *meta_values);
/** As em_safetensors_save, plus the CRC-32C of the data section in the
 * `__metadata__` key "ember_crc32c" (8 hex digits; other readers ignore it).
 * em_safetensors_open verifies it when present and refuses a damaged file
 * (EM_ERR_FORMAT naming it). The key is reserved: passing it is misuse. */
em_status em_safetensors_save_checked(const char *path, int n, const char *const *names, em_tensor *const *ts,
                                      int n_meta, const char *const *meta_keys, const char *const *meta_values);

/* ---- profiling --------------------------------------------------------------
 * Per-op kernel time, for finding where a step goes (torch.profiler's table,
 * by op). EMBER_PROFILE=1 in the environment turns it on at load and prints
 * the whole process's table to stderr at exit. CPU kernels are timed whole;
 * on CUDA only the launch is (synchronize around the region to see it all). */
/** Turns the per-op timing on or off (off by default; costs one clock read per op when on). */
void em_profile_enable(bool on);
/** Zeroes every op's counters. */
void em_profile_reset(void);
/** Prints the counters since the last reset, largest first: op, calls, ms and share of the
 * total, with title (may be NULL) in the heading; f NULL means stderr. */
void em_profile_print(FILE *f, const char *title);

/* ---- caller locations for misuse messages --------------------------------
 * User code calls ops through same-named macros that record __FILE__:__LINE__;
 * the library itself is built with EMBER_BUILDING and calls the functions. */
void em__at(const char *file, int line);
#ifndef EMBER_BUILDING
#define EM__AT(fn, ...) (em__at(__FILE__, __LINE__), fn(__VA_ARGS__))
#include "tensor/tensor_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
