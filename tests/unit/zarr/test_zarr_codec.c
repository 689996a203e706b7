/* zarr_codec*: chain round trips for every codec and dtype, corruption, the shard index,
 * and golden decodes of real Orbax chunk values (tests/data/zarr/README.md). */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "zarr/zarr_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *load(const char *rel, size_t *n)
{
    char path[512];
    ur_buf b;
    snprintf(path, sizeof path, "%s/zarr/%s", UR_TEST_DATA_DIR, rel);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, path, 1 << 20, NULL), UR_OK);
    *n = b.len;
    return b.data;
}

/* Chain configurations: transpose?, big endian?, b2b list. */
typedef struct cfg {
    int transpose;
    int big;
    int n;
    ur_zarr_b2b_kind k[3];
} cfg;

static const cfg cfgs[] = {
    {0, 0, 0, {0}},
    {0, 0, 1, {UR_ZARR_B2B_ZSTD}},
    {0, 1, 1, {UR_ZARR_B2B_GZIP}},
    {0, 0, 1, {UR_ZARR_B2B_ZLIB}},
    {0, 0, 1, {UR_ZARR_B2B_CRC32C}},
    {1, 0, 2, {UR_ZARR_B2B_ZSTD, UR_ZARR_B2B_CRC32C}},
    {1, 1, 3, {UR_ZARR_B2B_GZIP, UR_ZARR_B2B_ZSTD, UR_ZARR_B2B_CRC32C}},
};

static void make_chain(ur_zarr_chain *c, const cfg *f, int rank, ur_dtype dt)
{
    memset(c, 0, sizeof *c);
    c->big_endian = f->big;
    c->is_complex = dt == UR_DT_COMPLEX64 || dt == UR_DT_COMPLEX128;
    if (f->transpose) {
        c->has_transpose = 1;
        /* rotate axes: (1, 2, ..., 0) */
        for (int d = 0; d < rank; d++) {
            c->perm[d] = (d + 1) % rank;
        }
    }
    c->n_b2b = f->n;
    for (int i = 0; i < f->n; i++) {
        c->b2b[i].kind = f->k[i];
        c->b2b[i].level = f->k[i] == UR_ZARR_B2B_ZSTD ? 3 : 5;
        c->b2b[i].checksum = i == 0;
    }
}

static void test_zarr_codec__round_trip_every_codec_and_dtype(void **state)
{
    const uint64_t shape[3] = {3, 5, 2};
    (void)state;
    srand(7);
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        for (int dt = 1; dt < UR_DT_COUNT_; dt++) {
            size_t isz = ur_dtype_size((ur_dtype)dt), n = 30 * isz;
            uint8_t *src = ur_malloc(n), *dst = ur_malloc(n);
            ur_zarr_chain c;
            ur_buf enc;
            for (size_t i = 0; i < n; i++) {
                src[i] = (uint8_t)(i % 7 == 0 ? (size_t)rand() : i / 5);
            }
            make_chain(&c, &cfgs[ci], 3, (ur_dtype)dt);
            ur_buf_init(&enc, 0);
            assert_int_equal(ur_zarr_codec__encode(&c, 3, shape, isz, src, n, &enc, NULL), UR_OK);
            memset(dst, 0x5a, n);
            assert_int_equal(
                ur_zarr_codec__decode(&c, 3, shape, isz, enc.data, enc.len, dst, n, NULL), UR_OK);
            if (memcmp(src, dst, n) != 0) {
                fail_msg("config %zu dtype %s: round trip differs", ci,
                         ur_dtype_name((ur_dtype)dt));
            }
            if (cfgs[ci].n == 0 && !cfgs[ci].transpose && !cfgs[ci].big) {
                assert_memory_equal(enc.data, src, n); /* plain bytes: stored as is */
            }
            ur_buf_dispose(&enc);
            ur_free(src);
            ur_free(dst);
        }
    }
}

