/* A multi-process conversion whose output is on an object store (s3://, gs://): the object-store
 * counterpart of unroll/orbax_share.h. An object store has no rename, no lock and no link, so
 * everything is written under the final step prefix S = `<checkpoint_dir>/0`, in Orbax's
 * commit-file order (unroll/orbax_upload.h), and the one atomic step is the store's conditional
 * create (ur_kvstore_create):
 *
 *   S/unroll-multi/run.txt             what the run is; created once (conditional create), a
 *                                      process whose run.txt differs is refused (UR_EINVAL)
 *   S/items/ocdbt.process_<i>/         share i's database: its data files, then its manifest
 *   S/unroll-multi/shares/<i>/         share i's _METADATA, _sharding, array_metadatas.json
 *   S/unroll-multi/shares/<i>.done     share i is complete (written after all of the above)
 *   S/unroll-multi/finish.claim        the finisher: the process whose conditional create of it
 *                                      succeeds, once it sees every share done
 *
 * The finish (the claim's winner, or `unroll merge`): check every share's metadata is the same,
 * merge the shares' databases (read from the store) into the top-level one in a local
 * directory, then upload its nodes, manifest.ocdbt, _METADATA, _sharding,
 * array_metadatas/process_0, _CHECKPOINT_METADATA and the commit_success.txt markers last
 * (items/, then S/), and delete S/unroll-multi/. Until the marker is there, no reader (Orbax's
 * commit-file mode, unroll) takes S as a checkpoint; a share that never completes leaves no
 * top-level manifest and no marker.
 *
 * Each share converts locally first ($TMPDIR) and uploads when complete: a share killed half-way
 * is redone from the start when rerun (its objects are replaced); --resume does not apply.
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
#ifndef UNROLL_ORBAX_SHARE_REMOTE_H
#define UNROLL_ORBAX_SHARE_REMOTE_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <signal.h>

typedef struct ur_orbax_rshare ur_orbax_rshare;

#define UR_ORBAX_RSHARE_DIR "unroll-multi"
#define UR_ORBAX_RSHARE_RUN_KEPT "unroll-run.txt"

/* Join (or start) the run writing to step location `step` (`<checkpoint_dir>/0`) as process
 * `index` of `count`; run_text as for ur_orbax_share_open. *published = 1 when S already holds
 * a committed checkpoint (nothing else to do). UR_EINVAL when S holds another run, or objects
 * of something that is not a run, or was published by a run whose run.txt differs. Published
 * by this run: what a finisher killed after the marker left of S/unroll-multi/ is deleted. */
int ur_orbax_rshare_open(ur_orbax_rshare **out, const char *step, int count, int index,
                         const char *run_text, int *published, ur_err *err);

/* Whether share i is complete (its marker is in the store). UR_EIO when the store cannot say. */
int ur_orbax_rshare_is_done(ur_orbax_rshare *s, int i, int *done, ur_err *err);

/* Upload this process's complete share: the database in local directory `db_dir`, the
 * metadata in `meta_dir` (what ur_orbax_share_begin handed out), then the done marker holding
 * `summary`. Objects a killed earlier attempt left are replaced. */
int ur_orbax_rshare_upload(ur_orbax_rshare *s, const char *db_dir, const char *meta_dir,
                           const char *summary, const volatile sig_atomic_t *cancel, ur_err *err);

/* When every share is complete and this process's conditional create of the claim succeeds:
 * finish (*published = 1). Otherwise nothing (*missing = shares not complete; 0 with
 * *published 0: another process holds the claim). */
int ur_orbax_rshare_finish(ur_orbax_rshare *s, const volatile sig_atomic_t *cancel, int *published,
                           int *missing, ur_err *err);

/* 1 when the last ur_orbax_rshare_finish took the finish over from a dead earlier attempt of
 * this process index (whose claim it found). */
int ur_orbax_rshare_took_over(const ur_orbax_rshare *s);

void ur_orbax_rshare_close(ur_orbax_rshare *s);

/* `unroll merge` of a run staged in an object store: `checkpoint_dir` (or the step S itself).
 * Refused (UR_EIO naming them) when shares are missing; otherwise finished, whoever holds the
 * claim. *published_to gets S (ur_free it). */
int ur_orbax_rshare_merge(const char *checkpoint_dir, const volatile sig_atomic_t *cancel,
                          char **published_to, ur_err *err);

/* `unroll ls` / `inspect` of a run staged in an object store (`checkpoint_dir` or its step):
 * one line per share, complete or not, into `out`; *staged = 0 (nothing written) when no
 * unpublished run is there. */
int ur_orbax_rshare_status(const char *checkpoint_dir, ur_buf *out, int *staged, ur_err *err);

#endif
