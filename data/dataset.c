/* ember — data/: the em_dataset interface helpers and the tokenized
 * in-memory dataset (every row of a table encoded once, in parallel).
 *
 * Layout: all ids of all rows in one array, type ids in a second, row i
 * spanning [start[i], start[i+1]); labels in a fourth. get() only points
 * into them, so any number of threads may read the dataset at once. */
#include "data/table_internal.h"
#include "tensor/support.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DS_CHECK(cond, op, ...) do { if (!(cond)) { em__misuse(op, __VA_ARGS__); return EM_ERR_INVALID; } } while (0)

/* ---- the interface ------------------------------------------------------------ */
em_status em_dataset_get(const em_dataset *ds, int64_t index, em_sample *out)
{
    DS_CHECK(ds && ds->ops && out, "em_dataset_get", "%s is NULL", !ds ? "the dataset" : !ds->ops ? "ds->ops" : "out");
    DS_CHECK(ds->ops->len && ds->ops->get, "em_dataset_get", "the dataset's ops table has no %s",
             !ds->ops->len ? "len" : "get");
    int64_t n = ds->ops->len(ds);
    DS_CHECK(index >= 0 && index < n, "em_dataset_get", "index %lld out of range for a dataset of %lld samples",
             (long long)index, (long long)n);
    return ds->ops->get(ds, index, out);
}

void em_dataset_free(em_dataset *ds)
{
    if (!ds) return;
    if (!ds->ops || !ds->ops->free) {
        em__misuse("em_dataset_free", "the dataset's ops table %s", !ds->ops ? "is NULL" : "has no free");
        return;
    }
    ds->ops->free(ds);
}

/* ---- the tokenized dataset ------------------------------------------------------- */
typedef struct tok_dataset {
    em_dataset base;
    int64_t n;
    int64_t *start;      /* n + 1 offsets into ids / type_ids */
    int32_t *ids, *type_ids;
    int64_t *labels;
} tok_dataset;

static int64_t tok_len(const em_dataset *ds) { return ((const tok_dataset *)ds)->n; }

static em_status tok_get(const em_dataset *ds, int64_t i, em_sample *out)
{
    const tok_dataset *d = (const tok_dataset *)ds;
    int64_t s = d->start[i];
    *out = (em_sample){ .ids = d->ids + s, .type_ids = d->type_ids + s, .len = (int32_t)(d->start[i + 1] - s),
                        .label = d->labels[i] };
    return EM_OK;
}

static void tok_free(em_dataset *ds)
{
    tok_dataset *d = (tok_dataset *)ds;
    em__free(d->start);
    em__free(d->ids);
    em__free(d->type_ids);
    em__free(d->labels);
    em__free(d);
}

static const em_dataset_ops tok_ops = { tok_len, tok_get, tok_free };

/* A named column's index, or EM_ERR_NOT_FOUND listing the table's columns. */
static em_status find_col(const em_table *t, const char *name, int *col)
{
    if ((*col = em_table_col(t, name)) >= 0) return EM_OK;
    char list[256];
    size_t n = 0;
    list[0] = 0;
    for (int c = 0; c < t->cols && n < sizeof list - 1; c++) {
        int k = snprintf(list + n, sizeof list - n, "%s%s", c ? ", " : "", t->names[c]);
        if (k < 0) break;
        n += (size_t)k;
    }
    if (n >= sizeof list - 1) memcpy(list + sizeof list - 5, "...", 4);
    return em__fail(EM_ERR_NOT_FOUND, "%s: no column \"%s\" (the columns are: %s)", t->path, name,
                    t->cols ? list : "none");
}

/* A decimal integer with optional surrounding spaces/tabs. */
static bool parse_int(const char *s, int64_t *v)
{
    while (*s == ' ' || *s == '\t') s++;
    if (!*s || *s == '\n' || *s == '\r' || *s == '\f' || *s == '\v') return false;
    errno = 0;
    char *end;
    long long x = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE) return false;
    while (*end == ' ' || *end == '\t') end++;
    if (*end) return false;
    *v = x;
    return true;
}

static em_status parse_labels(const em_table *t, int col, const char *const *names, int64_t *labels)
{
    for (int64_t r = 0; r < t->rows; r++) {
        const char *s = t->buf + t->cell[(size_t)r * (size_t)t->cols + (size_t)col];
        if (names) {
            int64_t id = -1;
            for (int64_t k = 0; names[k]; k++)
                if (strcmp(names[k], s) == 0) { id = k; break; }
            if (id < 0) {
                char known[160];
                size_t n = 0;
                known[0] = 0;
                for (int k = 0; names[k] && n < sizeof known - 1; k++) {
                    int m = snprintf(known + n, sizeof known - n, "%s\"%s\"", k ? ", " : "", names[k]);
                    if (m < 0) break;
                    n += (size_t)m;
                }
                if (n >= sizeof known - 1) memcpy(known + sizeof known - 5, "...", 4);
                return em__fail(EM_ERR_INVALID, "%s:%lld: label \"%.60s\" is not one of the label names (%s)",
                                t->path, (long long)t->line[r], s, known);
            }
            labels[r] = id;
        } else if (!parse_int(s, &labels[r])) {
            return em__fail(EM_ERR_FORMAT, "%s:%lld: label \"%.60s\" is not an integer", t->path,
                            (long long)t->line[r], s);
        }
    }
    return EM_OK;
}

enum { CHUNK = 8192 };   /* rows per em_tokenizer_encode_batch call */

typedef struct builder {
    tok_dataset *d;
    size_t cap;          /* capacity of ids / type_ids */
} builder;

