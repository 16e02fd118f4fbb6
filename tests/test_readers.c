/* ember tests — data/: the TSV/CSV/JSONL readers, label maps and the
 * tokenized in-memory dataset: real GLUE SST-2 files, quoting edge cases,
 * exact file:line:column messages, 1 vs N threads, fail-the-Nth allocation,
 * and the replay of the fuzz corpus (tests/fixtures/fuzz-regress/). */
#include "check_util.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

/* Writes len bytes to scratch/name; returns the path (tu_scratch_path's ring of 8). */
static const char *tmp_file_n(const char *name, const char *content, size_t len)
{
    const char *p = tu_scratch_path(name);
    tu_write_file(p, content, len);
    return p;
}
static const char *tmp_file(const char *name, const char *content) { return tmp_file_n(name, content, strlen(content)); }

/* The cells of t (row, column, the text wanted), a list ended by {0}. */
typedef struct cell {
    int64_t row, col;
    const char *want;
} cell;
static void expect_cells(const em_table *t, const cell *c)
{
    for (; c->want; c++) {
        const char *got = em_table_get(t, c->row, c->col);
        ck_assert_msg(got && !strcmp(got, c->want), "cell [%lld, %lld]: \"%s\", want \"%s\"", (long long)c->row,
                      (long long)c->col, got ? got : "(null)", c->want);
    }
}

/* Asserts status `want` and the exact message (printf format). */
static void expect_fail(em_status got, em_status want, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ck_assert_msg(got == want, "status %s (%s), expected %s (%s)", em_status_name(got), em_last_error(),
                  em_status_name(want), msg);
    ck_assert_str_eq(em_last_error(), msg);
}

static em_tokenizer *load_vocab(bool cased)
{
    em_tokenizer *tok = NULL;
    em_tokenizer_opts o = { .do_lower_case = cased ? EM_TOK_OFF : EM_TOK_DEFAULT };
    em_status st = em_tokenizer_load(tu_shared_path("bert-base-uncased/vocab.txt"), &o, &tok);
    ck_assert_msg(st == EM_OK, "%s", em_last_error());
    return tok;
}

/* ---- SST-2 ------------------------------------------------------------------------ */
START_TEST(test_sst2_tables)
{
    em_table *t = NULL;
    em_status st = em_table_read_tsv(tu_shared_path("sst2/train.tsv"), NULL, &t);
    ck_assert_msg(st == EM_OK, "%s", em_last_error());
    ck_assert_int_eq(em_table_rows(t), 67349);
    ck_assert_int_eq(em_table_cols(t), 2);
    ck_assert_int_eq(em_table_col(t, "sentence"), 0);
    ck_assert_int_eq(em_table_col(t, "label"), 1);
    ck_assert_int_eq(em_table_col(t, "Label"), -1);
    ck_assert_str_eq(em_table_col_name(t, 1), "label");
    expect_cells(t, (const cell[]){{0, 0, "hide new secretions from the parental units "}, {0, 1, "0"},
                                      {4, 0, "on the worst revenge-of-the-nerds clichés the filmmakers could dredge up "},
                                      {0}});
    ck_assert_int_eq(em_table_line(t, 4), 6);
    ck_assert_str_eq(em_table_get(t, 67348, 0),
                     "this new jangle of noise , mayhem and stupidity must be a serious contender for the title . ");
    ck_assert_int_eq(em_table_line(t, 67348), 67350);
    int64_t pos = 0;
    for (int64_t r = 0; r < em_table_rows(t); r++) pos += strcmp(em_table_get(t, r, 1), "1") == 0;
    ck_assert_int_eq(pos, 37569);
    ck_assert_str_eq(em_table_path(t), tu_shared_path("sst2/train.tsv"));
    em_table_free(t);

    ck_assert_int_eq(em_table_read_tsv(tu_shared_path("sst2/dev.tsv"), NULL, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 872);
    ck_assert_str_eq(em_table_get(t, 0, 0), "it 's a charming and often affecting journey . ");
    ck_assert_str_eq(em_table_get(t, 871, 0),
                     "looking aristocratic , luminous yet careworn in jane hamilton 's exemplary costumes , rampling "
                     "gives a performance that could not be improved upon . ' ");
    ck_assert_int_eq(em_table_line(t, 871), 873);
    em_table_free(t);

    ck_assert_int_eq(em_table_read_tsv(tu_shared_path("sst2/test.tsv"), NULL, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 1821);
    ck_assert_int_eq(em_table_col(t, "index"), 0);
    ck_assert_str_eq(em_table_get(t, 1820, 0), "1820");
    ck_assert_str_eq(em_table_get(t, 0, 1), "uneasy mishmash of styles and genres .");
    em_table_free(t);
}
END_TEST

/* Compares every sample of ds with em_tokenizer_encode(_pair) of the table's rows. */
static void check_against_encode(const em_dataset *ds, const em_table *t, const em_tokenizer *tok, int ca, int cb,
                                 int max_length)
{
    ck_assert_int_eq(em_dataset_len(ds), em_table_rows(t));
    em_encode_opts eo = { .max_length = max_length };
    for (int64_t r = 0; r < em_table_rows(t); r++) {
        em_encoding e;
        em_status st = cb < 0 ? em_tokenizer_encode(tok, em_table_get(t, r, ca), &eo, &e)
                              : em_tokenizer_encode_pair(tok, em_table_get(t, r, ca), em_table_get(t, r, cb), &eo, &e);
        ck_assert_int_eq(st, EM_OK);
        em_sample s;
        ck_assert_int_eq(em_dataset_get(ds, r, &s), EM_OK);
        ck_assert_int_eq(s.len, e.len);
        ck_assert_msg(memcmp(s.ids, e.ids, (size_t)e.len * 4) == 0, "row %lld: ids differ", (long long)r);
        ck_assert_msg(memcmp(s.type_ids, e.type_ids, (size_t)e.len * 4) == 0, "row %lld: type ids differ", (long long)r);
        em_encoding_free(&e);
    }
}

START_TEST(test_sst2_dataset)
{
    em_tokenizer *tok = load_vocab(false);
    em_table *t = NULL;
    ck_assert_int_eq(em_table_read_tsv(tu_shared_path("sst2/dev.tsv"), NULL, &t), EM_OK);
    em_dataset *ds = NULL;
    em_status st = em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label" }, &ds);
    ck_assert_msg(st == EM_OK, "%s", em_last_error());
    check_against_encode(ds, t, tok, 0, -1, 512);

    /* row 0, checked against bert-base-uncased's vocab.txt by hand */
    static const int32_t want[] = { 101, 2009, 1005, 1055, 1037, 11951, 1998, 2411, 12473, 4990, 1012, 102 };
    em_sample s;
    ck_assert_int_eq(em_dataset_get(ds, 0, &s), EM_OK);
    ck_assert_int_eq(s.len, 12);
    for (int i = 0; i < 12; i++) {
        ck_assert_int_eq(s.ids[i], want[i]);
        ck_assert_int_eq(s.type_ids[i], 0);
    }
    ck_assert_int_eq(s.label, 1);
    int64_t counts[2] = {0};
    for (int64_t r = 0; r < em_dataset_len(ds); r++) {
        ck_assert_int_eq(em_dataset_get(ds, r, &s), EM_OK);
        ck_assert(s.label == 0 || s.label == 1);
        counts[s.label]++;
    }
    ck_assert_int_eq(counts[0], 428);
    ck_assert_int_eq(counts[1], 444);
    em_dataset_free(ds);

    /* the same labels through a name map; unlabeled; truncation */
    static const char *const names[] = { "0", "1", NULL };
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label",
                                              .label_names = names, .max_length = 8 }, &ds), EM_OK);
    ck_assert_int_eq(em_dataset_get(ds, 0, &s), EM_OK);
    ck_assert_int_eq(s.label, 1);
    ck_assert_int_eq(s.len, 8);
    ck_assert_int_eq(s.ids[7], 102);
    check_against_encode(ds, t, tok, 0, -1, 8);
    em_dataset_free(ds);
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence" }, &ds), EM_OK);
    ck_assert_int_eq(em_dataset_get(ds, 5, &s), EM_OK);
    ck_assert_int_eq(s.label, -1);
    em_dataset_free(ds);
    em_table_free(t);
    em_tokenizer_free(tok);
}
END_TEST

