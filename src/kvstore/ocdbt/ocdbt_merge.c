/* Orbax's merge of per-process OCDBT databases into the item's top-level database.
 *
 * Orbax (orbax/checkpoint/_src/serialization/ocdbt_utils.py, merge_ocdbt_per_process_files)
 * opens every `ocdbt.process_<i>/` and copies its whole key range into the parent with
 * TensorStore's experimental_copy_range_to, in one transaction. TensorStore copies the leaf
 * entries, not the values: an out-of-line value stays in the child's data file and the parent
 * refers to it through the base path "ocdbt.process_<i>/" (plus the child's own base path),
 * inline values are copied into the parent's leaves, and the parent's nodes and manifest are
 * new files of its own. Spec: docs/ocdbt-format.md §3.1, §9.
 *
 * Here: walk each child's latest version, collect (key, value or reference), sort by key
 * (children in the order given), refuse a key two children hold with different values, and
 * hand the entries to a fresh writer (ur_ocdbt_create + ur_ocdbt_writer_put_ref), which
 * builds the B+tree exactly as for a single-process database. */
#define _POSIX_C_SOURCE 200809L
#include "../kvstore_impl.h" /* the OCDBT reader and writer are kvstore drivers */
#include "ocdbt_internal.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t *key;
    size_t klen;
    size_t child;
    size_t seq;
    int indirect;
    uint64_t len;
    uint8_t *value; /* inline (owned) */
    char *base;     /* indirect: "<child>/" + the child's base path (owned) */
    char *rel;      /* indirect: relative path (owned) */
    uint64_t offset;
} mentry;

typedef struct {
    mentry *e;
    size_t n, cap;
    ur_buf prefix;
    size_t child;
    const char *child_name;
} collector;

/* A new zeroed entry at the end, NULL when out of memory. */
static mentry *push(collector *c)
{
    mentry *m = ur_grow(c->e, &c->cap, c->n, sizeof *m, 256);
    if (m == NULL) {
        return NULL;
    }
    c->e = m;
    m = &c->e[c->n];
    memset(m, 0, sizeof *m);
    m->seq = c->n++;
    return m;
}

static int add_leaf_entry(collector *c, const ur_ocdbt_btree_node *n,
                          const ur_ocdbt_btree_entry *e, ur_err *err)
{
    mentry *m = push(c);
    if (m == NULL) {
        return ur_err_oom(err);
    }
    m->klen = c->prefix.len + e->key_len;
    m->key = ur_malloc(m->klen ? m->klen : 1);
    if (m->key == NULL) {
        c->n--;
        return ur_err_oom(err);
    }
    if (c->prefix.len > 0) {
        memcpy(m->key, c->prefix.data, c->prefix.len);
    }
    if (e->key_len > 0) {
        memcpy(m->key + c->prefix.len, n->keys + e->key_off, e->key_len);
    }
    m->child = c->child;
    m->len = e->value_len;
    m->indirect = e->indirect;
    if (e->indirect) {
        const ur_ocdbt_file_id *f = &n->table.f[e->ref.file];
        size_t cl = strlen(c->child_name), sep = cl > 0 ? 1 : 0;
        m->base = ur_malloc(cl + sep + f->base_len + 1);
        m->rel = ur_strdup(f->path + f->base_len);
        if (m->base == NULL || m->rel == NULL) {
            return ur_err_oom(err);
        }
        memcpy(m->base, c->child_name, cl);
        if (sep) {
            m->base[cl] = '/';
        }
        memcpy(m->base + cl + sep, f->path, f->base_len);
        m->base[cl + sep + f->base_len] = '\0';
        m->offset = e->ref.offset;
    } else if (e->value_len > 0) {
        m->value = ur_malloc((size_t)e->value_len);
        if (m->value == NULL) {
            return ur_err_oom(err);
        }
        memcpy(m->value, n->values.data + e->value_off, (size_t)e->value_len);
    }
    return UR_OK;
}

static int walk(collector *c, ur_ocdbt_reader *r, const ur_ocdbt_file_id *file,
                const ur_ocdbt_ref *ref, int height, ur_err *err)
{
    ur_ocdbt_cnode *cn = NULL;
    const ur_ocdbt_btree_node *n;
    size_t base = c->prefix.len;
    int rc = ur_ocdbt_read__btree_node(r, file, ref, height, &cn, err);

    if (rc < 0) {
        return rc;
    }
    n = ur_ocdbt_read__node(cn);
    for (size_t i = 0; i < n->n && rc == UR_OK; i++) {
        const ur_ocdbt_btree_entry *e = &n->e[i];
        if (n->height == 0) {
            rc = add_leaf_entry(c, n, e, err);
            continue;
        }
        rc = ur_buf_append(&c->prefix, n->keys + e->key_off, e->subtree_prefix_len, err);
        if (rc == UR_OK) {
            rc = walk(c, r, &n->table.f[e->ref.file], &e->ref, n->height - 1, err);
        }
        c->prefix.len = base;
    }
    ur_ocdbt_read__release(r, cn);
    return rc;
}

/* Every entry of the latest version of the database in `path`, read through `base` when it
 * is set (an object store; not taken over), else from the directory. */
