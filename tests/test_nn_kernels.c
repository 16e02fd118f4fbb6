/* ember tests — the fused NN ops: softmax / log_softmax and their backward,
 * layer_norm (+ backward), embedding (+ backward), dropout, cross-entropy
 * (+ backward).
 *
 * Every forward is compared with an f64 reference written here with plain
 * loops, on the values the input tensor actually holds. Backward passes are
 * checked in f64 against central finite differences of those references, and
 * in the other dtypes against the analytic formulas evaluated in f64.
 */
#include "check_util.h"
#include "tensor/op_grad.h"   /* em__unary_backward(_y): GELU_BWD given the forward's output */
#include "tensor/op_nn.h"
#include "tensor/tensor_internal.h"   /* em__philox, em__u32_to_unit: the dropout mask contract */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const em_dtype FLOATS[] = {EM_F32, EM_F64, EM_F16, EM_BF16};
#define NFLOATS 4

/* Tolerances for results computed in a dtype and rounded to it. */
static double rtol_of(em_dtype dt) { return dt == EM_F64 ? 1e-12 : dt == EM_F32 ? 2e-5 : dt == EM_F16 ? 3e-3 : 1.6e-2; }
static double atol_of(em_dtype dt) { return dt == EM_F64 ? 1e-13 : dt == EM_F32 ? 1e-6 : dt == EM_F16 ? 1e-3 : 1e-2; }

static int64_t prod(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* A random tensor and (in *ref, malloc'd) the values it holds. */
static em_tensor *rnd(int ndim, const int64_t *shape, em_dtype dt, double lo, double hi, uint64_t seed, double **ref)
{
    *ref = malloc(sizeof(double) * (size_t)(prod(ndim, shape) + 1));
    return tu_rand_tensor(ndim, shape, dt, lo, hi, seed, *ref);
}

static void expect_close(em_tensor *t, const double *ref, double rtol, double atol, const char *what)
{
    ck_assert_ptr_nonnull(t);
    double *got = tu_to_doubles(t);
    double r = tu_close_ratio(got, ref, em_numel(t), rtol, atol);
    free(got);
    ck_assert_msg(r <= 1.0, "%s: not close (ratio %g)", what, r);
}

static void expect_same_shape(const em_tensor *t, int ndim, const int64_t *shape)
{
    ck_assert_int_eq(t->ndim, ndim);
    for (int d = 0; d < ndim; d++) ck_assert_int_eq(t->shape[d], shape[d]);
}

static em_tensor *ids_tensor(int ndim, const int64_t *shape, const int64_t *v, em_dtype dt)
{
    int64_t n = prod(ndim, shape);
    if (dt == EM_I64) return em_from_data(v, ndim, shape, EM_I64);
    int32_t *w = malloc(sizeof(int32_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) w[i] = (int32_t)v[i];
    em_tensor *t = em_from_data(w, ndim, shape, EM_I32);
    free(w);
    return t;
}

/* ---- references (f64, row-major arrays) ------------------------------------------ */

static void ref_softmax(const double *x, double *y, int ndim, const int64_t *shape, int dim, bool log_out)
{
    int64_t outer = 1, n = shape[dim], inner = 1;
    for (int d = 0; d < dim; d++) outer *= shape[d];
    for (int d = dim + 1; d < ndim; d++) inner *= shape[d];
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *xr = x + o * n * inner + i;
            double *yr = y + o * n * inner + i;
            double m = -INFINITY, s = 0;
            for (int64_t j = 0; j < n; j++) m = fmax(m, xr[j * inner]);
            for (int64_t j = 0; j < n; j++) s += exp(xr[j * inner] - m);
            for (int64_t j = 0; j < n; j++)
                yr[j * inner] = log_out ? xr[j * inner] - m - log(s) : exp(xr[j * inner] - m) / s;
        }
}

static void ref_layer_norm(const double *x, int64_t R, int64_t D, const double *w, const double *b, double eps,
                           double *y, double *mean, double *rstd)
{
    for (int64_t r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < D; j++) m += x[r * D + j];
        m /= (double)D;
        for (int64_t j = 0; j < D; j++) v += (x[r * D + j] - m) * (x[r * D + j] - m);
        double rs = 1.0 / sqrt(v / (double)D + eps);
        if (mean) mean[r] = m, rstd[r] = rs;
        for (int64_t j = 0; j < D; j++)
            y[r * D + j] = (x[r * D + j] - m) * rs * (w ? w[j] : 1.0) + (b ? b[j] : 0.0);
    }
}

/* Per-row losses into rl (0 for ignored rows); returns the reduced value. */
static double ref_ce(const double *x, int64_t N, int64_t C, const int64_t *t, int64_t ignore, em_reduction red,
                     double *rl)
{
    double sum = 0;
    int64_t count = 0;
    for (int64_t n = 0; n < N; n++) {
        double m = -INFINITY, s = 0;
        for (int64_t c = 0; c < C; c++) m = fmax(m, x[n * C + c]);
        for (int64_t c = 0; c < C; c++) s += exp(x[n * C + c] - m);
        rl[n] = t[n] == ignore ? 0.0 : m + log(s) - x[n * C + t[n]];
        sum += rl[n];
        count += t[n] != ignore;
    }
    return red == EM_REDUCE_SUM ? sum : red == EM_REDUCE_MEAN ? (count ? sum / (double)count : NAN) : 0.0;
}

/* Central difference of f at x[i] (x is restored). */
typedef double (*scalar_fn)(double *x, void *ctx);
static double numgrad(scalar_fn f, double *x, int64_t i, void *ctx)
{
    const double h = 1e-6;
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f(x, ctx);
    x[i] = x0 - h;
    double fm = f(x, ctx);
    x[i] = x0;
    return (fp - fm) / (2 * h);
}

/* ---- softmax ------------------------------------------------------------------ */

START_TEST(test_softmax_dims_dtypes)
{
    const int64_t shape[3] = {3, 5, 7};
    for (int di = 0; di < NFLOATS; di++)
        for (int dim = -1; dim < 3; dim++)
            for (int lg = 0; lg < 2; lg++) EM_SCOPE {
                    em_dtype dt = FLOATS[di];
                    double *xr, *yr = malloc(sizeof(double) * 105);
                    em_tensor *x = rnd(3, shape, dt, -4, 4, 11 + di, &xr);
                    em_tensor *y = lg ? em_log_softmax(x, dim) : em_softmax(x, dim);
                    expect_same_shape(y, 3, shape);
                    ck_assert_int_eq(y->dtype, dt);
                    ref_softmax(xr, yr, 3, shape, dim < 0 ? 2 : dim, lg);
                    expect_close(y, yr, rtol_of(dt), atol_of(dt), lg ? "log_softmax" : "softmax");
                    free(xr), free(yr);
                }
}
END_TEST

/* Row lengths around the vector width, and rows long enough to be split
 * across threads (the big-row path), including a first half that is all -inf. */
START_TEST(test_softmax_last_dim_lengths)
{
    const int64_t lens[] = {1, 15, 16, 17, 1000, 70001};
    em_set_num_threads(2);
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (int lg = 0; lg < 2; lg++) EM_SCOPE {
                int64_t shape[2] = {2, lens[li]}, n = 2 * lens[li];
                double *xr, *yr = malloc(sizeof(double) * (size_t)n);
                em_tensor *x = rnd(2, shape, EM_F32, -20, 20, 5 + li, &xr);
                if (lens[li] > 65536)
                    for (int64_t j = 0; j < lens[li] / 2 + 7; j++) {
                        em_set(x, (int64_t[]){0, j}, -INFINITY);
                        xr[j] = -INFINITY;
                    }
                em_tensor *y = lg ? em_log_softmax(x, 1) : em_softmax(x, -1);
                ref_softmax(xr, yr, 2, shape, 1, lg);
                expect_close(y, yr, 2e-5, lg ? 1e-5 : 1e-9, "softmax row lengths");
                free(xr), free(yr);
            }
    em_set_num_threads(0);
}
END_TEST

START_TEST(test_softmax_noncontiguous)
{
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            em_dtype dt = FLOATS[di];
            double *br;
            em_tensor *base = rnd(2, (int64_t[]){9, 6}, dt, -3, 3, 21, &br);
            em_tensor *views[2] = {em_transpose(base, 0, 1), em_narrow(base, 1, 1, 4)};
            for (int v = 0; v < 2; v++)
                for (int dim = 0; dim < 2; dim++)
                    for (int lg = 0; lg < 2; lg++) {
                        em_tensor *x = views[v];
                        ck_assert(!em_is_contiguous(x));
                        double *xr = tu_to_doubles(x), *yr = malloc(sizeof(double) * (size_t)em_numel(x));
                        ref_softmax(xr, yr, 2, x->shape, dim, lg);
                        em_tensor *y = lg ? em_log_softmax(x, dim) : em_softmax(x, dim);
                        expect_close(y, yr, rtol_of(dt), atol_of(dt), "softmax of a view");
                        free(xr), free(yr);
                    }
            free(br);
        }
}
END_TEST

