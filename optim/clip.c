/* ember — clip_grad_norm, as torch.nn.utils.clip_grad_norm_ (contract in optim.h).
 *
 * torch computes one norm per gradient (rounded to the gradient's dtype), the
 * norm of those norms (in the promoted dtype), then
 *     coef = clamp((1 / (total + 1e-6)) * max_norm, max=1)     (Tensor.__rtruediv__)
 * in that dtype, and multiplies every gradient by it in place. Here each sum
 * is accumulated in f64 over fixed blocks (the same result for any thread
 * count), then rounded where torch rounds. */
#include "optim/optim_internal.h"
#include "autograd/autograd.h"

#include <math.h>

enum { N_SQ, N_ABS, N_MAX, N_POW };
#define CLIP_BLOCKS 1024
#define CLIP_MIN_BLOCK 65536

bool (*em__clip_scale_probe)(double *scale);

/* a or b, NaN-propagating max */
static inline double nanmax(double a, double b) { return (b > a || b != b) ? b : a; }

/* Eight independent f64 accumulators (vectorizable without reassociating a
 * single sum; the result does not depend on the thread count). */
#define NORM_BLOCK(T)                                                                              \
    static double norm_block_##T(const T *x, int64_t n, int kind, double p)                        \
    {                                                                                              \
        double acc[8] = {0};                                                                       \
        int64_t n8 = n & ~(int64_t)7;                                                              \
        switch (kind) {                                                                            \
        case N_SQ:                                                                                 \
            for (int64_t i = 0; i < n8; i += 8)                                                    \
                for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * (double)x[i + j];       \
            for (int64_t i = n8; i < n; i++) acc[0] += (double)x[i] * (double)x[i];               \
            break;                                                                                 \
        case N_ABS:                                                                                \
            for (int64_t i = 0; i < n8; i += 8)                                                    \
                for (int j = 0; j < 8; j++) acc[j] += fabs((double)x[i + j]);                     \
            for (int64_t i = n8; i < n; i++) acc[0] += fabs((double)x[i]);                        \
            break;                                                                                 \
        case N_MAX:                                                                                \
            for (int64_t i = 0; i < n; i++) acc[0] = nanmax(acc[0], fabs((double)x[i]));          \
            return acc[0];                                                                         \
        default:                                                                                   \
            for (int64_t i = 0; i < n; i++) acc[0] += pow(fabs((double)x[i]), p);                 \
        }                                                                                          \
        return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));  \
    }
NORM_BLOCK(float)
NORM_BLOCK(double)

/* sum (or max) over a contiguous f32/f64 array, blocked for determinism */
static double reduce(const void *x, em_dtype dt, int64_t n, int kind, double p)
{
    int64_t bs = (n + CLIP_BLOCKS - 1) / CLIP_BLOCKS;
    if (bs < CLIP_MIN_BLOCK) bs = CLIP_MIN_BLOCK;
    int64_t nb = (n + bs - 1) / bs;
    double part[CLIP_BLOCKS];
#pragma omp parallel for schedule(static) num_threads(em_num_threads()) if (nb > 1)
    for (int64_t b = 0; b < nb; b++) {
        int64_t lo = b * bs, len = n - lo < bs ? n - lo : bs;
        part[b] = dt == EM_F32 ? norm_block_float((const float *)x + lo, len, kind, p)
                               : norm_block_double((const double *)x + lo, len, kind, p);
    }
    double s = 0;
    for (int64_t b = 0; b < nb; b++) s = kind == N_MAX ? nanmax(s, part[b]) : s + part[b];
    return s;
}

static double finish(double s, int kind, double p)
{
    return kind == N_SQ ? sqrt(s) : kind == N_POW ? pow(s, 1.0 / p) : s;
}

/* x rounded to dt (a float dtype) */
static double rnd(em_dtype dt, double x)
{
    unsigned char b[8];
    em__store(b, dt, x);
    return em__load(b, dt);
}

