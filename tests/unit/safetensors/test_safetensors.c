/* Safetensors (unroll/safetensors.h): a layout's order, offsets and padding; its header read
 * back; a file written at offsets and read back; and damaged or hostile headers refused with
 * their offset, never read past. (That the bytes are the safetensors library's own is checked
 * against the library in tests/interop/test_hf_export.py.) */
#include "ur_test.h"

#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/safetensors.h"

static const uint64_t S23[2] = {2, 3}, S5[1] = {5}, S0[2] = {0, 3}, S4[1] = {4};

/* Tensors laid out by dtype (the library's order: the widest first), then by name; back to
 * back from offset 0; the header padded with spaces to a multiple of 8. */
static void test_st__layout_order_and_padding(void **state)
{
    const ur_st_decl d[] = {{"b", UR_DT_FLOAT32, 2, S23},
                            {"a", UR_DT_INT64, 1, S5},
                            {"c", UR_DT_BFLOAT16, 1, S4},
                            {"q", UR_DT_FLOAT32, 2, S0},
                            {"z", UR_DT_UINT8, 1, S5}};
    ur_st_layout l;
    ur_st_header h;
    (void)state;
    assert_int_equal(ur_st_layout_build(&l, d, 5, NULL), UR_OK);
    assert_int_equal((l.header.len - 8) % 8, 0);
    assert_memory_equal(l.header.data + 8, "{\"__metadata__\":{\"format\":\"pt\"},\"a\":", 36);
    /* a (I64, 40 bytes), then b and q (F32, by name), c (BF16), z (U8) */
    assert_int_equal(l.offset[1], l.header.len);
    assert_int_equal(l.offset[0], l.header.len + 40);
    assert_int_equal(l.offset[3], l.header.len + 64);
    assert_int_equal(l.offset[2], l.header.len + 64);
    assert_int_equal(l.offset[4], l.header.len + 72);
    assert_int_equal(l.file_size, l.header.len + 77);
    /* read back: the same entries, in file order */
    assert_int_equal(ur_st_header_parse(&h, l.header.data, l.header.len, l.file_size, NULL),
                     UR_OK);
    assert_int_equal(h.n, 5);
    assert_string_equal(h.e[0].name, "a");
    assert_int_equal(h.e[0].dtype, UR_DT_INT64);
    assert_int_equal(h.e[4].end, l.file_size);
    assert_non_null(ur_st_header_find(&h, "q"));
    assert_int_equal(ur_st_header_find(&h, "q")->rank, 2);
    assert_string_equal(h.metadata, "{\"format\":\"pt\"}");
    ur_st_header_dispose(&h);
    ur_st_layout_dispose(&l);
}

static void test_st__layout_refuses(void **state)
{
    const ur_st_decl twice[] = {{"x", UR_DT_FLOAT32, 1, S5}, {"x", UR_DT_BFLOAT16, 1, S5}};
    const ur_st_decl nameless[] = {{"", UR_DT_FLOAT32, 1, S5}};
    const ur_st_decl no_name_dt[] = {{"x", UR_DT_INT4, 1, S5}};
    const uint64_t huge[3] = {UINT64_MAX / 2, 4, 4};
    const ur_st_decl overflow[] = {{"x", UR_DT_FLOAT32, 3, huge}};
    ur_st_layout l;
    ur_err err;
    (void)state;
    assert_int_equal(ur_st_layout_build(&l, twice, 2, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "'x'"));
    assert_int_equal(ur_st_layout_build(&l, nameless, 1, &err), UR_EINVAL);
    assert_int_equal(ur_st_layout_build(&l, no_name_dt, 1, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "int4"));
    assert_int_equal(ur_st_layout_build(&l, overflow, 1, &err), UR_EINVAL);
}

/* A header as bytes: its size, then the JSON. */
static size_t make(uint8_t *out, const char *json)
{
    size_t n = strlen(json);
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)((uint64_t)n >> (8 * i));
    }
    memcpy(out + 8, json, n);
    return 8 + n;
}

