/* ember — CPU kernels for CAT, INDEX_SELECT, GATHER, SCATTER_ADD
 * (contract in tensor/ops.h). Inputs may be any strided view; outputs are
 * contiguous. Indices (i64; GATHER and SCATTER_ADD also take i32) were
 * range-checked by the op. CAT, GATHER and INDEX_SELECT move raw elements,
 * so they work for every dtype.
 * SCATTER_ADD adds in the element's dtype (f16/bf16 through f32) and is
 * deterministic: threads split the positions off the scatter dim, each of
 * which owns distinct output elements, so no atomics are needed and the
 * order of additions into any element is fixed. */
#include "tensor/cpu/cpu.h"

#include <omp.h>
#include <string.h>

EM__WIDE_VECTORS   /* element-wise loops only: tensor/numeric.h */

#define PAR_WORK 65536   /* elements below which a kernel stays on one thread */

static char *data_of(const em_tensor *t)
{
    return (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype);
}

static inline void copy_elem(char *d, const char *s, size_t es)
{
    switch (es) {
    case 1: *d = *s; break;
    case 2: memcpy(d, s, 2); break;
    case 4: memcpy(d, s, 4); break;
    case 8: memcpy(d, s, 8); break;
    default: memcpy(d, s, es); break;
    }
}

static inline int64_t load_index(const char *p, em_dtype dt)
{
    return dt == EM_I32 ? *(const int32_t *)p : *(const int64_t *)p;
}

/* Dims of a strided copy after merging: sz[n] elements, strides ds/ss. */
typedef struct copy_geom {
    int n;
    int64_t sz[EM_MAX_DIMS], ds[EM_MAX_DIMS], ss[EM_MAX_DIMS];
} copy_geom;

/* Copies row r (the innermost dim) of the merged block. */
static void copy_row(const copy_geom *g, char *dst, const char *src, size_t es, int64_t r)
{
    const int n = g->n;
    int64_t q = r, doff = 0, soff = 0;
    for (int d = n - 2; d >= 0; d--) {
        int64_t i = q % g->sz[d];
        q /= g->sz[d];
        doff += i * g->ds[d];
        soff += i * g->ss[d];
    }
    char *dp = dst + doff * (int64_t)es;
    const char *sp = src + soff * (int64_t)es;
    const int64_t len = g->sz[n - 1];
    if (g->ds[n - 1] == 1 && g->ss[n - 1] == 1) {
        memcpy(dp, sp, (size_t)len * es);
        return;
    }
    const int64_t dstep = g->ds[n - 1] * (int64_t)es, sstep = g->ss[n - 1] * (int64_t)es;
    for (int64_t i = 0; i < len; i++, dp += dstep, sp += sstep) copy_elem(dp, sp, es);
}

/* A strided block copy: shape[nd] elements from src (strides sst) to dst
 * (strides dst_), in elements of size es. Dims merge where both sides allow;
 * rows of the innermost dim are spread over threads when `par` (a parallel
 * region is entered only then: even an if(0) region costs a team start). */
static void copy_nd(char *dst, const int64_t *dst_, const char *src, const int64_t *sst,
                    const int64_t *shape, int nd, size_t es, bool par)
{
    copy_geom g = {0};
    int64_t total = 1;
    for (int d = 0; d < nd; d++) {
        total *= shape[d];
        if (shape[d] == 1) continue;
        int n = g.n;
        if (n > 0 && g.ds[n - 1] == dst_[d] * shape[d] && g.ss[n - 1] == sst[d] * shape[d]) {
            g.sz[n - 1] *= shape[d];
            g.ds[n - 1] = dst_[d];
            g.ss[n - 1] = sst[d];
        } else {
            g.sz[n] = shape[d];
            g.ds[n] = dst_[d];
            g.ss[n] = sst[d];
            g.n++;
        }
    }
    if (total == 0) return;
    if (g.n == 0) {
        copy_elem(dst, src, es);
        return;
    }
    const int64_t rows = total / g.sz[g.n - 1];
    if (par && total >= PAR_WORK && rows > 1) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) copy_row(&g, dst, src, es, r);
    } else {
        for (int64_t r = 0; r < rows; r++) copy_row(&g, dst, src, es, r);
    }
}

