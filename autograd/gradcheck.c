/* ember — gradcheck: analytic gradients against central differences, in f64. */
#include "autograd/autograd_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Weighted sum of f's output: sum(out * w), w fixed, so that every output
 * element contributes with its own weight. Returns a 0-d tensor. */
static em_tensor *objective(em_gradcheck_fn f, int n, em_tensor **inputs, void *user, em_tensor **w)
{
    em_tensor *out = f(n, inputs, user);
    if (!out) return NULL;
    if (!*w) {
        *w = em_empty(out->ndim, out->shape, out->dtype, out->device);
        uint64_t s = 0x243F6A8885A308D3ull;
        int64_t idx[EM_MAX_DIMS] = {0};
        for (int64_t e = 0; e < em_numel(out); e++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            em_set(*w, idx, 0.5 + (double)(s >> 11) / 9007199254740992.0);
            for (int d = out->ndim - 1; d >= 0; d--) {
                if (++idx[d] < out->shape[d]) break;
                idx[d] = 0;
            }
        }
        em_retain(*w);
    }
    return em_sum(em_mul(out, *w), 0, NULL, false);
}

bool em_gradcheck(em_gradcheck_fn f, int n, em_tensor **inputs, void *user, double eps, double atol, double rtol,
                  char *report, size_t cap)
{
    /* 0 means the default, as everywhere in ember (torch.autograd.gradcheck's values) */
    if (eps == 0) eps = 1e-6;
    if (atol == 0) atol = 1e-5;
    if (rtol == 0) rtol = 1e-3;
    if (!(eps > 0) || !(atol > 0) || !(rtol >= 0)) {
        em__misuse("em_gradcheck", "eps %g, atol %g and rtol %g must be positive (0: the defaults 1e-6, 1e-5, 1e-3)",
                   eps, atol, rtol);
        return false;
    }
    /* central differences in f32 are noise at eps 1e-6: refuse instead of failing mysteriously */
    for (int i = 0; i < n; i++)
        if (inputs[i] && em_requires_grad(inputs[i]) && inputs[i]->dtype != EM_F64) {
            if (report && cap)
                snprintf(report, cap, "input %d is %s: gradcheck needs float64 inputs (em_to_dtype(x, EM_F64))", i,
                         em_dtype_name(inputs[i]->dtype));
            return false;
        }
    em_tensor *w = NULL;
    double worst = 0;
    char where[256] = "no differentiable input";
    bool ok = true;
    EM_SCOPE {
        for (int i = 0; i < n; i++)
            if (em_requires_grad(inputs[i])) em_set_grad(inputs[i], NULL);
        em_tensor *obj = objective(f, n, inputs, user, &w);
        if (obj && em_requires_grad(obj)) em_backward(obj);
        for (int i = 0; i < n && obj; i++) {
            em_tensor *x = inputs[i];
            if (!em_requires_grad(x)) continue;
            em_tensor *g = em_grad(x);
            int64_t idx[EM_MAX_DIMS] = {0};
            for (int64_t e = 0; e < em_numel(x); e++) {
                double orig = em_get(x, idx), plus, minus;
                EM_NO_GRAD {
                    em_set(x, idx, orig + eps);
                    plus = em_item(objective(f, n, inputs, user, &w));
                    em_set(x, idx, orig - eps);
                    minus = em_item(objective(f, n, inputs, user, &w));
                    em_set(x, idx, orig);
                }
                double num = (plus - minus) / (2 * eps), ana = g ? em_get(g, idx) : 0.0;
                double err = fabs(ana - num) / (atol + rtol * fabs(num));
                if (!(err <= 1.0)) ok = false;
                if (!(err <= worst)) {
                    worst = err;
                    snprintf(where, sizeof where, "input %d element %lld: analytic %.10g, numeric %.10g", i,
                             (long long)e, ana, num);
                }
                for (int d = x->ndim - 1; d >= 0; d--) {
                    if (++idx[d] < x->shape[d]) break;
                    idx[d] = 0;
                }
            }
        }
        if (!obj) ok = false;
    }
    em_release(w);
    if (report) snprintf(report, cap, "worst error ratio %.3g at %s", worst, where);
    return ok;
}
