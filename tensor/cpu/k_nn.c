/* ember — CPU kernels of the fused NN ops (contracts in tensor/ops.h):
 * softmax / log_softmax and their backward, embedding and its backward,
 * dropout, cross-entropy and its backward (layer_norm: k_layer_norm.c).
 *
 * Every kernel accepts strided inputs and writes contiguous outputs. f32 has
 * fast paths over contiguous rows, vectorized with `omp simd` and exp_le.
 * Everything else gathers a row into a per-thread scratch row (f32 for
 * f32/f16/bf16, f64 for f64), computes there with the same row functions, and
 * scatters the result back. Reductions across rows (embedding's dw,
 * cross-entropy's mean) run in a fixed order, so results are bit-identical
 * whatever the thread count.
 *
 * Failure: scratch allocations go through em__malloc and return EM_ERR_OOM.
 * Ids/targets are validated by the ops; the kernels re-check them cheaply and
 * return EM_ERR_INVALID rather than read out of bounds.
 */
#include "tensor/cpu/k_nn_rows.h"
#include "tensor/cpu/transpose.h"
#include "tensor/cpu/vmath.h"

#include <math.h>
#include <string.h>

#define BIG_ROW 65536           /* a softmax row this long is split across threads */

/* exp(x) for x <= 88, the only arguments softmax-like kernels pass (x - max,
 * x - lse, a log-probability): cheaper than em__expf, which also covers
 * overflow and subnormal results. Results below FLT_MIN (x < -87.34, -inf
 * included) are 0; NaN stays NaN. Max error 1.1 ulp (checked against f64 exp
 * over every f32 in [-88, 0]). Same reduction and polynomial as em__expf. */
static inline float exp_le(float x)
{
    const float lo = -87.33654475f;   /* ln(FLT_MIN) */
    float xc = x < lo ? lo : x;        /* NaN passes through */
    float t = xc * 1.44269504089f + 12582912.0f;   /* round(x / ln2) + 1.5 * 2^23 */
    float n = t - 12582912.0f;
    float r = EM__FMAF(-n, 0.693145751953125f, xc);
    r = EM__FMAF(-n, 1.428606765330187e-06f, r);
    float p = em__exp_reduced(r);
    /* 2^n from t's low mantissa bits (n in [-126, 127]); no float->int conversion, so NaN is harmless */
    union { float f; uint32_t u; } tb = {.f = t}, sc;
    sc.u = (tb.u - 0x4B400000u + 127u) << 23;
    float y = p * sc.f;
    return x < lo ? 0.0f : y;
}

/* ---- softmax / log_softmax ------------------------------------------------ */

/* Row max ignoring NaN (a NaN still poisons the sum below, as in torch). */
static inline float row_max_f32(const float *x, int64_t n)
{
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    return m;
}

/* y = softmax(x) or log_softmax(x) over n contiguous floats; y may be x.
 * A row of only -inf gives NaN, as torch. */
static void softmax_row_f32(const float *x, float *y, int64_t n, bool log_out)
{
    float m = row_max_f32(x, n), s = 0.0f;
    if (log_out) {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < n; j++) s += exp_le(x[j] - m);
        float ls = logf(s);
#pragma omp simd
        for (int64_t j = 0; j < n; j++) y[j] = (x[j] - m) - ls;
    } else {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < n; j++) {
            float e = exp_le(x[j] - m);
            y[j] = e;
            s += e;
        }
        float inv = 1.0f / s;
#pragma omp simd
        for (int64_t j = 0; j < n; j++) y[j] *= inv;
    }
}

static void softmax_row_f64(const double *x, double *y, int64_t n, bool log_out)
{
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < n; j++) m = x[j] > m ? x[j] : m;
    if (log_out) {
        for (int64_t j = 0; j < n; j++) s += exp(x[j] - m);
        double ls = log(s);
        for (int64_t j = 0; j < n; j++) y[j] = (x[j] - m) - ls;
    } else {
        for (int64_t j = 0; j < n; j++) s += (y[j] = exp(x[j] - m));
        for (int64_t j = 0; j < n; j++) y[j] /= s;
    }
}

/* One long contiguous f32 row split across nt threads: each thread folds its
 * part, block by block, into a running (max m, sum of exp(x - m)); the parts
 * combine in thread order; a second parallel pass writes y. */
