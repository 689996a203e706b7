/* zarr_stream: a chunk read through ur_zarr_chunk_stream in pieces of every size is
 * exactly what ur_zarr_array_read_chunk gives, for every codec chain and dtype; damaged
 * data fails the same way (UR_ECORRUPT naming array and chunk key), at the latest on the
 * last byte; allocation failures, I/O faults, threads, and a 256 MiB chunk streamed in
 * bounded memory. */
#define ZSTD_STATIC_LINKING_ONLY
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/crc32c.h"
#include "unroll/kvstore.h"
#include "unroll/zarr.h"
#include "zarr/zarr_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <zstd.h>

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static ur_kvstore *mem(void)
{
    ur_kvstore *kv = NULL;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    return kv;
}

/* tmpl with "@T" replaced by dt and "@F" by a fill value of that dtype (the JSON templates
 * below). */
static void subst(char *out, size_t n, const char *tmpl, const char *dt)
{
    const char *fill = strncmp(dt, "complex", 7) == 0 ? "[3,-1]"
                       : strcmp(dt, "bool") == 0      ? "true"
                                                      : "3";
    size_t k = 0;
    for (const char *p = tmpl; *p; p++) {
        const char *put = NULL;
        if (p[0] == '@' && (p[1] == 'T' || p[1] == 'F')) {
            put = p[1] == 'T' ? dt : fill;
            p++;
        }
        size_t m = put ? strlen(put) : 1;
        assert_true(k + m < n);
        memcpy(out + k, put ? put : p, m);
        k += m;
    }
    out[k] = '\0';
}

/* Write metadata text under prefix and open the array. */
static ur_zarr_array *open_json(ur_kvstore *kv, const char *prefix, const char *json)
{
    char key[256];
    ur_zarr_array *a = NULL;
    ur_err err;
    int v3 = strstr(json, "\"zarr_format\":3") != NULL;
    snprintf(key, sizeof key, "%s/%s", prefix, v3 ? "zarr.json" : ".zarray");
    assert_int_equal(ur_kvstore_write(kv, key, json, strlen(json), NULL), UR_OK);
    if (ur_zarr_array_open(&a, kv, prefix, 0, &err) != UR_OK) {
        fail_msg("open %s: %s\n%s", prefix, err.msg, json);
    }
    return a;
}

/* Chunk contents: half random bytes, half runs (so compressors have work to do). */
static void make_chunk(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        p[i] = (i / 16) % 2 ? (uint8_t)(i / 64) : (uint8_t)rng_next(&s);
    }
}

static void grid_idx(const ur_zarr_info *in, uint64_t k, uint64_t *idx)
{
    for (int d = in->rank - 1; d >= 0; d--) {
        idx[d] = k % in->grid[d];
        k /= in->grid[d];
    }
}

/* Store every chunk of `a`, leaving out those with k % skip == skip - 1 (skip 0: none). For
 * sharded arrays build each shard from its inner chunks (absent ones left out). */
static void write_all(ur_kvstore *kv, ur_zarr_array *a, uint64_t skip)
{
    const ur_zarr_meta *m = ur_zarr_array__meta(a);
    const ur_zarr_info *in = ur_zarr_array_info(a);
    uint8_t *chunk = ur_malloc(in->chunk_bytes);
    uint64_t idx[UR_MAX_RANK];
    (void)kv;
    if (!m->sharded) {
        for (uint64_t k = 0; k < in->chunk_count; k++) {
            if (skip && k % skip == skip - 1) {
                continue;
            }
            grid_idx(in, k, idx);
            make_chunk(chunk, in->chunk_bytes, k);
            assert_int_equal(ur_zarr_array_write_chunk(a, idx, chunk, NULL), UR_OK);
        }
        ur_free(chunk);
        return;
    }
    uint64_t sgrid[UR_MAX_RANK], ratio[UR_MAX_RANK], nshards = 1;
    size_t count = (size_t)ur_zarr_codec_sharding__count(m);
    for (int d = 0; d < m->rank; d++) {
        sgrid[d] = (m->shape[d] + m->chunk_shape[d] - 1) / m->chunk_shape[d];
        ratio[d] = m->chunk_shape[d] / m->inner_shape[d];
        nshards *= sgrid[d];
    }
    ur_buf *bufs = ur_calloc(count, sizeof(ur_buf));
    for (uint64_t sk = 0; sk < nshards; sk++) {
        uint64_t sidx[UR_MAX_RANK], r = sk;
        ur_buf shard;
        for (int d = m->rank - 1; d >= 0; d--) {
            sidx[d] = r % sgrid[d];
            r /= sgrid[d];
        }
        for (size_t i = 0; i < count; i++) {
            uint64_t li = i, lin = 0;
            int inside = 1;
            for (int d = m->rank - 1; d >= 0; d--) {
                idx[d] = sidx[d] * ratio[d] + li % ratio[d];
                li /= ratio[d];
                inside &= idx[d] < in->grid[d];
            }
            for (int d = 0; d < m->rank; d++) {
                lin = lin * in->grid[d] + (idx[d] < in->grid[d] ? idx[d] : 0);
            }
            ur_buf_init(&bufs[i], 0);
            if (!inside || (skip && lin % skip == skip - 1)) {
                continue;
            }
            make_chunk(chunk, in->chunk_bytes, lin);
            assert_int_equal(ur_zarr_codec__encode(&m->codecs, m->rank, m->inner_shape,
                                                   m->itemsize, chunk, in->chunk_bytes, &bufs[i],
                                                   NULL),
                             UR_OK);
        }
        ur_buf_init(&shard, 0);
        assert_int_equal(ur_zarr_codec_sharding__encode(m, bufs, count, &shard, NULL), UR_OK);
        int any = 0;
        for (size_t i = 0; i < count; i++) {
            any |= bufs[i].data != NULL;
            ur_buf_dispose(&bufs[i]);
        }
        if (any) {
            assert_int_equal(ur_zarr_array_write_encoded(a, sidx, shard.data, shard.len, NULL),
                             UR_OK);
        }
        ur_buf_dispose(&shard);
    }
    ur_free(bufs);
    ur_free(chunk);
}

