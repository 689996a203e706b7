/* Where a checkpoint being read lives: a local directory tree or an object-store prefix.
 *
 * Opening a checkpoint asks directory questions (is this a directory, does it hold
 * _METADATA, which subdirectory is the item) about paths that it builds by joining names.
 * For a local path they go to the file system as before (reads beneath the checkpoint, no
 * links out). For "s3://bucket/..." or "gs://bucket/..." the same path strings are keys of one
 * store opened on the bucket: a "file" is an object, a "directory" is a prefix that some
 * object name continues with '/', and a listing is a prefix listing. */
#define _POSIX_C_SOURCE 200809L
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"

#include <dirent.h>
#include <string.h>

static const char *key_of(const ur_orbax_loc *l, const char *path);
static int dir_prefix(ur_buf *b, const char *key, ur_err *err);
static int stop_at_first(void *ctx, const char *key, uint64_t size);

int ur_orbax__loc_open(ur_orbax_loc *l, const char *path, ur_err *err)
{
    int kind = ur_kvstore_location_kind(path, err);
    const char *b, *slash;
    char *root;
    int rc;

    memset(l, 0, sizeof *l);
    if (kind < 0) {
        return kind;
    }
    if (kind == UR_LOC_LOCAL) {
        return UR_OK;
    }
    b = strstr(path, "://") + 3;
    slash = strchr(b, '/');
    l->root_len = slash != NULL ? (size_t)(slash - path) : strlen(path);
    root = ur_strndup(path, l->root_len);
    if (root == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_kvstore_open_url(&l->root, root, 0, err);
    ur_free(root);
    if (rc == UR_OK) {
        /* One listing up front: a store that cannot answer (credentials, network) fails here
         * with its own message, rather than looking like a missing checkpoint later. */
        ur_buf p;
        int any = 0;
        ur_buf_init(&p, 0);
        rc = dir_prefix(&p, key_of(l, path), err);
        if (rc == UR_OK) {
            rc = ur_kvstore_list(l->root, (const char *)p.data, stop_at_first, &any, err);
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
    l->root = NULL;
}

/* The key of `path` in the bucket store ("" for the bucket), or NULL when the path is not
 * inside the bucket (a parent of it). */
static const char *key_of(const ur_orbax_loc *l, const char *path)
{
    const char *k;
    if (strlen(path) < l->root_len) {
        return NULL;
    }
    k = path + l->root_len;
    while (*k == '/') {
        k++;
    }
    return k;
}

/* Copy `key` + "/" (no slash for the bucket itself) into a new buffer. */
static int dir_prefix(ur_buf *b, const char *key, ur_err *err)
{
    size_t n = strlen(key);
    int rc;
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

static int stop_at_first(void *ctx, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
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

/* 1 when some object name starts with `key` + "/". */
static int has_children(const ur_orbax_loc *l, const char *key)
{
    ur_buf p;
    int any = 0, rc;
    ur_buf_init(&p, 0);
    rc = dir_prefix(&p, key, NULL);
    if (rc == UR_OK) {
        rc = ur_kvstore_list(l->root, (const char *)p.data, stop_at_first, &any, NULL);
    }
    loc_failed(l, rc);
    ur_buf_dispose(&p);
    return any;
}

int ur_orbax__loc_is_dir(const ur_orbax_loc *l, const char *path)
{
    const char *k;
    if (l->root == NULL) {
        return ur_fs_is_dir(path);
    }
    k = key_of(l, path);
    return k != NULL && (k[0] == '\0' || has_children(l, k));
}

int ur_orbax__loc_exists(const ur_orbax_loc *l, const char *dir, const char *name)
{
    char *path = ur_path_join(dir, name);
    int yes = 0;
    if (path == NULL) {
        loc_failed(l, UR_ENOMEM);
        return 0;
    }
    if (l->root == NULL) {
        yes = ur_fs_exists(path);
    } else {
        const char *k = key_of(l, path);
        uint64_t size;
        int rc = k != NULL && k[0] != '\0' ? ur_kvstore_size(l->root, k, &size, NULL)
                                           : UR_ENOTFOUND;
        if (rc != UR_ENOTFOUND) {
            loc_failed(l, rc);
        }
        yes = rc == UR_OK ||
              (k != NULL && k[0] != '\0' && rc == UR_ENOTFOUND && has_children(l, k));
    }
    ur_free(path);
    return yes;
}

int ur_orbax__loc_read(const ur_orbax_loc *l, ur_buf *b, const char *dir, const char *name,
                       size_t max_bytes, ur_err *err)
{
    char *path;
    const char *k;
    int rc;
    if (l->root == NULL) {
        return ur_fs_read_file_beneath(b, dir, name, max_bytes, err);
    }
    path = ur_path_join(dir, name);
    if (path == NULL) {
        return ur_err_oom(err);
    }
    k = key_of(l, path);
    b->limit = max_bytes;
    rc = k != NULL ? ur_kvstore_read(l->root, k, b, err)
                   : ur_err_set(err, UR_ENOTFOUND, "not inside the bucket");
    if (rc < 0 && rc != UR_ENOMEM) {
        ur_err_set_where(err, path);
    }
    ur_free(path);
    return rc;
}

/* Distinct first components of the keys below a prefix. */
typedef struct {
    size_t skip; /* length of the listed prefix "dir/" */
    const char *want; /* name prefix to keep */
    char last[1024];
    ur_orbax_loc_name_fn fn; /* NULL: count only */
    void *ctx;
    size_t n;
    int dirs_only;
    int rc;
} names_state;

static int on_key(void *ctx, const char *key, uint64_t size)
{
    names_state *st = ctx;
    const char *rest = key + st->skip, *slash = strchr(rest, '/');
    size_t n = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
    (void)size;
    if (n == 0 || n >= sizeof st->last || (st->dirs_only && slash == NULL) ||
        strncmp(rest, st->want, strlen(st->want)) != 0) {
        return 0;
    }
    if (strlen(st->last) == n && strncmp(st->last, rest, n) == 0) {
        return 0; /* keys come sorted: the same component again */
    }
    memcpy(st->last, rest, n);
    st->last[n] = '\0';
    st->n++;
    if (st->fn != NULL) {
        st->rc = st->fn(st->ctx, st->last);
        return st->rc;
    }
    return 0;
}

static int list_names(const ur_orbax_loc *l, const char *dir, const char *want, int dirs_only,
                      ur_orbax_loc_name_fn fn, void *ctx, size_t *n_out, ur_err *err)
{
    names_state st;
    ur_buf p;
    const char *k = key_of(l, dir);
    int rc;
    memset(&st, 0, sizeof st);
    st.want = want;
    st.fn = fn;
    st.ctx = ctx;
    st.dirs_only = dirs_only;
    if (k == NULL) {
        *n_out = 0;
        return UR_OK;
    }
    ur_buf_init(&p, 0);
    rc = dir_prefix(&p, k, err);
    if (rc == UR_OK) {
        st.skip = p.len;
        rc = ur_kvstore_list(l->root, (const char *)p.data, on_key, &st, err);
        if (rc > 0) {
            rc = st.rc < 0 ? st.rc : UR_OK;
        }
    }
    ur_buf_dispose(&p);
    *n_out = st.n;
    return rc;
}

size_t ur_orbax__loc_count_prefixed(const ur_orbax_loc *l, const char *dir, const char *prefix)
{
    size_t n = 0;
    if (l->root == NULL) {
        DIR *d = opendir(dir);
        struct dirent *de;
        size_t len = strlen(prefix);
        if (d == NULL) {
            return 0;
        }
        while ((de = readdir(d)) != NULL) {
            n += strncmp(de->d_name, prefix, len) == 0;
        }
        closedir(d);
        return n;
    }
    loc_failed(l, list_names(l, dir, prefix, 0, NULL, NULL, &n, NULL));
    return n;
}

int ur_orbax__loc_list_dirs(const ur_orbax_loc *l, const char *dir, ur_orbax_loc_name_fn fn,
                            void *ctx, ur_err *err)
{
    size_t n;
    int rc = UR_OK;
    if (l->root == NULL) {
        DIR *d = opendir(dir);
        struct dirent *de;
        if (d == NULL) {
            return ur_err_set_os(err, UR_EIO, 0, dir, "cannot list the directory");
        }
        while (rc == UR_OK && (de = readdir(d)) != NULL) {
            char *sub;
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
                continue;
            }
            sub = ur_path_join(dir, de->d_name);
            if (sub == NULL) {
                rc = ur_err_oom(err);
            } else if (ur_fs_is_dir(sub)) {
                rc = fn(ctx, de->d_name);
            }
            ur_free(sub);
        }
        closedir(d);
        return rc;
    }
    return list_names(l, dir, "", 1, fn, ctx, &n, err);
}

int ur_orbax__loc_open_store(const ur_orbax_loc *l, ur_kvstore **out, const char *dir, int ocdbt,
                             ur_err *err)
{
    ur_kvstore *base = NULL;
    int rc;
    if (l->root == NULL) {
        return ocdbt ? ur_ocdbt_open(out, dir, err) : ur_kvstore_file_open(out, dir, 0, err);
    }
    rc = ur_kvstore_open_url(&base, dir, 0, err);
    if (rc < 0) {
        return rc;
    }
    if (!ocdbt) {
        *out = base;
        return UR_OK;
    }
    return ur_ocdbt_open_kv(out, base, 1, dir, err);
}
