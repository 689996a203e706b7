/* The HTTP calls of the GCS driver, on libcurl easy handles kept in a small pool so that
 * connections are reused across requests and threads. One attempt per call: retries belong
 * to the project's shared HTTP layer. */
#include "gcs_impl.h"

#include "unroll/alloc.h"
#include "unroll/b64.h"
#include "unroll/json.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define POOL_MAX 16

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *g_pool[POOL_MAX];
static size_t g_pool_n;

static void global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static CURL *handle_take(void)
{
    CURL *h = NULL;
    pthread_once(&g_once, global_init);
    pthread_mutex_lock(&g_mu);
    if (g_pool_n > 0) {
        h = g_pool[--g_pool_n];
    }
    pthread_mutex_unlock(&g_mu);
    if (h == NULL) {
        h = curl_easy_init();
    } else {
        curl_easy_reset(h);
    }
    return h;
}

static void handle_give(CURL *h)
{
    pthread_mutex_lock(&g_mu);
    if (g_pool_n < POOL_MAX) {
        g_pool[g_pool_n++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&g_mu);
    if (h != NULL) {
        curl_easy_cleanup(h);
    }
}

typedef struct {
    const gcs_http_req *req;
    gcs_http_resp *resp;
    int overflow;
    int oom;
} xfer;

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    if (x->req->dst != NULL) {
        if (n > x->req->dst_len - x->resp->dst_got) {
            x->overflow = 1;
            return 0;
        }
        memcpy((uint8_t *)x->req->dst + x->resp->dst_got, p, n);
        x->resp->dst_got += n;
    } else if (x->req->body != NULL) {
        if (ur_buf_append(x->req->body, p, n, NULL) < 0) {
            x->oom = 1;
            return 0;
        }
    }
    return n;
}

/* Copy a header's value (trimmed) into dst. */
static void header_value(char *dst, size_t cap, const char *v, size_t n)
{
    while (n > 0 && (*v == ' ' || *v == '\t')) {
        v++;
        n--;
    }
    while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) {
        n--;
    }
    if (n >= cap) {
        n = cap - 1;
    }
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* x-goog-hash: crc32c=<base64 of the big-endian CRC>,md5=<...> (one or several lines). */
static void parse_goog_hash(gcs_http_resp *r, const char *v)
{
    const char *c = strstr(v, "crc32c=");
    ur_buf b;
    size_t n = 0;
    if (c == NULL) {
        return;
    }
    c += 7;
    while (c[n] != '\0' && c[n] != ',' && c[n] != ' ') {
        n++;
    }
    ur_buf_init(&b, 16);
    if (ur_b64_decode(&b, c, n, UR_B64_STD, NULL) == UR_OK && b.len == 4) {
        r->crc32c = (uint32_t)b.data[0] << 24 | (uint32_t)b.data[1] << 16 |
                    (uint32_t)b.data[2] << 8 | b.data[3];
        r->has_crc32c = 1;
    }
    ur_buf_dispose(&b);
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t n = size * nmemb;
    const char *colon = memchr(p, ':', n);
    char val[2048];
    size_t name_len;
    if (colon == NULL) {
        /* A status line: a new response (after a redirect or 100-continue) starts afresh. */
        if (n > 5 && strncmp(p, "HTTP/", 5) == 0) {
            x->resp->has_crc32c = 0;
            x->resp->location[0] = '\0';
            x->resp->range[0] = '\0';
        }
        return n;
    }
    name_len = (size_t)(colon - p);
    header_value(val, sizeof val, colon + 1, n - name_len - 1);
    if (name_len == 11 && strncasecmp(p, "x-goog-hash", 11) == 0) {
        parse_goog_hash(x->resp, val);
    } else if (name_len == 8 && strncasecmp(p, "location", 8) == 0) {
        header_value(x->resp->location, sizeof x->resp->location, colon + 1, n - name_len - 1);
    } else if (name_len == 5 && strncasecmp(p, "range", 5) == 0) {
        header_value(x->resp->range, sizeof x->resp->range, colon + 1, n - name_len - 1);
    }
    return n;
}

int ur_gcs_http_do(const gcs_http_req *req, gcs_http_resp *resp, ur_err *err)
{
    CURL *h = handle_take();
    struct curl_slist *hdrs = NULL;
    xfer x = {req, resp, 0, 0};
    CURLcode cc;
    char ebuf[CURL_ERROR_SIZE] = "";
    int rc = UR_OK;

    memset(resp, 0, sizeof *resp);
    if (h == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; req->headers != NULL && req->headers[i] != NULL; i++) {
        if (req->headers[i][0] == '\0') {
            continue;
        }
        struct curl_slist *n = curl_slist_append(hdrs, req->headers[i]);
        if (n == NULL) {
            rc = ur_err_oom(err);
            goto out;
        }
        hdrs = n;
    }
    /* No "Expect: 100-continue" round trip on uploads. */
    hdrs = curl_slist_append(hdrs, "Expect:");
    curl_easy_setopt(h, CURLOPT_URL, req->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ebuf);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    /* A stalled transfer (under 1 byte/s for 60 s) is a failure, not a hang. */
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
    if (strcmp(req->method, "GET") != 0) {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    }
    if (req->data != NULL || strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->data != NULL ? req->data : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->data_len);
    }
    cc = curl_easy_perform(h);
    if (x.oom) {
        rc = ur_err_oom(err);
    } else if (x.overflow) {
        rc = ur_err_set_os(err, UR_ECORRUPT, 0, req->what,
                           "server sent more than the %zu bytes asked for", req->dst_len);
    } else if (cc != CURLE_OK) {
        rc = ur_err_set_os(err, UR_EIO, 0, req->what, "%s %s: %s", req->method, req->url,
                           ebuf[0] ? ebuf : curl_easy_strerror(cc));
    } else {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    }
out:
    curl_slist_free_all(hdrs);
    handle_give(h);
    return rc;
}

int ur_gcs_http_escape(ur_buf *out, const char *s, ur_err *err)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        int rc;
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '.' || *p == '_' || *p == '~') {
            rc = ur_buf_append_byte(out, *p, err);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            rc = ur_buf_append(out, e, 3, err);
        }
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

void ur_gcs_http_error_text(const ur_buf *body, char *msg, size_t n)
{
    cJSON *j = NULL;
    const cJSON *e;
    msg[0] = '\0';
    if (body == NULL || body->len == 0 ||
        ur_json_parse(&j, (const char *)body->data, body->len, NULL) < 0) {
        return;
    }
    e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsObject(e)) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        if (cJSON_IsString(m)) {
            snprintf(msg, n, "%s", m->valuestring);
        }
    } else if (cJSON_IsString(e)) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "error_description");
        snprintf(msg, n, "%s%s%s", e->valuestring, cJSON_IsString(d) ? ": " : "",
                 cJSON_IsString(d) ? d->valuestring : "");
    }
    cJSON_Delete(j);
}
