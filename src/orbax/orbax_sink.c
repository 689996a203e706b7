/* The Orbax writer as an output sink (unroll/sink.h): a begun array is a zarr handle prepared
 * by the writer (it encodes chunks on any thread) plus a copy of its key path; finishing it
 * publishes it (leaf + zarr metadata) and closes the handle, so the writer holds no handle
 * for an array whose chunks are all written. */
#include "orbax_impl.h"

#include "unroll/alloc.h"

#include <string.h>

struct ur_sink_array {
    ur_zarr_array *arr;
    size_t depth;
    ur_orbax_key *keys; /* the key strings follow the keys in the same block */
};

/* The writer's key path of p in one block (ur_free it), NULL when out of memory. */
static ur_orbax_key *copy_keys(const ur_sink_path *p)
{
    size_t bytes = (p->len ? p->len : 1) * sizeof(ur_orbax_key);
    for (size_t i = 0; i < p->len; i++) {
        bytes += strlen(p->comp[i]) + 1;
    }
    ur_orbax_key *keys = ur_malloc(bytes);
    if (keys == NULL) {
        return NULL;
    }
    char *s = (char *)(keys + (p->len ? p->len : 1));
    for (size_t i = 0; i < p->len; i++) {
        size_t n = strlen(p->comp[i]) + 1;
        memcpy(s, p->comp[i], n);
        keys[i].key = s;
        keys[i].type = p->seq != NULL && p->seq[i] ? UR_ORBAX_KEY_SEQUENCE : UR_ORBAX_KEY_DICT;
        s += n;
    }
    return keys;
}

static int s_reserve(void *self, size_t n, ur_err *err)
{
    return ur_orbax_writer_reserve(self, n, err);
}

static int s_add_scalar(void *self, const ur_sink_path *path, ur_dtype dtype, const void *value,
                        ur_err *err)
{
    ur_orbax_key *keys = copy_keys(path);
    int rc = keys != NULL ? ur_orbax_writer_add_scalar(self, keys, path->len, dtype, value, err)
                          : ur_err_oom(err);
    ur_free(keys);
    return rc;
}

static int s_add_empty(void *self, const ur_sink_path *path, ur_sink_empty kind, ur_err *err)
{
    static const ur_orbax_value_type kinds[] = {
        [UR_SINK_EMPTY_DICT] = UR_ORBAX_VALUE_EMPTY_DICT,
        [UR_SINK_EMPTY_LIST] = UR_ORBAX_VALUE_EMPTY_LIST,
        [UR_SINK_EMPTY_TUPLE] = UR_ORBAX_VALUE_EMPTY_TUPLE,
        [UR_SINK_EMPTY_NONE] = UR_ORBAX_VALUE_NONE,
        [UR_SINK_EMPTY_NAMED_TUPLE] = UR_ORBAX_VALUE_EMPTY_NAMED_TUPLE,
    };
    ur_orbax_key *keys = copy_keys(path);
    int rc = keys != NULL ? ur_orbax_writer_add_empty(self, keys, path->len, kinds[kind], err)
                          : ur_err_oom(err);
    ur_free(keys);
    return rc;
}

static void s_drop_array(void *self, ur_sink_array *a)
{
    (void)self;
    if (a != NULL) {
        ur_zarr_array_close(a->arr);
        ur_free(a->keys);
        ur_free(a);
    }
}

static int s_begin_array(void *self, const ur_sink_path *path, ur_dtype dtype, int rank,
                         const uint64_t *shape, const uint64_t *chunk_shape, ur_sink_array **out,
                         ur_err *err)
{
    ur_sink_array *a = ur_calloc(1, sizeof(*a));
    int rc;
    if (a == NULL || (a->keys = copy_keys(path)) == NULL) {
        ur_free(a);
        return ur_err_oom(err);
    }
    a->depth = path->len;
    rc = ur_orbax_writer_prepare_array(self, a->keys, a->depth, dtype, rank, shape, chunk_shape,
                                       &a->arr, err);
    if (rc < 0) {
        s_drop_array(self, a);
        return rc;
    }
    *out = a;
    return UR_OK;
}

static int s_encode_chunk(void *self, ur_sink_array *a, const uint64_t *idx, const void *raw,
                          ur_buf *out, ur_err *err)
{
    (void)idx; /* stored by write_chunk, in the run's order */
    (void)self;
    return ur_zarr_array_encode_chunk(a->arr, raw, out, err);
}

static int s_write_chunk(void *self, ur_sink_array *a, const uint64_t *idx, const void *enc,
                         size_t len, ur_err *err)
{
    (void)self;
    return ur_zarr_array_write_encoded(a->arr, idx, enc, len, err);
}

static int s_finish_array(void *self, ur_sink_array *a, ur_err *err)
{
    /* Replicated spec (NULL): restorable on any mesh; MaxText reshards on load. */
    int rc = ur_orbax_writer_publish_array(self, a->keys, a->depth, NULL, a->arr, err);
    s_drop_array(self, a);
    return rc;
}

static int s_finish(void *self, ur_err *err)
{
    return ur_orbax_writer_commit(self, err);
}

static void s_abort(void *self)
{
    ur_orbax_writer_abort(self);
}

static const ur_sink_ops orbax_sink_ops = {
    s_reserve,     s_add_scalar,   s_add_empty,  s_begin_array, s_encode_chunk,
    s_write_chunk, s_finish_array, s_drop_array, s_finish,      s_abort,
};

void ur_orbax_sink_init(ur_sink *sink, ur_orbax_writer *w)
{
    sink->ops = &orbax_sink_ops;
    sink->self = w;
}