static void softmax_bigrow_f32(const float *x, float *y, int64_t n, bool log_out, int nt)
{
    enum { BLOCK = 4096, MAXT = 256 };
    float pm[MAXT], ps[MAXT];
    if (nt > MAXT) nt = MAXT;
    for (int t = 0; t < nt; t++) pm[t] = -INFINITY, ps[t] = 0.0f;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        int64_t lo = n * t / T, hi = n * (t + 1) / T;
        float m = -INFINITY, s = 0.0f;
        for (int64_t b = lo; b < hi; b += BLOCK) {
            int64_t len = hi - b < BLOCK ? hi - b : BLOCK;
            float bm = row_max_f32(x + b, len);
            if (bm > m) {
                s *= exp_le(m - bm);
                m = bm;
            }
            /* while everything so far is -inf, shift by 0: exp(-inf) = 0, NaN stays NaN */
            float ref = m == -INFINITY ? 0.0f : m, bs = 0.0f;
#pragma omp simd reduction(+ : bs)
            for (int64_t j = b; j < b + len; j++) bs += exp_le(x[j] - ref);
            s += bs;
        }
        pm[t] = m;
        ps[t] = s;
    }
    float M = -INFINITY, S = 0.0f;
    for (int t = 0; t < nt; t++) M = pm[t] > M ? pm[t] : M;
    for (int t = 0; t < nt; t++) S += ps[t] * exp_le(pm[t] - M);   /* all -inf: NaN, as one row */
    float ls = logf(S), inv = 1.0f / S;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < n; b += BLOCK) {
        int64_t e = n - b < BLOCK ? n : b + BLOCK;
        if (log_out) {
#pragma omp simd
            for (int64_t j = b; j < e; j++) y[j] = (x[j] - M) - ls;
        } else {
#pragma omp simd
            for (int64_t j = b; j < e; j++) y[j] = exp_le(x[j] - M) * inv;
        }
    }
}

/* ---- softmax over a dim that is not the last ----------------------------------
 * With inner = the elements after `dim` > 1, one row (one output's softmax)
 * runs with stride inner, one cache line an element, and a row-at-a-time
 * gather thrashed the cache ([2048,1024] over dim 0: 22 ms, against 0.65 over
 * dim 1). COLS adjacent rows share those lines, so they are gathered together
 * into scratch rows (whole lines read), each row goes through the same row
 * function as the one-row gather (same values, same bits), and the block is
 * scattered back. For contiguous f32 operands; other cases keep the row
 * gather. */
enum { COLS = 16 };
/* Longer rows keep the one-row gather: a block's scratch (COLS rows, 4 MB at
 * this length, twice that for the backward) stays within a few L2s. */
#define COLS_MAX_N ((int64_t)1 << 16)

static int64_t pitch_of(int64_t n) { return (n + 15) & ~(int64_t)15; }   /* 64-byte rows */

/* dst row b (pitch floats) = column b of src's [n][inner] block, b < w */
static void gather_cols(float *dst, int64_t pitch, const float *src, int64_t n, int64_t inner, int64_t w)
{
    if (w == COLS && n % 16 == 0) {   /* 16 x 16 register transposes */
        transpose_f32(dst, pitch, src, inner, n, COLS);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < w; b++) dst[b * pitch + i] = src[i * inner + b];
}

