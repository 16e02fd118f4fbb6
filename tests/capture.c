/* ember tests — stderr capture (capture.h). */
#include "capture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cap_fd = -1, cap_saved = -1;

int tu_capture_stderr_begin(void)
{
    char path[] = "/tmp/ember_test_stderr_XXXXXX";
    fflush(stderr);
    cap_fd = mkstemp(path);
    if (cap_fd < 0) return -1;
    unlink(path);
    cap_saved = dup(2);
    if (cap_saved < 0 || dup2(cap_fd, 2) < 0) {
        close(cap_fd);
        if (cap_saved >= 0) close(cap_saved);
        cap_fd = cap_saved = -1;
        return -1;
    }
    return 0;
}

char *tu_capture_stderr_end(void)
{
    if (cap_fd < 0) return NULL;
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    off_t n = lseek(cap_fd, 0, SEEK_END);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && (lseek(cap_fd, 0, SEEK_SET) != 0 || read(cap_fd, buf, (size_t)n) != n)) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = 0;
    close(cap_fd);
    cap_fd = cap_saved = -1;
    return buf;
}

int tu_count_of(const char *hay, const char *needle)
{
    int c = 0;
    if (hay)
        for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) c++;
    return c;
}
