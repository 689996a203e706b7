/* A conversion as a library function: what `unroll base.yml key=value ...` does between
 * parsing its arguments and printing, so that the command line only parses, calls one
 * function, prints and maps the error to an exit status (docs/conventions.md §3, libgit2's library
 * / front-end split; `unroll verify`'s function is in unroll/verify.h).
 *
 *   config (ur_config_load) -> ur_job_run_input: which checkpoint, which kind
 *     -> the units to publish (the step "0", or "base/0" + per LoRA adapter "loras/<id>/0"
 *        and its adapter_config.json: ur_plan_lora_*)
 *     -> per unit: open the checkpoint, its leaves as the plan sees them
 *        (ur_plan_orbax_leaves), ur_plan_build, ur_fs_space_check, ur_exec_run into a
 *        staged Orbax writer
 *     -> ur_job_publish_commit: every unit moves into place, or none.
 *   A share of a multi-process run (process_count > 1) or a resumable run (resume, or a
 *   run staged for the destination) goes instead through unroll/job_share.h or
 *   unroll/job_share_remote.h (src/job/job_shares.c, one driver for both): this process's
 *   share into the staging the processes share, marked done, and the last share to finish
 *   merges and publishes.
 *
 * Nothing here prints: a dry run hands each plan to a callback. */
#ifndef UNROLL_JOB_H
#define UNROLL_JOB_H

#include "unroll/err.h"
#include "unroll/exec.h"
#include "unroll/hf.h"
#include "unroll/orbax.h"
#include "unroll/plan.h"
#include "unroll/plan_orbax.h"
#include "unroll/verify.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* ---- one conversion (src/job/job_run.c) ------------------------------------------------ */

typedef struct ur_run_opts {
    ur_config_opts config;       /* the config and its overrides, loaded by the run */
    int dry_run;                 /* build and report the plans, check the destination, write
                  * nothing */
    int replace;                 /* an object-store destination's objects are deleted first
                  * (without it, a destination holding objects is refused) */
    int threads;                 /* ur_exec_opts.threads (0: one per core) */
    uint64_t memory_limit;       /* ur_exec_opts.memory_limit */
    /* When set and *cancel becomes nonzero, the run stops at its next chunk or unit, removes
     * what it staged, publishes nothing and fails with "interrupted". */
    const volatile sig_atomic_t *cancel;
    /* Dry run: called with each plan, the base's ("base") first, then each adapter's
     * ("lora <id>"); `leaves` are the plan's input leaves, index for index. */
    void (*on_plan)(void *ctx, const char *what, const ur_plan *plan, const ur_plan_leaf *leaves);
    /* Called as each unit's conversion starts, then as its chunks are written (`progress`
     * as ur_exec_opts.progress). */
    void (*on_begin)(void *ctx, const char *what);
    void (*progress)(void *ctx, uint64_t bytes_done, uint64_t bytes_total);
    /* Multi-process runs (unroll/job_share.h): with process_count > 1 this process
     * converts share process_index; `resume` runs one process the same way (share 0 of 1),
     * so a killed run rerun with the same arguments continues. A run already staged for the
     * destination is continued whatever `resume` says. Local inputs only (LoRA adapters too);
     * run_name must be set. Ignored in a dry run. */
    int process_count; /* 0 or 1: one process */
    int process_index;
    const char *process_source; /* where the index came from (for the share's summary) */
    int resume;
    uint64_t commit_every; /* a share's database is snapshotted every so many bytes of input
                            * (its resume point); 0: UR_RUN_COMMIT_EVERY */
    /* A share's state as it changes (skipped as complete, continued from a resume point,
     * complete, published or waiting for others): one line without newline. */
    void (*on_note)(void *ctx, const char *line);
    void *ctx; /* for the callbacks */
    /* Set by ur_job_run itself, not by its callers: where each OCDBT data file finished
     * during a conversion goes (ur_ocdbt_write_opts.on_data_file), with its path and its key
     * below checkpoint_dir ("0/items/d/<hex>"); an object-store output streams them
     * (unroll/job_stream.h). */
    int (*on_data_file)(void *ctx, const char *path, const char *key, ur_err *err);
    void *data_file_ctx;
} ur_run_opts;

