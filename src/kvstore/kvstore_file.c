/* A kvstore over a directory: key "a/b/c" is the file <root>/a/b/c.
 *
 * Keys come from checkpoint metadata, i.e. from untrusted input: a key that could leave the
 * root ("..", absolute, empty components) is refused rather than resolved, and a file is
 * opened beneath the root's descriptor (ur_fs_open_beneath), so a symbolic link inside the
 * checkpoint cannot lead a read out of it and a FIFO or device never blocks a read. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* d_type of readdir */
#include "kvstore_impl.h"

#include "unroll/alloc.h"
#include "unroll/appendfile.h"
#include "unroll/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Descriptors kept open for positioned reads (OCDBT data files are read range by range from
 * many threads): opening beneath the root on every read would cost two more system calls. */
#define MAX_FDS 128

typedef struct {
    char *key;
    int fd;
} fd_slot;

typedef struct {
    ur_kvstore base;
    char *root;
    int root_fd; /* reads resolve beneath it */
    int writable;
    int committed;
    pthread_mutex_t lock; /* guards fds */
    fd_slot fds[MAX_FDS];
    size_t n_fds;
} file_store;

static int check_key(const char *key, ur_err *err)
{
    int rc = ur_fs_relpath_validate(key, strlen(key), err);
    return rc < 0 ? ur_err_wrap(err, "invalid key") : rc;
}

static int key_path(file_store *fs, const char *key, char **out, ur_err *err)
{
    int rc = check_key(key, err);
    if (rc < 0) {
        return rc;
    }
    *out = ur_path_join(fs->root, key);
    return *out ? UR_OK : ur_err_oom(err);
}

/* Open the (regular) file of `key` for reading; *path_out (the caller frees it) names it. */
static int open_key(file_store *fs, const char *key, int *fd_out, char **path_out, ur_err *err)
{
    int rc = check_key(key, err);
    *fd_out = -1;
    *path_out = NULL;
    if (rc == UR_OK) {
        rc = ur_fs_open_beneath(fd_out, fs->root_fd, fs->root, key, NULL, err);
    }
    if (rc == UR_OK) {
        *path_out = ur_path_join(fs->root, key);
        if (*path_out == NULL) {
            close(*fd_out);
            *fd_out = -1;
            rc = ur_err_oom(err);
        }
    }
    return rc;
}

/* A descriptor for positioned reads of `key` (cached; *temp set when the caller must close
 * it) and, in *path_out, its path for messages (the caller frees it). */
static int get_fd(file_store *fs, const char *key, int *fd_out, int *temp, char **path_out,
                  ur_err *err)
{
    int rc;
    *temp = 0;
    pthread_mutex_lock(&fs->lock);
    for (size_t i = 0; i < fs->n_fds; i++) {
        if (strcmp(fs->fds[i].key, key) == 0) {
            *fd_out = fs->fds[i].fd;
            pthread_mutex_unlock(&fs->lock);
            *path_out = ur_path_join(fs->root, key);
            return *path_out != NULL ? UR_OK : ur_err_oom(err);
        }
    }
    rc = open_key(fs, key, fd_out, path_out, err);
    if (rc == UR_OK) {
        char *copy = fs->n_fds < MAX_FDS ? ur_strdup(key) : NULL;
        if (copy != NULL) {
            fs->fds[fs->n_fds].key = copy;
            fs->fds[fs->n_fds].fd = *fd_out;
            fs->n_fds++;
        } else {
            *temp = 1;
        }
    }
    pthread_mutex_unlock(&fs->lock);
    return rc;
}

static int f_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    char *path = NULL;
    int fd, rc = open_key((file_store *)kv, key, &fd, &path, err);
    if (rc == UR_OK) {
        rc = ur_fs_read_fd(out, fd, path, out->limit ? out->limit : SIZE_MAX, err);
        close(fd);
    }
    ur_free(path);
    return rc;
}

