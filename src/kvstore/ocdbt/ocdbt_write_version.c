/* OCDBT writer, versions (spec §5; TensorStore create_new_manifest.cc): each commit a new
 * generation, inline in the manifest up to 2^version_tree_arity_log2 versions, then in
 * version-tree nodes of growing height; and the manifest naming them, written last. */
#define _POSIX_C_SOURCE 200809L
#include "ocdbt_write_impl.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"

#include <stdlib.h>
#include <string.h>

/* ---- versions (spec §5; TensorStore create_new_manifest.cc) ---- */

/* Flags for files[] and the map files[] -> table index of a table holding the flagged ones;
 * both freed by the caller. */
static int table_of(ocdbt_writer *w, const uint64_t *file, size_t n, ur_ocdbt_table *t,
                    uint32_t **map_out, ur_err *err)
{
    uint8_t *used = ur_calloc(w->n_files + 1, 1);
    uint32_t *map = ur_calloc(w->n_files + 1, sizeof *map);
    int rc;
    if (used == NULL || map == NULL) {
        ur_free(used);
        ur_free(map);
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        used[file[i]] = 1;
    }
    rc = ur_ocdbt_write__make_table(w, used, t, map, err);
    ur_free(used);
    if (rc != UR_OK) {
        ur_free(map);
        return rc;
    }
    *map_out = map;
    return UR_OK;
}

/* Append a version-tree node of `height` (versions vs at height 0, else children ch; n of
 * them, refs in files[] indices) to the data files; *ref its place. */
