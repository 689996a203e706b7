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
    int dry_run;
    int replace; /* --replace: an object-store destination's objects are deleted first */
    int quiet;
    int threads;
    uint64_t memory_limit;
    const char *config;
    const char **overrides;
    size_t n_overrides;
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
          "  5  valid input that uses a feature unroll does not implement\n"
          "  6  unroll verify found a mismatch, a missing or an extra leaf\n"
          "  130, 143, 129  stopped by SIGINT, SIGTERM, SIGHUP (nothing published)\n",
          f);
}

/* A byte count with an optional K/M/G suffix (binary units; "KiB", "KB" and "K" alike).
 * Refused: no digits, a sign, zero, and anything that does not fit in 64 bits after the
 * suffix (17179869185G would wrap to 1 GiB). */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    unsigned shift = 0;
    if (*s < '0' || *s > '9') {
        return -1;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0 || end == s) {
        return -1;
    }
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        return -1;
    }
    if (*end == 'i' || *end == 'B') {
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    }
    if (*end != '\0' || v == 0 || v > (UINT64_MAX >> shift)) {
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* Returns -1 to go on, else an exit status. */
static int parse_args(unroll_args *a, int argc, char **argv)
{
    a->overrides = ur_calloc((size_t)argc + 1, sizeof *a->overrides);
    if (a->overrides == NULL) {
        return cli_usage_error("out of memory");
    }
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i], *v;
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            usage(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(s, "-V") == 0 || strcmp(s, "--version") == 0) {
            cli_print_version();
            return CLI_EXIT_OK;
        } else if (strcmp(s, "-n") == 0 || strcmp(s, "--dry-run") == 0) {
            a->dry_run = 1;
        } else if (strcmp(s, "-q") == 0 || strcmp(s, "--quiet") == 0) {
            a->quiet = 1;
        } else if (strcmp(s, "--replace") == 0) {
            a->replace = 1;
        } else if (cli_opt_value(argc, argv, &i, "-j", "--threads", &v)) {
            char *end;
            long n;
            if (v == NULL) {
                return cli_usage_error("%s needs a number", s);
            }
            errno = 0;
            n = strtol(v, &end, 10);
            if (errno != 0 || end == v || *end != '\0' || n < 1 || n > 1024) {
                return cli_usage_error("%s: '%s' is not a thread count (1-1024)", s, v);
            }
            a->threads = (int)n;
        } else if (cli_opt_value(argc, argv, &i, NULL, "--memory-limit", &v)) {
            if (v == NULL) {
                return cli_usage_error("--memory-limit needs a size such as 512M or 4G");
            }
            if (parse_size(v, &a->memory_limit) < 0) {
                return cli_usage_error("--memory-limit: '%s' is not a size such as 512M or 4G "
                                       "(at most 16 EiB)",
                                       v);
            }
        } else if (strcmp(s, "--resume") == 0) {
            a->resume = 1;
        } else if (cli_opt_value(argc, argv, &i, NULL, "--commit-every", &v)) {
            if (v == NULL || parse_size(v, &a->commit_every) < 0) {
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
        } else if (s[0] == '-') {
            return cli_usage_error("unknown option '%s' (see unroll --help)", s);
        } else if (a->config == NULL) {
            a->config = s;
        } else {
            if (strchr(s, '=') == NULL) {
                return cli_usage_error("argument '%s' is not key=value", s);
            }
            a->overrides[a->n_overrides++] = s;
        }
    }
    if (a->config == NULL) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    return cli_multi_resolve(a->opt_process_count, a->opt_process_index, &a->process_count,
                             &a->process_index, &a->process_source);
}

/* ---- progress ------------------------------------------------------------------------- */

typedef struct {
    double start; /* ur_clock_mono_s() */
    double last;
    const char *what;
} progress;

/* UNROLL_PHASES: where the time went (unroll/phase.h), seconds summed over threads; printed
 * even with -q, since the benchmark asks for it. */
static void print_phases(void)
{
    static const char *const names[UR_PHASE_N] = {"read+decode", "",       "cast",
                                                  "encode",      "commit", "write"};
    uint64_t wall[UR_PHASE_N], cpu[UR_PHASE_N];
    if (!ur_phase_on()) {
        return;
    }
    ur_phase_totals(wall, cpu);
    /* the fused casts ran inside the read calls: count them as casting, not reading */
    wall[UR_PHASE_READ] -= wall[UR_PHASE_CAST_FUSED] < wall[UR_PHASE_READ]
                               ? wall[UR_PHASE_CAST_FUSED]
                               : wall[UR_PHASE_READ];
    cpu[UR_PHASE_READ] -= cpu[UR_PHASE_CAST_FUSED] < cpu[UR_PHASE_READ] ? cpu[UR_PHASE_CAST_FUSED]
                                                                        : cpu[UR_PHASE_READ];
    wall[UR_PHASE_CAST] += wall[UR_PHASE_CAST_FUSED];
    cpu[UR_PHASE_CAST] += cpu[UR_PHASE_CAST_FUSED];
    fprintf(stderr, "unroll: phases (thread seconds, wall/cpu):");
    for (int p = 0; p < UR_PHASE_N; p++) {
        if (p != UR_PHASE_CAST_FUSED) {
            fprintf(stderr, " %s %.3f/%.3f", names[p], (double)wall[p] / 1e9,
                    (double)cpu[p] / 1e9);
        }
    }
    fprintf(stderr, "\n");
}

