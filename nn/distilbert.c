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
        em__add_child(&e->base, "dropout", e->dropout = em_nn_dropout_new(c->dropout));
    if (ok) EM_SCOPE {
        em_tensor *ids = em_reshape(em_arange(0, (double)c->max_position_embeddings, 1, EM_I64, EM_CPU), 2,
                                    (int64_t[]){1, c->max_position_embeddings});
        e->position_ids = em_module_register_buffer(&e->base, "position_ids", ids, false);
    }
    if (!ok || !e->position_ids) {
        em_module_free(&e->base);
        return NULL;
    }
    if (c->sinusoidal_pos_embds) fill_sinusoidal(e->position_embeddings->weight);
    return e;
}

static void model_destroy(em_module *base)
{
    em__free(((em_distilbert_model *)base)->layer);
    em__free(base);
}

static em_distilbert_model *model_build(const em_distilbert_config *cfg)
{
    char why[256];
    em_distilbert_config c = em_distilbert_config_resolve(cfg);
    if (bad_config(&c, why, sizeof why)) {
        em__misuse("em_distilbert_model_new", "%s", why);
        return NULL;
    }
    em_distilbert_model *m = em__module_alloc(sizeof *m, "DistilBertModel");
    if (!m) return NULL;
    m->base.destroy = model_destroy;
    m->config = c;
    em_module *tr = NULL, *list = NULL;
    bool ok = (m->layer = em__calloc((size_t)c.n_layers, sizeof *m->layer)) &&
              em__add_child(&m->base, "embeddings", m->embeddings = embeddings_new(&c)) &&
              em__add_child(&m->base, "transformer", tr = em__module_alloc(sizeof *tr, "Transformer")) &&
              em__add_child(tr, "layer", list = em__module_alloc(sizeof *list, "ModuleList"));
    em_nn_transformer_block_opts bo = {.dropout = c.dropout, .attention_dropout = c.attention_dropout,
                                       .eps = 1e-12, .activation = c.activation};
    for (int64_t i = 0; ok && i < c.n_layers; i++) {
        char name[24];
        snprintf(name, sizeof name, "%lld", (long long)i);
        ok = em__add_child(list, name, m->layer[i] = em_nn_transformer_block_new(c.dim, c.n_heads, c.hidden_dim, &bo));
    }
    if (!ok) {
        em_module_free(&m->base);
        return NULL;
    }
    return m;
}

static void seqcls_destroy(em_module *base)
{
    em_distilbert_seqcls *s = (em_distilbert_seqcls *)base;
    em__free_labels(s->id2label, s->config.num_labels);
    em__free(s);
}

static em_distilbert_seqcls *seqcls_build(const em_distilbert_config *cfg)
{
    em_distilbert_config c = em_distilbert_config_resolve(cfg);
    em_distilbert_model *body = model_build(&c);
    if (!body) return NULL;
    em_distilbert_seqcls *s = em__module_alloc(sizeof *s, "DistilBertForSequenceClassification");
    if (!s) {
        em_module_free(&body->base);
        return NULL;
    }
    s->base.destroy = seqcls_destroy;
    s->config = body->config;
    bool ok = em__add_child(&s->base, "distilbert", s->distilbert = body) &&
              em__add_child(&s->base, "pre_classifier", s->pre_classifier = em_nn_linear_new(c.dim, c.dim, NULL)) &&
              em__add_child(&s->base, "classifier", s->classifier = em_nn_linear_new(c.dim, c.num_labels, NULL)) &&
              em__add_child(&s->base, "dropout", s->dropout = em_nn_dropout_new(s->config.seq_classif_dropout));
    if (!ok) {
        em_module_free(&s->base);
        return NULL;
    }
    return s;
}

/* Builds an initialized model of either head, not yet flattened (the loader
 * fills it first). cfg is an em_distilbert_config. */
static em_module *build(const void *cfg, em__head head, bool init)
{
    em_module *m = NULL;
    if (head == EM__HEAD_SEQCLS) {
        em_distilbert_seqcls *s = seqcls_build(cfg);
        if (s) m = &s->base;
    } else {
        em_distilbert_model *b = model_build(cfg);
        if (b) m = &b->base;
    }
    if (m) {
        if (init) em__hf_init(m, em_distilbert_config_resolve(cfg).initializer_range);
        m->family = &em__distilbert_arch, m->family_head = head;   /* what save_pretrained and em_seqcls_* read */
    }
    return m;
}

em_distilbert_model *em_distilbert_model_new(const em_distilbert_config *cfg)
{
    return (em_distilbert_model *)em__flattened(build(cfg, EM__HEAD_BASE, true));
}

em_distilbert_seqcls *em_distilbert_seqcls_new(const em_distilbert_config *cfg)
{
    return (em_distilbert_seqcls *)em__flattened(build(cfg, EM__HEAD_SEQCLS, true));
}

