/* zarr_meta: parse and emit zarr3 zarr.json / zarr2 .zarray. Golden inputs are real values
 * from Orbax checkpoints (tests/data/zarr/README.md). */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "zarr/zarr_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static char *load(const char *rel, size_t *n)
{
    char path[512];
    ur_buf b;
    snprintf(path, sizeof path, "%s/zarr/%s", UR_TEST_DATA_DIR, rel);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, path, 1 << 20, NULL), UR_OK);
    return ur_buf_detach(&b, n);
}

static void emit_equals(const ur_zarr_meta *m, const char *want, size_t n)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_zarr_meta__emit(m, &b, NULL), UR_OK);
    assert_int_equal(b.len, n);
    assert_memory_equal(b.data, want, n);
    ur_buf_dispose(&b);
}

static void test_zarr_meta__golden_orbax_zarr3(void **state)
{
    size_t n;
    char *txt = load("orbax_v1/a/zarr.json", &n);
    ur_zarr_meta m;
    (void)state;
    assert_int_equal(ur_zarr_meta__parse_v3(&m, txt, n, "a", NULL), UR_OK);
    assert_int_equal(m.zarr_format, 3);
    assert_int_equal(m.dtype, UR_DT_INT32);
    assert_int_equal(m.rank, 1);
    assert_int_equal(m.shape[0], 8);
    assert_int_equal(m.chunk_shape[0], 8);
    assert_true(m.sharded);
    assert_int_equal(m.inner_shape[0], 8);
    assert_int_equal(m.codecs.n_b2b, 1);
    assert_int_equal(m.codecs.b2b[0].kind, UR_ZARR_B2B_ZSTD);
    assert_int_equal(m.codecs.b2b[0].level, 3);
    assert_int_equal(m.codecs.b2b[0].checksum, 0);
    assert_int_equal(m.index.n_b2b, 1);
    assert_int_equal(m.index.b2b[0].kind, UR_ZARR_B2B_CRC32C);
    assert_false(m.index_at_start);
    assert_false(m.v2_keys);
    assert_int_equal(m.sep, '/');
    /* Emitting gives back TensorStore's bytes exactly. */
    emit_equals(&m, txt, n);
    ur_free(txt);
}

static void test_zarr_meta__golden_orbax_zarr2(void **state)
{
    size_t n;
    char *txt = load("orbax_v0/b.c/.zarray", &n);
    ur_zarr_meta m;
    (void)state;
    assert_int_equal(ur_zarr_meta__parse_v2(&m, txt, n, "b.c", NULL), UR_OK);
    assert_int_equal(m.zarr_format, 2);
    assert_int_equal(m.dtype, UR_DT_INT32);
    assert_int_equal(m.shape[0], 3);
    assert_int_equal(m.chunk_shape[0], 3);
    assert_true(m.fill_null);
    assert_true(m.v2_keys);
    assert_int_equal(m.sep, '.');
    assert_int_equal(m.codecs.n_b2b, 1);
    assert_int_equal(m.codecs.b2b[0].kind, UR_ZARR_B2B_ZSTD);
    assert_int_equal(m.codecs.b2b[0].level, 1);
    emit_equals(&m, txt, n);
    ur_free(txt);
}

static int parse3(ur_zarr_meta *m, const char *s, ur_err *err)
{
    return ur_zarr_meta__parse_v3(m, s, strlen(s), "arr.x", err);
}

static int parse2(ur_zarr_meta *m, const char *s, ur_err *err)
{
    return ur_zarr_meta__parse_v2(m, s, strlen(s), "arr.x", err);
}

#define V3_HEAD                                                                                   \
    "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[2]},\"name\":\"regular\"},"             \
    "\"chunk_key_encoding\":{\"name\":\"default\"},\"node_type\":\"array\",\"shape\":[4],"        \
    "\"zarr_format\":3,"

