/* examples/classify.c — run a sequence classifier on sentences from stdin.
 *
 *   ./build/examples/classify --model-dir DIR < sentences.txt
 *
 * DIR is a checkpoint folder as seqcls --output-dir writes it, or as Hugging
 * Face's save_pretrained does: config.json, model.safetensors and vocab.txt
 * (tokenizer_config.json's do_lower_case is honoured when present). For each
 * line of stdin (one sentence; a tab-separated pair is read as text and
 * text_pair) it prints one line: the logits ("%.6g", space-separated), then
 * the predicted label (config.json's id2label name, else LABEL_<i>). The
 * same checkpoint in transformers gives the same logits to about 1e-5, which
 * is how to compare the two.
 *
 * Exit status: 0; 1 when a line could not be classified (reported on stderr,
 * the other lines still printed); 2 for bad arguments or a bad folder.
 */
#include "ember.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static em_tok_flag lower_case_of(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return EM_TOK_DEFAULT;
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "do_lower_case");
    em_tok_flag r = cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? EM_TOK_ON : EM_TOK_OFF) : EM_TOK_DEFAULT;
    cJSON_Delete(j);
    return r;
}

/* The label names and the longest input of the two classifier kinds. */
static const char *label_name(const em_module *m, int i, char *buf, size_t cap)
{
    char **names = NULL;
    if (!strcmp(m->type, "DistilBertForSequenceClassification")) names = ((const em_distilbert_seqcls *)m)->id2label;
    else if (!strcmp(m->type, "BertForSequenceClassification")) names = ((const em_bert_seqcls *)m)->id2label;
    if (names) return names[i];
    snprintf(buf, cap, "LABEL_%d", i);
    return buf;
}

static int max_positions(const em_module *m)
{
    if (!strcmp(m->type, "DistilBertForSequenceClassification"))
        return (int)((const em_distilbert_seqcls *)m)->config.max_position_embeddings;
    if (!strcmp(m->type, "BertForSequenceClassification"))
        return (int)((const em_bert_seqcls *)m)->config.max_position_embeddings;
    return 512;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model-dir") && i + 1 < argc) {
            dir = argv[++i];
        } else {
            fprintf(stderr, "usage: classify --model-dir DIR < sentences.txt\n");
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "usage: classify --model-dir DIR < sentences.txt\n");
        return 2;
    }
    em_module *model;
    if (em_seqcls_from_pretrained(dir, NULL, &model, NULL) != EM_OK) {
        fprintf(stderr, "classify: %s\n", em_last_error());
        return 2;
    }
    char vocab[1024];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", dir);
    em_tokenizer *tok;
    if (em_tokenizer_load(vocab, &(em_tokenizer_opts){ .do_lower_case = lower_case_of(dir) }, &tok) != EM_OK) {
        fprintf(stderr, "classify: %s\n", em_last_error());
        em_module_free(model);
        return 2;
    }
    em_module_train(model, false);
    int max_len = max_positions(model), status = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (int64_t lineno = 1; (len = getline(&line, &cap, stdin)) >= 0; lineno++) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        char *pair = strchr(line, '\t');
        if (pair) *pair++ = 0;
        em_encoding enc;
        em_encode_opts eo = { .max_length = max_len };
        em_status st = pair ? em_tokenizer_encode_pair(tok, line, pair, &eo, &enc) : em_tokenizer_encode(tok, line, &eo, &enc);
        if (st != EM_OK) {
            fprintf(stderr, "classify: stdin:%lld: %s\n", (long long)lineno, em_last_error());
            status = 1;
            continue;
        }
        EM_SCOPE EM_NO_GRAD {
            int64_t *ids = malloc(sizeof(int64_t) * (size_t)enc.len), *types = malloc(sizeof(int64_t) * (size_t)enc.len);
            for (int i = 0; i < enc.len; i++) ids[i] = enc.ids[i], types[i] = enc.type_ids[i];
            em_tensor *input_ids = em_from_data(ids, 2, (int64_t[]){1, enc.len}, EM_I64);
            em_tensor *token_types = em_from_data(types, 2, (int64_t[]){1, enc.len}, EM_I64);
            free(ids), free(types);
            em_tensor *mask = em_ones(2, (int64_t[]){1, enc.len}, EM_I64, EM_CPU);
            em_seqcls_output out = em_seqcls_forward(model, &(em_seqcls_inputs){
                .input_ids = input_ids, .attention_mask = mask, .token_type_ids = token_types });
            if (!out.logits) {
                fprintf(stderr, "classify: stdin:%lld: %s\n", (long long)lineno, em_last_error());
                status = 1;
            } else {
                em_tensor *logits = em_to_dtype(out.logits, EM_F32);
                int64_t C = logits->shape[1];
                int best = 0;
                for (int64_t c = 0; c < C; c++) {
                    double v = em_get(logits, (int64_t[]){0, c});
                    printf("%s%.6g", c ? " " : "", v);
                    if (v > em_get(logits, (int64_t[]){0, best})) best = (int)c;
                }
                char buf[32];
                printf(" %s\n", label_name(model, best, buf, sizeof buf));
            }
        }
        em_encoding_free(&enc);
    }
    free(line);
    em_tokenizer_free(tok);
    em_module_free(model);
    return status;
}
