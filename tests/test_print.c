/* ember tests — printing (tensor/print.c).
 *
 * The expected strings are PyTorch's repr of the same tensors (torch 2.x,
 * default print options), with "torch." dropped from dtype names as ember
 * does. They were produced once with a small script; the test needs no Python.
 */
#include "check_util.h"
#include "tensor/tensor_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct pcase {
    const char *name;
    em_dtype dt;
    int ndim;
    int64_t shape[EM_MAX_DIMS];
    const double *vals;   /* row-major values; NULL: element i is i * scale + add */
    double scale, add;
    const char *expect;
} pcase;

static const pcase cases[] = {
    {"mat2x2", EM_F32, 2, {2, 2}, (const double[]){1.0, 2.0, 3.0, 4.0}, 0.0, 0.0,
     "tensor([[1., 2.],\n"
      "        [3., 4.]])"},
    {"ints", EM_I64, 1, {3}, (const double[]){1.0, 2.0, 3.0}, 0.0, 0.0,
     "tensor([1, 2, 3])"},
    {"bools", EM_BOOL, 1, {2}, (const double[]){1.0, 0.0}, 0.0, 0.0,
     "tensor([ True, False])"},
    {"bools_true", EM_BOOL, 1, {2}, (const double[]){1.0, 1.0}, 0.0, 0.0,
     "tensor([True, True])"},
    {"scalar_f", EM_F32, 0, {0}, (const double[]){3.0}, 0.0, 0.0,
     "tensor(3.)"},
    {"scalar_i", EM_I64, 0, {0}, (const double[]){3.0}, 0.0, 0.0,
     "tensor(3)"},
    {"scalar_b", EM_BOOL, 0, {0}, (const double[]){1.0}, 0.0, 0.0,
     "tensor(True)"},
    {"scalar_frac", EM_F32, 0, {0}, (const double[]){-0.5}, 0.0, 0.0,
     "tensor(-0.5000)"},
    {"empty1", EM_F32, 1, {0}, NULL, 0.0, 0.0,
     "tensor([])"},
    {"empty2", EM_F32, 2, {0, 3}, NULL, 0.0, 0.0,
     "tensor([], size=(0, 3))"},
    {"empty_i64", EM_I64, 1, {0}, NULL, 0.0, 0.0,
     "tensor([], dtype=int64)"},
    {"empty3_f64", EM_F64, 3, {2, 0, 3}, NULL, 0.0, 0.0,
     "tensor([], size=(2, 0, 3), dtype=float64)"},
    {"sci", EM_F32, 1, {3}, (const double[]){100000.0, 1.0, 2.0}, 0.0, 0.0,
     "tensor([1.0000e+05, 1.0000e+00, 2.0000e+00])"},
    {"dec", EM_F32, 1, {3}, (const double[]){1.5, 2.25, -3.125}, 0.0, 0.0,
     "tensor([ 1.5000,  2.2500, -3.1250])"},
    {"f64", EM_F64, 2, {2, 2}, (const double[]){1.5, 2.0, 3.0, 4.0}, 0.0, 0.0,
     "tensor([[1.5000, 2.0000],\n"
      "        [3.0000, 4.0000]], dtype=float64)"},
    {"arange30", EM_F32, 1, {30}, NULL, 1.0, 0.0,
     "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
      "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
      "        28., 29.])"},
    {"sum2d", EM_F32, 2, {1000, 2}, NULL, 1.0, 0.0,
     "tensor([[0.0000e+00, 1.0000e+00],\n"
      "        [2.0000e+00, 3.0000e+00],\n"
      "        [4.0000e+00, 5.0000e+00],\n"
      "        ...,\n"
      "        [1.9940e+03, 1.9950e+03],\n"
      "        [1.9960e+03, 1.9970e+03],\n"
      "        [1.9980e+03, 1.9990e+03]])"},
    {"sum1d", EM_F32, 1, {1001}, NULL, 1.0, 0.0,
     "tensor([   0.,    1.,    2.,  ...,  998.,  999., 1000.])"},
    {"cube", EM_I64, 3, {2, 3, 4}, NULL, 1.0, 0.0,
     "tensor([[[ 0,  1,  2,  3],\n"
      "         [ 4,  5,  6,  7],\n"
      "         [ 8,  9, 10, 11]],\n"
      "\n"
      "        [[12, 13, 14, 15],\n"
      "         [16, 17, 18, 19],\n"
      "         [20, 21, 22, 23]]])"},
    {"nonfinite", EM_F32, 1, {4}, (const double[]){NAN, INFINITY, -INFINITY, 1.5}, 0.0, 0.0,
     "tensor([   nan,    inf,   -inf, 1.5000])"},
    {"nan_int", EM_F32, 1, {3}, (const double[]){NAN, 1.0, 2.0}, 0.0, 0.0,
     "tensor([nan, 1., 2.])"},
    {"zeros", EM_F32, 1, {2}, (const double[]){0.0, 0.0}, 0.0, 0.0,
     "tensor([0., 0.])"},
    {"negzero", EM_F32, 1, {2}, (const double[]){-0.0, 1.0}, 0.0, 0.0,
     "tensor([-0., 1.])"},
    {"small", EM_F32, 1, {2}, (const double[]){9.999999747378752e-06, 1.0}, 0.0, 0.0,
     "tensor([1.0000e-05, 1.0000e+00])"},
    {"ratio", EM_F32, 1, {2}, (const double[]){9.999999747378752e-05, 0.5}, 0.0, 0.0,
     "tensor([1.0000e-04, 5.0000e-01])"},
    {"ratio_ok", EM_F32, 1, {2}, (const double[]){0.0010000000474974513, 0.5}, 0.0, 0.0,
     "tensor([0.0010, 0.5000])"},
    {"bf16", EM_BF16, 1, {2}, (const double[]){1.5, 2.5}, 0.0, 0.0,
     "tensor([1.5000, 2.5000], dtype=bfloat16)"},
    {"f16", EM_F16, 1, {2}, (const double[]){0.0999755859375, 65504.0}, 0.0, 0.0,
     "tensor([9.9976e-02, 6.5504e+04], dtype=float16)"},
    {"i32", EM_I32, 1, {2}, (const double[]){1.0, -20.0}, 0.0, 0.0,
     "tensor([  1, -20], dtype=int32)"},
    {"bigint_float", EM_F32, 1, {2}, (const double[]){10000000000.0, 1.0}, 0.0, 0.0,
     "tensor([1.0000e+10, 1.0000e+00])"},
    {"int_1e8", EM_F32, 1, {2}, (const double[]){100000000.0, 1.0}, 0.0, 0.0,
     "tensor([1.0000e+08, 1.0000e+00])"},
    {"f64_wrap", EM_F64, 1, {14}, NULL, 1.5, 0.0,
     "tensor([ 0.0000,  1.5000,  3.0000,  4.5000,  6.0000,  7.5000,  9.0000, 10.5000,\n"
      "        12.0000, 13.5000, 15.0000, 16.5000, 18.0000, 19.5000], dtype=float64)"},
    {"f64_long", EM_F64, 1, {20}, NULL, 1.0, 0.25,
     "tensor([ 0.2500,  1.2500,  2.2500,  3.2500,  4.2500,  5.2500,  6.2500,  7.2500,\n"
      "         8.2500,  9.2500, 10.2500, 11.2500, 12.2500, 13.2500, 14.2500, 15.2500,\n"
      "        16.2500, 17.2500, 18.2500, 19.2500], dtype=float64)"},
    {"sum3d", EM_I64, 3, {7, 2, 80}, NULL, 1.0, 0.0,
     "tensor([[[   0,    1,    2,  ...,   77,   78,   79],\n"
      "         [  80,   81,   82,  ...,  157,  158,  159]],\n"
      "\n"
      "        [[ 160,  161,  162,  ...,  237,  238,  239],\n"
      "         [ 240,  241,  242,  ...,  317,  318,  319]],\n"
      "\n"
      "        [[ 320,  321,  322,  ...,  397,  398,  399],\n"
      "         [ 400,  401,  402,  ...,  477,  478,  479]],\n"
      "\n"
      "        ...,\n"
      "\n"
      "        [[ 640,  641,  642,  ...,  717,  718,  719],\n"
      "         [ 720,  721,  722,  ...,  797,  798,  799]],\n"
      "\n"
      "        [[ 800,  801,  802,  ...,  877,  878,  879],\n"
      "         [ 880,  881,  882,  ...,  957,  958,  959]],\n"
      "\n"
      "        [[ 960,  961,  962,  ..., 1037, 1038, 1039],\n"
      "         [1040, 1041, 1042,  ..., 1117, 1118, 1119]]])"},
    {"sum3d_half", EM_F16, 3, {7, 2, 80}, NULL, 0.5, 0.0,
     "tensor([[[0.0000e+00, 5.0000e-01, 1.0000e+00,  ..., 3.8500e+01,\n"
      "          3.9000e+01, 3.9500e+01],\n"
      "         [4.0000e+01, 4.0500e+01, 4.1000e+01,  ..., 7.8500e+01,\n"
      "          7.9000e+01, 7.9500e+01]],\n"
      "\n"
      "        [[8.0000e+01, 8.0500e+01, 8.1000e+01,  ..., 1.1850e+02,\n"
      "          1.1900e+02, 1.1950e+02],\n"
      "         [1.2000e+02, 1.2050e+02, 1.2100e+02,  ..., 1.5850e+02,\n"
      "          1.5900e+02, 1.5950e+02]],\n"
      "\n"
      "        [[1.6000e+02, 1.6050e+02, 1.6100e+02,  ..., 1.9850e+02,\n"
      "          1.9900e+02, 1.9950e+02],\n"
      "         [2.0000e+02, 2.0050e+02, 2.0100e+02,  ..., 2.3850e+02,\n"
      "          2.3900e+02, 2.3950e+02]],\n"
      "\n"
      "        ...,\n"
      "\n"
      "        [[3.2000e+02, 3.2050e+02, 3.2100e+02,  ..., 3.5850e+02,\n"
      "          3.5900e+02, 3.5950e+02],\n"
      "         [3.6000e+02, 3.6050e+02, 3.6100e+02,  ..., 3.9850e+02,\n"
      "          3.9900e+02, 3.9950e+02]],\n"
      "\n"
      "        [[4.0000e+02, 4.0050e+02, 4.0100e+02,  ..., 4.3850e+02,\n"
      "          4.3900e+02, 4.3950e+02],\n"
      "         [4.4000e+02, 4.4050e+02, 4.4100e+02,  ..., 4.7850e+02,\n"
      "          4.7900e+02, 4.7950e+02]],\n"
      "\n"
      "        [[4.8000e+02, 4.8050e+02, 4.8100e+02,  ..., 5.1850e+02,\n"
      "          5.1900e+02, 5.1950e+02],\n"
      "         [5.2000e+02, 5.2050e+02, 5.2100e+02,  ..., 5.5850e+02,\n"
      "          5.5900e+02, 5.5950e+02]]], dtype=float16)"},
    {"row_sum", EM_I64, 2, {3, 1000}, NULL, 1.0, 0.0,
     "tensor([[   0,    1,    2,  ...,  997,  998,  999],\n"
      "        [1000, 1001, 1002,  ..., 1997, 1998, 1999],\n"
      "        [2000, 2001, 2002,  ..., 2997, 2998, 2999]])"},
    {"all_nan", EM_F32, 1, {2}, (const double[]){NAN, NAN}, 0.0, 0.0,
     "tensor([nan, nan])"},
    {"mixed_sci_nan", EM_F32, 1, {4}, (const double[]){9.99999993922529e-09, NAN, 0.0, 3.0}, 0.0, 0.0,
     "tensor([1.0000e-08,        nan, 0.0000e+00, 3.0000e+00])"},
    {"neg_sci", EM_F32, 1, {2}, (const double[]){-1.2345600453045336e-07, 2500.0}, 0.0, 0.0,
     "tensor([-1.2346e-07,  2.5000e+03])"},
    {"rounding", EM_F64, 1, {3}, (const double[]){0.00015, 2.71828, 99999.5}, 0.0, 0.0,
     "tensor([1.5000e-04, 2.7183e+00, 1.0000e+05], dtype=float64)"},
    {"wide_ints", EM_I64, 1, {14}, (const double[]){1.0, -1000000.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0}, 0.0, 0.0,
     "tensor([       1, -1000000,        3,        4,        5,        6,        7,\n"
      "               8,        9,       10,       11,       12,       13,       14])"},
    {"dec_round", EM_F64, 1, {3}, (const double[]){0.5, 2.71828, 123.45675}, 0.0, 0.0,
     "tensor([  0.5000,   2.7183, 123.4567], dtype=float64)"},
    {"f64_suffix_wrap", EM_F64, 1, {7}, NULL, 1.5, 10.0,
     "tensor([10.0000, 11.5000, 13.0000, 14.5000, 16.0000, 17.5000, 19.0000],\n"
      "       dtype=float64)"},
    {"i32_suffix_wrap", EM_I32, 1, {10}, NULL, 1.0, 100000.0,
     "tensor([100000, 100001, 100002, 100003, 100004, 100005, 100006, 100007, 100008,\n"
      "        100009], dtype=int32)"},
    {"ratio_1000", EM_F32, 1, {2}, (const double[]){1.0, 1000.0}, 0.0, 0.0,
     "tensor([   1., 1000.])"},
    {"ratio_1001", EM_F32, 1, {2}, (const double[]){1.0, 1001.0}, 0.0, 0.0,
     "tensor([1.0000e+00, 1.0010e+03])"},
    {"ratio_frac", EM_F32, 1, {2}, (const double[]){0.5, 500.0}, 0.0, 0.0,
     "tensor([  0.5000, 500.0000])"},
    {"ratio_frac2", EM_F32, 1, {2}, (const double[]){0.5, 500.5}, 0.0, 0.0,
     "tensor([5.0000e-01, 5.0050e+02])"},
    {"per_line_2d", EM_F32, 2, {2, 8}, NULL, 1.5, 10.0,
     "tensor([[10.0000, 11.5000, 13.0000, 14.5000, 16.0000, 17.5000, 19.0000, 20.5000],\n"
      "        [22.0000, 23.5000, 25.0000, 26.5000, 28.0000, 29.5000, 31.0000, 32.5000]])"},
    {"suffix_edge", EM_BF16, 1, {7}, (const double[]){1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5}, 0.0, 0.0,
     "tensor([1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000],\n"
      "       dtype=bfloat16)"},
    {"suffix_edge_fits", EM_BF16, 1, {6}, (const double[]){1.5, 1.5, 1.5, 1.5, 1.5, 1.5}, 0.0, 0.0,
     "tensor([1.5000, 1.5000, 1.5000, 1.5000, 1.5000, 1.5000], dtype=bfloat16)"},
    {"deep", EM_F32, 8, {1, 1, 1, 1, 1, 1, 1, 1}, (const double[]){1.5}, 0.0, 0.0,
     "tensor([[[[[[[[1.5000]]]]]]]])"},
    {"i32_empty2", EM_I32, 2, {3, 0}, NULL, 0.0, 0.0,
     "tensor([], size=(3, 0), dtype=int32)"},
};

