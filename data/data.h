/** @file
 * ember — data/: datasets, readers, the WordPiece tokenizer, collate, samplers,
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

/* ---- WordPiece tokenizer ------------------------------------------------- */
/** A WordPiece tokenizer (opaque; em_tokenizer_load, em_tokenizer_from_pretrained).
 * Loaded from vocab.txt it is identical, id for id, to Hugging Face's Python `BertTokenizer` (uncased and
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
 * Loaded from a tokenizer.json (em_tokenizer_from_pretrained) it follows
 * Hugging Face's `tokenizers` library instead, as transformers'
 * AutoTokenizer uses it: the added tokens are cut out of the raw text (a
 * cleaned word equal to one is not matched), no NFC unless the normalizer asks
 * for it, lowercasing without final sigma, the library's CJK ranges (U+2B820
 * to U+2B91F are not CJK there), and without clean_text the text keeps its
 * control characters and splits at Rust's whitespace (White_Space).
 * Pair truncation stays ember's (see em_encode_opts).
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

/** Tri-state switch for options whose default is not "off". */
typedef enum em_tok_flag { EM_TOK_DEFAULT = 0, EM_TOK_ON, EM_TOK_OFF } em_tok_flag;

/** Options of em_tokenizer_load and em_tokenizer_from_pretrained; zeroed (or a NULL pointer) means BertTokenizer's defaults (from_pretrained: what the files say). */
typedef struct em_tokenizer_opts {
    em_tok_flag do_lower_case;           /**< default ON (uncased models)                    */
    em_tok_flag strip_accents;           /**< default: the value of do_lower_case, as in HF  */
    em_tok_flag tokenize_chinese_chars;  /**< default ON                                     */
    int max_input_chars_per_word;        /**< 0 -> 100                                       */
    /** Special tokens; NULL -> "[UNK]" "[CLS]" "[SEP]" "[PAD]" "[MASK]". [UNK], [CLS]
     * and [SEP] must be in the vocabulary; [PAD] and [MASK] may be absent (id -1). */
    /** @{ */
    const char *unk_token, *cls_token, *sep_token, *pad_token, *mask_token;
    /** @} */
    /** Extra words never lowercased or split (HF's never_split), NULL-terminated
     * list or NULL. Such a whitespace-separated word maps to its id, or [UNK]. */
    const char *const *never_split;
} em_tokenizer_opts;

/** Loads vocab.txt: one token per line (LF, CRLF or CR), id = line number from 0.
 * opts may be NULL (all defaults). On failure *out is NULL and the message
 * names path:line (unreadable file, invalid UTF-8, a NUL byte, a duplicate
 * token, a missing [UNK]/[CLS]/[SEP]). Empty lines keep their id but no token
 * maps to them. Free with em_tokenizer_free. */
em_status em_tokenizer_load(const char *vocab_path, const em_tokenizer_opts *opts, em_tokenizer **out);
void em_tokenizer_free(em_tokenizer *tok);   /**< NULL is ok */

int32_t em_tokenizer_vocab_size(const em_tokenizer *tok);   /**< tokens: lines of vocab.txt, entries of model.vocab */
/** The id of a vocabulary token, or -1. Exact match, no normalization. */
int32_t em_tokenizer_token_to_id(const em_tokenizer *tok, const char *token);
/** The token of an id (owned by the tokenizer), or NULL when out of range. */
const char *em_tokenizer_id_to_token(const em_tokenizer *tok, int32_t id);

