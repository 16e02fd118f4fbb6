/* ember — data/: Hugging Face tokenizer folders. em_tokenizer_from_pretrained
 * reads tokenizer.json (the tokenizers library's serialization: BERT's
 * WordPiece family only) or vocab.txt, with tokenizer_config.json and
 * special_tokens_map.json; em_tokenizer_save_pretrained writes all four.
 * Parsing is cJSON's; every message names the file and the JSON field. The
 * vocabulary goes through em__tok_build (tokenizer.c), as vocab.txt does. */
#include "data/tokenizer_internal.h"
#include "tensor/support.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers ------------------------------------------------------------- */
/* dir/name in a new em__malloc'd string, or NULL (OOM). */
static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = em__malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}


static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* "field" or "field.sub" / "field[i]" into buf (for messages). */
static const char *fld(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *fld(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
    return buf;
}
enum { FLD = 160 };

/* The member `name` of obj (the last one, as Python's json), or NULL. */
static const cJSON *get(const cJSON *obj, const char *name)
{
    const cJSON *found = NULL;
    if (!cJSON_IsObject(obj)) return NULL;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (c->string && strcmp(c->string, name) == 0) found = c;
    return found;
}

static em_status bad_type(const char *path, const char *field, const char *want, const cJSON *v)
{
    return em__fail(EM_ERR_FORMAT, "%s: %s must be %s, not %s", path, field, want, em__json_kind(v));
}

/* An optional boolean: absent or null leaves *out; *set (may be NULL) tells whether it was given. */
static em_status opt_bool(const cJSON *obj, const char *key, const char *path, const char *field, bool *out, bool *set)
{
    const cJSON *v = get(obj, key);
    if (set) *set = false;
    if (!v || cJSON_IsNull(v)) return EM_OK;
    if (!cJSON_IsBool(v)) return bad_type(path, field, "true or false", v);
    *out = cJSON_IsTrue(v);
    if (set) *set = true;
    return EM_OK;
}

/* v as an integer in [lo, hi]. */
static em_status as_int(const cJSON *v, const char *path, const char *field, int64_t lo, int64_t hi, int64_t *out)
{
    if (!cJSON_IsNumber(v)) return bad_type(path, field, "an integer", v);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d)) return em__fail(EM_ERR_FORMAT, "%s: %s must be an integer, not %.17g", path, field, d);
    if (d < (double)lo || d > (double)hi)
        return em__fail(EM_ERR_FORMAT, "%s: %s is %.17g, outside %lld..%lld", path, field, d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return EM_OK;
}

/* A string member (absent or null: *out untouched, returns OK). */
static em_status opt_str(const cJSON *obj, const char *key, const char *path, const char *field, const char **out)
{
    const cJSON *v = get(obj, key);
    if (!v || cJSON_IsNull(v)) return EM_OK;
    if (!cJSON_IsString(v)) return bad_type(path, field, "a string", v);
    *out = v->valuestring;
    return EM_OK;
}

/* The "type" of a component object (field names it). */
static em_status type_of(const cJSON *v, const char *path, const char *field, const char **type)
{
    if (!cJSON_IsObject(v)) return bad_type(path, field, "an object", v);
    const cJSON *t = get(v, "type");
    char f[FLD];
    if (!cJSON_IsString(t)) return bad_type(path, fld(f, sizeof f, "%s.type", field), "a string", t);
    *type = t->valuestring;
    return EM_OK;
}