static void fill3(const char *dtype, const char *fill, const char *codecs, uint8_t *out, size_t n)
{
    char buf[1024];
    ur_zarr_meta m;
    ur_err err;
    snprintf(buf, sizeof buf, V3_HEAD "\"data_type\":\"%s\",\"fill_value\":%s,\"codecs\":[%s]}",
             dtype, fill, codecs);
    if (parse3(&m, buf, &err) != UR_OK) {
        fail_msg("%s: %s", buf, err.msg);
    }
    memcpy(out, m.fill, n);
}

#define LE "{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}"

static void test_zarr_meta__fill_values(void **state)
{
    uint8_t f[16];
    (void)state;
    fill3("float32", "\"NaN\"", LE, f, 4);
    assert_memory_equal(f, "\x00\x00\xc0\x7f", 4);
    fill3("float32", "\"-Infinity\"", LE, f, 4);
    assert_memory_equal(f, "\x00\x00\x80\xff", 4);
    fill3("float32", "\"0x7fc00001\"", LE, f, 4);
    assert_memory_equal(f, "\x01\x00\xc0\x7f", 4);
    fill3("bfloat16", "1.0", LE, f, 2);
    assert_memory_equal(f, "\x80\x3f", 2);
    fill3("float16", "-2.5", LE, f, 2);
    assert_memory_equal(f, "\x00\xc1", 2);
    fill3("float64", "\"Infinity\"", LE, f, 8);
    assert_memory_equal(f, "\x00\x00\x00\x00\x00\x00\xf0\x7f", 8);
    /* Exact past 2^53: read from the JSON text, not through a double. */
    fill3("int64", "-9007199254740993", LE, f, 8);
    assert_memory_equal(f, "\xff\xff\xff\xff\xff\xff\xdf\xff", 8);
    fill3("uint64", "18446744073709551615", LE, f, 8);
    assert_memory_equal(f, "\xff\xff\xff\xff\xff\xff\xff\xff", 8);
    fill3("int4", "-3", "{\"name\":\"bytes\"}", f, 1);
    assert_int_equal(f[0], 0xfd);
    fill3("bool", "true", "{\"name\":\"bytes\"}", f, 1);
    assert_int_equal(f[0], 1);
    fill3("complex64", "[1.0,\"NaN\"]", LE, f, 8);
    assert_memory_equal(f, "\x00\x00\x80\x3f\x00\x00\xc0\x7f", 8);
    fill3("float8_e4m3fn", "448.0", "{\"name\":\"bytes\"}", f, 1);
    assert_int_equal(f[0], 0x7e);
}

