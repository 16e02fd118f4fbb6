/* The module base: registry, dotted names, modes, zero_grad and flat storage. */
#include "check_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct lin { em_module base; em_tensor *w, *b; } lin;

static em_module *lin_new(int64_t in, int64_t out)
{
    lin *l = calloc(1, sizeof *l);
    em_module_init(&l->base, "Linear", NULL);
    EM_SCOPE {
        l->w = em_module_register_parameter(&l->base, "weight", em_full(EM_SHAPE(out, in), 0.5, EM_F32, EM_CPU));
        l->b = em_module_register_parameter(&l->base, "bias", em_zeros(EM_SHAPE(out), EM_F32, EM_CPU));
    }
    return &l->base;
}

static em_module *net_new(void)
{
    em_module *root = calloc(1, sizeof *root);
    em_module_init(root, "Net", NULL);
    em_module *enc = calloc(1, sizeof *enc);
    em_module_init(enc, "Encoder", NULL);
    em_module_register_child(enc, "0", lin_new(3, 4));
    em_module_register_child(enc, "1", lin_new(4, 4));
    em_module_register_child(root, "encoder", enc);
    em_module_register_child(root, "head", lin_new(4, 2));
    EM_SCOPE { em_module_register_buffer(root, "position_ids", em_arange(0, 8, 1, EM_I64, EM_CPU), false); }
    return root;
}

