/* `_sharding`: one JSON object, member name = URL-safe base64 of the param name, member value
 * = a *string* holding the sharding JSON that Python's json.dumps wrote
 * (orbax `_src/metadata/sharding.py`, `jax_array_handlers.py`; doc: orbax-layout.md §2.4):
 *
 *   {"YQ==":"{\"sharding_type\": \"NamedSharding\", \"shape\": [2, 4],
 *             \"axis_names\": [\"data\", \"model\"], \"axis_types\": [...],
 *             \"partition_spec\": [\"data\", null, [\"a\", \"b\"]], \"device_mesh\": {...}}"}
 *
 * The file itself is compact (TensorStore's json driver); member values keep json.dumps'
 * ", " / ": " separators. */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/b64.h"
#include "unroll/json.h"

#include <string.h>

/* A partition-spec element: null, "axis", or ["a", "b"] (joined as "a,b"; [] as NULL). */
static int parse_spec_elem(const char **out, ur_orbax_arena *a, const cJSON *e, ur_err *err)
{
    if (cJSON_IsNull(e)) {
        *out = NULL;
        return UR_OK;
    }
    if (cJSON_IsString(e)) {
        *out = ur_orbax__arena_strdup(a, e->valuestring);
        return *out != NULL ? UR_OK : ur_err_oom(err);
    }
    if (!cJSON_IsArray(e)) {
        return ur_err_set(err, UR_ECORRUPT,
                          "partition_spec entries must be null, a string or a list of strings");
    }
    ur_buf b;
    ur_buf_init(&b, 0);
    int rc = UR_OK;
    const cJSON *x;
    int i = 0;
    cJSON_ArrayForEach(x, e)
    {
        if (!cJSON_IsString(x)) {
            rc = ur_err_set(err, UR_ECORRUPT, "partition_spec: a tuple entry holds a non-string");
            break;
        }
        if (i++ > 0) {
            rc = ur_buf_append_byte(&b, ',', err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(&b, x->valuestring, err);
        }
        if (rc < 0) {
            break;
        }
    }
    if (rc == UR_OK) {
        if (i == 0) {
            *out = NULL;
        } else {
            *out = ur_orbax__arena_strndup(a, (const char *)b.data, b.len);
            if (*out == NULL) {
                rc = ur_err_oom(err);
            }
        }
    }
    ur_buf_dispose(&b);
    return rc;
}

static int parse_named(ur_orbax_sharding *s, ur_orbax_arena *a, const cJSON *root, ur_err *err)
{
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "shape");
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(root, "axis_names");
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "axis_types");
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(root, "partition_spec");
    const cJSON *dm = cJSON_GetObjectItemCaseSensitive(root, "device_mesh");
    if (!cJSON_IsArray(shape) || !cJSON_IsArray(names) || !cJSON_IsArray(spec)) {
        return ur_err_set(err, UR_ECORRUPT,
                          "NamedSharding needs lists \"shape\", \"axis_names\" and "
                          "\"partition_spec\"");
    }
    int rank = cJSON_GetArraySize(shape);
    if (rank > UR_MAX_RANK || cJSON_GetArraySize(names) != rank) {
        return ur_err_set(err, UR_ECORRUPT,
                          "NamedSharding: mesh shape has %d axes but axis_names has %d", rank,
                          cJSON_GetArraySize(names));
    }
    int64_t *mshape = ur_orbax__arena_alloc(a, (size_t)(rank ? rank : 1) * sizeof(*mshape));
    const char **mnames = ur_orbax__arena_alloc(a, (size_t)(rank ? rank : 1) * sizeof(*mnames));
    const char **mtypes = ur_orbax__arena_alloc(a, (size_t)(rank ? rank : 1) * sizeof(*mtypes));
    if (mshape == NULL || mnames == NULL || mtypes == NULL) {
        return ur_err_oom(err);
    }
    s->mesh_shape = mshape;
    s->mesh_axis_names = mnames;
    s->mesh_axis_types = mtypes;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, shape)
    {
        int64_t d;
        if (ur_orbax__json_int(e, -1, (int64_t)1 << 31, &d) != 0) {
            return ur_err_set(err, UR_ECORRUPT, "NamedSharding: mesh shape[%d] is not a size", i);
        }
        mshape[i++] = d;
    }
    i = 0;
    cJSON_ArrayForEach(e, names)
    {
        if (!cJSON_IsString(e)) {
            return ur_err_set(err, UR_ECORRUPT, "NamedSharding: axis_names[%d] is not a string",
                              i);
        }
        mnames[i] = ur_orbax__arena_strdup(a, e->valuestring);
        if (mnames[i] == NULL) {
            return ur_err_oom(err);
        }
        i++;
    }
    if (types != NULL && !cJSON_IsNull(types)) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != rank) {
            return ur_err_set(err, UR_ECORRUPT,
                              "NamedSharding: axis_types must list one type per mesh axis");
        }
        i = 0;
        cJSON_ArrayForEach(e, types)
        {
            if (!cJSON_IsString(e)) {
                return ur_err_set(err, UR_ECORRUPT,
                                  "NamedSharding: axis_types[%d] is not a string", i);
            }
            mtypes[i] = ur_orbax__arena_strdup(a, e->valuestring);
            if (mtypes[i] == NULL) {
                return ur_err_oom(err);
            }
            i++;
        }
    }
    s->mesh_rank = rank;
    int srank = cJSON_GetArraySize(spec);
    if (srank > UR_MAX_RANK) {
        return ur_err_set(err, UR_ECORRUPT, "NamedSharding: partition_spec has %d entries", srank);
    }
    const char **sp = ur_orbax__arena_alloc(a, (size_t)(srank ? srank : 1) * sizeof(*sp));
    if (sp == NULL) {
        return ur_err_oom(err);
    }
    s->spec = sp;
    i = 0;
    cJSON_ArrayForEach(e, spec)
    {
        int rc = parse_spec_elem(&sp[i], a, e, err);
        if (rc < 0) {
            return rc;
        }
        i++;
    }
    s->spec_rank = srank;
    s->has_device_mesh = dm != NULL && !cJSON_IsNull(dm);
    s->kind = UR_ORBAX_SHARDING_NAMED;
    return UR_OK;
}

