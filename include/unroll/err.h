/* Errors: an int return code plus an explicit ur_err carrying the message and the
 * file/key and byte offset it concerns (docs/conventions.md §3).
 *
 * A fallible function returns UR_OK (0) or a negative ur_code and, on failure, fills
 * the caller's ur_err (which may be NULL when the caller does not care). The struct is
 * fixed-size, so reporting an error never allocates. */
#ifndef UNROLL_ERR_H
#define UNROLL_ERR_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    UR_OK = 0,
    UR_ENOMEM = -1,       /* allocation failed */
    UR_EIO = -2,          /* an OS read/write failed (os_errno says why) */
    UR_ECORRUPT = -3,     /* bytes on disk are not what the format allows */
    UR_EUNSUPPORTED = -4, /* valid, but a feature this tool does not implement */
    UR_EINVAL = -5,       /* bad argument or configuration from the user */
    UR_ENOTFOUND = -6,    /* key, file or tree entry absent */
    UR_EINTERNAL = -7,    /* a bug in unroll */
    UR_EEXIST = -8,       /* a conditional create found the key already there */
    UR_ECANCELED = -9     /* stopped on request (a signal): not a failure of its own */
} ur_code;

#define UR_ERR_NO_OFFSET UINT64_MAX

typedef struct ur_err {
    ur_code code;
    int os_errno;    /* errno of a failed OS call, else 0 */
    uint64_t offset; /* byte offset in the blob a decoder failed at, or UR_ERR_NO_OFFSET */
    char where[256]; /* file path or kvstore key the error concerns, "" if none */
    char msg[768];   /* one line, no trailing newline */
} ur_err;

/* Reset to "no error". NULL-safe. */
void ur_err_clear(ur_err *err);

/* Record a failure and return `code` so a failure site is one line:
 *   return ur_err_set(err, UR_ECORRUPT, "btree: key length %u > %u", n, max);
 * Replaces any earlier message. NULL-safe. */
int ur_err_set(ur_err *err, ur_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* As ur_err_set, also recording the byte offset in the blob being decoded. */
int ur_err_set_at(ur_err *err, ur_code code, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* As ur_err_set for a failed OS call: records errno and the path, and appends strerror. */
int ur_err_set_os(ur_err *err, ur_code code, int os_errno, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Out of memory; never allocates. */
int ur_err_oom(ur_err *err);

/* Prefix context to the message ("manifest 'x': " + old message). Call once per layer
 * boundary. Returns err->code (or UR_EINTERNAL when err is NULL). */
int ur_err_wrap(ur_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Set `where` when it is still empty (the innermost, most precise path wins). */
void ur_err_set_where(ur_err *err, const char *where);

/* Short name of a code ("corrupt", "I/O error", ...). */
const char *ur_code_name(ur_code code);

/* Format the error as one line: "<where>: <msg> (at byte <offset>)". Returns `buf`. */
char *ur_err_format(const ur_err *err, char *buf, size_t n);

#endif