/* ---- reading a JSON file ------------------------------------------------------- */
static void line_col(const char *buf, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (buf[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

/* Parses path as a JSON object into *out. EM_ERR_NOT_FOUND when the file does not exist. */
static em_status read_json(const char *path, cJSON **out)
{
    *out = NULL;
    char *buf;
    size_t n;
    em_status rs = em__read_file(path, 0, &buf, &n);
    if (rs != EM_OK) return rs;
    em__json_init();
    em_clear_error();
    const char *end = NULL;
    size_t nul = em__json_nul_escape(buf, n);
    cJSON *j = nul ? NULL : cJSON_ParseWithLengthOpts(buf, n, &end, false);
    em_status st = EM_OK;
    int line, col;
    if (nul) {   /* a token or name cut at its NUL would silently be another one */
        line_col(buf, nul - 1, &line, &col);
        st = em__fail(EM_ERR_FORMAT, "%s: line %d, column %d: a string holds \\u0000 (a NUL character), which no "
                      "token or name can hold", path, line, col);
    } else if (!j && em_last_status() == EM_ERR_OOM) {
        st = em__fail(EM_ERR_OOM, "%s: out of memory parsing the JSON", path);
    } else if (!j) {
        size_t off = end && end >= buf && end <= buf + n ? (size_t)(end - buf) : n;
        line_col(buf, off, &line, &col);
        st = em__fail(EM_ERR_FORMAT, "%s: malformed JSON at line %d, column %d", path, line, col);
    } else if (!cJSON_IsObject(j)) {
        st = em__fail(EM_ERR_FORMAT, "%s: expected a JSON object at the top level, not %s", path, em__json_kind(j));
    } else {
        const char *p = end ? end : buf + n;
        while (p < buf + n && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
        if (p < buf + n) {
            line_col(buf, (size_t)(p - buf), &line, &col);
            st = em__fail(EM_ERR_FORMAT, "%s: malformed JSON at line %d, column %d: data after the object", path, line,
                          col);
        }
    }
    em__free(buf);
    if (st) {
        cJSON_Delete(j);
        return st;
    }
    *out = j;
    return EM_OK;
}

/* ---- tokenizer_config.json and special_tokens_map.json --------------------------- */
enum { UNK, CLS, SEP, PAD, MASK, NSPEC };
static const char *const role[NSPEC] = { "unk_token", "cls_token", "sep_token", "pad_token", "mask_token" };
static const char *const default_token[NSPEC] = { "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]" };

/* What a config file says about one special token. */
typedef struct spec_val {
    bool given;         /* the key is present                      */
    const char *s;      /* its token; NULL for an explicit null     */
} spec_val;

/* A special token value: "x", {"content": "x", ...} or null. */
static em_status token_value(const cJSON *v, const char *path, const char *field, const char **out)
{
    if (cJSON_IsNull(v)) { *out = NULL; return EM_OK; }
    if (cJSON_IsString(v)) { *out = v->valuestring; return EM_OK; }
    if (cJSON_IsObject(v)) {
        const cJSON *c = get(v, "content");
        char f[FLD];
        if (!cJSON_IsString(c)) return bad_type(path, fld(f, sizeof f, "%s.content", field), "a string", c);
        *out = c->valuestring;
        return EM_OK;
    }
    return bad_type(path, field, "a string, an object with \"content\" or null", v);
}

typedef struct cfg_file {
    cJSON *json;                 /* NULL: no such file */
    char *path;
    spec_val spec[NSPEC];
    const char **extra;          /* additional_special_tokens (point into json) */
    int n_extra;
} cfg_file;

static void cfg_free(cfg_file *c)
{
    cJSON_Delete(c->json);
    em__free(c->path);
    em__free(c->extra);
    memset(c, 0, sizeof *c);
}

/* Reads dir/name when it exists: the special tokens and additional_special_tokens. */
static em_status cfg_read(const char *dir, const char *name, cfg_file *c)
{
    memset(c, 0, sizeof *c);
    if (!(c->path = join(dir, name))) return EM_ERR_OOM;
    em_status st = read_json(c->path, &c->json);
    if (st == EM_ERR_NOT_FOUND) { em_clear_error(); return EM_OK; }
    if (st) return st;
    char f[FLD];
    for (int i = 0; i < NSPEC; i++) {
        const cJSON *v = get(c->json, role[i]);
        if (!v) continue;
        c->spec[i].given = true;
        if ((st = token_value(v, c->path, role[i], &c->spec[i].s))) return st;
    }
    const cJSON *a = get(c->json, "additional_special_tokens");
    if (a && !cJSON_IsNull(a)) {
        if (!cJSON_IsArray(a)) return bad_type(c->path, "additional_special_tokens", "a list", a);
        int n = cJSON_GetArraySize(a);
        if (n > 0 && !(c->extra = em__calloc((size_t)n, sizeof *c->extra))) return EM_ERR_OOM;
        int i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
            const char *s;
            if ((st = token_value(e, c->path, fld(f, sizeof f, "additional_special_tokens[%d]", i), &s))) return st;
            if (s) c->extra[c->n_extra++] = s;
        }
    }
    return EM_OK;
}

/* The settings tokenizer_config.json gives. */
typedef struct tok_cfg {
    bool lower, lower_set, strip, strip_set, chinese, chinese_set;
    int64_t model_max_length;
    bool bert_class;    /* tokenizer_class BertTokenizer(Fast): transformers rebuilds the pipeline from these */
} tok_cfg;

static em_status cfg_settings(const cfg_file *c, tok_cfg *o)
{
    memset(o, 0, sizeof *o);
    if (!c->json) return EM_OK;
    const char *p = c->path;
    em_status st;
    if ((st = opt_bool(c->json, "do_lower_case", p, "do_lower_case", &o->lower, &o->lower_set)) ||
        (st = opt_bool(c->json, "strip_accents", p, "strip_accents", &o->strip, &o->strip_set)) ||
        (st = opt_bool(c->json, "tokenize_chinese_chars", p, "tokenize_chinese_chars", &o->chinese, &o->chinese_set)))
        return st;
    const cJSON *m = get(c->json, "model_max_length");
    if (m && !cJSON_IsNull(m)) {
        if (!cJSON_IsNumber(m)) return bad_type(p, "model_max_length", "a number", m);
        double d = m->valuedouble;
        if (isnan(d) || d < 0) return em__fail(EM_ERR_FORMAT, "%s: model_max_length is %g", p, d);
        /* transformers' "no limit" is int(1e30): anything past 2^53 reads as none */
        if (d < 9007199254740992.0) {
            if (d != floor(d)) return em__fail(EM_ERR_FORMAT, "%s: model_max_length must be an integer, not %.17g", p, d);
            o->model_max_length = (int64_t)d;
        }
    }
    const char *cls = NULL;
    if ((st = opt_str(c->json, "tokenizer_class", p, "tokenizer_class", &cls))) return st;
    o->bert_class = cls && (!strcmp(cls, "BertTokenizer") || !strcmp(cls, "BertTokenizerFast"));
    return EM_OK;
}

/* ---- tokenizer.json ---------------------------------------------------------------- */
/* The pipeline as tokenizer.json describes it. */
typedef struct tj_pipe {
    bool lower, strip, strip_set, marks, chinese, clean, nfc;
    bool nfd, decomposed, bert_norm_seen;
    int max_chars;
    const char *unk;                  /* model.unk_token                       */
    const char *cls, *sep;            /* from the post-processor (NULL: none)  */
    int64_t cls_id, sep_id;
    const char *pad_token;            /* padding.pad_token                     */
    bool pp_null;
} tj_pipe;

static em_status unsupported(const char *path, const char *field, const char *type, const char *why)
{
    return em__fail(EM_ERR_UNSUPPORTED, "%s: %s type %s is not supported (%s)", path, field, type, why);
}

static const char NORM_WHY[] = "ember reads BertNormalizer, or a Sequence of BertNormalizer, NFD, Lowercase, "
                                "StripAccents, NFC, Strip";

/* One normalizer (field: its place in the file), folded into p. */
static em_status parse_normalizer(const cJSON *n, const char *path, const char *field, tj_pipe *p, int depth)
{
    if (depth > 8) return em__fail(EM_ERR_UNSUPPORTED, "%s: %s: Sequence nested too deeply", path, field);
    const char *type = NULL;
    em_status st = type_of(n, path, field, &type);
    if (st) return st;
    char f[FLD];
    if (!strcmp(type, "BertNormalizer")) {
        if (p->bert_norm_seen)
            return em__fail(EM_ERR_UNSUPPORTED, "%s: %s: a second BertNormalizer is not supported", path, field);
        bool lower = true, strip = false, strip_set = false;
        p->clean = p->chinese = true;
        if ((st = opt_bool(n, "clean_text", path, fld(f, sizeof f, "%s.clean_text", field), &p->clean, NULL)) ||
            (st = opt_bool(n, "handle_chinese_chars", path, fld(f, sizeof f, "%s.handle_chinese_chars", field),
                           &p->chinese, NULL)) ||
            (st = opt_bool(n, "lowercase", path, fld(f, sizeof f, "%s.lowercase", field), &lower, NULL)) ||
            (st = opt_bool(n, "strip_accents", path, fld(f, sizeof f, "%s.strip_accents", field), &strip, &strip_set)))
            return st;
        if (!strip_set) strip = lower;   /* null: as lowercase */
        p->lower |= lower;
        p->strip |= strip;
        p->strip_set |= strip_set;
        p->decomposed |= strip;
        p->bert_norm_seen = true;
        return EM_OK;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *a = get(n, "normalizers");
        if (!cJSON_IsArray(a)) return bad_type(path, fld(f, sizeof f, "%s.normalizers", field), "a list", a);
        int i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
            char sub[FLD];
            fld(sub, sizeof sub, "%s.normalizers[%d]", field, i);
            if ((st = parse_normalizer(e, path, sub, p, depth + 1))) return st;
        }
        return EM_OK;
    }
    if (!strcmp(type, "NFD")) { p->nfd = p->decomposed = true; return EM_OK; }
    if (!strcmp(type, "Lowercase")) { p->lower = true; return EM_OK; }
    if (!strcmp(type, "Strip")) return EM_OK;   /* the whitespace split drops outer whitespace anyway */
    if (!strcmp(type, "NFC")) {
        if (p->decomposed)
            return em__fail(EM_ERR_UNSUPPORTED, "%s: %s: NFC after a decomposition (NFD or stripped accents) is not "
                            "supported", path, field);
        p->nfc = true;
        return EM_OK;
    }
    if (!strcmp(type, "StripAccents")) {
        if (!p->nfd)
            return em__fail(EM_ERR_UNSUPPORTED, "%s: %s: StripAccents without NFD before it is not supported "
                            "(ember strips the marks of the NFD form)", path, field);
        p->strip = p->strip_set = p->marks = true;
        return EM_OK;
    }
    return unsupported(path, field, type, NORM_WHY);
}

/* The pre-tokenizer must split as BertPreTokenizer: at whitespace, and around each punctuation character. */
static em_status parse_pre(const cJSON *n, const char *path, const char *field, bool *ws, bool *punct, int depth)
{
    if (depth > 8) return em__fail(EM_ERR_UNSUPPORTED, "%s: %s: Sequence nested too deeply", path, field);
    const char *type = NULL;
    em_status st = type_of(n, path, field, &type);
    if (st) return st;
    char f[FLD];
    if (!strcmp(type, "BertPreTokenizer")) { *ws = *punct = true; return EM_OK; }
    if (!strcmp(type, "WhitespaceSplit")) { *ws = true; return EM_OK; }
    if (!strcmp(type, "Punctuation")) {
        const char *b = "Isolated";
        if ((st = opt_str(n, "behavior", path, fld(f, sizeof f, "%s.behavior", field), &b))) return st;
        if (strcmp(b, "Isolated") != 0)
            return em__fail(EM_ERR_UNSUPPORTED, "%s: %s.behavior %s is not supported (BERT isolates punctuation: "
                            "\"Isolated\")", path, field, b);
        *punct = true;
        return EM_OK;
    }
    if (!strcmp(type, "Sequence")) {
        const cJSON *a = get(n, "pretokenizers");
        if (!cJSON_IsArray(a)) return bad_type(path, fld(f, sizeof f, "%s.pretokenizers", field), "a list", a);
        int i = 0;
        for (const cJSON *e = a->child; e; e = e->next, i++) {
            char sub[FLD];
            if ((st = parse_pre(e, path, fld(sub, sizeof sub, "%s.pretokenizers[%d]", field, i), ws, punct, depth + 1)))
                return st;
        }
        return EM_OK;
    }
    if (!strcmp(type, "Whitespace"))
        return unsupported(path, field, type, "its split into \\w+ and [^\\w\\s]+ runs is not BERT's; "
                           "BertPreTokenizer or WhitespaceSplit + Punctuation are");
    if (!strcmp(type, "ByteLevel"))
        return unsupported(path, field, type, "byte-level tokenizers (GPT-2, RoBERTa) are not WordPiece");
    return unsupported(path, field, type, "ember reads BertPreTokenizer, or a Sequence of WhitespaceSplit and "
                       "Punctuation");
}

/* One piece of a template: {"SpecialToken": {"id": X, "type_id": t}} or {"Sequence": {"id": "A", "type_id": t}}. */
static bool piece(const cJSON *e, const char *kind_, const char **id, int64_t type_id)
{
    if (!cJSON_IsObject(e) || !e->child || e->child->next || !e->child->string || strcmp(e->child->string, kind_))
        return false;
    const cJSON *i = get(e->child, "id"), *t = get(e->child, "type_id");
    if (!cJSON_IsString(i) || !cJSON_IsNumber(t) || t->valuedouble != (double)type_id) return false;
    if (*id && strcmp(*id, i->valuestring)) return false;
    *id = i->valuestring;
    return true;
}

/* special_tokens[key] of TemplateProcessing: one token and one id. */
static em_status template_token(const cJSON *sp, const char *key, const char *path, const char **tok, int64_t *id)
{
    char f[FLD];
    const cJSON *e = get(sp, key);
    fld(f, sizeof f, "post_processor.special_tokens[\"%.40s\"]", key);
    if (!cJSON_IsObject(e)) return bad_type(path, f, "an object", e);
    const cJSON *ids = get(e, "ids"), *toks = get(e, "tokens");
    if (!cJSON_IsArray(ids) || !cJSON_IsArray(toks) || cJSON_GetArraySize(ids) != 1 || cJSON_GetArraySize(toks) != 1)
        return em__fail(EM_ERR_UNSUPPORTED, "%s: %s must hold one id and one token (ember's [CLS] and [SEP] are one "
                        "token each)", path, f);
    if (!cJSON_IsString(toks->child)) return bad_type(path, f, "tokens of strings", toks->child);
    *tok = toks->child->valuestring;
    char g[FLD + 8];
    snprintf(g, sizeof g, "%s.ids[0]", f);
    return as_int(ids->child, path, g, 0, INT32_MAX, id);
}

static em_status parse_post(const cJSON *n, const char *path, tj_pipe *p)
{
    if (!n || cJSON_IsNull(n)) { p->pp_null = true; return EM_OK; }
    const char *type = NULL;
    em_status st = type_of(n, path, "post_processor", &type);
    if (st) return st;
    if (!strcmp(type, "BertProcessing")) {
        const char *keys[2] = { "cls", "sep" };
        for (int k = 0; k < 2; k++) {
            const cJSON *a = get(n, keys[k]);
            char f[FLD];
            fld(f, sizeof f, "post_processor.%s", keys[k]);
            if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 2 || !cJSON_IsString(a->child))
                return bad_type(path, f, "a [token, id] pair", a);
            int64_t id;
            char g[FLD + 4];
            snprintf(g, sizeof g, "%s[1]", f);
            if ((st = as_int(a->child->next, path, g, 0, INT32_MAX, &id))) return st;
            if (k == 0) p->cls = a->child->valuestring, p->cls_id = id;
            else p->sep = a->child->valuestring, p->sep_id = id;
        }
        return EM_OK;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        const cJSON *single = get(n, "single"), *pair = get(n, "pair"), *sp = get(n, "special_tokens");
        const char *c = NULL, *s = NULL, *a = "A", *b = "B";
        bool ok = cJSON_IsArray(single) && cJSON_GetArraySize(single) == 3 && cJSON_IsArray(pair) &&
                  cJSON_GetArraySize(pair) == 5;
        if (ok) {
            const cJSON *e = single->child;
            ok = piece(e, "SpecialToken", &c, 0) && piece(e->next, "Sequence", &a, 0) &&
                 piece(e->next->next, "SpecialToken", &s, 0);
        }
        if (ok) {
            const cJSON *e = pair->child;
            const cJSON *e3 = e->next->next->next;
            ok = piece(e, "SpecialToken", &c, 0) && piece(e->next, "Sequence", &a, 0) &&
                 piece(e->next->next, "SpecialToken", &s, 0) && piece(e3, "Sequence", &b, 1) &&
                 piece(e3->next, "SpecialToken", &s, 1);
        }
        if (!ok)
            return em__fail(EM_ERR_UNSUPPORTED, "%s: post_processor: this TemplateProcessing is not BERT's (ember "
                            "reads single \"[CLS]:0 $A:0 [SEP]:0\" and pair \"[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1\")",
                            path);
        if (!cJSON_IsObject(sp)) return bad_type(path, "post_processor.special_tokens", "an object", sp);
        if ((st = template_token(sp, c, path, &p->cls, &p->cls_id)) ||
            (st = template_token(sp, s, path, &p->sep, &p->sep_id)))
            return st;
        return EM_OK;
    }
    return unsupported(path, "post_processor", type, "ember adds [CLS] A [SEP] (B [SEP]): BertProcessing or "
                       "TemplateProcessing");
}

static em_status parse_decoder(const cJSON *n, const char *path)
{
    if (!n || cJSON_IsNull(n)) return EM_OK;
    const char *type = NULL;
    em_status st = type_of(n, path, "decoder", &type);
    if (st) return st;
    if (strcmp(type, "WordPiece") != 0)
        return unsupported(path, "decoder", type, "ember decodes WordPiece");
    const char *prefix = "##";
    if ((st = opt_str(n, "prefix", path, "decoder.prefix", &prefix))) return st;
    if (strcmp(prefix, "##") != 0)
        return em__fail(EM_ERR_UNSUPPORTED, "%s: decoder.prefix \"%.40s\" is not supported (ember's is \"##\")", path,
                        prefix);
    return EM_OK;
}

/* model: WordPiece; fills tok/len (pointing into the JSON) indexed by id. */
static em_status parse_model(const cJSON *m, const char *path, tj_pipe *p, const char ***tok, uint32_t **len,
                             int32_t *n)
{
    if (!cJSON_IsObject(m)) return bad_type(path, "model", "an object", m);
    const cJSON *t = get(m, "type");
    const char *type = NULL;
    if (cJSON_IsString(t)) type = t->valuestring;
    else if (t && !cJSON_IsNull(t)) return bad_type(path, "model.type", "a string", t);
    else if (get(m, "merges")) type = "BPE";   /* old files have no type: guess it from the fields */
    else if (cJSON_IsArray(get(m, "vocab"))) type = "Unigram";
    else if (get(m, "continuing_subword_prefix") || get(m, "max_input_chars_per_word")) type = "WordPiece";
    else type = "WordLevel";
    if (strcmp(type, "WordPiece") != 0)
        return em__fail(EM_ERR_UNSUPPORTED, "%s: model type %s is not supported (ember reads WordPiece tokenizers only)",
                        path, type);
    em_status st;
    p->unk = "[UNK]";
    const char *prefix = "##";
    if ((st = opt_str(m, "unk_token", path, "model.unk_token", &p->unk)) ||
        (st = opt_str(m, "continuing_subword_prefix", path, "model.continuing_subword_prefix", &prefix)))
        return st;
    if (strcmp(prefix, "##") != 0)
        return em__fail(EM_ERR_UNSUPPORTED, "%s: model.continuing_subword_prefix \"%.40s\" is not supported (ember's "
                        "WordPiece continues words with \"##\")", path, prefix);
    const cJSON *mc = get(m, "max_input_chars_per_word");
    p->max_chars = 100;
    if (mc && !cJSON_IsNull(mc)) {
        int64_t v;
        if ((st = as_int(mc, path, "model.max_input_chars_per_word", 0, INT_MAX, &v))) return st;
        p->max_chars = (int)v;
    }
    const cJSON *v = get(m, "vocab");
    if (!cJSON_IsObject(v)) return bad_type(path, "model.vocab", "an object (token: id)", v);
    int64_t count = 0;
    for (const cJSON *e = v->child; e; e = e->next) count++;
    if (count == 0) return em__fail(EM_ERR_FORMAT, "%s: model.vocab is empty", path);
    if (count >= (1 << 30)) return em__fail(EM_ERR_FORMAT, "%s: model.vocab has too many tokens", path);
    *tok = em__calloc((size_t)count, sizeof **tok);
    *len = em__malloc((size_t)count * sizeof **len);
    if (!*tok || !*len) return EM_ERR_OOM;
    for (const cJSON *e = v->child; e; e = e->next) {
        char f[FLD];
        fld(f, sizeof f, "model.vocab[\"%.60s\"]", e->string ? e->string : "");
        int64_t id;
        if (!cJSON_IsNumber(e)) return bad_type(path, f, "an integer id", e);
        double d = e->valuedouble;
        if (!isfinite(d) || d != floor(d))
            return em__fail(EM_ERR_FORMAT, "%s: %s must be an integer id, not %.17g", path, f, d);
        if (d < 0 || d >= (double)count)
            return em__fail(EM_ERR_FORMAT, "%s: %s is %.17g, outside 0..%lld (ids must run from 0 without gaps)", path,
                            f, d, (long long)count - 1);
        id = (int64_t)d;
        if ((*tok)[id])
            return em__fail(EM_ERR_FORMAT, "%s: model.vocab: tokens \"%.60s\" and \"%.60s\" both have id %lld", path,
                            (*tok)[id], e->string, (long long)id);
        (*tok)[id] = e->string ? e->string : "";
        size_t k = strlen((*tok)[id]);
        if (k > 1 << 20) return em__fail(EM_ERR_FORMAT, "%s: %s: the token is too long", path, f);
        (*len)[id] = (uint32_t)k;
    }
    *n = (int32_t)count;
    return EM_OK;
}

/* The "truncation" and "padding" blocks: checked, recorded in info, and kept as JSON for saving. */
static em_status parse_trunc_pad(const cJSON *root, const char *path, em_tokenizer_info *info, char **trunc_json,
                                 char **pad_json, char **strategy)
{
    em_status st;
    int64_t v;
    const cJSON *t = get(root, "truncation");
    if (t && !cJSON_IsNull(t)) {
        if (!cJSON_IsObject(t)) return bad_type(path, "truncation", "an object or null", t);
        if ((st = as_int(get(t, "max_length"), path, "truncation.max_length", 0, INT_MAX, &v))) return st;
        info->truncation_max_length = (int)v;
        const cJSON *s = get(t, "strategy");
        if (s && !cJSON_IsString(s)) return bad_type(path, "truncation.strategy", "a string", s);
        if (!(*strategy = em__strdup(s ? s->valuestring : "LongestFirst"))) return EM_ERR_OOM;
        info->truncation_strategy = *strategy;
        const cJSON *stride = get(t, "stride");
        if (stride && (st = as_int(stride, path, "truncation.stride", 0, INT_MAX, &v))) return st;
        if (!(*trunc_json = cJSON_PrintUnformatted(t))) return EM_ERR_OOM;
    }
    const cJSON *p = get(root, "padding");
    if (p && !cJSON_IsNull(p)) {
        if (!cJSON_IsObject(p)) return bad_type(path, "padding", "an object or null", p);
        const cJSON *s = get(p, "strategy");
        if (cJSON_IsString(s) && !strcmp(s->valuestring, "BatchLongest")) {
            info->pad_to_longest = true;
        } else if (cJSON_IsObject(s) && get(s, "Fixed")) {
            if ((st = as_int(get(s, "Fixed"), path, "padding.strategy.Fixed", 0, INT_MAX, &v))) return st;
            info->pad_to = (int)v;
        } else {
            return bad_type(path, "padding.strategy", "\"BatchLongest\" or {\"Fixed\": n}", s);
        }
        const cJSON *m = get(p, "pad_to_multiple_of");
        if (m && !cJSON_IsNull(m)) {
            if ((st = as_int(m, path, "padding.pad_to_multiple_of", 0, INT_MAX, &v))) return st;
            info->pad_to_multiple_of = (int)v;
        }
        if (!(*pad_json = cJSON_PrintUnformatted(p))) return EM_ERR_OOM;
    }
    return EM_OK;
}

/* added_tokens: checked here; compared with the vocabulary after the build. */
static em_status parse_added(const cJSON *root, const char *path, const char ***out, int64_t **ids, int *n)
{
    const cJSON *a = get(root, "added_tokens");
    *n = 0;
    if (!a || cJSON_IsNull(a)) return EM_OK;
    if (!cJSON_IsArray(a)) return bad_type(path, "added_tokens", "a list", a);
    int count = cJSON_GetArraySize(a);
    if (count == 0) return EM_OK;
    *out = em__calloc((size_t)count, sizeof **out);
    *ids = em__calloc((size_t)count, sizeof **ids);
    if (!*out || !*ids) return EM_ERR_OOM;
    int i = 0;
    em_status st;
    for (const cJSON *e = a->child; e; e = e->next, i++) {
        char f[FLD], g[FLD + 16];
        fld(f, sizeof f, "added_tokens[%d]", i);
        if (!cJSON_IsObject(e)) return bad_type(path, f, "an object", e);
        const cJSON *c = get(e, "content");
        snprintf(g, sizeof g, "%s.content", f);
        if (!cJSON_IsString(c)) return bad_type(path, g, "a string", c);
        snprintf(g, sizeof g, "%s.id", f);
        if ((st = as_int(get(e, "id"), path, g, 0, INT32_MAX, &(*ids)[i]))) return st;
        static const char *const flags[] = { "single_word", "lstrip", "rstrip", "normalized" };
        for (int k = 0; k < 4; k++) {
            bool on = false;
            snprintf(g, sizeof g, "%s.%s", f, flags[k]);
            if ((st = opt_bool(e, flags[k], path, g, &on, NULL))) return st;
            if (on)
                return em__fail(EM_ERR_UNSUPPORTED, "%s: %s is true for \"%.60s\" (not supported: ember cuts added "
                                "tokens out of the raw text as they are)", path, g, c->valuestring);
        }
        snprintf(g, sizeof g, "%s.special", f);
        bool special;
        if ((st = opt_bool(e, "special", path, g, &special, NULL))) return st;
        (*out)[i] = c->valuestring;
    }
    *n = count;
    return EM_OK;
}

/* ---- em_tokenizer_from_pretrained --------------------------------------------------- */
em_status em_tokenizer_from_pretrained(const char *dir, const em_tokenizer_opts *opts, em_tokenizer **out)
{
    if (!dir || !out) {
        em__misuse("em_tokenizer_from_pretrained", "dir and out must not be NULL");
        return EM_ERR_INVALID;
    }
    *out = NULL;
    em_tokenizer_opts o = opts ? *opts : (em_tokenizer_opts){0};
    if (o.max_input_chars_per_word < 0) {
        em__misuse("em_tokenizer_from_pretrained", "max_input_chars_per_word is %d", o.max_input_chars_per_word);
        return EM_ERR_INVALID;
    }
    em__json_init();
    em_status st = EM_OK;
    cfg_file cfg = {0}, map = {0};
    cJSON *root = NULL;
    char *json_path = join(dir, "tokenizer.json"), *vocab_path = join(dir, "vocab.txt");
    char *data = NULL, *trunc_json = NULL, *pad_json = NULL, *strategy = NULL;
    const char **tok = NULL, **added = NULL, **split = NULL;
    uint32_t *len = NULL;
    int64_t *added_ids = NULL;
    int32_t n = 0;
    int n_added = 0;
    em_tokenizer *t = NULL;
    tj_pipe pipe = { .lower = false };
    em_tokenizer_info info = {0};
    tok_cfg tc;
    if (!json_path || !vocab_path) { st = EM_ERR_OOM; goto done; }
    if ((st = cfg_read(dir, "tokenizer_config.json", &cfg)) || (st = cfg_read(dir, "special_tokens_map.json", &map)) ||
        (st = cfg_settings(&cfg, &tc)))
        goto done;

    bool use_json = file_exists(json_path);
    if (!use_json && !file_exists(vocab_path)) {
        st = em__fail(EM_ERR_NOT_FOUND, "%s: neither %s nor %s exists", dir, json_path, vocab_path);
        goto done;
    }
    /* As transformers: the Bert class rebuilds its pipeline from the config; a vocab.txt is read by it too. */
    bool from_cfg = !use_json || tc.bert_class;
    const char *path = use_json ? json_path : vocab_path;
    if (use_json) {
        if ((st = read_json(json_path, &root)) || (st = parse_model(get(root, "model"), path, &pipe, &tok, &len, &n)))
            goto done;
        const cJSON *norm = get(root, "normalizer");
        if (norm && !cJSON_IsNull(norm) && (st = parse_normalizer(norm, path, "normalizer", &pipe, 0))) goto done;
        if (pipe.nfd && !pipe.strip) {
            st = em__fail(EM_ERR_UNSUPPORTED, "%s: normalizer: NFD without StripAccents after it is not supported "
                          "(ember decomposes text only to strip accents)", path);
            goto done;
        }
        bool ws = false, punct = false;
        const cJSON *pre = get(root, "pre_tokenizer");
        if (!pre || cJSON_IsNull(pre)) {
            st = em__fail(EM_ERR_UNSUPPORTED, "%s: pre_tokenizer is null (not supported: ember splits at whitespace and "
                          "punctuation, as BertPreTokenizer)", path);
            goto done;
        }
        if ((st = parse_pre(pre, path, "pre_tokenizer", &ws, &punct, 0))) goto done;
        if (!ws || !punct) {
            st = em__fail(EM_ERR_UNSUPPORTED, "%s: pre_tokenizer: a split %s is not BERT's (ember reads "
                          "BertPreTokenizer, or WhitespaceSplit with Punctuation)", path,
                          ws ? "at whitespace only" : "at punctuation only");
            goto done;
        }
        if ((st = parse_post(get(root, "post_processor"), path, &pipe)) ||
            (st = parse_decoder(get(root, "decoder"), path)) ||
            (st = parse_added(root, path, &added, &added_ids, &n_added)) ||
            (st = parse_trunc_pad(root, path, &info, &trunc_json, &pad_json, &strategy)))
            goto done;
        const cJSON *pd = get(root, "padding");
        if (cJSON_IsObject(pd) && (st = opt_str(pd, "pad_token", path, "padding.pad_token", &pipe.pad_token)))
            goto done;
        if (pipe.pp_null && !from_cfg) {
            st = em__fail(EM_ERR_UNSUPPORTED, "%s: post_processor is null (not supported: the tokenizer would add no "
                          "[CLS] and [SEP], ember adds them)", path);
            goto done;
        }
    } else if ((st = em__tok_read_lines(vocab_path, &data, &tok, &len, &n))) {
        goto done;
    }

    /* Special tokens: opts, then (Bert class or vocab.txt) special_tokens_map.json, tokenizer_config.json,
     * tokenizer.json, the default; (other classes) tokenizer.json first. */
    em__tok_build_opts b = { .path = path, .lines = !use_json, .vocab_field = "model.vocab",
                             .never_split = o.never_split };
    const char *opt_tok[NSPEC] = { o.unk_token, o.cls_token, o.sep_token, o.pad_token, o.mask_token };
    const char *json_tok[NSPEC] = { pipe.unk, pipe.cls, pipe.sep, pipe.pad_token, NULL };
    static const char *const json_src[NSPEC] = { "model.unk_token", "post_processor", "post_processor",
                                                 "padding.pad_token", NULL };
    bool named[NSPEC] = { false };
    for (int i = 0; i < NSPEC; i++) {
        const char *s = default_token[i], *src = NULL;
        bool found = false;
        if (opt_tok[i]) { s = opt_tok[i]; found = true; }
        if (!found && !from_cfg && json_tok[i]) { s = json_tok[i]; src = json_src[i]; found = true; }
        if (!found && map.spec[i].given) { s = map.spec[i].s; src = map.path; found = named[i] = true; }
        if (!found && cfg.spec[i].given) { s = cfg.spec[i].s; src = cfg.path; found = named[i] = true; }
        if (!found && json_tok[i]) { s = json_tok[i]; src = json_src[i]; found = true; }
        b.special[i] = s;
        b.source[i] = src;
        b.required[i] = named[i] && s;
    }

    /* The pipeline: the config's (Bert class, vocab.txt) or tokenizer.json's, then opts. */
    bool strip_set;
    if (from_cfg) {
        b.lower = tc.lower_set ? tc.lower : true;
        b.strip = tc.strip;
        strip_set = tc.strip_set;
        b.chinese = tc.chinese_set ? tc.chinese : true;
        b.clean = true;
        b.max_chars = 100;
        b.py = b.nfc = !use_json;
    } else {
        b.lower = pipe.lower;
        b.strip = pipe.strip;
        strip_set = pipe.strip_set;
        b.strip_marks = pipe.marks;
        b.chinese = pipe.chinese;
        b.clean = pipe.clean;
        b.nfc = pipe.nfc;
        b.max_chars = pipe.max_chars;
    }
    if (use_json && from_cfg) b.max_chars = 100;
    if (o.do_lower_case) b.lower = o.do_lower_case == EM_TOK_ON;
    if (o.strip_accents) b.strip = o.strip_accents == EM_TOK_ON, strip_set = true;
    else if (!strip_set) b.strip = b.lower;
    if (o.tokenize_chinese_chars) b.chinese = o.tokenize_chinese_chars == EM_TOK_ON;
    if (o.max_input_chars_per_word) b.max_chars = o.max_input_chars_per_word;

    /* Cut out of the raw text: added tokens, additional special tokens, and the named special tokens
     * (all of them with the Bert class, which adds its defaults). Absent ones are skipped by the
     * build; those that must be there are checked after it. */
    if (use_json) {
        int cap = n_added + cfg.n_extra + map.n_extra + NSPEC;
        if (!(split = em__calloc((size_t)cap, sizeof *split))) { st = EM_ERR_OOM; goto done; }
        int k = 0;
        for (int i = 0; i < n_added; i++) split[k++] = added[i];
        for (int i = 0; i < cfg.n_extra; i++) split[k++] = cfg.extra[i];
        for (int i = 0; i < map.n_extra; i++) split[k++] = map.extra[i];
        for (int i = 0; i < NSPEC; i++)
            if (b.special[i] && (from_cfg || named[i] || opt_tok[i])) split[k++] = b.special[i];
        b.split = split;
        b.n_split = k;
    }
    if ((st = em__tok_build(tok, len, n, &b, &t))) goto done;

    /* The files must agree with the vocabulary. */
    for (int i = 0; i < n_added; i++) {
        int32_t id = em_tokenizer_token_to_id(t, added[i]);
        if (id != added_ids[i]) {
            st = id < 0 ? em__fail(EM_ERR_FORMAT, "%s: added_tokens[%d]: \"%.60s\" (id %lld) is not in model.vocab",
                                   path, i, added[i], (long long)added_ids[i])
                        : em__fail(EM_ERR_FORMAT, "%s: added_tokens[%d]: \"%.60s\" has id %lld, but %d in model.vocab",
                                   path, i, added[i], (long long)added_ids[i], id);
            goto done;
        }
    }
    const cfg_file *files[2] = { &cfg, &map };
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < files[f]->n_extra; i++)
            if (em_tokenizer_token_to_id(t, files[f]->extra[i]) < 0) {
                st = em__fail(EM_ERR_FORMAT, "%s: additional_special_tokens: \"%.60s\" is not in the vocabulary of %s",
                              files[f]->path, files[f]->extra[i], path);
                goto done;
            }
    if (use_json && !from_cfg) {
        const char *pp_tok[2] = { pipe.cls, pipe.sep };
        int64_t pp_id[2] = { pipe.cls_id, pipe.sep_id };
        for (int k = 0; k < 2; k++) {
            if (!pp_tok[k]) continue;
            int32_t id = em_tokenizer_token_to_id(t, pp_tok[k]);
            if (id != pp_id[k]) {
                st = id < 0 ? em__fail(EM_ERR_FORMAT, "%s: post_processor: \"%.60s\" is not in model.vocab", path,
                                       pp_tok[k])
                            : em__fail(EM_ERR_FORMAT, "%s: post_processor: \"%.60s\" has id %lld there, but %d in "
                                       "model.vocab", path, pp_tok[k], (long long)pp_id[k], id);
                goto done;
            }
        }
    }
    info.model_max_length = tc.model_max_length;
    t->info = info;
    t->trunc_json = trunc_json;
    t->pad_json = pad_json;
    t->trunc_strategy = strategy;
    trunc_json = pad_json = strategy = NULL;
    *out = t;
    t = NULL;
done:
    em_tokenizer_free(t);
    cJSON_Delete(root);
    cfg_free(&cfg);
    cfg_free(&map);
    em__free(json_path);
    em__free(vocab_path);
    em__free(data);
    em__free(tok);
    em__free(len);
    em__free(added);
    em__free(added_ids);
    em__free(split);
    cJSON_free(trunc_json);
    cJSON_free(pad_json);
    em__free(strategy);
    return st;
}