/* torch's result dtype of a list of float dtypes: f64 > f32 > (f16 and bf16 mixed -> f32) */
static em_dtype promote(em_dtype a, em_dtype b)
{
    if (a == b) return a;
    if (a == EM_F64 || b == EM_F64) return EM_F64;
    return EM_F32;
}

/* The sum (or max) that reduce() computes, for a gradient on another device:
 * the same reduction by ops on that device, in f64 (the widening is exact),
 * read back as one number. The order of the additions is the device's, so the
 * result can differ from the CPU's in the last bits. */
static em_status device_reduce(em_tensor *g, int kind, double p, double *out)
{
    em_status st = EM_OK;
    em_scope_begin();
    em_tensor *c = em_to_dtype(g, EM_F64), *r = NULL;
    if (c && em_numel(c) == 0) {
        *out = 0;
    } else if (c) {
        switch (kind) {
        case N_SQ: r = em_sum(em_mul(c, c), 0, NULL, false); break;
        case N_ABS: r = em_sum(em_abs(c), 0, NULL, false); break;
        case N_MAX: r = em_max_all(em_abs(c)); break;
        default: r = em_sum(em_pow_scalar(em_abs(c), p), 0, NULL, false); break;
        }
        if (r) *out = em_item(r);
    }
    if (!c || (em_numel(c) > 0 && !r)) st = em_last_status() != EM_OK ? em_last_status() : EM_ERR_OOM;
    em_scope_end();
    return st;
}

