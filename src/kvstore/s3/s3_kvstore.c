/* S3 (and S3-compatible stores: MinIO, SeaweedFS, R2, GCS interoperability) as a ur_kvstore.
 *
 * Key "a/b" of a store opened on s3://bucket/prefix is the object "prefix/a/b".
 *   read        GET                              read_range  GET with Range: bytes=a-b
 *   size        HEAD (Content-Length)            list        ListObjectsV2, paginated
 *   write       PUT; past UR_S3_PART bytes a multipart upload (initiate, parts, complete; abort
 *               on failure)
 *   delete      DELETE
 * Values are downloaded into buffers (never mapped), so what a run holds is what the plan asks
 * for. Requests go through one HTTP client shared by every S3 store of the process (connection
 * reuse between input and output on the same server). */
#define _POSIX_C_SOURCE 200809L
#include "../kvstore_impl.h"
#include "s3_impl.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/num.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Part size of multipart uploads (S3 allows 5 MiB .. 5 GiB; 10000 parts at most). */
#define UR_S3_PART_DEFAULT ((size_t)64 << 20)
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct {
    ur_kvstore base;
    ur_s3_config cfg;
    char *bucket;
    char *prefix;   /* "" or "p/q" (no slashes at either end) */
    char host[512]; /* Host header: host[:port] */
    char origin[600]; /* scheme://host[:port] */
    int writable;
    size_t part_size;
    ur_http *http;
} s3_store;

/* ---- one HTTP client for the process ---- */

static pthread_mutex_t client_lock = PTHREAD_MUTEX_INITIALIZER;
static ur_http *client;
static unsigned client_refs;

static int client_get(ur_http **out, ur_err *err)
{
    int rc = UR_OK;
    pthread_mutex_lock(&client_lock);
    if (client == NULL) {
        rc = ur_http_new(&client, NULL, err);
    }
    if (rc == UR_OK) {
        client_refs++;
        *out = client;
    }
    pthread_mutex_unlock(&client_lock);
    return rc;
}

static void client_put(void)
{
    pthread_mutex_lock(&client_lock);
    if (client_refs > 0 && --client_refs == 0) {
        ur_http_free(client);
        client = NULL;
    }
    pthread_mutex_unlock(&client_lock);
}

/* ---- requests ---- */

typedef struct {
    s3_store *s;
    const char *method;
    const char *canon_uri;
    const char *query;
    char payload_hash[65];
} sign_ctx;

static int auth(void *ctx, const ur_http_req *req, ur_http_headers *hs, ur_err *err)
{
    sign_ctx *sc = ctx;
    (void)req;
    if (sc->s->cfg.anonymous) {
        return UR_OK;
    }
    return ur_s3__sign(&sc->s->cfg.creds, sc->s->cfg.region, sc->method, sc->s->host,
                       sc->canon_uri, sc->query, sc->payload_hash, ur_clock_now_s(), hs, err);
}

/* The object name of `key` ("" key: the prefix itself, for listings). */
static int object_name(s3_store *s, const char *key, ur_buf *out, ur_err *err)
{
    int rc = UR_OK;
    if (s->prefix[0] != '\0') {
        rc = ur_buf_append_str(out, s->prefix, err);
        if (rc == UR_OK && key[0] != '\0') {
            rc = ur_buf_append_byte(out, '/', err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, key, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, 0, err);
        out->len--;
    }
    return rc;
}

typedef struct {
    ur_buf uri;   /* canonical URI: /[bucket/]encoded-key */
    ur_buf url;   /* origin + uri [+ ? + query] */
    char what[700];
} target;

static void target_dispose(target *t)
{
    ur_buf_dispose(&t->uri);
    ur_buf_dispose(&t->url);
}

/* Build the URI and URL of object `obj` (NULL: the bucket) with canonical `query`. */
static int target_make(target *t, s3_store *s, const char *obj, const char *query, ur_err *err)
{
    int rc;
    ur_buf_init(&t->uri, 0);
    ur_buf_init(&t->url, 0);
    rc = ur_buf_append_byte(&t->uri, '/', err);
    if (rc == UR_OK && s->cfg.path_style) {
        rc = ur_http_encode(&t->uri, s->bucket, 0, err);
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(&t->uri, '/', err);
        }
    }
    if (rc == UR_OK && obj != NULL) {
        rc = ur_http_encode(&t->uri, obj, 1, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&t->uri, 0, err);
        t->uri.len--;
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(&t->url, err, "%s%s%s%s", s->origin, (const char *)t->uri.data,
                           query[0] ? "?" : "", query);
    }
    snprintf(t->what, sizeof t->what, "s3://%s/%s", s->bucket, obj != NULL ? obj : "");
    return rc;
}

