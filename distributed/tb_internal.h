/* ember — distributed/tensorboard.c internals, for its tests (not installed). */
#ifndef EMBER_TB_INTERNAL_H
#define EMBER_TB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli) of n bytes, unmasked, as TFRecord's framing uses it. */
uint32_t em__crc32c(const void *data, size_t n);

#endif