/* A rate, and from it an ETA, mean something only once the run has gone on for a while
 * and done a part of the work: the first chunks include opening files and warming caches
 * (an early line read "0.8 MiB/s ETA 5122s"). Until then the line shows bytes only. */
#define PROGRESS_RATE_AFTER_S 1.0
#define PROGRESS_ETA_AFTER_S 3.0

/* ur_run_opts.on_begin: a unit's conversion starts. */
static void begin_progress(void *ctx, const char *what)
{
    progress *p = ctx;
    p->start = ur_clock_mono_s();
    p->last = -1.0;
    p->what = what;
}

static void show_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress *p = ctx;
    double t = ur_clock_mono_s() - p->start;
    double rate;
    if (t - p->last < 0.2 && done < total) {
        return;
    }
    p->last = t;
    rate = t > 0 ? (double)done / t : 0.0;
    fprintf(stderr, "\r%s: %5.1f%%  %.2f / %.2f GiB", p->what,
            total ? 100.0 * (double)done / (double)total : 100.0, (double)done / 1073741824.0,
            (double)total / 1073741824.0);
    if (t >= PROGRESS_RATE_AFTER_S && done > 0) {
        fprintf(stderr, "  %.1f MiB/s", rate / 1048576.0);
    }
    if (t >= PROGRESS_ETA_AFTER_S && done < total && (double)done >= 0.02 * (double)total) {
        fprintf(stderr, "  ETA %.0fs", (double)(total - done) / rate);
    }
    fputs("   ", stderr);
    if (done >= total) {
        fputc('\n', stderr);
    }
}

/* ---- signals ---------------------------------------------------------------------------- */

/* SIGINT, SIGTERM and SIGHUP only set this flag (async-signal-safe); the workers stop at their
 * next chunk, the run removes its staging directory, publishes nothing, and exits with
 * 128 + the signal's number. */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    interrupted = sig;
}

static void catch_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        (void)sigaction(sigs[i], &sa, NULL);
    }
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
    progress prog;
    double t0 = ur_clock_mono_s();
    int rc;

    memset(&ro, 0, sizeof ro);
    memset(&prog, 0, sizeof prog);
    ro.config.config_path = args->config;
    ro.config.overrides = args->overrides;
    ro.config.n_overrides = args->n_overrides;
    ro.config.envp = (const char *const *)environ;
    ro.dry_run = args->dry_run;
    ro.replace = args->replace;
    ro.threads = args->threads;
    ro.memory_limit = args->memory_limit;
    ro.cancel = &interrupted;
    ro.process_count = args->process_count;
    ro.process_index = args->process_index;
    ro.process_source = args->process_source;
    ro.resume = args->resume;
    ro.commit_every = args->commit_every;
    ro.on_plan = print_plan;
    ro.ctx = &prog;
    if (!args->quiet) {
        ro.on_note = print_note;
    }
    if (!args->quiet && isatty(STDERR_FILENO)) {
        ro.on_begin = begin_progress;
        ro.progress = show_progress;
    }
    rc = ur_job_run(&rep, &ro, err);
    if (rc == UR_OK && !args->quiet && !args->dry_run && !rep.share) {
        fprintf(stderr,
                "unroll: wrote %s/: %zu tensors from %zu, %.3f GiB read, %.3f GiB written, "
                "%.2f s, %d threads\n",
                rep.dest, rep.total.tensors_out, rep.total.tensors_in,
                (double)rep.total.bytes_in / 1073741824.0,
                (double)rep.total.bytes_out / 1073741824.0, ur_clock_mono_s() - t0,
                rep.total.threads);
    }
    if (rc == UR_OK) {
        print_phases();
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
        catch_signals();
        ur_alloc_one_heap(); /* before the run starts its threads */
        status = run(&args, &err) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        if (status != CLI_EXIT_OK && interrupted) {
            /* whatever failed after the signal failed because of it */
            fprintf(stderr,
                    "unroll: interrupted by %s: nothing published, the destination "
                    "is as it was\n",
                    interrupted == SIGINT    ? "SIGINT"
                    : interrupted == SIGTERM ? "SIGTERM"
                                             : "SIGHUP");
            status = 128 + interrupted;
        } else if (status != CLI_EXIT_OK) {
            status = cli_fail(&err);
        }
    }
    ur_free(args.overrides);
    return status;
}
