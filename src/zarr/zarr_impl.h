/* Internals of the zarr layer, shared by the files of src/zarr/ (not cross-layer API).
 *
 * Both zarr versions are parsed into one ur_zarr_meta: shape, storage chunk shape, chunk key
 * encoding, fill value and a codec chain. A zarr2 `.zarray` becomes the chain
 * [transpose (order F)] + bytes (endianness from the dtype) + [compressor]. A zarr3 chain is
 * array->array codecs (transpose) + one array->bytes codec (bytes, or sharding_indexed with
 * its own inner and index chains) + bytes->bytes codecs (zstd, gzip, crc32c).
 * Spec: https://zarr-specs.readthedocs.io/en/latest/v3/core/v3.0.html and TensorStore's
 * tensorstore/driver/zarr3/ and tensorstore/driver/zarr/. */
#ifndef UNROLL_ZARR_IMPL_H
#define UNROLL_ZARR_IMPL_H

#include "unroll/buf.h"
#include "unroll/dtype.h"
#include "unroll/err.h"
#include "unroll/zarr.h"

#include <stddef.h>
#include <stdint.h>

#define UR_ZARR_MAX_B2B 8
/* Largest decoded chunk accepted from metadata (1 TiB): larger is damage, not data. */
#define UR_ZARR_MAX_CHUNK_BYTES ((uint64_t)1 << 40)
/* Largest shape entry accepted (TensorStore's kInfIndex is 2^62 - 2). */
#define UR_ZARR_MAX_DIM ((uint64_t)1 << 62)

typedef enum {
    UR_ZARR_B2B_ZSTD = 1,
    UR_ZARR_B2B_GZIP, /* gzip framing (zarr3 "gzip", zarr2 "gzip") */
    UR_ZARR_B2B_ZLIB, /* zlib framing (zarr2 "zlib") */
    UR_ZARR_B2B_CRC32C
} ur_zarr_b2b_kind;

typedef struct ur_zarr_b2b {
    ur_zarr_b2b_kind kind;
    int level;
    int checksum; /* zstd: write a frame checksum */
} ur_zarr_b2b;

/* A chain without sharding: [transpose] + bytes + bytes->bytes codecs. */
typedef struct ur_zarr_chain {
    int has_transpose;
    /* encoded axis j is decoded axis perm[j] (zarr3 transpose "order"). */
    int perm[UR_MAX_RANK + 1];
    int big_endian;
    int is_complex;       /* elements are two floats: swap each half */
    int bytes_has_endian; /* zarr3: the bytes codec carried "endian" (for emit) */
    int n_b2b;
    ur_zarr_b2b b2b[UR_ZARR_MAX_B2B];
} ur_zarr_chain;

typedef struct ur_zarr_meta {
    int zarr_format; /* 2 or 3 */
    ur_dtype dtype;
    size_t itemsize;
    int rank;
    uint64_t shape[UR_MAX_RANK];
    uint64_t chunk_shape[UR_MAX_RANK]; /* storage chunk (zarr3: the shard) */
    char sep;                          /* chunk key separator: '/' or '.' */
    int v2_keys;                       /* 1: "0.0" keys (zarr2, zarr3 "v2" encoding) */
    uint8_t fill[16];                  /* one element, in memory (little-endian) */
    int fill_null;                     /* zarr2 fill_value null (reads as zeros) */
    ur_zarr_chain codecs;              /* the chain, or the inner chain when sharded */
    int sharded;
    uint64_t inner_shape[UR_MAX_RANK]; /* sharded: inner chunk shape */
    ur_zarr_chain index;               /* sharded: index codecs */
    int index_at_start;
} ur_zarr_meta;

/* zarr_meta.c: parse and emit metadata JSON. `name` is used in error messages only.
 * Errors: UR_ECORRUPT (invalid or inconsistent metadata), UR_EUNSUPPORTED, UR_ENOMEM. */
int ur_zarr_meta__parse_v3(ur_zarr_meta *out, const char *json, size_t len, const char *name,
                           ur_err *err);
int ur_zarr_meta__parse_v2(ur_zarr_meta *out, const char *json, size_t len, const char *name,
                           ur_err *err);
/* Compact JSON with sorted keys, as TensorStore writes it. */
int ur_zarr_meta__emit(const ur_zarr_meta *m, ur_buf *out, ur_err *err);
/* Fill in itemsize and check shape/chunk consistency (used by parse and by create). */
int ur_zarr_meta__validate(ur_zarr_meta *m, ur_err *err);