static int f_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    char *path = NULL;
    int fd, temp, rc = get_fd((file_store *)kv, key, &fd, &temp, &path, err);
    if (rc == UR_OK) {
        rc = ur_fs_pread_full(fd, dst, len, offset, path, err);
        if (temp) {
            close(fd);
        }
    }
    ur_free(path);
    return rc;
}

/* A large range is mapped, a small one read (UR_KVSTORE_MAP_MIN). */
static int f_view_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len,
                        ur_kvstore_view *v, ur_err *err)
{
    char *path = NULL;
    int fd, temp, rc;
    if (len < UR_KVSTORE_MAP_MIN) {
        rc = ur_buf_reserve(&v->buf_, len, err);
        if (rc == UR_OK) {
            rc = f_read_range(kv, key, offset, len, v->buf_.data, err);
        }
        if (rc == UR_OK) {
            v->buf_.len = len;
            ur_kvstore__view_of_buf(v);
        }
        return rc;
    }
    rc = get_fd((file_store *)kv, key, &fd, &temp, &path, err);
    if (rc == UR_OK) {
        rc = ur_fs_map_range(fd, offset, len, path, &v->map_, err);
        if (rc == UR_OK) {
            v->data = v->map_.data;
            v->len = v->map_.len;
        }
        if (temp) {
            close(fd);
        }
    }
    ur_free(path);
    return rc;
}

static void f_prefetch_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len)
{
    char *path = NULL;
    int fd, temp;
    if (get_fd((file_store *)kv, key, &fd, &temp, &path, NULL) == UR_OK) {
        (void)posix_fadvise(fd, (off_t)offset, (off_t)len, POSIX_FADV_WILLNEED);
        if (temp) {
            close(fd);
        }
    }
    ur_free(path);
}

/* A large file is mapped; a small one is read. */
static int f_view(ur_kvstore *kv, const char *key, size_t limit, ur_kvstore_view *v, ur_err *err)
{
    char *path = NULL;
    struct stat st;
    int fd, rc = open_key((file_store *)kv, key, &fd, &path, err);
    if (rc < 0) {
        ur_free(path);
        return rc;
    }
    if (fstat(fd, &st) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot stat");
    } else if ((uint64_t)st.st_size < UR_KVSTORE_MAP_MIN) {
        rc = 1; /* read it */
    } else if (limit != 0 && (uint64_t)st.st_size > limit) {
        rc = ur_err_set_os(err, UR_ECORRUPT, 0, path, "data larger than the limit of %zu bytes",
                           limit);
    } else if ((uint64_t)st.st_size > SIZE_MAX / 2) {
        rc = ur_err_set_os(err, UR_ECORRUPT, 0, path, "file too large");
    } else {
        rc = v->once_ ? ur_fs_map_range_once(fd, 0, (size_t)st.st_size, path, &v->map_, err)
                      : ur_fs_map_range(fd, 0, (size_t)st.st_size, path, &v->map_, err);
        if (rc == UR_OK) {
            v->data = v->map_.data;
            v->len = v->map_.len;
        }
    }
    close(fd);
    ur_free(path);
    return rc == 1 ? ur_kvstore__view_by_read(kv, key, v, err) : rc;
}

static void f_prefetch(ur_kvstore *kv, const char *key, size_t max_bytes)
{
    char *path = NULL;
    int fd;
    if (open_key((file_store *)kv, key, &fd, &path, NULL) == UR_OK) {
        (void)posix_fadvise(fd, 0, (off_t)max_bytes, POSIX_FADV_WILLNEED);
        close(fd);
    }
    ur_free(path);
}

static int f_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    char *path = NULL;
    struct stat st;
    int fd, rc = open_key((file_store *)kv, key, &fd, &path, err);
    if (rc < 0) {
        return rc;
    }
    if (fstat(fd, &st) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot stat");
    } else {
        *size_out = (uint64_t)st.st_size;
    }
    close(fd);
    ur_free(path);
    return rc;
}

