/* Version tree (spec §5): which B+tree root each generation has.
 *
 * Leaf array (manifest inline_versions, height-0 nodes), column-wise:
 *   num_versions varint64 (1..2^a) | generation varint64 | root_height u8 | data_file_id,
 *   offset, length varint64 | num_keys, num_tree_bytes, num_indirect_value_bytes varint64 |
 *   commit_time u64le (ns)
 * Interior array (height >= 1 nodes; the manifest's version_nodes add entry_height):
 *   num_children varint64 | generation (last in subtree) | data_file_id, offset, length |
 *   num_generations varint64 | commit_time u64le (earliest in subtree) | [entry_height u8]
 * Node body: arity_log2 u8 | height u8 | data-file table | leaf or interior array.
 * TensorStore: format/version_tree.cc. */
#include "ocdbt_format.h"

#include "unroll/alloc.h"

#include <string.h>

/* The three columns of a reference array: all file indices, all offsets, all lengths. */
#define READ_REFS(rd, arr, n, fld)                                                                \
    do {                                                                                          \
        for (size_t k_ = 0; k_ < (n); k_++) {                                                     \
            (arr)[k_].fld.file = ur_rd_varint64(rd);                                              \
        }                                                                                         \
        for (size_t k_ = 0; k_ < (n); k_++) {                                                     \
            (arr)[k_].fld.offset = ur_rd_varint64(rd);                                            \
        }                                                                                         \
        for (size_t k_ = 0; k_ < (n); k_++) {                                                     \
            (arr)[k_].fld.length = ur_rd_varint64(rd);                                            \
        }                                                                                         \
    } while (0)

#define WRITE_REFS(rc, out, arr, n, fld, err)                                                     \
    do {                                                                                          \
        for (size_t k_ = 0; k_ < (n) && (rc) == UR_OK; k_++) {                                    \
            (rc) = ur_buf_put_varint(out, (arr)[k_].fld.file, err);                               \
        }                                                                                         \
        for (size_t k_ = 0; k_ < (n) && (rc) == UR_OK; k_++) {                                    \
            (rc) = ur_buf_put_varint(out, (arr)[k_].fld.offset, err);                             \
        }                                                                                         \
        for (size_t k_ = 0; k_ < (n) && (rc) == UR_OK; k_++) {                                    \
            (rc) = ur_buf_put_varint(out, (arr)[k_].fld.length, err);                             \
        }                                                                                         \
    } while (0)

int ur_ocdbt_versions_decode(ur_ocdbt_version **out, size_t *n_out, ur_rd *rd, uint8_t arity_log2,
                             size_t n_files, ur_err *err)
{
    size_t at = rd->pos, n;
    uint64_t num = ur_rd_varint64(rd), arity = (uint64_t)1 << arity_log2, last, min_gen;
    ur_ocdbt_version *v = NULL;
    int rc;

    *out = NULL;
    *n_out = 0;
    if (rd->failed) {
        return ur_rd_check(rd, "versions", err);
    }
    if (num == 0 || num > arity) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "versions: %llu versions, expected 1..%llu",
                             (unsigned long long)num, (unsigned long long)arity);
    }
    n = (size_t)num;
    v = ur_calloc(n, sizeof *v);
    if (v == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        at = rd->pos;
        v[i].generation = ur_rd_varint64(rd);
        if (!rd->failed &&
            (v[i].generation == 0 || (i > 0 && v[i].generation <= v[i - 1].generation))) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at,
                               "versions: generation numbers not increasing / zero");
            goto fail;
        }
    }
    for (size_t i = 0; i < n; i++) {
        v[i].root_height = ur_rd_u8(rd);
    }
    READ_REFS(rd, v, n, root);
    for (size_t i = 0; i < n; i++) {
        v[i].stats.num_keys = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        v[i].stats.num_tree_bytes = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        v[i].stats.num_indirect_value_bytes = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        v[i].commit_time = ur_rd_u64le(rd);
    }
    if (rd->failed) {
        rc = ur_rd_check(rd, "versions", err);
        goto fail;
    }
    at = rd->pos;
    last = v[n - 1].generation;
    min_gen = last - ((last - 1) & (arity - 1));
    if (v[0].generation < min_gen) {
        rc = ur_err_set_at(err, UR_ECORRUPT, at,
                           "versions: generations %llu..%llu span more than one leaf bucket",
                           (unsigned long long)v[0].generation, (unsigned long long)last);
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        if (ur_ocdbt_ref_is_missing(&v[i].root)) {
            if (v[i].root_height != 0 || v[i].stats.num_keys != 0 ||
                v[i].stats.num_tree_bytes != 0 || v[i].stats.num_indirect_value_bytes != 0) {
                rc = ur_err_set_at(err, UR_ECORRUPT, at,
                                   "versions: empty generation %llu with non-zero height/stats",
                                   (unsigned long long)v[i].generation);
                goto fail;
            }
            if (v[i].root.file >= n_files) {
                rc = ur_ocdbt_ref_validate(&v[i].root, n_files, at, err);
                goto fail;
            }
        } else {
            rc = ur_ocdbt_ref_validate(&v[i].root, n_files, at, err);
            if (rc < 0) {
                goto fail;
            }
        }
    }
    *out = v;
    *n_out = n;
    return UR_OK;
