/** @file
 * ember — nn/: modules, layers, losses, DistilBERT/BERT (DESIGN.md §3 "nn").
 *
 * A module embeds em_module as its FIRST member, so a pointer to the layer is
 * also a pointer to its em_module. It registers its parameters, buffers and
 * children by name; em_module_named_parameters then yields Hugging Face's
 * dotted names ("distilbert.transformer.layer.0.attention.q_lin.weight").
 *
 * Ownership:
 *   - A module owns (holds one reference to) its parameters and buffers, and
 *     owns its children: em_module_free frees the whole tree.
 *   - Parameter tensors keep their identity for the module's whole life:
 *     em_module_flatten and em_module_to move their data but never replace
 *     the em_tensor structs, so pointers taken earlier stay valid.
 * Forward functions return op results owned by the caller's scope.
 */
#ifndef EMBER_NN_H
#define EMBER_NN_H

#include "autograd/autograd.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The base of every module (torch.nn.Module): its type name, mode, and the
 * registry of parameters, buffers and children. Embed it first in a layer. */
typedef struct em_module em_module;

/** One registered parameter, buffer or child, under its local name. */
typedef struct em_module_entry {
    char *name;          /**< local name ("weight", "0", "attention") */
    union { em_tensor *tensor; em_module *module; };   /**< the parameter or buffer (owned reference), or the child (owned) */
    bool persistent;     /**< buffers: saved in checkpoints */
} em_module_entry;

struct em_module {
    const char *type;                 /**< "Linear", "DistilBertModel", ...          */
    void (*destroy)(em_module *m);    /**< frees what the subtype owns besides the registry; may be NULL */
    bool training;                    /**< training mode (em_module_train); eval when false */
    /** @{ */
    int n_params, n_buffers, n_children;            /**< registry sizes */
    /** @} */
    /** @{ */
    em_module_entry *params, *buffers, *children;   /**< the registry, in registration order */
    /** @} */
    /** @{ */
    int cap_params, cap_buffers, cap_children;      /**< registry capacities (internal) */
    /** @} */
    /** @{ after em_module_flatten (root only): one buffer per dtype, owned */
    em_tensor *flat_params[EM_NUM_DTYPES], *flat_grads[EM_NUM_DTYPES];
    /** @} */
    /** One-input forward (em_module_forward), set by the layers that have one and by
     * Sequential; a module of your own may set it after em_module_init. NULL: none. */
    em_tensor *(*forward)(em_module *m, em_tensor *x);
    /** Internal: the model family that built this model (nn/families.c) and
     * its head; NULL and 0 for every other module. */
    const void *family;
    int family_head;   /**< internal: see family */
};

/* ---- building a module ---------------------------------------------------------- */
/** Initializes the base of a module (zeroed registry, training mode). type is
 * a static string; destroy may be NULL. */
void em_module_init(em_module *m, const char *type, void (*destroy)(em_module *m));
/** Registers t as a parameter (requires grad) under a local name; the module
 * holds a reference of its own until em_module_free. The caller's reference
 * follows tensor.h's one rule: made outside any scope, it is the caller's to
 * em_release (or keep); made inside a scope, the scope releases it, and an
 * em_release of it is misuse. Both patterns are safe:
 *     w = em_full(...); em_module_register_parameter(m, "w", w); em_release(w);
 *     EM_SCOPE { em_module_register_parameter(m, "w", em_full(...)); }
 * Returns t. A NULL t returns NULL; a name that is empty, has a '.', or is
 * taken is misuse. */
em_tensor *em_module_register_parameter(em_module *m, const char *name, em_tensor *t);
/** Registers t as a buffer (not trained): persistent buffers go into
 * checkpoints. One reference taken, as for parameters. Returns t. */
em_tensor *em_module_register_buffer(em_module *m, const char *name, em_tensor *t, bool persistent);
/** Adopts child (the module frees it). Returns child. */
em_module *em_module_register_child(em_module *m, const char *name, em_module *child);
/** m->forward(m, x): the module's one-input forward (Linear, Embedding, LayerNorm,
 * Dropout, the activations, Sequential, or your own). Misuse when it has none. */
em_tensor *em_module_forward(em_module *m, em_tensor *x);
/** torch.nn.Sequential: children registered as "0", "1", ... run in order by
 * em_module_forward (each must have a forward). Free with em_module_free. */
em_module *em_nn_sequential_new(void);
/** nn.Sequential(a, b, c): a Sequential holding the n children in order (it
 * frees them). NULL on OOM (the children are then freed too) or when a child
 * is NULL from an earlier failure. */
