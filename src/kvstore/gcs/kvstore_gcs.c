/* The GCS kvstore driver (JSON API, https://cloud.google.com/storage/docs/json_api):
 *
 *   read        GET  /storage/v1/b/<b>/o/<name>?alt=media            (+ Range: bytes=a-b)
 *   size        GET  /storage/v1/b/<b>/o/<name>                       (object resource "size")
 *   list        GET  /storage/v1/b/<b>/o?prefix=<p>[&pageToken=<t>]   (items[].name/size)
 *   write       POST /upload/storage/v1/b/<b>/o?uploadType=media&name=<name>
 *               POST ...?uploadType=resumable, then PUT chunks with Content-Range (308 between)
 *   create      the simple upload with ifGenerationMatch=0 (412: the object exists)
 *   delete      DELETE /storage/v1/b/<b>/o/<name>
 *
 * Object names are sorted by their UTF-8 bytes, the kvstore's key order. */
#include "gcs_impl.h"
#include "kvstore_impl.h"

#include "unroll/alloc.h"
#include "unroll/crc32c.h"
#include "unroll/json.h"
#include "unroll/kvstore_gcs.h"
#include "unroll/num.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_MAX ((size_t)16 << 20) /* a listing page or an object resource */

typedef struct {
    ur_kvstore base;
    char *endpoint; /* "https://storage.googleapis.com", no trailing '/' */
    char *bucket;
    char *prefix; /* "" or ends with '/' */
    int writable;
    size_t chunk; /* resumable piece and largest single-request upload (kvstore_gcs.h) */
    gcs_auth *auth;
    ur_http *http;
} gcs_store;

/* "gs://bucket/prefix-of-key" for messages. */
static void obj_url(const gcs_store *g, const char *key, char *dst, size_t n)
{
    snprintf(dst, n, "gs://%s/%s%s", g->bucket, g->prefix, key);
}

