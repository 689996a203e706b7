/* File-system helpers shared by the layers that touch disk. Every failure names the path
 * and carries errno (UR_EIO, or UR_ENOTFOUND for a missing file). Paths are '/'-separated. */
#ifndef UNROLL_FS_H
#define UNROLL_FS_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

/* "a" + "b" -> "a/b" (no doubled '/'); a new string the caller frees with ur_free. */
char *ur_path_join(const char *a, const char *b);
/* Like ur_path_join with printf formatting of the second part. */
char *ur_path_joinf(const char *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Read a whole file, failing with UR_ECORRUPT when it is larger than max_bytes. */
int ur_fs_read_file(ur_buf *out, const char *path, size_t max_bytes, ur_err *err);
/* Read exactly n bytes at offset from an open descriptor (pread loop). A short file is
 * UR_ECORRUPT ("truncated"); `path` names it in the error. */
int ur_fs_pread_full(int fd, void *dst, size_t n, uint64_t offset, const char *path,
                     ur_err *err);
/* A read-only private mapping of bytes [offset, offset + n) of an open file: `data` points
 * at them (the page cache's own pages, populated up front: no copy, no fault per page). A
 * file shorter than offset + n is UR_ECORRUPT, as for ur_fs_pread_full. The mapping outlives
 * the descriptor; release it with ur_fs_unmap. If the file shrinks while mapped, touching the
 * lost pages raises SIGBUS; ur_fs_mapped_path() names the file this thread mapped last, for
 * the message of a signal handler. */
typedef struct {
    const uint8_t *data;
    size_t len;
    void *base_; /* the mapping: whole pages around data */
    size_t base_len_;
} ur_fs_map;
int ur_fs_map_range(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m,
                    ur_err *err);
/* NULL-safe, idempotent. */
void ur_fs_unmap(ur_fs_map *m);
/* The path of this thread's latest ur_fs_map_range ("" if none); async-signal-safe. */
const char *ur_fs_mapped_path(void);

/* Write all n bytes (write loop). */
int ur_fs_write_full(int fd, const void *src, size_t n, const char *path, ur_err *err);
/* Create (truncate) `path`, write the bytes, fsync, close. */
int ur_fs_write_file(const char *path, const void *data, size_t n, ur_err *err);
/* mkdir -p. */
int ur_fs_mkdirs(const char *path, ur_err *err);
/* fsync a directory so a rename or create inside it is durable. */
int ur_fs_fsync_dir(const char *path, ur_err *err);
/* rm -rf; a missing path is not an error. Never follows symlinks out of the tree. */
int ur_fs_remove_tree(const char *path, ur_err *err);
/* 1 when path exists (any type), 0 when not. */
int ur_fs_exists(const char *path);
/* 1 when path is a directory. */
int ur_fs_is_dir(const char *path);
/* Size of a regular file. */
int ur_fs_file_size(const char *path, uint64_t *size_out, ur_err *err);
/* Bytes an unprivileged process may still write on the file system that `path` would be
 * created on (statvfs of its nearest existing ancestor; `path` need not exist). UR_EIO
 * naming the ancestor when it cannot be queried. */
int ur_fs_free_space(const char *path, uint64_t *free_out, ur_err *err);

#endif
