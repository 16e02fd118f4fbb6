/* ember — CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), the checksum
 * of safetensors files (their "ember_crc32c" metadata), of checkpoint
 * manifests and of TensorBoard records. SSE4.2's crc32 instruction where the
 * build has it (8 bytes a step), else a table: the same value either way. */
#include "tensor/tensor_internal.h"

#include <pthread.h>
#include <string.h>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#else
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}
#endif

uint32_t em__crc32c_update(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    crc = ~crc;
#if defined(__SSE4_2__)
    uint64_t c = crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
    }
    crc = (uint32_t)c;
    for (; n; p++, n--) crc = _mm_crc32_u8(crc, *p);
#else
    pthread_once(&crc_once, crc_init);
    for (; n; p++, n--) crc = crc_table[(crc ^ *p) & 0xff] ^ (crc >> 8);
#endif
    return ~crc;
}

uint32_t em__crc32c(const void *data, size_t n) { return em__crc32c_update(0, data, n); }
