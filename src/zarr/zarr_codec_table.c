/* The bytes->bytes codec table: every codec the zarr layer knows, one row each. A codec that
 * is not here is unsupported, by construction (zarr_impl.h, "bytes->bytes codecs"). */
#include "zarr_impl.h"

#include <string.h>

static const ur_zarr_b2b_codec *const table[] = {
    &ur_zarr_codec_zstd__entry,
    &ur_zarr_codec_gzip__entry,
    &ur_zarr_codec_zlib__entry,
    &ur_zarr_codec_crc32c__entry,
};

#define N_CODECS (sizeof table / sizeof table[0])

const ur_zarr_b2b_codec *ur_zarr_codec__b2b(ur_zarr_b2b_kind kind)
{
    for (size_t i = 0; i < N_CODECS; i++) {
        if (table[i]->kind == kind) {
            return table[i];
        }
    }
    return NULL;
}

const ur_zarr_b2b_codec *ur_zarr_codec__b2b_v3(const char *name)
{
    for (size_t i = 0; i < N_CODECS; i++) {
        if (table[i]->v3_name != NULL && strcmp(table[i]->v3_name, name) == 0) {
            return table[i];
        }
    }
    return NULL;
}

const ur_zarr_b2b_codec *ur_zarr_codec__b2b_v2(const char *id)
{
    for (size_t i = 0; i < N_CODECS; i++) {
        if (table[i]->v2_id != NULL && strcmp(table[i]->v2_id, id) == 0) {
            return table[i];
        }
    }
    return NULL;
}

int ur_zarr_codec__b2b_get(const ur_zarr_b2b *b, const ur_zarr_b2b_codec **out, ur_err *err)
{
    const ur_zarr_b2b_codec *k = ur_zarr_codec__b2b(b->kind);
    if (k == NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED, "unsupported bytes->bytes codec (kind %d)",
                          (int)b->kind);
    }
    *out = k;
    return UR_OK;
}