static void test_st__hostile_headers(void **state)
{
    static const struct {
        const char *json;
        uint64_t data; /* bytes of data after the header */
        int code;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, UR_OK},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, UR_ECORRUPT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, UR_ECORRUPT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, UR_ECORRUPT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 9, UR_ECORRUPT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, UR_ECORRUPT},
        {"{\"a\":{\"dtype\":\"X9\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, UR_EUNSUPPORTED},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, UR_ECORRUPT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, UR_ECORRUPT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740993,9007199254740993],"
         "\"data_offsets\":[0,8]}}",
         8, UR_ECORRUPT},
        {"[1,2]", 0, UR_ECORRUPT},
        {"{\"__metadata__\":[1]}", 0, UR_ECORRUPT},
        {"{\"a\":", 0, UR_ECORRUPT},
    };
    uint8_t buf[512];
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ur_st_header h;
        ur_err err;
        size_t n = make(buf, cases[i].json);
        int rc = ur_st_header_parse(&h, buf, n, n + cases[i].data, &err);
        assert_int_equal(rc, cases[i].code);
        if (rc == UR_OK) {
            ur_st_header_dispose(&h);
        }
    }
    /* a header size past the file, or the bytes given */
    make(buf, "{}");
    buf[0] = 200;
    {
        ur_st_header h;
        assert_int_equal(ur_st_header_parse(&h, buf, 10, 10, NULL), UR_ECORRUPT);
        assert_int_equal(ur_st_header_parse(&h, buf, 4, 4, NULL), UR_ECORRUPT);
    }
}

/* A file created at its size with its header, filled out of order, read back through a store. */
static void test_st__file_round_trip(void **state)
{
    const ur_st_decl d[] = {{"w", UR_DT_FLOAT32, 2, S23}, {"n", UR_DT_FLOAT32, 1, S4}};
    char dir[256], *path;
    ur_st_layout l;
    ur_st_file *f;
    ur_st_header h;
    ur_kvstore *kv;
    float w[6] = {1, 2, 3, 4, 5, 6}, n4[4] = {7, 8, 9, 10}, got[6];
    ur_err err;
    (void)state;
    ur_test_scratch_dir(dir, sizeof dir, "st");
    path = ur_path_join(dir, "model.safetensors");
    assert_int_equal(ur_st_layout_build(&l, d, 2, NULL), UR_OK);
    assert_int_equal(ur_st_file_create(&f, path, &l, NULL), UR_OK);
    assert_int_equal(ur_st_file_create(&f, path, &l, &err), UR_EEXIST); /* never over a file */
    assert_int_equal(ur_st_file_write(f, l.offset[1], n4, sizeof n4, NULL), UR_OK);
    assert_int_equal(ur_st_file_write(f, l.offset[0] + 12, w + 3, 12, NULL), UR_OK);
    /* the first row stored through a mapping (the blocks are reserved on this file system) */
    ur_fs_map view;
    assert_int_equal(ur_st_file_map(f, l.offset[0], 12, &view, NULL), UR_OK);
    assert_non_null(view.data);
    memcpy((void *)(uintptr_t)view.data, w, 12);
    ur_fs_unmap(&view);
    /* outside the data section: the header, and past the end */
    assert_int_equal(ur_st_file_write(f, 0, w, 4, &err), UR_EINVAL);
    assert_int_equal(ur_st_file_write(f, l.file_size - 2, w, 4, &err), UR_EINVAL);
    assert_int_equal(ur_st_file_map(f, 0, 4, &view, &err), UR_EINVAL);
    assert_int_equal(ur_st_file_map(f, l.file_size - 2, 4, &view, &err), UR_EINVAL);
    assert_null(view.data);
    assert_int_equal(ur_st_file_finish(f, NULL), UR_OK);
    assert_int_equal(ur_kvstore_file_open(&kv, dir, 0, NULL), UR_OK);
    assert_int_equal(ur_st_header_read(&h, kv, "model.safetensors", NULL), UR_OK);
    const ur_st_entry *e = ur_st_header_find(&h, "w");
    assert_non_null(e);
    assert_int_equal(ur_kvstore_read_range(kv, "model.safetensors", e->begin, 24, got, NULL),
                     UR_OK);
    assert_memory_equal(got, w, 24);
    ur_st_header_dispose(&h);
    ur_kvstore_close(kv);
    ur_st_layout_dispose(&l);
    (void)ur_fs_remove_tree(dir, NULL);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st__layout_order_and_padding),
        cmocka_unit_test(test_st__layout_refuses),
        cmocka_unit_test(test_st__hostile_headers),
        cmocka_unit_test(test_st__file_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