/* Listing: collect every regular file below root (relative names), sort, filter. */
typedef struct {
    char *key;
    uint64_t size;
    /* the file's version (ur_kvstore_list_versions): modification time and inode */
    int64_t mtime_s;
    long mtime_ns;
    uint64_t ino;
} key_entry;

typedef struct {
    key_entry *e;
    size_t n, cap;
} key_list;

static void key_list_dispose(key_list *kl)
{
    for (size_t i = 0; i < kl->n; i++) {
        ur_free(kl->e[i].key);
    }
    ur_free(kl->e);
}

static int key_list_add(key_list *kl, const char *key, uint64_t size, ur_err *err)
{
    key_entry *e = ur_grow(kl->e, &kl->cap, kl->n, sizeof *e, 64);
    if (e == NULL) {
        return ur_err_oom(err);
    }
    kl->e = e;
    kl->e[kl->n].key = ur_strdup(key);
    if (kl->e[kl->n].key == NULL) {
        return ur_err_oom(err);
    }
    kl->e[kl->n].size = size;
    kl->e[kl->n].mtime_s = 0;
    kl->e[kl->n].mtime_ns = 0;
    kl->e[kl->n++].ino = 0;
    return UR_OK;
}

/* Collect the regular files below the directory open on `dfd` (relative name `rel`, "" for the
 * root; `dfd` is consumed). Symbolic links are not followed, neither to files nor to
 * directories, so a listing never leaves the root; each subdirectory is opened O_NOFOLLOW
 * beneath its parent, so one swapped for a link meanwhile is not entered either. */
static int walk(file_store *fs, int dfd, const char *rel, key_list *kl, int depth, ur_err *err)
{
    DIR *d = fdopendir(dfd);
    struct dirent *e;
    int rc = UR_OK;

    if (d == NULL) {
        char *dir = rel[0] ? ur_path_join(fs->root, rel) : NULL;
        rc = ur_err_set_os(err, UR_EIO, errno, dir ? dir : fs->root, "cannot list");
        ur_free(dir);
        close(dfd);
        return rc;
    }
    while (rc == UR_OK && (e = readdir(d)) != NULL) {
        struct stat st;
        char *child_rel;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            continue; /* removed meanwhile */
        }
        if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
            continue;
        }
        child_rel = rel[0] ? ur_path_join(rel, e->d_name) : ur_strdup(e->d_name);
        if (child_rel == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        if (S_ISREG(st.st_mode)) {
            rc = key_list_add(kl, child_rel, (uint64_t)st.st_size, err);
            if (rc == UR_OK) {
                kl->e[kl->n - 1].mtime_s = (int64_t)st.st_mtim.tv_sec;
                kl->e[kl->n - 1].mtime_ns = st.st_mtim.tv_nsec;
                kl->e[kl->n - 1].ino = (uint64_t)st.st_ino;
            }
        } else if (depth >= 64) {
            char *dir = ur_path_join(fs->root, child_rel);
            rc = ur_err_set_os(err, UR_ECORRUPT, 0, dir ? dir : fs->root,
                               "directory tree too deep");
            ur_free(dir);
        } else {
            int sub = openat(dirfd(d), e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            if (sub >= 0) {
                rc = walk(fs, sub, child_rel, kl, depth + 1, err);
            } else if (errno != ENOENT && errno != ELOOP && errno != ENOTDIR) {
                char *dir = ur_path_join(fs->root, child_rel);
                rc = ur_err_set_os(err, UR_EIO, errno, dir ? dir : fs->root, "cannot list");
                ur_free(dir);
            }
        }
        ur_free(child_rel);
    }
    closedir(d);
    return rc;
}

/* Keys are byte strings: strcmp compares as unsigned char, i.e. bytewise like memcmp. */
static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const key_entry *)a)->key, ((const key_entry *)b)->key);
}