START_TEST(test_softmax_inf_and_edges)
{
    /* rows: some -inf entries; all -inf (NaN, as torch); large values; a NaN (all NaN) */
    const double vals[4][4] = {{-INFINITY, 1.0, 2.0, -INFINITY}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY},
                               {1000.0, 1001.0, 999.0, 1000.5}, {1.0, NAN, -INFINITY, 3.0}};
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            em_dtype dt = FLOATS[di];
            em_tensor *x = em_empty(2, (int64_t[]){4, 4}, dt, EM_CPU);
            double xr[16], yr[16];
            for (int r = 0; r < 4; r++)
                for (int c = 0; c < 4; c++) {
                    em_set(x, (int64_t[]){r, c}, vals[r][c]);
                    xr[r * 4 + c] = em_get(x, (int64_t[]){r, c});
                }
            for (int lg = 0; lg < 2; lg++) {
                ref_softmax(xr, yr, 2, x->shape, 1, lg);
                em_tensor *y = lg ? em_log_softmax(x, 1) : em_softmax(x, 1);
                expect_close(y, yr, rtol_of(dt), atol_of(dt), "softmax with -inf");
                ck_assert(isnan(em_get(y, (int64_t[]){1, 2})) && isnan(em_get(y, (int64_t[]){3, 3})));
                double at_inf = em_get(y, (int64_t[]){0, 0});
                ck_assert(lg ? at_inf == -INFINITY : at_inf == 0.0);
            }
        }
    EM_SCOPE {
        /* empty tensors keep their shape */
        em_tensor *e1 = em_softmax(em_zeros(2, (int64_t[]){0, 5}, EM_F32, EM_CPU), 1);
        em_tensor *e2 = em_log_softmax(em_zeros(2, (int64_t[]){3, 0}, EM_F32, EM_CPU), 1);
        expect_same_shape(e1, 2, (int64_t[]){0, 5});
        expect_same_shape(e2, 2, (int64_t[]){3, 0});
        /* 0-d: softmax 1, log_softmax 0 */
        ck_assert_double_eq(em_item(em_softmax(em_scalar(3.5, EM_F32, EM_CPU), 0)), 1.0);
        ck_assert_double_eq(em_item(em_log_softmax(em_scalar(3.5, EM_F64, EM_CPU), -1)), 0.0);
    }
}
END_TEST

typedef struct { const int64_t *shape; int dim; bool log; const double *dy; double *tmp; } sm_ctx;
static double sm_loss(double *x, void *vc)
{
    sm_ctx *c = vc;
    int64_t n = prod(3, c->shape);
    ref_softmax(x, c->tmp, 3, c->shape, c->dim, c->log);
    double l = 0;
    for (int64_t i = 0; i < n; i++) l += c->dy[i] * c->tmp[i];
    return l;
}

START_TEST(test_softmax_backward_fd)
{
    const int64_t shape[3] = {3, 4, 5};
    for (int dim = 0; dim < 3; dim++)
        for (int lg = 0; lg < 2; lg++) EM_SCOPE {
                double *xr, *gr, num[60], tmp[60];
                em_tensor *x = rnd(3, shape, EM_F64, -2, 2, 31 + dim, &xr);
                em_tensor *dy = rnd(3, shape, EM_F64, -1, 1, 41 + dim, &gr);
                em_tensor *y = lg ? em_log_softmax(x, dim) : em_softmax(x, dim);
                /* dy as a non-contiguous view holding the same values */
                em_tensor *dyt = em_transpose(em_contiguous(em_transpose(dy, 0, 2)), 0, 2);
                ck_assert(!em_is_contiguous(dyt));
                em_tensor *dx = em__softmax_backward(y, dyt, dim, lg);
                sm_ctx c = {shape, dim, lg, gr, tmp};
                for (int64_t i = 0; i < 60; i++) num[i] = numgrad(sm_loss, xr, i, &c);
                expect_close(dx, num, 1e-6, 1e-8, "softmax backward vs finite differences");
                free(xr), free(gr);
            }
}
END_TEST

/* The softmax (log_softmax) gradient from y and dy, contiguous, over rows of n
 * along a dim with `inner` elements after it: row r starts at its outer index
 * (r / inner) times n inner plus its inner index (r % inner). */
static void ref_softmax_backward(const double *g, const double *y, int64_t numel, int64_t n, int64_t inner, bool lg,
                                 double *out)
{
    for (int64_t r = 0; r < numel / n; r++) {
        int64_t base = r / inner * n * inner + r % inner;
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += lg ? g[base + j * inner] : g[base + j * inner] * y[base + j * inner];
        for (int64_t j = 0; j < n; j++) {
            int64_t i = base + j * inner;
            out[i] = lg ? g[i] - exp(y[i]) * s : y[i] * (g[i] - s);
        }
    }
}

START_TEST(test_softmax_backward_dtypes)
{
    const int64_t shape[2] = {6, 33};
    for (int di = 0; di < NFLOATS; di++)
        for (int dim = 0; dim < 2; dim++)
            for (int lg = 0; lg < 2; lg++) EM_SCOPE {
                    em_dtype dt = FLOATS[di];
                    double *xr, *gr, ref[198];
                    em_tensor *x = rnd(2, shape, dt, -3, 3, 51, &xr);
                    em_tensor *dy = rnd(2, shape, dt, -1, 1, 52, &gr);
                    em_tensor *y = lg ? em_log_softmax(x, dim) : em_softmax(x, dim);
                    double *yv = tu_to_doubles(y);
                    /* analytic, per row along dim, from the y the kernel saw */
                    ref_softmax_backward(gr, yv, 198, shape[dim], dim == 1 ? 1 : 33, lg, ref);
                    em_tensor *dx = em__softmax_backward(y, dy, dim, lg);
                    ck_assert_int_eq(dx->dtype, dt);
                    expect_close(dx, ref, 4 * rtol_of(dt), 4 * atol_of(dt), "softmax backward");
                    free(xr), free(gr), free(yv);
                }
}
END_TEST

/* Softmax over a dim that is not the last runs in blocks of 16 rows
 * (k_nn.c: register transposes when the block and n are multiples of 16,
 * element loops otherwise). Forward and backward against the references, and
 * bit for bit against the same rows computed as last-dim rows of a contiguous
 * transposed copy (one row function for both). */
START_TEST(test_softmax_inner_dims_in_blocks)
{
    const int64_t shapes[3][4] = {{48, 40, 0, 0}, {2, 32, 17, 16}, {3, 33, 20, 0}};
    const int nds[3] = {2, 4, 3}, dims[3] = {0, 1, 1};
    for (int c = 0; c < 3; c++)
        for (int lg = 0; lg < 2; lg++) EM_SCOPE {
                int nd = nds[c], dim = dims[c];
                const int64_t *sh = shapes[c];
                double *xr, *gr;
                em_tensor *x = rnd(nd, sh, EM_F32, -4, 4, 61 + c, &xr);
                em_tensor *dy = rnd(nd, sh, EM_F32, -1, 1, 71 + c, &gr);
                int64_t n = sh[dim], numel = em_numel(x), inner = 1;
                for (int d = dim + 1; d < nd; d++) inner *= sh[d];
                double *yr = malloc(sizeof(double) * (size_t)numel), *dr = malloc(sizeof(double) * (size_t)numel);
                ref_softmax(xr, yr, nd, sh, dim, lg);
                em_tensor *y = lg ? em_log_softmax(x, dim) : em_softmax(x, dim);
                expect_close(y, yr, rtol_of(EM_F32), atol_of(EM_F32), "softmax over an inner dim");
                double *yv = tu_to_doubles(y);
                ref_softmax_backward(gr, yv, numel, n, inner, lg, dr);
                em_tensor *dx = em__softmax_backward(y, dy, dim, lg);
                expect_close(dx, dr, 4 * rtol_of(EM_F32), 4 * atol_of(EM_F32), "softmax backward over an inner dim");
                /* the same rows as last-dim rows */
                em_tensor *xt = em_contiguous(em_transpose(x, dim, nd - 1));
                em_tensor *yt = lg ? em_log_softmax(xt, nd - 1) : em_softmax(xt, nd - 1);
                ck_assert_msg(tu_bytes_equal(em_contiguous(em_transpose(yt, dim, nd - 1)), y), "case %d: bits differ", c);
                em_tensor *dyt = em_contiguous(em_transpose(dy, dim, nd - 1));
                em_tensor *dxt = em__softmax_backward(yt, dyt, nd - 1, lg);
                ck_assert_msg(tu_bytes_equal(em_contiguous(em_transpose(dxt, dim, nd - 1)), dx), "case %d: backward bits", c);
                free(xr), free(gr), free(yr), free(dr), free(yv);
            }
}
END_TEST

