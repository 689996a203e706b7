/* A share of a multi-process conversion, or a resumable single-process one (share 0 of 1):
 * which run this is (run.txt), this process's share converted into its own database in the
 * staging directory the processes share, marked done, and the finish by the last one
 * (unroll/orbax_share.h; the entry point is ur_plan_run, plan_run_impl.h). */
#define _GNU_SOURCE /* realpath */
#include "plan_run_impl.h"

#include "unroll/alloc.h"
#include "unroll/crc32c.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/orbax_publish.h"
#include "unroll/orbax_share_remote.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The input's identity: its location (an object store's, which is the same on every machine;
 * a local one resolved, unless `portable`), then its values' sizes and versions and its
 * _METADATA's content (ur_plan_input_ident). *in_real gets the resolved local path (or the
 * location). */
static int input_identity(ur_buf *out, char in_real[PATH_MAX], const char *input, int portable,
                          ur_err *err)
{
    int rc = UR_OK;
    if (ur_kvstore_location_is_remote(input)) {
        size_t n = strlen(input);
        while (n > 1 && input[n - 1] == '/') {
            n--;
        }
        if (n >= PATH_MAX) {
            return ur_err_set(err, UR_EINVAL, "%s: the input location is too long", input);
        }
        memcpy(in_real, input, n);
        in_real[n] = '\0';
        rc = ur_buf_printf(out, err, "input %s\n", in_real);
        return rc == UR_OK ? ur_plan_input_ident(out, in_real, "", portable, err) : rc;
    }
    if (realpath(input, in_real) == NULL) {
        return ur_err_set_os(err, UR_EIO, errno, input, "cannot resolve");
    }
    if (!portable) {
        rc = ur_buf_printf(out, err, "input %s\n", in_real);
    }
    return rc == UR_OK ? ur_plan_input_ident(out, in_real, "", portable, err) : rc;
}