/* The listing of f_list and f_list_versions: fn or vfn for each key under prefix, in order. */
static int list_keys(file_store *fs, const char *prefix, ur_kvstore_list_fn fn,
                     ur_kvstore_list_version_fn vfn, void *ctx, ur_err *err)
{
    key_list kl = {0};
    size_t plen = strlen(prefix);
    /* A new open of the root, not dup(): a dup'ed descriptor would share the directory
     * offset, and the next listing would start at the end. */
    int dfd = openat(fs->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
    int rc = dfd >= 0 ? walk(fs, dfd, "", &kl, 0, err)
                      : ur_err_set_os(err, UR_EIO, errno, fs->root, "cannot list");

    if (rc == UR_OK && kl.n > 0) {
        qsort(kl.e, kl.n, sizeof *kl.e, cmp_entry);
        for (size_t i = 0; i < kl.n && rc == 0; i++) {
            const key_entry *e = &kl.e[i];
            char version[64];
            if (strncmp(e->key, prefix, plen) != 0) {
                continue;
            }
            if (fn != NULL) {
                rc = fn(ctx, e->key, e->size);
            } else {
                snprintf(version, sizeof version, "%lld.%09ld:%llu", (long long)e->mtime_s,
                         e->mtime_ns, (unsigned long long)e->ino);
                rc = vfn(ctx, e->key, e->size, version);
            }
        }
    }
    key_list_dispose(&kl);
    return rc;
}

static int f_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    return list_keys((file_store *)kv, prefix, fn, NULL, ctx, err);
}

static int f_list_versions(ur_kvstore *kv, const char *prefix, ur_kvstore_list_version_fn fn,
                           void *ctx, ur_err *err)
{
    return list_keys((file_store *)kv, prefix, NULL, fn, ctx, err);
}

/* The kind of entry `name` of the directory `dfd` (`rel` beneath the root): 1 a directory, 0 a
 * regular file, -1 anything else. A symbolic link counts as what it leads to when that is
 * inside the root (as a read of it would be allowed), else it is left out. */
static int entry_kind(file_store *fs, int dfd, const char *rel, const struct dirent *e)
{
    struct stat st;
    char *path;
    int fd, kind = -1;
    /* the type readdir gave, where the file system keeps it: no stat per chunk file */
    if (e->d_type == DT_DIR || e->d_type == DT_REG) {
        return e->d_type == DT_DIR;
    }
    if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) {
        return -1;
    }
    if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return -1; /* removed meanwhile */
    }
    if (!S_ISLNK(st.st_mode)) {
        return S_ISDIR(st.st_mode) ? 1 : S_ISREG(st.st_mode) ? 0 : -1;
    }
    path = rel[0] ? ur_path_join(rel, e->d_name) : ur_strdup(e->d_name);
    if (path == NULL) {
        return -1;
    }
    if (ur_fs_open_dir_beneath(&fd, fs->root_fd, fs->root, path, NULL) == UR_OK) {
        kind = 1;
    } else if (ur_fs_open_beneath(&fd, fs->root_fd, fs->root, path, NULL, NULL) == UR_OK) {
        kind = 0;
    }
    if (kind >= 0) {
        close(fd);
    }
    ur_free(path);
    return kind;
}

