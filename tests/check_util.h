/* ember tests — shared helpers for the Check suites. */
#ifndef EMBER_CHECK_UTIL_H
#define EMBER_CHECK_UTIL_H

#include <check.h>
#include <stdint.h>
#include <string.h>

#include "ember.h"
#include "capture.h"

/* A deterministic generator independent of ember's Philox (splitmix64), so
 * references never share code with what they test. */
uint64_t tu_next(uint64_t *state);
double tu_uniform(uint64_t *state, double lo, double hi);
/* A new contiguous tensor of dt filled with U[lo,hi) values (rounded to dt),
 * owned like any op result. ref (may be NULL) receives the values as doubles,
 * exactly as stored. */
em_tensor *tu_rand_tensor(int ndim, const int64_t *shape, em_dtype dt, double lo, double hi,
                          uint64_t seed, double *ref);
/* All elements of t (any layout, any dtype) as doubles, in logical row-major order.
 * Returns a malloc'd array the caller frees. */
double *tu_to_doubles(em_tensor *t);
/* max |got-ref| / (atol + rtol*|ref|) over n elements; <= 1 means close. NaNs must match. */
double tu_close_ratio(const double *got, const double *ref, int64_t n, double rtol, double atol);
#define tu_assert_close(got, ref, n, rtol, atol) \
    ck_assert_msg(tu_close_ratio(got, ref, n, rtol, atol) <= 1.0, "not close: ratio %g", tu_close_ratio(got, ref, n, rtol, atol))
/* tu_assert_close of the first n elements of t (tu_to_doubles) against ref. */
void tu_assert_values_close(em_tensor *t, const double *ref, int64_t n, double rtol, double atol);

/* Whether a and b (any layouts) hold the same dtype, element count and bytes, element by element. */
bool tu_bytes_equal(em_tensor *a, em_tensor *b);

/* Asserts got (not NULL) has want's shape and every element within
 * atol + rtol*|want| (NaNs must match), naming what and the first element
 * that is not. Any dtypes and layouts. */
void tu_expect_tensor_close(const char *what, em_tensor *got, em_tensor *want, double rtol, double atol);

/* Misuse tests (Check fork mode): install a handler that aborts when the
 * message contains `expected`, and exits with status 3 (failing the test,
 * which expects SIGABRT) after printing the message otherwise. */
void tu_expect_misuse(const char *expected);
/* A test in one line: its body (statements; commas allowed). */
#define TU_TEST(name, ...) \
    START_TEST(name) { __VA_ARGS__; } END_TEST
/* A misuse test in one line: the body (statements; commas allowed) must end
 * in a misuse message containing expected. Register it with tu_add_misuse_tests. */
#define TU_MISUSE(name, expected, ...) \
    START_TEST(name) { tu_expect_misuse(expected); __VA_ARGS__; } END_TEST
/* Register a test that must end in SIGABRT. */
#define tu_add_misuse_test(tc, fn) tcase_add_test_raise_signal(tc, fn, 6)

/* Registration, one call per list: tu_case adds the test case `name` to s
 * (suites run their cases in the order they were added) and returns it;
 * timeout_s 0 keeps Check's default (CK_DEFAULT_TIMEOUT). tu_add_tests and
 * tu_add_misuse_tests add the START_TEST names given, in that order: the first
 * must return, the second must end in SIGABRT (see tu_expect_misuse). */
TCase *tu_case(Suite *s, const char *name, double timeout_s);
void tu_add_list(TCase *tc, int signal, const TTest *const *tests);
#define tu_add_tests(tc, ...) tu_add_list(tc, 0, (const TTest *const[]){__VA_ARGS__, NULL})
#define tu_add_misuse_tests(tc, ...) tu_add_list(tc, 6, (const TTest *const[]){__VA_ARGS__, NULL})

/* Standard main: runs the suite built by `make_suite`, prints failures, and
 * returns 0 when all pass. */
int tu_run_suite(Suite *s);


/* Whether one of the n strings of list equals s. */
bool tu_in_list(char *const *list, int n, const char *s);

/* Live CPU bytes now. */
int64_t tu_live_bytes(void);
/* Calls of op `name` in the kernel profile (em_profile_*) so far; 0 if none. */
int tu_profiled_calls(const char *name);
/* tc, whose tests must now each end with the live CPU bytes they began with
 * (nothing leaked): a checked fixture, run in each test's own process. */
TCase *tu_no_leaks(TCase *tc);
/* Path under ../shared/data or tests/fixtures (from the env set by meson), in a
 * ring of 8 buffers per thread (shared by both: 8 may be in use at once). */
const char *tu_shared_path(const char *rel);
const char *tu_fixture_path(const char *rel);

/* ---- files ------------------------------------------------------------------------
 * One scratch directory per process. tu_scratch_new makes a fresh
 * $TMPDIR/ember-<tag>-XXXXXX (/tmp when TMPDIR is unset or empty) and returns
 * its path, or NULL (errno set); made in main, Check's forked tests share it.
 * tu_scratch is its path ("" before, and after tu_scratch_remove, which
 * deletes it with everything inside: 0, or -1 when something stayed).
 * tu_scratch_path is scratch/name in a ring of 8 static buffers (8 may be in
 * use at once). */
const char *tu_scratch_new(const char *tag);
const char *tu_scratch(void);
const char *tu_scratch_path(const char *name);
int tu_scratch_remove(void);
/* tc, each of whose tests now gets a fresh scratch directory (tu_scratch_new(tag)
 * before it, tu_scratch_remove after, which must succeed): a checked fixture.
 * One tag per test program. */
TCase *tu_scratch_per_test(TCase *tc, const char *tag);
/* tu_run_suite(s) with a fresh scratch directory (tu_scratch_new(tag)) that
 * its tests share, removed after with what failed tests left in it; 1 when
 * the directory cannot be made. */
int tu_run_suite_scratch(Suite *s, const char *tag);
/* Removes dir and everything below it (links themselves, not what they name);
 * 0, or -1 at the first failure. */
int tu_remove_tree(const char *dir);
/* The whole file as a malloc'd buffer the caller frees, with a NUL after its
 * bytes; *n (n may be NULL) gets their count. Fails the test, naming path,
 * when it cannot be opened or read. */
char *tu_read_file(const char *path, size_t *n);
/* Writes n bytes of data to path (replacing it); fails the test, naming path,
 * when it cannot be opened, written or closed. tu_write_text: a C string. */
void tu_write_file(const char *path, const void *data, size_t n);
#define tu_write_text(path, text) tu_write_file(path, text, strlen(text))

/* The ember command for a test run as argv0: $EMBER_CLI, else ../cli/ember
 * beside argv0's directory (the build tree's layout), into out. */
void tu_find_ember(char *out, size_t size, const char *argv0);
/* Runs `cli command args` (args as the shell reads them) with input on stdin (written
 * to scratch/cli-input.txt first) and returns what it wrote to stdout and
 * stderr, 8 KiB at most, in a static buffer; *status gets pclose's status. */
char *tu_run_ember(const char *cli, const char *command, const char *args, const char *input, int *status);

#endif
