/* ember — CPU reduction kernels: SUM MEAN VAR LOGSUMEXP NORM MAX MIN ARGMAX
 * (contract in tensor/ops.h: in[0] any strided view, i[0] = bitmask of the
 * reduced dims, out[0] contiguous in the keepdim shape).
 *
 * How it works. The input's dims split into kept dims (the output's order) and
 * reduced dims; size-1 dims are dropped and neighbours that share a stride
 * pattern are merged, so a contiguous reduce-the-last-dims problem becomes
 * "nout rows of R contiguous elements" and a reduce-the-leading-dims problem
 * becomes "R rows, each adding into nout contiguous outputs". Two orientations:
 *   inner (A): one output at a time walks its R elements (rows);
 *   outer (B): a tile of up to TILE_MAX outputs, contiguous along the
 *              innermost kept dim, is updated once per reduced position
 *              (columns). Tiles span whole rows where they can, so the reads
 *              stream through memory; wider rows are cut into equal tiles.
 * Float dtypes accumulate in f64 (f16/bf16 load through f32). Integer and bool
 * inputs (SUM -> i64, MAX/MIN/ARGMAX) use an exact int64 path.
 *
 * Threads: outputs (tiles) are split across threads. When there are only a
 * few tiles and much to reduce, each tile's reduction range is cut into chunks
 * whose partial results are combined in chunk order. Every cut depends only on
 * the shapes, never on the thread count, so results are bit-identical for any
 * number of threads.
 */
#include "tensor/cpu/cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* What one pass accumulates per output. Sum kinds add; the others keep an
 * extreme (NaN wins and sticks, as in torch; ties keep the first index). */
enum { K_SUM, K_SQDEV, K_SUMEXP, K_ABS, K_SQ, K_POW, K_MAXABS, K_MAX, K_MIN };

#define TILE_MAX 8192           /* outputs per tile in the outer orientation   */
#define SPLIT_WORK 65536        /* elements per chunk when one tile is split   */
#define MAX_CHUNKS 64           /* chunks per split tile ...                   */
#define MAX_PARTIALS 262144     /* ... and chunks x tile width                 */
#define PAR_WORK 32768          /* below this many elements: one thread        */

typedef struct plan {
    const char *base;           /* element 0 of the input view                  */
    em_dtype dt;
    size_t es;
    int nk, nr;                 /* kept / reduced dims after merging            */
    int64_t ksize[EM_MAX_DIMS], kstride[EM_MAX_DIMS];
    int64_t rsize[EM_MAX_DIMS], rstride[EM_MAX_DIMS];   /* innermost last       */
    int64_t nout, R;
    bool outer;                 /* orientation B                                 */
    int64_t W, tile_w, tiles_per_row, ntiles;
    double pw;                  /* K_POW exponent                               */
} plan;

static void plan_init(plan *pl, const em_tensor *in, int64_t mask)
{
    memset(pl, 0, sizeof *pl);
    pl->dt = in->dtype;
    pl->es = em_dtype_size(in->dtype);
    pl->base = (const char *)in->storage->data + in->offset * (int64_t)pl->es;
    pl->nout = 1;
    pl->R = 1;
    int64_t rs[EM_MAX_DIMS], rst[EM_MAX_DIMS];
    int nr = 0;
    for (int d = 0; d < in->ndim; d++) {
        int64_t n = in->shape[d], s = in->stride[d];
        if (mask >> d & 1) {
            pl->R *= n;
            if (n != 1) { rs[nr] = n; rst[nr] = s; nr++; }
            continue;
        }
        pl->nout *= n;
        if (n == 1) continue;
        if (pl->nk > 0 && pl->kstride[pl->nk - 1] == s * n) {
            pl->ksize[pl->nk - 1] *= n;
            pl->kstride[pl->nk - 1] = s;
        } else {
            pl->ksize[pl->nk] = n;
            pl->kstride[pl->nk] = s;
            pl->nk++;
        }
    }
    /* Reduced dims: largest |stride| first (stable), then merge neighbours. */
    for (int i = 1; i < nr; i++)
        for (int j = i; j > 0 && llabs(rst[j - 1]) < llabs(rst[j]); j--) {
            int64_t t = rs[j]; rs[j] = rs[j - 1]; rs[j - 1] = t;
            t = rst[j]; rst[j] = rst[j - 1]; rst[j - 1] = t;
        }
    for (int i = 0; i < nr; i++) {
        if (pl->nr > 0 && pl->rstride[pl->nr - 1] == rst[i] * rs[i]) {
            pl->rsize[pl->nr - 1] *= rs[i];
            pl->rstride[pl->nr - 1] = rst[i];
        } else {
            pl->rsize[pl->nr] = rs[i];
            pl->rstride[pl->nr] = rst[i];
            pl->nr++;
        }
    }
    if (pl->nr == 0) { pl->nr = 1; pl->rsize[0] = 1; pl->rstride[0] = 0; }

    /* Columns when the innermost kept dim is contiguous and wide enough. */
    pl->outer = pl->nk > 0 && pl->kstride[pl->nk - 1] == 1 && pl->ksize[pl->nk - 1] >= 8 &&
                pl->rstride[pl->nr - 1] != 1;
    if (pl->outer) {
        pl->W = pl->ksize[pl->nk - 1];
        pl->tiles_per_row = (pl->W + TILE_MAX - 1) / TILE_MAX;
        pl->tile_w = (pl->W + pl->tiles_per_row - 1) / pl->tiles_per_row;
        pl->ntiles = pl->nout / pl->W * pl->tiles_per_row;
    } else {
        pl->W = pl->tile_w = 1;
        pl->tiles_per_row = 1;
        pl->ntiles = pl->nout;
    }
}

