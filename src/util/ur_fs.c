/* File-system helpers: every failure names the path and keeps errno. */
#define _GNU_SOURCE /* renameat2 (RENAME_EXCHANGE, RENAME_NOREPLACE) */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_POPULATE */
#define _XOPEN_SOURCE 700
#include "unroll/fs.h"

#include "unroll/alloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define UR_HAVE_OPENAT2_H 1
#endif
#endif
#ifndef UR_HAVE_OPENAT2_H
#define UR_HAVE_OPENAT2_H 0
#endif

size_t ur_path_trimmed_len(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') {
        n--;
    }
    return n;
}

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

int ur_fs_pread_full(int fd, void *dst, size_t n, uint64_t offset, const char *path, ur_err *err)
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

/* Per thread, for the SIGBUS message: the file whose pages the thread last mapped, and
 * whether for writing. */
static _Thread_local char mapped_path[512];
static _Thread_local int mapped_write;

/* How a range is mapped: read, its pages read ahead up front; read once front to back; or
 * written (shared: stores reach the file's pages in the page cache). */
enum { MAP_READ, MAP_READ_ONCE, MAP_WRITE };

static int map_range(int fd, uint64_t offset, size_t n, const char *path, int how, ur_fs_map *m,
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
    mapped_write = how == MAP_WRITE;
    /* Pages not in the page cache are read ahead all at once (large requests, in flight
     * together) rather than by the small synchronous readahead of page faults; read once,
     * they come as they are used (the kernel's sequential readahead), so that the mapping
     * does not hold the whole file. */
    if (how == MAP_READ) {
        (void)posix_fadvise(fd, (off_t)offset, (off_t)n, POSIX_FADV_WILLNEED);
    }
    base = how == MAP_WRITE
               ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start)
               : mmap(NULL, len, PROT_READ, MAP_PRIVATE | (how == MAP_READ ? MAP_POPULATE : 0), fd,
                      (off_t)start);
    if (base == MAP_FAILED) {
        return os_fail(err, path, how == MAP_WRITE ? "cannot map for writing" : "cannot map");
    }
    if (how == MAP_READ_ONCE) {
        (void)madvise(base, len, MADV_SEQUENTIAL);
    }
    m->base_ = base;
    m->base_len_ = len;
    m->data = (const uint8_t *)base + (offset - start);
    m->len = n;
    return UR_OK;
}

int ur_fs_map_range(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m, ur_err *err)
{
    return map_range(fd, offset, n, path, MAP_READ, m, err);
}

int ur_fs_map_range_once(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m,
                         ur_err *err)
{
    return map_range(fd, offset, n, path, MAP_READ_ONCE, m, err);
}

void ur_fs_map_forget(ur_fs_map *m, size_t upto)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    size_t lead = (size_t)(m->data - (const uint8_t *)m->base_), n;
    if (m->base_ == NULL) {
        return;
    }
    upto = upto < m->len ? upto : m->len;
    n = (size_t)((lead + upto) / page * page);
    /* a read-only private mapping has no page of its own: dropping one only unmaps it */
    if (n > 0) {
        (void)madvise(m->base_, n, MADV_DONTNEED);
    }
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

int ur_fs_mapped_for_write(void)
{
    return mapped_write;
}

int ur_fs_map_write(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m, ur_err *err)
{
    return map_range(fd, offset, n, path, MAP_WRITE, m, err);
}

int ur_fs_reserve(int fd, uint64_t size, const char *path, ur_err *err)
{
    int e;
    if (size == 0) {
        return UR_OK;
    }
    if (size > (uint64_t)INT64_MAX) {
        return ur_err_set_os(err, UR_EINVAL, 0, path, "cannot reserve %llu bytes",
                             (unsigned long long)size);
    }
    do {
        e = fallocate(fd, 0, 0, (off_t)size) == 0 ? 0 : errno;
    } while (e == EINTR);
    if (e == 0) {
        return UR_OK;
    }
    if (e == EOPNOTSUPP || e == ENOSYS) {
        return ur_err_set_os(err, UR_EUNSUPPORTED, e, path, "cannot reserve blocks");
    }
    errno = e;
    return os_fail(err, path, "cannot reserve space");
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

int ur_fs_create_sized(int *fd_out, const char *path, uint64_t size, ur_err *err)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        return errno == EEXIST ? ur_err_set_os(err, UR_EEXIST, errno, path, "already exists")
                               : os_fail(err, path, "cannot create");
    }
    if (size > (uint64_t)INT64_MAX || ftruncate(fd, (off_t)size) != 0) {
        int rc = os_fail(err, path, "cannot size");
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return UR_OK;
}

