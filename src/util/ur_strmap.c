/* String -> index hash map (see include/unroll/strmap.h). FNV-1a hashes; the table doubles
 * when it is more than half full, so a probe sequence stays short. */
#include "unroll/strmap.h"

#include "unroll/alloc.h"

#include <string.h>

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

void ur_strmap_init(ur_strmap *m)
{
    memset(m, 0, sizeof *m);
}

void ur_strmap_dispose(ur_strmap *m)
{
    ur_free(m->slots);
    memset(m, 0, sizeof *m);
}

/* The slot holding the key, or the empty slot where it would go. */
static ur_strmap_slot *probe(const ur_strmap *m, const char *key, size_t len, uint64_t h)
{
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        ur_strmap_slot *s = &m->slots[i];
        if (s->key == NULL || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)) {
            return s;
        }
    }
}

static int grow(ur_strmap *m, ur_err *err)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    ur_strmap old = *m;
    if (cap < m->cap || cap > SIZE_MAX / sizeof *m->slots) {
        return ur_err_oom(err);
    }
    m->slots = ur_calloc(cap, sizeof *m->slots);
    if (m->slots == NULL) {
        *m = old;
        return ur_err_oom(err);
    }
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++) {
        if (old.slots[i].key != NULL) {
            *probe(m, old.slots[i].key, old.slots[i].len, old.slots[i].hash) = old.slots[i];
        }
    }
    ur_free(old.slots);
    return UR_OK;
}

int ur_strmap_put(ur_strmap *m, const char *key, size_t len, size_t value, size_t *existing,
                  ur_err *err)
{
    uint64_t h = hash_bytes(key, len);
    ur_strmap_slot *s;
    if (2 * (m->n + 1) > m->cap) {
        int rc = grow(m, err);
        if (rc < 0) {
            return rc;
        }
    }
    s = probe(m, key, len, h);
    if (s->key != NULL) {
        if (existing != NULL) {
            *existing = s->value;
        }
        return 1;
    }
    s->key = key;
    s->len = len;
    s->value = value;
    s->hash = h;
    m->n++;
    return UR_OK;
}

int ur_strmap_get(const ur_strmap *m, const char *key, size_t len, size_t *value)
{
    const ur_strmap_slot *s;
    if (m->cap == 0) {
        return 0;
    }
    s = probe(m, key, len, hash_bytes(key, len));
    if (s->key == NULL) {
        return 0;
    }
    *value = s->value;
    return 1;
}