static void scatter_cols(float *dst, const float *src, int64_t pitch, int64_t n, int64_t inner, int64_t w)
{
    if (w == COLS && n % 16 == 0) {
        transpose_f32(dst, inner, src, pitch, COLS, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < w; b++) dst[i * inner + b] = src[b * pitch + i];
}

static int softmax_forward(const em_kargs *k, bool log_out)
{
    const em_tensor *x = k->in[0];
    em_tensor *y = k->out[0];
    int dim = (int)k->i[0];   /* -1 for a 0-d tensor */
    int64_t n = dim_size(x, dim), numel = em_numel(x);
    if (n == 0 || numel == 0) return EM_OK;
    int64_t rows = numel / n;
    int nt = threads_for(numel, rows);

    if (x->dtype == EM_F32 && y->dtype == EM_F32 && em_is_contiguous(x) && em_is_contiguous(y) &&
        inner_size(x, dim) == 1) {
        const float *xp = (const float *)data_of(x) + x->offset;
        float *yp = (float *)data_of(y) + y->offset;
        int maxt = threads_for(numel, numel);
        if (n >= BIG_ROW && maxt > 1 && rows < 4 * (int64_t)maxt) {
            for (int64_t r = 0; r < rows; r++) softmax_bigrow_f32(xp + r * n, yp + r * n, n, log_out, maxt);
            return EM_OK;
        }
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < rows; r++) softmax_row_f32(xp + r * n, yp + r * n, n, log_out);
        return EM_OK;
    }

    int64_t inner = inner_size(x, dim);
    if (x->dtype == EM_F32 && y->dtype == EM_F32 && em_is_contiguous(x) && em_is_contiguous(y) && inner > 1 &&
        n <= COLS_MAX_N) {
        const float *xp = (const float *)data_of(x) + x->offset;
        float *yp = (float *)data_of(y) + y->offset;
        int64_t blocks = (inner + COLS - 1) / COLS, tasks = numel / (n * inner) * blocks, pitch = pitch_of(n);
        int ntk = threads_for(numel, tasks);
        float *cols = em__malloc((size_t)ntk * COLS * (size_t)pitch * sizeof(float) + 64);
        if (!cols) return EM_ERR_OOM;
        float *aligned = (float *)(((uintptr_t)cols + 63) & ~(uintptr_t)63);
#pragma omp parallel for num_threads(ntk) schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            float *buf = aligned + (size_t)omp_get_thread_num() * COLS * (size_t)pitch;
            int64_t base = t / blocks * n * inner + t % blocks * COLS, w = inner - t % blocks * COLS;
            if (w > COLS) w = COLS;
            gather_cols(buf, pitch, xp + base, n, inner, w);
            for (int64_t b = 0; b < w; b++) softmax_row_f32(buf + b * pitch, buf + b * pitch, n, log_out);
            scatter_cols(yp + base, buf, pitch, n, inner, w);
        }
        em__free(cols);
        return EM_OK;
    }

    bool dbl = x->dtype == EM_F64;
    size_t es = dbl ? sizeof(double) : sizeof(float);
    char *scratch = em__malloc((size_t)nt * (size_t)n * es);
    if (!scratch) return EM_ERR_OOM;
    int64_t xs = dim_stride(x, dim), ys = dim_stride(y, dim);
#pragma omp parallel num_threads(nt)
    {
        void *buf = scratch + (size_t)omp_get_thread_num() * (size_t)n * es;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t xo = row_base(x, dim, r), yo = row_base(y, dim, r);
            if (dbl) {
                load_row_d(x, xo, xs, n, buf);
                softmax_row_f64(buf, buf, n, log_out);
                store_row_d(y, yo, ys, n, buf);
            } else {
                load_row_f(x, xo, xs, n, buf);
                softmax_row_f32(buf, buf, n, log_out);
                store_row_f(y, yo, ys, n, buf);
            }
        }
    }
    em__free(scratch);
    return EM_OK;
}

int em_cpu_SOFTMAX(const em_kargs *k) { return softmax_forward(k, false); }
int em_cpu_LOG_SOFTMAX(const em_kargs *k) { return softmax_forward(k, true); }

/* dx from the forward output y and dy over n contiguous elements; dx may be dy.
 *   softmax:     dx = y * (dy - sum(dy * y))
 *   log_softmax: dx = dy - exp(y) * sum(dy) */
static void softmax_bwd_row_f32(const float *y, const float *dy, float *dx, int64_t n, bool log_out)
{
    float s = 0.0f;
    if (log_out) {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < n; j++) s += dy[j];
#pragma omp simd
        for (int64_t j = 0; j < n; j++) dx[j] = dy[j] - exp_le(y[j]) * s;
    } else {
#pragma omp simd reduction(+ : s)
        for (int64_t j = 0; j < n; j++) s += dy[j] * y[j];
#pragma omp simd
        for (int64_t j = 0; j < n; j++) dx[j] = y[j] * (dy[j] - s);
    }
}

static void softmax_bwd_row_f64(const double *y, const double *dy, double *dx, int64_t n, bool log_out)
{
    double s = 0.0;
    if (log_out) {
        for (int64_t j = 0; j < n; j++) s += dy[j];
        for (int64_t j = 0; j < n; j++) dx[j] = dy[j] - exp(y[j]) * s;
    } else {
        for (int64_t j = 0; j < n; j++) s += dy[j] * y[j];
        for (int64_t j = 0; j < n; j++) dx[j] = y[j] * (dy[j] - s);
    }
}

