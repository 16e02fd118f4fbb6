/* ember tests — the f32 GEMM picked by measurement (tensor/cpu/gemm_pick.c):
 * size classes, results whichever library wins, the choice read back from
 * the cache file (a pure function of it), lines that do not parse skipped,
 * two processes racing on one class agreeing through the file lock, a
 * directory that cannot be made leaving choices in memory, the file's
 * hazards (a path too long, a last line without its newline, lines past the
 * parser's buffer, a FIFO at the path, a table the file fills, a write that
 * fails part way), and oneMKL
 * (tensor/cpu/mkl.c): refused or turned off, nothing changes; asked for by
 * the build (-Dmkl_root, tools/test's mkl pass), it loads, computes right and
 * joins the choices as a third candidate.
 *
 * Each test sets EMBER_CACHE_DIR to its own scratch directory and calls
 * em__gemm_forget, so nothing is shared with other tests or the user's cache.
 */
#include "check_util.h"
#include "tensor/cpu/cpu.h"
#include "tensor/numeric.h"

#include "ember_config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void use_dir(const char *dir)
{
    setenv("EMBER_CACHE_DIR", dir, 1);
    em__gemm_forget();
}

/* A [r,c] matrix of small values from seed. */
static float *matrix(int64_t r, int64_t c, uint64_t seed)
{
    float *m = malloc((size_t)(r * c) * sizeof(float));
    for (int64_t i = 0; i < r * c; i++) m[i] = (float)tu_uniform(&seed, -1, 1);
    return m;
}

START_TEST(size_classes)
{
    static const int64_t in[] = {1, 2, 3, 4, 5, 6, 7, 9, 13, 300, 384, 385, 425, 640, 768, 1000, 1536, 3072, 3073};
    static const int64_t want[] = {1, 2, 3, 4, 6, 6, 8, 12, 16, 384, 384, 512, 512, 768, 768, 1024, 1536, 3072, 4096};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        ck_assert_msg(em__gemm_size_class(in[i]) == want[i], "class of %lld: %lld, want %lld", (long long)in[i],
                      (long long)em__gemm_size_class(in[i]), (long long)want[i]);
}
END_TEST

/* f32 GEMM against an f64 loop: every layout, beta 0 and 1, alpha 0.75,
 * leading dimensions pad wider than the rows (the padding never written).
 * lib 0: em_cpu_gemm as callers meet it (EMBER_GEMM's mode); else that
 * library through em__gemm_f32_with. */
static void check_gemm(int lib, int64_t M, int64_t N, int64_t K, int64_t pad)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
            float *a = matrix(ta ? K : M, lda, 11 + ta), *b = matrix(tb ? N : K, ldb, 13 + tb);
            float *c0 = matrix(M, ldc, 17), *c = malloc(sizeof(float) * M * ldc);
            for (int beta = 0; beta < 2; beta++) {
                memcpy(c, c0, sizeof(float) * M * ldc);
                if (lib) em__gemm_f32_with(lib, ta, tb, M, N, K, 0.75, a, lda, b, ldb, beta, c, ldc);
                else em_cpu_gemm(EM_GEMM_F32, ta, tb, M, N, K, 0.75, a, lda, b, ldb, beta, c, ldc);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < ldc; j++) {
                        if (j >= N) {
                            ck_assert(c[i * ldc + j] == c0[i * ldc + j]);
                            continue;
                        }
                        double sum = 0, abs = 0;
                        for (int64_t p = 0; p < K; p++) {
                            double x = a[ta ? p * lda + i : i * lda + p], y = b[tb ? j * ldb + p : p * ldb + j];
                            sum += x * y;
                            abs += fabs(x * y);
                        }
                        double want = 0.75 * sum + beta * (double)c0[i * ldc + j];
                        ck_assert_msg(fabs(c[i * ldc + j] - want) <= 1e-5 * (abs + 1),
                                      "lib %d ta %d tb %d beta %d (%lld,%lld): %g, want %g", lib, ta, tb, beta,
                                      (long long)i, (long long)j, c[i * ldc + j], want);
                    }
            }
            free(a), free(b), free(c0), free(c);
        }
}

/* em_cpu_gemm in auto mode against an f64 loop, every layout, beta 0 and 1,
 * and each class lands in the file. */
