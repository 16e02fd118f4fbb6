/* ember — reading a whole file from outside (tensor_internal.h em__read_file):
 * the one reader behind vocab files, data tables, config.json and
 * tokenizer.json; and writing a file descriptor fully (file_io.h). */
#include "tensor/tensor_internal.h"
#include "tensor/file_io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool em__write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        c += w;
        n -= (size_t)w;
    }
    return true;
}

FILE *em__fopen_regular(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        errno = S_ISDIR(sb.st_mode) ? EISDIR : EM__ENOTREG;
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

const char *em__strerror(int err)
{
    return err == EM__ENOTREG ? "not a regular file (a FIFO, a socket or a device)" : strerror(err);
}

em_status em__read_file(const char *path, size_t max, char **data, size_t *size)
{
    *data = NULL, *size = 0;
    FILE *f = em__fopen_regular(path);
    if (!f) return em__fail(errno == ENOENT ? EM_ERR_NOT_FOUND : EM_ERR_IO, "%s: %s", path, em__strerror(errno));
    em_status s = EM_OK;
    size_t cap = 1 << 16, n = 0;
    char *buf = em__malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (max && cap >= max) {
            s = em__fail(EM_ERR_FORMAT, "%s: larger than %zu MiB; not the file it should be", path, max >> 20);
            break;
        }
        char *nb = cap > SIZE_MAX / 4 ? NULL : em__realloc(buf, 2 * cap + 1);
        if (!nb) {
            em__free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf && !s) s = em__fail(EM_ERR_OOM, "%s: out of memory reading the file", path);
    if (!s && err) s = em__fail(EM_ERR_IO, "%s: read error: %s", path, strerror(err));
    if (s) {
        em__free(buf);
        return s;
    }
    buf[n] = 0;
    *data = buf, *size = n;
    return EM_OK;
}
