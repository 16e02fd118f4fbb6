/* ember — transformers' RobertaModel and RobertaForSequenceClassification
 * (modeling_roberta.py): a family on the BERT layout (nn/bert.c's
 * em__bert_body), so its parameter names are BERT's under "roberta.".
 * What differs from BERT:
 *   - position ids count from pad_token_id + 1 over the tokens that are not
 *     pad_token_id, and a padding token takes position pad_token_id (the
 *     position embedding's padding row): em__encoder.positions_from_ids;
 *   - the sequence classifier has no pooler (add_pooling_layer=False); its head
 *     classifier.{dense,out_proj} reads the first token (<s>): dropout, dense,
 *     tanh, dropout, out_proj (the one classifier.dropout, used twice);
 *   - RobertaConfig's defaults: vocab_size 50265, pad_token_id 1, the rest BertConfig's.
 * The structs stay in this file: the generic API (em_seqcls_from_pretrained,
 * em_seqcls_forward, em_module_*, em_save_pretrained) reaches the family
 * through em_module.family. Tokenization (RoBERTa's byte-level BPE) is not here. */
#include "nn/nn_internal.h"
#include "tensor/support.h"

extern const em__arch em__roberta_arch;   /* below; nn/families.c registers it */

#include <stdio.h>
#include <string.h>

/* RobertaConfig has BertConfig's fields. */
typedef em_bert_config em_roberta_config;

typedef struct em_roberta_model {   /* RobertaModel */
    em_module base;
    em_roberta_config config;   /* resolved */
    void **layer;               /* encoder.layer.<i> */
    em__encoder enc;            /* the encoder pass's view of the body */
    em_nn_linear *pooler;       /* pooler.dense, or NULL (no_pooler) */
} em_roberta_model;

typedef struct em_roberta_seqcls {   /* RobertaForSequenceClassification */
    em_module base;
    em_roberta_config config;   /* resolved, no_pooler; problem_type set by the first loss */
    em_roberta_model *roberta;
    em_nn_dropout *dropout;           /* classifier.dropout */
    em_nn_linear *dense, *out_proj;   /* classifier.dense [H -> H], classifier.out_proj [H -> num_labels] */
    char **id2label;
} em_roberta_seqcls;

/* cfg's zero fields as BertConfig's defaults, but vocab_size 50265. pad_token_id
 * is kept (0 is a pad id like any other): RobertaConfig's 1 is where parse starts. */
static em_roberta_config em_roberta_config_resolve(const em_roberta_config *cfg)
{
    em_roberta_config c = cfg ? *cfg : (em_roberta_config){0};
    if (!c.vocab_size) c.vocab_size = 50265;
    return em_bert_config_resolve(&c);
}

/* EM__FAMILY_FUNCTIONS defines these; declared static first, they stay in this file */
static em_seqcls_output em_roberta_seqcls_forward(em_roberta_seqcls *m, const em_seqcls_inputs *in);
__attribute__((unused)) static em_roberta_model *em_roberta_model_new(const em_roberta_config *cfg);
__attribute__((unused)) static em_roberta_seqcls *em_roberta_seqcls_new(const em_roberta_config *cfg);

/* model_destroy, seqcls_destroy, construct and the em__arch hooks every family shares (nn_internal.h) */
EM__FAMILY_FUNCTIONS(roberta, "RobertaModel")

/* Why c cannot be built (BERT's reasons, and room for a position after the padding rows), or NULL. */
static const char *bad_config(const em_roberta_config *c, char *buf, size_t cap)
{
    const char *why = em__bert_bad_config(c, buf, cap);
    if (!why && c->max_position_embeddings <= c->pad_token_id + 1)
        snprintf(buf, cap, "max_position_embeddings %lld leaves no position after pad_token_id %lld + 1",
                 (long long)c->max_position_embeddings, (long long)c->pad_token_id);
    else
        return why;
    return buf;
}

