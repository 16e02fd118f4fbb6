/* ember — printing tensors the way PyTorch's repr does (torch/_tensor_str.py
 * with the default print options: precision 4, threshold 1000, edgeitems 3,
 * linewidth 80).
 *
 *   tensor([[1., 2.],
 *           [3., 4.]])
 *
 * One formatter is chosen for the whole tensor from the elements that will
 * be shown (all of them, or the summarised corners beyond 1000 elements):
 *   - ints print as integers, bools as True/False, right-aligned to the
 *     widest shown value;
 *   - floats look only at their nonzero finite values: scientific notation
 *     ("1.0000e+05") when max/min > 1000 or max > 1e8 (or, unless all are
 *     integers, min < 1e-4); otherwise "1." when all are integers, else four
 *     decimals ("1.5000"); nan/inf print as "nan", "inf", "-inf".
 * Rows wrap at 80 columns; beyond 1000 elements every dim longer than 6
 * shows its first and last 3 entries around "...".
 * Suffixes as torch: device='cuda:0' off the CPU; size=(0, 3) for empty
 * tensors that are not 1-d; dtype=float64 (ember's name, torch writes
 * torch.float64) for dtypes other than float32/int64/bool, and for every
 * empty tensor that is not float32. Autograd suffixes (grad_fn=...) are not
 * printed: tensor/ knows nothing of autograd.
 */
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { LINEWIDTH = 80, THRESHOLD = 1000, EDGEITEMS = 3, PRECISION = 4 };

/* ---- output sink: a FILE or a caller's buffer (truncated, NUL-terminated) -- */

typedef struct sink {
    FILE *f;
    char *buf;
    size_t cap, len;   /* len counts everything written, even past cap */
    size_t col;        /* characters since the last newline */
} sink;

static void put(sink *s, const char *str, size_t n)
{
    if (s->f) {
        fwrite(str, 1, n, s->f);
    } else if (s->cap > 0 && s->len < s->cap - 1) {
        size_t room = s->cap - 1 - s->len, k = n < room ? n : room;
        memcpy(s->buf + s->len, str, k);
    }
    s->len += n;
    const char *nl = NULL;
    for (size_t i = 0; i < n; i++)
        if (str[i] == '\n') nl = str + i;
    s->col = nl ? (size_t)(str + n - nl - 1) : s->col + n;
}

static void puts_(sink *s, const char *str) { put(s, str, strlen(str)); }

static void put_rep(sink *s, char c, int n)
{
    for (int i = 0; i < n; i++) put(s, &c, 1);
}

/* ---- the formatter (torch's _Formatter) ------------------------------------ */

typedef struct formatter {
    bool floating, int_mode, sci_mode;
    int max_width;
} formatter;

typedef struct view {
    const em_tensor *t;
    const char *base;   /* element 0 of storage */
    size_t es;
    bool summarize;
} view;

static const char *elem(const view *v, int64_t off)
{
    return v->base + (size_t)(v->t->offset + off) * v->es;
}

/* The raw text of the element at p (no padding) under formatter f. */
static int raw_text(const formatter *f, em_dtype dt, const char *p, char *out, size_t cap)
{
    if (dt == EM_BOOL) return snprintf(out, cap, "%s", *p ? "True" : "False");
    if (dt == EM_I64) {   /* read directly: a double would round beyond 2^53 */
        int64_t i;
        memcpy(&i, p, 8);
        return snprintf(out, cap, "%lld", (long long)i);
    }
    double x = em__load(p, dt);
    if (!f->floating) return snprintf(out, cap, "%.0f", x);   /* int32: exact */
    if (isnan(x)) return snprintf(out, cap, "nan");
    if (isinf(x)) return snprintf(out, cap, "%s", x > 0 ? "inf" : "-inf");
    if (f->sci_mode) return snprintf(out, cap, "%.*e", PRECISION, x);
    if (f->int_mode) return snprintf(out, cap, "%.0f.", x);
    return snprintf(out, cap, "%.*f", PRECISION, x);
}

/* Calls fn on every shown element (all, or the summarised corners). */
typedef void (*elem_fn)(const char *p, void *ctx);

