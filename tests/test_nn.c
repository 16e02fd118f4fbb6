/* nn layers and losses: forward values against f64 references written here,
 * gradients (gradcheck in f64), shapes, dropout in train and eval mode, init
 * statistics (torch's and Hugging Face's), parameter names, and misuse. */
#include "check_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double *vals(em_tensor *t) { return tu_to_doubles(t); }

/* ---- Linear ------------------------------------------------------------------------- */

START_TEST(linear_forward_matches_reference_on_3d_input)
{
    int64_t base = tu_live_bytes();
    em_nn_linear *l = em_nn_linear_new(5, 3, NULL);
    ck_assert_int_eq(l->weight->shape[0], 3);
    ck_assert_int_eq(l->weight->shape[1], 5);
    EM_SCOPE {
        double xr[2 * 4 * 5];
        em_tensor *x = tu_rand_tensor(EM_SHAPE(2, 4, 5), EM_F32, -1, 1, 11, xr);
        em_tensor *y = em_nn_linear_forward(l, x);
        ck_assert_int_eq(y->ndim, 3);
        ck_assert_int_eq(y->shape[2], 3);
        double *w = vals(l->weight), *b = vals(l->bias), *got = vals(y), ref[24];
        for (int r = 0; r < 8; r++)
            for (int o = 0; o < 3; o++) {
                double acc = b[o];
                for (int i = 0; i < 5; i++) acc += xr[r * 5 + i] * w[o * 5 + i];
                ref[r * 3 + o] = acc;
            }
        tu_assert_close(got, ref, 24, 1e-6, 1e-6);
        free(w), free(b), free(got);
        /* a non-contiguous input (transposed view) gives the same result */
        em_tensor *xt = em_transpose(em_contiguous(em_transpose(x, 0, 1)), 0, 1);
        ck_assert(!em_is_contiguous(xt));
        tu_assert_values_close(em_nn_linear_forward(l, xt), ref, 24, 1e-6, 1e-6);
    }
    em_module_free(&l->base);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(linear_without_bias_and_its_names)
{
    em_nn_linear *l = em_nn_linear_new(4, 2, &(em_nn_linear_opts){.no_bias = true});
    ck_assert_ptr_null(l->bias);
    em_named_tensors ps = em_module_named_parameters(&l->base);
    ck_assert_int_eq(ps.n, 1);
    ck_assert_str_eq(ps.items[0].name, "weight");
    em_named_tensors_free(&ps);
    EM_SCOPE {
        em_tensor *y = em_nn_linear_forward(l, em_ones(EM_SHAPE(4), EM_F32, EM_CPU));   /* 1-d input */
        ck_assert_int_eq(y->ndim, 1);
        double s0 = 0;
        for (int i = 0; i < 4; i++) s0 += em_get(l->weight, (int64_t[]){0, i});
        ck_assert_double_eq_tol(em_get(y, (int64_t[]){0}), s0, 1e-6);
    }
    em_module_free(&l->base);
}
END_TEST

START_TEST(linear_init_is_torch_s_uniform)
{
    em_set_seed(3);
    em_nn_linear *l = em_nn_linear_new(256, 128, NULL);
    double bound = 1.0 / 16.0, *w = vals(l->weight), sum = 0, sq = 0;
    int64_t n = 128 * 256;
    for (int64_t i = 0; i < n; i++) {
        ck_assert(fabs(w[i]) <= bound);
        sum += w[i], sq += w[i] * w[i];
    }
    double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
    ck_assert_msg(fabs(mean) < 0.002 && fabs(sd - bound / sqrt(3.0)) < 0.002, "mean %g sd %g", mean, sd);
    free(w);
    em_module_free(&l->base);
}
END_TEST

static em_tensor *linear_fn(int n, em_tensor **in, void *user)
{
    (void)n;
    return em_nn_linear_forward(user, in[0]);
}

START_TEST(linear_gradcheck_in_f64)
{
    em_nn_linear *l = em_nn_linear_new(3, 4, &(em_nn_linear_opts){.dtype = EM_F64});
    char report[256];
    EM_SCOPE {
        em_tensor *in[3] = {em_requires_grad_(tu_rand_tensor(EM_SHAPE(2, 3, 3), EM_F64, -1, 1, 5, NULL), true),
                            l->weight, l->bias};
        ck_assert_msg(em_gradcheck(linear_fn, 3, in, l, 1e-6, 1e-7, 1e-5, report, sizeof report), "%s", report);
    }
    em_module_free(&l->base);
}
END_TEST

/* ---- Embedding --------------------------------------------------------------------------- */

START_TEST(embedding_rows_padding_and_its_gradient)
{
    int64_t base = tu_live_bytes();
    em_set_seed(9);
    em_nn_embedding *e = em_nn_embedding_new(10, 4, &(em_nn_embedding_opts){.has_padding_idx = true, .padding_idx = -1});
    ck_assert_int_eq(e->padding_idx, 9);   /* negative counts from the end, as torch */
    for (int j = 0; j < 4; j++) ck_assert_double_eq(em_get(e->weight, (int64_t[]){9, j}), 0.0);
    EM_SCOPE {
        em_tensor *ids = em_from_data((int64_t[]){1, 9, 3, 1, 9, 0}, EM_SHAPE(2, 3), EM_I64);
        em_tensor *y = em_nn_embedding_forward(e, ids);
        ck_assert_int_eq(y->ndim, 3);
        ck_assert_int_eq(y->shape[2], 4);
        for (int j = 0; j < 4; j++) {
            ck_assert_double_eq(em_get(y, (int64_t[]){0, 2, j}), em_get(e->weight, (int64_t[]){3, j}));
            ck_assert_double_eq(em_get(y, (int64_t[]){1, 1, j}), 0.0);
        }
        em_backward(em_sum(em_mul(y, em_full(EM_SHAPE(4), 2.0, EM_F32, EM_CPU)), 0, NULL, false));
        em_tensor *g = em_grad(e->weight);
        ck_assert_double_eq(em_get(g, (int64_t[]){1, 0}), 4.0);   /* id 1 twice, times 2 */
        ck_assert_double_eq(em_get(g, (int64_t[]){9, 0}), 0.0);   /* padding: no gradient */
        ck_assert_double_eq(em_get(g, (int64_t[]){5, 0}), 0.0);
    }
    em_module_free(&e->base);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(embedding_init_and_frozen)
{
    em_set_seed(1);
    em_nn_embedding *e = em_nn_embedding_new(200, 100, NULL);
    EM_SCOPE {
        double m = em_item(em_mean(e->weight, 0, NULL, false)), v = em_item(em_var(e->weight, 0, NULL, 1, false));
        ck_assert_msg(fabs(m) < 0.02 && fabs(v - 1.0) < 0.03, "N(0,1) init: mean %g var %g", m, v);
    }
    ck_assert_int_eq(e->padding_idx, -1);
    em_module_free(&e->base);
    em_nn_embedding *f = em_nn_embedding_new(4, 2, &(em_nn_embedding_opts){.frozen = true});
    ck_assert_int_eq(em_module_num_parameters(&f->base, false), 0);
    ck_assert_ptr_eq(em_module_get(&f->base, "weight"), f->weight);   /* a persistent buffer: still saved */
    ck_assert(!em_requires_grad(f->weight));
    em_module_free(&f->base);
}
END_TEST

/* ---- LayerNorm ------------------------------------------------------------------------------ */

START_TEST(layer_norm_matches_reference)
{
    em_nn_layer_norm *ln = em_nn_layer_norm_new(6, NULL);
    ck_assert_double_eq(ln->eps, 1e-5);
    EM_NO_GRAD {
        for (int i = 0; i < 6; i++) {
            em_set(ln->weight, (int64_t[]){i}, 1.0 + 0.1 * i);
            em_set(ln->bias, (int64_t[]){i}, -0.05 * i);
        }
    }
    EM_SCOPE {
        double xr[18], ref[18];
        em_tensor *x = tu_rand_tensor(EM_SHAPE(3, 6), EM_F32, -2, 2, 4, xr);
        for (int r = 0; r < 3; r++) {
            double mu = 0, var = 0;
            for (int i = 0; i < 6; i++) mu += xr[r * 6 + i] / 6;
            for (int i = 0; i < 6; i++) var += (xr[r * 6 + i] - mu) * (xr[r * 6 + i] - mu) / 6;
            for (int i = 0; i < 6; i++) ref[r * 6 + i] = (xr[r * 6 + i] - mu) / sqrt(var + 1e-5) * (1.0 + 0.1 * i) - 0.05 * i;
        }
        tu_assert_values_close(em_nn_layer_norm_forward(ln, x), ref, 18, 1e-5, 1e-5);
    }
    em_module_free(&ln->base);
    em_nn_layer_norm *na = em_nn_layer_norm_new(4, &(em_nn_layer_norm_opts){.eps = 1e-12, .no_affine = true});
    ck_assert_int_eq(em_module_num_parameters(&na->base, false), 0);
    ck_assert_double_eq(na->eps, 1e-12);
    em_module_free(&na->base);
}
END_TEST

/* ---- Dropout --------------------------------------------------------------------------------- */

START_TEST(dropout_train_eval_and_replay)
{
    int64_t base = tu_live_bytes();
    em_nn_dropout *d = em_nn_dropout_new(0.25);
    EM_SCOPE {
        em_tensor *x = em_full(EM_SHAPE(100, 100), 2.0, EM_F32, EM_CPU);
        em_set_seed(42);
        em_tensor *y = em_nn_dropout_forward(d, x);
        double *v = vals(y);
        int zeros = 0;
        for (int i = 0; i < 10000; i++) {
            ck_assert(v[i] == 0.0 || fabs(v[i] - 2.0 / 0.75) < 1e-6);
            zeros += v[i] == 0.0;
        }
        ck_assert_msg(abs(zeros - 2500) < 200, "dropped %d of 10000 with p 0.25", zeros);
        /* the next call draws a new mask; reseeding replays the first */
        double *v2 = vals(em_nn_dropout_forward(d, x));
        ck_assert(memcmp(v, v2, sizeof(double) * 10000) != 0);
        em_set_seed(42);
        double *v3 = vals(em_nn_dropout_forward(d, x));
        ck_assert(memcmp(v, v3, sizeof(double) * 10000) == 0);
        free(v), free(v2), free(v3);
        /* eval: the identity, same values */
        em_module_train(&d->base, false);
        em_tensor *ye = em_nn_dropout_forward(d, x);
        ck_assert_double_eq(em_item(em_min_all(ye)), 2.0);
        ck_assert_double_eq(em_item(em_max_all(ye)), 2.0);
    }
    em_module_free(&d->base);
    em_nn_dropout *one = em_nn_dropout_new(1.0);
    EM_SCOPE { ck_assert_double_eq(em_item(em_max_all(em_abs(em_nn_dropout_forward(one, em_ones(EM_SHAPE(8), EM_F32, EM_CPU))))), 0.0); }
    em_module_free(&one->base);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(activations)
{
    em_nn_activation *r = em_nn_relu_new(), *g = em_nn_gelu_new(false), *gt = em_nn_gelu_new(true),
                     *s = em_nn_activation_new(EM_ACT_SILU);
    ck_assert_str_eq(r->base.type, "ReLU");
    EM_SCOPE {
        double xs[5] = {-2, -0.5, 0, 0.7, 3};
        em_tensor *x = em_from_data((float[]){-2, -0.5f, 0, 0.7f, 3}, EM_SHAPE(5), EM_F32);
        double *yr = vals(em_nn_activation_forward(r, x)), *yg = vals(em_nn_activation_forward(g, x)),
               *yt = vals(em_nn_activation_forward(gt, x)), *ys = vals(em_nn_activation_forward(s, x));
        for (int i = 0; i < 5; i++) {
            double v = (float)xs[i];
            ck_assert_double_eq_tol(yr[i], v > 0 ? v : 0, 1e-7);
            ck_assert_double_eq_tol(yg[i], 0.5 * v * (1 + erf(v / sqrt(2))), 1e-6);
            ck_assert_double_eq_tol(yt[i], 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-6);
            ck_assert_double_eq_tol(ys[i], v / (1 + exp(-v)), 1e-6);
        }
        free(yr), free(yg), free(yt), free(ys);
    }
    em_module_free(&r->base), em_module_free(&g->base), em_module_free(&gt->base), em_module_free(&s->base);
}
END_TEST

/* ---- attention ----------------------------------------------------------------------------------- */

/* out[b,s,:] = out_lin(concat_h softmax_k(q_h k_h / sqrt(Dh), masked) v_h), in f64. */
static void mhsa_ref(em_nn_mhsa *a, const double *x, const int64_t *mask, int B, int S, double *out)
{
    int D = (int)a->dim, H = (int)a->n_heads, Dh = D / H;
    double *W[4], *bias[4];
    em_nn_linear *lins[4] = {a->q_lin, a->k_lin, a->v_lin, a->out_lin};
    for (int i = 0; i < 4; i++) W[i] = vals(lins[i]->weight), bias[i] = vals(lins[i]->bias);
    double *q = calloc((size_t)(B * S * D), sizeof *q), *k = calloc((size_t)(B * S * D), sizeof *k),
           *v = calloc((size_t)(B * S * D), sizeof *v), *ctx = calloc((size_t)(B * S * D), sizeof *ctx);
    double *proj[3] = {q, k, v};
    for (int p = 0; p < 3; p++)
        for (int r = 0; r < B * S; r++)
            for (int o = 0; o < D; o++) {
                double acc = bias[p][o];
                for (int i = 0; i < D; i++) acc += x[r * D + i] * W[p][o * D + i];
                proj[p][r * D + o] = acc;
            }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < S; i++) {
                double sc[64], mx = -INFINITY, z = 0;
                for (int j = 0; j < S; j++) {
                    double acc = 0;
                    for (int d = 0; d < Dh; d++) acc += q[(b * S + i) * D + h * Dh + d] * k[(b * S + j) * D + h * Dh + d];
                    sc[j] = mask && !mask[b * S + j] ? -INFINITY : acc / sqrt(Dh);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < S; j++) z += sc[j] = exp(sc[j] - mx);
                for (int d = 0; d < Dh; d++) {
                    double acc = 0;
                    for (int j = 0; j < S; j++) acc += sc[j] / z * v[(b * S + j) * D + h * Dh + d];
                    ctx[(b * S + i) * D + h * Dh + d] = acc;
                }
            }
    for (int r = 0; r < B * S; r++)
        for (int o = 0; o < D; o++) {
            double acc = bias[3][o];
            for (int i = 0; i < D; i++) acc += ctx[r * D + i] * W[3][o * D + i];
            out[r * D + o] = acc;
        }
    for (int i = 0; i < 4; i++) free(W[i]), free(bias[i]);
    free(q), free(k), free(v), free(ctx);
}

START_TEST(mhsa_matches_reference_with_padding_mask)
{
    int64_t base = tu_live_bytes();
    em_set_seed(2);
    em_nn_mhsa *a = em_nn_mhsa_new(8, 2, NULL);
    ck_assert_double_eq(a->dropout->p, 0.1);
    em_module_train(&a->base, false);
    em_named_tensors ps = em_module_named_parameters(&a->base);
    const char *names[] = {"q_lin.weight", "q_lin.bias", "k_lin.weight", "k_lin.bias", "v_lin.weight", "v_lin.bias",
                           "out_lin.weight", "out_lin.bias"};
    ck_assert_int_eq(ps.n, 8);
    for (int i = 0; i < 8; i++) ck_assert_str_eq(ps.items[i].name, names[i]);
    em_named_tensors_free(&ps);
    EM_SCOPE {
        double xr[2 * 5 * 8], ref[2 * 5 * 8];
        int64_t mk[10] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
        em_tensor *x = tu_rand_tensor(EM_SHAPE(2, 5, 8), EM_F32, -1, 1, 8, xr);
        em_tensor *mask = em_from_data(mk, EM_SHAPE(2, 5), EM_I64);
        mhsa_ref(a, xr, mk, 2, 5, ref);
        tu_assert_values_close(em_nn_mhsa_forward(a, x, mask), ref, 80, 1e-5, 1e-5);
        /* a bool mask does the same; no mask attends everywhere */
        tu_assert_values_close(em_nn_mhsa_forward(a, x, em_ne(mask, em_scalar(0, EM_I64, EM_CPU))), ref, 80, 1e-5, 1e-5);
        mhsa_ref(a, xr, NULL, 2, 5, ref);
        tu_assert_values_close(em_nn_mhsa_forward(a, x, NULL), ref, 80, 1e-5, 1e-5);
    }
    em_module_free(&a->base);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(transformer_block_names_shapes_and_dropout)
{
    em_nn_transformer_block *b = em_nn_transformer_block_new(8, 2, 16, NULL);
    em_named_tensors ps = em_module_named_parameters(&b->base);
    const char *names[] = {"attention.q_lin.weight", "attention.q_lin.bias", "attention.k_lin.weight",
                           "attention.k_lin.bias", "attention.v_lin.weight", "attention.v_lin.bias",
                           "attention.out_lin.weight", "attention.out_lin.bias", "sa_layer_norm.weight",
                           "sa_layer_norm.bias", "ffn.lin1.weight", "ffn.lin1.bias", "ffn.lin2.weight", "ffn.lin2.bias",
                           "output_layer_norm.weight", "output_layer_norm.bias"};
    ck_assert_int_eq(ps.n, 16);
    for (int i = 0; i < 16; i++) ck_assert_str_eq(ps.items[i].name, names[i]);
    em_named_tensors_free(&ps);
    ck_assert_double_eq(b->sa_layer_norm->eps, 1e-12);
    EM_SCOPE {
        em_tensor *x = tu_rand_tensor(EM_SHAPE(2, 3, 8), EM_F32, -1, 1, 1, NULL);
        em_tensor *mask = em_from_data((int64_t[]){1, 1, 0, 1, 1, 1}, EM_SHAPE(2, 3), EM_I64);
        em_module_train(&b->base, false);
        em_tensor *y1 = em_nn_transformer_block_forward(b, x, mask), *y2 = em_nn_transformer_block_forward(b, x, mask);
        ck_assert_int_eq(y1->shape[2], 8);
        ck_assert_double_eq(em_item(em_max_all(em_abs(em_sub(y1, y2)))), 0.0);   /* eval: deterministic */
        em_module_train(&b->base, true);
        em_tensor *y3 = em_nn_transformer_block_forward(b, x, mask);
        ck_assert(em_item(em_max_all(em_abs(em_sub(y1, y3)))) > 0.0);             /* train: dropout on */
        /* the output is normalized per position (weight 1, bias 0) */
        ck_assert_double_eq_tol(em_item(em_mean(em_select(em_select(y1, 0, 1), 0, 0), 0, NULL, false)), 0.0, 1e-5);
    }
    em_nn_ffn *f = em_nn_ffn_new(4, 8, &(em_nn_ffn_opts){.dropout = EM_ZERO, .activation = EM_ACT_RELU});
    ck_assert_double_eq(f->dropout->p, 0.0);
    em_module_free(&f->base);
    em_module_free(&b->base);
}
END_TEST

/* ---- losses ---------------------------------------------------------------------------------------- */

START_TEST(cross_entropy_ignore_index_and_label_smoothing)
{
    int64_t base = tu_live_bytes();
    EM_SCOPE {
        double lr[4 * 3];
        em_tensor *logits = em_requires_grad_(tu_rand_tensor(EM_SHAPE(4, 3), EM_F32, -2, 2, 3, lr), true);
        int64_t tg[4] = {2, -100, 0, 1};
        em_tensor *t = em_from_data(tg, EM_SHAPE(4), EM_I64);
        double nll = 0, smooth = 0;
        int cnt = 0;
        for (int r = 0; r < 4; r++) {
            if (tg[r] == -100) continue;
            double mx = fmax(lr[r * 3], fmax(lr[r * 3 + 1], lr[r * 3 + 2])), z = 0;
            for (int c = 0; c < 3; c++) z += exp(lr[r * 3 + c] - mx);
            double lse = mx + log(z);
            nll += lse - lr[r * 3 + tg[r]];
            for (int c = 0; c < 3; c++) smooth += (lse - lr[r * 3 + c]) / 3;
            cnt++;
        }
        ck_assert_double_eq_tol(em_item(em_cross_entropy_loss(logits, t, NULL)), nll / cnt, 1e-6);
        em_tensor *ls = em_cross_entropy_loss(logits, t, &(em_cross_entropy_opts){.label_smoothing = 0.1});
        ck_assert_double_eq_tol(em_item(ls), (0.9 * nll + 0.1 * smooth) / cnt, 1e-6);
        ck_assert_double_eq_tol(em_item(em_cross_entropy_loss(logits, t, &(em_cross_entropy_opts){.reduction = EM_REDUCE_SUM})),
                                nll, 1e-5);
        /* ignoring class 0 instead: row 2 drops out, row 1's -100 is then a bad target... use i32 targets */
        em_tensor *t32 = em_from_data((int32_t[]){2, 1, 0, 1}, EM_SHAPE(4), EM_I32);
        em_tensor *l0 = em_cross_entropy_loss(logits, t32, &(em_cross_entropy_opts){.ignore_index = EM_IGNORE_CLASS_0});
        ck_assert(isfinite(em_item(l0)));
        em_backward(ls);
        /* the ignored row gets no gradient */
        for (int c = 0; c < 3; c++) ck_assert_double_eq(em_get(em_grad(logits), (int64_t[]){1, c}), 0.0);
    }
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(mse_and_bce_with_logits)
{
    EM_SCOPE {
        em_tensor *x = em_requires_grad_(em_from_data((float[]){-100, -1, 0, 0.5f, 100, 3}, EM_SHAPE(2, 3), EM_F32), true);
        em_tensor *y = em_from_data((float[]){0, 1, 1, 0, 1, 0.25f}, EM_SHAPE(2, 3), EM_F32);
        double xs[6] = {-100, -1, 0, 0.5, 100, 3}, ys[6] = {0, 1, 1, 0, 1, 0.25}, bce = 0, mse = 0;
        for (int i = 0; i < 6; i++) {
            bce += fmax(xs[i], 0) - xs[i] * ys[i] + log1p(exp(-fabs(xs[i])));
            mse += (xs[i] - ys[i]) * (xs[i] - ys[i]);
        }
        em_tensor *lb = em_bce_with_logits_loss(x, y, EM_REDUCE_MEAN);
        ck_assert_double_eq_tol(em_item(lb), bce / 6, 1e-5);
        ck_assert_double_eq_tol(em_item(em_mse_loss(x, y, EM_REDUCE_MEAN)), mse / 6, 1e-2);
        ck_assert_int_eq(em_bce_with_logits_loss(x, y, EM_REDUCE_NONE)->ndim, 2);
        em_backward(lb);
        /* d/dx = (sigmoid(x) - y) / N, exact at x = 0 too */
        for (int i = 0; i < 6; i++) {
            double want = (1 / (1 + exp(-xs[i])) - ys[i]) / 6;
            ck_assert_double_eq_tol(em_get(em_grad(x), (int64_t[]){i / 3, i % 3}), want, 1e-6);
        }
    }
}
END_TEST

/* ---- DistilBERT init and the seqcls head ------------------------------------------------------------ */

static const em_distilbert_config small = {.vocab_size = 300, .max_position_embeddings = 16, .n_layers = 2,
                                           .n_heads = 2, .dim = 32, .hidden_dim = 64, .num_labels = 3};

START_TEST(distilbert_config_defaults_are_hf_s)
{
    em_distilbert_config c = em_distilbert_config_resolve(NULL);
    ck_assert_int_eq(c.vocab_size, 30522);
    ck_assert_int_eq(c.max_position_embeddings, 512);
    ck_assert_int_eq(c.n_layers, 6);
    ck_assert_int_eq(c.n_heads, 12);
    ck_assert_int_eq(c.dim, 768);
    ck_assert_int_eq(c.hidden_dim, 3072);
    ck_assert_double_eq(c.dropout, 0.1);
    ck_assert_double_eq(c.attention_dropout, 0.1);
    ck_assert_double_eq(c.seq_classif_dropout, 0.2);
    ck_assert_double_eq(c.initializer_range, 0.02);
    ck_assert_int_eq(c.activation, EM_ACT_GELU);
    ck_assert_int_eq(c.num_labels, 2);
    ck_assert_int_eq(c.pad_token_id, 0);
    ck_assert(!c.sinusoidal_pos_embds);
    em_distilbert_config z = em_distilbert_config_resolve(&(em_distilbert_config){.dropout = EM_ZERO});
    ck_assert_double_eq(z.dropout, 0.0);
    em_distilbert_config zz = em_distilbert_config_resolve(&z);   /* resolving twice keeps the 0 */
    ck_assert_double_eq(zz.dropout, 0.0);
    /* HF's count for distilbert-base with 2 labels, from the formula (no 67M-parameter build here) */
    int64_t D = c.dim, F = c.hidden_dim, emb = c.vocab_size * D + c.max_position_embeddings * D + 2 * D;
    int64_t block = 4 * (D * D + D) + 2 * D + (D * F + F) + (F * D + D) + 2 * D;
    ck_assert_int_eq(emb + 6 * block + (D * D + D) + (D * 2 + 2), 66955010);
}
END_TEST

START_TEST(distilbert_init_statistics)
{
    em_set_seed(123);
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&small);
    int64_t D = 32, F = 64, block = 4 * (D * D + D) + 2 * D + (D * F + F) + (F * D + D) + 2 * D;
    ck_assert_int_eq(em_module_num_parameters(&m->base, false), 300 * D + 16 * D + 2 * D + 2 * block + D * D + D + 3 * D + 3);
    ck_assert_ptr_nonnull(em_module_flat_params(&m->base, EM_F32));   /* built flat */
    em_named_tensors ps = em_module_named_parameters(&m->base);
    EM_SCOPE {
        for (int i = 0; i < ps.n; i++) {
            const char *n = ps.items[i].name;
            em_tensor *t = ps.items[i].tensor;
            bool ln = strstr(n, "LayerNorm") || strstr(n, "layer_norm");
            double mean = em_item(em_mean(t, 0, NULL, false)), mx = em_item(em_max_all(em_abs(t)));
            if (ln && strstr(n, "weight")) ck_assert_msg(mean == 1.0 && em_item(em_min_all(t)) == 1.0, "%s", n);
            else if (strstr(n, "bias")) ck_assert_msg(mx == 0.0, "%s not zero", n);
            else if (em_numel(t) >= 1024) {
                double sd = sqrt(em_item(em_var(t, 0, NULL, 1, false)));
                ck_assert_msg(fabs(mean) < 0.003 && fabs(sd - 0.02) < 0.002, "%s: mean %g std %g", n, mean, sd);
            }
        }
        /* the padding row (pad_token_id 0) is zero */
        em_tensor *w = m->distilbert->embeddings->word_embeddings->weight;
        ck_assert_double_eq(em_item(em_max_all(em_abs(em_select(w, 0, 0)))), 0.0);
        ck_assert(em_item(em_max_all(em_abs(em_select(w, 0, 1)))) > 0.0);
    }
    em_named_tensors_free(&ps);
    ck_assert_double_eq(m->dropout->p, 0.2);
    ck_assert_double_eq(m->distilbert->layer[1]->attention->dropout->p, 0.1);
    ck_assert_double_eq(m->distilbert->embeddings->LayerNorm->eps, 1e-12);
    em_module_free(&m->base);
}
END_TEST

START_TEST(sinusoidal_positions_are_fixed)
{
    em_distilbert_config c = small;
    c.sinusoidal_pos_embds = true;
    em_distilbert_model *m = em_distilbert_model_new(&c);
    em_tensor *w = m->embeddings->position_embeddings->weight;
    ck_assert(!em_requires_grad(w));
    ck_assert_ptr_eq(em_module_get(&m->base, "embeddings.position_embeddings.weight"), w);   /* saved in checkpoints */
    em_distilbert_model *ref = em_distilbert_model_new(&small);
    ck_assert_int_eq(em_module_num_parameters(&ref->base, false) - em_module_num_parameters(&m->base, false), 16 * 32);
    /* create_sinusoidal_embeddings: even columns sin(pos / 10000^(j/dim)), odd columns cos of the same angle */
    for (int pos = 0; pos < 16; pos += 5)
        for (int j = 0; j < 32; j += 7) {
            double a = pos / pow(10000.0, 2.0 * (j / 2) / 32.0);
            ck_assert_double_eq_tol(em_get(w, (int64_t[]){pos, j}), j % 2 ? cos(a) : sin(a), 1e-6);
        }
    em_module_free(&m->base);
    em_module_free(&ref->base);
}
END_TEST

START_TEST(seqcls_loss_follows_num_labels_and_label_dtype)
{
    int64_t base = tu_live_bytes();
    em_set_seed(7);
    EM_SCOPE {
        em_tensor *ids = em_from_data((int64_t[]){101, 5, 6, 0, 101, 7, 8, 9}, EM_SHAPE(2, 4), EM_I64);
        em_tensor *mask = em_from_data((int64_t[]){1, 1, 1, 0, 1, 1, 1, 1}, EM_SHAPE(2, 4), EM_I64);
        /* single label: i64 labels, cross-entropy */
        em_distilbert_seqcls *m = em_distilbert_seqcls_new(&small);
        em_module_train(&m->base, false);
        em_seqcls_output o = em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){ids, mask, NULL,
                                                          em_from_data((int64_t[]){2, 0}, EM_SHAPE(2), EM_I64)});
        ck_assert_int_eq(m->config.problem_type, EM_PROBLEM_SINGLE_LABEL);
        ck_assert_double_eq_tol(em_item(o.loss),
                                em_item(em_cross_entropy_loss(o.logits, em_from_data((int64_t[]){2, 0}, EM_SHAPE(2), EM_I64), NULL)), 1e-7);
        /* no labels: no loss */
        ck_assert_ptr_null(em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){ids, mask, NULL, NULL}).loss);
        em_module_free(&m->base);
        /* float labels with several labels: multi-label BCE */
        m = em_distilbert_seqcls_new(&small);
        em_tensor *yl = em_from_data((float[]){1, 0, 1, 0, 0, 1}, EM_SHAPE(2, 3), EM_F32);
        o = em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){ids, mask, NULL, yl});
        ck_assert_int_eq(m->config.problem_type, EM_PROBLEM_MULTI_LABEL);
        ck_assert_double_eq_tol(em_item(o.loss), em_item(em_bce_with_logits_loss(o.logits, yl, EM_REDUCE_MEAN)), 1e-7);
        em_module_free(&m->base);
        /* one label: regression, MSE on the squeezed logits */
        em_distilbert_config one = small;
        one.num_labels = 1;
        m = em_distilbert_seqcls_new(&one);
        em_tensor *yr = em_from_data((float[]){0.5f, -1}, EM_SHAPE(2), EM_F32);
        o = em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){ids, mask, NULL, yr});
        ck_assert_int_eq(m->config.problem_type, EM_PROBLEM_REGRESSION);
        double l0 = em_get(o.logits, (int64_t[]){0, 0}), l1 = em_get(o.logits, (int64_t[]){1, 0});
        ck_assert_double_eq_tol(em_item(o.loss), ((l0 - 0.5) * (l0 - 0.5) + (l1 + 1) * (l1 + 1)) / 2, 1e-6);
        em_backward(o.loss);
        ck_assert_ptr_nonnull(em_grad(m->classifier->weight));
        em_module_free(&m->base);
    }
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(padding_positions_do_not_change_the_logits)
{
    em_set_seed(8);
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&small);
    em_module_train(&m->base, false);
    EM_SCOPE {
        em_tensor *mask = em_from_data((int64_t[]){1, 1, 1, 0, 0}, EM_SHAPE(1, 5), EM_I64);
        em_tensor *a = em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){
            em_from_data((int64_t[]){101, 5, 6, 0, 0}, EM_SHAPE(1, 5), EM_I64), mask, NULL, NULL}).logits;
        em_tensor *b = em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){
            em_from_data((int64_t[]){101, 5, 6, 77, 12}, EM_SHAPE(1, 5), EM_I64), mask, NULL, NULL}).logits;
        ck_assert_double_eq_tol(em_item(em_max_all(em_abs(em_sub(a, b)))), 0.0, 1e-6);
    }
    em_module_free(&m->base);
}
END_TEST

