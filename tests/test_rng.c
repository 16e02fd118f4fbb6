/* ember tests — Philox4x32-10 and the random ops (tensor/rng.c). */
#include "check_util.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Check's ck_assert writes on every pass; hot loops only report failures. */
#define CHECK(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

#define N_STAT 1000000

/* ---- Philox known answers (Random123's kat_vectors) ----------------------- */

START_TEST(test_philox_kat)
{
    static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        em__philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int l = 0; l < 4; l++)
            ck_assert_msg(out[l] == kat[i].out[l], "kat %d lane %d: %08x, want %08x", i, l, out[l], kat[i].out[l]);
    }
    /* em__philox(seed, counter): key = seed words (low first), counter = (lo, hi, 0, 0) */
    uint32_t a[4], b[4];
    em__philox(0, 0, a);
    ck_assert(!memcmp(a, kat[0].out, sizeof a));
    uint64_t seed = 0x299f31d0a4093822ull, ctr = 0x85a308d3243f6a88ull;
    em__philox(seed, ctr, a);
    em__philox4x32_10((const uint32_t[4]){0x243f6a88, 0x85a308d3, 0, 0}, (const uint32_t[2]){0xa4093822, 0x299f31d0},
                      b);
    ck_assert(!memcmp(a, b, sizeof a));
    em__philox(seed, ctr + 1, b);
    ck_assert(memcmp(a, b, sizeof a) != 0);
}
END_TEST

/* ---- the element mapping (what CUDA must reproduce) ----------------------- */

START_TEST(test_element_mapping)
{
    em_set_seed(1234);
    em_rng_state st = em_rng_get_state();
    ck_assert(st.seed == 1234 && st.offset == 0);
    em_tensor *t = em_rand(EM_SHAPE(2, 5), EM_F32, EM_CPU);   /* 10 elements: 3 counters */
    ck_assert(em_rng_get_state().offset == 3);
    const float *v = em_data_ptr(t);
    for (int e = 0; e < 10; e++) {
        uint32_t x[4];
        em__philox(1234, (uint64_t)(e / 4), x);
        double want = (double)(x[e % 4] >> 8) / 16777216.0;
        ck_assert_msg(v[e] == want, "element %d: %.9g want %.9g", e, v[e], want);
    }
    /* bernoulli at a known state: true iff u < p */
    em_rng_set_state((em_rng_state){99, 1000});
    em_tensor *m = em_bernoulli(EM_SHAPE(7), 0.5, EM_CPU);
    ck_assert(em_rng_get_state().offset == 1002);
    const uint8_t *mb = em_data_ptr(m);
    for (int e = 0; e < 7; e++) {
        uint32_t x[4];
        em__philox(99, 1000 + (uint64_t)(e / 4), x);
        ck_assert_int_eq(mb[e], (double)(x[e % 4] >> 8) / 16777216.0 < 0.5);
    }
    /* randn: Box-Muller on lane pairs (0,1), (2,3) */
    em_rng_set_state((em_rng_state){7, 5});
    em_tensor *z = em_randn(EM_SHAPE(4), EM_F64, EM_CPU);
    const double *zv = em_data_ptr(z);
    uint32_t x[4];
    em__philox(7, 5, x);
    for (int p = 0; p < 2; p++) {
        double r = sqrt(-2 * log((x[2 * p] + 1.0) / 4294967296.0)), th = 2 * M_PI * (x[2 * p + 1] / 4294967296.0);
        ck_assert(fabs(zv[2 * p] - r * cos(th)) < 1e-12 && fabs(zv[2 * p + 1] - r * sin(th)) < 1e-12);
    }
    em_release(t);
    em_release(m);
    em_release(z);
}
END_TEST

/* Long draws (vectorized Philox batches, threads, ragged tails) at an offset
 * whose counters cross 2^32 (carry into the second counter word) match the
 * scalar em__philox element by element. */