/** Loads a Hugging Face tokenizer folder: dir/tokenizer.json when it exists,
 * else dir/vocab.txt (as em_tokenizer_load: Python BertTokenizer's rules),
 * with dir/tokenizer_config.json and dir/special_tokens_map.json when present.
 *
 * tokenizer_config.json gives do_lower_case, strip_accents (null: as
 * do_lower_case), tokenize_chinese_chars, model_max_length, tokenizer_class and
 * the special tokens (unk_token ... mask_token: a string, an object
 * {"content": ...}, or null for none); special_tokens_map.json gives special
 * tokens too and wins over tokenizer_config.json (as in transformers).
 * Explicit (non-default, non-NULL) fields of opts win over every file.
 *
 * tokenizer.json must describe a BERT WordPiece tokenizer:
 *   - normalizer: BertNormalizer (clean_text, handle_chinese_chars,
 *     strip_accents, lowercase), null, or a Sequence of BertNormalizer (first),
 *     NFC (before any decomposition), NFD, Lowercase, StripAccents (after NFD;
 *     it drops every mark, M*) and Strip (a no-op before a whitespace split);
 *   - pre_tokenizer: BertPreTokenizer, or a Sequence of WhitespaceSplit and
 *     Punctuation (behavior Isolated) that holds both;
 *   - model: WordPiece with continuing_subword_prefix "##" and ids 0..n-1
 *     without gaps or duplicates;
 *   - post_processor: BertProcessing, or TemplateProcessing with the templates
 *     "C:0 $A:0 S:0" and "C:0 $A:0 S:0 $B:1 S:1" (C and S one token each),
 *     which make C and S the [CLS] and [SEP] tokens;
 *   - decoder: WordPiece or null;
 *   - added_tokens: tokens of model.vocab with the same id, none of lstrip,
 *     rstrip, single_word or normalized; they (and the special tokens that the
 *     config files name) are cut out of the raw text.
 * Anything else (a BPE, Unigram or WordLevel model, a ByteLevel pre-tokenizer
 * or decoder, the Whitespace pre-tokenizer, ...) fails with EM_ERR_UNSUPPORTED and a
 * message naming the file, the field and the type, e.g. "m/tokenizer.json:
 * model type BPE is not supported (ember reads WordPiece tokenizers only)".
 * Malformed JSON names the line and column; a field of the wrong type, an id
 * out of range, a duplicate id or token, an added or special token missing
 * from the vocabulary fail with EM_ERR_FORMAT naming the file and the field.
 *
 * Which settings win, as in transformers 5: when tokenizer_config.json's
 * tokenizer_class is "BertTokenizer" or "BertTokenizerFast", transformers
 * rebuilds the pipeline from the config: BertNormalizer with clean_text and the
 * config's do_lower_case (default true), strip_accents and
 * tokenize_chinese_chars (default true), BertPreTokenizer, WordPiece with
 * max_input_chars_per_word 100, and [CLS] A [SEP] from the config's (else the
 * default) special tokens; ember does the same (tokenizer.json then gives the
 * vocabulary, the added tokens, truncation and padding, and the rest of it
 * must still be readable). With any other class, or no config, tokenizer.json
 * is used as written and the config files only add special tokens.
 *
 * tokenizer.json's "truncation" and "padding" are recorded
 * (em_tokenizer_get_info) and written back by em_tokenizer_save_pretrained,
 * but the encode functions do NOT apply them: in transformers the call's
 * arguments override them too (a call without truncation=True does not
 * truncate). On failure *out is NULL; a folder with neither tokenizer.json nor
 * vocab.txt fails with EM_ERR_NOT_FOUND naming both. */
em_status em_tokenizer_from_pretrained(const char *dir, const em_tokenizer_opts *opts, em_tokenizer **out);

/** Writes tok as a Hugging Face tokenizer folder that transformers'
 * AutoTokenizer.from_pretrained(dir) and em_tokenizer_from_pretrained load
 * back to the same ids: vocab.txt, tokenizer_config.json (tokenizer_class,
 * do_lower_case, strip_accents, tokenize_chinese_chars, model_max_length, the
 * special tokens), special_tokens_map.json and tokenizer.json (version "1.0",
 * truncation and padding as loaded or null, the cut-out tokens as
 * added_tokens, BertNormalizer, BertPreTokenizer, TemplateProcessing with the
 * real ids, a WordPiece decoder, and the WordPiece model with the vocabulary in
 * id order). tokenizer_class is "BertTokenizer" when transformers'
 * BertTokenizer rebuilds exactly this pipeline from the config, else
 * "PreTrainedTokenizerFast" (and the normalizer a Sequence when clean_text is
 * off, every mark is stripped or NFC is on). A tokenizer loaded from vocab.txt
 * is written with the tokenizers library's rules (no final sigma, no NFC; see
 * em_tokenizer), the only ones a tokenizer.json can express. Special tokens
 * the vocabulary lacks are written as null. Creates dir (and its parents) when
 * needed; each file is written under a temporary name in dir, flushed to disk
 * and renamed, so none is ever half-written. Saving a tokenizer loaded from a
 * saved folder gives byte-identical files. Fails with EM_ERR_IO naming the
 * file when one cannot be written, EM_ERR_FORMAT when a token cannot be (a
 * line break in it, or two empty tokens). */
