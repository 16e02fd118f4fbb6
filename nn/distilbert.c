/* ember — transformers' DistilBertModel and DistilBertForSequenceClassification
 * (../shared/reference/accelerate-semantics.md §7), the sequence-classification
 * loss both DistilBERT and BERT use, and DistilBERT's config.json reader/writer. */
#include "nn/nn_internal.h"
#include "tensor/support.h"

extern const em__arch em__distilbert_arch;   /* below; nn/families.c registers it */

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- config ------------------------------------------------------------------------ */

em_distilbert_config em_distilbert_config_resolve(const em_distilbert_config *cfg)
{
    em_distilbert_config c = cfg ? *cfg : (em_distilbert_config){0};
    if (!c.vocab_size) c.vocab_size = 30522;
    if (!c.max_position_embeddings) c.max_position_embeddings = 512;
    if (!c.n_layers) c.n_layers = 6;
    if (!c.n_heads) c.n_heads = 12;
    if (!c.dim) c.dim = 768;
    if (!c.hidden_dim) c.hidden_dim = 4 * 768;
    c.dropout = em__opt(c.dropout, 0.1);
    c.attention_dropout = em__opt(c.attention_dropout, 0.1);
    c.initializer_range = em__opt(c.initializer_range, 0.02);
    c.qa_dropout = em__opt(c.qa_dropout, 0.1);
    c.seq_classif_dropout = em__opt(c.seq_classif_dropout, 0.2);
    if (!c.num_labels) c.num_labels = 2;
    return c;
}

/* Misuse message for a config that cannot build a model, or NULL. */
static const char *bad_config(const em_distilbert_config *c, char *buf, size_t cap)
{
    if (c->vocab_size <= 0 || c->max_position_embeddings <= 0 || c->n_layers <= 0 || c->n_heads <= 0 || c->dim <= 0 ||
        c->hidden_dim <= 0 || c->num_labels <= 0)
        snprintf(buf, cap, "sizes must be positive (vocab_size %lld, max_position_embeddings %lld, n_layers %lld, "
                 "n_heads %lld, dim %lld, hidden_dim %lld, num_labels %d)", (long long)c->vocab_size,
                 (long long)c->max_position_embeddings, (long long)c->n_layers, (long long)c->n_heads,
                 (long long)c->dim, (long long)c->hidden_dim, c->num_labels);
    else if (c->dim % c->n_heads)
        snprintf(buf, cap, "n_heads %lld must divide dim %lld evenly", (long long)c->n_heads, (long long)c->dim);
    else if (c->pad_token_id < 0 || c->pad_token_id >= c->vocab_size)
        snprintf(buf, cap, "pad_token_id %lld is outside the vocabulary [0, %lld)", (long long)c->pad_token_id,
                 (long long)c->vocab_size);
    else if (!(c->dropout >= 0 && c->dropout <= 1 && c->attention_dropout >= 0 && c->attention_dropout < 1 &&
               c->seq_classif_dropout >= 0 && c->seq_classif_dropout <= 1 && c->initializer_range >= 0))
        snprintf(buf, cap, "dropouts must be in [0, 1] (attention_dropout < 1) and initializer_range >= 0");
    else if ((unsigned)c->activation > EM_ACT_TANH || (unsigned)c->problem_type > EM_PROBLEM_MULTI_LABEL)
        snprintf(buf, cap, "unknown activation %d or problem_type %d", (int)c->activation, (int)c->problem_type);
    else
        return NULL;
    return buf;
}

/* ---- building ------------------------------------------------------------------------ */

/* model_destroy, seqcls_destroy, construct, em_distilbert_model_new, em_distilbert_seqcls_new and
 * the em__arch hooks every family shares (nn_internal.h) */
EM__FAMILY_FUNCTIONS(distilbert, "DistilBertModel")


/* The sinusoidal table of create_sinusoidal_embeddings: even columns sin, odd cos. */
static void fill_sinusoidal(em_tensor *w)
{
    int64_t n = w->shape[0], dim = w->shape[1];
    for (int64_t pos = 0; pos < n; pos++)
        for (int64_t j = 0; j < dim; j++) {
            double a = (double)pos / pow(10000.0, 2.0 * (double)(j / 2) / (double)dim);
            em_set(w, (int64_t[]){pos, j}, (j % 2) ? cos(a) : sin(a));
        }
}

static em_distilbert_embeddings *embeddings_new(const em_distilbert_config *c)
{
    em_distilbert_embeddings *e = em__module_alloc(sizeof *e, "Embeddings");
    if (!e) return NULL;
    em_nn_embedding_opts wo = {.has_padding_idx = true, .padding_idx = c->pad_token_id};
    em_nn_embedding_opts po = {.frozen = c->sinusoidal_pos_embds};
    bool ok =
        em__add_child(&e->base, "word_embeddings", e->word_embeddings = em_nn_embedding_new(c->vocab_size, c->dim, &wo)) &&
        em__add_child(&e->base, "position_embeddings",
                      e->position_embeddings = em_nn_embedding_new(c->max_position_embeddings, c->dim, &po)) &&
        em__add_child(&e->base, "LayerNorm", e->LayerNorm = em_nn_layer_norm_new(c->dim, &(em_nn_layer_norm_opts){.eps = 1e-12})) &&
        em__add_child(&e->base, "dropout", e->dropout = em_nn_dropout_new(c->dropout)) &&
        (e->position_ids = em__position_ids(&e->base, c->max_position_embeddings));
    if (ok && c->sinusoidal_pos_embds) fill_sinusoidal(e->position_embeddings->weight);
    return em__built(&e->base, ok);
}

