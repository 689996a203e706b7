/* ocdbt_btree (+ data-file table): the golden leaf of spec §10.4, round trips of leaf and
 * interior nodes and of tables with base paths, corruption at every offset, OOM. */
#include "ur_test.h"

#include "ocdbt_format.h"
#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

/* spec §10.4 leaf body (after the 14-byte header, before the CRC) */
static uint8_t golden_body[] = {
    0x00, 0x01, 0x22, 0x00, 'd',  '/',  '0',  '0', '0', '0', '0',  '0',  '0',  '0',
    '0',  '0',  '0',  '0',  '0',  '0',  '0',  '0', '0', '0', '0',  '0',  '0',  '0',
    '0',  '0',  '0',  '0',  '0',  '0',  '0',  '0', '0', '0', 0x03, 0x01, 0x00, 0x01,
    0x06, 0x03, 'a',  'b',  'c',  '/',  'd',  'e', 'f', 'b', 'i',  'g',  0x05, 0x00,
    0x80, 0x04, 0x00, 0x00, 0x01, 0x00, 0x00, 'h', 'e', 'l', 'l',  'o'};

static void test_ocdbt_btree__golden_leaf(void **state)
{
    ur_ocdbt_btree_node node;
    ur_buf body, obj;
    ur_ocdbt_btree_enc_entry e[3];
    (void)state;

    ur_buf_init(&body, 0);
    assert_int_equal(ur_buf_append(&body, golden_body, sizeof golden_body, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_btree_decode(&node, &body, "", 0, NULL), UR_OK);
    assert_int_equal(node.height, 0);
    assert_int_equal(node.n, 3);
    assert_int_equal(node.e[1].key_len, 7);
    assert_memory_equal(node.keys + node.e[1].key_off, "abc/def", 7);
    assert_int_equal(node.e[0].value_len, 5);
    assert_memory_equal(node.values.data + node.e[0].value_off, "hello", 5);
    assert_int_equal(node.e[2].indirect, 1);
    assert_int_equal(node.e[2].ref.offset, 0);
    assert_int_equal(node.e[2].ref.length, 512);
    /* re-encode: same body, and the envelope is 86 bytes with the spec's CRC */
    memset(e, 0, sizeof e);
    for (size_t i = 0; i < 3; i++) {
        e[i].key = node.keys + node.e[i].key_off;
        e[i].key_len = node.e[i].key_len;
        e[i].indirect = node.e[i].indirect;
        e[i].value = node.values.data + node.e[i].value_off;
        e[i].value_len = node.e[i].value_len;
        e[i].ref = node.e[i].ref;
    }
    ur_buf_init(&obj, 0);
    assert_int_equal(ur_ocdbt_btree_encode(&body, 0, &node.table, e, 3, NULL), UR_OK);
    assert_int_equal(body.len, sizeof golden_body);
    assert_memory_equal(body.data, golden_body, sizeof golden_body);
    assert_int_equal(
        ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_BTREE, body.data, body.len, 0, 0, NULL), UR_OK);
    assert_int_equal(obj.len, 86);
    assert_int_equal(obj.data[82], 0x55);
    assert_int_equal(obj.data[85], 0xa7);
    ur_ocdbt_btree_dispose(&node);
    ur_buf_dispose(&body);
    ur_buf_dispose(&obj);
}

/* A repeated inline value of 64 bytes or more is held once, a shorter one per key; every
 * entry still reads its own bytes and the node encodes back to the same body. */
