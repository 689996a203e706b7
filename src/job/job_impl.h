/* What job_run.c, job_multi.c and job_shares.c, job_site_*.c share (not installed): one
 * conversion, whole or a share of a multi-process run. */
#ifndef UR_JOB_IMPL_H
#define UR_JOB_IMPL_H

#include "unroll/job.h"
#include "unroll/job_share.h"

/* A share's part in a conversion. */
typedef struct ur_run_share {
    int count, index;      /* process count and this process's index */
    const char *meta_dir;  /* where the writer puts the share's metadata (borrowed) */
    uint64_t resume_from;  /* continued from this work item (0: afresh) */
    uint64_t slab_budget;  /* the same in every process (the output chunking follows it) */
    uint64_t commit_every; /* bytes of input between snapshots of the share's database */
    /* A run of several units (LoRA) cut as one (ur_exec_opts.share_before, share_total; 0:
     * this unit alone) */
    uint64_t share_before, share_total;
    /* Called after each commit of the share's database: it holds every work item before
     * next_item (the resume point recorded, and sent on for an object store: job_shares.h) */
    int (*save_progress)(void *ctx, uint64_t next_item, ur_err *err);
    void *progress_ctx;
} ur_run_share;

/* `in_path` converted into the step directory `step_dir`, created below `below` (NULL: the
 * step directory's parent must exist), to be published as `published_as` (NULL: step_dir;
 * ur_orbax_write_opts); in a dry run only its plan, handed to o->on_plan. With `sh` only that
 * share, into its own database (unroll/job_share.h). Adds to *total. */
int ur_job_run_convert(const char *in_path, const char *step_dir, const char *below,
                       const char *published_as, ur_plan_input kind, const ur_settings *s,
                       const ur_run_opts *o, const ur_run_share *sh, const char *what,
                       ur_exec_stats *total, ur_err *err);

/* Copy a small file (adapter_config.json, local or in an object store) byte for byte to the
 * local path `to`. */
int ur_job_run_copy_file(const char *from, const char *to, ur_err *err);

/* Whether the run is a share (not in a dry run): process_count > 1, resume, or a run staged
 * for s->checkpoint_dir. */
int ur_job_multi_wanted(const ur_run_opts *o, const ur_settings *s);

/* The identity of the input at `location` (a local directory or an object-store location), as
 * lines appended to out (job_ident.c): every value's size and version from one listing, and
 * _METADATA's content; each key written after `tag`. `portable`: a local value's version is
 * its mtime in whole seconds (the same on every machine holding a copy made with its times).
 * Any change of a byte the conversion reads changes the text. */
int ur_job_input_ident(ur_buf *out, const char *location, const char *tag, int portable,
                       ur_err *err);

/* The line "content <kind>:<file name> crc32c=<crc> size=<n>" of the file at `path`. */
int ur_job_file_ident(ur_buf *out, const char *kind, const char *path, ur_err *err);

/* The text of run.txt for a run (unroll/job_share.h): process count, slab budget, the input
 * (a local one resolved; an object-store location as given, less trailing slashes) and its
 * identity (ur_job_input_ident), the config (resolved) and its content (ur_job_file_ident),
 * the overrides in order. `portable` (a run into an object store, whose processes may run on
 * machines that mount the files elsewhere): no local path (a local input is known by its
 * identity only; an object-store location is kept, being the same everywhere). */
int ur_job_multi_run_text(ur_buf *out, int count, uint64_t slab_budget, const char *input,
                          const char *config, const char *const *overrides, size_t n_overrides,
                          int portable, ur_err *err);

#endif