em_status em_tokenizer_save_pretrained(const em_tokenizer *tok, const char *dir);

/** How a tokenizer splits text, and what its files said (em_tokenizer_get_info). */
typedef struct em_tokenizer_info {
    bool do_lower_case;            /**< lowercase                                             */
    bool strip_accents;            /**< NFD and drop marks                                    */
    bool strip_all_marks;          /**< the marks dropped are all of M* (StripAccents), not only Mn */
    bool tokenize_chinese_chars;   /**< CJK ideographs are words of their own                 */
    bool clean_text;               /**< drop control characters and U+FFFD                    */
    bool nfc;                      /**< NFC before anything else                              */
    bool python_semantics;         /**< Python BertTokenizer's rules (vocab.txt), not the tokenizers library's */
    int max_input_chars_per_word;  /**< longer words are [UNK]                                */
    int64_t model_max_length;      /**< tokenizer_config.json's; 0: none or transformers' "very large" */
    int truncation_max_length;     /**< tokenizer.json "truncation".max_length; 0: no truncation */
    const char *truncation_strategy;   /**< its strategy ("LongestFirst", ...); NULL: none */
    int pad_to;                    /**< tokenizer.json "padding" strategy {"Fixed": N}: N; 0: none */
    bool pad_to_longest;           /**< its strategy is "BatchLongest"                      */
    int pad_to_multiple_of;        /**< its pad_to_multiple_of; 0: none                     */
} em_tokenizer_info;
/** The settings of tok (all zero for NULL). The file fields are informative:
 * encoding truncates and pads only as em_encode_opts asks. Strings are owned by tok. */
em_tokenizer_info em_tokenizer_get_info(const em_tokenizer *tok);
/** tokenizer_config.json's model_max_length (em_tokenizer_get_info(tok).model_max_length): 0 when none. */
int64_t em_tokenizer_model_max_length(const em_tokenizer *tok);
/** Sets the model_max_length that em_tokenizer_save_pretrained writes (n > 0;
 * misuse otherwise): a model's position count, so that transformers truncates
 * long inputs to what the model can read. */
void em_tokenizer_set_model_max_length(em_tokenizer *tok, int64_t n);

/** The ids of the special tokens; -1 for one the vocabulary lacks. */
typedef struct em_special_ids { /** @{ [UNK] [CLS] [SEP] [PAD] [MASK] */ int32_t unk, cls, sep, pad, mask; /** @} */ } em_special_ids;   /**< -1: absent */
/** The special tokens' ids (all -1 for NULL). */
em_special_ids em_tokenizer_special_ids(const em_tokenizer *tok);

/* ---- encoding ------------------------------------------------------------ */
/** Options of the encode functions; zeroed (or a NULL pointer) means HF's defaults. */
typedef struct em_encode_opts {
    em_tok_flag add_special_tokens;   /**< default ON: [CLS] a [SEP] (b [SEP])           */
    /** > 0: truncate to at most max_length ids, special tokens included, with
     * HF's 'longest_first' strategy for pairs (one id at a time from the end of
     * the longer sequence, from the second on ties). It must leave room for the
     * special tokens (else EM_ERR_INVALID); a sequence may end up empty, where
     * Python's BertTokenizer would log an error and not truncate at all.
     * 0: no truncation. */
    int max_length;
    bool pad_to_max_length;           /**< right-pad with [PAD] to max_length (mask 0)   */
    int num_threads;                  /**< batch only: 0 -> em_num_threads()             */
} em_encode_opts;

/** One encoded text (or pair). The three arrays have `len` entries and share
 * one allocation owned by the encoding: free with em_encoding_free. */
typedef struct em_encoding {
    int32_t *ids;              /**< token ids                                       */
    int32_t *type_ids;         /**< 0: [CLS] a [SEP]; 1: b [SEP]                      */
    uint8_t *attention_mask;   /**< 1: token; 0: padding                             */
    int len;                   /**< entries of each array                          */
    int n_truncated;           /**< ids removed by truncation (both texts together) */
} em_encoding;

/** Encodes text (pair: text + pair_text) into *out, which the caller frees with
 * em_encoding_free. opts may be NULL. On failure *out is zeroed. */
em_status em_tokenizer_encode(const em_tokenizer *tok, const char *text, const em_encode_opts *opts,
                              em_encoding *out);
/** Encodes the pair (text, pair_text) as [CLS] text [SEP] pair_text [SEP], as
 * em_tokenizer_encode does one text. */
