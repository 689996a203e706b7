/* The one place raw malloc/free appear (STYLE §3.8), so tests can fail any allocation. */
#include "unroll/alloc.h"
#include "unroll/ckd.h"

#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
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
    p = malloc(n == 0 ? 1 : n);
    count_success(p);
    return p;
}

void *ur_calloc(size_t count, size_t size)
{
    void *p;
    if (should_fail()) {
        return NULL;
    }
    p = calloc(count == 0 ? 1 : count, size == 0 ? 1 : size);
    count_success(p);
    return p;
}

void *ur_realloc(void *p, size_t n)
{
    void *q;
    if (should_fail()) {
        return NULL;
    }
    q = realloc(p, n == 0 ? 1 : n);
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
    free(p);
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

/* Under AddressSanitizer malloc is ASan's, and glibc's malloc_trim walks arenas glibc never
 * set up (it crashed when two threads opened checkpoints at once): nothing to trim there. */
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

void ur_alloc_one_heap(void)
{
#if defined(__GLIBC__) && UR_TRIM_GLIBC
    (void)mallopt(M_ARENA_MAX, 1);
#endif
}

void ur_alloc_trim(void)
{
#if defined(__GLIBC__) && UR_TRIM_GLIBC
    (void)malloc_trim(0);
#endif
}
