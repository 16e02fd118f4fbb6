/* examples/seqcls.c — fine-tune a sequence classifier with the Accelerator:
 * the same program on one process or on N. It is transformers'
 * run_glue_no_trainer.py in C, with the same flags (seqcls_args.c):
 *
 *   accelerator = Accelerator(mixed_precision="bf16", project_dir=output_dir, ...)
 *   tokenizer = AutoTokenizer.from_pretrained(model_dir)        # tokenizer.json or vocab.txt
 *   model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=..., id2label=...)
 *   loader = DataLoader(train_ds, batch_size=32, shuffle=True, collate_fn=DataCollatorWithPadding)
 *   optimizer = AdamW(grouped_parameters, lr=...)              # no decay on biases and LayerNorm
 *   model, optimizer, loader, eval_loader = accelerator.prepare(...)
 *   scheduler = get_linear_schedule_with_warmup(optimizer, warmup, max_train_steps)
 *   if resume_from_checkpoint: accelerator.load_state(path)     # continues mid-epoch, same data order
 *   for epoch in range(starting_epoch, num_train_epochs):
 *       model.train()
 *       for batch in loader:
 *           with accelerator.accumulate(model), autocast:
 *               loss = model(**batch).loss
 *               accelerator.backward(loss); optimizer.step(); scheduler.step(); optimizer.zero_grad()
 *           if sync step: log; checkpoint every N steps; evaluate every eval_steps; stop at max_train_steps
 *       evaluate (accuracy, F1) with gather_for_metrics; checkpoint if "epoch"
 *   accelerator.save_model(model, output_dir) (with the tokenizer attached); all_results.json
 *
 * Two deliberate differences, both from distributed.h: the schedule is sized
 * in optimizer steps of the PREPARED loader (ember steps the scheduler once
 * per optimizer step, on every world size), and checkpoints use the
 * accelerator's automatic naming (OUTPUT_DIR/checkpoints/checkpoint_<n>, the
 * newest --checkpoints_total_limit kept), so "latest" needs no directory scan.
 *
 *   ./build/examples/seqcls                                   # built-in task, small model from scratch
 *   tools/fetch-model && ./build/examples/seqcls --model_name_or_path models/all-MiniLM-L6-v2 \
 *       --train_file examples/data/sst2/train.tsv --validation_file examples/data/sst2/dev.tsv \
 *       --label_names negative,positive --max_length 66 --per_device_train_batch_size 32 \
 *       --learning_rate 1e-4 --num_train_epochs 1 --output_dir sst2-model
 *   ./build/cli/ember launch --num_processes 2 ./build/examples/seqcls ...  # the same, on 2 processes
 *   ./build/examples/classify --model_dir sst2-model < sentences.txt
 *
 * docs/FINETUNE.md walks through all of it. Output (main process): one
 * "epoch N loss L" and one "epoch N dev accuracy A f1 F" line per epoch, then
 * "final dev accuracy A"; --min_accuracy A makes it exit 1 below A. A model
 * folder's missing ENCODER tensors are an error (--allow_missing_weights to
 * train anyway); a missing head is expected and reported. */
