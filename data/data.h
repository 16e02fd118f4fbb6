/* ember — data/: datasets, readers, the WordPiece tokenizer, collate, samplers,
 * DataLoader. (For now: the tokenizer.)
 *
 * Failure (DESIGN.md §2 "Errors"): bad input from outside (a missing or corrupt
 * vocabulary file, invalid UTF-8 text, an impossible max_length) returns an
 * em_status and em_last_error() tells why, naming the file and line or the
 * byte offset. Passing NULL where an object is required is misuse (handler).
 */
#ifndef EMBER_DATA_H
#define EMBER_DATA_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- WordPiece tokenizer -------------------------------------------------
 * Identical, id for id, to Hugging Face's Python `BertTokenizer` (uncased and
 * cased) built from the same vocab.txt:
 *   1. The special tokens ([UNK] [SEP] [PAD] [CLS] [MASK], as configured) are
 *      split out of the raw text wherever they occur, case-sensitively, and
 *      map straight to their ids ("a[SEP]b" -> a, [SEP], b).
 *   2. Every other piece goes through the basic tokenizer: drop NUL, U+FFFD
 *      and control/format characters (category C*), turn whitespace into
 *      spaces, put spaces around CJK ideographs, NFC, split on whitespace;
 *      then per word lowercase (Python's str.lower(): 'İ' -> "i̇", final sigma),
 *      NFD and drop Mn accents, and split off every punctuation character
 *      (ASCII symbols and Unicode P*).
 *   3. Each piece becomes the greedy longest-match-first WordPiece split with
 *      "##" continuations, or [UNK] if it has no split or is longer than
 *      max_input_chars_per_word code points.
 * Unicode data comes from utf8proc (its Unicode version may be newer than the
 * Python that made a given golden file: newly assigned characters may then
 * differ). Where HF's Rust BertTokenizerFast differs from the Python class
 * (Greek final sigma, NFC, which text keeps the odd id when a pair is
 * truncated), ember follows the Python class.
 *
 * Input text is UTF-8 and NUL-terminated. Hugging Face receives a Python str
 * and so never sees invalid bytes; ember instead REFUSES invalid UTF-8
 * (overlong forms, surrogates, > U+10FFFF, truncated sequences) with
 * EM_ERR_FORMAT and a message giving the byte offset where the first invalid
 * sequence starts (Python's UnicodeDecodeError.start).
 * It never guesses or replaces bytes.
 *
 * A loaded tokenizer is immutable: any number of threads may encode and
 * decode with it at once. */
typedef struct em_tokenizer em_tokenizer;

/* Tri-state switch for options whose default is not "off". */
typedef enum em_tok_flag { EM_TOK_DEFAULT = 0, EM_TOK_ON, EM_TOK_OFF } em_tok_flag;

typedef struct em_tokenizer_opts {
    em_tok_flag do_lower_case;           /* default ON (uncased models)                    */
    em_tok_flag strip_accents;           /* default: the value of do_lower_case, as in HF  */
    em_tok_flag tokenize_chinese_chars;  /* default ON                                     */
    int max_input_chars_per_word;        /* 0 -> 100                                       */
    /* Special tokens; NULL -> "[UNK]" "[CLS]" "[SEP]" "[PAD]" "[MASK]". [UNK], [CLS]
     * and [SEP] must be in the vocabulary; [PAD] and [MASK] may be absent (id -1). */
    const char *unk_token, *cls_token, *sep_token, *pad_token, *mask_token;
    /* Extra words never lowercased or split (HF's never_split), NULL-terminated
     * list or NULL. Such a whitespace-separated word maps to its id, or [UNK]. */
    const char *const *never_split;
} em_tokenizer_opts;

/* Loads vocab.txt: one token per line (LF, CRLF or CR), id = line number from 0.
 * opts may be NULL (all defaults). On failure *out is NULL and the message
 * names path:line (unreadable file, invalid UTF-8, a NUL byte, a duplicate
 * token, a missing [UNK]/[CLS]/[SEP]). Empty lines keep their id but no token
 * maps to them. Free with em_tokenizer_free. */
em_status em_tokenizer_load(const char *vocab_path, const em_tokenizer_opts *opts, em_tokenizer **out);
void em_tokenizer_free(em_tokenizer *tok);   /* NULL is ok */

int32_t em_tokenizer_vocab_size(const em_tokenizer *tok);   /* lines in vocab.txt */
/* The id of a vocabulary token, or -1. Exact match, no normalization. */
int32_t em_tokenizer_token_to_id(const em_tokenizer *tok, const char *token);
/* The token of an id (owned by the tokenizer), or NULL when out of range. */
const char *em_tokenizer_id_to_token(const em_tokenizer *tok, int32_t id);

typedef struct em_special_ids { int32_t unk, cls, sep, pad, mask; } em_special_ids;   /* -1: absent */
em_special_ids em_tokenizer_special_ids(const em_tokenizer *tok);

/* ---- encoding ------------------------------------------------------------ */
typedef struct em_encode_opts {
    em_tok_flag add_special_tokens;   /* default ON: [CLS] a [SEP] (b [SEP])           */
    /* > 0: truncate to at most max_length ids, special tokens included, with
     * HF's 'longest_first' strategy for pairs (one id at a time from the end of
     * the longer sequence, from the second on ties). It must leave room for the
     * special tokens (else EM_ERR_INVALID); a sequence may end up empty, where
     * Python's BertTokenizer would log an error and not truncate at all.
     * 0: no truncation. */
    int max_length;
    bool pad_to_max_length;           /* right-pad with [PAD] to max_length (mask 0)   */
    int num_threads;                  /* batch only: 0 -> em_num_threads()             */
} em_encode_opts;

/* One encoded text (or pair). The three arrays have `len` entries and share
 * one allocation owned by the encoding: free with em_encoding_free. */
typedef struct em_encoding {
    int32_t *ids;
    int32_t *type_ids;         /* 0: [CLS] a [SEP]; 1: b [SEP]                      */
    uint8_t *attention_mask;   /* 1: token; 0: padding                             */
    int len;
    int n_truncated;           /* ids removed by truncation (both texts together) */
} em_encoding;

/* Encodes text (pair: text + pair_text) into *out, which the caller frees with
 * em_encoding_free. opts may be NULL. On failure *out is zeroed. */
em_status em_tokenizer_encode(const em_tokenizer *tok, const char *text, const em_encode_opts *opts,
                              em_encoding *out);
em_status em_tokenizer_encode_pair(const em_tokenizer *tok, const char *text, const char *pair_text,
                                   const em_encode_opts *opts, em_encoding *out);
/* Encodes n texts (pairs[i] the second text of each, or pairs NULL) on
 * opts->num_threads worker threads. out[i] always corresponds to texts[i],
 * whatever the thread count. On failure every out[i] is zeroed and the message
 * starts with "text <i>: " for the lowest failing i. */
em_status em_tokenizer_encode_batch(const em_tokenizer *tok, int n, const char *const *texts,
                                    const char *const *pairs, const em_encode_opts *opts, em_encoding *out);
void em_encoding_free(em_encoding *e);   /* frees the arrays and zeroes *e; NULL is ok */

/* ---- decoding -------------------------------------------------------------
 * As HF's decode: tokens joined by spaces, " ##" removed, outer whitespace
 * stripped, then (clean_up_tokenization_spaces) " ." " ?" " !" " ," " ' "
 * " n't" " 'm" " 's" " 've" " 're" lose their space. Ids outside the vocabulary
 * decode as the [UNK] token. */
typedef struct em_decode_opts {
    bool skip_special_tokens;                  /* drop [UNK] [CLS] [SEP] [PAD] [MASK] ids */
    em_tok_flag clean_up_tokenization_spaces;  /* default ON, as BertTokenizer           */
} em_decode_opts;
/* *text receives a new NUL-terminated string: release it with free(). */
em_status em_tokenizer_decode(const em_tokenizer *tok, const int32_t *ids, int n, const em_decode_opts *opts,
                              char **text);

#ifdef __cplusplus
}
#endif
#endif
