/* _CHECKPOINT_METADATA and array_metadatas: real fixtures, round trips, damaged, OOM. */
#include "ur_test.h"

#include "orbax/orbax_impl.h"
#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <string.h>

#define V0 UR_UPSTREAM_DATA_DIR "/orbax-compat/v0_checkpoints/"
#define COMPOSITE                                                                                 \
    V0 "composite_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata"
#define DIRECT                                                                                    \
    V0 "direct_checkpoint/checkpoint_metadata_present/pytree_checkpointable_has_metadata"

static void read_file(ur_buf *b, const char *path)
{
    ur_err err;
    ur_buf_init(b, 0);
    assert_int_equal(ur_fs_read_file(b, path, 1 << 20, &err), UR_OK);
}

static void test_orbax_ckpt_meta__composite(void **state)
{
    (void)state;
    ur_buf b;
    ur_err err;
    read_file(&b, COMPOSITE "/_CHECKPOINT_METADATA");
    ur_orbax_step_meta_doc *d = NULL;
    assert_int_equal(ur_orbax_ckpt_meta_parse(&d, (const char *)b.data, b.len, &err), UR_OK);
    const ur_orbax_step_meta *m = &d->meta;
    assert_int_equal(m->n_item_handlers, 2);
    assert_string_equal(m->item_names[0], "metadata");
    assert_string_equal(m->item_names[1], "state");
    assert_string_equal(m->item_handlers[1],
                        "orbax.checkpoint._src.handlers.pytree_checkpoint_handler."
                        "PyTreeCheckpointHandler");
    assert_true(m->has_init_timestamp);
    assert_true(m->has_commit_timestamp);
    /* Read through a double: within 2^8 of 1778718341620521635. */
    assert_true(m->commit_timestamp_nsecs > 1778718341620521635LL - 256 &&
                m->commit_timestamp_nsecs < 1778718341620521635LL + 256);
    assert_string_equal(m->custom_metadata_json, "{\"custom\": \"meta\"}"); /* as written */

    /* emit -> parse */
    ur_buf e;
    ur_buf_init(&e, 0);
    assert_int_equal(ur_orbax_ckpt_meta_emit(&e, m, &err), UR_OK);
    ur_orbax_step_meta_doc *d2 = NULL;
    assert_int_equal(ur_orbax_ckpt_meta_parse(&d2, (const char *)e.data, e.len, &err), UR_OK);
    assert_int_equal(d2->meta.n_item_handlers, 2);
    assert_string_equal(d2->meta.item_handlers[0], m->item_handlers[0]);
    assert_int_equal(d2->meta.commit_timestamp_nsecs, m->commit_timestamp_nsecs);
    assert_string_equal(d2->meta.custom_metadata_json, m->custom_metadata_json);
    ur_orbax_ckpt_meta_free(d2);
    ur_buf_dispose(&e);
    ur_orbax_ckpt_meta_free(d);
    ur_buf_dispose(&b);
}

static void test_orbax_ckpt_meta__direct_and_exact_emit(void **state)
{
    (void)state;
    ur_buf b;
    ur_err err;
    read_file(&b, DIRECT "/_CHECKPOINT_METADATA");
    ur_orbax_step_meta_doc *d = NULL;
    assert_int_equal(ur_orbax_ckpt_meta_parse(&d, (const char *)b.data, b.len, &err), UR_OK);
    assert_int_equal(d->meta.n_item_handlers, 1);
    assert_null(d->meta.item_names[0]);
    ur_orbax_ckpt_meta_free(d);
    ur_buf_dispose(&b);

    /* Exact bytes for exactly representable values, as Python's json.dumps writes them. */
    const char *names[] = {"items"};
    const char *handlers[] = {"orbax.checkpoint._src.handlers.standard_checkpoint_handler."
                              "StandardCheckpointHandler"};
    ur_orbax_step_meta m = {0};
    m.n_item_handlers = 1;
    m.item_names = names;
    m.item_handlers = handlers;
    m.has_init_timestamp = 1;
    m.init_timestamp_nsecs = 1000;
    m.has_commit_timestamp = 1;
    m.commit_timestamp_nsecs = 2000;
    ur_buf e;
    ur_buf_init(&e, 0);
    assert_int_equal(ur_orbax_ckpt_meta_emit(&e, &m, &err), UR_OK);
    assert_int_equal(ur_buf_append_byte(&e, 0, &err), UR_OK);
    assert_string_equal((const char *)e.data,
                        "{\"item_handlers\": {\"items\": \"orbax.checkpoint._src.handlers."
                        "standard_checkpoint_handler.StandardCheckpointHandler\"}, \"metrics\": "
                        "{}, \"performance_metrics\": {}, \"init_timestamp_nsecs\": 1000, "
                        "\"commit_timestamp_nsecs\": 2000, \"custom_metadata\": {}}");
    ur_buf_dispose(&e);
}

