/* data/tokenizer: the WordPiece tokenizer against Hugging Face.
 *   - golden: the two files of HF tokenizations in ../shared/data/tokenizer-golden
 *     (10,570 SQuAD questions, 2,310 SST-2 sentences), id for id;
 *   - tables of tricky cases (specials, accents, final sigma, CJK, controls,
 *     never_split, long words, pair truncation, decode) that HF's Python
 *     BertTokenizer tokenized under several options: tests/fixtures/tokenizer-hf,
 *     written by tools/make-tokenizer-cases.py;
 *   - errors: invalid UTF-8 with its offset, bad vocabulary files naming
 *     file:line, impossible max_length, failed allocations;
 *   - batches on threads equal single encodes; the `ember tokenize` command. */
#include "tok_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static em_tokenizer *load_bert(const em_tokenizer_opts *o)
{
    em_tokenizer *t = NULL;
    em_status st = em_tokenizer_load(tu_shared_path("bert-base-uncased/vocab.txt"), o, &t);
    ck_assert_msg(st == EM_OK, "load: %s", em_last_error());
    return t;
}

/* ---- golden files ------------------------------------------------------------ */
static void check_golden(const char *rel, int ncols, int text_col, int ids_col, int expect_rows)
{
    em_tokenizer *t = load_bert(NULL);
    tu_check_golden(t, rel, ncols, text_col, ids_col, expect_rows, "from Hugging Face (first ones above)");
    em_tokenizer_free(t);
}

START_TEST(golden_squad)
{
    check_golden("tokenizer-golden/squad_questions_bert_base_uncased.tsv", 4, 1, 3, 10570);
}
END_TEST

START_TEST(golden_sst2)
{
    check_golden("tokenizer-golden/sst2_bert_base_uncased.tsv", 5, 2, 4, 2310);
}
END_TEST

/* ---- tables of HF outputs (tests/fixtures/tokenizer-hf) -------------------------- */
/* Every case of tokenizer-hf/<name>.tsv through the vocabulary with options o. */
static void check_cases(const em_tokenizer_opts *o, const char *name)
{
    em_tokenizer *t = load_bert(o);
    char rel[128];
    snprintf(rel, sizeof rel, "tokenizer-hf/%s.tsv", name);
    int n, bad = tu_compare_cases(t, tu_fixture_path(rel), &n);
    em_tokenizer_free(t);
    ck_assert_msg(n > 0, "%s: no cases", rel);
    ck_assert_msg(bad == 0, "%s: %d of %d cases differ from HF", name, bad, n);
}

TU_TEST(hf_cases_uncased, check_cases(NULL, "uncased"))
TU_TEST(hf_cases_cased, check_cases(&((em_tokenizer_opts){ .do_lower_case = EM_TOK_OFF }), "cased"))
TU_TEST(hf_cases_keep_accents, check_cases(&((em_tokenizer_opts){ .strip_accents = EM_TOK_OFF }), "lower_keep_accents"))
TU_TEST(hf_cases_cased_strip, check_cases(&((em_tokenizer_opts){ .do_lower_case = EM_TOK_OFF, .strip_accents = EM_TOK_ON }), "cased_strip"))
TU_TEST(hf_cases_no_chinese, check_cases(&((em_tokenizer_opts){ .tokenize_chinese_chars = EM_TOK_OFF }), "no_chinese"))
static const char *const never_split_words[] = { "hello!", "UPPER", "[x]", "caf\303\251", "notinvocab", NULL };
TU_TEST(hf_cases_never_split, check_cases(&((em_tokenizer_opts){ .never_split = never_split_words }), "never_split"))
TU_TEST(hf_cases_max_chars, check_cases(&((em_tokenizer_opts){ .max_input_chars_per_word = 5 }), "maxchars5"))

