/* ember — Intel oneMKL as an optional third GEMM library, loaded at run time
 * (issue 17; DESIGN.md §2 "Threads and GEMM").
 *
 * ember links Debian's OpenBLAS and oneDNN, and those stay the default and the
 * fallback. oneMKL, from Intel's official wheel (tools/fetch-mkl), runs some
 * f32 shapes 5-15 % faster on some CPUs (docs/PERFORMANCE.md); where the user
 * asks for it, the GEMM picker (gemm_pick.c) times it as a third candidate.
 * Asked for means, in this order:
 *
 *   EMBER_MKL=0 (or off, no, none)   never loaded, whatever the build says;
 *   EMBER_MKL=<dir or file>          libmkl_rt.so.3 in <dir> or <dir>/lib, or that file;
 *   the build's default              meson -Dmkl_root=<dir>, looked up the same way.
 *
 * Neither set (the default build): nothing is loaded and nothing changes.
 *
 * Loaded with dlopen(RTLD_LOCAL): MKL's cblas_sgemm and OpenBLAS's share a name
 * and never meet in the global namespace, so each call reaches the library it
 * means (libmkl_rt loads its own layers from its own folder). Before any call:
 * the GNU threading layer (libgomp: the pool ember's regions and the other
 * libraries run on), the LP64 interface (int sizes), and conditional numerical
 * reproducibility AUTO, so that a result does not depend on the operands'
 * alignment and a run repeats bit for bit on one machine. Threads per call:
 * em_num_threads() (MKL's thread-local count); inside an OpenMP region MKL runs
 * sequentially on its own (MKL_DYNAMIC). bf16 operands with an f32 C
 * (cblas_gemm_bf16bf16f32, AMX where the CPU has it) are a candidate too,
 * against oneDNN's primitive (gemm_bf16.c).
 *
 * Failure: a path that does not load or lacks a symbol is said once on stderr,
 * naming the path and the reason, and MKL stays off; the run goes on on the
 * Debian libraries. Never under valgrind unless EMBER_GEMM is set (as oneDNN:
 * JIT code). Thread-safe: the load runs once (pthread_once).
 */
#include "tensor/cpu/cpu.h"

#include "ember_config.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef EMBER_MKL_DEFAULT
#define EMBER_MKL_DEFAULT ""
#endif

/* MKL's ABI (mkl_cblas.h, mkl_service.h, mkl_types.h of oneMKL 2026.2; stable
 * across oneMKL releases): CBLAS enums as in every CBLAS, LP64 ints. */
enum { MKL_ROW_MAJOR = 101, MKL_NO_TRANS = 111, MKL_TRANS = 112 };
enum { MKL_THREADING_GNU = 3, MKL_INTERFACE_LP64 = 0, MKL_CBWR_AUTO = 2, MKL_CBWR_SUCCESS = 0 };
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*bf16gemm_fn)(int, int, int, int, int, int, float, const uint16_t *, int, const uint16_t *, int,
                            float, float *, int);
typedef int (*int_fn)(int);
typedef void (*version_fn)(char *, int);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static sgemm_fn mkl_sgemm;              /* NULL: MKL off */
static bf16gemm_fn mkl_bf16;            /* NULL: no bf16 GEMM in this oneMKL */
static int_fn mkl_threads_local;
static char version[128];
static char state[8448];                /* what em__mkl_status says */

static bool off_word(const char *e)
{
    return !strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "no") || !strcmp(e, "none");
}

/* libmkl_rt.so.3 for a directory (itself or its lib/), or the path as given. */
static void resolve(const char *p, char *out, size_t n)
{
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, n, "%s/libmkl_rt.so.3", p);
        if (stat(out, &st) != 0) snprintf(out, n, "%s/lib/libmkl_rt.so.3", p);
    } else if (!strchr(p, '/') && stat(p, &st) == 0) {
        snprintf(out, n, "./%s", p);   /* a file here, not a name for dlopen's search path */
    } else {
        snprintf(out, n, "%s", p);
    }
}