/* One directory read: the entries of <root>/<prefix>, opened beneath the root. */
static int f_list_dir(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                      ur_err *err)
{
    file_store *fs = (file_store *)kv;
    key_list kl = {0};
    char *rel = ur_strndup(prefix, prefix[0] ? strlen(prefix) - 1 : 0);
    struct dirent *e;
    DIR *d = NULL;
    int dfd = -1, rc;

    if (rel == NULL) {
        return ur_err_oom(err);
    }
    if (rel[0] == '\0') {
        dfd = openat(fs->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK);
        rc = dfd >= 0 ? UR_OK : ur_err_set_os(err, UR_EIO, errno, fs->root, "cannot list");
    } else {
        rc = check_key(rel, err);
        if (rc == UR_OK) {
            rc = ur_fs_open_dir_beneath(&dfd, fs->root_fd, fs->root, rel, err);
        }
    }
    if (rc == UR_OK && (d = fdopendir(dfd)) == NULL) {
        rc = ur_err_set_os(err, UR_EIO, errno, fs->root, "cannot list '%s'", prefix);
        close(dfd);
    }
    while (rc == UR_OK && (e = readdir(d)) != NULL) {
        int kind;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        kind = entry_kind(fs, dirfd(d), rel, e);
        if (kind >= 0) {
            rc = key_list_add(&kl, e->d_name, (uint64_t)kind, err);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    if (rc == UR_OK && kl.n > 0) {
        qsort(kl.e, kl.n, sizeof *kl.e, cmp_entry);
        for (size_t i = 0; i < kl.n && rc == 0; i++) {
            rc = fn(ctx, kl.e[i].key, (int)kl.e[i].size);
        }
    }
    key_list_dispose(&kl);
    ur_free(rel);
    return rc;
}

static int f_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    file_store *fs = (file_store *)kv;
    char *path = NULL, *slash;
    int fd, rc;

    if (!fs->writable || fs->committed) {
        return ur_err_set(err, UR_EINTERNAL, "%s: store is not open for writing", kv->desc);
    }
    rc = key_path(fs, key, &path, err);
    if (rc < 0) {
        return rc;
    }
    slash = strrchr(path, '/');
    if (slash != NULL && slash != path) {
        *slash = '\0';
        /* below the root only: a root removed mid-run is an error, not re-created */
        rc = ur_fs_mkdirs_under(fs->root, path, err);
        *slash = '/';
        if (rc < 0) {
            goto out;
        }
    }
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot create");
        goto out;
    }
    rc = ur_fs_write_full(fd, data, n, path, err);
    if (close(fd) != 0 && rc == UR_OK) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "close failed");
    }
out:
    ur_free(path);
    return rc;
}

/* Open the directory that will hold `key` (its components below the root, created when
 * missing), each opened O_NOFOLLOW beneath its parent: a symbolic link on the way is refused,
 * never followed out of the root. *base_out points into key at the last component. */
static int open_parent_beneath(file_store *fs, const char *key, int *dfd_out,
                               const char **base_out, ur_err *err)
{
    const char *p = key, *slash;
    int dfd = openat(fs->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        return ur_err_set_os(err, UR_EIO, errno, fs->root, "cannot open");
    }
    while ((slash = strchr(p, '/')) != NULL) {
        char name[256];
        int sub;
        if ((size_t)(slash - p) >= sizeof name) {
            close(dfd);
            return ur_err_set_os(err, UR_EINVAL, ENAMETOOLONG, key, "key component too long");
        }
        memcpy(name, p, (size_t)(slash - p));
        name[slash - p] = '\0';
        if (mkdirat(dfd, name, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            close(dfd);
            return ur_err_set_os(err, UR_EIO, e, key, "cannot create a directory for");
        }
        sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0) {
            int e = errno;
            close(dfd);
            return ur_err_set_os(err, UR_EIO, e, key,
                                 "cannot open a directory of (a symbolic link is not followed)");
        }
        close(dfd);
        dfd = sub;
        p = slash + 1;
    }
    *dfd_out = dfd;
    *base_out = p;
    return UR_OK;
}

/* A complete temporary file beside the key's name, for f_create to link into place: written
 * and fsynced. *tmp (the name in dfd) is filled in; the file is removed on failure. */
static int create_temp(int dfd, const char *base, const char *path, const void *data, size_t n,
                       char *tmp, size_t tmp_size, ur_err *err)
{
    static unsigned seq; /* names apart the creates of one process's threads */
    int fd, rc;
    snprintf(tmp, tmp_size, ".%.64s.%ld.%u.create", base, (long)getpid(),
             __atomic_fetch_add(&seq, 1u, __ATOMIC_RELAXED));
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        return ur_err_set_os(err, UR_EIO, errno, path, "cannot create a temporary file for");
    }
    rc = ur_fs_write_full(fd, data, n, path, err);
    if (rc == UR_OK && fsync(fd) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "fsync failed");
    }
    if (close(fd) != 0 && rc == UR_OK) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "close failed");
    }
    if (rc < 0) {
        (void)unlinkat(dfd, tmp, 0);
    }
    return rc;
}

