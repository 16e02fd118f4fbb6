/* ember tests — the progress bar and the JSONL logger (distributed.h,
 * "progress and logging"), in a world of one: the line format (percent, bar,
 * counts, elapsed<ETA, rate, loss), the rate/ETA arithmetic against an
 * injected clock, when plain (non-terminal) mode prints, the terminal
 * redraw, and the logger's lines, escaping, null for NaN, appending, and the
 * error naming the path; the TensorBoard event file, read back with a decoder
 * written here (bitwise CRC-32C, a generic protobuf walk). */
#include "check_util.h"
#include "distributed/distributed.h"
#include "tensor/tensor_internal.h"   /* em__crc32c */

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
    static const struct {
        const char *desc;
        int64_t n, total;
        double elapsed, loss;
        int width;
        const char *want;
    } cases[] = {
        /* 420 of 1000 in 12 s: 35 it/s, 580 left -> 16.57 s -> "00:17" */
        {"train", 420, 1000, 12.0, 0.43214, 10,
         "train   42% |\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | 420/1000 [00:12<00:17, 35.0 it/s, loss=0.4321]"},
        {"train", 420, 1000, 12.0, NAN, 0, "train   42% 420/1000 [00:12<00:17, 35.0 it/s]"},
        /* hours, and an unknown total */
        {"e", 10, 100, 3700.0, NAN, 0, "e   10% 10/100 [1:01:40<9:15:00, 0.0 it/s]"},
        {"", 7, 0, 2.0, 1.5, 10, "7it [00:02, 3.5 it/s, loss=1.5000]"},
        /* no time elapsed yet: rate and ETA unknown */
        {"x", 0, 5, 0.0, NAN, 0, "x    0% 0/5 [00:00<?, ? it/s]"},
        /* a full bar */
        {"x", 5, 5, 1.0, NAN, 2, "x  100% |\xe2\x96\x88\xe2\x96\x88| 5/5 [00:01<00:00, 5.0 it/s]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char buf[512];
        em_progress_format(buf, sizeof buf, cases[i].desc, cases[i].n, cases[i].total, cases[i].elapsed, cases[i].loss,
                           cases[i].width);
        ck_assert_str_eq(buf, cases[i].want);
    }
}
END_TEST

/* What a plain-mode (not a terminal) progress of total items prints when it
 * starts at fake time t0 and gets `updates` updates of one item, dt apart (the
 * last with last_loss), then is freed. A malloc'd string. */
static char *plain_run(int64_t total, const char *desc, double t0, double dt, int updates, double last_loss)
{
    FILE *f = tmpfile();
    fake_now = t0;
    em_progress *p = em_progress_new_opts(NULL, total, desc, &(em_progress_opts){.out = f, .tty = -1, .clock = fake_clock});
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < updates; i++) {
        fake_now += dt;
        em_progress_update(p, 1, i == updates - 1 ? last_loss : NAN);
    }
    em_progress_free(p);
    char *s = slurp(f);
    fclose(f);
    return s;
}

START_TEST(plain_mode_every_ten_percent)
{
    char *s = plain_run(100, "ep", 100.0, 0.5, 100, 0.25);   /* finished: the free prints nothing more */
    ck_assert_int_eq(count_lines(s), 10);   /* 10%, 20%, ..., 100% */
    ck_assert_ptr_null(strchr(s, '\r'));
    ck_assert_msg(strstr(s, "ep   10% 10/100 [00:05<00:45, 2.0 it/s]\n") == s, "got: %s", s);
    ck_assert_msg(strstr(s, "ep  100% 100/100 [00:50<00:00, 2.0 it/s, loss=0.2500]\n"), "got: %s", s);
    free(s);
}
END_TEST

