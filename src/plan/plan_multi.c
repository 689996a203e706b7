/* A share of a multi-process conversion, or a resumable single-process one (share 0 of 1):
 * which run this is (run.txt), this process's share converted into its own database in the
 * staging directory the processes share, marked done, and the finish by the last one
 * (unroll/orbax_share.h; the entry point is ur_plan_run, plan_run_impl.h). */
#define _GNU_SOURCE /* realpath */
#include "plan_run_impl.h"

#include "unroll/alloc.h"
#include "unroll/crc32c.h"
#include "unroll/fs.h"
#include "unroll/orbax_publish.h"
#include "unroll/orbax_share_remote.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CRC-32C and size of `dir/name`, or "none" when it does not exist. */
static int fingerprint_file(ur_buf *out, const char *dir, const char *name, ur_err *err)
{
    char *p = ur_path_join(dir, name);
    ur_buf b;
    int rc;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    ur_buf_init(&b, 0);
    if (!ur_fs_exists(p)) {
        rc = ur_buf_printf(out, err, "input_%s none\n", name);
    } else {
        rc = ur_fs_read_file(&b, p, (size_t)1 << 30, err);
        if (rc == UR_OK) {
            rc = ur_buf_printf(out, err, "input_%s crc32c=%08x size=%zu\n", name,
                               ur_crc32c(0, b.data, b.len), b.len);
        }
    }
    ur_buf_dispose(&b);
    ur_free(p);
    return rc;
}