static void test_zarr_meta__fill_value_round_trip(void **state)
{
    static const char *const cases[][2] = {
        {"float32", "\"NaN\""},   {"float32", "\"0x7fc00001\""},
        {"float32", "-1.5"},      {"float64", "\"-Infinity\""},
        {"bfloat16", "0.0"},      {"int8", "-128"},
        {"uint32", "4294967295"}, {"complex128", "[0.0,-2.0]"},
        {"bool", "false"},        {"int64", "-9223372036854775808"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[1024], want[64];
        ur_zarr_meta m;
        ur_buf b;
        const char *codec = strcmp(cases[i][0], "bool") == 0 || strcmp(cases[i][0], "int8") == 0
                                ? "{\"name\":\"bytes\"}"
                                : LE;
        snprintf(buf, sizeof buf,
                 V3_HEAD "\"data_type\":\"%s\",\"fill_value\":%s,\"codecs\":[%s]}", cases[i][0],
                 cases[i][1], codec);
        assert_int_equal(parse3(&m, buf, NULL), UR_OK);
        ur_buf_init(&b, 0);
        assert_int_equal(ur_zarr_meta__emit(&m, &b, NULL), UR_OK);
        assert_int_equal(ur_buf_append_byte(&b, 0, NULL), UR_OK); /* for strstr */
        snprintf(want, sizeof want, "\"fill_value\":%s,", cases[i][1]);
        if (strstr((const char *)b.data, want) == NULL) {
            fail_msg("case %zu: %s not in %s", i, want, (const char *)b.data);
        }
        ur_buf_dispose(&b);
    }
}

static void test_zarr_meta__zarr2_variants(void **state)
{
    ur_zarr_meta m;
    ur_err err;
    (void)state;
    assert_int_equal(
        parse2(&m,
               "{\"chunks\":[2,3],\"compressor\":{\"id\":\"zlib\",\"level\":4},"
               "\"dimension_separator\":\"/\",\"dtype\":\">f8\",\"fill_value\":\"NaN\","
               "\"filters\":[],\"order\":\"F\",\"shape\":[4,5],\"zarr_format\":2}",
               &err),
        UR_OK);
    assert_int_equal(m.dtype, UR_DT_FLOAT64);
    assert_true(m.codecs.big_endian);
    assert_true(m.codecs.has_transpose);
    assert_int_equal(m.codecs.perm[0], 1);
    assert_int_equal(m.codecs.b2b[0].kind, UR_ZARR_B2B_ZLIB);
    assert_int_equal(m.sep, '/');
    assert_memory_equal(m.fill, "\0\0\0\0\0\0\xf8\x7f", 8);
    assert_int_equal(parse2(&m,
                            "{\"chunks\":[2],\"compressor\":null,\"dtype\":\"bfloat16\","
                            "\"fill_value\":0,\"filters\":null,\"order\":\"C\",\"shape\":[4],"
                            "\"zarr_format\":2}",
                            &err),
                     UR_OK);
    assert_int_equal(m.dtype, UR_DT_BFLOAT16);
    assert_int_equal(m.sep, '.');
    assert_int_equal(m.codecs.n_b2b, 0);
    /* Complex fill values are base64 of the element in TensorStore's zarr2. */
    assert_int_equal(parse2(&m,
                            "{\"chunks\":[2],\"compressor\":null,\"dtype\":\"<c8\","
                            "\"fill_value\":\"AACAPwAAAEA=\",\"filters\":null,\"order\":\"C\","
                            "\"shape\":[4],\"zarr_format\":2}",
                            &err),
                     UR_OK);
    assert_memory_equal(m.fill, "\x00\x00\x80\x3f\x00\x00\x00\x40", 8);
}

typedef struct bad_case {
    int v3;
    const char *json;
    int code;
    const char *needle;
} bad_case;

#define V2A                                                                                       \
    "{\"chunks\":[2],\"compressor\":null,\"dimension_separator\":\".\",\"fill_value\":null,"
static const bad_case bad[] = {
    {1, "{\"zarr_format\":3,", UR_ECORRUPT, "invalid JSON"},
    {1, "[]", UR_ECORRUPT, "not a JSON object"},
    {1, "{\"zarr_format\":2}", UR_ECORRUPT, "zarr_format"},
    {1, "{\"zarr_format\":3,\"node_type\":\"group\"}", UR_ECORRUPT, "node_type"},
    {1, V3_HEAD "\"data_type\":\"int32\",\"fill_value\":0}", UR_ECORRUPT, "codecs"},
    {1,
     "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[2]},\"name\":\"regular\"},"
     "\"chunk_key_encoding\":{\"name\":\"default\"},\"node_type\":\"array\",\"shape\":[-4],"
     "\"zarr_format\":3,\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[" LE "]}",
     UR_ECORRUPT, "shape"},
    {1,
     "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[1,1]},\"name\":\"regular\"},"
     "\"chunk_key_encoding\":{\"name\":\"default\"},\"node_type\":\"array\","
     "\"shape\":[4503599627370496,4503599627370496],"
     "\"zarr_format\":3,\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[" LE "]}",
     UR_ECORRUPT, "overflow"},
    {1,
     "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[4503599627370496]},\"name\":"
     "\"regular\"},\"chunk_key_encoding\":{\"name\":\"default\"},\"node_type\":\"array\","
     "\"shape\":[4],\"zarr_format\":3,\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[" LE
     "]}",
     UR_ECORRUPT, "too large"},
    {1,
     "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[0]},\"name\":\"regular\"},"
     "\"chunk_key_encoding\":{\"name\":\"default\"},\"node_type\":\"array\",\"shape\":[4],"
     "\"zarr_format\":3,\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[" LE "]}",
     UR_ECORRUPT, "chunk shape"},
    {1, V3_HEAD "\"data_type\":\"float7\",\"fill_value\":0,\"codecs\":[" LE "]}", UR_EUNSUPPORTED,
     "data_type"},
    {1,
     V3_HEAD "\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[" LE ",{\"name\":\"blosc\"}]}",
     UR_EUNSUPPORTED, "unsupported codec \"blosc\""},
    {1, V3_HEAD "\"data_type\":\"int32\",\"fill_value\":\"x\",\"codecs\":[" LE "]}", UR_ECORRUPT,
     "fill_value"},
    {1, V3_HEAD "\"data_type\":\"int8\",\"fill_value\":300,\"codecs\":[{\"name\":\"bytes\"}]}",
     UR_ECORRUPT, "fill_value"},
    {1, V3_HEAD "\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\"}]}",
     UR_ECORRUPT, "endian"},
    {1,
     V3_HEAD "\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[{\"name\":\"zstd\"}," LE "]}",
     UR_ECORRUPT, "before the bytes codec"},
    {1,
     V3_HEAD "\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[{\"name\":\"transpose\","
             "\"configuration\":{\"order\":[1]}}," LE "]}",
     UR_ECORRUPT, "transpose"},
    {1,
     V3_HEAD "\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[{\"name\":"
             "\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[3],\"codecs\":[" LE
             "],\"index_codecs\":[" LE "]}}]}",
     UR_ECORRUPT, "divide"},
    {1,
     V3_HEAD "\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[{\"name\":"
             "\"sharding_indexed\",\"configuration\":{\"chunk_shape\":[1],\"codecs\":[" LE
             "],\"index_codecs\":[" LE ",{\"name\":\"zstd\"}]}}]}",
     UR_EUNSUPPORTED, "fixed size"},
    {1,
     "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
     "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]},\"name\":\"regular\"}}",
     UR_ECORRUPT, "zarr_format"},
    {0, V2A "\"dtype\":\"<i4\",\"filters\":null,\"order\":\"C\",\"shape\":[-1],\"zarr_format\":2}",
     UR_ECORRUPT, "shape"},
    {0, V2A "\"dtype\":\"<q9\",\"filters\":null,\"order\":\"C\",\"shape\":[4],\"zarr_format\":2}",
     UR_EUNSUPPORTED, "dtype"},
    {0, V2A "\"dtype\":\"|f4\",\"filters\":null,\"order\":\"C\",\"shape\":[4],\"zarr_format\":2}",
     UR_EUNSUPPORTED, "dtype"},
    {0, V2A "\"dtype\":\"<i4\",\"filters\":null,\"order\":\"K\",\"shape\":[4],\"zarr_format\":2}",
     UR_ECORRUPT, "order"},
    {0,
     V2A "\"dtype\":\"<i4\",\"filters\":[{\"id\":\"delta\"}],\"order\":\"C\",\"shape\":[4],"
         "\"zarr_format\":2}",
     UR_EUNSUPPORTED, "filters"},
    {0,
     "{\"chunks\":[2],\"compressor\":{\"id\":\"blosc\"},\"dtype\":\"<i4\",\"fill_value\":null,"
     "\"filters\":null,\"order\":\"C\",\"shape\":[4],\"zarr_format\":2}",
     UR_EUNSUPPORTED, "unsupported codec \"blosc\""},
    {0,
     "{\"chunks\":[2],\"compressor\":null,\"dtype\":\"<i4\",\"fill_value\":null,"
     "\"order\":\"C\",\"shape\":[4],\"zarr_format\":2}",
     UR_ECORRUPT, "filters"},
    {0,
     "{\"chunks\":\"2\",\"compressor\":null,\"dtype\":\"<i4\",\"fill_value\":null,"
     "\"filters\":null,\"order\":\"C\",\"shape\":[4],\"zarr_format\":2}",
     UR_ECORRUPT, "chunks"},
    {0,
     "{\"chunks\":[2,2],\"compressor\":null,\"dtype\":\"<i4\",\"fill_value\":null,"
     "\"filters\":null,\"order\":\"C\",\"shape\":[4],\"zarr_format\":2}",
     UR_ECORRUPT, "rank"},
};

static void test_zarr_meta__damaged_metadata_names_the_array(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ur_zarr_meta m;
        ur_err err;
        int rc = bad[i].v3 ? parse3(&m, bad[i].json, &err) : parse2(&m, bad[i].json, &err);
        if (rc != bad[i].code || strstr(err.msg, bad[i].needle) == NULL ||
            strstr(err.msg, "arr.x") == NULL) {
            fail_msg("case %zu: rc %d, msg \"%s\"", i, rc, rc ? err.msg : "");
        }
    }
}

