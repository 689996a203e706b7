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
    /* optional: a streamed writer (kvstore.h); else the bytes are gathered in memory and
     * stored with create (NEW) or write (ATOMIC) at finish */
    int (*writer_open)(ur_kvstore_writer **out, ur_kvstore *kv, const char *key, int flags,
                       ur_err *err);
    /* optional: one level of a listing (else ur_kvstore_list filtered) */
    int (*list_dir)(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                    ur_err *err);
    /* optional: the listing with each value's version (kvstore.h; else ur_kvstore_list with
     * version "") */
    int (*list_versions)(ur_kvstore *kv, const char *prefix, ur_kvstore_list_version_fn fn,
                         void *ctx, ur_err *err);
} ur_kvstore_ops;

/* The vtable of a streamed writer; every implementation's writer starts with
 * ur_kvstore_writer. */
typedef struct ur_kvstore_writer_ops {
    int (*append)(ur_kvstore_writer *w, const void *data, size_t n, ur_err *err);
    int (*finish)(ur_kvstore_writer *w, ur_err *err); /* frees w */
    void (*abort)(ur_kvstore_writer *w);              /* frees w */
} ur_kvstore_writer_ops;

struct ur_kvstore_writer {
    const ur_kvstore_writer_ops *ops;
    uint64_t size; /* bytes appended so far (kept by ur_kvstore_writer_append) */
};

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

/* The entries of a delimited listing (S3 CommonPrefixes, GCS prefixes), gathered page by
 * page and handed out in ur_kvstore_list_dir's order: a page covers a range of names after
 * those of the page before, so sorting each page orders the whole; a caller that stops at
 * the first entry costs one request. */
typedef struct {
    struct ur_kvstore__dir_entry *e;
    size_t n, cap;
    size_t total; /* entries handed out so far */
} ur_kvstore__dir_list;

/* Add the name below the first prefix_len bytes of `full` (an object name, is_dir 0, or a
 * common prefix, is_dir 1, its trailing '/' dropped); names that are empty or hold a '/'
 * (object names with empty components) are skipped. */
int ur_kvstore__dir_list_add(ur_kvstore__dir_list *dl, const char *full, size_t prefix_len,
                             int is_dir, ur_err *err);

/* After a page: sort its entries and call fn for each (stops at a nonzero return, which it
 * returns); the list is empty again. */
int ur_kvstore__dir_list_flush(ur_kvstore__dir_list *dl, ur_kvstore_list_dir_fn fn, void *ctx);

/* After the last page: free the list; UR_ENOTFOUND, naming `prefix` of kv, when no entry was
 * handed out and the prefix is not "", else rc. */
int ur_kvstore__dir_list_end(ur_kvstore__dir_list *dl, int rc, ur_kvstore *kv, const char *prefix,
                             ur_err *err);

/* Drivers: `bytes` of the value being written are stored (ur_kvstore_set_stored_hook). */
void ur_kvstore__stored(uint64_t bytes);

/* Object-store drivers, reached through the scheme table of kvstore_url.c (signature:
 * ur_kvstore_remote_open_fn). */
int ur_kvstore_s3_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                       ur_err *err);
int ur_kvstore_gcs_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                        ur_err *err);
/* mem://<name>: a named memory store (kvstore_mem.c, tests) */
/* 1 when this process has named a memory store: until then "mem://" is no scheme at all (a
 * command line never names one, so it gets the unknown-scheme refusal, exit 2). */
int ur_kvstore_mem__any_named(void);
int ur_kvstore_mem_open(ur_kvstore **out, const char *bucket, const char *prefix, int writable,
                        ur_err *err);

#endif