static void check_same(const em_dataset *a, const em_dataset *b)
{
    ck_assert_int_eq(em_dataset_len(a), em_dataset_len(b));
    for (int64_t r = 0; r < em_dataset_len(a); r++) {
        em_sample x, y;
        em_dataset_get(a, r, &x);
        em_dataset_get(b, r, &y);
        ck_assert_int_eq(x.len, y.len);
        ck_assert_int_eq(x.label, y.label);
        ck_assert(memcmp(x.ids, y.ids, (size_t)x.len * 4) == 0);
        ck_assert(memcmp(x.type_ids, y.type_ids, (size_t)x.len * 4) == 0);
    }
}

/* SST-2 train, 1 vs 3 threads (several 8192-row chunks); its longest row is 66
 * ids and none is [UNK]. Under valgrind (70 s for train) the dev file stands in. */
START_TEST(test_threads_identical)
{
    em_tokenizer *tok = load_vocab(false);
    em_table *t = NULL;
    bool full = !RUNNING_ON_VALGRIND;
    ck_assert_int_eq(em_table_read_tsv(tu_shared_path(full ? "sst2/train.tsv" : "sst2/dev.tsv"), NULL, &t), EM_OK);
    em_dataset *d1 = NULL, *d3 = NULL;
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label",
                                              .num_threads = 1 }, &d1), EM_OK);
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label",
                                              .num_threads = 3 }, &d3), EM_OK);
    check_same(d1, d3);
    int32_t longest = 0;
    int64_t pos = 0;
    for (int64_t r = 0; r < em_dataset_len(d3); r++) {
        em_sample s;
        em_dataset_get(d3, r, &s);
        if (s.len > longest) longest = s.len;
        for (int i = 0; i < s.len; i++) ck_assert_int_ne(s.ids[i], 100);
        pos += s.label;
    }
    ck_assert_int_eq(longest, full ? 66 : 55);
    ck_assert_int_eq(pos, full ? 37569 : 444);
    /* spot checks against the tokenizer itself, across chunk boundaries */
    em_encoding e;
    for (int64_t r = full ? 8190 : 860; r < (full ? 8195 : 872); r++) {
        em_sample s;
        em_dataset_get(d3, r, &s);
        ck_assert_int_eq(em_tokenizer_encode(tok, em_table_get(t, r, 0), NULL, &e), EM_OK);
        ck_assert_int_eq(s.len, e.len);
        ck_assert(memcmp(s.ids, e.ids, (size_t)e.len * 4) == 0);
        em_encoding_free(&e);
    }
    em_dataset_free(d1);
    em_dataset_free(d3);
    em_table_free(t);
    em_tokenizer_free(tok);
}
END_TEST

