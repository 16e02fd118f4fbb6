/* RoBERTa (nn/roberta.c) against Hugging Face transformers (fixtures made by
 * tools/make-roberta-fixture.py): RobertaForSequenceClassification's logits,
 * loss and every gradient through the generic API (the family has no typed
 * loader), its parameter names, a save_pretrained round trip, bad folders. */
#include "check_util.h"
#include "hf_parity.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE "roberta-tiny-cls"
#define GOLDEN "roberta_tiny_cls_golden.safetensors"

static em_module *load(const char *dir)
{
    em_module *m = NULL;
    ck_status(em_seqcls_from_pretrained(dir, &(em_pretrained_opts){.strict = true}, &m, NULL), EM_OK);
    return m;
}

/* m's logits on rows [0, rows) of the golden batch, kept to the caller's scope. */
static em_tensor *logits_of(em_module *m, em_safetensors *g, int64_t rows)
{
    em_seqcls_output out = em_seqcls_forward(
        m, &(em_seqcls_inputs){.input_ids = em_narrow(em_safetensors_get(g, "input_ids"), 0, 0, rows),
                               .attention_mask = em_narrow(em_safetensors_get(g, "attention_mask"), 0, 0, rows)});
    ck_assert_ptr_nonnull(out.logits);
    return out.logits;
}

/* The golden batch has right padding and one left-padded row (positions count only
 * the non-padding tokens, so that row's positions start after its padding). */
START_TEST(seqcls_logits_loss_and_every_gradient_match_hf)
{
    em_module *m = NULL;
    em_load_report rep;
    ck_status(em_seqcls_from_pretrained(tu_fixture_path(FIXTURE), &(em_pretrained_opts){.strict = true}, &m, &rep),
              EM_OK);
    ck_assert_int_eq(rep.n_missing + rep.n_unexpected + rep.n_mismatched, 0);
    ck_assert_str_eq(rep.model_class, "RobertaForSequenceClassification");
    ck_assert_str_eq(m->type, "RobertaForSequenceClassification");
    ck_assert(!em_module_is_training(m));
    em_seqcls_info info = em_seqcls_get_info(m);
    ck_assert_int_eq(info.num_labels, 3);
    ck_assert_int_eq(info.vocab_size, 100);
    ck_assert_int_eq(info.max_position_embeddings, 40);
    ck_assert_int_eq(info.max_length, 38);   /* the longest input: 40 less pad_token_id + 1 */
    /* every parameter of the HF model (no pooler: add_pooling_layer=False) */
    ck_assert_int_eq(check_hf_parity(m, GOLDEN, false, false), 41);
    EM_SCOPE {   /* padding tokens sit at the position embedding's padding row, which gets no gradient */
        em_tensor *gp = em_grad(em_module_get(m, "roberta.embeddings.position_embeddings.weight"));
        ck_assert_double_eq(em_item(em_max_all(em_abs(em_select(gp, 0, 1)))), 0.0);
        ck_assert_double_gt(em_item(em_max_all(em_abs(em_select(gp, 0, 2)))), 0.0);
    }
    em_load_report_free(&rep);
    em_module_free(m);
}
END_TEST

/* Rows 0-2 are right-padded prefixes: the classifier then runs on the real tokens
 * only (nn/unpad.c), with the positions computed before packing. */
START_TEST(right_padded_batch_takes_the_packed_path_with_the_same_logits)
{
    em_module *m = load(tu_fixture_path(FIXTURE));
    em_safetensors *g = golden_file(GOLDEN);
    EM_SCOPE {
        em_tensor *got = logits_of(m, g, 3), *want = em_narrow(em_safetensors_get(g, "logits"), 0, 0, 3);
        double e = normwise_err(got, want, 0);
        ck_assert_msg(e < 1e-5, "logits of the right-padded rows: %g", e);
    }
    em_safetensors_close(g);
    em_module_free(m);
}
END_TEST

START_TEST(parameter_names_and_count_are_hf_s)
{
    em_safetensors *st = golden_file(FIXTURE "/model.safetensors");
    em_module *m = load(tu_fixture_path(FIXTURE));
    em_named_tensors ps = em_module_named_parameters(m);
    ck_assert_int_eq(ps.n, em_safetensors_count(st));
    int64_t total = 0;
    EM_SCOPE {
        for (int i = 0; i < em_safetensors_count(st); i++) {
            const char *name = em_safetensors_name(st, i);
            em_tensor *t = em_safetensors_get(st, name), *p = em_module_get(m, name);
            ck_assert_msg(p != NULL, "ember has no %s", name);
            ck_assert_int_eq(p->ndim, t->ndim);
            for (int d = 0; d < p->ndim; d++) ck_assert_int_eq(p->shape[d], t->shape[d]);
            total += em_numel(t);
        }
    }
    ck_assert_int_eq(em_module_num_parameters(m, false), total);
    ck_assert_str_eq(ps.items[0].name, "roberta.embeddings.word_embeddings.weight");
    ck_assert_str_eq(ps.items[ps.n - 1].name, "classifier.out_proj.bias");
    ck_assert_ptr_null(em_module_get(m, "roberta.pooler.dense.weight"));
    ck_assert_ptr_null(em_module_get(m, "roberta.embeddings.position_ids"));   /* non-persistent */
    ck_assert(em_seqcls_is_head_param("classifier.dense.weight"));
    em_named_tensors_free(&ps);
    em_safetensors_close(st);
    em_module_free(m);
}
END_TEST