int ur_fs_pwrite_full(int fd, const void *src, size_t n, uint64_t offset, const char *path,
                      ur_err *err)
{
    const uint8_t *p = src;
    while (n > 0) {
        ssize_t put = pwrite(fd, p, n, (off_t)offset);
        if (put < 0) {
            if (errno == EINTR) {
                continue;
            }
            return os_fail(err, path, "write failed");
        }
        p += put;
        n -= (size_t)put;
        offset += (uint64_t)put;
    }
    return UR_OK;
}

int ur_fs_sync_close(int fd, const char *path, ur_err *err)
{
    int rc = fsync(fd) == 0 ? UR_OK : os_fail(err, path, "fsync failed");
    if (close(fd) != 0 && rc == UR_OK) {
        rc = os_fail(err, path, "close failed");
    }
    return rc;
}

/* What a non-regular file is, for the message that refuses it. */
static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) {
        return "a directory";
    }
    if (S_ISFIFO(m)) {
        return "a FIFO";
    }
    if (S_ISCHR(m)) {
        return "a character device";
    }
    if (S_ISBLK(m)) {
        return "a block device";
    }
    if (S_ISSOCK(m)) {
        return "a socket";
    }
    return "of an unknown type";
}

/* fstat `fd` and refuse anything but a regular file. */
static int check_regular(int fd, const char *path, struct stat *st, ur_err *err)
{
    if (fstat(fd, st) != 0) {
        return os_fail(err, path, "cannot stat");
    }
    if (!S_ISREG(st->st_mode)) {
        return ur_err_set_os(err, UR_EIO, 0, path, "not a regular file (%s)",
                             file_kind(st->st_mode));
    }
    return UR_OK;
}

/* Append the whole regular file open on `fd` (stat in `st`) to `out`. */
static int read_fd(ur_buf *out, int fd, const struct stat *st, const char *path, size_t max_bytes,
                   ur_err *err)
{
    size_t n;
    int rc;
    if ((uint64_t)st->st_size > (uint64_t)max_bytes) {
        return ur_err_set_os(err, UR_ECORRUPT, 0, path,
                             "file is %lld bytes, more than the %zu allowed",
                             (long long)st->st_size, max_bytes);
    }
    n = (size_t)st->st_size;
    rc = ur_buf_reserve_exact(out, n, err);
    if (rc == UR_OK) {
        rc = ur_fs_pread_full(fd, out->data + out->len, n, 0, path, err);
    }
    if (rc == UR_OK) {
        out->len += n;
    }
    return rc;
}

int ur_fs_read_fd(ur_buf *out, int fd, const char *path, size_t max_bytes, ur_err *err)
{
    struct stat st;
    int rc = check_regular(fd, path, &st, err);
    return rc == UR_OK ? read_fd(out, fd, &st, path, max_bytes, err) : rc;
}

