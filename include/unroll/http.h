/* HTTP for the object-store drivers (S3, GCS): a thin layer over libcurl.
 *
 * Code: src/kvstore/http/ (library ur_http, links libcurl; depends on util only). The drivers
 * in src/kvstore/s3/ and src/kvstore/gcs/ build requests and parse answers; this layer moves
 * the bytes and owns everything generic:
 *   - connection reuse: a client keeps a pool of curl easy handles (each keeps its live
 *     connections); a request borrows one, so threads reuse connections to the same host;
 *   - requests in flight: any number of threads may call ur_http_perform at once; at most
 *     `max_in_flight` run together (the rest wait), which bounds sockets and memory;
 *   - retries: 408, 429, 5xx and dropped or timed-out connections are retried up to
 *     `retries` times with exponential backoff (base * 2^n, capped) and full jitter; the
 *     response buffer is rewound between attempts, and the auth hook runs again each time
 *     (fresh signature date, refreshed token);
 *   - timeouts: connect timeout, and a stall timeout (less than `stall_bytes_per_s` for
 *     `stall_s` seconds aborts the attempt, which is then retried);
 *   - errors: a request that fails for good returns UR_EIO (UR_ENOTFOUND for 404) with a
 *     one-line message naming the object (`req->what`, else the URL without its query), the
 *     last HTTP status or the transport error, the number of attempts, and the start of the
 *     server's error body; the CLI maps UR_EIO to exit status 3.
 *
 * The defaults come from the environment where set (UNROLL_HTTP_RETRIES,
 * UNROLL_HTTP_MAX_IN_FLIGHT, UNROLL_HTTP_TIMEOUT_S for connect and stall, UNROLL_HTTP_BACKOFF_MS
 * for the backoff base), so tests can shorten them. */
#ifndef UNROLL_HTTP_H
#define UNROLL_HTTP_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ur_http ur_http;

typedef struct ur_http_opts {
    unsigned max_in_flight;     /* concurrent requests; default 32 */
    unsigned retries;           /* retries after the first attempt; default 8 */
    unsigned backoff_base_ms;   /* first backoff; default 200 */
    unsigned backoff_max_ms;    /* cap of one backoff; default 20000 */
    unsigned connect_timeout_s; /* default 30 */
    unsigned stall_s;           /* abort an attempt slower than 1 byte/s for this long; 30 */
    int verbose;                /* curl's debug output on stderr (UNROLL_HTTP_VERBOSE=1) */
} ur_http_opts;

/* Defaults, then the UNROLL_HTTP_* environment variables. */
void ur_http_opts_init(ur_http_opts *o);

/* Create a client. Thread-safe once created; close only when no request is in flight. */
int ur_http_new(ur_http **out, const ur_http_opts *opts, ur_err *err);
void ur_http_free(ur_http *h);

/* Headers for one attempt, built by the request and by the auth hook. */
typedef struct ur_http_headers ur_http_headers;
/* Add "Name: value" (formatted). UR_ENOMEM. */
int ur_http_headers_add(ur_http_headers *hs, ur_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

typedef struct ur_http_req ur_http_req;

/* Called before every attempt, after the request's own headers are added: add
 * authentication (a SigV4 Authorization, a bearer token). A failure ends the request. */
typedef int (*ur_http_auth_fn)(void *ctx, const ur_http_req *req, ur_http_headers *hs,
                               ur_err *err);

struct ur_http_req {
    const char *method;          /* "GET", "HEAD", "PUT", "POST", "DELETE" */
    const char *url;             /* full URL, query included, already percent-encoded */
    const char *const *headers;  /* "Name: value" lines, or NULL */
    size_t n_headers;
    const void *body;            /* request body (PUT/POST), borrowed; may be NULL */
    size_t body_len;
    int has_range;               /* ranged GET of [range_off, range_off + range_len) */
    uint64_t range_off;
    uint64_t range_len;          /* > 0 */
    /* Where the response body goes: appended to `out` (its limit caps it), or written to
     * `dst` (exactly dst_len bytes expected: a different length is UR_EIO); else dropped. */
    ur_buf *out;
    void *dst;
    size_t dst_len;
    ur_buf *resp_headers;        /* when set: the final response's header lines, raw */
    ur_http_auth_fn auth;
    void *auth_ctx;
    const char *what;            /* the object, for messages ("s3://bucket/key") */
    /* Statuses, besides 2xx, that are answers rather than failures (e.g. 404 for an existence
     * check, 412 for a conditional create): returned as UR_OK with *status_out set. */
    const long *accept;
    size_t n_accept;
};

/* Run a request to completion, retrying as described above. On return *status_out (may be
 * NULL) holds the final HTTP status (0 when no response came). UR_OK for 2xx or an accepted
 * status; UR_ENOTFOUND for 404; UR_EIO otherwise. */
int ur_http_perform(ur_http *h, const ur_http_req *req, long *status_out, ur_err *err);

/* The value of header `name` (case-insensitive) in raw header lines, trimmed, copied into
 * out (truncated to n-1). Returns 1 when found, 0 when not. */
int ur_http_header_get(const ur_buf *raw, const char *name, char *out, size_t n);

/* Percent-encode `s` into b as RFC 3986 unreserved characters; '/' kept when keep_slash.
 * (SigV4 and the GCS JSON API both need this exact form.) */
int ur_http_encode(ur_buf *b, const char *s, int keep_slash, ur_err *err);

/* The libcurl loaded at run time ("8.1.2") and the TLS library it uses ("OpenSSL/3.0.11"), for
 * --version. */
const char *ur_http_curl_version(void);
const char *ur_http_tls_version(void);

#endif