START_TEST(hf_pairs)
{
    em_tokenizer *t = load_bert(NULL);
    tu_tsv c = tu_tsv_read(tu_fixture_path("tokenizer-hf/pairs.tsv"), 5);   /* text, pair, max_length, ids, type_ids */
    ck_assert_int_gt(c.rows, 0);
    for (int i = 0; i < c.rows; i++) {
        char *a = tu_unescape(tu_tsv_at(&c, i, 0)), *b = tu_unescape(tu_tsv_at(&c, i, 1));
        int max_length = atoi(tu_tsv_at(&c, i, 2));
        int32_t *ids, *types;
        int nw = tu_parse_ints(tu_tsv_at(&c, i, 3), &ids);
        ck_assert_msg(tu_parse_ints(tu_tsv_at(&c, i, 4), &types) == nw, "pair %d: ids and type_ids differ in length", i);
        em_encoding e;
        em_status st = em_tokenizer_encode_pair(t, a, b, &(em_encode_opts){ .max_length = max_length }, &e);
        ck_assert_msg(st == EM_OK, "%s", em_last_error());
        ck_assert_msg(e.len == nw && memcmp(e.ids, ids, (size_t)nw * 4) == 0,
                      "pair %d (\"%s\", \"%s\", max_length %d): got %s", i, a, b, max_length, tu_ids_str(e.ids, e.len));
        ck_assert_msg(memcmp(e.type_ids, types, (size_t)nw * 4) == 0, "pair %d: type ids", i);
        em_encoding_free(&e);
        free(a), free(b), free(ids), free(types);
    }
    tu_tsv_free(&c);
    em_tokenizer_free(t);
}
END_TEST

START_TEST(hf_decode)
{
    em_tokenizer *t = load_bert(NULL);
    tu_tsv c = tu_tsv_read(tu_fixture_path("tokenizer-hf/decode.tsv"), 4);   /* ids, skip, clean, text */
    ck_assert_int_gt(c.rows, 0);
    for (int i = 0; i < c.rows; i++) {
        int32_t *ids;
        int n = tu_parse_ints(tu_tsv_at(&c, i, 0), &ids);
        char *want = tu_unescape(tu_tsv_at(&c, i, 3)), *s = NULL;
        em_decode_opts o = { .skip_special_tokens = atoi(tu_tsv_at(&c, i, 1)),
                             .clean_up_tokenization_spaces = atoi(tu_tsv_at(&c, i, 2)) ? EM_TOK_DEFAULT : EM_TOK_OFF };
        ck_assert(em_tokenizer_decode(t, ids, n, &o, &s) == EM_OK);
        ck_assert_msg(strcmp(s, want) == 0, "decode case %d: got \"%s\", want \"%s\"", i, s, want);
        free(s), free(want), free(ids);
    }
    tu_tsv_free(&c);
    em_tokenizer_free(t);
}
END_TEST

/* ---- units --------------------------------------------------------------------- */
static int32_t id_of(const em_tokenizer *t, const char *tok)
{
    int32_t id = em_tokenizer_token_to_id(t, tok);
    ck_assert_msg(id >= 0, "\"%s\" not in the vocabulary", tok);
    return id;
}

