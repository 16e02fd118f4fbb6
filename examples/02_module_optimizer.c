/* examples/02_module_optimizer.c — tutorial step 2: a module and an optimizer, by hand.
 *
 * Step 1 (01_autograd.c) kept its weights in a plain array and updated them
 * with `p -= lr * grad`. Here the same ideas get their framework names:
 *
 *   - a MODULE (toy_task.h: toy_model) owns its parameters through a tree of
 *     named children, so "all the parameters" is one call;
 *   - a DATALOADER cuts a data set into shuffled, padded batches;
 *   - an OPTIMIZER (AdamW, optim/adamw.c) keeps per-parameter state (two
 *     moving averages) and applies torch.optim.AdamW's update;
 *   - a SCHEDULER (optim/scheduler.c) moves the learning rate along
 *     transformers' linear warmup-then-decay curve.
 *
 * Build and run:  ./build/examples/02_module_optimizer
 * Exits 1 unless the dev accuracy reaches 90%.
 */
#include "toy_task.h"

#include <stdio.h>
#include <stdlib.h>

enum { TRAIN_N = 1024, DEV_N = 256, BATCH = 32, EPOCHS = 6, WARMUP = 12 };

int main(void)
{
    em_set_seed(1234);   /* initial weights, dropout masks, shuffling: all replayable */

    /* ---- the data ------------------------------------------------------------
     * The loader shuffles with a permutation of (seed, epoch) and pads each
     * batch to its longest sequence: input_ids and attention_mask are i64
     * [B, len]. Its tensors land in the scope that is open when
     * em_dataloader_next is called. */
    em_dataset *train = toy_dataset_new(TRAIN_N, 1), *dev = toy_dataset_new(DEV_N, 2);
    em_dataloader *train_dl = NULL, *dev_dl = NULL;
    if (!train || !dev ||
        em_dataloader_new(train, &(em_dataloader_opts){.batch_size = BATCH, .shuffle = true}, &train_dl) ||
        em_dataloader_new(dev, &(em_dataloader_opts){.batch_size = 128}, &dev_dl)) {
        fprintf(stderr, "data: %s\n", em_last_error());
        return 1;
    }

    /* ---- the model ------------------------------------------------------------
     * Parameters are leaves that require grad, created by the layers' _new
     * functions outside any scope: the module owns them until em_module_free. */
    toy_model *model = toy_model_new();
    em_named_tensors named = em_module_named_parameters(&model->base);
    printf("model %s, %lld parameters:\n", model->base.type,
           (long long)em_module_num_parameters(&model->base, true));
    for (int i = 0; i < named.n; i++)
        printf("  %-14s %s\n", named.items[i].name, em_param_no_decay(named.items[i].name, named.items[i].tensor)
                                                        ? "(no weight decay)"
                                                        : "");

    /* ---- the optimizer --------------------------------------------------------
     * Two param groups, as transformers' Trainer builds them: weight decay on
     * the matrices, none on biases and 1-d weights. The optimizer retains
     * each parameter; its state (exp_avg, exp_avg_sq) is allocated at the
     * first step, per parameter, in the parameter's dtype. */
    const char **names = malloc(sizeof *names * (size_t)named.n);
    em_tensor **params = malloc(sizeof *params * (size_t)named.n), **buf = malloc(sizeof *buf * (size_t)named.n);
    if (!names || !params || !buf) return 1;
    for (int i = 0; i < named.n; i++) {
        names[i] = named.items[i].name;
        params[i] = named.items[i].tensor;
    }
    em_param_group groups[2];
    int n_groups = em_param_groups_no_decay(names, params, named.n, 0.01, buf, groups);
    em_optimizer *opt = em_adamw_new_groups(groups, n_groups, &(em_adamw_opts){.lr = 5e-3});
    em_named_tensors_free(&named);   /* the optimizer retains what it needs: the lists can go */
    free(names), free(params), free(buf);

    /* ---- the schedule -----------------------------------------------------------
     * LambdaLR: lr = initial_lr * f(step), f rising linearly from 0 over the
     * warmup, then falling linearly to 0 at the last step. Construction sets
     * lr = initial_lr * f(0) = 0, so the very first update is a no-op on the
     * weights (AdamW's moments still see the gradient). */
    int64_t total = EPOCHS * em_dataloader_len(train_dl);
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, WARMUP, total);
    if (!opt || !sched) {
        fprintf(stderr, "optimizer: %s\n", em_last_error());
        return 1;
    }

    int64_t step = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        em_module_train(&model->base, true);
        double loss_sum = 0;
        int n_batches = 0;
        for (;;) {
            bool got = false;
            EM_SCOPE {   /* everything of one batch lives and dies here */
                em_batch b;
                got = em_dataloader_next(train_dl, &b);
                if (got) {
                    em_tensor *logits = toy_model_forward(model, b.input_ids, b.attention_mask);
                    em_tensor *loss = em_cross_entropy_loss(logits, b.labels, NULL);
                    loss_sum += em_item(loss);
                    n_batches++;
                    /* backward fills p.grad of every parameter */
                    em_backward(loss);
                    /* clip, as HF's examples do (max_norm 1) */
                    em_optimizer_clip_grad_norm(opt, 1.0, NULL, NULL);
                    /* p <- p - lr*(m_hat/(sqrt(v_hat)+eps) + wd*p), on the
                     * parameters' data, not recorded by autograd */
                    em_optimizer_step(opt);
                    /* once per optimizer step, AFTER it */
                    em_scheduler_step(sched);
                    /* drop the gradients: forget this and the next backward
                     * ADDS to them (step 4 of TUTORIAL.md shows why that is
                     * a feature: gradient accumulation) */
                    em_optimizer_zero_grad(opt);
                    step++;
                    if (step <= 3 || step == WARMUP || step == total)
                        printf("  step %3lld  lr now %.5f\n", (long long)step, em_scheduler_get_last_lr(sched, 0));
                }
            }
            if (!got) break;
        }
        if (em_dataloader_status(train_dl) != EM_OK) {
            fprintf(stderr, "loader: %s\n", em_last_error());
            return 1;
        }

        /* ---- evaluation: eval mode (no dropout) and no graph -------------------- */
        em_module_train(&model->base, false);
        double hits = 0;
        int64_t seen = 0;
        for (;;) {
            bool got = false;
            EM_SCOPE EM_NO_GRAD {
                em_batch b;
                got = em_dataloader_next(dev_dl, &b);
                if (got) {
                    hits += toy_accuracy(toy_model_forward(model, b.input_ids, b.attention_mask), b.labels) * b.n;
                    seen += b.n;
                }
            }
            if (!got) break;
        }
        printf("epoch %d  train loss %.4f  dev accuracy %.1f%%\n", epoch, loss_sum / n_batches, 100 * hits / seen);
        if (epoch == EPOCHS - 1 && hits / seen < 0.9) {
            fprintf(stderr, "training failed: dev accuracy %.3f < 0.9\n", hits / seen);
            return 1;
        }
    }

    toy_free_all(sched, opt, model, train_dl, dev_dl, train, dev);   /* the scheduler first: it borrows opt */
    return 0;
}
