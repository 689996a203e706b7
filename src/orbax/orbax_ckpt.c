/* Opening an Orbax checkpoint: find the item directory, read its metadata files, open the
 * array store (OCDBT or plain files) and describe every leaf. (orbax
 * `base_pytree_checkpoint_handler.py`, `_src/path/format_utils.py`, `checkpoint_manager.py`;
 * doc: orbax-layout.md §1, §2, §6, §9.1.) */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/side.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define TMP_SUFFIX ".orbax-checkpoint-tmp"

struct ur_orbax_ckpt {
    char *item_dir;
    char *step_dir;
    ur_orbax_arena arena; /* string values */
    ur_orbax_meta *meta;
    ur_orbax_leaf *leaves;
    size_t n_leaves;
    int use_ocdbt;
    int use_zarr3;
    int store_fill;
    int has_metadata_file;
    int has_sharding_file;
    /* the side files' parses, freed once the leaves have kept what they need of them */
    ur_orbax_sharding_map *sharding;
    ur_orbax_step_meta_doc *step;
    ur_orbax_array_meta_list *array_meta;
    ur_kvstore *kv;
    ur_orbax_loc loc; /* local tree or bucket: every metadata read goes through it */
    int loc_failed;   /* loc.failed points here */
};

/* Read a whole optional file: UR_ENOTFOUND (err untouched) when it is absent. A local one is
 * read beneath `dir`: a link out of the checkpoint or a FIFO is refused (ur_fs_open_beneath). */
static int read_optional(const ur_orbax_loc *l, ur_buf *b, const char *dir, const char *name,
                         ur_err *err)
{
    int rc = UR_ENOTFOUND;
    if (ur_orbax__loc_exists(l, dir, name)) {
        rc = ur_orbax__loc_read(l, b, dir, name, UR_ORBAX_MAX_JSON_BYTES, err);
        if (rc == UR_ENOTFOUND) { /* there, but a link to nothing */
            rc = UR_EIO;
            if (err != NULL) {
                err->code = UR_EIO;
            }
        }
    }
    return rc;
}

static int has_file(const ur_orbax_loc *l, const char *dir, const char *name)
{
    return ur_orbax__loc_exists(l, dir, name);
}

/* The per-process OCDBT databases of a save (`ocdbt.process_<i>/`, Pathways'
 * `ocdbt.process_pwcontroller/`): parts of an item, never an item themselves. */
static int is_process_db_name(const char *name)
{
    return strncmp(name, "ocdbt.process_", 14) == 0;
}

static size_t count_process_dbs(const ur_orbax_loc *l, const char *dir)
{
    return ur_orbax__loc_count_prefixed(l, dir, "ocdbt.process_");
}

/* An item directory, finished or not: what Orbax writes into it first (the per-process
 * databases, array_metadatas/) counts, so that a save copied half-way is recognised as the
 * item it is and refused for what it lacks, rather than skipped for a subdirectory. */
static int is_item_dir(const ur_orbax_loc *l, const char *dir)
{
    return has_file(l, dir, "_METADATA") || has_file(l, dir, "manifest.ocdbt") ||
           has_file(l, dir, "_sharding") || has_file(l, dir, "array_metadatas") ||
           count_process_dbs(l, dir) > 0;
}

/* A handler typestr of a PyTree item (v0 Standard/PyTree handlers, v1 PyTreeHandler). */
static int is_pytree_handler(const char *typestr)
{
    return strstr(typestr, "PyTreeCheckpointHandler") != NULL ||
           strstr(typestr, "StandardCheckpointHandler") != NULL ||
           strstr(typestr, "PyTreeHandler") != NULL;
}

/* The only subdirectory of `dir` that looks like a PyTree item (is_item_dir). */
typedef struct {
    const ur_orbax_loc *l;
    const char *dir;
    char *found;
    ur_err *err;
} item_search;

static int consider_item(void *ctx, const char *name)
{
    item_search *st = ctx;
    char *sub;
    if (name[0] == '.' || is_process_db_name(name)) {
        return 0;
    }
    sub = ur_path_join(st->dir, name);
    if (sub == NULL) {
        return ur_err_oom(st->err);
    }
    if (!is_item_dir(st->l, sub)) {
        ur_free(sub);
        return 0;
    }
    if (st->found != NULL) {
        int rc = ur_err_set(st->err, UR_EINVAL,
                            "%s: several items (%s, %s): give the item directory", st->dir,
                            st->found, sub);
        ur_free(sub);
        return rc;
    }
    st->found = sub;
    return 0;
}

