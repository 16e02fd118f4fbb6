/* ember — distributed/tracking/progress.c: a tqdm-like progress bar on the main process.
 *
 * Output goes to stderr (as tqdm's does), so a program's results on stdout
 * stay clean for whatever parses them. On a terminal the bar is one line
 * redrawn in place (at most every 0.1 s, and always on the last update);
 * elsewhere (a log file, a pipe, CI) a plain line is printed each time
 * another 10% is done or 30 s have passed since the last line, and at the end.
 *
 *   desc  42% |████      | 420/1000 [00:12<00:17, 34.5 it/s, loss=0.4321]
 *
 * The rate is the average since the bar was created (n / elapsed); the ETA
 * is (total - n) / rate. With total <= 0 the bar shows "420it [00:12, 34.5 it/s]". */
#include "distributed/tracking/tracking_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct em_progress {
    bool active;          /* false on ranks other than the main one: everything is a no-op */
    bool tty;
    FILE *out;
    double (*clock)(void *);
    void *clock_user;
    char *desc;
    int64_t total, n;
    double t0, last_print;
    int last_decile;      /* plain mode: the last 10% step printed */
    double loss;          /* the last loss given (NAN: none yet) */
    bool drawn, finished;
    int64_t drawn_n;      /* n at the last line drawn */
};

static double monotonic_s(void *user)
{
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void fmt_time(char *buf, size_t cap, double s)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, cap, "%02ld:%02ld", t / 60, t % 60);
}

int em_progress_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t total, double elapsed,
                       double loss, int bar_width)
{
    char el[32], eta[32], rate[32], lossbuf[32] = "";
    double r = elapsed > 0 ? (double)n / elapsed : NAN;
    fmt_time(el, sizeof el, elapsed);
    if (isfinite(r)) snprintf(rate, sizeof rate, "%.1f it/s", r);
    else snprintf(rate, sizeof rate, "? it/s");
    if (!isnan(loss)) snprintf(lossbuf, sizeof lossbuf, ", loss=%.4f", loss);
    const char *d = desc && *desc ? desc : "";
    const char *sep = *d ? "  " : "";
    if (total <= 0)
        return snprintf(buf, cap, "%s%s%" PRId64 "it [%s, %s%s]", d, sep, n, el, rate, lossbuf);
    int64_t shown = n < total ? n : total;
    double frac = (double)shown / (double)total;
    fmt_time(eta, sizeof eta, isfinite(r) && r > 0 ? (double)(total - shown) / r : NAN);
    char bar[3 * 64 + 8] = "";
    if (bar_width > 0) {
        if (bar_width > 64) bar_width = 64;
        int full = (int)(frac * bar_width);
        size_t k = 0;
        bar[k++] = '|';
        for (int i = 0; i < bar_width; i++) {
            if (i < full) { memcpy(bar + k, "\xe2\x96\x88", 3); k += 3; }   /* U+2588 full block */
            else bar[k++] = ' ';
        }
        bar[k++] = '|';
        bar[k++] = ' ';
        bar[k] = 0;
    }
    return snprintf(buf, cap, "%s%s%3d%% %s%" PRId64 "/%" PRId64 " [%s<%s, %s%s]", d, sep, (int)(frac * 100), bar,
                    n, total, el, eta, rate, lossbuf);
}

static void draw(em_progress *p, double now)
{
    char line[512];
    em_progress_format(line, sizeof line, p->desc, p->n, p->total, now - p->t0, p->loss, p->tty ? 10 : 0);
    if (p->tty) fprintf(p->out, "\r%s\033[K", line);
    else fprintf(p->out, "%s\n", line);
    fflush(p->out);
    p->last_print = now;
    p->drawn = true;
    p->drawn_n = p->n;
}

em_progress *em_progress_new_opts(struct em_accelerator *acc, int64_t total, const char *desc, const em_progress_opts *o)
{
    em_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->active = em__tracking_is_main(acc);
    p->out = o && o->out ? o->out : stderr;
    p->tty = o && o->tty ? o->tty > 0 : isatty(fileno(p->out));
    p->clock = o && o->clock ? o->clock : monotonic_s;
    p->clock_user = o ? o->clock_user : NULL;
    p->desc = strdup(desc ? desc : "");
    p->total = total;
    p->loss = NAN;
    p->t0 = p->last_print = p->clock(p->clock_user);
    if (!p->desc) {
        free(p);
        return NULL;
    }
    return p;
}

em_progress *em_progress_new(struct em_accelerator *acc, int64_t total, const char *desc)
{
    return em_progress_new_opts(acc, total, desc, NULL);
}

void em_progress_update(em_progress *p, int64_t n, double loss)
{
    if (!p || !p->active || p->finished) return;
    p->n += n;
    if (!isnan(loss)) p->loss = loss;
    double now = p->clock(p->clock_user);
    bool done = p->total > 0 && p->n >= p->total;
    if (p->tty) {
        if (done || now - p->last_print >= 0.1 || !p->drawn) draw(p, now);
    } else {
        int decile = p->total > 0 ? (int)(10 * (p->n < p->total ? p->n : p->total) / p->total) : 0;
        if (done || decile > p->last_decile || now - p->last_print >= 30.0) {
            p->last_decile = decile;
            draw(p, now);
        }
    }
    if (done) {
        p->finished = true;
        if (p->tty) {
            fputc('\n', p->out);
            fflush(p->out);
        }
    }
}

void em_progress_free(em_progress *p)
{
    if (!p) return;
    if (p->active && !p->finished && p->n > 0) {   /* show where it stopped */
        double now = p->clock(p->clock_user);
        if (p->drawn_n != p->n || !p->drawn) draw(p, now);
        if (p->tty) fputc('\n', p->out);
        fflush(p->out);
    }
    free(p->desc);
    free(p);
}