/* <endpoint>/<api>/b/<bucket>/o[/<escaped name>] */
static int api_url(ur_buf *u, const gcs_store *g, const char *api, const char *key, ur_err *err)
{
    int rc = ur_buf_printf(u, err, "%s/%s/b/", g->endpoint, api);
    if (rc == UR_OK) {
        rc = ur_gcs_http_escape(u, g->bucket, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(u, "/o", err);
    }
    if (rc == UR_OK && key != NULL) {
        rc = ur_buf_append_byte(u, '/', err);
        if (rc == UR_OK) {
            rc = ur_gcs_http_escape(u, g->prefix, err);
        }
        if (rc == UR_OK) {
            rc = ur_gcs_http_escape(u, key, err);
        }
    }
    return rc;
}

/* The auth hook of every attempt: the bearer token, refreshed when near expiry. */
static int auth_hook(void *ctx, const ur_http_req *req, ur_http_headers *hs, ur_err *err)
{
    gcs_store *g = ctx;
    char line[4200];
    int rc = ur_gcs_auth_header(g->auth, line, sizeof line, err);
    (void)req;
    if (rc == UR_OK && line[0] != '\0') {
        rc = ur_http_headers_add(hs, err, "%s", line);
    }
    return rc;
}

static int anonymous(const gcs_store *g)
{
    const char *k = ur_gcs_auth_kind(g->auth);
    return strcmp(k, "anonymous") == 0 || strcmp(k, "emulator") == 0;
}

/* One request with the credentials added (req->headers: the caller's lines or NULL; accept:
 * statuses the caller handles). A 401 to a token drops the cached token and tries once more
 * with a fresh one; a final 401/403 names the credentials in the message. */
static int send_req(gcs_store *g, gcs_http_req *req, const long *accept, size_t n_accept,
                    gcs_http_resp *resp, ur_err *err)
{
    long acc[8];
    size_t n = 0;
    size_t body_start = req->body != NULL ? req->body->len : 0;
    int anon = anonymous(g);
    int rc = UR_OK;

    for (size_t i = 0; i < n_accept && n < 7; i++) {
        acc[n++] = accept[i];
    }
    acc[n] = 401;
    req->http = g->http;
    req->auth = auth_hook;
    req->auth_ctx = g;
    req->accept = acc;
    for (int attempt = 0; attempt < 2; attempt++) {
        int refresh = !anon && attempt == 0;
        req->n_accept = n + (refresh ? 1 : 0);
        if (req->body != NULL) {
            req->body->len = body_start;
        }
        rc = ur_gcs_http_do(req, resp, err);
        if (rc < 0 || !(refresh && resp->status == 401)) {
            break;
        }
        ur_gcs_auth_invalidate(g->auth);
    }
    req->accept = NULL;
    req->n_accept = 0;
    if (rc == UR_EIO && (resp->status == 401 || resp->status == 403)) {
        char who[1200];
        ur_gcs_auth_describe(g->auth, who, sizeof who);
        rc = ur_err_wrap(err, "access denied (Google credentials: %s%s)", who,
                         anon && strcmp(who, "anonymous") == 0 ? ", none were found" : "");
    }
    return rc;
}

/* The media URL of key, NUL-terminated. */
static int media_url(ur_buf *u, const gcs_store *g, const char *key, ur_err *err)
{
    int rc = api_url(u, g, "storage/v1", key, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_str(u, "?alt=media", err);
    }
    return rc == UR_OK ? ur_buf_append_byte(u, '\0', err) : rc;
}

static int g_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    static const long accept[] = {404};
    gcs_store *g = (gcs_store *)kv;
    ur_buf url;
    gcs_http_req req = {0};
    gcs_http_resp resp;
    char what[1024];
    size_t start = out->len;
    int rc;

    obj_url(g, key, what, sizeof what);
    ur_buf_init(&url, 0);
    rc = media_url(&url, g, key, err);
    if (rc < 0) {
        goto out;
    }
    req.method = "GET";
    req.url = (const char *)url.data;
    req.body = out; /* the bytes land in place; a retry rewinds to `start` */
    req.what = what;
    rc = send_req(g, &req, accept, 1, &resp, err);
    if (rc == UR_OK && resp.status == 404) {
        rc = ur_err_set_os(err, UR_ENOTFOUND, 0, what, "no such object");
    }
    /* The whole object came: check it against the CRC-32C GCS keeps for it. */
    if (rc == UR_OK && resp.has_crc32c &&
        ur_crc32c(0, out->data + start, out->len - start) != resp.crc32c) {
        rc = ur_err_set_os(err, UR_EIO, 0, what,
                           "downloaded %zu bytes do not match the object's CRC-32C %08" PRIx32,
                           out->len - start, resp.crc32c);
    }
    if (rc < 0) {
        out->len = start;
    }
out:
    ur_buf_dispose(&url);
    return rc;
}

static int g_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    static const long accept[] = {404, 416};
    gcs_store *g = (gcs_store *)kv;
    ur_buf url;
    gcs_http_req req = {0};
    gcs_http_resp resp;
    char what[1024];
    int rc;

    if (len == 0) {
        uint64_t size;
        rc = kv->ops->size(kv, key, &size, err);
        if (rc == UR_OK && offset > size) {
            rc = ur_err_set_os(err, UR_ECORRUPT, 0, key,
                               "value is truncated: offset %" PRIu64 " past its %" PRIu64 " bytes",
                               offset, size);
        }
        return rc;
    }
    obj_url(g, key, what, sizeof what);
    ur_buf_init(&url, 0);
    rc = media_url(&url, g, key, err);
    if (rc < 0) {
        goto out;
    }
    req.method = "GET";
    req.url = (const char *)url.data;
    req.what = what;
    req.has_range = 1;
    req.range_off = offset;
    req.range_len = len;
    req.dst = dst;
    req.dst_len = len;
    rc = send_req(g, &req, accept, 2, &resp, err);
    if (rc == UR_EIO && resp.status == 206) {
        /* A complete answer with fewer bytes than asked: the object ends inside the range. */
        rc = ur_err_set_os(err, UR_ECORRUPT, 0, what,
                           "value is truncated: range %" PRIu64 "+%zu runs past its end", offset,
                           len);
    } else if (rc == UR_OK && resp.status == 416) {
        rc = ur_err_set_os(err, UR_ECORRUPT, 0, what,
                           "value is truncated: range %" PRIu64 "+%zu starts past its end", offset,
                           len);
    } else if (rc == UR_OK && resp.status == 404) {
        rc = ur_err_set_os(err, UR_ENOTFOUND, 0, what, "no such object");
    }