/* The conditional create (kvstore.h): a complete temporary file linked to the name (link(2)
 * fails when the name exists, a symbolic link included, and is never followed), so a reader
 * never sees the value half written and of several processes exactly one creates it; then the
 * directory is fsynced. A file system without hard links gets O_CREAT | O_EXCL and the write
 * (a reader may then see the value empty for a moment). A failed write removes what it made,
 * so the key stays free for the next attempt. */
static int f_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    file_store *fs = (file_store *)kv;
    char *path = NULL, tmp[128];
    const char *base = NULL;
    int dfd = -1, fd, rc, e;

    if (!fs->writable || fs->committed) {
        return ur_err_set(err, UR_EINTERNAL, "%s: store is not open for writing", kv->desc);
    }
    rc = key_path(fs, key, &path, err);
    if (rc == UR_OK) {
        rc = open_parent_beneath(fs, key, &dfd, &base, err);
    }
    if (rc == UR_OK) {
        rc = create_temp(dfd, base, path, data, n, tmp, sizeof tmp, err);
    }
    if (rc < 0) {
        goto out;
    }
    e = linkat(dfd, tmp, dfd, base, 0) == 0 ? 0 : errno;
    (void)unlinkat(dfd, tmp, 0);
    if (e == EEXIST) {
        rc = ur_err_set_os(err, UR_EEXIST, EEXIST, path, "already exists");
        goto out;
    }
    if (e != 0 && e != EPERM && e != ENOTSUP && e != EOPNOTSUPP && e != EMLINK) {
        rc = ur_err_set_os(err, UR_EIO, e, path, "cannot create");
        goto out;
    }
    if (e != 0) { /* no hard links here */
        fd = openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
            rc = errno == EEXIST ? ur_err_set_os(err, UR_EEXIST, EEXIST, path, "already exists")
                                 : ur_err_set_os(err, UR_EIO, errno, path, "cannot create");
            goto out;
        }
        rc = ur_fs_write_full(fd, data, n, path, err);
        if (rc == UR_OK && fsync(fd) != 0) {
            rc = ur_err_set_os(err, UR_EIO, errno, path, "fsync failed");
        }
        if (close(fd) != 0 && rc == UR_OK) {
            rc = ur_err_set_os(err, UR_EIO, errno, path, "close failed");
        }
    }
    if (rc == UR_OK && fsync(dfd) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "fsync of the directory failed");
    }
    if (rc < 0) {
        (void)unlinkat(dfd, base, 0);
    }
out:
    if (dfd >= 0) {
        close(dfd);
    }
    ur_free(path);
    return rc;
}

static int f_delete(ur_kvstore *kv, const char *key, ur_err *err)
{
    char *path = NULL;
    int rc = key_path((file_store *)kv, key, &path, err);
    if (rc == UR_OK && unlink(path) != 0 && errno != ENOENT) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot delete");
    }
    ur_free(path);
    return rc;
}

/* fsync every file and directory below `path`, children before parents. */
static int sync_tree(const char *path, ur_err *err)
{
    struct stat st;
    int rc = UR_OK;
    if (lstat(path, &st) != 0) {
        return ur_err_set_os(err, UR_EIO, errno, path, "cannot stat");
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        if (d == NULL) {
            return ur_err_set_os(err, UR_EIO, errno, path, "cannot open directory");
        }
        while (rc == UR_OK && (e = readdir(d)) != NULL) {
            char *child;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
                continue;
            }
            child = ur_path_join(path, e->d_name);
            rc = child ? sync_tree(child, err) : ur_err_oom(err);
            ur_free(child);
        }
        closedir(d);
        return rc == UR_OK ? ur_fs_fsync_dir(path, err) : rc;
    }
    if (S_ISREG(st.st_mode)) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            return ur_err_set_os(err, UR_EIO, errno, path, "cannot open");
        }
        if (fsync(fd) != 0) {
            rc = ur_err_set_os(err, UR_EIO, errno, path, "fsync failed");
        }
        close(fd);
    }
    return rc;
}

