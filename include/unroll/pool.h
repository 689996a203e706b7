/* Memory for many small records that live and die together, and strings held once: the
 * plan's 200,000 output paths of a few short components each cost one malloc a component and
 * one a path (each at least 32 bytes with glibc's header), most of them copies of the same
 * "params", "decoder", "layers_0". A pool hands out pieces of 64 KiB blocks and interns
 * strings, so a repeated component costs a pointer. Not thread-safe: one owner at a time. */
#ifndef UNROLL_POOL_H
#define UNROLL_POOL_H

#include "unroll/err.h"
#include "unroll/strmap.h"

#include <stddef.h>

typedef struct ur_pool_block ur_pool_block;

typedef struct {
    ur_pool_block *head;
    ur_strmap interned; /* string -> its address in a block, as an integer */
} ur_pool;

/* An empty pool (no allocation). */
void ur_pool_init(ur_pool *p);
/* Free every block: whatever the pool handed out is gone. NULL-safe. */
void ur_pool_dispose(ur_pool *p);

/* n zeroed bytes aligned for any type, owned by the pool. NULL (with UR_ENOMEM in err) when
 * out of memory. */
void *ur_pool_alloc(ur_pool *p, size_t n, ur_err *err);

/* A copy of the `n` bytes at `s`, NUL-terminated, owned by the pool (not interned: for
 * strings that do not repeat). NULL (UR_ENOMEM) when out of memory. */
char *ur_pool_strndup(ur_pool *p, const char *s, size_t n, ur_err *err);

/* The `n` bytes at `s` as a NUL-terminated string owned by the pool, the same address for
 * the same bytes every time. NULL (UR_ENOMEM) when out of memory. */
const char *ur_pool_intern(ur_pool *p, const char *s, size_t n, ur_err *err);

#endif
