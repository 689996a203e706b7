/* ocdbt_manifest (+ config, version tree): golden vectors of spec §10.4, round trips,
 * corruption at every offset, OOM. */
#include "ur_test.h"

#include "ocdbt_format.h"
#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

/* spec §10.4: uncompressed manifest, one version, root leaf in d/000..0 */
static const char manifest_hex[] =
    "0cdb3a2a63000000000000000000000102030405060708090a0b0c0d0e0f0064808080040400"
    "012200642f3030303030303030303030303030303030303030303030303030303030303030"
    "010100008004560356800400002a36fe9c971700ba660cb1";
static const char empty_hex[] =
    "0cdb3a2a51000000000000000000000102030405060708090a0b0c0d0e0f0064808080040400"
    "01000001010000ffffffffffffffffff01ffffffffffffffffff0100000000002a36fe9c971700"
    "33a21cb4";

static size_t unhex(uint8_t *out, const char *hex)
{
    size_t n = strlen(hex) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

static void decode_obj(const uint8_t *p, size_t n, ur_ocdbt_manifest *m, ur_buf *body)
{
    ur_buf_init(body, 0);
    assert_int_equal(ur_ocdbt_codec_decode(body, p, n, UR_OCDBT_MAGIC_MANIFEST, "m", NULL, NULL),
                     UR_OK);
    assert_int_equal(ur_ocdbt_manifest_decode(m, body->data, body->len, NULL), UR_OK);
}

static void test_ocdbt_manifest__golden(void **state)
{
    uint8_t raw[256];
    size_t n = unhex(raw, manifest_hex);
    ur_ocdbt_manifest m;
    ur_buf body, re, obj;
    (void)state;
    assert_int_equal(n, 99);
    decode_obj(raw, n, &m, &body);
    assert_int_equal(m.config.uuid[15], 0x0f);
    assert_int_equal(m.config.max_inline_value_bytes, 100);
    assert_int_equal(m.config.max_decoded_node_bytes, 8388608);
    assert_int_equal(m.config.compression, 0);
    assert_int_equal(m.table.n, 1);
    assert_string_equal(m.table.f[0].path, "d/00000000000000000000000000000000");
    assert_int_equal(m.n_versions, 1);
    assert_int_equal(m.versions[0].generation, 1);
    assert_int_equal(m.versions[0].root.offset, 512);
    assert_int_equal(m.versions[0].root.length, 86);
    assert_int_equal(m.versions[0].stats.num_keys, 3);
    assert_int_equal(m.versions[0].stats.num_indirect_value_bytes, 512);
    assert_int_equal(m.versions[0].commit_time, 1700000000000000000ULL);
    assert_int_equal(m.n_vnodes, 0);
    /* encoding reproduces the bytes */
    ur_buf_init(&re, 0);
    ur_buf_init(&obj, 0);
    assert_int_equal(ur_ocdbt_manifest_encode(&re, &m, NULL), UR_OK);
    assert_int_equal(
        ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_MANIFEST, re.data, re.len, 0, 0, NULL), UR_OK);
    assert_int_equal(obj.len, n);
    assert_memory_equal(obj.data, raw, n);
    ur_ocdbt_manifest_dispose(&m);
    ur_buf_dispose(&body);
    ur_buf_dispose(&re);
    ur_buf_dispose(&obj);
}

static void test_ocdbt_manifest__golden_empty(void **state)
{
    uint8_t raw[256];
    size_t n = unhex(raw, empty_hex);
    ur_ocdbt_manifest m;
    ur_buf body, re;
    (void)state;
    decode_obj(raw, n, &m, &body);
    assert_true(ur_ocdbt_ref_is_missing(&m.versions[0].root));
    assert_int_equal(m.table.f[0].len, 0);
    ur_buf_init(&re, 0);
    assert_int_equal(ur_ocdbt_manifest_encode(&re, &m, NULL), UR_OK);
    assert_int_equal(re.len, body.len);
    assert_memory_equal(re.data, body.data, body.len);
    ur_ocdbt_manifest_dispose(&m);
    ur_buf_dispose(&body);
    ur_buf_dispose(&re);
}

