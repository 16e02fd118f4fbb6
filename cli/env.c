/* ember env — what a bug report needs: versions, BLAS, MPI, CUDA, the
 * machine, and the launch configuration. */
#include "launch_config.h"

#include "ember_config.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <utf8proc.h>
#if EMBER_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

char *openblas_get_config(void);
const char *em__gemm_cache_file(void);   /* tensor/cpu/gemm_pick.c */
const char *em__mkl_status(void);        /* tensor/cpu/mkl.c */

/* The GEMM choices persisted for this machine and libraries: how many, and
 * how many went to each library. */
static void print_gemm_choices(void)
{
    const char *mode = getenv("EMBER_GEMM");
    printf("- GEMM (f32): EMBER_GEMM=%s\n", mode && *mode ? mode : "(unset: auto, measured per shape class)");
    const char *path = em__gemm_cache_file();
    if (!path[0]) {
        printf("- GEMM choices: kept in memory only (EMBER_CACHE_DIR=none, or no HOME)\n");
        return;
    }
    FILE *f = fopen(path, "r");
    int n = 0, blas = 0, dnnl = 0, mkl = 0;
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        n++;
        blas += strstr(line, " openblas ") != NULL;
        dnnl += strstr(line, " onednn ") != NULL;
        mkl += strstr(line, " mkl ") != NULL;
    }
    if (f) fclose(f);
    printf("- GEMM choices: %s (%d classes: %d oneDNN, %d OpenBLAS, %d oneMKL)\n", path, n, dnnl, blas, mkl);
}

int ember_cmd_env(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: ember env\n  Prints versions, libraries, the machine and the launch configuration.");
        return 0;
    }
    struct utsname u;
    uname(&u);
    printf("Copy-and-paste the text below in your issue.\n\n");
    printf("- ember version: %s\n", EMBER_VERSION);
    printf("- platform: %s %s %s\n", u.sysname, u.release, u.machine);
    printf("- cores: %ld\n", sysconf(_SC_NPROCESSORS_ONLN));
    printf("- memory: %.1f GiB\n", (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) / (1 << 30));
    printf("- BLAS: OpenBLAS (%s)\n", openblas_get_config());
#if EMBER_HAVE_ONEDNN
    {   /* the instruction set oneDNN's kernels use here: AMX and AVX-512 BF16 decide the bf16 speed */
        const dnnl_version_t *v = dnnl_version();
        unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
        const char *name = isa == dnnl_cpu_isa_avx512_core_amx    ? "avx512_core_amx (AMX)"
                           : isa == dnnl_cpu_isa_avx512_core_bf16 ? "avx512_core_bf16"
                           : isa == dnnl_cpu_isa_avx512_core_vnni ? "avx512_core_vnni"
                           : isa == dnnl_cpu_isa_avx512_core      ? "avx512_core"
                           : isa == dnnl_cpu_isa_avx2_vnni        ? "avx2_vnni"
                           : isa == dnnl_cpu_isa_avx2             ? "avx2"
                                                                  : "older";
        printf("- oneDNN: %d.%d.%d, kernels for %s\n", v->major, v->minor, v->patch, name);
    }
#else
    printf("- oneDNN: no\n");
#endif
    printf("- oneMKL: %s\n", em__mkl_status());
    print_gemm_choices();
    const char *wp = getenv("OMP_WAIT_POLICY"), *sc = getenv("GOMP_SPINCOUNT");
    printf("- OpenMP wait: OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s (ember's default: a spin of 3000, tensor/omp_env.c)\n",
           wp ? wp : "(unset)", sc ? sc : "(unset)");
    const char *hp = getenv("EM_CPU_HUGEPAGES");
    FILE *thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char mode[128] = "";
    if (thp && !fgets(mode, sizeof mode, thp)) mode[0] = 0;
    if (thp) fclose(thp);
    mode[strcspn(mode, "\n")] = 0;
    printf("- CPU huge pages: EM_CPU_HUGEPAGES=%s (ember's default: off, tensor/alloc.c); kernel THP: %s\n",
           hp ? hp : "(unset)", mode[0] ? mode : "(unknown)");
    printf("- MPI: %s\n", EMBER_HAVE_MPI ? "OpenMPI (built with MPI)" : "no (a world of one only)");
    printf("- CUDA: %s\n", EMBER_HAVE_CUDA ? "built with CUDA, cuBLAS, cuDNN and NCCL" : "not built");
    printf("- utf8proc: %s\n", utf8proc_version());
    printf("- OPENBLAS_CORETYPE: %s\n", getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    char path[4096];
    launch_config c;
    launch_config_init(&c);
    launch_config_default_path(path, sizeof path);
    bool have = access(path, R_OK) == 0;
    printf("- config file: %s%s\n", path, have ? "" : " (absent)");
    if (have && launch_config_load(&c, path, true)) launch_config_print(&c, stdout);
    launch_config_free(&c);
    return 0;
}
