/* tests — the batch schedule (data/sampler.c): Accelerate's own
 * BatchSamplerShard output (tests/fixtures/shard_grid.txt, made by
 * tools/make-shard-fixture.py) compared grid point by grid point, then
 * property tests over a wider grid, with and without shuffling. */
#include "check_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A dataset of n empty samples: the loader's len/remainder need one. */
typedef struct { em_dataset base; int64_t n; } empty_ds;
static int64_t empty_len(const em_dataset *ds) { return ((const empty_ds *)ds)->n; }
static em_status empty_get(const em_dataset *ds, int64_t i, em_sample *out)
{
    *out = (em_sample){ .label = i };
    return EM_OK;
}
static void empty_free(em_dataset *ds) { (void)ds; }
static const em_dataset_ops empty_ops = { empty_len, empty_get, empty_free };

static em_dataloader_opts grid_opts(int64_t bs, int P, int rank, int dl, int even, int split)
{
    return (em_dataloader_opts){ .batch_size = bs, .drop_last = dl, .num_processes = P, .process_index = rank,
                                 .split_batches = split, .even_batches = even ? EM_TOK_ON : EM_TOK_OFF };
}

/* ---- the fixture ---------------------------------------------------------- */
START_TEST(test_fixture_grid)
{
    const char *path = tu_fixture_path("shard_grid.txt");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f, "cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    int n_rank_lines = 0, n_errors = 0, n_overcount = 0;
    while (getline(&line, &cap, f) > 0) {
        if (line[0] == '#') continue;
        char *p = line + 2;
        long long v[10] = {0};
        int nv = line[0] == 'R' ? 10 : 6;
        for (int i = 0; i < nv; i++) v[i] = strtoll(p, &p, 10);
        int64_t n = v[0], bs = v[1];
        int P = (int)v[2], dl = (int)v[3], even = (int)v[4], split = (int)v[5];
        if (line[0] == 'E') {   /* Accelerate refused: so must ember */
            em_dataloader_opts o = grid_opts(bs, P, 0, dl, even, split);
            em_batch_schedule s;
            ck_assert_int_eq(em_batch_schedule_make(n, &o, 0, &s), EM_ERR_INVALID);
            ck_assert_ptr_nonnull(strstr(em_last_error(), "round multiple"));
            n_errors++;
            continue;
        }
        ck_assert_int_eq(line[0], 'R');
        int rank = (int)v[6];
        long long acc_len = v[7], rem = v[8], nb = v[9];
        em_dataloader_opts o = grid_opts(bs, P, rank, dl, even, split);
        em_batch_schedule s;
        ck_assert_int_eq(em_batch_schedule_make(n, &o, 0, &s), EM_OK);
        char where[96];
        snprintf(where, sizeof where, "N=%lld bs=%lld P=%d drop_last=%d even=%d split=%d rank=%d", (long long)n,
                 (long long)bs, P, dl, even, split, rank);
        ck_assert_msg(s.n_batches == nb, "%s: %lld batches, Accelerate %lld", where, (long long)s.n_batches, nb);
        /* the batches, index for index */
        ck_assert_int_eq(*p, '|');
        for (int64_t k = 0; k < nb; k++) {
            p++;   /* past '|' */
            int64_t got = s.offsets[k];
            while (*p && *p != '|' && *p != '\n') {
                char *q;
                long long x = strtoll(p, &q, 10);
                if (q == p) break;
                p = q;
                ck_assert_msg(got < s.offsets[k + 1], "%s: batch %lld is shorter than Accelerate's", where, (long long)k);
                ck_assert_msg(s.indices[got] == x, "%s: batch %lld element %lld: %lld, Accelerate %lld", where,
                              (long long)k, (long long)(got - s.offsets[k]), (long long)s.indices[got], x);
                got++;
            }
            ck_assert_msg(got == s.offsets[k + 1], "%s: batch %lld is longer than Accelerate's", where, (long long)k);
        }
        /* len and remainder through a loader */
        empty_ds ds = { { &empty_ops }, n };
        em_dataloader *loader;
        ck_assert_int_eq(em_dataloader_new(&ds.base, &o, &loader), EM_OK);
        ck_assert_int_eq(em_dataloader_len(loader), nb);
        ck_assert_msg(em_dataloader_remainder(loader) == rem, "%s: remainder %lld, Accelerate %lld", where,
                      (long long)em_dataloader_remainder(loader), rem);
        em_dataloader_free(loader);
        /* Accelerate's __len__ is exact except with split_batches and uneven
         * batches (huggingface/accelerate#4122), where ember's len is the count */
        if (acc_len != nb) {
            ck_assert_msg(split && !even && acc_len > nb, "%s: Accelerate's len %lld vs %lld", where, acc_len, nb);
            n_overcount++;
        }
        em_batch_schedule_free(&s);
        n_rank_lines++;
    }
    free(line);
    fclose(f);
    ck_assert_int_gt(n_rank_lines, 6500);   /* the whole grid was read */
    ck_assert_int_gt(n_errors, 500);
    ck_assert_int_gt(n_overcount, 10);
}
END_TEST

