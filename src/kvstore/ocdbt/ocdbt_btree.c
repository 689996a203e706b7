/* B+tree node (spec §6): envelope magic 0x0cdb20de, then the body:
 *
 *   height               u8          0 = leaf
 *   data-file table      transitive path = base path of the file holding the node
 *   num_entries          varint32    1 .. 2^20
 *   leaf (height 0), column-wise:
 *     key_prefix_length varint16 x (n-1) | key_suffix_length varint16 x n | key suffixes |
 *     value_length varint64 x n | value_kind u8 x n (0 inline, 1 indirect) |
 *     data_file_id, offset varint64 per indirect entry | inline values, concatenated
 *   interior:
 *     key_prefix_length x (n-1) | key_suffix_length x n | subtree_common_prefix_length x n |
 *     key suffixes | data_file_id, offset, length x n | num_keys, num_tree_bytes,
 *     num_indirect_value_bytes x n
 *
 * Keys are relative to the node's implicit prefix and prefix-compressed against the previous
 * key; they must be strictly increasing. TensorStore: format/btree.cc.
 *
 * A decoded node keeps its keys, its entries and its inline values, not the body: Orbax
 * writes a checkpoint's whole tree as one node, in which every array of a shape repeats the
 * same zarr.json (100,000 such arrays: 49 MB of copies of one 490-byte value). */
#include "ocdbt_format.h"

#include "unroll/alloc.h"
#include "unroll/strmap.h"

#include <string.h>

void ur_ocdbt_btree_dispose(ur_ocdbt_btree_node *node)
{
    if (node == NULL) {
        return;
    }
    ur_ocdbt_table_dispose(&node->table);
    ur_free(node->e);
    ur_free(node->stats);
    ur_free(node->keys);
    ur_buf_dispose(&node->values);
    memset(node, 0, sizeof *node);
}

/* Read the key columns shared by leaf and interior nodes. */
static int decode_keys(ur_ocdbt_btree_node *node, ur_rd *rd, int interior, ur_err *err)
{
    size_t n = node->n, at;
    ur_buf keys;
    int rc = UR_OK;

    ur_buf_init(&keys, UR_OCDBT_MAX_DECODED);
    /* Until the key is built, key_len holds the prefix length and value_off the suffix
     * length. */
    for (size_t i = 1; i < n; i++) {
        node->e[i].key_len = ur_ocdbt_codec_varint16(rd);
    }
    for (size_t i = 0; i < n; i++) {
        node->e[i].value_off = ur_ocdbt_codec_varint16(rd);
    }
    if (interior) {
        for (size_t i = 0; i < n; i++) {
            node->e[i].subtree_prefix_len = ur_ocdbt_codec_varint16(rd);
        }
    }
    if (rd->failed) {
        rc = ur_rd_check(rd, "btree node keys", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        size_t prefix = i == 0 ? 0 : node->e[i].key_len;
        size_t suffix = node->e[i].value_off, prev_len = i == 0 ? 0 : node->e[i - 1].key_len;
        size_t prev_off = i == 0 ? 0 : node->e[i - 1].key_off;
        const uint8_t *sfx;
        at = rd->pos;
        if (prefix > prev_len) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at,
                               "btree node: key %zu prefix length %zu > previous key length %zu",
                               i, prefix, prev_len);
            goto out;
        }
        if (prefix + suffix > UR_OCDBT_MAX_KEY) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at, "btree node: key %zu longer than %u", i,
                               UR_OCDBT_MAX_KEY);
            goto out;
        }
        sfx = ur_rd_bytes(rd, suffix);
        if (sfx == NULL) {
            rc = ur_rd_check(rd, "btree node keys", err);
            goto out;
        }
        if (i > 0) {
            /* strictly increasing: previous key's tail after the shared prefix < suffix */
            const uint8_t *ptail = keys.data + prev_off + prefix;
            size_t plen = prev_len - prefix, m = plen < suffix ? plen : suffix;
            int c = m ? memcmp(ptail, sfx, m) : 0;
            if (c > 0 || (c == 0 && plen >= suffix)) {
                rc = ur_err_set_at(err, UR_ECORRUPT, at, "btree node: invalid key order at %zu",
                                   i);
                goto out;
            }
        }
        rc = ur_buf_reserve(&keys, prefix + suffix, err);
        if (rc < 0) {
            goto out;
        }
        if (prefix > 0) {
            memmove(keys.data + keys.len, keys.data + prev_off, prefix);
        }
        if (suffix > 0) {
            memcpy(keys.data + keys.len + prefix, sfx, suffix);
        }
        node->e[i].key_off = (uint32_t)keys.len; /* < UR_OCDBT_MAX_DECODED, keys' limit */
        node->e[i].key_len = (uint16_t)(prefix + suffix);
        keys.len += prefix + suffix;
        node->e[i].value_off = 0;
        if (interior && node->e[i].subtree_prefix_len > node->e[i].key_len) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at,
                               "btree node: subtree prefix length %u > key length %u at %zu",
                               node->e[i].subtree_prefix_len, node->e[i].key_len, i);
            goto out;
        }
    }