static int softmax_backward(const em_kargs *k, bool log_out)
{
    const em_tensor *y = k->in[0], *dy = k->in[1];
    em_tensor *dx = k->out[0];
    int dim = (int)k->i[0];
    int64_t n = dim_size(dx, dim), numel = em_numel(dx);
    if (n == 0 || numel == 0) return EM_OK;
    int64_t rows = numel / n;
    int nt = threads_for(numel, rows);

    if (y->dtype == EM_F32 && dy->dtype == EM_F32 && dx->dtype == EM_F32 && em_is_contiguous(y) &&
        em_is_contiguous(dy) && em_is_contiguous(dx) && inner_size(dx, dim) == 1) {
        const float *yp = (const float *)data_of(y) + y->offset, *gp = (const float *)data_of(dy) + dy->offset;
        float *op = (float *)data_of(dx) + dx->offset;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < rows; r++) softmax_bwd_row_f32(yp + r * n, gp + r * n, op + r * n, n, log_out);
        return EM_OK;
    }

    int64_t inner = inner_size(dx, dim);
    if (y->dtype == EM_F32 && dy->dtype == EM_F32 && dx->dtype == EM_F32 && em_is_contiguous(y) &&
        em_is_contiguous(dy) && em_is_contiguous(dx) && inner > 1 && n <= COLS_MAX_N) {   /* blocks of COLS rows */
        const float *yp = (const float *)data_of(y) + y->offset, *gp = (const float *)data_of(dy) + dy->offset;
        float *op = (float *)data_of(dx) + dx->offset;
        int64_t blocks = (inner + COLS - 1) / COLS, tasks = numel / (n * inner) * blocks, pitch = pitch_of(n);
        int ntk = threads_for(numel, tasks);
        float *cols = em__malloc((size_t)ntk * 2 * COLS * (size_t)pitch * sizeof(float) + 64);
        if (!cols) return EM_ERR_OOM;
        float *aligned = (float *)(((uintptr_t)cols + 63) & ~(uintptr_t)63);
#pragma omp parallel for num_threads(ntk) schedule(static)
        for (int64_t t = 0; t < tasks; t++) {
            float *yb = aligned + (size_t)omp_get_thread_num() * 2 * COLS * (size_t)pitch, *gb = yb + COLS * pitch;
            int64_t base = t / blocks * n * inner + t % blocks * COLS, w = inner - t % blocks * COLS;
            if (w > COLS) w = COLS;
            gather_cols(yb, pitch, yp + base, n, inner, w);
            gather_cols(gb, pitch, gp + base, n, inner, w);
            for (int64_t b = 0; b < w; b++) softmax_bwd_row_f32(yb + b * pitch, gb + b * pitch, gb + b * pitch, n, log_out);
            scatter_cols(op + base, gb, pitch, n, inner, w);
        }
        em__free(cols);
        return EM_OK;
    }

    bool dbl = dx->dtype == EM_F64;
    size_t es = dbl ? sizeof(double) : sizeof(float);
    char *scratch = em__malloc((size_t)nt * 2 * (size_t)n * es);
    if (!scratch) return EM_ERR_OOM;
#pragma omp parallel num_threads(nt)
    {
        char *buf = scratch + (size_t)omp_get_thread_num() * 2 * (size_t)n * es;
        void *yb = buf, *gb = buf + (size_t)n * es;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            int64_t yo = row_base(y, dim, r), go = row_base(dy, dim, r), oo = row_base(dx, dim, r);
            if (dbl) {
                load_row_d(y, yo, dim_stride(y, dim), n, yb);
                load_row_d(dy, go, dim_stride(dy, dim), n, gb);
                softmax_bwd_row_f64(yb, gb, gb, n, log_out);
                store_row_d(dx, oo, dim_stride(dx, dim), n, gb);
            } else {
                load_row_f(y, yo, dim_stride(y, dim), n, yb);
                load_row_f(dy, go, dim_stride(dy, dim), n, gb);
                softmax_bwd_row_f32(yb, gb, gb, n, log_out);
                store_row_f(dx, oo, dim_stride(dx, dim), n, gb);
            }
        }
    }
    em__free(scratch);
    return EM_OK;
}

int em_cpu_SOFTMAX_BWD(const em_kargs *k) { return softmax_backward(k, false); }
int em_cpu_LOG_SOFTMAX_BWD(const em_kargs *k) { return softmax_backward(k, true); }

/* ---- embedding ---------------------------------------------------------------- */

