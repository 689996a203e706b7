/* Fuzz target: the zarr v3 shard index and the inner chunks it points to. Input: a u16le
 * length L, L bytes of `zarr.json` text, then the shard file. When the metadata parses and is
 * sharded (and small enough), the index is cut from the shard's end (or start), decoded and
 * checked, and every present inner chunk is decoded through the inner codec chain. */
#include "fuzz_common.h"

#include "unroll/alloc.h"
#include "zarr/zarr_impl.h"

#define FZ_MAX_INNER_CHUNKS 4096U
#define FZ_MAX_INNER_BYTES ((size_t)1 << 22)

static void decode_chunks(const ur_zarr_meta *m, const uint8_t *shard, size_t n,
                          const uint64_t *entries, size_t count)
{
    uint64_t elems = 1;
    size_t bytes;
    uint8_t *dst;
    ur_err err;

    for (int i = 0; i < m->rank; i++) {
        if (m->inner_shape[i] > FZ_MAX_INNER_BYTES || elems > FZ_MAX_INNER_BYTES) {
            return;
        }
        elems *= m->inner_shape[i];
    }
    if (elems > FZ_MAX_INNER_BYTES / m->itemsize) {
        return;
    }
    bytes = (size_t)elems * m->itemsize;
    dst = malloc(bytes > 0 ? bytes : 1);
    if (dst == NULL) {
        return;
    }
    for (size_t i = 0; i < count; i++) {
        uint64_t off = entries[2 * i], len = entries[2 * i + 1];
        int rc;
        if (off == UR_ZARR_SHARD_ABSENT && len == UR_ZARR_SHARD_ABSENT) {
            continue;
        }
        fz_check(off <= n && len <= n - off);
        ur_err_clear(&err);
        rc = ur_zarr_codec__decode(&m->codecs, m->rank, m->inner_shape, m->itemsize, shard + off,
                                   (size_t)len, dst, bytes, &err);
        fz_check_err(rc, &err);
    }
    free(dst);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_zarr_meta m;
    ur_err err;
    size_t mlen, n, isize, count;
    const uint8_t *shard, *index;
    uint64_t *entries;
    char *text;
    int rc;

    if (size < 2) {
        return 0;
    }
    mlen = (size_t)data[0] | (size_t)data[1] << 8;
    if (mlen > size - 2) {
        return 0;
    }
    text = fz_text(data + 2, mlen);
    if (text == NULL) {
        return 0;
    }
    shard = data + 2 + mlen;
    n = size - 2 - mlen;
    memset(&m, 0, sizeof m);
    ur_err_clear(&err);
    rc = ur_zarr_meta__parse_v3(&m, text, mlen, "zarr.json", &err);
    free(text);
    fz_check_err(rc, &err);
    if (rc < 0 || !m.sharded) {
        return 0;
    }
    if (ur_zarr_codec_sharding__count(&m) > FZ_MAX_INNER_CHUNKS) {
        return 0;
    }
    count = (size_t)ur_zarr_codec_sharding__count(&m);
    rc = ur_zarr_codec_sharding__index_size(&m, &isize, &err);
    fz_check_err(rc, &err);
    if (rc < 0 || isize > n) {
        return 0;
    }
    index = m.index_at_start ? shard : shard + (n - isize);
    entries = malloc(count * 16 > 0 ? count * 16 : 1);
    if (entries == NULL) {
        return 0;
    }
    rc = ur_zarr_codec_sharding__decode_index(&m, index, isize, n, entries, &err);
    fz_check_err(rc, &err);
    if (rc == UR_OK) {
        decode_chunks(&m, shard, n, entries, count);
    }
    free(entries);
    return 0;
}
