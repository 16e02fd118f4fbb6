/* ember — data/: internals of the text tables (table.c), shared with the
 * tokenized dataset (dataset.c) and the fuzz harnesses (tools/fuzz/). Not installed. */
#ifndef EMBER_TABLE_INTERNAL_H
#define EMBER_TABLE_INTERNAL_H

#include "data/data.h"

#include <stddef.h>
#include <stdint.h>

/* Every string of a table lives in one buffer, `buf`; cells hold offsets into
 * it (the buffer may be the file itself, split in place). */
struct em_table {
    char *path;          /* as given to the reader, for messages           */
    char *buf;           /* owns every cell's bytes, each NUL-terminated   */
    size_t *cell;        /* rows * cols offsets into buf, row-major        */
    int64_t *line;       /* rows: the 1-based physical line a row starts on */
    char **names;        /* cols column names (one allocation with them)   */
    int64_t rows;
    int cols;
};

typedef enum em__table_kind { EM__TABLE_TSV, EM__TABLE_CSV, EM__TABLE_JSONL } em__table_kind;

/* Parses the len bytes at buf as a file named `name` (used in messages only).
 * Takes ownership of buf, which must come from em__malloc and have room for
 * len + 1 bytes (the parse writes in place); it is freed on failure. opts is
 * used by TSV/CSV, fields/nfields by JSONL. On failure *out is NULL. */
em_status em__table_parse(const char *name, char *buf, size_t len, em__table_kind kind,
                          const em_table_opts *opts, const char *const *fields, int nfields, em_table **out);

#endif
