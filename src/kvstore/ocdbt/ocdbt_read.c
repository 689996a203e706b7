/* OCDBT reader: the latest version of a database as a read-only ur_kvstore, layered on a base
 * kvstore that holds the database's files (a directory, an object-store prefix), as
 * TensorStore layers its OCDBT driver.
 *
 * manifest.ocdbt (or the newest manifest.%016x) -> latest inline version -> root B+tree node
 * -> ... -> leaf entry -> inline value or (data file, offset, length). Every object is read
 * from the base store as exactly its byte range (a ranged read, a mapped view); nothing else
 * is loaded. Data-file paths come from the containing object's table (transitive base path
 * included), relative to the database: they are the base store's keys.
 *
 * Threads: decoded nodes are cached under one mutex and refcounted, so a node evicted while
 * in use stays valid until released; the base store's reads are thread-safe. */
#define _POSIX_C_SOURCE 200809L
#include "../kvstore_impl.h" /* OCDBT is a kvstore driver: it fills in the vtable */
#include "ocdbt_internal.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"
#include "unroll/side.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define CACHE_NODES 64
/* Decoded nodes kept past their use while they take at most this much (the last one read is
 * kept whatever its size: Orbax writes a whole tree as one node of up to 100 MB). With nodes
 * of 1 MiB, 64 of them held 100 MB for a database read once from end to end. */
#define CACHE_BYTES ((size_t)32 << 20)
#define MAX_OBJECT ((uint64_t)UR_OCDBT_MAX_DECODED + 65536)
#define MAX_MANIFEST ((size_t)64 << 20)

struct ur_ocdbt_cnode {
    char *path;
    uint64_t offset;
    unsigned refs;
    uint64_t stamp;
    size_t bytes; /* what the decoded node holds */
    ur_ocdbt_btree_node node;
};

struct ur_ocdbt_reader {
    ur_kvstore base;
    ur_kvstore *store; /* the base store: keys are paths relative to the database */
    int own_store;
    char *dir;         /* the database's location, for messages */
    char *manifest_name;
    ur_ocdbt_manifest manifest;
    const ur_ocdbt_version *latest; /* NULL for a config-only database */
    pthread_mutex_t lock;
    ur_ocdbt_cnode *cache[CACHE_NODES];
    size_t cached_bytes; /* of the nodes in cache[] */
    uint64_t clock;
};

static const ur_kvstore_ops reader_ops;

ur_ocdbt_reader *ur_ocdbt_read__from_kv(ur_kvstore *kv)
{
    return kv != NULL && kv->ops == &reader_ops ? (ur_ocdbt_reader *)kv : NULL;
}

const ur_ocdbt_manifest *ur_ocdbt_read__manifest(const ur_ocdbt_reader *r)
{
    return &r->manifest;
}

const char *ur_ocdbt_read__manifest_name(const ur_ocdbt_reader *r)
{
    return r->manifest_name;
}

/* Data-file paths come from the database: checked before they reach the base store. */
static int check_rel(const char *rel, ur_err *err)
{
    int rc = ur_fs_relpath_validate(rel, strlen(rel), err);
    return rc < 0 ? ur_err_wrap(err, "invalid data file path") : rc;
}

/* A file the database references and the store does not have: damage, never an absent key
 * (an I/O error naming the data file, whatever store it is missing from). */
static int missing_is_damage(int rc, ur_err *err)
{
    if (rc == UR_ENOTFOUND && err != NULL) {
        char where[sizeof err->where], msg[sizeof err->msg];
        int e = err->os_errno;
        memcpy(where, err->where, sizeof where);
        memcpy(msg, err->msg, sizeof msg);
        if (e != 0) {
            ur_err_set_os(err, UR_EIO, e, where, "cannot open data file");
        } else {
            ur_err_set_os(err, UR_EIO, 0, where, "cannot open data file (%s)", msg);
        }
    }
    return rc == UR_ENOTFOUND ? UR_EIO : rc;
}

/* Read [offset, offset+n) of data file `rel` into dst, through the base store. */
static int read_file_range(ur_ocdbt_reader *r, const char *rel, uint64_t offset, size_t n,
                           void *dst, ur_err *err)
{
    int rc = check_rel(rel, err);
    if (rc == UR_OK) {
        rc = missing_is_damage(ur_kvstore_read_range(r->store, rel, offset, n, dst, err), err);
    }
    return rc;
}

/* Fix up an error from decoding the object at [off, off+len) of `rel`: name the file, make
 * the offset absolute (for a compressed body, point at the object and say where in the
 * decompressed body). */
