/* ember — data/: text -> WordPiece ids, exactly as Hugging Face's Python
 * BertTokenizer does it (tokenization_bert.py: BasicTokenizer then
 * WordpieceTokenizer, after the added-token split of PreTrainedTokenizer),
 * or, for a tokenizer read from tokenizer.json (t->py false), as the
 * tokenizers library does it (BertNormalizer or a Sequence of NFD, Lowercase,
 * StripAccents; BertPreTokenizer; WordPiece): no final sigma, the library's
 * CJK ranges, NFC only when asked, and clean_text may be off.
 *
 * One pass over the bytes cleans the text and cuts it into whitespace words;
 * the special tokens are cut out on the way (like HF's trie split, they act as
 * word boundaries). Each word then takes one of two paths:
 *   - ASCII (the common case): NFC/NFD are the identity, so lowercasing and
 *     punctuation splitting are table lookups;
 *   - otherwise: NFC, Python's str.lower(), NFD and Mn removal through utf8proc,
 *     then punctuation splitting on code points.
 * Every piece goes to the greedy longest-match-first WordPiece, which looks
 * substrings up in the vocabulary hash table (no strings are built: "##x" is
 * looked up as the key x with the continuation flag). */
#include "data/tokenizer_internal.h"
#include "tensor/support.h"

#include <pthread.h>
#include <string.h>
#include <utf8proc.h>

/* ---- ASCII classes (HF: _is_control, _is_whitespace, _is_punctuation) ----- */
enum { A_CHAR = 0, A_DROP, A_SPACE, A_PUNCT };

static uint8_t ascii_class(uint8_t c)
{
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return A_SPACE;
    if (c < 0x20 || c == 0x7f) return A_DROP;   /* category Cc (NUL included) */
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126))
        return A_PUNCT;
    return A_CHAR;
}

static uint8_t ACLASS[128];
static uint8_t ALOWER[128];

