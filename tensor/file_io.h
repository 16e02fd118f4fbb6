/* ember — writing a file descriptor fully (tensor/readfile.c, beside
 * em__read_file): the safetensors writer and the DOT graph writer. Internal. */
#ifndef EMBER_TENSOR_FILE_IO_H
#define EMBER_TENSOR_FILE_IO_H

#include <stdbool.h>
#include <stddef.h>

/* Writes the n bytes at p to fd, retrying after EINTR and short writes;
 * false (errno set by write) at the first other failure. */
bool em__write_all(int fd, const void *p, size_t n);

#endif
