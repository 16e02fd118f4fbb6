/* The op table: every op has a row (name, class) and the CPU backend has a
 * kernel for every op that is not a view. */
#include "check_util.h"
#include "tensor/tensor_internal.h"

#include <string.h>

START_TEST(every_op_has_a_row)
{
    for (int op = 0; op < EM_NUM_OPS; op++) {
        ck_assert_msg(em_op_table[op].name != NULL, "op %d has no row in tensor/optable.c", op);
        for (int j = 0; j < op; j++)
            ck_assert_msg(strcmp(em_op_table[op].name, em_op_table[j].name) != 0, "ops %d and %d share the name %s", op, j,
                          em_op_table[op].name);
    }
}
END_TEST

START_TEST(cpu_has_every_kernel)
{
    const em_backend *cpu = em__backend(EM_DEVICE_CPU);
    ck_assert_ptr_nonnull(cpu);
    for (int op = 0; op < EM_NUM_OPS; op++) {
        if (em_op_table[op].cls == EM_CLASS_VIEW) continue;
        ck_assert_msg(cpu->kernels[op] != NULL, "no CPU kernel for op %s", em_op_table[op].name);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optable");
    tu_add_tests(tu_case(s, "table", 0), every_op_has_a_row, cpu_has_every_kernel);
    return tu_run_suite(s);
}
