/* The read-ahead store (src/kvstore/kvstore_ahead.c) over a memory store: the bytes of every
 * read are the base's, announced pieces are fetched once and served from the cache, a large
 * read goes in parts, the cache keeps to its budget and lets go of pieces nobody reads, a
 * failed fetch reaches the read that wanted it, and many threads at once get their own bytes. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/kvstore.h"

#include <pthread.h>
#include <time.h>

#define MiB ((size_t)1 << 20)

/* A value of n pseudo-random bytes (the same for the same seed). */
static uint8_t *pattern(size_t n, uint32_t seed)
{
    uint8_t *p = malloc(n);
    uint32_t x = seed * 2654435761u + 1;
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
    return p;
}

/* A memory store holding `key` = pattern(n, seed), wrapped in a read-ahead store; *mem is the
 * memory store (owned by the wrapper), its operations counted from now on. */
static ur_kvstore *ahead_over(ur_kvstore **mem, const char *key, size_t n, uint32_t seed,
                              uint64_t budget)
{
    ur_kvstore *kv = NULL;
    uint8_t *v = pattern(n, seed);
    assert_int_equal(ur_kvstore_mem_new(mem, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(*mem, key, v, n, NULL), UR_OK);
    free(v);
    assert_int_equal(ur_kvstore_ahead_open(&kv, *mem, budget, 4, NULL), UR_OK);
    ur_kvstore_mem_fault(*mem, 0, 0);
    return kv;
}

/* Wait (5 s at most) until the memory store has served `n` requests. */
static void wait_ops(ur_kvstore *mem, unsigned n)
{
    for (int i = 0; i < 5000 && ur_kvstore_mem_ops(mem) < n; i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    assert_int_equal(ur_kvstore_mem_ops(mem), n);
}

/* A large read: the base's bytes, fetched in several requests (parts), none twice. */
static void test_kvstore_ahead__large_read_in_parts(void **state)
{
    size_t n = 20 * MiB + 123;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 1, 64 * MiB);
    uint8_t *want = pattern(n, 1), *got = malloc(n - 5);
    (void)state;
    assert_int_equal(ur_kvstore_read_range(kv, "v", 5, n - 5, got, NULL), UR_OK);
    assert_memory_equal(got, want + 5, n - 5);
    /* 4 threads: at least 4 MiB a part, so 5 or 6 requests, never one */
    assert_true(ur_kvstore_mem_ops(mem) >= 4 && ur_kvstore_mem_ops(mem) <= 6);
    free(want);
    free(got);
    ur_kvstore_close(kv);
}

/* Announced pieces are fetched once: reading them in 1 MiB steps adds no request. */
static void test_kvstore_ahead__announced_pieces_served_from_the_cache(void **state)
{
    size_t n = 12 * MiB;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 2, 64 * MiB);
    uint8_t *want = pattern(n, 2), *got = malloc(MiB);
    unsigned fetched;
    (void)state;
    ur_kvstore_prefetch_range(kv, "v", 0, 8 * MiB); /* 4 threads: 2 pieces of 4 MiB */
    for (size_t at = 0; at < 8 * MiB; at += MiB) {
        assert_int_equal(ur_kvstore_read_range(kv, "v", at, MiB, got, NULL), UR_OK);
        assert_memory_equal(got, want + at, MiB);
    }
    fetched = ur_kvstore_mem_ops(mem);
    assert_int_equal(fetched, 2);
    /* used up: a read of the same bytes goes to the base again */
    assert_int_equal(ur_kvstore_read_range(kv, "v", 0, MiB, got, NULL), UR_OK);
    assert_memory_equal(got, want, MiB);
    assert_int_equal(ur_kvstore_mem_ops(mem), fetched + 1);
    free(want);
    free(got);
    ur_kvstore_close(kv);
}

/* A hint that comes after the read it announces (a look-ahead behind the workers) fetches
 * nothing: the bytes were read already. A hint for the bytes after them still does. */