static void locate(ur_ocdbt_reader *r, ur_err *err, const char *rel, uint64_t off, uint64_t len,
                   int in_body, int compressed)
{
    char *path;
    if (err == NULL) {
        return;
    }
    path = ur_path_join(r->dir, rel);
    if (err->code == UR_ECORRUPT) {
        uint64_t at = err->offset;
        if (at == UR_ERR_NO_OFFSET) {
            err->offset = off;
        } else if (!in_body) {
            err->offset = off + at;
        } else if (!compressed) {
            err->offset = off + 14 + at;
        } else {
            ur_err_wrap(err, "byte %llu of the decompressed body", (unsigned long long)at);
            err->offset = off;
        }
        ur_err_wrap(err, "object [%llu, +%llu)", (unsigned long long)off, (unsigned long long)len);
    }
    ur_err_set_where(err, path ? path : rel);
    ur_free(path);
}

/* Read the B+tree node at [off, off+len) of `rel` into *node, its body decompressed piece by
 * piece as it is decoded (Orbax writes a checkpoint's tree as one node of 60 MB: only the
 * columns before the inline values and a window over them are held, beside the compressed
 * object). */
static int read_btree_node(ur_ocdbt_reader *r, const ur_ocdbt_file_id *file, uint64_t off,
                           uint64_t len, ur_ocdbt_btree_node *node, ur_err *err)
{
    ur_ocdbt_body_src src;
    ur_buf raw;
    int rc, compressed = 0;

    memset(&src, 0, sizeof src);
    ur_buf_init(&raw, 0);
    if (len < 16 || len > MAX_OBJECT) {
        rc = ur_err_set_at(err, UR_ECORRUPT, 0, "btree node: invalid length %llu",
                           (unsigned long long)len);
        locate(r, err, file->path, off, len, 0, 0);
        return rc;
    }
    rc = ur_buf_reserve(&raw, (size_t)len, err);
    if (rc == UR_OK) {
        rc = read_file_range(r, file->path, off, (size_t)len, raw.data, err);
        if (rc == UR_ECORRUPT) {
            ur_err_wrap(err, "btree node [%llu, +%llu)", (unsigned long long)off,
                        (unsigned long long)len);
        }
        if (rc < 0) {
            goto out;
        }
    }
    if (rc == UR_OK) {
        raw.len = (size_t)len;
        rc = ur_ocdbt_codec_open_src(&src, raw.data, raw.len, UR_OCDBT_MAGIC_BTREE, "btree node",
                                     &compressed, err);
        if (rc < 0) {
            locate(r, err, file->path, off, len, 0, 0);
            goto out;
        }
        rc = ur_ocdbt_btree_decode_src(node, &src, file->path, file->base_len, err);
        if (rc < 0) {
            /* a failed decompression says where in the object, a failed decode where in
             * the body */
            locate(r, err, file->path, off, len, !src.failed, compressed);
        }
    }
out:
    ur_ocdbt_codec_src_dispose(&src);
    ur_buf_dispose(&raw);
    return rc;
}

/* Read the object at ref of `file` and check its envelope; body in `body`. */
static int read_object(ur_ocdbt_reader *r, const char *rel, uint64_t off, uint64_t len,
                       uint32_t magic, const char *what, ur_buf *body, int *compressed,
                       ur_err *err)
{
    ur_buf raw;
    int rc;

    ur_buf_init(&raw, 0);
    if (len < 16 || len > MAX_OBJECT) {
        rc = ur_err_set_at(err, UR_ECORRUPT, 0, "%s: invalid length %llu", what,
                           (unsigned long long)len);
        locate(r, err, rel, off, len, 0, 0);
        return rc;
    }
    rc = ur_buf_reserve(&raw, (size_t)len, err);
    if (rc == UR_OK) {
        rc = read_file_range(r, rel, off, (size_t)len, raw.data, err);
    }
    if (rc == UR_OK) {
        raw.len = (size_t)len;
        rc = ur_ocdbt_codec_decode(body, raw.data, raw.len, magic, what, compressed, err);
        if (rc < 0) {
            locate(r, err, rel, off, len, 0, 0);
        }
    } else if (rc == UR_ECORRUPT) {
        ur_err_wrap(err, "%s [%llu, +%llu)", what, (unsigned long long)off,
                    (unsigned long long)len);
    }
    ur_buf_dispose(&raw);
    return rc;
}

static void cnode_free(ur_ocdbt_cnode *c)
{
    if (c != NULL) {
        ur_free(c->path);
        ur_ocdbt_btree_dispose(&c->node);
        ur_free(c);
    }
}

void ur_ocdbt_read__release(ur_ocdbt_reader *r, ur_ocdbt_cnode *c)
{
    int last;
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&r->lock);
    last = --c->refs == 0;
    pthread_mutex_unlock(&r->lock);
    if (last) {
        cnode_free(c);
    }
}

const ur_ocdbt_btree_node *ur_ocdbt_read__node(const ur_ocdbt_cnode *c)
{
    return &c->node;
}

