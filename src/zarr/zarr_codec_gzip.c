/* gzip and zlib (RFC 1952 / RFC 1950 framing of deflate): zarr3 codec
 * {"name":"gzip","configuration":{"level":L}}, zarr2 compressors {"id":"gzip"} and
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

unsigned ur_zarr_codec_gzip__clamp(size_t n)
{
    return n > UINT_MAX ? UINT_MAX : (uInt)n;
}

void ur_zarr_codec_gzip__prepare(z_stream *z)
{
    memset(z, 0, sizeof *z);
    z->zalloc = zalloc;
    z->zfree = zfree;
}

int ur_zarr_codec_gzip__decode(int gzip, const uint8_t *src, size_t n, uint8_t *dst, size_t cap,
                               size_t *len_out, ur_err *err)
{
    const char *what = gzip ? "gzip" : "zlib";
    z_stream z;
    size_t in_left = n, out_left = cap;
    int zr, rc = UR_OK;
    uint8_t spare;

    ur_zarr_codec_gzip__prepare(&z);
    zr = inflateInit2(&z, gzip ? 15 + 16 : 15);
    if (zr != Z_OK) {
        return zr == Z_MEM_ERROR ? ur_err_oom(err) : ur_err_set(err, UR_EINTERNAL, "inflateInit");
    }
    z.next_in = (Bytef *)(uintptr_t)src; /* zlib's API is not const-correct */
    z.next_out = dst;
    for (;;) {
        z.avail_in = ur_zarr_codec_gzip__clamp(in_left);
        z.avail_out = ur_zarr_codec_gzip__clamp(out_left);
        if (out_left == 0) {
            /* Full: any further output means the data is larger than expected. */
            z.next_out = &spare;
            z.avail_out = 1;
        }
        uInt ai = z.avail_in, ao = z.avail_out;
        zr = inflate(&z, Z_NO_FLUSH);
        in_left -= ai - z.avail_in;
        if (out_left == 0 && z.avail_out == 0) {
            rc = ur_err_set(err, UR_ECORRUPT, "%s: decoded data larger than %zu bytes", what,
                            cap);
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

int ur_zarr_codec_gzip__encode(int gzip, const uint8_t *src, size_t n, int level, ur_buf *out,
                               ur_err *err)
{
    z_stream z;
    size_t in_left = n;
    int zr, rc;

    ur_zarr_codec_gzip__prepare(&z);
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
        z.avail_in = ur_zarr_codec_gzip__clamp(in_left);
        z.next_out = out->data + out->len;
        z.avail_out = ur_zarr_codec_gzip__clamp(out->cap - out->len - 1);
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