int ur_plan_multi_run_text(ur_buf *out, int count, uint64_t slab_budget, const char *input,
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
        rc = ur_plan_file_ident(out, "config", cfg_real, err);
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
    /* a staged run of this destination is continued (docs/multi-process.md) */
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

/* What every process of a run must be given alike, local or object-store output. */
static int check_settings(const ur_run_opts *o, const ur_settings *s, ur_err *err)
{
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

/* The share's summary line (into line, kept in its done marker), and the marker. */
static int mark_share_done(ur_orbax_share *sh, ur_run_report *rep, const ur_run_opts *o,
                           const struct timespec *t0, char *line, size_t line_size, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    char summary[256];
    int rc;
    snprintf(summary, sizeof summary, "%.1f MiB of %.1f MiB read (%.1f%%), %.2f s, %d threads, %s",
             (double)rep->total.share_bytes / 1048576.0, (double)rep->total.all_bytes / 1048576.0,
             rep->total.all_bytes
                 ? 100.0 * (double)rep->total.share_bytes / (double)rep->total.all_bytes
                 : 100.0,
             seconds_since(t0), rep->total.threads,
             o->process_source != NULL ? o->process_source : "single process");
    /* the marker keeps the summary as one line */
    snprintf(line, line_size, "%s\n", summary);
    rc = ur_orbax_share_mark_done(sh, line, err);
    if (rc == UR_OK) {
        note(o, "share %d of %d complete: %s", index, count, summary);
    }
    return rc;
}

/* The run's local text (ur_plan_multi_run_text, not portable) taken again once the share is
 * converted, against `run_text`, the one it started from (which may go on with
 * "object-store run:\n..."): UR_EINVAL naming the change when the input (or the config) changed
 * while the share read it. A share of values from two inputs is never marked done, and a
 * rerun is refused by run.txt until the run starts over. */
static int same_input(const ur_run_opts *o, const char *in_path, const char *run_text, int index,
                      int count, ur_err *err)
{
    const char *cut = strstr(run_text, "object-store run:\n");
    size_t n = cut != NULL ? (size_t)(cut - run_text) : strlen(run_text);
    char what[512];
    char *was = NULL;
    ur_buf now;
    int rc;
    ur_buf_init(&now, 0);
    rc = ur_plan_multi_run_text(&now, count, share_slab_budget(o), in_path, o->config.config_path,
                                o->config.overrides, o->config.n_overrides, 0, err);
    if (rc == UR_OK && (now.len == n && memcmp(now.data, run_text, n) == 0)) {
        ur_buf_dispose(&now);
        return UR_OK;
    }
    was = rc == UR_OK ? ur_strndup(run_text, n) : NULL;
    if (rc == UR_OK && was == NULL) {
        rc = ur_err_oom(err);
    }
    if (rc == UR_OK && !ur_orbax_run_change(was, (const char *)now.data, what, sizeof what)) {
        snprintf(what, sizeof what, "its identity");
    }
    if (rc == UR_OK) {
        rc = ur_err_set(err, UR_EINVAL,
                        "%s: input changed while share %d/%d read it: %s; the share is not "
                        "marked done, and its run is refused from now on (remove its staging to "
                        "start over)",
                        in_path, index, count, what);
    }
    ur_free(was);
    ur_buf_dispose(&now);
    return rc;
}

/* Convert this process's share (not done yet) and mark it done; on_commit (NULL: none) as
 * ur_run_share's. `run_text`: the local run text the share was opened with, taken again once
 * the share is converted (same_input). */
static int run_my_share(ur_orbax_share *sh, const char *run_text, ur_run_report *rep,
                        const ur_run_opts *o, const ur_settings *s, const char *in_path,
                        ur_plan_input kind, int (*on_commit)(void *, uint64_t, ur_err *),
                        void *commit_ctx, char *line, size_t line_size, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    ur_run_share rs;
    struct timespec t0;
    char what[64];
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(&rs, 0, sizeof rs);
    rs.share = sh;
    rs.count = count;
    rs.index = index;
    rs.slab_budget = share_slab_budget(o);
    rs.commit_every = o->commit_every ? o->commit_every : UR_RUN_COMMIT_EVERY;
    rs.on_commit = on_commit;
    rs.commit_ctx = commit_ctx;
    rc = ur_orbax_share_begin(sh, &rs.meta_dir, &rs.resume_from, err);
    if (rc < 0) {
        return rc;
    }
    if (rs.resume_from > 0) {
        note(o, "share %d of %d: continuing a killed run of it (from work item %llu)", index,
             count, (unsigned long long)rs.resume_from);
    }
    snprintf(what, sizeof what, "share %d/%d", index, count);
    rc = ur_plan_run_convert(in_path, ur_orbax_share_step(sh), NULL, NULL, kind, s, o, &rs, what,
                             &rep->total, err);
    if (rc == UR_OK) {
        rc = same_input(o, in_path, run_text, index, count, err);
    }
    return rc < 0 ? rc : mark_share_done(sh, rep, o, &t0, line, line_size, err);
}

/* ---- a LoRA run: the base and every adapter, one cut over all of them ---- */

/* run.txt's lines for the adapters: each one's identity as the input's (ur_plan_input_ident),
 * so a rerun over changed adapters is refused. */
static int lora_run_text(ur_buf *out, const ur_plan_units *u, const ur_settings *s, int portable,
                         ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < u->n_ids && rc == UR_OK; i++) {
        char *items = ur_path_joinf(s->lora_input_adapters_path, "%s/0/items", u->ids[i]);
        char *tag = ur_path_joinf("loras", "%s/", u->ids[i]);
        rc = items != NULL && tag != NULL ? ur_buf_printf(out, err, "lora %s\n", u->ids[i])
                                          : ur_err_oom(err);
        if (rc == UR_OK) {
            rc = ur_plan_input_ident(out, items, tag, portable, err);
        }
        ur_free(items);
        ur_free(tag);
    }
    if (rc == UR_OK) { /* NUL-terminated, as ur_plan_multi_run_text leaves it */
        rc = ur_buf_append(out, "", 1, err);
        out->len--;
    }
    return rc;
}

/* The input of step unit k of a LoRA run (0: the base; 1 + 2i: adapter i). */
/* run.txt of a LoRA run: the run's identity (ur_plan_multi_run_text) and its units. */
static int lora_multi_text(ur_buf *text, const ur_plan_units *u, const ur_run_opts *o,
                           const ur_settings *s, const char *in_path, int count, int remote,
                           ur_err *err)
{
    int rc = ur_plan_multi_run_text(text, count, share_slab_budget(o), in_path,
                                    o->config.config_path, o->config.overrides,
                                    o->config.n_overrides, remote, err);
    return rc == UR_OK ? lora_run_text(text, u, s, remote, err) : rc;
}

static char *lora_input(const ur_plan_units *u, size_t k, const ur_settings *s,
                        const char *in_path)
{
    return k == 0 ? ur_strdup(in_path)
                  : ur_path_joinf(s->lora_input_adapters_path, "%s/0/items", u->ids[(k - 1) / 2]);
}

/* The decoded input bytes of `in`'s plan that the cut counts (ur_plan_exec_input_bytes). */
static int unit_bytes(const char *in, ur_plan_input kind, const ur_settings *s, uint64_t *bytes,
                      ur_err *err)
{
    ur_orbax_ckpt *ck = NULL;
    ur_plan_leaves leaves = {0};
    ur_plan *plan = NULL;
    int rc = ur_orbax_ckpt_open(&ck, in, 0, err);
    if (rc == UR_OK) {
        rc = ur_plan_orbax_leaves(&leaves, ck, err);
    }
    if (rc == UR_OK) {
        rc = ur_plan_build(&plan, leaves.leaves, leaves.n, s, kind, err);
        if (rc < 0) {
            ur_err_wrap(err, "%s", in);
        }
    }
    if (rc == UR_OK) {
        rc = ur_plan_exec_input_bytes(plan, ck, bytes, err);
    }
    ur_plan_free(plan);
    ur_plan_orbax_leaves_dispose(&leaves);
    ur_orbax_ckpt_close(ck);
    return rc;
}

/* adapter_config.json of unit k (2 + 2i) staged where the finish publishes it from: a
 * private copy renamed into place (every process stages the same bytes). */
static int stage_adapter_config(ur_orbax_share *sh, const ur_plan_units *u, size_t k,
                                const ur_settings *s, int index, ur_err *err)
{
    const char *to = ur_orbax_share_unit_path(sh, k);
    char *from = ur_path_joinf(s->lora_input_adapters_path, "%s/adapter_config.json",
                               u->ids[(k - 2) / 2]);
    char *tmp = ur_malloc(strlen(to) + 32);
    int rc = from != NULL && tmp != NULL ? UR_OK : ur_err_oom(err);
    if (rc == UR_OK && !ur_fs_exists(to)) {
        snprintf(tmp, strlen(to) + 32, "%s.%d.tmp", to, index);
        rc = ur_plan_run_copy_file(from, tmp, err);
        if (rc == UR_OK && rename(tmp, to) != 0) {
            rc = ur_err_set_os(err, UR_EIO, errno, to, "cannot rename %s into place", tmp);
        }
    }
    ur_free(from);
    ur_free(tmp);
    return rc;
}

/* This process's share of every step unit (the base, then each adapter), each unit's part
 * resumed or skipped on its own, the adapter configs staged, the share marked done. The cut
 * is over the units' input bytes back to back, so the base's and the adapters' bytes are
 * balanced together. */
static int run_my_lora_share(ur_orbax_share *sh, const ur_plan_units *u, ur_run_report *rep,
                             const ur_run_opts *o, const ur_settings *s, const char *in_path,
                             ur_plan_input kind, char *line, size_t line_size, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    uint64_t *bytes = ur_calloc(u->n_units, sizeof *bytes), total = 0, before = 0;
    struct timespec t0;
    int rc = bytes != NULL ? ur_orbax_share_lock(sh, err) : ur_err_oom(err);

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t k = 0; bytes != NULL && k < u->n_units && rc == UR_OK; k += k == 0 ? 1 : 2) {
        char *in = lora_input(u, k, s, in_path);
        rc = in != NULL ? unit_bytes(in, k == 0 ? kind : UR_PLAN_INPUT_LORA, s, &bytes[k], err)
                        : ur_err_oom(err);
        total += bytes[k];
        ur_free(in);
    }
    for (size_t k = 0; bytes != NULL && k < u->n_units && rc == UR_OK; k += k == 0 ? 1 : 2) {
        ur_run_share rs;
        char *in = lora_input(u, k, s, in_path);
        char what[320];
        memset(&rs, 0, sizeof rs);
        rs.share = sh;
        rs.count = count;
        rs.index = index;
        rs.slab_budget = share_slab_budget(o);
        rs.commit_every = o->commit_every ? o->commit_every : UR_RUN_COMMIT_EVERY;
        rs.share_before = before;
        rs.share_total = total > 0 ? total : 1;
        before += bytes[k];
        snprintf(what, sizeof what, "share %d/%d %s", index, count, k == 0 ? "base" : u->units[k]);
        if (in == NULL) {
            rc = ur_err_oom(err);
        } else if (!ur_orbax_share_unit_is_done(sh, k)) {
            rc = ur_orbax_share_unit_begin(sh, k, &rs.meta_dir, &rs.resume_from, err);
            if (rc == UR_OK && rs.resume_from > 0) {
                note(o, "share %d of %d: continuing a killed run of %s (from work item %llu)",
                     index, count, u->units[k], (unsigned long long)rs.resume_from);
            }
            if (rc == UR_OK) {
                rc = ur_plan_run_convert(in, ur_orbax_share_unit_path(sh, k), NULL, NULL,
                                         k == 0 ? kind : UR_PLAN_INPUT_LORA, s, o, &rs, what,
                                         &rep->total, err);
            }
            if (rc == UR_OK) {
                rc = ur_orbax_share_unit_mark_done(sh, k, err);
            }
        }
        ur_free(in);
    }
    for (size_t k = 2; k < u->n_units && rc == UR_OK; k += 2) {
        rc = stage_adapter_config(sh, u, k, s, index, err);
    }
    ur_free(bytes);
    return rc < 0 ? rc : mark_share_done(sh, rep, o, &t0, line, line_size, err);
}

