/* File-system helpers: every failure names the path and keeps errno. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_POPULATE */
#define _XOPEN_SOURCE 700
#include "unroll/fs.h"

#include "unroll/alloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

char *ur_path_join(const char *a, const char *b)
{
    size_t la = strlen(a), lb;
    char *s;
    while (*b == '/') {
        b++;
    }
    lb = strlen(b);
    while (la > 1 && a[la - 1] == '/') {
        la--;
    }
    s = ur_malloc(la + lb + 2);
    if (s == NULL) {
        return NULL;
    }
    memcpy(s, a, la);
    if (la > 0 && a[la - 1] != '/' && lb > 0) {
        s[la++] = '/';
    }
    memcpy(s + la, b, lb);
    s[la + lb] = '\0';
    return s;
}

char *ur_path_joinf(const char *a, const char *fmt, ...)
{
    char tail[4096];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tail) {
        return NULL;
    }
    return ur_path_join(a, tail);
}

static int os_fail(ur_err *err, const char *path, const char *what)
{
    int e = errno;
    return ur_err_set_os(err, e == ENOENT ? UR_ENOTFOUND : UR_EIO, e, path, "%s", what);
}

int ur_fs_pread_full(int fd, void *dst, size_t n, uint64_t offset, const char *path,
                     ur_err *err)
{
    uint8_t *p = dst;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) {
                continue;
            }
            return os_fail(err, path, "read failed");
        }
        if (got == 0) {
            return ur_err_set_os(err, UR_ECORRUPT, 0, path,
                                 "file is truncated: %zu bytes missing at offset %llu", n,
                                 (unsigned long long)offset);
        }
        p += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return UR_OK;
}

/* Per thread, for the SIGBUS message: the file whose pages the thread last mapped. */
static _Thread_local char mapped_path[512];

int ur_fs_map_range(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m,
                    ur_err *err)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = offset / page * page;
    struct stat st;
    void *base;
    size_t len;

    memset(m, 0, sizeof *m);
    if (fstat(fd, &st) != 0) {
        return os_fail(err, path, "cannot stat");
    }
    if (offset > (uint64_t)st.st_size || n > (uint64_t)st.st_size - offset) {
        uint64_t have = offset < (uint64_t)st.st_size ? (uint64_t)st.st_size - offset : 0;
        return ur_err_set_os(err, UR_ECORRUPT, 0, path,
                             "file is truncated: %llu bytes missing at offset %llu",
                             (unsigned long long)(n - have), (unsigned long long)(offset + have));
    }
    if (n == 0) {
        m->data = (const uint8_t *)"";
        return UR_OK;
    }
    len = (size_t)(offset - start) + n;
    snprintf(mapped_path, sizeof mapped_path, "%s", path);
    /* Pages not in the page cache are read ahead all at once (large requests, in flight
     * together) rather than by the small synchronous readahead of page faults. */
    (void)posix_fadvise(fd, (off_t)offset, (off_t)n, POSIX_FADV_WILLNEED);
    base = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, (off_t)start);
    if (base == MAP_FAILED) {
        return os_fail(err, path, "cannot map");
    }
    m->base_ = base;
    m->base_len_ = len;
    m->data = (const uint8_t *)base + (offset - start);
    m->len = n;
    return UR_OK;
}

void ur_fs_unmap(ur_fs_map *m)
{
    if (m != NULL && m->base_ != NULL) {
        munmap(m->base_, m->base_len_);
        memset(m, 0, sizeof *m);
    }
}

const char *ur_fs_mapped_path(void)
{
    return mapped_path;
}

int ur_fs_write_full(int fd, const void *src, size_t n, const char *path, ur_err *err)
{
    const uint8_t *p = src;
    while (n > 0) {
        ssize_t put = write(fd, p, n);
        if (put < 0) {
            if (errno == EINTR) {
                continue;
            }
            return os_fail(err, path, "write failed");
        }
        p += put;
        n -= (size_t)put;
    }
    return UR_OK;
}