/* A manifest with several inline versions, version nodes and base paths. */
static void build(ur_ocdbt_manifest *m, ur_ocdbt_file_id *files, ur_ocdbt_version *v,
                  ur_ocdbt_vnode_ref *vn)
{
    static char p0[] = "abc/d/x1", p1[] = "abc/d/x2", p2[] = "d/y";
    memset(m, 0, sizeof *m);
    ur_ocdbt_config_init_default(&m->config);
    m->config.version_tree_arity_log2 = 1;
    m->config.zstd_level = -5;
    files[0] = (ur_ocdbt_file_id){p0, 8, 4};
    files[1] = (ur_ocdbt_file_id){p1, 8, 4};
    files[2] = (ur_ocdbt_file_id){p2, 3, 0};
    m->table.f = files;
    m->table.n = 3;
    /* latest generation 17, a = 1: inline [17]; h1 range [13,16], h2 [9,12], h3 [1,8] */
    memset(v, 0, sizeof *v);
    v[0].generation = 17;
    v[0].root_height = 2;
    v[0].root = (ur_ocdbt_ref){2, 10, 100};
    v[0].stats = (ur_ocdbt_stats){5, 100, 7};
    v[0].commit_time = 123456789;
    memset(vn, 0, 2 * sizeof *vn);
    vn[0] = (ur_ocdbt_vnode_ref){8, {0, 0, 50}, 8, 1000, 3};
    vn[1] = (ur_ocdbt_vnode_ref){16, {1, 50, 60}, 4, 2000, 1};
    m->versions = v;
    m->n_versions = 1;
    m->vnodes = vn;
    m->n_vnodes = 2;
}

