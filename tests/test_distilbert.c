/* DistilBERT and BERT against Hugging Face transformers (fixtures made by
 * tools/make-distilbert-fixture.py): logits, loss and every gradient of
 * DistilBertForSequenceClassification; an MLM checkpoint loaded into the
 * classifier; BertModel (MiniLM layout); save_pretrained round trips and the
 * config.json transformers needs; sharded checkpoints; bad folders. */
#include "check_util.h"
#include "hf_parity.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(seqcls_logits_loss_and_every_gradient_match_hf)
{
    em_distilbert_seqcls *m = NULL;
    em_load_report rep;
    ck_status(em_distilbert_seqcls_from_pretrained(tu_fixture_path("distilbert-tiny"),
                                                          &(em_pretrained_opts){.strict = true}, &m, &rep),
                     EM_OK);
    ck_assert_int_eq(rep.n_missing + rep.n_unexpected + rep.n_mismatched, 0);
    ck_assert_int_eq(m->config.dim, 64);
    ck_assert_int_eq(m->config.n_layers, 2);
    ck_assert_int_eq(m->config.num_labels, 3);
    ck_assert_str_eq(m->id2label[2], "positive");
    ck_assert_int_eq(m->config.problem_type, EM_PROBLEM_SINGLE_LABEL);   /* written by HF's first loss */
    /* from_pretrained returns the model in eval mode (transformers does too): no call needed */
    ck_assert(!em_module_is_training(&m->base));
    ck_assert(!em_module_is_training(&m->distilbert->base));
    /* every parameter of the HF model */
    ck_assert_int_eq(check_hf_parity(&m->base, "distilbert_tiny_golden.safetensors", false, true), 40);
    EM_SCOPE {   /* the padding row of the word embeddings gets no gradient */
        em_tensor *gw = em_grad(em_module_get(&m->base, "distilbert.embeddings.word_embeddings.weight"));
        ck_assert_double_eq(em_item(em_max_all(em_abs(em_select(gw, 0, 0)))), 0.0);
    }
    em_load_report_free(&rep);
    em_module_free(&m->base);
}
END_TEST

/* The BERT layout (token types, pooler, classifier on the pooled output):
 * BertForSequenceClassification's logits, loss and the gradient of every
 * parameter (fixture bert-tiny-cls), with the same per-tensor criterion. */
START_TEST(bert_seqcls_logits_loss_and_every_gradient_match_hf)
{
    em_bert_seqcls *m = NULL;
    em_load_report rep;
    ck_status(em_bert_seqcls_from_pretrained(tu_fixture_path("bert-tiny-cls"), &(em_pretrained_opts){.strict = true},
                                             &m, &rep),
              EM_OK);
    ck_assert_int_eq(rep.n_missing + rep.n_unexpected + rep.n_mismatched, 0);
    ck_assert_int_eq(m->config.num_labels, 3);
    ck_assert(!em_module_is_training(&m->base));   /* eval mode straight from from_pretrained */
    /* every parameter of the HF model, the pooler's included */
    ck_assert_int_eq(check_hf_parity(&m->base, "bert_tiny_cls_golden.safetensors", true, false), 41);
    em_load_report_free(&rep);
    em_module_free(&m->base);
}
END_TEST

START_TEST(base_model_from_a_classifier_checkpoint_drops_the_prefix)
{
    em_distilbert_model *m = NULL;
    em_load_report rep;
    ck_status(em_distilbert_model_from_pretrained(tu_fixture_path("distilbert-tiny"), NULL, &m, &rep), EM_OK);
    ck_assert_int_eq(rep.n_missing, 0);
    ck_assert_int_eq(rep.n_unexpected, 4);
    ck_assert(tu_in_list(rep.unexpected, rep.n_unexpected, "pre_classifier.weight"));
    ck_assert_int_eq(rep.n_loaded, 36);
    ck_assert_ptr_nonnull(em_module_get(&m->base, "transformer.layer.1.ffn.lin2.bias"));
    em_load_report_free(&rep);
    em_module_free(&m->base);
}
END_TEST

