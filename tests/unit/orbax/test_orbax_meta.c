/* _METADATA parse/emit: real fixtures, round trips, damaged files, OOM. */
#include "ur_test.h"

#include "orbax/orbax_impl.h"
#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define V0_STATE                                                                                  \
    UR_UPSTREAM_DATA_DIR "/orbax-compat/v0_checkpoints/composite_checkpoint/"                     \
                         "checkpoint_metadata_present/pytree_checkpointable_has_metadata/state"

static const char maxtext_meta[] =
    "{\"tree_metadata\": {"
    "\"('step',)\": {\"key_metadata\": [{\"key\": \"step\", \"key_type\": 2}], "
    "\"value_metadata\": {\"value_type\": \"scalar\", \"skip_deserialize\": false}}, "
    "\"('params', 'params', 'decoder', 'layers', 'mlp', 'wi_0', 'kernel')\": {\"key_metadata\": "
    "[{\"key\": \"params\", \"key_type\": 2}, {\"key\": \"params\", \"key_type\": 2}, "
    "{\"key\": \"decoder\", \"key_type\": 2}, {\"key\": \"layers\", \"key_type\": 2}, "
    "{\"key\": \"mlp\", \"key_type\": 2}, {\"key\": \"wi_0\", \"key_type\": 2}, "
    "{\"key\": \"kernel\", \"key_type\": 2}], \"value_metadata\": {\"value_type\": \"jax.Array\", "
    "\"skip_deserialize\": false, \"write_shape\": [4096, 16, 3584]}}, "
    "\"('opt_state', '1')\": {\"key_metadata\": [{\"key\": \"opt_state\", \"key_type\": 2}, "
    "{\"key\": \"1\", \"key_type\": 1}], \"value_metadata\": {\"value_type\": \"None\", "
    "\"skip_deserialize\": true}}, "
    "\"('opt_state', '0')\": {\"key_metadata\": [{\"key\": \"opt_state\", \"key_type\": 2}, "
    "{\"key\": \"0\", \"key_type\": 1}], \"value_metadata\": {\"value_type\": \"Dict\", "
    "\"skip_deserialize\": true}}}, "
    "\"use_ocdbt\": true, \"use_zarr3\": false, \"store_array_data_equal_to_fill_value\": true, "
    "\"custom_metadata\": null}";

static void read_fixture(ur_buf *b, const char *path)
{
    ur_err err;
    ur_buf_init(b, 0);
    assert_int_equal(ur_fs_read_file(b, path, 1 << 20, &err), UR_OK);
}

static void test_orbax_meta__real_fixture(void **state)
{
    (void)state;
    ur_buf b;
    read_fixture(&b, V0_STATE "/_METADATA");
    ur_orbax_meta *m = NULL;
    ur_err err;
    assert_int_equal(ur_orbax_meta_parse(&m, (const char *)b.data, b.len, &err), UR_OK);
    assert_int_equal(m->n_leaves, 2);
    assert_string_equal(m->leaves[0].name, "a");
    ur_buf kp;
    ur_buf_init(&kp, 0);
    assert_int_equal(ur_orbax_tree_keypath(&kp, m->leaves[0].path, m->leaves[0].depth, &err),
                     UR_OK);
    assert_int_equal(ur_buf_append_byte(&kp, 0, &err), UR_OK);
    assert_string_equal((const char *)kp.data, "('a',)"); /* the _METADATA key, written again */
    ur_buf_dispose(&kp);
    assert_int_equal(m->leaves[0].depth, 1);
    assert_int_equal(m->leaves[0].path[0].type, UR_ORBAX_KEY_DICT);
    assert_int_equal(m->leaves[0].value_type, UR_ORBAX_VALUE_JAX_ARRAY);
    assert_int_equal(m->leaves[0].write_shape_rank, 1);
    assert_int_equal(m->leaves[0].write_shape[0], 8);
    assert_string_equal(m->leaves[1].name, "b.c");
    assert_int_equal(m->leaves[1].depth, 2);
    assert_string_equal(m->leaves[1].path[1].key, "c");
    assert_int_equal(m->use_ocdbt, 1);
    assert_int_equal(m->use_zarr3, 0);
    assert_int_equal(m->store_fill, 1);
    assert_null(m->custom_metadata_json);

    /* Orbax's own file is reproduced byte for byte. */
    ur_buf e;
    ur_buf_init(&e, 0);
    assert_int_equal(ur_orbax_meta_emit(&e, m, &err), UR_OK);
    assert_int_equal(e.len, b.len);
    assert_memory_equal(e.data, b.data, b.len);
    ur_buf_dispose(&e);
    ur_orbax_meta_free(m);
    ur_buf_dispose(&b);
}