static cJSON *field(cJSON *j, const char *k) { return cJSON_GetObjectItemCaseSensitive(j, k); }

START_TEST(save_pretrained_round_trip_gives_identical_logits)
{
    em_module *m = load(tu_fixture_path(FIXTURE));
    const char *dir = tu_scratch_path("saved");
    ck_status(em_save_pretrained(m, dir), EM_OK);
    em_module *m2 = load(dir);
    ck_assert_str_eq(m2->type, "RobertaForSequenceClassification");
    em_safetensors *g = golden_file(GOLDEN);
    EM_SCOPE { ck_assert(same_tensor(logits_of(m, g, 4), logits_of(m2, g, 4))); }
    em_safetensors_close(g);
    cJSON *j = saved_config(dir);
    ck_assert_str_eq(field(j, "model_type")->valuestring, "roberta");
    ck_assert_str_eq(cJSON_GetArrayItem(field(j, "architectures"), 0)->valuestring, "RobertaForSequenceClassification");
    ck_assert_int_eq(field(j, "pad_token_id")->valueint, 1);
    ck_assert_int_eq(field(j, "max_position_embeddings")->valueint, 40);
    ck_assert_int_eq(field(j, "type_vocab_size")->valueint, 1);
    ck_assert_double_eq(field(j, "layer_norm_eps")->valuedouble, 1e-5);
    ck_assert_ptr_null(field(j, "no_pooler"));
    cJSON_Delete(j);
    em_module_free(m);
    em_module_free(m2);
}
END_TEST

/* config (the fixture's with the field key set to value) in the scratch folder must be refused with want and msg. */
static void expect_refused(const char *key, cJSON *value, em_status want, const char *msg)
{
    char *text = tu_read_file(tu_fixture_path(FIXTURE "/config.json"), NULL);
    cJSON *j = cJSON_Parse(text);
    cJSON_DeleteItemFromObjectCaseSensitive(j, key);
    cJSON_AddItemToObject(j, key, value);
    char *out = cJSON_Print(j);
    tu_write_text(tu_scratch_path("config.json"), out);
    em_module *m = (void *)1;
    ck_assert_int_eq(em_seqcls_from_pretrained(tu_scratch(), NULL, &m, NULL), want);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(em_last_error(), msg), "\"%s\" lacks \"%s\"", em_last_error(), msg);
    cJSON_free(out);
    cJSON_Delete(j);
    free(text);
}

START_TEST(bad_folders_return_clear_errors)
{
    copy_file(tu_fixture_path(FIXTURE "/model.safetensors"), tu_scratch_path("model.safetensors"));
    expect_refused("hidden_size", cJSON_CreateString("wide"), EM_ERR_FORMAT, "\"hidden_size\"");
    expect_refused("pad_token_id", cJSON_CreateNumber(-1), EM_ERR_FORMAT, "\"pad_token_id\"");
    expect_refused("max_position_embeddings", cJSON_CreateNumber(2), EM_ERR_INVALID,
                   "max_position_embeddings 2 leaves no position after pad_token_id 1");
    expect_refused("position_embedding_type", cJSON_CreateString("relative_key"), EM_ERR_UNSUPPORTED, "relative_key");
    /* without model_type, "architectures" names the family: Roberta*, not Bert* */
    char *text = tu_read_file(tu_fixture_path(FIXTURE "/config.json"), NULL);
    cJSON *j = cJSON_Parse(text);
    cJSON_DeleteItemFromObjectCaseSensitive(j, "model_type");
    char *out = cJSON_Print(j);
    tu_write_text(tu_scratch_path("config.json"), out);
    em_module *m = load(tu_scratch());
    ck_assert_str_eq(m->type, "RobertaForSequenceClassification");
    em_module_free(m);
    cJSON_free(out);
    cJSON_Delete(j);
    free(text);
}
END_TEST

/* max_position_embeddings 40 less pad_token_id + 1 = 38 tokens at most */
static void run_length(int64_t S)
{
    em_module *m = load(tu_fixture_path(FIXTURE));
    EM_SCOPE {
        em_tensor *ids = em_full(2, (int64_t[]){1, S}, 5, EM_I64, EM_CPU);
        em_seqcls_output out = em_seqcls_forward(m, &(em_seqcls_inputs){.input_ids = ids});
        ck_assert_ptr_nonnull(out.logits);
    }
    em_module_free(m);
}
TU_TEST(longest_input_is_max_positions_less_the_offset, run_length(38))
TU_MISUSE(one_token_more_is_misuse, "sequence length 39 exceeds max_position_embeddings 40 less the rows", run_length(39))
TU_MISUSE(no_token_is_misuse, "reads each row's first token: input_ids [1,0] has none", run_length(0))

int main(void)
{
    Suite *s = suite_create("roberta");
    tu_add_tests(tu_scratch_per_test(tu_no_leaks(tu_case(s, "roberta", 0)), "rb"),
                 seqcls_logits_loss_and_every_gradient_match_hf,
                 right_padded_batch_takes_the_packed_path_with_the_same_logits, parameter_names_and_count_are_hf_s,
                 save_pretrained_round_trip_gives_identical_logits, bad_folders_return_clear_errors,
                 longest_input_is_max_positions_less_the_offset);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), one_token_more_is_misuse, no_token_is_misuse);
    return tu_run_suite(s);
}