static void each_shown(const view *v, int dim, int64_t off, elem_fn fn, void *ctx)
{
    const em_tensor *t = v->t;
    if (dim == t->ndim) {
        fn(elem(v, off), ctx);
        return;
    }
    int64_t n = t->shape[dim];
    bool cut = v->summarize && n > 2 * EDGEITEMS;
    for (int64_t i = 0; i < n; i++) {
        if (cut && i == EDGEITEMS) i = n - EDGEITEMS;
        each_shown(v, dim + 1, off + i * t->stride[dim], fn, ctx);
    }
}

typedef struct scan {
    em_dtype dt;
    int64_t nfinite;     /* nonzero finite values */
    double amin, amax;   /* of their magnitudes */
    bool all_int;
    formatter *f;        /* pass 2: widen f->max_width */
} scan;

static void scan_range(const char *p, void *ctx)
{
    scan *s = ctx;
    double x = em__load(p, s->dt);
    if (!isfinite(x) || x == 0) return;
    double a = fabs(x);
    if (s->nfinite == 0 || a < s->amin) s->amin = a;
    if (s->nfinite == 0 || a > s->amax) s->amax = a;
    if (x != ceil(x)) s->all_int = false;
    s->nfinite++;
}

static void scan_width(const char *p, void *ctx)
{
    scan *s = ctx;
    if (s->f->floating) {   /* torch sizes floats by their nonzero finite values */
        double x = em__load(p, s->dt);
        if (!isfinite(x) || x == 0) return;
    }
    char tmp[64];
    int w = raw_text(s->f, s->dt, p, tmp, sizeof tmp);
    if (w > s->f->max_width) s->f->max_width = w;
}

static formatter make_formatter(const view *v)
{
    formatter f = {.floating = em_dtype_is_float(v->t->dtype), .int_mode = true, .max_width = 1};
    scan s = {.dt = v->t->dtype, .all_int = true, .f = &f};
    if (f.floating) {
        each_shown(v, 0, 0, scan_range, &s);
        if (s.nfinite == 0) return f;
        f.int_mode = s.all_int;
        f.sci_mode = s.amax / s.amin > 1000.0 || s.amax > 1.0e8 || (!s.all_int && s.amin < 1.0e-4);
        if (f.sci_mode) f.int_mode = false;
    }
    each_shown(v, 0, 0, scan_width, &s);
    return f;
}

static void put_value(sink *s, const formatter *f, em_dtype dt, const char *p)
{
    char tmp[64];
    int n = raw_text(f, dt, p, tmp, sizeof tmp);
    put_rep(s, ' ', f->max_width - n);
    put(s, tmp, (size_t)n);
}

/* ---- layout (torch's _tensor_str_with_formatter / _vector_str) ------------- */

static void put_vector(sink *s, const view *v, int64_t off, int indent, const formatter *f)
{
    const em_tensor *t = v->t;
    int dim = t->ndim - 1;
    int64_t n = t->shape[dim];
    int per_line = (LINEWIDTH - indent) / (f->max_width + 2);
    if (per_line < 1) per_line = 1;
    bool cut = v->summarize && n > 2 * EDGEITEMS;
    int64_t items = cut ? 2 * EDGEITEMS + 1 : n;
    put(s, "[", 1);
    for (int64_t k = 0; k < items; k++) {
        if (k > 0) {
            if (k % per_line == 0) {
                put(s, ",\n", 2);
                put_rep(s, ' ', indent + 1);
            } else {
                put(s, ", ", 2);
            }
        }
        if (cut && k == EDGEITEMS) {
            put(s, " ...", 4);
            continue;
        }
        int64_t i = cut && k > EDGEITEMS ? n - (items - k) : k;
        put_value(s, f, t->dtype, elem(v, off + i * t->stride[dim]));
    }
    put(s, "]", 1);
}