static void test_orbax_meta__tree_order_and_placeholders(void **state)
{
    (void)state;
    ur_orbax_meta *m = NULL;
    ur_err err;
    assert_int_equal(ur_orbax_meta_parse(&m, maxtext_meta, strlen(maxtext_meta), &err), UR_OK);
    assert_int_equal(m->n_leaves, 4);
    /* Sorted by key path: opt_state.0, opt_state.1, params..., step. */
    assert_string_equal(m->leaves[0].name, "opt_state.0");
    assert_int_equal(m->leaves[0].value_type, UR_ORBAX_VALUE_EMPTY_DICT);
    assert_true(m->leaves[0].skip_deserialize);
    assert_int_equal(m->leaves[0].path[1].type, UR_ORBAX_KEY_SEQUENCE);
    assert_string_equal(m->leaves[1].name, "opt_state.1");
    assert_int_equal(m->leaves[1].value_type, UR_ORBAX_VALUE_NONE);
    assert_string_equal(m->leaves[2].name, "params.params.decoder.layers.mlp.wi_0.kernel");
    assert_int_equal(m->leaves[2].depth, 7);
    assert_int_equal(m->leaves[2].write_shape_rank, 3);
    assert_int_equal(m->leaves[2].write_shape[2], 3584);
    assert_string_equal(m->leaves[3].name, "step");
    assert_int_equal(m->leaves[3].value_type, UR_ORBAX_VALUE_SCALAR);
    assert_int_equal(m->leaves[3].write_shape_rank, -1);

    /* emit -> parse gives the same tree. */
    ur_buf e;
    ur_buf_init(&e, 0);
    assert_int_equal(ur_orbax_meta_emit(&e, m, &err), UR_OK);
    ur_orbax_meta *m2 = NULL;
    assert_int_equal(ur_orbax_meta_parse(&m2, (const char *)e.data, e.len, &err), UR_OK);
    assert_int_equal(m2->n_leaves, m->n_leaves);
    for (size_t i = 0; i < m->n_leaves; i++) {
        assert_string_equal(m2->leaves[i].name, m->leaves[i].name);
        assert_int_equal(m2->leaves[i].depth, m->leaves[i].depth);
        for (size_t k = 0; k < m->leaves[i].depth; k++) {
            assert_string_equal(m2->leaves[i].path[k].key, m->leaves[i].path[k].key);
            assert_int_equal(m2->leaves[i].path[k].type, m->leaves[i].path[k].type);
        }
        assert_int_equal(m2->leaves[i].value_type, m->leaves[i].value_type);
        assert_int_equal(m2->leaves[i].skip_deserialize, m->leaves[i].skip_deserialize);
        assert_int_equal(m2->leaves[i].write_shape_rank, m->leaves[i].write_shape_rank);
    }
    ur_orbax_meta_free(m2);
    ur_buf_dispose(&e);
    ur_orbax_meta_free(m);
}

