/* ember — data/: the table readers: GLUE TSV, RFC 4180 CSV and JSONL files
 * into an em_table of UTF-8 strings.
 *
 * A file is read whole, checked for UTF-8 (and NUL bytes) once, then split:
 * TSV and CSV in place (a field never grows when its quotes are removed, and
 * each field's terminator becomes its NUL), JSONL into a new buffer through
 * cJSON. Positions in messages are 1-based physical lines and 1-based byte
 * columns within that line (a UTF-8 BOM at the start is not counted). */
#include "data/table_internal.h"
#include "tensor/support.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Misuse in a function returning em_status. */
#define TB_CHECK(cond, op, ...) do { if (!(cond)) { em__misuse(op, __VA_ARGS__); return EM_ERR_INVALID; } } while (0)

enum { MAX_FIELDS = 1000000 };   /* per record: a guard against absurd inputs */

/* ---- small helpers ----------------------------------------------------------- */
/* Makes room for `need` elements of `elem` bytes in *p (capacity *cap), doubling. */
static bool grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = em__realloc(*(void **)p, nc * elem);
    if (!np) return false;
    *(void **)p = np;
    *cap = nc;
    return true;
}


/* A byte shown in a message: 'x' when printable ASCII, else 0xNN. */
static const char *show_byte(unsigned char c, char out[8])
{
    if (c >= 0x20 && c < 0x7f) snprintf(out, 8, "'%c'", c);
    else snprintf(out, 8, "0x%02X", c);
    return out;
}


/* ---- UTF-8 ------------------------------------------------------------------- */
/* Length of the valid UTF-8 sequence at s[0..n) (n > 0), or 0 when it is
 * invalid (overlong, surrogate, > U+10FFFF, truncated) or a NUL byte. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return c != 0;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return k;
}

/* Line and byte column of offset `at`. Lines end at LF, and also at CR / CRLF
 * when cr_eol (TSV, CSV); JSONL lines end at LF only. */
static void position(const char *buf, size_t start, size_t at, bool cr_eol, int64_t *line, size_t *col)
{
    int64_t l = 1;
    size_t ls = start;
    for (size_t i = start; i < at; i++) {
        if (buf[i] == '\n' || (cr_eol && buf[i] == '\r' && !(i + 1 < at && buf[i + 1] == '\n'))) {
            l++;
            ls = i + 1;
        }
    }
    *line = l;
    *col = at - ls + 1;
}

static em_status check_text(const char *path, const char *buf, size_t start, size_t len, bool cr_eol)
{
    const unsigned char *s = (const unsigned char *)buf;
    size_t i = start;
    while (i < len) {
        if (s[i] >= 0x01 && s[i] < 0x80) { i++; continue; }
        size_t k = utf8_seq(s + i, len - i);
        if (!k) break;
        i += k;
    }
    if (i == len) return EM_OK;
    int64_t line;
    size_t col;
    position(buf, start, i, cr_eol, &line, &col);
    if (s[i] == 0) return em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: NUL byte", path, (long long)line, col);
    return em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: invalid UTF-8 (byte 0x%02X at file offset %zu)", path,
                    (long long)line, col, s[i], i);
}

/* ---- the table being built ------------------------------------------------------ */
typedef struct builder {
    em_table *t;
    size_t ncell, cap_cell, cap_row;
} builder;

static bool push_cell(builder *b, size_t off)
{
    if (!grow(&b->t->cell, &b->cap_cell, b->ncell + 1, sizeof *b->t->cell)) return false;
    b->t->cell[b->ncell++] = off;
    return true;
}

static bool push_row(builder *b, int64_t line)
{
    if (!grow(&b->t->line, &b->cap_row, (size_t)b->t->rows + 1, sizeof *b->t->line)) return false;
    b->t->line[b->t->rows++] = line;
    return true;
}

/* Column names: cols pointers, followed by `chars` bytes for names stored in
 * the same allocation. */
static bool alloc_names(em_table *t, int cols, size_t chars)
{
    t->names = em__malloc((size_t)cols * sizeof *t->names + chars);
    return t->names != NULL;
}

