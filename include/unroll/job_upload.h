/* Publishing a finished checkpoint to an object store (s3://, gs://), the way Orbax does there.
 *
 * An object store has no rename, so nothing can appear at once: Orbax's commit-file mode
 * writes everything under the final prefix and `commit_success.txt` last; readers (unroll
 * included, see orbax_ckpt.c) take a step only once its marker is there. unroll converts
 * into a local staging tree (unroll/job_publish.h, in $TMPDIR; its OCDBT data files may
 * have gone up already, unroll/job_stream.h), then uploads it:
 *   1. every data object (OCDBT data files, zarr chunks, array_metadatas, _sharding), in
 *      parallel;
 *   2. each OCDBT manifest (manifest.ocdbt, manifest.*) after the data it references;
 *   3. each item's _METADATA, then the step's _CHECKPOINT_METADATA (Orbax's commit-file
 *      order: every byte of every item before the file that says a step was saved there);
 *   4. the commit_success.txt markers, deepest first, the step's own last (their text names
 *      the final location, as Orbax writes it).
 * A run's claim on the destination (`<unit>/unroll-claim.txt`, unroll/job_claim.h) is not
 * the destination's content: it is neither counted, nor deleted, nor uploaded.
 * A destination prefix that already holds objects is refused (UR_EINVAL) unless `replace` is
 * set; then its markers are deleted first and the rest after, before anything is written.
 * A failure or a cancellation deletes every object this upload wrote (best effort; the
 * message says whether that worked) and never leaves a commit marker. */
#ifndef UNROLL_JOB_UPLOAD_H
#define UNROLL_JOB_UPLOAD_H

#include "unroll/err.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ur_job_upload_opts {
    int replace;      /* 1: delete what the destination holds instead of refusing */
    unsigned threads; /* parallel uploads of data objects; 0: 8 */
    /* With n_units > 0, only these paths relative to src (step directories such as "0" or
     * "base/0", or single files such as "loras/<id>/adapter_config.json") are uploaded, to the
     * same paths under dest, all in one upload (every unit's data before any manifest, every
     * marker last); "the destination" is then these units, not all of dest. */
    const char *const *units;
    size_t n_units;
    /* Called after each object is written, with the bytes written so far and the total (the
     * sizes of the staged files), from one thread at a time; NULL: no progress. */
    void (*progress)(void *ctx, uint64_t bytes_done, uint64_t bytes_total);
    void *progress_ctx;
    /* 1: add to a destination that holds objects (the finish of a multi-process run, whose
     * shares are already there; or data files this run streamed there during the conversion,
     * unroll/job_stream.h, after it was found empty): neither refused nor cleared;
     * `replace` is ignored */
    int add;
    /* Set: dest holds an earlier upload of this same tree (a share's progress, uploaded at
     * each commit: unroll/job_share_remote.h). A data object for which sent(ctx, key, size)
     * says 1 is there already, byte for byte, and is not sent again (manifests and metadata
     * always are); with `prune`, the data objects dest holds that src does not (files of a
     * killed attempt that no generation refers to) are deleted after the upload. dest is
     * neither refused nor cleared (`replace` ignored), and a failure deletes nothing: dest
     * stays as consistent as it was, its manifest going up after its data. */
    int (*sent)(void *ctx, const char *key, uint64_t size);
    void *sent_ctx;
    int prune;
    /* The output format's commit order (e.g. ur_hf_commit_phase): a key's phase, 0 for data
     * (sent in parallel), 1 to 3 for the files sent after it one at a time, phase by phase.
     * NULL: Orbax's order above. */
    int (*phase_of)(const char *key);
} ur_job_upload_opts;

/* Before converting: UR_EINVAL when `dest` (a location) holds objects and replace is 0;
 * UR_EIO when the store cannot be listed. */
int ur_job_upload_check_dest(const char *dest, int replace, ur_err *err);

/* How many objects the units (see ur_job_upload_opts) under `dest` hold. */
int ur_job_upload_count_units(const char *dest, const char *const *units, size_t n_units,
                              size_t *count, ur_err *err);

/* As ur_job_upload_check_dest for the units (see ur_job_upload_opts) under `dest`. */
int ur_job_upload_check_units(const char *dest, const char *const *units, size_t n_units,
                              int replace, ur_err *err);

/* Upload the tree under local directory `src` to location `dest` in the order above.
 * `cancel`, when set and nonzero between objects, stops the upload (UR_EINTERNAL
 * "interrupted") and deletes what was written. */
int ur_job_upload(const char *src, const char *dest, const ur_job_upload_opts *opts,
                  const volatile sig_atomic_t *cancel, ur_err *err);

#endif
