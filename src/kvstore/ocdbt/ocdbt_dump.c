/* Human-readable dumps of an OCDBT database for `unroll ls --manifest / --tree`: the
 * manifest (config, inline versions, every version-tree node below it) and the B+tree of the
 * latest version. Locations use TensorStore's dump syntax "<kind>:<base>:<rel>:<off>:<len>". */
#include "ocdbt_internal.h"

#include "unroll/ocdbt.h"

#include <inttypes.h>
#include <string.h>

static int put_bytes(ur_buf *out, const uint8_t *p, size_t n, ur_err *err)
{
    int rc = ur_buf_append_byte(out, '"', err);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\') {
            rc = ur_buf_append_byte(out, p[i], err);
        } else {
            rc = ur_buf_printf(out, err, "\\x%02x", p[i]);
        }
    }
    return rc == UR_OK ? ur_buf_append_byte(out, '"', err) : rc;
}

static int put_loc(ur_buf *out, const char *kind, const ur_ocdbt_table *t, const ur_ocdbt_ref *r,
                   ur_err *err)
{
    const ur_ocdbt_file_id *f;
    if (ur_ocdbt_ref_is_missing(r)) {
        return ur_buf_printf(out, err, "%s:missing", kind);
    }
    f = &t->f[r->file];
    return ur_buf_printf(out, err, "%s:%.*s:%s:%" PRIu64 ":%" PRIu64, kind, (int)f->base_len,
                         f->path, f->path + f->base_len, r->offset, r->length);
}

static int dump_versions(ur_buf *out, const ur_ocdbt_table *t, const ur_ocdbt_version *v, size_t n,
                         int indent, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_buf_printf(out, err,
                           "%*sversion generation=%" PRIu64 " commit_time=%" PRIu64
                           " root_height=%u root=",
                           indent, "", v[i].generation, v[i].commit_time, v[i].root_height);
        if (rc == UR_OK) {
            rc = put_loc(out, "btreenode", t, &v[i].root, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_printf(out, err,
                               " num_keys=%" PRIu64 " num_tree_bytes=%" PRIu64
                               " num_indirect_value_bytes=%" PRIu64 "\n",
                               v[i].stats.num_keys, v[i].stats.num_tree_bytes,
                               v[i].stats.num_indirect_value_bytes);
        }
    }
    return rc;
}

static int dump_vnode_refs(ur_ocdbt_reader *r, ur_buf *out, const ur_ocdbt_table *t,
                           const ur_ocdbt_vnode_ref *v, size_t n, int indent, int depth,
                           ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        ur_ocdbt_version_node node;
        rc = ur_buf_printf(out, err,
                           "%*sversion_node height=%u generation=%" PRIu64
                           " num_generations=%" PRIu64 " commit_time=%" PRIu64 " location=",
                           indent, "", v[i].height, v[i].generation, v[i].num_generations,
                           v[i].commit_time);
        if (rc == UR_OK) {
            rc = put_loc(out, "versionnode", t, &v[i].ref, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(out, '\n', err);
        }
        if (rc < 0) {
            break;
        }
        if (depth > 70) {
            return ur_err_set(err, UR_ECORRUPT, "version tree too deep");
        }
        rc = ur_ocdbt_read__version_node(r, &t->f[v[i].ref.file], &v[i].ref, &node, err);
        if (rc < 0) {
            break;
        }
        if (node.height != v[i].height || node.n == 0 ||
            (node.height == 0 ? node.versions[node.n - 1].generation
                              : node.children[node.n - 1].generation) != v[i].generation) {
            ur_ocdbt_version_node_dispose(&node);
            return ur_err_set(err, UR_ECORRUPT,
                              "version node: height or last generation differs from its "
                              "reference (generation %" PRIu64 ")",
                              v[i].generation);
        }
        if (node.height == 0) {
            rc = dump_versions(out, &node.table, node.versions, node.n, indent + 2, err);
        } else {
            rc = dump_vnode_refs(r, out, &node.table, node.children, node.n, indent + 2, depth + 1,
                                 err);
        }
        ur_ocdbt_version_node_dispose(&node);
    }
    return rc;
}