/* ---- layer_norm ------------------------------------------------------------------ */

/* layer_norm's backward with a strided dy (a transposed view, D >= 16) copies
 * dy to contiguous rows first (op_nn.c): dx, dw and db bit for bit as from a
 * contiguous dy. */
START_TEST(test_layer_norm_backward_transposed_dy)
{
    EM_SCOPE {
        const int64_t R = 37, D = 48;
        double *xr, *gr, *wr;
        em_tensor *x = rnd(2, (int64_t[]){R, D}, EM_F32, -3, 3, 191, &xr);
        em_tensor *g0 = rnd(2, (int64_t[]){D, R}, EM_F32, -1, 1, 192, &gr);
        em_tensor *w = rnd(1, &D, EM_F32, 0.5, 1.5, 193, &wr), *b = em_zeros(1, &D, EM_F32, EM_CPU);
        em_tensor *mu, *rs;
        em_layer_norm(x, w, b, 1e-5, &mu, &rs);
        em_tensor *gt = em_transpose(g0, 0, 1), *gc = em_contiguous(gt);
        ck_assert(!em_is_contiguous(gt));
        em_tensor *dwt, *dbt, *dwc, *dbc;
        em_tensor *dxt = em_layer_norm_backward(gt, x, mu, rs, w, &dwt, &dbt);
        em_tensor *dxc = em_layer_norm_backward(gc, x, mu, rs, w, &dwc, &dbc);
        ck_assert(dxt && dxc && tu_bytes_equal(dxt, dxc) && tu_bytes_equal(dwt, dwc) && tu_bytes_equal(dbt, dbc));
        free(xr), free(gr), free(wr);
    }
}
END_TEST

START_TEST(test_layer_norm_forward)
{
    const int64_t shapes[2][3] = {{6, 37, 0}, {2, 3, 16}};
    const int ndims[2] = {2, 3};
    for (int di = 0; di < NFLOATS; di++)
        for (int s = 0; s < 2; s++)
            for (int aff = 0; aff < 4; aff++) EM_SCOPE {
                    em_dtype dt = FLOATS[di];
                    int nd = ndims[s];
                    int64_t D = shapes[s][nd - 1], R = prod(nd - 1, shapes[s]);
                    double *xr, *wr, *br, *yr = malloc(sizeof(double) * (size_t)(R * D)), mr[64], rr[64];
                    em_tensor *x = rnd(nd, shapes[s], dt, -3, 5, 61 + s, &xr);
                    em_tensor *w = rnd(1, &D, dt, 0.5, 1.5, 62, &wr), *b = rnd(1, &D, dt, -1, 1, 63, &br);
                    em_tensor *mean, *rstd;
                    em_tensor *y = em_layer_norm(x, aff & 1 ? w : NULL, aff & 2 ? b : NULL, 1e-5, &mean, &rstd);
                    ref_layer_norm(xr, R, D, aff & 1 ? wr : NULL, aff & 2 ? br : NULL, 1e-5, yr, mr, rr);
                    expect_same_shape(y, nd, shapes[s]);
                    expect_same_shape(mean, nd - 1, shapes[s]);
                    ck_assert_int_eq(mean->dtype, dt == EM_F64 ? EM_F64 : EM_F32);
                    expect_close(y, yr, 2 * rtol_of(dt), 4 * atol_of(dt), "layer_norm y");
                    expect_close(mean, mr, dt == EM_F64 ? 1e-13 : 1e-6, 1e-7, "layer_norm mean");
                    expect_close(rstd, rr, dt == EM_F64 ? 1e-12 : 1e-6, 0, "layer_norm rstd");
                    free(xr), free(wr), free(br), free(yr);
                }
}
END_TEST

/* Non-contiguous input, strided weight; a large common offset (two-pass
 * soundness: E[x^2] - E[x]^2 in f32 would lose ~3 digits); empty. */
START_TEST(test_layer_norm_layouts_and_offset)
{
    EM_SCOPE {
        double *br, *wr, yr[40 * 12], mr[40], rr[40];
        em_tensor *base = rnd(2, (int64_t[]){12, 40}, EM_F32, -2, 2, 71, &br);
        em_tensor *x = em_transpose(base, 0, 1);   /* [40, 12], strides (1, 40) */
        em_tensor *w2 = rnd(2, (int64_t[]){12, 2}, EM_F32, 0.5, 1.5, 72, &wr);
        em_tensor *w = em_select(w2, 1, 1);        /* [12], stride 2 */
        double *xr = tu_to_doubles(x), *wv = tu_to_doubles(w);
        em_tensor *mean, *rstd;
        em_tensor *y = em_layer_norm(x, w, NULL, 1e-5, &mean, &rstd);
        ref_layer_norm(xr, 40, 12, wv, NULL, 1e-5, yr, mr, rr);
        expect_close(y, yr, 2e-5, 4e-6, "layer_norm of a transposed input");
        expect_close(rstd, rr, 1e-6, 0, "layer_norm rstd of a transposed input");
        free(br), free(wr), free(xr), free(wv);
    }
    EM_SCOPE {
        const int64_t shape[2] = {8, 1024};
        double *xr, *yr = malloc(sizeof(double) * 8192), mr[8], rr[8];
        em_tensor *x = rnd(2, shape, EM_F32, 99, 101, 73, &xr);
        em_tensor *mean, *rstd;
        em_tensor *y = em_layer_norm(x, NULL, NULL, 1e-5, &mean, &rstd);
        ref_layer_norm(xr, 8, 1024, NULL, NULL, 1e-5, yr, mr, rr);
        expect_close(rstd, rr, 2e-6, 0, "layer_norm rstd with a large offset");
        /* y carries the f32 rounding of the mean (|mean| ~ 100: 4e-6) times rstd (~1.7) */
        expect_close(y, yr, 1e-5, 2e-5, "layer_norm y with a large offset");
        free(xr), free(yr);
    }
    EM_SCOPE {
        em_tensor *mean, *rstd;
        em_tensor *y = em_layer_norm(em_zeros(3, (int64_t[]){0, 2, 8}, EM_F32, EM_CPU), NULL, NULL, 1e-5, &mean, &rstd);
        expect_same_shape(y, 3, (int64_t[]){0, 2, 8});
        expect_same_shape(mean, 2, (int64_t[]){0, 2});
        em_tensor *dw, *db;
        em_tensor *dx = em_layer_norm_backward(y, em_zeros(3, (int64_t[]){0, 2, 8}, EM_F32, EM_CPU), mean, rstd,
                                               NULL, &dw, &db);
        expect_same_shape(dx, 3, (int64_t[]){0, 2, 8});
        for (int j = 0; j < 8; j++) ck_assert_double_eq(em_get(dw, (int64_t[]){j}), 0.0);
    }
}
END_TEST

typedef struct { int64_t R, D; const double *x, *w, *b, *dy; int wrt; double *tmp; } ln_ctx;
static double ln_loss(double *v, void *vc)
{
    ln_ctx *c = vc;
    const double *x = c->wrt == 0 ? v : c->x, *w = c->wrt == 1 ? v : c->w, *b = c->wrt == 2 ? v : c->b;
    ref_layer_norm(x, c->R, c->D, w, b, 1e-5, c->tmp, NULL, NULL);
    double l = 0;
    for (int64_t i = 0; i < c->R * c->D; i++) l += c->dy[i] * c->tmp[i];
    return l;
}

