/* The one run driver (job_shares.h): this process's share of every unit converted, marked done
 * and sent, then the finish tried, whatever the destination (ur_job_site) and however
 * many units and processes. */
#include "job_shares.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/fs.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ur_job_note(const ur_job *j, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    if (j->o->on_note == NULL) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    j->o->on_note(j->o->ctx, line);
}

/* The slab budget of a share: the same in every process of a run, whatever its thread
 * count, since the output chunking follows it. */
static uint64_t share_slab_budget(const ur_run_opts *o)
{
    return o->memory_limit ? o->memory_limit / (uint64_t)(o->threads > 0 ? o->threads : 1)
                           : (uint64_t)128 << 20;
}

int ur_job_text(ur_buf *out, const ur_job *j, int portable, ur_err *err)
{
    const ur_run_opts *o = j->o;
    const ur_plan_units *u = &j->units;
    int rc = ur_job_multi_run_text(out, j->count, share_slab_budget(o), j->in_path,
                                   o->config.config_path, o->config.overrides,
                                   o->config.n_overrides, portable, err);
    /* each adapter's identity as the input's (ur_job_input_ident): a rerun over changed
     * adapters is refused */
    for (size_t i = 0; i < u->n_ids && rc == UR_OK; i++) {
        char *items = ur_path_joinf(j->s->lora_input_adapters_path, "%s/0/items", u->ids[i]);
        char *tag = ur_path_joinf("loras", "%s/", u->ids[i]);
        rc = items != NULL && tag != NULL ? ur_buf_printf(out, err, "lora %s\n", u->ids[i])
                                          : ur_err_oom(err);
        if (rc == UR_OK) {
            rc = ur_job_input_ident(out, items, tag, portable, err);
        }
        ur_free(items);
        ur_free(tag);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(out, "", 1, err);
        out->len--;
    }
    return rc;
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

/* The run's local text taken again once the share is converted, against the one it started
 * from: UR_EINVAL naming the change when the input, the config or an adapter changed while
 * the share read it. A share of values from two inputs is never marked done, and a rerun is
 * refused by run.txt until the run starts over. */
static int same_input(const ur_job *j, ur_err *err)
{
    char what[512];
    ur_buf now;
    int rc;
    ur_buf_init(&now, 0);
    rc = ur_job_text(&now, j, 0, err);
    if (rc == UR_OK &&
        (now.len == j->local_text.len && memcmp(now.data, j->local_text.data, now.len) == 0)) {
        ur_buf_dispose(&now);
        return UR_OK;
    }
    if (rc == UR_OK && !ur_job_run_change((const char *)j->local_text.data, (const char *)now.data,
                                          what, sizeof what)) {
        snprintf(what, sizeof what, "its identity");
    }
    if (rc == UR_OK) {
        rc = ur_err_set(err, UR_EINVAL,
                        "%s: input changed while share %d/%d read it: %s; the share is not "
                        "marked done, and its run is refused from now on (remove its staging to "
                        "start over)",
                        j->in_path, j->index, j->count, what);
    }
    ur_buf_dispose(&now);
    return rc;
}

/* The input of step unit k (0: the run's; 1 + 2i: adapter i's). */
static char *unit_input(const ur_job *j, size_t k)
{
    return k == 0 ? ur_strdup(j->in_path)
                  : ur_path_joinf(j->s->lora_input_adapters_path, "%s/0/items",
                                  j->units.ids[(k - 1) / 2]);
}

static ur_plan_input unit_kind(const ur_job *j, size_t k)
{
    return k == 0 ? j->kind : UR_PLAN_INPUT_LORA;
}

int ur_job_is_step_unit(size_t k)
{
    return k == 0 || k % 2 == 1;
}

/* The decoded input bytes of `in`'s plan that the cut counts (ur_exec_input_bytes). */
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
        rc = ur_exec_input_bytes(plan, ck, bytes, err);
    }
    ur_plan_free(plan);
    ur_plan_orbax_leaves_dispose(&leaves);
    ur_orbax_ckpt_close(ck);
    return rc;
}

/* adapter_config.json of file unit k (2 + 2i) staged where the finish publishes it from: a
 * private copy renamed into place (every process stages the same bytes). */
static int stage_adapter_config(const char *to, const ur_job *j, size_t k, ur_err *err)
{
    char *from = ur_path_joinf(j->s->lora_input_adapters_path, "%s/adapter_config.json",
                               j->units.ids[(k - 2) / 2]);
    char *tmp = ur_malloc(strlen(to) + 32);
    int rc = from != NULL && tmp != NULL ? UR_OK : ur_err_oom(err);
    if (rc == UR_OK && !ur_fs_exists(to)) {
        snprintf(tmp, strlen(to) + 32, "%s.%d.tmp", to, j->index);
        rc = ur_job_run_copy_file(from, tmp, err);
        if (rc == UR_OK) {
            rc = ur_fs_rename(tmp, to, err);
        }
    }
    ur_free(from);
    ur_free(tmp);
    return rc;
}

