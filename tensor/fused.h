/* ember — the fused kernels' front-ends, for the layers above tensor/ (optim's
 * AdamW, amp's GradScaler, autograd's SDPA rule). Each is one op of the table
 * (ops.h ADAMW_STEP, UNSCALE, SDPA_BWD; and an in-place ADD for autograd): the CPU and CUDA kernels sit in the
 * backends' kernels[] like every other op, so the op tests and the CPU/CUDA
 * parity loop cover them. Not installed. Misuse (a dead or mismatched tensor)
 * goes to the handler and returns EM_ERR_INVALID; nothing is recorded for
 * autograd. */
#ifndef EMBER_TENSOR_FUSED_H
#define EMBER_TENSOR_FUSED_H

#include "tensor/tensor.h"

/* dst += src in place (src broadcastable to dst; dst contiguous; one dtype
 * and device): one ADD kernel, as autograd's gradient accumulation needs
 * (dst requires no grad, so nothing is recorded). Returns the kernel's status. */
em_status em__add_into(em_tensor *dst, em_tensor *src);

/* Fills *hdr with a header over n contiguous elements of t's storage from
 * t's offset (1-d), for the callers' runs of adjacent tensors (a flat
 * buffer). Allocates nothing and cannot fail: the header is the caller's
 * (on its stack), shares t's storage without a reference and without
 * autograd metadata, is valid while t lives, and is never released. */
void em__run_header(em_tensor *hdr, em_tensor *t, int64_t n);

/* AdamW's per-step scalars, in double as optim computes them (optim/adamw.c). */
typedef struct em_adamw_scalars {
    double decay;      /* 1 - lr*wd (1 when wd == 0); with l2: wd       */
    double w1;         /* 1 - beta1                                     */
    double beta2, w2;  /* beta2, 1 - beta2                              */
    double bc2_sqrt;   /* (1 - beta2^step)^0.5                          */
    double neg_step;   /* -lr / (1 - beta1^step)                        */
    double eps;
    double sign;       /* -1 with maximize, else 1                      */
    bool small;        /* lerp as m + w1*(g-m) (else g - (1-w1)*(g-m))  */
    bool fma;          /* torch's fused multiply-adds (a CPU with FMA)  */
    bool l2;           /* decay coupled into the gradient (torch.optim.Adam; wd != 0) */
} em_adamw_scalars;

/* One AdamW update of p, m, v (and vmax, amsgrad; or NULL) in place from g:
 * contiguous tensors of n elements, one dtype (f32/f64), one device.
 * EM_OK, or the kernel's failure (a CUDA error); nothing is allocated. */
em_status em__adamw_step(em_tensor *p, em_tensor *g, em_tensor *m, em_tensor *v, em_tensor *vmax,
                         const em_adamw_scalars *c);

/* t[i] *= inv in place for n contiguous f32/f64 tensors of one device (no
 * multiply when inv == 1); *found_inf |= whether any element was inf/NaN
 * before scaling. One kernel and one read of its flag. */
em_status em__unscale(em_tensor *const *t, int n, float inv, bool *found_inf);

/* SDPA's fused backward (ops.h SDPA_BWD): dq, dk, dv (contiguous, allocated
 * by the caller) from the forward's inputs and outputs and dout. Returns
 * EM_ERR_UNSUPPORTED, nothing written and no error set, for a case the
 * device's kernel declines (the caller composes the gradient). */
em_status em__sdpa_backward(em_tensor *dq, em_tensor *dk, em_tensor *dv, em_tensor *q, em_tensor *k, em_tensor *v,
                            em_tensor *lens, double scale, em_tensor *out, em_tensor *lse, em_tensor *dout,
                            double dropout_p, uint64_t seed, uint64_t offset, bool pad_queries);
/* The same for the packed op (em__sdpa_packed): q, k, v, out, dout, dq, dk, dv
 * [1,H,N,D], lens and starts the forward's (S its padded length). */
em_status em__sdpa_backward_packed(em_tensor *dq, em_tensor *dk, em_tensor *dv, em_tensor *q, em_tensor *k,
                                   em_tensor *v, em_tensor *lens, em_tensor *starts, int64_t S, double scale,
                                   em_tensor *out, em_tensor *lse, em_tensor *dout, double dropout_p, uint64_t seed,
                                   uint64_t offset);

#endif