int ur_orbax_sharding_value_parse(ur_orbax_sharding *out, ur_orbax_arena *a, const char *json,
                                  ur_err *err)
{
    memset(out, 0, sizeof(*out));
    if (json[0] == '\0') {
        return UR_OK; /* an empty member: Orbax treats the leaf as having no sharding */
    }
    cJSON *root = NULL;
    int rc = ur_orbax__json_parse(&root, json, strlen(json), "sharding", err);
    if (rc < 0) {
        return rc;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "sharding_type");
    if (!cJSON_IsObject(root) || !cJSON_IsString(type)) {
        rc = ur_err_set(err, UR_ECORRUPT, "sharding has no \"sharding_type\" string");
    } else if (strcmp(type->valuestring, "NamedSharding") == 0) {
        rc = parse_named(out, a, root, err);
    } else if (strcmp(type->valuestring, "SingleDeviceSharding") == 0) {
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(root, "device_str");
        if (!cJSON_IsString(dev)) {
            rc = ur_err_set(err, UR_ECORRUPT, "SingleDeviceSharding has no \"device_str\" string");
        } else {
            out->device_str = ur_orbax__arena_strdup(a, dev->valuestring);
            out->kind = UR_ORBAX_SHARDING_SINGLE_DEVICE;
            rc = out->device_str != NULL ? UR_OK : ur_err_oom(err);
        }
    } else {
        rc = ur_err_set(err, UR_EUNSUPPORTED, "sharding type '%s' is not supported",
                        type->valuestring);
    }
    cJSON_Delete(root);
    if (rc < 0) {
        memset(out, 0, sizeof(*out));
    }
    return rc;
}

