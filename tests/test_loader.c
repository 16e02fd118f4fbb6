/* tests — collate and the DataLoader (data/collate.c, data/loader.c) on a
 * small in-memory dataset built here: padding, masks and labels checked
 * against the samples, the same order whatever num_workers, resume from a
 * saved state, skip_first_batches, end_of_dataloader, remainder, len, errors
 * from the dataset, OOM, and live bytes back to the baseline. */
#include "check_util.h"
#include "tensor/tensor_internal.h"   /* em__fail: a dataset reporting its own error */

#include <stdlib.h>
#include <string.h>

/* Sample i: len 1 + (i*7) % 13 (0 when i % 17 == 16), ids i*100 + j + 1,
 * type ids 1 on the second half (NULL when i % 5 == 0), label i. Dataset
 * index `fail_at` fails with EM_ERR_FORMAT (-1: never). */
#define MAXLEN 13
typedef struct mem_ds {
    em_dataset base;
    int64_t n, fail_at;
    int32_t *ids, *types;
} mem_ds;

static int32_t sample_len(int64_t i) { return i % 17 == 16 ? 0 : (int32_t)(1 + (i * 7) % 13); }

static int64_t mem_len(const em_dataset *ds) { return ((const mem_ds *)ds)->n; }
static em_status mem_get(const em_dataset *ds, int64_t i, em_sample *out)
{
    const mem_ds *m = (const mem_ds *)ds;
    if (i == m->fail_at) return em__fail(EM_ERR_FORMAT, "row %lld is corrupt", (long long)i);
    *out = (em_sample){ .ids = m->ids + i * MAXLEN, .type_ids = i % 5 ? m->types + i * MAXLEN : NULL,
                        .len = sample_len(i), .label = i };
    return EM_OK;
}
static void mem_free(em_dataset *ds)
{
    mem_ds *m = (mem_ds *)ds;
    free(m->ids);
    free(m->types);
    free(m);
}
static const em_dataset_ops mem_ops = { mem_len, mem_get, mem_free };

static mem_ds *mem_new(int64_t n)
{
    mem_ds *m = calloc(1, sizeof *m);
    m->base.ops = &mem_ops;
    m->n = n;
    m->fail_at = -1;
    m->ids = calloc((size_t)(n * MAXLEN + 1), sizeof(int32_t));
    m->types = calloc((size_t)(n * MAXLEN + 1), sizeof(int32_t));
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < MAXLEN; j++) {
            m->ids[i * MAXLEN + j] = (int32_t)(i * 100 + j + 1);
            m->types[i * MAXLEN + j] = j >= sample_len(i) / 2;
        }
    return m;
}

/* Checks batch b against samples `idx` (n of them), independently of collate. */
static void check_batch(const em_batch *b, const int64_t *idx, int64_t n, int64_t mult, int64_t pad_id)
{
    int64_t want_len = 0;
    for (int64_t r = 0; r < n; r++)
        if (sample_len(idx[r]) > want_len) want_len = sample_len(idx[r]);
    if (mult > 1) want_len = (want_len + mult - 1) / mult * mult;
    ck_assert_int_eq(b->n, n);
    ck_assert_int_eq(b->len, want_len);
    em_tensor *ts[3] = { b->input_ids, b->attention_mask, b->token_type_ids };
    for (int t = 0; t < 3; t++) {
        ck_assert_int_eq(ts[t]->dtype, EM_I64);
        ck_assert_int_eq(ts[t]->ndim, 2);
        ck_assert_int_eq(ts[t]->shape[0], n);
        ck_assert_int_eq(ts[t]->shape[1], want_len);
    }
    ck_assert_int_eq(b->labels->dtype, EM_I64);
    ck_assert_int_eq(b->labels->ndim, 1);
    ck_assert_int_eq(b->labels->shape[0], n);
    for (int64_t r = 0; r < n; r++) {
        int64_t i = idx[r], len = sample_len(i);
        ck_assert_int_eq((int64_t)em_get(b->labels, (int64_t[]){ r }), i);
        for (int64_t j = 0; j < want_len; j++) {
            int64_t at[2] = { r, j };
            int64_t id = (int64_t)em_get(b->input_ids, at), mask = (int64_t)em_get(b->attention_mask, at);
            int64_t type = (int64_t)em_get(b->token_type_ids, at);
            if (j < len) {
                ck_assert_int_eq(id, i * 100 + j + 1);
                ck_assert_int_eq(mask, 1);
                ck_assert_int_eq(type, i % 5 ? j >= len / 2 : 0);
            } else {
                ck_assert_int_eq(id, pad_id);
                ck_assert_int_eq(mask, 0);
                ck_assert_int_eq(type, 0);
            }
        }
    }
}

