/** @file
 * ember — distributed/: the umbrella header of the distributed layer, which
 * comes in four parts, each with a header of its own (DESIGN.md §3
 * "distributed"; docs/ARCHITECTURE.md "distributed/"):
 *
 *   distributed/pg/pg.h                    the process group: collectives over MPI,
 *                                          shared memory and NCCL behind one table
 *   distributed/ddp/ddp.h                  DDP on top of it: bucketed all-reduce
 *                                          overlapped with backward
 *   distributed/accelerate/accelerator.h   the Accelerator on top of DDP, and the
 *                                          GradScaler steps that drive an optimizer
 *   distributed/tracking/tracking.h        progress bar, JSONL logger, TensorBoard
 *                                          writer; apart (the Accelerator may use it)
 *
 * Including this one includes all four.
 */
#ifndef EMBER_DISTRIBUTED_H
#define EMBER_DISTRIBUTED_H

#include "distributed/pg/pg.h"
#include "distributed/ddp/ddp.h"
#include "distributed/accelerate/accelerator.h"
#include "distributed/tracking/tracking.h"

#endif