static void test_zarr_codec__big_endian_and_transpose_layout(void **state)
{
    /* int16 [[1, 2, 3], [4, 5, 6]] transposed (order [1, 0]) big-endian: 1 4 2 5 3 6 */
    const uint64_t shape[2] = {2, 3};
    const uint8_t src[12] = {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0};
    const uint8_t want[12] = {0, 1, 0, 4, 0, 2, 0, 5, 0, 3, 0, 6};
    ur_zarr_chain c;
    ur_buf enc;
    (void)state;
    memset(&c, 0, sizeof c);
    c.has_transpose = 1;
    c.perm[0] = 1;
    c.perm[1] = 0;
    c.big_endian = 1;
    ur_buf_init(&enc, 0);
    assert_int_equal(ur_zarr_codec__encode(&c, 2, shape, 2, src, 12, &enc, NULL), UR_OK);
    assert_int_equal(enc.len, 12);
    assert_memory_equal(enc.data, want, 12);
    ur_buf_dispose(&enc);
    /* complex64 big-endian swaps each 4-byte half */
    uint8_t cx[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ur_zarr_codec_bytes__swap(cx, 8, 8, 1);
    assert_memory_equal(cx, "\x04\x03\x02\x01\x08\x07\x06\x05", 8);
}

static void test_zarr_codec__wrong_size_and_damage_are_corrupt(void **state)
{
    const uint64_t shape[1] = {64};
    uint8_t src[256], dst[256];
    ur_err err;
    (void)state;
    for (size_t i = 0; i < sizeof src; i++) {
        src[i] = (uint8_t)(i * 7);
    }
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        ur_zarr_chain c;
        ur_buf enc;
        make_chain(&c, &cfgs[ci], 1, UR_DT_INT32);
        ur_buf_init(&enc, 0);
        assert_int_equal(ur_zarr_codec__encode(&c, 1, shape, 4, src, 256, &enc, NULL), UR_OK);
        /* The metadata says 63 elements: the stored chunk is too large. */
        assert_int_equal(ur_zarr_codec__decode(&c, 1, shape, 4, enc.data, enc.len, dst, 252, &err),
                         UR_ECORRUPT);
        /* Every truncation fails (none can decode to exactly 256 bytes). */
        for (size_t cut = 0; cut < enc.len; cut++) {
            int rc = ur_zarr_codec__decode(&c, 1, shape, 4, enc.data, cut, dst, 256, &err);
            if (rc != UR_ECORRUPT) {
                fail_msg("config %zu cut %zu: rc %d", ci, cut, rc);
            }
        }
        /* Flipped bytes: no crash; with a crc32c last, always detected. */
        for (size_t i = 0; i < enc.len; i++) {
            enc.data[i] ^= 0x40;
            int rc = ur_zarr_codec__decode(&c, 1, shape, 4, enc.data, enc.len, dst, 256, &err);
            assert_true(rc == UR_OK || rc == UR_ECORRUPT);
            if (c.n_b2b > 0 && c.b2b[c.n_b2b - 1].kind == UR_ZARR_B2B_CRC32C) {
                assert_int_equal(rc, UR_ECORRUPT);
            }
            enc.data[i] ^= 0x40;
        }
        ur_buf_dispose(&enc);
    }
}

static void orbax_meta(ur_zarr_meta *m, uint64_t shard, uint64_t inner, int at_start)
{
    memset(m, 0, sizeof *m);
    m->zarr_format = 3;
    m->dtype = UR_DT_INT32;
    m->rank = 1;
    m->shape[0] = shard;
    m->chunk_shape[0] = shard;
    m->inner_shape[0] = inner;
    m->sharded = 1;
    m->sep = '/';
    m->codecs.n_b2b = 1;
    m->codecs.b2b[0].kind = UR_ZARR_B2B_ZSTD;
    m->codecs.b2b[0].level = 3;
    m->index.n_b2b = 1;
    m->index.b2b[0].kind = UR_ZARR_B2B_CRC32C;
    m->index_at_start = at_start;
    assert_int_equal(ur_zarr_meta__validate(m, NULL), UR_OK);
}

