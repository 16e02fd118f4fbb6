/* ember tests — shared helpers (see check_util.h). */
#include "check_util.h"
#include "tensor/tensor_internal.h"   /* em__shape_str */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t tu_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double tu_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(tu_next(s) >> 11) / 9007199254740992.0);
}

em_tensor *tu_rand_tensor(int ndim, const int64_t *shape, em_dtype dt, double lo, double hi,
                          uint64_t seed, double *ref)
{
    em_tensor *t = em_empty(ndim, shape, dt, EM_CPU);
    if (!t) return NULL;
    int64_t n = em_numel(t);
    uint64_t st = seed;
    int64_t idx[EM_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        double v = tu_uniform(&st, lo, hi);
        if (dt == EM_I64 || dt == EM_I32) v = floor(v);
        if (dt == EM_BOOL) v = v >= (lo + hi) / 2;
        em_set(t, idx, v);
        if (ref) ref[e] = em_get(t, idx);
        for (int d = ndim - 1; d >= 0; d--) {
            if (++idx[d] < shape[d]) break;
            idx[d] = 0;
        }
    }
    return t;
}

double *tu_to_doubles(em_tensor *t)
{
    int64_t n = em_numel(t);
    double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
    int64_t idx[EM_MAX_DIMS] = {0};
    for (int64_t e = 0; e < n; e++) {
        out[e] = em_get(t, idx);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    return out;
}

bool tu_bytes_equal(em_tensor *a, em_tensor *b)
{
    if (!a || !b || a->dtype != b->dtype || em_numel(a) != em_numel(b)) return false;
    em_tensor *ca = em_contiguous(a), *cb = em_contiguous(b);
    return ca && cb && !memcmp(em_data_ptr(ca), em_data_ptr(cb), (size_t)em_numel(a) * em_dtype_size(a->dtype));
}

double tu_close_ratio(const double *got, const double *ref, int64_t n, double rtol, double atol)
{
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(ref[i]) || isnan(got[i])) {
            if (!(isnan(ref[i]) && isnan(got[i]))) return INFINITY;
            continue;
        }
        if (isinf(ref[i]) || isinf(got[i])) {
            if (got[i] != ref[i]) return INFINITY;
            continue;
        }
        double r = fabs(got[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (r > worst) worst = r;
    }
    return worst;
}

void tu_assert_values_close(em_tensor *t, const double *ref, int64_t n, double rtol, double atol)
{
    double *got = tu_to_doubles(t);
    double ratio = tu_close_ratio(got, ref, n, rtol, atol);
    free(got);
    ck_assert_msg(ratio <= 1.0, "not close: ratio %g", ratio);
}

static const char *expected_msg;
static void misuse_handler(const char *msg, void *user)
{
    (void)user;
    if (expected_msg && strstr(msg, expected_msg)) abort();
    fprintf(stderr, "misuse message did not contain \"%s\":\n  %s\n", expected_msg ? expected_msg : "", msg);
    exit(3);
}

void tu_expect_misuse(const char *expected)
{
    expected_msg = expected;
    em_set_misuse_handler(misuse_handler, NULL);
}

TCase *tu_case(Suite *s, const char *name, double timeout_s)
{
    TCase *tc = tcase_create(name);
    if (timeout_s > 0) tcase_set_timeout(tc, timeout_s);
    suite_add_tcase(s, tc);
    return tc;
}

void tu_add_list(TCase *tc, int signal, const TTest *const *tests)
{
    for (; *tests; tests++) tcase_add_test_raise_signal(tc, *tests, signal);
}

int tu_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

bool tu_in_list(char *const *list, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], s)) return true;
    return false;
}

int64_t tu_live_bytes(void) { return em_memory_stats_get(EM_CPU).live_bytes; }

int tu_profiled_calls(const char *name)
{
    char buf[8192] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    if (!f) return 0;
    em_profile_print(f, "t");
    fclose(f);
    char key[64];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(buf, key);
    int calls = 0;
    if (at) sscanf(at + strlen(key), " %d", &calls);
    return calls;
}

static int64_t leak_base;
static void leak_setup(void) { leak_base = tu_live_bytes(); }
static void leak_teardown(void)
{
    int64_t now = tu_live_bytes();
    ck_assert_msg(now == leak_base, "live CPU bytes: %lld at the start, %lld at the end", (long long)leak_base,
                  (long long)now);
}

TCase *tu_no_leaks(TCase *tc)
{
    tcase_add_checked_fixture(tc, leak_setup, leak_teardown);
    return tc;
}

static const char *join(const char *env, const char *fallback, const char *rel)
{
    static _Thread_local char bufs[8][4096];
    static _Thread_local int k;
    char *buf = bufs[k++ % 8];
    const char *root = getenv(env);
    snprintf(buf, sizeof bufs[0], "%s/%s", root ? root : fallback, rel);
    return buf;
}
const char *tu_shared_path(const char *rel) { return join("EMBER_SHARED_DATA", "../shared/data", rel); }
const char *tu_fixture_path(const char *rel) { return join("EMBER_FIXTURES", "tests/fixtures", rel); }

void tu_expect_tensor_close(const char *what, em_tensor *got, em_tensor *want, double rtol, double atol)
{
    ck_assert_msg(got != NULL, "%s: NULL (%s)", what, em_last_error());
    ck_assert_msg(got->ndim == want->ndim && !memcmp(got->shape, want->shape, sizeof(int64_t) * (size_t)got->ndim),
                  "%s: got shape %s, want %s", what, em__shape_str(got), em__shape_str(want));
    double *g = tu_to_doubles(got), *w = tu_to_doubles(want);
    int64_t n = em_numel(want);
    for (int64_t i = 0; i < n; i++)
        if (tu_close_ratio(g + i, w + i, 1, rtol, atol) > 1)
            ck_abort_msg("%s[%lld]: got %.17g, want %.17g (|diff| %.3g > %.3g)", what, (long long)i, g[i], w[i],
                         fabs(g[i] - w[i]), atol + rtol * fabs(w[i]));
    free(g);
    free(w);
}