int ur_fs_read_file(ur_buf *out, const char *path, size_t max_bytes, ur_err *err)
{
    struct stat st;
    int fd, rc;

    /* O_NONBLOCK: opening a FIFO for reading would wait for a writer forever. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        return os_fail(err, path, "cannot open");
    }
    rc = check_regular(fd, path, &st, err);
    if (rc == UR_OK) {
        rc = read_fd(out, fd, &st, path, max_bytes, err);
    }
    close(fd);
    return rc;
}

/* ---- Reading beneath a root directory ---- */

int ur_fs_relpath_validate(const char *p, size_t n, ur_err *err)
{
    const char *why = NULL;
    if (n == 0) {
        why = "empty";
    } else if (memchr(p, '\0', n) != NULL) {
        why = "a NUL byte";
    } else if (p[0] == '/') {
        why = "absolute";
    } else if (p[n - 1] == '/') {
        why = "ends in '/'";
    } else {
        for (size_t at = 0; at < n && why == NULL;) {
            const char *slash = memchr(p + at, '/', n - at);
            size_t len = slash != NULL ? (size_t)(slash - (p + at)) : n - at;
            if (len == 0) {
                why = "an empty component";
            } else if ((len == 1 && p[at] == '.') ||
                       (len == 2 && p[at] == '.' && p[at + 1] == '.')) {
                why = "a '.' or '..' component";
            }
            at += len + 1;
        }
    }
    if (why == NULL) {
        return UR_OK;
    }
    return ur_err_set(err, UR_ECORRUPT, "unsafe relative path '%.*s': %s", n > 200 ? 200 : (int)n,
                      p, why);
}

int ur_fs_dir_open(int *fd_out, const char *path, ur_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        return os_fail(err, path, "cannot open directory");
    }
    *fd_out = fd;
    return UR_OK;
}

static _Atomic int force_fallback;
static _Atomic int no_openat2;

void ur_fs__beneath_force_fallback(int on)
{
    force_fallback = on;
}

#define OPEN_READ_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)

static int open_openat2(int dirfd, const char *rel);

int ur_fs__beneath_has_openat2(void)
{
    int fd = open_openat2(AT_FDCWD, ".");
    if (fd < 0) {
        return errno != ENOSYS && errno != EPERM;
    }
    close(fd);
    return 1;
}

/* openat2 beneath dirfd: the fd, or -1 with errno (ENOSYS where the kernel lacks it). */
static int open_openat2(int dirfd, const char *rel)
{
#if defined(SYS_openat2) && UR_HAVE_OPENAT2_H
    struct open_how how;
    long fd;
    memset(&how, 0, sizeof how);
    how.flags = OPEN_READ_FLAGS;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    /* EAGAIN: a rename raced with the lookup; the kernel asks for a retry. */
    for (int tries = 0;; tries++) {
        fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
        if (fd >= 0 || (errno != EAGAIN && errno != EINTR) || tries == 16) {
            return (int)fd;
        }
    }
#else
    (void)dirfd;
    (void)rel;
    errno = ENOSYS;
    return -1;
#endif
}

/* Without openat2: one component at a time, O_NOFOLLOW, so no symbolic link below the root is
 * followed at all (ELOOP, reported as EXDEV: we cannot tell where it would lead). */
static int open_walk(int dirfd, const char *rel)
{
    char part[4096];
    int cur = dirfd;
    const char *p = rel;

    for (;;) {
        const char *slash = strchr(p, '/');
        size_t len = slash != NULL ? (size_t)(slash - p) : strlen(p);
        int next, e;
        if (len >= sizeof part) {
            errno = ENAMETOOLONG;
            next = -1;
        } else {
            memcpy(part, p, len);
            part[len] = '\0';
            next = openat(cur, part,
                          slash != NULL ? OPEN_READ_FLAGS | O_DIRECTORY | O_NOFOLLOW
                                        : OPEN_READ_FLAGS | O_NOFOLLOW);
            if (next < 0 && (errno == ELOOP || errno == ENOTDIR)) {
                struct stat st;
                e = errno;
                errno = fstatat(cur, part, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)
                            ? EXDEV
                            : e;
            }
        }
        e = errno;
        if (cur != dirfd) {
            close(cur);
        }
        if (next < 0 || slash == NULL) {
            errno = e;
            return next;
        }
        cur = next;
        p = slash + 1;
    }
}

/* ur_fs_open_beneath, or ur_fs_open_dir_beneath when want_dir. */
static int open_beneath(int *fd_out, int dirfd, const char *dir, const char *rel, const char *what,
                        int want_dir, ur_err *err);

int ur_fs_open_beneath(int *fd_out, int dirfd, const char *dir, const char *rel, const char *what,
                       ur_err *err)
{
    return open_beneath(fd_out, dirfd, dir, rel, what, 0, err);
}

int ur_fs_open_dir_beneath(int *fd_out, int dirfd, const char *dir, const char *rel, ur_err *err)
{
    return open_beneath(fd_out, dirfd, dir, rel, "directory", 1, err);
}

