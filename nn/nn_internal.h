/* ember — nn/ internals shared by layers.c, attention.c, distilbert.c, bert.c
 * and pretrained.c. Not installed. */
#ifndef EMBER_NN_INTERNAL_H
#define EMBER_NN_INTERNAL_H

#include "nn/nn.h"

#include <cjson/cJSON.h>

/* ---- small helpers ------------------------------------------------------------- */
/* A heap-allocated module of `size` bytes (zeroed) whose base is initialized
 * with type and a destroy that frees the block; NULL + EM_ERR_OOM. */
void *em__module_alloc(size_t size, const char *type);
/* Registers child under name; on NULL child (a failed constructor) returns
 * false so constructors can unwind with em_module_free(parent). */
bool em__add_child(em_module *parent, const char *name, void *child);
/* A new parameter (or persistent buffer when frozen) [ndim, shape] of dt on
 * dev, registered under name; NULL on OOM. */
em_tensor *em__new_param(em_module *m, const char *name, int ndim, const int64_t *shape, em_dtype dt,
                         em_device dev, bool frozen);
/* Reference to t owned by the current scope (forward functions that pass
 * their input through, like dropout in eval mode). */
em_tensor *em__pass_through(em_tensor *t);
/* Resolves an option whose zero means "default": +0.0 -> def; anything else,
 * EM_ZERO (-0.0) included, is kept, so resolving twice changes nothing. */
static inline double em__opt(double v, double def) { return v == 0.0 && !__builtin_signbit(v) ? def : v; }

/* ---- activation ------------------------------------------------------------------- */
em_tensor *em__activation(em_activation act, em_tensor *x);
/* The HF name of an activation ("gelu", "relu", "gelu_new", ...). */
const char *em__activation_name(em_activation act);
/* Parses an HF hidden_act/activation string; false when unknown. */
bool em__activation_parse(const char *name, em_activation *out);

/* ---- attention core --------------------------------------------------------------- */
/* The bool [B,1,1,S] attend-mask from an attention_mask [B,S] (bool, or
 * integers: nonzero = attend), or NULL when mask is NULL. Misuse names op. */
em_tensor *em__attention_mask4(em_tensor *mask, int64_t B, int64_t S, const char *op);
/* Multi-head attention from projected q, k, v [B,S,D] split into n_heads:
 * returns the merged context [B,S,D] (before the output projection).
 * dropout_p applies to the attention weights (0 in eval). */
em_tensor *em__mha_core(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask4, int64_t n_heads,
                        double dropout_p);
/* The multi-head attention context of x (before the output projection) from
 * the projections q_lin, k_lin, v_lin, as DistilBERT's and BERT's attention
 * compute it: dropout (when training) on the weights; with a plan
 * (nn/unpad.c), x is the packed [n,D] rows, and attention runs on them too
 * (mask4 unused). In the caller's scope. */
struct em__packing;
em_tensor *em__attention_context(em_nn_linear *q_lin, em_nn_linear *k_lin, em_nn_linear *v_lin, int64_t n_heads,
                                 const em_nn_dropout *dropout, em_tensor *x, em_tensor *mask4,
                                 const struct em__packing *plan);
/* DistilBERT's attention (an em_nn_mhsa) and block (an
 * em_nn_transformer_block) with a ready [B,1,1,S] mask (or NULL): em__layer_fn
 * (below); x is checked by the caller. With a plan (nn/unpad.c), x is the
 * packed [n,D] rows instead, attention included (em__sdpa_packed; mask4 unused). */
em_tensor *em__mhsa_forward4(void *mhsa, em_tensor *x, em_tensor *mask4, const struct em__packing *plan);
em_tensor *em__block_forward4(void *block, em_tensor *x, em_tensor *mask4, const struct em__packing *plan);
/* ---- unpadding (nn/unpad.c) ------------------------------------------------------- */
/* The real tokens of a right-padded batch: pack (i64 [n]) lists each real token's
 * padded row b*S+s in order; first (i64 [B]) each sequence's first packed row
 * (attention's starts, em__sdpa_packed). Tensors belong to the scope open at
 * em__pack_plan. */
