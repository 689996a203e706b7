/* The LoRA adapters directory as MaxText lays it out (docs/maxtext-checkpoints.md §4):
 * `<adapters>/<id>/adapter_config.json` and `<adapters>/<id>/0/items`, and the units a run
 * publishes for it (include/unroll/plan_orbax.h). */
#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/plan_orbax.h"

#include <stdlib.h>
#include <string.h>

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct {
    char **ids;
    size_t n, cap;
    const char *dir; /* a local listing's directory */
} id_list;

static int add_id(id_list *l, const char *id, size_t len)
{
    char **p = ur_grow(l->ids, &l->cap, l->n, sizeof *p, 8);
    if (p == NULL) {
        return UR_ENOMEM;
    }
    l->ids = p;
    l->ids[l->n] = ur_strndup(id, len);
    if (l->ids[l->n] == NULL) {
        return UR_ENOMEM;
    }
    l->n++;
    return UR_OK;
}

/* ur_kvstore_list callback: `<id>/adapter_config.json`, one level deep, adds <id>. */
static int collect_id(void *ctx, const char *key, uint64_t size)
{
    static const char cfg[] = "/adapter_config.json";
    const char *slash = strchr(key, '/');
    (void)size;
    if (slash == NULL || slash == key || key[0] == '.' || strcmp(slash, cfg) != 0) {
        return 0;
    }
    return add_id(ctx, key, (size_t)(slash - key));
}

/* As list_loras, for adapters in an object store (s3://, gs://): the objects
 * `<id>/adapter_config.json` under the prefix. */
static int list_loras_remote(const char *adapters, id_list *l, ur_err *err)
{
    ur_kvstore *kv = NULL;
    int rc = ur_kvstore_open_url(&kv, adapters, 0, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_list(kv, "", collect_id, l, err);
        if (rc == UR_ENOMEM) {
            rc = ur_err_oom(err);
        }
    }
    ur_kvstore_close(kv);
    return rc;
}

/* ur_fs_list_names callback: <id> when `<dir>/<id>/adapter_config.json` is there. */
static int collect_local_id(void *ctx, const char *name)
{
    id_list *l = ctx;
    char *cfg;
    int has;
    if (name[0] == '.') {
        return 0;
    }
    cfg = ur_path_joinf(l->dir, "%s/adapter_config.json", name);
    has = cfg != NULL && ur_fs_exists(cfg);
    ur_free(cfg);
    return has ? add_id(l, name, strlen(name)) : 0;
}

/* The ids of `<adapters>/<id>/` holding adapter_config.json, sorted. */
static int list_loras(const char *adapters, char ***ids_out, size_t *n_out, ur_err *err)
{
    id_list l = {0};
    int rc;

    if (!ur_kvstore_location_can(adapters, UR_KV_IS_PATH)) {
        rc = list_loras_remote(adapters, &l, err);
    } else {
        l.dir = adapters;
        rc = ur_fs_list_names(adapters, "the LoRA adapters directory", collect_local_id, &l, err);
        if (rc == UR_ENOMEM) {
            rc = ur_err_oom(err);
        }
    }
    if (rc == UR_OK && l.n == 0) {
        rc = ur_err_set_os(err, UR_ENOTFOUND, 0, adapters,
                           "no LoRA adapter (<id>/adapter_config.json) found");
    } else if (rc == UR_OK) {
        qsort(l.ids, l.n, sizeof *l.ids, cmp_str);
    }
    *ids_out = l.ids;
    *n_out = l.n;
    return rc;
}

void ur_plan_lora_units_dispose(ur_plan_units *u)
{
    for (size_t i = 0; i < u->n_ids; i++) {
        ur_free(u->ids[i]);
    }
    for (size_t i = 0; i < u->n_units; i++) {
        ur_free(u->owned_[i]);
    }
    ur_free(u->ids);
    ur_free(u->units);
    ur_free(u->owned_);
    memset(u, 0, sizeof *u);
}

int ur_plan_lora_units(ur_plan_units *u, const char *adapters, ur_err *err)
{
    size_t n;
    int rc = UR_OK;

    memset(u, 0, sizeof *u);
    if (adapters[0] != '\0') {
        rc = list_loras(adapters, &u->ids, &u->n_ids, err);
        if (rc < 0) {
            return rc;
        }
    }
    n = adapters[0] != '\0' ? 1 + 2 * u->n_ids : 1;
    u->units = ur_calloc(n, sizeof *u->units);
    u->owned_ = ur_calloc(n, sizeof *u->owned_);
    if (u->units == NULL || u->owned_ == NULL) {
        return ur_err_oom(err);
    }
    u->owned_[u->n_units++] = ur_strdup(adapters[0] != '\0' ? "base/0" : "0");
    for (size_t i = 0; i < u->n_ids; i++) {
        u->owned_[u->n_units++] = ur_path_joinf("loras", "%s/0", u->ids[i]);
        u->owned_[u->n_units++] = ur_path_joinf("loras", "%s/adapter_config.json", u->ids[i]);
    }
    for (size_t i = 0; i < u->n_units; i++) {
        if (u->owned_[i] == NULL) {
            return ur_err_oom(err);
        }
        u->units[i] = u->owned_[i];
    }
    return UR_OK;
}
