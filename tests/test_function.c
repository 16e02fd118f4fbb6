/* Custom autograd functions (autograd.h, "custom functions"): a hand-written
 * op with its backward matches the composed ops and passes gradcheck; saved
 * tensors, scalars, needs_input_grad, non-differentiable outputs, no-grad,
 * autocast, post-accumulate hooks, and the misuse errors. */
#include "check_util.h"

#include <math.h>
#include <stdlib.h>

/* SiLU: y = x sigmoid(x), dy/dx = s (1 + x - x s) */
static em_status silu_fwd(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
{
    (void)n_in, (void)n_out;
    em_ctx_save_for_backward(ctx, 1, in);
    out[0] = em_mul(in[0], em_sigmoid(in[0]));
    return out[0] ? EM_OK : em_last_status();
}

static int silu_backward_calls;

static void silu_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)n_out, (void)n_in;
    silu_backward_calls++;
    em_tensor *x = em_ctx_saved(ctx, 0), *s = em_sigmoid(x);
    if (em_ctx_needs_input_grad(ctx, 0)) gin[0] = em_mul(gout[0], em_mul(s, em_add_scalar(em_sub(x, em_mul(x, s)), 1)));
}

static const em_function silu_fn = {.name = "SiLU", .forward = silu_fwd, .backward = silu_bwd};

static em_tensor *silu(em_tensor *x)
{
    em_tensor *y = NULL;
    ck_assert_int_eq(em_function_apply(&silu_fn, 1, &x, 1, &y, NULL), EM_OK);
    return y;
}

static em_tensor *silu_gc(int n, em_tensor **x, void *u)
{
    (void)n, (void)u;
    return silu(x[0]);
}

START_TEST(silu_matches_composed_ops_and_passes_gradcheck)
{
    EM_SCOPE {
        em_tensor *x = em_requires_grad_(tu_rand_tensor(EM_SHAPE(3, 5), EM_F64, -4, 4, 1, NULL), true);
        em_tensor *y = silu(x);
        ck_assert_str_eq(em_grad_fn_name(y), "SiLU");
        em_tensor *w = tu_rand_tensor(EM_SHAPE(3, 5), EM_F64, -1, 1, 2, NULL);
        silu_backward_calls = 0;
        em_backward(em_sum(em_mul(y, w), 0, NULL, false));
        ck_assert_int_eq(silu_backward_calls, 1);
        em_tensor *g = em_detach(em_clone(em_grad(x)));
        em_set_grad(x, NULL);
        em_tensor *ref = em_mul(x, em_sigmoid(x));
        em_backward(em_sum(em_mul(ref, w), 0, NULL, false));
        double *a = tu_to_doubles(y), *b = tu_to_doubles(ref), *ga = tu_to_doubles(g), *gb = tu_to_doubles(em_grad(x));
        for (int i = 0; i < 15; i++) {
            ck_assert_double_eq(a[i], b[i]);
            ck_assert_double_eq_tol(ga[i], gb[i], 1e-14);
        }
        free(a), free(b), free(ga), free(gb);
        char report[256];
        ck_assert_msg(em_gradcheck(silu_gc, 1, &x, NULL, 0, 0, 0, report, sizeof report), "%s", report);
        /* a wrong derivative fails it: the check can fail */
    }
}
END_TEST

/* y = k a + b with k a saved scalar; only the inputs that need a gradient get one */
static int needs_seen[2];
static em_status axpb_fwd(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
{
    (void)n_in, (void)n_out;
    double k = *(const double *)em_ctx_user(ctx);
    em_ctx_set_scalar(ctx, 3, k);
    out[0] = em_add(em_mul_scalar(in[0], k), in[1]);
    return out[0] ? EM_OK : em_last_status();
}

static void axpb_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)n_out, (void)n_in;
    needs_seen[0] = em_ctx_needs_input_grad(ctx, 0), needs_seen[1] = em_ctx_needs_input_grad(ctx, 1);
    gin[0] = em_mul_scalar(gout[0], em_ctx_scalar(ctx, 3));
    gin[1] = gout[0];   /* not asked for when b does not require grad: the engine drops it */
}

static const em_function axpb_fn = {.name = "AXPB", .forward = axpb_fwd, .backward = axpb_bwd};

