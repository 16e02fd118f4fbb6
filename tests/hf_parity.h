/* Checks against Hugging Face goldens (safetensors written by the
 * tools/make-*-fixture.py scripts with transformers), shared by the
 * model-family tests. Failures are Check assertions. */
#ifndef EMBER_TESTS_HF_PARITY_H
#define EMBER_TESTS_HF_PARITY_H

#include "ember.h"

#include <check.h>
#include <stdbool.h>

/* expr must return want; the message shows em_last_error() otherwise */
#define ck_status(expr, want) do { em_status s_ = (expr); \
    ck_assert_msg(s_ == (want), "%s -> %s (want %s): %s", #expr, em_status_name(s_), em_status_name(want), em_last_error()); } while (0)

/* dir/config.json parsed (asserts it reads and parses); free with cJSON_Delete. */
struct cJSON *saved_config(const char *dir);
/* from's bytes into to */
void copy_file(const char *from, const char *to);
/* The fixture file name, opened (asserts it opens). */
em_safetensors *golden_file(const char *name);
/* max |got - ref| / max(max |ref|, floor): the normwise error of one tensor. */
double normwise_err(em_tensor *got, em_tensor *ref, double floor);
/* Same shape, dtype and bits. */
bool same_tensor(em_tensor *a, em_tensor *b);
/* Every parameter's gradient against the golden's "grad.<name>", normwise
 * error under 1e-5 (normalizer floored at 1e-3 of the largest gradient);
 * returns how many were compared. */
int check_every_gradient(em_module *m, em_safetensors *g);
/* The classifier m (em_seqcls_forward) on the golden's batch (input_ids,
 * attention_mask, labels, and token_type_ids when types): logits within 1e-5
 * normwise of "logits" (and "logits64" when f64), loss within 1e-5 of
 * "loss"; then backward and check_every_gradient, whose count it returns. */
int check_hf_parity(em_module *m, const char *golden, bool types, bool f64);

#endif