/* ---- TSV --------------------------------------------------------------------------- */
START_TEST(test_tsv)
{
    /* BOM, CRLF, quotes kept, a blank line skipped, empty fields, no final newline */
    const char *p = tmp_file("a.tsv", "\xEF\xBB\xBFtext\tlabel\r\n\"quoted\" text\t1\r\n\r\n\t0\r\nlast\t\n\nx\ty");
    em_table *t = NULL;
    ck_assert_int_eq(em_table_read_tsv(p, NULL, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 4);
    ck_assert_str_eq(em_table_col_name(t, 0), "text");
    expect_cells(t, (const cell[]){{0, 0, "\"quoted\" text"}, {1, 0, ""}, {1, 1, "0"}, {2, 0, "last"}, {2, 1, ""},
                                      {3, 1, "y"}, {0}});
    ck_assert_int_eq(em_table_line(t, 1), 4);
    ck_assert_int_eq(em_table_line(t, 3), 7);
    em_table_free(t);

    /* no header: columns "0", "1"; another delimiter */
    p = tmp_file("b.tsv", "a|b|c\nd|e|f\n");
    ck_assert_int_eq(em_table_read_tsv(p, &(em_table_opts){ .delimiter = '|', .no_header = true }, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 2);
    ck_assert_int_eq(em_table_cols(t), 3);
    ck_assert_int_eq(em_table_col(t, "2"), 2);
    ck_assert_str_eq(em_table_get(t, 1, 2), "f");
    em_table_free(t);

    /* an empty file without header: an empty table */
    p = tmp_file("c.tsv", "");
    ck_assert_int_eq(em_table_read_tsv(p, &(em_table_opts){ .no_header = true }, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 0);
    ck_assert_int_eq(em_table_cols(t), 0);
    em_table_free(t);
}
END_TEST

START_TEST(test_tsv_errors)
{
    em_table *t = (em_table *)1;
    const char *p = tmp_file("e1.tsv", "sentence\tlabel\nfine\t1\ntoo\tmany\t0\n");
    expect_fail(em_table_read_tsv(p, NULL, &t), EM_ERR_FORMAT, "%s:3:9: expected 2 fields, found 3", p);
    ck_assert_ptr_null(t);
    p = tmp_file("e2.tsv", "sentence\tlabel\nfine\t1\r\ntoo few\r\n");
    expect_fail(em_table_read_tsv(p, NULL, &t), EM_ERR_FORMAT, "%s:3:8: expected 2 fields, found 1", p);
    p = tmp_file("e3.tsv", "a\tb\nx\ty\tz\tw\n");
    expect_fail(em_table_read_tsv(p, NULL, &t), EM_ERR_FORMAT, "%s:2:4: expected 2 fields, found 4", p);
    p = tmp_file("e4.tsv", "");
    expect_fail(em_table_read_tsv(p, NULL, &t), EM_ERR_FORMAT, "%s: empty file: no header line", p);
    p = tmp_file("e5.tsv", "\n\r\n");
    expect_fail(em_table_read_tsv(p, NULL, &t), EM_ERR_FORMAT, "%s: empty file: no header line", p);
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope.tsv", tu_scratch());
    expect_fail(em_table_read_tsv(missing, NULL, &t), EM_ERR_NOT_FOUND, "%s: No such file or directory", missing);
    expect_fail(em_table_read_tsv(tu_scratch(), NULL, &t), EM_ERR_IO, "%s: Is a directory", tu_scratch());
}
END_TEST

START_TEST(test_utf8_errors)
{
    em_table *t = NULL;
    const char *p = tmp_file("u1.csv", "a,b\nx,caf\xC3(\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT, "%s:2:6: invalid UTF-8 (byte 0xC3 at file offset 9)", p);
    static const char *const bad[] = {
        "\xC0\xAF",           /* overlong '/'      */
        "\xE0\x80\xAF",       /* overlong, 3 bytes */
        "\xED\xA0\x80",       /* a surrogate       */
        "\xF4\x90\x80\x80",   /* > U+10FFFF        */
        "\xF8\x88\x80\x80",   /* 5-byte form       */
        "\x80",               /* lone continuation */
        "\xE2\x82",           /* truncated at EOF  */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char content[64];
        snprintf(content, sizeof content, "h\nok\n\xC3\xA9%s", bad[i]);
        p = tmp_file("u2.tsv", content);
        expect_fail(em_table_read_tsv(p, NULL, &t), EM_ERR_FORMAT, "%s:3:3: invalid UTF-8 (byte 0x%02X at file offset 7)",
                    p, (unsigned char)bad[i][0]);
    }
    /* valid edges: U+0080, U+07FF, U+0800, U+FFFF, U+10000, U+10FFFF */
    p = tmp_file("u3.tsv", "h\n\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\n");
    ck_assert_int_eq(em_table_read_tsv(p, NULL, &t), EM_OK);
    em_table_free(t);
    p = tmp_file_n("u4.csv", "a,b\n1,\0\n", 8);
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT, "%s:2:3: NUL byte", p);
    /* JSONL: lines end at LF only, so a CR does not start a line */
    p = tmp_file("u5.jsonl", "{\"a\": 1}\r\n{\"a\": \"\r\xFF\"}\n");
    expect_fail(em_table_read_jsonl(p, NULL, 0, &t), EM_ERR_FORMAT, "%s:2:9: invalid UTF-8 (byte 0xFF at file offset 18)", p);
}
END_TEST

/* ---- CSV --------------------------------------------------------------------------- */
START_TEST(test_csv_quoting)
{
    const char *p = tmp_file("q.csv",
                             "id,text,label\r\n"
                             "1,\"hello, world\",pos\r\n"
                             "2,\"she said \"\"hi\"\"\",neg\r\n"
                             "3,\"multi\nline\r\ntext\",pos\n"
                             "4,,neg\n"
                             "5,\"\",pos\n"
                             "6,plain \"quote\" inside,neg\n"
                             "\"7\",\"\"\"\",\"a\"\r"
                             "8,x,\"\"");
    em_table *t = NULL;
    em_status st = em_table_read_csv(p, NULL, &t);
    ck_assert_msg(st == EM_OK, "%s", em_last_error());
    ck_assert_int_eq(em_table_rows(t), 8);
    ck_assert_int_eq(em_table_cols(t), 3);
    expect_cells(t, (const cell[]){{0, 1, "hello, world"}, {1, 1, "she said \"hi\""},
                                      {2, 1, "multi\nline\r\ntext"}, {3, 1, ""}, {4, 1, ""},
                                      {5, 1, "plain \"quote\" inside"}, {6, 0, "7"}, {6, 1, "\""}, {6, 2, "a"},
                                      {7, 2, ""}, {0}});
    static const int64_t lines[] = { 2, 3, 4, 7, 8, 9, 10, 11 };
    for (int r = 0; r < 8; r++) ck_assert_int_eq(em_table_line(t, r), lines[r]);
    em_table_free(t);

    /* a quoted empty field on its own line is a row, not a blank line */
    p = tmp_file("q2.csv", "x\n\"\"\n\nz\n");
    ck_assert_int_eq(em_table_read_csv(p, NULL, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 2);
    ck_assert_str_eq(em_table_get(t, 0, 0), "");
    ck_assert_str_eq(em_table_get(t, 1, 0), "z");
    em_table_free(t);

    /* semicolons, no header */
    p = tmp_file("q3.csv", "\"a;b\";c\n");
    ck_assert_int_eq(em_table_read_csv(p, &(em_table_opts){ .delimiter = ';', .no_header = true }, &t), EM_OK);
    ck_assert_int_eq(em_table_cols(t), 2);
    ck_assert_str_eq(em_table_get(t, 0, 0), "a;b");
    ck_assert_str_eq(em_table_col_name(t, 1), "1");
    em_table_free(t);
}
END_TEST

START_TEST(test_csv_errors)
{
    em_table *t = NULL;
    const char *p = tmp_file("c1.csv", "a,b\n1,\"abc\n2,3\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT,
                "%s:2:3: unterminated quoted field (the quote opened here)", p);
    p = tmp_file("c2.csv", "a,b\n\"x\"y,2\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT,
                "%s:2:4: unexpected 'y' after the closing quote of a field (expected the delimiter or the end of the line)", p);
    p = tmp_file("c3.csv", "a,b\n1,2\n1,2,3\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT, "%s:3:4: expected 2 fields, found 3", p);
    p = tmp_file("c4.csv", "a,b,c\n1,2\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT, "%s:2:4: expected 3 fields, found 2", p);
    /* physical lines count inside a multi-line quoted field */
    p = tmp_file("c5.csv", "a,b\n\"x\ny\",1\n1,\"2\r\n\",3\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT, "%s:5:2: expected 2 fields, found 3", p);
    p = tmp_file("c6.csv", "a\n\"\"\"\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT,
                "%s:2:1: unterminated quoted field (the quote opened here)", p);
    p = tmp_file("c7.csv", "a\n\"x\"\x01\n");
    expect_fail(em_table_read_csv(p, NULL, &t), EM_ERR_FORMAT,
                "%s:2:4: unexpected 0x01 after the closing quote of a field (expected the delimiter or the end of the line)", p);
    ck_assert_ptr_null(t);
}
END_TEST

/* ---- JSONL ------------------------------------------------------------------------- */
START_TEST(test_jsonl)
{
    const char *p = tmp_file("a.jsonl",
                             "{\"text\": \"hello\", \"label\": 1, \"score\": 0.5, \"ok\": true, \"extra\": [1, {}]}\n"
                             "   \n"
                             "{\"label\": 0, \"text\": \"caf\\u00e9 \\ud83d\\ude00\\t\\\"\", \"ok\": false, \"score\": 1e20}\r\n"
                             "{\"text\": \"dup\", \"text\": \"last\", \"label\": -3, \"score\": 1.0, \"ok\": true}\n"
                             "{\"text\": \"\", \"label\": 2.0, \"score\": 0.1, \"ok\": false}");
    static const char *const fields[] = { "text", "label", "score", "ok" };
    em_table *t = NULL;
    em_status st = em_table_read_jsonl(p, fields, 4, &t);
    ck_assert_msg(st == EM_OK, "%s", em_last_error());
    ck_assert_int_eq(em_table_rows(t), 4);
    ck_assert_int_eq(em_table_cols(t), 4);
    expect_cells(t, (const cell[]){{0, 0, "hello"}, {0, 1, "1"}, {0, 2, "0.5"}, {0, 3, "true"},
                                      {1, 0, "caf\xC3\xA9 \xF0\x9F\x98\x80\t\""}, {1, 2, "1e+20"}, {1, 3, "false"},
                                      {2, 0, "last"}, {2, 1, "-3"}, {2, 2, "1"}, {3, 0, ""}, {3, 1, "2"},
                                      {3, 2, "0.1"}, {0}});
    ck_assert_int_eq(em_table_line(t, 1), 3);
    ck_assert_int_eq(em_table_line(t, 3), 5);
    em_table_free(t);

    /* no field list: the first object's keys */
    p = tmp_file("b.jsonl", "{\"premise\": \"a\", \"label\": \"entailment\"}\n{\"label\": \"neutral\", \"premise\": \"b\", \"x\": null}\n");
    ck_assert_int_eq(em_table_read_jsonl(p, NULL, 0, &t), EM_OK);
    ck_assert_int_eq(em_table_cols(t), 2);
    ck_assert_str_eq(em_table_col_name(t, 0), "premise");
    ck_assert_str_eq(em_table_get(t, 1, 1), "neutral");
    em_table_free(t);
    /* objects of many keys take the sorted lookup: the same cells, the last of a
     * repeated key, in any order of keys */
    char wide[4096];
    int w = snprintf(wide, sizeof wide, "{");
    for (int k = 0; k < 40; k++) w += snprintf(wide + w, sizeof wide - (size_t)w, "%s\"k%d\": %d", k ? ", " : "", k, k);
    w += snprintf(wide + w, sizeof wide - (size_t)w, "}\n{");
    for (int k = 39; k >= 0; k--) w += snprintf(wide + w, sizeof wide - (size_t)w, "\"k%d\": %d, ", k, 100 + k);
    snprintf(wide + w, sizeof wide - (size_t)w, "\"k7\": \"again\"}\n");
    p = tmp_file("wide.jsonl", wide);
    ck_assert_msg(em_table_read_jsonl(p, NULL, 0, &t) == EM_OK, "%s", em_last_error());
    ck_assert_int_eq(em_table_cols(t), 40);
    expect_cells(t, (const cell[]){{0, 0, "0"}, {0, 39, "39"}, {1, 0, "100"}, {1, 7, "again"}, {1, 39, "139"}, {0}});
    em_table_free(t);
    p = tmp_file("c.jsonl", "\n\n");
    ck_assert_int_eq(em_table_read_jsonl(p, fields, 2, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 0);
    ck_assert_int_eq(em_table_cols(t), 2);
    em_table_free(t);
}
END_TEST

START_TEST(test_jsonl_errors)
{
    static const char *const fields[] = { "text", "label" };
    em_table *t = NULL;
    const char *p = tmp_file("e1.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\"}\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_NOT_FOUND, "%s:2: missing field \"label\"", p);
    p = tmp_file("e2.jsonl", "{\"text\": \"a\", \"label\": null}\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT,
                "%s:1: field \"label\" is null; expected a string, number or boolean", p);
    p = tmp_file("e3.jsonl", "\n{\"text\": {\"a\": 1}, \"label\": 1}\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT,
                "%s:2: field \"text\" is an object; expected a string, number or boolean", p);
    p = tmp_file("e4.jsonl", "{\"text\": \"a\", \"label\": 1}\n{\"text\": \"b\", \"label\": }\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT, "%s:2:24: invalid JSON (near \"}\")", p);
    p = tmp_file("e5.jsonl", "  [1, 2]\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT, "%s:1:3: expected a JSON object, found an array", p);
    /* the first object names the columns: a key twice would make two columns of one name */
    p = tmp_file("e5b.jsonl", "\n{\"a\": 1, \"b\": 2, \"a\": 3}\n{\"a\": 4, \"b\": 5}\n");
    expect_fail(em_table_read_jsonl(p, NULL, 0, &t), EM_ERR_FORMAT,
                "%s:2: the key \"a\" appears twice in the first object, which names the columns", p);
    p = tmp_file("e6.jsonl", "{\"text\": \"a\", \"label\": 1} {\"text\": \"b\"}\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT,
                "%s:1:27: unexpected text after the JSON value (one object per line)", p);
    p = tmp_file("e7.jsonl", "{\"text\": \"a\n\", \"label\": 1}\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT, "%s:1:11: invalid JSON (near \"a\")", p);
    p = tmp_file("e8.jsonl", "{\"text\": \"\\ud800\", \"label\": 1}\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT, "%s:1:11: invalid JSON (near \"\\ud800\", \"label\"\")", p);
    /* a NUL escape is refused, not cut short; an escaped backslash before u0000 is plain text */
    p = tmp_file("e9.jsonl", "{\"text\": \"ok\", \"label\": 1}\n{\"text\": \"a\\u0000b\", \"label\": 1}\n");
    expect_fail(em_table_read_jsonl(p, fields, 2, &t), EM_ERR_FORMAT,
                "%s:2:12: a string holds \\u0000 (a NUL character), which ember's text cells cannot hold", p);
    p = tmp_file("e10.jsonl", "{\"text\": \"a\\\\u0000b\", \"label\": 1}\n");
    ck_assert_int_eq(em_table_read_jsonl(p, fields, 2, &t), EM_OK);
    ck_assert_str_eq(em_table_get(t, 0, 0), "a\\u0000b");
    em_table_free(t);
    t = NULL;
    ck_assert_ptr_null(t);
}
END_TEST

/* ---- labels and datasets ------------------------------------------------------------ */
START_TEST(test_labels)
{
    em_tokenizer *tok = load_vocab(false);
    em_table *t = NULL;
    em_dataset *ds = NULL;
    const char *p = tmp_file("l.csv", "sentence,idx,label\ngood,0,pos\nbad,1,neg\nmeh,2,neutral\nok,3,pos\n");
    ck_assert_int_eq(em_table_read_csv(p, NULL, &t), EM_OK);
    static const char *const names[] = { "neg", "neutral", "pos", NULL };
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label",
                                              .label_names = names }, &ds), EM_OK);
    static const int64_t want[] = { 2, 0, 1, 2 };
    for (int r = 0; r < 4; r++) {
        em_sample s;
        em_dataset_get(ds, r, &s);
        ck_assert_int_eq(s.label, want[r]);
    }
    em_dataset_free(ds);
    static const char *const few[] = { "neg", "pos", NULL };
    ds = (em_dataset *)1;
    expect_fail(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label",
                                         .label_names = few }, &ds),
                EM_ERR_INVALID, "%s:4: label \"neutral\" is not one of the label names (\"neg\", \"pos\")", p);
    ck_assert_ptr_null(ds);
    expect_fail(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "label" }, &ds),
                EM_ERR_FORMAT, "%s:2: label \"pos\" is not an integer", p);
    expect_fail(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "text", .label = "label" }, &ds),
                EM_ERR_NOT_FOUND, "%s: no column \"text\" (the columns are: sentence, idx, label)", p);
    expect_fail(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .text_b = "s2" }, &ds),
                EM_ERR_NOT_FOUND, "%s: no column \"s2\" (the columns are: sentence, idx, label)", p);
    expect_fail(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .text_b = "idx",
                                         .max_length = 2 }, &ds),
                EM_ERR_INVALID, "em_tokenized_dataset_new: max_length 2 leaves no room for the 3 special tokens");
    /* integer labels: the idx column */
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "sentence", .label = "idx" }, &ds),
                     EM_OK);
    em_sample s;
    em_dataset_get(ds, 3, &s);
    ck_assert_int_eq(s.label, 3);
    em_dataset_free(ds);
    em_table_free(t);

    p = tmp_file("l2.tsv", "s\tl\na\t 7 \nb\t-1\nc\t+2\nd\t9223372036854775807\n");
    ck_assert_int_eq(em_table_read_tsv(p, NULL, &t), EM_OK);
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "s", .label = "l" }, &ds), EM_OK);
    static const int64_t want2[] = { 7, -1, 2, INT64_MAX };
    for (int r = 0; r < 4; r++) {
        em_dataset_get(ds, r, &s);
        ck_assert_int_eq(s.label, want2[r]);
    }
    em_dataset_free(ds);
    em_table_free(t);
    static const char *const bad[] = { "1.5", "", " ", "1 2", "9223372036854775808", "0x1", "one" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char content[128];
        snprintf(content, sizeof content, "s\tl\na\t1\nb\t%s\n", bad[i]);
        p = tmp_file("l3.tsv", content);
        ck_assert_int_eq(em_table_read_tsv(p, NULL, &t), EM_OK);
        expect_fail(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "s", .label = "l" }, &ds),
                    EM_ERR_FORMAT, "%s:3: label \"%s\" is not an integer", p, bad[i]);
        em_table_free(t);
    }
    em_tokenizer_free(tok);
}
END_TEST

