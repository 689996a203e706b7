/* Publishing a conversion's output into a checkpoint directory without touching anything
 * else in it.
 *
 * The destination is a CheckpointManager root `C` (MaxText: `<base>/<run>/checkpoints`). A
 * run replaces only its units, paths relative to C: a step directory ("0", "base/0",
 * "loras/<id>/0": `_CHECKPOINT_METADATA`, `commit_success.txt`, `items/`) or a single file
 * ("loras/<id>/adapter_config.json"). Every sibling (training steps such as `C/9`, other
 * adapters, unrelated files) is left alone.
 *
 *   - Paths are compared canonically (the existing part of a path resolved with realpath,
 *     the rest normalized: symlinks, "..", "." and trailing '/' do not matter). A run whose
 *     input lies inside a unit it would replace, or whose output (a unit, its staging
 *     directory or its lock file) would land inside an input, is refused (UR_EINVAL) before
 *     anything is created.
 *   - The lock: `<parent of C>/<name of C>.unroll-lock`, held with flock(LOCK_EX) for the
 *     whole run. It holds "pid <pid> on <host>" of its holder; a second run to the same C
 *     fails at once (UR_EIO, EWOULDBLOCK) naming that holder. The holder unlinks the file
 *     while still holding the lock; a run that locked a file is the holder only if the path
 *     still names the file it locked (else it starts over), so the removal never lets two
 *     runs hold the lock at once.
 *   - Staging: `<parent of C>/<name of C>.<pid>.unroll-tmp/`, one per run, on the file system
 *     of C so that units move into place by rename. Staging directories of earlier runs
 *     that died (left by a kill or a crash) are removed, only while holding the lock, and
 *     never one an input lies in. A run never removes a staging directory it did not
 *     create: before publishing or cleaning up it checks that the path still names the
 *     directory it made (same device and inode; it holds the directory open, so the inode
 *     cannot be reused by a new directory of the same name).
 *   - Before anything moves, every staged unit is checked: a step directory must hold
 *     `_CHECKPOINT_METADATA` and an `items/` that opens as an Orbax checkpoint; a file unit
 *     must be a regular file. A missing or replaced staging directory is an error.
 *   - Each unit is swapped with the earlier one in one step (renameat2 RENAME_EXCHANGE, or
 *     moved in with RENAME_NOREPLACE where there was none), so each unit is at every moment
 *     either the earlier one or the new, complete one. With several units (LoRA), a failure
 *     or a cancellation while they are being moved puts back every unit already moved, so
 *     the destination holds all the earlier units or all the new ones. Only a crash or a
 *     SIGKILL in the middle of those few renames can leave a mix. C itself, when missing, is
 *     made just before the first rename: a kill between the two leaves C empty (no step).
 *   - The earlier units end up inside the staging directory, which is then removed. */
#ifndef UNROLL_JOB_PUBLISH_H
#define UNROLL_JOB_PUBLISH_H

#include "unroll/err.h"

#include <signal.h>
#include <stddef.h>

typedef struct ur_job_publish ur_job_publish;

/* The overlap check alone (for a dry run): `dest` is C, `units` are relative to it, `inputs`
 * are the paths the run reads (files or directories; they may not exist). */
int ur_job_publish_check(const char *dest, const char *const *units, size_t n_units,
                         const char *const *inputs, size_t n_inputs, ur_err *err);

/* Check the overlap, create C's parent if missing, take the lock, remove stale staging
 * directories and create this run's. The staged path of each unit is then
 * ur_job_publish_staged(p, i); the directories above it exist. */
int ur_job_publish_begin(ur_job_publish **out, const char *dest, const char *const *units,
                         size_t n_units, const char *const *inputs, size_t n_inputs, ur_err *err);

/* A unit "" is C itself, replaced whole (a Hugging Face folder): staged as
 * <staging>/<name of C>, swapped with C in one step. */

/* What a staged directory unit must be before it is published (the output format's check,
 * e.g. ur_hf_check_folder; it names what is missing, UR_EIO). Default: an Orbax step
 * directory, as above. */
void ur_job_publish_set_check(ur_job_publish *p, int (*check)(const char *staged, ur_err *err));

/* Borrowed: where unit i is to be written (inside the staging directory). */
const char *ur_job_publish_staged(const ur_job_publish *p, size_t i);
/* Borrowed: the staging directory (for ur_orbax_write_opts.create_below). */
const char *ur_job_publish_staging(const ur_job_publish *p);
/* Borrowed: the canonical path of C. */
const char *ur_job_publish_dest(const ur_job_publish *p);

/* Check the staged units and move them into place (see above). If `cancel` is set and
 * *cancel is nonzero before the first move or once every unit is moved, nothing is
 * published (every move undone) and the result is UR_EINTERNAL "interrupted". Frees `p`
 * whatever the outcome: on failure the staging directory and every directory this run
 * created are removed, and the earlier units stay as they were. */
int ur_job_publish_commit(ur_job_publish *p, const volatile sig_atomic_t *cancel, ur_err *err);

/* When ur_job_publish_commit fails, fn(ctx) runs before the staging directory is removed:
 * a caller that moved finished units into it from a place of its own (job_share.c: a
 * multi-process run's merged step) takes them back there, so a rerun publishes them instead
 * of finding them gone. */
void ur_job_publish_on_failure(ur_job_publish *p, void (*fn)(void *ctx), void *ctx);

/* Clear what a run killed after its publication left beside C (its lock file, its staging
 * directory), as ur_job_publish_begin does before a run: for a rerun that finds the run
 * published and has nothing to publish. A run holding the lock is left alone. */
void ur_job_publish_tidy(const char *dest, const char *const *units, size_t n_units,
                         const char *const *inputs, size_t n_inputs);

/* Give up: remove the staging directory (if it is still ours), the directories this run
 * created and the lock file, release the lock. NULL-safe. */
void ur_job_publish_abort(ur_job_publish *p);

#endif
