/* The index set: elements found by their own keys across growth, a key added twice, keys
 * whose hashes collide (every probe path walked), the size limit, an allocation-failure
 * loop. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/idxset.h"
#include "unroll/strmap.h"

#include <stdio.h>

enum { N = 20000 };
static char names[N][16];

static int name_match(const void *ctx, size_t i, const void *key)
{
    (void)ctx;
    return strcmp(names[i], key) == 0;
}

static uint64_t name_hash(const void *ctx, size_t i)
{
    (void)ctx;
    return ur_strmap_hash(names[i], strlen(names[i]));
}

/* every key in one probe sequence */
static uint64_t same_hash(const void *ctx, size_t i)
{
    (void)ctx;
    (void)i;
    return 42;
}

static const ur_idxset_keys keys = {name_match, name_hash, NULL};
static const ur_idxset_keys colliding = {name_match, same_hash, NULL};

static uint64_t h(const char *s)
{
    return ur_strmap_hash(s, strlen(s));
}

static void test_ur_idxset__many_elements_round_trip(void **state)
{
    ur_idxset s;
    ur_err err;
    (void)state;
    ur_idxset_init(&s);
    assert_int_equal(ur_idxset_find(&s, &keys, h("k0"), "k0"), SIZE_MAX);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "k%zu", i);
        assert_int_equal(ur_idxset_add(&s, &keys, h(names[i]), i, names[i], NULL, &err), UR_OK);
    }
    assert_int_equal(s.n, N);
    assert_true(s.cap >= 2 * (size_t)N);
    for (size_t i = 0; i < N; i++) {
        assert_int_equal(ur_idxset_find(&s, &keys, h(names[i]), names[i]), i);
    }
    assert_int_equal(ur_idxset_find(&s, &keys, h("k20000"), "k20000"), SIZE_MAX);
    ur_idxset_dispose(&s);
    assert_int_equal(s.cap, 0);
}

static void test_ur_idxset__a_key_added_twice_keeps_the_first(void **state)
{
    ur_idxset s;
    ur_err err;
    size_t old = 0;
    (void)state;
    snprintf(names[0], sizeof names[0], "a.b");
    snprintf(names[1], sizeof names[1], "a.b");
    ur_idxset_init(&s);
    assert_int_equal(ur_idxset_add(&s, &keys, h("a.b"), 0, "a.b", NULL, &err), UR_OK);
    assert_int_equal(ur_idxset_add(&s, &keys, h("a.b"), 1, "a.b", &old, &err), 1);
    assert_int_equal(old, 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(ur_idxset_find(&s, &keys, h("a.b"), "a.b"), 0);
    ur_idxset_dispose(&s);
}

static void test_ur_idxset__colliding_hashes_are_told_apart(void **state)
{
    ur_idxset s;
    ur_err err;
    (void)state;
    ur_idxset_init(&s);
    for (size_t i = 0; i < 500; i++) {
        snprintf(names[i], sizeof names[i], "c%zu", i);
        assert_int_equal(ur_idxset_add(&s, &colliding, 42, i, names[i], NULL, &err), UR_OK);
    }
    for (size_t i = 0; i < 500; i++) {
        assert_int_equal(ur_idxset_find(&s, &colliding, 42, names[i]), i);
    }
    assert_int_equal(ur_idxset_find(&s, &colliding, 42, "c500"), SIZE_MAX);
    ur_idxset_dispose(&s);
}

static void test_ur_idxset__too_many_elements_refused(void **state)
{
    ur_idxset s;
    ur_err err;
    (void)state;
    ur_idxset_init(&s);
    assert_int_equal(ur_idxset_reserve(&s, &keys, UR_IDXSET_MAX + 1, &err), UR_EINVAL);
    assert_int_equal(s.cap, 0);
    assert_int_equal(ur_idxset_add(&s, &keys, h("x"), UR_IDXSET_MAX, "x", NULL, &err), UR_EINVAL);
    assert_int_equal(s.n, 0);
    ur_idxset_dispose(&s);
}

static void test_ur_idxset__out_of_memory_is_reported(void **state)
{
    (void)state;
    for (size_t i = 0; i < 300; i++) {
        snprintf(names[i], sizeof names[i], "%zu", i);
    }
    for (long fail = 0;; fail++) {
        ur_idxset s;
        ur_err err;
        int rc = UR_OK;
        ur_idxset_init(&s);
        ur_alloc_fail_after(fail);
        for (size_t i = 0; i < 300 && rc == UR_OK; i++) {
            rc = ur_idxset_add(&s, &keys, h(names[i]), i, names[i], NULL, &err);
        }
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            assert_int_equal(ur_idxset_find(&s, &keys, h("299"), "299"), 299);
            ur_idxset_dispose(&s);
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        /* what was added before the failure is still found */
        assert_int_equal(ur_idxset_find(&s, &keys, h("0"), "0"), s.n > 0 ? 0 : SIZE_MAX);
        ur_idxset_dispose(&s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_idxset__many_elements_round_trip),
        cmocka_unit_test(test_ur_idxset__a_key_added_twice_keeps_the_first),
        cmocka_unit_test(test_ur_idxset__colliding_hashes_are_told_apart),
        cmocka_unit_test(test_ur_idxset__too_many_elements_refused),
        cmocka_unit_test(test_ur_idxset__out_of_memory_is_reported),
    };
    return cmocka_run_group_tests_name("ur_idxset", tests, NULL, NULL);
}
