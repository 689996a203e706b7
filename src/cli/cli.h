/* The command line: subcommands and the mapping from error codes to exit statuses.
 * Only src/cli/ prints (STYLE §3.3). */
#ifndef UNROLL_CLI_H
#define UNROLL_CLI_H

#include "unroll/buf.h"
#include "unroll/err.h"

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

/* Subcommands; argv[0] is the subcommand's name. Each returns an exit status. */
int cli_cmd_ls(int argc, char **argv);
int cli_cmd_inspect(int argc, char **argv);
int cli_cmd_unroll(int argc, char **argv);
int cli_cmd_verify(int argc, char **argv);
int cli_cmd_merge(int argc, char **argv);

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
