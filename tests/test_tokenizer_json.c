/* data/tokenizer_json.c: Hugging Face tokenizer folders.
 *   - folders that transformers / tokenizers wrote (tests/fixtures/tokenizer-json,
 *     made by tools/make-tokenizer-json-fixture.py) give the ids they gave;
 *   - refusals name the type, the field and the file; malformed and hostile
 *     JSON fails cleanly (also under failed allocations and random mutations);
 *   - the bert-base-uncased vocabulary saved as tokenizer.json and read back
 *     gives the golden ids of ../shared/data/tokenizer-golden, and the ids that
 *     transformers gave for that folder (roundtrip_ids.tsv);
 *   - saving what was loaded from a saved folder gives byte-identical files. */
#include "tok_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- files ------------------------------------------------------------------------ */
/* A fresh directory scratch/name (emptied if it exists); returns its path (tu_scratch_path's ring). */
static const char *scratch(const char *name)
{
    const char *p = tu_scratch_path(name);
    DIR *d = opendir(p);
    for (struct dirent *de; d && (de = readdir(d));) {
        char q[800];
        snprintf(q, sizeof q, "%s/%s", p, de->d_name);
        if (de->d_name[0] != '.' || strlen(de->d_name) > 2) unlink(q);
    }
    if (d) closedir(d);
    mkdir(p, 0755);
    return p;
}

static em_tokenizer *load_dir(const char *dir, const em_tokenizer_opts *o)
{
    em_tokenizer *t = NULL;
    em_status st = em_tokenizer_from_pretrained(dir, o, &t);
    ck_assert_msg(st == EM_OK, "%s: %s", dir, em_last_error());
    return t;
}

static void check_folder(const char *name, const em_tokenizer_opts *o, const char *tsv_name)
{
    char dir[256], tsv[256];
    snprintf(dir, sizeof dir, "tokenizer-json/%s", name);
    snprintf(tsv, sizeof tsv, "tokenizer-json/%s.tsv", tsv_name ? tsv_name : name);
    em_tokenizer *t = load_dir(tu_fixture_path(dir), o);
    int rows, bad = tu_compare_cases(t, tu_fixture_path(tsv), &rows);
    em_tokenizer_free(t);
    ck_assert_int_gt(rows, 60);
    ck_assert_msg(bad == 0, "%s: %d of %d rows differ from transformers", name, bad, rows);
}

/* ---- folders transformers wrote ---------------------------------------------------------- */
TU_TEST(hf_bert_uncased, check_folder("bert_uncased", NULL, NULL))
TU_TEST(hf_bert_cased, check_folder("bert_cased", NULL, NULL))
TU_TEST(hf_sequence, check_folder("sequence", NULL, NULL))
TU_TEST(hf_config_wins, check_folder("bert_config_cased", NULL, NULL))
TU_TEST(hf_vocab_only, check_folder("vocab_only", NULL, NULL))
/* explicit opts win over the files: the uncased folder made cased is the cased one */
START_TEST(opts_win)
{
    check_folder("bert_uncased", &(em_tokenizer_opts){ .do_lower_case = EM_TOK_OFF, .strip_accents = EM_TOK_OFF },
                 "bert_cased");
}
END_TEST

START_TEST(info)
{
    em_tokenizer *t = load_dir(tu_fixture_path("tokenizer-json/bert_config_cased"), NULL);
    em_tokenizer_info i = em_tokenizer_get_info(t);
    ck_assert(!i.do_lower_case && !i.strip_accents && i.clean_text && i.tokenize_chinese_chars && !i.python_semantics);
    ck_assert_int_eq(i.model_max_length, 64);
    ck_assert_int_eq(em_tokenizer_model_max_length(t), 64);
    ck_assert_int_eq(i.truncation_max_length, 0);
    ck_assert_ptr_null(i.truncation_strategy);
    ck_assert_int_eq(em_tokenizer_special_ids(t).mask, em_tokenizer_token_to_id(t, "[unused0]"));
    em_tokenizer_free(t);

    t = load_dir(tu_fixture_path("tokenizer-json/sequence"), NULL);
    i = em_tokenizer_get_info(t);
    ck_assert(i.do_lower_case && i.strip_accents && i.strip_all_marks && !i.clean_text && !i.tokenize_chinese_chars);
    ck_assert_int_eq(i.max_input_chars_per_word, 12);
    ck_assert_int_eq(i.model_max_length, 0);   /* transformers' 1e30 */
    /* a length set before saving is what the saved folder says */
    em_tokenizer_set_model_max_length(t, 96);
    const char *mml_dir = scratch("mml-set");
    ck_assert_int_eq(em_tokenizer_save_pretrained(t, mml_dir), EM_OK);
    em_tokenizer_free(t);
    t = load_dir(mml_dir, NULL);
    ck_assert_int_eq(em_tokenizer_get_info(t).model_max_length, 96);
    em_tokenizer_free(t);

    t = load_dir(tu_fixture_path("tokenizer-json/vocab_only"), NULL);
    i = em_tokenizer_get_info(t);
    ck_assert(i.python_semantics && !i.do_lower_case && i.clean_text && i.nfc);
    ck_assert_int_eq(i.model_max_length, 128);
    em_tokenizer_free(t);
    i = em_tokenizer_get_info(NULL);
    ck_assert_int_eq(i.max_input_chars_per_word, 0);
}
END_TEST

