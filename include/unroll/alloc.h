/* The only allocator: every allocation in unroll goes through these, so tests can make
 * the Nth allocation fail (curl torture, libgit2 failalloc; docs/conventions.md §5). With glibc,
 * blocks of up to 4 KiB that a thread frees are kept for its next allocations of their size (a
 * per-thread cache, ur_alloc.c: glibc's heap lock was fought over by the workers). */
#ifndef UNROLL_ALLOC_H
#define UNROLL_ALLOC_H

#include <stddef.h>

void *ur_malloc(size_t n);
void *ur_calloc(size_t count, size_t size);
void *ur_realloc(void *p, size_t n);
/* NULL-safe. */
void ur_free(void *p);
/* The growing array `items` (*cap elements of `size` bytes, n of them in use) with room for one
 * more: items itself while n < *cap, else the array moved into twice the room (`first`
 * elements the first time) and *cap updated. NULL when out of memory or when the size would
 * overflow; items and *cap are then unchanged (the caller still owns items). */
void *ur_grow(void *items, size_t *cap, size_t n, size_t size, size_t first);
/* As ur_grow, with room for `need` elements: items itself while need <= *cap, else the array
 * moved into exactly `need` elements (scratch sized for the largest use so far) and *cap
 * updated. NULL when out of memory or when the size would overflow (items, *cap unchanged). */
void *ur_grow_to(void *items, size_t *cap, size_t need, size_t size);
/* Copy of a NUL-terminated string, or NULL when out of memory. */
char *ur_strdup(const char *s);
/* Copy of the first n bytes of s plus a NUL, or NULL when out of memory. */
char *ur_strndup(const char *s, size_t n);

/* Give the memory freed so far back to the system where the allocator can (glibc: this
 * thread's cached blocks, then malloc_trim, every thread's arena). Called between the phases of a
 * run, so that what one phase freed (in the heaps of the threads that allocated it) does not stay
 * resident while the next phase allocates elsewhere; a no-op on other C libraries. */
void ur_alloc_trim(void);

/* Have every thread allocate from one heap (glibc: M_ARENA_MAX 1; a no-op elsewhere). By
 * default each thread that allocates gets a heap of its own: with 100,000 tiny leaves the
 * workers' heaps mix what lives until the commit (the output's keys and records) with what
 * lives for a chunk, and hold 37 MB more than one heap does (4.9x instead of 4.0x the input's
 * _METADATA) for a few percent more CPU. Call before any thread starts. */
void ur_alloc_one_heap(void);

/* Test hook: make the allocation after `n` more successful ones fail (n = 0: the next
 * one fails); a negative n disables failing. Returns how many allocations succeeded since
 * the previous call. Not thread-safe: for single-threaded tests only. */
long ur_alloc_fail_after(long n);
/* 1 while ur_alloc_fail_after has armed a failure: caches that would skip allocations stand
 * aside, so that the tests failing each allocation in turn still reach every one. */
int ur_alloc_failures_armed(void);

#endif
