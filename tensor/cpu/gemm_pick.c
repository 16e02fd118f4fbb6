/* ember — which library runs an f32 GEMM, decided by measurement (issue 17).
 *
 * Contract: em__gemm_pick returns EM__GEMM_OPENBLAS, EM__GEMM_ONEDNN or, where
 * oneMKL is loaded (mkl.c), EM__GEMM_MKL for a call, the same answer for every
 * call of one *class*:
 *
 *   (trans_a, trans_b, m, n, k rounded up to a size class, threads)
 *
 * A size class is the smallest 2^j or 3 * 2^(j-1) at or above the size, so a
 * model's widths (384, 768, 1536, 3072) are classes of their own and a batch
 * whose token count changes every step (dynamic padding) meets a few classes,
 * not hundreds. threads is 1 inside an OpenMP region (the batched matmul's
 * single-threaded calls), else em_num_threads().
 *
 * On the first call of a class the candidates (OpenBLAS's cblas_sgemm,
 * oneDNN's dnnl_sgemm, and oneMKL's cblas_sgemm where loaded) are timed on
 * that call's own operands, round-robin, into a scratch C; the fastest (its
 * minimum over the rounds) wins.
 *
 * Determinism: the libraries round differently, so the choice must not change
 * from run to run, nor differ between the ranks of one machine. Choices are
 * therefore kept in a file, and a class's choice is a pure function of it:
 *
 *   $EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else $HOME/.cache/ember,
 *   file gemm-f32-<16 hex digits>.tsv, the digits a hash of the CPU's model
 *   name, OpenBLAS's and oneDNN's versions and oneMKL's where loaded (another
 *   machine or library set gets another file).
 *
 * A miss takes an exclusive flock on the file, re-reads it (another process
 * may have just measured the class), measures only if the class is still
 * missing, and appends one line before unlocking. So two ranks starting
 * together wait for one another and use one measurement. EMBER_CACHE_DIR=none
 * (or empty) keeps choices in memory only: then a new process may choose
 * differently. When the directory cannot be made or the file opened, the
 * same holds, and EMBER_VERBOSE=1 says why.
 *
 * A line of the file:
 *
 *   f32 <TA><TB> <m> <n> <k> <threads> <winner> <us openblas> <us onednn> [<us mkl>]
 *
 * (the last only in a file of a run with oneMKL; '#' starts a comment). With
 * oneMKL, bf16 GEMMs with an f32 C (gemm_bf16.c: the weight gradients, the
 * activation-gradient sink) are picked too, oneDNN against oneMKL, on lines
 *
 *   bf16 <TA><TB> <m> <n> <k> <threads> <winner> 0 <us onednn> <us mkl>
 *
 * A line that does not parse is skipped, with a warning on stderr naming the
 * file and line (once per process); it never stops a run. The file is only
 * ever appended to, one whole line per write(); a write that fails (a full
 * disk) is cut back off, and the choice stays in memory. A file that is read-
 * only (a read-only cache mount) is still read, under a shared lock; new
 * choices then stay in memory, said once on stderr. Something at the path that
 * is not a regular file (a FIFO, a device) is never opened for reading, and a
 * cache path too long for the buffers is refused by name: both said once, and
 * the choices stay in memory.
 *
 * EMBER_VERBOSE=1 prints each class's choice once per process, with the
 * timings and where the choice came from (measured, or the file).
 *
 * The table holds 1,536 classes (three quarters of its slots). Past that, a
 * new class gets EMBER_GEMM=rule's answer (gemm.c) and is neither measured nor
 * kept, so a program with very many shapes never measures on every call.
 */
#include "tensor/cpu/cpu.h"

#include "ember_config.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *openblas_get_config(void);
#if EMBER_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

typedef struct {
    bool used;
    char dt;                  /* 'f': f32; 'b': bf16 operands, f32 C (oneMKL against oneDNN) */
    char ta, tb;
    int threads;
    int64_t m, n, k;          /* size classes */
    int lib;                  /* EM__GEMM_OPENBLAS, EM__GEMM_ONEDNN or EM__GEMM_MKL */
    bool reported;            /* EMBER_VERBOSE line printed */
} pick_entry;