/* Tile t: its first output, its width, and the input offset of its element 0. */
static void tile_geom(const plan *pl, int64_t t, int64_t *o0, int64_t *w, int64_t *off)
{
    int64_t q = t, extra = 0;
    int nd = pl->nk;
    if (pl->outer) {
        q = t / pl->tiles_per_row;
        int64_t jb = t % pl->tiles_per_row;
        extra = jb * pl->tile_w;
        *o0 = q * pl->W + extra;
        *w = pl->W - extra < pl->tile_w ? pl->W - extra : pl->tile_w;
        nd = pl->nk - 1;
    } else {
        *o0 = t;
        *w = 1;
    }
    int64_t o = extra;
    for (int d = nd - 1; d >= 0; d--) {
        o += (q % pl->ksize[d]) * pl->kstride[d];
        q /= pl->ksize[d];
    }
    *off = o;
}

/* ---- per-dtype loops ------------------------------------------------------ */

static inline double ld_f32(float v) { return v; }
static inline double ld_f64(double v) { return v; }
static inline double ld_f16(uint16_t v) { return em__f16_to_f32(v); }
static inline double ld_bf16(uint16_t v)
{
    union { uint32_t u; float f; } c = {.u = (uint32_t)v << 16};
    return c.f;
}

#define BETTER_MAX(x, b) ((x) > (b) || (isnan(x) && !isnan(b)))
#define BETTER_MIN(x, b) ((x) < (b) || (isnan(x) && !isnan(b)))

#define SUM_LOOP_A(LD, EXPR)                                                                       \
    {                                                                                              \
        double a = 0;                                                                              \
        _Pragma("omp simd reduction(+:a)")                                                         \
        for (int64_t i = 0; i < n; i++) { double x = LD(p[i * st]); a += (EXPR); }                 \
        *acc += a;                                                        \
    } break;
#define SIMD_MAX "omp simd reduction(max:m) reduction(|:has_nan)"
#define SIMD_MIN "omp simd reduction(min:m) reduction(|:has_nan)"
/* Extremes in two steps so the hot loop vectorizes: the extreme value and
 * whether a NaN occurs (SIMD), then a short scan for its first position. */
#define EXT_LOOP_A(LD, EXPR, SIMD, CMP, INIT)                                                      \
    {                                                                                              \
        double m = INIT;                                                                           \
        int has_nan = 0;                                                                           \
        _Pragma(SIMD)                                                                              \
        for (int64_t i = 0; i < n; i++) {                                                          \
            double x = LD(p[i * st]); x = (EXPR);                                                  \
            has_nan |= isnan(x);                                                                   \
            m = x CMP m ? x : m;                                                                   \
        }                                                                                          \
        if (isnan(*acc)) break;               /* an earlier NaN sticks */                          \
        if (has_nan || m CMP *acc) {                                                               \
            int64_t i = 0;                                                                         \
            double x;                                                                              \
            for (;; i++) {                                                                         \
                x = LD(p[i * st]); x = (EXPR);                                                     \
                if (has_nan ? isnan(x) : x == m) break;                                            \
            }                                                                                      \
            *acc = x;                                                     \
            *idx = r0 + i;                                                \
        }                                                                                          \
    } break;

