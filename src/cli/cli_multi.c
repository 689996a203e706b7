/* Multi-process conversion on the command line: which process this is (options, or the
 * environment of the launcher), `unroll merge`, and the state of a staged run for `ls` and
 * `inspect`. What identifies the run (run.txt) and the run itself: src/job/job_multi.c,
 * job_shares.c. The protocol itself: unroll/job_share.h. */
#include "cli.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/job.h"
#include "unroll/job_share.h"
#include "unroll/job_share_remote.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A non-negative decimal integer from the environment variable `name`, or -1 when it is
 * unset; -2 when it is set to something else. */
static long env_int(const char *name)
{
    const char *v = getenv(name);
    char *end;
    long n;
    if (v == NULL || *v == '\0') {
        return -1;
    }
    errno = 0;
    n = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < 0 || n > INT_MAX) {
        return -2;
    }
    return n;
}

/* The launchers' variables, in the order they are looked at: (index, count) pairs. A Slurm
 * array's task ids start at SLURM_ARRAY_TASK_MIN (--array=1-4), so the index is counted from
 * there. Kubernetes Indexed Jobs give only the index: the count is --process-count. */
static const struct {
    const char *index, *count, *origin;
} launchers[] = {
    {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"},
    {"SLURM_PROCID", "SLURM_NTASKS", NULL},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL},
    {"PMI_RANK", "PMI_SIZE", NULL},
    {"JOB_COMPLETION_INDEX", NULL, NULL},
};

int cli_multi_resolve(int opt_count, int opt_index, int *count, int *index, const char **source)
{
    *count = 1;
    *index = 0;
    *source = "single process";
    if (opt_index >= 0 && opt_count < 1) {
        return cli_usage_error("--process-index needs --process-count");
    }
    if (opt_count == 1) {
        return -1; /* explicitly one process, whatever the environment says */
    }
    if (opt_index >= 0) {
        if (opt_index >= opt_count) {
            return cli_usage_error("--process-index %d is not below --process-count %d", opt_index,
                                   opt_count);
        }
        *count = opt_count;
        *index = opt_index;
        *source = "--process-count/--process-index";
        return -1;
    }
    for (size_t i = 0; i < sizeof launchers / sizeof *launchers; i++) {
        long ix = env_int(launchers[i].index), n, origin = 0;
        if (ix == -1) {
            continue;
        }
        n = launchers[i].count != NULL ? env_int(launchers[i].count) : opt_count;
        if (launchers[i].origin != NULL && env_int(launchers[i].origin) >= 0) {
            origin = env_int(launchers[i].origin);
        }
        if (ix < 0 || n == -2) {
            return cli_usage_error("%s or %s is not a number", launchers[i].index,
                                   launchers[i].count != NULL ? launchers[i].count : "");
        }
        if (n < 1) {
            if (launchers[i].count == NULL) {
                return cli_usage_error("%s is set: give the process count with "
                                       "--process-count",
                                       launchers[i].index);
            }
            continue;
        }
        if (opt_count > 0 && n != opt_count) {
            return cli_usage_error("--process-count %d but %s=%ld", opt_count, launchers[i].count,
                                   n);
        }
        if (ix < origin || ix - origin >= n || n > UR_JOB_SHARE_MAX) {
            return cli_usage_error("%s=%ld is not an index of %ld processes", launchers[i].index,
                                   ix, n);
        }
        *count = (int)n;
        *index = (int)(ix - origin);
        *source = launchers[i].index;
        return -1;
    }
    if (opt_count > 1) {
        return cli_usage_error("--process-count %d needs --process-index (or a launcher's "
                               "SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, "
                               "JOB_COMPLETION_INDEX)",
                               opt_count);
    }
    return -1;
}

typedef struct {
    char **names;
    size_t n, cap;
    long max;
} process_dirs;