/* ---- edited copies of bert_uncased/tokenizer.json ------------------------------------------ */
/* tokenizer.json = bert_uncased's with `from` replaced by `to` (once; from must occur), in a
 * fresh directory; config (may be NULL) becomes tokenizer_config.json. Returns the directory. */
static const char *edited(const char *name, const char *from, const char *to, const char *config)
{
    char *src = tu_read_file(tu_fixture_path("tokenizer-json/bert_uncased/tokenizer.json"), NULL);
    const char *dir = scratch(name);
    char path[600];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (from) {
        char *at = strstr(src, from);
        ck_assert_msg(at, "\"%s\" is not in the fixture", from);
        size_t a = (size_t)(at - src), fl = strlen(from), tl = strlen(to), n = strlen(src);
        char *out = malloc(n - fl + tl + 1);
        memcpy(out, src, a);
        memcpy(out + a, to, tl);
        memcpy(out + a + tl, at + fl, n - a - fl + 1);
        tu_write_text(path, out);
        free(out);
    } else {
        tu_write_text(path, src);
    }
    free(src);
    if (config) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        tu_write_text(path, config);
    }
    return dir;
}

static void expect_error(const char *dir, em_status want, const char *msg)
{
    em_tokenizer *t = (em_tokenizer *)1;
    em_status st = em_tokenizer_from_pretrained(dir, NULL, &t);
    ck_assert_msg(t == NULL, "%s: loaded, want the error \"%s\"", dir, msg);
    ck_assert_msg(st == want, "%s: status %d, want %d (%s)", dir, st, want, em_last_error());
    ck_assert_msg(strstr(em_last_error(), msg), "\"%s\" lacks \"%s\"", em_last_error(), msg);
}

/* The error must also name the file: dir/file. */
static void expect_error_in(const char *dir, const char *file, em_status want, const char *msg)
{
    expect_error(dir, want, msg);
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    ck_assert_msg(strstr(em_last_error(), path), "\"%s\" does not name %s", em_last_error(), path);
}
#define REFUSE(name, from, to, msg) \
    expect_error_in(edited(name, from, to, NULL), "tokenizer.json", EM_ERR_UNSUPPORTED, msg)
#define BAD(name, from, to, msg) expect_error_in(edited(name, from, to, NULL), "tokenizer.json", EM_ERR_FORMAT, msg)