/* Inner orientation: n elements at p with stride s (elements), the first of
 * which has reduced index r0; folds them into *acc (and *idx). S is s, or 1
 * for the copy the compiler vectorizes for contiguous rows. */
#define DEF_RUN_A(NAME, CT, LD, S)                                                                 \
    static void NAME(int kind, const void *vp, int64_t n, int64_t s, int64_t r0, double prm,       \
                     double pw, double *acc, int64_t *idx)                                         \
    {                                                                                              \
        const CT *p = vp;                                                                          \
        const int64_t st = (S);                                                                    \
        (void)s;                                                                                   \
        switch (kind) {                                                                            \
        case K_SUM: SUM_LOOP_A(LD, x)                                                              \
        case K_SQDEV: SUM_LOOP_A(LD, (x - prm) * (x - prm))                                        \
        case K_SUMEXP: SUM_LOOP_A(LD, exp(x - prm))                                                \
        case K_ABS: SUM_LOOP_A(LD, fabs(x))                                                        \
        case K_SQ: SUM_LOOP_A(LD, x * x)                                                           \
        case K_POW: SUM_LOOP_A(LD, pow(fabs(x), pw))                                               \
        case K_MAXABS: EXT_LOOP_A(LD, fabs(x), SIMD_MAX, >, 0.0)                                   \
        case K_MAX: EXT_LOOP_A(LD, x, SIMD_MAX, >, -INFINITY)                                      \
        case K_MIN: EXT_LOOP_A(LD, x, SIMD_MIN, <, INFINITY)                                       \
        }                                                                                          \
    }
DEF_RUN_A(run_a_f32c, float, ld_f32, 1)
DEF_RUN_A(run_a_f32, float, ld_f32, s)
DEF_RUN_A(run_a_f64c, double, ld_f64, 1)
DEF_RUN_A(run_a_f64, double, ld_f64, s)
DEF_RUN_A(run_a_f16, uint16_t, ld_f16, s)
DEF_RUN_A(run_a_bf16, uint16_t, ld_bf16, s)

#define SUM_LOOP_B(LD, EXPR)                                                                       \
    for (int64_t i = 0; i < n; i++) {                                                              \
        const elem_t *restrict q = p + i * s;                                                      \
        _Pragma("omp simd")                                                                        \
        for (int64_t j = 0; j < w; j++) { double x = LD(q[j]); acc[j] += (EXPR); }                 \
    }                                                                                              \
    break;
#define EXT_LOOP_B(LD, EXPR, BETTER)                                                               \
    for (int64_t i = 0; i < n; i++) {                                                              \
        const elem_t *restrict q = p + i * s;                                                      \
        for (int64_t j = 0; j < w; j++) {                                                          \
            double x = LD(q[j]); x = (EXPR);                                                       \
            if (BETTER(x, acc[j])) { acc[j] = x; idx[j] = r0 + i; }                                \
        }                                                                                          \
    }                                                                                              \
    break;

/* Outer orientation: n reduced positions, stride s (elements) apart starting
 * at p, the first with reduced index r0; at each, w contiguous elements, one
 * per output: element j folds into acc[j] (and idx[j]). Each output is one
 * running sum in a fixed order whatever the vector width, so these loops take
 * 512-bit vectors (EM__WIDE_VECTORS_FN, tensor/numeric.h): same bits, twice
 * the lanes. The inner orientation's `omp simd reduction` loops keep gcc's
 * width: theirs would change the sums' order. */
