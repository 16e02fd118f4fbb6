/* examples/seqcls.c — fine-tune a sequence classifier with the Accelerator:
 * the same program on one process or on N.
 *
 * This is Hugging Face's canonical Accelerate loop, line for line in C
 * (DESIGN.md §3 gives the mapping):
 *
 *   accelerator = Accelerator(mixed_precision="bf16")
 *   model = AutoModelForSequenceClassification.from_pretrained(..., num_labels=2)
 *   loader = DataLoader(train_ds, batch_size=16, shuffle=True, collate_fn=collator)
 *   optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
 *   scheduler = get_linear_schedule_with_warmup(optimizer, 100, len(loader) * 3)
 *   model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
 *   model.train()
 *   for epoch in range(3):
 *       for batch in loader:
 *           loss = model(**batch).loss
 *           accelerator.backward(loss)
 *           optimizer.step(); scheduler.step(); optimizer.zero_grad()
 *       accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")
 *
 * plus an evaluation with gather_for_metrics after every epoch and
 * save_pretrained at the end. Two deliberate differences, both from
 * distributed.h: the schedule is sized in optimizer steps of the PREPARED
 * loader (ember steps the scheduler once per optimizer step, on every
 * world size), so it is built right after prepare; and weight decay skips
 * biases and LayerNorm weights (optim.h, em_param_groups_no_decay).
 *
 * Run it (from the repository root):
 *
 *   ./build/examples/seqcls                                   # built-in data, small model from scratch
 *   ./build/cli/ember launch --num_processes 2 ./build/examples/seqcls
 *   ./build/examples/seqcls --train ../shared/data/sst2/train.tsv --dev ../shared/data/sst2/dev.tsv \
 *       --vocab ../shared/data/bert-base-uncased/vocab.txt --max-len 66 --epochs 2 --output-dir sst2-model
 *   ./build/examples/seqcls --model-dir distilbert-base-uncased --train ... --dev ...   # an HF checkpoint folder
 *   ./build/examples/classify --model-dir sst2-model < sentences.txt
 *
 * Without --train the program writes its own small task into a temporary
 * folder (a vocab.txt and GLUE-style train.tsv / dev.tsv): sentences of
 * neutral words with one or two sentiment words, labelled by their polarity.
 * A small model learns it in seconds, so the example runs anywhere.
 *
 * It prints one loss line and one dev-accuracy line per epoch (main process
 * only), then "final dev accuracy A". --min-accuracy A makes it exit 1 below A.
 * A progress bar per epoch (it/s, ETA, loss) goes to stderr; --log FILE appends
 * JSONL scalars: {"step", "loss", "lr"} per optimizer step and {"step",
 * "epoch", "dev_accuracy"} per epoch (distributed.h, "progress and logging");
 * --tensorboard DIR writes the same scalars (train/loss, train/lr,
 * eval/accuracy) as a TensorBoard event file in DIR.
 */
#include "ember.h"
#include "distributed/distributed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct args {
    const char *train, *dev, *vocab, *model_dir, *output_dir;
    const char *text_a, *text_b, *label_col;
    const char *log;               /* --log FILE: JSONL scalars */
    const char *tensorboard;       /* --tensorboard DIR: an event file */
    const char *mixed_precision;   /* NULL: bf16, as the Python loop */
    int epochs, grad_accum, max_len, workers;
    int64_t batch_size, warmup;   /* warmup < 0: min(100, 10% of the optimizer steps) */
    double lr, weight_decay, min_accuracy, clip;
    int64_t dim, layers, heads, hidden;
    int64_t train_size, dev_size;
    uint64_t seed;
} args;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: seqcls [options]\n"
            "  data:  --train TSV --dev TSV   GLUE-style files with a header (default: built-in synthetic task)\n"
            "         --text-a COL [sentence] --text-b COL [none] --label-col COL [label]\n"
            "         --vocab vocab.txt       (default: the model dir's, or the built-in one)\n"
            "         --max-len N [64]        tokens per sequence, [CLS] and [SEP] included\n"
            "         --train-size N [2000] --dev-size N [500]   size of the built-in task\n"
            "  model: --model-dir DIR         an HF checkpoint folder (config.json, model.safetensors)\n"
            "         or a small DistilBERT from scratch: --dim [64] --layers [2] --heads [4] --hidden [4*dim]\n"
            "  train: --epochs [3] --batch-size [16] --lr [2e-5 with --model-dir, else 1e-3]\n"
            "         --warmup STEPS [min(100, 10%% of the steps)] --weight-decay [0.01] --clip NORM [off]\n"
            "         --mixed-precision no|bf16|fp16 [bf16]\n"
            "         --grad-accum K [1; or EMBER_GRADIENT_ACCUMULATION_STEPS] --workers N [0] --seed [42]\n"
            "  out:   --output-dir DIR        save_pretrained + vocab.txt (main process)\n"
            "         --min-accuracy A        exit 1 when the final dev accuracy is below A\n"
            "         --log FILE              append JSONL scalars (loss, lr, dev accuracy); main process\n"
            "         --tensorboard DIR       the same scalars as a TensorBoard event file in DIR; main process\n");
}

