/* `unroll path/to/base.yml key=value ...`: the MaxText-style conversion.
 *
 * Reads the config as MaxText's pyconfig does, opens the input checkpoint, builds the plan
 * (what is kept, dropped, and split per layer), and runs it into a staging directory beside
 * the checkpoint directory. Only when everything (base and every LoRA adapter) is complete are
 * its units moved into place, replacing the earlier ones and nothing else
 * (unroll/orbax_publish.h: lock, staging, overlap, publication). */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE /* environ */
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/orbax.h"
#include "unroll/orbax_publish.h"
#include "unroll/orbax_share.h"
#include "unroll/plan.h"
#include "unroll/plan_exec.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int dry_run;
    int quiet;
    int threads;
    uint64_t memory_limit;
    const char *config;
    const char **overrides;
    size_t n_overrides;
    int opt_process_count; /* 0: not given */
    int opt_process_index; /* -1: not given */
    int resume;            /* --resume: a single process, resumable (as share 0 of 1) */
    /* resolved (cli_multi_resolve); a share of a multi-process run when process_count > 1 */
    int process_count;
    int process_index;
    const char *process_source;
    const char *share_meta_dir; /* set while a share runs */
    ur_orbax_share *share;      /* set while a share runs */
    uint64_t resume_from;       /* a share continued from its saved progress (0: afresh) */
    uint64_t commit_every;      /* bytes of input between snapshots of a share; 0: default */
} unroll_args;

/* A share's database is snapshotted every this many bytes of input (--commit-every). */
#define DEFAULT_COMMIT_EVERY ((uint64_t)1 << 30)

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
                n >= UR_ORBAX_SHARE_MAX) {
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
    struct timespec start;
    double last;
    const char *what;
} progress;

static double seconds_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* A rate, and from it an ETA, mean something only once the run has gone on for a while
 * and done a part of the work: the first chunks include opening files and warming caches
 * (an early line read "0.8 MiB/s ETA 5122s"). Until then the line shows bytes only. */
enum { PROGRESS_RATE_AFTER_S = 1, PROGRESS_ETA_AFTER_S = 3 };

static void show_progress(void *ctx, uint64_t done, uint64_t total)
{
    progress *p = ctx;
    double t = seconds_since(&p->start);
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

static int check_interrupted(ur_err *err)
{
    return interrupted ? ur_err_set(err, UR_EINTERNAL, "interrupted") : UR_OK;
}

/* ---- one conversion --------------------------------------------------------------------- */

typedef struct {
    ur_plan_leaf *leaves;
    const char **comps; /* every leaf's key components, back to back */
    unsigned char *seqs; /* ... and which of them are list indices */
    size_t n;
} leaf_list;

static void leaf_list_dispose(leaf_list *l)
{
    ur_free(l->comps);
    ur_free(l->seqs);
    ur_free(l->leaves);
}

static int placeholder_of(ur_orbax_value_type vt)
{
    switch (vt) {
    case UR_ORBAX_VALUE_NONE:
        return UR_PLAN_PLACEHOLDER_NONE;
    case UR_ORBAX_VALUE_EMPTY_DICT:
        return UR_PLAN_PLACEHOLDER_EMPTY_DICT;
    case UR_ORBAX_VALUE_EMPTY_LIST:
        return UR_PLAN_PLACEHOLDER_EMPTY_LIST;
    default:
        return UR_PLAN_NOT_PLACEHOLDER;
    }
}

/* The plan's view of the checkpoint's leaves, index for index. */
static int leaves_of(leaf_list *l, const ur_orbax_ckpt *ck, ur_err *err)
{
    size_t n = ur_orbax_ckpt_leaf_count(ck), total = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        total += ur_orbax_ckpt_leaf(ck, i)->depth;
    }
    l->leaves = ur_calloc(n ? n : 1, sizeof *l->leaves);
    l->comps = ur_calloc(total ? total : 1, sizeof *l->comps);
    l->seqs = ur_calloc(total ? total : 1, 1);
    if (l->leaves == NULL || l->comps == NULL || l->seqs == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        const ur_orbax_leaf *o = ur_orbax_ckpt_leaf(ck, i);
        ur_plan_leaf *p = &l->leaves[i];
        for (size_t k = 0; k < o->depth; k++) {
            l->comps[used + k] = o->path[k].key;
            l->seqs[used + k] = o->path[k].type == UR_ORBAX_KEY_SEQUENCE;
        }
        p->path = l->comps + used;
        p->seq = l->seqs + used;
        p->path_len = o->depth;
        used += o->depth;
        p->dtype = o->has_array ? o->dtype : UR_DT_INVALID;
        p->placeholder = placeholder_of(o->value_type);
        p->rank = o->has_array ? (size_t)o->rank : 0;
        memcpy(p->shape, o->shape, sizeof p->shape);
        p->has_spec = o->sharding.kind == UR_ORBAX_SHARDING_NAMED;
        for (int d = 0; d < o->sharding.spec_rank && d < UR_MAX_RANK; d++) {
            p->spec[d] = o->sharding.spec[d];
        }
    }
    l->n = n;
    return UR_OK;
}

