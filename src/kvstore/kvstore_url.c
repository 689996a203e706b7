/* Locations -> stores: local paths to the file store, "scheme://bucket/prefix" to the driver of
 * that scheme in the table below (unroll/kvstore.h, "Locations").
 *
 * Why a refusal for unknown schemes: a path such as "gs://bucket/out" is also a valid
 * relative directory name; taken as one, a run "succeeds" into a local directory "gs:" that
 * nobody asked for. Anything of the form <letters>:// is therefore a URL or an error. */
#include "kvstore_impl.h"

#include "unroll/alloc.h"

#include <string.h>

typedef struct {
    const char *scheme;
    ur_kvstore_loc_kind kind;
    unsigned caps;                  /* UR_KV_* (unroll/kvstore.h) */
    ur_kvstore_remote_open_fn open; /* NULL: not built into this binary */
} scheme_entry;

/* Requests a read-ahead store keeps in flight (the HTTP layer's own cap,
 * UNROLL_HTTP_MAX_IN_FLIGHT, still applies). */
#define AHEAD_THREADS 16

/* A local path (no scheme): the file store, a directory of this machine. */
#define LOCAL_CAPS (UR_KV_CAN_RENAME | UR_KV_CAN_LOCK | UR_KV_IS_PATH)

static const scheme_entry schemes[] = {
    {"s3", UR_LOC_S3, UR_KV_NETWORK, ur_kvstore_s3_open},
    {"gs", UR_LOC_GCS, UR_KV_NETWORK, ur_kvstore_gcs_open},
    /* an object store in this process's memory (tests: the run protocol's fault injection);
     * no rename and no lock, as a bucket, so it takes the object-store paths */
    {"mem", UR_LOC_MEM, 0, ur_kvstore_mem_open},
};

/* Length of the "scheme" in "scheme://", or 0 when `loc` does not start like a URL. */
static size_t scheme_len(const char *loc)
{
    size_t i = 0;
    while ((loc[i] >= 'a' && loc[i] <= 'z') || (loc[i] >= 'A' && loc[i] <= 'Z') ||
           (i > 0 && ((loc[i] >= '0' && loc[i] <= '9') || loc[i] == '+' || loc[i] == '-' ||
                      loc[i] == '.'))) {
        i++;
    }
    return i > 0 && strncmp(loc + i, "://", 3) == 0 ? i : 0;
}

static const scheme_entry *find_scheme(const char *loc, size_t n)
{
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        if (strlen(schemes[i].scheme) == n && strncmp(schemes[i].scheme, loc, n) == 0) {
            /* mem:// exists only for a process (a test) that made a memory store */
            return schemes[i].kind != UR_LOC_MEM || ur_kvstore_mem__any_named() ? &schemes[i]
                                                                                : NULL;
        }
    }
    return NULL;
}

unsigned ur_kvstore_location_caps(const char *location)
{
    size_t n = scheme_len(location);
    const scheme_entry *e;
    if (n == 0) {
        return LOCAL_CAPS;
    }
    e = find_scheme(location, n);
    return e != NULL ? e->caps : 0;
}

int ur_kvstore_location_can(const char *location, unsigned caps)
{
    return (ur_kvstore_location_caps(location) & caps) == caps;
}

int ur_kvstore_location_kind(const char *location, ur_err *err)
{
    size_t n = scheme_len(location);
    const scheme_entry *e;
    const char *bucket;
    if (n == 0) {
        return UR_LOC_LOCAL;
    }
    e = find_scheme(location, n);
    if (e == NULL) {
        return ur_err_set(err, UR_EINVAL,
                          "'%s': unsupported URL scheme '%.*s://' (local paths, s3:// and gs:// "
                          "are supported)",
                          location, (int)n, location);
    }
    bucket = location + n + 3;
    if (bucket[0] == '\0' || bucket[0] == '/') {
        return ur_err_set(err, UR_EINVAL, "'%s': no bucket name after '%s://'", location,
                          e->scheme);
    }
    return (int)e->kind;
}

int ur_kvstore_open_url(ur_kvstore **out, const char *location, int writable, ur_err *err)
{
    size_t n, blen, plen;
    const scheme_entry *e;
    const char *bucket, *slash, *prefix;
    char *b = NULL, *p = NULL;
    int rc = ur_kvstore_location_kind(location, err);

    if (rc < 0) {
        return rc;
    }
    if (rc == UR_LOC_LOCAL) {
        return ur_kvstore_file_open(out, location, writable, err);
    }
    n = scheme_len(location);
    e = find_scheme(location, n);
    if (e == NULL) {
        return ur_err_set(err, UR_EINTERNAL, "'%s': scheme lookup failed", location);
    }
    if (e->open == NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "'%s': this unroll was built without %s:// support", location,
                          e->scheme);
    }
    bucket = location + n + 3;
    slash = strchr(bucket, '/');
    blen = slash != NULL ? (size_t)(slash - bucket) : strlen(bucket);
    prefix = slash != NULL ? slash + 1 : "";
    while (*prefix == '/') {
        prefix++;
    }
    plen = strlen(prefix);
    while (plen > 0 && prefix[plen - 1] == '/') {
        plen--;
    }
    b = ur_malloc(blen + 1);
    p = ur_malloc(plen + 1);
    if (b == NULL || p == NULL) {
        rc = ur_err_oom(err);
    } else {
        memcpy(b, bucket, blen);
        b[blen] = '\0';
        memcpy(p, prefix, plen);
        p[plen] = '\0';
        rc = e->open(out, b, p, writable, err);
        /* a reader of a network store gets its announced reads fetched ahead (the requests
         * in flight, AHEAD_THREADS, no longer hang on the number of workers) */
        if (rc == UR_OK && !writable && (e->caps & UR_KV_NETWORK) && ur_kvstore_read_ahead() > 0) {
            rc = ur_kvstore_ahead_open(out, *out, ur_kvstore_read_ahead(), AHEAD_THREADS, err);
        }
    }
    ur_free(b);
    ur_free(p);
    return rc;
}
