/* Where a checkpoint being read lives: a local directory tree or an object-store prefix.
 *
 * Opening a checkpoint asks directory questions (is this a directory, does it hold
 * _METADATA, which subdirectory is the item) about paths that it builds by joining names.
 * Every question is a kvstore operation, one code path for every kind of location: the
 * path strings are keys of a store opened on their root, a "file" is a value, a "directory"
 * is a prefix listed one level at a time (ur_kvstore_list_dir: one directory read, or one
 * delimited listing, however many chunk files lie below).
 *  - "s3://bucket/..." or "gs://bucket/...": one store on the bucket;
 *  - a local path: a file store on the directory named (reads beneath it, no links out), and
 *    one on its parent, which only the step's own files of a named item directory are read
 *    from (_CHECKPOINT_METADATA, commit_success.txt), beneath it as before. */
#define _POSIX_C_SOURCE 200809L
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"

#include <stdio.h>
#include <string.h>

static int dir_prefix(ur_buf *b, const char *key, ur_err *err);
static int stop_at_first_key(void *ctx, const char *key, uint64_t size);

char *ur_orbax__parent_dir(const char *path)
{
    size_t n = ur_path_trimmed_len(path);
    while (n > 0 && path[n - 1] != '/') {
        n--;
    }
    if (n == 0) {
        return ur_strdup(".");
    }
    while (n > 1 && path[n - 1] == '/') {
        n--;
    }
    return ur_strndup(path, n);
}

/* `path` without its trailing '/' (one kept for "/"), as the prefix of the paths below it. */
static char *strip_slashes(const char *path, size_t n)
{
    while (n > 1 && path[n - 1] == '/') {
        n--;
    }
    return ur_strndup(path, n);
}

/* Local: the file stores of `path` and of its parent. A path that is no directory leaves
 * the root unset: ur_orbax__loc_is_dir says no, and the caller names the path. */
static int open_local(ur_orbax_loc *l, const char *path, ur_err *err)
{
    char *parent;
    int rc;
    l->local = 1;
    l->root_path = strip_slashes(path, strlen(path));
    parent = ur_orbax__parent_dir(path);
    if (l->root_path == NULL || parent == NULL) {
        ur_free(parent);
        return ur_err_oom(err);
    }
    rc = ur_kvstore_file_open(&l->root, path, 0, NULL);
    if (rc == UR_ENOMEM) {
        ur_free(parent);
        return ur_err_oom(err);
    }
    if (rc == UR_OK && ur_kvstore_file_open(&l->up, parent, 0, NULL) == UR_OK) {
        l->up_path = parent;
        parent = NULL;
    }
    ur_free(parent);
    return UR_OK;
}