START_TEST(scalars_and_needs_input_grad)
{
    EM_SCOPE {
        em_tensor *a = em_requires_grad_(em_full(EM_SHAPE(4), 2.0, EM_F64, EM_CPU), true);
        em_tensor *b = em_full(EM_SHAPE(4), 1.0, EM_F64, EM_CPU);
        double k = 3.0;
        em_tensor *in[2] = {a, b}, *y;
        ck_assert_int_eq(em_function_apply(&axpb_fn, 2, in, 1, &y, &k), EM_OK);
        ck_assert_double_eq(em_get(y, (int64_t[]){0}), 7.0);
        em_backward(em_sum(y, 0, NULL, false));
        ck_assert_int_eq(needs_seen[0], 1);
        ck_assert_int_eq(needs_seen[1], 0);
        ck_assert_double_eq(em_get(em_grad(a), (int64_t[]){2}), 3.0);
        ck_assert_ptr_null(em_grad(b));
        /* recording off: forward only, no history */
        em_tensor *z = NULL;
        EM_NO_GRAD { ck_assert_int_eq(em_function_apply(&axpb_fn, 2, in, 1, &z, &k), EM_OK); }
        ck_assert(!em_requires_grad(z));
        ck_assert_ptr_null(em_grad_fn_name(z));
    }
}
END_TEST

/* two outputs: the values, and a non-differentiable 0/1 mask of the positive ones */
static int relu_mask_gout1_nonzero;
static em_status relu_mask_fwd(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
{
    (void)n_in, (void)n_out;
    em_tensor *m = em_to_dtype(em_gt(in[0], em_scalar(0, in[0]->dtype, EM_CPU)), in[0]->dtype);
    em_ctx_save_for_backward(ctx, 1, &m);
    em_ctx_mark_non_differentiable(ctx, 1);
    out[0] = em_mul(in[0], m);
    out[1] = em_clone(m);
    return out[0] && out[1] ? EM_OK : em_last_status();
}

static void relu_mask_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)n_out, (void)n_in;
    relu_mask_gout1_nonzero = em_item(em_sum(em_abs(gout[1]), 0, NULL, false)) != 0;
    gin[0] = em_mul(gout[0], em_ctx_saved(ctx, 0));
}

static const em_function relu_mask_fn = {.name = "ReluMask", .forward = relu_mask_fwd, .backward = relu_mask_bwd};

START_TEST(non_differentiable_output)
{
    EM_SCOPE {
        em_tensor *x = em_requires_grad_(em_from_data((const double[]){-1, 2, -3, 4}, EM_SHAPE(4), EM_F64), true);
        em_tensor *out[2];
        ck_assert_int_eq(em_function_apply(&relu_mask_fn, 1, &x, 2, out, NULL), EM_OK);
        ck_assert(em_requires_grad(out[0]));
        ck_assert(!em_requires_grad(out[1]));
        /* using the mask in the loss sends it no gradient: backward sees zeros for it */
        em_backward(em_sum(em_add(out[0], em_mul(out[1], x)), 0, NULL, false));
        ck_assert_int_eq(relu_mask_gout1_nonzero, 0);
        /* d/dx [relu(x) + mask * x] = 2 mask */
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){0}), 0.0);
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){1}), 2.0);
    }
}
END_TEST

/* a linear layer as a custom function: under autocast its matmul runs in bf16 */
static em_dtype seen_fwd_dtype;
static bool seen_bwd_autocast;
static em_status lin_fwd(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
{
    (void)n_in, (void)n_out;
    em_ctx_save_for_backward(ctx, 2, in);
    out[0] = em_matmul(in[0], em_transpose(in[1], 0, 1));
    if (out[0]) seen_fwd_dtype = out[0]->dtype;
    return out[0] ? EM_OK : em_last_status();
}

static void lin_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)n_out, (void)n_in;
    seen_bwd_autocast = em_autocast_enabled();
    em_tensor *x = em_ctx_saved(ctx, 0), *w = em_ctx_saved(ctx, 1);
    em_tensor *g = em_to_dtype(gout[0], EM_F32);
    if (em_ctx_needs_input_grad(ctx, 0)) gin[0] = em_matmul(g, w);
    if (em_ctx_needs_input_grad(ctx, 1)) gin[1] = em_matmul(em_transpose(g, 0, 1), x);
}

static const em_function lin_fn = {.name = "MyLinear", .forward = lin_fwd, .backward = lin_bwd};

static int post_hook_calls;
static void count_post(em_tensor *leaf, void *user)
{
    (void)leaf, (void)user;
    post_hook_calls++;
}