static void print_plan(const ur_plan *plan, const leaf_list *leaves, const char *what)
{
    char a[1024], b[1024];
    printf("%s: %zu leaves in, %zu kept, %zu dropped; %zu copied, %zu split, %zu replicated -> "
           "%zu arrays\n",
           what, plan->summary.leaves_in, plan->summary.leaves_kept, plan->summary.leaves_dropped,
           plan->summary.leaves_copied, plan->summary.leaves_unstacked,
           plan->summary.leaves_replicated, plan->summary.leaves_out);
    printf("%s: bytes in %llu (read %llu), bytes out %llu\n", what,
           (unsigned long long)plan->summary.bytes_in, (unsigned long long)plan->summary.bytes_read,
           (unsigned long long)plan->summary.bytes_out);
    for (size_t i = 0; i < plan->n_actions; i++) {
        const ur_plan_action *act = &plan->actions[i];
        const ur_plan_leaf *l = &leaves->leaves[i];
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

/* Refuse, before anything is written, an output that may not fit: `need` is the output's
 * uncompressed size, an upper bound (zstd rarely shrinks trained bf16 weights by much, so a
 * smaller guess would let a run fill the disk and fail late); arrays of the fill value
 * compress to almost nothing but are refused all the same when they would not fit as stored
 * uncompressed, so a few-KB input declaring a 1 TB array cannot fill the disk. */
static int check_free_space(const char *step_dir, uint64_t need, ur_err *err)
{
    uint64_t avail = 0;
    int rc = ur_fs_free_space(step_dir, &avail, err);
    if (rc == UR_OK && need > avail) {
        rc = ur_err_set_os(err, UR_EIO, ENOSPC, step_dir,
                           "not enough free space: the output needs up to %llu bytes "
                           "(%.3f GiB uncompressed), %llu bytes (%.3f GiB) are free",
                           (unsigned long long)need, (double)need / 1073741824.0,
                           (unsigned long long)avail, (double)avail / 1073741824.0);
    }
    return rc;
}

/* The slab budget of a share: the same in every process of a run, whatever its thread
 * count, since the output chunking follows it (0: single process, the executor decides). */
static uint64_t share_slab_budget(const unroll_args *args)
{
    if (args->process_count <= 1 && !args->resume) {
        return 0;
    }
    return args->memory_limit ? args->memory_limit / (uint64_t)(args->threads > 0 ? args->threads : 1)
                              : (uint64_t)128 << 20;
}

typedef struct {
    ur_orbax_writer *w;
    ur_orbax_share *share;
} share_piece_ctx;

/* A piece of a share is done: snapshot its database, then record the resume point. */
static int share_piece(void *ctx, uint64_t next_item, ur_err *err)
{
    share_piece_ctx *p = ctx;
    int rc = ur_orbax_writer_snapshot(p->w, err);
    return rc == UR_OK ? ur_orbax_share_save_progress(p->share, next_item, err) : rc;
}

/* `in_path` converted into the step directory `step_dir`, created below `below` (the
 * staging directory, which must exist). */
static int convert(const char *in_path, const char *step_dir, const char *below,
                   ur_plan_input kind, const ur_settings *s, const unroll_args *args,
                   const char *what, ur_exec_stats *total, ur_err *err)
{
    ur_orbax_ckpt *ck = NULL;
    ur_plan *plan = NULL;
    ur_orbax_writer *w = NULL;
    leaf_list leaves = {0};
    ur_orbax_write_opts wo;
    ur_exec_opts eo;
    ur_exec_stats st;
    progress prog;
    share_piece_ctx piece;
    int rc;

    rc = ur_orbax_ckpt_open(&ck, in_path, 0, err);
    if (rc < 0) {
        goto out;
    }
    rc = leaves_of(&leaves, ck, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_plan_build(&plan, leaves.leaves, leaves.n, s, kind, err);
    if (rc < 0) {
        ur_err_wrap(err, "%s", in_path);
        goto out;
    }
    if (args->dry_run) {
        print_plan(plan, &leaves, what);
        goto out;
    }

    rc = check_free_space(step_dir, plan->summary.bytes_out, err);
    if (rc < 0) {
        goto out;
    }
    ur_orbax_write_opts_init(&wo);
    wo.use_ocdbt = s->use_ocdbt;
    wo.use_zarr3 = s->use_zarr3;
    wo.create_below = below;
    /* Reproducible data-file names: the same input gives the same output bytes. */
    wo.ocdbt.seed = 0x756e726f6c6c0001ull;
    if (s->target_data_file_size > 0) {
        wo.ocdbt.target_data_file_size = (uint64_t)s->target_data_file_size;
    }
    if (args->share != NULL) {
        wo.share_index = args->process_index;
        wo.share_meta_dir = args->share_meta_dir;
        wo.ocdbt.seed += (uint64_t)(args->process_index + 1) << 16; /* distinct names */
        wo.share_resume = args->resume_from > 0;
    }
    rc = ur_orbax_writer_create(&w, step_dir, &wo, err);
    if (rc < 0) {
        goto out;
    }
    memset(&eo, 0, sizeof eo);
    eo.threads = args->threads;
    eo.memory_limit = args->memory_limit;
    eo.cancel = &interrupted;
    eo.process_count = args->process_count;
    eo.process_index = args->process_index;
    eo.slab_budget = share_slab_budget(args);
    if (args->share != NULL) {
        piece.w = w;
        piece.share = args->share;
        eo.piece = share_piece;
        eo.piece_ctx = &piece;
        eo.piece_bytes = args->commit_every ? args->commit_every : DEFAULT_COMMIT_EVERY;
        eo.resume_from = args->resume_from;
    }
    if (!args->quiet && isatty(STDERR_FILENO)) {
        clock_gettime(CLOCK_MONOTONIC, &prog.start);
        prog.last = -1.0;
        prog.what = what;
        eo.progress = show_progress;
        eo.progress_ctx = &prog;
    }
    rc = ur_plan_exec_run(plan, ck, w, &eo, &st, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_orbax_writer_commit(w, err);
    w = NULL; /* commit frees the writer either way */
    if (rc < 0) {
        goto out;
    }
    total->tensors_in += st.tensors_in;
    total->tensors_out += st.tensors_out;
    total->bytes_in += st.bytes_in;
    total->bytes_out += st.bytes_out;
    total->threads = st.threads;
    total->share_bytes += st.share_bytes;
    total->all_bytes += st.all_bytes;
out:
    ur_orbax_writer_abort(w);
    ur_plan_free(plan);
    leaf_list_dispose(&leaves);
    ur_orbax_ckpt_close(ck);
    return rc;
}

/* Copy a small file byte for byte (adapter_config.json), read beneath its own directory
 * (no link out of the adapter) and never given more permissions than it has. */
static int copy_file(const char *from, const char *to, ur_err *err)
{
    const char *slash = strrchr(from, '/');
    char *dir = slash != NULL ? ur_strndup(from, (size_t)(slash - from)) : ur_strdup(".");
    int rc = dir != NULL ? ur_fs_copy_file_beneath(dir, slash != NULL ? slash + 1 : from, to,
                                                   16u << 20, err)
                         : ur_err_oom(err);
    ur_free(dir);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The ids of `<adapters>/<id>/` holding adapter_config.json, sorted. */
static int list_loras(const char *adapters, char ***ids_out, size_t *n_out, ur_err *err)
{
    DIR *d = opendir(adapters);
    struct dirent *e;
    char **ids = NULL;
    size_t n = 0, cap = 0;
    int rc = UR_OK;

    if (d == NULL) {
        return ur_err_set_os(err, errno == ENOENT ? UR_ENOTFOUND : UR_EIO, errno, adapters,
                             "cannot open the LoRA adapters directory");
    }
    while ((e = readdir(d)) != NULL) {
        char *cfg;
        int has;
        if (e->d_name[0] == '.') {
            continue;
        }
        cfg = ur_path_joinf(adapters, "%s/adapter_config.json", e->d_name);
        has = cfg != NULL && ur_fs_exists(cfg);
        ur_free(cfg);
        if (!has) {
            continue;
        }
        if (n == cap) {
            char **p = ur_realloc(ids, (cap ? cap * 2 : 8) * sizeof *p);
            if (p == NULL) {
                rc = ur_err_oom(err);
                break;
            }
            ids = p;
            cap = cap ? cap * 2 : 8;
        }
        ids[n] = ur_strdup(e->d_name);
        if (ids[n] == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        n++;
    }
    closedir(d);
    if (rc == UR_OK && n == 0) {
        rc = ur_err_set_os(err, UR_ENOTFOUND, 0, adapters,
                           "no LoRA adapter (<id>/adapter_config.json) found");
    }
    if (rc == UR_OK) {
        qsort(ids, n, sizeof *ids, cmp_str);
    }
    *ids_out = ids;
    *n_out = n;
    return rc;
}

/* ---- the run ---------------------------------------------------------------------------- */

/* What a run writes, relative to the checkpoint directory (see unroll/orbax_publish.h): the
 * step "0", or "base/0" and per adapter "loras/<id>/0" and its adapter_config.json. */
typedef struct {
    char **ids; /* LoRA adapter ids */
    size_t n_ids;
    const char **units;
    char **owned; /* the formatted unit names */
    size_t n_units;
} unit_list;

static void unit_list_dispose(unit_list *u)
{
    for (size_t i = 0; i < u->n_ids; i++) {
        ur_free(u->ids[i]);
    }
    for (size_t i = 0; i < u->n_units; i++) {
        ur_free(u->owned[i]);
    }
    ur_free(u->ids);
    ur_free(u->units);
    ur_free(u->owned);
}

static int unit_list_make(unit_list *u, const char *adapters, ur_err *err)
{
    size_t n;
    int rc = UR_OK;
    if (adapters[0] != '\0') {
        rc = list_loras(adapters, &u->ids, &u->n_ids, err);
        if (rc < 0) {
            return rc;
        }
    }
    n = adapters[0] != '\0' ? 1 + 2 * u->n_ids : 1;
    u->units = ur_calloc(n, sizeof *u->units);
    u->owned = ur_calloc(n, sizeof *u->owned);
    if (u->units == NULL || u->owned == NULL) {
        return ur_err_oom(err);
    }
    u->owned[u->n_units++] = ur_strdup(adapters[0] != '\0' ? "base/0" : "0");
    for (size_t i = 0; i < u->n_ids; i++) {
        u->owned[u->n_units++] = ur_path_joinf("loras", "%s/0", u->ids[i]);
        u->owned[u->n_units++] = ur_path_joinf("loras", "%s/adapter_config.json", u->ids[i]);
    }
    for (size_t i = 0; i < u->n_units; i++) {
        if (u->owned[i] == NULL) {
            return ur_err_oom(err);
        }
        u->units[i] = u->owned[i];
    }
    return UR_OK;
}

/* Each adapter `<adapters>/<id>/0/items` into the staged unit 1 + 2i, its adapter_config.json
 * copied into unit 2 + 2i (in a dry run: only the plans). */
static int convert_loras(const char *adapters, const unit_list *u, const ur_orbax_publish *pub,
                         const ur_settings *s, const unroll_args *args, ur_exec_stats *total,
                         ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < u->n_ids && rc == UR_OK; i++) {
        char *in = ur_path_joinf(adapters, "%s/0/items", u->ids[i]);
        char *cfg_in = ur_path_joinf(adapters, "%s/adapter_config.json", u->ids[i]);
        const char *out = pub != NULL ? ur_orbax_publish_staged(pub, 1 + 2 * i) : NULL;
        char what[300];
        snprintf(what, sizeof what, "lora %s", u->ids[i]);
        rc = check_interrupted(err);
        if (rc == UR_OK && (in == NULL || cfg_in == NULL)) {
            rc = ur_err_oom(err);
        }
        if (rc == UR_OK) {
            rc = convert(in, out, pub != NULL ? ur_orbax_publish_staging(pub) : NULL,
                         UR_PLAN_INPUT_LORA, s, args, what, total, err);
        }
        if (rc == UR_OK && pub != NULL) {
            rc = copy_file(cfg_in, ur_orbax_publish_staged(pub, 2 + 2 * i), err);
        }
        ur_free(in);
        ur_free(cfg_in);
    }
    return rc;
}

/* One share of a multi-process run (unroll/orbax_share.h): convert this process's part into
 * its own ocdbt.process_<i>/ in the shared staging directory, mark it done, and finish the
 * run when it is the last. A share already done is not redone. */
static int run_share(const unroll_args *args0, const ur_settings *s, const char *in_path,
                     ur_plan_input kind, const char *const *inputs, size_t n_inputs, ur_err *err)
{
    unroll_args args = *args0;
    ur_orbax_share *sh = NULL;
    ur_exec_stats total;
    ur_buf text;
    struct timespec t0;
    char *to = NULL;
    int rc, published = 0, missing = 0;

    memset(&total, 0, sizeof total);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ur_buf_init(&text, 0);
    if (s->lora_input_adapters_path[0] != '\0') {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "lora_input_adapters_path: a multi-process run converts one checkpoint");
    }
    if (s->run_name[0] == '\0') {
        return ur_err_set(err, UR_EINVAL, "a multi-process run needs run_name= (the default "
                                          "names the date, which may differ between processes)");
    }
    rc = ur_orbax_publish_check(s->checkpoint_dir, (const char *const[]){"0"}, 1, inputs,
                                n_inputs, err);
    if (rc == UR_OK) {
        rc = cli_multi_run_text(&text, args.process_count, share_slab_budget(&args), in_path,
                                args.config, args.overrides, args.n_overrides, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_open(&sh, s->checkpoint_dir, args.process_count, args.process_index,
                                 (const char *)text.data, err);
    }
    if (rc == UR_OK && ur_orbax_share_is_done(sh, args.process_index)) {
        if (!args.quiet) {
            fprintf(stderr, "unroll: share %d of %d is already complete: not redone\n",
                    args.process_index, args.process_count);
        }
    } else if (rc == UR_OK) {
        char summary[256];
        rc = ur_orbax_share_begin(sh, &args.share_meta_dir, &args.resume_from, err);
        args.share = sh;
        if (rc == UR_OK && args.resume_from > 0 && !args.quiet) {
            fprintf(stderr, "unroll: share %d of %d: continuing a killed run of it (from work "
                            "item %llu)\n",
                    args.process_index, args.process_count,
                    (unsigned long long)args.resume_from);
        }
        if (rc == UR_OK) {
            char what[64];
            snprintf(what, sizeof what, "share %d/%d", args.process_index, args.process_count);
            rc = convert(in_path, ur_orbax_share_step(sh), NULL, kind, s, &args, what, &total,
                         err);
        }
        if (rc == UR_OK) {
            snprintf(summary, sizeof summary,
                     "%.1f MiB of %.1f MiB read (%.1f%%), %.2f s, %d threads, %s\n",
                     (double)total.share_bytes / 1048576.0,
                     (double)total.all_bytes / 1048576.0,
                     total.all_bytes ? 100.0 * (double)total.share_bytes / (double)total.all_bytes
                                     : 100.0,
                     seconds_since(&t0), total.threads, args.process_source);
            rc = ur_orbax_share_mark_done(sh, summary, err);
        }
        if (rc == UR_OK && !args.quiet) {
            fprintf(stderr, "unroll: share %d of %d complete: %s", args.process_index,
                    args.process_count, summary);
        }
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_finish(sh, &interrupted, &published, &missing, &to, err);
    }
    if (rc == UR_OK && !args.quiet) {
        if (published) {
            fprintf(stderr, "unroll: every share complete: merged and wrote %s/0\n", to);
        } else if (missing > 0) {
            fprintf(stderr, "unroll: %d of %d shares still to complete; the last one publishes "
                            "%s%s0\n",
                    missing, args.process_count, s->checkpoint_dir,
                    s->checkpoint_dir[strlen(s->checkpoint_dir) - 1] == '/' ? "" : "/");
        } else {
            fprintf(stderr, "unroll: every share complete; another process is publishing\n");
        }
    }
    ur_free(to);
    ur_orbax_share_close(sh);
    ur_buf_dispose(&text);
    return rc;
}

/* Whether `<checkpoint_dir>.unroll-multi/` holds a run (multi-process, or --resume). */
static int staged_run_exists(const char *checkpoint_dir)
{
    size_t n = strlen(checkpoint_dir);
    char *p;
    int yes;
    while (n > 1 && checkpoint_dir[n - 1] == '/') {
        n--;
    }
    p = ur_malloc(n + sizeof UR_ORBAX_SHARE_SUFFIX + 8);
    if (p == NULL) {
        return 0;
    }
    memcpy(p, checkpoint_dir, n);
    memcpy(p + n, UR_ORBAX_SHARE_SUFFIX "/run.txt", sizeof UR_ORBAX_SHARE_SUFFIX "/run.txt");
    yes = ur_fs_exists(p);
    ur_free(p);
    return yes;
}

static int run(const unroll_args *args, ur_err *err)
{
    unroll_args resumed;
    ur_config *cfg = NULL;
    ur_config_opts co;
    const ur_settings *s;
    ur_orbax_publish *pub = NULL;
    unit_list units;
    const char *in_path, *inputs[2];
    size_t n_inputs = 1;
    char *dest = NULL;
    ur_plan_input kind;
    ur_exec_stats total;
    struct timespec t0;
    int rc;

    memset(&co, 0, sizeof co);
    memset(&total, 0, sizeof total);
    memset(&units, 0, sizeof units);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    co.config_path = args->config;
    co.overrides = args->overrides;
    co.n_overrides = args->n_overrides;
    co.envp = (const char *const *)environ;
    rc = ur_plan_config_load(&cfg, &co, err);
    if (rc < 0) {
        goto out;
    }
    s = ur_plan_config_settings(cfg);

    if (s->load_full_state_path[0] != '\0' && s->load_parameters_path[0] != '\0') {
        rc = ur_err_set(err, UR_EINVAL,
                        "set only one of load_full_state_path and load_parameters_path");
        goto out;
    }
    if (s->load_full_state_path[0] != '\0') {
        in_path = s->load_full_state_path;
        kind = UR_PLAN_INPUT_FULL_STATE;
    } else if (s->load_parameters_path[0] != '\0') {
        in_path = s->load_parameters_path;
        kind = UR_PLAN_INPUT_PARAMS;
    } else {
        rc = ur_err_set(err, UR_EINVAL,
                        "no input: set load_full_state_path=<training checkpoint items dir> "
                        "(or load_parameters_path=)");
        goto out;
    }
    if (!s->enable_checkpointing && !args->dry_run) {
        rc = ur_err_set(err, UR_EINVAL,
                        "enable_checkpointing=false: MaxText would write no checkpoint");
        goto out;
    }
    inputs[0] = in_path;
    if (s->lora_input_adapters_path[0] != '\0') {
        inputs[n_inputs++] = s->lora_input_adapters_path;
    }
    rc = unit_list_make(&units, s->lora_input_adapters_path, err);
    if (rc < 0) {
        goto out;
    }

    if (!args->dry_run && args->process_count <= 1 && !args->resume &&
        staged_run_exists(s->checkpoint_dir)) {
        resumed = *args; /* a staged run of this destination: continue it (README) */
        resumed.resume = 1;
        args = &resumed;
    }
    if ((args->process_count > 1 || args->resume) && !args->dry_run) {
        rc = run_share(args, s, in_path, kind, inputs, n_inputs, err);
        goto out;
    }
    /* Only the units are replaced (checkpoint_dir/0, or base/0 and loras/<id>/...); the
     * lock, the staging directory and the overlap rules: unroll/orbax_publish.h. */
    if (args->dry_run) {
        rc = ur_orbax_publish_check(s->checkpoint_dir, units.units, units.n_units, inputs,
                                    n_inputs, err);
    } else {
        rc = ur_orbax_publish_begin(&pub, s->checkpoint_dir, units.units, units.n_units,
                                    inputs, n_inputs, err);
        if (rc == UR_OK) {
            dest = ur_strdup(ur_orbax_publish_dest(pub));
            rc = dest != NULL ? UR_OK : ur_err_oom(err);
        }
    }
    if (rc == UR_OK) {
        rc = convert(in_path, pub != NULL ? ur_orbax_publish_staged(pub, 0) : NULL,
                     pub != NULL ? ur_orbax_publish_staging(pub) : NULL, kind, s, args, "base",
                     &total, err);
    }
    if (rc == UR_OK && units.n_ids > 0) {
        rc = convert_loras(s->lora_input_adapters_path, &units, pub, s, args, &total, err);
    }
    if (rc == UR_OK && pub != NULL) {
        rc = ur_orbax_publish_commit(pub, &interrupted, err);
        pub = NULL; /* commit frees it either way */
    }
    if (rc == UR_OK && !args->quiet && !args->dry_run) {
        fprintf(stderr,
                "unroll: wrote %s/: %zu tensors from %zu, %.3f GiB read, %.3f GiB written, "
                "%.2f s, %d threads\n",
                dest, total.tensors_out, total.tensors_in, (double)total.bytes_in / 1073741824.0,
                (double)total.bytes_out / 1073741824.0, seconds_since(&t0), total.threads);
    }
out:
    ur_orbax_publish_abort(pub); /* after a failure: staging, lock, created directories */
    unit_list_dispose(&units);
    ur_free(dest);
    ur_plan_config_free(cfg);
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
        status = run(&args, &err) < 0 ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
        if (status != CLI_EXIT_OK && interrupted) {
            /* whatever failed after the signal failed because of it */
            fprintf(stderr, "unroll: interrupted by %s: nothing published, the destination "
                            "is as it was\n",
                    interrupted == SIGINT ? "SIGINT" : interrupted == SIGTERM ? "SIGTERM"
                                                                              : "SIGHUP");
            status = 128 + interrupted;
        } else if (status != CLI_EXIT_OK) {
            status = cli_fail(&err);
        }
    }
    ur_free(args.overrides);
    return status;
}