static int find_item_by_listing(const ur_orbax_loc *l, char **out, const char *dir, ur_err *err)
{
    item_search st = {l, dir, NULL, err};
    int rc = ur_orbax__loc_list_dirs(l, dir, consider_item, &st, err);
    if (rc < 0) {
        ur_free(st.found);
        return rc;
    }
    if (st.found == NULL) {
        return ur_err_set(err, UR_ENOTFOUND,
                          "%s: not an Orbax checkpoint (no _METADATA, no items/ directory)", dir);
    }
    *out = st.found;
    return UR_OK;
}

static int load_step_meta(ur_orbax_ckpt *ck, ur_err *err)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    int rc = read_optional(&ck->loc, &b, ck->step_dir, "_CHECKPOINT_METADATA", err);
    if (rc == UR_ENOTFOUND) {
        rc = UR_OK;
    } else if (rc == UR_OK) {
        rc = ur_orbax_ckpt_meta_parse(&ck->step, (const char *)b.data, b.len, err);
        if (rc < 0) {
            ur_err_set_where(err, ck->step_dir);
        }
    }
    ur_buf_dispose(&b);
    return rc;
}

/* Decide item_dir and step_dir from the path the user gave. */
static int resolve_dirs(ur_orbax_ckpt *ck, const char *path, ur_err *err)
{
    if (strstr(path, TMP_SUFFIX) != NULL) {
        return ur_err_set(err, UR_ECORRUPT,
                          "%s: unfinished Orbax save (a temporary '" TMP_SUFFIX
                          "' directory, never renamed into place)",
                          path);
    }
    if (!ur_orbax__loc_is_dir(&ck->loc, path)) {
        return ur_err_set(err, UR_ENOTFOUND, "%s: no such checkpoint directory", path);
    }
    if (is_item_dir(&ck->loc, path)) {
        ck->item_dir = ur_strdup(path);
        if (ck->item_dir == NULL) {
            return ur_err_oom(err);
        }
        if (has_file(&ck->loc, path, "_CHECKPOINT_METADATA")) {
            ck->step_dir = ur_strdup(path); /* a direct checkpoint */
        } else {
            char *parent = ur_orbax__parent_dir(path);
            if (parent == NULL) {
                return ur_err_oom(err);
            }
            if (has_file(&ck->loc, parent, "_CHECKPOINT_METADATA")) {
                ck->step_dir = parent;
            } else {
                ur_free(parent);
                return UR_OK;
            }
        }
        return ck->step_dir != NULL ? load_step_meta(ck, err) : ur_err_oom(err);
    }

    ck->step_dir = ur_strdup(path);
    if (ck->step_dir == NULL) {
        return ur_err_oom(err);
    }
    int rc = load_step_meta(ck, err);
    if (rc < 0) {
        return rc;
    }
    static const char *const defaults[] = {"items", "default"};
    for (size_t i = 0; i < 2; i++) {
        char *sub = ur_path_join(path, defaults[i]);
        if (sub == NULL) {
            return ur_err_oom(err);
        }
        if (ur_orbax__loc_is_dir(&ck->loc, sub)) {
            ck->item_dir = sub;
            return UR_OK;
        }
        ur_free(sub);
    }
    if (ck->step != NULL) {
        const ur_orbax_step_meta *m = &ck->step->meta;
        for (size_t i = 0; i < m->n_item_handlers; i++) {
            if (m->item_names[i] == NULL || !is_pytree_handler(m->item_handlers[i])) {
                continue;
            }
            char *sub = ur_path_join(path, m->item_names[i]);
            if (sub == NULL) {
                return ur_err_oom(err);
            }
            if (ur_orbax__loc_is_dir(&ck->loc, sub)) {
                ck->item_dir = sub;
                return UR_OK;
            }
            ur_free(sub);
        }
    }
    return find_item_by_listing(&ck->loc, &ck->item_dir, path, err);
}

/* ---- Only a finalized save is read ------------------------------------------------------
 *
 * Orbax marks a finished save in one of two ways (`_src/path/atomicity.py`): atomic-rename
 * mode writes under `<name>.orbax-checkpoint-tmp` and renames at the end; commit-file mode
 * (object stores) writes under the final names and ends with `commit_success.txt`, in each
 * item as it is finalized and in the step directory last. Orbax 0.12.3+ writes the file in
 * both modes; older releases only in commit-file mode. The files do not say which mode wrote
 * them, so a checkpoint is read only when all of these hold:
 *  - no name in its path contains ".orbax-checkpoint-tmp" (resolve_dirs);
 *  - the step has commit_success.txt, or its item has none either (a commit-file save stopped
 *    between the item's marker and the step's is unfinished; an atomic-rename save by an
 *    Orbax before 0.12.3 has neither);
 *  - the item has _METADATA: the primary host writes it after its array data committed
 *    (base_pytree_checkpoint_handler.py `_write_metadata_after_commits`), and Orbax cannot
 *    restore without it (no target) — so arrays are never guessed from the stored names;
 *  - an OCDBT item has its merged manifest.ocdbt, written at finalize once every process has
 *    committed (`_finalize_async`: `merge_ocdbt_per_process_files`): while `ocdbt.process_*`
 *    wait to be merged, reading one of them would see only what was written so far;
 *  - a plain (non-OCDBT) item that several processes wrote has a commit mark
 *    (commit_success.txt or commit_timestamp_nsecs): the primary's _METADATA vouches only for
 *    its own data. */