static void test_ocdbt_btree__repeated_values_held_once(void **state)
{
    static const char *keys[4] = {"a/c", "a/zarr.json", "b/c", "b/zarr.json"};
    char big[100], small[8];
    ur_ocdbt_table t = {0, NULL};
    ur_ocdbt_btree_enc_entry e[4];
    ur_ocdbt_btree_node node;
    ur_buf body, again;
    (void)state;

    memset(big, 'z', sizeof big);
    memset(small, 's', sizeof small);
    memset(e, 0, sizeof e);
    for (size_t i = 0; i < 4; i++) {
        e[i].key = (const uint8_t *)keys[i];
        e[i].key_len = strlen(keys[i]);
        e[i].value = (const uint8_t *)(i % 2 ? big : small);
        e[i].value_len = i % 2 ? sizeof big : sizeof small;
    }
    ur_buf_init(&body, 0);
    ur_buf_init(&again, 0);
    assert_int_equal(ur_ocdbt_btree_encode(&body, 0, &t, e, 4, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_btree_decode(&node, &body, "", 0, NULL), UR_OK);
    assert_int_equal(node.values.len, 2 * sizeof small + sizeof big);
    assert_int_equal(node.e[1].value_off, node.e[3].value_off);
    assert_true(node.e[0].value_off != node.e[2].value_off);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(node.e[i].value_len, e[i].value_len);
        assert_memory_equal(node.values.data + node.e[i].value_off, e[i].value,
                            (size_t)e[i].value_len);
        e[i].value = node.values.data + node.e[i].value_off;
    }
    assert_int_equal(ur_ocdbt_btree_encode(&again, 0, &node.table, e, 4, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_btree_encode(&body, 0, &t, e, 4, NULL), UR_OK);
    assert_int_equal(again.len, body.len);
    assert_memory_equal(again.data, body.data, body.len);
    ur_ocdbt_btree_dispose(&node);
    ur_buf_dispose(&body);
    ur_buf_dispose(&again);
}

static void encode_interior(ur_buf *body)
{
    static char pa[] = "ocdbt.process_0/d/aa", pb[] = "ocdbt.process_0/d/ab", pc[] = "d/zz";
    ur_ocdbt_file_id f[3] = {{pc, 4, 0}, {pa, 20, 16}, {pb, 20, 16}};
    ur_ocdbt_table t = {3, f};
    ur_ocdbt_btree_enc_entry e[3];
    memset(e, 0, sizeof e);
    e[0] = (ur_ocdbt_btree_enc_entry){
        (const uint8_t *)"abc/x", 5, 4, 0, NULL, 0, {0, 0, 40}, {3, 40, 0}};
    e[1] = (ur_ocdbt_btree_enc_entry){
        (const uint8_t *)"abc/y", 5, 5, 0, NULL, 0, {1, 40, 50}, {1, 50, 9}};
    e[2] = (ur_ocdbt_btree_enc_entry){(const uint8_t *)"b", 1,         0, 0, NULL, 0,
                                      {2, 90, 60},          {2, 60, 0}};
    ur_ocdbt_table_sort(&t); /* already sorted: "" < "ocdbt.process_0/" */
    assert_int_equal(t.n, 3);
    assert_int_equal(ur_ocdbt_btree_encode(body, 2, &t, e, 3, NULL), UR_OK);
}

static void test_ocdbt_btree__interior_roundtrip(void **state)
{
    ur_ocdbt_btree_node node;
    ur_buf body;
    (void)state;
    ur_buf_init(&body, 0);
    encode_interior(&body);
    assert_int_equal(ur_ocdbt_btree_decode(&node, &body, "top/", 4, NULL), UR_OK);
    assert_int_equal(node.height, 2);
    assert_int_equal(node.n, 3);
    assert_int_equal(node.e[0].subtree_prefix_len, 4);
    assert_int_equal(node.stats[1].num_indirect_value_bytes, 9);
    assert_int_equal(node.e[2].ref.offset, 90);
    assert_string_equal(node.table.f[0].path, "top/d/zz");
    assert_int_equal(node.table.f[0].base_len, 4);
    assert_string_equal(node.table.f[2].path, "top/ocdbt.process_0/d/ab");
    assert_int_equal(node.table.f[2].base_len, 20);
    ur_ocdbt_btree_dispose(&node);
}

static void test_ocdbt_btree__corrupt_every_offset(void **state)
{
    ur_ocdbt_btree_node node;
    ur_buf body, copy;
    ur_err err;
    (void)state;
    ur_buf_init(&body, 0);
    encode_interior(&body);
    for (size_t cut = 0; cut < body.len; cut++) {
        ur_buf_init(&copy, 0);
        assert_int_equal(ur_buf_append(&copy, body.data, cut, NULL), UR_OK);
        assert_int_equal(ur_ocdbt_btree_decode(&node, &copy, "", 0, &err), UR_ECORRUPT);
        ur_buf_dispose(&copy);
    }
    for (size_t i = 0; i < body.len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            int rc;
            ur_buf_init(&copy, 0);
            assert_int_equal(ur_buf_append(&copy, body.data, body.len, NULL), UR_OK);
            copy.data[i] ^= (uint8_t)(1u << bit);
            rc = ur_ocdbt_btree_decode(&node, &copy, "", 0, &err);
            assert_true(rc == UR_OK || rc == UR_ECORRUPT);
            ur_ocdbt_btree_dispose(&node);
            ur_buf_dispose(&copy);
        }
    }
    /* same for the golden leaf */
    for (size_t cut = 0; cut < sizeof golden_body; cut++) {
        ur_buf_init(&copy, 0);
        assert_int_equal(ur_buf_append(&copy, golden_body, cut, NULL), UR_OK);
        assert_int_equal(ur_ocdbt_btree_decode(&node, &copy, "", 0, &err), UR_ECORRUPT);
        ur_buf_dispose(&copy);
    }
    ur_buf_dispose(&body);
}

