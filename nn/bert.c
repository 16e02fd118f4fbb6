/* ember — transformers' BertModel and BertForSequenceClassification: the
 * layout of BERT-family checkpoints (bert-base, MiniLM, ...). Module and
 * parameter names follow modeling_bert.py:
 *   embeddings.{word,position,token_type}_embeddings, embeddings.LayerNorm,
 *   encoder.layer.<i>.attention.self.{query,key,value},
 *   encoder.layer.<i>.attention.output.{dense,LayerNorm},
 *   encoder.layer.<i>.intermediate.dense, encoder.layer.<i>.output.{dense,LayerNorm},
 *   pooler.dense; the head: classifier. */
#include "nn/nn_internal.h"
#include "tensor/support.h"

extern const em__arch em__bert_arch;   /* below; nn/families.c registers it */

#include <stdio.h>
#include <string.h>

/* ---- config ------------------------------------------------------------------------ */

em_bert_config em_bert_config_resolve(const em_bert_config *cfg)
{
    em_bert_config c = cfg ? *cfg : (em_bert_config){0};
    if (!c.vocab_size) c.vocab_size = 30522;
    if (!c.hidden_size) c.hidden_size = 768;
    if (!c.num_hidden_layers) c.num_hidden_layers = 12;
    if (!c.num_attention_heads) c.num_attention_heads = 12;
    if (!c.intermediate_size) c.intermediate_size = 3072;
    c.hidden_dropout_prob = em__opt(c.hidden_dropout_prob, 0.1);
    c.attention_probs_dropout_prob = em__opt(c.attention_probs_dropout_prob, 0.1);
    if (!c.max_position_embeddings) c.max_position_embeddings = 512;
    if (!c.type_vocab_size) c.type_vocab_size = 2;
    c.initializer_range = em__opt(c.initializer_range, 0.02);
    c.layer_norm_eps = em__opt(c.layer_norm_eps, 1e-12);
    if (!c.num_labels) c.num_labels = 2;
    return c;
}

double em__bert_classifier_dropout(const em_bert_config *c)
{
    return c->classifier_dropout == 0 && !__builtin_signbit(c->classifier_dropout) ? c->hidden_dropout_prob
                                                                                   : c->classifier_dropout;
}

const char *em__bert_bad_config(const em_bert_config *c, char *buf, size_t cap)
{
    if (c->vocab_size <= 0 || c->hidden_size <= 0 || c->num_hidden_layers <= 0 || c->num_attention_heads <= 0 ||
        c->intermediate_size <= 0 || c->max_position_embeddings <= 0 || c->type_vocab_size <= 0 || c->num_labels <= 0)
        snprintf(buf, cap, "sizes must be positive");
    else if (c->hidden_size % c->num_attention_heads)
        snprintf(buf, cap, "num_attention_heads %lld must divide hidden_size %lld evenly",
                 (long long)c->num_attention_heads, (long long)c->hidden_size);
    else if (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size)
        snprintf(buf, cap, "pad_token_id %lld is outside the vocabulary [0, %lld)", (long long)c->pad_token_id,
                 (long long)c->vocab_size);
    else if (!(c->hidden_dropout_prob >= 0 && c->hidden_dropout_prob <= 1 && c->attention_probs_dropout_prob >= 0 &&
               c->attention_probs_dropout_prob < 1 && em__bert_classifier_dropout(c) >= 0 &&
               em__bert_classifier_dropout(c) <= 1 && c->layer_norm_eps >= 0 && c->initializer_range >= 0))
        snprintf(buf, cap, "dropouts must be in [0, 1] (attention < 1); eps and initializer_range >= 0");
    else if ((unsigned)c->hidden_act > EM_ACT_TANH || (unsigned)c->problem_type > EM_PROBLEM_MULTI_LABEL)
        snprintf(buf, cap, "unknown hidden_act %d or problem_type %d", (int)c->hidden_act, (int)c->problem_type);
    else
        return NULL;
    return buf;
}

/* ---- modules ------------------------------------------------------------------------------ */

typedef struct bert_embeddings {
    em_module base;
    em_nn_embedding *word, *position, *token_type;
    em_nn_layer_norm *ln;
    em_nn_dropout *dropout;
    em_tensor *position_ids;
} bert_embeddings;

