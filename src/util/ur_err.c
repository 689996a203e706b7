/* ur_err: fixed-size error records (see include/unroll/err.h). */
#include "unroll/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ur_err_clear(ur_err *err)
{
    if (err == NULL) {
        return;
    }
    err->code = UR_OK;
    err->os_errno = 0;
    err->offset = UR_ERR_NO_OFFSET;
    err->where[0] = '\0';
    err->msg[0] = '\0';
}

/* Messages and paths quote untrusted bytes (JSON keys, file names): replace every control
 * character so an error stays one printable line. */
static void one_line(char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f) {
            *s = '?';
        }
    }
}

static int set_v(ur_err *err, ur_code code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static int set_v(ur_err *err, ur_code code, const char *fmt, va_list ap)
{
    if (err == NULL) {
        return code;
    }
    err->code = code;
    err->os_errno = 0;
    err->offset = UR_ERR_NO_OFFSET;
    err->where[0] = '\0';
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    one_line(err->msg);
    return code;
}

int ur_err_set(ur_err *err, ur_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_v(err, code, fmt, ap);
    va_end(ap);
    return code;
}

int ur_err_set_at(ur_err *err, ur_code code, uint64_t offset, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_v(err, code, fmt, ap);
    va_end(ap);
    if (err != NULL) {
        err->offset = offset;
    }
    return code;
}

int ur_err_set_os(ur_err *err, ur_code code, int os_errno, const char *where, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_v(err, code, fmt, ap);
    va_end(ap);
    if (err == NULL) {
        return code;
    }
    err->os_errno = os_errno;
    if (where != NULL) {
        snprintf(err->where, sizeof err->where, "%s", where);
        one_line(err->where);
    }
    if (os_errno != 0) {
        size_t used = strlen(err->msg);
        snprintf(err->msg + used, sizeof err->msg - used, ": %s", strerror(os_errno));
    }
    return code;
}

int ur_err_oom(ur_err *err)
{
    if (err == NULL) {
        return UR_ENOMEM;
    }
    err->code = UR_ENOMEM;
    err->os_errno = 0;
    err->offset = UR_ERR_NO_OFFSET;
    err->where[0] = '\0';
    /* A literal copy: formatting could allocate in some libcs. */
    memcpy(err->msg, "out of memory", sizeof "out of memory");
    return UR_ENOMEM;
}

/* dst = a + b + c, cut to fit. */
static void append_trunc(char *dst, size_t n, const char *a, const char *b, const char *c)
{
    const char *parts[3] = {a, b, c};
    size_t used = 0;
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(parts[i]);
        if (len > n - 1 - used) {
            len = n - 1 - used;
        }
        memcpy(dst + used, parts[i], len);
        used += len;
    }
    dst[used] = '\0';
}

int ur_err_wrap(ur_err *err, const char *fmt, ...)
{
    char prefix[512];
    char old[sizeof err->msg];
    va_list ap;

    if (err == NULL) {
        return UR_EINTERNAL;
    }
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation is fine here: the start of the line matters most. */
    append_trunc(err->msg, sizeof err->msg, prefix, ": ", old);
    one_line(err->msg);
    return err->code;
}

void ur_err_set_where(ur_err *err, const char *where)
{
    if (err == NULL || where == NULL || err->where[0] != '\0') {
        return;
    }
    snprintf(err->where, sizeof err->where, "%s", where);
    one_line(err->where);
}

const char *ur_code_name(ur_code code)
{
    switch (code) {
    case UR_OK:
        return "ok";
    case UR_ENOMEM:
        return "out of memory";
    case UR_EIO:
        return "I/O error";
    case UR_ECORRUPT:
        return "corrupt input";
    case UR_EUNSUPPORTED:
        return "unsupported";
    case UR_EINVAL:
        return "invalid argument";
    case UR_ENOTFOUND:
        return "not found";
    case UR_EINTERNAL:
        return "internal error";
    case UR_EEXIST:
        return "already exists";
    case UR_ECANCELED:
        return "cancelled";
    }
    return "unknown error";
}

char *ur_err_format(const ur_err *err, char *buf, size_t n)
{
    size_t used = 0;
    int w;

    if (n == 0) {
        return buf;
    }
    buf[0] = '\0';
    if (err == NULL) {
        return buf;
    }
    if (err->where[0] != '\0') {
        w = snprintf(buf, n, "%s: ", err->where);
        used = w < 0 ? 0 : (size_t)w;
    }
    if (used < n) {
        w = snprintf(buf + used, n - used, "%s", err->msg[0] ? err->msg : ur_code_name(err->code));
        used += w < 0 ? 0 : (size_t)w;
    }
    if (err->offset != UR_ERR_NO_OFFSET && used < n) {
        snprintf(buf + used, n - used, " (at byte %llu)", (unsigned long long)err->offset);
    }
    return buf;
}
