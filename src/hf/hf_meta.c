/* The folder's files besides the shards (config.json, the index), the check of a staged
 * folder before it is published, and the order its files go up to an object store. */
#include "hf_plan.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/json.h"
#include "unroll/kvstore.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#define INDEX "model.safetensors.index.json"
#define CONFIG "config.json"

/* As MaxText's exporter writes it: json.dump(index, indent=2), no newline at the end. */
static int index_text(const ur_hf_plan *p, ur_buf *out, ur_err *err)
{
    int rc = ur_buf_printf(out, err,
                           "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n"
                           "  \"weight_map\": {\n",
                           (unsigned long long)p->bytes);
    for (size_t i = 0, k = 0; i < p->n && rc == UR_OK; i++) {
        if (p->t[i].part > 0) {
            continue; /* a later part of the tensor before it */
        }
        k++;
        rc = ur_buf_printf(out, err, "    \"%s\": \"%s\"%s\n", p->t[i].name,
                           p->shards[p->t[i].shard].file, k < p->n_tensors ? "," : "");
    }
    return rc == UR_OK ? ur_buf_append_str(out, "  }\n}", err) : rc;
}

int ur_hf_write_meta(const ur_hf_plan *p, const char *dir, ur_err *err)
{
    ur_buf text;
    int rc;
    ur_buf_init(&text, 0);
    rc = hf_json_print(p->config, &text, err);
    if (rc == UR_OK) {
        rc = ur_fs_write_file_in(dir, CONFIG, text.data, text.len, err);
    }
    if (rc == UR_OK && p->n_shards > 1) {
        ur_buf_reset(&text);
        rc = index_text(p, &text, err);
        if (rc == UR_OK) {
            rc = ur_fs_write_file_in(dir, INDEX, text.data, text.len, err);
        }
    }
    ur_buf_dispose(&text);
    return rc;
}

static int incomplete(ur_err *err, const char *dir, const char *what, const ur_err *why)
{
    return ur_err_set_os(err, why != NULL && why->code == UR_ENOMEM ? UR_ENOMEM : UR_EIO, 0, dir,
                         "staged output incomplete: %s%s%s: nothing published", what,
                         why != NULL ? ": " : "", why != NULL ? why->msg : "");
}

/* A JSON object read from `name` in dir; NULL when it is not one. */
static cJSON *json_file(const char *dir, const char *name, ur_err *why)
{
    ur_buf b;
    cJSON *doc = NULL;
    char *path = ur_path_join(dir, name);
    ur_buf_init(&b, 0);
    if (path != NULL && ur_fs_read_file(&b, path, (size_t)64 << 20, why) == UR_OK &&
        ur_json_parse(&doc, (const char *)b.data, b.len, why) == UR_OK && !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        doc = NULL;
    }
    ur_free(path);
    ur_buf_dispose(&b);
    return doc;
}

static int check_shard(ur_kvstore *kv, const char *dir, const char *file, ur_err *err)
{
    ur_st_header h;
    ur_err why;
    char what[320];
    ur_err_clear(&why);
    if (ur_st_header_read(&h, kv, file, &why) < 0) {
        snprintf(what, sizeof what, "shard %s", file);
        return incomplete(err, dir, what, &why);
    }
    ur_st_header_dispose(&h);
    return UR_OK;
}

int ur_hf_check_folder(const char *dir, ur_err *err)
{
    ur_kvstore *kv = NULL;
    cJSON *config, *index = NULL;
    ur_err why;
    int rc;

    ur_err_clear(&why);
    config = json_file(dir, CONFIG, &why);
    if (config == NULL) {
        return incomplete(err, dir, CONFIG " missing or not a JSON object", NULL);
    }
    cJSON_Delete(config);
    rc = ur_kvstore_file_open(&kv, dir, 0, &why);
    if (rc < 0) {
        return incomplete(err, dir, "the folder", &why);
    }
    index = json_file(dir, INDEX, &why);
    if (index != NULL) {
        const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map"), *v;
        if (!cJSON_IsObject(map) || cJSON_GetArraySize(map) == 0) {
            rc = incomplete(err, dir, INDEX " without a weight_map", NULL);
        }
        /* every file the map names, once */
        cJSON_ArrayForEach(v, map)
        {
            int seen = 0;
            if (rc < 0) {
                break;
            }
            if (!cJSON_IsString(v)) {
                rc = incomplete(err, dir, INDEX " names a shard that is not a string", NULL);
                break;
            }
            for (const cJSON *w = map->child; w != v && !seen; w = w->next) {
                seen = cJSON_IsString(w) && strcmp(w->valuestring, v->valuestring) == 0;
            }
            if (!seen) {
                rc = check_shard(kv, dir, v->valuestring, err);
            }
        }
        cJSON_Delete(index);
    } else {
        rc = check_shard(kv, dir, "model.safetensors", err);
    }
    ur_kvstore_close(kv);
    return rc;
}

int ur_hf_commit_phase(const char *key)
{
    const char *base = strrchr(key, '/');
    size_t n;
    base = base != NULL ? base + 1 : key;
    n = strlen(base);
    if (strcmp(base, INDEX) == 0 || strcmp(base, "model.safetensors") == 0) {
        return 3; /* names the weights: last */
    }
    if (strcmp(base, CONFIG) == 0) {
        return 2;
    }
    if (n > 12 && strcmp(base + n - 12, ".safetensors") == 0) {
        return 0; /* the shards, in parallel */
    }
    return 1; /* tokenizer and processor files */
}