START_TEST(auto_results_and_file)
{
    use_dir(tu_scratch_path("cache"));
    const int64_t M = 70, N = 90, K = 110;
    check_gemm(0, M, N, K, 0);
#if EMBER_HAVE_ONEDNN
    if (em__gemm_mode() == EM__GEMM_AUTO)   /* else (valgrind) OpenBLAS runs, unmeasured */
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                ck_assert_msg(em__gemm_known(ta, tb, M, N, K, em_num_threads()) != 0, "class of ta %d tb %d not kept",
                              ta, tb);
#endif
#if EMBER_HAVE_ONEDNN
    if (em__gemm_mode() != EM__GEMM_AUTO) return;   /* valgrind: OpenBLAS only, nothing measured */
    const char *path = em__gemm_cache_file();
    ck_assert_msg(strncmp(path, tu_scratch_path("cache"), strlen(tu_scratch_path("cache"))) == 0, "file %s", path);
    char *text = tu_read_file(path, NULL);
    /* classes of 70, 90, 110: 96, 96, 128 */
    ck_assert_int_eq(tu_count_of(text, " 96 96 128 "), 4);
    ck_assert_int_eq(tu_count_of(text, "f32 NN "), 1);
    ck_assert_int_eq(tu_count_of(text, "f32 TT "), 1);
    free(text);
#endif
}
END_TEST

#if EMBER_HAVE_ONEDNN
/* The file decides: a choice written there is the one used, and flipping it
 * flips the choice (after the process forgets what it knew). */
START_TEST(choice_is_a_function_of_the_file)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    ck_assert_msg(path[0], "no cache file");
    float *a = matrix(200, 300, 7), *b = matrix(300, 400, 8);
    int th = em_num_threads();
    char text[512];
    for (int flip = 0; flip < 2; flip++) {
        snprintf(text, sizeof text, "# planted\nf32 NN 256 512 384 %d %s 1.0 2.0\nf32 NT 256 512 384 %d %s 1.0 2.0\n",
                 th, flip ? "openblas" : "onednn", th, flip ? "onednn" : "openblas");
        tu_write_text(path, text);
        em__gemm_forget();
        ck_assert_int_eq(em__gemm_pick(false, false, 200, 400, 300, a, 300, b, 400),
                         flip ? EM__GEMM_OPENBLAS : EM__GEMM_ONEDNN);
        ck_assert_int_eq(em__gemm_pick(false, true, 200, 400, 300, a, 300, b, 300),
                         flip ? EM__GEMM_ONEDNN : EM__GEMM_OPENBLAS);
        /* nothing was measured: the file still holds only the planted lines */
        char *now = tu_read_file(path, NULL);
        ck_assert_str_eq(now, text);
        free(now);
    }
    free(a), free(b);
}
END_TEST

/* Lines that do not parse are skipped with a warning naming the file and
 * line; the valid line after them still counts. */
START_TEST(bad_lines_skipped)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    int th = em_num_threads();
    char text[1024];
    snprintf(text, sizeof text,
             "garbage\n"
             "f32 NN 256 512\n"
             "f64 NN 256 512 384 %d onednn 1 2\n"
             "f32 XN 256 512 384 %d onednn 1 2\n"
             "f32 NN 250 512 384 %d onednn 1 2\n"            /* not a size class */
             "f32 NN 256 512 384 0 onednn 1 2\n"
             "f32 NN 256 512 384 %d mkl 1 2\n"
             "bf16 NN 256 512 384 %d openblas 0 1 2\n"       /* OpenBLAS runs no bf16 */
             "bf16 NN 256 512 384 %d onednn 1 2\n"           /* bf16 lines have the oneMKL column */
             "f32 NN 99999999999999999999999 512 384 %d onednn 1 2\n"
             "\xff\xfe\x01\n"
             "f32 NN 256 512 384 %d openblas 1.0 2.0\n",
             th, th, th, th, th, th, th, th);
    tu_write_text(path, text);
    em__gemm_forget();
    float *a = matrix(200, 300, 7), *b = matrix(300, 400, 8);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    int lib = em__gemm_pick(false, false, 200, 400, 300, a, 300, b, 400);
    char *err = tu_capture_stderr_end();
    ck_assert_int_eq(lib, EM__GEMM_OPENBLAS);
    ck_assert_msg(err && tu_count_of(err, "not a GEMM choice line") == 11, "stderr: %s", err ? err : "(none)");
    char where[4200];
    snprintf(where, sizeof where, "%s:5:", path);
    ck_assert_msg(strstr(err, where), "no %s in: %s", where, err);
    free(err);
    free(a), free(b);
}
END_TEST

