/* ember tests — the progress bar and the JSONL logger (distributed.h,
 * "progress and logging"), in a world of one: the line format (percent, bar,
 * counts, elapsed<ETA, rate, loss), the rate/ETA arithmetic against an
 * injected clock, when plain (non-terminal) mode prints, the terminal
 * redraw, and the logger's lines, escaping, null for NaN, appending, and the
 * error naming the path. */
#include "check_util.h"
#include "distributed/distributed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double fake_now;
static double fake_clock(void *user)
{
    (void)user;
    return fake_now;
}

/* Everything written to f so far, as a malloc'd string. */
static char *slurp(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    char *s = calloc((size_t)n + 1, 1);
    rewind(f);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    fseek(f, 0, SEEK_END);
    return s;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

START_TEST(format_line)
{
    char buf[512];
    /* 420 of 1000 in 12 s: 35 it/s, 580 left -> 16.57 s -> "00:17" */
    em_progress_format(buf, sizeof buf, "train", 420, 1000, 12.0, 0.43214, 10);
    ck_assert_str_eq(buf, "train   42% |\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | 420/1000 [00:12<00:17, 35.0 it/s, loss=0.4321]");
    em_progress_format(buf, sizeof buf, "train", 420, 1000, 12.0, NAN, 0);
    ck_assert_str_eq(buf, "train   42% 420/1000 [00:12<00:17, 35.0 it/s]");
    /* hours, and an unknown total */
    em_progress_format(buf, sizeof buf, "e", 10, 100, 3700.0, NAN, 0);
    ck_assert_str_eq(buf, "e   10% 10/100 [1:01:40<9:15:00, 0.0 it/s]");
    em_progress_format(buf, sizeof buf, "", 7, 0, 2.0, 1.5, 10);
    ck_assert_str_eq(buf, "7it [00:02, 3.5 it/s, loss=1.5000]");
    /* no time elapsed yet: rate and ETA unknown */
    em_progress_format(buf, sizeof buf, "x", 0, 5, 0.0, NAN, 0);
    ck_assert_str_eq(buf, "x    0% 0/5 [00:00<?, ? it/s]");
    /* a full bar */
    em_progress_format(buf, sizeof buf, "x", 5, 5, 1.0, NAN, 2);
    ck_assert_str_eq(buf, "x  100% |\xe2\x96\x88\xe2\x96\x88| 5/5 [00:01<00:00, 5.0 it/s]");
}
END_TEST

START_TEST(plain_mode_every_ten_percent)
{
    FILE *f = tmpfile();
    fake_now = 100.0;
    em_progress *p = em_progress_new_opts(NULL, 100, "ep", &(em_progress_opts){.out = f, .tty = -1, .clock = fake_clock});
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 100; i++) {
        fake_now += 0.5;
        em_progress_update(p, 1, i == 99 ? 0.25 : NAN);
    }
    em_progress_free(p);   /* finished: prints nothing more */
    char *s = slurp(f);
    ck_assert_int_eq(count_lines(s), 10);   /* 10%, 20%, ..., 100% */
    ck_assert_ptr_null(strchr(s, '\r'));
    ck_assert_msg(strstr(s, "ep   10% 10/100 [00:05<00:45, 2.0 it/s]\n") == s, "got: %s", s);
    ck_assert_msg(strstr(s, "ep  100% 100/100 [00:50<00:00, 2.0 it/s, loss=0.2500]\n"), "got: %s", s);
    free(s);
    fclose(f);
}
END_TEST

START_TEST(plain_mode_every_30_seconds)
{
    FILE *f = tmpfile();
    fake_now = 0.0;
    em_progress *p = em_progress_new_opts(NULL, 1000, "slow", &(em_progress_opts){.out = f, .tty = -1, .clock = fake_clock});
    for (int i = 0; i < 20; i++) {   /* 20 updates, 10 s apart, 1 item each: never a new 10% */
        fake_now += 10.0;
        em_progress_update(p, 1, NAN);
    }
    em_progress_free(p);   /* unfinished: prints where it stopped (20 not yet printed) */
    char *s = slurp(f);
    /* at 30, 60, 90, ..., 180 s (6 lines: 3, 6, ..., 18 items), then the final 20 */
    ck_assert_int_eq(count_lines(s), 7);
    ck_assert_msg(strstr(s, "slow    0% 3/1000 [00:30<2:46:10, 0.1 it/s]\n") == s, "got: %s", s);
    ck_assert_msg(strstr(s, "slow    2% 20/1000 [03:20<2:43:20, 0.1 it/s]\n"), "got: %s", s);
    free(s);
    fclose(f);
}
END_TEST