static void test_ocdbt_manifest__roundtrip(void **state)
{
    ur_ocdbt_file_id files[3];
    ur_ocdbt_version v[1];
    ur_ocdbt_vnode_ref vn[2];
    ur_ocdbt_manifest m, d;
    ur_buf body;
    (void)state;
    build(&m, files, v, vn);
    ur_buf_init(&body, 0);
    assert_int_equal(ur_ocdbt_manifest_encode(&body, &m, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_manifest_decode(&d, body.data, body.len, NULL), UR_OK);
    assert_int_equal(d.config.zstd_level, -5);
    assert_int_equal(d.table.n, 3);
    assert_string_equal(d.table.f[1].path, "abc/d/x2");
    assert_int_equal(d.table.f[1].base_len, 4);
    assert_int_equal(d.table.f[2].base_len, 0);
    assert_int_equal(d.n_versions, 1);
    assert_memory_equal(&d.versions[0], &v[0], sizeof v[0]);
    assert_int_equal(d.n_vnodes, 2);
    assert_int_equal(d.vnodes[1].generation, 16);
    assert_int_equal(d.vnodes[1].height, 1);
    assert_int_equal(d.vnodes[1].ref.offset, 50);
    assert_int_equal(d.vnodes[0].commit_time, 1000);
    ur_ocdbt_manifest_dispose(&d);

    /* a version node out of its allowed range is refused */
    vn[1].generation = 12;
    ur_buf_reset(&body);
    assert_int_equal(ur_ocdbt_manifest_encode(&body, &m, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_manifest_decode(&d, body.data, body.len, NULL), UR_ECORRUPT);
    ur_buf_dispose(&body);
}

static void test_ocdbt_manifest__corrupt_every_offset(void **state)
{
    ur_ocdbt_file_id files[3];
    ur_ocdbt_version v[1];
    ur_ocdbt_vnode_ref vn[2];
    ur_ocdbt_manifest m, d;
    ur_buf body;
    ur_err err;
    (void)state;
    build(&m, files, v, vn);
    ur_buf_init(&body, 0);
    assert_int_equal(ur_ocdbt_manifest_encode(&body, &m, NULL), UR_OK);
    for (size_t cut = 0; cut < body.len; cut++) {
        assert_int_equal(ur_ocdbt_manifest_decode(&d, body.data, cut, &err), UR_ECORRUPT);
        assert_true(err.offset <= body.len);
    }
    /* a flipped byte either still decodes (a value changed) or fails cleanly */
    for (size_t i = 0; i < body.len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            int rc;
            body.data[i] ^= (uint8_t)(1u << bit);
            rc = ur_ocdbt_manifest_decode(&d, body.data, body.len, &err);
            assert_true(rc == UR_OK || rc == UR_ECORRUPT);
            if (rc == UR_OK) {
                ur_ocdbt_manifest_dispose(&d);
            }
            body.data[i] ^= (uint8_t)(1u << bit);
        }
    }
    ur_buf_dispose(&body);
}

static void test_ocdbt_manifest__version_node_roundtrip(void **state)
{
    static char p[] = "d/v";
    ur_ocdbt_file_id f = {p, 3, 0};
    ur_ocdbt_version v[2];
    ur_ocdbt_vnode_ref c[2];
    ur_ocdbt_version_node node, d;
    ur_buf body;
    (void)state;
    memset(v, 0, sizeof v);
    memset(c, 0, sizeof c);
    v[0].generation = 17;
    v[1].generation = 18;
    v[0].root = (ur_ocdbt_ref){0, 1, 2};
    v[1].root = (ur_ocdbt_ref){0, 3, 4};
    memset(&node, 0, sizeof node);
    node.arity_log2 = 4;
    node.table.n = 1;
    node.table.f = &f;
    node.versions = v;
    node.n = 2;
    ur_buf_init(&body, 0);
    assert_int_equal(ur_ocdbt_version_node_encode(&body, &node, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_version_node_decode(&d, body.data, body.len, "base/", 5, NULL),
                     UR_OK);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.table.f[0].path, "base/d/v");
    assert_int_equal(d.table.f[0].base_len, 5);
    assert_int_equal(d.versions[1].root.length, 4);
    ur_ocdbt_version_node_dispose(&d);
    for (size_t cut = 0; cut < body.len; cut++) {
        assert_int_equal(ur_ocdbt_version_node_decode(&d, body.data, cut, "", 0, NULL),
                         UR_ECORRUPT);
    }
    /* interior (height 1, arity 16): children 16, 32 */
    c[0] = (ur_ocdbt_vnode_ref){16, {0, 0, 10}, 16, 5, 0};
    c[1] = (ur_ocdbt_vnode_ref){32, {0, 10, 10}, 16, 6, 0};
    node.height = 1;
    node.versions = NULL;
    node.children = c;
    ur_buf_reset(&body);
    assert_int_equal(ur_ocdbt_version_node_encode(&body, &node, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_version_node_decode(&d, body.data, body.len, "", 0, NULL), UR_OK);
    assert_int_equal(d.children[1].generation, 32);
    assert_int_equal(d.children[1].height, 0);
    ur_ocdbt_version_node_dispose(&d);
    c[1].generation = 31; /* not a multiple of the stride */
    ur_buf_reset(&body);
    assert_int_equal(ur_ocdbt_version_node_encode(&body, &node, NULL), UR_OK);
    assert_int_equal(ur_ocdbt_version_node_decode(&d, body.data, body.len, "", 0, NULL),
                     UR_ECORRUPT);
    ur_buf_dispose(&body);
}

static void test_ocdbt_manifest__config_limits(void **state)
{
    ur_ocdbt_config c;
    ur_buf b;
    ur_rd rd;
    (void)state;
    ur_ocdbt_config_init_default(&c);
    ur_buf_init(&b, 0);
    c.version_tree_arity_log2 = 17;
    assert_int_equal(ur_ocdbt_config_encode(&b, &c, NULL), UR_OK);
    ur_rd_init(&rd, b.data, b.len);
    assert_int_equal(ur_ocdbt_config_decode(&c, &rd, NULL), UR_ECORRUPT);
    ur_ocdbt_config_init_default(&c);
    c.zstd_level = 23;
    ur_buf_reset(&b);
    assert_int_equal(ur_ocdbt_config_encode(&b, &c, NULL), UR_OK);
    ur_rd_init(&rd, b.data, b.len);
    assert_int_equal(ur_ocdbt_config_decode(&c, &rd, NULL), UR_ECORRUPT);
    ur_ocdbt_config_init_default(&c);
    c.manifest_kind = 2;
    ur_buf_reset(&b);
    assert_int_equal(ur_ocdbt_config_encode(&b, &c, NULL), UR_OK);
    ur_rd_init(&rd, b.data, b.len);
    assert_int_equal(ur_ocdbt_config_decode(&c, &rd, NULL), UR_ECORRUPT);
    ur_buf_dispose(&b);
}

static void test_ocdbt_manifest__oom(void **state)
{
    ur_ocdbt_file_id files[3];
    ur_ocdbt_version v[1];
    ur_ocdbt_vnode_ref vn[2];
    ur_ocdbt_manifest m, d;
    ur_buf body;
    int rc = UR_ENOMEM;
    (void)state;
    build(&m, files, v, vn);
    ur_buf_init(&body, 0);
    assert_int_equal(ur_ocdbt_manifest_encode(&body, &m, NULL), UR_OK);
    for (long n = 0; rc == UR_ENOMEM && n < 100; n++) {
        ur_alloc_fail_after(n);
        rc = ur_ocdbt_manifest_decode(&d, body.data, body.len, NULL);
        ur_alloc_fail_after(-1);
    }
    assert_int_equal(rc, UR_OK);
    ur_ocdbt_manifest_dispose(&d);
    ur_buf_dispose(&body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ocdbt_manifest__golden),
        cmocka_unit_test(test_ocdbt_manifest__golden_empty),
        cmocka_unit_test(test_ocdbt_manifest__roundtrip),
        cmocka_unit_test(test_ocdbt_manifest__corrupt_every_offset),
        cmocka_unit_test(test_ocdbt_manifest__version_node_roundtrip),
        cmocka_unit_test(test_ocdbt_manifest__config_limits),
        cmocka_unit_test(test_ocdbt_manifest__oom),
    };
    return cmocka_run_group_tests_name("ocdbt_manifest", tests, NULL, NULL);
}
