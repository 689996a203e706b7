/* Step-level `_CHECKPOINT_METADATA` and per-process `array_metadatas/process_<i>`
 * (orbax `_src/metadata/checkpoint.py`, `step_metadata_serialization.py`,
 * `array_metadata_store.py`; doc: orbax-layout.md §1.5, §2.5):
 *
 *   {"item_handlers": {"items": "<module>.<Handler>"}, "metrics": {}, "performance_metrics": {},
 *    "init_timestamp_nsecs": 1778718341396223910, "commit_timestamp_nsecs": ...,
 *    "custom_metadata": {}}
 *
 *   {"array_metadatas": [{"array_metadata": {"param_name": "a", "write_shape": [8],
 *                                            "chunk_shape": [8], "ext_metadata": null}}]}
 *
 * Every field of _CHECKPOINT_METADATA is optional on read. */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/json.h"

#include <stdio.h>
#include <string.h>

static int get_timestamp(const cJSON *root, const char *key, int *has, int64_t *out, ur_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *has = 0;
    if (v == NULL || cJSON_IsNull(v)) {
        return UR_OK;
    }
    if (ur_orbax__json_int(v, 0, INT64_MAX, out) != 0) {
        return ur_err_set(err, UR_ECORRUPT,
                          "_CHECKPOINT_METADATA: %s is not a non-negative integer", key);
    }
    *has = 1;
    return UR_OK;
}

/* The first member named `key` (the one cJSON's lookup finds): its value's text. */
typedef struct {
    const char *key;
    const char *text;
    size_t len;
} raw_member;

static int find_member(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    raw_member *rm = ctx;
    (void)err;
    if (rm->text == NULL && strcmp(key, rm->key) == 0) {
        rm->text = value;
        rm->len = len;
    }
    return UR_OK;
}

int ur_orbax_ckpt_meta_parse(ur_orbax_step_meta_doc **out, const char *json, size_t len,
                             ur_err *err)
{
    cJSON *root = NULL;
    ur_orbax_step_meta_doc *d = ur_calloc(1, sizeof(*d));
    if (d == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&d->arena);
    ur_orbax_step_meta *m = &d->meta;
    int rc = ur_orbax__json_parse(&root, json, len, "_CHECKPOINT_METADATA", err);
    if (rc < 0) {
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = ur_err_set(err, UR_ECORRUPT, "_CHECKPOINT_METADATA: not a JSON object");
        goto out;
    }
    const cJSON *ih = cJSON_GetObjectItemCaseSensitive(root, "item_handlers");
    if (cJSON_IsString(ih)) {
        m->n_item_handlers = 1;
        m->item_names = ur_orbax__arena_alloc(&d->arena, sizeof(char *));
        m->item_handlers = ur_orbax__arena_alloc(&d->arena, sizeof(char *));
        if (m->item_names == NULL || m->item_handlers == NULL ||
            (m->item_handlers[0] = ur_orbax__arena_strdup(&d->arena, ih->valuestring)) == NULL) {
            rc = ur_err_oom(err);
            goto out;
        }
    } else if (cJSON_IsObject(ih)) {
        size_t n = (size_t)cJSON_GetArraySize(ih);
        m->item_names = ur_orbax__arena_alloc(&d->arena, (n + 1) * sizeof(char *));
        m->item_handlers = ur_orbax__arena_alloc(&d->arena, (n + 1) * sizeof(char *));
        if (m->item_names == NULL || m->item_handlers == NULL) {
            rc = ur_err_oom(err);
            goto out;
        }
        const cJSON *e;
        size_t i = 0;
        cJSON_ArrayForEach(e, ih)
        {
            if (!cJSON_IsString(e)) {
                rc = ur_err_set(err, UR_ECORRUPT,
                                "_CHECKPOINT_METADATA: item_handlers['%s'] is not a string",
                                e->string);
                goto out;
            }
            m->item_names[i] = ur_orbax__arena_strdup(&d->arena, e->string);
            m->item_handlers[i] = ur_orbax__arena_strdup(&d->arena, e->valuestring);
            if (m->item_names[i] == NULL || m->item_handlers[i] == NULL) {
                rc = ur_err_oom(err);
                goto out;
            }
            i++;
        }
        m->n_item_handlers = i;
    } else if (ih != NULL && !cJSON_IsNull(ih)) {
        rc = ur_err_set(err, UR_ECORRUPT,
                        "_CHECKPOINT_METADATA: item_handlers is neither an object nor a string");
        goto out;
    }
    rc = get_timestamp(root, "init_timestamp_nsecs", &m->has_init_timestamp,
                       &m->init_timestamp_nsecs, err);
    if (rc == UR_OK) {
        rc = get_timestamp(root, "commit_timestamp_nsecs", &m->has_commit_timestamp,
                           &m->commit_timestamp_nsecs, err);
    }
    if (rc < 0) {
        goto out;
    }
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(root, "custom_metadata");
    if (cm != NULL && !cJSON_IsNull(cm)) {
        if (!cJSON_IsObject(cm)) {
            rc = ur_err_set(err, UR_ECORRUPT,
                            "_CHECKPOINT_METADATA: custom_metadata is not an object");
            goto out;
        }
        /* its text as written, not cJSON's reprint: 16.0 stays a float for Python */
        raw_member rm = {"custom_metadata", NULL, 0};
        rc = ur_json_each_member(json, len, find_member, &rm, err);
        if (rc < 0) {
            goto out;
        }
        char *text = ur_orbax__arena_alloc(&d->arena, rm.len + 1);
        if (rm.text == NULL || text == NULL) {
            rc = rm.text == NULL ? ur_err_set(err, UR_EINTERNAL, "custom_metadata not found")
                                 : ur_err_oom(err);
            goto out;
        }
        memcpy(text, rm.text, rm.len);
        text[rm.len] = '\0';
        m->custom_metadata_json = text;
    }
    *out = d;
    d = NULL;
out:
    cJSON_Delete(root);
    ur_orbax_ckpt_meta_free(d);
    return rc;
}

