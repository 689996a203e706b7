/* Manifest (spec §4): the root of a database, file `manifest.ocdbt` (or manifest.%016x).
 *
 *   envelope magic 0x0cdb3a2a, then the body:
 *   config                     (ocdbt_config.c)
 *   -- only when manifest_kind == 0 (single) --
 *   data-file table            transitive path ""
 *   inline_versions            version-tree leaf array
 *   version_nodes              version-tree interior array with entry_height
 *
 * TensorStore: format/manifest.cc. */
#include "ocdbt_format.h"

#include "unroll/alloc.h"

#include <string.h>

void ur_ocdbt_manifest_dispose(ur_ocdbt_manifest *m)
{
    if (m == NULL) {
        return;
    }
    ur_ocdbt_table_dispose(&m->table);
    ur_free(m->versions);
    ur_free(m->vnodes);
    memset(m, 0, sizeof *m);
}

/* version_nodes must each fall in the range the latest generation G allows at its height. */
static int check_vnode_ranges(const ur_ocdbt_manifest *m, size_t at, ur_err *err)
{
    unsigned a = m->config.version_tree_arity_log2;
    uint64_t G = m->versions[m->n_versions - 1].generation;
    uint64_t g = ((G - 1) >> a) << a;
    uint64_t lo[64] = {0}, hi[64] = {0};
    unsigned h = 1;

    while (g != 0 && h < 64) {
        unsigned shift = (h + 1) * a;
        uint64_t next = shift >= 64 ? 0 : ((g - 1) >> shift) << shift;
        lo[h] = next + 1;
        hi[h] = g;
        h++;
        g = next;
    }
    for (size_t i = 0; i < m->n_vnodes; i++) {
        const ur_ocdbt_vnode_ref *v = &m->vnodes[i];
        if (v->height >= h || v->generation < lo[v->height] || v->generation > hi[v->height]) {
            return ur_err_set_at(err, UR_ECORRUPT, at,
                                 "manifest: version node of height %u, generation %llu, is "
                                 "outside the range allowed for latest generation %llu",
                                 v->height, (unsigned long long)v->generation,
                                 (unsigned long long)G);
        }
    }
    return UR_OK;
}

int ur_ocdbt_manifest_decode(ur_ocdbt_manifest *m, const uint8_t *body, size_t n, ur_err *err)
{
    ur_rd rd;
    int rc;

    memset(m, 0, sizeof *m);
    ur_rd_init(&rd, body, n);
    rc = ur_ocdbt_config_decode(&m->config, &rd, err);
    if (rc == UR_OK && m->config.manifest_kind == 0) {
        uint8_t a = m->config.version_tree_arity_log2;
        rc = ur_ocdbt_table_decode(&m->table, &rd, "", 0, err);
        if (rc == UR_OK) {
            rc = ur_ocdbt_versions_decode(&m->versions, &m->n_versions, &rd, a, m->table.n, err);
        }
        if (rc == UR_OK) {
            rc = ur_ocdbt_vnode_refs_decode(&m->vnodes, &m->n_vnodes, &rd, a, 0, 1, m->table.n,
                                            err);
        }
        if (rc == UR_OK) {
            rc = check_vnode_ranges(m, rd.pos, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_rd_finish(&rd, "manifest", err);
    }
    if (rc < 0) {
        ur_ocdbt_manifest_dispose(m);
    }
    return rc;
}

int ur_ocdbt_manifest_encode(ur_buf *out, const ur_ocdbt_manifest *m, ur_err *err)
{
    int rc = ur_ocdbt_config_encode(out, &m->config, err);
    if (rc < 0 || m->config.manifest_kind != 0) {
        return rc;
    }
    rc = ur_ocdbt_table_encode(out, &m->table, err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_versions_encode(out, m->versions, m->n_versions, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_vnode_refs_encode(out, m->vnodes, m->n_vnodes, 1, err);
    }
    return rc;
}
