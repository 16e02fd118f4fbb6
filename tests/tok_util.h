/* ember tests — what the tokenizer tests share (test_tokenizer.c,
 * test_tokenizer_json.c): TSV tables of cases that Hugging Face tokenized
 * (tests/fixtures/tokenizer-hf, tests/fixtures/tokenizer-json) and the golden
 * files of ../shared/data/tokenizer-golden. */
#ifndef EMBER_TEST_TOK_UTIL_H
#define EMBER_TEST_TOK_UTIL_H

#include "check_util.h"
#include "data/data.h"

/* A TSV file with a header line, as rows x cols cells (cell[r * cols + c],
 * each a malloc'd string as written; a line's "\n" is not part of it). A row
 * with another number of cells fails the test, naming the file and the row. */
typedef struct tu_tsv {
    int rows, cols;
    char **cell;
} tu_tsv;
tu_tsv tu_tsv_read(const char *path, int cols);
void tu_tsv_free(tu_tsv *t);
#define tu_tsv_at(t, r, c) ((t)->cell[(size_t)(r) * (size_t)(t)->cols + (size_t)(c)])

/* A text cell's string (malloc'd): \\ \t \n \r \xHH unescaped; NULL for \N. */
char *tu_unescape(const char *cell);
/* The space-separated integers of s as a malloc'd array in *out; returns
 * their count. */
int tu_parse_ints(const char *s, int32_t **out);
/* ids as "1 2 3", in a ring of 4 static buffers (a long list is cut). */
const char *tu_ids_str(const int32_t *ids, int n);

/* Encodes every row of the TSV at path (text, pair (\N: none), ids,
 * type_ids) with t, without options: compares the ids and the type ids,
 * and asserts every attention mask entry is 1. Prints the first 8 rows that
 * differ and returns how many differ; *rows (rows may be NULL) gets the count
 * of rows. */
int tu_compare_cases(const em_tokenizer *t, const char *path, int *rows);

/* ../shared/data/<rel>, a golden file of ncols columns: encodes column
 * text_col of every row with t and compares with the ids of column ids_col.
 * Asserts expect_rows rows and that none differs (the first 5 printed;
 * `through` says with what in the message). */
void tu_check_golden(const em_tokenizer *t, const char *rel, int ncols, int text_col, int ids_col, int expect_rows,
                     const char *through);

#endif