START_TEST(test_batched_paths)
{
    const uint64_t seed = 0xfedcba9876543210ull, off = 0xffffff00ull;
    const int64_t n = 100003;
    em_scope_begin();
    em_rng_set_state((em_rng_state){seed, off});
    em_tensor *u = em_rand(EM_SHAPE(n), EM_F32, EM_CPU);
    em_rng_set_state((em_rng_state){seed, off});
    em_tensor *b = em_bernoulli(EM_SHAPE(n), 0.7, EM_CPU);
    em_rng_set_state((em_rng_state){seed, off});
    em_tensor *z = em_randn(EM_SHAPE(n), EM_F64, EM_CPU);
    ck_assert(em_rng_get_state().offset == off + (uint64_t)(n + 3) / 4);
    const float *uv = em_data_ptr(u);
    const uint8_t *bv = em_data_ptr(b);
    const double *zv = em_data_ptr(z);
    for (int64_t e = 0; e < n; e += 4) {
        uint32_t x[4];
        em__philox(seed, off + (uint64_t)(e / 4), x);
        for (int l = 0; l < 4 && e + l < n; l++) {
            double want = (double)(x[l] >> 8) / 16777216.0;
            CHECK(uv[e + l] == want, "rand element %lld", (long long)(e + l));
            CHECK(bv[e + l] == (want < 0.7), "bernoulli element %lld", (long long)(e + l));
        }
        for (int p = 0; p < 2 && e + 2 * p < n; p++) {
            double r = sqrt(-2 * log((x[2 * p] + 1.0) / 4294967296.0)), th = 2 * M_PI * (x[2 * p + 1] / 4294967296.0);
            CHECK(fabs(zv[e + 2 * p] - r * cos(th)) < 1e-12, "randn element %lld", (long long)(e + 2 * p));
            if (e + 2 * p + 1 < n)
                CHECK(fabs(zv[e + 2 * p + 1] - r * sin(th)) < 1e-12, "randn element %lld", (long long)(e + 2 * p + 1));
        }
    }
    em_scope_end();
}
END_TEST

/* ---- statistics on 1M samples (bounds are 5 standard errors) -------------- */

static void moments(em_tensor *t, double *mean, double *var)
{
    double *v = tu_to_doubles(t);
    int64_t n = em_numel(t);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += v[i];
    *mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
    *var = s2 / (double)(n - 1);
    free(v);
}

START_TEST(test_uniform_stats)
{
    em_set_seed(42);
    const em_dtype dts[4] = {EM_F32, EM_F64, EM_F16, EM_BF16};
    for (int d = 0; d < 4; d++) {
        EM_SCOPE {
            em_tensor *t = em_rand(EM_SHAPE(1000, 1000), dts[d], EM_CPU);
            ck_assert(t && t->dtype == dts[d] && em_numel(t) == N_STAT);
            double *v = tu_to_doubles(t);
            for (int64_t i = 0; i < N_STAT; i++)
                CHECK(v[i] >= 0 && v[i] < 1, "%s rand out of [0,1): %.17g", em_dtype_name(dts[d]), v[i]);
            free(v);
            double mean, var;
            moments(t, &mean, &var);
            /* the mean/var of f16/bf16 values shift by their rounding (<= 2^-9 for bf16 near 1) */
            double slack = dts[d] == EM_BF16 ? 2e-3 : dts[d] == EM_F16 ? 3e-4 : 0;
            ck_assert_msg(fabs(mean - 0.5) < 1.5e-3 + slack, "%s mean %g", em_dtype_name(dts[d]), mean);
            ck_assert_msg(fabs(var - 1.0 / 12) < 3.8e-4 + slack, "%s var %g", em_dtype_name(dts[d]), var);
        }
    }
    /* uniform_ on [low, high) */
    em_tensor *t = em_empty(EM_SHAPE(N_STAT), EM_F32, EM_CPU);
    ck_assert(em_uniform_(t, -2.0, 3.0) == t);
    double *v = tu_to_doubles(t);
    for (int64_t i = 0; i < N_STAT; i++) CHECK(v[i] >= -2 && v[i] < 3, "uniform_ out of range: %g", v[i]);
    free(v);
    double mean, var;
    moments(t, &mean, &var);
    ck_assert_msg(fabs(mean - 0.5) < 5 * 1.5e-3, "uniform_ mean %g", mean);
    ck_assert_msg(fabs(var - 25.0 / 12) < 25 * 3.8e-4, "uniform_ var %g", var);
    em_release(t);
}
END_TEST

START_TEST(test_upper_bound_excluded)
{
    /* u = 1 - 2^-24 rounds 1 + u up to 2 in f32 and to 1 in bf16: the bound is excluded */
    em_set_seed(3);
    EM_SCOPE {
        em_tensor *t = em_empty(EM_SHAPE(200000), EM_F32, EM_CPU);
        em_uniform_(t, 1.0, 2.0);
        double *v = tu_to_doubles(t);
        for (int i = 0; i < 200000; i++) CHECK(v[i] >= 1 && v[i] < 2, "f32 uniform_(1,2) gave %.9g", v[i]);
        free(v);
        em_tensor *b = em_empty(EM_SHAPE(200000), EM_BF16, EM_CPU);
        em_uniform_(b, 1.0, 2.0);
        v = tu_to_doubles(b);
        int top = 0;
        for (int i = 0; i < 200000; i++) {
            CHECK(v[i] >= 1 && v[i] < 2, "bf16 uniform_(1,2) gave %.9g", v[i]);
            top += v[i] == 1.9921875;
        }
        ck_assert_int_gt(top, 0);   /* the largest bf16 below 2 is reachable */
        free(v);
    }
}
END_TEST

