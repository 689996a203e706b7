/* CRC-32C, slicing-by-8 tables built once on first use. OCDBT nodes are small, but the
 * zarr3 crc32c codec can cover whole chunks, so the byte-at-a-time loop is not enough. */
#include "unroll/crc32c.h"

#include <pthread.h>

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        }
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) {
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
        }
    }
}

uint32_t ur_crc32c(uint32_t crc, const void *p, size_t n)
{
    const uint8_t *b = p;
    pthread_once(&table_once, build_table);
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                             ((uint32_t)b[3] << 24));
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
              table[4][lo >> 24] ^ table[3][b[4]] ^ table[2][b[5]] ^ table[1][b[6]] ^
              table[0][b[7]];
        b += 8;
        n -= 8;
    }
    while (n-- > 0) {
        crc = (crc >> 8) ^ table[0][(crc ^ *b++) & 0xff];
    }
    return ~crc;
}
