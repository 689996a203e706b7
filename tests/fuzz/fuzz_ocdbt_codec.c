/* Fuzz target: the OCDBT object envelope (magic, length, version, compression, CRC-32C) and its
 * zstd payload, as read from disk: nothing is fixed up. The first byte picks which magic is
 * expected; the rest is the object. Decoding then re-encoding and decoding again gives the
 * same body. */
#include "fuzz_common.h"

#include "kvstore/ocdbt/ocdbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint32_t magics[3] = {UR_OCDBT_MAGIC_MANIFEST, UR_OCDBT_MAGIC_BTREE,
                                       UR_OCDBT_MAGIC_VERSION_NODE};
    ur_buf body, obj, body2;
    ur_err err;
    uint32_t magic;
    int compressed = -1, rc;

    if (size < 1) {
        return 0;
    }
    magic = magics[data[0] % 3];
    ur_err_clear(&err);
    ur_buf_init(&body, 0);
    ur_buf_init(&obj, 0);
    ur_buf_init(&body2, 0);
    rc = ur_ocdbt_codec_decode(&body, data + 1, size - 1, magic, "object", &compressed, &err);
    fz_check_err(rc, &err);
    if (rc == UR_OK) {
        fz_check(compressed == 0 || compressed == 1);
        fz_check(body.len <= UR_OCDBT_MAX_DECODED);
        if (compressed == 0) {
            fz_check(body.len <= size - 1 - 14 - 4);
        }
        fz_check(ur_ocdbt_codec_encode(&obj, magic, body.data, body.len, compressed, 0, &err) ==
                 UR_OK);
        fz_check(ur_ocdbt_codec_decode(&body2, obj.data, obj.len, magic, "object", NULL, &err) ==
                 UR_OK);
        fz_check(body2.len == body.len &&
                 (body.len == 0 || memcmp(body.data, body2.data, body.len) == 0));
    }
    ur_buf_dispose(&body);
    ur_buf_dispose(&obj);
    ur_buf_dispose(&body2);
    return 0;
}
