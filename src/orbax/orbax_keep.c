/* What a checkpoint's leaf records keep of the documents they were parsed from, copied into
 * the checkpoint's arena with each distinct value held once: 100,000 leaves of one mesh and
 * a few shapes share one mesh, one partition spec and a few shape arrays, instead of each
 * holding its own copies (and the side files' parses, names and all, staying alive for
 * them). The maps' keys are the arena's copies, which never move. */
#include "orbax_impl.h"

#include <assert.h>
#include <string.h>

void ur_orbax__keep_init(ur_orbax_keep *k, ur_orbax_arena *arena)
{
    k->arena = arena;
    ur_strmap_init(&k->strings);
    ur_strmap_init(&k->blocks);
}

void ur_orbax__keep_dispose(ur_orbax_keep *k)
{
    ur_strmap_dispose(&k->strings);
    ur_strmap_dispose(&k->blocks);
}

/* The kept copy of p[0..n) (a NUL after it for a string), looked up in `map`. */
static const void *keep(ur_orbax_keep *k, ur_strmap *map, const void *p, size_t n, int str,
                        ur_err *err)
{
    size_t at;
    void *copy;
    if (ur_strmap_get(map, p, n, &at) == 1) {
        return (const void *)(uintptr_t)at;
    }
    copy = str ? (void *)ur_orbax__arena_strndup(k->arena, p, n)
               : ur_orbax__arena_alloc(k->arena, n);
    if (copy == NULL) {
        (void)ur_err_oom(err);
        return NULL;
    }
    if (!str) {
        memcpy(copy, p, n);
    }
    if (ur_strmap_put(map, copy, n, (size_t)(uintptr_t)copy, NULL, err) < 0) {
        return NULL;
    }
    return copy;
}

int ur_orbax__keep_str(ur_orbax_keep *k, const char **s, ur_err *err)
{
    if (*s == NULL) {
        return UR_OK;
    }
    *s = keep(k, &k->strings, *s, strlen(*s), 1, err);
    return *s != NULL ? UR_OK : UR_ENOMEM;
}

int ur_orbax__keep_block(ur_orbax_keep *k, const void **p, size_t n, ur_err *err)
{
    if (*p == NULL || n == 0) {
        *p = NULL;
        return UR_OK;
    }
    *p = keep(k, &k->blocks, *p, n, 0, err);
    return *p != NULL ? UR_OK : UR_ENOMEM;
}

int ur_orbax__keep_dims(ur_orbax_keep *k, const uint64_t **dims, int rank, ur_err *err)
{
    const void *p = *dims;
    int rc = ur_orbax__keep_block(k, &p, rank > 0 ? (size_t)rank * sizeof **dims : 0, err);
    *dims = p;
    return rc;
}

/* n strings (NULL entries allowed), then the array of kept pointers itself. */
static int keep_strs(ur_orbax_keep *k, const char *const **arr, int n, ur_err *err)
{
    const char *tmp[UR_MAX_RANK];
    const void *p = tmp;
    int rc = UR_OK;
    assert(n <= UR_MAX_RANK); /* the parsers refuse more */
    if (*arr == NULL || n <= 0) {
        *arr = NULL;
        return UR_OK;
    }
    for (int i = 0; i < n && rc == UR_OK; i++) {
        tmp[i] = (*arr)[i];
        rc = ur_orbax__keep_str(k, &tmp[i], err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax__keep_block(k, &p, (size_t)n * sizeof tmp[0], err);
    }
    if (rc == UR_OK) {
        *arr = p;
    }
    return rc;
}

int ur_orbax__keep_sharding(ur_orbax_keep *k, ur_orbax_sharding *s, ur_err *err)
{
    const void *shape = s->mesh_shape;
    int rc = ur_orbax__keep_str(k, &s->device_str, err);
    if (rc == UR_OK) {
        rc = ur_orbax__keep_block(
            k, &shape, s->mesh_rank > 0 ? (size_t)s->mesh_rank * sizeof(int64_t) : 0, err);
        s->mesh_shape = shape;
    }
    if (rc == UR_OK) {
        rc = keep_strs(k, &s->mesh_axis_names, s->mesh_rank, err);
    }
    if (rc == UR_OK) {
        rc = keep_strs(k, &s->mesh_axis_types, s->mesh_rank, err);
    }
    if (rc == UR_OK) {
        rc = keep_strs(k, &s->spec, s->spec_rank, err);
    }
    return rc;
}