int em_cpu_CAT(const em_kargs *k)
{
    em_tensor *out = k->out[0];
    const int dim = (int)k->i[0];
    const size_t es = em_dtype_size(out->dtype);
    char *base = data_of(out);
    int64_t at = 0;
    for (int j = 0; j < k->nlist; j++) {
        const em_tensor *t = k->list[j];
        if (em_numel(t) == 0) continue;   /* includes torch's skipped 1-d [0] inputs */
        if (t->ndim == out->ndim && t->ndim >= 2 && t->stride[t->ndim - 1] != 1) {
            /* a transposed input: the iterator's tiled copy (copy_nd's rows read one
             * cache line an element: two [2048,1024] transposes took 30 ms) into
             * a header-only view of out's slice */
            em_tensor slice = *out;
            memcpy(slice.shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
            slice.offset = out->offset + at * out->stride[dim];
            em__cpu_copy(&slice, t);
        } else {
            copy_nd(base + at * out->stride[dim] * (int64_t)es, out->stride, data_of(t), t->stride, t->shape,
                    t->ndim, es, true);
        }
        at += t->shape[dim];
    }
    return EM_OK;
}

/* Element offsets in x and out of outer index o (dims before dim, row-major). */
static void outer_offsets(const em_tensor *x, const em_tensor *out, int dim, int64_t o, int64_t *xo, int64_t *oo)
{
    *xo = 0, *oo = 0;
    for (int d = dim - 1; d >= 0; d--) {
        int64_t i = o % x->shape[d];
        o /= x->shape[d];
        *xo += i * x->stride[d];
        *oo += i * out->stride[d];
    }
}

int em_cpu_INDEX_SELECT(const em_kargs *k)
{
    const em_tensor *x = k->in[0], *index = k->in[1];
    em_tensor *out = k->out[0];
    const int dim = (int)k->i[0];
    const size_t es = em_dtype_size(x->dtype);
    const int64_t nidx = em_numel(index);
    const int64_t istride = index->ndim ? index->stride[0] : 0;
    const char *ip = data_of(index);
    const size_t ies = em_dtype_size(index->dtype);
    /* out[outer, j, inner] = x[outer, index[j], inner] */
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; d++) outer *= x->shape[d];
    for (int d = dim + 1; d < x->ndim; d++) inner *= x->shape[d];
    const int64_t pairs = outer * nidx;
    if (pairs == 0 || inner == 0) return EM_OK;
    const char *xb = data_of(x);
    char *ob = data_of(out);
    const int nin = x->ndim - dim - 1;
    if (inner == 1) {
        /* along the last dim: one gather loop a row, where a copy call an
         * element cost about 3 ns each ([2048,1024], 512 columns: 2.9 ms) */
        const int64_t xs = x->stride[dim], os = out->stride[dim];
#pragma omp parallel for schedule(static) if (pairs >= PAR_WORK && outer > 1)
        for (int64_t o = 0; o < outer; o++) {
            int64_t xo, oo;
            outer_offsets(x, out, dim, o, &xo, &oo);
#define SELECT_T(T)                                                                                       \
    {                                                                                                     \
        const T *src = (const T *)xb + xo;                                                                \
        T *dst = (T *)ob + oo;                                                                            \
        for (int64_t j = 0; j < nidx; j++)                                                                \
            dst[j * os] = src[load_index(ip + j * istride * (int64_t)ies, index->dtype) * xs];            \
    }
            switch (es) {
            case 1: SELECT_T(uint8_t) break;
            case 2: SELECT_T(uint16_t) break;
            case 4: SELECT_T(uint32_t) break;
            case 8: SELECT_T(uint64_t) break;
            default:
                for (int64_t j = 0; j < nidx; j++)
                    copy_elem(ob + (oo + j * os) * (int64_t)es,
                              xb + (xo + load_index(ip + j * istride * (int64_t)ies, index->dtype) * xs) * (int64_t)es, es);
            }
#undef SELECT_T
        }
        return EM_OK;
    }
#pragma omp parallel for schedule(static) if (pairs * inner >= PAR_WORK && pairs > 1)
    for (int64_t p = 0; p < pairs; p++) {
        int64_t o = p / nidx, j = p % nidx, xo, oo;
        outer_offsets(x, out, dim, o, &xo, &oo);
        int64_t sel = load_index(ip + j * istride * (int64_t)ies, index->dtype);
        xo += sel * x->stride[dim];
        oo += j * out->stride[dim];
        copy_nd(ob + oo * (int64_t)es, out->stride + dim + 1, xb + xo * (int64_t)es, x->stride + dim + 1,
                x->shape + dim + 1, nin, es, false);
    }
    return EM_OK;
}