enum { PIECES_ONE, PIECES_PRIMES, PIECES_RANDOM, PIECES_WHOLE, PIECES_COUNT_ };

/* Stream chunk idx into dst (chunk_bytes) reading in the given pattern, with the stored data
 * read in pieces of `piece` bytes (0: default). Returns the first failing code. */
static int stream_chunk(ur_zarr_array *a, const uint64_t *idx, uint8_t *dst, int pattern,
                        size_t piece, uint64_t seed, int *incremental, ur_err *err)
{
    static const size_t primes[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 997};
    const ur_zarr_info *in = ur_zarr_array_info(a);
    ur_zarr_chunk_stream *s = NULL;
    size_t pos = 0, k = 0;
    int rc = ur_zarr_chunk_stream_open(&s, a, idx, err);
    if (rc < 0) {
        assert_null(s);
        return rc;
    }
    if (incremental) {
        *incremental = ur_zarr_chunk_stream_is_incremental(s);
    }
    if (piece) {
        ur_zarr_chunk_stream__set_piece_size(s, piece);
    }
    while (pos < in->chunk_bytes) {
        size_t left = in->chunk_bytes - pos, n;
        assert_int_equal(ur_zarr_chunk_stream_remaining(s), left);
        switch (pattern) {
        case PIECES_ONE:
            n = 1;
            break;
        case PIECES_PRIMES:
            n = primes[k++ % (sizeof primes / sizeof primes[0])];
            break;
        case PIECES_RANDOM:
            n = 1 + (size_t)(rng_next(&seed) % (left < 64 ? left : left / 2 + 1));
            break;
        default:
            n = left;
            break;
        }
        n = n < left ? n : left;
        rc = ur_zarr_chunk_stream_read(s, dst + pos, n, err);
        if (rc < 0) {
            /* The failure is sticky. */
            ur_err again;
            assert_int_equal(ur_zarr_chunk_stream_read(s, dst + pos, n, &again), rc);
            assert_string_equal(again.msg, err->msg);
            break;
        }
        pos += n;
    }
    if (rc == UR_OK) {
        assert_int_equal(ur_zarr_chunk_stream_remaining(s), 0);
        assert_int_equal(ur_zarr_chunk_stream_read(s, dst, 1, NULL), UR_EINVAL);
        assert_int_equal(ur_zarr_chunk_stream_read(s, dst, 0, NULL), UR_OK);
    }
    ur_zarr_chunk_stream_close(s);
    return rc;
}

/* Every chunk, every piece pattern and stored-piece size: the stream equals read_chunk. */
static void check_all_chunks(ur_zarr_array *a, int want_incremental, const char *what)
{
    static const size_t pieces[] = {0, 1, 3, 64, 4099};
    const ur_zarr_info *in = ur_zarr_array_info(a);
    uint8_t *ref = ur_malloc(in->chunk_bytes), *got = ur_malloc(in->chunk_bytes);
    uint64_t idx[UR_MAX_RANK];
    for (uint64_t k = 0; k < in->chunk_count; k++) {
        ur_err e1, e2;
        grid_idx(in, k, idx);
        int rc_ref = ur_zarr_array_read_chunk(a, idx, ref, &e1);
        for (int pat = 0; pat < PIECES_COUNT_; pat++) {
            for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
                int inc = -1;
                memset(got, 0xA5, in->chunk_bytes);
                int rc = stream_chunk(a, idx, got, pat, pieces[p], k * 31 + (uint64_t)pat, &inc,
                                      &e2);
                if (rc != rc_ref) {
                    fail_msg("%s chunk %llu pattern %d piece %zu: rc %d (%s), read_chunk %d (%s)",
                             what, (unsigned long long)k, pat, pieces[p], rc, rc ? e2.msg : "",
                             rc_ref, rc_ref ? e1.msg : "");
                }
                if (rc == UR_OK) {
                    assert_int_equal(inc, want_incremental);
                    if (memcmp(ref, got, in->chunk_bytes) != 0) {
                        fail_msg("%s chunk %llu pattern %d piece %zu: bytes differ", what,
                                 (unsigned long long)k, pat, pieces[p]);
                    }
                }
                if (pat == PIECES_ONE && p > 1) {
                    break; /* 1-byte reads are slow enough with two piece sizes */
                }
            }
        }
    }
    ur_free(ref);
    ur_free(got);
}

/* ---- equivalence with read_chunk ----------------------------------------------------------- */

static void test_zarr_stream__every_dtype_orbax_profiles(void **state)
{
    const uint64_t shape[3] = {5, 3, 7}, chunk[3] = {2, 3, 4};
    (void)state;
    for (int fmt = 2; fmt <= 3; fmt++) {
        for (int dt = 1; dt < UR_DT_COUNT_; dt++) {
            if (dt == UR_DT_UINT4 || dt == UR_DT_FLOAT8_E4M3) {
                continue; /* create refuses them (TensorStore lacks them) */
            }
            ur_kvstore *kv = mem();
            ur_zarr_array *a = NULL;
            ur_zarr_spec s;
            char what[64];
            memset(&s, 0, sizeof s);
            s.zarr_format = fmt;
            s.dtype = (ur_dtype)dt;
            s.rank = 3;
            memcpy(s.shape, shape, sizeof shape);
            memcpy(s.chunk_shape, chunk, sizeof chunk);
            assert_int_equal(ur_zarr_array_create(&a, kv, "p.q", &s, NULL), UR_OK);
            write_all(kv, a, 4);
            snprintf(what, sizeof what, "zarr%d %s", fmt, ur_dtype_name((ur_dtype)dt));
            check_all_chunks(a, 1, what);
            ur_zarr_array_close(a);
            ur_kvstore_close(kv);
        }
    }
}

