/* ember — the fault suite: one test per hole of issue 14, each the case a
 * hostile user reported, now a clear error (or misuse message) instead of a
 * crash, a hang or a silent wrong result. Hole 3 (a failing rank hangs the
 * job) needs several processes: rank_failure_np2 / _np3 in this suite
 * (examples/rank_failure_e2e.sh). docs/RELIABILITY.md maps each promise to
 * its tests. */
#include "check_util.h"
#include "ember.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Each test gets a fresh scratch directory (tu_scratch_per_test); WRITE puts
 * a literal's bytes in a file there. */
#define WRITE(name, literal) tu_write_file(tu_scratch_path(name), literal, sizeof literal - 1)


#define EXPECT_ERROR(call, status, text) do { \
    em_clear_error(); \
    ck_assert_int_eq((call), (status)); \
    ck_assert_msg(strstr(em_last_error(), (text)), "expected \"%s\" in: %s", (text), em_last_error()); \
} while (0)

/* Hole 1: sizes that wrap. A shape whose bytes pass 2^63 is an error, not a
 * small allocation that the first write overruns. */
START_TEST(hole1_size_overflow_is_an_error)
{
    em_clear_error();
    ck_assert_ptr_null(em_empty(EM_SHAPE((int64_t)1 << 62), EM_F32, EM_CPU));
    ck_assert_int_eq(em_last_status(), EM_ERR_OOM);
    ck_assert_msg(strstr(em_last_error(), "more than 2^63 bytes"), "%s", em_last_error());
    em_clear_error();
    ck_assert_ptr_null(em_empty(EM_SHAPE((int64_t)1 << 32, (int64_t)1 << 32, 4), EM_F32, EM_CPU));
    ck_assert_msg(strstr(em_last_error(), "[4294967296,4294967296,4]"), "%s", em_last_error());
    /* a safetensors header whose shape does not match its byte range */
    char hdr[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,16]}}";
    char file[8 + sizeof hdr - 1 + 16];
    memset(file, 0, sizeof file);
    for (int i = 0; i < 8; i++) file[i] = (char)((uint64_t)(sizeof hdr - 1) >> (8 * i));
    memcpy(file + 8, hdr, sizeof hdr - 1);
    tu_write_file(tu_scratch_path("huge.safetensors"), file, sizeof file);
    em_safetensors *st = NULL;
    em_clear_error();
    ck_assert_int_ne(em_safetensors_open(tu_scratch_path("huge.safetensors"), &st), EM_OK);
    ck_assert_msg(strstr(em_last_error(), "huge.safetensors"), "%s", em_last_error());
}
END_TEST

/* Hole 2: config sizes without bounds. Refused at once, before allocating,
 * naming config.json and the fields (not minutes of allocation). */
START_TEST(hole2_config_sizes_are_bounded)
{
    em_module *m = NULL;
    WRITE("config.json", "{\"model_type\": \"distilbert\", \"dim\": 768, \"hidden_dim\": 20000000, \"n_layers\": 6}");
    EXPECT_ERROR(em_seqcls_from_pretrained(tu_scratch(), NULL, &m, NULL), EM_ERR_INVALID, "config.json");
    ck_assert_msg(strstr(em_last_error(), "hidden_dim 20000000"), "%s", em_last_error());
    WRITE("config.json", "{\"model_type\": \"bert\", \"num_hidden_layers\": 1000000}");
    EXPECT_ERROR(em_seqcls_from_pretrained(tu_scratch(), NULL, &m, NULL), EM_ERR_INVALID, "num_hidden_layers 1000000 x");
    ck_assert_ptr_null(m);
}
END_TEST

/* Hole 4: damaged checkpoints. A model saved by ember carries its data's
 * CRC-32C; one flipped bit is refused naming the file. */
START_TEST(hole4_damaged_weights_are_refused)
{
    em_module *m = NULL;
    ck_assert_int_eq(em_seqcls_from_pretrained(tu_fixture_path("distilbert-tiny"), NULL, &m, NULL), EM_OK);
    ck_assert_int_eq(em_save_pretrained(m, tu_scratch()), EM_OK);
    em_module_free(m);
    m = NULL;
    ck_assert_int_eq(em_seqcls_from_pretrained(tu_scratch(), NULL, &m, NULL), EM_OK);   /* intact: loads */
    em_module_free(m);
    m = NULL;
    FILE *f = fopen(tu_scratch_path("model.safetensors"), "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, -100, SEEK_END), 0);
    int c = fgetc(f);
    ck_assert_int_eq(fseek(f, -100, SEEK_END), 0);
    fputc(c ^ 0x01, f);
    fclose(f);
    EXPECT_ERROR(em_seqcls_from_pretrained(tu_scratch(), NULL, &m, NULL), EM_ERR_FORMAT, "model.safetensors: the tensor data is damaged");
    ck_assert_ptr_null(m);
}
END_TEST

/* Hole 5: bad input is refused with the file and line, not accepted or truncated. */
START_TEST(hole5_bad_data_is_refused_with_its_place)
{
    em_table *t = NULL;
    WRITE("dup.tsv", "sentence\tlabel\tlabel\nfine\t1\t0\n");
    EXPECT_ERROR(em_table_read_tsv(tu_scratch_path("dup.tsv"), NULL, &t), EM_ERR_FORMAT, "dup.tsv:1");
    ck_assert_msg(strstr(em_last_error(), "label"), "%s", em_last_error());
    WRITE("nul.jsonl", "{\"sentence\": \"a\\u0000b\", \"label\": 1}\n");
    EXPECT_ERROR(em_table_read_jsonl(tu_scratch_path("nul.jsonl"), NULL, 0, &t), EM_ERR_FORMAT, "nul.jsonl:1");
    ck_assert_ptr_null(t);
}
END_TEST

/* Hole 6: handle misuse. A tensor used after its release is a misuse
 * message naming the call, not a crash or a wrong value. */
START_TEST(hole6_use_after_release_is_named)
{
    em_tensor *x = em_ones(EM_SHAPE(3), EM_F32, EM_CPU);
    em_release(x);
    tu_expect_misuse("ember: em_mul: tensor");
    em_mul(x, x);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fault");
    TCase *tc = tu_scratch_per_test(tu_case(s, "holes", 0), "fault");
    tu_add_tests(tc, hole1_size_overflow_is_an_error, hole2_config_sizes_are_bounded, hole4_damaged_weights_are_refused,
                 hole5_bad_data_is_refused_with_its_place);
    tu_add_misuse_test(tc, hole6_use_after_release_is_named);
    return tu_run_suite(s);
}