#define COMMIT_FILE "commit_success.txt"

static int has_commit_mark(const ur_orbax_ckpt *ck)
{
    return has_file(&ck->loc, ck->item_dir, COMMIT_FILE) ||
           (ck->step_dir != NULL && has_file(&ck->loc, ck->step_dir, COMMIT_FILE)) ||
           (ck->step != NULL && ck->step->meta.has_commit_timestamp);
}

/* Before _METADATA is read: the step's commit marker. */
static int check_step_finalized(const ur_orbax_ckpt *ck, ur_err *err)
{
    if (strstr(ck->item_dir, TMP_SUFFIX) != NULL ||
        (ck->step_dir != NULL && strstr(ck->step_dir, TMP_SUFFIX) != NULL)) {
        return ur_err_set(err, UR_ECORRUPT,
                          "%s: unfinished Orbax save (a temporary '" TMP_SUFFIX
                          "' directory, never renamed into place)",
                          ck->item_dir);
    }
    if (ck->step_dir != NULL && strcmp(ck->step_dir, ck->item_dir) != 0 &&
        !has_file(&ck->loc, ck->step_dir, COMMIT_FILE) &&
        has_file(&ck->loc, ck->item_dir, COMMIT_FILE)) {
        return ur_err_set(err, UR_ECORRUPT,
                          "%s: unfinished Orbax save: no " COMMIT_FILE
                          " in the step directory (its item has one; Orbax writes the step's "
                          "last)",
                          ck->step_dir);
    }
    return UR_OK;
}

/* After _METADATA is read: the item's data is all there. */
static int check_item_finalized(const ur_orbax_ckpt *ck, ur_err *err)
{
    size_t n_db = count_process_dbs(&ck->loc, ck->item_dir);
    /* use_ocdbt true, or null (Orbax then looks for manifest.ocdbt) */
    if (ck->meta->use_ocdbt != 0 && n_db > 0 &&
        !has_file(&ck->loc, ck->item_dir, "manifest.ocdbt")) {
        return ur_err_set(err, UR_ECORRUPT,
                          "%s: unfinished Orbax save: no manifest.ocdbt (the %zu ocdbt.process_* "
                          "databases were never merged)",
                          ck->item_dir, n_db);
    }
    if (!ck->use_ocdbt && !has_commit_mark(ck)) {
        char *am = ur_path_join(ck->item_dir, "array_metadatas");
        size_t n_proc = am != NULL ? ur_orbax__loc_count_prefixed(&ck->loc, am, "process_") : 0;
        ur_free(am);
        if (n_proc > 1) {
            return ur_err_set(err, UR_ECORRUPT,
                              "%s: unfinished Orbax save: %zu processes wrote arrays and there "
                              "is no " COMMIT_FILE " nor commit_timestamp_nsecs",
                              ck->item_dir, n_proc);
        }
    }
    return UR_OK;
}

/* ---- Per-leaf information --------------------------------------------------------------- */

static int attach_strings(ur_orbax_ckpt *ck, ur_err *err)
{
    int any = 0;
    for (size_t i = 0; i < ck->n_leaves; i++) {
        any |= ck->leaves[i].value_type == UR_ORBAX_VALUE_STRING;
    }
    if (!any) {
        return UR_OK;
    }
    ur_buf b;
    ur_buf_init(&b, 0);
    cJSON *root = NULL;
    int rc = read_optional(&ck->loc, &b, ck->item_dir, "_strings.json", err);
    if (rc == UR_ENOTFOUND) {
        rc = UR_OK; /* restore of those leaves would fail; inspect still works */
        goto out;
    }
    if (rc < 0) {
        goto out;
    }
    rc = ur_orbax__json_parse(&root, (const char *)b.data, b.len, "_strings.json", err);
    if (rc < 0) {
        goto out;
    }
    for (size_t i = 0; i < ck->n_leaves; i++) {
        ur_orbax_leaf *l = &ck->leaves[i];
        if (l->value_type != UR_ORBAX_VALUE_STRING) {
            continue;
        }
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, l->name);
        if (cJSON_IsString(v)) {
            l->string_value = ur_orbax__arena_strdup(&ck->arena, v->valuestring);
            if (l->string_value == NULL) {
                rc = ur_err_oom(err);
                goto out;
            }
        }
    }