static void test_zarr_meta__rank_over_max(void **state)
{
    char buf[2048], dims[256] = "";
    ur_zarr_meta m;
    ur_err err;
    (void)state;
    for (int i = 0; i < 33; i++) {
        strcat(dims, i ? ",1" : "1");
    }
    snprintf(
        buf, sizeof buf,
        "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[%s]},\"name\":\"regular\"},"
        "\"chunk_key_encoding\":{\"name\":\"default\"},\"node_type\":\"array\",\"shape\":[%s],"
        "\"zarr_format\":3,\"data_type\":\"int32\",\"fill_value\":0,\"codecs\":[" LE "]}",
        dims, dims);
    assert_int_equal(parse3(&m, buf, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "more than 32"));
}

/* Every prefix of a real zarr.json is invalid and must fail cleanly. */
static void test_zarr_meta__truncated_at_every_offset(void **state)
{
    size_t n;
    char *txt = load("orbax_v1/a/zarr.json", &n);
    (void)state;
    for (size_t cut = 0; cut < n; cut++) {
        ur_zarr_meta m;
        ur_err err;
        assert_int_equal(ur_zarr_meta__parse_v3(&m, txt, cut, "a", &err), UR_ECORRUPT);
    }
    ur_free(txt);
}

/* Flip each byte of a real .zarray: parse may succeed or fail, but never crash, and a
 * failure is always corrupt or unsupported. */
