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

static double classifier_dropout(const em_bert_config *c)
{
    return c->classifier_dropout == 0 && !__builtin_signbit(c->classifier_dropout) ? c->hidden_dropout_prob
                                                                                   : c->classifier_dropout;
}

static const char *bad_config(const em_bert_config *c, char *buf, size_t cap)
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
               c->attention_probs_dropout_prob < 1 && classifier_dropout(c) >= 0 && classifier_dropout(c) <= 1 &&
               c->layer_norm_eps >= 0 && c->initializer_range >= 0))
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
    bert_embeddings *embeddings;
    bert_layer **layer;
    em_nn_linear *pooler;   /* pooler.dense, or NULL */
};

/* A child module with no parameters of its own, named for the layout. */
static em_module *group(em_module *parent, const char *name, const char *type)
{
    em_module *g = em__module_alloc(sizeof *g, type);
    return em__add_child(parent, name, g) ? g : NULL;
}

static bert_embeddings *embeddings_new(const em_bert_config *c)
{
    bert_embeddings *e = em__module_alloc(sizeof *e, "BertEmbeddings");
    if (!e) return NULL;
    int64_t H = c->hidden_size;
    em_nn_embedding_opts wo = {.has_padding_idx = true, .padding_idx = c->pad_token_id};
    bool ok = em__add_child(&e->base, "word_embeddings", e->word = em_nn_embedding_new(c->vocab_size, H, &wo)) &&
              em__add_child(&e->base, "position_embeddings",
                            e->position = em_nn_embedding_new(c->max_position_embeddings, H, NULL)) &&
              em__add_child(&e->base, "token_type_embeddings",
                            e->token_type = em_nn_embedding_new(c->type_vocab_size, H, NULL)) &&
              em__add_child(&e->base, "LayerNorm",
                            e->ln = em_nn_layer_norm_new(H, &(em_nn_layer_norm_opts){.eps = c->layer_norm_eps})) &&
              em__add_child(&e->base, "dropout", e->dropout = em_nn_dropout_new(c->hidden_dropout_prob));
    if (ok) EM_SCOPE {
        em_tensor *ids = em_reshape(em_arange(0, (double)c->max_position_embeddings, 1, EM_I64, EM_CPU), 2,
                                    (int64_t[]){1, c->max_position_embeddings});
        e->position_ids = em_module_register_buffer(&e->base, "position_ids", ids, false);
    }
    if (!ok || !e->position_ids) {
        em_module_free(&e->base);
        return NULL;
    }
    return e;
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
    if (!ok) {
        em_module_free(&l->base);
        return NULL;
    }
    return l;
}

static void model_destroy(em_module *base)
{
    em__free(((em_bert_model *)base)->layer);
    em__free(base);
}

static em_bert_model *model_build(const em_bert_config *cfg)
{
    char why[256];
    em_bert_config c = em_bert_config_resolve(cfg);
    if (bad_config(&c, why, sizeof why)) {
        em__misuse("em_bert_model_new", "%s", why);
        return NULL;
    }
    em_bert_model *m = em__module_alloc(sizeof *m, "BertModel");
    if (!m) return NULL;
    m->base.destroy = model_destroy;
    m->config = c;
    em_module *enc, *list, *pool;
    bool ok = (m->layer = em__calloc((size_t)c.num_hidden_layers, sizeof *m->layer)) &&
              em__add_child(&m->base, "embeddings", m->embeddings = embeddings_new(&c)) &&
              (enc = group(&m->base, "encoder", "BertEncoder")) && (list = group(enc, "layer", "ModuleList"));
    for (int64_t i = 0; ok && i < c.num_hidden_layers; i++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)i);
        ok = em__add_child(list, name, m->layer[i] = layer_new(&c));
    }
    if (ok && !c.no_pooler)
        ok = (pool = group(&m->base, "pooler", "BertPooler")) &&
             em__add_child(pool, "dense", m->pooler = em_nn_linear_new(c.hidden_size, c.hidden_size, NULL));
    if (!ok) {
        em_module_free(&m->base);
        return NULL;
    }
    return m;
}