/* Runs `epochs` epochs from where dl stands, checking every batch against the
 * schedule, and records (epoch, batch, first label, sum of ids) per batch. */
typedef struct rec { int64_t epoch, k, first, sum, n; } rec;
static int run(em_dataloader *dl, int64_t n_data, const em_dataloader_opts *o, int epochs, rec *out, int max_out)
{
    int count = 0;
    for (int e = 0; e < epochs; e++) {
        em_loader_state st = em_dataloader_state(dl);
        em_batch_schedule s;
        ck_assert_int_eq(em_batch_schedule_make(n_data, o, st.epoch, &s), EM_OK);
        int64_t k = st.batch;
        em_batch b;
        for (;;) {
            em_scope_begin();   /* one scope per batch, as a training loop */
            if (!em_dataloader_next(dl, &b)) {
                em_scope_end();
                break;
            }
            ck_assert_int_lt(k, s.n_batches);
            check_batch(&b, s.indices + s.offsets[k], s.offsets[k + 1] - s.offsets[k], o->pad_to_multiple_of,
                        o->pad_id);
            ck_assert_int_eq(em_dataloader_end_of_dataloader(dl), k == s.n_batches - 1);
            ck_assert_int_eq(em_dataloader_state(dl).batch, k + 1);
            int64_t sum = 0;
            int64_t *ids = em_data_ptr(b.input_ids);
            for (int64_t x = 0; x < b.n * b.len; x++) sum += ids[x];
            ck_assert_int_lt(count, max_out);
            out[count++] = (rec){ st.epoch, k, (int64_t)em_get(b.labels, (int64_t[]){ 0 }), sum, b.n };
            k++;
            em_scope_end();
        }
        ck_assert_int_eq(em_dataloader_status(dl), EM_OK);
        ck_assert_int_eq(k, s.n_batches);
        ck_assert(!em_dataloader_end_of_dataloader(dl));
        ck_assert_ptr_null(b.input_ids);
        ck_assert_int_eq(em_dataloader_state(dl).epoch, st.epoch + 1);
        ck_assert_int_eq(em_dataloader_state(dl).batch, 0);
        em_batch_schedule_free(&s);
    }
    return count;
}

START_TEST(test_collate)
{
    int64_t live = tu_live_bytes();
    mem_ds *m = mem_new(40);
    int64_t idx[5] = { 3, 16, 7, 0, 33 };   /* 16 and 33 are empty samples; 0 has no type ids */
    em_sample s[5];
    for (int i = 0; i < 5; i++) ck_assert_int_eq(em_dataset_get(&m->base, idx[i], &s[i]), EM_OK);
    EM_SCOPE {
        em_batch b;
        ck_assert_int_eq(em_collate(s, 5, NULL, &b), EM_OK);
        check_batch(&b, idx, 5, 0, 0);
        ck_assert_int_eq(em_collate(s, 5, &(em_collate_opts){ .pad_to_multiple_of = 8, .pad_id = 7 }, &b), EM_OK);
        check_batch(&b, idx, 5, 8, 7);
        ck_assert_int_eq(b.len, 16);
        /* all empty: length 0 stays 0 whatever the multiple */
        ck_assert_int_eq(em_collate(&s[1], 1, &(em_collate_opts){ .pad_to_multiple_of = 8 }, &b), EM_OK);
        ck_assert_int_eq(b.len, 0);
        ck_assert_int_eq(em_collate(s, 0, NULL, &b), EM_OK);
        ck_assert_int_eq(b.n, 0);
        ck_assert_int_eq(b.labels->shape[0], 0);
    }
    /* outside any scope the caller owns the batch */
    em_batch b;
    ck_assert_int_eq(em_collate(s, 5, NULL, &b), EM_OK);
    ck_assert_int_eq(b.input_ids->refcount, 1);
    ck_assert_int_gt(tu_live_bytes(), live);
    em_batch_release(&b);
    ck_assert_ptr_null(b.input_ids);
    ck_assert_int_eq(tu_live_bytes(), live);
    em_dataset_free(&m->base);
}
END_TEST