START_TEST(test_randn_stats)
{
    em_set_seed(7);
    em_tensor *t = em_randn(EM_SHAPE(N_STAT), EM_F32, EM_CPU);
    double mean, var;
    moments(t, &mean, &var);
    ck_assert_msg(fabs(mean) < 5e-3, "randn mean %g", mean);
    ck_assert_msg(fabs(var - 1) < 7.1e-3, "randn var %g", var);
    double *v = tu_to_doubles(t);
    int64_t in1 = 0, in2 = 0, in3 = 0;
    double s3 = 0, s4 = 0;
    for (int64_t i = 0; i < N_STAT; i++) {
        double a = fabs(v[i]);
        in1 += a < 1;
        in2 += a < 2;
        in3 += a < 3;
        s3 += v[i] * v[i] * v[i];
        s4 += v[i] * v[i] * v[i] * v[i];
    }
    free(v);
    /* Normal: P(|z|<1) = 0.682689, P(|z|<2) = 0.954500, P(|z|<3) = 0.997300;
     * skewness 0 (se sqrt(15/N)), kurtosis 3 (se sqrt(96/N)). */
    ck_assert_msg(fabs(in1 / (double)N_STAT - 0.682689) < 2.4e-3, "within 1 sigma: %g", in1 / (double)N_STAT);
    ck_assert_msg(fabs(in2 / (double)N_STAT - 0.954500) < 1.1e-3, "within 2 sigma: %g", in2 / (double)N_STAT);
    ck_assert_msg(fabs(in3 / (double)N_STAT - 0.997300) < 2.6e-4, "within 3 sigma: %g", in3 / (double)N_STAT);
    ck_assert_msg(fabs(s3 / N_STAT) < 0.02, "skewness %g", s3 / N_STAT);
    ck_assert_msg(fabs(s4 / N_STAT - 3) < 0.05, "kurtosis %g", s4 / N_STAT);
    /* normal_ with mean/std, on f64 */
    em_tensor *d = em_empty(EM_SHAPE(1000, 1000), EM_F64, EM_CPU);
    ck_assert(em_normal_(d, 3.0, 2.0) == d);
    moments(d, &mean, &var);
    ck_assert_msg(fabs(mean - 3) < 1e-2, "normal_ mean %g", mean);
    ck_assert_msg(fabs(var - 4) < 4 * 7.1e-3, "normal_ var %g", var);
    em_release(t);
    em_release(d);
}
END_TEST

START_TEST(test_bernoulli_rate)
{
    em_set_seed(11);
    const double ps[3] = {0.3, 0.0, 1.0};
    for (int k = 0; k < 3; k++) {
        em_tensor *m = em_bernoulli(EM_SHAPE(N_STAT), ps[k], EM_CPU);
        ck_assert(m->dtype == EM_BOOL);
        const uint8_t *b = em_data_ptr(m);
        int64_t ones = 0;
        for (int64_t i = 0; i < N_STAT; i++) ones += b[i];
        double rate = ones / (double)N_STAT;
        ck_assert_msg(fabs(rate - ps[k]) < 2.3e-3, "p=%g: rate %g", ps[k], rate);
        if (ps[k] == 0 || ps[k] == 1) ck_assert(rate == ps[k]);
        em_release(m);
    }
}
END_TEST

/* ---- reproducibility ------------------------------------------------------------- */

static bool same_bytes(em_tensor *a, em_tensor *b)
{
    size_t n = (size_t)em_numel(a) * em_dtype_size(a->dtype);
    return em_numel(a) == em_numel(b) && (n == 0 || !memcmp(em_data_ptr(a), em_data_ptr(b), n));
}

