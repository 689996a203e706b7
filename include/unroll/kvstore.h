/* A key-value store: the one interface the zarr and Orbax layers read and write through,
 * so they never know whether a checkpoint is a plain directory or an OCDBT database.
 *
 * Keys are '/'-separated byte strings without a leading '/', ordered bytewise (memcmp).
 * A handle is opened for reading or for writing, not both. Reads are positioned and may
 * run from several threads at once; writes come from one thread at a time.
 *
 * Implementations: kvstore_file (a directory; key = relative path), kvstore_mem (tests and
 * fault injection), ocdbt (see unroll/ocdbt.h). */
#ifndef UNROLL_KVSTORE_H
#define UNROLL_KVSTORE_H

#include "unroll/buf.h"
#include "unroll/err.h"
#include "unroll/fs.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ur_kvstore ur_kvstore;

/* Read the whole value of `key`, appending it to `out`. UR_ENOTFOUND when absent;
 * `out->limit` caps the size (UR_ECORRUPT beyond it). */
int ur_kvstore_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err);

/* The value of `key`, if any, in `out` (emptied first), with a NUL after it that `out->len`
 * does not count (a text value reads as a C string); `limit` caps its size as out->limit
 * does. *found = 0, and UR_OK, when there is no such key. */
int ur_kvstore_read_opt(ur_kvstore *kv, const char *key, size_t limit, ur_buf *out, int *found,
                        ur_err *err);

/* Read `len` bytes at `offset` of the value into dst. UR_ECORRUPT when the value is shorter. */
int ur_kvstore_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                          ur_err *err);

/* The whole value of `key`, read-only: the bytes of its file mapped in place where the store
 * keeps large values in files (OCDBT data files, plain files; no copy into a buffer), else
 * read into memory. UR_ENOTFOUND when absent; a value over `limit` bytes (0: no cap) is
 * UR_ECORRUPT. Release with ur_kvstore_view_release, also after a failure. */
typedef struct {
    const uint8_t *data;
    size_t len;
    ur_fs_map map_; /* private: the mapping, or nothing */
    ur_buf buf_;    /* private: the bytes read, or nothing */
    int once_;      /* private: ur_kvstore_read_view_once */
} ur_kvstore_view;
int ur_kvstore_read_view(ur_kvstore *kv, const char *key, size_t limit, ur_kvstore_view *v,
                         ur_err *err);
void ur_kvstore_view_release(ur_kvstore_view *v);

/* As ur_kvstore_read_view, for a value to be read once, front to back, by
 * ur_kvstore_write_view (an upload): a file store maps it without reading it in first. */
int ur_kvstore_read_view_once(ur_kvstore *kv, const char *key, ur_kvstore_view *v, ur_err *err);

/* Store the bytes of view v (of another store) as `key` of kv, as ur_kvstore_write. While an
 * object store takes them in pieces (multipart, resumable), the pages of a mapped view that it
 * holds already are given back, so an upload of a file of gigabytes holds a piece of it, not
 * the file (the stored hook of the calling thread, if any, is still called). */
int ur_kvstore_write_view(ur_kvstore *kv, const char *key, ur_kvstore_view *v, ur_err *err);

/* As ur_kvstore_read_view, for the `len` bytes at `offset` of the value: mapped where the store
 * keeps it in a file and the range is large, else read into memory (object stores: downloaded
 * with one ranged request). UR_ECORRUPT when the value is shorter. Release with
 * ur_kvstore_view_release. */
int ur_kvstore_read_view_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len,
                               ur_kvstore_view *v, ur_err *err);

/* As ur_kvstore_prefetch for `len` bytes at `offset` of the value. */
void ur_kvstore_prefetch_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len);

/* Hint that the value of `key` will be read soon: where it lives in a file, start reading up
 * to `max_bytes` of it into the page cache in the background. Best effort: no errors, and a
 * no-op for stores in memory. */
void ur_kvstore_prefetch(ur_kvstore *kv, const char *key, size_t max_bytes);

/* ---- Read-ahead for network stores (src/kvstore/kvstore_ahead.c) ----
 *
 * A store opened from an s3:// or gs:// location for reading (ur_kvstore_open_url) fetches
 * what readers announce with ur_kvstore_prefetch_range on a few threads of its own, in pieces
 * of UR_KVSTORE_AHEAD_PIECE bytes counted from the announced offset, into a cache of at most
 * ur_kvstore_read_ahead() bytes; a ur_kvstore_read_range inside one such piece is served from
 * it. So a reader that announces the next pieces it will read keeps requests in flight while
 * it works, and the memory they take is bounded whatever the number of readers. */