int em_cpu_EMBEDDING(const em_kargs *k)
{
    const em_tensor *w = k->in[0], *ids = k->in[1];
    em_tensor *out = k->out[0];
    int64_t V = w->shape[0], D = w->shape[1], N = em_numel(ids);
    size_t es = em_dtype_size(w->dtype);
    bool ids_contig = em_is_contiguous(ids), w_rows = w->stride[1] == 1 || D <= 1;
    const char *wp = data_of(w);
    char *op = data_of(out) + (size_t)out->offset * es;
    int bad = 0;
#pragma omp parallel for num_threads(threads_for(N * D, N)) schedule(static) reduction(| : bad)
    for (int64_t n = 0; n < N; n++) {
        int64_t id = index_at(ids, n, ids_contig);
        if (id < 0 || id >= V) {
            bad = 1;
            continue;
        }
        const char *src = wp + (size_t)(w->offset + id * w->stride[0]) * es;
        char *dst = op + (size_t)(n * D) * es;
        if (w_rows) memcpy(dst, src, (size_t)D * es);
        else
            for (int64_t j = 0; j < D; j++) memcpy(dst + (size_t)j * es, src + (size_t)(j * w->stride[1]) * es, es);
    }
    return bad ? em__fail(EM_ERR_INVALID, "embedding: an id is out of range [0, %lld)", (long long)V) : EM_OK;
}

/* dw[v] = sum of the dy rows whose id is v, added in increasing row order.
 * Rows are grouped by id with a stable counting sort, then each dw row is
 * summed by one thread (f32 accumulation; f64 for f64): no atomics, and the
 * result does not depend on the thread count. */
/* dw[off .. off + D) = dw + round(a) as em_add computes it (a rounded to dw's
 * dtype first, then the sum in f32, or f64 for f64, rounded once): the bits of
 * adding the dense result into dw. a is f32 or f64 (adt). */
static void add_row_rounded(em_tensor *dw, int64_t off, int64_t D, const void *a, em_dtype adt)
{
    char *o = data_of(dw) + (size_t)off * em_dtype_size(dw->dtype);
    size_t es = em_dtype_size(dw->dtype), as = em_dtype_size(adt);
    for (int64_t j = 0; j < D; j++) {
        char g[8];
        em__store(g, dw->dtype, em__load((const char *)a + (size_t)j * as, adt));   /* the dense result's element */
        double sum = dw->dtype == EM_F64 ? em__load(o + j * es, EM_F64) + em__load(g, EM_F64)
                                         : (double)((float)em__load(o + j * es, dw->dtype) + (float)em__load(g, dw->dtype));
        em__store(o + j * es, dw->dtype, sum);
    }
}

int em_cpu_EMBEDDING_BWD(const em_kargs *k)
{
    const em_tensor *dy = k->in[0], *ids = k->in[1];
    em_tensor *dw = k->out[0];
    int64_t V = dw->shape[0], D = dw->shape[1], N = em_numel(ids), pad = k->i[0];
    bool into = k->i[1] != 0;   /* add into dw (contiguous): picked rows only */
    size_t oes = em_dtype_size(dw->dtype);
    if (!into) memset(data_of(dw) + (size_t)dw->offset * oes, 0, (size_t)(V * D) * oes);
    if (N == 0 || D == 0 || V == 0) return EM_OK;

    bool ids_contig = em_is_contiguous(ids);
    int64_t *start = em__calloc((size_t)V + 1, sizeof(int64_t));
    int64_t *order = em__malloc((size_t)N * sizeof(int64_t));
    int nt = threads_for(N * D, V);
    bool dbl = dw->dtype == EM_F64;
    size_t es = dbl ? sizeof(double) : sizeof(float);
    char *scratch = em__malloc((size_t)nt * 2 * (size_t)D * es);
    if (!start || !order || !scratch) {
        em__free(start), em__free(order), em__free(scratch);
        return EM_ERR_OOM;
    }
    for (int64_t n = 0; n < N; n++) {
        int64_t id = index_at(ids, n, ids_contig);
        if (id < 0 || id >= V) {
            em__free(start), em__free(order), em__free(scratch);
            return em__fail(EM_ERR_INVALID, "embedding_backward: id %lld out of range [0, %lld)", (long long)id,
                            (long long)V);
        }
        start[id + 1]++;
    }
    for (int64_t v = 0; v < V; v++) start[v + 1] += start[v];
    for (int64_t n = 0; n < N; n++) order[start[index_at(ids, n, ids_contig)]++] = n;
    /* start[v] is now the end of group v, i.e. the beginning of group v + 1 */

    int last = dy->ndim - 1;
    int64_t gs = dy->stride[last];
    bool fast = dy->dtype == EM_F32 && dw->dtype == EM_F32 && gs == 1;
#pragma omp parallel num_threads(nt)
    {
        char *buf = scratch + (size_t)omp_get_thread_num() * 2 * (size_t)D * es;
        void *acc = buf, *row = buf + (size_t)D * es;
#pragma omp for schedule(dynamic, 16)
        for (int64_t v = 0; v < V; v++) {
            int64_t lo = v ? start[v - 1] : 0, hi = start[v];
            if (lo == hi || v == pad) continue;
            if (dbl) {
                double *a = acc, *rw = row;
                memset(a, 0, (size_t)D * sizeof(double));
                for (int64_t i = lo; i < hi; i++) {
                    load_row_d(dy, row_base(dy, last, order[i]), gs, D, rw);
                    for (int64_t j = 0; j < D; j++) a[j] += rw[j];
                }
                if (into) add_row_rounded(dw, dw->offset + v * D, D, a, EM_F64);
                else store_row_d(dw, dw->offset + v * D, 1, D, a);
            } else {
                float *a = fast && !into ? (float *)data_of(dw) + dw->offset + v * D : acc;
                memset(a, 0, (size_t)D * sizeof(float));
                for (int64_t i = lo; i < hi; i++) {
                    const float *src = row;
                    if (fast) src = (const float *)data_of(dy) + row_base(dy, last, order[i]);
                    else load_row_f(dy, row_base(dy, last, order[i]), gs, D, row);
#pragma omp simd
                    for (int64_t j = 0; j < D; j++) a[j] += src[j];
                }
                if (into && fast) {
                    float *o = (float *)data_of(dw) + dw->offset + v * D;
#pragma omp simd
                    for (int64_t j = 0; j < D; j++) o[j] += a[j];
                } else if (into) {
                    add_row_rounded(dw, dw->offset + v * D, D, a, EM_F32);
                } else if (!fast) {
                    store_row_f(dw, dw->offset + v * D, 1, D, a);
                }
            }
        }
    }
    em__free(start), em__free(order), em__free(scratch);
    return EM_OK;
}

