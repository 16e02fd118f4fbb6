/* ember — data/: the WordPiece tokenizer's vocabulary and its API: building
 * the hash table from a list of tokens (vocab.txt here, tokenizer.json in
 * tokenizer_json.c), encoding single texts, pairs and batches
 * (special tokens, longest_first truncation, padding), and decoding.
 * Text -> ids lives in tokenizer_text.c. */
#include "data/tokenizer_internal.h"
#include "tensor/support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Misuse in a function returning em_status. */
#define TK_CHECK(cond, op, ...) do { if (!(cond)) { em__misuse(op, __VA_ARGS__); return EM_ERR_INVALID; } } while (0)

/* ---- loading --------------------------------------------------------------- */

/* Inserts key (token id, cont). Returns the id already holding that key, or -1. */
static int32_t insert(em_tokenizer *t, int32_t id, bool cont)
{
    size_t skip = cont ? 2 : 0;
    const uint8_t *s = (const uint8_t *)em__tok_str(t, id) + skip;
    size_t n = em__tok_len(t, id) - skip;
    int32_t old = em__tok_lookup(t, s, n, cont);
    if (old >= 0) return old;
    uint64_t h = em__tok_hash(s, n, cont);
    uint32_t i = (uint32_t)h & t->mask;
    while (t->slots[i].key >= 0) i = (i + 1) & t->mask;
    t->slots[i] = (em__tok_slot){ (uint32_t)(h >> 32), 2 * id + cont };
    if (n > t->max_key[cont]) t->max_key[cont] = n;
    return -1;
}

/* Appends a NUL-terminated copy of s[0,n) to the pool; returns it. */
static const char *pool_add(em_tokenizer *t, size_t *used, const char *s, size_t n)
{
    char *p = t->pool + *used;
    memcpy(p, s, n);
    p[n] = 0;
    *used += n + 1;
    return p;
}

static void set_bit(uint8_t map[32], uint8_t c) { map[c >> 3] |= (uint8_t)(1u << (c & 7)); }

static bool has_utf8_error(const char *s, size_t n, size_t *at)
{
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) { *at = i; return true; }
        i += (size_t)k;
    }
    return false;
}

/* Where a special token came from, for messages. */
static const char *const special_role[EM__TOK_NSPECIAL] = { "unk_token", "cls_token", "sep_token", "pad_token",
                                                             "mask_token" };

