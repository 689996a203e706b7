/* Zarr arrays (v2 `.zarray` and v3 `zarr.json`) over a kvstore.
 *
 * An array lives under a key prefix of a kvstore (Orbax: the parameter name, e.g.
 * "params.params.decoder.layers.mlp.wi_0.kernel"). Elements in memory are dense, C order
 * (last axis fastest), little-endian, `ur_dtype_size` bytes each.
 *
 * Reading is thread-safe: several threads may call the read/decode functions on one
 * handle at once. Writing: encode is thread-safe and pure; write_chunk / the kvstore
 * write must come from one thread at a time.
 *
 * The chunk of this API is the unit a reader decodes on its own: for zarr3 with the
 * sharding_indexed codec it is the *inner* chunk (the shard is only a storage unit). */
#ifndef UNROLL_ZARR_H
#define UNROLL_ZARR_H

#include "unroll/buf.h"
#include "unroll/dtype.h"
#include "unroll/err.h"
#include "unroll/kvstore.h"

#include <stdint.h>

typedef struct ur_zarr_array ur_zarr_array;

typedef struct ur_zarr_info {
    int zarr_format; /* 2 or 3 */
    ur_dtype dtype;
    int rank; /* 0 .. UR_MAX_RANK */
    uint64_t shape[UR_MAX_RANK];
    uint64_t chunk_shape[UR_MAX_RANK]; /* read unit (inner chunk when sharded) */
    uint64_t grid[UR_MAX_RANK];        /* chunks per axis: ceil(shape / chunk_shape) */
    uint64_t chunk_count;              /* product of grid (1 for rank 0) */
    size_t chunk_bytes;                /* decoded bytes of one full chunk */
    uint64_t nbytes;                   /* decoded bytes of the whole array */
} ur_zarr_info;

/* Open the array under `prefix`. zarr_format: 2, 3, or 0 to detect (zarr.json first, then
 * .zarray). Metadata errors are UR_ECORRUPT / UR_EUNSUPPORTED naming the array. The kvstore
 * is borrowed and must outlive the handle. */
int ur_zarr_array_open(ur_zarr_array **out, ur_kvstore *kv, const char *prefix, int zarr_format,
                       ur_err *err);

const ur_zarr_info *ur_zarr_array_info(const ur_zarr_array *arr);
/* The prefix the array was opened or created at (borrowed). */
const char *ur_zarr_array_prefix(const ur_zarr_array *arr);

/* Decode one chunk (grid index `idx`, rank entries) into dst, which holds chunk_bytes: the
 * full chunk shape, with the part beyond the array's edge filled with the fill value. A
 * missing chunk is filled with the fill value, as TensorStore reads it. */
int ur_zarr_array_read_chunk(ur_zarr_array *arr, const uint64_t *idx, void *dst, ur_err *err);

/* Called while a chunk is decoded: its first n bytes are final (n grows from call to call and
 * the last call has n = chunk_bytes). A nonzero return stops the read and is returned. */
typedef int (*ur_zarr_ready_fn)(void *ctx, size_t n, ur_err *err);

/* ur_zarr_array_read_chunk that reports the decoded prefix as it grows, so that the caller
 * can consume bytes while they are still in the CPU's caches. Only a chunk stored as one
 * zstd frame behind a little-endian bytes codec (Orbax's chunks), whole and inside the
 * array, is reported piece by piece (about every 256 KiB of compressed input); any other is
 * decoded whole and reported once. Results and errors are those of ur_zarr_array_read_chunk. */
int ur_zarr_array_read_chunk_progressive(ur_zarr_array *arr, const uint64_t *idx, void *dst,
                                         ur_zarr_ready_fn ready, void *ctx, ur_err *err);

/* Hint that chunk `idx` will be read soon: the store starts reading up to max_bytes of its
 * stored value (the shard holding it) in the background. Best effort, no errors. */
void ur_zarr_array_prefetch_chunk(ur_zarr_array *arr, const uint64_t *idx, size_t max_bytes);

/* Read the box [start, start+count) into dst (dense, C order, count's shape). Decodes only
 * the chunks that overlap. */
int ur_zarr_array_read_box(ur_zarr_array *arr, const uint64_t *start, const uint64_t *count,
                           void *dst, ur_err *err);

/* Whether a missing chunk (or absent inner chunk of a shard) reads as the fill value (1,
 * the default, as TensorStore reads it) or fails with UR_ECORRUPT naming the chunk key (0:
 * what Orbax does when _METADATA says store_array_data_equal_to_fill_value). Set it before
 * any read; it is not synchronised with reads running at the same time. */
void ur_zarr_array_set_fill_missing(ur_zarr_array *arr, int fill_missing);

/* Bytes stored for the array (metadata excluded), for `unroll inspect`. */
int ur_zarr_array_stored_bytes(ur_zarr_array *arr, uint64_t *out, ur_err *err);