static void test_orbax_meta__numeric_index_order(void **state)
{
    (void)state;
    /* List indices sort as integers: 2 before 10. */
    ur_buf j;
    ur_buf_init(&j, 0);
    ur_err err;
    assert_int_equal(ur_buf_append_str(&j, "{\"tree_metadata\": {", &err), UR_OK);
    for (int i = 10; i >= 0; i--) {
        assert_int_equal(ur_buf_printf(&j, &err,
                                       "%s\"('l', '%d')\": {\"key_metadata\": [{\"key\": \"l\", "
                                       "\"key_type\": 2}, {\"key\": \"%d\", \"key_type\": 1}], "
                                       "\"value_metadata\": {\"value_type\": \"np.ndarray\", "
                                       "\"skip_deserialize\": false}}",
                                       i == 10 ? "" : ", ", i, i),
                         UR_OK);
    }
    assert_int_equal(ur_buf_append_str(&j, "}}", &err), UR_OK);
    ur_orbax_meta *m = NULL;
    assert_int_equal(ur_orbax_meta_parse(&m, (const char *)j.data, j.len, &err), UR_OK);
    assert_int_equal(m->n_leaves, 11);
    for (int i = 0; i <= 10; i++) {
        char name[16];
        snprintf(name, sizeof name, "l.%d", i);
        assert_string_equal(m->leaves[i].name, name);
    }
    assert_int_equal(m->use_ocdbt, -1); /* absent: detect */
    assert_int_equal(m->use_zarr3, 0);
    ur_orbax_meta_free(m);
    ur_buf_dispose(&j);
}

/* Many leaves are sorted on two threads (halves merged): 20,000 dict entries in a scrambled
 * order and a list written backwards come out in tree order, and a duplicate path is still
 * refused wherever the halves put it. */
static void many_leaves(ur_buf *j, int n, int dup)
{
    ur_err err;
    ur_buf_reset(j);
    assert_int_equal(ur_buf_append_str(j, "{\"tree_metadata\": {", &err), UR_OK);
    for (int i = 0; i < n + 3 + (dup >= 0); i++) {
        char k1[8], k2[16];
        int t2 = 2;
        if (i < n) {
            snprintf(k1, sizeof k1, "d");
            snprintf(k2, sizeof k2, "k%05d", (int)(((long)i * 7919) % n));
        } else if (i < n + 3) {
            snprintf(k1, sizeof k1, "l");
            snprintf(k2, sizeof k2, "%d", n + 2 - i);
            t2 = 1;
        } else {
            snprintf(k1, sizeof k1, "d");
            snprintf(k2, sizeof k2, "k%05d", dup);
        }
        assert_int_equal(ur_buf_printf(j, &err,
                                       "%s\"('%s', '%s')\": {\"key_metadata\": [{\"key\": "
                                       "\"%s\", \"key_type\": 2}, {\"key\": \"%s\", "
                                       "\"key_type\": %d}], \"value_metadata\": {\"value_type\": "
                                       "\"np.ndarray\", \"skip_deserialize\": false}}",
                                       i ? ", " : "", k1, k2, k1, k2, t2),
                         UR_OK);
    }
    assert_int_equal(ur_buf_append_str(j, "}}", &err), UR_OK);
}

static void test_orbax_meta__many_leaves_sorted(void **state)
{
    const int n = 20000;
    ur_orbax_meta *m = NULL;
    ur_buf j;
    ur_err err;
    (void)state;
    ur_buf_init(&j, 0);
    many_leaves(&j, n, -1);
    assert_int_equal(ur_orbax_meta_parse(&m, (const char *)j.data, j.len, &err), UR_OK);
    assert_int_equal(m->n_leaves, n + 3);
    for (int i = 0; i < n + 3; i++) {
        char name[16];
        if (i < n) {
            snprintf(name, sizeof name, "d.k%05d", i);
        } else {
            snprintf(name, sizeof name, "l.%d", i - n);
        }
        assert_string_equal(m->leaves[i].name, name);
    }
    ur_orbax_meta_free(m);
    for (int dup = 0; dup < n; dup += n / 4 - 1) {
        m = NULL;
        many_leaves(&j, n, dup);
        assert_int_equal(ur_orbax_meta_parse(&m, (const char *)j.data, j.len, &err), UR_ECORRUPT);
        assert_non_null(strstr(err.msg, "duplicate key path"));
        assert_null(m);
    }
    ur_buf_dispose(&j);
}

