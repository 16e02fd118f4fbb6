/* ember — torch.nn's basic layers: Linear, Embedding (with padding_idx),
 * LayerNorm, Dropout and the activations; plus the helpers every nn/ file
 * uses to build modules (nn_internal.h). */
#include "nn/nn_internal.h"
#include "tensor/op_grad.h"
#include "tensor/construct.h"
#include "tensor/support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- building modules ------------------------------------------------------------ */

static void free_block(em_module *m) { em__free(m); }

/* The layers' one-input forwards, for em_module_forward and Sequential. */
static em_tensor *linear_fwd(em_module *m, em_tensor *x) { return em_nn_linear_forward((em_nn_linear *)m, x); }
static em_tensor *dropout_fwd(em_module *m, em_tensor *x) { return em_nn_dropout_forward((em_nn_dropout *)m, x); }
static em_tensor *activation_fwd(em_module *m, em_tensor *x) { return em_nn_activation_forward((em_nn_activation *)m, x); }
static em_tensor *layer_norm_fwd(em_module *m, em_tensor *x) { return em_nn_layer_norm_forward((em_nn_layer_norm *)m, x); }
static em_tensor *embedding_fwd(em_module *m, em_tensor *x) { return em_nn_embedding_forward((em_nn_embedding *)m, x); }

void *em__module_alloc(size_t size, const char *type)
{
    em_module *m = em__calloc(1, size);
    if (!m) {
        em__fail(EM_ERR_OOM, "out of memory allocating a %s module", type);
        return NULL;
    }
    em_module_init(m, type, free_block);
    return m;
}

bool em__add_child(em_module *parent, const char *name, void *child)
{
    if (!child) return false;
    em_module_register_child(parent, name, child);
    return true;
}

em_tensor *em__new_param(em_module *m, const char *name, int ndim, const int64_t *shape, em_dtype dt,
                         em_device dev, bool frozen)
{
    em_tensor *t = NULL;
    em_scope_begin();
    em_tensor *e = em_empty(ndim, shape, dt, dev);
    if (e && frozen) {
        t = em_module_register_buffer(m, name, e, true);
    } else if (e) {
        /* registering makes the autograd record, which may fail (OOM): then the
         * entry holds NULL and the module must not point at e */
        em_module_register_parameter(m, name, e);
        t = m->n_params && m->params[m->n_params - 1].tensor == e ? e : NULL;
    }
    em_scope_end();   /* the module holds its own reference */
    return t;
}

em_tensor *em__pass_through(em_tensor *t)
{
    if (!t) return NULL;
    return em__scope_adopt(em_retain(t));
}

static const char *dtype_check(em_dtype dt)
{
    return em_dtype_is_float(dt) ? NULL : em_dtype_name(dt);
}

/* ---- default initialization, or its stand-in while a checkpoint is loaded -----------
 * em__arch_build(..., init = false) builds a model the checkpoint then fills:
 * drawing torch's default init for every Linear and Embedding first (an
 * all-MiniLM-L6-v2 classifier: 0.1 s, the word embeddings' normal draw 0.09
 * of it) is wasted work. While em__skip_default_init is set, those layers
 * zero their parameters instead and only advance the global stream by the
 * counters the draw would have taken, so everything drawn later (a new
 * head's init, dropout masks) gets the same numbers as before. */
_Thread_local bool em__skip_default_init;

/* torch's default draw into t: U(a, b) or, with normal, N(a, b). */
static void default_draw(em_tensor *t, bool normal, double a, double b)
{
    if (em__skip_default_init) {
        em_rng_reserve(((uint64_t)em_numel(t) + 3) / 4);   /* as the draw would: a counter a 4 values */
        em_fill_(t, 0.0);
    } else if (normal) {
        em_normal_(t, a, b);
    } else {
        em_uniform_(t, a, b);
    }
}

/* ---- Linear ------------------------------------------------------------------------ */