static void test_ocdbt_btree__key_order(void **state)
{
    ur_ocdbt_btree_enc_entry e[2];
    ur_ocdbt_table t = {0, NULL};
    ur_ocdbt_btree_node node;
    ur_buf body;
    ur_err err;
    (void)state;
    memset(e, 0, sizeof e);
    e[0].key = (const uint8_t *)"b";
    e[0].key_len = 1;
    e[1].key = (const uint8_t *)"a";
    e[1].key_len = 1;
    ur_buf_init(&body, 0);
    assert_int_equal(ur_ocdbt_btree_encode(&body, 0, &t, e, 2, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_btree_decode(&node, &body, "", 0, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "key order"));
    e[1].key = (const uint8_t *)"b"; /* duplicate */
    ur_buf_init(&body, 0);
    assert_int_equal(ur_ocdbt_btree_encode(&body, 0, &t, e, 2, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_btree_decode(&node, &body, "", 0, &err), UR_ECORRUPT);
}

static void test_ocdbt_btree__table_edge_cases(void **state)
{
    static char s0[] = "", s1[] = "a", s2[] = "ab", s3[] = "ac", s4[] = "a/x", s5[] = "a/y";
    ur_ocdbt_file_id f[6] = {{s5, 3, 2}, {s2, 2, 0}, {s0, 0, 0},
                             {s3, 2, 0}, {s1, 1, 0}, {s4, 3, 2}};
    ur_ocdbt_table t = {6, f}, d;
    ur_buf b;
    ur_rd rd;
    (void)state;
    ur_ocdbt_table_sort(&t);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_ocdbt_table_encode(&b, &t, NULL), UR_OK);
    ur_rd_init(&rd, b.data, b.len);
    assert_int_equal(ur_ocdbt_table_decode(&d, &rd, "t/", 2, NULL), UR_OK);
    assert_int_equal(ur_rd_finish(&rd, "t", NULL), UR_OK);
    assert_int_equal(d.n, 6);
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(d.f[i].len, t.f[i].len + 2);
        assert_int_equal(d.f[i].base_len, t.f[i].base_len + 2);
        assert_memory_equal(d.f[i].path + 2, t.f[i].path, t.f[i].len);
    }
    ur_ocdbt_table_dispose(&d);
    for (size_t cut = 0; cut < b.len; cut++) {
        ur_rd_init(&rd, b.data, cut);
        assert_int_equal(ur_ocdbt_table_decode(&d, &rd, "", 0, NULL) == UR_OK &&
                             ur_rd_finish(&rd, "t", NULL) == UR_OK,
                         0);
        ur_ocdbt_table_dispose(&d);
    }
    ur_buf_dispose(&b);
}

/* A leaf of `n` entries like Orbax's one-node trees: "<i>/c" with a short distinct value
 * and "<i>/zarr.json" with one of three 100-byte values, every 7th chunk indirect. */
