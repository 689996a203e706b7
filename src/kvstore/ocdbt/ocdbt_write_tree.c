/* OCDBT writer, the B+tree of a commit (spec §4, §10): the entries written since the last
 * commit cut into leaves of about min(max_decoded_node_bytes, 1 MiB) and interior levels
 * built until one root remains; or, over an earlier generation, merged into its tree copy on
 * write (only the nodes on the new keys' paths are read back and written anew). Each node is
 * encoded and appended to the data files as it is made. */
#define _POSIX_C_SOURCE 200809L
#include "ocdbt_write_impl.h"

#include "unroll/alloc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static size_t lcp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t i = 0;
    while (i < an && i < bn && a[i] == b[i]) {
        i++;
    }
    return i;
}

/* Nodes are cut at this decoded size even when the configured maximum is larger (Orbax
 * configures 100 MB): the configuration is a bound readers accept, not a size to reach, and
 * a 100 MB node would need that much memory twice over (body and compressed copy) to write. */
#define NODE_CUT_BYTES ((uint64_t)1 << 20)

/* Scratch for encoding one node at a time, reused from node to node. */
typedef struct {
    ur_ocdbt_btree_enc_entry *enc;
    size_t enc_cap;
    uint8_t *used; /* per writer file: referred to by the node being written */
    uint32_t *map; /* writer file index -> index in the node's table */
    size_t files_cap;
    ur_buf body, obj;
} wscratch;

static void scratch_dispose(wscratch *s)
{
    ur_free(s->enc);
    ur_free(s->used);
    ur_free(s->map);
    ur_buf_dispose(&s->body);
    ur_buf_dispose(&s->obj);
}

/* Room for a node of n entries, and the file flags cleared for every writer file (plus the
 * one a node's append may open). */
static int scratch_ready(wscratch *s, const ocdbt_writer *w, size_t n, ur_err *err)
{
    size_t nf = w->n_files + 1;
    if (n > s->enc_cap) {
        ur_ocdbt_btree_enc_entry *e = ur_grow_to(s->enc, &s->enc_cap, n, sizeof *e);
        if (e == NULL) {
            return ur_err_oom(err);
        }
        s->enc = e;
    }
    if (nf > s->files_cap) {
        size_t cap = s->files_cap, cap_map = s->files_cap;
        uint8_t *u = ur_grow_to(s->used, &cap, nf * 2, 1);
        uint32_t *m;
        if (u == NULL) {
            return ur_err_oom(err);
        }
        s->used = u;
        m = ur_grow_to(s->map, &cap_map, nf * 2, sizeof *m);
        if (m == NULL) {
            return ur_err_oom(err);
        }
        s->map = m;
        s->files_cap = cap;
    }
    memset(s->used, 0, s->files_cap);
    memset(s->enc, 0, n * sizeof *s->enc);
    return UR_OK;
}

/* A table holding the writer files in `used` (flags), and the writer->table index map. */
int ur_ocdbt_write__make_table(ocdbt_writer *w, const uint8_t *used, ur_ocdbt_table *t,
                               uint32_t *map, ur_err *err)
{
    size_t k = 0;
    t->n = 0;
    t->f = NULL;
    for (size_t i = 0; i < w->n_files; i++) {
        k += used[i] ? 1 : 0;
    }
    if (k == 0) {
        return UR_OK;
    }
    t->f = ur_calloc(k, sizeof *t->f);
    if (t->f == NULL) {
        return ur_err_oom(err);
    }
    /* Sorted by (base, relative path); full paths are distinct, so found again by name. */
    for (size_t i = 0; i < w->n_files; i++) {
        if (!used[i]) {
            continue;
        }
        t->f[t->n].path = ur_strdup(w->files[i]);
        if (t->f[t->n].path == NULL) {
            ur_ocdbt_table_dispose(t);
            return ur_err_oom(err);
        }
        t->f[t->n].len = strlen(w->files[i]);
        t->f[t->n].base_len = w->file_base[i];
        t->n++;
    }
    ur_ocdbt_table_sort(t);
    for (size_t i = 0; i < w->n_files; i++) {
        for (size_t j = 0; used[i] && j < t->n; j++) {
            if (strcmp(t->f[j].path, w->files[i]) == 0) {
                map[i] = (uint32_t)j;
            }
        }
    }
    return UR_OK;
}