em_module *em_nn_sequential_of(int n, em_module *const *children);
/** torch.nn.ModuleList: children "0", "1", ... with no forward of its own. */
em_module *em_nn_module_list_new(void);
/** Appends child to a Sequential or ModuleList under the next index; returns child
 * (the container frees it). Misuse on any other module. */
em_module *em_nn_append(em_module *container, em_module *child);
/** The number of m's children, and child i in registration order (misuse past the end). */
int em_module_num_children(const em_module *m);
em_module *em_module_child_at(const em_module *m, int i);   /**< child i (0-based) */
/** Frees the module tree (children first), releasing parameters and buffers. NULL is ok. */
void em_module_free(em_module *m);

/* ---- walking a module ------------------------------------------------------------- */
/** A tensor of a module with its dotted name. */
typedef struct em_named_tensor {
    char *name;          /**< full dotted name, owned by the list */
    em_tensor *tensor;   /**< borrowed from the module */
} em_named_tensor;
/** A list of named tensors (em_module_named_parameters and _buffers); free it with em_named_tensors_free. */
typedef struct em_named_tensors {
    int n;                    /**< entries */
    em_named_tensor *items;   /**< n entries, owned by the list */
} em_named_tensors;
/** Parameters in registration order (depth first, a module's own before its
 * children's), each tensor once even if shared. Free with em_named_tensors_free. */
em_named_tensors em_module_named_parameters(const em_module *m);
/** Persistent buffers (for checkpoints); all buffers when include_nonpersistent. */
em_named_tensors em_module_named_buffers(const em_module *m, bool include_nonpersistent);
void em_named_tensors_free(em_named_tensors *l);   /**< frees the names and the array (not the tensors) and zeroes *l */
/** model.parameters(): m's parameters in em_module_named_parameters order, as
 * a new array of *n borrowed pointers (the module keeps them); free() the
 * array. NULL (and *n 0) only when out of memory.
 *     int n; em_tensor **p = em_module_parameters(m, &n);
 *     em_optimizer *opt = em_adamw_new(p, n, NULL); free(p); */
em_tensor **em_module_parameters(const em_module *m, int *n);
/** The parameter or persistent buffer with this dotted name, or NULL. */
em_tensor *em_module_get(const em_module *m, const char *dotted_name);
/** The child at a dotted path ("distilbert.transformer"), or NULL. */
em_module *em_module_child(const em_module *m, const char *dotted_path);
/** Elements in all parameters (each shared tensor once); only those that require grad when only_trainable. */
int64_t em_module_num_parameters(const em_module *m, bool only_trainable);

/* ---- modes and bulk operations ------------------------------------------------------ */
void em_module_train(em_module *m, bool training);   /**< the whole tree; eval = train(false) */
bool em_module_is_training(const em_module *m);      /**< m's own mode */
/** Clears gradients: set_to_none drops them (torch's default); otherwise zeroes
 * them in place. After em_module_flatten gradients are always zeroed in place
 * (one memset per flat buffer), so they stay views of the flat buffer. */
void em_module_zero_grad(em_module *m, bool set_to_none);
/** Calls fn on every module of the tree, children first, then m (torch's apply). */
void em_module_apply(em_module *m, void (*fn)(em_module *m, void *user), void *user);
/** Moves every parameter and buffer to dev in place (tensor identities kept).
 * Returns EM_OK or EM_ERR_OOM (then nothing moved). */
em_status em_module_to(em_module *m, em_device dev);
/** Flat parameter storage (DESIGN.md §3): moves all parameters of one dtype
 * and device into one contiguous buffer, in registration order, each
 * parameter a view into it; gradients get the same layout in a second buffer
 * (each .grad a zeroed view). Idempotent. EM_ERR_OOM leaves m unchanged. */
em_status em_module_flatten(em_module *m);
/** After em_module_flatten: the flat parameter and gradient buffers of dtype
 * (1-d tensors owned by the module), or NULL. */
em_tensor *em_module_flat_params(const em_module *m, em_dtype dt);
/** The flat gradient buffer of dtype dt, as em_module_flat_params. */
em_tensor *em_module_flat_grads(const em_module *m, em_dtype dt);

/* ==== layers (nn/layers.c) ============================================================
 * torch.nn's layers. Each embeds em_module first, so (em_module *)layer works
 * with every em_module_* function, and em_module_free frees it (or its parent
 * does, once registered as a child). Options: zero means the documented
 * default; EM_ZERO asks for an actual 0 where 0 is not the default; an opts
 * pointer may be NULL. Parameters are f32 on the CPU unless .dtype/.device say
 * otherwise. Constructors return NULL with em_last_error on OOM; bad sizes
 * are misuse. Forward functions return results owned by the current scope. */
