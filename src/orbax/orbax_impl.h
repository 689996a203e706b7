/* Internals shared by the files of the Orbax layer: a string arena, JSON helpers, and the pure
 * parsers/emitters of the metadata files (no I/O; orbax_ckpt.c and orbax_write.c do that). */
#ifndef UNROLL_ORBAX_IMPL_H
#define UNROLL_ORBAX_IMPL_H

#include "unroll/buf.h"
#include "unroll/err.h"
#include "unroll/kvstore.h"
#include "unroll/orbax.h"
#include "unroll/strmap.h"

#include <cjson/cJSON.h>

#include <stddef.h>
#include <stdint.h>

/* Largest metadata file read whole (JSON). */
#define UR_ORBAX_MAX_JSON_BYTES ((size_t)1 << 30)
/* Largest extent accepted for a shape or mesh axis (TensorStore's kInfIndex is 2^62 - 2). */
#define UR_ORBAX_MAX_DIM ((uint64_t)1 << 62)

/* ---- orbax_loc.c: where a checkpoint being read lives ------------------------------------ */

/* The stores that the paths below root_path ("scheme://bucket", or the local directory named)
 * and, locally, below up_path (its parent) are keys of: "<root_path>/<key>". root NULL: a local
 * path that is no directory. */
typedef struct ur_orbax_loc {
    ur_kvstore *root;
    char *root_path;
    ur_kvstore *up; /* local only; NULL when the parent cannot be opened */
    char *up_path;
    int local;
    /* Optional: where a yes/no question that could not be answered (out of memory, a store
     * error) records its error code, the first one only. Its "no" is then not to be
     * trusted: the caller fails with that code rather than read "absent". */
    int *failed;
} ur_orbax_loc;

typedef int (*ur_orbax_loc_name_fn)(void *ctx, const char *name);

/* The directory that holds `path` ("." for a bare name), newly allocated; NULL: out of memory. */
char *ur_orbax__parent_dir(const char *path);

/* For `path`: local, or open its bucket. UR_EINVAL for an unknown scheme. */
int ur_orbax__loc_open(ur_orbax_loc *l, const char *path, ur_err *err);
void ur_orbax__loc_close(ur_orbax_loc *l);
int ur_orbax__loc_is_dir(const ur_orbax_loc *l, const char *path);
/* dir/name is a file or a directory. */
int ur_orbax__loc_exists(const ur_orbax_loc *l, const char *dir, const char *name);
/* Read dir/name whole (locally beneath the directory named, or its parent). */
int ur_orbax__loc_read(const ur_orbax_loc *l, ur_buf *b, const char *dir, const char *name,
                       size_t max_bytes, ur_err *err);
/* Entries of dir whose names start with prefix (0 when dir cannot be listed). */
size_t ur_orbax__loc_count_prefixed(const ur_orbax_loc *l, const char *dir, const char *prefix);
/* fn(ctx, name) for each subdirectory of dir; a nonzero return stops and is returned. */
int ur_orbax__loc_list_dirs(const ur_orbax_loc *l, const char *dir, ur_orbax_loc_name_fn fn,
                            void *ctx, ur_err *err);
/* The array store of item directory `dir`: OCDBT or plain. */
int ur_orbax__loc_open_store(const ur_orbax_loc *l, ur_kvstore **out, const char *dir, int ocdbt,
                             ur_err *err);

/* ---- orbax_json.c ----------------------------------------------------------------------- */

/* A bump allocator for the strings and arrays a parse produces; freed in one go. */
typedef struct ur_orbax__arena_block ur_orbax__arena_block;
typedef struct ur_orbax_arena {
    ur_orbax__arena_block *head;
} ur_orbax_arena;

void ur_orbax__arena_init(ur_orbax_arena *a);
void ur_orbax__arena_dispose(ur_orbax_arena *a);
/* Zeroed, aligned for any type; NULL when out of memory. */
void *ur_orbax__arena_alloc(ur_orbax_arena *a, size_t n);
char *ur_orbax__arena_strdup(ur_orbax_arena *a, const char *s);
/* Move every block of `from` into `into` (from is left empty). */
void ur_orbax__arena_adopt(ur_orbax_arena *into, ur_orbax_arena *from);
char *ur_orbax__arena_strndup(ur_orbax_arena *a, const char *s, size_t n);

/* ---- orbax_keep.c ----------------------------------------------------------------------- */

/* Copies into an arena with each distinct value held once (see orbax_keep.c). Each function
 * replaces the pointer it is given by the kept copy's (NULL stays NULL; an empty block becomes
 * NULL); UR_ENOMEM. One thread at a time. */
typedef struct {
    ur_orbax_arena *arena;
    ur_strmap strings, blocks;
} ur_orbax_keep;

