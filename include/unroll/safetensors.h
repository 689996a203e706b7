/* Safetensors files (src/safetensors/, docs/safetensors.md): the tensor file format of Hugging
 * Face, written and read here without any model knowledge.
 *
 *   [u64 little-endian N][N bytes: JSON header, padded with spaces to a multiple of 8][data]
 *   header: {"__metadata__": {"format": "pt"}, "<name>": {"dtype": "BF16", "shape": [..],
 *            "data_offsets": [begin, end]}, ...}   offsets relative to the data's start
 *
 * As the `safetensors` library writes it: tensors laid out by dtype, the wider first (its
 * Dtype order), then by name; back to back, no holes; the header's keys in that order after
 * "__metadata__"; compact JSON. So a file this module writes is byte for byte the library's
 * for the same tensors. The reader takes any valid file: contiguous, non-overlapping data
 * covering the whole data section, every size equal to its shape's, known dtypes. */
#ifndef UNROLL_SAFETENSORS_H
#define UNROLL_SAFETENSORS_H

#include "unroll/buf.h"
#include "unroll/dtype.h"
#include "unroll/err.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"

#include <stddef.h>
#include <stdint.h>

/* The safetensors dtype name ("F32", "BF16", ...), or NULL when it has none. */
const char *ur_st_dtype_name(ur_dtype dt);
/* Inverse of ur_st_dtype_name; UR_DT_INVALID when unknown. */
ur_dtype ur_st_dtype_from_name(const char *name);

/* ---- writing (st_layout.c, st_file.c) --------------------------------------------------- */

/* A tensor to lay out (borrowed). */
typedef struct {
    const char *name;
    ur_dtype dtype;
    int rank;
    const uint64_t *shape;
} ur_st_decl;

/* A file's layout: its header bytes and where each tensor's bytes go. */
typedef struct {
    ur_buf header;       /* the 8-byte size, the JSON, its padding */
    uint64_t file_size;  /* header + data */
    size_t n;
    uint64_t *offset;    /* per declaration (in the caller's order): absolute file offset */
    uint64_t *nbytes;    /* per declaration */
} ur_st_layout;

/* Lay out n tensors with the metadata {"format": "pt"}. UR_EINVAL naming the tensor: a dtype
 * safetensors has no name for, a duplicate or empty name, a size that overflows. */
int ur_st_layout_build(ur_st_layout *out, const ur_st_decl *decls, size_t n, ur_err *err);
void ur_st_layout_dispose(ur_st_layout *l);

/* A file being written: created at its full size with its header in place; tensor bytes are
 * then written at their offsets from any thread, in any order. */
typedef struct ur_st_file ur_st_file;

/* Create `path` (it must not exist) for `layout` (borrowed until finish or abort). */
int ur_st_file_create(ur_st_file **out, const char *path, const ur_st_layout *layout, ur_err *err);
/* n bytes at absolute offset `at`; UR_EINVAL when the range falls outside the data section. */
int ur_st_file_write(ur_st_file *f, uint64_t at, const void *data, size_t n, ur_err *err);
/* A writable view of bytes [at, at + n) for many scattered stores (the rows of a transposed
 * tensor, a run of a few hundred bytes each, would be a system call each with
 * ur_st_file_write). m->data is NULL when the file system could not reserve the file's blocks
 * (then write with ur_st_file_write); release with ur_fs_unmap. Stores of one thread into a
 * view while another thread writes elsewhere in the file are as pwrite's are. */
int ur_st_file_map(ur_st_file *f, uint64_t at, size_t n, ur_fs_map *m, ur_err *err);
/* The path being written (borrowed). */
const char *ur_st_file_path(const ur_st_file *f);
/* Make the file durable (fsync) and close it; frees f whatever the outcome. */
int ur_st_file_finish(ur_st_file *f, ur_err *err);
/* Close without syncing (a failed run: the caller removes the file); frees f; NULL-safe. */
void ur_st_file_abort(ur_st_file *f);

/* ---- reading (st_read.c) ---------------------------------------------------------------- */

typedef struct {
    char *name;
    ur_dtype dtype;
    int rank;
    uint64_t shape[UR_MAX_RANK];
    uint64_t begin, end; /* absolute file offsets of the bytes */
} ur_st_entry;

typedef struct {
    ur_st_entry *e; /* in file order */
    size_t n;
    char *metadata; /* "__metadata__" as compact JSON, or NULL */
    uint64_t data_start;
} ur_st_header;

/* Parse a header: `bytes` holds at least the first 8 + N bytes of a file of `file_size`
 * bytes. UR_ECORRUPT (with the byte offset where it can) for anything the format does not
 * allow; UR_EUNSUPPORTED for a dtype this build does not know. */
int ur_st_header_parse(ur_st_header *h, const uint8_t *bytes, size_t n, uint64_t file_size,
                       ur_err *err);
/* Read and parse the header of value `key` of kv (two ranged reads). */
int ur_st_header_read(ur_st_header *h, ur_kvstore *kv, const char *key, ur_err *err);
/* The entry named `name`, or NULL. */
const ur_st_entry *ur_st_header_find(const ur_st_header *h, const char *name);
void ur_st_header_dispose(ur_st_header *h);

/* Header sizes past this are refused (the library's own limit is 100 MB). */
#define UR_ST_HEADER_MAX ((uint64_t)100 << 20)

#endif