#ifndef EM_ZERO
/** An explicit 0 for an option whose 0 means its default (negative zero; also in optim/optim.h). */
#define EM_ZERO (-0.0)   /* also in optim/optim.h */
#endif

/** torch.nn.Linear (type "Linear"): y = x W^T + b. */
typedef struct em_nn_linear {
    em_module base;   /**< the module base (first member) */
    em_tensor *weight;   /**< [out_features, in_features] (torch's layout) */
    em_tensor *bias;     /**< [out_features], or NULL with .no_bias */
    /** @{ */
    int64_t in_features, out_features;   /**< the sizes it was made with */
    /** @} */
} em_nn_linear;
/** Options of em_nn_linear_new (NULL: defaults). */
typedef struct em_nn_linear_opts {
    bool no_bias;        /**< no bias parameter (torch's bias=False) */
    em_dtype dtype;     /**< parameters' dtype; 0 is EM_F32 */
    em_device device;   /**< parameters' device; zeroed is the CPU */
} em_nn_linear_opts;
/** torch.nn.Linear; weight and bias start U(-1/sqrt(in), 1/sqrt(in)) as in torch. */
em_nn_linear *em_nn_linear_new(int64_t in_features, int64_t out_features, const em_nn_linear_opts *opts);
/** x [..., in] -> x W^T + b  [..., out]. */
em_tensor *em_nn_linear_forward(em_nn_linear *l, em_tensor *x);

/** torch.nn.Embedding (type "Embedding"): a lookup table of num_embeddings rows. */
typedef struct em_nn_embedding {
    em_module base;   /**< the module base (first member) */
    em_tensor *weight;       /**< [num_embeddings, dim] */
    /** @{ */
    int64_t num_embeddings, dim;   /**< table size: rows and row width */
    /** @} */
    int64_t padding_idx;     /**< -1: none */
    bool frozen;             /**< weight is a persistent buffer, not a parameter */
} em_nn_embedding;
/** Options of em_nn_embedding_new (NULL: defaults). */
typedef struct em_nn_embedding_opts {
    bool has_padding_idx;    /**< then padding_idx (negative counts from the end, as torch) */
    int64_t padding_idx;     /**< the padding row, when has_padding_idx */
    bool frozen;             /**< torch's freeze=True: saved and loaded, never trained */
    em_dtype dtype;     /**< parameters' dtype; 0 is EM_F32 */
    em_device device;   /**< parameters' device; zeroed is the CPU */
} em_nn_embedding_opts;
/** torch.nn.Embedding: weight N(0, 1), the padding_idx row zeroed; that row's
 * gradient stays zero. */
em_nn_embedding *em_nn_embedding_new(int64_t num_embeddings, int64_t dim, const em_nn_embedding_opts *opts);
/** ids (i64 or i32, any shape) -> [..., dim]. An id outside [0, num_embeddings) is misuse. */
em_tensor *em_nn_embedding_forward(em_nn_embedding *e, em_tensor *ids);

/** torch.nn.LayerNorm over the last dim (type "LayerNorm"). */
typedef struct em_nn_layer_norm {
    em_module base;   /**< the module base (first member) */
    /** @{ */
    em_tensor *weight, *bias;   /**< [dim] each, or NULL with .no_affine */
    /** @} */
    int64_t dim;                /**< size of the normalized (last) dim */
    double eps;                 /**< added to the variance */
} em_nn_layer_norm;
/** Options of em_nn_layer_norm_new (NULL: defaults). */
typedef struct em_nn_layer_norm_opts {
    double eps;       /**< default 1e-5 (torch); DistilBERT/BERT use 1e-12 */
    bool no_affine;   /**< torch's elementwise_affine=False */
    em_dtype dtype;     /**< parameters' dtype; 0 is EM_F32 */
    em_device device;   /**< parameters' device; zeroed is the CPU */
} em_nn_layer_norm_opts;
/** torch.nn.LayerNorm over the last dim: weight 1, bias 0. */
em_nn_layer_norm *em_nn_layer_norm_new(int64_t dim, const em_nn_layer_norm_opts *opts);
/** x [..., dim] (float) normalized over its last dim, then scaled and shifted. */
em_tensor *em_nn_layer_norm_forward(em_nn_layer_norm *ln, em_tensor *x);