static void test_zarr_meta__flipped_bytes(void **state)
{
    size_t n;
    char *txt = load("orbax_v0/a/.zarray", &n);
    (void)state;
    for (size_t i = 0; i < n; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            ur_zarr_meta m;
            ur_err err;
            txt[i] = (char)(txt[i] ^ (1 << bit));
            int rc = ur_zarr_meta__parse_v2(&m, txt, n, "a", &err);
            assert_true(rc == UR_OK || rc == UR_ECORRUPT || rc == UR_EUNSUPPORTED);
            txt[i] = (char)(txt[i] ^ (1 << bit));
        }
    }
    ur_free(txt);
}

/* A text parsed before is answered from the thread's memo: the result of a parse, for that
 * text and format only; failures are never kept, and an evicted text is parsed again. */
static void emitted(const ur_zarr_meta *m, ur_buf *b)
{
    ur_buf_reset(b);
    assert_int_equal(ur_zarr_meta__emit(m, b, NULL), UR_OK);
}

static void test_zarr_meta__memo(void **state)
{
    size_t n;
    char *txt = load("orbax_v1/a/zarr.json", &n);
    char *shape = strstr(txt, "\"shape\":[");
    ur_zarr_meta a, b;
    ur_buf ea, eb;
    ur_err err;
    (void)state;
    ur_buf_init(&ea, 0);
    ur_buf_init(&eb, 0);
    assert_non_null(shape);
    assert_int_equal(ur_zarr_meta__parse_v3(&a, txt, n, "a", NULL), UR_OK);
    emitted(&a, &ea);
    assert_int_equal(ur_zarr_meta__parse_v3(&b, txt, n, "b", NULL), UR_OK);
    emitted(&b, &eb);
    assert_int_equal(ea.len, eb.len);
    assert_memory_equal(ea.data, eb.data, ea.len);
    /* the same bytes read as zarr2 are not the zarr3 parse */
    assert_int_not_equal(ur_zarr_meta__parse_v2(&b, txt, n, "b", &err), UR_OK);
    /* one byte of the shape changed: parsed again, to another shape */
    shape += strlen("\"shape\":[");
    assert_true(*shape >= '1' && *shape <= '8');
    (*shape)++;
    assert_int_equal(ur_zarr_meta__parse_v3(&b, txt, n, "b", NULL), UR_OK);
    assert_int_equal(b.shape[0], a.shape[0] + 1); /* a one-digit first dimension */
    (*shape)--;
    /* a damaged text fails every time, naming its caller */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ur_zarr_meta__parse_v3(&b, txt, n - 1, i ? "second" : "first", &err),
                         UR_ECORRUPT);
        assert_non_null(strstr(err.msg, i ? "second" : "first"));
    }
    /* more distinct texts than the memo holds: the first is parsed again, alike */
    for (int i = 0; i < 8; i++) {
        char other[64];
        snprintf(other, sizeof other, "{\"zarr_format\":3,\"pad%d\":0}", i);
        (void)ur_zarr_meta__parse_v3(&b, other, strlen(other), "x", &err);
        assert_int_equal(ur_zarr_meta__parse_v3(&b, txt, n, "b", NULL), UR_OK);
        emitted(&b, &eb);
        assert_int_equal(ea.len, eb.len);
        assert_memory_equal(ea.data, eb.data, ea.len);
    }
    ur_buf_dispose(&ea);
    ur_buf_dispose(&eb);
    ur_free(txt);
}