em_status em__tok_build(const char *const *tok, const uint32_t *len, int32_t n, const em__tok_build_opts *o,
                        em_tokenizer **out)
{
    *out = NULL;
    const char *path = o->path;
    const char *names[EM__TOK_NSPECIAL];
    size_t size = 0, extra = 0;
    for (int32_t i = 0; i < n; i++) size += (size_t)len[i] + 1;
    for (int i = 0; i < EM__TOK_NSPECIAL; i++) {
        names[i] = o->special[i] ? o->special[i] : "";
        extra += strlen(names[i]) + 1;
    }
    int n_split = o->split ? o->n_split : 0, n_user = 0;
    for (int i = 0; i < n_split; i++) extra += strlen(o->split[i]) + 1;
    for (const char *const *p = o->never_split; p && *p; p++, n_user++) extra += strlen(*p) + 1;

    em_tokenizer *t = em__calloc(1, sizeof *t);
    if (!t) return EM_ERR_OOM;
    em_status st = EM_OK;
    t->n_vocab = n;
    size_t slots = 64;
    while (slots < 4 * (size_t)n) slots *= 2;   /* at most 2 keys per token: load <= 1/2 */
    t->mask = (uint32_t)(slots - 1);
    t->pool = em__malloc(size + extra + 1);
    t->off = em__malloc(((size_t)n + 1) * sizeof *t->off);
    t->slots = em__malloc(slots * sizeof *t->slots);
    t->never = em__calloc((size_t)(EM__TOK_NSPECIAL + n_split + n_user), sizeof *t->never);
    if (!t->pool || !t->off || !t->slots || !t->never) { st = EM_ERR_OOM; goto fail; }
    memset(t->slots, 0xff, slots * sizeof *t->slots);

    size_t used = 0;
    t->off[0] = 0;
    for (int32_t id = 0; id < n; id++) {
        const char *s = tok[id];
        size_t k = len[id], bad;
        if (k && has_utf8_error(s, k, &bad)) {
            st = o->lines ? em__fail(EM_ERR_FORMAT, "%s:%d: invalid UTF-8 at byte %zu of the line", path, id + 1, bad + 1)
                          : em__fail(EM_ERR_FORMAT, "%s: %s: the token with id %d is not valid UTF-8 (byte %zu)", path,
                                     o->vocab_field, id, bad + 1);
            goto fail;
        }
        if (k && memchr(s, 0, k)) {
            st = o->lines ? em__fail(EM_ERR_FORMAT, "%s:%d: NUL byte in token", path, id + 1)
                          : em__fail(EM_ERR_FORMAT, "%s: %s: the token with id %d holds a NUL character", path,
                                     o->vocab_field, id);
            goto fail;
        }
        pool_add(t, &used, k ? s : "", k);
        t->off[id + 1] = (uint32_t)used;
        if (k == 0) continue;   /* an empty token keeps its id; no text maps to it */
        int32_t dup = insert(t, id, false);
        if (dup >= 0) {
            st = o->lines ? em__fail(EM_ERR_FORMAT, "%s:%d: duplicate token \"%.60s\" (first on line %d)", path, id + 1,
                                     em__tok_str(t, id), dup + 1)
                          : em__fail(EM_ERR_FORMAT, "%s: %s: duplicate token \"%.60s\" (ids %d and %d)", path,
                                     o->vocab_field, em__tok_str(t, id), dup, id);
            goto fail;
        }
        if (k > 2 && memcmp(em__tok_str(t, id), "##", 2) == 0) insert(t, id, true);
    }

    /* The pool after the vocabulary: special tokens, then the split tokens, then never_split words. */
    for (int i = 0; i < EM__TOK_NSPECIAL; i++) {
        size_t k = strlen(names[i]);
        t->special[i] = pool_add(t, &used, names[i], k);
        t->special_id[i] = k ? em_tokenizer_token_to_id(t, names[i]) : -1;
        if (t->special_id[i] >= 0 || (i > EM__TOK_SEP && !o->required[i])) continue;
        char from[300] = "";
        if (o->source[i]) snprintf(from, sizeof from, " (the %s set by %s)", special_role[i], o->source[i]);
        else if (!o->lines) snprintf(from, sizeof from, " (the %s)", special_role[i]);
        if (!k)
            st = em__fail(EM_ERR_FORMAT, "%s: no %s is set%s%s", path, special_role[i], o->source[i] ? " by " : "",
                          o->source[i] ? o->source[i] : "");
        else if (o->lines)
            st = em__fail(EM_ERR_FORMAT, "%s: the vocabulary has no %s token%s", path, names[i], from);
        else
            st = em__fail(EM_ERR_FORMAT, "%s: %s has no token \"%.60s\"%s", path, o->vocab_field, names[i], from);
        goto fail;
    }
    int n_cut = o->split ? n_split : EM__TOK_NSPECIAL;
    for (int i = 0; i < n_cut; i++) {
        const char *s = o->split ? o->split[i] : t->special[i];
        size_t k = strlen(s);
        bool seen = false;
        for (int j = 0; j < t->n_never; j++) seen |= strcmp(t->never[j].s, s) == 0;
        int32_t id = k ? em_tokenizer_token_to_id(t, s) : -1;
        if (!k || seen || (o->split && id < 0)) continue;
        s = o->split ? pool_add(t, &used, s, k) : s;
        t->never[t->n_never++] = (em__tok_word){ s, k, id, false };
        set_bit(t->special_first, (uint8_t)s[0]);
        set_bit(t->never_first, (uint8_t)s[0]);
    }
    for (int i = 0; i < n_user; i++) {
        size_t k = strlen(o->never_split[i]);
        if (!k) continue;
        const char *s = pool_add(t, &used, o->never_split[i], k);
        t->never[t->n_never++] = (em__tok_word){ s, k, em_tokenizer_token_to_id(t, s), true };
        t->n_user++;
        set_bit(t->user_first, (uint8_t)s[0]);
        set_bit(t->never_first, (uint8_t)s[0]);
    }
    t->lower = o->lower;
    t->strip = o->strip;
    t->strip_marks = o->strip && o->strip_marks;
    t->chinese = o->chinese;
    t->clean = o->clean;
    t->nfc = o->nfc;
    t->py = o->py;
    t->max_chars = o->max_chars;
    *out = t;
    return EM_OK;
fail:
    em_tokenizer_free(t);
    return st;
}

