/* File-system faults for tests: the test binary is linked with -Wl,--wrap=<call> for each call
 * below, so every call of it in the code under test comes here first (jq's inject_errors.c
 * does the same with LD_PRELOAD; link-time wrapping also reaches static libraries and works
 * under ASan and valgrind).
 *
 * Only calls that change the file system or open files are counted: reads, stats and closes
 * are not. Armed (fs_faults_arm), the `at`-th counted call fails with EIO, and every later one
 * unless `once`: a process killed there makes no more calls. */
#define _GNU_SOURCE
#include "fs_faults.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_uint calls;
static atomic_int armed;
static unsigned fault_at;
static int fault_once;

void fs_faults_arm(unsigned at, int once)
{
    fault_at = at;
    fault_once = once;
    atomic_store(&calls, 0);
    atomic_store(&armed, 1);
}

unsigned fs_faults_disarm(void)
{
    atomic_store(&armed, 0);
    return atomic_load(&calls);
}

/* 1 (errno EIO) when this call is the injected fault. UR_FS_TRACE set: each counted call is
 * written to stderr. */
static int faulted(const char *call, const char *path)
{
    unsigned n;
    if (!atomic_load(&armed)) {
        return 0;
    }
    n = atomic_fetch_add(&calls, 1) + 1;
    if (getenv("UR_FS_TRACE") != NULL) {
        fprintf(stderr, "fs: call %u: %s %s\n", n, call, path != NULL ? path : "");
    }
    if (fault_at != 0 && (fault_once ? n == fault_at : n >= fault_at)) {
        errno = EIO;
        return 1;
    }
    return 0;
}

/* ---- the wrapped calls ------------------------------------------------------------------ */

int __real_open(const char *path, int flags, ...);
int __real_openat(int dirfd, const char *path, int flags, ...);
int __real_rename(const char *from, const char *to);
int __real_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags);
int __real_link(const char *from, const char *to);
int __real_unlink(const char *path);
int __real_unlinkat(int dirfd, const char *path, int flags);
int __real_mkdir(const char *path, mode_t mode);
int __real_mkdirat(int dirfd, const char *path, mode_t mode);
int __real_rmdir(const char *path);
ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __real_pwrite(int fd, const void *buf, size_t n, off_t off);
int __real_fsync(int fd);
int __real_ftruncate(int fd, off_t len);
int __real_flock(int fd, int op);
char *__real_mkdtemp(char *tmpl);
int __real_fchmod(int fd, mode_t mode);

int __wrap_open(const char *path, int flags, ...);
int __wrap_openat(int dirfd, const char *path, int flags, ...);
int __wrap_rename(const char *from, const char *to);
int __wrap_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags);
int __wrap_link(const char *from, const char *to);
int __wrap_unlink(const char *path);
int __wrap_unlinkat(int dirfd, const char *path, int flags);
int __wrap_mkdir(const char *path, mode_t mode);
int __wrap_mkdirat(int dirfd, const char *path, mode_t mode);
int __wrap_rmdir(const char *path);
ssize_t __wrap_write(int fd, const void *buf, size_t n);
ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off);
int __wrap_fsync(int fd);
int __wrap_ftruncate(int fd, off_t len);
int __wrap_flock(int fd, int op);
char *__wrap_mkdtemp(char *tmpl);
int __wrap_fchmod(int fd, mode_t mode);

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & (O_CREAT | O_TMPFILE)) != 0 ? (mode_t)va_arg(ap, int) : 0;
}

int __wrap_open(const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;
    va_start(ap, flags);
    mode = mode_arg(flags, ap);
    va_end(ap);
    return faulted("open", path) ? -1 : __real_open(path, flags, mode);
}

int __wrap_openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    mode_t mode;
    va_start(ap, flags);
    mode = mode_arg(flags, ap);
    va_end(ap);
    return faulted("openat", path) ? -1 : __real_openat(dirfd, path, flags, mode);
}

int __wrap_rename(const char *from, const char *to)
{
    return faulted("rename", to) ? -1 : __real_rename(from, to);
}

int __wrap_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags)
{
    return faulted("renameat2", to) ? -1 : __real_renameat2(fromfd, from, tofd, to, flags);
}

int __wrap_link(const char *from, const char *to)
{
    return faulted("link", to) ? -1 : __real_link(from, to);
}

int __wrap_unlink(const char *path)
{
    return faulted("unlink", path) ? -1 : __real_unlink(path);
}

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
    return faulted("unlinkat", path) ? -1 : __real_unlinkat(dirfd, path, flags);
}

int __wrap_mkdir(const char *path, mode_t mode)
{
    return faulted("mkdir", path) ? -1 : __real_mkdir(path, mode);
}

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
    return faulted("mkdirat", path) ? -1 : __real_mkdirat(dirfd, path, mode);
}

int __wrap_rmdir(const char *path)
{
    return faulted("rmdir", path) ? -1 : __real_rmdir(path);
}

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
    return faulted("write", NULL) ? -1 : __real_write(fd, buf, n);
}

ssize_t __wrap_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return faulted("pwrite", NULL) ? -1 : __real_pwrite(fd, buf, n, off);
}

int __wrap_fsync(int fd)
{
    return faulted("fsync", NULL) ? -1 : __real_fsync(fd);
}

int __wrap_ftruncate(int fd, off_t len)
{
    return faulted("ftruncate", NULL) ? -1 : __real_ftruncate(fd, len);
}

int __wrap_flock(int fd, int op)
{
    /* unlocking is not a change a dead process makes (the kernel drops its locks) */
    if ((op & LOCK_UN) != 0) {
        return __real_flock(fd, op);
    }
    return faulted("flock", NULL) ? -1 : __real_flock(fd, op);
}

char *__wrap_mkdtemp(char *tmpl)
{
    return faulted("mkdtemp", tmpl) ? NULL : __real_mkdtemp(tmpl);
}

int __wrap_fchmod(int fd, mode_t mode)
{
    return faulted("fchmod", NULL) ? -1 : __real_fchmod(fd, mode);
}
