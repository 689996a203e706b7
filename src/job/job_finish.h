/* The finish of one unit of a shared run, written once (not installed): its step built in a
 * local directory from its shares, as Orbax's CheckpointManager lays out step 0 after a
 * multi-process save. A directory's finish builds it where the shares staged the unit
 * (unroll/job_share.h: their databases are there already); an object store's in a local tree
 * that is then uploaded (unroll/job_share_remote.h: the databases are read from the store).
 *
 *   items/_METADATA, _sharding, array_metadatas/process_0   share 0's, checked equal in every
 *                                                           share (the same plan)
 *   items/manifest.ocdbt, items/d/                          the shares' databases merged,
 *                                                           values referred to where they are
 *   items/commit_success.txt, commit_success.txt            "Checkpoint commit was successful
 *                                                           to <the final location>"
 *   _CHECKPOINT_METADATA                                    the run's start and this finish
 *   unroll-run.txt                                          the run's text (first unit only)
 */
#ifndef UR_JOB_FINISH_H
#define UR_JOB_FINISH_H

#include "unroll/err.h"
#include "unroll/kvstore.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ur_job_finish_unit {
    ur_kvstore *ledger;       /* the run's ledger (job_ledger.h): shares/<i>[.u<k>]/<file> */
    const char *where;        /* the ledger's location, named in messages */
    int count;                /* shares */
    size_t k;                 /* the unit's index in the run (0: the first) */
    const char *unit;         /* its name: "0", "base/0", "loras/<id>/0" */
    ur_kvstore *const *dbs;   /* share i's database; NULL: <step>/items/ocdbt.process_<i>/ */
    const char *published_as; /* the final location, which the commit markers name */
    int64_t init_ns;          /* when the run started (ur_job_ledger_started) */
    const char *run_text;     /* kept as unroll-run.txt (NULL: none) */
} ur_job_finish_unit;

/* Build unit u's finished step in the local directory `step_dir` (what an earlier finish
 * that died left there first removed). */
int ur_job_finish_build(const ur_job_finish_unit *u, const char *step_dir, ur_err *err);

#endif
