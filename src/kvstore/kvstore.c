/* Dispatch through the vtable; each entry names the store in errors that lack a path. */
#include "kvstore_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <stdio.h>
#include <string.h>

static int unsupported(const ur_kvstore *kv, const char *what, ur_err *err)
{
    return ur_err_set(err, UR_EINTERNAL, "%s: %s is not supported by this store", kv->desc, what);
}

int ur_kvstore_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    return kv->ops->read ? kv->ops->read(kv, key, out, err) : unsupported(kv, "read", err);
}

int ur_kvstore_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                          ur_err *err)
{
    return kv->ops->read_range ? kv->ops->read_range(kv, key, offset, len, dst, err)
                               : unsupported(kv, "read_range", err);
}

void ur_kvstore__view_of_buf(ur_kvstore_view *v)
{
    v->data = v->buf_.data != NULL ? v->buf_.data : (const uint8_t *)"";
    v->len = v->buf_.len;
}

int ur_kvstore__view_by_read(ur_kvstore *kv, const char *key, ur_kvstore_view *v, ur_err *err)
{
    int rc = ur_kvstore_read(kv, key, &v->buf_, err);
    if (rc == UR_OK) {
        ur_kvstore__view_of_buf(v);
    }
    return rc;
}

int ur_kvstore_read_view(ur_kvstore *kv, const char *key, size_t limit, ur_kvstore_view *v,
                         ur_err *err)
{
    memset(v, 0, sizeof *v);
    ur_buf_init(&v->buf_, limit);
    return kv->ops->view ? kv->ops->view(kv, key, limit, v, err)
                         : ur_kvstore__view_by_read(kv, key, v, err);
}

int ur_kvstore_read_view_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len,
                               ur_kvstore_view *v, ur_err *err)
{
    int rc;
    memset(v, 0, sizeof *v);
    ur_buf_init(&v->buf_, 0);
    if (kv->ops->view_range != NULL) {
        return kv->ops->view_range(kv, key, offset, len, v, err);
    }
    rc = ur_buf_reserve(&v->buf_, len, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_read_range(kv, key, offset, len, v->buf_.data, err);
    }
    if (rc == UR_OK) {
        v->buf_.len = len;
        ur_kvstore__view_of_buf(v);
    }
    return rc;
}

void ur_kvstore_prefetch_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len)
{
    if (kv->ops->prefetch_range != NULL) {
        kv->ops->prefetch_range(kv, key, offset, len);
    }
}

void ur_kvstore_view_release(ur_kvstore_view *v)
{
    if (v != NULL) {
        ur_fs_unmap(&v->map_);
        ur_buf_dispose(&v->buf_);
        v->data = NULL;
        v->len = 0;
    }
}

void ur_kvstore_prefetch(ur_kvstore *kv, const char *key, size_t max_bytes)
{
    if (kv->ops->prefetch != NULL) {
        kv->ops->prefetch(kv, key, max_bytes);
    }
}

int ur_kvstore_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    return kv->ops->size ? kv->ops->size(kv, key, size_out, err) : unsupported(kv, "size", err);
}

int ur_kvstore_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                    ur_err *err)
{
    return kv->ops->list ? kv->ops->list(kv, prefix, fn, ctx, err) : unsupported(kv, "list", err);
}

int ur_kvstore_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    return kv->ops->write ? kv->ops->write(kv, key, data, n, err) : unsupported(kv, "write", err);
}

int ur_kvstore_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    return kv->ops->create ? kv->ops->create(kv, key, data, n, err)
                           : unsupported(kv, "conditional create", err);
}

int ur_kvstore_delete(ur_kvstore *kv, const char *key, ur_err *err)
{
    return kv->ops->del ? kv->ops->del(kv, key, err) : unsupported(kv, "delete", err);
}

int ur_kvstore_commit(ur_kvstore *kv, ur_err *err)
{
    return kv->ops->commit ? kv->ops->commit(kv, err) : UR_OK;
}

void ur_kvstore_close(ur_kvstore *kv)
{
    if (kv != NULL) {
        kv->ops->close(kv);
    }
}

const char *ur_kvstore_describe(const ur_kvstore *kv)
{
    return kv->desc;
}

/* The calling thread's hook (ur_kvstore_set_stored_hook). */
static _Thread_local ur_kvstore_stored_fn stored_fn;
static _Thread_local void *stored_ctx;

void ur_kvstore_set_stored_hook(ur_kvstore_stored_fn fn, void *ctx)
{
    stored_fn = fn;
    stored_ctx = ctx;
}

void ur_kvstore__stored(uint64_t bytes)
{
    if (stored_fn != NULL) {
        stored_fn(stored_ctx, bytes);
    }
}