#define UR_KVSTORE_AHEAD_PIECE ((size_t)1 << 20)
#define UR_KVSTORE_AHEAD_DEFAULT ((uint64_t)64 << 20)

/* The cache size of the read-ahead stores opened from now on (a run sets it from its memory
 * limit); ur_kvstore_read_ahead() gives it. */
void ur_kvstore_set_read_ahead(uint64_t bytes);
uint64_t ur_kvstore_read_ahead(void);

/* Wrap `base` (taken: closed with the new store, also when this fails) in a read-ahead store
 * with a cache of `budget` bytes and at most `threads` requests of its own in flight. */
int ur_kvstore_ahead_open(ur_kvstore **out, ur_kvstore *base, uint64_t budget, int threads,
                          ur_err *err);

/* Size of the value of `key`; UR_ENOTFOUND when absent. */
int ur_kvstore_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err);

/* Called once per key under the prefix, in key order; `size` is the value's length.
 * A nonzero return stops the listing and is returned by ur_kvstore_list. */
typedef int (*ur_kvstore_list_fn)(void *ctx, const char *key, uint64_t size);

/* List the keys that start with `prefix` ("" for all), in bytewise order. */
int ur_kvstore_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                    ur_err *err);

/* Called once per key under the prefix, in key order, with the value's size and its version:
 * a short text (no spaces) that changes whenever the value may have changed, so that a run can
 * tell whether what it read is still there (the run identity, src/job/job_ident.c):
 *   - the file store: "<mtime s>.<mtime ns>:<inode>" of the file (lstat), so a file rewritten
 *     or replaced, even with the same size, has another version;
 *   - S3: the object's ETag (quotes dropped), from the listing itself;
 *   - GCS: the object's generation, from the listing itself;
 *   - other stores (memory, OCDBT, prefix views): "" (no version known: the size only).
 * A nonzero return stops the listing and is returned by ur_kvstore_list_versions. */
typedef int (*ur_kvstore_list_version_fn)(void *ctx, const char *key, uint64_t size,
                                          const char *version);

/* As ur_kvstore_list, with each value's version (above). One listing: no request per key. */
int ur_kvstore_list_versions(ur_kvstore *kv, const char *prefix, ur_kvstore_list_version_fn fn,
                             void *ctx, ur_err *err);

/* Called once per entry one level below a listed directory: `name` is the component after
 * the prefix (no '/'), is_dir 1 for a directory (object stores: a common prefix, i.e. some
 * key continues name + '/'), 0 for a value. A nonzero return stops the listing and is
 * returned by ur_kvstore_list_dir. */
typedef int (*ur_kvstore_list_dir_fn)(void *ctx, const char *name, int is_dir);

/* List one level of the directory `prefix` ("" for the top; else it ends in '/'), names in
 * bytewise order; an object store may give one name twice, as a value and as a directory.
 * Costs one directory read (the file store) or a delimited listing (S3, GCS), however many
 * keys lie deeper. UR_ENOTFOUND when there is no such directory: the file store has none
 * there (or a file; symbolic links are followed only inside the root, special files are left
 * out), an object store or the memory store has no key under a non-empty prefix. */
int ur_kvstore_list_dir(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                        ur_err *err);

/* Store a value (writers only). A key written twice keeps the last value. */
int ur_kvstore_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err);

/* A value written as a stream of appends (bulk output: OCDBT data files, large chunks), so that
 * the caller never holds it whole: open a key, append, then finish (or abort). The file store
 * appends with direct I/O from a background thread (ur_appendfile: the disk works while the
 * caller computes); other stores gather the bytes and store them at finish (a store may
 * upload in pieces instead). One thread appends to a writer; several writers of one store
 * may be open at once, for different keys. */
typedef struct ur_kvstore_writer ur_kvstore_writer;

/* Flags of ur_kvstore_writer_open. */
enum {
    /* The key must not hold a value yet (UR_EEXIST, naming it, when it does): the file store
     * creates the file with O_EXCL and appends in place, so a reader of the key may see a
     * partial value until finish. */
    UR_KVSTORE_WRITER_NEW = 1,
    /* The value appears whole at finish or not at all, replacing any value the key had: the
     * file store writes "<key>.partial" and renames it into place (manifests). */
    UR_KVSTORE_WRITER_ATOMIC = 2,
};

