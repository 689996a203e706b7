/* An in-memory kvstore for tests: readable and writable at once, with fault injection, so
 * I/O error paths in the layers above can be exercised without touching the file system
 * (docs/conventions.md §7):
 *   - the Nth read or write fails with UR_EIO (ur_kvstore_mem_fail_at);
 *   - every operation from the Nth on fails, as if the process issuing them had died there,
 *     or only the Nth does (ur_kvstore_mem_fault): the run-protocol tests fail each store
 *     operation of a run in turn.
 * A store given a name (ur_kvstore_mem_name) is also the object store "mem://<name>/...",
 * opened through the scheme table like s3:// and gs://, so a whole run can write into it.
 * Every operation holds the store's mutex: the upload paths write from several threads. */
#include "kvstore_impl.h"

#include "unroll/alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
    unsigned ops;      /* every operation so far (ur_kvstore_mem_ops) */
    unsigned fault_at; /* 0: none; else operation fault_at fails, and every later one unless */
    int fault_once;    /* ... only that one does */
    char *name;        /* registered as mem://<name> (NULL: not) */
    pthread_mutex_t mu;
} mem_store;

/* Whether this operation is an injected fault (counted either way). Called with mu held.
 * UR_MEM_TRACE set: each operation is written to stderr (to find the one a test failed). */
static int faulted(mem_store *ms, const char *op, const char *key, ur_err *err)
{
    ms->ops++;
    if (getenv("UR_MEM_TRACE") != NULL) {
        fprintf(stderr, "mem: operation %u: %s %s\n", ms->ops, op, key);
    }
    if (ms->fault_at != 0 &&
        (ms->fault_once ? ms->ops == ms->fault_at : ms->ops >= ms->fault_at)) {
        return ur_err_set_os(err, UR_EIO, 5 /* EIO */, key,
                             "injected store failure (operation %u)", ms->ops);
    }
    return UR_OK;
}

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
    int rc = faulted(ms, "read", key, err);
    if (rc < 0) {
        return rc;
    }
    ms->reads++;
    if (ms->fail_read_at != 0 && ms->reads == ms->fail_read_at) {
        return ur_err_set_os(err, UR_EIO, 5 /* EIO */, key, "injected read failure");
    }
    return UR_OK;
}