/* What to create. chunk_shape entries must be >= 1 (and, for rank 0, ignored). */
typedef struct ur_zarr_spec {
    int zarr_format; /* 2 or 3 */
    ur_dtype dtype;
    int rank;
    uint64_t shape[UR_MAX_RANK];
    uint64_t chunk_shape[UR_MAX_RANK];
    int zstd_level; /* as TensorStore's default when 0 is not meant: see zarr_codec_zstd.c */
    /* 1: create writes nothing (the handle only encodes and writes chunks) until
     * ur_zarr_array_write_meta; such a create is thread-safe. */
    int defer_meta;
} ur_zarr_spec;

/* Write the metadata for a new array under `prefix` and return a handle for its chunks.
 * zarr3 is written as TensorStore writes it for Orbax: a sharding_indexed codec with one
 * inner chunk per shard (bytes + zstd inside); zarr2 as a `.zarray` with zstd. */
int ur_zarr_array_create(ur_zarr_array **out, ur_kvstore *kv, const char *prefix,
                         const ur_zarr_spec *spec, ur_err *err);

/* Write the metadata of an array created with defer_meta. */
int ur_zarr_array_write_meta(ur_zarr_array *arr, ur_err *err);

/* Encode one full chunk (chunk_bytes of dense C-order data; the part past the array's edge
 * is padding and may hold anything) into `out` as it is stored. Pure and thread-safe. */
int ur_zarr_array_encode_chunk(ur_zarr_array *arr, const void *src, ur_buf *out, ur_err *err);

/* The kvstore key of chunk `idx` (the storage unit: for zarr3 the shard). */
int ur_zarr_array_chunk_key(const ur_zarr_array *arr, const uint64_t *idx, char *key,
                            size_t key_size, ur_err *err);

/* Encode and store one chunk (encode + ur_kvstore_write). */
int ur_zarr_array_write_chunk(ur_zarr_array *arr, const uint64_t *idx, const void *src,
                              ur_err *err);

/* Store the bytes ur_zarr_array_encode_chunk produced for chunk `idx` (the kvstore write
 * alone), so encoding can run on many threads and writing on one. */
int ur_zarr_array_write_encoded(ur_zarr_array *arr, const uint64_t *idx, const void *data,
                                size_t n, ur_err *err);

/* NULL-safe. Does not close the kvstore. */
void ur_zarr_array_close(ur_zarr_array *arr);

/* ---- streaming one chunk ---------------------------------------------------------------
 *
 * A chunk stream hands out the decoded bytes of one chunk (the read unit, as read_chunk)
 * in C order, in pieces of any size, so a chunk larger than the memory budget (Orbax may
 * write chunks up to 2 GiB) is never held whole. The bytes are exactly those
 * ur_zarr_array_read_chunk writes: chunk_bytes in total, little-endian, the full chunk shape
 * with the part past the array's edge holding the fill value.
 *
 * Incremental (memory O(piece + zstd window or 32 KiB deflate window), independent of the
 * chunk size): chains of a `bytes` codec (little- or big-endian; swapped in the stream)
 * followed by at most one compressor (zstd, gzip or zlib) and at most one crc32c after it,
 * unsharded (zarr2 `.zarray` with order C, zarr3) or inside sharding_indexed. The stored
 * bytes are read in pieces of 1 MiB with ur_kvstore_read_range; the shard index with one
 * small range read. A missing chunk streams the fill value.
 * Fallback (memory: one decoded chunk, plus what read_chunk needs to decode it): any chain
 * with transpose (zarr2 order F included) or other bytes->bytes codec orders; open then
 * decodes the whole chunk with ur_zarr_array_read_chunk and the stream copies from it.
 *
 * Thread-safe as read_chunk: several streams of one array may be open and read on different
 * threads at once; one stream is used by one thread at a time. The array must outlive its
 * streams. */
typedef struct ur_zarr_chunk_stream ur_zarr_chunk_stream;

/* Open chunk `idx` (grid index, rank entries) for sequential reading. Errors as read_chunk:
 * UR_EINVAL (index outside the grid), UR_ECORRUPT (also: chunk missing and fill_missing
 * off) / UR_EIO naming the array and chunk key, UR_ENOMEM. */
int ur_zarr_chunk_stream_open(ur_zarr_chunk_stream **out, ur_zarr_array *arr, const uint64_t *idx,
                              ur_err *err);

/* Copy the next n decoded bytes into dst; n must not exceed ur_zarr_chunk_stream_remaining
 * (UR_EINVAL). UR_ECORRUPT, naming the array and chunk key, when the stored data ends
 * early, has trailing bytes, fails its checksum or decodes to a size other than
 * chunk_bytes: found as early as the data allows and at the latest by the read that
 * returns the last byte. After any failure the stream stays failed and every later read
 * returns the same error. */
int ur_zarr_chunk_stream_read(ur_zarr_chunk_stream *s, void *dst, size_t n, ur_err *err);

/* Decoded bytes not yet read (chunk_bytes right after open). */
size_t ur_zarr_chunk_stream_remaining(const ur_zarr_chunk_stream *s);

/* 1 when the stream decodes incrementally (bounded memory), 0 when it fell back to
 * decoding the whole chunk at open. */
int ur_zarr_chunk_stream_is_incremental(const ur_zarr_chunk_stream *s);

/* NULL-safe. A stream may be closed before it is read to the end. */
void ur_zarr_chunk_stream_close(ur_zarr_chunk_stream *s);

#endif