START_TEST(bert_layout_names)
{
    em_bert_seqcls *m = em_bert_seqcls_new(&(em_bert_config){.vocab_size = 50, .hidden_size = 16, .num_hidden_layers = 1,
                                                             .num_attention_heads = 2, .intermediate_size = 32,
                                                             .max_position_embeddings = 8});
    const char *names[] = {"bert.embeddings.word_embeddings.weight", "bert.embeddings.token_type_embeddings.weight",
                           "bert.encoder.layer.0.attention.self.key.bias",
                           "bert.encoder.layer.0.attention.output.LayerNorm.weight",
                           "bert.encoder.layer.0.intermediate.dense.weight", "bert.encoder.layer.0.output.dense.bias",
                           "bert.pooler.dense.weight", "classifier.bias"};
    for (int i = 0; i < 8; i++) ck_assert_msg(em_module_get(&m->base, names[i]) != NULL, "no %s", names[i]);
    ck_assert_double_eq(m->dropout->p, 0.1);   /* classifier_dropout None: hidden_dropout_prob */
    em_module_train(&m->base, false);
    EM_SCOPE {
        em_tensor *ids = em_from_data((int64_t[]){1, 2, 3, 4, 5, 0}, EM_SHAPE(2, 3), EM_I64);
        em_seqcls_output o = em_seqcls_forward(&m->base, &(em_seqcls_inputs){.input_ids = ids});
        ck_assert_int_eq(o.logits->shape[0], 2);
        ck_assert_int_eq(o.logits->shape[1], 2);
    }
    em_module_free(&m->base);
}
END_TEST

