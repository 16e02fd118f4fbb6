/* ember — what every layer may use from tensor/'s internals: errors and misuse
 * (with the caller's location), host allocations that the fail-Nth switch
 * reaches, shape strings, whole-file reads, CRC-32C and cJSON's hooks. Kernels
 * and backends need more (tensor/backend.h); tensor/ itself includes all
 * through tensor/tensor_internal.h. Not installed. */
#ifndef EMBER_TENSOR_SUPPORT_H
#define EMBER_TENSOR_SUPPORT_H

#include <stdio.h>
#include "tensor/tensor.h"

#include <stdarg.h>

/* ---- errors -------------------------------------------------------------
 * em__misuse: formats "ember: <op>: <msg> (<caller>)" and calls the handler.
 * The default handler aborts; a test handler may return, in which case the op
 * returns NULL. em__fail: records an outside failure; returns the status. */
void em__misuse(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
em_status em__fail(em_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The common mistakes that still run (DESIGN: warn once, name the fix): the
 * first call with *once == false prints "ember: warning: <op>: <msg>" to
 * stderr and sets *once; later calls print nothing. The caller owns the flag
 * (a static for once per process). */
void em__warn_once(bool *once, const char *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "[2,3,4]" in a small thread-local ring of buffers (8 live at once). */
const char *em__shape_str(const em_tensor *t);
const char *em__dims_str(int ndim, const int64_t *shape);

/* Misuse check inside a function returning a pointer. */
#define EM_CHECK(cond, op, ...) do { if (!(cond)) { em__misuse(op, __VA_ARGS__); return NULL; } } while (0)
/* NULL in, NULL out: an earlier failure propagates without a second message.
 * A released tensor (stale pointer) is a misuse error named after the function. */
#define EM_PROPAGATE_NULL(...) EM_PROPAGATE_NULL_IN(__func__, __VA_ARGS__)
/* The same, where the public name is a variable (a helper shared by several ops). */
#define EM_PROPAGATE_NULL_IN(op, ...) do { em_tensor *em__in_[] = {__VA_ARGS__}; \
    for (size_t em__i = 0; em__i < sizeof em__in_ / sizeof *em__in_; em__i++) \
        if (!em__in_[em__i] || !em__live(em__in_[em__i], op)) return NULL; } while (0)
/* Whether t (not NULL) is a live tensor; otherwise reports misuse in op and
 * returns false. One load and compare: cheap enough for every entry point. */
void em__misuse_dead(const em_tensor *t, const char *op);
static inline bool em__live(const em_tensor *t, const char *op)
{
    if (__builtin_expect(t->magic == EM_TENSOR_LIVE, 1)) return true;
    em__misuse_dead(t, op);
    return false;
}

/* CRC-32C (Castagnoli) of n bytes; _update continues a running value (start
 * with 0), so update(update(0, a), b) is the CRC of a then b. tensor/crc32c.c */
uint32_t em__crc32c(const void *data, size_t n);
uint32_t em__crc32c_update(uint32_t crc, const void *data, size_t n);

/* The whole file at path in a new em__malloc'd buffer (*size bytes plus a
 * NUL; free with em__free). EM_ERR_NOT_FOUND (absent) or EM_ERR_IO naming
 * path with the reason; EM_ERR_FORMAT when larger than max bytes (0: no
 * limit); EM_ERR_OOM. tensor/readfile.c */
em_status em__read_file(const char *path, size_t max, char **data, size_t *size);
/* fopen(path, "rb") for a file from outside: never blocks (a FIFO at the path
 * would hang the open), and anything but a regular file is refused. NULL with
 * errno set; em__strerror says "not a regular file ..." for the refusal.
 * tensor/readfile.c */
FILE *em__fopen_regular(const char *path);
const char *em__strerror(int err);
#define EM__ENOTREG 0x7e0f   /* errno value of that refusal (no system errno) */

/* ---- host allocations (metadata, scratch) ---------------------------------
 * Every allocation, host metadata included, goes through these so the
 * fail-the-Nth switch reaches it. On failure they set EM_ERR_OOM. */
void *em__malloc(size_t n);
void *em__calloc(size_t n, size_t size);
void *em__realloc(void *p, size_t n);
/* A copy of s in em__malloc memory (free with em__free); NULL on OOM (recorded). */
char *em__strdup(const char *s);
void em__free(void *p);
bool em__alloc_should_fail(void);   /* consumes one tick of the fail-Nth switch */

/* Installs ember's allocation hooks into cJSON (once; tensor/json.c). */
void em__json_init(void);
/* The 1-based offset of the first \u0000 escape in JSON text p[0..n) (a
 * backslash that is not itself escaped, then u0000), or 0: cJSON accepts it,
 * and C strings end there, so a reader of outside JSON refuses it. */
size_t em__json_nul_escape(const char *p, size_t n);
/* What a cJSON value is, for messages ("a string", "an array", "missing" for NULL). */
const char *em__json_kind(const void *cjson_value);

#endif