START_TEST(autocast_and_post_accumulate_hooks)
{
    EM_SCOPE {
        em_tensor *x = tu_rand_tensor(EM_SHAPE(8, 16), EM_F32, -1, 1, 3, NULL);
        em_tensor *w = em_requires_grad_(tu_rand_tensor(EM_SHAPE(4, 16), EM_F32, -1, 1, 4, NULL), true);
        post_hook_calls = 0;
        em_register_post_accumulate_grad_hook(w, count_post, NULL);
        em_tensor *in[2] = {x, w}, *y = NULL;
        EM_AUTOCAST_REGION(EM_BF16) { ck_assert_int_eq(em_function_apply(&lin_fn, 2, in, 1, &y, NULL), EM_OK); }
        ck_assert_int_eq(seen_fwd_dtype, EM_BF16);   /* forward ran under the caller's autocast */
        em_backward(em_sum(em_to_dtype(y, EM_F32), 0, NULL, false));
        ck_assert(!seen_bwd_autocast);               /* backward runs outside autocast */
        ck_assert_int_eq(post_hook_calls, 1);        /* DDP's hook point fires for the leaf */
        ck_assert_int_eq(em_grad(w)->dtype, EM_F32);
        /* dL/dw = sum over rows of x: compare with the f32 product (bf16 forward only) */
        em_tensor *ref = em_sum(x, 1, (int[]){0}, true);
        for (int j = 0; j < 16; j++)
            ck_assert_double_eq_tol(em_get(em_grad(w), (int64_t[]){2, j}), em_get(ref, (int64_t[]){0, j}), 1e-5);
    }
}
END_TEST

/* saved tensors are freed after backward (and with the graph when backward never runs) */
START_TEST(saved_tensors_are_freed)
{
    int64_t base = tu_live_bytes();
    EM_SCOPE {
        em_tensor *x = em_requires_grad_(em_full(EM_SHAPE(1000), 0.5, EM_F64, EM_CPU), true);
        em_backward(em_sum(silu(x), 0, NULL, false));
        em_tensor *unused = silu(x);   /* graph dropped without backward */
        (void)unused;
    }
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

/* ---- misuse ------------------------------------------------------------------------ */
static void wrong_shape_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)ctx, (void)n_out, (void)n_in;
    gin[0] = em_sum(gout[0], 0, NULL, true);   /* [1, 1] instead of [3, 5] */
}
static const em_function wrong_shape_fn = {.name = "WrongShape", .forward = silu_fwd, .backward = wrong_shape_bwd};

START_TEST(misuse_wrong_gradient_shape)
{
    tu_expect_misuse("the backward rule of WrongShape gave input 0 a gradient of shape [1,1], expected [3,5]");
    em_tensor *x = em_requires_grad_(em_ones(EM_SHAPE(3, 5), EM_F64, EM_CPU), true), *y;
    em_function_apply(&wrong_shape_fn, 1, &x, 1, &y, NULL);
    em_backward(em_sum(y, 0, NULL, false));
}
END_TEST

static em_status identity_fwd(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
{
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = in[0];
    return EM_OK;
}
static const em_function identity_fn = {.name = "Identity", .forward = identity_fwd, .backward = silu_bwd};

START_TEST(misuse_output_is_input)
{
    tu_expect_misuse("Identity: output 0 is input 0 itself; return a new tensor");
    em_tensor *x = em_requires_grad_(em_ones(EM_SHAPE(2), EM_F64, EM_CPU), true), *y;
    em_function_apply(&identity_fn, 1, &x, 1, &y, NULL);
}
END_TEST

START_TEST(misuse_inplace_after_save)
{
    tu_expect_misuse("a tensor that SiLU saved for backward (saved tensor 0, shape [2]) was modified by an in-place op");
    em_tensor *x = em_requires_grad_(em_ones(EM_SHAPE(2), EM_F64, EM_CPU), true);
    em_tensor *y = silu(x);
    em_fill_(x, 3.0);
    em_backward(em_sum(y, 0, NULL, false));
}
END_TEST

/* One tensor as two outputs: refused (adopting it twice freed the node it
 * already held: a use after free, then a crash in backward). */
static em_status twice_fwd(em_function_ctx *ctx, int n_in, em_tensor *const *in, int n_out, em_tensor **out)
{
    (void)ctx, (void)n_in, (void)n_out;
    out[0] = out[1] = em_mul_scalar(in[0], 2);
    return EM_OK;
}
static void twice_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)ctx, (void)n_out, (void)n_in;
    gin[0] = em_mul_scalar(em_add(gout[0], gout[1]), 2);
}
static const em_function twice_fn = {.name = "Twice", .forward = twice_fwd, .backward = twice_bwd};

START_TEST(misuse_same_tensor_two_outputs)
{
    tu_expect_misuse("Twice: outputs 0 and 1 are the same tensor");
    em_tensor *x = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true), *o[2];
    em_function_apply(&twice_fn, 1, &x, 2, o, NULL);
}
END_TEST