/* A spec entry "a,b" is a tuple of mesh axes: ["a", "b"]. */
static int put_spec_elem(ur_buf *out, const char *e, ur_err *err)
{
    if (e == NULL) {
        return ur_buf_append_str(out, "null", err);
    }
    if (strchr(e, ',') == NULL) {
        return ur_orbax__json_put_str(out, e, err);
    }
    int rc = ur_buf_append_byte(out, '[', err);
    const char *p = e;
    int first = 1;
    char part[256];
    while (rc == UR_OK) {
        const char *comma = strchr(p, ',');
        size_t n = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (n >= sizeof part) {
            return ur_err_set(err, UR_EINVAL, "mesh axis name too long");
        }
        memcpy(part, p, n);
        part[n] = '\0';
        if (!first) {
            rc = ur_buf_append_str(out, ", ", err);
        }
        first = 0;
        if (rc == UR_OK) {
            rc = ur_orbax__json_put_str(out, part, err);
        }
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, ']', err);
    }
    return rc;
}

int ur_orbax_sharding_value_emit(ur_buf *out, const ur_orbax_sharding *s, ur_err *err)
{
    int rc;
    if (s->kind == UR_ORBAX_SHARDING_SINGLE_DEVICE) {
        rc = ur_buf_append_str(out,
                               "{\"sharding_type\": \"SingleDeviceSharding\", "
                               "\"device_str\": ",
                               err);
        if (rc == UR_OK) {
            rc = ur_orbax__json_put_str(out, s->device_str != NULL ? s->device_str : "", err);
        }
        return rc == UR_OK ? ur_buf_append_byte(out, '}', err) : rc;
    }
    if (s->kind != UR_ORBAX_SHARDING_NAMED) {
        return ur_err_set(err, UR_EINVAL, "sharding: nothing to emit");
    }
    rc = ur_buf_append_str(out, "{\"sharding_type\": \"NamedSharding\", \"shape\": [", err);
    for (int i = 0; rc == UR_OK && i < s->mesh_rank; i++) {
        rc = i == 0 ? UR_OK : ur_buf_append(out, ", ", 2, err);
        if (rc == UR_OK) {
            rc = s->mesh_shape[i] >= 0
                     ? ur_buf_put_dec(out, (uint64_t)s->mesh_shape[i], err)
                     : ur_buf_printf(out, err, "%lld", (long long)s->mesh_shape[i]);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, "], \"axis_names\": [", err);
    }
    for (int i = 0; rc == UR_OK && i < s->mesh_rank; i++) {
        if (i > 0) {
            rc = ur_buf_append_str(out, ", ", err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax__json_put_str(out, s->mesh_axis_names[i], err);
        }
    }
    if (rc == UR_OK && s->mesh_rank > 0 && s->mesh_axis_types != NULL &&
        s->mesh_axis_types[0] != NULL) {
        rc = ur_buf_append_str(out, "], \"axis_types\": [", err);
        for (int i = 0; rc == UR_OK && i < s->mesh_rank; i++) {
            if (i > 0) {
                rc = ur_buf_append_str(out, ", ", err);
            }
            if (rc == UR_OK) {
                const char *t = s->mesh_axis_types[i];
                rc = ur_orbax__json_put_str(out, t != NULL ? t : "AxisType.Auto", err);
            }
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, "], \"partition_spec\": [", err);
    }
    for (int i = 0; rc == UR_OK && i < s->spec_rank; i++) {
        if (i > 0) {
            rc = ur_buf_append_str(out, ", ", err);
        }
        if (rc == UR_OK) {
            rc = put_spec_elem(out, s->spec[i], err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(out, "]}", err);
    }
    return rc;
}

/* Entry i of a document's source: 0 to leave it out. */
typedef int (*sharding_get)(const void *src, size_t i, const char **name,
                            const ur_orbax_sharding **s);

typedef struct {
    const void *src;
    sharding_get get;
} sharding_doc;

/* Entries [lo, hi), each written one after ',' (the sink drops the document's first). */
static int emit_entries(const void *doc_, ur_buf *out, size_t lo, size_t hi, ur_err *err)
{
    const sharding_doc *doc = doc_;
    ur_buf key, val;
    int rc = UR_OK;
    ur_buf_init(&key, 0);
    ur_buf_init(&val, 0);
    for (size_t i = lo; rc == UR_OK && i < hi; i++) {
        const char *name;
        const ur_orbax_sharding *sh;
        if (!doc->get(doc->src, i, &name, &sh)) {
            continue;
        }
        ur_buf_reset(&key);
        ur_buf_reset(&val);
        rc = ur_b64_encode(&key, name, strlen(name), UR_B64_URL, err);
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(&key, 0, err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax_sharding_value_emit(&val, sh, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(&val, 0, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(out, ',', err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax__json_put_str(out, (const char *)key.data, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(out, ':', err);
        }
        if (rc == UR_OK) {
            rc = ur_orbax__json_put_str(out, (const char *)val.data, err);
        }
    }
    ur_buf_dispose(&key);
    ur_buf_dispose(&val);
    return rc;
}

/* The entries' sink: the ',' before the document's first entry is dropped. */
typedef struct {
    ur_orbax_sink sink;
    void *ctx;
    int any;
} entries_sink;

static int sink_entries(void *ctx, const void *data, size_t n, ur_err *err)
{
    entries_sink *s = ctx;
    const char *p = data;
    if (n > 0 && !s->any) {
        s->any = 1;
        p++; /* the ',' */
        n--;
    }
    return n > 0 ? s->sink(s->ctx, p, n, err) : UR_OK;
}

/* Entries per piece: about a MB of text with Orbax's shardings. */
#define EMIT_PIECE_ENTRIES 4096

static int emit_doc(const void *src, size_t n, sharding_get get, ur_orbax_sink sink, void *ctx,
                    ur_err *err)
{
    sharding_doc doc = {src, get};
    entries_sink es = {sink, ctx, 0};
    int rc = sink(ctx, "{", 1, err);
    if (rc == UR_OK) {
        rc = ur_orbax__emit_pieces(&doc, n, EMIT_PIECE_ENTRIES, emit_entries, sink_entries, &es,
                                   err);
    }
    return rc == UR_OK ? sink(ctx, "}", 1, err) : rc;
}

typedef struct {
    const char *const *names;
    const ur_orbax_sharding *shardings;
} arrays_src;

static int get_arrays(const void *src, size_t i, const char **name, const ur_orbax_sharding **s)
{
    const arrays_src *a = src;
    *name = a->names[i];
    *s = &a->shardings[i];
    return 1;
}

/* The jax.Array leaves have an entry (the writer's leaves: every array is one). */
static int get_leaves(const void *src, size_t i, const char **name, const ur_orbax_sharding **s)
{
    const ur_orbax_leaf *l = (const ur_orbax_leaf *)src + i;
    *name = l->name;
    *s = &l->sharding;
    return l->value_type == UR_ORBAX_VALUE_JAX_ARRAY;
}

int ur_orbax_sharding_emit_leaves_to(const ur_orbax_leaf *leaves, size_t n, ur_orbax_sink sink,
                                     void *ctx, ur_err *err)
{
    return emit_doc(leaves, n, get_leaves, sink, ctx, err);
}

int ur_orbax_sharding_emit(ur_buf *out, const char *const *names,
                           const ur_orbax_sharding *shardings, size_t n, ur_err *err)
{
    arrays_src a = {names, shardings};
    return emit_doc(&a, n, get_arrays, ur_orbax__append_sink, out, err);
}

/* The whole document through cJSON: what the walk below refuses gets the usual message. */
static int parse_whole(ur_orbax_sharding_map **out, const char *json, size_t len, ur_err *err)
{
    cJSON *root = NULL;
    ur_buf name;
    ur_buf_init(&name, 0);
    ur_orbax_sharding_map *m = ur_calloc(1, sizeof(*m));
    if (m == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&m->arena);
    int rc = ur_orbax__json_parse(&root, json, len, "_sharding", err);
    if (rc < 0) {
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        rc = ur_err_set(err, UR_ECORRUPT, "_sharding: not a JSON object");
        goto out;
    }
    size_t n = (size_t)cJSON_GetArraySize(root);
    m->names = ur_orbax__arena_alloc(&m->arena, n * sizeof(*m->names));
    m->shardings = ur_orbax__arena_alloc(&m->arena, n * sizeof(*m->shardings));
    if (m->names == NULL || m->shardings == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    const cJSON *e;
    size_t i = 0;
    cJSON_ArrayForEach(e, root)
    {
        ur_buf_reset(&name);
        rc = ur_b64_decode(&name, e->string, strlen(e->string), UR_B64_URL, err);
        if (rc < 0) {
            ur_err_wrap(err, "_sharding: member '%s' is not a base64 param name", e->string);
            goto out;
        }
        if (name.len == 0) {
            rc = ur_err_set(err, UR_ECORRUPT, "_sharding: member '%s' decodes to an empty name",
                            e->string);
            goto out;
        }
        if (memchr(name.data, 0, name.len) != NULL) {
            rc = ur_err_set(err, UR_ECORRUPT, "_sharding: member '%s' decodes to a name with NUL",
                            e->string);
            goto out;
        }
        m->names[i] = ur_orbax__arena_strndup(&m->arena, (const char *)name.data, name.len);
        if (m->names[i] == NULL) {
            rc = ur_err_oom(err);
            goto out;
        }
        if (!cJSON_IsString(e)) {
            rc = ur_err_set(err, UR_ECORRUPT, "_sharding: '%s': value is not a string",
                            m->names[i]);
            goto out;
        }
        rc = ur_orbax_sharding_value_parse(&m->shardings[i], &m->arena, e->valuestring, err);
        if (rc < 0) {
            ur_err_wrap(err, "_sharding: '%s'", m->names[i]);
            goto out;
        }
        /* a repeated member: the first one wins, as the scan this map replaced found it */
        rc = ur_strmap_put(&m->index, m->names[i], name.len, i, NULL, err);
        if (rc < 0) {
            goto out;
        }
        rc = UR_OK;
        i++;
    }
    m->n = i;
    *out = m;
    m = NULL;
out:
    cJSON_Delete(root);
    ur_buf_dispose(&name);
    ur_orbax_sharding_map_free(m);
    return rc;
}

/* One member of `_sharding` (a base64 param name -> a JSON string holding the sharding). */
static int add_member(ur_orbax_sharding_map *m, ur_buf *name, const char *key, const char *text,
                      ur_err *err)
{
    size_t i = m->n;
    int rc;
    ur_buf_reset(name);
    rc = ur_b64_decode(name, key, strlen(key), UR_B64_URL, err);
    if (rc < 0) {
        return ur_err_wrap(err, "_sharding: member '%s' is not a base64 param name", key);
    }
    if (name->len == 0) {
        return ur_err_set(err, UR_ECORRUPT, "_sharding: member '%s' decodes to an empty name",
                          key);
    }
    if (memchr(name->data, 0, name->len) != NULL) {
        return ur_err_set(err, UR_ECORRUPT, "_sharding: member '%s' decodes to a name with NUL",
                          key);
    }
    m->names[i] = ur_orbax__arena_strndup(&m->arena, (const char *)name->data, name->len);
    if (m->names[i] == NULL) {
        return ur_err_oom(err);
    }
    if (text == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "_sharding: '%s': value is not a string", m->names[i]);
    }
    rc = ur_orbax_sharding_value_parse(&m->shardings[i], &m->arena, text, err);
    if (rc < 0) {
        return ur_err_wrap(err, "_sharding: '%s'", m->names[i]);
    }
    /* a repeated member: the first one wins, as the scan this map replaced found it */
    rc = ur_strmap_put(&m->index, m->names[i], name->len, i, NULL, err);
    if (rc < 0) {
        return rc;
    }
    m->n++;
    return UR_OK;
}

typedef struct {
    ur_orbax_sharding_map *m;
    ur_buf name;
    size_t count;
    int member_failed; /* the error is a member's, not the document's syntax */
    ur_json_scratch scratch;
} sharding_walk;

static int count_member(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    (void)key, (void)value, (void)len, (void)err;
    ((sharding_walk *)ctx)->count++;
    return UR_OK;
}

static int walk_member(void *ctx, const char *key, const char *value, size_t len, ur_err *err)
{
    sharding_walk *w = ctx;
    cJSON *v = NULL;
    int rc = w->m->n < w->count ? ur_json_parse(&v, value, len, err)
                                : ur_err_set(err, UR_EINTERNAL, "_sharding: uncounted member");
    if (rc == UR_OK) { /* (bad JSON in a value: the whole parse names its offset) */
        rc = add_member(w->m, &w->name, key, cJSON_IsString(v) ? v->valuestring : NULL, err);
        w->member_failed = rc < 0;
    }
    cJSON_Delete(v);
    ur_json_scratch_reset(&w->scratch);
    return rc;
}

/* Member by member (ur_json_each_member): 200,000 arrays make a 34 MB _sharding, and
 * cJSON's tree of it is ten times that. */
int ur_orbax_sharding_parse(ur_orbax_sharding_map **out, const char *json, size_t len, ur_err *err)
{
    sharding_walk w;
    int rc;

    memset(&w, 0, sizeof w);
    ur_buf_init(&w.name, 0);
    w.m = ur_calloc(1, sizeof(*w.m));
    if (w.m == NULL) {
        return ur_err_oom(err);
    }
    ur_orbax__arena_init(&w.m->arena);
    rc = ur_json_each_member(json, len, count_member, &w, err);
    if (rc == UR_OK) {
        w.m->names = ur_orbax__arena_alloc(&w.m->arena, w.count * sizeof(*w.m->names));
        w.m->shardings = ur_orbax__arena_alloc(&w.m->arena, w.count * sizeof(*w.m->shardings));
        rc = w.m->names != NULL && w.m->shardings != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) { /* each member's trees in a scratch region (unroll/json.h) */
        ur_json_scratch_init(&w.scratch, UR_ORBAX_ENTRY_SCRATCH);
        ur_json_scratch_use(&w.scratch);
        rc = ur_json_each_member(json, len, walk_member, &w, err);
        ur_json_scratch_use(NULL);
        ur_json_scratch_dispose(&w.scratch);
    }
    ur_buf_dispose(&w.name);
    if (rc == UR_OK) {
        *out = w.m;
        return UR_OK;
    }
    ur_orbax_sharding_map_free(w.m);
    if (rc == UR_ECORRUPT && !w.member_failed) {
        return parse_whole(out, json, len, err);
    }
    return rc;
}

const ur_orbax_sharding *ur_orbax_sharding_find(const ur_orbax_sharding_map *m, const char *name)
{
    size_t i;
    if (m == NULL || !ur_strmap_get(&m->index, name, strlen(name), &i)) {
        return NULL;
    }
    return &m->shardings[i];
}

void ur_orbax_sharding_map_free(ur_orbax_sharding_map *m)
{
    if (m == NULL) {
        return;
    }
    ur_orbax__arena_dispose(&m->arena);
    ur_strmap_dispose(&m->index);
    ur_free(m);
}