static ur_ocdbt_cnode *cache_find(ur_ocdbt_reader *r, const char *path, uint64_t off)
{
    ur_ocdbt_cnode *hit = NULL;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < CACHE_NODES; i++) {
        ur_ocdbt_cnode *c = r->cache[i];
        if (c != NULL && c->offset == off && strcmp(c->path, path) == 0) {
            c->refs++;
            c->stamp = ++r->clock;
            hit = c;
            break;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return hit;
}

/* Under the lock: drop the cache's reference to slot i's node; returns the node when that
 * was the last reference (the caller frees it outside the lock). */
static ur_ocdbt_cnode *cache_drop(ur_ocdbt_reader *r, size_t i)
{
    ur_ocdbt_cnode *old = r->cache[i];
    r->cache[i] = NULL;
    if (old == NULL) {
        return NULL;
    }
    r->cached_bytes -= old->bytes;
    return --old->refs == 0 ? old : NULL;
}

static void cache_put(ur_ocdbt_reader *r, ur_ocdbt_cnode *c)
{
    ur_ocdbt_cnode *dead[CACHE_NODES];
    size_t n_dead = 0, victim = 0;

    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < CACHE_NODES; i++) {
        if (r->cache[i] == NULL) {
            victim = i;
            break;
        }
        if (r->cache[i]->stamp < r->cache[victim]->stamp) {
            victim = i;
        }
    }
    dead[n_dead] = cache_drop(r, victim);
    n_dead += dead[n_dead] != NULL;
    c->refs++; /* the cache's reference */
    c->stamp = ++r->clock;
    r->cache[victim] = c;
    r->cached_bytes += c->bytes;
    /* over the budget: the least recently used go, never the node just read */
    while (r->cached_bytes > CACHE_BYTES) {
        size_t lru = CACHE_NODES;
        for (size_t i = 0; i < CACHE_NODES; i++) {
            if (r->cache[i] != NULL && r->cache[i] != c &&
                (lru == CACHE_NODES || r->cache[i]->stamp < r->cache[lru]->stamp)) {
                lru = i;
            }
        }
        if (lru == CACHE_NODES) {
            break;
        }
        dead[n_dead] = cache_drop(r, lru);
        n_dead += dead[n_dead] != NULL;
    }
    pthread_mutex_unlock(&r->lock);
    for (size_t i = 0; i < n_dead; i++) {
        cnode_free(dead[i]);
    }
}

int ur_ocdbt_read__btree_node(ur_ocdbt_reader *r, const ur_ocdbt_file_id *file,
                              const ur_ocdbt_ref *ref, int height, ur_ocdbt_cnode **out,
                              ur_err *err)
{
    ur_ocdbt_cnode *c = cache_find(r, file->path, ref->offset);
    int rc;

    if (c == NULL) {
        c = ur_calloc(1, sizeof *c);
        if (c == NULL) {
            return ur_err_oom(err);
        }
        c->path = ur_strdup(file->path);
        if (c->path == NULL) {
            ur_free(c);
            return ur_err_oom(err);
        }
        c->offset = ref->offset;
        c->refs = 1;
        rc = read_btree_node(r, file, ref->offset, ref->length, &c->node, err);
        if (rc < 0) {
            cnode_free(c);
            return rc;
        }
        c->bytes = c->node.values.cap + c->node.n * sizeof(*c->node.e);
        if (c->node.n > 0) {
            const ur_ocdbt_btree_entry *e = &c->node.e[c->node.n - 1];
            c->bytes += (size_t)e->key_off + e->key_len; /* the keys, back to back */
        }
        cache_put(r, c);
    }
    if (height >= 0 && c->node.height != height) {
        rc = ur_err_set_at(err, UR_ECORRUPT, 14, "btree node: height %u, expected %d",
                           c->node.height, height);
        locate(r, err, file->path, ref->offset, ref->length, 0, 0);
        ur_ocdbt_read__release(r, c);
        return rc;
    }
    *out = c;
    return UR_OK;
}

int ur_ocdbt_read__version_node(ur_ocdbt_reader *r, const ur_ocdbt_file_id *file,
                                const ur_ocdbt_ref *ref, ur_ocdbt_version_node *out, ur_err *err)
{
    ur_buf body;
    int compressed = 0;
    int rc;

    ur_buf_init(&body, 0);
    rc = read_object(r, file->path, ref->offset, ref->length, UR_OCDBT_MAGIC_VERSION_NODE,
                     "version node", &body, &compressed, err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_version_node_decode(out, body.data, body.len, file->path, file->base_len,
                                          err);
        if (rc < 0) {
            locate(r, err, file->path, ref->offset, ref->length, 1, compressed);
        } else if (out->arity_log2 != r->manifest.config.version_tree_arity_log2) {
            ur_ocdbt_version_node_dispose(out);
            rc = ur_err_set_at(err, UR_ECORRUPT, 0, "version node: arity differs from config");
            locate(r, err, file->path, ref->offset, ref->length, 1, compressed);
        }
    }
    ur_buf_dispose(&body);
    return rc;
}

/* ---- key lookup ---- */