/* Encodes text without special tokens and compares with the given tokens. */
static void expect_tokens(const em_tokenizer *t, const char *text, const char *const *toks)
{
    em_encoding e;
    ck_assert_msg(em_tokenizer_encode(t, text, &(em_encode_opts){ .add_special_tokens = EM_TOK_OFF }, &e) == EM_OK,
                  "%s", em_last_error());
    int n = 0;
    while (toks[n]) n++;
    char got[1024] = "";
    for (int i = 0; i < e.len; i++) {
        const char *s = em_tokenizer_id_to_token(t, e.ids[i]);
        strncat(got, i ? " " : "", sizeof got - strlen(got) - 1);
        strncat(got, s ? s : "?", sizeof got - strlen(got) - 1);
    }
    ck_assert_msg(e.len == n, "\"%s\": %d tokens (%s), want %d", text, e.len, got, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(e.ids[i] == id_of(t, toks[i]), "\"%s\": token %d is %s, want %s", text, i,
                      em_tokenizer_id_to_token(t, e.ids[i]), toks[i]);
    em_encoding_free(&e);
}
#define TOKS(...) ((const char *const[]){ __VA_ARGS__, NULL })

START_TEST(vocab_lookup)
{
    em_tokenizer *t = load_bert(NULL);
    ck_assert_int_eq(em_tokenizer_vocab_size(t), 30522);
    static const struct { const char *token; int32_t id; } ids[] = {
        {"the", 1996}, {"which", 2029}, {"!", 999}, {"[CLS]", 101}, {"The", -1}, {"", -1}};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        ck_assert_msg(em_tokenizer_token_to_id(t, ids[i].token) == ids[i].id, "\"%s\": id %d, want %d", ids[i].token,
                      em_tokenizer_token_to_id(t, ids[i].token), ids[i].id);
    ck_assert_str_eq(em_tokenizer_id_to_token(t, 30521), "##\357\275\236");
    ck_assert_str_eq(em_tokenizer_id_to_token(t, 0), "[PAD]");
    ck_assert_ptr_null(em_tokenizer_id_to_token(t, 30522));
    ck_assert_ptr_null(em_tokenizer_id_to_token(t, -1));
    em_special_ids s = em_tokenizer_special_ids(t);
    const int32_t got[] = {s.pad, s.unk, s.cls, s.sep, s.mask}, want[] = {0, 100, 101, 102, 103};   /* as named */
    for (int i = 0; i < 5; i++) ck_assert_int_eq(got[i], want[i]);
    em_tokenizer_free(t);
}
END_TEST

START_TEST(units)
{
    em_tokenizer *t = load_bert(NULL);
    /* specials are cut out of the raw text, case-sensitively, and never split */
    expect_tokens(t, "x[SEP]y [MASK]. [cls]", TOKS("x", "[SEP]", "y", "[MASK]", ".", "[", "cl", "##s", "]"));
    /* accents, punctuation, WordPiece continuations */
    expect_tokens(t, "Clich\303\251s R\303\251sum\303\251!", TOKS("cl", "##iche", "##s", "resume", "!"));
    expect_tokens(t, "revenge-of-the-nerds ``", TOKS("revenge", "-", "of", "-", "the", "-", "ne", "##rds", "`", "`"));
    /* CJK ideographs become words of their own */
    expect_tokens(t, "\344\270\255\346\226\207x", TOKS("\344\270\255", "\346\226\207", "x"));
    /* a word longer than 100 characters is [UNK]; 100 is not */
    char w[128];
    memset(w, 'x', 101);
    w[101] = 0;
    expect_tokens(t, w, TOKS("[UNK]"));
    w[100] = 0;
    em_encoding e;
    ck_assert(em_tokenizer_encode(t, w, NULL, &e) == EM_OK);
    ck_assert_int_gt(e.len, 3);
    for (int i = 0; i < e.len; i++) ck_assert_int_ne(e.ids[i], 100);
    em_encoding_free(&e);
    /* a word without a WordPiece split is one [UNK], not a partial split */
    expect_tokens(t, "ab\360\237\244\226", TOKS("[UNK]"));
    em_tokenizer_free(t);
}
END_TEST

START_TEST(pair_truncation_and_padding)
{
    em_tokenizer *t = load_bert(NULL);
    em_encoding e;
    /* 6 + 2 ids, max 8: 3 removed from the longer first */
    ck_assert(em_tokenizer_encode_pair(t, "a b c d e f", "g h", &(em_encode_opts){ .max_length = 8 }, &e) == EM_OK);
    ck_assert_int_eq(e.len, 8);
    ck_assert_int_eq(e.n_truncated, 3);
    ck_assert_str_eq(tu_ids_str(e.ids, e.len), "101 1037 1038 1039 102 1043 1044 102");
    em_encoding_free(&e);
    /* padding: [PAD] ids, mask 0, type 0 */
    ck_assert(em_tokenizer_encode_pair(t, "a", "b", &(em_encode_opts){ .max_length = 8, .pad_to_max_length = true }, &e) == EM_OK);
    ck_assert_int_eq(e.len, 8);
    ck_assert_str_eq(tu_ids_str(e.ids, e.len), "101 1037 102 1038 102 0 0 0");
    ck_assert_str_eq(tu_ids_str(e.type_ids, e.len), "0 0 0 1 1 0 0 0");
    for (int i = 0; i < 8; i++) ck_assert_int_eq(e.attention_mask[i], i < 5);
    em_encoding_free(&e);
    /* single text truncation keeps [CLS] ... [SEP] */
    ck_assert(em_tokenizer_encode(t, "a b c d e f", &(em_encode_opts){ .max_length = 4 }, &e) == EM_OK);
    ck_assert_str_eq(tu_ids_str(e.ids, e.len), "101 1037 1038 102");
    ck_assert_int_eq(e.n_truncated, 4);
    em_encoding_free(&e);
    /* without special tokens */
    ck_assert(em_tokenizer_encode_pair(t, "a b c", "d", &(em_encode_opts){ .add_special_tokens = EM_TOK_OFF, .max_length = 3 }, &e) == EM_OK);
    ck_assert_str_eq(tu_ids_str(e.ids, e.len), "1037 1038 1040");
    ck_assert_str_eq(tu_ids_str(e.type_ids, e.len), "0 0 1");
    em_encoding_free(&e);
    /* no room for the special tokens */
    e.len = 7;
    ck_assert_int_eq(em_tokenizer_encode_pair(t, "a", "b", &(em_encode_opts){ .max_length = 2 }, &e), EM_ERR_INVALID);
    ck_assert_ptr_null(e.ids);
    ck_assert_int_eq(e.len, 0);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "max_length 2"));
    em_tokenizer_free(t);
}
END_TEST