static void seqcls_destroy(em_module *base)
{
    em_bert_seqcls *s = (em_bert_seqcls *)base;
    em__free_labels(s->id2label, s->config.num_labels);
    em__free(s);
}

static em_bert_seqcls *seqcls_build(const em_bert_config *cfg)
{
    em_bert_model *body = model_build(cfg);
    if (!body) return NULL;
    em_bert_seqcls *s = em__module_alloc(sizeof *s, "BertForSequenceClassification");
    if (!s) {
        em_module_free(&body->base);
        return NULL;
    }
    s->base.destroy = seqcls_destroy;
    s->config = body->config;
    bool ok = em__add_child(&s->base, "bert", s->bert = body) &&
              em__add_child(&s->base, "dropout", s->dropout = em_nn_dropout_new(classifier_dropout(&s->config))) &&
              em__add_child(&s->base, "classifier",
                            s->classifier = em_nn_linear_new(s->config.hidden_size, s->config.num_labels, NULL));
    if (!ok) {
        em_module_free(&s->base);
        return NULL;
    }
    return s;
}

static em_module *build(const void *cfg, em__head head, bool init)
{
    em_module *m = NULL;
    if (head == EM__HEAD_SEQCLS) {
        em_bert_seqcls *s = seqcls_build(cfg);
        if (s) m = &s->base;
    } else {
        em_bert_model *b = model_build(cfg);
        if (b) m = &b->base;
    }
    if (m) {
        if (init) em__hf_init(m, em_bert_config_resolve(cfg).initializer_range);
        m->family = &em__bert_arch, m->family_head = head;   /* what save_pretrained and em_seqcls_* read */
    }
    return m;
}

em_bert_model *em_bert_model_new(const em_bert_config *cfg) { return (em_bert_model *)em__flattened(build(cfg, EM__HEAD_BASE, true)); }
em_bert_seqcls *em_bert_seqcls_new(const em_bert_config *cfg)
{
    return (em_bert_seqcls *)em__flattened(build(cfg, EM__HEAD_SEQCLS, true));
}
const em_bert_config *em_bert_model_config(const em_bert_model *m) { return &m->config; }

/* ---- forward ------------------------------------------------------------------------------------ */

/* x: [B,S,D], or the packed [n,D] rows of plan (then only attention sees [B,S,D]) */
static em_tensor *layer_forward(bert_layer *l, em_tensor *x, em_tensor *m4, const em__packing *plan)
{
    em_tensor *r = NULL;
    em_scope_begin();
    double p = l->attn_dropout->base.training ? l->attn_dropout->p : 0.0;
    em_tensor *q = em_nn_linear_forward(l->query, x), *k = em_nn_linear_forward(l->key, x);
    em_tensor *v = em_nn_linear_forward(l->value, x);
    if (plan) q = em__unpack_rows(plan, q), k = em__unpack_rows(plan, k), v = em__unpack_rows(plan, v);
    em_tensor *ctx = plan ? em__pack_rows(plan, em__mha_core_lens(q, k, v, plan->lens, l->n_heads, p))
                          : em__mha_core(q, k, v, m4, l->n_heads, p);
    em_tensor *a = em_nn_dropout_forward(l->attn_out_dropout, em_nn_linear_forward(l->attn_dense, ctx));
    a = em_nn_layer_norm_forward(l->attn_ln, em_add(a, x));
    em_tensor *h = em__activation(l->act, em_nn_linear_forward(l->inter_dense, a));
    h = em_nn_dropout_forward(l->out_dropout, em_nn_linear_forward(l->out_dense, h));
    h = em_nn_layer_norm_forward(l->out_ln, em_add(h, a));
    if (h) r = em_keep(h);
    em_scope_end();
    return r;
}

/* The encoder. first_only: the caller reads only the pooled output, so a right-padded
 * batch may run on its real tokens (nn/unpad.c); the returned hidden states are then
 * each sequence's first token, [B,D]. Otherwise [B,S,D], every position as HF. */
