/* CRC-32C (Castagnoli, reflected 0x82F63B78, init and final xor 0xFFFFFFFF): the checksum
 * of OCDBT objects and of zarr3's crc32c codec. Check value of "123456789": 0xE3069283. */
#ifndef UNROLL_CRC32C_H
#define UNROLL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend `crc` (start with 0) over n bytes: ur_crc32c(ur_crc32c(0, a, n), b, m) is the
 * CRC of a||b. */
uint32_t ur_crc32c(uint32_t crc, const void *p, size_t n);

#endif
