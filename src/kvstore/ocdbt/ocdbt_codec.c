/* The envelope shared by manifests, B+tree nodes and version-tree nodes (spec §2):
 *
 *   offset 0   u32be  magic          0x0cdb3a2a manifest | 0x0cdb20de btree | 0x0cdb1234 vnode
 *   offset 4   u64le  length L       the whole object, header and CRC included
 *   offset 12  varint version        0 (written as one byte)
 *   offset 13  varint compression    0 raw | 1 one zstd frame (written as one byte)
 *   ...        payload               body, raw or compressed
 *   L-4        u32le  crc32c         CRC-32C of bytes [0, L-4)
 *
 * TensorStore: tensorstore/kvstore/ocdbt/format/codec_util.cc. */
#include "ocdbt_format.h"

#include "unroll/crc32c.h"

#include <string.h>
#include <zstd.h>

uint16_t ur_ocdbt_codec_varint16(ur_rd *rd)
{
    size_t at = rd->pos;
    uint32_t v = ur_rd_varint32(rd);
    if (v > 0xffffU) {
        rd->pos = at;
        ur_rd_fail(rd);
        return 0;
    }
    return (uint16_t)v;
}

/* The payload p[0..n) at offset `at` of the object must be exactly one zstd frame. */
static int check_frame(const uint8_t *p, size_t n, size_t at, const char *what, ur_err *err)
{
    static const uint8_t zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};
    size_t frame;

    if (n < 4 || memcmp(p, zstd_magic, 4) != 0) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "%s: payload is not a zstd frame", what);
    }
    frame = ZSTD_findFrameCompressedSize(p, n);
    if (ZSTD_isError(frame)) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "%s: invalid zstd frame: %s", what,
                             ZSTD_getErrorName(frame));
    }
    if (frame != n) {
        return ur_err_set_at(err, UR_ECORRUPT, at + frame,
                             "%s: %zu bytes after the zstd frame (exactly one frame expected)",
                             what, n - frame);
    }
    return UR_OK;
}

static int decompress(ur_buf *body, const uint8_t *p, size_t n, size_t at, const char *what,
                      ur_err *err)
{
    size_t rc;
    ZSTD_DCtx *dctx = NULL;
    ZSTD_inBuffer in = {p, n, 0};
    int ret = check_frame(p, n, at, what, err);

    if (ret < 0) {
        return ret;
    }
    /* The size the frame declares (TensorStore's frames do): reserved exactly, where growing
     * by doubling would hold up to twice a large node. Only a hint, taken when plausible
     * (a corrupt header must not make a small object claim a gigabyte up front): the loop
     * below still bounds what is written. */
    unsigned long long declared = ZSTD_getFrameContentSize(p, n);
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != ZSTD_CONTENTSIZE_ERROR &&
        declared <= UR_OCDBT_MAX_DECODED - body->len && declared / 256 <= n) {
        int r = ur_buf_reserve_exact(body, (size_t)declared, err);
        if (r < 0) {
            return r;
        }
    }
    dctx = ZSTD_createDCtx();
    if (dctx == NULL) {
        return ur_err_oom(err);
    }
    for (;;) {
        ZSTD_outBuffer o;
        size_t room = body->cap - body->len;
        if (room < 4096) {
            size_t want = body->len < 65536 ? 65536 : body->len;
            if (body->len + want > UR_OCDBT_MAX_DECODED) {
                want = UR_OCDBT_MAX_DECODED - body->len;
            }
            if (want == 0) {
                ret = ur_err_set_at(err, UR_ECORRUPT, at, "%s: decompressed body over %zu bytes",
                                    what, UR_OCDBT_MAX_DECODED);
                goto out;
            }
            ret = ur_buf_reserve(body, want, err);
            if (ret < 0) {
                goto out;
            }
            room = body->cap - body->len;
        }
        o.dst = body->data + body->len;
        o.size = room;
        o.pos = 0;
        rc = ZSTD_decompressStream(dctx, &o, &in);
        body->len += o.pos;
        if (ZSTD_isError(rc)) {
            ret = ur_err_set_at(err, UR_ECORRUPT, at + in.pos, "%s: zstd: %s", what,
                                ZSTD_getErrorName(rc));
            goto out;
        }
        if (rc == 0) {
            break; /* frame complete */
        }
        if (in.pos == in.size && o.pos < o.size) {
            ret = ur_err_set_at(err, UR_ECORRUPT, at + n, "%s: truncated zstd frame", what);
            goto out;
        }
    }
    if (in.pos != in.size) {
        ret = ur_err_set_at(err, UR_ECORRUPT, at + in.pos, "%s: bytes after the zstd frame", what);
    }
    /* Grown by doubling when the frame did not declare its size (TensorStore's do not): a
     * decoded node is kept while it is read, so up to half of it would be idle memory. */
    if (body->cap - body->len > (body->len >> 3) + 65536) {
        ur_buf_fit(body);
    }