/* ur_fs_list_names callback: the names `ocdbt.process_<i>`, the largest i in max. */
static int collect_process_dir(void *ctx, const char *name)
{
    process_dirs *p = ctx;
    char *end, **nn;
    long i;
    if (strncmp(name, "ocdbt.process_", 14) != 0) {
        return 0;
    }
    errno = 0;
    i = strtol(name + 14, &end, 10);
    if (errno != 0 || *end != '\0' || end == name + 14 || i < 0) {
        return 0;
    }
    nn = ur_grow(p->names, &p->cap, p->n, sizeof *nn, 16);
    if (nn == NULL) {
        return UR_ENOMEM;
    }
    p->names = nn;
    p->names[p->n] = ur_strdup(name);
    if (p->names[p->n] == NULL) {
        return UR_ENOMEM;
    }
    p->n++;
    p->max = i > p->max ? i : p->max;
    return 0;
}

/* `ocdbt.process_<i>` subdirectories of dir, sorted by i. */
static int list_process_dirs(const char *dir, char ***names_out, size_t *n_out, ur_err *err)
{
    process_dirs p = {NULL, 0, 0, -1};
    int rc = ur_fs_list_names(dir, "directory", collect_process_dir, &p, err);
    char **names = p.names;
    size_t n = p.n;
    long max = p.max;

    if (rc == UR_ENOMEM) {
        rc = ur_err_oom(err);
    }
    /* numeric order */
    for (size_t a = 1; a < n; a++) {
        for (size_t b = a;
             b > 0 && strtol(names[b - 1] + 14, NULL, 10) > strtol(names[b] + 14, NULL, 10); b--) {
            char *t = names[b];
            names[b] = names[b - 1];
            names[b - 1] = t;
        }
    }
    if (rc == UR_OK && n == 0) {
        rc = ur_err_set(err, UR_EINVAL, "%s: no ocdbt.process_<i>/ databases to merge", dir);
    }
    if (rc == UR_OK && (size_t)(max + 1) != n) {
        rc = ur_err_set(err, UR_EIO,
                        "%s: ocdbt.process_0 .. ocdbt.process_%ld are not all there "
                        "(%zu found)",
                        dir, max, n);
    }
    if (rc < 0) {
        for (size_t i = 0; i < n; i++) {
            ur_free(names[i]);
        }
        ur_free(names);
        return rc;
    }
    *names_out = names;
    *n_out = n;
    return UR_OK;
}

/* `unroll merge --ocdbt DIR`: Orbax's merge of DIR/ocdbt.process_<i>/ into DIR's top-level
 * database, nothing else. */
static int merge_ocdbt_only(const char *dir, ur_err *err)
{
    char **names = NULL;
    size_t n = 0;
    ur_ocdbt_write_opts o;
    int rc = list_process_dirs(dir, &names, &n, err);
    if (rc < 0) {
        return rc;
    }
    ur_ocdbt_write_opts_init(&o);
    rc = ur_ocdbt_merge(dir, (const char *const *)names, n, &o, err);
    for (size_t i = 0; i < n; i++) {
        ur_free(names[i]);
    }
    ur_free(names);
    return rc;
}

static volatile sig_atomic_t merge_interrupted;

static void on_merge_signal(int sig)
{
    merge_interrupted = sig;
}

static void merge_usage(FILE *f)
{
    fputs("usage: unroll merge [-q] <checkpoint_dir>\n"
          "       unroll merge --ocdbt <item_dir>\n"
          "\n"
          "Finish a multi-process conversion (unroll --process-count N ...) staged for\n"
          "<checkpoint_dir> (<base_output_directory>/<run_name>/checkpoints, or its\n"
          "checkpoints.unroll-multi staging directory): merge every process's OCDBT database\n"
          "into the top-level one, write the metadata and publish <checkpoint_dir>/0. Refused\n"
          "while a share is not complete. The last process of a run does this by itself.\n"
          "<checkpoint_dir> may be s3:// or gs://: the run staged under <checkpoint_dir>/0 is\n"
          "finished there (taking over the claim of a finisher that died).\n"
          "--ocdbt: only merge <item_dir>/ocdbt.process_<i>/ into <item_dir>'s top-level\n"
          "database, as Orbax's merge_ocdbt_per_process_files does.\n"
          "\n"
          "exit status: 0 merged, 1 internal error, 2 bad command line or no staged run,\n"
          "3 a share is missing or a file could not be read or written, 4 damaged shares\n",
          f);
}