/* The real v1 shard a/c/0: zstd frame (41 bytes), index (0, 41), crc32c 8e 86 77 44. */
static void test_zarr_codec__golden_orbax_shard(void **state)
{
    size_t n;
    uint8_t *v = load("orbax_v1/a/c/0", &n);
    ur_zarr_meta m;
    uint64_t e[2];
    int32_t out[8];
    size_t isize;
    (void)state;
    orbax_meta(&m, 8, 8, 0);
    assert_int_equal(n, 61);
    assert_int_equal(ur_zarr_codec_sharding__index_size(&m, &isize, NULL), UR_OK);
    assert_int_equal(isize, 20);
    assert_int_equal(ur_zarr_codec_sharding__decode_index(&m, v + n - 20, 20, n, e, NULL), UR_OK);
    assert_int_equal(e[0], 0);
    assert_int_equal(e[1], 41);
    assert_int_equal(
        ur_zarr_codec__decode(&m.codecs, 1, m.inner_shape, 4, v, 41, (uint8_t *)out, 32, NULL),
        UR_OK);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(out[i], i);
    }
    /* Re-encoding gives the very same shard bytes (same zstd level and library). */
    ur_buf inner, shard;
    ur_buf_init(&inner, 0);
    ur_buf_init(&shard, 0);
    assert_int_equal(
        ur_zarr_codec__encode(&m.codecs, 1, m.inner_shape, 4, (uint8_t *)out, 32, &inner, NULL),
        UR_OK);
    assert_int_equal(ur_zarr_codec_sharding__encode(&m, &inner, 1, &shard, NULL), UR_OK);
    assert_int_equal(shard.len, n);
    assert_memory_equal(shard.data + 41, v + 41, 20);
    ur_buf_dispose(&inner);
    ur_buf_dispose(&shard);
    ur_free(v);
}

/* zarr2 chunk a/0 of the real v0 checkpoint: a zstd frame of int32 0..7. */
static void test_zarr_codec__golden_orbax_zarr2_chunk(void **state)
{
    size_t n;
    uint8_t *v = load("orbax_v0/a/0", &n);
    ur_zarr_chain c;
    const uint64_t shape[1] = {8};
    int32_t out[8];
    ur_err err;
    (void)state;
    memset(&c, 0, sizeof c);
    c.n_b2b = 1;
    c.b2b[0].kind = UR_ZARR_B2B_ZSTD;
    assert_int_equal(ur_zarr_codec__decode(&c, 1, shape, 4, v, n, (uint8_t *)out, 32, NULL),
                     UR_OK);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(out[i], i);
    }
    /* Expecting 7 elements: the decoded size must match exactly. */
    assert_int_equal(ur_zarr_codec__decode(&c, 1, shape, 4, v, n, (uint8_t *)out, 28, &err),
                     UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "larger than 28"));
    ur_free(v);
}

static void test_zarr_codec__shard_index_absent_start_and_bounds(void **state)
{
    ur_zarr_meta m;
    ur_buf chunks[4], shard;
    uint64_t e[8];
    ur_err err;
    (void)state;
    for (int at_start = 0; at_start < 2; at_start++) {
        orbax_meta(&m, 8, 2, at_start);
        for (int i = 0; i < 4; i++) {
            ur_buf_init(&chunks[i], 0);
            if (i != 2) {
                assert_int_equal(ur_buf_printf(&chunks[i], NULL, "chunk%d", i), UR_OK);
            }
        }
        ur_buf_init(&shard, 0);
        assert_int_equal(ur_zarr_codec_sharding__encode(&m, chunks, 4, &shard, NULL), UR_OK);
        assert_int_equal(shard.len, 3 * 6 + 4 * 16 + 4);
        const uint8_t *idx = at_start ? shard.data : shard.data + shard.len - 68;
        assert_int_equal(ur_zarr_codec_sharding__decode_index(&m, idx, 68, shard.len, e, NULL),
                         UR_OK);
        assert_int_equal(e[4], UR_ZARR_SHARD_ABSENT);
        assert_int_equal(e[5], UR_ZARR_SHARD_ABSENT);
        assert_int_equal(e[7], 6);
        assert_memory_equal(shard.data + e[6], "chunk3", 6);
        /* A shard shorter than its entries claim is corrupt. */
        assert_int_equal(ur_zarr_codec_sharding__decode_index(&m, idx, 68, shard.len - 1, e, &err),
                         at_start ? UR_ECORRUPT : UR_ECORRUPT);
        for (int i = 0; i < 4; i++) {
            ur_buf_dispose(&chunks[i]);
        }
        ur_buf_dispose(&shard);
    }
}

/* The codec table is the only dispatch: a kind it does not hold is unsupported in every
 * direction (before the table, any kind but zstd and crc32c was inflated as zlib). */