START_TEST(dotted_names_in_registration_order)
{
    int64_t base = tu_live_bytes();
    em_module *m = net_new();
    em_named_tensors l = em_module_named_parameters(m);
    const char *want[] = {"encoder.0.weight", "encoder.0.bias", "encoder.1.weight", "encoder.1.bias", "head.weight", "head.bias"};
    ck_assert_int_eq(l.n, 6);
    for (int i = 0; i < 6; i++) ck_assert_str_eq(l.items[i].name, want[i]);
    /* parameters(): the same tensors in the same order, no fixed-size array */
    int n = -1;
    em_tensor **p = em_module_parameters(m, &n);
    ck_assert_int_eq(n, 6);
    for (int i = 0; i < 6; i++) ck_assert_ptr_eq(p[i], l.items[i].tensor);
    free(p);
    em_named_tensors_free(&l);
    ck_assert_int_eq(em_module_num_parameters(m, false), 12 + 4 + 16 + 4 + 8 + 2);
    ck_assert_ptr_eq(em_module_get(m, "encoder.1.bias"), ((lin *)em_module_child(m, "encoder.1"))->b);
    ck_assert_ptr_null(em_module_get(m, "position_ids"));   /* non-persistent buffers are not in checkpoints */
    em_named_tensors b = em_module_named_buffers(m, true);
    ck_assert_int_eq(b.n, 1);
    em_named_tensors_free(&b);
    em_module_free(m);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(train_eval_reaches_every_module)
{
    em_module *m = net_new();
    em_module_train(m, false);
    ck_assert(!em_module_is_training(em_module_child(m, "encoder.1")));
    em_module_train(m, true);
    ck_assert(em_module_is_training(em_module_child(m, "head")));
    em_module_free(m);
}
END_TEST

static em_tensor *forward(em_module *m, em_tensor *x)
{
    const char *layers[] = {"encoder.0", "encoder.1", "head"};
    for (int i = 0; i < 3; i++) {
        lin *l = (lin *)em_module_child(m, layers[i]);
        x = em_add(em_matmul(x, em_transpose(l->w, 0, 1)), l->b);
    }
    return em_sum(x, 0, NULL, false);
}

START_TEST(flatten_keeps_values_and_gradients_land_in_one_buffer)
{
    em_module *m = net_new();
    lin *h = (lin *)em_module_child(m, "head");
    em_tensor *w_before = h->w;
    EM_SCOPE { em_backward(forward(m, em_ones(EM_SHAPE(2, 3), EM_F32, EM_CPU))); }
    double g_ref = em_get(em_grad(h->w), (int64_t[]){1, 2});
    em_module_zero_grad(m, true);
    ck_assert_ptr_null(em_grad(h->w));
    ck_assert_int_eq(em_module_flatten(m), EM_OK);
    em_tensor *fp = em_module_flat_params(m, EM_F32), *fg = em_module_flat_grads(m, EM_F32);
    ck_assert_int_eq(fp->shape[0], 46);
    ck_assert_ptr_eq(h->w, w_before);                  /* same em_tensor, new home */
    ck_assert_ptr_eq(h->w->storage, fp->storage);
    ck_assert_int_eq(h->w->offset, 12 + 4 + 16 + 4);
    ck_assert_double_eq(em_get(h->w, (int64_t[]){1, 2}), 0.5);
    ck_assert_ptr_eq(em_grad(h->w)->storage, fg->storage);
    EM_SCOPE { em_backward(forward(m, em_ones(EM_SHAPE(2, 3), EM_F32, EM_CPU))); }
    ck_assert_double_eq(em_get(fg, (int64_t[]){36 + 6}), g_ref);   /* head.weight[1][2] */
    em_module_zero_grad(m, true);                              /* in place after flatten */
    ck_assert_ptr_nonnull(em_grad(h->w));
    ck_assert_double_eq(em_get(fg, (int64_t[]){36 + 6}), 0.0);
    em_module_free(m);
}
END_TEST

/* Sequential runs its children in order and names them as torch does; ModuleList holds
 * children without a forward; em_module_forward reaches the layers' own forwards. */
START_TEST(sequential_and_module_list)
{
    int64_t base = tu_live_bytes();
    em_set_seed(5);
    em_module *seq = em_nn_sequential_new();
    em_nn_linear *l0 = (em_nn_linear *)em_nn_append(seq, &em_nn_linear_new(3, 4, NULL)->base);
    em_nn_append(seq, &em_nn_gelu_new(false)->base);
    em_nn_append(seq, &em_nn_dropout_new(0.5)->base);
    em_module *inner = em_nn_append(seq, em_nn_sequential_new());
    em_nn_linear *l3 = (em_nn_linear *)em_nn_append(inner, &em_nn_linear_new(4, 2, NULL)->base);
    ck_assert_int_eq(em_module_num_children(seq), 4);
    ck_assert_str_eq(em_module_child_at(seq, 1)->type, "GELU");
    em_named_tensors ps = em_module_named_parameters(seq);
    ck_assert_int_eq(ps.n, 4);
    ck_assert_str_eq(ps.items[0].name, "0.weight");
    ck_assert_str_eq(ps.items[3].name, "3.0.bias");
    em_named_tensors_free(&ps);
    em_module_train(seq, false);   /* dropout off: the chain is deterministic */
    EM_SCOPE {
        em_tensor *x = tu_rand_tensor(EM_SHAPE(5, 3), EM_F32, -1, 1, 9, NULL);
        em_tensor *got = em_module_forward(seq, x);
        em_tensor *want = em_nn_linear_forward(l3, em_gelu(em_nn_linear_forward(l0, x)));
        ck_assert_int_eq(got->shape[1], 2);
        for (int64_t i = 0; i < 5; i++)
            for (int64_t j = 0; j < 2; j++)
                ck_assert_double_eq(em_get(got, (int64_t[]){i, j}), em_get(want, (int64_t[]){i, j}));
    }
    /* nn.Sequential(a, b): the same chain from an array of children */
    em_module *seq2 = em_nn_sequential_of(2, (em_module *[]){&em_nn_linear_new(3, 4, NULL)->base,
                                                           &em_nn_gelu_new(false)->base});
    ck_assert_int_eq(em_module_num_children(seq2), 2);
    ck_assert_str_eq(em_module_child_at(seq2, 1)->type, "GELU");
    em_optimizer *opt = em_adamw_new_module(seq2, NULL);   /* AdamW(model.parameters()) */
    ck_assert_int_eq(em_optimizer_group(opt, 0).n_params, 2);
    em_optimizer_free(opt);
    em_module_free(seq2);
    em_module *list = em_nn_module_list_new();
    em_nn_append(list, &em_nn_linear_new(2, 2, NULL)->base);
    em_nn_append(list, &em_nn_layer_norm_new(2, NULL)->base);
    ck_assert_str_eq(em_module_child_at(list, 1)->type, "LayerNorm");
    ck_assert_ptr_null(list->forward);
    em_module_free(seq);
    em_module_free(list);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(misuse_forward_of_a_module_list)
{
    tu_expect_misuse("em_module_forward: ModuleList has no one-input forward");
    em_module *list = em_nn_module_list_new();
    em_module_forward(list, em_zeros(EM_SHAPE(1), EM_F32, EM_CPU));
}
END_TEST

/* One ownership rule (nn.h, tensor.h): the module holds its own reference; the caller
 * releases only what it owns. At top level a created tensor is the caller's: register,
 * then release it, and the module keeps the parameter alive. */
START_TEST(registering_at_top_level_then_releasing_is_safe)
{
    int64_t base = tu_live_bytes();
    em_module *m = calloc(1, sizeof *m);
    em_module_init(m, "Custom", NULL);
    em_tensor *w = em_full(EM_SHAPE(3), 2.0, EM_F32, EM_CPU);
    em_module_register_parameter(m, "w", w);
    em_release(w);   /* the caller's reference */
    ck_assert_double_eq(em_get(em_module_get(m, "w"), (int64_t[]){1}), 2.0);
    EM_SCOPE { em_module_register_parameter(m, "v", em_zeros(EM_SHAPE(2), EM_F32, EM_CPU)); }   /* scope's: nothing to release */
    ck_assert_double_eq(em_get(em_module_get(m, "v"), (int64_t[]){0}), 0.0);
    em_module_free(m);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

/* Inside a scope the created tensor is the scope's: releasing it after registering used to be a
 * silent double free; now it is misuse that says whose reference it is. */
START_TEST(misuse_release_of_a_scope_owned_parameter)
{
    tu_expect_misuse("em_release: tensor [3]: every reference left belongs to a scope or a module");
    em_module *m = calloc(1, sizeof *m);
    em_module_init(m, "Custom", NULL);
    EM_SCOPE {
        em_tensor *w = em_module_register_parameter(m, "w", em_full(EM_SHAPE(3), 2.0, EM_F32, EM_CPU));
        em_release(w);
    }
}
END_TEST

START_TEST(misuse_release_of_a_scope_result)
{
    tu_expect_misuse("every reference left belongs to a scope or a module");
    EM_SCOPE { em_release(em_zeros(EM_SHAPE(2), EM_F32, EM_CPU)); }
}
END_TEST

START_TEST(misuse_duplicate_name)
{
    tu_expect_misuse("em_module_register_parameter: the name \"weight\" is already registered");
    em_module *m = lin_new(2, 2);
    em_module_register_parameter(m, "weight", em_zeros(EM_SHAPE(1), EM_F32, EM_CPU));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("module");
    tu_add_tests(tu_case(s, "module", 0), dotted_names_in_registration_order, train_eval_reaches_every_module,
                 flatten_keeps_values_and_gradients_land_in_one_buffer,
                 registering_at_top_level_then_releasing_is_safe, sequential_and_module_list);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_duplicate_name,
                        misuse_release_of_a_scope_owned_parameter, misuse_release_of_a_scope_result,
                        misuse_forward_of_a_module_list);
    return tu_run_suite(s);
}
