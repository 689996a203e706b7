/* gzip and zlib (RFC 1952 / RFC 1950 framing of deflate): two entries of the codec table,
 * zarr3 codec {"name":"gzip","configuration":{"level":L}}, zarr2 compressors {"id":"gzip"} and
 * {"id":"zlib"}. Decoding is capped at the size the metadata implies; zlib's memory goes
 * through ur_malloc. */
#include "zarr_impl.h"

#include "unroll/alloc.h"

#include <limits.h>
#include <string.h>
#include <zlib.h>

static voidpf zalloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return ur_calloc(items, size);
}

static void zfree(voidpf opaque, voidpf p)
{
    (void)opaque;
    ur_free(p);
}

static unsigned clamp(size_t n)
{
    return n > UINT_MAX ? UINT_MAX : (uInt)n;
}

static void prepare(z_stream *z)
{
    memset(z, 0, sizeof *z);
    z->zalloc = zalloc;
    z->zfree = zfree;
}

static int inflate_capped(int gzip, const uint8_t *src, size_t n, uint8_t *dst, size_t cap,
                          size_t *len_out, ur_err *err)
{
    const char *what = gzip ? "gzip" : "zlib";
    z_stream z;
    size_t in_left = n, out_left = cap;
    int zr, rc = UR_OK;
    uint8_t spare;

    prepare(&z);
    zr = inflateInit2(&z, gzip ? 15 + 16 : 15);
    if (zr != Z_OK) {
        return zr == Z_MEM_ERROR ? ur_err_oom(err) : ur_err_set(err, UR_EINTERNAL, "inflateInit");
    }
    z.next_in = (Bytef *)(uintptr_t)src; /* zlib's API is not const-correct */
    z.next_out = dst;
    for (;;) {
        z.avail_in = clamp(in_left);
        z.avail_out = clamp(out_left);
        if (out_left == 0) {
            /* Full: any further output means the data is larger than expected. */
            z.next_out = &spare;
            z.avail_out = 1;
        }
        uInt ai = z.avail_in, ao = z.avail_out;
        zr = inflate(&z, Z_NO_FLUSH);
        in_left -= ai - z.avail_in;
        if (out_left == 0 && z.avail_out == 0) {
            rc = ur_err_set(err, UR_ECORRUPT, "%s: decoded data larger than %zu bytes", what, cap);
            break;
        }
        if (out_left != 0) {
            out_left -= ao - z.avail_out;
        }
        if (zr == Z_STREAM_END) {
            /* gzip allows several members one after another. */
            if (gzip && in_left > 0) {
                zr = inflateReset(&z);
                if (zr == Z_OK) {
                    continue;
                }
            }
            if (in_left > 0) {
                rc = ur_err_set(err, UR_ECORRUPT, "%s: %zu bytes after the end of the stream",
                                what, in_left);
            }
            break;
        }
        if (zr == Z_MEM_ERROR) {
            rc = ur_err_oom(err);
            break;
        }
        if (zr != Z_OK && !(zr == Z_BUF_ERROR && in_left > 0)) {
            rc = ur_err_set(err, UR_ECORRUPT, "%s: %s", what,
                            zr == Z_BUF_ERROR ? "truncated stream" : (z.msg ? z.msg : "bad data"));
            break;
        }
    }
    inflateEnd(&z);
    if (rc == UR_OK) {
        *len_out = cap - out_left;
    }
    return rc;
}

static int deflate_all(int gzip, const uint8_t *src, size_t n, int level, ur_buf *out, ur_err *err)
{
    z_stream z;
    size_t in_left = n;
    int zr, rc;

    prepare(&z);
    zr = deflateInit2(&z, level, Z_DEFLATED, gzip ? 15 + 16 : 15, 8, Z_DEFAULT_STRATEGY);
    if (zr != Z_OK) {
        return zr == Z_MEM_ERROR ? ur_err_oom(err)
                                 : ur_err_set(err, UR_EINVAL, "deflateInit: level %d", level);
    }
    z.next_in = (Bytef *)(uintptr_t)src;
    do {
        rc = ur_buf_reserve(out, 1 << 16, err);
        if (rc < 0) {
            break;
        }
        z.avail_in = clamp(in_left);
        z.next_out = out->data + out->len;
        z.avail_out = clamp(out->cap - out->len - 1);
        uInt ai = z.avail_in, ao = z.avail_out;
        zr = deflate(&z, in_left == ai ? Z_FINISH : Z_NO_FLUSH);
        in_left -= ai - z.avail_in;
        out->len += ao - z.avail_out;
        if (zr == Z_STREAM_ERROR) {
            rc = ur_err_set(err, UR_EINTERNAL, "deflate failed");
            break;
        }
    } while (zr != Z_STREAM_END);
    deflateEnd(&z);
    return rc;
}

static int gzip_decode(const ur_zarr_b2b *b, const uint8_t *src, size_t n, uint8_t *dst,
                       size_t cap, size_t *len_out, ur_err *err)
{
    (void)b;
    return inflate_capped(1, src, n, dst, cap, len_out, err);
}

