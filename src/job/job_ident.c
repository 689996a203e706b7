/* The identity of a conversion's input for run.txt (job_impl.h): what a rerun compares
 * to tell whether every byte the conversion reads is still what the run started from.
 *
 * One listing of the input through its kvstore gives each value's size and version (the file
 * store: mtime and inode; S3: ETag; GCS: generation; ur_kvstore_list_versions), so the cost is
 * a directory walk or a listing, never a read of the values. A manifest.ocdbt cannot be known
 * by its CRC-32C (it ends with its own, so that CRC is the same constant for every manifest),
 * and _METADATA does not depend on the values: a rewrite of the values shows only in the data
 * files and manifests, which the listing covers. _METADATA's content is recorded as well.
 *
 * Lines (sorted by key, as the listing gives them):
 *   file <tag><key> size=<n> v=<version>             one per value, up to IDENT_MAX_FILES
 *                      (in a key '%', ' ' and control bytes are written %XX)
 *   files <tag><first>..<tag><last> n=<count> bytes=<n> digest=<crc>
 *                      beyond that, one per run of consecutive values (IDENT_GROUPS at most)
 *   content <tag>_METADATA crc32c=<crc> size=<n>      (or "content <tag>_METADATA none")
 * `portable`: the text is the same on every machine that holds a copy of a local input made
 * with its times (cp -p, rsync -a): a local version is cut to its mtime in whole seconds. */
#include "job_impl.h"

#include "unroll/alloc.h"
#include "unroll/crc32c.h"
#include "unroll/kvstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Past this many values, a line per run of consecutive values, IDENT_GROUPS lines at most
 * (run.txt stays small: a plain-zarr input may have hundreds of thousands of chunk files). */
#define IDENT_MAX_FILES 2048
#define IDENT_GROUPS 1024

typedef struct {
    ur_buf lines; /* "<key> size=<n> v=<version>" of each value, each NUL-terminated */
    size_t n;
    int portable;
    ur_err *err;
} ident_list;

/* key into out with '%', ' ' and control bytes as %XX, so a line holds it whole. */
static int escaped_key(ur_buf *out, const char *key, ur_err *err)
{
    int rc = UR_OK;
    for (const unsigned char *c = (const unsigned char *)key; *c != '\0' && rc == UR_OK; c++) {
        rc = *c == '%' || *c <= ' ' || *c == 0x7f ? ur_buf_printf(out, err, "%%%02X", *c)
                                                  : ur_buf_append_byte(out, *c, err);
    }
    return rc;
}

static int on_value(void *ctx, const char *key, uint64_t size, const char *version)
{
    ident_list *l = ctx;
    size_t vlen = strlen(version);
    const char *colon = strchr(version, ':'), *dot = strchr(version, '.');
    int rc;
    if (l->portable && colon != NULL && dot != NULL && dot < colon) {
        vlen = (size_t)(dot - version); /* the file store's: mtime seconds only */
    }
    l->n++;
    rc = escaped_key(&l->lines, key, l->err);
    if (rc == UR_OK) {
        rc = ur_buf_printf(&l->lines, l->err, " size=%llu v=%.*s", (unsigned long long)size,
                           (int)vlen, version);
    }
    return rc == UR_OK ? ur_buf_append_byte(&l->lines, 0, l->err) : rc;
}

/* The key of a gathered line "<key> size=<n> v=<version>": its length. */
static size_t key_len(const char *line)
{
    const char *sp = strstr(line, " size=");
    return sp != NULL ? (size_t)(sp - line) : strlen(line);
}

/* The gathered lines into out: each, or (more than IDENT_MAX_FILES) one per run of `group`
 * consecutive values, at most IDENT_GROUPS lines, so run.txt stays small whatever the input. */
static int emit(ur_buf *out, const ident_list *l, const char *tag, ur_err *err)
{
    const char *p = (const char *)l->lines.data, *end = p + l->lines.len;
    size_t group = (l->n + IDENT_GROUPS - 1) / IDENT_GROUPS;
    int rc = UR_OK;
    if (l->n <= IDENT_MAX_FILES) {
        for (; p < end && rc == UR_OK; p += strlen(p) + 1) {
            rc = ur_buf_printf(out, err, "file %s%s\n", tag, p);
        }
        return rc;
    }
    while (p < end && rc == UR_OK) {
        const char *first = p, *last = p;
        unsigned long long bytes = 0;
        uint32_t crc = 0;
        size_t n = 0;
        for (; p < end && n < group; n++, p += strlen(p) + 1) {
            bytes += strtoull(p + key_len(p) + 6, NULL, 10);
            crc = ur_crc32c(crc, p, strlen(p) + 1);
            last = p;
        }
        rc = ur_buf_printf(out, err, "files %s%.*s..%s%.*s n=%zu bytes=%llu digest=%08x\n", tag,
                           (int)key_len(first), first, tag, (int)key_len(last), last, n, bytes,
                           crc);
    }
    return rc;
}

/* "content <tag>_METADATA ..." of the store kv. */
static int metadata_content(ur_buf *out, ur_kvstore *kv, const char *tag, ur_err *err)
{
    ur_buf b;
    int rc;
    ur_buf_init(&b, (size_t)1 << 30);
    rc = ur_kvstore_read(kv, "_METADATA", &b, err);
    if (rc == UR_ENOTFOUND) {
        rc = ur_buf_printf(out, err, "content %s_METADATA none\n", tag);
    } else if (rc == UR_OK) {
        rc = ur_buf_printf(out, err, "content %s_METADATA crc32c=%08x size=%zu\n", tag,
                           ur_crc32c(0, b.data, b.len), b.len);
    }
    ur_buf_dispose(&b);
    return rc;
}

int ur_job_input_ident(ur_buf *out, const char *location, const char *tag, int portable,
                       ur_err *err)
{
    ur_kvstore *kv = NULL;
    ident_list l;
    int rc;
    memset(&l, 0, sizeof l);
    ur_buf_init(&l.lines, 0);
    /* only a path's versions (mtime, inode) differ between machines' copies */
    l.portable = portable && ur_kvstore_location_can(location, UR_KV_IS_PATH);
    l.err = err;
    rc = ur_kvstore_open_url(&kv, location, 0, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_list_versions(kv, "", on_value, &l, err);
    }
    if (rc == UR_OK) {
        rc = emit(out, &l, tag, err);
    }
    if (rc == UR_OK) {
        rc = metadata_content(out, kv, tag, err);
    }
    if (rc < 0) {
        ur_err_wrap(err, "the input's identity");
    }
    ur_kvstore_close(kv);
    ur_buf_dispose(&l.lines);
    return rc;
}

int ur_job_file_ident(ur_buf *out, const char *kind, const char *path, ur_err *err)
{
    const char *slash = strrchr(path, '/');
    ur_buf b;
    int rc;
    ur_buf_init(&b, 0);
    rc = ur_fs_read_file(&b, path, (size_t)1 << 30, err);
    if (rc == UR_OK) {
        rc = ur_buf_printf(out, err, "content %s:", kind);
    }
    if (rc == UR_OK) {
        rc = escaped_key(out, slash != NULL ? slash + 1 : path, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(out, err, " crc32c=%08x size=%zu\n", ur_crc32c(0, b.data, b.len),
                           b.len);
    }
    ur_buf_dispose(&b);
    return rc;
}