START_TEST(decode_roundtrip)
{
    em_tokenizer *t = load_bert(NULL);
    em_encoding e;
    ck_assert(em_tokenizer_encode(t, "The Caf\303\251 isn't open, is it?", NULL, &e) == EM_OK);
    char *s;
    ck_assert(em_tokenizer_decode(t, e.ids, e.len, &(em_decode_opts){ .skip_special_tokens = true }, &s) == EM_OK);
    ck_assert_str_eq(s, "the cafe isn't open, is it?");
    free(s);
    em_encoding_free(&e);
    ck_assert(em_tokenizer_decode(t, NULL, 0, NULL, &s) == EM_OK);
    ck_assert_str_eq(s, "");
    free(s);
    em_tokenizer_free(t);
}
END_TEST

START_TEST(invalid_utf8)
{
    em_tokenizer *t = load_bert(NULL);
    static const struct { const char *text; int offset; } bad[] = {
        { "ab\303(", 2 },                 /* bad continuation         */
        { "abc\342\202", 3 },             /* truncated at the end     */
        { "\355\240\200x", 0 },           /* surrogate U+D800          */
        { "okay \300\257", 5 },           /* overlong '/'             */
        { "\340\200\257", 0 },            /* overlong, 3 bytes        */
        { "x\364\220\200\200", 1 },       /* above U+10FFFF           */
        { "\377", 0 },
        { "12345678\200", 8 },            /* lone continuation byte   */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        em_encoding e = { .len = 5 };
        ck_assert_int_eq(em_tokenizer_encode(t, bad[i].text, NULL, &e), EM_ERR_FORMAT);
        ck_assert_ptr_null(e.ids);
        char want[64];
        snprintf(want, sizeof want, "at byte offset %d", bad[i].offset);
        ck_assert_msg(strstr(em_last_error(), want), "case %zu: \"%s\" lacks \"%s\"", i, em_last_error(), want);
    }
    em_encoding e;
    ck_assert_int_eq(em_tokenizer_encode_pair(t, "fine", "not \377", NULL, &e), EM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "second text at byte offset 4"));
    /* valid edge cases: U+10FFFF, U+FFFF, 4-byte CJK extension B */
    ck_assert(em_tokenizer_encode(t, "\364\217\277\277 \357\277\277 \360\240\200\200", NULL, &e) == EM_OK);
    em_encoding_free(&e);
    em_tokenizer_free(t);
}
END_TEST