static void test_kvstore_ahead__late_hint_fetches_nothing(void **state)
{
    size_t n = 12 * MiB;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 4, 64 * MiB);
    uint8_t *got = malloc(4 * MiB);
    (void)state;
    assert_int_equal(ur_kvstore_read_range(kv, "v", 0, 4 * MiB, got, NULL), UR_OK);
    wait_ops(mem, 1);
    ur_kvstore_prefetch_range(kv, "v", 0, 4 * MiB);
    ur_kvstore_prefetch_range(kv, "v", MiB, MiB);
    ur_kvstore_prefetch_range(kv, "v", 4 * MiB, 4 * MiB);
    wait_ops(mem, 2);
    assert_int_equal(ur_kvstore_read_range(kv, "v", 4 * MiB, 4 * MiB, got, NULL), UR_OK);
    assert_int_equal(ur_kvstore_mem_ops(mem), 2);
    free(got);
    ur_kvstore_close(kv);
}

/* A read that spans cached pieces and bytes nobody announced gets each from where it is. */
static void test_kvstore_ahead__read_across_cached_and_not(void **state)
{
    size_t n = 24 * MiB;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 3, 64 * MiB);
    uint8_t *want = pattern(n, 3), *got = malloc(n);
    (void)state;
    ur_kvstore_prefetch_range(kv, "v", 4 * MiB, 4 * MiB);
    ur_kvstore_prefetch_range(kv, "v", 16 * MiB, 4 * MiB);
    assert_int_equal(ur_kvstore_read_range(kv, "v", 1, n - 2, got, NULL), UR_OK);
    assert_memory_equal(got, want + 1, n - 2);
    free(want);
    free(got);
    ur_kvstore_close(kv);
}

/* The cache keeps to its budget: announcements past it are dropped, and the reads still get
 * their bytes (from the base). */
static void test_kvstore_ahead__budget(void **state)
{
    size_t n = 32 * MiB;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 4, 8 * MiB);
    uint8_t *want = pattern(n, 4), *got = malloc(MiB);
    (void)state;
    for (size_t at = 0; at < n; at += 4 * MiB) {
        ur_kvstore_prefetch_range(kv, "v", at, 4 * MiB); /* only the first two fit */
    }
    for (size_t at = 0; at < n; at += MiB) {
        assert_int_equal(ur_kvstore_read_range(kv, "v", at, MiB, got, NULL), UR_OK);
        assert_memory_equal(got, want + at, MiB);
    }
    /* 2 pieces fetched whole, the other 24 MiB read as asked: 24 requests */
    assert_int_equal(ur_kvstore_mem_ops(mem), 2 + 24);
    free(want);
    free(got);
    ur_kvstore_close(kv);
}

/* A piece announced and never read does not hold the cache for good: once enough reads were
 * made after it arrived, it makes room for new announcements. */
static void test_kvstore_ahead__stale_pieces_dropped(void **state)
{
    size_t n = 16 * MiB;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 5, 8 * MiB);
    uint8_t *want = pattern(n, 5), *got = malloc(MiB);
    unsigned before;
    (void)state;
    ur_kvstore_prefetch_range(kv, "v", 0, 8 * MiB); /* fills the cache; never read */
    wait_ops(mem, 2);                               /* both pieces in */
    for (int i = 0; i < 300; i++) {                 /* other reads */
        uint64_t at = 8 * MiB + (uint64_t)i * 4096;
        assert_int_equal(ur_kvstore_read_range(kv, "v", at, 4096, got, NULL), UR_OK);
        assert_memory_equal(got, want + at, 4096);
    }
    /* the stale 8 MiB went: a new announcement is fetched once and served */
    before = ur_kvstore_mem_ops(mem);
    ur_kvstore_prefetch_range(kv, "v", 12 * MiB, 4 * MiB);
    for (size_t at = 12 * MiB; at < 16 * MiB; at += MiB) {
        assert_int_equal(ur_kvstore_read_range(kv, "v", at, MiB, got, NULL), UR_OK);
        assert_memory_equal(got, want + at, MiB);
    }
    assert_int_equal(ur_kvstore_mem_ops(mem), before + 1);
    free(want);
    free(got);
    ur_kvstore_close(kv);
}

/* A fetch that fails gives its error to the read that wanted it, naming the key; a large
 * read whose part fails reports the failure and returns. */
