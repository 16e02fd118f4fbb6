/* ember tests — the toy task the Accelerator tests share (test_accelerator.c,
 * test_accelerator_mpi.c): a data set of FEAT token ids and a label per
 * sample (each test fills it its own way); the classifier FEAT ids ->
 * Linear(FEAT, TOY_HIDDEN) -> tanh -> Dropout -> Linear(TOY_HIDDEN, 2),
 * cross-entropy; and one prepared training run (toy_run). Define TOY_HIDDEN
 * before including it (default 8). Header-only: one test program each. */
#ifndef EMBER_TEST_TOY_MODEL_H
#define EMBER_TEST_TOY_MODEL_H

#include "ember.h"

#include <stdlib.h>
#include <string.h>

#define FEAT 4
#ifndef TOY_HIDDEN
#define TOY_HIDDEN 8
#endif

/* ---- the data set: n samples of FEAT ids (ids[i * FEAT + k]) and a label ---------- */
typedef struct toy_ds {
    em_dataset base;
    int64_t n;
    int32_t *ids;      /* n * FEAT */
    int64_t *labels;
} toy_ds;

static int64_t toy_len(const em_dataset *d) { return ((const toy_ds *)d)->n; }
static em_status toy_get(const em_dataset *d, int64_t i, em_sample *out)
{
    const toy_ds *t = (const toy_ds *)d;
    *out = (em_sample){ .ids = t->ids + i * FEAT, .type_ids = NULL, .len = FEAT, .label = t->labels[i] };
    return EM_OK;
}
static void toy_free(em_dataset *d)
{
    toy_ds *t = (toy_ds *)d;
    free(t->ids), free(t->labels), free(t);
}
static const em_dataset_ops toy_ops = { toy_len, toy_get, toy_free };

/* n samples with ids and labels uninitialized: the caller fills them. Free
 * with em_dataset_free(&ds->base). */
static toy_ds *toy_ds_alloc(int64_t n)
{
    toy_ds *t = calloc(1, sizeof *t);
    t->base.ops = &toy_ops;
    t->n = n;
    t->ids = malloc(sizeof(int32_t) * (size_t)(n * FEAT + 1));
    t->labels = malloc(sizeof(int64_t) * (size_t)(n + 1));
    return t;
}

/* The samples [from, from + n) as one batch: ids [n, FEAT] i64, labels [n];
 * both belong to the current scope. */
static void toy_rows(const toy_ds *ds, int64_t from, int64_t n, em_tensor **ids, em_tensor **labels)
{
    int64_t *v = malloc(sizeof(int64_t) * (size_t)(n * FEAT));
    for (int64_t i = 0; i < n * FEAT; i++) v[i] = ds->ids[from * FEAT + i];
    *ids = em_from_data(v, 2, (int64_t[]){n, FEAT}, EM_I64);
    *labels = em_from_data(ds->labels + from, 1, (int64_t[]){n}, EM_I64);
    free(v);
}

/* ---- the model ------------------------------------------------------------------- */
typedef struct toy_model {
    em_module base;
    em_nn_linear *l1, *l2;
    em_nn_dropout *drop;
} toy_model;

static toy_model *toy_model_new(double p_drop)
{
    toy_model *m = calloc(1, sizeof *m);
    em_module_init(&m->base, "Toy", NULL);
    m->l1 = (em_nn_linear *)em_module_register_child(&m->base, "l1", &em_nn_linear_new(FEAT, TOY_HIDDEN, NULL)->base);
    m->drop = (em_nn_dropout *)em_module_register_child(&m->base, "drop", &em_nn_dropout_new(p_drop)->base);
    m->l2 = (em_nn_linear *)em_module_register_child(&m->base, "l2", &em_nn_linear_new(TOY_HIDDEN, 2, NULL)->base);
    return m;
}

/* Mean cross-entropy of the batch (owned by the current scope). */
static em_tensor *toy_loss(toy_model *m, em_tensor *input_ids, em_tensor *labels)
{
    em_tensor *x = em_mul_scalar(em_to_dtype(input_ids, EM_F32), 0.1);
    em_tensor *h = em_nn_dropout_forward(m->drop, em_tanh(em_nn_linear_forward(m->l1, x)));
    return em_cross_entropy_loss(em_nn_linear_forward(m->l2, h), labels, NULL);
}

/* Its parameters, a malloc'd array of borrowed pointers (free() it). */
static em_tensor **params_of(toy_model *m, int *n) { return em_module_parameters(&m->base, n); }

/* All parameters as one malloc'd f32 array (the flat buffer's contents). */
static float *snapshot(toy_model *m, int64_t *count)
{
    em_tensor *flat = em_module_flat_params(&m->base, EM_F32);
    int64_t n = flat ? em_numel(flat) : 0;
    float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (n) memcpy(out, em_data_ptr(flat), sizeof(float) * (size_t)n);
    *count = n;
    return out;
}

/* ---- one prepared training run (each test builds it: its own run_new) ---------------- */
typedef struct toy_run {
    toy_ds *ds;
    toy_model *m;
    em_tensor **p;
    int n;
    em_optimizer *opt;
    em_scheduler *sched;
    em_dataloader *dl;
    em_accelerator *acc;
} toy_run;

/* Frees what r holds (a member may be NULL). */
static void toy_run_free(toy_run *r)
{
    em_accelerator_free(r->acc);
    em_dataloader_free(r->dl);
    em_scheduler_free(r->sched);
    em_optimizer_free(r->opt);
    free(r->p);
    if (r->m) em_module_free(&r->m->base);
    if (r->ds) em_dataset_free(&r->ds->base);
}

/* One micro-step of r on loss through the Accelerator: backward, clipping to
 * max_norm on sync steps (when max_norm > 0), the optimizer step, the
 * scheduler's (when r->sched), zero_grad. Returns the first status of
 * backward and the optimizer step that was not EM_OK, else EM_OK. */
static em_status toy_run_step(toy_run *r, em_tensor *loss, double max_norm)
{
    em_status first = em_accelerator_backward(r->acc, loss);
    if (max_norm > 0 && em_accelerator_sync_gradients(r->acc))
        em_accelerator_clip_grad_norm(r->acc, &r->m->base, max_norm);
    em_status s = em_accelerator_optimizer_step(r->acc, r->opt);
    if (r->sched) em_accelerator_scheduler_step(r->acc, r->sched);
    em_accelerator_optimizer_zero_grad(r->acc, r->opt);
    return first != EM_OK ? first : s;
}

/* nsteps micro-steps (toy_run_step, clipping to norm 1) in accumulate
 * blocks, crossing epochs as needed (plain em_dataloader_next); the loss
 * inside EM_AUTOCAST when autocast. Returns the first status that was not
 * EM_OK (the steps go on), else EM_OK. */
static em_status toy_run_train(toy_run *r, int nsteps, bool autocast)
{
    em_status first = EM_OK;
    for (int done = 0; done < nsteps;) {
        em_scope_begin();
        em_batch b;
        if (em_dataloader_next(r->dl, &b)) {
            EM_ACCUMULATE(r->acc, &r->m->base) {
                em_tensor *loss = NULL;
                if (autocast) {
                    EM_AUTOCAST(r->acc) { loss = toy_loss(r->m, b.input_ids, b.labels); }
                } else {
                    loss = toy_loss(r->m, b.input_ids, b.labels);
                }
                em_status s = toy_run_step(r, loss, 1.0);
                if (first == EM_OK) first = s;
            }
            done++;
        }
        em_scope_end();
    }
    return first;
}

#endif
