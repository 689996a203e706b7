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
#include "unroll/pool.h"
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
    }
    return UR_OK; /* the inline values follow: keep_values */
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
/* The first piece of a streamed body asked for: the columns before the inline values are
 * decoded from it, or from twice as much when they do not fit, and so on. */
#define FRONT_FIRST ((size_t)1 << 20)
/* Body bytes asked for at a time while the inline values are read. */
#define VALUES_PIECE ((size_t)256 << 10)

/* The body as it is read: b->data[0..len) holds body bytes [base, base + len), `pos` the next
 * one to read; src (NULL when b holds the whole body) hands out the rest. */
typedef struct {
    ur_buf *b;
    ur_ocdbt_body_src *src;
    size_t base, pos;
} body_win;

/* At least `n` unread bytes in the window, unless the body ends first (then fewer). */
static int win_need(body_win *w, size_t n, ur_err *err)
{
    size_t have = w->b->len - w->pos;
    if (have >= n || w->src == NULL || w->src->done) {
        return UR_OK;
    }
    if (w->pos > 0) { /* what was read goes: the window holds a piece, not the body */
        memmove(w->b->data, w->b->data + w->pos, have);
        w->b->len = have;
        w->base += w->pos;
        w->pos = 0;
    }
    while (w->b->len < n && !w->src->done) {
        size_t want = n - w->b->len < VALUES_PIECE ? VALUES_PIECE : n - w->b->len;
        int rc = ur_ocdbt_codec_src_read(w->src, w->b, want, err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

/* Copy the inline values, read from the window in entry order, into node->values (value_off
 * then points there), each distinct one of SHARED_VALUE_MIN bytes or more once; then the body
 * must end. The distinct values are looked up in copies of their own (`kept`), so the body
 * need not stay. */
static int keep_values(ur_ocdbt_btree_node *node, body_win *w, ur_err *err)
{
    ur_strmap seen;
    ur_pool kept;
    size_t at, last_off = 0, last_len = 0; /* the last value held once, when last_len > 0 */
    int rc = UR_OK;

    ur_strmap_init(&seen);
    ur_pool_init(&kept);
    for (size_t i = 0; i < node->n && node->height == 0 && rc == UR_OK; i++) {
        ur_ocdbt_btree_entry *e = &node->e[i];
        size_t len = (size_t)e->value_len; /* <= UR_OCDBT_MAX_INLINE_VALUE */
        const uint8_t *v;
        if (e->indirect) {
            continue;
        }
        rc = win_need(w, len, err);
        if (rc < 0) {
            break;
        }
        if (w->b->len - w->pos < len) {
            rc = ur_err_set_at(err, UR_ECORRUPT, w->base + w->pos,
                               "btree leaf values: truncated or malformed");
            break;
        }
        v = w->b->data + w->pos;
        w->pos += len;
        at = node->values.len;
        if (len >= SHARED_VALUE_MIN) {
            size_t first = 0;
            /* Orbax's arrays of a shape come one after the other with the same zarr.json:
             * compared with the last one before it is hashed */
            if (len == last_len && memcmp(v, node->values.data + last_off, len) == 0) {
                e->value_off = (uint32_t)last_off;
                continue;
            }
            if (ur_strmap_get(&seen, (const char *)v, len, &first) == 1) {
                e->value_off = (uint32_t)first;
                last_off = first;
                last_len = len;
                continue;
            }
            uint8_t *copy = ur_pool_alloc(&kept, len, err);
            if (copy == NULL) {
                rc = UR_ENOMEM;
                break;
            }
            memcpy(copy, v, len);
            rc = ur_strmap_put(&seen, (const char *)copy, len, at, NULL, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append(&node->values, v, len, err);
        }
        if (rc == UR_OK && len >= SHARED_VALUE_MIN) {
            last_off = at;
            last_len = len;
        }
        e->value_off = (uint32_t)at; /* <= the body's length, < UR_OCDBT_MAX_DECODED */
    }
    if (rc == UR_OK) {
        rc = win_need(w, 1, err);
    }
    if (rc == UR_OK && w->b->len > w->pos) { /* count what is left, as ur_rd_finish says it */
        size_t left = w->b->len - w->pos, trail_at = w->base + w->pos;
        while (rc == UR_OK && w->src != NULL && !w->src->done) {
            w->b->len = 0;
            rc = ur_ocdbt_codec_src_read(w->src, w->b, VALUES_PIECE, err);
            left += w->b->len;
        }
        if (rc == UR_OK) {
            rc = ur_err_set_at(err, UR_ECORRUPT, trail_at,
                               "btree node: %zu unexpected trailing bytes", left);
        }
    }
    if (rc == UR_OK && node->values.cap - node->values.len > 65536) {
        ur_buf_fit(&node->values); /* grown by doubling */
    }
    ur_pool_dispose(&kept);
    ur_strmap_dispose(&seen);
    return rc;
}

/* Decode the columns before the inline values from b[0..len) (a leaf) or the whole node (an
 * interior one); *end_out: where they end. */
static int decode_front(ur_ocdbt_btree_node *node, const ur_buf *b, const char *transitive,
                        size_t tlen, size_t *end_out, ur_err *err)
{
    ur_rd rd;
    uint32_t num;
    size_t at;
    int rc;

    memset(node, 0, sizeof *node);
    ur_rd_init(&rd, b->data, b->len);
    node->height = ur_rd_u8(&rd);
    rc = ur_rd_check(&rd, "btree node", err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_table_decode(&node->table, &rd, transitive, tlen, err);
    }
    if (rc < 0) {
        return rc;
    }
    at = rd.pos;
    num = ur_rd_varint32(&rd);
    if (rd.failed) {
        return ur_rd_check(&rd, "btree node", err);
    }
    if (num == 0 || num > UR_OCDBT_MAX_NODE_ENTRIES || num > ur_rd_remaining(&rd)) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "btree node: invalid entry count %u", num);
    }
    node->n = num;
    node->e = ur_calloc(node->n, sizeof *node->e);
    if (node->e == NULL) {
        return ur_err_oom(err);
    }
    rc = node->height == 0 ? decode_leaf(node, &rd, err) : decode_interior(node, &rd, err);
    *end_out = rd.pos;
    return rc;
}

/* Decode from *b, the whole body (src NULL) or its first bytes with src handing out the
 * rest: the columns before the values from a prefix of the body that holds them (doubled
 * until it does; bytes found corrupt before the body is whole are decoded again with more of
 * it, so errors are those of the whole body), then the values through a window. Frees *b. */
static int decode_body(ur_ocdbt_btree_node *node, ur_buf *b, ur_ocdbt_body_src *src,
                       const char *transitive, size_t tlen, ur_err *err)
{
    size_t want = FRONT_FIRST, end = 0;
    body_win w;
    int rc;

    memset(node, 0, sizeof *node);
    for (;;) {
        if (src != NULL && b->len < want) {
            rc = ur_ocdbt_codec_src_read(src, b, want - b->len, err);
            if (rc < 0) {
                goto out;
            }
        }
        if (b->len > UINT32_MAX) { /* entries hold 32-bit offsets; readers cap a body at 1 GiB */
            rc = ur_err_set(err, UR_ECORRUPT, "btree node: body of %zu bytes", b->len);
            goto out;
        }
        rc = decode_front(node, b, transitive, tlen, &end, err);
        if (rc != UR_ECORRUPT || src == NULL || src->done) {
            break;
        }
        ur_ocdbt_btree_dispose(node);
        want = b->len * 2;
    }
    if (rc < 0) {
        goto out;
    }
    w.b = b;
    w.src = src;
    w.base = 0;
    w.pos = end;
    rc = keep_values(node, &w, err);
out:
    ur_buf_dispose(b);
    if (rc < 0) {
        ur_ocdbt_btree_dispose(node);
    }
    return rc;
}

int ur_ocdbt_btree_decode(ur_ocdbt_btree_node *node, ur_buf *body, const char *transitive,
                          size_t tlen, ur_err *err)
{
    ur_buf b = *body;
    ur_buf_init(body, 0);
    return decode_body(node, &b, NULL, transitive, tlen, err);
}

int ur_ocdbt_btree_decode_src(ur_ocdbt_btree_node *node, ur_ocdbt_body_src *src,
                              const char *transitive, size_t tlen, ur_err *err)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    return decode_body(node, &b, src, transitive, tlen, err);
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