fail:
    ur_free(v);
    return rc;
}

int ur_ocdbt_versions_encode(ur_buf *out, const ur_ocdbt_version *v, size_t n, ur_err *err)
{
    int rc = ur_buf_put_varint(out, n, err);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, v[i].generation, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_append_byte(out, v[i].root_height, err);
    }
    WRITE_REFS(rc, out, v, n, root, err);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, v[i].stats.num_keys, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, v[i].stats.num_tree_bytes, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, v[i].stats.num_indirect_value_bytes, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_u64le(out, v[i].commit_time, err);
    }
    return rc;
}

int ur_ocdbt_vnode_refs_decode(ur_ocdbt_vnode_ref **out, size_t *n_out, ur_rd *rd,
                               uint8_t arity_log2, unsigned height, int with_height,
                               size_t n_files, ur_err *err)
{
    size_t at = rd->pos, n;
    unsigned max_height = 63U / arity_log2 - 1U;
    uint64_t num = ur_rd_varint64(rd), arity = (uint64_t)1 << arity_log2;
    ur_ocdbt_vnode_ref *v = NULL;
    int rc;

    *out = NULL;
    *n_out = 0;
    if (rd->failed) {
        return ur_rd_check(rd, "version nodes", err);
    }
    if (with_height ? num > max_height : (num == 0 || num > arity)) {
        return ur_err_set_at(err, UR_ECORRUPT, at, "version nodes: invalid count %llu",
                             (unsigned long long)num);
    }
    n = (size_t)num;
    if (n == 0) {
        return UR_OK;
    }
    v = ur_calloc(n, sizeof *v);
    if (v == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        v[i].generation = ur_rd_varint64(rd);
    }
    READ_REFS(rd, v, n, ref);
    for (size_t i = 0; i < n; i++) {
        v[i].num_generations = ur_rd_varint64(rd);
    }
    for (size_t i = 0; i < n; i++) {
        v[i].commit_time = ur_rd_u64le(rd);
    }
    for (size_t i = 0; i < n; i++) {
        v[i].height = with_height ? ur_rd_u8(rd) : (uint8_t)(height - 1);
    }
    if (rd->failed) {
        rc = ur_rd_check(rd, "version nodes", err);
        goto fail;
    }
    at = rd->pos;
    for (size_t i = 0; i < n; i++) {
        if (v[i].generation == 0 || (i > 0 && v[i].generation <= v[i - 1].generation)) {
            rc = ur_err_set_at(err, UR_ECORRUPT, at,
                               "version nodes: generation numbers not increasing / zero");
            goto fail;
        }
        rc = ur_ocdbt_ref_validate(&v[i].ref, n_files, at, err);
        if (rc < 0) {
            goto fail;
        }
        if (with_height) {
            if (v[i].height < 1 || v[i].height > max_height ||
                (i > 0 && v[i].height >= v[i - 1].height)) {
                rc = ur_err_set_at(err, UR_ECORRUPT, at, "version nodes: invalid height %u",
                                   v[i].height);
                goto fail;
            }
        } else {
            /* children of a height-h node are full buckets of stride A^h */
            unsigned shift = arity_log2 * height;
            uint64_t stride_mask = ((uint64_t)1 << shift) - 1;
            if ((v[i].generation & stride_mask) != 0 ||
                v[i].num_generations > ((uint64_t)1 << shift) ||
                ((v[i].generation - 1) >> shift >> arity_log2) !=
                    ((v[0].generation - 1) >> shift >> arity_log2)) {
                rc = ur_err_set_at(err, UR_ECORRUPT, at,
                                   "version node: child generation %llu invalid for height %u",
                                   (unsigned long long)v[i].generation, height);
                goto fail;
            }
        }
    }
    *out = v;
    *n_out = n;
    return UR_OK;
fail:
    ur_free(v);
    return rc;
}

