/* Test-only driver of the Orbax writer, used by tests/interop/test_orbax.py:
 *
 *   orbax_tool write <step_dir> <use_ocdbt 0|1> <use_zarr3 0|1>
 *
 * writes a checkpoint holding arrays of every dtype, ranks 0-6, odd shapes and edge chunks,
 * a `step` scalar, an empty dict and a list, then prints a JSON object mapping each array's
 * param name to {dtype, shape, fnv1a64 of its C-order little-endian bytes} on stdout. */
#include "unroll/alloc.h"
#include "unroll/orbax.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Deterministic element bytes; bools are 0/1, floats avoid NaN patterns so that any
 * canonicalisation on the Python side cannot change them. */
static void fill(uint8_t *p, size_t n_elems, ur_dtype dt, uint32_t seed)
{
    size_t item = ur_dtype_size(dt);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n_elems; i++) {
        for (size_t b = 0; b < item; b++) {
            x = x * 1103515245u + 12345u;
            p[i * item + b] = (uint8_t)(x >> 16);
        }
        if (dt == UR_DT_BOOL) {
            p[i] &= 1;
        } else if (ur_dtype_is_float(dt) || dt == UR_DT_COMPLEX64 || dt == UR_DT_COMPLEX128) {
            /* Clear the bit below the sign in the most significant byte of each float part:
             * keeps the exponent away from all-ones (no NaN/Inf). */
            size_t part = (dt == UR_DT_COMPLEX64) ? 4 : (dt == UR_DT_COMPLEX128) ? 8 : item;
            for (size_t o = part - 1; o < item; o += part) {
                p[i * item + o] &= 0xbf;
            }
        }
    }
}

/* Copy the chunk at grid index idx out of the dense array (zero padding past the edge). */
static void extract_chunk(uint8_t *dst, const uint8_t *src, int rank, const uint64_t *shape,
                          const uint64_t *chunk, const uint64_t *idx, size_t item)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++) {
        n *= (size_t)chunk[i];
    }
    memset(dst, 0, n * item);
    uint64_t pos[8] = {0};
    for (size_t e = 0; e < n; e++) {
        /* pos = position within chunk of element e (C order) */
        size_t rem = e;
        for (int i = rank - 1; i >= 0; i--) {
            pos[i] = rem % chunk[i];
            rem /= chunk[i];
        }
        size_t off = 0;
        int inside = 1;
        for (int i = 0; i < rank; i++) {
            uint64_t g = idx[i] * chunk[i] + pos[i];
            if (g >= shape[i]) {
                inside = 0;
                break;
            }
            off = off * (size_t)shape[i] + (size_t)g;
        }
        if (inside) {
            memcpy(dst + e * item, src + off * item, item);
        }
    }
}

typedef struct {
    const char *name;
    ur_dtype dt;
    int rank;
    uint64_t shape[6];
    uint64_t chunk[6];
    const char *spec0; /* partition spec of axis 0, or NULL */
} case_t;

static const case_t cases[] = {
    {"bool", UR_DT_BOOL, 1, {7}, {3}, NULL},
    {"int8", UR_DT_INT8, 2, {5, 3}, {2, 3}, NULL},
    {"int16", UR_DT_INT16, 1, {9}, {9}, NULL},
    {"int32", UR_DT_INT32, 3, {3, 4, 5}, {2, 3, 4}, NULL},
    {"int64", UR_DT_INT64, 1, {11}, {4}, NULL},
    {"uint8", UR_DT_UINT8, 2, {4, 4}, {4, 4}, NULL},
    {"uint16", UR_DT_UINT16, 1, {13}, {5}, NULL},
    {"uint32", UR_DT_UINT32, 2, {3, 7}, {3, 2}, NULL},
    {"uint64", UR_DT_UINT64, 1, {2}, {1}, NULL},
    {"float16", UR_DT_FLOAT16, 2, {6, 5}, {4, 4}, NULL},
    {"bfloat16", UR_DT_BFLOAT16, 2, {16, 5}, {2, 5}, "x"},
    {"float32", UR_DT_FLOAT32, 4, {2, 3, 1, 5}, {1, 2, 1, 3}, NULL},
    {"float64", UR_DT_FLOAT64, 1, {17}, {6}, NULL},
    {"complex64", UR_DT_COMPLEX64, 1, {5}, {2}, NULL},
    {"complex128", UR_DT_COMPLEX128, 2, {2, 3}, {2, 2}, NULL},
    {"float8_e4m3fn", UR_DT_FLOAT8_E4M3FN, 1, {10}, {3}, NULL},
    {"float8_e5m2", UR_DT_FLOAT8_E5M2, 1, {10}, {4}, NULL},
    {"rank0", UR_DT_FLOAT32, 0, {0}, {0}, NULL},
    {"rank5", UR_DT_INT32, 5, {2, 1, 3, 2, 3}, {1, 1, 2, 2, 2}, NULL},
    {"rank6", UR_DT_UINT8, 6, {2, 3, 1, 2, 3, 2}, {2, 2, 1, 1, 2, 2}, NULL},
    {"empty_dim", UR_DT_FLOAT32, 2, {0, 3}, {1, 3}, NULL},
};

