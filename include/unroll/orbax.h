/* Orbax checkpoints (orbax-checkpoint 0.12.x, PyTree/Standard handler): read one, or write
 * a new one that stock Orbax restores. Reference: docs/orbax-layout.md.
 *
 * A checkpoint is an item directory (`<root>/<step>/items/`) holding `_METADATA` (the tree),
 * `_sharding` (NamedSharding per jax.Array leaf), `_strings.json`, `array_metadatas/` and the
 * arrays: zarr v2 or v3, in an OCDBT database at the item directory or as plain files.
 *
 *   ur_orbax_ckpt *ck;
 *   ur_orbax_ckpt_open(&ck, "ckpt/0/items", 0, &err);
 *   for (i = 0; i < ur_orbax_ckpt_leaf_count(ck); i++) {
 *       const ur_orbax_leaf *l = ur_orbax_ckpt_leaf(ck, i);
 *       if (l->has_array) { ur_orbax_ckpt_open_array(ck, l, &arr, &err); ... }
 *   }
 *   ur_orbax_ckpt_close(ck);
 *
 * Everything a leaf points to is owned by the checkpoint handle (borrowed by the caller). */
#ifndef UNROLL_ORBAX_H
#define UNROLL_ORBAX_H

#include "unroll/dtype.h"
#include "unroll/err.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"
#include "unroll/sink.h"
#include "unroll/zarr.h"

#include <stddef.h>
#include <stdint.h>

/* key_metadata key_type: a list/tuple index or a dict key (or attribute name). */
typedef enum { UR_ORBAX_KEY_SEQUENCE = 1, UR_ORBAX_KEY_DICT = 2 } ur_orbax_key_type;

/* One component of a leaf's key path. For SEQUENCE the key is the decimal index. */
typedef struct ur_orbax_key {
    const char *key;
    ur_orbax_key_type type;
} ur_orbax_key;

/* value_metadata.value_type. The EMPTY_* kinds and NONE are placeholders for empty nodes
 * (skip_deserialize true; no data is stored). */
typedef enum {
    UR_ORBAX_VALUE_UNKNOWN =
        0, /* a type string this tool does not know (kept in value_type_name) */
    UR_ORBAX_VALUE_JAX_ARRAY,   /* "jax.Array" */
    UR_ORBAX_VALUE_NP_ARRAY,    /* "np.ndarray" */
    UR_ORBAX_VALUE_SCALAR,      /* "scalar": a 0-d array */
    UR_ORBAX_VALUE_STRING,      /* "string": value in _strings.json */
    UR_ORBAX_VALUE_PLACEHOLDER, /* "placeholder" */
    UR_ORBAX_VALUE_EMPTY_DICT,  /* "Dict" */
    UR_ORBAX_VALUE_EMPTY_LIST,  /* "List" */
    UR_ORBAX_VALUE_EMPTY_TUPLE, /* "Tuple" */
    UR_ORBAX_VALUE_NONE,        /* "None" */
    UR_ORBAX_VALUE_EMPTY_NAMED_TUPLE /* "NamedTuple" */
} ur_orbax_value_type;

/* Orbax's name of a value type ("jax.Array", "Dict", ...); "unknown" for UNKNOWN. */
const char *ur_orbax_value_type_name(ur_orbax_value_type vt);
/* Inverse; UR_ORBAX_VALUE_UNKNOWN for a name it does not know. */
ur_orbax_value_type ur_orbax_value_type_from_name(const char *name);
/* 1 for the kinds that store a zarr array (jax.Array, np.ndarray, scalar). */
int ur_orbax_value_type_has_array(ur_orbax_value_type vt);

typedef enum {
    UR_ORBAX_SHARDING_ABSENT = 0,   /* no _sharding entry for the leaf */
    UR_ORBAX_SHARDING_NAMED,        /* NamedSharding */
    UR_ORBAX_SHARDING_SINGLE_DEVICE /* SingleDeviceSharding */
} ur_orbax_sharding_kind;

/* A leaf's `_sharding` entry. Strings are borrowed from the owner (checkpoint or parse). */
typedef struct ur_orbax_sharding {
    ur_orbax_sharding_kind kind;
    /* NAMED: the mesh. Shape entries are as stored (-1 is legal: numpy reshape infers it).
     * The arrays have mesh_rank entries (at least one) and are owned like the strings. */
    int mesh_rank;
    int has_device_mesh; /* an explicit device_mesh was stored */
    /* NAMED: partition spec, one entry per array dim (may be shorter than the array's rank:
     * trailing dims unsharded). NULL = None; several mesh axes on one dim are joined by ','.
     * spec_rank entries (NULL when 0). */
    int spec_rank;
    const char *const *spec;
    const int64_t *mesh_shape;
    const char *const *mesh_axis_names;
    const char *const *mesh_axis_types; /* "AxisType.Auto" ...; NULL or all NULL when absent */
    const char *device_str;             /* SINGLE_DEVICE: "cpu:0", "cuda:0", ... */
} ur_orbax_sharding;

