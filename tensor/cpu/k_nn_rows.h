/* ember — row helpers shared by the CPU NN kernels (k_nn.c, k_layer_norm.c).
 * A "row" of a tensor along dim is the set of elements that differ only in
 * that dim; rows are numbered in row-major order of the other dims. Rows are
 * gathered into f32 (f32/f16/bf16) or f64 (f64) scratch, computed there, and
 * scattered back. */
#ifndef EMBER_CPU_K_NN_ROWS_H
#define EMBER_CPU_K_NN_ROWS_H

#include "tensor/cpu/cpu.h"

#include <omp.h>

#define PAR_MIN_WORK 32768      /* elements below which one thread does it all */

static inline int threads_for(int64_t work, int64_t units)
{
    if (work < PAR_MIN_WORK || units < 2 || omp_in_parallel()) return 1;
    int nt = em_num_threads();
    return nt > units ? (int)units : (nt < 1 ? 1 : nt);
}

static inline char *data_of(const em_tensor *t) { return (char *)t->storage->data; }
static inline int64_t dim_size(const em_tensor *t, int dim) { return dim < 0 ? 1 : t->shape[dim]; }
static inline int64_t dim_stride(const em_tensor *t, int dim) { return dim < 0 ? 0 : t->stride[dim]; }

/* Element offset (t->offset included) of row r, where the rows of t along
 * `dim` enumerate every index with `dim` left out, in row-major order.
 * dim = -1 leaves nothing out: row r is then element r. */
static inline int64_t row_base(const em_tensor *t, int dim, int64_t r)
{
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0 && r > 0; d--) {
        if (d == dim) continue;
        off += (r % t->shape[d]) * t->stride[d];
        r /= t->shape[d];
    }
    return off;
}

/* Product of the sizes after dim (1 when dim is the last one or -1). */
static inline int64_t inner_size(const em_tensor *t, int dim)
{
    int64_t n = 1;
    for (int d = dim < 0 ? t->ndim : dim + 1; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* n elements of t from offset off, stride st, as f32 (f32/f16/bf16) ... */
static inline void load_row_f(const em_tensor *t, int64_t off, int64_t st, int64_t n, float *dst)
{
    const char *p = data_of(t);
    switch (t->dtype) {
    case EM_F32: for (int64_t j = 0; j < n; j++) dst[j] = ((const float *)p)[off + j * st]; break;
    case EM_F16: for (int64_t j = 0; j < n; j++) dst[j] = em__f16_to_f32(((const uint16_t *)p)[off + j * st]); break;
    case EM_BF16: for (int64_t j = 0; j < n; j++) dst[j] = em__bf16_to_f32(((const uint16_t *)p)[off + j * st]); break;
    default: {
        size_t es = em_dtype_size(t->dtype);
        for (int64_t j = 0; j < n; j++) dst[j] = (float)em__load(p + (size_t)(off + j * st) * es, t->dtype);
    }
    }
}

static inline void store_row_f(em_tensor *t, int64_t off, int64_t st, int64_t n, const float *src)
{
    char *p = data_of(t);
    switch (t->dtype) {
    case EM_F32: for (int64_t j = 0; j < n; j++) ((float *)p)[off + j * st] = src[j]; break;
    case EM_F16: for (int64_t j = 0; j < n; j++) ((uint16_t *)p)[off + j * st] = em__f32_to_f16(src[j]); break;
    case EM_BF16: for (int64_t j = 0; j < n; j++) ((uint16_t *)p)[off + j * st] = em__f32_to_bf16(src[j]); break;
    default: {
        size_t es = em_dtype_size(t->dtype);
        for (int64_t j = 0; j < n; j++) em__store(p + (size_t)(off + j * st) * es, t->dtype, src[j]);
    }
    }
}

/* ... or as f64 (any dtype; f64 is the fast case). */
static inline void load_row_d(const em_tensor *t, int64_t off, int64_t st, int64_t n, double *dst)
{
    const char *p = data_of(t);
    if (t->dtype == EM_F64) {
        for (int64_t j = 0; j < n; j++) dst[j] = ((const double *)p)[off + j * st];
        return;
    }
    size_t es = em_dtype_size(t->dtype);
    for (int64_t j = 0; j < n; j++) dst[j] = em__load(p + (size_t)(off + j * st) * es, t->dtype);
}

static inline void store_row_d(em_tensor *t, int64_t off, int64_t st, int64_t n, const double *src)
{
    char *p = data_of(t);
    if (t->dtype == EM_F64) {
        for (int64_t j = 0; j < n; j++) ((double *)p)[off + j * st] = src[j];
        return;
    }
    size_t es = em_dtype_size(t->dtype);
    for (int64_t j = 0; j < n; j++) em__store(p + (size_t)(off + j * st) * es, t->dtype, src[j]);
}

/* One element of t at element offset off, as a double. */
static inline double load_at(const em_tensor *t, int64_t off)
{
    return em__load(data_of(t) + (size_t)off * em_dtype_size(t->dtype), t->dtype);
}

/* Element i of an integer index tensor (i64 or i32), in logical order. */
static inline int64_t index_at(const em_tensor *t, int64_t i, bool contig)
{
    int64_t off = contig ? t->offset + i : row_base(t, -1, i);
    return t->dtype == EM_I64 ? ((const int64_t *)data_of(t))[off] : ((const int32_t *)data_of(t))[off];
}

/* Writes element r of a contiguous f32/f64 statistics output. */
static inline void put_stat(em_tensor *t, int64_t r, double v)
{
    if (t->dtype == EM_F64) ((double *)data_of(t))[t->offset + r] = v;
    else ((float *)data_of(t))[t->offset + r] = (float)v;
}

/* Element r (logical order) of a statistics input of any layout. */
static inline double get_stat(const em_tensor *t, int64_t r)
{
    int64_t off = row_base(t, -1, r);
    return t->dtype == EM_F32 ? ((const float *)data_of(t))[off] : load_at(t, off);
}

#endif