/* Perform `method` on `obj` with canonical `query`; the rest of `req` is the caller's. */
static int s3_request(s3_store *s, ur_http_req *req, const char *method, const char *obj,
                      const char *query, long *status, ur_err *err)
{
    target t;
    sign_ctx sc;
    long st = 0;
    int rc = target_make(&t, s, obj, query, err);
    if (rc < 0) {
        target_dispose(&t);
        return rc;
    }
    sc.s = s;
    sc.method = method;
    sc.canon_uri = (const char *)t.uri.data;
    sc.query = query;
    if (req->body != NULL && req->body_len > 0) {
        ur_s3__sha256_hex(req->body, req->body_len, sc.payload_hash);
    } else {
        memcpy(sc.payload_hash, EMPTY_SHA256, sizeof EMPTY_SHA256);
    }
    req->method = method;
    req->url = (const char *)t.url.data;
    req->auth = auth;
    req->auth_ctx = &sc;
    req->what = t.what;
    rc = ur_http_perform(s->http, req, &st, err);
    if (status != NULL) {
        *status = st;
    }
    if (rc == UR_EIO && (st == 403 || st == 401) && err != NULL) {
        ur_err_wrap(err, "access denied (credentials: %s)",
                    s->cfg.anonymous ? "none found, anonymous request" : s->cfg.creds_from);
    }
    target_dispose(&t);
    return rc;
}

/* Make `key`'s object name, then run the request. */
static int key_request(s3_store *s, ur_http_req *req, const char *method, const char *key,
                       const char *query, long *status, ur_err *err)
{
    ur_buf obj;
    int rc;
    ur_buf_init(&obj, 0);
    rc = object_name(s, key, &obj, err);
    if (rc == UR_OK) {
        rc = s3_request(s, req, method, (const char *)obj.data, query, status, err);
    }
    ur_buf_dispose(&obj);
    return rc;
}

static int s_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    ur_http_req req;
    memset(&req, 0, sizeof req);
    req.out = out;
    return key_request((s3_store *)kv, &req, "GET", key, "", NULL, err);
}

static int s_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    ur_http_req req;
    if (len == 0) {
        return UR_OK;
    }
    memset(&req, 0, sizeof req);
    req.has_range = 1;
    req.range_off = offset;
    req.range_len = len;
    req.dst = dst;
    req.dst_len = len;
    return key_request((s3_store *)kv, &req, "GET", key, "", NULL, err);
}

static int s_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    ur_http_req req;
    ur_buf hdr;
    char v[64];
    int rc;
    memset(&req, 0, sizeof req);
    ur_buf_init(&hdr, 0);
    req.resp_headers = &hdr;
    rc = key_request((s3_store *)kv, &req, "HEAD", key, "", NULL, err);
    if (rc == UR_OK) {
        char *end;
        if (!ur_http_header_get(&hdr, "content-length", v, sizeof v)) {
            rc = ur_err_set(err, UR_EIO, "HEAD answer without Content-Length");
        } else {
            *size_out = strtoull(v, &end, 10);
        }
    }
    ur_buf_dispose(&hdr);
    return rc;
}

/* The text between <tag> and </tag> at or after *pos in xml[0..n), XML entities decoded, into
 * out (reset first). 1 found (pos moved past it), 0 not. */
