/* ember tests — the environment knobs read once a process, under hostile
 * values: EM_NUM_THREADS (a bad value is said and OMP_NUM_THREADS still
 * counts) and the thread count reaching OpenMP in every thread, not only the
 * one that set it; EM_CPU_CACHE_MB (a bad value is said, a huge one is no
 * limit); EMBER_GEMM's warning said once however many threads meet it; a bare
 * EMBER_MKL file name taken as that file.
 *
 * Each knob is read at its first use in a process, and Check runs each test
 * in a fresh fork of main, which uses none of them: so each test sets its
 * variables first, then makes the first use. */
#include "check_util.h"
#include "tensor/cpu/cpu.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* An op in a new thread, then the OpenMP count that thread would run with. */
static void *op_then_count(void *out)
{
    EM_SCOPE {
        em_tensor *a = em_ones(EM_SHAPE(64, 64), EM_F32, EM_CPU);
        (void)em_add(a, a);
    }
    *(int *)out = omp_get_max_threads();
    return NULL;
}

static int count_in_worker(void)
{
    pthread_t t;
    int n = 0;
    ck_assert_int_eq(pthread_create(&t, NULL, op_then_count, &n), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    return n;
}

/* em_set_num_threads in one thread is the count of every thread's next op
 * (OpenMP keeps the count per thread; a worker used to get all the cores). */
START_TEST(thread_count_reaches_worker_threads)
{
    em_set_num_threads(1);
    ck_assert_int_eq(omp_get_max_threads(), 1);
    ck_assert_int_eq(count_in_worker(), 1);
    em_set_num_threads(3);
    ck_assert_int_eq(count_in_worker(), 3);
    ck_assert_int_eq(omp_get_max_threads(), 3);
}
END_TEST

/* EM_NUM_THREADS that is no count: said, naming it, and OMP_NUM_THREADS
 * (the user's other word on it) still counts, not all the cores. */
START_TEST(bad_em_num_threads_said)
{
    static const char *bad[] = {"abc", "-2", "0", "3x", "99999999999"};
    for (int i = 0; i < 5; i++) {
        pid_t pid = fork();   /* the count is read once a process */
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            setenv("EM_NUM_THREADS", bad[i], 1);
            setenv("OMP_NUM_THREADS", "1", 1);
            if (tu_capture_stderr_begin() != 0) _exit(2);
            int n = em_num_threads();
            char *err = tu_capture_stderr_end();
            bool said = err && strstr(err, "EM_NUM_THREADS=") && strstr(err, bad[i]);
            _exit(n == 1 && said && omp_get_max_threads() == 1 ? 0 : 3);
        }
        int st;
        ck_assert_int_eq(waitpid(pid, &st, 0), pid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "EM_NUM_THREADS=%s: child status %d", bad[i], st);
    }
    /* empty: not set (no word), OMP_NUM_THREADS counts */
    setenv("EM_NUM_THREADS", "", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    int n = em_num_threads();
    char *err = tu_capture_stderr_end();
    ck_assert_int_eq(n, 1);
    ck_assert_msg(!err || !strstr(err, "EM_NUM_THREADS"), "stderr: %s", err);
    free(err);
}
END_TEST

/* The cached bytes after a 4 MiB tensor is made and dropped, with
 * EM_CPU_CACHE_MB=value (read at the first free); *err gets stderr. */
static int64_t cached_after_free(const char *value, char **err)
{
    setenv("EM_CPU_CACHE_MB", value, 1);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    EM_SCOPE { (void)em_empty(EM_SHAPE(1 << 20), EM_F32, EM_CPU); }
    *err = tu_capture_stderr_end();
    return em_memory_stats_get(EM_CPU).cached_bytes;
}

START_TEST(cache_mb_not_a_number_said)
{
    char *err;
    ck_assert_int_gt(cached_after_free("8G", &err), 0);   /* the default, 8192 MiB */
    ck_assert_msg(err && strstr(err, "EM_CPU_CACHE_MB=8G"), "stderr: %s", err ? err : "");
    free(err);
}
END_TEST

START_TEST(cache_mb_negative_said)
{
    char *err;
    ck_assert_int_gt(cached_after_free("-1", &err), 0);
    ck_assert_msg(err && strstr(err, "EM_CPU_CACHE_MB=-1"), "stderr: %s", err ? err : "");
    free(err);
}
END_TEST

START_TEST(cache_mb_huge_is_no_limit)
{
    char *err;
    ck_assert_int_gt(cached_after_free("99999999999999999", &err), 0);   /* was shifted past 2^63: nothing cached */
    ck_assert_msg(!err || !strstr(err, "EM_CPU_CACHE_MB"), "stderr: %s", err);
    free(err);
}
END_TEST

START_TEST(cache_mb_zero_caches_nothing)
{
    char *err;
    ck_assert_int_eq(cached_after_free("0", &err), 0);
    free(err);
}
END_TEST

/* EMBER_GEMM's warning comes once, however many threads read the mode first. */
static pthread_barrier_t gate;
static void *read_mode(void *unused)
{
    (void)unused;
    pthread_barrier_wait(&gate);
    return (void *)(intptr_t)em__gemm_mode();
}

START_TEST(gemm_mode_warned_once)
{
    /* mkl without oneMKL: the threads queue on the library's one load, then all
     * come to the warning together (the widest window for a second warning) */
    char nowhere[4200];
    snprintf(nowhere, sizeof nowhere, "%s/no-mkl-here", tu_scratch());
    setenv("EMBER_MKL", nowhere, 1);
    setenv("EMBER_GEMM", "mkl", 1);
    enum { N = 8 };
    pthread_t t[N];
    ck_assert_int_eq(pthread_barrier_init(&gate, NULL, N), 0);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    for (int i = 0; i < N; i++) ck_assert_int_eq(pthread_create(&t[i], NULL, read_mode, NULL), 0);
    void *mode[N];
    for (int i = 0; i < N; i++) ck_assert_int_eq(pthread_join(t[i], &mode[i]), 0);
    char *err = tu_capture_stderr_end();
    for (int i = 1; i < N; i++) ck_assert_ptr_eq(mode[i], mode[0]);
    ck_assert_msg(err && tu_count_of(err, "EMBER_GEMM=mkl, but") == 1, "stderr: %s", err ? err : "");
    free(err);
    pthread_barrier_destroy(&gate);
}
END_TEST

/* EMBER_MKL naming a file in the working directory by its bare name: that
 * file, not a name for the loader's search path. A text file here, so the
 * load fails, naming ./<name> and the loader's reason about the file. */
START_TEST(mkl_bare_file_name_is_that_file)
{
    ck_assert_int_eq(chdir(tu_scratch()), 0);
    tu_write_text("not-mkl.so", "not a shared object\n");
    setenv("EMBER_MKL", "not-mkl.so", 1);
    setenv("EMBER_GEMM", "auto", 1);   /* under valgrind mkl.c would not try without it */
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    bool on = em__mkl_available();
    char *err = tu_capture_stderr_end();
    ck_assert(!on);
    ck_assert_msg(strstr(em__mkl_status(), "./not-mkl.so") && !strstr(em__mkl_status(), "No such file"),
                  "status: %s", em__mkl_status());
    free(err);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("env_knobs");
    TCase *tc = tu_scratch_per_test(tu_case(s, "env_knobs", 0), "env-knobs");
    tu_add_tests(tc, thread_count_reaches_worker_threads, bad_em_num_threads_said, cache_mb_not_a_number_said,
                 cache_mb_negative_said, cache_mb_huge_is_no_limit, cache_mb_zero_caches_nothing,
                 gemm_mode_warned_once, mkl_bare_file_name_is_that_file);
    return s;
}

int main(void)
{
    unsetenv("EM_NUM_THREADS");
    unsetenv("EM_CPU_CACHE_MB");
    unsetenv("EMBER_GEMM");
    unsetenv("EMBER_MKL");
    return tu_run_suite(make_suite());
}