/* ---- vocabulary files ------------------------------------------------------------ */
/* Writes scratch/name (the scratch directory is made by main, before the forks). */
static const char *write_vocab(const char *name, const char *content, size_t n)
{
    const char *path = tu_scratch_path(name);
    tu_write_file(path, content, n);
    return path;
}
#define VOCAB(name, lit) write_vocab(name, lit, sizeof lit - 1)

static void expect_load_error(const char *path, em_status want, const char *msg)
{
    em_tokenizer *t = (em_tokenizer *)1;
    ck_assert_int_eq(em_tokenizer_load(path, NULL, &t), want);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(em_last_error(), msg), "\"%s\" lacks \"%s\"", em_last_error(), msg);
    unlink(path);
}

START_TEST(vocab_errors)
{
    const char *p = VOCAB("dup.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\nhello\n");
    char want[600];
    snprintf(want, sizeof want, "%s:7: duplicate token \"hello\" (first on line 5)", p);
    expect_load_error(p, EM_ERR_FORMAT, want);
    p = VOCAB("utf8.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nok\nbad\303x\n");
    snprintf(want, sizeof want, "%s:6: invalid UTF-8", p);
    expect_load_error(p, EM_ERR_FORMAT, want);
    p = VOCAB("nul.txt", "[PAD]\n[UNK]\n[CLS]\na\0b\n[SEP]\n");
    snprintf(want, sizeof want, "%s:4: NUL byte", p);
    expect_load_error(p, EM_ERR_FORMAT, want);
    p = VOCAB("nounk.txt", "[PAD]\n[CLS]\n[SEP]\nhello\n");
    expect_load_error(p, EM_ERR_FORMAT, "has no [UNK] token");
    expect_load_error("/nonexistent/ember/vocab.txt", EM_ERR_NOT_FOUND, "/nonexistent/ember/vocab.txt");
}
END_TEST

/* CRLF lines, a last line without newline, empty lines that keep their id,
 * custom special tokens, and a vocabulary without [PAD]: padding fails. */
START_TEST(vocab_small)
{
    const char *p = VOCAB("small.txt", "<unk>\r\n<s>\r\n</s>\r\n\r\nhello\rHello\r\n##llo\nHe\n\nworld");
    em_tokenizer *t = NULL;
    em_tokenizer_opts o = { .do_lower_case = EM_TOK_OFF, .unk_token = "<unk>", .cls_token = "<s>", .sep_token = "</s>" };
    ck_assert_msg(em_tokenizer_load(p, &o, &t) == EM_OK, "%s", em_last_error());
    ck_assert_int_eq(em_tokenizer_vocab_size(t), 10);
    ck_assert_int_eq(em_tokenizer_token_to_id(t, "hello"), 4);
    ck_assert_int_eq(em_tokenizer_token_to_id(t, "Hello"), 5);
    ck_assert_int_eq(em_tokenizer_token_to_id(t, "##llo"), 6);
    ck_assert_int_eq(em_tokenizer_token_to_id(t, "world"), 9);
    ck_assert_str_eq(em_tokenizer_id_to_token(t, 3), "");
    em_special_ids s = em_tokenizer_special_ids(t);
    ck_assert_int_eq(s.pad, -1);
    ck_assert_int_eq(s.mask, -1);
    em_encoding e;
    ck_assert(em_tokenizer_encode(t, "Hello HeLLo hello world<s>x", NULL, &e) == EM_OK);
    ck_assert_str_eq(tu_ids_str(e.ids, e.len), "1 5 0 4 9 1 0 2");
    em_encoding_free(&e);
    ck_assert(em_tokenizer_encode(t, "Hello", &(em_encode_opts){ .max_length = 2 }, &e) == EM_OK);
    ck_assert_str_eq(tu_ids_str(e.ids, e.len), "1 2");
    em_encoding_free(&e);
    ck_assert_int_eq(em_tokenizer_encode(t, "Hello", &(em_encode_opts){ .max_length = 5, .pad_to_max_length = true }, &e),
                     EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "[PAD]"));
    char *text;
    ck_assert(em_tokenizer_decode(t, (int32_t[]){ 1, 7, 6, 3, 0, 2 }, 6, NULL, &text) == EM_OK);
    ck_assert_str_eq(text, "<s> Hello  <unk> </s>");
    free(text);
    em_tokenizer_free(t);
    unlink(p);
}
END_TEST

