/* ember — the CPU elementwise iterator (contract in iter.h). */
#include "tensor/cpu/iter.h"

#include <omp.h>

EM__WIDE_VECTORS   /* element-wise loops only: tensor/numeric.h */

/* The walk after simplification: `ndim` dims (outermost first, at least 1),
 * byte strides per dim and operand. */
typedef struct iter {
    int nops, ndim;
    int64_t shape[EM_MAX_DIMS];
    int64_t stride[EM_MAX_DIMS][EM_ITER_MAX_OPS];
    char *base[EM_ITER_MAX_OPS];
} iter;

static int64_t iabs64(int64_t v) { return v < 0 ? -v : v; }

/* true when dim a should be walked outside dim b: operand 0's stride is
 * larger (ties broken by the next operands). */
static bool outer_than(const iter *it, int a, int b)
{
    for (int i = 0; i < it->nops; i++) {
        int64_t sa = iabs64(it->stride[a][i]), sb = iabs64(it->stride[b][i]);
        if (sa != sb) return sa > sb;
    }
    return false;
}

static void swap_dims(iter *it, int a, int b)
{
    int64_t s = it->shape[a];
    it->shape[a] = it->shape[b];
    it->shape[b] = s;
    for (int i = 0; i < it->nops; i++) {
        int64_t t = it->stride[a][i];
        it->stride[a][i] = it->stride[b][i];
        it->stride[b][i] = t;
    }
}

/* Returns the element count (0: nothing to do). */
static int64_t iter_build(iter *it, int nops, em_tensor *const *ts)
{
    const em_tensor *o = ts[0];
    int nd = o->ndim;
    it->nops = nops;
    for (int i = 0; i < nops; i++) {
        const em_tensor *t = ts[i];
        it->base[i] = (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype);
    }
    int64_t numel = 1;
    int k = 0;
    for (int d = 0; d < nd; d++) {
        numel *= o->shape[d];
        if (o->shape[d] == 1) continue;
        it->shape[k] = o->shape[d];
        for (int i = 0; i < nops; i++) {
            const em_tensor *t = ts[i];
            int td = d - (nd - t->ndim);   /* right-aligned broadcasting */
            bool live = td >= 0 && t->shape[td] != 1;
            it->stride[k][i] = live ? t->stride[td] * (int64_t)em_dtype_size(t->dtype) : 0;
        }
        k++;
    }
    if (numel == 0) return 0;
    /* Stable insertion sort: walk operand 0 in memory order. */
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && outer_than(it, b, b - 1); b--) swap_dims(it, b, b - 1);
    /* Merge an inner dim into the kept outer one when contiguous in every operand. */
    int m = 0;
    for (int d = 0; d < k; d++) {
        bool merge = m > 0;
        for (int i = 0; merge && i < nops; i++)
            merge = it->stride[m - 1][i] == it->stride[d][i] * it->shape[d];
        if (merge) {
            it->shape[m - 1] *= it->shape[d];
            for (int i = 0; i < nops; i++) it->stride[m - 1][i] = it->stride[d][i];
        } else {
            if (m != d) {
                it->shape[m] = it->shape[d];
                for (int i = 0; i < nops; i++) it->stride[m][i] = it->stride[d][i];
            }
            m++;
        }
    }
    if (m == 0) {   /* 0-d, or every dim of size 1: one element */
        it->shape[0] = 1;
        for (int i = 0; i < nops; i++) it->stride[0][i] = 0;
        m = 1;
    }
    it->ndim = m;
    return numel;
}

/* Calls fn over elements [begin, end) of the row-major walk. */
static void iter_walk(const iter *it, int64_t begin, int64_t end, em_iter_fn fn, void *ctx)
{
    const int nd = it->ndim, nops = it->nops;
    const int64_t n = it->shape[nd - 1];
    const int64_t *inner = it->stride[nd - 1];
    int64_t idx[EM_MAX_DIMS] = {0};
    char *row[EM_ITER_MAX_OPS], *p[EM_ITER_MAX_OPS];
    int64_t r = begin / n, col = begin % n;
    for (int i = 0; i < nops; i++) row[i] = it->base[i];
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = r % it->shape[d];
        r /= it->shape[d];
        for (int i = 0; i < nops; i++) row[i] += idx[d] * it->stride[d][i];
    }
    for (int64_t e = begin; e < end;) {
        int64_t len = n - col < end - e ? n - col : end - e;
        for (int i = 0; i < nops; i++) p[i] = row[i] + col * inner[i];
        fn(p, inner, len, ctx);
        e += len;
        col = 0;
        for (int d = nd - 2; d >= 0; d--) {   /* next row, with carry */
            for (int i = 0; i < nops; i++) row[i] += it->stride[d][i];
            if (++idx[d] < it->shape[d]) break;
            for (int i = 0; i < nops; i++) row[i] -= it->stride[d][i] * it->shape[d];
            idx[d] = 0;
        }
    }
}

void em__iter_run(int nops, em_tensor *const *ts, em_iter_fn fn, void *ctx, int64_t grain)
{
    iter it;
    int64_t total = iter_build(&it, nops, ts);
    if (total == 0) return;
    if (grain <= 0) grain = EM_ITER_GRAIN;
    int64_t nt = total / grain;
    int maxt = em_num_threads();
    if (nt > maxt) nt = maxt;
    if (nt <= 1 || omp_in_parallel()) {
        iter_walk(&it, 0, total, fn, ctx);
        return;
    }
    /* Split boundaries on multiples of 64 elements: threads never share a
     * cache line of a contiguous output, and vector loops start aligned. */
#pragma omp parallel num_threads((int)nt)
    {
        int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t b = t == 0 ? 0 : (total / T * t + total % T * t / T) & ~(int64_t)63;
        int64_t e = t == T - 1 ? total : (total / T * (t + 1) + total % T * (t + 1) / T) & ~(int64_t)63;
        if (b < e) iter_walk(&it, b, e, fn, ctx);
    }
}
