/* Fused attention over packed rows (tensor/op_sdpa_packed.c, op SDPA with
 * in[4]): the same bits as the padded op on every real row, forward and
 * backward, on every CPU kernel; the composed paths a declining device takes
 * (forward and backward) against the fused one; bad row tables refused. */
#include "check_util.h"
#include "tensor/cpu/k_sdpa.h"
#include "tensor/op_grad.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 4, H = 3, S = 70, D = 40 };
static const int32_t LENS[B] = {70, 1, 33, 64};   /* full, one token, two query blocks, a block edge */

static int64_t n_rows(void)
{
    int64_t n = 0;
    for (int b = 0; b < B; b++) n += LENS[b];
    return n;
}

static em_tensor *lens_t(void) { return em_from_data(LENS, 1, (int64_t[]){B}, EM_I32); }

static em_tensor *starts_t(void)
{
    int64_t st[B], at = 0;
    for (int b = 0; b < B; b++) st[b] = at, at += LENS[b];
    return em_from_data(st, 1, (int64_t[]){B}, EM_I64);
}

/* the packed rows [n, H*D] of a padded [B, S, H*D] */
static em_tensor *pack(em_tensor *x)
{
    em_tensor *parts[B];
    for (int b = 0; b < B; b++) parts[b] = em_narrow(em_select(x, 0, b), 0, 0, LENS[b]);
    return em_cat(B, parts, 0);
}

/* [rows, H*D] or [B, S, H*D] -> [.., H, rows, D] */
static em_tensor *heads(em_tensor *x)
{
    if (x->ndim == 2) return em_transpose(em_view(x, 4, (int64_t[]){1, x->shape[0], H, D}), 1, 2);
    return em_transpose(em_view(x, 4, (int64_t[]){B, S, H, D}), 1, 2);
}

/* [.., H, rows, D] -> [rows, H*D] or [B, S, H*D] */
static em_tensor *merge(em_tensor *o, bool packed)
{
    em_tensor *t = em_contiguous(em_transpose(o, 1, 2));
    return packed ? em_reshape(t, 2, (int64_t[]){t->shape[1], H * D}) : em_reshape(t, 3, (int64_t[]){B, S, H * D});
}

/* The padded op (padding queries) and the packed one on the same values: every
 * real row of the output and of the three input gradients, bit for bit. */
static void compare_bits(em_dtype dt, bool amx, double p)
{
    bool amx_was = em__sdpa_amx_set(amx);
    EM_SCOPE {
        em_tensor *xp[3], *xk[3];
        for (int i = 0; i < 3; i++) {
            em_tensor *r = em_to_dtype(tu_rand_tensor(3, (int64_t[]){B, S, H * D}, EM_F32, -2, 2, 11 + i, NULL), dt);
            xp[i] = em_requires_grad_(em_detach(r), true);
            xk[i] = em_requires_grad_(em_detach(pack(r)), true);
        }
        em_tensor *w = em_to_dtype(tu_rand_tensor(3, (int64_t[]){B, S, H * D}, EM_F32, -1, 1, 7, NULL), dt);
        em_tensor *op = merge(em__sdpa(heads(xp[0]), heads(xp[1]), heads(xp[2]), lens_t(), p, 5, 321, true), false);
        em_tensor *ok = merge(em__sdpa_packed(heads(xk[0]), heads(xk[1]), heads(xk[2]), lens_t(), starts_t(), S, p, 5,
                                              321),
                              true);
        ck_assert_msg(op && ok, "%s: %s", em_dtype_name(dt), em_last_error());
        ck_assert_msg(tu_bytes_equal(pack(op), ok), "%s amx %d p %g: outputs differ", em_dtype_name(dt), amx, p);
        /* padding rows of the padded output are 0 and get weight 0: the losses see the same rows */
        em_backward(em_sum(em_mul(op, w), 0, NULL, false));
        em_backward(em_sum(em_mul(ok, pack(w)), 0, NULL, false));
        for (int i = 0; i < 3; i++)
            ck_assert_msg(tu_bytes_equal(pack(em_grad(xp[i])), em_grad(xk[i])), "%s amx %d p %g: gradient %d differs",
                          em_dtype_name(dt), amx, p, i);
    }
    em__sdpa_amx_set(amx_was);
}

TU_TEST(packed_matches_padded_f32, compare_bits(EM_F32, false, 0.0), compare_bits(EM_F32, false, 0.2))
TU_TEST(packed_matches_padded_f64, compare_bits(EM_F64, false, 0.2))
TU_TEST(packed_matches_padded_bf16, compare_bits(EM_BF16, true, 0.2), compare_bits(EM_BF16, false, 0.2))

/* The composed forward (level 1: what CUDA runs) and the composed backward on the
 * padded batch (level 2: the fused packed forward, its backward declined) against
 * the fused op, f64: the same mask, so equal up to rounding. */
static void compare_composed(int level)
{
    EM_SCOPE {
        em_tensor *x[2][3], *o[2];
        for (int i = 0; i < 3; i++) {
            em_tensor *r = pack(tu_rand_tensor(3, (int64_t[]){B, S, H * D}, EM_F64, -2, 2, 21 + i, NULL));
            for (int path = 0; path < 2; path++) x[path][i] = em_requires_grad_(em_clone(em_detach(r)), true);
        }
        em_tensor *w = tu_rand_tensor(2, (int64_t[]){n_rows(), H * D}, EM_F64, -1, 1, 9, NULL);
        for (int path = 0; path < 2; path++) {
            int was = em__sdpa_packed_set_composed(path ? level : 0);
            o[path] = merge(em__sdpa_packed(heads(x[path][0]), heads(x[path][1]), heads(x[path][2]), lens_t(),
                                            starts_t(), S, 0.25, 3, 99),
                            true);
            ck_assert_msg(o[path] != NULL, "%s", em_last_error());
            em_backward(em_sum(em_mul(o[path], w), 0, NULL, false));
            em__sdpa_packed_set_composed(was);
        }
        tu_expect_tensor_close("output", o[1], o[0], 1e-12, 1e-12);
        const char *names[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; i++) tu_expect_tensor_close(names[i], em_grad(x[1][i]), em_grad(x[0][i]), 1e-11, 1e-12);
    }
}

