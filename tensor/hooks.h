/* ember — the hooks through which the layers above tensor/ see every op:
 * autograd's recording and freeing, amp's autocast. Installed from above at
 * load time; tensor/ calls them and knows nothing else of those layers. Not installed. */
#ifndef EMBER_TENSOR_HOOKS_H
#define EMBER_TENSOR_HOOKS_H

#include "tensor/tensor.h"
#include "tensor/ops.h"

/* Called when a tensor is freed, to free t->ag. Set by autograd/. */
extern void (*em__ag_free_hook)(em_tensor *t);
/* Called after every op's kernel ran; autograd records a node here. A failure
 * (OOM) makes the op fail: it returns NULL with the error set. */
extern em_status (*em__record_hook)(const em_kargs *k);
/* Whether gradients are being recorded (autograd's grad mode, on this
 * thread). Set by autograd/; NULL (no autograd linked in) means no. amp's
 * cast cache keys its entries by it. */
extern bool (*em__grad_mode_hook)(void);
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

#endif
