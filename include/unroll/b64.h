/* Base64 (RFC 4648), padded, in the standard alphabet (zarr2 fill values) or the URL-safe
 * one (Orbax's `_sharding` member names). */
#ifndef UNROLL_B64_H
#define UNROLL_B64_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <stddef.h>

typedef enum { UR_B64_STD = 0, UR_B64_URL = 1 } ur_b64_alphabet;

/* Append the padded encoding of n bytes to out. */
int ur_b64_encode(ur_buf *out, const void *p, size_t n, ur_b64_alphabet alphabet, ur_err *err);

/* Append the bytes that the n characters at s encode. UR_ECORRUPT (with the offset) for a
 * length that is not a multiple of 4, a character outside the alphabet, or misplaced '='. */
int ur_b64_decode(ur_buf *out, const char *s, size_t n, ur_b64_alphabet alphabet, ur_err *err);

#endif
