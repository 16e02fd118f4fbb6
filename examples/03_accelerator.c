/* examples/03_accelerator.c — tutorial step 3: the same loop with the Accelerator.
 *
 * Step 2's loop, rewritten the way Hugging Face Accelerate writes it. The
 * Accelerator (distributed/accelerate/accelerator.c) takes over what changes between a
 * laptop run and a multi-process one, so that THIS file runs unchanged:
 *
 *     ./build/examples/03_accelerator                                # 1 process
 *     ./build/cli/ember launch --num_processes 2 ./build/examples/03_accelerator
 *
 * What it adds here:
 *   - prepare: shards the loader per rank, flattens the model's parameters
 *     into one buffer (and with 2+ processes gives it a DDP companion);
 *   - gradient accumulation (K = 3) as an option plus a context: the loss is
 *     divided by the window's length, and step/zero_grad are no-ops until the
 *     window is full. 64 batches per epoch make 21 windows of 3 and a short
 *     last window of 1, which ember averages over 1 (Accelerate: over 3);
 *   - gather_for_metrics: every rank's predictions, duplicates dropped;
 *   - printing once, on the main process.
 * Exits 1 unless the dev accuracy reaches 90%.
 */
#include "toy_task.h"

#include <stdio.h>

enum { TRAIN_N = 1024, DEV_N = 250, BATCH = 16, EPOCHS = 8, K = 3, WARMUP = 10 };

int main(void)
{
    /* Rule 1: the accelerator first (it joins the process group, reads
     * `ember config`'s environment, picks the device). Constructor options
     * win over the environment. */
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){.gradient_accumulation_steps = K});
    if (!acc) {
        fprintf(stderr, "accelerator: %s\n", em_last_error());
        return 1;
    }
    em_set_seed(1234);   /* the same seed on every rank: the same initial weights */

    em_dataset *train = toy_dataset_new(TRAIN_N, 1), *dev = toy_dataset_new(DEV_N, 2);
    em_dataloader *train_dl = NULL, *dev_dl = NULL;
    em_dataloader_new(train, &(em_dataloader_opts){.batch_size = BATCH, .shuffle = true}, &train_dl);
    em_dataloader_new(dev, &(em_dataloader_opts){.batch_size = 64}, &dev_dl);
    toy_model *model = toy_model_new();
    int n_params;
    em_tensor **params = em_module_parameters(&model->base, &n_params);   /* model.parameters() */
    em_optimizer *opt = em_adamw_new(params, n_params, &(em_adamw_opts){.lr = 1e-2});
    free(params);   /* the optimizer keeps its own references */
    if (!train_dl || !dev_dl || !model || !opt) {
        fprintf(stderr, "setup: %s\n", em_last_error());
        return 1;
    }

    /* Rule 2: prepare each object once. The scheduler is sized AFTER the
     * loader is prepared, from its per-rank length in optimizer steps, and is
     * prepared last, on its own. */
    if (em_accelerator_prepare(acc, &model->base, opt, train_dl, NULL) != EM_OK ||
        em_accelerator_prepare_dataloader(acc, dev_dl) != EM_OK) {
        fprintf(stderr, "prepare: %s\n", em_last_error());
        return 1;
    }
    int64_t per_epoch = (em_dataloader_len(train_dl) + K - 1) / K;
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, WARMUP, EPOCHS * per_epoch);
    em_accelerator_prepare_scheduler(acc, sched);
    em_accelerator_print(acc, "%d process(es); %lld batches per epoch on this rank, %lld optimizer steps per epoch\n",
                         em_accelerator_num_processes(acc), (long long)em_dataloader_len(train_dl),
                         (long long)per_epoch);

    double acc_dev = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        em_module_train(&model->base, true);
        int64_t steps_before = em_accelerator_optimizer_steps(acc);
        /* em_accelerator_next opens one scope per batch (closing the last) */
        for (em_batch b; em_accelerator_next(acc, train_dl, &b);) {
            EM_ACCUMULATE(acc, &model->base) {
                em_tensor *logits = toy_model_forward(model, b.input_ids, b.attention_mask);
                em_tensor *loss = em_cross_entropy_loss(logits, b.labels, NULL);
                /* Rule 3: backward through the accelerator (window division,
                 * fp16 scaling, DDP's all-reduce on sync steps) */
                em_accelerator_backward(acc, loss);
                /* Rule 9: clipping through it (a no-op returning NAN on
                 * non-sync micro-steps, when the gradients are partial) */
                em_accelerator_clip_grad_norm(acc, &model->base, 1.0);
                em_accelerator_optimizer_step(acc, opt);        /* no-op until the window is full */
                em_accelerator_scheduler_step(acc, sched);      /* once per real optimizer step   */
                em_accelerator_optimizer_zero_grad(acc, opt);
            }
        }
        int64_t steps = em_accelerator_optimizer_steps(acc) - steps_before;

        /* Rule 7: gather_for_metrics. Each rank evaluates its shard; the
         * gathered predictions are exactly the DEV_N samples, even though 250
         * is not a multiple of 64 * world (the loader pads the last round
         * with repeats, which gather_for_metrics drops). */
        em_module_train(&model->base, false);
        double hits = 0;
        int64_t seen = 0;
        for (em_batch b; em_accelerator_next(acc, dev_dl, &b);) {
            EM_NO_GRAD {
                em_tensor *pred = em_argmax(toy_model_forward(model, b.input_ids, b.attention_mask), 1, false);
                em_tensor *got[2];
                if (em_accelerator_gather_for_metrics(acc, 2, (em_tensor *[]){pred, b.labels}, got) == EM_OK) {
                    hits += em_item(em_sum(em_eq(got[0], got[1]), 0, NULL, false));
                    seen += em_size(got[0], 0);
                }
            }
        }
        acc_dev = seen ? hits / seen : 0;
        /* Rule 11: print once */
        em_accelerator_print(acc, "epoch %d  %lld optimizer steps  lr %.5f  dev accuracy %.1f%% (%lld samples)\n",
                             epoch, (long long)steps, em_scheduler_get_last_lr(sched, 0), 100 * acc_dev,
                             (long long)seen);
    }

    int rc = acc_dev >= 0.9 ? 0 : 1;
    if (rc) fprintf(stderr, "training failed: dev accuracy %.3f < 0.9\n", acc_dev);
    em_accelerator_free(acc);   /* the prepared objects stay ours */
    toy_free_all(sched, opt, model, train_dl, dev_dl, train, dev);
    return rc;
}