void ur_orbax__keep_init(ur_orbax_keep *k, ur_orbax_arena *arena);
/* Frees the maps only: the copies stay in the arena. */
void ur_orbax__keep_dispose(ur_orbax_keep *k);
int ur_orbax__keep_str(ur_orbax_keep *k, const char **s, ur_err *err);
int ur_orbax__keep_block(ur_orbax_keep *k, const void **p, size_t n, ur_err *err);
int ur_orbax__keep_dims(ur_orbax_keep *k, const uint64_t **dims, int rank, ur_err *err);
/* Every string and array of a sharding. */
int ur_orbax__keep_sharding(ur_orbax_keep *k, ur_orbax_sharding *s, ur_err *err);

/* Parse `len` bytes of JSON (ur_json_parse); UR_ECORRUPT "<what>: invalid JSON near byte N",
 * UR_ENOMEM "<what>: out of memory". */
int ur_orbax__json_parse(cJSON **out, const char *text, size_t len, const char *what, ur_err *err);
/* Append `s` as a JSON string the way Python's json.dumps writes it (ensure_ascii: non-ASCII
 * as \uXXXX). UR_EINVAL for invalid UTF-8. */
int ur_orbax__json_put_str(ur_buf *b, const char *s, ur_err *err);
/* A JSON number that must be an integer in [lo, hi]; 0 on success, -1 when not. */
int ur_orbax__json_int(const cJSON *v, int64_t lo, int64_t hi, int64_t *out);
/* Compact text of a JSON value into the arena (NULL when out of memory). */
char *ur_orbax__json_print(ur_orbax_arena *a, const cJSON *v);

/* ---- orbax_tree.c ----------------------------------------------------------------------- */

/* The tree_metadata key of a path: Python str() of the tuple of key names. */
int ur_orbax_tree_keypath(ur_buf *out, const ur_orbax_key *path, size_t depth, ur_err *err);
/* The param name: key names joined by '.'. */
int ur_orbax_tree_name(ur_buf *out, const ur_orbax_key *path, size_t depth, ur_err *err);
/* Put the leaves in Orbax's tree order (sort by key path, SEQUENCE keys as integers), drop
 * entries whose path is a strict prefix of another, and check the structure restore needs:
 * no duplicates, one key type per parent, list indices 0,1,2,... with no gaps. `*n` may
 * shrink. UR_ECORRUPT naming the leaf. */
int ur_orbax_tree_order(ur_orbax_leaf *leaves, size_t *n, const char *what, ur_err *err);

/* ---- orbax_meta.c: _METADATA ------------------------------------------------------------ */

typedef struct ur_orbax_meta {
    ur_orbax_arena arena;
    size_t n_leaves;
    ur_orbax_leaf *leaves;  /* tree order */
    int use_ocdbt;          /* -1 null/absent (detect), else 0/1 */
    int use_zarr3;          /* absent: 0 */
    int store_fill;         /* store_array_data_equal_to_fill_value; absent: 0 */
    const char *custom_metadata_json; /* NULL for null/absent */
} ur_orbax_meta;

/* Parse `_METADATA` text. Errors are UR_ECORRUPT naming the entry ("_METADATA: ('a',): ..."). */
int ur_orbax_meta_parse(ur_orbax_meta **out, const char *json, size_t len, ur_err *err);
/* Emit as Orbax writes it (Python json.dumps layout, leaves in the given order). Only the
 * leaves' path, value_type, skip_deserialize and write_shape are used. */
int ur_orbax_meta_emit(ur_buf *out, const ur_orbax_meta *m, ur_err *err);
/* The same document handed to `sink` piece by piece, in order (pieces of a few thousand
 * leaves, two at a time emitted on two threads when there are many): a document of 200,000
 * leaves is written without being held whole. */
typedef int (*ur_orbax_sink)(void *ctx, const void *data, size_t n, ur_err *err);
/* A sink appending to the ur_buf `buf`. */
int ur_orbax__append_sink(void *buf, const void *data, size_t n, ur_err *err);
/* Hands b's text to the sink and empties it once it holds a piece's worth (1 MiB): emitters
 * call it between entries, so that a document is never held whole. */
int ur_orbax__sink_piece(ur_buf *b, ur_orbax_sink sink, void *ctx, ur_err *err);
/* The scratch region (unroll/json.h) of a walk that parses a document's entries one at a
 * time: room for one entry's cJSON tree (a few KB); a larger one goes to the heap. */
#define UR_ORBAX_ENTRY_SCRATCH ((size_t)64 << 10)
/* Entries [0, n) of a document handed to `sink` in order, in pieces of `per` entries, emitted
 * by this thread and a second one, each sinking its own pieces in their turn (the commit of
 * 200,000 output leaves spends most of its time emitting its metadata files). `emit` appends
 * entries [lo, hi) of src to out. */
typedef int (*ur_orbax_range_fn)(const void *src, ur_buf *out, size_t lo, size_t hi, ur_err *err);
int ur_orbax__emit_pieces(const void *src, size_t n, size_t per, ur_orbax_range_fn emit,
                          ur_orbax_sink sink, void *ctx, ur_err *err);