/** torch.nn.Dropout (type "Dropout"). */
typedef struct em_nn_dropout {
    em_module base;   /**< the module base (first member) */
    double p;         /**< drop probability */
} em_nn_dropout;
/** torch.nn.Dropout(p); p outside [0, 1] is misuse. */
em_nn_dropout *em_nn_dropout_new(double p);
/** Training mode and p > 0: inverted dropout (keep with 1-p, scale 1/(1-p))
 * with a mask drawn from the global Philox stream (em_set_seed replays it).
 * Eval mode or p = 0: x itself (a new reference in the current scope). */
em_tensor *em_nn_dropout_forward(em_nn_dropout *d, em_tensor *x);

/** Activations, as Hugging Face's ACT2FN names them. */
typedef enum em_activation {
    EM_ACT_GELU = 0,     /**< "gelu": exact erf form */
    EM_ACT_RELU,         /**< "relu" */
    EM_ACT_GELU_TANH,    /**< "gelu_new", "gelu_pytorch_tanh": tanh approximation */
    EM_ACT_SILU,         /**< "silu", "swish" */
    EM_ACT_TANH,         /**< "tanh" */
} em_activation;
/** An activation as a module. */
typedef struct em_nn_activation {
    em_module base;   /**< the module base (first member) */
    em_activation act;   /**< which function */
} em_nn_activation;
/** ReLU / GELU / ... as modules (type "ReLU", "GELU", ...); no parameters. */
em_nn_activation *em_nn_activation_new(em_activation act);
em_nn_activation *em_nn_relu_new(void);   /**< torch.nn.ReLU */
em_nn_activation *em_nn_gelu_new(bool tanh_approx);   /**< torch.nn.GELU (approximate="tanh" when tanh_approx) */
/** a's function of x, elementwise (same shape and dtype; float x). */
em_tensor *em_nn_activation_forward(em_nn_activation *a, em_tensor *x);

/* ==== attention and the transformer block (nn/attention.c) ==============================
 * DistilBERT's building blocks, with its parameter names. */
/** DistilBERT's MultiHeadSelfAttention (its parameter names: q_lin, k_lin, v_lin, out_lin). */
typedef struct em_nn_mhsa {             /* MultiHeadSelfAttention */
    em_module base;   /**< the module base (first member) */
    /** @{ query, key, value and output projections, [dim, dim] each */
    em_nn_linear *q_lin, *k_lin, *v_lin, *out_lin;
    /** @} */
    em_nn_dropout *dropout;             /**< on the attention weights */
    /** @{ */
    int64_t dim, n_heads;               /**< model width and head count */
    /** @} */
} em_nn_mhsa;
/** Options of em_nn_mhsa_new (NULL: defaults). */
typedef struct em_nn_mhsa_opts {
    double dropout;                     /**< attention-weight dropout; default 0.1 (EM_ZERO: none) */
    em_dtype dtype;     /**< parameters' dtype; 0 is EM_F32 */
    em_device device;   /**< parameters' device; zeroed is the CPU */
} em_nn_mhsa_opts;
/** dim must be a multiple of n_heads (misuse otherwise). */
em_nn_mhsa *em_nn_mhsa_new(int64_t dim, int64_t n_heads, const em_nn_mhsa_opts *opts);
/** x [B,S,dim]; mask NULL or [B,S] (bool, or integer with 1 = token, 0 =
 * padding: padded keys get no attention) -> out_lin(softmax(q k^T/sqrt(Dh)) v) [B,S,dim].
 * No dropout on the output (DistilBERT). */
em_tensor *em_nn_mhsa_forward(em_nn_mhsa *a, em_tensor *x, em_tensor *mask);

/** DistilBERT's FFN: dropout(lin2(act(lin1(x)))). */
typedef struct em_nn_ffn {              /* FFN: lin2(act(lin1(x))) then dropout */
    em_module base;   /**< the module base (first member) */
    em_nn_dropout *dropout;             /**< on the output */
    /** @{ */
    em_nn_linear *lin1, *lin2;          /**< [dim -> hidden_dim] and [hidden_dim -> dim] */
    /** @} */
    em_activation activation;           /**< between them */
} em_nn_ffn;
/** Options of em_nn_ffn_new (NULL: defaults). */
typedef struct em_nn_ffn_opts {
    double dropout;                     /**< default 0.1 (EM_ZERO: none) */
    em_activation activation;           /**< default gelu */
    em_dtype dtype;     /**< parameters' dtype; 0 is EM_F32 */
    em_device device;   /**< parameters' device; zeroed is the CPU */
} em_nn_ffn_opts;
/** A new FFN (type "FFN"); NULL on OOM; misuse for an unknown activation. */
em_nn_ffn *em_nn_ffn_new(int64_t dim, int64_t hidden_dim, const em_nn_ffn_opts *opts);
/** x [..., dim] -> [..., dim]; dropout only in training mode. */
em_tensor *em_nn_ffn_forward(em_nn_ffn *f, em_tensor *x);

