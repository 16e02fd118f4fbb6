/* examples/08_sst2_loop.c — the Accelerate fine-tuning loop on SST-2, in C.
 *
 * What a transformers + Accelerate user writes for sentence classification:
 * a tokenizer, a sequence classifier (a small DistilBERT from scratch, or a
 * Hugging Face folder given as the argument, whose head is made fresh), AdamW
 * with linear warmup, a loop over the shuffled train set that stops after
 * MAX_STEPS optimizer steps, and the dev accuracy
 * gathered across ranks (gather_for_metrics). The full command-line version,
 * with checkpoints, logging and mixed precision, is seqcls.c. The Python peer,
 * line for line: examples/peers/sst2_loop.py (examples/peers/count-lines.sh
 * compares them). Run from the repository root (the data is ../shared/data):
 *
 *   ./build/examples/08_sst2_loop [MODEL_DIR]                       # 1 process
 *   ./build/cli/ember launch --num_processes 2 ./build/examples/08_sst2_loop
 *
 * Exits 1 unless the dev accuracy is above 0.7 (about 0.76 after the 400 steps).
 */
#include "ember.h"

#include <stdio.h>

#define DATA "../shared/data"
enum { MAX_LEN = 66, BATCH = 16, MAX_STEPS = 400 };

/* a GLUE TSV (sentence, label), each sentence tokenized once into [CLS] ... [SEP] of at most MAX_LEN ids */
static em_dataset *load(const char *path, const em_tokenizer *tok)
{
    em_table *t = NULL;
    em_dataset *ds = NULL;
    if (tok && em_table_read_tsv(path, NULL, &t) == EM_OK)
        em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){.text_a = "sentence", .label = "label",
                                                              .max_length = MAX_LEN}, &ds);
    em_table_free(t);
    return ds;
}

int main(int argc, char **argv)
{
    em_accelerator *acc = em_accelerator_new(&(em_accelerator_opts){.max_steps = MAX_STEPS});   /* then next() ends */
    em_set_seed(42);
    em_tokenizer *tok = NULL;
    em_module *model = NULL;
    if (argc > 1) {   /* a Hugging Face folder: fine-tune it */
        em_tokenizer_from_pretrained(argv[1], NULL, &tok);
        em_seqcls_from_pretrained(argv[1], &(em_pretrained_opts){.num_labels = 2}, &model, NULL);
    } else {   /* a small DistilBERT from scratch */
        em_tokenizer_load(DATA "/bert-base-uncased/vocab.txt", NULL, &tok);
        em_distilbert_config cfg = {.vocab_size = em_tokenizer_vocab_size(tok), .dim = 64, .hidden_dim = 256,
                                    .n_layers = 2, .n_heads = 4, .max_position_embeddings = MAX_LEN};
        model = (em_module *)em_distilbert_seqcls_new(&cfg);
    }
    em_dataset *train = load(DATA "/sst2/train.tsv", tok), *dev = load(DATA "/sst2/dev.tsv", tok);
    em_dataloader *train_dl = NULL, *dev_dl = NULL;
    if (!acc || !model || !train || !dev ||
        em_dataloader_new(train, &(em_dataloader_opts){.batch_size = BATCH, .shuffle = true}, &train_dl) != EM_OK ||
        em_dataloader_new(dev, &(em_dataloader_opts){.batch_size = 64}, &dev_dl) != EM_OK) {
        fprintf(stderr, "setup: %s\n", em_last_error());
        return 1;
    }
    em_optimizer *opt = em_adamw_new_module(model, &(em_adamw_opts){.lr = argc > 1 ? 5e-5 : 1e-3});
    /* in optimizer steps of this rank: the scheduler steps once per optimizer step */
    em_scheduler *sched = em_linear_schedule_with_warmup(opt, MAX_STEPS / 10, MAX_STEPS);
    if (!sched || em_accelerator_prepare(acc, model, opt, train_dl, sched) != EM_OK ||
        em_accelerator_prepare_dataloader(acc, dev_dl) != EM_OK) {
        fprintf(stderr, "setup: %s\n", em_last_error());
        return 1;
    }
    em_module_train(model, true);   /* a loaded model comes in eval mode, as in transformers */
    for (em_batch b; em_accelerator_next(acc, train_dl, &b);) {
        em_seqcls_output out = em_seqcls_forward(model, &(em_seqcls_inputs){.input_ids = b.input_ids,
                                                 .attention_mask = b.attention_mask, .labels = b.labels});
        em_accelerator_backward(acc, out.loss);
        em_accelerator_optimizer_step(acc, opt);
        em_accelerator_scheduler_step(acc, sched);
        em_accelerator_optimizer_zero_grad(acc, opt);
    }
    em_module_train(model, false);
    double correct = 0, total = 0;
    EM_NO_GRAD for (em_batch b; em_accelerator_next(acc, dev_dl, &b);) {
        em_seqcls_output out = em_seqcls_forward(model, &(em_seqcls_inputs){.input_ids = b.input_ids,
                                                 .attention_mask = b.attention_mask});
        em_tensor *in[2] = {em_argmax(out.logits, -1, false), b.labels}, *got[2];
        if (em_accelerator_gather_for_metrics(acc, 2, in, got) == EM_OK) {   /* else total stays 0: NaN */
            correct += em_item(em_sum(em_eq(got[0], got[1]), 0, NULL, false));
            total += (double)em_size(got[1], 0);
        }
    }
    double accuracy = correct / total;
    em_accelerator_print(acc, "dev accuracy %.4f (%.0f sentences) after %d steps\n", accuracy, total, MAX_STEPS);
    em_accelerator_free_all(acc);   /* the accelerator and everything prepared on it */
    em_dataset_free(train);
    em_dataset_free(dev);
    em_tokenizer_free(tok);
    if (!(accuracy > 0.7)) fprintf(stderr, "training failed: dev accuracy %.4f <= 0.7\n", accuracy);
    return accuracy > 0.7 ? 0 : 1;
}