#define DEF_RUN_B(NAME, CT, LD)                                                                    \
    static EM__WIDE_VECTORS_FN void NAME(int kind, const void *vp, int64_t n, int64_t s,           \
                                         int64_t w, int64_t r0, const double *prm, double pw,      \
                                         double *restrict acc, int64_t *restrict idx)              \
    {                                                                                              \
        typedef CT elem_t;                                                                         \
        const elem_t *p = vp;                                                                      \
        switch (kind) {                                                                            \
        case K_SUM: SUM_LOOP_B(LD, x)                                                              \
        case K_SQDEV: SUM_LOOP_B(LD, (x - prm[j]) * (x - prm[j]))                                  \
        case K_SUMEXP: SUM_LOOP_B(LD, exp(x - prm[j]))                                             \
        case K_ABS: SUM_LOOP_B(LD, fabs(x))                                                        \
        case K_SQ: SUM_LOOP_B(LD, x * x)                                                           \
        case K_POW: SUM_LOOP_B(LD, pow(fabs(x), pw))                                               \
        case K_MAXABS: EXT_LOOP_B(LD, fabs(x), BETTER_MAX)                                         \
        case K_MAX: EXT_LOOP_B(LD, x, BETTER_MAX)                                                  \
        case K_MIN: EXT_LOOP_B(LD, x, BETTER_MIN)                                                  \
        }                                                                                          \
    }
DEF_RUN_B(run_b_f32, float, ld_f32)
DEF_RUN_B(run_b_f64, double, ld_f64)
DEF_RUN_B(run_b_f16, uint16_t, ld_f16)
DEF_RUN_B(run_b_bf16, uint16_t, ld_bf16)

static void run_a(const plan *pl, int kind, const char *p, int64_t n, int64_t s, int64_t r0,
                  double prm, double *acc, int64_t *idx)
{
    switch (pl->dt) {
    case EM_F32:
        if (s == 1) run_a_f32c(kind, p, n, s, r0, prm, pl->pw, acc, idx);
        else run_a_f32(kind, p, n, s, r0, prm, pl->pw, acc, idx);
        break;
    case EM_F64:
        if (s == 1) run_a_f64c(kind, p, n, s, r0, prm, pl->pw, acc, idx);
        else run_a_f64(kind, p, n, s, r0, prm, pl->pw, acc, idx);
        break;
    case EM_F16: run_a_f16(kind, p, n, s, r0, prm, pl->pw, acc, idx); break;
    case EM_BF16: run_a_bf16(kind, p, n, s, r0, prm, pl->pw, acc, idx); break;
    default: break;
    }
}

static void run_b(const plan *pl, int kind, const char *p, int64_t n, int64_t s, int64_t w, int64_t r0,
                  const double *prm, double *acc, int64_t *idx)
{
    switch (pl->dt) {
    case EM_F32: run_b_f32(kind, p, n, s, w, r0, prm, pl->pw, acc, idx); break;
    case EM_F64: run_b_f64(kind, p, n, s, w, r0, prm, pl->pw, acc, idx); break;
    case EM_F16: run_b_f16(kind, p, n, s, w, r0, prm, pl->pw, acc, idx); break;
    case EM_BF16: run_b_bf16(kind, p, n, s, w, r0, prm, pl->pw, acc, idx); break;
    default: break;
    }
}

/* ---- passes over one tile ------------------------------------------------- */

/* The kinds that keep an index (extremes); the sum kinds never touch idx. */
static bool keeps_index(int kind) { return kind == K_MAXABS || kind == K_MAX || kind == K_MIN; }

static void acc_init(int kind, int64_t w, double *acc, int64_t *idx)
{
    double v = kind == K_MAX ? -INFINITY : kind == K_MIN ? INFINITY : 0.0;
    for (int64_t j = 0; j < w; j++) acc[j] = v;
    if (keeps_index(kind))
        for (int64_t j = 0; j < w; j++) idx[j] = 0;
}

/* This thread's buffer for a split tile's partials: at most MAX_PARTIALS
 * doubles and as many indices (4 MiB), grown on demand and kept for the
 * thread's life (the system allocator): a fresh allocation per call cost its
 * page faults every time (a [1024,3072] column sum 0.86 ms, most of it faults).
 * NULL when it cannot grow. */
static _Thread_local struct { char *p; size_t n; } partials;

static char *partial_buf(size_t n)
{
    if (n > partials.n) {
        free(partials.p);
        partials.p = malloc(n);
        partials.n = partials.p ? n : 0;
    }
    return partials.p;
}