/* Visits the index tensor row by row (rows of its last dim). For each row,
 * the offsets of its first element in index, x (coordinate `dim` left out),
 * and a contiguous tensor of index's shape. */
typedef struct row_geom {
    int64_t ioff, xoff, ooff;
} row_geom;

static row_geom row_at(const em_tensor *index, const em_tensor *x, const int64_t *ostride, int dim,
                       int64_t row)
{
    row_geom g = {0, 0, 0};
    int64_t q = row;
    for (int d = index->ndim - 2; d >= 0; d--) {
        int64_t i = q % index->shape[d];
        q /= index->shape[d];
        g.ioff += i * index->stride[d];
        g.ooff += i * ostride[d];
        if (d != dim) g.xoff += i * x->stride[d];
    }
    return g;
}

int em_cpu_GATHER(const em_kargs *k)
{
    const em_tensor *x = k->in[0], *index = k->in[1];
    em_tensor *out = k->out[0];
    const int dim = (int)k->i[0];
    const size_t es = em_dtype_size(x->dtype), ies = em_dtype_size(index->dtype);
    const int64_t n = em_numel(index);
    if (n == 0) return EM_OK;
    if (index->ndim == 0) {   /* 0-d: one element */
        int64_t sel = load_index(data_of(index), index->dtype);
        copy_elem(data_of(out), data_of(x) + sel * (x->ndim ? x->stride[0] : 0) * (int64_t)es, es);
        return EM_OK;
    }
    const int last = index->ndim - 1;
    const int64_t len = index->shape[last], rows = n / len;
    const int64_t is = index->stride[last] * (int64_t)ies;
    const int64_t xs = (last == dim ? 0 : x->stride[last]) * (int64_t)es;
    const int64_t xd = x->stride[dim] * (int64_t)es;
    const char *ib = data_of(index), *xb = data_of(x);
    char *ob = data_of(out);
#pragma omp parallel for schedule(static) if (n >= PAR_WORK && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        row_geom g = row_at(index, x, out->stride, dim, r);
        const char *ip = ib + g.ioff * (int64_t)ies;
        const char *xp = xb + g.xoff * (int64_t)es;
        char *op = ob + g.ooff * (int64_t)es;
        /* typed loops for the usual element and index sizes (a call and two
         * switches an element cost about 3 ns) */
#define GATHER_T(T, I)                                                                              \
    for (int64_t i = 0; i < len; i++)                                                               \
        ((T *)op)[i] = *(const T *)(xp + i * xs + *(const I *)(ip + i * is) * xd);
        if (es == 4 && index->dtype == EM_I64) GATHER_T(uint32_t, int64_t)
        else if (es == 4 && index->dtype == EM_I32) GATHER_T(uint32_t, int32_t)
        else if (es == 8 && index->dtype == EM_I64) GATHER_T(uint64_t, int64_t)
        else if (es == 2 && index->dtype == EM_I64) GATHER_T(uint16_t, int64_t)
        else
            for (int64_t i = 0; i < len; i++, ip += is, xp += xs, op += es)
                copy_elem(op, xp + load_index(ip, index->dtype) * xd, es);
#undef GATHER_T
    }
    return EM_OK;
}

/* dst += src for one element of dtype dt. */
static inline void add_elem(char *dst, const char *src, em_dtype dt)
{
    switch (dt) {
    case EM_F32: *(float *)dst += *(const float *)src; break;
    case EM_F64: *(double *)dst += *(const double *)src; break;
    case EM_I64: *(int64_t *)dst = (int64_t)((uint64_t) * (int64_t *)dst + (uint64_t) * (const int64_t *)src); break;
    case EM_I32: *(int32_t *)dst = (int32_t)((uint32_t) * (int32_t *)dst + (uint32_t) * (const int32_t *)src); break;
    case EM_F16:
        *(uint16_t *)dst = em__f32_to_f16(em__f16_to_f32(*(uint16_t *)dst) + em__f16_to_f32(*(const uint16_t *)src));
        break;
    case EM_BF16:
        *(uint16_t *)dst = em__f32_to_bf16(em__bf16_to_f32(*(uint16_t *)dst) + em__bf16_to_f32(*(const uint16_t *)src));
        break;
    default: break;
    }
}