typedef struct bert_layer {
    em_module base;
    em_nn_linear *query, *key, *value, *attn_dense, *inter_dense, *out_dense;
    em_nn_dropout *attn_dropout, *attn_out_dropout, *out_dropout;
    em_nn_layer_norm *attn_ln, *out_ln;
    int64_t n_heads;
    em_activation act;
} bert_layer;

struct em_bert_model {
    em_module base;
    em_bert_config config;
    void **layer;           /* the bert_layers */
    em__encoder enc;        /* what the encoder pass sees of them and the embeddings */
    em_nn_linear *pooler;   /* pooler.dense, or NULL */
};

/* model_destroy, seqcls_destroy, construct, em_bert_model_new, em_bert_seqcls_new and the
 * em__arch hooks every family shares (nn_internal.h) */
EM__FAMILY_FUNCTIONS(bert, "BertModel")


static em_tensor *layer_forward(void *layer, em_tensor *x, em_tensor *m4, const em__packing *plan);

/* A child module with no parameters of its own, named for the layout. */
static em_module *group(em_module *parent, const char *name, const char *type)
{
    em_module *g = em__module_alloc(sizeof *g, type);
    return em__add_child(parent, name, g) ? g : NULL;
}

/* position_pad >= 0: the position embedding's padding_idx (RoBERTa's), else none */
static bert_embeddings *embeddings_new(const em_bert_config *c, int64_t position_pad)
{
    bert_embeddings *e = em__module_alloc(sizeof *e, "BertEmbeddings");
    if (!e) return NULL;
    int64_t H = c->hidden_size;
    em_nn_embedding_opts wo = {.has_padding_idx = true, .padding_idx = c->pad_token_id};
    em_nn_embedding_opts po = {.has_padding_idx = position_pad >= 0, .padding_idx = position_pad};
    bool ok = em__add_child(&e->base, "word_embeddings", e->word = em_nn_embedding_new(c->vocab_size, H, &wo)) &&
              em__add_child(&e->base, "position_embeddings",
                            e->position = em_nn_embedding_new(c->max_position_embeddings, H, &po)) &&
              em__add_child(&e->base, "token_type_embeddings",
                            e->token_type = em_nn_embedding_new(c->type_vocab_size, H, NULL)) &&
              em__add_child(&e->base, "LayerNorm",
                            e->ln = em_nn_layer_norm_new(H, &(em_nn_layer_norm_opts){.eps = c->layer_norm_eps})) &&
              em__add_child(&e->base, "dropout", e->dropout = em_nn_dropout_new(c->hidden_dropout_prob)) &&
              (e->position_ids = em__position_ids(&e->base, c->max_position_embeddings));
    return em__built(&e->base, ok);
}

static bert_layer *layer_new(const em_bert_config *c)
{
    bert_layer *l = em__module_alloc(sizeof *l, "BertLayer");
    if (!l) return NULL;
    l->n_heads = c->num_attention_heads;
    l->act = c->hidden_act;
    int64_t H = c->hidden_size, I = c->intermediate_size;
    em_nn_layer_norm_opts lno = {.eps = c->layer_norm_eps};
    em_module *att, *self, *aout, *inter, *out;
    bool ok = (att = group(&l->base, "attention", "BertAttention")) && (self = group(att, "self", "BertSelfAttention")) &&
              em__add_child(self, "query", l->query = em_nn_linear_new(H, H, NULL)) &&
              em__add_child(self, "key", l->key = em_nn_linear_new(H, H, NULL)) &&
              em__add_child(self, "value", l->value = em_nn_linear_new(H, H, NULL)) &&
              em__add_child(self, "dropout", l->attn_dropout = em_nn_dropout_new(c->attention_probs_dropout_prob)) &&
              (aout = group(att, "output", "BertSelfOutput")) &&
              em__add_child(aout, "dense", l->attn_dense = em_nn_linear_new(H, H, NULL)) &&
              em__add_child(aout, "LayerNorm", l->attn_ln = em_nn_layer_norm_new(H, &lno)) &&
              em__add_child(aout, "dropout", l->attn_out_dropout = em_nn_dropout_new(c->hidden_dropout_prob)) &&
              (inter = group(&l->base, "intermediate", "BertIntermediate")) &&
              em__add_child(inter, "dense", l->inter_dense = em_nn_linear_new(H, I, NULL)) &&
              (out = group(&l->base, "output", "BertOutput")) &&
              em__add_child(out, "dense", l->out_dense = em_nn_linear_new(I, H, NULL)) &&
              em__add_child(out, "LayerNorm", l->out_ln = em_nn_layer_norm_new(H, &lno)) &&
              em__add_child(out, "dropout", l->out_dropout = em_nn_dropout_new(c->hidden_dropout_prob));
    return em__built(&l->base, ok);
}

