/* OCDBT writer: a new single-version database as a write-only ur_kvstore.
 *
 * ur_kvstore_write: a value longer than max_inline_value_bytes is appended at once to the
 * current data file d/<32 hex> (a new file past target_data_file_size); shorter values are
 * kept in memory with the key index. ur_kvstore_commit: sort the keys (the last write of a key
 * wins), cut them into leaves of about min(max_decoded_node_bytes, 1 MiB) (TensorStore's
 * estimate of a decoded entry), build interior levels the same way until one root remains,
 * append every node (zstd when asked) to the data files as it is encoded, fsync them, then write
 * manifest.ocdbt (temp file
 * + rename + directory fsync), last. Spec §10 (invariants), §6.5 (statistics). */
#define _POSIX_C_SOURCE 200809L
#include "../kvstore_impl.h" /* OCDBT is a kvstore driver: it fills in the vtable */
#include "ocdbt_format.h"

#include "unroll/alloc.h"
#include "unroll/appendfile.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"
#include "unroll/strmap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TARGET_FILE_SIZE ((uint64_t)2 << 30)
#define DEFAULT_HELD_INLINE ((uint64_t)64 << 20)
/* Inline values at least this long are held once however often they are written (every array
 * of a shape has the same zarr.json: 32,000 arrays hold 15 MB of copies); below it a pool slot
 * costs about as much as the value. */
#define POOL_MIN_VALUE 64

typedef struct {
    uint8_t *key;
    size_t klen;
    size_t seq;
    int indirect;
    int shared;     /* value belongs to the writer's pool of values, not to the entry */
    uint64_t len;
    uint8_t *value; /* inline */
    uint32_t file;  /* indirect */
    uint64_t offset;
} wentry;

/* One entry of a tree level: a node written below, seen from its parent. */
typedef struct {
    const uint8_t *key; /* full first key of the subtree (borrowed from the wentries) */
    size_t klen;
    size_t child_prefix; /* length of the child's implicit prefix (absolute) */
    ur_ocdbt_ref ref;    /* file = writer file index */
    ur_ocdbt_stats stats;
} witem;

typedef struct {
    ur_kvstore base;
    char *dir;
    ur_ocdbt_write_opts opts;
    ur_ocdbt_config config;
    wentry *e;
    size_t n, cap;
    char **files; /* "d/<32 hex>", or base + relative path of a file referred to */
    size_t *file_base; /* length of each file's base path (0 for the writer's own) */
    size_t n_files;
    ur_strmap ext_files; /* referred-to file path -> index in files */
    ur_appendfile *cur; /* the data file being appended to, or NULL */
    int committed;
    int committing; /* data files closed from now on hold nodes: not handed to on_data_file */
    uint64_t held;     /* bytes of inline values held for e[] */
    ur_strmap values;  /* pool: an inline value's bytes -> its one copy (value = pointer) */
    uint64_t seed_state; /* 0: random ids; else the splitmix64 state */
} ocdbt_writer;

void ur_ocdbt_write_opts_init(ur_ocdbt_write_opts *opts)
{
    opts->target_data_file_size = DEFAULT_TARGET_FILE_SIZE;
    opts->max_inline_value_bytes = 1024;
    opts->max_decoded_node_bytes = 100000000;
    opts->compress = 1;
    opts->zstd_level = 0;
    opts->seed = 0;
    opts->max_held_inline_bytes = DEFAULT_HELD_INLINE;
    opts->resume = 0;
    opts->on_data_file = NULL;
    opts->on_data_file_ctx = NULL;
}

/* splitmix64: a well-mixed sequence from a seed, for reproducible ids. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int random_bytes(uint8_t *p, size_t n, ur_err *err)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    int rc;
    if (fd < 0) {
        return ur_err_set_os(err, UR_EIO, errno, "/dev/urandom", "cannot open");
    }
    rc = ur_fs_pread_full(fd, p, n, 0, "/dev/urandom", err);
    close(fd);
    return rc;
}

/* Random bytes, or the next bytes of the seeded sequence when the caller asked for
 * reproducible output. */