/* ---- dropout ------------------------------------------------------------------- */

/* Element e (row-major over x's shape) uses Philox counter offset + e/4, lane
 * e%4: it is kept iff u >= p with u = em__u32_to_unit(lane), and then scaled
 * by 1/(1-p) (f32 arithmetic for f32/f16/bf16). Since u = (bits >> 8) * 2^-24,
 * u >= p is exactly (bits >> 8) >= ceil(p * 2^24), an integer test that
 * vectorizes. The mask is the same on every device and for every layout.
 * A given mask (in[1], contiguous bool: the one this key gives) is read
 * instead of drawn: a backward then costs one pass and no Philox. */
int em_cpu_DROPOUT(const em_kargs *k)
{
    enum { CHUNK = 1024 };   /* elements per task (256 Philox blocks) */
    const em_tensor *x = k->in[0];
    em_tensor *y = k->out[0], *mask = k->out[1];
    double p = k->f[0];
    uint64_t seed = (uint64_t)k->i[0], offset = (uint64_t)k->i[1];
    int64_t n = em_numel(x);
    if (n == 0) return EM_OK;
    uint8_t *mp = mask ? (uint8_t *)data_of(mask) + mask->offset : NULL;
    const uint8_t *given = k->in[1] ? (const uint8_t *)data_of(k->in[1]) + k->in[1]->offset : NULL;
    bool contig = em_is_contiguous(x), dbl = x->dtype == EM_F64;
    bool fast = contig && x->dtype == EM_F32 && y->dtype == EM_F32;
    bool fast_bf16 = contig && x->dtype == EM_BF16 && y->dtype == EM_BF16;   /* autocast's activations */
    uint32_t thr = (uint32_t)ceil(p * 16777216.0);   /* 0 keeps all, 2^24 keeps none */
    double scale_d = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    float scale_f = (float)scale_d;
    size_t xes = em_dtype_size(x->dtype), yes = em_dtype_size(y->dtype);
    const char *xp = data_of(x);
    char *yp = data_of(y);
    int64_t nchunk = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for num_threads(threads_for(n, nchunk)) schedule(static)
    for (int64_t c = 0; c < nchunk; c++) {
        uint32_t bits[CHUNK];
        uint8_t keep[CHUNK];
        int64_t e0 = c * CHUNK, len = n - e0 < CHUNK ? n - e0 : CHUNK;
        if (given) {
            memcpy(keep, given + e0, (size_t)len);
        } else if (p > 0.0 && p < 1.0) {
            /* 64 elements = 16 blocks per call (CHUNK is a multiple of 64, e0 of 4) */
            for (int64_t i = 0; i < len; i += 64)
                em__philox_batch16(seed, offset + (uint64_t)(e0 + i) / 4, (uint32_t(*)[4])(bits + i));
#pragma omp simd
            for (int64_t i = 0; i < len; i++) keep[i] = (bits[i] >> 8) >= thr;
        } else {
            memset(keep, p <= 0.0, (size_t)len);
        }
        if (mp) memcpy(mp + e0, keep, (size_t)len);
        if (fast) {
            const float *xs = (const float *)xp + x->offset + e0;
            float *ys = (float *)yp + y->offset + e0;
#pragma omp simd
            for (int64_t i = 0; i < len; i++) ys[i] = keep[i] ? xs[i] * scale_f : 0.0f;
            continue;
        }
        if (fast_bf16) {   /* the generic path's arithmetic: f32 product, rounded once to bf16 */
            _Alignas(64) float xf[CHUNK];   /* vector converts (bitwise the scalar ones) around a simd loop */
            em__convert_n(xf, EM_F32, (const uint16_t *)xp + x->offset + e0, EM_BF16, len);
#pragma omp simd
            for (int64_t i = 0; i < len; i++) xf[i] = keep[i] ? xf[i] * scale_f : 0.0f;
            em__convert_n((uint16_t *)yp + y->offset + e0, EM_BF16, xf, EM_F32, len);
            continue;
        }
        for (int64_t i = 0; i < len; i++) {
            int64_t xo = contig ? x->offset + e0 + i : row_base(x, -1, e0 + i);
            double v = 0.0;
            if (keep[i] && dbl) v = em__load(xp + (size_t)xo * xes, x->dtype) * scale_d;
            else if (keep[i]) v = (float)em__load(xp + (size_t)xo * xes, x->dtype) * scale_f;
            em__store(yp + (size_t)(y->offset + e0 + i) * yes, y->dtype, v);
        }
    }
    return EM_OK;
}