em_nn_linear *em_nn_linear_new(int64_t in, int64_t out, const em_nn_linear_opts *opts)
{
    em_nn_linear_opts o = opts ? *opts : (em_nn_linear_opts){0};
    if (in <= 0 || out <= 0 || dtype_check(o.dtype)) {
        em__misuse("em_nn_linear_new", "expected in_features > 0, out_features > 0 and a float dtype, got %lld, %lld, %s",
                   (long long)in, (long long)out, em_dtype_name(o.dtype));
        return NULL;
    }
    em_nn_linear *l = em__module_alloc(sizeof *l, "Linear");
    if (!l) return NULL;
    l->in_features = in;
    l->out_features = out;
    l->weight = em__new_param(&l->base, "weight", 2, (int64_t[]){out, in}, o.dtype, o.device, false);
    if (!o.no_bias) l->bias = em__new_param(&l->base, "bias", 1, (int64_t[]){out}, o.dtype, o.device, false);
    if (!l->weight || (!o.no_bias && !l->bias)) {
        em_module_free(&l->base);
        return NULL;
    }
    double bound = 1.0 / sqrt((double)in);   /* kaiming_uniform_(a=sqrt(5)) and the bias rule */
    EM_NO_GRAD {
        default_draw(l->weight, false, -bound, bound);
        if (l->bias) default_draw(l->bias, false, -bound, bound);
    }
    l->base.forward = linear_fwd;
    return l;
}

em_tensor *em_nn_linear_forward(em_nn_linear *l, em_tensor *x)
{
    static const char op[] = "em_nn_linear_forward";
    EM_PROPAGATE_NULL(x);
    EM_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] == l->in_features, op,
             "input %s does not end in in_features %lld (weight %s)", em__shape_str(x), (long long)l->in_features,
             em__shape_str(l->weight));
    /* one recorded LINEAR op over [rows, in]: on the CPU the numbers of
     * matmul(x, W^T) + b exactly; on CUDA the bias rides in the GEMM's epilogue */
    return em_linear(x, l->weight, l->bias);
}

/* ---- Embedding ---------------------------------------------------------------------- */

em_nn_embedding *em_nn_embedding_new(int64_t num, int64_t dim, const em_nn_embedding_opts *opts)
{
    em_nn_embedding_opts o = opts ? *opts : (em_nn_embedding_opts){0};
    int64_t pad = -1;
    if (o.has_padding_idx) pad = o.padding_idx < 0 ? o.padding_idx + num : o.padding_idx;
    if (num <= 0 || dim <= 0 || dtype_check(o.dtype) || (o.has_padding_idx && (pad < 0 || pad >= num))) {
        em__misuse("em_nn_embedding_new",
                   "expected num_embeddings > 0, dim > 0, a float dtype and padding_idx within [-%lld, %lld), got %lld, "
                   "%lld, %s, padding_idx %lld",
                   (long long)num, (long long)num, (long long)num, (long long)dim, em_dtype_name(o.dtype),
                   (long long)o.padding_idx);
        return NULL;
    }
    em_nn_embedding *e = em__module_alloc(sizeof *e, "Embedding");
    if (!e) return NULL;
    e->num_embeddings = num;
    e->dim = dim;
    e->padding_idx = pad;
    e->frozen = o.frozen;
    e->weight = em__new_param(&e->base, "weight", 2, (int64_t[]){num, dim}, o.dtype, o.device, o.frozen);
    if (!e->weight) {
        em_module_free(&e->base);
        return NULL;
    }
    EM_NO_GRAD {
        default_draw(e->weight, true, 0.0, 1.0);
        if (pad >= 0) EM_SCOPE { em_fill_(em_select(e->weight, 0, pad), 0.0); }
    }
    e->base.forward = embedding_fwd;
    return e;
}

em_tensor *em_nn_embedding_forward(em_nn_embedding *e, em_tensor *ids)
{
    return em__embedding_ex(e->weight, ids, e->padding_idx);
}

