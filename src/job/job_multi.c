/* Which run a multi-process or resumable conversion is (run.txt's text), and whether a run
 * is one; the run itself: job_shares.c. */
#define _GNU_SOURCE /* realpath */
#include "job_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The input's identity: its location (an object store's, which is the same on every machine;
 * a local one resolved, unless `portable`), then its values' sizes and versions and its
 * _METADATA's content (ur_job_input_ident). *in_real gets the resolved local path (or the
 * location). */
static int input_identity(ur_buf *out, char in_real[PATH_MAX], const char *input, int portable,
                          ur_err *err)
{
    int rc = UR_OK;
    if (!ur_kvstore_location_can(input, UR_KV_IS_PATH)) {
        size_t n = ur_path_trimmed_len(input);
        if (n >= PATH_MAX) {
            return ur_err_set(err, UR_EINVAL, "%s: the input location is too long", input);
        }
        memcpy(in_real, input, n);
        in_real[n] = '\0';
        rc = ur_buf_printf(out, err, "input %s\n", in_real);
        return rc == UR_OK ? ur_job_input_ident(out, in_real, "", portable, err) : rc;
    }
    if (realpath(input, in_real) == NULL) {
        return ur_err_set_os(err, UR_EIO, errno, input, "cannot resolve");
    }
    if (!portable) {
        rc = ur_buf_printf(out, err, "input %s\n", in_real);
    }
    return rc == UR_OK ? ur_job_input_ident(out, in_real, "", portable, err) : rc;
}

int ur_job_multi_run_text(ur_buf *out, int count, uint64_t slab_budget, const char *input,
                          const char *config, const char *const *overrides, size_t n_overrides,
                          int portable, ur_err *err)
{
    char in_real[PATH_MAX], cfg_real[PATH_MAX];
    int rc;
    if (realpath(config, cfg_real) == NULL) {
        return ur_err_set_os(err, UR_EIO, errno, config, "cannot resolve");
    }
    if (portable) { /* the same text on every machine */
        rc = ur_buf_printf(out, err,
                           "unroll multi-process run 1 (object store)\nprocesses %d\n"
                           "slab_budget %llu\n",
                           count, (unsigned long long)slab_budget);
    } else {
        rc = ur_buf_printf(out, err,
                           "unroll multi-process run 1\nprocesses %d\nslab_budget %llu\n", count,
                           (unsigned long long)slab_budget);
    }
    if (rc == UR_OK) {
        rc = input_identity(out, in_real, input, portable, err);
    }
    /* the config by its content (edited between two processes, it is another run), and
     * where this machine has it unless portable */
    if (rc == UR_OK && !portable) {
        rc = ur_buf_printf(out, err, "config %s\n", cfg_real);
    }
    if (rc == UR_OK) {
        rc = ur_job_file_ident(out, "config", cfg_real, err);
    }
    for (size_t i = 0; i < n_overrides && rc == UR_OK; i++) {
        const char *eq = strchr(overrides[i], '=');
        char v_real[PATH_MAX];
        if (portable && eq != NULL && realpath(eq + 1, v_real) != NULL &&
            strcmp(v_real, in_real) == 0) {
            /* the input, wherever this machine mounts it (its content is fingerprinted) */
            rc = ur_buf_printf(out, err, "override %.*s=<input>\n", (int)(eq - overrides[i]),
                               overrides[i]);
        } else {
            rc = ur_buf_printf(out, err, "override %s\n", overrides[i]);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(out, "", 1, err);
        out->len--;
    }
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
    p = ur_malloc(n + sizeof UR_JOB_SHARE_SUFFIX + 8);
    if (p == NULL) {
        return 0;
    }
    memcpy(p, checkpoint_dir, n);
    memcpy(p + n, UR_JOB_SHARE_SUFFIX "/run.txt", sizeof UR_JOB_SHARE_SUFFIX "/run.txt");
    yes = ur_fs_exists(p);
    ur_free(p);
    return yes;
}

int ur_job_multi_wanted(const ur_run_opts *o, const ur_settings *s)
{
    if (o->dry_run) {
        return 0;
    }
    /* a staged run of this destination is continued (docs/multi-process.md) */
    return o->process_count > 1 || o->resume || staged_run_exists(s->checkpoint_dir);
}
