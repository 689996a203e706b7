/* ur_sort_in_place: the order qsort gives (for orders without ties), for any element size,
 * on random, sorted, reversed, constant and few-valued inputs, in O(n log n) comparisons. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/sort.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned long compares;

typedef struct {
    uint32_t key;
    uint32_t seq; /* breaks ties: a total order */
    uint8_t pad[92];
} wide; /* 100 bytes: swapped in pieces */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    compares++;
    return x < y ? -1 : x > y;
}

static int cmp_wide(const void *a, const void *b)
{
    const wide *x = a, *y = b;
    compares++;
    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static uint64_t rng = 88172645463325252ull;

static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)rng;
}

enum { RANDOM, SORTED, REVERSED, CONSTANT, FEW, PIPE, N_PATTERNS };

static uint32_t key_of(int pattern, size_t i, size_t n)
{
    switch (pattern) {
    case RANDOM:
        return next();
    case SORTED:
        return (uint32_t)i;
    case REVERSED:
        return (uint32_t)(n - i);
    case CONSTANT:
        return 7;
    case FEW:
        return next() % 3;
    default: /* organ pipe: up, then down */
        return (uint32_t)(i < n / 2 ? i : n - i);
    }
}

/* Within c * n log2 n comparisons (n >= 2). */
static void check_bound(size_t n, unsigned c)
{
    unsigned long lg = 1;
    for (size_t m = n; m > 1; m >>= 1) {
        lg++;
    }
    if (compares > c * n * lg + 64) {
        fail_msg("%lu comparisons for %zu elements", compares, n);
    }
}

static void test_ur_sort__as_qsort(void **state)
{
    const size_t sizes[] = {0, 1, 2, 3, 15, 16, 17, 100, 1000, 50000};
    (void)state;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        for (int p = 0; p < N_PATTERNS; p++) {
            uint32_t *a = ur_malloc((n + 1) * sizeof *a), *b = ur_malloc((n + 1) * sizeof *b);
            wide *x = ur_calloc(n + 1, sizeof *x), *y = ur_calloc(n + 1, sizeof *y);
            assert_non_null(a);
            assert_non_null(b);
            assert_non_null(x);
            assert_non_null(y);
            for (size_t i = 0; i < n; i++) {
                a[i] = b[i] = key_of(p, i, n);
                x[i].key = a[i];
                x[i].seq = (uint32_t)i;
                memset(x[i].pad, (int)(i & 0xff), sizeof x[i].pad);
                y[i] = x[i];
            }
            compares = 0;
            ur_sort_in_place(a, n, sizeof *a, cmp_u32);
            check_bound(n, 4);
            qsort(b, n, sizeof *b, cmp_u32);
            assert_memory_equal(a, b, n * sizeof *a);
            compares = 0;
            ur_sort_in_place(x, n, sizeof *x, cmp_wide);
            check_bound(n, 4);
            qsort(y, n, sizeof *y, cmp_wide);
            assert_memory_equal(x, y, n * sizeof *x); /* the pads travelled with their keys */
            ur_free(a);
            ur_free(b);
            ur_free(x);
            ur_free(y);
        }
    }
}

/* Interleaved halves, a bad case for median-of-three pivots, still sort in O(n log n)
 * comparisons (past 2 log2 n levels a range is heap-sorted). */

static void test_ur_sort__no_quadratic_input(void **state)
{
    const size_t n = 1u << 16;
    uint32_t *a = ur_malloc(n * sizeof *a);
    (void)state;
    assert_non_null(a);
    for (size_t i = 0; i < n / 2; i++) {
        a[i] = (uint32_t)(i % 2 == 0 ? i + 1 : n / 2 + i);
        a[n / 2 + i] = (uint32_t)(2 * (i + 1));
    }
    compares = 0;
    ur_sort_in_place(a, n, sizeof *a, cmp_u32);
    check_bound(n, 6);
    for (size_t i = 1; i < n; i++) {
        assert_true(a[i - 1] <= a[i]);
    }
    ur_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_sort__as_qsort),
        cmocka_unit_test(test_ur_sort__no_quadratic_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