static int f_commit(ur_kvstore *kv, ur_err *err)
{
    file_store *fs = (file_store *)kv;
    int rc;
    if (!fs->writable) {
        return UR_OK;
    }
    rc = sync_tree(fs->root, err);
    if (rc == UR_OK) {
        fs->committed = 1;
    }
    return rc;
}

static void f_close(ur_kvstore *kv)
{
    file_store *fs = (file_store *)kv;
    for (size_t i = 0; i < fs->n_fds; i++) {
        close(fs->fds[i].fd);
        ur_free(fs->fds[i].key);
    }
    pthread_mutex_destroy(&fs->lock);
    if (fs->root_fd >= 0) {
        close(fs->root_fd);
    }
    ur_free(fs->root);
    ur_free(fs);
}

/* ---- Streamed writes (kvstore.h) ----
 * NEW: ur_appendfile on the key's file (O_EXCL, direct I/O, a background writer), the
 * directory fsynced at finish. ATOMIC: each piece written as it comes to "<key>.partial"
 * (never gathered in memory: the _METADATA of 200,000 output arrays is 76 MB), fsynced,
 * renamed into place and the directory fsynced; removed on abort or failure. */
typedef struct {
    ur_kvstore_writer base;
    char *path;       /* the key's file */
    ur_appendfile *f; /* NEW */
    char *partial;    /* ATOMIC: "<path>.partial" and its descriptor */
    int fd;
} file_writer;

static int fw_append(ur_kvstore_writer *w, const void *data, size_t n, ur_err *err)
{
    file_writer *fw = (file_writer *)w;
    return fw->f != NULL ? ur_appendfile_write(fw->f, data, n, err)
                         : ur_fs_write_full(fw->fd, data, n, fw->partial, err);
}

/* Closes and, when `drop`, removes the ATOMIC writer's partial file. */
static void fw_free(file_writer *fw, int drop)
{
    if (fw->fd >= 0) {
        (void)close(fw->fd);
    }
    if (drop && fw->partial != NULL) {
        (void)unlink(fw->partial);
    }
    ur_free(fw->partial);
    ur_free(fw->path);
    ur_free(fw);
}

/* fsync the directory holding `path` (a rename or create there is then durable). */
static int fsync_parent(char *path, ur_err *err)
{
    char *slash = strrchr(path, '/');
    int rc;
    if (slash == NULL) {
        return ur_fs_fsync_dir(".", err);
    }
    *slash = '\0';
    rc = ur_fs_fsync_dir(slash == path ? "/" : path, err);
    *slash = '/';
    return rc;
}

static int atomic_store(file_writer *fw, ur_err *err)
{
    int rc = UR_OK;
    if (fsync(fw->fd) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, fw->partial, "fsync failed");
    }
    if (close(fw->fd) != 0 && rc == UR_OK) {
        rc = ur_err_set_os(err, UR_EIO, errno, fw->partial, "close failed");
    }
    fw->fd = -1;
    if (rc == UR_OK && rename(fw->partial, fw->path) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, fw->path, "cannot rename into place");
    }
    return rc;
}

static int fw_finish(ur_kvstore_writer *w, ur_err *err)
{
    file_writer *fw = (file_writer *)w;
    int rc;
    if (fw->f != NULL) {
        rc = ur_appendfile_finish(fw->f, err);
        fw->f = NULL;
    } else {
        rc = atomic_store(fw, err);
    }
    if (rc == UR_OK) {
        rc = fsync_parent(fw->path, err);
    }
    fw_free(fw, rc < 0);
    return rc;
}

