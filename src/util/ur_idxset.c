/* Index set (see include/unroll/idxset.h). */
#include "unroll/idxset.h"

#include "unroll/alloc.h"

#include <string.h>

void ur_idxset_init(ur_idxset *s)
{
    memset(s, 0, sizeof *s);
}

void ur_idxset_dispose(ur_idxset *s)
{
    ur_free(s->slots);
    memset(s, 0, sizeof *s);
}

/* The slot holding the element with key, or the empty slot where it would go (cap > 0). */
static uint32_t *probe(const ur_idxset *s, const ur_idxset_keys *k, uint64_t h, const void *key)
{
    size_t mask = s->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        uint32_t *slot = &s->slots[i];
        if (*slot == 0 || k->match(k->ctx, (size_t)*slot - 1, key)) {
            return slot;
        }
    }
}

int ur_idxset_reserve(ur_idxset *s, const ur_idxset_keys *k, size_t n, ur_err *err)
{
    size_t cap = s->cap ? s->cap : 64;
    uint32_t *old = s->slots;
    if (n > UR_IDXSET_MAX) {
        return ur_err_set(err, UR_EINVAL, "more than %zu elements in an index set", UR_IDXSET_MAX);
    }
    while (cap / 2 < n) {
        cap *= 2;
    }
    if (cap == s->cap) {
        return UR_OK;
    }
    s->slots = ur_calloc(cap, sizeof *s->slots);
    if (s->slots == NULL) {
        s->slots = old;
        return ur_err_oom(err);
    }
    /* placed again by hash alone: the elements in the old slots are distinct */
    for (size_t i = 0; i < s->cap; i++) {
        if (old[i] != 0) {
            size_t mask = cap - 1, at = (size_t)k->hash(k->ctx, (size_t)old[i] - 1) & mask;
            while (s->slots[at] != 0) {
                at = (at + 1) & mask;
            }
            s->slots[at] = old[i];
        }
    }
    s->cap = cap;
    ur_free(old);
    return UR_OK;
}

size_t ur_idxset_find(const ur_idxset *s, const ur_idxset_keys *k, uint64_t h, const void *key)
{
    if (s->cap == 0) {
        return SIZE_MAX;
    }
    const uint32_t *slot = probe(s, k, h, key);
    return *slot != 0 ? (size_t)*slot - 1 : SIZE_MAX;
}

int ur_idxset_add(ur_idxset *s, const ur_idxset_keys *k, uint64_t h, size_t index, const void *key,
                  size_t *existing, ur_err *err)
{
    uint32_t *slot;
    int rc = ur_idxset_reserve(s, k, s->n + 1, err);
    if (rc < 0) {
        return rc;
    }
    if (index >= UR_IDXSET_MAX) {
        return ur_err_set(err, UR_EINVAL, "element %zu past an index set's %zu", index,
                          UR_IDXSET_MAX);
    }
    slot = probe(s, k, h, key);
    if (*slot != 0) {
        if (existing != NULL) {
            *existing = (size_t)*slot - 1;
        }
        return 1;
    }
    *slot = (uint32_t)(index + 1);
    s->n++;
    return UR_OK;
}
