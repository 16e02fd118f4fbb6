/* ember — a bounded OpenMP spin, set before libgomp reads its environment
 * (issue 17, "threading that survives a busy machine").
 *
 * libgomp's default wait is active: a thread that finishes its share of a
 * parallel region spins up to 300,000 pause loops (several ms) before it
 * sleeps. When another process shares the cores, those spins take the CPU
 * from the threads still working: a 2-thread training step ran 5-6x slower
 * with one busy process beside it (docs/PERFORMANCE.md, "threading").
 * OMP_WAIT_POLICY=passive avoids that but costs 6-33% on a quiet machine (a
 * futex wake per region). A spin of GOMP_SPINCOUNT=3000 loops (about 0.1 ms)
 * measured within 3% of the active default on a quiet machine, and 2.0x
 * instead of up to 5.6x on a busy one (passive: 1.85x; config B, Xeon).
 *
 * libgomp reads GOMP_SPINCOUNT once, in its own constructor. Setting it from
 * ember's code is too late (libgomp is initialized before the libraries and
 * the program that use it) and from the program's .preinit_array too early
 * (libc's initializer then resets environ). So this is a shared library of
 * its own, whose constructor sets the variable, placed in each program's
 * DT_NEEDED list after libgomp and after every library that uses libgomp
 * (meson.build, ember_dep). glibc (2.36, the DFS sort) walks that list from
 * its end, initializing each entry after its own dependencies: this library
 * (which needs only libc) is then initialized before libgomp, which is
 * reached later, through itself or through OpenBLAS and oneDNN. The ELF rules
 * leave the order of unrelated libraries to the loader, so
 * tests/test_omp_env.sh checks the outcome: libgomp reports the value it runs
 * with (OMP_DISPLAY_ENV).
 *
 * A program of the user's own gets it the same way when it is built with
 * meson's ember_dep; one linked by hand against libember gets libgomp's
 * default unless it links libember-omp-env.so after libgomp, last of all
 * (`-lgomp -lember-omp-env` at the end of the link line, with
 * -Wl,--no-as-needed), or sets GOMP_SPINCOUNT (or OMP_WAIT_POLICY) itself.
 *
 * The user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT always wins: the variable
 * is set only when neither is (set to an empty value counts as not set: libgomp
 * ignores it, and would then spin its own 300,000). It is not removed afterwards: processes this
 * one starts (mpirun's ranks, say) get the same bounded spin.
 *
 * EMBER_OMP_DISPLAY=1 also sets OMP_DISPLAY_ENV=verbose (for that test).
 */
#include <stdlib.h>

__attribute__((constructor)) static void ember_omp_env(void)
{
    const char *w = getenv("OMP_WAIT_POLICY"), *c = getenv("GOMP_SPINCOUNT");
    if ((!w || !*w) && (!c || !*c)) setenv("GOMP_SPINCOUNT", "3000", 1);   /* an empty value chose nothing */
    const char *d = getenv("EMBER_OMP_DISPLAY");
    if (d && *d == '1') setenv("OMP_DISPLAY_ENV", "verbose", 1);
}
