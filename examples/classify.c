/* examples/classify.c — run a fine-tuned sequence classifier on sentences from stdin.
 *
 *   ./build/examples/classify --model_dir DIR [--batch_size 32] [--max_length N] [--mixed_precision no|bf16]
 *                             [--allow_new_head] < sentences.txt
 *
 * DIR is a folder as seqcls --output_dir writes it, or as transformers'
 * save_pretrained does: config.json, model.safetensors, and tokenizer.json or
 * vocab.txt (with tokenizer_config.json). For each line of stdin (one
 * sentence; a tab-separated pair is read as text and text_pair) it prints one
 * line: the logits ("%.6g", space-separated), then the predicted label's name
 * from config.json's id2label. The same folder in transformers gives the same
 * logits to about 1e-5 (tools/compare-classify.py checks it).
 *
 * Strict by default: a folder whose classification head is not in the
 * checkpoint (a base model such as all-MiniLM-L6-v2, never fine-tuned) is
 * refused, since its labels would come from random weights; --allow_new_head
 * runs it anyway. Any other missing tensor is always an error. Lines are run
 * --batch_size at a time, padded to the longest of the batch, and truncated
 * at the tokenizer's model_max_length (at most the model's positions).
 * --mixed_precision bf16 runs the forward under bf16 autocast (the matmuls in
 * bf16, f32 weights), as torch.autocast("cpu", torch.bfloat16) does: faster
 * where the CPU has bf16 instructions, logits to about 1e-2.
 *
 * Exit status: 0; 1 when a line could not be classified (reported on stderr
 * with its line number, the other lines still printed) or gave non-finite
 * logits; 2 for bad arguments or a bad folder. */
#include "ember.h"

#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: classify --model_dir DIR [--batch_size N (32)] [--max_length N] [--mixed_precision no|bf16] "
               "[--allow_new_head] < sentences.txt\n"
               "       (dashes or underscores; --model-dir and --model_name_or_path are the same option)\n");
}

/* Loads the model strictly; NULL after printing why. */
static em_module *load(const char *dir, bool allow_new_head)
{
    em_module *model;
    em_load_report r;
    if (em_seqcls_from_pretrained(dir, NULL, &model, &r) != EM_OK) {
        fprintf(stderr, "classify: %s\n", em_last_error());
        return NULL;
    }
    int head = 0, other = 0;
    for (int i = 0; i < r.n_missing; i++) em_seqcls_is_head_param(r.missing[i]) ? head++ : other++;
    if (r.n_unexpected) {   /* a config.json that does not describe its weights (fewer layers, say) */
        fprintf(stderr, "classify: %s: the checkpoint holds %d tensor(s) the model described by config.json does not "
                        "have:", dir, r.n_unexpected);
        for (int i = 0; i < r.n_unexpected && i < 8; i++) fprintf(stderr, " %s", r.unexpected[i]);
        fprintf(stderr, "%s\n", r.n_unexpected > 8 ? " ..." : "");
    }
    if (other) {
        fprintf(stderr, "classify: %s: the checkpoint lacks %d tensor(s) of the model:", dir, other);
        for (int i = 0; i < r.n_missing; i++)
            if (!em_seqcls_is_head_param(r.missing[i])) fprintf(stderr, " %s", r.missing[i]);
        fprintf(stderr, "\n");
    } else if (head && !allow_new_head) {
        fprintf(stderr,
                "classify: %s has no trained classification head (", dir);
        for (int i = 0, k = 0; i < r.n_missing; i++)
            if (em_seqcls_is_head_param(r.missing[i])) fprintf(stderr, "%s%s", k++ ? ", " : "", r.missing[i]);
        fprintf(stderr, " not in the checkpoint): its labels would come from random weights. Fine-tune it first "
                        "(seqcls --model_name_or_path %s --output_dir OUT), or pass --allow_new_head\n", dir);
    } else if (head) {
        fprintf(stderr, "classify: warning: %d head tensor(s) of %s are random (--allow_new_head)\n", head, dir);
    }
    bool refuse = other || (head && !allow_new_head) || r.n_unexpected;
    em_load_report_free(&r);
    if (refuse) {
        em_module_free(model);
        return NULL;
    }
    return model;
}

typedef struct line { char *text, *pair; int64_t lineno; } line;

/* Classifies n lines; returns false if one failed (reported). */
static bool bf16;   /* --mixed_precision bf16 */

