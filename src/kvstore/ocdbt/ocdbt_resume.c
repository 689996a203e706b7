/* Continuing a database a writer left (ur_ocdbt_resume): a killed share of a multi-process or
 * resumable run, rerun.
 *
 * The database keeps every generation its commits made (ur_ocdbt_writer_snapshot adds one per
 * piece): the resumed writer takes over the manifest's versions, so its next commit is
 * generation latest + 1 over the latest tree, and no entry is read into memory. The data files
 * written after the last commit hold nothing any generation refers to: they are found by
 * walking every generation (each B+tree node once, however many generations share it, and
 * every version-tree node) and removed, so the resumed writer's files never mix with them. */
#define _POSIX_C_SOURCE 200809L
#include "../kvstore_impl.h" /* the OCDBT reader and writer are kvstore drivers */
#include "ocdbt_internal.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"
#include "unroll/strmap.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* What the walk found: the data files referred to, and the B+tree nodes seen ("<offset>
 * <path>"); the keys of both maps are owned by `keys`. */
typedef struct {
    ur_ocdbt_reader *r;
    ur_strmap files, nodes;
    char **keys;
    size_t n_keys, cap_keys;
} rwalk;

/* Add `key` to m; *added says whether it was new. */
static int remember(rwalk *rw, ur_strmap *m, const char *key, int *added, ur_err *err)
{
    size_t len = strlen(key), ignored;
    char *copy;
    *added = 0;
    if (ur_strmap_get(m, key, len, &ignored) == 1) {
        return UR_OK;
    }
    char **nk = ur_grow(rw->keys, &rw->cap_keys, rw->n_keys, sizeof *nk, 64);
    if (nk == NULL) {
        return ur_err_oom(err);
    }
    rw->keys = nk;
    copy = ur_strdup(key);
    if (copy == NULL) {
        return ur_err_oom(err);
    }
    rw->keys[rw->n_keys++] = copy;
    *added = 1;
    return ur_strmap_put(m, copy, len, 0, NULL, err);
}

static int note_file(rwalk *rw, const char *path, ur_err *err)
{
    int ignored;
    return remember(rw, &rw->files, path, &ignored, err);
}

/* The files of the subtree at ref (a node seen before: done already). */
static int walk_tree(rwalk *rw, const ur_ocdbt_file_id *file, const ur_ocdbt_ref *ref, int height,
                     ur_err *err)
{
    ur_ocdbt_cnode *cn = NULL;
    const ur_ocdbt_btree_node *n;
    char key[64 + UR_OCDBT_MAX_PATH];
    int added = 0, rc;

    snprintf(key, sizeof key, "%" PRIu64 " %s", ref->offset, file->path);
    rc = remember(rw, &rw->nodes, key, &added, err);
    if (rc < 0 || !added) {
        return rc;
    }
    rc = note_file(rw, file->path, err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_read__btree_node(rw->r, file, ref, height, &cn, err);
    }
    if (rc < 0) {
        return rc;
    }
    n = ur_ocdbt_read__node(cn);
    for (size_t i = 0; i < n->n && rc == UR_OK; i++) {
        const ur_ocdbt_btree_entry *e = &n->e[i];
        if (n->height > 0) {
            rc = walk_tree(rw, &n->table.f[e->ref.file], &e->ref, n->height - 1, err);
        } else if (e->indirect) {
            rc = note_file(rw, n->table.f[e->ref.file].path, err);
        }
    }
    ur_ocdbt_read__release(rw->r, cn);
    return rc;
}

static int walk_versions(rwalk *rw, const ur_ocdbt_table *t, const ur_ocdbt_version *v, size_t n,
                         ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        if (!ur_ocdbt_ref_is_missing(&v[i].root)) {
            rc = walk_tree(rw, &t->f[v[i].root.file], &v[i].root, v[i].root_height, err);
        }
    }
    return rc;
}

/* Every generation below the version nodes v[0..n) (depth bounded by the decoder's height
 * check: a child is one lower). */
