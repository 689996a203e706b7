/* Zarr arrays over a kvstore: open (metadata), read chunks and boxes, create and write.
 *
 * Keys: "<prefix>/zarr.json" or "<prefix>/.zarray" for the metadata, "<prefix>/<chunk key>"
 * for each stored chunk (zarr_chunk_grid.c). With sharding_indexed the stored value is a
 * shard and this API's chunk is the inner chunk: reading one reads the shard index (by
 * range when a shard holds several inner chunks) and then only that chunk's bytes.
 *
 * A handle is immutable after open/create apart from set_fill_missing, so reads from many
 * threads need no lock: every read allocates its own scratch memory. */
#include "zarr_impl.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/kvstore.h"

#include <stdio.h>
#include <string.h>

#define META_LIMIT ((size_t)1 << 20) /* 1 MiB: larger metadata is damage */
#define KEY_MAX 4096

struct ur_zarr_array {
    ur_kvstore *kv;
    char *prefix;
    ur_zarr_meta meta;
    ur_zarr_info info;
    uint64_t ratio[UR_MAX_RANK]; /* inner chunks per shard along each axis (1 unsharded) */
    int fill_missing;
    ur_buf meta_json; /* created with defer_meta: the metadata to write (emitted at create,
                       * on the creating thread, so that the write is only a store) */
};

static int join_key(const ur_zarr_array *a, const char *rel, char *key, size_t n, ur_err *err)
{
    int w = a->prefix[0] ? snprintf(key, n, "%s/%s", a->prefix, rel) : snprintf(key, n, "%s", rel);
    if (w < 0 || (size_t)w >= n) {
        return ur_err_set(err, UR_EINVAL, "zarr array '%s': key too long", a->prefix);
    }
    return UR_OK;
}

static int storage_key(const ur_zarr_array *a, const uint64_t *sidx, char *key, size_t n,
                       ur_err *err)
{
    char rel[UR_MAX_RANK * 22 + 8];
    int rc = ur_zarr_chunk_grid__key(&a->meta, sidx, rel, sizeof(rel), err);
    return rc ? rc : join_key(a, rel, key, n, err);
}

static int setup(ur_zarr_array *a, ur_err *err)
{
    const ur_zarr_meta *m = &a->meta;
    ur_zarr_info *in = &a->info;
    uint64_t count = 1, cb = m->itemsize, nb = m->itemsize;

    memset(in, 0, sizeof(*in));
    in->zarr_format = m->zarr_format;
    in->dtype = m->dtype;
    in->rank = m->rank;
    for (int d = 0; d < m->rank; d++) {
        uint64_t c = m->sharded ? m->inner_shape[d] : m->chunk_shape[d];
        in->shape[d] = m->shape[d];
        in->chunk_shape[d] = c;
        in->grid[d] = m->shape[d] / c + (m->shape[d] % c != 0);
        a->ratio[d] = m->sharded ? m->chunk_shape[d] / c : 1;
        if (ur_ckd_mul64(&count, count, in->grid[d]) || ur_ckd_mul64(&cb, cb, c) ||
            ur_ckd_mul64(&nb, nb, m->shape[d])) {
            return ur_err_set(err, UR_ECORRUPT, "zarr array '%s': sizes overflow", a->prefix);
        }
    }
    if (cb > SIZE_MAX) {
        return ur_err_set(err, UR_EUNSUPPORTED, "zarr array '%s': chunk too large", a->prefix);
    }
    in->chunk_count = count;
    in->chunk_bytes = (size_t)cb;
    in->nbytes = nb;
    return UR_OK;
}

static int new_handle(ur_zarr_array **out, ur_kvstore *kv, const char *prefix, ur_err *err)
{
    ur_zarr_array *a = ur_calloc(1, sizeof(*a));
    if (a == NULL) {
        return ur_err_oom(err);
    }
    a->prefix = ur_strdup(prefix);
    if (a->prefix == NULL) {
        ur_free(a);
        return ur_err_oom(err);
    }
    if (strlen(prefix) > KEY_MAX - UR_MAX_RANK * 22 - 16) {
        ur_free(a->prefix);
        ur_free(a);
        return ur_err_set(err, UR_EINVAL, "zarr array prefix longer than %d bytes",
                          KEY_MAX - UR_MAX_RANK * 22 - 16);
    }
    a->kv = kv;
    a->fill_missing = 1;
    *out = a;
    return UR_OK;
}

