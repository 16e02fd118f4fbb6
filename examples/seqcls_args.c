/* examples/seqcls_args.c — seqcls's command line. Options take
 * run_glue_no_trainer.py's / Accelerate's underscore names; dashes are
 * accepted for every one (--max-train-steps), and the older short names
 * (--train, --dev, --epochs, --lr, ...) keep working as aliases. */
#include "seqcls.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void seqcls_usage(FILE *f)
{
    fprintf(f,
        "usage: seqcls [options]      (dashes or underscores: --max_train_steps = --max-train-steps)\n"
        "data:\n"
        "  --train_file F --validation_file F   TSV, CSV or JSONL with a header (aliases --train, --dev);\n"
        "                                       without them: a small built-in task\n"
        "  --format tsv|csv|jsonl               default: from the extension\n"
        "  --text_column COL [sentence] --text_pair_column COL [none] --label_column COL [label]\n"
        "  --label_names a,b,...                display names for the sorted labels of the data (id2label)\n"
        "  --max_length N [64]                  tokens per sequence, [CLS] and [SEP] included (alias --max-len)\n"
        "model:\n"
        "  --model_name_or_path DIR             a Hugging Face BERT or DistilBERT folder with tokenizer.json\n"
        "                                       or vocab.txt (alias --model_dir); its head may be missing\n"
        "  --vocab FILE                         vocab.txt for a model trained from scratch\n"
        "  --dim [64] --layers [2] --heads [4] --hidden [4*dim]   a small DistilBERT from scratch\n"
        "  --allow_missing_weights              train even when encoder tensors are missing (default: refuse)\n"
        "training:\n"
        "  --num_train_epochs N [3] (alias --epochs)    --max_train_steps N (overrides the epochs)\n"
        "  --per_device_train_batch_size N [16] (alias --batch_size)  --per_device_eval_batch_size N [= train]\n"
        "  --learning_rate LR [2e-5 with a model folder, else 1e-3] (alias --lr) --weight_decay W [0.01]\n"
        "  --num_warmup_steps N [10%% of the optimizer steps] (alias --warmup)\n"
        "  --gradient_accumulation_steps K [1] (alias --grad_accum)  --max_grad_norm N [off] (alias --clip)\n"
        "  --mixed_precision no|bf16|fp16 [bf16] --seed S [42] --num_workers N [0] (alias --workers)\n"
        "checkpoints (need --output_dir; kept in OUTPUT_DIR/checkpoints/checkpoint_<n>):\n"
        "  --checkpointing_steps N|epoch        save the full training state every N optimizer steps or epoch\n"
        "  --checkpoints_total_limit N [0=all]  keep the newest N\n"
        "  --resume_from_checkpoint PATH|latest continue a run where its checkpoint left it\n"
        "  --ignore_mismatched_config           resume even though precision, accumulation or model config changed\n"
        "evaluation and output:\n"
        "  --eval_steps N                       also evaluate every N optimizer steps (always: every epoch)\n"
        "  --output_dir DIR                     model, tokenizer files and all_results.json (main process)\n"
        "  --results_json FILE                  the final metrics as JSON (as all_results.json)\n"
        "  --log FILE --tensorboard DIR         JSONL scalars / a TensorBoard event file (main process)\n"
        "  --min_accuracy A                     exit 1 when the final dev accuracy is below A\n"
        "  --train_size N [2000] --dev_size N [500]   size of the built-in task\n");
}

typedef enum { STR, INT, I64, DBL, U64, FLAG } kind;
typedef struct opt {
    const char *names;   /* "canonical|alias|...", underscore spelling */
    kind k;
    void *p;
} opt;

static bool name_matches(const char *names, const char *key)
{
    size_t n = strlen(key);
    for (const char *s = names; *s;) {
        const char *e = strchr(s, '|');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && !strncmp(s, key, n)) return true;
        if (!e) break;
        s = e + 1;
    }
    return false;
}

