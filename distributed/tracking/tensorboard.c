/* ember — distributed/tracking/tensorboard.c: scalars as TensorBoard event files, on
 * the main process (contract in tracking.h, "progress and logging").
 *
 * The file is what TensorFlow's EventFileWriter writes, which TensorBoard
 * (and torch.utils.tensorboard's SummaryWriter) read:
 *   name    <logdir>/events.out.tfevents.<unix seconds>.<hostname>.<pid>.0
 *   records TFRecord framing, each record being
 *             uint64 length (little endian)
 *             uint32 masked_crc32c(the 8 length bytes)
 *             length bytes of data
 *             uint32 masked_crc32c(data)
 *           with masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8;
 *   data    one serialized tensorflow.Event protobuf per record:
 *             field 1 wall_time  double   (wire type 1)
 *             field 2 step       int64    (varint)
 *             field 3 file_version string "brain.Event:2"  (first record only)
 *             field 5 summary    Summary  (length-delimited), whose
 *                     field 1 value (repeated) = { field 1 tag string,
 *                                                  field 2 simple_value float (wire type 5) }
 * The protobuf is encoded by hand (four field kinds); no protobuf library.
 *
 * Each record goes out in one write(2) on a file opened O_APPEND, so a
 * reader never sees half a record unless the disk fills; on a short write
 * the writer reports EM_ERR_IO naming the file and writes nothing more. */
#include "distributed/tracking/tracking_internal.h"
#include "tensor/support.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

struct em_tb_writer {
    int fd;       /* -1 on ranks other than the main one, and after a failed write */
    char *path;   /* the event file */
};

static uint32_t masked_crc(const void *data, size_t n)
{
    uint32_t c = em__crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- a growable byte buffer and the protobuf pieces ---- */
typedef struct { unsigned char *p; size_t n, cap; bool oom; } buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) { b->oom = true; return; }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_varint(buf *b, uint64_t v)
{
    unsigned char t[10];
    int n = 0;
    do { t[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
    put(b, t, (size_t)n);
}
static void put_le(buf *b, uint64_t v, int bytes)
{
    unsigned char t[8];
    for (int i = 0; i < bytes; i++) t[i] = (unsigned char)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}
static void put_key(buf *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }
static void put_bytes_field(buf *b, int field, const void *p, size_t n)
{
    put_key(b, field, 2);
    put_varint(b, n);
    put(b, p, n);
}

/* One Event: wall_time, step, then file_version (version != NULL) or a
 * Summary of n scalars. */
static void encode_event(buf *ev, double wall, int64_t step, const char *version, int n, const char *const *names,
                         const double *values)
{
    uint64_t bits;
    memcpy(&bits, &wall, sizeof bits);
    put_key(ev, 1, 1);
    put_le(ev, bits, 8);
    put_key(ev, 2, 0);
    put_varint(ev, (uint64_t)step);
    if (version) {
        put_bytes_field(ev, 3, version, strlen(version));
        return;
    }
    buf summary = {0};
    for (int i = 0; i < n; i++) {
        buf value = {0};
        put_bytes_field(&value, 1, names[i], strlen(names[i]));
        float f = (float)values[i];
        uint32_t fb;
        memcpy(&fb, &f, sizeof fb);
        put_key(&value, 2, 5);
        put_le(&value, fb, 4);
        summary.oom |= value.oom;
        put_bytes_field(&summary, 1, value.p, value.n);
        free(value.p);
    }
    ev->oom |= summary.oom;
    put_bytes_field(ev, 5, summary.p, summary.n);
    free(summary.p);
}

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

/* Frames ev as one record and writes it in one write(2). */
static em_status write_record(em_tb_writer *w, const buf *ev, const char *op)
{
    if (ev->oom) return em__fail(EM_ERR_OOM, "%s: out of memory encoding an event for %s", op, w->path);
    buf rec = {0};
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)ev->n >> (8 * i));
    put(&rec, len, 8);
    put_le(&rec, masked_crc(len, 8), 4);
    put(&rec, ev->p, ev->n);
    put_le(&rec, masked_crc(ev->p, ev->n), 4);
    if (rec.oom) return em__fail(EM_ERR_OOM, "%s: out of memory framing an event for %s", op, w->path);
    ssize_t k = write(w->fd, rec.p, rec.n);
    int err = errno;
    free(rec.p);
    if (k == (ssize_t)rec.n) return EM_OK;
    close(w->fd);
    w->fd = -1;   /* a torn record: write nothing more behind it */
    return em__fail(EM_ERR_IO, "%s: writing %s failed: %s", op, w->path, k < 0 ? strerror(err) : "short write");
}