static int write_array(ur_orbax_writer *w, const case_t *c, FILE *manifest, int first, ur_err *err)
{
    ur_orbax_key path[3] = {{"params", UR_ORBAX_KEY_DICT},
                            {"arrays", UR_ORBAX_KEY_DICT},
                            {c->name, UR_ORBAX_KEY_DICT}};
    const char *spec[6] = {c->spec0, NULL, NULL, NULL, NULL, NULL};
    size_t item = ur_dtype_size(c->dt);
    size_t n = 1;
    size_t cn = 1;
    uint64_t grid[6];
    size_t ngrid = 1;
    for (int i = 0; i < c->rank; i++) {
        n *= (size_t)c->shape[i];
        cn *= (size_t)c->chunk[i];
        grid[i] = (c->shape[i] + c->chunk[i] - 1) / c->chunk[i];
        ngrid *= (size_t)grid[i];
    }
    uint8_t *data = ur_malloc(n * item + 1);
    uint8_t *chunk = ur_malloc(cn * item + 1);
    ur_zarr_array *arr = NULL;
    int rc = data && chunk ? UR_OK : ur_err_oom(err);
    if (rc == UR_OK) {
        fill(data, n, c->dt, (uint32_t)c->dt * 7u + (uint32_t)c->rank);
        rc = ur_orbax_writer_add_array(w, path, 3, c->dt, c->rank, c->shape, c->chunk, spec, &arr,
                                       err);
    }
    for (size_t g = 0; rc == UR_OK && g < ngrid; g++) {
        uint64_t idx[6] = {0};
        size_t rem = g;
        for (int i = c->rank - 1; i >= 0; i--) {
            idx[i] = rem % grid[i];
            rem /= grid[i];
        }
        extract_chunk(chunk, data, c->rank, c->shape, c->chunk, idx, item);
        rc = ur_zarr_array_write_chunk(arr, idx, chunk, err);
    }
    if (rc == UR_OK) {
        fprintf(manifest, "%s\"params.arrays.%s\": {\"dtype\": \"%s\", \"shape\": [",
                first ? "" : ", ", c->name, ur_dtype_name(c->dt));
        for (int i = 0; i < c->rank; i++) {
            fprintf(manifest, i ? ", %" PRIu64 : "%" PRIu64, c->shape[i]);
        }
        fprintf(manifest, "], \"fnv1a64\": \"%016" PRIx64 "\"}", fnv1a(data, n * item));
    }
    ur_free(data);
    ur_free(chunk);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 5 || strcmp(argv[1], "write") != 0) {
        fprintf(stderr, "usage: orbax_tool write <step_dir> <use_ocdbt 0|1> <use_zarr3 0|1>\n");
        return 2;
    }
    ur_err err;
    ur_err_clear(&err);
    ur_orbax_write_opts opts;
    ur_orbax_write_opts_init(&opts);
    opts.use_ocdbt = strcmp(argv[3], "1") == 0;
    opts.use_zarr3 = strcmp(argv[4], "1") == 0;
    ur_orbax_writer *w = NULL;
    int rc = ur_orbax_writer_create(&w, argv[2], &opts, &err);
    if (rc < 0) {
        goto fail;
    }
    printf("{");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rc = write_array(w, &cases[i], stdout, i == 0, &err);
        if (rc < 0) {
            goto fail;
        }
    }
    printf("}\n");
    int64_t step = 0;
    ur_orbax_key k_step[1] = {{"step", UR_ORBAX_KEY_DICT}};
    ur_orbax_key k_opt[1] = {{"opt_state", UR_ORBAX_KEY_DICT}};
    ur_orbax_key k_l0[3] = {{"layers", UR_ORBAX_KEY_DICT},
                            {"0", UR_ORBAX_KEY_SEQUENCE},
                            {"w", UR_ORBAX_KEY_DICT}};
    ur_orbax_key k_l1[2] = {{"layers", UR_ORBAX_KEY_DICT}, {"1", UR_ORBAX_KEY_SEQUENCE}};
    rc = ur_orbax_writer_add_scalar(w, k_step, 1, UR_DT_INT64, &step, &err);
    if (rc == UR_OK) {
        rc = ur_orbax_writer_add_empty(w, k_opt, 1, UR_ORBAX_VALUE_EMPTY_DICT, &err);
    }
    if (rc == UR_OK) {
        double v = 2.5;
        rc = ur_orbax_writer_add_scalar(w, k_l0, 3, UR_DT_FLOAT64, &v, &err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_writer_add_empty(w, k_l1, 2, UR_ORBAX_VALUE_NONE, &err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_writer_set_custom_metadata(w, "{\"writer\": \"unroll\"}", &err);
    }
    if (rc < 0) {
        goto fail;
    }
    rc = ur_orbax_writer_commit(w, &err);
    w = NULL;
    if (rc < 0) {
        goto fail;
    }
    return 0;
fail:
    ur_orbax_writer_abort(w);
    {
        char line[1200];
        fprintf(stderr, "orbax_tool: %s\n", ur_err_format(&err, line, sizeof line));
    }
    return 1;
}
