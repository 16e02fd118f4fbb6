/* examples/07_regression.c — a regression on plain tensors, with the Accelerator.
 *
 * torch's TensorDataset + DataLoader + Accelerate in C: 2,048 points x in
 * [-1, 1]^4, target y = sin(2 x0) + x1 x2 - x3^2 (+ noise), an MLP
 * (Sequential), AdamW with linear warmup, and the dev mean squared error
 * gathered across ranks. The samples are tensors, not token ids
 * (em_tensor_dataset_new), so batches carry b.x and b.y; sharding, shuffling
 * and gather_for_metrics work as for text. split_batches keeps the global
 * batch at 64 whatever the number of processes, so 1 and 2 processes train
 * on the same batches. The Python peer, line for line:
 * examples/peers/regression.py (examples/peers/count-lines.sh compares them).
 *
 *   ./build/examples/07_regression                                   # 1 process
 *   ./build/cli/ember launch --num_processes 2 ./build/examples/07_regression
 *
 * Exits 1 unless the dev MSE falls below 0.02 (the target's variance is ~0.6).
 */
#include "ember.h"

#include <stdio.h>

enum { TRAIN_N = 2048, DEV_N = 500, BATCH = 64, EPOCHS = 40, HIDDEN = 64 };

/* TensorDataset(x, y): x [n,4] in [-1,1), y [n,1]; the dataset keeps copies, the scope frees the rest */
static em_dataset *make_data(int64_t n, double noise)
{
    em_dataset *ds = NULL;
    EM_SCOPE {
        em_tensor *x = em_add_scalar(em_mul_scalar(em_rand(EM_SHAPE(n, 4), EM_F32, EM_CPU), 2), -1);
        em_tensor *c[4];
        em_split(x, 1, 1, c, 4);   /* the four columns, [n,1] each */
        em_tensor *y = em_sub(em_add(em_sin(em_mul_scalar(c[0], 2)), em_mul(c[1], c[2])), em_mul(c[3], c[3]));
        em_tensor_dataset_new(x, em_add(y, em_mul_scalar(em_randn(EM_SHAPE(n, 1), EM_F32, EM_CPU), noise)), &ds);
    }
    return ds;
}

int main(void)
{
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){.split_batches = true});
    em_set_seed(42);   /* the same data and weights on every rank */
    em_dataset *train = make_data(TRAIN_N, 0.05), *dev = make_data(DEV_N, 0.0);
    em_module *model = em_nn_sequential_of(5, (em_module *[]){
        &em_nn_linear_new(4, HIDDEN, NULL)->base, &em_nn_gelu_new(false)->base,
        &em_nn_linear_new(HIDDEN, HIDDEN, NULL)->base, &em_nn_gelu_new(false)->base,
        &em_nn_linear_new(HIDDEN, 1, NULL)->base});
    em_optimizer *opt = em_adamw_new_module(model, &(em_adamw_opts){.lr = 3e-3});
    /* optimizer steps per rank: with split_batches every rank gets TRAIN_N / BATCH batches an epoch */
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, 50, EPOCHS * TRAIN_N / BATCH);
    em_dataloader *train_dl = NULL, *dev_dl = NULL;
    if (!acc || !train || !dev || !sched ||
        em_dataloader_new(train, &(em_dataloader_opts){.batch_size = BATCH, .shuffle = true, .owns_dataset = true},
                          &train_dl) != EM_OK ||
        em_dataloader_new(dev, &(em_dataloader_opts){.batch_size = 128, .owns_dataset = true}, &dev_dl) != EM_OK ||
        em_accelerator_prepare(acc, model, opt, train_dl, sched) != EM_OK ||
        em_accelerator_prepare_dataloader(acc, dev_dl) != EM_OK) {
        fprintf(stderr, "setup: %s\n", em_last_error());
        return 1;
    }
    double mse = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        em_module_train(model, true);
        for (em_batch b; em_accelerator_next(acc, train_dl, &b);) {
            em_tensor *loss = em_mse_loss(em_module_forward(model, b.x), b.y, EM_REDUCE_MEAN);
            em_accelerator_backward(acc, loss);
            em_accelerator_optimizer_step(acc, opt);
            em_accelerator_scheduler_step(acc, sched);
            em_accelerator_optimizer_zero_grad(acc, opt);
        }
        em_module_train(model, false);
        double sq = 0, seen = 0;
        EM_NO_GRAD for (em_batch b; em_accelerator_next(acc, dev_dl, &b);) {
            em_tensor *in[2] = {em_module_forward(model, b.x), b.y}, *got[2];
            if (em_accelerator_gather_for_metrics(acc, 2, in, got) == EM_OK) {   /* else seen stays 0: mse NaN */
                sq += em_item(em_mse_loss(got[0], got[1], EM_REDUCE_SUM));
                seen += (double)em_size(got[1], 0);
            }
        }
        mse = sq / seen;   /* over exactly the DEV_N points, whatever the number of processes */
        if (epoch == 0 || epoch % 10 == 9)
            em_accelerator_print(acc, "epoch %2d  dev mse %.5f (%.0f points)\n", epoch, mse, seen);
    }
    em_accelerator_free_all(acc);   /* the accelerator, everything prepared on it, and the datasets the loaders own */
    if (!(mse < 0.02)) fprintf(stderr, "training failed: dev mse %.4f >= 0.02\n", mse);
    return mse < 0.02 ? 0 : 1;
}