static int read_locked(mem_store *ms, const char *key, ur_buf *out, ur_err *err)
{
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

static int m_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    int rc;
    pthread_mutex_lock(&ms->mu);
    rc = read_locked(ms, key, out, err);
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

static int read_range_locked(mem_store *ms, const char *key, uint64_t offset, size_t len,
                             void *dst, ur_err *err)
{
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

static int m_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    int rc;
    pthread_mutex_lock(&ms->mu);
    rc = read_range_locked(ms, key, offset, len, dst, err);
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

static int m_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    mem_entry *e;
    int rc;
    pthread_mutex_lock(&ms->mu);
    rc = faulted(ms, "size", key, err);
    if (rc == UR_OK) {
        e = find(ms, key);
        if (e == NULL) {
            rc = ur_err_set_os(err, UR_ENOTFOUND, 0, key, "no such key");
        } else {
            *size_out = e->len;
        }
    }
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

/* The listing is copied out under the mutex and handed to fn after it: fn may call the
 * store again. */
static int m_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    size_t plen = strlen(prefix), n = 0, cap = 0;
    mem_entry *copy = NULL;
    int rc;

    pthread_mutex_lock(&ms->mu);
    rc = faulted(ms, "list", prefix, err);
    for (size_t i = lower_bound(ms, prefix); rc == UR_OK && i < ms->n; i++) {
        mem_entry *grown;
        if (strncmp(ms->e[i].key, prefix, plen) != 0) {
            break;
        }
        grown = ur_grow(copy, &cap, n, sizeof *copy, 16);
        if (grown == NULL || (grown[n].key = ur_strdup(ms->e[i].key)) == NULL) {
            copy = grown != NULL ? grown : copy;
            rc = ur_err_oom(err);
            break;
        }
        copy = grown;
        copy[n].len = ms->e[i].len;
        n++;
    }
    pthread_mutex_unlock(&ms->mu);
    for (size_t i = 0; i < n; i++) {
        if (rc == UR_OK) {
            rc = fn(ctx, copy[i].key, copy[i].len);
        }
        ur_free(copy[i].key);
    }
    ur_free(copy);
    return rc;
}

static int write_locked(mem_store *ms, const char *key, const void *data, size_t n, ur_err *err)
{
    uint8_t *copy;
    size_t i;
    int rc = faulted(ms, "write", key, err);

    if (rc < 0) {
        return rc;
    }
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

static int m_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    int rc;
    pthread_mutex_lock(&ms->mu);
    rc = write_locked(ms, key, data, n, err);
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

/* The check and the write under one hold of the mutex: the store's conditional create is
 * atomic, as S3's If-None-Match and GCS's ifGenerationMatch=0 are. */
static int m_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    int rc;
    pthread_mutex_lock(&ms->mu);
    if (find(ms, key) != NULL) {
        rc = faulted(ms, "create (present)", key, err);
        if (rc == UR_OK) {
            rc = ur_err_set_os(err, UR_EEXIST, 0, key, "already exists");
        }
    } else {
        rc = write_locked(ms, key, data, n, err);
    }
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

static int m_delete(ur_kvstore *kv, const char *key, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    size_t i;
    int rc;
    pthread_mutex_lock(&ms->mu);
    rc = faulted(ms, "delete", key, err);
    i = lower_bound(ms, key);
    if (rc == UR_OK && i < ms->n && strcmp(ms->e[i].key, key) == 0) {
        ur_free(ms->e[i].key);
        ur_free(ms->e[i].val);
        memmove(&ms->e[i], &ms->e[i + 1], (ms->n - i - 1) * sizeof *ms->e);
        ms->n--;
    }
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

/* ---- named stores: mem://<name> ------------------------------------------------------- */

#define MAX_NAMED 16
static pthread_mutex_t named_mu = PTHREAD_MUTEX_INITIALIZER;
static mem_store *named[MAX_NAMED];

static void unname(mem_store *ms)
{
    pthread_mutex_lock(&named_mu);
    for (size_t i = 0; i < MAX_NAMED; i++) {
        if (named[i] == ms) {
            named[i] = NULL;
        }
    }
    pthread_mutex_unlock(&named_mu);
    ur_free(ms->name);
    ms->name = NULL;
}

static void m_close(ur_kvstore *kv)
{
    mem_store *ms = (mem_store *)kv;
    unname(ms);
    for (size_t i = 0; i < ms->n; i++) {
        ur_free(ms->e[i].key);
        ur_free(ms->e[i].val);
    }
    ur_free(ms->e);
    pthread_mutex_destroy(&ms->mu);
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
    if (pthread_mutex_init(&ms->mu, NULL) != 0) {
        ur_free(ms);
        return ur_err_set(err, UR_EINTERNAL, "memory store: mutex");
    }
    ms->base.ops = &mem_ops;
    snprintf(ms->base.desc, sizeof ms->base.desc, "mem:%p", (void *)ms);
    *out = &ms->base;
    return UR_OK;
}

void ur_kvstore_mem_fail_at(ur_kvstore *kv, unsigned fail_read_at, unsigned fail_write_at)
{
    mem_store *ms = (mem_store *)kv;
    pthread_mutex_lock(&ms->mu);
    ms->fail_read_at = fail_read_at;
    ms->fail_write_at = fail_write_at;
    ms->reads = 0;
    ms->writes = 0;
    pthread_mutex_unlock(&ms->mu);
}

void ur_kvstore_mem_fault(ur_kvstore *kv, unsigned at, int once)
{
    mem_store *ms = (mem_store *)kv;
    pthread_mutex_lock(&ms->mu);
    ms->ops = 0;
    ms->fault_at = at;
    ms->fault_once = once;
    pthread_mutex_unlock(&ms->mu);
}

unsigned ur_kvstore_mem_ops(ur_kvstore *kv)
{
    mem_store *ms = (mem_store *)kv;
    unsigned n;
    pthread_mutex_lock(&ms->mu);
    n = ms->ops;
    pthread_mutex_unlock(&ms->mu);
    return n;
}

int ur_kvstore_mem_name(ur_kvstore *kv, const char *name, ur_err *err)
{
    mem_store *ms = (mem_store *)kv;
    int rc = ur_err_set(err, UR_EINVAL, "mem://%s: no free slot for a named memory store", name);
    unname(ms);
    if ((ms->name = ur_strdup(name)) == NULL) {
        return ur_err_oom(err);
    }
    pthread_mutex_lock(&named_mu);
    for (size_t i = 0; i < MAX_NAMED; i++) {
        if (named[i] != NULL && strcmp(named[i]->name, name) == 0) {
            rc = ur_err_set(err, UR_EEXIST, "mem://%s: a memory store has that name", name);
            break;
        }
    }
    for (size_t i = 0; rc == UR_EINVAL && i < MAX_NAMED; i++) {
        if (named[i] == NULL) {
            named[i] = ms;
            snprintf(ms->base.desc, sizeof ms->base.desc, "mem://%s", name);
            rc = UR_OK;
        }
    }
    pthread_mutex_unlock(&named_mu);
    if (rc != UR_OK) {
        ur_free(ms->name);
        ms->name = NULL;
    }
    return rc;
}

int ur_kvstore_mem__any_named(void)
{
    int any = 0;
    pthread_mutex_lock(&named_mu);
    for (size_t i = 0; i < MAX_NAMED && !any; i++) {
        any = named[i] != NULL;
    }
    pthread_mutex_unlock(&named_mu);
    return any;
}

int ur_kvstore_mem_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                        ur_err *err)
{
    mem_store *ms = NULL;
    char *slashed;
    int rc;
    (void)writable;

    pthread_mutex_lock(&named_mu);
    for (size_t i = 0; i < MAX_NAMED; i++) {
        if (named[i] != NULL && strcmp(named[i]->name, bucket) == 0) {
            ms = named[i];
        }
    }
    pthread_mutex_unlock(&named_mu);
    if (ms == NULL) {
        return ur_err_set(err, UR_ENOTFOUND,
                          "mem://%s: no such memory store (they exist only inside the process "
                          "that made them: tests)",
                          bucket);
    }
    /* keys below "<prefix>/", as the object-store drivers take them */
    slashed = ur_malloc(strlen(prefix) + 2);
    if (slashed == NULL) {
        return ur_err_oom(err);
    }
    snprintf(slashed, strlen(prefix) + 2, "%s%s", prefix, prefix[0] != '\0' ? "/" : "");
    rc = ur_kvstore_prefix_open(out, &ms->base, slashed, 0, err);
    ur_free(slashed);
    return rc;
}
