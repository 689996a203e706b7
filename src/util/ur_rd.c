/* ur_rd: sticky cursor over untrusted bytes. */
#include "unroll/rd.h"

void ur_rd_init(ur_rd *rd, const void *p, size_t len)
{
    rd->p = p;
    rd->len = len;
    rd->pos = 0;
    rd->failed = 0;
    rd->fail_pos = 0;
}

size_t ur_rd_remaining(const ur_rd *rd)
{
    return rd->failed ? 0 : rd->len - rd->pos;
}

void ur_rd_fail(ur_rd *rd)
{
    if (!rd->failed) {
        rd->failed = 1;
        rd->fail_pos = rd->pos;
    }
}

const uint8_t *ur_rd_bytes(ur_rd *rd, size_t n)
{
    const uint8_t *q;
    if (rd->failed || n > rd->len - rd->pos) {
        ur_rd_fail(rd);
        return NULL;
    }
    q = rd->p + rd->pos;
    rd->pos += n;
    return q;
}

uint8_t ur_rd_u8(ur_rd *rd)
{
    const uint8_t *q = ur_rd_bytes(rd, 1);
    return q ? q[0] : 0;
}

uint16_t ur_rd_u16le(ur_rd *rd)
{
    const uint8_t *q = ur_rd_bytes(rd, 2);
    return q ? (uint16_t)((unsigned)q[0] | ((unsigned)q[1] << 8)) : 0;
}

uint32_t ur_rd_u32le(ur_rd *rd)
{
    const uint8_t *q = ur_rd_bytes(rd, 4);
    if (q == NULL) {
        return 0;
    }
    return (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) |
           ((uint32_t)q[3] << 24);
}

uint32_t ur_rd_u32be(ur_rd *rd)
{
    const uint8_t *q = ur_rd_bytes(rd, 4);
    if (q == NULL) {
        return 0;
    }
    return ((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) |
           (uint32_t)q[3];
}

uint64_t ur_rd_u64le(ur_rd *rd)
{
    const uint8_t *q = ur_rd_bytes(rd, 8);
    uint64_t v = 0;
    if (q == NULL) {
        return 0;
    }
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | q[i];
    }
    return v;
}

/* riegeli's limits: max_bytes groups, and the last group must fit the remaining bits. */
static uint64_t varint(ur_rd *rd, int max_bytes, uint8_t last_limit)
{
    uint64_t v = 0;
    size_t start = rd->pos;
    for (int i = 0; i < max_bytes; i++) {
        const uint8_t *q = ur_rd_bytes(rd, 1);
        if (q == NULL) {
            return 0;
        }
        if (i == max_bytes - 1 && *q >= last_limit) {
            rd->pos = start;
            ur_rd_fail(rd);
            return 0;
        }
        v |= (uint64_t)(*q & 0x7f) << (7 * i);
        if ((*q & 0x80) == 0) {
            return v;
        }
    }
    rd->pos = start;
    ur_rd_fail(rd);
    return 0;
}

uint64_t ur_rd_varint64(ur_rd *rd)
{
    return varint(rd, 10, 0x02);
}

uint32_t ur_rd_varint32(ur_rd *rd)
{
    return (uint32_t)varint(rd, 5, 0x10);
}

int ur_rd_check(const ur_rd *rd, const char *what, ur_err *err)
{
    if (rd->failed) {
        return ur_err_set_at(err, UR_ECORRUPT, rd->fail_pos, "%s: truncated or malformed", what);
    }
    return UR_OK;
}

int ur_rd_finish(const ur_rd *rd, const char *what, ur_err *err)
{
    int rc = ur_rd_check(rd, what, err);
    if (rc < 0) {
        return rc;
    }
    if (rd->pos != rd->len) {
        return ur_err_set_at(err, UR_ECORRUPT, rd->pos, "%s: %zu unexpected trailing bytes", what,
                             rd->len - rd->pos);
    }
    return UR_OK;
}