#include "seqcls.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIE(...) do { fprintf(stderr, "seqcls: " __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* model = AutoModelForSequenceClassification.from_pretrained(dir, num_labels=n) */
static em_module *load_model(const char *dir, int num_labels, bool allow_missing, bool main_process)
{
    em_module *model;
    em_load_report r;
    if (em_seqcls_from_pretrained(dir, &(em_pretrained_opts){ .num_labels = num_labels }, &model, &r) != EM_OK)
        DIE("%s", em_last_error());
    if (main_process) em_load_report_print(&r, stdout);
    int encoder_missing = 0;
    for (int i = 0; i < r.n_missing; i++)
        if (!em_seqcls_is_head_param(r.missing[i])) {
            if (!encoder_missing++) fprintf(stderr, "seqcls: %s lacks encoder tensors:", dir);
            fprintf(stderr, " %s", r.missing[i]);
        }
    if (encoder_missing) {
        fprintf(stderr, "\n");
        if (!allow_missing)
            DIE("%s is not a complete BERT/DistilBERT checkpoint (%d encoder tensor(s) missing, listed above); "
                "--allow_missing_weights trains them from a random start", dir, encoder_missing);
    }
    em_load_report_free(&r);
    return model;
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

/* ---- evaluation ------------------------------------------------------------------------ */
typedef struct metrics {
    double accuracy, f1;   /* f1: of label 1 with 2 labels (binary), else macro */
    int64_t n;
} metrics;

static metrics score(const int64_t *tp, const int64_t *fp, const int64_t *fn, int C, int64_t correct, int64_t n)
{
    metrics m = { .accuracy = n ? (double)correct / (double)n : 0, .n = n };
    double sum = 0;
    for (int c = C == 2 ? 1 : 0; c < C; c++) {
        double d = (double)(2 * tp[c] + fp[c] + fn[c]);
        sum += d > 0 ? 2.0 * (double)tp[c] / d : 0;
    }
    m.f1 = C == 2 ? sum : sum / C;
    return m;
}

/* Accuracy and F1 on the dev loader: predictions and labels gathered across
 * ranks, the padded duplicates of the last batch dropped (gather_for_metrics). */
static metrics evaluate(em_accelerator *acc, em_module *model, em_dataloader *dl, int C)
{
    bool was_training = em_module_is_training(model);
    em_module_train(model, false);
    int64_t *cnt = calloc(3 * (size_t)C, sizeof *cnt), *tp = cnt, *fp = cnt + C, *fn = cnt + 2 * C;
    int64_t correct = 0, n = 0;
    /* one region for the whole loop: autocast's casts of the weights (made
     * with grad mode off, cached as such) serve every batch */
    EM_NO_GRAD EM_AUTOCAST(acc) {
        for (em_batch b; em_accelerator_next(acc, dl, &b);) {
            em_seqcls_output out = em_seqcls_forward(model, &(em_seqcls_inputs){ .input_ids = b.input_ids,
                                                                                  .attention_mask = b.attention_mask,
                                                                                  .token_type_ids = b.token_type_ids });
            if (!out.logits) DIE("evaluation: %s", em_last_error());
            em_tensor *in[2] = { em_argmax(out.logits, -1, false), b.labels }, *g[2];
            if (em_accelerator_gather_for_metrics(acc, 2, in, g) != EM_OK) DIE("gather_for_metrics: %s", em_last_error());
            for (int64_t i = 0; i < g[0]->shape[0]; i++) {
                int p = (int)em_get(g[0], (int64_t[]){ i }), y = (int)em_get(g[1], (int64_t[]){ i });
                if (p < 0 || p >= C || y < 0 || y >= C) DIE("evaluation: label %d or prediction %d out of range", y, p);
                if (p == y) correct++, tp[p]++;
                else fp[p]++, fn[y]++;
                n++;
            }
        }
    }
    metrics m = score(tp, fp, fn, C, correct, n);
    free(cnt);
    em_module_train(model, was_training);
    return m;
}

/* ---- checkpoints ----------------------------------------------------------------------- */
static bool has_checkpoint(const char *output_dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/checkpoints", output_dir);
    DIR *d = opendir(path);
    if (!d) return false;
    bool found = false;   /* checkpoint_<digits> only: a .tmp-* folder is a save cut short */
    for (struct dirent *e; !found && (e = readdir(d));)
        found = !strncmp(e->d_name, "checkpoint_", 11) && e->d_name[11] &&
                strspn(e->d_name + 11, "0123456789") == strlen(e->d_name + 11);
    closedir(d);
    return found;
}

static void save_checkpoint(em_accelerator *acc, const char *why)
{
    int64_t it = em_accelerator_iteration(acc);
    if (em_accelerator_save_state(acc, NULL) != EM_OK) DIE("save_state: %s", em_last_error());
    em_accelerator_print(acc, "saved checkpoint_%lld (%s, optimizer step %lld)\n", (long long)it, why,
                         (long long)em_accelerator_optimizer_steps(acc));
}

/* ---- results ---------------------------------------------------------------------------- */
static void write_results(const char *path, const metrics *m, int64_t epoch, int64_t steps, double train_loss,
                          double train_s, double wall_s, int nproc, const char *mp, int64_t n_train)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp-seqcls", path);
    FILE *f = fopen(tmp, "w");
    if (!f) DIE("cannot write %s", tmp);
    char loss[32] = "null";   /* JSON has no NaN: a run resumed after its last step trained nothing */
    if (isfinite(train_loss)) snprintf(loss, sizeof loss, "%.6f", train_loss);
    fprintf(f,
            "{\n  \"eval_accuracy\": %.6f,\n  \"eval_f1\": %.6f,\n  \"eval_samples\": %lld,\n  \"epoch\": %lld,\n"
            "  \"step\": %lld,\n  \"train_loss\": %s,\n  \"train_samples\": %lld,\n  \"train_runtime\": %.3f,\n"
            "  \"num_processes\": %d,\n  \"mixed_precision\": \"%s\",\n"
            "  \"dev_accuracy\": %.6f,\n  \"dev_f1\": %.6f,\n  \"steps\": %lld,\n  \"train_s\": %.3f,\n  \"wall_s\": %.3f\n}\n",
            m->accuracy, m->f1, (long long)m->n, (long long)epoch, (long long)steps, loss, (long long)n_train,
            train_s, nproc, mp, m->accuracy, m->f1, (long long)steps, train_s, wall_s);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        DIE("cannot write %s", path);
    }
}