typedef struct em__packing {
    int64_t B, S, n;
    em_tensor *pack, *first;
    em_tensor *lens;   /* i32 [B]: the sequence lengths */
} em__packing;
/* false (plan zeroed) unless mask is a CPU [B,S] mask whose rows are non-empty
 * prefixes of ones and some padding exists: then the caller keeps the padded path. */
bool em__pack_plan(em_tensor *mask, int64_t B, int64_t S, em__packing *plan);
em_tensor *em__pack_rows(const em__packing *plan, em_tensor *x);     /* [B,S,D] -> [n,D] (recorded) */

/* Draws (seed, first counter) for a dropout over n elements from the global stream. */
void em__dropout_key(int64_t n, uint64_t *seed, uint64_t *offset);

/* ---- Hugging Face init --------------------------------------------------------------- */
/* PreTrainedModel._init_weights over a module tree: Linear weight N(0, std)
 * and bias 0; Embedding N(0, std) with the padding row zeroed (frozen
 * embeddings are left alone); LayerNorm weight 1, bias 0. */
void em__hf_init(em_module *m, double std);
/* The same for the n tensors of only (parameters of m) and no other: what
 * from_pretrained initializes after loading, the tensors the checkpoint did
 * not have (HF initializes missing weights only). Draws in registration order. */
void em__hf_init_only(em_module *m, double std, em_tensor *const *only, int n);

/* ---- architectures (pretrained.c drives them) ------------------------------------------ */
typedef enum em__head { EM__HEAD_BASE = 0, EM__HEAD_SEQCLS } em__head;

/* A model's parameter count by part (emb: embeddings; layer: one encoder
 * layer; head: pooler/classifier), and the config fields that set them, as
 * printf formats for the message: "%.0f" of (vocab, hidden) and of
 * (layers, per-layer count, hidden, intermediate). */
typedef struct em__arch_size {
    double emb, layer, layers, head, hidden, intermediate, vocab;
    const char *emb_fields, *layer_fields;
} em__arch_size;
/* A sequence classifier's label state (pointers into the model) and sizes. */
typedef struct em__seqcls_view {
    int *num_labels;
    char ***id2label;
    em_problem_type *problem_type;
    int64_t vocab_size, max_position_embeddings;
} em__seqcls_view;

/* One model family: how to read and write its config.json, and build it. */
typedef struct em__arch {
    const char *model_type;     /* "distilbert" */
    const char *prefix;         /* base_model_prefix: "distilbert" */
    const char *class_name[2];  /* per em__head: "DistilBertModel", "DistilBertForSequenceClassification" */
    size_t config_size;
    /* Fills *cfg (config_size bytes) with the defaults, then the fields of
     * json; EM_ERR_FORMAT/EM_ERR_UNSUPPORTED naming path and field. */
    em_status (*parse)(const cJSON *json, const char *path, void *cfg);
    /* Adds the family's fields to json (model_type, architectures and labels are added by the caller). */
    bool (*write)(cJSON *json, const em_module *m);
    /* Constructs a model of the head (unflattened, the parameters not yet
     * initialized: em__arch_build does that and records the family). NULL on
     * OOM or misuse for a bad config. */
    em_module *(*construct)(const void *cfg, em__head head);
    /* The config's initializer_range (the std of HF's normal init). */
    double (*init_std)(const void *cfg);
    /* The resolved config of a model of this family. */
    const void *(*config_of)(const em_module *m);
    /* The prefix of its class names in config.json's "architectures" (a
     * config without model_type): "DistilBert". */
    const char *class_prefix;
    /* The num_labels field of a config (config_size bytes) of this family. */
    int *(*config_labels)(void *cfg);
    /* The parameter count of cfg's model, by part, with the config's own
     * field names, for refusing a config too large before any allocation. */
    void (*size)(const void *cfg, int num_labels, em__arch_size *out);
    /* The label state and sizes of a sequence classifier of this family. */
    void (*seqcls_view)(em_module *m, em__seqcls_view *out);
    /* Optional: positions an input cannot use (RoBERTa: pad_token_id + 1, where
     * its position ids start); NULL: none. */
    int64_t (*positions_reserved)(const void *cfg);
    em_seqcls_output (*seqcls_forward)(em_module *m, const em_seqcls_inputs *in);
} em__arch;