em_status em_tokenizer_encode_pair(const em_tokenizer *tok, const char *text, const char *pair_text,
                                   const em_encode_opts *opts, em_encoding *out);
/** Encodes n texts (pairs[i] the second text of each, or pairs NULL) on
 * opts->num_threads worker threads. out[i] always corresponds to texts[i],
 * whatever the thread count. On failure every out[i] is zeroed and the message
 * starts with "text <i>: " for the lowest failing i. */
em_status em_tokenizer_encode_batch(const em_tokenizer *tok, int n, const char *const *texts,
                                    const char *const *pairs, const em_encode_opts *opts, em_encoding *out);
void em_encoding_free(em_encoding *e);   /**< frees the arrays and zeroes *e; NULL is ok */

/* ---- decoding -------------------------------------------------------------
 * As HF's decode: tokens joined by spaces, " ##" removed, outer whitespace
 * stripped, then (clean_up_tokenization_spaces) " ." " ?" " !" " ," " ' "
 * " n't" " 'm" " 's" " 've" " 're" lose their space. Ids outside the vocabulary
 * decode as the [UNK] token. */
/** Options of em_tokenizer_decode; zeroed (or a NULL pointer) means HF's defaults. */
typedef struct em_decode_opts {
    bool skip_special_tokens;                  /**< drop [UNK] [CLS] [SEP] [PAD] [MASK] ids */
    em_tok_flag clean_up_tokenization_spaces;  /**< default ON, as BertTokenizer           */
} em_decode_opts;
/** *text receives a new NUL-terminated string: release it with free(). */
em_status em_tokenizer_decode(const em_tokenizer *tok, const int32_t *ids, int n, const em_decode_opts *opts,
                              char **text);

/* ---- datasets and readers -------------------------------------------------- */
/** A table (opaque) holds the rows of a text file, every field a NUL-terminated UTF-8
 * string owned by the table. The readers load the whole file, refuse invalid
 * UTF-8 and NUL bytes, skip a UTF-8 BOM and empty lines (as pandas does), and
 * on failure return an em_status with *out NULL and a message
 * "path:line:column: what", where line is the 1-based physical line of the
 * file and column the 1-based BYTE column within that line, e.g.
 *   "sst2/train.tsv:17:52: expected 2 fields, found 3"
 * (for too many fields the column is the delimiter that starts the first extra
 * one; for too few, the end of the line). JSONL field errors name path:line
 * only. Statuses: EM_ERR_NOT_FOUND (no such file, a missing JSONL field),
 * EM_ERR_IO, EM_ERR_FORMAT (everything malformed), EM_ERR_OOM. */
typedef struct em_table em_table;

/** Options of the TSV and CSV readers; zeroed (or a NULL pointer) means the defaults. */
typedef struct em_table_opts {
    char delimiter;   /**< 0 -> a tab for em_table_read_tsv, ',' for em_table_read_csv       */
    bool no_header;   /**< false (default): the first line names the columns, each once (a name
                       * twice is EM_ERR_FORMAT naming path:line); true: none,
                       * and the columns are named "0", "1", ...                           */
} em_table_opts;

/** GLUE TSV: fields separated by the delimiter, no quoting at all (a '"' is an
 * ordinary character, as in GLUE's files). Lines end at LF, CRLF or CR. Every
 * row must have as many fields as the header. opts may be NULL. */
em_status em_table_read_tsv(const char *path, const em_table_opts *opts, em_table **out);
/** RFC 4180 CSV: a field that starts with '"' is quoted and may hold the
 * delimiter, line breaks (kept verbatim) and doubled quotes ("" -> ");
 * after its closing quote must come the delimiter or the end of the line.
 * A '"' inside an unquoted field is literal (as Python's csv). An unterminated
 * quote is reported at the line and column where it opened. */
em_status em_table_read_csv(const char *path, const em_table_opts *opts, em_table **out);
/** JSON Lines: one JSON object per LF-terminated line (blank lines skipped).
 * The named fields become the columns, in that order (fields NULL and nfields
 * 0: the keys of the first object). A string is taken as is; a number becomes
 * its text (integers below 2^53 without a fraction: 1.0 -> "1", others in the
 * shortest form that reads back exactly); a boolean becomes "true"/"false".
 * A missing field (EM_ERR_NOT_FOUND), null, an object or an array
 * (EM_ERR_FORMAT) fail with path:line. With duplicate keys the last one
 * counts (as Python's json). Other keys are ignored. */
