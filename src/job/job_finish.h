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

#include <signal.h>
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

/* 1 when `unit` is a step directory ("0", "base/0", "loras/<id>/0"), 0 for a file
 * ("loras/<id>/adapter_config.json"). */
int ur_job_finish_is_step(const char *unit);

/* What differs between the sites' finishes: where each unit is built, and how the built units
 * are published (ctx: the site's state).
 *   - a directory (job_share.c): built where the shares staged it; published together by
 *     rename under the destination's lock, with a journal for a finisher killed meanwhile;
 *   - an object store (job_share_remote.c): built in a local tree, its shares' databases read
 *     from the store, and a file unit fetched from the ledger's units/<unit>; published by one
 *     upload in Orbax's commit-file order, every marker last. */
typedef struct ur_job_publisher {
    /* Unit k: *dir, the local directory its step is built in (a step unit) or the local path
     * its file goes to (a file unit); *shares_at, where its shares' databases are
     * (items/ocdbt.process_<i>/ below it; NULL: in *dir); *as, the final location the markers
     * name; *skip = 1: nothing to build (published already, or staged in place). Borrowed
     * until the next call. */
    int (*unit)(void *ctx, size_t k, const char **dir, const char **shares_at, const char **as,
                int *skip, ur_err *err);
    /* Publish every unit built, as one publication. */
    int (*commit)(void *ctx, const volatile sig_atomic_t *cancel, ur_err *err);
    void *ctx;
} ur_job_publisher;

/* The finish of a run whose every share is complete and whose claim this process holds:
 * each unit built (ur_job_finish_build; a file unit fetched when the publisher asks), the
 * run's text kept in the first, then published through `pub`. */
int ur_job_finish_run(ur_kvstore *ledger, const char *where, int count, const char *const *units,
                      size_t n_units, const ur_job_publisher *pub,
                      const volatile sig_atomic_t *cancel, ur_err *err);

#endif