out:
    ur_buf_dispose(&url);
    return rc;
}

/* Parse the decimal "size" string of an object resource. */
static int parse_size(const cJSON *o, uint64_t *size_out)
{
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "size");
    char *end;
    unsigned long long v;
    if (!cJSON_IsString(s) || s->valuestring[0] < '0' || s->valuestring[0] > '9') {
        return -1;
    }
    v = strtoull(s->valuestring, &end, 10);
    if (*end != '\0') {
        return -1;
    }
    *size_out = v;
    return 0;
}

static int g_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    static const long accept[] = {404};
    gcs_store *g = (gcs_store *)kv;
    ur_buf url, body;
    gcs_http_req req = {0};
    gcs_http_resp resp;
    char what[1024];
    cJSON *j = NULL;
    int rc;

    obj_url(g, key, what, sizeof what);
    ur_buf_init(&url, 0);
    ur_buf_init(&body, META_MAX);
    rc = api_url(&url, g, "storage/v1", key, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&url, '\0', err);
    }
    if (rc < 0) {
        goto out;
    }
    req.method = "GET";
    req.url = (const char *)url.data;
    req.body = &body;
    req.what = what;
    rc = send_req(g, &req, accept, 1, &resp, err);
    if (rc < 0) {
        goto out;
    }
    if (resp.status == 404) {
        rc = ur_err_set_os(err, UR_ENOTFOUND, 0, what, "no such object");
    } else if (ur_json_parse(&j, (const char *)body.data, body.len, NULL) < 0 ||
               parse_size(j, size_out) < 0) {
        rc = ur_err_set_os(err, UR_EIO, 0, what, "object resource without a valid \"size\"");
    }
out:
    cJSON_Delete(j);
    ur_buf_dispose(&url);
    ur_buf_dispose(&body);
    return rc;
}

/* Each object of one parsed listing page, folder placeholders (a name ending in '/' with no
 * bytes, as the console makes: no value, as a directory in the file store holds none) left
 * out: fn(ctx, its whole name, size, generation or ""). Nonzero from fn stops. */
typedef int (*item_fn)(void *ctx, const char *name, uint64_t size, const char *generation,
                       ur_err *err);

static int each_item(const gcs_store *g, const cJSON *j, const char *what, item_fn fn, void *ctx,
                     ur_err *err)
{
    const cJSON *it;
    size_t plen = strlen(g->prefix);
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "items"))
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
        const cJSON *gen = cJSON_GetObjectItemCaseSensitive(it, "generation");
        uint64_t size;
        int rc;
        if (!cJSON_IsString(name) || strncmp(name->valuestring, g->prefix, plen) != 0 ||
            parse_size(it, &size) < 0) {
            return ur_err_set_os(err, UR_EIO, 0, what, "listing item without a valid name/size");
        }
        if (size == 0 && name->valuestring[0] != '\0' &&
            name->valuestring[strlen(name->valuestring) - 1] == '/') {
            continue;
        }
        rc = fn(ctx, name->valuestring, size, cJSON_IsString(gen) ? gen->valuestring : "", err);
        if (rc != 0) {
            return rc;
        }
    }
    return UR_OK;
}

/* *token_out: the page's nextPageToken (NULL: the last page). */
static int next_token(const cJSON *j, char **token_out, ur_err *err)
{
    const cJSON *next = cJSON_GetObjectItemCaseSensitive(j, "nextPageToken");
    if (cJSON_IsString(next) && next->valuestring[0] != '\0') {
        *token_out = ur_strdup(next->valuestring);
        return *token_out != NULL ? UR_OK : ur_err_oom(err);
    }
    return UR_OK;
}

typedef struct {
    ur_kvstore_list_fn fn;
    void *ctx;
    ur_kvstore__dir_list *dl;
    size_t plen, dir_skip;
} page_ctx;

static int key_item(void *ctx, const char *name, uint64_t size, const char *generation,
                    ur_err *err)
{
    page_ctx *p = ctx;
    (void)generation;
    return p->dl != NULL ? ur_kvstore__dir_list_add(p->dl, name, p->dir_skip, 0, err)
                         : p->fn(p->ctx, name + p->plen, size);
}

