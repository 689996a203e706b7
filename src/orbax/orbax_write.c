/* Writing a checkpoint the way Orbax's CheckpointManager does (one process, item `items`):
 * everything goes into `<step>.orbax-checkpoint-tmp/`, then `_METADATA`, `_sharding`,
 * `array_metadatas/process_0`, `_CHECKPOINT_METADATA` and `commit_success.txt` are written,
 * synced, and the directory is renamed to `<step>` (the commit point). Doc: orbax-layout.md
 * §1.3-1.5, §9.2. */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/fs.h"
#include "unroll/idxset.h"
#include "unroll/side.h"
#include "unroll/strmap.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define TMP_SUFFIX ".orbax-checkpoint-tmp"

/* One leaf as the writer keeps it until the commit, which expands it into an
 * ur_orbax_leaf (names, key paths, sharding): a record of 48 bytes, not 200 plus its
 * strings, since the whole output's leaves are held while the input is still open. */
typedef struct {
    const ur_orbax_key *prefix; /* the depth - 1 keys before the last (interned), or NULL */
    const char *last; /* the last key (interned) */
    const uint64_t *dims; /* arrays: rank shape entries then rank chunk-shape entries */
    const char *const *spec; /* arrays: rank entries (the writer's no_spec when replicated) */
    uint32_t depth;
    uint8_t rank; /* 0..UR_MAX_RANK */
    uint8_t value_type; /* ur_orbax_value_type */
    uint8_t dtype; /* ur_dtype, when has_array */
    uint8_t has_array;
    uint8_t last_type; /* ur_orbax_key_type of the last key */
} wleaf;

struct ur_orbax_writer {
    char *final_dir;
    char *published_as; /* what commit_success.txt names (ur_orbax_write_opts) */
    char *tmp_dir;
    char *item_dir;
    ur_orbax_write_opts opts;
    ur_orbax_arena arena;
    /* Every byte goes through these stores (publication aside: the rename of tmp_dir):
     * step_kv holds tmp_dir, item_kv is its item's keys ("items/..."), and kv is what the
     * arrays go to (an OCDBT writer on item_kv, or item_kv itself for plain zarr). Share
     * mode writes its database with a store of its own (kv) and nothing else. */
    ur_kvstore *step_kv;
    ur_kvstore *item_kv;
    ur_kvstore *kv;
    wleaf *leaves;
    size_t n_leaves;
    size_t cap_leaves;
    /* Key strings and dimension lists, each kept once (in the arena): the 200,000 leaves of
     * a many-leaf output share a few thousand keys and a handful of shapes. */
    ur_strmap interned;        /* strings */
    ur_strmap interned_blocks; /* aligned blocks: key prefixes, dimensions */
    /* The leaves by key path, to refuse one added twice (comparing the interned keys'
     * addresses). */
    ur_idxset by_path;
    ur_buf scratch; /* a leaf's name, built where it is checked (calls are serialized) */
    ur_buf path_buf; /* a leaf's whole key path, as an array of ur_orbax_key */
    ur_zarr_array **arrays; /* NULL where ur_orbax_writer_done_array closed one */
    size_t n_arrays;
    size_t cap_arrays;
    size_t first_open; /* arrays[0..first_open) are all closed */
    const char *no_spec[UR_MAX_RANK]; /* a replicated array's partition spec */
    char *custom_metadata;
    int64_t init_ns;
    char *share_meta_dir; /* share mode (opts.share_index >= 0) */
};

void ur_orbax_write_opts_init(ur_orbax_write_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->use_ocdbt = 1;
    opts->use_zarr3 = 1;
    ur_ocdbt_write_opts_init(&opts->ocdbt);
    opts->item_name = "items";
    opts->mesh_rank = 1;
    opts->mesh_shape[0] = -1;
    opts->mesh_axis_names[0] = "x";
    opts->share_index = -1;
}

/* Plain zarr: a chunk the arrays stored to opts.ocdbt.on_data_file, as the OCDBT writer hands
 * over its data files. The arrays' metadata (zarr.json; zarr2 .zarray, .zattrs) stays for the
 * check of the staged output and the final upload, as does the item's, written at the commit. */
static int hand_over_value(void *ctx, const char *key, ur_err *err)
{
    static const char *const meta[] = {"zarr.json", ".zarray", ".zattrs", ".zgroup"};
    ur_orbax_writer *w = ctx;
    const char *base = strrchr(key, '/');
    base = base != NULL ? base + 1 : key;
    for (size_t i = 0; i < sizeof meta / sizeof meta[0]; i++) {
        if (strcmp(base, meta[i]) == 0) {
            return UR_OK;
        }
    }
    return w->opts.ocdbt.on_data_file(w->opts.ocdbt.on_data_file_ctx, w->item_dir, key, err);
}

/* Share mode: only `<step_dir>/<item>/ocdbt.process_<i>/`, started afresh. */
static int share_create(ur_orbax_writer *w, const char *step_dir, ur_err *err)
{
    char sub[40];
    char *db;
    int rc;

    if (!w->opts.use_ocdbt || w->opts.share_meta_dir == NULL) {
        return ur_err_set(err, UR_EINVAL, "a multi-process share needs OCDBT output");
    }
    w->share_meta_dir = ur_strdup(w->opts.share_meta_dir);
    w->opts.share_meta_dir = NULL; /* borrowed: not kept */
    w->final_dir = ur_strdup(step_dir);
    w->item_dir = ur_path_join(step_dir, w->opts.item_name);
    snprintf(sub, sizeof sub, "ocdbt.process_%d", w->opts.share_index);
    db = w->item_dir != NULL ? ur_path_join(w->item_dir, sub) : NULL;
    if (w->share_meta_dir == NULL || w->final_dir == NULL || db == NULL) {
        ur_free(db);
        return ur_err_oom(err);
    }
    /* What a killed run of this share left is continued, or redone from the start. */
    rc = w->opts.share_resume ? UR_OK : ur_fs_remove_tree(db, err);
    if (rc == UR_OK) {
        rc = ur_fs_mkdirs(db, err);
    }
    w->opts.create_below = NULL;
    w->init_ns = ur_clock_stamp_ns();
    if (rc == UR_OK && w->opts.share_resume) {
        size_t kept = 0;
        rc = ur_ocdbt_resume(&w->kv, db, &w->opts.ocdbt, &kept, err);
    } else if (rc == UR_OK) {
        rc = ur_ocdbt_create(&w->kv, db, &w->opts.ocdbt, err);
    }
    ur_free(db);
    return rc;
}