/* Open a writer for `key` of a writable store; exactly one of the flags above. */
int ur_kvstore_writer_open(ur_kvstore_writer **out, ur_kvstore *kv, const char *key, int flags,
                           ur_err *err);

/* Append n bytes (copied: the caller keeps its buffer). A failed append leaves the writer
 * only for ur_kvstore_writer_abort. */
int ur_kvstore_writer_append(ur_kvstore_writer *w, const void *data, size_t n, ur_err *err);

/* Bytes appended so far. */
uint64_t ur_kvstore_writer_size(const ur_kvstore_writer *w);

/* Complete the value and make it durable with its name (file store: fsync of the file and of
 * its directory). Frees w whatever the outcome; on failure the key may hold a partial value
 * (NEW) or its old one (ATOMIC). */
int ur_kvstore_writer_finish(ur_kvstore_writer *w, ur_err *err);

/* Stop after a failure without completing the value: a NEW value's partial bytes are left
 * for the caller to remove (ur_kvstore_delete), an ATOMIC one's are discarded. Frees w;
 * NULL-safe. */
void ur_kvstore_writer_abort(ur_kvstore_writer *w);

/* Create `key` holding `data` only if no value has that key, as one atomic step of the
 * store, so that of several processes creating the same key exactly one succeeds (the claim of
 * a shared run): UR_OK when this call created it, UR_EEXIST when a value was already there
 * (nothing written). The file store creates the file with O_EXCL beneath its root (a symbolic
 * link there counts as present and is never followed), writes it and fsyncs it, so a reader
 * may see it empty for a moment but never a half-replaced one; S3 sends `If-None-Match: *`
 * (HTTP 412 when present), GCS `ifGenerationMatch=0`. UR_EINTERNAL where the store cannot
 * (OCDBT). A request retried after a lost answer may report UR_EEXIST for the object its own
 * first attempt created, as TensorStore's conditional writes may: callers that must know
 * compare the value. */
int ur_kvstore_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err);

/* Make every write durable and complete the store (OCDBT: write the manifest last).
 * After commit the handle accepts no more writes. */
int ur_kvstore_commit(ur_kvstore *kv, ur_err *err);

/* Close and free; an uncommitted writer leaves its files for the caller to remove.
 * NULL-safe. */
void ur_kvstore_close(ur_kvstore *kv);

/* Human-readable description ("file:/path", "ocdbt:/path"), borrowed. */
const char *ur_kvstore_describe(const ur_kvstore *kv);

/* A directory store. For writing, the directory is created if missing. */
int ur_kvstore_file_open(ur_kvstore **out, const char *root, int writable, ur_err *err);

/* The keys of `base` that start with `prefix` ("items/"; it ends in '/'), seen without it:
 * every operation goes to `base` with the prefix put in front (listing strips it). Commit is a
 * no-op: making `base` durable is its owner's ur_kvstore_commit. With take_base the view owns
 * `base` (closed with it, also when opening fails). */
int ur_kvstore_prefix_open(ur_kvstore **out, ur_kvstore *base, const char *prefix, int take_base,
                           ur_err *err);

/* Called by a prefix view after each value it stored whole (ur_kvstore_write,
 * ur_kvstore_create; not streamed writers) with the key as the view sees it, e.g. to upload
 * it and free the local disk (plain-zarr output to an object store). A negative return fails
 * the write with it. fn NULL: none. kv must come from ur_kvstore_prefix_open. */
typedef int (*ur_kvstore_written_fn)(void *ctx, const char *key, ur_err *err);
void ur_kvstore_prefix_on_write(ur_kvstore *kv, ur_kvstore_written_fn fn, void *ctx);

/* An in-memory store, writable and readable at once (tests). fail_read_at / fail_write_at:
 * the Nth read/write operation (1-based) fails with UR_EIO; 0 disables. */
int ur_kvstore_mem_new(ur_kvstore **out, ur_err *err);
void ur_kvstore_mem_fail_at(ur_kvstore *kv, unsigned fail_read_at, unsigned fail_write_at);
/* Count every operation from now on (read, range read, size, list, write, create, delete);
 * with at > 0, operation `at` (1-based) fails with UR_EIO, and so does every later one unless
 * `once` (a process that died there issues none: what it would have done is not done). */