static int xml_next(const char *xml, size_t n, size_t *pos, const char *tag, ur_buf *out,
                    const char *stop_tag)
{
    char open_t[64], close_t[64];
    const char *p = xml + *pos, *end = xml + n, *q, *e, *stop = NULL;
    size_t ol, cl;
    snprintf(open_t, sizeof open_t, "<%s>", tag);
    snprintf(close_t, sizeof close_t, "</%s>", tag);
    ol = strlen(open_t);
    cl = strlen(close_t);
    for (q = p; q + ol <= end && memcmp(q, open_t, ol) != 0; q++) {
        if (stop_tag != NULL && stop == NULL && (size_t)(end - q) >= strlen(stop_tag) &&
            memcmp(q, stop_tag, strlen(stop_tag)) == 0) {
            stop = q;
        }
    }
    if (q + ol > end || (stop != NULL && stop < q)) {
        return 0;
    }
    q += ol;
    for (e = q; e + cl <= end && memcmp(e, close_t, cl) != 0; e++) {
    }
    if (e + cl > end) {
        return 0;
    }
    ur_buf_reset(out);
    for (const char *c = q; c < e; c++) {
        static const struct {
            const char *ent;
            char ch;
        } ents[] = {{"&amp;", '&'},
                    {"&lt;", '<'},
                    {"&gt;", '>'},
                    {"&quot;", '"'},
                    {"&apos;", '\''}};
        char ch = *c;
        if (ch == '&') {
            for (size_t i = 0; i < sizeof ents / sizeof ents[0]; i++) {
                size_t k = strlen(ents[i].ent);
                if ((size_t)(e - c) >= k && memcmp(c, ents[i].ent, k) == 0) {
                    ch = ents[i].ch;
                    c += k - 1;
                    break;
                }
            }
            if (ch == '&' && c + 2 < e && c[1] == '#') {
                char *stop2;
                unsigned long v = c[2] == 'x' ? strtoul(c + 3, &stop2, 16)
                                              : strtoul(c + 2, &stop2, 10);
                if (*stop2 == ';' && v > 0 && v < 128) {
                    ch = (char)v;
                    c = stop2;
                }
            }
        }
        if (ur_buf_append_byte(out, (uint8_t)ch, NULL) < 0) {
            return 0;
        }
    }
    (void)ur_buf_append_byte(out, 0, NULL);
    out->len--;
    *pos = (size_t)(e + cl - xml);
    return 1;
}

/* What a listing does with each page of ListObjectsV2's answer. */
typedef int (*page_fn)(s3_store *s, const ur_buf *body, void *ctx, ur_err *err);

/* The ListObjectsV2 listing of the keys under `prefix` (of the store), page by page. With
 * delimited, delimiter=/: the names one level down, deeper ones as CommonPrefixes. */