out:
    if (rc < 0) {
        ur_err_set_where(err, ck->item_dir);
    }
    cJSON_Delete(root);
    ur_buf_dispose(&b);
    return rc;
}

/* array_metadatas entries onto their leaves, found by name through a map (a scan per entry
 * is quadratic in the leaf count). */
static int attach_array_meta(ur_orbax_ckpt *ck, ur_err *err)
{
    ur_strmap by_name;
    int rc = UR_OK;

    if (ck->array_meta == NULL) {
        return UR_OK;
    }
    ur_strmap_init(&by_name);
    for (size_t j = 0; j < ck->n_leaves && rc >= 0; j++) {
        /* a later put never replaces: the first leaf of a name wins, as in a scan */
        rc = ur_strmap_put(&by_name, ck->leaves[j].name, strlen(ck->leaves[j].name), j, NULL, err);
    }
    for (size_t i = 0; rc >= 0 && i < ck->array_meta->n; i++) {
        const ur_orbax_array_meta *am = &ck->array_meta->items[i];
        size_t j;
        if (ur_strmap_get(&by_name, am->param_name, strlen(am->param_name), &j)) {
            ur_orbax_leaf *l = &ck->leaves[j];
            l->array_meta_chunk_rank = am->chunk_rank;
            l->array_meta_chunk_shape = am->chunk_shape; /* the list lives as long */
            l->random_key_impl = am->random_key_impl;
        }
    }
    ur_strmap_dispose(&by_name);
    return rc < 0 ? rc : UR_OK;
}

static int attach_sharding(ur_orbax_ckpt *ck, ur_err *err)
{
    for (size_t i = 0; i < ck->n_leaves; i++) {
        ur_orbax_leaf *l = &ck->leaves[i];
        if (ck->sharding == NULL || l->value_type != UR_ORBAX_VALUE_JAX_ARRAY ||
            l->skip_deserialize) {
            continue;
        }
        const ur_orbax_sharding *s = ur_orbax_sharding_find(ck->sharding, l->name);
        if (s == NULL) {
            return ur_err_set(err, UR_ECORRUPT,
                              "_sharding: no entry for array '%s' (Orbax cannot restore it "
                              "without a target)",
                              l->name);
        }
        l->sharding = *s;
    }
    if (ck->sharding != NULL) { /* every leaf has its copy: the look-up map is done */
        ur_strmap_dispose(&ck->sharding->index);
    }
    return UR_OK;
}

#define SIDE_SHARDING 1u   /* _sharding */
#define SIDE_ARRAY_META 2u /* array_metadatas/process_0 */

/* The leaves' copies of what they took from _sharding and array_metadatas (`what`: SIDE_*)
 * go into the checkpoint's arena, each distinct value once, and those parses are freed (with
 * 100,000 leaves: every param name twice more, a sharding and its strings per leaf). */
static int keep_side_into(ur_orbax_ckpt *ck, unsigned what, ur_orbax_arena *arena, ur_err *err)
{
    ur_orbax_keep k;
    int rc = UR_OK;
    ur_orbax__keep_init(&k, arena);
    for (size_t i = 0; i < ck->n_leaves && rc == UR_OK; i++) {
        ur_orbax_leaf *l = &ck->leaves[i];
        if (what & SIDE_SHARDING) {
            rc = ur_orbax__keep_sharding(&k, &l->sharding, err);
        }
        if (rc == UR_OK && (what & SIDE_ARRAY_META)) {
            rc = ur_orbax__keep_dims(&k, &l->array_meta_chunk_shape, l->array_meta_chunk_rank,
                                     err);
        }
        if (rc == UR_OK && (what & SIDE_ARRAY_META)) {
            rc = ur_orbax__keep_str(&k, &l->random_key_impl, err);
        }
    }
    ur_orbax__keep_dispose(&k);
    if (rc == UR_OK && (what & SIDE_SHARDING)) {
        ck->has_sharding_file = ck->sharding != NULL;
        ur_orbax_sharding_map_free(ck->sharding);
        ck->sharding = NULL;
    }
    if (rc == UR_OK && (what & SIDE_ARRAY_META)) {
        ur_orbax_array_meta_free(ck->array_meta);
        ck->array_meta = NULL;
    }
    return rc;
}

static int keep_side(ur_orbax_ckpt *ck, unsigned what, ur_err *err)
{
    return keep_side_into(ck, what, &ck->arena, err);
}

/* The first array leaf (n_leaves: none). */
static size_t first_array(const ur_orbax_ckpt *ck)
{
    size_t i = 0;
    while (i < ck->n_leaves && (!ur_orbax_value_type_has_array(ck->leaves[i].value_type) ||
                                ck->leaves[i].skip_deserialize)) {
        i++;
    }
    return i;
}