static int id_bytes(ocdbt_writer *w, uint8_t *p, size_t n, ur_err *err)
{
    if (w->seed_state == 0) {
        return random_bytes(p, n, err);
    }
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = splitmix64(&w->seed_state);
        for (size_t k = 0; k < 8 && i + k < n; k++) {
            p[i + k] = (uint8_t)(v >> (8 * k));
        }
    }
    return UR_OK;
}

static int close_data_file(ocdbt_writer *w, ur_err *err)
{
    ur_appendfile *f = w->cur;
    w->cur = NULL;
    return f != NULL ? ur_appendfile_finish(f, err) : UR_OK;
}

/* Room for one more entry in files / file_base. */
static int grow_files(ocdbt_writer *w, ur_err *err)
{
    char **files = ur_realloc(w->files, (w->n_files + 1) * sizeof *files);
    size_t *base;
    if (files == NULL) {
        return ur_err_oom(err);
    }
    w->files = files;
    base = ur_realloc(w->file_base, (w->n_files + 1) * sizeof *base);
    if (base == NULL) {
        return ur_err_oom(err);
    }
    w->file_base = base;
    return UR_OK;
}

/* The data file just closed (the last of files[]) to opts.on_data_file, before the commit. */
static int hand_over(ocdbt_writer *w, ur_err *err)
{
    if (w->opts.on_data_file == NULL || w->committing || w->n_files == 0) {
        return UR_OK;
    }
    return w->opts.on_data_file(w->opts.on_data_file_ctx, w->dir, w->files[w->n_files - 1], err);
}

static int new_data_file(ocdbt_writer *w, ur_err *err)
{
    uint8_t rnd[16];
    char name[40], *path;
    int had = w->cur != NULL;
    int rc = close_data_file(w, err);

    if (rc == UR_OK && had) {
        rc = hand_over(w, err);
    }
    if (rc < 0) {
        return rc;
    }
    rc = id_bytes(w, rnd, sizeof rnd, err);
    if (rc < 0) {
        return rc;
    }
    memcpy(name, "d/", 2);
    for (int i = 0; i < 16; i++) {
        static const char hex[] = "0123456789abcdef";
        name[2 + 2 * i] = hex[rnd[i] >> 4];
        name[3 + 2 * i] = hex[rnd[i] & 15];
    }
    name[34] = '\0';
    rc = grow_files(w, err);
    if (rc < 0) {
        return rc;
    }
    w->file_base[w->n_files] = 0;
    w->files[w->n_files] = ur_strdup(name);
    path = ur_path_join(w->dir, name);
    if (w->files[w->n_files] == NULL || path == NULL) {
        ur_free(w->files[w->n_files]);
        ur_free(path);
        return ur_err_oom(err);
    }
    if (ur_fs_exists(path)) { /* a resumed database's file: draw another name */
        ur_free(w->files[w->n_files]);
        ur_free(path);
        return new_data_file(w, err);
    }
    rc = ur_appendfile_create(&w->cur, path, err);
    if (rc < 0) {
        ur_free(w->files[w->n_files]);
    } else {
        w->n_files++;
    }
    ur_free(path);
    return rc;
}

/* Append n bytes to the data files; where they landed in *file / *offset. */
static int append_data(ocdbt_writer *w, const void *p, size_t n, uint32_t *file, uint64_t *offset,
                       ur_err *err)
{
    int rc;
    uint64_t at = w->cur != NULL ? ur_appendfile_size(w->cur) : 0;
    if (w->cur == NULL || (at > 0 && at + n > w->opts.target_data_file_size)) {
        rc = new_data_file(w, err);
        if (rc < 0) {
            return rc;
        }
        at = 0;
    }
    rc = ur_appendfile_write(w->cur, p, n, err);
    if (rc < 0) {
        return rc;
    }
    *file = (uint32_t)(w->n_files - 1);
    *offset = at;
    return UR_OK;
}