static void encode_big_leaf(ur_buf *body, size_t n)
{
    static char pd[] = "d/0123";
    ur_ocdbt_file_id f[1] = {{pd, 6, 0}};
    ur_ocdbt_table t = {1, f};
    ur_ocdbt_btree_enc_entry *e = ur_calloc(n, sizeof *e);
    char *keys = ur_malloc(n * 24), *small = ur_malloc(n * 12), big[3][100];
    assert_non_null(e);
    assert_non_null(keys);
    assert_non_null(small);
    for (int k = 0; k < 3; k++) {
        memset(big[k], 'a' + k, sizeof big[k]);
    }
    for (size_t i = 0; i < n; i++) {
        char *key = keys + 24 * i;
        int len = snprintf(key, 24, "p.%07zu/%s", i / 2, i % 2 ? "zarr.json" : "c");
        e[i].key = (const uint8_t *)key;
        e[i].key_len = (size_t)len;
        if (i % 2) {
            e[i].value = (const uint8_t *)big[(i / 2) % 3];
            e[i].value_len = sizeof big[0];
        } else if (i % 14 == 0) {
            e[i].indirect = 1;
            e[i].ref = (ur_ocdbt_ref){0, i, 10};
            e[i].value_len = 10;
        } else {
            snprintf(small + 12 * i, 12, "v%09zu", i);
            e[i].value = (const uint8_t *)small + 12 * i;
            e[i].value_len = 10;
        }
    }
    assert_int_equal(ur_ocdbt_btree_encode(body, 0, &t, e, n, NULL), UR_OK);
    ur_free(e);
    ur_free(keys);
    ur_free(small);
}

/* Decode `obj` (an envelope) from its body read piece by piece; its error in *err. */
static int decode_streamed(ur_ocdbt_btree_node *node, const ur_buf *obj, ur_err *err)
{
    ur_ocdbt_body_src src;
    int rc = ur_ocdbt_codec_open_src(&src, obj->data, obj->len, UR_OCDBT_MAGIC_BTREE, "btree node",
                                     NULL, err);
    if (rc == UR_OK) {
        rc = ur_ocdbt_btree_decode_src(node, &src, "", 0, err);
    }
    ur_ocdbt_codec_src_dispose(&src);
    return rc;
}

static void assert_same_node(const ur_ocdbt_btree_node *a, const ur_ocdbt_btree_node *b)
{
    assert_int_equal(a->height, b->height);
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->values.len, b->values.len);
    for (size_t i = 0; i < a->n; i++) {
        assert_int_equal(a->e[i].key_len, b->e[i].key_len);
        assert_memory_equal(a->keys + a->e[i].key_off, b->keys + b->e[i].key_off, a->e[i].key_len);
        assert_int_equal(a->e[i].indirect, b->e[i].indirect);
        assert_int_equal(a->e[i].value_len, b->e[i].value_len);
        if (a->e[i].indirect) {
            assert_int_equal(a->e[i].ref.offset, b->e[i].ref.offset);
        } else {
            assert_int_equal(a->e[i].value_off, b->e[i].value_off);
        }
    }
    assert_memory_equal(a->values.data, b->values.data, a->values.len);
}

/* A node decoded from its body read piece by piece (raw and zstd, a body of several MB whose
 * columns before the values do not fit the first piece) is the node decoded from the whole
 * body; a body cut short or with bytes after it fails the same way both ways. */
