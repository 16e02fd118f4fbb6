/* ember — the op table (DESIGN.md §2 "Ops").
 *
 * Every op is one row of em_op_table, indexed by em_op. A row names the op,
 * its arity and its class. Kernels live in each device's backend table
 * (em_backend.kernels[op]); backward rules and gradcheck tolerances live in
 * autograd's table, indexed by the same enum. The op functions in tensor/op_*.c
 * validate arguments once (device-independent), allocate outputs, fill an
 * em_kargs and call em__dispatch.
 *
 * Kernel contract: em_status kernel(const em_kargs *k). Outputs are allocated
 * by the caller and contiguous unless noted; inputs may be any strided view
 * (stride 0 on broadcast dims) unless noted. A kernel never allocates device
 * memory it does not free before returning.
 */
#ifndef EMBER_OPS_H
#define EMBER_OPS_H

#include "tensor/unary_ops.h"

#include <stdbool.h>
#include <stdint.h>

struct em_tensor;

#define EM_OP_LIST(X) EM_VIEW_OP_LIST(X) EM_KERNEL_OP_LIST(X)
/* views: no kernel; recorded for autograd */
#define EM_VIEW_OP_LIST(X) X(VIEW) X(PERMUTE) X(NARROW) X(SELECT) X(EXPAND)
/* every other op has a kernel on every backend */
#define EM_KERNEL_OP_LIST(X)                                                             \
    /* creation: out[0]; FILL f[0]=value; ARANGE f[0]=start f[1]=step; EYE (2-d) */     \
    X(FILL) X(ARANGE) X(EYE)                                                             \
    /* COPY: in[0] -> out[0], same shape, any layouts and dtypes (out may be strided) */ \
    X(COPY)                                                                              \
    /* binary: in[0], in[1] broadcastable to out's shape (the kernel broadcasts); same dtype; cmp ops out EM_BOOL. \
       ADD, SUB on the CPU also take f32 with one f16/bf16 operand -> out f32 (widened exactly, f32 math) */  \
    X(ADD) X(SUB) X(MUL) X(DIV) X(POW) X(MAXIMUM) X(MINIMUM)                             \
    X(EQ) X(NE) X(LT) X(LE) X(GT) X(GE)                                                  \
    /* unary: in[0] -> out[0], same shape and dtype; the list is tensor/unary_ops.h */   \
    EM_UNARY_OP_NAMES(X)                                                                 \
    /* WHERE: in[0]=cond bool, in[1]=x, in[2]=y, all broadcastable to out's shape */         \
    /* MASKED_FILL: in[0]=x, in[1]=mask bool broadcastable; f[0]=value */                     \
    X(WHERE) X(MASKED_FILL)                                                              \
    /* reductions: in[0]; i[0]=bitmask of reduced dims; out[0] has in's ndim with the   \
       reduced dims set to 1 (the op reshapes for keepdim=false). VAR f[0]=correction;  \
       NORM f[0]=p. MAX/MIN/ARGMAX reduce one dim; out[1] (or out[0] for ARGMAX) i64   \
       indices, out[1] may be NULL. Accumulate in f64 for f32/f64 inputs. */            \
    X(SUM) X(MEAN) X(VAR) X(LOGSUMEXP) X(NORM) X(MAX) X(MIN) X(ARGMAX)                   \
    /* MATMUL: in[0] [B..,M,K], in[1] [B..,K,N] expanded batch dims, either of the last  \
       two strides may be 1 (transposed operands are not copied); out[0] [B..,M,N].     \
       i[0]=1: out[0] (contiguous, f32/f64) is added into, out += A B (GEMM beta = 1); \
       then A and B may also be bf16 or f16 with an f32 out (2-d on the CPU) */        \
    X(MATMUL)                                                                            \
    /* SOFTMAX/LOG_SOFTMAX: in[0] contiguous, i[0]=dim -> out[0].                        \
       *_BWD: in[0]=y (the forward output), in[1]=dy -> out[0]=dx; i[0]=dim */           \
    X(SOFTMAX) X(LOG_SOFTMAX) X(SOFTMAX_BWD) X(LOG_SOFTMAX_BWD)                          \
    /* <unary>_BWD (GELU_BWD, ...: unary_ops.h's DERIV rows): in[0]=x, in[1]=dy (x's     \
       shape, dtype and device) -> out[0]=dy * f'(x); in[2]=y=f(x) (the forward's       \
       output, x's shape, dtype and device) or NULL: a kernel may read it where that   \
       gives the same bits (GELU f32 on the CPU: Phi(x) = y / x) or ignore it */        \
    EM_UNARY_BWD_NAMES(X)                                                                \
    /* LAYER_NORM: in[0]=x [R,D] contiguous, in[1]=w [D] or NULL, in[2]=b or NULL,       \
       f[0]=eps -> out[0]=y, out[1]=mean, out[2]=rstd [R] (f32; f64 for f64 x).                   \
       LAYER_NORM_BWD: in[0]=dy, in[1]=x, in[2]=mean, in[3]=rstd, in[4]=w or NULL        \
       -> out[0]=dx, out[1]=dw or NULL, out[2]=db or NULL */                             \
    X(LAYER_NORM) X(LAYER_NORM_BWD)                                                      \
    /* EMBEDDING: in[0]=w [V,D], in[1]=ids i64/i32 (checked < V) -> out[0] [N,D];        \
       i[1]=1 when i[0] holds a padding_idx (for autograd; the kernel ignores both).     \
       EMBEDDING_BWD: in[0]=dy [N,D], in[1]=ids [N] -> out[0]=dw [V,D] (kernel zeroes);  \
       i[0]=padding_idx or -1; i[1]=1: out[0] (contiguous) is added into instead, each   \
       picked row += its rounded sum, rows no id picked (and padding_idx) untouched */   \
    X(EMBEDDING) X(EMBEDDING_BWD)                                                        \
    /* DROPOUT: in[0]=x -> out[0]=y, out[1]=mask bool or NULL; f[0]=p; i[0]=seed,      \
       i[1]=offset. in[1]: NULL, or the contiguous bool mask that this key gives for     \
       x's shape (a forward's out[1], saved by autograd): a kernel may read it instead   \
       of generating it; y is the same either way */                                     \
    X(DROPOUT)                                                                           \
    /* CROSS_ENTROPY: in[0]=logits [N,C], in[1]=target i64 [N] -> out[0]=loss ([] or [N]),\
       out[1]=lse f32 [N]; i[0]=ignore_index, i[1]=em_reduction.                         \
       CROSS_ENTROPY_BWD: in[0]=logits, in[1]=target, in[2]=lse, in[3]=dloss ([] or [N]) \
       -> out[0]=dlogits; i as forward */                                                \
    X(CROSS_ENTROPY) X(CROSS_ENTROPY_BWD)                                                \
    /* CAT: list[0..nlist) -> out[0]; i[0]=dim */                                        \
    X(CAT)                                                                               \
    /* INDEX_SELECT: in[0]=x, in[1]=index i64 1-d; GATHER: in[1] index same ndim;        \
       SCATTER_ADD: in[0]=self, in[1]=index, in[2]=src, out[0] starts as a copy of self;\
       i[0]=dim. Indices are validated by the op before dispatch. */                     \
    X(INDEX_SELECT) X(GATHER) X(SCATTER_ADD)                                             \
    /* RAND U[f0,f1), RANDN N(f0,f1), BERNOULLI p=f0 (bool): out[0]; i[0]=seed, i[1]=offset\
       (the first Philox counter; element e uses counter offset + e/4, lane e%4) */      \
    X(RAND) X(RANDN) X(BERNOULLI)                                                        \
    /* SDPA: fused attention dropout(softmax(f[0] q k^T, keys >= lens[b] filled with the \
       dtype's lowest finite value), f[1]) v. in[0]=q [B,H,Sq,D], in[1]=k, in[2]=v       \
       [B,H,Sk,D] (one float dtype, any strides), in[3]=lens i32 [B] (key padding: keys  \
       j >= lens[b] masked) or NULL; f[1] the dropout p in [0,1) on the [B,H,Sq,Sk]     \
       weights, keyed like DROPOUT by i[0]=seed, i[1]=offset; i[2]=1: queries i >=      \
       lens[b] are padding, their rows of out[0], out[1] and of q's gradient are 0 (a  \
       composed fallback computes them; callers must not read them) -> out[0]         \
       [B,H,Sq,D] (D contiguous, other strides any: em__sdpa_result), out[1]=lse f32   \
       [B,H,Sq,1] (logsumexp of the masked scaled scores). Packed rows: in[4]=starts   \
       i64 [B] or NULL; when given, q, k, v, out[0] are [1,H,N,D], out[1] [1,H,N,1],   \
       sequence b holds rows starts[b] .. starts[b]+lens[b]-1 (in order from row 0,    \
       each 1..S rows: the op checks), i[2]=1, and i[3]=S, the padded length whose     \
       [B,H,S,S] numbering the dropout mask keeps: the values of the padded call's    \
       rows (op_sdpa_packed.c). A                                                       \
       decline a case with EM_ERR_UNSUPPORTED, no error set (cuDNN's engine: half types \
       only, no dropout); em__sdpa then composes it (op_grad.c). */                      \
    X(SDPA)                                                                              \
    /* LINEAR: y = x w^T + b. in[0]=b [N] or NULL, in[1]=x [M,K], in[2]=w [N,K], one    \
       float dtype, any strides (the op hands GEMM-ready x and w: one stride 1) ->     \
       out[0]=y [M,N]. The op flattens x's leading dims with recorded views. Bias first \
       as in torch's addmm(b, x, w^T): backward then makes b's gradient ready before   \
       w's (reverse registration order, which DDP's buckets follow). */                 \
    X(LINEAR)                                                                            \
    /* Fused kernels for the layers above (class EM_CLASS_FUSED, not recorded; their   \
       front-ends are in tensor/fused.h).                                               \
       ADAMW_STEP: one AdamW update in place (optim/adamw.c has the math): out[0]=p,  \
       out[1]=m, out[2]=v, out[3]=vmax or NULL (amsgrad), in[0]=g; all contiguous, n \
       elements, one dtype (f32/f64), one device. f[0]=decay (1 - lr wd), f[1]=w1     \
       (1 - beta1), f[2]=beta2, f[3]=w2 (1 - beta2), f[4]=sqrt(1 - beta2^step),        \
       f[5]=-lr/(1 - beta1^step), f[6]=eps, f[7]=sign (-1: maximize); i[0]=1: lerp as  \
       m + w1 (g-m) (else g - (1-w1)(g-m)); i[1]=1: torch's fused multiply-adds;      \
       i[2]=1: L2 decay as torch.optim.Adam: f[0] is the weight decay wd != 0, the     \
       gradient becomes g sign + wd p (add with alpha) and p is not decayed. Each      \
       scalar is rounded to the dtype once; the loop is optim/adamw.c's, bit-exactly.  \
       UNSCALE: list[0..nlist) contiguous f32/f64 tensors of one device, multiplied in \
       place by f[0] (skipped when f[0] == 1) -> out[0] f32 [1] on that device: 1 when \
       any element was inf/NaN before scaling, else 0 (GradScaler's unscale).          \
       SDPA_BWD: SDPA's gradient in one pass: in[0..2]=q, k, v, in[3]=lens or NULL,   \
       in[4]=out, in[5]=lse (SDPA's outputs), in[6]=dout (out's shape, any strides);  \
       f[0]=scale, f[1]=dropout p, i[0]=seed, i[1]=offset, i[2]=pad_queries, as SDPA; \
       in[7]=starts and i[3]=S for packed rows, as SDPA's in[4] and i[3]               \
       -> out[0..2]=dq, dk, dv (D contiguous, other strides any). A kernel may decline \
       a layout it does not take (cuDNN: contiguous only), or a case, with              \
       EM_ERR_UNSUPPORTED, nothing written, no error set (autograd then composes). */  \
    X(ADAMW_STEP) X(UNSCALE) X(SDPA_BWD)

