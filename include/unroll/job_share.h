/* One conversion run by several processes (on one machine or several sharing a file system),
 * with no coordinator: each process converts its share of the plan (exec.h,
 * ur_exec_share_range) into its own OCDBT database, as Orbax's multi-process saves do, and the
 * last one to finish merges them and publishes the checkpoint.
 *
 * The staging directory of destination C is `<C>.unroll-multi/` (beside C, so the step moves
 * into place by rename):
 *
 *   run.txt                       what the run is (arguments, input identity, process count);
 *                                 created once (the file store's conditional create: link(2)
 *                                 of a complete temporary file); a process whose run.txt
 *                                 differs is refused
 *   started                       when the run started (_CHECKPOINT_METADATA), created by the
 *                                 process that created run.txt
 *   step/items/ocdbt.process_<i>/ share i's database (every output array's zarr metadata and
 *                                 the chunks of its share)
 *   shares/<i>/                   share i's _METADATA, _sharding, array_metadatas.json,
 *                                 custom_metadata.json (for _CHECKPOINT_METADATA)
 *   shares/<i>.progress           share i's database holds its work items before this one
 *                                 (saved after each commit of it, a new OCDBT
 *                                 generation of the database: resume point)
 *   shares/<i>.done               share i is complete (written last, atomically)
 *   finish.lock                   flock'ed by the process that sees every share done, from
 *                                 before its claim to its end: held, a live process finishes
 *   finish.claim                  the finisher, created (conditional create) under that lock;
 *                                 a claim found by the next holder of the lock is a dead
 *                                 finisher's, and is taken over
 *
 * run.txt, started, shares/<i>.done and finish.claim are the run's ledger, written by the same
 * code for a directory and for an object store (src/job/job_ledger.h, over the file store on
 * the staging directory); so is the finished step (src/job/job_finish.h).
 *
 * The finish: merge the shares' databases into the top-level one (ur_ocdbt_merge: Orbax's
 * layout, values referred to through "ocdbt.process_<i>/"), check every share's metadata is
 * the same, write _METADATA, _sharding, array_metadatas/process_0, commit_success.txt and
 * _CHECKPOINT_METADATA, then publish step/ as `C/0` through unroll/job_publish.h (lock,
 * exchange) and remove the staging directory. Until then nothing under C changes, and the
 * staging directory holds no top-level manifest.ocdbt: a share that never finishes leaves
 * nothing that opens as a checkpoint.
 *
 * A rerun of a share that is already done does nothing but try the finish; a rerun of one
 * that was killed continues from its last progress mark (the database generation before it),
 * or redoes the share when it saved none. The finish also writes run.txt's text into the
 * first unit as unroll-run.txt (as the object-store protocol does): a rerun of any process
 * after the publication finds it, stops ("already published by this run") and clears what a
 * finisher killed after the publication left beside C (ur_job_publish_tidy).
 *
 * A run of several units (LoRA: "base/0", then per adapter "loras/<id>/0" and
 * "loras/<id>/adapter_config.json"; ur_job_share_open_units) stages unit u as
 * `units/<u>` instead of step/, each step unit in the layout above (share i's database in
 * `units/<u>/items/ocdbt.process_<i>/`, its metadata in shares/<i>/ for the first unit and
 * shares/<i>.u<k>/ for unit k, its resume point shares/<i>[.u<k>].progress, and
 * shares/<i>[.u<k>].unit-done once the unit's part of the share is committed); run.txt lists
 * the units ("unit <u>" lines). The finish merges every step unit and publishes all of them
 * in one publication (unroll/job_publish.h). Before it moves anything it writes
 * publishing.txt, one line per unit: its identity (device, inode) and the publication
 * staging path it goes to. A finisher killed while publishing leaves it; the next process
 * (or unroll merge) moves back what is still in that staging directory and publishes the
 * units not yet in place, so a crash never leaves a half-published set for good. */
#ifndef UNROLL_JOB_SHARE_H
#define UNROLL_JOB_SHARE_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ur_job_share ur_job_share;

#define UR_JOB_SHARE_SUFFIX ".unroll-multi"
/* The run's text, kept in the published first unit ("0" or "base/0"), as in an object store
 * (job_share_remote.h). */
#define UR_JOB_SHARE_RUN_KEPT "unroll-run.txt"
#define UR_JOB_SHARE_MAX 65536

/* When the run texts `have` (the staged run's) and `want` (this process's) differ in the
 * input's or the config's identity only (their "file", "files" and "content" lines; the run
 * text of src/job/job_ident.c), 1 with `what` naming the first change, e.g.
 * "d/ab12 (size 123 -> 456)", "_METADATA (content)", "the config file unroll.yml (content)";
 * else 0 (other arguments differ, or nothing does). Shared by the local and the object-store
 * runs (job_share_remote.h), which refuse a rerun over a changed input (UR_EINVAL) rather
 * than mix what two inputs hold. */
int ur_job_run_change(const char *have, const char *want, char *what, size_t what_size);