/* Same order and contents whatever the number of workers, for a sharded,
 * shuffled loader, across epochs. */
START_TEST(test_workers_same_order)
{
    mem_ds *m = mem_new(103);
    em_dataloader_opts o = { .batch_size = 4, .shuffle = true, .seed = 5, .num_processes = 3, .process_index = 1,
                             .pad_to_multiple_of = 4, .pad_id = 9 };
    rec ref[64], got[64];
    int nref = 0;
    int workers[] = { 0, 1, 3, 2 }, prefetch[] = { 0, 0, 1, 5 };
    em_scope_begin();
    for (int w = 0; w < 4; w++) {
        o.num_workers = workers[w];
        o.prefetch_factor = prefetch[w];
        em_dataloader *dl;
        ck_assert_int_eq(em_dataloader_new(&m->base, &o, &dl), EM_OK);
        ck_assert_int_eq(em_dataloader_len(dl), 9);   /* 26 global batches of 4 over 3 ranks, even: ceil */
        int n = run(dl, 103, &o, 3, w ? got : ref, 64);
        ck_assert_int_eq(n, 27);
        if (!w) nref = n;
        else for (int i = 0; i < n; i++) ck_assert_mem_eq(&got[i], &ref[i], sizeof(rec));
        em_dataloader_free(dl);
    }
    em_scope_end();
    ck_assert_int_eq(nref, 27);
    ck_assert(ref[0].first != ref[9].first || ref[0].sum != ref[9].sum);   /* epochs reshuffle */
    em_dataset_free(&m->base);
}
END_TEST

/* A run interrupted after k batches, saved, and resumed in a new loader (with
 * another worker count) yields exactly the uninterrupted run's batches. */
START_TEST(test_resume)
{
    mem_ds *m = mem_new(57);
    em_dataloader_opts o = { .batch_size = 5, .shuffle = true, .seed = 11, .num_processes = 2, .process_index = 0,
                             .drop_last = true };
    rec ref[64], got[64];
    em_scope_begin();
    em_dataloader *dl;
    ck_assert_int_eq(em_dataloader_new(&m->base, &o, &dl), EM_OK);
    ck_assert_int_eq(em_dataloader_len(dl), 5);   /* 11 full batches, rounds of 2 */
    ck_assert_int_eq(em_dataloader_remainder(dl), -1);
    int nref = run(dl, 57, &o, 3, ref, 64);
    ck_assert_int_eq(nref, 15);
    em_dataloader_free(dl);

    for (int stop = 0; stop <= 15; stop++) {
        o.num_workers = stop % 3;
        ck_assert_int_eq(em_dataloader_new(&m->base, &o, &dl), EM_OK);
        em_batch b;
        for (int i = 0; i < stop; i++) {   /* the interrupted run */
            if (!em_dataloader_next(dl, &b)) ck_assert(em_dataloader_next(dl, &b));   /* epoch boundary */
        }
        em_loader_state saved = em_dataloader_state(dl);
        em_dataloader_free(dl);

        o.num_workers = 2 - stop % 3;
        ck_assert_int_eq(em_dataloader_new(&m->base, &o, &dl), EM_OK);
        ck_assert_int_eq(em_dataloader_load_state(dl, saved), EM_OK);
        /* the rest of the saved epoch, then the following ones up to epoch 2 */
        int n = run(dl, 57, &o, 3 - (int)saved.epoch, got, 64);
        ck_assert_int_eq(n, 15 - stop);
        for (int i = 0; i < n; i++) ck_assert_mem_eq(&got[i], &ref[stop + i], sizeof(rec));
        em_dataloader_free(dl);
        em_scope_end();
        em_scope_begin();
    }
    em_scope_end();
    /* a state that does not fit */
    ck_assert_int_eq(em_dataloader_new(&m->base, &o, &dl), EM_OK);
    ck_assert_int_eq(em_dataloader_load_state(dl, (em_loader_state){ 0, 6 }), EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "5 batches per epoch"));
    ck_assert_int_eq(em_dataloader_load_state(dl, (em_loader_state){ -1, 0 }), EM_ERR_INVALID);
    em_dataloader_free(dl);
    em_dataset_free(&m->base);
}
END_TEST