static int open_beneath(int *fd_out, int dirfd, const char *dir, const char *rel, const char *what,
                        int want_dir, ur_err *err)
{
    char *path = NULL;
    struct stat st;
    int fd = -1, rc, e, walked = 0;

    *fd_out = -1;
    rc = ur_fs_relpath_validate(rel, strlen(rel), err);
    if (rc < 0) {
        return rc;
    }
    if (!force_fallback && !no_openat2) {
        fd = open_openat2(dirfd, rel);
        /* ENOSYS: a kernel before 5.6, for good. EPERM: maybe a seccomp filter that does not
         * know the call; the walk then says what is wrong, if anything. */
        if (fd < 0 && errno == ENOSYS) {
            no_openat2 = 1;
        }
        walked = fd < 0 && (errno == ENOSYS || errno == EPERM);
    } else {
        walked = 1;
    }
    if (walked) {
        fd = open_walk(dirfd, rel);
    }
    e = errno;
    path = ur_path_join(dir, rel);
    if (path == NULL) {
        rc = ur_err_oom(err);
    } else if (fd < 0 && e == EXDEV && walked) {
        rc = ur_err_set_os(err, UR_EIO, 0, path,
                           "refused: a symbolic link inside '%s' (links are not followed where "
                           "the kernel has no openat2 to keep them inside the checkpoint)",
                           dir);
    } else if (fd < 0 && e == EXDEV) {
        rc = ur_err_set_os(err, UR_EIO, 0, path,
                           "refused: a symbolic link leads out of '%s' (only files inside the "
                           "checkpoint are read)",
                           dir);
    } else if (fd < 0) {
        /* A directory asked for below a file (ENOTDIR) is as absent as a missing one. */
        int absent = e == ENOENT || (want_dir && e == ENOTDIR);
        rc = ur_err_set_os(err, absent ? UR_ENOTFOUND : UR_EIO, e, path, "cannot open %s",
                           what != NULL ? what : "file");
    } else if (want_dir) {
        rc = fstat(fd, &st) != 0 ? os_fail(err, path, "cannot stat")
             : S_ISDIR(st.st_mode)
                 ? UR_OK
                 : ur_err_set_os(err, UR_ENOTFOUND, ENOTDIR, path, "not a directory");
    } else {
        rc = check_regular(fd, path, &st, err);
    }
    ur_free(path);
    if (rc < 0) {
        if (fd >= 0) {
            close(fd);
        }
        return rc;
    }
    *fd_out = fd;
    return UR_OK;
}

/* Open `rel` beneath the directory `dir`: *fd_out and its stat; *path_out names it. */
static int open_beneath_path(int *fd_out, struct stat *st, char **path_out, const char *dir,
                             const char *rel, ur_err *err)
{
    int dfd = -1, rc = ur_fs_dir_open(&dfd, dir, err);
    *path_out = NULL;
    if (rc < 0) {
        return rc;
    }
    rc = ur_fs_open_beneath(fd_out, dfd, dir, rel, NULL, err);
    close(dfd);
    if (rc < 0) {
        return rc;
    }
    *path_out = ur_path_join(dir, rel);
    if (*path_out == NULL || fstat(*fd_out, st) != 0) {
        rc = *path_out == NULL ? ur_err_oom(err) : os_fail(err, *path_out, "cannot stat");
        close(*fd_out);
        ur_free(*path_out);
        *path_out = NULL;
    }
    return rc;
}

int ur_fs_read_file_beneath(ur_buf *out, const char *dir, const char *rel, size_t max_bytes,
                            ur_err *err)
{
    struct stat st;
    char *path;
    int fd, rc = open_beneath_path(&fd, &st, &path, dir, rel, err);
    if (rc < 0) {
        return rc;
    }
    rc = read_fd(out, fd, &st, path, max_bytes, err);
    close(fd);
    ur_free(path);
    return rc;
}

