/* TensorStore OCDBT databases as ur_kvstore handles.
 *
 * Reader: the latest version of a database directory (manifest.ocdbt + data files),
 * following data-file paths into Orbax's ocdbt.process_N/ databases. Values are read on
 * demand with positioned reads; reads are thread-safe.
 *
 * Writer: a new database. Values larger than max_inline_value_bytes are appended to data
 * files under d/ as they arrive (only the index stays in memory); the B+tree, then the
 * manifest, are written by ur_kvstore_commit: generation 1. A writer that commits on the way
 * (ur_ocdbt_writer_snapshot) or continues a database (ur_ocdbt_resume) adds a generation per
 * commit, as TensorStore does: the previous generation's tree with the new entries merged in
 * (copy on write), every generation kept in the manifest's version tree. Nothing written is
 * changed afterwards. Spec: docs/ocdbt-format.md. */
#ifndef UNROLL_OCDBT_H
#define UNROLL_OCDBT_H

#include "unroll/err.h"
#include "unroll/kvstore.h"

#include <stdint.h>

typedef struct ur_ocdbt_write_opts {
    uint64_t target_data_file_size; /* roll over to a new d/ file past this; 0 = 2 GiB */
    uint32_t max_inline_value_bytes; /* as Orbax configures it: 1024 */
    uint64_t max_decoded_node_bytes; /* config bound; nodes are cut at min(this, 1 MiB) */
    int compress;                    /* 1: zstd-compress manifest and nodes (as Orbax) */
    int zstd_level;                  /* level for nodes; Orbax configures 0 (libzstd default) */
    /* 0: the database uuid and data-file names are random, as TensorStore makes them.
     * Otherwise they are derived from this seed, so the same writes give the same bytes
     * (names stay unique within the database, which is all a reader needs). */
    uint64_t seed;
    /* Bytes of inline values (<= max_inline_value_bytes) the writer holds in memory until
     * commit; past it, small values go to the data files as indirect values like large ones
     * (readers take either), so memory does not grow with the number of small values.
     * 0 = 64 MiB. */
    uint64_t max_held_inline_bytes;
    /* 1: ur_ocdbt_create accepts a directory that holds a database already (its files are
     * kept and new data files get other names); used by ur_ocdbt_resume. Default 0. */
    int resume;
    /* Called for each data file the writer is done with before its commit (it rolled over
     * to a new one), once the file is closed: `dir` the database directory, `name` the
     * file's "d/<32 hex>". The writer never reads the file again, so the callee may move it
     * elsewhere and remove it (an object-store output streams it, see job_stream.h). Files
     * finished during the commit (they hold the B-tree) are not handed over. A negative
     * return fails the write with it. NULL: none. (The Orbax writer calls it too, for each
     * chunk file of a plain-zarr output: `dir` the item directory, `name` the chunk's key.) */
    int (*on_data_file)(void *ctx, const char *dir, const char *name, ur_err *err);
    void *on_data_file_ctx;
} ur_ocdbt_write_opts;

/* Fill with Orbax's settings. */
void ur_ocdbt_write_opts_init(ur_ocdbt_write_opts *opts);

/* Open the database in directory `dir` for reading (latest version). */
int ur_ocdbt_open(ur_kvstore **out, const char *dir, ur_err *err);

/* Open the database whose files are the keys of `base` (manifest.ocdbt, d/..., as TensorStore
 * layers its OCDBT driver on a base kvstore): every byte is read through `base`, mapped where
 * it maps large ranges (the file store), downloaded where it cannot (object stores). With
 * take_base the reader owns `base` (closed with it, also when opening fails). `name` is the
 * location for messages. */
int ur_ocdbt_open_kv(ur_kvstore **out, ur_kvstore *base, int take_base, const char *name,
                     ur_err *err);

/* Create a new database in directory `dir` (created if missing; must not already hold a
 * manifest). Returns a write-only kvstore; ur_kvstore_commit writes the tree and manifest. */
int ur_ocdbt_create(ur_kvstore **out, const char *dir, const ur_ocdbt_write_opts *opts,
                    ur_err *err);

/* As ur_ocdbt_create, the database's files (manifest.ocdbt, d/...) written as keys of the
 * writable store `base`: data files through its streamed writers (ur_kvstore_writer: direct
 * I/O appends in a directory), the manifest last, with an atomic write. Each value is durable
 * when its writer finishes; ur_kvstore_commit of `base` is left to its owner. With take_base
 * the writer owns `base` (closed with it, also when creating fails). `name` is the location
 * for messages and on_data_file's `dir`. */
int ur_ocdbt_create_kv(ur_kvstore **out, ur_kvstore *base, int take_base, const char *name,
                       const ur_ocdbt_write_opts *opts, ur_err *err);

