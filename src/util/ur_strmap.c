/* String -> index hash map (see include/unroll/strmap.h). Word-at-a-time hashes (hash_bytes);
 * when it is more than half full, so a probe sequence stays short. */
#include "unroll/strmap.h"

#include "unroll/alloc.h"

#include <string.h>

/* Eight bytes at a time, each word mixed in by a multiply and a shift, the whole finished by
 * splitmix64's avalanche so that the slot (the low bits) depends on every byte. FNV-1a, a byte
 * at a time, is a chain of one multiply per byte: hashing the output's repeated 500-byte
 * zarr.json at every array (the OCDBT writer holds each value once) was a fifth of the
 * commit's serial work with 100,000 leaves. */
static uint64_t mix_word(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mix_word(h, w);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = mix_word(h, w);
    }
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

uint64_t ur_strmap_hash(const char *p, size_t len)
{
    return hash_bytes(p, len);
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