static bool parse_args(int argc, char **argv, args *a)
{
    *a = (args){ .text_a = "sentence", .label_col = "label", .epochs = 3, .max_len = 64, .batch_size = 16,
                 .warmup = -1, .lr = -1, .weight_decay = 0.01, .min_accuracy = -1, .dim = 64, .layers = 2,
                 .heads = 4, .train_size = 2000, .dev_size = 500, .seed = 42 };
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(k, "-h") || !strcmp(k, "--help")) {
            usage(stdout);
            exit(0);
        }
        if (!v || strncmp(k, "--", 2) != 0) {
            fprintf(stderr, "seqcls: %s: %s\n", k, v ? "unknown argument" : "missing value");
            return false;
        }
        i++;
#define STR(name, field) if (!strcmp(k, name)) { a->field = v; continue; }
#define NUM(name, field, conv) if (!strcmp(k, name)) { char *e; a->field = conv; if (*e) goto bad; continue; }
        STR("--train", train) STR("--dev", dev) STR("--vocab", vocab) STR("--model-dir", model_dir)
        STR("--output-dir", output_dir) STR("--text-a", text_a) STR("--text-b", text_b)
        STR("--label-col", label_col) STR("--mixed-precision", mixed_precision) STR("--log", log) STR("--tensorboard", tensorboard)
        NUM("--epochs", epochs, (int)strtol(v, &e, 10)) NUM("--grad-accum", grad_accum, (int)strtol(v, &e, 10))
        NUM("--max-len", max_len, (int)strtol(v, &e, 10)) NUM("--workers", workers, (int)strtol(v, &e, 10))
        NUM("--batch-size", batch_size, strtoll(v, &e, 10)) NUM("--warmup", warmup, strtoll(v, &e, 10))
        NUM("--lr", lr, strtod(v, &e)) NUM("--weight-decay", weight_decay, strtod(v, &e))
        NUM("--min-accuracy", min_accuracy, strtod(v, &e)) NUM("--clip", clip, strtod(v, &e))
        NUM("--dim", dim, strtoll(v, &e, 10)) NUM("--layers", layers, strtoll(v, &e, 10))
        NUM("--heads", heads, strtoll(v, &e, 10)) NUM("--hidden", hidden, strtoll(v, &e, 10))
        NUM("--train-size", train_size, strtoll(v, &e, 10)) NUM("--dev-size", dev_size, strtoll(v, &e, 10))
        NUM("--seed", seed, strtoull(v, &e, 10))
#undef STR
#undef NUM
        fprintf(stderr, "seqcls: unknown option %s\n", k);
        return false;
    bad:
        fprintf(stderr, "seqcls: %s: bad value '%s'\n", k, v);
        return false;
    }
    if (!a->train != !a->dev) {
        fprintf(stderr, "seqcls: give both --train and --dev, or neither\n");
        return false;
    }
    if (a->epochs < 1 || a->batch_size < 1 || a->max_len < 3 || a->grad_accum < 0 || a->dim < 1 || a->layers < 1 ||
        a->heads < 1 || a->dim % a->heads || a->train_size < 1 || a->dev_size < 1) {
        fprintf(stderr, "seqcls: an option is out of range (dim must be a multiple of heads)\n");
        return false;
    }
    return true;
}

