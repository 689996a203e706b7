/* A safetensors file being written (unroll/safetensors.h): created at its full size with its
 * header and its blocks reserved, then filled at offsets by any thread (pwrite, or stores
 * into a shared mapping for scattered runs: the bytes go to the page cache, none is held
 * here), then made durable. */
#include "unroll/safetensors.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <string.h>

struct ur_st_file {
    int fd;
    char *path;
    uint64_t data_start, size;
    int mappable; /* blocks reserved: a store through a mapping cannot meet a full disk */
};

int ur_st_file_create(ur_st_file **out, const char *path, const ur_st_layout *layout, ur_err *err)
{
    ur_st_file *f = ur_calloc(1, sizeof *f);
    int rc = f != NULL && (f->path = ur_strdup(path)) != NULL ? UR_OK : ur_err_oom(err);
    f != NULL ? (void)(f->fd = -1) : (void)0;
    if (rc == UR_OK) {
        rc = ur_fs_create_sized(&f->fd, path, layout->file_size, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_reserve(f->fd, layout->file_size, path, err);
        f->mappable = rc == UR_OK;
        if (rc == UR_EUNSUPPORTED) {
            ur_err_clear(err); /* written with pwrite only */
            rc = UR_OK;
        }
    }
    if (rc == UR_OK) {
        rc = ur_fs_pwrite_full(f->fd, layout->header.data, layout->header.len, 0, path, err);
    }
    if (rc < 0) {
        ur_st_file_abort(f);
        return rc;
    }
    f->data_start = layout->header.len;
    f->size = layout->file_size;
    *out = f;
    return UR_OK;
}

int ur_st_file_write(ur_st_file *f, uint64_t at, const void *data, size_t n, ur_err *err)
{
    if (at < f->data_start || at > f->size || n > f->size - at) {
        return ur_err_set_os(err, UR_EINVAL, 0, f->path,
                             "safetensors: %zu bytes at %llu fall outside the data section", n,
                             (unsigned long long)at);
    }
    return ur_fs_pwrite_full(f->fd, data, n, at, f->path, err);
}

int ur_st_file_map(ur_st_file *f, uint64_t at, size_t n, ur_fs_map *m, ur_err *err)
{
    memset(m, 0, sizeof *m);
    if (at < f->data_start || at > f->size || n > f->size - at) {
        return ur_err_set_os(err, UR_EINVAL, 0, f->path,
                             "safetensors: %zu bytes at %llu fall outside the data section", n,
                             (unsigned long long)at);
    }
    return f->mappable ? ur_fs_map_write(f->fd, at, n, f->path, m, err) : UR_OK;
}

const char *ur_st_file_path(const ur_st_file *f)
{
    return f->path;
}

int ur_st_file_finish(ur_st_file *f, ur_err *err)
{
    int rc = ur_fs_sync_close(f->fd, f->path, err);
    f->fd = -1;
    ur_st_file_abort(f);
    return rc;
}

void ur_st_file_abort(ur_st_file *f)
{
    if (f != NULL) {
        if (f->fd >= 0) {
            ur_fs_close(f->fd);
        }
        ur_free(f->path);
        ur_free(f);
    }
}
