/* OCDBT on-disk components: pure codecs (byte buffers in, structs out and back; no I/O).
 * Spec: docs/ocdbt-format.md (TensorStore tensorstore/kvstore/ocdbt/format/ wins
 * where they differ). One file per component:
 *
 *   ocdbt_codec.c          envelope (magic, length, version, compression, CRC-32C) + zstd
 *   ocdbt_config.c         manifest config
 *   ocdbt_data_file_id.c   data-file table (prefix-compressed paths)
 *   ocdbt_indirect_ref.c   (file, offset, length) references
 *   ocdbt_version_tree.c   version-tree leaf/interior arrays and nodes
 *   ocdbt_manifest.c       manifest
 *   ocdbt_btree.c          B+tree nodes
 *
 * Decoders report UR_ECORRUPT with err->offset = byte position in the blob they were given
 * (the decompressed body for everything but the envelope). Decoded objects own their
 * memory; free them with the matching _dispose. */
#ifndef UNROLL_OCDBT_FORMAT_H
#define UNROLL_OCDBT_FORMAT_H

#include "unroll/buf.h"
#include "unroll/err.h"
#include "unroll/rd.h"

#include <stddef.h>
#include <stdint.h>

#define UR_OCDBT_MAGIC_MANIFEST 0x0cdb3a2aU
#define UR_OCDBT_MAGIC_BTREE 0x0cdb20deU
#define UR_OCDBT_MAGIC_VERSION_NODE 0x0cdb1234U

#define UR_OCDBT_MAX_PATH 65535U
#define UR_OCDBT_MAX_KEY 65535U
#define UR_OCDBT_MAX_NODE_ENTRIES 1048576U
#define UR_OCDBT_MAX_INLINE_VALUE 1048576U
#define UR_OCDBT_MAX_REF_END 0x7fffffffffffffffULL
/* Cap on a decompressed object: the reference has none; 1 GiB is far above any real node. */
#define UR_OCDBT_MAX_DECODED ((size_t)1 << 30)

/* ---- envelope (ocdbt_codec.c) ---- */

/* Check the envelope of the object `p[0..n)` (magic, length == n, version 0, format 0/1,
 * CRC-32C) and put its body, decompressed if needed, in `body` (reset first). A zstd payload
 * must be exactly one frame with nothing after it. `what` names the object in messages. */
int ur_ocdbt_codec_decode(ur_buf *body, const uint8_t *p, size_t n, uint32_t magic,
                          const char *what, int *compressed_out, ur_err *err);
/* A body handed out piece by piece (ur_ocdbt_codec_open_src): the envelope is checked whole
 * when it is opened, a zstd payload decompressed as the pieces are asked for, so a large node
 * (Orbax writes a checkpoint's tree as one node of 60 MB) is never held whole. Borrows the
 * object's bytes. */
typedef struct ur_ocdbt_body_src {
    const uint8_t *p; /* the payload */
    size_t n;
    size_t at;        /* the payload's offset in the object, for messages */
    size_t in_pos;    /* payload bytes consumed */
    size_t produced;  /* body bytes handed out */
    size_t hint;      /* the body's size as the zstd frame declares it; 0 when unknown */
    void *dctx;       /* ZSTD_DCtx for a compressed payload, else NULL */
    int done;         /* the whole body has been handed out */
    int failed;       /* a read failed: its error's offset is in the object, not the body */
    const char *what;
} ur_ocdbt_body_src;

/* Check the envelope as ur_ocdbt_codec_decode does (and that a zstd payload is one whole
 * frame) and set *src up to hand out its body; `p` must outlive *src. UR_ECORRUPT, UR_ENOMEM. */
int ur_ocdbt_codec_open_src(ur_ocdbt_body_src *src, const uint8_t *p, size_t n, uint32_t magic,
                            const char *what, int *compressed_out, ur_err *err);
/* Append up to `want` (> 0) more bytes of the body to `out`; fewer only when the body ends
 * (src->done is then set). UR_ECORRUPT (a bad zstd stream, a body over UR_OCDBT_MAX_DECODED),
 * UR_ENOMEM. */
int ur_ocdbt_codec_src_read(ur_ocdbt_body_src *src, ur_buf *out, size_t want, ur_err *err);
/* Free what *src holds (not the object's bytes). */
void ur_ocdbt_codec_src_dispose(ur_ocdbt_body_src *src);
/* Append an envelope around `body` to `out`: zstd level `level` when `compress`. */
int ur_ocdbt_codec_encode(ur_buf *out, uint32_t magic, const uint8_t *body, size_t n, int compress,
                          int level, ur_err *err);