/* index_add's shape (index_select's backward): dim 0, an index that is one value per
 * slice (stride 0 on every other dim, the same extent there as out and src), and
 * out and src with contiguous slices of R elements. Slice j of src is added to
 * slice index[j] of out, j in order, with add_elem's arithmetic (for f16/bf16: f32
 * sum of the two, rounded once), vectorized; threads split the R columns, so the
 * order of the adds into each element is the sequential one. */
static bool rows_case(const em_tensor *out, const em_tensor *index, const em_tensor *src, int dim, int64_t *R)
{
    if (dim != 0 || index->ndim < 1 || out->ndim != index->ndim || src->ndim != index->ndim) return false;
    int64_t r = 1;
    for (int d = index->ndim - 1; d >= 1; d--) {
        if (index->stride[d] != 0 && index->shape[d] != 1) return false;
        if (index->shape[d] != out->shape[d] || index->shape[d] != src->shape[d]) return false;
        if ((out->stride[d] != r && out->shape[d] != 1) || (src->stride[d] != r && src->shape[d] != 1)) return false;
        r *= index->shape[d];
    }
    *R = r;
    return out->dtype == EM_F32 || out->dtype == EM_F64 || out->dtype == EM_BF16 || out->dtype == EM_F16;
}

static void scatter_rows(const em_kargs *k, int64_t R)
{
    em_tensor *out = k->out[0];
    const em_tensor *index = k->in[1], *src = k->in[2];
    const em_dtype dt = out->dtype;
    const size_t es = em_dtype_size(dt), ies = em_dtype_size(index->dtype);
    const int64_t J = index->shape[0];
    const char *ib = data_of(index), *sb = data_of(src);
    char *ob = data_of(out);
    enum { COLS = 256 };   /* columns per task: f32 scratch for the half types */
    const int64_t tasks = (R + COLS - 1) / COLS;
#pragma omp parallel for schedule(static) if (J * R >= PAR_WORK && tasks > 1)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t c0 = t * COLS, w = R - c0 < COLS ? R - c0 : COLS;
        _Alignas(64) float a[COLS], b[COLS];
        for (int64_t j = 0; j < J; j++) {
            int64_t sel = load_index(ib + j * index->stride[0] * (int64_t)ies, index->dtype);
            char *op = ob + (sel * out->stride[0] + c0) * (int64_t)es;   /* ob, sb: data_of, offsets included */
            const char *sp = sb + (j * src->stride[0] + c0) * (int64_t)es;
            if (dt == EM_F32) {
                float *o = (float *)op;
                const float *s = (const float *)sp;
#pragma omp simd
                for (int64_t c = 0; c < w; c++) o[c] += s[c];
            } else if (dt == EM_F64) {
                double *o = (double *)op;
                const double *s = (const double *)sp;
                for (int64_t c = 0; c < w; c++) o[c] += s[c];
            } else {
                em__convert_n(a, EM_F32, op, dt, w);
                em__convert_n(b, EM_F32, sp, dt, w);
#pragma omp simd
                for (int64_t c = 0; c < w; c++) a[c] += b[c];
                em__convert_n(op, dt, a, EM_F32, w);
            }
        }
    }
}

/* Adds to *io, *so, *oo the element offsets in index, src and out of
 * position q, where positions enumerate the indices of dims top .. 0 other
 * than dim in row-major order (index's shape). */
static void offsets_off_dim(const em_tensor *index, const em_tensor *src, const em_tensor *out, int dim, int top,
                            int64_t q, int64_t *io, int64_t *so, int64_t *oo)
{
    for (int d = top; d >= 0; d--) {
        if (d == dim) continue;
        int64_t i = q % index->shape[d];
        q /= index->shape[d];
        *io += i * index->stride[d];
        *so += i * src->stride[d];
        *oo += i * out->stride[d];
    }
}

