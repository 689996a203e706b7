/* Dispatch through the vtable; each entry names the store in errors that lack a path. */
#include "kvstore_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int unsupported(const ur_kvstore *kv, const char *what, ur_err *err)
{
    return ur_err_set(err, UR_EINTERNAL, "%s: %s is not supported by this store", kv->desc, what);
}

int ur_kvstore_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    return kv->ops->read ? kv->ops->read(kv, key, out, err) : unsupported(kv, "read", err);
}

int ur_kvstore_read_opt(ur_kvstore *kv, const char *key, size_t limit, ur_buf *out, int *found,
                        ur_err *err)
{
    int rc;
    ur_buf_reset(out);
    out->limit = limit;
    rc = ur_kvstore_read(kv, key, out, err);
    *found = rc == UR_OK;
    if (rc == UR_ENOTFOUND) {
        ur_buf_reset(out);
        return UR_OK;
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(out, "", 1, err);
        out->len--;
    }
    return rc;
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

int ur_kvstore_read_view_once(ur_kvstore *kv, const char *key, ur_kvstore_view *v, ur_err *err)
{
    memset(v, 0, sizeof *v);
    ur_buf_init(&v->buf_, 0);
    v->once_ = 1;
    return kv->ops->view ? kv->ops->view(kv, key, 0, v, err)
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

/* ur_kvstore_list_versions for stores without their own: no version, the size only. */
typedef struct {
    ur_kvstore_list_version_fn fn;
    void *ctx;
} no_version;

static int without_version(void *ctx, const char *key, uint64_t size)
{
    const no_version *nv = ctx;
    return nv->fn(nv->ctx, key, size, "");
}

int ur_kvstore_list_versions(ur_kvstore *kv, const char *prefix, ur_kvstore_list_version_fn fn,
                             void *ctx, ur_err *err)
{
    no_version nv = {fn, ctx};
    if (kv->ops->list_versions != NULL) {
        return kv->ops->list_versions(kv, prefix, fn, ctx, err);
    }
    return ur_kvstore_list(kv, prefix, without_version, &nv, err);
}

/* ur_kvstore_list_dir for stores without their own: the full listing, each first component
 * once (keys come sorted, so a directory's keys are adjacent). */
typedef struct {
    size_t skip;
    ur_kvstore_list_dir_fn fn;
    void *ctx;
    char *last; /* the previous directory name reported, or NULL */
    int any;
    int rc;
} dir_filter;

static int filter_key(void *ctx, const char *key, uint64_t size)
{
    dir_filter *f = ctx;
    const char *name = key + f->skip, *slash = strchr(name, '/');
    size_t n = slash != NULL ? (size_t)(slash - name) : strlen(name);
    (void)size;
    f->any = 1;
    if (n == 0) {
        return 0;
    }
    if (slash == NULL) {
        return f->fn(f->ctx, name, 0);
    }
    if (f->last != NULL && strlen(f->last) == n && memcmp(f->last, name, n) == 0) {
        return 0;
    }
    ur_free(f->last);
    f->last = ur_strndup(name, n);
    if (f->last == NULL) {
        f->rc = UR_ENOMEM;
        return 1;
    }
    return f->fn(f->ctx, f->last, 1);
}

static int list_dir_by_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn,
                            void *ctx, ur_err *err)
{
    dir_filter f = {strlen(prefix), fn, ctx, NULL, 0, UR_OK};
    int rc = ur_kvstore_list(kv, prefix, filter_key, &f, err);
    ur_free(f.last);
    if (f.rc < 0) {
        return ur_err_oom(err);
    }
    if (rc == UR_OK && !f.any && prefix[0] != '\0') {
        return ur_err_set(err, UR_ENOTFOUND, "%s: nothing under '%s'", ur_kvstore_describe(kv),
                          prefix);
    }
    return rc;
}

struct ur_kvstore__dir_entry {
    char *name;
    int is_dir;
};

int ur_kvstore__dir_list_add(ur_kvstore__dir_list *dl, const char *full, size_t prefix_len,
                             int is_dir, ur_err *err)
{
    size_t n = strlen(full);
    if (n <= prefix_len) {
        return UR_OK;
    }
    n -= prefix_len;
    if (is_dir && full[prefix_len + n - 1] == '/') {
        n--;
    }
    if (n == 0 || memchr(full + prefix_len, '/', n) != NULL) {
        return UR_OK;
    }
    struct ur_kvstore__dir_entry *e = ur_grow(dl->e, &dl->cap, dl->n, sizeof *e, 64);
    if (e == NULL) {
        return ur_err_oom(err);
    }
    dl->e = e;
    dl->e[dl->n].name = ur_strndup(full + prefix_len, n);
    if (dl->e[dl->n].name == NULL) {
        return ur_err_oom(err);
    }
    dl->e[dl->n++].is_dir = is_dir;
    return UR_OK;
}

static int cmp_dir_entry(const void *a, const void *b)
{
    const struct ur_kvstore__dir_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c != 0 ? c : x->is_dir - y->is_dir;
}

static void dir_list_clear(ur_kvstore__dir_list *dl)
{
    for (size_t i = 0; i < dl->n; i++) {
        ur_free(dl->e[i].name);
    }
    dl->n = 0;
}

int ur_kvstore__dir_list_flush(ur_kvstore__dir_list *dl, ur_kvstore_list_dir_fn fn, void *ctx)
{
    int rc = 0;
    if (dl->n > 0) {
        qsort(dl->e, dl->n, sizeof *dl->e, cmp_dir_entry);
    }
    for (size_t i = 0; i < dl->n && rc == 0; i++) {
        dl->total++;
        rc = fn(ctx, dl->e[i].name, dl->e[i].is_dir);
    }
    dir_list_clear(dl);
    return rc;
}

int ur_kvstore__dir_list_end(ur_kvstore__dir_list *dl, int rc, ur_kvstore *kv, const char *prefix,
                             ur_err *err)
{
    size_t total = dl->total;
    dir_list_clear(dl);
    ur_free(dl->e);
    memset(dl, 0, sizeof *dl);
    if (rc == UR_OK && total == 0 && prefix[0] != '\0') {
        rc = ur_err_set(err, UR_ENOTFOUND, "%s: nothing under '%s'", ur_kvstore_describe(kv),
                        prefix);
    }
    return rc;
}

int ur_kvstore_list_dir(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                        ur_err *err)
{
    size_t n = strlen(prefix);
    if (n > 0 && prefix[n - 1] != '/') {
        return ur_err_set(err, UR_EINVAL, "%s: listing '%s': a directory ends in '/'",
                          ur_kvstore_describe(kv), prefix);
    }
    return kv->ops->list_dir ? kv->ops->list_dir(kv, prefix, fn, ctx, err)
                             : list_dir_by_list(kv, prefix, fn, ctx, err);
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

/* ur_kvstore_write_view's hook: the view's pages the store holds go, then the caller's hook. */
typedef struct {
    ur_kvstore_view *v;
    ur_kvstore_stored_fn fn;
    void *ctx;
} forget_ctx;

static void forget_stored(void *ctx, uint64_t bytes)
{
    forget_ctx *f = ctx;
    ur_fs_map_forget(&f->v->map_, bytes < SIZE_MAX ? (size_t)bytes : SIZE_MAX);
    if (f->fn != NULL) {
        f->fn(f->ctx, bytes);
    }
}

int ur_kvstore_write_view(ur_kvstore *kv, const char *key, ur_kvstore_view *v, ur_err *err)
{
    forget_ctx f = {v, stored_fn, stored_ctx};
    const uint8_t *data = v->len > 0 ? v->data : (const uint8_t *)"";
    int rc;
    stored_fn = forget_stored;
    stored_ctx = &f;
    rc = ur_kvstore_write(kv, key, data, v->len, err);
    stored_fn = f.fn;
    stored_ctx = f.ctx;
    return rc;
}

/* ---- Streamed writes ---- */

/* The writer of a store without its own: the bytes gathered in memory, stored at finish. */
typedef struct {
    ur_kvstore_writer base;
    ur_kvstore *kv;
    char *key;
    int flags;
    ur_buf bytes;
} gather_writer;

static int gather_append(ur_kvstore_writer *w, const void *data, size_t n, ur_err *err)
{
    return ur_buf_append(&((gather_writer *)w)->bytes, data, n, err);
}

static void gather_free(ur_kvstore_writer *w)
{
    gather_writer *g = (gather_writer *)w;
    ur_buf_dispose(&g->bytes);
    ur_free(g->key);
    ur_free(g);
}

static int gather_finish(ur_kvstore_writer *w, ur_err *err)
{
    gather_writer *g = (gather_writer *)w;
    int rc = (g->flags & UR_KVSTORE_WRITER_NEW) && g->kv->ops->create != NULL
                 ? ur_kvstore_create(g->kv, g->key, g->bytes.data, g->bytes.len, err)
                 : ur_kvstore_write(g->kv, g->key, g->bytes.data, g->bytes.len, err);
    gather_free(w);
    return rc;
}

static const ur_kvstore_writer_ops gather_ops = {gather_append, gather_finish, gather_free};

static int gather_open(ur_kvstore_writer **out, ur_kvstore *kv, const char *key, int flags,
                       ur_err *err)
{
    gather_writer *g;
    uint64_t size = 0;
    if (flags & UR_KVSTORE_WRITER_NEW) {
        int rc = ur_kvstore_size(kv, key, &size, err);
        if (rc == UR_OK) {
            return ur_err_set_os(err, UR_EEXIST, EEXIST, key, "already exists");
        }
        if (rc != UR_ENOTFOUND && rc != UR_EINTERNAL) { /* EINTERNAL: cannot tell; create will */
            return rc;
        }
    }
    g = ur_calloc(1, sizeof *g);
    if (g == NULL) {
        return ur_err_oom(err);
    }
    g->key = ur_strdup(key);
    if (g->key == NULL) {
        ur_free(g);
        return ur_err_oom(err);
    }
    g->base.ops = &gather_ops;
    g->kv = kv;
    g->flags = flags;
    ur_buf_init(&g->bytes, 0);
    *out = &g->base;
    return UR_OK;
}

int ur_kvstore_writer_open(ur_kvstore_writer **out, ur_kvstore *kv, const char *key, int flags,
                           ur_err *err)
{
    int rc;
    if (flags != UR_KVSTORE_WRITER_NEW && flags != UR_KVSTORE_WRITER_ATOMIC) {
        return ur_err_set(err, UR_EINTERNAL, "%s: writer of '%s': bad flags %d", kv->desc, key,
                          flags);
    }
    if (kv->ops->write == NULL) {
        return unsupported(kv, "write", err);
    }
    rc = kv->ops->writer_open ? kv->ops->writer_open(out, kv, key, flags, err)
                              : gather_open(out, kv, key, flags, err);
    if (rc == UR_OK) {
        (*out)->size = 0;
    }
    return rc;
}

int ur_kvstore_writer_append(ur_kvstore_writer *w, const void *data, size_t n, ur_err *err)
{
    int rc = n > 0 ? w->ops->append(w, data, n, err) : UR_OK;
    if (rc == UR_OK) {
        w->size += n;
    }
    return rc;
}

uint64_t ur_kvstore_writer_size(const ur_kvstore_writer *w)
{
    return w->size;
}

int ur_kvstore_writer_finish(ur_kvstore_writer *w, ur_err *err)
{
    return w->ops->finish(w, err);
}

void ur_kvstore_writer_abort(ur_kvstore_writer *w)
{
    if (w != NULL) {
        w->ops->abort(w);
    }
}