/* Pairs (type ids, truncation), a JSONL source, and many rows on 1 vs 4 threads. */
START_TEST(test_pairs_and_threads)
{
    em_tokenizer *tok = load_vocab(true);
    static const char *const words[] = { "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "naïve",
                                         "café", "tokenization", "isn't", "hard,", "really!", "北京", "[SEP]" };
    size_t cap = 1 << 21, n = 0;
    char *buf = malloc(cap);
    n += (size_t)sprintf(buf, "{\"q1\": \"\", \"q2\": \"fox\", \"y\": 0}\n");
    uint64_t rng = 42;
    for (int r = 0; r < 10000; r++) {
        for (int f = 0; f < 2; f++) {
            n += (size_t)sprintf(buf + n, f ? ", \"q2\": \"" : "{\"q1\": \"");
            int k = (int)(tu_next(&rng) % 12);
            for (int w = 0; w < k; w++)
                n += (size_t)sprintf(buf + n, "%s%s", w ? " " : "", words[tu_next(&rng) % 16]);
            n += (size_t)sprintf(buf + n, "\"");
        }
        n += (size_t)sprintf(buf + n, ", \"y\": %d}\n", (int)(tu_next(&rng) % 3));
    }
    ck_assert_uint_lt(n, cap);
    const char *p = tmp_file_n("pairs.jsonl", buf, n);
    free(buf);
    em_table *t = NULL;
    static const char *const fields[] = { "q1", "q2", "y" };
    ck_assert_int_eq(em_table_read_jsonl(p, fields, 3, &t), EM_OK);
    ck_assert_int_eq(em_table_rows(t), 10001);
    em_dataset *d1 = NULL, *d4 = NULL;
    em_tokenized_opts o = { .text_a = "q1", .text_b = "q2", .label = "y", .max_length = 16, .num_threads = 1 };
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &o, &d1), EM_OK);
    o.num_threads = 4;
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &o, &d4), EM_OK);
    check_same(d1, d4);
    check_against_encode(d4, t, tok, 0, 1, 16);
    em_sample s;
    em_dataset_get(d4, 0, &s);
    ck_assert_int_eq(s.len, 4);   /* [CLS] [SEP] fox [SEP] */
    ck_assert_int_eq(s.type_ids[1], 0);
    ck_assert_int_eq(s.type_ids[2], 1);
    em_dataset_free(d1);
    em_dataset_free(d4);
    em_table_free(t);
    em_tokenizer_free(tok);
}
END_TEST