/* The outcome of ur_orbax_share_finish, told. */
static void note_finish(const ur_run_opts *o, const ur_settings *s, int published, int missing,
                        const char *to, const char *what)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    if (published) {
        note(o, "every share complete: merged and wrote %s/%s", to, what);
    } else if (missing > 0) {
        note(o, "%d of %d shares still to complete; the last one publishes %s%s%s", missing, count,
             s->checkpoint_dir, s->checkpoint_dir[strlen(s->checkpoint_dir) - 1] == '/' ? "" : "/",
             what);
    } else {
        note(o, "every share complete; another process is publishing");
    }
}

/* ur_plan_multi_run of a run with LoRA adapters: the units base/0 and per adapter
 * loras/<id>/0 and its adapter_config.json, every step unit split over the processes by one
 * cut, all published together by the finisher (unroll/orbax_share.h). */
static int multi_run_lora(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                          const char *in_path, ur_plan_input kind, const char *const *inputs,
                          size_t n_inputs, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    ur_orbax_share *sh = NULL;
    ur_plan_units u;
    ur_buf text;
    char *to = NULL;
    int rc, published = 0, missing = 0;

    ur_buf_init(&text, 0);
    rc = ur_plan_lora_units(&u, s->lora_input_adapters_path, err);
    if (rc == UR_OK) {
        rc = ur_orbax_publish_check(s->checkpoint_dir, u.units, u.n_units, inputs, n_inputs, err);
    }
    if (rc == UR_OK) {
        rc = lora_multi_text(&text, &u, o, s, in_path, count, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_open_units(&sh, s->checkpoint_dir, u.units, u.n_units, count, index,
                                       (const char *)text.data, err);
    }
    if (rc == UR_OK && ur_orbax_share_published(sh)) {
        note(o, "%s/base/0 and loras/ are already published by this run: nothing to do",
             s->checkpoint_dir);
        ur_orbax_publish_tidy(s->checkpoint_dir, (const char *const *)u.units, u.n_units, inputs,
                              n_inputs);
        goto out;
    }
    if (rc == UR_OK && ur_orbax_share_is_done(sh, index)) {
        note(o, "share %d of %d is already complete: not redone", index, count);
    } else if (rc == UR_OK) {
        char line[260];
        rc = run_my_lora_share(sh, &u, rep, o, s, in_path, kind, line, sizeof line, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_finish(sh, o->cancel, &published, &missing, &to, err);
    }
    if (rc == UR_OK) {
        note_finish(o, s, published, missing, to, "base/0 and loras/");
        if (published) {
            rep->dest = to;
            to = NULL;
        }
    }
out:
    ur_free(to);
    ur_orbax_share_close(sh);
    ur_plan_lora_units_dispose(&u);
    ur_buf_dispose(&text);
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
    if (s->lora_input_adapters_path[0] != '\0') {
        return multi_run_lora(rep, o, s, in_path, kind, inputs, n_inputs, err);
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
    if (rc == UR_OK && ur_orbax_share_published(sh)) {
        note(o, "%s/0 is already published by this run: nothing to do", s->checkpoint_dir);
        ur_orbax_publish_tidy(s->checkpoint_dir, (const char *const[]){"0"}, 1, inputs, n_inputs);
        goto out;
    }
    if (rc == UR_OK && ur_orbax_share_is_done(sh, index)) {
        note(o, "share %d of %d is already complete: not redone", index, count);
    } else if (rc == UR_OK) {
        char line[260];
        rc = run_my_share(sh, (const char *)text.data, rep, o, s, in_path, kind, NULL, NULL, line,
                          sizeof line, err);
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
out:
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

/* The private local tree a share into an object store converts in: $TMPDIR/unroll-share-<key>-<i>
 * where key is the CRC-32C of the local tree's run text (which holds the run's text in the
 * store) and of the destination, so a rerun of the share on this machine finds what a killed
 * attempt committed and continues from there (ur_orbax_share_begin); when that name is not ours
 * to take, a new mkdtemp tree (*named = 0: no rerun will find it). */
static int share_scratch(char **root, int *named, const ur_buf *local_text,
                         const char *checkpoint_dir, int index, ur_err *err)
{
    char name[64];
    int created = 0;
    ur_err ignored;
    snprintf(name, sizeof name, "unroll-share-%08x%08x-%d",
             ur_crc32c(0, local_text->data, local_text->len),
             ur_crc32c(0, checkpoint_dir, trimmed_len(checkpoint_dir)), index);
    *named = ur_fs_make_named_temp_dir(root, name, &created, "the share's staging directory",
                                       &ignored) == UR_OK;
    return *named ? UR_OK
                  : ur_fs_make_temp_dir(root, "unroll-share", "the staging directory", err);
}

/* The summary a complete share of the local tree `root` keeps in its done marker, as one
 * line into line. */
static int done_summary(const char *root, int index, char *line, size_t line_size, ur_err *err)
{
    char *p = ur_path_joinf(root, "checkpoints" UR_ORBAX_SHARE_SUFFIX "/shares/%d.done", index);
    ur_buf b;
    int rc;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    ur_buf_init(&b, 0);
    rc = ur_fs_read_file(&b, p, 4096, err);
    if (rc == UR_OK) {
        size_t len = b.len < line_size - 1 ? b.len : line_size - 1;
        memcpy(line, b.data, len);
        line[len] = '\0';
    }
    ur_buf_dispose(&b);
    ur_free(p);
    return rc;
}

/* The share's progress uploaded at each commit (ur_run_share.on_commit). */
typedef struct {
    ur_orbax_rprogress *p;
    const char *db, *meta;
    const volatile sig_atomic_t *cancel;
} commit_upload;

static int upload_progress(void *ctx, uint64_t next_item, ur_err *err)
{
    commit_upload *c = ctx;
    return ur_orbax_rprogress_save(c->p, c->db, c->meta, next_item, c->cancel, err);
}

/* When the store's progress mark of the share is further along than the local tree (a rerun
 * on another machine, or after a rerun there): the local tree is replaced by the store's
 * database and metadata as of the mark, and continued from it. */
static int take_stored_progress(ur_orbax_share *sh, ur_orbax_rprogress *p, uint64_t stored,
                                const char *db, const char *meta, const ur_run_opts *o,
                                ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    int rc;
    if (stored <= ur_orbax_share_saved_progress(sh)) {
        return UR_OK;
    }
    /* the share's lock first: another attempt of it running on this machine keeps its tree */
    rc = ur_orbax_share_lock(sh, err);
    if (rc == UR_OK) {
        rc = ur_fs_remove_tree(db, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_remove_tree(meta, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rprogress_fetch(p, db, meta, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_save_progress(sh, stored, err);
    }
    if (rc == UR_OK) {
        note(o, "share %d of %d: fetched its progress from the store (work items before %llu)",
             index, count, (unsigned long long)stored);
    }
    return rc;
}

/* This process's share converted in a private local staging tree ($TMPDIR, share_scratch),
 * its progress uploaded at each commit, then the rest uploaded under the step prefix `step`;
 * the tree is removed once the share is up. `run_text`: the run's text in the store. */
static int convert_and_upload(ur_orbax_rshare *rs, const char *step, const char *run_text,
                              ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                              const char *in_path, ur_plan_input kind, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    char *root = NULL;
    char *dest = NULL, *db = NULL, *meta = NULL;
    ur_orbax_share *sh = NULL;
    ur_orbax_rprogress *prog = NULL;
    commit_upload cu;
    uint64_t stored = 0;
    char line[260];
    ur_buf local_text;
    int rc, named = 0;

    /* the private staging tree is a local run's (run.txt with this machine's paths; the text
     * in the store is the same on every machine, and is part of it, so that a tree left by a
     * run that differs in what only that text records, the config's content, is not taken) */
    ur_buf_init(&local_text, 0);
    rc = ur_plan_multi_run_text(&local_text, count, share_slab_budget(o), in_path,
                                o->config.config_path, o->config.overrides, o->config.n_overrides,
                                0, err);
    if (rc == UR_OK) {
        rc = ur_buf_printf(&local_text, err, "object-store run:\n%s", run_text);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(&local_text, "", 1, err); /* NUL-terminated */
        local_text.len--;
    }
    if (rc == UR_OK) {
        rc = share_scratch(&root, &named, &local_text, s->checkpoint_dir, index, err);
    }
    if (rc == UR_OK) {
        dest = ur_path_join(root, "checkpoints");
        db = ur_path_joinf(
            root, "checkpoints" UR_ORBAX_SHARE_SUFFIX "/step/items/ocdbt.process_%d", index);
        meta = ur_path_joinf(root, "checkpoints" UR_ORBAX_SHARE_SUFFIX "/shares/%d", index);
        rc = dest != NULL && db != NULL && meta != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_open(&sh, dest, count, index, (const char *)local_text.data, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rprogress_open(&prog, step, index, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rprogress_read(prog, &stored, err);
    }
    if (rc == UR_OK && !ur_orbax_share_is_done(sh, index)) {
        rc = take_stored_progress(sh, prog, stored, db, meta, o, err);
    }
    cu.p = prog;
    cu.db = db;
    cu.meta = meta;
    cu.cancel = o->cancel;
    if (rc == UR_OK && ur_orbax_share_is_done(sh, index)) {
        /* converted by a killed attempt that did not finish its upload */
        rc = done_summary(root, index, line, sizeof line, err);
        if (rc == UR_OK) {
            note(o, "share %d of %d: converted by an earlier attempt, not redone", index, count);
        }
    } else if (rc == UR_OK) {
        rc = run_my_share(sh, (const char *)local_text.data, rep, o, s, in_path, kind,
                          upload_progress, &cu, line, sizeof line, err);
    }
    if (rc == UR_OK) {
        note(o, "share %d of %d: uploading it to %.*s", index, count,
             (int)trimmed_len(s->checkpoint_dir), s->checkpoint_dir);
        rc = ur_orbax_rshare_upload(rs, prog, db, meta, line, o->cancel, err);
    }
    ur_orbax_rprogress_close(prog);
    ur_orbax_share_close(sh);
    ur_buf_dispose(&local_text);
    /* a named tree is kept after a failure: the rerun continues from it (and it may be in use
     * by another attempt of this share, whose lock refused this one) */
    if (root != NULL && (rc == UR_OK || !named)) {
        (void)ur_fs_remove_tree(root, NULL);
    }
    ur_free(root);
    ur_free(dest);
    ur_free(db);
    ur_free(meta);
    return rc;
}

/* convert_and_upload of a LoRA run: every unit's share converted in a private local staging
 * tree, then uploaded (ur_orbax_rshare_upload_units). */
static int convert_and_upload_lora(ur_orbax_rshare *rs, const ur_plan_units *u, ur_run_report *rep,
                                   const ur_run_opts *o, const ur_settings *s, const char *in_path,
                                   ur_plan_input kind, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    char *root = NULL, *dest = NULL;
    char **dirs = ur_calloc(u->n_units, sizeof *dirs),
         **metas = ur_calloc(u->n_units, sizeof *metas);
    ur_orbax_share *sh = NULL;
    char line[260];
    ur_buf local_text;
    int rc = dirs != NULL && metas != NULL
                 ? ur_fs_make_temp_dir(&root, "unroll-share", "the staging directory", err)
                 : ur_err_oom(err);

    ur_buf_init(&local_text, 0);
    if (rc == UR_OK) {
        dest = ur_path_join(root, "checkpoints");
        rc = dest != NULL
                 ? ur_plan_multi_run_text(&local_text, count, share_slab_budget(o), in_path,
                                          o->config.config_path, o->config.overrides,
                                          o->config.n_overrides, 0, err)
                 : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_share_open_units(&sh, dest, u->units, u->n_units, count, index,
                                       (const char *)local_text.data, err);
    }
    if (rc == UR_OK) {
        rc = run_my_lora_share(sh, u, rep, o, s, in_path, kind, line, sizeof line, err);
    }
    for (size_t k = 0; dirs != NULL && metas != NULL && k < u->n_units && rc == UR_OK; k++) {
        const char *at = ur_orbax_share_unit_path(sh, k);
        int step = k == 0 || k % 2 == 1;
        dirs[k] = step ? ur_path_joinf(at, "items/ocdbt.process_%d", index) : ur_strdup(at);
        metas[k] = k == 0
                       ? ur_path_joinf(root, "checkpoints" UR_ORBAX_SHARE_SUFFIX "/shares/%d",
                                       index)
                       : ur_path_joinf(root, "checkpoints" UR_ORBAX_SHARE_SUFFIX "/shares/%d.u%zu",
                                       index, k);
        rc = dirs[k] != NULL && metas[k] != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        note(o, "share %d of %d: uploading it to %.*s", index, count,
             (int)trimmed_len(s->checkpoint_dir), s->checkpoint_dir);
        rc = ur_orbax_rshare_upload_units(rs, (const char *const *)dirs,
                                          (const char *const *)metas, line, o->cancel, err);
    }
    for (size_t k = 0; k < u->n_units; k++) {
        ur_free(dirs != NULL ? dirs[k] : NULL);
        ur_free(metas != NULL ? metas[k] : NULL);
    }
    ur_free(dirs);
    ur_free(metas);
    ur_orbax_share_close(sh);
    ur_buf_dispose(&local_text);
    if (root != NULL) {
        (void)ur_fs_remove_tree(root, NULL);
    }
    ur_free(root);
    ur_free(dest);
    return rc;
}

/* ur_plan_multi_run_remote of a LoRA run (unroll/orbax_share_remote.h, "a run of several
 * units"). */
static int multi_run_lora_remote(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                                 const char *in_path, ur_plan_input kind, ur_err *err)
{
    int count = o->process_count > 1 ? o->process_count : 1;
    int index = o->process_count > 1 ? o->process_index : 0;
    ur_orbax_rshare *rs = NULL;
    ur_plan_units u;
    ur_buf text;
    int rc, published = 0, missing = 0, done = 0;

    ur_buf_init(&text, 0);
    rc = ur_plan_lora_units(&u, s->lora_input_adapters_path, err);
    if (rc == UR_OK) {
        rc = lora_multi_text(&text, &u, o, s, in_path, count, 1, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rshare_open_units(&rs, s->checkpoint_dir, u.units, u.n_units, count, index,
                                        (const char *)text.data, &published, err);
    }
    if (rc == UR_OK && published) {
        note(o, "%.*s/base/0 and loras/ are already published: nothing to do",
             (int)trimmed_len(s->checkpoint_dir), s->checkpoint_dir);
        goto out;
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rshare_is_done(rs, index, &done, err);
    }
    if (rc == UR_OK && done) {
        note(o, "share %d of %d is already complete: not redone", index, count);
    } else if (rc == UR_OK) {
        rc = convert_and_upload_lora(rs, &u, rep, o, s, in_path, kind, err);
    }
    if (rc == UR_OK) {
        rc = ur_orbax_rshare_finish(rs, o->cancel, &published, &missing, err);
    }
    if (rc == UR_OK) {
        note_finish(o, s, published, missing, s->checkpoint_dir, "base/0 and loras/");
        if (published) {
            rep->dest = ur_strdup(s->checkpoint_dir);
        }
    }
out:
    ur_orbax_rshare_close(rs);
    ur_plan_lora_units_dispose(&u);
    ur_buf_dispose(&text);
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

    /* count 1: a resumable run (--resume), share 0 of 1: a rerun finds its share uploaded
     * or not, and the finish taken over (unroll/orbax_share_remote.h) */
    rep->share = 1;
    rc = check_settings(o, s, err);
    if (rc < 0) {
        return rc;
    }
    if (s->lora_input_adapters_path[0] != '\0') {
        return multi_run_lora_remote(rep, o, s, in_path, kind, err);
    }
    if (o->replace) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "--replace with a %s run into an object store: delete %s/0 first (no "
                          "process may clear what the others write)",
                          count > 1 ? "multi-process" : "resumable", s->checkpoint_dir);
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
        rc = convert_and_upload(rs, step, (const char *)text.data, rep, o, s, in_path, kind, err);
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