static void init_tables(void)
{
    for (int c = 0; c < 128; c++) {
        ACLASS[c] = ascii_class((uint8_t)c);
        ALOWER[c] = (uint8_t)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
}

static inline bool is_punct_cp(int32_t c)
{
    if (c < 0x80) return ACLASS[c] == A_PUNCT;
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* HF's _is_chinese_char: the CJK Unified Ideographs blocks (these ranges are
 * HF's definition, not Unicode data). The tokenizers library's copy has
 * 0x2B920 where Python has 0x2B820 (py false). */
static inline bool is_cjk(int32_t c, bool py)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= (py ? 0x2B820 : 0x2B920) && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) ||
           (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ---- UTF-8 ------------------------------------------------------------------ */
/* Offset of the first byte of the first invalid sequence, or -1. */
static ptrdiff_t utf8_invalid_at(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t x;
            memcpy(&x, s + i, 8);
            if (!(x & 0x8080808080808080ull)) { i += 8; continue; }
        }
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t k;
        uint8_t lo = 0x80, hi = 0xBF;   /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) k = 1;
        else if (c >= 0xE0 && c <= 0xEF) { k = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
        else if (c >= 0xF0 && c <= 0xF4) { k = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
        else return (ptrdiff_t)i;
        if (i + k >= n) return (ptrdiff_t)i;   /* truncated */
        if (s[i + 1] < lo || s[i + 1] > hi) return (ptrdiff_t)i;
        for (size_t j = 2; j <= k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return (ptrdiff_t)i;
        i += k + 1;
    }
    return -1;
}

/* Decodes one code point of VALID UTF-8; *len receives its byte count. */
static inline int32_t utf8_decode(const uint8_t *s, int *len)
{
    uint8_t c = s[0];
    if (c < 0x80) { *len = 1; return c; }
    if (c < 0xE0) { *len = 2; return ((c & 0x1F) << 6) | (s[1] & 0x3F); }
    if (c < 0xF0) { *len = 3; return ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F); }
    *len = 4;
    return ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

/* ---- scratch ---------------------------------------------------------------- */
static bool grow(em__tok_work *w, void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    if (w->failed) return false;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = em__realloc(*p, c * elem);
    if (!q) { w->failed = true; return false; }
    *p = q;
    *cap = c;
    return true;
}
#define GROW(w, field, need) grow(w, (void **)&(w)->field, &(w)->field##_cap, (need), sizeof *(w)->field)

static inline void emit(em__tok_work *w, int32_t id)
{
    em__tok_ids *v = &w->ids;
    if (v->n == v->cap) {
        size_t cap = (size_t)v->cap;
        if (!grow(w, (void **)&v->v, &cap, (size_t)v->n + 1, sizeof *v->v)) return;
        v->cap = (int)cap;
    }
    v->v[v->n++] = id;
}

void em__tok_work_free(em__tok_work *w)
{
    em__free(w->ids.v);
    em__free(w->word);
    em__free(w->bytes);
    em__free(w->cp);
    em__free(w->cp2);
    em__free(w->pos);
    memset(w, 0, sizeof *w);
}

/* ---- never-split words ---------------------------------------------------------- */
static const em__tok_word *never_find(const em_tokenizer *t, const uint8_t *s, size_t n, bool user_only)
{
    for (int i = user_only ? t->n_never - t->n_user : 0; i < t->n_never; i++)
        if (t->never[i].len == n && memcmp(t->never[i].s, s, n) == 0) return &t->never[i];
    return NULL;
}

/* A cleaned word that is a never-split word. Python's BertTokenizer counts the
 * special tokens among them; the tokenizers library matches added tokens in
 * the raw text only (t->py false). */
static inline const em__tok_word *never_check(const em_tokenizer *t, const uint8_t *s, size_t n)
{
    if (!t->py) return t->n_user && n && em__tok_bit(t->user_first, s[0]) ? never_find(t, s, n, true) : NULL;
    return t->n_never && n && em__tok_bit(t->never_first, s[0]) ? never_find(t, s, n, false) : NULL;
}

/* ---- WordPiece ------------------------------------------------------------------ */
/* Greedy longest-match-first over the piece s[0,n): HF's WordpieceTokenizer. */
static void wordpiece(const em_tokenizer *t, em__tok_work *w, const uint8_t *s, size_t n)
{
    size_t chars = 0;
    for (size_t i = 0; i < n; i++) chars += (s[i] & 0xC0) != 0x80;
    if (chars > (size_t)t->max_chars) { emit(w, t->special_id[EM__TOK_UNK]); return; }
    int mark = w->ids.n;
    size_t start = 0;
    while (start < n) {
        bool cont = start > 0;
        size_t end = n - start > t->max_key[cont] ? start + t->max_key[cont] : n;
        int32_t id = -1;
        for (; end > start; end--) {
            if (end < n && (s[end] & 0xC0) == 0x80) continue;   /* not a character boundary */
            id = em__tok_lookup(t, s + start, end - start, cont);
            if (id >= 0) break;
        }
        if (id < 0) {   /* no split: the whole piece is [UNK] */
            w->ids.n = mark;
            emit(w, t->special_id[EM__TOK_UNK]);
            return;
        }
        emit(w, id);
        start = end;
    }
}

/* One basic-tokenizer output token: as is when it is a never_split word
 * (HF's _tokenize), else through WordPiece. */
static void emit_piece(const em_tokenizer *t, em__tok_work *w, const uint8_t *s, size_t n)
{
    if (t->n_user && em__tok_bit(t->user_first, s[0])) {
        const em__tok_word *nw = never_find(t, s, n, true);
        if (nw) { emit(w, nw->id >= 0 ? nw->id : t->special_id[EM__TOK_UNK]); return; }
    }
    wordpiece(t, w, s, n);
}

/* ---- Python's str.lower() on code points ----------------------------------------- */
/* Case_Ignorable and Cased as Python's final-sigma rule uses them. utf8proc
 * has no such properties: Case_Ignorable is derived from the categories plus
 * the Word_Break MidLetter/MidNumLet/Single_Quote characters (listed below, as
 * in Unicode 15), Cased from the categories and the case mappings. */
static bool case_ignorable(int32_t c)
{
    switch (c) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4: case 0x2018: case 0x2019:
    case 0x2024: case 0x2027: case 0xFE13: case 0xFE52: case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A:
        return true;
    }
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK;
}

static bool cased(int32_t c)
{
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           utf8proc_tolower(c) != c || utf8proc_toupper(c) != c;
}

/* U+03A3 at i lowercases to final sigma U+03C2 when preceded by a cased letter
 * and not followed by one (case-ignorables skipped both ways). */
static bool final_sigma(const int32_t *c, size_t n, size_t i)
{
    size_t j = i;
    while (j > 0 && case_ignorable(c[j - 1])) j--;
    if (j == 0 || !cased(c[j - 1])) return false;
    j = i + 1;
    while (j < n && case_ignorable(c[j])) j++;
    return j == n || !cased(c[j]);
}

/* dst receives lower(src); returns its length (at most 2n). Without final
 * sigma (sigma false), Rust's char::to_lowercase, which the tokenizers library
 * applies one character at a time. */
static size_t python_lower(const int32_t *src, size_t n, int32_t *dst, bool sigma)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = src[i];
        if (c < 0x80) dst[m++] = ALOWER[c];
        else if (c == 0x130) { dst[m++] = 'i'; dst[m++] = 0x307; }   /* SpecialCasing: İ -> i + U+0307 */
        else if (c == 0x3A3) dst[m++] = sigma && final_sigma(src, n, i) ? 0x3C2 : 0x3C3;
        else dst[m++] = utf8proc_tolower(c);
    }
    return m;
}

