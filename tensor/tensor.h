/* ember — tensor/: storage, dtypes, devices, views, memory, RNG, ops.
 *
 * Ownership (DESIGN.md §2 "Memory"):
 *   - Every function that returns an em_tensor* returns a NEW reference.
 *   - Inside an open scope (em_scope_begin/EM_SCOPE) that reference belongs to
 *     the scope and is dropped at em_scope_end, unless the caller em_keep()s it
 *     into the parent scope or em_retain()s it.
 *   - Outside any scope the caller owns the reference and must em_release() it.
 *   - Views share storage with their base; the storage lives while any view does.
 *
 * Failure (DESIGN.md §2 "Errors"):
 *   - Misuse (bad shapes, dtypes, devices, dims) goes to the misuse handler,
 *     which prints "ember: <op>: <what> (<caller file>:<line>)" and aborts.
 *   - Outside failures (OOM, I/O, corrupt files) return NULL or an em_status,
 *     and em_last_error() tells why. An op given a NULL input returns NULL and
 *     leaves the first error in place, so chains of ops propagate failure.
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

#define EM_MAX_DIMS 8

typedef enum em_dtype {
    EM_F32 = 0, EM_F64, EM_F16, EM_BF16, EM_I64, EM_I32, EM_BOOL,
    EM_NUM_DTYPES
} em_dtype;

typedef enum em_device_type { EM_DEVICE_CPU = 0, EM_DEVICE_CUDA = 1, EM_NUM_DEVICE_TYPES } em_device_type;

typedef struct em_device {
    int8_t type;   /* em_device_type */
    int8_t index;  /* CUDA ordinal; 0 for the CPU */
} em_device;

#define EM_CPU ((em_device){EM_DEVICE_CPU, 0})
#define EM_CUDA(i) ((em_device){EM_DEVICE_CUDA, (int8_t)(i)})

typedef enum em_status {
    EM_OK = 0,
    EM_ERR_OOM,         /* an allocation failed (or was made to fail)          */
    EM_ERR_IO,          /* open/read/write/rename failed                        */
    EM_ERR_FORMAT,      /* a file or string from outside is malformed           */
    EM_ERR_INVALID,     /* a value from outside is out of range / inconsistent  */
    EM_ERR_NOT_FOUND,   /* a named file, key or tensor is absent                */
    EM_ERR_UNSUPPORTED, /* valid request that this build/device cannot do       */
    EM_ERR_DEVICE,      /* CUDA / cuBLAS / cuDNN failure                        */
    EM_ERR_COMM,        /* MPI / NCCL failure, a peer rank died                 */
    EM_ERR_TIMEOUT,     /* a collective waited past its timeout                 */
    EM_NUM_STATUS
} em_status;

typedef struct em_storage em_storage;
struct em_autograd_meta;

/* A tensor is a strided view of a storage. Fields are public for reading;
 * change them only through ember's functions. */
typedef struct em_tensor {
    em_storage *storage;           /* shared with views; NULL never for live tensors */
    int64_t offset;                /* first element, in elements of dtype           */
    int ndim;                      /* 0 = scalar                                    */
    int64_t shape[EM_MAX_DIMS];    /* outermost first                               */
    int64_t stride[EM_MAX_DIMS];   /* in elements; 0 on broadcast dims              */
    em_dtype dtype;
    em_device device;
    int32_t refcount;
    struct em_autograd_meta *ag;   /* owned by autograd/; NULL for plain tensors    */
} em_tensor;

/* ---- errors ------------------------------------------------------------- */
const char *em_last_error(void);      /* message of the last outside failure on this thread */
em_status em_last_status(void);
void em_clear_error(void);
const char *em_status_name(em_status s);
typedef void (*em_misuse_handler)(const char *message, void *user);
/* Replaces the misuse handler (NULL restores print+abort). Returns the old one. */
em_misuse_handler em_set_misuse_handler(em_misuse_handler h, void *user);

/* ---- dtypes and devices ------------------------------------------------- */
size_t em_dtype_size(em_dtype dt);
const char *em_dtype_name(em_dtype dt);
bool em_dtype_is_float(em_dtype dt);
bool em_device_eq(em_device a, em_device b);
const char *em_device_str(em_device d, char buf[16]);
/* Threads used by CPU kernels: EM_NUM_THREADS, then OMP_NUM_THREADS, then cores. */
int em_num_threads(void);
void em_set_num_threads(int n);

/* ---- memory: refcounts, scopes, allocators ------------------------------ */
em_tensor *em_retain(em_tensor *t);   /* +1 reference; returns t               */
void em_release(em_tensor *t);        /* -1 reference; frees at 0; NULL is ok  */
void em_scope_begin(void);
void em_scope_end(void);
int em_scope_depth(void);
/* Moves one reference of t out of the current scope into the parent scope
 * (or to the caller, when the parent is the top level). Returns t. */