/* A full table (1,536 classes) keeps what it has and answers with the fixed
 * rule for the rest: nothing more is measured (the file gets no more lines),
 * so a run with very many shapes does not measure on every call. */
START_TEST(full_table_falls_back_to_rule)
{
    use_dir(tu_scratch_path("cache"));
    static const int64_t cls[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};   /* 12^3 = 1,728 classes */
    float *a = matrix(64, 64, 1), *b = matrix(64, 64, 2);
    int th = em_num_threads(), kept = 0;
    for (int i = 0; i < 12; i++)
        for (int j = 0; j < 12; j++)
            for (int l = 0; l < 12; l++) {
                em__gemm_pick(false, false, cls[i], cls[j], cls[l], a, 64, b, 64);
                kept += em__gemm_known(false, false, cls[i], cls[j], cls[l], th) != 0;
            }
    ck_assert_int_eq(kept, 1536);
    /* a class never seen: the rule's answer, and still not kept */
    int lib = em__gemm_pick(true, true, 40, 50, 60, a, 64, b, 64);
    ck_assert_int_eq(lib, em__gemm_prefers_onednn(true, true, 40, 50, 60) ? EM__GEMM_ONEDNN : EM__GEMM_OPENBLAS);
    ck_assert_int_eq(em__gemm_known(true, true, 40, 50, 60, th), 0);
    /* measured (so written to the file): the 1,536 kept classes only */
    char *text = tu_read_file(em__gemm_cache_file(), NULL);
    ck_assert_int_eq(tu_count_of(text, "\nf32 "), 1536);
    free(text);
    free(a), free(b);
}
END_TEST

/* Two processes meeting a new class together agree, and measure it once. */
START_TEST(racing_processes_agree)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    int fds[2][2];
    pid_t pid[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pipe(fds[i]), 0);
        pid[i] = fork();
        ck_assert_int_ge(pid[i], 0);
        if (pid[i] == 0) {
            em__gemm_forget();
            float *a = matrix(500, 600, 9), *b = matrix(600, 700, 10);
            char r = (char)em__gemm_pick(false, false, 500, 700, 600, a, 600, b, 700);
            _exit(write(fds[i][1], &r, 1) == 1 ? 0 : 1);
        }
        close(fds[i][1]);
    }
    char got[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        int st;
        ck_assert_int_eq(read(fds[i][0], &got[i], 1), 1);
        close(fds[i][0]);
        ck_assert_int_eq(waitpid(pid[i], &st, 0), pid[i]);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    ck_assert_int_eq(got[0], got[1]);
    char *text = tu_read_file(path, NULL);
    ck_assert_msg(tu_count_of(text, "f32 NN 512 768 768 ") == 1, "file:\n%s", text);
    free(text);
}
END_TEST
#endif

/* A cache directory that cannot be made: choices stay in memory, results stay right. */
START_TEST(unwritable_dir_in_memory)
{
    tu_write_text(tu_scratch_path("a-file"), "x");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/sub", tu_scratch_path("a-file"));   /* below a regular file */
    use_dir(dir);
    float *a = matrix(64, 64, 1), *b = matrix(64, 64, 2), c[64 * 64];
    em_cpu_gemm(EM_GEMM_F32, false, false, 64, 64, 64, 1.0, a, 64, b, 64, 0.0, c, 64);
    double s = 0;
    for (int p = 0; p < 64; p++) s += (double)a[p] * b[p * 64];
    ck_assert_msg(fabs(c[0] - s) < 1e-4, "%g vs %g", c[0], s);
    ck_assert_str_eq(em__gemm_cache_file(), "");
    use_dir("none");
    ck_assert_str_eq(em__gemm_cache_file(), "");
    free(a), free(b);
}
END_TEST

/* A cache directory path too long for the picker's buffers: refused by the
 * variable's name, choices in memory (never a silently cut, other directory). */
