/* ember — errors: misuse messages to a replaceable handler, and the
 * thread-local last error for failures that come from outside. */
#include "tensor/tensor_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char last_msg[1024];
static _Thread_local em_status last_status;
static _Thread_local const char *at_file;
static _Thread_local int at_line;

static void default_handler(const char *msg, void *user)
{
    (void)user;
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    abort();
}

static em_misuse_handler handler = default_handler;
static void *handler_user;

em_misuse_handler em_set_misuse_handler(em_misuse_handler h, void *user)
{
    em_misuse_handler old = handler;
    handler = h ? h : default_handler;
    handler_user = user;
    return old;
}

void em__at(const char *file, int line)
{
    at_file = file;
    at_line = line;
}

void em__warn_once(bool *once, const char *op, const char *fmt, ...)
{
    if (*once) return;
    *once = true;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ember: warning: %s: ", op);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
    va_end(ap);
}

void em__misuse(const char *op, const char *fmt, ...)
{
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "ember: %s: ", op);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (at_file && n < (int)sizeof msg) {
        const char *base = strrchr(at_file, '/');
        snprintf(msg + n, sizeof msg - (size_t)n, " (%s:%d)", base ? base + 1 : at_file, at_line);
    }
    handler(msg, handler_user);
}

em_status em__fail(em_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_msg, sizeof last_msg, fmt, ap);
    va_end(ap);
    last_status = s;
    return s;
}

const char *em_last_error(void) { return last_msg; }
em_status em_last_status(void) { return last_status; }
void em_clear_error(void) { last_msg[0] = 0; last_status = EM_OK; }

const char *em_status_name(em_status s)
{
    static const char *names[EM_NUM_STATUS] = {
        [EM_OK] = "ok", [EM_ERR_OOM] = "out of memory", [EM_ERR_IO] = "I/O error",
        [EM_ERR_FORMAT] = "malformed input", [EM_ERR_INVALID] = "invalid value",
        [EM_ERR_NOT_FOUND] = "not found", [EM_ERR_UNSUPPORTED] = "unsupported",
        [EM_ERR_DEVICE] = "device error", [EM_ERR_COMM] = "communication error",
        [EM_ERR_TIMEOUT] = "timeout",
    };
    return (unsigned)s < EM_NUM_STATUS ? names[s] : "unknown status";
}

const char *em__dims_str(int ndim, const int64_t *shape)
{
    static _Thread_local char ring[8][96];
    static _Thread_local unsigned next;
    char *b = ring[next++ % 8];
    int n = snprintf(b, 96, "[");
    for (int i = 0; i < ndim && n < 90; i++)
        n += snprintf(b + n, 96 - (size_t)n, i ? ",%lld" : "%lld", (long long)shape[i]);
    snprintf(b + n, 96 - (size_t)n, "]");
    return b;
}

const char *em__shape_str(const em_tensor *t) { return t ? em__dims_str(t->ndim, t->shape) : "NULL"; }
