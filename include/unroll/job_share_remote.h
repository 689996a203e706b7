/* A multi-process conversion whose output is on an object store (s3://, gs://): the object-store
 * counterpart of unroll/job_share.h. An object store has no rename, no lock and no link, so
 * everything is written under the final step prefix S = `<checkpoint_dir>/0`, in Orbax's
 * commit-file order (unroll/job_upload.h), and the one atomic step is the store's conditional
 * create (ur_kvstore_create):
 *
 *   S/unroll-multi/run.txt             what the run is; created once (conditional create), a
 *                                      process whose run.txt differs is refused (UR_EINVAL)
 *   S/items/ocdbt.process_<i>/         share i's database: its data files, then its manifest
 *   S/unroll-multi/shares/<i>/         share i's _METADATA, _sharding, array_metadatas.json,
 *                                      custom_metadata.json (for _CHECKPOINT_METADATA)
 *   S/unroll-multi/shares/<i>.done     share i is complete (written after all of the above)
 *   S/unroll-multi/finish.claim        the finisher: the process whose conditional create of it
 *                                      succeeds, once it sees every share done
 *   S/unroll-multi/started             when the run started (_CHECKPOINT_METADATA), created by
 *                                      the process that created run.txt
 *
 * S/unroll-multi/ is the run's ledger, written by the same code as a directory's
 * (src/job/job_ledger.h), and the finished step is built by the same code too
 * (src/job/job_finish.h), in a local directory, then uploaded.
 *
 * The finish (the claim's winner, or `unroll merge`): check every share's metadata is the same,
 * merge the shares' databases (read from the store) into the top-level one in a local
 * directory, then upload its nodes, manifest.ocdbt, _METADATA, _sharding,
 * array_metadatas/process_0, _CHECKPOINT_METADATA and the commit_success.txt markers last
 * (items/, then S/), and delete S/unroll-multi/. Until the marker is there, no reader (Orbax's
 * commit-file mode, unroll) takes S as a checkpoint; a share that never completes leaves no
 * top-level manifest and no marker.
 *
 * Each share converts locally first ($TMPDIR, a tree named after the run and the index that a
 * rerun on the same machine continues from its last commit: job_site_bucket.c), and its progress
 * is kept in the store too (ur_job_rprogress), so that a rerun on another machine (a preempted
 * VM replaced, an empty $TMPDIR) continues from the last commit as well:
 *
 *   S/unroll-multi/shares/<i>.progress  the resume point ("next_item <n>"), share i's
 *                                       manifest as of it (base64) and every data file of
 *                                       its database as of it (name, size, CRC-32C); in a
 *                                       run of several units, step unit k > 0's is
 *                                       shares/<i>.u<k>.progress
 *
 * At each commit of the share's database the share uploads its new data files, then its
 * manifest, then its metadata, then this mark; a rerun that has no local tree as far along
 * fetches the files the mark lists, the mark's own copy of the manifest (the store's
 * manifest.ocdbt may be a later generation's, whose upload was killed before its mark) and the
 * metadata into a fresh local tree and
 * continues from the mark (the database's generations after it, if any, are dropped as in a
 * local resume). Data files have names drawn from a fixed sequence, so a file the store holds
 * counts as sent only when the mark lists it with the local file's size and CRC-32C. When the
 * share is complete, the upload sends the rest (no listed file again), deletes the data files
 * of killed attempts that no generation refers to, and writes the done marker.
 * A single-process --resume run into an object store is share 0 of 1 of this protocol.
 * A finisher killed after its claim leaves the claim, which names its process index, host, pid
 * and start time. A rerun of that same process index takes the finish over (there is no lock
 * to tell a dead process from a live one: a process index must run once at a time, as a
 * Slurm or Kubernetes retry does), and so does `unroll merge` (run it only once no finisher is
 * alive). A finish redone overwrites what the dead one uploaded with the same bytes (the merge
 * is deterministic), the markers last.
 *
 * The finish also uploads S/unroll-run.txt, run.txt's text (a file beside items/: Orbax takes
 * only the step's directories for items), so that a rerun after publication with other
 * arguments is refused instead of reporting "already published". */
#ifndef UNROLL_JOB_SHARE_REMOTE_H
#define UNROLL_JOB_SHARE_REMOTE_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <signal.h>
#include <stdint.h>

typedef struct ur_job_rshare ur_job_rshare;

#define UR_JOB_RSHARE_DIR "unroll-multi"
#define UR_JOB_RSHARE_RUN_KEPT "unroll-run.txt"

/* Join (or start) the run writing to step location `step` (`<checkpoint_dir>/0`) as process
 * `index` of `count`; run_text as for ur_job_share_open. *published = 1 when S already holds
 * a committed checkpoint (nothing else to do). UR_EINVAL when S holds another run, or objects
 * of something that is not a run, or was published by a run whose run.txt differs. Published
 * by this run: what a finisher killed after the marker left of S/unroll-multi/ is deleted. */
int ur_job_rshare_open(ur_job_rshare **out, const char *step, int count, int index,
                       const char *run_text, int *published, ur_err *err);

/* Whether share i is complete (its marker is in the store). UR_EIO when the store cannot say. */
int ur_job_rshare_is_done(ur_job_rshare *s, int i, int *done, ur_err *err);

/* A share's progress in the store (above: S/unroll-multi/shares/<i>.progress). */
typedef struct ur_job_rprogress ur_job_rprogress;