START_TEST(long_cache_dir_refused)
{
    char dir[4200];
    int n = snprintf(dir, sizeof dir, "%s/", tu_scratch_path("long"));
    while (n < 4100) n += snprintf(dir + n, sizeof dir - (size_t)n, "d123456789/");
    snprintf(dir + n, sizeof dir - (size_t)n, "wanted");
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    use_dir(dir);
    const char *path = em__gemm_cache_file();
    char *err = tu_capture_stderr_end();
    ck_assert_str_eq(path, "");
    ck_assert_msg(err && strstr(err, "EMBER_CACHE_DIR") && strstr(err, "stay in memory"), "stderr: %s",
                  err ? err : "");
    ck_assert_msg(access(tu_scratch_path("long"), F_OK) != 0, "a cut path was made");
    free(err);
}
END_TEST

#if EMBER_HAVE_ONEDNN
/* A file whose last line lacks its newline (a run killed mid-write, an
 * editor): the next choice goes on a line of its own, and both classes are
 * read back. */
START_TEST(unterminated_last_line_kept_apart)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    int th = em_num_threads();
    char text[256];
    snprintf(text, sizeof text, "f32 NN 64 64 64 %d openblas 5.7 7", th);   /* no newline */
    tu_write_text(path, text);
    em__gemm_forget();
    float *a = matrix(200, 200, 1), *b = matrix(200, 200, 2);
    em__gemm_pick(false, false, 200, 200, 200, a, 200, b, 200);   /* measured and appended */
    char *now = tu_read_file(path, NULL);
    ck_assert_msg(!strncmp(now, text, strlen(text)) && now[strlen(text)] == '\n' &&
                      !strncmp(now + strlen(text) + 1, "f32 NN 256 256 256 ", 19),
                  "file:\n%s", now);
    free(now);
    em__gemm_forget();
    em__gemm_pick(false, false, 60, 60, 60, a, 60, b, 60);   /* a miss: reads the file */
    ck_assert_int_eq(em__gemm_known(false, false, 64, 64, 64, th), EM__GEMM_OPENBLAS);
    ck_assert_int_ne(em__gemm_known(false, false, 200, 200, 200, th), 0);
    free(a), free(b);
}
END_TEST

/* Lines longer than the parser's buffer count once, with their right
 * numbers; a long comment's tail is no choice; warnings come once per
 * process, not once per miss; a thread count past int is refused. */
START_TEST(long_lines_numbered_and_warned_once)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    int th = em_num_threads();
    char text[2048];
    int n = snprintf(text, sizeof text, "#");
    memset(text + n, '#', 510), n += 510;
    n += snprintf(text + n, sizeof text - (size_t)n, "f32 NN 64 64 64 %d onednn 1 2\n", th);   /* still the comment */
    memset(text + n, 'x', 600), n += 600;
    n += snprintf(text + n, sizeof text - (size_t)n, "\nbogus\nf32 NN 64 64 64 4294967298 onednn 1 2\n");
    tu_write_text(path, text);
    em__gemm_forget();
    float *a = matrix(64, 64, 1), *b = matrix(64, 64, 2);
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    em__gemm_pick(false, false, 64, 64, 64, a, 64, b, 64);
    em__gemm_pick(true, false, 64, 64, 64, a, 64, b, 64);   /* a second miss re-reads the file */
    char *err = tu_capture_stderr_end();
    char where[3][4300];
    for (int i = 0; i < 3; i++) snprintf(where[i], sizeof where[i], "%s:%d: not a GEMM choice line", path, i + 2);
    ck_assert_msg(err && tu_count_of(err, "not a GEMM choice line") == 3 && strstr(err, where[0]) &&
                      strstr(err, where[1]) && strstr(err, where[2]),
                  "stderr: %s", err ? err : "");
    /* the class was measured, not taken from the comment's tail or the bad thread count */
    char *now = tu_read_file(path, NULL);
    ck_assert_int_eq(tu_count_of(now, "\nf32 NN 64 64 64 "), 2);   /* the bad line and the measured one */
    free(now), free(err);
    free(a), free(b);
}
END_TEST

/* Something at the path that is not a regular file (a FIFO: reading it would
 * block for ever): said once, choices in memory, results right. */