/* Read metadata key `rel`; UR_ENOTFOUND passes through untouched for detection. */
static int read_meta(ur_zarr_array *a, const char *rel, int format, ur_err *err)
{
    char key[KEY_MAX];
    ur_buf b;
    int rc;

    ur_buf_init(&b, META_LIMIT);
    rc = join_key(a, rel, key, sizeof(key), err);
    if (rc == UR_OK) {
        rc = ur_kvstore_read(a->kv, key, &b, err);
        if (rc < 0 && rc != UR_ENOTFOUND) {
            ur_err_set_where(err, key);
            ur_err_wrap(err, "zarr array '%s': reading %s", a->prefix, rel);
        }
    }
    if (rc == UR_OK) {
        const char *txt = b.len ? (const char *)b.data : "";
        rc = format == 3 ? ur_zarr_meta__parse_v3(&a->meta, txt, b.len, a->prefix, err)
                         : ur_zarr_meta__parse_v2(&a->meta, txt, b.len, a->prefix, err);
        if (rc < 0) {
            ur_err_set_where(err, key);
        }
    }
    ur_buf_dispose(&b);
    return rc;
}

int ur_zarr_array_open(ur_zarr_array **out, ur_kvstore *kv, const char *prefix, int zarr_format,
                       ur_err *err)
{
    ur_zarr_array *a = NULL;
    int rc;

    if (zarr_format != 0 && zarr_format != 2 && zarr_format != 3) {
        return ur_err_set(err, UR_EINVAL, "zarr_format %d is not 0, 2 or 3", zarr_format);
    }
    rc = new_handle(&a, kv, prefix, err);
    if (rc < 0) {
        return rc;
    }
    rc = UR_ENOTFOUND;
    if (zarr_format != 2) {
        rc = read_meta(a, "zarr.json", 3, err);
    }
    if (rc == UR_ENOTFOUND && zarr_format != 3) {
        rc = read_meta(a, ".zarray", 2, err);
    }
    if (rc == UR_ENOTFOUND) {
        rc = ur_err_set(err, UR_ENOTFOUND, "zarr array '%s': no %s in %s", prefix,
                        zarr_format == 3   ? "zarr.json"
                        : zarr_format == 2 ? ".zarray"
                                           : "zarr.json or .zarray",
                        ur_kvstore_describe(kv));
    }
    if (rc == UR_OK) {
        rc = setup(a, err);
    }
    if (rc < 0) {
        ur_zarr_array_close(a);
        return rc;
    }
    *out = a;
    return UR_OK;
}

const ur_zarr_info *ur_zarr_array_info(const ur_zarr_array *arr)
{
    return &arr->info;
}

const char *ur_zarr_array_prefix(const ur_zarr_array *arr)
{
    return arr->prefix;
}

const ur_zarr_meta *ur_zarr_array__meta(const ur_zarr_array *arr)
{
    return &arr->meta;
}

ur_kvstore *ur_zarr_array__kvstore(const ur_zarr_array *arr)
{
    return arr->kv;
}

int ur_zarr_array__fill_missing(const ur_zarr_array *arr)
{
    return arr->fill_missing;
}

void ur_zarr_array_set_fill_missing(ur_zarr_array *arr, int fill_missing)
{
    arr->fill_missing = fill_missing != 0;
}

void ur_zarr_array_close(ur_zarr_array *arr)
{
    if (arr != NULL) {
        ur_buf_dispose(&arr->meta_json);
        ur_free(arr->prefix);
        ur_free(arr);
    }
}

/* ---- reading ---------------------------------------------------------------------------- */

