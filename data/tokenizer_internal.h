/* ember — data/: internals of the WordPiece tokenizer, shared by
 * tokenizer.c (vocabulary, encode/decode API, batches), tokenizer_text.c
 * (text -> ids: special tokens, basic tokenizer, WordPiece) and
 * tokenizer_json.c (Hugging Face tokenizer folders). Not installed. */
#ifndef EMBER_TOKENIZER_INTERNAL_H
#define EMBER_TOKENIZER_INTERNAL_H

#include "data/data.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A word that is never lowercased or split: the special tokens (user = false)
 * and the never_split option (user = true). */
typedef struct em__tok_word {
    const char *s;   /* points into the tokenizer's pool */
    size_t len;
    int32_t id;      /* vocabulary id, or -1 */
    bool user;
} em__tok_word;

/* One hash-table slot: key = 2*id + cont (cont: the "##"-stripped form of a
 * continuation token), -1 when empty. h32: the key's hash, upper half. */
typedef struct em__tok_slot {
    uint32_t h32;
    int32_t key;
} em__tok_slot;

enum { EM__TOK_UNK, EM__TOK_CLS, EM__TOK_SEP, EM__TOK_PAD, EM__TOK_MASK, EM__TOK_NSPECIAL };

struct em_tokenizer {
    bool lower, strip, chinese;
    bool strip_marks;           /* strip every mark (M*: the StripAccents normalizer), not only Mn */
    bool clean;                 /* clean_text: drop controls and U+FFFD, whitespace set of Python's BertTokenizer */
    bool nfc;                   /* NFC each word first */
    /* Python's BertTokenizer (vocab.txt) rather than the tokenizers library
     * (tokenizer.json): final sigma when lowercasing, HF's Python CJK ranges,
     * and a cleaned word equal to a special token maps to it. */
    bool py;
    int max_chars;              /* max_input_chars_per_word */

    int32_t n_vocab;
    char *pool;                 /* every token NUL-terminated, then the specials and never_split strings */
    uint32_t *off;              /* n_vocab + 1 offsets into pool; token i has off[i+1]-off[i]-1 bytes */
    em__tok_slot *slots;
    uint32_t mask;              /* slots - 1 (power of two) */
    size_t max_key[2];          /* longest key in bytes, for plain / continuation keys */

    int32_t special_id[EM__TOK_NSPECIAL];
    const char *special[EM__TOK_NSPECIAL];   /* token strings (point into pool) */

    em__tok_word *never;        /* specials first, then never_split */
    int n_never, n_user;
    uint8_t never_first[32];    /* bitmap: first bytes of all never words   */
    uint8_t user_first[32];     /* bitmap: first bytes of never_split words */
    uint8_t special_first[32];  /* bitmap: first bytes of the specials      */

    /* What tokenizer.json / tokenizer_config.json said (em_tokenizer_get_info),
     * and the "truncation" and "padding" objects as loaded, for saving. */
    em_tokenizer_info info;
    char *trunc_json, *pad_json;   /* unformatted JSON or NULL */
    char *trunc_strategy;          /* info.truncation_strategy points here */
};

/* How em__tok_build makes a tokenizer from its tokens. */
typedef struct em__tok_build_opts {
    const char *path;       /* the file the tokens came from, for messages             */
    bool lines;             /* vocab.txt: messages say path:line (line = id + 1)        */
    const char *vocab_field;   /* else the JSON field of the vocabulary ("model.vocab") */
    /* Special token strings ("" or NULL: none, id -1), and for each whether it
     * must be in the vocabulary, and where it came from (for messages; NULL
     * for the defaults). [UNK], [CLS] and [SEP] are always required. */
    const char *special[EM__TOK_NSPECIAL];
    bool required[EM__TOK_NSPECIAL];
    const char *source[EM__TOK_NSPECIAL];
    /* Tokens cut out of the raw text before anything else. NULL: the special
     * tokens, an absent one mapping to [UNK] (Python's BertTokenizer). Else
     * the n_split tokens that are in the vocabulary (others are skipped). */
    const char *const *split;
    int n_split;
    const char *const *never_split;   /* NULL-terminated, or NULL */
    bool lower, strip, strip_marks, chinese, clean, nfc, py;
    int max_chars;
} em__tok_build_opts;

