/* examples/seqcls_data.c — seqcls's data: files in TSV, CSV or JSONL, the
 * label set read from the training file, and the built-in synthetic task. */
#include "seqcls.h"

#include <signal.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *ext_of(const char *path)
{
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    return dot && (!slash || dot > slash) ? dot + 1 : "";
}

/* Prints the reader's error (it names path:line:column). */
static em_status said(em_status st)
{
    if (st != EM_OK) fprintf(stderr, "seqcls: %s\n", em_last_error());
    return st;
}

em_status seqcls_read_table(const char *path, const seqcls_args *a, em_table **out)
{
    const char *fmt = a->format ? a->format : ext_of(path);
    if (!strcmp(fmt, "tsv")) return said(em_table_read_tsv(path, NULL, out));
    if (!strcmp(fmt, "csv")) return said(em_table_read_csv(path, NULL, out));
    if (!strcmp(fmt, "jsonl") || !strcmp(fmt, "json")) {
        const char *fields[3] = { a->text_a };
        int n = 1;
        if (a->text_b) fields[n++] = a->text_b;
        if (a->label_col) fields[n++] = a->label_col;
        return said(em_table_read_jsonl(path, fields, n, out));
    }
    *out = NULL;
    fprintf(stderr, "seqcls: %s: cannot tell the format from the extension \"%s\"; give --format tsv|csv|jsonl\n",
            path, fmt);
    return EM_ERR_INVALID;
}

void seqcls_labels_free(seqcls_labels *l)
{
    if (!l) return;
    for (int i = 0; l->keys && i < l->n; i++) free(l->keys[i]);
    for (int i = 0; l->names && i < l->n; i++) free(l->names[i]);
    free(l->keys), free(l->names);
    *l = (seqcls_labels){0};
}

/* A label string as an integer (surrounding spaces allowed), for sorting. */
static bool as_int(const char *s, long long *v)
{
    char *e;
    while (*s == ' ') s++;
    if (!*s) return false;
    *v = strtoll(s, &e, 10);
    while (*e == ' ') e++;
    return !*e;
}

static bool all_ints;
static int cmp_label(const void *x, const void *y)
{
    const char *a = *(const char *const *)x, *b = *(const char *const *)y;
    if (all_ints) {
        long long u = 0, v = 0;
        as_int(a, &u), as_int(b, &v);
        return (u > v) - (u < v);
    }
    return strcmp(a, b);
}

em_status seqcls_find_labels(const em_table *t, const seqcls_args *a, seqcls_labels *out)
{
    *out = (seqcls_labels){0};
    int col = em_table_col(t, a->label_col);
    if (col < 0) {
        fprintf(stderr, "seqcls: %s: no label column \"%s\" (give --label_column)\n", em_table_path(t), a->label_col);
        return EM_ERR_NOT_FOUND;
    }
    int64_t rows = em_table_rows(t);
    if (rows == 0) {
        fprintf(stderr, "seqcls: %s: the file has no data rows\n", em_table_path(t));
        return EM_ERR_INVALID;
    }
    enum { MAX_LABELS = 10000 };
    char **keys = calloc(MAX_LABELS + 1, sizeof *keys);
    int n = 0;
    all_ints = true;
    for (int64_t r = 0; r < rows && keys; r++) {
        const char *s = em_table_get(t, r, col);
        int i = 0;
        while (i < n && strcmp(keys[i], s)) i++;
        if (i < n) continue;
        size_t len = strlen(s);
        bool blank_edge = len && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1]));
        if (n == MAX_LABELS || !*s || blank_edge) {
            fprintf(stderr, "seqcls: %s:%lld: %s%s%s\n", em_table_path(t), (long long)em_table_line(t, r),
                    !*s ? "empty label" : blank_edge ? "the label \"" : "more than 10000 distinct labels: is --label_column right?",
                    blank_edge ? s : "", blank_edge ? "\" starts or ends with a blank (\"1\" and \" 1\" would be two labels)" : "");
            for (int k = 0; k < n; k++) free(keys[k]);
            free(keys);
            return EM_ERR_INVALID;
        }
        long long v;
        if (!as_int(s, &v)) all_ints = false;
        keys[n++] = strdup(s);
    }
    if (!keys) return EM_ERR_OOM;
    if (n < 2) {
        fprintf(stderr, "seqcls: %s: every row has the label \"%s\"; a classifier needs at least 2 labels\n",
                em_table_path(t), keys[0]);
        free(keys[0]), free(keys);
        return EM_ERR_INVALID;
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_label);
    out->n = n;
    out->keys = keys;
    out->names = calloc((size_t)n, sizeof *out->names);
    const char *s = a->label_names;
    for (int i = 0; i < n; i++) {
        if (!s) {
            out->names[i] = strdup(keys[i]);
            continue;
        }
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (!*s || (!e && i < n - 1) || (e && i == n - 1) || !len) {
            fprintf(stderr, "seqcls: --label_names \"%s\" must give exactly %d non-empty names for the labels", a->label_names, n);
            for (int k = 0; k < n; k++) fprintf(stderr, "%s%s", k ? ", " : " (", keys[k]);
            fprintf(stderr, ") of %s\n", em_table_path(t));
            seqcls_labels_free(out);
            return EM_ERR_INVALID;
        }
        out->names[i] = strndup(s, len);
        s = e ? e + 1 : NULL;
    }
    return EM_OK;
}