/* A contiguous tensor holding the case's values (stored with em__store). */
static em_tensor *make(const pcase *c)
{
    em_tensor *t = em_empty(c->ndim, c->shape, c->dt, EM_CPU);
    int64_t n = em_numel(t);
    char *p = em_data_ptr(t);
    for (int64_t i = 0; i < n; i++)
        em__store(p + (size_t)i * em_dtype_size(c->dt), c->dt, c->vals ? c->vals[i] : (double)i * c->scale + c->add);
    return t;
}

static void check_repr(em_tensor *t, const char *expect, const char *name)
{
    char buf[16384];
    size_t n = em_tensor_repr(t, buf, sizeof buf);
    ck_assert_msg(n == strlen(expect) && strcmp(buf, expect) == 0, "%s:\n--- got (%zu chars)\n%s\n--- want (%zu chars)\n%s",
                  name, n, buf, strlen(expect), expect);
}

START_TEST(test_cases)
{
    em_scope_begin();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_repr(make(&cases[i]), cases[i].expect, cases[i].name);
    em_scope_end();
}
END_TEST

START_TEST(test_layouts)
{
    em_scope_begin();
    /* elements are read through the view's strides and offset */
    em_tensor *m = em_empty(EM_SHAPE(2, 3), EM_F32, EM_CPU);
    float *p = em_data_ptr(m);
    for (int i = 0; i < 6; i++) p[i] = (float)i;
    check_repr(em_transpose(m, 0, 1), "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]])", "transposed");
    check_repr(em_narrow(m, 1, 1, 2), "tensor([[1., 2.],\n        [4., 5.]])", "narrowed");
    check_repr(em_select(m, 0, 1), "tensor([3., 4., 5.])", "selected");
    check_repr(em_expand(em_select(em_narrow(m, 1, 2, 1), 0, 0), EM_SHAPE(2, 3)),
               "tensor([[2., 2., 2.],\n        [2., 2., 2.]])", "expanded");
    /* int64 beyond 2^53 prints exactly */
    int64_t big[2] = {(INT64_C(1) << 60) + 1, -7};
    check_repr(em_from_data(big, EM_SHAPE(2), EM_I64), "tensor([1152921504606846977,                  -7])", "big_i64");
    int64_t lim[2] = {INT64_MIN, INT64_MAX};
    check_repr(em_from_data(lim, EM_SHAPE(2), EM_I64), "tensor([-9223372036854775808,  9223372036854775807])", "i64 limits");
    em_scope_end();
}
END_TEST

