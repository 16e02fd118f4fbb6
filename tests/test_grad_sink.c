/* Gradient sinks (autograd/engine.c em__grad_sink): a rule adding its gradient
 * into a leaf's .grad itself. Embedding's rule does, so its [V,D] gradient is
 * never made dense. Checked here:
 *   - the rows its ids picked get exactly the bits of .grad + the dense
 *     gradient (f32, f64, bf16), across two accumulating backwards; rows no id
 *     picked keep their bits, even a -0.0 (the dense add would make it +0.0:
 *     that is how the tests see the sink was taken);
 *   - the sink is declined, and the result still right, when the leaf has a
 *     tensor hook (which must still run), a second producer, or no .grad yet;
 *   - post-accumulate hooks fire once, after the gradient is in .grad.
 */
#include "check_util.h"
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <string.h>

enum { V = 40, D = 24, N = 30 };

static const int64_t ids_v[N] = {3, 7, 3, 0, 39, 7, 7, 12, 3, 5, 5, 21, 22, 23, 3, 0, 0, 39, 38, 12,
                                 1, 2, 3, 4, 5, 6, 7, 8, 9, 7};
/* rows no id above picks: 10, 11, 13 .. 20, 24 .. 37 */
enum { UNTOUCHED = 30, NEG_ZERO_AT = UNTOUCHED * D + 5 };

static em_tensor *ids_tensor(void)
{
    em_tensor *t = em_empty(EM_SHAPE(N), EM_I64, EM_CPU);
    memcpy(em_data_ptr(t), ids_v, sizeof ids_v);
    return t;
}

/* a leaf [V,D] of dtype dt whose .grad is set to random values, -0.0 at NEG_ZERO_AT */
static em_tensor *weight_with_grad(em_dtype dt)
{
    em_tensor *w = em_requires_grad_(em_to_dtype(em_randn(EM_SHAPE(V, D), EM_F32, EM_CPU), dt), true);
    em_tensor *g = em_contiguous(em_to_dtype(em_randn(EM_SHAPE(V, D), EM_F32, EM_CPU), dt));
    em__store((char *)em_data_ptr(g) + (size_t)NEG_ZERO_AT * em_dtype_size(dt), dt, -0.0);
    em_set_grad(w, g);
    return w;
}

static size_t row_bytes(em_dtype dt) { return (size_t)D * em_dtype_size(dt); }

START_TEST(sink_matches_dense_bits)
{
    static const em_dtype dts[] = {EM_F32, EM_F64, EM_BF16};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) EM_SCOPE {
        em_dtype dt = dts[d];
        em_tensor *ids = ids_tensor();
        em_tensor *w = weight_with_grad(dt);
        em_tensor *expect = em_clone(em_grad(w));
        for (int step = 0; step < 2; step++) {
            for (int pad = -1; pad <= 7; pad += 8) {   /* without and with padding_idx 7 */
                em_tensor *r = em_to_dtype(em_randn(EM_SHAPE(N, D), EM_F32, EM_CPU), dt);
                em_tensor *e = pad < 0 ? em_embedding(w, ids) : em__embedding_ex(w, ids, pad);
                em_backward(em_sum(em_mul(e, r), 0, NULL, false));   /* d e = r exactly */
                expect = em_add(expect, em_embedding_backward(r, ids, V, pad));
            }
        }
        const char *got = em_data_ptr(em_grad(w)), *want = em_data_ptr(expect);
        for (int v = 0; v < V; v++) {
            bool picked = false;
            for (int i = 0; i < N; i++) picked |= ids_v[i] == v;
            size_t off = (size_t)v * row_bytes(dt);
            if (picked)
                ck_assert_msg(!memcmp(got + off, want + off, row_bytes(dt)), "%s: row %d differs from the dense add",
                              em_dtype_name(dt), v);
        }
        /* untouched rows: their bits as set, -0.0 included (the dense add gives +0.0) */
        double z = em__load(got + (size_t)NEG_ZERO_AT * em_dtype_size(dt), dt);
        ck_assert_msg(z == 0 && signbit(z), "%s: the untouched -0.0 became %g: the sink was not taken",
                      em_dtype_name(dt), z);
    }
}
END_TEST

static int hook_calls;
static double hook_seen;

static em_tensor *double_it(em_tensor *g, void *user)
{
    (void)user;
    hook_calls++;
    return em_mul_scalar(g, 2.0);
}

static void post_hook(em_tensor *leaf, void *user)
{
    (void)user;
    hook_calls++;
    hook_seen = em_get(em_grad(leaf), (int64_t[]){3, 0});
}

/* Integer-valued data, so every path's sums are exact and comparable with ==. */
static em_tensor *int_leaf(void)
{
    em_tensor *w = em_requires_grad_(em_ones(EM_SHAPE(V, D), EM_F32, EM_CPU), true);
    em_set_grad(w, em_full(EM_SHAPE(V, D), 1.0, EM_F32, EM_CPU));
    return w;
}

/* dL/de = 1 everywhere, so row v gets (times picked) and row 3 gets 5 */
static void backward_ones(em_tensor *w, em_tensor *extra)
{
    em_tensor *l = em_sum(em_embedding(w, ids_tensor()), 0, NULL, false);
    if (extra) l = em_add(l, em_sum(extra, 0, NULL, false));
    em_backward(l);
}

START_TEST(sink_declined_when_it_would_change_the_result)
{
    EM_SCOPE {
        /* a tensor hook must see (and here double) the gradient */
        em_tensor *w = int_leaf();
        hook_calls = 0;
        em_register_hook(w, double_it, NULL);
        backward_ones(w, NULL);
        ck_assert_int_eq(hook_calls, 1);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 1.0 + 2 * 5);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){11, 0}), 1.0);

        /* a second producer: w also feeds a sum */
        w = int_leaf();
        backward_ones(w, w);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 1.0 + 5 + 1);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){11, 0}), 1.0 + 1);

        /* no .grad yet: the dense gradient becomes it */
        w = em_requires_grad_(em_ones(EM_SHAPE(V, D), EM_F32, EM_CPU), true);
        backward_ones(w, NULL);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 5.0);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){11, 0}), 0.0);
        /* ...and the next backward adds into it through the sink */
        backward_ones(w, NULL);
        ck_assert_double_eq(em_get(em_grad(w), (int64_t[]){3, 0}), 10.0);
    }
}
END_TEST

START_TEST(sink_fires_post_accumulate_hooks)
{
    EM_SCOPE {
        em_tensor *w = int_leaf();
        hook_calls = 0;
        hook_seen = -1;
        em_register_post_accumulate_grad_hook(w, post_hook, NULL);
        backward_ones(w, NULL);
        ck_assert_int_eq(hook_calls, 1);
        ck_assert_double_eq(hook_seen, 1.0 + 5);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grad_sink");
    tu_add_tests(tu_case(s, "grad_sink", 120), sink_matches_dense_bits, sink_declined_when_it_would_change_the_result,
                 sink_fires_post_accumulate_hooks);
    return tu_run_suite(s);
}