int ur_job_rprogress_open(ur_job_rprogress **out, const char *step, int index, ur_err *err);
/* As ur_job_rprogress_open for step unit k of a run of several (LoRA): the database at
 * `unit_at` (the unit's location: S itself for k = 0), the metadata and the mark under S's
 * unroll-multi/shares/<index>.u<k> (unit k > 0), as the local staging names them. */
int ur_job_rprogress_open_unit(ur_job_rprogress **out, const char *step, const char *unit_at,
                               int index, size_t k, ur_err *err);
void ur_job_rprogress_close(ur_job_rprogress *p);

/* The store's mark: *next_item = its resume point (0: none), and the data files it lists are
 * taken as sent. UR_ECORRUPT for a mark that cannot be read. */
int ur_job_rprogress_read(ur_job_rprogress *p, uint64_t *next_item, ur_err *err);

/* Fetch the share's database as of the mark (the listed data files, the manifest) into the
 * local directory `db_dir` and its metadata into `meta_dir`. */
int ur_job_rprogress_fetch(ur_job_rprogress *p, const char *db_dir, const char *meta_dir,
                           ur_err *err);

/* After a commit of the local database `db_dir`: upload what the store lacks of it (data
 * files, then the manifest), the metadata in `meta_dir`, then the mark saying the database
 * holds every work item before `next_item`. */
int ur_job_rprogress_save(ur_job_rprogress *p, const char *db_dir, const char *meta_dir,
                          uint64_t next_item, const volatile sig_atomic_t *cancel, ur_err *err);

/* Upload `db_dir` and `meta_dir` over the share's objects: data files the mark lists are not
 * sent again; with `prune`, the share's data files no longer in db_dir are deleted. */
int ur_job_rprogress_upload(ur_job_rprogress *p, const char *db_dir, const char *meta_dir,
                            int prune, const volatile sig_atomic_t *cancel, ur_err *err);

/* Upload this process's complete share: the database in local directory `db_dir`, the
 * metadata in `meta_dir` (what ur_job_share_begin handed out), then the done marker holding
 * `summary`. With `progress` (the share's, read), over what it uploaded
 * (ur_job_rprogress_upload with prune); without, objects a killed earlier attempt left are
 * replaced. */
int ur_job_rshare_upload(ur_job_rshare *s, ur_job_rprogress *progress, const char *db_dir,
                         const char *meta_dir, const char *summary,
                         const volatile sig_atomic_t *cancel, ur_err *err);

/* When every share is complete and this process's conditional create of the claim succeeds:
 * finish (*published = 1). Otherwise nothing (*missing = shares not complete; 0 with
 * *published 0: another process holds the claim). */
int ur_job_rshare_finish(ur_job_rshare *s, const volatile sig_atomic_t *cancel, int *published,
                         int *missing, ur_err *err);

/* 1 when the last ur_job_rshare_finish took the finish over from a dead earlier attempt of
 * this process index (whose claim it found). */
int ur_job_rshare_took_over(const ur_job_rshare *s);

void ur_job_rshare_close(ur_job_rshare *s);

/* A run of several units (LoRA: "base/0", then per adapter "loras/<id>/0" and
 * "loras/<id>/adapter_config.json"), as ur_job_rshare_open with S = checkpoint_dir/units[0]
 * (the run's objects there; run.txt lists the units, "unit <u>" lines). Step unit k's share i
 * database goes to `<checkpoint_dir>/<unit>/items/ocdbt.process_<i>/`, its metadata to
 * S/unroll-multi/shares/<i>[.u<k>]/ (unit k > 0); a file unit to S/unroll-multi/units/<unit>
 * (share 0's copy). The finish builds every step unit's top level (its shares merged) and
 * uploads all units in one upload, every marker last and S's own at the very end, so S's
 * marker means the whole set is published; a finish cut short is redone as above. Before the
 * run starts, units holding objects are refused (UR_EINVAL) as for a single-process output. */
int ur_job_rshare_open_units(ur_job_rshare **out, const char *checkpoint_dir,
                             const char *const *units, size_t n_units, int count, int index,
                             const char *run_text, int *published, ur_err *err);

/* Upload this process's complete share of every unit: dirs[k] the local database of step unit
 * k (meta_dirs[k] its metadata), or the local file of file unit k; then the done marker. With
 * progress[k] (step unit k's, read), over what it uploaded (ur_job_rprogress_upload with
 * prune); without, objects a killed earlier attempt left are replaced. */
int ur_job_rshare_upload_units(ur_job_rshare *s, const char *const *dirs,
                               const char *const *meta_dirs, ur_job_rprogress *const *progress,
                               const char *summary, const volatile sig_atomic_t *cancel,
                               ur_err *err);

/* `unroll merge` of a run staged in an object store: `checkpoint_dir` (or the step S itself).
 * Refused (UR_EIO naming them) when shares are missing; otherwise finished, whoever holds the
 * claim. *published_to gets S (ur_free it). */
int ur_job_rshare_merge(const char *checkpoint_dir, const volatile sig_atomic_t *cancel,
                        char **published_to, ur_err *err);

/* `unroll ls` / `inspect` of a run staged in an object store (`checkpoint_dir` or its step):
 * one line per share, complete or not, into `out`; *staged = 0 (nothing written) when no
 * unpublished run is there. */
int ur_job_rshare_status(const char *checkpoint_dir, ur_buf *out, int *staged, ur_err *err);

#endif