START_TEST(test_buffer_and_file)
{
    em_scope_begin();
    em_tensor *t = make(&cases[0]);   /* "tensor([[1., 2.],\n        [3., 4.]])" */
    const char *want = cases[0].expect;
    size_t len = strlen(want);
    char small[10];
    memset(small, 'x', sizeof small);
    ck_assert_uint_eq(em_tensor_repr(t, small, sizeof small), len);   /* the full length, like snprintf */
    ck_assert_str_eq(small, "tensor([[");                           /* truncated, NUL-terminated */
    ck_assert_uint_eq(em_tensor_repr(t, NULL, 0), len);
    char one[1] = {'x'};
    ck_assert_uint_eq(em_tensor_repr(t, one, 1), len);
    ck_assert_int_eq(one[0], '\0');
    char exact[64];
    ck_assert_uint_eq(em_tensor_repr(t, exact, len + 1), len);
    ck_assert_str_eq(exact, want);

    /* em_tensor_print writes the repr and a newline */
    char *mem = NULL;
    size_t memlen = 0;
    FILE *f = open_memstream(&mem, &memlen);
    em_tensor_print(t, f);
    fclose(f);
    ck_assert_uint_eq(memlen, len + 1);
    ck_assert(strncmp(mem, want, len) == 0 && mem[len] == '\n');
    free(mem);
    ck_assert_uint_eq(em_tensor_repr(NULL, exact, sizeof exact), 4);
    ck_assert_str_eq(exact, "NULL");
    em_scope_end();
}
END_TEST