/* One entry of `_METADATA.tree_metadata`, in tree order (Orbax's sort by key path). The shape
 * arrays have as many entries as their rank (NULL when it is 0 or -1), so that a checkpoint of
 * 100,000 leaves costs about as much memory as its _METADATA. */
typedef struct ur_orbax_leaf {
    /* the tree_metadata key ("('params', 'decoder', ...)") is not kept: ur_orbax_tree_keypath
     * writes it from path; the integers are together, so that the record has no padding
     * (the commit of 200,000 output leaves holds 200,000 of them) */
    size_t depth;            /* number of key components */
    const ur_orbax_key *path;
    const char *name;        /* param name: keys joined by '.' (the storage prefix) */
    ur_orbax_value_type value_type;
    int skip_deserialize;
    const char *value_type_name; /* as stored */
    int write_shape_rank;    /* -1 when value_metadata has no write_shape */
    /* Filled from the array's zarr metadata when the checkpoint is opened (has_array = 1). */
    int has_array;
    const uint64_t *write_shape;
    ur_orbax_sharding sharding;
    ur_dtype dtype;
    int rank;
    const uint64_t *shape;
    const uint64_t *chunk_shape; /* read unit (inner chunk for zarr3 sharding) */
    /* From array_metadatas/process_0 (chunk_shape_rank -1 when not listed there). */
    int array_meta_chunk_rank;
    const uint64_t *array_meta_chunk_shape;
    const char *random_key_impl; /* ext_metadata.random_key_impl (PRNG keys), else NULL */
    const char *string_value;    /* STRING leaves: the value from _strings.json, else NULL */
} ur_orbax_leaf;

/* `_CHECKPOINT_METADATA` (step level). Every field is optional. */
typedef struct ur_orbax_step_meta {
    size_t n_item_handlers;
    const char **item_names;    /* NULL entries when item_handlers was a single string */
    const char **item_handlers; /* handler typestrs */
    int has_init_timestamp;
    int64_t init_timestamp_nsecs; /* read through a double: exact only below 2^53 */
    int has_commit_timestamp;
    int64_t commit_timestamp_nsecs;
    const char *custom_metadata_json; /* an object, its text as written; NULL when absent */
} ur_orbax_step_meta;

/* ---- Reading ---------------------------------------------------------------------------- */

typedef struct ur_orbax_ckpt ur_orbax_ckpt;

/* Do not open each array's zarr metadata at open time (has_array stays 0). */
#define UR_ORBAX_OPEN_NO_ARRAYS 1u
/* Read `_sharding` after `_METADATA`'s text is parsed and freed, not on a second thread beside
 * it, and `array_metadatas` once `_sharding`'s parse is kept and freed: one document and its
 * parse at a time (the three together were the peak of `unroll verify` at 100,000 leaves),
 * for more wall time. Same leaves; when several things are wrong, a different first error. */
#define UR_ORBAX_OPEN_SIDE_AFTER 2u

/* Open a checkpoint. `path` is a step directory (the item is `items`, else `default`, else
 * the one PyTree item named by _CHECKPOINT_METADATA, else the only subdirectory that looks
 * like an item; `ocdbt.process_*` never is one), or an item directory, or a direct
 * (StandardCheckpointer) checkpoint. Only a finalized save is opened: a temporary directory
 * (".orbax-checkpoint-tmp" in a name), a step without commit_success.txt whose item has one,
 * an item without _METADATA, an OCDBT item whose ocdbt.process_* were never merged into
 * manifest.ocdbt, or a plain item several processes wrote with no commit mark is
 * UR_ECORRUPT "unfinished Orbax save" naming what is missing (orbax_ckpt.c says why).
 * OCDBT vs plain files as Orbax decides: `_METADATA.use_ocdbt`, or when null, whether
 * manifest.ocdbt exists. Errors: UR_ENOTFOUND (no checkpoint there), UR_ECORRUPT naming the
 * file and leaf, UR_EUNSUPPORTED, UR_EIO, UR_ENOMEM. */
int ur_orbax_ckpt_open(ur_orbax_ckpt **out, const char *path, unsigned flags, ur_err *err);

/* NULL-safe. Arrays opened from it must be closed first. */
void ur_orbax_ckpt_close(ur_orbax_ckpt *ck);