START_TEST(plain_mode_every_30_seconds)
{
    /* 20 updates, 10 s apart, 1 item each: never a new 10%; unfinished, the free
     * prints where it stopped (20 not yet printed) */
    char *s = plain_run(1000, "slow", 0.0, 10.0, 20, NAN);
    /* at 30, 60, 90, ..., 180 s (6 lines: 3, 6, ..., 18 items), then the final 20 */
    ck_assert_int_eq(count_lines(s), 7);
    ck_assert_msg(strstr(s, "slow    0% 3/1000 [00:30<2:46:10, 0.1 it/s]\n") == s, "got: %s", s);
    ck_assert_msg(strstr(s, "slow    2% 20/1000 [03:20<2:43:20, 0.1 it/s]\n"), "got: %s", s);
    free(s);
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
    char *s = tu_read_file(path, NULL);
    ck_assert_str_eq(s, "{\"step\": 1, \"loss\": 0.5, \"lr\": 2.0000000000000002e-05}\n"
                        "{\"step\": 2, \"loss\": null, \"lr\": null, \"we\\\"ird\\\\name\\u000a\": 0.10000000000000001}\n"
                        "{\"step\": 3}\n");
    free(s);
    em_logger_free(lg);
    /* a new logger appends */
    lg = em_logger_new(NULL, path);
    ck_assert_int_eq(em_logger_log(lg, 4, 1, names, (double[]){-1.25}), EM_OK);
    ck_assert_int_eq(em_logger_log_scalar(lg, 5, "acc", 0.75), EM_OK);   /* one name, one value */
    em_logger_free(lg);
    s = tu_read_file(path, NULL);
    ck_assert_int_eq(count_lines(s), 5);
    ck_assert_msg(strstr(s, "{\"step\": 3}\n{\"step\": 4, \"loss\": -1.25}\n{\"step\": 5, \"acc\": 0.75}\n"), "got: %s", s);
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

/* ---- TensorBoard event files ------------------------------------------------------------- */
/* CRC-32C bit by bit (the library's is table-driven). */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}
static uint32_t unmask(uint32_t m)
{
    uint32_t r = m - 0xa282ead8u;
    return (r >> 17) | (r << 15);
}
static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t varint(const unsigned char **p, const unsigned char *end)
{
    uint64_t v = 0;
    for (int s = 0; *p < end; s += 7) {
        unsigned char b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
    ck_abort_msg("truncated varint");
    return 0;
}

/* What one Event record holds (the fields ember writes). */
typedef struct {
    double wall;
    int64_t step;
    char version[32];
    int n;
    char tags[4][32];
    float values[4];
} tb_event;

static void parse_value(const unsigned char *p, const unsigned char *end, tb_event *e)
{
    ck_assert_int_lt(e->n, 4);
    while (p < end) {
        uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 2)) {
            uint64_t n = varint(&p, end);
            ck_assert(n < 32 && p + n <= end);
            memcpy(e->tags[e->n], p, n);
            e->tags[e->n][n] = 0;
            p += n;
        } else if (key == (2 << 3 | 5)) {
            uint32_t b = (uint32_t)le(p, 4);
            memcpy(&e->values[e->n], &b, 4);
            p += 4;
        } else {
            ck_abort_msg("unexpected Summary.Value key %llu", (unsigned long long)key);
        }
    }
    e->n++;
}

static void parse_event(const unsigned char *p, const unsigned char *end, tb_event *e)
{
    memset(e, 0, sizeof *e);
    while (p < end) {
        uint64_t key = varint(&p, end);
        if (key == (1 << 3 | 1)) {
            uint64_t b = le(p, 8);
            memcpy(&e->wall, &b, 8);
            p += 8;
        } else if (key == (2 << 3 | 0)) {
            e->step = (int64_t)varint(&p, end);
        } else if (key == (3 << 3 | 2)) {
            uint64_t n = varint(&p, end);
            ck_assert(n < 32 && p + n <= end);
            memcpy(e->version, p, n);
            p += n;
        } else if (key == (5 << 3 | 2)) {
            uint64_t n = varint(&p, end);
            const unsigned char *s = p, *se = p + n;
            ck_assert(se <= end);
            while (s < se) {
                ck_assert_int_eq(varint(&s, se), 1 << 3 | 2);   /* Summary.value */
                uint64_t vn = varint(&s, se);
                parse_value(s, s + vn, e);
                s += vn;
            }
            p = se;
        } else {
            ck_abort_msg("unexpected Event key %llu", (unsigned long long)key);
        }
    }
}

/* Every record of the file at path, checked frame by frame; returns the count. */
static int read_events(const char *path, tb_event *out, int cap)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char hdr[12], *data = NULL;
    int n = 0;
    while (fread(hdr, 1, 12, f) == 12) {
        uint64_t len = le(hdr, 8);
        ck_assert_uint_eq(unmask((uint32_t)le(hdr + 8, 4)), crc32c_bitwise(hdr, 8));
        data = realloc(data, len + 4);
        ck_assert_uint_eq(fread(data, 1, len + 4, f), len + 4);
        ck_assert_uint_eq(unmask((uint32_t)le(data + len, 4)), crc32c_bitwise(data, len));
        ck_assert_int_lt(n, cap);
        parse_event(data, data + len, &out[n++]);
    }
    ck_assert(feof(f));
    free(data);
    fclose(f);
    return n;
}

