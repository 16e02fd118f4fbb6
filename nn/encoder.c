/* ember — what the encoder families (DistilBERT, BERT and those on its layout) share (nn_internal.h):
 * building a model of a family, the pieces their constructors use, the
 * encoder pass, the sequence-classification loss and output, and their
 * parameter count. */
#include "nn/nn_internal.h"
#include "tensor/support.h"

#include <stdio.h>

em_module *em__arch_build(const em__arch *a, const void *cfg, em__head head, bool init)
{
    bool was = em__skip_default_init;
    em__skip_default_init = !init;   /* a checkpoint fills it: layers.c's stand-in for their draws */
    em_module *m = a->construct(cfg, head);
    em__skip_default_init = was;
    if (m) {
        if (init) em__hf_init(m, a->init_std(cfg));
        m->family = a, m->family_head = head;   /* what save_pretrained and em_seqcls_* read */
    }
    return m;
}

em_tensor *em__position_ids(em_module *emb, int64_t n)
{
    em_tensor *r = NULL;
    EM_SCOPE {
        em_tensor *ids = em_reshape(em_arange(0, (double)n, 1, EM_I64, EM_CPU), 2, (int64_t[]){1, n});
        r = em_module_register_buffer(emb, "position_ids", ids, false);
    }
    return r;
}

bool em__add_indexed(em_module *list, int64_t i, void *child)
{
    char name[24];
    snprintf(name, sizeof name, "%lld", (long long)i);
    return em__add_child(list, name, child);
}

void *em__built(em_module *m, bool ok)
{
    if (ok) return m;
    em_module_free(m);
    return NULL;
}

void *em__model_alloc(size_t size, const char *type, const char *op, const char *why, void (*destroy)(em_module *))
{
    if (why) {
        em__misuse(op, "%s", why);
        return NULL;
    }
    em_module *m = em__module_alloc(size, type);
    if (m) m->destroy = destroy;
    return m;
}

void *em__seqcls_alloc(size_t size, const char *type, em_module *body, const char *prefix,
                       void (*destroy)(em_module *))
{
    em_module *s = em__module_alloc(size, type);
    if (!s) {
        em_module_free(body);
        return NULL;
    }
    s->destroy = destroy;
    return em__built(s, em__add_child(s, prefix, body));
}

/* RoBERTa's position ids for ids (em__encoder.positions_from_ids), i64 [B,S] on ids'
 * device, in the caller's scope. Integers with no gradient: computed on the host. */
static em_tensor *positions_from_ids(em_tensor *ids, int64_t pad)
{
    em_tensor *h = em_contiguous(em_to_dtype(em_to(ids, EM_CPU), EM_I64));
    em_tensor *pos = h ? em_empty(2, ids->shape, EM_I64, EM_CPU) : NULL;
    if (!pos) return NULL;
    const int64_t *in = em_data_ptr(h);
    int64_t *out = em_data_ptr(pos);
    for (int64_t b = 0; b < ids->shape[0]; b++) {
        int64_t n = 0;
        for (int64_t s = 0; s < ids->shape[1]; s++) {
            int64_t i = b * ids->shape[1] + s;
            out[i] = in[i] == pad ? pad : pad + ++n;
        }
    }
    return em_to(pos, ids->device);
}

em_tensor *em__encoder_forward(const em__encoder *enc, em_tensor *ids, em_tensor *mask, em_tensor *types,
                               bool first_only, const char *op)
{
    EM_PROPAGATE_NULL_IN(op, ids);
    EM_CHECK(ids->ndim == 2 && (ids->dtype == EM_I64 || ids->dtype == EM_I32), op,
             "input_ids must be i64/i32 [batch, seq], got %s %s", em_dtype_name(ids->dtype), em__shape_str(ids));
    EM_CHECK(!first_only || ids->shape[1] >= 1, op,
             "a sequence classifier reads each row's first token: input_ids %s has none", em__shape_str(ids));
    int64_t offset = enc->positions_from_ids ? enc->padding_idx + 1 : 0;   /* rows before the first position */
    EM_CHECK(ids->shape[1] + offset <= enc->max_positions, op, "sequence length %lld exceeds max_position_embeddings %lld%s",
             (long long)ids->shape[1], (long long)enc->max_positions,
             offset ? " less the rows before the first position (pad_token_id + 1)" : "");
    EM_CHECK(!types || (types->ndim == 2 && types->shape[0] == ids->shape[0] && types->shape[1] == ids->shape[1]), op,
             "token_type_ids %s do not match input_ids %s", em__shape_str(types), em__shape_str(ids));
    int64_t B = ids->shape[0], S = ids->shape[1];
    em_tensor *r = NULL;
    em_scope_begin();
    em_tensor *m4 = em__attention_mask4(mask, B, S, op);   /* built once, shared by every layer */
    if (!mask || m4) {
        em_tensor *pos = enc->positions_from_ids ? positions_from_ids(ids, enc->padding_idx)
                                                 : em_narrow(enc->position_ids, 1, 0, S);
        if (pos && !em_device_eq(pos->device, ids->device)) pos = em_to(pos, ids->device);
        em_tensor *x = em_nn_embedding_forward(enc->word, ids);
        if (enc->token_type) {   /* HF's order: (word + token_type) + position */
            em_tensor *tt = types ? types : em_zeros(2, (int64_t[]){B, S}, EM_I64, ids->device);
            x = em_add(x, em_nn_embedding_forward(enc->token_type, tt));
        }
        x = em_add(x, em_nn_embedding_forward(enc->position, pos));
        em__packing plan;
        bool packed = first_only && x && em__pack_plan(mask, B, S, &plan);
        if (packed) x = em__pack_rows(&plan, x);
        x = em_nn_dropout_forward(enc->dropout, em_nn_layer_norm_forward(enc->ln, x));
        for (int64_t i = 0; i < enc->n_layers; i++) x = enc->layer_forward(enc->layers[i], x, m4, packed ? &plan : NULL);
        if (first_only) x = packed ? em_index_select(x, 0, plan.first) : em_select(x, 1, 0);
        if (x) r = em_keep(x);
    }
    em_scope_end();
    return r;
}

