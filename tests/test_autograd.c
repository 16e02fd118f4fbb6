/* The autograd engine: recording, accumulation, ordering, retain_graph,
 * hooks, and the misuse errors of DESIGN.md §3. */
#include "check_util.h"

#include <math.h>

static em_tensor *leaf(double v)
{
    return em_requires_grad_(em_full(EM_SHAPE(2), v, EM_F64, EM_CPU), true);
}

START_TEST(grads_accumulate_into_leaves)
{
    EM_SCOPE {
        em_tensor *x = leaf(3.0), *y = leaf(4.0);
        /* z = sum(x*y + x) -> dz/dx = y + 1, dz/dy = x */
        em_tensor *z = em_sum(em_add(em_mul(x, y), x), 0, NULL, false);
        ck_assert_str_eq(em_grad_fn_name(z), "view");   /* keepdim=false: a view of the sum */
        ck_assert_str_eq(em_grad_fn_name(em_sum(x, 0, NULL, true)), "sum");
        ck_assert(em_is_leaf(x) && !em_is_leaf(z));
        em_backward(z);
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){1}), 5.0);
        ck_assert_double_eq(em_get(em_grad(y), (int64_t[]){0}), 3.0);
        /* a second graph accumulates into the same .grad */
        em_backward(em_sum(em_mul(x, x), 0, NULL, false));
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){1}), 11.0);
    }
}
END_TEST

START_TEST(no_grad_records_nothing)
{
    EM_SCOPE {
        em_tensor *x = leaf(1.0);
        em_tensor *y = NULL;
        EM_NO_GRAD { y = em_mul(x, x); }
        ck_assert(em_is_grad_enabled());
        ck_assert(!em_requires_grad(y));
        ck_assert_ptr_null(em_grad_fn_name(y));
        ck_assert(!em_requires_grad(em_detach(em_mul(x, x))));
    }
}
END_TEST

/* A chain of 10,000 ops: ordering and freeing must not recurse. */
START_TEST(long_chain)
{
    EM_SCOPE {
        em_tensor *x = leaf(1.0);
        em_tensor *h = x;
        for (int i = 0; i < 10000; i++) h = em_add(h, x);
        em_backward(em_sum(h, 0, NULL, false));
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){0}), 10001.0);
    }
}
END_TEST

START_TEST(retain_graph_allows_a_second_backward)
{
    EM_SCOPE {
        em_tensor *x = leaf(2.0);
        em_tensor *z = em_sum(em_mul(x, x), 0, NULL, false);
        em_backward_ex(z, &(em_backward_opts){.retain_graph = true});
        em_backward(z);
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){0}), 8.0);
    }
}
END_TEST

START_TEST(broadcast_gradients_reduce_to_input_shape)
{
    EM_SCOPE {
        em_tensor *a = em_requires_grad_(em_ones(EM_SHAPE(3, 1), EM_F64, EM_CPU), true);
        em_tensor *b = em_requires_grad_(em_ones(EM_SHAPE(4), EM_F64, EM_CPU), true);
        em_backward(em_sum(em_add(a, b), 0, NULL, false));
        ck_assert_int_eq(em_grad(a)->ndim, 2);
        ck_assert_double_eq(em_get(em_grad(a), (int64_t[]){2, 0}), 4.0);
        ck_assert_double_eq(em_get(em_grad(b), (int64_t[]){3}), 3.0);
    }
}
END_TEST

START_TEST(explicit_gradient_for_non_scalar)
{
    EM_SCOPE {
        em_tensor *x = leaf(5.0);
        em_tensor *y = em_mul(x, x);
        em_tensor *g = em_from_data((double[]){1.0, -2.0}, EM_SHAPE(2), EM_F64);
        em_backward_ex(y, &(em_backward_opts){.grad = g});
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){1}), -20.0);
    }
}
END_TEST

/* ---- hooks ------------------------------------------------------------------------ */
static char trace[64];
static int ntrace;
static em_tensor *grad_hook(em_tensor *g, void *user)
{
    trace[ntrace++] = *(const char *)user;
    return *(const char *)user == 'D' ? em_mul_scalar(g, 10.0) : NULL;   /* 'D' doubles... by ten */
}
static void post_hook(em_tensor *leaf_, void *user)
{
    (void)leaf_;
    trace[ntrace++] = *(const char *)user;
}