em_status em__tok_read_lines(const char *path, char **data, const char ***tok, uint32_t **len, int32_t *n)
{
    size_t size = 0;
    *data = NULL;
    *tok = NULL;
    *len = NULL;
    *n = 0;
    em_status st = em__read_file(path, 0, data, &size);
    if (st) return st;
    char *d = *data;
    /* Lines end at \n, \r\n or \r (Python's universal newlines, as HF reads it). */
    int32_t n_lines = 0;
    for (size_t i = 0; i < size; i++) {
        if (d[i] == '\n' || d[i] == '\r') {
            n_lines++;
            if (d[i] == '\r' && i + 1 < size && d[i + 1] == '\n') i++;
        }
    }
    if (size && d[size - 1] != '\n' && d[size - 1] != '\r') n_lines++;
    if (n_lines >= (1 << 30) || size >= UINT32_MAX / 2) {
        em__free(d);
        *data = NULL;
        return em__fail(EM_ERR_FORMAT, "%s: too large (%d lines, %zu bytes)", path, n_lines, size);
    }
    *tok = em__malloc(((size_t)n_lines + 1) * sizeof **tok);
    *len = em__malloc(((size_t)n_lines + 1) * sizeof **len);
    if (!*tok || !*len) {
        em__free(*tok);
        em__free(*len);
        em__free(d);
        *data = NULL;
        *tok = NULL;
        *len = NULL;
        return EM_ERR_OOM;
    }
    size_t pos = 0;
    for (int32_t id = 0; id < n_lines; id++) {
        size_t e = pos;
        while (e < size && d[e] != '\n' && d[e] != '\r') e++;
        (*tok)[id] = d + pos;
        (*len)[id] = (uint32_t)(e - pos);
        pos = e + (e < size && d[e] == '\r' && e + 1 < size && d[e + 1] == '\n' ? 2 : 1);
    }
    *n = n_lines;
    return EM_OK;
}

em_status em_tokenizer_load(const char *path, const em_tokenizer_opts *opts, em_tokenizer **out)
{
    TK_CHECK(out && path, "em_tokenizer_load", "path and out must not be NULL");
    *out = NULL;
    em_tokenizer_opts o = opts ? *opts : (em_tokenizer_opts){0};
    TK_CHECK(o.max_input_chars_per_word >= 0, "em_tokenizer_load", "max_input_chars_per_word is %d",
             o.max_input_chars_per_word);
    char *data;
    const char **tok;
    uint32_t *len;
    int32_t n;
    em_status st = em__tok_read_lines(path, &data, &tok, &len, &n);
    if (st) return st;
    em__tok_build_opts b = {
        .path = path, .lines = true,
        .special = { o.unk_token ? o.unk_token : "[UNK]", o.cls_token ? o.cls_token : "[CLS]",
                     o.sep_token ? o.sep_token : "[SEP]", o.pad_token ? o.pad_token : "[PAD]",
                     o.mask_token ? o.mask_token : "[MASK]" },
        .never_split = o.never_split,
        .lower = o.do_lower_case != EM_TOK_OFF,
        .chinese = o.tokenize_chinese_chars != EM_TOK_OFF,
        .clean = true, .nfc = true, .py = true,
        .max_chars = o.max_input_chars_per_word ? o.max_input_chars_per_word : 100,
    };
    b.strip = o.strip_accents == EM_TOK_DEFAULT ? b.lower : o.strip_accents == EM_TOK_ON;
    st = em__tok_build((const char *const *)tok, len, n, &b, out);
    em__free(tok);
    em__free(len);
    em__free(data);
    return st;
}

void em_tokenizer_free(em_tokenizer *t)
{
    if (!t) return;
    em__free(t->pool);
    em__free(t->off);
    em__free(t->slots);
    em__free(t->never);
    em__free(t->trunc_json);
    em__free(t->pad_json);
    em__free(t->trunc_strategy);
    em__free(t);
}

int32_t em_tokenizer_vocab_size(const em_tokenizer *t) { return t ? t->n_vocab : 0; }