/* Names "0", "1", ... for a file without a header. */
static bool number_names(em_table *t, int cols)
{
    if (!alloc_names(t, cols, (size_t)cols * 12)) return false;
    char *s = (char *)(t->names + cols);
    for (int c = 0; c < cols; c++) {
        t->names[c] = s;
        s += snprintf(s, 12, "%d", c) + 1;
    }
    return true;
}

/* ---- TSV and CSV ------------------------------------------------------------------ */
typedef struct delim_parser {
    const char *path;
    char *buf;
    size_t len, p, w;       /* read and write offsets (w <= p)        */
    int64_t line;           /* physical line of p                     */
    size_t line_start;      /* offset of that line's first byte       */
    int term;               /* the byte that ended the last field, -1 at the end
                             * (p's byte itself may since be overwritten by its NUL) */
    char delim;
    bool quoting;
} delim_parser;

static size_t col_of(const delim_parser *d, size_t at) { return at - d->line_start + 1; }

/* Consumes the line terminator at p (LF, CRLF or CR), d->term. */
static void eat_eol(delim_parser *d)
{
    if (d->term == '\r' && d->p + 1 < d->len && d->buf[d->p + 1] == '\n') d->p++;
    d->p++;
    d->line++;
    d->line_start = d->p;
}

/* Names sorted with their positions: what finds repeats in n log n (a header
 * or an object of a million names would take minutes pairwise). */
typedef struct named { const char *s; int i; const void *v; } named;
static int cmp_named(const void *a, const void *b)
{
    const named *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* The pair that the pairwise scan would find first: the smallest c whose name
 * came before, at e, its first place; c = -1 when no name repeats. false on OOM. */
static bool first_repeat(char *const *names, int n, int *e, int *c)
{
    *e = *c = -1;
    if (n < 2) return true;
    named *v = em__malloc(sizeof *v * (size_t)n);
    if (!v) return false;
    for (int i = 0; i < n; i++) v[i] = (named){names[i], i, NULL};
    qsort(v, (size_t)n, sizeof *v, cmp_named);
    for (int i = 1; i < n; i++)
        if (!strcmp(v[i].s, v[i - 1].s) && (i < 2 || strcmp(v[i - 1].s, v[i - 2].s)) && (*c < 0 || v[i].i < *c))
            *e = v[i - 1].i, *c = v[i].i;   /* the group's first two places */
    em__free(v);
    return true;
}

/* One field starting at p, written at w and NUL-terminated. Leaves p on the
 * delimiter, the line terminator or the end. *quoted tells whether it was. */
static em_status parse_field(delim_parser *d, bool *quoted)
{
    char *b = d->buf;
    *quoted = d->quoting && d->p < d->len && b[d->p] == '"';
    if (!*quoted) {
        size_t p = d->p;
        while (p < d->len && b[p] != d->delim && b[p] != '\n' && b[p] != '\r') p++;
        size_t n = p - d->p;
        if (d->w != d->p) memmove(b + d->w, b + d->p, n);
        d->w += n;
        d->p = p;
        d->term = p < d->len ? (unsigned char)b[p] : -1;
        b[d->w++] = 0;
        return EM_OK;
    }
    int64_t open_line = d->line;
    size_t open_col = col_of(d, d->p);
    d->p++;
    for (;;) {
        if (d->p >= d->len)
            return em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: unterminated quoted field (the quote opened here)", d->path,
                            (long long)open_line, open_col);
        char c = b[d->p];
        if (c == '"') {
            if (d->p + 1 < d->len && b[d->p + 1] == '"') {
                b[d->w++] = '"';
                d->p += 2;
                continue;
            }
            d->p++;
            break;
        }
        b[d->w++] = c;
        d->p++;
        if (c == '\n' || (c == '\r' && !(d->p < d->len && b[d->p] == '\n'))) {
            d->line++;
            d->line_start = d->p;
        }
    }
    b[d->w++] = 0;   /* w < p here: the quotes were dropped */
    d->term = d->p < d->len ? (unsigned char)b[d->p] : -1;
    if (d->p < d->len && b[d->p] != d->delim && b[d->p] != '\n' && b[d->p] != '\r') {
        char sb[8];
        return em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: unexpected %s after the closing quote of a field "
                        "(expected the delimiter or the end of the line)", d->path, (long long)d->line,
                        col_of(d, d->p), show_byte((unsigned char)b[d->p], sb));
    }
    return EM_OK;
}