/* ---- LayerNorm --------------------------------------------------------------------------- */

em_nn_layer_norm *em_nn_layer_norm_new(int64_t dim, const em_nn_layer_norm_opts *opts)
{
    em_nn_layer_norm_opts o = opts ? *opts : (em_nn_layer_norm_opts){0};
    double eps = em__opt(o.eps, 1e-5);
    if (dim <= 0 || dtype_check(o.dtype) || !(eps >= 0)) {
        em__misuse("em_nn_layer_norm_new", "expected dim > 0, eps >= 0 and a float dtype, got %lld, %g, %s",
                   (long long)dim, eps, em_dtype_name(o.dtype));
        return NULL;
    }
    em_nn_layer_norm *ln = em__module_alloc(sizeof *ln, "LayerNorm");
    if (!ln) return NULL;
    ln->dim = dim;
    ln->eps = eps;
    if (!o.no_affine) {
        ln->weight = em__new_param(&ln->base, "weight", 1, &dim, o.dtype, o.device, false);
        ln->bias = em__new_param(&ln->base, "bias", 1, &dim, o.dtype, o.device, false);
        if (!ln->weight || !ln->bias) {
            em_module_free(&ln->base);
            return NULL;
        }
        EM_NO_GRAD {
            em_fill_(ln->weight, 1.0);
            em_fill_(ln->bias, 0.0);
        }
    }
    ln->base.forward = layer_norm_fwd;
    return ln;
}

em_tensor *em_nn_layer_norm_forward(em_nn_layer_norm *ln, em_tensor *x)
{
    EM_PROPAGATE_NULL(x);
    EM_CHECK(x->ndim >= 1 && x->shape[x->ndim - 1] == ln->dim, "em_nn_layer_norm_forward",
             "input %s does not end in the normalized dim %lld", em__shape_str(x), (long long)ln->dim);
    return em_layer_norm(x, ln->weight, ln->bias, ln->eps, NULL, NULL);
}

/* ---- Dropout --------------------------------------------------------------------------------- */

em_nn_dropout *em_nn_dropout_new(double p)
{
    if (!(p >= 0.0 && p <= 1.0)) {
        em__misuse("em_nn_dropout_new", "p must be in [0, 1], got %g", p);
        return NULL;
    }
    em_nn_dropout *d = em__module_alloc(sizeof *d, "Dropout");
    if (d) d->p = p, d->base.forward = dropout_fwd;
    return d;
}

void em__dropout_key(int64_t n, uint64_t *seed, uint64_t *offset)
{
    /* em_dropout uses counters offset + e/4 for element e */
    *offset = em_rng_reserve((uint64_t)(n + 3) / 4);
    *seed = em_get_seed();
}

em_tensor *em_nn_dropout_forward(em_nn_dropout *d, em_tensor *x)
{
    EM_PROPAGATE_NULL(x);
    if (!d->base.training || d->p == 0.0) return em__pass_through(x);
    if (d->p == 1.0) return em_mul_scalar(x, 0.0);   /* torch: all zeros */
    uint64_t seed, off;
    em__dropout_key(em_numel(x), &seed, &off);
    return em_dropout(x, d->p, seed, off, NULL);
}

/* ---- activations --------------------------------------------------------------------------------- */

static const struct { const char *name; em_activation act; } act_names[] = {
    {"gelu", EM_ACT_GELU},          {"relu", EM_ACT_RELU}, {"gelu_new", EM_ACT_GELU_TANH},
    {"gelu_pytorch_tanh", EM_ACT_GELU_TANH}, {"silu", EM_ACT_SILU}, {"swish", EM_ACT_SILU},
    {"tanh", EM_ACT_TANH},
};

const char *em__activation_name(em_activation act)
{
    for (size_t i = 0; i < sizeof act_names / sizeof *act_names; i++)
        if (act_names[i].act == act) return act_names[i].name;
    return "?";
}