/* zarr_dtype.c */
/* A zarr2 dtype string ("<f4", "|b1", "bfloat16", ">i8") to a dtype and byte order. */
int ur_zarr_dtype__parse_v2(const char *s, ur_dtype *dt_out, int *big_endian_out, ur_err *err);
/* The zarr2 string TensorStore writes (little-endian): "<f4", "|b1", "bfloat16". */
const char *ur_zarr_dtype__v2_name(ur_dtype dt);
/* zarr3 data_type names are TensorStore's names. UR_DT_INVALID when unknown. */
ur_dtype ur_zarr_dtype__parse_v3(const char *s);
/* Encode a double as one element of a float dtype (nearest, ties to even); out gets
 * ur_dtype_size bytes little-endian. UR_EINVAL for a non-float dtype. */
int ur_zarr_dtype__from_double(ur_dtype dt, double v, uint8_t *out, ur_err *err);
/* The element TensorStore writes as "NaN" (the canonical quiet NaN). */
int ur_zarr_dtype__nan(ur_dtype dt, uint8_t *out, ur_err *err);
/* Decode one element of a float dtype to a double (for emitting fill values). */
double ur_zarr_dtype__to_double(ur_dtype dt, const uint8_t *p);

/* zarr_chunk_grid.c */
/* Key of storage chunk `idx`, relative to the array prefix ("c/0/1", "0.1", "c", "0"). */
int ur_zarr_chunk_grid__key(const ur_zarr_meta *m, const uint64_t *idx, char *key, size_t key_size,
                            ur_err *err);
/* Copy the box `count` between two dense C-order arrays: src at src_start in src_shape,
 * dst at dst_start in dst_shape. */
void ur_zarr_chunk_grid__copy_box(uint8_t *dst, const uint64_t *dst_shape,
                                  const uint64_t *dst_start, const uint8_t *src,
                                  const uint64_t *src_shape, const uint64_t *src_start,
                                  const uint64_t *count, int rank, size_t itemsize);
/* Fill the box [start, start+count) of a dense C-order array of `shape`. */
void ur_zarr_chunk_grid__fill_box(uint8_t *dst, const uint64_t *shape, const uint64_t *start,
                                  const uint64_t *count, int rank, const uint8_t *fill,
                                  size_t itemsize);
/* Fill n elements with the element `fill`. */
void ur_zarr_chunk_grid__fill(uint8_t *dst, uint64_t n, const uint8_t *fill, size_t itemsize);

/* zarr_codec.c: run a non-sharded chain over one chunk of `shape` (rank entries) and
 * `itemsize` bytes per element. Decode writes exactly the chunk's bytes into dst
 * (dst_size must equal them); anything else is UR_ECORRUPT. */
int ur_zarr_codec__decode(const ur_zarr_chain *c, int rank, const uint64_t *shape, size_t itemsize,
                          const uint8_t *src, size_t n, uint8_t *dst, size_t dst_size,
                          ur_err *err);
/* ur_zarr_codec__decode reporting the decoded prefix to `ready` as it grows, for a chain of
 * one zstd codec behind a little-endian bytes codec; other chains are decoded whole and
 * reported once. */
int ur_zarr_codec__decode_progressive(const ur_zarr_chain *c, int rank, const uint64_t *shape,
                                      size_t itemsize, const uint8_t *src, size_t n, uint8_t *dst,
                                      size_t dst_size, ur_zarr_ready_fn ready, void *ctx,
                                      ur_err *err);
int ur_zarr_codec__encode(const ur_zarr_chain *c, int rank, const uint64_t *shape, size_t itemsize,
                          const uint8_t *src, size_t n, ur_buf *out, ur_err *err);
/* Encoded size of a chain made only of size-fixed codecs (bytes, transpose, crc32c), or
 * UR_EUNSUPPORTED (sharding index codecs must be fixed-size). */
int ur_zarr_codec__fixed_size(const ur_zarr_chain *c, size_t decoded, size_t *out, ur_err *err);

/* zarr_codec_bytes.c: swap every element of itemsize bytes (complex: each half). */
void ur_zarr_codec_bytes__swap(uint8_t *p, size_t n, size_t itemsize, int is_complex);

/* zarr_codec_transpose.c: dst (encoded order) from src (decoded C order) and back. */
void ur_zarr_codec_transpose__encode(uint8_t *dst, const uint8_t *src, int rank,
                                     const uint64_t *shape, const int *perm, size_t itemsize);