/* The families: each file defines its own `const em__arch em__<x>_arch`;
 * nn/families.c lists them (one X() each) in the order config.json's
 * "architectures" hint is matched ("DistilBert" before "Bert"). */
/* The families a loader chooses from (nn/families.c holds the registry and
 * passes it, so pretrained.c names no family). */
typedef struct em__families {
    const em__arch *const *archs;
    int n;
} em__families;
/* The loader behind every *_from_pretrained: config.json's model_type (or
 * its "architectures" hint) picks a family of `families`; want_arch NULL
 * accepts any of them (em_seqcls_from_pretrained), else another model_type
 * is EM_ERR_INVALID. */
em_status em__from_pretrained(const em__families *families, const char *dir, const em_pretrained_opts *opts,
                              const em__arch *want_arch, em__head head, em_module **out, em_load_report *report);
/* Builds a model of family a (unflattened) and records the family and head
 * in it, freshly initialized when init (HF's _init_weights with the config's
 * initializer_range); without it the parameters are left for the caller to
 * fill (from_pretrained loads them, then initializes only the missing ones).
 * NULL on OOM or misuse for a bad config (nn/encoder.c). */
em_module *em__arch_build(const em__arch *a, const void *cfg, em__head head, bool init);
/* Set while em__arch_build(init = false) constructs: Linear and Embedding skip
 * their default random init (zeros, and the RNG counters it would have used
 * are reserved all the same). Per thread. */
extern _Thread_local bool em__skip_default_init;
/* The family and head of a model built by ember (em_module.family), or NULL. */
const em__arch *em__arch_of(const em_module *m, em__head *head);
/* m's config.json as one line of JSON, without problem_type (which the first
 * loss sets), or NULL for a module of no known family (cJSON_free it): the
 * model part of a checkpoint's fingerprint. */
char *em__model_config_string(const em_module *m);

/* JSON field readers: absent keys leave *out unchanged and return EM_OK; a
 * present key of the wrong type or range is EM_ERR_FORMAT naming path and key. */
em_status em__json_int(const cJSON *j, const char *path, const char *key, int64_t lo, int64_t *out);
em_status em__json_num(const cJSON *j, const char *path, const char *key, double lo, double hi, double *out);
em_status em__json_bool(const cJSON *j, const char *path, const char *key, bool *out);
em_status em__json_activation(const cJSON *j, const char *path, const char *key, em_activation *out);
/* num_labels from id2label (its size) or num_labels; problem_type. */
em_status em__json_labels(const cJSON *j, const char *path, int *num_labels, em_problem_type *pt);
/* An encoder's f32 parameter count into out (emb, layer, head and the
 * sizes; the field names are the caller's): positions counts every row of
 * the position and token-type embeddings. */
void em__encoder_size(double vocab, double positions, double hidden, double intermediate, double layers,
                      int num_labels, em__arch_size *out);
/* config.json's problem_type names, by em_problem_type (index 0, auto: NULL). */
extern const char *const em__problem_names[4];

/* ---- the shared sequence-classification loss ------------------------------------------ */
/* HF's loss selection: problem_type (resolved and stored on first use from
 * num_labels and the labels' dtype), then MSE / cross-entropy / BCE-with-logits. */
em_tensor *em__seqcls_loss(em_tensor *logits, em_tensor *labels, int num_labels, em_problem_type *pt,
                           const char *op);

/* ---- what the encoder families' files share (nn/encoder.c) --------------------------------- */
/* Registers on emb the non-persistent buffer position_ids, i64 [1, n] holding
 * 0..n-1, as HF's embeddings hold it; NULL on OOM. */
em_tensor *em__position_ids(em_module *emb, int64_t n);
/* Registers child under list as its name "<i>" (a ModuleList entry); false
 * as em__add_child. */
bool em__add_indexed(em_module *list, int64_t i, void *child);
/* m when ok; otherwise frees m (the constructor's unwinding) and returns NULL. */
void *em__built(em_module *m, bool ok);
/* A model module of size bytes and type whose destroy is set, or NULL: a
 * misuse in op when why (a bad_config message) is not NULL, or OOM. */
void *em__model_alloc(size_t size, const char *type, const char *op, const char *why, void (*destroy)(em_module *));
/* A sequence classifier module of size bytes and type holding body as its
 * first child, named prefix, with destroy set; NULL (body freed) on OOM. */