bool em__activation_parse(const char *name, em_activation *out)
{
    for (size_t i = 0; i < sizeof act_names / sizeof *act_names; i++)
        if (!strcmp(act_names[i].name, name)) {
            *out = act_names[i].act;
            return true;
        }
    return false;
}

em_tensor *em__activation(em_activation act, em_tensor *x)
{
    switch (act) {
    case EM_ACT_GELU: return em_gelu(x);
    case EM_ACT_RELU: return em_relu(x);
    case EM_ACT_GELU_TANH: return em_gelu_tanh(x);
    case EM_ACT_SILU: {
        em_tensor *r = NULL;
        em_scope_begin();
        em_tensor *y = em_mul(x, em_sigmoid(x));
        if (y) r = em_keep(y);
        em_scope_end();
        return r;
    }
    case EM_ACT_TANH: return em_tanh(x);
    }
    em__misuse("em_nn_activation_forward", "unknown activation %d", (int)act);
    return NULL;
}

em_nn_activation *em_nn_activation_new(em_activation act)
{
    static const char *types[] = {"GELU", "ReLU", "GELU", "SiLU", "Tanh"};
    if ((unsigned)act > EM_ACT_TANH) {
        em__misuse("em_nn_activation_new", "unknown activation %d", (int)act);
        return NULL;
    }
    em_nn_activation *a = em__module_alloc(sizeof *a, types[act]);
    if (a) a->act = act, a->base.forward = activation_fwd;
    return a;
}

em_nn_activation *em_nn_relu_new(void) { return em_nn_activation_new(EM_ACT_RELU); }
em_nn_activation *em_nn_gelu_new(bool tanh_approx) { return em_nn_activation_new(tanh_approx ? EM_ACT_GELU_TANH : EM_ACT_GELU); }
em_tensor *em_nn_activation_forward(em_nn_activation *a, em_tensor *x) { return em__activation(a->act, x); }

/* ---- Hugging Face init ---------------------------------------------------------------------------- */

typedef struct hf_init_ctx {
    double std;
    em_tensor *const *only;   /* NULL: every parameter */
    int n_only;
} hf_init_ctx;

static bool wanted(const hf_init_ctx *c, const em_tensor *t)
{
    if (!t) return false;
    if (!c->only) return true;
    for (int i = 0; i < c->n_only; i++)
        if (c->only[i] == t) return true;
    return false;
}

static void hf_init_one(em_module *m, void *user)
{
    const hf_init_ctx *c = user;
    EM_NO_GRAD {
        if (!strcmp(m->type, "Linear")) {
            em_nn_linear *l = (em_nn_linear *)m;
            if (wanted(c, l->weight)) em_normal_(l->weight, 0.0, c->std);
            if (wanted(c, l->bias)) em_fill_(l->bias, 0.0);
        } else if (!strcmp(m->type, "Embedding")) {
            em_nn_embedding *e = (em_nn_embedding *)m;
            if (!e->frozen && wanted(c, e->weight)) {
                em_normal_(e->weight, 0.0, c->std);
                if (e->padding_idx >= 0) EM_SCOPE { em_fill_(em_select(e->weight, 0, e->padding_idx), 0.0); }
            }
        } else if (!strcmp(m->type, "LayerNorm")) {
            em_nn_layer_norm *ln = (em_nn_layer_norm *)m;
            if (wanted(c, ln->weight)) em_fill_(ln->weight, 1.0);
            if (wanted(c, ln->bias)) em_fill_(ln->bias, 0.0);
        }
    }
}

void em__hf_init(em_module *m, double std)
{
    /* torch's apply order: children first, so the draws follow registration order */
    hf_init_ctx c = {.std = std};
    em_module_apply(m, hf_init_one, &c);
}

void em__hf_init_only(em_module *m, double std, em_tensor *const *only, int n)
{
    hf_init_ctx c = {.std = std, .only = only, .n_only = n};
    if (n > 0) em_module_apply(m, hf_init_one, &c);
}
