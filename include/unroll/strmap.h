/* A hash map from byte strings to indices, for the lookups by name that would otherwise scan
 * a list (a leaf by its name, a sharding by its param name, a verify leaf by its path): with
 * 100,000 leaves a scan per leaf is 10^10 comparisons. Open addressing with linear probing;
 * the keys are borrowed (they must outlive the map and not move). */
#ifndef UNROLL_STRMAP_H
#define UNROLL_STRMAP_H

#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *key; /* borrowed; NULL: empty slot */
    size_t len;
    size_t value;
    uint64_t hash;
} ur_strmap_slot;

typedef struct {
    ur_strmap_slot *slots;
    size_t cap; /* 0 or a power of two */
    size_t n;
} ur_strmap;

/* An empty map (no allocation). */
void ur_strmap_init(ur_strmap *m);
void ur_strmap_dispose(ur_strmap *m);

/* Map the `len` bytes at `key` to `value`. UR_OK when added; 1 when the key was already
 * there (its value is left as it was and written to *existing when not NULL); UR_ENOMEM. */
int ur_strmap_put(ur_strmap *m, const char *key, size_t len, size_t value, size_t *existing,
                  ur_err *err);

/* 1 and *value when the `len` bytes at `key` are in the map, else 0. */
int ur_strmap_get(const ur_strmap *m, const char *key, size_t len, size_t *value);

/* The map's hash of the `len` bytes at `p`, for other tables keyed by strings
 * (unroll/idxset.h) and for telling strings apart by a number. */
uint64_t ur_strmap_hash(const char *p, size_t len);

#endif
