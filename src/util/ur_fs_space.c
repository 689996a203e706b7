/* Free space where a path will be created: statvfs of its nearest existing ancestor (the
 * path itself usually does not exist yet), so a run can refuse before it writes anything. */
#define _POSIX_C_SOURCE 200809L
#include "unroll/fs.h"

#include "unroll/alloc.h"

#include <errno.h>
#include <string.h>
#include <sys/statvfs.h>

int ur_fs_free_space(const char *path, uint64_t *free_out, ur_err *err)
{
    char *p = ur_strdup(path[0] != '\0' ? path : ".");
    struct statvfs sv;
    int rc = UR_OK;

    if (p == NULL) {
        return ur_err_oom(err);
    }
    for (;;) {
        char *slash;
        if (statvfs(p, &sv) == 0) {
            break;
        }
        if (errno != ENOENT || strcmp(p, ".") == 0 || strcmp(p, "/") == 0) {
            rc = ur_err_set_os(err, UR_EIO, errno, p, "cannot query free space");
            break;
        }
        slash = strrchr(p, '/');
        if (slash == NULL) {
            /* a relative path with no existing component: the current directory */
            ur_free(p);
            p = ur_strdup(".");
            if (p == NULL) {
                return ur_err_oom(err);
            }
            continue;
        }
        slash[slash == p ? 1 : 0] = '\0';
    }
    if (rc == UR_OK) {
        /* f_bavail: blocks an unprivileged writer may use */
        *free_out = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
    }
    ur_free(p);
    return rc;
}

int ur_fs_space_check(const char *path, uint64_t need, ur_err *err)
{
    uint64_t avail = 0;
    int rc = ur_fs_free_space(path, &avail, err);
    if (rc == UR_OK && need > avail) {
        rc = ur_err_set_os(err, UR_EIO, ENOSPC, path,
                           "not enough free space: the output needs up to %llu bytes "
                           "(%.3f GiB uncompressed), %llu bytes (%.3f GiB) are free",
                           (unsigned long long)need, (double)need / 1073741824.0,
                           (unsigned long long)avail, (double)avail / 1073741824.0);
    }
    return rc;
}
