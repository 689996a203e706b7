/* The pool: interned strings share an address and keep their bytes, pieces are aligned and
 * zeroed, a piece larger than a block, an allocation-failure loop. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/pool.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdio.h>

static void test_ur_pool__interned_strings_share_an_address(void **state)
{
    enum { N = 5000 };
    static const char *first[N];
    ur_pool p;
    char name[32];
    (void)state;
    ur_pool_init(&p);
    for (size_t i = 0; i < N; i++) {
        snprintf(name, sizeof name, "layers_%zu", i);
        first[i] = ur_pool_intern(&p, name, strlen(name), NULL);
        assert_non_null(first[i]);
        assert_string_equal(first[i], name);
    }
    for (size_t i = 0; i < N; i++) {
        snprintf(name, sizeof name, "layers_%zu", i);
        assert_ptr_equal(ur_pool_intern(&p, name, strlen(name), NULL), first[i]);
    }
    /* a prefix is another string; the empty string is one too */
    assert_string_equal(ur_pool_intern(&p, "layers_12", 7, NULL), "layers_");
    assert_string_equal(ur_pool_intern(&p, "", 0, NULL), "");
    /* a plain copy is not interned: another address each time */
    {
        char *a = ur_pool_strndup(&p, "layers_7x", 8, NULL);
        assert_string_equal(a, "layers_7");
        assert_ptr_not_equal(a, first[7]);
        assert_ptr_not_equal(ur_pool_strndup(&p, "layers_7", 8, NULL), a);
    }
    ur_pool_dispose(&p);
    ur_pool_dispose(NULL);
}

static void test_ur_pool__pieces_are_aligned_and_zeroed(void **state)
{
    ur_pool p;
    (void)state;
    ur_pool_init(&p);
    for (size_t n = 0; n < 300; n += 7) {
        unsigned char *q = ur_pool_alloc(&p, n, NULL);
        assert_non_null(q);
        assert_int_equal((uintptr_t)q % alignof(max_align_t), 0);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(q[i], 0);
        }
        memset(q, 0xab, n);
        (void)ur_pool_intern(&p, "x", 1, NULL); /* unaligned strings in between */
    }
    /* larger than a block, then small pieces still fit in the block before it */
    {
        unsigned char *big = ur_pool_alloc(&p, (size_t)1 << 20, NULL), *small;
        assert_non_null(big);
        big[((size_t)1 << 20) - 1] = 1;
        small = ur_pool_alloc(&p, 16, NULL);
        assert_non_null(small);
        assert_true(small < big || small >= big + ((size_t)1 << 20));
    }
    ur_pool_dispose(&p);
}

static void test_ur_pool__out_of_memory_is_reported(void **state)
{
    (void)state;
    for (long fail = 0;; fail++) {
        ur_pool p;
        ur_err err;
        const char *s = "";
        char name[16];
        ur_pool_init(&p);
        ur_alloc_fail_after(fail);
        for (size_t i = 0; i < 300 && s != NULL; i++) {
            snprintf(name, sizeof name, "%zu", i);
            s = ur_pool_intern(&p, name, strlen(name), &err);
            if (s != NULL && ur_pool_alloc(&p, 1000, &err) == NULL) {
                s = NULL;
            }
        }
        ur_alloc_fail_after(-1);
        if (s != NULL) {
            assert_string_equal(ur_pool_intern(&p, "299", 3, NULL), "299");
            ur_pool_dispose(&p);
            break;
        }
        assert_int_equal(err.code, UR_ENOMEM);
        ur_pool_dispose(&p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_pool__interned_strings_share_an_address),
        cmocka_unit_test(test_ur_pool__pieces_are_aligned_and_zeroed),
        cmocka_unit_test(test_ur_pool__out_of_memory_is_reported),
    };
    return cmocka_run_group_tests_name("ur_pool", tests, NULL, NULL);
}
