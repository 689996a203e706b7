/* `unroll inspect [--json] [--hash] <checkpoint>`: an Orbax checkpoint's tree, with each leaf's
 * dtype, shape, chunk grid, stored bytes and partition spec, and a total. --hash adds an
 * FNV-1a 64 digest of each array's C-order little-endian bytes (for comparing with Orbax). */
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/orbax.h"
#include "unroll/plan.h"

#include <cjson/cJSON.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL
#define HASH_SLAB_BYTES ((size_t)64 << 20)

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Digest of the whole array, read in slabs along the first axis. */
static int hash_array(ur_zarr_array *arr, uint64_t *out, ur_err *err)
{
    const ur_zarr_info *info = ur_zarr_array_info(arr);
    uint64_t start[UR_MAX_RANK] = {0};
    uint64_t count[UR_MAX_RANK] = {0};
    size_t item = ur_dtype_size(info->dtype);
    uint64_t h = FNV_OFFSET;
    if (info->nbytes == 0) {
        *out = h;
        return UR_OK;
    }
    if (info->rank == 0) {
        uint8_t v[16];
        int rc = ur_zarr_array_read_box(arr, start, count, v, err);
        if (rc == UR_OK) {
            *out = fnv1a(h, v, item);
        }
        return rc;
    }
    uint64_t row = info->nbytes / info->shape[0]; /* bytes per index of axis 0 */
    uint64_t rows = row >= HASH_SLAB_BYTES ? 1 : HASH_SLAB_BYTES / row;
    if (rows > info->shape[0]) {
        rows = info->shape[0];
    }
    uint8_t *buf = ur_malloc((size_t)(rows * row));
    if (buf == NULL) {
        return ur_err_oom(err);
    }
    for (int i = 1; i < info->rank; i++) {
        count[i] = info->shape[i];
    }
    int rc = UR_OK;
    for (uint64_t r = 0; r < info->shape[0]; r += rows) {
        start[0] = r;
        count[0] = info->shape[0] - r < rows ? info->shape[0] - r : rows;
        rc = ur_zarr_array_read_box(arr, start, count, buf, err);
        if (rc < 0) {
            break;
        }
        h = fnv1a(h, buf, (size_t)(count[0] * row));
    }
    ur_free(buf);
    if (rc == UR_OK) {
        *out = h;
    }
    return rc;
}

static void print_dims(FILE *f, const uint64_t *d, int rank)
{
    fputc('[', f);
    for (int i = 0; i < rank; i++) {
        fprintf(f, i ? ", %" PRIu64 : "%" PRIu64, d[i]);
    }
    fputc(']', f);
}

static void print_spec(FILE *f, const ur_orbax_sharding *s)
{
    if (s->kind == UR_ORBAX_SHARDING_SINGLE_DEVICE) {
        fprintf(f, "device %s", s->device_str);
        return;
    }
    if (s->kind != UR_ORBAX_SHARDING_NAMED) {
        fputs("-", f);
        return;
    }
    fputs("P(", f);
    for (int i = 0; i < s->spec_rank; i++) {
        if (i > 0) {
            fputs(", ", f);
        }
        if (s->spec[i] == NULL) {
            fputs("None", f);
        } else if (strchr(s->spec[i], ',') != NULL) {
            fputc('(', f);
            for (const char *p = s->spec[i]; *p != '\0'; p++) {
                if (p == s->spec[i]) {
                    fputc('\'', f);
                }
                if (*p == ',') {
                    fputs("', '", f);
                } else {
                    fputc(*p, f);
                }
            }
            fputs("')", f);
        } else {
            fprintf(f, "'%s'", s->spec[i]);
        }
    }
    fputs(")", f);
}

static cJSON *dims_json(const uint64_t *d, int rank)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a != NULL && i < rank; i++) {
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)d[i]));
    }
    return a;
}

static cJSON *sharding_json(const ur_orbax_sharding *s)
{
    if (s->kind == UR_ORBAX_SHARDING_ABSENT) {
        return cJSON_CreateNull();
    }
    cJSON *o = cJSON_CreateObject();
    if (s->kind == UR_ORBAX_SHARDING_SINGLE_DEVICE) {
        cJSON_AddStringToObject(o, "type", "SingleDeviceSharding");
        cJSON_AddStringToObject(o, "device_str", s->device_str);
        return o;
    }
    cJSON_AddStringToObject(o, "type", "NamedSharding");
    cJSON *names = cJSON_AddArrayToObject(o, "mesh_axis_names");
    cJSON *shape = cJSON_AddArrayToObject(o, "mesh_shape");
    for (int i = 0; i < s->mesh_rank; i++) {
        cJSON_AddItemToArray(names, cJSON_CreateString(s->mesh_axis_names[i]));
        cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)s->mesh_shape[i]));
    }
    cJSON *spec = cJSON_AddArrayToObject(o, "partition_spec");
    for (int i = 0; i < s->spec_rank; i++) {
        cJSON_AddItemToArray(spec, s->spec[i] != NULL ? cJSON_CreateString(s->spec[i])
                                                      : cJSON_CreateNull());
    }
    return o;
}

