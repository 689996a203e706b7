/* `unroll path/to/base.yml key=value ...`: the MaxText-style conversion.
 *
 * Parses the command line, catches the stop signals, calls ur_job_run (unroll/job.h:
 * the config read as MaxText's pyconfig reads it, the plan, the run into a staging
 * directory, the publication of every unit at once), prints the plans of a dry run, the
 * progress and the summary, and maps an error to an exit status. */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE /* environ */
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/job.h"
#include "unroll/job_share.h"
#include "unroll/phase.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    cli_run_args run;
    int opt_process_count; /* 0: not given */
    int opt_process_index; /* -1: not given */
    int resume;            /* --resume: a single process, resumable (as share 0 of 1) */
    uint64_t commit_every; /* --commit-every; 0: the default */
    /* resolved (cli_multi_resolve); a share of a multi-process run when process_count > 1 */
    int process_count;
    int process_index;
    const char *process_source;
} unroll_args;

static void usage(FILE *f)
{
    fputs("usage: unroll [options] path/to/base.yml [key=value ...]\n"
          "       unroll to_huggingface [options] path/to/base.yml [key=value ...]\n"
          "       unroll verify [options] <scanned> <unrolled> [config.yml] [key=value ...]\n"
          "       unroll inspect [--json] [--hash] <checkpoint>\n"
          "       unroll ls [--sizes] [--manifest] [--tree] [--cat KEY] <dir> [prefix]\n"
          "       unroll merge [--ocdbt] <checkpoint_dir>\n"
          "\n"
          "Turn a scanned MaxText/Orbax checkpoint into an unscanned, param-only bfloat16\n"
          "checkpoint, as MaxText's generate_param_only_checkpoint.py does with\n"
          "force_unroll=true. The config and key=value overrides are read as MaxText reads\n"
          "them; keys used: load_full_state_path or load_parameters_path, base_output_directory,\n"
          "run_name, force_unroll, scan_layers, param_scan_axis, pure_nnx, num_decoder_layers,\n"
          "first_num_dense_layers, logical_axis_rules, lora_input_adapters_path,\n"
          "checkpoint_storage_use_ocdbt, checkpoint_storage_use_zarr3, ...\n"
          "Output: <base_output_directory>/<run_name>/checkpoints/0 (only it is replaced).\n"
          "Paths may be local, s3://bucket/prefix or gs://bucket/prefix (object stores).\n"
          "\n"
          "subcommands:\n"
          "  to_huggingface         export a MaxText checkpoint as a Hugging Face folder\n"
          "  verify                 check an unrolled checkpoint against the scanned one\n"
          "  inspect                show a checkpoint's tree, dtypes, shapes and chunking\n"
          "  ls                     list the keys of an OCDBT database or directory\n"
          "  merge                  finish a multi-process conversion (--process-count)\n"
          "  (each has its own --help)\n"
          "\n"
          "options (a value may also be attached: -j2, --threads=2, --memory-limit=4G):\n"
          "  -n, --dry-run          print the plan (kept, dropped, split leaves; bytes) and stop\n"
          "  -q, --quiet            no progress and no summary\n"
          "  -j, --threads N        worker threads (default: one per core)\n"
          "      --memory-limit S   bytes of chunk buffers in flight, e.g. 512M, 4G (default:\n"
          "                         128M per thread, at least 256M, at most 1/4 of the RAM)\n"
          "      --replace          on an object store, delete what the output step holds\n"
          "                         (without it, a destination with objects is refused)\n"
          "      --process-count N  share the conversion among N processes (also from Slurm,\n"
          "                         Open MPI, PMI, JOB_COMPLETION_INDEX); the last one to\n"
          "                         finish publishes (see unroll merge --help)\n"
          "      --process-index I  this process's share, 0 <= I < N\n"
          "      --resume           resumable: a killed run rerun with the same arguments\n"
          "                         continues (the default when such a run is staged)\n"
          "      --commit-every S   a share commits its database every S of input (default\n"
          "                         1G); a killed share rerun continues from the last one\n"
          "  -h, --help             this help\n"
          "  -V, --version          the version and the libraries it was built with\n"
          "\n"
          "exit status:\n"
          "  0  success\n"
          "  1  internal error or out of memory\n"
          "  2  bad command line or configuration\n"
          "  3  a file could not be read or written, or the destination is locked\n"
          "  4  the input checkpoint is damaged or inconsistent\n"
          "  5  valid input that uses a feature unroll does not implement (or a model\n"
          "     to_huggingface does not map)\n"
          "  6  unroll verify found a mismatch, a missing or an extra leaf\n"
          "  130, 143, 129  stopped by SIGINT, SIGTERM, SIGHUP (nothing published)\n",
          f);
}

/* Returns -1 to go on, else an exit status. */
static int parse_args(unroll_args *a, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v;
        int st = -1;
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(s, "-V") == 0 || strcmp(s, "--version") == 0) {
            cli_print_version();
            return CLI_EXIT_OK;
        } else if (strcmp(s, "--resume") == 0) {
            a->resume = 1;
        } else if (cli_opt_value(argc, argv, &i, NULL, "--commit-every", &v)) {
            if (v == NULL || cli_parse_size(v, &a->commit_every) < 0) {
                return cli_usage_error("--commit-every needs a size such as 256M or 4G");
            }
        } else if (cli_opt_value(argc, argv, &i, NULL, "--process-count", &v) ||
                   cli_opt_value(argc, argv, &i, NULL, "--process-index", &v)) {
            int is_count = strncmp(s, "--process-count", 15) == 0;
            char *end;
            long n;
            if (v == NULL) {
                return cli_usage_error("%s needs a number", s);
            }
            errno = 0;
            n = strtol(v, &end, 10);
            if (errno != 0 || end == v || *end != '\0' || n < (is_count ? 1 : 0) ||
                n >= UR_JOB_SHARE_MAX) {
                return cli_usage_error("%s: '%s' is not a process %s", s, v,
                                       is_count ? "count (1-65535)" : "index (0-65534)");
            }
            if (is_count) {
                a->opt_process_count = (int)n;
            } else {
                a->opt_process_index = (int)n;
            }
        } else if (cli_run_arg(&a->run, argc, argv, &i, &st) == 0) {
            return cli_usage_error("unknown option '%s' (see unroll --help)", s);
        } else if (st >= 0) {
            return st;
        }
    }
    if (a->run.config == NULL) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    return cli_multi_resolve(a->opt_process_count, a->opt_process_index, &a->process_count,
                             &a->process_index, &a->process_source);
}