int ur_orbax_ckpt_meta_emit_standard(ur_buf *out, const char *item_name, int64_t init_ns,
                                     const char *custom_metadata_json, ur_err *err)
{
    const char *item_names[1] = {item_name};
    const char *handlers[1] = {
        "orbax.checkpoint._src.handlers.standard_checkpoint_handler.StandardCheckpointHandler"};
    ur_orbax_step_meta sm;
    memset(&sm, 0, sizeof sm);
    sm.n_item_handlers = 1;
    sm.item_names = item_names;
    sm.item_handlers = handlers;
    sm.has_init_timestamp = 1;
    sm.init_timestamp_nsecs = init_ns;
    sm.has_commit_timestamp = 1;
    sm.commit_timestamp_nsecs = ur_clock_stamp_ns();
    sm.custom_metadata_json = custom_metadata_json;
    return ur_orbax_ckpt_meta_emit(out, &sm, err);
}

int ur_orbax_ckpt_meta_emit(ur_buf *out, const ur_orbax_step_meta *m, ur_err *err)
{
    int rc = ur_buf_append_str(out, "{\"item_handlers\": ", err);
    if (rc == UR_OK && m->n_item_handlers == 1 && m->item_names[0] == NULL) {
        rc = ur_orbax__json_put_str(out, m->item_handlers[0], err);
    } else if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, '{', err);
        for (size_t i = 0; rc == UR_OK && i < m->n_item_handlers; i++) {
            if (i > 0) {
                rc = ur_buf_append_str(out, ", ", err);
            }
            if (rc == UR_OK) {
                rc = ur_orbax__json_put_str(out, m->item_names[i], err);
            }
            if (rc == UR_OK) {
                rc = ur_buf_append_str(out, ": ", err);
            }
            if (rc == UR_OK) {
                rc = ur_orbax__json_put_str(out, m->item_handlers[i], err);
            }
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(out, '}', err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, ", \"metrics\": {}, \"performance_metrics\": {}", err);
    }
    if (rc == UR_OK && m->has_init_timestamp) {
        rc = ur_buf_printf(out, err, ", \"init_timestamp_nsecs\": %lld",
                           (long long)m->init_timestamp_nsecs);
    }
    if (rc == UR_OK && m->has_commit_timestamp) {
        rc = ur_buf_printf(out, err, ", \"commit_timestamp_nsecs\": %lld",
                           (long long)m->commit_timestamp_nsecs);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, ", \"custom_metadata\": ", err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(
            out, m->custom_metadata_json != NULL ? m->custom_metadata_json : "{}", err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, '}', err);
    }
    return rc;
}

void ur_orbax_ckpt_meta_free(ur_orbax_step_meta_doc *d)
{
    if (d == NULL) {
        return;
    }
    ur_orbax__arena_dispose(&d->arena);
    ur_free(d);
}

