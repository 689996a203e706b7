/* `_METADATA`: the PyTree metadata Orbax writes last into an item directory.
 * (orbax `_src/metadata/tree.py`, `value_metadata_entry.py`; doc: orbax-layout.md §2.2)
 *
 *   {"tree_metadata": {"('a',)": {"key_metadata": [{"key": "a", "key_type": 2}],
 *                                 "value_metadata": {"value_type": "jax.Array",
 *                                                    "skip_deserialize": false,
 *                                                    "write_shape": [8]}}, ...},
 *    "use_ocdbt": true, "use_zarr3": false, "store_array_data_equal_to_fill_value": true,
 *    "custom_metadata": null}
 *
 * The tree_metadata key string is never parsed back (structure comes from key_metadata);
 * it is kept only for error messages. */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/json.h"
#include "unroll/side.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const struct {
    ur_orbax_value_type vt;
    const char *name;
} value_types[] = {
    {UR_ORBAX_VALUE_JAX_ARRAY, "jax.Array"},
    {UR_ORBAX_VALUE_NP_ARRAY, "np.ndarray"},
    {UR_ORBAX_VALUE_SCALAR, "scalar"},
    {UR_ORBAX_VALUE_STRING, "string"},
    {UR_ORBAX_VALUE_PLACEHOLDER, "placeholder"},
    {UR_ORBAX_VALUE_EMPTY_DICT, "Dict"},
    {UR_ORBAX_VALUE_EMPTY_LIST, "List"},
    {UR_ORBAX_VALUE_EMPTY_TUPLE, "Tuple"},
    {UR_ORBAX_VALUE_NONE, "None"},
    {UR_ORBAX_VALUE_EMPTY_NAMED_TUPLE, "NamedTuple"},
};

const char *ur_orbax_value_type_name(ur_orbax_value_type vt)
{
    for (size_t i = 0; i < sizeof value_types / sizeof value_types[0]; i++) {
        if (value_types[i].vt == vt) {
            return value_types[i].name;
        }
    }
    return "unknown";
}

ur_orbax_value_type ur_orbax_value_type_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof value_types / sizeof value_types[0]; i++) {
        if (strcmp(value_types[i].name, name) == 0) {
            return value_types[i].vt;
        }
    }
    return UR_ORBAX_VALUE_UNKNOWN;
}

int ur_orbax_value_type_has_array(ur_orbax_value_type vt)
{
    return vt == UR_ORBAX_VALUE_JAX_ARRAY || vt == UR_ORBAX_VALUE_NP_ARRAY ||
           vt == UR_ORBAX_VALUE_SCALAR;
}

/* "0" or [1-9][0-9]{0,18}: str() of a list index. */
static int is_index(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 19 || (n > 1 && s[0] == '0')) {
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return 0;
        }
    }
    return 1;
}

/* Key strings and value type names go through `keep`: a few distinct ones for any number of
 * leaves. */
