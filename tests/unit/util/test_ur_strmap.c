/* The string -> index map: many keys, duplicates, keys that are prefixes of each other,
 * an allocation-failure loop. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/strmap.h"

#include <stdio.h>

static void test_ur_strmap__many_keys_round_trip(void **state)
{
    enum { N = 20000 };
    static char keys[N][16];
    ur_strmap m;
    size_t v = 0;
    (void)state;
    ur_strmap_init(&m);
    assert_int_equal(ur_strmap_get(&m, "x", 1, &v), 0);
    for (size_t i = 0; i < N; i++) {
        snprintf(keys[i], sizeof keys[i], "k%zu", i);
        assert_int_equal(ur_strmap_put(&m, keys[i], strlen(keys[i]), i, NULL, NULL), UR_OK);
    }
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(ur_strmap_get(&m, keys[i], strlen(keys[i]), &v), 1);
        assert_int_equal(v, i);
    }
    assert_int_equal(ur_strmap_get(&m, "k20000", 6, &v), 0);
    /* a prefix of a key is a different key */
    assert_int_equal(ur_strmap_get(&m, "k1234", 4, &v), 1);
    assert_int_equal(v, 123);
    ur_strmap_dispose(&m);
}

static void test_ur_strmap__duplicate_keeps_the_first(void **state)
{
    ur_strmap m;
    size_t v = 0, old = 0;
    (void)state;
    ur_strmap_init(&m);
    assert_int_equal(ur_strmap_put(&m, "a.b", 3, 7, NULL, NULL), UR_OK);
    assert_int_equal(ur_strmap_put(&m, "a.b", 3, 8, &old, NULL), 1);
    assert_int_equal(old, 7);
    assert_int_equal(ur_strmap_get(&m, "a.b", 3, &v), 1);
    assert_int_equal(v, 7);
    assert_int_equal(m.n, 1);
    ur_strmap_dispose(&m);
}

static void test_ur_strmap__out_of_memory_is_reported(void **state)
{
    static char keys[300][8];
    (void)state;
    for (long fail = 0;; fail++) {
        ur_strmap m;
        ur_err err;
        int rc = UR_OK;
        ur_strmap_init(&m);
        ur_alloc_fail_after(fail);
        for (size_t i = 0; i < 300 && rc == UR_OK; i++) {
            snprintf(keys[i], sizeof keys[i], "%zu", i);
            rc = ur_strmap_put(&m, keys[i], strlen(keys[i]), i, NULL, &err);
        }
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            size_t v;
            assert_int_equal(ur_strmap_get(&m, "299", 3, &v), 1);
            ur_strmap_dispose(&m);
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        ur_strmap_dispose(&m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_strmap__many_keys_round_trip),
        cmocka_unit_test(test_ur_strmap__duplicate_keeps_the_first),
        cmocka_unit_test(test_ur_strmap__out_of_memory_is_reported),
    };
    return cmocka_run_group_tests_name("ur_strmap", tests, NULL, NULL);
}
