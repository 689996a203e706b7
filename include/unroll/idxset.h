/* A set of elements found by key that holds only their indices: 4 bytes a slot, where
 * ur_strmap's slot is 32. For the big tables whose elements already hold their keys (the
 * verify input's leaves by path, the Orbax writer's leaves by key path: hundreds of thousands
 * at a time). The caller hashes a key and says whether an element has it; open addressing
 * with linear probing, at most half the slots full. */
#ifndef UNROLL_IDXSET_H
#define UNROLL_IDXSET_H

#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t *slots; /* index + 1; 0: empty */
    size_t cap;      /* 0 or a power of two */
    size_t n;
} ur_idxset;

/* How the caller's elements are keyed: `match` is 1 when element `index` has `key`; `hash`
 * gives element `index`'s key's hash (to place it again when the set grows), the same as the
 * caller gives for that key. */
typedef struct {
    int (*match)(const void *ctx, size_t index, const void *key);
    uint64_t (*hash)(const void *ctx, size_t index);
    const void *ctx;
} ur_idxset_keys;

/* The most elements a set holds. */
#define UR_IDXSET_MAX ((size_t)UINT32_MAX / 2)

/* An empty set (no allocation). */
void ur_idxset_init(ur_idxset *s);
void ur_idxset_dispose(ur_idxset *s);

/* Room for n elements in all. UR_EINVAL past UR_IDXSET_MAX; UR_ENOMEM. */
int ur_idxset_reserve(ur_idxset *s, const ur_idxset_keys *k, size_t n, ur_err *err);

/* The index of the element that has `key` (hashed to h), or SIZE_MAX. */
size_t ur_idxset_find(const ur_idxset *s, const ur_idxset_keys *k, uint64_t h, const void *key);

/* Add element `index`, whose key `key` hashes to h (the set grows as needed). UR_OK, or 1
 * when an element with that key is there already (the set unchanged; that element's index in
 * *existing when not NULL); UR_EINVAL, UR_ENOMEM as for ur_idxset_reserve. */
int ur_idxset_add(ur_idxset *s, const ur_idxset_keys *k, uint64_t h, size_t index, const void *key,
                  size_t *existing, ur_err *err);

#endif