em_seqcls_output em__seqcls_output(em_tensor *logits, em_tensor *labels, int num_labels, em_problem_type *pt,
                                   const char *op)
{
    em_seqcls_output out = {0};
    em_tensor *loss = logits && labels ? em__seqcls_loss(logits, labels, num_labels, pt, op) : NULL;
    if (logits && (!labels || loss)) {
        out.logits = em_keep(logits);
        out.loss = loss ? em_keep(loss) : NULL;
    }
    return out;
}

em_tensor *em__seqcls_loss(em_tensor *logits, em_tensor *labels, int num_labels, em_problem_type *pt, const char *op)
{
    EM_PROPAGATE_NULL(logits, labels);
    bool int_labels = labels->dtype == EM_I64 || labels->dtype == EM_I32;
    if (*pt == EM_PROBLEM_AUTO)   /* inferred once and kept, as HF writes config.problem_type */
        *pt = num_labels == 1 ? EM_PROBLEM_REGRESSION : int_labels ? EM_PROBLEM_SINGLE_LABEL : EM_PROBLEM_MULTI_LABEL;
    int64_t B = logits->shape[0];
    em_tensor *r = NULL;
    em_scope_begin();
    switch (*pt) {
    case EM_PROBLEM_REGRESSION:
        if (num_labels == 1) {   /* MSELoss(logits.squeeze(), labels.squeeze()) */
            if (em_numel(labels) != B) {
                em__misuse(op, "regression labels %s do not match the %lld logits", em__shape_str(labels), (long long)B);
                break;
            }
            r = em_mse_loss(em_reshape(logits, 1, (int64_t[]){-1}),
                            em_reshape(em_to_dtype(labels, logits->dtype), 1, (int64_t[]){-1}), EM_REDUCE_MEAN);
        } else {
            r = em_mse_loss(logits, em_to_dtype(labels, logits->dtype), EM_REDUCE_MEAN);
        }
        break;
    case EM_PROBLEM_SINGLE_LABEL:
        if (!int_labels || em_numel(labels) != B) {
            em__misuse(op, "single-label classification needs i64/i32 labels with one per row (%lld), got %s %s",
                       (long long)B, em_dtype_name(labels->dtype), em__shape_str(labels));
            break;
        }
        r = em_cross_entropy_loss(em_view(logits, 2, (int64_t[]){-1, num_labels}),
                                  em_reshape(labels, 1, (int64_t[]){-1}), NULL);
        break;
    case EM_PROBLEM_MULTI_LABEL:
        r = em_bce_with_logits_loss(logits, em_to_dtype(labels, logits->dtype), EM_REDUCE_MEAN);
        break;
    default:
        em__misuse(op, "unknown problem_type %d", (int)*pt);
    }
    if (r) em_keep(r);
    em_scope_end();
    return r;
}

void em__encoder_size(double vocab, double positions, double hidden, double intermediate, double layers,
                      int num_labels, em__arch_size *out)
{
    double H = hidden, I = intermediate;
    out->vocab = vocab, out->hidden = H, out->intermediate = I, out->layers = layers;
    out->emb = (vocab + positions) * H + 2 * H;                        /* token, position (+ type) rows, LayerNorm */
    out->layer = 4 * (H * H + H) + 2 * H * I + I + H + 4 * H;          /* q, k, v, o; the FFN; two LayerNorms */
    out->head = H * H + H + H * (double)num_labels + (double)num_labels;   /* pooler or pre_classifier; classifier */
}
