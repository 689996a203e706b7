/* What plan_run.c and plan_multi.c share (not installed): one conversion, whole or a share of
 * a multi-process run. */
#ifndef UR_PLAN_RUN_IMPL_H
#define UR_PLAN_RUN_IMPL_H

#include "unroll/orbax_share.h"
#include "unroll/plan_run.h"

/* A share's part in a conversion. */
typedef struct ur_run_share {
    ur_orbax_share *share;
    int count, index;      /* process count and this process's index */
    const char *meta_dir;  /* where the writer puts the share's metadata (borrowed) */
    uint64_t resume_from;  /* continued from this work item (0: afresh) */
    uint64_t slab_budget;  /* the same in every process (the output chunking follows it) */
    uint64_t commit_every; /* bytes of input between snapshots of the share's database */
} ur_run_share;

/* `in_path` converted into the step directory `step_dir`, created below `below` (NULL: the
 * step directory's parent must exist); in a dry run only its plan, handed to o->on_plan. With
 * `sh` only that share, into its own database (unroll/orbax_share.h). Adds to *total. */
int ur_plan_run_convert(const char *in_path, const char *step_dir, const char *below,
                        ur_plan_input kind, const ur_settings *s, const ur_run_opts *o,
                        const ur_run_share *sh, const char *what, ur_exec_stats *total,
                        ur_err *err);

/* Whether the run is a share (not in a dry run): process_count > 1, resume, or a run staged
 * for s->checkpoint_dir. */
int ur_plan_multi_wanted(const ur_run_opts *o, const ur_settings *s);

/* Run this process's share of the conversion of `in_path` (local paths), mark it done and,
 * when it is the last, merge and publish (rep->dest then set). `inputs`: the paths the
 * destination must not overlap. */
int ur_plan_multi_run(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                      const char *in_path, ur_plan_input kind, const char *const *inputs,
                      size_t n_inputs, ur_err *err);

/* The text of run.txt for a run (unroll/orbax_share.h): process count, slab budget, the input
 * (resolved) and the CRC-32C and size of its manifest.ocdbt and _METADATA, the config
 * (resolved) and the overrides in order. `portable` (a run into an object store, whose
 * processes may run on machines that mount the files elsewhere): no local path, the config by
 * the CRC-32C and size of its content instead. */
/* As ur_plan_multi_run for an output on an object store (s3://, gs://):
 * unroll/orbax_share_remote.h. The input must be local. */
int ur_plan_multi_run_remote(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                             const char *in_path, ur_plan_input kind, ur_err *err);

int ur_plan_multi_run_text(ur_buf *out, int count, uint64_t slab_budget, const char *input,
                           const char *config, const char *const *overrides, size_t n_overrides,
                           int portable, ur_err *err);

#endif
