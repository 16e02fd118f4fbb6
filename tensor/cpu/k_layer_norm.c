/* ember — CPU kernels of LAYER_NORM and LAYER_NORM_BWD (contracts in
 * tensor/ops.h). Rows are normalized over the last dim with statistics
 * accumulated in f64 (two passes: mean, then squared deviations). f32 rows
 * that are contiguous are used in place; other layouts and dtypes go through
 * f32 (f64 for f64) scratch rows. The backward reduces dw/db per fixed chunk
 * of rows and adds the chunks in order: bit-identical for any thread count.
 */
#include "tensor/cpu/k_nn_rows.h"

#include <math.h>

#define LN_BWD_CHUNKS 32   /* fixed row chunks of the dw/db reduction */

/* Mean and 1/sqrt(biased variance + eps) of n contiguous values: two passes,
 * accumulated in f64, so a large common offset costs no accuracy. */
static void ln_stats_f32(const float *x, int64_t n, double eps, float *mu, float *rs)
{
    double s = 0.0, v = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; j++) s += x[j];
    double m = n ? s / (double)n : 0.0;
#pragma omp simd reduction(+ : v)
    for (int64_t j = 0; j < n; j++) {
        double d = (double)x[j] - m;
        v += d * d;
    }
    *mu = (float)m;
    *rs = (float)(1.0 / sqrt((n ? v / (double)n : 0.0) + eps));
}

static void ln_stats_f64(const double *x, int64_t n, double eps, double *mu, double *rs)
{
    double s = 0.0, v = 0.0;
    for (int64_t j = 0; j < n; j++) s += x[j];
    double m = n ? s / (double)n : 0.0;
    for (int64_t j = 0; j < n; j++) v += (x[j] - m) * (x[j] - m);
    *mu = m;
    *rs = 1.0 / sqrt((n ? v / (double)n : 0.0) + eps);
}

/* y = (x - mu) * rs * w + b over n contiguous values; y may be x. */
static void ln_row_f32(const float *x, float *y, int64_t n, const float *w, const float *b, float mu, float rs)
{
#pragma omp simd
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mu) * rs * w[j] + b[j];
}

static void ln_row_f64(const double *x, double *y, int64_t n, const double *w, const double *b, double mu, double rs)
{
    for (int64_t j = 0; j < n; j++) y[j] = (x[j] - mu) * rs * w[j] + b[j];
}

/* w (or ones) and b (or zeros) as contiguous compute-type vectors of n. */
static void affine_vectors(const em_tensor *w, const em_tensor *b, int64_t n, bool dbl, void *wv, void *bv)
{
    const em_tensor *src[2] = {w, b};
    void *dst[2] = {wv, bv};
    for (int i = 0; i < 2; i++) {
        if (!dst[i]) continue;
        if (src[i] && dbl) load_row_d(src[i], src[i]->offset, src[i]->stride[0], n, dst[i]);
        else if (src[i]) load_row_f(src[i], src[i]->offset, src[i]->stride[0], n, dst[i]);
        else if (dbl) for (int64_t j = 0; j < n; j++) ((double *)dst[i])[j] = i == 0;
        else for (int64_t j = 0; j < n; j++) ((float *)dst[i])[j] = i == 0;
    }
}