/* ---- misuse ----------------------------------------------------------------------------------------- */

START_TEST(misuse_linear_wrong_input)
{
    tu_expect_misuse("em_nn_linear_forward: input [2,4] does not end in in_features 3");
    em_nn_linear *l = em_nn_linear_new(3, 2, NULL);
    em_nn_linear_forward(l, em_zeros(EM_SHAPE(2, 4), EM_F32, EM_CPU));
}
END_TEST

START_TEST(misuse_heads_do_not_divide_dim)
{
    tu_expect_misuse("n_heads 3 must divide dim 8");
    em_nn_mhsa_new(8, 3, NULL);
}
END_TEST

START_TEST(misuse_dropout_p)
{
    tu_expect_misuse("em_nn_dropout_new: p must be in [0, 1], got 1.5");
    em_nn_dropout_new(1.5);
}
END_TEST

START_TEST(misuse_embedding_id_out_of_range)
{
    tu_expect_misuse("out of range");
    em_nn_embedding *e = em_nn_embedding_new(5, 2, NULL);
    em_nn_embedding_forward(e, em_from_data((int64_t[]){1, 5}, EM_SHAPE(2), EM_I64));
}
END_TEST

START_TEST(misuse_distilbert_config)
{
    tu_expect_misuse("em_distilbert_model_new: n_heads 5 must divide dim 32 evenly");
    em_distilbert_config c = small;
    c.n_heads = 5;
    em_distilbert_seqcls_new(&c);
}
END_TEST