/* Folds a later partial (b) into an earlier one (a), keeping torch's order. */
static void acc_combine(int kind, int64_t w, double *a, int64_t *ai, const double *b, const int64_t *bi)
{
    for (int64_t j = 0; j < w; j++) {
        bool take;
        switch (kind) {
        case K_MAXABS: case K_MAX: take = BETTER_MAX(b[j], a[j]); break;
        case K_MIN: take = BETTER_MIN(b[j], a[j]); break;
        default: a[j] += b[j]; continue;
        }
        if (take) { a[j] = b[j]; ai[j] = bi[j]; }
    }
}

/* Folds reduced positions [r0, r1) of the tile whose element 0 is at p0. */
static void pass_range(const plan *pl, int kind, const char *p0, int64_t w, int64_t r0, int64_t r1,
                       const double *prm, double *acc, int64_t *idx)
{
    if (r0 >= r1) return;   /* also the R = 0 case: a reduced dim of size 0 */
    const int nr = pl->nr;
    const int64_t es = (int64_t)pl->es;
    int64_t ri[EM_MAX_DIMS], off = 0, rem = r0;
    for (int d = nr - 1; d >= 0; d--) {
        ri[d] = rem % pl->rsize[d];
        rem /= pl->rsize[d];
        off += ri[d] * pl->rstride[d];
    }
    const int64_t in_n = pl->rsize[nr - 1], in_s = pl->rstride[nr - 1];
    for (int64_t r = r0; r < r1;) {
        int64_t n = in_n - ri[nr - 1];   /* the rest of the innermost reduced dim */
        if (n > r1 - r) n = r1 - r;
        if (pl->outer) run_b(pl, kind, p0 + off * es, n, in_s, w, r, prm, acc, idx);
        else run_a(pl, kind, p0 + off * es, n, in_s, r, prm[0], acc, idx);
        ri[nr - 1] += n;
        off += n * in_s;
        r += n;
        for (int d = nr - 1; d > 0 && ri[d] == pl->rsize[d]; d--) {
            off -= ri[d] * pl->rstride[d];
            ri[d] = 0;
            ri[d - 1]++;
            off += pl->rstride[d - 1];
        }
    }
}

/* Number of chunks a tile of width w is cut into (1 = not split). */
static int64_t tile_chunks(const plan *pl, int64_t w)
{
    if (pl->ntiles >= 16 || pl->R * w < 2 * SPLIT_WORK) return 1;
    int64_t len = SPLIT_WORK / w > 0 ? SPLIT_WORK / w : 1;
    int64_t c = (pl->R + len - 1) / len;
    if (c > MAX_CHUNKS) c = MAX_CHUNKS;
    if (c > MAX_PARTIALS / w) c = MAX_PARTIALS / w;
    return c < 1 ? 1 : c;
}

/* One full pass over a tile: acc/idx (width w) get the tile's results. */
static void tile_pass(const plan *pl, int kind, const char *p0, int64_t w, const double *prm,
                      double *acc, int64_t *idx)
{
    acc_init(kind, w, acc, idx);
    int64_t nc = tile_chunks(pl, w);
    /* Partials of a split tile; without memory for them the pass runs whole
     * (same result up to rounding, only slower). */
    size_t nacc = sizeof(double) * (size_t)(nc * w), nidx = keeps_index(kind) ? sizeof(int64_t) * (size_t)(nc * w) : 0;
    char *buf = nc > 1 ? partial_buf(nacc + nidx) : NULL;
    if (!buf) {
        pass_range(pl, kind, p0, w, 0, pl->R, prm, acc, idx);
        return;
    }
    double *pacc = (double *)buf;
    int64_t *pidx = nidx ? (int64_t *)(buf + nacc) : NULL;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < nc; c++) {
        acc_init(kind, w, pacc + c * w, pidx ? pidx + c * w : NULL);
        pass_range(pl, kind, p0, w, pl->R * c / nc, pl->R * (c + 1) / nc, prm, pacc + c * w, pidx ? pidx + c * w : NULL);
    }
    for (int64_t c = 0; c < nc; c++) acc_combine(kind, w, acc, idx, pacc + c * w, pidx ? pidx + c * w : NULL);
}

/* ---- float ops -------------------------------------------------------------- */

