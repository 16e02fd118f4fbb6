/* ember — tensor/'s internals, all of them, for the files of tensor/ and
 * its backends. The layers above include only the narrow header they need:
 *
 *   tensor/support.h    errors and misuse, host allocations, file reads, CRC, JSON hooks
 *   tensor/construct.h  storages, new tensors and views, held references, shape helpers
 *   tensor/hooks.h      autograd's and amp's hooks into every op
 *   tensor/numeric.h    per-element conversion, Philox
 *   tensor/fused.h      the fused ops' front-ends (AdamW step, unscale, SDPA backward)
 *   tensor/backend.h    backends and dispatch (tensor/ and its backends only)
 *
 * Not installed. */
#ifndef EMBER_TENSOR_INTERNAL_H
#define EMBER_TENSOR_INTERNAL_H

#include "tensor/backend.h"
#include "tensor/construct.h"
#include "tensor/fused.h"
#include "tensor/hooks.h"
#include "tensor/numeric.h"
#include "tensor/support.h"

#endif