START_TEST(test_skip_and_epochs)
{
    mem_ds *m = mem_new(30);
    em_dataloader_opts o = { .batch_size = 4 };   /* one process: 8 batches, the last of 2 */
    for (int nw = 0; nw <= 2; nw++) {
        o.num_workers = nw;
        em_dataloader *dl;
        ck_assert_int_eq(em_dataloader_new(&m->base, &o, &dl), EM_OK);
        ck_assert_int_eq(em_dataloader_len(dl), 8);
        ck_assert_int_eq(em_dataloader_remainder(dl), 2);
        em_batch b;
        EM_SCOPE {
            /* skip 3: the first batch is batch 3 */
            em_dataloader_skip_first_batches(dl, 3);
            ck_assert(em_dataloader_next(dl, &b));
            ck_assert_int_eq((int64_t)em_get(b.labels, (int64_t[]){ 0 }), 12);
            /* skip again mid-epoch, backwards: a seek from the epoch's start */
            em_dataloader_skip_first_batches(dl, 1);
            ck_assert(em_dataloader_next(dl, &b));
            ck_assert_int_eq((int64_t)em_get(b.labels, (int64_t[]){ 0 }), 4);
            /* skip everything: the epoch ends at the next call */
            em_dataloader_skip_first_batches(dl, 100);
            ck_assert(!em_dataloader_next(dl, &b));
            ck_assert_int_eq(em_dataloader_state(dl).epoch, 1);
            /* a full epoch: the last batch has 2 rows and ends the loader */
            int k = 0;
            while (em_dataloader_next(dl, &b)) {
                ck_assert_int_eq(b.n, k == 7 ? 2 : 4);
                ck_assert_int_eq((int64_t)em_get(b.labels, (int64_t[]){ 0 }), 4 * k);
                ck_assert_int_eq(em_dataloader_end_of_dataloader(dl), k == 7);
                k++;
            }
            ck_assert_int_eq(k, 8);
            /* set_epoch restarts at batch 0 of that epoch */
            ck_assert(em_dataloader_next(dl, &b));
            ck_assert(em_dataloader_next(dl, &b));
            em_dataloader_set_epoch(dl, 7);
            ck_assert_int_eq(em_dataloader_state(dl).epoch, 7);
            ck_assert_int_eq(em_dataloader_state(dl).batch, 0);
            ck_assert(em_dataloader_next(dl, &b));
            ck_assert_int_eq((int64_t)em_get(b.labels, (int64_t[]){ 0 }), 0);
        }
        em_dataloader_free(dl);   /* with batches loaded ahead: they are dropped */
    }
    em_dataset_free(&m->base);
}
END_TEST

/* An empty dataset and a single-batch epoch. */
START_TEST(test_edges)
{
    mem_ds *m = mem_new(0);
    em_dataloader *dl;
    em_batch b;
    ck_assert_int_eq(em_dataloader_new(&m->base, &(em_dataloader_opts){ .batch_size = 3, .num_workers = 2 }, &dl), EM_OK);
    ck_assert_int_eq(em_dataloader_len(dl), 0);
    ck_assert_int_eq(em_dataloader_remainder(dl), 0);
    ck_assert(!em_dataloader_next(dl, &b));
    ck_assert(!em_dataloader_next(dl, &b));
    ck_assert_int_eq(em_dataloader_state(dl).epoch, 2);
    em_dataloader_free(dl);
    em_dataset_free(&m->base);

    m = mem_new(3);
    ck_assert_int_eq(em_dataloader_new(&m->base, &(em_dataloader_opts){ .batch_size = 8, .num_processes = 2,
                                                                        .process_index = 1, .num_workers = 1 }, &dl), EM_OK);
    ck_assert_int_eq(em_dataloader_len(dl), 1);
    ck_assert_int_eq(em_dataloader_remainder(dl), 3);
    EM_SCOPE {
        ck_assert(em_dataloader_next(dl, &b));
        ck_assert(em_dataloader_end_of_dataloader(dl));
        /* rank 1 of 2, batch 8 over 3 samples: rank 0 got 0 1 2 and the padding 0 1 2 0 1;
         * rank 1 continues the loop-back (as tests/fixtures/shard_grid.txt) */
        int64_t want[8] = { 2, 0, 1, 2, 0, 1, 2, 0 };
        check_batch(&b, want, 8, 0, 0);
    }
    em_dataloader_free(dl);
    em_dataset_free(&m->base);
}
END_TEST