static em_status parse_delimited(em_table *t, char *buf, size_t start, size_t len, char delim, bool quoting,
                                 bool header)
{
    delim_parser d = { .path = t->path, .buf = buf, .len = len, .p = start, .w = start, .line = 1,
                       .line_start = start, .delim = delim, .quoting = quoting };
    builder b = { .t = t };
    int cols = -1;   /* known after the first record */
    size_t *hdr = NULL;
    em_status st = EM_OK;

    while (d.p < d.len) {
        int64_t rec_line = d.line;
        size_t first = b.ncell, rec_w = d.w;
        int64_t nf = 0;
        int64_t extra_line = 0;
        size_t extra_col = 0;
        bool blank = false;
        for (;;) {
            size_t off = d.w;
            bool quoted;
            if ((st = parse_field(&d, &quoted))) goto done;
            if (!push_cell(&b, off)) { st = EM_ERR_OOM; goto done; }
            nf++;
            if (d.term == (unsigned char)delim) {
                if (nf == cols) { extra_line = d.line; extra_col = col_of(&d, d.p); }
                if (nf >= MAX_FIELDS) {
                    st = em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: more than %d fields", t->path, (long long)d.line,
                                  col_of(&d, d.p), MAX_FIELDS);
                    goto done;
                }
                d.p++;
                continue;
            }
            blank = nf == 1 && !quoted && d.buf[off] == 0;
            break;
        }
        size_t end_col = col_of(&d, d.p);
        int64_t end_line = d.line;
        if (d.p < d.len) eat_eol(&d);
        if (blank) {   /* an empty line: skipped, as pandas does */
            b.ncell = first;
            d.w = rec_w;
            continue;
        }
        if (cols < 0) {
            cols = (int)nf;
            if (header) {   /* the header's cells move to the names */
                hdr = b.t->cell;
                b.t->cell = NULL;
                b.cap_cell = b.ncell = 0;
                if (!alloc_names(t, cols, 0)) { st = EM_ERR_OOM; goto done; }
                for (int c = 0; c < cols; c++) t->names[c] = buf + hdr[c];
                int e, c;   /* a name twice is ambiguous: refuse rather than pick one */
                if (!first_repeat(t->names, cols, &e, &c)) { st = EM_ERR_OOM; goto done; }
                if (c >= 0) {
                    st = em__fail(EM_ERR_FORMAT, "%s:%lld: the header names column \"%s\" twice (columns %d and %d)",
                                  t->path, (long long)rec_line, t->names[c], e + 1, c + 1);
                    goto done;
                }
                continue;
            }
        } else if (nf != cols) {
            if (nf > cols)
                st = em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: expected %d field%s, found %lld", t->path,
                              (long long)extra_line, extra_col, cols, cols == 1 ? "" : "s", (long long)nf);
            else
                st = em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: expected %d field%s, found %lld", t->path,
                              (long long)end_line, end_col, cols, cols == 1 ? "" : "s", (long long)nf);
            goto done;
        }
        if (!push_row(&b, rec_line)) { st = EM_ERR_OOM; goto done; }
    }
    if (cols < 0) {
        if (header) { st = em__fail(EM_ERR_FORMAT, "%s: empty file: no header line", t->path); goto done; }
        cols = 0;
    }
    t->cols = cols;
    if (!header && !number_names(t, cols)) st = EM_ERR_OOM;
done:
    em__free(hdr);
    return st;
}

/* ---- JSONL ------------------------------------------------------------------------- */

typedef struct arena {
    char *s;
    size_t n, cap;
} arena;

/* Appends s[0,n) and a NUL; *off receives its offset. */
static bool arena_add(arena *a, const char *s, size_t n, size_t *off)
{
    if (!grow(&a->s, &a->cap, a->n + n + 1, 1)) return false;
    memcpy(a->s + a->n, s, n);
    a->s[a->n + n] = 0;
    *off = a->n;
    a->n += n + 1;
    return true;
}

/* A number as text: integers (|v| < 2^53) without a fraction ("3", not
 * "3.0"), others in the shortest %g form that reads back exactly. */