em_tokenizer_info em_tokenizer_get_info(const em_tokenizer *t)
{
    if (!t) return (em_tokenizer_info){0};
    em_tokenizer_info i = t->info;
    i.do_lower_case = t->lower;
    i.strip_accents = t->strip;
    i.strip_all_marks = t->strip_marks;
    i.tokenize_chinese_chars = t->chinese;
    i.clean_text = t->clean;
    i.nfc = t->nfc;
    i.python_semantics = t->py;
    i.max_input_chars_per_word = t->max_chars;
    return i;
}

int64_t em_tokenizer_model_max_length(const em_tokenizer *t) { return t ? t->info.model_max_length : 0; }

void em_tokenizer_set_model_max_length(em_tokenizer *t, int64_t n)
{
    if (!t || n <= 0) {
        em__misuse("em_tokenizer_set_model_max_length", "needs a tokenizer and a positive length (got %lld)", (long long)n);
        return;
    }
    t->info.model_max_length = n;
}

/* ---- em_tokenizer_save_pretrained ----------------------------------------------------- */
/* mkdir -p */
static em_status make_dirs(const char *dir)
{
    char *p = em__strdup(dir);
    if (!p) return EM_ERR_OOM;
    em_status st = EM_OK;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            st = em__fail(EM_ERR_IO, "%s: cannot create the directory: %s", p, strerror(errno));
            break;
        }
        *s = c;
        if (!c) break;
    }
    struct stat sb;
    if (!st && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        st = em__fail(EM_ERR_IO, "%s: not a directory", dir);
    em__free(p);
    return st;
}