/* ---- properties ---------------------------------------------------------- */
/* The rank-ordered gather of every rank's batches (round by round, as
 * gather_for_metrics concatenates them), checked against the epoch's order:
 *   - the first N entries are the order itself: every index exactly once;
 *   - with drop_last, the gather is a prefix of the order, short by less than
 *     one global batch;
 *   - with even_batches, every rank has the same count and every batch the
 *     same size, and what follows the N real entries (less than one global
 *     batch) repeats the order from its start: entry N+j is order[j % m],
 *     m = min(global batch, N);
 *   - without even_batches, the gather is the order, nothing added. */
static void check_point(int64_t n, int64_t bs, int P, int dl, int even, int split, bool shuffle, int64_t epoch)
{
    char where[128];
    snprintf(where, sizeof where, "N=%lld bs=%lld P=%d drop_last=%d even=%d split=%d shuffle=%d epoch=%lld",
             (long long)n, (long long)bs, P, dl, even, split, shuffle, (long long)epoch);
    em_batch_schedule s[8];
    int64_t max_nb = 0;
    for (int r = 0; r < P; r++) {
        em_dataloader_opts o = grid_opts(bs, P, r, dl, even, split);
        o.shuffle = shuffle;
        o.seed = 1234;
        ck_assert_int_eq(em_batch_schedule_make(n, &o, epoch, &s[r]), EM_OK);
        if (s[r].n_batches > max_nb) max_nb = s[r].n_batches;
        if (dl || (even && P > 1)) ck_assert_msg(s[r].n_batches == s[0].n_batches, "%s: rank %d has %lld batches, rank 0 %lld",
                                                 where, r, (long long)s[r].n_batches, (long long)s[0].n_batches);
        else ck_assert_msg(llabs(s[r].n_batches - s[0].n_batches) <= 1, "%s: rank lengths differ by more than one", where);
    }
    /* the order: the identity, or em_randperm(n, seed, epoch << 40) */
    int64_t *order = malloc(sizeof(int64_t) * (size_t)(n + 1));
    if (shuffle) {
        EM_SCOPE {
            em_tensor *perm = em_randperm(n, 1234, (uint64_t)epoch << 40);
            if (n) memcpy(order, em_data_ptr(perm), sizeof(int64_t) * (size_t)n);
        }
    } else {
        for (int64_t i = 0; i < n; i++) order[i] = i;
    }
    int64_t global = split ? bs : bs * P;
    int64_t row = P > 1 && split ? bs / P : bs;
    int64_t total = 0;
    int64_t m = global < n ? global : n;
    for (int64_t k = 0; k < max_nb; k++)
        for (int r = 0; r < P; r++) {
            if (k >= s[r].n_batches) continue;
            int64_t len = s[r].offsets[k + 1] - s[r].offsets[k];
            if (even && P > 1 && !dl) ck_assert_msg(len == row, "%s: rank %d batch %lld has %lld rows", where, r, (long long)k, (long long)len);
            ck_assert_msg(len > 0, "%s: empty batch", where);
            for (int64_t j = 0; j < len; j++, total++) {
                int64_t got = s[r].indices[s[r].offsets[k] + j];
                int64_t want = total < n ? order[total] : order[(total - n) % m];
                ck_assert_msg(got == want, "%s: gathered entry %lld is %lld, expected %lld", where,
                              (long long)total, (long long)got, (long long)want);
            }
        }
    if (dl) ck_assert_msg(total <= n && n - total < global, "%s: drop_last kept %lld of %lld", where, (long long)total, (long long)n);
    else if (even && P > 1) ck_assert_msg(total >= n && total - n < global, "%s: %lld gathered for %lld", where, (long long)total, (long long)n);
    else ck_assert_msg(total == n, "%s: %lld gathered for %lld", where, (long long)total, (long long)n);
    /* the count the loader reports is the schedule's */
    em_dataloader_opts o = grid_opts(bs, P, P - 1, dl, even, split);
    empty_ds ds = { { &empty_ops }, n };
    em_dataloader *loader;
    ck_assert_int_eq(em_dataloader_new(&ds.base, &o, &loader), EM_OK);
    ck_assert_int_eq(em_dataloader_len(loader), s[P - 1].n_batches);
    ck_assert_int_eq(em_dataloader_remainder(loader), dl ? -1 : n % global);
    em_dataloader_free(loader);
    for (int r = 0; r < P; r++) em_batch_schedule_free(&s[r]);
    free(order);
}

START_TEST(test_properties)
{
    int64_t live = tu_live_bytes();
    int points = 0;
    for (int64_t n = 0; n <= 41; n++)
        for (int64_t bs = 1; bs <= 9; bs++)
            for (int P = 1; P <= 6; P++)
                for (int flags = 0; flags < 8; flags++) {
                    int dl = flags & 1, even = (flags >> 1) & 1, split = (flags >> 2) & 1;
                    if (split && bs % P) continue;
                    check_point(n, bs, P, dl, even, split, false, 0);
                    check_point(n, bs, P, dl, even, split, true, n % 3);
                    points++;
                }
    ck_assert_int_gt(points, 10000);
    ck_assert_int_eq(tu_live_bytes(), live);
}
END_TEST

