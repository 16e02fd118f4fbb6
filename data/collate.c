/* ember — collate: samples -> one padded batch of named i64 tensors, as
 * transformers' DataCollatorWithPadding (right padding, attention_mask,
 * token_type_ids padded with 0, "label" -> labels). */
#include "data/loader_internal.h"
#include "tensor/tensor_internal.h"

static void release_all(em_batch *b)
{
    em_release(b->input_ids);
    em_release(b->attention_mask);
    em_release(b->token_type_ids);
    em_release(b->labels);
    *b = (em_batch){0};
}

void em_batch_release(em_batch *b)
{
    if (b) release_all(b);
}

em_status em__collate_raw(const em_sample *s, int64_t n, int64_t mult, int64_t pad_id, em_batch *out)
{
    *out = (em_batch){0};
    int64_t len = 0;
    for (int64_t i = 0; i < n; i++)
        if (s[i].len > len) len = s[i].len;
    if (mult > 1) len = (len + mult - 1) / mult * mult;

    em_batch b = { .n = n, .len = len };
    int64_t shape[2] = { n, len };
    b.input_ids = em__empty(2, shape, EM_I64, EM_CPU);
    b.attention_mask = b.input_ids ? em__empty(2, shape, EM_I64, EM_CPU) : NULL;
    b.token_type_ids = b.attention_mask ? em__empty(2, shape, EM_I64, EM_CPU) : NULL;
    b.labels = b.token_type_ids ? em__empty(1, shape, EM_I64, EM_CPU) : NULL;
    if (!b.labels) {
        if (em_scope_depth() == 0) release_all(&b);   /* inside a scope, the scope owns them */
        return EM_ERR_OOM;
    }
    int64_t *ids = em_data_ptr(b.input_ids), *mask = em_data_ptr(b.attention_mask);
    int64_t *types = em_data_ptr(b.token_type_ids), *labels = em_data_ptr(b.labels);
    for (int64_t i = 0; i < n; i++) {
        const em_sample *x = &s[i];
        int64_t *ri = ids + i * len, *rm = mask + i * len, *rt = types + i * len;
        int64_t j = 0;
        for (; j < x->len; j++) {
            ri[j] = x->ids[j];
            rm[j] = 1;
            rt[j] = x->type_ids ? x->type_ids[j] : 0;
        }
        for (; j < len; j++) {
            ri[j] = pad_id;
            rm[j] = 0;
            rt[j] = 0;
        }
        labels[i] = x->label;
    }
    *out = b;
    return EM_OK;
}

em_status em_collate(const em_sample *samples, int64_t n, const em_collate_opts *opts, em_batch *out)
{
    if (!out || (n > 0 && !samples) || n < 0) {
        em__misuse("em_collate", "%s", !out ? "out is NULL" : n < 0 ? "n is negative" : "samples is NULL");
        return EM_ERR_INVALID;
    }
    for (int64_t i = 0; i < n; i++)
        if (samples[i].len < 0 || (samples[i].len > 0 && !samples[i].ids)) {
            em__misuse("em_collate", "sample %lld has %s", (long long)i,
                       samples[i].len < 0 ? "a negative length" : "no ids");
            return EM_ERR_INVALID;
        }
    em_collate_opts o = opts ? *opts : (em_collate_opts){0};
    if (o.pad_to_multiple_of < 0) {
        em__misuse("em_collate", "pad_to_multiple_of must be >= 0, got %lld", (long long)o.pad_to_multiple_of);
        return EM_ERR_INVALID;
    }
    /* Made in a private scope and kept into the caller's: a failure midway
     * then frees what was made, whatever scope the caller is in. */
    em_batch b;
    em_scope_begin();
    em_status st = em__collate_raw(samples, n, o.pad_to_multiple_of, o.pad_id, &b);
    /* em_keep fails (OOM) only when the parent is a scope: the ones already
     * kept then stay owned by it and are freed with it. */
    if (st == EM_OK && !(em_keep(b.input_ids) && em_keep(b.attention_mask) && em_keep(b.token_type_ids) &&
                         em_keep(b.labels)))
        st = EM_ERR_OOM;
    em_scope_end();
    *out = st == EM_OK ? b : (em_batch){0};
    return st;
}
