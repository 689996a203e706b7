/* OCDBT writer: a database as a write-only ur_kvstore, one generation per commit.
 *
 * ur_kvstore_write: a value longer than max_inline_value_bytes is appended at once to the
 * current data file d/<32 hex> (a new file past target_data_file_size); shorter values are
 * kept in memory with the key index. A commit (ur_kvstore_commit, ur_ocdbt_writer_snapshot):
 * sort the keys written since the last one (the last write of a key wins), write their tree
 * (ocdbt_write_tree.c: built from scratch for the first generation, else merged copy on write
 * into the latest one's), then the version-tree nodes the new generation needs
 * (ocdbt_write_version.c, spec §5.5), the data files finished (durable), and manifest.ocdbt
 * last and whole (an atomic write of the base store: a temp file, rename and directory fsync
 * in a directory). Every byte goes through the base kvstore (streamed writers for the data
 * files), as TensorStore layers its OCDBT driver on a base store. Spec §10 (invariants), §6.5
 * (statistics). */
#define _POSIX_C_SOURCE 200809L
#include "ocdbt_write_impl.h" /* OCDBT is a kvstore driver: it fills in the vtable */

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"
#include "unroll/sort.h"
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
    ur_kvstore_writer *f = w->cur;
    w->cur = NULL;
    return f != NULL ? ur_kvstore_writer_finish(f, err) : UR_OK;
}

/* Room for one more entry in files / file_base. */
static int grow_files(ocdbt_writer *w, ur_err *err)
{
    size_t cap = w->cap_files, cap_base = w->cap_files;
    char **files = ur_grow(w->files, &cap, w->n_files, sizeof *files, 16);
    size_t *base;
    if (files == NULL) {
        return ur_err_oom(err);
    }
    w->files = files;
    base = ur_grow(w->file_base, &cap_base, w->n_files, sizeof *base, 16);
    if (base == NULL) {
        return ur_err_oom(err); /* files has the room, file_base not: cap_files stays */
    }
    w->file_base = base;
    w->cap_files = cap;
    return UR_OK;
}

/* The data file just closed (files[cur_index]) to opts.on_data_file, before the commit. */
static int hand_over(ocdbt_writer *w, ur_err *err)
{
    if (w->opts.on_data_file == NULL || w->committing || w->n_files == 0) {
        return UR_OK;
    }
    return w->opts.on_data_file(w->opts.on_data_file_ctx, w->dir, w->files[w->cur_index], err);
}