static void number_text(double v, char out[40])
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(out, 40, "%.0f", v == 0 ? 0.0 : v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, 40, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

/* The last member of obj named `name` (Python's json keeps the last duplicate). */
static const cJSON *member(const cJSON *obj, const char *name)
{
    const cJSON *found = NULL;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (c->string && strcmp(c->string, name) == 0) found = c;
    return found;
}

static em_status jsonl_cell(em_table *t, builder *b, arena *a, const cJSON *v, int c, int64_t line);

/* The last member named `name` in the sorted members v[0..n), or NULL. */
static const cJSON *sorted_member(const named *v, int n, const char *name)
{
    int lo = 0, hi = n;   /* the first entry past every one named `name` */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (strcmp(v[mid].s, name) <= 0) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && !strcmp(v[lo - 1].s, name) ? v[lo - 1].v : NULL;
}

static em_status jsonl_row(em_table *t, builder *b, arena *a, const cJSON *obj, int64_t line)
{
    /* an object of many keys is looked up sorted (members by column were cols x keys) */
    int nk = 0;
    for (const cJSON *c = obj->child; c; c = c->next) nk++;
    named *sorted = NULL;
    if (nk > 32 && t->cols > 4) {
        sorted = em__malloc(sizeof *sorted * (size_t)nk);
        if (!sorted) return EM_ERR_OOM;
        int i = 0;
        for (const cJSON *c = obj->child; c; c = c->next, i++) sorted[i] = (named){c->string ? c->string : "", i, c};
        qsort(sorted, (size_t)nk, sizeof *sorted, cmp_named);
    }
    em_status st = EM_OK;
    for (int c = 0; c < t->cols && st == EM_OK; c++) st = jsonl_cell(t, b, a, sorted ? sorted_member(sorted, nk, t->names[c])
                                                                                   : member(obj, t->names[c]), c, line);
    em__free(sorted);
    if (st != EM_OK) return st;
    return push_row(b, line) ? EM_OK : EM_ERR_OOM;
}

/* Row cell c from the member v (NULL: missing). */
static em_status jsonl_cell(em_table *t, builder *b, arena *a, const cJSON *v, int c, int64_t line)
{
    const char *s;
        char num[40];
        if (!v) return em__fail(EM_ERR_NOT_FOUND, "%s:%lld: missing field \"%s\"", t->path, (long long)line,
                                t->names[c]);
        if (cJSON_IsString(v)) s = v->valuestring;
        else if (cJSON_IsNumber(v)) { number_text(v->valuedouble, num); s = num; }
        else if (cJSON_IsTrue(v)) s = "true";
        else if (cJSON_IsFalse(v)) s = "false";
        else return em__fail(EM_ERR_FORMAT, "%s:%lld: field \"%s\" is %s; expected a string, number or boolean",
                             t->path, (long long)line, t->names[c], em__json_kind(v));
    size_t off;
    if (!arena_add(a, s, strlen(s), &off) || !push_cell(b, off)) return EM_ERR_OOM;
    return EM_OK;
}

/* Columns from the caller's list, or (fields NULL) the keys of the first object. */
static em_status jsonl_columns(em_table *t, const char *const *fields, int nfields, const cJSON *first, long long line)
{
    int n = 0;
    size_t chars = 0;
    if (fields) {
        for (int i = 0; i < nfields; i++) chars += strlen(fields[i]) + 1;
        n = nfields;
    } else if (first) {
        for (const cJSON *c = first->child; c; c = c->next) { chars += strlen(c->string) + 1; n++; }
    }
    if (!alloc_names(t, n, chars)) return EM_ERR_OOM;
    char *s = (char *)(t->names + n);
    const cJSON *c = first ? first->child : NULL;
    for (int i = 0; i < n; i++) {
        const char *name = fields ? fields[i] : c->string;
        if (!fields) c = c->next;
        size_t k = strlen(name) + 1;
        memcpy(s, name, k);
        t->names[i] = s;
        s += k;
    }
    t->cols = n;
    int at, again;   /* two columns of one name would both read one key's value */
    if (!fields && !first_repeat(t->names, n, &at, &again)) return EM_ERR_OOM;
    if (!fields && again >= 0)
        return em__fail(EM_ERR_FORMAT, "%s:%lld: the key \"%s\" appears twice in the first object, which names the "
                        "columns", t->path, line, t->names[again]);
    return EM_OK;
}

static em_status parse_jsonl(em_table *t, char *buf, size_t start, size_t len, const char *const *fields,
                             int nfields)
{
    em__json_init();
    builder b = { .t = t };
    arena a = {0};
    em_status st = EM_OK;
    bool have_cols = false;
    int64_t line = 0;
    for (size_t s = start, e; s < len; s = e + 1) {
        line++;
        const char *nl = memchr(buf + s, '\n', len - s);
        e = nl ? (size_t)(nl - buf) : len;
        buf[e] = 0;
        size_t k = s;
        while (k < e && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\r')) k++;
        if (k == e) continue;   /* a blank line */

        const char *end = NULL;
        em_clear_error();
        cJSON *obj = cJSON_ParseWithLengthOpts(buf + s, e - s, &end, false);
        if (!obj) {
            if (em_last_status() == EM_ERR_OOM) { st = EM_ERR_OOM; break; }
            size_t pos = end && end >= buf + s && end <= buf + e ? (size_t)(end - (buf + s)) : 0;
            char near[24];
            size_t m = 0;
            for (size_t i = s + pos; i < e && m < 16; i++)
                near[m++] = (buf[i] >= 0x20 && buf[i] < 0x7f) ? buf[i] : '?';
            near[m] = 0;
            st = em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: invalid JSON (near \"%s\")", t->path, (long long)line,
                          pos + 1, near);
            break;
        }
        for (const char *p = end; p < buf + e; p++) {
            if (*p != ' ' && *p != '\t' && *p != '\r') {
                st = em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: unexpected text after the JSON value (one object per line)",
                              t->path, (long long)line, (size_t)(p - (buf + s)) + 1);
                break;
            }
        }
        if (!st && !cJSON_IsObject(obj))
            st = em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: expected a JSON object, found %s", t->path, (long long)line,
                          k - s + 1, em__json_kind(obj));
        /* "\u0000" would cut the string short in silence (cells are NUL-terminated) */
        size_t nul = st ? 0 : em__json_nul_escape(buf + s, e - s);
        if (nul)
            st = em__fail(EM_ERR_FORMAT, "%s:%lld:%zu: a string holds \\u0000 (a NUL character), which ember's text "
                          "cells cannot hold", t->path, (long long)line, nul);
        if (!st && !have_cols) {
            st = jsonl_columns(t, fields, nfields, obj, (long long)line);
            have_cols = true;
        }
        if (!st) st = jsonl_row(t, &b, &a, obj, line);
        cJSON_Delete(obj);
        if (st) break;
    }
    if (!st && !have_cols) st = jsonl_columns(t, fields, nfields, NULL, 0);
    if (st) {
        em__free(a.s);
        return st;
    }
    em__free(t->buf);
    t->buf = a.s ? a.s : em__malloc(1);   /* an empty table still owns a buffer */
    return t->buf ? EM_OK : EM_ERR_OOM;
}