int ur_orbax__loc_open(ur_orbax_loc *l, const char *path, ur_err *err)
{
    int kind = ur_kvstore_location_kind(path, err);
    const char *b, *slash;
    int rc;

    memset(l, 0, sizeof *l);
    if (kind < 0) {
        return kind;
    }
    if (kind == UR_LOC_LOCAL) {
        return open_local(l, path, err);
    }
    b = strstr(path, "://") + 3;
    slash = strchr(b, '/');
    l->root_path = ur_strndup(path, slash != NULL ? (size_t)(slash - path) : strlen(path));
    if (l->root_path == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_kvstore_open_url(&l->root, l->root_path, 0, err);
    if (rc == UR_OK) {
        /* One listing up front: a store that cannot answer (credentials, network) fails here
         * with its own message, rather than looking like a missing checkpoint later. */
        ur_buf p;
        int any = 0;
        ur_buf_init(&p, 0);
        rc = dir_prefix(&p, path + strlen(l->root_path), err);
        if (rc == UR_OK) {
            rc = ur_kvstore_list(l->root, (const char *)p.data, stop_at_first_key, &any, err);
            rc = rc > 0 ? UR_OK : rc;
        }
        ur_buf_dispose(&p);
    }
    if (rc < 0 && rc != UR_ENOMEM) {
        ur_err_set_where(err, path);
    }
    return rc;
}

void ur_orbax__loc_close(ur_orbax_loc *l)
{
    ur_kvstore_close(l->root);
    ur_kvstore_close(l->up);
    ur_free(l->root_path);
    ur_free(l->up_path);
    memset(l, 0, sizeof *l);
}

/* The key of `path` below `base` ("" for base itself), or NULL when it is not below. */
static const char *key_below(const char *base, const char *path)
{
    size_t n = base != NULL ? strlen(base) : 0;
    if (base == NULL || strncmp(path, base, n) != 0 ||
        (path[n] != '\0' && path[n] != '/' && (n == 0 || base[n - 1] != '/'))) {
        return NULL;
    }
    path += n;
    while (*path == '/') {
        path++;
    }
    return path;
}

/* The store holding `path` and its key there ("" for the store's root), or NULL when no
 * store of the location holds it (outside the bucket or the local directories; locally, a
 * key that could leave its root: ur_fs_relpath_validate). */
static ur_kvstore *store_of(const ur_orbax_loc *l, const char *path, const char **key)
{
    ur_kvstore *kv = l->root;
    const char *k = key_below(l->root_path, path);
    if (k == NULL) {
        kv = l->up;
        k = key_below(l->up_path, path);
    }
    if (kv == NULL || k == NULL) {
        return NULL;
    }
    if (l->local && k[0] != '\0' && ur_fs_relpath_validate(k, strlen(k), NULL) < 0) {
        return NULL;
    }
    *key = k;
    return kv;
}

/* Copy `key` + "/" (no slash for the root itself) into a new buffer. */
static int dir_prefix(ur_buf *b, const char *key, ur_err *err)
{
    size_t n;
    int rc;
    while (*key == '/') {
        key++;
    }
    n = strlen(key);
    while (n > 0 && key[n - 1] == '/') {
        n--;
    }
    rc = ur_buf_append(b, key, n, err);
    if (rc == UR_OK && n > 0) {
        rc = ur_buf_append_byte(b, '/', err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(b, 0, err);
        b->len--;
    }
    return rc;
}

static int stop_at_first_key(void *ctx, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
    *(int *)ctx = 1;
    return 1;
}

static int stop_at_first(void *ctx, const char *name, int is_dir)
{
    (void)name;
    (void)is_dir;
    *(int *)ctx = 1;
    return 1;
}

/* A question that could not be answered (see ur_orbax_loc.failed); the first code stays.
 * The side thread of ur_orbax_ckpt_open asks questions too, hence the atomic. */
static void loc_failed(const ur_orbax_loc *l, int rc)
{
    int none = 0;
    if (l->failed != NULL && rc < 0) {
        (void)__atomic_compare_exchange_n(l->failed, &none, rc, 0, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED);
    }
}

/* 1 when `key` of kv is a directory: the file store has one there (empty or not), an object
 * store has a key continuing key + "/". */
static int is_dir_key(const ur_orbax_loc *l, ur_kvstore *kv, const char *key)
{
    ur_buf p;
    int any = 0, rc;
    if (key[0] == '\0') {
        return 1;
    }
    ur_buf_init(&p, 0);
    rc = dir_prefix(&p, key, NULL);
    if (rc == UR_OK) {
        rc = ur_kvstore_list_dir(kv, (const char *)p.data, stop_at_first, &any, NULL);
    }
    if (rc != UR_ENOTFOUND) {
        loc_failed(l, rc);
    }
    ur_buf_dispose(&p);
    return rc >= 0;
}

int ur_orbax__loc_is_dir(const ur_orbax_loc *l, const char *path)
{
    const char *k;
    ur_kvstore *kv = store_of(l, path, &k);
    return kv != NULL && is_dir_key(l, kv, k);
}

int ur_orbax__loc_exists(const ur_orbax_loc *l, const char *dir, const char *name)
{
    char *path = ur_path_join(dir, name);
    const char *k;
    ur_kvstore *kv;
    uint64_t size;
    int yes = 0, rc;
    if (path == NULL) {
        loc_failed(l, UR_ENOMEM);
        return 0;
    }
    kv = store_of(l, path, &k);
    if (kv != NULL && k[0] != '\0') {
        rc = ur_kvstore_size(kv, k, &size, NULL);
        if (rc == UR_ENOTFOUND) {
            yes = is_dir_key(l, kv, k);
        } else if (rc < 0 && l->local && rc != UR_ENOMEM) {
            /* Something is there that is no regular file inside the root (a directory, a
             * FIFO, a link out): present; reading it says what is wrong. */
            yes = 1;
        } else {
            loc_failed(l, rc);
            yes = rc == UR_OK;
        }
    }
    ur_free(path);
    return yes;
}

int ur_orbax__loc_read(const ur_orbax_loc *l, ur_buf *b, const char *dir, const char *name,
                       size_t max_bytes, ur_err *err)
{
    char *path = ur_path_join(dir, name);
    const char *k;
    ur_kvstore *kv;
    int rc;
    if (path == NULL) {
        return ur_err_oom(err);
    }
    kv = store_of(l, path, &k);
    b->limit = max_bytes;
    rc = kv != NULL && k[0] != '\0' ? ur_kvstore_read(kv, k, b, err)
                                    : ur_err_set(err, UR_ENOTFOUND, "not inside the checkpoint");
    if (rc < 0 && rc != UR_ENOMEM && (kv == NULL || !l->local)) {
        ur_err_set_where(err, path); /* the file store names the file itself */
    }
    ur_free(path);
    return rc;
}

/* Entries of one directory: count those whose names start with `want`, or hand the
 * subdirectories to fn. */
typedef struct {
    const char *want;
    ur_orbax_loc_name_fn fn; /* NULL: count only */
    void *ctx;
    size_t n;
    char last[1024]; /* the name counted last: an object store may give a name twice */
    int rc;
} names_state;

static int on_entry(void *ctx, const char *name, int is_dir)
{
    names_state *st = ctx;
    if (st->fn != NULL) {
        if (is_dir) {
            st->rc = st->fn(st->ctx, name);
        }
        return st->rc;
    }
    if (strncmp(name, st->want, strlen(st->want)) == 0 && strcmp(name, st->last) != 0) {
        st->n++;
        snprintf(st->last, sizeof st->last, "%s", name);
    }
    return 0;
}

static int list_names(const ur_orbax_loc *l, const char *dir, names_state *st, ur_err *err)
{
    ur_buf p;
    const char *k;
    ur_kvstore *kv = store_of(l, dir, &k);
    int rc;
    if (kv == NULL) {
        return UR_OK;
    }
    ur_buf_init(&p, 0);
    rc = dir_prefix(&p, k, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_list_dir(kv, (const char *)p.data, on_entry, st, err);
        if (rc > 0) {
            rc = st->rc < 0 ? st->rc : rc;
        } else if (rc == UR_ENOTFOUND) {
            rc = UR_OK; /* no such directory: nothing in it */
        }
    }
    ur_buf_dispose(&p);
    return rc;
}

size_t ur_orbax__loc_count_prefixed(const ur_orbax_loc *l, const char *dir, const char *prefix)
{
    names_state st;
    memset(&st, 0, sizeof st);
    st.want = prefix;
    loc_failed(l, list_names(l, dir, &st, NULL));
    return st.n;
}

int ur_orbax__loc_list_dirs(const ur_orbax_loc *l, const char *dir, ur_orbax_loc_name_fn fn,
                            void *ctx, ur_err *err)
{
    names_state st;
    memset(&st, 0, sizeof st);
    st.fn = fn;
    st.ctx = ctx;
    return list_names(l, dir, &st, err);
}

int ur_orbax__loc_open_store(const ur_orbax_loc *l, ur_kvstore **out, const char *dir, int ocdbt,
                             ur_err *err)
{
    ur_kvstore *base = NULL;
    /* A store of its own on the item directory: locally, data is read beneath it. */
    int rc = ur_kvstore_open_url(&base, dir, 0, err);
    (void)l;
    if (rc < 0) {
        return rc;
    }
    if (!ocdbt) {
        *out = base;
        return UR_OK;
    }
    return ur_ocdbt_open_kv(out, base, 1, dir, err);
}
