/* ember — the f32 GEMM precision setting (torch.set_float32_matmul_precision).
 * Device-independent: the CUDA backend reads it through em__matmul_allow_tf32
 * to pick TF32 tensor-core GEMMs; the CPU always computes f32 GEMMs in f32. */
#include "tensor/tensor_internal.h"

#include <stdatomic.h>
#include <string.h>

static _Atomic int allow_tf32;   /* 0: "highest", 1: "high", 2: "medium" */
static const char *const names[] = {"highest", "high", "medium"};

void em_set_float32_matmul_precision(const char *precision)
{
    for (int i = 0; precision && i < 3; i++)
        if (strcmp(precision, names[i]) == 0) {
            atomic_store(&allow_tf32, i);
            return;
        }
    em__misuse("em_set_float32_matmul_precision", "precision must be \"highest\", \"high\" or \"medium\", got %s%s%s",
               precision ? "\"" : "", precision ? precision : "NULL", precision ? "\"" : "");
}

const char *em_get_float32_matmul_precision(void) { return names[atomic_load(&allow_tf32)]; }

bool em__matmul_allow_tf32(void) { return atomic_load(&allow_tf32) != 0; }