int ur_orbax_writer_create(ur_orbax_writer **out, const char *step_dir,
                           const ur_orbax_write_opts *opts, ur_err *err)
{
    int rc;
    ur_orbax_writer *w = ur_calloc(1, sizeof(*w));
    if (w == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&w->arena);
    ur_strmap_init(&w->interned);
    ur_strmap_init(&w->interned_blocks);
    ur_buf_init(&w->scratch, 0);
    ur_buf_init(&w->path_buf, 0);
    if (opts != NULL) {
        w->opts = *opts;
    } else {
        ur_orbax_write_opts_init(&w->opts);
    }
    if (w->opts.item_name == NULL || w->opts.item_name[0] == '\0' ||
        strchr(w->opts.item_name, '/') != NULL || strlen(w->opts.item_name) > 255) {
        rc = ur_err_set(err, UR_EINVAL, "bad item name");
        goto fail;
    }
    if (w->opts.mesh_rank < 1 || w->opts.mesh_rank > UR_MAX_RANK) {
        rc = ur_err_set(err, UR_EINVAL, "mesh rank %d out of range", w->opts.mesh_rank);
        goto fail;
    }
    /* Keep private copies of the borrowed strings. */
    w->opts.item_name = ur_orbax__arena_strdup(&w->arena, w->opts.item_name);
    for (int i = 0; i < w->opts.mesh_rank; i++) {
        const char *nm = w->opts.mesh_axis_names[i];
        if (nm == NULL || nm[0] == '\0' || strchr(nm, ',') != NULL) {
            rc = ur_err_set(err, UR_EINVAL, "mesh axis %d needs a name without ','", i);
            goto fail;
        }
        w->opts.mesh_axis_names[i] = ur_orbax__arena_strdup(&w->arena, nm);
        if (w->opts.mesh_axis_names[i] == NULL) {
            rc = ur_err_oom(err);
            goto fail;
        }
    }
    if (w->opts.share_index >= 0) {
        rc = share_create(w, step_dir, err);
        if (rc < 0) {
            goto fail;
        }
        *out = w;
        return UR_OK;
    }
    if (strstr(step_dir, TMP_SUFFIX) != NULL) {
        rc = ur_err_set(err, UR_EINVAL, "%s: a step name may not contain '" TMP_SUFFIX "'",
                        step_dir);
        goto fail;
    }
    if (ur_fs_exists(step_dir)) {
        rc = ur_err_set(err, UR_EINVAL, "%s already exists", step_dir);
        goto fail;
    }
    {
        size_t n = ur_path_trimmed_len(step_dir);
        w->final_dir = ur_strndup(step_dir, n);
        w->published_as = ur_strdup(w->opts.published_as != NULL ? w->opts.published_as
                                                                 : w->final_dir);
        w->tmp_dir = ur_malloc(n + sizeof(TMP_SUFFIX));
        if (w->tmp_dir != NULL) {
            memcpy(w->tmp_dir, step_dir, n);
            memcpy(w->tmp_dir + n, TMP_SUFFIX, sizeof(TMP_SUFFIX));
        }
    }
    w->opts.published_as = NULL; /* borrowed: not kept */
    if (w->final_dir == NULL || w->published_as == NULL || w->tmp_dir == NULL ||
        w->opts.item_name == NULL) {
        rc = ur_err_oom(err);
        goto fail;
    }
    w->item_dir = ur_path_join(w->tmp_dir, w->opts.item_name);
    if (w->item_dir == NULL) {
        rc = ur_err_oom(err);
        goto fail;
    }
    /* Orbax deletes a leftover temporary directory of the same step. */
    rc = ur_fs_remove_tree(w->tmp_dir, err);
    if (rc == UR_OK) {
        rc = w->opts.create_below != NULL
                 ? ur_fs_mkdirs_under(w->opts.create_below, w->item_dir, err)
                 : ur_fs_mkdirs(w->item_dir, err);
    }
    w->opts.create_below = NULL; /* borrowed: not kept */
    if (rc < 0) {
        goto fail;
    }
    w->init_ns = ur_clock_stamp_ns();
    rc = ur_kvstore_file_open(&w->step_kv, w->tmp_dir, 1, err);
    if (rc == UR_OK) {
        char prefix[258]; /* the item's name (at most 255 bytes) and '/' */
        snprintf(prefix, sizeof prefix, "%s/", w->opts.item_name);
        rc = ur_kvstore_prefix_open(&w->item_kv, w->step_kv, prefix, 0, err);
    }
    if (rc == UR_OK && w->opts.use_ocdbt) {
        rc = ur_ocdbt_create_kv(&w->kv, w->item_kv, 0, w->item_dir, &w->opts.ocdbt, err);
    } else if (rc == UR_OK) {
        w->kv = w->item_kv;
        if (w->opts.ocdbt.on_data_file != NULL) { /* each chunk handed over as it is stored */
            ur_kvstore_prefix_on_write(w->item_kv, hand_over_value, w);
        }
    }
    if (rc < 0) {
        goto fail;
    }
    *out = w;
    return UR_OK;
fail:
    ur_orbax_writer_abort(w);
    return rc;
}