/* ---- entry points ------------------------------------------------------------------- */
em_status em__table_parse(const char *name, char *buf, size_t len, em__table_kind kind,
                          const em_table_opts *opts, const char *const *fields, int nfields, em_table **out)
{
    *out = NULL;
    em_table *t = em__calloc(1, sizeof *t);
    if (!t) { em__free(buf); return EM_ERR_OOM; }
    t->buf = buf;
    buf[len] = 0;
    em_status st = EM_OK;
    if (!(t->path = em__strdup(name))) st = EM_ERR_OOM;
    size_t start = len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    if (!st) st = check_text(t->path, buf, start, len, kind != EM__TABLE_JSONL);
    if (!st) {
        if (kind == EM__TABLE_JSONL) st = parse_jsonl(t, buf, start, len, fields, nfields);
        else {
            char delim = opts && opts->delimiter ? opts->delimiter : kind == EM__TABLE_TSV ? '\t' : ',';
            st = parse_delimited(t, buf, start, len, delim, kind == EM__TABLE_CSV, !(opts && opts->no_header));
        }
    }
    if (st) { em_table_free(t); return st; }
    *out = t;
    return EM_OK;
}

static em_status read_delimited(const char *op, const char *path, const em_table_opts *opts, em__table_kind kind,
                                em_table **out)
{
    TB_CHECK(out, op, "out is NULL");
    *out = NULL;
    TB_CHECK(path, op, "path is NULL");
    char dl = opts ? opts->delimiter : 0;
    TB_CHECK(dl != '\n' && dl != '\r' && !(kind == EM__TABLE_CSV && dl == '"'), op,
             "the delimiter cannot be a quote or a line break (got 0x%02X)", (unsigned char)dl);
    char *buf;
    size_t len;
    em_status st = em__read_file(path, 0, &buf, &len);
    if (st) return st;
    return em__table_parse(path, buf, len, kind, opts, NULL, 0, out);
}

