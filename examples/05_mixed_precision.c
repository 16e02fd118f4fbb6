/* examples/05_mixed_precision.c — tutorial step 5: bf16 autocast and the fp16 GradScaler, on the CPU.
 *
 *     ./build/examples/05_mixed_precision
 *
 * Part 1, bf16 autocast (amp/autocast.c). Inside a region, the matmul-class
 * ops (every Linear) run in bf16; the touchy ops (softmax, layer_norm, the
 * losses, reductions, exp/log) run in f32; the casts are ordinary recorded
 * ops, so gradients reach the f32 master weights in f32. A weight is cast
 * once per region (a cache keyed by its storage and version). The logits
 * come out f32 all the same: fc2's bf16 matmul plus its f32 bias promotes
 * to f32 (torch's rule), and the loss is f32 by policy.
 *
 * Part 2, fp16 with the GradScaler (amp/grad_scaler.c), through the
 * Accelerator. f16 has 5 exponent bits: gradients below ~6e-8 flush to zero.
 * So the loss is multiplied by a scale S (2^16 at first) before backward;
 * before the optimizer step the gradients are divided by S and checked:
 *
 *     any inf/NaN?  yes -> skip this step, S <- S * 0.5, growth counter <- 0
 *                   no  -> step; after growth_interval clean steps in a row,
 *                          S <- S * 2
 *
 * We inject an overflow (an inf written into one gradient) at a few steps
 * and print the scale's trajectory. Later the scale grows until real f16
 * overflows happen by themselves: the scaler keeps it just below that level. growth_interval is 4 here instead of
 * torch's 2000 so the growth shows. Exits 1 if the trajectory is not the one
 * the algorithm predicts or if training does not reach 90% dev accuracy.
 */
#include "toy_task.h"

#include <math.h>
#include <stdio.h>

enum { TRAIN_N = 1024, DEV_N = 256, BATCH = 32, EPOCHS = 6, GROWTH_INTERVAL = 4 };

static bool inject_at(int64_t step) { return step == 3 || step == 4 || step == 20; }

/* ---- part 1 ----------------------------------------------------------------------- */
static int bf16_demo(toy_model *m, em_dataloader *dl)
{
    int rc = 0;
    EM_SCOPE {
        em_batch b;
        em_dataloader_next(dl, &b);
        em_tensor *l32 = em_cross_entropy_loss(toy_model_forward(m, b.input_ids, b.attention_mask), b.labels, NULL);
        em_autocast_stats_reset();
        em_tensor *logits16 = NULL, *l16 = NULL;
        EM_AUTOCAST_REGION(EM_BF16) {
            logits16 = toy_model_forward(m, b.input_ids, b.attention_mask);
            l16 = em_cross_entropy_loss(logits16, b.labels, NULL);   /* the loss runs in f32 */
        }
        em_autocast_stats st = em_autocast_stats_get();
        em_backward(l16);
        em_tensor *g = em_grad(m->fc1->weight);
        printf("bf16 autocast: logits are %s, the loss %s; loss %.5f vs %.5f in f32 (|diff| %.1e)\n",
               em_dtype_name(logits16->dtype), em_dtype_name(l16->dtype), em_item(l16), em_item(l32),
               fabs(em_item(l16) - em_item(l32)));
        printf("               %lld casts made by the policy; fc1.weight's gradient is %s (the master weight's dtype)\n",
               (long long)st.casts, em_dtype_name(g->dtype));
        if (g->dtype != EM_F32 || fabs(em_item(l16) - em_item(l32)) > 0.05)
            rc = 1;
        em_module_zero_grad(&m->base, true);
    }
    em_dataloader_set_epoch(dl, 0);
    return rc;
}