/* Writes dir/name atomically: a temporary file in dir, fsync, rename. */
static em_status write_atomic(const char *dir, const char *name, const char *data, size_t n)
{
    char *path = join(dir, name), *tmp = NULL;
    size_t tl = strlen(dir) + strlen(name) + 16;
    if (path) tmp = em__malloc(tl);
    if (!path || !tmp) {
        em__free(path);
        return EM_ERR_OOM;
    }
    snprintf(tmp, tl, "%s/.%s.XXXXXX", dir, name);
    em_status st = EM_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = em__fail(EM_ERR_IO, "%s: cannot create a temporary file in %s: %s", path, dir, strerror(errno));
        goto out;
    }
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, data + off, n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            st = em__fail(EM_ERR_IO, "%s: write failed: %s", path, w < 0 ? strerror(errno) : "no progress");
            break;
        }
        off += (size_t)w;
    }
    if (!st && fchmod(fd, 0644) != 0) st = em__fail(EM_ERR_IO, "%s: chmod failed: %s", path, strerror(errno));
    if (!st && fsync(fd) != 0) st = em__fail(EM_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && !st) st = em__fail(EM_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (!st && rename(tmp, path) != 0) st = em__fail(EM_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
    if (st) unlink(tmp);
out:
    em__free(path);
    em__free(tmp);
    return st;
}

/* The cJSON builders return NULL on OOM; `ok` collects that. */
typedef struct jb { bool ok; } jb;
static cJSON *chk(jb *b, cJSON *v) { if (!v) b->ok = false; return v; }
static void add(jb *b, cJSON *obj, const char *key, cJSON *v)
{
    if (!v) { b->ok = false; return; }
    if (!cJSON_AddItemToObject(obj, key, v)) { cJSON_Delete(v); b->ok = false; }
}
static void push(jb *b, cJSON *arr, cJSON *v)
{
    if (!v) { b->ok = false; return; }
    if (!cJSON_AddItemToArray(arr, v)) { cJSON_Delete(v); b->ok = false; }
}
static cJSON *str_or_null(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }
static cJSON *piece_json(jb *b, const char *kind_, const char *id, int type_id)
{
    cJSON *o = chk(b, cJSON_CreateObject()), *in = chk(b, cJSON_CreateObject());
    if (!o || !in) { cJSON_Delete(o); cJSON_Delete(in); return NULL; }
    add(b, in, "id", cJSON_CreateString(id));
    add(b, in, "type_id", cJSON_CreateNumber(type_id));
    add(b, o, kind_, in);
    return o;
}

/* The special token i, or NULL when the tokenizer has none in its vocabulary. */
static const char *special_tok(const em_tokenizer *t, int i)
{
    return t->special_id[i] >= 0 ? em__tok_str(t, t->special_id[i]) : NULL;
}

/* Does transformers' BertTokenizer rebuild exactly this pipeline from tokenizer_config.json? */
static bool bert_class(const em_tokenizer *t)
{
    return t->clean && !t->strip_marks && (t->py || !t->nfc) && t->max_chars == 100;
}

static cJSON *bert_normalizer(jb *b, const em_tokenizer *t, bool strip_null)
{
    cJSON *n = chk(b, cJSON_CreateObject());
    if (!n) return NULL;
    add(b, n, "type", cJSON_CreateString("BertNormalizer"));
    add(b, n, "clean_text", cJSON_CreateBool(t->clean));
    add(b, n, "handle_chinese_chars", cJSON_CreateBool(t->chinese));
    bool strip = t->strip && !t->strip_marks;
    add(b, n, "strip_accents", strip_null ? cJSON_CreateNull() : cJSON_CreateBool(strip));
    add(b, n, "lowercase", cJSON_CreateBool(t->lower));
    return n;
}

static cJSON *typed(jb *b, const char *type)
{
    cJSON *o = chk(b, cJSON_CreateObject());
    if (o) add(b, o, "type", cJSON_CreateString(type));
    return o;
}

static int cmp_word_id(const void *a, const void *b)
{
    const em__tok_word *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

static cJSON *tokenizer_json(jb *b, const em_tokenizer *t)
{
    cJSON *r = chk(b, cJSON_CreateObject());
    if (!r) return NULL;
    add(b, r, "version", cJSON_CreateString("1.0"));
    add(b, r, "truncation", t->trunc_json ? cJSON_Parse(t->trunc_json) : cJSON_CreateNull());
    add(b, r, "padding", t->pad_json ? cJSON_Parse(t->pad_json) : cJSON_CreateNull());

    /* added_tokens: the tokens cut out of the raw text, by id */
    cJSON *added = chk(b, cJSON_CreateArray());
    int n_cut = t->n_never - t->n_user;
    em__tok_word *cut = n_cut ? em__malloc((size_t)n_cut * sizeof *cut) : NULL;
    if (n_cut && !cut) b->ok = false;
    int k = 0;
    for (int i = 0; cut && i < n_cut; i++)
        if (t->never[i].id >= 0) cut[k++] = t->never[i];
    if (k) qsort(cut, (size_t)k, sizeof *cut, cmp_word_id);
    for (int i = 0; added && i < k; i++) {
        cJSON *a = chk(b, cJSON_CreateObject());
        if (!a) break;
        add(b, a, "id", cJSON_CreateNumber(cut[i].id));
        add(b, a, "content", cJSON_CreateString(em__tok_str(t, cut[i].id)));
        add(b, a, "single_word", cJSON_CreateFalse());
        add(b, a, "lstrip", cJSON_CreateFalse());
        add(b, a, "rstrip", cJSON_CreateFalse());
        add(b, a, "normalized", cJSON_CreateFalse());
        add(b, a, "special", cJSON_CreateTrue());
        push(b, added, a);
    }
    em__free(cut);
    add(b, r, "added_tokens", added);

    /* normalizer */
    if (bert_class(t) || (!t->strip_marks && !(t->nfc && !t->py))) {
        add(b, r, "normalizer", bert_normalizer(b, t, t->strip == t->lower));
    } else {
        cJSON *seq = typed(b, "Sequence"), *list = chk(b, cJSON_CreateArray());
        if (t->nfc && !t->py) push(b, list, typed(b, "NFC"));
        push(b, list, bert_normalizer(b, t, false));
        if (t->strip_marks) {
            push(b, list, typed(b, "NFD"));
            push(b, list, typed(b, "StripAccents"));
        }
        if (seq) add(b, seq, "normalizers", list);
        else cJSON_Delete(list);
        add(b, r, "normalizer", seq);
    }
    add(b, r, "pre_tokenizer", typed(b, "BertPreTokenizer"));

    /* post_processor: [CLS]:0 $A:0 [SEP]:0 ($B:1 [SEP]:1) */
    const char *cls = special_tok(t, EM__TOK_CLS), *sep = special_tok(t, EM__TOK_SEP);
    cJSON *pp = typed(b, "TemplateProcessing");
    cJSON *single = chk(b, cJSON_CreateArray()), *pair = chk(b, cJSON_CreateArray());
    push(b, single, piece_json(b, "SpecialToken", cls, 0));
    push(b, single, piece_json(b, "Sequence", "A", 0));
    push(b, single, piece_json(b, "SpecialToken", sep, 0));
    push(b, pair, piece_json(b, "SpecialToken", cls, 0));
    push(b, pair, piece_json(b, "Sequence", "A", 0));
    push(b, pair, piece_json(b, "SpecialToken", sep, 0));
    push(b, pair, piece_json(b, "Sequence", "B", 1));
    push(b, pair, piece_json(b, "SpecialToken", sep, 1));
    cJSON *sp = chk(b, cJSON_CreateObject());
    for (int i = 0; sp && i < 2; i++) {
        const char *s = i ? sep : cls;
        if (i && !strcmp(cls, sep)) break;
        cJSON *e = chk(b, cJSON_CreateObject()), *ids = chk(b, cJSON_CreateArray()), *toks = chk(b, cJSON_CreateArray());
        push(b, ids, cJSON_CreateNumber(t->special_id[i ? EM__TOK_SEP : EM__TOK_CLS]));
        push(b, toks, cJSON_CreateString(s));
        if (e) {
            add(b, e, "id", cJSON_CreateString(s));
            add(b, e, "ids", ids);
            add(b, e, "tokens", toks);
        } else {
            cJSON_Delete(ids);
            cJSON_Delete(toks);
        }
        add(b, sp, s, e);
    }
    if (pp) {
        add(b, pp, "single", single);
        add(b, pp, "pair", pair);
        add(b, pp, "special_tokens", sp);
    } else {
        cJSON_Delete(single);
        cJSON_Delete(pair);
        cJSON_Delete(sp);
    }
    add(b, r, "post_processor", pp);

    cJSON *dec = typed(b, "WordPiece");
    if (dec) {
        add(b, dec, "prefix", cJSON_CreateString("##"));
        add(b, dec, "cleanup", cJSON_CreateTrue());
    }
    add(b, r, "decoder", dec);

    cJSON *m = typed(b, "WordPiece");
    if (m) {
        add(b, m, "unk_token", cJSON_CreateString(special_tok(t, EM__TOK_UNK)));
        add(b, m, "continuing_subword_prefix", cJSON_CreateString("##"));
        add(b, m, "max_input_chars_per_word", cJSON_CreateNumber(t->max_chars));
        cJSON *v = chk(b, cJSON_CreateObject());
        /* ids in order; cJSON_AddItemToObject appends by walking the list, so link the items directly */
        cJSON *last = NULL;
        for (int32_t id = 0; v && b->ok && id < t->n_vocab; id++) {
            cJSON *e = chk(b, cJSON_CreateNumber(id));
            if (!e) break;
            e->string = (char *)cJSON_malloc(em__tok_len(t, id) + 1);
            if (!e->string) { cJSON_Delete(e); b->ok = false; break; }
            memcpy(e->string, em__tok_str(t, id), em__tok_len(t, id) + 1);
            if (last) { last->next = e; e->prev = last; }
            else v->child = e;
            last = e;
            v->child->prev = last;
        }
        add(b, m, "vocab", v);
    }
    add(b, r, "model", m);
    return r;
}

static cJSON *config_json(jb *b, const em_tokenizer *t, bool map_only)
{
    cJSON *c = chk(b, cJSON_CreateObject());
    if (!c) return NULL;
    if (!map_only) {
        add(b, c, "tokenizer_class", cJSON_CreateString(bert_class(t) ? "BertTokenizer" : "PreTrainedTokenizerFast"));
        add(b, c, "do_lower_case", cJSON_CreateBool(t->lower));
        add(b, c, "strip_accents", t->strip == t->lower && !t->strip_marks ? cJSON_CreateNull()
                                                                            : cJSON_CreateBool(t->strip));
        add(b, c, "tokenize_chinese_chars", cJSON_CreateBool(t->chinese));
        add(b, c, "model_max_length", t->info.model_max_length > 0 ? cJSON_CreateNumber((double)t->info.model_max_length)
                                                                   : cJSON_CreateRaw("1000000000000000019884624838656"));
        add(b, c, "clean_up_tokenization_spaces", cJSON_CreateTrue());
    }
    static const int order[NSPEC] = { EM__TOK_UNK, EM__TOK_SEP, EM__TOK_PAD, EM__TOK_CLS, EM__TOK_MASK };
    for (int k = 0; k < NSPEC; k++) {
        int i = order[k];
        const char *s = special_tok(t, i);
        if (s || !map_only) add(b, c, role[i], str_or_null(s));
    }
    return c;
}

em_status em_tokenizer_save_pretrained(const em_tokenizer *t, const char *dir)
{
    if (!t || !dir) {
        em__misuse("em_tokenizer_save_pretrained", "tokenizer and dir must not be NULL");
        return EM_ERR_INVALID;
    }
    em__json_init();
    /* vocab.txt: one token a line; tokenizer.json: a map, so at most one empty token */
    size_t total = 0;
    int empty = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t k = em__tok_len(t, id);
        const char *s = em__tok_str(t, id);
        if (memchr(s, '\n', k) || memchr(s, '\r', k))
            return em__fail(EM_ERR_FORMAT, "%s/vocab.txt: token %d holds a line break and cannot be written", dir, id);
        if (k == 0 && ++empty > 1)
            return em__fail(EM_ERR_FORMAT, "%s/tokenizer.json: tokens %d and an earlier one are empty; "
                            "model.vocab cannot hold both", dir, id);
        total += k + 1;
    }
    em_status st = make_dirs(dir);
    if (st) return st;

    char *vocab = em__malloc(total + 1);
    if (!vocab) return EM_ERR_OOM;
    size_t used = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t k = em__tok_len(t, id);
        memcpy(vocab + used, em__tok_str(t, id), k);
        used += k;
        vocab[used++] = '\n';
    }
    st = write_atomic(dir, "vocab.txt", vocab, used);
    em__free(vocab);
    if (st) return st;

    static const char *const names[3] = { "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json" };
    for (int f = 0; f < 3 && !st; f++) {
        jb b = { true };
        cJSON *j = f == 2 ? tokenizer_json(&b, t) : config_json(&b, t, f == 1);
        char *text = b.ok && j ? cJSON_Print(j) : NULL;
        cJSON_Delete(j);
        if (!text) return em__fail(EM_ERR_OOM, "%s/%s: out of memory", dir, names[f]);
        size_t n = strlen(text);
        text[n] = '\n';   /* cJSON_Print's buffer ends with the NUL: room for a final newline */
        st = write_atomic(dir, names[f], text, n + 1);
        cJSON_free(text);
    }
    if (st) return st;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);   /* make the renames durable */
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return EM_OK;
}