void ur_zarr_codec_transpose__decode(uint8_t *dst, const uint8_t *src, int rank,
                                     const uint64_t *shape, const int *perm, size_t itemsize);

/* ---- bytes->bytes codecs: one table (zarr_codec_table.c), one entry per codec ---------------
 *
 * Every bytes->bytes codec (zstd, gzip, zlib, crc32c) is one entry of the table, defined in
 * its own file; the metadata parser, the chain decoder/encoder and the chunk stream find a
 * codec only through the table. A kind or a name the table does not hold is UR_EUNSUPPORTED
 * wherever it is met: no codec is ever decoded by another's function. Adding a codec: a
 * value of ur_zarr_b2b_kind, a file defining its entry, and one row in zarr_codec_table.c. */

/* A streaming decoder's state (each codec defines its own struct). */
typedef struct ur_zarr_b2b_stream ur_zarr_b2b_stream;

/* One step of a streaming decoder: consume some of in[0, in_n) and/or produce some of
 * out[0, out_n). */
typedef struct ur_zarr_b2b_io {
    const uint8_t *in; /* may be NULL when in_n is 0 */
    size_t in_n;
    uint64_t in_rest; /* encoded bytes after these, not yet read */
    uint8_t *out;
    size_t out_n;
    size_t in_used; /* set by the step */
    size_t made;    /* set by the step */
    int ended;      /* set by the step: a frame or stream ended in this step */
} ur_zarr_b2b_io;

/* A step's return when the codec needs input and there is none left (the caller reports the
 * data as cut short). */
#define UR_ZARR_B2B_STARVED 1

typedef struct ur_zarr_b2b_codec {
    ur_zarr_b2b_kind kind;
    const char *name;    /* in messages ("zstd", "gzip", "zlib", "crc32c") */
    const char *v3_name; /* zarr3 codec "name", NULL: no zarr3 form */
    const char *v2_id;   /* zarr2 compressor "id", NULL: not a zarr2 compressor */
    int has_level;       /* "level" in the configuration */
    int has_checksum;    /* "checksum" in the zarr3 configuration (written back) */
    int level_v3, level_v2;
    int level_min, level_max; /* zarr3 "level" range */
    /* A checksum-like codec that appends `trailer` bytes and leaves the data as it is: its
     * decoded size is the encoded size less the trailer. `strip` checks and removes it. */
    size_t trailer;
    int (*strip)(const uint8_t *src, size_t n, size_t *len_out, ur_err *err);
    /* Decode at most `cap` bytes into dst (more is UR_ECORRUPT); NULL for trailer codecs. */
    int (*decode)(const ur_zarr_b2b *b, const uint8_t *src, size_t n, uint8_t *dst, size_t cap,
                  size_t *len_out, ur_err *err);
    /* Append the encoding of src to out. */
    int (*encode)(const ur_zarr_b2b *b, const uint8_t *src, size_t n, ur_buf *out, ur_err *err);
    /* Optional: decode one frame of exactly cap bytes reporting the prefix as it grows
     * (ur_zarr_codec__decode_progressive); returns 1 to fall back to `decode`. */
    int (*decode_progressive)(const uint8_t *src, size_t n, uint8_t *dst, size_t cap, size_t step,
                              ur_zarr_ready_fn ready, void *ctx, ur_err *err);
    /* Optional streaming decoder (zarr_stream.c); without one, a chain holding the codec is
     * decoded whole. `stream_head` (optional) sees the first piece of input before it is
     * decoded (`total`: the decoded size expected); `stream_step` returns UR_OK,
     * UR_ZARR_B2B_STARVED or an error; `stream_done` tells whether the input so far ends a
     * frame or stream. */
    int (*stream_open)(ur_zarr_b2b_stream **out, const ur_zarr_b2b *b, ur_err *err);
    int (*stream_head)(const uint8_t *p, size_t n, size_t total, ur_err *err);
    int (*stream_step)(ur_zarr_b2b_stream *s, ur_zarr_b2b_io *io, ur_err *err);
    int (*stream_done)(const ur_zarr_b2b_stream *s);
    void (*stream_close)(ur_zarr_b2b_stream *s);
} ur_zarr_b2b_codec;

/* zarr_codec_table.c: the entry of a kind, of a zarr3 codec name, of a zarr2 compressor id;
 * NULL when the table has none. */
