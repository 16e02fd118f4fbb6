/* bench/dataloader: DataLoader batches per second on SST-2 train
 * (../shared/data/sst2/train.tsv, 67,349 sentences), tokenized once up front
 * into the in-memory dataset (bert-base-uncased vocabulary, [CLS]/[SEP],
 * max_length 128), then iterated at batch 32 with shuffling and dynamic
 * padding, with 0, 1 and 2 prefetch workers: the work of one epoch of
 * training minus the model. dataloader_peer.py does the same with PyTorch's
 * DataLoader and transformers' DataCollatorWithPadding.
 *
 * Per epoch it prints wall batches/s and the CPU time the consumer thread
 * spends per batch (what the training loop pays). The checksum (the sum of all
 * input_ids and the count of real tokens over one epoch) does not depend on
 * the order, so it must equal the peer's.
 * Usage: bench_dataloader [--vocab FILE] [--sst2 FILE] [--epochs N] [--batch B] */
#include "data/data.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static int die(const char *what)
{
    fprintf(stderr, "bench_dataloader: %s: %s\n", what, em_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    const char *vocab = bench_shared("bert-base-uncased/vocab.txt"), *sst2 = bench_shared("sst2/train.tsv");
    int epochs = 3, batch = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = argv[++i];
        else if (!strcmp(argv[i], "--sst2") && i + 1 < argc) sst2 = argv[++i];
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--vocab FILE] [--sst2 FILE] [--epochs N] [--batch B]\n", argv[0]);
            return 2;
        }
    }
    em_tokenizer *tok;
    em_table *table;
    em_dataset *ds;
    if (em_tokenizer_load(vocab, NULL, &tok) != EM_OK) return die(vocab);
    if (em_table_read_tsv(sst2, NULL, &table) != EM_OK) return die(sst2);
    double t0 = bench_now();
    if (em_tokenized_dataset_new(table, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label",
                                                                   .max_length = 128 }, &ds) != EM_OK)
        return die("tokenize");
    double t_tok = bench_now() - t0;
    int64_t n = em_dataset_len(ds);
    printf("ember dataloader: SST-2 train, %lld sentences tokenized in %.2f s (%d threads); batch %d, shuffle\n",
           (long long)n, t_tok, em_num_threads(), batch);

    int workers[] = { 0, 1, 2 };
    for (int w = 0; w < 3; w++) {
        em_dataloader *dl;
        if (em_dataloader_new(ds, &(em_dataloader_opts){ .batch_size = batch, .shuffle = true, .seed = 42,
                                                         .num_workers = workers[w] }, &dl) != EM_OK)
            return die("dataloader");
        double best = 1e30, best_cpu = 1e30;
        long long id_sum = 0, tokens = 0, padded = 0;
        int64_t nb = 0;
        for (int e = 0; e < epochs; e++) {
            id_sum = tokens = padded = 0;
            nb = 0;
            double w0 = bench_now(), c0 = bench_cpu_now();
            em_batch b;
            for (;;) {
                em_scope_begin();   /* one scope per batch, as a training loop */
                if (!em_dataloader_next(dl, &b)) {
                    em_scope_end();
                    break;
                }
                const int64_t *ids = em_data_ptr(b.input_ids), *mask = em_data_ptr(b.attention_mask);
                for (int64_t i = 0; i < b.n * b.len; i++) {
                    id_sum += ids[i];
                    tokens += mask[i];
                }
                padded += b.n * b.len;
                nb++;
                em_scope_end();
            }
            if (em_dataloader_status(dl) != EM_OK) return die("next");
            double dt = bench_now() - w0, dc = bench_cpu_now() - c0;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
        }
        printf("ember num_workers=%d: %lld batches/epoch, best of %d epochs %.3f s: %8.0f batches/s; consumer CPU "
               "%.2f us/batch (checksum %lld, %lld tokens, %.1f%% padding)\n",
               workers[w], (long long)nb, epochs, best, nb / best, 1e6 * best_cpu / nb, id_sum, tokens,
               100.0 * (double)(padded - tokens) / (double)padded);
        em_dataloader_free(dl);
    }
    em_dataset_free(ds);
    em_table_free(table);
    em_tokenizer_free(tok);
    return 0;
}