int ur_fs_copy_file_beneath(const char *dir, const char *rel, const char *to, size_t max_bytes,
                            ur_err *err)
{
    struct stat st, dst;
    ur_buf b;
    char *path;
    mode_t mode;
    int out = -1, fd, rc = open_beneath_path(&fd, &st, &path, dir, rel, err);

    if (rc < 0) {
        return rc;
    }
    ur_buf_init(&b, 0);
    rc = read_fd(&b, fd, &st, path, max_bytes, err);
    close(fd);
    if (rc < 0) {
        goto out;
    }
    /* A private (0600) source stays private; the umask applies on top, as for any file. */
    mode = st.st_mode & 0644;
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (out < 0) {
        rc = os_fail(err, to, "cannot create");
        goto out;
    }
    /* A file that was already there keeps its mode through O_TRUNC: narrow it. */
    if (fstat(out, &dst) != 0) {
        rc = os_fail(err, to, "cannot stat");
        goto out;
    }
    if ((dst.st_mode & 07777 & ~mode) != 0 && fchmod(out, dst.st_mode & mode) != 0) {
        rc = os_fail(err, to, "cannot set the mode");
        goto out;
    }
    rc = ur_fs_write_full(out, b.data, b.len, to, err);
    if (rc == UR_OK && fsync(out) != 0) {
        rc = os_fail(err, to, "fsync failed");
    }
out:
    if (out >= 0 && close(out) != 0 && rc == UR_OK) {
        rc = os_fail(err, to, "close failed");
    }
    ur_buf_dispose(&b);
    ur_free(path);
    return rc;
}

int ur_fs_write_file(const char *path, const void *data, size_t n, ur_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return os_fail(err, path, "cannot create");
    }
    int rc = ur_fs_write_full(fd, data, n, path, err);
    if (rc == UR_OK && fsync(fd) != 0) {
        rc = os_fail(err, path, "fsync failed");
    }
    if (close(fd) != 0 && rc == UR_OK) {
        rc = os_fail(err, path, "close failed");
    }
    return rc;
}

int ur_fs_write_file_in(const char *dir, const char *name, const void *data, size_t n, ur_err *err)
{
    char *path = ur_path_join(dir, name);
    int rc = path != NULL ? ur_fs_write_file(path, data, n, err) : ur_err_oom(err);
    ur_free(path);
    return rc;
}

/* Create every directory of the writable copy `p` of `path` from `from` on (each component
 * ending at a '/' or at the end; none when `from` is NULL), then check that `path` is a directory.
 * Frees `p`. */
static int mkdirs_from(char *p, char *from, const char *path, ur_err *err)
{
    int rc = UR_OK;
    for (char *s = from; s != NULL; s++) {
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

int ur_fs_mkdirs(const char *path, ur_err *err)
{
    char *p = ur_strdup(path);
    if (p == NULL) {
        return ur_err_oom(err);
    }
    return mkdirs_from(p, p + 1, path, err);
}

int ur_fs_mkdirs_under(const char *root, const char *path, ur_err *err)
{
    size_t n = ur_path_trimmed_len(root);
    char *p;
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
    return mkdirs_from(p, p[n] == '\0' ? NULL : p + n + 1, path, err);
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

/* $TMPDIR, or /tmp without it */
static const char *temp_base(void)
{
    const char *tmp = getenv("TMPDIR");
    return tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp";
}

int ur_fs_make_temp_dir(char **out, const char *stem, const char *what, ur_err *err)
{
    char *root = ur_path_joinf(temp_base(), "%s.XXXXXX", stem);

    *out = NULL;
    if (root == NULL) {
        return ur_err_oom(err);
    }
    if (mkdtemp(root) == NULL) {
        int rc = ur_err_set_os(err, UR_EIO, errno, root, "cannot create %s", what);
        ur_free(root);
        return rc;
    }
    *out = root;
    return UR_OK;
}

int ur_fs_make_named_temp_dir(char **out, const char *name, int *created, const char *what,
                              ur_err *err)
{
    char *root = ur_path_join(temp_base(), name);
    struct stat st;
    int rc = UR_OK;

    *out = NULL;
    *created = 0;
    if (root == NULL) {
        return ur_err_oom(err);
    }
    if (mkdir(root, 0700) == 0) {
        *created = 1;
    } else if (errno != EEXIST) {
        rc = ur_err_set_os(err, UR_EIO, errno, root, "cannot create %s", what);
    } else if (lstat(root, &st) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, root, "cannot stat %s", what);
    } else if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
        /* in a shared /tmp anyone may have made the name first: only our own private
         * directory is taken */
        rc = ur_err_set(err, UR_EIO, "%s: %s exists and is not a private directory of this user",
                        root, what);
    }
    if (rc < 0) {
        ur_free(root);
        return rc;
    }
    *out = root;
    return UR_OK;
}

int ur_fs_rename(const char *from, const char *to, ur_err *err)
{
    if (rename(from, to) != 0) {
        return ur_err_set_os(err, errno == ENOENT ? UR_ENOTFOUND : UR_EIO, errno, from,
                             "cannot move to %s", to);
    }
    return UR_OK;
}

int ur_fs_identity(const char *path, unsigned long long *dev, unsigned long long *ino, ur_err *err)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        return ur_err_set_os(err, errno == ENOENT ? UR_ENOTFOUND : UR_EIO, errno, path,
                             "cannot stat");
    }
    *dev = (unsigned long long)st.st_dev;
    *ino = (unsigned long long)st.st_ino;
    return UR_OK;
}

