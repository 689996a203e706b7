/* The ledger of a shared run (not installed): what the run is, which shares are complete and
 * who finishes it, written once over a store, for a run staged beside a directory
 * (unroll/job_share.h: the file store on `<C>.unroll-multi/`) and for one in a bucket
 * (unroll/job_share_remote.h: `S/unroll-multi/`). The keys, the same in both:
 *
 *   run.txt           what the run is (ur_job_multi_run_text, then "unit <u>" lines for a run
 *                     of several units); created once, with the store's conditional create
 *   started           when the run started (the first process to join creates it)
 *   shares/<i>.done   share i is complete: its summary, one line; written whole, last
 *   finish.claim      who finishes: "process <i> of <n>, pid <pid> on <host>, started <s>"
 *                     (or "unroll merge, ..."); created with the conditional create by the
 *                     process that sees every share done
 *
 * What tells a dead finisher from a live one differs: a directory has locks (the finisher
 * holds one from before its create of the claim to its end, so a claim whose lock is free
 * is a dead one's); an object store has none (a claim naming this process's own index is an
 * earlier, dead attempt of it: a process index runs once at a time). That is the liveness,
 * passed in (ur_job_liveness). */
#ifndef UR_JOB_LEDGER_H
#define UR_JOB_LEDGER_H

#include "unroll/buf.h"
#include "unroll/err.h"
#include "unroll/kvstore.h"

#include <stddef.h>
#include <stdint.h>

#define UR_JOB_LEDGER_RUN "run.txt"
#define UR_JOB_LEDGER_CLAIM "finish.claim"

/* Tells whether the finish may be claimed, and whether a claim found may be taken over. */
typedef struct ur_job_liveness {
    /* Before the claim: *busy = 1 when a live process is finishing (this one then claims
     * nothing); otherwise what shows this process alive is held until it ends. NULL: none. */
    int (*enter)(void *ctx, int *busy, ur_err *err);
    /* 1 when the process that left the claim `have` is dead: its claim is taken over. */
    int (*holder_dead)(void *ctx, const char *have);
    void *ctx;
} ur_job_liveness;

/* A run's text parsed: its process count (1..UR_JOB_SHARE_MAX), its "input" line's value
 * (NULL: none) and its units ("unit <u>" lines in order; none: n_units 0). */
typedef struct ur_job_run_info {
    int count;
    char *input;
    char **units;
    size_t n_units;
} ur_job_run_info;

/* UR_ECORRUPT naming `where` when the text has no valid process count. */
int ur_job_run_info_parse(ur_job_run_info *info, const char *text, const char *where, ur_err *err);
void ur_job_run_info_dispose(ur_job_run_info *info);

/* Create run.txt holding `text` (*created = 1), or leave the one there (*created = 0). */
int ur_job_ledger_run_create(ur_kvstore *kv, const char *text, int *created, ur_err *err);
/* run.txt, NUL-terminated, into out (reset first); *found = 0 when there is none. */
int ur_job_ledger_run_read(ur_kvstore *kv, ur_buf *out, int *found, ur_err *err);

/* When the run started, for _CHECKPOINT_METADATA's init timestamp: key "started" (nanoseconds
 * since the epoch, in decimal), created by the first process to ask (the conditional create)
 * and read by the others and by the finish. With SOURCE_DATE_EPOCH set: that time, nothing
 * written. UR_ECORRUPT naming `where` when the value there is not a time. */
int ur_job_ledger_started(ur_kvstore *kv, const char *where, int64_t *ns, ur_err *err);

/* Whether share i is complete; its summary into `summary` (reset first) when not NULL. */
int ur_job_ledger_is_done(ur_kvstore *kv, int i, int *done, ur_buf *summary, ur_err *err);
/* Mark share i complete with `summary` (one line), the value whole or not at all. */
int ur_job_ledger_mark_done(ur_kvstore *kv, int i, const char *summary, ur_err *err);
/* Share i is being redone: its mark goes. */
int ur_job_ledger_clear_done(ur_kvstore *kv, int i, ur_err *err);
/* *missing = the shares of `count` not complete; their indices appended to `names` (not
 * NULL: "0, 3", the first 16, then ", ..."). */
int ur_job_ledger_missing(ur_kvstore *kv, int count, ur_buf *names, int *missing, ur_err *err);

/* One line per share, complete (with its summary) or not, then the total, naming `where`, the
 * staged run, into out: the text of `unroll ls` / `inspect` for a staged run. */
int ur_job_ledger_status(ur_kvstore *kv, int count, const char *where, ur_buf *out, ur_err *err);

/* The claim's text for process `index` of `count` (index < 0: `unroll merge`). */
void ur_job_ledger_who(char *out, size_t size, int index, int count);

/* Claim the finish as `who`: *won = 1 when this call created the claim, found its own text
 * there (a create retried after a lost answer), or took over a dead holder's (*took_over =
 * 1). *won = 0: a live process finishes. */
int ur_job_ledger_claim(ur_kvstore *kv, const char *who, const ur_job_liveness *live, int *won,
                        int *took_over, ur_err *err);

#endif