/* One page of a listing: each object to fn; or, for a delimited listing (dl set), each object
 * and each of "prefixes", named below the first dir_skip bytes, to dir_fn in order. */
static int list_page(gcs_store *g, const ur_buf *body, const char *what, ur_kvstore_list_fn fn,
                     ur_kvstore_list_dir_fn dir_fn, void *ctx, ur_kvstore__dir_list *dl,
                     size_t dir_skip, char **token_out, ur_err *err)
{
    cJSON *j = NULL;
    const cJSON *it;
    page_ctx p = {fn, ctx, dl, strlen(g->prefix), dir_skip};
    int rc;

    *token_out = NULL;
    if (ur_json_parse(&j, (const char *)body->data, body->len, NULL) < 0) {
        return ur_err_set_os(err, UR_EIO, 0, what, "listing answer is not JSON");
    }
    rc = each_item(g, j, what, key_item, &p, err);
    if (rc == 0 && dl != NULL) {
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "prefixes"))
        {
            rc = cJSON_IsString(it)
                     ? ur_kvstore__dir_list_add(dl, it->valuestring, dir_skip, 1, err)
                     : ur_err_set_os(err, UR_EIO, 0, what, "listing prefix that is not a string");
            if (rc != 0) {
                break;
            }
        }
        if (rc == 0) {
            rc = ur_kvstore__dir_list_flush(dl, dir_fn, ctx);
        }
    }
    if (rc == 0) {
        rc = next_token(j, token_out, err);
    }
    cJSON_Delete(j);
    return rc;
}

/* <endpoint>/storage/v1/b/<b>/o?maxResults=1000[&delimiter=/]&prefix=<p>[&pageToken=<t>] */
static int list_url(ur_buf *u, const gcs_store *g, const char *prefix, int delimited,
                    const char *token, ur_err *err)
{
    int rc = api_url(u, g, "storage/v1", NULL, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_str(
            u, delimited ? "?maxResults=1000&delimiter=%2F&prefix=" : "?maxResults=1000&prefix=",
            err);
    }
    if (rc == UR_OK) {
        rc = ur_gcs_http_escape(u, g->prefix, err);
    }
    if (rc == UR_OK) {
        rc = ur_gcs_http_escape(u, prefix, err);
    }
    if (rc == UR_OK && token != NULL) {
        rc = ur_buf_append_str(u, "&pageToken=", err);
        if (rc == UR_OK) {
            rc = ur_gcs_http_escape(u, token, err);
        }
    }
    return rc == UR_OK ? ur_buf_append_byte(u, '\0', err) : rc;
}

/* One page of a listing: its answer's body; *token_out gets nextPageToken (or NULL). */
typedef int (*page_fn)(gcs_store *g, const ur_buf *body, const char *what, void *ctx,
                       char **token_out, ur_err *err);

/* The listing of the keys under `prefix` (delimited: one level), page by page to on_page. A
 * missing bucket is UR_ENOTFOUND naming it. */
static int each_page(gcs_store *g, const char *prefix, int delimited, page_fn on_page, void *ctx,
                     ur_err *err)
{
    static const long accept[] = {404};
    ur_buf url, body;
    char *token = NULL;
    char what[1024];
    int rc = UR_OK;

    obj_url(g, prefix, what, sizeof what);
    ur_buf_init(&url, 0);
    ur_buf_init(&body, META_MAX);
    do {
        gcs_http_req req = {0};
        gcs_http_resp resp;
        char *next = NULL;
        ur_buf_reset(&url);
        ur_buf_reset(&body);
        rc = list_url(&url, g, prefix, delimited, token, err);
        if (rc == UR_OK) {
            req.method = "GET";
            req.url = (const char *)url.data;
            req.body = &body;
            req.what = what;
            rc = send_req(g, &req, accept, 1, &resp, err);
        }
        if (rc == UR_OK && resp.status == 404) {
            rc = ur_err_set_os(err, UR_ENOTFOUND, 0, what, "no such bucket");
        }
        if (rc == UR_OK) {
            rc = on_page(g, &body, what, ctx, &next, err);
        }
        ur_free(token);
        token = next;
    } while (rc == 0 && token != NULL);
    ur_free(token);
    ur_buf_dispose(&url);
    ur_buf_dispose(&body);
    return rc;
}