/* The per-op profile: counts what ran while on, nothing while off or after a reset. */
static char *profile_text(void)
{
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    em_profile_print(f, "test");
    fclose(f);
    return mem;
}

/* The calls column of op's row in a printed profile, or -1 without a row. */
static long long calls_of(const char *text, const char *op)
{
    char name[32];
    unsigned long long calls;
    for (const char *p = text; (p = strchr(p, '\n')) != NULL; p++)
        if (sscanf(p + 1, "%31s %llu", name, &calls) == 2 && !strcmp(name, op)) return (long long)calls;
    return -1;
}

START_TEST(test_profile)
{
    em_scope_begin();
    em_tensor *a = em_ones(EM_SHAPE(64), EM_F32, EM_CPU);
    em_profile_reset();
    em_profile_enable(true);
    for (int i = 0; i < 3; i++) em_add(a, a);
    em_exp(a);
    em_profile_enable(false);
    em_add(a, a);   /* not counted */
    char *t = profile_text();
    ck_assert_msg(strstr(t, "ember profile: kernel time by op - test\n"), "%s", t);
    ck_assert_msg(calls_of(t, "add") == 3 && calls_of(t, "exp") == 1 && calls_of(t, "mul") == -1, "%s", t);
    free(t);
    em_profile_reset();
    char *u = profile_text();
    ck_assert_msg(calls_of(u, "add") == -1 && strstr(u, "total"), "%s", u);
    free(u);
    em_scope_end();
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("print");
    tu_add_tests(tu_case(s, "print", 0), test_cases, test_layouts, test_buffer_and_file, test_profile);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
