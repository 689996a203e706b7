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

/* Read the box [start, start+count) into dst (dense, C order, count's shape). Decodes only
 * the chunks that overlap. */
int ur_zarr_array_read_box(ur_zarr_array *arr, const uint64_t *start, const uint64_t *count,
                           void *dst, ur_err *err);

/* Whether a missing chunk (or absent inner chunk of a shard) reads as the fill value (1,
 * the default, as TensorStore reads it) or fails with UR_ENOTFOUND naming the chunk key (0:
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
} ur_zarr_spec;

/* Write the metadata for a new array under `prefix` and return a handle for its chunks.
 * zarr3 is written as TensorStore writes it for Orbax: a sharding_indexed codec with one
 * inner chunk per shard (bytes + zstd inside); zarr2 as a `.zarray` with zstd. */
int ur_zarr_array_create(ur_zarr_array **out, ur_kvstore *kv, const char *prefix,
                         const ur_zarr_spec *spec, ur_err *err);

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

#endif
