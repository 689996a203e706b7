/* The GCS driver's requests on the project's HTTP layer (unroll/http.h: pooled connections,
 * retries with backoff, timeouts), plus what GCS puts in response headers: x-goog-hash (the
 * object's CRC-32C), Location (a resumable upload session), Range (bytes a session kept). */
#include "gcs_impl.h"

#include "unroll/b64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int ur_gcs_crc_decode(const char *b64, size_t n, uint32_t *crc_out)
{
    ur_buf b;
    int ok = 0;
    ur_buf_init(&b, 16);
    if (ur_b64_decode(&b, b64, n, UR_B64_STD, NULL) == UR_OK && b.len == 4) {
        *crc_out = (uint32_t)b.data[0] << 24 | (uint32_t)b.data[1] << 16 |
                   (uint32_t)b.data[2] << 8 | b.data[3];
        ok = 1;
    }
    ur_buf_dispose(&b);
    return ok;
}

/* x-goog-hash: crc32c=<base64>,md5=<base64> */
static void parse_goog_hash(gcs_http_resp *r, const char *v)
{
    const char *c = strstr(v, "crc32c=");
    size_t n = 0;
    if (c == NULL) {
        return;
    }
    c += 7;
    while (c[n] != '\0' && c[n] != ',' && c[n] != ' ') {
        n++;
    }
    r->has_crc32c = ur_gcs_crc_decode(c, n, &r->crc32c);
}

int ur_gcs_http_do(const gcs_http_req *req, gcs_http_resp *resp, ur_err *err)
{
    ur_http_req hr;
    ur_buf hdrs;
    char v[2048];
    size_t nh = 0;
    int rc;

    memset(resp, 0, sizeof *resp);
    while (req->headers != NULL && req->headers[nh] != NULL) {
        nh++;
    }
    memset(&hr, 0, sizeof hr);
    hr.method = req->method;
    hr.url = req->url;
    hr.headers = req->headers;
    hr.n_headers = nh;
    hr.body = req->data;
    hr.body_len = req->data_len;
    hr.has_range = req->has_range;
    hr.range_off = req->range_off;
    hr.range_len = req->range_len;
    hr.out = req->body;
    hr.dst = req->dst;
    hr.dst_len = req->dst_len;
    hr.accept = req->accept;
    hr.n_accept = req->n_accept;
    hr.auth = req->auth;
    hr.auth_ctx = req->auth_ctx;
    hr.what = req->what;
    ur_buf_init(&hdrs, 0);
    hr.resp_headers = &hdrs;
    rc = ur_http_perform(req->http, &hr, &resp->status, err);
    if (rc == UR_OK) {
        /* GCS may send x-goog-hash once per hash; look for the crc32c one in each line. */
        const char *p = (const char *)hdrs.data, *end = p + hdrs.len;
        while (p != NULL && p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t len = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
            if (len > 12 && strncasecmp(p, "x-goog-hash:", 12) == 0) {
                snprintf(v, sizeof v, "%.*s", (int)(len - 12), p + 12);
                parse_goog_hash(resp, v);
                if (resp->has_crc32c) {
                    break;
                }
            }
            p = nl != NULL ? nl + 1 : NULL;
        }
        /* Stored gzip-encoded and served decompressed (GCS's decompressive transcoding): the
         * hash is that of the stored bytes, not of those we got. */
        if (ur_http_header_get(&hdrs, "x-goog-stored-content-encoding", v, sizeof v) &&
            strcmp(v, "identity") != 0) {
            resp->has_crc32c = 0;
        }
        (void)ur_http_header_get(&hdrs, "location", resp->location, sizeof resp->location);
        (void)ur_http_header_get(&hdrs, "range", resp->range, sizeof resp->range);
    }
    ur_buf_dispose(&hdrs);
    return rc;
}

int ur_gcs_http_escape(ur_buf *out, const char *s, ur_err *err)
{
    return ur_http_encode(out, s, 0, err);
}