TU_TEST(composed_forward_matches_fused, compare_composed(1))
TU_TEST(composed_backward_matches_fused, compare_composed(2))

/* Row tables that do not tile q's rows in order */
static void run_rows(const int64_t *starts, const int32_t *lens, int64_t s)
{
    em_tensor *q = em_randn(4, (int64_t[]){1, 1, 6, 4}, EM_F32, EM_CPU);
    em__sdpa_packed(q, q, q, em_from_data(lens, 1, (int64_t[]){2}, EM_I32),
                    em_from_data(starts, 1, (int64_t[]){2}, EM_I64), s, 0.0, 0, 0);
}

TU_MISUSE(gap_refused, "must follow one another", run_rows((int64_t[]){0, 4}, (int32_t[]){3, 2}, 3))
TU_MISUSE(overlap_refused, "must follow one another", run_rows((int64_t[]){0, 2}, (int32_t[]){3, 4}, 4))
TU_MISUSE(empty_refused, "must follow one another", run_rows((int64_t[]){0, 0}, (int32_t[]){0, 6}, 6))
TU_MISUSE(longer_than_S_refused, "must follow one another", run_rows((int64_t[]){0, 5}, (int32_t[]){5, 1}, 4))
TU_MISUSE(rows_left_over_refused, "cover 5 rows", run_rows((int64_t[]){0, 3}, (int32_t[]){3, 2}, 3))

/* An S no real batch has: the B*H*S*S dropout numbering and the kernels'
 * S-sized scratch would overflow; refused by name, never run. Lengths that
 * sum past 2^63 with it are refused the same way. */
static em_tensor *run_big_s(int64_t s)
{
    em_tensor *q = em_randn(4, (int64_t[]){1, 1, 40, 64}, EM_F32, EM_CPU);
    return em__sdpa_packed(q, q, q, em_from_data((int32_t[]){40}, 1, (int64_t[]){1}, EM_I32),
                           em_from_data((int64_t[]){0}, 1, (int64_t[]){1}, EM_I64), s, 0.0, 0, 0);
}
/* Not through TU_MISUSE: a heap overrun may end in glibc's own abort, which
 * that would count as the refusal. Here the handler returns, and the call must
 * too, with NULL and the message. */
static char misuse_seen[1024];
static void record_misuse(const char *msg, void *user)
{
    (void)user;
    snprintf(misuse_seen, sizeof misuse_seen, "%s", msg);
}
START_TEST(huge_s_refused)
{
    em_set_misuse_handler(record_misuse, NULL);
    const int64_t big[3] = {(int64_t)1 << 60, INT64_MAX, (int64_t)1 << 40};
    for (int i = 0; i < 3; i++) EM_SCOPE {
        misuse_seen[0] = 0;
        ck_assert_ptr_null(run_big_s(big[i]));
        ck_assert_msg(strstr(misuse_seen, "is too large"), "S = %lld: %s", (long long)big[i], misuse_seen);
    }
}
END_TEST
static void run_wrapping_table(void)
{
    em_tensor *q = em_randn(4, (int64_t[]){1, 1, 1, 16}, EM_F32, EM_CPU);
    em__sdpa_packed(q, q, q, em_from_data((int64_t[]){INT64_MAX, INT64_MAX, 3}, 1, (int64_t[]){3}, EM_I64),
                    em_from_data((int64_t[]){0, INT64_MAX, -2}, 1, (int64_t[]){3}, EM_I64), INT64_MAX, 0.0, 0, 0);
}
static void run_no_sequences(void)
{
    em_tensor *q = em_randn(4, (int64_t[]){1, 2, 0, 5}, EM_F32, EM_CPU);
    em_tensor *l = em_narrow(em_from_data((int32_t[]){1}, 1, (int64_t[]){1}, EM_I32), 0, 0, 0);
    em_tensor *st = em_narrow(em_from_data((int64_t[]){0}, 1, (int64_t[]){1}, EM_I64), 0, 0, 0);
    em__sdpa_packed(q, q, q, l, st, 1, 0.0, 0, 0);
}
TU_MISUSE(s_past_int32_refused, "is too large", run_big_s((int64_t)1 << 31))
TU_MISUSE(wrapping_table_refused, "is too large", run_wrapping_table())
TU_MISUSE(no_sequences_refused, "at least one sequence", run_no_sequences())

static Suite *make_suite(void)
{
    Suite *s = suite_create("sdpa_packed");
    TCase *tc = tu_case(s, "core", 120);
    tu_add_tests(tc, packed_matches_padded_f32, packed_matches_padded_f64, packed_matches_padded_bf16,
                 composed_forward_matches_fused, composed_backward_matches_fused, huge_s_refused);
    tu_add_misuse_tests(tc, gap_refused, overlap_refused, empty_refused, longer_than_S_refused,
                        rows_left_over_refused, s_past_int32_refused, wrapping_table_refused,
                        no_sequences_refused);
    return s;
}

int main(void) { return tu_run_suite(make_suite()); }