em_status seqcls_make_dataset(const em_table *t, const em_tokenizer *tok, const seqcls_args *a,
                              const seqcls_labels *labels, em_dataset **out)
{
    *out = NULL;
    if (em_table_rows(t) == 0) {
        fprintf(stderr, "seqcls: %s: the file has no data rows\n", em_table_path(t));
        return EM_ERR_INVALID;
    }
    em_status st = em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = a->text_a, .text_b = a->text_b,
                                                               .label = a->label_col,
                                                               .label_names = (const char *const *)labels->keys,
                                                               .max_length = a->max_len }, out);
    return said(st);
}

/* ---- the built-in task: sentences of neutral words with one or two sentiment words ---- */
static const char *const POSITIVE[] = { "good", "great", "excellent", "wonderful", "delightful", "superb",
                                        "brilliant", "charming", "moving", "enjoyable", "fun", "beautiful",
                                        "clever", "touching", "funny", "gripping" };
static const char *const NEGATIVE[] = { "bad", "awful", "terrible", "boring", "dull", "poor", "weak", "tedious",
                                        "messy", "lifeless", "bland", "clumsy", "painful", "forgettable",
                                        "annoying", "flat" };
static const char *const NEUTRAL[] = { "the", "a", "movie", "film", "story", "plot", "actors", "director", "scenes",
                                       "it", "was", "is", "this", "that", "and", "with", "of", "to", "in", "its",
                                       "script", "music", "ending", "characters", "performance", "cast", "camera",
                                       "pace", "dialogue", "hour", "second", "half", "first", "lead", "role",
                                       "sequel", "comedy", "drama", "thriller", "effects" };
#define COUNT(a) (int)(sizeof a / sizeof *a)

static uint64_t next_u64(uint64_t *s)   /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static bool write_split(const char *path, int64_t n, uint64_t *rng)
{
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "sentence\tlabel\n");
    for (int64_t i = 0; i < n; i++) {
        int label = (int)(next_u64(rng) % 2);
        int n_neutral = 4 + (int)(next_u64(rng) % 6), n_sent = 1 + (int)(next_u64(rng) % 2);
        int total = n_neutral + n_sent, placed = 0;
        for (int w = 0; w < total; w++) {
            /* sentiment words at random places among the neutral ones */
            bool sent = placed < n_sent && (int)(next_u64(rng) % (uint64_t)(total - w)) < n_sent - placed;
            const char *word;
            if (sent) {
                word = label ? POSITIVE[next_u64(rng) % COUNT(POSITIVE)] : NEGATIVE[next_u64(rng) % COUNT(NEGATIVE)];
                placed++;
            } else {
                word = NEUTRAL[next_u64(rng) % COUNT(NEUTRAL)];
            }
            fprintf(f, "%s%s", w ? " " : "", word);
        }
        fprintf(f, "\t%d\n", label);
    }
    return fclose(f) == 0;
}

/* The built-in task's folder goes on every exit path: seqcls_remove_builtin
 * after reading, exit() (DIE, a failing rank) through atexit, and SIGINT,
 * SIGTERM or SIGHUP (mpirun stopping a job) through a handler that only
 * unlinks precomputed paths (async-signal-safe) and then dies of the signal. */
static char builtin_dir[256], builtin_files[3][512];
static volatile sig_atomic_t builtin_live;

static void remove_builtin_now(void)
{
    if (!builtin_live) return;
    builtin_live = 0;
    for (int i = 0; i < 3; i++) unlink(builtin_files[i]);
    rmdir(builtin_dir);
}

static void remove_builtin_on_signal(int sig)
{
    remove_builtin_now();
    signal(sig, SIG_DFL);
    raise(sig);
}

bool seqcls_make_builtin(char *dir, size_t cap, const seqcls_args *a)
{
    snprintf(dir, cap, "%s/ember-seqcls-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (strlen(dir) >= sizeof builtin_dir - 16 || !mkdtemp(dir)) return false;
    static const char *const files[3] = { "vocab.txt", "train.tsv", "dev.tsv" };
    snprintf(builtin_dir, sizeof builtin_dir, "%s", dir);
    for (int i = 0; i < 3; i++) snprintf(builtin_files[i], sizeof builtin_files[i], "%s/%s", dir, files[i]);
    static bool hooked;
    if (!hooked) {
        hooked = true;
        atexit(remove_builtin_now);
        const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
        for (int i = 0; i < 3; i++) {
            struct sigaction old;
            if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) signal(sigs[i], remove_builtin_on_signal);
        }
    }
    builtin_live = 1;
    FILE *f = fopen(builtin_files[0], "w");
    if (!f) return false;
    fprintf(f, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
    for (int i = 0; i < COUNT(NEUTRAL); i++) fprintf(f, "%s\n", NEUTRAL[i]);
    for (int i = 0; i < COUNT(POSITIVE); i++) fprintf(f, "%s\n", POSITIVE[i]);
    for (int i = 0; i < COUNT(NEGATIVE); i++) fprintf(f, "%s\n", NEGATIVE[i]);
    if (fclose(f) != 0) return false;
    uint64_t rng = a->seed * 1000003u + 17;
    return write_split(builtin_files[1], a->train_size, &rng) && write_split(builtin_files[2], a->dev_size, &rng);
}

void seqcls_remove_builtin(const char *dir)
{
    (void)dir;   /* the one folder seqcls_make_builtin made */
    remove_builtin_now();
}
