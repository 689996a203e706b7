/* Streaming one chunk: its decoded bytes, in C order, in pieces of any size, without ever
 * holding the chunk (or its stored bytes) whole.
 *
 *   stored value (unsharded):   [ compressed data ............................ | crc32c ]
 *   shard (sharding_indexed):   [ ... | inner chunk: compressed data | crc32c | ... | index ]
 *                                       ^ off                                 ^ off + len
 *   pieces of the data: read_range(off + k * piece, piece) -> crc32c update -> decompressor
 *   -> caller's buffer -> byte swap (big-endian) -> fill value past the array's edge.
 *
 * Incremental chains (after the bytes codec, in encode order): [a codec with a streaming
 * decoder in the codec table (zstd, gzip, zlib)] [crc32c].
 * Anything else (transpose, zarr2 order F, several compressors) falls back to
 * ur_zarr_array_read_chunk into one chunk-sized buffer at open. The stream produces exactly
 * the bytes read_chunk writes, and fails where read_chunk fails, with the same messages
 * where it can: the checks read_chunk makes after decoding the whole chunk (crc32c, decoded
 * size, trailing bytes) are made here when the data reaches them, at the latest by the read
 * that returns the last byte. */
#include "zarr_impl.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/crc32c.h"

#include <limits.h>
#include <string.h>

#define KEY_MAX 4096

enum { MODE_FILL, MODE_WHOLE, MODE_INCR };

struct ur_zarr_chunk_stream {
    ur_zarr_array *arr;
    ur_kvstore *kv;
    const ur_zarr_info *info;
    size_t itemsize;
    uint8_t fill[16];
    char key[KEY_MAX];
    int mode;
    size_t total;   /* chunk_bytes */
    size_t pos;     /* decoded bytes handed out */
    size_t raw_pos; /* decoded bytes produced by the decompressor */
    int failed;
    ur_err saved; /* the failure every later read repeats */
    uint8_t *whole; /* MODE_WHOLE: the decoded chunk */
    /* Edge chunks: valid extent per axis; the rest reads as the fill value. */
    int edge;
    uint64_t valid[UR_MAX_RANK];
    int big_endian, is_complex;
    /* One post-processed element split across two reads. */
    uint8_t part[16];
    size_t part_off; /* bytes of `part` already handed out (itemsize: none pending) */
    /* The stored data: [src_off, src_off + src_len) of the value, crc32c trailer excluded. */
    uint64_t src_off, src_len, src_read;
    uint64_t hinted; /* data bytes announced to the store (hint_ahead) */
    uint8_t *piece;
    size_t piece_size, in_pos, in_len;
    const ur_zarr_b2b_codec *comp; /* the decompressor's table entry, NULL: stored as is */
    const ur_zarr_b2b *comp_conf;
    ur_zarr_b2b_stream *dec;
    int has_crc;
    uint32_t crc, crc_want;
};

/* ---- opening ------------------------------------------------------------------------------ */

/* Which chains stream: bytes + [one codec with a streaming decoder] + [crc32c], no
 * transpose. A codec the table does not hold does not stream: read_chunk reports it. */
static int classify(const ur_zarr_chain *c, const ur_zarr_b2b_codec **comp, int *crc)
{
    const ur_zarr_b2b_codec *k = c->n_b2b > 0 ? ur_zarr_codec__b2b(c->b2b[0].kind) : NULL;
    int i = 0;

    *comp = NULL;
    *crc = 0;
    if (c->has_transpose || (c->n_b2b > 0 && k == NULL)) {
        return 0;
    }
    if (i < c->n_b2b && c->b2b[i].kind != UR_ZARR_B2B_CRC32C) {
        if (k->stream_open == NULL) {
            return 0;
        }
        *comp = k;
        i++;
    }
    if (i < c->n_b2b && c->b2b[i].kind == UR_ZARR_B2B_CRC32C) {
        *crc = 1;
        i++;
    }
    return i == c->n_b2b;
}

static int missing(ur_zarr_chunk_stream *s, const char *what, ur_err *err)
{
    if (!ur_zarr_array__fill_missing(s->arr)) {
        return ur_err_set_os(err, UR_ECORRUPT, 0, s->key,
                             "%s is missing (the checkpoint stores every chunk: "
                             "store_array_data_equal_to_fill_value)",
                             what);
    }
    s->mode = MODE_FILL;
    return UR_OK;
}