/* `n` bytes at `p` kept once in the arena: the copy already there, or a new one. */
static const void *intern(ur_orbax_writer *w, const void *p, size_t n, int nul, ur_err *err)
{
    ur_strmap *map = nul ? &w->interned : &w->interned_blocks;
    size_t found;
    void *copy;
    int rc;

    if (ur_strmap_get(map, p, n, &found)) {
        return (const void *)(uintptr_t)found;
    }
    copy = nul ? (void *)ur_orbax__arena_strndup(&w->arena, p, n)
               : ur_orbax__arena_alloc(&w->arena, n ? n : 1);
    if (copy == NULL) {
        ur_err_oom(err);
        return NULL;
    }
    if (!nul) {
        memcpy(copy, p, n);
    }
    rc = ur_strmap_put(map, copy, n, (size_t)(uintptr_t)copy, NULL, err);
    return rc == UR_OK ? copy : NULL;
}

/* Keys and prefixes interned, so equal paths hold equal addresses. */
static uint64_t path_hash(const ur_orbax_key *prefix, const char *last, int type, size_t depth)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = (h ^ (uint64_t)(uintptr_t)prefix) * 0x100000001b3ull;
    h = (h ^ (uint64_t)(uintptr_t)last) * 0x100000001b3ull;
    h = (h ^ ((uint64_t)depth << 1 | (uint64_t)type)) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* A key path as by_path looks it up. */
typedef struct {
    const ur_orbax_key *prefix;
    const char *last;
    int type;
    size_t depth;
} path_key;

static int path_match(const void *ctx, size_t i, const void *key)
{
    const wleaf *l = &((const ur_orbax_writer *)ctx)->leaves[i];
    const path_key *q = key;
    return l->depth == q->depth && l->prefix == q->prefix && l->last == q->last &&
           l->last_type == q->type;
}

static uint64_t leaf_path_hash(const void *ctx, size_t i)
{
    const wleaf *l = &((const ur_orbax_writer *)ctx)->leaves[i];
    return path_hash(l->prefix, l->last, l->last_type, l->depth);
}

static ur_idxset_keys leaf_paths(const ur_orbax_writer *w)
{
    ur_idxset_keys k = {path_match, leaf_path_hash, w};
    return k;
}

/* The leaf being added (w->leaves[w->n_leaves]) is complete: count it, findable by path. */
static int count_leaf(ur_orbax_writer *w, ur_err *err)
{
    const wleaf *l = &w->leaves[w->n_leaves];
    if (w->n_leaves >= UR_IDXSET_MAX) { /* by_path's limit */
        return ur_err_set(err, UR_EINVAL, "more than %zu leaves", UR_IDXSET_MAX);
    }
    ur_idxset_keys keys = leaf_paths(w);
    path_key q = {l->prefix, l->last, l->last_type, l->depth};
    int rc = ur_idxset_add(&w->by_path, &keys, path_hash(q.prefix, q.last, q.type, q.depth),
                           w->n_leaves, &q, NULL, err);
    if (rc != UR_OK) {
        return rc < 0 ? rc : ur_err_set(err, UR_EINTERNAL, "a leaf added twice");
    }
    w->n_leaves++;
    return UR_OK;
}

/* The whole key path of l, in `buf` (valid until its next use). */
static const ur_orbax_key *full_path(ur_buf *buf, const wleaf *l, ur_err *err)
{
    size_t n = (size_t)l->depth * sizeof(ur_orbax_key);
    ur_orbax_key *p;
    ur_buf_reset(buf);
    if (ur_buf_reserve(buf, n, err) < 0) {
        return NULL;
    }
    p = (ur_orbax_key *)(void *)buf->data;
    memset(p, 0, n);
    if (l->depth > 1) {
        memcpy(p, l->prefix, (l->depth - 1) * sizeof *p);
    }
    p[l->depth - 1].key = l->last;
    p[l->depth - 1].type = (ur_orbax_key_type)l->last_type;
    return p;
}

/* Validate the path, and add a leaf holding it; returns the new leaf. Its keys, and the
 * keys before its last as one block, are kept once: the leaves of one parent share them. */