bool seqcls_parse_args(int argc, char **argv, seqcls_args *a)
{
    *a = (seqcls_args){ .text_a = "sentence", .label_col = "label", .epochs = 3, .max_len = 64, .batch_size = 16,
                        .warmup = -1, .lr = -1, .weight_decay = 0.01, .min_accuracy = -1, .dim = 64, .layers = 2,
                        .heads = 4, .train_size = 2000, .dev_size = 500, .seed = 42 };
    const opt opts[] = {
        { "train_file|train", STR, &a->train }, { "validation_file|dev", STR, &a->dev },
        { "format", STR, &a->format }, { "vocab", STR, &a->vocab },
        { "model_name_or_path|model_dir", STR, &a->model_dir }, { "output_dir", STR, &a->output_dir },
        { "text_column|text_a", STR, &a->text_a }, { "text_pair_column|text_b", STR, &a->text_b },
        { "label_column|label_col", STR, &a->label_col }, { "label_names", STR, &a->label_names },
        { "log", STR, &a->log }, { "tensorboard", STR, &a->tensorboard }, { "results_json", STR, &a->results_json },
        { "mixed_precision", STR, &a->mixed_precision }, { "checkpointing_steps", STR, &a->checkpointing_steps },
        { "resume_from_checkpoint", STR, &a->resume },
        { "num_train_epochs|epochs", INT, &a->epochs }, { "gradient_accumulation_steps|grad_accum", INT, &a->grad_accum },
        { "max_length|max_len|max_seq_length", INT, &a->max_len }, { "num_workers|workers", INT, &a->workers },
        { "checkpoints_total_limit|total_limit", INT, &a->total_limit },
        { "per_device_train_batch_size|batch_size", I64, &a->batch_size },
        { "per_device_eval_batch_size|eval_batch_size", I64, &a->eval_batch_size },
        { "num_warmup_steps|warmup", I64, &a->warmup }, { "max_train_steps", I64, &a->max_train_steps },
        { "eval_steps", I64, &a->eval_steps },
        { "learning_rate|lr", DBL, &a->lr }, { "weight_decay", DBL, &a->weight_decay },
        { "min_accuracy", DBL, &a->min_accuracy }, { "max_grad_norm|clip", DBL, &a->clip },
        { "dim", I64, &a->dim }, { "layers", I64, &a->layers }, { "heads", I64, &a->heads },
        { "hidden", I64, &a->hidden }, { "train_size", I64, &a->train_size }, { "dev_size", I64, &a->dev_size },
        { "seed", U64, &a->seed }, { "allow_missing_weights", FLAG, &a->allow_fresh_encoder },
        { "ignore_mismatched_config", FLAG, &a->ignore_mismatched_config },
    };
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            seqcls_usage(stdout);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "seqcls: %s: unexpected argument (options start with --)\n", arg);
            return false;
        }
        char key[64];
        const char *eq = strchr(arg, '=');   /* --name=value is accepted too */
        size_t klen = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (klen >= sizeof key) klen = sizeof key - 1;
        memcpy(key, arg + 2, klen);
        key[klen] = 0;
        for (char *c = key; *c; c++)
            if (*c == '-') *c = '_';
        const opt *o = NULL;
        for (size_t j = 0; j < sizeof opts / sizeof *opts && !o; j++)
            if (name_matches(opts[j].names, key)) o = &opts[j];
        if (!o) {
            fprintf(stderr, "seqcls: unknown option %s (see --help)\n", arg);
            return false;
        }
        if (o->k == FLAG) {
            *(bool *)o->p = true;
            continue;
        }
        const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!v) {
            fprintf(stderr, "seqcls: %s needs a value\n", arg);
            return false;
        }
        char *end = NULL;
        switch (o->k) {
        case STR: *(const char **)o->p = v; end = ""; break;
        case INT: {
            long x = strtol(v, &end, 10);
            if (x < -1000000000L || x > 1000000000L) end = "bad";
            *(int *)o->p = (int)x;
            break;
        }
        case I64: *(int64_t *)o->p = strtoll(v, &end, 10); break;
        case U64: *(uint64_t *)o->p = strtoull(v, &end, 10); break;
        case DBL: *(double *)o->p = strtod(v, &end); break;
        case FLAG: break;
        }
        if (!*v || *end) {
            fprintf(stderr, "seqcls: %s: bad value '%s'\n", arg, v);
            return false;
        }
    }
    if (!a->train != !a->dev) {
        fprintf(stderr, "seqcls: give both --train_file and --validation_file, or neither\n");
        return false;
    }
    if (!a->eval_batch_size) a->eval_batch_size = a->batch_size;
    const char *bad = a->epochs < 1 ? "--num_train_epochs must be >= 1"
                    : a->batch_size < 1 || a->eval_batch_size < 1 ? "batch sizes must be >= 1"
                    : a->max_len < 3 ? "--max_length must be >= 3"
                    : a->grad_accum < 0 ? "--gradient_accumulation_steps must be >= 0"
                    : a->max_train_steps < 0 || a->eval_steps < 0 || a->total_limit < 0 ? "step counts must be >= 0"
                    : a->dim < 1 || a->layers < 1 || a->heads < 1 || a->dim % a->heads
                        ? "--dim, --layers and --heads must be >= 1, and dim a multiple of heads"
                    : a->train_size < 1 || a->dev_size < 1 ? "--train_size and --dev_size must be >= 1"
                    : a->hidden < 0 ? "--hidden must be >= 0 (0: 4 * dim)"
                    : a->lr != -1 && !(isfinite(a->lr) && a->lr > 0) ? "--learning_rate must be a finite number > 0"
                    : !(isfinite(a->weight_decay) && a->weight_decay >= 0)
                        ? "--weight_decay must be a finite number >= 0"
                    : !(isfinite(a->clip) && a->clip >= 0) ? "--max_grad_norm must be a finite number >= 0 (0: off)"
                    : NULL;
    /* paths go into fixed buffers with a suffix or two (seqcls.c): refuse what would be cut */
    const struct { const char *name, *v; } paths[] = {
        {"--train_file", a->train}, {"--validation_file", a->dev}, {"--model_name_or_path", a->model_dir},
        {"--vocab", a->vocab}, {"--output_dir", a->output_dir}, {"--log", a->log},
        {"--tensorboard", a->tensorboard}, {"--results_json", a->results_json},
        {"--resume_from_checkpoint", a->resume}};
    for (size_t j = 0; !bad && j < sizeof paths / sizeof *paths; j++)
        if (paths[j].v && strlen(paths[j].v) > SEQCLS_MAX_PATH) {
            fprintf(stderr, "seqcls: %s is %zu bytes long; at most %d\n", paths[j].name, strlen(paths[j].v),
                    SEQCLS_MAX_PATH);
            return false;
        }
    if (!bad && a->checkpointing_steps && strcmp(a->checkpointing_steps, "epoch")) {
        char *e;
        long long n = strtoll(a->checkpointing_steps, &e, 10);
        if (*e || n < 1) bad = "--checkpointing_steps takes a number of optimizer steps >= 1, or 'epoch'";
    }
    if (!bad && (a->checkpointing_steps || (a->resume && !strcmp(a->resume, "latest"))) && !a->output_dir)
        bad = "--checkpointing_steps and --resume_from_checkpoint latest need --output_dir (checkpoints go there)";
    if (bad) {
        fprintf(stderr, "seqcls: %s\n", bad);
        return false;
    }
    return true;
}
