/* ember — DistilBERT's attention, feed-forward and post-LN transformer block,
 * and the multi-head attention core that BERT shares (nn_internal.h). */
#include "nn/nn_internal.h"
#include "tensor/op_grad.h"
#include "tensor/support.h"

#include <string.h>

/* ---- the shared core ------------------------------------------------------------------ */

em_tensor *em__attention_mask4(em_tensor *mask, int64_t B, int64_t S, const char *op)
{
    if (!mask) return NULL;
    EM_CHECK(mask->ndim == 2 && mask->shape[0] == B && mask->shape[1] == S, op,
             "attention_mask %s does not match the input's [batch, seq] [%lld,%lld]", em__shape_str(mask),
             (long long)B, (long long)S);
    EM_CHECK(mask->dtype == EM_BOOL || mask->dtype == EM_I64 || mask->dtype == EM_I32 || em_dtype_is_float(mask->dtype),
             op, "attention_mask must be bool or numeric (1 = token, 0 = padding), got %s", em_dtype_name(mask->dtype));
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *b = mask->dtype == EM_BOOL ? mask : em_ne(mask, em_scalar(0, mask->dtype, mask->device));
    b = em_reshape(b, 4, (int64_t[]){B, 1, 1, S});
    if (b) r = em_keep(b);
    em_scope_end();
    return r;
}

/* [B,S,H*Dh] (or [n,H*Dh] with B = 1, S = n) -> [B,H,S,Dh]: a view */
static em_tensor *split_heads(em_tensor *x, int64_t B, int64_t S, int64_t n_heads)
{
    int64_t split[4] = {B, S, n_heads, x->shape[x->ndim - 1] / n_heads};
    return em_transpose(em_view(x, 4, split), 1, 2);
}

static em_tensor *mha(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask4, int64_t n_heads, double dropout_p)
{
    EM_PROPAGATE_NULL_IN("em_nn_mhsa_forward", q, k, v);
    int64_t B = q->shape[0], S = q->shape[1], D = q->shape[2];
    em_tensor *r = NULL;
    em_scope_begin();
    uint64_t seed = 0, off = 0;
    if (dropout_p > 0.0) em__dropout_key(B * n_heads * S * S, &seed, &off);
    em_tensor *ctx = em_scaled_dot_product_attention(split_heads(q, B, S, n_heads), split_heads(k, B, S, n_heads),
                                                     split_heads(v, B, S, n_heads), mask4, dropout_p, seed, off);
    /* [B,H,S,Dh] -> [B,S,H,Dh] -> [B,S,D]: a view of the CPU kernel's [B,S,H,Dh]
     * output (em__sdpa_result), one copy of a contiguous one (cuDNN, composed) */
    ctx = em_reshape(em_transpose(ctx, 1, 2), 3, (int64_t[]){B, S, D});
    if (ctx) r = em_keep(ctx);
    em_scope_end();
    return r;
}

em_tensor *em__mha_core(em_tensor *q, em_tensor *k, em_tensor *v, em_tensor *mask4, int64_t n_heads,
                        double dropout_p)
{
    return mha(q, k, v, mask4, n_heads, dropout_p);
}

/* Attention over an encoder's packed rows (nn/unpad.c): q, k, v [n, D] -> [n, D].
 * Each sequence attends to its own rows (em__sdpa_packed: no padding row is
 * gathered, computed or scattered); the dropout key is drawn for the padded
 * [B,H,S,S] weights, as mha's on the padded batch, so the masks agree. */
static em_tensor *mha_packed(em_tensor *q, em_tensor *k, em_tensor *v, const em__packing *plan, int64_t n_heads,
                             double dropout_p)
{
    EM_PROPAGATE_NULL_IN("em_nn_mhsa_forward", q, k, v);
    int64_t n = q->shape[0], D = q->shape[1];
    em_tensor *r = NULL;
    em_scope_begin();
    uint64_t seed = 0, off = 0;
    if (dropout_p > 0.0) em__dropout_key(plan->B * n_heads * plan->S * plan->S, &seed, &off);
    em_tensor *ctx = em__sdpa_packed(split_heads(q, 1, n, n_heads), split_heads(k, 1, n, n_heads),
                                     split_heads(v, 1, n, n_heads), plan->lens, plan->first, plan->S, dropout_p, seed,
                                     off);
    ctx = em_reshape(em_transpose(ctx, 1, 2), 2, (int64_t[]){n, D});   /* a view of em__sdpa_result's layout */
    if (ctx) r = em_keep(ctx);
    em_scope_end();
    return r;
}