START_TEST(fifo_at_cache_path)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    ck_assert_int_eq(mkfifo(path, 0644), 0);
    float *a = matrix(64, 64, 1), *b = matrix(64, 64, 2), c[64 * 64];
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    em_cpu_gemm(EM_GEMM_F32, false, false, 64, 64, 64, 1.0, a, 64, b, 64, 0.0, c, 64);
    em_cpu_gemm(EM_GEMM_F32, true, false, 64, 64, 64, 1.0, a, 64, b, 64, 0.0, c, 64);
    char *err = tu_capture_stderr_end();
    ck_assert_msg(err && tu_count_of(err, "not a regular file") == 1 && strstr(err, path), "stderr: %s",
                  err ? err : "");
    double s = 0;
    for (int p = 0; p < 64; p++) s += (double)a[p * 64] * b[p * 64];
    ck_assert_msg(fabs(c[0] - s) < 1e-4, "%g vs %g", c[0], s);
    ck_assert_int_ne(em__gemm_known(true, false, 64, 64, 64, em_num_threads()), 0);   /* kept in memory */
    free(err), free(a), free(b);
}
END_TEST

/* A table the file fills (1,536 classes) answers a new class with the fixed
 * rule, the same way every call, and neither measures nor writes it. */
START_TEST(full_table_from_file_measures_nothing)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    static const int64_t cls[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
    int th = em_num_threads(), lines = 0;
    size_t cap = 1536 * 64;
    char *text = malloc(cap);
    size_t n = 0;
    for (int i = 0; i < 12 && lines < 1536; i++)
        for (int j = 0; j < 12 && lines < 1536; j++)
            for (int l = 0; l < 12 && lines < 1536; l++, lines++)
                n += (size_t)snprintf(text + n, cap - n, "f32 NN %lld %lld %lld %d onednn 1 2\n", (long long)cls[i],
                                      (long long)cls[j], (long long)cls[l], th);
    tu_write_text(path, text);
    em__gemm_forget();
    float *a = matrix(200, 200, 1), *b = matrix(200, 200, 2);
    int want = em__gemm_prefers_onednn(false, true, 200, 200, 200) ? EM__GEMM_ONEDNN : EM__GEMM_OPENBLAS;
    for (int r = 0; r < 3; r++) ck_assert_int_eq(em__gemm_pick(false, true, 200, 200, 200, a, 200, b, 200), want);
    char *now = tu_read_file(path, NULL);
    ck_assert_str_eq(now, text);
    free(now), free(text), free(a), free(b);
}
END_TEST

/* A write that fails part way (the file-size limit here; a full disk alike)
 * leaves no half line: the file is cut back, said once, the choice kept in
 * memory. In a child, whose limit and signal mask are its own. */
START_TEST(failed_write_leaves_no_half_line)
{
    use_dir(tu_scratch_path("cache"));
    const char *path = em__gemm_cache_file();
    char head[1100] = "#";
    memset(head + 1, '#', 1000);
    head[1001] = '\n', head[1002] = 0;
    tu_write_text(path, head);
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {.rlim_cur = 1010, .rlim_max = RLIM_INFINITY};
        setrlimit(RLIMIT_FSIZE, &rl);
        em__gemm_forget();
        float *a = matrix(200, 200, 1), *b = matrix(200, 200, 2);
        int lib = em__gemm_pick(false, false, 200, 200, 200, a, 200, b, 200);
        _exit(lib != 0 && em__gemm_known(false, false, 200, 200, 200, em_num_threads()) == lib ? 0 : 3);
    }
    close(fds[1]);
    char err[4096] = "";
    ssize_t got = 0, r;
    while ((r = read(fds[0], err + got, sizeof err - 1 - (size_t)got)) > 0) got += r;
    close(fds[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d, stderr: %s", st, err);
    ck_assert_msg(strstr(err, "cannot be written to") && strstr(err, path), "stderr: %s", err);
    char *now = tu_read_file(path, NULL);
    ck_assert_str_eq(now, head);
    free(now);
}
END_TEST
#endif

/* bf16 A and B, f32 C = or += op(A) op(B) on one library, against an f64 sum
 * of the same (bf16-valued) products: only the f32 summation differs. */
static void check_bf16_library(int lib)
{
    const int64_t M = 33, N = 48, K = 80, pad = 3;
    uint64_t seed = 21;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
            int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb;
            uint16_t *a = malloc(sizeof(uint16_t) * (size_t)na), *b = malloc(sizeof(uint16_t) * (size_t)nb);
            for (int64_t i = 0; i < na; i++) a[i] = em__f32_to_bf16((float)tu_uniform(&seed, -1, 1));
            for (int64_t i = 0; i < nb; i++) b[i] = em__f32_to_bf16((float)tu_uniform(&seed, -1, 1));
            float *c0 = matrix(M, ldc, 23), *c = malloc(sizeof(float) * M * ldc);
            for (int acc = 0; acc < 2; acc++) {
                memcpy(c, c0, sizeof(float) * M * ldc);
                ck_assert_int_eq(em__gemm_bf16_f32_with(lib, ta, tb, M, N, K, a, lda, b, ldb, c, ldc, acc), EM_OK);
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        double sum = 0, abs = 0;
                        for (int64_t p = 0; p < K; p++) {
                            double x = em__bf16_to_f32(a[ta ? p * lda + i : i * lda + p]);
                            double y = em__bf16_to_f32(b[tb ? j * ldb + p : p * ldb + j]);
                            sum += x * y;
                            abs += fabs(x * y);
                        }
                        double want = sum + acc * (double)c0[i * ldc + j];
                        ck_assert_msg(fabs(c[i * ldc + j] - want) <= 1e-5 * (abs + 1),
                                      "bf16 lib %d ta %d tb %d acc %d (%lld,%lld): %g, want %g", lib, ta, tb, acc,
                                      (long long)i, (long long)j, c[i * ldc + j], want);
                    }
            }
            free(a), free(b), free(c0), free(c);
        }
}

