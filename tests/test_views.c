/* Views never copy: they alias their base, and writes through one show in the other. */
#include "check_util.h"
#include "tensor/tensor_internal.h"

static em_tensor *iota(int ndim, const int64_t *shape)
{
    em_tensor *t = em_empty(ndim, shape, EM_F32, EM_CPU);
    float *p = em_data_ptr(t);
    for (int64_t i = 0; i < em_numel(t); i++) p[i] = (float)i;
    return t;
}

START_TEST(views_alias_their_base)
{
    EM_SCOPE {
        em_tensor *a = iota(EM_SHAPE(2, 3, 4));
        em_tensor *views[] = {
            em_view(a, EM_SHAPE(6, 4)), em_reshape(a, EM_SHAPE(4, -1)), em_transpose(a, 0, 2),
            em_permute(a, (int[]){2, 0, 1}), em_narrow(a, 1, 1, 2), em_select(a, 2, 3),
            em_expand(em_narrow(a, 0, 0, 1), EM_SHAPE(5, 3, 4)), em_unsqueeze(a, 1),
            em_squeeze(em_narrow(a, 0, 1, 1), 0), em_flatten(a, 0, 1),
        };
        for (size_t i = 0; i < sizeof views / sizeof *views; i++)
            ck_assert_msg(views[i]->storage == a->storage, "view %zu copied", i);
        em_set(a, (int64_t[]){1, 2, 3}, -7.0);
        ck_assert_double_eq(em_get(views[0], (int64_t[]){5, 3}), -7.0);
        ck_assert_double_eq(em_get(views[2], (int64_t[]){3, 2, 1}), -7.0);
        ck_assert_double_eq(em_get(views[3], (int64_t[]){3, 1, 2}), -7.0);
        ck_assert_double_eq(em_get(views[4], (int64_t[]){1, 1, 3}), -7.0);
        ck_assert_double_eq(em_get(views[5], (int64_t[]){1, 2}), -7.0);
        ck_assert_double_eq(em_get(views[8], (int64_t[]){2, 3}), -7.0);
        em_set(views[2], (int64_t[]){0, 0, 1}, 99.0);   /* write through a view */
        ck_assert_double_eq(em_get(a, (int64_t[]){1, 0, 0}), 99.0);
    }
}
END_TEST

START_TEST(view_geometry)
{
    EM_SCOPE {
        em_tensor *a = iota(EM_SHAPE(2, 3, 4));
        em_tensor *t = em_transpose(a, 0, 2);
        ck_assert_int_eq(t->shape[0], 4);
        ck_assert_int_eq(t->stride[0], 1);
        ck_assert_int_eq(t->stride[2], 12);
        ck_assert(!em_is_contiguous(t));
        em_tensor *e = em_expand(em_unsqueeze(em_select(a, 0, 1), 0), EM_SHAPE(7, -1, -1));
        ck_assert_int_eq(e->stride[0], 0);
        ck_assert_double_eq(em_get(e, (int64_t[]){6, 2, 3}), 23.0);
        em_tensor *n = em_narrow(a, 2, -2, 2);   /* negative start counts from the end */
        ck_assert_double_eq(em_get(n, (int64_t[]){0, 0, 0}), 2.0);
        /* a view of a view that is still viewable: [2,3,4] narrowed on dim 0 -> [1,12] */
        em_tensor *v = em_view(em_narrow(a, 0, 1, 1), EM_SHAPE(3, 4));
        ck_assert_double_eq(em_get(v, (int64_t[]){0, 0}), 12.0);
        /* merging dims that are contiguous within the transposed layout is a view */
        em_tensor *p = em_permute(a, (int[]){1, 2, 0});   /* [3,4,2], strides [4,1,12] */
        em_tensor *m = em_view(p, EM_SHAPE(12, 2));
        ck_assert_ptr_eq(m->storage, a->storage);
        ck_assert_double_eq(em_get(m, (int64_t[]){5, 1}), 17.0);
    }
}
END_TEST

START_TEST(reshape_copies_only_when_it_must)
{
    EM_SCOPE {
        em_tensor *a = iota(EM_SHAPE(3, 4));
        em_tensor *t = em_transpose(a, 0, 1);
        em_tensor *r = em_reshape(t, EM_SHAPE(12));
        ck_assert_ptr_ne(r->storage, a->storage);
        ck_assert_double_eq(em_get(r, (int64_t[]){1}), 4.0);   /* t[0][1] = a[1][0] */
        em_tensor *c = em_contiguous(a);
        ck_assert_ptr_eq(c, a);   /* already contiguous: the same tensor, one more reference */
        em_tensor *c2 = em_contiguous(t);
        ck_assert(em_is_contiguous(c2));
        ck_assert_double_eq(em_get(c2, (int64_t[]){3, 2}), 11.0);
    }
}
END_TEST

START_TEST(split_gives_views)
{
    EM_SCOPE {
        em_tensor *a = iota(EM_SHAPE(7, 2));
        em_tensor *parts[4];
        ck_assert_int_eq(em_split(a, 3, 0, parts, 4), 3);
        ck_assert_int_eq(parts[2]->shape[0], 1);
        ck_assert_ptr_eq(parts[1]->storage, a->storage);
        ck_assert_double_eq(em_get(parts[1], (int64_t[]){0, 1}), 7.0);
    }
}
END_TEST

START_TEST(empty_and_scalar_views)
{
    EM_SCOPE {
        em_tensor *e = em_empty(EM_SHAPE(0, 3), EM_F32, EM_CPU);
        em_tensor *v = em_view(e, EM_SHAPE(3, 0));
        ck_assert_int_eq(em_numel(v), 0);
        em_tensor *s = em_scalar(5.0, EM_F32, EM_CPU);
        em_tensor *u = em_reshape(s, EM_SHAPE(1, 1));
        ck_assert_double_eq(em_get(u, (int64_t[]){0, 0}), 5.0);
        ck_assert_double_eq(em_item(em_view(u, 0, NULL)), 5.0);
    }
}
END_TEST

START_TEST(misuse_narrow_out_of_range)
{
    tu_expect_misuse("em_narrow: range [2, 5) is out of bounds for dim 1 of [2,4]");
    em_narrow(em_zeros(EM_SHAPE(2, 4), EM_F32, EM_CPU), 1, 2, 3);
}
END_TEST

START_TEST(misuse_expand_non_singleton)
{
    tu_expect_misuse("em_expand: cannot expand [2,3] to [4,3]: dim 0 has size 2, not 1");
    em_expand(em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU), EM_SHAPE(4, 3));
}
END_TEST

START_TEST(misuse_reshape_wrong_numel)
{
    tu_expect_misuse("em_reshape: shape [5,-1] is invalid for input of shape [2,3]");
    em_reshape(em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU), EM_SHAPE(5, -1));
}
END_TEST

START_TEST(misuse_permute_repeat)
{
    tu_expect_misuse("em_permute: dimension 0 repeats");
    em_permute(em_zeros(EM_SHAPE(2, 3), EM_F32, EM_CPU), (int[]){0, 0});
}
END_TEST

int main(void)
{
    Suite *s = suite_create("views");
    tu_add_tests(tu_case(s, "views", 0), views_alias_their_base, view_geometry,
                 reshape_copies_only_when_it_must, split_gives_views, empty_and_scalar_views);
    tu_add_misuse_tests(tu_case(s, "misuse", 0), misuse_narrow_out_of_range, misuse_expand_non_singleton,
                        misuse_reshape_wrong_numel, misuse_permute_repeat);
    return tu_run_suite(s);
}
