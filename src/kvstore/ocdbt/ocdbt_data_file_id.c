/* Data-file table (spec §3.3): the files an object references, prefix-compressed.
 *
 *   num_files            varint64
 *   path_prefix_length   varint16 x (num_files - 1)   shared with the previous path
 *   path_suffix_length   varint16 x num_files
 *   base_path_length     varint16 x num_files
 *   path_suffix          bytes, concatenated
 *
 * path[i] = base_path[i] + relative_path[i]; a reader prepends the transitive path (the base
 * path of the file holding the object). Writers sort by (base, relative) so that a shared
 * prefix longer than a base path implies identical base paths.
 * TensorStore: format/data_file_id_codec.cc. */
#include "ocdbt_format.h"

#include "unroll/alloc.h"

#include <stdlib.h>
#include <string.h>

void ur_ocdbt_table_dispose(ur_ocdbt_table *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        ur_free(t->f[i].path);
    }
    ur_free(t->f);
    t->f = NULL;
    t->n = 0;
}

int ur_ocdbt_table_decode(ur_ocdbt_table *t, ur_rd *rd, const char *transitive, size_t tlen,
                          ur_err *err)
{
    uint64_t num;
    uint16_t *len = NULL; /* prefix[n], suffix[n], base[n] */
    size_t n, at;
    int rc = UR_OK;

    t->n = 0;
    t->f = NULL;
    at = rd->pos;
    num = ur_rd_varint64(rd);
    if (rd->failed) {
        return ur_rd_check(rd, "data file table", err);
    }
    /* Every file takes at least two length bytes: bounds the allocation. */
    if (num > ur_rd_remaining(rd) / 2) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "data file table: %llu files cannot fit",
                             (unsigned long long)num);
    }
    n = (size_t)num;
    if (n == 0) {
        return UR_OK;
    }
    len = ur_calloc(3 * n, sizeof *len);
    t->f = ur_calloc(n, sizeof *t->f);
    if (len == NULL || t->f == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    for (size_t i = 1; i < n; i++) {
        len[i] = ur_ocdbt_codec_varint16(rd);
    }
    for (size_t i = 0; i < n; i++) {
        len[n + i] = ur_ocdbt_codec_varint16(rd);
    }
    for (size_t i = 0; i < n; i++) {
        len[2 * n + i] = ur_ocdbt_codec_varint16(rd);
    }
    if (rd->failed) {
        rc = ur_rd_check(rd, "data file table", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        size_t prefix = len[i], suffix = len[n + i], base = len[2 * n + i];
        size_t plen = prefix + suffix, prev_base = i > 0 ? len[2 * n + i - 1] : 0;
        const uint8_t *sfx;
        char *path;
        at = rd->pos;
        if (plen + tlen > UR_OCDBT_MAX_PATH) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at, "data file table: path %zu too long", i);
            goto out;
        }
        if (base > plen) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at,
                               "data file table: base_path_length[%zu] = %zu > path length %zu", i,
                               base, plen);
            goto out;
        }
        if (prefix > (prev_base < base ? prev_base : base) && base != prev_base) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at,
                               "data file table: prefix length %zu of path %zu runs past a "
                               "differing base path",
                               prefix, i);
            goto out;
        }
        if (i > 0 && prefix > t->f[i - 1].len - tlen) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at,
                               "data file table: prefix length %zu > previous path length",
                               prefix);
            goto out;
        }
        sfx = ur_rd_bytes(rd, suffix);
        if (sfx == NULL) {
            rc = ur_rd_check(rd, "data file table", err);
            goto out;
        }
        if (memchr(sfx, 0, suffix) != NULL) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at, "data file table: NUL byte in path %zu", i);
            goto out;
        }
        path = ur_malloc(tlen + plen + 1);
        if (path == NULL) {
            rc = ur_err_oom(err);
            goto out;
        }
        memcpy(path, transitive, tlen);
        if (prefix > 0) {
            memcpy(path + tlen, t->f[i - 1].path + tlen, prefix);
        }
        memcpy(path + tlen + prefix, sfx, suffix);
        path[tlen + plen] = '\0';
        t->f[i].path = path;
        t->f[i].len = tlen + plen;
        t->f[i].base_len = tlen + base;
        t->n = i + 1;
    }
out:
    ur_free(len);
    if (rc < 0) {
        ur_ocdbt_table_dispose(t);
    }
    return rc;
}

static int cmp_file(const void *a, const void *b)
{
    const ur_ocdbt_file_id *x = a, *y = b;
    size_t n = x->base_len < y->base_len ? x->base_len : y->base_len;
    int c = memcmp(x->path, y->path, n);
    if (c != 0 || x->base_len != y->base_len) {
        return c != 0 ? c : (x->base_len < y->base_len ? -1 : 1);
    }
    /* identical base paths: compare relative paths */
    n = x->len < y->len ? x->len : y->len;
    c = memcmp(x->path + x->base_len, y->path + y->base_len, n - x->base_len);
    if (c != 0) {
        return c;
    }
    return x->len < y->len ? -1 : (x->len > y->len ? 1 : 0);
}

void ur_ocdbt_table_sort(ur_ocdbt_table *t)
{
    size_t w = 0;
    if (t->n == 0) {
        return;
    }
    qsort(t->f, t->n, sizeof *t->f, cmp_file);
    for (size_t i = 1; i < t->n; i++) {
        if (cmp_file(&t->f[w], &t->f[i]) == 0) {
            ur_free(t->f[i].path);
        } else {
            t->f[++w] = t->f[i];
        }
    }
    t->n = w + 1;
}

static size_t lcp(const char *a, size_t an, const char *b, size_t bn)
{
    size_t i = 0;
    while (i < an && i < bn && a[i] == b[i]) {
        i++;
    }
    return i;
}

int ur_ocdbt_table_encode(ur_buf *out, const ur_ocdbt_table *t, ur_err *err)
{
    int rc = ur_buf_put_varint(out, t->n, err);
    size_t *prefix = NULL;

    if (rc < 0 || t->n == 0) {
        return rc;
    }
    prefix = ur_calloc(t->n, sizeof *prefix);
    if (prefix == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 1; i < t->n; i++) {
        const ur_ocdbt_file_id *a = &t->f[i - 1], *b = &t->f[i];
        size_t p = lcp(a->path, a->base_len, b->path, b->base_len);
        if (a->base_len == b->base_len && p == b->base_len) {
            p += lcp(a->path + p, a->len - p, b->path + p, b->len - p);
        }
        prefix[i] = p;
        rc = rc == UR_OK ? ur_buf_put_varint(out, p, err) : rc;
    }
    for (size_t i = 0; i < t->n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, t->f[i].len - prefix[i], err);
    }
    for (size_t i = 0; i < t->n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, t->f[i].base_len, err);
    }
    for (size_t i = 0; i < t->n && rc == UR_OK; i++) {
        rc = ur_buf_append(out, t->f[i].path + prefix[i], t->f[i].len - prefix[i], err);
    }
    ur_free(prefix);
    return rc;
}
