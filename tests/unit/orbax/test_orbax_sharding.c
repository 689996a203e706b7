/* _sharding: base64 names, NamedSharding / SingleDeviceSharding values, damaged files, OOM. */
#include "ur_test.h"

#include "orbax/orbax_impl.h"
#include "unroll/alloc.h"
#include "unroll/b64.h"
#include "unroll/fs.h"

#include <string.h>

#define V0_STATE                                                                                  \
    UR_UPSTREAM_DATA_DIR "/orbax-compat/v0_checkpoints/composite_checkpoint/"                     \
                         "checkpoint_metadata_present/pytree_checkpointable_has_metadata/state"

static void check_b64(const char *plain, const char *enc)
{
    ur_buf b;
    ur_err err;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_b64_encode(&b, plain, strlen(plain), UR_B64_URL, &err), UR_OK);
    assert_int_equal(b.len, strlen(enc));
    assert_memory_equal(b.data, enc, b.len);
    ur_buf_reset(&b);
    assert_int_equal(ur_b64_decode(&b, enc, strlen(enc), UR_B64_URL, &err), UR_OK);
    assert_int_equal(b.len, strlen(plain));
    assert_memory_equal(b.data, plain, b.len);
    ur_buf_dispose(&b);
}

static void test_orbax_sharding__base64(void **state)
{
    (void)state;
    /* Examples from orbax-layout.md §2.4. */
    check_b64("a", "YQ==");
    check_b64("b.c", "Yi5j");
    check_b64("step", "c3RlcA==");
    check_b64("params.params.decoder.layers.mlp.wi_0.kernel",
              "cGFyYW1zLnBhcmFtcy5kZWNvZGVyLmxheWVycy5tbHAud2lfMC5rZXJuZWw=");
    check_b64("\xfb\xff", "-_8="); /* the URL-safe characters */
    check_b64("", "");
    const char *bad[] = {"YQ=", "Y===", "YQ=a", "Y+Q=", "Y/Q=", "=AAA"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ur_buf b;
        ur_err err;
        ur_buf_init(&b, 0);
        assert_int_equal(ur_b64_decode(&b, bad[i], strlen(bad[i]), UR_B64_URL, &err), UR_ECORRUPT);
        ur_buf_dispose(&b);
    }
}

static void test_orbax_sharding__real_fixture(void **state)
{
    (void)state;
    ur_buf b;
    ur_err err;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, V0_STATE "/_sharding", 1 << 20, &err), UR_OK);
    ur_orbax_sharding_map *m = NULL;
    assert_int_equal(ur_orbax_sharding_parse(&m, (const char *)b.data, b.len, &err), UR_OK);
    assert_int_equal(m->n, 2);
    const ur_orbax_sharding *s = ur_orbax_sharding_find(m, "b.c");
    assert_non_null(s);
    assert_int_equal(s->kind, UR_ORBAX_SHARDING_SINGLE_DEVICE);
    assert_string_equal(s->device_str, "cpu:0");
    assert_null(ur_orbax_sharding_find(m, "b"));

    /* The file is reproduced byte for byte. */
    ur_buf e;
    ur_buf_init(&e, 0);
    assert_int_equal(ur_orbax_sharding_emit(&e, m->names, m->shardings, m->n, &err), UR_OK);
    assert_int_equal(e.len, b.len);
    assert_memory_equal(e.data, b.data, b.len);
    ur_buf_dispose(&e);
    ur_orbax_sharding_map_free(m);
    ur_buf_dispose(&b);
}

/* orbax-layout.md §2.4, mesh 2x4 ('data', 'model'), P('data', None, 'model'), plus a tuple. */
static const char named[] =
    "{\"sharding_type\": \"NamedSharding\", \"shape\": [2, 4], \"axis_names\": [\"data\", "
    "\"model\"], \"axis_types\": [\"AxisType.Auto\", \"AxisType.Auto\"], \"partition_spec\": "
    "[\"data\", null, [\"data\", \"model\"]], \"device_mesh\": {\"mesh\": [[{\"id\": 0}, {\"id\": "
    "1}, {\"id\": 2}, {\"id\": 3}], [{\"id\": 4}, {\"id\": 5}, {\"id\": 6}, {\"id\": 7}]]}}";

static void test_orbax_sharding__named(void **state)
{
    (void)state;
    ur_orbax_arena a;
    ur_orbax__arena_init(&a);
    ur_orbax_sharding s;
    ur_err err;
    assert_int_equal(ur_orbax_sharding_value_parse(&s, &a, named, &err), UR_OK);
    assert_int_equal(s.kind, UR_ORBAX_SHARDING_NAMED);
    assert_int_equal(s.mesh_rank, 2);
    assert_int_equal(s.mesh_shape[0], 2);
    assert_int_equal(s.mesh_shape[1], 4);
    assert_string_equal(s.mesh_axis_names[1], "model");
    assert_string_equal(s.mesh_axis_types[0], "AxisType.Auto");
    assert_true(s.has_device_mesh);
    assert_int_equal(s.spec_rank, 3);
    assert_string_equal(s.spec[0], "data");
    assert_null(s.spec[1]);
    assert_string_equal(s.spec[2], "data,model");

    /* emit -> parse (the device mesh is not written back: restore uses jax.devices()). */
    ur_buf e;
    ur_buf_init(&e, 0);
    assert_int_equal(ur_orbax_sharding_value_emit(&e, &s, &err), UR_OK);
    assert_int_equal(ur_buf_append_byte(&e, 0, &err), UR_OK);
    const char *want = "{\"sharding_type\": \"NamedSharding\", \"shape\": [2, 4], \"axis_names\": "
                       "[\"data\", \"model\"], \"axis_types\": [\"AxisType.Auto\", "
                       "\"AxisType.Auto\"], \"partition_spec\": [\"data\", null, [\"data\", "
                       "\"model\"]]}";
    assert_string_equal((const char *)e.data, want);
    ur_orbax_sharding s2;
    assert_int_equal(ur_orbax_sharding_value_parse(&s2, &a, (const char *)e.data, &err), UR_OK);
    assert_int_equal(s2.spec_rank, 3);
    assert_string_equal(s2.spec[2], "data,model");
    assert_false(s2.has_device_mesh);

    /* A mesh shape of -1 (inferred on restore) is accepted. */
    const char *inferred = "{\"sharding_type\": \"NamedSharding\", \"shape\": [-1], "
                           "\"axis_names\": [\"x\"], \"partition_spec\": [null, null]}";
    assert_int_equal(ur_orbax_sharding_value_parse(&s2, &a, inferred, &err), UR_OK);
    assert_int_equal(s2.mesh_shape[0], -1);
    assert_null(s2.mesh_axis_types[0]);
    ur_buf_dispose(&e);
    ur_orbax__arena_dispose(&a);
}