/* A gradient hook that changes the gradient's shape: refused, as torch does
 * (it was stored as the .grad, or added past the end of an existing one). */
static em_tensor *shrink_hook(em_tensor *g, void *u)
{
    (void)g, (void)u;
    return em_ones(EM_SHAPE(2), EM_F32, EM_CPU);
}
START_TEST(misuse_hook_changes_shape)
{
    tu_expect_misuse("gradient hook 0 of AccumulateGrad returned shape [2] for a gradient of shape [4]");
    em_tensor *x = em_requires_grad_(em_ones(EM_SHAPE(4), EM_F32, EM_CPU), true);
    em_register_hook(x, shrink_hook, NULL);
    em_backward(em_sum(em_mul_scalar(x, 3), 0, NULL, false));
}
END_TEST

/* em_backward inside a backward: refused (the inner pass reset the outer
 * pass's bookkeeping, and a gradient was lost in silence). */
static em_tensor *reenter_w;
static void reenter_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)ctx, (void)n_out, (void)n_in;
    bool p = em_set_grad_enabled(true);
    em_backward(em_sum(em_mul(reenter_w, reenter_w), 0, NULL, false));
    em_set_grad_enabled(p);
    gin[0] = em_mul_scalar(gout[0], 2);
}
static const em_function reenter_fn = {.name = "Reenter", .forward = silu_fwd, .backward = reenter_bwd};
START_TEST(misuse_backward_inside_backward)
{
    tu_expect_misuse("called from inside a backward pass");
    reenter_w = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true);
    em_tensor *x = em_requires_grad_(em_ones(EM_SHAPE(3), EM_F32, EM_CPU), true), *y;
    em_function_apply(&reenter_fn, 1, &x, 1, &y, NULL);
    em_backward(em_sum(y, 0, NULL, false));
}
END_TEST

/* A hook may return a tensor the user keeps: it is copied into the .grad, never
 * taken as the .grad (which then grew the user's tensor step after step). */
static em_tensor *const_hook(em_tensor *g, void *u)
{
    (void)g;
    return u;
}
/* A custom backward may return a gradient of another float dtype: cast to the
 * input's, as torch does. */
static void f64_grad_bwd(em_function_ctx *ctx, int n_out, em_tensor *const *gout, int n_in, em_tensor **gin)
{
    (void)ctx, (void)n_out, (void)n_in;
    gin[0] = em_to_dtype(em_mul_scalar(gout[0], 5), EM_F64);
}
static const em_function f64_grad_fn = {.name = "F64Grad", .forward = silu_fwd, .backward = f64_grad_bwd};
START_TEST(hook_results_are_copied_and_gradients_cast)
{
    em_tensor *c = em_full(1, (int64_t[]){3}, 1.0, EM_F32, EM_CPU);
    em_tensor *x = em_requires_grad_(em_zeros(EM_SHAPE(3), EM_F32, EM_CPU), true);
    em_register_hook(x, const_hook, c);
    for (int r = 1; r <= 3; r++) {
        EM_SCOPE { em_backward(em_sum(em_mul_scalar(x, 3), 0, NULL, false)); }
        ck_assert_msg(em_grad(x) != c, "the hook's tensor became the .grad");
        ck_assert_double_eq(em_get(em_grad(x), (int64_t[]){0}), (double)r);
        ck_assert_double_eq(em_get(c, (int64_t[]){0}), 1.0);
    }
    em_tensor *z = em_requires_grad_(em_zeros(EM_SHAPE(2), EM_F32, EM_CPU), true), *y;
    EM_SCOPE {   /* through an op between: its rule gets the cast gradient */
        em_tensor *zz = em_mul_scalar(z, 2);
        ck_assert_int_eq(em_function_apply(&f64_grad_fn, 1, &zz, 1, &y, NULL), EM_OK);
        em_backward(em_sum(y, 0, NULL, false));
    }
    ck_assert_int_eq(em_grad(z)->dtype, EM_F32);
    ck_assert_double_eq(em_get(em_grad(z), (int64_t[]){1}), 10.0);
    em_release(x), em_release(c), em_release(z);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("function");
    tu_add_tests(tu_case(s, "function", 0), silu_matches_composed_ops_and_passes_gradcheck,
                 scalars_and_needs_input_grad, non_differentiable_output, autocast_and_post_accumulate_hooks,
                 saved_tensors_are_freed, hook_results_are_copied_and_gradients_cast);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_wrong_gradient_shape, misuse_output_is_input,
                        misuse_inplace_after_save, misuse_same_tensor_two_outputs, misuse_hook_changes_shape,
                        misuse_backward_inside_backward);
    return tu_run_suite(s);
}