static int parse_array_meta(ur_orbax_array_meta *am, ur_orbax_arena *a, const cJSON *e, size_t i,
                            ur_err *err)
{
    const cJSON *inner = cJSON_GetObjectItemCaseSensitive(e, "array_metadata");
    const cJSON *pn = cJSON_GetObjectItemCaseSensitive(inner, "param_name");
    if (!cJSON_IsObject(inner) || !cJSON_IsString(pn)) {
        return ur_err_set(err, UR_ECORRUPT,
                          "array_metadatas: entry %zu has no array_metadata.param_name", i);
    }
    am->param_name = ur_orbax__arena_strdup(a, pn->valuestring);
    if (am->param_name == NULL) {
        return ur_err_oom(err);
    }
    am->write_rank = -1;
    am->chunk_rank = -1;
    char what[300];
    const cJSON *ws = cJSON_GetObjectItemCaseSensitive(inner, "write_shape");
    if (ws != NULL && !cJSON_IsNull(ws)) {
        snprintf(what, sizeof what, "array_metadatas: '%s': write_shape", am->param_name);
        int rc = ur_orbax__parse_shape_in(ws, a, &am->write_shape, &am->write_rank, what, err);
        if (rc < 0) {
            return rc;
        }
    }
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(inner, "chunk_shape");
    if (cs != NULL && !cJSON_IsNull(cs)) {
        snprintf(what, sizeof what, "array_metadatas: '%s': chunk_shape", am->param_name);
        int rc = ur_orbax__parse_shape_in(cs, a, &am->chunk_shape, &am->chunk_rank, what, err);
        if (rc < 0) {
            return rc;
        }
    }
    const cJSON *ext = cJSON_GetObjectItemCaseSensitive(inner, "ext_metadata");
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(ext, "random_key_impl");
    if (cJSON_IsString(rk)) {
        am->random_key_impl = ur_orbax__arena_strdup(a, rk->valuestring);
        if (am->random_key_impl == NULL) {
            return ur_err_oom(err);
        }
    }
    return UR_OK;
}

/* The whole document through cJSON: what the walk below refuses gets the usual message. */
static int parse_whole(ur_orbax_array_meta_list **out, const char *json, size_t len, ur_err *err)
{
    cJSON *root = NULL;
    ur_orbax_array_meta_list *l = ur_calloc(1, sizeof(*l));
    if (l == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&l->arena);
    int rc = ur_orbax__json_parse(&root, json, len, "array_metadatas", err);
    if (rc < 0) {
        goto out;
    }
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "array_metadatas");
    if (!cJSON_IsArray(list)) {
        rc = ur_err_set(err, UR_ECORRUPT, "array_metadatas: no \"array_metadatas\" list");
        goto out;
    }
    size_t n = (size_t)cJSON_GetArraySize(list);
    l->items = ur_orbax__arena_alloc(&l->arena, n * sizeof(*l->items));
    if (l->items == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    const cJSON *e;
    size_t i = 0;
    cJSON_ArrayForEach(e, list)
    {
        rc = parse_array_meta(&l->items[i], &l->arena, e, i, err);
        if (rc < 0) {
            goto out;
        }
        i++;
    }
    l->n = i;
    *out = l;
    l = NULL;
out:
    cJSON_Delete(root);
    ur_orbax_array_meta_free(l);
    return rc;
}

typedef struct {
    ur_orbax_array_meta_list *l;
    const char *list; /* the text of the "array_metadatas" member */
    size_t list_len;
    size_t count;
    int entry_failed; /* the error is an entry's, not the document's syntax */
    ur_json_scratch scratch;
} array_meta_walk;

static int top_member(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    array_meta_walk *w = ctx;
    cJSON *v = NULL;
    int rc;
    if (strcmp(key, "array_metadatas") == 0 && w->list == NULL) {
        w->list = value; /* its entries are parsed one by one */
        w->list_len = len;
        return UR_OK;
    }
    rc = ur_json_parse(&v, value, len, err); /* checked, as a whole parse would */
    cJSON_Delete(v);
    return rc;
}

static int count_element(void *ctx, size_t i, const char *value, size_t len, ur_err *err)
{
    (void)i, (void)value, (void)len, (void)err;
    ((array_meta_walk *)ctx)->count++;
    return UR_OK;
}

static int walk_element(void *ctx, size_t i, const char *value, size_t len, ur_err *err)
{
    array_meta_walk *w = ctx;
    cJSON *e = NULL;
    int rc = i < w->count ? ur_json_parse(&e, value, len, err)
                          : ur_err_set(err, UR_EINTERNAL, "array_metadatas: uncounted entry");
    if (rc == UR_OK) {
        rc = parse_array_meta(&w->l->items[i], &w->l->arena, e, i, err);
        w->entry_failed = rc < 0;
        w->l->n += rc == UR_OK;
    }
    cJSON_Delete(e);
    ur_json_scratch_reset(&w->scratch);
    return rc;
}

/* Entry by entry (ur_json_each_member, ur_json_each_element): 200,000 arrays make a 28 MB
 * file, and cJSON's tree of it is ten times that. */
