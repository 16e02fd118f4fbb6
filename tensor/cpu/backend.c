/* ember — the CPU backend table: memory hooks plus one kernel per op. */
#include "tensor/cpu/cpu.h"

#include <string.h>

static void *cpu_alloc(size_t n, int idx) { (void)idx; return em__cpu_alloc(n); }
static void cpu_free(void *p, size_t n, int idx) { (void)idx; em__cpu_free(p, n); }
static em_status cpu_memcpy(void *dst, em_device dd, const void *src, em_device sd, size_t n)
{
    (void)dd; (void)sd;
    if (n) memcpy(dst, src, n);
    return EM_OK;
}
static em_status cpu_sync(int idx) { (void)idx; return EM_OK; }

const em_backend em__cpu_backend = {
    .name = "cpu",
    .type = EM_DEVICE_CPU,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memcpy = cpu_memcpy,
    .synchronize = cpu_sync,
    .kernels = {
#define EM_CPU_SLOT(name) [EM_OP_##name] = em_cpu_##name,
        EM_KERNEL_OP_LIST(EM_CPU_SLOT)
#undef EM_CPU_SLOT
    },
};