em_status em_table_read_jsonl(const char *path, const char *const *fields, int nfields, em_table **out);
void em_table_free(em_table *t);   /**< NULL is ok */

int64_t em_table_rows(const em_table *t);   /**< data rows (the header is not one)       */
int em_table_cols(const em_table *t);       /**< columns of every row */
/** The index of the first column called name, or -1. */
int em_table_col(const em_table *t, const char *name);
const char *em_table_col_name(const em_table *t, int col);   /**< owned by the table; misuse out of range */
/** The cell (row, col), owned by the table; misuse when out of range. */
const char *em_table_get(const em_table *t, int64_t row, int col);
/** The path given to the reader, and the physical line where a row starts (for messages). */
const char *em_table_path(const em_table *t);
int64_t em_table_line(const em_table *t, int64_t row);   /**< misuse when row is out of range */

/* ---- the dataset interface that the DataLoader consumes ----
 * A dataset is any struct that starts with `em_dataset`; ops->get fills an
 * em_sample whose pointers stay valid while the dataset lives. get must be
 * safe to call from several threads at once. */
/** One sample as a dataset hands it out; the arrays are the dataset's (borrowed).
 * A text sample fills ids/type_ids/len; a dense sample (em_tensor_dataset_new,
 * or your own dataset) fills x and, when it has one, y: the first element of
 * a contiguous block of its dtype and per-sample shape. A sample may carry both. */
typedef struct em_sample {
    const int32_t *ids;        /**< token ids                                  */
    const int32_t *type_ids;   /**< segment ids (0: first text, 1: second)     */
    int32_t len;               /**< entries of ids and type_ids                 */
    int64_t label;             /**< -1: unlabeled                              */
    const void *x;             /**< dense features, or NULL                    */
    const void *y;             /**< dense target, or NULL                      */
    const int64_t *x_shape;    /**< x's per-sample shape (x_ndim sizes)        */
    const int64_t *y_shape;    /**< y's per-sample shape (y_ndim sizes)        */
    int x_ndim;                /**< 0: x is one element                        */
    int y_ndim;                /**< 0: y is one element                        */
    em_dtype x_dtype;          /**< x's element type                           */
    em_dtype y_dtype;          /**< y's element type                           */
} em_sample;

/** The base every dataset starts with: its operations. */
typedef struct em_dataset em_dataset;
/** A dataset's operations (a vtable). */
typedef struct em_dataset_ops {
    int64_t (*len)(const em_dataset *ds);   /**< number of samples */
    em_status (*get)(const em_dataset *ds, int64_t index, em_sample *out);   /**< fills sample index (in [0, len)); thread-safe */
    void (*free)(em_dataset *ds);           /**< frees the whole dataset */
} em_dataset_ops;
struct em_dataset { const em_dataset_ops *ops; /**< the dataset's operations */ };

/** Number of samples in ds (ds->ops->len). */
static inline int64_t em_dataset_len(const em_dataset *ds) { return ds->ops->len(ds); }
/** ds->ops->get after a bounds check: an index outside [0, len) is misuse. */
em_status em_dataset_get(const em_dataset *ds, int64_t index, em_sample *out);
void em_dataset_free(em_dataset *ds);   /**< ds->ops->free; NULL is ok */

/* ---- the tokenized in-memory dataset ----
 * Every row of a table encoded once, up front, with [CLS]/[SEP] and
 * truncation to max_length, on num_threads threads; the result is identical
 * (id for id) to em_tokenizer_encode(_pair) row by row, whatever the thread
 * count. The dataset copies what it needs: the table and the tokenizer may be
 * freed afterwards. */
/** Options of em_tokenized_dataset_new: which columns hold the texts and the label. */
typedef struct em_tokenized_opts {
    const char *text_a;                /**< column of the (first) text; required              */
    const char *text_b;                /**< column of the second text; NULL: single sentences */
    const char *label;                 /**< label column; NULL: unlabeled (label -1)          */
    /** NULL-terminated list: the label string at position i has id i (exact,
     * case-sensitive match). NULL: labels are decimal integers (surrounding
     * spaces allowed, e.g. "1", "-1"). */
    const char *const *label_names;
    int max_length;                    /**< 0 -> 512                                          */
    int num_threads;                   /**< 0 -> em_num_threads()                             */
} em_tokenized_opts;