em_status em_clip_grad_norm(em_tensor *const *params, int n, double max_norm, const em_clip_grad_opts *opts,
                            double *total_norm)
{
    static const char *op = "em_clip_grad_norm";
    if (n < 0 || (n > 0 && !params)) {
        em__misuse(op, "params must be given (n=%d)", n);
        return EM_ERR_INVALID;
    }
    double p = opts && opts->norm_type != 0 ? opts->norm_type : 2.0;
    if (!(p > 0)) {
        em__misuse(op, "norm_type must be > 0 or INFINITY, got %g", p);
        return EM_ERR_INVALID;
    }
    int kind = isinf(p) ? N_MAX : p == 2 ? N_SQ : p == 1 ? N_ABS : N_POW;
    if (total_norm) *total_norm = 0;
    em_dtype rdt = EM_NUM_DTYPES;
    for (int i = 0; i < n; i++) {
        if (!params[i]) return em_last_status() != EM_OK ? em_last_status() : EM_ERR_INVALID;
        em_tensor *g = em_grad(params[i]);
        if (!g) continue;
        rdt = rdt == EM_NUM_DTYPES ? g->dtype : promote(rdt, g->dtype);
    }
    if (rdt == EM_NUM_DTYPES) return EM_OK;   /* no gradients: torch returns 0 and clips nothing */
    /* A common mistake (issue 9): clipping gradients that still carry the
     * fp16 loss scale compares max_norm with a norm `scale` times too big. */
    static bool warned_scaled;
    double scale;
    if (em__clip_scale_probe && em__clip_scale_probe(&scale))
        em__warn_once(&warned_scaled, op,
                      "the gradients still carry the fp16 loss scale (%g), so max_norm is compared with a norm "
                      "%g times too large; unscale first: em_grad_scaler_unscale_(scaler, opt) before clipping, or "
                      "em_grad_scaler_clip_grad_norm(scaler, opt, ...), or em_accelerator_clip_grad_norm(acc, model, "
                      "max_norm) with the Accelerator", scale, scale);

    em_status st = EM_OK;
    em_scope_begin();
    double acc = 0;
    for (int i = 0; i < n && st == EM_OK; i++) {
        em_tensor *g = em_grad(params[i]);
        if (!g) continue;
        double part;
        if (g->device.type != EM_DEVICE_CPU) {
            st = device_reduce(g, kind, p, &part);
            if (st != EM_OK) break;
        } else {
            em_tensor *c = em_contiguous(g);
            if (c && c->dtype != EM_F32 && c->dtype != EM_F64) c = em_to_dtype(c, EM_F32);   /* exact widening */
            if (!c) {
                st = em_last_status();
                break;
            }
            part = reduce(em_data_ptr(c), c->dtype, em_numel(c), kind, p);
        }
        double norm = rnd(g->dtype, finish(part, kind, p));
        if (em_numel(g) == 0) norm = 0;
        norm = rnd(rdt, norm);   /* torch.stack promotes the norms */
        acc = kind == N_MAX ? nanmax(acc, norm) : kind == N_SQ ? acc + norm * norm : kind == N_ABS ? acc + fabs(norm)
                                                                                                   : acc + pow(norm, p);
    }
    double total = rnd(rdt, finish(acc, kind, p));
    if (st == EM_OK && opts && opts->error_if_nonfinite && !isfinite(total))
        st = em__fail(EM_ERR_INVALID, "%s: the total norm of order %g for gradients from `parameters` is non-finite "
                      "(%g), so it cannot be clipped; with error_if_nonfinite=false the gradients are scaled by the "
                      "non-finite norm anyway", op, p, total);
    if (st == EM_OK) {
        /* coef = clamp(reciprocal(total + 1e-6) * max_norm, max=1), each op rounded to rdt */
        double coef = rnd(rdt, rnd(rdt, 1.0 / rnd(rdt, total + rnd(rdt, 1e-6))) * rnd(rdt, max_norm));
        coef = coef > 1.0 ? 1.0 : coef;
        EM_NO_GRAD {
            for (int i = 0; i < n && st == EM_OK; i++) {
                em_tensor *g = em_grad(params[i]);
                if (!g) continue;
                int64_t m = em_numel(g);
                bool cpu = g->device.type == EM_DEVICE_CPU;
                if (cpu && em_is_contiguous(g) && g->dtype == EM_F32) {
                    float *x = em_data_ptr(g), cf = (float)coef;
                    EM__PARALLEL_RANGE(m, 32768, for (int64_t k = b; k < e; k++) x[k] *= cf);
                    g->storage->version++;
                } else if (cpu && em_is_contiguous(g) && g->dtype == EM_F64) {
                    double *x = em_data_ptr(g);
                    EM__PARALLEL_RANGE(m, 32768, for (int64_t k = b; k < e; k++) x[k] *= coef);
                    g->storage->version++;
                } else {
                    /* half dtypes, strided and device gradients: in f32 (torch's
                     * opmath), rounded back, by ops on the gradient's device */
                    em_tensor *w = em_to_dtype(g, g->dtype == EM_F64 ? EM_F64 : EM_F32);
                    em_tensor *prod = w ? em_mul_scalar(w, g->dtype == EM_F64 ? coef : (double)(float)coef) : NULL;
                    if (!prod || !em_copy_(g, prod)) st = em_last_status();
                }
            }
        }
    }
    em_scope_end();
    if (total_norm) *total_norm = total;
    return st;
}

em_status em_optimizer_clip_grad_norm(em_optimizer *o, double max_norm, const em_clip_grad_opts *opts,
                                      double *total_norm)
{
    if (!o) {
        em__misuse("em_optimizer_clip_grad_norm", "optimizer is NULL");
        return EM_ERR_INVALID;
    }
    int total = 0;
    for (int g = 0; g < o->n_groups; g++) total += o->groups[g].n;
    em_tensor **ps = em__malloc(sizeof *ps * (size_t)(total + 1));
    if (!ps) return EM_ERR_OOM;
    for (int g = 0, k = 0; g < o->n_groups; g++)
        for (int i = 0; i < o->groups[g].n; i++) ps[k++] = o->groups[g].params[i];
    em_status st = em_clip_grad_norm(ps, total, max_norm, opts, total_norm);
    em__free(ps);
    return st;
}