int ur_fs_read_file(ur_buf *out, const char *path, size_t max_bytes, ur_err *err)
{
    struct stat st;
    int fd, rc;
    size_t n;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return os_fail(err, path, "cannot open");
    }
    if (fstat(fd, &st) != 0) {
        rc = os_fail(err, path, "cannot stat");
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = ur_err_set_os(err, UR_EIO, 0, path, "not a regular file");
        goto out;
    }
    if ((uint64_t)st.st_size > (uint64_t)max_bytes) {
        rc = ur_err_set_os(err, UR_ECORRUPT, 0, path, "file is %lld bytes, more than the %zu allowed",
                           (long long)st.st_size, max_bytes);
        goto out;
    }
    n = (size_t)st.st_size;
    rc = ur_buf_reserve(out, n, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_fs_pread_full(fd, out->data + out->len, n, 0, path, err);
    if (rc < 0) {
        goto out;
    }
    out->len += n;
out:
    close(fd);
    return rc;
}

int ur_fs_write_file(const char *path, const void *data, size_t n, ur_err *err)
{
    int rc;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return os_fail(err, path, "cannot create");
    }
    rc = ur_fs_write_full(fd, data, n, path, err);
    if (rc == UR_OK && fsync(fd) != 0) {
        rc = os_fail(err, path, "fsync failed");
    }
    if (close(fd) != 0 && rc == UR_OK) {
        rc = os_fail(err, path, "close failed");
    }
    return rc;
}

int ur_fs_mkdirs(const char *path, ur_err *err)
{
    char *p = ur_strdup(path);
    int rc = UR_OK;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                rc = os_fail(err, p, "cannot create directory");
                break;
            }
            *s = c;
            if (c == '\0') {
                break;
            }
        }
    }
    if (rc == UR_OK && !ur_fs_is_dir(path)) {
        rc = ur_err_set_os(err, UR_EIO, ENOTDIR, path, "cannot create directory");
    }
    ur_free(p);
    return rc;
}

int ur_fs_mkdirs_under(const char *root, const char *path, ur_err *err)
{
    size_t n = strlen(root);
    char *p;
    int rc = UR_OK;
    while (n > 1 && root[n - 1] == '/') {
        n--;
    }
    if (strncmp(path, root, n) != 0 || (path[n] != '/' && path[n] != '\0')) {
        return ur_err_set(err, UR_EINTERNAL, "%s is not inside %.*s", path, (int)n, root);
    }
    if (!ur_fs_is_dir(root)) {
        return ur_err_set_os(err, UR_EIO, ENOENT, root,
                             "directory removed while being written to");
    }
    p = ur_strdup(path);
    if (p == NULL) {
        return ur_err_oom(err);
    }
    for (char *s = p + n + 1; s <= p + strlen(path) && p[n] != '\0'; s++) {
        if (*s == '/' || *s == '\0') {
            char c = *s;
            *s = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                rc = os_fail(err, p, "cannot create directory");
                break;
            }
            *s = c;
            if (c == '\0') {
                break;
            }
        }
    }
    if (rc == UR_OK && !ur_fs_is_dir(path)) {
        rc = ur_err_set_os(err, UR_EIO, ENOTDIR, path, "cannot create directory");
    }
    ur_free(p);
    return rc;
}

int ur_fs_fsync_dir(const char *path, ur_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return os_fail(err, path, "cannot open directory");
    }
    /* Some file systems refuse fsync on directories (EINVAL); durability is then theirs. */
    if (fsync(fd) != 0 && errno != EINVAL) {
        int rc = os_fail(err, path, "fsync failed");
        close(fd);
        return rc;
    }
    close(fd);
    return UR_OK;
}

int ur_fs_remove_tree(const char *path, ur_err *err)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    int rc = UR_OK;

    if (lstat(path, &st) != 0) {
        return errno == ENOENT ? UR_OK : os_fail(err, path, "cannot stat");
    }
    if (!S_ISDIR(st.st_mode)) {
        return unlink(path) == 0 ? UR_OK : os_fail(err, path, "cannot remove");
    }
    d = opendir(path);
    if (d == NULL) {
        return os_fail(err, path, "cannot open directory");
    }
    while ((e = readdir(d)) != NULL) {
        char *child;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) {
            continue;
        }
        child = ur_path_join(path, e->d_name);
        if (child == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        rc = ur_fs_remove_tree(child, err);
        ur_free(child);
        if (rc < 0) {
            break;
        }
    }
    closedir(d);
    if (rc == UR_OK && rmdir(path) != 0) {
        rc = os_fail(err, path, "cannot remove directory");
    }
    return rc;
}

int ur_fs_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

int ur_fs_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ur_fs_file_size(const char *path, uint64_t *size_out, ur_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        return os_fail(err, path, "cannot stat");
    }
    *size_out = (uint64_t)st.st_size;
    return UR_OK;
}