static bool run_batch(em_module *model, const em_tokenizer *tok, line *l, int n, int max_len)
{
    const char **texts = calloc((size_t)n, sizeof *texts), **pairs = calloc((size_t)n, sizeof *pairs);
    em_encoding *enc = calloc((size_t)n, sizeof *enc);
    bool *good = calloc((size_t)n, sizeof *good);
    if (!texts || !pairs || !enc || !good) {
        fprintf(stderr, "classify: stdin:%lld-%lld: out of memory for a batch of %d lines\n", (long long)l[0].lineno,
                (long long)l[n - 1].lineno, n);
        free(texts), free(pairs), free(enc), free(good);
        return false;
    }
    bool any_pair = false, ok = true;
    for (int i = 0; i < n; i++) texts[i] = l[i].text, pairs[i] = l[i].pair ? l[i].pair : "", any_pair |= l[i].pair != NULL;
    em_encode_opts eo = { .max_length = max_len };
    int n_good = 0, width = 0;
    if (em_tokenizer_encode_batch(tok, n, texts, any_pair ? pairs : NULL, &eo, enc) == EM_OK) {
        for (int i = 0; i < n; i++) good[i] = true;
    } else {   /* one bad line: encode one by one, to name each failing line */
        for (int i = 0; i < n; i++) {
            em_status st = l[i].pair ? em_tokenizer_encode_pair(tok, l[i].text, l[i].pair, &eo, &enc[i])
                                     : em_tokenizer_encode(tok, l[i].text, &eo, &enc[i]);
            good[i] = st == EM_OK;
            if (!good[i]) fprintf(stderr, "classify: stdin:%lld: %s\n", (long long)l[i].lineno, em_last_error()), ok = false;
        }
    }
    for (int i = 0; i < n; i++)
        if (good[i]) n_good++, width = enc[i].len > width ? enc[i].len : width;
    if (n_good) EM_SCOPE EM_NO_GRAD {
        int64_t *ids = calloc((size_t)n_good * (size_t)width, sizeof *ids);
        int64_t *types = calloc((size_t)n_good * (size_t)width, sizeof *types);
        int64_t *mask = calloc((size_t)n_good * (size_t)width, sizeof *mask);
        int32_t pad = em_tokenizer_special_ids(tok).pad;
        for (int i = 0, r = 0; i < n && ids && types && mask; i++) {
            if (!good[i]) continue;
            for (int t = 0; t < width; t++) {
                bool in = t < enc[i].len;
                ids[r * width + t] = in ? enc[i].ids[t] : (pad >= 0 ? pad : 0);
                types[r * width + t] = in ? enc[i].type_ids[t] : 0;
                mask[r * width + t] = in;
            }
            r++;
        }
        int64_t shape[2] = { n_good, width };
        bool have = ids && types && mask;
        em_tensor *input_ids = have ? em_from_data(ids, 2, shape, EM_I64) : NULL;
        em_tensor *token_types = have ? em_from_data(types, 2, shape, EM_I64) : NULL;
        em_tensor *attention = have ? em_from_data(mask, 2, shape, EM_I64) : NULL;
        free(ids), free(types), free(mask);
        em_seqcls_output out = {0};
        if (input_ids && token_types && attention) EM_AUTOCAST_REGION(bf16 ? EM_BF16 : EM_F32) {
            out = em_seqcls_forward(model, &(em_seqcls_inputs){
                .input_ids = input_ids, .attention_mask = attention, .token_type_ids = token_types });
        }
        if (!input_ids || !token_types || !attention) {
            fprintf(stderr, "classify: stdin:%lld-%lld: out of memory for the batch's token ids\n",
                    (long long)l[0].lineno, (long long)l[n - 1].lineno);
            ok = false;
        } else if (!out.logits) {
            fprintf(stderr, "classify: stdin:%lld-%lld: %s\n", (long long)l[0].lineno, (long long)l[n - 1].lineno,
                    em_last_error());
            ok = false;
        } else {
            em_tensor *logits = em_to_dtype(out.logits, EM_F32);
            const char *const *names = em_seqcls_get_info(model).id2label;
            int64_t C = logits->shape[1];
            for (int i = 0, r = 0; i < n; i++) {
                if (!good[i]) continue;
                int best = 0;
                bool finite = true;
                for (int64_t c = 0; c < C; c++) {
                    double v = em_get(logits, (int64_t[]){ r, c });
                    finite &= isfinite(v) != 0;
                    printf("%s%.6g", c ? " " : "", v);
                    if (v > em_get(logits, (int64_t[]){ r, best })) best = (int)c;
                }
                if (names) printf(" %s\n", names[best]);
                else printf(" LABEL_%d\n", best);
                if (!finite) {
                    fprintf(stderr, "classify: stdin:%lld: the logits are not finite: the checkpoint holds NaN or "
                                    "infinite weights\n", (long long)l[i].lineno);
                    ok = false;
                }
                r++;
            }
        }
    }
    for (int i = 0; i < n; i++) em_encoding_free(&enc[i]);
    free(enc), free(good), free(texts), free(pairs);
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    int batch = 32, max_len = 0;
    bool allow_new_head = false;
    for (int i = 1; i < argc; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s", argv[i]);
        if (!strncmp(key, "--", 2))
            for (char *c = key + 2; *c; c++)
                if (*c == '-') *c = '_';
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = !strcmp(key, "--model_dir") || !strcmp(key, "--model_name_or_path") ||
                           !strcmp(key, "--batch_size") || !strcmp(key, "--max_length") ||
                           !strcmp(key, "--mixed_precision");
        if (takes_value && !v) {
            fprintf(stderr, "classify: %s needs a value\n", argv[i]);
            usage(stderr);
            return 2;
        }
        if (!strcmp(key, "--model_dir") || !strcmp(key, "--model_name_or_path")) dir = argv[++i];
        else if (!strcmp(key, "--batch_size") || !strcmp(key, "--max_length")) {
            bool is_batch = !strcmp(key, "--batch_size");
            char *e;
            errno = 0;
            long x = strtol(argv[++i], &e, 10);
            long lo = is_batch ? 1 : 3, hi = is_batch ? 65536 : 1000000;
            if (!*argv[i] || *e || errno || x < lo || x > hi) {
                fprintf(stderr, "classify: %s %s: want a whole number from %ld to %ld\n", argv[i - 1], argv[i], lo, hi);
                return 2;
            }
            *(is_batch ? &batch : &max_len) = (int)x;
        } else if (!strcmp(key, "--allow_new_head")) allow_new_head = true;
        else if (!strcmp(key, "--mixed_precision") && (!strcmp(v, "no") || !strcmp(v, "bf16"))) bf16 = !strcmp(argv[++i], "bf16");
        else if (!strcmp(key, "-h") || !strcmp(key, "--help")) { usage(stdout); return 0; }
        else {
            fprintf(stderr, "classify: bad argument %s%s%s\n", argv[i], takes_value ? " " : "", takes_value ? v : "");
            usage(stderr);
            return 2;
        }
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    em_module *model = load(dir, allow_new_head);
    if (!model) return 2;
    em_tokenizer *tok;
    if (em_tokenizer_from_pretrained(dir, NULL, &tok) != EM_OK) {
        fprintf(stderr, "classify: %s\n", em_last_error());
        em_module_free(model);
        return 2;
    }
    em_seqcls_info info = em_seqcls_get_info(model);
    int limit = info.max_length > 0 ? (int)info.max_length : 512;
    int tok_max = em_tokenizer_model_max_length(tok);
    if (tok_max > 0 && tok_max < limit) limit = tok_max;
    if (!max_len || max_len > limit) max_len = limit;
    int64_t embed = info.vocab_size;
    if (embed > 0 && em_tokenizer_vocab_size(tok) > embed) {   /* an id past the embedding would abort mid-run */
        fprintf(stderr, "classify: %s: the tokenizer has %d tokens but the model's embedding only %lld rows "
                        "(config.json vocab_size): they do not belong together\n",
                dir, em_tokenizer_vocab_size(tok), (long long)embed);
        em_tokenizer_free(tok);
        em_module_free(model);
        return 2;
    }
    line *lines = calloc((size_t)batch, sizeof *lines);
    if (!lines) {
        fprintf(stderr, "classify: out of memory for a batch of %d lines\n", batch);
        em_tokenizer_free(tok);
        em_module_free(model);
        return 2;
    }
    int n = 0, status = 0;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len;
    /* one region around every batch (run_batch opens its own inside it): the
     * weights' bf16 casts, made with grad mode off, stay in autocast's cache
     * from one batch to the next, as nothing writes the weights */
    if (bf16) em_autocast_begin(EM_BF16);
    for (int64_t lineno = 1; (len = getline(&buf, &cap, stdin)) >= 0; lineno++) {
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = 0;
        if (memchr(buf, 0, (size_t)len)) {   /* text is never NUL: the line would be cut short silently */
            fprintf(stderr, "classify: stdin:%lld: a NUL byte in the line (skipped)\n", (long long)lineno);
            status = 1;
            continue;
        }
        char *pair = strchr(buf, '\t');
        if (pair) *pair++ = 0;
        lines[n] = (line){ strdup(buf), pair ? strdup(pair) : NULL, lineno };
        if (!lines[n].text || (pair && !lines[n].pair)) {
            fprintf(stderr, "classify: stdin:%lld: out of memory\n", (long long)lineno);
            free(lines[n].text), free(lines[n].pair);
            status = 1;
            break;
        }
        if (++n == batch) {
            if (!run_batch(model, tok, lines, n, max_len)) status = 1;
            for (int i = 0; i < n; i++) free(lines[i].text), free(lines[i].pair);
            n = 0;
        }
    }
    if (ferror(stdin)) {
        fprintf(stderr, "classify: cannot read stdin: %s\n", strerror(errno));
        status = 1;
    }
    if (n && !run_batch(model, tok, lines, n, max_len)) status = 1;
    if (bf16) em_autocast_end();
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "classify: cannot write stdout: %s\n", strerror(errno));
        status = 1;
    }
    for (int i = 0; i < n; i++) free(lines[i].text), free(lines[i].pair);
    free(lines), free(buf);
    em_tokenizer_free(tok);
    em_module_free(model);
    return status;
}
