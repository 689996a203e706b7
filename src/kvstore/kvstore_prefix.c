/* A store that is the keys of another store under a prefix: key k is the base's key
 * prefix + k. The Orbax writer keeps one store for a step's directory and sees its item
 * ("items/") through this view, as TensorStore's kvstore specs carry a path in a base store. */
#include "kvstore_impl.h"

#include "unroll/alloc.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    ur_kvstore base;
    ur_kvstore *under;
    int own;
    char *prefix;
    size_t plen;
    ur_kvstore_written_fn on_write; /* ur_kvstore_prefix_on_write */
    void *on_write_ctx;
} prefix_store;

/* prefix + key, or NULL (out of memory). */
static char *full_key(const prefix_store *p, const char *key)
{
    size_t n = strlen(key);
    char *k = ur_malloc(p->plen + n + 1);
    if (k != NULL) {
        memcpy(k, p->prefix, p->plen);
        memcpy(k + p->plen, key, n + 1);
    }
    return k;
}

#define WITH_KEY(kv, key, err, call)                                                              \
    prefix_store *p = (prefix_store *)(kv);                                                       \
    char *k = full_key(p, key);                                                                   \
    int rc = k != NULL ? (call) : ur_err_oom(err);                                                \
    ur_free(k);                                                                                   \
    return rc

static int p_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    WITH_KEY(kv, key, err, ur_kvstore_read(p->under, k, out, err));
}

static int p_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    WITH_KEY(kv, key, err, ur_kvstore_read_range(p->under, k, offset, len, dst, err));
}

static int p_view(ur_kvstore *kv, const char *key, size_t limit, ur_kvstore_view *v, ur_err *err)
{
    WITH_KEY(kv, key, err, ur_kvstore_read_view(p->under, k, limit, v, err));
}

static int p_view_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len,
                        ur_kvstore_view *v, ur_err *err)
{
    WITH_KEY(kv, key, err, ur_kvstore_read_view_range(p->under, k, offset, len, v, err));
}

static int p_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    WITH_KEY(kv, key, err, ur_kvstore_size(p->under, k, size_out, err));
}

/* A value stored whole under `key`: to the hook, when set. */
static int written(prefix_store *p, const char *key, int rc, ur_err *err)
{
    return rc == UR_OK && p->on_write != NULL ? p->on_write(p->on_write_ctx, key, err) : rc;
}

static int p_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    WITH_KEY(kv, key, err, written(p, key, ur_kvstore_write(p->under, k, data, n, err), err));
}

static int p_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    WITH_KEY(kv, key, err, written(p, key, ur_kvstore_create(p->under, k, data, n, err), err));
}

static int p_delete(ur_kvstore *kv, const char *key, ur_err *err)
{
    WITH_KEY(kv, key, err, ur_kvstore_delete(p->under, k, err));
}

static int p_writer_open(ur_kvstore_writer **out, ur_kvstore *kv, const char *key, int flags,
                         ur_err *err)
{
    WITH_KEY(kv, key, err, ur_kvstore_writer_open(out, p->under, k, flags, err));
}

static void p_prefetch(ur_kvstore *kv, const char *key, size_t max_bytes)
{
    prefix_store *p = (prefix_store *)kv;
    char *k = full_key(p, key);
    if (k != NULL) {
        ur_kvstore_prefetch(p->under, k, max_bytes);
    }
    ur_free(k);
}

static void p_prefetch_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len)
{
    prefix_store *p = (prefix_store *)kv;
    char *k = full_key(p, key);
    if (k != NULL) {
        ur_kvstore_prefetch_range(p->under, k, offset, len);
    }
    ur_free(k);
}

typedef struct {
    size_t plen;
    ur_kvstore_list_fn fn;
    void *ctx;
} strip_ctx;

static int strip(void *ctx, const char *key, uint64_t size)
{
    const strip_ctx *s = ctx;
    return s->fn(s->ctx, key + s->plen, size);
}

static int p_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    strip_ctx s = {((prefix_store *)kv)->plen, fn, ctx};
    WITH_KEY(kv, prefix, err, ur_kvstore_list(p->under, k, strip, &s, err));
}

/* Names below a directory are the same seen from the view: no stripping. */
static int p_list_dir(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                      ur_err *err)
{
    WITH_KEY(kv, prefix, err, ur_kvstore_list_dir(p->under, k, fn, ctx, err));
}

/* The base's durability is its owner's (ur_kvstore_commit of the base). */
static int p_commit(ur_kvstore *kv, ur_err *err)
{
    (void)kv;
    (void)err;
    return UR_OK;
}

static void p_close(ur_kvstore *kv)
{
    prefix_store *p = (prefix_store *)kv;
    if (p->own) {
        ur_kvstore_close(p->under);
    }
    ur_free(p->prefix);
    ur_free(p);
}

static const ur_kvstore_ops prefix_ops = {
    "prefix",         p_read,   p_read_range,  p_view,     p_size,   p_list,
    p_write,          p_commit, p_close,       p_prefetch, p_delete, p_view_range,
    p_prefetch_range, p_create, p_writer_open, p_list_dir, NULL,
};

int ur_kvstore_prefix_open(ur_kvstore **out, ur_kvstore *base, const char *prefix, int take_base,
                           ur_err *err)
{
    prefix_store *p = ur_calloc(1, sizeof *p);
    if (p == NULL || (p->prefix = ur_strdup(prefix)) == NULL) {
        ur_free(p);
        if (take_base) {
            ur_kvstore_close(base);
        }
        return ur_err_oom(err);
    }
    p->base.ops = &prefix_ops;
    p->under = base;
    p->own = take_base;
    p->plen = strlen(prefix);
    /* "file:/out/step/items" for the prefix "items/" of "file:/out/step" */
    snprintf(p->base.desc, sizeof p->base.desc, "%.250s/%.*s", base->desc,
             (int)(p->plen > 0 && prefix[p->plen - 1] == '/' ? p->plen - 1 : p->plen), prefix);
    *out = &p->base;
    return UR_OK;
}

void ur_kvstore_prefix_on_write(ur_kvstore *kv, ur_kvstore_written_fn fn, void *ctx)
{
    prefix_store *p = (prefix_store *)kv;
    assert(kv->ops == &prefix_ops);
    p->on_write = fn;
    p->on_write_ctx = ctx;
}