#define TABLE_SLOTS 2048      /* power of two; a class per slot, open addressing */

static pick_entry table[TABLE_SLOTS];
static int table_count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char cache_path[4200];   /* "" = memory only */
static bool cache_init_done;

int64_t em__gemm_size_class(int64_t x)
{
    if (x > ((int64_t)1 << 61)) return x;   /* no class above 2^61 (and no overflow) */
    int64_t p = 1;
    while (p < x) {
        if (p >= 2 && p + p / 2 >= x) return p + p / 2;
        p *= 2;
    }
    return p;
}

static bool verbose(void)
{
    const char *e = getenv("EMBER_VERBOSE");
    return e && *e && strcmp(e, "0") != 0;
}

static uint64_t fnv1a(uint64_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The CPU's model name from /proc/cpuinfo ("unknown" where there is none). */
void em__cpu_model(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *c = strchr(line, ':');
        if (!c) break;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        snprintf(buf, n, "%s", c);
        break;
    }
    fclose(f);
}

void em__gemm_identity(char *buf, size_t n)
{
    char model[256];
    em__cpu_model(model, sizeof model);
#if EMBER_HAVE_ONEDNN
    const dnnl_version_t *v = dnnl_version();
    int len = snprintf(buf, n, "cpu=%s; openblas=%s; onednn=%d.%d.%d %s", model, openblas_get_config(), v->major,
                       v->minor, v->patch, v->hash);
#else
    int len = snprintf(buf, n, "cpu=%s; openblas=%s; onednn=none", model, openblas_get_config());
#endif
    /* without oneMKL the text (so the file) is what it was before oneMKL could join */
    if (em__mkl_available() && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, "; mkl=%s", em__mkl_version());
}

/* Where the choices persist; "" when nowhere (caller holds lock). */
static void cache_init(void)
{
    if (cache_init_done) return;
    cache_init_done = true;
    cache_path[0] = 0;
    const char *dir = getenv("EMBER_CACHE_DIR"), *var = "EMBER_CACHE_DIR";
    char base[4000];
    int len;
    if (dir) {
        if (!*dir || !strcmp(dir, "none")) return;
        len = snprintf(base, sizeof base, "%s", dir);
    } else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME")) {
        var = "XDG_CACHE_HOME";
        len = snprintf(base, sizeof base, "%s/ember", getenv("XDG_CACHE_HOME"));
    } else if (getenv("HOME") && *getenv("HOME")) {
        var = "HOME";
        len = snprintf(base, sizeof base, "%s/.cache/ember", getenv("HOME"));
    } else {
        return;
    }
    if (len < 0 || (size_t)len >= sizeof base - 40) {   /* room for "/gemm-f32-<16 hex>.tsv" */
        fprintf(stderr, "ember: gemm choices stay in memory: the cache directory from %s is %d bytes long, "
                        "more than the %zu this build takes\n", var, len, sizeof base - 40);
        return;
    }
    /* mkdir -p */
    for (char *p = base + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        mkdir(base, 0755);
        *p = '/';
    }
    if (mkdir(base, 0755) != 0 && errno != EEXIST) {
        if (verbose()) fprintf(stderr, "ember: gemm choices stay in memory: cannot make %s: %s\n", base, strerror(errno));
        return;
    }
    char id[1024];
    em__gemm_identity(id, sizeof id);
    snprintf(cache_path, sizeof cache_path, "%s/gemm-f32-%016llx.tsv", base,
             (unsigned long long)fnv1a(1469598103934665603ull, id));
}

static uint64_t key_hash(char dt, char ta, char tb, int threads, int64_t m, int64_t n, int64_t k)
{
    uint64_t h = 1469598103934665603ull;
    int64_t v[7] = {ta, tb, threads, m, n, k, dt};
    for (int i = 0; i < 7; i++) h = (h ^ (uint64_t)v[i]) * 1099511628211ull;
    return h;
}