#define UR_RUN_COMMIT_EVERY ((uint64_t)1 << 30)

typedef struct ur_run_report {
    ur_exec_stats total; /* summed over the units (threads: the last unit's) */
    char *dest;          /* the checkpoint directory published into (owned; NULL in a dry run) */
    /* The run was a share (multi-process or resumable): its state went to on_note, and dest
     * is NULL unless this process published. */
    int share;
} ur_run_report;

/* Load the config, convert the checkpoint it names (and its LoRA adapters) and publish the
 * result under its checkpoint_dir (unroll/job_publish.h). On failure nothing is published
 * and the destination is as it was. The report is filled on success; dispose it either way.
 * Errors: UR_EINVAL (settings, overlap), UR_EIO, UR_ECORRUPT, UR_EUNSUPPORTED, UR_ENOMEM. */
int ur_job_run(ur_run_report *rep, const ur_run_opts *opts, ur_err *err);
void ur_job_run_report_dispose(ur_run_report *rep);

/* 1 when a run into `checkpoint_dir` is staged and published by renames under a lock (the
 * directory protocol, unroll/job_share.h: the store can rename and lock), 0 when by an ordered
 * upload (unroll/job_share_remote.h). The one place the choice is made: `unroll` and
 * `unroll merge` / `status` alike. */
int ur_job_run_by_rename(const char *checkpoint_dir);

/* ---- a Hugging Face export (src/job/job_hf.c) ----------------------------------------- */

/* `unroll to_huggingface`: the checkpoint the settings name (load_parameters_path or a full
 * training state; scanned or not, the input says which) exported as a Hugging Face folder at
 * base_output_directory (MaxText's exporter's folder; tmp/<run_name> when unset), published
 * whole or not at all: a local folder is staged beside it and swapped in under its lock; an
 * object-store one is claimed, staged locally and uploaded, the file naming the weights last. */
typedef struct ur_hf_run_opts {
    ur_run_opts run; /* config, threads, memory_limit, cancel, replace, dry_run, callbacks */
    /* A local folder whose tokenizer and processor files are copied into the output
     * (--hf_model_path); NULL: none. */
    const char *hf_model_path;
    int override_architecture; /* --override_model_architecture */
    uint64_t max_shard_size;   /* bytes; 0: MaxText's 3 GiB */
    /* Dry run: called with each tensor, in name order. */
    void (*on_tensor)(void *ctx, const ur_hf_tensor_info *t);
} ur_hf_run_opts;

typedef struct ur_hf_run_report {
    ur_exec_stats total;
    ur_hf_summary hf; /* what was (or, in a dry run, would be) written */
    char *dest;       /* the folder published (owned; NULL in a dry run) */
} ur_hf_run_report;

/* Errors as ur_job_run, and those of ur_hf_plan_build (UR_EUNSUPPORTED: a model the export
 * does not map). On failure nothing is published. Dispose the report either way. */
int ur_job_hf_run(ur_hf_run_report *rep, const ur_hf_run_opts *o, ur_err *err);
void ur_job_hf_report_dispose(ur_hf_run_report *rep);

/* `unroll verify <input> <folder> config.yml key=value ...`: the Hugging Face folder `folder`
 * (local, s3:// or gs://) against the checkpoint `in`, for the model the config describes
 * (its weight_dtype: the folder's dtype): the export's tensor list (what to_huggingface with
 * those settings writes) checked by ur_verify_hf_run. Errors as ur_job_hf_run's planning;
 * the findings in `rep` (dispose it either way). */
/* 1 when `path` (local, s3:// or gs://) holds a config.json and no Orbax _METADATA. */
int ur_job_hf_is_folder(const char *path);
int ur_job_hf_verify(ur_verify_report *rep, const char *in, const char *folder,
                     const ur_config_opts *co, const ur_verify_opts *vo, ur_err *err);

/* The input the settings name: load_full_state_path (a training state) or
 * load_parameters_path (param-only). UR_EINVAL for both or neither, and for
 * enable_checkpointing=false unless `dry_run` (MaxText would write nothing). */
int ur_job_run_input(const char **path_out, ur_plan_input *kind_out, const ur_settings *s,
                     int dry_run, ur_err *err);

#endif