static void fill_chunk(const ur_zarr_array *a, void *dst)
{
    uint64_t n = a->info.chunk_bytes / a->meta.itemsize;
    ur_zarr_chunk_grid__fill(dst, n, a->meta.fill, a->meta.itemsize);
}

static int missing(const ur_zarr_array *a, const char *key, const char *what, void *dst,
                   ur_err *err)
{
    if (!a->fill_missing) {
        return ur_err_set_os(err, UR_ECORRUPT, 0, key,
                             "%s is missing (the checkpoint stores every chunk: "
                             "store_array_data_equal_to_fill_value)",
                             what);
    }
    fill_chunk(a, dst);
    return UR_OK;
}

/* Overwrite the part of a decoded edge chunk that lies past the array's edge. */
static void fill_padding(const ur_zarr_array *a, const uint64_t *idx, uint8_t *dst)
{
    const ur_zarr_info *in = &a->info;
    uint64_t valid[UR_MAX_RANK], start[UR_MAX_RANK], count[UR_MAX_RANK];
    int rank = in->rank;

    for (int d = 0; d < rank; d++) {
        uint64_t lo = idx[d] * in->chunk_shape[d];
        valid[d] = in->shape[d] - lo < in->chunk_shape[d] ? in->shape[d] - lo : in->chunk_shape[d];
    }
    /* Complement of the valid box = union over d of {x_k < valid_k for k < d, x_d >= valid_d}. */
    for (int d = 0; d < rank; d++) {
        if (valid[d] == in->chunk_shape[d]) {
            continue;
        }
        for (int k = 0; k < rank; k++) {
            start[k] = k == d ? valid[k] : 0;
            count[k] = k < d ? valid[k]
                             : (k == d ? in->chunk_shape[k] - valid[k] : in->chunk_shape[k]);
        }
        ur_zarr_chunk_grid__fill_box(dst, in->chunk_shape, start, count, rank, a->meta.fill,
                                     a->meta.itemsize);
    }
}

static size_t value_limit(const ur_zarr_array *a, size_t extra)
{
    size_t lim;
    if (ur_ckd_mul(&lim, a->info.chunk_bytes, 2) || ur_ckd_add(&lim, lim, ((size_t)1 << 20)) ||
        ur_ckd_add(&lim, lim, extra)) {
        return SIZE_MAX;
    }
    return lim;
}

/* A read in progress: where to report the decoded prefix (NULL: nowhere). */
typedef struct {
    ur_zarr_ready_fn fn;
    void *ctx;
} progress;

static int decode_inner(const ur_zarr_array *a, const uint8_t *src, size_t n, void *dst,
                        const progress *pr, ur_err *err)
{
    if (pr != NULL) {
        return ur_zarr_codec__decode_progressive(&a->meta.codecs, a->info.rank,
                                                 a->info.chunk_shape, a->meta.itemsize, src, n,
                                                 dst, a->info.chunk_bytes, pr->fn, pr->ctx, err);
    }
    return ur_zarr_codec__decode(&a->meta.codecs, a->info.rank, a->info.chunk_shape,
                                 a->meta.itemsize, src, n, dst, a->info.chunk_bytes, err);
}

static int read_unsharded(ur_zarr_array *a, const uint64_t *idx, const char *key, void *dst,
                          const progress *pr, ur_err *err)
{
    ur_kvstore_view v;
    int rc;

    (void)idx;
    rc = ur_kvstore_read_view(a->kv, key, value_limit(a, 0), &v, err);
    if (rc == UR_ENOTFOUND) {
        rc = missing(a, key, "chunk", dst, err);
    } else if (rc == UR_OK) {
        rc = decode_inner(a, v.data, v.len, dst, pr, err);
    }
    ur_kvstore_view_release(&v);
    return rc;
}