/* Two empty texts: [CLS] [SEP] [SEP], from the dataset and from encode_pair alike. */
START_TEST(test_empty_pair)
{
    em_tokenizer *tok = load_vocab(false);
    const char *p = tmp_file("ep.tsv", "a\tb\n\t\n");
    em_table *t = NULL;
    ck_assert_int_eq(em_table_read_tsv(p, NULL, &t), EM_OK);
    em_dataset *ds = NULL;
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "a", .text_b = "b" }, &ds), EM_OK);
    em_sample s;
    em_dataset_get(ds, 0, &s);
    ck_assert_int_eq(s.len, 3);
    ck_assert_int_eq(s.type_ids[2], 1);
    check_against_encode(ds, t, tok, 0, 1, 0);
    em_dataset_free(ds);
    em_table_free(t);
    em_tokenizer_free(tok);
}
END_TEST

/* ---- fail the Nth allocation --------------------------------------------------------- */
START_TEST(test_fail_nth)
{
    em_tokenizer *tok = load_vocab(false);
    const char *csv = tmp_file("f.csv", "text,label\n\"a, \"\"b\"\"\",1\nc d e,0\n\"multi\nline\",1\n");
    const char *jsonl = tmp_file("f.jsonl", "{\"text\": \"x\", \"label\": false}\n{\"text\": \"y z\", \"label\": true}\n");
    static const char *const fields[] = { "text", "label" };
    static const char *const names[] = { "false", "true", NULL };
    int64_t n;
    int failures = 0;
    for (n = 1; n < 5000; n++) {
        em_alloc_fail_after(n, false);
        em_table *a = NULL, *b = NULL;
        em_dataset *da = NULL, *db = NULL;
        em_status st = em_table_read_csv(csv, NULL, &a);
        if (!st) st = em_table_read_jsonl(jsonl, fields, 2, &b);
        if (!st) st = em_tokenized_dataset_new(a, tok, &(em_tokenized_opts){ .text_a = "text", .label = "label",
                                               .num_threads = 2 }, &da);
        if (!st) st = em_tokenized_dataset_new(b, tok, &(em_tokenized_opts){ .text_a = "text", .label = "label",
                                               .label_names = names }, &db);
        em_alloc_fail_after(0, false);
        ck_assert_msg(st == EM_OK || st == EM_ERR_OOM, "n=%lld: %s: %s", (long long)n, em_status_name(st), em_last_error());
        if (st == EM_OK) {
            em_sample s;
            ck_assert_int_eq(em_dataset_get(db, 1, &s), EM_OK);
            ck_assert_int_eq(s.label, 1);
            ck_assert_int_eq(s.len, 4);
        } else {
            failures++;
        }
        em_dataset_free(da);
        em_dataset_free(db);
        em_table_free(a);
        em_table_free(b);
        if (st == EM_OK) break;
    }
    ck_assert_int_lt(n, 5000);
    ck_assert_int_eq(failures, n - 1);
    ck_assert_int_gt(failures, 10);
    em_tokenizer_free(tok);
}
END_TEST