/* EMBER_MKL naming nothing loadable: said once on stderr (naming the path),
 * oneMKL stays off, the choices' file is the one of the Debian libraries, and
 * a GEMM asked of oneMKL runs on OpenBLAS. */
START_TEST(mkl_bad_path_stays_off)
{
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/no-such-mkl", tu_scratch_path("x"));
    setenv("EMBER_MKL", bad, 1);
    setenv("EMBER_GEMM", "auto", 1);   /* under valgrind mkl.c would not even try without it */
    ck_assert_int_eq(tu_capture_stderr_begin(), 0);
    bool on = em__mkl_available();
    char *err = tu_capture_stderr_end();
    ck_assert(!on);
    ck_assert_msg(err && strstr(err, bad) && tu_count_of(err, "oneMKL stays off") == 1, "stderr: %s", err ? err : "");
    ck_assert_msg(strstr(em__mkl_status(), bad), "status: %s", em__mkl_status());
    ck_assert_str_eq(em__mkl_version(), "");
    char id[2048];
    em__gemm_identity(id, sizeof id);
    ck_assert_msg(!strstr(id, "mkl="), "identity: %s", id);
    check_gemm(EM__GEMM_MKL, 37, 53, 71, 5);
    free(err);
}
END_TEST

/* EMBER_MKL=0 turns oneMKL off whatever the build says. */
START_TEST(mkl_off_by_env)
{
    setenv("EMBER_MKL", "0", 1);
    ck_assert(!em__mkl_available());
    ck_assert_msg(strstr(em__mkl_status(), "off (EMBER_MKL=0)"), "status: %s", em__mkl_status());
}
END_TEST

/* Asked for (the build's -Dmkl_root or EMBER_MKL): it loads, computes right,
 * names itself in the choices' file (identity, header, a fourth timing per
 * line) and a planted "mkl" choice is the one used. */