out:
    if (rc == UR_OK) {
        ur_buf_fit(&keys); /* grown by doubling; a node of Orbax's can hold 100 MB of keys */
        node->keys = keys.data; /* may be NULL when every key is empty */
    } else {
        ur_buf_dispose(&keys);
    }
    return rc;
}

static int decode_leaf(ur_ocdbt_btree_node *node, ur_rd *rd, ur_err *err)
{
    size_t n = node->n, at;
    int rc = decode_keys(node, rd, 0, err);
    if (rc < 0) {
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        node->e[i].value_len = ur_rd_varint64(rd);
    }
    at = rd->pos;
    for (size_t i = 0; i < n; i++) {
        node->e[i].indirect = ur_rd_u8(rd);
        if (!rd->failed && node->e[i].indirect > 1) {
            return ur_err_set_at(err, UR_ECORRUPT, at + i, "btree node: invalid value kind %u",
                                 node->e[i].indirect);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (node->e[i].indirect) {
            node->e[i].ref.file = ur_rd_varint64(rd);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (node->e[i].indirect) {
            node->e[i].ref.offset = ur_rd_varint64(rd);
            node->e[i].ref.length = node->e[i].value_len;
        }
    }
    if (rd->failed) {
        return ur_rd_check(rd, "btree leaf", err);
    }
    at = rd->pos;
    for (size_t i = 0; i < n; i++) {
        if (node->e[i].indirect) {
            rc = ur_ocdbt_ref_validate(&node->e[i].ref, node->table.n, at, err);
            if (rc < 0) {
                return rc;
            }
            continue;
        }
        if (node->e[i].value_len > UR_OCDBT_MAX_INLINE_VALUE) {
            return ur_err_set_at(err, UR_ECORRUPT, at, "btree node: inline value of %llu bytes",
                                 (unsigned long long)node->e[i].value_len);
        }
        node->e[i].value_off = (uint32_t)rd->pos; /* < UR_OCDBT_MAX_DECODED */
        if (ur_rd_bytes(rd, (size_t)node->e[i].value_len) == NULL) {
            return ur_rd_check(rd, "btree leaf values", err);
        }
    }
    return UR_OK;
}

static int decode_interior(ur_ocdbt_btree_node *node, ur_rd *rd, ur_err *err)
{
    size_t n = node->n, at;
    int rc = decode_keys(node, rd, 1, err);
    if (rc < 0) {
        return rc;
    }
    node->stats = ur_calloc(n, sizeof *node->stats);
    if (node->stats == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        node->e[i].ref.file = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        node->e[i].ref.offset = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        node->e[i].ref.length = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        node->stats[i].num_keys = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        node->stats[i].num_tree_bytes = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        node->stats[i].num_indirect_value_bytes = ur_rd_varint64(rd);
    }
    if (rd->failed) {
        return ur_rd_check(rd, "btree interior node", err);
    }
    at = rd->pos;
    for (size_t i = 0; i < n; i++) {
        rc = ur_ocdbt_ref_validate(&node->e[i].ref, node->table.n, at, err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

/* Values this long or longer are held once however many keys have them (as the writer does). */
#define SHARED_VALUE_MIN 64

/* Copy the inline values out of `body` into node->values (value_off then points there), each
 * distinct one of SHARED_VALUE_MIN bytes or more once. Two passes: the first numbers the
 * distinct values in order, so the buffer is allocated once at its size and a value is copied
 * when its offset is the buffer's end. */
static int keep_values(ur_ocdbt_btree_node *node, const uint8_t *body, ur_err *err)
{
    ur_strmap seen;
    size_t total = 0, at;
    int rc = UR_OK;

    ur_strmap_init(&seen);
    for (size_t i = 0; i < node->n && node->height == 0; i++) {
        const ur_ocdbt_btree_entry *e = &node->e[i];
        if (e->indirect) {
            continue;
        }
        if (e->value_len >= SHARED_VALUE_MIN) {
            rc = ur_strmap_put(&seen, (const char *)body + e->value_off, (size_t)e->value_len,
                               total, NULL, err);
            if (rc < 0) {
                goto out;
            }
            if (rc == 1) {
                continue; /* seen before */
            }
        }
        total += (size_t)e->value_len; /* <= the body's length: no overflow */
    }
    rc = total > 0 ? ur_buf_reserve_exact(&node->values, total, err) : UR_OK;
    for (size_t i = 0; i < node->n && node->height == 0 && rc == UR_OK; i++) {
        ur_ocdbt_btree_entry *e = &node->e[i];
        const uint8_t *v = body + e->value_off;
        if (e->indirect) {
            continue;
        }
        at = node->values.len;
        if (e->value_len >= SHARED_VALUE_MIN) {
            (void)ur_strmap_get(&seen, (const char *)v, (size_t)e->value_len, &at);
        }
        if (at == node->values.len) {
            rc = ur_buf_append(&node->values, v, (size_t)e->value_len, err);
        }
        e->value_off = (uint32_t)at; /* <= the body's length */
    }
out:
    ur_strmap_dispose(&seen);
    return rc;
}

int ur_ocdbt_btree_decode(ur_ocdbt_btree_node *node, ur_buf *body, const char *transitive,
                          size_t tlen, ur_err *err)
{
    ur_buf b = *body;
    ur_rd rd;
    uint32_t num;
    size_t at;
    int rc;

    memset(node, 0, sizeof *node);
    ur_buf_init(body, 0);
    if (b.len > UINT32_MAX) { /* entries hold 32-bit offsets; readers cap a body at 1 GiB */
        rc = ur_err_set(err, UR_ECORRUPT, "btree node: body of %zu bytes", b.len);
        goto out;
    }
    ur_rd_init(&rd, b.data, b.len);
    node->height = ur_rd_u8(&rd);
    rc = ur_rd_check(&rd, "btree node", err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_table_decode(&node->table, &rd, transitive, tlen, err);
    }
    if (rc < 0) {
        goto out;
    }
    at = rd.pos;
    num = ur_rd_varint32(&rd);
    if (rd.failed) {
        rc = ur_rd_check(&rd, "btree node", err);
        goto out;
    }
    if (num == 0 || num > UR_OCDBT_MAX_NODE_ENTRIES || num > ur_rd_remaining(&rd)) {
        rc = ur_err_set_at(err, UR_ECORRUPT, at, "btree node: invalid entry count %u", num);
        goto out;
    }
    node->n = num;
    node->e = ur_calloc(node->n, sizeof *node->e);
    if (node->e == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    rc = node->height == 0 ? decode_leaf(node, &rd, err) : decode_interior(node, &rd, err);
    if (rc == UR_OK) {
        rc = ur_rd_finish(&rd, "btree node", err);
    }
    if (rc == UR_OK) {
        rc = keep_values(node, b.data, err);
    }
out:
    ur_buf_dispose(&b);
    if (rc < 0) {
        ur_ocdbt_btree_dispose(node);
    }
    return rc;
}

static size_t lcp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t i = 0;
    while (i < an && i < bn && a[i] == b[i]) {
        i++;
    }
    return i;
}

int ur_ocdbt_btree_encode(ur_buf *out, uint8_t height, const ur_ocdbt_table *table,
                          const ur_ocdbt_btree_enc_entry *e, size_t n, ur_err *err)
{
    int rc;

    if (n == 0 || n > UR_OCDBT_MAX_NODE_ENTRIES) {
        return ur_err_set(err, UR_EINTERNAL, "btree encode: %zu entries", n);
    }
    rc = ur_buf_append_byte(out, height, err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_table_encode(out, table, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_put_varint(out, n, err);
    }
    for (size_t i = 1; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, lcp(e[i - 1].key, e[i - 1].key_len, e[i].key, e[i].key_len),
                               err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        size_t p = i ? lcp(e[i - 1].key, e[i - 1].key_len, e[i].key, e[i].key_len) : 0;
        rc = ur_buf_put_varint(out, e[i].key_len - p, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK && height > 0; i++) {
        rc = ur_buf_put_varint(out, e[i].subtree_prefix_len, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        size_t p = i ? lcp(e[i - 1].key, e[i - 1].key_len, e[i].key, e[i].key_len) : 0;
        rc = ur_buf_append(out, e[i].key + p, e[i].key_len - p, err);
    }
    if (height == 0) {
        for (size_t i = 0; i < n && rc == UR_OK; i++) {
            rc = ur_buf_put_varint(out, e[i].value_len, err);
        }
        for (size_t i = 0; i < n && rc == UR_OK; i++) {
            rc = ur_buf_append_byte(out, e[i].indirect ? 1 : 0, err);
        }
        for (size_t i = 0; i < n && rc == UR_OK; i++) {
            rc = e[i].indirect ? ur_buf_put_varint(out, e[i].ref.file, err) : UR_OK;
        }
        for (size_t i = 0; i < n && rc == UR_OK; i++) {
            rc = e[i].indirect ? ur_buf_put_varint(out, e[i].ref.offset, err) : UR_OK;
        }
        for (size_t i = 0; i < n && rc == UR_OK; i++) {
            rc = e[i].indirect ? UR_OK
                               : ur_buf_append(out, e[i].value, (size_t)e[i].value_len, err);
        }
        return rc;
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, e[i].ref.file, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, e[i].ref.offset, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, e[i].ref.length, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, e[i].stats.num_keys, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, e[i].stats.num_tree_bytes, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, e[i].stats.num_indirect_value_bytes, err);
    }
    return rc;
}