static void test_zarr_codec__unknown_kind_is_unsupported(void **state)
{
    static const uint8_t data[64] = {1, 2, 3};
    ur_zarr_chain c;
    uint64_t shape[1] = {64};
    uint8_t out[64];
    size_t fixed;
    ur_buf enc;
    ur_err err;
    (void)state;
    memset(&c, 0, sizeof c);
    c.n_b2b = 1;
    c.b2b[0].kind = (ur_zarr_b2b_kind)99;
    assert_null(ur_zarr_codec__b2b(c.b2b[0].kind));
    ur_buf_init(&enc, 0);
    ur_err_clear(&err);
    assert_int_equal(ur_zarr_codec__encode(&c, 1, shape, 1, data, sizeof data, &enc, &err),
                     UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "unsupported"));
    assert_int_equal(
        ur_zarr_codec__decode(&c, 1, shape, 1, data, sizeof data, out, sizeof out, &err),
        UR_EUNSUPPORTED);
    assert_int_equal(ur_zarr_codec__fixed_size(&c, 64, &fixed, &err), UR_EUNSUPPORTED);
    /* Behind a known codec too: the whole chain is checked before anything is decoded. */
    c.n_b2b = 2;
    c.b2b[1] = c.b2b[0];
    c.b2b[0].kind = UR_ZARR_B2B_CRC32C;
    assert_int_equal(
        ur_zarr_codec__decode(&c, 1, shape, 1, data, sizeof data, out, sizeof out, &err),
        UR_EUNSUPPORTED);
    ur_buf_dispose(&enc);
}

/* Each entry is found by its kind and its names, and only by them. */
static void test_zarr_codec__table_lookups(void **state)
{
    static const ur_zarr_b2b_kind kinds[] = {UR_ZARR_B2B_ZSTD, UR_ZARR_B2B_GZIP, UR_ZARR_B2B_ZLIB,
                                             UR_ZARR_B2B_CRC32C};
    (void)state;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const ur_zarr_b2b_codec *k = ur_zarr_codec__b2b(kinds[i]);
        assert_non_null(k);
        assert_int_equal(k->kind, kinds[i]);
        assert_non_null(k->encode);
        assert_true((k->trailer > 0) == (k->decode == NULL));
        assert_true((k->trailer > 0) == (k->strip != NULL));
        if (k->v3_name != NULL) {
            assert_ptr_equal(ur_zarr_codec__b2b_v3(k->v3_name), k);
        }
        if (k->v2_id != NULL) {
            assert_ptr_equal(ur_zarr_codec__b2b_v2(k->v2_id), k);
        }
    }
    assert_null(ur_zarr_codec__b2b_v3("zlib")); /* zarr2 only */
    assert_null(ur_zarr_codec__b2b_v2("crc32c"));
    assert_null(ur_zarr_codec__b2b_v3("blosc"));
    assert_null(ur_zarr_codec__b2b_v2("lz4"));
    assert_null(ur_zarr_codec__b2b_v3("ZSTD"));
}

static void test_zarr_codec__oom(void **state)
{
    const uint64_t shape[1] = {1000};
    uint8_t src[4000], dst[4000];
    (void)state;
    for (size_t i = 0; i < sizeof src; i++) {
        src[i] = (uint8_t)(i / 3);
    }
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        ur_zarr_chain c;
        make_chain(&c, &cfgs[ci], 1, UR_DT_INT32);
        for (long k = 0;; k++) {
            ur_buf enc;
            ur_buf_init(&enc, 0);
            ur_alloc_fail_after(k);
            int rc = ur_zarr_codec__encode(&c, 1, shape, 4, src, 4000, &enc, NULL);
            if (rc == UR_OK) {
                rc = ur_zarr_codec__decode(&c, 1, shape, 4, enc.data, enc.len, dst, 4000, NULL);
            }
            ur_alloc_fail_after(-1);
            ur_buf_dispose(&enc);
            if (rc == UR_OK) {
                assert_memory_equal(src, dst, 4000);
                break;
            }
            assert_int_equal(rc, UR_ENOMEM);
            assert_true(k < 1000);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zarr_codec__round_trip_every_codec_and_dtype),
        cmocka_unit_test(test_zarr_codec__big_endian_and_transpose_layout),
        cmocka_unit_test(test_zarr_codec__wrong_size_and_damage_are_corrupt),
        cmocka_unit_test(test_zarr_codec__golden_orbax_shard),
        cmocka_unit_test(test_zarr_codec__golden_orbax_zarr2_chunk),
        cmocka_unit_test(test_zarr_codec__shard_index_absent_start_and_bounds),
        cmocka_unit_test(test_zarr_codec__unknown_kind_is_unsupported),
        cmocka_unit_test(test_zarr_codec__table_lookups),
        cmocka_unit_test(test_zarr_codec__oom),
    };
    return cmocka_run_group_tests_name("zarr_codec", tests, NULL, NULL);
}