static void test_kvstore_ahead__failures_reach_the_reader(void **state)
{
    size_t n = 16 * MiB;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 6, 64 * MiB);
    uint8_t *got = malloc(n);
    ur_err err;
    (void)state;
    ur_kvstore_mem_fault(mem, 1, 0); /* every request fails from the first */
    ur_kvstore_prefetch_range(kv, "v", 0, 4 * MiB);
    assert_int_equal(ur_kvstore_read_range(kv, "v", 0, MiB, got, &err), UR_EIO);
    assert_string_equal(err.where, "v");
    assert_int_equal(ur_kvstore_read_range(kv, "v", 0, n, got, &err), UR_EIO);
    assert_string_equal(err.where, "v");
    /* one failure among the parts */
    ur_kvstore_mem_fault(mem, 3, 1);
    assert_int_equal(ur_kvstore_read_range(kv, "v", 0, n, got, &err), UR_EIO);
    ur_kvstore_mem_fault(mem, 0, 0);
    assert_int_equal(ur_kvstore_read_range(kv, "v", 0, n, got, &err), UR_OK);
    free(got);
    ur_kvstore_close(kv);
}

typedef struct {
    ur_kvstore *kv;
    const uint8_t *want;
    size_t n;
    int id, bad;
} reader;

/* One reader's walk: announce a stretch, read it in uneven steps, now and then one large
 * read, each checked against the value. */
static void *walk(void *arg)
{
    reader *r = arg;
    uint8_t *got = malloc(3 * MiB);
    uint32_t x = (uint32_t)r->id * 7919u + 3;
    for (int i = 0; i < 40 && got != NULL; i++) {
        size_t at, len;
        x = x * 1103515245u + 12345u;
        at = (x >> 8) % (r->n - 3 * MiB);
        len = 1 + (x % (3 * MiB - 1));
        if (i % 3 == 0) {
            ur_kvstore_prefetch_range(r->kv, "v", at, 3 * MiB);
        }
        if (ur_kvstore_read_range(r->kv, "v", at, len, got, NULL) != UR_OK ||
            memcmp(got, r->want + at, len) != 0) {
            r->bad++;
        }
    }
    free(got);
    return NULL;
}

static void test_kvstore_ahead__many_readers(void **state)
{
    size_t n = 24 * MiB;
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", n, 7, 16 * MiB);
    uint8_t *want = pattern(n, 7);
    pthread_t t[6];
    reader r[6];
    (void)state;
    for (int i = 0; i < 6; i++) {
        r[i] = (reader){kv, want, n, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, walk, &r[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(r[i].bad, 0);
    }
    free(want);
    ur_kvstore_close(kv);
}

/* Closing with announcements still queued or in flight frees everything (valgrind, ASan). */
static void test_kvstore_ahead__close_with_work_queued(void **state)
{
    ur_kvstore *mem, *kv = ahead_over(&mem, "v", 32 * MiB, 8, 64 * MiB);
    (void)state;
    for (size_t at = 0; at < 32 * MiB; at += 4 * MiB) {
        ur_kvstore_prefetch_range(kv, "v", at, 4 * MiB);
    }
    ur_kvstore_close(kv);
}

/* Everything else goes to the base. */
static void test_kvstore_ahead__other_operations(void **state)
{
    ur_kvstore *mem, *kv = ahead_over(&mem, "a/v", 100, 9, MiB);
    uint64_t size = 0;
    ur_buf b;
    (void)state;
    assert_int_equal(ur_kvstore_size(kv, "a/v", &size, NULL), UR_OK);
    assert_int_equal(size, 100);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "a/v", &b, NULL), UR_OK);
    assert_int_equal(b.len, 100);
    assert_int_equal(ur_kvstore_write(kv, "a/w", "x", 1, NULL), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "a/w", "y", 1, NULL), UR_EEXIST);
    assert_int_equal(ur_kvstore_delete(kv, "a/w", NULL), UR_OK);
    assert_int_equal(ur_kvstore_size(kv, "a/w", &size, NULL), UR_ENOTFOUND);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvstore_ahead__large_read_in_parts),
        cmocka_unit_test(test_kvstore_ahead__announced_pieces_served_from_the_cache),
        cmocka_unit_test(test_kvstore_ahead__late_hint_fetches_nothing),
        cmocka_unit_test(test_kvstore_ahead__read_across_cached_and_not),
        cmocka_unit_test(test_kvstore_ahead__budget),
        cmocka_unit_test(test_kvstore_ahead__stale_pieces_dropped),
        cmocka_unit_test(test_kvstore_ahead__failures_reach_the_reader),
        cmocka_unit_test(test_kvstore_ahead__many_readers),
        cmocka_unit_test(test_kvstore_ahead__close_with_work_queued),
        cmocka_unit_test(test_kvstore_ahead__other_operations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
