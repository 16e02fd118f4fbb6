/* ember — distributed/ddp/: DDP internals for the Accelerator (accelerator*.c)
 * and the tests. Not installed. */
#ifndef EMBER_DDP_INTERNAL_H
#define EMBER_DDP_INTERNAL_H

#include "distributed/ddp/ddp.h"

/* Optional: marks "backward begins now" for the bucket timeline
 * (em_ddp_buckets' *_ms fields). Without it the timeline starts at the first
 * gradient hook of the step. Call right before em_backward. */
void em__ddp_mark_backward_begin(em_ddp *d);
bool em__ddp_require_sync(const em_ddp *d);
/* True once the buckets have been rebuilt from the observed gradient order
 * (after the first synced em_ddp_finish_backward). */
bool em__ddp_rebuilt(const em_ddp *d);
/* Number of contiguous slices (one all-reduce each) of bucket b; 1 unless a
 * rebuild grouped parameters that are not adjacent in the flat buffer. */
int em__ddp_bucket_runs(const em_ddp *d, int b);
/* The model DDP wraps. */
em_module *em__ddp_module(const em_ddp *d);

#endif