em_tb_writer *em_tb_writer_new(struct em_accelerator *acc, const char *logdir)
{
    static const char op[] = "em_tb_writer_new";
    if (!logdir || !*logdir) {
        em__fail(EM_ERR_INVALID, "%s: no log folder", op);
        return NULL;
    }
    em_tb_writer *w = calloc(1, sizeof *w);
    if (!w) {
        em__fail(EM_ERR_OOM, "%s: out of memory for %s", op, logdir);
        return NULL;
    }
    w->fd = -1;
    if (!em__tracking_is_main(acc)) return w;
    if (mkdir(logdir, 0755) != 0 && errno != EEXIST) {
        em__fail(EM_ERR_IO, "%s: cannot create the folder %s: %s", op, logdir, strerror(errno));
        free(w);
        return NULL;
    }
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    size_t cap = strlen(logdir) + strlen(host) + 96;
    if (!(w->path = malloc(cap))) {
        em__fail(EM_ERR_OOM, "%s: out of memory for %s", op, logdir);
        free(w);
        return NULL;
    }
    double t = now_s();
    snprintf(w->path, cap, "%s/events.out.tfevents.%lld.%s.%ld.0", logdir, (long long)t, host, (long)getpid());
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        em__fail(EM_ERR_IO, "%s: cannot create %s: %s", op, w->path, strerror(errno));
        free(w->path);
        free(w);
        return NULL;
    }
    buf ev = {0};
    encode_event(&ev, t, 0, "brain.Event:2", 0, NULL, NULL);
    em_status s = write_record(w, &ev, op);
    free(ev.p);
    if (s != EM_OK) {
        unlink(w->path);   /* nothing half-written stays behind */
        free(w->path);
        free(w);
        return NULL;
    }
    return w;
}

em_status em_tb_writer_add_scalars(em_tb_writer *w, int64_t step, int n, const char *const *names,
                                   const double *values)
{
    static const char op[] = "em_tb_writer_add_scalars";
    if (!w || n < 0 || (n > 0 && (!names || !values))) {
        em__misuse(op, "expected a writer and n >= 0 names and values (n=%d)", n);
        return EM_ERR_INVALID;
    }
    if (w->fd < 0) return w->path ? em__fail(EM_ERR_IO, "%s: %s failed earlier", op, w->path) : EM_OK;
    for (int i = 0; i < n; i++)
        if (!names[i] || !*names[i]) {
            em__misuse(op, "scalar %d has no name", i);
            return EM_ERR_INVALID;
        }
    buf ev = {0};
    encode_event(&ev, now_s(), step, NULL, n, names, values);
    em_status s = write_record(w, &ev, op);
    free(ev.p);
    return s;
}

const char *em_tb_writer_path(const em_tb_writer *w) { return w ? w->path : NULL; }

void em_tb_writer_free(em_tb_writer *w)
{
    if (!w) return;
    if (w->fd >= 0) close(w->fd);
    free(w->path);
    free(w);
}

em_status em_tb_writer_add_scalar(em_tb_writer *w, int64_t step, const char *tag, double value)
{
    return em_tb_writer_add_scalars(w, step, 1, &tag, &value);
}