START_TEST(test_layer_norm_backward_fd)
{
    for (int with_w = 0; with_w < 2; with_w++) EM_SCOPE {
            const int64_t R = 4, D = 6, shape[2] = {4, 6};
            double *xr, *wr, *br, *gr, tmp[24], num[24];
            em_tensor *x = rnd(2, shape, EM_F64, -2, 2, 81, &xr);
            em_tensor *w = rnd(1, &D, EM_F64, 0.5, 1.5, 82, &wr), *b = rnd(1, &D, EM_F64, -1, 1, 83, &br);
            em_tensor *dy = rnd(2, shape, EM_F64, -1, 1, 84, &gr);
            em_tensor *mean, *rstd, *dw, *db;
            em_layer_norm(x, with_w ? w : NULL, b, 1e-5, &mean, &rstd);
            em_tensor *dx = em_layer_norm_backward(dy, x, mean, rstd, with_w ? w : NULL, &dw, &db);
            ln_ctx c = {R, D, xr, with_w ? wr : NULL, br, gr, 0, tmp};
            double *ones = malloc(sizeof(double) * 6);
            for (int j = 0; j < 6; j++) ones[j] = 1.0;
            for (int64_t i = 0; i < R * D; i++) num[i] = numgrad(ln_loss, xr, i, &c);
            expect_close(dx, num, 1e-6, 1e-8, "layer_norm dx vs finite differences");
            c.wrt = 1;
            c.w = NULL;
            double *wv = with_w ? wr : ones;
            for (int64_t j = 0; j < D; j++) num[j] = numgrad(ln_loss, wv, j, &c);
            expect_close(dw, num, 1e-6, 1e-8, "layer_norm dw vs finite differences");
            c.wrt = 2, c.w = with_w ? wr : NULL, c.b = NULL;
            for (int64_t j = 0; j < D; j++) num[j] = numgrad(ln_loss, br, j, &c);
            expect_close(db, num, 1e-6, 1e-8, "layer_norm db vs finite differences");
            free(xr), free(wr), free(br), free(gr), free(ones);
        }
}
END_TEST

/* f32/f16/bf16 (and a transposed dy) against the analytic backward in f64. */
START_TEST(test_layer_norm_backward_dtypes)
{
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            em_dtype dt = FLOATS[di];
            const int64_t R = 20, D = 33, shape[2] = {20, 33};
            double *xr, *wr, *gbr, mr[20], rr[20], yr[660], dxr[660], dwr[33] = {0}, dbr[33] = {0};
            em_tensor *x = rnd(2, shape, dt, -2, 3, 91, &xr);
            em_tensor *w = rnd(1, &D, dt, 0.5, 1.5, 92, &wr);
            em_tensor *gb = rnd(2, (int64_t[]){33, 20}, dt, -1, 1, 93, &gbr);
            em_tensor *dy = em_transpose(gb, 0, 1);
            double *gr = tu_to_doubles(dy);
            ref_layer_norm(xr, R, D, NULL, NULL, 1e-5, yr, mr, rr);
            for (int64_t r = 0; r < R; r++) {
                double a = 0, c = 0;
                for (int64_t j = 0; j < D; j++) {
                    double xh = (xr[r * D + j] - mr[r]) * rr[r], g = gr[r * D + j] * wr[j];
                    a += g, c += g * xh;
                    dwr[j] += gr[r * D + j] * xh, dbr[j] += gr[r * D + j];
                }
                for (int64_t j = 0; j < D; j++) {
                    double xh = (xr[r * D + j] - mr[r]) * rr[r];
                    dxr[r * D + j] = rr[r] * (gr[r * D + j] * wr[j] - a / D - xh * c / D);
                }
            }
            em_tensor *mean, *rstd, *dw, *db;
            em_layer_norm(x, w, NULL, 1e-5, &mean, &rstd);
            em_tensor *dx = em_layer_norm_backward(dy, x, mean, rstd, w, &dw, &db);
            ck_assert_int_eq(dx->dtype, dt);
            ck_assert_int_eq(dw->dtype, dt);
            double rt = 4 * rtol_of(dt), at = dt == EM_F64 ? 1e-12 : dt == EM_F32 ? 2e-5 : 8 * atol_of(dt);
            expect_close(dx, dxr, rt, at, "layer_norm dx");
            expect_close(dw, dwr, rt, at, "layer_norm dw");
            expect_close(db, dbr, rt, at, "layer_norm db");
            free(xr), free(wr), free(gbr), free(gr);
        }
}
END_TEST

/* Same result for 1 and 2 threads; f64 shows any change of summation order. */
START_TEST(test_layer_norm_backward_deterministic)
{
    for (int di = 0; di < 2; di++) EM_SCOPE {
            const int64_t shape[2] = {1031, 64}, D = 64;
            em_dtype dt = FLOATS[di];
            double *xr, *gr, *wr;
            em_tensor *x = rnd(2, shape, dt, -2, 2, 101, &xr);
            em_tensor *dy = rnd(2, shape, dt, -1, 1, 102, &gr);
            em_tensor *w = rnd(1, &D, dt, 0.5, 1.5, 103, &wr);
            em_tensor *mean, *rstd, *dw[3], *db[3], *dx[3];
            em_layer_norm(x, w, NULL, 1e-5, &mean, &rstd);
            for (int t = 0; t < 3; t++) {
                em_set_num_threads(t == 0 ? 1 : 2);
                dx[t] = em_layer_norm_backward(dy, x, mean, rstd, w, &dw[t], &db[t]);
            }
            em_set_num_threads(0);
            for (int t = 1; t < 3; t++) {
                ck_assert(tu_bytes_equal(dw[0], dw[t]));
                ck_assert(tu_bytes_equal(db[0], db[t]));
                ck_assert(tu_bytes_equal(dx[0], dx[t]));
            }
            double dbr[64] = {0};
            for (int64_t r = 0; r < 1031; r++)
                for (int j = 0; j < 64; j++) dbr[j] += gr[r * 64 + j];
            expect_close(db[0], dbr, 1e-6, 1e-5, "layer_norm db over many rows");
            free(xr), free(gr), free(wr);
        }
}
END_TEST

/* ---- embedding ----------------------------------------------------------------------- */

START_TEST(test_embedding_forward)
{
    const int64_t ids_v[6] = {3, 0, 6, 3, 1, 6};
    for (int di = 0; di < NFLOATS; di++)
        for (int it = 0; it < 2; it++) EM_SCOPE {
                em_dtype dt = FLOATS[di], idt = it ? EM_I32 : EM_I64;
                double *wbr;
                em_tensor *wb = rnd(2, (int64_t[]){5, 7}, dt, -2, 2, 111, &wbr);
                em_tensor *w = em_transpose(wb, 0, 1);   /* [7, 5], non-contiguous */
                em_tensor *ids = ids_tensor(2, (int64_t[]){2, 3}, ids_v, idt);
                em_tensor *idst = em_transpose(ids_tensor(2, (int64_t[]){3, 2}, ids_v, idt), 0, 1);
                double *wv = tu_to_doubles(w), ref[30];
                em_tensor *out = em_embedding(w, ids);
                expect_same_shape(out, 3, (int64_t[]){2, 3, 5});
                for (int n = 0; n < 6; n++)
                    for (int j = 0; j < 5; j++) ref[n * 5 + j] = wv[ids_v[n] * 5 + j];
                expect_close(out, ref, 0, 1e-300, "embedding");
                /* transposed ids: logical order (0,0)=3 (0,1)=6 (0,2)=1 ... */
                em_tensor *out2 = em_embedding(em_contiguous(w), idst);
                double *iv = tu_to_doubles(idst);
                for (int n = 0; n < 6; n++)
                    for (int j = 0; j < 5; j++) ref[n * 5 + j] = wv[(int64_t)iv[n] * 5 + j];
                expect_close(out2, ref, 0, 1e-300, "embedding with transposed ids");
                em_tensor *e = em_embedding(w, ids_tensor(1, (int64_t[]){0}, ids_v, idt));
                expect_same_shape(e, 2, (int64_t[]){0, 5});
                free(wbr), free(wv), free(iv);
            }
}
END_TEST

START_TEST(test_embedding_backward)
{
    const int64_t ids_v[8] = {2, 0, 2, 4, 1, 2, 0, 4};
    for (int di = 0; di < NFLOATS; di++)
        for (int pad = -1; pad < 3; pad += 3) EM_SCOPE {
                em_dtype dt = FLOATS[di];
                double *gbr, ref[6 * 3] = {0};
                em_tensor *gb = rnd(3, (int64_t[]){3, 2, 4}, dt, -1, 1, 121, &gbr);
                em_tensor *dy = em_permute(gb, (int[]){2, 1, 0});   /* [4, 2, 3], non-contiguous */
                em_tensor *ids = ids_tensor(2, (int64_t[]){4, 2}, ids_v, di & 1 ? EM_I32 : EM_I64);
                double *gv = tu_to_doubles(dy);
                for (int n = 0; n < 8; n++)
                    for (int j = 0; j < 3; j++)
                        if (ids_v[n] != pad) ref[ids_v[n] * 3 + j] += gv[n * 3 + j];
                em_tensor *dw = em_embedding_backward(dy, ids, 6, pad);
                expect_same_shape(dw, 2, (int64_t[]){6, 3});
                ck_assert_int_eq(dw->dtype, dt);
                expect_close(dw, ref, 2 * rtol_of(dt), 2 * atol_of(dt), "embedding backward");
                if (pad >= 0)
                    for (int j = 0; j < 3; j++) ck_assert_double_eq(em_get(dw, (int64_t[]){pad, j}), 0.0);
                free(gbr), free(gv);
            }
}
END_TEST