int main(void)
{
    em_set_seed(99);
    em_dataset *train = toy_dataset_new(TRAIN_N, 1), *dev = toy_dataset_new(DEV_N, 2);
    em_dataloader *train_dl = NULL, *dev_dl = NULL;
    em_dataloader_new(train, &(em_dataloader_opts){.batch_size = BATCH, .shuffle = true}, &train_dl);
    em_dataloader_new(dev, &(em_dataloader_opts){.batch_size = 128}, &dev_dl);
    toy_model *model = toy_model_new();
    if (!train_dl || !dev_dl || !model) {
        fprintf(stderr, "setup: %s\n", em_last_error());
        return 1;
    }
    int rc = bf16_demo(model, train_dl);

    /* ---- part 2 ----------------------------------------------------------------------
     * mixed_precision is a constructor option (never a boolean); the scaler's
     * options ride along. */
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){
        .mixed_precision = EM_MP_FP16, .scaler = {.growth_interval = GROWTH_INTERVAL}});
    int n_params;
    em_tensor **params = em_module_parameters(&model->base, &n_params);   /* model.parameters() */
    em_optimizer *opt = em_adamw_new(params, n_params, &(em_adamw_opts){.lr = 1e-2});
    free(params);   /* the optimizer keeps its own references */
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, 5, EPOCHS * em_dataloader_len(train_dl));
    if (!acc || !opt || !sched || em_accelerator_prepare(acc, &model->base, opt, train_dl, sched) != EM_OK ||
        em_accelerator_prepare_dataloader(acc, dev_dl) != EM_OK) {
        fprintf(stderr, "setup: %s\n", em_last_error());
        return 1;
    }
    em_grad_scaler *scaler = em_accelerator_grad_scaler(acc);

    printf("\nfp16 + GradScaler (growth_interval %d); '*' marks an injected overflow\n", GROWTH_INTERVAL);
    printf(" step  scale before  stepped  scale after  growth tracker\n");
    int64_t micro = 0;
    double expect = 65536.0;   /* the algorithm, replayed here */
    int64_t clean = 0, n_skipped = 0;
    int n_natural = 0;
    for (int epoch = 0; epoch < EPOCHS; epoch++) {
        em_module_train(&model->base, true);
        for (em_batch b; em_accelerator_next(acc, train_dl, &b);) {
            EM_ACCUMULATE(acc, &model->base) {
                em_tensor *loss;
                EM_AUTOCAST(acc) { loss = em_cross_entropy_loss(toy_model_forward(model, b.input_ids, b.attention_mask), b.labels, NULL); }
                double before = em_grad_scaler_get_scale(scaler);
                em_accelerator_backward(acc, loss);   /* backward of loss * scale */
                bool inj = inject_at(micro);
                if (inj) em_set(em_grad(model->fc2->bias), (int64_t[]){0}, INFINITY);   /* "overflow" */
                em_accelerator_optimizer_step(acc, opt);    /* unscale, check, step or skip, update */
                em_accelerator_scheduler_step(acc, sched);  /* not after a skipped step */
                em_accelerator_optimizer_zero_grad(acc, opt);
                bool stepped = !em_accelerator_optimizer_step_was_skipped(acc);
                /* the algorithm, replayed: an injected inf must be caught;
                 * the other steps may overflow by themselves too, once the
                 * scale has grown large enough (that is how it finds its level) */
                if (!stepped) {
                    expect *= 0.5;
                    clean = 0;
                    n_skipped++;
                } else if (++clean == GROWTH_INTERVAL) {
                    expect *= 2;
                    clean = 0;
                }
                double after = em_grad_scaler_get_scale(scaler);
                if (micro < 28 || (!stepped && !inj && n_natural++ < 3))
                    printf("%4lld%c %12.0f  %7s  %11.0f  %14lld%s\n", (long long)micro, inj ? '*' : ' ', before,
                           stepped ? "yes" : "SKIPPED", after, (long long)em_grad_scaler_growth_tracker(scaler),
                           !stepped && !inj ? "   <- a real f16 overflow" : "");
                if ((inj && stepped) || after != expect) {
                    fprintf(stderr, "step %lld: expected scale %.0f, got %.0f (stepped %d, injected %d)\n",
                            (long long)micro, expect, after, stepped, inj);
                    rc = 1;
                }
                micro++;
            }
        }
    }
    printf("... %lld micro-steps, %lld skipped (3 injected), %lld optimizer steps counted, final scale %.0f\n",
           (long long)micro, (long long)n_skipped, (long long)em_accelerator_optimizer_steps(acc),
           em_grad_scaler_get_scale(scaler));
    if (em_accelerator_optimizer_steps(acc) != micro - n_skipped) rc = 1;

    em_module_train(&model->base, false);
    double hits = 0;
    int64_t seen = 0;
    for (em_batch b; em_accelerator_next(acc, dev_dl, &b);) {
        EM_NO_GRAD EM_AUTOCAST(acc) {
            hits += toy_accuracy(toy_model_forward(model, b.input_ids, b.attention_mask), b.labels) * b.n;
            seen += b.n;
        }
    }
    printf("dev accuracy after fp16 training: %.1f%%\n", 100 * hits / seen);
    if (hits / seen < 0.9) rc = 1;

    em_accelerator_free(acc);
    toy_free_all(sched, opt, model, train_dl, dev_dl, train, dev);
    if (rc) fprintf(stderr, "05_mixed_precision: FAILED\n");
    return rc;
}
