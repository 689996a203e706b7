/* Helpers shared by the fuzz targets (static, header-only; each fuzz_<name>.c still defines only
 * LLVMFuzzerTestOneInput). Built both by clang with libFuzzer (-DUR_FUZZ=ON) and by gcc into the
 * replay binaries (fuzz_replay.c). */
#ifndef UNROLL_FUZZ_COMMON_H
#define UNROLL_FUZZ_COMMON_H

#include "unroll/crc32c.h"
#include "unroll/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort (a finding) unless cond holds: used for invariants every decoder must keep. */
#define fz_check(cond) fz_check_at((cond), #cond, __FILE__, __LINE__)

static inline void fz_check_at(int ok, const char *what, const char *file, int line)
{
    if (!ok) {
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
        abort();
    }
}

/* Every failure must carry a code and a one-line message. */
static inline void fz_check_err(int rc, const ur_err *err)
{
    if (rc < 0) {
        fz_check(err->code == rc);
        fz_check(err->msg[0] != '\0');
        fz_check(memchr(err->msg, '\0', sizeof err->msg) != NULL);
        fz_check(strchr(err->msg, '\n') == NULL);
    }
}

/* A NUL-terminated copy of the input (for the text parsers); NULL when out of memory. */
static inline char *fz_text(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s != NULL) {
        if (size > 0) {
            memcpy(s, data, size);
        }
        s[size] = '\0';
    }
    return s;
}

/* A copy of an OCDBT object with its magic, length field and CRC-32C rewritten so that the
 * fuzzer's mutations reach the body decoder (the envelope checks have their own target). */
static inline uint8_t *fz_envelope_fixup(const uint8_t *data, size_t size, uint32_t magic)
{
    uint8_t *p = malloc(size > 0 ? size : 1);
    uint32_t crc;
    if (p == NULL) {
        return NULL;
    }
    if (size > 0) {
        memcpy(p, data, size);
    }
    if (size >= 16) {
        for (int i = 0; i < 4; i++) {
            p[i] = (uint8_t)(magic >> (24 - 8 * i));
        }
        for (int i = 0; i < 8; i++) {
            p[4 + i] = (uint8_t)((uint64_t)size >> (8 * i));
        }
        crc = ur_crc32c(0, p, size - 4);
        for (int i = 0; i < 4; i++) {
            p[size - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
        }
    }
    return p;
}

/* Input starts with the object's magic (big-endian): an enveloped object. */
static inline int fz_has_magic(const uint8_t *data, size_t size, uint32_t magic)
{
    return size >= 4 && ((uint32_t)data[0] << 24 | (uint32_t)data[1] << 16 |
                         (uint32_t)data[2] << 8 | (uint32_t)data[3]) == magic;
}

#endif