/* ---- ur_orbax__emit_pieces: two threads, pieces sunk in order, the first failure ---- */

typedef struct {
    size_t fail_emit;  /* the piece whose emission fails (SIZE_MAX: none) */
    size_t fail_sink;  /* the sink call that fails */
    size_t per;
    size_t sinks;      /* sink calls so far (one thread at a time) */
    ur_buf out;
} pieces_case;

static int emit_numbers(const void *src, ur_buf *out, size_t lo, size_t hi, ur_err *err)
{
    const pieces_case *c = src;
    if (lo / c->per == c->fail_emit) {
        return ur_err_set(err, UR_EIO, "emit %zu failed", lo / c->per);
    }
    for (size_t i = lo; i < hi; i++) {
        int rc = ur_buf_printf(out, err, "%zu,", i);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

static int sink_numbers(void *ctx, const void *data, size_t n, ur_err *err)
{
    pieces_case *c = ctx;
    size_t call = c->sinks++;
    if (call == c->fail_sink) {
        return ur_err_set(err, UR_EIO, "sink %zu failed", call);
    }
    return ur_buf_append(&c->out, data, n, err);
}

/* The text pieces [0, upto) would give, emitted by one thread. */
static void numbers_upto(ur_buf *b, size_t n)
{
    ur_err err;
    ur_buf_reset(b);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ur_buf_printf(b, &err, "%zu,", i), UR_OK);
    }
}

static void test_orbax_meta__emit_pieces(void **state)
{
    const size_t per = 7, sizes[] = {0, 1, 6, 7, 8, 14, 15, 7 * 40 + 3};
    ur_buf want;
    (void)state;
    ur_buf_init(&want, 0);
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        size_t n = sizes[t], n_pieces = (n + per - 1) / per;
        /* f: the failing piece (n_pieces: none); kind 0 emit, 1 sink, 2 both (sink first) */
        for (size_t f = 0; f <= n_pieces; f++) {
            for (int kind = 0; kind < 3; kind++) {
                pieces_case c = {SIZE_MAX, SIZE_MAX, per, 0, {0}};
                ur_err err;
                int rc;
                if (f == n_pieces && kind > 0) {
                    continue;
                }
                if (f < n_pieces) {
                    c.fail_emit = kind == 0 ? f : kind == 2 ? f + 1 : SIZE_MAX;
                    c.fail_sink = kind >= 1 ? f : SIZE_MAX;
                }
                ur_buf_init(&c.out, 0);
                ur_err_clear(&err);
                rc = ur_orbax__emit_pieces(&c, n, per, emit_numbers, sink_numbers, &c, &err);
                /* everything before the failing piece is sunk, in order; nothing after it */
                numbers_upto(&want, f < n_pieces ? f * per : n);
                assert_int_equal(c.out.len, want.len);
                if (want.len) {
                    assert_memory_equal(c.out.data, want.data, want.len);
                }
                if (f == n_pieces) {
                    assert_int_equal(rc, UR_OK);
                } else {
                    char msg[64];
                    snprintf(msg, sizeof msg, "%s %zu failed", kind == 0 ? "emit" : "sink", f);
                    assert_int_equal(rc, UR_EIO);
                    assert_string_equal(err.msg, msg);
                }
                ur_buf_dispose(&c.out);
            }
        }
    }
    ur_buf_dispose(&want);
}