START_TEST(tty_mode_redraws)
{
    FILE *f = tmpfile();
    fake_now = 0.0;
    em_progress *p = em_progress_new_opts(NULL, 4, "t", &(em_progress_opts){.out = f, .tty = 1, .clock = fake_clock});
    fake_now = 1.0;
    em_progress_update(p, 1, 2.0);
    fake_now = 1.05;   /* within 0.1 s of the last draw: not redrawn */
    em_progress_update(p, 1, NAN);
    fake_now = 2.0;
    em_progress_update(p, 2, 1.0);   /* done: drawn, then a newline */
    em_progress_update(p, 1, 1.0);   /* ignored */
    em_progress_free(p);
    char *s = slurp(f);
    ck_assert_int_eq(count_lines(s), 1);
    int crs = 0;
    for (const char *c = s; *c; c++) crs += *c == '\r';
    ck_assert_int_eq(crs, 2);
    ck_assert_msg(strstr(s, "\rt   25% |\xe2\x96\x88\xe2\x96\x88        | 1/4 [00:01<00:03, 1.0 it/s, loss=2.0000]\033[K"), "got: %s", s);
    ck_assert_msg(strstr(s, "\rt  100% |"), "got: %s", s);
    ck_assert_msg(strstr(s, "| 4/4 [00:02<00:00, 2.0 it/s, loss=1.0000]\033[K\n"), "got: %s", s);
    free(s);
    fclose(f);
}
END_TEST

START_TEST(free_null_and_unused)
{
    em_progress_free(NULL);
    FILE *f = tmpfile();
    em_progress *p = em_progress_new_opts(NULL, 10, "u", &(em_progress_opts){.out = f, .tty = -1, .clock = fake_clock});
    em_progress_free(p);   /* nothing done: prints nothing */
    char *s = slurp(f);
    ck_assert_str_eq(s, "");
    free(s);
    fclose(f);
}
END_TEST

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = calloc((size_t)n + 1, 1);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return s;
}

START_TEST(logger_lines)
{
    char path[] = "/tmp/ember_test_log_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    em_logger *lg = em_logger_new(NULL, path);
    ck_assert_ptr_nonnull(lg);
    const char *names[] = {"loss", "lr", "we\"ird\\name\n"};
    ck_assert_int_eq(em_logger_log(lg, 1, 2, names, (double[]){0.5, 2e-5}), EM_OK);
    ck_assert_int_eq(em_logger_log(lg, 2, 3, names, (double[]){NAN, INFINITY, 0.1}), EM_OK);
    ck_assert_int_eq(em_logger_log(lg, 3, 0, names, NULL), EM_OK);
    /* flushed at once: readable before the logger is freed */
    char *s = read_file(path);
    ck_assert_str_eq(s, "{\"step\": 1, \"loss\": 0.5, \"lr\": 2.0000000000000002e-05}\n"
                        "{\"step\": 2, \"loss\": null, \"lr\": null, \"we\\\"ird\\\\name\\u000a\": 0.10000000000000001}\n"
                        "{\"step\": 3}\n");
    free(s);
    em_logger_free(lg);
    /* a new logger appends */
    lg = em_logger_new(NULL, path);
    ck_assert_int_eq(em_logger_log(lg, 4, 1, names, (double[]){-1.25}), EM_OK);
    em_logger_free(lg);
    s = read_file(path);
    ck_assert_int_eq(count_lines(s), 4);
    ck_assert_msg(strstr(s, "{\"step\": 3}\n{\"step\": 4, \"loss\": -1.25}\n"), "got: %s", s);
    free(s);
    em_logger_free(NULL);
    unlink(path);
}
END_TEST

START_TEST(logger_errors_name_the_path)
{
    em_clear_error();
    em_logger *lg = em_logger_new(NULL, "/nonexistent-dir-ember/x.jsonl");
    ck_assert_ptr_null(lg);
    ck_assert_int_eq(em_last_status(), EM_ERR_IO);
    ck_assert_msg(strstr(em_last_error(), "/nonexistent-dir-ember/x.jsonl"), "got: %s", em_last_error());
    /* a write that fails (a full device) names the path too */
    if (access("/dev/full", W_OK) == 0) {
        lg = em_logger_new(NULL, "/dev/full");
        ck_assert_ptr_nonnull(lg);
        const char *names[] = {"loss"};
        ck_assert_int_eq(em_logger_log(lg, 1, 1, names, (double[]){1.0}), EM_ERR_IO);
        ck_assert_msg(strstr(em_last_error(), "/dev/full"), "got: %s", em_last_error());
        em_logger_free(lg);
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("progress");
    TCase *tc = tcase_create("progress");
    tcase_add_test(tc, format_line);
    tcase_add_test(tc, plain_mode_every_ten_percent);
    tcase_add_test(tc, plain_mode_every_30_seconds);
    tcase_add_test(tc, tty_mode_redraws);
    tcase_add_test(tc, free_null_and_unused);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("logger");
    tcase_add_test(tl, logger_lines);
    tcase_add_test(tl, logger_errors_name_the_path);
    suite_add_tcase(s, tl);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
