/* ember — what the encoder families share (nn_internal.h "encoder
 * pieces"): their parameter count and the sequence-classification loss of
 * DistilBERT and BERT. */
#include "nn/nn_internal.h"
#include "tensor/support.h"

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
