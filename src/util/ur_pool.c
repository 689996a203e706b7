/* Blocks of 64 KiB, each piece taken from the head block (a piece larger than a block gets
 * a block of its own); interned strings are found through a string map whose keys are the
 * pool's own copies (blocks never move). */
#include "unroll/pool.h"

#include "unroll/alloc.h"

#include <stdalign.h>
#include <stdint.h>
#include <string.h>

#define POOL_BLOCK ((size_t)64 << 10)

struct ur_pool_block {
    ur_pool_block *next;
    size_t cap, used;
    alignas(max_align_t) unsigned char data[];
};

void ur_pool_init(ur_pool *p)
{
    p->head = NULL;
    ur_strmap_init(&p->interned);
}

void ur_pool_dispose(ur_pool *p)
{
    if (p == NULL) {
        return;
    }
    while (p->head != NULL) {
        ur_pool_block *next = p->head->next;
        ur_free(p->head);
        p->head = next;
    }
    ur_strmap_dispose(&p->interned);
}

static void *take(ur_pool *p, size_t n, size_t align, ur_err *err)
{
    ur_pool_block *b = p->head;
    size_t at = b != NULL ? (b->used + align - 1) & ~(align - 1) : 0;
    if (b == NULL || at > b->cap || b->cap - at < n) {
        size_t cap = n > POOL_BLOCK ? n : POOL_BLOCK;
        if (cap > SIZE_MAX - sizeof(*b)) {
            (void)ur_err_oom(err);
            return NULL;
        }
        b = ur_malloc(sizeof(*b) + cap);
        if (b == NULL) {
            (void)ur_err_oom(err);
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        /* a piece bigger than a block goes behind the head, which keeps its free space */
        if (n > POOL_BLOCK && p->head != NULL) {
            b->next = p->head->next;
            p->head->next = b;
        } else {
            b->next = p->head;
            p->head = b;
        }
        at = 0;
    }
    b->used = at + n;
    return b->data + at;
}

void *ur_pool_alloc(ur_pool *p, size_t n, ur_err *err)
{
    void *q = take(p, n ? n : 1, alignof(max_align_t), err);
    if (q != NULL) {
        memset(q, 0, n);
    }
    return q;
}

char *ur_pool_strndup(ur_pool *p, const char *s, size_t n, ur_err *err)
{
    char *copy;
    if (n == SIZE_MAX) {
        (void)ur_err_oom(err);
        return NULL;
    }
    copy = take(p, n + 1, 1, err);
    if (copy != NULL) {
        memcpy(copy, s, n);
        copy[n] = '\0';
    }
    return copy;
}

const char *ur_pool_intern(ur_pool *p, const char *s, size_t n, ur_err *err)
{
    size_t at;
    char *copy;
    int rc;
    if (ur_strmap_get(&p->interned, s, n, &at) == 1) {
        return (const char *)(uintptr_t)at;
    }
    copy = ur_pool_strndup(p, s, n, err);
    if (copy == NULL) {
        return NULL;
    }
    rc = ur_strmap_put(&p->interned, copy, n, (size_t)(uintptr_t)copy, NULL, err);
    return rc < 0 ? NULL : copy; /* on failure the copy stays in its block, unused */
}