/* Half-precision checkpoints load into f32 parameters (rounded values kept exactly). */
START_TEST(bf16_checkpoint_converts_to_f32)
{
    em_safetensors *st = NULL;
    ck_status(em_safetensors_open(tu_fixture_path("distilbert-tiny/model.safetensors"), &st), EM_OK);
    int n = em_safetensors_count(st);
    const char *names[64];
    em_tensor *ts[64];
    EM_SCOPE {
        for (int i = 0; i < n; i++) {
            names[i] = em_safetensors_name(st, i);
            ts[i] = em_to_dtype(em_safetensors_get(st, names[i]), EM_BF16);
        }
        ck_status(em_safetensors_save(tu_scratch_path("model.safetensors"), n, names, ts, 0, NULL, NULL), EM_OK);
    }
    copy_file(tu_fixture_path("distilbert-tiny/config.json"), tu_scratch_path("config.json"));
    em_distilbert_seqcls *m = NULL;
    ck_status(em_distilbert_seqcls_from_pretrained(tu_scratch(), &(em_pretrained_opts){.strict = true}, &m, NULL), EM_OK);
    EM_SCOPE {
        em_tensor *w = m->distilbert->layer[0]->ffn->lin1->weight;
        ck_assert_int_eq(w->dtype, EM_F32);
        em_tensor *ref = em_to_dtype(em_to_dtype(em_safetensors_get(st, "distilbert.transformer.layer.0.ffn.lin1.weight"),
                                                 EM_BF16), EM_F32);
        ck_assert(same_tensor(w, ref));
    }
    em_safetensors_close(st);
    em_module_free(&m->base);
}
END_TEST

/* A checkpoint naming one tensor twice (an old "gamma" beside "weight", as a
 * merged or hand-edited file can hold): refused, naming both keys, rather than
 * the later one winning in silence. */
START_TEST(two_names_for_one_tensor_refused)
{
    em_safetensors *st = NULL;
    ck_status(em_safetensors_open(tu_fixture_path("distilbert-tiny/model.safetensors"), &st), EM_OK);
    int n = em_safetensors_count(st);
    const char *names[65];
    em_tensor *ts[65];
    const char *w = NULL;
    EM_SCOPE {
        for (int i = 0; i < n; i++) {
            names[i] = em_safetensors_name(st, i);
            ts[i] = em_safetensors_get(st, names[i]);
            if (!w && strstr(names[i], "LayerNorm.weight")) w = names[i];
        }
        ck_assert_ptr_nonnull(w);
        static char gamma[256];
        snprintf(gamma, sizeof gamma, "%.*sgamma", (int)(strlen(w) - strlen("weight")), w);
        names[n] = gamma;
        ts[n] = em_mul_scalar(em_safetensors_get(st, w), 2.0);
        ck_status(em_safetensors_save(tu_scratch_path("model.safetensors"), n + 1, names, ts, 0, NULL, NULL), EM_OK);
    }
    copy_file(tu_fixture_path("distilbert-tiny/config.json"), tu_scratch_path("config.json"));
    em_distilbert_seqcls *m = NULL;
    ck_assert_int_eq(em_distilbert_seqcls_from_pretrained(tu_scratch(), NULL, &m, NULL), EM_ERR_FORMAT);
    ck_assert_msg(strstr(em_last_error(), "fills") && strstr(em_last_error(), "twice") && strstr(em_last_error(), "gamma"),
                  "%s", em_last_error());
    ck_assert_ptr_null(m);
    em_safetensors_close(st);
}
END_TEST

START_TEST(parameter_names_and_count_are_hf_s)
{
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(tu_fixture_path("distilbert-tiny/model.safetensors"), &st), EM_OK);
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&(em_distilbert_config){
        .vocab_size = 1000, .max_position_embeddings = 64, .n_layers = 2, .n_heads = 4, .dim = 64, .hidden_dim = 256,
        .num_labels = 3});
    em_named_tensors ps = em_module_named_parameters(&m->base);
    ck_assert_int_eq(ps.n, em_safetensors_count(st));
    int64_t total = 0;
    EM_SCOPE {
        for (int i = 0; i < em_safetensors_count(st); i++) {
            em_tensor *t = em_safetensors_get(st, em_safetensors_name(st, i)), *p = em_module_get(&m->base, em_safetensors_name(st, i));
            ck_assert_msg(p != NULL, "ember has no %s", em_safetensors_name(st, i));
            ck_assert_int_eq(p->ndim, t->ndim);
            for (int d = 0; d < p->ndim; d++) ck_assert_int_eq(p->shape[d], t->shape[d]);
            total += em_numel(t);
        }
    }
    ck_assert_int_eq(em_module_num_parameters(&m->base, false), total);
    ck_assert_str_eq(ps.items[0].name, "distilbert.embeddings.word_embeddings.weight");
    ck_assert_str_eq(ps.items[ps.n - 1].name, "classifier.bias");
    /* the non-persistent position_ids buffer is not part of the checkpoint */
    ck_assert_ptr_null(em_module_get(&m->base, "distilbert.embeddings.position_ids"));
    em_named_tensors_free(&ps);
    em_safetensors_close(st);
    em_module_free(&m->base);
}
END_TEST

