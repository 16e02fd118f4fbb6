/* examples/toy_task.h — the small task and model that tutorial steps 2-5 share.
 *
 * The task: "which half of the vocabulary wins?" A sample is a sequence of 5,
 * 7, 9 or 11 token ids drawn from 1..15 (0 is padding); its label is 1 when
 * more of its tokens are in 1..7 than in 8..15, else 0. A bag-of-embeddings
 * model learns it in a few hundred steps on one core, so every step of the
 * tutorial runs in seconds, and the same sample stream feeds ember's real
 * DataLoader (data/data.h) exactly as the SST-2 sentences do in step 6.
 *
 * The model (tutorial step 2 explains it line by line):
 *
 *     ids [B,S] --embed--> [B,S,16] --mean over tokens--> [B,16]
 *               --fc1--> [B,32] --relu--> --fc2--> logits [B,2]
 *
 * Header-only (static functions) so that each example stays one program.
 */
#ifndef EMBER_EXAMPLES_TOY_TASK_H
#define EMBER_EXAMPLES_TOY_TASK_H

#include "ember.h"   /* the umbrella header: distributed.h included */

#include <stdint.h>
#include <stdlib.h>

enum { TOY_VOCAB = 16, TOY_MAX_LEN = 11, TOY_DIM = 16, TOY_HIDDEN = 32 };

/* ---- the data set ----------------------------------------------------------------
 * A data set is any struct that starts with em_dataset (data/data.h): the
 * DataLoader only calls ops->len and ops->get, which fills an em_sample whose
 * arrays must stay valid while the data set lives. Ours is generated once, in
 * memory, by a tiny LCG of its own (not ember's RNG), so that every rank of a
 * distributed run builds exactly the same samples whatever it did before. */
typedef struct toy_dataset {
    em_dataset base;   /* first member: (em_dataset *)&toy works */
    int64_t n;
    int32_t (*ids)[TOY_MAX_LEN];
    int32_t *len;
    int64_t *label;
} toy_dataset;

static int64_t toy_len(const em_dataset *ds) { return ((const toy_dataset *)ds)->n; }

static em_status toy_get(const em_dataset *ds, int64_t i, em_sample *out)
{
    const toy_dataset *t = (const toy_dataset *)ds;
    *out = (em_sample){.ids = t->ids[i], .type_ids = NULL, .len = t->len[i], .label = t->label[i]};
    return EM_OK;
}

static void toy_free(em_dataset *ds)
{
    toy_dataset *t = (toy_dataset *)ds;
    free(t->ids);
    free(t->len);
    free(t->label);
    free(t);
}

static const em_dataset_ops toy_ops = {.len = toy_len, .get = toy_get, .free = toy_free};

/* n samples from stream `seed`; NULL on OOM. Free with em_dataset_free. */
static em_dataset *toy_dataset_new(int64_t n, uint64_t seed)
{
    toy_dataset *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->base.ops = &toy_ops;
    t->n = n;
    t->ids = calloc((size_t)n, sizeof *t->ids);
    t->len = calloc((size_t)n, sizeof *t->len);
    t->label = calloc((size_t)n, sizeof *t->label);
    if (!t->ids || !t->len || !t->label) {
        toy_free(&t->base);
        return NULL;
    }
    uint64_t s = seed * 2862933555777941757ull + 3037000493ull;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int32_t len = 5 + 2 * (int32_t)((s >> 33) % 4);   /* 5, 7, 9 or 11: never a tie */
        int low = 0;
        for (int32_t k = 0; k < len; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            int32_t id = 1 + (int32_t)((s >> 33) % (TOY_VOCAB - 1));
            t->ids[i][k] = id;
            low += id < 8;
        }
        t->len[i] = len;
        t->label[i] = 2 * low > len;
    }
    return &t->base;
}

/* ---- the model: an em_module subclass -------------------------------------------
 * em_module comes FIRST, so a toy_model * is also an em_module *: every
 * em_module_* function (named_parameters, train, zero_grad, flatten, free)
 * works on it. Its layers are registered as children by name, which gives the
 * parameters dotted names ("fc1.weight") for checkpoints and decay rules; the
 * module tree owns them, and em_module_free frees the whole tree (our destroy
 * is NULL, so the struct itself is free()d: allocate it with calloc). */
typedef struct toy_model {
    em_module base;
    em_nn_embedding *embed;
    em_nn_linear *fc1, *fc2;
} toy_model;

static toy_model *toy_model_new(void)
{
    toy_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    em_module_init(&m->base, "ToyBagClassifier", NULL);
    m->embed = (em_nn_embedding *)em_module_register_child(
        &m->base, "embed",
        (em_module *)em_nn_embedding_new(TOY_VOCAB, TOY_DIM, &(em_nn_embedding_opts){.has_padding_idx = true}));
    m->fc1 = (em_nn_linear *)em_module_register_child(&m->base, "fc1",
                                                      (em_module *)em_nn_linear_new(TOY_DIM, TOY_HIDDEN, NULL));
    m->fc2 = (em_nn_linear *)em_module_register_child(&m->base, "fc2",
                                                      (em_module *)em_nn_linear_new(TOY_HIDDEN, 2, NULL));
    return m;
}

/* ids [B,S] i64 with 0 as padding, mask [B,S] (1 on tokens) -> logits [B,2].
 * Every result belongs to the caller's scope. The padding row of the
 * embedding is zero (padding_idx 0), so summing over S and dividing by the
 * token count is the mean over real tokens. */
static em_tensor *toy_model_forward(toy_model *m, em_tensor *ids, em_tensor *mask)
{
    em_tensor *e = em_nn_embedding_forward(m->embed, ids);                      /* [B,S,D] */
    em_tensor *count = em_sum(em_to_dtype(mask, EM_F32), 1, (int[]){1}, true); /* [B,1]   */
    em_tensor *bag = em_div(em_sum(e, 1, (int[]){1}, false), count);           /* [B,D]   */
    em_tensor *h = em_relu(em_nn_linear_forward(m->fc1, bag));
    return em_nn_linear_forward(m->fc2, h);
}

/* What steps 2, 3 and 5 free at the end (any may be NULL): the scheduler first
 * (it borrows the optimizer), the optimizer, the model, the two loaders and
 * the two data sets. An Accelerator never owns what it prepared: free it
 * before (em_accelerator_free), or let em_accelerator_free_all free it all. */
__attribute__((unused)) static void toy_free_all(em_scheduler *sched, em_optimizer *opt, toy_model *model,
                                                 em_dataloader *train_dl, em_dataloader *dev_dl, em_dataset *train,
                                                 em_dataset *dev)
{
    em_scheduler_free(sched);
    em_optimizer_free(opt);
    if (model) em_module_free(&model->base);
    em_dataloader_free(train_dl);
    em_dataloader_free(dev_dl);
    em_dataset_free(train);
    em_dataset_free(dev);
}

/* Fraction of rows of logits [B,2] whose argmax is the label; in the caller's scope. */
__attribute__((unused)) static double toy_accuracy(em_tensor *logits, em_tensor *labels)
{
    em_tensor *hit = em_to_dtype(em_eq(em_argmax(logits, 1, false), labels), EM_F32);
    return em_item(em_mean(hit, 0, NULL, false));
}

#endif
