/* tests — datasets of dense rows (data/dense.c) through collate and the
 * DataLoader: em_tensor_dataset_new (features and targets of any dtype;
 * integer targets also become labels) and em_callback_dataset_new (a get
 * callback, with worker threads), shuffling covering every row once, the
 * mismatch error naming the samples, and live bytes back to the baseline. */
#include "check_util.h"
#include "tensor/tensor_internal.h"   /* em__fail: a callback reporting its own error */

#include <stdlib.h>
#include <string.h>

START_TEST(tensor_dataset_batches_rows_and_labels)
{
    int64_t base = tu_live_bytes();
    em_tensor *a = em_arange(0, 30, 1, EM_F32, EM_CPU), *x = em_reshape(a, 2, (int64_t[]){10, 3});
    em_release(a);   /* top level: ours to release; the view keeps the storage */
    em_tensor *y = em_arange(100, 110, 1, EM_I64, EM_CPU);
    em_dataset *ds;
    ck_assert_int_eq(em_tensor_dataset_new(x, y, &ds), EM_OK);
    em_release(x), em_release(y);   /* the dataset keeps its own copies */
    ck_assert_int_eq(em_dataset_len(ds), 10);
    em_dataloader *dl;
    ck_assert_int_eq(em_dataloader_new(ds, &(em_dataloader_opts){.batch_size = 4}, &dl), EM_OK);
    int k = 0;
    for (em_batch b; ; k++) {
        bool got = false;
        EM_SCOPE {
            got = em_dataloader_next(dl, &b);
            if (got) {
                int64_t n = k < 2 ? 4 : 2;
                ck_assert_ptr_null(b.input_ids);   /* no text */
                ck_assert_int_eq(b.x->ndim, 2);
                ck_assert_int_eq(b.x->shape[0], n);
                ck_assert_int_eq(b.x->shape[1], 3);
                ck_assert_int_eq(b.x->dtype, EM_F32);
                ck_assert_int_eq(b.y->ndim, 1);
                ck_assert_int_eq(b.y->dtype, EM_I64);
                for (int64_t i = 0; i < n; i++) {
                    int64_t row = 4 * k + i;
                    ck_assert_double_eq(em_get(b.x, (int64_t[]){i, 2}), (double)(3 * row + 2));
                    ck_assert_double_eq(em_get(b.y, (int64_t[]){i}), (double)(100 + row));
                    ck_assert_double_eq(em_get(b.labels, (int64_t[]){i}), (double)(100 + row));
                }
            }
        }
        if (!got) break;
    }
    ck_assert_int_eq(k, 3);
    ck_assert_int_eq(em_dataloader_status(dl), EM_OK);
    em_dataloader_free(dl);
    em_dataset_free(ds);
    /* a float target of two values per row: y [n, 2], labels -1 */
    EM_SCOPE {
        em_tensor *xf = em_ones(EM_SHAPE(5, 2, 2), EM_F64, EM_CPU), *yf = em_zeros(EM_SHAPE(5, 2), EM_F32, EM_CPU);
        ck_assert_int_eq(em_tensor_dataset_new(xf, yf, &ds), EM_OK);
        em_sample s[2];
        em_dataset_get(ds, 0, &s[0]);
        em_dataset_get(ds, 4, &s[1]);
        em_batch b;
        ck_assert_int_eq(em_collate(s, 2, NULL, &b), EM_OK);
        ck_assert_int_eq(b.x->ndim, 3);
        ck_assert_int_eq(b.x->shape[2], 2);
        ck_assert_int_eq(b.y->shape[1], 2);
        ck_assert_double_eq(em_get(b.labels, (int64_t[]){1}), -1.0);
        em_dataset_free(ds);
    }
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

/* sample i: x = [i, 2i] (f32), no target, label i % 3; index 13 fails when asked to */
typedef struct cb_user {
    float rows[40][2];
    int64_t labels[40];
    int fail_at;
    int64_t bad_shape_at;
    int freed;
} cb_user;

static const int64_t two[1] = {2}, three[1] = {3};

static em_status cb_get(void *u, int64_t i, em_sample *out)
{
    cb_user *c = u;
    if (i == c->fail_at) return em__fail(EM_ERR_FORMAT, "row %lld of my data is corrupt", (long long)i);
    out->x = c->rows[i];
    out->x_ndim = 1;
    out->x_shape = i == c->bad_shape_at ? three : two;
    out->x_dtype = EM_F32;
    out->label = c->labels[i];
    return EM_OK;
}

static void cb_free(void *u) { ((cb_user *)u)->freed++; }

START_TEST(callback_dataset_with_workers_covers_every_row)
{
    int64_t base = tu_live_bytes();
    cb_user c = {.fail_at = -1, .bad_shape_at = -1};
    for (int i = 0; i < 40; i++) c.rows[i][0] = (float)i, c.rows[i][1] = 2.0f * (float)i, c.labels[i] = i % 3;
    em_dataset *ds;
    ck_assert_int_eq(em_callback_dataset_new(40, cb_get, &c, cb_free, &ds), EM_OK);
    em_dataloader *dl;
    ck_assert_int_eq(em_dataloader_new(ds, &(em_dataloader_opts){.batch_size = 6, .shuffle = true, .num_workers = 2},
                                       &dl),
                     EM_OK);
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[40] = {0}, rows = 0;
        for (;;) {
            bool got = false;
            EM_SCOPE {
                em_batch b;
                got = em_dataloader_next(dl, &b);
                if (got) {
                    ck_assert_ptr_null(b.y);
                    for (int64_t i = 0; i < b.n; i++) {
                        int r = (int)em_get(b.x, (int64_t[]){i, 0});
                        ck_assert_double_eq(em_get(b.x, (int64_t[]){i, 1}), 2.0 * r);
                        ck_assert_double_eq(em_get(b.labels, (int64_t[]){i}), (double)(r % 3));
                        seen[r]++;
                        rows++;
                    }
                }
            }
            if (!got) break;
        }
        ck_assert_int_eq(rows, 40);
        for (int i = 0; i < 40; i++) ck_assert_int_eq(seen[i], 1);
    }
    em_dataloader_free(dl);
    em_dataset_free(ds);
    ck_assert_int_eq(c.freed, 1);
    /* owns_dataset: the loader frees it (a failed em_dataloader_new would not) */
    ck_assert_int_eq(em_callback_dataset_new(40, cb_get, &c, cb_free, &ds), EM_OK);
    ck_assert_int_eq(em_dataloader_new(ds, &(em_dataloader_opts){.batch_size = 6, .owns_dataset = true}, &dl), EM_OK);
    em_dataloader_free(dl);
    ck_assert_int_eq(c.freed, 2);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(errors_name_the_row_and_the_samples)
{
    cb_user c = {.fail_at = 13, .bad_shape_at = -1};
    em_dataset *ds;
    ck_assert_int_eq(em_callback_dataset_new(20, cb_get, &c, NULL, &ds), EM_OK);
    em_dataloader *dl;
    ck_assert_int_eq(em_dataloader_new(ds, &(em_dataloader_opts){.batch_size = 5}, &dl), EM_OK);
    int got = 0;
    EM_SCOPE {
        em_batch b;
        while (em_dataloader_next(dl, &b)) got++;
    }
    ck_assert_int_eq(got, 2);   /* batch 2 holds row 13 */
    ck_assert_int_eq(em_dataloader_status(dl), EM_ERR_FORMAT);
    ck_assert_msg(strstr(em_last_error(), "dataset index 13") && strstr(em_last_error(), "row 13 of my data is corrupt"),
                  "%s", em_last_error());
    em_dataloader_free(dl);
    em_dataset_free(ds);
    /* one sample of another shape: collate names both */
    c.fail_at = -1, c.bad_shape_at = 3;
    ck_assert_int_eq(em_callback_dataset_new(20, cb_get, &c, NULL, &ds), EM_OK);
    em_sample s[5];
    for (int i = 0; i < 5; i++) em_dataset_get(ds, i, &s[i]);
    em_batch b;
    ck_assert_int_eq(em_collate(s, 5, NULL, &b), EM_ERR_INVALID);
    ck_assert_msg(strstr(em_last_error(), "sample 3's x (float32 [3]) differs from sample 0's (float32 [2])"), "%s",
                  em_last_error());
    ck_assert_ptr_null(b.x);
    em_dataset_free(ds);
}
END_TEST

START_TEST(misuse_rows_differ)
{
    tu_expect_misuse("em_tensor_dataset_new: features [4,2] and targets [3] have different numbers of rows");
    em_dataset *ds;
    em_tensor_dataset_new(em_zeros(EM_SHAPE(4, 2), EM_F32, EM_CPU), em_zeros(EM_SHAPE(3), EM_I64, EM_CPU), &ds);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dense");
    tu_add_tests(tu_case(s, "dense", 0), tensor_dataset_batches_rows_and_labels,
                 callback_dataset_with_workers_covers_every_row, errors_name_the_row_and_the_samples);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_rows_differ);
    return tu_run_suite(s);
}