bool em__bert_body(em_module *m, const em_bert_config *c, bool positions_from_ids, void **layers, em__encoder *enc,
                   em_nn_linear **pooler)
{
    em_module *enc_g, *list, *pool;
    bert_embeddings *e;
    *pooler = NULL;
    bool ok = em__add_child(m, "embeddings", e = embeddings_new(c, positions_from_ids ? c->pad_token_id : -1)) &&
              (enc_g = group(m, "encoder", "BertEncoder")) && (list = group(enc_g, "layer", "ModuleList"));
    for (int64_t i = 0; ok && i < c->num_hidden_layers; i++) ok = em__add_indexed(list, i, layers[i] = layer_new(c));
    if (ok && !c->no_pooler)
        ok = (pool = group(m, "pooler", "BertPooler")) &&
             em__add_child(pool, "dense", *pooler = em_nn_linear_new(c->hidden_size, c->hidden_size, NULL));
    if (ok)
        *enc = (em__encoder){.word = e->word, .position = e->position, .token_type = e->token_type,
                             .position_ids = e->position_ids, .ln = e->ln, .dropout = e->dropout,
                             .layers = (void *const *)layers, .n_layers = c->num_hidden_layers,
                             .max_positions = c->max_position_embeddings, .layer_forward = layer_forward,
                             .positions_from_ids = positions_from_ids, .padding_idx = c->pad_token_id};
    return ok;
}

static em_bert_model *model_build(const em_bert_config *cfg)
{
    char why[256];
    em_bert_config c = em_bert_config_resolve(cfg);
    em_bert_model *m = em__model_alloc(sizeof *m, "BertModel", "em_bert_model_new",
                                       em__bert_bad_config(&c, why, sizeof why), model_destroy);
    if (!m) return NULL;
    m->config = c;
    bool ok = (m->layer = em__calloc((size_t)c.num_hidden_layers, sizeof *m->layer)) &&
              em__bert_body(&m->base, &c, false, m->layer, &m->enc, &m->pooler);
    return em__built(&m->base, ok);
}

static em_bert_seqcls *seqcls_build(const em_bert_config *cfg)
{
    em_bert_model *body = model_build(cfg);
    em_bert_seqcls *s =
        body ? em__seqcls_alloc(sizeof *s, "BertForSequenceClassification", &body->base, "bert", seqcls_destroy) : NULL;
    if (!s) return NULL;
    s->bert = body;
    s->config = body->config;
    double p = em__bert_classifier_dropout(&s->config);
    bool ok = em__add_child(&s->base, "dropout", s->dropout = em_nn_dropout_new(p)) &&
              em__add_child(&s->base, "classifier",
                            s->classifier = em_nn_linear_new(s->config.hidden_size, s->config.num_labels, NULL));
    return em__built(&s->base, ok);
}

const em_bert_config *em_bert_model_config(const em_bert_model *m) { return &m->config; }

/* ---- forward ------------------------------------------------------------------------------------ */

/* x: [B,S,D], or the packed [n,D] rows of plan (attention runs on them too); an em__layer_fn */
static em_tensor *layer_forward(void *layer, em_tensor *x, em_tensor *m4, const em__packing *plan)
{
    bert_layer *l = layer;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *ctx = em__attention_context(l->query, l->key, l->value, l->n_heads, l->attn_dropout, x, m4, plan);
    em_tensor *a = em_nn_dropout_forward(l->attn_out_dropout, em_nn_linear_forward(l->attn_dense, ctx));
    a = em_nn_layer_norm_forward(l->attn_ln, em_add(a, x));
    em_tensor *h = em__activation(l->act, em_nn_linear_forward(l->inter_dense, a));
    h = em_nn_dropout_forward(l->out_dropout, em_nn_linear_forward(l->out_dense, h));
    h = em_nn_layer_norm_forward(l->out_ln, em_add(h, a));
    if (h) r = em_keep(h);
    em_scope_end();
    return r;
}

/* The encoder (em__encoder_forward) and, when pooled is not NULL, the pooler's
 * output of the first token ([B,D], NULL without a pooler). first_only: the
 * caller reads only the pooled output, so a right-padded batch may run on its
 * real tokens; the returned hidden states are then each sequence's first
 * token, [B,D]. Otherwise [B,S,D], every position as HF. */
