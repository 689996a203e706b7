/* A single-process conversion's claim on its object-store destination (s3://, gs://).
 *
 * An object store has no lock and no rename: two runs into one step prefix both found it empty
 * and wrote their objects over each other's (their data files have the same names), and both
 * published. So before writing anything a run creates `S/unroll-claim.txt` (S: the first unit,
 * `<checkpoint_dir>/0` or `base/0`) with the store's conditional create (ur_kvstore_create):
 *
 *   unroll single-process run, pid <pid> on <host>, started <UTC time>, attempt <64-bit hex>
 *   <the run's identity: its run text, ur_job_multi_run_text>
 *
 * Whoever's create fails did not start: it is refused (UR_EIO, exit 3, as a locked local
 * destination) with the destination and the holder named. The claim goes after publication
 * (after the commit markers) or after a failure that published nothing; the upload neither
 * counts it as the destination's content nor deletes it (unroll/job_upload.h).
 *
 * A run killed (SIGKILL, a lost machine) leaves its claim. There is no lock to tell a dead run
 * from a live one on another machine, so: a run with the same identity takes the claim over
 * (a rerun of the same command, the way a Slurm or Kubernetes retry reruns it; the same
 * command must run once at a time) unless the holder is a process still alive on this host,
 * and then replaces what the dead run left; a run with another identity is refused until
 * someone deletes the claim (the message says which object). */
#ifndef UNROLL_JOB_CLAIM_H
#define UNROLL_JOB_CLAIM_H

#include "unroll/err.h"

#define UR_JOB_CLAIM_NAME "unroll-claim.txt"

typedef struct ur_job_claim ur_job_claim;

/* Claim location `step` for the run `identity` (above). *took_over = 1 when a dead attempt of
 * the same identity held it. UR_EIO when another run holds it or the store cannot say. */
int ur_job_claim_take(ur_job_claim **out, const char *step, const char *identity, int *took_over,
                      ur_err *err);

/* Delete the claim and free c (NULL-safe). UR_EIO when the delete fails (c is freed). */
int ur_job_claim_release(ur_job_claim *c, ur_err *err);

#endif
