/* An output sink: where the executor (unroll/exec.h) puts the arrays it makes, whatever
 * the output format. The Orbax writer is one (ur_orbax_sink_new, unroll/orbax.h); a new output
 * format is a new implementation of this table and nothing else.
 *
 * One array goes through begin_array (any thread, in any order: it makes the array ready to
 * encode and writes nothing), encode_chunk (any thread, concurrently: the expensive part),
 * write_chunk (one thread at a time, in the run's fixed order) for each of its chunks, then
 * finish_array (in the same order, after its last chunk) or, when the run fails,
 * drop_array. Whole leaves without chunks (add_scalar, add_empty) are added before the arrays.
 * Because every call that writes is made in one fixed order, a sink's output does not depend
 * on the executor's thread count. finish commits everything; abort throws it away. */
#ifndef UNROLL_SINK_H
#define UNROLL_SINK_H

#include "unroll/buf.h"
#include "unroll/dtype.h"
#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

/* A leaf's key path: `len` components; seq[i] 1 when component i is a list index (NULL: all
 * dict keys). Borrowed for the duration of the call. */
typedef struct ur_sink_path {
    const char *const *comp;
    const unsigned char *seq;
    size_t len;
} ur_sink_path;

/* The empty entries a leaf can be ({}, [], (), None, an empty NamedTuple). */
typedef enum {
    UR_SINK_EMPTY_DICT,
    UR_SINK_EMPTY_LIST,
    UR_SINK_EMPTY_TUPLE,
    UR_SINK_EMPTY_NONE,
    UR_SINK_EMPTY_NAMED_TUPLE
} ur_sink_empty;

/* An array being written; what it is belongs to the sink. */
typedef struct ur_sink_array ur_sink_array;

typedef struct ur_sink_ops {
    /* Make room for n more leaves (a hint). */
    int (*reserve)(void *self, size_t n, ur_err *err);
    int (*add_scalar)(void *self, const ur_sink_path *path, ur_dtype dtype, const void *value,
                      ur_err *err);
    int (*add_empty)(void *self, const ur_sink_path *path, ur_sink_empty kind, ur_err *err);
    /* Thread-safe; writes nothing. Chunks are chunk_shape (edge chunks padded). */
    int (*begin_array)(void *self, const ur_sink_path *path, ur_dtype dtype, int rank,
                       const uint64_t *shape, const uint64_t *chunk_shape, ur_sink_array **out,
                       ur_err *err);
    /* Thread-safe: the stored form of chunk idx (grid index, rank entries; raw: C order,
     * chunk_shape, dtype), appended to *out. A sink that stores by position (a safetensors
     * file: every tensor's place is known before data flows) may store it here, from the
     * worker's thread, and leave *out empty. */
    int (*encode_chunk)(void *self, ur_sink_array *a, const uint64_t *idx, const void *raw,
                        ur_buf *out, ur_err *err);
    /* Ordered: store chunk idx (grid index, rank entries) as encoded. */
    int (*write_chunk)(void *self, ur_sink_array *a, const uint64_t *idx, const void *enc,
                       size_t len, ur_err *err);
    /* Ordered, once every chunk is written: the array is complete; `a` is released. */
    int (*finish_array)(void *self, ur_sink_array *a, ur_err *err);
    /* Release an array that will not be finished (a failed run). NULL-safe. */
    void (*drop_array)(void *self, ur_sink_array *a);
    /* Commit the output; the sink is freed whether it succeeds or not. */
    int (*finish)(void *self, ur_err *err);
    /* Throw the output away and free the sink. */
    void (*abort)(void *self);
} ur_sink_ops;

typedef struct ur_sink {
    const ur_sink_ops *ops;
    void *self;
} ur_sink;

#endif