int ur_plan_multi_run_text(ur_buf *out, int count, uint64_t slab_budget, const char *input,
                           const char *config, const char *const *overrides, size_t n_overrides,
                           int portable, ur_err *err)
{
    char in_real[PATH_MAX], cfg_real[PATH_MAX];
    int rc;
    if (realpath(input, in_real) == NULL) {
        return ur_err_set_os(err, UR_EIO, errno, input, "cannot resolve");
    }
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
                           "unroll multi-process run 1\nprocesses %d\nslab_budget %llu\n"
                           "input %s\n",
                           count, (unsigned long long)slab_budget, in_real);
    }
    /* the input's identity: its top-level manifest and tree metadata */
    if (rc == UR_OK) {
        rc = fingerprint_file(out, in_real, "manifest.ocdbt", err);
    }
    if (rc == UR_OK) {
        rc = fingerprint_file(out, in_real, "_METADATA", err);
    }
    if (rc == UR_OK && portable) {
        char *dir = ur_strdup(cfg_real), *slash = dir != NULL ? strrchr(dir, '/') : NULL;
        if (slash == NULL) {
            rc = ur_err_oom(err);
        } else {
            *slash = '\0';
            rc = ur_buf_append(out, "config_", 7, err); /* "config_input_<name> crc32c=..." */
            if (rc == UR_OK) {
                rc = fingerprint_file(out, dir[0] != '\0' ? dir : "/", slash + 1, err);
            }
        }
        ur_free(dir);
    } else if (rc == UR_OK) {
        rc = ur_buf_printf(out, err, "config %s\n", cfg_real);
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

int ur_plan_multi_wanted(const ur_run_opts *o, const ur_settings *s)
{
    if (o->dry_run) {
        return 0;
    }
    /* a staged run of this destination is continued (README) */
    return o->process_count > 1 || o->resume || staged_run_exists(s->checkpoint_dir);
}

/* The slab budget of a share: the same in every process of a run, whatever its thread
 * count, since the output chunking follows it. */
static uint64_t share_slab_budget(const ur_run_opts *o)
{
    return o->memory_limit ? o->memory_limit / (uint64_t)(o->threads > 0 ? o->threads : 1)
                           : (uint64_t)128 << 20;
}

static void note(const ur_run_opts *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(const ur_run_opts *o, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    if (o->on_note == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->on_note(o->ctx, line);
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Convert this process's share (not done yet) and mark it done. */
/* What every process of a run must be given alike, local or object-store output. */
static int check_settings(const ur_run_opts *o, const ur_settings *s, ur_err *err)
{
    if (s->lora_input_adapters_path[0] != '\0') {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "lora_input_adapters_path: a multi-process run converts one checkpoint");
    }
    if (s->run_name[0] == '\0') {
        return ur_err_set(err, UR_EINVAL,
                          "a multi-process run needs run_name= (the default "
                          "names the date, which may differ between processes)");
    }
    if (o->config.config_path == NULL) {
        return ur_err_set(err, UR_EINVAL, "a multi-process run needs a config file");
    }
    return UR_OK;
}

static int run_my_share(ur_orbax_share *sh, ur_run_report *rep, const ur_run_opts *o,
                        const ur_settings *s, const char *in_path, ur_plan_input kind, char *line,
                        size_t line_size, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    ur_run_share rs;
    struct timespec t0;
    char what[64], summary[256];
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(&rs, 0, sizeof rs);
    rs.share = sh;
    rs.count = count;
    rs.index = index;
    rs.slab_budget = share_slab_budget(o);
    rs.commit_every = o->commit_every ? o->commit_every : UR_RUN_COMMIT_EVERY;
    rc = ur_orbax_share_begin(sh, &rs.meta_dir, &rs.resume_from, err);
    if (rc < 0) {
        return rc;
    }
    if (rs.resume_from > 0) {
        note(o, "share %d of %d: continuing a killed run of it (from work item %llu)", index,
             count, (unsigned long long)rs.resume_from);
    }
    snprintf(what, sizeof what, "share %d/%d", index, count);
    rc = ur_plan_run_convert(in_path, ur_orbax_share_step(sh), NULL, kind, s, o, &rs, what,
                             &rep->total, err);
    if (rc < 0) {
        return rc;
    }
    snprintf(summary, sizeof summary, "%.1f MiB of %.1f MiB read (%.1f%%), %.2f s, %d threads, %s",
             (double)rep->total.share_bytes / 1048576.0, (double)rep->total.all_bytes / 1048576.0,
             rep->total.all_bytes
                 ? 100.0 * (double)rep->total.share_bytes / (double)rep->total.all_bytes
                 : 100.0,
             seconds_since(&t0), rep->total.threads,
             o->process_source != NULL ? o->process_source : "single process");
    /* the marker keeps the summary as one line */
    snprintf(line, line_size, "%s\n", summary);
    rc = ur_orbax_share_mark_done(sh, line, err);
    if (rc == UR_OK) {
        note(o, "share %d of %d complete: %s", index, count, summary);
    }
    return rc;
}

int ur_plan_multi_run(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                      const char *in_path, ur_plan_input kind, const char *const *inputs,
                      size_t n_inputs, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    ur_orbax_share *sh = NULL;
    ur_buf text;
    char *to = NULL;
    int rc, published = 0, missing = 0;

    rep->share = 1;
    rc = check_settings(o, s, err);
    if (rc < 0) {
        return rc;
    }
    ur_buf_init(&text, 0);
    rc = ur_orbax_publish_check(s->checkpoint_dir, (const char *const[]){"0"}, 1, inputs, n_inputs,
                                err);
    if (rc == UR_OK) {
        rc = ur_plan_multi_run_text(&text, count, share_slab_budget(o), in_path,
                                    o->config.config_path, o->config.overrides,
                                    o->config.n_overrides, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_open(&sh, s->checkpoint_dir, count, index, (const char *)text.data,
                                 err);
    }
    if (rc == UR_OK && ur_orbax_share_is_done(sh, index)) {
        note(o, "share %d of %d is already complete: not redone", index, count);
    } else if (rc == UR_OK) {
        char line[260];
        rc = run_my_share(sh, rep, o, s, in_path, kind, line, sizeof line, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_finish(sh, o->cancel, &published, &missing, &to, err);
    }
    if (rc == UR_OK) {
        if (published) {
            note(o, "every share complete: merged and wrote %s/0", to);
            rep->dest = to;
            to = NULL;
        } else if (missing > 0) {
            note(o, "%d of %d shares still to complete; the last one publishes %s%s0", missing,
                 count, s->checkpoint_dir,
                 s->checkpoint_dir[strlen(s->checkpoint_dir) - 1] == '/' ? "" : "/");
        } else {
            note(o, "every share complete; another process is publishing");
        }
    }
    ur_free(to);
    ur_orbax_share_close(sh);
    ur_buf_dispose(&text);
    return rc;
}

/* ---- an object-store output (unroll/orbax_share_remote.h) ---- */

/* Length of `url` without its trailing slashes (keeping "/" itself). */
static size_t trimmed_len(const char *url)
{
    size_t n = strlen(url);
    while (n > 1 && url[n - 1] == '/') {
        n--;
    }
    return n;
}

/* This process's share converted in a private local staging tree ($TMPDIR), then uploaded
 * under the step prefix `step`. */
static int convert_and_upload(ur_orbax_rshare *rs, ur_run_report *rep, const ur_run_opts *o,
                              const ur_settings *s, const char *in_path, ur_plan_input kind,
                              ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    char *root = NULL;
    char *dest = NULL, *db = NULL, *meta = NULL;
    ur_orbax_share *sh = NULL;
    char line[260];
    ur_buf local_text;
    int rc;

    rc = ur_fs_make_temp_dir(&root, "unroll-share", "the staging directory", err);
    if (rc < 0) {
        return rc;
    }
    dest = ur_path_join(root, "checkpoints");
    if (dest != NULL) {
        db = ur_path_joinf(
            root, "checkpoints" UR_ORBAX_SHARE_SUFFIX "/step/items/ocdbt.process_%d", index);
        meta = ur_path_joinf(root, "checkpoints" UR_ORBAX_SHARE_SUFFIX "/shares/%d", index);
    }
    /* the private staging tree is a local run's (run.txt with this machine's paths; the text
     * in the store is the same on every machine) */
    ur_buf_init(&local_text, 0);
    rc = db != NULL && meta != NULL
             ? ur_plan_multi_run_text(&local_text, count, share_slab_budget(o), in_path,
                                      o->config.config_path, o->config.overrides,
                                      o->config.n_overrides, 0, err)
             : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_orbax_share_open(&sh, dest, count, index, (const char *)local_text.data, err);
    }
    if (rc == UR_OK) {
        rc = run_my_share(sh, rep, o, s, in_path, kind, line, sizeof line, err);
    }
    if (rc == UR_OK) {
        note(o, "share %d of %d: uploading it to %.*s", index, count,
             (int)trimmed_len(s->checkpoint_dir), s->checkpoint_dir);
        rc = ur_orbax_rshare_upload(rs, db, meta, line, o->cancel, err);
    }
    ur_orbax_share_close(sh);
    ur_buf_dispose(&local_text);
    (void)ur_fs_remove_tree(root, NULL);
    ur_free(root);
    ur_free(dest);
    ur_free(db);
    ur_free(meta);
    return rc;
}

int ur_plan_multi_run_remote(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                             const char *in_path, ur_plan_input kind, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    ur_orbax_rshare *rs = NULL;
    ur_buf text;
    char *step = NULL;
    int rc, published = 0, missing = 0, done = 0;

    rep->share = 1;
    if (count < 2) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "%s: --resume applies to local output only (a run into an object "
                          "store uploads only what is complete)",
                          s->checkpoint_dir);
    }
    rc = check_settings(o, s, err);
    if (rc < 0) {
        return rc;
    }
    if (o->replace) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "--replace with a multi-process run into an object store: delete "
                          "%s/0 first (no process may clear what the others write)",
                          s->checkpoint_dir);
    }
    ur_buf_init(&text, 0);
    step = ur_path_join(s->checkpoint_dir, "0");
    rc = step != NULL ? ur_plan_multi_run_text(&text, count, share_slab_budget(o), in_path,
                                               o->config.config_path, o->config.overrides,
                                               o->config.n_overrides, 1, err)
                      : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_orbax_rshare_open(&rs, step, count, index, (const char *)text.data, &published,
                                  err);
    }
    if (rc == UR_OK && published) {
        note(o, "%s is already published: nothing to do", step);
        goto out;
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rshare_is_done(rs, index, &done, err);
    }
    if (rc == UR_OK && done) {
        note(o, "share %d of %d is already complete: not redone", index, count);
    } else if (rc == UR_OK) {
        rc = convert_and_upload(rs, rep, o, s, in_path, kind, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rshare_finish(rs, o->cancel, &published, &missing, err);
    }
    if (rc == UR_OK) {
        if (published && ur_orbax_rshare_took_over(rs)) {
            note(o,
                 "every share complete: took over the finish an earlier attempt of process "
                 "index %d left, merged and wrote %s",
                 index, step);
            rep->dest = ur_strdup(s->checkpoint_dir);
        } else if (published) {
            note(o, "every share complete: merged and wrote %s", step);
            rep->dest = ur_strdup(s->checkpoint_dir);
        } else if (missing > 0) {
            note(o, "%d of %d shares still to complete; the last one publishes %s", missing, count,
                 step);
        } else {
            note(o, "every share complete; another process is publishing");
        }
    }
out:
    ur_orbax_rshare_close(rs);
    ur_free(step);
    ur_buf_dispose(&text);
    return rc;
}