/* ---- misuse -------------------------------------------------------------------------- */
START_TEST(test_misuse_get)
{
    em_table *t = NULL;
    const char *p = tmp_file("m.tsv", "a\tb\n1\t2\n");
    ck_assert_int_eq(em_table_read_tsv(p, NULL, &t), EM_OK);
    char expect[160];   /* data.h's functions name the caller's file:line too */
    snprintf(expect, sizeof expect, "em_table_get: cell (1, 0) out of range for a table of 1 rows and 2 columns "
             "(test_readers.c:%d)", __LINE__ + 2);
    tu_expect_misuse(expect);
    em_table_get(t, 1, 0);
}
END_TEST

START_TEST(test_misuse_dataset_index)
{
    em_tokenizer *tok = load_vocab(false);
    em_table *t = NULL;
    const char *p = tmp_file("m2.tsv", "a\tb\n1\t2\n");
    ck_assert_int_eq(em_table_read_tsv(p, NULL, &t), EM_OK);
    em_dataset *ds = NULL;
    ck_assert_int_eq(em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = "a" }, &ds), EM_OK);
    em_sample s;
    tu_expect_misuse("em_dataset_get: index 1 out of range for a dataset of 1 samples");
    em_dataset_get(ds, 1, &s);
}
END_TEST