typedef enum em_op {
#define EM_OP_ENUM(name) EM_OP_##name,
    EM_OP_LIST(EM_OP_ENUM)
#undef EM_OP_ENUM
    EM_NUM_OPS
} em_op;

typedef enum em_op_class {
    EM_CLASS_VIEW, EM_CLASS_CREATE, EM_CLASS_COPY, EM_CLASS_BINARY, EM_CLASS_COMPARE,
    EM_CLASS_UNARY, EM_CLASS_SELECT, EM_CLASS_REDUCE, EM_CLASS_LINALG, EM_CLASS_NN,
    EM_CLASS_SHAPE, EM_CLASS_INDEX, EM_CLASS_RANDOM, EM_CLASS_FUSED
} em_op_class;

#define EM_KARGS_IN 8
#define EM_KARGS_OUT 4
typedef struct em_kargs {
    em_op op;
    struct em_tensor *in[EM_KARGS_IN];
    struct em_tensor *out[EM_KARGS_OUT];
    struct em_tensor *const *list;   /* CAT's and UNSCALE's tensors */
    int nlist;
    double f[8];
    int64_t i[4];
    bool inplace;   /* out[0] is an existing tensor written in place (em_copy_, em_fill_) */
} em_kargs;

typedef int (*em_kernel)(const em_kargs *k);   /* returns an em_status */

typedef struct em_op_def {
    const char *name;          /* "add", as in error messages and DOT graphs */
    int n_in, n_out;           /* fixed arity; CAT uses list */
    em_op_class cls;
    bool differentiable;       /* has (or will have) a backward rule in autograd/ */
} em_op_def;

extern const em_op_def em_op_table[EM_NUM_OPS];

#endif