/** DistilBERT's TransformerBlock (post-LN): attention, then the FFN, each with a residual and a LayerNorm. */
typedef struct em_nn_transformer_block {   /* post-LN, DistilBERT's TransformerBlock */
    em_module base;   /**< the module base (first member) */
    em_nn_mhsa *attention;                 /**< self-attention */
    em_nn_layer_norm *sa_layer_norm;       /**< after attention + residual */
    em_nn_ffn *ffn;                        /**< the feed-forward part */
    em_nn_layer_norm *output_layer_norm;   /**< after ffn + residual */
} em_nn_transformer_block;
/** Options of em_nn_transformer_block_new (NULL: defaults). */
typedef struct em_nn_transformer_block_opts {
    /** @{ */
    double dropout, attention_dropout;  /**< default 0.1 each (EM_ZERO: none) */
    /** @} */
    double eps;                         /**< both LayerNorms; default 1e-12 */
    em_activation activation;           /**< default gelu */
    em_dtype dtype;     /**< parameters' dtype; 0 is EM_F32 */
    em_device device;   /**< parameters' device; zeroed is the CPU */
} em_nn_transformer_block_opts;
/** A new block (type "TransformerBlock"); NULL on OOM. Misuse: n_heads does not
 * divide dim, or hidden_dim <= 0. */
em_nn_transformer_block *em_nn_transformer_block_new(int64_t dim, int64_t n_heads, int64_t hidden_dim,
                                                     const em_nn_transformer_block_opts *opts);
/** h = sa_layer_norm(attention(x, mask) + x); out = output_layer_norm(ffn(h) + h). */
em_tensor *em_nn_transformer_block_forward(em_nn_transformer_block *b, em_tensor *x, em_tensor *mask);

/* ==== losses (nn/losses.c) =================================================================
 * torch.nn.functional's losses, differentiable, reduction mean by default
 * (em_reduction; EM_REDUCE_NONE returns per-element losses). */
/** The .ignore_index value that means "ignore class 0" (0 itself means the default, -100). */
#define EM_IGNORE_CLASS_0 INT64_MIN   /* .ignore_index value that means "ignore class 0" */
/** Options of em_cross_entropy_loss (NULL: torch's defaults). */
typedef struct em_cross_entropy_opts {
    int64_t ignore_index;     /**< 0: torch's default -100; EM_IGNORE_CLASS_0 for class 0 */
    double label_smoothing;   /**< in [0, 1]; default 0 */
    em_reduction reduction;   /**< default mean */
} em_cross_entropy_opts;
/** logits [N, C], target i64/i32 [N] (class ids in [0, C) or ignore_index).
 * The mean divides by the number of rows not ignored (NaN when all are). */
em_tensor *em_cross_entropy_loss(em_tensor *logits, em_tensor *target, const em_cross_entropy_opts *opts);
/** mean((input - target)^2); same shapes (or broadcastable as torch), float. */
em_tensor *em_mse_loss(em_tensor *input, em_tensor *target, em_reduction reduction);
/** mean(max(x,0) - x*y + log(1 + exp(-|x|))), stable for any x; y in [0, 1]
 * of logits' shape and dtype. */
em_tensor *em_bce_with_logits_loss(em_tensor *logits, em_tensor *target, em_reduction reduction);

/* ==== DistilBERT (nn/distilbert.c) ===========================================================
 * transformers' DistilBertModel and DistilBertForSequenceClassification: the
 * same layout, defaults, init, dropout placement and checkpoint names
 * (../shared/reference/accelerate-semantics.md §7). */
/** The loss a sequence classifier computes (HF's config.problem_type). */
typedef enum em_problem_type {
    EM_PROBLEM_AUTO = 0,           /**< None: inferred at the first loss, then kept (as HF does) */
    EM_PROBLEM_REGRESSION,         /**< "regression": MSE on squeezed logits */
    EM_PROBLEM_SINGLE_LABEL,       /**< "single_label_classification": cross-entropy */
    EM_PROBLEM_MULTI_LABEL,        /**< "multi_label_classification": BCE with logits */
} em_problem_type;