out:
    ZSTD_freeDCtx(dctx);
    return ret;
}

/* Check the envelope of p[0..n); where its payload starts and its format (0 raw, 1 zstd). */
static int check_envelope(const uint8_t *p, size_t n, uint32_t magic, const char *what,
                          size_t *payload_out, uint32_t *format_out, ur_err *err)
{
    ur_rd rd;
    uint32_t got_magic, version, format, crc_stored, crc;
    uint64_t length;
    size_t payload_at;

    if (n < 16) {
        return ur_err_set_at(err, UR_ECORRUPT, 0, "%s: %zu bytes is too short for an object", what,
                             n);
    }
    ur_rd_init(&rd, p, n - 4);
    got_magic = ur_rd_u32be(&rd);
    if (got_magic != magic) {
        return ur_err_set_at(err, UR_ECORRUPT, 0, "%s: bad magic 0x%08x (expected 0x%08x)", what,
                             got_magic, magic);
    }
    length = ur_rd_u64le(&rd);
    if (length != n) {
        return ur_err_set_at(err, UR_ECORRUPT, 4,
                             "%s: length field %llu does not match the %zu bytes read", what,
                             (unsigned long long)length, n);
    }
    version = ur_rd_varint32(&rd);
    if (rd.failed) {
        return ur_err_set_at(err, UR_ECORRUPT, 12, "%s: bad version varint", what);
    }
    if (version != 0) {
        return ur_err_set_at(err, UR_ECORRUPT, 12, "%s: unsupported version %u", what, version);
    }
    payload_at = rd.pos;
    format = ur_rd_varint32(&rd);
    if (rd.failed) {
        return ur_err_set_at(err, UR_ECORRUPT, payload_at, "%s: bad compression varint", what);
    }
    if (format > 1) {
        return ur_err_set_at(err, UR_ECORRUPT, payload_at, "%s: unknown compression format %u",
                             what, format);
    }
    payload_at = rd.pos;
    crc_stored = (uint32_t)p[n - 4] | ((uint32_t)p[n - 3] << 8) | ((uint32_t)p[n - 2] << 16) |
                 ((uint32_t)p[n - 1] << 24);
    crc = ur_crc32c(0, p, n - 4);
    if (crc != crc_stored) {
        return ur_err_set_at(err, UR_ECORRUPT, n - 4,
                             "%s: CRC-32C mismatch (stored 0x%08x, computed 0x%08x)", what,
                             crc_stored, crc);
    }
    *payload_out = payload_at;
    *format_out = format;
    return UR_OK;
}

int ur_ocdbt_codec_decode(ur_buf *body, const uint8_t *p, size_t n, uint32_t magic,
                          const char *what, int *compressed_out, ur_err *err)
{
    size_t payload_at = 0;
    uint32_t format = 0;
    int rc;

    ur_buf_reset(body);
    rc = check_envelope(p, n, magic, what, &payload_at, &format, err);
    if (rc < 0) {
        return rc;
    }
    if (compressed_out != NULL) {
        *compressed_out = (int)format;
    }
    if (format == 0) {
        return ur_buf_append(body, p + payload_at, n - 4 - payload_at, err);
    }
    return decompress(body, p + payload_at, n - 4 - payload_at, payload_at, what, err);
}

int ur_ocdbt_codec_open_src(ur_ocdbt_body_src *src, const uint8_t *p, size_t n, uint32_t magic,
                            const char *what, int *compressed_out, ur_err *err)
{
    size_t payload_at = 0;
    uint32_t format = 0;
    int rc;

    memset(src, 0, sizeof *src);
    src->what = what;
    rc = check_envelope(p, n, magic, what, &payload_at, &format, err);
    if (rc < 0) {
        return rc;
    }
    if (compressed_out != NULL) {
        *compressed_out = (int)format;
    }
    src->p = p + payload_at;
    src->n = n - 4 - payload_at;
    src->at = payload_at;
    if (format == 0) {
        src->done = src->n == 0;
        return UR_OK;
    }
    rc = check_frame(src->p, src->n, payload_at, what, err);
    if (rc < 0) {
        return rc;
    }
    /* a hint for the pieces' buffers, taken when plausible (as in decompress) */
    unsigned long long declared = ZSTD_getFrameContentSize(src->p, src->n);
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != ZSTD_CONTENTSIZE_ERROR &&
        declared <= UR_OCDBT_MAX_DECODED && declared / 256 <= src->n) {
        src->hint = (size_t)declared;
    }
    src->dctx = ZSTD_createDCtx();
    return src->dctx != NULL ? UR_OK : ur_err_oom(err);
}

