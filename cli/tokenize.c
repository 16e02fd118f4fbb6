/* ember tokenize — the WordPiece ids of each line of stdin, as Hugging Face's
 * BertTokenizer gives them (with [CLS]/[SEP]). Lines are encoded in batches on
 * worker threads (EM_NUM_THREADS); output order is input order. With --save,
 * writes the tokenizer as a Hugging Face folder instead. */
#include "data/data.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: ember tokenize (--vocab FILE | --tokenizer DIR) [--cased] [--max-length N] [--pair]\n"
    "       ember tokenize (--vocab FILE | --tokenizer DIR) [--cased] --save DIR\n"
    "  Reads one text per line on stdin and prints its token ids, space-separated,\n"
    "  one line per input line.\n"
    "  --vocab FILE      vocab.txt of the model (one token per line)\n"
    "  --tokenizer DIR   a Hugging Face tokenizer folder (tokenizer.json or vocab.txt,\n"
    "                    tokenizer_config.json, special_tokens_map.json)\n"
    "  --save DIR        write the tokenizer to DIR as a Hugging Face folder (vocab.txt,\n"
    "                    tokenizer.json, tokenizer_config.json, special_tokens_map.json)\n"
    "                    and exit without reading stdin\n"
    "  --cased           do not lowercase or strip accents (cased models)\n"
    "  --max-length N    truncate to N ids, special tokens included\n"
    "  --pair            each line holds two texts separated by a TAB ([CLS] a [SEP] b [SEP])\n";

enum { CHUNK = 4096 };

static int bad_usage(const char *why)
{
    if (why) fprintf(stderr, "ember tokenize: %s\n", why);
    fputs(USAGE, stderr);
    return 2;
}

static void print_ids(const em_encoding *e)
{
    for (int i = 0; i < e->len; i++) printf(i ? " %d" : "%d", e->ids[i]);
    putchar('\n');
}

/* Encodes and prints lines [0,n) of a chunk (first line number `line0`).
 * Returns 0, or 1 after printing the lines before the first bad one and its error. */
static int flush_chunk(const em_tokenizer *t, int n, char **texts, char **pairs, const em_encode_opts *o,
                       em_encoding *enc, long line0)
{
    if (em_tokenizer_encode_batch(t, n, (const char *const *)texts, (const char *const *)pairs, o, enc) == EM_OK) {
        for (int i = 0; i < n; i++) {
            print_ids(&enc[i]);
            em_encoding_free(&enc[i]);
        }
        return 0;
    }
    for (int i = 0; i < n; i++) {   /* one by one, to stop at the bad line */
        em_encoding e;
        if (em_tokenizer_encode_pair(t, texts[i], pairs ? pairs[i] : NULL, o, &e) != EM_OK) {
            fflush(stdout);
            fprintf(stderr, "ember tokenize: line %ld: %s\n", line0 + i, em_last_error());
            return 1;
        }
        print_ids(&e);
        em_encoding_free(&e);
    }
    return 0;
}

int ember_cmd_tokenize(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "vocab", required_argument, NULL, 'v' }, { "cased", no_argument, NULL, 'c' },
        { "max-length", required_argument, NULL, 'm' }, { "pair", no_argument, NULL, 'p' },
        { "tokenizer", required_argument, NULL, 't' }, { "save", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    const char *vocab = NULL, *dir = NULL, *save = NULL;
    bool cased = false, pair = false;
    long max_length = 0;
    optind = 1;
    opterr = 0;
    for (int c; (c = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        switch (c) {
        case 'v': vocab = optarg; break;
        case 't': dir = optarg; break;
        case 's': save = optarg; break;
        case 'c': cased = true; break;
        case 'p': pair = true; break;
        case 'm': {
            char *end;
            max_length = strtol(optarg, &end, 10);
            if (*optarg == 0 || *end || max_length < 1 || max_length > 1 << 30)
                return bad_usage("--max-length needs a positive integer");
            break;
        }
        case 'h': fputs(USAGE, stdout); return 0;
        default: {
            char why[300];
            snprintf(why, sizeof why, "bad option '%.200s'", argv[optind - 1]);
            return bad_usage(why);
        }
        }
    }
    if (optind < argc) return bad_usage("unexpected argument");
    if (!vocab == !dir) return bad_usage(vocab ? "--vocab and --tokenizer exclude each other"
                                               : "--vocab or --tokenizer is required");
    if (max_length && max_length < (pair ? 3 : 2))
        return bad_usage("--max-length must leave room for [CLS] and [SEP]");

    em_tokenizer *t;
    em_tokenizer_opts to = { .do_lower_case = cased ? EM_TOK_OFF : EM_TOK_DEFAULT };
    if ((vocab ? em_tokenizer_load(vocab, &to, &t) : em_tokenizer_from_pretrained(dir, &to, &t)) != EM_OK) {
        fprintf(stderr, "ember tokenize: %s\n", em_last_error());
        return 1;
    }
    if (save) {
        int rc = em_tokenizer_save_pretrained(t, save) == EM_OK ? 0 : 1;
        if (rc) fprintf(stderr, "ember tokenize: %s\n", em_last_error());
        em_tokenizer_free(t);
        return rc;
    }
    em_encode_opts eo = { .max_length = (int)max_length };
    char **texts = calloc(CHUNK, sizeof *texts), **pairs = pair ? calloc(CHUNK, sizeof *pairs) : NULL;
    em_encoding *enc = calloc(CHUNK, sizeof *enc);
    int rc = 0, n = 0;
    long line = 0;
    if (!texts || !enc || (pair && !pairs)) {
        fprintf(stderr, "ember tokenize: out of memory\n");
        rc = 1;
    }
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    while (!rc && (len = getline(&buf, &cap, stdin)) >= 0) {
        line++;
        if (len && buf[len - 1] == '\n') buf[--len] = 0;
        size_t k = 0;   /* HF drops NUL characters: so does this, before C strings end at them */
        for (ssize_t i = 0; i < len; i++)
            if (buf[i]) buf[k++] = buf[i];
        buf[k] = 0;
        char *second = NULL;
        if (pair) {
            char *tab = strchr(buf, '\t');
            if (!tab) {
                rc = flush_chunk(t, n, texts, pairs, &eo, enc, line - n);
                if (!rc) fprintf(stderr, "ember tokenize: line %ld: --pair needs two texts separated by a TAB\n", line);
                rc = 1;
                break;
            }
            *tab = 0;
            second = tab + 1;
        }
        texts[n] = strdup(buf);
        if (pair) pairs[n] = strdup(second);
        if (!texts[n] || (pair && !pairs[n])) {
            fprintf(stderr, "ember tokenize: out of memory\n");
            rc = 1;
            n++;
            break;
        }
        if (++n == CHUNK) {
            rc = flush_chunk(t, n, texts, pairs, &eo, enc, line - n + 1);
            for (int i = 0; i < n; i++) {
                free(texts[i]);
                if (pair) free(pairs[i]);
            }
            n = 0;
        }
    }
    if (!rc && n) rc = flush_chunk(t, n, texts, pairs, &eo, enc, line - n + 1);
    for (int i = 0; i < n; i++) {
        free(texts[i]);
        if (pair) free(pairs[i]);
    }
    if (fflush(stdout) != 0 && !rc) {
        perror("ember tokenize: stdout");
        rc = 1;
    }
    free(buf);
    free(texts);
    free(pairs);
    free(enc);
    em_tokenizer_free(t);
    return rc;
}