em_status em_table_read_tsv(const char *path, const em_table_opts *opts, em_table **out)
{
    return read_delimited("em_table_read_tsv", path, opts, EM__TABLE_TSV, out);
}

em_status em_table_read_csv(const char *path, const em_table_opts *opts, em_table **out)
{
    return read_delimited("em_table_read_csv", path, opts, EM__TABLE_CSV, out);
}

em_status em_table_read_jsonl(const char *path, const char *const *fields, int nfields, em_table **out)
{
    TB_CHECK(out, "em_table_read_jsonl", "out is NULL");
    *out = NULL;
    TB_CHECK(path, "em_table_read_jsonl", "path is NULL");
    TB_CHECK(nfields >= 0 && (fields || nfields == 0), "em_table_read_jsonl", "nfields is %d and fields %s",
             nfields, fields ? "non-NULL" : "NULL");
    for (int i = 0; i < nfields; i++) TB_CHECK(fields[i], "em_table_read_jsonl", "fields[%d] is NULL", i);
    char *buf;
    size_t len;
    em_status st = em__read_file(path, 0, &buf, &len);
    if (st) return st;
    return em__table_parse(path, buf, len, EM__TABLE_JSONL, NULL, fields, nfields, out);
}

void em_table_free(em_table *t)
{
    if (!t) return;
    em__free(t->path);
    em__free(t->buf);
    em__free(t->cell);
    em__free(t->line);
    em__free(t->names);
    em__free(t);
}

/* ---- access -------------------------------------------------------------------------- */
int64_t em_table_rows(const em_table *t)
{
    if (!t) { em__misuse("em_table_rows", "the table is NULL"); return 0; }
    return t->rows;
}

int em_table_cols(const em_table *t)
{
    if (!t) { em__misuse("em_table_cols", "the table is NULL"); return 0; }
    return t->cols;
}

int em_table_col(const em_table *t, const char *name)
{
    if (!t || !name) { em__misuse("em_table_col", "%s is NULL", t ? "name" : "the table"); return -1; }
    for (int c = 0; c < t->cols; c++)
        if (strcmp(t->names[c], name) == 0) return c;
    return -1;
}

const char *em_table_col_name(const em_table *t, int col)
{
    if (!t) { em__misuse("em_table_col_name", "the table is NULL"); return NULL; }
    if (col < 0 || col >= t->cols) {
        em__misuse("em_table_col_name", "column %d out of range for a table of %d columns", col, t->cols);
        return NULL;
    }
    return t->names[col];
}

const char *em_table_get(const em_table *t, int64_t row, int col)
{
    if (!t) { em__misuse("em_table_get", "the table is NULL"); return NULL; }
    if (row < 0 || row >= t->rows || col < 0 || col >= t->cols) {
        em__misuse("em_table_get", "cell (%lld, %d) out of range for a table of %lld rows and %d columns",
                   (long long)row, col, (long long)t->rows, t->cols);
        return NULL;
    }
    return t->buf + t->cell[(size_t)row * (size_t)t->cols + (size_t)col];
}

int64_t em_table_line(const em_table *t, int64_t row)
{
    if (!t) { em__misuse("em_table_line", "the table is NULL"); return 0; }
    if (row < 0 || row >= t->rows) {
        em__misuse("em_table_line", "row %lld out of range for a table of %lld rows", (long long)row,
                   (long long)t->rows);
        return 0;
    }
    return t->line[row];
}

const char *em_table_path(const em_table *t)
{
    if (!t) { em__misuse("em_table_path", "the table is NULL"); return NULL; }
    return t->path;
}