int main(int argc, char **argv)
{
    double t_start = now_s();
    seqcls_args a;
    if (!seqcls_parse_args(argc, argv, &a)) {
        fprintf(stderr, "(seqcls --help lists the options)\n");
        return 2;
    }
    em_mixed_precision mp = EM_MP_BF16;   /* Accelerator(mixed_precision="bf16") */
    if (a.mixed_precision) {
        if (!strcmp(a.mixed_precision, "no")) mp = EM_MP_NO;
        else if (!strcmp(a.mixed_precision, "bf16")) mp = EM_MP_BF16;
        else if (!strcmp(a.mixed_precision, "fp16")) mp = EM_MP_FP16;
        else DIE("--mixed_precision must be no, bf16 or fp16");
    }
    em_set_seed(a.seed);
    /* the program's own choice wins over `ember launch --mixed_precision`, as in Accelerate */
    em_accelerator *accelerator = em_accelerator_new(&(em_accelerator_opts){
        .mixed_precision = mp, .gradient_accumulation_steps = a.grad_accum, .project_dir = a.output_dir,
        .automatic_checkpoint_naming = a.output_dir != NULL, .total_limit = a.total_limit,
        .ignore_mismatched_config = a.ignore_mismatched_config });
    if (!accelerator) DIE("%s", em_last_error());
    bool main_process = em_accelerator_is_main_process(accelerator);

    /* data: the user's files, or the built-in task written to a temporary folder */
    char tmp[256] = "", train_path[1024], dev_path[1024];
    if (a.train) {
        snprintf(train_path, sizeof train_path, "%s", a.train);
        snprintf(dev_path, sizeof dev_path, "%s", a.dev);
    } else {
        if (!seqcls_make_builtin(tmp, sizeof tmp, &a)) DIE("cannot write the built-in task into %s", tmp);
        snprintf(train_path, sizeof train_path, "%s/train.tsv", tmp);
        snprintf(dev_path, sizeof dev_path, "%s/dev.tsv", tmp);
    }
    /* tokenizer = AutoTokenizer.from_pretrained(model_dir): tokenizer.json, else vocab.txt */
    em_tokenizer *tok = NULL;
    em_status st;
    if (a.vocab) st = em_tokenizer_load(a.vocab, NULL, &tok);
    else if (a.model_dir) st = em_tokenizer_from_pretrained(a.model_dir, NULL, &tok);
    else if (tmp[0]) st = em_tokenizer_from_pretrained(tmp, NULL, &tok);
    else DIE("--train_file needs a tokenizer: --model_name_or_path DIR (tokenizer.json or vocab.txt) or --vocab FILE");
    if (st != EM_OK) {
        seqcls_remove_builtin(tmp);
        DIE("%s", em_last_error());
    }
    em_table *train_t, *dev_t;
    seqcls_labels labels;
    em_dataset *train_ds, *dev_ds;
    if (seqcls_read_table(train_path, &a, &train_t) || seqcls_read_table(dev_path, &a, &dev_t) ||
        seqcls_find_labels(train_t, &a, &labels)) {
        seqcls_remove_builtin(tmp);
        exit(1);
    }
    em_module *model;
    if (a.model_dir) {
        model = load_model(a.model_dir, labels.n, a.allow_fresh_encoder, main_process);
        int64_t rows = em_seqcls_get_info(model).vocab_size;
        if (rows > 0 && em_tokenizer_vocab_size(tok) > rows)   /* an id past the embedding would abort mid-run */
            DIE("the tokenizer has %d tokens but %s/config.json's vocab_size is %lld: they do not belong together",
                em_tokenizer_vocab_size(tok), a.model_dir, (long long)rows);
    } else {
        em_distilbert_config cfg = { .vocab_size = em_tokenizer_vocab_size(tok), .n_layers = a.layers,
                                     .n_heads = a.heads, .dim = a.dim, .hidden_dim = a.hidden ? a.hidden : 4 * a.dim,
                                     .max_position_embeddings = a.max_len, .num_labels = labels.n };
        em_distilbert_seqcls *m = em_distilbert_seqcls_new(&cfg);
        if (!m) DIE("%s", em_last_error());
        model = &m->base;
    }
    /* as run_glue: a --max_length past the model's positions is cut to them, said once
     * (an input that long would stop the run at its first long batch) */
    int64_t model_max = em_seqcls_get_info(model).max_length;
    if (model_max > 0 && a.max_len > model_max) {
        em_accelerator_print(accelerator, "seqcls: --max_length %lld is longer than the model takes (%lld positions, "
                                          "%s/config.json); using %lld\n", (long long)a.max_len,
                             (long long)model_max, a.model_dir ? a.model_dir : "the model", (long long)model_max);
        a.max_len = (int)model_max;
    }
    if (seqcls_make_dataset(train_t, tok, &a, &labels, &train_ds) ||
        seqcls_make_dataset(dev_t, tok, &a, &labels, &dev_ds)) {
        seqcls_remove_builtin(tmp);
        exit(1);
    }
    em_table_free(train_t), em_table_free(dev_t);
    seqcls_remove_builtin(tmp);
    if (!a.train && !a.label_names) {   /* the built-in task's labels have names */
        free(labels.names[0]), free(labels.names[1]);
        labels.names[0] = strdup("negative"), labels.names[1] = strdup("positive");
    }

    em_seqcls_set_labels(model, labels.n, (const char *const *)labels.names);

    em_dataloader *loader, *dev_loader;
    if (em_dataloader_new(train_ds, &(em_dataloader_opts){ .batch_size = a.batch_size, .shuffle = true,
                                                          .num_workers = a.workers }, &loader) != EM_OK ||
        em_dataloader_new(dev_ds, &(em_dataloader_opts){ .batch_size = a.eval_batch_size }, &dev_loader) != EM_OK)
        DIE("%s", em_last_error());

    /* AdamW without decay on biases and LayerNorm weights */
    int n_params;
    const char **names;
    em_tensor **params = parameters(model, &names, &n_params);
    em_tensor **group_buf = malloc(sizeof(em_tensor *) * (size_t)n_params);
    em_param_group groups[2];
    int n_groups = em_param_groups_no_decay(names, params, n_params, a.weight_decay, group_buf, groups);
    double lr = a.lr > 0 ? a.lr : a.model_dir ? 2e-5 : 1e-3;
    em_optimizer *optimizer = em_adamw_new_groups(groups, n_groups, &(em_adamw_opts){ .lr = lr });
    if (!optimizer) DIE("%s", em_last_error());

    if (em_accelerator_prepare(accelerator, model, optimizer, loader, NULL) != EM_OK ||
        em_accelerator_prepare_dataloader(accelerator, dev_loader) != EM_OK)
        DIE("prepare: %s", em_last_error());
    /* the schedule in optimizer steps of this rank's prepared loader */
    int K = em_accelerator_gradient_accumulation_steps(accelerator);
    int64_t per_epoch = (em_dataloader_len(loader) + K - 1) / K;
    int64_t steps = per_epoch * a.epochs;
    int epochs = a.epochs;
    if (a.max_train_steps) {   /* as run_glue_no_trainer: max_train_steps wins and sets the epochs */
        steps = a.max_train_steps;
        int64_t e = per_epoch > 0 ? steps / per_epoch + (steps % per_epoch != 0) : 0;
        if (e > 1000000) DIE("--max_train_steps %lld is %lld epochs of %lld steps: more than the 1,000,000 this takes",
                             (long long)steps, (long long)e, (long long)per_epoch);
        epochs = (int)e;
    }
    int64_t warmup = a.warmup >= 0 ? a.warmup : (steps + 9) / 10;
    em_scheduler *scheduler = em_linear_schedule_with_warmup(optimizer, warmup, steps);
    em_accelerator_prepare_scheduler(accelerator, scheduler);
    int64_t ckpt_every = a.checkpointing_steps && strcmp(a.checkpointing_steps, "epoch")
                             ? strtoll(a.checkpointing_steps, NULL, 10) : 0;
    bool ckpt_epoch = a.checkpointing_steps && !strcmp(a.checkpointing_steps, "epoch");

    const char *mp_name = (const char *[]){ "default", "no", "bf16", "fp16" }[em_accelerator_mixed_precision(accelerator)];
    em_accelerator_print(accelerator,
                         "seqcls: %d process(es), %s, %lld train / %lld dev examples, %d labels, %lld params, "
                         "%lld optimizer steps (warmup %lld), lr %g, batch %lld x %d process(es) x %d accumulation, "
                         "mixed precision %s\n",
                         em_accelerator_num_processes(accelerator), a.model_dir ? a.model_dir : "from scratch",
                         (long long)em_dataset_len(train_ds), (long long)em_dataset_len(dev_ds), labels.n,
                         (long long)em_module_num_parameters(model, true), (long long)steps, (long long)warmup, lr,
                         (long long)a.batch_size, em_accelerator_num_processes(accelerator), K, mp_name);

    if (a.resume) {   /* accelerator.load_state: weights, optimizer, scheduler, RNG, loader position */
        bool latest = !strcmp(a.resume, "latest");
        if (latest && !has_checkpoint(a.output_dir)) {
            em_accelerator_print(accelerator, "no checkpoint in %s/checkpoints yet: starting from the beginning\n",
                                 a.output_dir);
        } else {
            if (em_accelerator_load_state(accelerator, latest ? NULL : a.resume) != EM_OK)
                DIE("resume: %s", em_last_error());
            em_loader_state pos = em_dataloader_state(loader);
            em_accelerator_print(accelerator, "resumed from %s at optimizer step %lld (epoch %lld, batch %lld)\n",
                                 latest ? "the latest checkpoint" : a.resume,
                                 (long long)em_accelerator_optimizer_steps(accelerator), (long long)pos.epoch,
                                 (long long)pos.batch);
        }
    }

    em_logger *logger = NULL;
    if (a.log && !(logger = em_logger_new(accelerator, a.log))) DIE("%s", em_last_error());
    em_tb_writer *tb = NULL;
    if (a.tensorboard && !(tb = em_tb_writer_new(accelerator, a.tensorboard))) DIE("%s", em_last_error());

    double t0 = now_s(), loss_sum = 0;
    int64_t loss_n = 0;
    metrics m = { 0 };
    bool done = a.max_train_steps && em_accelerator_optimizer_steps(accelerator) >= a.max_train_steps;
    int64_t epoch = em_dataloader_state(loader).epoch;
    em_module_train(model, true);   /* model.train(): from_pretrained returns it in eval mode */
    for (; epoch < epochs && !done; epoch++) {
        double loss = NAN;
        char desc[32];
        snprintf(desc, sizeof desc, "epoch %lld", (long long)epoch);
        em_progress *bar = em_progress_new(accelerator, em_dataloader_len(loader), desc);
        if (em_dataloader_state(loader).batch) em_progress_update(bar, em_dataloader_state(loader).batch, NAN);   /* resumed midway */
        for (em_batch batch; em_accelerator_next(accelerator, loader, &batch);) {
            EM_ACCUMULATE(accelerator, model) {
                em_seqcls_output out;
                EM_AUTOCAST(accelerator) {
                    out = em_seqcls_forward(model, &(em_seqcls_inputs){ .input_ids = batch.input_ids,
                                                                        .attention_mask = batch.attention_mask,
                                                                        .token_type_ids = batch.token_type_ids,
                                                                        .labels = batch.labels });
                }
                if (!out.loss) DIE("forward: %s", em_last_error());
                if (em_accelerator_backward(accelerator, out.loss) != EM_OK) DIE("backward: %s", em_last_error());
                if (a.clip > 0 && em_accelerator_sync_gradients(accelerator))
                    em_accelerator_clip_grad_norm(accelerator, model, a.clip);
                if (em_accelerator_optimizer_step(accelerator, optimizer) != EM_OK) DIE("step: %s", em_last_error());
                em_accelerator_scheduler_step(accelerator, scheduler);
                em_accelerator_optimizer_zero_grad(accelerator, optimizer);
                loss = em_item(out.loss);
            }
            if (!isfinite(loss))
                DIE("the loss is %g at optimizer step %lld (epoch %lld): stopping; lower --learning_rate or check "
                    "the data", loss, (long long)em_accelerator_optimizer_steps(accelerator), (long long)epoch);
            loss_sum += loss, loss_n++;
            em_progress_update(bar, 1, loss);
            if (!em_accelerator_sync_gradients(accelerator)) continue;
            int64_t step = em_accelerator_optimizer_steps(accelerator);
            double values[] = { loss, em_optimizer_lr(optimizer, 0) };
            if (logger && em_logger_log(logger, step, 2, (const char *[]){ "loss", "lr" }, values) != EM_OK)
                DIE("%s", em_last_error());
            if (tb && em_tb_writer_add_scalars(tb, step, 2, (const char *[]){ "train/loss", "train/lr" }, values) != EM_OK)
                DIE("%s", em_last_error());
            if (ckpt_every && step % ckpt_every == 0) save_checkpoint(accelerator, "checkpointing_steps");
            if (a.eval_steps && step % a.eval_steps == 0) {
                metrics e = evaluate(accelerator, model, dev_loader, labels.n);
                em_accelerator_print(accelerator, "\nstep %lld dev accuracy %.4f f1 %.4f\n", (long long)step,
                                     e.accuracy, e.f1);
                if (logger && em_logger_log(logger, step, 2, (const char *[]){ "dev_accuracy", "dev_f1" },
                                            (double[]){ e.accuracy, e.f1 }) != EM_OK)
                    DIE("%s", em_last_error());
            }
            if (a.max_train_steps && step >= a.max_train_steps) {
                done = true;
                em_accelerator_end_loop(accelerator, loader);   /* leaving early: free this batch's scope */
                break;
            }
        }
        em_progress_free(bar);
        if (em_dataloader_status(loader) != EM_OK) DIE("%s", em_last_error());
        em_accelerator_print(accelerator, "epoch %lld loss %.4f\n", (long long)epoch, loss);
        m = evaluate(accelerator, model, dev_loader, labels.n);
        em_accelerator_print(accelerator, "epoch %lld dev accuracy %.4f f1 %.4f (%lld examples), %.1f s\n",
                             (long long)epoch, m.accuracy, m.f1, (long long)m.n, now_s() - t0);
        int64_t step = em_accelerator_optimizer_steps(accelerator);
        if (logger && em_logger_log(logger, step, 3, (const char *[]){ "epoch", "dev_accuracy", "dev_f1" },
                                    (double[]){ (double)epoch, m.accuracy, m.f1 }) != EM_OK)
            DIE("%s", em_last_error());
        if (tb && em_tb_writer_add_scalars(tb, step, 2, (const char *[]){ "eval/accuracy", "eval/f1" },
                                           (double[]){ m.accuracy, m.f1 }) != EM_OK)
            DIE("%s", em_last_error());
        if (ckpt_epoch && !done) save_checkpoint(accelerator, "epoch");
    }
    if (!m.n) m = evaluate(accelerator, model, dev_loader, labels.n);   /* resumed after the last step */
    double train_s = now_s() - t0;
    em_logger_free(logger);
    em_tb_writer_free(tb);
    em_accelerator_print(accelerator, "final dev accuracy %.4f\n", m.accuracy);

    if (a.output_dir) {
        /* a model made here reads at most max_len positions: say so to transformers */
        if (!a.model_dir && !em_tokenizer_model_max_length(tok)) em_tokenizer_set_model_max_length(tok, a.max_len);
        em_accelerator_set_tokenizer(accelerator, tok);   /* save_model writes its files beside the model */
        if (em_accelerator_save_model(accelerator, model, a.output_dir) != EM_OK) DIE("%s", em_last_error());
        if (main_process) {
            char path[1024];
            snprintf(path, sizeof path, "%s/all_results.json", a.output_dir);
            write_results(path, &m, epoch, em_accelerator_optimizer_steps(accelerator),
                          loss_n ? loss_sum / (double)loss_n : NAN, train_s, now_s() - t_start,
                          em_accelerator_num_processes(accelerator), mp_name, em_dataset_len(train_ds));
            em_accelerator_print(accelerator, "saved the model, the tokenizer and all_results.json to %s\n",
                                 a.output_dir);
        }
        em_accelerator_wait_for_everyone(accelerator);
    }
    if (a.results_json && main_process)
        write_results(a.results_json, &m, epoch, em_accelerator_optimizer_steps(accelerator),
                      loss_n ? loss_sum / (double)loss_n : NAN, train_s, now_s() - t_start,
                      em_accelerator_num_processes(accelerator), mp_name, em_dataset_len(train_ds));
    int status = 0;
    if (a.min_accuracy >= 0 && m.accuracy < a.min_accuracy) {
        em_accelerator_print(accelerator, "seqcls: accuracy %.4f is below --min_accuracy %.4f\n", m.accuracy,
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
    seqcls_labels_free(&labels);
    return status;
}