/* ---- words ------------------------------------------------------------------------ */
/* Canonical ordering of c[0..n) (Unicode's: a stable sort of every run of
 * non-starters by combining class). utf8proc_decompose does it with a bubble
 * sort, quadratic in a run's length: a text of 50,000 marks took 19 s. Runs
 * are sorted here by counting (stable, linear), into scratch tmp (n long). */
static void canonical_order(int32_t *c, size_t n, int32_t *tmp)
{
    for (size_t a = 0; a < n;) {
        if (!utf8proc_get_property(c[a])->combining_class) { a++; continue; }
        size_t b = a;
        while (b < n && utf8proc_get_property(c[b])->combining_class) b++;
        if (b - a > 1) {
            size_t count[257] = {0};
            for (size_t i = a; i < b; i++) count[utf8proc_get_property(c[i])->combining_class + 1]++;
            for (int k = 1; k < 257; k++) count[k] += count[k - 1];
            for (size_t i = a; i < b; i++) tmp[count[utf8proc_get_property(c[i])->combining_class]++] = c[i];
            memcpy(c + a, tmp, sizeof *c * (b - a));
        }
        a = b;
    }
}

/* UTF-8 bytes [s, s+n) -> code points in w->cp under the utf8proc options
 * (NFC: COMPOSE, NFD: DECOMPOSE): what utf8proc_decompose (then, for NFC,
 * utf8proc_normalize_utf32) gives, with the canonical ordering above. Returns
 * the count, or -1 on OOM. */
static ptrdiff_t normalize(em__tok_work *w, const uint8_t *s, size_t n, utf8proc_option_t opt)
{
    opt |= UTF8PROC_STABLE;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &c);
        if (k <= 0) return -1;   /* cannot happen: the text was validated */
        i += (size_t)k;
        for (;;) {
            utf8proc_ssize_t r = utf8proc_decompose_char(c, w->cp + m, (utf8proc_ssize_t)(w->cp_cap - m), opt, NULL);
            if (r < 0) return -1;
            if (m + (size_t)r <= w->cp_cap) {
                m += (size_t)r;
                break;
            }
            if (!GROW(w, cp, m + (size_t)r + n - i)) return -1;
        }
    }
    if (opt & (UTF8PROC_COMPOSE | UTF8PROC_DECOMPOSE)) {   /* as utf8proc_decompose: only then reordered */
        if (!GROW(w, cp2, m + 1)) return -1;
        canonical_order(w->cp, m, w->cp2);
    }
    if (opt & UTF8PROC_COMPOSE) return utf8proc_normalize_utf32(w->cp, (utf8proc_ssize_t)m, opt);
    return (ptrdiff_t)m;
}