static void fw_abort(ur_kvstore_writer *w)
{
    file_writer *fw = (file_writer *)w;
    ur_appendfile_abort(fw->f);
    fw_free(fw, 1);
}

static const ur_kvstore_writer_ops file_writer_ops = {fw_append, fw_finish, fw_abort};

/* The ATOMIC writer's "<path>.partial", created (or truncated: one left by a killed run). */
static int open_partial(file_writer *fw, ur_err *err)
{
    size_t n = strlen(fw->path);
    fw->partial = ur_malloc(n + sizeof ".partial");
    if (fw->partial == NULL) {
        return ur_err_oom(err);
    }
    memcpy(fw->partial, fw->path, n);
    memcpy(fw->partial + n, ".partial", sizeof ".partial");
    fw->fd = open(fw->partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fw->fd < 0) {
        return ur_err_set_os(err, UR_EIO, errno, fw->partial, "cannot create");
    }
    return UR_OK;
}

static int f_writer_open(ur_kvstore_writer **out, ur_kvstore *kv, const char *key, int flags,
                         ur_err *err)
{
    file_store *fs = (file_store *)kv;
    file_writer *fw;
    char *slash;
    int rc;

    if (!fs->writable || fs->committed) {
        return ur_err_set(err, UR_EINTERNAL, "%s: store is not open for writing", kv->desc);
    }
    fw = ur_calloc(1, sizeof *fw);
    if (fw == NULL) {
        return ur_err_oom(err);
    }
    fw->base.ops = &file_writer_ops;
    fw->fd = -1;
    rc = key_path(fs, key, &fw->path, err);
    slash = rc == UR_OK ? strrchr(fw->path, '/') : NULL;
    if (slash != NULL && slash != fw->path) {
        *slash = '\0';
        rc = ur_fs_mkdirs_under(fs->root, fw->path, err); /* as f_write */
        *slash = '/';
    }
    if (rc == UR_OK && (flags & UR_KVSTORE_WRITER_NEW)) {
        rc = ur_appendfile_create(&fw->f, fw->path, err);
        if (rc < 0 && err != NULL && err->os_errno == EEXIST) {
            rc = ur_err_set_os(err, UR_EEXIST, EEXIST, fw->path, "already exists");
        }
    } else if (rc == UR_OK) {
        rc = open_partial(fw, err);
    }
    if (rc < 0) {
        fw_free(fw, 0);
        return rc;
    }
    *out = &fw->base;
    return UR_OK;
}

static const ur_kvstore_ops file_ops = {
    "file",           f_read,   f_read_range,  f_view,     f_size,          f_list,
    f_write,          f_commit, f_close,       f_prefetch, f_delete,        f_view_range,
    f_prefetch_range, f_create, f_writer_open, f_list_dir, f_list_versions,
};

int ur_kvstore_file_open(ur_kvstore **out, const char *root, int writable, ur_err *err)
{
    file_store *fs;
    int rc, fd = -1;

    if (writable) {
        rc = ur_fs_mkdirs(root, err);
        if (rc < 0) {
            return rc;
        }
    }
    rc = ur_fs_dir_open(&fd, root, err);
    if (rc < 0) {
        return rc;
    }
    fs = ur_calloc(1, sizeof *fs);
    if (fs == NULL) {
        close(fd);
        return ur_err_oom(err);
    }
    fs->root_fd = fd;
    pthread_mutex_init(&fs->lock, NULL);
    fs->root = ur_strdup(root);
    if (fs->root == NULL) {
        close(fd);
        ur_free(fs);
        return ur_err_oom(err);
    }
    fs->base.ops = &file_ops;
    fs->writable = writable;
    snprintf(fs->base.desc, sizeof fs->base.desc, "file:%s", root);
    *out = &fs->base;
    return UR_OK;
}