static void store_f(void *base, em_dtype dt, int64_t o, double v)
{
    switch (dt) {
    case EM_F32: ((float *)base)[o] = (float)v; break;
    case EM_F64: ((double *)base)[o] = v; break;
    default: em__store((char *)base + o * (int64_t)em_dtype_size(dt), dt, v); break;
    }
}

static void *out_ptr(const em_tensor *t)
{
    return t ? (char *)t->storage->data + t->offset * (int64_t)em_dtype_size(t->dtype) : NULL;
}

/* Computes and writes the outputs of tile t for op. */
/* scratch: 3 * tile_w doubles and 2 * tile_w int64 for this thread. */
static void float_tile(const plan *pl, const em_kargs *k, int64_t t, double *scratch)
{
    int64_t o0, w, off;
    tile_geom(pl, t, &o0, &w, &off);
    const char *p0 = pl->base + off * (int64_t)pl->es;
    double *a = scratch, *b = a + pl->tile_w, *prm = b + pl->tile_w;
    int64_t *ia = (int64_t *)(prm + pl->tile_w), *ib = ia + pl->tile_w;
    const double R = (double)pl->R;
    em_tensor *out = k->out[0];
    void *op0 = out_ptr(out);
    for (int64_t j = 0; j < w; j++) prm[j] = 0;

    switch (k->op) {
    case EM_OP_SUM:
    case EM_OP_MEAN:
        tile_pass(pl, K_SUM, p0, w, prm, a, ia);
        for (int64_t j = 0; j < w; j++)
            store_f(op0, out->dtype, o0 + j, k->op == EM_OP_SUM ? a[j] : a[j] / R);
        break;
    case EM_OP_VAR: {
        tile_pass(pl, K_SUM, p0, w, prm, a, ia);
        for (int64_t j = 0; j < w; j++) prm[j] = a[j] / R;
        tile_pass(pl, K_SQDEV, p0, w, prm, b, ib);
        double dof = R - k->f[0];
        if (dof < 0) dof = 0;
        for (int64_t j = 0; j < w; j++) store_f(op0, out->dtype, o0 + j, b[j] / dof);
        break;
    }
    case EM_OP_LOGSUMEXP: {
        tile_pass(pl, K_MAX, p0, w, prm, a, ia);
        bool finite = false;
        for (int64_t j = 0; j < w; j++) {
            prm[j] = isfinite(a[j]) ? a[j] : 0.0;
            finite |= isfinite(a[j]) != 0;
        }
        if (finite) tile_pass(pl, K_SUMEXP, p0, w, prm, b, ib);
        for (int64_t j = 0; j < w; j++)
            store_f(op0, out->dtype, o0 + j, isfinite(a[j]) ? a[j] + log(b[j]) : a[j]);
        break;
    }
    case EM_OP_NORM: {
        double p = k->f[0];
        int kind = isinf(p) ? K_MAXABS : p == 1 ? K_ABS : p == 2 ? K_SQ : K_POW;
        tile_pass(pl, kind, p0, w, prm, a, ia);
        for (int64_t j = 0; j < w; j++) {
            double v = kind == K_SQ ? sqrt(a[j]) : kind == K_POW ? pow(a[j], 1.0 / p) : a[j];
            store_f(op0, out->dtype, o0 + j, v);
        }
        break;
    }
    case EM_OP_MAX:
    case EM_OP_MIN:
    case EM_OP_ARGMAX: {
        tile_pass(pl, k->op == EM_OP_MIN ? K_MIN : K_MAX, p0, w, prm, a, ia);
        em_tensor *vals = k->op == EM_OP_ARGMAX ? NULL : out;
        em_tensor *inds = k->op == EM_OP_ARGMAX ? out : k->out[1];
        for (int64_t j = 0; j < w; j++) {
            if (vals) store_f(op0, vals->dtype, o0 + j, a[j]);
            if (inds) ((int64_t *)out_ptr(inds))[o0 + j] = ia[j];
        }
        break;
    }
    default:
        break;
    }
}

/* ---- integer and bool inputs (exact, int64) ------------------------------- */

static inline int64_t ld_int(const char *p, em_dtype dt)
{
    switch (dt) {
    case EM_I64: return *(const int64_t *)p;
    case EM_I32: return *(const int32_t *)p;
    default: return *(const uint8_t *)p != 0;
    }
}