/* ---- save_pretrained ------------------------------------------------------------------ */

static const cJSON *field(const cJSON *j, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
    ck_assert_msg(v != NULL, "config.json lacks \"%s\"", k);
    return v;
}

START_TEST(save_pretrained_round_trip_and_config_fields)
{
    em_distilbert_seqcls *m = NULL, *m2 = NULL;
    ck_status(em_distilbert_seqcls_from_pretrained(tu_fixture_path("distilbert-tiny"), NULL, &m, NULL), EM_OK);
    const char *dir = tu_scratch_path("saved");
    ck_status(em_save_pretrained(&m->base, dir), EM_OK);
    /* reload strictly: identical tensors, names and labels */
    ck_status(em_distilbert_seqcls_from_pretrained(dir, &(em_pretrained_opts){.strict = true}, &m2, NULL), EM_OK);
    em_named_tensors a = em_module_named_parameters(&m->base), b = em_module_named_parameters(&m2->base);
    ck_assert_int_eq(a.n, b.n);
    for (int i = 0; i < a.n; i++) {
        ck_assert_str_eq(a.items[i].name, b.items[i].name);
        ck_assert_msg(same_tensor(a.items[i].tensor, b.items[i].tensor), "%s changed in the round trip", a.items[i].name);
    }
    em_named_tensors_free(&a);
    em_named_tensors_free(&b);
    ck_assert_str_eq(m2->id2label[0], "negative");
    ck_assert_int_eq(m2->config.problem_type, EM_PROBLEM_SINGLE_LABEL);
    /* the file holds exactly HF's keys and metadata format "pt" */
    em_safetensors *st = NULL, *ref = NULL;
    char stp[600];
    snprintf(stp, sizeof stp, "%s/model.safetensors", dir);
    ck_assert_int_eq(em_safetensors_open(stp, &st), EM_OK);
    ck_assert_int_eq(em_safetensors_open(tu_fixture_path("distilbert-tiny/model.safetensors"), &ref), EM_OK);
    ck_assert_int_eq(em_safetensors_count(st), em_safetensors_count(ref));
    for (int i = 0; i < em_safetensors_count(ref); i++) {
        bool found = false;
        for (int k = 0; k < em_safetensors_count(st); k++) found |= !strcmp(em_safetensors_name(st, k), em_safetensors_name(ref, i));
        ck_assert_msg(found, "saved file lacks %s", em_safetensors_name(ref, i));
    }
    ck_assert_str_eq(em_safetensors_metadata(st, "format"), "pt");
    em_safetensors_close(st);
    em_safetensors_close(ref);
    /* config.json: the fields transformers reads */
    cJSON *j = saved_config(dir);
    ck_assert_str_eq(cJSON_GetArrayItem(field(j, "architectures"), 0)->valuestring, "DistilBertForSequenceClassification");
    ck_assert_str_eq(field(j, "model_type")->valuestring, "distilbert");
    ck_assert_str_eq(field(j, "activation")->valuestring, "gelu");
    ck_assert_int_eq(field(j, "dim")->valueint, 64);
    ck_assert_int_eq(field(j, "hidden_dim")->valueint, 256);
    ck_assert_int_eq(field(j, "n_layers")->valueint, 2);
    ck_assert_int_eq(field(j, "n_heads")->valueint, 4);
    ck_assert_int_eq(field(j, "vocab_size")->valueint, 1000);
    ck_assert_int_eq(field(j, "max_position_embeddings")->valueint, 64);
    ck_assert_int_eq(field(j, "pad_token_id")->valueint, 0);
    ck_assert_double_eq(field(j, "seq_classif_dropout")->valuedouble, 0.2);
    ck_assert_double_eq(field(j, "dropout")->valuedouble, 0.1);
    ck_assert(cJSON_IsFalse(field(j, "sinusoidal_pos_embds")));
    ck_assert_str_eq(field(j, "problem_type")->valuestring, "single_label_classification");
    ck_assert_str_eq(field(field(j, "id2label"), "1")->valuestring, "neutral");
    ck_assert_int_eq(field(field(j, "label2id"), "positive")->valueint, 2);
    ck_assert_int_eq(cJSON_GetArraySize(field(j, "id2label")), 3);
    cJSON_Delete(j);
    char cp[600];
    snprintf(cp, sizeof cp, "%s/config.json", dir);
    char *text = tu_read_file(cp, NULL);
    ck_assert_ptr_null(strchr(text, '\t'));   /* two-space indent, as transformers writes */
    free(text);
    /* no temporary left behind */
    ck_assert_int_ne(access(tu_scratch_path("saved/config.json.tmp"), F_OK), 0);
    em_module_free(&m->base);
    em_module_free(&m2->base);
}
END_TEST