static int write_vnode(ocdbt_writer *w, uint8_t height, const ur_ocdbt_version *vs,
                       const ur_ocdbt_vnode_ref *ch, size_t n, ur_ocdbt_ref *ref, ur_err *err)
{
    ur_ocdbt_version_node node;
    uint64_t *files = ur_calloc(n, sizeof *files);
    uint32_t *map = NULL, file = 0;
    ur_buf body, obj;
    int rc;

    if (files == NULL) {
        return ur_err_oom(err);
    }
    memset(&node, 0, sizeof node);
    ur_buf_init(&body, 0);
    ur_buf_init(&obj, 0);
    for (size_t i = 0; i < n; i++) {
        files[i] = height == 0 ? vs[i].root.file : ch[i].ref.file;
    }
    rc = table_of(w, files, n, &node.table, &map, err);
    if (rc == UR_OK && height == 0) {
        node.versions = ur_calloc(n, sizeof *node.versions);
        rc = node.versions != NULL ? UR_OK : ur_err_oom(err);
        for (size_t i = 0; i < n && node.versions != NULL; i++) {
            node.versions[i] = vs[i];
            node.versions[i].root.file = map[files[i]];
        }
    } else if (rc == UR_OK) {
        node.children = ur_calloc(n, sizeof *node.children);
        rc = node.children != NULL ? UR_OK : ur_err_oom(err);
        for (size_t i = 0; i < n && node.children != NULL; i++) {
            node.children[i] = ch[i];
            node.children[i].ref.file = map[files[i]];
        }
    }
    if (rc == UR_OK) {
        node.arity_log2 = w->config.version_tree_arity_log2;
        node.height = height;
        node.n = n;
        rc = ur_ocdbt_version_node_encode(&body, &node, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_VERSION_NODE, body.data, body.len,
                                   w->opts.compress, w->opts.zstd_level, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_write__append_data(w, obj.data, obj.len, &file, &ref->offset, err);
        ref->file = file;
        ref->length = obj.len;
    }
    ur_ocdbt_version_node_dispose(&node);
    ur_free(files);
    ur_free(map);
    ur_buf_dispose(&body);
    ur_buf_dispose(&obj);
    return rc;
}

/* The node of height h that holds old's children (when old is set, read back) and then kid;
 * *out its reference. */
static int extend_vnode(ocdbt_writer *w, ur_ocdbt_reader *r, const ur_ocdbt_vnode_ref *old,
                        const ur_ocdbt_vnode_ref *kid, unsigned h, ur_ocdbt_vnode_ref *out,
                        ur_err *err)
{
    ur_ocdbt_version_node node;
    ur_ocdbt_vnode_ref *ch = NULL;
    size_t n = 0;
    int rc = UR_OK;

    memset(&node, 0, sizeof node);
    if (old != NULL) {
        ur_ocdbt_file_id fid;
        fid.path = w->files[old->ref.file];
        fid.len = strlen(fid.path);
        fid.base_len = w->file_base[old->ref.file];
        rc = ur_ocdbt_read__version_node(r, &fid, &old->ref, &node, err);
        if (rc == UR_OK && (node.height != h || node.n == 0 ||
                            node.children[node.n - 1].generation != old->generation)) {
            rc = ur_err_set(err, UR_ECORRUPT,
                            "%s: version node of generation %llu differs from its reference",
                            w->dir, (unsigned long long)old->generation);
        }
    }
    if (rc == UR_OK) {
        ch = ur_calloc(node.n + 1, sizeof *ch);
        rc = ch != NULL ? UR_OK : ur_err_oom(err);
    }
    if (ch != NULL) {
        for (size_t i = 0; i < node.n && rc == UR_OK; i++) {
            uint32_t f = 0;
            ch[n] = node.children[i];
            rc = ur_ocdbt_write__file_index(w, &node.table.f[node.children[i].ref.file], &f, err);
            ch[n++].ref.file = f;
        }
        ch[n++] = *kid;
    }
    if (rc == UR_OK) {
        rc = write_vnode(w, (uint8_t)h, NULL, ch, n, &out->ref, err);
    }
    out->generation = kid->generation;
    out->num_generations = (old != NULL ? old->num_generations : 0) + kid->num_generations;
    out->commit_time = old != NULL ? old->commit_time : kid->commit_time;
    out->height = (uint8_t)h;
    ur_ocdbt_version_node_dispose(&node);
    ur_free(ch);
    return rc;
}

/* The version nodes of the manifest of generation G, the inline versions before it having
 * just been written as the height-0 node h0: per height, the node of the manifest before
 * (old) is kept, extended by the node of the height below that no longer fits the range of
 * its own height, or started with it. */
static int new_vnodes(ocdbt_writer *w, ur_ocdbt_reader *r, const ur_ocdbt_vnode_ref *h0,
                      uint64_t G, ur_err *err)
{
    unsigned a = w->config.version_tree_arity_log2;
    uint64_t g = ((G - 1) >> a) << a;
    ur_ocdbt_vnode_ref olds[64], kids[64], made[64];
    int has_old[64], has_kid[64];
    unsigned hts[64];
    size_t k = 0, idx = w->n_vnodes;
    ur_ocdbt_vnode_ref prev = *h0;
    int have_prev = 1, rc = UR_OK;

    for (unsigned h = 1; g != 0 && h < 64; h++) {
        unsigned shift = (h + 1) * a;
        uint64_t next = shift >= 64 ? 0 : ((g - 1) >> shift) << shift;
        const ur_ocdbt_vnode_ref *old = NULL;
        if (idx > 0 && w->vnodes[idx - 1].height == h) {
            old = &w->vnodes[--idx];
        }
        has_old[k] = old != NULL && old->generation > next && old->generation <= g;
        has_kid[k] = have_prev && prev.generation > next && prev.generation <= g;
        if (has_old[k] || has_kid[k]) {
            if (has_old[k]) {
                olds[k] = *old;
            }
            kids[k] = prev;
            hts[k++] = h;
        }
        have_prev = old != NULL;
        if (old != NULL) {
            prev = *old;
        }
        g = next;
    }
    for (size_t i = 0; i < k && rc == UR_OK; i++) {
        ur_ocdbt_vnode_ref *o = &made[k - 1 - i];
        if (!has_kid[i]) {
            *o = olds[i];
        } else {
            rc = extend_vnode(w, r, has_old[i] ? &olds[i] : NULL, &kids[i], hts[i], o, err);
        }
    }
    if (rc == UR_OK) {
        ur_ocdbt_vnode_ref *v = ur_grow_to(w->vnodes, &w->cap_vnodes, k ? k : 1, sizeof *v);
        if (v == NULL) {
            return ur_err_oom(err);
        }
        memcpy(v, made, k * sizeof *v);
        w->vnodes = v;
        w->n_vnodes = k;
    }
    return rc;
}

/* Add version v as the next generation: to the inline versions, or, when their bucket is
 * full, as the only inline version after writing the full bucket as a node (and the version
 * nodes above it that change). */
int ur_ocdbt_write__append_version(ocdbt_writer *w, ur_ocdbt_reader *r, ur_ocdbt_version *v,
                                   ur_err *err)
{
    uint64_t arity = (uint64_t)1 << w->config.version_tree_arity_log2,
             now = (uint64_t)ur_clock_stamp_ns();
    const ur_ocdbt_version *last = w->n_vers > 0 ? &w->vers[w->n_vers - 1] : NULL;
    uint64_t N = last != NULL ? last->generation : 0;
    ur_ocdbt_version *vs;
    int rc;

    if (N >= UINT64_MAX - 1) {
        return ur_err_set(err, UR_EINVAL, "%s: no generation number left", w->dir);
    }
    v->generation = N + 1;
    v->commit_time = last != NULL && now <= last->commit_time ? last->commit_time + 1 : now;
    if (last != NULL && (N & (arity - 1)) == 0) {
        ur_ocdbt_vnode_ref h0;
        memset(&h0, 0, sizeof h0);
        rc = write_vnode(w, 0, w->vers, NULL, w->n_vers, &h0.ref, err);
        h0.generation = N;
        h0.num_generations = w->n_vers;
        h0.commit_time = w->vers[0].commit_time;
        if (rc == UR_OK) {
            rc = new_vnodes(w, r, &h0, N + 1, err);
        }
        if (rc < 0) {
            return rc;
        }
        w->n_vers = 0;
    }
    vs = ur_grow(w->vers, &w->cap_vers, w->n_vers, sizeof *vs, 8);
    if (vs == NULL) {
        return ur_err_oom(err);
    }
    w->vers = vs;
    w->vers[w->n_vers++] = *v;
    return UR_OK;
}

/* Write manifest.ocdbt naming the versions held (temporary file, rename, directory sync). */
int ur_ocdbt_write__manifest(ocdbt_writer *w, ur_err *err)
{
    ur_ocdbt_manifest m;
    size_t n = w->n_vers + w->n_vnodes;
    uint64_t *files = ur_calloc(n, sizeof *files);
    uint32_t *map = NULL;
    ur_buf body, obj;
    ur_kvstore_writer *out = NULL;
    int rc;

    if (files == NULL) {
        return ur_err_oom(err);
    }
    memset(&m, 0, sizeof m);
    ur_buf_init(&body, 0);
    ur_buf_init(&obj, 0);
    for (size_t i = 0; i < w->n_vers; i++) {
        files[i] = w->vers[i].root.file;
    }
    for (size_t i = 0; i < w->n_vnodes; i++) {
        files[w->n_vers + i] = w->vnodes[i].ref.file;
    }
    rc = table_of(w, files, n, &m.table, &map, err);
    if (rc == UR_OK) {
        m.config = w->config;
        m.versions = ur_calloc(w->n_vers, sizeof *m.versions);
        m.vnodes = ur_calloc(w->n_vnodes ? w->n_vnodes : 1, sizeof *m.vnodes);
        rc = m.versions != NULL && m.vnodes != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK && m.versions != NULL && m.vnodes != NULL) {
        m.n_versions = w->n_vers;
        m.n_vnodes = w->n_vnodes;
        for (size_t i = 0; i < w->n_vers; i++) {
            m.versions[i] = w->vers[i];
            m.versions[i].root.file = map[files[i]];
        }
        for (size_t i = 0; i < w->n_vnodes; i++) {
            m.vnodes[i] = w->vnodes[i];
            m.vnodes[i].ref.file = map[files[w->n_vers + i]];
        }
        rc = ur_ocdbt_manifest_encode(&body, &m, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_MANIFEST, body.data, body.len,
                                   w->opts.compress, w->opts.zstd_level, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_writer_open(&out, w->store, "manifest.ocdbt", UR_KVSTORE_WRITER_ATOMIC,
                                    err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_writer_append(out, obj.data, obj.len, err);
        if (rc < 0) {
            ur_kvstore_writer_abort(out);
        }
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_writer_finish(out, err);
    }
    ur_ocdbt_manifest_dispose(&m);
    ur_free(files);
    ur_free(map);
    ur_buf_dispose(&body);
    ur_buf_dispose(&obj);
    return rc;
}