static em_roberta_model *model_build(const em_roberta_config *cfg)
{
    char why[256];
    em_roberta_config c = em_roberta_config_resolve(cfg);
    em_roberta_model *m = em__model_alloc(sizeof *m, "RobertaModel", "em_roberta_model_new",
                                          bad_config(&c, why, sizeof why), model_destroy);
    if (!m) return NULL;
    m->config = c;
    bool ok = (m->layer = em__calloc((size_t)c.num_hidden_layers, sizeof *m->layer)) &&
              em__bert_body(&m->base, &c, true, m->layer, &m->enc, &m->pooler);
    return em__built(&m->base, ok);
}

static em_roberta_seqcls *seqcls_build(const em_roberta_config *cfg)
{
    em_roberta_config c = em_roberta_config_resolve(cfg);
    c.no_pooler = true;   /* RobertaModel(config, add_pooling_layer=False) */
    em_roberta_model *body = model_build(&c);
    em_roberta_seqcls *s = body ? em__seqcls_alloc(sizeof *s, "RobertaForSequenceClassification", &body->base,
                                                   "roberta", seqcls_destroy)
                                : NULL;
    if (!s) return NULL;
    s->roberta = body;
    s->config = body->config;
    int64_t H = c.hidden_size;
    em_module *head = em__module_alloc(sizeof *head, "RobertaClassificationHead");
    bool ok = em__add_child(&s->base, "classifier", head) &&
              em__add_child(head, "dense", s->dense = em_nn_linear_new(H, H, NULL)) &&
              em__add_child(head, "dropout", s->dropout = em_nn_dropout_new(em__bert_classifier_dropout(&c))) &&
              em__add_child(head, "out_proj", s->out_proj = em_nn_linear_new(H, c.num_labels, NULL));
    return em__built(&s->base, ok);
}

/* The encoder's first token (<s>) through the head: reads only that token, so a
 * right-padded batch runs on its real tokens (em__encoder_forward's first_only). */
static em_seqcls_output em_roberta_seqcls_forward(em_roberta_seqcls *m, const em_seqcls_inputs *in)
{
    static const char op[] = "em_seqcls_forward (RoBERTa)";
    em_seqcls_output out = {0};
    em_scope_begin();
    em_tensor *x = em__encoder_forward(&m->roberta->enc, in->input_ids, in->attention_mask, in->token_type_ids, true, op);
    em_tensor *h = x ? em_tanh(em_nn_linear_forward(m->dense, em_nn_dropout_forward(m->dropout, x))) : NULL;
    em_tensor *logits = h ? em_nn_linear_forward(m->out_proj, em_nn_dropout_forward(m->dropout, h)) : NULL;
    out = em__seqcls_output(logits, in->labels, m->config.num_labels, &m->config.problem_type, op);
    em_scope_end();
    return out;
}

/* ---- config.json: BertConfig's fields, from RobertaConfig's defaults ---------------------------------- */

static em_status parse(const cJSON *j, const char *path, void *out)
{
    em_roberta_config c = em_roberta_config_resolve(NULL);
    c.pad_token_id = 1;
    em_status s = em__bert_config_parse(j, path, &c);
    if (!s && c.max_position_embeddings <= c.pad_token_id + 1)
        s = em__fail(EM_ERR_INVALID, "%s: max_position_embeddings %lld leaves no position after pad_token_id %lld + 1",
                     path, (long long)c.max_position_embeddings, (long long)c.pad_token_id);
    if (!s) *(em_roberta_config *)out = c;
    return s;
}

static bool write(cJSON *j, const em_module *m) { return em__bert_config_write(j, config_of(m)); }

static void size(const void *cfg, int num_labels, em__arch_size *out) { em__bert_size(cfg, num_labels, out); }

static int64_t positions_reserved(const void *cfg) { return ((const em_roberta_config *)cfg)->pad_token_id + 1; }

const em__arch em__roberta_arch = {
    .model_type = "roberta", .prefix = "roberta", .class_prefix = "Roberta",
    .class_name = {"RobertaModel", "RobertaForSequenceClassification"},
    .config_size = sizeof(em_roberta_config),
    EM__FAMILY_HOOKS,
    .positions_reserved = positions_reserved,
};