/* ---- the MLM checkpoint (the layout of distilbert-base-uncased) ---------------------- */

/* Loading builds the model without torch's default init (nn/layers.c): no
 * uniform draw at all, a normal draw only for the head weights the checkpoint
 * lacks (HF's init), and yet the global stream ends where the old draws left
 * it: every Linear's weight and bias and every Embedding's weight still take
 * their counters (one per 4 values), so what is drawn after (that head,
 * dropout) keeps its numbers. */
static void count_default_draws(em_module *m, void *user)
{
    uint64_t *n = user;
    for (int i = 0; i < m->n_params; i++) {
        em_tensor *t = m->params[i].tensor;
        if (t && (!strcmp(m->type, "Linear") || !strcmp(m->type, "Embedding"))) *n += ((uint64_t)em_numel(t) + 3) / 4;
    }
}

START_TEST(loading_skips_default_init_but_keeps_the_stream)
{
    em_distilbert_seqcls *m = NULL;
    em_load_report rep;
    em_set_seed(5);
    em_rng_state s0 = em_rng_get_state();
    em_profile_reset();
    em_profile_enable(true);
    ck_status(em_distilbert_seqcls_from_pretrained(tu_fixture_path("distilbert-tiny-mlm"), NULL, &m, &rep), EM_OK);
    em_profile_enable(false);
    em_rng_state s1 = em_rng_get_state();
    ck_assert_int_eq(tu_profiled_calls("rand"), 0);    /* no Linear drew its default uniform init */
    ck_assert_int_eq(tu_profiled_calls("randn"), 2);   /* pre_classifier.weight and classifier.weight: HF's normal */
    uint64_t want = 0;
    em_module_apply(&m->base, count_default_draws, &want);
    for (int i = 0; i < 2; i++) {   /* the two normal draws of the head's weights */
        em_tensor *w = em_module_get(&m->base, i ? "classifier.weight" : "pre_classifier.weight");
        ck_assert_ptr_nonnull(w);
        want += ((uint64_t)em_numel(w) + 3) / 4;
    }
    ck_assert_uint_eq(s1.offset - s0.offset, want);
    em_load_report_free(&rep);
    em_module_free(&m->base);
}
END_TEST

