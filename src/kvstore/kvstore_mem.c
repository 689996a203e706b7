/* An in-memory kvstore for tests: readable and writable at once, with fault injection
 * (the Nth read or write fails with UR_EIO), so I/O error paths in the layers above can
 * be exercised without touching the file system (STYLE §3.7). */
#include "kvstore_impl.h"

#include "unroll/alloc.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    char *key;
    uint8_t *val;
    size_t len;
} mem_entry;

typedef struct {
    ur_kvstore base;
    mem_entry *e; /* sorted by key */
    size_t n, cap;
    unsigned reads, writes;
    unsigned fail_read_at, fail_write_at;
} mem_store;

/* Index of the first entry >= key. */
static size_t lower_bound(const mem_store *ms, const char *key)
{
    size_t lo = 0, hi = ms->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ms->e[mid].key, key) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static mem_entry *find(mem_store *ms, const char *key)
{
    size_t i = lower_bound(ms, key);
    return (i < ms->n && strcmp(ms->e[i].key, key) == 0) ? &ms->e[i] : NULL;
}

static int count_read(mem_store *ms, const char *key, ur_err *err)
{
    ms->reads++;
    if (ms->fail_read_at != 0 && ms->reads == ms->fail_read_at) {
        return ur_err_set_os(err, UR_EIO, 5 /* EIO */, key, "injected read failure");
    }
    return UR_OK;
}

static int m_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    mem_entry *e;
    int rc = count_read(ms, key, err);
    if (rc < 0) {
        return rc;
    }
    e = find(ms, key);
    if (e == NULL) {
        return ur_err_set_os(err, UR_ENOTFOUND, 0, key, "no such key");
    }
    return ur_buf_append(out, e->val, e->len, err);
}

static int m_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    mem_entry *e;
    int rc = count_read(ms, key, err);
    if (rc < 0) {
        return rc;
    }
    e = find(ms, key);
    if (e == NULL) {
        return ur_err_set_os(err, UR_ENOTFOUND, 0, key, "no such key");
    }
    if (offset > e->len || len > e->len - offset) {
        return ur_err_set_os(err, UR_ECORRUPT, 0, key, "value is truncated: range %llu+%zu of %zu",
                             (unsigned long long)offset, len, e->len);
    }
    if (len > 0) {
        memcpy(dst, e->val + offset, len);
    }
    return UR_OK;
}

static int m_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    mem_entry *e = find((mem_store *)kv, key);
    if (e == NULL) {
        return ur_err_set_os(err, UR_ENOTFOUND, 0, key, "no such key");
    }
    *size_out = e->len;
    return UR_OK;
}

static int m_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    size_t plen = strlen(prefix);
    (void)err;
    for (size_t i = lower_bound(ms, prefix); i < ms->n; i++) {
        int rc;
        if (strncmp(ms->e[i].key, prefix, plen) != 0) {
            break;
        }
        rc = fn(ctx, ms->e[i].key, ms->e[i].len);
        if (rc != 0) {
            return rc;
        }
    }
    return UR_OK;
}

static int m_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    uint8_t *copy;
    size_t i;

    ms->writes++;
    if (ms->fail_write_at != 0 && ms->writes == ms->fail_write_at) {
        return ur_err_set_os(err, UR_EIO, 5 /* EIO */, key, "injected write failure");
    }
    copy = ur_malloc(n);
    if (copy == NULL) {
        return ur_err_oom(err);
    }
    if (n > 0) {
        memcpy(copy, data, n);
    }
    i = lower_bound(ms, key);
    if (i < ms->n && strcmp(ms->e[i].key, key) == 0) {
        ur_free(ms->e[i].val);
        ms->e[i].val = copy;
        ms->e[i].len = n;
        return UR_OK;
    }
    {
        mem_entry *e = ur_grow(ms->e, &ms->cap, ms->n, sizeof *e, 16);
        if (e == NULL) {
            ur_free(copy);
            return ur_err_oom(err);
        }
        ms->e = e;
    }
    {
        char *k = ur_strdup(key);
        if (k == NULL) {
            ur_free(copy);
            return ur_err_oom(err);
        }
        memmove(&ms->e[i + 1], &ms->e[i], (ms->n - i) * sizeof *ms->e);
        ms->e[i].key = k;
        ms->e[i].val = copy;
        ms->e[i].len = n;
        ms->n++;
    }
    return UR_OK;
}

static int m_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    if (find((mem_store *)kv, key) != NULL) {
        return ur_err_set_os(err, UR_EEXIST, 0, key, "already exists");
    }
    return m_write(kv, key, data, n, err);
}

static int m_delete(ur_kvstore *kv, const char *key, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    size_t i = lower_bound(ms, key);
    (void)err;
    if (i < ms->n && strcmp(ms->e[i].key, key) == 0) {
        ur_free(ms->e[i].key);
        ur_free(ms->e[i].val);
        memmove(&ms->e[i], &ms->e[i + 1], (ms->n - i - 1) * sizeof *ms->e);
        ms->n--;
    }
    return UR_OK;
}

static void m_close(ur_kvstore *kv)
{
    mem_store *ms = (mem_store *)kv;
    for (size_t i = 0; i < ms->n; i++) {
        ur_free(ms->e[i].key);
        ur_free(ms->e[i].val);
    }
    ur_free(ms->e);
    ur_free(ms);
}

static const ur_kvstore_ops mem_ops = {
    "mem", m_read,   m_read_range, NULL, m_size,   m_list, m_write, NULL, m_close,
    NULL,  m_delete, NULL,         NULL, m_create, NULL,   NULL, /* list_dir: ur_kvstore_list
                                                                    filtered */
    NULL, /* list_versions: no version (the size only) */
};

int ur_kvstore_mem_new(ur_kvstore **out, ur_err *err)
{
    mem_store *ms = ur_calloc(1, sizeof *ms);
    if (ms == NULL) {
        return ur_err_oom(err);
    }
    ms->base.ops = &mem_ops;
    snprintf(ms->base.desc, sizeof ms->base.desc, "mem:%p", (void *)ms);
    *out = &ms->base;
    return UR_OK;
}

void ur_kvstore_mem_fail_at(ur_kvstore *kv, unsigned fail_read_at, unsigned fail_write_at)
{
    mem_store *ms = (mem_store *)kv;
    ms->fail_read_at = fail_read_at;
    ms->fail_write_at = fail_write_at;
    ms->reads = 0;
    ms->writes = 0;
}