int ur_ocdbt_dump_manifest(ur_kvstore *kv, ur_buf *out, ur_err *err)
{
    ur_ocdbt_reader *r = ur_ocdbt_read__from_kv(kv);
    const ur_ocdbt_manifest *m;
    const ur_ocdbt_config *c;
    int rc;

    if (r == NULL) {
        return ur_err_set(err, UR_EINVAL, "%s is not an OCDBT database", ur_kvstore_describe(kv));
    }
    m = ur_ocdbt_read__manifest(r);
    c = &m->config;
    rc = ur_buf_printf(out, err, "manifest %s\nconfig uuid=", ur_ocdbt_read__manifest_name(r));
    for (int i = 0; i < 16 && rc == UR_OK; i++) {
        rc = ur_buf_printf(out, err, "%02x", c->uuid[i]);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(out, err,
                           " manifest_kind=%s max_inline_value_bytes=%u"
                           " max_decoded_node_bytes=%u version_tree_arity_log2=%u",
                           c->manifest_kind ? "numbered" : "single", c->max_inline_value_bytes,
                           c->max_decoded_node_bytes, c->version_tree_arity_log2);
    }
    if (rc == UR_OK) {
        rc = c->compression
                 ? ur_buf_printf(out, err, " compression=zstd(level %d)\n", (int)c->zstd_level)
                 : ur_buf_printf(out, err, " compression=none\n");
    }
    for (size_t i = 0; i < m->table.n && rc == UR_OK; i++) {
        const ur_ocdbt_file_id *f = &m->table.f[i];
        rc = ur_buf_printf(out, err, "data_file %zu base=\"%.*s\" relative=\"%s\"\n", i,
                           (int)f->base_len, f->path, f->path + f->base_len);
    }
    if (rc == UR_OK) {
        rc = dump_versions(out, &m->table, m->versions, m->n_versions, 0, err);
    }
    if (rc == UR_OK) {
        rc = dump_vnode_refs(r, out, &m->table, m->vnodes, m->n_vnodes, 0, 0, err);
    }
    return rc;
}

static int dump_node(ur_ocdbt_reader *r, ur_buf *out, const ur_ocdbt_file_id *file,
                     const ur_ocdbt_ref *ref, int height, ur_buf *prefix, int indent, ur_err *err)
{
    ur_ocdbt_cnode *c = NULL;
    const ur_ocdbt_btree_node *n;
    size_t base = prefix->len;
    int rc = ur_ocdbt_read__btree_node(r, file, ref, height, &c, err);

    if (rc < 0) {
        return rc;
    }
    n = ur_ocdbt_read__node(c);
    rc = ur_buf_printf(out, err,
                       "%*snode height=%u entries=%zu location=btreenode:%.*s:%s:%" PRIu64
                       ":%" PRIu64 " prefix=",
                       indent, "", n->height, n->n, (int)file->base_len, file->path,
                       file->path + file->base_len, ref->offset, ref->length);
    if (rc == UR_OK) {
        rc = put_bytes(out, prefix->data, prefix->len, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, '\n', err);
    }
    for (size_t i = 0; i < n->n && rc == UR_OK; i++) {
        const ur_ocdbt_btree_entry *e = &n->e[i];
        rc = ur_buf_printf(out, err, "%*s", indent + 2, "");
        if (rc == UR_OK) {
            rc = put_bytes(out, n->keys + e->key_off, e->key_len, err);
        }
        if (rc < 0) {
            break;
        }
        if (n->height == 0) {
            if (e->indirect) {
                rc = ur_buf_printf(out, err, " indirect %" PRIu64 " bytes ", e->value_len);
                if (rc == UR_OK) {
                    rc = put_loc(out, "value", &n->table, &e->ref, err);
                }
                if (rc == UR_OK) {
                    rc = ur_buf_append_byte(out, '\n', err);
                }
            } else {
                rc = ur_buf_printf(out, err, " inline %" PRIu64 " bytes\n", e->value_len);
            }
            continue;
        }
        rc = ur_buf_printf(out, err,
                           " subtree_common_prefix=%u num_keys=%" PRIu64 " num_tree_bytes=%" PRIu64
                           " num_indirect_value_bytes=%" PRIu64 "\n",
                           e->subtree_prefix_len, n->stats[i].num_keys, n->stats[i].num_tree_bytes,
                           n->stats[i].num_indirect_value_bytes);
        if (rc == UR_OK) {
            rc = ur_buf_append(prefix, n->keys + e->key_off, e->subtree_prefix_len, err);
        }
        if (rc == UR_OK) {
            rc = dump_node(r, out, &n->table.f[e->ref.file], &e->ref, n->height - 1, prefix,
                           indent + 4, err);
        }
        prefix->len = base;
    }
    ur_ocdbt_read__release(r, c);
    return rc;
}

int ur_ocdbt_dump_tree(ur_kvstore *kv, ur_buf *out, ur_err *err)
{
    ur_ocdbt_reader *r = ur_ocdbt_read__from_kv(kv);
    const ur_ocdbt_manifest *m;
    const ur_ocdbt_version *v;
    ur_buf prefix;
    int rc;

    if (r == NULL) {
        return ur_err_set(err, UR_EINVAL, "%s is not an OCDBT database", ur_kvstore_describe(kv));
    }
    m = ur_ocdbt_read__manifest(r);
    if (m->n_versions == 0) {
        return UR_OK;
    }
    v = &m->versions[m->n_versions - 1];
    if (ur_ocdbt_ref_is_missing(&v->root)) {
        return ur_buf_printf(out, err, "empty tree (generation %" PRIu64 ")\n", v->generation);
    }
    ur_buf_init(&prefix, 0);
    rc = ur_buf_printf(out, err, "tree generation=%" PRIu64 " height=%u\n", v->generation,
                       v->root_height);
    if (rc == UR_OK) {
        rc = ur_buf_reserve(&prefix, 64, err);
    }
    if (rc == UR_OK) {
        rc = dump_node(r, out, &m->table.f[v->root.file], &v->root, v->root_height, &prefix, 0,
                       err);
    }
    ur_buf_dispose(&prefix);
    return rc;
}
