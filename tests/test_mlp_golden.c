/* ember tests — a whole MLP through autograd:
 *   - loss and every gradient against PyTorch (tests/fixtures/mlp_golden.safetensors,
 *     made in f64 by tools/make-mlp-fixture.py), to 1e-10 relative;
 *   - 1,000 forward/backward iterations inside scopes come back to the same
 *     live bytes every time;
 *   - em_graph_dot: labels, one drawing per node however often it is reached,
 *     a 10,000-op chain, and its failures (bad path, OOM at every allocation),
 *     which leave no file behind.
 */
#include "check_util.h"
#include "tensor/tensor_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------ */
/* y = x W^T + b, as torch.nn.Linear */
static em_tensor *linear(em_tensor *x, em_tensor *w, em_tensor *b)
{
    return em_add(em_matmul(x, em_transpose(w, 0, 1)), b);
}

static em_tensor *get(em_safetensors *st, const char *name)
{
    em_tensor *t = em_safetensors_get(st, name);
    ck_assert_msg(t != NULL, "fixture has no tensor %s: %s", name, em_last_error());
    return t;
}

/* got against want: same shape and dtype, every element within 1e-10 relative
 * (plus 1e-14 absolute, for entries that are ~0). */
static void expect_close(const char *what, em_tensor *got, em_tensor *want)
{
    tu_expect_tensor_close(what, got, want, 1e-10, 1e-14);
    ck_assert_msg(got->dtype == want->dtype, "%s: got %s, want %s", what, em_dtype_name(got->dtype),
                  em_dtype_name(want->dtype));
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* ---- the PyTorch fixture ------------------------------------------------------- */
START_TEST(mlp_matches_pytorch)
{
    const char *path = tu_fixture_path("mlp_golden.safetensors");
    em_safetensors *st = NULL;
    ck_assert_msg(em_safetensors_open(path, &st) == EM_OK, "cannot open %s: %s", path, em_last_error());
    EM_SCOPE {
        em_tensor *x = get(st, "x"), *w1 = get(st, "w1"), *b1 = get(st, "b1"), *w2 = get(st, "w2"),
                  *b2 = get(st, "b2"), *target = get(st, "target");
        em_tensor *leaves[] = {x, w1, b1, w2, b2};
        const char *names[] = {"grad.x", "grad.w1", "grad.b1", "grad.w2", "grad.b2"};
        for (int i = 0; i < 5; i++) em_requires_grad_(leaves[i], true);

        em_tensor *logits = linear(em_gelu(linear(x, w1, b1)), w2, b2);
        em_tensor *loss = em_cross_entropy(logits, target, -100, EM_REDUCE_MEAN);
        expect_close("logits", logits, get(st, "logits"));
        expect_close("loss", loss, get(st, "loss"));
        em_backward(loss);
        for (int i = 0; i < 5; i++) expect_close(names[i], em_grad(leaves[i]), get(st, names[i]));

        /* the same graph built again gives bit-identical gradients */
        double *first[5];
        for (int i = 0; i < 5; i++) {
            first[i] = tu_to_doubles(em_grad(leaves[i]));
            em_set_grad(leaves[i], NULL);
        }
        em_backward(em_cross_entropy(linear(em_gelu(linear(x, w1, b1)), w2, b2), target, -100, EM_REDUCE_MEAN));
        for (int i = 0; i < 5; i++) {
            double *again = tu_to_doubles(em_grad(leaves[i]));
            ck_assert_msg(!memcmp(first[i], again, sizeof(double) * (size_t)em_numel(leaves[i])),
                          "%s differs between two identical backward passes", names[i]);
            free(again);
            free(first[i]);
        }
    }
    em_safetensors_close(st);
}
END_TEST

/* ---- memory: scopes free every step ---------------------------------------------- */
START_TEST(mlp_loop_returns_to_baseline)
{
    em_set_seed(7);
    em_tensor *w1, *w2;
    EM_SCOPE {   /* the randn temporaries die here; the scaled weights are kept */
        w1 = em_keep(em_mul_scalar(em_randn(EM_SHAPE(32, 16), EM_F32, EM_CPU), 0.25));
        w2 = em_keep(em_mul_scalar(em_randn(EM_SHAPE(4, 32), EM_F32, EM_CPU), 0.18));
    }
    em_requires_grad_(w1, true);
    em_requires_grad_(w2, true);
    em_tensor *b1 = em_requires_grad_(em_zeros(EM_SHAPE(32), EM_F32, EM_CPU), true);
    em_tensor *b2 = em_requires_grad_(em_zeros(EM_SHAPE(4), EM_F32, EM_CPU), true);
    em_tensor *x = em_randn(EM_SHAPE(8, 16), EM_F32, EM_CPU);
    em_tensor *y = em_from_data((int64_t[]){0, 1, 2, 3, 3, 2, 1, 0}, EM_SHAPE(8), EM_I64);
    em_tensor *params[] = {w1, b1, w2, b2};
    int64_t base = tu_live_bytes();
    double first = 0, last = 0;
    for (int it = 0; it < 1000; it++) {
        EM_SCOPE {
            em_tensor *loss = em_cross_entropy(linear(em_tanh(linear(x, w1, b1)), w2, b2), y, -100, EM_REDUCE_MEAN);
            em_backward(loss);
            if (it == 0) first = em_item(loss);
            last = em_item(loss);
            EM_NO_GRAD {
                for (int i = 0; i < 4; i++) {
                    ck_assert_ptr_nonnull(em_grad(params[i]));
                    em_copy_(params[i], em_sub(params[i], em_mul_scalar(em_grad(params[i]), 0.05)));
                    em_set_grad(params[i], NULL);
                }
            }
        }
        ck_assert_msg(tu_live_bytes() == base, "iteration %d: %lld live bytes, %lld before the loop", it,
                      (long long)tu_live_bytes(), (long long)base);
    }
    ck_assert_msg(last < first, "the loss did not go down: %g -> %g", first, last);
    for (int i = 0; i < 4; i++) em_release(params[i]);
    em_release(x);
    em_release(y);
    ck_assert_int_eq(tu_live_bytes(), 0);
}
END_TEST

/* The DOT that em_graph_dot(t, path) writes (asserted EM_OK), malloc'd. */
static char *dot_of(em_tensor *t, const char *path)
{
    ck_assert_int_eq(em_graph_dot(t, path), EM_OK);
    return tu_read_file(path, NULL);
}

/* ---- em_graph_dot --------------------------------------------------------------------- */
/* A diamond: a feeds mul twice and add once; the leaf must be drawn once. */
START_TEST(dot_labels_and_dedup)
{
    EM_SCOPE {
        em_tensor *a = em_requires_grad_(em_ones(EM_SHAPE(2, 3), EM_F64, EM_CPU), true);
        em_tensor *c = em_ones(EM_SHAPE(2, 3), EM_F64, EM_CPU);   /* no grad: a grey input */
        em_tensor *s = em_sum(em_add(em_mul(a, a), em_mul(a, c)), 0, NULL, true);
        const char *path = tu_scratch_path("g.dot");
        char *dot = dot_of(s, path);
        ck_assert_ptr_nonnull(dot);
        ck_assert_msg(!strncmp(dot, "digraph ember {", 15) && strstr(dot, "}\n"), "not a digraph:\n%s", dot);
        ck_assert_msg(strstr(dot, "\"mul\\n[2,3] float64\""), "no mul box:\n%s", dot);
        ck_assert_msg(strstr(dot, "\"add\\n[2,3] float64\""), "no add box:\n%s", dot);
        ck_assert_msg(strstr(dot, "\"sum\\n[1,1] float64\""), "no sum box:\n%s", dot);
        ck_assert_msg(strstr(dot, "label=\"[2,3] float64\\nrequires_grad\""), "no leaf ellipse:\n%s", dot);
        ck_assert_int_eq(count(dot, "shape=box"), 4);          /* mul, mul, add, sum */
        ck_assert_int_eq(count(dot, "requires_grad"), 1);      /* a, once */
        ck_assert_int_eq(count(dot, "style=dashed"), 1);       /* c */
        /* edges: a->mul x2, a->mul, c->mul, mul->add x2, add->sum, sum->out */
        ck_assert_int_eq(count(dot, " -> "), 8);
        ck_assert_int_eq(count(dot, "-> out"), 1);
        free(dot);
        /* no temporary left beside it */
        char tmp[160];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        ck_assert_int_ne(access(tmp, F_OK), 0);

        /* a leaf alone is one ellipse; rewriting replaces the file */
        dot = dot_of(a, path);
        ck_assert_int_eq(count(dot, "requires_grad"), 1);
        ck_assert_int_eq(count(dot, " -> "), 0);
        free(dot);
    }
}
END_TEST

START_TEST(dot_of_a_long_chain)
{
    EM_SCOPE {
        em_tensor *x = em_requires_grad_(em_ones(EM_SHAPE(4), EM_F32, EM_CPU), true);
        em_tensor *h = x;
        for (int i = 0; i < 10000; i++) h = em_neg(h);
        char *dot = dot_of(h, tu_scratch_path("chain.dot"));
        ck_assert_int_eq(count(dot, "\"neg\\n[4] float32\""), 10000);
        ck_assert_int_eq(count(dot, " -> "), 10001);
        free(dot);
    }
}
END_TEST

START_TEST(dot_failures_name_the_path)
{
    EM_SCOPE {
        em_tensor *a = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true);
        em_tensor *s = em_sum(em_mul(a, a), 0, NULL, false);

        /* a missing directory */
        const char *bad = "/nonexistent-ember-dir/g.dot";
        em_status st = em_graph_dot(s, bad);
        ck_assert_int_ne(st, EM_OK);
        ck_assert_int_eq(em_last_status(), st);
        ck_assert_msg(strstr(em_last_error(), bad), "message does not name the path: %s", em_last_error());

        /* the path is a directory: the temporary is written, the rename fails and is cleaned up */
        char dir[96], tmp[160];
        snprintf(dir, sizeof dir, "%s/adir", tu_scratch());
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        ck_assert_int_eq(em_graph_dot(s, dir), EM_ERR_IO);
        ck_assert_msg(strstr(em_last_error(), dir), "message does not name the path: %s", em_last_error());
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
        ck_assert_int_ne(access(tmp, F_OK), 0);
        rmdir(dir);

        /* out of memory at each allocation in turn: a status, no file, no leak (ASan/valgrind) */
        const char *path = tu_scratch_path("oom.dot");
        int failures = 0;
        for (int64_t k = 1; k < 100; k++) {
            em_alloc_fail_after(k, false);
            st = em_graph_dot(s, path);
            em_alloc_fail_after(0, false);
            if (st == EM_OK) break;
            failures++;
            ck_assert_int_eq(st, EM_ERR_OOM);
            ck_assert_msg(strstr(em_last_error(), path), "message does not name the path: %s", em_last_error());
            ck_assert_int_ne(access(path, F_OK), 0);
        }
        ck_assert_int_ge(failures, 2);
        ck_assert_int_eq(access(path, F_OK), 0);
        unlink(path);
    }
}
END_TEST

START_TEST(dot_null_path_is_misuse)
{
    EM_SCOPE {
        em_tensor *a = em_ones(EM_SHAPE(3), EM_F32, EM_CPU);
        tu_expect_misuse("path must not be NULL");
        em_graph_dot(a, NULL);
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("mlp_golden");
    TCase *tc = tu_scratch_per_test(tu_case(s, "core", 0), "dot");
    tu_add_tests(tc, mlp_matches_pytorch, mlp_loop_returns_to_baseline, dot_labels_and_dedup,
                 dot_of_a_long_chain, dot_failures_name_the_path);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), dot_null_path_is_misuse);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