static int key_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t m = an < bn ? an : bn;
    int c = m ? memcmp(a, b, m) : 0;
    if (c != 0) {
        return c;
    }
    return an < bn ? -1 : (an > bn ? 1 : 0);
}

static const uint8_t *ekey(const ur_ocdbt_btree_node *n, size_t i)
{
    return n->keys + n->e[i].key_off;
}

/* The child's first key must not precede its parent entry's key (minus subtree prefix). */
static int check_first_key(ur_ocdbt_reader *r, const ur_ocdbt_file_id *file,
                           const ur_ocdbt_ref *ref, const ur_ocdbt_btree_node *child,
                           const uint8_t *min, size_t min_len, ur_err *err)
{
    if (key_cmp(ekey(child, 0), child->e[0].key_len, min, min_len) < 0) {
        int rc = ur_err_set_at(err, UR_ECORRUPT, 14,
                               "btree node: first key precedes the parent's key for it");
        locate(r, err, file->path, ref->offset, ref->length, 0, 0);
        return rc;
    }
    return UR_OK;
}

/* Find `key`; on success *leaf_out holds the leaf (release it) and *idx the entry. */
static int lookup(ur_ocdbt_reader *r, const uint8_t *key, size_t klen, ur_ocdbt_cnode **leaf_out,
                  size_t *idx, ur_err *err)
{
    const ur_ocdbt_version *v = r->latest;
    const ur_ocdbt_file_id *file;
    ur_ocdbt_ref ref;
    ur_ocdbt_cnode *cur = NULL, *parent = NULL;
    const uint8_t *min = NULL;
    size_t min_len = 0, matched = 0;
    int h, rc;

    if (v == NULL || ur_ocdbt_ref_is_missing(&v->root)) {
        return ur_err_set(err, UR_ENOTFOUND, "key not found");
    }
    file = &r->manifest.table.f[v->root.file];
    ref = v->root;
    h = v->root_height;
    for (;;) {
        const ur_ocdbt_btree_node *n;
        const uint8_t *rest = key + matched;
        size_t rlen = klen - matched, lo = 0, hi;

        rc = ur_ocdbt_read__btree_node(r, file, &ref, h, &cur, err);
        if (rc == UR_OK && parent != NULL) {
            rc = check_first_key(r, file, &ref, &cur->node, min, min_len, err);
        }
        ur_ocdbt_read__release(r, parent);
        parent = NULL;
        if (rc < 0) {
            ur_ocdbt_read__release(r, cur);
            return rc;
        }
        n = &cur->node;
        hi = n->n;
        /* first entry whose key > rest */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (key_cmp(ekey(n, mid), n->e[mid].key_len, rest, rlen) <= 0) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (lo == 0) {
            break; /* before the first key */
        }
        lo--;
        if (h == 0) {
            if (key_cmp(ekey(n, lo), n->e[lo].key_len, rest, rlen) != 0) {
                break;
            }
            *leaf_out = cur;
            *idx = lo;
            return UR_OK;
        }
        {
            size_t s = n->e[lo].subtree_prefix_len;
            if (rlen < s || memcmp(ekey(n, lo), rest, s) != 0) {
                break;
            }
            matched += s;
            min = ekey(n, lo) + s;
            min_len = n->e[lo].key_len - s;
            file = &n->table.f[n->e[lo].ref.file];
            ref = n->e[lo].ref;
            h--;
            parent = cur; /* keeps min and file alive */
            cur = NULL;
        }
    }
    ur_ocdbt_read__release(r, cur);
    return ur_err_set(err, UR_ENOTFOUND, "key not found");
}

static int find_key(ur_ocdbt_reader *r, const char *key, ur_ocdbt_cnode **leaf, size_t *idx,
                    ur_err *err)
{
    int rc = lookup(r, (const uint8_t *)key, strlen(key), leaf, idx, err);
    if (rc == UR_ENOTFOUND) {
        ur_err_set_where(err, key);
    }
    return rc;
}

static int r_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    ur_ocdbt_cnode *leaf = NULL;
    const ur_ocdbt_btree_entry *e;
    size_t idx;
    int rc = find_key(r, key, &leaf, &idx, err);

    if (rc < 0) {
        return rc;
    }
    e = &leaf->node.e[idx];
    if (offset > e->value_len || len > e->value_len - offset) {
        rc = ur_err_set(err, UR_ECORRUPT, "%s: range [%llu, +%zu) beyond value of %llu bytes", key,
                        (unsigned long long)offset, len, (unsigned long long)e->value_len);
    } else if (len == 0) {
        rc = UR_OK;
    } else if (!e->indirect) {
        memcpy(dst, leaf->node.values.data + e->value_off + offset, len);
    } else {
        rc = read_file_range(r, leaf->node.table.f[e->ref.file].path, e->ref.offset + offset, len,
                             dst, err);
    }
    ur_ocdbt_read__release(r, leaf);
    return rc;
}