START_TEST(hooks_fire_in_order)
{
    EM_SCOPE {
        ntrace = 0;
        em_tensor *x = leaf(1.0), *y = leaf(1.0);
        em_register_post_accumulate_grad_hook(x, post_hook, "P");
        em_register_hook(x, grad_hook, "A");
        em_register_hook(x, grad_hook, "D");
        em_register_post_accumulate_grad_hook(x, post_hook, "Q");
        em_register_post_accumulate_grad_hook(y, post_hook, "Y");
        em_tensor *h = em_mul(x, x);           /* made first: its node runs last */
        em_tensor *k = em_mul_scalar(y, 3.0);  /* made second: its node runs first */
        em_register_hook(h, grad_hook, "H");
        em_backward(em_sum(em_add(h, k), 0, NULL, false));
        trace[ntrace] = 0;
        /* nodes run newest first, and a leaf's AccumulateGrad as soon as it is
         * ready: k's branch is newer, so y is accumulated before h's node runs;
         * x's tensor hooks run in registration order before its accumulation,
         * its post-accumulate hooks after */
        ck_assert_str_eq(trace, "YHADPQ");
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){0}), 20.0);   /* 2x, times 10 by hook D */
    }
}
END_TEST

/* Removal by (fn, user): only the first match goes, the rest keep their order;
 * a pair never registered, or a tensor with no history, is a false. */
START_TEST(hooks_removed)
{
    EM_SCOPE {
        ntrace = 0;
        em_tensor *x = leaf(1.0);
        static const char *P = "P", *Q = "Q", *A = "A", *D = "D";
        em_register_post_accumulate_grad_hook(x, post_hook, (void *)P);
        em_register_post_accumulate_grad_hook(x, post_hook, (void *)Q);
        em_register_post_accumulate_grad_hook(x, post_hook, (void *)P);
        em_register_hook(x, grad_hook, (void *)A);
        em_register_hook(x, grad_hook, (void *)D);
        ck_assert(em_remove_post_accumulate_grad_hook(x, post_hook, (void *)P));
        ck_assert(em_remove_hook(x, grad_hook, (void *)D));
        ck_assert(!em_remove_hook(x, grad_hook, (void *)D));        /* already gone */
        ck_assert(!em_remove_hook(x, grad_hook, (void *)"other"));  /* never registered */
        ck_assert(!em_remove_post_accumulate_grad_hook(em_ones(EM_SHAPE(2), EM_F64, EM_CPU), post_hook, (void *)P));
        em_backward(em_sum(em_mul(x, x), 0, NULL, false));
        trace[ntrace] = 0;
        ck_assert_str_eq(trace, "AQP");
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){0}), 2.0);   /* D's x10 is gone */
    }
}
END_TEST

/* 1,000 forward/backward iterations inside scopes return to the baseline. */
START_TEST(training_steps_return_to_baseline)
{
    em_tensor *w = em_requires_grad_(em_full(EM_SHAPE(4, 4), 0.1, EM_F32, EM_CPU), true);
    em_tensor *x = em_ones(EM_SHAPE(8, 4), EM_F32, EM_CPU);
    EM_SCOPE { em_backward(em_sum(em_mul(em_matmul(x, w), em_matmul(x, w)), 0, NULL, false)); }
    em_set_grad(w, NULL);
    int64_t base = tu_live_bytes();
    for (int i = 0; i < 1000; i++) {
        EM_SCOPE {
            em_tensor *h = em_matmul(x, w);
            em_backward(em_sum(em_mul(h, h), 0, NULL, false));
        }
        em_set_grad(w, NULL);
    }
    ck_assert_int_eq(tu_live_bytes(), base);
    em_release(x);
    em_release(w);
}
END_TEST

/* ---- misuse ------------------------------------------------------------------------ */
START_TEST(misuse_second_backward)
{
    tu_expect_misuse("em_backward: trying to backward through the graph a second time");
    em_tensor *x = leaf(2.0);
    em_tensor *z = em_sum(em_mul(x, x), 0, NULL, false);
    em_backward(z);
    em_backward(z);
}
END_TEST

START_TEST(misuse_non_scalar)
{
    tu_expect_misuse("em_backward: grad can be implicitly created only for one-element tensors");
    em_tensor *x = leaf(2.0);
    em_backward(em_mul(x, x));
}
END_TEST

START_TEST(misuse_no_grad)
{
    tu_expect_misuse("does not require grad and has no grad_fn");
    em_backward(em_sum(em_ones(EM_SHAPE(2), EM_F32, EM_CPU), 0, NULL, false));
}
END_TEST

START_TEST(misuse_inplace_after_save)
{
    tu_expect_misuse("was modified by an in-place op after it was saved");
    em_tensor *x = leaf(2.0);
    em_tensor *y = em_mul(x, x);   /* mul saves x */
    em_tensor *z = em_sum(y, 0, NULL, false);
    em_fill_(x, 3.0);
    em_backward(z);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("autograd");
    tu_add_tests(tu_case(s, "engine", 120), grads_accumulate_into_leaves, no_grad_records_nothing, long_chain,
                 retain_graph_allows_a_second_backward, broadcast_gradients_reduce_to_input_shape,
                 explicit_gradient_for_non_scalar, hooks_fire_in_order, hooks_removed,
                 training_steps_return_to_baseline);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_second_backward, misuse_non_scalar, misuse_no_grad,
                        misuse_inplace_after_save);
    return tu_run_suite(s);
}
