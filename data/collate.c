/* ember — collate: samples -> one padded batch of named i64 tensors, as
 * transformers' DataCollatorWithPadding (right padding, attention_mask,
 * token_type_ids padded with 0, "label" -> labels). */
#include "data/loader_internal.h"
#include "tensor/construct.h"
#include "tensor/support.h"

#include <string.h>

int em_batch_tensors(em_batch *b, em_tensor **slots[6])
{
    slots[0] = &b->input_ids, slots[1] = &b->attention_mask, slots[2] = &b->token_type_ids;
    slots[3] = &b->labels, slots[4] = &b->x, slots[5] = &b->y;
    return 6;
}

static void release_all(em_batch *b)
{
    em_tensor **t[6];
    for (int i = 0, n = em_batch_tensors(b, t); i < n; i++) em_release(*t[i]);
    *b = (em_batch){0};
}

void em_batch_release(em_batch *b)
{
    if (b) release_all(b);
}

static bool same_shape(int na, const int64_t *a, int nb, const int64_t *b)
{
    if (na != nb) return false;
    for (int d = 0; d < na; d++)
        if (a[d] != b[d]) return false;
    return true;
}

static int64_t numel_of(int nd, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return n;
}

/* Stacks the n samples' dense field (x when want_y is false, else y) into [n, shape...]. */
static em_status stack_dense(const em_sample *s, int64_t n, bool want_y, em_tensor **out)
{
    const char *what = want_y ? "y" : "x";
    const void *first = want_y ? s[0].y : s[0].x;
    int nd = want_y ? s[0].y_ndim : s[0].x_ndim;
    const int64_t *shape = want_y ? s[0].y_shape : s[0].x_shape;
    em_dtype dt = want_y ? s[0].y_dtype : s[0].x_dtype;
    if (nd < 0 || nd >= EM_MAX_DIMS || (nd > 0 && !shape) || (unsigned)dt >= EM_NUM_DTYPES)
        return em__fail(EM_ERR_INVALID, "collate: sample 0's %s has %d dims, shape %s, dtype %d: not a valid shape",
                        what, nd, shape ? "given" : "NULL", (int)dt);
    for (int64_t i = 1; i < n; i++) {
        const void *p = want_y ? s[i].y : s[i].x;
        int ndi = want_y ? s[i].y_ndim : s[i].x_ndim;
        const int64_t *sh = want_y ? s[i].y_shape : s[i].x_shape;
        em_dtype dti = want_y ? s[i].y_dtype : s[i].x_dtype;
        if (!p || dti != dt || (ndi > 0 && !sh) || !same_shape(ndi, sh, nd, shape))
            return em__fail(EM_ERR_INVALID,
                            "collate: sample %lld's %s (%s %s) differs from sample 0's (%s %s): the samples of one "
                            "batch must share the shape and dtype of %s",
                            (long long)i, what, p ? em_dtype_name(dti) : "missing",
                            p && (ndi == 0 || sh) ? em__dims_str(ndi, sh) : "", em_dtype_name(dt),
                            em__dims_str(nd, shape), what);
    }
    int64_t full[EM_MAX_DIMS];
    full[0] = n;
    for (int d = 0; d < nd; d++) full[d + 1] = shape[d];
    em_tensor *t = em__empty(nd + 1, full, dt, EM_CPU);
    if (!t) return EM_ERR_OOM;
    size_t row = (size_t)numel_of(nd, shape) * em_dtype_size(dt);
    char *dst = em_data_ptr(t);
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * row, i ? (want_y ? s[i].y : s[i].x) : first, row);
    *out = t;
    return EM_OK;
}

em_status em__collate_raw(const em_sample *s, int64_t n, int64_t mult, int64_t pad_id, em_batch *out)
{
    *out = (em_batch){0};
    int64_t len = 0;
    bool dense = n > 0 && s[0].x, text = !dense;
    for (int64_t i = 0; i < n; i++) {
        if (s[i].len > len) len = s[i].len;
        if (s[i].len > 0) text = true;
        if (!s[i].x != !dense)
            return em__fail(EM_ERR_INVALID, "collate: sample %lld %s dense features (x) and sample 0 %s", (long long)i,
                            s[i].x ? "has" : "has no", dense ? "has" : "has none");
        if (!s[i].y != !(n > 0 && s[0].y))
            return em__fail(EM_ERR_INVALID, "collate: sample %lld %s a dense target (y) and sample 0 %s", (long long)i,
                            s[i].y ? "has" : "has no", s[0].y ? "has" : "has none");
    }
    if (mult > 1) len = (len + mult - 1) / mult * mult;

    em_batch b = { .n = n, .len = text ? len : 0 };
    int64_t shape[2] = { n, len };
    em_status st = EM_OK;
    if (text) {
        b.input_ids = em__empty(2, shape, EM_I64, EM_CPU);
        b.attention_mask = b.input_ids ? em__empty(2, shape, EM_I64, EM_CPU) : NULL;
        b.token_type_ids = b.attention_mask ? em__empty(2, shape, EM_I64, EM_CPU) : NULL;
        if (!b.token_type_ids) st = EM_ERR_OOM;
    }
    if (st == EM_OK && !(b.labels = em__empty(1, shape, EM_I64, EM_CPU))) st = EM_ERR_OOM;
    if (st == EM_OK && dense) st = stack_dense(s, n, false, &b.x);
    if (st == EM_OK && dense && n > 0 && s[0].y) st = stack_dense(s, n, true, &b.y);
    if (st != EM_OK) {
        if (em_scope_depth() == 0) release_all(&b);   /* inside a scope, the scope owns them */
        return st;
    }
    int64_t *labels = em_data_ptr(b.labels);
    for (int64_t i = 0; i < n; i++) labels[i] = s[i].label;
    if (!text) {
        *out = b;
        return EM_OK;
    }
    int64_t *ids = em_data_ptr(b.input_ids), *mask = em_data_ptr(b.attention_mask);
    int64_t *types = em_data_ptr(b.token_type_ids);
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
    }
    *out = b;
    return EM_OK;
}

/* em_keep of every tensor the batch has; false when one failed (OOM) */
bool em__batch_keep(em_batch *b)
{
    em_tensor **t[6];
    bool ok = true;
    for (int i = 0, n = em_batch_tensors(b, t); i < n; i++)
        if (*t[i] && !em_keep(*t[i])) ok = false;
    return ok;
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
    if (st == EM_OK && !em__batch_keep(&b)) st = EM_ERR_OOM;
    em_scope_end();
    *out = st == EM_OK ? b : (em_batch){0};
    return st;
}