static int parse_entry(ur_orbax_meta *m, ur_orbax_keep *keep, ur_orbax_leaf *leaf,
                       const cJSON *entry, ur_err *err)
{
    const char *kp = entry->string;
    ur_buf name;
    ur_buf_init(&name, 0);
    int rc = UR_OK;

    leaf->write_shape_rank = -1;
    leaf->array_meta_chunk_rank = -1;
    if (!cJSON_IsObject(entry)) {
        return ur_err_set(err, UR_ECORRUPT, "_METADATA: %s: entry is not an object", kp);
    }
    const cJSON *km = cJSON_GetObjectItemCaseSensitive(entry, "key_metadata");
    const cJSON *vm = cJSON_GetObjectItemCaseSensitive(entry, "value_metadata");
    if (!cJSON_IsArray(km)) {
        return ur_err_set(err, UR_ECORRUPT, "_METADATA: %s: key_metadata is missing or not a list",
                          kp);
    }
    if (!cJSON_IsObject(vm)) {
        return ur_err_set(err, UR_ECORRUPT,
                          "_METADATA: %s: value_metadata is missing or not an object", kp);
    }

    int depth = cJSON_GetArraySize(km);
    if (depth == 0) {
        return ur_err_set(err, UR_ECORRUPT, "_METADATA: %s: key_metadata is empty", kp);
    }
    ur_orbax_key *path = ur_orbax__arena_alloc(&m->arena, (size_t)depth * sizeof(*path));
    if (path == NULL) {
        return ur_err_oom(err);
    }
    int i = 0;
    const cJSON *k;
    cJSON_ArrayForEach(k, km)
    {
        const cJSON *key = cJSON_GetObjectItemCaseSensitive(k, "key");
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(k, "key_type");
        int64_t t;
        if (!cJSON_IsString(key) || ur_orbax__json_int(type, 1, 2, &t) != 0) {
            return ur_err_set(err, UR_ECORRUPT,
                              "_METADATA: %s: key_metadata[%d] needs a string \"key\" and "
                              "\"key_type\" 1 or 2",
                              kp, i);
        }
        path[i].type = (ur_orbax_key_type)t;
        if (path[i].type == UR_ORBAX_KEY_SEQUENCE && !is_index(key->valuestring)) {
            return ur_err_set(err, UR_ECORRUPT,
                              "_METADATA: %s: key_metadata[%d]: list index '%s' is not a "
                              "non-negative integer",
                              kp, i, key->valuestring);
        }
        path[i].key = key->valuestring;
        rc = ur_orbax__keep_str(keep, &path[i].key, err);
        if (rc < 0) {
            return rc;
        }
        i++;
    }
    leaf->path = path;
    leaf->depth = (size_t)depth;

    rc = ur_orbax_tree_name(&name, path, leaf->depth, err);
    if (rc == UR_OK) {
        leaf->name = ur_orbax__arena_strndup(&m->arena, (const char *)name.data, name.len);
        if (leaf->name == NULL) {
            rc = ur_err_oom(err);
        }
    }
    ur_buf_dispose(&name);
    if (rc < 0) {
        return rc;
    }

    const cJSON *vt = cJSON_GetObjectItemCaseSensitive(vm, "value_type");
    const cJSON *sd = cJSON_GetObjectItemCaseSensitive(vm, "skip_deserialize");
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(vm, "write_shape");
    if (!cJSON_IsString(vt)) {
        return ur_err_set(err, UR_ECORRUPT, "_METADATA: %s: value_type is missing or not a string",
                          kp);
    }
    if (!cJSON_IsBool(sd)) {
        return ur_err_set(err, UR_ECORRUPT,
                          "_METADATA: %s: skip_deserialize is missing or not a bool", kp);
    }
    leaf->value_type_name = vt->valuestring;
    rc = ur_orbax__keep_str(keep, &leaf->value_type_name, err);
    if (rc < 0) {
        return rc;
    }
    leaf->value_type = ur_orbax_value_type_from_name(vt->valuestring);
    leaf->skip_deserialize = cJSON_IsTrue(sd);
    if (ws != NULL && !cJSON_IsNull(ws)) {
        char what[300];
        snprintf(what, sizeof what, "_METADATA: %s: write_shape", kp);
        rc = ur_orbax__parse_shape_in(ws, &m->arena, &leaf->write_shape, &leaf->write_shape_rank,
                                      what, err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

static int get_flag(const cJSON *root, const char *key, int absent, int *out, ur_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (v == NULL || cJSON_IsNull(v)) {
        *out = absent;
        return UR_OK;
    }
    if (!cJSON_IsBool(v)) {
        return ur_err_set(err, UR_ECORRUPT, "_METADATA: %s is not a bool", key);
    }
    *out = cJSON_IsTrue(v);
    return UR_OK;
}

/* What follows tree_metadata: leaf order, the flags and custom_metadata from `root`. */
static int meta_finish(ur_orbax_meta *m, const cJSON *root, ur_err *err)
{
    int rc = ur_orbax_tree_order(m->leaves, &m->n_leaves, "_METADATA", err);
    if (rc == UR_OK) {
        rc = get_flag(root, "use_ocdbt", -1, &m->use_ocdbt, err);
    }
    if (rc == UR_OK) {
        rc = get_flag(root, "use_zarr3", 0, &m->use_zarr3, err);
    }
    if (rc == UR_OK) {
        rc = get_flag(root, "store_array_data_equal_to_fill_value", 0, &m->store_fill, err);
    }
    if (rc < 0) {
        return rc;
    }
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(root, "custom_metadata");
    if (cm != NULL && !cJSON_IsNull(cm)) {
        char *text = ur_orbax__json_print(&m->arena, cm);
        if (text == NULL) {
            return ur_err_oom(err);
        }
        m->custom_metadata_json = text;
    }
    return UR_OK;
}

/* The whole document as one cJSON tree: about ten times its size in memory. Used when the
 * member walk below fails, for the errors this parse has always given. */
static int parse_whole(ur_orbax_meta **out, const char *json, size_t len, ur_err *err)
{
    cJSON *root = NULL;
    ur_orbax_meta *m = ur_calloc(1, sizeof(*m));
    if (m == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&m->arena);
    int rc = ur_orbax__json_parse(&root, json, len, "_METADATA", err);
    if (rc < 0) {
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = ur_err_set(err, UR_ECORRUPT, "_METADATA: not a JSON object");
        goto out;
    }
    const cJSON *tree = cJSON_GetObjectItemCaseSensitive(root, "tree_metadata");
    if (!cJSON_IsObject(tree)) {
        rc = ur_err_set(err, UR_ECORRUPT, "_METADATA: tree_metadata is missing or not an object");
        goto out;
    }
    int n = cJSON_GetArraySize(tree);
    if (n == 0) {
        rc = ur_err_set(err, UR_ECORRUPT, "_METADATA: empty tree_metadata (no leaves)");
        goto out;
    }
    m->leaves = ur_orbax__arena_alloc(&m->arena, (size_t)n * sizeof(*m->leaves));
    if (m->leaves == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    size_t i = 0;
    const cJSON *e;
    ur_orbax_keep keep;
    ur_orbax__keep_init(&keep, &m->arena);
    cJSON_ArrayForEach(e, tree)
    {
        rc = parse_entry(m, &keep, &m->leaves[i], e, err);
        if (rc < 0) {
            break;
        }
        i++;
    }
    ur_orbax__keep_dispose(&keep);
    if (rc < 0) {
        goto out;
    }
    m->n_leaves = i;
    rc = meta_finish(m, root, err);
    if (rc < 0) {
        goto out;
    }
    *out = m;
    m = NULL;
out:
    cJSON_Delete(root);
    ur_orbax_meta_free(m);
    return rc;
}

/* One entry of tree_metadata, found by the walk: its key (decoded, in the walk's arena) and
 * its value's text. */
typedef struct {
    const char *key;
    const char *value;
    size_t len;
} meta_member;

/* State of the member walk: the top level's other members are kept as a small tree. */
typedef struct {
    ur_orbax_meta *m;
    cJSON *root;
    const char *tree; /* tree_metadata's text (the first such member) */
    size_t tree_len;
    meta_member *members;
    size_t n, cap;
    ur_orbax_arena keys;
} meta_walk;

static int top_member(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    meta_walk *w = ctx;
    cJSON *v = NULL;
    int rc;
    if (strcmp(key, "tree_metadata") == 0 && w->tree == NULL) {
        w->tree = value;
        w->tree_len = len;
        return UR_OK;
    }
    rc = ur_json_parse(&v, value, len, err);
    if (rc == UR_OK && !cJSON_AddItemToObject(w->root, key, v)) {
        cJSON_Delete(v);
        rc = ur_err_oom(err);
    }
    return rc;
}

static int list_member(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    meta_walk *w = ctx;
    meta_member *mm, *grown = ur_grow(w->members, &w->cap, w->n, sizeof *grown, 1024);
    if (grown == NULL) {
        return ur_err_oom(err);
    }
    w->members = grown;
    mm = &w->members[w->n];
    mm->key = ur_orbax__arena_strndup(&w->keys, key, strlen(key));
    if (mm->key == NULL) {
        return ur_err_oom(err);
    }
    mm->value = value;
    mm->len = len;
    w->n++;
    return UR_OK;
}

/* One entry of tree_metadata: its own small tree, parsed and dropped (strings into
 * m's arena). */
static int parse_member(ur_orbax_meta *m, ur_orbax_keep *keep, ur_orbax_leaf *leaf,
                        const meta_member *mm, ur_err *err)
{
    cJSON *e = NULL;
    int rc = ur_json_parse(&e, mm->value, mm->len, err);
    if (rc < 0) {
        return rc;
    }
    e->string = (char *)(uintptr_t)mm->key; /* borrowed: not freed by cJSON_Delete */
    e->type |= cJSON_StringIsConst;
    rc = parse_entry(m, keep, leaf, e, err);
    e->string = NULL;
    cJSON_Delete(e);
    return rc;
}

/* Entries [lo, hi) parsed by one thread into its own arena; it stops at its first failure. */
typedef struct {
    const meta_walk *w;
    size_t lo, hi;
    ur_orbax_meta shell; /* only its arena is used */
    size_t failed_at;    /* hi: none */
} meta_part;

static int parse_part(void *ctx, ur_err *err)
{
    meta_part *p = ctx;
    ur_orbax_keep keep;
    ur_json_scratch scratch;
    int rc = UR_OK;
    p->failed_at = p->hi;
    ur_orbax__keep_init(&keep, &p->shell.arena);
    ur_json_scratch_init(&scratch, UR_ORBAX_ENTRY_SCRATCH);
    ur_json_scratch_use(&scratch);
    for (size_t i = p->lo; i < p->hi; i++) {
        rc = parse_member(&p->shell, &keep, &p->w->m->leaves[i], &p->w->members[i], err);
        ur_json_scratch_reset(&scratch); /* the entry's tree is deleted */
        if (rc < 0) {
            p->failed_at = i;
            break;
        }
    }
    ur_json_scratch_use(NULL);
    ur_json_scratch_dispose(&scratch);
    ur_orbax__keep_dispose(&keep);
    return rc;
}

/* Entries parsed on two threads when there are many (half of opening a checkpoint of
 * 100,000 leaves is this parse); the error reported is the first entry's, as one thread
 * would meet it. */
#define PARSE_SPLIT_MIN 2048

static int parse_members(meta_walk *w, ur_err *err)
{
    meta_part part[2];
    ur_side side;
    size_t n = w->n, mid = n >= PARSE_SPLIT_MIN ? n / 2 : n;
    int rc, side_rc = UR_OK;

    for (int k = 0; k < 2; k++) {
        memset(&part[k], 0, sizeof part[k]);
        part[k].w = w;
        ur_orbax__arena_init(&part[k].shell.arena);
    }
    part[0].lo = 0;
    part[0].hi = mid;
    part[1].lo = mid;
    part[1].hi = n;
    if (mid < n) {
        ur_side_start(&side, parse_part, &part[1]);
    }
    rc = parse_part(&part[0], err);
    if (mid < n) {
        side_rc = ur_side_join(&side);
        if (rc == UR_OK && side_rc < 0) {
            *err = side.err;
            rc = side_rc;
        }
    }
    for (int k = 0; k < 2; k++) {
        ur_orbax__arena_adopt(&w->m->arena, &part[k].shell.arena);
    }
    if (rc == UR_OK) {
        w->m->n_leaves = n;
    }
    return rc;
}

/* _METADATA member by member: the leaves' entries are parsed one at a time, never the whole
 * document at once (100,000 leaves make a 38 MB _METADATA and a 380 MB cJSON tree). */
static int parse_walk(ur_orbax_meta **out, const char *json, size_t len, ur_err *err)
{
    meta_walk w;
    int rc;

    memset(&w, 0, sizeof w);
    ur_orbax__arena_init(&w.keys);
    w.m = ur_calloc(1, sizeof(*w.m));
    w.root = cJSON_CreateObject();
    if (w.m == NULL || w.root == NULL) {
        ur_free(w.m);
        cJSON_Delete(w.root);
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&w.m->arena);
    rc = ur_json_each_member(json, len, top_member, &w, err);
    if (rc == UR_OK && w.tree == NULL) {
        rc = ur_err_set(err, UR_ECORRUPT, "_METADATA: tree_metadata is missing");
    }
    if (rc == UR_OK) {
        rc = ur_json_each_member(w.tree, w.tree_len, list_member, &w, err);
    }
    if (rc == UR_OK && w.n == 0) {
        rc = ur_err_set(err, UR_ECORRUPT, "_METADATA: empty tree_metadata (no leaves)");
    }
    if (rc == UR_OK) {
        w.m->leaves = ur_orbax__arena_alloc(&w.m->arena, w.n * sizeof(*w.m->leaves));
        rc = w.m->leaves != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = parse_members(&w, err);
    }
    ur_free(w.members);
    ur_orbax__arena_dispose(&w.keys);
    if (rc == UR_OK) {
        rc = meta_finish(w.m, w.root, err);
    }
    cJSON_Delete(w.root);
    if (rc < 0) {
        ur_orbax_meta_free(w.m);
        return rc;
    }
    *out = w.m;
    return UR_OK;
}

int ur_orbax_meta_parse(ur_orbax_meta **out, const char *json, size_t len, ur_err *err)
{
    int rc = parse_walk(out, json, len, err);
    if (rc == UR_OK || rc == UR_ENOMEM) {
        return rc;
    }
    /* A document the walk refuses is parsed whole, for the same error (or result) as
     * always: which fault is reported first must not depend on how it was read. */
    ur_err_clear(err);
    return parse_whole(out, json, len, err);
}

static int put_bool(ur_buf *b, int v, ur_err *err)
{
    return ur_buf_append_str(b, v ? "true" : "false", err);
}

/* The tree_metadata entries of leaves [lo, hi) (each after ", " but the very first). */
static int emit_leaves(ur_buf *out, const ur_orbax_meta *m, size_t lo, size_t hi, ur_err *err)
{
    ur_buf kp;
    int rc = UR_OK;
    ur_buf_init(&kp, 0);
    for (size_t i = lo; rc == UR_OK && i < hi; i++) {
        const ur_orbax_leaf *l = &m->leaves[i];
        ur_buf_reset(&kp);
        rc = ur_orbax_tree_keypath(&kp, l->path, l->depth, err);
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(&kp, 0, err);
        }
        if (rc == UR_OK && i > 0) {
            rc = ur_buf_append_str(out, ", ", err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax__json_put_str(out, (const char *)kp.data, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(out, ": {\"key_metadata\": [", err);
        }
        for (size_t k = 0; rc == UR_OK && k < l->depth; k++) {
            rc = ur_buf_append_str(out, k == 0 ? "{\"key\": " : ", {\"key\": ", err);
            if (rc == UR_OK) {
                rc = ur_orbax__json_put_str(out, l->path[k].key, err);
            }
            if (rc == UR_OK) {
                rc = ur_buf_append_str(out, ", \"key_type\": ", err);
            }
            if (rc == UR_OK) {
                rc = ur_buf_put_dec(out, (uint64_t)l->path[k].type, err);
            }
            if (rc == UR_OK) {
                rc = ur_buf_append_byte(out, '}', err);
            }
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(out, "], \"value_metadata\": {\"value_type\": ", err);
        }
        if (rc == UR_OK) {
            const char *vt = l->value_type_name != NULL ? l->value_type_name
                                                        : ur_orbax_value_type_name(l->value_type);
            rc = ur_orbax__json_put_str(out, vt, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(out, ", \"skip_deserialize\": ", err);
        }
        if (rc == UR_OK) {
            rc = put_bool(out, l->skip_deserialize, err);
        }
        if (rc == UR_OK && l->write_shape_rank >= 0) {
            rc = ur_buf_append_str(out, ", \"write_shape\": ", err);
            if (rc == UR_OK) {
                rc = ur_orbax__put_shape(out, l->write_shape, l->write_shape_rank, err);
            }
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(out, "}}", err);
        }
    }
    ur_buf_dispose(&kp);
    return rc;
}

static int emit_range(const void *m, ur_buf *out, size_t lo, size_t hi, ur_err *err)
{
    return emit_leaves(out, m, lo, hi, err);
}

/* Leaves per piece: about 1.5 MB of text with Orbax's entries of tiny arrays. Below two
 * pieces the document is emitted on the calling thread alone. */
#define EMIT_PIECE_LEAVES 4096

/* The document after the leaves. */
static int emit_tail(ur_buf *out, const ur_orbax_meta *m, ur_err *err)
{
    int rc = ur_buf_append_str(out, "}, \"use_ocdbt\": ", err);
    if (rc == UR_OK) {
        rc = m->use_ocdbt < 0 ? ur_buf_append_str(out, "null", err)
                              : put_bool(out, m->use_ocdbt, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, ", \"use_zarr3\": ", err);
    }
    if (rc == UR_OK) {
        rc = put_bool(out, m->use_zarr3, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, ", \"store_array_data_equal_to_fill_value\": ", err);
    }
    if (rc == UR_OK) {
        rc = put_bool(out, m->store_fill, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, ", \"custom_metadata\": ", err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(
            out, m->custom_metadata_json != NULL ? m->custom_metadata_json : "null", err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, '}', err);
    }
    return rc;
}

int ur_orbax_meta_emit_to(const ur_orbax_meta *m, ur_orbax_sink sink, void *ctx, ur_err *err)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    int rc = ur_buf_append_str(&b, "{\"tree_metadata\": {", err);
    if (rc == UR_OK && m->n_leaves >= 2 * EMIT_PIECE_LEAVES) {
        rc = sink(ctx, b.data, b.len, err);
        if (rc == UR_OK) {
            rc = ur_orbax__emit_pieces(m, m->n_leaves, EMIT_PIECE_LEAVES, emit_range, sink, ctx,
                                       err);
        }
        ur_buf_reset(&b);
    } else if (rc == UR_OK) {
        rc = emit_leaves(&b, m, 0, m->n_leaves, err);
    }
    if (rc == UR_OK) {
        rc = emit_tail(&b, m, err);
    }
    if (rc == UR_OK) {
        rc = sink(ctx, b.data, b.len, err);
    }
    ur_buf_dispose(&b);
    return rc;
}

int ur_orbax_meta_emit(ur_buf *out, const ur_orbax_meta *m, ur_err *err)
{
    return ur_orbax_meta_emit_to(m, ur_orbax__append_sink, out, err);
}

void ur_orbax_meta_free(ur_orbax_meta *m)
{
    if (m == NULL) {
        return;
    }
    ur_orbax__arena_dispose(&m->arena);
    ur_free(m);
}