START_TEST(mlm_checkpoint_loads_into_the_classifier_with_a_report)
{
    const char *dir = tu_fixture_path("distilbert-tiny-mlm");
    em_distilbert_seqcls *m = NULL;
    em_load_report rep;
    em_set_seed(5);
    ck_status(em_distilbert_seqcls_from_pretrained(dir, NULL, &m, &rep), EM_OK);
    ck_assert_str_eq(rep.model_class, "DistilBertForSequenceClassification");
    ck_assert_int_eq(rep.n_loaded, 36);
    ck_assert_int_eq(rep.n_missing, 4);
    const char *head[] = {"pre_classifier.weight", "pre_classifier.bias", "classifier.weight", "classifier.bias"};
    for (int i = 0; i < 4; i++) ck_assert_msg(tu_in_list(rep.missing, rep.n_missing, head[i]), "%s not reported", head[i]);
    ck_assert_int_eq(rep.n_unexpected, 5);
    const char *extra[] = {"vocab_transform.weight", "vocab_transform.bias", "vocab_layer_norm.weight",
                           "vocab_layer_norm.bias", "vocab_projector.bias"};
    for (int i = 0; i < 5; i++) ck_assert_msg(tu_in_list(rep.unexpected, rep.n_unexpected, extra[i]), "%s not reported", extra[i]);
    /* the readable report */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    em_load_report_print(&rep, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "Newly initialized"));
    ck_assert_ptr_nonnull(strstr(buf, "pre_classifier.weight"));
    ck_assert_ptr_nonnull(strstr(buf, "vocab_projector.bias"));
    free(buf);
    /* the head is freshly initialized as HF does: N(0, 0.02) weights, zero biases */
    EM_SCOPE {
        em_tensor *w = m->pre_classifier->weight;
        double mean = em_item(em_mean(w, 0, NULL, false)), sd = sqrt(em_item(em_var(w, 0, NULL, 1, false)));
        ck_assert_msg(fabs(mean) < 0.002 && fabs(sd - 0.02) < 0.002, "pre_classifier init mean %g std %g", mean, sd);
        ck_assert_double_eq(em_item(em_max_all(em_abs(m->pre_classifier->bias))), 0.0);
        ck_assert_double_eq(em_item(em_max_all(em_abs(m->classifier->bias))), 0.0);
    }
    /* the body is the checkpoint's: DistilBertModel reproduces HF's hidden states */
    em_distilbert_model *body = NULL;
    em_load_report rep2;
    ck_status(em_distilbert_model_from_pretrained(dir, NULL, &body, &rep2), EM_OK);
    ck_assert_int_eq(rep2.n_missing, 0);
    ck_assert_int_eq(rep2.n_unexpected, 5);
    em_module_train(&body->base, false);
    em_safetensors *g = golden_file("distilbert_tiny_golden.safetensors");
    EM_SCOPE {
        em_tensor *h = em_distilbert_model_forward(body, em_safetensors_get(g, "input_ids"),
                                                   em_safetensors_get(g, "attention_mask"));
        double e = normwise_err(h, em_safetensors_get(g, "mlm.last_hidden_state"), 0);
        ck_assert_msg(e < 1e-5, "last_hidden_state: normwise error %g", e);
    }
    em_safetensors_close(g);
    em_load_report_free(&rep);
    em_load_report_free(&rep2);
    em_module_free(&m->base);
    em_module_free(&body->base);
    /* strict loading refuses it, naming what is wrong */
    ck_status(em_distilbert_seqcls_from_pretrained(dir, &(em_pretrained_opts){.strict = true}, &m, NULL),
                     EM_ERR_INVALID);
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "4 missing keys"));
    ck_assert_ptr_nonnull(strstr(em_last_error(), "5 unexpected keys"));
}
END_TEST

/* ---- BERT (MiniLM layout: a BertModel checkpoint without the "bert." prefix) ---------- */

START_TEST(bert_model_matches_hf_and_loads_into_the_classifier)
{
    const char *dir = tu_fixture_path("bert-tiny");
    em_bert_model *m = NULL;
    em_load_report rep;
    ck_status(em_bert_model_from_pretrained(dir, &(em_pretrained_opts){.strict = true}, &m, &rep), EM_OK);
    em_module_train((em_module *)m, false);
    em_safetensors *g = golden_file("bert_tiny_golden.safetensors");
    EM_SCOPE {
        em_tensor *pooled = NULL;
        em_tensor *h = em_bert_model_forward(m, em_safetensors_get(g, "input_ids"), em_safetensors_get(g, "attention_mask"),
                                             em_safetensors_get(g, "token_type_ids"), &pooled);
        double e = normwise_err(h, em_safetensors_get(g, "last_hidden_state"), 0);
        double ep = normwise_err(pooled, em_safetensors_get(g, "pooler_output"), 0);
        ck_assert_msg(e < 1e-5 && ep < 1e-5, "bert: hidden %g, pooled %g", e, ep);
    }
    em_load_report_free(&rep);
    em_module_free((em_module *)m);
    /* the classifier: the "bert." prefix is added, the head is new */
    em_module *cls = NULL;
    ck_status(em_seqcls_from_pretrained(dir, NULL, &cls, &rep), EM_OK);
    ck_assert_str_eq(cls->type, "BertForSequenceClassification");
    em_seqcls_info info = em_seqcls_get_info(cls);   /* BERT's positions start at 0: all usable */
    ck_assert(info.max_length == info.max_position_embeddings && info.max_length > 0);
    ck_assert_int_eq(rep.n_missing, 2);
    ck_assert(tu_in_list(rep.missing, rep.n_missing, "classifier.weight"));
    ck_assert_int_eq(rep.n_unexpected, 0);
    ck_assert_ptr_nonnull(em_module_get(cls, "bert.encoder.layer.1.attention.self.query.weight"));
    ck_assert_ptr_nonnull(em_module_get(cls, "bert.pooler.dense.bias"));
    em_module_train(cls, false);
    /* save and reload through the auto loader: same logits */
    ck_assert_int_eq(em_seqcls_num_labels(cls), 2);
    em_seqcls_set_labels(cls, 2, (const char *const[]){"no", "yes"});
    ck_status(em_save_pretrained(cls, tu_scratch_path("bert")), EM_OK);
    em_module *cls2 = NULL;
    ck_status(em_seqcls_from_pretrained(tu_scratch_path("bert"), &(em_pretrained_opts){.strict = true}, &cls2, NULL), EM_OK);
    em_module_train(cls2, false);
    EM_SCOPE {
        em_seqcls_inputs in = {em_safetensors_get(g, "input_ids"), em_safetensors_get(g, "attention_mask"),
                               em_safetensors_get(g, "token_type_ids"),
                               em_from_data((int64_t[]){0, 1, 1}, EM_SHAPE(3), EM_I64)};
        em_seqcls_output o1 = em_seqcls_forward(cls, &in), o2 = em_seqcls_forward(cls2, &in);
        ck_assert(same_tensor(o1.logits, o2.logits));
        ck_assert(same_tensor(o1.loss, o2.loss));
    }
    char *text = tu_read_file(tu_scratch_path("bert/config.json"), NULL);
    ck_assert_ptr_nonnull(strstr(text, "\"BertForSequenceClassification\""));
    ck_assert_ptr_nonnull(strstr(text, "\"model_type\": \"bert\""));
    ck_assert_ptr_nonnull(strstr(text, "\"type_vocab_size\": 2"));
    ck_assert_ptr_nonnull(strstr(text, "\"1\": \"yes\""));
    ck_assert_ptr_nonnull(strstr(text, "\"no\": 0"));
    free(text);
    em_safetensors_close(g);
    em_load_report_free(&rep);
    em_module_free(cls);
    em_module_free(cls2);
}
END_TEST

