/* zarr_chunk_grid: chunk keys, box copy (against a naive reference) and box fill. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "zarr/zarr_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void key_is(int v2, char sep, int rank, const uint64_t *idx, const char *want)
{
    ur_zarr_meta m;
    char key[64];
    memset(&m, 0, sizeof m);
    m.v2_keys = v2;
    m.sep = sep;
    m.rank = rank;
    assert_int_equal(ur_zarr_chunk_grid__key(&m, idx, key, sizeof key, NULL), UR_OK);
    assert_string_equal(key, want);
}

static void test_zarr_chunk_grid__keys(void **state)
{
    const uint64_t idx[] = {0, 12, 3};
    ur_zarr_meta m;
    char small[4];
    ur_err err;
    (void)state;
    key_is(0, '/', 3, idx, "c/0/12/3");
    key_is(0, '.', 3, idx, "c.0.12.3");
    key_is(0, '/', 0, idx, "c");
    key_is(1, '.', 3, idx, "0.12.3");
    key_is(1, '/', 3, idx, "0/12/3");
    key_is(1, '.', 0, idx, "0");
    key_is(1, '.', 1, idx + 1, "12");
    memset(&m, 0, sizeof m);
    m.rank = 3;
    m.sep = '/';
    assert_int_equal(ur_zarr_chunk_grid__key(&m, idx, small, sizeof small, &err), UR_EINVAL);
}

static uint64_t lin(const uint64_t *shape, const uint64_t *pos, int rank)
{
    uint64_t o = 0;
    for (int d = 0; d < rank; d++) {
        o = o * shape[d] + pos[d];
    }
    return o;
}

static void test_zarr_chunk_grid__copy_box_matches_reference(void **state)
{
    unsigned seed = 12345;
    (void)state;
    srand(seed);
    for (int iter = 0; iter < 300; iter++) {
        int rank = 1 + rand() % 5;
        size_t isz = (size_t)1 << (rand() % 4);
        uint64_t ss[UR_MAX_RANK], ds[UR_MAX_RANK], s0[UR_MAX_RANK], d0[UR_MAX_RANK],
            cnt[UR_MAX_RANK], pos[UR_MAX_RANK];
        uint64_t sn = 1, dn = 1, cn = 1;
        for (int d = 0; d < rank; d++) {
            cnt[d] = 1 + (uint64_t)(rand() % 4);
            s0[d] = (uint64_t)(rand() % 3);
            d0[d] = (uint64_t)(rand() % 3);
            ss[d] = s0[d] + cnt[d] + (uint64_t)(rand() % 2);
            ds[d] = d0[d] + cnt[d] + (uint64_t)(rand() % 2);
            sn *= ss[d];
            dn *= ds[d];
            cn *= cnt[d];
        }
        uint8_t *src = ur_malloc(sn * isz), *dst = ur_malloc(dn * isz), *ref = ur_malloc(dn * isz);
        for (uint64_t i = 0; i < sn * isz; i++) {
            src[i] = (uint8_t)rand();
        }
        memset(dst, 0xaa, dn * isz);
        memset(ref, 0xaa, dn * isz);
        for (uint64_t k = 0; k < cn; k++) {
            uint64_t r = k, sp[UR_MAX_RANK], dp[UR_MAX_RANK];
            for (int d = rank - 1; d >= 0; d--) {
                pos[d] = r % cnt[d];
                r /= cnt[d];
                sp[d] = s0[d] + pos[d];
                dp[d] = d0[d] + pos[d];
            }
            memcpy(ref + lin(ds, dp, rank) * isz, src + lin(ss, sp, rank) * isz, isz);
        }
        ur_zarr_chunk_grid__copy_box(dst, ds, d0, src, ss, s0, cnt, rank, isz);
        if (memcmp(dst, ref, dn * isz) != 0) {
            fail_msg("copy_box mismatch, seed %u iteration %d", seed, iter);
        }
        ur_free(src);
        ur_free(dst);
        ur_free(ref);
    }
}

static void test_zarr_chunk_grid__fill_box(void **state)
{
    const uint64_t shape[] = {3, 4}, start[] = {1, 1}, count[] = {2, 2};
    const uint8_t fill[2] = {0x12, 0x34};
    uint8_t a[24];
    (void)state;
    memset(a, 0, sizeof a);
    ur_zarr_chunk_grid__fill_box(a, shape, start, count, 2, fill, 2);
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 4; c++) {
            int in = r >= 1 && c >= 1 && c < 3;
            const uint8_t *p = a + (r * 4 + c) * 2;
            assert_int_equal(p[0], in ? 0x12 : 0);
            assert_int_equal(p[1], in ? 0x34 : 0);
        }
    }
    uint8_t b[7 * 3];
    const uint8_t f3[3] = {1, 2, 3};
    ur_zarr_chunk_grid__fill(b, 7, f3, 3);
    for (int i = 0; i < 21; i++) {
        assert_int_equal(b[i], i % 3 + 1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zarr_chunk_grid__keys),
        cmocka_unit_test(test_zarr_chunk_grid__copy_box_matches_reference),
        cmocka_unit_test(test_zarr_chunk_grid__fill_box),
    };
    return cmocka_run_group_tests_name("zarr_chunk_grid", tests, NULL, NULL);
}