START_TEST(test_misuse_csv_delimiter)
{
    em_table *t = NULL;
    tu_expect_misuse("em_table_read_csv: the delimiter cannot be a quote or a line break");
    em_table_read_csv("x.csv", &(em_table_opts){ .delimiter = '"' }, &t);
}
END_TEST

/* ---- the fuzz corpus (tools/fuzz/): each input must fail cleanly or succeed ----------- */
/* The same checks as tools/fuzz/fuzz_table.c. */
static void walk_table(em_table *t, const em_tokenizer *tok)
{
    int cols = em_table_cols(t);
    int64_t last = 0;
    for (int64_t r = 0; r < em_table_rows(t); r++) {
        ck_assert_int_gt(em_table_line(t, r), last);
        last = em_table_line(t, r);
        for (int c = 0; c < cols; c++) ck_assert_ptr_nonnull(em_table_get(t, r, c));
    }
    for (int c = 0; c < cols; c++) ck_assert_int_le(em_table_col(t, em_table_col_name(t, c)), c);
    if (cols >= 2) {
        em_dataset *ds = NULL;
        em_tokenized_opts o = { .text_a = em_table_col_name(t, 0), .text_b = cols >= 3 ? em_table_col_name(t, 1) : NULL,
                                .label = em_table_col_name(t, cols - 1), .max_length = 32, .num_threads = 1 };
        em_status st = em_tokenized_dataset_new(t, tok, &o, &ds);
        ck_assert_msg(st == EM_OK || st == EM_ERR_FORMAT || st == EM_ERR_INVALID, "%s", em_last_error());
        if (st == EM_OK) {
            ck_assert_int_eq(em_dataset_len(ds), em_table_rows(t));
            for (int64_t i = 0; i < em_dataset_len(ds); i++) {
                em_sample s;
                ck_assert_int_eq(em_dataset_get(ds, i, &s), EM_OK);
                ck_assert(s.len >= 2 && s.len <= 32);
            }
        } else {
            ck_assert_ptr_null(ds);
        }
        em_dataset_free(ds);
    }
    em_table_free(t);
}