/* The entry for a class, or the empty slot where it goes (NULL when full). */
static pick_entry *slot(char dt, char ta, char tb, int threads, int64_t m, int64_t n, int64_t k)
{
    uint64_t h = key_hash(dt, ta, tb, threads, m, n, k);
    for (int i = 0; i < TABLE_SLOTS; i++) {
        pick_entry *e = &table[(h + (uint64_t)i) & (TABLE_SLOTS - 1)];
        if (!e->used) return table_count < TABLE_SLOTS * 3 / 4 ? e : NULL;
        if (e->dt == dt && e->ta == ta && e->tb == tb && e->threads == threads && e->m == m && e->n == n &&
            e->k == k)
            return e;
    }
    return NULL;
}

static void remember(char dt, char ta, char tb, int threads, int64_t m, int64_t n, int64_t k, int lib)
{
    pick_entry *e = slot(dt, ta, tb, threads, m, n, k);
    if (!e || e->used) return;   /* full, or known: the first choice stays */
    *e = (pick_entry){.used = true, .dt = dt, .ta = ta, .tb = tb, .threads = threads, .m = m, .n = n, .k = k,
                      .lib = lib};
    table_count++;
}

#define BIG ((long long)1 << 40)   /* no dimension is larger */

/* Lines of the file already read by this process: their warnings were given. */
static int lines_warned;

/* One line of the file (text, no newline, len bytes; no is its 1-based
 * number): into the table, or a warning (once per process) when it does not
 * parse. */
static void load_line(const char *text, size_t len, int no)
{
    if (len == 0 || text[0] == '#') return;
    char line[512];
    bool fits = len < sizeof line;
    memcpy(line, text, fits ? len : sizeof line - 1);
    line[fits ? len : sizeof line - 1] = 0;
    char dt[8] = "", tr[8] = "", win[16] = "";
    long long m = 0, n = 0, k = 0, th = 0;
    double t0, t1, t2;
    int got = fits ? sscanf(line, "%7s %7s %lld %lld %lld %lld %15s %lf %lf %lf", dt, tr, &m, &n, &k, &th, win, &t0,
                            &t1, &t2)
                   : 0;
    bool f32 = !strcmp(dt, "f32"), bf16 = !strcmp(dt, "bf16");
    bool ok = ((f32 && (got == 9 || got == 10)) || (bf16 && got == 10)) && strlen(tr) == 2 &&
              strchr("NT", tr[0]) && strchr("NT", tr[1]) && m > 0 && n > 0 && k > 0 && m <= BIG && n <= BIG &&
              k <= BIG && th > 0 && th <= 4096 && m == em__gemm_size_class(m) && n == em__gemm_size_class(n) &&
              k == em__gemm_size_class(k) &&
              ((!strcmp(win, "openblas") && f32) || !strcmp(win, "onednn") || (!strcmp(win, "mkl") && got == 10));
    if (!ok) {
        if (no > lines_warned)
            fprintf(stderr, "ember: %s:%d: not a GEMM choice line (skipped): %.80s\n", cache_path, no, line);
        return;
    }
    remember(f32 ? 'f' : 'b', tr[0], tr[1], (int)th, m, n, k,
             !strcmp(win, "onednn") ? EM__GEMM_ONEDNN : !strcmp(win, "mkl") ? EM__GEMM_MKL : EM__GEMM_OPENBLAS);
}

#define FILE_CAP ((size_t)4 << 20)   /* 1,536 classes take about 100 KB; a larger file is read this far */

/* Reads every choice of the open, locked file fd (from its start) into the
 * table. *size gets the file's length, *ends_nl whether its last byte is a
 * newline (an empty file counts as ending in one). */
