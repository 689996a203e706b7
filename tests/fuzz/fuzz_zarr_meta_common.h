/* Shared by fuzz_zarr_v3_meta.c and fuzz_zarr_v2_meta.c: checks on a parsed ur_zarr_meta. */
#ifndef UNROLL_FUZZ_ZARR_META_COMMON_H
#define UNROLL_FUZZ_ZARR_META_COMMON_H

#include "fuzz_common.h"

#include "zarr/zarr_impl.h"

typedef int (*fz_zarr_parse_fn)(ur_zarr_meta *out, const char *json, size_t len, const char *name,
                                ur_err *err);

/* Invariants of a parsed meta, then: emit, parse the emitted text again (same version), emit
 * again: the two texts are equal (emit is a fixed point). */
static inline void fz_zarr_meta_check(const ur_zarr_meta *m, fz_zarr_parse_fn parse)
{
    ur_buf a, b;
    ur_zarr_meta m2;
    ur_err err;
    uint64_t idx[UR_MAX_RANK] = {0};
    char key[256];

    fz_check(m->rank >= 0 && m->rank <= UR_MAX_RANK);
    fz_check(m->itemsize > 0 && m->itemsize <= 16);
    for (int i = 0; i < m->rank; i++) {
        fz_check(m->chunk_shape[i] > 0);
        if (m->sharded) {
            fz_check(m->inner_shape[i] > 0 && m->chunk_shape[i] % m->inner_shape[i] == 0);
        }
    }
    fz_check(ur_zarr_chunk_grid__key(m, idx, key, sizeof key, &err) == UR_OK);
    fz_check(strlen(key) < sizeof key);
    if (m->sharded) {
        size_t isize;
        if (ur_zarr_codec_sharding__index_size(m, &isize, &err) < 0) {
            fz_check_err(err.code, &err);
        }
    }
    ur_buf_init(&a, 0);
    ur_buf_init(&b, 0);
    if (ur_zarr_meta__emit(m, &a, &err) == UR_OK) {
        memset(&m2, 0, sizeof m2);
        fz_check(parse(&m2, (const char *)a.data, a.len, "emitted", &err) == UR_OK);
        fz_check(ur_zarr_meta__emit(&m2, &b, &err) == UR_OK);
        fz_check(a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
    } else {
        fz_check_err(err.code, &err);
    }
    ur_buf_dispose(&a);
    ur_buf_dispose(&b);
}

static inline int fz_zarr_meta_run(const uint8_t *data, size_t size, fz_zarr_parse_fn parse)
{
    ur_zarr_meta m;
    ur_err err;
    char *text = fz_text(data, size);
    int rc;

    if (text == NULL) {
        return 0;
    }
    memset(&m, 0, sizeof m);
    ur_err_clear(&err);
    rc = parse(&m, text, size, "fuzz", &err);
    fz_check_err(rc, &err);
    if (rc == UR_OK) {
        fz_zarr_meta_check(&m, parse);
    }
    free(text);
    return 0;
}

#endif