/* Hold the n > 0 bytes at data as e's inline value: a copy, or the pool's when it has them. */
static int hold_value(ocdbt_writer *w, wentry *e, const void *data, size_t n, ur_err *err)
{
    size_t at = 0;
    uint8_t *copy;
    if (n >= POOL_MIN_VALUE && ur_strmap_get(&w->values, data, n, &at) == 1) {
        e->value = (uint8_t *)(uintptr_t)at;
        e->shared = 1;
        return UR_OK;
    }
    copy = ur_malloc(n);
    if (copy == NULL) {
        return ur_err_oom(err);
    }
    memcpy(copy, data, n);
    if (n >= POOL_MIN_VALUE) {
        int rc = ur_strmap_put(&w->values, (const char *)copy, n, (size_t)(uintptr_t)copy, NULL,
                               err);
        if (rc < 0) {
            ur_free(copy);
            return rc;
        }
        e->shared = 1;
    }
    e->value = copy;
    w->held += n;
    return UR_OK;
}

/* A zeroed entry at the end of w's table (not yet counted in w->n), for a key of klen bytes;
 * NULL with *rc set when the key is too long or memory runs out. */
static wentry *next_entry(ocdbt_writer *w, size_t klen, int *rc, ur_err *err)
{
    wentry *e;
    if (klen > UR_OCDBT_MAX_KEY) {
        *rc = ur_err_set(err, UR_EINVAL, "key of %zu bytes is longer than %u", klen,
                         UR_OCDBT_MAX_KEY);
        return NULL;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 256;
        wentry *ne = ur_realloc(w->e, cap * sizeof *ne);
        if (ne == NULL) {
            *rc = ur_err_oom(err);
            return NULL;
        }
        w->e = ne;
        w->cap = cap;
    }
    e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    return e;
}

static int w_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    size_t klen = strlen(key);
    wentry *e = NULL;
    int rc;

    if (w->committed) {
        return ur_err_set(err, UR_EINTERNAL, "%s: already committed", kv->desc);
    }
    e = next_entry(w, klen, &rc, err);
    if (e == NULL) {
        return rc;
    }
    e->key = (uint8_t *)ur_strndup(key, klen);
    if (e->key == NULL) {
        return ur_err_oom(err);
    }
    e->klen = klen;
    e->seq = w->n;
    e->len = n;
    /* A small value is kept for its B+tree leaf only while the values kept so far stay
     * within the budget (a few-KB input can declare millions of small chunks). */
    if (n > w->opts.max_inline_value_bytes || w->held + n > w->opts.max_held_inline_bytes) {
        e->indirect = 1;
        rc = append_data(w, data, n, &e->file, &e->offset, err);
    } else if (n > 0) {
        rc = hold_value(w, e, data, n, err);
    } else {
        rc = UR_OK;
    }
    if (rc < 0) { /* nothing was held */
        ur_free(e->key);
        return rc;
    }
    w->n++;
    return UR_OK;
}

static const ur_kvstore_ops writer_ops;

/* The index of the referred-to file base + rel in w->files, added when new. */
static int ext_file(ocdbt_writer *w, const char *base, const char *rel, uint32_t *index,
                    ur_err *err)
{
    size_t bl = strlen(base), rl = strlen(rel), at = 0;
    char *path = ur_malloc(bl + rl + 1);
    int rc;

    if (path == NULL) {
        return ur_err_oom(err);
    }
    memcpy(path, base, bl);
    memcpy(path + bl, rel, rl + 1);
    if (ur_strmap_get(&w->ext_files, path, bl + rl, &at) == 1) {
        ur_free(path);
        *index = (uint32_t)at;
        return UR_OK;
    }
    rc = grow_files(w, err);
    if (rc == UR_OK) {
        rc = ur_strmap_put(&w->ext_files, path, bl + rl, w->n_files, NULL, err);
    }
    if (rc < 0) {
        ur_free(path);
        return rc;
    }
    w->files[w->n_files] = path;
    w->file_base[w->n_files] = bl;
    *index = (uint32_t)w->n_files++;
    return UR_OK;
}