START_TEST(refuse_other_tokenizers)
{
    char want[700];
    const char *dir = tu_fixture_path("tokenizer-json/bpe");
    snprintf(want, sizeof want, "%s/tokenizer.json: model type BPE is not supported (ember reads WordPiece tokenizers only)",
             dir);
    expect_error(dir, EM_ERR_UNSUPPORTED, want);
    dir = tu_fixture_path("tokenizer-json/bytelevel");
    snprintf(want, sizeof want, "%s/tokenizer.json: pre_tokenizer type ByteLevel is not supported", dir);
    expect_error(dir, EM_ERR_UNSUPPORTED, want);

    REFUSE("unigram", "\"type\": \"WordPiece\",\n    \"unk_token\"", "\"type\": \"Unigram\",\n    \"unk_token\"",
           "model type Unigram is not supported");
    REFUSE("wordlevel", "\"type\": \"WordPiece\",\n    \"unk_token\"", "\"type\": \"WordLevel\",\n    \"unk_token\"",
           "model type WordLevel is not supported");
    REFUSE("nfkc", "\"type\": \"BertNormalizer\"", "\"type\": \"NFKC\"", "normalizer type NFKC is not supported");
    REFUSE("seqnorm", "\"type\": \"BertNormalizer\"",
           "\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": \"Replace\"}]",
           "normalizer.normalizers[1] type Replace is not supported");
    REFUSE("nfd_only", "\"type\": \"BertNormalizer\"", "\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}]",
           "NFD without StripAccents");
    REFUSE("strip_first", "\"type\": \"BertNormalizer\"",
           "\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"StripAccents\"}, {\"type\": \"NFD\"}]",
           "normalizer.normalizers[0]: StripAccents without NFD");
    REFUSE("whitespace", "\"type\": \"BertPreTokenizer\"", "\"type\": \"Whitespace\"",
           "pre_tokenizer type Whitespace is not supported");
    REFUSE("ws_only", "\"type\": \"BertPreTokenizer\"", "\"type\": \"WhitespaceSplit\"",
           "pre_tokenizer: a split at whitespace only is not BERT's");
    REFUSE("punct_removed", "\"type\": \"BertPreTokenizer\"",
           "\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, "
           "{\"type\": \"Punctuation\", \"behavior\": \"Removed\"}]",
           "pre_tokenizer.pretokenizers[1].behavior Removed is not supported");
    REFUSE("metaspace", "\"type\": \"BertPreTokenizer\"", "\"type\": \"Metaspace\"",
           "pre_tokenizer type Metaspace is not supported");
    REFUSE("no_pre", "\"pre_tokenizer\": {\n    \"type\": \"BertPreTokenizer\"\n  }", "\"pre_tokenizer\": null",
           "pre_tokenizer is null");
    REFUSE("bytelevel_dec", "\"type\": \"WordPiece\",\n    \"prefix\"", "\"type\": \"ByteLevel\",\n    \"prefix\"",
           "decoder type ByteLevel is not supported");
    REFUSE("prefix", "\"continuing_subword_prefix\": \"##\"", "\"continuing_subword_prefix\": \"@@\"",
           "model.continuing_subword_prefix \"@@\" is not supported");
    REFUSE("roberta", "\"type\": \"TemplateProcessing\"", "\"type\": \"RobertaProcessing\"",
           "post_processor type RobertaProcessing is not supported");
    REFUSE("template", "\"id\": \"B\",\n          \"type_id\": 1", "\"id\": \"B\",\n          \"type_id\": 0",
           "this TemplateProcessing is not BERT's");
    REFUSE("no_post", "\"type\": \"TemplateProcessing\"", "\"type\": \"X\"", "post_processor type X");
    REFUSE("lstrip", "\"lstrip\": false", "\"lstrip\": true", "added_tokens[0].lstrip is true for \"[PAD]\"");
}
END_TEST