/* Step unit k's part of the share converted (skipped when a killed attempt committed it). */
static int convert_unit(void *d, const ur_job_site *ops, const ur_job *j, size_t k,
                        uint64_t before, uint64_t total, ur_run_report *rep, ur_err *err)
{
    const ur_run_opts *o = j->o;
    const char *step_dir = NULL;
    char *in = unit_input(j, k);
    ur_run_share rs;
    char what[320];
    int rc = in != NULL ? UR_OK : ur_err_oom(err);

    memset(&rs, 0, sizeof rs);
    rs.count = j->count;
    rs.index = j->index;
    rs.slab_budget = share_slab_budget(o);
    rs.commit_every = o->commit_every ? o->commit_every : UR_RUN_COMMIT_EVERY;
    rs.share_before = before;
    rs.share_total = total;
    rs.save_progress = ops->save_progress;
    rs.progress_ctx = d;
    if (j->units.n_units > 1) {
        snprintf(what, sizeof what, "share %d/%d %s", j->index, j->count,
                 k == 0 ? "base" : j->units.units[k]);
    } else {
        snprintf(what, sizeof what, "share %d/%d", j->index, j->count);
    }
    if (rc == UR_OK && !ops->unit_is_done(d, k)) {
        rc = ops->unit_begin(d, k, &step_dir, &rs.meta_dir, &rs.resume_from, err);
        if (rc == UR_OK && rs.resume_from > 0) {
            ur_job_note(j, "share %d of %d: continuing a killed run of %s (from work item %llu)",
                        j->index, j->count, j->units.n_units > 1 ? j->units.units[k] : "it",
                        (unsigned long long)rs.resume_from);
        }
        if (rc == UR_OK) {
            rc = ur_job_run_convert(in, step_dir, NULL, NULL, unit_kind(j, k), j->s, o, &rs, what,
                                    &rep->total, err);
        }
        if (rc == UR_OK) {
            rc = ops->unit_done(d, k, err);
        }
    }
    ur_free(in);
    return rc;
}

/* This process's share of every step unit (each resumed or skipped on its own), the adapter
 * configs staged, the input checked unchanged, the share marked done with its summary (into
 * `line`). A run of several units is cut once over their input bytes back to back, so the
 * base's and the adapters' bytes are balanced together; a run of one is cut alone. */
static int convert_share(void *d, const ur_job_site *ops, const ur_job *j, ur_run_report *rep,
                         char *line, size_t line_size, ur_err *err)
{
    const ur_plan_units *u = &j->units;
    const ur_run_opts *o = j->o;
    uint64_t *bytes = ur_calloc(u->n_units, sizeof *bytes), total = 0, before = 0;
    double t0;
    char summary[256];
    int rc = bytes != NULL ? UR_OK : ur_err_oom(err);

    t0 = ur_clock_mono_s();
    for (size_t k = 0; bytes != NULL && u->n_units > 1 && k < u->n_units && rc == UR_OK; k++) {
        char *in = ur_job_is_step_unit(k) ? unit_input(j, k) : NULL;
        if (ur_job_is_step_unit(k)) {
            rc = in != NULL ? unit_bytes(in, unit_kind(j, k), j->s, &bytes[k], err)
                            : ur_err_oom(err);
            total += bytes[k];
        }
        ur_free(in);
    }
    for (size_t k = 0; bytes != NULL && k < u->n_units && rc == UR_OK; k++) {
        if (ur_job_is_step_unit(k)) {
            rc = convert_unit(d, ops, j, k, before, u->n_units > 1 ? (total > 0 ? total : 1) : 0,
                              rep, err);
            before += bytes[k];
        }
    }
    for (size_t k = 0; k < u->n_units && rc == UR_OK; k++) {
        if (!ur_job_is_step_unit(k)) {
            rc = stage_adapter_config(ops->unit_path(d, k), j, k, err);
        }
    }
    ur_free(bytes);
    if (rc == UR_OK) {
        rc = same_input(j, err);
    }
    if (rc < 0) {
        return rc;
    }
    snprintf(summary, sizeof summary, "%.1f MiB of %.1f MiB read (%.1f%%), %.2f s, %d threads, %s",
             (double)rep->total.share_bytes / 1048576.0, (double)rep->total.all_bytes / 1048576.0,
             rep->total.all_bytes
                 ? 100.0 * (double)rep->total.share_bytes / (double)rep->total.all_bytes
                 : 100.0,
             ur_clock_mono_s() - t0, rep->total.threads,
             o->process_source != NULL ? o->process_source : "single process");
    /* the marker keeps the summary as one line */
    snprintf(line, line_size, "%s\n", summary);
    rc = ops->mark_done(d, line, err);
    if (rc == UR_OK) {
        ur_job_note(j, "share %d of %d complete: %s", j->index, j->count, summary);
    }
    return rc;
}

