/* Streaming an object-store output's data files while the conversion runs.
 *
 * Without it the whole output is staged on local disk and uploaded at the end
 * (unroll/job_upload.h). With it, each OCDBT data file the writer is done with
 * (ur_ocdbt_write_opts.on_data_file), or each chunk of a plain-zarr output once it is stored
 * (the same hook, called by the Orbax writer), is uploaded in the background as soon as it is
 * closed (S3 multipart / GCS resumable for a large one) and removed locally, so the local disk
 * holds the file being written plus at most `max_pending` finished ones, not the output. Data
 * files come first in Orbax's commit-file order, and nothing refers to them until a manifest is
 * written, so uploading them early publishes nothing; the final upload (ur_job_upload, with
 * `add`) then sends the rest (the last data files, manifests, metadata, markers).
 * After a failure anywhere in the run, ur_job_stream_undo deletes what was streamed. */
#ifndef UNROLL_JOB_STREAM_H
#define UNROLL_JOB_STREAM_H

#include "unroll/err.h"

#include <stddef.h>

typedef struct ur_job_stream ur_job_stream;

/* Uploads go below `dest` (a location); `threads` run at once (0: 2); push waits while
 * `max_pending` files (0: threads) are queued or going up. */
int ur_job_stream_create(ur_job_stream **out, const char *dest, unsigned threads,
                         unsigned max_pending, ur_err *err);

/* ur_run_opts.on_data_file (ctx: the stream): the local file `path` goes up as `key`. It is
 * opened and its name removed at once (the directories above it may then be renamed, as
 * Orbax's writer does at its commit); its blocks are freed when its upload ends. Fails with
 * the first upload's error once one has failed. */
int ur_job_stream_push(void *stream, const char *path, const char *key, ur_err *err);

/* Wait for every queued upload; the first failure (UR_OK when all went up). */
int ur_job_stream_finish(ur_job_stream *st, ur_err *err);

/* Objects uploaded so far. */
size_t ur_job_stream_count(const ur_job_stream *st);

/* After a failure: wait for the uploads, then delete every object streamed. Returns how many
 * deletes failed (the first failure in *first, when not NULL). */
size_t ur_job_stream_undo(ur_job_stream *st, ur_err *first);

/* Stops the threads (after waiting for them); NULL-safe. */
void ur_job_stream_free(ur_job_stream *st);

#endif
