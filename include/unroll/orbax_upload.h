/* Publishing a finished checkpoint to an object store (s3://, gs://), the way Orbax does there.
 *
 * An object store has no rename, so nothing can appear at once: Orbax's commit-file mode
 * writes everything under the final prefix and `commit_success.txt` last; readers (unroll
 * included, see orbax_ckpt.c) take a step only once its marker is there. unroll converts
 * into a local staging tree (unroll/orbax_publish.h, in $TMPDIR), then uploads it:
 *   1. every data object (OCDBT data files, zarr chunks, array_metadatas, _sharding), in
 *      parallel;
 *   2. each OCDBT manifest (manifest.ocdbt, manifest.*) after the data it references;
 *   3. _METADATA and _CHECKPOINT_METADATA;
 *   4. the commit_success.txt markers, deepest first, the step's own last (their text names
 *      the final location, as Orbax writes it).
 * A destination prefix that already holds objects is refused (UR_EINVAL) unless `replace` is
 * set; then its markers are deleted first and the rest after, before anything is written.
 * A failure or a cancellation deletes every object this upload wrote (best effort; the
 * message says whether that worked) and never leaves a commit marker. */
#ifndef UNROLL_ORBAX_UPLOAD_H
#define UNROLL_ORBAX_UPLOAD_H

#include "unroll/err.h"

#include <signal.h>

typedef struct ur_orbax_upload_opts {
    int replace;      /* 1: delete what the destination holds instead of refusing */
    unsigned threads; /* parallel uploads of data objects; 0: 8 */
    /* 1: add to a destination that holds objects (the finish of a multi-process run, whose
     * shares are already there): neither refused nor cleared; `replace` is ignored */
    int add;
} ur_orbax_upload_opts;

/* Before converting: UR_EINVAL when `dest` (a location) holds objects and replace is 0;
 * UR_EIO when the store cannot be listed. */
int ur_orbax_upload_check_dest(const char *dest, int replace, ur_err *err);

/* Upload the tree under local directory `src` to location `dest` in the order above.
 * `cancel`, when set and nonzero between objects, stops the upload (UR_EINTERNAL
 * "interrupted") and deletes what was written. */
int ur_orbax_upload(const char *src, const char *dest, const ur_orbax_upload_opts *opts,
                    const volatile sig_atomic_t *cancel, ur_err *err);

#endif