/* ---- cross-entropy -------------------------------------------------------------- */

/* Max m and s = sum(exp(x - m)) of n contiguous values: lse = m + log(s). */
static void lse_parts_f32(const float *x, int64_t n, float *m, float *s)
{
    float mm = row_max_f32(x, n), ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t j = 0; j < n; j++) ss += exp_le(x[j] - mm);
    *m = mm, *s = ss;
}

static void lse_parts_f64(const double *x, int64_t n, double *m, double *s)
{
    double mm = -INFINITY, ss = 0.0;
    for (int64_t j = 0; j < n; j++) mm = x[j] > mm ? x[j] : mm;
    for (int64_t j = 0; j < n; j++) ss += exp(x[j] - mm);
    *m = mm, *s = ss;
}

/* Per-row loss (0 for ignored rows) into rl (f64 [N]), lse into out[1]. */
int em_cpu_CROSS_ENTROPY(const em_kargs *k)
{
    const em_tensor *x = k->in[0], *tg = k->in[1];
    em_tensor *loss = k->out[0], *lse = k->out[1];
    int64_t ignore = k->i[0];
    em_reduction red = (em_reduction)k->i[1];
    int64_t N = x->shape[0], C = x->shape[1], cs = x->stride[1];
    bool dbl = x->dtype == EM_F64, rows_f32 = x->dtype == EM_F32 && cs == 1, tg_contig = em_is_contiguous(tg);
    size_t es = dbl ? sizeof(double) : sizeof(float);
    int nt = threads_for(N * C, N);
    double *rl = em__malloc((size_t)N * sizeof(double) + 1);
    char *scratch = em__malloc((size_t)nt * (size_t)C * es + 1);
    if (!rl || !scratch) {
        em__free(rl), em__free(scratch);
        return EM_ERR_OOM;
    }
    int bad = 0;
#pragma omp parallel num_threads(nt) reduction(| : bad)
    {
        void *buf = scratch + (size_t)omp_get_thread_num() * (size_t)C * es;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            int64_t t = index_at(tg, n, tg_contig), xo = x->offset + n * x->stride[0];
            bool ign = t == ignore;
            if (!ign && (t < 0 || t >= C)) {
                bad = 1;
                t = 0, ign = true;
            }
            double m, s, xt = 0.0;
            if (dbl) {
                load_row_d(x, xo, cs, C, buf);
                lse_parts_f64(buf, C, &m, &s);
                if (!ign) xt = ((double *)buf)[t];
            } else {
                float mf, sf;
                const float *row = rows_f32 ? (const float *)data_of(x) + xo : buf;
                if (!rows_f32) load_row_f(x, xo, cs, C, buf);
                lse_parts_f32(row, C, &mf, &sf);
                m = mf, s = sf;
                if (!ign) xt = row[t];
            }
            put_stat(lse, n, m + log(s));
            rl[n] = ign ? 0.0 : (m - xt) + log(s);
        }
    }
    if (bad) {
        em__free(rl), em__free(scratch);
        return em__fail(EM_ERR_INVALID, "cross_entropy: a target is out of range [0, %lld)", (long long)C);
    }
    size_t les = em_dtype_size(loss->dtype);
    char *lp = data_of(loss);
    if (red == EM_REDUCE_NONE) {
        for (int64_t n = 0; n < N; n++) em__store(lp + (size_t)(loss->offset + n) * les, loss->dtype, rl[n]);
    } else {
        double sum = 0.0;
        int64_t count = 0;
        for (int64_t n = 0; n < N; n++) {
            sum += rl[n];
            count += index_at(tg, n, tg_contig) != ignore;
        }
        double v = red == EM_REDUCE_SUM ? sum : (count ? sum / (double)count : NAN);
        em__store(lp + (size_t)loss->offset * les, loss->dtype, v);
    }
    em__free(rl), em__free(scratch);
    return EM_OK;
}