/* SCATTER_ADD along a dim that is not index's last: one position off `dim`
 * at a time walked index and src along `dim`, one cache line an element (a
 * [2048,1024] scatter along dim 0: 21 ms, along dim 1: 5.7). Here a task takes
 * SCATTER_COLS adjacent positions of the last dim and walks `dim` once for all
 * of them. Each output element still receives its additions in the order of
 * j, and positions still own distinct output elements: the same bits. */
enum { SCATTER_COLS = 16 };

static void scatter_blocks(const em_kargs *k, int64_t J, int64_t positions)
{
    em_tensor *out = k->out[0];
    const em_tensor *index = k->in[1], *src = k->in[2];
    const int dim = (int)k->i[0], last = index->ndim - 1;
    const em_dtype dt = out->dtype;
    const size_t es = em_dtype_size(dt), ies = em_dtype_size(index->dtype);
    const char *ib = data_of(index), *sb = data_of(src);
    char *ob = data_of(out);
    const int64_t L = index->shape[last], blocks = (L + SCATTER_COLS - 1) / SCATTER_COLS;
    const int64_t tasks = positions / L * blocks;
    const int64_t ijs = index->stride[dim] * (int64_t)ies, sjs = src->stride[dim] * (int64_t)es;
    const int64_t ils = index->stride[last] * (int64_t)ies, sls = src->stride[last] * (int64_t)es;
    const int64_t od = out->stride[dim] * (int64_t)es, ols = out->stride[last] * (int64_t)es;
#pragma omp parallel for schedule(static) if (positions * J >= PAR_WORK && tasks > 1)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t c0 = t % blocks * SCATTER_COLS, w = L - c0 < SCATTER_COLS ? L - c0 : SCATTER_COLS;
        int64_t io = c0 * index->stride[last], so = c0 * src->stride[last], oo = c0 * out->stride[last];
        offsets_off_dim(index, src, out, dim, last - 1, t / blocks, &io, &so, &oo);
        const char *ip = ib + io * (int64_t)ies, *sp = sb + so * (int64_t)es;
        char *op = ob + oo * (int64_t)es;
        for (int64_t j = 0; j < J; j++, ip += ijs, sp += sjs)
            for (int64_t c = 0; c < w; c++)
                add_elem(op + c * ols + load_index(ip + c * ils, index->dtype) * od, sp + c * sls, dt);
    }
}

int em_cpu_SCATTER_ADD(const em_kargs *k)
{
    em_tensor *out = k->out[0];
    const em_tensor *index = k->in[1], *src = k->in[2];
    const int dim = (int)k->i[0];
    const em_dtype dt = out->dtype;
    const size_t es = em_dtype_size(dt), ies = em_dtype_size(index->dtype);
    const int64_t n = em_numel(index);
    if (n == 0) return EM_OK;
    const char *ib = data_of(index), *sb = data_of(src);
    char *ob = data_of(out);
    if (index->ndim == 0) {
        int64_t sel = load_index(ib, index->dtype);
        add_elem(ob + sel * (out->ndim ? out->stride[0] : 0) * (int64_t)es, sb, dt);
        return EM_OK;
    }
    int64_t R;
    if (rows_case(out, index, src, dim, &R)) {
        scatter_rows(k, R);
        return EM_OK;
    }
    /* One task per position off `dim`; each walks index along `dim` in order. */
    const int64_t J = index->shape[dim], tasks = n / J;
    const int64_t ijs = index->stride[dim] * (int64_t)ies, sjs = src->stride[dim] * (int64_t)es;
    const int64_t od = out->stride[dim] * (int64_t)es;
    const int last = index->ndim - 1;
    if (dim != last && index->shape[last] >= SCATTER_COLS) {
        scatter_blocks(k, J, tasks);
        return EM_OK;
    }
#pragma omp parallel for schedule(static) if (n >= PAR_WORK && tasks > 1)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t io = 0, so = 0, oo = 0;
        offsets_off_dim(index, src, out, dim, index->ndim - 1, t, &io, &so, &oo);
        const char *ip = ib + io * (int64_t)ies, *sp = sb + so * (int64_t)es;
        char *op = ob + oo * (int64_t)es;
        for (int64_t j = 0; j < J; j++, ip += ijs, sp += sjs)
            add_elem(op + load_index(ip, index->dtype) * od, sp, dt);
    }
    return EM_OK;
}
