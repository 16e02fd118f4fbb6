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

char *openblas_get_config(void);
const char *em__gemm_cache_file(void);   /* tensor/cpu/gemm_pick.c */

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
    int n = 0, blas = 0, dnnl = 0;
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        n++;
        blas += strstr(line, " openblas ") != NULL;
        dnnl += strstr(line, " onednn ") != NULL;
    }
    if (f) fclose(f);
    printf("- GEMM choices: %s (%d classes: %d oneDNN, %d OpenBLAS)\n", path, n, dnnl, blas);
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
    printf("- oneDNN: %s\n", EMBER_HAVE_ONEDNN ? "yes" : "no");
    print_gemm_choices();
    const char *wp = getenv("OMP_WAIT_POLICY"), *sc = getenv("GOMP_SPINCOUNT");
    printf("- OpenMP wait: OMP_WAIT_POLICY=%s, GOMP_SPINCOUNT=%s (ember's default: a spin of 3000, tensor/omp_env.c)\n",
           wp ? wp : "(unset)", sc ? sc : "(unset)");
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