/** DistilBertConfig. Zero fields take HF's defaults (shown); EM_ZERO for a 0 dropout. */
typedef struct em_distilbert_config {
    int64_t vocab_size;               /**< 30522 */
    int64_t max_position_embeddings;  /**< 512 */
    bool sinusoidal_pos_embds;        /**< false; true: fixed, never trained */
    int64_t n_layers;                 /**< 6 */
    int64_t n_heads;                  /**< 12 */
    int64_t dim;                      /**< 768 */
    int64_t hidden_dim;               /**< 3072 */
    double dropout;                   /**< 0.1 */
    double attention_dropout;         /**< 0.1 */
    em_activation activation;         /**< gelu */
    double initializer_range;         /**< 0.02 */
    double qa_dropout;                /**< 0.1 (kept for config.json; no QA head here) */
    double seq_classif_dropout;       /**< 0.2 */
    int64_t pad_token_id;             /**< 0 */
    int num_labels;                   /**< 2 */
    em_problem_type problem_type;     /**< auto */
} em_distilbert_config;
/** cfg with every zero field replaced by its default (cfg NULL: all defaults). */
em_distilbert_config em_distilbert_config_resolve(const em_distilbert_config *cfg);

/** DistilBERT's Embeddings module (type "Embeddings"): word + position embeddings, LayerNorm, dropout. */
typedef struct em_distilbert_embeddings {
    em_module base;   /**< the module base (first member) */
    /** @{ [vocab_size, dim] and [max_position_embeddings, dim] */
    em_nn_embedding *word_embeddings, *position_embeddings;
    /** @} */
    em_nn_layer_norm *LayerNorm;      /**< over the sum (HF's name) */
    em_nn_dropout *dropout;           /**< config.dropout */
    em_tensor *position_ids;          /**< non-persistent buffer [1, max_position_embeddings] */
} em_distilbert_embeddings;

/** transformers' DistilBertModel (type "DistilBertModel"): embeddings, then n_layers transformer blocks. */
typedef struct em_distilbert_model {   /* DistilBertModel */
    em_module base;   /**< the module base (first member) */
    em_distilbert_config config;       /**< resolved */
    em_distilbert_embeddings *embeddings;   /**< "embeddings" */
    em_nn_transformer_block **layer;   /**< config.n_layers blocks: "transformer.layer.0", ".1", ... */
} em_distilbert_model;

/** transformers' DistilBertForSequenceClassification (type of the same name):
 * the model, then a classification head on the first token. */
typedef struct em_distilbert_seqcls {  /* DistilBertForSequenceClassification */
    em_module base;   /**< the module base (first member) */
    em_distilbert_config config;       /**< resolved; problem_type set by the first loss */
    em_distilbert_model *distilbert;   /**< the encoder ("distilbert") */
    /** @{ */
    em_nn_linear *pre_classifier, *classifier;   /**< [dim -> dim] and [dim -> num_labels] */
    /** @} */
    em_nn_dropout *dropout;            /**< seq_classif_dropout */
    char **id2label;                   /**< num_labels names, owned; NULL: "LABEL_0", "LABEL_1", ... */
} em_distilbert_seqcls;

/** Freshly initialized models (HF's _init_weights: N(0, initializer_range),
 * biases 0, padding row 0, LayerNorms 1/0), parameters flattened into one
 * buffer (em_module_flatten). NULL on OOM; a bad config (dim not a multiple
 * of n_heads, ...) is misuse. */
em_distilbert_model *em_distilbert_model_new(const em_distilbert_config *cfg);
/** A fresh DistilBertForSequenceClassification, as em_distilbert_model_new. */
em_distilbert_seqcls *em_distilbert_seqcls_new(const em_distilbert_config *cfg);
/** input_ids [B,S] (i64/i32, S <= max_position_embeddings), attention_mask
 * NULL or [B,S] (1 token, 0 padding) -> last_hidden_state [B,S,dim]. */
em_tensor *em_distilbert_model_forward(em_distilbert_model *m, em_tensor *input_ids, em_tensor *attention_mask);

/** What a sequence classifier's forward takes and returns. Field names match
 * data/'s em_batch. labels NULL: no loss. */
typedef struct em_seqcls_inputs {
    /** @{ [B,S] ids, [B,S] mask or NULL, [B,S] type ids or NULL, [B] labels or NULL (borrowed) */
    em_tensor *input_ids, *attention_mask, *token_type_ids, *labels;
    /** @} */
} em_seqcls_inputs;
/** A sequence classifier's results; both tensors are owned by the current scope. */
typedef struct em_seqcls_output {
    em_tensor *logits;   /**< [B, num_labels] */
    em_tensor *loss;     /**< 0-d, or NULL without labels */
} em_seqcls_output;
/** pooled = hidden[:, 0] -> pre_classifier -> ReLU -> dropout -> classifier;
 * the loss as HF picks it: num_labels 1 -> MSE (regression); labels i64/i32 ->
 * cross-entropy (ignore_index -100); float labels -> BCE with logits.
 * token_type_ids is ignored (DistilBERT has none). */
