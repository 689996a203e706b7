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
 *     response buffer and the request body are rewound between attempts (and when libcurl
 *     itself resends on a fresh connection after a reused one died), and the auth hook runs
 *     again each time (fresh signature date, refreshed token);
 *   - time budget, so that a dead or silent server fails in bounded time (by default in well
 *     under two minutes: at most about 60 + 20 s for a server that accepts and never
 *     answers), each attempt has a connect timeout, a first-byte timeout (no answer this
 *     long after the last request byte went out aborts the attempt) and a stall timeout
 *     (less than 1 byte/s for that long aborts it); aborted attempts are retried, but no
 *     retry starts once the request's deadline (counted from its first attempt) would be
 *     passed. A transfer that keeps moving is never cut by the deadline;
 *   - errors: a request that fails for good returns UR_EIO (UR_ENOTFOUND for 404) with a
 *     one-line message naming the object (`req->what`, else the URL without its query), the
 *     endpoint (scheme://host:port) for transport failures ("no answer from
 *     http://10.0.0.1:9000 within 20 s"), the last HTTP status or the transport error, the
 *     number of attempts, and the start of the server's error body, scrubbed (below); the
 *     CLI maps UR_EIO to exit status 3;
 *   - secrets: any text of the server's that is quoted (error bodies, and curl's debug
 *     output under UNROLL_HTTP_VERBOSE=1) goes through ur_http_redact first, which removes
 *     every credential registered with ur_http_secret_add and anything shaped like one.
 *
 * The defaults come from the environment where set, so tests can shorten them:
 *   UNROLL_HTTP_RETRIES (8), UNROLL_HTTP_MAX_IN_FLIGHT (32), UNROLL_HTTP_BACKOFF_MS (200, the
 *   backoff base), UNROLL_HTTP_CONNECT_TIMEOUT_S (10), UNROLL_HTTP_FIRST_BYTE_S (20),
 *   UNROLL_HTTP_STALL_S (30), UNROLL_HTTP_DEADLINE_S (60); UNROLL_HTTP_TIMEOUT_S sets the
 *   three per-attempt timeouts at once (the specific variables win). */
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
    unsigned connect_timeout_s; /* default 10 */
    unsigned first_byte_s;      /* no answer this long after the request went out; 20 */
    unsigned stall_s;           /* abort an attempt slower than 1 byte/s for this long; 30 */
    unsigned deadline_s;        /* no retry starts past this many s after the first; 60 */
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
 * NULL) holds the final HTTP status (0 when the last attempt got no complete response: a
 * transport failure, a body cut short, no answer). UR_OK for 2xx or an accepted
 * status; UR_ENOTFOUND for 404; UR_EIO otherwise. */
int ur_http_perform(ur_http *h, const ur_http_req *req, long *status_out, ur_err *err);

/* The value of header `name` (case-insensitive) in raw header lines, trimmed, copied into
 * out (truncated to n-1). Returns 1 when found, 0 when not. */
int ur_http_header_get(const ur_buf *raw, const char *name, char *out, size_t n);

/* Register a credential the process holds (a secret key, a session or bearer token, a client
 * secret, private key material): from now on ur_http_redact removes it, and its
 * percent-encoded form, from any text. Strings under 6 bytes are ignored (they would blank
 * ordinary words); the most recent 32 are kept. Thread-safe. */
void ur_http_secret_add(const char *secret);

/* Copy in[0..n) to out (NUL-terminated, truncated to out_n - 1) with every registered secret
 * and everything shaped like a credential replaced by "[redacted]": the value after
 * Authorization, X-Amz-Security-Token, Signature, X-Amz-Credential, client_secret,
 * refresh_token, access_token, assertion, private_key, password, secret (as a header
 * "Name: v", a query or form "name=v" or a JSON "name": "v"); "Bearer <token>"; Google
 * "ya29." tokens; JWT-shaped "eyJ..." strings; PEM blocks. A registered secret cut off by the
 * end of `in` (8 bytes of it or more) is removed too. */
void ur_http_redact(const char *in, size_t n, char *out, size_t out_n);

/* Percent-encode `s` into b as RFC 3986 unreserved characters; '/' kept when keep_slash.
 * (SigV4 and the GCS JSON API both need this exact form.) */
int ur_http_encode(ur_buf *b, const char *s, int keep_slash, ur_err *err);

/* The libcurl loaded at run time ("8.1.2") and the TLS library it uses ("OpenSSL/3.0.11"), for
 * --version. */
const char *ur_http_curl_version(void);
const char *ur_http_tls_version(void);

#endif