/* dlogits[n] = scale_n * (softmax(x[n]) - onehot(t[n])), zero for ignored rows;
 * scale_n = dloss[n] (none), dloss (sum) or dloss / #non-ignored rows (mean). */
int em_cpu_CROSS_ENTROPY_BWD(const em_kargs *k)
{
    const em_tensor *x = k->in[0], *tg = k->in[1], *lse = k->in[2], *dl = k->in[3];
    em_tensor *dx = k->out[0];
    int64_t ignore = k->i[0];
    em_reduction red = (em_reduction)k->i[1];
    int64_t N = x->shape[0], C = x->shape[1], cs = x->stride[1];
    bool dbl = dx->dtype == EM_F64, tg_contig = em_is_contiguous(tg);
    bool fast = x->dtype == EM_F32 && dx->dtype == EM_F32 && cs == 1;
    double scale_all = 0.0;
    if (red != EM_REDUCE_NONE) {
        scale_all = load_at(dl, dl->offset);
        if (red == EM_REDUCE_MEAN) {
            int64_t count = 0;
            for (int64_t n = 0; n < N; n++) count += index_at(tg, n, tg_contig) != ignore;
            scale_all = count ? scale_all / (double)count : 0.0;
        }
    }
    size_t es = dbl ? sizeof(double) : sizeof(float);
    int nt = threads_for(N * C, N);
    char *scratch = em__malloc((size_t)nt * (size_t)C * es + 1);
    if (!scratch) return EM_ERR_OOM;
    int bad = 0;
#pragma omp parallel num_threads(nt) reduction(| : bad)
    {
        void *buf = scratch + (size_t)omp_get_thread_num() * (size_t)C * es;
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            int64_t t = index_at(tg, n, tg_contig), xo = x->offset + n * x->stride[0];
            bool ign = t == ignore;
            if (!ign && (t < 0 || t >= C)) bad = 1, ign = true;
            double scale = ign ? 0.0 : red == EM_REDUCE_NONE ? load_at(dl, row_base(dl, -1, n)) : scale_all;
            double l = get_stat(lse, n);
            if (dbl) {
                double *b = buf;
                load_row_d(x, xo, cs, C, b);
                for (int64_t j = 0; j < C; j++) b[j] = ign ? 0.0 : exp(b[j] - l) * scale;
                if (!ign) b[t] -= scale;
                store_row_d(dx, dx->offset + n * C, 1, C, b);
            } else {
                float *o = fast ? (float *)data_of(dx) + dx->offset + n * C : buf;
                const float *row = fast ? (const float *)data_of(x) + xo : buf;
                float lf = (float)l, sf = (float)scale;
                if (!fast) load_row_f(x, xo, cs, C, buf);
                if (ign) memset(o, 0, (size_t)C * sizeof(float));
                else {
#pragma omp simd
                    for (int64_t j = 0; j < C; j++) o[j] = exp_le(row[j] - lf) * sf;
                    o[t] -= sf;
                }
                if (!fast) store_row_f(dx, dx->offset + n * C, 1, C, o);
            }
        }
    }
    em__free(scratch);
    return bad ? em__fail(EM_ERR_INVALID, "cross_entropy_backward: a target is out of range [0, %lld)", (long long)C)
               : EM_OK;
}