static bool append(builder *b, const em_encoding *e, int64_t row)
{
    tok_dataset *d = b->d;
    size_t used = (size_t)d->start[row], need = used + (size_t)e->len;
    if (need > b->cap) {
        size_t nc = b->cap ? b->cap : 1 << 16;
        while (nc < need) nc *= 2;
        int32_t *ni = em__realloc(d->ids, nc * sizeof *ni);
        if (!ni) return false;
        d->ids = ni;
        int32_t *nt = em__realloc(d->type_ids, nc * sizeof *nt);
        if (!nt) return false;
        d->type_ids = nt;
        b->cap = nc;
    }
    memcpy(d->ids + used, e->ids, (size_t)e->len * sizeof *e->ids);
    memcpy(d->type_ids + used, e->type_ids, (size_t)e->len * sizeof *e->type_ids);
    d->start[row + 1] = (int64_t)need;
    return true;
}

/* Re-states a batch failure ("text <i>: why") as "path:line: column ...: why". */
static em_status batch_error(const em_table *t, int64_t row0, const char *col_a, const char *col_b)
{
    em_status st = em_last_status();
    char why[1024];
    int i = -1, skip = 0;
    const char *msg = em_last_error();
    if (sscanf(msg, "text %d: %n", &i, &skip) == 1 && skip > 0) msg += skip;
    else i = -1;
    snprintf(why, sizeof why, "%s", msg);
    if (i < 0) return em__fail(st, "%s: %s", t->path, why);
    int64_t line = t->line[row0 + i];
    if (col_b) return em__fail(st, "%s:%lld: columns \"%s\" and \"%s\": %s", t->path, (long long)line, col_a, col_b, why);
    return em__fail(st, "%s:%lld: column \"%s\": %s", t->path, (long long)line, col_a, why);
}

static em_status tokenize_rows(const em_table *t, const em_tokenizer *tok, const em_tokenized_opts *o, int ca,
                               int cb, int max_length, builder *b)
{
    int64_t n = t->rows;
    int chunk = n < CHUNK ? (int)n : CHUNK;
    const char **texts = em__malloc((size_t)chunk * 2 * sizeof *texts + 1);
    em_encoding *enc = em__calloc((size_t)chunk + 1, sizeof *enc);
    em_status st = texts && enc ? EM_OK : EM_ERR_OOM;
    const char **pairs = texts ? texts + chunk : NULL;
    em_encode_opts eo = { .max_length = max_length, .num_threads = o->num_threads };
    size_t cols = (size_t)t->cols;
    for (int64_t r0 = 0; !st && r0 < n; r0 += chunk) {
        int m = n - r0 < chunk ? (int)(n - r0) : chunk;
        for (int i = 0; i < m; i++) {
            texts[i] = t->buf + t->cell[(size_t)(r0 + i) * cols + (size_t)ca];
            if (cb >= 0) pairs[i] = t->buf + t->cell[(size_t)(r0 + i) * cols + (size_t)cb];
        }
        st = em_tokenizer_encode_batch(tok, m, texts, cb >= 0 ? pairs : NULL, &eo, enc);
        if (st) { st = batch_error(t, r0, o->text_a, cb >= 0 ? o->text_b : NULL); break; }
        for (int i = 0; i < m; i++) {
            if (!st && !append(b, &enc[i], r0 + i)) st = EM_ERR_OOM;
            em_encoding_free(&enc[i]);
        }
    }
    em__free(texts);
    em__free(enc);
    return st;
}

em_status em_tokenized_dataset_new(const em_table *t, const em_tokenizer *tok, const em_tokenized_opts *opts,
                                   em_dataset **out)
{
    static const char op[] = "em_tokenized_dataset_new";
    DS_CHECK(out, op, "out is NULL");
    *out = NULL;
    DS_CHECK(t && tok && opts, op, "%s is NULL", !t ? "the table" : !tok ? "the tokenizer" : "opts");
    DS_CHECK(opts->text_a, op, "opts->text_a (the text column) is NULL");
    DS_CHECK(opts->max_length >= 0 && opts->num_threads >= 0, op, "max_length %d and num_threads %d must be >= 0",
             opts->max_length, opts->num_threads);
    int max_length = opts->max_length ? opts->max_length : 512;
    int specials = opts->text_b ? 3 : 2;
    if (max_length < specials)
        return em__fail(EM_ERR_INVALID, "%s: max_length %d leaves no room for the %d special tokens", op, max_length,
                        specials);

    int ca, cb = -1, cl = -1;
    em_status st = find_col(t, opts->text_a, &ca);
    if (!st && opts->text_b) st = find_col(t, opts->text_b, &cb);
    if (!st && opts->label) st = find_col(t, opts->label, &cl);
    if (st) return st;

    tok_dataset *d = em__calloc(1, sizeof *d);
    if (!d) return EM_ERR_OOM;
    d->base.ops = &tok_ops;
    d->n = t->rows;
    d->start = em__calloc((size_t)t->rows + 1, sizeof *d->start);
    d->labels = em__malloc(((size_t)t->rows + 1) * sizeof *d->labels);
    if (!d->start || !d->labels) st = EM_ERR_OOM;
    if (!st) {
        if (cl >= 0) st = parse_labels(t, cl, opts->label_names, d->labels);
        else for (int64_t r = 0; r < t->rows; r++) d->labels[r] = -1;
    }
    builder b = { .d = d };
    if (!st) st = tokenize_rows(t, tok, opts, ca, cb, max_length, &b);
    if (st) { tok_free(&d->base); return st; }
    *out = &d->base;
    return EM_OK;
}