/* ---- sharded checkpoints, num_labels changes ---------------------------------------------- */

START_TEST(sharded_index_loads_like_the_single_file)
{
    em_safetensors *st = NULL;
    ck_assert_int_eq(em_safetensors_open(tu_fixture_path("distilbert-tiny/model.safetensors"), &st), EM_OK);
    int n = em_safetensors_count(st);
    const char *names[64];
    em_tensor *ts[64];
    cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
    EM_SCOPE {
        for (int i = 0; i < n; i++) {
            names[i] = em_safetensors_name(st, i);
            ts[i] = em_safetensors_get(st, names[i]);
            cJSON_AddStringToObject(wm, names[i], i < n / 2 ? "model-00001-of-00002.safetensors"
                                                            : "model-00002-of-00002.safetensors");
        }
        ck_assert_int_eq(em_safetensors_save(tu_scratch_path("model-00001-of-00002.safetensors"), n / 2, names, ts, 0, NULL, NULL), EM_OK);
        ck_assert_int_eq(em_safetensors_save(tu_scratch_path("model-00002-of-00002.safetensors"), n - n / 2, names + n / 2,
                                             ts + n / 2, 0, NULL, NULL), EM_OK);
    }
    em_safetensors_close(st);
    char *text = cJSON_Print(idx);
    tu_write_text(tu_scratch_path("model.safetensors.index.json"), text);
    cJSON_free(text);
    cJSON_Delete(idx);
    copy_file(tu_fixture_path("distilbert-tiny/config.json"), tu_scratch_path("config.json"));
    em_distilbert_seqcls *a = NULL, *b = NULL;
    ck_status(em_distilbert_seqcls_from_pretrained(tu_scratch(), &(em_pretrained_opts){.strict = true}, &a, NULL), EM_OK);
    ck_status(em_distilbert_seqcls_from_pretrained(tu_fixture_path("distilbert-tiny"), NULL, &b, NULL), EM_OK);
    em_named_tensors pa = em_module_named_parameters(&a->base), pb = em_module_named_parameters(&b->base);
    for (int i = 0; i < pa.n; i++) ck_assert_msg(same_tensor(pa.items[i].tensor, pb.items[i].tensor), "%s", pa.items[i].name);
    em_named_tensors_free(&pa);
    em_named_tensors_free(&pb);
    em_module_free(&a->base);
    em_module_free(&b->base);
    /* an index naming a shard that lacks the tensor */
    tu_write_text(tu_scratch_path("model.safetensors.index.json"),
               "{\"weight_map\": {\"classifier.bias\": \"model-00002-of-00002.safetensors\"}}");
    ck_status(em_distilbert_seqcls_from_pretrained(tu_scratch(), NULL, &a, NULL), EM_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "classifier.bias"));
}
END_TEST