/* Code points -> UTF-8 in w->bytes (with each code point's offset in w->pos
 * when pos). Returns the byte count, or -1 on OOM. */
static ptrdiff_t encode(em__tok_work *w, const int32_t *c, size_t n, bool pos)
{
    if (!GROW(w, bytes, 4 * n + 1) || (pos && !GROW(w, pos, n + 1))) return -1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (pos) w->pos[i] = (uint32_t)m;
        m += (size_t)utf8proc_encode_char(c[i], w->bytes + m);
    }
    if (pos) w->pos[n] = (uint32_t)m;
    return (ptrdiff_t)m;
}

/* A word that holds non-ASCII characters: HF's NFC, lower, NFD, strip Mn (or
 * every mark), split on punctuation, on code points. */
static void unicode_word(const em_tokenizer *t, em__tok_work *w, const uint8_t *s, size_t n)
{
    ptrdiff_t nc = normalize(w, s, n, t->nfc ? UTF8PROC_COMPOSE : 0);
    if (nc < 0) return;
    ptrdiff_t nb = encode(w, w->cp, (size_t)nc, false);
    if (nb < 0) return;
    if (never_check(t, w->bytes, (size_t)nb)) { emit_piece(t, w, w->bytes, (size_t)nb); return; }
    if (t->lower) {
        if (!GROW(w, cp2, 2 * (size_t)nc + 1)) return;
        nc = (ptrdiff_t)python_lower(w->cp, (size_t)nc, w->cp2, t->py);
        int32_t *tmp = w->cp; w->cp = w->cp2; w->cp2 = tmp;
        size_t tc = w->cp_cap; w->cp_cap = w->cp2_cap; w->cp2_cap = tc;
    }
    if (t->strip) {
        if ((nb = encode(w, w->cp, (size_t)nc, false)) < 0) return;
        if (!GROW(w, word, (size_t)nb)) return;   /* the decomposition reads a copy */
        memcpy(w->word, w->bytes, (size_t)nb);
        if ((nc = normalize(w, w->word, (size_t)nb, UTF8PROC_DECOMPOSE)) < 0) return;
        ptrdiff_t m = 0;
        for (ptrdiff_t i = 0; i < nc; i++) {
            utf8proc_category_t k = utf8proc_category(w->cp[i]);
            bool mark = k == UTF8PROC_CATEGORY_MN ||
                        (t->strip_marks && (k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME));
            if (!mark) w->cp[m++] = w->cp[i];
        }
        nc = m;
    }
    if ((nb = encode(w, w->cp, (size_t)nc, true)) < 0 || nb == 0) return;
    if (never_check(t, w->bytes, (size_t)nb)) { emit_piece(t, w, w->bytes, (size_t)nb); return; }
    ptrdiff_t run = -1;   /* first code point of the current non-punctuation run */
    for (ptrdiff_t i = 0; i <= nc; i++) {
        bool p = i < nc && is_punct_cp(w->cp[i]);
        if (i == nc || p) {
            if (run >= 0) emit_piece(t, w, w->bytes + w->pos[run], w->pos[i] - w->pos[run]);
            run = -1;
            if (p) emit_piece(t, w, w->bytes + w->pos[i], w->pos[i + 1] - w->pos[i]);
        } else if (run < 0) {
            run = i;
        }
    }
}