START_TEST(test_embedding_backward_deterministic)
{
    EM_SCOPE {
        const int64_t N = 5000, V = 50, D = 64;
        int64_t *iv = malloc(sizeof(int64_t) * N);
        uint64_t st = 7;
        for (int64_t n = 0; n < N; n++) iv[n] = (int64_t)(tu_next(&st) % V);
        double *gr;
        em_tensor *dy = rnd(2, (int64_t[]){N, D}, EM_F32, -1, 1, 131, &gr);
        em_tensor *ids = ids_tensor(1, &N, iv, EM_I64);
        em_tensor *dw[3];
        for (int t = 0; t < 3; t++) {
            em_set_num_threads(t == 0 ? 1 : 2);
            dw[t] = em_embedding_backward(dy, ids, V, 3);
        }
        em_set_num_threads(0);
        ck_assert(tu_bytes_equal(dw[0], dw[1]) && tu_bytes_equal(dw[0], dw[2]));
        double *ref = calloc((size_t)(V * D), sizeof(double));
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < D && iv[n] != 3; j++) ref[iv[n] * D + j] += gr[n * D + j];
        expect_close(dw[0], ref, 1e-4, 2e-4, "embedding backward over many rows");
        free(iv), free(gr), free(ref);
    }
}
END_TEST

/* ---- dropout ---------------------------------------------------------------------------- */

START_TEST(test_dropout_p0_p1)
{
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            em_dtype dt = FLOATS[di];
            double *xr, zeros[35] = {0}, ones[35];
            for (int i = 0; i < 35; i++) ones[i] = 1.0;
            em_tensor *x = rnd(2, (int64_t[]){5, 7}, dt, -2, 2, 141, &xr);
            em_tensor *m0, *m1;
            em_tensor *y0 = em_dropout(x, 0.0, 1, 0, &m0), *y1 = em_dropout(x, 1.0, 1, 0, &m1);
            ck_assert_int_eq(m0->dtype, EM_BOOL);
            expect_close(y0, xr, 0, 1e-300, "dropout p=0 copies");
            expect_close(m0, ones, 0, 1e-300, "dropout p=0 keeps all");
            expect_close(y1, zeros, 0, 1e-300, "dropout p=1 zeroes");
            expect_close(m1, zeros, 0, 1e-300, "dropout p=1 drops all");
            free(xr);
        }
}
END_TEST

START_TEST(test_dropout_statistics)
{
    EM_SCOPE {
        const int64_t n = 1 << 20;
        const double p = 0.3;
        em_tensor *x = em_full(1, &n, 1.5, EM_F32, EM_CPU);
        em_tensor *mask;
        em_tensor *y = em_dropout(x, p, 1234, 99, &mask);
        const uint8_t *m = em_data_ptr(mask);
        const float *yv = em_data_ptr(y);
        float scaled = (float)(1.5 * (float)(1.0 / (1.0 - p)));
        int64_t kept = 0, wrong = 0;   /* counted, not asserted per element: ck_assert is slow */
        for (int64_t i = 0; i < n; i++) {
            kept += m[i];
            wrong += m[i] ? yv[i] != scaled : yv[i] != 0.0f;
        }
        ck_assert_msg(wrong == 0, "%lld elements of y disagree with the mask", (long long)wrong);
        double frac = (double)kept / (double)n, sigma = sqrt(p * (1 - p) / (double)n);
        ck_assert_msg(fabs(frac - (1 - p)) < 4 * sigma, "kept fraction %g, expected %g +- %g", frac, 1 - p, 4 * sigma);
        /* the contract: element e uses counter offset + e/4, lane e%4, keep iff u >= p */
        for (int64_t e = 0; e < 4096; e++) {
            uint32_t r[4];
            em__philox(1234, 99 + (uint64_t)(e / 4), r);
            wrong += m[e] != ((double)em__u32_to_unit(r[e % 4]) >= p);
        }
        ck_assert_msg(wrong == 0, "%lld mask elements break the Philox counter/lane contract", (long long)wrong);
        /* the boundary: an element whose u equals p is kept, one just above p is not */
        uint32_t r0[4];
        em__philox(1234, 99, r0);
        double u0 = em__u32_to_unit(r0[0]);
        em_tensor *m_eq, *m_above;
        em_dropout(x, u0, 1234, 99, &m_eq);
        em_dropout(x, nextafter(u0, 1.0), 1234, 99, &m_above);
        ck_assert_int_eq(((const uint8_t *)em_data_ptr(m_eq))[0], 1);
        ck_assert_int_eq(((const uint8_t *)em_data_ptr(m_above))[0], 0);
    }
}
END_TEST

START_TEST(test_dropout_determinism_and_layout)
{
    EM_SCOPE {
        const int64_t n = 4099;
        double *xr;
        em_tensor *x = rnd(1, &n, EM_F32, -1, 1, 151, &xr);
        em_tensor *ma, *mb, *mc, *md;
        em_tensor *ya = em_dropout(x, 0.5, 7, 10, &ma), *yb = em_dropout(x, 0.5, 7, 10, &mb);
        em_dropout(x, 0.5, 7, 11, &mc);
        em_dropout(x, 0.5, 8, 10, &md);
        ck_assert(tu_bytes_equal(ma, mb) && tu_bytes_equal(ya, yb));
        int64_t diff_off = 0, diff_seed = 0;
        const uint8_t *a = em_data_ptr(ma), *c = em_data_ptr(mc), *d = em_data_ptr(md);
        for (int64_t i = 0; i < n; i++) diff_off += a[i] != c[i], diff_seed += a[i] != d[i];
        ck_assert_msg(diff_off > n / 4 && diff_seed > n / 4, "masks barely differ: %lld %lld",
                      (long long)diff_off, (long long)diff_seed);
        /* offset + 1 shifts the stream by 4 elements */
        int64_t n4 = n + 4;
        em_tensor *me;
        em_dropout(em_zeros(1, &n4, EM_F32, EM_CPU), 0.5, 7, 10, &me);
        ck_assert(memcmp((const uint8_t *)em_data_ptr(me) + 4, c, (size_t)n) == 0);
        free(xr);
    }
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            /* a transposed input gets the mask of its logical (row-major) order */
            em_dtype dt = FLOATS[di];
            double *br;
            em_tensor *base = rnd(2, (int64_t[]){13, 9}, dt, -1, 1, 161, &br);
            em_tensor *x = em_transpose(base, 0, 1);
            em_tensor *m1, *m2;
            em_tensor *y1 = em_dropout(x, 0.4, 3, 5, &m1);
            em_tensor *y2 = em_dropout(em_contiguous(x), 0.4, 3, 5, &m2);
            ck_assert(tu_bytes_equal(m1, m2));
            /* the contiguous fast paths (f32, bf16) give the generic path's bits */
            ck_assert_msg(tu_bytes_equal(em_contiguous(y1), y2), "dropout %s: fast and generic paths differ",
                          em_dtype_name(dt));
            double *xv = tu_to_doubles(x), *mv = tu_to_doubles(m1), ref[117];
            for (int i = 0; i < 117; i++) ref[i] = mv[i] ? xv[i] / 0.6 : 0.0;
            expect_close(y1, ref, rtol_of(dt), atol_of(dt), "dropout of a view");
            free(br), free(xv), free(mv);
        }
}
END_TEST

/* The backward reads the forward's saved mask (no second Philox pass): the
 * gradient has em_dropout's bits on the upstream gradient with the same key,
 * and the kernel given a mask uses it (an all-kept mask gives g / (1 - p)
 * everywhere, which the key's own mask would not). A mask that is not a
 * contiguous bool tensor of g's size is not read: the key regenerates it. */