int ur_ocdbt_vnode_refs_encode(ur_buf *out, const ur_ocdbt_vnode_ref *v, size_t n, int with_height,
                               ur_err *err)
{
    int rc = ur_buf_put_varint(out, n, err);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, v[i].generation, err);
    }
    WRITE_REFS(rc, out, v, n, ref, err);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_varint(out, v[i].num_generations, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_put_u64le(out, v[i].commit_time, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK && with_height; i++) {
        rc = ur_buf_append_byte(out, v[i].height, err);
    }
    return rc;
}

void ur_ocdbt_version_node_dispose(ur_ocdbt_version_node *node)
{
    if (node == NULL) {
        return;
    }
    ur_ocdbt_table_dispose(&node->table);
    ur_free(node->versions);
    ur_free(node->children);
    memset(node, 0, sizeof *node);
}

int ur_ocdbt_version_node_decode(ur_ocdbt_version_node *node, const uint8_t *body, size_t n,
                                 const char *transitive, size_t tlen, ur_err *err)
{
    ur_rd rd;
    int rc;

    memset(node, 0, sizeof *node);
    ur_rd_init(&rd, body, n);
    node->arity_log2 = ur_rd_u8(&rd);
    node->height = ur_rd_u8(&rd);
    if (rd.failed) {
        return ur_rd_check(&rd, "version node", err);
    }
    if (node->arity_log2 < 1 || node->arity_log2 > 16) {
        return ur_err_set_at(err, UR_ECORRUPT, 0, "version node: invalid arity_log2 %u",
                             node->arity_log2);
    }
    if (node->height > 63U / node->arity_log2 - 1U) {
        return ur_err_set_at(err, UR_ECORRUPT, 1, "version node: invalid height %u", node->height);
    }
    rc = ur_ocdbt_table_decode(&node->table, &rd, transitive, tlen, err);
    if (rc == UR_OK) {
        if (node->height == 0) {
            rc = ur_ocdbt_versions_decode(&node->versions, &node->n, &rd, node->arity_log2,
                                          node->table.n, err);
        } else {
            rc = ur_ocdbt_vnode_refs_decode(&node->children, &node->n, &rd, node->arity_log2,
                                            node->height, 0, node->table.n, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_rd_finish(&rd, "version node", err);
    }
    if (rc < 0) {
        ur_ocdbt_version_node_dispose(node);
    }
    return rc;
}

int ur_ocdbt_version_node_encode(ur_buf *out, const ur_ocdbt_version_node *node, ur_err *err)
{
    int rc = ur_buf_append_byte(out, node->arity_log2, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, node->height, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_table_encode(out, &node->table, err);
    }
    if (rc == UR_OK) {
        rc = node->height == 0 ? ur_ocdbt_versions_encode(out, node->versions, node->n, err)
                               : ur_ocdbt_vnode_refs_encode(out, node->children, node->n, 0, err);
    }
    return rc;
}