int32_t em_tokenizer_token_to_id(const em_tokenizer *t, const char *token)
{
    if (!t || !token || !*token) return -1;
    return em__tok_lookup(t, (const uint8_t *)token, strlen(token), false);
}

const char *em_tokenizer_id_to_token(const em_tokenizer *t, int32_t id)
{
    return t && id >= 0 && id < t->n_vocab ? em__tok_str(t, id) : NULL;
}

em_special_ids em_tokenizer_special_ids(const em_tokenizer *t)
{
    if (!t) return (em_special_ids){ -1, -1, -1, -1, -1 };
    const int32_t *s = t->special_id;
    return (em_special_ids){ s[EM__TOK_UNK], s[EM__TOK_CLS], s[EM__TOK_SEP], s[EM__TOK_PAD], s[EM__TOK_MASK] };
}

/* ---- encoding ------------------------------------------------------------------ */
void em_encoding_free(em_encoding *e)
{
    if (!e) return;
    em__free(e->ids);
    memset(e, 0, sizeof *e);
}

/* Builds the encoding of a (na ids) and b (nb ids, or NULL for a single text). */
static em_status assemble(const em_tokenizer *t, const int32_t *a, int na, const int32_t *b, int nb,
                          const em_encode_opts *o, em_encoding *out)
{
    bool add = o->add_special_tokens != EM_TOK_OFF;
    int nspecial = add ? (b ? 3 : 2) : 0;
    int removed = 0;
    if (o->max_length > 0) {
        if (o->max_length < nspecial)
            return em__fail(EM_ERR_INVALID, "max_length %d leaves no room for the %d special tokens",
                            o->max_length, nspecial);
        long over = (long)na + nb + nspecial - o->max_length;
        if (over > 0) {
            removed = (int)over;
            if (!b) {
                na -= removed;
            } else {
                /* longest_first: one id at a time from the longer, from b on ties. */
                int first = abs(na - nb) < removed ? abs(na - nb) : removed;
                int second = removed - first;
                int ra = na > nb ? first + second / 2 : second / 2;
                na -= ra;
                nb -= removed - ra;
            }
        }
    }
    int len = na + nb + nspecial;
    int padded = o->pad_to_max_length && o->max_length > len ? o->max_length : len;
    int32_t pad = t->special_id[EM__TOK_PAD];
    if (padded > len && pad < 0) return em__fail(EM_ERR_INVALID, "cannot pad: the vocabulary has no %s token",
                                                 t->special[EM__TOK_PAD]);
    size_t n = padded ? (size_t)padded : 1;
    int32_t *mem = em__malloc(n * (2 * sizeof(int32_t) + 1));
    if (!mem) return EM_ERR_OOM;
    *out = (em_encoding){ .ids = mem, .type_ids = mem + n, .attention_mask = (uint8_t *)(mem + 2 * n),
                          .len = padded, .n_truncated = removed };
    int k = 0;
    int32_t cls = t->special_id[EM__TOK_CLS], sep = t->special_id[EM__TOK_SEP];
    if (add) { out->ids[k] = cls; out->type_ids[k++] = 0; }
    for (int i = 0; i < na; i++) { out->ids[k] = a[i]; out->type_ids[k++] = 0; }
    if (add) { out->ids[k] = sep; out->type_ids[k++] = 0; }
    if (b) {
        for (int i = 0; i < nb; i++) { out->ids[k] = b[i]; out->type_ids[k++] = 1; }
        if (add) { out->ids[k] = sep; out->type_ids[k++] = 1; }
    }
    memset(out->attention_mask, 1, (size_t)k);
    for (; k < padded; k++) { out->ids[k] = pad; out->type_ids[k] = 0; out->attention_mask[k] = 0; }
    return EM_OK;
}

static em_status encode_one(const em_tokenizer *t, const char *text, const char *pair, const em_encode_opts *o,
                            em__tok_work *w, em_encoding *out)
{
    memset(out, 0, sizeof *out);
    w->ids.n = 0;
    em_status st = em__tok_text_to_ids(t, text, pair ? "the first text" : "the text", w);
    if (st) return st;
    int na = w->ids.n;
    if (pair && (st = em__tok_text_to_ids(t, pair, "the second text", w))) return st;
    /* a pair whose texts both gave no ids still has a second segment; the
     * worker buffer may never have been allocated */
    static const int32_t none[1];
    const int32_t *ids = w->ids.v ? w->ids.v : none;
    return assemble(t, ids, na, pair ? ids + na : NULL, w->ids.n - na, o, out);
}