/* What list_page needs besides the page: to fn, or (dl set) one level to dir_fn. */
typedef struct keys_ctx {
    ur_kvstore_list_fn fn;
    ur_kvstore_list_dir_fn dir_fn;
    void *ctx;
    ur_kvstore__dir_list *dl;
    size_t dir_skip;
} keys_ctx;

static int keys_page(gcs_store *g, const ur_buf *body, const char *what, void *ctx,
                     char **token_out, ur_err *err)
{
    keys_ctx *k = ctx;
    return list_page(g, body, what, k->fn, k->dir_fn, k->ctx, k->dl, k->dir_skip, token_out, err);
}

static int list_pages(gcs_store *g, const char *prefix, ur_kvstore_list_fn fn,
                      ur_kvstore_list_dir_fn dir_fn, void *ctx, ur_kvstore__dir_list *dl,
                      ur_err *err)
{
    keys_ctx k = {fn, dir_fn, ctx, dl, strlen(g->prefix) + strlen(prefix)};
    return each_page(g, prefix, dl != NULL, keys_page, &k, err);
}

static int g_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    return list_pages((gcs_store *)kv, prefix, fn, NULL, ctx, NULL, err);
}

/* ur_kvstore_list_versions: each object of one listing page with its size and generation
 * (the version); *token_out gets nextPageToken (or NULL). */
typedef struct versions_ctx {
    ur_kvstore_list_version_fn fn;
    void *ctx;
} versions_ctx;

typedef struct {
    ur_kvstore_list_version_fn fn;
    void *ctx;
    size_t plen;
} version_item_ctx;

static int version_item(void *ctx, const char *name, uint64_t size, const char *generation,
                        ur_err *err)
{
    version_item_ctx *v = ctx;
    (void)err;
    return v->fn(v->ctx, name + v->plen, size, generation);
}

static int versions_page(gcs_store *g, const ur_buf *body, const char *what, void *ctx,
                         char **token_out, ur_err *err)
{
    version_item_ctx v = {((versions_ctx *)ctx)->fn, ((versions_ctx *)ctx)->ctx,
                          strlen(g->prefix)};
    cJSON *j = NULL;
    int rc;

    *token_out = NULL;
    if (ur_json_parse(&j, (const char *)body->data, body->len, NULL) < 0) {
        return ur_err_set_os(err, UR_EIO, 0, what, "listing answer is not JSON");
    }
    rc = each_item(g, j, what, version_item, &v, err);
    if (rc == 0) {
        rc = next_token(j, token_out, err);
    }
    cJSON_Delete(j);
    return rc;
}

/* The listing, page by page, each object with its generation. */
static int g_list_versions(ur_kvstore *kv, const char *prefix, ur_kvstore_list_version_fn fn,
                           void *ctx, ur_err *err)
{
    versions_ctx v = {fn, ctx};
    return each_page((gcs_store *)kv, prefix, 0, versions_page, &v, err);
}

/* One level: a listing with delimiter=/ ("prefixes" are the directories). A missing bucket
 * stays UR_ENOTFOUND naming it, as for g_list. */
static int g_list_dir(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                      ur_err *err)
{
    ur_kvstore__dir_list dl = {0};
    int rc = list_pages((gcs_store *)kv, prefix, NULL, fn, ctx, &dl, err);
    return ur_kvstore__dir_list_end(&dl, rc, kv, prefix, err);
}

/* After an upload: the object GCS stored must have the CRC-32C of what we sent (the answer is
 * the object resource, whose "crc32c" is base64 of 4 big-endian bytes). */
static int check_stored(const ur_buf *body, const char *what, uint32_t crc, ur_err *err)
{
    cJSON *j = NULL;
    const cJSON *c;
    uint32_t stored;
    int rc = UR_OK;
    if (ur_json_parse(&j, (const char *)body->data, body->len, NULL) < 0) {
        return UR_OK; /* GCS always answers with the resource; an emulator might not */
    }
    c = cJSON_GetObjectItemCaseSensitive(j, "crc32c");
    if (cJSON_IsString(c) && ur_gcs_crc_decode(c->valuestring, strlen(c->valuestring), &stored) &&
        stored != crc) {
        rc = ur_err_set_os(err, UR_EIO, 0, what,
                           "stored object's CRC-32C %08" PRIx32 " is not that of the %08" PRIx32
                           " bytes sent",
                           stored, crc);
    }
    cJSON_Delete(j);
    return rc;
}

