/* Shared between the files of the OCDBT layer (not part of the public API). */
#ifndef UNROLL_OCDBT_INTERNAL_H
#define UNROLL_OCDBT_INTERNAL_H

#include "ocdbt_format.h"
#include "unroll/kvstore.h"

typedef struct ur_ocdbt_reader ur_ocdbt_reader;

/* A decoded B+tree node shared through the reader's cache (refcounted). */
typedef struct ur_ocdbt_cnode ur_ocdbt_cnode;

/* The reader behind `kv`, or NULL when kv is not an OCDBT reader. */
ur_ocdbt_reader *ur_ocdbt_read__from_kv(ur_kvstore *kv);
const ur_ocdbt_manifest *ur_ocdbt_read__manifest(const ur_ocdbt_reader *r);
/* Name of the manifest file the versions came from (manifest.ocdbt or manifest.%016x). */
const char *ur_ocdbt_read__manifest_name(const ur_ocdbt_reader *r);

/* Read and decode the B+tree node at `ref` of file `file` (height checked when >= 0).
 * Release with ur_ocdbt_read__release. */
int ur_ocdbt_read__btree_node(ur_ocdbt_reader *r, const ur_ocdbt_file_id *file,
                              const ur_ocdbt_ref *ref, int height, ur_ocdbt_cnode **out,
                              ur_err *err);
const ur_ocdbt_btree_node *ur_ocdbt_read__node(const ur_ocdbt_cnode *c);
void ur_ocdbt_read__release(ur_ocdbt_reader *r, ur_ocdbt_cnode *c);

/* Read and decode a version-tree node (caller disposes it). */
int ur_ocdbt_read__version_node(ur_ocdbt_reader *r, const ur_ocdbt_file_id *file,
                                const ur_ocdbt_ref *ref, ur_ocdbt_version_node *out, ur_err *err);

/* Make a writer fresh from ur_ocdbt_create continue the database whose manifest is m (a
 * resume): its config, and its versions as the base of the next commit, which becomes
 * generation latest + 1 (ocdbt_write.c). */
int ur_ocdbt_write__adopt(ur_kvstore *kv, const ur_ocdbt_manifest *m, ur_err *err);

#endif
