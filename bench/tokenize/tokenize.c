/* bench/tokenize: WordPiece tokens per second on one core.
 * The text: SST-2 train sentences (../shared/data/sst2/train.tsv), repeated
 * until it holds --mb MB (default 4). Each sentence is encoded with [CLS]/[SEP]
 * like HF's tokenizer(text); "tokens" counts the WordPiece ids without the two
 * specials, as tokenize_peer.py does, and the checksum (sum of all ids) must
 * match the peer's. Usage: bench_tokenize [--vocab FILE] [--sst2 FILE] [--mb N] */
#include "data/data.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CPU time of this thread: steadier than wall time on a loaded machine. */

int main(int argc, char **argv)
{
    const char *vocab = bench_shared("bert-base-uncased/vocab.txt"), *sst2 = bench_shared("sst2/train.tsv");
    double mb = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = argv[++i];
        else if (!strcmp(argv[i], "--sst2") && i + 1 < argc) sst2 = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = atof(argv[++i]);
        else { fprintf(stderr, "usage: %s [--vocab FILE] [--sst2 FILE] [--mb N]\n", argv[0]); return 2; }
    }
    em_tokenizer *t;
    if (em_tokenizer_load(vocab, NULL, &t) != EM_OK) { fprintf(stderr, "%s\n", em_last_error()); return 1; }
    FILE *f = fopen(sst2, "r");
    if (!f) { perror(sst2); return 1; }
    char **sent = NULL, *line = NULL;
    size_t cap = 0, n_sent = 0, bytes = 0;
    for (ssize_t len; (len = getline(&line, &cap, f)) > 0;) {
        if (!cap || line == NULL) break;
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab = 0;
        if (!strcmp(line, "sentence")) continue;   /* header */
        sent = realloc(sent, (n_sent + 1) * sizeof *sent);
        sent[n_sent++] = strdup(line);
        bytes += strlen(line);
    }
    free(line);
    fclose(f);
    if (!n_sent) { fprintf(stderr, "%s: no sentences\n", sst2); return 1; }
    /* repeat to the target size */
    size_t want = (size_t)(mb * 1e6), n = 0, total_bytes = 0;
    const char **texts = NULL;
    while (total_bytes < want) {
        texts = realloc(texts, (n + 1) * sizeof *texts);
        texts[n] = sent[n % n_sent];
        total_bytes += strlen(texts[n]);
        n++;
    }
    em_encoding e;
    for (size_t i = 0; i < 2000 && i < n; i++) { em_tokenizer_encode(t, texts[i], NULL, &e); em_encoding_free(&e); }

    double best = 1e30, best_cpu = 1e30;
    long long tokens = 0;
    unsigned long long checksum = 0;
    for (int rep = 0; rep < 3; rep++) {
        tokens = 0;
        checksum = 0;
        double t0 = bench_now(), c0 = bench_cpu_now();
        for (size_t i = 0; i < n; i++) {
            if (em_tokenizer_encode(t, texts[i], NULL, &e) != EM_OK) { fprintf(stderr, "%s\n", em_last_error()); return 1; }
            tokens += e.len - 2;
            for (int k = 0; k < e.len; k++) checksum += (unsigned)e.ids[k];
            em_encoding_free(&e);
        }
        double dt = bench_now() - t0, dc = bench_cpu_now() - c0;
        if (dt < best) best = dt;
        if (dc < best_cpu) best_cpu = dc;
    }
    printf("ember tokenize: %zu texts, %.2f MB, %lld tokens, checksum %llu\n", n, total_bytes / 1e6, tokens, checksum);
    printf("ember single-thread encode:       %.3f s  %.2f M tokens/s  %.1f MB/s  (CPU time %.3f s: %.2f M tokens/s)\n",
           best, tokens / best / 1e6, total_bytes / best / 1e6, best_cpu, tokens / best_cpu / 1e6);
    /* the batch API on one thread, then on every thread */
    em_encoding *out = malloc(n * sizeof *out);
    for (int threads = 1; threads <= 2; threads++) {
        int nt = threads == 1 ? 1 : em_num_threads();
        if (threads == 2 && nt == 1) break;
        double bb = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = bench_now();
            if (em_tokenizer_encode_batch(t, (int)n, texts, NULL, &(em_encode_opts){ .num_threads = nt }, out) != EM_OK) {
                fprintf(stderr, "%s\n", em_last_error());
                return 1;
            }
            double dt = bench_now() - t0;
            if (dt < bb) bb = dt;
            for (size_t i = 0; i < n; i++) em_encoding_free(&out[i]);
        }
        printf("ember batch encode, %2d thread%s:  %.3f s  %.2f M tokens/s\n", nt, nt > 1 ? "s" : " ", bb,
               tokens / bb / 1e6);
    }
    free(out);
    free(texts);
    for (size_t i = 0; i < n_sent; i++) free(sent[i]);
    free(sent);
    em_tokenizer_free(t);
    return 0;
}
