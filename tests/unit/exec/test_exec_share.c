/* ur_exec_share_range: the work split of a multi-process run covers every chunk exactly once,
 * in order, each share within one chunk's bytes of total / count. */
#include "ur_test.h"

#include "unroll/exec.h"

#include <stdlib.h>

/* Check the shares of `count` processes over groups g[0..n). */
static void check_split(const ur_exec_chunks *g, size_t n, int count)
{
    uint64_t total = 0, chunks = 0, biggest = 0, next = 0;
    for (size_t i = 0; i < n; i++) {
        total += g[i].n * g[i].chunk_bytes;
        chunks += g[i].n;
        biggest = g[i].n > 0 && g[i].chunk_bytes > biggest ? g[i].chunk_bytes : biggest;
    }
    for (int p = 0; p < count; p++) {
        uint64_t lo, hi, bytes = 0, c0 = 0;
        ur_exec_share_range(g, n, count, p, &lo, &hi);
        assert_true(lo == next); /* contiguous, in order, nothing skipped */
        assert_true(hi >= lo && hi <= chunks);
        next = hi;
        for (size_t i = 0; i < n; i++) {
            for (uint64_t k = 0; k < g[i].n; k++) {
                if (c0 + k >= lo && c0 + k < hi) {
                    bytes += g[i].chunk_bytes;
                }
            }
            c0 += g[i].n;
        }
        /* |share - total/count| < one chunk */
        double ideal = (double)total / count;
        assert_true((double)bytes < ideal + (double)biggest + 1e-9);
        assert_true((double)bytes > ideal - (double)biggest - 1e-9);
    }
    assert_true(next == chunks); /* everything covered */
}

static void test_exec_share__one_process_takes_all(void **state)
{
    ur_exec_chunks g[2] = {{3, 100}, {5, 7}};
    uint64_t lo, hi;
    (void)state;
    ur_exec_share_range(g, 2, 1, 0, &lo, &hi);
    assert_true(lo == 0 && hi == 8);
}

static void test_exec_share__balanced_by_bytes_not_count(void **state)
{
    /* one big tensor of 4 chunks and 1000 tiny ones: by count the first process would get the
     * big tensor alone; by bytes the big chunks are spread */
    ur_exec_chunks g[2] = {{4, 1000000}, {1000, 10}};
    uint64_t lo, hi;
    (void)state;
    check_split(g, 2, 2);
    ur_exec_share_range(g, 2, 2, 0, &lo, &hi);
    assert_true(lo == 0 && hi == 3); /* chunks at 0, 1e6 (< 2.005e6 / 2), not 2e6 */
    check_split(g, 2, 4);
    check_split(g, 2, 7);
}

static void test_exec_share__more_processes_than_chunks(void **state)
{
    ur_exec_chunks g[1] = {{3, 64}};
    (void)state;
    check_split(g, 1, 8); /* some shares are empty, none overlap */
}

static void test_exec_share__random_plans(void **state)
{
    (void)state;
    srand(1);
    for (int round = 0; round < 200; round++) {
        ur_exec_chunks g[12];
        size_t n = 1 + (size_t)(rand() % 12);
        for (size_t i = 0; i < n; i++) {
            g[i].n = (uint64_t)(rand() % 20);
            g[i].chunk_bytes = (uint64_t)(rand() % 3 == 0 ? rand() % 5 : rand() % 100000);
        }
        check_split(g, n, 1 + rand() % 9);
    }
}

static void test_exec_share__huge_sizes_do_not_overflow(void **state)
{
    /* 2^40 chunks of 2^22 bytes: B * count passes 2^64 */
    ur_exec_chunks g[2] = {{(uint64_t)1 << 40, (uint64_t)1 << 22}, {1, 5}};
    uint64_t lo, hi;
    (void)state;
    ur_exec_share_range(g, 2, 1000, 999, &lo, &hi);
    assert_true(hi == ((uint64_t)1 << 40) + 1);
    assert_true(lo > ((uint64_t)1 << 40) / 1000 * 999 - 2 && lo < ((uint64_t)1 << 40));
}

/* Units cut as one (ur_exec_share_range_at, a LoRA run's base and adapters): each unit's share
 * is exactly its part of the share of all the units' chunks back to back. */
static void test_exec_share__units_cut_as_one(void **state)
{
    (void)state;
    srand(11);
    for (int round = 0; round < 300; round++) {
        ur_exec_chunks g[24];
        size_t n = 1 + (size_t)(rand() % 24), cut[8], n_units = 1;
        uint64_t total = 0;
        int count = 1 + rand() % 7;
        for (size_t i = 0; i < n; i++) {
            g[i].n = (uint64_t)(rand() % 9);
            g[i].chunk_bytes = (uint64_t)(rand() % 4 == 0 ? rand() % 3 : rand() % 50000);
            total += g[i].n * g[i].chunk_bytes;
        }
        if (total == 0) {
            continue;
        }
        cut[0] = 0; /* units: groups [cut[u], cut[u + 1]) */
        for (size_t i = 1; i < n && n_units < 7; i++) {
            if (rand() % 3 == 0) {
                cut[n_units++] = i;
            }
        }
        cut[n_units] = n;
        for (int p = 0; p < count; p++) {
            uint64_t lo, hi, chunk0 = 0, before = 0;
            ur_exec_share_range(g, n, count, p, &lo, &hi);
            for (size_t u = 0; u < n_units; u++) {
                uint64_t ulo, uhi, chunks = 0, bytes = 0;
                for (size_t i = cut[u]; i < cut[u + 1]; i++) {
                    chunks += g[i].n;
                    bytes += g[i].n * g[i].chunk_bytes;
                }
                ur_exec_share_range_at(g + cut[u], cut[u + 1] - cut[u], count, p, before, total,
                                       &ulo, &uhi);
                /* the whole cut's [lo, hi) seen from this unit */
                uint64_t want_lo = lo < chunk0 ? 0 : lo - chunk0 < chunks ? lo - chunk0 : chunks;
                uint64_t want_hi = hi < chunk0 ? 0 : hi - chunk0 < chunks ? hi - chunk0 : chunks;
                if (want_hi < want_lo) {
                    want_hi = want_lo;
                }
                assert_true(uhi - ulo == want_hi - want_lo);
                assert_true(ulo == want_lo || uhi == ulo);
                chunk0 += chunks;
                before += bytes;
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exec_share__one_process_takes_all),
        cmocka_unit_test(test_exec_share__balanced_by_bytes_not_count),
        cmocka_unit_test(test_exec_share__more_processes_than_chunks),
        cmocka_unit_test(test_exec_share__random_plans),
        cmocka_unit_test(test_exec_share__huge_sizes_do_not_overflow),
        cmocka_unit_test(test_exec_share__units_cut_as_one),
    };
    return cmocka_run_group_tests_name("exec_share", tests, NULL, NULL);
}