static em_status check_opts(const char *op, const em_tokenizer *t, const em_encode_opts *o, const void *out)
{
    TK_CHECK(t && out, op, "tokenizer and out must not be NULL");
    TK_CHECK(o->max_length >= 0 && o->num_threads >= 0, op, "max_length %d and num_threads %d must be >= 0",
             o->max_length, o->num_threads);
    TK_CHECK(!o->pad_to_max_length || o->max_length > 0, op, "pad_to_max_length needs max_length > 0");
    return EM_OK;
}

em_status em_tokenizer_encode_pair(const em_tokenizer *t, const char *text, const char *pair_text,
                                   const em_encode_opts *opts, em_encoding *out)
{
    em_encode_opts o = opts ? *opts : (em_encode_opts){0};
    em_status st = check_opts("em_tokenizer_encode", t, &o, out);
    if (st) return st;
    TK_CHECK(text, "em_tokenizer_encode", "text must not be NULL");
    em__tok_work w = {0};
    st = encode_one(t, text, pair_text, &o, &w, out);
    em__tok_work_free(&w);
    return st;
}

em_status em_tokenizer_encode(const em_tokenizer *t, const char *text, const em_encode_opts *opts, em_encoding *out)
{
    return em_tokenizer_encode_pair(t, text, NULL, opts, out);
}

/* ---- batches ------------------------------------------------------------------- */
enum { BATCH_CHUNK = 16 };

typedef struct batch_job {
    const em_tokenizer *t;
    const char *const *texts, *const *pairs;
    const em_encode_opts *o;
    em_encoding *out;
    int n;
    atomic_int next;
    atomic_int err_index;      /* lowest failing index so far, or n */
    pthread_mutex_t lock;
    em_status err_status;
    char err_msg[512];
} batch_job;

static void *batch_worker(void *arg)
{
    batch_job *j = arg;
    em__tok_work w = {0};
    for (;;) {
        int i0 = atomic_fetch_add(&j->next, BATCH_CHUNK);
        if (i0 >= j->n || i0 > atomic_load(&j->err_index)) break;
        int i1 = i0 + BATCH_CHUNK < j->n ? i0 + BATCH_CHUNK : j->n;
        for (int i = i0; i < i1; i++) {
            em_status st = encode_one(j->t, j->texts[i], j->pairs ? j->pairs[i] : NULL, j->o, &w, &j->out[i]);
            if (st == EM_OK) continue;
            pthread_mutex_lock(&j->lock);
            if (i < atomic_load(&j->err_index)) {
                atomic_store(&j->err_index, i);
                j->err_status = st;
                snprintf(j->err_msg, sizeof j->err_msg, "%s", em_last_error());
            }
            pthread_mutex_unlock(&j->lock);
            break;
        }
    }
    em__tok_work_free(&w);
    return NULL;
}

em_status em_tokenizer_encode_batch(const em_tokenizer *t, int n, const char *const *texts,
                                    const char *const *pairs, const em_encode_opts *opts, em_encoding *out)
{
    em_encode_opts o = opts ? *opts : (em_encode_opts){0};
    em_status st = check_opts("em_tokenizer_encode_batch", t, &o, out);
    if (st) return st;
    TK_CHECK(n >= 0 && (texts || n == 0), "em_tokenizer_encode_batch", "n is %d and texts %s", n,
             texts ? "non-NULL" : "NULL");
    for (int i = 0; i < n; i++) {
        TK_CHECK(texts[i] && (!pairs || pairs[i]), "em_tokenizer_encode_batch", "text %d is NULL", i);
        memset(&out[i], 0, sizeof out[i]);
    }
    int nt = o.num_threads ? o.num_threads : em_num_threads();
    int max_nt = (n + BATCH_CHUNK - 1) / BATCH_CHUNK;
    if (nt > max_nt) nt = max_nt;
    if (nt < 1) nt = 1;

    batch_job j = { .t = t, .texts = texts, .pairs = pairs, .o = &o, .out = out, .n = n };
    atomic_init(&j.next, 0);
    atomic_init(&j.err_index, n);
    pthread_mutex_init(&j.lock, NULL);
    pthread_t th[64];
    if (nt > 64) nt = 64;
    int started = 0;
    for (; started < nt - 1; started++)   /* the caller is the last worker; a failed start leaves fewer */
        if (pthread_create(&th[started], NULL, batch_worker, &j) != 0) break;
    batch_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.lock);

    int bad = atomic_load(&j.err_index);
    if (bad == n) return EM_OK;
    for (int i = 0; i < n; i++) em_encoding_free(&out[i]);
    return em__fail(j.err_status, "text %d: %s", bad, j.err_msg);
}