/* Join (or start) the run for destination `dest` as process `index` of `count`. `run_text`
 * describes the run (it must be the same text in every process; it includes a line
 * "input <path>" naming what the run reads, used by the finish's overlap check unless it is an
 * s3:// or gs:// location). UR_EINVAL when the staging directory holds a different run. */
int ur_job_share_open(ur_job_share **out, const char *dest, int count, int index,
                      const char *run_text, ur_err *err);

/* As ur_job_share_open for a run of the units `units` (relative to dest, in publication
 * order; file units such as "loras/<id>/adapter_config.json" are staged by the caller at
 * ur_job_share_unit_path before its share is marked done). n_units 0: the one "0". */
int ur_job_share_open_units(ur_job_share **out, const char *dest, const char *const *units,
                            size_t n_units, int count, int index, const char *run_text,
                            ur_err *err);

/* 1 when the destination's first unit was published by this very run (its kept run text is
 * this run's, and nothing is staged): a rerun of one of its processes has nothing to do. */
int ur_job_share_published(const ur_job_share *s);

/* Borrowed: where unit k is staged (a step directory for a step unit, else the file). */
const char *ur_job_share_unit_path(const ur_job_share *s, size_t k);

/* Start this process's share of a run of several units: hold shares/<index>.lock (unless held
 * already) and remove its done marker. Then, per step unit not yet done,
 * ur_job_share_unit_begin, the conversion, ur_job_share_unit_mark_done; then
 * ur_job_share_mark_done. */
int ur_job_share_lock(ur_job_share *s, ur_err *err);
/* As ur_job_share_begin for unit k (whose progress save_progress then records). */
int ur_job_share_unit_begin(ur_job_share *s, size_t k, const char **meta_dir,
                            uint64_t *resume_from, ur_err *err);
/* Whether this process's part of unit k is committed (a rerun skips it). */
int ur_job_share_unit_is_done(const ur_job_share *s, size_t k);
int ur_job_share_unit_mark_done(ur_job_share *s, size_t k, ur_err *err);
/* Forget that unit k is committed: its tree was replaced by an older one (job_site_bucket.c,
 * a share's progress fetched from the store), to be continued. */
int ur_job_share_unit_undo(ur_job_share *s, size_t k, ur_err *err);

/* Whether share i is complete. */
int ur_job_share_is_done(const ur_job_share *s, int i);

/* Borrowed: the step directory the shares write into (for ur_orbax_writer_create). */
const char *ur_job_share_step(const ur_job_share *s);

/* Start this process's share: remove its done marker; when a killed run of it saved
 * progress (ur_job_share_save_progress) *resume_from gets that value and the share is to
 * be continued (its database is kept), else its metadata directory is emptied and
 * *resume_from = 0 (started afresh). *meta_dir (borrowed): where its writer puts the
 * metadata. */
int ur_job_share_begin(ur_job_share *s, const char **meta_dir, uint64_t *resume_from, ur_err *err);

/* Record that the share's database holds every work item before `next_item` (after a
 * commit of it, a new generation): a rerun continues from there. */
int ur_job_share_save_progress(ur_job_share *s, uint64_t next_item, ur_err *err);

/* The resume point save_progress recorded for the current unit (0: none). */
uint64_t ur_job_share_saved_progress(const ur_job_share *s);
/* The same for unit k, and its recording (job_site_bucket.c: a unit's progress fetched from the
 * store, to be continued by ur_job_share_unit_begin). */
uint64_t ur_job_share_unit_saved_progress(const ur_job_share *s, size_t k);
int ur_job_share_unit_save_progress(ur_job_share *s, size_t k, uint64_t next_item, ur_err *err);
/* Where this process's share of step unit k keeps its metadata (shares/<index>[.u<k>]);
 * ur_free it. */
char *ur_job_share_unit_meta_dir(const ur_job_share *s, size_t k);

/* Mark this process's share complete (after its writer committed); `summary` (one line) is
 * kept in the marker. */
int ur_job_share_mark_done(ur_job_share *s, const char *summary, ur_err *err);

/* If every share is complete and this process wins the claim, finish and publish the run
 * (*published = 1; *published_to gets C's canonical path, ur_free it). Otherwise nothing
 * happens (*published = 0, *missing = shares not yet complete). */
int ur_job_share_finish(ur_job_share *s, const volatile sig_atomic_t *cancel, int *published,
                        int *missing, char **published_to, ur_err *err);

void ur_job_share_close(ur_job_share *s);

/* `unroll merge`: open the run staged for destination `path` (C, or the staging directory
 * itself), refuse when a share is not complete (UR_EIO naming the missing indices), else
 * finish it as above. */
int ur_job_share_merge(const char *path, const volatile sig_atomic_t *cancel, char **published_to,
                       ur_err *err);

/* Describe the state of a staged run (`path` as for merge) into `out`: one line per share,
 * complete or not, with its summary. UR_EINVAL when there is no staged run there. */
int ur_job_share_status(const char *path, ur_buf *out, ur_err *err);

#endif
