/* What the commands that convert share: sizes on the command line, the progress line, the
 * phase times, the stop signals. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/phase.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A byte count with an optional K/M/G suffix (binary units; "KiB", "KB" and "K" alike).
 * Refused: no digits, a sign, zero, and anything that does not fit in 64 bits after the
 * suffix (17179869185G would wrap to 1 GiB). */
int cli_parse_size(const char *s, uint64_t *out)
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

/* ---- progress ------------------------------------------------------------------------- */

/* UNROLL_PHASES: where the time went (unroll/phase.h), seconds summed over threads; printed
 * even with -q, since the benchmark asks for it. */
void cli_print_phases(void)
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
void cli_progress_begin(void *ctx, const char *what)
{
    cli_progress *p = ctx;
    p->start = ur_clock_mono_s();
    p->last = -1.0;
    p->what = what;
}

void cli_progress_show(void *ctx, uint64_t done, uint64_t total)
{
    cli_progress *p = ctx;
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
volatile sig_atomic_t cli_interrupted;

static void on_signal(int sig)
{
    cli_interrupted = sig;
}

void cli_catch_signals(void)
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

int cli_run_status(int rc, const ur_err *err)
{
    if (rc == UR_OK) {
        return CLI_EXIT_OK;
    }
    if (cli_interrupted) {
        /* whatever failed after the signal failed because of it */
        fprintf(stderr,
                "unroll: interrupted by %s: nothing published, the destination is as it was\n",
                cli_interrupted == SIGINT    ? "SIGINT"
                : cli_interrupted == SIGTERM ? "SIGTERM"
                                             : "SIGHUP");
        return 128 + cli_interrupted;
    }
    return cli_fail(err);
}

/* -j N: 1 to 1024 threads. */
static int parse_threads(const char *opt, const char *v, int *out)
{
    char *end;
    long n;
    if (v == NULL) {
        return cli_usage_error("%s needs a number", opt);
    }
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || n < 1 || n > 1024) {
        return cli_usage_error("%s: '%s' is not a thread count (1-1024)", opt, v);
    }
    *out = (int)n;
    return -1;
}

int cli_run_arg(cli_run_args *a, int argc, char **argv, int *i, int *status)
{
    const char *s = argv[*i], *v;
    *status = -1;
    if (a->overrides == NULL &&
        (a->overrides = ur_calloc((size_t)argc + 1, sizeof *a->overrides)) == NULL) {
        *status = cli_usage_error("out of memory");
    } else if (strcmp(s, "-n") == 0 || strcmp(s, "--dry-run") == 0) {
        a->dry_run = 1;
    } else if (strcmp(s, "-q") == 0 || strcmp(s, "--quiet") == 0) {
        a->quiet = 1;
    } else if (strcmp(s, "--replace") == 0) {
        a->replace = 1;
    } else if (cli_opt_value(argc, argv, i, "-j", "--threads", &v)) {
        *status = parse_threads(s, v, &a->threads);
    } else if (cli_opt_value(argc, argv, i, NULL, "--memory-limit", &v)) {
        if (v == NULL) {
            *status = cli_usage_error("--memory-limit needs a size such as 512M or 4G");
        } else if (cli_parse_size(v, &a->memory_limit) < 0) {
            *status = cli_usage_error("--memory-limit: '%s' is not a size such as 512M or 4G "
                                      "(at most 16 EiB)",
                                      v);
        }
    } else if (s[0] == '-') {
        return 0;
    } else if (a->config == NULL) {
        a->config = s;
    } else if (strchr(s, '=') == NULL) {
        *status = cli_usage_error("argument '%s' is not key=value", s);
    } else {
        a->overrides[a->n_overrides++] = s;
    }
    return *status >= 0 ? -1 : 1;
}

void cli_run_args_dispose(cli_run_args *a)
{
    ur_free(a->overrides);
    a->overrides = NULL;
}