static int walk_vnodes(rwalk *rw, const ur_ocdbt_table *t, const ur_ocdbt_vnode_ref *v, size_t n,
                       ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        ur_ocdbt_version_node node;
        memset(&node, 0, sizeof node);
        rc = note_file(rw, t->f[v[i].ref.file].path, err);
        if (rc == UR_OK) {
            rc = ur_ocdbt_read__version_node(rw->r, &t->f[v[i].ref.file], &v[i].ref, &node, err);
        }
        if (rc < 0) {
            break;
        }
        if (node.height != v[i].height || node.n == 0) {
            rc = ur_err_set(err, UR_ECORRUPT,
                            "version node of generation %" PRIu64 " differs from its reference",
                            v[i].generation);
        } else if (node.height == 0) {
            rc = walk_versions(rw, &node.table, node.versions, node.n, err);
        } else {
            rc = walk_vnodes(rw, &node.table, node.children, node.n, err);
        }
        ur_ocdbt_version_node_dispose(&node);
    }
    return rc;
}

/* Remove the files of dir/d/ that nothing in the database refers to. */
static int remove_unreferenced(const char *dir, const ur_strmap *files, ur_err *err)
{
    char *d = ur_path_join(dir, "d");
    DIR *dp;
    struct dirent *e;
    int rc = UR_OK;

    if (d == NULL) {
        return ur_err_oom(err);
    }
    dp = opendir(d);
    if (dp == NULL) {
        ur_free(d);
        return errno == ENOENT ? UR_OK : ur_err_set_os(err, UR_EIO, errno, dir, "cannot list d/");
    }
    while ((e = readdir(dp)) != NULL && rc == UR_OK) {
        char rel[300];
        size_t ignored;
        if (e->d_name[0] == '.') {
            continue;
        }
        snprintf(rel, sizeof rel, "d/%s", e->d_name);
        if (ur_strmap_get(files, rel, strlen(rel), &ignored) != 1) {
            char *p = ur_path_join(d, e->d_name);
            rc = p != NULL ? ur_fs_remove_tree(p, err) : ur_err_oom(err);
            ur_free(p);
        }
    }
    closedir(dp);
    ur_free(d);
    return rc;
}

int ur_ocdbt_resume(ur_kvstore **out, const char *dir, const ur_ocdbt_write_opts *opts,
                    size_t *n_kept, ur_err *err)
{
    rwalk rw;
    ur_kvstore *old = NULL, *w = NULL;
    const ur_ocdbt_manifest *m = NULL;
    ur_ocdbt_write_opts o = *opts;
    char *manifest = ur_path_join(dir, "manifest.ocdbt");
    int rc = manifest != NULL ? UR_OK : ur_err_oom(err);

    *n_kept = 0;
    if (rc == UR_OK && !ur_fs_exists(manifest)) {
        ur_free(manifest);
        o.resume = 0;
        return ur_ocdbt_create(out, dir, &o, err);
    }
    ur_free(manifest);
    if (rc < 0) {
        return rc;
    }
    memset(&rw, 0, sizeof rw);
    ur_strmap_init(&rw.files);
    ur_strmap_init(&rw.nodes);
    rc = ur_ocdbt_open(&old, dir, err);
    if (rc == UR_OK) {
        rw.r = ur_ocdbt_read__from_kv(old);
        m = ur_ocdbt_read__manifest(rw.r);
        if (m->n_versions == 0) {
            rc = ur_err_set(err, UR_ECORRUPT, "%s: the database has no version", dir);
        }
    }
    if (rc == UR_OK) {
        rc = walk_versions(&rw, &m->table, m->versions, m->n_versions, err);
    }
    if (rc == UR_OK) {
        rc = walk_vnodes(&rw, &m->table, m->vnodes, m->n_vnodes, err);
    }
    if (rc == UR_OK) {
        rc = remove_unreferenced(dir, &rw.files, err);
    }
    if (rc == UR_OK) {
        o.resume = 1;
        rc = ur_ocdbt_create(&w, dir, &o, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_write__adopt(w, m, err);
    }
    if (rc == UR_OK) {
        *n_kept = (size_t)m->versions[m->n_versions - 1].stats.num_keys;
        *out = w;
        w = NULL;
    } else {
        ur_err_wrap(err, "resuming the database in %s", dir);
    }
    ur_kvstore_close(w);
    ur_kvstore_close(old);
    for (size_t i = 0; i < rw.n_keys; i++) {
        ur_free(rw.keys[i]);
    }
    ur_free(rw.keys);
    ur_strmap_dispose(&rw.files);
    ur_strmap_dispose(&rw.nodes);
    return rc;
}
