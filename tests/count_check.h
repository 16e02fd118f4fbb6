/* ember tests — the counting CHECK of the plain single-process GPU tests
 * (test_cuda, test_cuda_sdpa: no Check, since a CUDA context does not survive
 * fork()). Every CHECK counts in `checks`; a failed one counts in `failures`
 * and prints file:line and the message; main reports both and returns
 * non-zero when failures > 0. */
#ifndef EMBER_TEST_COUNT_CHECK_H
#define EMBER_TEST_COUNT_CHECK_H

#include <stdio.h>

static int failures, checks;

#define CHECK(cond, ...)                                         \
    do {                                                         \
        checks++;                                                \
        if (!(cond)) {                                           \
            failures++;                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fputc('\n', stderr);                                 \
        }                                                        \
    } while (0)

#endif