typedef struct {
    uint64_t stored;
    uint64_t nbytes;
    size_t arrays;
} totals;

/* The axis `unroll` would slice this leaf on, with MaxText's defaults (param_scan_axis 1,
 * `layers` mapped to the mesh axis `stage`), for leaves inside a scanned layer group; -1
 * for the others. A run's config may say otherwise (--dry-run shows the real plan). */
static int default_scan_axis(const ur_orbax_leaf *l)
{
    static const char *const stage[] = {"stage"};
    static const ur_axis_rule rules[] = {{"layers", stage, 1}};
    static const char *const groups[] = {"layers", "dense_layers", "moe_layers", "scanned_blocks"};
    ur_settings s;
    ur_plan_leaf p;
    const char *spec[UR_MAX_RANK] = {NULL};
    int in_group = 0;

    for (size_t k = 0; k < l->depth && !in_group; k++) {
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
            if (strcmp(l->path[k].key, groups[g]) == 0) {
                in_group = 1;
            }
        }
    }
    if (!in_group || !l->has_array) {
        return -1;
    }
    memset(&s, 0, sizeof s);
    /* a training state's non-parameter variables are stacked on axis 0 (plan.c is_aux) */
    s.param_scan_axis = l->depth > 0 && strcmp(l->path[0].key, "nnx_aux") == 0 ? 0 : 1;
    s.axis_rules = rules;
    s.n_axis_rules = 1;
    memset(&p, 0, sizeof p);
    p.dtype = l->dtype;
    p.rank = (size_t)l->rank;
    p.shape = p.rank > 0 ? l->shape : NULL; /* l->shape has rank entries */
    p.has_spec = l->sharding.kind == UR_ORBAX_SHARDING_NAMED;
    for (int d = 0; d < l->sharding.spec_rank && d < l->rank && d < UR_MAX_RANK; d++) {
        spec[d] = l->sharding.spec[d];
    }
    p.spec = spec;
    return ur_plan_scan_axis(&p, &s);
}

