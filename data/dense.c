/* ember — datasets of dense rows (data.h "dense datasets"): torch's
 * TensorDataset (em_tensor_dataset_new) and a map-style dataset written as a
 * callback (em_callback_dataset_new). Their samples carry x (and y), which
 * collate stacks into em_batch.x / .y; everything else (samplers, sharding,
 * resume, the Accelerator) sees indices only, as for text datasets. */
#include "data/data.h"
#include "autograd/autograd.h"
#include "tensor/construct.h"
#include "tensor/numeric.h"
#include "tensor/support.h"

#include <string.h>

/* ---- tensor dataset ------------------------------------------------------------------------------ */

typedef struct tensor_ds {
    em_dataset base;
    em_tensor *x, *y;          /* contiguous CPU copies (owned) */
    int64_t n;
    size_t x_row, y_row;       /* bytes per sample */
    bool y_is_label;           /* integer target, one value per row */
} tensor_ds;

static int64_t tensor_len(const em_dataset *ds) { return ((const tensor_ds *)ds)->n; }

static em_status tensor_get(const em_dataset *ds, int64_t i, em_sample *out)
{
    const tensor_ds *d = (const tensor_ds *)ds;
    *out = (em_sample){.label = -1};
    out->x = (const char *)d->x->storage->data + (size_t)d->x->offset * em_dtype_size(d->x->dtype) + (size_t)i * d->x_row;
    out->x_ndim = d->x->ndim - 1;
    out->x_shape = d->x->shape + 1;
    out->x_dtype = d->x->dtype;
    if (d->y) {
        const char *yp = (const char *)d->y->storage->data + (size_t)d->y->offset * em_dtype_size(d->y->dtype) +
                         (size_t)i * d->y_row;
        out->y = yp;
        out->y_ndim = d->y->ndim - 1;
        out->y_shape = d->y->shape + 1;
        out->y_dtype = d->y->dtype;
        if (d->y_is_label) out->label = (int64_t)em__load(yp, d->y->dtype);
    }
    return EM_OK;
}

static void tensor_free(em_dataset *ds)
{
    tensor_ds *d = (tensor_ds *)ds;
    em_release(d->x);
    em_release(d->y);
    em__free(d);
}

static const em_dataset_ops tensor_ops = {.len = tensor_len, .get = tensor_get, .free = tensor_free};

static size_t row_bytes(const em_tensor *t)
{
    size_t n = em_dtype_size(t->dtype);
    for (int d = 1; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

em_status em_tensor_dataset_new(em_tensor *features, em_tensor *targets, em_dataset **out)
{
    static const char op[] = "em_tensor_dataset_new";
    if (out) *out = NULL;
    if (!out || !features) {
        em__misuse(op, "%s is NULL", !out ? "out" : "features");
        return EM_ERR_INVALID;
    }
    const em_tensor *ts[2] = {features, targets};
    const char *names[2] = {"features", "targets"};
    for (int k = 0; k < 2; k++) {
        const em_tensor *t = ts[k];
        if (!t) continue;
        if (t->device.type != EM_DEVICE_CPU || t->ndim < 1) {
            em__misuse(op, "%s %s must be a CPU tensor with at least one dim (rows first)", names[k],
                       em__shape_str(t));
            return EM_ERR_INVALID;
        }
    }
    if (targets && targets->shape[0] != features->shape[0]) {
        em__misuse(op, "features %s and targets %s have different numbers of rows", em__shape_str(features),
                   em__shape_str(targets));
        return EM_ERR_INVALID;
    }
    tensor_ds *d = em__calloc(1, sizeof *d);
    if (!d) return EM_ERR_OOM;
    d->base.ops = &tensor_ops;
    d->n = features->shape[0];
    /* private copies outside any scope: the dataset owns them */
    em_scope_begin();
    em_tensor *x = em_clone(features), *y = targets ? em_clone(targets) : NULL;
    d->x = x ? em_retain(em_detach(x)) : NULL;
    d->y = y ? em_retain(em_detach(y)) : NULL;
    em_scope_end();
    if (!d->x || (targets && !d->y)) {
        tensor_free(&d->base);
        return EM_ERR_OOM;
    }
    d->x_row = row_bytes(d->x);
    if (d->y) {
        d->y_row = row_bytes(d->y);
        bool one = d->y->ndim == 1 || (d->y->ndim == 2 && d->y->shape[1] == 1);
        d->y_is_label = one && (d->y->dtype == EM_I64 || d->y->dtype == EM_I32);
    }
    *out = &d->base;
    return EM_OK;
}

/* ---- callback dataset ---------------------------------------------------------------------------- */

typedef struct callback_ds {
    em_dataset base;
    int64_t n;
    em_dataset_get_fn get;
    void *user;
    void (*free_user)(void *user);
} callback_ds;

static int64_t callback_len(const em_dataset *ds) { return ((const callback_ds *)ds)->n; }

static em_status callback_get(const em_dataset *ds, int64_t i, em_sample *out)
{
    const callback_ds *d = (const callback_ds *)ds;
    *out = (em_sample){.label = -1};
    em_status st = d->get(d->user, i, out);
    if (st != EM_OK && em_last_status() == EM_OK) em__fail(st, "the dataset's get callback returned %s", em_status_name(st));
    return st;
}

static void callback_free(em_dataset *ds)
{
    callback_ds *d = (callback_ds *)ds;
    if (d->free_user) d->free_user(d->user);
    em__free(d);
}

static const em_dataset_ops callback_ops = {.len = callback_len, .get = callback_get, .free = callback_free};

em_status em_callback_dataset_new(int64_t len, em_dataset_get_fn get, void *user, void (*free_user)(void *user),
                                  em_dataset **out)
{
    if (out) *out = NULL;
    if (!out || !get || len < 0) {
        em__misuse("em_callback_dataset_new", "%s", !out ? "out is NULL" : !get ? "get is NULL" : "len is negative");
        return EM_ERR_INVALID;
    }
    callback_ds *d = em__calloc(1, sizeof *d);
    if (!d) return EM_ERR_OOM;
    *d = (callback_ds){.base.ops = &callback_ops, .n = len, .get = get, .user = user, .free_user = free_user};
    *out = &d->base;
    return EM_OK;
}
