/* examples/07_regression.c — a regression on plain tensors, with the Accelerator.
 *
 * torch's TensorDataset + DataLoader + Accelerate in C: 2,048 points x in
 * [-1, 1]^4, target y = sin(2 x0) + x1 x2 - x3^2 (+ noise), an MLP, AdamW with
 * warmup, and the dev mean squared error gathered across ranks. The samples
 * are tensors, not token ids (em_tensor_dataset_new), so batches carry b.x
 * and b.y; sharding, shuffling and gather_for_metrics work as for text.
 *
 *   ./build/examples/07_regression                                   # 1 process
 *   ./build/cli/ember launch --num_processes 2 ./build/examples/07_regression
 *
 * Exits 1 unless the dev MSE falls below 0.02 (the target's variance is ~0.6).
 */
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>

enum { TRAIN_N = 2048, DEV_N = 500, BATCH = 64, EPOCHS = 40, HIDDEN = 64 };

/* x [n,4] in [-1,1), y [n,1] (f32), from the global stream */
static void make_data(int64_t n, double noise, em_tensor **x, em_tensor **y)
{
    EM_SCOPE {
        em_tensor *u = em_add_scalar(em_mul_scalar(em_rand(2, (int64_t[]){n, 4}, EM_F32, EM_CPU), 2.0), -1.0);
        em_tensor *c[4];
        for (int i = 0; i < 4; i++) c[i] = em_narrow(u, 1, i, 1);
        em_tensor *t = em_add(em_sin(em_mul_scalar(c[0], 2.0)), em_mul(c[1], c[2]));
        t = em_sub(t, em_mul(c[3], c[3]));
        t = em_add(t, em_mul_scalar(em_randn(2, (int64_t[]){n, 1}, EM_F32, EM_CPU), noise));
        *x = em_keep(u);
        *y = em_keep(t);
    }
}

typedef struct mlp {
    em_module base;
    em_nn_linear *l1, *l2, *l3;
} mlp;

static mlp *mlp_new(void)
{
    mlp *m = calloc(1, sizeof *m);
    em_module_init(&m->base, "MLP", NULL);
    m->l1 = (em_nn_linear *)em_module_register_child(&m->base, "l1", &em_nn_linear_new(4, HIDDEN, NULL)->base);
    m->l2 = (em_nn_linear *)em_module_register_child(&m->base, "l2", &em_nn_linear_new(HIDDEN, HIDDEN, NULL)->base);
    m->l3 = (em_nn_linear *)em_module_register_child(&m->base, "l3", &em_nn_linear_new(HIDDEN, 1, NULL)->base);
    return m;
}

static em_tensor *mlp_forward(mlp *m, em_tensor *x)
{
    em_tensor *h = em_gelu(em_nn_linear_forward(m->l1, x));
    h = em_gelu(em_nn_linear_forward(m->l2, h));
    return em_nn_linear_forward(m->l3, h);
}

int main(void)
{
    em_accelerator *acc = em_accelerator_new(NULL);
    if (!acc) {
        fprintf(stderr, "accelerator: %s\n", em_last_error());
        return 1;
    }
    em_set_seed(42);   /* the same data and weights on every rank */
    em_tensor *xt, *yt, *xd, *yd;
    make_data(TRAIN_N, 0.05, &xt, &yt);
    make_data(DEV_N, 0.0, &xd, &yd);
    em_dataset *train = NULL, *dev = NULL;
    em_tensor_dataset_new(xt, yt, &train);   /* TensorDataset(x, y): the dataset keeps copies */
    em_tensor_dataset_new(xd, yd, &dev);
    em_release(xt), em_release(yt), em_release(xd), em_release(yd);

    em_dataloader *train_dl = NULL, *dev_dl = NULL;
    /* batch_size is per process (Accelerate's rule): divide to keep the global batch of 64 */
    int64_t per_process = BATCH / em_accelerator_num_processes(acc);
    em_dataloader_new(train, &(em_dataloader_opts){.batch_size = per_process > 0 ? per_process : 1, .shuffle = true},
                      &train_dl);
    em_dataloader_new(dev, &(em_dataloader_opts){.batch_size = 128}, &dev_dl);
    mlp *model = mlp_new();
    int n_params;
    em_tensor **params = em_module_parameters(&model->base, &n_params);
    em_optimizer *opt = em_adamw_new(params, n_params, &(em_adamw_opts){.lr = 3e-3});
    free(params);
    if (!train || !dev || !train_dl || !dev_dl || !opt ||
        em_accelerator_prepare(acc, &model->base, opt, train_dl, NULL) != EM_OK ||
        em_accelerator_prepare_dataloader(acc, dev_dl) != EM_OK) {
        fprintf(stderr, "setup: %s\n", em_last_error());
        return 1;
    }
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, 50, EPOCHS * em_dataloader_len(train_dl));
    em_accelerator_prepare_scheduler(acc, sched);

    double mse = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        em_module_train(&model->base, true);
        for (em_batch b; em_accelerator_next(acc, train_dl, &b);) {
            em_tensor *err = em_sub(mlp_forward(model, b.x), b.y);
            em_accelerator_backward(acc, em_mean(em_mul(err, err), 0, NULL, false));
            em_accelerator_optimizer_step(acc, opt);
            em_accelerator_scheduler_step(acc, sched);
            em_accelerator_optimizer_zero_grad(acc, opt);
        }
        /* dev MSE over exactly the DEV_N points, whatever the world size */
        em_module_train(&model->base, false);
        double sq = 0;
        int64_t seen = 0;
        for (em_batch b; em_accelerator_next(acc, dev_dl, &b);) {
            EM_NO_GRAD {
                em_tensor *got[2];
                if (em_accelerator_gather_for_metrics(acc, 2, (em_tensor *[]){mlp_forward(model, b.x), b.y}, got) ==
                    EM_OK) {
                    em_tensor *e = em_sub(got[0], got[1]);
                    sq += em_item(em_sum(em_mul(e, e), 0, NULL, false));
                    seen += em_size(got[0], 0);
                }
            }
        }
        mse = seen ? sq / (double)seen : 1e9;
        if (epoch % 10 == 9 || epoch == 0)
            em_accelerator_print(acc, "epoch %2d  dev mse %.5f (%lld points)\n", epoch, mse, (long long)seen);
    }

    int rc = mse < 0.02 ? 0 : 1;
    if (rc) fprintf(stderr, "training failed: dev mse %.4f >= 0.02\n", mse);
    em_accelerator_free(acc);
    em_scheduler_free(sched);
    em_optimizer_free(opt);
    em_module_free(&model->base);
    em_dataloader_free(train_dl);
    em_dataloader_free(dev_dl);
    em_dataset_free(train);
    em_dataset_free(dev);
    return rc;
}