static int src_read(ur_ocdbt_body_src *src, ur_buf *out, size_t want, ur_err *err)
{
    int rc;

    if (src->done || want == 0) {
        return UR_OK;
    }
    if (src->dctx == NULL) { /* raw: the rest of the payload, up to want */
        size_t k = src->n - src->in_pos < want ? src->n - src->in_pos : want;
        rc = ur_buf_append(out, src->p + src->in_pos, k, err);
        if (rc == UR_OK) {
            src->in_pos += k;
            src->produced += k;
            src->done = src->in_pos == src->n;
        }
        return rc;
    }
    if (src->produced + want > UR_OCDBT_MAX_DECODED) {
        want = UR_OCDBT_MAX_DECODED - src->produced;
        if (want == 0) { /* the frame goes on past the cap */
            return ur_err_set_at(err, UR_ECORRUPT, src->at, "%s: decompressed body over %zu bytes",
                                 src->what, UR_OCDBT_MAX_DECODED);
        }
    }
    while (want > 0 && !src->done) {
        /* no more room than the declared size asks (one byte over, so that a frame longer
         * than it declares fails in zstd, not here) */
        size_t room = want;
        if (src->hint > 0 && src->hint >= src->produced && src->hint - src->produced < room) {
            room = src->hint - src->produced + 1;
        }
        rc = ur_buf_reserve(out, room, err);
        if (rc < 0) {
            return rc;
        }
        ZSTD_inBuffer in = {src->p, src->n, src->in_pos};
        ZSTD_outBuffer o = {out->data + out->len, room, 0};
        size_t z = ZSTD_decompressStream(src->dctx, &o, &in);
        out->len += o.pos;
        src->produced += o.pos;
        want -= o.pos;
        src->in_pos = in.pos;
        if (ZSTD_isError(z)) {
            return ur_err_set_at(err, UR_ECORRUPT, src->at + in.pos, "%s: zstd: %s", src->what,
                                 ZSTD_getErrorName(z));
        }
        if (z == 0) { /* frame complete: one frame is the whole payload (checked at open) */
            src->done = 1;
        } else if (in.pos == in.size && o.pos < o.size) {
            return ur_err_set_at(err, UR_ECORRUPT, src->at + src->n, "%s: truncated zstd frame",
                                 src->what);
        }
    }
    if (src->done && src->in_pos != src->n) {
        return ur_err_set_at(err, UR_ECORRUPT, src->at + src->in_pos,
                             "%s: bytes after the zstd frame", src->what);
    }
    return UR_OK;
}

int ur_ocdbt_codec_src_read(ur_ocdbt_body_src *src, ur_buf *out, size_t want, ur_err *err)
{
    int rc = src_read(src, out, want, err);
    src->failed |= rc < 0;
    return rc;
}

void ur_ocdbt_codec_src_dispose(ur_ocdbt_body_src *src)
{
    if (src->dctx != NULL) {
        ZSTD_freeDCtx(src->dctx);
        src->dctx = NULL;
    }
}

int ur_ocdbt_codec_encode(ur_buf *out, uint32_t magic, const uint8_t *body, size_t n, int compress,
                          int level, ur_err *err)
{
    size_t start = out->len, total;
    int rc;

    rc = ur_buf_put_u32be(out, magic, err);
    if (rc == UR_OK) {
        rc = ur_buf_put_u64le(out, 0, err); /* patched below */
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, compress ? 1 : 0, err);
    }
    if (rc < 0) {
        return rc;
    }
    if (compress) {
        size_t bound = ZSTD_compressBound(n), got;
        rc = ur_buf_reserve(out, bound, err);
        if (rc < 0) {
            return rc;
        }
        got = ZSTD_compress(out->data + out->len, bound, body, n, level);
        if (ZSTD_isError(got)) {
            return ur_err_set(err, UR_EINTERNAL, "zstd compression failed: %s",
                              ZSTD_getErrorName(got));
        }
        out->len += got;
    } else {
        rc = ur_buf_append(out, body, n, err);
        if (rc < 0) {
            return rc;
        }
    }
    total = out->len - start + 4;
    for (int i = 0; i < 8; i++) {
        out->data[start + 4 + (size_t)i] = (uint8_t)((uint64_t)total >> (8 * i));
    }
    return ur_buf_put_u32le(out, ur_crc32c(0, out->data + start, out->len - start), err);
}
