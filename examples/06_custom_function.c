/* examples/06_custom_function.c — tutorial step 6: an op of your own, with its backward.
 *
 * torch.autograd.Function in C: a forward that computes the op (and saves what
 * the derivative needs), a backward that turns the output's gradient into the
 * input's. Here the op is Softsign, y = x / (1 + |x|), dy/dx = 1 / (1 + |x|)^2.
 *
 *   1. define forward and backward, and call em_function_apply;
 *   2. check the derivative with em_gradcheck (f64, central differences);
 *   3. use the op in a module of your own: a 2-layer MLP fits y = sin(3 x1) x2 with AdamW.
 *
 * The Python peer, line for line: examples/peers/custom_function.py
 * (examples/peers/count-lines.sh compares them).
 *
 * Build and run:  ./build/examples/06_custom_function
 * Exits 1 unless gradcheck passes and the fit's mean squared error drops below 0.02.
 */
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>

/* ---- 1. the op ------------------------------------------------------------------------ */
static em_status softsign_forward(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
{
    (void)n_in, (void)n_out;
    em_ctx_save_for_backward(ctx, 1, in);   /* x: the derivative needs it */
    out[0] = em_div(in[0], em_add_scalar(em_abs(in[0]), 1.0));
    return out[0] ? EM_OK : em_last_status();
}

/* called only when x requires grad (one input); gin[0] = dL/dx = dL/dy / (1 + |x|)^2 */
static void softsign_backward(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)n_out, (void)n_in;
    em_tensor *d = em_add_scalar(em_abs(em_ctx_saved(ctx, 0)), 1.0);   /* 1 + |x| */
    gin[0] = em_div(gout[0], em_mul(d, d));
}

static const em_function softsign_fn = {.name = "Softsign", .forward = softsign_forward, .backward = softsign_backward};

/* Softsign.apply(x); also the function em_gradcheck calls (n inputs, a user pointer) */
static em_tensor *softsign(int n, em_tensor **x, void *user)
{
    em_tensor *y = NULL;
    return em_function_apply(&softsign_fn, n, x, 1, &y, user) == EM_OK ? y : NULL;
}

/* ---- 3. a module that uses it (torch: class MLP(nn.Module)) ---------------------------- */
typedef struct mlp {
    em_module base;   /* first: a mlp * is also an em_module * */
    em_nn_linear *l1, *l2;
} mlp;

static mlp *mlp_new(int hidden)
{
    mlp *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    em_module_init(&m->base, "MLP", NULL);
    m->l1 = (em_nn_linear *)em_module_register_child(&m->base, "l1", &em_nn_linear_new(2, hidden, NULL)->base);
    m->l2 = (em_nn_linear *)em_module_register_child(&m->base, "l2", &em_nn_linear_new(hidden, 1, NULL)->base);
    return m;
}

static em_tensor *mlp_forward(mlp *m, em_tensor *x)
{
    em_tensor *h = em_nn_linear_forward(m->l1, x);
    return em_nn_linear_forward(m->l2, softsign(1, &h, NULL));
}

int main(void)
{
    em_set_seed(7);
    /* ---- 2. gradcheck --------------------------------------------------------------------- */
    em_tensor *x64 = em_requires_grad_(em_randn(EM_SHAPE(4, 5), EM_F64, EM_CPU), true);
    char report[256];
    bool ok = em_gradcheck(softsign, 1, &x64, NULL, 0, 0, 0, report, sizeof report);
    em_release(x64);
    printf("gradcheck of Softsign: %s (%s)\n", ok ? "passed" : "FAILED", report);
    if (!ok) return 1;

    mlp *model = mlp_new(32);
    int n_params;
    em_tensor **params = em_module_parameters(&model->base, &n_params);
    em_optimizer *opt = em_adamw_new(params, n_params, &(em_adamw_opts){.lr = 1e-2});
    free(params);
    double mse = 0;
    EM_SCOPE {   /* x and y live until the fit ends; each step's tensors die with its own scope */
        em_tensor *x = em_add_scalar(em_mul_scalar(em_rand(EM_SHAPE(512, 2), EM_F32, EM_CPU), 2), -1);
        em_tensor *y = em_mul(em_sin(em_mul_scalar(em_narrow(x, 1, 0, 1), 3)), em_narrow(x, 1, 1, 1));
        for (int step = 0; step < 400; step++) EM_SCOPE {
            em_tensor *loss = em_mse_loss(mlp_forward(model, x), y, EM_REDUCE_MEAN);
            em_backward(loss);
            em_optimizer_step(opt);
            em_optimizer_zero_grad(opt);
            mse = em_item(loss);
            if (step % 100 == 0 || step == 399) printf("step %3d  mse %.5f\n", step, mse);
        }
    }
    em_optimizer_free(opt);
    em_module_free(&model->base);
    if (!(mse < 0.02)) fprintf(stderr, "the fit did not converge: mse %.4f >= 0.02\n", mse);
    return mse < 0.02 ? 0 : 1;
}