/* A dataset error surfaces from next with its message; the position stays,
 * so a retry fails again, and skipping past it goes on. */
START_TEST(test_dataset_error)
{
    mem_ds *m = mem_new(20);
    m->fail_at = 9;
    for (int nw = 0; nw <= 3; nw += 3) {
        em_dataloader *dl;
        ck_assert_int_eq(em_dataloader_new(&m->base, &(em_dataloader_opts){ .batch_size = 4, .num_workers = nw }, &dl), EM_OK);
        em_batch b;
        EM_SCOPE {
            ck_assert(em_dataloader_next(dl, &b));
            ck_assert(em_dataloader_next(dl, &b));
            ck_assert(!em_dataloader_next(dl, &b));   /* batch 2 holds index 9 */
            ck_assert_int_eq(em_dataloader_status(dl), EM_ERR_FORMAT);
            ck_assert_ptr_null(b.input_ids);
            ck_assert_ptr_nonnull(strstr(em_last_error(), "dataset index 9"));
            ck_assert_int_eq(em_dataloader_state(dl).batch, 2);
            ck_assert(!em_dataloader_next(dl, &b));
            ck_assert_int_eq(em_dataloader_status(dl), EM_ERR_FORMAT);
            em_dataloader_skip_first_batches(dl, 3);
            ck_assert(em_dataloader_next(dl, &b));
            ck_assert_int_eq(em_dataloader_status(dl), EM_OK);
            ck_assert_int_eq((int64_t)em_get(b.labels, (int64_t[]){ 0 }), 12);
        }
        em_dataloader_free(dl);
    }
    em_dataset_free(&m->base);
}
END_TEST

/* Fail the n-th allocation: creation and iteration fail cleanly, never crash,
 * and nothing leaks. */
START_TEST(test_oom)
{
    mem_ds *m = mem_new(23);
    int failures = 0;
    for (int nw = 0; nw <= 2; nw += 2)
        for (int nth = 1; nth <= 60; nth++) {
            em_alloc_fail_after(nth, false);
            em_dataloader *dl = NULL;
            em_status st = em_dataloader_new(&m->base, &(em_dataloader_opts){ .batch_size = 4, .shuffle = true,
                                                                                .num_workers = nw }, &dl);
            int got = 0;
            if (st == EM_OK) {
                em_batch b;
                for (int tries = 0; tries < 20 && got < 6; tries++) EM_SCOPE {
                    if (em_dataloader_next(dl, &b)) got++;
                    else if (em_dataloader_status(dl) != EM_OK) {
                        ck_assert_int_eq(em_dataloader_status(dl), EM_ERR_OOM);
                        failures++;
                    }
                }
                ck_assert_int_eq(got, 6);   /* the one-shot failure was retried */
                em_dataloader_free(dl);
            } else {
                ck_assert_int_eq(st, EM_ERR_OOM);
                ck_assert_ptr_null(dl);
                failures++;
            }
            em_alloc_fail_after(0, false);
        }
    ck_assert_int_gt(failures, 20);
    em_dataset_free(&m->base);
}
END_TEST

/* A dataset of the user's own that misbehaves at one index (the test's mode):
 * 0 a length without ids, 1 a failure without a message, 2 a dense x of
 * another shape. Each is refused by the loader with the dataset index. */
static int bad_mode;
static const int32_t bad_ids[3] = {5, 6, 7};
static const float bad_x[3] = {1, 2, 3};
static const int64_t shape2[1] = {2}, shape3[1] = {3};
static em_status bad_get(void *user, int64_t index, em_sample *out)
{
    (void)user;
    *out = (em_sample){.ids = bad_ids, .len = 3, .label = index};
    if (bad_mode == 2) {
        out->x = bad_x, out->x_dtype = EM_F32, out->x_ndim = 1, out->x_shape = index == 7 ? shape3 : shape2;
        return EM_OK;
    }
    if (index != 2) return EM_OK;
    if (bad_mode == 0) out->ids = NULL;
    return bad_mode == 1 ? EM_ERR_IO : EM_OK;
}

