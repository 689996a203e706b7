/* zarr3 "sharding_indexed" codec: one stored value (the shard) holds a grid of inner chunks
 * plus an index. https://zarr-specs.readthedocs.io/en/latest/v3/codecs/sharding-indexed/
 *
 *   index_location "end" (default):  [ chunk | chunk | ... | index ]
 *   index_location "start":          [ index | chunk | chunk | ... ]
 *   index = index_codecs( uint64[inner grid..., 2] ): per inner chunk, C order over the
 *           shard's inner grid, (offset, nbytes) from the start of the shard value;
 *           (2^64-1, 2^64-1) = absent (reads as the fill value).
 * Orbax's index codecs are bytes(little) + crc32c: 16 bytes per entry + a 4-byte CRC-32C.
 * Only fixed-size index codecs are accepted, so the index can be read by range. */
#include "zarr_impl.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"

#include <string.h>

uint64_t ur_zarr_codec_sharding__count(const ur_zarr_meta *m)
{
    uint64_t n = 1;
    for (int d = 0; d < m->rank; d++) {
        n *= m->chunk_shape[d] / m->inner_shape[d]; /* <= chunk elements: no overflow */
    }
    return n;
}

static void index_shape(const ur_zarr_meta *m, uint64_t *shape)
{
    for (int d = 0; d < m->rank; d++) {
        shape[d] = m->chunk_shape[d] / m->inner_shape[d];
    }
    shape[m->rank] = 2;
}

int ur_zarr_codec_sharding__index_size(const ur_zarr_meta *m, size_t *out, ur_err *err)
{
    size_t raw;
    if (ur_ckd_mul(&raw, (size_t)ur_zarr_codec_sharding__count(m), 16)) {
        return ur_err_set(err, UR_ECORRUPT, "shard index too large");
    }
    return ur_zarr_codec__fixed_size(&m->index, raw, out, err);
}

static uint64_t get_u64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

int ur_zarr_codec_sharding__decode_index(const ur_zarr_meta *m, const uint8_t *src, size_t n,
                                         uint64_t shard_size, uint64_t *entries, ur_err *err)
{
    uint64_t shape[UR_MAX_RANK + 1];
    size_t count = (size_t)ur_zarr_codec_sharding__count(m), isize;
    uint64_t lo, hi;
    int rc;

    rc = ur_zarr_codec_sharding__index_size(m, &isize, err);
    if (rc < 0) {
        return rc;
    }
    if (n != isize || shard_size < isize) {
        return ur_err_set(err, UR_ECORRUPT, "shard of %llu bytes cannot hold a %zu-byte index",
                          (unsigned long long)shard_size, isize);
    }
    index_shape(m, shape);
    rc = ur_zarr_codec__decode(&m->index, m->rank + 1, shape, 8, src, n, (uint8_t *)entries,
                               count * 16, err);
    if (rc < 0) {
        return ur_err_wrap(err, "shard index");
    }
    lo = m->index_at_start ? isize : 0;
    hi = m->index_at_start ? shard_size : shard_size - isize;
    for (size_t i = 0; i < 2 * count; i++) {
        entries[i] = get_u64le((const uint8_t *)&entries[i]);
    }
    for (size_t i = 0; i < count; i++) {
        uint64_t off = entries[2 * i], len = entries[2 * i + 1], end;
        if (off == UR_ZARR_SHARD_ABSENT && len == UR_ZARR_SHARD_ABSENT) {
            continue;
        }
        if (ur_ckd_add64(&end, off, len) || off < lo || end > hi) {
            return ur_err_set(err, UR_ECORRUPT,
                              "shard index entry %zu: bytes [%llu, +%llu) outside the shard's "
                              "data [%llu, %llu)",
                              i, (unsigned long long)off, (unsigned long long)len,
                              (unsigned long long)lo, (unsigned long long)hi);
        }
    }
    return UR_OK;
}

int ur_zarr_codec_sharding__encode(const ur_zarr_meta *m, const ur_buf *chunks, size_t count,
                                   ur_buf *out, ur_err *err)
{
    uint64_t shape[UR_MAX_RANK + 1];
    uint8_t *raw = NULL;
    size_t isize, base, off, rawn;
    int rc;

    if (count != ur_zarr_codec_sharding__count(m)) {
        return ur_err_set(err, UR_EINVAL, "shard needs %llu inner chunks, got %zu",
                          (unsigned long long)ur_zarr_codec_sharding__count(m), count);
    }
    rc = ur_zarr_codec_sharding__index_size(m, &isize, err);
    if (rc < 0) {
        return rc;
    }
    rawn = count * 16;
    raw = ur_malloc(rawn);
    if (raw == NULL) {
        return ur_err_oom(err);
    }
    base = out->len;
    off = m->index_at_start ? isize : 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t o = UR_ZARR_SHARD_ABSENT, l = UR_ZARR_SHARD_ABSENT;
        if (chunks[i].data != NULL) {
            o = off;
            l = chunks[i].len;
            off += chunks[i].len;
        }
        for (int k = 0; k < 8; k++) {
            raw[16 * i + (size_t)k] = (uint8_t)(o >> (8 * k));
            raw[16 * i + 8 + (size_t)k] = (uint8_t)(l >> (8 * k));
        }
    }
    index_shape(m, shape);
    if (m->index_at_start) {
        rc = ur_zarr_codec__encode(&m->index, m->rank + 1, shape, 8, raw, rawn, out, err);
    }
    for (size_t i = 0; rc == UR_OK && i < count; i++) {
        if (chunks[i].data != NULL) {
            rc = ur_buf_append(out, chunks[i].data, chunks[i].len, err);
        }
    }
    if (rc == UR_OK && !m->index_at_start) {
        rc = ur_zarr_codec__encode(&m->index, m->rank + 1, shape, 8, raw, rawn, out, err);
    }
    if (rc == UR_OK && out->len - base != off + (m->index_at_start ? 0 : isize)) {
        rc = ur_err_set(err, UR_EINTERNAL, "shard index size mismatch");
    }
    ur_free(raw);
    return rc;
}

int ur_zarr_codec_sharding__append_single_index(const ur_zarr_meta *m, size_t len, ur_buf *out,
                                                ur_err *err)
{
    uint64_t shape[UR_MAX_RANK + 1];
    uint8_t raw[16];

    if (ur_zarr_codec_sharding__count(m) != 1 || m->index_at_start) {
        return ur_err_set(err, UR_EINTERNAL, "shard of one chunk with the index at the end");
    }
    for (int k = 0; k < 8; k++) {
        raw[k] = 0; /* offset */
        raw[8 + k] = (uint8_t)((uint64_t)len >> (8 * k));
    }
    index_shape(m, shape);
    return ur_zarr_codec__encode(&m->index, m->rank + 1, shape, 8, raw, sizeof raw, out, err);
}