/* _sharding attached and kept on the second thread, into an arena of its own; then, when
 * the arrays are to be described, the first array's metadata looked up once: that decodes
 * the B+tree node(s) every array's look-up starts from into the store's cache (tens of ms
 * for a node of 100,000 arrays' keys) while this thread still attaches array_metadatas. */
typedef struct {
    ur_orbax_ckpt *ck;
    ur_orbax_arena arena;
    int warm;
} sharding_side;

static int attach_sharding_run(void *arg, ur_err *err)
{
    sharding_side *p = arg;
    int rc = attach_sharding(p->ck, err);
    if (rc == UR_OK) {
        rc = keep_side_into(p->ck, SIDE_SHARDING, &p->arena, err);
    }
    size_t first = rc == UR_OK && p->warm ? first_array(p->ck) : p->ck->n_leaves;
    if (first < p->ck->n_leaves) {
        ur_zarr_array *arr = NULL;
        ur_err ignored; /* describe_arrays meets and reports any failure */
        if (ur_orbax_ckpt_open_array(p->ck, &p->ck->leaves[first], &arr, &ignored) == UR_OK) {
            ur_zarr_array_close(arr);
        }
    }
    return rc;
}

/* Both side files attached and kept at once, _sharding's on a second thread: each writes its
 * own fields of the leaves and keeps its own kind of value (with 100,000 leaves each is a
 * look-up and a copy a leaf, on the open's one-core stretch). An error of _sharding's is the
 * one reported, as when they ran one after the other. */
static int attach_both(ur_orbax_ckpt *ck, int warm, ur_err *err)
{
    sharding_side sh;
    ur_side side;
    ur_err am_err;
    int am_rc, sh_rc;
    sh.ck = ck;
    sh.warm = warm;
    ur_orbax__arena_init(&sh.arena);
    ur_err_clear(&am_err);
    ur_side_start(&side, attach_sharding_run, &sh);
    am_rc = attach_array_meta(ck, &am_err);
    if (am_rc == UR_OK) {
        am_rc = keep_side(ck, SIDE_ARRAY_META, &am_err);
    }
    sh_rc = ur_side_join(&side);
    ur_orbax__arena_adopt(&ck->arena, &sh.arena);
    if (sh_rc < 0) {
        *err = side.err;
        return sh_rc;
    }
    if (am_rc < 0) {
        *err = am_err;
    }
    return am_rc;
}

/* The array leaf `l` from its zarr metadata (shapes kept by `keep`). */
static int describe_one(ur_orbax_ckpt *ck, ur_orbax_leaf *l, ur_orbax_keep *keep, ur_err *err)
{
    ur_zarr_array *arr = NULL;
    int rc = ur_orbax_ckpt_open_array(ck, l, &arr, err);
    if (rc < 0) {
        return rc;
    }
    const ur_zarr_info *info = ur_zarr_array_info(arr);
    l->has_array = 1;
    l->dtype = info->dtype;
    l->rank = info->rank;
    l->shape = info->shape;
    l->chunk_shape = info->chunk_shape;
    rc = ur_orbax__keep_dims(keep, &l->shape, l->rank, err);
    if (rc == UR_OK) {
        rc = ur_orbax__keep_dims(keep, &l->chunk_shape, l->rank, err);
    }
    ur_zarr_array_close(arr); /* info with it */
    if (rc < 0) {
        return rc;
    }
    if (l->sharding.kind == UR_ORBAX_SHARDING_NAMED && l->sharding.spec_rank > l->rank) {
        return ur_err_set(err, UR_ECORRUPT,
                          "_sharding: '%s': partition_spec has %d entries for a rank-%d "
                          "array",
                          l->name, l->sharding.spec_rank, l->rank);
    }
    return UR_OK;
}

/* Leaves [lo, hi) described by one thread; it stops at its first failure. */
typedef struct {
    ur_orbax_ckpt *ck;
    size_t lo, hi;
    ur_orbax_arena arena;
    ur_orbax_keep keep; /* into arena */
    size_t failed_at; /* hi: none */
    ur_err err;
} describe_part;

static void *describe_range(void *arg)
{
    describe_part *p = arg;
    p->failed_at = p->hi;
    for (size_t i = p->lo; i < p->hi; i++) {
        ur_orbax_leaf *l = &p->ck->leaves[i];
        if (!ur_orbax_value_type_has_array(l->value_type) || l->skip_deserialize) {
            continue;
        }
        if (describe_one(p->ck, l, &p->keep, &p->err) < 0) {
            p->failed_at = i;
            break;
        }
    }
    return NULL;
}