START_TEST(mkl_loaded_where_asked)
{
    ck_assert_msg(em__mkl_available(), "oneMKL asked for but not loaded: %s", em__mkl_status());
    ck_assert(em__mkl_version()[0]);
    check_gemm(EM__GEMM_MKL, 37, 53, 71, 5);
    check_bf16_library(EM__GEMM_MKL);
    if (em__gemm_mode() != EM__GEMM_AUTO) return;
    use_dir(tu_scratch_path("cache"));
    float *a = matrix(70, 110, 1), *b = matrix(110, 90, 2), c[70 * 90];
    em_cpu_gemm(EM_GEMM_F32, false, false, 70, 90, 110, 1.0, a, 110, b, 90, 0.0, c, 90);
    const char *path = em__gemm_cache_file();
    char *text = tu_read_file(path, NULL);
    ck_assert_msg(strstr(text, "; mkl=") && strstr(text, " us_mkl "), "file:\n%s", text);
    char win[16];
    double t[3];
    const char *line = strstr(text, "\nf32 NN 96 96 128 ");
    ck_assert_msg(line && sscanf(line + 1, "f32 NN 96 96 128 %*d %15s %lf %lf %lf", win, &t[0], &t[1], &t[2]) == 4 &&
                  t[2] > 0, "file:\n%s", text);
    free(text);
    /* a bf16 call with an f32 C is picked too: oneDNN against oneMKL (no OpenBLAS timing) */
    if (em_cpu_gemm_bf16_fast()) {
        uint16_t ab[64 * 96] = {0}, bb[96 * 80] = {0};
        float cb[64 * 80];
        ck_assert_int_eq(em_cpu_gemm_bf16(false, false, 64, 80, 96, ab, 96, bb, 80, cb, EM_F32, 80), EM_OK);
        text = tu_read_file(path, NULL);
        line = strstr(text, "\nbf16 NN 64 96 96 ");
        ck_assert_msg(line && sscanf(line + 1, "bf16 NN 64 96 96 %*d %15s %lf %lf %lf", win, &t[0], &t[1], &t[2]) == 4 &&
                      t[0] == 0 && t[1] > 0 && t[2] > 0 && (!strcmp(win, "onednn") || !strcmp(win, "mkl")),
                      "file:\n%s", text);
        free(text);
    }
    char planted[256];
    snprintf(planted, sizeof planted, "f32 NN 256 512 384 %d mkl 3.0 2.0 1.0\nbf16 NN 256 512 384 %d mkl 0 2.0 1.0\n",
             em_num_threads(), em_num_threads());
    tu_write_text(path, planted);
    em__gemm_forget();
    float *a2 = matrix(200, 300, 3), *b2 = matrix(300, 400, 4);
    ck_assert_int_eq(em__gemm_pick(false, false, 200, 400, 300, a2, 300, b2, 400), EM__GEMM_MKL);
    ck_assert_int_eq(em__gemm_pick_bf16(false, false, 200, 400, 300, a2, 300, b2, 400), EM__GEMM_MKL);
    free(a), free(b), free(a2), free(b2);
}
END_TEST

/* oneMKL is asked for: the environment names it, else the build does. */
static bool mkl_asked(void)
{
    const char *e = getenv("EMBER_MKL");
    if (e && *e) return strcmp(e, "0") && strcmp(e, "off") && strcmp(e, "no") && strcmp(e, "none");
    return EMBER_MKL_DEFAULT[0] != 0;
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("gemm_pick");
    TCase *tc = tu_scratch_per_test(tu_case(s, "gemm_pick", 0), "gemm-pick");
    tu_add_tests(tc, size_classes, auto_results_and_file, unwritable_dir_in_memory, long_cache_dir_refused,
                 mkl_bad_path_stays_off, mkl_off_by_env);
    if (mkl_asked())
        tu_add_tests(tc, mkl_loaded_where_asked);
    else
        printf("test_gemm_pick: mkl_loaded_where_asked not run: oneMKL not asked for (EMBER_MKL, meson -Dmkl_root)\n");
#if EMBER_HAVE_ONEDNN
    tu_add_tests(tc, choice_is_a_function_of_the_file, bad_lines_skipped);
    /* these measure, which runs oneDNN: not under valgrind (em__gemm_mode is then
     * OpenBLAS-only, since memcheck flags oneDNN's JIT kernels) */
    if (em__gemm_mode() == EM__GEMM_AUTO)
        tu_add_tests(tc, racing_processes_agree, full_table_falls_back_to_rule, full_table_from_file_measures_nothing,
                     unterminated_last_line_kept_apart, long_lines_numbered_and_warned_once, fifo_at_cache_path,
                     failed_write_leaves_no_half_line);
    else
        printf("test_gemm_pick: the tests that measure (racing processes, full tables, the file's hazards) not run: "
               "oneDNN is off (valgrind or EMBER_GEMM)\n");
#endif
    return s;
}

int main(void)
{
    unsetenv("EMBER_GEMM");   /* auto, the default */
    return tu_run_suite(make_suite());
}