START_TEST(malformed_files)
{
    /* a missing folder, or one with neither file */
    char want[700];
    const char *dir = scratch("empty");
    snprintf(want, sizeof want, "neither %s/tokenizer.json nor %s/vocab.txt exists", dir, dir);
    expect_error(dir, EM_ERR_NOT_FOUND, want);
    expect_error("/nonexistent/ember-tok", EM_ERR_NOT_FOUND, "/nonexistent/ember-tok/vocab.txt");

    /* malformed JSON names the line and column */
    BAD("truncated", "\"normalizer\": {", "\"normalizer\": {{", "tokenizer.json: malformed JSON at line 52, column");
    BAD("trailing", "\"version\": \"1.0\",", "\"version\": \"1.0\",,", "malformed JSON at line 2");
    dir = scratch("array");
    char path[700];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    tu_write_text(path, "[1, 2]");
    expect_error_in(dir, "tokenizer.json", EM_ERR_FORMAT, "expected a JSON object at the top level, not an array");
    tu_write_text(path, "");
    expect_error_in(dir, "tokenizer.json", EM_ERR_FORMAT, "malformed JSON at line 1, column 1");
    tu_write_text(path, "{} x");
    expect_error_in(dir, "tokenizer.json", EM_ERR_FORMAT, "data after the object");
    tu_write_text(path, "{}");
    expect_error_in(dir, "tokenizer.json", EM_ERR_FORMAT, "model must be an object, not missing");

    /* wrong field types */
    BAD("lower_str", "\"lowercase\": true", "\"lowercase\": \"yes\"",
        "normalizer.lowercase must be true or false, not a string");
    BAD("norm_num", "\"normalizer\": {", "\"normalizer\": 5, \"x\": {", "normalizer must be an object, not a number");
    BAD("type_num", "\"type\": \"BertPreTokenizer\"", "\"type\": 7", "pre_tokenizer.type must be a string, not a number");
    BAD("vocab_arr", "\"vocab\": {", "\"vocab\": [], \"x\": {", "model.vocab must be an object (token: id), not an array");
    BAD("id_str", "\"[PAD]\": 0,", "\"[PAD]\": \"0\",", "model.vocab[\"[PAD]\"] must be an integer id, not a string");
    BAD("maxchars", "\"max_input_chars_per_word\": 100", "\"max_input_chars_per_word\": -1",
        "model.max_input_chars_per_word is -1, outside 0..");
    BAD("trunc", "\"truncation\": null", "\"truncation\": {\"max_length\": \"x\"}",
        "truncation.max_length must be an integer, not a string");
    BAD("pad", "\"padding\": null", "\"padding\": {\"strategy\": \"Sometimes\"}", "padding.strategy must be");
    BAD("added_id", "\"id\": 0,\n      \"content\": \"[PAD]\"", "\"id\": \"zero\",\n      \"content\": \"[PAD]\"",
        "added_tokens[0].id must be an integer, not a string");
    BAD("template_ids", "\"ids\": [\n          3\n        ]", "\"ids\": [\n          \"3\"\n        ]",
        "post_processor.special_tokens[\"[CLS]\"].ids[0] must be an integer, not a string");

    /* ids: duplicates, gaps, negative, huge, fractional */
    BAD("dup_id", "\"[PAD]\": 0,", "\"[PAD]\": 1,", "model.vocab: tokens \"[PAD]\" and \"[unused0]\" both have id 1");
    BAD("gap", "\"[PAD]\": 0,", "\"[PAD]\": 403,", "model.vocab[\"[PAD]\"] is 403, outside 0..402");
    BAD("neg", "\"[PAD]\": 0,", "\"[PAD]\": -1,", "model.vocab[\"[PAD]\"] is -1, outside 0..402");
    BAD("huge", "\"[PAD]\": 0,", "\"[PAD]\": 1e300,", "model.vocab[\"[PAD]\"] is 1.0000000000000001e+300, outside");
    BAD("inf", "\"[PAD]\": 0,", "\"[PAD]\": 1e999,", "model.vocab[\"[PAD]\"] must be an integer id");
    BAD("frac", "\"[PAD]\": 0,", "\"[PAD]\": 0.5,", "model.vocab[\"[PAD]\"] must be an integer id, not 0.5");
    BAD("dup_token", "\"[PAD]\": 0,", "\"[MASK]\": 0,", "model.vocab: duplicate token \"[MASK]\" (ids 0 and 5)");
    /* a NUL inside a string would cut it short in silence: another token, another name */
    BAD("nul_token", "\"[PAD]\": 0,", "\"[PAD]\\u0000x\": 0,", "a string holds \\u0000 (a NUL character)");
    /* padding.pad_token of the wrong type is refused, as HF refuses it */
    BAD("pad_token_num", "\"padding\": null", "\"padding\": {\"strategy\": \"BatchLongest\", \"pad_token\": 7}",
        "padding.pad_token must be a string");

    /* special and added tokens must agree with the vocabulary */
    BAD("added_absent", "\"content\": \"[PAD]\"", "\"content\": \"[FOO]\"",
        "added_tokens[0]: \"[FOO]\" (id 0) is not in model.vocab");
    BAD("added_id2", "\"id\": 5,\n      \"content\": \"[MASK]\"", "\"id\": 7,\n      \"content\": \"[MASK]\"",
        "added_tokens[4]: \"[MASK]\" has id 7, but 5 in model.vocab");
    BAD("pp_id", "\"ids\": [\n          3\n        ]", "\"ids\": [\n          9\n        ]",
        "post_processor: \"[CLS]\" has id 9 there, but 3 in model.vocab");
    BAD("unk_absent", "\"unk_token\": \"[UNK]\"", "\"unk_token\": \"<unk>\"",
        "model.vocab has no token \"<unk>\" (the unk_token set by model.unk_token)");
    dir = edited("mask_absent", NULL, NULL, "{\"tokenizer_class\": \"BertTokenizer\", \"mask_token\": \"[NOPE]\"}");
    snprintf(want, sizeof want, "model.vocab has no token \"[NOPE]\" (the mask_token set by %s/tokenizer_config.json)",
             dir);
    expect_error_in(dir, "tokenizer.json", EM_ERR_FORMAT, want);
    dir = edited("mask_obj", NULL, NULL, "{\"mask_token\": {\"content\": \"[NOPE]\"}}");
    expect_error(dir, EM_ERR_FORMAT, "has no token \"[NOPE]\" (the mask_token set by");

    /* the config files: malformed, wrong types */
    dir = edited("cfg_bad", NULL, NULL, "{\"do_lower_case\": tru}");
    expect_error_in(dir, "tokenizer_config.json", EM_ERR_FORMAT, "malformed JSON at line 1, column 19");
    dir = edited("cfg_type", NULL, NULL, "{\"do_lower_case\": \"false\"}");
    expect_error_in(dir, "tokenizer_config.json", EM_ERR_FORMAT, "do_lower_case must be true or false, not a string");
    dir = edited("cfg_tok", NULL, NULL, "{\"cls_token\": 5}");
    expect_error_in(dir, "tokenizer_config.json", EM_ERR_FORMAT,
                    "cls_token must be a string, an object with \"content\" or null, not a number");
    dir = edited("cfg_mml", NULL, NULL, "{\"model_max_length\": -3}");
    expect_error_in(dir, "tokenizer_config.json", EM_ERR_FORMAT, "model_max_length is -3");
    dir = edited("map_bad", NULL, NULL, "{\"tokenizer_class\": \"BertTokenizer\"}");
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    tu_write_text(path, "{\"unk_token\": [\"[UNK]\"]}");
    expect_error_in(dir, "special_tokens_map.json", EM_ERR_FORMAT, "unk_token must be a string");
    tu_write_text(path, "{\"unk_token\": null}");
    expect_error(dir, EM_ERR_FORMAT, "no unk_token is set by");

    /* vocab.txt folders keep em_tokenizer_load's messages */
    dir = scratch("vocab_dup");
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    tu_write_text(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nx\nx\n");
    snprintf(want, sizeof want, "%s/vocab.txt:6: duplicate token \"x\" (first on line 5)", dir);
    expect_error(dir, EM_ERR_FORMAT, want);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    tu_write_text(path, "{\"pad_token\": \"[P]\"}");
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    tu_write_text(path, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nx\n");
    expect_error(dir, EM_ERR_FORMAT, "vocab.txt: the vocabulary has no [P] token (the pad_token set by");
}
END_TEST

/* Sequences, NFC and a null normalizer load; the tokenizers library's rules apply. */
START_TEST(pipelines)
{
    const char *dir = edited("null_norm", "\"normalizer\": {", "\"normalizer\": null, \"x\": {", NULL);
    em_tokenizer *t = load_dir(dir, NULL);
    em_tokenizer_info i = em_tokenizer_get_info(t);
    ck_assert(!i.do_lower_case && !i.strip_accents && !i.clean_text && !i.tokenize_chinese_chars && !i.nfc);
    em_tokenizer_free(t);
    dir = edited("nfc", "\"type\": \"BertNormalizer\"",
                 "\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Strip\"}, "
                 "{\"type\": \"BertNormalizer\", \"lowercase\": false}]", NULL);
    t = load_dir(dir, NULL);
    i = em_tokenizer_get_info(t);
    ck_assert(i.nfc && !i.do_lower_case && !i.strip_accents && i.clean_text);
    em_tokenizer_free(t);
    dir = edited("nested", "\"type\": \"BertPreTokenizer\"",
                 "\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Punctuation\"}, {\"type\": \"Sequence\", "
                 "\"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}]}]", NULL);
    t = load_dir(dir, NULL);
    int rows, bad = tu_compare_cases(t, tu_fixture_path("tokenizer-json/bert_uncased.tsv"), &rows);
    ck_assert_int_eq(bad, 0);
    em_tokenizer_free(t);
    REFUSE("nfc_late", "\"type\": \"BertNormalizer\"",
           "\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"BertNormalizer\"}, {\"type\": \"NFC\"}]",
           "NFC after a decomposition");
}
END_TEST

/* ---- saving ---------------------------------------------------------------------------- */
static const char *const FILES[] = { "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json" };

static void save(const em_tokenizer *t, const char *dir)
{
    em_status st = em_tokenizer_save_pretrained(t, dir);
    ck_assert_msg(st == EM_OK, "save %s: %s", dir, em_last_error());
    DIR *d = opendir(dir);   /* the four files and nothing else (no temporary left) */
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        bool known = false;
        for (int i = 0; i < 4; i++) known |= !strcmp(de->d_name, FILES[i]);
        ck_assert_msg(known, "%s: unexpected file %s", dir, de->d_name);
        n++;
    }
    closedir(d);
    ck_assert_int_eq(n, 4);
}

static void same_files(const char *a, const char *b)
{
    for (int i = 0; i < 4; i++) {
        char pa[700], pb[700];
        snprintf(pa, sizeof pa, "%s/%s", a, FILES[i]);
        snprintf(pb, sizeof pb, "%s/%s", b, FILES[i]);
        size_t na, nb;
        char *x = tu_read_file(pa, &na), *y = tu_read_file(pb, &nb);
        ck_assert_msg(na == nb && !memcmp(x, y, na), "%s and %s differ", pa, pb);
        free(x);
        free(y);
    }
}

/* load src -> save d1 -> load d1 -> save d2: d1 and d2 byte-identical; d1 gives the ids of tsv. */
static void resave(const char *src, const char *name, const char *tsv)
{
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "%s-1", name);
    snprintf(n2, sizeof n2, "%s-2", name);
    const char *d1 = scratch(n1), *d2 = scratch(n2);
    em_tokenizer *t = load_dir(src, NULL);
    save(t, d1);
    em_tokenizer_free(t);
    t = load_dir(d1, NULL);
    save(t, d2);
    same_files(d1, d2);
    if (tsv) {
        int rows, bad = tu_compare_cases(t, tsv, &rows);
        ck_assert_msg(bad == 0, "%s saved and reloaded: %d of %d rows differ", name, bad, rows);
    }
    em_tokenizer_free(t);
}