START_TEST(crc32c_vectors)
{
    /* RFC 3720, appendix B.4, and the classic check value */
    unsigned char b[32];
    memset(b, 0, 32);
    ck_assert_uint_eq(em__crc32c(b, 32), 0x8a9136aau);
    memset(b, 0xff, 32);
    ck_assert_uint_eq(em__crc32c(b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++) b[i] = (unsigned char)i;
    ck_assert_uint_eq(em__crc32c(b, 32), 0x46dd794eu);
    ck_assert_uint_eq(em__crc32c("123456789", 9), 0xe3069283u);
    ck_assert_uint_eq(crc32c_bitwise((const unsigned char *)"123456789", 9), 0xe3069283u);
}
END_TEST

START_TEST(tensorboard_events)
{
    const char *dir = tu_scratch_new("tb");
    ck_assert_ptr_nonnull(dir);
    char logdir[600];
    snprintf(logdir, sizeof logdir, "%s/run1", dir);   /* created by the writer */
    em_tb_writer *w = em_tb_writer_new(NULL, logdir);
    ck_assert_msg(w, "%s", em_last_error());
    const char *path = em_tb_writer_path(w);
    ck_assert_msg(strncmp(path, logdir, strlen(logdir)) == 0 && strstr(path, "/events.out.tfevents."), "%s", path);
    const char *names[] = {"train/loss", "lr", "dev/accuracy"};
    ck_assert_int_eq(em_tb_writer_add_scalars(w, 1, 2, names, (double[]){0.6931, 2e-5}), EM_OK);
    ck_assert_int_eq(em_tb_writer_add_scalars(w, 300, 1, names + 2, (double[]){0.8016}), EM_OK);
    ck_assert_int_eq(em_tb_writer_add_scalars(w, 1LL << 40, 1, names, (double[]){-1.5}), EM_OK);
    ck_assert_int_eq(em_tb_writer_add_scalar(w, 7, "eval/f1", 0.5), EM_OK);   /* add_scalar(tag, value, step) */
    tb_event ev[8];
    int n = read_events(path, ev, 8);   /* readable before the writer is freed */
    ck_assert_int_eq(n, 5);
    ck_assert(ev[4].step == 7 && ev[4].n == 1 && ev[4].values[0] == 0.5f);
    ck_assert_str_eq(ev[4].tags[0], "eval/f1");
    ck_assert_str_eq(ev[0].version, "brain.Event:2");
    ck_assert_int_eq(ev[0].n, 0);
    ck_assert(ev[0].wall > 1.7e9);   /* seconds since 1970, now */
    ck_assert_int_eq(ev[1].step, 1);
    ck_assert_int_eq(ev[1].n, 2);
    ck_assert_str_eq(ev[1].tags[0], "train/loss");
    ck_assert_str_eq(ev[1].tags[1], "lr");
    ck_assert(ev[1].values[0] == 0.6931f && ev[1].values[1] == 2e-5f);
    ck_assert(ev[2].step == 300 && ev[2].n == 1 && ev[2].values[0] == 0.8016f);
    ck_assert_str_eq(ev[2].tags[0], "dev/accuracy");
    ck_assert(ev[3].step == 1LL << 40 && ev[3].values[0] == -1.5f);
    ck_assert(ev[3].wall >= ev[1].wall);
    em_tb_writer_free(w);
    ck_assert_int_eq(tu_scratch_remove(), 0);
}
END_TEST

START_TEST(tensorboard_errors_name_the_path)
{
    em_clear_error();
    ck_assert_ptr_null(em_tb_writer_new(NULL, "/nonexistent-dir-ember/runs/x"));
    ck_assert_int_eq(em_last_status(), EM_ERR_IO);
    ck_assert_msg(strstr(em_last_error(), "/nonexistent-dir-ember/runs/x"), "got: %s", em_last_error());
    em_tb_writer_free(NULL);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("progress");
    tu_add_tests(tu_case(s, "progress", 0), format_line, plain_mode_every_ten_percent,
                 plain_mode_every_30_seconds, tty_mode_redraws, free_null_and_unused);
    tu_add_tests(tu_case(s, "logger", 0), logger_lines, logger_errors_name_the_path, crc32c_vectors,
                 tensorboard_events, tensorboard_errors_name_the_path);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