static em_distilbert_model *model_build(const em_distilbert_config *cfg)
{
    char why[256];
    em_distilbert_config c = em_distilbert_config_resolve(cfg);
    em_distilbert_model *m = em__model_alloc(sizeof *m, "DistilBertModel", "em_distilbert_model_new",
                                             bad_config(&c, why, sizeof why), model_destroy);
    if (!m) return NULL;
    m->config = c;
    em_module *tr = NULL, *list = NULL;
    bool ok = (m->layer = em__calloc((size_t)c.n_layers, sizeof *m->layer)) &&
              em__add_child(&m->base, "embeddings", m->embeddings = embeddings_new(&c)) &&
              em__add_child(&m->base, "transformer", tr = em__module_alloc(sizeof *tr, "Transformer")) &&
              em__add_child(tr, "layer", list = em__module_alloc(sizeof *list, "ModuleList"));
    em_nn_transformer_block_opts bo = {.dropout = c.dropout, .attention_dropout = c.attention_dropout,
                                       .eps = 1e-12, .activation = c.activation};
    for (int64_t i = 0; ok && i < c.n_layers; i++)
        ok = em__add_indexed(list, i, m->layer[i] = em_nn_transformer_block_new(c.dim, c.n_heads, c.hidden_dim, &bo));
    return em__built(&m->base, ok);
}

static em_distilbert_seqcls *seqcls_build(const em_distilbert_config *cfg)
{
    em_distilbert_config c = em_distilbert_config_resolve(cfg);
    em_distilbert_model *body = model_build(&c);
    em_distilbert_seqcls *s = body ? em__seqcls_alloc(sizeof *s, "DistilBertForSequenceClassification", &body->base,
                                                      "distilbert", seqcls_destroy)
                                   : NULL;
    if (!s) return NULL;
    s->distilbert = body;
    s->config = body->config;
    bool ok = em__add_child(&s->base, "pre_classifier", s->pre_classifier = em_nn_linear_new(c.dim, c.dim, NULL)) &&
              em__add_child(&s->base, "classifier", s->classifier = em_nn_linear_new(c.dim, c.num_labels, NULL)) &&
              em__add_child(&s->base, "dropout", s->dropout = em_nn_dropout_new(s->config.seq_classif_dropout));
    return em__built(&s->base, ok);
}


/* ---- forward ------------------------------------------------------------------------------ */

/* The encoder (em__encoder_forward; first_only as there). */
static em_tensor *encode(em_distilbert_model *m, em_tensor *ids, em_tensor *mask, bool first_only, const char *op)
{
    em_distilbert_embeddings *e = m->embeddings;
    em__encoder enc = {.word = e->word_embeddings, .position = e->position_embeddings, .position_ids = e->position_ids,
                       .ln = e->LayerNorm, .dropout = e->dropout, .layers = (void *const *)m->layer,
                       .n_layers = m->config.n_layers, .max_positions = m->config.max_position_embeddings,
                       .layer_forward = em__block_forward4};
    return em__encoder_forward(&enc, ids, mask, NULL, first_only, op);
}

em_tensor *em_distilbert_model_forward(em_distilbert_model *m, em_tensor *ids, em_tensor *mask)
{
    return encode(m, ids, mask, false, "em_distilbert_model_forward");
}

em_seqcls_output em_distilbert_seqcls_forward(em_distilbert_seqcls *m, const em_seqcls_inputs *in)
{
    em_seqcls_output out = {0};
    em_scope_begin();
    /* hidden[:, 0], computed on the real tokens only when the batch is right-padded */
    em_tensor *pooled = encode(m->distilbert, in->input_ids, in->attention_mask, true, "em_distilbert_seqcls_forward");
    em_tensor *x = em_relu(em_nn_linear_forward(m->pre_classifier, pooled));
    em_tensor *logits = em_nn_linear_forward(m->classifier, em_nn_dropout_forward(m->dropout, x));
    out = em__seqcls_output(logits, in->labels, m->config.num_labels, &m->config.problem_type,
                            "em_distilbert_seqcls_forward");
    em_scope_end();
    return out;
}


/* ---- config.json ------------------------------------------------------------------------------------ */