START_TEST(test_replay)
{
    em_scope_begin();
    em_set_seed(2024);
    em_tensor *a1 = em_rand(EM_SHAPE(33), EM_F32, EM_CPU);
    em_rng_state mid = em_rng_get_state();
    ck_assert(mid.seed == 2024 && mid.offset == 9);
    em_tensor *a2 = em_randn(EM_SHAPE(5, 7), EM_BF16, EM_CPU);
    em_tensor *a3 = em_bernoulli(EM_SHAPE(100), 0.25, EM_CPU);
    ck_assert(em_rng_get_state().offset == 9 + 9 + 25);
    ck_assert(!same_bytes(a1, em_rand(EM_SHAPE(33), EM_F32, EM_CPU)));   /* the stream moved on */

    em_set_seed(2024);   /* same seed, offset back to 0: the same tensors */
    ck_assert(em_get_seed() == 2024 && em_rng_get_state().offset == 0);
    ck_assert(same_bytes(a1, em_rand(EM_SHAPE(33), EM_F32, EM_CPU)));
    ck_assert(same_bytes(a2, em_randn(EM_SHAPE(5, 7), EM_BF16, EM_CPU)));
    ck_assert(same_bytes(a3, em_bernoulli(EM_SHAPE(100), 0.25, EM_CPU)));

    em_rng_set_state(mid);   /* a restored state replays from there */
    ck_assert(same_bytes(a2, em_randn(EM_SHAPE(5, 7), EM_BF16, EM_CPU)));
    ck_assert(same_bytes(a3, em_bernoulli(EM_SHAPE(100), 0.25, EM_CPU)));

    em_set_seed(2025);
    ck_assert(!same_bytes(a1, em_rand(EM_SHAPE(33), EM_F32, EM_CPU)));

    /* reserve hands out disjoint counter ranges */
    em_set_seed(1);
    ck_assert(em_rng_reserve(10) == 0);
    ck_assert(em_rng_reserve(5) == 10);
    ck_assert(em_rng_get_state().offset == 15);
    em_scope_end();
}
END_TEST

START_TEST(test_thread_independence)
{
    em_tensor *r[2][4];
    for (int k = 0; k < 2; k++) {
        em_set_num_threads(k + 1);
        em_set_seed(77);
        r[k][0] = em_rand(EM_SHAPE(N_STAT + 3), EM_F32, EM_CPU);
        r[k][1] = em_randn(EM_SHAPE(N_STAT + 1), EM_F32, EM_CPU);
        r[k][2] = em_bernoulli(EM_SHAPE(N_STAT + 2), 0.1, EM_CPU);
        r[k][3] = em_randn(EM_SHAPE(300001), EM_F16, EM_CPU);
    }
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(same_bytes(r[0][i], r[1][i]), "draw %d differs between 1 and 2 threads", i);
        em_release(r[0][i]);
        em_release(r[1][i]);
    }
}
END_TEST

START_TEST(test_inplace_layouts)
{
    em_scope_begin();
    /* a transposed (non-contiguous) target gets, in logical order, what a
     * fresh contiguous draw from the same state would */
    em_tensor *base = em_empty(EM_SHAPE(30, 50), EM_F32, EM_CPU);
    em_tensor *tt = em_transpose(base, 0, 1);   /* [50, 30] */
    em_rng_state s = {5, 17};
    em_rng_set_state(s);
    uint32_t v0 = base->storage->version;
    ck_assert(em_uniform_(tt, 0.0, 1.0) == tt);
    ck_assert(base->storage->version > v0);
    ck_assert(em_rng_get_state().offset == 17 + 375);
    em_rng_set_state(s);
    em_tensor *ref = em_rand(EM_SHAPE(50, 30), EM_F32, EM_CPU);
    double *a = tu_to_doubles(tt), *b = tu_to_doubles(ref);
    for (int i = 0; i < 1500; i++) CHECK(a[i] == b[i], "element %d: %g vs %g", i, a[i], b[i]);
    free(a);
    free(b);
    /* contiguous in place: version bumped, values replaced */
    em_tensor *c = em_empty(EM_SHAPE(64), EM_F64, EM_CPU);
    v0 = c->storage->version;
    em_normal_(c, 0.0, 1.0);
    ck_assert(c->storage->version > v0);
    double *cv = tu_to_doubles(c);
    int nz = 0;
    for (int i = 0; i < 64; i++) nz += cv[i] != 0;
    ck_assert_int_eq(nz, 64);
    free(cv);
    /* empty and 0-d tensors */
    em_set_seed(9);
    em_tensor *e = em_rand(EM_SHAPE(0, 4), EM_F32, EM_CPU);
    ck_assert(e && em_numel(e) == 0 && em_rng_get_state().offset == 0);
    em_tensor *z = em_randn(0, (int64_t[1]){0}, EM_F32, EM_CPU);
    ck_assert(z && z->ndim == 0 && em_rng_get_state().offset == 1);
    em_scope_end();
}
END_TEST

