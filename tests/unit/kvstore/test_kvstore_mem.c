/* The memory kvstore: ordering, overwrite, fault injection, and the OOM path. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/kvstore.h"

static int count_keys(void *ctx, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
    (*(int *)ctx)++;
    return 0;
}

static void test_kvstore_mem__overwrite_and_prefix_listing(void **state)
{
    ur_kvstore *kv = NULL;
    ur_buf b;
    int n = 0;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "k/2", "two", 3, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "k/1", "one", 3, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "j", "", 0, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "k/1", "uno", 3, NULL), UR_OK);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "k/1", &b, NULL), UR_OK);
    assert_memory_equal(b.data, "uno", 3);
    assert_int_equal(ur_kvstore_list(kv, "k/", count_keys, &n, NULL), UR_OK);
    assert_int_equal(n, 2);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

/* Create only if absent: UR_EEXIST for a present key, its value kept; a deleted key can be
 * created again. */
static void test_kvstore_mem__create_if_absent(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    ur_buf b;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "claim", "a", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "claim", "b", 1, &err), UR_EEXIST);
    assert_string_equal(err.where, "claim");
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "claim", &b, NULL), UR_OK);
    assert_memory_equal(b.data, "a", 1);
    assert_int_equal(ur_kvstore_delete(kv, "claim", NULL), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "claim", "c", 1, &err), UR_OK);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_kvstore_mem__injected_faults(void **state)
{
    ur_kvstore *kv = NULL;
    ur_buf b;
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    ur_kvstore_mem_fail_at(kv, 2, 2);
    assert_int_equal(ur_kvstore_write(kv, "a", "1", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "b", "2", 1, &err), UR_EIO);
    assert_string_equal(err.where, "b");
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "a", &b, &err), UR_OK);
    assert_int_equal(ur_kvstore_read(kv, "a", &b, &err), UR_EIO);
    assert_int_equal(ur_kvstore_read(kv, "b", &b, &err), UR_ENOTFOUND);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_kvstore_mem__oom_loop(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        ur_kvstore *kv = NULL;
        int rc;
        ur_alloc_fail_after(n);
        rc = ur_kvstore_mem_new(&kv, NULL);
        for (int i = 0; rc == UR_OK && i < 20; i++) {
            char key[16];
            snprintf(key, sizeof key, "key%02d", i);
            rc = ur_kvstore_write(kv, key, "value", 5, NULL);
        }
        ur_alloc_fail_after(-1);
        ur_kvstore_close(kv);
        if (rc == UR_OK) {
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvstore_mem__overwrite_and_prefix_listing),
        cmocka_unit_test(test_kvstore_mem__create_if_absent),
        cmocka_unit_test(test_kvstore_mem__injected_faults),
        cmocka_unit_test(test_kvstore_mem__oom_loop),
    };
    return cmocka_run_group_tests_name("kvstore_mem", tests, NULL, NULL);
}