/* <endpoint>/upload/storage/v1/b/<b>/o?uploadType=<type>&name=<name>[&ifGenerationMatch=0] */
static int upload_url(ur_buf *u, const gcs_store *g, const char *type, const char *key,
                      int if_absent, ur_err *err)
{
    int rc = api_url(u, g, "upload/storage/v1", NULL, err);
    if (rc == UR_OK) {
        rc = ur_buf_printf(u, err, "?uploadType=%s&name=", type);
    }
    if (rc == UR_OK) {
        rc = ur_gcs_http_escape(u, g->prefix, err);
    }
    if (rc == UR_OK) {
        rc = ur_gcs_http_escape(u, key, err);
    }
    if (rc == UR_OK && if_absent) {
        rc = ur_buf_append_str(u, "&ifGenerationMatch=0", err);
    }
    return rc == UR_OK ? ur_buf_append_byte(u, '\0', err) : rc;
}

/* Simple upload. Returns 1 (nothing written) when if_absent and the object exists. */
static int upload_simple(gcs_store *g, const char *key, const void *data, size_t n, int if_absent,
                         const char *what, ur_err *err)
{
    static const long accept[] = {412};
    static const char *const hdrs[] = {"Content-Type: application/octet-stream", NULL};
    ur_buf url, body;
    gcs_http_req req = {0};
    gcs_http_resp resp;
    uint32_t crc = ur_crc32c(0, data, n);
    int rc;

    ur_buf_init(&url, 0);
    ur_buf_init(&body, META_MAX);
    rc = upload_url(&url, g, "media", key, if_absent, err);
    if (rc < 0) {
        goto out;
    }
    req.method = "POST";
    req.url = (const char *)url.data;
    req.headers = hdrs;
    req.data = data;
    req.data_len = n;
    req.body = &body;
    req.what = what;
    rc = send_req(g, &req, accept, if_absent ? 1 : 0, &resp, err);
    if (rc == UR_ENOTFOUND) {
        rc = ur_err_set_os(err, UR_EIO, 0, what,
                           "GCS upload failed with HTTP 404: no such "
                           "bucket");
    }
    if (rc < 0) {
        goto out;
    }
    if (resp.status == 412) {
        rc = 1;
        goto out;
    }
    rc = check_stored(&body, what, crc, err);
out:
    ur_buf_dispose(&url);
    ur_buf_dispose(&body);
    return rc;
}

/* The last byte GCS holds from a 308 answer's "Range: bytes=0-N" (-1 when none). */
static int64_t persisted_end(const gcs_http_resp *resp)
{
    const char *dash = strchr(resp->range, '-');
    int64_t end = -1;
    if (dash == NULL || ur_num_parse_i64(dash + 1, strlen(dash + 1), &end) < 0) {
        return -1; /* none, or not a number: as if GCS kept nothing */
    }
    return end;
}

/* Resumable upload: open a session, then PUT g->chunk pieces with Content-Range; GCS
 * answers 308 (with the bytes it kept) until the last piece, then 200/201. */