int ur_ocdbt_writer_put_ref(ur_kvstore *kv, const uint8_t *key, size_t klen, const char *base,
                            const char *rel, uint64_t offset, uint64_t length, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    wentry *e = NULL;
    int rc;

    if (kv == NULL || kv->ops != &writer_ops || w->committed) {
        return ur_err_set(err, UR_EINTERNAL, "put_ref needs an uncommitted OCDBT writer");
    }
    e = next_entry(w, klen, &rc, err);
    if (e == NULL) {
        return rc;
    }
    rc = ext_file(w, base, rel, &e->file, err);
    if (rc < 0) {
        return rc;
    }
    e->key = ur_malloc(klen ? klen : 1);
    if (e->key == NULL) {
        return ur_err_oom(err);
    }
    memcpy(e->key, key, klen);
    e->klen = klen;
    e->seq = w->n;
    e->len = length;
    e->indirect = 1;
    e->offset = offset;
    w->n++;
    return UR_OK;
}

static int cmp_wentry(const void *a, const void *b)
{
    const wentry *x = a, *y = b;
    size_t m = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, m);
    if (c != 0) {
        return c;
    }
    if (x->klen != y->klen) {
        return x->klen < y->klen ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : 1;
}

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
        ur_ocdbt_btree_enc_entry *e = ur_realloc(s->enc, n * sizeof *e);
        if (e == NULL) {
            return ur_err_oom(err);
        }
        s->enc = e;
        s->enc_cap = n;
    }
    if (nf > s->files_cap) {
        size_t cap = nf * 2;
        uint8_t *u = ur_realloc(s->used, cap);
        uint32_t *m;
        if (u == NULL) {
            return ur_err_oom(err);
        }
        s->used = u;
        m = ur_realloc(s->map, cap * sizeof *m);
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
static int make_table(ocdbt_writer *w, const uint8_t *used, ur_ocdbt_table *t, uint32_t *map,
                      ur_err *err)
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
    rc = make_table(w, s->used, &t, s->map, err);
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
        rc = append_data(w, s->obj.data, s->obj.len, &file, &ref->offset, err);
        ref->file = file;
        ref->length = s->obj.len;
    }
    ur_ocdbt_table_dispose(&t);
    return rc;
}