void *em__seqcls_alloc(size_t size, const char *type, em_module *body, const char *prefix,
                       void (*destroy)(em_module *));

/* One encoder layer's forward: x [B,S,D], or the packed [n,D] rows of plan. */
typedef em_tensor *(*em__layer_fn)(void *layer, em_tensor *x, em_tensor *mask4, const em__packing *plan);
/* An encoder as its family's forward sees it: the embeddings' parts
 * (token_type NULL: none) and the layers. */
typedef struct em__encoder {
    em_nn_embedding *word, *position, *token_type;
    em_tensor *position_ids;   /* i64 [1, max_positions] */
    em_nn_layer_norm *ln;
    em_nn_dropout *dropout;
    void *const *layers;
    int64_t n_layers, max_positions;
    em__layer_fn layer_forward;
    /* The position-id rule. false: 0..S-1 (BERT, DistilBERT). true: RoBERTa's, from the ids
     * (HF create_position_ids_from_input_ids): padding_idx + the count of non-padding tokens
     * so far, padding_idx at a padding token; inputs then take S <= max_positions - padding_idx - 1. */
    bool positions_from_ids;
    int64_t padding_idx;
} em__encoder;
/* The encoder pass: checks ids (i64/i32 [B,S], S within max_positions: see positions_from_ids) and types
 * (NULL, or ids' shape), misuse naming op; embeds as HF ((word + token_type)
 * + position), then LayerNorm, dropout and the layers, with the mask's
 * [B,1,1,S] form built once. first_only: the caller reads only each
 * sequence's first token, so a right-padded batch may run on its real tokens
 * (nn/unpad.c) and the result is that token's hidden state, [B,D]; otherwise
 * [B,S,D], every position as HF. The result belongs to the caller's scope. */
em_tensor *em__encoder_forward(const em__encoder *enc, em_tensor *ids, em_tensor *mask, em_tensor *types,
                               bool first_only, const char *op);
/* A classifier's output from its logits, inside the forward's own scope: the
 * loss (em__seqcls_loss) when labels are given; both kept to the caller's
 * scope; {NULL, NULL} when the logits or the loss failed. */
em_seqcls_output em__seqcls_output(em_tensor *logits, em_tensor *labels, int num_labels, em_problem_type *pt,
                                   const char *op);

/* ---- the BERT layout (nn/bert.c), which RoBERTa's file builds on ------------------------------- */
/* Adds BertModel's children to m as modeling_bert.py names them ("embeddings",
 * "encoder.layer.<i>" into layers[0..c->num_hidden_layers), and "pooler.dense"
 * into *pooler unless c->no_pooler, else *pooler = NULL) and fills *enc for
 * em__encoder_forward; positions_from_ids: RoBERTa's position rule (em__encoder),
 * and the position embedding's padding row is c->pad_token_id. The modules keep
 * BERT's type names. false on OOM (m is the caller's to free). c is resolved. */
bool em__bert_body(em_module *m, const em_bert_config *c, bool positions_from_ids, void **layers, em__encoder *enc,
                   em_nn_linear **pooler);
/* Why c cannot be built (into buf, returned), or NULL when it can. */
const char *em__bert_bad_config(const em_bert_config *c, char *buf, size_t cap);
/* The head's dropout: classifier_dropout, or hidden_dropout_prob when that is None (+0.0). */
double em__bert_classifier_dropout(const em_bert_config *c);
/* BertConfig's config.json fields read over *c (the caller's defaults), errors as em__arch.parse. */
em_status em__bert_config_parse(const cJSON *j, const char *path, em_bert_config *c);
/* BertConfig's fields into j, as em__arch.write. */
bool em__bert_config_write(cJSON *j, const em_bert_config *c);
/* em__arch.size for an em_bert_config. */
void em__bert_size(const void *cfg, int num_labels, em__arch_size *out);