int ur_orbax_meta_emit_to(const ur_orbax_meta *m, ur_orbax_sink sink, void *ctx, ur_err *err);
void ur_orbax_meta_free(ur_orbax_meta *m);

/* ---- orbax_sharding.c: _sharding -------------------------------------------------------- */

/* Parameter names are keys in URL-safe base64 with '=' padding (unroll/b64.h, UR_B64_URL). */

typedef struct ur_orbax_sharding_map {
    ur_orbax_arena arena;
    size_t n;
    const char **names;           /* decoded param names, file order */
    ur_orbax_sharding *shardings; /* kind ABSENT for an empty-string member */
    ur_strmap index;              /* name -> position */
} ur_orbax_sharding_map;

/* Parse a whole `_sharding` file. Errors name the array ("_sharding: 'a.b': ..."). */
int ur_orbax_sharding_parse(ur_orbax_sharding_map **out, const char *json, size_t len,
                            ur_err *err);
/* Parse one member's value (itself JSON text) into *out; strings go into `a`. */
int ur_orbax_sharding_value_parse(ur_orbax_sharding *out, ur_orbax_arena *a, const char *json,
                                  ur_err *err);
/* One member value as Orbax writes it (Python json.dumps). */
int ur_orbax_sharding_value_emit(ur_buf *out, const ur_orbax_sharding *s, ur_err *err);
/* A whole `_sharding` file (compact, as TensorStore's json driver writes it). */
int ur_orbax_sharding_emit(ur_buf *out, const char *const *names,
                           const ur_orbax_sharding *shardings, size_t n, ur_err *err);
/* The same for the jax.Array leaves of `leaves` (by name, with their sharding), handed to
 * `sink` piece by piece: the writer's 200,000 leaves need no copy of their names and
 * shardings. */
int ur_orbax_sharding_emit_leaves_to(const ur_orbax_leaf *leaves, size_t n, ur_orbax_sink sink,
                                     void *ctx, ur_err *err);
/* Borrowed entry, NULL when absent. */
const ur_orbax_sharding *ur_orbax_sharding_find(const ur_orbax_sharding_map *m, const char *name);
void ur_orbax_sharding_map_free(ur_orbax_sharding_map *m);

/* ---- orbax_ckpt_meta.c: _CHECKPOINT_METADATA, array_metadatas, _strings.json ------------ */

typedef struct ur_orbax_step_meta_doc {
    ur_orbax_arena arena;
    ur_orbax_step_meta meta;
} ur_orbax_step_meta_doc;

int ur_orbax_ckpt_meta_parse(ur_orbax_step_meta_doc **out, const char *json, size_t len,
                             ur_err *err);
void ur_orbax_ckpt_meta_free(ur_orbax_step_meta_doc *d);

typedef struct ur_orbax_array_meta {
    const char *param_name;
    int write_rank; /* -1 when absent */
    const uint64_t *write_shape; /* write_rank entries */
    int chunk_rank; /* -1 when absent */
    const uint64_t *chunk_shape;
    const char *random_key_impl; /* NULL unless ext_metadata names one */
} ur_orbax_array_meta;

typedef struct ur_orbax_array_meta_list {
    ur_orbax_arena arena;
    size_t n;
    ur_orbax_array_meta *items;
} ur_orbax_array_meta_list;

int ur_orbax_array_meta_parse(ur_orbax_array_meta_list **out, const char *json, size_t len,
                              ur_err *err);
int ur_orbax_array_meta_emit(ur_buf *out, const ur_orbax_array_meta *items, size_t n, ur_err *err);
/* The same for the jax.Array leaves of `leaves`, as the writer records them (param name,
 * write and chunk shape of the leaf's rank and chunk_shape, no ext_metadata), handed to
 * `sink` piece by piece. */
int ur_orbax_array_meta_emit_leaves_to(const ur_orbax_leaf *leaves, size_t n, ur_orbax_sink sink,
                                       void *ctx, ur_err *err);
void ur_orbax_array_meta_free(ur_orbax_array_meta_list *l);

/* Parse a JSON list of non-negative integers (a shape) into dims; UR_ECORRUPT otherwise. */
int ur_orbax__parse_shape(const cJSON *v, uint64_t *dims, int *rank, const char *what,
                          ur_err *err);
/* The same into an array of *rank entries allocated in `a` (*dims NULL for rank 0). */
int ur_orbax__parse_shape_in(const cJSON *v, ur_orbax_arena *a, const uint64_t **dims, int *rank,
                             const char *what, ur_err *err);
/* A copy of n entries in `a` (NULL for n 0 or when out of memory: check n). */
uint64_t *ur_orbax__arena_dims(ur_orbax_arena *a, const uint64_t *dims, int n);
/* Append "[1, 2, 3]" (Python layout). */
int ur_orbax__put_shape(ur_buf *b, const uint64_t *dims, int rank, ur_err *err);

#endif
