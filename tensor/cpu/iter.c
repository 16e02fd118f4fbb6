/* ember — the CPU elementwise iterator (contract in iter.h). */
#include "tensor/cpu/iter.h"
#include "tensor/cpu/transpose.h"

#include <omp.h>

EM__WIDE_VECTORS   /* element-wise loops only: tensor/numeric.h */

/* The walk after simplification: `ndim` dims (outermost first, at least 1),
 * byte strides per dim and operand. */
typedef struct iter {
    int nops, ndim;
    int64_t shape[EM_MAX_DIMS];
    int64_t stride[EM_MAX_DIMS][EM_ITER_MAX_OPS];
    char *base[EM_ITER_MAX_OPS];
    int64_t esize[EM_ITER_MAX_OPS];   /* bytes an element */
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
        it->esize[i] = (int64_t)em_dtype_size(t->dtype);
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

/* ---- prefetching, for heavy ops (iter.h) -----------------------------------------
 * A row of at least 2 * PF_BLOCK elements runs in blocks of PF_BLOCK; before
 * each block, the next block of every input read with a stride below a cache
 * line is prefetched into L2. Measured on GELU [2048,1024] with the caches
 * evicted first (as in a training step, where the forward's x comes back from
 * memory in the backward): bf16 0.89 -> 0.62 ms, f32 1.77 -> 1.31 (hot: 0.54 /
 * 1.10); prefetching the output, or two blocks ahead, gained nothing. */
enum { PF_BLOCK = 1024 };

static void prefetch_inputs(char *const *p, const int64_t *inner, int nops, int64_t from, int64_t n)
{
    for (int i = 1; i < nops; i++) {
        int64_t s = inner[i];
        if (s <= 0 || s >= 64) continue;   /* broadcast, or one line an element */
        const char *a = p[i] + from * s;
        for (int64_t o = 0; o < n * s; o += 64) __builtin_prefetch(a + o, 0, 2);
    }
}

static void run_prefetched(char *const *p, const int64_t *inner, int nops, int64_t len, em_iter_fn fn, void *ctx)
{
    char *q[EM_ITER_MAX_OPS];
    for (int64_t o = 0; o < len; o += PF_BLOCK) {
        int64_t m = len - o < PF_BLOCK ? len - o : PF_BLOCK, nx = o + PF_BLOCK;
        if (nx < len) prefetch_inputs(p, inner, nops, nx, len - nx < PF_BLOCK ? len - nx : PF_BLOCK);
        for (int i = 0; i < nops; i++) q[i] = p[i] + o * inner[i];
        fn(q, inner, m, ctx);
    }
}

/* Calls fn over elements [begin, end) of the row-major walk (prefetching:
 * run_prefetched above). */
static void iter_walk(const iter *it, int64_t begin, int64_t end, em_iter_fn fn, void *ctx, bool prefetch)
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
        if (prefetch && len >= 2 * PF_BLOCK) run_prefetched(p, inner, nops, len, fn, ctx);
        else fn(p, inner, len, ctx);
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

/* ---- tiles, for an operand read across its rows (a transposed view) ----------------
 * The walk follows operand 0 (the output) in memory order. An input that is a
 * transposed view then moves by its row length at each step of the inner dim,
 * one cache line per element; with a power-of-two row length those lines fall
 * into a few cache sets and evict one another before the next output row comes
 * back to them (em_add of a [1024,2048] transposed into [2048,1024]: 6.5 ms,
 * against 0.29 contiguous). Such an input is instead copied a TILE_R x TILE_C
 * tile at a time into a row-major scratch tile (its lines read whole while in
 * L1), and fn runs on the tile's rows with every operand stepping one element.
 * Element-wise results do not depend on the order; only the calls' lengths
 * change. Inputs only: operand 0 sets the walk, so it is never read across. */
enum { TILE_R = 32, TILE_C = 64 };

/* Whether operand i steps a cache line or more along the inner dim but less
 * than one along the next (and is not broadcast along it). */
static bool across(const iter *it, int i)
{
    int nd = it->ndim;
    int64_t si = iabs64(it->stride[nd - 1][i]), so = iabs64(it->stride[nd - 2][i]);
    return i > 0 && si >= 64 && so > 0 && so < 64;
}

static bool wants_tiles(const iter *it)
{
    int nd = it->ndim;
    if (nd < 2 || it->shape[nd - 1] < TILE_C || it->shape[nd - 2] < TILE_R) return false;
    for (int i = 1; i < it->nops; i++)
        if (across(it, i)) return true;
    return false;
}

/* dst[r][c] (row-major, TILE_C a row) = the element at src + r * sr + c * sc */
static void gather_tile(char *dst, const char *src, int64_t sr, int64_t sc, int64_t es, int64_t nr, int64_t nc)
{
    /* the usual case, a transposed view (rows of the tile contiguous in src):
     * register transposes; the source's rows are the tile's columns */
    if (sr == es && sc % es == 0) {
        if (es == 4 && nr % 16 == 0 && nc % 16 == 0) {
            transpose_f32((float *)dst, TILE_C, (const float *)src, sc / 4, nc, nr);
            return;
        }
        if (es == 2) {
            transpose_bf16((uint16_t *)dst, TILE_C, (const uint16_t *)src, sc / 2, nc, nr);
            return;
        }
    }
#define GATHER(T)                                                                        \
    for (int64_t c = 0; c < nc; c++)                                                     \
        for (int64_t r = 0; r < nr; r++) ((T *)dst)[r * TILE_C + c] = *(const T *)(src + r * sr + c * sc);
    switch (es) {
    case 1: GATHER(uint8_t) break;
    case 2: GATHER(uint16_t) break;
    case 4: GATHER(uint32_t) break;
    default: GATHER(uint64_t) break;
    }
#undef GATHER
}

/* Tiles [begin, end) of the walk's tiles (outer index, row block, column block). */
static void tiles_walk(const iter *it, int64_t begin, int64_t end, em_iter_fn fn, void *ctx)
{
    const int nd = it->ndim, nops = it->nops;
    const int64_t R = it->shape[nd - 2], C = it->shape[nd - 1];
    const int64_t tr = (R + TILE_R - 1) / TILE_R, tc = (C + TILE_C - 1) / TILE_C;
    _Alignas(64) char scratch[EM_ITER_MAX_OPS - 1][TILE_R * TILE_C * 8];
    bool staged[EM_ITER_MAX_OPS];
    int64_t step[EM_ITER_MAX_OPS];
    for (int i = 0; i < nops; i++) {
        staged[i] = across(it, i);
        step[i] = staged[i] ? it->esize[i] : it->stride[nd - 1][i];
    }
    char *p[EM_ITER_MAX_OPS];
    for (int64_t t = begin; t < end; t++) {
        int64_t q = t / (tr * tc), rc = t % (tr * tc), r0 = rc / tc * TILE_R, c0 = rc % tc * TILE_C;
        int64_t off[EM_ITER_MAX_OPS] = {0};
        for (int d = nd - 3; d >= 0; d--) {
            int64_t idx = q % it->shape[d];
            q /= it->shape[d];
            for (int i = 0; i < nops; i++) off[i] += idx * it->stride[d][i];
        }
        int64_t nr = R - r0 < TILE_R ? R - r0 : TILE_R, len = C - c0 < TILE_C ? C - c0 : TILE_C;
        for (int i = 1; i < nops; i++)
            if (staged[i])
                gather_tile(scratch[i - 1], it->base[i] + off[i] + r0 * it->stride[nd - 2][i] + c0 * it->stride[nd - 1][i],
                            it->stride[nd - 2][i], it->stride[nd - 1][i], it->esize[i], nr, len);
        for (int64_t r = 0; r < nr; r++) {
            for (int i = 0; i < nops; i++)
                p[i] = staged[i] ? scratch[i - 1] + r * TILE_C * it->esize[i]
                                 : it->base[i] + off[i] + (r0 + r) * it->stride[nd - 2][i] + c0 * it->stride[nd - 1][i];
            fn(p, step, len, ctx);
        }
    }
}

static void run_tiles(const iter *it, int64_t total, int64_t nt, em_iter_fn fn, void *ctx)
{
    const int nd = it->ndim;
    const int64_t tiles = total / (it->shape[nd - 2] * it->shape[nd - 1]) * ((it->shape[nd - 2] + TILE_R - 1) / TILE_R) *
                          ((it->shape[nd - 1] + TILE_C - 1) / TILE_C);
    if (nt <= 1 || omp_in_parallel()) {
        tiles_walk(it, 0, tiles, fn, ctx);
        return;
    }
#pragma omp parallel num_threads((int)nt)
    {
        int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        tiles_walk(it, tiles * t / T, tiles * (t + 1) / T, fn, ctx);
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
    if (wants_tiles(&it)) {
        run_tiles(&it, total, nt, fn, ctx);
        return;
    }
    bool prefetch = grain == EM_ITER_GRAIN_HEAVY;
    if (nt <= 1 || omp_in_parallel()) {
        iter_walk(&it, 0, total, fn, ctx, prefetch);
        return;
    }
    /* Split boundaries on multiples of 64 elements: threads never share a
     * cache line of a contiguous output, and vector loops start aligned. */
#pragma omp parallel num_threads((int)nt)
    {
        int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t b = t == 0 ? 0 : (total / T * t + total % T * t / T) & ~(int64_t)63;
        int64_t e = t == T - 1 ? total : (total / T * (t + 1) + total % T * (t + 1) / T) & ~(int64_t)63;
        if (b < e) iter_walk(&it, b, e, fn, ctx, prefetch);
    }
}