em_tensor *em_keep(em_tensor *t);
/* EM_SCOPE { ... } — do not `return`/`break` out of the block: the scope would stay open. */
#define EM_SCOPE for (int em__s_ = (em_scope_begin(), 0); !em__s_; em__s_ = (em_scope_end(), 1))

typedef struct em_allocator {
    void *(*alloc)(size_t nbytes, void *user);   /* NULL on failure */
    void (*free)(void *ptr, size_t nbytes, void *user);
    void *user;
} em_allocator;
typedef struct em_memory_stats {
    int64_t live_bytes, peak_bytes;   /* bytes held by live storages */
    int64_t cached_bytes;             /* bytes the caching allocator keeps for reuse */
    int64_t n_allocs, n_system_allocs;
} em_memory_stats;
em_memory_stats em_memory_stats_get(em_device dev);
void em_memory_reset_peak(em_device dev);
/* Installs a custom allocator for a device type (NULL restores the default).
 * Only call while no storage of that device is alive. */
void em_set_allocator(em_device_type type, const em_allocator *a);
/* Testing switch: the n-th allocation from now (1 = the next) fails with
 * EM_ERR_OOM, and so do all later ones while `sticky`. n = 0 disables. */
void em_alloc_fail_after(int64_t n, bool sticky);
void em_empty_cache(em_device dev);