START_TEST(resave_identical)
{
    resave(tu_fixture_path("tokenizer-json/bert_uncased"), "ru", tu_fixture_path("tokenizer-json/bert_uncased.tsv"));
    resave(tu_fixture_path("tokenizer-json/bert_cased"), "rc", tu_fixture_path("tokenizer-json/bert_cased.tsv"));
    resave(tu_fixture_path("tokenizer-json/sequence"), "rs", tu_fixture_path("tokenizer-json/sequence.tsv"));
    resave(tu_fixture_path("tokenizer-json/bert_config_cased"), "rg", tu_fixture_path("tokenizer-json/bert_config_cased.tsv"));
    resave(tu_fixture_path("tokenizer-json/vocab_only"), "rv", NULL);   /* vocab.txt's Python rules are not kept */
    /* truncation and padding are kept as loaded, and not applied */
    const char *dir = edited("trunc_pad", "\"truncation\": null,\n  \"padding\": null",
                             "\"truncation\": {\"direction\": \"Right\", \"max_length\": 6, \"strategy\": "
                             "\"LongestFirst\", \"stride\": 0},\n  \"padding\": {\"strategy\": {\"Fixed\": 9}, "
                             "\"direction\": \"Right\", \"pad_to_multiple_of\": 8, \"pad_id\": 0, \"pad_type_id\": 0, "
                             "\"pad_token\": \"[PAD]\"}", NULL);
    em_tokenizer *t = load_dir(dir, NULL);
    em_tokenizer_info i = em_tokenizer_get_info(t);
    ck_assert_int_eq(i.truncation_max_length, 6);
    ck_assert_str_eq(i.truncation_strategy, "LongestFirst");
    ck_assert_int_eq(i.pad_to, 9);
    ck_assert_int_eq(i.pad_to_multiple_of, 8);
    ck_assert(!i.pad_to_longest);
    em_encoding e;
    ck_assert(em_tokenizer_encode(t, "a b c d e f g h", NULL, &e) == EM_OK);
    ck_assert_int_eq(e.len, 10);
    em_encoding_free(&e);
    em_tokenizer_free(t);
    resave(dir, "rt", tu_fixture_path("tokenizer-json/bert_uncased.tsv"));
    char path[700];
    t = load_dir(dir, NULL);
    save(t, scratch("rt-x"));
    snprintf(path, sizeof path, "%s/tokenizer.json", tu_scratch_path("rt-x"));
    em_tokenizer_free(t);
    char *text = tu_read_file(path, NULL);
    ck_assert_ptr_nonnull(strstr(text, "\"Fixed\":\t9"));
    ck_assert_ptr_nonnull(strstr(text, "\"max_length\":\t6"));
    free(text);
}
END_TEST