/* ---- MultiHeadSelfAttention ---------------------------------------------------------------- */

em_nn_mhsa *em_nn_mhsa_new(int64_t dim, int64_t n_heads, const em_nn_mhsa_opts *opts)
{
    em_nn_mhsa_opts o = opts ? *opts : (em_nn_mhsa_opts){0};
    if (dim <= 0 || n_heads <= 0 || dim % n_heads) {
        em__misuse("em_nn_mhsa_new", "n_heads %lld must divide dim %lld evenly", (long long)n_heads, (long long)dim);
        return NULL;
    }
    em_nn_mhsa *a = em__module_alloc(sizeof *a, "MultiHeadSelfAttention");
    if (!a) return NULL;
    a->dim = dim;
    a->n_heads = n_heads;
    em_nn_linear_opts lo = {.dtype = o.dtype, .device = o.device};
    /* HF's registration order: q, k, v, out, dropout */
    bool ok = em__add_child(&a->base, "q_lin", a->q_lin = em_nn_linear_new(dim, dim, &lo)) &&
              em__add_child(&a->base, "k_lin", a->k_lin = em_nn_linear_new(dim, dim, &lo)) &&
              em__add_child(&a->base, "v_lin", a->v_lin = em_nn_linear_new(dim, dim, &lo)) &&
              em__add_child(&a->base, "out_lin", a->out_lin = em_nn_linear_new(dim, dim, &lo)) &&
              em__add_child(&a->base, "dropout", a->dropout = em_nn_dropout_new(em__opt(o.dropout, 0.1)));
    return em__built(&a->base, ok);
}

/* The public forward of a layer over [batch, seq, dim] inputs (an em__layer_fn:
 * attention, a transformer block): x checked and the mask's [B,1,1,S] form made
 * once (misuse names op), then fwd in a scope of its own. */
static em_tensor *checked_forward(em__layer_fn fwd, void *layer, int64_t dim, em_tensor *x, em_tensor *mask,
                                  const char *op)
{
    EM_PROPAGATE_NULL_IN(op, x);
    EM_CHECK(x->ndim == 3 && x->shape[2] == dim, op, "input %s is not [batch, seq, %lld]", em__shape_str(x),
             (long long)dim);
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *m4 = em__attention_mask4(mask, x->shape[0], x->shape[1], op);
    if (!mask || m4) r = fwd(layer, x, m4, NULL);
    if (r) em_keep(r);
    em_scope_end();
    return r;
}

em_tensor *em__attention_context(em_nn_linear *q_lin, em_nn_linear *k_lin, em_nn_linear *v_lin, int64_t n_heads,
                                  const em_nn_dropout *dropout, em_tensor *x, em_tensor *mask4, const em__packing *plan)
{
    double p = dropout->base.training ? dropout->p : 0.0;
    em_tensor *q = em_nn_linear_forward(q_lin, x), *k = em_nn_linear_forward(k_lin, x);
    em_tensor *v = em_nn_linear_forward(v_lin, x);
    return plan ? mha_packed(q, k, v, plan, n_heads, p) : em__mha_core(q, k, v, mask4, n_heads, p);
}

em_tensor *em__mhsa_forward4(void *mhsa, em_tensor *x, em_tensor *mask4, const em__packing *plan)
{
    em_nn_mhsa *a = mhsa;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *ctx = em__attention_context(a->q_lin, a->k_lin, a->v_lin, a->n_heads, a->dropout, x, mask4, plan);
    em_tensor *y = em_nn_linear_forward(a->out_lin, ctx);
    if (y) r = em_keep(y);
    em_scope_end();
    return r;
}

em_tensor *em_nn_mhsa_forward(em_nn_mhsa *a, em_tensor *x, em_tensor *mask)
{
    return checked_forward(em__mhsa_forward4, a, a->dim, x, mask, "em_nn_mhsa_forward");
}

/* ---- FFN ---------------------------------------------------------------------------------------- */