/* TensorStore's estimate of an entry's decoded size, in a leaf and in an interior node. */
static uint64_t leaf_est(const wentry *e)
{
    return e->klen + 16 + (e->indirect ? 16 + 34 : e->len);
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

/* Where the leaf starting at entry `start` ends. */
static size_t leaf_end(const ocdbt_writer *w, size_t start)
{
    uint64_t size = 0, max = node_cut(w);
    size_t i = start;
    while (i < w->n && !group_full(i - start, size, leaf_est(&w->e[i]), max, 1)) {
        size += leaf_est(&w->e[i]);
        i++;
    }
    return i;
}

/* Where the interior node over items[start..) ends. */
static size_t level_end(const ocdbt_writer *w, const witem *items, size_t start, size_t n)
{
    uint64_t size = 0, max = node_cut(w);
    size_t i = start;
    while (i < n && !group_full(i - start, size, item_est(&items[i]), max, 2)) {
        size += item_est(&items[i]);
        i++;
    }
    return i;
}

static void add_stats(ur_ocdbt_stats *s, const ur_ocdbt_stats *a)
{
    s->num_keys += a->num_keys;
    s->num_tree_bytes += a->num_tree_bytes;
    s->num_indirect_value_bytes += a->num_indirect_value_bytes;
}

/* A new zeroed slot at the end of *items (*n of them, room for *cap), or NULL when out of
 * memory. */
static witem *next_item(witem **items, size_t *n, size_t *cap)
{
    witem *it;
    if (*items == NULL || *n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        witem *p = ur_realloc(*items, c * sizeof *p);
        if (p == NULL) {
            return NULL;
        }
        *items = p;
        *cap = c;
    }
    it = &(*items)[(*n)++];
    memset(it, 0, sizeof *it);
    return it;
}

/* Write the leaves of entries e[0..n): one witem per leaf into *items. */
static int write_leaves(ocdbt_writer *w, wscratch *s, witem **items, size_t *n_items,
                        size_t *items_cap, int *is_root, ur_err *err)
{
    size_t n = w->n, k = 0;
    int rc = UR_OK;

    *is_root = leaf_end(w, 0) == n;
    for (size_t start = 0; start < n && rc == UR_OK;) {
        size_t end = leaf_end(w, start);
        size_t pl = *is_root ? 0
                             : lcp(w->e[start].key, w->e[start].klen, w->e[end - 1].key,
                                   w->e[end - 1].klen);
        witem *it = next_item(items, &k, items_cap);
        rc = it != NULL ? scratch_ready(s, w, end - start, err) : ur_err_oom(err);
        if (rc != UR_OK) {
            break;
        }
        for (size_t i = start; i < end; i++) {
            const wentry *e = &w->e[i];
            ur_ocdbt_btree_enc_entry *x = &s->enc[i - start];
            x->key = e->key + pl;
            x->key_len = e->klen - pl;
            x->indirect = e->indirect;
            x->value = e->value;
            x->value_len = e->len;
            if (e->indirect) {
                x->ref.file = e->file;
                x->ref.offset = e->offset;
                x->ref.length = e->len;
                s->used[e->file] = 1;
                it->stats.num_indirect_value_bytes += e->len;
            }
        }
        it->key = w->e[start].key;
        it->klen = w->e[start].klen;
        it->child_prefix = pl;
        it->stats.num_keys = end - start;
        rc = emit_node(w, 0, s, end - start, &it->ref, err);
        it->stats.num_tree_bytes = it->ref.length;
        start = end;
    }
    *n_items = k;
    return rc;
}

/* Write one interior level over items[0..n); the parents replace them in place. */
static int write_level(ocdbt_writer *w, wscratch *s, uint8_t height, witem *items, size_t *n_items,
                       int *is_root, ur_err *err)
{
    size_t n = *n_items, k = 0;
    int rc = UR_OK;

    *is_root = level_end(w, items, 0, n) == n;
    for (size_t start = 0; start < n && rc == UR_OK;) {
        size_t end = level_end(w, items, start, n);
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

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int write_manifest(ocdbt_writer *w, const ur_ocdbt_version *v, const char *root_file,
                          ur_err *err)
{
    ur_ocdbt_manifest m;
    ur_ocdbt_file_id fid;
    ur_buf body, obj;
    char *tmp = NULL, *path = NULL;
    int rc;

    memset(&m, 0, sizeof m);
    m.config = w->config;
    fid.path = (char *)(uintptr_t)root_file;
    fid.len = strlen(root_file);
    fid.base_len = 0;
    m.table.n = 1;
    m.table.f = &fid;
    m.versions = (ur_ocdbt_version *)(uintptr_t)v;
    m.n_versions = 1;
    ur_buf_init(&body, 0);
    ur_buf_init(&obj, 0);
    rc = ur_ocdbt_manifest_encode(&body, &m, err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_MANIFEST, body.data, body.len,
                                   w->opts.compress, w->opts.zstd_level, err);
    }
    if (rc == UR_OK) {
        tmp = ur_path_join(w->dir, "manifest.ocdbt.partial");
        path = ur_path_join(w->dir, "manifest.ocdbt");
        rc = tmp && path ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file(tmp, obj.data, obj.len, err);
    }
    if (rc == UR_OK && rename(tmp, path) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot rename manifest into place");
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(w->dir, err);
    }
    ur_free(tmp);
    ur_free(path);
    ur_buf_dispose(&body);
    ur_buf_dispose(&obj);
    return rc;
}

/* Write the B+tree of w->e[0..n) (sorted, one entry per key) and then the manifest: one
 * version, generation 1, whose tree holds exactly these entries. Nodes are written one at a
 * time, leaves first; only the current node's buffers are held. */
static int write_tree_and_manifest(ocdbt_writer *w, ur_err *err)
{
    ur_ocdbt_version v;
    wscratch s;
    witem *items = NULL;
    size_t n_items = 0, items_cap = 0;
    int rc = UR_OK, is_root = 0;
    uint8_t height = 0;
    char *d = NULL;

    memset(&v, 0, sizeof v);
    v.generation = 1;
    v.commit_time = now_ns();
    if (w->n == 0) {
        static const char empty[] = "";
        v.root.offset = UINT64_MAX;
        v.root.length = UINT64_MAX;
        return write_manifest(w, &v, empty, err);
    }
    memset(&s, 0, sizeof s);
    ur_buf_init(&s.body, 0);
    ur_buf_init(&s.obj, 0);
    rc = write_leaves(w, &s, &items, &n_items, &items_cap, &is_root, err);
    while (rc == UR_OK && !is_root) {
        if (height == 255) {
            rc = ur_err_set(err, UR_EINTERNAL, "btree too high");
            break;
        }
        height++;
        rc = write_level(w, &s, height, items, &n_items, &is_root, err);
    }
    scratch_dispose(&s);
    if (rc == UR_OK) {
        v.root_height = height;
        v.root = items[0].ref;
        v.root.file = 0;
        v.stats = items[0].stats;
        rc = close_data_file(w, err);
    }
    if (rc == UR_OK) {
        d = ur_path_join(w->dir, "d");
        rc = d ? ur_fs_fsync_dir(d, err) : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = write_manifest(w, &v, w->files[items[0].ref.file], err);
    }
    ur_free(d);
    ur_free(items);
    return rc;
}

/* Sort by key, then write order, and keep the last write of each key: into `out` (may be
 * w->e itself, then the dropped keys are freed); returns the count. */
static size_t sorted_last_writes(ocdbt_writer *w, wentry *out)
{
    size_t k = 0;
    if (out != w->e) {
        memcpy(out, w->e, w->n * sizeof *out);
    }
    qsort(out, w->n, sizeof *out, cmp_wentry);
    for (size_t i = 0; i < w->n; i++) {
        if (i + 1 < w->n && out[i].klen == out[i + 1].klen &&
            memcmp(out[i].key, out[i + 1].key, out[i].klen) == 0) {
            if (out == w->e) {
                ur_free(out[i].key);
                if (!out[i].shared) {
                    ur_free(out[i].value);
                }
            }
            continue;
        }
        out[k++] = out[i];
    }
    return k;
}

static int w_commit(ur_kvstore *kv, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    int rc;

    if (w->committed) {
        return ur_err_set(err, UR_EINTERNAL, "%s: already committed", kv->desc);
    }
    if (w->n > 0) {
        w->n = sorted_last_writes(w, w->e);
    }
    w->committing = 1;
    rc = write_tree_and_manifest(w, err);
    if (rc == UR_OK) {
        w->committed = 1;
    }
    return rc;
}

int ur_ocdbt_writer_snapshot(ur_kvstore *kv, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    wentry *all, *view;
    size_t n_all;
    int rc;

    if (kv == NULL || kv->ops != &writer_ops || w->committed) {
        return ur_err_set(err, UR_EINTERNAL, "snapshot needs an uncommitted OCDBT writer");
    }
    view = ur_malloc((w->n ? w->n : 1) * sizeof *view);
    if (view == NULL) {
        return ur_err_oom(err);
    }
    /* the tree of a sorted copy; the writer's own entries stay as they are */
    all = w->e;
    n_all = w->n;
    w->n = n_all > 0 ? sorted_last_writes(w, view) : 0;
    w->e = view;
    rc = write_tree_and_manifest(w, err);
    w->e = all;
    w->n = n_all;
    ur_free(view);
    return rc;
}

static void w_close(ur_kvstore *kv)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    ur_appendfile_abort(w->cur);
    for (size_t i = 0; i < w->n; i++) {
        ur_free(w->e[i].key);
        if (!w->e[i].shared) {
            ur_free(w->e[i].value);
        }
    }
    for (size_t i = 0; i < w->values.cap; i++) {
        ur_free((void *)(uintptr_t)w->values.slots[i].key);
    }
    ur_strmap_dispose(&w->values);
    for (size_t i = 0; i < w->n_files; i++) {
        ur_free(w->files[i]);
    }
    ur_free(w->files);
    ur_free(w->file_base);
    ur_strmap_dispose(&w->ext_files);
    ur_free(w->e);
    ur_free(w->dir);
    ur_free(w);
}

uint64_t ur_ocdbt_writer_held_bytes(const ur_kvstore *kv)
{
    return kv != NULL && kv->ops == &writer_ops ? ((const ocdbt_writer *)kv)->held : 0;
}

static const ur_kvstore_ops writer_ops = {
    "ocdbt-writer", NULL,    NULL, NULL, NULL, NULL, w_write,
    w_commit,       w_close, NULL, NULL, NULL, NULL, NULL,
};

int ur_ocdbt_create(ur_kvstore **out, const char *dir, const ur_ocdbt_write_opts *opts,
                    ur_err *err)
{
    ocdbt_writer *w;
    char *manifest = NULL, *d = NULL;
    int rc;

    if (opts->max_decoded_node_bytes > UINT32_MAX || opts->zstd_level < -131072 ||
        opts->zstd_level > 22) {
        return ur_err_set(err, UR_EINVAL, "ocdbt: invalid write options");
    }
    w = ur_calloc(1, sizeof *w);
    if (w == NULL) {
        return ur_err_oom(err);
    }
    w->base.ops = &writer_ops;
    ur_strmap_init(&w->ext_files);
    ur_strmap_init(&w->values);
    snprintf(w->base.desc, sizeof w->base.desc, "ocdbt:%s", dir);
    w->opts = *opts;
    if (w->opts.target_data_file_size == 0) {
        w->opts.target_data_file_size = DEFAULT_TARGET_FILE_SIZE;
    }
    if (w->opts.max_held_inline_bytes == 0) {
        w->opts.max_held_inline_bytes = DEFAULT_HELD_INLINE;
    }
    w->dir = ur_strdup(dir);
    manifest = ur_path_join(dir, "manifest.ocdbt");
    d = ur_path_join(dir, "d");
    if (w->dir == NULL || manifest == NULL || d == NULL) {
        rc = ur_err_oom(err);
        goto fail;
    }
    if (ur_fs_exists(manifest) && !opts->resume) {
        rc = ur_err_set_os(err, UR_EINVAL, 0, manifest, "a database already exists here");
        goto fail;
    }
    rc = ur_fs_mkdirs(d, err);
    if (rc < 0) {
        goto fail;
    }
    ur_ocdbt_config_init_default(&w->config);
    w->seed_state = opts->seed;
    rc = id_bytes(w, w->config.uuid, sizeof w->config.uuid, err);
    if (rc < 0) {
        goto fail;
    }
    w->config.max_inline_value_bytes = opts->max_inline_value_bytes;
    w->config.max_decoded_node_bytes = (uint32_t)opts->max_decoded_node_bytes;
    w->config.compression = opts->compress ? 1 : 0;
    w->config.zstd_level = opts->compress ? opts->zstd_level : 0;
    ur_free(manifest);
    ur_free(d);
    *out = &w->base;
    return UR_OK;
fail:
    ur_free(manifest);
    ur_free(d);
    w_close(&w->base);
    return rc;
}