/* ---- forward ------------------------------------------------------------------------------ */

/* The encoder. first_only: the caller reads only each sequence's first token, so a
 * right-padded batch may run on its real tokens (nn/unpad.c); the result is then
 * that token's hidden state, [B,D]. Otherwise [B,S,D], every position as HF. */
static em_tensor *encode(em_distilbert_model *m, em_tensor *ids, em_tensor *mask, bool first_only, const char *op)
{
    EM_PROPAGATE_NULL_IN(op, ids);
    EM_CHECK(ids->ndim == 2 && (ids->dtype == EM_I64 || ids->dtype == EM_I32), op,
             "input_ids must be i64/i32 [batch, seq], got %s %s", em_dtype_name(ids->dtype), em__shape_str(ids));
    EM_CHECK(ids->shape[1] <= m->config.max_position_embeddings, op,
             "sequence length %lld exceeds max_position_embeddings %lld", (long long)ids->shape[1],
             (long long)m->config.max_position_embeddings);
    int64_t B = ids->shape[0], S = ids->shape[1];
    em_distilbert_embeddings *e = m->embeddings;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *m4 = em__attention_mask4(mask, B, S, op);   /* built once, shared by every block */
    if (!mask || m4) {
        em_tensor *pos = em_narrow(e->position_ids, 1, 0, S);
        if (pos && !em_device_eq(pos->device, ids->device)) pos = em_to(pos, ids->device);
        em_tensor *x = em_add(em_nn_embedding_forward(e->word_embeddings, ids),
                              em_nn_embedding_forward(e->position_embeddings, pos));
        em__packing plan;
        bool packed = first_only && x && em__pack_plan(mask, B, S, &plan);
        if (packed) x = em__pack_rows(&plan, x);
        x = em_nn_dropout_forward(e->dropout, em_nn_layer_norm_forward(e->LayerNorm, x));
        for (int64_t i = 0; i < m->config.n_layers; i++)
            x = em__block_forward4(m->layer[i], x, m4, packed ? &plan : NULL);
        if (first_only) x = packed ? em_index_select(x, 0, plan.first) : em_select(x, 1, 0);
        if (x) r = em_keep(x);
    }
    em_scope_end();
    return r;
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
    em_tensor *loss = NULL;
    if (logits && in->labels)
        loss = em__seqcls_loss(logits, in->labels, m->config.num_labels, &m->config.problem_type,
                               "em_distilbert_seqcls_forward");
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
    const em_distilbert_config *c = m->type[0] == 'D' && !strcmp(m->type, "DistilBertModel")
                                        ? &((const em_distilbert_model *)m)->config
                                        : &((const em_distilbert_seqcls *)m)->config;
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

static const void *config_of(const em_module *m)
{
    if (!strcmp(m->type, "DistilBertModel")) return &((const em_distilbert_model *)m)->config;
    return &((const em_distilbert_seqcls *)m)->config;
}

static int *config_labels(void *cfg) { return &((em_distilbert_config *)cfg)->num_labels; }

/* f32 parameter count by part, named with this config's fields */
static void size(const void *cfg, int num_labels, em__arch_size *out)
{
    const em_distilbert_config *c = cfg;
    em__encoder_size((double)c->vocab_size, (double)c->max_position_embeddings, (double)c->dim,
                     (double)c->hidden_dim, (double)c->n_layers, num_labels, out);
    out->emb_fields = "vocab_size %.0f x dim %.0f";
    out->layer_fields = "n_layers %.0f x %.3g parameters each (dim %.0f, hidden_dim %.0f)";
}

static void seqcls_view(em_module *m, em__seqcls_view *out)
{
    em_distilbert_seqcls *s = (em_distilbert_seqcls *)m;
    *out = (em__seqcls_view){.num_labels = &s->config.num_labels, .id2label = &s->id2label,
                             .problem_type = &s->config.problem_type, .vocab_size = s->config.vocab_size,
                             .max_position_embeddings = s->config.max_position_embeddings};
}

static em_seqcls_output seqcls_forward(em_module *m, const em_seqcls_inputs *in)
{
    return em_distilbert_seqcls_forward((em_distilbert_seqcls *)m, in);
}

static double init_std(const void *cfg) { return em_distilbert_config_resolve(cfg).initializer_range; }

const em__arch em__distilbert_arch = {
    .model_type = "distilbert",
    .prefix = "distilbert",
    .class_name = {"DistilBertModel", "DistilBertForSequenceClassification"},
    .config_size = sizeof(em_distilbert_config),
    .parse = parse,
    .write = write,
    .build = build,
    .init_std = init_std,
    .config_of = config_of,
    .class_prefix = "DistilBert",
    .config_labels = config_labels,
    .size = size,
    .seqcls_view = seqcls_view,
    .seqcls_forward = seqcls_forward,
};