static int upload_resumable(gcs_store *g, const char *key, const void *data, size_t n,
                            const char *what, ur_err *err)
{
    static const long accept_308[] = {308};
    static const char *const start_hdrs[] = {
        "Content-Type: application/json", "X-Upload-Content-Type: application/octet-stream", NULL};
    ur_buf url, body;
    gcs_http_req req = {0};
    gcs_http_resp resp;
    char session[sizeof resp.location];
    char crange[128];
    const char *put_hdrs[] = {crange, NULL};
    uint32_t crc = ur_crc32c(0, data, n);
    size_t off = 0;
    int rc;

    ur_buf_init(&url, 0);
    ur_buf_init(&body, META_MAX);
    rc = upload_url(&url, g, "resumable", key, 0, err);
    if (rc < 0) {
        goto out;
    }
    req.method = "POST";
    req.url = (const char *)url.data;
    req.headers = start_hdrs;
    req.data = "{}";
    req.data_len = 2;
    req.body = &body;
    req.what = what;
    rc = send_req(g, &req, NULL, 0, &resp, err);
    if (rc < 0) {
        goto out;
    }
    if (resp.location[0] == '\0') {
        rc = ur_err_set_os(err, UR_EIO, 0, what, "resumable upload answer has no Location");
        goto out;
    }
    memcpy(session, resp.location, sizeof session);
    for (;;) {
        size_t len = n - off < g->chunk ? n - off : g->chunk;
        int last = off + len == n;
        if (last) {
            snprintf(crange, sizeof crange, "Content-Range: bytes %zu-%zu/%zu", off, off + len - 1,
                     n);
        } else {
            snprintf(crange, sizeof crange, "Content-Range: bytes %zu-%zu/*", off, off + len - 1);
        }
        memset(&req, 0, sizeof req);
        ur_buf_reset(&body);
        req.method = "PUT";
        req.url = session;
        req.headers = put_hdrs;
        req.data = (const uint8_t *)data + off;
        req.data_len = len;
        req.body = &body;
        req.what = what;
        rc = send_req(g, &req, accept_308, 1, &resp, err);
        if (rc < 0) {
            goto out;
        }
        if (resp.status != 308) {
            rc = last ? check_stored(&body, what, crc, err)
                      : ur_err_set_os(err, UR_EIO, 0, what,
                                      "resumable upload finished after %zu of %zu bytes",
                                      off + len, n);
            goto out;
        }
        if (last) {
            rc = ur_err_set_os(err, UR_EIO, 0, what,
                               "resumable upload not finished after its last piece");
            goto out;
        }
        /* Carry on after what the server says it kept (it may keep less than was sent). */
        {
            int64_t end = persisted_end(&resp);
            if (end < (int64_t)off - 1 || end >= (int64_t)(off + len)) {
                rc = ur_err_set_os(err, UR_EIO, 0, what,
                                   "resumable upload: server kept bytes up to %" PRId64
                                   " after a piece %zu-%zu",
                                   end, off, off + len - 1);
                goto out;
            }
            off = (size_t)(end + 1);
            ur_kvstore__stored(off);
        }
    }
out:
    ur_buf_dispose(&url);
    ur_buf_dispose(&body);
    return rc;
}

static int g_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    gcs_store *g = (gcs_store *)kv;
    char what[1024];
    obj_url(g, key, what, sizeof what);
    if (!g->writable) {
        return ur_err_set_os(err, UR_EINTERNAL, 0, what, "store opened read-only");
    }
    if (n > g->chunk) {
        return upload_resumable(g, key, data, n, what, err);
    }
    return upload_simple(g, key, data, n, 0, what, err);
}

/* The vtable's conditional create (kvstore.h): UR_EEXIST rather than 1. */
static int g_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    gcs_store *g = (gcs_store *)kv;
    char what[1024];
    int rc;
    if (!g->writable) {
        return ur_err_set(err, UR_EINTERNAL, "%s: store is not open for writing", kv->desc);
    }
    obj_url(g, key, what, sizeof what);
    rc = upload_simple(g, key, data, n, 1, what, err);
    return rc == 1 ? ur_err_set_os(err, UR_EEXIST, 0, what, "already exists") : rc;
}

/* Delete one object; an absent one is not an error (the kvstore's contract). */
static int g_del(ur_kvstore *kv, const char *key, ur_err *err)
{
    static const long accept[] = {404};
    gcs_store *g = (gcs_store *)kv;
    ur_buf url;
    gcs_http_req req = {0};
    gcs_http_resp resp;
    char what[1024];
    int rc;

    obj_url(g, key, what, sizeof what);
    ur_buf_init(&url, 0);
    rc = api_url(&url, g, "storage/v1", key, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&url, '\0', err);
    }
    if (rc == UR_OK) {
        req.method = "DELETE";
        req.url = (const char *)url.data;
        req.what = what;
        rc = send_req(g, &req, accept, 1, &resp, err);
    }
    ur_buf_dispose(&url);
    return rc;
}

static int g_commit(ur_kvstore *kv, ur_err *err)
{
    /* Every upload is durable once GCS answered it. */
    (void)kv;
    (void)err;
    return UR_OK;
}

