/* Manifest config (spec §4.2):
 *
 *   uuid                      16 bytes
 *   manifest_kind             u8        0 single | 1 numbered
 *   max_inline_value_bytes    varint32
 *   max_decoded_node_bytes    varint32
 *   version_tree_arity_log2   u8        1..16
 *   compression_method        varint32  0 none | 1 zstd
 *   zstd_level                i32le     only when method = 1; [-131072, 22]
 *
 * TensorStore: format/config_codec.h. */
#include "ocdbt_format.h"

#include <string.h>

void ur_ocdbt_config_init_default(ur_ocdbt_config *c)
{
    memset(c, 0, sizeof *c);
    c->max_inline_value_bytes = 100;
    c->max_decoded_node_bytes = 8388608;
    c->version_tree_arity_log2 = 4;
    c->compression = 1;
}

int ur_ocdbt_config_decode(ur_ocdbt_config *c, ur_rd *rd, ur_err *err)
{
    const uint8_t *uuid = ur_rd_bytes(rd, 16);
    size_t at;

    if (uuid != NULL) {
        memcpy(c->uuid, uuid, 16);
    }
    at = rd->pos;
    c->manifest_kind = ur_rd_u8(rd);
    if (!rd->failed && c->manifest_kind > 1) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "config: invalid manifest_kind %u",
                             c->manifest_kind);
    }
    c->max_inline_value_bytes = ur_rd_varint32(rd);
    c->max_decoded_node_bytes = ur_rd_varint32(rd);
    at = rd->pos;
    c->version_tree_arity_log2 = ur_rd_u8(rd);
    if (!rd->failed && (c->version_tree_arity_log2 < 1 || c->version_tree_arity_log2 > 16)) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "config: invalid version_tree_arity_log2 %u",
                             c->version_tree_arity_log2);
    }
    at = rd->pos;
    c->compression = ur_rd_varint32(rd);
    c->zstd_level = 0;
    if (!rd->failed && c->compression > 1) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "config: unknown compression method %u",
                             c->compression);
    }
    if (!rd->failed && c->compression == 1) {
        at = rd->pos;
        c->zstd_level = (int32_t)ur_rd_u32le(rd);
        if (!rd->failed && (c->zstd_level < -131072 || c->zstd_level > 22)) {
            return ur_err_set_at(err, UR_ECORRUPT, at, "config: zstd level %d out of range",
                                 (int)c->zstd_level);
        }
    }
    return ur_rd_check(rd, "config", err);
}

int ur_ocdbt_config_encode(ur_buf *out, const ur_ocdbt_config *c, ur_err *err)
{
    int rc = ur_buf_append(out, c->uuid, 16, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, c->manifest_kind, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_put_varint(out, c->max_inline_value_bytes, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_put_varint(out, c->max_decoded_node_bytes, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, c->version_tree_arity_log2, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_put_varint(out, c->compression, err);
    }
    if (rc == UR_OK && c->compression == 1) {
        rc = ur_buf_put_u32le(out, (uint32_t)c->zstd_level, err);
    }
    return rc;
}
