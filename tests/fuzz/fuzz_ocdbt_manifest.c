/* Fuzz target: OCDBT manifest. Input starting with the manifest magic is a whole object (its
 * length and CRC are fixed up, then envelope + zstd + body decode); anything else is a manifest
 * body. A manifest that decodes and re-encodes must decode again to the same bytes. */
#include "fuzz_common.h"

#include "kvstore/ocdbt/ocdbt_format.h"

static void roundtrip(const ur_ocdbt_manifest *m)
{
    ur_buf a, b;
    ur_ocdbt_manifest m2;
    ur_err err;
    ur_buf_init(&a, 0);
    ur_buf_init(&b, 0);
    if (ur_ocdbt_manifest_encode(&a, m, &err) == UR_OK) {
        memset(&m2, 0, sizeof m2);
        fz_check(ur_ocdbt_manifest_decode(&m2, a.data, a.len, &err) == UR_OK);
        fz_check(ur_ocdbt_manifest_encode(&b, &m2, &err) == UR_OK);
        fz_check(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        ur_ocdbt_manifest_dispose(&m2);
    }
    ur_buf_dispose(&a);
    ur_buf_dispose(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_ocdbt_manifest m;
    ur_buf body;
    ur_err err;
    int rc;

    memset(&m, 0, sizeof m);
    ur_err_clear(&err);
    ur_buf_init(&body, 0);
    if (fz_has_magic(data, size, UR_OCDBT_MAGIC_MANIFEST)) {
        uint8_t *obj = fz_envelope_fixup(data, size, UR_OCDBT_MAGIC_MANIFEST);
        if (obj == NULL) {
            return 0;
        }
        rc = ur_ocdbt_codec_decode(&body, obj, size, UR_OCDBT_MAGIC_MANIFEST, "manifest", NULL,
                                   &err);
        free(obj);
    } else {
        rc = ur_buf_append(&body, data, size, &err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_manifest_decode(&m, body.data, body.len, &err);
        if (rc == UR_OK) {
            roundtrip(&m);
            ur_ocdbt_manifest_dispose(&m);
        }
    }
    fz_check_err(rc, &err);
    ur_buf_dispose(&body);
    return 0;
}