/* Append the value of entry e (in leaf) to out. */
static int read_entry(ur_ocdbt_reader *r, const ur_ocdbt_cnode *leaf,
                      const ur_ocdbt_btree_entry *e, const char *key, ur_buf *out, ur_err *err)
{
    int rc;
    if (e->value_len > SIZE_MAX / 2) {
        rc = ur_err_set(err, UR_ECORRUPT, "%s: value too large", key);
    } else if (!e->indirect) {
        rc = ur_buf_append(out, leaf->node.values.data + e->value_off, (size_t)e->value_len, err);
    } else {
        rc = ur_buf_reserve(out, (size_t)e->value_len, err);
        if (rc == UR_OK && e->value_len > 0) {
            rc = read_file_range(r, leaf->node.table.f[e->ref.file].path, e->ref.offset,
                                 (size_t)e->value_len, out->data + out->len, err);
            if (rc == UR_OK) {
                out->len += (size_t)e->value_len;
            }
        }
    }
    if (rc < 0 && rc != UR_ENOMEM) {
        ur_err_set_where(err, key);
    }
    return rc;
}

static int r_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    ur_ocdbt_cnode *leaf = NULL;
    size_t idx;
    int rc = find_key(r, key, &leaf, &idx, err);

    if (rc < 0) {
        return rc;
    }
    rc = read_entry(r, leaf, &leaf->node.e[idx], key, out, err);
    ur_ocdbt_read__release(r, leaf);
    return rc;
}

/* Large indirect values are mapped from their data file; the rest is read. */
static int r_view(ur_kvstore *kv, const char *key, size_t limit, ur_kvstore_view *v, ur_err *err)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    ur_ocdbt_cnode *leaf = NULL;
    const ur_ocdbt_btree_entry *e;
    const char *rel;
    size_t idx;
    int rc = find_key(r, key, &leaf, &idx, err);

    if (rc < 0) {
        return rc;
    }
    e = &leaf->node.e[idx];
    if (!e->indirect || e->value_len < UR_KVSTORE_MAP_MIN) {
        rc = read_entry(r, leaf, e, key, &v->buf_, err);
        if (rc == UR_OK) {
            ur_kvstore__view_of_buf(v);
        }
        ur_ocdbt_read__release(r, leaf);
        return rc;
    }
    if (limit != 0 && e->value_len > limit) {
        rc = ur_err_set(err, UR_ECORRUPT, "data larger than the limit of %zu bytes", limit);
        goto out;
    }
    if (e->value_len > SIZE_MAX / 2) {
        rc = ur_err_set(err, UR_ECORRUPT, "%s: value too large", key);
        goto out;
    }
    rel = leaf->node.table.f[e->ref.file].path;
    rc = check_rel(rel, err);
    if (rc == UR_OK) {
        ur_kvstore_view inner;
        rc = missing_is_damage(ur_kvstore_read_view_range(r->store, rel, e->ref.offset,
                                                          (size_t)e->value_len, &inner, err),
                               err);
        if (rc == UR_OK) {
            *v = inner; /* the view owns the mapping or buffer now */
        } else {
            ur_kvstore_view_release(&inner);
        }
    }
out:
    if (rc < 0 && rc != UR_ENOMEM) {
        ur_err_set_where(err, key);
    }
    ur_ocdbt_read__release(r, leaf);
    return rc;
}

static void r_prefetch(ur_kvstore *kv, const char *key, size_t max_bytes)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    ur_ocdbt_cnode *leaf = NULL;
    const ur_ocdbt_btree_entry *e;
    size_t idx;

    if (find_key(r, key, &leaf, &idx, NULL) < 0) {
        return;
    }
    e = &leaf->node.e[idx];
    if (e->indirect && e->value_len > 0 &&
        check_rel(leaf->node.table.f[e->ref.file].path, NULL) == UR_OK) {
        uint64_t n = e->value_len < max_bytes ? e->value_len : max_bytes;
        ur_kvstore_prefetch_range(r->store, leaf->node.table.f[e->ref.file].path, e->ref.offset,
                                  (size_t)n);
    }
    ur_ocdbt_read__release(r, leaf);
}

/* [offset, offset + len) of the value, announced to the base store where the value lies in
 * a data file (a read-ahead store fetches it; a file store reads it into the page cache). */
static void r_prefetch_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    ur_ocdbt_cnode *leaf = NULL;
    const ur_ocdbt_btree_entry *e;
    size_t idx;

    if (find_key(r, key, &leaf, &idx, NULL) < 0) {
        return;
    }
    e = &leaf->node.e[idx];
    if (e->indirect && offset < e->value_len &&
        check_rel(leaf->node.table.f[e->ref.file].path, NULL) == UR_OK) {
        uint64_t n = e->value_len - offset < len ? e->value_len - offset : len;
        ur_kvstore_prefetch_range(r->store, leaf->node.table.f[e->ref.file].path,
                                  e->ref.offset + offset, (size_t)n);
    }
    ur_ocdbt_read__release(r, leaf);
}