void ur_kvstore_mem_fault(ur_kvstore *kv, unsigned at, int once);
/* Operations counted since the last ur_kvstore_mem_fault. */
unsigned ur_kvstore_mem_ops(ur_kvstore *kv);
/* Make kv (a memory store, still owned by the caller) the object store "mem://<name>": a
 * location "mem://<name>/<prefix>" opens it below <prefix>/ (ur_kvstore_open_url), as s3://
 * would a bucket, until kv is closed. UR_EEXIST when another store has the name. */
int ur_kvstore_mem_name(ur_kvstore *kv, const char *name, ur_err *err);

/* ---- Locations: one entry point for every store (src/kvstore/kvstore_url.c) ----
 *
 * A location is what a user writes where unroll takes a path:
 *   - a local path ("ckpt/items", "/abs/dir"): the file store (kvstore_file);
 *   - "s3://bucket[/prefix]": the S3 driver (src/kvstore/s3/);
 *   - "gs://bucket[/prefix]": the GCS driver (src/kvstore/gcs/);
 *   - "mem://name[/prefix]": a memory store of this process (ur_kvstore_mem_name; tests);
 *     all looked up in the scheme table of kvstore_url.c, where a build without the driver
 *     says so (UR_EUNSUPPORTED);
 *   - any other "scheme://..." is refused (UR_EINVAL, exit 2), never a local directory.
 * Keys of an object-store handle are relative to the prefix, as for a directory. */

/* Kinds of location. */
typedef enum {
    UR_LOC_LOCAL = 0,
    UR_LOC_S3 = 1,
    UR_LOC_GCS = 2,
    UR_LOC_MEM = 3
} ur_kvstore_loc_kind;

/* Classify `location`; UR_EINVAL (naming it) for an unknown "scheme://" or a malformed URL
 * ("s3://" without a bucket). Returns the kind (>= 0) or a negative code. */
int ur_kvstore_location_kind(const char *location, ur_err *err);

/* What the store at a location can do, so that a caller asks for the capability it needs
 * instead of "is it remote?" (ur_kvstore_location_caps; a column of kvstore_url.c's table). */
enum {
    /* A value or a directory moves to another key in one atomic step: a result is published
     * by rename (unroll/job_publish.h), a share's staging directory is renamed away. */
    UR_KV_CAN_RENAME = 1,
    /* A lock held by a live process and dropped when it dies (flock): a claim stays alive
     * while its holder runs, and a rerun can take over a dead one's. */
    UR_KV_CAN_LOCK = 2,
    /* The location is a path of this machine's file system: it resolves (realpath), two
     * locations overlap by path, and its values' versions (mtime, inode) hold here only. */
    UR_KV_IS_PATH = 4,
    /* Each operation is a request over the network: more workers keep more in flight. */
    UR_KV_NETWORK = 8,
};

/* The UR_KV_* flags of the store `location` names: a local path's file store has RENAME,
 * LOCK and IS_PATH; s3:// and gs:// NETWORK only; mem:// none; an unknown "scheme://"
 * (which ur_kvstore_location_kind refuses) none. No validation. */
unsigned ur_kvstore_location_caps(const char *location);

/* 1 when the store `location` names has every flag of `caps` (UR_KV_*), else 0. */
int ur_kvstore_location_can(const char *location, unsigned caps);

/* Open the store at `location` (see above). writable: 1 to write (a directory is created; an
 * object-store prefix needs no creation), 0 to read. UR_ENOTFOUND: a local directory that is
 * not there. */
int ur_kvstore_open_url(ur_kvstore **out, const char *location, int writable, ur_err *err);

/* The signature of an object-store driver's open function in the scheme table: `bucket` and
 * `prefix` ("" or without leading/trailing '/') split from the location. */
typedef int (*ur_kvstore_remote_open_fn)(ur_kvstore **out, const char *bucket, const char *prefix,
                                         int writable, ur_err *err);

/* Delete `key` (writers of object stores, the file store): removing an absent key is not an
 * error. UR_EINTERNAL where the store cannot delete. */
int ur_kvstore_delete(ur_kvstore *kv, const char *key, ur_err *err);

/* Progress of large writes, for the calling thread (a write runs in the thread that calls
 * ur_kvstore_write, so a thread's hook sees its own writes only): while set, an object-store
 * write that goes up in pieces (S3 multipart, GCS resumable) calls fn after each piece with
 * the bytes of the value the server holds so far. Whole-object writes do not call it.
 * fn NULL: no hook. */
typedef void (*ur_kvstore_stored_fn)(void *ctx, uint64_t bytes_stored);
void ur_kvstore_set_stored_hook(ur_kvstore_stored_fn fn, void *ctx);

#endif