/** Tokenizes every row of t with tok into a new in-memory dataset *out (see
 * above). Fails (*out NULL) with EM_ERR_NOT_FOUND when a named column is absent
 * ("path: no column \"label\" (the columns are: sentence, idx)"), with
 * EM_ERR_INVALID "path:line: label \"pos\" is not one of the label names (...)",
 * EM_ERR_FORMAT "path:line: label \"x\" is not an integer", or with the
 * tokenizer's error prefixed by "path:line: column \"sentence\": ".
 * max_length below the number of special tokens is EM_ERR_INVALID.
 * Free with em_dataset_free. */
em_status em_tokenized_dataset_new(const em_table *t, const em_tokenizer *tok, const em_tokenized_opts *opts,
                                   em_dataset **out);

/* ---- dense datasets ----
 * Rows of tensors (torch's TensorDataset), or a length and a get callback
 * (a map-style Dataset written in C). Both go through the same samplers,
 * sharding, even_batches, resume and gather_for_metrics as text datasets;
 * collate stacks their x and y into em_batch.x / .y. */
/** features [N, ...] and targets [N, ...] (or NULL) on the CPU, any dtypes, rows
 * paired by their first index; the dataset keeps contiguous copies, so the
 * tensors may change or go afterwards. An integer target with one value per
 * row ([N] or [N,1]) is also the sample's label (em_batch.labels). Misuse: not
 * on the CPU, 0-d, or a different N. EM_ERR_OOM. Free with em_dataset_free. */
em_status em_tensor_dataset_new(em_tensor *features, em_tensor *targets, em_dataset **out);
/** get(user, index, out) fills a sample (out is zeroed first) whose pointers stay
 * valid while the dataset lives; it must be safe to call from several threads
 * when the loader has workers. An error status fails that batch, with the
 * message of em_last_error (set it with a useful one). free_user(user), if
 * given, runs when the dataset is freed. */
typedef em_status (*em_dataset_get_fn)(void *user, int64_t index, em_sample *out);
/** A dataset of len samples made by get (see em_dataset_get_fn). Misuse: len < 0 or no get. */
em_status em_callback_dataset_new(int64_t len, em_dataset_get_fn get, void *user, void (*free_user)(void *user),
                                  em_dataset **out);

/* ---- collate and DataLoader ----------------------------------------------- */
/** A batch is a struct of named i64 tensors, padded on the right to the longest
 * sequence of the batch (as transformers' DataCollatorWithPadding). Its
 * tensors belong to the caller's current scope like any op result; outside
 * any scope the caller owns them and releases them with em_batch_release. */
typedef struct em_batch {
    em_tensor *input_ids;        /**< i64 [n, len]; pad_id after each sequence (NULL for dense samples) */
    em_tensor *attention_mask;   /**< i64 [n, len]: 1 on tokens, 0 on padding            */
    em_tensor *token_type_ids;   /**< i64 [n, len]: the sample's type ids (0 if absent), 0 on padding */
    em_tensor *labels;           /**< i64 [n]                                            */
    em_tensor *x;                /**< dense samples: [n, x_shape...] of their x_dtype, else NULL */
    em_tensor *y;                /**< dense targets: [n, y_shape...] of their y_dtype, else NULL */
    int64_t n;                   /**< rows                                               */
    int64_t len;                 /**< padded length: longest sequence, rounded up to pad_to_multiple_of */
} em_batch;

/** Options of em_collate; zeroed (or a NULL pointer) means no rounding and pad id 0. */
typedef struct em_collate_opts {
    int64_t pad_to_multiple_of;   /**< 0 or 1: no rounding                          */
    int64_t pad_id;               /**< id written into input_ids padding; default 0 */
} em_collate_opts;

/** Pads n samples (n >= 0; a sample's type_ids may be NULL) into *out, and stacks
 * dense samples' x and y. Text tensors are made unless every sample is dense
 * without ids. opts may be NULL. Dense samples of one batch must share x's (and
 * y's) shape and dtype: otherwise EM_ERR_INVALID naming the two samples. On
 * failure (also OOM) *out is zeroed and nothing is left allocated. */
em_status em_collate(const em_sample *samples, int64_t n, const em_collate_opts *opts, em_batch *out);
/** Releases the batch's tensors (for batches owned outside any scope) and zeroes *b. */
void em_batch_release(em_batch *b);
/** The addresses of b's tensor fields (input_ids, ..., x, y), for code that
 * moves or keeps a whole batch; returns how many (6). Entries may hold NULL. */