START_TEST(num_labels_override_needs_ignore_mismatched_sizes)
{
    const char *dir = tu_fixture_path("distilbert-tiny");
    em_distilbert_seqcls *m = NULL;
    em_load_report rep;
    ck_status(em_distilbert_seqcls_from_pretrained(dir, &(em_pretrained_opts){.num_labels = 5}, &m, NULL),
                     EM_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "tensor \"classifier.bias\" has shape [3] but the model expects [5]"));
    ck_assert_ptr_nonnull(strstr(em_last_error(), "ignore_mismatched_sizes"));
    ck_status(em_distilbert_seqcls_from_pretrained(
                         dir, &(em_pretrained_opts){.num_labels = 5, .ignore_mismatched_sizes = true}, &m, &rep),
                     EM_OK);
    ck_assert_int_eq(m->config.num_labels, 5);
    ck_assert_int_eq(rep.n_mismatched, 2);
    ck_assert_ptr_null(m->id2label);   /* the names were for 3 labels */
    em_load_report_free(&rep);
    em_module_free(&m->base);
}
END_TEST

/* ---- bad folders: an em_status and a message, never a crash ------------------------------ */

static em_status load_tmp(void)
{
    em_distilbert_seqcls *m = (void *)1;
    em_status s = em_distilbert_seqcls_from_pretrained(tu_scratch(), NULL, &m, NULL);
    ck_assert_ptr_null(m);
    return s;
}

static const char tiny_config[] =
    "{\"model_type\": \"distilbert\", \"dim\": %d, \"n_layers\": 2, \"n_heads\": 4, \"hidden_dim\": 256,\n"
    " \"vocab_size\": 1000, \"max_position_embeddings\": 64, \"id2label\": {\"0\": \"a\", \"1\": \"b\", \"2\": \"c\"}}\n";

/* config (NULL: config.json as it is) written into the scratch folder, loading
 * it must fail with want and a message containing msg. */
static void expect_refused(const char *config, em_status want, const char *msg)
{
    if (config) tu_write_text(tu_scratch_path("config.json"), config);
    ck_assert_int_eq(load_tmp(), want);
    ck_assert_msg(strstr(em_last_error(), msg), "\"%s\" lacks \"%s\"", em_last_error(), msg);
}

START_TEST(bad_folders_return_clear_errors)
{
    copy_file(tu_fixture_path("distilbert-tiny/model.safetensors"), tu_scratch_path("model.safetensors"));
    expect_refused(NULL, EM_ERR_NOT_FOUND, "config.json");   /* no config.json */
    /* malformed JSON: the file and the position */
    expect_refused("{\n  \"dim\": 64,\n  oops\n}\n", EM_ERR_FORMAT, "config.json: malformed JSON at line 3");
    expect_refused("{\"dim\": 64} trailing", EM_ERR_FORMAT, "line 1, column 13");
    /* a field of the wrong type; an unknown model_type; the wrong family for a typed loader */
    expect_refused("{\"model_type\": \"distilbert\", \"dim\": \"wide\"}", EM_ERR_FORMAT, "\"dim\"");
    expect_refused("{\"model_type\": \"gpt2\"}", EM_ERR_UNSUPPORTED, "unknown model_type \"gpt2\"");
    expect_refused("{\"model_type\": \"bert\"}", EM_ERR_INVALID, "model_type is \"bert\"");
    /* a tensor of the wrong shape: named, with both shapes */
    char cfg[512];
    snprintf(cfg, sizeof cfg, tiny_config, 32);
    expect_refused(cfg, EM_ERR_INVALID,
                   "model.safetensors: tensor \"classifier.weight\" has shape [3,64] but the model expects [3,32]");
    ck_assert_ptr_null(strstr(em_last_error(), "num_labels"));   /* no misleading hint */
    /* no weights at all */
    snprintf(cfg, sizeof cfg, tiny_config, 64);
    remove(tu_scratch_path("model.safetensors"));
    expect_refused(cfg, EM_ERR_NOT_FOUND, "no model.safetensors");
    /* a corrupt safetensors file */
    tu_write_text(tu_scratch_path("model.safetensors"), "not a safetensors file at all");
    ck_assert_int_ne(load_tmp(), EM_OK);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "model.safetensors"));
    /* a config too large for the machine: refused before any allocation, naming the file and fields */
    copy_file(tu_fixture_path("distilbert-tiny/model.safetensors"), tu_scratch_path("model.safetensors"));
    expect_refused("{\"model_type\": \"distilbert\", \"vocab_size\": 1099511627776, \"dim\": 4194304, \"n_heads\": 16}",
                   EM_ERR_INVALID, "config.json: the model this config describes has");
    ck_assert_msg(strstr(em_last_error(), "vocab_size 1099511627776 x dim 4194304"), "%s", em_last_error());
    expect_refused("{\"model_type\": \"distilbert\", \"n_layers\": 1000000}", EM_ERR_INVALID, "n_layers 1000000 x");
    /* EMBER_MAX_MODEL_BYTES sets the limit: the tiny model (~0.4 MB) is refused under 1000 bytes */
    setenv("EMBER_MAX_MODEL_BYTES", "1000", 1);
    expect_refused(cfg, EM_ERR_INVALID, "more than EMBER_MAX_MODEL_BYTES");
    unsetenv("EMBER_MAX_MODEL_BYTES");
    /* a folder that does not exist */
    em_module *m = NULL;
    ck_status(em_seqcls_from_pretrained("/nonexistent/ember-model", NULL, &m, NULL), EM_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "/nonexistent/ember-model/config.json"));
}
END_TEST