static int zlib_decode(const ur_zarr_b2b *b, const uint8_t *src, size_t n, uint8_t *dst,
                       size_t cap, size_t *len_out, ur_err *err)
{
    (void)b;
    return inflate_capped(0, src, n, dst, cap, len_out, err);
}

static int gzip_encode(const ur_zarr_b2b *b, const uint8_t *src, size_t n, ur_buf *out,
                       ur_err *err)
{
    return deflate_all(1, src, n, b->level, out, err);
}

static int zlib_encode(const ur_zarr_b2b *b, const uint8_t *src, size_t n, ur_buf *out,
                       ur_err *err)
{
    return deflate_all(0, src, n, b->level, out, err);
}

/* ---- streaming decoder (zarr_stream.c) ----------------------------------------------------- */

struct ur_zarr_b2b_stream {
    z_stream z;
    int gzip;
    int ended; /* the stream (gzip: the member) has ended */
};

static int stream_open(ur_zarr_b2b_stream **out, int gzip, ur_err *err)
{
    ur_zarr_b2b_stream *s = ur_calloc(1, sizeof *s);
    int zr;
    if (s == NULL) {
        return ur_err_oom(err);
    }
    prepare(&s->z);
    s->gzip = gzip;
    zr = inflateInit2(&s->z, gzip ? 15 + 16 : 15);
    if (zr != Z_OK) {
        ur_free(s);
        return zr == Z_MEM_ERROR ? ur_err_oom(err) : ur_err_set(err, UR_EINTERNAL, "inflateInit");
    }
    *out = s;
    return UR_OK;
}

static int gzip_stream_open(ur_zarr_b2b_stream **out, const ur_zarr_b2b *b, ur_err *err)
{
    (void)b;
    return stream_open(out, 1, err);
}

static int zlib_stream_open(ur_zarr_b2b_stream **out, const ur_zarr_b2b *b, ur_err *err)
{
    (void)b;
    return stream_open(out, 0, err);
}

static int stream_step(ur_zarr_b2b_stream *s, ur_zarr_b2b_io *io, ur_err *err)
{
    const char *what = s->gzip ? "gzip" : "zlib";
    int zr;

    if (s->ended) {
        if (io->in_n == 0 && io->in_rest == 0) {
            return UR_ZARR_B2B_STARVED;
        }
        if (!s->gzip) {
            return ur_err_set(err, UR_ECORRUPT, "zlib: %llu bytes after the end of the stream",
                              (unsigned long long)io->in_n + io->in_rest);
        }
        /* gzip allows several members one after another. */
        if (inflateReset(&s->z) != Z_OK) {
            return ur_err_set(err, UR_EINTERNAL, "inflateReset");
        }
        s->ended = 0;
    }
    s->z.next_in = (Bytef *)(uintptr_t)io->in; /* zlib's API is not const-correct */
    s->z.avail_in = clamp(io->in_n);
    s->z.next_out = io->out;
    s->z.avail_out = clamp(io->out_n);
    uInt ai = s->z.avail_in, ao = s->z.avail_out;
    zr = inflate(&s->z, Z_NO_FLUSH);
    io->in_used = ai - s->z.avail_in;
    io->made = ao - s->z.avail_out;
    if (zr == Z_STREAM_END) {
        s->ended = 1;
        io->ended = 1;
    } else if (zr == Z_MEM_ERROR) {
        return ur_err_oom(err);
    } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
        return ur_err_set(err, UR_ECORRUPT, "%s: %s", what, s->z.msg ? s->z.msg : "bad data");
    }
    return UR_OK;
}

static int stream_done(const ur_zarr_b2b_stream *s)
{
    return s->ended;
}

static void stream_close(ur_zarr_b2b_stream *s)
{
    if (s != NULL) {
        inflateEnd(&s->z);
        ur_free(s);
    }
}

/* zarr3 "gzip" and zarr2 "gzip": gzip framing. */
const ur_zarr_b2b_codec ur_zarr_codec_gzip__entry = {
    .kind = UR_ZARR_B2B_GZIP,
    .name = "gzip",
    .v3_name = "gzip",
    .v2_id = "gzip",
    .has_level = 1,
    .level_v3 = 6,
    .level_v2 = 1,
    .level_min = 0,
    .level_max = 9,
    .decode = gzip_decode,
    .encode = gzip_encode,
    .stream_open = gzip_stream_open,
    .stream_step = stream_step,
    .stream_done = stream_done,
    .stream_close = stream_close,
};

/* zarr2 "zlib": zlib framing (no zarr3 form). */
const ur_zarr_b2b_codec ur_zarr_codec_zlib__entry = {
    .kind = UR_ZARR_B2B_ZLIB,
    .name = "zlib",
    .v2_id = "zlib",
    .has_level = 1,
    .level_v3 = 6,
    .level_v2 = 1,
    .level_min = 0,
    .level_max = 9,
    .decode = zlib_decode,
    .encode = zlib_encode,
    .stream_open = zlib_stream_open,
    .stream_step = stream_step,
    .stream_done = stream_done,
    .stream_close = stream_close,
};