int ur_fs_rename_into_place(const char *from, const char *to, ur_err *err)
{
    char *parent;
    int rc;
    if (rename(from, to) != 0) {
        return ur_err_set_os(err, UR_EIO, errno, to, "cannot rename %s into place", from);
    }
    parent = ur_path_join(to, "..");
    rc = parent != NULL ? ur_fs_fsync_dir(parent, err) : ur_err_oom(err);
    ur_free(parent);
    return rc;
}

/* What the lock file open on `fd` says about its holder, on one line, for the message of a
 * run that finds it held. */
static void read_holder(int fd, char *who, size_t n)
{
    ssize_t got = pread(fd, who, n - 1, 0);
    size_t len = got > 0 ? (size_t)got : 0;
    while (len > 0 && (who[len - 1] == '\n' || who[len - 1] == '\0')) {
        len--;
    }
    who[len] = '\0';
    for (size_t i = 0; i < len; i++) {
        if (who[i] == '\n' || (unsigned char)who[i] < 0x20) {
            who[i] = ' ';
        }
    }
    if (len == 0) {
        snprintf(who, n, "holder not yet recorded");
    }
}

/* ur_fs_lock_try; when another holds the lock and held_by is not NULL, what it wrote there
 * goes to held_by (read_holder), else held_by (if any) is "". */
static int lock_open(const char *path, int *fd_out, char *held_by, size_t n, ur_err *err)
{
    struct stat held, named;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    *fd_out = -1;
    if (held_by != NULL) {
        held_by[0] = '\0';
    }
    if (fd < 0) {
        return ur_err_set_os(err, errno == ENOENT ? UR_ENOTFOUND : UR_EIO, errno, path,
                             "cannot open the lock file");
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e == EWOULDBLOCK && held_by != NULL) {
            read_holder(fd, held_by, n);
        }
        close(fd);
        return e == EWOULDBLOCK ? UR_OK : ur_err_set_os(err, UR_EIO, e, path, "cannot lock");
    }
    /* its holder may have unlinked it (a run that removed its directory) as we opened it */
    if (fstat(fd, &held) != 0 || stat(path, &named) != 0 || held.st_dev != named.st_dev ||
        held.st_ino != named.st_ino) {
        close(fd);
        return UR_OK;
    }
    *fd_out = fd;
    return UR_OK;
}

int ur_fs_lock_try(const char *path, int *fd_out, ur_err *err)
{
    return lock_open(path, fd_out, NULL, 0, err);
}

int ur_fs_lock_take(const char *path, const char *holder, int *fd_out, char *held_by, size_t n,
                    ur_err *err)
{
    int fd, rc = lock_open(path, &fd, held_by, n, err);
    *fd_out = -1;
    if (rc < 0 || fd < 0) {
        return rc;
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, holder, strlen(holder), 0) < 0) {
        int e = errno;
        close(fd);
        return ur_err_set_os(err, UR_EIO, e, path, "cannot write the lock file");
    }
    *fd_out = fd;
    return UR_OK;
}

void ur_fs_lock_release(const char *path, int fd)
{
    struct stat held, named;
    if (fd < 0) {
        return;
    }
    if (fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_dev == named.st_dev &&
        held.st_ino == named.st_ino) {
        (void)unlink(path);
    }
    close(fd);
}