START_TEST(save_into_an_unwritable_place_fails_cleanly)
{
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&(em_distilbert_config){
        .vocab_size = 50, .max_position_embeddings = 8, .n_layers = 1, .n_heads = 2, .dim = 8, .hidden_dim = 16});
    ck_status(em_save_pretrained(&m->base, "/nonexistent/dir/model"), EM_ERR_IO);
    ck_assert_ptr_nonnull(strstr(em_last_error(), "/nonexistent/dir/model"));
    em_module_free(&m->base);
}
END_TEST

/* Every allocation failing in turn (from the n-th on): an em_status, no leak, no crash. */
START_TEST(out_of_memory_anywhere_in_loading_and_saving)
{
    int64_t base = tu_live_bytes();
    const char *dir = tu_fixture_path("distilbert-tiny-mlm");
    int n_ok = 0, n_oom = 0;
    for (int64_t n = 1; n < 100000 && n_ok == 0; n += 1 + n / 64) {
        em_distilbert_seqcls *m = NULL;
        em_load_report rep;
        em_alloc_fail_after(n, true);
        em_status s = em_distilbert_seqcls_from_pretrained(dir, NULL, &m, &rep);
        em_alloc_fail_after(0, false);
        if (s == EM_OK) {
            n_ok++;
            em_load_report_free(&rep);
            em_module_free(&m->base);
        } else {
            ck_assert_msg(s == EM_ERR_OOM, "allocation %lld: %s: %s", (long long)n, em_status_name(s), em_last_error());
            ck_assert_ptr_null(m);
            n_oom++;
        }
        ck_assert_int_eq(tu_live_bytes(), base);
    }
    ck_assert_int_eq(n_ok, 1);
    ck_assert_int_gt(n_oom, 20);
    em_distilbert_seqcls *m = NULL;
    ck_status(em_distilbert_seqcls_from_pretrained(dir, NULL, &m, NULL), EM_OK);
    for (int64_t n = 1; n < 10000; n++) {
        em_alloc_fail_after(n, true);
        em_status s = em_save_pretrained(&m->base, tu_scratch_path("oom"));
        em_alloc_fail_after(0, false);
        if (s == EM_OK) break;
        ck_assert_msg(s == EM_ERR_OOM, "allocation %lld: %s: %s", (long long)n, em_status_name(s), em_last_error());
    }
    em_module_free(&m->base);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("distilbert");
    tu_add_tests(tu_scratch_per_test(tu_no_leaks(tu_case(s, "parity", 0)), "db"), seqcls_logits_loss_and_every_gradient_match_hf,
                 bert_seqcls_logits_loss_and_every_gradient_match_hf, parameter_names_and_count_are_hf_s,
                 base_model_from_a_classifier_checkpoint_drops_the_prefix, bf16_checkpoint_converts_to_f32, two_names_for_one_tensor_refused,
                 mlm_checkpoint_loads_into_the_classifier_with_a_report, loading_skips_default_init_but_keeps_the_stream,
                 bert_model_matches_hf_and_loads_into_the_classifier);
    tu_add_tests(tu_scratch_per_test(tu_no_leaks(tu_case(s, "checkpoints", 0)), "db"), save_pretrained_round_trip_and_config_fields,
                 sharded_index_loads_like_the_single_file, num_labels_override_needs_ignore_mismatched_sizes,
                 bad_folders_return_clear_errors, save_into_an_unwritable_place_fails_cleanly,
                 out_of_memory_anywhere_in_loading_and_saving);
    return tu_run_suite(s);
}
