/* examples/seqcls.h — the pieces of the seqcls fine-tuning script
 * (seqcls.c: the training loop; seqcls_args.c: the command line;
 * seqcls_data.c: data files, labels, the built-in task). Not a library API. */
#ifndef EMBER_EXAMPLES_SEQCLS_H
#define EMBER_EXAMPLES_SEQCLS_H

#include "ember.h"

#include <stdint.h>

/* Every option, with run_glue_no_trainer.py's names (see usage()). Strings
 * point into argv. */
typedef struct seqcls_args {
    const char *train, *dev, *format, *vocab, *model_dir, *output_dir;
    const char *text_a, *text_b, *label_col, *label_names;
    const char *log, *tensorboard, *results_json;
    const char *mixed_precision;         /* NULL: bf16, as the Accelerate loop */
    const char *checkpointing_steps;     /* NULL, "epoch" or a number */
    const char *resume;                  /* --resume_from_checkpoint PATH|latest */
    int epochs, grad_accum, max_len, workers, total_limit;
    int64_t batch_size, eval_batch_size, warmup, max_train_steps, eval_steps;   /* warmup < 0: 10% of the steps */
    double lr, weight_decay, min_accuracy, clip;
    int64_t dim, layers, heads, hidden, train_size, dev_size;
    uint64_t seed;
    bool allow_fresh_encoder;            /* --allow_missing_weights: missing encoder tensors are only reported */
    bool ignore_mismatched_config;       /* resume across a changed precision / accumulation / model config */
} seqcls_args;

/* Parses argv into *a; prints the problem and returns false on a bad command
 * line. --help prints usage and exits 0. */
/* The longest path option taken (the program's buffers hold it with its suffixes). */
#define SEQCLS_MAX_PATH 900
bool seqcls_parse_args(int argc, char **argv, seqcls_args *a);
void seqcls_usage(FILE *f);

/* The labels of a task: the strings that appear in the training file's label
 * column (sorted: numerically when all are integers, else bytewise, as
 * run_glue_no_trainer sorts them), and the display names that id2label gets
 * (--label_names, else the strings themselves). */
typedef struct seqcls_labels {
    int n;
    char **keys;    /* NULL-terminated: the label strings of the data, id = index */
    char **names;   /* n display names */
} seqcls_labels;
void seqcls_labels_free(seqcls_labels *l);

/* Reads a data file by --format or its extension (.tsv, .csv, .jsonl/.json). */
em_status seqcls_read_table(const char *path, const seqcls_args *a, em_table **out);
/* The label set of the training table (label_names: "a,b,..." or NULL). */
em_status seqcls_find_labels(const em_table *train, const seqcls_args *a, seqcls_labels *out);
/* Tokenizes a table into a dataset with the task's labels; an empty table is an error naming the file. */
em_status seqcls_make_dataset(const em_table *t, const em_tokenizer *tok, const seqcls_args *a,
                              const seqcls_labels *labels, em_dataset **out);
/* Writes the built-in task (vocab.txt, train.tsv, dev.tsv) into a new
 * temporary folder dir; seqcls_remove_builtin removes it. */
bool seqcls_make_builtin(char *dir, size_t cap, const seqcls_args *a);
void seqcls_remove_builtin(const char *dir);

#endif
