/* Fuzz target: OCDBT B+tree node. Input starting with the B+tree magic is a whole object
 * (length and CRC fixed up); anything else is a node body. Every decoded entry's key and
 * inline value must lie inside the node's buffers. */
#include "fuzz_common.h"

#include "kvstore/ocdbt/ocdbt_format.h"

static void check_node(const ur_ocdbt_btree_node *node)
{
    size_t keys_len = 0;
    for (size_t i = 0; i < node->n; i++) {
        const ur_ocdbt_btree_entry *e = &node->e[i];
        fz_check(e->key_off == keys_len);
        keys_len += e->key_len;
        if (node->height == 0 && !e->indirect) {
            fz_check(e->value_off <= node->values.len);
            fz_check(e->value_len <= node->values.len - e->value_off);
        }
        if (node->height > 0 || e->indirect) {
            fz_check(e->ref.file < node->table.n);
        }
    }
    if (keys_len > 0) {
        volatile uint8_t sink = node->keys[keys_len - 1];
        (void)sink;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ur_ocdbt_btree_node node;
    ur_buf body;
    ur_err err;
    int rc;

    memset(&node, 0, sizeof node);
    ur_err_clear(&err);
    ur_buf_init(&body, 0);
    if (fz_has_magic(data, size, UR_OCDBT_MAGIC_BTREE)) {
        uint8_t *obj = fz_envelope_fixup(data, size, UR_OCDBT_MAGIC_BTREE);
        if (obj == NULL) {
            return 0;
        }
        rc = ur_ocdbt_codec_decode(&body, obj, size, UR_OCDBT_MAGIC_BTREE, "btree node", NULL,
                                   &err);
        free(obj);
    } else {
        rc = ur_buf_append(&body, data, size, &err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_btree_decode(&node, &body, "d/", 2, &err);
        if (rc == UR_OK) {
            check_node(&node);
            ur_ocdbt_btree_dispose(&node);
        }
    }
    fz_check_err(rc, &err);
    ur_buf_dispose(&body);
    return 0;
}
