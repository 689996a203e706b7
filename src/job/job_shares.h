/* One run driver for every resumable or multi-process conversion (job_shares.c), over one small
 * interface to where the run is staged and published (not installed).
 *
 * A run is a list of units (the one step "0"; or LoRA's "base/0", then per adapter
 * "loras/<id>/0" and "loras/<id>/adapter_config.json"), cut into shares, one per process; a
 * single-process --resume run is share 0 of 1. The driver converts this process's share unit
 * by unit, marks it done, and tries the finish (claim, merge, publication). What differs
 * between a directory (unroll/job_share.h) and an object store
 * (unroll/job_share_remote.h) is behind ur_job_site, chosen once where the destination
 * is known (job_run.c): ur_job_site_dir (job_site_dir.c), ur_job_site_bucket
 * (job_site_bucket.c). Both convert into a local ur_job_share (the bucket's in a private
 * local tree that it then uploads), so the units' steps are the same calls in both. */
#ifndef UR_JOB_SHARES_H
#define UR_JOB_SHARES_H

#include "job_impl.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* What a run is, the same in every process of it (the ops read it; the driver owns it). */
typedef struct ur_job {
    const ur_run_opts *o;
    const ur_settings *s;
    const char *in_path;
    ur_plan_input kind;
    const char *const *inputs; /* the local paths the destination must not overlap */
    size_t n_inputs;
    ur_plan_units units; /* units[0] is the first unit, which holds the run's kept text */
    const char *what;    /* the units, told: "0", or "base/0 and loras/" */
    int count, index;    /* process count, this process's index (1 and 0: --resume) */
    ur_buf local_text;   /* the run's text with this machine's paths (ur_job_text, 0) */
} ur_job;

/* The run's text (ur_job_multi_run_text, then a LoRA run's adapters' identities), NUL-
 * terminated; `portable` as for ur_job_multi_run_text. */
int ur_job_text(ur_buf *out, const ur_job *j, int portable, ur_err *err);

/* A line told through o->on_note. */
void ur_job_note(const ur_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether unit k of j->units is a step directory (the base, an adapter's step), not a file
 * (an adapter_config.json): units are "base/0", then per adapter its step and its config. */
int ur_job_is_step_unit(size_t k);

/* Where a run is staged and published. `d` is the implementation's state (open to close). */
typedef struct ur_job_site {
    /* Join or start the run at j->s->checkpoint_dir as process j->index of j->count; `j` is
     * borrowed until close. *published = 1 when this very run is published there already (the
     * process has nothing to do). UR_EINVAL when another run is staged or published there. */
    int (*open)(void **d, const ur_job *j, int *published, ur_err *err);
    /* *done = whether share i is complete where the finisher looks. */
    int (*is_done)(void *d, int i, int *done, ur_err *err);
    /* Take this process's share, not complete (held until close: one attempt at a time).
     * *converted = 1 with its summary in `line` when a killed attempt converted it whole and
     * only its send is left; else the driver converts the units and marks it done. */
    int (*take)(void *d, int *converted, char *line, size_t line_size, ur_err *err);
    /* Whether this process's part of unit k is committed (a rerun skips it). */
    int (*unit_is_done)(void *d, size_t k);
    /* Start this process's part of step unit k: the step directory to write (*step_dir), the
     * share's metadata directory (*meta_dir), the work item a killed attempt committed up to
     * (*resume_from, 0: afresh). Borrowed until the next call. */
    int (*unit_begin)(void *d, size_t k, const char **step_dir, const char **meta_dir,
                      uint64_t *resume_from, ur_err *err);
    /* After a commit of the unit's database: it holds every work item before next_item. */
    int (*save_progress)(void *d, uint64_t next_item, ur_err *err);
    int (*unit_done)(void *d, size_t k, ur_err *err);
    /* Borrowed: where file unit k (an adapter_config.json) is staged by the driver. */
    const char *(*unit_path)(void *d, size_t k);
    /* The share converted: mark it complete, `summary` (one line) kept in the marker. */
    int (*mark_done)(void *d, const char *summary, ur_err *err);
    /* Put the complete share where the finisher reads it (a directory: it is there). */
    int (*send)(void *d, const char *summary, ur_err *err);
    /* When every share is complete and this process wins the claim: merge and publish
     * (*published = 1, *to = the checkpoint directory published into, ur_free it;
     * *took_over = 1 when a dead finisher's claim was taken over). Otherwise *missing =
     * shares not complete (0: another process holds the claim). */
    int (*finish)(void *d, const volatile sig_atomic_t *cancel, int *published, int *missing,
                  int *took_over, char **to, ur_err *err);
    /* `rc`: the run's outcome (what a failed attempt leaves for its rerun is kept). */
    void (*close)(void *d, int rc);
} ur_job_site;

extern const ur_job_site ur_job_site_dir;    /* a local checkpoint_dir */
extern const ur_job_site ur_job_site_bucket; /* s3://, gs:// */

/* The unit steps of a local ur_job_share, the same for both implementations: their state
 * starts with it. */
typedef struct ur_job_local {
    ur_job_share *sh;
} ur_job_local;

int ur_job_local_unit_is_done(void *d, size_t k);
int ur_job_local_unit_begin(void *d, size_t k, const char **step_dir, const char **meta_dir,
                            uint64_t *resume_from, ur_err *err);
int ur_job_local_unit_done(void *d, size_t k, ur_err *err);
const char *ur_job_local_unit_path(void *d, size_t k);

/* Run this process's share of the conversion of `in_path` into s->checkpoint_dir through
 * `ops`, and the finish when it is the last (rep->dest then set). `inputs`: the local paths
 * the destination must not overlap. */
int ur_job_shares_run(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                      const char *in_path, ur_plan_input kind, const ur_job_site *ops,
                      const char *const *inputs, size_t n_inputs, ur_err *err);

#endif
