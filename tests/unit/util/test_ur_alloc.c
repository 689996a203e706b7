/* ur_grow: the one way a growing array gets room for one more element; ur_grow_to, for room
 * for n (scratch sized for the largest use so far). The blocks a thread frees and gets back
 * (ur_alloc.c's per-thread cache): zeroed by calloc, kept by realloc, failed by the test hook,
 * given back when the thread exits (valgrind's leak check, scripts/sanitize.sh). */
#include "ur_test.h"

#include "unroll/alloc.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

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

/* Every small size and a few large ones: what calloc hands out is zero even where the block
 * is one this thread just dirtied and freed. */
static void test_ur_alloc__calloc_zeroes_a_reused_block(void **state)
{
    (void)state;
    for (size_t n = 1; n <= 5000; n += n < 256 ? 1 : 97) {
        unsigned char *p = ur_malloc(n), *q;
        assert_non_null(p);
        memset(p, 0xab, n);
        ur_free(p);
        q = ur_calloc(n, 1);
        assert_non_null(q);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(q[i], 0);
        }
        ur_free(q);
    }
}

/* realloc keeps the bytes, growing within the cached sizes, out of them, and shrinking. */
static void test_ur_alloc__realloc_keeps_the_bytes(void **state)
{
    static const size_t steps[] = {1,    7,    24,    25,    100, 1000, 4000,
                                   4088, 4089, 10000, 70000, 3,   5000, 40};
    unsigned char *p = NULL;
    size_t have = 0;
    (void)state;
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        size_t n = steps[s], keep = have < n ? have : n;
        p = ur_realloc(p, n);
        assert_non_null(p);
        for (size_t i = 0; i < keep; i++) {
            assert_int_equal(p[i], (unsigned char)(i * 31 + 7));
        }
        for (size_t i = 0; i < n; i++) {
            p[i] = (unsigned char)(i * 31 + 7);
        }
        have = n;
    }
    ur_free(p);
}

/* The test hook fails an allocation a cached block could have served. */
static void test_ur_alloc__failure_hook_before_the_cache(void **state)
{
    void *p = ur_malloc(64);
    (void)state;
    ur_free(p);
    ur_alloc_fail_after(0);
    assert_null(ur_malloc(64));
    assert_null(ur_calloc(8, 8));
    ur_alloc_fail_after(1);
    p = ur_malloc(64);
    assert_non_null(p);
    assert_null(ur_realloc(p, 128));
    ur_alloc_fail_after(-1);
    ur_free(p);
}

/* A thread that frees more small blocks than its cache holds, of every size, then exits:
 * valgrind reports a leak if its cached blocks outlive it. Blocks allocated here and freed
 * there, and the other way round, as a run's workers do. */
#define HANDED 3000
static void *churn(void *arg)
{
    void **mine = arg;
    for (size_t i = 0; i < HANDED; i++) {
        ur_free(mine[i]); /* allocated by the main thread */
        mine[i] = ur_malloc(1 + (i * 37) % 4000);
    }
    return NULL;
}

static void test_ur_alloc__threads_give_back_their_blocks(void **state)
{
    void **blocks = ur_calloc(HANDED, sizeof *blocks);
    pthread_t t;
    (void)state;
    assert_non_null(blocks);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < HANDED; i++) {
            blocks[i] = ur_malloc(1 + (i * 53) % 4000);
            assert_non_null(blocks[i]);
        }
        assert_int_equal(pthread_create(&t, NULL, churn, blocks), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        for (size_t i = 0; i < HANDED; i++) {
            assert_non_null(blocks[i]);
            ur_free(blocks[i]); /* allocated by the thread that exited */
        }
    }
    ur_free(blocks);
    ur_alloc_trim();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_alloc__calloc_zeroes_a_reused_block),
        cmocka_unit_test(test_ur_alloc__realloc_keeps_the_bytes),
        cmocka_unit_test(test_ur_alloc__failure_hook_before_the_cache),
        cmocka_unit_test(test_ur_alloc__threads_give_back_their_blocks),
        cmocka_unit_test(test_ur_grow__first_then_doubles),
        cmocka_unit_test(test_ur_grow__out_of_memory_leaves_the_array),
        cmocka_unit_test(test_ur_grow__size_overflow_is_refused),
        cmocka_unit_test(test_ur_grow__to_exact_room_only_when_short),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