static void load(void)
{
    const char *e = getenv("EMBER_MKL");
    const char *from = "EMBER_MKL";
    if (e && *e && off_word(e)) {
        snprintf(state, sizeof state, "off (EMBER_MKL=%s)", e);
        return;
    }
    if (!e || !*e) {
        e = EMBER_MKL_DEFAULT;
        from = "the build's -Dmkl_root";
    }
    if (!*e) {
        snprintf(state, sizeof state, "not asked for (EMBER_MKL or meson -Dmkl_root; tools/fetch-mkl)");
        return;
    }
    if (em__on_valgrind() && !getenv("EMBER_GEMM")) {
        snprintf(state, sizeof state, "off under valgrind");
        return;
    }
    char path[4096];
    resolve(e, path, sizeof path);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(state, sizeof state, "failed to load %s (from %s): %s", path, from, dlerror());
        fprintf(stderr, "ember: oneMKL stays off: %s\n", state);
        return;
    }
    int_fn layer = (int_fn)dlsym(h, "MKL_Set_Threading_Layer");
    int_fn iface = (int_fn)dlsym(h, "MKL_Set_Interface_Layer");
    int_fn cbwr = (int_fn)dlsym(h, "MKL_CBWR_Set");
    version_fn ver = (version_fn)dlsym(h, "MKL_Get_Version_String");
    sgemm_fn sg = (sgemm_fn)dlsym(h, "cblas_sgemm");
    int_fn th = (int_fn)dlsym(h, "MKL_Set_Num_Threads_Local");
    if (!layer || !iface || !cbwr || !ver || !sg || !th) {
        snprintf(state, sizeof state, "%s (from %s) lacks oneMKL's symbols (cblas_sgemm, MKL_Set_Threading_Layer, ...)",
                 path, from);
        fprintf(stderr, "ember: oneMKL stays off: %s\n", state);
        dlclose(h);
        return;
    }
    /* the layers must be chosen before MKL's first computation; -1: refused */
    if (layer(MKL_THREADING_GNU) != MKL_THREADING_GNU || iface(MKL_INTERFACE_LP64) != MKL_INTERFACE_LP64 ||
        cbwr(MKL_CBWR_AUTO) != MKL_CBWR_SUCCESS) {
        snprintf(state, sizeof state, "%s (from %s) refused the GNU threading layer, LP64 or CNR mode", path, from);
        fprintf(stderr, "ember: oneMKL stays off: %s\n", state);
        return;   /* not closed: MKL may have started its layers */
    }
    ver(version, (int)sizeof version);
    version[sizeof version - 1] = 0;
    snprintf(state, sizeof state, "%s (%s, from %s)", version, path, from);
    mkl_threads_local = th;
    mkl_bf16 = (bf16gemm_fn)dlsym(h, "cblas_gemm_bf16bf16f32");
    mkl_sgemm = sg;
}

bool em__mkl_available(void)
{
    pthread_once(&once, load);
    return mkl_sgemm != NULL;
}

const char *em__mkl_version(void)
{
    return em__mkl_available() ? version : "";
}

const char *em__mkl_status(void)
{
    pthread_once(&once, load);
    return state;
}

bool em__mkl_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                   const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (!em__mkl_available()) return false;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) return false;
    mkl_threads_local(em_num_threads());
    mkl_sgemm(MKL_ROW_MAJOR, ta ? MKL_TRANS : MKL_NO_TRANS, tb ? MKL_TRANS : MKL_NO_TRANS, (int)m, (int)n, (int)k,
              alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return true;
}

bool em__mkl_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t lda,
                       const uint16_t *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (!em__mkl_available() || !mkl_bf16) return false;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX) return false;
    mkl_threads_local(em_num_threads());
    mkl_bf16(MKL_ROW_MAJOR, ta ? MKL_TRANS : MKL_NO_TRANS, tb ? MKL_TRANS : MKL_NO_TRANS, (int)m, (int)n, (int)k, 1.0f,
             a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    return true;
}