/* A whitespace-separated word of the cleaned text (s is w->word, n > 0). */
static void word(const em_tokenizer *t, em__tok_work *w, uint8_t *s, size_t n, bool ascii)
{
    if (!ascii) { unicode_word(t, w, s, n); return; }
    if (never_check(t, s, n)) { emit_piece(t, w, s, n); return; }
    if (t->lower) {
        for (size_t i = 0; i < n; i++) s[i] = ALOWER[s[i]];
        if (never_check(t, s, n)) { emit_piece(t, w, s, n); return; }
    }
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (ACLASS[s[i]] != A_PUNCT) continue;
        if (i > run) emit_piece(t, w, s + run, i - run);
        emit_piece(t, w, s + i, 1);
        run = i + 1;
    }
    if (n > run) emit_piece(t, w, s + run, n - run);
}

/* Length of the longest special token at s (n bytes left), 0 if none; *id receives its id. */
static size_t special_at(const em_tokenizer *t, const uint8_t *s, size_t n, int32_t *id)
{
    size_t best = 0;
    for (int i = 0; i < t->n_never - t->n_user; i++) {
        const em__tok_word *sp = &t->never[i];
        if (sp->len > best && sp->len <= n && memcmp(sp->s, s, sp->len) == 0) {
            best = sp->len;
            *id = sp->id >= 0 ? sp->id : t->special_id[EM__TOK_UNK];
        }
    }
    return best;
}

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

em_status em__tok_text_to_ids(const em_tokenizer *t, const char *text, const char *what, em__tok_work *w)
{
    pthread_once(&tables_once, init_tables);
    const uint8_t *s = (const uint8_t *)text;
    size_t n = strlen(text);
    ptrdiff_t bad = utf8_invalid_at(s, n);
    if (bad >= 0) return em__fail(EM_ERR_FORMAT, "invalid UTF-8 in %s at byte offset %td", what, bad);
    if (!GROW(w, word, n + 1)) return EM_ERR_OOM;
    size_t wn = 0;          /* bytes in the current word */
    bool ascii = true;      /* the current word is ASCII */
#define FLUSH() do { if (wn) { word(t, w, w->word, wn, ascii); wn = 0; ascii = true; } } while (0)
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        int32_t id;
        size_t k;
        if (em__tok_bit(t->special_first, c) && (k = special_at(t, s + i, n - i, &id)) > 0) {
            FLUSH();
            emit(w, id);
            i += k;
            continue;
        }
        if (c < 0x80) {
            uint8_t cls = ACLASS[c];
            if (cls == A_DROP && !t->clean) cls = c == 0x0b || c == 0x0c ? A_SPACE : A_CHAR;   /* Rust's is_whitespace */
            switch (cls) {
            case A_DROP: break;
            case A_SPACE: FLUSH(); break;
            default: w->word[wn++] = c;
            }
            i++;
            continue;
        }
        int len;
        int32_t cp = utf8_decode(s + i, &len);
        utf8proc_category_t cat = utf8proc_category(cp);
        if (t->clean && (cp == 0xFFFD || cat >= UTF8PROC_CATEGORY_CC || (t->py && cat == UTF8PROC_CATEGORY_CN))) {
            /* dropped: U+FFFD and category C* (HF's _clean_text); the tokenizers
             * library keeps unassigned code points (Cn) */
        } else if (cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP ||
                   cp == 0x85) {
            FLUSH();   /* Zs is HF's whitespace; Zl/Zp split in Python's str.split(); U+0085 is
                        * Rust's whitespace (without clean_text: with it, U+0085 is a dropped Cc) */
        } else if (t->chinese && is_cjk(cp, t->py)) {
            FLUSH();
            memcpy(w->word, s + i, (size_t)len);
            wn = (size_t)len;
            ascii = false;
            FLUSH();
        } else {
            memcpy(w->word + wn, s + i, (size_t)len);
            wn += (size_t)len;
            ascii = false;
        }
        i += (size_t)len;
    }
    FLUSH();
#undef FLUSH
    return w->failed ? EM_ERR_OOM : EM_OK;
}