static em_tensor *encode(em_bert_model *m, em_tensor *ids, em_tensor *mask, em_tensor *types, em_tensor **pooled,
                         bool first_only, const char *op)
{
    if (pooled) *pooled = NULL;
    EM_PROPAGATE_NULL_IN(op, ids);
    EM_CHECK(ids->ndim == 2 && (ids->dtype == EM_I64 || ids->dtype == EM_I32), op,
             "input_ids must be i64/i32 [batch, seq], got %s %s", em_dtype_name(ids->dtype), em__shape_str(ids));
    EM_CHECK(ids->shape[1] <= m->config.max_position_embeddings, op,
             "sequence length %lld exceeds max_position_embeddings %lld", (long long)ids->shape[1],
             (long long)m->config.max_position_embeddings);
    EM_CHECK(!types || (types->ndim == 2 && types->shape[0] == ids->shape[0] && types->shape[1] == ids->shape[1]), op,
             "token_type_ids %s do not match input_ids %s", em__shape_str(types), em__shape_str(ids));
    int64_t B = ids->shape[0], S = ids->shape[1];
    bert_embeddings *e = m->embeddings;
    em_tensor *r = NULL, *p = NULL;
    em_scope_begin();
    em_tensor *m4 = em__attention_mask4(mask, B, S, op);
    if (!mask || m4) {
        em_tensor *pos = em_narrow(e->position_ids, 1, 0, S);
        if (pos && !em_device_eq(pos->device, ids->device)) pos = em_to(pos, ids->device);
        em_tensor *tt = types ? types : em_zeros(2, (int64_t[]){B, S}, EM_I64, ids->device);
        /* HF's order: (word + token_type) + position */
        em_tensor *x = em_add(em_nn_embedding_forward(e->word, ids), em_nn_embedding_forward(e->token_type, tt));
        x = em_add(x, em_nn_embedding_forward(e->position, pos));
        em__packing plan;
        bool packed = first_only && x && em__pack_plan(mask, B, S, &plan);
        if (packed) x = em__pack_rows(&plan, x);
        x = em_nn_dropout_forward(e->dropout, em_nn_layer_norm_forward(e->ln, x));
        for (int64_t i = 0; i < m->config.num_hidden_layers; i++) x = layer_forward(m->layer[i], x, m4, packed ? &plan : NULL);
        if (first_only) x = packed ? em_index_select(x, 0, plan.first) : em_select(x, 1, 0);
        if (x && pooled && m->pooler) {
            p = em_tanh(em_nn_linear_forward(m->pooler, first_only ? x : em_select(x, 1, 0)));
            if (p) em_keep(p);
            else x = NULL;
        }
        if (x) r = em_keep(x);
    }
    em_scope_end();
    if (pooled) *pooled = r ? p : NULL;
    return r;
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
    em_tensor *loss = NULL;
    if (logits && in->labels)
        loss = em__seqcls_loss(logits, in->labels, m->config.num_labels, &m->config.problem_type, op);
    if (logits && (!in->labels || loss)) {
        out.logits = em_keep(logits);
        out.loss = loss ? em_keep(loss) : NULL;
    }
    em_scope_end();
    return out;
}

/* ---- config.json ------------------------------------------------------------------------------------ */