/* Decode a varint that must fit 16 bits (riegeli reads 32 and checks). */
uint16_t ur_ocdbt_codec_varint16(ur_rd *rd);

/* ---- config (ocdbt_config.c) ---- */

typedef struct ur_ocdbt_config {
    uint8_t uuid[16];
    uint8_t manifest_kind; /* 0 single, 1 numbered */
    uint32_t max_inline_value_bytes;
    uint32_t max_decoded_node_bytes;
    uint8_t version_tree_arity_log2; /* 1..16 */
    uint32_t compression;            /* 0 none, 1 zstd */
    int32_t zstd_level;
} ur_ocdbt_config;

void ur_ocdbt_config_init_default(ur_ocdbt_config *c);
int ur_ocdbt_config_decode(ur_ocdbt_config *c, ur_rd *rd, ur_err *err);
int ur_ocdbt_config_encode(ur_buf *out, const ur_ocdbt_config *c, ur_err *err);

/* ---- data-file table (ocdbt_data_file_id.c) ---- */

typedef struct ur_ocdbt_file_id {
    char *path;      /* transitive + base + relative path, NUL-terminated (owned) */
    size_t len;      /* strlen-equivalent length of path (paths may not hold NUL: refused) */
    size_t base_len; /* length of transitive + base part */
} ur_ocdbt_file_id;

typedef struct ur_ocdbt_table {
    size_t n;
    ur_ocdbt_file_id *f;
} ur_ocdbt_table;

/* Decode a table; every path gets `transitive` (length tlen) in front of it. */
int ur_ocdbt_table_decode(ur_ocdbt_table *t, ur_rd *rd, const char *transitive, size_t tlen,
                          ur_err *err);
void ur_ocdbt_table_dispose(ur_ocdbt_table *t);
/* Encode `t` (entries must be sorted by (base, relative) and distinct; no transitive part). */
int ur_ocdbt_table_encode(ur_buf *out, const ur_ocdbt_table *t, ur_err *err);
/* Sort and deduplicate in place (the writer's rule; index = position afterwards). */
void ur_ocdbt_table_sort(ur_ocdbt_table *t);

/* ---- indirect references (ocdbt_indirect_ref.c) ---- */

typedef struct ur_ocdbt_ref {
    uint64_t file; /* index into the containing object's table */
    uint64_t offset;
    uint64_t length;
} ur_ocdbt_ref;

typedef struct ur_ocdbt_stats {
    uint64_t num_keys;
    uint64_t num_tree_bytes;
    uint64_t num_indirect_value_bytes;
} ur_ocdbt_stats;

/* 1 when `r` is the Missing sentinel (offset = length = 2^64-1). */
int ur_ocdbt_ref_is_missing(const ur_ocdbt_ref *r);
/* Validate a reference against a table of n_files: index in range, offset + length no
 * overflow and <= 2^63-1. `at` is the offset for the error. */
int ur_ocdbt_ref_validate(const ur_ocdbt_ref *r, size_t n_files, uint64_t at, ur_err *err);

/* ---- version tree (ocdbt_version_tree.c) ---- */

typedef struct ur_ocdbt_version {
    uint64_t generation;
    uint8_t root_height;
    ur_ocdbt_ref root;
    ur_ocdbt_stats stats;
    uint64_t commit_time;
} ur_ocdbt_version;

typedef struct ur_ocdbt_vnode_ref {
    uint64_t generation; /* last generation in the subtree */
    ur_ocdbt_ref ref;
    uint64_t num_generations;
    uint64_t commit_time; /* earliest in the subtree */
    uint8_t height;       /* stored only in the manifest's version_nodes */
} ur_ocdbt_vnode_ref;

/* Leaf array (manifest inline_versions, height-0 nodes). */
int ur_ocdbt_versions_decode(ur_ocdbt_version **out, size_t *n_out, ur_rd *rd, uint8_t arity_log2,
                             size_t n_files, ur_err *err);
int ur_ocdbt_versions_encode(ur_buf *out, const ur_ocdbt_version *v, size_t n, ur_err *err);
/* Interior array; with_height: manifest form (entry_height column). height: node height
 * (ignored when with_height). */
int ur_ocdbt_vnode_refs_decode(ur_ocdbt_vnode_ref **out, size_t *n_out, ur_rd *rd,
                               uint8_t arity_log2, unsigned height, int with_height,
                               size_t n_files, ur_err *err);
