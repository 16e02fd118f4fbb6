/* ember tests — the toy classifier the Accelerator tests share (test_accelerator.c,
 * test_accelerator_mpi.c): FEAT token ids per sample -> Linear(FEAT, TOY_HIDDEN)
 * -> tanh -> Dropout -> Linear(TOY_HIDDEN, 2), cross-entropy. Define TOY_HIDDEN
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

#endif
