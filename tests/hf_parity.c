/* Checks against Hugging Face goldens, shared by the model-family tests
 * (tests/test_distilbert.c, tests/test_roberta.c): see hf_parity.h. */
#include "hf_parity.h"

#include "check_util.h"
#include <cjson/cJSON.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* from's bytes into to */
void copy_file(const char *from, const char *to)
{
    size_t n;
    char *b = tu_read_file(from, &n);
    tu_write_file(to, b, n);
    free(b);
}

em_safetensors *golden_file(const char *name)
{
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(tu_fixture_path(name), &st), EM_OK);
    return st;
}

/* max |got - ref| / max(max |ref|, floor): the normwise error of one tensor. */
double normwise_err(em_tensor *got, em_tensor *ref, double floor)
{
    ck_assert_int_eq(em_numel(got), em_numel(ref));
    double *g = tu_to_doubles(got), *r = tu_to_doubles(ref), diff = 0, mx = floor;
    for (int64_t i = 0; i < em_numel(ref); i++) {
        diff = fmax(diff, fabs(g[i] - r[i]));
        mx = fmax(mx, fabs(r[i]));
    }
    free(g);
    free(r);
    return diff / mx;
}

bool same_tensor(em_tensor *a, em_tensor *b)
{
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) || a->dtype != b->dtype)
        return false;
    double *x = tu_to_doubles(a), *y = tu_to_doubles(b);
    bool same = true;
    for (int64_t i = 0; i < em_numel(a); i++) same = same && memcmp(&x[i], &y[i], sizeof *x) == 0;
    free(x);
    free(y);
    return same;
}

/* Gradients: per tensor, max |ember - HF| over max |HF| must stay under 1e-5
 * for every parameter of m against the golden file's "grad.<name>" tensors.
 * An exactly-zero gradient in exact arithmetic (DistilBERT's k_lin.bias:
 * softmax ignores a per-row constant) leaves both sides with rounding noise,
 * so the normalizer is floored at 1e-3 of the largest gradient of the model.
 * Returns how many gradients were compared. */
int check_every_gradient(em_module *m, em_safetensors *g)
{
    double scale = 0;
    for (int i = 0; i < em_safetensors_count(g); i++)
        if (!strncmp(em_safetensors_name(g, i), "grad.", 5))
            scale = fmax(scale, em_item(em_max_all(em_abs(em_safetensors_get(g, em_safetensors_name(g, i))))));
    em_named_tensors ps = em_module_named_parameters(m);
    for (int i = 0; i < ps.n; i++) {
        char key[256];
        snprintf(key, sizeof key, "grad.%s", ps.items[i].name);
        em_tensor *ref = em_safetensors_get(g, key), *got = em_grad(ps.items[i].tensor);
        ck_assert_msg(ref != NULL, "no golden gradient for %s", ps.items[i].name);
        ck_assert_msg(got != NULL, "no gradient for %s", ps.items[i].name);
        double e = normwise_err(got, ref, 1e-3 * scale);
        ck_assert_msg(e < 1e-5, "gradient of %s: normwise error %g", ps.items[i].name, e);
    }
    int n = ps.n;
    em_named_tensors_free(&ps);
    return n;
}

/* The classifier m (em_seqcls_forward) on the batch of the golden file golden (input_ids,
 * attention_mask, labels, and token_type_ids when types): logits of the
 * golden's shape within 1e-5 normwise of HF's "logits" (and of "logits64"
 * when f64), the loss within 1e-5 of "loss"; then backward, and every
 * gradient (check_every_gradient). Returns how many gradients were compared. */
int check_hf_parity(em_module *m, const char *golden, bool types, bool f64)
{
    em_safetensors *g = golden_file(golden);
    int n_grads = 0;
    EM_SCOPE {
        em_seqcls_output out = em_seqcls_forward(
            m, &(em_seqcls_inputs){.input_ids = em_safetensors_get(g, "input_ids"),
                                   .attention_mask = em_safetensors_get(g, "attention_mask"),
                                   .token_type_ids = types ? em_safetensors_get(g, "token_type_ids") : NULL,
                                   .labels = em_safetensors_get(g, "labels")});
        em_tensor *want = em_safetensors_get(g, "logits");
        ck_assert_int_eq(out.logits->ndim, want->ndim);
        for (int d = 0; d < want->ndim; d++) ck_assert_int_eq(out.logits->shape[d], want->shape[d]);
        double e_logits = normwise_err(out.logits, want, 0);
        double e_logits64 = f64 ? normwise_err(out.logits, em_safetensors_get(g, "logits64"), 0) : 0;
        double e_loss = normwise_err(out.loss, em_safetensors_get(g, "loss"), 0);
        ck_assert_msg(e_logits < 1e-5 && e_logits64 < 1e-5, "logits: %g vs HF f32, %g vs f64", e_logits, e_logits64);
        ck_assert_msg(e_loss < 1e-5, "loss: relative error %g", e_loss);
        em_backward(out.loss);
        n_grads = check_every_gradient(m, g);
    }
    em_safetensors_close(g);
    return n_grads;
}

cJSON *saved_config(const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *text = tu_read_file(path, NULL);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_msg(j != NULL, "%s does not parse as JSON", path);
    return j;
}