/* The item directory and the step directory (NULL for a bare item with no step metadata). */
const char *ur_orbax_ckpt_item_dir(const ur_orbax_ckpt *ck);
const char *ur_orbax_ckpt_step_dir(const ur_orbax_ckpt *ck);
int ur_orbax_ckpt_use_ocdbt(const ur_orbax_ckpt *ck);
int ur_orbax_ckpt_use_zarr3(const ur_orbax_ckpt *ck);
int ur_orbax_ckpt_store_fill_value(const ur_orbax_ckpt *ck);
/* 1 when the item has a `_sharding` file; 1 when it has `_METADATA` (always, since an item
 * without one is refused as unfinished). */
int ur_orbax_ckpt_has_sharding_file(const ur_orbax_ckpt *ck);
int ur_orbax_ckpt_has_metadata_file(const ur_orbax_ckpt *ck);
/* `_METADATA.custom_metadata` as compact JSON, or NULL when null/absent. */
const char *ur_orbax_ckpt_custom_metadata(const ur_orbax_ckpt *ck);
/* `_CHECKPOINT_METADATA`, or NULL when the file is absent. */
const ur_orbax_step_meta *ur_orbax_ckpt_step_meta(const ur_orbax_ckpt *ck);

/* `_CHECKPOINT_METADATA` as Orbax writes it; `custom_metadata_json` NULL means {}. */
int ur_orbax_ckpt_meta_emit(ur_buf *out, const ur_orbax_step_meta *m, ur_err *err);

/* `_CHECKPOINT_METADATA` of a step of one item `item_name` saved by Orbax's
 * StandardCheckpointHandler (what unroll writes): started at init_ns, committed now
 * (ur_clock_stamp_ns); custom_metadata_json as above. */
int ur_orbax_ckpt_meta_emit_standard(ur_buf *out, const char *item_name, int64_t init_ns,
                                     const char *custom_metadata_json, ur_err *err);

/* A share's custom_metadata (ur_orbax_writer_set_custom_metadata), beside its _METADATA in
 * shares/<i>/: the finisher records share 0's (checked the same in every share) in
 * _CHECKPOINT_METADATA. */
#define UR_ORBAX_CUSTOM_METADATA_FILE "custom_metadata.json"

size_t ur_orbax_ckpt_leaf_count(const ur_orbax_ckpt *ck);
/* Borrowed; i < leaf_count. */
const ur_orbax_leaf *ur_orbax_ckpt_leaf(const ur_orbax_ckpt *ck, size_t i);
/* The leaf with param name `name`: UR_ENOTFOUND when there is none. */
int ur_orbax_ckpt_find(const ur_orbax_ckpt *ck, const char *name, const ur_orbax_leaf **out,
                       ur_err *err);

/* Open a leaf's zarr array (format from use_zarr3). Scalars are 0-d arrays. The caller closes
 * it with ur_zarr_array_close before closing the checkpoint. A missing chunk reads as the fill
 * value only when _METADATA does not say store_array_data_equal_to_fill_value (else it is
 * UR_ECORRUPT naming array and chunk, as Orbax fails it). UR_EINVAL for a leaf that stores
 * no array. */
int ur_orbax_ckpt_open_array(ur_orbax_ckpt *ck, const ur_orbax_leaf *leaf, ur_zarr_array **out,
                             ur_err *err);

/* ---- Writing ---------------------------------------------------------------------------- */

typedef struct ur_orbax_write_opts {
    int use_ocdbt;          /* default 1 */
    int use_zarr3;          /* default 1 (as MaxText saves) */
    ur_ocdbt_write_opts ocdbt;
    int zstd_level;         /* 0: the zarr layer's default */
    const char *item_name;  /* default "items" */
    /* The mesh written into every `_sharding` entry. The default, shape [-1] with axis
     * "x", restores on any number of devices (numpy infers -1); a spec naming other axes
     * needs a mesh that has them. Axis names are borrowed until commit. */
    int mesh_rank;
    int64_t mesh_shape[UR_MAX_RANK];
    const char *mesh_axis_names[UR_MAX_RANK];
    /* NULL (default): the step directory's parents are created as needed. Else a directory
     * that must exist, and the writer creates directories only below it, so one removed
     * during a run is an error rather than quietly re-created. Used by create only. */
    const char *create_below;
    /* Where the step will be once published (a staged run writes it elsewhere first):
     * commit_success.txt names it, as Orbax's marker names the step's final location, so the
     * same conversion gives the same bytes whatever its staging directory is called. NULL:
     * step_dir. Borrowed; used by create only. */
    const char *published_as;
    /* Share mode (one process of a multi-process run, unroll/job_share.h): >= 0 makes the
     * writer write only the database `<step_dir>/<item>/ocdbt.process_<share_index>/` (a
     * leftover one of the same share is removed; nothing else in step_dir is touched), and
     * its commit writes that database, then _METADATA, _sharding and array_metadatas.json
     * into `share_meta_dir` (borrowed, must exist) instead of finishing the checkpoint.
     * -1 (default): the ordinary single-process checkpoint. */
    int share_index;
    const char *share_meta_dir;
    /* Share mode: 1 continues the share's database a killed run left (ur_ocdbt_resume)
     * instead of starting it afresh. */
    int share_resume;
} ur_orbax_write_opts;