/* Open the location `dir` (a path, s3://, gs://; see ur_kvstore_open_url) for reading as Orbax
 * and TensorStore would: an OCDBT database when it holds manifest.ocdbt, otherwise the plain
 * store. (Here, not in kvstore.h: it needs the OCDBT layer above the kvstore.) */
int ur_kvstore_open_auto(ur_kvstore **out, const char *dir, ur_err *err);

/* Bytes of inline values a writer from ur_ocdbt_create holds now (0 for another kvstore):
 * never more than its max_held_inline_bytes. */
uint64_t ur_ocdbt_writer_held_bytes(const ur_kvstore *kv);

/* Make room in a writer from ur_ocdbt_create for `n` more keys (a no-op for another kvstore):
 * its table of keys written is otherwise grown by doubling, up to twice what it holds, and
 * copied while it grows. More or fewer keys may be written all the same. UR_ENOMEM. */
int ur_ocdbt_writer_reserve(ur_kvstore *kv, size_t n, ur_err *err);

/* Add to a writer from ur_ocdbt_create a key whose value is `length` bytes at `offset` of a
 * file that is not the writer's own: its path below the database is base + rel (base ends in
 * '/', e.g. "ocdbt.process_3/"). Nothing is copied; the file must stay. */
int ur_ocdbt_writer_put_ref(ur_kvstore *kv, const uint8_t *key, size_t klen, const char *base,
                            const char *rel, uint64_t offset, uint64_t length, ur_err *err);

/* Orbax's merge of per-process databases (docs/ocdbt-format.md §9): create the database in
 * `dir` whose B+tree holds every entry of the latest version of each database
 * `dir/<children[i]>/` (names such as "ocdbt.process_0"), values left where they are and
 * referred to through base path "<child>/". A key held by several children must have the
 * same value in each (else UR_EINVAL naming it); it is kept once. The new nodes and the
 * manifest are written as ur_ocdbt_create + ur_kvstore_commit write them. */
int ur_ocdbt_merge(const char *dir, const char *const *children, size_t n_children,
                   const ur_ocdbt_write_opts *opts, ur_err *err);

/* As ur_ocdbt_merge, the children read through the stores bases[i] (borrowed; e.g. an
 * object-store prefix holding `ocdbt.process_<i>/`) rather than from dir/<children[i]>/; the
 * new database is still written in the local directory `dir`. bases NULL: ur_ocdbt_merge. */
int ur_ocdbt_merge_from(const char *dir, ur_kvstore *const *bases, const char *const *children,
                        size_t n_children, const ur_ocdbt_write_opts *opts, ur_err *err);

/* Commit every value written so far as the next generation of the database (the previous
 * generation's B+tree with the values written since merged in, copy on write, and a manifest
 * whose version tree holds every generation), and go on writing: a kill after this leaves a
 * database holding those values (its data files are complete up to here). Costs the leaves
 * the new keys fall in and the nodes above them; afterwards the writer holds nothing of the
 * committed entries. Nothing new since the last commit: no new generation. */
int ur_ocdbt_writer_snapshot(ur_kvstore *kv, ur_err *err);

/* A writer that continues the database in `dir` (one that ur_ocdbt_writer_snapshot or a
 * commit left, possibly by a process that was killed): its config and versions are taken
 * over, its next commit is generation latest + 1 over the latest tree (nothing is read into
 * memory), data files that no generation refers to (written after the last commit) are
 * removed, and new writes go to new files. No database there: as ur_ocdbt_create. *n_kept
 * gets the number of keys of the latest generation. */
int ur_ocdbt_resume(ur_kvstore **out, const char *dir, const ur_ocdbt_write_opts *opts,
                    size_t *n_kept, ur_err *err);

/* Every key of the latest version counted into *n_keys, every B+tree node read, decoded and
 * checked as a listing does (kv must come from ur_ocdbt_open, else UR_EINVAL): the read-back
 * check of a database before it is published. The root's children are walked on two threads.
 * UR_ECORRUPT / UR_EIO as reads. */
int ur_ocdbt_count_keys(ur_kvstore *kv, uint64_t *n_keys, ur_err *err);

/* Introspection for `unroll ls --manifest / --tree` (kv must come from ur_ocdbt_open, else
 * UR_EINVAL). Append to `out` a text description of the manifest (config, data files, inline
 * versions, every version-tree node) or of the latest version's B+tree (one line per node
 * and entry; keys relative to the node's implicit prefix). UR_ECORRUPT / UR_EIO as reads. */
int ur_ocdbt_dump_manifest(ur_kvstore *kv, ur_buf *out, ur_err *err);
int ur_ocdbt_dump_tree(ur_kvstore *kv, ur_buf *out, ur_err *err);

#endif