void ur_fs_close(int fd)
{
    if (fd >= 0) {
        close(fd);
    }
}

int ur_fs_mkdir_held(const char *path, const char *what, int *fd_out, unsigned long long *dev,
                     unsigned long long *ino, ur_err *err)
{
    struct stat st;
    int fd;
    *fd_out = -1;
    if (mkdir(path, 0755) != 0) {
        return ur_err_set_os(err, UR_EIO, errno, path, "cannot create %s", what);
    }
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        int rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot open %s", what);
        if (fd >= 0) {
            close(fd);
        }
        (void)rmdir(path);
        return rc;
    }
    *fd_out = fd;
    *dev = (unsigned long long)st.st_dev;
    *ino = (unsigned long long)st.st_ino;
    return UR_OK;
}

int ur_fs_remove_empty_dir(const char *path, ur_err *err)
{
    if (rmdir(path) != 0 && errno != ENOENT) {
        return ur_err_set_os(err, UR_EIO, errno, path, "cannot remove directory");
    }
    return UR_OK;
}

int ur_fs_kind_of(ur_fs_kind *kind_out, const char *path, ur_err *err)
{
    struct stat st;
    *kind_out = UR_FS_MISSING;
    if (lstat(path, &st) != 0) {
        return errno == ENOENT ? UR_OK : ur_err_set_os(err, UR_EIO, errno, path, "cannot stat");
    }
    *kind_out = S_ISREG(st.st_mode) ? UR_FS_FILE : S_ISDIR(st.st_mode) ? UR_FS_DIR : UR_FS_OTHER;
    return UR_OK;
}

int ur_fs_read_ends(const char *path, void *head, size_t head_n, void *tail, size_t *tail_n,
                    uint64_t *size_out, ur_err *err)
{
    struct stat st;
    uint64_t size = 0;
    size_t want = 0;
    int rc, fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
        return os_fail(err, path, "cannot open");
    }
    rc = check_regular(fd, path, &st, err);
    if (rc == UR_OK) {
        size = (uint64_t)st.st_size;
        *size_out = size;
        rc = size < head_n ? ur_err_set_os(err, UR_ECORRUPT, 0, path,
                                           "file is %llu bytes, fewer than the %zu expected",
                                           (unsigned long long)size, head_n)
                           : ur_fs_pread_full(fd, head, head_n, 0, path, err);
    }
    if (rc == UR_OK) {
        want = size < (uint64_t)*tail_n ? (size_t)size : *tail_n;
        rc = ur_fs_pread_full(fd, tail, want, size - want, path, err);
    }
    if (rc == UR_OK) {
        *tail_n = want;
    }
    close(fd);
    return rc;
}

int ur_fs_swap_in(const char *from, const char *to, const char *aside, ur_fs_moved *how,
                  ur_err *err)
{
    *how = UR_FS_MOVED_NOT;
    if (ur_fs_exists(to)) {
        if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) == 0) {
            *how = UR_FS_MOVED_EXCHANGED;
            return UR_OK;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
            return ur_err_set_os(err, UR_EIO, errno, to, "cannot swap in the new output from %s",
                                 from);
        }
        /* No exchange on this file system: move the earlier unit aside first. */
        if (rename(to, aside) != 0) {
            return ur_err_set_os(err, UR_EIO, errno, to, "cannot move the earlier output aside");
        }
        if (rename(from, to) != 0) {
            int e = errno;
            (void)rename(aside, to);
            return ur_err_set_os(err, UR_EIO, e, to, "cannot move the new output in");
        }
        *how = UR_FS_MOVED_ASIDE;
        return UR_OK;
    }
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0 ||
        ((errno == EINVAL || errno == ENOSYS) && rename(from, to) == 0)) {
        *how = UR_FS_MOVED_IN;
        return UR_OK;
    }
    return ur_err_set_os(err, UR_EIO, errno, to, "cannot move the new output in");
}