/* Reads vocab.txt: *n lines (LF, CRLF or CR), line i is tok[i][0, len[i]),
 * pointing into *data. The caller frees the three with em__free. */
em_status em__tok_read_lines(const char *path, char **data, const char ***tok, uint32_t **len, int32_t *n);

/* Builds a tokenizer from n tokens indexed by id: token i is tok[i][0, len[i])
 * (len 0: the id maps to no token). Checks UTF-8, NUL bytes, duplicates and the
 * special tokens, naming o->path. On failure *out is NULL. */
em_status em__tok_build(const char *const *tok, const uint32_t *len, int32_t n, const em__tok_build_opts *o,
                        em_tokenizer **out);

static inline bool em__tok_bit(const uint8_t map[32], uint8_t c) { return (map[c >> 3] >> (c & 7)) & 1; }

/* Token i's bytes and length. */
static inline const char *em__tok_str(const em_tokenizer *t, int32_t i) { return t->pool + t->off[i]; }
static inline size_t em__tok_len(const em_tokenizer *t, int32_t i) { return t->off[i + 1] - t->off[i] - 1; }

/* A fast hash of short byte strings (tokens are a few bytes), seeded by cont. */
static inline uint64_t em__tok_hash(const uint8_t *s, size_t n, bool cont)
{
    uint64_t h = (0x9E3779B97F4A7C15ull * (n + 1)) ^ (cont ? 0x5851F42D4C957F2Dull : 0);
    for (; n >= 8; s += 8, n -= 8) {
        uint64_t x;
        memcpy(&x, s, 8);
        h = (h ^ x) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    if (n) {
        uint64_t x = 0;
        for (size_t i = 0; i < n; i++) x |= (uint64_t)s[i] << (8 * i);
        h = (h ^ x) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    h *= 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 32);
}

/* id of the key (s,n) (cont: looked up as "##" + s), or -1. */
static inline int32_t em__tok_lookup(const em_tokenizer *t, const uint8_t *s, size_t n, bool cont)
{
    uint64_t h = em__tok_hash(s, n, cont);
    uint32_t h32 = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & t->mask;; i = (i + 1) & t->mask) {
        em__tok_slot sl = t->slots[i];
        if (sl.key < 0) return -1;
        if (sl.h32 != h32 || (sl.key & 1) != (int32_t)cont) continue;
        int32_t id = sl.key >> 1;
        size_t skip = cont ? 2 : 0;
        if (em__tok_len(t, id) - skip == n && memcmp(em__tok_str(t, id) + skip, s, n) == 0) return id;
    }
}

/* A growable id list. */
typedef struct em__tok_ids {
    int32_t *v;
    int n, cap;
} em__tok_ids;

/* Scratch of one encoding thread, reused from text to text. `failed` is
 * sticky: set when an allocation failed (em_last_error says so). */
typedef struct em__tok_work {
    em__tok_ids ids;
    uint8_t *word;  size_t word_cap;    /* the current cleaned word             */
    uint8_t *bytes; size_t bytes_cap;   /* UTF-8 scratch                        */
    int32_t *cp;    size_t cp_cap;      /* code point scratch (two of them)     */
    int32_t *cp2;   size_t cp2_cap;
    uint32_t *pos;  size_t pos_cap;     /* byte offset of each code point       */
    bool failed;
} em__tok_work;

void em__tok_work_free(em__tok_work *w);

/* Appends the ids of text (no special tokens added) to w->ids. Returns EM_OK,
 * EM_ERR_FORMAT for invalid UTF-8 ("invalid UTF-8 in <what> at byte offset N"),
 * or EM_ERR_OOM. */
em_status em__tok_text_to_ids(const em_tokenizer *t, const char *text, const char *what, em__tok_work *w);

#endif