/* ---- the built-in task ------------------------------------------------------------------ */
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

/* Writes vocab.txt, train.tsv and dev.tsv into a new temporary folder. */
static bool make_builtin_task(char *dir, size_t cap, const args *a)
{
    snprintf(dir, cap, "%s/ember-seqcls-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) return false;
    char path[512];
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return false;
    fprintf(f, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
    for (int i = 0; i < COUNT(NEUTRAL); i++) fprintf(f, "%s\n", NEUTRAL[i]);
    for (int i = 0; i < COUNT(POSITIVE); i++) fprintf(f, "%s\n", POSITIVE[i]);
    for (int i = 0; i < COUNT(NEGATIVE); i++) fprintf(f, "%s\n", NEGATIVE[i]);
    if (fclose(f) != 0) return false;
    uint64_t rng = a->seed * 1000003u + 17;
    snprintf(path, sizeof path, "%s/train.tsv", dir);
    if (!write_split(path, a->train_size, &rng)) return false;
    snprintf(path, sizeof path, "%s/dev.tsv", dir);
    return write_split(path, a->dev_size, &rng);
}

/* ---- data ---------------------------------------------------------------------------------- */
static em_status load_split(const char *path, const em_tokenizer *tok, const args *a, em_dataset **out)
{
    em_table *t;
    em_status st = em_table_read_tsv(path, NULL, &t);
    if (st != EM_OK) return st;
    st = em_tokenized_dataset_new(t, tok, &(em_tokenized_opts){ .text_a = a->text_a, .text_b = a->text_b,
                                                               .label = a->label_col, .max_length = a->max_len },
                                  out);
    em_table_free(t);
    return st;
}

static int num_labels_of(const em_dataset *ds)
{
    int64_t m = 1;
    for (int64_t i = 0; i < em_dataset_len(ds); i++) {
        em_sample s;
        if (em_dataset_get(ds, i, &s) == EM_OK && s.label > m) m = s.label;
    }
    return (int)m + 1;
}

static em_tensor **parameters(em_module *m, const char ***names, int *n)
{
    em_named_tensors ps = em_module_named_parameters(m);
    em_tensor **p = malloc(sizeof(em_tensor *) * (size_t)ps.n);
    *names = malloc(sizeof(char *) * (size_t)ps.n);
    for (int i = 0; i < ps.n; i++) {
        p[i] = ps.items[i].tensor;
        (*names)[i] = strdup(ps.items[i].name);
    }
    *n = ps.n;
    em_named_tensors_free(&ps);
    return p;
}

static bool copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    char buf[1 << 16];
    size_t k;
    bool ok = in && out;
    while (ok && (k = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, k, out) == k;
    if (in) fclose(in);
    if (out && fclose(out) != 0) ok = false;
    return ok;
}

/* Accuracy on the dev loader: predictions and labels gathered across ranks,
 * the padded duplicates of the last batch dropped (gather_for_metrics). */
static double evaluate(em_accelerator *acc, em_module *model, em_dataloader *dl, int64_t *correct, int64_t *total)
{
    em_module_train(model, false);
    *correct = *total = 0;
    EM_NO_GRAD {
        for (em_batch b; em_accelerator_next(acc, dl, &b);) {
            em_seqcls_output out;
            EM_AUTOCAST(acc) {
                out = em_seqcls_forward(model, &(em_seqcls_inputs){ .input_ids = b.input_ids,
                                                                    .attention_mask = b.attention_mask });
            }
            em_tensor *in[2] = { em_argmax(out.logits, -1, false), b.labels }, *g[2];
            if (em_accelerator_gather_for_metrics(acc, 2, in, g) != EM_OK) {
                fprintf(stderr, "seqcls: gather_for_metrics: %s\n", em_last_error());
                exit(1);
            }
            *correct += (int64_t)em_item(em_sum(em_eq(g[0], g[1]), 0, NULL, false));
            *total += g[0]->shape[0];
        }
    }
    em_module_train(model, true);
    return *total ? (double)*correct / (double)*total : 0;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define DIE(...) do { fprintf(stderr, "seqcls: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

int main(int argc, char **argv)
{
    args a;
    if (!parse_args(argc, argv, &a)) {
        usage(stderr);
        return 2;
    }
    em_mixed_precision mp = EM_MP_BF16;   /* Accelerator(mixed_precision="bf16") */
    if (a.mixed_precision) {
        if (!strcmp(a.mixed_precision, "no")) mp = EM_MP_NO;
        else if (!strcmp(a.mixed_precision, "bf16")) mp = EM_MP_BF16;
        else if (!strcmp(a.mixed_precision, "fp16")) mp = EM_MP_FP16;
        else DIE("--mixed-precision must be no, bf16 or fp16");
    }
    /* As in Accelerate, the program's own choice wins over the launcher's
     * EMBER_MIXED_PRECISION; a program that leaves .mixed_precision at
     * EM_MP_DEFAULT follows `ember launch --mixed_precision` instead. */
    em_set_seed(a.seed);

    em_accelerator *accelerator = em_accelerator_new(&(em_accelerator_opts){
        .mixed_precision = mp, .gradient_accumulation_steps = a.grad_accum });
    if (!accelerator) DIE("%s", em_last_error());

    /* data: GLUE TSVs, or the built-in task written to a temporary folder */
    char tmp[256] = "";
    char train_path[512], dev_path[512], vocab_path[512];
    if (a.train) {
        snprintf(train_path, sizeof train_path, "%s", a.train);
        snprintf(dev_path, sizeof dev_path, "%s", a.dev);
    } else {
        if (!make_builtin_task(tmp, sizeof tmp, &a)) DIE("cannot write the built-in task into %s", tmp);
        snprintf(train_path, sizeof train_path, "%s/train.tsv", tmp);
        snprintf(dev_path, sizeof dev_path, "%s/dev.tsv", tmp);
    }
    if (a.vocab) snprintf(vocab_path, sizeof vocab_path, "%s", a.vocab);
    else if (a.model_dir) snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", a.model_dir);
    else if (tmp[0]) snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", tmp);
    else DIE("--vocab is needed with --train (or a --model-dir that holds vocab.txt)");

    em_tokenizer *tok;
    em_dataset *train_ds, *dev_ds;
    if (em_tokenizer_load(vocab_path, NULL, &tok) != EM_OK) DIE("%s", em_last_error());
    if (load_split(train_path, tok, &a, &train_ds) != EM_OK || load_split(dev_path, tok, &a, &dev_ds) != EM_OK)
        DIE("%s", em_last_error());
    int num_labels = num_labels_of(train_ds);

    /* model = AutoModelForSequenceClassification.from_pretrained(dir, num_labels=...) */
    em_module *model;
    if (a.model_dir) {
        em_load_report report;
        if (em_seqcls_from_pretrained(a.model_dir, &(em_pretrained_opts){ .num_labels = num_labels }, &model,
                                      &report) != EM_OK)
            DIE("%s", em_last_error());
        if (em_accelerator_is_main_process(accelerator)) em_load_report_print(&report, stdout);
        em_load_report_free(&report);
    } else {
        em_distilbert_config cfg = { .vocab_size = em_tokenizer_vocab_size(tok), .n_layers = a.layers,
                                     .n_heads = a.heads, .dim = a.dim, .hidden_dim = a.hidden ? a.hidden : 4 * a.dim,
                                     .max_position_embeddings = a.max_len, .num_labels = num_labels };
        em_distilbert_seqcls *m = em_distilbert_seqcls_new(&cfg);
        if (!m) DIE("%s", em_last_error());
        model = &m->base;
    }
    if (!a.train && num_labels == 2) em_seqcls_set_labels(model, 2, (const char *[]){ "negative", "positive" });

    /* loader = DataLoader(train_ds, batch_size=16, shuffle=True, collate_fn=collator) */
    em_dataloader *loader, *dev_loader;
    if (em_dataloader_new(train_ds, &(em_dataloader_opts){ .batch_size = a.batch_size, .shuffle = true,
                                                          .num_workers = a.workers }, &loader) != EM_OK ||
        em_dataloader_new(dev_ds, &(em_dataloader_opts){ .batch_size = a.batch_size }, &dev_loader) != EM_OK)
        DIE("%s", em_last_error());

    /* optimizer = AdamW(model.parameters(), lr=2e-5), without decay on biases and LayerNorm weights */
    int n_params;
    const char **names;
    em_tensor **params = parameters(model, &names, &n_params);
    em_tensor **group_buf = malloc(sizeof(em_tensor *) * (size_t)n_params);
    em_param_group groups[2];
    int n_groups = em_param_groups_no_decay(names, params, n_params, a.weight_decay, group_buf, groups);
    double lr = a.lr > 0 ? a.lr : a.model_dir ? 2e-5 : 1e-3;
    em_optimizer *optimizer = em_adamw_new_groups(groups, n_groups, &(em_adamw_opts){ .lr = lr });
    if (!optimizer) DIE("%s", em_last_error());

    /* model, optimizer, loader = accelerator.prepare(model, optimizer, loader) */
    if (em_accelerator_prepare(accelerator, model, optimizer, loader, NULL) != EM_OK ||
        em_accelerator_prepare_dataloader(accelerator, dev_loader) != EM_OK)
        DIE("prepare: %s", em_last_error());
    /* scheduler = get_linear_schedule_with_warmup(optimizer, 100, steps), in optimizer steps of this rank */
    int K = em_accelerator_gradient_accumulation_steps(accelerator);
    int64_t steps = (em_dataloader_len(loader) + K - 1) / K * a.epochs;
    int64_t warmup = a.warmup >= 0 ? a.warmup : (steps / 10 < 100 ? steps / 10 : 100);
    em_scheduler *scheduler = em_linear_schedule_with_warmup(optimizer, warmup, steps);
    em_accelerator_prepare_scheduler(accelerator, scheduler);

    em_accelerator_print(accelerator,
                         "seqcls: %d process(es), %s, %lld train / %lld dev examples, %lld params, %lld optimizer "
                         "steps (warmup %lld), lr %g, batch %lld x %d process(es) x %d accumulation, mixed precision "
                         "%s\n",
                         em_accelerator_num_processes(accelerator), a.model_dir ? a.model_dir : "from scratch",
                         (long long)em_dataset_len(train_ds), (long long)em_dataset_len(dev_ds),
                         (long long)em_module_num_parameters(model, true), (long long)steps, (long long)warmup, lr,
                         (long long)a.batch_size, em_accelerator_num_processes(accelerator), K,
                         (const char *[]){ "default", "no", "bf16", "fp16" }[em_accelerator_mixed_precision(accelerator)]);

    em_logger *logger = NULL;
    if (a.log && !(logger = em_logger_new(accelerator, a.log))) DIE("%s", em_last_error());
    em_tb_writer *tb = NULL;
    if (a.tensorboard && !(tb = em_tb_writer_new(accelerator, a.tensorboard))) DIE("%s", em_last_error());

    double t0 = now_s(), accuracy = 0;
    em_module_train(model, true);   /* model.train() */
    for (int epoch = 0; epoch < a.epochs; epoch++) {
        double loss = NAN;
        char desc[32];
        snprintf(desc, sizeof desc, "epoch %d", epoch);
        em_progress *bar = em_progress_new(accelerator, em_dataloader_len(loader), desc);
        for (em_batch batch; em_accelerator_next(accelerator, loader, &batch);) {   /* for batch in loader: */
            EM_ACCUMULATE(accelerator, model) {
                em_seqcls_output out;
                EM_AUTOCAST(accelerator) {   /* prepare() wraps forward in autocast in Python */
                    out = em_seqcls_forward(model, &(em_seqcls_inputs){ .input_ids = batch.input_ids,
                                                                        .attention_mask = batch.attention_mask,
                                                                        .labels = batch.labels });
                }
                if (em_accelerator_backward(accelerator, out.loss) != EM_OK) DIE("backward: %s", em_last_error());
                if (a.clip > 0 && em_accelerator_sync_gradients(accelerator))
                    em_accelerator_clip_grad_norm(accelerator, model, a.clip);
                if (em_accelerator_optimizer_step(accelerator, optimizer) != EM_OK) DIE("step: %s", em_last_error());
                em_accelerator_scheduler_step(accelerator, scheduler);
                em_accelerator_optimizer_zero_grad(accelerator, optimizer);
                loss = em_item(out.loss);
                if ((logger || tb) && em_accelerator_sync_gradients(accelerator)) {
                    int64_t step = em_accelerator_optimizer_steps(accelerator);
                    double values[] = { loss, em_optimizer_lr(optimizer, 0) };
                    if (logger && em_logger_log(logger, step, 2, (const char *[]){ "loss", "lr" }, values) != EM_OK)
                        DIE("%s", em_last_error());
                    if (tb && em_tb_writer_add_scalars(tb, step, 2, (const char *[]){ "train/loss", "train/lr" }, values) !=
                                  EM_OK)
                        DIE("%s", em_last_error());
                }
            }
            em_progress_update(bar, 1, loss);
        }
        em_progress_free(bar);
        if (em_dataloader_status(loader) != EM_OK) DIE("%s", em_last_error());
        em_accelerator_print(accelerator, "epoch %d loss %.4f\n", epoch, loss);
        int64_t correct, total;
        accuracy = evaluate(accelerator, model, dev_loader, &correct, &total);
        em_accelerator_print(accelerator, "epoch %d dev accuracy %.4f (%lld/%lld), %.1f s\n", epoch, accuracy,
                             (long long)correct, (long long)total, now_s() - t0);
        if (logger &&
            em_logger_log(logger, em_accelerator_optimizer_steps(accelerator), 2, (const char *[]){ "epoch", "dev_accuracy" },
                          (double[]){ epoch, accuracy }) != EM_OK)
            DIE("%s", em_last_error());
        if (tb && em_tb_writer_add_scalars(tb, em_accelerator_optimizer_steps(accelerator), 1,
                                           (const char *[]){ "eval/accuracy" }, &accuracy) != EM_OK)
            DIE("%s", em_last_error());
    }
    em_logger_free(logger);
    em_tb_writer_free(tb);
    em_accelerator_print(accelerator, "final dev accuracy %.4f\n", accuracy);

    int status = 0;
    if (a.output_dir) {
        if (em_accelerator_save_model(accelerator, model, a.output_dir) != EM_OK) DIE("%s", em_last_error());
        EM_ON_MAIN_PROCESS(accelerator) {
            char to[600];
            snprintf(to, sizeof to, "%s/vocab.txt", a.output_dir);
            if (!copy_file(vocab_path, to)) DIE("cannot copy %s to %s", vocab_path, to);
            em_accelerator_print(accelerator, "saved to %s\n", a.output_dir);
        }
        em_accelerator_wait_for_everyone(accelerator);
    }
    if (a.min_accuracy >= 0 && accuracy < a.min_accuracy) {
        em_accelerator_print(accelerator, "seqcls: accuracy %.4f is below --min-accuracy %.4f\n", accuracy,
                             a.min_accuracy);
        status = 1;
    }

    em_accelerator_free(accelerator);
    em_scheduler_free(scheduler);
    em_optimizer_free(optimizer);
    for (int i = 0; i < n_params; i++) free((void *)names[i]);
    free(names), free(params), free(group_buf);
    em_dataloader_free(loader), em_dataloader_free(dev_loader);
    em_module_free(model);
    em_dataset_free(train_ds), em_dataset_free(dev_ds);
    em_tokenizer_free(tok);
    if (tmp[0]) {
        const char *files[] = { "vocab.txt", "train.tsv", "dev.tsv" };
        char path[512];
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s/%s", tmp, files[i]);
            remove(path);
        }
        rmdir(tmp);
    }
    return status;
}