void ur_orbax_write_opts_init(ur_orbax_write_opts *opts);

typedef struct ur_orbax_writer ur_orbax_writer;

/* Start a checkpoint whose final step directory is `step_dir` (e.g. "out/0"); files go to
 * "<step_dir>.orbax-checkpoint-tmp" (a leftover one is removed) until commit. UR_EINVAL
 * when step_dir already exists. */
int ur_orbax_writer_create(ur_orbax_writer **out, const char *step_dir,
                           const ur_orbax_write_opts *opts, ur_err *err);

/* Add a jax.Array leaf. `path` has `depth` components; `spec` (NULL: replicated) has `rank`
 * entries, each NULL or mesh axis names joined by ','. Returns the array, owned by the
 * writer until commit/abort, for the caller to write every chunk into (one thread at a
 * time). write_shape in the metadata = chunk_shape. */
int ur_orbax_writer_add_array(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                              ur_dtype dtype, int rank, const uint64_t *shape,
                              const uint64_t *chunk_shape, const char *const *spec,
                              ur_zarr_array **arr_out, ur_err *err);
/* ur_orbax_writer_add_array in two steps, for writers that encode on many threads:
 * prepare makes the array's handle (thread-safe, writes nothing: it can encode chunks and
 * write them); publish, once its chunks are written, adds the leaf and writes the array's
 * metadata (one thread at a time). The caller closes the handle after publishing. */
int ur_orbax_writer_prepare_array(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                                  ur_dtype dtype, int rank, const uint64_t *shape,
                                  const uint64_t *chunk_shape, ur_zarr_array **arr_out,
                                  ur_err *err);
int ur_orbax_writer_publish_array(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                                  const char *const *spec, ur_zarr_array *arr, ur_err *err);
/* Close an array from ur_orbax_writer_add_array once every chunk of it is written, so that a
 * checkpoint of 100,000 arrays does not hold 100,000 handles until commit (its metadata stays
 * with the writer). Cheap when arrays are finished in the order they were added. */
void ur_orbax_writer_done_array(ur_orbax_writer *w, ur_zarr_array *arr);

/* Make room for `n` more leaves at once (when the caller knows how many it will add), so the
 * leaf table is not grown by doubling: up to 3x its size while it is copied. UR_ENOMEM. */
int ur_orbax_writer_reserve(ur_orbax_writer *w, size_t n, ur_err *err);

/* Add a "scalar" leaf: a 0-d array holding one element at `value` (ur_dtype_size bytes,
 * little-endian). Orbax restores it as a Python scalar. */
int ur_orbax_writer_add_scalar(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                               ur_dtype dtype, const void *value, ur_err *err);

/* Add an empty node: kind EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, NONE or EMPTY_NAMED_TUPLE. */
int ur_orbax_writer_add_empty(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                              ur_orbax_value_type kind, ur_err *err);

/* custom_metadata (a JSON object text, written as given) for _CHECKPOINT_METADATA; `{}` when
 * never set. In share mode the share's metadata keeps it for the finisher. UR_EINVAL when it
 * is not an object, UR_ECORRUPT when not JSON, UR_ENOMEM. */
int ur_orbax_writer_set_custom_metadata(ur_orbax_writer *w, const char *json, ur_err *err);

/* Write _METADATA, _sharding, array_metadatas/process_0, _CHECKPOINT_METADATA and
 * commit_success.txt, sync, and rename the temporary directory into place. The writer is
 * freed whether it succeeds or not; on failure the temporary directory is removed. */
int ur_orbax_writer_commit(ur_orbax_writer *w, ur_err *err);

/* Make what was written so far durable as a version of the output database (OCDBT:
 * ur_ocdbt_writer_snapshot); nothing for other kvstores. */
int ur_orbax_writer_snapshot(ur_orbax_writer *w, ur_err *err);

/* Remove the temporary directory and free. NULL-safe. */
void ur_orbax_writer_abort(ur_orbax_writer *w);

/* The writer as an output sink (unroll/sink.h; orbax_sink.c): arrays are prepared when begun
 * and published when finished, replicated (`_sharding` spec all None); the sink's finish
 * commits the writer and abort aborts it. `w` stays the caller's until one of them. */
void ur_orbax_sink_init(ur_sink *sink, ur_orbax_writer *w);

#endif