em_nn_ffn *em_nn_ffn_new(int64_t dim, int64_t hidden_dim, const em_nn_ffn_opts *opts)
{
    em_nn_ffn_opts o = opts ? *opts : (em_nn_ffn_opts){0};
    if ((unsigned)o.activation > EM_ACT_TANH) {
        em__misuse("em_nn_ffn_new", "unknown activation %d", (int)o.activation);
        return NULL;
    }
    em_nn_ffn *f = em__module_alloc(sizeof *f, "FFN");
    if (!f) return NULL;
    f->activation = o.activation;
    em_nn_linear_opts lo = {.dtype = o.dtype, .device = o.device};
    /* HF's registration order: dropout, lin1, lin2 */
    bool ok = em__add_child(&f->base, "dropout", f->dropout = em_nn_dropout_new(em__opt(o.dropout, 0.1))) &&
              em__add_child(&f->base, "lin1", f->lin1 = em_nn_linear_new(dim, hidden_dim, &lo)) &&
              em__add_child(&f->base, "lin2", f->lin2 = em_nn_linear_new(hidden_dim, dim, &lo));
    if (!ok) {
        em_module_free(&f->base);
        return NULL;
    }
    return f;
}

em_tensor *em_nn_ffn_forward(em_nn_ffn *f, em_tensor *x)
{
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *h = em__activation(f->activation, em_nn_linear_forward(f->lin1, x));
    h = em_nn_dropout_forward(f->dropout, em_nn_linear_forward(f->lin2, h));
    if (h) r = em_keep(h);
    em_scope_end();
    return r;
}

/* ---- TransformerBlock ------------------------------------------------------------------------------ */

em_nn_transformer_block *em_nn_transformer_block_new(int64_t dim, int64_t n_heads, int64_t hidden_dim,
                                                     const em_nn_transformer_block_opts *opts)
{
    em_nn_transformer_block_opts o = opts ? *opts : (em_nn_transformer_block_opts){0};
    if (dim <= 0 || n_heads <= 0 || dim % n_heads || hidden_dim <= 0) {
        em__misuse("em_nn_transformer_block_new", "n_heads %lld must divide dim %lld evenly, and hidden_dim %lld be > 0",
                   (long long)n_heads, (long long)dim, (long long)hidden_dim);
        return NULL;
    }
    em_nn_transformer_block *b = em__module_alloc(sizeof *b, "TransformerBlock");
    if (!b) return NULL;
    em_nn_layer_norm_opts lno = {.eps = em__opt(o.eps, 1e-12), .dtype = o.dtype, .device = o.device};
    em_nn_mhsa_opts ao = {.dropout = o.attention_dropout, .dtype = o.dtype, .device = o.device};
    em_nn_ffn_opts fo = {.dropout = o.dropout, .activation = o.activation, .dtype = o.dtype, .device = o.device};
    bool ok = em__add_child(&b->base, "attention", b->attention = em_nn_mhsa_new(dim, n_heads, &ao)) &&
              em__add_child(&b->base, "sa_layer_norm", b->sa_layer_norm = em_nn_layer_norm_new(dim, &lno)) &&
              em__add_child(&b->base, "ffn", b->ffn = em_nn_ffn_new(dim, hidden_dim, &fo)) &&
              em__add_child(&b->base, "output_layer_norm", b->output_layer_norm = em_nn_layer_norm_new(dim, &lno));
    return em__built(&b->base, ok);
}

em_tensor *em__block_forward4(void *block, em_tensor *x, em_tensor *mask4, const em__packing *plan)
{
    em_nn_transformer_block *b = block;
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *h =
        em_nn_layer_norm_forward(b->sa_layer_norm, em_add(em__mhsa_forward4(b->attention, x, mask4, plan), x));
    em_tensor *y = em_nn_layer_norm_forward(b->output_layer_norm, em_add(em_nn_ffn_forward(b->ffn, h), h));
    if (y) r = em_keep(y);
    em_scope_end();
    return r;
}

em_tensor *em_nn_transformer_block_forward(em_nn_transformer_block *b, em_tensor *x, em_tensor *mask)
{
    return checked_forward(em__block_forward4, b, b->attention->dim, x, mask, "em_nn_transformer_block_forward");
}