/* As zarr_array.c: a stored chunk larger than twice its decoded size (+1 MiB) is damage. */
static uint64_t value_limit(const ur_zarr_chunk_stream *s)
{
    return (uint64_t)s->total * 2 + ((uint64_t)1 << 20);
}

/* Find the inner chunk's bytes in its shard: one range read of the index. */
static int locate_sharded(ur_zarr_chunk_stream *s, const uint64_t *idx, uint64_t *off,
                          uint64_t *len, ur_err *err)
{
    const ur_zarr_meta *m = ur_zarr_array__meta(s->arr);
    uint64_t count = ur_zarr_codec_sharding__count(m), size, lin = 0, *entries;
    int rc;

    for (int d = 0; d < m->rank; d++) {
        uint64_t ratio = m->chunk_shape[d] / m->inner_shape[d];
        lin = lin * ratio + idx[d] % ratio;
    }
    entries = ur_malloc((size_t)count * 16);
    if (entries == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_zarr_array__read_shard_index(s->kv, s->key, m, entries, &size, err);
    if (rc == UR_ENOTFOUND) {
        rc = missing(s, "shard", err);
        goto out;
    }
    if (rc < 0) {
        goto out;
    }
    *off = entries[2 * lin];
    *len = entries[2 * lin + 1];
    if (*off == UR_ZARR_SHARD_ABSENT) {
        rc = missing(s, "inner chunk of shard", err);
        goto out;
    }
    if (*len > value_limit(s)) {
        rc = ur_err_set(err, UR_ECORRUPT, "inner chunk of %llu bytes is too large",
                        (unsigned long long)*len);
    }
out:
    ur_free(entries);
    return rc;
}

static int locate_unsharded(ur_zarr_chunk_stream *s, uint64_t *off, uint64_t *len, ur_err *err)
{
    int rc = ur_kvstore_size(s->kv, s->key, len, err);

    *off = 0;
    if (rc == UR_ENOTFOUND) {
        return missing(s, "chunk", err);
    }
    if (rc == UR_OK && *len > value_limit(s)) {
        rc = ur_err_set(err, UR_ECORRUPT, "chunk of %llu bytes is too large",
                        (unsigned long long)*len);
    }
    return rc;
}

/* Announce the pieces the stream will read next, up to UR_ZARR_STREAM_AHEAD of them past
 * the one being read, each as the range refill will ask for: a network store fetches them
 * while this thread decodes (kvstore_ahead.c), a file store reads them into the page cache. */
static void hint_ahead(ur_zarr_chunk_stream *s)
{
    uint64_t until = s->src_read + (uint64_t)UR_ZARR_STREAM_AHEAD * s->piece_size;
    if (until > s->src_len) {
        until = s->src_len;
    }
    while (s->hinted < until) {
        uint64_t n = until - s->hinted < s->piece_size ? until - s->hinted : s->piece_size;
        ur_kvstore_prefetch_range(s->kv, s->key, s->src_off + s->hinted, (size_t)n);
        s->hinted += n;
    }
}

static int start_decoder(ur_zarr_chunk_stream *s, ur_err *err)
{
    return s->comp != NULL ? s->comp->stream_open(&s->dec, s->comp_conf, err) : UR_OK;
}

static int open_incremental(ur_zarr_chunk_stream *s, const uint64_t *idx, ur_err *err)
{
    const ur_zarr_meta *m = ur_zarr_array__meta(s->arr);
    uint64_t off = 0, len = 0;
    uint8_t t[4];
    int rc;

    rc = m->sharded ? locate_sharded(s, idx, &off, &len, err)
                    : locate_unsharded(s, &off, &len, err);
    if (rc < 0 || s->mode == MODE_FILL) {
        return rc;
    }
    if (s->has_crc) {
        if (len < 4) {
            return ur_err_set(err, UR_ECORRUPT, "crc32c codec: %llu bytes, fewer than 4",
                              (unsigned long long)len);
        }
        /* the data's first pieces are on their way while the checksum is read */
        s->src_off = off;
        s->src_len = len - 4;
        hint_ahead(s);
        rc = ur_kvstore_read_range(s->kv, s->key, off + len - 4, 4, t, err);
        if (rc < 0) {
            return rc;
        }
        s->crc_want = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                      (uint32_t)t[3] << 24;
        len -= 4;
    }
    if (s->comp == NULL && len != s->total) {
        return ur_err_set(err, UR_ECORRUPT, "decoded chunk is %llu bytes, expected %zu",
                          (unsigned long long)len, s->total);
    }
    s->src_off = off;
    s->src_len = len;
    return start_decoder(s, err);
}

int ur_zarr_chunk_stream_open(ur_zarr_chunk_stream **out, ur_zarr_array *arr, const uint64_t *idx,
                              ur_err *err)
{
    const ur_zarr_meta *m = ur_zarr_array__meta(arr);
    const ur_zarr_info *in = ur_zarr_array_info(arr);
    uint64_t sidx[UR_MAX_RANK];
    ur_zarr_chunk_stream *s;
    const ur_zarr_b2b_codec *comp;
    int rc, crc;

    for (int d = 0; d < in->rank; d++) {
        if (idx[d] >= in->grid[d]) {
            return ur_err_set(err, UR_EINVAL,
                              "zarr array '%s': chunk index %llu >= %llu on axis %d",
                              ur_zarr_array_prefix(arr), (unsigned long long)idx[d],
                              (unsigned long long)in->grid[d], d);
        }
    }
    s = ur_calloc(1, sizeof(*s));
    if (s == NULL) {
        return ur_err_oom(err);
    }
    s->arr = arr;
    s->kv = ur_zarr_array__kvstore(arr);
    s->info = in;
    s->itemsize = m->itemsize;
    memcpy(s->fill, m->fill, sizeof(s->fill));
    s->total = in->chunk_bytes;
    s->part_off = s->itemsize;
    s->piece_size = UR_ZARR_STREAM_PIECE;
    s->big_endian = m->codecs.big_endian;
    s->is_complex = m->codecs.is_complex;
    for (int d = 0; d < in->rank; d++) {
        uint64_t lo = idx[d] * in->chunk_shape[d];
        s->valid[d] = in->shape[d] - lo < in->chunk_shape[d] ? in->shape[d] - lo
                                                             : in->chunk_shape[d];
        s->edge |= s->valid[d] != in->chunk_shape[d];
        sidx[d] = m->sharded ? idx[d] / (m->chunk_shape[d] / m->inner_shape[d]) : idx[d];
    }
    if (!classify(&m->codecs, &comp, &crc)) {
        /* Not streamable: read_chunk decodes the whole chunk (and reports its errors). */
        s->mode = MODE_WHOLE;
        s->whole = ur_malloc(s->total ? s->total : 1);
        rc = s->whole ? ur_zarr_array_read_chunk(arr, idx, s->whole, err) : ur_err_oom(err);
        if (rc < 0) {
            ur_zarr_chunk_stream_close(s);
            return rc;
        }
        *out = s;
        return UR_OK;
    }
    s->mode = MODE_INCR;
    s->comp = comp;
    s->comp_conf = &m->codecs.b2b[0];
    s->has_crc = crc;
    rc = ur_zarr_array_chunk_key(arr, sidx, s->key, sizeof(s->key), err);
    if (rc == UR_OK) {
        rc = open_incremental(s, idx, err);
        if (rc < 0) {
            ur_err_set_where(err, s->key);
            ur_err_wrap(err, "zarr array '%s' chunk '%s'", ur_zarr_array_prefix(arr), s->key);
        }
    }
    if (rc < 0) {
        ur_zarr_chunk_stream_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

void ur_zarr_chunk_stream__set_piece_size(ur_zarr_chunk_stream *s, size_t piece)
{
    if (s->piece == NULL && piece > 0) {
        s->piece_size = piece;
    }
}

size_t ur_zarr_chunk_stream_remaining(const ur_zarr_chunk_stream *s)
{
    return s->total - s->pos;
}

int ur_zarr_chunk_stream_is_incremental(const ur_zarr_chunk_stream *s)
{
    return s->mode != MODE_WHOLE;
}

void ur_zarr_chunk_stream_close(ur_zarr_chunk_stream *s)
{
    if (s == NULL) {
        return;
    }
    if (s->comp != NULL) {
        s->comp->stream_close(s->dec);
    }
    ur_free(s->piece);
    ur_free(s->whole);
    ur_free(s);
}

/* ---- the stored bytes, piece by piece ------------------------------------------------------ */

static int check_crc(const ur_zarr_chunk_stream *s, ur_err *err)
{
    if (s->crc != s->crc_want) {
        return ur_err_set_at(err, UR_ECORRUPT, s->src_off + s->src_len,
                             "crc32c codec: checksum 0x%08x, expected 0x%08x", s->crc,
                             s->crc_want);
    }
    return UR_OK;
}

/* Read the next piece of the data, when the current one is used up and data remains. */
static int refill(ur_zarr_chunk_stream *s, ur_err *err)
{
    size_t c;
    int rc;

    if (s->in_pos < s->in_len || s->src_read == s->src_len) {
        return UR_OK;
    }
    hint_ahead(s);
    c = s->src_len - s->src_read < s->piece_size ? (size_t)(s->src_len - s->src_read)
                                                 : s->piece_size;
    if (s->piece == NULL) {
        s->piece = ur_malloc(c);
        if (s->piece == NULL) {
            return ur_err_oom(err);
        }
    }
    rc = ur_kvstore_read_range(s->kv, s->key, s->src_off + s->src_read, c, s->piece, err);
    if (rc < 0) {
        return rc;
    }
    if (s->src_read == 0 && s->comp != NULL && s->comp->stream_head != NULL) {
        rc = s->comp->stream_head(s->piece, c, s->total, err);
        if (rc < 0) {
            return rc;
        }
    }
    s->src_read += c;
    s->in_pos = 0;
    s->in_len = c;
    if (s->has_crc) {
        s->crc = ur_crc32c(s->crc, s->piece, c);
        if (s->src_read == s->src_len) {
            return check_crc(s, err);
        }
    }
    return UR_OK;
}

static int in_empty(const ur_zarr_chunk_stream *s)
{
    return s->in_pos == s->in_len && s->src_read == s->src_len;
}

static int truncated(const ur_zarr_chunk_stream *s, ur_err *err)
{
    return ur_err_set(err, UR_ECORRUPT,
                      "%s: stored data ends early, after %zu of %zu decoded bytes",
                      s->comp != NULL ? s->comp->name : "stored data", s->raw_pos, s->total);
}

/* One decompressor step into out[0, n): consumes input and/or produces output; *made gets
 * the bytes produced. Fails on bad data, and when neither happens with no input left. */
static int step(ur_zarr_chunk_stream *s, uint8_t *out, size_t n, size_t *made, ur_err *err)
{
    ur_zarr_b2b_io io;
    int rc = refill(s, err);

    *made = 0;
    if (rc < 0) {
        return rc;
    }
    int empty = in_empty(s);
    if (s->comp == NULL) {
        if (empty) {
            return truncated(s, err);
        }
        size_t c = s->in_len - s->in_pos < n ? s->in_len - s->in_pos : n;
        memcpy(out, s->piece + s->in_pos, c);
        s->in_pos += c;
        *made = c;
        return UR_OK;
    }
    memset(&io, 0, sizeof io);
    io.in = s->piece != NULL ? s->piece + s->in_pos : NULL;
    io.in_n = s->in_len - s->in_pos;
    io.in_rest = s->src_len - s->src_read;
    io.out = out;
    io.out_n = n;
    rc = s->comp->stream_step(s->dec, &io, err);
    if (rc == UR_ZARR_B2B_STARVED) {
        return truncated(s, err);
    }
    if (rc < 0) {
        return rc;
    }
    s->in_pos += io.in_used;
    *made = io.made;
    if (io.made == 0 && io.in_used == 0 && !io.ended) {
        if (empty) {
            return truncated(s, err);
        }
        return ur_err_set(err, UR_EINTERNAL, "decompressor made no progress");
    }
    return UR_OK;
}

/* After the last decoded byte: the rest of the data must decode to nothing and end a
 * frame/stream (zstd checksums and gzip trailers are checked on the way). */
static int finish(ur_zarr_chunk_stream *s, ur_err *err)
{
    uint8_t spare;
    size_t made;
    int rc;

    if (s->comp == NULL) {
        return in_empty(s) ? UR_OK : ur_err_set(err, UR_EINTERNAL, "stored bytes left over");
    }
    for (;;) {
        rc = refill(s, err);
        if (rc < 0) {
            return rc;
        }
        if (in_empty(s) && s->comp->stream_done(s->dec)) {
            return UR_OK;
        }
        rc = step(s, &spare, 1, &made, err);
        if (rc < 0) {
            return rc;
        }
        if (made) {
            return ur_err_set(err, UR_ECORRUPT, "%s: decoded data larger than %zu bytes",
                              s->comp->name, s->total);
        }
    }
}

/* Decode exactly n more bytes (stored byte order) into out. */
static int raw(ur_zarr_chunk_stream *s, uint8_t *out, size_t n, ur_err *err)
{
    size_t done = 0, made;
    int rc;

    while (done < n) {
        rc = step(s, out + done, n - done, &made, err);
        if (rc < 0) {
            return rc;
        }
        done += made;
        s->raw_pos += made;
    }
    if (s->raw_pos == s->total) {
        return finish(s, err);
    }
    return UR_OK;
}

/* ---- post-processing: byte order and edge padding ------------------------------------------ */

/* p holds the decoded elements [e0, e0 + ne) of the chunk, element-aligned. */
static void post(const ur_zarr_chunk_stream *s, uint8_t *p, size_t e0, size_t ne)
{
    const ur_zarr_info *in = s->info;
    size_t isz = s->itemsize;
    int rank = in->rank;

    if (s->big_endian) {
        ur_zarr_codec_bytes__swap(p, ne * isz, isz, s->is_complex);
    }
    if (!s->edge) {
        return;
    }
    uint64_t last = in->chunk_shape[rank - 1], vlast = s->valid[rank - 1];
    uint64_t e = e0, end = (uint64_t)e0 + ne;
    while (e < end) {
        uint64_t row = e / last, col = e % last, run = last - col, r = row;
        int row_ok = 1;
        if (run > end - e) {
            run = end - e;
        }
        for (int d = rank - 2; d >= 0; d--) {
            row_ok &= r % in->chunk_shape[d] < s->valid[d];
            r /= in->chunk_shape[d];
        }
        uint8_t *q = p + (size_t)(e - e0) * isz;
        if (!row_ok) {
            ur_zarr_chunk_grid__fill(q, run, s->fill, isz);
        } else if (col + run > vlast) {
            uint64_t from = col > vlast ? col : vlast;
            ur_zarr_chunk_grid__fill(q + (size_t)(from - col) * isz, col + run - from, s->fill,
                                     isz);
        }
        e += run;
    }
}

/* ---- reading ------------------------------------------------------------------------------- */

static void read_fill(ur_zarr_chunk_stream *s, uint8_t *dst, size_t n)
{
    size_t isz = s->itemsize, done = n < isz ? n : isz;

    for (size_t i = 0; i < done; i++) {
        dst[i] = s->fill[(s->pos + i) % isz];
    }
    /* dst[i] = dst[i - k * isz]: double the pattern in place. */
    while (done < n) {
        size_t c = done < n - done ? done : n - done;
        memcpy(dst + done, dst, c);
        done += c;
    }
}

static int read_incr(ur_zarr_chunk_stream *s, uint8_t *dst, size_t n, ur_err *err)
{
    size_t isz = s->itemsize, left = n, c;
    int rc;

    if (s->part_off < isz) {
        c = isz - s->part_off < left ? isz - s->part_off : left;
        memcpy(dst, s->part + s->part_off, c);
        s->part_off += c;
        s->pos += c;
        dst += c;
        left -= c;
    }
    c = left / isz * isz;
    if (c > 0) {
        rc = raw(s, dst, c, err);
        if (rc < 0) {
            return rc;
        }
        post(s, dst, s->pos / isz, c / isz);
        s->pos += c;
        dst += c;
        left -= c;
    }
    if (left > 0) {
        rc = raw(s, s->part, isz, err);
        if (rc < 0) {
            return rc;
        }
        post(s, s->part, s->pos / isz, 1);
        memcpy(dst, s->part, left);
        s->part_off = left;
        s->pos += left;
    }
    return UR_OK;
}

int ur_zarr_chunk_stream_read(ur_zarr_chunk_stream *s, void *dst, size_t n, ur_err *err)
{
    ur_err local;
    int rc = UR_OK;

    if (s->failed) {
        if (err != NULL) {
            *err = s->saved;
        }
        return s->saved.code;
    }
    if (n > s->total - s->pos) {
        return ur_err_set(err, UR_EINVAL,
                          "zarr array '%s': reading %zu bytes of a chunk stream with %zu left",
                          ur_zarr_array_prefix(s->arr), n, s->total - s->pos);
    }
    if (n == 0) {
        return UR_OK;
    }
    switch (s->mode) {
    case MODE_FILL:
        read_fill(s, dst, n);
        s->pos += n;
        break;
    case MODE_WHOLE:
        memcpy(dst, s->whole + s->pos, n);
        s->pos += n;
        break;
    default:
        ur_err_clear(&local);
        rc = read_incr(s, dst, n, &local);
        if (rc < 0) {
            ur_err_set_where(&local, s->key);
            ur_err_wrap(&local, "zarr array '%s' chunk '%s'", ur_zarr_array_prefix(s->arr),
                        s->key);
            s->saved = local;
            s->failed = 1;
            if (err != NULL) {
                *err = local;
            }
        }
        break;
    }
    return rc;
}