/* Reading every array's zarr metadata is most of the time it takes to open a checkpoint of
 * many small arrays: it is spread over the cores (each thread takes a contiguous range of
 * leaves; the error reported is the one of the first failing leaf, as one thread would). */
#define DESCRIBE_MAX_THREADS 8
#define DESCRIBE_MIN_LEAVES 512 /* per thread */

static int describe_arrays(ur_orbax_ckpt *ck, ur_err *err)
{
    describe_part parts[DESCRIBE_MAX_THREADS];
    pthread_t tids[DESCRIBE_MAX_THREADS];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t n = ck->n_leaves, t = cores > 1 ? (size_t)cores : 1, started = 1;
    int rc = UR_OK;

    /* The first array alone: its lookup decodes the B+tree node(s) into the reader's cache,
     * which a small tree's other arrays then share (threads missing the cache together
     * would each decode the same node). */
    size_t first = first_array(ck);
    if (first == n) {
        return UR_OK;
    }
    ur_orbax__keep_init(&parts[0].keep, &ck->arena);
    rc = describe_one(ck, &ck->leaves[first], &parts[0].keep, err);
    ur_orbax__keep_dispose(&parts[0].keep);
    if (rc < 0) {
        return rc;
    }
    first++;
    n -= first;
    if (t > DESCRIBE_MAX_THREADS) {
        t = DESCRIBE_MAX_THREADS;
    }
    if (t > n / DESCRIBE_MIN_LEAVES) {
        t = n / DESCRIBE_MIN_LEAVES > 0 ? n / DESCRIBE_MIN_LEAVES : 1;
    }
    for (size_t k = 0; k < t; k++) {
        parts[k].ck = ck;
        parts[k].lo = first + n * k / t;
        parts[k].hi = first + n * (k + 1) / t;
        ur_orbax__arena_init(&parts[k].arena);
        ur_orbax__keep_init(&parts[k].keep, &parts[k].arena);
        ur_err_clear(&parts[k].err);
    }
    for (size_t k = 1; k < t; k++) {
        if (pthread_create(&tids[k], NULL, describe_range, &parts[k]) != 0) {
            break;
        }
        started++;
    }
    describe_range(&parts[0]);
    for (size_t k = 1; k < started; k++) {
        pthread_join(tids[k], NULL);
    }
    for (size_t k = started; k < t; k++) { /* threads that could not start */
        describe_range(&parts[k]);
    }
    for (size_t k = 0; k < t; k++) {
        if (rc == UR_OK && parts[k].failed_at < parts[k].hi) {
            *err = parts[k].err;
            rc = err->code;
        }
        ur_orbax__keep_dispose(&parts[k].keep);
        ur_orbax__arena_adopt(&ck->arena, &parts[k].arena);
    }
    ur_alloc_trim(); /* what each thread's parses of zarr metadata freed, in its own heap */
    return rc;
}

/* _sharding, then array_metadatas/process_0 (both optional). */
typedef struct {
    const ur_orbax_loc *loc;
    const char *item_dir;
    ur_orbax_sharding_map *sharding;
    ur_orbax_array_meta_list *array_meta;
} side_parse;

/* The side files `what` (SIDE_*) read and parsed into p; an absent one stays NULL. */
static int parse_side_files(side_parse *p, unsigned what, ur_err *err)
{
    ur_buf b;
    int rc = UR_OK;
    ur_buf_init(&b, 0);
    if (what & SIDE_SHARDING) {
        rc = read_optional(p->loc, &b, p->item_dir, "_sharding", err);
        if (rc == UR_OK) {
            rc = ur_orbax_sharding_parse(&p->sharding, (const char *)b.data, b.len, err);
        } else if (rc == UR_ENOTFOUND) {
            rc = UR_OK;
        }
    }
    if (rc == UR_OK && (what & SIDE_ARRAY_META)) {
        ur_buf_reset(&b);
        rc = read_optional(p->loc, &b, p->item_dir, "array_metadatas/process_0", err);
        if (rc == UR_OK) {
            rc = ur_orbax_array_meta_parse(&p->array_meta, (const char *)b.data, b.len, err);
        } else if (rc == UR_ENOTFOUND) {
            rc = UR_OK;
        }
    }
    ur_buf_dispose(&b);
    return rc;
}

static int parse_side(void *ctx, ur_err *err)
{
    return parse_side_files(ctx, SIDE_SHARDING | SIDE_ARRAY_META, err);
}

/* UR_ORBAX_OPEN_SIDE_AFTER: each side file read, parsed, attached to the leaves and kept,
 * and its text and parse freed before the next is read (at 200,000 leaves, _sharding's
 * parse alone is 45 MB). */