START_TEST(test_dropout_backward_saved_mask)
{
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            em_dtype dt = FLOATS[di];
            const int64_t n = 4099;
            double *xr, *wr;
            em_tensor *x = em_requires_grad_(rnd(1, &n, dt, -1, 1, 181, &xr), true);
            em_tensor *w = rnd(1, &n, dt, -1, 1, 182, &wr);
            em_tensor *y = em_dropout(x, 0.3, 5, 2, NULL);
            em_backward(em_sum(em_mul(y, w), 0, NULL, false));
            em_tensor *want = em_dropout(w, 0.3, 5, 2, NULL);
            ck_assert_msg(em_grad(x) && tu_bytes_equal(em_grad(x), want), "dropout %s: backward differs from the mask",
                          em_dtype_name(dt));
            em_tensor *all = em_ones(1, &n, EM_BOOL, EM_CPU);
            double *got = tu_to_doubles(em__dropout_masked(w, all, 0.3, 5, 2)), *dv = tu_to_doubles(w);
            int64_t zeros = 0;
            for (int64_t i = 0; i < n; i++) zeros += got[i] == 0.0 && dv[i] != 0.0;
            ck_assert_msg(zeros == 0, "dropout %s: the given mask was not read (%lld dropped)", em_dtype_name(dt),
                          (long long)zeros);
            int64_t n2[2] = {1, n - 1};
            em_tensor *short_mask = em_ones(2, n2, EM_BOOL, EM_CPU);
            ck_assert(tu_bytes_equal(em__dropout_masked(w, short_mask, 0.3, 5, 2), want));
            int64_t n3[2] = {1, n};   /* as many elements, another shape: not read either */
            ck_assert(tu_bytes_equal(em__dropout_masked(w, em_ones(2, n3, EM_BOOL, EM_CPU), 0.3, 5, 2), want));
            ck_assert(tu_bytes_equal(em__dropout_masked(w, NULL, 0.3, 5, 2), want));
            free(xr), free(wr), free(got), free(dv);
        }
}
END_TEST

/* GELU's f32 backward given y = gelu(x) (autograd keeps it as a hint) reads
 * Phi(x) as y / x: the same bits as from x alone, in any layout; a y that is
 * not x's shape or dtype is not read; a y changed in place after it was used
 * (without grad, so its history stays) is dropped, not an error, and the
 * gradient is the one from x alone. */
/* Dropout of a non-contiguous view on the CPU runs on a contiguous copy
 * (op_nn.c): output and mask bit for bit as for the copy, and the gradient
 * flows back to the view's base. */
START_TEST(test_dropout_transposed_input)
{
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            em_dtype dt = FLOATS[di];
            double *xr;
            em_tensor *base = em_requires_grad_(rnd(2, (int64_t[]){70, 40}, dt, -2, 2, 201, &xr), true);
            em_tensor *xt = em_transpose(base, 0, 1), *mt, *mc;
            em_tensor *yt = em_dropout(xt, 0.3, 9, 4, &mt);
            em_tensor *yc = em_dropout(em_contiguous(xt), 0.3, 9, 4, &mc);
            ck_assert_msg(tu_bytes_equal(yt, yc) && tu_bytes_equal(mt, mc), "dropout %s of a transposed view", em_dtype_name(dt));
            em_backward(em_sum(yt, 0, NULL, false));
            ck_assert(em_grad(base) != NULL);
            double *g = tu_to_doubles(em_grad(base)), *m = tu_to_doubles(em_transpose(mt, 0, 1));
            int64_t bad = -1;
            for (int64_t i = 0; i < 70 * 40 && bad < 0; i++)
                if ((g[i] != 0) != (m[i] != 0)) bad = i;
            ck_assert_msg(bad < 0, "dropout %s: gradient and mask disagree at %lld", em_dtype_name(dt), (long long)bad);
            free(xr), free(g), free(m);
        }
}
END_TEST

START_TEST(test_gelu_backward_given_y)
{
    double *xr, *gr;
    EM_SCOPE {
        const int64_t n = 4099;
        em_tensor *x = rnd(1, &n, EM_F32, -12, 12, 191, &xr);
        em_tensor *dy = rnd(1, &n, EM_F32, -1, 1, 192, &gr);
        const float special[] = {0.0f, -0.0f, 1e-30f, -1e-21f, 1e-19f, -1e-19f, INFINITY, -INFINITY, NAN, 50, -50, 1e-7f};
        float *xp = (float *)x->storage->data;
        for (size_t i = 0; i < sizeof special / sizeof *special; i++) xp[i * 97] = special[i];
        em_tensor *y = em_gelu(x);
        em_tensor *want = em__unary_backward(EM_OP_GELU, x, dy);
        ck_assert_msg(tu_bytes_equal(em__unary_backward_y(EM_OP_GELU, x, y, dy), want), "GELU_BWD given y differs");
        /* transposed views of [k, m] */
        int64_t km[2] = {17, 241};
        em_tensor *xt = em_transpose(em_reshape(em_narrow(x, 0, 0, 17 * 241), 2, km), 0, 1);
        em_tensor *gt = em_transpose(em_reshape(em_narrow(dy, 0, 0, 17 * 241), 2, km), 0, 1);
        em_tensor *yt = em_gelu(xt);
        ck_assert(tu_bytes_equal(em__unary_backward_y(EM_OP_GELU, xt, yt, gt), em__unary_backward(EM_OP_GELU, xt, gt)));
        /* the kernel reads y: a wrong y gives another gradient */
        em_tensor *zero = em_zeros(1, &n, EM_F32, EM_CPU);
        ck_assert_msg(!tu_bytes_equal(em__unary_backward_y(EM_OP_GELU, x, zero, dy), want), "y was not read");
        /* ... but not one of another shape or dtype */
        int64_t n2[2] = {1, n};
        ck_assert(tu_bytes_equal(em__unary_backward_y(EM_OP_GELU, x, em_zeros(2, n2, EM_F32, EM_CPU), dy), want));
        ck_assert(tu_bytes_equal(em__unary_backward_y(EM_OP_GELU, x, em_zeros(1, &n, EM_F64, EM_CPU), dy), want));
        /* autograd: y kept and read; then y changed in place after the forward */
        for (int inplace = 0; inplace < 2; inplace++) EM_SCOPE {
                em_tensor *xl = em_requires_grad_(em_clone(x), true);   /* a new leaf each round */
                em_tensor *yl = em_gelu(xl);
                em_tensor *loss = em_sum(em_mul(em_add_scalar(yl, 0.0), dy), 0, NULL, false);
                if (inplace) EM_NO_GRAD em_fill_(yl, 0.25);   /* add saves nothing: only GELU kept yl */
                em_backward(loss);
                ck_assert_msg(em_grad(xl) && tu_bytes_equal(em_grad(xl), want), "gelu autograd (in place: %d)", inplace);
            }
    }
    free(xr), free(gr);
}
END_TEST

/* ---- cross-entropy ---------------------------------------------------------------------- */

/* Logits with a strided class dim (a transposed [N,C] view, C >= 16) are
 * copied to contiguous rows first (op_nn.c): loss, lse and the gradient
 * through autograd bit for bit as from contiguous logits. */
START_TEST(test_cross_entropy_transposed_logits)
{
    EM_SCOPE {
        const int64_t N = 40, C = 37;
        double *xr;
        em_tensor *base = rnd(2, (int64_t[]){C, N}, EM_F32, -4, 4, 181, &xr);
        int64_t tv[40];
        for (int n = 0; n < 40; n++) tv[n] = n % 9 == 4 ? -100 : (n * 7) % C;
        em_tensor *t = ids_tensor(1, &N, tv, EM_I64);
        em_tensor *lt = em_requires_grad_(em_clone(base), true), *lc = em_requires_grad_(em_clone(base), true);
        em_tensor *xt = em_transpose(lt, 0, 1), *xc = em_contiguous(em_transpose(lc, 0, 1));
        ck_assert(!em_is_contiguous(xt));
        for (int red = 0; red < 3; red++) {
            em_tensor *a = em_cross_entropy(xt, t, -100, (em_reduction)red), *b = em_cross_entropy(xc, t, -100, (em_reduction)red);
            ck_assert_msg(tu_bytes_equal(a, b), "reduction %d", red);
        }
        em_backward(em_cross_entropy(xt, t, -100, EM_REDUCE_MEAN));
        em_backward(em_cross_entropy(xc, t, -100, EM_REDUCE_MEAN));
        ck_assert(em_grad(lt) && em_grad(lc) && tu_bytes_equal(em_grad(lt), em_grad(lc)));
        em_tensor *dl = em_ones(1, &N, EM_F32, EM_CPU);
        ck_assert(tu_bytes_equal(em_cross_entropy_backward(dl, xt, t, -100, EM_REDUCE_NONE),
                              em_cross_entropy_backward(dl, xc, t, -100, EM_REDUCE_NONE)));
        free(xr);
    }
}
END_TEST