static int r_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    ur_ocdbt_cnode *leaf = NULL;
    size_t idx;
    int rc = find_key(r, key, &leaf, &idx, err);
    if (rc == UR_OK) {
        *size_out = leaf->node.e[idx].value_len;
        ur_ocdbt_read__release(r, leaf);
    }
    return rc;
}

/* ---- listing ---- */

typedef struct {
    ur_ocdbt_reader *r;
    const uint8_t *prefix;
    size_t plen;
    ur_kvstore_list_fn fn;
    void *ctx;
    ur_buf key; /* the current node's implicit prefix, then scratch */
    int stop; /* past the prefix range: no more keys can match */
} list_state;

/* Compare full key (key.data[0..base) + k) with the wanted prefix, truncated to its length:
 * <0 before the range, 0 inside, >0 after. */
static int range_cmp(const list_state *st, size_t base, const uint8_t *k, size_t klen)
{
    size_t n = st->plen, m = base < n ? base : n;
    int c = m ? memcmp(st->key.data, st->prefix, m) : 0;
    if (c != 0 || base >= n) {
        return c;
    }
    m = klen < n - base ? klen : n - base;
    c = m ? memcmp(k, st->prefix + base, m) : 0;
    if (c != 0) {
        return c;
    }
    return base + klen < n ? -1 : 0;
}

/* The first entry of node n that can hold a key of the prefix range, found by bisection (the
 * keys are sorted, so range_cmp is monotonic over them): a scan from the start makes listing
 * every array of a many-leaf checkpoint quadratic. In a leaf: the first key not before the
 * range; in an interior node: the last child whose successor's first key is before it. */
static size_t first_in_range(const list_state *st, const ur_ocdbt_btree_node *n, int h,
                             size_t base)
{
    size_t lo = h == 0 ? 0 : 1, hi = n->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (range_cmp(st, base, ekey(n, mid), n->e[mid].key_len) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return h == 0 || lo == 0 ? lo : lo - 1;
}

static int list_node(list_state *st, const ur_ocdbt_file_id *file, const ur_ocdbt_ref *ref, int h,
                     const uint8_t *min, size_t min_len, ur_err *err)
{
    ur_ocdbt_cnode *c = NULL;
    const ur_ocdbt_btree_node *n;
    size_t base = st->key.len;
    int rc = ur_ocdbt_read__btree_node(st->r, file, ref, h, &c, err);

    if (rc == UR_OK && min != NULL) {
        rc = check_first_key(st->r, file, ref, &c->node, min, min_len, err);
    }
    if (rc < 0) {
        ur_ocdbt_read__release(st->r, c);
        return rc;
    }
    n = &c->node;
    for (size_t i = first_in_range(st, n, h, base); i < n->n && rc == UR_OK && !st->stop; i++) {
        const uint8_t *k = ekey(n, i);
        size_t klen = n->e[i].key_len;
        int cmp = range_cmp(st, base, k, klen);
        if (h == 0) {
            if (cmp > 0) {
                st->stop = 1;
                break;
            }
            if (cmp < 0 || memchr(k, 0, klen) != NULL) {
                continue; /* keys with NUL bytes cannot be named through this API */
            }
            st->key.len = base;
            rc = ur_buf_append(&st->key, k, klen, err);
            if (rc == UR_OK) {
                rc = ur_buf_append_byte(&st->key, 0, err);
            }
            if (rc == UR_OK) {
                rc = st->fn(st->ctx, (const char *)st->key.data, n->e[i].value_len);
                if (rc != 0) {
                    st->stop = 1;
                }
            }
        } else {
            size_t s = n->e[i].subtree_prefix_len;
            if (cmp > 0) {
                st->stop = 1;
                break;
            }
            if (i + 1 < n->n && range_cmp(st, base, ekey(n, i + 1), n->e[i + 1].key_len) < 0) {
                continue; /* the whole child precedes the prefix */
            }
            st->key.len = base;
            rc = ur_buf_append(&st->key, k, s, err);
            if (rc == UR_OK) {
                rc = list_node(st, &n->table.f[n->e[i].ref.file], &n->e[i].ref, h - 1, k + s,
                               klen - s, err);
            }
        }
        st->key.len = base;
    }
    st->key.len = base;
    ur_ocdbt_read__release(st->r, c);
    return rc;
}

static int r_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    const ur_ocdbt_version *v = r->latest;
    list_state st;
    int rc;

    if (v == NULL || ur_ocdbt_ref_is_missing(&v->root)) {
        return UR_OK;
    }
    memset(&st, 0, sizeof st);
    st.r = r;
    st.prefix = (const uint8_t *)prefix;
    st.plen = strlen(prefix);
    st.fn = fn;
    st.ctx = ctx;
    ur_buf_init(&st.key, 0);
    rc = ur_buf_reserve(&st.key, 256, err);
    if (rc == UR_OK) {
        rc = list_node(&st, &r->manifest.table.f[v->root.file], &v->root, v->root_height, NULL, 0,
                       err);
    }
    ur_buf_dispose(&st.key);
    return rc;
}

