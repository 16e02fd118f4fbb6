/* ember — libFuzzer harness for the WordPiece tokenizer (data/tokenizer*.c):
 * bert-base-uncased's vocab.txt loaded uncased and cased, then arbitrary
 * bytes (up to the first NUL) encoded, decoded, and, split at the first TAB,
 * encoded as a pair truncated to 16 ids. Invalid UTF-8 must give
 * EM_ERR_FORMAT; nothing may crash. tests/test_readers.c replays the kept
 * corpus (tests/fixtures/fuzz-regress/tokenizer/) with the same calls. */
#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static em_tokenizer *toks[2];

static void die(const char *what)
{
    fprintf(stderr, "fuzz_tokenizer: %s (%s)\n", what, em_last_error());
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    const char *vocab = getenv("EMBER_VOCAB");
    if (!vocab) vocab = "../shared/data/bert-base-uncased/vocab.txt";
    if (em_tokenizer_load(vocab, NULL, &toks[0]) ||
        em_tokenizer_load(vocab, &(em_tokenizer_opts){ .do_lower_case = EM_TOK_OFF }, &toks[1]))
        die("set EMBER_VOCAB to bert-base-uncased/vocab.txt");
    return 0;
}

static void check(const em_tokenizer *tok, const em_encoding *e, int max_len)
{
    if (e->len < 2 || (max_len && e->len > max_len)) die("length");
    for (int i = 0; i < e->len; i++)
        if (e->ids[i] < 0 || e->ids[i] >= em_tokenizer_vocab_size(tok)) die("id out of range");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    char *tab = strchr(s, '\t');
    for (int k = 0; k < 2; k++) {
        em_encoding e;
        em_status st = em_tokenizer_encode(toks[k], s, NULL, &e);
        if (st != EM_OK && st != EM_ERR_FORMAT) die("encode status");
        if (st == EM_OK) {
            check(toks[k], &e, 0);
            char *text = NULL;
            if (em_tokenizer_decode(toks[k], e.ids, e.len, NULL, &text)) die("decode");
            free(text);
            em_encoding_free(&e);
        }
        if (tab) {
            *tab = 0;
            st = em_tokenizer_encode_pair(toks[k], s, tab + 1, &(em_encode_opts){ .max_length = 16 }, &e);
            *tab = '\t';
            if (st != EM_OK && st != EM_ERR_FORMAT) die("encode_pair status");
            if (st == EM_OK) {
                check(toks[k], &e, 16);
                em_encoding_free(&e);
            }
        }
    }
    free(s);
    return 0;
}
