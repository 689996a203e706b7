/* The commands as library functions: what `unroll base.yml key=value ...` and `unroll verify`
 * do between parsing their arguments and printing, so that the command line only parses,
 * calls one function, prints and maps the error to an exit status (STYLE §4, libgit2's
 * library / front-end split).
 *
 *   config (ur_plan_config_load) -> ur_plan_run_input: which checkpoint, which kind
 *     -> the units to publish (the step "0", or "base/0" + per LoRA adapter "loras/<id>/0"
 *        and its adapter_config.json: ur_plan_lora_*)
 *     -> per unit: open the checkpoint, its leaves as the plan sees them
 *        (ur_plan_orbax_leaves), ur_plan_build, ur_fs_space_check, ur_plan_exec_run into a
 *        staged Orbax writer
 *     -> ur_orbax_publish_commit: every unit moves into place, or none.
 *   A share of a multi-process run (process_count > 1) or a resumable run (resume, or a
 *   run staged for the destination) goes instead through unroll/orbax_share.h or
 *   unroll/orbax_share_remote.h (src/plan/plan_job.c, one driver for both): this process's
 *   share into the staging the processes share, marked done, and the last share to finish
 *   merges and publishes.
 *
 * Nothing here prints: a dry run hands each plan to a callback. */
#ifndef UNROLL_PLAN_RUN_H
#define UNROLL_PLAN_RUN_H

#include "unroll/err.h"
#include "unroll/orbax.h"
#include "unroll/plan.h"
#include "unroll/plan_exec.h"
#include "unroll/plan_verify.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* ---- one conversion (src/plan/plan_run.c) ------------------------------------------------ */

typedef struct ur_run_opts {
    ur_config_opts config;       /* the config and its overrides, loaded by the run */
    int dry_run;                 /* build and report the plans, check the destination, write
                  * nothing */
    int replace;                 /* an object-store destination's objects are deleted first
                  * (without it, a destination holding objects is refused) */
    int threads;                 /* ur_exec_opts.threads (0: one per core; 16 when reading
                  * from an object store) */
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
    /* Multi-process runs (unroll/orbax_share.h): with process_count > 1 this process
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
    /* Set by ur_plan_run itself, not by its callers: where each OCDBT data file finished
     * during a conversion goes (ur_ocdbt_write_opts.on_data_file), with its path and its key
     * below checkpoint_dir ("0/items/d/<hex>"); an object-store output streams them
     * (unroll/orbax_stream.h). */
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
 * result under its checkpoint_dir (unroll/orbax_publish.h). On failure nothing is published
 * and the destination is as it was. The report is filled on success; dispose it either way.
 * Errors: UR_EINVAL (settings, overlap), UR_EIO, UR_ECORRUPT, UR_EUNSUPPORTED, UR_ENOMEM. */
int ur_plan_run(ur_run_report *rep, const ur_run_opts *opts, ur_err *err);
void ur_plan_run_report_dispose(ur_run_report *rep);

/* The input the settings name: load_full_state_path (a training state) or
 * load_parameters_path (param-only). UR_EINVAL for both or neither, and for
 * enable_checkpointing=false unless `dry_run` (MaxText would write nothing). */
int ur_plan_run_input(const char **path_out, ur_plan_input *kind_out, const ur_settings *s,
                      int dry_run, ur_err *err);

/* ---- the Orbax checkpoint as the plan sees it (src/plan/plan_orbax.c) --------------------- */

typedef struct ur_plan_leaves {
    ur_plan_leaf *leaves;    /* one per checkpoint leaf, index for index */
    size_t n;
    const char **comps_;     /* every leaf's key components, back to back (borrowed strings) */
    unsigned char *seqs_;    /* ... and which of them are list indices */
    const char **specs_;     /* the partition specs, rank entries per leaf that has one */
} ur_plan_leaves;

/* The leaves of `ck` (paths, dtypes, shapes, placeholders, partition specs). The strings are
 * borrowed from `ck`, which must outlive `out`. Errors: UR_ENOMEM. */
int ur_plan_orbax_leaves(ur_plan_leaves *out, const ur_orbax_ckpt *ck, ur_err *err);
void ur_plan_orbax_leaves_dispose(ur_plan_leaves *l);

/* The custom_metadata the output's `_CHECKPOINT_METADATA` records, where MaxText reads it back
 * (0.2.5: checkpointing.load_checkpoint_metadata on load_parameters_path's step directory;
 * model_creation_utils.verify_and_sync_scan_layers then takes scan_layers from it, or refuses
 * a contradicting flag): `{"scan_layers": <scanned>}`, then every other member of `ck`'s own
 * custom_metadata (MaxText's "lora", ...), each value's text as the input wrote it. *out:
 * free with ur_free. UR_ECORRUPT (the input's is not a JSON object), UR_ENOMEM. */
int ur_plan_orbax_custom_metadata(char **out, const ur_orbax_ckpt *ck, int scanned, ur_err *err);

/* ---- the LoRA adapters directory (src/plan/plan_lora.c) ----------------------------------- */

/* What a run writes, relative to the checkpoint directory: without adapters the step "0";
 * with them "base/0", then per adapter (sorted by id) "loras/<id>/0" and
 * "loras/<id>/adapter_config.json", so adapter i is unit 1 + 2i and its config 2 + 2i. */
typedef struct ur_plan_units {
    char **ids; /* the adapter ids, sorted */
    size_t n_ids;
    const char **units;
    size_t n_units;
    char **owned_; /* the formatted unit names */
} ur_plan_units;

/* The units for the adapters directory `adapters` ("" for none): its adapters are the
 * subdirectories <id>/ holding adapter_config.json (names starting with '.' are skipped).
 * Dispose `out` whatever the result. Errors: UR_ENOTFOUND (no such directory, or no adapter
 * in it), UR_EIO, UR_ENOMEM. */
int ur_plan_lora_units(ur_plan_units *out, const char *adapters, ur_err *err);
void ur_plan_lora_units_dispose(ur_plan_units *u);

/* ---- `unroll verify`'s settings (src/plan/plan_verify_config.c) --------------------------- */

/* param_scan_axis and num_decoder_layers for ur_plan_verify_run: from the config `config`
 * with `overrides` (read as `unroll` reads them, environment `envp`), or, without a config,
 * from the overrides alone, where only param_scan_axis=N and num_decoder_layers=N
 * (base_num_decoder_layers=N) are accepted. Other fields of `vo` are left alone.
 * Errors: UR_EINVAL (an unknown key or a value that is not an integer), those of
 * ur_plan_config_load. */
int ur_plan_verify_config_read(ur_verify_opts *vo, const char *config,
                               const char *const *overrides, size_t n_overrides,
                               const char *const *envp, ur_err *err);

#endif