START_TEST(test_large_world)
{
    /* 8 ranks and big batches on a dataset smaller than one global batch:
     * the initial data is repeated several times over */
    for (int64_t n = 1; n <= 20; n++)
        for (int flags = 0; flags < 8; flags++)
            check_point(n, 8, 8, flags & 1, (flags >> 1) & 1, (flags >> 2) & 1, flags & 1, 1);
}
END_TEST

START_TEST(test_shuffle_epochs)
{
    em_dataloader_opts o = { .batch_size = 10, .shuffle = true, .seed = 7 };
    em_batch_schedule a, b, c, d;
    ck_assert_int_eq(em_batch_schedule_make(100, &o, 0, &a), EM_OK);
    ck_assert_int_eq(em_batch_schedule_make(100, &o, 1, &b), EM_OK);
    ck_assert_int_eq(em_batch_schedule_make(100, &o, 0, &c), EM_OK);
    o.seed = 8;
    ck_assert_int_eq(em_batch_schedule_make(100, &o, 0, &d), EM_OK);
    int same_ab = 0, same_ad = 0;
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(a.indices[i], c.indices[i]);   /* a function of (seed, epoch) only */
        same_ab += a.indices[i] == b.indices[i];
        same_ad += a.indices[i] == d.indices[i];
    }
    ck_assert_int_lt(same_ab, 20);
    ck_assert_int_lt(same_ad, 20);
    /* a permutation, not merely shuffled sequences */
    int seen[100] = {0};
    for (int i = 0; i < 100; i++) seen[a.indices[i]]++;
    for (int i = 0; i < 100; i++) ck_assert_int_eq(seen[i], 1);
    em_batch_schedule_free(&a);
    em_batch_schedule_free(&b);
    em_batch_schedule_free(&c);
    em_batch_schedule_free(&d);
    /* seed 0 means the global seed */
    em_set_seed(99);
    o.seed = 0;
    ck_assert_int_eq(em_batch_schedule_make(100, &o, 2, &a), EM_OK);
    o.seed = 99;
    ck_assert_int_eq(em_batch_schedule_make(100, &o, 2, &b), EM_OK);
    ck_assert_int_eq(memcmp(a.indices, b.indices, 100 * sizeof(int64_t)), 0);
    em_batch_schedule_free(&a);
    em_batch_schedule_free(&b);
}
END_TEST

START_TEST(test_invalid_options)
{
    em_batch_schedule s;
    struct { em_dataloader_opts o; const char *msg; } cases[] = {
        { { .batch_size = -1 }, "batch_size" },
        { { .num_processes = 2, .process_index = 2 }, "process_index 2 is outside [0, 2)" },
        { { .num_processes = 2, .process_index = -1 }, "process_index" },
        { { .num_processes = -2 }, "num_processes" },
        { { .batch_size = 6, .num_processes = 4, .split_batches = true }, "batch size (6) must be a round multiple of the number of processes (4)" },
        { { .even_batches = (em_tok_flag)7 }, "even_batches" },
        { { .pad_to_multiple_of = -8 }, "pad_to_multiple_of" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ck_assert_int_eq(em_batch_schedule_make(10, &cases[i].o, 0, &s), EM_ERR_INVALID);
        ck_assert_msg(strstr(em_last_error(), cases[i].msg), "case %zu: %s", i, em_last_error());
        ck_assert_ptr_null(s.indices);
    }
    em_dataloader_opts ok = {0};
    ck_assert_int_eq(em_batch_schedule_make(10, &ok, -1, &s), EM_ERR_INVALID);
    ck_assert_int_eq(em_batch_schedule_make(-1, &ok, 0, &s), EM_ERR_INVALID);
    /* defaults: batch 1, one process, everything */
    ck_assert_int_eq(em_batch_schedule_make(3, NULL, 0, &s), EM_OK);
    ck_assert_int_eq(s.n_batches, 3);
    ck_assert_int_eq(s.indices[2], 2);
    em_batch_schedule_free(&s);
    em_batch_schedule_free(&s);   /* zeroed: a second free is harmless */
}
END_TEST

START_TEST(test_oom)
{
    int64_t live = tu_live_bytes();
    em_dataloader_opts o = { .batch_size = 4, .shuffle = true, .num_processes = 3, .process_index = 1 };
    int failures = 0;
    for (int nth = 1; nth < 20; nth++) {
        em_alloc_fail_after(nth, false);
        em_batch_schedule s;
        em_status st = em_batch_schedule_make(50, &o, 0, &s);
        em_alloc_fail_after(0, false);
        if (st == EM_OK) em_batch_schedule_free(&s);
        else {
            ck_assert_int_eq(st, EM_ERR_OOM);
            ck_assert_ptr_null(s.indices);
            failures++;
        }
    }
    ck_assert_int_ge(failures, 2);
    ck_assert_int_eq(tu_live_bytes(), live);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    tu_add_tests(tu_case(s, "core", 120), test_fixture_grid, test_properties, test_large_world,
                 test_shuffle_epochs, test_invalid_options, test_oom);
    return tu_run_suite(s);
}
