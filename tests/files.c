/* ember tests — the scratch directory and whole-file reads and writes
 * (check_util.h, "files"). */
#include "check_util.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char scratch[512];

const char *tu_scratch_new(const char *tag)
{
    const char *root = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/ember-%s-XXXXXX", root && *root ? root : "/tmp", tag);
    if (mkdtemp(scratch)) return scratch;
    int e = errno;
    scratch[0] = 0;
    errno = e;
    return NULL;
}

const char *tu_scratch(void) { return scratch; }

static const char *fixture_tag = "test";
static void scratch_setup(void) { ck_assert_ptr_nonnull(tu_scratch_new(fixture_tag)); }
static void scratch_teardown(void) { ck_assert_int_eq(tu_scratch_remove(), 0); }

TCase *tu_scratch_per_test(TCase *tc, const char *tag)
{
    fixture_tag = tag;
    tcase_add_checked_fixture(tc, scratch_setup, scratch_teardown);
    return tc;
}

int tu_run_suite_scratch(Suite *s, const char *tag)
{
    if (!tu_scratch_new(tag)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = tu_run_suite(s);
    tu_scratch_remove();   /* with what failed tests left behind */
    return rc;
}

const char *tu_scratch_path(const char *name)
{
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", scratch, name);
    return b;
}

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int tu_remove_tree(const char *dir) { return nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS); }

int tu_scratch_remove(void)
{
    if (!scratch[0]) return 0;
    int rc = tu_remove_tree(scratch);
    scratch[0] = 0;
    return rc;
}

char *tu_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    ck_assert_msg(fread(b, 1, (size_t)len, f) == (size_t)len, "cannot read %s", path);
    fclose(f);
    b[len] = 0;
    if (n) *n = (size_t)len;
    return b;
}

void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_msg(fwrite(data, 1, n, f) == n && fclose(f) == 0, "cannot write %s", path);
}

void tu_find_ember(char *out, size_t size, const char *argv0)
{
    const char *env = getenv("EMBER_CLI");
    if (env && *env) {
        snprintf(out, size, "%s", env);
        return;
    }
    const char *slash = strrchr(argv0, '/');
    int dir = slash ? (int)(slash - argv0) : 1;
    snprintf(out, size, "%.*s/../cli/ember", dir, slash ? argv0 : ".");
}

char *tu_run_ember(const char *cli, const char *command, const char *args, const char *input, int *status)
{
    static char out[8192];
    char cmd[4096];
    const char *in = tu_scratch_path("cli-input.txt");
    tu_write_text(in, input);
    snprintf(cmd, sizeof cmd, "'%s' %s %s < '%s' 2>&1", cli, command, args, in);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    *status = pclose(f);
    return out;
}