START_TEST(test_cross_entropy_forward)
{
    const int64_t N = 7, C = 5;
    const int64_t tv[7] = {0, 4, -100, 2, 2, 1, 3};
    for (int di = 0; di < NFLOATS; di++)
        for (int red = 0; red < 3; red++)
            for (int layout = 0; layout < 2; layout++) EM_SCOPE {
                    em_dtype dt = FLOATS[di];
                    double *br, rl[7];
                    em_tensor *logits;
                    if (layout) logits = em_transpose(rnd(2, (int64_t[]){C, N}, dt, -4, 4, 171, &br), 0, 1);
                    else logits = rnd(2, (int64_t[]){N, C}, dt, -4, 4, 172, &br);
                    double *xr = tu_to_doubles(logits);
                    em_tensor *t = ids_tensor(1, &N, tv, EM_I64);
                    if (layout) {   /* a strided target too: column 1 of [N, 2] */
                        int64_t tv2[14];
                        for (int n = 0; n < 7; n++) tv2[2 * n] = 1 - n, tv2[2 * n + 1] = tv[n];
                        t = em_select(em_from_data(tv2, 2, (int64_t[]){7, 2}, EM_I64), 1, 1);
                        ck_assert(!em_is_contiguous(t));
                    }
                    double r = ref_ce(xr, N, C, tv, -100, (em_reduction)red, rl);
                    em_tensor *lse;
                    em_tensor *loss = em__cross_entropy(logits, t, -100, (em_reduction)red, &lse);
                    ck_assert_int_eq(loss->dtype, dt);
                    if (red == EM_REDUCE_NONE) {
                        expect_same_shape(loss, 1, &N);
                        expect_close(loss, rl, 2 * rtol_of(dt), 2 * atol_of(dt), "cross_entropy none");
                    } else {
                        ck_assert_int_eq(loss->ndim, 0);
                        expect_close(loss, &r, 2 * rtol_of(dt), 2 * atol_of(dt), "cross_entropy reduced");
                    }
                    double lr[7];
                    for (int n = 0; n < 7; n++) {
                        double m = -INFINITY, s = 0;
                        for (int c = 0; c < 5; c++) m = fmax(m, xr[n * 5 + c]);
                        for (int c = 0; c < 5; c++) s += exp(xr[n * 5 + c] - m);
                        lr[n] = m + log(s);
                    }
                    expect_close(lse, lr, dt == EM_F64 ? 1e-13 : 1e-6, 1e-6, "cross_entropy lse");
                    free(br), free(xr);
                }
}
END_TEST

START_TEST(test_cross_entropy_edges)
{
    EM_SCOPE {
        const int64_t N = 3, C = 4, all_ign[3] = {-100, -100, -100}, tv[3] = {2, 2, 1};
        em_tensor *x = em_zeros(2, (int64_t[]){3, 4}, EM_F32, EM_CPU);
        em_tensor *t = ids_tensor(1, &N, all_ign, EM_I64);
        ck_assert(isnan(em_item(em_cross_entropy(x, t, -100, EM_REDUCE_MEAN))));
        ck_assert_double_eq(em_item(em_cross_entropy(x, t, -100, EM_REDUCE_SUM)), 0.0);
        em_tensor *none = em_cross_entropy(x, t, -100, EM_REDUCE_NONE);
        for (int n = 0; n < 3; n++) ck_assert_double_eq(em_get(none, (int64_t[]){n}), 0.0);
        /* all ignored: zero gradient */
        em_tensor *g = em_cross_entropy_backward(em_scalar(1.0, EM_F32, EM_CPU), x, t, -100, EM_REDUCE_MEAN);
        for (int n = 0; n < 3; n++)
            for (int c = 0; c < 4; c++) ck_assert_double_eq(em_get(g, (int64_t[]){n, c}), 0.0);
        /* a valid class as ignore_index; zero logits: each loss is log(C) */
        em_tensor *t2 = ids_tensor(1, &N, tv, EM_I64);
        ck_assert_double_eq_tol(em_item(em_cross_entropy(x, t2, 2, EM_REDUCE_MEAN)), log(4.0), 1e-6);
        ck_assert_double_eq_tol(em_item(em_cross_entropy(x, t2, 2, EM_REDUCE_SUM)), log(4.0), 1e-6);
        /* huge logits stay finite */
        em_tensor *big = em_full(2, (int64_t[]){3, 4}, 3e4, EM_F32, EM_CPU);
        em_set(big, (int64_t[]){0, 2}, 3e4 + 2);
        double rl[3], xr[12];
        for (int i = 0; i < 12; i++) xr[i] = i == 2 ? 3e4 + 2 : 3e4;
        double r = ref_ce(xr, 3, 4, tv, -100, EM_REDUCE_SUM, rl);
        ck_assert_double_eq_tol(em_item(em_cross_entropy(big, t2, -100, EM_REDUCE_SUM)), r, 1e-5);
        /* N = 0 */
        em_tensor *e = em_zeros(2, (int64_t[]){0, 4}, EM_F32, EM_CPU);
        em_tensor *te = em_zeros(1, (int64_t[]){0}, EM_I64, EM_CPU);
        ck_assert(isnan(em_item(em_cross_entropy(e, te, -100, EM_REDUCE_MEAN))));
        ck_assert_double_eq(em_item(em_cross_entropy(e, te, -100, EM_REDUCE_SUM)), 0.0);
        (void)C;
    }
}
END_TEST

typedef struct { int64_t N, C; const int64_t *t; em_reduction red; const double *dl; } ce_ctx;
static double ce_loss(double *x, void *vc)
{
    ce_ctx *c = vc;
    double rl[16];
    double r = ref_ce(x, c->N, c->C, c->t, -100, c->red, rl);
    if (c->red != EM_REDUCE_NONE) return c->dl[0] * r;
    double l = 0;
    for (int64_t n = 0; n < c->N; n++) l += c->dl[n] * rl[n];
    return l;
}

START_TEST(test_cross_entropy_backward)
{
    const int64_t N = 5, C = 4, tv[5] = {3, -100, 0, 3, 1};
    for (int red = 0; red < 3; red++) EM_SCOPE {
            double *xr, *dlr, num[20];
            em_tensor *x = rnd(2, (int64_t[]){N, C}, EM_F64, -3, 3, 181, &xr);
            em_tensor *dl = red == EM_REDUCE_NONE ? rnd(1, &N, EM_F64, -1, 1, 182, &dlr)
                                                  : rnd(0, (int64_t[]){1}, EM_F64, 0.5, 2, 183, &dlr);
            em_tensor *t = ids_tensor(1, &N, tv, EM_I64);
            em_tensor *g = em_cross_entropy_backward(dl, x, t, -100, (em_reduction)red);
            ce_ctx c = {N, C, tv, (em_reduction)red, dlr};
            for (int64_t i = 0; i < N * C; i++) num[i] = numgrad(ce_loss, xr, i, &c);
            expect_close(g, num, 1e-6, 1e-8, "cross_entropy backward vs finite differences");
            for (int c2 = 0; c2 < C; c2++) ck_assert_double_eq(em_get(g, (int64_t[]){1, c2}), 0.0);
            free(xr), free(dlr);
        }
    for (int di = 0; di < NFLOATS; di++) EM_SCOPE {
            /* other dtypes and a transposed layout: softmax - onehot, scaled by dloss / count */
            em_dtype dt = FLOATS[di];
            double *br, ref[20];
            em_tensor *x = em_transpose(rnd(2, (int64_t[]){C, N}, dt, -3, 3, 184, &br), 0, 1);
            double *xr = tu_to_doubles(x);
            em_tensor *t = ids_tensor(1, &N, tv, EM_I64);
            for (int n = 0; n < N; n++) {
                double m = -INFINITY, s = 0;
                for (int c = 0; c < C; c++) m = fmax(m, xr[n * C + c]);
                for (int c = 0; c < C; c++) s += exp(xr[n * C + c] - m);
                for (int c = 0; c < C; c++)
                    ref[n * C + c] = tv[n] == -100 ? 0.0 : 1.5 / 4.0 * (exp(xr[n * C + c] - m) / s - (c == tv[n]));
            }
            em_tensor *dl = em_scalar(1.5, dt, EM_CPU);
            em_tensor *g = em_cross_entropy_backward(dl, x, t, -100, EM_REDUCE_MEAN);
            ck_assert_int_eq(g->dtype, dt);
            expect_close(g, ref, 2 * rtol_of(dt), 2 * atol_of(dt), "cross_entropy backward");
            em_tensor *lse;
            em__cross_entropy(x, t, -100, EM_REDUCE_MEAN, &lse);
            em_tensor *g2 = em__cross_entropy_backward(dl, x, t, lse, -100, EM_REDUCE_MEAN);
            ck_assert(tu_bytes_equal(g, g2));
            free(br), free(xr);
        }
}
END_TEST

