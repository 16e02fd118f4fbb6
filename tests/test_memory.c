/* Memory: refcounts, scopes, allocator counters, the fail-the-Nth switch,
 * and misuse messages that name the caller's file:line. */
#include "check_util.h"
#include "ember_config.h"
#include "tensor/tensor_internal.h"

#include <stdlib.h>
#include <string.h>

START_TEST(cpu_memory_is_64_byte_aligned)
{
    for (int64_t n = 1; n < 5000; n = n * 3 + 1) {
        em_tensor *t = em_empty(1, (int64_t[]){n}, EM_F32, EM_CPU);
        ck_assert_uint_eq((uintptr_t)em_data_ptr(t) % 64, 0);
        em_release(t);
    }
}
END_TEST

START_TEST(live_and_peak_bytes)
{
    em_memory_reset_peak(EM_CPU);
    int64_t base = tu_live_bytes();
    em_tensor *a = em_empty(EM_SHAPE(10, 10), EM_F32, EM_CPU);
    em_tensor *b = em_empty(EM_SHAPE(5), EM_F64, EM_CPU);
    ck_assert_int_eq(tu_live_bytes() - base, 400 + 40);
    em_release(a);
    ck_assert_int_eq(tu_live_bytes() - base, 40);
    ck_assert_int_ge(em_memory_stats_get(EM_CPU).peak_bytes - base, 440);
    em_release(b);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(views_keep_storage_alive)
{
    int64_t base = tu_live_bytes();
    em_tensor *a = em_zeros(EM_SHAPE(4, 6), EM_F32, EM_CPU);
    em_tensor *v = em_transpose(a, 0, 1);
    em_release(a);
    ck_assert_int_eq(tu_live_bytes() - base, 96);   /* the view still holds it */
    ck_assert_double_eq(em_get(v, (int64_t[]){5, 3}), 0.0);
    em_release(v);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(scope_releases_everything_but_kept)
{
    int64_t base = tu_live_bytes();
    em_tensor *kept = NULL;
    EM_SCOPE {
        em_tensor *a = em_ones(EM_SHAPE(8), EM_F32, EM_CPU);
        em_tensor *b = em_add(a, a);
        em_tensor *c = em_mul(b, a);
        kept = em_keep(em_sum(c, 0, NULL, false));
        ck_assert_int_eq(em_scope_depth(), 1);
    }
    ck_assert_int_eq(em_scope_depth(), 0);
    ck_assert_double_eq(em_item(kept), 16.0);
    em_release(kept);
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

START_TEST(keep_moves_into_parent_scope)
{
    int64_t base = tu_live_bytes();
    em_scope_begin();
    em_tensor *outer = NULL;
    EM_SCOPE {
        outer = em_keep(em_full(EM_SHAPE(3), 2.0, EM_F32, EM_CPU));
    }
    ck_assert_double_eq(em_get(outer, (int64_t[]){2}), 2.0);   /* alive in the outer scope */
    em_scope_end();
    ck_assert_int_eq(tu_live_bytes(), base);
}
END_TEST

/* 1,000 iterations of op chains inside scopes return to the baseline. */
START_TEST(op_chains_in_scopes_return_to_baseline)
{
    em_tensor *w = em_ones(EM_SHAPE(16, 16), EM_F32, EM_CPU);
    int64_t base = tu_live_bytes();
    for (int it = 0; it < 1000; it++) {
        EM_SCOPE {
            em_tensor *x = em_full(EM_SHAPE(4, 16), (double)it, EM_F32, EM_CPU);
            em_tensor *h = em_relu(em_matmul(x, w));
            em_tensor *c = em_narrow(em_cat(2, (em_tensor *[]){h, h}, 0), 0, 2, 4);
            em_tensor *s = em_softmax(em_add(c, em_transpose(em_transpose(h, 0, 1), 0, 1)), -1);
            em_tensor *r = em_mean(em_exp(em_neg(s)), 0, NULL, false);
            ck_assert(r != NULL);
        }
    }
    ck_assert_int_eq(tu_live_bytes(), base);
    em_release(w);
}
END_TEST

/* Failing the Nth allocation gives EM_ERR_OOM, NULL results that propagate,
 * and no leak, for every N until the chain succeeds. */
START_TEST(fail_nth_allocation_leaks_nothing)
{
    em_tensor *x = em_full(EM_SHAPE(8, 8), 0.5, EM_F32, EM_CPU);
    int64_t base = tu_live_bytes();
    bool succeeded = false;
    for (int64_t n = 1; n < 200 && !succeeded; n++) {
        em_clear_error();
        em_alloc_fail_after(n, false);
        EM_SCOPE {
            em_tensor *y = em_sum(em_softmax(em_add(em_matmul(x, x), x), 1), 0, NULL, false);
            if (y) {
                succeeded = true;
                ck_assert_double_eq_tol(em_item(y), 8.0, 1e-5);
            } else {
                ck_assert_int_eq(em_last_status(), EM_ERR_OOM);
                ck_assert_ptr_nonnull(strstr(em_last_error(), "out of memory"));
            }
        }
        em_alloc_fail_after(0, false);
        ck_assert_int_eq(tu_live_bytes(), base);
    }
    ck_assert(succeeded);
    em_release(x);
}
END_TEST

START_TEST(steady_loop_reuses_cached_blocks)
{
    EM_SCOPE { em_zeros(EM_SHAPE(1 << 20), EM_F32, EM_CPU); }   /* warm the cache */
    int64_t sys = em_memory_stats_get(EM_CPU).n_system_allocs;
    for (int i = 0; i < 50; i++)
        EM_SCOPE { em_zeros(EM_SHAPE(1 << 20), EM_F32, EM_CPU); }
    ck_assert_int_eq(em_memory_stats_get(EM_CPU).n_system_allocs, sys);
    em_empty_cache(EM_CPU);
    ck_assert_int_eq(em_memory_stats_get(EM_CPU).cached_bytes, 0);
}
END_TEST

/* Whether the mapping holding address a is marked MADV_HUGEPAGE ("hg" among
 * /proc/self/smaps's VmFlags); -1 when smaps cannot be read. */
static int advised_huge(uintptr_t a)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int in = 0, r = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) in = a >= lo && a < hi;
        else if (in && !strncmp(line, "VmFlags:", 8)) r = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return r;
}

START_TEST(big_blocks_get_huge_pages)
{
    /* with EM_CPU_HUGEPAGES=1 (main sets it), 3 MiB: the block starts on a
     * 2 MiB boundary and its whole huge pages are advised (tensor/alloc.c); a
     * fresh block, not a cached one */
    em_empty_cache(EM_CPU);
    EM_SCOPE {
        em_tensor *t = em_full(EM_SHAPE(3 << 18), 1.0, EM_F32, EM_CPU);
        uintptr_t p = (uintptr_t)em_data_ptr(t);
        ck_assert_uint_eq(p % (2u << 20), 0);
        int hg = advised_huge(p);
        if (hg >= 0) ck_assert_msg(hg == 1, "the block at %#lx is not marked for huge pages", (unsigned long)p);
        ck_assert_float_eq(((float *)em_data_ptr(t))[(3 << 18) - 1], 1.0f);
        /* a small block keeps its 64-byte alignment only */
        em_tensor *s = em_empty(EM_SHAPE(1000), EM_F32, EM_CPU);
        ck_assert_uint_eq((uintptr_t)em_data_ptr(s) % 64, 0);
    }
}
END_TEST

START_TEST(misuse_names_op_shapes_and_caller)
{
    /* the message carries this file's name and the line of the call */
    char expect[128];
    em_tensor *a = em_zeros(EM_SHAPE(8, 768), EM_F32, EM_CPU);
    em_tensor *b = em_zeros(EM_SHAPE(512, 768), EM_F32, EM_CPU);
    int line = __LINE__ + 3;   /* the line of the em_matmul call below */
    snprintf(expect, sizeof expect, "ember: em_matmul: cannot multiply [8,768] by [512,768]: inner dimensions 768 and 512 differ (test_memory.c:%d)", line);
    tu_expect_misuse(expect);
    em_matmul(a, b);
}
END_TEST

START_TEST(misuse_bad_view)
{
    tu_expect_misuse("em_view: cannot view [3,4] as [12] without a copy");
    em_tensor *a = em_zeros(EM_SHAPE(4, 3), EM_F32, EM_CPU);
    em_view(em_transpose(a, 0, 1), EM_SHAPE(12));
}
END_TEST

START_TEST(misuse_unbalanced_scope)
{
    char expect[128];   /* the memory functions name their caller too */
    snprintf(expect, sizeof expect, "em_scope_end: no scope is open (unbalanced em_scope_begin/em_scope_end) "
             "(test_memory.c:%d)", __LINE__ + 2);
    tu_expect_misuse(expect);
    em_scope_end();
}
END_TEST

/* Handle safety: a released tensor keeps a dead header a while, so a stale
 * pointer is a misuse error naming the call's file:line, not a crash. */
START_TEST(misuse_use_after_release)
{
    char expect[320];
    em_tensor *a = em_zeros(EM_SHAPE(4), EM_F32, EM_CPU);
    em_release(a);
    int line = __LINE__ + 3;   /* the em_add below */
    snprintf(expect, sizeof expect, "was released (its last reference went, by em_release or at the end of the scope that made it) and is used again; keep it with em_retain, or make it outside the scope (test_memory.c:%d)", line);
    tu_expect_misuse(expect);
    em_add(a, a);
}
END_TEST

START_TEST(misuse_double_release)
{
    em_tensor *a = em_zeros(EM_SHAPE(4), EM_F32, EM_CPU);
    em_release(a);
    char expect[320];
    snprintf(expect, sizeof expect, "was released (its last reference went, by em_release or at the end of the scope "
             "that made it) and is used again; keep it with em_retain, or make it outside the scope (test_memory.c:%d)",
             __LINE__ + 2);
    tu_expect_misuse(expect);
    em_release(a);
}
END_TEST

START_TEST(misuse_result_escaping_its_scope)
{
    em_tensor *kept = NULL;
    EM_SCOPE { kept = em_ones(EM_SHAPE(2, 2), EM_F32, EM_CPU); }   /* not em_keep'd: gone at the scope's end */
    tu_expect_misuse("ember: em_sum: tensor");
    em_sum(kept, 0, NULL, false);
}
END_TEST

START_TEST(misuse_stale_pointer_in_an_accessor)
{
    em_tensor *a = em_zeros(EM_SHAPE(4), EM_F32, EM_CPU);
    em_release(a);
    tu_expect_misuse("ember: em_item: tensor");
    em_item(a);
}
END_TEST

START_TEST(misuse_unknown_device_type)
{
    tu_expect_misuse("em_empty: unknown device type 5 (ember knows cpu = 0 and cuda = 1)");
    em_zeros(EM_SHAPE(2), EM_F32, ((em_device){5, 0}));
}
END_TEST

/* Without a GPU the message says which is missing: CUDA support in this
 * build, or a device on this machine. */
START_TEST(device_names)
{
    char b[16];
    ck_assert_str_eq(em_device_str((em_device){5, 1}, b), "type5:1");
    ck_assert_str_eq(em_device_str((em_device){EM_DEVICE_CUDA, 1}, b), "cuda:1");
    ck_assert_str_eq(em_device_str(EM_CPU, b), "cpu");
}
END_TEST

/* registered only where no GPU is usable */
START_TEST(missing_cuda_names_the_missing_part)
{
    tu_expect_misuse(EMBER_HAVE_CUDA ? "device cuda:0: this build supports it, but the machine has no usable device"
                                     : "device cuda:0: this build of ember has no CUDA support");
    em_zeros(EM_SHAPE(2), EM_F32, EM_CUDA(0));
}
END_TEST

int main(void)
{
    setenv("EM_CPU_HUGEPAGES", "1", 1);   /* read once, at the first block of 2 MiB or more */
    Suite *s = suite_create("memory");
    tu_add_tests(tu_case(s, "memory", 0), cpu_memory_is_64_byte_aligned, live_and_peak_bytes, views_keep_storage_alive,
                 scope_releases_everything_but_kept, keep_moves_into_parent_scope,
                 op_chains_in_scopes_return_to_baseline, fail_nth_allocation_leaks_nothing,
                 steady_loop_reuses_cached_blocks, big_blocks_get_huge_pages);
    TCase *tm = tu_case(s, "misuse", 0);
    tu_add_misuse_tests(tm, misuse_names_op_shapes_and_caller, misuse_bad_view, misuse_unbalanced_scope,
                        misuse_use_after_release, misuse_double_release, misuse_result_escaping_its_scope,
                        misuse_stale_pointer_in_an_accessor, misuse_unknown_device_type);
    tcase_add_test(tm, device_names);
    if (!em__backend(EM_DEVICE_CUDA)) tu_add_misuse_test(tm, missing_cuda_names_the_missing_part);
    return tu_run_suite(s);
}