/* ---- decoding ------------------------------------------------------------------ */
/* Python's str.replace(from, to) in place, for len(to) <= len(from). */
static size_t replace_all(char *s, size_t n, const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to), r = 0, w = 0;
    while (r < n) {
        if (r + fl <= n && memcmp(s + r, from, fl) == 0) {
            memcpy(s + w, to, tl);
            w += tl;
            r += fl;
        } else {
            s[w++] = s[r++];
        }
    }
    s[w] = 0;
    return w;
}

/* Python's str.isspace() for one code point. */
static bool py_space(int32_t c)
{
    if (c < 0x80) return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20);
    const utf8proc_property_t *p = utf8proc_get_property(c);
    return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

/* Python's str.strip(): returns the new length; *start the offset of the kept part. */
static size_t py_strip(const char *s, size_t n, size_t *start)
{
    size_t a = 0, b = n;
    while (a < b) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + a, (utf8proc_ssize_t)(b - a), &c);
        if (k <= 0 || !py_space(c)) break;
        a += (size_t)k;
    }
    while (b > a) {
        size_t p = b - 1;
        while (p > a && ((uint8_t)s[p] & 0xC0) == 0x80) p--;
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + p, (utf8proc_ssize_t)(b - p), &c);
        if (k <= 0 || !py_space(c)) break;
        b = p;
    }
    *start = a;
    return b - a;
}

em_status em_tokenizer_decode(const em_tokenizer *t, const int32_t *ids, int n, const em_decode_opts *opts,
                              char **text)
{
    TK_CHECK(t && text && n >= 0 && (ids || n == 0), "em_tokenizer_decode", "tokenizer, ids and text must not be NULL");
    *text = NULL;
    em_decode_opts o = opts ? *opts : (em_decode_opts){0};
    const char *unk = t->special[EM__TOK_UNK];
    size_t total = 1;
    for (int i = 0; i < n; i++) {
        const char *s = em_tokenizer_id_to_token(t, ids[i]);
        total += strlen(s ? s : unk) + 1;
    }
    if (em__alloc_should_fail()) return em__fail(EM_ERR_OOM, "em_tokenizer_decode: out of memory");
    char *buf = malloc(total);
    if (!buf) return em__fail(EM_ERR_OOM, "em_tokenizer_decode: out of memory (%zu bytes)", total);
    size_t len = 0;
    bool first = true;
    for (int i = 0; i < n; i++) {
        bool special = false;
        for (int k = 0; k < EM__TOK_NSPECIAL; k++) special |= t->special_id[k] >= 0 && ids[i] == t->special_id[k];
        if (o.skip_special_tokens && special) continue;
        const char *s = em_tokenizer_id_to_token(t, ids[i]);
        if (!s) s = unk;
        if (!first) buf[len++] = ' ';
        first = false;
        size_t k = strlen(s);
        memcpy(buf + len, s, k);
        len += k;
    }
    buf[len] = 0;
    len = replace_all(buf, len, " ##", "");
    size_t start;
    len = py_strip(buf, len, &start);
    memmove(buf, buf + start, len);
    buf[len] = 0;
    if (o.clean_up_tokenization_spaces != EM_TOK_OFF) {
        static const char *const rep[][2] = {
            { " .", "." }, { " ?", "?" }, { " !", "!" }, { " ,", "," }, { " ' ", "'" },
            { " n't", "n't" }, { " 'm", "'m" }, { " 's", "'s" }, { " 've", "'ve" }, { " 're", "'re" },
        };
        for (size_t i = 0; i < sizeof rep / sizeof *rep; i++) len = replace_all(buf, len, rep[i][0], rep[i][1]);
    }
    *text = buf;
    return EM_OK;
}
