/* The command line: subcommands and the mapping from error codes to exit statuses.
 * Only src/cli/ prints (docs/conventions.md §3). */
#ifndef UNROLL_CLI_H
#define UNROLL_CLI_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* Documented exit statuses (README "Exit statuses"). */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILURE = 1,     /* generic failure, internal error, out of memory */
    CLI_EXIT_USAGE = 2,       /* bad command line or configuration */
    CLI_EXIT_IO = 3,          /* a file could not be read or written */
    CLI_EXIT_CORRUPT = 4,     /* the input checkpoint is damaged or inconsistent */
    CLI_EXIT_UNSUPPORTED = 5, /* valid input using a feature unroll does not implement */
    CLI_EXIT_VERIFY = 6       /* `unroll verify` found a mismatch */
};

/* Exit status for an error code. */
int cli_exit_status(ur_code code);
/* Print "unroll: <error>" as one line on stderr and return the exit status. */
int cli_fail(const ur_err *err);
/* Print "unroll: <message>" on stderr and return CLI_EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* `unroll --version`: the version and the libraries' own version strings (as linked). */
void cli_print_version(void);

/* Whether argv[*i] is the option short_opt ("-j", or NULL) / long_opt ("--threads", or NULL)
 * that takes a value, in any of the forms `-j N`, `-jN`, `--threads N`, `--threads=N`.
 * On a match returns 1, leaves *i on the last word used and sets *value (NULL when the value
 * is missing: the option ends the command line); otherwise returns 0 and leaves *value
 * alone (a value matched earlier stays). */
int cli_opt_value(int argc, char **argv, int *i, const char *short_opt, const char *long_opt,
                  const char **value);

/* ---- what the converting commands share (cli_run.c) ---- */

/* A byte count with an optional K/M/G suffix (binary units): 0, or -1 when it is not one. */
int cli_parse_size(const char *s, uint64_t *out);

/* The options and arguments every converting command takes: -n, -q, --replace, -j,
 * --memory-limit, the config and its key=value overrides. */
typedef struct {
    int dry_run;
    int replace; /* --replace: an object-store destination's objects are deleted first */
    int quiet;
    int threads;
    uint64_t memory_limit;
    const char *config;
    const char **overrides; /* argc entries, owned (cli_run_args_dispose) */
    size_t n_overrides;
} cli_run_args;
/* argv[*i] (which may take the next word) as one of those: 1 when it is one, 0 when it is an
 * option they do not have (the command's to refuse), else -1 with *status the exit status
 * (the line said). The first call allocates overrides. */
int cli_run_arg(cli_run_args *a, int argc, char **argv, int *i, int *status);
void cli_run_args_dispose(cli_run_args *a);

/* The progress line's state (the ctx of ur_run_opts' on_begin and progress). */
typedef struct {
    double start; /* ur_clock_mono_s() */
    double last;
    const char *what;
} cli_progress;
void cli_progress_begin(void *ctx, const char *what);
void cli_progress_show(void *ctx, uint64_t done, uint64_t total);
/* UNROLL_PHASES: where the time went, on stderr (even with -q). */
void cli_print_phases(void);

/* SIGINT, SIGTERM and SIGHUP set cli_interrupted (the signal's number); the run stops at its
 * next chunk, publishes nothing and exits with 128 + that number. */
extern volatile sig_atomic_t cli_interrupted;
void cli_catch_signals(void);
/* The exit status of a run that returned rc: 0, 128 + the signal that stopped it (said in one
 * line), or the error's (cli_fail). */
int cli_run_status(int rc, const ur_err *err);

/* Subcommands; argv[0] is the subcommand's name. Each returns an exit status. */
int cli_cmd_ls(int argc, char **argv);
int cli_cmd_inspect(int argc, char **argv);
int cli_cmd_unroll(int argc, char **argv);
int cli_cmd_verify(int argc, char **argv);
int cli_cmd_merge(int argc, char **argv);
int cli_cmd_hf(int argc, char **argv);

/* Multi-process runs (cli_multi.c). Which process this is: --process-count/--process-index
 * (opt_count 0 and opt_index -1 when not given), else the launcher's environment (Slurm,
 * Open MPI, PMI, Kubernetes JOB_COMPLETION_INDEX); *count 1 when none. Returns -1 to go on,
 * else an exit status (a usage error was printed). *source names where it came from. */
int cli_multi_resolve(int opt_count, int opt_index, int *count, int *index, const char **source);
/* `unroll ls` / `inspect` on a multi-process run not yet published (its staging directory
 * `<C>.unroll-multi`, or C while only that exists): print which shares are complete and
 * return the exit status; -1 when `path` is not such a run. */
int cli_multi_show_status(const char *path);

#endif
