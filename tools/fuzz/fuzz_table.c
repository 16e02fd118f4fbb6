/* ember — libFuzzer harness for the table readers (data/table.c) and the
 * tokenized dataset built from what they read. Built three times by build.sh,
 * with FUZZ_KIND = EM__TABLE_TSV, EM__TABLE_CSV or EM__TABLE_JSONL.
 * The input is the file's bytes. Every call must end in EM_OK or a clean
 * error (EM_ERR_FORMAT / EM_ERR_NOT_FOUND / EM_ERR_INVALID), never a crash,
 * a leak or a sanitizer report; what a successful read returns is checked
 * for a few invariants. tests/test_readers.c replays the kept corpus
 * (tests/fixtures/fuzz-regress/<kind>/) with the same calls. */
#include "data/table_internal.h"
#include "tensor/tensor_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_KIND
#error "build with -DFUZZ_KIND=EM__TABLE_TSV|EM__TABLE_CSV|EM__TABLE_JSONL"
#endif

static em_tokenizer *tok;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_table: %s (%s)\n", what, em_last_error());
    abort();
}

/* Valid UTF-8 without NUL, as the reader promises for every cell. */
static int utf8_ok(const unsigned char *s)
{
    while (*s) {
        unsigned c = *s, k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
                                          : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k) return 0;
        for (unsigned i = 1; i < k; i++)
            if ((s[i] & 0xC0) != 0x80) return 0;
        s += k;
    }
    return 1;
}

static void check_table(em_table *t)
{
    int cols = em_table_cols(t);
    int64_t last = 0;
    for (int64_t r = 0; r < em_table_rows(t); r++) {
        if (em_table_line(t, r) <= last) die("row lines not increasing");
        last = em_table_line(t, r);
        for (int c = 0; c < cols; c++) {
            const char *s = em_table_get(t, r, c);
            if (!utf8_ok((const unsigned char *)s)) die("cell is not valid UTF-8");
            if (FUZZ_KIND == EM__TABLE_TSV && strpbrk(s, "\t\r\n")) die("TSV cell holds a delimiter or line break");
        }
    }
    for (int c = 0; c < cols; c++)
        if (em_table_col(t, em_table_col_name(t, c)) > c) die("column lookup");
    if (cols >= 2) {
        em_dataset *ds = NULL;
        em_tokenized_opts o = { .text_a = em_table_col_name(t, 0), .text_b = cols >= 3 ? em_table_col_name(t, 1) : NULL,
                                .label = em_table_col_name(t, cols - 1), .max_length = 32, .num_threads = 1 };
        em_status st = em_tokenized_dataset_new(t, tok, &o, &ds);
        if (st != EM_OK && st != EM_ERR_FORMAT && st != EM_ERR_INVALID) die("dataset status");
        if (st == EM_OK) {
            if (em_dataset_len(ds) != em_table_rows(t)) die("dataset length");
            for (int64_t i = 0; i < em_dataset_len(ds); i++) {
                em_sample s;
                if (em_dataset_get(ds, i, &s) || s.len < 2 || s.len > 32) die("sample");
            }
        } else if (ds) die("failed dataset not NULL");
        em_dataset_free(ds);
    }
    em_table_free(t);
}

static void run(const uint8_t *data, size_t size, const em_table_opts *o, const char *const *fields, int nf)
{
    char *buf = em__malloc(size + 1);
    if (!buf) return;
    memcpy(buf, data, size);
    em_table *t = NULL;
    em_status st = em__table_parse("fuzz", buf, size, FUZZ_KIND, o, fields, nf, &t);
    if (st == EM_OK) check_table(t);
    else if (t) die("failed read left a table");
    else if (st != EM_ERR_FORMAT && st != EM_ERR_NOT_FOUND) die("unexpected status");
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc; (void)argv;
    const char *vocab = getenv("EMBER_VOCAB");
    if (em_tokenizer_load(vocab ? vocab : "../shared/data/bert-base-uncased/vocab.txt", NULL, &tok))
        die("set EMBER_VOCAB to bert-base-uncased/vocab.txt");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const fields[] = { "text", "label" };
    if (FUZZ_KIND == EM__TABLE_JSONL) {
        run(data, size, NULL, NULL, 0);
        run(data, size, NULL, fields, 2);
    } else {
        run(data, size, NULL, NULL, 0);
        run(data, size, &(em_table_opts){ .no_header = true }, NULL, 0);
    }
    return 0;
}