static em_tensor *encode(em_bert_model *m, em_tensor *ids, em_tensor *mask, em_tensor *types, em_tensor **pooled,
                         bool first_only, const char *op)
{
    em_tensor *x = em__encoder_forward(&m->enc, ids, mask, types, first_only, op), *p = NULL;
    if (pooled) *pooled = NULL;
    if (!x || !pooled || !m->pooler) return x;
    em_scope_begin();
    em_tensor *h = em_tanh(em_nn_linear_forward(m->pooler, first_only ? x : em_select(x, 1, 0)));
    if (h) p = em_keep(h);
    em_scope_end();
    *pooled = p;
    return p ? x : NULL;
}

em_tensor *em_bert_model_forward(em_bert_model *m, em_tensor *ids, em_tensor *mask, em_tensor *types,
                                 em_tensor **pooled)
{
    return encode(m, ids, mask, types, pooled, false, "em_bert_model_forward");
}

em_seqcls_output em_bert_seqcls_forward(em_bert_seqcls *m, const em_seqcls_inputs *in)
{
    static const char op[] = "em_bert_seqcls_forward";
    em_seqcls_output out = {0};
    if (!m->bert->pooler) {
        em__misuse(op, "the model has no pooler (built with no_pooler), which the classification head needs");
        return out;
    }
    em_scope_begin();
    em_tensor *pooled = NULL;
    em_tensor *h = encode(m->bert, in->input_ids, in->attention_mask, in->token_type_ids, &pooled, true, op);
    em_tensor *logits = h ? em_nn_linear_forward(m->classifier, em_nn_dropout_forward(m->dropout, pooled)) : NULL;
    out = em__seqcls_output(logits, in->labels, m->config.num_labels, &m->config.problem_type, op);
    em_scope_end();
    return out;
}

/* ---- config.json ------------------------------------------------------------------------------------ */

em_status em__bert_config_parse(const cJSON *j, const char *path, em_bert_config *c)
{
    em_status s = EM_OK;
    const cJSON *pet = cJSON_GetObjectItemCaseSensitive(j, "position_embedding_type");
    if (pet && !(cJSON_IsString(pet) && !strcmp(pet->valuestring, "absolute")))
        return em__fail(EM_ERR_UNSUPPORTED, "%s: position_embedding_type %s is not supported (only \"absolute\")", path,
                        cJSON_IsString(pet) ? pet->valuestring : "(not a string)");
    bool decoder = false, cross = false;
    if (!s) s = em__json_bool(j, path, "is_decoder", &decoder);
    if (!s) s = em__json_bool(j, path, "add_cross_attention", &cross);
    if (!s && (decoder || cross))
        return em__fail(EM_ERR_UNSUPPORTED, "%s: is_decoder / add_cross_attention are not supported (encoders only)", path);
    if (!s) s = em__json_int(j, path, "vocab_size", 1, &c->vocab_size);
    if (!s) s = em__json_int(j, path, "hidden_size", 1, &c->hidden_size);
    if (!s) s = em__json_int(j, path, "num_hidden_layers", 1, &c->num_hidden_layers);
    if (!s) s = em__json_int(j, path, "num_attention_heads", 1, &c->num_attention_heads);
    if (!s) s = em__json_int(j, path, "intermediate_size", 1, &c->intermediate_size);
    if (!s) s = em__json_activation(j, path, "hidden_act", &c->hidden_act);
    if (!s) s = em__json_num(j, path, "hidden_dropout_prob", 0, 1, &c->hidden_dropout_prob);
    if (!s) s = em__json_num(j, path, "attention_probs_dropout_prob", 0, 0.999999, &c->attention_probs_dropout_prob);
    if (!s) s = em__json_int(j, path, "max_position_embeddings", 1, &c->max_position_embeddings);
    if (!s) s = em__json_int(j, path, "type_vocab_size", 1, &c->type_vocab_size);
    if (!s) s = em__json_num(j, path, "initializer_range", 0, 1e9, &c->initializer_range);
    if (!s) s = em__json_num(j, path, "layer_norm_eps", 0, 1, &c->layer_norm_eps);
    if (!s) s = em__json_int(j, path, "pad_token_id", 0, &c->pad_token_id);
    const cJSON *cd = cJSON_GetObjectItemCaseSensitive(j, "classifier_dropout");
    if (!s && cd && !cJSON_IsNull(cd)) {
        s = em__json_num(j, path, "classifier_dropout", 0, 1, &c->classifier_dropout);
        if (c->classifier_dropout == 0) c->classifier_dropout = EM_ZERO;
    }
    if (!s) s = em__json_labels(j, path, &c->num_labels, &c->problem_type);
    if (!s && c->hidden_size % c->num_attention_heads)
        s = em__fail(EM_ERR_INVALID, "%s: num_attention_heads %lld does not divide hidden_size %lld", path,
                     (long long)c->num_attention_heads, (long long)c->hidden_size);
    if (!s && c->pad_token_id >= c->vocab_size)
        s = em__fail(EM_ERR_INVALID, "%s: pad_token_id %lld is outside the vocabulary of %lld", path,
                     (long long)c->pad_token_id, (long long)c->vocab_size);
    if (c->hidden_dropout_prob == 0) c->hidden_dropout_prob = EM_ZERO;
    if (c->attention_probs_dropout_prob == 0) c->attention_probs_dropout_prob = EM_ZERO;
    if (c->initializer_range == 0) c->initializer_range = EM_ZERO;
    if (c->layer_norm_eps == 0) c->layer_norm_eps = EM_ZERO;
    return s;
}