/* ---- every node read back, on two threads ---- */

/* Keys under child i of interior node n (read, checked, counted), as list_node walks it. */
static int count_child(ur_ocdbt_reader *r, const ur_ocdbt_btree_node *n, int h, size_t i,
                       uint64_t *count, ur_err *err);

static int count_node(ur_ocdbt_reader *r, const ur_ocdbt_file_id *file, const ur_ocdbt_ref *ref,
                      int h, const uint8_t *min, size_t min_len, uint64_t *count, ur_err *err)
{
    ur_ocdbt_cnode *c = NULL;
    int rc = ur_ocdbt_read__btree_node(r, file, ref, h, &c, err);
    if (rc == UR_OK && min != NULL) {
        rc = check_first_key(r, file, ref, &c->node, min, min_len, err);
    }
    if (rc == UR_OK && h == 0) {
        *count += c->node.n;
    }
    for (size_t i = 0; rc == UR_OK && h > 0 && i < c->node.n; i++) {
        rc = count_child(r, &c->node, h, i, count, err);
    }
    ur_ocdbt_read__release(r, c);
    return rc;
}

static int count_child(ur_ocdbt_reader *r, const ur_ocdbt_btree_node *n, int h, size_t i,
                       uint64_t *count, ur_err *err)
{
    size_t s = n->e[i].subtree_prefix_len;
    return count_node(r, &n->table.f[n->e[i].ref.file], &n->e[i].ref, h - 1, ekey(n, i) + s,
                      n->e[i].key_len - s, count, err);
}

typedef struct {
    ur_ocdbt_reader *r;
    const ur_ocdbt_btree_node *root;
    int h;
    size_t lo, hi;
    uint64_t count;
} count_half;

static int count_children(void *arg, ur_err *err)
{
    count_half *c = arg;
    int rc = UR_OK;
    for (size_t i = c->lo; rc == UR_OK && i < c->hi; i++) {
        rc = count_child(c->r, c->root, c->h, i, &c->count, err);
    }
    return rc;
}

int ur_ocdbt_count_keys(ur_kvstore *kv, uint64_t *n_keys, ur_err *err)
{
    ur_ocdbt_reader *r = ur_ocdbt_read__from_kv(kv);
    const ur_ocdbt_version *v;
    ur_ocdbt_cnode *root = NULL;
    int rc;

    *n_keys = 0;
    if (r == NULL) {
        return ur_err_set(err, UR_EINVAL, "not an OCDBT database");
    }
    v = r->latest;
    if (v == NULL || ur_ocdbt_ref_is_missing(&v->root)) {
        return UR_OK;
    }
    rc = ur_ocdbt_read__btree_node(r, &r->manifest.table.f[v->root.file], &v->root, v->root_height,
                                   &root, err);
    if (rc == UR_OK && v->root_height == 0) {
        *n_keys = root->node.n;
    } else if (rc == UR_OK) {
        /* the root's children in two halves: the second on a second thread; the first half's
         * failure, which a walk in key order meets first, is the one reported */
        count_half a = {r, &root->node, v->root_height, 0, root->node.n / 2, 0};
        count_half b = {r, &root->node, v->root_height, root->node.n / 2, root->node.n, 0};
        ur_side side;
        int side_rc;
        ur_side_start(&side, count_children, &b);
        rc = count_children(&a, err);
        side_rc = ur_side_join(&side);
        if (rc == UR_OK && side_rc < 0) {
            *err = side.err;
            rc = side_rc;
        }
        *n_keys = a.count + b.count;
    }
    ur_ocdbt_read__release(r, root);
    return rc;
}

static void r_close(ur_kvstore *kv)
{
    ur_ocdbt_reader *r = (ur_ocdbt_reader *)kv;
    for (size_t i = 0; i < CACHE_NODES; i++) {
        if (r->cache[i] != NULL && --r->cache[i]->refs == 0) {
            cnode_free(r->cache[i]);
        }
    }
    if (r->own_store) {
        ur_kvstore_close(r->store);
    }
    pthread_mutex_destroy(&r->lock);
    ur_ocdbt_manifest_dispose(&r->manifest);
    ur_free(r->manifest_name);
    ur_free(r->dir);
    ur_free(r);
}

static const ur_kvstore_ops reader_ops = {
    "ocdbt",    r_read, r_read_range, r_view,           r_size, r_list, NULL, NULL, r_close,
    r_prefetch, NULL,   NULL,         r_prefetch_range, NULL,   NULL,   NULL, /* list_dir:
                                                                    ur_kvstore_list filtered */
    NULL, /* list_versions: no version (the size only) */
};

/* ---- opening ---- */