static em_status parse(const cJSON *j, const char *path, void *out)
{
    em_distilbert_config c = em_distilbert_config_resolve(NULL);
    /* transformers' attribute_map: hidden_size -> dim, num_attention_heads -> n_heads, num_hidden_layers -> n_layers */
    em_status s = EM_OK;
    if (!s) s = em__json_int(j, path, "vocab_size", 1, &c.vocab_size);
    if (!s) s = em__json_int(j, path, "max_position_embeddings", 1, &c.max_position_embeddings);
    if (!s) s = em__json_bool(j, path, "sinusoidal_pos_embds", &c.sinusoidal_pos_embds);
    if (!s) s = em__json_int(j, path, "num_hidden_layers", 1, &c.n_layers);
    if (!s) s = em__json_int(j, path, "n_layers", 1, &c.n_layers);
    if (!s) s = em__json_int(j, path, "num_attention_heads", 1, &c.n_heads);
    if (!s) s = em__json_int(j, path, "n_heads", 1, &c.n_heads);
    if (!s) s = em__json_int(j, path, "hidden_size", 1, &c.dim);
    if (!s) s = em__json_int(j, path, "dim", 1, &c.dim);
    if (!s) s = em__json_int(j, path, "hidden_dim", 1, &c.hidden_dim);
    if (!s) s = em__json_num(j, path, "dropout", 0, 1, &c.dropout);
    if (!s) s = em__json_num(j, path, "attention_dropout", 0, 0.999999, &c.attention_dropout);
    if (!s) s = em__json_activation(j, path, "activation", &c.activation);
    if (!s) s = em__json_num(j, path, "initializer_range", 0, 1e9, &c.initializer_range);
    if (!s) s = em__json_num(j, path, "qa_dropout", 0, 1, &c.qa_dropout);
    if (!s) s = em__json_num(j, path, "seq_classif_dropout", 0, 1, &c.seq_classif_dropout);
    if (!s) s = em__json_int(j, path, "pad_token_id", 0, &c.pad_token_id);
    if (!s) s = em__json_labels(j, path, &c.num_labels, &c.problem_type);
    if (!s && c.dim % c.n_heads)
        s = em__fail(EM_ERR_INVALID, "%s: n_heads %lld does not divide dim %lld", path, (long long)c.n_heads,
                     (long long)c.dim);
    if (!s && c.pad_token_id >= c.vocab_size)
        s = em__fail(EM_ERR_INVALID, "%s: pad_token_id %lld is outside the vocabulary of %lld", path,
                     (long long)c.pad_token_id, (long long)c.vocab_size);
    /* the resolver turns 0 into defaults; an explicit 0 in the file means 0 */
    if (c.dropout == 0) c.dropout = EM_ZERO;
    if (c.attention_dropout == 0) c.attention_dropout = EM_ZERO;
    if (c.seq_classif_dropout == 0) c.seq_classif_dropout = EM_ZERO;
    if (c.qa_dropout == 0) c.qa_dropout = EM_ZERO;
    if (c.initializer_range == 0) c.initializer_range = EM_ZERO;
    if (!s) *(em_distilbert_config *)out = c;
    return s;
}

static bool write(cJSON *j, const em_module *m)
{
    const em_distilbert_config *c = config_of(m);
    bool ok = cJSON_AddStringToObject(j, "activation", em__activation_name(c->activation)) &&
              cJSON_AddNumberToObject(j, "attention_dropout", c->attention_dropout + 0.0) &&
              cJSON_AddNumberToObject(j, "dim", (double)c->dim) &&
              cJSON_AddNumberToObject(j, "dropout", c->dropout + 0.0) &&
              cJSON_AddNumberToObject(j, "hidden_dim", (double)c->hidden_dim) &&
              cJSON_AddNumberToObject(j, "initializer_range", c->initializer_range + 0.0) &&
              cJSON_AddNumberToObject(j, "max_position_embeddings", (double)c->max_position_embeddings) &&
              cJSON_AddNumberToObject(j, "n_heads", (double)c->n_heads) &&
              cJSON_AddNumberToObject(j, "n_layers", (double)c->n_layers) &&
              cJSON_AddNumberToObject(j, "pad_token_id", (double)c->pad_token_id) &&
              cJSON_AddNumberToObject(j, "qa_dropout", c->qa_dropout + 0.0) &&
              cJSON_AddNumberToObject(j, "seq_classif_dropout", c->seq_classif_dropout + 0.0) &&
              cJSON_AddBoolToObject(j, "sinusoidal_pos_embds", c->sinusoidal_pos_embds) &&
              cJSON_AddBoolToObject(j, "tie_word_embeddings", true) &&
              cJSON_AddNumberToObject(j, "vocab_size", (double)c->vocab_size);
    return ok;
}

/* f32 parameter count by part, named with this config's fields */
static void size(const void *cfg, int num_labels, em__arch_size *out)
{
    const em_distilbert_config *c = cfg;
    em__encoder_size((double)c->vocab_size, (double)c->max_position_embeddings, (double)c->dim,
                     (double)c->hidden_dim, (double)c->n_layers, num_labels, out);
    out->emb_fields = "vocab_size %.0f x dim %.0f";
    out->layer_fields = "n_layers %.0f x %.3g parameters each (dim %.0f, hidden_dim %.0f)";
}

const em__arch em__distilbert_arch = {
    .model_type = "distilbert", .prefix = "distilbert", .class_prefix = "DistilBert",
    .class_name = {"DistilBertModel", "DistilBertForSequenceClassification"},
    .config_size = sizeof(em_distilbert_config),
    EM__FAMILY_HOOKS,
};