em_seqcls_output em_distilbert_seqcls_forward(em_distilbert_seqcls *m, const em_seqcls_inputs *in);

/* ==== BERT (nn/bert.c) ============================================================================
 * transformers' BertModel (token-type embeddings, optional pooler) and
 * BertForSequenceClassification, enough for BERT-family checkpoints such as
 * MiniLM. Post-LN like DistilBERT, but with dropout after each output dense. */
/** BertConfig. Zero fields take HF's defaults (shown); EM_ZERO for a 0 dropout. */
typedef struct em_bert_config {
    int64_t vocab_size;                  /**< 30522 */
    int64_t hidden_size;                 /**< 768 */
    int64_t num_hidden_layers;           /**< 12 */
    int64_t num_attention_heads;         /**< 12 */
    int64_t intermediate_size;           /**< 3072 */
    em_activation hidden_act;            /**< gelu */
    double hidden_dropout_prob;          /**< 0.1 */
    double attention_probs_dropout_prob; /**< 0.1 */
    int64_t max_position_embeddings;     /**< 512 */
    int64_t type_vocab_size;             /**< 2 */
    double initializer_range;            /**< 0.02 */
    double layer_norm_eps;               /**< 1e-12 */
    int64_t pad_token_id;                /**< 0 */
    double classifier_dropout;           /**< 0 = None: hidden_dropout_prob */
    bool no_pooler;                      /**< BertModel(add_pooling_layer=False) */
    int num_labels;                      /**< 2 */
    em_problem_type problem_type;        /**< auto */
} em_bert_config;
/** cfg with every zero field replaced by its default (cfg NULL: all defaults). */
em_bert_config em_bert_config_resolve(const em_bert_config *cfg);

typedef struct em_bert_model em_bert_model;     /**< BertModel ("embeddings", "encoder", "pooler") */
/** transformers' BertForSequenceClassification (type of the same name): the
 * pooled output, dropout, then a linear classifier. */
typedef struct em_bert_seqcls {                 /* BertForSequenceClassification */
    em_module base;   /**< the module base (first member) */
    em_bert_config config;                      /**< resolved; problem_type set by the first loss */
    em_bert_model *bert;                        /**< the encoder ("bert"), with its pooler */
    em_nn_dropout *dropout;                     /**< classifier_dropout */
    em_nn_linear *classifier;                   /**< [hidden -> num_labels] */
    char **id2label;                            /**< as em_distilbert_seqcls */
} em_bert_seqcls;
/** A freshly initialized BertModel (HF's init, parameters flattened), as
 * em_distilbert_model_new: NULL on OOM, misuse for a bad config. */
em_bert_model *em_bert_model_new(const em_bert_config *cfg);
/** A fresh BertForSequenceClassification, as em_bert_model_new. */
em_bert_seqcls *em_bert_seqcls_new(const em_bert_config *cfg);
/** -> last_hidden_state [B,S,hidden]; *pooled (tanh(dense(h[:,0])), [B,hidden])
 * when pooled is non-NULL and the model has a pooler (else *pooled = NULL).
 * token_type_ids NULL: zeros. */
em_tensor *em_bert_model_forward(em_bert_model *m, em_tensor *input_ids, em_tensor *attention_mask,
                                 em_tensor *token_type_ids, em_tensor **pooled);
/** m's resolved configuration (owned by m). */
const em_bert_config *em_bert_model_config(const em_bert_model *m);
/** logits = classifier(dropout(pooled)); the loss picked as for DistilBERT.
 * token_type_ids NULL: zeros. */
em_seqcls_output em_bert_seqcls_forward(em_bert_seqcls *m, const em_seqcls_inputs *in);

/** Any registered family's sequence classifier (DistilBERT, BERT, RoBERTa), dispatched on its family. */
em_seqcls_output em_seqcls_forward(em_module *m, const em_seqcls_inputs *in);
/** The classifier's num_labels (0 when m is not a sequence classifier). */
int em_seqcls_num_labels(const em_module *m);
/** What a sequence classifier's config holds, whichever family it is (DistilBERT,
 * BERT, RoBERTa); all zero and NULL when m is not one. */