static void expect_clean(em_status st, em_table **tp, const em_tokenizer *tok)
{
    em_table *t = *tp;
    *tp = NULL;
    ck_assert_msg(st == EM_OK || st == EM_ERR_FORMAT || st == EM_ERR_NOT_FOUND, "%s: %s", em_status_name(st),
                  em_last_error());
    if (st) ck_assert_ptr_null(t);
    else walk_table(t, tok);
}

/* The same calls as tools/fuzz/fuzz_tokenizer.c. */
static void tokenizer_input(const em_tokenizer *tok, const char *s)
{
    em_encoding e;
    em_status st = em_tokenizer_encode(tok, s, NULL, &e);
    ck_assert(st == EM_OK || st == EM_ERR_FORMAT);
    if (!st) {
        char *text = NULL;
        ck_assert_int_eq(em_tokenizer_decode(tok, e.ids, e.len, NULL, &text), EM_OK);
        free(text);
        em_encoding_free(&e);
    }
    const char *tab = strchr(s, '\t');
    if (tab) {
        char *a = strndup(s, (size_t)(tab - s));
        st = em_tokenizer_encode_pair(tok, a, tab + 1, &(em_encode_opts){ .max_length = 16 }, &e);
        ck_assert(st == EM_OK || st == EM_ERR_FORMAT);
        if (!st) em_encoding_free(&e);
        free(a);
    }
}

START_TEST(test_fuzz_regress)
{
    static const char *const kinds[] = { "tsv", "csv", "jsonl", "tokenizer" };
    em_tokenizer *toks[2] = { load_vocab(false), load_vocab(true) };
    static const char *const fields[] = { "text", "label" };
    int files = 0;
    for (int k = 0; k < 4; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s", tu_fixture_path("fuzz-regress"));
        snprintf(dir + strlen(dir), sizeof dir - strlen(dir), "/%s", kinds[k]);
        DIR *d = opendir(dir);
        ck_assert_msg(d, "no corpus at %s", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            em_table *t = NULL;
            files++;
            if (k < 2) {
                em_status (*rd)(const char *, const em_table_opts *, em_table **) = k ? em_table_read_csv : em_table_read_tsv;
                expect_clean(rd(path, NULL, &t), &t, toks[0]);
                expect_clean(rd(path, &(em_table_opts){ .no_header = true }, &t), &t, toks[0]);
            } else if (k == 2) {
                expect_clean(em_table_read_jsonl(path, NULL, 0, &t), &t, toks[0]);
                expect_clean(em_table_read_jsonl(path, fields, 2, &t), &t, toks[0]);
            } else {
                size_t n;
                char *s = tu_read_file(path, &n);
                for (int c = 0; c < 2; c++) tokenizer_input(toks[c], s);
                free(s);
            }
        }
        closedir(d);
    }
    ck_assert_int_gt(files, 20);
    em_tokenizer_free(toks[0]);
    em_tokenizer_free(toks[1]);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("readers");
    tu_add_tests(tu_case(s, "sst2", 120), test_sst2_tables, test_sst2_dataset, test_threads_identical);
    tu_add_tests(tu_case(s, "formats", 0), test_tsv, test_tsv_errors, test_utf8_errors, test_csv_quoting,
                 test_csv_errors, test_jsonl, test_jsonl_errors);
    tu_add_tests(tu_case(s, "dataset", 120), test_labels, test_pairs_and_threads, test_empty_pair,
                 test_fail_nth);
    tu_add_tests(tu_case(s, "fuzz", 120), test_fuzz_regress);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), test_misuse_get, test_misuse_dataset_index,
                        test_misuse_csv_delimiter);
    return s;
}

int main(void) { return tu_run_suite_scratch(make_suite(), "readers"); }
