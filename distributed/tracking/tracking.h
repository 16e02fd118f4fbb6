/** @file
 * ember — distributed/tracking/: a tqdm-like progress bar, a JSONL scalar
 * logger and TensorBoard event files, each active on the main process only.
 * It sits beside the Accelerator, not on it: a NULL accelerator means "this
 * process is the main one", so a plain loop can use it too.
 */
#ifndef EMBER_TRACKING_H
#define EMBER_TRACKING_H

#include "tensor/tensor.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The Accelerator (distributed/accelerate/accelerator.h) whose main process
 * writes; tracking only asks it whether this is that process. */
struct em_accelerator;

/* ---- progress and logging ------------------------------------------------------------
 * A tqdm-like progress bar, a JSONL scalar logger and a TensorBoard writer.
 * Each acts on the main process only (acc NULL: this process counts as the
 * main one); on the other ranks they exist but do nothing, so the same loop
 * runs everywhere.
 *
 * Progress output goes to stderr (as tqdm's does; stdout stays clean for
 * results). On a terminal it is one line redrawn in place (at most every
 * 0.1 s, and on the last update):
 *     desc  42% |████      | 420/1000 [00:12<00:17, 34.5 it/s, loss=0.4321]
 * Elsewhere (a file, a pipe, CI) the same text without the bar, one line each
 * time another 10% is done, or 30 s have passed, and at the end. Rate = n /
 * elapsed since em_progress_new; ETA = (total - n) / rate. total <= 0: an
 * unknown total ("420it [00:12, 34.5 it/s]"). NULL only on OOM. */
/** A tqdm-like progress bar (opaque), as described above. */
typedef struct em_progress em_progress;
/** A progress bar of total iterations labelled desc (copied); free it with em_progress_free. */
em_progress *em_progress_new(struct em_accelerator *acc, int64_t total, const char *desc);
/** n more iterations done; loss NAN: none (the last loss given stays shown).
 * Reaching total ends the bar; later updates are ignored. */
void em_progress_update(em_progress *p, int64_t n, double loss);
/** Prints the final state if it was not shown yet. NULL is ok. */
void em_progress_free(em_progress *p);
/** For tests and special outputs: the stream (NULL: stderr), terminal mode
 * (0: isatty of the stream, 1: yes, -1: no) and the clock in seconds
 * (NULL: CLOCK_MONOTONIC). */
typedef struct em_progress_opts {
    FILE *out;                     /**< the stream; NULL: stderr */
    int tty;                       /**< 0: isatty(out), 1: terminal mode, -1: line mode */
    double (*clock)(void *user);   /**< seconds; NULL: CLOCK_MONOTONIC */
    void *clock_user;              /**< passed to clock */
} em_progress_opts;
/** em_progress_new with options (NULL: the defaults). */
em_progress *em_progress_new_opts(struct em_accelerator *acc, int64_t total, const char *desc, const em_progress_opts *opts);
/** The text of one progress line (bar_width 0: no bar), as snprintf. */
int em_progress_format(char *buf, size_t cap, const char *desc, int64_t n, int64_t total, double elapsed_s,
                       double loss, int bar_width);

/** Scalars to a JSONL file on the main process: each em_logger_log appends one
 * line {"step": 12, "loss": 0.4321, ...} with a single write(2) on a file
 * opened O_APPEND (never half a line on disk). NaN/inf are written as null.
 * em_logger_new: NULL with em_last_error() naming the path when the file
 * cannot be opened (on the main process; other ranks open nothing).
 * em_logger_log: EM_ERR_IO naming the path when the write fails. */
typedef struct em_logger em_logger;
/** A logger appending to path (created if needed); free it with em_logger_free. */
em_logger *em_logger_new(struct em_accelerator *acc, const char *path);
/** Appends {"step": step, names[i]: values[i], ...} (n pairs) as one line; a no-op off the main process. */
em_status em_logger_log(em_logger *lg, int64_t step, int n, const char *const *names, const double *values);
/** One scalar: em_logger_log with n = 1 (accelerator.log({name: value}, step=step)). */
em_status em_logger_log_scalar(em_logger *lg, int64_t step, const char *name, double value);
/** Closes the file and frees lg; NULL is ok. */
void em_logger_free(em_logger *lg);

/** Scalars as a TensorBoard event file on the main process (what
 * torch.utils.tensorboard's SummaryWriter.add_scalar writes). One file
 * `<logdir>/events.out.tfevents.<time>.<host>.<pid>.0` per writer, one
 * TFRecord-framed Event per em_tb_writer_add_scalars call, each written with
 * a single write(2). Other ranks get a writer that writes nothing. */
typedef struct em_tb_writer em_tb_writer;
/** A writer for a new event file in logdir (created if missing; its parent
 * must exist). NULL with em_last_error() naming the folder or file when it
 * cannot be created; the caller frees it with em_tb_writer_free. */
em_tb_writer *em_tb_writer_new(struct em_accelerator *acc, const char *logdir);
/** One event at step with n scalars (tag names[i], value values[i] rounded to
 * f32, as TensorBoard stores them). EM_ERR_IO naming the file when the write
 * fails, after which the writer writes nothing more; a no-op off the main
 * process. A NULL writer or a missing name is misuse. */
em_status em_tb_writer_add_scalars(em_tb_writer *w, int64_t step, int n, const char *const *names,
                                   const double *values);
/** One scalar (SummaryWriter.add_scalar(tag, value, step)): em_tb_writer_add_scalars with n = 1. */
em_status em_tb_writer_add_scalar(em_tb_writer *w, int64_t step, const char *tag, double value);
/** The event file's path (owned by w), or NULL on other ranks. */
const char *em_tb_writer_path(const em_tb_writer *w);
/** Closes the file and frees w; NULL is ok. */
void em_tb_writer_free(em_tb_writer *w);


/* caller locations for misuse messages (tensor.h's EM__AT) */
#ifndef EMBER_BUILDING
#include "distributed/tracking/tracking_at.h"
#endif

#ifdef __cplusplus
}
#endif
#endif