static int add_leaf(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth, wleaf **leaf_out,
                    ur_err *err)
{
    const ur_orbax_key *prefix = NULL;
    const char *last;
    ur_orbax_key *copy;
    int rc;

    if (depth == 0 || path == NULL || depth > UINT32_MAX / sizeof(*copy)) {
        return ur_err_set(err, UR_EINVAL, "a leaf needs a key path");
    }
    ur_buf_reset(&w->path_buf);
    rc = ur_buf_reserve(&w->path_buf, depth * sizeof(*copy), err);
    if (rc < 0) {
        return rc;
    }
    copy = (ur_orbax_key *)(void *)w->path_buf.data;
    memset(copy, 0, depth * sizeof(*copy)); /* padding too: prefixes are compared as bytes */
    for (size_t i = 0; i < depth; i++) {
        if (path[i].key == NULL ||
            (path[i].type != UR_ORBAX_KEY_DICT && path[i].type != UR_ORBAX_KEY_SEQUENCE)) {
            return ur_err_set(err, UR_EINVAL, "key %zu of a leaf path is invalid", i);
        }
        copy[i].type = path[i].type;
        copy[i].key = intern(w, path[i].key, strlen(path[i].key), 1, err);
        if (copy[i].key == NULL) {
            return err->code;
        }
    }
    last = copy[depth - 1].key;
    if (depth > 1) {
        prefix = intern(w, copy, (depth - 1) * sizeof(*copy), 0, err);
        if (prefix == NULL) {
            return err->code;
        }
    }
    ur_idxset_keys keys = leaf_paths(w);
    path_key q = {prefix, last, (int)copy[depth - 1].type, depth};
    if (ur_idxset_find(&w->by_path, &keys, path_hash(prefix, last, q.type, depth), &q) !=
        SIZE_MAX) {
        ur_buf_reset(&w->scratch);
        rc = ur_orbax_tree_keypath(&w->scratch, copy, depth, err);
        return rc < 0 ? rc
                      : ur_err_set(err, UR_EINVAL, "leaf %.*s added twice", (int)w->scratch.len,
                                   (const char *)w->scratch.data);
    }
    wleaf *nl = ur_grow(w->leaves, &w->cap_leaves, w->n_leaves, sizeof(*nl), 16);
    if (nl == NULL) {
        return ur_err_oom(err);
    }
    w->leaves = nl;
    wleaf *l = &w->leaves[w->n_leaves];
    memset(l, 0, sizeof(*l));
    l->prefix = prefix;
    l->last = last;
    l->last_type = (uint8_t)copy[depth - 1].type;
    l->depth = (uint32_t)depth;
    *leaf_out = l;
    return UR_OK;
}

/* The leaf's name (keys joined by '.'), in the writer's scratch buffer. */
static const char *leaf_name(ur_orbax_writer *w, const wleaf *l, ur_err *err)
{
    const ur_orbax_key *p = full_path(&w->path_buf, l, err);
    int rc = p != NULL ? UR_OK : err->code;
    ur_buf_reset(&w->scratch);
    if (rc == UR_OK) {
        rc = ur_orbax_tree_name(&w->scratch, p, l->depth, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&w->scratch, 0, err);
    }
    return rc == UR_OK ? (const char *)w->scratch.data : NULL;
}

static int keep_array(ur_orbax_writer *w, ur_zarr_array *arr, ur_err *err)
{
    ur_zarr_array **na = ur_grow(w->arrays, &w->cap_arrays, w->n_arrays, sizeof(*na), 16);
    if (na == NULL) {
        return ur_err_oom(err);
    }
    w->arrays = na;
    w->arrays[w->n_arrays++] = arr;
    return UR_OK;
}

int ur_orbax_writer_reserve(ur_orbax_writer *w, size_t n, ur_err *err)
{
    wleaf *nl;
    if (n > SIZE_MAX - w->n_leaves) {
        return ur_err_oom(err);
    }
    if (w->n_leaves + n <= w->cap_leaves) {
        return UR_OK;
    }
    nl = ur_grow_to(w->leaves, &w->cap_leaves, w->n_leaves + n, sizeof(*nl));
    if (nl == NULL) {
        return ur_err_oom(err); /* also when the size overflows */
    }
    w->leaves = nl;
    /* every array leaf writes its metadata and, most often with many leaves (small arrays),
     * one chunk: two keys a leaf, held by the OCDBT writer until the commit */
    if (w->opts.use_ocdbt && n <= SIZE_MAX / 2) {
        return ur_ocdbt_writer_reserve(w->kv, 2 * n, err);
    }
    return UR_OK;
}

void ur_orbax_writer_done_array(ur_orbax_writer *w, ur_zarr_array *arr)
{
    for (size_t i = w->first_open; arr != NULL && i < w->n_arrays; i++) {
        if (w->arrays[i] == arr) {
            ur_zarr_array_close(arr);
            w->arrays[i] = NULL;
            break;
        }
    }
    while (w->first_open < w->n_arrays && w->arrays[w->first_open] == NULL) {
        w->first_open++;
    }
}

static int mesh_has_axis(const ur_orbax_writer *w, const char *name, size_t n)
{
    for (int i = 0; i < w->opts.mesh_rank; i++) {
        if (strlen(w->opts.mesh_axis_names[i]) == n &&
            memcmp(w->opts.mesh_axis_names[i], name, n) == 0) {
            return 1;
        }
    }
    return 0;
}

static int array_spec(const ur_orbax_writer *w, ur_dtype dtype, int rank, const uint64_t *shape,
                      const uint64_t *chunk_shape, ur_zarr_spec *zs, ur_err *err)
{
    if (rank < 0 || rank > UR_MAX_RANK || ur_dtype_size(dtype) == 0) {
        return ur_err_set(err, UR_EINVAL, "bad rank %d or dtype", rank);
    }
    memset(zs, 0, sizeof(*zs));
    zs->zarr_format = w->opts.use_zarr3 ? 3 : 2;
    zs->dtype = dtype;
    zs->rank = rank;
    zs->zstd_level = w->opts.zstd_level;
    for (int i = 0; i < rank; i++) {
        if (chunk_shape[i] == 0 || shape[i] > UR_ORBAX_MAX_DIM) {
            return ur_err_set(err, UR_EINVAL, "bad shape or chunk shape on axis %d", i);
        }
        zs->shape[i] = shape[i];
        zs->chunk_shape[i] = chunk_shape[i];
    }
    return UR_OK;
}