static em_tokenizer *bert_json(const char *name)
{
    em_tokenizer *v = NULL;
    ck_assert(em_tokenizer_load(tu_shared_path("bert-base-uncased/vocab.txt"), NULL, &v) == EM_OK);
    const char *dir = scratch(name);
    save(v, dir);
    em_tokenizer_free(v);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    em_tokenizer *t = load_dir(dir, NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    fprintf(stderr, "note: loading the 30,522-token tokenizer.json took %.1f ms\n",
            (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
    ck_assert_int_eq(em_tokenizer_vocab_size(t), 30522);
    ck_assert(!em_tokenizer_get_info(t).python_semantics);
    return t;
}

/* The golden files give the same ids through the saved tokenizer.json as through vocab.txt. */
static void golden(const char *rel, int ncols, int text_col, int ids_col, int expect)
{
    em_tokenizer *t = bert_json("golden");
    tu_check_golden(t, rel, ncols, text_col, ids_col, expect, "through the saved tokenizer.json");
    em_tokenizer_free(t);
}

TU_TEST(golden_squad, golden("tokenizer-golden/squad_questions_bert_base_uncased.tsv", 4, 1, 3, 10570))
TU_TEST(golden_sst2, golden("tokenizer-golden/sst2_bert_base_uncased.tsv", 5, 2, 4, 2310))

/* ember's save of bert-base-uncased, read back: the ids transformers gave for that folder. */
START_TEST(roundtrip)
{
    em_tokenizer *t = bert_json("roundtrip");
    int rows, bad = tu_compare_cases(t, tu_fixture_path("tokenizer-json/roundtrip_ids.tsv"), &rows);
    ck_assert_int_gt(rows, 200);
    ck_assert_msg(bad == 0, "roundtrip_ids.tsv: %d of %d rows differ", bad, rows);
    em_tokenizer_free(t);
    /* and saving it again gives the same files */
    t = load_dir(tu_scratch_path("roundtrip"), NULL);
    save(t, scratch("roundtrip-2"));
    same_files(tu_scratch_path("roundtrip"), tu_scratch_path("roundtrip-2"));
    em_tokenizer_free(t);
}
END_TEST

START_TEST(save_errors)
{
    char path[700];
    const char *dir = scratch("save_err");
    snprintf(path, sizeof path, "%s/file", dir);
    tu_write_text(path, "x");
    em_tokenizer *t = load_dir(tu_fixture_path("tokenizer-json/bert_uncased"), NULL);
    char sub[800];
    snprintf(sub, sizeof sub, "%s/below", path);
    ck_assert_int_eq(em_tokenizer_save_pretrained(t, sub), EM_ERR_IO);
    ck_assert_msg(strstr(em_last_error(), path), "%s", em_last_error());
    ck_assert_int_eq(em_tokenizer_save_pretrained(t, path), EM_ERR_IO);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "not a directory"));
    /* nested directories are made */
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    save(t, sub);
    em_tokenizer_free(t);
    /* a vocabulary with a line break in a token cannot become vocab.txt */
    const char *bad = edited("linebreak", "\"caf\": 379,", "\"c\\naf\": 379,", NULL);
    t = load_dir(bad, NULL);
    ck_assert_int_eq(em_tokenizer_save_pretrained(t, scratch("linebreak-out")), EM_ERR_FORMAT);
    ck_assert_msg(strstr(em_last_error(), "vocab.txt: token 379 holds a line break"), "%s", em_last_error());
    em_tokenizer_free(t);
}
END_TEST

/* ---- robustness ---------------------------------------------------------------------------- */
START_TEST(alloc_failures)
{
    const char *out = scratch("oom-out");
    int failures = 0;
    for (int64_t k = 1;; k++) {
        em_tokenizer *t = NULL;
        em_alloc_fail_after(k, false);
        em_status st = em_tokenizer_from_pretrained(tu_fixture_path("tokenizer-json/bert_config_cased"), NULL, &t);
        if (st == EM_OK) st = em_tokenizer_save_pretrained(t, out);
        em_alloc_fail_after(0, false);
        em_tokenizer_free(t);
        if (st == EM_OK) break;
        ck_assert_msg(st == EM_ERR_OOM, "k=%lld: %s", (long long)k, em_last_error());
        failures++;
        ck_assert_int_lt(k, 100000);
    }
    ck_assert_int_gt(failures, 50);
}
END_TEST

/* Random edits of a real tokenizer.json never crash the reader (run it under ASan;
 * $EMBER_TOKJSON_MUTATIONS sets the count, 400 by default). */
START_TEST(mutations)
{
    const char *env = getenv("EMBER_TOKJSON_MUTATIONS");
    int count = env && atoi(env) > 0 ? atoi(env) : 400;
    size_t n;
    char *src = tu_read_file(tu_fixture_path("tokenizer-json/sequence/tokenizer.json"), &n);
    const char *dir = scratch("mutations");
    char path[700];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    static const char *const inserts[] = { "null", "[]", "{}", "-1", "1e400", "\"\"", "\"x\"", "true", "0.5",
                                           "{\"type\": \"Sequence\"}", "99999999999" };
    uint64_t s = 42;
    int ok = 0;
    char *buf = malloc(n + 64);
    for (int iter = 0; iter < count; iter++) {
        memcpy(buf, src, n + 1);
        size_t m = n;
        int edits = 1 + (int)(tu_next(&s) % 3);
        for (int e = 0; e < edits && m > 0; e++) {
            size_t at = tu_next(&s) % m;
            switch (tu_next(&s) % 4) {
            case 0: buf[at] = (char)(tu_next(&s) & 0xff); break;                      /* a random byte */
            case 1: m = at; buf[m] = 0; break;                                         /* truncate */
            case 2: memmove(buf + at, buf + at + 1, m - at); m--; break;              /* delete a byte */
            default: {                                                                  /* a value after a colon */
                char *c = strchr(buf + at, ':');
                if (!c) break;
                const char *ins = inserts[tu_next(&s) % (sizeof inserts / sizeof *inserts)];
                size_t k = strlen(ins), pos = (size_t)(c - buf) + 1;
                char *end = buf + pos;
                while (*end && *end != ',' && *end != '\n') end++;
                size_t tail = m - (size_t)(end - buf);
                if (pos + k + tail + 1 > n + 63) break;
                memmove(buf + pos + k, end, tail + 1);
                memcpy(buf + pos, ins, k);
                m = pos + k + tail;
            }
            }
        }
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, m, f);
        fclose(f);
        /* every other time, a tokenizer_config.json with one random byte changed or cut */
        char cfg[160], cpath[700];
        snprintf(cfg, sizeof cfg, "{\"tokenizer_class\": \"%s\", \"do_lower_case\": false, \"mask_token\": "
                 "{\"content\": \"[MASK]\"}, \"model_max_length\": 7}", iter & 2 ? "BertTokenizer" : "X");
        size_t at = tu_next(&s) % strlen(cfg);
        if (tu_next(&s) & 1) cfg[at] = (char)(1 + tu_next(&s) % 255);
        else cfg[at] = 0;
        snprintf(cpath, sizeof cpath, "%s/tokenizer_config.json", dir);
        if (iter & 1) tu_write_text(cpath, cfg);
        else unlink(cpath);
        em_tokenizer *t = NULL;
        em_status st = em_tokenizer_from_pretrained(dir, NULL, &t);
        if (st == EM_OK) {
            ok++;
            em_encoding e;
            if (em_tokenizer_encode_pair(t, "Caf\303\251 \344\270\255 x", "y [SEP] \316\243", NULL, &e) == EM_OK)
                em_encoding_free(&e);
            em_tokenizer_free(t);
        } else {
            ck_assert_ptr_null(t);
            ck_assert(strlen(em_last_error()) > 0);
        }
    }
    fprintf(stderr, "note: %d of %d mutated tokenizer.json files still loaded\n", ok, count);
    free(buf);
    free(src);
}
END_TEST

