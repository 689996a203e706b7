/* An append-only output file for bulk data (OCDBT data files). The bytes are gathered into
 * large aligned blocks and written by a background thread, with direct I/O (O_DIRECT) where
 * the file system takes it: the data skip the page cache, so the writer pays no kernel copy
 * and no dirty-page writeback, and the disk works while the caller computes. Where direct
 * I/O is refused (tmpfs, some network file systems) the same blocks go through the page
 * cache. Either way the file holds exactly the bytes appended, and is fsync'ed by finish.
 *
 * One thread appends; errors of the background writes (ENOSPC, EFBIG, EIO) are reported by
 * the next append or by finish, naming the file. */
#ifndef UNROLL_APPENDFILE_H
#define UNROLL_APPENDFILE_H

#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ur_appendfile ur_appendfile;

/* Create `path` (it must not exist) for appending. */
int ur_appendfile_create(ur_appendfile **out, const char *path, ur_err *err);

/* Append n bytes (copied; the caller keeps its buffer). */
int ur_appendfile_write(ur_appendfile *f, const void *data, size_t n, ur_err *err);

/* Bytes appended so far. */
uint64_t ur_appendfile_size(const ur_appendfile *f);

/* Write what is left, wait for the disk, fsync and close; frees f whatever the outcome. */
int ur_appendfile_finish(ur_appendfile *f, ur_err *err);

/* Stop without syncing (after a failure); the file is left for the caller to remove.
 * Frees f; NULL-safe. */
void ur_appendfile_abort(ur_appendfile *f);

#endif