static void put_tensor(sink *s, const view *v, int dim, int64_t off, int indent, const formatter *f)
{
    const em_tensor *t = v->t;
    int rest = t->ndim - dim;
    if (rest == 0) {
        put_value(s, f, t->dtype, elem(v, off));
        return;
    }
    if (rest == 1) {
        put_vector(s, v, off, indent, f);
        return;
    }
    int64_t n = t->shape[dim];
    bool cut = v->summarize && n > 2 * EDGEITEMS;
    put(s, "[", 1);
    for (int64_t i = 0; i < n; i++) {
        if (i > 0) {
            put(s, ",", 1);
            put_rep(s, '\n', rest - 1);
            put_rep(s, ' ', indent + 1);
        }
        if (cut && i == EDGEITEMS) {
            put(s, "...", 3);
            i = n - EDGEITEMS - 1;
            continue;
        }
        put_tensor(s, v, dim + 1, off + i * t->stride[dim], indent + 1, f);
    }
    put(s, "]", 1);
}

/* torch's _add_suffixes: ", suffix" on the same line while it fits in 80
 * columns, else on a new line indented under the opening parenthesis.
 * *last mirrors torch's last_line_len, which starts at the length of the
 * last line + 2 and counts a wrapped suffix line as indent + its length. */
static void put_suffix(sink *s, const char *suffix, int indent, size_t *last)
{
    size_t n = strlen(suffix);
    if (*last + n + 2 > LINEWIDTH) {
        put(s, ",\n", 2);
        put_rep(s, ' ', indent);
        *last = (size_t)indent + n;
    } else {
        put(s, ", ", 2);
        *last += n + 2;
    }
    put(s, suffix, n);
}

static void repr(sink *s, em_tensor *t)
{
    if (!t) {
        puts_(s, "NULL");
        return;
    }
    const char *prefix = "tensor(";
    const int indent = (int)strlen(prefix);
    char suffix[3][96];
    int nsuf = 0;
    em_tensor *host = t;
    bool scoped = false;
    if (t->device.type != EM_DEVICE_CPU) {
        char dev[16];
        snprintf(suffix[nsuf++], sizeof suffix[0], "device='%s'", em_device_str(t->device, dev));
        em_scope_begin();
        scoped = true;
        host = em_numel(t) ? em_to(t, EM_CPU) : t;
    }
    puts_(s, prefix);
    int64_t numel = em_numel(t);
    if (!host) {
        puts_(s, "<copy to host failed>");
    } else if (numel == 0) {
        puts_(s, "[]");
        if (t->ndim != 1) {
            int k = snprintf(suffix[nsuf], sizeof suffix[0], "size=(");
            for (int d = 0; d < t->ndim; d++)
                k += snprintf(suffix[nsuf] + k, sizeof suffix[0] - (size_t)k, d ? ", %lld" : "%lld",
                              (long long)t->shape[d]);
            snprintf(suffix[nsuf] + k, sizeof suffix[0] - (size_t)k, ")");
            nsuf++;
        }
        if (t->dtype != EM_F32) snprintf(suffix[nsuf++], sizeof suffix[0], "dtype=%s", em_dtype_name(t->dtype));
    } else {
        view v = {.t = host, .base = host->storage->data, .es = em_dtype_size(host->dtype),
                  .summarize = numel > THRESHOLD};
        formatter f = make_formatter(&v);
        put_tensor(s, &v, 0, 0, indent, &f);
        if (t->dtype != EM_F32 && t->dtype != EM_I64 && t->dtype != EM_BOOL)
            snprintf(suffix[nsuf++], sizeof suffix[0], "dtype=%s", em_dtype_name(t->dtype));
    }
    size_t last = s->col + 2;
    for (int i = 0; i < nsuf; i++) put_suffix(s, suffix[i], indent, &last);
    put(s, ")", 1);
    if (scoped) em_scope_end();
}

void em_tensor_print(em_tensor *t, FILE *f)
{
    if (t && !em__live(t, "em_tensor_print")) return;
    sink s = {.f = f ? f : stdout};
    repr(&s, t);
    put(&s, "\n", 1);
}

size_t em_tensor_repr(em_tensor *t, char *buf, size_t cap)
{
    if (t && !em__live(t, "em_tensor_repr")) {
        if (cap > 0) buf[0] = '\0';
        return 0;
    }
    sink s = {.buf = buf, .cap = cap};
    repr(&s, t);
    if (cap > 0) buf[s.len < cap - 1 ? s.len : cap - 1] = '\0';
    return s.len;
}
