/* A sticky cursor over an untrusted byte blob (docs/conventions.md §4; TensorStore FinalizeReader,
 * curl strparse). Reads past the end return 0 and set `failed`; check once at the end
 * with ur_rd_finish. The blob is borrowed, never copied. */
#ifndef UNROLL_RD_H
#define UNROLL_RD_H

#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ur_rd {
    const uint8_t *p;
    size_t len;
    size_t pos;
    int failed; /* sticky: set by the first read that could not be satisfied */
    size_t fail_pos; /* where that first failure happened */
} ur_rd;

void ur_rd_init(ur_rd *rd, const void *p, size_t len);
size_t ur_rd_remaining(const ur_rd *rd);
uint8_t ur_rd_u8(ur_rd *rd);
uint16_t ur_rd_u16le(ur_rd *rd);
uint32_t ur_rd_u32le(ur_rd *rd);
uint32_t ur_rd_u32be(ur_rd *rd);
uint64_t ur_rd_u64le(ur_rd *rd);
/* LEB128 as riegeli reads it: at most 10 bytes; the 10th byte must be < 2. */
uint64_t ur_rd_varint64(ur_rd *rd);
/* At most 5 bytes; the 5th must be < 0x10. */
uint32_t ur_rd_varint32(ur_rd *rd);
/* Borrow the next n bytes (NULL and failed when fewer remain). */
const uint8_t *ur_rd_bytes(ur_rd *rd, size_t n);
/* Mark the cursor failed at the current position (a caller-detected bad value). */
void ur_rd_fail(ur_rd *rd);
/* UR_OK when nothing failed and every byte was consumed; else UR_ECORRUPT naming `what`
 * and the offset. */
int ur_rd_finish(const ur_rd *rd, const char *what, ur_err *err);
/* UR_OK when nothing failed (trailing bytes allowed). */
int ur_rd_check(const ur_rd *rd, const char *what, ur_err *err);

#endif