typedef struct chain_case {
    const char *name;
    const char *json; /* @T: dtype, @F: fill value */
    const char *dtypes[4];
    int incremental;
} chain_case;

#define V3_HEAD                                                                                   \
    "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[5,7,3],\"data_type\":\"@T\","          \
    "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":@F,"
#define V3_GRID(c)                                                                                \
    "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":" c "}},"
#define LE "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}"
#define BE "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"big\"}}"
#define CRC "{\"name\":\"crc32c\"}"
#define ZSTD "{\"name\":\"zstd\",\"configuration\":{\"level\":3,\"checksum\":false}}"
#define ZSTDC "{\"name\":\"zstd\",\"configuration\":{\"level\":1,\"checksum\":true}}"
#define GZIP "{\"name\":\"gzip\",\"configuration\":{\"level\":5}}"
#define TRANSPOSE "{\"name\":\"transpose\",\"configuration\":{\"order\":[2,0,1]}}"
#define V3(codecs) V3_HEAD V3_GRID("[2,3,2]") "\"codecs\":[" codecs "]}"
#define SHARD(loc, inner, index)                                                                  \
    V3_HEAD V3_GRID("[4,6,3]") "\"codecs\":[{\"name\":\"sharding_indexed\",\"configuration\":{"   \
                               "\"chunk_shape\":[2,3,1],\"codecs\":[" inner                       \
                               "],\"index_codecs\":[" index "],\"index_location\":\"" loc         \
                               "\"}}]}"
#define V2F(dtype, comp, order, fill)                                                             \
    "{\"zarr_format\":2,\"shape\":[5,7,3],\"chunks\":[2,3,2],\"dtype\":\"" dtype "\","            \
    "\"compressor\":" comp ",\"fill_value\":" fill ",\"order\":\"" order "\",\"filters\":null}"
#define V2(dtype, comp, order) V2F(dtype, comp, order, "3")

static const chain_case chains[] = {
    {"v3 bytes", V3(LE), {"int16", "float32", "complex64", "bool"}, 1},
    {"v3 bytes crc", V3(LE "," CRC), {"int16", "float64", "uint8", NULL}, 1},
    {"v3 big", V3(BE), {"int16", "float32", "complex128", "bfloat16"}, 1},
    {"v3 big crc", V3(BE "," CRC), {"int64", "complex64", NULL, NULL}, 1},
    {"v3 zstd", V3(LE "," ZSTD), {"int32", "bfloat16", "int8", NULL}, 1},
    {"v3 zstd checksum crc", V3(BE "," ZSTDC "," CRC), {"float32", "complex64", NULL, NULL}, 1},
    {"v3 gzip", V3(LE "," GZIP), {"int16", "float64", NULL, NULL}, 1},
    {"v3 gzip crc", V3(BE "," GZIP "," CRC), {"uint32", NULL, NULL, NULL}, 1},
    {"v3 transpose", V3(TRANSPOSE "," LE "," ZSTD), {"int16", "float32", NULL, NULL}, 0},
    {"v3 zstd gzip", V3(LE "," ZSTD "," GZIP), {"int32", NULL, NULL, NULL}, 0},
    {"v3 crc zstd", V3(LE "," CRC "," ZSTD), {"int32", NULL, NULL, NULL}, 0},
    {"v3 shard end",
     SHARD("end", LE "," ZSTD, LE "," CRC),
     {"int32", "bfloat16", "bool", NULL},
     1},
    {"v3 shard start",
     SHARD("start", BE "," ZSTDC "," CRC, LE),
     {"int16", "complex64", NULL, NULL},
     1},
    {"v3 shard plain", SHARD("end", LE, BE "," CRC), {"float32", NULL, NULL, NULL}, 1},
    {"v3 shard gzip", SHARD("start", LE "," GZIP, LE "," CRC), {"uint16", NULL, NULL, NULL}, 1},
    {"v3 shard transpose",
     SHARD("end", TRANSPOSE "," BE "," GZIP, LE "," CRC),
     {"float32", NULL, NULL, NULL},
     0},
    {"v2 zstd", V2("<i2", "{\"id\":\"zstd\",\"level\":1}", "C"), {NULL}, 1},
    {"v2 zstd big", V2(">f8", "{\"id\":\"zstd\",\"level\":5}", "C"), {NULL}, 1},
    {"v2 none", V2("<f4", "null", "C"), {NULL}, 1},
    {"v2 none big complex", V2(">c8", "null", "C"), {NULL}, 1},
    {"v2 bool", V2F("|b1", "{\"id\":\"zstd\"}", "C", "true"), {NULL}, 1},
    {"v2 bfloat16", V2("bfloat16", "{\"id\":\"zstd\"}", "C"), {NULL}, 1},
    {"v2 zlib", V2(">i4", "{\"id\":\"zlib\",\"level\":4}", "C"), {NULL}, 1},
    {"v2 gzip", V2("<u8", "{\"id\":\"gzip\",\"level\":4}", "C"), {NULL}, 1},
    {"v2 order F", V2("<i4", "{\"id\":\"zstd\"}", "F"), {NULL}, 0},
};

static void test_zarr_stream__every_chain(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof chains / sizeof chains[0]; c++) {
        for (int t = 0; t < 4; t++) {
            const char *dt = chains[c].dtypes[t];
            if (dt == NULL && t > 0) {
                break;
            }
            char json[2048], what[128];
            subst(json, sizeof json, chains[c].json, dt ? dt : "");
            for (int fill_missing = 1; fill_missing >= 0; fill_missing--) {
                ur_kvstore *kv = mem();
                ur_zarr_array *a = open_json(kv, "layer.w", json);
                write_all(kv, a, 3);
                ur_zarr_array_set_fill_missing(a, fill_missing);
                snprintf(what, sizeof what, "%s %s fill_missing %d", chains[c].name, dt ? dt : "",
                         fill_missing);
                check_all_chunks(a, chains[c].incremental, what);
                ur_zarr_array_close(a);
                ur_kvstore_close(kv);
            }
        }
    }
}