int em_batch_tensors(em_batch *b, em_tensor **slots[6]);

/** DataLoader options; zero is the default, as torch's DataLoader prepared by
 * Accelerate. Sharding follows Accelerate's BatchSamplerShard exactly (see
 * em_batch_schedule_make); with num_processes 1 the loader is a plain one. */
typedef struct em_dataloader_opts {
    /** Samples per batch (0 -> 1). Without split_batches it is the batch of ONE
     * process (the global batch is batch_size * num_processes); with
     * split_batches it is the global batch, and each rank gets
     * batch_size / num_processes rows of it. */
    int64_t batch_size;
    bool shuffle;             /**< a permutation of (seed, epoch), the same on every rank   */
    uint64_t seed;            /**< 0 -> em_get_seed() when the loader is made               */
    bool drop_last;           /**< drop the incomplete last batch (and round)               */
    int num_workers;          /**< prefetch threads; 0 loads in the caller's thread         */
    int prefetch_factor;      /**< batches in flight per worker; 0 -> 2                     */
    /** @{ */
    int64_t pad_to_multiple_of, pad_id;   /**< as em_collate_opts                       */
    /** @} */
    int num_processes;        /**< world size; 0 -> 1                                       */
    int process_index;        /**< this rank, in [0, num_processes)                         */
    bool split_batches;       /**< slice each global batch across ranks                     */
    em_tok_flag even_batches; /**< default ON: loop back to the epoch's start so every rank has the same batches */
    bool owns_dataset;        /**< em_dataloader_free (or em_accelerator_free_all) frees the dataset too; a failed em_dataloader_new leaves it the caller's */
} em_dataloader_opts;

/* ---- the batch schedule (sampler + batch sampler + BatchSamplerShard) ----- */
/** The dataset indices that rank process_index gets in epoch `epoch`, batch by
 * batch. The epoch's order is 0..N-1, or with shuffle the permutation
 * em_randperm(N, seed, epoch << 40) (Philox keyed by seed; the same on every
 * rank, so no broadcast is needed). It is cut into batches of batch_size
 * (the last one shorter, or dropped with drop_last). Then, when
 * num_processes P > 1, exactly as Accelerate's BatchSamplerShard:
 *   - no split_batches: batch k goes to rank k % P; a round of P batches is
 *     dealt only when its last batch is full. With drop_last an incomplete
 *     round is dropped. Otherwise, with even_batches, the incomplete batch is
 *     completed and further batches are dealt until every rank has the same
 *     count, taking indices cyclically from the start of the epoch's order
 *     (its first P batches); without even_batches the ranks that hold a batch
 *     of the incomplete round get it as is (lengths then differ by rank).
 *   - split_batches: batch_size must be a multiple of P (else EM_ERR_INVALID);
 *     every full global batch is sliced, rank r taking rows
 *     [r*bs/P, (r+1)*bs/P). An incomplete last batch is completed from the
 *     epoch's first batch with even_batches; without it each rank takes what
 *     is left of its slice, if anything (ranks beyond the end get no batch).
 * Counts are exact: n_batches is what the rank iterates (where Accelerate's
 * `__len__` over-counts, with split_batches and even_batches off, ember does not).
 * The arrays belong to the schedule: free it with em_batch_schedule_free. */
typedef struct em_batch_schedule {
    int64_t n_batches;   /**< batches this rank gets */
    int64_t *offsets;   /**< n_batches + 1 entries: batch k is indices[offsets[k] .. offsets[k+1]) */
    int64_t *indices;   /**< dataset indices                                                     */
} em_batch_schedule;
/** Computes the schedule of dataset_len samples for one rank and epoch into *out
 * (the caller frees it). opts may be NULL (defaults). EM_ERR_INVALID (the message names the option)
 * on impossible options: a negative size or count, process_index outside
 * [0, num_processes), split_batches with batch_size not a multiple of
 * num_processes, a negative dataset_len or epoch. On failure *out is zeroed. */
em_status em_batch_schedule_make(int64_t dataset_len, const em_dataloader_opts *opts, int64_t epoch,
                                 em_batch_schedule *out);
void em_batch_schedule_free(em_batch_schedule *s);   /**< zeroes *s; NULL is ok */