static void load(int fd, off_t *size, bool *ends_nl)
{
    struct stat sb;
    *size = fstat(fd, &sb) == 0 ? sb.st_size : 0;
    *ends_nl = true;
    if (*size <= 0) return;
    size_t cap = (size_t)*size < FILE_CAP ? (size_t)*size : FILE_CAP;
    char *buf = malloc(cap);
    if (!buf) return;   /* no room to read: the choices of this miss are measured */
    size_t got = 0;
    while (got < cap) {
        ssize_t r = pread(fd, buf + got, cap - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got == (size_t)*size) *ends_nl = buf[got - 1] == '\n';
    else *ends_nl = false;   /* its end unseen: the next line starts on a fresh one (an empty line is skipped) */
    if (got < (size_t)*size && lines_warned == 0)
        fprintf(stderr, "ember: %s: %lld bytes; only the first %zu are read\n", cache_path, (long long)*size, got);
    int no = 0;
    for (size_t at = 0; at < got;) {
        const char *nl = memchr(buf + at, '\n', got - at);
        size_t len = nl ? (size_t)(nl - (buf + at)) : got - at;
        load_line(buf + at, len, ++no);
        at += len + 1;
    }
    if (no > lines_warned) lines_warned = no;
    free(buf);
}

/* Says msg about the cache file once per process (the file's trouble does not
 * change from miss to miss). */
static void say_once(bool *said, const char *msg, int err)
{
    if (*said) return;
    *said = true;
    fprintf(stderr, "ember: %s: %s%s%s\n", cache_path, msg, err ? ": " : "", err ? strerror(err) : "");
}
static bool said_readonly, said_not_regular, said_write, said_lock;

/* Opens and locks the cache file for one miss: the descriptor (-1: choices
 * stay in memory), and whether new choices may be appended. */
static int open_cache(bool *writable)
{
    *writable = false;
    if (!cache_path[0]) return -1;
    int fd = open(cache_path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0 && (errno == EROFS || errno == EACCES || errno == EPERM)) {
        int err = errno;
        fd = open(cache_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd >= 0) say_once(&said_readonly, "cannot be written; its choices are read, new ones stay in memory", err);
        else errno = err;
    } else if (fd >= 0) {
        *writable = true;
    }
    if (fd < 0) {
        if (verbose()) fprintf(stderr, "ember: gemm choices stay in memory: cannot open %s: %s\n", cache_path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {   /* a FIFO would block the read, a device worse */
        say_once(&said_not_regular, "not a regular file; gemm choices stay in memory", 0);
        close(fd);
        return -1;
    }
    if (flock(fd, *writable ? LOCK_EX : LOCK_SH) != 0) {
        say_once(&said_lock, "cannot be locked; gemm choices stay in memory", errno);
        close(fd);
        return -1;
    }
    return fd;
}

/* Appends text (len bytes) to the locked file fd, whose length was size: one
 * write(); on a short or failed write the file is cut back to size, so no
 * half line is left. */
static bool append(int fd, off_t size, const char *text, size_t len)
{
    ssize_t w;
    do w = write(fd, text, len);
    while (w < 0 && errno == EINTR);
    if (w == (ssize_t)len) return true;
    int err = w < 0 ? errno : ENOSPC;
    if (w > 0 && ftruncate(fd, size) != 0) err = errno;
    say_once(&said_write, "cannot be written to; new gemm choices stay in memory", err);
    return false;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Times the libraries on the call's operands (C in scratch); returns the
 * winner and the best times in t[0] (OpenBLAS), t[1] (oneDNN) and, where
 * oneMKL is loaded, t[2] (else 0), seconds. bf16 (dt 'b'): oneDNN against
 * oneMKL (OpenBLAS has no bf16 GEMM; t[0] = 0). */
static int measure(char dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                   const void *b, int64_t ldb, double t[3])
{
    /* plain malloc: a failure here is no error of the caller's, only no measurement */
    float *c = malloc((size_t)(m * n) * sizeof(float));
    if (!c) return EM__GEMM_ONEDNN;   /* no room to measure: oneDNN, the usual winner */
    const int libs[3] = {EM__GEMM_OPENBLAS, EM__GEMM_ONEDNN, EM__GEMM_MKL};
    const int first = dt == 'b' ? 1 : 0, nlib = em__mkl_available() ? 3 : 2;
    t[0] = t[1] = t[2] = 1e30;
    double spent = 0;
    /* rounds 0 and 1 warm up (JIT, packing buffers, caches); then at least 5
     * timed rounds and 50 ms, at most 20 rounds: on a 2-core VM fewer rounds
     * let noise pick the loser of a 10% gap. Past 1 s in all, one timed round
     * is enough (such a product's timing is not noise-bound). */
    for (int r = 0; r < 22; r++) {
        for (int i = first; i < nlib; i++) {
            double s = now_s();
            if (dt == 'f') em__gemm_f32_with(libs[i], ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n);
            else em__gemm_bf16_f32_with(libs[i], ta, tb, m, n, k, a, lda, b, ldb, c, n, false);
            double d = now_s() - s;
            if (r > 1 && d < t[i]) t[i] = d;
            spent += d;
        }
        if ((r >= 6 && spent > 0.05) || (r >= 2 && spent > 1.0)) break;   /* a big product: 1 timed round */
    }
    free(c);
    int best = first;
    for (int i = first + 1; i < nlib; i++)
        if (t[i] < t[best]) best = i;
    if (nlib == 2) t[2] = 0;
    if (first) t[0] = 0;
    return libs[best];
}

static const char *lib_name(int lib)
{
    return lib == EM__GEMM_ONEDNN ? "onednn" : lib == EM__GEMM_MKL ? "mkl" : "openblas";
}

/* EMBER_VERBOSE's line for a class: its timings when measured here, else where the choice came from. */
static void report(char dt, char ta, char tb, int64_t m, int64_t n, int64_t k, int64_t mc, int64_t nc, int64_t kc,
                   int threads, int lib, const double t[3], const char *from, const char *where)
{
    const char *dts = dt == 'f' ? "f32" : "bf16";
    char ob[48] = "", mk[48] = "";
    if (t[0] > 0) snprintf(ob, sizeof ob, "openblas %.3f ms, ", t[0] * 1e3);
    if (t[2] > 0) snprintf(mk, sizeof mk, ", mkl %.3f ms", t[2] * 1e3);
    if (t[1] > 0)
        fprintf(stderr, "ember: gemm %s %c%c %lldx%lldx%lld (class %lldx%lldx%lld), %d thread%s: %sonednn %.3f ms%s "
                        "-> %s (%s %s)\n", dts, ta, tb, (long long)m, (long long)n, (long long)k, (long long)mc,
                (long long)nc, (long long)kc, threads, threads == 1 ? "" : "s", ob, t[1] * 1e3, mk, lib_name(lib), from,
                where);
    else
        fprintf(stderr, "ember: gemm %s %c%c class %lldx%lldx%lld, %d thread%s -> %s (%s %s)\n", dts, ta, tb,
                (long long)mc, (long long)nc, (long long)kc, threads, threads == 1 ? "" : "s", lib_name(lib), from,
                where);
}

/* EMBER_GEMM=rule's answer (bf16: oneDNN, as without oneMKL) */
static int rule_lib(char dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k)
{
    return dt == 'b' || em__gemm_prefers_onednn(trans_a, trans_b, m, n, k) ? EM__GEMM_ONEDNN : EM__GEMM_OPENBLAS;
}

static int pick(char dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                const void *b, int64_t ldb)
{
    char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
    int threads = omp_in_parallel() ? 1 : em_num_threads();
    int64_t mc = em__gemm_size_class(m), nc = em__gemm_size_class(n), kc = em__gemm_size_class(k);
    double t[3] = {0, 0, 0};
    pthread_mutex_lock(&lock);
    pick_entry *e = slot(dt, ta, tb, threads, mc, nc, kc);
    if (!e || e->used) {
        /* known; or a full table (1,536 classes): the fixed rule rather than a
         * measurement on every call of every class not kept */
        int lib = e ? e->lib : rule_lib(dt, trans_a, trans_b, m, n, k);
        bool say = e && !e->reported;   /* known from the file, first met now */
        if (say) e->reported = true;
        pthread_mutex_unlock(&lock);
        if (say && verbose()) report(dt, ta, tb, m, n, k, mc, nc, kc, threads, lib, t, "from", cache_path);
        return lib;
    }
    /* a miss: the file first (another process may know the class), else measure */
    cache_init();
    bool writable = false, ends_nl = true;
    off_t size = 0;
    int fd = open_cache(&writable);
    if (fd >= 0) load(fd, &size, &ends_nl);
    e = slot(dt, ta, tb, threads, mc, nc, kc);
    int lib;
    const char *from;
    bool saved = false;
    if (!e) {   /* the file filled the table: as a full table above, nothing measured or written */
        lib = rule_lib(dt, trans_a, trans_b, m, n, k);
        from = "table full, the fixed rule;";
    } else if (e->used) {
        lib = e->lib;
        from = "from";
        saved = fd >= 0;
    } else {
        lib = measure(dt, trans_a, trans_b, m, n, k, a, lda, b, ldb, t);
        remember(dt, ta, tb, threads, mc, nc, kc, lib);
        if (fd >= 0 && writable) {
            char text[1600];
            size_t len = 0;
            if (!ends_nl) text[len++] = '\n';   /* a last line left without one: never glue onto it */
            if (size == 0) {
                char id[1024];
                em__gemm_identity(id, sizeof id);
                len += (size_t)snprintf(text + len, sizeof text - len,
                                        "# ember GEMM choices (tensor/cpu/gemm_pick.c); %s\n"
                                        "# dtype trans m n k threads winner us_openblas us_onednn%s (m n k: size classes)\n",
                                        id, em__mkl_available() ? " us_mkl" : "");
                if (len >= sizeof text) len = sizeof text - 1;
            }
            char mkl_us[32] = "";   /* the fourth timing, only in a file of a run with oneMKL */
            if (em__mkl_available()) snprintf(mkl_us, sizeof mkl_us, " %.1f", t[2] * 1e6);
            int n_line = snprintf(text + len, sizeof text - len, "%s %c%c %lld %lld %lld %d %s %.1f %.1f%s\n",
                                  dt == 'f' ? "f32" : "bf16", ta, tb, (long long)mc, (long long)nc, (long long)kc,
                                  threads, lib_name(lib), t[0] * 1e6, t[1] * 1e6, mkl_us);
            saved = n_line > 0 && len + (size_t)n_line < sizeof text && append(fd, size, text, len + (size_t)n_line);
        }
        from = saved ? "measured, saved to" : "measured, kept in memory;";
    }
    if (fd >= 0) close(fd);   /* releases the lock */
    e = slot(dt, ta, tb, threads, mc, nc, kc);
    bool say = verbose() && e && e->used && !e->reported;
    if (e && e->used) e->reported = true;
    pthread_mutex_unlock(&lock);
    if (say || (!e && verbose()))
        report(dt, ta, tb, m, n, k, mc, nc, kc, threads, lib, t, from, saved ? cache_path : "this process");
    return lib;
}

int em__gemm_pick(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                  const float *b, int64_t ldb)
{
    return pick('f', trans_a, trans_b, m, n, k, a, lda, b, ldb);
}

int em__gemm_pick_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                       const void *b, int64_t ldb)
{
    return pick('b', trans_a, trans_b, m, n, k, a, lda, b, ldb);
}

int em__gemm_known(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int threads)
{
    pthread_mutex_lock(&lock);
    pick_entry *e = slot('f', trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', threads, em__gemm_size_class(m),
                         em__gemm_size_class(n), em__gemm_size_class(k));
    int lib = e && e->used ? e->lib : 0;
    pthread_mutex_unlock(&lock);
    return lib;
}

const char *em__gemm_cache_file(void)
{
    pthread_mutex_lock(&lock);
    cache_init();
    pthread_mutex_unlock(&lock);
    return cache_path;
}

void em__gemm_forget(void)
{
    pthread_mutex_lock(&lock);
    memset(table, 0, sizeof table);
    table_count = 0;
    cache_init_done = false;
    lines_warned = 0;
    said_readonly = said_not_regular = said_write = said_lock = false;
    pthread_mutex_unlock(&lock);
}