static void int_output(const plan *pl, const em_kargs *k, int64_t o)
{
    int64_t q = o, off = 0;
    for (int d = pl->nk - 1; d >= 0; d--) {
        off += (q % pl->ksize[d]) * pl->kstride[d];
        q /= pl->ksize[d];
    }
    const int nr = pl->nr;
    const int64_t es = (int64_t)pl->es;
    int64_t ri[EM_MAX_DIMS] = {0};
    uint64_t sum = 0;   /* wraps on overflow, as torch's int64 sum does */
    int64_t best = 0, bi = 0;
    const bool is_min = k->op == EM_OP_MIN;
    for (int64_t r = 0; r < pl->R;) {
        const char *p = pl->base + off * es;
        int64_t n = pl->rsize[nr - 1], s = pl->rstride[nr - 1] * es;
        for (int64_t i = 0; i < n; i++, p += s) {
            int64_t v = ld_int(p, pl->dt);
            sum += (uint64_t)v;
            if (r + i == 0 || (is_min ? v < best : v > best)) { best = v; bi = r + i; }
        }
        r += n;
        off += n * pl->rstride[nr - 1];
        ri[nr - 1] = n;
        for (int d = nr - 1; d > 0 && ri[d] == pl->rsize[d]; d--) {
            off -= ri[d] * pl->rstride[d];
            ri[d] = 0;
            ri[d - 1]++;
            off += pl->rstride[d - 1];
        }
    }
    em_tensor *out = k->out[0];
    void *dst = out_ptr(out);
    switch (k->op) {
    case EM_OP_SUM: ((int64_t *)dst)[o] = (int64_t)sum; break;
    case EM_OP_ARGMAX: ((int64_t *)dst)[o] = bi; break;
    default:
        switch (out->dtype) {
        case EM_I64: ((int64_t *)dst)[o] = best; break;
        case EM_I32: ((int32_t *)dst)[o] = (int32_t)best; break;
        default: ((uint8_t *)dst)[o] = (uint8_t)(best != 0); break;
        }
        if (k->out[1]) ((int64_t *)out_ptr(k->out[1]))[o] = bi;
        break;
    }
}

/* ---- entry ------------------------------------------------------------------ */

static int reduce(const em_kargs *k)
{
    plan pl;
    plan_init(&pl, k->in[0], k->i[0]);
    if (k->op == EM_OP_NORM) pl.pw = k->f[0];
    if (pl.nout == 0) return EM_OK;
    const bool par = pl.nout * (pl.R > 0 ? pl.R : 1) >= PAR_WORK && omp_get_max_threads() > 1;
    if (!em_dtype_is_float(pl.dt)) {
#pragma omp parallel for schedule(static) if (par)
        for (int64_t o = 0; o < pl.nout; o++) int_output(&pl, k, o);
        return EM_OK;
    }
    /* A few big tiles are split inside tile_pass; otherwise split over tiles. */
    const bool over_tiles = par && tile_chunks(&pl, pl.tile_w) <= 1;
    const int nthr = over_tiles ? omp_get_max_threads() : 1;
    const size_t per_thread = 5 * (size_t)pl.tile_w;   /* see float_tile */
    double *scratch = em__malloc(sizeof(double) * per_thread * (size_t)nthr);
    if (!scratch) return em__fail(EM_ERR_OOM, "%s: out of memory for reduction scratch", em_op_table[k->op].name);
    if (over_tiles) {
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < pl.ntiles; t++)
            float_tile(&pl, k, t, scratch + per_thread * (size_t)omp_get_thread_num());
    } else {
        for (int64_t t = 0; t < pl.ntiles; t++) float_tile(&pl, k, t, scratch);
    }
    em__free(scratch);
    return EM_OK;
}

int em_cpu_SUM(const em_kargs *k) { return reduce(k); }
int em_cpu_MEAN(const em_kargs *k) { return reduce(k); }
int em_cpu_VAR(const em_kargs *k) { return reduce(k); }
int em_cpu_LOGSUMEXP(const em_kargs *k) { return reduce(k); }
int em_cpu_NORM(const em_kargs *k) { return reduce(k); }
int em_cpu_MAX(const em_kargs *k) { return reduce(k); }
int em_cpu_MIN(const em_kargs *k) { return reduce(k); }
int em_cpu_ARGMAX(const em_kargs *k) { return reduce(k); }