/* ---- batches and threads ---------------------------------------------------------- */
static char **read_sst2(int *n)
{
    tu_tsv d = tu_tsv_read(tu_shared_path("sst2/dev.tsv"), 2);   /* sentence, label */
    char **texts = malloc(sizeof *texts * (size_t)(d.rows ? d.rows : 1));
    for (int k = 0; k < d.rows; k++) texts[k] = strdup(tu_tsv_at(&d, k, 0));
    *n = d.rows;
    tu_tsv_free(&d);
    return texts;
}

START_TEST(batch_matches_single)
{
    em_tokenizer *t = load_bert(NULL);
    int n;
    char **texts = read_sst2(&n);
    ck_assert_int_eq(n, 872);
    const char **pairs = malloc((size_t)n * sizeof *pairs);
    for (int i = 0; i < n; i++) pairs[i] = texts[n - 1 - i];
    em_encoding *b1 = calloc((size_t)n, sizeof *b1), *b3 = calloc((size_t)n, sizeof *b3);
    em_encode_opts o = { .max_length = 48, .num_threads = 3 };
    ck_assert(em_tokenizer_encode_batch(t, n, (const char *const *)texts, pairs, &o, b3) == EM_OK);
    o.num_threads = 1;
    ck_assert(em_tokenizer_encode_batch(t, n, (const char *const *)texts, pairs, &o, b1) == EM_OK);
    for (int i = 0; i < n; i++) {
        em_encoding e;
        ck_assert(em_tokenizer_encode_pair(t, texts[i], pairs[i], &o, &e) == EM_OK);
        ck_assert_int_eq(e.len, b3[i].len);
        ck_assert_int_eq(e.len, b1[i].len);
        ck_assert(memcmp(e.ids, b3[i].ids, (size_t)e.len * 4) == 0);
        ck_assert(memcmp(e.type_ids, b3[i].type_ids, (size_t)e.len * 4) == 0);
        ck_assert(memcmp(e.ids, b1[i].ids, (size_t)e.len * 4) == 0);
        em_encoding_free(&e);
        em_encoding_free(&b1[i]);
        em_encoding_free(&b3[i]);
    }
    /* a bad text fails the whole batch, names the lowest bad index, frees the rest */
    free(texts[700]);
    texts[700] = strdup("bad \377 byte");
    free(texts[300]);
    texts[300] = strdup("also \300 bad");
    o.num_threads = 4;
    ck_assert_int_eq(em_tokenizer_encode_batch(t, n, (const char *const *)texts, NULL, &o, b3), EM_ERR_FORMAT);
    ck_assert_msg(strncmp(em_last_error(), "text 300: ", 10) == 0, "%s", em_last_error());
    for (int i = 0; i < n; i++) ck_assert_ptr_null(b3[i].ids);
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts);
    free(pairs);
    free(b1);
    free(b3);
    em_tokenizer_free(t);
}
END_TEST

/* ---- allocation failures ------------------------------------------------------------ */
START_TEST(alloc_failures)
{
    const char *p = VOCAB("oom.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\nw\n##o\n##r\n##ld\n");
    int failures = 0;
    for (int64_t k = 1;; k++) {
        em_tokenizer *t = NULL;
        em_alloc_fail_after(k, false);
        em_status st = em_tokenizer_load(p, NULL, &t);
        em_encoding e = { 0 };
        char *s = NULL;
        if (st == EM_OK) st = em_tokenizer_encode_pair(t, "Hello worlds \303\251t\303\251 hellos", "w", NULL, &e);
        if (st == EM_OK) st = em_tokenizer_decode(t, e.ids, e.len, NULL, &s);
        em_alloc_fail_after(0, false);
        free(s);
        em_encoding_free(&e);
        em_tokenizer_free(t);
        if (st == EM_OK) break;
        ck_assert_int_eq(st, EM_ERR_OOM);
        failures++;
        ck_assert_int_lt(k, 1000);
    }
    ck_assert_int_gt(failures, 3);
    unlink(p);
}
END_TEST