/* Encode the node in s->enc[0..n) (entries already relative), envelope it, append it; *ref
 * gets its place. */
static int emit_node(ocdbt_writer *w, uint8_t height, wscratch *s, size_t n, ur_ocdbt_ref *ref,
                     ur_err *err)
{
    ur_ocdbt_btree_enc_entry *enc = s->enc;
    ur_ocdbt_table t = {0, NULL};
    uint32_t file = 0;
    int rc;

    ur_buf_reset(&s->body);
    ur_buf_reset(&s->obj);
    rc = ur_ocdbt_write__make_table(w, s->used, &t, s->map, err);
    if (rc == UR_OK) {
        for (size_t i = 0; i < n; i++) {
            if (height > 0 || enc[i].indirect) {
                enc[i].ref.file = s->map[enc[i].ref.file];
            }
        }
        rc = ur_ocdbt_btree_encode(&s->body, height, &t, enc, n, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_codec_encode(&s->obj, UR_OCDBT_MAGIC_BTREE, s->body.data, s->body.len,
                                   w->opts.compress, w->opts.zstd_level, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_write__append_data(w, s->obj.data, s->obj.len, &file, &ref->offset, err);
        ref->file = file;
        ref->length = s->obj.len;
    }
    ur_ocdbt_table_dispose(&t);
    return rc;
}

/* TensorStore's estimate of an entry's decoded size, in a leaf and in an interior node. */
static uint64_t leaf_est(const wentry *e)
{
    return e->klen + 16 + (e->indirect ? 16 + 34 : wentry_len(e));
}

static uint64_t item_est(const witem *it)
{
    return it->klen + 56 + 34;
}

static uint64_t node_cut(const ocdbt_writer *w)
{
    return w->opts.max_decoded_node_bytes < NODE_CUT_BYTES ? w->opts.max_decoded_node_bytes
                                                           : NODE_CUT_BYTES;
}

/* Whether a group of `count` entries of estimated `size` is complete before an entry of
 * estimated `next`. */
static int group_full(size_t count, uint64_t size, uint64_t next, uint64_t max, size_t min_arity)
{
    return count >= UR_OCDBT_MAX_NODE_ENTRIES || (count >= min_arity && size + next > max);
}

/* Where the leaf starting at entry e[start] (of n) ends, leaves cut at `max`. */
static size_t leaf_end(const wentry *e, size_t n, size_t start, uint64_t max)
{
    uint64_t size = 0;
    size_t i = start;
    while (i < n && !group_full(i - start, size, leaf_est(&e[i]), max, 1)) {
        size += leaf_est(&e[i]);
        i++;
    }
    return i;
}

/* Where the interior node over items[start..) ends, nodes cut at `max`. */
static size_t level_end(const witem *items, size_t start, size_t n, uint64_t max)
{
    uint64_t size = 0;
    size_t i = start;
    while (i < n && !group_full(i - start, size, item_est(&items[i]), max, 2)) {
        size += item_est(&items[i]);
        i++;
    }
    return i;
}

/* The size nodes are cut at: the node cut, or, when `even` (nodes a commit over the base tree
 * rewrites), the size that cuts the group into as many nodes as the node cut would, about
 * equally full. A node a commit overflows by a few entries so splits into halves that leave
 * room for the next commits, rather than into a full node and a tiny one (keys arriving in
 * order would otherwise leave a tiny node behind at every commit). */
static uint64_t leaf_cut(const ocdbt_writer *w, const wentry *e, size_t n, int even)
{
    uint64_t max = node_cut(w), total = 0;
    size_t k = 0;
    for (size_t start = 0; even && start < n; k++) {
        start = leaf_end(e, n, start, max);
    }
    for (size_t i = 0; k > 1 && i < n; i++) {
        total += leaf_est(&e[i]);
    }
    return k > 1 ? (total + k - 1) / k : max;
}

static uint64_t level_cut(const ocdbt_writer *w, const witem *items, size_t n, int even)
{
    uint64_t max = node_cut(w), total = 0;
    size_t k = 0;
    for (size_t start = 0; even && start < n; k++) {
        start = level_end(items, start, n, max);
    }
    for (size_t i = 0; k > 1 && i < n; i++) {
        total += item_est(&items[i]);
    }
    return k > 1 ? (total + k - 1) / k : max;
}

static void add_stats(ur_ocdbt_stats *s, const ur_ocdbt_stats *a)
{
    s->num_keys += a->num_keys;
    s->num_tree_bytes += a->num_tree_bytes;
    s->num_indirect_value_bytes += a->num_indirect_value_bytes;
}

/* The items of one tree level, in key order. */
typedef struct {
    witem *v;
    size_t n, cap;
} witems;

/* A new zeroed item at the end of l, or NULL when out of memory. */
static witem *next_item(witems *l)
{
    witem *it = ur_grow(l->v, &l->cap, l->n, sizeof *it, 64);
    if (it == NULL) {
        return NULL;
    }
    l->v = it;
    it = &l->v[l->n++];
    memset(it, 0, sizeof *it);
    return it;
}

/* Write the leaves of the sorted entries e[0..n) and append one item per leaf to *out.
 * `root`: they may make the tree's root, and *is_root says they did (one leaf, written with
 * no prefix left out, as a root must be). `even`: see leaf_cut. */
static int write_leaves(ocdbt_writer *w, wscratch *s, const wentry *e, size_t n, int root,
                        int even, witems *out, int *is_root, ur_err *err)
{
    uint64_t max = leaf_cut(w, e, n, even);
    int rc = UR_OK;

    *is_root = root && leaf_end(e, n, 0, node_cut(w)) == n;
    for (size_t start = 0; start < n && rc == UR_OK;) {
        size_t end = leaf_end(e, n, start, max);
        size_t pl = *is_root ? 0
                             : lcp(e[start].key, e[start].klen, e[end - 1].key, e[end - 1].klen);
        witem *it = next_item(out);
        rc = it != NULL ? scratch_ready(s, w, end - start, err) : ur_err_oom(err);
        if (rc != UR_OK) {
            break;
        }
        for (size_t i = start; i < end; i++) {
            ur_ocdbt_btree_enc_entry *x = &s->enc[i - start];
            x->key = e[i].key + pl;
            x->key_len = e[i].klen - pl;
            x->indirect = e[i].indirect;
            x->value = e[i].value;
            x->value_len = wentry_len(&e[i]);
            if (e[i].indirect) {
                x->ref.file = e[i].file;
                x->ref.offset = e[i].offset;
                x->ref.length = x->value_len;
                s->used[e[i].file] = 1;
                it->stats.num_indirect_value_bytes += x->value_len;
            }
        }
        it->key = e[start].key;
        it->klen = e[start].klen;
        it->child_prefix = pl;
        it->stats.num_keys = end - start;
        rc = emit_node(w, 0, s, end - start, &it->ref, err);
        it->stats.num_tree_bytes = it->ref.length;
        start = end;
    }
    return rc;
}

/* Write one interior level over items[0..n); the parents replace them in place. `root`,
 * `even` and *is_root as for write_leaves. */
static int write_level(ocdbt_writer *w, wscratch *s, uint8_t height, witem *items, size_t *n_items,
                       int root, int even, int *is_root, ur_err *err)
{
    size_t n = *n_items, k = 0;
    uint64_t max = level_cut(w, items, n, even);
    int rc = UR_OK;

    *is_root = root && level_end(items, 0, n, node_cut(w)) == n;
    for (size_t start = 0; start < n && rc == UR_OK;) {
        size_t end = level_end(items, start, n, max);
        size_t pl = 0;
        witem parent;
        memset(&parent, 0, sizeof parent);
        if (!*is_root) {
            pl = lcp(items[start].key, items[start].klen, items[end - 1].key, items[end - 1].klen);
            for (size_t i = start; i < end; i++) {
                pl = items[i].child_prefix < pl ? items[i].child_prefix : pl;
            }
        }
        rc = scratch_ready(s, w, end - start, err);
        if (rc != UR_OK) {
            break;
        }
        for (size_t i = start; i < end; i++) {
            ur_ocdbt_btree_enc_entry *x = &s->enc[i - start];
            x->key = items[i].key + pl;
            x->key_len = items[i].klen - pl;
            x->subtree_prefix_len = items[i].child_prefix - pl;
            x->ref = items[i].ref;
            x->stats = items[i].stats;
            s->used[items[i].ref.file] = 1;
            add_stats(&parent.stats, &items[i].stats);
        }
        parent.key = items[start].key;
        parent.klen = items[start].klen;
        parent.child_prefix = pl;
        rc = emit_node(w, height, s, end - start, &parent.ref, err);
        parent.stats.num_tree_bytes += parent.ref.length;
        items[k++] = parent; /* k <= start: never overwrites an unread item */
        start = end;
    }
    *n_items = k;
    return rc;
}

/* Write levels above the items of height `height` until one root remains (none when
 * is_root: the items are one root already); *root_height gets its height. */
static int build_up(ocdbt_writer *w, wscratch *s, witems *items, uint8_t height, int is_root,
                    uint8_t *root_height, ur_err *err)
{
    int rc = UR_OK;
    while (rc == UR_OK && !is_root) {
        if (height == 255) {
            return ur_err_set(err, UR_EINTERNAL, "btree too high");
        }
        height++;
        rc = write_level(w, s, height, items->v, &items->n, 1, 0, &is_root, err);
    }
    *root_height = height;
    return rc;
}

/* ---- a commit over the base tree (copy on write) ----
 *
 * The entries written since the last commit are merged into the latest version's tree as
 * TensorStore's writer does it: a subtree no new key falls in is referred to as it is, a node
 * some fall in is read back and written anew (a leaf merged with its new entries, a new entry
 * replacing an old one of the same key; an interior node over its kept and rewritten
 * children), split where it outgrows the cut. A commit so writes the leaves its keys land in
 * and the nodes above them, not the whole tree, and nothing written before is changed. */
typedef struct {
    ocdbt_writer *w;
    ur_ocdbt_reader *r;
    wscratch *s;
    ur_buf prefix;  /* the implicit prefix of the node being updated */
    wentry *merged; /* a leaf's old and new entries */
    size_t merged_cap;
} wupdate;

/* a <=> p || k */
static int cmp_joined(const uint8_t *a, size_t an, const uint8_t *p, size_t pn, const uint8_t *k,
                      size_t kn)
{
    size_t m = an < pn ? an : pn;
    int c = m > 0 ? memcmp(a, p, m) : 0;
    if (c != 0 || an < pn) {
        return c != 0 ? c : -1;
    }
    a += pn;
    an -= pn;
    m = an < kn ? an : kn;
    c = m > 0 ? memcmp(a, k, m) : 0;
    if (c != 0) {
        return c;
    }
    return an < kn ? -1 : an > kn;
}

/* The full key prefix || k of an entry read back, kept until the commit ends. */
static const uint8_t *keep_key(wupdate *u, const uint8_t *k, size_t kn, uint16_t *len, ur_err *err)
{
    size_t pn = u->prefix.len;
    uint8_t *c;
    if (pn + kn > UR_OCDBT_MAX_KEY) {
        ur_err_set(err, UR_ECORRUPT, "%s: a key of the base tree is longer than %u", u->w->dir,
                   UR_OCDBT_MAX_KEY);
        return NULL;
    }
    c = ur_ocdbt_write__keep_in(&u->w->tmp, pn + kn > 0 ? pn + kn : 1);
    if (c == NULL) {
        ur_err_oom(err);
        return NULL;
    }
    if (pn > 0) {
        memcpy(c, u->prefix.data, pn);
    }
    if (kn > 0) {
        memcpy(c + pn, k, kn);
    }
    *len = (uint16_t)(pn + kn);
    return c;
}

/* Leaf entry e of node n (implicit prefix u->prefix) as a writer entry. */
static int old_entry(wupdate *u, const ur_ocdbt_btree_node *n, const ur_ocdbt_btree_entry *e,
                     wentry *x, ur_err *err)
{
    memset(x, 0, sizeof *x);
    x->key = keep_key(u, n->keys + e->key_off, e->key_len, &x->klen, err);
    if (x->key == NULL) {
        return err->code;
    }
    if (wentry_set_len(x, e->value_len) < 0) {
        return ur_err_set(err, UR_EUNSUPPORTED, "%s: a value of 1 TiB or more in the base tree",
                          u->w->dir);
    }
    x->indirect = e->indirect;
    if (e->indirect) {
        x->offset = e->ref.offset;
        return ur_ocdbt_write__file_index(u->w, &n->table.f[e->ref.file], &x->file, err);
    }
    x->value = n->values.data + e->value_off; /* the node is held until its leaves are written */
    return UR_OK;
}

/* The leaf n merged with the new entries w->e[lo..hi), written as leaves appended to out. */
static int merge_leaf(wupdate *u, const ur_ocdbt_btree_node *n, size_t lo, size_t hi, int root,
                      witems *out, int *is_root, ur_err *err)
{
    const wentry *ne = u->w->e;
    size_t need = n->n + (hi - lo), k = 0, i = 0, j = lo;
    int rc = UR_OK;

    if (need > u->merged_cap) {
        wentry *m = ur_grow_to(u->merged, &u->merged_cap, need, sizeof *m);
        if (m == NULL) {
            return ur_err_oom(err);
        }
        u->merged = m;
    }
    while ((i < n->n || j < hi) && rc == UR_OK) {
        int c = 1; /* > 0: the new entry first; 0: it replaces the old one; < 0: the old */
        if (i < n->n && j == hi) {
            c = -1;
        } else if (i < n->n) {
            c = -cmp_joined(ne[j].key, ne[j].klen, u->prefix.data, u->prefix.len,
                            n->keys + n->e[i].key_off, n->e[i].key_len);
        }
        if (c >= 0) {
            u->merged[k++] = ne[j++];
            i += c == 0;
        } else {
            rc = old_entry(u, n, &n->e[i++], &u->merged[k++], err);
        }
    }
    return rc == UR_OK ? write_leaves(u->w, u->s, u->merged, k, root, 1, out, is_root, err) : rc;
}

/* Child entry e of node n, left as it is, as an item. */
static int keep_child(wupdate *u, const ur_ocdbt_btree_node *n, const ur_ocdbt_btree_entry *e,
                      witems *kids, ur_err *err)
{
    witem *it = next_item(kids);
    uint16_t len = 0;
    uint32_t file = 0;
    if (it == NULL) {
        return ur_err_oom(err);
    }
    it->key = keep_key(u, n->keys + e->key_off, e->key_len, &len, err);
    if (it->key == NULL) {
        return err->code;
    }
    it->klen = len;
    it->child_prefix = u->prefix.len + e->subtree_prefix_len;
    it->ref = e->ref;
    it->stats = n->stats[e - n->e];
    if (ur_ocdbt_write__file_index(u->w, &n->table.f[e->ref.file], &file, err) < 0) {
        return err->code;
    }
    it->ref.file = file;
    return UR_OK;
}

/* The nodes replacing the subtree at `ref` of `file` (height h, implicit prefix u->prefix)
 * once the new entries w->e[lo..hi) (all in its key range) are merged in, appended to out as
 * items of height h. `root` and *is_root as for write_leaves. */
static int update_node(wupdate *u, const ur_ocdbt_file_id *file, const ur_ocdbt_ref *ref, int h,
                       size_t lo, size_t hi, int root, witems *out, int *is_root, ur_err *err)
{
    const wentry *ne = u->w->e;
    ur_ocdbt_cnode *cn = NULL;
    const ur_ocdbt_btree_node *n;
    witems kids = {NULL, 0, 0};
    size_t base = u->prefix.len, at = lo;
    int rc = ur_ocdbt_read__btree_node(u->r, file, ref, h, &cn, err);

    if (rc < 0) {
        return rc;
    }
    n = ur_ocdbt_read__node(cn);
    if (h == 0) {
        rc = merge_leaf(u, n, lo, hi, root, out, is_root, err);
        ur_ocdbt_read__release(u->r, cn);
        return rc;
    }
    for (size_t i = 0; i < n->n && rc == UR_OK; i++) {
        const ur_ocdbt_btree_entry *e = &n->e[i], *next = i + 1 < n->n ? &n->e[i + 1] : NULL;
        size_t end = at;
        int ignored;
        /* child i takes the new keys below child i + 1's first key (the first child also
         * those below its own) */
        while (end < hi &&
               (next == NULL || cmp_joined(ne[end].key, ne[end].klen, u->prefix.data, base,
                                           n->keys + next->key_off, next->key_len) < 0)) {
            end++;
        }
        if (end == at) {
            rc = keep_child(u, n, e, &kids, err);
            continue;
        }
        rc = ur_buf_append(&u->prefix, n->keys + e->key_off, e->subtree_prefix_len, err);
        if (rc == UR_OK) {
            rc = update_node(u, &n->table.f[e->ref.file], &e->ref, h - 1, at, end, 0, &kids,
                             &ignored, err);
        }
        u->prefix.len = base;
        at = end;
    }
    if (rc == UR_OK) {
        rc = write_level(u->w, u->s, (uint8_t)h, kids.v, &kids.n, root, 1, is_root, err);
    }
    for (size_t i = 0; i < kids.n && rc == UR_OK; i++) {
        witem *it = next_item(out);
        rc = it != NULL ? UR_OK : ur_err_oom(err);
        if (it != NULL) {
            *it = kids.v[i];
        }
    }
    ur_free(kids.v);
    ur_ocdbt_read__release(u->r, cn);
    return rc;
}

/* The tree of `base` with w->e[0..n) merged in: its root in items (one), its height in
 * *height. */
static int update_tree(ocdbt_writer *w, wscratch *s, ur_ocdbt_reader *r,
                       const ur_ocdbt_version *base, witems *items, uint8_t *height, ur_err *err)
{
    wupdate u;
    ur_ocdbt_file_id fid;
    int rc, is_root = 0;

    memset(&u, 0, sizeof u);
    u.w = w;
    u.r = r;
    u.s = s;
    ur_buf_init(&u.prefix, 0);
    fid.path = w->files[base->root.file];
    fid.len = strlen(fid.path);
    fid.base_len = w->file_base[base->root.file];
    rc = update_node(&u, &fid, &base->root, base->root_height, 0, w->n, 1, items, &is_root, err);
    if (rc == UR_OK) {
        rc = build_up(w, s, items, base->root_height, is_root, height, err);
    }
    ur_buf_dispose(&u.prefix);
    ur_free(u.merged);
    return rc;
}

/* The root of this commit's tree in *v: the base tree (the latest version's) with the
 * entries w->e[0..n) merged in, or these entries alone, or the missing root of an empty
 * database. */
int ur_ocdbt_write__tree(ocdbt_writer *w, ur_ocdbt_reader *r, ur_ocdbt_version *v, ur_err *err)
{
    const ur_ocdbt_version *base = w->n_vers > 0 ? &w->vers[w->n_vers - 1] : NULL;
    int has_base = base != NULL && !ur_ocdbt_ref_is_missing(&base->root);
    wscratch s;
    witems items = {NULL, 0, 0};
    int rc = UR_OK, is_root = 0;

    if (w->n == 0) {
        uint32_t empty = 0;
        if (has_base) {
            *v = *base;
            return UR_OK;
        }
        v->root.offset = UINT64_MAX;
        v->root.length = UINT64_MAX;
        rc = ur_ocdbt_write__ext_file(w, "", "", &empty, err);
        v->root.file = empty;
        return rc;
    }
    memset(&s, 0, sizeof s);
    ur_buf_init(&s.body, 0);
    ur_buf_init(&s.obj, 0);
    if (has_base) {
        rc = update_tree(w, &s, r, base, &items, &v->root_height, err);
    } else {
        rc = write_leaves(w, &s, w->e, w->n, 1, 0, &items, &is_root, err);
        if (rc == UR_OK) {
            rc = build_up(w, &s, &items, 0, is_root, &v->root_height, err);
        }
    }
    if (rc == UR_OK && items.n != 1) {
        rc = ur_err_set(err, UR_EINTERNAL, "%s: %zu roots", w->dir, items.n);
    }
    if (rc == UR_OK) {
        v->root = items.v[0].ref;
        v->stats = items.v[0].stats;
    }
    scratch_dispose(&s);
    ur_free(items.v);
    return rc;
}
