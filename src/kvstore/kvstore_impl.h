/* The vtable behind ur_kvstore, shared by the implementations in src/kvstore/ (the file
 * store, the memory store and OCDBT). Not part of the cross-layer API. */
#ifndef UNROLL_KVSTORE_IMPL_H
#define UNROLL_KVSTORE_IMPL_H

#include "unroll/kvstore.h"

typedef struct ur_kvstore_ops {
    const char *name;
    int (*read)(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err);
    int (*read_range)(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                      ur_err *err);
    /* optional: map the value when it is large (else ur_kvstore__view_by_read) */
    int (*view)(ur_kvstore *kv, const char *key, size_t limit, ur_kvstore_view *v, ur_err *err);
    int (*size)(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err);
    int (*list)(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx, ur_err *err);
    int (*write)(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err);
    int (*commit)(ur_kvstore *kv, ur_err *err);
    void (*close)(ur_kvstore *kv);
    /* optional */
    void (*prefetch)(ur_kvstore *kv, const char *key, size_t max_bytes);
    /* optional: delete one key (object stores; absent is not an error) */
    int (*del)(ur_kvstore *kv, const char *key, ur_err *err);
    /* optional: map a byte range of a value (else read_range into v->buf_) */
    int (*view_range)(ur_kvstore *kv, const char *key, uint64_t offset, size_t len,
                      ur_kvstore_view *v, ur_err *err);
    /* optional */
    void (*prefetch_range)(ur_kvstore *kv, const char *key, uint64_t offset, size_t len);
    /* optional: write `key` only if absent, atomically (UR_EEXIST when present) */
    int (*create)(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err);
} ur_kvstore_ops;

/* Every implementation's handle starts with this header. */
struct ur_kvstore {
    const ur_kvstore_ops *ops;
    char desc[512];
};

/* Values shorter than this are read rather than mapped: a mapping costs two system calls
 * and a TLB shootdown when it goes, more than copying a small value. */
#define UR_KVSTORE_MAP_MIN ((size_t)1 << 20)

/* Point the view at the bytes in its own buffer v->buf_. */
void ur_kvstore__view_of_buf(ur_kvstore_view *v);

/* A view holding the value read into memory (v->buf_ already has the limit). */
int ur_kvstore__view_by_read(ur_kvstore *kv, const char *key, ur_kvstore_view *v, ur_err *err);

/* Drivers: `bytes` of the value being written are stored (ur_kvstore_set_stored_hook). */
void ur_kvstore__stored(uint64_t bytes);

/* Object-store drivers, reached through the scheme table of kvstore_url.c (signature:
 * ur_kvstore_remote_open_fn). */
int ur_kvstore_s3_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                       ur_err *err);
int ur_kvstore_gcs_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                        ur_err *err);

#endif