/* ---- creation ----------------------------------------------------------- */
em_tensor *em_empty(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
em_tensor *em_zeros(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
em_tensor *em_ones(int ndim, const int64_t *shape, em_dtype dt, em_device dev);
em_tensor *em_full(int ndim, const int64_t *shape, double value, em_dtype dt, em_device dev);
em_tensor *em_scalar(double value, em_dtype dt, em_device dev);
em_tensor *em_arange(double start, double end, double step, em_dtype dt, em_device dev);
em_tensor *em_eye(int64_t n, int64_t m, em_dtype dt, em_device dev);
/* Copies host data (contiguous, of dtype dt) into a new CPU tensor. */
em_tensor *em_from_data(const void *data, int ndim, const int64_t *shape, em_dtype dt);
em_tensor *em_empty_like(em_tensor *t);
em_tensor *em_zeros_like(em_tensor *t);
em_tensor *em_fill_(em_tensor *t, double value);       /* in place; returns t */
/* Shape helper: EM_SHAPE(2,3) -> 2, (int64_t[]){2,3} */
#define EM_SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

/* ---- element access (CPU, for tests and teaching; slow) ----------------- */
double em_item(em_tensor *t);                    /* one-element tensor -> double */
double em_get(em_tensor *t, const int64_t *idx); /* element at idx (ndim entries) */
void em_set(em_tensor *t, const int64_t *idx, double v);
void *em_data_ptr(em_tensor *t);                 /* address of element 0 of the view */
int64_t em_numel(const em_tensor *t);
bool em_is_contiguous(const em_tensor *t);
int64_t em_size(const em_tensor *t, int dim);    /* negative dims count from the end */

/* ---- views (never copy) ------------------------------------------------- */
em_tensor *em_view(em_tensor *t, int ndim, const int64_t *shape);     /* -1 infers; misuse if not viewable */
em_tensor *em_reshape(em_tensor *t, int ndim, const int64_t *shape);  /* view when possible, else copy */
em_tensor *em_transpose(em_tensor *t, int d0, int d1);
em_tensor *em_permute(em_tensor *t, const int *dims);                 /* ndim entries */
em_tensor *em_narrow(em_tensor *t, int dim, int64_t start, int64_t length);
em_tensor *em_select(em_tensor *t, int dim, int64_t index);           /* drops dim */
em_tensor *em_expand(em_tensor *t, int ndim, const int64_t *shape);   /* -1 keeps */
em_tensor *em_broadcast_to(em_tensor *t, int ndim, const int64_t *shape);
em_tensor *em_squeeze(em_tensor *t, int dim);                         /* dim of size 1 */
em_tensor *em_unsqueeze(em_tensor *t, int dim);
em_tensor *em_flatten(em_tensor *t, int start_dim, int end_dim);
em_tensor *em_contiguous(em_tensor *t);   /* t itself (+1 ref) when already contiguous */
em_tensor *em_clone(em_tensor *t);
em_tensor *em_to(em_tensor *t, em_device dev);       /* +1 ref of t when already there */
em_tensor *em_to_dtype(em_tensor *t, em_dtype dt);   /* +1 ref of t when already dt   */
/* Copies src into dst (same shape; any layouts, dtypes, devices). Returns dst. */
em_tensor *em_copy_(em_tensor *dst, em_tensor *src);
/* Splits along dim into pieces of `size` (last may be shorter). Writes up to
 * max_out views to out; returns the number of pieces. */
int em_split(em_tensor *t, int64_t size, int dim, em_tensor **out, int max_out);

/* ---- elementwise (NumPy broadcasting; operands share dtype and device) -- */
em_tensor *em_add(em_tensor *a, em_tensor *b);
em_tensor *em_sub(em_tensor *a, em_tensor *b);
em_tensor *em_mul(em_tensor *a, em_tensor *b);
em_tensor *em_div(em_tensor *a, em_tensor *b);
em_tensor *em_pow(em_tensor *a, em_tensor *b);
em_tensor *em_maximum(em_tensor *a, em_tensor *b);
em_tensor *em_minimum(em_tensor *a, em_tensor *b);
em_tensor *em_eq(em_tensor *a, em_tensor *b);   /* comparisons return EM_BOOL */
em_tensor *em_ne(em_tensor *a, em_tensor *b);
em_tensor *em_lt(em_tensor *a, em_tensor *b);
em_tensor *em_le(em_tensor *a, em_tensor *b);
em_tensor *em_gt(em_tensor *a, em_tensor *b);
em_tensor *em_ge(em_tensor *a, em_tensor *b);
/* Scalar forms: the scalar is a 0-d tensor of a's dtype. */
em_tensor *em_add_scalar(em_tensor *a, double s);
em_tensor *em_mul_scalar(em_tensor *a, double s);
em_tensor *em_pow_scalar(em_tensor *a, double s);

em_tensor *em_neg(em_tensor *a);
em_tensor *em_abs(em_tensor *a);
em_tensor *em_exp(em_tensor *a);
em_tensor *em_log(em_tensor *a);
em_tensor *em_sqrt(em_tensor *a);
em_tensor *em_rsqrt(em_tensor *a);
em_tensor *em_tanh(em_tensor *a);
em_tensor *em_sigmoid(em_tensor *a);
em_tensor *em_relu(em_tensor *a);
em_tensor *em_gelu(em_tensor *a);        /* erf form, as torch's default */
em_tensor *em_gelu_tanh(em_tensor *a);   /* approximate="tanh"          */
em_tensor *em_sin(em_tensor *a);
em_tensor *em_cos(em_tensor *a);

em_tensor *em_where(em_tensor *cond, em_tensor *x, em_tensor *y);   /* cond is EM_BOOL */
em_tensor *em_masked_fill(em_tensor *x, em_tensor *mask, double value);

/* ---- reductions ----------------------------------------------------------
 * dims: ndims entries (negative allowed); ndims = 0 reduces every dim. */
em_tensor *em_sum(em_tensor *t, int ndims, const int *dims, bool keepdim);
em_tensor *em_mean(em_tensor *t, int ndims, const int *dims, bool keepdim);
em_tensor *em_var(em_tensor *t, int ndims, const int *dims, double correction, bool keepdim);
em_tensor *em_logsumexp(em_tensor *t, int ndims, const int *dims, bool keepdim);
em_tensor *em_norm(em_tensor *t, double p, int ndims, const int *dims, bool keepdim); /* p: 1, 2, INFINITY, any >0 */
/* max/min along one dim; *indices (i64) gets the first index of the extreme when non-NULL. */
em_tensor *em_max(em_tensor *t, int dim, bool keepdim, em_tensor **indices);
em_tensor *em_min(em_tensor *t, int dim, bool keepdim, em_tensor **indices);
em_tensor *em_argmax(em_tensor *t, int dim, bool keepdim);
em_tensor *em_max_all(em_tensor *t);
em_tensor *em_min_all(em_tensor *t);
#define EM_DIMS(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__}

/* ---- linear algebra and NN kernels -------------------------------------- */
/* [..., M, K] x [..., K, N] -> [..., M, N], batch dims broadcast; 1-d operands as torch.matmul. */
em_tensor *em_matmul(em_tensor *a, em_tensor *b);
/* As torch.set_float32_matmul_precision: "highest" (the default: full f32)
 * or "high"/"medium" (f32 GEMMs may use TF32 tensor cores, about 1e-3
 * relative error, on devices that have them; the CPU always computes in f32).
 * Any other string is misuse. The getter returns the current name. */
void em_set_float32_matmul_precision(const char *precision);
const char *em_get_float32_matmul_precision(void);
em_tensor *em_softmax(em_tensor *t, int dim);
em_tensor *em_log_softmax(em_tensor *t, int dim);
/* Normalizes over the last dim. weight/bias: [D] or NULL. mean/rstd (f32, the
 * leading shape) are returned when the pointers are non-NULL. */
em_tensor *em_layer_norm(em_tensor *x, em_tensor *weight, em_tensor *bias, double eps,
                         em_tensor **mean, em_tensor **rstd);
/* Returns dx; writes dweight/dbias when the pointers are non-NULL. */
em_tensor *em_layer_norm_backward(em_tensor *dy, em_tensor *x, em_tensor *mean, em_tensor *rstd,
                                  em_tensor *weight, em_tensor **dweight, em_tensor **dbias);
/* weight [V, D], ids (i64 or i32) of any shape -> [..., D]. */
em_tensor *em_embedding(em_tensor *weight, em_tensor *ids);
/* Scatter-adds dy [..., D] rows into a zero [V, D]; rows of padding_idx (>=0) stay zero. */
em_tensor *em_embedding_backward(em_tensor *dy, em_tensor *ids, int64_t num_embeddings, int64_t padding_idx);
/* Inverted dropout with a Philox mask keyed by (seed, offset): keeps with
 * probability 1-p and scales by 1/(1-p). *mask (EM_BOOL) when non-NULL. */
em_tensor *em_dropout(em_tensor *x, double p, uint64_t seed, uint64_t offset, em_tensor **mask);
typedef enum em_reduction { EM_REDUCE_MEAN = 0, EM_REDUCE_SUM, EM_REDUCE_NONE } em_reduction;
/* logits [N, C], target i64 [N]. ignore_index rows add nothing and do not count in the mean. */
em_tensor *em_cross_entropy(em_tensor *logits, em_tensor *target, int64_t ignore_index, em_reduction red);
/* dloss: scalar (mean/sum) or [N] (none). Returns dlogits [N, C]. */
em_tensor *em_cross_entropy_backward(em_tensor *dloss, em_tensor *logits, em_tensor *target,
                                     int64_t ignore_index, em_reduction red);
em_tensor *em_cat(int n, em_tensor *const *ts, int dim);
em_tensor *em_stack(int n, em_tensor *const *ts, int dim);
em_tensor *em_index_select(em_tensor *t, int dim, em_tensor *index);
em_tensor *em_gather(em_tensor *t, int dim, em_tensor *index);
/* out = copy of t; out[index[i][j]][j] += src[i][j] (dim 0 example). */
em_tensor *em_scatter_add(em_tensor *t, int dim, em_tensor *index, em_tensor *src);

/* ---- random (Philox4x32-10 keyed by (seed, offset)) --------------------- */
void em_set_seed(uint64_t seed);
uint64_t em_get_seed(void);
/* The global generator: each draw takes `seed` and advances the offset by
 * the counters it used, so the same seed replays the same stream. */
typedef struct em_rng_state { uint64_t seed, offset; } em_rng_state;
em_rng_state em_rng_get_state(void);
void em_rng_set_state(em_rng_state s);
/* Reserves n 128-bit Philox counters of the global stream; returns the first. */
uint64_t em_rng_reserve(uint64_t n);
em_tensor *em_rand(int ndim, const int64_t *shape, em_dtype dt, em_device dev);   /* U[0,1) */
em_tensor *em_randn(int ndim, const int64_t *shape, em_dtype dt, em_device dev);  /* N(0,1) */
em_tensor *em_bernoulli(int ndim, const int64_t *shape, double p, em_device dev); /* EM_BOOL */
em_tensor *em_randperm(int64_t n, uint64_t seed, uint64_t offset);               /* i64, CPU */
em_tensor *em_uniform_(em_tensor *t, double low, double high);
em_tensor *em_normal_(em_tensor *t, double mean, double std);

/* ---- printing ----------------------------------------------------------- */
/* Like PyTorch's repr: "tensor([[1., 2.],\n        [3., 4.]])", summarised ("...")
 * beyond 1000 elements. */
void em_tensor_print(em_tensor *t, FILE *f);
/* Writes the repr into buf (truncated to cap); returns the full length. */
size_t em_tensor_repr(em_tensor *t, char *buf, size_t cap);

/* ---- safetensors -------------------------------------------------------- */
typedef struct em_safetensors em_safetensors;   /* an mmap'd, validated file */
em_status em_safetensors_open(const char *path, em_safetensors **out);
void em_safetensors_close(em_safetensors *st);
int em_safetensors_count(const em_safetensors *st);
const char *em_safetensors_name(const em_safetensors *st, int i);   /* file order */
/* __metadata__ value of key, or NULL. */
const char *em_safetensors_metadata(const em_safetensors *st, const char *key);
/* A new CPU tensor holding a copy of the named tensor (NULL + EM_ERR_NOT_FOUND if absent). */
em_tensor *em_safetensors_get(em_safetensors *st, const char *name);
/* Writes tensors atomically (path.tmp.<pid>, fsync, rename). metadata: n_meta key/value pairs. */
em_status em_safetensors_save(const char *path, int n, const char *const *names, em_tensor *const *ts,
                              int n_meta, const char *const *meta_keys, const char *const *meta_values);

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
