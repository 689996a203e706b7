/* The one place raw malloc/free appear (docs/conventions.md §8), so tests can fail any
 * allocation. */
#include "unroll/alloc.h"
#include "unroll/ckd.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* Under AddressSanitizer malloc is ASan's, and glibc's malloc_trim walks arenas glibc never
 * set up (it crashed when two threads opened checkpoints at once): nothing to trim there, and
 * no cache below (ASan's own quarantine finds the misuse of freed blocks). */
#if defined(__SANITIZE_ADDRESS__)
#define UR_TRIM_GLIBC 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UR_TRIM_GLIBC 0
#endif
#endif
#ifndef UR_TRIM_GLIBC
#define UR_TRIM_GLIBC 1
#endif

/* ---- a per-thread cache of small blocks (glibc) -------------------------------------------
 * A run's threads all allocate from one heap (ur_alloc_one_heap), whose lock glibc takes on
 * every calloc, every realloc, every block over 1 KiB and whenever its own per-thread cache
 * (7 blocks a size) runs dry or over. With 100,000 small arrays the two workers made 2.5
 * million such calls a second, a block allocated on one thread often freed on the other
 * (the commit frees what the run allocated); on a busy host one thread was preempted holding
 * the lock, the other slept on it, and the pair stayed in that convoy for the rest of the
 * run: twice the wall time in one run out of two, 55,000 context switches instead of 2,000.
 * Here blocks of up to 4 KiB freed by a thread wait in that thread's lists, a list per glibc
 * chunk size, for the next allocation of that size on the same thread: no lock either way.
 * A thread holds at most CACHE_BYTES; its lists are freed when it exits (and by
 * ur_alloc_trim). Blocks are glibc's own: one freed by free() or reallocated by libc is
 * handled as any other. */
#if defined(__GLIBC__) && UR_TRIM_GLIBC
#define UR_CACHE 1

#define CHUNK_MIN 32u /* glibc: the smallest chunk; chunks are 16-byte steps */
#define CHUNK_MAX 4096u /* the largest chunk cached */
#define CACHE_CLASSES (CHUNK_MAX / 16 + 1)
#define CACHE_PER_CLASS 32
#define CACHE_BYTES ((size_t)512 << 10)

typedef struct cached {
    struct cached *next;
} cached;

typedef struct {
    cached *head[CACHE_CLASSES];
    uint8_t count[CACHE_CLASSES];
    size_t bytes;
    int state; /* 0: no exit hook yet; 1: hooked; 2: the thread is exiting (no caching) */
} thread_cache;

static _Thread_local thread_cache cache;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static int cache_key_ok;

static void cache_flush(thread_cache *c)
{
    for (size_t k = 0; k < CACHE_CLASSES; k++) {
        while (c->head[k] != NULL) {
            cached *b = c->head[k];
            c->head[k] = b->next;
            free(b);
        }
        c->count[k] = 0;
    }
    c->bytes = 0;
}

static void cache_exit(void *arg)
{
    thread_cache *c = arg;
    cache_flush(c);
    c->state = 2;
}

static void cache_key_make(void)
{
    cache_key_ok = pthread_key_create(&cache_key, cache_exit) == 0;
}

/* The chunk size glibc gives a request of n bytes (malloc.c request2size). */
static size_t chunk_of_request(size_t n)
{
    size_t c = (n + 8 + 15) & ~(size_t)15;
    return c < CHUNK_MIN ? CHUNK_MIN : c;
}

/* A cached block for n bytes, or NULL. */
static void *cache_take(size_t n)
{
    size_t k;
    cached *b;
    if (n > CHUNK_MAX - 8) {
        return NULL;
    }
    k = chunk_of_request(n) / 16;
    b = cache.head[k];
    if (b != NULL) {
        cache.head[k] = b->next;
        cache.count[k]--;
        cache.bytes -= k * 16;
    }
    return b;
}

/* 1 when p went into this thread's cache (else the caller frees it). */
static int cache_put(void *p)
{
    size_t chunk = malloc_usable_size(p) + 8, k = chunk / 16;
    if (chunk % 16 != 0 || chunk > CHUNK_MAX || cache.state == 2 ||
        cache.count[k] >= CACHE_PER_CLASS || cache.bytes + chunk > CACHE_BYTES) {
        return 0;
    }
    if (cache.state == 0) { /* the lists are freed when the thread exits */
        pthread_once(&cache_once, cache_key_make);
        if (!cache_key_ok || pthread_setspecific(cache_key, &cache) != 0) {
            return 0;
        }
        cache.state = 1;
    }
    ((cached *)p)->next = cache.head[k];
    cache.head[k] = p;
    cache.count[k]++;
    cache.bytes += chunk;
    return 1;
}

static void *raw_malloc(size_t n)
{
    void *p = cache_take(n);
    return p != NULL ? p : malloc(n);
}

static void raw_free(void *p)
{
    if (p != NULL && !cache_put(p)) {
        free(p);
    }
}

/* A small block grows into a new one (glibc would lock to try in place); a large one is
 * glibc's realloc. */
static void *raw_realloc(void *p, size_t n)
{
    size_t have;
    void *q;
    if (p == NULL) {
        return raw_malloc(n);
    }
    have = malloc_usable_size(p);
    if (have + 8 > CHUNK_MAX) {
        return realloc(p, n);
    }
    if (n <= have) {
        return p;
    }
    q = raw_malloc(n);
    if (q != NULL) {
        memcpy(q, p, have);
        raw_free(p);
    }
    return q;
}
#else
#define UR_CACHE 0
#define raw_malloc malloc
#define raw_free free
#define raw_realloc realloc
#endif

/* Allocations left before a forced failure; negative = never fail. */
static long fail_countdown = -1;
static long succeeded;

static int should_fail(void)
{
    if (fail_countdown < 0) {
        return 0;
    }
    if (fail_countdown == 0) {
        return 1;
    }
    fail_countdown--;
    return 0;
}

/* Counting only while a test has armed the hook keeps the threaded hot path free of
 * shared writes. */
static void count_success(const void *p)
{
    if (p != NULL && fail_countdown >= 0) {
        succeeded++;
    }
}

long ur_alloc_fail_after(long n)
{
    long done = succeeded;
    succeeded = 0;
    fail_countdown = n;
    return done;
}

int ur_alloc_failures_armed(void)
{
    return fail_countdown >= 0;
}

void *ur_malloc(size_t n)
{
    void *p;
    if (should_fail()) {
        return NULL;
    }
    p = raw_malloc(n == 0 ? 1 : n);
    count_success(p);
    return p;
}

/* The largest block cached (4 KiB chunks), and glibc's own per-thread cache's without it. */
#if UR_CACHE
#define SMALL_CALLOC (CHUNK_MAX - 8)
#else
#define SMALL_CALLOC 1024u
#endif

void *ur_calloc(size_t count, size_t size)
{
    void *p;
    if (should_fail()) {
        return NULL;
    }
    count = count == 0 ? 1 : count;
    size = size == 0 ? 1 : size;
    if (count <= SMALL_CALLOC / size) {
        /* glibc's calloc takes the heap's lock every time (see the cache above) */
        p = raw_malloc(count * size);
        if (p != NULL) {
#if defined(__GNUC__)
            /* compilers fold malloc + memset(0) back into calloc */
            __asm__ volatile("" : : "r"(p) : "memory");
#endif
            memset(p, 0, count * size);
        }
    } else {
        p = calloc(count, size);
    }
    count_success(p);
    return p;
}

void *ur_realloc(void *p, size_t n)
{
    void *q;
    if (should_fail()) {
        return NULL;
    }
    q = raw_realloc(p, n == 0 ? 1 : n);
    count_success(q);
    return q;
}

void *ur_grow(void *items, size_t *cap, size_t n, size_t size, size_t first)
{
    size_t want = *cap, bytes;
    void *p;
    if (n < *cap) {
        return items;
    }
    if (want == 0 ? (want = first) == 0 : ur_ckd_mul(&want, want, 2)) {
        return NULL;
    }
    if (ur_ckd_mul(&bytes, want, size)) {
        return NULL;
    }
    p = ur_realloc(items, bytes);
    if (p != NULL) {
        *cap = want;
    }
    return p;
}

void *ur_grow_to(void *items, size_t *cap, size_t need, size_t size)
{
    size_t bytes;
    void *p;
    if (need <= *cap) {
        return items;
    }
    if (ur_ckd_mul(&bytes, need, size)) {
        return NULL;
    }
    p = ur_realloc(items, bytes);
    if (p != NULL) {
        *cap = need;
    }
    return p;
}

void ur_free(void *p)
{
    raw_free(p);
}

char *ur_strndup(const char *s, size_t n)
{
    char *d = ur_malloc(n + 1);
    if (d == NULL) {
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *ur_strdup(const char *s)
{
    return ur_strndup(s, strlen(s));
}

void ur_alloc_one_heap(void)
{
#if defined(__GLIBC__) && UR_TRIM_GLIBC
    (void)mallopt(M_ARENA_MAX, 1);
#endif
}

void ur_alloc_trim(void)
{
#if UR_CACHE
    cache_flush(&cache); /* this thread's (the others' wait for their next use or exit) */
#endif
#if defined(__GLIBC__) && UR_TRIM_GLIBC
    (void)malloc_trim(0);
#endif
}