static const char *const damaged[][2] = {
    {"{\"tree_metadata\": {", "invalid JSON"},
    {"[]", "not a JSON object"},
    {"{}", "tree_metadata is missing"},
    {"{\"tree_metadata\": {}}", "empty tree_metadata"},
    {"{\"tree_metadata\": {\"('a',)\": 3}}", "('a',): entry is not an object"},
    {"{\"tree_metadata\": {\"('a',)\": {\"value_metadata\": {}}}}", "key_metadata is missing"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 3}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}}}",
     "key_type\" 1 or 2"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": 7, \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}}}",
     "key_metadata[0]"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": 5, \"skip_deserialize\": false}}}}",
     "('a',): value_type is missing or not a string"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\"}}}}",
     "skip_deserialize is missing"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false, "
     "\"write_shape\": [4, -1]}}}}",
     "('a',): write_shape: dimension 1"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false, "
     "\"write_shape\": [1e30]}}}}",
     "write_shape: dimension 0"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false, "
     "\"write_shape\": \"8\"}}}}",
     "write_shape: expected a list"},
    {"{\"tree_metadata\": {\"('l', '1')\": {\"key_metadata\": [{\"key\": \"l\", \"key_type\": 2}, "
     "{\"key\": \"1\", \"key_type\": 1}], \"value_metadata\": {\"value_type\": \"jax.Array\", "
     "\"skip_deserialize\": false}}}}",
     "('l', '1'): list index 1 out of sequence"},
    {"{\"tree_metadata\": {\"('l', 'x')\": {\"key_metadata\": [{\"key\": \"l\", \"key_type\": 2}, "
     "{\"key\": \"x\", \"key_type\": 1}], \"value_metadata\": {\"value_type\": \"jax.Array\", "
     "\"skip_deserialize\": false}}}}",
     "list index 'x' is not"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}, "
     "\"x\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}}}",
     "duplicate key path"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}, "
     "\"('0',)\": {\"key_metadata\": [{\"key\": \"0\", \"key_type\": 1}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}}}",
     "mixes list indices and dict keys"},
    {"{\"tree_metadata\": {\"('a',)\": {\"key_metadata\": [{\"key\": \"a\", \"key_type\": 2}], "
     "\"value_metadata\": {\"value_type\": \"jax.Array\", \"skip_deserialize\": false}}}, "
     "\"use_zarr3\": \"yes\"}",
     "use_zarr3 is not a bool"},
};

static void test_orbax_meta__damaged(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof damaged / sizeof damaged[0]; i++) {
        ur_orbax_meta *m = NULL;
        ur_err err;
        ur_err_clear(&err);
        int rc = ur_orbax_meta_parse(&m, damaged[i][0], strlen(damaged[i][0]), &err);
        if (rc != UR_ECORRUPT || strstr(err.msg, damaged[i][1]) == NULL) {
            fail_msg("case %zu: rc %d msg '%s', expected '%s'", i, rc, err.msg, damaged[i][1]);
        }
        assert_null(m);
    }
}

static void test_orbax_meta__truncated_everywhere(void **state)
{
    (void)state;
    size_t n = strlen(maxtext_meta);
    for (size_t cut = 0; cut < n; cut++) {
        ur_orbax_meta *m = NULL;
        ur_err err;
        int rc = ur_orbax_meta_parse(&m, maxtext_meta, cut, &err);
        assert_int_equal(rc, UR_ECORRUPT);
        assert_null(m);
    }
}

static void test_orbax_meta__oom(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        ur_orbax_meta *m = NULL;
        ur_err err;
        ur_buf e;
        ur_buf_init(&e, 0);
        ur_alloc_fail_after(n);
        int rc = ur_orbax_meta_parse(&m, maxtext_meta, strlen(maxtext_meta), &err);
        if (rc == UR_OK) {
            rc = ur_orbax_meta_emit(&e, m, &err);
        }
        ur_alloc_fail_after(-1);
        ur_buf_dispose(&e);
        ur_orbax_meta_free(m);
        if (rc == UR_OK) {
            assert_true(n > 3);
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        assert_true(n < 100000);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orbax_meta__real_fixture),
        cmocka_unit_test(test_orbax_meta__tree_order_and_placeholders),
        cmocka_unit_test(test_orbax_meta__numeric_index_order),
        cmocka_unit_test(test_orbax_meta__many_leaves_sorted),
        cmocka_unit_test(test_orbax_meta__emit_pieces),
        cmocka_unit_test(test_orbax_meta__damaged),
        cmocka_unit_test(test_orbax_meta__truncated_everywhere),
        cmocka_unit_test(test_orbax_meta__oom),
    };
    return cmocka_run_group_tests_name("orbax_meta", tests, NULL, NULL);
}