/* ---- the DataLoader --------------------------------------------------------- */
/** A DataLoader (opaque). It iterates the batch schedule of the current epoch, collating each batch from
 * the dataset. Batches come strictly in schedule order whatever num_workers;
 * workers only load ahead (up to num_workers * prefetch_factor batches), and
 * the tensors they make are handed to the caller's current scope by
 * em_dataloader_next. With workers the dataset's get is called from several
 * threads at once, and a sample's arrays must stay valid until the batch that
 * holds it is collated (true of in-memory datasets).
 *
 *     em_dataloader *dl;
 *     em_dataloader_new(ds, &(em_dataloader_opts){ .batch_size = 32, .shuffle = true }, &dl);
 *     for (int epoch = 0; epoch < 3; epoch++) {
 *         em_batch b;
 *         while (em_dataloader_next(dl, &b)) EM_SCOPE { ... }   // b's tensors: caller's scope
 *     }
 */
typedef struct em_dataloader em_dataloader;

/** ds must outlive the loader; opts may be NULL. EM_ERR_INVALID on impossible
 * options (as em_batch_schedule_make), EM_ERR_OOM (also when a worker thread
 * cannot start). On failure *out is NULL. One thread at a time calls a
 * loader's functions (its workers are its own business). */
em_status em_dataloader_new(const em_dataset *ds, const em_dataloader_opts *opts, em_dataloader **out);
void em_dataloader_free(em_dataloader *dl);   /**< joins the workers, drops prefetched batches; NULL is ok */

/** Batches this rank gets per epoch: exact, whatever the epoch. */
int64_t em_dataloader_len(const em_dataloader *dl);
/** Accelerate's GradientState.remainder: dataset length % the global batch
 * (batch_size * num_processes, or batch_size with split_batches), or -1 with
 * drop_last. The real samples of the last gathered global batch are its first
 * `remainder` rows (0: all of them). */
int64_t em_dataloader_remainder(const em_dataloader *dl);

/** The next batch of the current epoch into *out (tensors owned by the current
 * scope), and true. At the end of the epoch: false with *out zeroed, and the
 * loader moves to the next epoch (the next call starts it). On failure (the
 * dataset's get failed, OOM): false, *out zeroed, em_dataloader_status tells
 * why (with em_last_error), and the position stays: a next call retries. */
bool em_dataloader_next(em_dataloader *dl, em_batch *out);
/** EM_OK after a batch or a normal end of epoch; the failure of the last
 * em_dataloader_next otherwise. */
em_status em_dataloader_status(const em_dataloader *dl);
/** True while the batch just returned is the last of its epoch (Accelerate's
 * end_of_dataloader, known one batch ahead). */
bool em_dataloader_end_of_dataloader(const em_dataloader *dl);

/** Restarts iteration at batch 0 of epoch `epoch` (>= 0). */
void em_dataloader_set_epoch(em_dataloader *dl, int64_t epoch);
/** Mid-epoch resume: the current epoch continues at batch n (counted from its
 * start; n >= len ends it at the next call). Batches skipped are not loaded. */
void em_dataloader_skip_first_batches(em_dataloader *dl, int64_t n);

/** Where the loader stands: the epoch, and how many of its batches were
 * returned. A plain struct, for checkpoints. */
typedef struct em_loader_state {
    int64_t epoch;   /**< the current epoch */
    int64_t batch;   /**< batches of it already returned */
} em_loader_state;
/** Where dl stands now (misuse for NULL). */
em_loader_state em_dataloader_state(const em_dataloader *dl);
/** Continues from a saved state: the next batch is batch `batch` of `epoch`.
 * EM_ERR_INVALID if the state does not fit this loader (negative, or batch > len). */
em_status em_dataloader_load_state(em_dataloader *dl, em_loader_state s);

/** The loader's options as resolved at creation (every default filled in, the
 * shuffle seed included). */
em_dataloader_opts em_dataloader_options(const em_dataloader *dl);
/** Re-shards the loader in place (em_accelerator_prepare does this): takes
 * num_processes, process_index, split_batches, even_batches and seed (0 keeps
 * the current seed) from sharding, keeps every other option, and restarts the
 * current epoch at batch 0. EM_ERR_INVALID as em_dataloader_new (the loader is
 * then unchanged), EM_ERR_OOM. */
em_status em_dataloader_reshard(em_dataloader *dl, const em_dataloader_opts *sharding);

/* caller locations for misuse messages (tensor.h's EM__AT) */
#ifndef EMBER_BUILDING
#include "data/data_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