static int new_data_file(ocdbt_writer *w, ur_err *err)
{
    uint8_t rnd[16];
    char name[40];
    uint64_t size = 0;
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
    if (w->files[w->n_files] == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_kvstore_size(w->store, name, &size, err);
    if (rc == UR_OK) { /* a resumed database's file: draw another name */
        ur_free(w->files[w->n_files]);
        return new_data_file(w, err);
    }
    rc = rc == UR_ENOTFOUND
             ? ur_kvstore_writer_open(&w->cur, w->store, name, UR_KVSTORE_WRITER_NEW, err)
             : rc;
    if (rc == UR_OK) {
        rc = ur_strmap_put(&w->ext_files, w->files[w->n_files], 34, w->n_files, NULL, err);
        if (rc < 0) {
            ur_kvstore_writer_abort(w->cur);
            w->cur = NULL;
        }
    }
    if (rc < 0) {
        ur_free(w->files[w->n_files]);
    } else {
        w->cur_index = w->n_files++;
    }
    return rc;
}

/* Append n bytes to the data files; where they landed in *file / *offset. */
int ur_ocdbt_write__append_data(ocdbt_writer *w, const void *p, size_t n, uint32_t *file,
                                uint64_t *offset, ur_err *err)
{
    int rc;
    uint64_t at = w->cur != NULL ? ur_kvstore_writer_size(w->cur) : 0;
    if (w->cur == NULL || (at > 0 && at + n > w->opts.target_data_file_size)) {
        rc = new_data_file(w, err);
        if (rc < 0) {
            return rc;
        }
        at = 0;
    }
    rc = ur_kvstore_writer_append(w->cur, p, n, err);
    if (rc < 0) {
        return rc;
    }
    *file = (uint32_t)w->cur_index;
    *offset = at;
    return UR_OK;
}

/* n bytes from the blocks of *list; NULL when out of memory. */
uint8_t *ur_ocdbt_write__keep_in(wbytes **list, size_t n)
{
    wbytes *b = *list;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > WBYTES_BLOCK ? n : WBYTES_BLOCK;
        b = ur_malloc(sizeof *b + cap);
        if (b == NULL) {
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        b->next = *list;
        *list = b;
    }
    b->used += n;
    return b->data + b->used - n;
}

static void free_blocks(wbytes **list)
{
    while (*list != NULL) {
        wbytes *next = (*list)->next;
        ur_free(*list);
        *list = next;
    }
}

/* n bytes that live until the entries written so far are committed. */
static uint8_t *keep_bytes(ocdbt_writer *w, size_t n)
{
    return ur_ocdbt_write__keep_in(&w->bytes, n);
}

/* ---- keys, packed until the commit ------------------------------------------------------
 * A key is kept as [back: u8][shared: u16 le][its bytes after the first `shared`]: `shared`
 * bytes are those of the key of the entry `back` + 1 places before it, the one of the last
 * PACK_BACK that has most in common with it (the commit writes each array's chunks and
 * metadata interleaved with its neighbours', so the best match is rarely the last key). The
 * commit unpacks them all, in entry order, before it sorts. */

static uint8_t *pack_key(ocdbt_writer *w, const uint8_t *key, size_t klen)
{
    size_t best = 0, back = 0;
    uint8_t *r;
    for (size_t d = 0; d < w->n_prev; d++) {
        const wprev *p = &w->prev[(w->prev_at + PACK_BACK - d) % PACK_BACK];
        size_t shared = 0, max = klen < p->len ? klen : p->len;
        while (shared < max && p->key[shared] == key[shared]) {
            shared++;
        }
        if (shared > best) {
            best = shared;
            back = d;
        }
    }
    r = ur_ocdbt_write__keep_in(&w->packed, 3 + klen - best);
    if (r != NULL) {
        r[0] = (uint8_t)back;
        r[1] = (uint8_t)(best & 0xff);
        r[2] = (uint8_t)(best >> 8); /* klen <= UR_OCDBT_MAX_KEY < 65536 */
        memcpy(r + 3, key + best, klen - best);
    }
    return r;
}

/* The entry just counted had this key: the next ones are packed against it. When there is no
 * memory to remember it, the keys remembered are forgotten (the next key shares nothing,
 * which unpacks as well). */
static void remember_key(ocdbt_writer *w, const uint8_t *key, size_t klen)
{
    unsigned at = (w->prev_at + 1) % PACK_BACK;
    wprev *p = &w->prev[at];
    if (klen > p->cap) {
        uint8_t *grown = ur_realloc(p->key, klen);
        if (grown == NULL) {
            w->n_prev = 0;
            return;
        }
        p->key = grown;
        p->cap = klen;
    }
    if (klen > 0) { /* an empty key has no buffer yet: memcpy(NULL, ..., 0) is undefined */
        memcpy(p->key, key, klen);
    }
    p->len = klen;
    w->prev_at = at;
    w->n_prev += w->n_prev < PACK_BACK;
}

/* Every entry's key whole (in one block), the packed ones freed; nothing changes when there is
 * no memory for them. */
static int unpack_keys(ocdbt_writer *w, ur_err *err)
{
    size_t total = 0;
    uint8_t *at;
    for (size_t i = 0; i < w->n; i++) {
        total += w->e[i].klen;
    }
    at = keep_bytes(w, total ? total : 1);
    if (at == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < w->n; i++) {
        wentry *e = &w->e[i];
        size_t back = e->key[0], shared = (size_t)e->key[1] | (size_t)e->key[2] << 8;
        if (shared > 0) { /* pack_key only refers to an entry counted before (back < i) */
            memcpy(at, w->e[i - 1 - back].key, shared);
        }
        memcpy(at + shared, e->key + 3, e->klen - shared);
        e->key = at;
        at += e->klen;
    }
    free_blocks(&w->packed);
    w->n_prev = 0;
    return UR_OK;
}

/* Hold the n > 0 bytes at data as e's inline value: a copy, or the pool's when it has them. */

static int hold_value(ocdbt_writer *w, wentry *e, const void *data, size_t n, ur_err *err)
{
    size_t at = 0;
    uint8_t *copy;
    if (n >= POOL_MIN_VALUE && ur_strmap_get(&w->values, data, n, &at) == 1) {
        e->value = (const uint8_t *)(uintptr_t)at;
        return UR_OK;
    }
    copy = n >= POOL_MIN_VALUE ? ur_malloc(n) : keep_bytes(w, n);
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
    if (w->n >= UINT32_MAX) {
        *rc = ur_err_set(err, UR_EINVAL, "more than %u keys in one database", UINT32_MAX);
        return NULL;
    }
    e = ur_grow(w->e, &w->cap, w->n, sizeof *e, 256);
    if (e == NULL) {
        *rc = ur_err_oom(err);
        return NULL;
    }
    w->e = e;
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
    e->key = pack_key(w, (const uint8_t *)key, klen);
    if (e->key == NULL) {
        return ur_err_oom(err);
    }
    e->klen = (uint16_t)klen;
    e->seq = (uint32_t)w->n;
    if (wentry_set_len(e, n) < 0) {
        return ur_err_set(err, UR_EUNSUPPORTED, "%s: a value of 1 TiB or more", key);
    }
    /* A small value is kept for its B+tree leaf only while the values kept so far stay
     * within the budget (a few-KB input can declare millions of small chunks). */
    if (n > w->opts.max_inline_value_bytes || w->held + n > w->opts.max_held_inline_bytes) {
        e->indirect = 1;
        rc = ur_ocdbt_write__append_data(w, data, n, &e->file, &e->offset, err);
    } else if (n > 0) {
        rc = hold_value(w, e, data, n, err);
    } else {
        rc = UR_OK;
    }
    if (rc < 0) { /* nothing was held (the key's bytes stay until close) */
        return rc;
    }
    w->n++;
    remember_key(w, (const uint8_t *)key, klen);
    return UR_OK;
}

static const ur_kvstore_ops writer_ops;

/* The index of the referred-to file base + rel in w->files, added when new. */
int ur_ocdbt_write__ext_file(ocdbt_writer *w, const char *base, const char *rel, uint32_t *index,
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

/* The index in w->files of the file `f` names (a file of a node read back: its path holds
 * base + relative path), added when new. */
int ur_ocdbt_write__file_index(ocdbt_writer *w, const ur_ocdbt_file_id *f, uint32_t *index,
                               ur_err *err)
{
    size_t at = 0;
    char *base;
    int rc;
    if (ur_strmap_get(&w->ext_files, f->path, f->len, &at) == 1) {
        *index = (uint32_t)at;
        return UR_OK;
    }
    base = ur_strndup(f->path, f->base_len);
    if (base == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_ocdbt_write__ext_file(w, base, f->path + f->base_len, index, err);
    ur_free(base);
    return rc;
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
    rc = ur_ocdbt_write__ext_file(w, base, rel, &e->file, err);
    if (rc < 0) {
        return rc;
    }
    e->key = pack_key(w, key, klen);
    if (e->key == NULL) {
        return ur_err_oom(err);
    }
    e->klen = (uint16_t)klen;
    e->seq = (uint32_t)w->n;
    if (wentry_set_len(e, length) < 0) {
        return ur_err_set(err, UR_EUNSUPPORTED, "%s: a value of 1 TiB or more", w->dir);
    }
    e->indirect = 1;
    e->offset = offset;
    w->n++;
    remember_key(w, key, klen);
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

/* Commit w->e[0..n) (sorted, one entry per key) as the next generation: the tree, the
 * version-tree nodes it needs, the data files made durable, then the manifest. Nodes are
 * written one at a time; only the current node's buffers and the items of the levels being
 * built are held. */
static int write_generation(ocdbt_writer *w, ur_err *err)
{
    ur_kvstore *rkv = NULL;
    ur_ocdbt_reader *r = NULL;
    ur_ocdbt_version v;
    int rc = UR_OK;

    memset(&v, 0, sizeof v);
    if (w->n == 0 && w->n_vers > 0) {
        return UR_OK; /* nothing new: the latest generation stays the latest */
    }
    if (w->n_vers > 0) { /* the base tree and version nodes are read back */
        rc = ur_ocdbt_open_kv(&rkv, w->store, 0, w->dir, err);
        r = rc == UR_OK ? ur_ocdbt_read__from_kv(rkv) : NULL;
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_write__tree(w, r, &v, err);
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_write__append_version(w, r, &v, err);
    }
    if (rc == UR_OK) {
        rc = close_data_file(w, err); /* durable, as every data file finished before */
    }
    if (rc == UR_OK) {
        rc = ur_ocdbt_write__manifest(w, err);
    }
    ur_kvstore_close(rkv);
    free_blocks(&w->tmp);
    return rc;
}

/* Sort by key, then write order, and keep the last write of each key: into `out` (may be
 * w->e itself); returns the count. */
static size_t sorted_last_writes(ocdbt_writer *w, wentry *out)
{
    size_t k = 0;
    if (w->n == 0) {
        return 0;
    }
    if (out != w->e) {
        memcpy(out, w->e, w->n * sizeof *out);
    }
    /* in place: qsort's merge buffer (12.8 MB for 400,000 entries) came on top of the
     * commit's peak; cmp_wentry has no ties */
    ur_sort_in_place(out, w->n, sizeof *out, cmp_wentry);
    for (size_t i = 0; i < w->n; i++) {
        if (i + 1 < w->n && out[i].klen == out[i + 1].klen &&
            memcmp(out[i].key, out[i + 1].key, out[i].klen) == 0) {
            continue; /* its bytes stay in the writer's blocks until close */
        }
        out[k++] = out[i];
    }
    return k;
}

/* The entries just committed are in the tree on disk now: their memory goes. */
static void forget_entries(ocdbt_writer *w)
{
    for (size_t i = 0; i < w->values.cap; i++) {
        ur_free((void *)(uintptr_t)w->values.slots[i].key);
    }
    ur_strmap_dispose(&w->values);
    ur_strmap_init(&w->values);
    free_blocks(&w->bytes);
    free_blocks(&w->packed);
    w->n_prev = 0;
    ur_free(w->e);
    w->e = NULL;
    w->n = w->cap = 0;
    w->held = 0;
}

static int w_commit(ur_kvstore *kv, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    int rc;

    if (w->committed) {
        return ur_err_set(err, UR_EINTERNAL, "%s: already committed", kv->desc);
    }
    rc = unpack_keys(w, err);
    if (rc < 0) {
        return rc;
    }
    if (w->n > 0) {
        w->n = sorted_last_writes(w, w->e);
    }
    w->committing = 1;
    rc = write_generation(w, err);
    if (rc == UR_OK) {
        w->committed = 1;
    }
    return rc;
}

int ur_ocdbt_writer_snapshot(ur_kvstore *kv, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    int rc;

    if (kv == NULL || kv->ops != &writer_ops || w->committed) {
        return ur_err_set(err, UR_EINTERNAL, "snapshot needs an uncommitted OCDBT writer");
    }
    rc = unpack_keys(w, err);
    if (rc < 0) {
        return rc;
    }
    if (w->n > 0) {
        w->n = sorted_last_writes(w, w->e);
    }
    w->committing = 1; /* files closed now hold nodes: not handed over */
    rc = write_generation(w, err);
    w->committing = 0;
    if (rc == UR_OK) {
        forget_entries(w);
    }
    return rc;
}

int ur_ocdbt_write__adopt(ur_kvstore *kv, const ur_ocdbt_manifest *m, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    int rc = UR_OK;

    if (kv == NULL || kv->ops != &writer_ops || w->n_vers > 0 || m->n_versions == 0) {
        return ur_err_set(err, UR_EINTERNAL, "adopt needs a new OCDBT writer and versions");
    }
    w->vers = ur_calloc(m->n_versions, sizeof *w->vers);
    w->vnodes = ur_calloc(m->n_vnodes ? m->n_vnodes : 1, sizeof *w->vnodes);
    if (w->vers == NULL || w->vnodes == NULL) {
        return ur_err_oom(err);
    }
    w->cap_vers = m->n_versions;
    w->cap_vnodes = m->n_vnodes ? m->n_vnodes : 1;
    w->config = m->config;
    for (size_t i = 0; i < m->n_versions && rc == UR_OK; i++) {
        uint32_t f = 0;
        w->vers[i] = m->versions[i];
        rc = ur_ocdbt_write__file_index(w, &m->table.f[m->versions[i].root.file], &f, err);
        w->vers[i].root.file = f;
    }
    for (size_t i = 0; i < m->n_vnodes && rc == UR_OK; i++) {
        uint32_t f = 0;
        w->vnodes[i] = m->vnodes[i];
        rc = ur_ocdbt_write__file_index(w, &m->table.f[m->vnodes[i].ref.file], &f, err);
        w->vnodes[i].ref.file = f;
    }
    if (rc == UR_OK) {
        w->n_vers = m->n_versions;
        w->n_vnodes = m->n_vnodes;
    }
    return rc;
}

static void w_close(ur_kvstore *kv)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    ur_kvstore_writer_abort(w->cur);
    free_blocks(&w->bytes);
    free_blocks(&w->packed);
    for (int i = 0; i < PACK_BACK; i++) {
        ur_free(w->prev[i].key);
    }
    free_blocks(&w->tmp);
    ur_free(w->vers);
    ur_free(w->vnodes);
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
    if (w->own_store) {
        ur_kvstore_close(w->store);
    }
    ur_free(w);
}

int ur_ocdbt_writer_reserve(ur_kvstore *kv, size_t n, ur_err *err)
{
    ocdbt_writer *w = (ocdbt_writer *)kv;
    size_t cap;
    wentry *e;

    if (kv == NULL || kv->ops != &writer_ops || w->committed) {
        return UR_OK;
    }
    if (ur_ckd_add(&cap, w->n, n) || cap > UINT32_MAX) {
        return ur_err_oom(err);
    }
    e = ur_grow_to(w->e, &w->cap, cap, sizeof *e);
    if (e == NULL) {
        return ur_err_oom(err); /* also when the size overflows */
    }
    w->e = e;
    return UR_OK;
}

uint64_t ur_ocdbt_writer_held_bytes(const ur_kvstore *kv)
{
    return kv != NULL && kv->ops == &writer_ops ? ((const ocdbt_writer *)kv)->held : 0;
}

static const ur_kvstore_ops writer_ops = {
    "ocdbt-writer", NULL, NULL, NULL, NULL, NULL, w_write, w_commit, w_close,
    NULL,           NULL, NULL, NULL, NULL, NULL, NULL,    NULL,
};

int ur_ocdbt_create_kv(ur_kvstore **out, ur_kvstore *base, int take_base, const char *name,
                       const ur_ocdbt_write_opts *opts, ur_err *err)
{
    ocdbt_writer *w;
    uint64_t size = 0;
    int rc;

    if (opts->max_decoded_node_bytes > UINT32_MAX || opts->zstd_level < -131072 ||
        opts->zstd_level > 22) {
        if (take_base) {
            ur_kvstore_close(base);
        }
        return ur_err_set(err, UR_EINVAL, "ocdbt: invalid write options");
    }
    w = ur_calloc(1, sizeof *w);
    if (w == NULL) {
        if (take_base) {
            ur_kvstore_close(base);
        }
        return ur_err_oom(err);
    }
    w->base.ops = &writer_ops;
    w->store = base;
    w->own_store = take_base;
    ur_strmap_init(&w->ext_files);
    ur_strmap_init(&w->values);
    snprintf(w->base.desc, sizeof w->base.desc, "ocdbt:%s", name);
    w->opts = *opts;
    if (w->opts.target_data_file_size == 0) {
        w->opts.target_data_file_size = DEFAULT_TARGET_FILE_SIZE;
    }
    if (w->opts.max_held_inline_bytes == 0) {
        w->opts.max_held_inline_bytes = DEFAULT_HELD_INLINE;
    }
    w->dir = ur_strdup(name);
    if (w->dir == NULL) {
        rc = ur_err_oom(err);
        goto fail;
    }
    rc = ur_kvstore_size(base, "manifest.ocdbt", &size, err);
    if (rc == UR_OK && !opts->resume) {
        rc = ur_err_set_os(err, UR_EINVAL, 0, name, "a database already exists here");
        goto fail;
    }
    if (rc < 0 && rc != UR_ENOTFOUND) {
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
    *out = &w->base;
    return UR_OK;
fail:
    w_close(&w->base);
    return rc;
}

int ur_ocdbt_create(ur_kvstore **out, const char *dir, const ur_ocdbt_write_opts *opts,
                    ur_err *err)
{
    ur_kvstore *base = NULL;
    char *d = ur_path_join(dir, "d");
    /* d/ exists from the start, as TensorStore's databases have it, also when empty */
    int rc = d != NULL ? ur_fs_mkdirs(d, err) : ur_err_oom(err);
    ur_free(d);
    if (rc == UR_OK) {
        rc = ur_kvstore_file_open(&base, dir, 1, err);
    }
    return rc == UR_OK ? ur_ocdbt_create_kv(out, base, 1, dir, opts, err) : rc;
}
