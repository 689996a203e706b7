/* A growable byte buffer with an optional size cap (curl dynbuf). The caller owns the
 * struct; ur_buf_dispose frees the bytes. */
#ifndef UNROLL_BUF_H
#define UNROLL_BUF_H

#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ur_buf {
    uint8_t *data;
    size_t len;
    size_t cap;
    size_t limit; /* 0 = no cap; else appends that would exceed it fail with UR_ECORRUPT */
} ur_buf;

void ur_buf_init(ur_buf *b, size_t limit);
void ur_buf_dispose(ur_buf *b);
/* Keep capacity, forget content. */
void ur_buf_reset(ur_buf *b);
/* Ensure room for `extra` more bytes. UR_ENOMEM, or UR_ECORRUPT past the limit. */
int ur_buf_reserve(ur_buf *b, size_t extra, ur_err *err);
/* The same, growing to exactly that much when it grows: for a size known in advance (a
 * whole file, a decoded node), where doubling would hold up to twice the memory. */
int ur_buf_reserve_exact(ur_buf *b, size_t extra, ur_err *err);
/* Give back the capacity past the content (and its NUL): for a buffer grown by doubling to
 * an unknown size and then kept. */
void ur_buf_fit(ur_buf *b);
int ur_buf_append(ur_buf *b, const void *p, size_t n, ur_err *err);
int ur_buf_append_byte(ur_buf *b, uint8_t byte, ur_err *err);
int ur_buf_append_str(ur_buf *b, const char *s, ur_err *err);
int ur_buf_printf(ur_buf *b, ur_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Little-endian and LEB128 encoders, for format writers. */
int ur_buf_put_u32le(ur_buf *b, uint32_t v, ur_err *err);
int ur_buf_put_u64le(ur_buf *b, uint64_t v, ur_err *err);
int ur_buf_put_u32be(ur_buf *b, uint32_t v, ur_err *err);
int ur_buf_put_varint(ur_buf *b, uint64_t v, ur_err *err);
/* `v` in decimal, as printf's %llu writes it (without printf: JSON writers call it per
 * number, hundreds of thousands of times for a large checkpoint). */
int ur_buf_put_dec(ur_buf *b, uint64_t v, ur_err *err);
/* Take ownership of the bytes (NUL-terminated, for text); the buffer is left empty.
 * Returns NULL when out of memory. */
char *ur_buf_detach(ur_buf *b, size_t *len_out);

#endif