const ur_zarr_b2b_codec *ur_zarr_codec__b2b(ur_zarr_b2b_kind kind);
const ur_zarr_b2b_codec *ur_zarr_codec__b2b_v3(const char *name);
const ur_zarr_b2b_codec *ur_zarr_codec__b2b_v2(const char *id);
/* The entry of b's kind, or UR_EUNSUPPORTED naming it. */
int ur_zarr_codec__b2b_get(const ur_zarr_b2b *b, const ur_zarr_b2b_codec **out, ur_err *err);

/* The entries, one per file. */
extern const ur_zarr_b2b_codec ur_zarr_codec_zstd__entry;   /* zarr_codec_zstd.c */
extern const ur_zarr_b2b_codec ur_zarr_codec_gzip__entry;   /* zarr_codec_gzip.c */
extern const ur_zarr_b2b_codec ur_zarr_codec_zlib__entry;   /* zarr_codec_gzip.c */
extern const ur_zarr_b2b_codec ur_zarr_codec_crc32c__entry; /* zarr_codec_crc32c.c */

#define UR_ZARR_ZSTD_DEFAULT_LEVEL_V3 3 /* TensorStore zarr3 zstd codec default */
#define UR_ZARR_ZSTD_DEFAULT_LEVEL_V2 1 /* TensorStore zarr2 zstd compressor default */
/* zarr_codec_zstd.c: also called directly by the tests to build data. */
int ur_zarr_codec_zstd__encode(const uint8_t *src, size_t n, int level, int checksum, ur_buf *out,
                               ur_err *err);

/* zarr_codec_sharding.c: the shard index, (offset, nbytes) per inner chunk in C order over
 * the inner grid of one shard. */
#define UR_ZARR_SHARD_ABSENT UINT64_MAX
/* Inner chunks per shard (product of chunk_shape / inner_shape). */
uint64_t ur_zarr_codec_sharding__count(const ur_zarr_meta *m);
/* Encoded index size in bytes. */
int ur_zarr_codec_sharding__index_size(const ur_zarr_meta *m, size_t *out, ur_err *err);
/* Decode an encoded index into entries (2 * count u64: offset, nbytes) and check each
 * entry lies inside a shard of shard_size bytes (outside the index). */
int ur_zarr_codec_sharding__decode_index(const ur_zarr_meta *m, const uint8_t *src, size_t n,
                                         uint64_t shard_size, uint64_t *entries, ur_err *err);
/* Encode a shard holding `count` already-encoded inner chunks (NULL = absent). */
int ur_zarr_codec_sharding__encode(const ur_zarr_meta *m, const ur_buf *chunks, size_t count,
                                   ur_buf *out, ur_err *err);
/* Finish a shard of one inner chunk whose `len` encoded bytes end `out` and start the shard,
 * with the index at the end: append the index. Saves encoding the chunk into a buffer of
 * its own and copying it into the shard. */
int ur_zarr_codec_sharding__append_single_index(const ur_zarr_meta *m, size_t len, ur_buf *out,
                                                ur_err *err);

/* zarr_array.c: read and decode the index of shard `key` (stored in `kv` under metadata m)
 * into entries (2 * inner chunks u64); *size_out gets the shard's size. UR_ENOTFOUND when
 * the shard is missing (the caller decides what that means). */
int ur_zarr_array__read_shard_index(ur_kvstore *kv, const char *key, const ur_zarr_meta *m,
                                    uint64_t *entries, uint64_t *size_out, ur_err *err);

/* zarr_array.c: create an array from any metadata (tests and tools; create() builds the
 * Orbax profile and calls this). Writes the metadata key and returns a handle. */
int ur_zarr_array__create_meta(ur_zarr_array **out, ur_kvstore *kv, const char *prefix,
                               const ur_zarr_meta *m, ur_err *err);
/* The parsed metadata of an open array (borrowed). */
const ur_zarr_meta *ur_zarr_array__meta(const ur_zarr_array *arr);

/* zarr_array.c: the kvstore and fill_missing setting of an open array (for zarr_stream.c). */
ur_kvstore *ur_zarr_array__kvstore(const ur_zarr_array *arr);
int ur_zarr_array__fill_missing(const ur_zarr_array *arr);

/* zarr_stream.c: stored bytes are read in pieces of this size (the default). */
#define UR_ZARR_STREAM_PIECE ((size_t)1 << 20)
/* Pieces a chunk stream announces ahead of the one it reads (ur_kvstore_prefetch_range). */
#define UR_ZARR_STREAM_AHEAD 8
/* Tests: use pieces of `piece` bytes (>= 1) instead; call before the first read. */
void ur_zarr_chunk_stream__set_piece_size(ur_zarr_chunk_stream *s, size_t piece);

#endif