static void test_orbax_ckpt_meta__optional_and_damaged(void **state)
{
    (void)state;
    ur_orbax_step_meta_doc *d = NULL;
    ur_err err;
    assert_int_equal(ur_orbax_ckpt_meta_parse(&d, "{}", 2, &err), UR_OK);
    assert_int_equal(d->meta.n_item_handlers, 0);
    assert_false(d->meta.has_init_timestamp);
    assert_null(d->meta.custom_metadata_json);
    ur_orbax_ckpt_meta_free(d);
    /* custom_metadata kept as written (16.0 stays a float for Python), the first of two as
     * cJSON's lookup finds it */
    const char *two = "{\"custom_metadata\": {\"lora\": {\"lora_alpha\": 16.0}}, "
                      "\"custom_metadata\": {}}";
    assert_int_equal(ur_orbax_ckpt_meta_parse(&d, two, strlen(two), &err), UR_OK);
    assert_string_equal(d->meta.custom_metadata_json, "{\"lora\": {\"lora_alpha\": 16.0}}");
    ur_orbax_ckpt_meta_free(d);
    d = NULL;
    const char *bad[][2] = {
        {"{\"item_handlers\": 3}", "item_handlers is neither"},
        {"{\"item_handlers\": {\"items\": 1}}", "item_handlers['items'] is not a string"},
        {"{\"init_timestamp_nsecs\": -5}", "init_timestamp_nsecs is not"},
        {"{\"commit_timestamp_nsecs\": \"x\"}", "commit_timestamp_nsecs is not"},
        {"{\"custom_metadata\": [1]}", "custom_metadata is not an object"},
        {"{\"item_handlers\": ", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = ur_orbax_ckpt_meta_parse(&d, bad[i][0], strlen(bad[i][0]), &err);
        if (rc != UR_ECORRUPT || strstr(err.msg, bad[i][1]) == NULL) {
            fail_msg("case %zu: rc %d msg '%s'", i, rc, err.msg);
        }
        assert_null(d);
    }
}

static void test_orbax_ckpt_meta__array_metadatas(void **state)
{
    (void)state;
    ur_buf b;
    ur_err err;
    read_file(&b, COMPOSITE "/state/array_metadatas/process_0");
    ur_orbax_array_meta_list *l = NULL;
    assert_int_equal(ur_orbax_array_meta_parse(&l, (const char *)b.data, b.len, &err), UR_OK);
    assert_int_equal(l->n, 2);
    assert_string_equal(l->items[1].param_name, "b.c");
    assert_int_equal(l->items[1].write_rank, 1);
    assert_int_equal(l->items[1].write_shape[0], 3);
    assert_int_equal(l->items[1].chunk_shape[0], 3);
    assert_null(l->items[1].random_key_impl);
    ur_buf e;
    ur_buf_init(&e, 0);
    assert_int_equal(ur_orbax_array_meta_emit(&e, l->items, l->n, &err), UR_OK);
    assert_int_equal(e.len, b.len);
    assert_memory_equal(e.data, b.data, b.len);
    ur_buf_dispose(&e);
    ur_orbax_array_meta_free(l);
    ur_buf_dispose(&b);

    const char *rk = "{\"array_metadatas\": [{\"array_metadata\": {\"param_name\": \"k\", "
                     "\"write_shape\": [2], \"chunk_shape\": [2], \"ext_metadata\": "
                     "{\"random_key_impl\": \"threefry2x32\"}}}]}";
    assert_int_equal(ur_orbax_array_meta_parse(&l, rk, strlen(rk), &err), UR_OK);
    assert_string_equal(l->items[0].random_key_impl, "threefry2x32");
    ur_orbax_array_meta_free(l);
    l = NULL;
    const char *bad = "{\"array_metadatas\": [{\"array_metadata\": {\"param_name\": \"k\", "
                      "\"chunk_shape\": [2, -3]}}]}";
    assert_int_equal(ur_orbax_array_meta_parse(&l, bad, strlen(bad), &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "'k': chunk_shape"));
    assert_null(l);
}

static void test_orbax_ckpt_meta__oom(void **state)
{
    (void)state;
    ur_buf b;
    read_file(&b, COMPOSITE "/_CHECKPOINT_METADATA");
    for (long n = 0;; n++) {
        ur_orbax_step_meta_doc *d = NULL;
        ur_err err;
        ur_alloc_fail_after(n);
        int rc = ur_orbax_ckpt_meta_parse(&d, (const char *)b.data, b.len, &err);
        ur_alloc_fail_after(-1);
        ur_orbax_ckpt_meta_free(d);
        if (rc == UR_OK) {
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        assert_true(n < 100000);
    }
    ur_buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orbax_ckpt_meta__composite),
        cmocka_unit_test(test_orbax_ckpt_meta__direct_and_exact_emit),
        cmocka_unit_test(test_orbax_ckpt_meta__optional_and_damaged),
        cmocka_unit_test(test_orbax_ckpt_meta__array_metadatas),
        cmocka_unit_test(test_orbax_ckpt_meta__oom),
    };
    return cmocka_run_group_tests_name("orbax_ckpt_meta", tests, NULL, NULL);
}