START_TEST(test_own_dataset_errors_name_the_index)
{
    for (bad_mode = 0; bad_mode < 3; bad_mode++)
        for (int nw = 0; nw <= 2; nw += 2) {
            em_dataset *ds;
            ck_assert_int_eq(em_callback_dataset_new(10, bad_get, NULL, NULL, &ds), EM_OK);
            em_dataloader *dl;
            /* an earlier, unrelated failure: its message must not be taken for the dataset's */
            ck_assert_int_ne(em_dataloader_new(ds, &(em_dataloader_opts){.batch_size = -1}, &dl), EM_OK);
            ck_assert_int_eq(em_dataloader_new(ds, &(em_dataloader_opts){.batch_size = 10, .num_workers = nw,
                                                                           .shuffle = bad_mode == 2}, &dl), EM_OK);
            em_batch b;
            EM_SCOPE { ck_assert(!em_dataloader_next(dl, &b)); }
            const char *want[3] = {"dataset index 2: the sample has a length but no ids",
                                   "dataset index 2: the dataset's get", "dataset index: "};
            ck_assert_msg(strstr(em_last_error(), want[bad_mode]) && !strstr(em_last_error(), "batch_size must"),
                          "mode %d, %d workers: %s", bad_mode, nw, em_last_error());
            if (bad_mode == 2) ck_assert_msg(strstr(em_last_error(), "->7"), "%s", em_last_error());
            em_dataloader_free(dl);
            em_dataset_free(ds);
        }
}
END_TEST

/* A batch far larger than the dataset needs no scratch of that size; one past
 * what any memory holds is refused (its size wrapped: a heap overflow). */
START_TEST(test_huge_batch_sizes)
{
    mem_ds *m = mem_new(10);
    em_dataloader *dl;
    ck_assert_int_eq(em_dataloader_new(&m->base, &(em_dataloader_opts){.batch_size = 1000000000, .num_workers = 2}, &dl),
                     EM_OK);
    em_batch b;
    EM_SCOPE {
        ck_assert(em_dataloader_next(dl, &b));
        ck_assert_int_eq(b.input_ids->shape[0], 10);
    }
    em_dataloader_free(dl);
    ck_assert_int_eq(em_dataloader_new(&m->base, &(em_dataloader_opts){.batch_size = ((int64_t)1 << 60) + 1}, &dl),
                     EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "more than 2^40"), "%s", em_last_error());
    em_dataset_free(&m->base);
}
END_TEST

/* A dataset of the user's whose ops table lacks get: a misuse message, not a crash. */
static const em_dataset_ops no_get_ops = {0};
START_TEST(test_misuse_ops_without_get)
{
    tu_expect_misuse("the dataset's ops table has no len");
    em_dataset ds = {.ops = &no_get_ops};
    em_dataloader *dl;
    em_dataloader_new(&ds, NULL, &dl);
}
END_TEST

START_TEST(test_misuse_null_dataset)
{
    tu_expect_misuse("the dataset is NULL");
    em_dataloader *dl;
    em_dataloader_new(NULL, NULL, &dl);
}
END_TEST

START_TEST(test_misuse_negative_skip)
{
    mem_ds *m = mem_new(4);
    em_dataloader *dl;
    em_dataloader_new(&m->base, NULL, &dl);
    tu_expect_misuse("cannot skip -1 batches");
    em_dataloader_skip_first_batches(dl, -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loader");
    tu_add_tests(tu_no_leaks(tu_case(s, "core", 120)), test_collate, test_workers_same_order, test_resume,
                 test_skip_and_epochs, test_edges, test_dataset_error, test_oom);
    tu_add_tests(tu_case(s, "own datasets", 120), test_own_dataset_errors_name_the_index, test_huge_batch_sizes);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), test_misuse_null_dataset, test_misuse_negative_skip,
                        test_misuse_ops_without_get);
    return tu_run_suite(s);
}
