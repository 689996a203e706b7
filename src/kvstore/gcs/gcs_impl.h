/* Internals of the GCS kvstore driver (src/kvstore/gcs/): the HTTP calls it makes, the
 * credentials that authorize them and the RS256 JWT of the service-account flow. Not part of
 * the cross-layer API. */
#ifndef UNROLL_GCS_IMPL_H
#define UNROLL_GCS_IMPL_H

#include "unroll/buf.h"
#include "unroll/err.h"
#include "unroll/http.h"

#include <stddef.h>
#include <stdint.h>

/* ---- HTTP (gcs_http.c): the project's HTTP layer (unroll/http.h) plus GCS headers ---- */

/* One request through ur_http_perform (which retries 408/429/5xx and dropped connections).
 * The response body goes to `body` (appended) or, for ranged reads, into dst[0..dst_len);
 * neither: dropped. Statuses in `accept` (besides 2xx) come back as answers in resp->status;
 * any other failure is UR_EIO (UR_ENOTFOUND for 404) naming req->what. */
typedef struct {
    ur_http *http;
    const char *method; /* "GET", "POST", "PUT", "DELETE" */
    const char *url;
    const char *const *headers; /* NULL-terminated "Name: value" lines, or NULL */
    const void *data;           /* request body, or NULL */
    size_t data_len;
    int has_range;
    uint64_t range_off, range_len;
    ur_buf *body;
    void *dst;
    size_t dst_len;
    const long *accept;
    size_t n_accept;
    ur_http_auth_fn auth;
    void *auth_ctx;
    const char *what; /* for messages: the object or endpoint, e.g. "gs://b/k" */
} gcs_http_req;

typedef struct {
    long status;
    int has_crc32c;      /* x-goog-hash carried crc32c= */
    uint32_t crc32c;     /* its value */
    char location[2048]; /* Location header (resumable upload sessions) */
    char range[128];     /* Range header of a 308 answer ("bytes=0-N") */
} gcs_http_resp;

int ur_gcs_http_do(const gcs_http_req *req, gcs_http_resp *resp, ur_err *err);

/* Percent-encode every byte but the unreserved ones (RFC 3986) and append to out. */
int ur_gcs_http_escape(ur_buf *out, const char *s, ur_err *err);

/* The CRC-32C in base64 of its 4 big-endian bytes (x-goog-hash, an object's "crc32c"):
 * 1 when `b64` is one. */
int ur_gcs_crc_decode(const char *b64, size_t n, uint32_t *crc_out);

/* ---- JWT (gcs_jwt.c) ------------------------------------------------------------------ */

/* Append to `out` a JWT "header.claims.signature" signed RS256 with the PEM private key:
 * {"alg":"RS256","typ":"JWT"[,"kid":key_id]} and
 * {"iss":iss,"scope":scope,"aud":aud,"iat":iat,"exp":iat+3600}. UR_EINVAL for a key OpenSSL
 * cannot load or that is not RSA. */
int ur_gcs_jwt_sign(ur_buf *out, const char *pem_key, const char *key_id, const char *iss,
                    const char *scope, const char *aud, int64_t iat, ur_err *err);

/* Base64url without padding (RFC 7515 §2). */
int ur_gcs_b64url(ur_buf *out, const void *p, size_t n, ur_err *err);

/* ---- credentials (gcs_auth.c) --------------------------------------------------------- */

typedef struct gcs_auth gcs_auth;

/* Find credentials the way Google's client libraries do (see gcs_auth.c). `emulator`: no
 * credentials at all (STORAGE_EMULATOR_HOST). The credentials, and so the cached access
 * token, are shared by every caller in the process until the last one frees them. UR_EINVAL
 * naming the file for an unreadable or malformed credentials file. */
int ur_gcs_auth_new(gcs_auth **out, int emulator, ur_err *err);

/* The Authorization header line for the next request ("" when anonymous), refreshing the
 * access token when it is missing or near expiry. UR_EIO when the token endpoint fails. */
int ur_gcs_auth_header(gcs_auth *a, char *line, size_t n, ur_err *err);

/* Where the credentials come from, for messages ("service_account from /x/sa.json"). */
void ur_gcs_auth_describe(const gcs_auth *a, char *dst, size_t n);

/* Forget the cached token (the server answered 401), so the next header fetches a new one. */
void ur_gcs_auth_invalidate(gcs_auth *a);

/* "service_account", "authorized_user", "metadata", "anonymous" or "emulator". */
const char *ur_gcs_auth_kind(const gcs_auth *a);

/* Drop one reference (NULL-safe); the last frees. */
void ur_gcs_auth_free(gcs_auth *a);

#endif