static em_status parse(const cJSON *j, const char *path, void *out)
{
    em_bert_config c = em_bert_config_resolve(NULL);
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
    if (!s) s = em__json_int(j, path, "vocab_size", 1, &c.vocab_size);
    if (!s) s = em__json_int(j, path, "hidden_size", 1, &c.hidden_size);
    if (!s) s = em__json_int(j, path, "num_hidden_layers", 1, &c.num_hidden_layers);
    if (!s) s = em__json_int(j, path, "num_attention_heads", 1, &c.num_attention_heads);
    if (!s) s = em__json_int(j, path, "intermediate_size", 1, &c.intermediate_size);
    if (!s) s = em__json_activation(j, path, "hidden_act", &c.hidden_act);
    if (!s) s = em__json_num(j, path, "hidden_dropout_prob", 0, 1, &c.hidden_dropout_prob);
    if (!s) s = em__json_num(j, path, "attention_probs_dropout_prob", 0, 0.999999, &c.attention_probs_dropout_prob);
    if (!s) s = em__json_int(j, path, "max_position_embeddings", 1, &c.max_position_embeddings);
    if (!s) s = em__json_int(j, path, "type_vocab_size", 1, &c.type_vocab_size);
    if (!s) s = em__json_num(j, path, "initializer_range", 0, 1e9, &c.initializer_range);
    if (!s) s = em__json_num(j, path, "layer_norm_eps", 0, 1, &c.layer_norm_eps);
    if (!s) s = em__json_int(j, path, "pad_token_id", 0, &c.pad_token_id);
    const cJSON *cd = cJSON_GetObjectItemCaseSensitive(j, "classifier_dropout");
    if (!s && cd && !cJSON_IsNull(cd)) {
        s = em__json_num(j, path, "classifier_dropout", 0, 1, &c.classifier_dropout);
        if (c.classifier_dropout == 0) c.classifier_dropout = EM_ZERO;
    }
    if (!s) s = em__json_labels(j, path, &c.num_labels, &c.problem_type);
    if (!s && c.hidden_size % c.num_attention_heads)
        s = em__fail(EM_ERR_INVALID, "%s: num_attention_heads %lld does not divide hidden_size %lld", path,
                     (long long)c.num_attention_heads, (long long)c.hidden_size);
    if (!s && c.pad_token_id >= c.vocab_size)
        s = em__fail(EM_ERR_INVALID, "%s: pad_token_id %lld is outside the vocabulary of %lld", path,
                     (long long)c.pad_token_id, (long long)c.vocab_size);
    if (c.hidden_dropout_prob == 0) c.hidden_dropout_prob = EM_ZERO;
    if (c.attention_probs_dropout_prob == 0) c.attention_probs_dropout_prob = EM_ZERO;
    if (c.initializer_range == 0) c.initializer_range = EM_ZERO;
    if (c.layer_norm_eps == 0) c.layer_norm_eps = EM_ZERO;
    if (!s) *(em_bert_config *)out = c;
    return s;
}

static const void *config_of(const em_module *m)
{
    if (!strcmp(m->type, "BertModel")) return &((const em_bert_model *)m)->config;
    return &((const em_bert_seqcls *)m)->config;
}

static bool write(cJSON *j, const em_module *m)
{
    const em_bert_config *c = config_of(m);
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

static int *config_labels(void *cfg) { return &((em_bert_config *)cfg)->num_labels; }

/* f32 parameter count by part, named with this config's fields */
static void size(const void *cfg, int num_labels, em__arch_size *out)
{
    const em_bert_config *c = cfg;
    em__encoder_size((double)c->vocab_size, (double)(c->max_position_embeddings + c->type_vocab_size),
                     (double)c->hidden_size, (double)c->intermediate_size, (double)c->num_hidden_layers, num_labels, out);
    out->emb_fields = "vocab_size %.0f x hidden_size %.0f";
    out->layer_fields = "num_hidden_layers %.0f x %.3g parameters each (hidden_size %.0f, intermediate_size %.0f)";
}

static void seqcls_view(em_module *m, em__seqcls_view *out)
{
    em_bert_seqcls *s = (em_bert_seqcls *)m;
    *out = (em__seqcls_view){.num_labels = &s->config.num_labels, .id2label = &s->id2label,
                             .problem_type = &s->config.problem_type, .vocab_size = s->config.vocab_size,
                             .max_position_embeddings = s->config.max_position_embeddings};
}

static em_seqcls_output seqcls_forward(em_module *m, const em_seqcls_inputs *in)
{
    return em_bert_seqcls_forward((em_bert_seqcls *)m, in);
}

static double init_std(const void *cfg) { return em_bert_config_resolve(cfg).initializer_range; }

const em__arch em__bert_arch = {
    .model_type = "bert",
    .prefix = "bert",
    .class_name = {"BertModel", "BertForSequenceClassification"},
    .config_size = sizeof(em_bert_config),
    .parse = parse,
    .write = write,
    .build = build,
    .init_std = init_std,
    .config_of = config_of,
    .class_prefix = "Bert",
    .config_labels = config_labels,
    .size = size,
    .seqcls_view = seqcls_view,
    .seqcls_forward = seqcls_forward,
};
