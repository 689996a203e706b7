/* Fuzz target: OCDBT version-tree node. Input starting with the version-node magic is a whole
 * object (length and CRC fixed up); anything else is a node body. The transitive path of the
 * node's data file is "d/" (as for a node read from `d/<name>`). */
#include "fuzz_common.h"

#include "kvstore/ocdbt/ocdbt_format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_ocdbt_version_node node;
    ur_buf body, again;
    ur_err err;
    int rc;

    memset(&node, 0, sizeof node);
    ur_err_clear(&err);
    ur_buf_init(&body, 0);
    ur_buf_init(&again, 0);
    if (fz_has_magic(data, size, UR_OCDBT_MAGIC_VERSION_NODE)) {
        uint8_t *obj = fz_envelope_fixup(data, size, UR_OCDBT_MAGIC_VERSION_NODE);
        if (obj == NULL) {
            return 0;
        }
        rc = ur_ocdbt_codec_decode(&body, obj, size, UR_OCDBT_MAGIC_VERSION_NODE, "version node",
                                   NULL, &err);
        free(obj);
    } else {
        rc = ur_buf_append(&body, data, size, &err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_version_node_decode(&node, body.data, body.len, "d/", 2, &err);
        if (rc == UR_OK) {
            fz_check(node.height == 0 ? node.children == NULL : node.versions == NULL);
            (void)ur_ocdbt_version_node_encode(&again, &node, &err);
            ur_ocdbt_version_node_dispose(&node);
        }
    }
    fz_check_err(rc, &err);
    ur_buf_dispose(&body);
    ur_buf_dispose(&again);
    return 0;
}
