/* ember tests — GELU and its backward on bf16 operands (tensor/cpu/k_gelu_bf16.c).
 *
 * Every one of the 65,536 bf16 inputs goes through em_gelu and em_gelu's
 * backward, and each result is checked against the f64 reference (libm's
 * erfc and exp), rounded to bf16 here by comparing distances to the two
 * neighbouring bf16 values. A result must be the correctly rounded value,
 * or its neighbour where the exact value lies within 3e-6 (relative) of the
 * boundary between them: the kernel's f32 value is that close before its
 * single rounding (below f32's normal range, 1.2e-38, either neighbour: f32
 * arithmetic has only absolute resolution there). Strided rows must give the
 * same bits as contiguous ones,
 * and row tails (lengths not a multiple of 16) too. Where the target lacks
 * AVX-512 the generic f32-staged loop runs, and the same checks hold.
 */
#include "check_util.h"
#include "tensor/op_grad.h"
#include "tensor/tensor_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define CHECK(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)

static double bf16_value(uint16_t h) { return em__bf16_to_f32(h); }

/* The bf16 neighbours lo <= v <= hi of a finite v (as bit patterns). */
static void neighbours(double v, uint16_t *lo, uint16_t *hi)
{
    uint16_t h = em__f32_to_bf16((float)v);   /* close to v; adjust by one step */
    double hv = bf16_value(h);
    if (hv == v) { *lo = *hi = h; return; }
    /* step in magnitude: for positive patterns larger bits mean larger value */
    uint16_t other = (hv > v) == !(h & 0x8000) ? (uint16_t)(h - 1) : (uint16_t)(h + 1);
    if ((h & 0x7fff) == 0) other = (uint16_t)((v > 0 ? 0x0001 : 0x8001));
    if (bf16_value(other) < hv) *lo = other, *hi = h;
    else *lo = h, *hi = other;
}

/* Checks that got is the bf16 rounding of exact, allowing the neighbour when
 * exact lies within rel of the midpoint. Returns true when it was the correctly rounded one. */
static bool check_rounding(const char *what, double x, double exact, uint16_t got, double rel)
{
    double g = bf16_value(got);
    if (isnan(exact)) {
        CHECK(isnan(g), "%s(%a): expected NaN, got %a", what, x, g);
        return true;
    }
    if (isinf(exact) || fabs(exact) > 3.3e38) {
        CHECK(g == exact || (isinf(g) && (g > 0) == (exact > 0)), "%s(%a): expected %a, got %a", what, x, exact, g);
        return true;
    }
    uint16_t lo, hi;
    neighbours(exact, &lo, &hi);
    double lv = bf16_value(lo), hv = bf16_value(hi), mid = 0.5 * (lv + hv);
    uint16_t want = lo == hi ? lo : fabs(exact - lv) < fabs(hv - exact) ? lo : fabs(exact - lv) > fabs(hv - exact) ? hi
                                                                         : (lo & 1) ? hi : lo;
    if (got == want || (g == 0 && bf16_value(want) == 0)) return true;
    /* Below f32's normal range (a gradient far in the tail, |x| > 13) the kernels'
     * f32 intermediates keep only an absolute resolution of 2^-149, not a relative
     * one: either neighbour is then a faithful result (the generic f32-staged loop,
     * which the valgrind build runs, lands on the other one near 2^-133). */
    if (fabs(exact) < FLT_MIN) {
        CHECK(got == lo || got == hi, "%s(%a): exact %.9g (below f32's normal range), got %.9g, not a neighbour", what,
              x, exact, g);
        return false;
    }
    CHECK((got == lo || got == hi) && fabs(exact - mid) <= rel * fabs(exact) + 1e-45,
          "%s(%a): exact %.9g, got %.9g (bits %04x), correctly rounded %.9g (bits %04x)", what, x, exact, g, got,
          bf16_value(want), want);
    return false;
}

static double gelu_ref(double x) { return 0.5 * x * erfc(-x / sqrt(2.0)); }
static double gelu_grad_ref(double x) { return 0.5 * erfc(-x / sqrt(2.0)) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }

/* All 65,536 patterns as one bf16 tensor [65536]. */
static em_tensor *all_bf16(void)
{
    int64_t n = 65536;
    em_tensor *t = em_empty(1, &n, EM_BF16, EM_CPU);
    uint16_t *p = em_data_ptr(t);
    for (int64_t i = 0; i < n; i++) p[i] = (uint16_t)i;
    return t;
}