static int side_one_at_a_time(ur_orbax_ckpt *ck, ur_err *err)
{
    side_parse side;
    int rc;
    memset(&side, 0, sizeof side);
    side.loc = &ck->loc;
    side.item_dir = ck->item_dir;
    rc = parse_side_files(&side, SIDE_SHARDING, err);
    ck->sharding = side.sharding;
    if (rc == UR_OK) {
        rc = attach_sharding(ck, err);
    }
    if (rc == UR_OK) {
        rc = keep_side(ck, SIDE_SHARDING, err);
    }
    if (rc == UR_OK) {
        ur_alloc_trim();
        rc = parse_side_files(&side, SIDE_ARRAY_META, err);
        ck->array_meta = side.array_meta;
    }
    if (rc == UR_OK) {
        rc = attach_array_meta(ck, err);
    }
    return rc == UR_OK ? keep_side(ck, SIDE_ARRAY_META, err) : rc;
}

/* A file-exists question went unanswered while opening (ur_orbax_loc.failed): whatever the
 * open concluded from its "no" is not to be trusted, so the open fails with that error. */
static int unanswered(int code, const char *path, ur_err *err)
{
    if (code == UR_ENOMEM) {
        return ur_err_oom(err);
    }
    return ur_err_set(err, code, "%s: the store did not answer whether a file exists", path);
}

int ur_orbax_ckpt_open(ur_orbax_ckpt **out, const char *path, unsigned flags, ur_err *err)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    ur_orbax_ckpt *ck = ur_calloc(1, sizeof(*ck));
    if (ck == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&ck->arena);
    int rc = ur_orbax__loc_open(&ck->loc, path, err);
    ck->loc.failed = &ck->loc_failed;
    if (rc == UR_OK) {
        rc = resolve_dirs(ck, path, err);
    }
    if (rc == UR_OK) {
        rc = check_step_finalized(ck, err);
    }
    if (rc < 0) {
        goto out;
    }

    /* _sharding and array_metadatas are read and parsed on a second thread while this one
     * parses _METADATA (a checkpoint of many leaves spends most of its opening there); their
     * errors are reported in the order one thread would meet them. */
    side_parse side;
    ur_side side_run;
    memset(&side, 0, sizeof side);
    side.loc = &ck->loc;
    side.item_dir = ck->item_dir;
    memset(&side_run, 0, sizeof side_run);
    if (!(flags & UR_ORBAX_OPEN_SIDE_AFTER)) {
        ur_side_start(&side_run, parse_side, &side);
    }
    rc = read_optional(&ck->loc, &b, ck->item_dir, "_METADATA", err);
    if (rc == UR_ENOTFOUND) {
        rc = ur_err_set(err, UR_ECORRUPT,
                        "%s: unfinished Orbax save: no _METADATA (Orbax writes it after the "
                        "array data)",
                        ck->item_dir);
    }
    int where = 0;
    if (rc == UR_OK) {
        ck->has_metadata_file = 1;
        rc = ur_orbax_meta_parse(&ck->meta, (const char *)b.data, b.len, err);
        where = rc < 0;
    }
    if (rc == UR_OK) {
        ck->leaves = ck->meta->leaves;
        ck->n_leaves = ck->meta->n_leaves;
        ck->use_zarr3 = ck->meta->use_zarr3;
        ck->store_fill = ck->meta->store_fill;
        ck->use_ocdbt = ck->meta->use_ocdbt;
        if (ck->use_ocdbt < 0) {
            ck->use_ocdbt = has_file(&ck->loc, ck->item_dir, "manifest.ocdbt");
        }
        rc = check_item_finalized(ck, err);
    }
    int side_rc = (flags & UR_ORBAX_OPEN_SIDE_AFTER) ? UR_OK : ur_side_join(&side_run);
    /* The text is parsed: give it back before the arrays' metadata is read (with 100,000
     * leaves, _METADATA is tens of MB and the B+tree node read next is larger). */
    ur_buf_dispose(&b);
    ur_alloc_trim();
    ck->sharding = side.sharding;
    ck->array_meta = side.array_meta;
    if (rc == UR_OK && side_rc < 0) {
        *err = side_run.err;
        rc = side_rc;
        where = 1;
    }
    if (rc < 0) {
        if (where) {
            goto out_where;
        }
        goto out;
    }

    rc = ur_orbax__loc_open_store(&ck->loc, &ck->kv, ck->item_dir, ck->use_ocdbt, err);
    if (rc < 0) {
        ur_err_wrap(err, "%s store", ck->use_ocdbt ? "OCDBT" : "file");
        goto out_where;
    }
    if (flags & UR_ORBAX_OPEN_SIDE_AFTER) {
        rc = side_one_at_a_time(ck, err);
    } else {
        rc = attach_both(ck, !(flags & UR_ORBAX_OPEN_NO_ARRAYS), err);
    }
    if (rc == UR_OK) {
        rc = attach_strings(ck, err);
    }
    if (rc == UR_OK && !(flags & UR_ORBAX_OPEN_NO_ARRAYS)) {
        rc = describe_arrays(ck, err);
    }
    if (rc < 0) {
        goto out_where;
    }
    if (ck->loc_failed == 0) {
        *out = ck;
        ck = NULL;
    }
    goto out;