START_TEST(misuse_sequence_too_long)
{
    tu_expect_misuse("sequence length 20 exceeds max_position_embeddings 16");
    em_distilbert_model *m = em_distilbert_model_new(&small);
    em_distilbert_model_forward(m, em_zeros(EM_SHAPE(1, 20), EM_I64, EM_CPU), NULL);
}
END_TEST

START_TEST(misuse_mask_shape)
{
    tu_expect_misuse("attention_mask [2,4] does not match the input's [batch, seq] [2,3]");
    em_distilbert_model *m = em_distilbert_model_new(&small);
    em_distilbert_model_forward(m, em_zeros(EM_SHAPE(2, 3), EM_I64, EM_CPU), em_ones(EM_SHAPE(2, 4), EM_I64, EM_CPU));
}
END_TEST

START_TEST(misuse_cross_entropy_target)
{
    tu_expect_misuse("em_cross_entropy_loss: target must be i64/i32 [N] matching logits [4,3]");
    em_cross_entropy_loss(em_zeros(EM_SHAPE(4, 3), EM_F32, EM_CPU), em_zeros(EM_SHAPE(3), EM_I64, EM_CPU), NULL);
}
END_TEST

START_TEST(misuse_single_label_with_wrong_count)
{
    tu_expect_misuse("single-label classification needs i64/i32 labels with one per row (2)");
    em_distilbert_seqcls *m = em_distilbert_seqcls_new(&small);
    em_tensor *ids = em_zeros(EM_SHAPE(2, 3), EM_I64, EM_CPU);
    em_distilbert_seqcls_forward(m, &(em_seqcls_inputs){.input_ids = ids, .labels = em_zeros(EM_SHAPE(3), EM_I64, EM_CPU)});
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nn");
    tu_add_tests(tu_case(s, "layers", 0), linear_forward_matches_reference_on_3d_input,
                 linear_without_bias_and_its_names, linear_init_is_torch_s_uniform, linear_gradcheck_in_f64,
                 embedding_rows_padding_and_its_gradient, embedding_init_and_frozen,
                 layer_norm_matches_reference, dropout_train_eval_and_replay, activations,
                 mhsa_matches_reference_with_padding_mask, transformer_block_names_shapes_and_dropout);
    tu_add_tests(tu_case(s, "losses", 0), cross_entropy_ignore_index_and_label_smoothing,
                 mse_and_bce_with_logits);
    tu_add_tests(tu_case(s, "models", 0), distilbert_config_defaults_are_hf_s, distilbert_init_statistics,
                 sinusoidal_positions_are_fixed, seqcls_loss_follows_num_labels_and_label_dtype,
                 padding_positions_do_not_change_the_logits, bert_layout_names);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_linear_wrong_input, misuse_heads_do_not_divide_dim,
                        misuse_dropout_p, misuse_embedding_id_out_of_range, misuse_distilbert_config,
                        misuse_sequence_too_long, misuse_mask_shape, misuse_cross_entropy_target,
                        misuse_single_label_with_wrong_count);
    return tu_run_suite(s);
}