int ur_ocdbt_vnode_refs_encode(ur_buf *out, const ur_ocdbt_vnode_ref *v, size_t n, int with_height,
                               ur_err *err);

typedef struct ur_ocdbt_version_node {
    uint8_t arity_log2;
    uint8_t height;
    ur_ocdbt_table table;
    ur_ocdbt_version *versions; /* height 0 */
    ur_ocdbt_vnode_ref *children; /* height > 0 */
    size_t n;
} ur_ocdbt_version_node;

int ur_ocdbt_version_node_decode(ur_ocdbt_version_node *node, const uint8_t *body, size_t n,
                                 const char *transitive, size_t tlen, ur_err *err);
int ur_ocdbt_version_node_encode(ur_buf *out, const ur_ocdbt_version_node *node, ur_err *err);
void ur_ocdbt_version_node_dispose(ur_ocdbt_version_node *node);

/* ---- manifest (ocdbt_manifest.c) ---- */

typedef struct ur_ocdbt_manifest {
    ur_ocdbt_config config;
    ur_ocdbt_table table;
    ur_ocdbt_version *versions;
    size_t n_versions;
    ur_ocdbt_vnode_ref *vnodes;
    size_t n_vnodes;
} ur_ocdbt_manifest;

/* Decode a manifest body. A config-only (numbered) manifest has n_versions == 0. */
int ur_ocdbt_manifest_decode(ur_ocdbt_manifest *m, const uint8_t *body, size_t n, ur_err *err);
int ur_ocdbt_manifest_encode(ur_buf *out, const ur_ocdbt_manifest *m, ur_err *err);
void ur_ocdbt_manifest_dispose(ur_ocdbt_manifest *m);

/* ---- B+tree node (ocdbt_btree.c) ---- */

typedef struct ur_ocdbt_btree_entry {
    ur_ocdbt_ref ref;            /* leaf indirect value, or interior child */
    uint64_t value_len;          /* leaf */
    uint32_t key_off; /* relative key = node->keys[key_off .. key_off + key_len) (< 1 GiB) */
    uint32_t value_off; /* leaf inline: value = node->values.data[value_off ..] */
    uint16_t key_len;
    uint16_t subtree_prefix_len; /* interior only */
    uint8_t indirect;            /* leaf: 1 when the value is out of line */
} ur_ocdbt_btree_entry;

/* 48 bytes an entry (Orbax's one-node trees hold two entries per array), the statistics of
 * an interior node's children beside them. */
typedef struct ur_ocdbt_btree_node {
    uint8_t height;
    ur_ocdbt_table table;
    size_t n;
    ur_ocdbt_btree_entry *e;
    ur_ocdbt_stats *stats; /* interior: n entries, the subtree of e[i]; leaf: NULL */
    uint8_t *keys; /* all relative keys, back to back */
    ur_buf values; /* the inline values, each distinct one of 64 bytes or more held once */
} ur_ocdbt_btree_node;

/* Decode a B+tree node body; takes ownership of `body` (left empty) on success and failure
 * and frees it: what the node keeps is copied out (keys, entries, inline values). */
int ur_ocdbt_btree_decode(ur_ocdbt_btree_node *node, ur_buf *body, const char *transitive,
                          size_t tlen, ur_err *err);
/* The same from a body handed out piece by piece: only the columns before the inline values
 * and one value at a time are held, not the body. Same results and errors as the above on
 * the whole body. */
int ur_ocdbt_btree_decode_src(ur_ocdbt_btree_node *node, ur_ocdbt_body_src *src,
                              const char *transitive, size_t tlen, ur_err *err);
void ur_ocdbt_btree_dispose(ur_ocdbt_btree_node *node);

/* Entry for the encoder: key relative to the node's implicit prefix. */
typedef struct ur_ocdbt_btree_enc_entry {
    const uint8_t *key;
    size_t key_len;
    size_t subtree_prefix_len; /* interior */
    int indirect;              /* leaf */
    const uint8_t *value;      /* leaf inline */
    uint64_t value_len;        /* leaf */
    ur_ocdbt_ref ref;          /* leaf indirect / interior child (file = table index) */
    ur_ocdbt_stats stats;      /* interior */
} ur_ocdbt_btree_enc_entry;

/* Encode a node body. Keys must be strictly increasing. */
int ur_ocdbt_btree_encode(ur_buf *out, uint8_t height, const ur_ocdbt_table *table,
                          const ur_ocdbt_btree_enc_entry *e, size_t n, ur_err *err);

#endif
