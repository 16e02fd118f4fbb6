/* ember tests — ops against PyTorch's results (tests/fixtures/golden_ops.safetensors,
 * made by tools/make-golden.py; PyTorch's outputs are computed in f64 from the
 * f32 inputs and rounded once to f32).
 *
 * Tolerance: |got - want| <= 1e-6 + 1e-5 * |want| (a few f32 ulps) for every
 * output, including log_softmax and cross-entropy on rows shifted by +50..80
 * (where the log-sum-exp is large) and the layer_norm gradients. With the
 * kernels of this writing, the largest |diff| / bound is about 0.33.
 */
#include "check_util.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double RTOL = 1e-5, ATOL = 1e-6;

static em_safetensors *st;

static void open_fixture(void)
{
    const char *path = tu_fixture_path("golden_ops.safetensors");
    em_status s = em_safetensors_open(path, &st);
    ck_assert_msg(s == EM_OK, "cannot open %s: %s", path, em_last_error());
}

static void close_fixture(void)
{
    em_safetensors_close(st);
    st = NULL;
}

static em_tensor *get(const char *name)
{
    em_tensor *t = em_safetensors_get(st, name);
    ck_assert_msg(t != NULL, "fixture has no tensor %s: %s", name, em_last_error());
    return t;
}

/* got (any layout) against the fixture tensor `name`: same shape, close values. */
static void expect_close(em_tensor *got, const char *name, double rtol, double atol)
{
    tu_expect_tensor_close(name, got, get(name), rtol, atol);
    ck_assert_int_eq(got->dtype, EM_F32);
}

static double meta_double(const char *key)
{
    const char *v = em_safetensors_metadata(st, key);
    ck_assert_msg(v != NULL, "fixture metadata has no %s", key);
    return strtod(v, NULL);
}

START_TEST(test_matmul)
{
    open_fixture();
    EM_SCOPE {
        expect_close(em_matmul(get("matmul.a"), get("matmul.b")), "matmul.out", RTOL, ATOL);
        expect_close(em_matmul(get("matmul_bcast.a"), get("matmul_bcast.b")), "matmul_bcast.out", RTOL, ATOL);
        expect_close(em_matmul(em_transpose(get("matmul_t.a"), 0, 1), get("matmul_t.b")), "matmul_t.out", RTOL, ATOL);
    }
    close_fixture();
}
END_TEST

START_TEST(test_softmax)
{
    open_fixture();
    EM_SCOPE {
        em_tensor *x = get("softmax.x");
        expect_close(em_softmax(x, -1), "softmax.out_last", RTOL, ATOL);
        expect_close(em_softmax(x, 1), "softmax.out_dim1", RTOL, ATOL);
        expect_close(em_log_softmax(x, -1), "log_softmax.out_last", RTOL, ATOL);
        expect_close(em_log_softmax(x, 1), "log_softmax.out_dim1", RTOL, ATOL);
    }
    close_fixture();
}
END_TEST

START_TEST(test_layer_norm)
{
    open_fixture();
    EM_SCOPE {
        em_tensor *x = get("layer_norm.x"), *w = get("layer_norm.weight"), *b = get("layer_norm.bias");
        em_tensor *dy = get("layer_norm.dy"), *mean = NULL, *rstd = NULL, *dw = NULL, *db = NULL;
        double eps = meta_double("layer_norm.eps");
        em_tensor *y = em_layer_norm(x, w, b, eps, &mean, &rstd);
        expect_close(y, "layer_norm.y", RTOL, ATOL);
        expect_close(mean, "layer_norm.mean", RTOL, ATOL);
        expect_close(rstd, "layer_norm.rstd", RTOL, ATOL);
        em_tensor *dx = em_layer_norm_backward(dy, x, mean, rstd, w, &dw, &db);
        expect_close(dx, "layer_norm.dx", RTOL, ATOL);
        expect_close(dw, "layer_norm.dweight", RTOL, ATOL);
        expect_close(db, "layer_norm.dbias", RTOL, ATOL);
    }
    close_fixture();
}
END_TEST

START_TEST(test_gelu)
{
    open_fixture();
    EM_SCOPE {
        em_tensor *x = get("gelu.x");
        expect_close(em_gelu(x), "gelu.out", RTOL, ATOL);
        expect_close(em_gelu_tanh(x), "gelu.out_tanh", RTOL, ATOL);
    }
    close_fixture();
}
END_TEST

START_TEST(test_cross_entropy)
{
    open_fixture();
    EM_SCOPE {
        em_tensor *logits = get("cross_entropy.logits"), *target = get("cross_entropy.target");
        int64_t ignore = (int64_t)meta_double("cross_entropy.ignore_index");
        em_tensor *loss = em_cross_entropy(logits, target, ignore, EM_REDUCE_MEAN);
        expect_close(loss, "cross_entropy.loss_mean", RTOL, ATOL);
        ck_assert_int_eq(loss->ndim, 0);
        expect_close(em_cross_entropy(logits, target, ignore, EM_REDUCE_NONE), "cross_entropy.loss_none", RTOL, ATOL);
        em_tensor *dloss = em_scalar(em_item(get("cross_entropy.dloss")), EM_F32, EM_CPU);
        em_tensor *dlogits = em_cross_entropy_backward(dloss, logits, target, ignore, EM_REDUCE_MEAN);
        expect_close(dlogits, "cross_entropy.dlogits_mean", RTOL, ATOL);
        /* ignored rows get no gradient at all */
        em_tensor *t = get("cross_entropy.target");
        for (int64_t i = 0; i < t->shape[0]; i++) {
            if ((int64_t)em_get(t, (int64_t[]){i}) != ignore) continue;
            for (int64_t c = 0; c < dlogits->shape[1]; c++)
                ck_assert(em_get(dlogits, (int64_t[]){i, c}) == 0.0);
        }
    }
    close_fixture();
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("golden");
    tu_add_tests(tu_case(s, "pytorch", 0), test_matmul, test_softmax, test_layer_norm, test_gelu,
                 test_cross_entropy);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