int em_cpu_LAYER_NORM(const em_kargs *k)
{
    const em_tensor *x = k->in[0];
    em_tensor *y = k->out[0], *mean = k->out[1], *rstd = k->out[2];
    double eps = k->f[0];
    int last = x->ndim - 1;
    int64_t D = x->shape[last], R = em_numel(mean);
    if (R == 0) return EM_OK;
    if (D == 0) {   /* an empty row: mean 0, variance 0 */
        for (int64_t r = 0; r < R; r++) put_stat(mean, r, 0.0), put_stat(rstd, r, 1.0 / sqrt(eps));
        return EM_OK;
    }
    bool dbl = x->dtype == EM_F64;
    bool fast = x->dtype == EM_F32 && em_is_contiguous(x) && y->dtype == EM_F32;
    size_t es = dbl ? sizeof(double) : sizeof(float);
    int nt = threads_for(R * D, R);
    char *scratch = em__malloc((size_t)(2 + (fast ? 0 : nt)) * (size_t)D * es);
    if (!scratch) return EM_ERR_OOM;
    void *wv = scratch, *bv = scratch + (size_t)D * es;
    affine_vectors(k->in[1], k->in[2], D, dbl, wv, bv);
    int64_t xs = x->stride[last];
#pragma omp parallel num_threads(nt)
    {
        void *buf = scratch + (size_t)(2 + omp_get_thread_num()) * (size_t)D * es;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < R; r++) {
            if (fast) {
                const float *xr = (const float *)data_of(x) + x->offset + r * D;
                float *yr = (float *)data_of(y) + y->offset + r * D;
                float mu, rs;
                ln_stats_f32(xr, D, eps, &mu, &rs);
                ln_row_f32(xr, yr, D, wv, bv, mu, rs);
                put_stat(mean, r, mu), put_stat(rstd, r, rs);
            } else if (dbl) {
                double mu, rs;
                load_row_d(x, row_base(x, last, r), xs, D, buf);
                ln_stats_f64(buf, D, eps, &mu, &rs);
                ln_row_f64(buf, buf, D, wv, bv, mu, rs);
                store_row_d(y, y->offset + r * D, 1, D, buf);
                put_stat(mean, r, mu), put_stat(rstd, r, rs);
            } else {
                float mu, rs;
                load_row_f(x, row_base(x, last, r), xs, D, buf);
                ln_stats_f32(buf, D, eps, &mu, &rs);
                ln_row_f32(buf, buf, D, wv, bv, mu, rs);
                store_row_f(y, y->offset + r * D, 1, D, buf);
                put_stat(mean, r, mu), put_stat(rstd, r, rs);
            }
        }
    }
    em__free(scratch);
    return EM_OK;
}

/* One row of the backward. With xh = (x - mu) * rs and g = dy * w:
 *   dx = rs * (g - mean(g) - xh * mean(g * xh))
 * and the row's share of dw (dy * xh) and db (dy) is added into the f64
 * partial sums pw/pb (either may be NULL). dx may alias dy. */
static void ln_bwd_row_f32(const float *dy, const float *x, const float *w, float mu, float rs, int64_t n,
                           float *dx, double *pw, double *pb)
{
    if (pw)
#pragma omp simd
        for (int64_t j = 0; j < n; j++) pw[j] += (double)(dy[j] * ((x[j] - mu) * rs));
    if (pb)
#pragma omp simd
        for (int64_t j = 0; j < n; j++) pb[j] += (double)dy[j];
    float a = 0.0f, c = 0.0f;
#pragma omp simd reduction(+ : a, c)
    for (int64_t j = 0; j < n; j++) {
        float g = dy[j] * w[j];
        a += g;
        c += g * ((x[j] - mu) * rs);
    }
    float ma = a / (float)n, mc = c / (float)n;
#pragma omp simd
    for (int64_t j = 0; j < n; j++) dx[j] = rs * (dy[j] * w[j] - ma - ((x[j] - mu) * rs) * mc);
}

static void ln_bwd_row_f64(const double *dy, const double *x, const double *w, double mu, double rs, int64_t n,
                           double *dx, double *pw, double *pb)
{
    double a = 0.0, c = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double xh = (x[j] - mu) * rs, g = dy[j] * w[j];
        if (pw) pw[j] += dy[j] * xh;
        if (pb) pb[j] += dy[j];
        a += g;
        c += g * xh;
    }
    double ma = a / (double)n, mc = c / (double)n;
    for (int64_t j = 0; j < n; j++) dx[j] = rs * (dy[j] * w[j] - ma - ((x[j] - mu) * rs) * mc);
}