/* ---- ownership ------------------------------------------------------------------------------ */

START_TEST(test_no_leaks)
{
    int64_t before = tu_live_bytes();
    const int64_t N = 4, ids_v[4] = {1, 0, 2, 1};
    /* at top level the caller owns every result */
    em_tensor *x = em_ones(2, (int64_t[]){4, 3}, EM_F32, EM_CPU);
    em_tensor *xt = em_transpose(x, 0, 1);
    em_tensor *y = em_softmax(xt, 0), *mean, *rstd, *mask, *lse, *dw, *db;
    em_tensor *ln = em_layer_norm(xt, NULL, NULL, 1e-5, &mean, &rstd);
    em_tensor *dx = em_layer_norm_backward(ln, xt, mean, rstd, NULL, &dw, &db);
    em_tensor *ids = em_from_data(ids_v, 1, &N, EM_I64);
    em_tensor *emb = em_embedding(x, ids);
    em_tensor *demb = em_embedding_backward(emb, ids, 5, 0);
    em_tensor *dr = em_dropout(x, 0.5, 1, 2, &mask);
    em_tensor *ce = em__cross_entropy(x, ids, -100, EM_REDUCE_MEAN, &lse);
    em_tensor *dce = em_cross_entropy_backward(ce, x, ids, -100, EM_REDUCE_MEAN);
    em_tensor *sb = em__softmax_backward(y, y, 1, true);
    em_tensor *all[] = {x, xt, y, mean, rstd, ln, dx, dw, db, ids, emb, demb, dr, mask, ce, lse, dce, sb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        ck_assert_ptr_nonnull(all[i]);
        em_release(all[i]);
    }
    ck_assert_int_eq(tu_live_bytes(), before);
    /* inside a scope, results belong to it */
    EM_SCOPE {
        em_tensor *a = em_ones(2, (int64_t[]){4, 3}, EM_F32, EM_CPU);
        em_layer_norm(em_transpose(a, 0, 1), NULL, NULL, 1e-5, &mean, &rstd);
        em_cross_entropy_backward(em_scalar(1, EM_F32, EM_CPU), a, em_from_data(ids_v, 1, &N, EM_I64), -100,
                                  EM_REDUCE_SUM);
        em_softmax(em_transpose(a, 0, 1), 1);
    }
    ck_assert_int_eq(tu_live_bytes(), before);
}
END_TEST

/* ---- misuse --------------------------------------------------------------------------------- */

#define MISUSE TU_MISUSE

static em_tensor *f32(int64_t a, int64_t b) { return em_zeros(2, (int64_t[]){a, b}, EM_F32, EM_CPU); }
static em_tensor *i64v(int64_t n, const int64_t *v) { return em_from_data(v, 1, &n, EM_I64); }

MISUSE(misuse_softmax_int, "em_softmax", em_softmax(em_zeros(1, (int64_t[]){3}, EM_I64, EM_CPU), 0))
MISUSE(misuse_softmax_dim, "out of range", em_log_softmax(f32(2, 3), 2))
MISUSE(misuse_softmax_bwd_shape, "differ in shape", em__softmax_backward(f32(2, 3), f32(3, 2), 1, false))
MISUSE(misuse_ln_weight, "does not match the last dim", em_layer_norm(f32(2, 3), em_ones(1, (int64_t[]){4}, EM_F32, EM_CPU), NULL, 1e-5, NULL, NULL))
MISUSE(misuse_ln_weight_dtype, "dtype", em_layer_norm(f32(2, 3), NULL, em_ones(1, (int64_t[]){3}, EM_F64, EM_CPU), 1e-5, NULL, NULL))
MISUSE(misuse_ln_bwd_stats, "mean [3]", em_layer_norm_backward(f32(2, 3), f32(2, 3), em_zeros(1, (int64_t[]){3}, EM_F32, EM_CPU), em_zeros(1, (int64_t[]){2}, EM_F32, EM_CPU), NULL, NULL, NULL))
MISUSE(misuse_emb_id_high, "id 5 at position 1 is out of range [0, 5)", em_embedding(f32(5, 2), i64v(3, (int64_t[]){0, 5, 1})))
MISUSE(misuse_emb_id_neg, "id -1 at position 0", em_embedding(f32(5, 2), i64v(1, (int64_t[]){-1})))
MISUSE(misuse_emb_ids_dtype, "ids must be i64 or i32", em_embedding(f32(5, 2), f32(1, 2)))
MISUSE(misuse_emb_bwd_pad, "padding_idx 5", em_embedding_backward(f32(2, 3), i64v(2, (int64_t[]){0, 1}), 5, 5))
MISUSE(misuse_emb_bwd_shape, "plus one trailing dim", em_embedding_backward(f32(3, 3), i64v(2, (int64_t[]){0, 1}), 5, -1))
MISUSE(misuse_emb_bwd_id, "id 9", em_embedding_backward(f32(2, 3), i64v(2, (int64_t[]){0, 9}), 5, -1))
MISUSE(misuse_dropout_p, "p must be in [0, 1]", em_dropout(f32(2, 2), 1.5, 0, 0, NULL))
MISUSE(misuse_dropout_nan, "p must be in [0, 1]", em_dropout(f32(2, 2), NAN, 0, 0, NULL))
MISUSE(misuse_dropout_int, "floating-point", em_dropout(em_zeros(1, (int64_t[]){3}, EM_I32, EM_CPU), 0.1, 0, 0, NULL))
MISUSE(misuse_ce_target_high, "target 4 at position 1 is out of range [0, 4)", em_cross_entropy(f32(2, 4), i64v(2, (int64_t[]){0, 4}), -100, EM_REDUCE_MEAN))
MISUSE(misuse_ce_target_neg, "target -1", em_cross_entropy(f32(2, 4), i64v(2, (int64_t[]){-1, 0}), -100, EM_REDUCE_SUM))
MISUSE(misuse_ce_target_dtype, "target must be i64", em_cross_entropy(f32(2, 4), em_zeros(1, (int64_t[]){2}, EM_I32, EM_CPU), -100, EM_REDUCE_MEAN))
MISUSE(misuse_ce_rows, "target must be i64 [3]", em_cross_entropy(f32(3, 4), i64v(2, (int64_t[]){0, 1}), -100, EM_REDUCE_MEAN))
MISUSE(misuse_ce_logits_1d, "logits must be a 2-d", em_cross_entropy(em_zeros(1, (int64_t[]){4}, EM_F32, EM_CPU), i64v(1, (int64_t[]){0}), -100, EM_REDUCE_MEAN))
MISUSE(misuse_ce_bwd_dloss, "dloss [] (float32) must be a float [N] tensor", em_cross_entropy_backward(em_scalar(1, EM_F32, EM_CPU), f32(2, 4), i64v(2, (int64_t[]){0, 1}), -100, EM_REDUCE_NONE))

static Suite *make_suite(void)
{
    Suite *s = suite_create("nn_kernels");
    tu_add_tests(tu_case(s, "forward_backward", 120), test_softmax_dims_dtypes, test_softmax_last_dim_lengths,
                 test_softmax_noncontiguous, test_softmax_inf_and_edges, test_softmax_backward_fd,
                 test_softmax_backward_dtypes, test_softmax_inner_dims_in_blocks, test_layer_norm_forward, test_layer_norm_backward_transposed_dy, test_layer_norm_layouts_and_offset,
                 test_layer_norm_backward_fd, test_layer_norm_backward_dtypes,
                 test_layer_norm_backward_deterministic, test_embedding_forward, test_embedding_backward,
                 test_embedding_backward_deterministic, test_dropout_p0_p1, test_dropout_statistics,
                 test_dropout_determinism_and_layout, test_dropout_backward_saved_mask, test_dropout_transposed_input, test_gelu_backward_given_y, test_cross_entropy_transposed_logits, test_cross_entropy_forward, test_cross_entropy_edges,
                 test_cross_entropy_backward, test_no_leaks);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_softmax_int, misuse_softmax_dim,
                        misuse_softmax_bwd_shape, misuse_ln_weight, misuse_ln_weight_dtype, misuse_ln_bwd_stats,
                        misuse_emb_id_high, misuse_emb_id_neg, misuse_emb_ids_dtype, misuse_emb_bwd_pad,
                        misuse_emb_bwd_shape, misuse_emb_bwd_id, misuse_dropout_p, misuse_dropout_nan,
                        misuse_dropout_int, misuse_ce_target_high, misuse_ce_target_neg, misuse_ce_target_dtype,
                        misuse_ce_rows, misuse_ce_logits_1d, misuse_ce_bwd_dloss);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
