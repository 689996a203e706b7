/* A safetensors header parsed and checked (unroll/safetensors.h): everything a reader relies on
 * (sizes that match shapes, data that covers the data section without holes or overlaps) is
 * checked here, so a damaged or hostile file is refused with its byte offset, never read past. */
#include "unroll/safetensors.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/json.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static int bad(ur_err *err, uint64_t at, const char *what, const char *name)
{
    return ur_err_set_at(err, UR_ECORRUPT, at, "safetensors: %s%s%s%s", what,
                         name != NULL ? " (tensor '" : "", name != NULL ? name : "",
                         name != NULL ? "')" : "");
}

/* A non-negative whole number of a JSON value. */
static int whole(const cJSON *v, uint64_t *out)
{
    double d;
    if (!cJSON_IsNumber(v)) {
        return 0;
    }
    d = v->valuedouble;
    if (d < 0 || d > 9007199254740992.0 || d != (double)(uint64_t)d) {
        return 0;
    }
    *out = (uint64_t)d;
    return 1;
}

static int parse_entry(ur_st_entry *e, const cJSON *v, ur_err *err)
{
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(v, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(v, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(v, "data_offsets");
    const cJSON *x;
    uint64_t n;

    if (!cJSON_IsObject(v) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) ||
        !cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
        return bad(err, 8, "an entry without dtype, shape and two data_offsets", e->name);
    }
    e->dtype = ur_st_dtype_from_name(dt->valuestring);
    if (e->dtype == UR_DT_INVALID) {
        return ur_err_set(err, UR_EUNSUPPORTED, "safetensors: tensor '%s': dtype %s", e->name,
                          dt->valuestring);
    }
    if (cJSON_GetArraySize(shape) > UR_MAX_RANK) {
        return bad(err, 8, "too many dimensions", e->name);
    }
    n = ur_dtype_size(e->dtype);
    cJSON_ArrayForEach(x, shape)
    {
        if (!whole(x, &e->shape[e->rank]) || ur_ckd_mul64(&n, n, e->shape[e->rank])) {
            return bad(err, 8, "a bad dimension", e->name);
        }
        e->rank++;
    }
    if (!whole(cJSON_GetArrayItem(offs, 0), &e->begin) ||
        !whole(cJSON_GetArrayItem(offs, 1), &e->end) || e->end < e->begin ||
        e->end - e->begin != n) {
        return bad(err, 8, "data_offsets that do not hold its shape", e->name);
    }
    return UR_OK;
}

static int by_begin(const void *a, const void *b)
{
    const ur_st_entry *x = a, *y = b;
    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

/* The entries, sorted by offset, must tile [0, data_size) exactly. */
static int check_tiling(ur_st_header *h, uint64_t data_size, ur_err *err)
{
    uint64_t at = 0;
    qsort(h->e, h->n, sizeof *h->e, by_begin);
    for (size_t i = 0; i < h->n; i++) {
        if (h->e[i].begin != at) {
            return bad(err, h->data_start + at,
                       h->e[i].begin > at ? "a hole in the data" : "tensors overlap",
                       h->e[i].name);
        }
        at = h->e[i].end;
        h->e[i].begin += h->data_start;
        h->e[i].end += h->data_start;
    }
    if (at != data_size) {
        return bad(err, h->data_start + at, "data past the last tensor, or missing", NULL);
    }
    return UR_OK;
}

int ur_st_header_parse(ur_st_header *h, const uint8_t *bytes, size_t n, uint64_t file_size,
                       ur_err *err)
{
    uint64_t hlen = 0;
    cJSON *root = NULL;
    const cJSON *v;
    int rc = UR_OK;

    memset(h, 0, sizeof *h);
    if (n < 8 || file_size < 8) {
        return bad(err, 0, "shorter than its 8-byte header size", NULL);
    }
    for (int i = 7; i >= 0; i--) {
        hlen = hlen << 8 | bytes[i];
    }
    if (hlen > UR_ST_HEADER_MAX || hlen > file_size - 8 || hlen > n - 8) {
        return bad(err, 0, "a header size past the file (or the 100 MB limit)", NULL);
    }
    h->data_start = 8 + hlen;
    if (hlen == 0 || bytes[8] != '{') {
        return bad(err, 8, "the header is not a JSON object", NULL);
    }
    rc = ur_json_parse(&root, (const char *)bytes + 8, (size_t)hlen, err);
    if (rc == UR_ENOMEM) {
        return rc;
    }
    if (rc < 0 || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return bad(err, 8, "the header is not a JSON object", NULL);
    }
    cJSON_ArrayForEach(v, root)
    {
        h->n += strcmp(v->string, "__metadata__") != 0;
    }
    h->e = ur_calloc(h->n ? h->n : 1, sizeof *h->e);
    if (h->e == NULL) {
        rc = ur_err_oom(err);
    }
    h->n = 0;
    cJSON_ArrayForEach(v, root)
    {
        if (rc < 0) {
            break;
        }
        if (strcmp(v->string, "__metadata__") == 0) {
            h->metadata = cJSON_IsObject(v) ? cJSON_PrintUnformatted(v) : NULL;
            if (h->metadata == NULL) {
                rc = bad(err, 8, "__metadata__ is not an object", NULL);
            }
            continue;
        }
        h->e[h->n].name = ur_strdup(v->string);
        if (h->e[h->n].name == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        rc = parse_entry(&h->e[h->n++], v, err);
    }
    cJSON_Delete(root);
    if (rc == UR_OK) {
        rc = check_tiling(h, file_size - h->data_start, err);
    }
    if (rc < 0) {
        ur_st_header_dispose(h);
    }
    return rc;
}

int ur_st_header_read(ur_st_header *h, ur_kvstore *kv, const char *key, ur_err *err)
{
    uint8_t size[8];
    uint64_t file_size, hlen = 0;
    uint8_t *bytes;
    int rc = ur_kvstore_size(kv, key, &file_size, err);

    if (rc == UR_OK && file_size < 8) {
        rc = ur_err_set_os(err, UR_ECORRUPT, 0, key, "safetensors: shorter than 8 bytes");
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_read_range(kv, key, 0, 8, size, err);
    }
    if (rc < 0) {
        return rc;
    }
    for (int i = 7; i >= 0; i--) {
        hlen = hlen << 8 | size[i];
    }
    if (hlen > UR_ST_HEADER_MAX || hlen > file_size - 8) {
        return ur_err_set_os(err, UR_ECORRUPT, 0, key,
                             "safetensors: a header size past the file (or the 100 MB limit)");
    }
    bytes = ur_malloc((size_t)hlen + 8);
    if (bytes == NULL) {
        return ur_err_oom(err);
    }
    memcpy(bytes, size, 8);
    rc = ur_kvstore_read_range(kv, key, 8, (size_t)hlen, bytes + 8, err);
    if (rc == UR_OK) {
        rc = ur_st_header_parse(h, bytes, (size_t)hlen + 8, file_size, err);
        if (rc < 0) {
            ur_err_set_where(err, key);
        }
    }
    ur_free(bytes);
    return rc;
}

const ur_st_entry *ur_st_header_find(const ur_st_header *h, const char *name)
{
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->e[i].name, name) == 0) {
            return &h->e[i];
        }
    }
    return NULL;
}

void ur_st_header_dispose(ur_st_header *h)
{
    if (h != NULL) {
        for (size_t i = 0; i < h->n; i++) {
            ur_free(h->e[i].name);
        }
        ur_free(h->e);
        if (h->metadata != NULL) {
            cJSON_free(h->metadata);
        }
        memset(h, 0, sizeof *h);
    }
}