static void test_zarr_stream__rank0_and_golden_fixtures(void **state)
{
    static const char *const dirs[] = {"orbax_v0", "orbax_v1"};
    ur_kvstore *kv = mem();
    ur_zarr_array *a = NULL;
    ur_zarr_spec s;
    int64_t v = -42;
    (void)state;
    for (int fmt = 2; fmt <= 3; fmt++) {
        memset(&s, 0, sizeof s);
        s.zarr_format = fmt;
        s.dtype = UR_DT_INT64;
        assert_int_equal(ur_zarr_array_create(&a, kv, fmt == 2 ? "s2" : "s3", &s, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_write_chunk(a, NULL, &v, NULL), UR_OK);
        check_all_chunks(a, 1, "rank 0");
        ur_zarr_array_close(a);
    }
    ur_kvstore_close(kv);
    /* Arrays written by TensorStore for Orbax (tests/data/zarr). */
    for (int i = 0; i < 2; i++) {
        char root[512];
        snprintf(root, sizeof root, "%s/zarr/%s", UR_TEST_DATA_DIR, dirs[i]);
        assert_int_equal(ur_kvstore_file_open(&kv, root, 0, NULL), UR_OK);
        assert_int_equal(ur_zarr_array_open(&a, kv, "a", 0, NULL), UR_OK);
        check_all_chunks(a, 1, dirs[i]);
        ur_zarr_array_close(a);
        assert_int_equal(ur_zarr_array_open(&a, kv, "b.c", 0, NULL), UR_OK);
        check_all_chunks(a, 1, dirs[i]);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
}

/* ---- damaged data ----------------------------------------------------------------------------
 */

/* Stream the one chunk (idx 0) of `a` in random pieces; expect `want`, with the error naming
 * the array and key. Also read_chunk must agree on the code. */
static void expect_stream(ur_zarr_array *a, int want, const char *key, const char *what)
{
    const ur_zarr_info *in = ur_zarr_array_info(a);
    uint64_t idx[UR_MAX_RANK] = {0};
    uint8_t *got = ur_malloc(in->chunk_bytes), *ref = ur_malloc(in->chunk_bytes);
    ur_err err;
    for (int pat = PIECES_PRIMES; pat < PIECES_COUNT_; pat++) {
        for (size_t piece = 1; piece < 20000; piece = piece * 7 + 2) {
            int rc = stream_chunk(a, idx, got, pat, piece, piece, NULL, &err);
            if (rc != want) {
                fail_msg("%s: stream rc %d (%s), want %d", what, rc, rc ? err.msg : "", want);
            }
            if (rc < 0) {
                if (strstr(err.msg, ur_zarr_array_prefix(a)) == NULL ||
                    strstr(err.msg, key) == NULL) {
                    fail_msg("%s: message '%s' does not name the array and '%s'", what, err.msg,
                             key);
                }
            }
        }
    }
    assert_int_equal(ur_zarr_array_read_chunk(a, idx, ref, &err), want);
    ur_free(got);
    ur_free(ref);
}

/* zarr3 unsharded, one chunk of 4096 int32, chain `codecs`. */
static ur_zarr_array *one_chunk_array(ur_kvstore *kv, const char *codecs)
{
    char json[1024];
    snprintf(
        json, sizeof json,
        "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[64,64],\"data_type\":\"int32\","
        "\"chunk_key_encoding\":{\"name\":\"default\"},\"fill_value\":0,"
        "\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[64,64]}},"
        "\"codecs\":[%s]}",
        codecs);
    return open_json(kv, "dmg.arr", json);
}

static void put(ur_kvstore *kv, const void *p, size_t n)
{
    assert_int_equal(ur_kvstore_write(kv, "dmg.arr/c/0/0", p, n, NULL), UR_OK);
}

static void append_crc(ur_buf *b)
{
    uint32_t c = ur_crc32c(0, b->data, b->len);
    assert_int_equal(ur_buf_put_u32le(b, c, NULL), UR_OK);
}

static void test_zarr_stream__truncated_trailing_wrong_size(void **state)
{
    static const char *const chains3[] = {LE "," ZSTD, LE "," ZSTDC,        LE "," GZIP,
                                          LE,          LE "," ZSTD "," CRC, LE "," GZIP "," CRC,
                                          LE "," CRC};
    const char *key = "dmg.arr/c/0/0";
    int32_t data[4096], other[4097];
    (void)state;
    for (int i = 0; i < 4097; i++) {
        other[i] = i % 4096 < 2000 ? i : i * 7919;
        if (i < 4096) {
            data[i] = other[i];
        }
    }
    for (size_t c = 0; c < sizeof chains3 / sizeof chains3[0]; c++) {
        ur_kvstore *kv = mem();
        ur_zarr_array *a = one_chunk_array(kv, chains3[c]);
        const ur_zarr_meta *m = ur_zarr_array__meta(a);
        int crc = strstr(chains3[c], "crc32c") != NULL;
        ur_zarr_chain inner = m->codecs; /* the chain without its crc32c */
        uint64_t shape_small[2] = {64, 63}, shape_big[1] = {4097};
        ur_buf enc, b;
        char what[256];
        inner.n_b2b -= crc;
        ur_buf_init(&enc, 0);
        ur_buf_init(&b, 0);
        assert_int_equal(ur_zarr_codec__encode(&inner, 2, m->chunk_shape, 4, (uint8_t *)data,
                                               sizeof data, &enc, NULL),
                         UR_OK);
        /* Intact. */
        ur_buf_reset(&b);
        assert_int_equal(ur_buf_append(&b, enc.data, enc.len, NULL), UR_OK);
        if (crc) {
            append_crc(&b);
        }
        put(kv, b.data, b.len);
        snprintf(what, sizeof what, "%s intact", chains3[c]);
        expect_stream(a, UR_OK, key, what);
        /* Cut at every length up to 64, then every 38th (every 1000th under valgrind), with a
         * valid crc32c over the cut data and without. */
        size_t stride = ur_test_under_valgrind() ? 999 : 37;
        for (size_t cut = 0; cut < enc.len; cut += 1 + (cut > 64) * stride) {
            for (int fix = 0; fix <= crc; fix++) {
                ur_buf_reset(&b);
                assert_int_equal(ur_buf_append(&b, enc.data, cut, NULL), UR_OK);
                if (fix) {
                    append_crc(&b);
                } else if (crc) {
                    /* the original trailer after cut data */
                    uint32_t o = ur_crc32c(0, enc.data, enc.len);
                    assert_int_equal(ur_buf_put_u32le(&b, o, NULL), UR_OK);
                }
                put(kv, b.data, b.len);
                snprintf(what, sizeof what, "%s cut %zu fix %d", chains3[c], cut, fix);
                expect_stream(a, UR_ECORRUPT, key, what);
            }
        }
        /* Trailing bytes: junk, and a second complete encoding. */
        for (int t = 0; t < 3; t++) {
            ur_buf_reset(&b);
            assert_int_equal(ur_buf_append(&b, enc.data, enc.len, NULL), UR_OK);
            if (t == 0) {
                assert_int_equal(ur_buf_append_byte(&b, 0, NULL), UR_OK);
            } else if (t == 1) {
                assert_int_equal(ur_buf_append(&b, "\x01\x02\x03\x04\x05", 5, NULL), UR_OK);
            } else {
                assert_int_equal(ur_buf_append(&b, enc.data, enc.len, NULL), UR_OK);
            }
            if (crc) {
                append_crc(&b);
            }
            put(kv, b.data, b.len);
            snprintf(what, sizeof what, "%s trailing %d", chains3[c], t);
            expect_stream(a, UR_ECORRUPT, key, what);
        }
        /* A valid encoding of fewer and of more elements. */
        for (int big = 0; big <= 1; big++) {
            ur_buf_reset(&b);
            assert_int_equal(
                ur_zarr_codec__encode(&inner, big ? 1 : 2, big ? shape_big : shape_small, 4,
                                      (uint8_t *)other, big ? 4097 * 4 : 4032 * 4, &b, NULL),
                UR_OK);
            if (crc) {
                append_crc(&b);
            }
            put(kv, b.data, b.len);
            snprintf(what, sizeof what, "%s wrong size big %d", chains3[c], big);
            expect_stream(a, UR_ECORRUPT, key, what);
        }
        /* crc32c mismatch: a flipped trailer byte, and a flipped data byte. */
        if (crc) {
            for (int at = 0; at < 2; at++) {
                ur_buf_reset(&b);
                assert_int_equal(ur_buf_append(&b, enc.data, enc.len, NULL), UR_OK);
                append_crc(&b);
                b.data[at ? b.len - 2 : b.len / 2] ^= 0x10;
                put(kv, b.data, b.len);
                snprintf(what, sizeof what, "%s crc flip %d", chains3[c], at);
                expect_stream(a, UR_ECORRUPT, key, what);
            }
        }
        ur_buf_dispose(&enc);
        ur_buf_dispose(&b);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
}

/* Extra zstd frames that decode to nothing are valid for read_chunk, and so for the stream;
 * a frame that declares more than the chunk fails before anything is decoded. */
static void test_zarr_stream__zstd_frames(void **state)
{
    const char *key = "dmg.arr/c/0/0";
    int32_t data[4096];
    ur_kvstore *kv = mem();
    ur_zarr_array *a = one_chunk_array(kv, LE "," ZSTD);
    ur_buf b;
    uint8_t empty[64], skip[12] = {0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0, 1, 2, 3, 4};
    size_t en;
    (void)state;
    for (int i = 0; i < 4096; i++) {
        data[i] = i / 3;
    }
    en = ZSTD_compress(empty, sizeof empty, "", 0, 1);
    assert_false(ZSTD_isError(en));
    ur_buf_init(&b, 0);
    /* [empty frame][skippable][half][half][empty frame] */
    assert_int_equal(ur_buf_append(&b, empty, en, NULL), UR_OK);
    assert_int_equal(ur_buf_append(&b, skip, sizeof skip, NULL), UR_OK);
    for (int h = 0; h < 2; h++) {
        assert_int_equal(
            ur_zarr_codec_zstd__encode((uint8_t *)data + h * 8192, 8192, 3, h, &b, NULL), UR_OK);
    }
    assert_int_equal(ur_buf_append(&b, empty, en, NULL), UR_OK);
    put(kv, b.data, b.len);
    expect_stream(a, UR_OK, key, "multi-frame");
    /* One frame of 4097 elements: its header says it is too large. */
    ur_zarr_chunk_stream *s = NULL;
    uint64_t idx[2] = {0, 0};
    int32_t more[4097] = {0}, one;
    ur_err err;
    ur_buf_reset(&b);
    assert_int_equal(ur_zarr_codec_zstd__encode((uint8_t *)more, sizeof more, 3, 0, &b, NULL),
                     UR_OK);
    put(kv, b.data, b.len);
    assert_int_equal(ur_zarr_chunk_stream_open(&s, a, idx, NULL), UR_OK);
    assert_int_equal(ur_zarr_chunk_stream_read(s, &one, 4, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "larger"));
    assert_non_null(strstr(err.msg, key));
    assert_string_equal(err.where, key);
    ur_zarr_chunk_stream_close(s);
    ur_buf_dispose(&b);
    ur_zarr_array_close(a);
    ur_kvstore_close(kv);
}

/* Flip every byte of small stored values: the stream agrees with read_chunk on success
 * (same bytes) and on the error code, and never crashes. */
static void test_zarr_stream__flipped_bytes_agree_with_read_chunk(void **state)
{
    static const char *const jsons[] = {V3(BE "," ZSTDC "," CRC),
                                        V3(LE "," ZSTD),
                                        V3(LE "," GZIP),
                                        V3(BE "," CRC),
                                        SHARD("end", LE "," ZSTD, LE "," CRC),
                                        SHARD("start", BE "," GZIP "," CRC, LE),
                                        V2("<i4", "{\"id\":\"zlib\"}", "C"),
                                        V2(">i2", "null", "C")};
    (void)state;
    for (size_t j = 0; j < sizeof jsons / sizeof jsons[0]; j++) {
        char json[2048];
        subst(json, sizeof json, jsons[j], "int16");
        ur_kvstore *kv = mem();
        ur_zarr_array *a = open_json(kv, "f", json);
        const ur_zarr_info *in = ur_zarr_array_info(a);
        uint64_t idx[3] = {1, 1, 0};
        char key[128];
        ur_buf orig, b;
        uint8_t *ref = ur_malloc(in->chunk_bytes), *got = ur_malloc(in->chunk_bytes);
        uint64_t sidx[3] = {1, 1, 0};
        write_all(kv, a, 0);
        if (ur_zarr_array__meta(a)->sharded) {
            sidx[0] = 0;
            sidx[1] = 0;
        }
        assert_int_equal(ur_zarr_array_chunk_key(a, sidx, key, sizeof key, NULL), UR_OK);
        ur_buf_init(&orig, 0);
        ur_buf_init(&b, 0);
        assert_int_equal(ur_kvstore_read(kv, key, &orig, NULL), UR_OK);
        for (size_t at = 0; at < orig.len; at++) {
            for (int bit = 0; bit < 8; bit += 3) {
                ur_err e1, e2;
                ur_buf_reset(&b);
                assert_int_equal(ur_buf_append(&b, orig.data, orig.len, NULL), UR_OK);
                b.data[at] ^= (uint8_t)(1u << bit);
                assert_int_equal(ur_kvstore_write(kv, key, b.data, b.len, NULL), UR_OK);
                int rc_ref = ur_zarr_array_read_chunk(a, idx, ref, &e1);
                int rc = stream_chunk(a, idx, got, PIECES_PRIMES, 5, at, NULL, &e2);
                if (rc != rc_ref) {
                    fail_msg("%s: flip byte %zu bit %d: stream %d (%s), read_chunk %d (%s)",
                             jsons[j], at, bit, rc, rc ? e2.msg : "", rc_ref,
                             rc_ref ? e1.msg : "");
                }
                if (rc == UR_OK) {
                    assert_memory_equal(ref, got, in->chunk_bytes);
                }
            }
        }
        ur_buf_dispose(&orig);
        ur_buf_dispose(&b);
        ur_free(ref);
        ur_free(got);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
}

static void test_zarr_stream__missing_chunks(void **state)
{
    char json[2048];
    ur_kvstore *kv = mem();
    ur_zarr_array *a;
    ur_zarr_chunk_stream *s = NULL;
    uint64_t idx[3] = {2, 2, 1}, bad[3] = {3, 0, 0};
    ur_err err;
    (void)state;
    subst(json, sizeof json, SHARD("end", LE "," ZSTD, LE "," CRC), "float32");
    a = open_json(kv, "m.arr", json);
    /* Nothing stored: fill value 3.0f streams, and is incremental. */
    assert_int_equal(ur_zarr_chunk_stream_open(&s, a, idx, NULL), UR_OK);
    assert_int_equal(ur_zarr_chunk_stream_is_incremental(s), 1);
    float f[6];
    assert_int_equal(ur_zarr_chunk_stream_read(s, f, 1, NULL), UR_OK);
    assert_int_equal(ur_zarr_chunk_stream_read(s, (uint8_t *)f + 1, 23, NULL), UR_OK);
    for (int i = 0; i < 6; i++) {
        assert_true(f[i] == 3.0f);
    }
    ur_zarr_chunk_stream_close(s);
    /* Orbax mode: missing is damage (UR_ECORRUPT) naming the shard key. */
    ur_zarr_array_set_fill_missing(a, 0);
    s = NULL;
    assert_int_equal(ur_zarr_chunk_stream_open(&s, a, idx, &err), UR_ECORRUPT);
    assert_null(s);
    assert_non_null(strstr(err.msg, "m.arr/c/1/1/0"));
    assert_non_null(strstr(err.msg, "m.arr"));
    /* Outside the grid. */
    assert_int_equal(ur_zarr_chunk_stream_open(&s, a, bad, &err), UR_EINVAL);
    assert_null(s);
    ur_zarr_array_close(a);
    /* Unsharded v2: the same. */
    a = open_json(kv, "m2", V2("<f4", "null", "C"));
    ur_zarr_array_set_fill_missing(a, 0);
    assert_int_equal(ur_zarr_chunk_stream_open(&s, a, idx, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "m2/2.2.1"));
    assert_non_null(strstr(err.msg, "chunk is missing"));
    ur_zarr_array_close(a);
    ur_zarr_chunk_stream_close(NULL);
    ur_kvstore_close(kv);
}

/* ---- faults, threads -------------------------------------------------------------------------
 */

static void test_zarr_stream__oom(void **state)
{
    static const char *const jsons[] = {SHARD("end", LE "," ZSTD, LE "," CRC), V3(BE "," GZIP),
                                        V2("<i4", "{\"id\":\"zlib\"}", "C"), V3(LE "," CRC),
                                        V3(TRANSPOSE "," LE "," ZSTD)};
    (void)state;
    for (size_t j = 0; j < sizeof jsons / sizeof jsons[0]; j++) {
        char json[2048];
        subst(json, sizeof json, jsons[j], "int32");
        ur_kvstore *kv = mem();
        ur_zarr_array *a = open_json(kv, "o", json);
        const ur_zarr_info *in = ur_zarr_array_info(a);
        uint8_t *ref = ur_malloc(in->chunk_bytes), *got = ur_malloc(in->chunk_bytes);
        uint64_t idx[3] = {2, 1, 1};
        write_all(kv, a, 0);
        assert_int_equal(ur_zarr_array_read_chunk(a, idx, ref, NULL), UR_OK);
        for (long k = 0;; k++) {
            ur_err err;
            ur_alloc_fail_after(k);
            int rc = stream_chunk(a, idx, got, PIECES_PRIMES, 7, 1, NULL, &err);
            ur_alloc_fail_after(-1);
            if (rc == UR_OK) {
                assert_memory_equal(ref, got, in->chunk_bytes);
                assert_true(k > 0);
                break;
            }
            if (rc != UR_ENOMEM) {
                fail_msg("%s: fail_after %ld gives %d (%s)", jsons[j], k, rc, err.msg);
            }
            assert_true(k < 1000);
        }
        ur_free(ref);
        ur_free(got);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
}

static void test_zarr_stream__io_faults(void **state)
{
    char json[2048];
    int eio = 0;
    (void)state;
    subst(json, sizeof json, SHARD("end", LE "," ZSTD, LE "," CRC), "int32");
    for (unsigned fail = 1; fail < 40; fail++) {
        ur_kvstore *kv = mem();
        ur_zarr_array *a = open_json(kv, "io", json);
        const ur_zarr_info *in = ur_zarr_array_info(a);
        uint8_t *got = ur_malloc(in->chunk_bytes);
        uint64_t idx[3] = {0, 1, 2};
        ur_err err;
        write_all(kv, a, 0);
        ur_kvstore_mem_fail_at(kv, fail, 0);
        int rc = stream_chunk(a, idx, got, PIECES_PRIMES, 3, 1, NULL, &err);
        assert_true(rc == UR_OK || rc == UR_EIO);
        if (rc == UR_EIO) {
            eio++;
            assert_non_null(strstr(err.msg, "io/c/0/0/0"));
        }
        ur_free(got);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
    /* size + index + crc trailer + the data in 3-byte pieces: every one can fail. */
    assert_true(eio > 5);
}

typedef struct thread_arg {
    ur_zarr_array *a;
    int rc;
} thread_arg;

static void *reader(void *p)
{
    thread_arg *t = p;
    const ur_zarr_info *in = ur_zarr_array_info(t->a);
    uint8_t ref[4096], got[4096];
    uint64_t idx[UR_MAX_RANK];
    t->rc = 0;
    for (int it = 0; it < 5 && t->rc == 0; it++) {
        for (uint64_t k = 0; k < in->chunk_count && t->rc == 0; k++) {
            ur_zarr_chunk_stream *s = NULL;
            grid_idx(in, k, idx);
            if (ur_zarr_array_read_chunk(t->a, idx, ref, NULL) != UR_OK ||
                ur_zarr_chunk_stream_open(&s, t->a, idx, NULL) != UR_OK) {
                t->rc = 1;
                break;
            }
            for (size_t pos = 0; pos < in->chunk_bytes && t->rc == 0; pos += 13) {
                size_t n = in->chunk_bytes - pos < 13 ? in->chunk_bytes - pos : 13;
                t->rc = ur_zarr_chunk_stream_read(s, got + pos, n, NULL) != UR_OK;
            }
            t->rc |= memcmp(ref, got, in->chunk_bytes) != 0;
            ur_zarr_chunk_stream_close(s);
        }
    }
    return NULL;
}

static void test_zarr_stream__concurrent_streams(void **state)
{
    char json[2048];
    ur_kvstore *kv = mem();
    ur_zarr_array *a;
    pthread_t th[4];
    thread_arg args[4];
    (void)state;
    subst(json, sizeof json, SHARD("end", BE "," ZSTDC "," CRC, LE "," CRC), "float64");
    a = open_json(kv, "t", json);
    write_all(kv, a, 5);
    assert_true(ur_zarr_array_info(a)->chunk_bytes <= 4096);
    for (int i = 0; i < 4; i++) {
        args[i].a = a;
        assert_int_equal(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(args[i].rc, 0);
    }
    ur_zarr_array_close(a);
    ur_kvstore_close(kv);
}

/* ---- a large chunk in bounded memory ------------------------------------------------------- */

static uint16_t big_elem(uint64_t i)
{
    return (uint16_t)((i >> 12) * 3 + (i % 5));
}

/* Peak resident set in KiB, after resetting the peak (Linux /proc/self/clear_refs 5). Where
 * the reset is refused the peak so far stays (this test runs first, so it is small). */
static long peak_kib(int reset)
{
    struct rusage ru;
    if (reset) {
        FILE *f = fopen("/proc/self/clear_refs", "w");
        if (f != NULL) {
            (void)fputs("5", f);
            (void)fclose(f);
        }
    }
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss;
}

/* Compress `n` elements of big_elem in a streaming way (never holding them all). */
static void zstd_stream_compress(uint64_t n, ur_buf *out)
{
    ZSTD_CCtx *c = ZSTD_createCCtx();
    uint16_t blk[1 << 16];
    ZSTD_outBuffer ob;
    assert_non_null(c);
    assert_false(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3)));
    assert_false(ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c, n * 2)));
    for (uint64_t done = 0; done < n;) {
        size_t m = n - done < (1 << 16) ? (size_t)(n - done) : (1 << 16);
        for (size_t i = 0; i < m; i++) {
            blk[i] = big_elem(done + i);
        }
        done += m;
        ZSTD_inBuffer ib = {blk, m * 2, 0};
        ZSTD_EndDirective end = done == n ? ZSTD_e_end : ZSTD_e_continue;
        size_t r;
        do {
            assert_int_equal(ur_buf_reserve(out, 1 << 20, NULL), UR_OK);
            ob.dst = out->data + out->len;
            ob.size = out->cap - out->len;
            ob.pos = 0;
            r = ZSTD_compressStream2(c, &ob, &ib, end);
            assert_false(ZSTD_isError(r));
            out->len += ob.pos;
        } while (end == ZSTD_e_end ? r != 0 : ib.pos < ib.size);
    }
    ZSTD_freeCCtx(c);
}

static void test_zarr_stream__large_chunk_bounded_memory(void **state)
{
    /* 256 MiB of bfloat16 in one Orbax zarr3 chunk (sharded, one inner chunk), and 64 MiB
     * in a zarr2 chunk. Under valgrind an eighth of that: the same code paths checked for
     * memory errors; its peak RSS is valgrind's, so the bound is asserted by the native run. */
    const int under_valgrind = ur_test_under_valgrind();
    const uint64_t rows[2] = {under_valgrind ? 256 : 2048, under_valgrind ? 64 : 512};
    (void)state;
    for (int v = 0; v < 2; v++) {
        char json[1024];
        ur_kvstore *kv = mem();
        ur_zarr_array *a;
        ur_buf enc;
        uint64_t n = rows[v] * 65536, idx[2] = {0, 0};
        if (v == 0) {
            /* shape [rows, 65536], one shard == one inner chunk */
            snprintf(json, sizeof json,
                     "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[%llu,65536],"
                     "\"data_type\":\"bfloat16\",\"chunk_key_encoding\":{\"name\":\"default\"},"
                     "\"fill_value\":0,\"chunk_grid\":{\"name\":\"regular\",\"configuration\":"
                     "{\"chunk_shape\":[%llu,65536]}},\"codecs\":[{\"name\":\"sharding_indexed\","
                     "\"configuration\":{\"chunk_shape\":[%llu,65536],\"codecs\":[" LE "," ZSTD
                     "],\"index_codecs\":[" LE "," CRC "],\"index_location\":\"end\"}}]}",
                     (unsigned long long)rows[v], (unsigned long long)rows[v],
                     (unsigned long long)rows[v]);
        } else {
            snprintf(json, sizeof json,
                     "{\"zarr_format\":2,\"shape\":[%llu,65536],\"chunks\":[%llu,65536],"
                     "\"dtype\":\"bfloat16\",\"compressor\":{\"id\":\"zstd\",\"level\":1},"
                     "\"fill_value\":null,\"order\":\"C\",\"filters\":null}",
                     (unsigned long long)rows[v], (unsigned long long)rows[v]);
        }
        a = open_json(kv, "big", json);
        assert_int_equal(ur_zarr_array_info(a)->chunk_bytes, n * 2);
        ur_buf_init(&enc, 0);
        zstd_stream_compress(n, &enc);
        assert_true(enc.len < n / 8); /* compressible: the stored value is small */
        if (v == 0) {
            ur_buf shard;
            ur_buf_init(&shard, 0);
            assert_int_equal(
                ur_zarr_codec_sharding__encode(ur_zarr_array__meta(a), &enc, 1, &shard, NULL),
                UR_OK);
            assert_int_equal(ur_zarr_array_write_encoded(a, idx, shard.data, shard.len, NULL),
                             UR_OK);
            ur_buf_dispose(&shard);
        } else {
            assert_int_equal(ur_zarr_array_write_encoded(a, idx, enc.data, enc.len, NULL), UR_OK);
        }
        ur_buf_dispose(&enc);

        /* Stream it in 4 MiB + 3-byte reads into one reusable buffer. */
        size_t bufn = ((size_t)4 << 20) + 3;
        uint8_t *buf = ur_malloc(bufn);
        memset(buf, 0, bufn);
        long before = peak_kib(1);
        ur_zarr_chunk_stream *s = NULL;
        uint64_t pos = 0, bad = 0;
        assert_int_equal(ur_zarr_chunk_stream_open(&s, a, idx, NULL), UR_OK);
        assert_int_equal(ur_zarr_chunk_stream_is_incremental(s), 1);
        while (pos < n * 2) {
            size_t m = n * 2 - pos < bufn ? (size_t)(n * 2 - pos) : bufn;
            assert_int_equal(ur_zarr_chunk_stream_read(s, buf, m, NULL), UR_OK);
            for (size_t i = 0; i < m; i++) {
                uint64_t b = pos + i;
                uint16_t e = big_elem(b / 2);
                bad += buf[i] != (uint8_t)(b % 2 ? e >> 8 : e);
            }
            pos += m;
        }
        ur_zarr_chunk_stream_close(s);
        long after = peak_kib(0);
        print_message("peak RSS %ld -> %ld KiB\n", before, after);
        assert_int_equal(bad, 0);
        /* A whole chunk would add 64-256 MiB; the stream adds piece + zstd window. */
        if (!under_valgrind && after - before > 32 * 1024) {
            fail_msg("streaming a %llu MiB chunk raised the peak RSS by %ld KiB",
                     (unsigned long long)(n * 2 >> 20), after - before);
        }
        ur_free(buf);
        ur_zarr_array_close(a);
        ur_kvstore_close(kv);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zarr_stream__large_chunk_bounded_memory),
        cmocka_unit_test(test_zarr_stream__every_dtype_orbax_profiles),
        cmocka_unit_test(test_zarr_stream__every_chain),
        cmocka_unit_test(test_zarr_stream__rank0_and_golden_fixtures),
        cmocka_unit_test(test_zarr_stream__truncated_trailing_wrong_size),
        cmocka_unit_test(test_zarr_stream__zstd_frames),
        cmocka_unit_test(test_zarr_stream__flipped_bytes_agree_with_read_chunk),
        cmocka_unit_test(test_zarr_stream__missing_chunks),
        cmocka_unit_test(test_zarr_stream__oom),
        cmocka_unit_test(test_zarr_stream__io_faults),
        cmocka_unit_test(test_zarr_stream__concurrent_streams),
    };
    return cmocka_run_group_tests_name("zarr_stream", tests, NULL, NULL);
}