static int collect_child(collector *c, const char *path, ur_kvstore *base, ur_kvstore **kv_out,
                         ur_err *err)
{
    ur_kvstore *kv = NULL;
    ur_ocdbt_reader *r;
    const ur_ocdbt_manifest *m;
    const ur_ocdbt_version *v;
    int rc = base != NULL ? ur_ocdbt_open_kv(&kv, base, 0, path, err)
                          : ur_ocdbt_open(&kv, path, err);

    if (rc < 0) {
        return rc;
    }
    *kv_out = kv;
    r = ur_ocdbt_read__from_kv(kv);
    if (r == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "%s: not an OCDBT database", path);
    }
    m = ur_ocdbt_read__manifest(r);
    if (m->n_versions == 0) {
        return ur_err_set(err, UR_ECORRUPT, "%s: the database has no version", path);
    }
    v = &m->versions[m->n_versions - 1];
    if (ur_ocdbt_ref_is_missing(&v->root)) {
        return UR_OK; /* an empty share */
    }
    c->prefix.len = 0;
    return walk(c, r, &m->table.f[v->root.file], &v->root, v->root_height, err);
}

static int cmp_mentry(const void *a, const void *b)
{
    const mentry *x = a, *y = b;
    size_t m = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, m);
    if (c != 0) {
        return c;
    }
    if (x->klen != y->klen) {
        return x->klen < y->klen ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The value of entry `e` (from child database kv). */
static int value_of(ur_kvstore *kv, const mentry *e, ur_buf *out, ur_err *err)
{
    char *key;
    int rc;
    out->len = 0;
    if (!e->indirect) {
        return e->len > 0 ? ur_buf_append(out, e->value, (size_t)e->len, err) : UR_OK;
    }
    if (memchr(e->key, '\0', e->klen) != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED, "a key holding a NUL byte is in two databases");
    }
    key = ur_strndup((const char *)e->key, e->klen);
    if (key == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_kvstore_read(kv, key, out, err);
    ur_free(key);
    return rc;
}

/* Two children hold the key of a and b: the same value is kept once, else refused. */
static int check_same(ur_kvstore **kvs, const mentry *a, const mentry *b,
                      const char *const *children, ur_err *err)
{
    ur_buf va, vb;
    int rc;
    if (a->len != b->len) {
        return ur_err_set(err, UR_EINVAL, "key '%.*s' has different values in %s and %s",
                          (int)a->klen, (const char *)a->key, children[a->child],
                          children[b->child]);
    }
    ur_buf_init(&va, 0);
    ur_buf_init(&vb, 0);
    rc = value_of(kvs[a->child], a, &va, err);
    if (rc == UR_OK) {
        rc = value_of(kvs[b->child], b, &vb, err);
    }
    if (rc == UR_OK && (va.len != vb.len || memcmp(va.data, vb.data, va.len) != 0)) {
        rc = ur_err_set(err, UR_EINVAL, "key '%.*s' has different values in %s and %s",
                        (int)a->klen, (const char *)a->key, children[a->child],
                        children[b->child]);
    }
    ur_buf_dispose(&va);
    ur_buf_dispose(&vb);
    return rc;
}

static int put_entry(ur_kvstore *parent, const mentry *e, ur_err *err)
{
    char *key;
    int rc;
    if (e->indirect) {
        return ur_ocdbt_writer_put_ref(parent, e->key, e->klen, e->base, e->rel, e->offset, e->len,
                                       err);
    }
    if (memchr(e->key, '\0', e->klen) != NULL) {
        return ur_err_set(err, UR_EUNSUPPORTED, "cannot merge a key holding a NUL byte");
    }
    key = ur_strndup((const char *)e->key, e->klen);
    if (key == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_kvstore_write(parent, key, e->value, (size_t)e->len, err);
    ur_free(key);
    return rc;
}

int ur_ocdbt_merge(const char *dir, const char *const *children, size_t n_children,
                   const ur_ocdbt_write_opts *opts, ur_err *err)
{
    return ur_ocdbt_merge_from(dir, NULL, children, n_children, opts, err);
}

int ur_ocdbt_merge_from(const char *dir, ur_kvstore *const *bases, const char *const *children,
                        size_t n_children, const ur_ocdbt_write_opts *opts, ur_err *err)
{
    collector c;
    ur_kvstore **kvs = ur_calloc(n_children ? n_children : 1, sizeof *kvs);
    ur_kvstore *parent = NULL;
    int rc = kvs != NULL ? UR_OK : ur_err_oom(err);

    memset(&c, 0, sizeof c);
    ur_buf_init(&c.prefix, 0);
    for (size_t i = 0; i < n_children && rc == UR_OK; i++) {
        char *path = ur_path_join(dir, children[i]);
        if (path == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        c.child = i;
        c.child_name = children[i];
        rc = collect_child(&c, bases != NULL ? ur_kvstore_describe(bases[i]) : path,
                           bases != NULL ? bases[i] : NULL, &kvs[i], err);
        ur_free(path);
    }
    if (rc == UR_OK && c.n > 0) {
        qsort(c.e, c.n, sizeof *c.e, cmp_mentry);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_create(&parent, dir, opts, err);
    }
    for (size_t i = 0; i < c.n && rc == UR_OK; i++) {
        if (i > 0 && c.e[i].klen == c.e[i - 1].klen &&
            memcmp(c.e[i].key, c.e[i - 1].key, c.e[i].klen) == 0) {
            rc = check_same(kvs, &c.e[i - 1], &c.e[i], children, err);
            continue; /* kept once: the first child's */
        }
        rc = put_entry(parent, &c.e[i], err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_commit(parent, err);
    }
    if (rc < 0) {
        ur_err_wrap(err, "merging the per-process databases of %s", dir);
    }
    ur_kvstore_close(parent);
    for (size_t i = 0; i < c.n; i++) {
        ur_free(c.e[i].key);
        ur_free(c.e[i].value);
        ur_free(c.e[i].base);
        ur_free(c.e[i].rel);
    }
    ur_free(c.e);
    ur_buf_dispose(&c.prefix);
    for (size_t i = 0; kvs != NULL && i < n_children; i++) {
        ur_kvstore_close(kvs[i]);
    }
    ur_free(kvs);
    return rc;
}
