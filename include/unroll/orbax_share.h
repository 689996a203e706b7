/* One conversion run by several processes (on one machine or several sharing a file system),
 * with no coordinator: each process converts its share of the plan (plan_exec.h,
 * ur_exec_share_range) into its own OCDBT database, as Orbax's multi-process saves do, and the
 * last one to finish merges them and publishes the checkpoint.
 *
 * The staging directory of destination C is `<C>.unroll-multi/` (beside C, so the step moves
 * into place by rename):
 *
 *   run.txt                       what the run is (arguments, input identity, process count);
 *                                 created once, exclusively (link(2) of a complete temporary
 *                                 file); a process whose run.txt differs is refused
 *   step/items/ocdbt.process_<i>/ share i's database (every output array's zarr metadata and
 *                                 the chunks of its share)
 *   shares/<i>/                   share i's _METADATA, _sharding, array_metadatas.json
 *   shares/<i>.progress           share i's database holds its work items before this one
 *                                 (saved after each snapshot of it: resume point)
 *   shares/<i>.done               share i is complete (written last, atomically)
 *   finish.claim                  the finisher: created with O_EXCL by the process that sees
 *                                 every share done, and flock'ed while it finishes (a claim
 *                                 whose holder died is taken over)
 *
 * The finish: merge the shares' databases into the top-level one (ur_ocdbt_merge: Orbax's
 * layout, values referred to through "ocdbt.process_<i>/"), check every share's metadata is
 * the same, write _METADATA, _sharding, array_metadatas/process_0, commit_success.txt and
 * _CHECKPOINT_METADATA, then publish step/ as `C/0` through unroll/orbax_publish.h (lock,
 * exchange) and remove the staging directory. Until then nothing under C changes, and the
 * staging directory holds no top-level manifest.ocdbt: a share that never finishes leaves
 * nothing that opens as a checkpoint.
 *
 * A rerun of a share that is already done does nothing but try the finish; a rerun of one
 * that was killed continues from its last progress mark (the database snapshot before it),
 * or redoes the share when it saved none. */
#ifndef UNROLL_ORBAX_SHARE_H
#define UNROLL_ORBAX_SHARE_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ur_orbax_share ur_orbax_share;

#define UR_ORBAX_SHARE_SUFFIX ".unroll-multi"
#define UR_ORBAX_SHARE_MAX 65536

/* Join (or start) the run for destination `dest` as process `index` of `count`. `run_text`
 * describes the run (it must be the same text in every process; it includes a line
 * "input <path>" naming what the run reads, used by the finish's overlap check). UR_EINVAL
 * when the staging directory holds a different run. */
int ur_orbax_share_open(ur_orbax_share **out, const char *dest, int count, int index,
                        const char *run_text, ur_err *err);

/* Whether share i is complete. */
int ur_orbax_share_is_done(const ur_orbax_share *s, int i);

/* Borrowed: the step directory the shares write into (for ur_orbax_writer_create). */
const char *ur_orbax_share_step(const ur_orbax_share *s);

/* Start this process's share: remove its done marker; when a killed run of it saved
 * progress (ur_orbax_share_save_progress) *resume_from gets that value and the share is to
 * be continued (its database is kept), else its metadata directory is emptied and
 * *resume_from = 0 (started afresh). *meta_dir (borrowed): where its writer puts the
 * metadata. */
int ur_orbax_share_begin(ur_orbax_share *s, const char **meta_dir, uint64_t *resume_from,
                         ur_err *err);

/* Record that the share's database holds every work item before `next_item` (after a
 * snapshot of it): a rerun continues from there. */
int ur_orbax_share_save_progress(ur_orbax_share *s, uint64_t next_item, ur_err *err);

/* Mark this process's share complete (after its writer committed); `summary` (one line) is
 * kept in the marker. */
int ur_orbax_share_mark_done(ur_orbax_share *s, const char *summary, ur_err *err);

/* If every share is complete and this process wins the claim, finish and publish the run
 * (*published = 1; *published_to gets C's canonical path, ur_free it). Otherwise nothing
 * happens (*published = 0, *missing = shares not yet complete). */
int ur_orbax_share_finish(ur_orbax_share *s, const volatile sig_atomic_t *cancel, int *published,
                          int *missing, char **published_to, ur_err *err);

void ur_orbax_share_close(ur_orbax_share *s);

/* `unroll merge`: open the run staged for destination `path` (C, or the staging directory
 * itself), refuse when a share is not complete (UR_EIO naming the missing indices), else
 * finish it as above. */
int ur_orbax_share_merge(const char *path, const volatile sig_atomic_t *cancel,
                         char **published_to, ur_err *err);

/* Describe the state of a staged run (`path` as for merge) into `out`: one line per share,
 * complete or not, with its summary. UR_EINVAL when there is no staged run there. */
int ur_orbax_share_status(const char *path, ur_buf *out, ur_err *err);

#endif