out_where:
    ur_err_set_where(err, ck->item_dir);
out:
    if (ck != NULL && ck->loc_failed != 0 && rc != ck->loc_failed) {
        rc = unanswered(ck->loc_failed, path, err);
    }
    ur_buf_dispose(&b);
    ur_orbax_ckpt_close(ck);
    return rc;
}

void ur_orbax_ckpt_close(ur_orbax_ckpt *ck)
{
    if (ck == NULL) {
        return;
    }
    ur_kvstore_close(ck->kv);
    ur_orbax__loc_close(&ck->loc);
    ur_orbax_meta_free(ck->meta);
    ur_orbax_sharding_map_free(ck->sharding);
    ur_orbax_ckpt_meta_free(ck->step);
    ur_orbax_array_meta_free(ck->array_meta);
    ur_orbax__arena_dispose(&ck->arena);
    ur_free(ck->item_dir);
    ur_free(ck->step_dir);
    ur_free(ck);
}

const char *ur_orbax_ckpt_item_dir(const ur_orbax_ckpt *ck)
{
    return ck->item_dir;
}

const char *ur_orbax_ckpt_step_dir(const ur_orbax_ckpt *ck)
{
    return ck->step_dir;
}

int ur_orbax_ckpt_use_ocdbt(const ur_orbax_ckpt *ck)
{
    return ck->use_ocdbt;
}

int ur_orbax_ckpt_use_zarr3(const ur_orbax_ckpt *ck)
{
    return ck->use_zarr3;
}

int ur_orbax_ckpt_store_fill_value(const ur_orbax_ckpt *ck)
{
    return ck->store_fill;
}

int ur_orbax_ckpt_has_sharding_file(const ur_orbax_ckpt *ck)
{
    return ck->has_sharding_file;
}

int ur_orbax_ckpt_has_metadata_file(const ur_orbax_ckpt *ck)
{
    return ck->has_metadata_file;
}

const char *ur_orbax_ckpt_custom_metadata(const ur_orbax_ckpt *ck)
{
    return ck->meta != NULL ? ck->meta->custom_metadata_json : NULL;
}

const ur_orbax_step_meta *ur_orbax_ckpt_step_meta(const ur_orbax_ckpt *ck)
{
    return ck->step != NULL ? &ck->step->meta : NULL;
}

size_t ur_orbax_ckpt_leaf_count(const ur_orbax_ckpt *ck)
{
    return ck->n_leaves;
}

const ur_orbax_leaf *ur_orbax_ckpt_leaf(const ur_orbax_ckpt *ck, size_t i)
{
    return i < ck->n_leaves ? &ck->leaves[i] : NULL;
}

int ur_orbax_ckpt_find(const ur_orbax_ckpt *ck, const char *name, const ur_orbax_leaf **out,
                       ur_err *err)
{
    for (size_t i = 0; i < ck->n_leaves; i++) {
        if (strcmp(ck->leaves[i].name, name) == 0) {
            *out = &ck->leaves[i];
            return UR_OK;
        }
    }
    return ur_err_set(err, UR_ENOTFOUND, "no leaf '%s' in the checkpoint", name);
}

int ur_orbax_ckpt_open_array(ur_orbax_ckpt *ck, const ur_orbax_leaf *leaf, ur_zarr_array **out,
                             ur_err *err)
{
    if (!ur_orbax_value_type_has_array(leaf->value_type) || leaf->skip_deserialize) {
        return ur_err_set(err, UR_EINVAL, "leaf '%s' (%s) stores no array", leaf->name,
                          leaf->value_type_name);
    }
    int rc = ur_zarr_array_open(out, ck->kv, leaf->name, ck->use_zarr3 ? 3 : 2, err);
    if (rc < 0) {
        ur_err_wrap(err, "array '%s'", leaf->name);
        return rc;
    }
    /* _METADATA says Orbax wrote every chunk (store_array_data_equal_to_fill_value, always
     * true since it was introduced: tensorstore_utils.py STORE_ARRAY_DATA_EQUAL_TO_FILL_VALUE)
     * and Orbax itself then reads with fill_missing_data_reads=false: a missing chunk is lost
     * data. Only without it (older Orbax, which let TensorStore skip chunks equal to the fill
     * value) does a missing chunk read as the fill value. */
    if (ck->store_fill) {
        ur_zarr_array_set_fill_missing(*out, 0);
    }
    return rc;
}