int ur_orbax_writer_prepare_array(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                                  ur_dtype dtype, int rank, const uint64_t *shape,
                                  const uint64_t *chunk_shape, ur_zarr_array **arr_out,
                                  ur_err *err)
{
    ur_zarr_spec zs;
    ur_buf name;
    int rc = array_spec(w, dtype, rank, shape, chunk_shape, &zs, err);
    if (rc < 0) {
        return rc;
    }
    zs.defer_meta = 1;
    ur_buf_init(&name, 0);
    rc = ur_orbax_tree_name(&name, path, depth, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(&name, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_zarr_array_create(arr_out, w->kv, (const char *)name.data, &zs, err);
        if (rc < 0) {
            ur_err_wrap(err, "array '%s'", (const char *)name.data);
        }
    }
    ur_buf_dispose(&name);
    return rc;
}

int ur_orbax_writer_publish_array(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                                  const char *const *spec, ur_zarr_array *arr, ur_err *err)
{
    const ur_zarr_info *info = ur_zarr_array_info(arr);
    int rank = info->rank;
    uint64_t dims[2 * UR_MAX_RANK];
    wleaf *l = NULL;
    const char *name;
    int rc = add_leaf(w, path, depth, &l, err);
    if (rc < 0) {
        return rc;
    }
    name = leaf_name(w, l, err);
    if (name == NULL) {
        return err->code;
    }
    if (strcmp(name, ur_zarr_array_prefix(arr)) != 0) {
        return ur_err_set(err, UR_EINVAL, "array '%s' published as '%s'",
                          ur_zarr_array_prefix(arr), name);
    }
    const char **sp = NULL;
    if (spec != NULL && rank > 0) {
        sp = ur_orbax__arena_alloc(&w->arena, (size_t)rank * sizeof(*sp));
        if (sp == NULL) {
            return ur_err_oom(err);
        }
    } else if (rank > 0) {
        sp = w->no_spec; /* replicated: all None */
    }
    l->spec = sp;
    for (int i = 0; spec != NULL && i < rank; i++) {
        if (spec[i] == NULL || spec[i][0] == '\0') {
            continue;
        }
        const char *p = spec[i];
        for (;;) {
            const char *comma = strchr(p, ',');
            size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
            if (!mesh_has_axis(w, p, n)) {
                return ur_err_set(err, UR_EINVAL,
                                  "array '%s': partition spec axis '%.*s' is not a mesh axis",
                                  name, (int)n, p);
            }
            if (comma == NULL) {
                break;
            }
            p = comma + 1;
        }
        sp[i] = intern(w, spec[i], strlen(spec[i]), 1, err);
        if (sp[i] == NULL) {
            return err->code;
        }
    }
    rc = ur_zarr_array_write_meta(arr, err);
    if (rc < 0) {
        return ur_err_wrap(err, "array '%s'", ur_zarr_array_prefix(arr));
    }
    if (rank > 0) {
        memcpy(dims, info->shape, (size_t)rank * sizeof dims[0]);
        memcpy(dims + rank, info->chunk_shape, (size_t)rank * sizeof dims[0]);
        l->dims = intern(w, dims, 2 * (size_t)rank * sizeof dims[0], 0, err);
        if (l->dims == NULL) {
            return err->code;
        }
    }
    l->value_type = UR_ORBAX_VALUE_JAX_ARRAY;
    l->has_array = 1;
    l->dtype = (uint8_t)info->dtype;
    l->rank = (uint8_t)rank;
    return count_leaf(w, err);
}

int ur_orbax_writer_add_array(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                              ur_dtype dtype, int rank, const uint64_t *shape,
                              const uint64_t *chunk_shape, const char *const *spec,
                              ur_zarr_array **arr_out, ur_err *err)
{
    ur_zarr_array *arr = NULL;
    int rc = ur_orbax_writer_prepare_array(w, path, depth, dtype, rank, shape, chunk_shape, &arr,
                                           err);
    if (rc == UR_OK) {
        rc = ur_orbax_writer_publish_array(w, path, depth, spec, arr, err);
    }
    if (rc == UR_OK) {
        rc = keep_array(w, arr, err);
    }
    if (rc < 0) {
        ur_zarr_array_close(arr);
        return rc;
    }
    *arr_out = arr;
    return UR_OK;
}

int ur_orbax_writer_add_scalar(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                               ur_dtype dtype, const void *value, ur_err *err)
{
    if (ur_dtype_size(dtype) == 0) {
        return ur_err_set(err, UR_EINVAL, "bad dtype");
    }
    wleaf *l = NULL;
    const char *name;
    int rc = add_leaf(w, path, depth, &l, err);
    if (rc < 0) {
        return rc;
    }
    name = leaf_name(w, l, err);
    if (name == NULL) {
        return err->code;
    }
    ur_zarr_spec zs;
    memset(&zs, 0, sizeof(zs));
    zs.zarr_format = w->opts.use_zarr3 ? 3 : 2;
    zs.dtype = dtype;
    zs.rank = 0;
    zs.zstd_level = w->opts.zstd_level;
    ur_zarr_array *arr = NULL;
    uint64_t idx[1] = {0};
    rc = ur_zarr_array_create(&arr, w->kv, name, &zs, err);
    if (rc == UR_OK) {
        rc = ur_zarr_array_write_chunk(arr, idx, value, err);
    }
    if (rc < 0) {
        ur_err_wrap(err, "scalar '%s'", arr != NULL ? ur_zarr_array_prefix(arr) : "?");
    }
    ur_zarr_array_close(arr);
    if (rc < 0) {
        return rc;
    }
    l->value_type = UR_ORBAX_VALUE_SCALAR;
    l->has_array = 1;
    l->dtype = (uint8_t)dtype;
    return count_leaf(w, err);
}

int ur_orbax_writer_add_empty(ur_orbax_writer *w, const ur_orbax_key *path, size_t depth,
                              ur_orbax_value_type kind, ur_err *err)
{
    if (kind != UR_ORBAX_VALUE_EMPTY_DICT && kind != UR_ORBAX_VALUE_EMPTY_LIST &&
        kind != UR_ORBAX_VALUE_EMPTY_TUPLE && kind != UR_ORBAX_VALUE_NONE &&
        kind != UR_ORBAX_VALUE_EMPTY_NAMED_TUPLE) {
        return ur_err_set(err, UR_EINVAL, "not an empty-node kind: %s",
                          ur_orbax_value_type_name(kind));
    }
    wleaf *l = NULL;
    int rc = add_leaf(w, path, depth, &l, err);
    if (rc < 0) {
        return rc;
    }
    l->value_type = (uint8_t)kind;
    return count_leaf(w, err);
}

int ur_orbax_writer_set_custom_metadata(ur_orbax_writer *w, const char *json, ur_err *err)
{
    cJSON *root = NULL;
    int rc = ur_orbax__json_parse(&root, json, strlen(json), "custom_metadata", err);
    if (rc < 0) {
        return rc;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ur_err_set(err, UR_EINVAL, "custom_metadata must be a JSON object");
    }
    cJSON_Delete(root);
    /* the text as given, not cJSON's reprint of it (which turns 16.0 into 16) */
    size_t len = strlen(json);
    char *text = ur_orbax__arena_alloc(&w->arena, len + 1);
    if (text == NULL) {
        return ur_err_oom(err);
    }
    memcpy(text, json, len + 1);
    w->custom_metadata = text;
    return UR_OK;
}

static int write_json_file(ur_kvstore *kv, const char *key, const ur_buf *b, ur_err *err)
{
    return ur_kvstore_write(kv, key, b->data, b->len, err);
}

/* The full record of a kept leaf, its name and key path in `a` (scratch: buffers of the
 * calling thread). */
static int expand_leaf(const ur_orbax_writer *w, const wleaf *k, ur_orbax_leaf *l,
                       ur_orbax_arena *a, ur_buf *b, ur_buf *path_buf, ur_err *err)
{
    int rc;

    const ur_orbax_key *p = full_path(path_buf, k, err);
    ur_orbax_key *path = p != NULL ? ur_orbax__arena_alloc(a, k->depth * sizeof(*path)) : NULL;
    memset(l, 0, sizeof(*l));
    if (path == NULL) {
        return p == NULL ? err->code : ur_err_oom(err);
    }
    memcpy(path, p, k->depth * sizeof(*path));
    l->path = path;
    l->depth = k->depth;
    l->value_type = (ur_orbax_value_type)k->value_type;
    l->value_type_name = ur_orbax_value_type_name(l->value_type);
    l->skip_deserialize = !k->has_array;
    l->write_shape_rank = -1;
    l->array_meta_chunk_rank = -1;
    l->has_array = k->has_array;
    l->dtype = (ur_dtype)k->dtype;
    if (l->value_type == UR_ORBAX_VALUE_JAX_ARRAY) {
        ur_orbax_sharding *s = &l->sharding;
        l->rank = k->rank;
        l->shape = k->rank > 0 ? k->dims : NULL;
        l->chunk_shape = k->rank > 0 ? k->dims + k->rank : NULL;
        l->write_shape = l->chunk_shape;
        l->write_shape_rank = k->rank;
        s->kind = UR_ORBAX_SHARDING_NAMED;
        s->mesh_rank = w->opts.mesh_rank;
        s->mesh_shape = w->opts.mesh_shape; /* every array's mesh: one copy */
        s->mesh_axis_names = w->opts.mesh_axis_names;
        s->spec_rank = k->rank;
        s->spec = k->spec;
    }
    ur_buf_reset(b);
    rc = ur_orbax_tree_name(b, l->path, k->depth, err);
    l->name = rc == UR_OK ? ur_orbax__arena_strndup(a, (const char *)b->data, b->len) : NULL;
    if (rc == UR_OK && l->name == NULL) {
        rc = ur_err_oom(err);
    }
    return rc;
}

/* The output's leaves expanded to full records in tree order, for the metadata files. */
typedef struct {
    ur_orbax_leaf *ordered;
    size_t n;
    ur_orbax_arena names_arena;
} item_meta;

static void item_meta_dispose(item_meta *im)
{
    ur_free(im->ordered);
    ur_orbax__arena_dispose(&im->names_arena);
}

/* Leaves [lo, hi) expanded by one thread, into its own arena. */
typedef struct {
    const ur_orbax_writer *w;
    item_meta *im;
    size_t lo, hi;
    ur_orbax_arena arena;
} expand_part;

static int expand_range(void *ctx, ur_err *err)
{
    expand_part *p = ctx;
    ur_buf name, path;
    int rc = UR_OK;
    ur_buf_init(&name, 0);
    ur_buf_init(&path, 0);
    for (size_t i = p->lo; i < p->hi && rc == UR_OK; i++) {
        rc = expand_leaf(p->w, &p->w->leaves[i], &p->im->ordered[i], &p->arena, &name, &path, err);
    }
    ur_buf_dispose(&name);
    ur_buf_dispose(&path);
    return rc;
}

/* Output leaves expanded on two threads when there are many (each half into its arena). */
#define EXPAND_SPLIT_MIN 2048

static int item_meta_prepare(ur_orbax_writer *w, item_meta *im, ur_err *err)
{
    size_t n = w->n_leaves, kept = n, mid = n >= EXPAND_SPLIT_MIN ? n / 2 : n;
    expand_part part[2];
    ur_side side;
    int rc = UR_OK, side_rc;

    memset(im, 0, sizeof *im);
    ur_orbax__arena_init(&im->names_arena);
    im->n = n;
    im->ordered = ur_malloc((n ? n : 1) * sizeof(*im->ordered));
    if (im->ordered == NULL) {
        return ur_err_oom(err);
    }
    for (int k = 0; k < 2; k++) {
        part[k].w = w;
        part[k].im = im;
        part[k].lo = k == 0 ? 0 : mid;
        part[k].hi = k == 0 ? mid : n;
        ur_orbax__arena_init(&part[k].arena);
    }
    if (mid < n) {
        ur_side_start(&side, expand_range, &part[1]);
    }
    rc = expand_range(&part[0], err);
    side_rc = mid < n ? ur_side_join(&side) : UR_OK;
    if (rc == UR_OK && side_rc < 0) {
        *err = side.err;
        rc = side_rc;
    }
    for (int k = 0; k < 2; k++) {
        ur_orbax__arena_adopt(&im->names_arena, &part[k].arena);
    }
    /* _METADATA lists the leaves in tree order; the order check also catches gaps in list
     * indices and mixed list/dict parents, which Orbax could not restore. */
    if (rc == UR_OK) {
        rc = ur_orbax_tree_order(im->ordered, &kept, "checkpoint tree", err);
    }
    if (rc == UR_OK && kept != n) {
        rc = ur_err_set(err, UR_EINVAL, "a leaf's path is a prefix of another leaf's path");
    }
    return rc;
}

static int writer_sink(void *ctx, const void *data, size_t n, ur_err *err)
{
    return ur_kvstore_writer_append(ctx, data, n, err);
}

/* The writer of a metadata file `key` finished when rc is UR_OK, else abandoned (nothing
 * appears under the key); returns rc or the finish's error. */
static int end_stream(ur_kvstore_writer *out, int rc, ur_err *err)
{
    if (rc == UR_OK) {
        return ur_kvstore_writer_finish(out, err);
    }
    ur_kvstore_writer_abort(out);
    return rc;
}

/* _METADATA into kv, streamed piece by piece through one writer (ur_orbax_meta_emit_to). */
static int write_tree_metadata(const ur_orbax_writer *w, const item_meta *im, ur_kvstore *kv,
                               ur_err *err)
{
    ur_orbax_meta m;
    ur_kvstore_writer *out = NULL;

    memset(&m, 0, sizeof(m));
    m.leaves = im->ordered;
    m.n_leaves = im->n;
    m.use_ocdbt = w->opts.use_ocdbt ? 1 : 0;
    m.use_zarr3 = w->opts.use_zarr3 ? 1 : 0;
    m.store_fill = 1;
    int rc = ur_kvstore_writer_open(&out, kv, "_METADATA", UR_KVSTORE_WRITER_ATOMIC, err);
    return rc == UR_OK ? end_stream(out, ur_orbax_meta_emit_to(&m, writer_sink, out, err), err)
                       : rc;
}

/* array_metadatas, written beside _sharding (write_array_metadata). The metadata stores are
 * file stores (the staging tree), whose writers of two keys are independent. */
typedef struct {
    const item_meta *im;
    ur_kvstore *kv;
    const char *key;
} am_job;

static int write_am_job(void *ctx, ur_err *err)
{
    am_job *j = ctx;
    ur_kvstore_writer *out = NULL;
    int rc = ur_kvstore_writer_open(&out, j->kv, j->key, UR_KVSTORE_WRITER_ATOMIC, err);
    return rc == UR_OK ? end_stream(out,
                                    ur_orbax_array_meta_emit_leaves_to(j->im->ordered, j->im->n,
                                                                       writer_sink, out, err),
                                    err)
                       : rc;
}

/* _sharding and array_metadatas into kv (when the output has arrays), emitted from the
 * ordered leaves themselves. */
static int write_array_metadata(const ur_orbax_writer *w, const item_meta *im, ur_kvstore *kv,
                                ur_err *err)
{
    ur_kvstore_writer *out = NULL;
    size_t na = 0;
    int rc;

    for (size_t i = 0; i < im->n && na == 0; i++) {
        na += im->ordered[i].value_type == UR_ORBAX_VALUE_JAX_ARRAY;
    }
    if (na == 0) {
        return UR_OK;
    }
    /* array_metadatas on a second thread while this one writes _sharding (both streamed piece
     * by piece); in share mode the finisher moves array_metadatas.json to
     * array_metadatas/process_0 */
    am_job job = {
        im, kv, w->share_meta_dir != NULL ? "array_metadatas.json" : "array_metadatas/process_0"};
    ur_side side;
    ur_side_start(&side, write_am_job, &job);
    rc = ur_kvstore_writer_open(&out, kv, "_sharding", UR_KVSTORE_WRITER_ATOMIC, err);
    if (rc == UR_OK) {
        rc = end_stream(
            out, ur_orbax_sharding_emit_leaves_to(im->ordered, im->n, writer_sink, out, err), err);
    }
    int side_rc = ur_side_join(&side);
    if (rc == UR_OK && side_rc < 0) {
        *err = side.err;
        rc = side_rc;
    }
    return rc;
}

/* The metadata files of the prepared leaves into kv (the item's keys; in share mode the
 * share's metadata directory), one after the other, each streamed in pieces of about a MiB
 * (_METADATA's emitted two at a time on two threads): with 200,000 output leaves their whole
 * texts (140 MB) were the run's peak of memory. Made durable by the caller's commit of the
 * store. */
static int write_item_metadata(const ur_orbax_writer *w, const item_meta *im, ur_kvstore *kv,
                               ur_err *err)
{
    int rc = write_tree_metadata(w, im, kv, err);
    return rc == UR_OK ? write_array_metadata(w, im, kv, err) : rc;
}

/* The array store committed (OCDBT: the B+tree and the manifest) and, when it is not the
 * item's own view (plain zarr), closed. */
static int commit_store(void *ctx, ur_err *err)
{
    ur_orbax_writer *w = ctx;
    int rc = ur_kvstore_commit(w->kv, err);
    if (w->kv != w->item_kv) {
        ur_kvstore_close(w->kv);
    }
    w->kv = NULL;
    return rc;
}

static int write_commit_marker(ur_kvstore *kv, const char *published_as, ur_err *err)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    int rc = ur_buf_printf(&b, err, "Checkpoint commit was successful to %s", published_as);
    if (rc == UR_OK) {
        rc = write_json_file(kv, "commit_success.txt", &b, err);
    }
    ur_buf_dispose(&b);
    return rc;
}