/* What every encoder family's file writes the same way, expanded once there,
 * after its bad_config and before its model_build and seqcls_build (which it
 * declares): for family F, the structs em_F_model (of type MODEL_TYPE, with
 * `config` and the `layer` array), em_F_seqcls (with `config` and id2label)
 * and em_F_config, and the public em_F_config_resolve and
 * em_F_seqcls_forward. Defines the static model_destroy, seqcls_destroy and
 * construct (a model of either head, unflattened and not initialized: see
 * em__arch_build), the public em_F_model_new and em_F_seqcls_new (built,
 * initialized as HF, flattened), and the static em__arch hooks config_of,
 * config_labels, init_std, seqcls_view and seqcls_forward; EM__FAMILY_HOOKS
 * puts them (with the file's parse, write and size) in its em__F_arch. */
#define EM__FAMILY_FUNCTIONS(F, MODEL_TYPE)                                                                     \
    static em_##F##_model *model_build(const em_##F##_config *cfg);                                             \
    static em_##F##_seqcls *seqcls_build(const em_##F##_config *cfg);                                           \
    static void model_destroy(em_module *base)                                                                  \
    {                                                                                                           \
        em__free(((em_##F##_model *)base)->layer);                                                              \
        em__free(base);                                                                                         \
    }                                                                                                           \
    static void seqcls_destroy(em_module *base)                                                                 \
    {                                                                                                           \
        em_##F##_seqcls *s_ = (em_##F##_seqcls *)base;                                                          \
        em__free_labels(s_->id2label, s_->config.num_labels);                                                   \
        em__free(s_);                                                                                           \
    }                                                                                                           \
    static em_module *construct(const void *cfg, em__head head)                                                 \
    {                                                                                                           \
        return head == EM__HEAD_SEQCLS ? (em_module *)seqcls_build(cfg) : (em_module *)model_build(cfg);      \
    }                                                                                                           \
    em_##F##_model *em_##F##_model_new(const em_##F##_config *cfg)                                              \
    {                                                                                                           \
        return (em_##F##_model *)em__flattened(em__arch_build(&em__##F##_arch, cfg, EM__HEAD_BASE, true));      \
    }                                                                                                           \
    em_##F##_seqcls *em_##F##_seqcls_new(const em_##F##_config *cfg)                                            \
    {                                                                                                           \
        return (em_##F##_seqcls *)em__flattened(em__arch_build(&em__##F##_arch, cfg, EM__HEAD_SEQCLS, true));   \
    }                                                                                                           \
    static const void *config_of(const em_module *m)                                                            \
    {                                                                                                           \
        if (!strcmp(m->type, MODEL_TYPE)) return &((const em_##F##_model *)m)->config;                          \
        return &((const em_##F##_seqcls *)m)->config;                                                           \
    }                                                                                                           \
    static int *config_labels(void *cfg) { return &((em_##F##_config *)cfg)->num_labels; }                     \
    static double init_std(const void *cfg) { return em_##F##_config_resolve(cfg).initializer_range; }         \
    static void seqcls_view(em_module *m, em__seqcls_view *out)                                                 \
    {                                                                                                           \
        em_##F##_seqcls *s_ = (em_##F##_seqcls *)m;                                                             \
        *out = (em__seqcls_view){.num_labels = &s_->config.num_labels, .id2label = &s_->id2label,              \
                                 .problem_type = &s_->config.problem_type, .vocab_size = s_->config.vocab_size, \
                                 .max_position_embeddings = s_->config.max_position_embeddings};                \
    }                                                                                                           \
    static em_seqcls_output seqcls_forward(em_module *m, const em_seqcls_inputs *in)                            \
    {                                                                                                           \
        return em_##F##_seqcls_forward((em_##F##_seqcls *)m, in);                                               \
    }
#define EM__FAMILY_HOOKS                                                                                 \
    .parse = parse, .write = write, .construct = construct, .init_std = init_std, .config_of = config_of, \
    .config_labels = config_labels, .size = size, .seqcls_view = seqcls_view, .seqcls_forward = seqcls_forward

/* Frees an id2label array of n strings (NULL is ok; module.c). */
void em__free_labels(char **labels, int n);

/* Flattens a freshly built model (module.c); frees it and returns NULL on OOM. */
em_module *em__flattened(em_module *m);

/* This process's place in a world, told by the Accelerator (distributed/
 * sits above nn/): em_save_pretrained warns once when a rank other than 0
 * writes a checkpoint, the "checkpoint from every rank" mistake. (0, 1) when
 * no Accelerator is live. */
void em__nn_set_process(int rank, int world);

#endif