static int list_objects(s3_store *s, const char *prefix, int delimited, page_fn on_page, void *ctx,
                        ur_err *err)
{
    ur_buf obj, query, body, tok, item;
    int rc, more = 1;

    ur_buf_init(&obj, 0);
    ur_buf_init(&query, 0);
    ur_buf_init(&body, (size_t)64 << 20);
    ur_buf_init(&tok, 0);
    ur_buf_init(&item, 0);
    rc = object_name(s, prefix, &obj, err);
    /* a store's own prefix "p" lists "p/", so that "p2/x" is not taken for "p" + "2/x" */
    if (rc == UR_OK && prefix[0] == '\0' && s->prefix[0] != '\0') {
        rc = ur_buf_append_str(&obj, "/", err);
    }
    while (rc == UR_OK && more) {
        ur_http_req req;
        size_t pos = 0;
        ur_buf_reset(&query);
        ur_buf_reset(&body);
        /* canonical order: continuation-token < delimiter < list-type < prefix */
        if (tok.len > 0) {
            rc = ur_buf_append_str(&query, "continuation-token=", err);
            if (rc == UR_OK) {
                rc = ur_http_encode(&query, (const char *)tok.data, 0, err);
            }
            if (rc == UR_OK) {
                rc = ur_buf_append_byte(&query, '&', err);
            }
        }
        if (rc == UR_OK && delimited) {
            rc = ur_buf_append_str(&query, "delimiter=%2F&", err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(&query, "list-type=2&prefix=", err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append(&obj, "", 1, err); /* NUL for encoding */
            obj.len--;
        }
        if (rc == UR_OK) {
            rc = ur_http_encode(&query, (const char *)obj.data, 0, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(&query, 0, err);
            query.len--;
        }
        if (rc < 0) {
            break;
        }
        memset(&req, 0, sizeof req);
        req.out = &body;
        rc = s3_request(s, &req, "GET", NULL, (const char *)query.data, NULL, err);
        if (rc == UR_OK) {
            rc = on_page(s, &body, ctx, err);
        }
        if (rc != UR_OK) {
            break;
        }
        more = xml_next((const char *)body.data, body.len, &pos, "IsTruncated", &item, NULL) &&
               strcmp((const char *)item.data, "true") == 0;
        if (more) {
            pos = 0;
            if (!xml_next((const char *)body.data, body.len, &pos, "NextContinuationToken", &tok,
                          NULL)) {
                rc = ur_err_set(err, UR_EIO,
                                "s3://%s: truncated listing without a continuation token",
                                s->bucket);
            }
        }
    }
    ur_buf_dispose(&obj);
    ur_buf_dispose(&query);
    ur_buf_dispose(&body);
    ur_buf_dispose(&tok);
    ur_buf_dispose(&item);
    return rc;
}

/* Each element <tag> of the page and its first <sub> (with the second <sub2>, or NULL). */
typedef int (*element_fn)(void *ctx, const char *value, const char *value2, ur_err *err);

static int each_element(s3_store *s, const ur_buf *body, const char *tag, const char *sub,
                        const char *sub2, element_fn fn, void *ctx, ur_err *err)
{
    ur_buf item, v, v2;
    size_t pos = 0;
    int rc = UR_OK;
    ur_buf_init(&item, 0);
    ur_buf_init(&v, 0);
    ur_buf_init(&v2, 0);
    while (rc == UR_OK && xml_next((const char *)body->data, body->len, &pos, tag, &item, NULL)) {
        size_t ip = 0;
        if (!xml_next((const char *)item.data, item.len, &ip, sub, &v, NULL) ||
            (sub2 != NULL && !xml_next((const char *)item.data, item.len, &ip, sub2, &v2, NULL))) {
            rc = ur_err_set(err, UR_EIO, "s3://%s: malformed ListObjectsV2 answer", s->bucket);
            break;
        }
        rc = fn(ctx, (const char *)v.data, sub2 != NULL ? (const char *)v2.data : NULL, err);
    }
    ur_buf_dispose(&item);
    ur_buf_dispose(&v);
    ur_buf_dispose(&v2);
    return rc;
}

typedef struct {
    size_t skip; /* the store's prefix and its '/' */
    ur_kvstore_list_fn fn;
    void *ctx;
    ur_kvstore__dir_list dl; /* for s_list_dir */
    size_t dir_skip;         /* skip and the listed directory */
    ur_kvstore_list_dir_fn dir_fn;
} listing;

static int on_key(void *ctx, const char *key, const char *size, ur_err *err)
{
    listing *l = ctx;
    uint64_t n = 0;
    if (strlen(key) < l->skip || ur_num_parse_u64(size, strlen(size), &n) < 0) {
        return ur_err_set(err, UR_EIO, "malformed ListObjectsV2 answer: key '%s', size '%.40s'",
                          key, size);
    }
    return l->fn(l->ctx, key + l->skip, n);
}

static int keys_page(s3_store *s, const ur_buf *body, void *ctx, ur_err *err)
{
    return each_element(s, body, "Contents", "Key", "Size", on_key, ctx, err);
}

static int s_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    s3_store *s = (s3_store *)kv;
    listing l = {s->prefix[0] ? strlen(s->prefix) + 1 : 0, fn, ctx, {0}, 0, NULL};
    return list_objects(s, prefix, 0, keys_page, &l, err);
}

static int on_name(listing *l, const char *full, int is_dir, ur_err *err)
{
    return ur_kvstore__dir_list_add(&l->dl, full, l->dir_skip, is_dir, err);
}

static int on_value(void *ctx, const char *key, const char *unused, ur_err *err)
{
    (void)unused;
    return on_name(ctx, key, 0, err);
}

static int on_common_prefix(void *ctx, const char *prefix, const char *unused, ur_err *err)
{
    (void)unused;
    return on_name(ctx, prefix, 1, err);
}

static int entries_page(s3_store *s, const ur_buf *body, void *ctx, ur_err *err)
{
    listing *l = ctx;
    int rc = each_element(s, body, "Contents", "Key", NULL, on_value, ctx, err);
    if (rc == UR_OK) {
        rc = each_element(s, body, "CommonPrefixes", "Prefix", NULL, on_common_prefix, ctx, err);
    }
    return rc == UR_OK ? ur_kvstore__dir_list_flush(&l->dl, l->dir_fn, l->ctx) : rc;
}

/* One level: a delimited listing (CommonPrefixes are the directories), page by page. */
static int s_list_dir(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                      ur_err *err)
{
    s3_store *s = (s3_store *)kv;
    listing l = {s->prefix[0] ? strlen(s->prefix) + 1 : 0, NULL, ctx, {0}, 0, fn};
    l.dir_skip = l.skip + strlen(prefix);
    return ur_kvstore__dir_list_end(&l.dl, list_objects(s, prefix, 1, entries_page, &l, err), kv,
                                    prefix, err);
}

/* ur_kvstore_list_versions: each <Contents> of the listing with its <Key>, <Size> and <ETag>
 * (the version, quotes dropped), in any order within the element. */
typedef struct {
    size_t skip; /* the store's prefix and its '/' */
    ur_kvstore_list_version_fn fn;
    void *ctx;
} version_listing;

static int versions_page(s3_store *s, const ur_buf *body, void *ctx, ur_err *err)
{
    const version_listing *l = ctx;
    ur_buf item, key, size, etag;
    size_t pos = 0;
    int rc = UR_OK;
    ur_buf_init(&item, 0);
    ur_buf_init(&key, 0);
    ur_buf_init(&size, 0);
    ur_buf_init(&etag, 0);
    while (rc == 0 &&
           xml_next((const char *)body->data, body->len, &pos, "Contents", &item, NULL)) {
        size_t kp = 0, sp = 0, ep = 0;
        const char *e;
        size_t elen;
        if (!xml_next((const char *)item.data, item.len, &kp, "Key", &key, NULL) ||
            !xml_next((const char *)item.data, item.len, &sp, "Size", &size, NULL) ||
            strlen((const char *)key.data) < l->skip) {
            rc = ur_err_set(err, UR_EIO, "s3://%s: malformed ListObjectsV2 answer", s->bucket);
            break;
        }
        if (!xml_next((const char *)item.data, item.len, &ep, "ETag", &etag, NULL)) {
            ur_buf_reset(&etag); /* no ETag: the size is all there is to compare */
            rc = ur_buf_append_byte(&etag, 0, err);
            etag.len--;
        }
        e = (const char *)etag.data;
        elen = etag.len;
        if (elen >= 2 && e[0] == '"' && e[elen - 1] == '"') {
            etag.data[elen - 1] = '\0';
            e++;
        }
        uint64_t n = 0;
        if (rc == UR_OK && ur_num_parse_u64((const char *)size.data, size.len, &n) < 0) {
            rc = ur_err_set(err, UR_EIO, "s3://%s: malformed ListObjectsV2 answer: size '%.40s'",
                            s->bucket, (const char *)size.data);
        }
        if (rc == UR_OK) {
            rc = l->fn(l->ctx, (const char *)key.data + l->skip, n, e);
        }
    }
    ur_buf_dispose(&item);
    ur_buf_dispose(&key);
    ur_buf_dispose(&size);
    ur_buf_dispose(&etag);
    return rc;
}

static int s_list_versions(ur_kvstore *kv, const char *prefix, ur_kvstore_list_version_fn fn,
                           void *ctx, ur_err *err)
{
    s3_store *s = (s3_store *)kv;
    version_listing l = {s->prefix[0] ? strlen(s->prefix) + 1 : 0, fn, ctx};
    return list_objects(s, prefix, 0, versions_page, &l, err);
}

static int put_simple(s3_store *s, const char *key, const void *data, size_t n, ur_err *err)
{
    ur_http_req req;
    memset(&req, 0, sizeof req);
    req.body = data;
    req.body_len = n;
    return key_request(s, &req, "PUT", key, "", NULL, err);
}

/* Multipart upload: initiate, PUT the parts in order, complete; abort on any failure so no
 * parts linger (and are billed). */
static int put_multipart(s3_store *s, const char *key, const uint8_t *data, size_t n, ur_err *err)
{
    ur_buf id, resp, q, done, hdr;
    ur_http_req req;
    size_t nparts = (n + s->part_size - 1) / s->part_size;
    int rc;

    ur_buf_init(&id, 0);
    ur_buf_init(&resp, 0);
    ur_buf_init(&q, 0);
    ur_buf_init(&done, 0);
    ur_buf_init(&hdr, 0);
    memset(&req, 0, sizeof req);
    req.out = &resp;
    rc = key_request(s, &req, "POST", key, "uploads=", NULL, err);
    if (rc == UR_OK) {
        size_t pos = 0;
        if (!xml_next((const char *)resp.data, resp.len, &pos, "UploadId", &id, NULL)) {
            rc = ur_err_set(err, UR_EIO, "s3://%s/%s: no UploadId in the answer", s->bucket, key);
        }
    }
    if (rc < 0) {
        goto out;
    }
    rc = ur_buf_append_str(&done, "<CompleteMultipartUpload>", err);
    for (size_t i = 0; rc == UR_OK && i < nparts; i++) {
        size_t off = i * s->part_size, len = n - off < s->part_size ? n - off : s->part_size;
        char etag[256];
        ur_buf_reset(&q);
        rc = ur_buf_printf(&q, err, "partNumber=%zu&uploadId=", i + 1);
        if (rc == UR_OK) {
            rc = ur_http_encode(&q, (const char *)id.data, 0, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(&q, 0, err);
            q.len--;
        }
        if (rc < 0) {
            break;
        }
        memset(&req, 0, sizeof req);
        req.body = data + off;
        req.body_len = len;
        req.resp_headers = &hdr;
        rc = key_request(s, &req, "PUT", key, (const char *)q.data, NULL, err);
        if (rc == UR_OK && !ur_http_header_get(&hdr, "etag", etag, sizeof etag)) {
            rc = ur_err_set(err, UR_EIO, "s3://%s/%s: part %zu answer without ETag", s->bucket,
                            key, i + 1);
        }
        if (rc == UR_OK) {
            rc = ur_buf_printf(&done, err,
                               "<Part><PartNumber>%zu</PartNumber><ETag>%s</ETag></Part>", i + 1,
                               etag);
        }
        if (rc == UR_OK) {
            ur_kvstore__stored(off + len);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(&done, "</CompleteMultipartUpload>", err);
    }
    ur_buf_reset(&q);
    if (ur_buf_append_str(&q, "uploadId=", err) < 0 ||
        ur_http_encode(&q, (const char *)id.data, 0, err) < 0 ||
        ur_buf_append_byte(&q, 0, err) < 0) {
        rc = rc < 0 ? rc : UR_ENOMEM;
        goto out;
    }
    q.len--;
    if (rc == UR_OK) {
        ur_buf_reset(&resp);
        memset(&req, 0, sizeof req);
        req.body = done.data;
        req.body_len = done.len;
        req.out = &resp;
        rc = key_request(s, &req, "POST", key, (const char *)q.data, NULL, err);
        /* S3 may answer 200 and put the failure in the body */
        if (rc == UR_OK && resp.len > 0) {
            size_t pos = 0;
            ur_buf code;
            ur_buf_init(&code, 0);
            if (xml_next((const char *)resp.data, resp.len, &pos, "Code", &code, NULL)) {
                char said[128]; /* server text: scrubbed as every quoted answer is */
                ur_http_redact((const char *)code.data, code.len, said, sizeof said);
                rc = ur_err_set(err, UR_EIO, "s3://%s/%s: completing the upload failed: %s",
                                s->bucket, key, said);
            }
            ur_buf_dispose(&code);
        }
    }
    if (rc < 0) {
        memset(&req, 0, sizeof req);
        (void)key_request(s, &req, "DELETE", key, (const char *)q.data, NULL, NULL);
    }
out:
    ur_buf_dispose(&id);
    ur_buf_dispose(&resp);
    ur_buf_dispose(&q);
    ur_buf_dispose(&done);
    ur_buf_dispose(&hdr);
    return rc;
}

static int s_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    s3_store *s = (s3_store *)kv;
    if (!s->writable) {
        return ur_err_set(err, UR_EINTERNAL, "%s: store is not open for writing", kv->desc);
    }
    return n > s->part_size ? put_multipart(s, key, data, n, err)
                            : put_simple(s, key, data, n, err);
}

/* PUT with If-None-Match: * (S3 since 2024, MinIO, SeaweedFS): 412 when the object exists.
 * One simple PUT whatever the size: the claims and markers created this way are small. */
static int s_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    static const long accept[] = {412};
    static const char *const hdrs[] = {"If-None-Match: *"};
    s3_store *s = (s3_store *)kv;
    ur_http_req req;
    long status = 0;
    int rc;
    if (!s->writable) {
        return ur_err_set(err, UR_EINTERNAL, "%s: store is not open for writing", kv->desc);
    }
    memset(&req, 0, sizeof req);
    req.body = data;
    req.body_len = n;
    req.headers = hdrs;
    req.n_headers = 1;
    req.accept = accept;
    req.n_accept = 1;
    rc = key_request(s, &req, "PUT", key, "", &status, err);
    if (rc == UR_OK && status == 412) {
        char where[700];
        snprintf(where, sizeof where, "s3://%s/%s%s%s", s->bucket, s->prefix,
                 s->prefix[0] ? "/" : "", key);
        rc = ur_err_set_os(err, UR_EEXIST, 0, where, "already exists");
    }
    return rc;
}

static int s_delete(ur_kvstore *kv, const char *key, ur_err *err)
{
    ur_http_req req;
    memset(&req, 0, sizeof req);
    return key_request((s3_store *)kv, &req, "DELETE", key, "", NULL, err);
}

static void s_close(ur_kvstore *kv)
{
    s3_store *s = (s3_store *)kv;
    if (s->http != NULL) {
        client_put();
    }
    ur_free(s->bucket);
    ur_free(s->prefix);
    memset(&s->cfg, 0, sizeof s->cfg); /* the secret */
    ur_free(s);
}

static const ur_kvstore_ops s3_ops = {
    "s3",    s_read,   s_read_range, NULL,       s_size,          s_list,
    s_write, NULL,     s_close,      NULL,       s_delete,        NULL,
    NULL,    s_create, NULL,         s_list_dir, s_list_versions,
};

int ur_kvstore_s3_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                       ur_err *err)
{
    s3_store *s = ur_calloc(1, sizeof *s);
    const char *v;
    int rc;

    if (s == NULL) {
        return ur_err_oom(err);
    }
    s->base.ops = &s3_ops;
    snprintf(s->base.desc, sizeof s->base.desc, "s3://%s%s%s", bucket, prefix[0] ? "/" : "",
             prefix);
    s->writable = writable;
    s->part_size = UR_S3_PART_DEFAULT;
    if ((v = getenv("UNROLL_S3_PART_BYTES")) != NULL) {
        uint64_t n = 0;
        if (ur_num_parse_u64(v, strlen(v), &n) == 0 && n >= 5u << 20 && n <= SIZE_MAX) {
            s->part_size = (size_t)n;
        }
    }
    s->bucket = ur_strdup(bucket);
    s->prefix = ur_strdup(prefix);
    if (s->bucket == NULL || s->prefix == NULL) {
        rc = ur_err_oom(err);
        goto fail;
    }
    rc = ur_s3__config_load(&s->cfg, bucket, err);
    if (rc < 0) {
        goto fail;
    }
    ur_http_secret_add(s->cfg.creds.secret);
    ur_http_secret_add(s->cfg.creds.token);
    if (s->cfg.endpoint[0] != '\0') {
        const char *h = strstr(s->cfg.endpoint, "://") + 3;
        size_t hl = strcspn(h, "/");
        if (s->cfg.path_style) {
            snprintf(s->host, sizeof s->host, "%.*s", (int)hl, h);
        } else {
            snprintf(s->host, sizeof s->host, "%s.%.*s", bucket, (int)hl, h);
        }
        snprintf(s->origin, sizeof s->origin, "%.*s%s", (int)(h - s->cfg.endpoint),
                 s->cfg.endpoint, s->host);
    } else {
        if (s->cfg.path_style) {
            snprintf(s->host, sizeof s->host, "s3.%s.amazonaws.com", s->cfg.region);
        } else {
            snprintf(s->host, sizeof s->host, "%s.s3.%s.amazonaws.com", bucket, s->cfg.region);
        }
        snprintf(s->origin, sizeof s->origin, "https://%s", s->host);
    }
    rc = client_get(&s->http, err);
    if (rc < 0) {
        goto fail;
    }
    *out = &s->base;
    return UR_OK;
fail:
    s_close(&s->base);
    return rc;
}