static em_status parse(const cJSON *j, const char *path, void *out)
{
    em_bert_config c = em_bert_config_resolve(NULL);
    em_status s = em__bert_config_parse(j, path, &c);
    if (!s) *(em_bert_config *)out = c;
    return s;
}

bool em__bert_config_write(cJSON *j, const em_bert_config *c)
{
    bool ok = cJSON_AddNumberToObject(j, "attention_probs_dropout_prob", c->attention_probs_dropout_prob + 0.0) &&
              (c->classifier_dropout == 0 && !__builtin_signbit(c->classifier_dropout)   /* None */
                   ? cJSON_AddNullToObject(j, "classifier_dropout") != NULL
                   : cJSON_AddNumberToObject(j, "classifier_dropout", c->classifier_dropout + 0.0) != NULL) &&
              cJSON_AddStringToObject(j, "hidden_act", em__activation_name(c->hidden_act)) &&
              cJSON_AddNumberToObject(j, "hidden_dropout_prob", c->hidden_dropout_prob + 0.0) &&
              cJSON_AddNumberToObject(j, "hidden_size", (double)c->hidden_size) &&
              cJSON_AddNumberToObject(j, "initializer_range", c->initializer_range + 0.0) &&
              cJSON_AddNumberToObject(j, "intermediate_size", (double)c->intermediate_size) &&
              cJSON_AddNumberToObject(j, "layer_norm_eps", c->layer_norm_eps + 0.0) &&
              cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings) &&
              cJSON_AddNumberToObject(j, "num_attention_heads", (double)c->num_attention_heads) &&
              cJSON_AddNumberToObject(j, "num_hidden_layers", (double)c->num_hidden_layers) &&
              cJSON_AddNumberToObject(j, "pad_token_id", (double)c->pad_token_id) &&
              cJSON_AddStringToObject(j, "position_embedding_type", "absolute") &&
              cJSON_AddNumberToObject(j, "type_vocab_size", (double)c->type_vocab_size) &&
              cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return ok;
}

static bool write(cJSON *j, const em_module *m) { return em__bert_config_write(j, config_of(m)); }

void em__bert_size(const void *cfg, int num_labels, em__arch_size *out)
{
    const em_bert_config *c = cfg;
    em__encoder_size((double)c->vocab_size, (double)(c->max_position_embeddings + c->type_vocab_size),
                     (double)c->hidden_size, (double)c->intermediate_size, (double)c->num_hidden_layers, num_labels, out);
    out->emb_fields = "vocab_size %.0f x hidden_size %.0f";
    out->layer_fields = "num_hidden_layers %.0f x %.3g parameters each (hidden_size %.0f, intermediate_size %.0f)";
}

static void size(const void *cfg, int num_labels, em__arch_size *out) { em__bert_size(cfg, num_labels, out); }

const em__arch em__bert_arch = {
    .model_type = "bert", .prefix = "bert", .class_prefix = "Bert",
    .class_name = {"BertModel", "BertForSequenceClassification"},
    .config_size = sizeof(em_bert_config),
    EM__FAMILY_HOOKS,
};