/* ---- one conversion --------------------------------------------------------------------- */

/* ur_run_opts.on_note: a share's state (multi-process or resumable runs). */
static void print_note(void *ctx, const char *line)
{
    (void)ctx;
    fprintf(stderr, "unroll: %s\n", line);
}

/* ur_run_opts.on_plan (dry run): the plan's summary and one line per input leaf. */
static void print_plan(void *ctx, const char *what, const ur_plan *plan,
                       const ur_plan_leaf *leaves)
{
    char a[1024], b[1024];
    (void)ctx;
    printf("%s: %zu leaves in, %zu kept, %zu dropped; %zu copied, %zu split, %zu replicated -> "
           "%zu arrays\n",
           what, plan->summary.leaves_in, plan->summary.leaves_kept, plan->summary.leaves_dropped,
           plan->summary.leaves_copied, plan->summary.leaves_unstacked,
           plan->summary.leaves_replicated, plan->summary.leaves_out);
    printf("%s: bytes in %llu (read %llu), bytes out %llu\n", what,
           (unsigned long long)plan->summary.bytes_in,
           (unsigned long long)plan->summary.bytes_read,
           (unsigned long long)plan->summary.bytes_out);
    for (size_t i = 0; i < plan->n_actions; i++) {
        const ur_plan_action *act = &plan->actions[i];
        const ur_plan_leaf *l = &leaves[i];
        ur_plan_path_format(l->path, l->path_len, a, sizeof a);
        switch (act->kind) {
        case UR_PLAN_DROP:
            printf("  drop    %s (%s)\n", a, act->why ? act->why : "");
            break;
        case UR_PLAN_COPY:
            ur_plan_path_format((const char *const *)act->out[0].comp, act->out[0].len, b,
                                sizeof b);
            printf("  copy    %s -> %s %s\n", a, b, ur_dtype_name(act->out_dtype));
            break;
        case UR_PLAN_UNSTACK:
            ur_plan_path_format((const char *const *)act->out[0].comp, act->out[0].len, b,
                                sizeof b);
            printf("  split   %s on axis %zu into %zu: %s ... %s\n", a, act->axis, act->n_out, b,
                   ur_dtype_name(act->out_dtype));
            break;
        case UR_PLAN_REPLICATE:
            printf("  repeat  %s into %zu layers\n", a, act->n_out);
            break;
        }
    }
}

static int run(const unroll_args *args, ur_err *err)
{
    ur_run_opts ro;
    ur_run_report rep;
    cli_progress prog;
    double t0 = ur_clock_mono_s();
    int rc;

    memset(&ro, 0, sizeof ro);
    memset(&prog, 0, sizeof prog);
    ro.config.config_path = args->run.config;
    ro.config.overrides = args->run.overrides;
    ro.config.n_overrides = args->run.n_overrides;
    ro.config.envp = (const char *const *)environ;
    ro.dry_run = args->run.dry_run;
    ro.replace = args->run.replace;
    ro.threads = args->run.threads;
    ro.memory_limit = args->run.memory_limit;
    ro.cancel = &cli_interrupted;
    ro.process_count = args->process_count;
    ro.process_index = args->process_index;
    ro.process_source = args->process_source;
    ro.resume = args->resume;
    ro.commit_every = args->commit_every;
    ro.on_plan = print_plan;
    ro.ctx = &prog;
    if (!args->run.quiet) {
        ro.on_note = print_note;
    }
    if (!args->run.quiet && isatty(STDERR_FILENO)) {
        ro.on_begin = cli_progress_begin;
        ro.progress = cli_progress_show;
    }
    rc = ur_job_run(&rep, &ro, err);
    if (rc == UR_OK && !args->run.quiet && !args->run.dry_run && !rep.share) {
        fprintf(stderr,
                "unroll: wrote %s/: %zu tensors from %zu, %.3f GiB read, %.3f GiB written, "
                "%.2f s, %d threads\n",
                rep.dest, rep.total.tensors_out, rep.total.tensors_in,
                (double)rep.total.bytes_in / 1073741824.0,
                (double)rep.total.bytes_out / 1073741824.0, ur_clock_mono_s() - t0,
                rep.total.threads);
    }
    if (rc == UR_OK) {
        cli_print_phases();
    }
    ur_job_run_report_dispose(&rep);
    return rc;
}

int cli_cmd_unroll(int argc, char **argv)
{
    unroll_args args;
    ur_err err;
    int status;

    memset(&args, 0, sizeof args);
    args.opt_process_index = -1;
    ur_err_clear(&err);
    status = parse_args(&args, argc, argv);
    if (status < 0) {
        cli_catch_signals();
        ur_alloc_one_heap(); /* before the run starts its threads */
        status = cli_run_status(run(&args, &err), &err);
    }
    cli_run_args_dispose(&args.run);
    return status;
}