/* The outcome of the finish, told. */
static void note_finish(const ur_job *j, int published, int took_over, int missing, const char *to)
{
    const char *dest = j->s->checkpoint_dir;
    if (published && took_over) {
        ur_job_note(j,
                    "every share complete: took over the finish an earlier attempt of process "
                    "index %d left, merged and wrote %.*s/%s",
                    j->index, (int)ur_path_trimmed_len(to), to, j->what);
    } else if (published) {
        ur_job_note(j, "every share complete: merged and wrote %.*s/%s",
                    (int)ur_path_trimmed_len(to), to, j->what);
    } else if (missing > 0) {
        ur_job_note(j, "%d of %d shares still to complete; the last one publishes %.*s/%s",
                    missing, j->count, (int)ur_path_trimmed_len(dest), dest, j->what);
    } else {
        ur_job_note(j, "every share complete; another process is publishing");
    }
}

int ur_job_shares_run(ur_run_report *rep, const ur_run_opts *o, const ur_settings *s,
                      const char *in_path, ur_plan_input kind, const ur_job_site *ops,
                      const char *const *inputs, size_t n_inputs, ur_err *err)
{
    ur_job j;
    void *d = NULL;
    char *to = NULL;
    char line[260];
    int rc, published = 0, missing = 0, took_over = 0, done = 0, converted = 0;

    /* count 1: a resumable run (--resume), share 0 of 1 */
    rep->share = 1;
    rc = check_settings(o, s, err);
    if (rc < 0) {
        return rc;
    }
    memset(&j, 0, sizeof j);
    j.o = o;
    j.s = s;
    j.in_path = in_path;
    j.kind = kind;
    j.inputs = inputs;
    j.n_inputs = n_inputs;
    j.count = o->process_count > 1 ? o->process_count : 1;
    j.index = o->process_count > 1 ? o->process_index : 0;
    ur_buf_init(&j.local_text, 0);
    rc = ur_plan_lora_units(&j.units, s->lora_input_adapters_path, err);
    j.what = j.units.n_units > 1 ? "base/0 and loras/" : "0";
    if (rc == UR_OK) {
        rc = ur_job_text(&j.local_text, &j, 0, err);
    }
    if (rc == UR_OK) {
        rc = ops->open(&d, &j, &published, err);
    }
    if (rc == UR_OK && published) {
        ur_job_note(&j, "%.*s/%s %s already published by this run: nothing to do",
                    (int)ur_path_trimmed_len(s->checkpoint_dir), s->checkpoint_dir, j.what,
                    j.units.n_units > 1 ? "are" : "is");
        goto out;
    }
    if (rc == UR_OK) {
        rc = ops->is_done(d, j.index, &done, err);
    }
    if (rc == UR_OK && done) {
        ur_job_note(&j, "share %d of %d is already complete: not redone", j.index, j.count);
    } else if (rc == UR_OK) {
        rc = ops->take(d, &converted, line, sizeof line, err);
        if (rc == UR_OK && converted) {
            ur_job_note(&j, "share %d of %d: converted by an earlier attempt, not redone", j.index,
                        j.count);
        } else if (rc == UR_OK) {
            rc = convert_share(d, ops, &j, rep, line, sizeof line, err);
        }
        if (rc == UR_OK) {
            rc = ops->send(d, line, err);
        }
    }
    if (rc == UR_OK) {
        rc = ops->finish(d, o->cancel, &published, &missing, &took_over, &to, err);
    }
    if (rc == UR_OK) {
        note_finish(&j, published, took_over, missing, to);
        if (published) {
            rep->dest = to;
            to = NULL;
        }
    }
out:
    if (d != NULL) {
        ops->close(d, rc);
    }
    ur_free(to);
    ur_plan_lora_units_dispose(&j.units);
    ur_buf_dispose(&j.local_text);
    return rc;
}

/* ---- the unit steps of a local share (both implementations) ---- */

int ur_job_local_unit_is_done(void *d, size_t k)
{
    return ur_job_share_unit_is_done(((ur_job_local *)d)->sh, k);
}

int ur_job_local_unit_begin(void *d, size_t k, const char **step_dir, const char **meta_dir,
                            uint64_t *resume_from, ur_err *err)
{
    ur_job_share *sh = ((ur_job_local *)d)->sh;
    *step_dir = ur_job_share_unit_path(sh, k);
    return ur_job_share_unit_begin(sh, k, meta_dir, resume_from, err);
}

int ur_job_local_unit_done(void *d, size_t k, ur_err *err)
{
    return ur_job_share_unit_mark_done(((ur_job_local *)d)->sh, k, err);
}

const char *ur_job_local_unit_path(void *d, size_t k)
{
    return ur_job_share_unit_path(((ur_job_local *)d)->sh, k);
}