int em_cpu_LAYER_NORM_BWD(const em_kargs *k)
{
    const em_tensor *dy = k->in[0], *x = k->in[1], *mean = k->in[2], *rstd = k->in[3], *w = k->in[4];
    em_tensor *dx = k->out[0], *dw = k->out[1], *db = k->out[2];
    int last = x->ndim - 1;
    int64_t D = x->shape[last], R = em_numel(mean);
    bool dbl = dx->dtype == EM_F64;
    bool fast = !dbl && x->dtype == EM_F32 && dy->dtype == EM_F32 && dx->dtype == EM_F32 &&
                em_is_contiguous(x) && em_is_contiguous(dy);
    size_t es = dbl ? sizeof(double) : sizeof(float);
    /* Rows split into a fixed number of chunks (not one per thread), each with
     * its own dw/db partial sums, which are then added in chunk order: the
     * result does not depend on the thread count. */
    int64_t nch = R < LN_BWD_CHUNKS ? R : LN_BWD_CHUNKS;
    int nt = threads_for(R * D, nch);
    size_t npart = (dw ? 1 : 0) + (db ? 1 : 0);
    double *parts = NULL;
    char *scratch = em__malloc((size_t)(1 + (fast ? 0 : 2 * nt)) * (size_t)D * es + 1);
    if (!scratch) return EM_ERR_OOM;
    if (npart && nch && D && !(parts = em__calloc(npart * (size_t)nch * (size_t)D, sizeof(double)))) {
        em__free(scratch);
        return EM_ERR_OOM;
    }
    void *wv = scratch;
    affine_vectors(w, NULL, D, dbl, wv, NULL);
    int64_t xs = x->stride[last], gs = dy->stride[last];
    if (R > 0 && D > 0) {
#pragma omp parallel num_threads(nt)
        {
            char *buf = scratch + (size_t)(1 + 2 * omp_get_thread_num()) * (size_t)D * es;
            void *xb = buf, *gb = buf + (size_t)D * es;
#pragma omp for schedule(static)
            for (int64_t c = 0; c < nch; c++) {
                double *pw = dw ? parts + (size_t)c * (size_t)D : NULL;
                double *pb = db ? parts + ((size_t)(dw ? nch : 0) + (size_t)c) * (size_t)D : NULL;
                for (int64_t r = R * c / nch; r < R * (c + 1) / nch; r++) {
                    double mu = get_stat(mean, r), rs = get_stat(rstd, r);
                    if (fast) {
                        ln_bwd_row_f32((const float *)data_of(dy) + dy->offset + r * D,
                                       (const float *)data_of(x) + x->offset + r * D, wv, (float)mu, (float)rs, D,
                                       (float *)data_of(dx) + dx->offset + r * D, pw, pb);
                    } else if (dbl) {
                        load_row_d(x, row_base(x, last, r), xs, D, xb);
                        load_row_d(dy, row_base(dy, last, r), gs, D, gb);
                        ln_bwd_row_f64(gb, xb, wv, mu, rs, D, gb, pw, pb);
                        store_row_d(dx, dx->offset + r * D, 1, D, gb);
                    } else {
                        load_row_f(x, row_base(x, last, r), xs, D, xb);
                        load_row_f(dy, row_base(dy, last, r), gs, D, gb);
                        ln_bwd_row_f32(gb, xb, wv, (float)mu, (float)rs, D, gb, pw, pb);
                        store_row_f(dx, dx->offset + r * D, 1, D, gb);
                    }
                }
            }
        }
    }
    em_tensor *outs[2] = {dw, db};
    for (int o = 0, p = 0; o < 2; o++) {
        if (!outs[o]) continue;
        const double *part = parts ? parts + (size_t)p++ * (size_t)nch * (size_t)D : NULL;
        char *op = data_of(outs[o]);
        size_t oes = em_dtype_size(outs[o]->dtype);
        for (int64_t j = 0; j < D; j++) {
            double s = 0.0;
            for (int64_t c = 0; c < nch; c++) s += part[(size_t)c * (size_t)D + (size_t)j];
            if (outs[o]->dtype == EM_F32) ((float *)op)[outs[o]->offset + j] = (float)s;
            else em__store(op + (size_t)(outs[o]->offset + j) * oes, outs[o]->dtype, s);
        }
    }
    em__free(parts);
    em__free(scratch);
    return EM_OK;
}