/* ---- randperm ------------------------------------------------------------------- */

START_TEST(test_randperm)
{
    em_scope_begin();
    const int64_t ns[5] = {0, 1, 2, 10, 100000};
    for (int k = 0; k < 5; k++) {
        int64_t n = ns[k];
        em_tensor *p = em_randperm(n, 42, 0);
        ck_assert(p->dtype == EM_I64 && p->ndim == 1 && p->shape[0] == n);
        const int64_t *v = em_data_ptr(p);
        char *seen = calloc((size_t)n + 1, 1);
        for (int64_t i = 0; i < n; i++) {
            CHECK(v[i] >= 0 && v[i] < n && !seen[v[i]], "randperm(%lld): bad value %lld at %lld", (long long)n,
                  (long long)v[i], (long long)i);
            seen[v[i]] = 1;
        }
        free(seen);
        ck_assert(same_bytes(p, em_randperm(n, 42, 0)));   /* deterministic */
        if (n >= 10) {
            ck_assert(!same_bytes(p, em_randperm(n, 43, 0)));
            ck_assert(!same_bytes(p, em_randperm(n, 42, 1)));
            int64_t fixed = 0;
            for (int64_t i = 0; i < n; i++) fixed += v[i] == i;
            ck_assert_int_lt(fixed, n / 2 + 2);   /* not the identity */
        }
    }
    /* uniformity: each of the 6 permutations of 3 about 1/6 of the time */
    int count[6] = {0};
    for (uint64_t s = 0; s < 6000; s++) {
        const int64_t *v = em_data_ptr(em_randperm(3, s, 0));
        count[v[0] * 2 + (v[1] > v[2])]++;
    }
    for (int i = 0; i < 6; i++) ck_assert_msg(abs(count[i] - 1000) < 150, "perm %d: %d", i, count[i]);
    em_scope_end();
}
END_TEST

START_TEST(test_default_seed)
{
    /* first in the suite and forked: nothing has seeded yet */
    ck_assert(em_get_seed() == 0);
    ck_assert(em_rng_get_state().offset == 0);
}
END_TEST

/* ---- misuse -------------------------------------------------------------------- */

START_TEST(misuse_rand_int)
{
    tu_expect_misuse("em_rand: dtype int64 is not a floating type");
    em_rand(EM_SHAPE(3), EM_I64, EM_CPU);
}
END_TEST

START_TEST(misuse_bernoulli_p)
{
    tu_expect_misuse("p must be in [0, 1], got 1.5");
    em_bernoulli(EM_SHAPE(3), 1.5, EM_CPU);
}
END_TEST

START_TEST(misuse_uniform_bounds)
{
    em_tensor *t = em_empty(EM_SHAPE(3), EM_F32, EM_CPU);
    tu_expect_misuse("low <= high, got low=2, high=1");
    em_uniform_(t, 2.0, 1.0);
}
END_TEST

START_TEST(misuse_normal_int)
{
    em_tensor *t = em_empty(EM_SHAPE(3), EM_I32, EM_CPU);
    tu_expect_misuse("em_normal_: dtype int32 of [3] is not a floating type");
    em_normal_(t, 0.0, 1.0);
}
END_TEST

START_TEST(misuse_uniform_expanded)
{
    em_tensor *t = em_empty(EM_SHAPE(1, 4), EM_F32, EM_CPU);
    em_tensor *e = em_expand(t, EM_SHAPE(3, 4));
    tu_expect_misuse("dim 0 is expanded");
    em_uniform_(e, 0.0, 1.0);
}
END_TEST

START_TEST(misuse_randn_shape)
{
    tu_expect_misuse("negative size -2");
    em_randn(EM_SHAPE(3, -2), EM_F32, EM_CPU);
}
END_TEST

START_TEST(misuse_randperm)
{
    tu_expect_misuse("em_randperm: n must be non-negative, got -1");
    em_randperm(-1, 0, 0);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("rng");
    tu_add_tests(tu_case(s, "rng", 120), test_default_seed, test_philox_kat, test_element_mapping,
                 test_batched_paths, test_uniform_stats, test_upper_bound_excluded, test_randn_stats,
                 test_bernoulli_rate, test_replay, test_thread_independence, test_inplace_layouts,
                 test_randperm);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_rand_int, misuse_bernoulli_p, misuse_uniform_bounds,
                        misuse_normal_int, misuse_uniform_expanded, misuse_randn_shape, misuse_randperm);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