START_TEST(test_gelu_all_inputs)
{
    EM_SCOPE {
        em_tensor *x = all_bf16();
        em_tensor *y = em_gelu(x);
        ck_assert_int_eq(y->dtype, EM_BF16);
        const uint16_t *yp = em_data_ptr(y);
        int wrong = 0, finite = 0;
        for (int i = 0; i < 65536; i++) {
            double xv = bf16_value((uint16_t)i);
            double exact = isinf(xv) && xv < 0 ? NAN : gelu_ref(xv);   /* -inf * 0 */
            finite += isfinite(xv);
            wrong += !check_rounding("gelu", xv, exact, yp[i], 3e-6);
        }
        /* at 1e-6 relative, about 2 * 1e-6 / 2^-8 of the results may round the other way */
        CHECK(wrong <= finite / 1000, "gelu: %d of %d results not correctly rounded", wrong, finite);
    }
}
END_TEST

START_TEST(test_gelu_backward_all_inputs)
{
    static const float dys[] = {1.0f, -0.3125f, 3.0e-5f, 1024.5f};
    EM_SCOPE {
        em_tensor *x = all_bf16();
        for (size_t d = 0; d < sizeof dys / sizeof *dys; d++) {
            em_tensor *dy = em_full(1, x->shape, dys[d], EM_BF16, EM_CPU);
            double dyv = bf16_value(((const uint16_t *)em_data_ptr(dy))[0]);
            em_tensor *dx = em__unary_backward(EM_OP_GELU, x, dy);
            ck_assert_int_eq(dx->dtype, EM_BF16);
            const uint16_t *gp = em_data_ptr(dx);
            int wrong = 0, finite = 0;
            for (int i = 0; i < 65536; i++) {
                double xv = bf16_value((uint16_t)i);
                /* as the f32 kernel: the x * pdf term is inf * 0 at +-inf */
                double exact = isinf(xv) ? NAN : dyv * gelu_grad_ref(xv);
                finite += isfinite(xv);
                wrong += !check_rounding("gelu_backward", xv, exact, gp[i], 3e-6);
            }
            CHECK(wrong <= finite / 1000, "gelu_backward (dy %g): %d of %d results not correctly rounded", dyv, wrong,
                  finite);
        }
    }
}
END_TEST

/* Same bits whatever the layout: a transposed (strided) view, a broadcast dy,
 * and rows whose length is not a multiple of 16. */
START_TEST(test_gelu_layouts_agree)
{
    EM_SCOPE {
        int64_t shape[2] = {37, 29};
        em_tensor *x = em_to_dtype(em_mul_scalar(em_randn(2, shape, EM_F32, EM_CPU), 3.0), EM_BF16);
        em_tensor *xt = em_contiguous(em_transpose(x, 0, 1));   /* [29, 37], packed */
        em_tensor *y = em_gelu(x);
        em_tensor *yt = em_gelu(em_transpose(xt, 0, 1));        /* strided rows */
        ck_assert_int_eq(memcmp(em_data_ptr(y), em_data_ptr(em_contiguous(yt)), 37 * 29 * 2), 0);

        em_tensor *dy = em_to_dtype(em_randn(2, shape, EM_F32, EM_CPU), EM_BF16);
        em_tensor *dyt = em_contiguous(em_transpose(dy, 0, 1));
        em_tensor *dx = em__unary_backward(EM_OP_GELU, x, dy);
        em_tensor *dxt = em__unary_backward(EM_OP_GELU, em_transpose(xt, 0, 1), em_transpose(dyt, 0, 1));
        ck_assert_int_eq(memcmp(em_data_ptr(dx), em_data_ptr(em_contiguous(dxt)), 37 * 29 * 2), 0);

        /* a broadcast dy (stride 0) against the same value stored in full */
        em_tensor *dy1 = em_full(0, NULL, -0.75, EM_BF16, EM_CPU);
        em_tensor *dxb = em__unary_backward(EM_OP_GELU, x, em_expand(dy1, 2, shape));
        em_tensor *dxf = em__unary_backward(EM_OP_GELU, x, em_full(2, shape, -0.75, EM_BF16, EM_CPU));
        ck_assert_int_eq(memcmp(em_data_ptr(em_contiguous(dxb)), em_data_ptr(dxf), 37 * 29 * 2), 0);

        /* element by element, each value alone (a row of one) */
        const uint16_t *xp = em_data_ptr(x), *yp = em_data_ptr(y);
        for (int i = 0; i < 37 * 29; i++) {
            int64_t one = 1;
            em_tensor *xi = em_empty(1, &one, EM_BF16, EM_CPU);
            memcpy(em_data_ptr(xi), xp + i, 2);
            CHECK(memcmp(em_data_ptr(em_gelu(xi)), yp + i, 2) == 0, "element %d differs alone", i);
        }
    }
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("gelu_bf16");
    tu_add_tests(tu_case(s, "gelu_bf16", 120), test_gelu_all_inputs, test_gelu_backward_all_inputs,
                 test_gelu_layouts_agree);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