int cli_cmd_merge(int argc, char **argv)
{
    const char *dir = NULL;
    int ocdbt = 0, quiet = 0, remote, rc;
    char *to = NULL;
    ur_err err;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            merge_usage(stdout);
            return CLI_EXIT_OK;
        } else if (strcmp(argv[i], "--ocdbt") == 0) {
            ocdbt = 1;
        } else if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("merge: unknown option '%s'", argv[i]);
        } else if (dir == NULL) {
            dir = argv[i];
        } else {
            return cli_usage_error("merge: one directory only");
        }
    }
    if (dir == NULL) {
        merge_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    ur_err_clear(&err);
    signal(SIGINT, on_merge_signal);
    signal(SIGTERM, on_merge_signal);
    signal(SIGHUP, on_merge_signal);
    remote = !ur_job_run_by_rename(dir);
    if (ocdbt) {
        rc = merge_ocdbt_only(dir, &err);
    } else if (remote) { /* a run into an object store: unroll/job_share_remote.h */
        rc = ur_job_rshare_merge(dir, &merge_interrupted, &to, &err);
    } else {
        rc = ur_job_share_merge(dir, &merge_interrupted, &to, &err);
    }
    if (rc < 0) {
        ur_free(to);
        if (merge_interrupted) {
            return 128 + merge_interrupted;
        }
        return cli_fail(&err);
    }
    if (!quiet) {
        fprintf(stderr, "unroll: merged %s%s%s\n", ocdbt ? dir : "", to != NULL ? to : "",
                to != NULL && !remote ? "/0" : "");
    }
    ur_free(to);
    return CLI_EXIT_OK;
}

int cli_multi_show_status(const char *path)
{
    size_t n = strlen(path), sl = strlen(UR_JOB_SHARE_SUFFIX);
    char *staged;
    ur_buf out;
    ur_err err;
    int rc, is_staging;

    if (!ur_job_run_by_rename(path)) {
        int in_store = 0;
        ur_err_clear(&err);
        ur_buf_init(&out, 0);
        rc = ur_job_rshare_status(path, &out, &in_store, &err);
        if (rc == UR_OK && in_store) {
            fwrite(out.data, 1, out.len, stdout);
        }
        ur_buf_dispose(&out);
        if (rc == UR_EIO || rc == UR_ENOMEM) {
            /* the store did not answer: the ordinary command would wait out the same budget */
            return cli_fail(&err);
        }
        /* not a staged run (or one the store cannot tell about): the ordinary command */
        return rc == UR_OK && in_store ? CLI_EXIT_OK : -1;
    }
    while (n > 1 && path[n - 1] == '/') {
        n--;
    }
    is_staging = n > sl && memcmp(path + n - sl, UR_JOB_SHARE_SUFFIX, sl) == 0;
    staged = ur_malloc(n + sl + 1);
    if (staged == NULL) {
        return -1;
    }
    memcpy(staged, path, n);
    memcpy(staged + n, UR_JOB_SHARE_SUFFIX, sl + 1);
    /* a staging directory, or a destination not written yet whose run is staged */
    if (!(is_staging && ur_fs_is_dir(path)) && !(ur_fs_is_dir(staged) && !ur_fs_exists(path))) {
        ur_free(staged);
        return -1;
    }
    ur_free(staged);
    ur_err_clear(&err);
    ur_buf_init(&out, 0);
    rc = ur_job_share_status(path, &out, &err);
    if (rc == UR_OK) {
        fwrite(out.data, 1, out.len, stdout);
    }
    ur_buf_dispose(&out);
    return rc < 0 ? cli_fail(&err) : CLI_EXIT_OK;
}
