/* ur_grow: the one way a growing array gets room for one more element; ur_grow_to, for room
 * for n (scratch sized for the largest use so far). */
#include "ur_test.h"

#include "unroll/alloc.h"

#include <stdint.h>

static void test_ur_grow__first_then_doubles(void **state)
{
    int *v = NULL, *g;
    size_t cap = 0;
    (void)state;
    for (size_t n = 0; n < 100; n++) {
        size_t before = cap;
        g = ur_grow(v, &cap, n, sizeof *g, 8);
        assert_non_null(g);
        assert_true(cap > n);
        /* room is only made when the array is full: 8, 16, 32, 64, 128 */
        assert_int_equal(cap, n < before ? before : before == 0 ? 8 : 2 * before);
        if (n < before) {
            assert_ptr_equal(g, v);
        }
        v = g;
        v[n] = (int)n;
    }
    assert_int_equal(cap, 128);
    for (int n = 0; n < 100; n++) {
        assert_int_equal(v[n], n);
    }
    ur_free(v);
}

static void test_ur_grow__out_of_memory_leaves_the_array(void **state)
{
    size_t cap = 0;
    int *v = ur_grow(NULL, &cap, 0, sizeof *v, 4);
    (void)state;
    assert_non_null(v);
    v[3] = 7;
    ur_alloc_fail_after(0);
    assert_null(ur_grow(v, &cap, 4, sizeof *v, 4));
    ur_alloc_fail_after(-1);
    assert_int_equal(cap, 4);
    assert_int_equal(v[3], 7);
    ur_free(v);
}

static void test_ur_grow__size_overflow_is_refused(void **state)
{
    size_t cap = SIZE_MAX / 2 + 1;
    char c = 'x';
    (void)state;
    /* doubling the count overflows, and so does count x size: no allocation is tried */
    assert_null(ur_grow(&c, &cap, cap, 1, 8));
    assert_int_equal(cap, SIZE_MAX / 2 + 1);
    cap = SIZE_MAX / 16;
    assert_null(ur_grow(&c, &cap, cap, 64, 8));
    assert_int_equal(cap, SIZE_MAX / 16);
    cap = 0;
    assert_null(ur_grow(NULL, &cap, 0, 1, 0));
    assert_int_equal(cap, 0);
}

static void test_ur_grow__to_exact_room_only_when_short(void **state)
{
    size_t cap = 0;
    int *v = ur_grow_to(NULL, &cap, 0, sizeof *v), *g;
    (void)state;
    assert_null(v); /* no room asked for, none made */
    assert_int_equal(cap, 0);
    v = ur_grow_to(NULL, &cap, 5, sizeof *v);
    assert_non_null(v);
    assert_int_equal(cap, 5);
    v[4] = 9;
    assert_ptr_equal(ur_grow_to(v, &cap, 3, sizeof *v), v); /* never shrinks */
    assert_int_equal(cap, 5);
    g = ur_grow_to(v, &cap, 11, sizeof *v);
    assert_non_null(g);
    assert_int_equal(cap, 11);
    assert_int_equal(g[4], 9);
    v = g;
    ur_alloc_fail_after(0);
    assert_null(ur_grow_to(v, &cap, 12, sizeof *v));
    ur_alloc_fail_after(-1);
    assert_int_equal(cap, 11);
    assert_null(ur_grow_to(v, &cap, SIZE_MAX / 2, sizeof *v)); /* bytes would overflow */
    assert_int_equal(cap, 11);
    assert_int_equal(v[4], 9);
    ur_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_grow__first_then_doubles),
        cmocka_unit_test(test_ur_grow__out_of_memory_leaves_the_array),
        cmocka_unit_test(test_ur_grow__size_overflow_is_refused),
        cmocka_unit_test(test_ur_grow__to_exact_room_only_when_short),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