static const char *const damaged[][2] = {
    {"{\"YQ==\": 3}", "'a': value is not a string"},
    {"{\"YQ=\": \"\"}", "member 'YQ=' is not a base64"},
    {"{\"YQ==\": \"{\"}", "'a': sharding: invalid JSON"},
    {"{\"YQ==\": \"{}\"}", "'a': sharding has no \"sharding_type\""},
    {"{\"YQ==\": \"{\\\"sharding_type\\\": \\\"SingleDeviceSharding\\\"}\"}",
     "'a': SingleDeviceSharding has no \"device_str\""},
    {"{\"YQ==\": \"{\\\"sharding_type\\\": \\\"NamedSharding\\\", \\\"shape\\\": [2], "
     "\\\"axis_names\\\": [\\\"x\\\", \\\"y\\\"], \\\"partition_spec\\\": []}\"}",
     "'a': NamedSharding: mesh shape has 1 axes but axis_names has 2"},
    {"{\"YQ==\": \"{\\\"sharding_type\\\": \\\"NamedSharding\\\", \\\"shape\\\": [2], "
     "\\\"axis_names\\\": [\\\"x\\\"], \\\"partition_spec\\\": [3]}\"}",
     "'a': partition_spec entries must be"},
    {"{\"YQ==\": \"{\\\"sharding_type\\\": \\\"NamedSharding\\\", \\\"shape\\\": [\\\"2\\\"], "
     "\\\"axis_names\\\": [\\\"x\\\"], \\\"partition_spec\\\": []}\"}",
     "'a': NamedSharding: mesh shape[0]"},
    {"[]", "_sharding: not a JSON object"},
};

static void test_orbax_sharding__damaged(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof damaged / sizeof damaged[0]; i++) {
        ur_orbax_sharding_map *m = NULL;
        ur_err err;
        ur_err_clear(&err);
        int rc = ur_orbax_sharding_parse(&m, damaged[i][0], strlen(damaged[i][0]), &err);
        if (rc != UR_ECORRUPT || strstr(err.msg, damaged[i][1]) == NULL) {
            fail_msg("case %zu: rc %d msg '%s', expected '%s'", i, rc, err.msg, damaged[i][1]);
        }
        assert_null(m);
    }
    /* An unknown sharding type is valid JSON we cannot use: unsupported, naming the array. */
    ur_orbax_sharding_map *m = NULL;
    ur_err err;
    const char *pos = "{\"Yi5j\": \"{\\\"sharding_type\\\": \\\"PositionalSharding\\\"}\"}";
    assert_int_equal(ur_orbax_sharding_parse(&m, pos, strlen(pos), &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "'b.c'"));
    /* An empty member means "no sharding", as Orbax reads it. */
    const char *empty = "{\"YQ==\": \"\"}";
    assert_int_equal(ur_orbax_sharding_parse(&m, empty, strlen(empty), &err), UR_OK);
    assert_int_equal(ur_orbax_sharding_find(m, "a")->kind, UR_ORBAX_SHARDING_ABSENT);
    ur_orbax_sharding_map_free(m);
}

static void test_orbax_sharding__oom(void **state)
{
    (void)state;
    ur_buf file;
    ur_err err;
    ur_buf_init(&file, 0);
    const char *names[] = {"params.a", "b"};
    ur_orbax_sharding sh[2];
    ur_orbax_arena a;
    ur_orbax__arena_init(&a);
    assert_int_equal(ur_orbax_sharding_value_parse(&sh[0], &a, named, &err), UR_OK);
    sh[1] = sh[0];
    assert_int_equal(ur_orbax_sharding_emit(&file, names, sh, 2, &err), UR_OK);
    for (long n = 0;; n++) {
        ur_orbax_sharding_map *m = NULL;
        ur_alloc_fail_after(n);
        int rc = ur_orbax_sharding_parse(&m, (const char *)file.data, file.len, &err);
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            assert_int_equal(m->n, 2);
            assert_string_equal(m->names[0], "params.a");
            assert_string_equal(m->shardings[1].spec[2], "data,model");
            ur_orbax_sharding_map_free(m);
            break;
        }
        assert_null(m);
        assert_int_equal(rc, UR_ENOMEM);
        assert_true(n < 100000);
    }
    ur_orbax__arena_dispose(&a);
    ur_buf_dispose(&file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orbax_sharding__base64),
        cmocka_unit_test(test_orbax_sharding__real_fixture),
        cmocka_unit_test(test_orbax_sharding__named),
        cmocka_unit_test(test_orbax_sharding__damaged),
        cmocka_unit_test(test_orbax_sharding__oom),
    };
    return cmocka_run_group_tests_name("orbax_sharding", tests, NULL, NULL);
}
