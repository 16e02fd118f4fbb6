/* ember tests — the tokenizer tests' shared helpers (tok_util.h). */
#include "tok_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

tu_tsv tu_tsv_read(const char *path, int cols)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    tu_tsv t = { .cols = cols };
    char *line = NULL;
    size_t cap = 0;
    ck_assert_msg(getline(&line, &cap, f) > 0, "%s: no header line", path);
    while (getline(&line, &cap, f) > 0) {
        line[strcspn(line, "\n")] = 0;
        t.cell = realloc(t.cell, sizeof *t.cell * (size_t)(t.rows + 1) * (size_t)cols);
        char **row = t.cell + (size_t)t.rows * (size_t)cols, *p = line;
        int k = 0;
        for (;; k++) {
            size_t len = strcspn(p, "\t");
            ck_assert_msg(k < cols, "%s row %d: more than %d cells", path, t.rows, cols);
            row[k] = strndup(p, len);
            if (!p[len]) break;
            p += len + 1;
        }
        ck_assert_msg(k + 1 == cols, "%s row %d: %d cells, want %d", path, t.rows, k + 1, cols);
        t.rows++;
    }
    free(line);
    fclose(f);
    return t;
}

void tu_tsv_free(tu_tsv *t)
{
    for (size_t i = 0; i < (size_t)t->rows * (size_t)t->cols; i++) free(t->cell[i]);
    free(t->cell);
    *t = (tu_tsv){0};
}

char *tu_unescape(const char *s)
{
    if (!strcmp(s, "\\N")) return NULL;
    char *out = malloc(strlen(s) + 1), *o = out;
    for (; *s; s++) {
        if (*s != '\\') { *o++ = *s; continue; }
        s++;
        switch (*s) {
        case 't': *o++ = '\t'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case '\\': *o++ = '\\'; break;
        case 'x': {
            char hex[3] = { s[1], s[2], 0 };
            *o++ = (char)strtol(hex, NULL, 16);
            s += 2;
            break;
        }
        default: ck_abort_msg("bad escape \\%c", *s);
        }
    }
    *o = 0;
    return out;
}

int tu_parse_ints(const char *s, int32_t **out)
{
    int cap = 16, n = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    char *end;
    for (long x = strtol(s, &end, 10); end != s; x = strtol(s, &end, 10)) {
        if (n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = (int32_t)x;
        s = end;
    }
    *out = v;
    return n;
}

const char *tu_ids_str(const int32_t *ids, int n)
{
    static char buf[4][8192];
    static int k;
    char *b = buf[k++ & 3];
    size_t m = 0;
    b[0] = 0;
    for (int i = 0; i < n && m < sizeof buf[0] - 16; i++)
        m += (size_t)snprintf(b + m, sizeof buf[0] - m, i ? " %d" : "%d", ids[i]);
    return b;
}

int tu_compare_cases(const em_tokenizer *t, const char *path, int *rows)
{
    tu_tsv c = tu_tsv_read(path, 4);
    int bad = 0;
    for (int i = 0; i < c.rows; i++) {
        char *text = tu_unescape(tu_tsv_at(&c, i, 0)), *pair = tu_unescape(tu_tsv_at(&c, i, 1));
        int32_t *ids, *types;
        int n = tu_parse_ints(tu_tsv_at(&c, i, 2), &ids);
        ck_assert_msg(tu_parse_ints(tu_tsv_at(&c, i, 3), &types) == n, "%s row %d: ids and type_ids differ in length",
                      path, i);
        em_encoding e;
        em_status st = pair ? em_tokenizer_encode_pair(t, text, pair, NULL, &e) : em_tokenizer_encode(t, text, NULL, &e);
        ck_assert_msg(st == EM_OK, "%s row %d: %s", path, i, em_last_error());
        bool same = e.len == n && !memcmp(e.ids, ids, (size_t)n * 4) && !memcmp(e.type_ids, types, (size_t)n * 4);
        if (!same && ++bad <= 8)
            fprintf(stderr, "%s row %d \"%s\"%s%s%s\n  want %s\n  got  %s\n", path, i, text, pair ? " + \"" : "",
                    pair ? pair : "", pair ? "\"" : "", tu_ids_str(ids, n), tu_ids_str(e.ids, e.len));
        for (int k = 0; k < e.len; k++) ck_assert_msg(e.attention_mask[k] == 1, "%s row %d: attention mask", path, i);
        em_encoding_free(&e);
        free(text), free(pair), free(ids), free(types);
    }
    if (rows) *rows = c.rows;
    tu_tsv_free(&c);
    return bad;
}

void tu_check_golden(const em_tokenizer *t, const char *rel, int ncols, int text_col, int ids_col, int expect_rows,
                     const char *through)
{
    tu_tsv g = tu_tsv_read(tu_shared_path(rel), ncols);
    int bad = 0;
    for (int r = 0; r < g.rows; r++) {
        const char *text = tu_tsv_at(&g, r, text_col);
        int32_t *want;
        int nw = tu_parse_ints(tu_tsv_at(&g, r, ids_col), &want);
        em_encoding e;
        em_status st = em_tokenizer_encode(t, text, NULL, &e);
        ck_assert_msg(st == EM_OK, "%s row %d: %s", rel, r, em_last_error());
        if ((e.len != nw || memcmp(e.ids, want, (size_t)nw * sizeof *want)) && ++bad <= 5)
            fprintf(stderr, "%s row %d \"%s\"\n  want %s\n  got  %s\n", rel, r, text, tu_ids_str(want, nw),
                    tu_ids_str(e.ids, e.len));
        free(want);
        em_encoding_free(&e);
    }
    ck_assert_int_eq(g.rows, expect_rows);
    ck_assert_msg(bad == 0, "%s: %d of %d rows differ %s", rel, bad, g.rows, through);
    tu_tsv_free(&g);
}