static void test_zarr_meta__oom(void **state)
{
    size_t n;
    char *txt = load("orbax_v1/a/zarr.json", &n);
    (void)state;
    for (long k = 0;; k++) {
        ur_zarr_meta m;
        ur_buf b;
        ur_alloc_fail_after(k);
        ur_buf_init(&b, 0);
        int rc = ur_zarr_meta__parse_v3(&m, txt, n, "a", NULL);
        if (rc == UR_OK) {
            rc = ur_zarr_meta__emit(&m, &b, NULL);
        }
        ur_alloc_fail_after(-1);
        ur_buf_dispose(&b);
        if (rc == UR_OK) {
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        assert_true(k < 1000);
    }
    ur_free(txt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zarr_meta__golden_orbax_zarr3),
        cmocka_unit_test(test_zarr_meta__golden_orbax_zarr2),
        cmocka_unit_test(test_zarr_meta__fill_values),
        cmocka_unit_test(test_zarr_meta__fill_value_round_trip),
        cmocka_unit_test(test_zarr_meta__zarr2_variants),
        cmocka_unit_test(test_zarr_meta__damaged_metadata_names_the_array),
        cmocka_unit_test(test_zarr_meta__rank_over_max),
        cmocka_unit_test(test_zarr_meta__truncated_at_every_offset),
        cmocka_unit_test(test_zarr_meta__flipped_bytes),
        cmocka_unit_test(test_zarr_meta__memo),
        cmocka_unit_test(test_zarr_meta__oom),
    };
    return cmocka_run_group_tests_name("zarr_meta", tests, NULL, NULL);
}