/* ---- the ember tokenize command: --tokenizer DIR, --save DIR ------------------------------- */
static char cli[1024];

START_TEST(cli_tokenizer_dir)
{
    ck_assert_msg(access(cli, X_OK) == 0, "no ember binary at %s", cli);
    char args[2048];
    int st;
    snprintf(args, sizeof args, "--tokenizer '%s'", tu_fixture_path("tokenizer-json/bert_uncased"));
    char *out = tu_run_ember(cli, "tokenize", args, "Hello, World!\ndon't stop!!\n", &st);
    ck_assert_int_eq(st, 0);
    ck_assert_str_eq(out, "3 374 17 331 6 4\n3 392 12 89 88 167 162 163 6 6 4\n");
    const char *dir = scratch("cli-save");
    snprintf(args, sizeof args, "--vocab '%s' --save '%s'", tu_shared_path("bert-base-uncased/vocab.txt"), dir);
    out = tu_run_ember(cli, "tokenize", args, "", &st);
    ck_assert_msg(st == 0, "%s", out);
    ck_assert_str_eq(out, "");
    snprintf(args, sizeof args, "--tokenizer '%s'", dir);
    out = tu_run_ember(cli, "tokenize", args, "hide new secretions from the parental units \n", &st);
    ck_assert_int_eq(st, 0);
    ck_assert_str_eq(out, "101 5342 2047 3595 8496 2013 1996 18643 3197 102\n");
    snprintf(args, sizeof args, "--tokenizer '%s' --vocab x", dir);
    out = tu_run_ember(cli, "tokenize", args, "", &st);
    ck_assert_int_eq(WEXITSTATUS(st), 2);
    ck_assert_ptr_nonnull(strstr(out, "exclude each other"));
    snprintf(args, sizeof args, "--tokenizer '%s'", tu_fixture_path("tokenizer-json/bpe"));
    out = tu_run_ember(cli, "tokenize", args, "x\n", &st);
    ck_assert_int_eq(WEXITSTATUS(st), 1);
    ck_assert_ptr_nonnull(strstr(out, "model type BPE is not supported"));
}
END_TEST

START_TEST(misuse_null_dir)
{
    tu_expect_misuse("em_tokenizer_from_pretrained");
    em_tokenizer *t;
    em_tokenizer_from_pretrained(NULL, NULL, &t);
}
END_TEST

START_TEST(misuse_save_null)
{
    tu_expect_misuse("em_tokenizer_save_pretrained");
    em_tokenizer_save_pretrained(NULL, "/tmp");
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("tokenizer_json");
    tu_add_tests(tu_case(s, "hf", 120), hf_bert_uncased, hf_bert_cased, hf_sequence, hf_config_wins,
                 hf_vocab_only, opts_win, info, pipelines, refuse_other_tokenizers, malformed_files);
    TCase *tc = tu_case(s, "save", 300);
    tu_add_tests(tc, resave_identical, golden_squad, golden_sst2, roundtrip, save_errors, alloc_failures,
                 mutations, cli_tokenizer_dir);
    tu_add_misuse_tests(tc, misuse_null_dir, misuse_save_null);
    return s;
}

int main(int argc, char **argv)
{
    (void)argc;
    tu_find_ember(cli, sizeof cli, argv[0]);
    return tu_run_suite_scratch(make_suite(), "tokjson");
}
