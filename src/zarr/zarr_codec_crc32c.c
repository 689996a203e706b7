/* zarr3 "crc32c" codec: the input followed by its CRC-32C as 4 little-endian bytes.
 *   [ data (n-4 bytes) | crc32c(data) u32le ] */
#include "zarr_impl.h"

#include "unroll/crc32c.h"

static int strip(const uint8_t *src, size_t n, size_t *len_out, ur_err *err)
{
    uint32_t want, got;

    if (n < 4) {
        return ur_err_set(err, UR_ECORRUPT, "crc32c codec: %zu bytes, fewer than 4", n);
    }
    want = (uint32_t)src[n - 4] | (uint32_t)src[n - 3] << 8 | (uint32_t)src[n - 2] << 16 |
           (uint32_t)src[n - 1] << 24;
    got = ur_crc32c(0, src, n - 4);
    if (want != got) {
        return ur_err_set_at(err, UR_ECORRUPT, n - 4,
                             "crc32c codec: checksum 0x%08x, expected 0x%08x", got, want);
    }
    *len_out = n - 4;
    return UR_OK;
}

static int encode(const ur_zarr_b2b *b, const uint8_t *src, size_t n, ur_buf *out, ur_err *err)
{
    int rc;
    (void)b;
    rc = ur_buf_append(out, src, n, err);
    return rc ? rc : ur_buf_put_u32le(out, ur_crc32c(0, src, n), err);
}

/* The chunk stream checks the trailer itself as the data goes by (zarr_stream.c). */
const ur_zarr_b2b_codec ur_zarr_codec_crc32c__entry = {
    .kind = UR_ZARR_B2B_CRC32C,
    .name = "crc32c",
    .v3_name = "crc32c",
    .trailer = 4,
    .strip = strip,
    .encode = encode,
};