int ur_orbax_array_meta_parse(ur_orbax_array_meta_list **out, const char *json, size_t len,
                              ur_err *err)
{
    array_meta_walk w;
    int rc;

    memset(&w, 0, sizeof w);
    w.l = ur_calloc(1, sizeof(*w.l));
    if (w.l == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&w.l->arena);
    rc = ur_json_each_member(json, len, top_member, &w, err);
    if (rc == UR_OK && w.list == NULL) {
        rc = UR_ECORRUPT; /* the whole parse names what is missing */
    }
    if (rc == UR_OK) {
        rc = ur_json_each_element(w.list, w.list_len, count_element, &w, err);
    }
    if (rc == UR_OK) {
        w.l->items = ur_orbax__arena_alloc(&w.l->arena, w.count * sizeof(*w.l->items));
        rc = w.l->items != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) { /* each entry's tree in a scratch region (unroll/json.h) */
        ur_json_scratch_init(&w.scratch, UR_ORBAX_ENTRY_SCRATCH);
        ur_json_scratch_use(&w.scratch);
        rc = ur_json_each_element(w.list, w.list_len, walk_element, &w, err);
        ur_json_scratch_use(NULL);
        ur_json_scratch_dispose(&w.scratch);
    }
    if (rc == UR_OK) {
        *out = w.l;
        return UR_OK;
    }
    ur_orbax_array_meta_free(w.l);
    if (rc == UR_ECORRUPT && !w.entry_failed) {
        return parse_whole(out, json, len, err);
    }
    return rc;
}

/* Entry i of a document's source into *am: 0 to leave it out. */
typedef int (*am_get)(const void *src, size_t i, ur_orbax_array_meta *am);

static int emit_doc(const void *src, size_t n, am_get get, ur_orbax_sink sink, void *ctx,
                    ur_err *err)
{
    ur_buf b;
    ur_buf *out = &b;
    size_t written = 0;
    ur_buf_init(&b, 0);
    int rc = ur_buf_append_str(out, "{\"array_metadatas\": [", err);
    for (size_t i = 0; rc == UR_OK && i < n; i++) {
        ur_orbax_array_meta one;
        const ur_orbax_array_meta *am = &one;
        if (!get(src, i, &one)) {
            continue;
        }
        rc = ur_buf_append_str(out,
                               written++ == 0 ? "{\"array_metadata\": {\"param_name\": "
                                              : ", {\"array_metadata\": {\"param_name\": ",
                               err);
        if (rc == UR_OK) {
            rc = ur_orbax__json_put_str(out, am->param_name, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(out, ", \"write_shape\": ", err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax__put_shape(out, am->write_shape, am->write_rank, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(out, ", \"chunk_shape\": ", err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax__put_shape(out, am->chunk_shape, am->chunk_rank, err);
        }
        if (rc == UR_OK && am->random_key_impl != NULL) {
            rc = ur_buf_append_str(out, ", \"ext_metadata\": {\"random_key_impl\": ", err);
            if (rc == UR_OK) {
                rc = ur_orbax__json_put_str(out, am->random_key_impl, err);
            }
            if (rc == UR_OK) {
                rc = ur_buf_append_str(out, "}}}", err);
            }
        } else if (rc == UR_OK) {
            rc = ur_buf_append_str(out, ", \"ext_metadata\": null}}", err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax__sink_piece(out, sink, ctx, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, "]}", err);
    }
    if (rc == UR_OK) {
        rc = sink(ctx, b.data, b.len, err);
    }
    ur_buf_dispose(&b);
    return rc;
}

static int get_items(const void *src, size_t i, ur_orbax_array_meta *am)
{
    *am = ((const ur_orbax_array_meta *)src)[i];
    return 1;
}

static int get_leaves(const void *src, size_t i, ur_orbax_array_meta *am)
{
    const ur_orbax_leaf *l = (const ur_orbax_leaf *)src + i;
    memset(am, 0, sizeof *am);
    am->param_name = l->name;
    am->write_rank = l->rank;
    am->chunk_rank = l->rank;
    am->write_shape = l->write_shape;
    am->chunk_shape = l->chunk_shape;
    return l->value_type == UR_ORBAX_VALUE_JAX_ARRAY;
}

int ur_orbax_array_meta_emit_leaves_to(const ur_orbax_leaf *leaves, size_t n, ur_orbax_sink sink,
                                       void *ctx, ur_err *err)
{
    return emit_doc(leaves, n, get_leaves, sink, ctx, err);
}

int ur_orbax_array_meta_emit(ur_buf *out, const ur_orbax_array_meta *items, size_t n, ur_err *err)
{
    return emit_doc(items, n, get_items, ur_orbax__append_sink, out, err);
}

void ur_orbax_array_meta_free(ur_orbax_array_meta_list *l)
{
    if (l == NULL) {
        return;
    }
    ur_orbax__arena_dispose(&l->arena);
    ur_free(l);
}