static void test_ocdbt_btree__streamed_decode_is_the_whole_decode(void **state)
{
    ur_ocdbt_btree_node whole, streamed;
    ur_buf body, copy, obj;
    ur_err e1, e2;
    (void)state;

    ur_buf_init(&body, 0);
    encode_big_leaf(&body, 200000); /* keys and columns ~3 MB, values ~1.3 MB */
    assert_true(body.len > ((size_t)4 << 20));
    for (int z = 0; z < 2; z++) {
        ur_buf_init(&copy, 0);
        ur_buf_init(&obj, 0);
        assert_int_equal(ur_buf_append(&copy, body.data, body.len, NULL), UR_OK);
        assert_int_equal(ur_ocdbt_btree_decode(&whole, &copy, "", 0, NULL), UR_OK);
        assert_int_equal(
            ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_BTREE, body.data, body.len, z, 1, NULL),
            UR_OK);
        assert_int_equal(decode_streamed(&streamed, &obj, NULL), UR_OK);
        assert_int_equal(whole.n, 200000);
        assert_true(whole.values.len < 200000 * 10); /* the 100-byte values held once */
        assert_same_node(&whole, &streamed);
        ur_ocdbt_btree_dispose(&whole);
        ur_ocdbt_btree_dispose(&streamed);
        ur_buf_dispose(&obj);
    }
    /* cut in the columns, in the values, one byte short; then three bytes too many */
    size_t cuts[] = {100, body.len / 2, body.len - 700000, body.len - 1, body.len + 3};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        for (int z = 0; z < 2; z++) {
            ur_buf_init(&copy, 0);
            ur_buf_init(&obj, 0);
            assert_int_equal(ur_buf_append(&copy, body.data, body.len, NULL), UR_OK);
            assert_int_equal(ur_buf_append(&copy, "xyz", 3, NULL), UR_OK);
            copy.len = cuts[c];
            assert_int_equal(
                ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_BTREE, copy.data, copy.len, z, 1, NULL),
                UR_OK);
            assert_int_equal(ur_ocdbt_btree_decode(&whole, &copy, "", 0, &e1), UR_ECORRUPT);
            assert_int_equal(decode_streamed(&streamed, &obj, &e2), UR_ECORRUPT);
            assert_string_equal(e1.msg, e2.msg);
            assert_int_equal(e1.offset, e2.offset);
            ur_buf_dispose(&obj);
        }
    }
    assert_non_null(strstr(e2.msg, "3 unexpected trailing bytes"));
    ur_buf_dispose(&body);
}

/* Every allocation of a streamed decode may fail: UR_ENOMEM, nothing leaked, then success. */
static void test_ocdbt_btree__streamed_decode_oom(void **state)
{
    ur_ocdbt_btree_node node;
    ur_buf body, obj;
    int rc = UR_ENOMEM;
    (void)state;
    ur_buf_init(&body, 0);
    ur_buf_init(&obj, 0);
    encode_big_leaf(&body, 40);
    assert_int_equal(
        ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_BTREE, body.data, body.len, 1, 1, NULL), UR_OK);
    for (long n = 0; rc == UR_ENOMEM && n < 200; n++) {
        ur_alloc_fail_after(n);
        rc = decode_streamed(&node, &obj, NULL);
        ur_alloc_fail_after(-1);
    }
    assert_int_equal(rc, UR_OK);
    assert_int_equal(node.n, 40);
    ur_ocdbt_btree_dispose(&node);
    ur_buf_dispose(&body);
    ur_buf_dispose(&obj);
}

static void test_ocdbt_btree__oom(void **state)
{
    ur_ocdbt_btree_node node;
    ur_buf body, copy;
    int rc = UR_ENOMEM;
    (void)state;
    ur_buf_init(&body, 0);
    encode_interior(&body);
    for (long n = 0; rc == UR_ENOMEM && n < 200; n++) {
        ur_buf_init(&copy, 0);
        assert_int_equal(ur_buf_append(&copy, body.data, body.len, NULL), UR_OK);
        ur_alloc_fail_after(n);
        rc = ur_ocdbt_btree_decode(&node, &copy, "x/", 2, NULL);
        ur_alloc_fail_after(-1);
        ur_buf_dispose(&copy);
    }
    assert_int_equal(rc, UR_OK);
    ur_ocdbt_btree_dispose(&node);
    ur_buf_dispose(&body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ocdbt_btree__golden_leaf),
        cmocka_unit_test(test_ocdbt_btree__repeated_values_held_once),
        cmocka_unit_test(test_ocdbt_btree__interior_roundtrip),
        cmocka_unit_test(test_ocdbt_btree__corrupt_every_offset),
        cmocka_unit_test(test_ocdbt_btree__key_order),
        cmocka_unit_test(test_ocdbt_btree__table_edge_cases),
        cmocka_unit_test(test_ocdbt_btree__oom),
        cmocka_unit_test(test_ocdbt_btree__streamed_decode_is_the_whole_decode),
        cmocka_unit_test(test_ocdbt_btree__streamed_decode_oom),
    };
    return cmocka_run_group_tests_name("ocdbt_btree", tests, NULL, NULL);
}