typedef struct em_seqcls_info {
    int64_t vocab_size;                /**< rows of the word embedding */
    int64_t max_position_embeddings;   /**< the config's value */
    int64_t max_length;                /**< the longest input_ids it takes: max_position_embeddings, less
                                            pad_token_id + 1 for RoBERTa (whose positions start there) */
    int num_labels;                    /**< outputs of the classifier */
    const char *const *id2label;       /**< num_labels names (owned by m), or NULL when unset */
} em_seqcls_info;
/** m's em_seqcls_info (zeros when m is not a sequence classifier). */
em_seqcls_info em_seqcls_get_info(const em_module *m);
/** Whether a parameter name (the model's own naming) belongs to the classification
 * head that fine-tuning a base model creates fresh: classifier.*, pre_classifier.*
 * (DistilBERT) and BERT's pooler (bert.pooler.*, or pooler.* in a bare BertModel). */
bool em_seqcls_is_head_param(const char *name);

/* ==== checkpoints (nn/pretrained.c) ================================================================
 * A transformers folder: config.json and model.safetensors, or a sharded
 * model.safetensors.index.json with its shards. Bad input (a missing file,
 * malformed JSON, a tensor of the wrong shape, an unknown model_type) returns
 * an em_status with em_last_error naming the file and the field or tensor;
 * *out is then NULL and nothing leaks.
 * The loaded model is in EVAL mode (dropout off), as transformers'
 * from_pretrained returns it: call em_module_train(m, true) before training. */
/** Options of the from_pretrained loaders (NULL: all false/0). */
typedef struct em_pretrained_opts {
    bool strict;                   /**< missing or unexpected keys are an error (EM_ERR_INVALID) */
    int num_labels;                /**< 0: from config.json; else override (the head is then resized) */
    bool ignore_mismatched_sizes;  /**< a checkpoint tensor of another shape is skipped and reported,
                                      and the parameter keeps its fresh init (HF's option) */
} em_pretrained_opts;

/** What loading did, like transformers' warnings. Lists are owned; free with em_load_report_free. */
typedef struct em_load_report {
    char *model_class;      /**< "DistilBertForSequenceClassification" */
    int n_loaded;           /**< tensors loaded into the model */
    int n_missing;          /**< parameters not in the checkpoint: freshly initialized */
    char **missing;         /**< their names */
    int n_unexpected;       /**< checkpoint tensors the model has no place for: not used */
    char **unexpected;      /**< their names */
    int n_mismatched;       /**< with ignore_mismatched_sizes: "name: checkpoint [a,b] vs model [c,d]" */
    char **mismatched;      /**< those lines */
} em_load_report;
void em_load_report_free(em_load_report *r);   /**< frees the lists and zeroes *r; NULL is ok */
/** Writes the report as readable lines ("Newly initialized (not in the
 * checkpoint): pre_classifier.weight, ..."); nothing when all keys matched. */
void em_load_report_print(const em_load_report *r, FILE *f);

/** The sequence classifier that config.json's model_type names ("distilbert",
 * "bert", "roberta": the families nn/families.c registers), like
 * AutoModelForSequenceClassification. report may be NULL. */
em_status em_seqcls_from_pretrained(const char *dir, const em_pretrained_opts *opts, em_module **out,
                                    em_load_report *report);
/** A DistilBertForSequenceClassification from dir into *out (the caller frees
 * it with em_module_free); a config of another model_type is EM_ERR_INVALID. */
em_status em_distilbert_seqcls_from_pretrained(const char *dir, const em_pretrained_opts *opts,
                                               em_distilbert_seqcls **out, em_load_report *report);
/** The bare DistilBertModel from dir (a classifier checkpoint's head is
 * reported as unexpected), as em_distilbert_seqcls_from_pretrained. */
em_status em_distilbert_model_from_pretrained(const char *dir, const em_pretrained_opts *opts,
                                              em_distilbert_model **out, em_load_report *report);
/** A BertForSequenceClassification from dir, as em_distilbert_seqcls_from_pretrained. */
em_status em_bert_seqcls_from_pretrained(const char *dir, const em_pretrained_opts *opts, em_bert_seqcls **out,
                                         em_load_report *report);
/** The bare BertModel from dir, as em_distilbert_model_from_pretrained. */
em_status em_bert_model_from_pretrained(const char *dir, const em_pretrained_opts *opts, em_bert_model **out,
                                        em_load_report *report);
/** Writes dir/config.json (HF's field names, architectures, model_type,
 * id2label/label2id, problem_type once known) and dir/model.safetensors
 * (parameters and persistent buffers, f32, metadata format "pt"), each
 * atomically (temporary file + rename); creates dir if needed. m is a model
 * built by ember (any of the four classes). */
em_status em_save_pretrained(const em_module *m, const char *dir);
/** Sets the label names written as id2label (n must equal num_labels; names copied). */
void em_seqcls_set_labels(em_module *m, int n, const char *const *names);

#ifndef EMBER_BUILDING
#include "nn/nn_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
