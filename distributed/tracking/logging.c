/* ember — distributed/tracking/logging.c: scalars to a JSONL file, on the main process.
 *
 * One JSON object per line: {"step": 12, "loss": 0.4321, "lr": 2e-05}.
 * The file is opened with O_APPEND and each line goes out in one write(2),
 * so a reader (tail -f, a plotting script) never sees half a line and two
 * programs appending to one file interleave whole lines. Values print with
 * %.17g (they read back bit for bit); NaN and infinities, which JSON lacks,
 * are written as null. Names are JSON-escaped. */
#include "distributed/tracking/tracking_internal.h"
#include "tensor/support.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct em_logger {
    int fd;      /* -1 on ranks other than the main one */
    char *path;
};

em_logger *em_logger_new(struct em_accelerator *acc, const char *path)
{
    em_logger *lg = calloc(1, sizeof *lg);
    if (!lg || !path || !(lg->path = strdup(path))) {
        free(lg);
        if (path) em__fail(EM_ERR_OOM, "em_logger_new: out of memory for %s", path);
        else em__fail(EM_ERR_INVALID, "em_logger_new: no path");
        return NULL;
    }
    lg->fd = -1;
    if (!em__tracking_is_main(acc)) return lg;
    lg->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lg->fd < 0) {
        em__fail(EM_ERR_IO, "em_logger_new: cannot open %s: %s", path, strerror(errno));
        free(lg->path);
        free(lg);
        return NULL;
    }
    return lg;
}

/* Appends s to the growing buffer; false on OOM. */
typedef struct { char *p; size_t len, cap; } sbuf;
static bool put(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return false;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}
static bool puts_json(sbuf *b, const char *s)
{
    bool ok = put(b, "\"", 1);
    for (; *s && ok; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; ok = put(b, esc, 2); }
        else if (c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); ok = put(b, esc, 6); }
        else ok = put(b, (const char *)&c, 1);
    }
    return ok && put(b, "\"", 1);
}

em_status em_logger_log(em_logger *lg, int64_t step, int n, const char *const *names, const double *values)
{
    if (!lg || lg->fd < 0) return EM_OK;
    sbuf b = {0};
    char num[64];
    snprintf(num, sizeof num, "{\"step\": %" PRId64, step);
    bool ok = put(&b, num, strlen(num));
    for (int i = 0; i < n && ok; i++) {
        ok = put(&b, ", ", 2) && puts_json(&b, names[i]) && put(&b, ": ", 2);
        if (isfinite(values[i])) snprintf(num, sizeof num, "%.17g", values[i]);
        else snprintf(num, sizeof num, "null");
        ok = ok && put(&b, num, strlen(num));
    }
    ok = ok && put(&b, "}\n", 2);
    if (!ok) {
        free(b.p);
        return em__fail(EM_ERR_OOM, "em_logger_log: out of memory formatting a line for %s", lg->path);
    }
    size_t off = 0;
    while (off < b.len) {
        ssize_t w = write(lg->fd, b.p + off, b.len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : EIO;
            free(b.p);
            return em__fail(EM_ERR_IO, "em_logger_log: cannot write %s: %s", lg->path, strerror(e));
        }
        off += (size_t)w;
    }
    free(b.p);
    return EM_OK;
}

void em_logger_free(em_logger *lg)
{
    if (!lg) return;
    if (lg->fd >= 0) close(lg->fd);
    free(lg->path);
    free(lg);
}

em_status em_logger_log_scalar(em_logger *lg, int64_t step, const char *name, double value)
{
    return em_logger_log(lg, step, 1, &name, &value);
}
