/* ember — the CPU elementwise iterator (a small TensorIterator).
 *
 * em__iter_run walks up to EM_ITER_MAX_OPS tensors of one logical shape in
 * lockstep and calls an inner-loop function once per innermost row:
 *
 *     fn(ptrs, byte_strides, n, ctx)
 *
 * where ptrs[i] points at the row's first element of operand i and
 * byte_strides[i] is the distance in bytes between its consecutive elements
 * (0 for a broadcast operand). The function must handle any strides; it is
 * expected to test for the contiguous case (stride == element size) and the
 * broadcast-scalar case (stride 0) and vectorize those.
 *
 * Shapes: operand 0 (the output, by convention) defines the shape. Every
 * other operand must have that shape or be broadcastable to it under NumPy
 * rules (dims aligned from the right; a dim of size 1 is repeated with byte
 * stride 0). Strides may be anything, including negative ones.
 *
 * Before iterating, dims of size 1 are dropped, dims are ordered so that
 * operand 0 is walked in memory order, and adjacent dims that are contiguous
 * with each other in every operand are merged — a contiguous tensor becomes
 * one long row. The element range is split across OpenMP threads (rows and,
 * when there are few, pieces of a row), each thread getting at least `grain`
 * elements, so tiny tensors run on the calling thread. 0-d tensors are one
 * element; tensors with a 0-sized dim call fn zero times.
 *
 * An input read across its rows (a transposed view: its stride along the
 * walk's inner dim is a cache line or more, along the next one less) would
 * thrash the cache, so then the walk goes by tiles of 32 x 64 elements of the
 * two inner dims: such inputs are copied a tile at a time into per-thread
 * scratch, and fn gets rows of 64 (or fewer) with those pointers in the
 * scratch (stride = element size). An input pointer may therefore lie outside
 * its tensor's storage; only output (operand 0) pointers are always in place.
 *
 * fn runs concurrently on disjoint element ranges; it must not write shared
 * state (ctx is read-only from its point of view).
 */
#ifndef EMBER_CPU_ITER_H
#define EMBER_CPU_ITER_H

#include "tensor/tensor_internal.h"

#define EM_ITER_MAX_OPS 4

typedef void (*em_iter_fn)(char **ptrs, const int64_t *byte_strides, int64_t n, void *ctx);

/* Default grain for cheap ops (add, copy); use a smaller one for costly ops.
 * EM_ITER_GRAIN_HEAVY also turns on software prefetching of the inputs (iter.c):
 * fn is then called on blocks of 1024 elements of a long row. */
#define EM_ITER_GRAIN 32768
#define EM_ITER_GRAIN_HEAVY 4096

/* Runs fn over every element of ts[0]'s shape (see above). grain <= 0 means
 * EM_ITER_GRAIN. nops is 1..EM_ITER_MAX_OPS. CPU tensors only. */
void em__iter_run(int nops, em_tensor *const *ts, em_iter_fn fn, void *ctx, int64_t grain);

#endif
