/* ur_buf: growable byte buffer with a size cap. */
#include "unroll/buf.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ur_buf_init(ur_buf *b, size_t limit)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->limit = limit;
}

void ur_buf_dispose(ur_buf *b)
{
    if (b == NULL) {
        return;
    }
    ur_free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void ur_buf_reset(ur_buf *b)
{
    b->len = 0;
}

/* Grow to hold `extra` more bytes: by doubling (amortized appends), or to exactly that. */
static int reserve(ur_buf *b, size_t extra, int exact, ur_err *err)
{
    size_t need, cap;
    uint8_t *p;

    /* +1 keeps room for the NUL that ur_buf_detach adds. */
    if (ur_ckd_add(&need, b->len, extra) || ur_ckd_add(&need, need, 1)) {
        return ur_err_set(err, UR_ECORRUPT, "buffer size overflows");
    }
    if (b->limit != 0 && need - 1 > b->limit) {
        return ur_err_set(err, UR_ECORRUPT, "data larger than the limit of %zu bytes", b->limit);
    }
    if (need <= b->cap) {
        return UR_OK;
    }
    cap = b->cap < 64 ? 64 : b->cap;
    while (!exact && cap < need) {
        if (ur_ckd_mul(&cap, cap, 2)) {
            cap = need;
            break;
        }
    }
    if (cap < need) {
        cap = need;
    }
    p = ur_realloc(b->data, cap);
    if (p == NULL) {
        return ur_err_oom(err);
    }
    b->data = p;
    b->cap = cap;
    return UR_OK;
}

int ur_buf_reserve(ur_buf *b, size_t extra, ur_err *err)
{
    return reserve(b, extra, 0, err);
}

int ur_buf_reserve_exact(ur_buf *b, size_t extra, ur_err *err)
{
    return reserve(b, extra, 1, err);
}

void ur_buf_fit(ur_buf *b)
{
    if (b->data != NULL && b->cap > b->len + 1) {
        uint8_t *p = ur_realloc(b->data, b->len + 1);
        if (p != NULL) { /* else the larger block stays: still valid */
            b->data = p;
            b->cap = b->len + 1;
        }
    }
}

int ur_buf_append(ur_buf *b, const void *p, size_t n, ur_err *err)
{
    int rc;
    if (n == 0) {
        return UR_OK;
    }
    rc = ur_buf_reserve(b, n, err);
    if (rc < 0) {
        return rc;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return UR_OK;
}

int ur_buf_append_byte(ur_buf *b, uint8_t byte, ur_err *err)
{
    return ur_buf_append(b, &byte, 1, err);
}

int ur_buf_append_str(ur_buf *b, const char *s, ur_err *err)
{
    return ur_buf_append(b, s, strlen(s), err);
}

int ur_buf_printf(ur_buf *b, ur_err *err, const char *fmt, ...)
{
    va_list ap;
    int n, rc;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return ur_err_set(err, UR_EINTERNAL, "bad format string");
    }
    rc = ur_buf_reserve(b, (size_t)n, err);
    if (rc < 0) {
        return rc;
    }
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return UR_OK;
}

int ur_buf_put_u32le(ur_buf *b, uint32_t v, ur_err *err)
{
    uint8_t t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (uint8_t)(v >> (8 * i));
    }
    return ur_buf_append(b, t, 4, err);
}

int ur_buf_put_u32be(ur_buf *b, uint32_t v, ur_err *err)
{
    uint8_t t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (uint8_t)(v >> (8 * (3 - i)));
    }
    return ur_buf_append(b, t, 4, err);
}

int ur_buf_put_u64le(ur_buf *b, uint64_t v, ur_err *err)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++) {
        t[i] = (uint8_t)(v >> (8 * i));
    }
    return ur_buf_append(b, t, 8, err);
}

int ur_buf_put_varint(ur_buf *b, uint64_t v, ur_err *err)
{
    uint8_t t[10];
    size_t n = 0;
    do {
        uint8_t byte = (uint8_t)(v & 0x7f);
        v >>= 7;
        t[n++] = (uint8_t)(byte | (v ? 0x80 : 0));
    } while (v != 0);
    return ur_buf_append(b, t, n, err);
}

char *ur_buf_detach(ur_buf *b, size_t *len_out)
{
    char *s;
    if (ur_buf_reserve(b, 0, NULL) < 0) {
        return NULL;
    }
    b->data[b->len] = '\0';
    s = (char *)b->data;
    if (len_out != NULL) {
        *len_out = b->len;
    }
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return s;
}

int ur_buf_put_dec(ur_buf *b, uint64_t v, ur_err *err)
{
    char tmp[20];
    size_t n = sizeof tmp;
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    return ur_buf_append(b, tmp + n, sizeof tmp - n, err);
}