static int load_manifest(ur_ocdbt_reader *r, const char *name, ur_ocdbt_manifest *m, ur_err *err)
{
    ur_buf raw, body;
    int rc, compressed = 0;

    ur_buf_init(&raw, 0);
    ur_buf_init(&body, 0);
    raw.limit = MAX_MANIFEST;
    rc = ur_kvstore_read(r->store, name, &raw, err);
    if (rc == UR_ENOTFOUND ||
        (rc == UR_ECORRUPT && raw.len == 0 && err != NULL && err->where[0] == '\0')) {
        ur_err_set_where(err, r->dir);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_codec_decode(&body, raw.data, raw.len, UR_OCDBT_MAGIC_MANIFEST, "manifest",
                                   &compressed, err);
        if (rc == UR_OK) {
            rc = ur_ocdbt_manifest_decode(m, body.data, body.len, err);
            if (rc < 0) {
                locate(r, err, name, 0, raw.len, 1, compressed);
            }
        } else {
            locate(r, err, name, 0, raw.len, 0, 0);
        }
    }
    ur_buf_dispose(&raw);
    ur_buf_dispose(&body);
    return rc;
}

static int hex16(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : (c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1);
        if (d < 0) {
            return -1;
        }
        v = (v << 4) | (uint64_t)d;
    }
    if (s[16] != '\0') {
        return -1;
    }
    *out = v;
    return 0;
}

/* Numbered manifests: the largest manifest.%016x holds the versions. */
static int max_generation(void *ctx, const char *key, uint64_t size)
{
    uint64_t g, *best = ctx;
    (void)size;
    if (strchr(key, '/') == NULL && strncmp(key, "manifest.", 9) == 0 && hex16(key + 9, &g) == 0 &&
        g > *best) {
        *best = g;
    }
    return 0;
}

static int load_numbered(ur_ocdbt_reader *r, ur_err *err)
{
    uint64_t best = 0;
    char name[32];
    ur_ocdbt_manifest m;
    int rc = ur_kvstore_list(r->store, "manifest.", max_generation, &best, err);

    if (rc < 0) {
        return rc;
    }
    if (best == 0) {
        return ur_err_set_os(err, UR_ECORRUPT, 0, r->dir,
                             "numbered manifest kind but no manifest.%%016x file");
    }
    snprintf(name, sizeof name, "manifest.%016llx", (unsigned long long)best);
    rc = load_manifest(r, name, &m, err);
    if (rc < 0) {
        return rc;
    }
    if (m.config.manifest_kind != 0 || m.n_versions == 0 ||
        m.versions[m.n_versions - 1].generation != best) {
        ur_ocdbt_manifest_dispose(&m);
        return ur_err_set_os(err, UR_ECORRUPT, 0, name,
                             "numbered manifest is config-only or its latest generation is not "
                             "%llu",
                             (unsigned long long)best);
    }
    r->manifest_name = ur_strdup(name);
    if (r->manifest_name == NULL) {
        ur_ocdbt_manifest_dispose(&m);
        return ur_err_oom(err);
    }
    ur_ocdbt_manifest_dispose(&r->manifest);
    r->manifest = m;
    return UR_OK;
}

int ur_ocdbt_open_kv(ur_kvstore **out, ur_kvstore *base, int take_base, const char *name,
                     ur_err *err)
{
    ur_ocdbt_reader *r = ur_calloc(1, sizeof *r);
    int rc;

    if (r == NULL) {
        if (take_base) {
            ur_kvstore_close(base);
        }
        return ur_err_oom(err);
    }
    r->base.ops = &reader_ops;
    r->store = base;
    r->own_store = take_base;
    snprintf(r->base.desc, sizeof r->base.desc, "ocdbt:%s", name);
    pthread_mutex_init(&r->lock, NULL);
    r->dir = ur_strdup(name);
    if (r->dir == NULL) {
        rc = ur_err_oom(err);
        goto fail;
    }
    rc = load_manifest(r, "manifest.ocdbt", &r->manifest, err);
    if (rc < 0) {
        goto fail;
    }
    if (r->manifest.config.manifest_kind == 1) {
        rc = load_numbered(r, err);
        if (rc < 0) {
            goto fail;
        }
    } else {
        r->manifest_name = ur_strdup("manifest.ocdbt");
        if (r->manifest_name == NULL) {
            rc = ur_err_oom(err);
            goto fail;
        }
    }
    if (r->manifest.n_versions > 0) {
        r->latest = &r->manifest.versions[r->manifest.n_versions - 1];
    }
    *out = &r->base;
    return UR_OK;
fail:
    r_close(&r->base);
    return rc;
}

int ur_ocdbt_open(ur_kvstore **out, const char *dir, ur_err *err)
{
    ur_kvstore *base = NULL;
    int rc = ur_kvstore_file_open(&base, dir, 0, err);
    return rc < 0 ? rc : ur_ocdbt_open_kv(out, base, 1, dir, err);
}