/* A share ends here: its database first, then its metadata, which the finisher takes as the
 * sign of a complete share (unroll/job_share.h). */
static int commit_share(ur_orbax_writer *w, ur_err *err)
{
    item_meta im;
    ur_kvstore *meta = NULL;
    int rc = commit_store(w, err);

    memset(&im, 0, sizeof im);
    if (rc == UR_OK) {
        rc = item_meta_prepare(w, &im, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_file_open(&meta, w->share_meta_dir, 1, err);
    }
    if (rc == UR_OK) {
        rc = write_item_metadata(w, &im, meta, err);
    }
    if (rc == UR_OK && w->custom_metadata != NULL) { /* the finisher's _CHECKPOINT_METADATA */
        rc = ur_kvstore_write(meta, UR_ORBAX_CUSTOM_METADATA_FILE, w->custom_metadata,
                              strlen(w->custom_metadata), err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_commit(meta, err);
    }
    ur_kvstore_close(meta);
    item_meta_dispose(&im);
    return rc;
}

/* The item: its array store committed on a second thread while this one orders the leaves
 * (both serial work, seconds with 100,000 leaves, all of it in the temporary directory),
 * then its metadata and marker. */
static int commit_item(ur_orbax_writer *w, ur_err *err)
{
    item_meta im;
    ur_side side;
    int rc, side_rc;

    ur_side_start(&side, commit_store, w);
    rc = item_meta_prepare(w, &im, err);
    side_rc = ur_side_join(&side);
    if (side_rc < 0) {
        *err = side.err;
        rc = side_rc;
    }
    if (rc == UR_OK) {
        rc = write_item_metadata(w, &im, w->item_kv, err);
    }
    item_meta_dispose(&im);
    return rc == UR_OK ? write_commit_marker(w->item_kv, w->published_as, err) : rc;
}

int ur_orbax_writer_commit(ur_orbax_writer *w, ur_err *err)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    int rc = UR_OK;
    for (size_t i = 0; i < w->n_arrays; i++) {
        ur_zarr_array_close(w->arrays[i]);
    }
    w->n_arrays = 0;
    if (w->n_leaves == 0) {
        rc = ur_err_set(err, UR_EINVAL, "a checkpoint needs at least one leaf");
        goto out;
    }
    if (w->kv == w->item_kv) { /* the metadata stays for the final upload, after the data */
        ur_kvstore_prefix_on_write(w->item_kv, NULL, NULL);
    }
    if (w->share_meta_dir != NULL) {
        rc = commit_share(w, err);
        goto out;
    }
    rc = commit_item(w, err);
    if (rc < 0) {
        goto out;
    }

    rc = ur_orbax_ckpt_meta_emit_standard(&b, w->opts.item_name, w->init_ns, w->custom_metadata,
                                          err);
    if (rc == UR_OK) {
        rc = write_json_file(w->step_kv, "_CHECKPOINT_METADATA", &b, err);
    }
    if (rc == UR_OK) {
        rc = write_commit_marker(w->step_kv, w->published_as, err);
    }
    if (rc == UR_OK) { /* every file and directory of the step, before it is published */
        rc = ur_kvstore_commit(w->step_kv, err);
    }
    if (rc < 0) {
        goto out;
    }
    /* Publication stays a file-system step of the local output: the rename of the staging
     * directory (docs/ARCHITECTURE.md). */
    ur_kvstore_close(w->item_kv);
    ur_kvstore_close(w->step_kv);
    w->item_kv = w->step_kv = NULL;
    rc = ur_fs_rename_into_place(w->tmp_dir, w->final_dir, err);
out:
    ur_buf_dispose(&b);
    if (rc < 0) {
        ur_orbax_writer_abort(w);
    } else {
        ur_free(w->tmp_dir);
        w->tmp_dir = NULL; /* renamed: nothing left to remove */
        ur_orbax_writer_abort(w);
    }
    return rc;
}

int ur_orbax_writer_snapshot(ur_orbax_writer *w, ur_err *err)
{
    return w->opts.use_ocdbt ? ur_ocdbt_writer_snapshot(w->kv, err) : UR_OK;
}

void ur_orbax_writer_abort(ur_orbax_writer *w)
{
    if (w == NULL) {
        return;
    }
    for (size_t i = 0; i < w->n_arrays; i++) {
        ur_zarr_array_close(w->arrays[i]);
    }
    if (w->kv != w->item_kv) {
        ur_kvstore_close(w->kv);
    }
    ur_kvstore_close(w->item_kv);
    ur_kvstore_close(w->step_kv);
    if (w->tmp_dir != NULL) {
        ur_err ignored;
        ur_fs_remove_tree(w->tmp_dir, &ignored);
    }
    ur_free(w->arrays);
    ur_free(w->leaves);
    ur_strmap_dispose(&w->interned);
    ur_strmap_dispose(&w->interned_blocks);
    ur_idxset_dispose(&w->by_path);
    ur_buf_dispose(&w->scratch);
    ur_buf_dispose(&w->path_buf);
    ur_free(w->final_dir);
    ur_free(w->published_as);
    ur_free(w->tmp_dir);
    ur_free(w->item_dir);
    ur_free(w->share_meta_dir);
    ur_orbax__arena_dispose(&w->arena);
    ur_free(w);
}