void ur_fs_swap_back(const char *from, const char *to, const char *aside, ur_fs_moved *how)
{
    switch (*how) {
    case UR_FS_MOVED_EXCHANGED:
        (void)renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE);
        break;
    case UR_FS_MOVED_IN:
        (void)rename(to, from);
        break;
    case UR_FS_MOVED_ASIDE:
        if (rename(to, from) == 0) {
            (void)rename(aside, to);
        }
        break;
    case UR_FS_MOVED_NOT:
        break;
    }
    *how = UR_FS_MOVED_NOT;
}

/* Append the components of `rest` to the absolute path `out` lexically ("." dropped, ".."
 * removes the last component, never above "/"). `out` has room for strlen(out) +
 * strlen(rest) + 2 bytes. */
static void append_lexical(char *out, const char *rest)
{
    const char *s = rest;
    while (*s != '\0') {
        const char *e = strchr(s, '/');
        size_t n = e != NULL ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.')) {
            /* nothing */
        } else if (n == 2 && s[0] == '.' && s[1] == '.') {
            char *slash = strrchr(out, '/');
            if (slash != NULL) {
                slash[slash == out ? 1 : 0] = '\0';
            }
        } else {
            size_t len = strlen(out);
            if (len > 0 && out[len - 1] != '/') {
                out[len++] = '/';
            }
            memcpy(out + len, s, n);
            out[len + n] = '\0';
        }
        s += n;
        if (*s == '/') {
            s++;
        }
    }
}

/* ur_fs_canonical: the new string, or NULL with err set. */
static char *canonical(const char *path, int resolve_last, ur_err *err)
{
    char *abs = NULL, *out = NULL, *cut, *real;
    char buf[PATH_MAX];
    size_t n;

    if (path[0] == '/') {
        abs = ur_strdup(path);
    } else {
        if (getcwd(buf, sizeof buf) == NULL) {
            ur_err_set_os(err, UR_EIO, errno, path, "cannot resolve a relative path");
            return NULL;
        }
        abs = ur_path_join(buf, path);
    }
    if (abs == NULL) {
        ur_err_oom(err);
        return NULL;
    }
    n = strlen(abs);
    while (n > 1 && abs[n - 1] == '/') {
        abs[--n] = '\0';
    }
    if (!resolve_last) {
        char *slash = strrchr(abs, '/');
        const char *base = slash + 1;
        if (slash != abs && strcmp(base, ".") != 0 && strcmp(base, "..") != 0) {
            *slash = '\0';
            out = canonical(abs, 1, err);
            if (out != NULL) {
                char *joined = ur_path_join(out, base);
                ur_free(out);
                out = joined;
                if (out == NULL) {
                    ur_err_oom(err);
                }
            }
            ur_free(abs);
            return out;
        }
    }
    /* Cut components off the end until what is left resolves ("/" always does). */
    cut = abs + n;
    for (;;) {
        char saved = *cut;
        *cut = '\0';
        real = realpath(cut == abs ? "/" : abs, buf);
        *cut = saved;
        if (real != NULL || cut == abs) {
            break;
        }
        while (cut > abs && *--cut != '/') {
        }
    }
    if (real == NULL) {
        ur_err_set_os(err, UR_EIO, errno, path, "cannot resolve");
        ur_free(abs);
        return NULL;
    }
    n = strlen(real);
    out = ur_malloc(n + strlen(cut) + 2);
    if (out == NULL) {
        ur_err_oom(err);
    } else {
        memcpy(out, real, n + 1);
        append_lexical(out, cut);
    }
    ur_free(abs);
    return out;
}

int ur_fs_canonical(char **out, const char *path, int resolve_last, ur_err *err)
{
    *out = canonical(path, resolve_last, err);
    if (*out == NULL) {
        return err != NULL ? err->code : UR_EIO;
    }
    return UR_OK;
}

int ur_fs_list_names(const char *path, const char *what, ur_fs_name_fn fn, void *ctx, ur_err *err)
{
    DIR *d = opendir(path);
    const struct dirent *e;
    int rc = 0;
    if (d == NULL) {
        return ur_err_set_os(err, errno == ENOENT ? UR_ENOTFOUND : UR_EIO, errno, path,
                             "cannot open %s", what);
    }
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            rc = fn(ctx, e->d_name);
        }
    }
    closedir(d);
    return rc;
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