/* ---- misuse: caller bugs go to the handler ------------------------------------------- */
START_TEST(misuse_null_tokenizer)
{
    tu_expect_misuse("em_tokenizer_encode");
    em_encoding e;
    em_tokenizer_encode(NULL, "x", NULL, &e);
}
END_TEST

START_TEST(misuse_negative_max_length)
{
    em_tokenizer *t = load_bert(NULL);
    tu_expect_misuse("max_length -1");
    em_encoding e;
    em_tokenizer_encode(t, "x", &(em_encode_opts){ .max_length = -1 }, &e);
}
END_TEST

START_TEST(misuse_pad_without_max_length)
{
    em_tokenizer *t = load_bert(NULL);
    tu_expect_misuse("pad_to_max_length needs max_length");
    em_encoding e;
    em_tokenizer_encode(t, "x", &(em_encode_opts){ .pad_to_max_length = true }, &e);
}
END_TEST

/* ---- the ember tokenize command ----------------------------------------------------- */
static char cli[1024];

START_TEST(cli_tokenize)
{
    ck_assert_msg(access(cli, X_OK) == 0, "no ember binary at %s", cli);
    const char *vocab = tu_shared_path("bert-base-uncased/vocab.txt");
    char args[1024];
    int st;
    snprintf(args, sizeof args, "--vocab '%s'", vocab);
    char *out = tu_run_ember(cli, "tokenize", args, "hide new secretions from the parental units \nIt's OK!\n\n", &st);
    ck_assert_int_eq(st, 0);
    ck_assert_str_eq(out, "101 5342 2047 3595 8496 2013 1996 18643 3197 102\n101 2009 1005 1055 7929 999 102\n101 102\n");
    snprintf(args, sizeof args, "--vocab '%s' --pair --max-length 6", vocab);
    out = tu_run_ember(cli, "tokenize", args, "a b c d\te f\n", &st);
    ck_assert_int_eq(st, 0);
    ck_assert_str_eq(out, "101 1037 1038 102 1041 102\n");
    out = tu_run_ember(cli, "tokenize", "--vocab", "", &st);
    ck_assert_int_eq(WEXITSTATUS(st), 2);
    ck_assert_ptr_nonnull(strstr(out, "usage"));
    snprintf(args, sizeof args, "--vocab '%s' --bogus", vocab);
    out = tu_run_ember(cli, "tokenize", args, "", &st);
    ck_assert_int_eq(WEXITSTATUS(st), 2);
    snprintf(args, sizeof args, "--vocab '%s'", vocab);
    out = tu_run_ember(cli, "tokenize", args, "fine\nbad \377\n", &st);
    ck_assert_int_eq(WEXITSTATUS(st), 1);
    ck_assert_ptr_nonnull(strstr(out, "line 2"));
    ck_assert_ptr_nonnull(strstr(out, "byte offset 4"));
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("tokenizer");
    tu_add_tests(tu_case(s, "golden", 120), golden_squad, golden_sst2);
    tu_add_tests(tu_case(s, "hf", 0), hf_cases_uncased, hf_cases_cased, hf_cases_keep_accents,
                 hf_cases_cased_strip, hf_cases_no_chinese, hf_cases_never_split, hf_cases_max_chars, hf_pairs,
                 hf_decode);
    TCase *tc = tu_case(s, "units", 120);
    tu_add_tests(tc, vocab_lookup, units, pair_truncation_and_padding, decode_roundtrip, invalid_utf8,
                 vocab_errors, vocab_small, batch_matches_single, alloc_failures, cli_tokenize);
    tu_add_misuse_tests(tc, misuse_null_tokenizer, misuse_negative_max_length, misuse_pad_without_max_length);
    return s;
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_find_ember(cli, sizeof cli, argv[0]);
    return tu_run_suite_scratch(make_suite(), "tok");
}