int ur_zarr_array__read_shard_index(ur_kvstore *kv, const char *key, const ur_zarr_meta *m,
                                    uint64_t *entries, uint64_t *size_out, ur_err *err)
{
    uint64_t size;
    size_t isize;
    uint8_t *ibuf;
    int rc = ur_zarr_codec_sharding__index_size(m, &isize, err);

    if (rc == UR_OK) {
        rc = ur_kvstore_size(kv, key, &size, err);
    }
    if (rc < 0) {
        return rc;
    }
    if (size < isize) {
        return ur_err_set(err, UR_ECORRUPT, "shard of %llu bytes cannot hold a %zu-byte index",
                          (unsigned long long)size, isize);
    }
    ibuf = ur_malloc(isize);
    if (ibuf == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_kvstore_read_range(kv, key, m->index_at_start ? 0 : size - isize, isize, ibuf, err);
    if (rc == UR_OK) {
        rc = ur_zarr_codec_sharding__decode_index(m, ibuf, isize, size, entries, err);
    }
    ur_free(ibuf);
    *size_out = size;
    return rc;
}

static int read_sharded(ur_zarr_array *a, const uint64_t *idx, const char *key, void *dst,
                        const progress *pr, ur_err *err)
{
    const ur_zarr_meta *m = &a->meta;
    uint64_t count = ur_zarr_codec_sharding__count(m), size, lin = 0, *entries = NULL;
    size_t isize, ioff;
    uint8_t *cbuf = NULL;
    ur_kvstore_view whole;
    int rc;

    memset(&whole, 0, sizeof whole);
    for (int d = 0; d < m->rank; d++) {
        lin = lin * a->ratio[d] + idx[d] % a->ratio[d];
    }
    rc = ur_zarr_codec_sharding__index_size(m, &isize, err);
    if (rc < 0) {
        goto out;
    }
    entries = ur_malloc((size_t)count * 16);
    if (entries == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    if (count == 1) {
        /* Orbax's layout: one inner chunk per shard; one read gets index and data. */
        rc = ur_kvstore_read_view(a->kv, key, value_limit(a, isize), &whole, err);
        if (rc == UR_ENOTFOUND) {
            rc = missing(a, key, "shard", dst, err);
            goto out;
        }
        if (rc < 0) {
            goto out;
        }
        size = whole.len;
        if (size < isize) {
            rc = ur_err_set(err, UR_ECORRUPT, "shard of %llu bytes cannot hold a %zu-byte index",
                            (unsigned long long)size, isize);
            goto out;
        }
        ioff = m->index_at_start ? 0 : (size_t)size - isize;
        rc = ur_zarr_codec_sharding__decode_index(m, whole.data + ioff, isize, size, entries, err);
    } else {
        rc = ur_zarr_array__read_shard_index(a->kv, key, m, entries, &size, err);
        if (rc == UR_ENOTFOUND) {
            rc = missing(a, key, "shard", dst, err);
            goto out;
        }
    }
    if (rc < 0) {
        goto out;
    }
    uint64_t off = entries[2 * lin], len = entries[2 * lin + 1];
    if (off == UR_ZARR_SHARD_ABSENT) {
        rc = missing(a, key, "inner chunk of shard", dst, err);
        goto out;
    }
    if (len > value_limit(a, 0)) {
        rc = ur_err_set(err, UR_ECORRUPT, "inner chunk of %llu bytes is too large",
                        (unsigned long long)len);
        goto out;
    }
    if (count == 1) {
        rc = decode_inner(a, whole.data + off, (size_t)len, dst, pr, err);
        goto out;
    }
    cbuf = ur_malloc((size_t)len);
    if (cbuf == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    rc = ur_kvstore_read_range(a->kv, key, off, (size_t)len, cbuf, err);
    if (rc == UR_OK) {
        rc = decode_inner(a, cbuf, (size_t)len, dst, pr, err);
    }
out:
    ur_free(entries);
    ur_free(cbuf);
    ur_kvstore_view_release(&whole);
    return rc;
}

static int read_chunk(ur_zarr_array *arr, const uint64_t *idx, void *dst, const progress *pr,
                      ur_err *err);

int ur_zarr_array_read_chunk(ur_zarr_array *arr, const uint64_t *idx, void *dst, ur_err *err)
{
    return read_chunk(arr, idx, dst, NULL, err);
}

/* Passes reports on, remembering whether the whole chunk was reported. */
typedef struct {
    progress outer;
    size_t total;
    int done;
} report_state;

static int report(void *ctx, size_t n, ur_err *err)
{
    report_state *st = ctx;
    st->done = n == st->total;
    return st->outer.fn(st->outer.ctx, n, err);
}

int ur_zarr_array_read_chunk_progressive(ur_zarr_array *arr, const uint64_t *idx, void *dst,
                                         ur_zarr_ready_fn ready, void *ctx, ur_err *err)
{
    report_state st = {{ready, ctx}, arr->info.chunk_bytes, 0};
    progress pr = {report, &st};
    int rc = read_chunk(arr, idx, dst, &pr, err);
    /* a chunk filled rather than decoded (missing, or at the edge) is reported here, whole */
    if (rc == UR_OK && !st.done) {
        rc = ready(ctx, arr->info.chunk_bytes, err);
    }
    return rc;
}

static int read_chunk(ur_zarr_array *arr, const uint64_t *idx, void *dst, const progress *pr,
                      ur_err *err)
{
    const ur_zarr_info *in = &arr->info;
    uint64_t sidx[UR_MAX_RANK];
    char key[KEY_MAX];
    int rc, edge = 0;

    for (int d = 0; d < in->rank; d++) {
        if (idx[d] >= in->grid[d]) {
            return ur_err_set(err, UR_EINVAL,
                              "zarr array '%s': chunk index %llu >= %llu on axis %d", arr->prefix,
                              (unsigned long long)idx[d], (unsigned long long)in->grid[d], d);
        }
        sidx[d] = idx[d] / arr->ratio[d];
        edge |= (idx[d] + 1) * in->chunk_shape[d] > in->shape[d];
    }
    rc = storage_key(arr, sidx, key, sizeof(key), err);
    if (rc < 0) {
        return rc;
    }
    if (edge) {
        pr = NULL; /* the padding is filled after decoding: report once, at the end */
    }
    rc = arr->meta.sharded ? read_sharded(arr, idx, key, dst, pr, err)
                           : read_unsharded(arr, idx, key, dst, pr, err);
    if (rc < 0) {
        ur_err_set_where(err, key);
        ur_err_wrap(err, "zarr array '%s' chunk '%s'", arr->prefix, key);
        return rc;
    }
    if (edge) {
        fill_padding(arr, idx, dst);
    }
    return UR_OK;
}

void ur_zarr_array_prefetch_chunk(ur_zarr_array *arr, const uint64_t *idx, size_t max_bytes)
{
    uint64_t sidx[UR_MAX_RANK];
    char key[KEY_MAX];

    for (int d = 0; d < arr->info.rank; d++) {
        if (idx[d] >= arr->info.grid[d]) {
            return;
        }
        sidx[d] = idx[d] / arr->ratio[d];
    }
    if (storage_key(arr, sidx, key, sizeof(key), NULL) == UR_OK) {
        ur_kvstore_prefetch(arr->kv, key, max_bytes);
    }
}

int ur_zarr_array_read_box(ur_zarr_array *arr, const uint64_t *start, const uint64_t *count,
                           void *dst, ur_err *err)
{
    const ur_zarr_info *in = &arr->info;
    uint64_t c0[UR_MAX_RANK], c1[UR_MAX_RANK], idx[UR_MAX_RANK] = {0};
    uint64_t lo[UR_MAX_RANK], n[UR_MAX_RANK], src_lo[UR_MAX_RANK], dst_lo[UR_MAX_RANK];
    uint8_t *scratch = NULL;
    int rc = UR_OK, rank = in->rank;

    for (int d = 0; d < rank; d++) {
        uint64_t end;
        if (ur_ckd_add64(&end, start[d], count[d]) || end > in->shape[d]) {
            return ur_err_set(err, UR_EINVAL,
                              "zarr array '%s': box [%llu, +%llu) outside axis %d of size %llu",
                              arr->prefix, (unsigned long long)start[d],
                              (unsigned long long)count[d], d, (unsigned long long)in->shape[d]);
        }
        if (count[d] == 0) {
            return UR_OK;
        }
        c0[d] = start[d] / in->chunk_shape[d];
        c1[d] = (end - 1) / in->chunk_shape[d];
        idx[d] = c0[d];
    }
    if (rank == 0) {
        return ur_zarr_array_read_chunk(arr, idx, dst, err);
    }
    scratch = ur_malloc(in->chunk_bytes);
    if (scratch == NULL) {
        return ur_err_oom(err);
    }
    for (;;) {
        rc = ur_zarr_array_read_chunk(arr, idx, scratch, err);
        if (rc < 0) {
            break;
        }
        for (int d = 0; d < rank; d++) {
            uint64_t clo = idx[d] * in->chunk_shape[d], chi = clo + in->chunk_shape[d];
            uint64_t hi = start[d] + count[d] < chi ? start[d] + count[d] : chi;
            lo[d] = start[d] > clo ? start[d] : clo;
            n[d] = hi - lo[d];
            src_lo[d] = lo[d] - clo;
            dst_lo[d] = lo[d] - start[d];
        }
        ur_zarr_chunk_grid__copy_box(dst, count, dst_lo, scratch, in->chunk_shape, src_lo, n, rank,
                                     arr->meta.itemsize);
        int d = rank - 1;
        for (; d >= 0; d--) {
            if (++idx[d] <= c1[d]) {
                break;
            }
            idx[d] = c0[d];
        }
        if (d < 0) {
            break;
        }
    }
    ur_free(scratch);
    return rc;
}

typedef struct sum_ctx {
    uint64_t total;
    size_t skip; /* length of "<prefix>/" */
} sum_ctx;

static int sum_fn(void *ctx, const char *key, uint64_t size)
{
    sum_ctx *s = ctx;
    const char *rel = key + s->skip;
    if (strcmp(rel, "zarr.json") != 0 && strcmp(rel, ".zarray") != 0 &&
        strcmp(rel, ".zattrs") != 0 && strcmp(rel, ".zgroup") != 0) {
        s->total += size;
    }
    return 0;
}

int ur_zarr_array_stored_bytes(ur_zarr_array *arr, uint64_t *out, ur_err *err)
{
    char pfx[KEY_MAX];
    sum_ctx s = {0, 0};
    int rc;

    if (arr->prefix[0]) {
        snprintf(pfx, sizeof(pfx), "%s/", arr->prefix);
    } else {
        pfx[0] = '\0';
    }
    s.skip = strlen(pfx);
    rc = ur_kvstore_list(arr->kv, pfx, sum_fn, &s, err);
    if (rc < 0) {
        return ur_err_wrap(err, "zarr array '%s': listing chunks", arr->prefix);
    }
    *out = s.total;
    return UR_OK;
}

/* ---- writing ------------------------------------------------------------------------------ */

static int create(ur_zarr_array **out, ur_kvstore *kv, const char *prefix, const ur_zarr_meta *m,
                  int write_meta, ur_err *err)
{
    ur_zarr_array *a = NULL;
    char key[KEY_MAX];
    ur_buf b;
    int rc;

    ur_buf_init(&b, 0);
    rc = new_handle(&a, kv, prefix, err);
    if (rc < 0) {
        return rc;
    }
    a->meta = *m;
    rc = ur_zarr_meta__validate(&a->meta, err);
    if (rc == UR_OK) {
        rc = setup(a, err);
    }
    if (rc == UR_OK && !write_meta) {
        rc = ur_zarr_meta__emit(&a->meta, &a->meta_json, err);
    }
    if (rc == UR_OK && write_meta) {
        rc = ur_zarr_meta__emit(&a->meta, &b, err);
        if (rc == UR_OK) {
            rc = join_key(a, m->zarr_format == 3 ? "zarr.json" : ".zarray", key, sizeof(key), err);
        }
        if (rc == UR_OK) {
            rc = ur_kvstore_write(kv, key, b.data, b.len, err);
        }
    }
    ur_buf_dispose(&b);
    if (rc < 0) {
        ur_err_wrap(err, "zarr array '%s': create", prefix);
        ur_zarr_array_close(a);
        return rc;
    }
    *out = a;
    return UR_OK;
}

int ur_zarr_array__create_meta(ur_zarr_array **out, ur_kvstore *kv, const char *prefix,
                               const ur_zarr_meta *m, ur_err *err)
{
    return create(out, kv, prefix, m, 1, err);
}

int ur_zarr_array_write_meta(ur_zarr_array *arr, ur_err *err)
{
    char key[KEY_MAX];
    ur_buf b;
    int rc;

    ur_buf_init(&b, 0);
    rc = arr->meta_json.len > 0 ? UR_OK : ur_zarr_meta__emit(&arr->meta, &b, err);
    if (rc == UR_OK) {
        rc = join_key(arr, arr->meta.zarr_format == 3 ? "zarr.json" : ".zarray", key, sizeof(key),
                      err);
    }
    if (rc == UR_OK) {
        const ur_buf *j = arr->meta_json.len > 0 ? &arr->meta_json : &b;
        rc = ur_kvstore_write(arr->kv, key, j->data, j->len, err);
    }
    ur_buf_dispose(&b);
    return rc < 0 ? ur_err_wrap(err, "zarr array '%s': create", arr->prefix) : rc;
}

int ur_zarr_array_create(ur_zarr_array **out, ur_kvstore *kv, const char *prefix,
                         const ur_zarr_spec *spec, ur_err *err)
{
    ur_zarr_meta m;

    memset(&m, 0, sizeof(m));
    if (spec->zarr_format != 2 && spec->zarr_format != 3) {
        return ur_err_set(err, UR_EINVAL, "zarr array '%s': zarr_format %d is not 2 or 3", prefix,
                          spec->zarr_format);
    }
    if (spec->rank < 0 || spec->rank > UR_MAX_RANK) {
        return ur_err_set(err, UR_EINVAL, "zarr array '%s': rank %d", prefix, spec->rank);
    }
    if (ur_dtype_size(spec->dtype) == 0) {
        return ur_err_set(err, UR_EINVAL, "zarr array '%s': invalid dtype", prefix);
    }
    if (spec->dtype == UR_DT_UINT4 || spec->dtype == UR_DT_FLOAT8_E4M3) {
        /* TensorStore (0.1.85) has neither: Orbax could not read the array back. */
        return ur_err_set(err, UR_EUNSUPPORTED, "zarr array '%s': TensorStore has no %s", prefix,
                          ur_dtype_name(spec->dtype));
    }
    if (spec->zstd_level < -131072 || spec->zstd_level > 22) {
        return ur_err_set(err, UR_EINVAL, "zarr array '%s': zstd level %d", prefix,
                          spec->zstd_level);
    }
    m.zarr_format = spec->zarr_format;
    m.dtype = spec->dtype;
    m.itemsize = ur_dtype_size(spec->dtype);
    m.rank = spec->rank;
    for (int d = 0; d < spec->rank; d++) {
        if (spec->chunk_shape[d] == 0) {
            return ur_err_set(err, UR_EINVAL, "zarr array '%s': chunk_shape[%d] is 0", prefix, d);
        }
        m.shape[d] = spec->shape[d];
        m.chunk_shape[d] = spec->chunk_shape[d];
        m.inner_shape[d] = spec->chunk_shape[d];
    }
    m.codecs.n_b2b = 1;
    m.codecs.b2b[0].kind = UR_ZARR_B2B_ZSTD;
    m.codecs.b2b[0].checksum = 0;
    if (spec->zarr_format == 3) {
        /* TensorStore for Orbax: sharding_indexed, one inner chunk per shard; inside,
         * bytes (endian only for multi-byte types) + zstd level 3; index bytes + crc32c. */
        m.v2_keys = 0;
        m.sep = '/';
        m.sharded = 1;
        m.codecs.bytes_has_endian = m.itemsize > 1;
        m.codecs.b2b[0].level = spec->zstd_level ? spec->zstd_level
                                                 : UR_ZARR_ZSTD_DEFAULT_LEVEL_V3;
        m.index.bytes_has_endian = 1;
        m.index.n_b2b = 1;
        m.index.b2b[0].kind = UR_ZARR_B2B_CRC32C;
    } else {
        m.v2_keys = 1;
        m.sep = '.';
        m.fill_null = 1;
        m.codecs.b2b[0].level = spec->zstd_level ? spec->zstd_level
                                                 : UR_ZARR_ZSTD_DEFAULT_LEVEL_V2;
    }
    return create(out, kv, prefix, &m, !spec->defer_meta, err);
}

int ur_zarr_array_encode_chunk(ur_zarr_array *arr, const void *src, ur_buf *out, ur_err *err)
{
    const ur_zarr_meta *m = &arr->meta;
    const ur_zarr_info *in = &arr->info;
    ur_buf inner;
    int rc;

    if (!m->sharded) {
        return ur_zarr_codec__encode(&m->codecs, in->rank, in->chunk_shape, m->itemsize, src,
                                     in->chunk_bytes, out, err);
    }
    if (ur_zarr_codec_sharding__count(m) != 1) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "zarr array '%s': writing shards of several inner chunks", arr->prefix);
    }
    if (!m->index_at_start) { /* Orbax's layout: the chunk, then the index */
        size_t base = out->len;
        rc = ur_zarr_codec__encode(&m->codecs, in->rank, in->chunk_shape, m->itemsize, src,
                                   in->chunk_bytes, out, err);
        if (rc == UR_OK) {
            rc = ur_zarr_codec_sharding__append_single_index(m, out->len - base, out, err);
        }
        return rc;
    }
    ur_buf_init(&inner, 0);
    rc = ur_zarr_codec__encode(&m->codecs, in->rank, in->chunk_shape, m->itemsize, src,
                               in->chunk_bytes, &inner, err);
    if (rc == UR_OK) {
        rc = ur_zarr_codec_sharding__encode(m, &inner, 1, out, err);
    }
    ur_buf_dispose(&inner);
    return rc;
}

int ur_zarr_array_chunk_key(const ur_zarr_array *arr, const uint64_t *idx, char *key,
                            size_t key_size, ur_err *err)
{
    const ur_zarr_meta *m = &arr->meta;
    for (int d = 0; d < m->rank; d++) {
        uint64_t g = m->shape[d] / m->chunk_shape[d] + (m->shape[d] % m->chunk_shape[d] != 0);
        if (idx[d] >= g) {
            return ur_err_set(err, UR_EINVAL, "zarr array '%s': chunk index %llu >= %llu",
                              arr->prefix, (unsigned long long)idx[d], (unsigned long long)g);
        }
    }
    return storage_key(arr, idx, key, key_size, err);
}

int ur_zarr_array_write_chunk(ur_zarr_array *arr, const uint64_t *idx, const void *src,
                              ur_err *err)
{
    char key[KEY_MAX];
    ur_buf b;
    int rc;

    key[0] = '\0';
    ur_buf_init(&b, 0);
    rc = ur_zarr_array_chunk_key(arr, idx, key, sizeof(key), err);
    if (rc == UR_OK) {
        rc = ur_zarr_array_encode_chunk(arr, src, &b, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_write(arr->kv, key, b.data, b.len, err);
    }
    ur_buf_dispose(&b);
    if (rc < 0) {
        ur_err_wrap(err, "zarr array '%s' chunk '%s'", arr->prefix, key);
    }
    return rc;
}

int ur_zarr_array_write_encoded(ur_zarr_array *arr, const uint64_t *idx, const void *data,
                                size_t n, ur_err *err)
{
    char key[KEY_MAX];
    int rc;

    key[0] = '\0';
    rc = ur_zarr_array_chunk_key(arr, idx, key, sizeof(key), err);
    if (rc == UR_OK) {
        rc = ur_kvstore_write(arr->kv, key, data, n, err);
    }
    if (rc < 0) {
        ur_err_wrap(err, "zarr array '%s' chunk '%s'", arr->prefix, key);
    }
    return rc;
}