/* Describe one leaf: as text on stdout, or as a JSON object appended to `list`. */
static int inspect_leaf(ur_orbax_ckpt *ck, const ur_orbax_leaf *l, int hash, cJSON *list,
                        totals *t, ur_err *err)
{
    ur_zarr_array *arr = NULL;
    const ur_zarr_info *info = NULL;
    uint64_t stored = 0;
    uint64_t digest = 0;
    int rc = UR_OK;
    if (l->has_array) {
        rc = ur_orbax_ckpt_open_array(ck, l, &arr, err);
        if (rc == UR_OK) {
            info = ur_zarr_array_info(arr);
            rc = ur_zarr_array_stored_bytes(arr, &stored, err);
        }
        if (rc == UR_OK && hash) {
            rc = hash_array(arr, &digest, err);
        }
        if (rc != UR_OK) {
            ur_err_wrap(err, "array '%s'", l->name);
            goto out;
        }
        t->stored += stored;
        t->nbytes += info->nbytes;
        t->arrays++;
    }
    if (list == NULL) {
        printf("%s  %s", l->name, l->value_type_name);
        if (info != NULL) {
            printf("  %s", ur_dtype_name(info->dtype));
            print_dims(stdout, info->shape, info->rank);
            fputs("  chunk ", stdout);
            print_dims(stdout, info->chunk_shape, info->rank);
            fputs(" x grid ", stdout);
            print_dims(stdout, info->grid, info->rank);
            printf("  %" PRIu64 " B stored  ", stored);
            print_spec(stdout, &l->sharding);
            if (default_scan_axis(l) >= 0) {
                printf("  layer axis %d", default_scan_axis(l));
            }
            if (hash) {
                printf("  fnv1a64:%016" PRIx64, digest);
            }
        } else if (l->string_value != NULL) {
            printf("  \"%s\"", l->string_value);
        }
        fputc('\n', stdout);
        goto out;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(list, o);
    cJSON_AddStringToObject(o, "name", l->name);
    cJSON *keys = cJSON_AddArrayToObject(o, "keys");
    cJSON *kt = cJSON_AddArrayToObject(o, "key_types");
    for (size_t k = 0; k < l->depth; k++) {
        cJSON_AddItemToArray(keys, cJSON_CreateString(l->path[k].key));
        cJSON_AddItemToArray(
            kt, cJSON_CreateString(l->path[k].type == UR_ORBAX_KEY_SEQUENCE ? "seq" : "dict"));
    }
    cJSON_AddStringToObject(o, "value_type", l->value_type_name);
    cJSON_AddBoolToObject(o, "skip_deserialize", l->skip_deserialize);
    if (l->write_shape_rank >= 0) {
        cJSON_AddItemToObject(o, "write_shape", dims_json(l->write_shape, l->write_shape_rank));
    }
    if (info != NULL) {
        cJSON_AddStringToObject(o, "dtype", ur_dtype_name(info->dtype));
        cJSON_AddItemToObject(o, "shape", dims_json(info->shape, info->rank));
        cJSON_AddItemToObject(o, "chunk_shape", dims_json(info->chunk_shape, info->rank));
        cJSON_AddItemToObject(o, "grid", dims_json(info->grid, info->rank));
        cJSON_AddNumberToObject(o, "stored_bytes", (double)stored);
        cJSON_AddNumberToObject(o, "nbytes", (double)info->nbytes);
        if (default_scan_axis(l) >= 0) {
            cJSON_AddNumberToObject(o, "scan_axis", default_scan_axis(l));
        } else {
            cJSON_AddNullToObject(o, "scan_axis");
        }
        if (hash) {
            char hex[32];
            snprintf(hex, sizeof hex, "%016" PRIx64, digest);
            cJSON_AddStringToObject(o, "fnv1a64", hex);
        }
    }
    if (l->string_value != NULL) {
        cJSON_AddStringToObject(o, "string_value", l->string_value);
    }
    cJSON_AddItemToObject(o, "sharding", sharding_json(&l->sharding));
out:
    ur_zarr_array_close(arr);
    return rc;
}

int cli_cmd_inspect(int argc, char **argv)
{
    int json = 0;
    int hash = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            printf("usage: unroll inspect [--json] [--hash] <checkpoint>\n"
                   "\n"
                   "Show a checkpoint's tree: every leaf with its dtype, shape, chunking and\n"
                   "layer axis.\n"
                   "\n"
                   "options:\n"
                   "  --json   the tree as JSON\n"
                   "  --hash   a hash of every leaf's decoded bytes\n");
            return CLI_EXIT_OK;
        }
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--hash") == 0) {
            hash = 1;
        } else if (argv[i][0] == '-' || path != NULL) {
            return cli_usage_error("usage: unroll inspect [--json] [--hash] <checkpoint>");
        } else {
            path = argv[i];
        }
    }
    if (path == NULL) {
        return cli_usage_error("usage: unroll inspect [--json] [--hash] <checkpoint>");
    }
    int status = cli_multi_show_status(path); /* a multi-process run still being written */
    if (status >= 0) {
        return status;
    }
    ur_err err;
    ur_err_clear(&err);
    ur_orbax_ckpt *ck = NULL;
    int rc = ur_orbax_ckpt_open(&ck, path, 0, &err);
    if (rc < 0) {
        return cli_fail(&err);
    }
    cJSON *root = NULL;
    cJSON *list = NULL;
    if (json) {
        root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "item_dir", ur_orbax_ckpt_item_dir(ck));
        const char *step = ur_orbax_ckpt_step_dir(ck);
        cJSON_AddItemToObject(root, "step_dir",
                              step ? cJSON_CreateString(step) : cJSON_CreateNull());
        cJSON_AddBoolToObject(root, "use_ocdbt", ur_orbax_ckpt_use_ocdbt(ck));
        cJSON_AddBoolToObject(root, "use_zarr3", ur_orbax_ckpt_use_zarr3(ck));
        cJSON_AddBoolToObject(root, "has_sharding_file", ur_orbax_ckpt_has_sharding_file(ck));
        cJSON_AddBoolToObject(root, "has_metadata_file", ur_orbax_ckpt_has_metadata_file(ck));
        const char *cm = ur_orbax_ckpt_custom_metadata(ck);
        cJSON_AddItemToObject(root, "custom_metadata", cm ? cJSON_Parse(cm) : cJSON_CreateNull());
        list = cJSON_AddArrayToObject(root, "leaves");
    } else {
        printf("%s  (%s, zarr%d)\n", ur_orbax_ckpt_item_dir(ck),
               ur_orbax_ckpt_use_ocdbt(ck) ? "ocdbt" : "files",
               ur_orbax_ckpt_use_zarr3(ck) ? 3 : 2);
    }
    totals t = {0, 0, 0};
    size_t n = ur_orbax_ckpt_leaf_count(ck);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = inspect_leaf(ck, ur_orbax_ckpt_leaf(ck, i), hash, list, &t, &err);
    }
    if (rc == UR_OK && json) {
        cJSON *tot = cJSON_AddObjectToObject(root, "total");
        cJSON_AddNumberToObject(tot, "leaves", (double)n);
        cJSON_AddNumberToObject(tot, "arrays", (double)t.arrays);
        cJSON_AddNumberToObject(tot, "stored_bytes", (double)t.stored);
        cJSON_AddNumberToObject(tot, "nbytes", (double)t.nbytes);
        char *text = cJSON_Print(root);
        if (text == NULL) {
            rc = ur_err_oom(&err);
        } else {
            puts(text);
            cJSON_free(text);
        }
    } else if (rc == UR_OK) {
        printf("total: %zu leaves, %zu arrays, %" PRIu64 " B stored, %" PRIu64 " B decoded\n", n,
               t.arrays, t.stored, t.nbytes);
    }
    cJSON_Delete(root);
    ur_orbax_ckpt_close(ck);
    if (rc < 0) {
        fflush(stdout);
        return cli_fail(&err);
    }
    return CLI_EXIT_OK;
}