static void g_close(ur_kvstore *kv)
{
    gcs_store *g = (gcs_store *)kv;
    if (g == NULL) {
        return;
    }
    ur_http_free(g->http);
    ur_gcs_auth_free(g->auth);
    ur_free(g->endpoint);
    ur_free(g->bucket);
    ur_free(g->prefix);
    ur_free(g);
}

static const ur_kvstore_ops gcs_ops = {
    .name = "gcs",
    .read = g_read,
    .read_range = g_read_range,
    .size = g_size,
    .list = g_list,
    .list_dir = g_list_dir,
    .write = g_write,
    .commit = g_commit,
    .close = g_close,
    .del = g_del,
    .create = g_create,
    .list_versions = g_list_versions,
};

const char *ur_kvstore_gcs_auth_kind(const ur_kvstore *kv)
{
    if (kv == NULL || kv->ops != &gcs_ops) {
        return NULL;
    }
    return ur_gcs_auth_kind(((const gcs_store *)kv)->auth);
}

/* The endpoint: STORAGE_EMULATOR_HOST (an emulator), UNROLL_GCS_ENDPOINT, or Google's. */
static char *endpoint_from_env(int *emulator)
{
    const char *e = getenv("STORAGE_EMULATOR_HOST");
    ur_buf b;
    char *s;
    *emulator = 0;
    if (e != NULL && e[0] != '\0') {
        *emulator = 1;
    } else {
        e = getenv("UNROLL_GCS_ENDPOINT");
        if (e == NULL || e[0] == '\0') {
            e = "https://storage.googleapis.com";
        }
    }
    ur_buf_init(&b, 0);
    if (ur_buf_printf(&b, NULL, "%s%s", strstr(e, "://") != NULL ? "" : "http://", e) < 0) {
        ur_buf_dispose(&b);
        return NULL;
    }
    s = ur_buf_detach(&b, NULL);
    ur_buf_dispose(&b);
    if (s != NULL) {
        size_t n = strlen(s);
        while (n > 0 && s[n - 1] == '/') {
            s[--n] = '\0';
        }
    }
    return s;
}

/* The resumable piece: UNROLL_GCS_CHUNK_BYTES where it is a 256 KiB multiple, else the default. */
static size_t chunk_from_env(void)
{
    const char *v = getenv("UNROLL_GCS_CHUNK_BYTES");
    uint64_t n = 0;
    if (v == NULL || ur_num_parse_u64(v, strlen(v), &n) < 0) {
        n = 0;
    }
    if (n >= UR_GCS_CHUNK_MIN && n % UR_GCS_CHUNK_MIN == 0) {
        return (size_t)n;
    }
    return UR_GCS_CHUNK_DEFAULT;
}

int ur_kvstore_gcs_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                        ur_err *err)
{
    gcs_store *g;
    size_t blen = strlen(bucket), plen = strlen(prefix);
    int emulator, rc = UR_OK;

    if (blen < 3 || blen > 222 ||
        strspn(bucket, "abcdefghijklmnopqrstuvwxyz0123456789-_.") < blen) {
        return ur_err_set(err, UR_EINVAL,
                          "'gs://%s': not a valid GCS bucket name (3 to 222 of a-z 0-9 - _ .)",
                          bucket);
    }
    g = ur_calloc(1, sizeof *g);
    if (g == NULL) {
        return ur_err_oom(err);
    }
    g->base.ops = &gcs_ops;
    g->writable = writable;
    g->chunk = chunk_from_env();
    g->bucket = ur_strdup(bucket);
    g->prefix = ur_malloc(plen + 2);
    g->endpoint = endpoint_from_env(&emulator);
    if (g->bucket == NULL || g->prefix == NULL || g->endpoint == NULL) {
        rc = ur_err_oom(err);
    } else {
        memcpy(g->prefix, prefix, plen);
        if (plen > 0) {
            g->prefix[plen++] = '/';
        }
        g->prefix[plen] = '\0';
        ur_json_init();
        rc = ur_gcs_auth_new(&g->auth, emulator, err);
    }
    if (rc == UR_OK) {
        rc = ur_http_new(&g->http, NULL, err);
    }
    if (rc < 0) {
        g_close(&g->base);
        return rc;
    }
    snprintf(g->base.desc, sizeof g->base.desc, "gs://%s/%s", g->bucket, g->prefix);
    *out = &g->base;
    return UR_OK;
}
