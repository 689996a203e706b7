/* A conversion shared by several processes: the staging directory, the shares' completion
 * markers, the exclusive claim of the finish, and the finish itself (merge + metadata +
 * publication). See include/unroll/job_share.h. */
#define _POSIX_C_SOURCE 200809L

#include "job_finish.h"
#include "job_ledger.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/fs.h"
#include "unroll/job_publish.h"
#include "unroll/job_share.h"
#include "unroll/kvstore.h"
#include "unroll/num.h"
#include "unroll/ocdbt.h"
#include "unroll/orbax.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FINISH_LOCK "finish.lock" /* held by the finisher (finish_enter) */
#define PUBLISHING_FILE "publishing.txt"

struct ur_job_share {
    char *dest;     /* C, as given (trailing '/' removed) */
    char *staging;  /* <C>.unroll-multi */
    char *step;     /* unit 0's staged step: staging/step, or staging/units/base/0 */
    char *items;    /* step/items */
    char *input;    /* from run.txt's "input " line */
    ur_kvstore *kv; /* the staging directory: the run's ledger (job_ledger.h) */
    int count, index;
    int finish_fd; /* FINISH_LOCK, held while this process claims and finishes */
    int share_fd; /* shares/<index>.lock, held while this share runs */
    /* The units (one, "0", or LoRA's: ur_job_share_open_units), where each is staged
     * (staging/step for the one "0", else staging/units/<unit>), and the one being converted
     * (its progress is what save_progress records). */
    size_t n_units;
    char **units;
    char **staged;
    char *meta_dir; /* the current unit's: staging/shares/<index>[.u<k>] */
    size_t cur;
    int published; /* C/<unit 0> holds this run's publication (ur_job_share_published) */
    char *unit_as;      /* the finish: where the unit being built is published */
    char *published_to; /* the finish: C's canonical path, once publish() knows it */
};

void ur_job_share_close(ur_job_share *s)
{
    if (s == NULL) {
        return;
    }
    if (s->finish_fd >= 0) {
        close(s->finish_fd); /* releases the flock */
    }
    ur_kvstore_close(s->kv);
    if (s->share_fd >= 0) {
        close(s->share_fd);
    }
    for (size_t k = 0; k < s->n_units; k++) {
        ur_free(s->units != NULL ? s->units[k] : NULL);
        ur_free(s->staged != NULL ? s->staged[k] : NULL);
    }
    ur_free(s->units);
    ur_free(s->staged);
    ur_free(s->dest);
    ur_free(s->staging);
    ur_free(s->step);
    ur_free(s->items);
    ur_free(s->meta_dir);
    ur_free(s->input);
    ur_free(s->unit_as);
    ur_free(s->published_to);
    ur_free(s);
}

/* The units of a staged run: run.txt's "unit <name>" lines, in order; none: the one "0". */
static int set_units(ur_job_share *s, const char *const *units, size_t n_units)
{
    static const char *const one[1] = {"0"};
    if (n_units == 0 || units == NULL) {
        units = one;
        n_units = 1;
    }
    s->units = ur_calloc(n_units, sizeof *s->units);
    s->staged = ur_calloc(n_units, sizeof *s->staged);
    if (s->units == NULL || s->staged == NULL) {
        return UR_ENOMEM;
    }
    s->n_units = n_units;
    for (size_t k = 0; k < n_units; k++) {
        s->units[k] = ur_strdup(units[k]);
        s->staged[k] = n_units == 1 && strcmp(units[0], "0") == 0
                           ? ur_path_join(s->staging, "step")
                           : ur_path_joinf(s->staging, "units/%s", units[k]);
        if (s->units[k] == NULL || s->staged[k] == NULL) {
            return UR_ENOMEM;
        }
    }
    return UR_OK;
}

/* The units a staged run's text names, in place of the one "0" that share_new set. */
static int replace_units(ur_job_share *s, const ur_job_run_info *info, ur_err *err)
{
    for (size_t k = 0; k < s->n_units; k++) {
        ur_free(s->units[k]);
        ur_free(s->staged[k]);
    }
    ur_free(s->units);
    ur_free(s->staged);
    s->units = NULL;
    s->staged = NULL;
    s->n_units = 0;
    return set_units(s, (const char *const *)info->units, info->n_units) == UR_OK
               ? UR_OK
               : ur_err_oom(err);
}

static int share_new(ur_job_share **out, const char *dest, const char *const *units,
                     size_t n_units, ur_err *err)
{
    ur_job_share *s = ur_calloc(1, sizeof *s);
    size_t n = ur_path_trimmed_len(dest);
    if (s == NULL) {
        return ur_err_oom(err);
    }
    s->finish_fd = -1;
    s->share_fd = -1;
    s->dest = ur_strndup(dest, n);
    s->staging = ur_malloc(n + sizeof UR_JOB_SHARE_SUFFIX);
    if (s->staging != NULL) {
        memcpy(s->staging, dest, n);
        memcpy(s->staging + n, UR_JOB_SHARE_SUFFIX, sizeof UR_JOB_SHARE_SUFFIX);
        if (set_units(s, units, n_units) == UR_OK) {
            s->step = ur_strdup(s->staged[0]);
        }
    }
    if (s->step != NULL) {
        s->items = ur_path_join(s->step, "items");
    }
    if (s->dest == NULL || s->items == NULL) {
        ur_job_share_close(s);
        return ur_err_oom(err);
    }
    *out = s;
    return UR_OK;
}

/* Read run.txt of the staging directory into out, NUL-terminated. */
static int read_run(const ur_job_share *s, ur_buf *out, ur_err *err)
{
    int found = 0, rc = ur_job_ledger_run_read(s->kv, out, &found, err);
    return rc == UR_OK && !found
               ? ur_err_set(err, UR_ENOTFOUND,
                            "%s/" UR_JOB_LEDGER_RUN ": not there (not a staged run)", s->staging)
               : rc;
}

/* staging/publishing.txt, the publication's journal, written (and synced) before publish()
 * moves any staged unit: one line per unit it moves, "<k> <dev> <inode> <where>", the unit's
 * identity (a rename keeps it) and the publication staging path it goes to first. */
static char *publishing_path(const ur_job_share *s)
{
    return ur_path_join(s->staging, PUBLISHING_FILE);
}

/* 1 when a finisher began to publish (the journal is there): the staged units may be gone,
 * and must not be made again. */
static int units_taken(const ur_job_share *s)
{
    char *note = publishing_path(s);
    int taken = note != NULL && ur_fs_exists(note);
    ur_free(note);
    return taken;
}

static int same_inode(const char *path, unsigned long long dev, unsigned long long ino)
{
    unsigned long long d = 0, i = 0;
    ur_err ignored;
    return ur_fs_identity(path, &d, &i, &ignored) == UR_OK && d == dev && i == ino;
}

/* One decimal field of a journal line and the spaces after it; false when there is none (a
 * line the finisher's write was cut short in). */
static bool journal_number(const char **p, unsigned long long *v)
{
    size_t n = strcspn(*p, " ");
    uint64_t x;
    if ((*p)[n] != ' ' || ur_num_parse_u64(*p, n, &x) < 0) {
        return false;
    }
    *v = x;
    for (*p += n; **p == ' ';) {
        (*p)++;
    }
    return true;
}

/* One journal line: a unit found in the publication staging (moved there, not yet into C) is
 * moved back to where the shares staged it; one still staged, or already in C (its inode
 * there), stays. */
static int recover_line(ur_job_share *s, const char *line, ur_err *err)
{
    unsigned long long k, dev, ino;
    const char *where = line;
    if (!journal_number(&where, &k) || !journal_number(&where, &dev) ||
        !journal_number(&where, &ino) || *where == '\0' || k >= s->n_units) {
        return ur_err_set(err, UR_ECORRUPT, "%s/" PUBLISHING_FILE ": bad line '%s'", s->staging,
                          line);
    }
    if (!same_inode(s->staged[k], dev, ino) && same_inode(where, dev, ino)) {
        return ur_fs_rename(where, s->staged[k], err); /* the finished unit back */
    }
    return UR_OK;
}

/* A finisher killed while it published leaves the journal: every unit it had moved into its
 * publication staging directory but not yet into C goes back, so that a rerun publishes the
 * rest (the units in C already stay: a unit whose staged path is gone is published) instead
 * of re-creating empty units that lack every other share's database. Only when no finisher is
 * alive (finish.claim not locked, or `held`: this process holds it). */
static int finish_enter(void *ctx, int *busy, ur_err *err);

static int recover_units(ur_job_share *s, int held, ur_err *err)
{
    char *note = publishing_path(s);
    ur_buf text;
    int busy = 0, rc = UR_OK;

    ur_buf_init(&text, 0);
    if (note == NULL) {
        rc = ur_err_oom(err);
    } else if (ur_fs_exists(note)) {
        rc = held ? UR_OK : finish_enter(s, &busy, err);
        if (rc == UR_OK && busy) {
            rc = ur_err_set(err, UR_EIO,
                            "%s/" FINISH_LOCK ": another process is publishing this run",
                            s->staging);
        }
        if (rc == UR_OK) {
            rc = ur_fs_read_file(&text, note, 1 << 20, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append(&text, "", 1, err);
        }
        for (char *line = (char *)text.data; rc == UR_OK && line != NULL && *line != '\0';) {
            char *nl = strchr(line, '\n');
            if (nl != NULL) {
                *nl = '\0';
            }
            rc = recover_line(s, line, err);
            line = nl != NULL ? nl + 1 : NULL;
        }
        if (rc == UR_OK) {
            rc = ur_fs_fsync_dir(s->staging, err);
        }
    }
    if (!held && s->finish_fd >= 0) {
        close(s->finish_fd); /* taken for the recovery only */
        s->finish_fd = -1;
    }
    ur_buf_dispose(&text);
    ur_free(note);
    return rc;
}

/* The run's text kept in its first unit once published (UR_JOB_SHARE_RUN_KEPT, as the
 * object-store protocol keeps it): a rerun of one of its processes then finds its own
 * publication instead of staging the run again. */
static char *kept_run_path(const ur_job_share *s)
{
    return ur_path_joinf(s->dest, "%s/" UR_JOB_SHARE_RUN_KEPT, s->units[0]);
}

/* s->published = 1 when C's first unit was published by this run (its kept text is `text`);
 * `scratch` is a buffer to read it into. */
static int find_own_publication(ur_job_share *s, const char *text, ur_buf *scratch, ur_err *err)
{
    char *kept = kept_run_path(s);
    int rc;
    if (kept == NULL) {
        return ur_err_oom(err);
    }
    ur_buf_reset(scratch);
    rc = ur_fs_read_file(scratch, kept, 1 << 24, err);
    if (rc == UR_ENOTFOUND) {
        rc = UR_OK;
    } else if (rc == UR_OK) {
        s->published = scratch->len == strlen(text) &&
                       memcmp(scratch->data, text, scratch->len) == 0;
    }
    ur_buf_reset(scratch);
    ur_free(kept);
    return rc;
}

/* run_text with one line "unit <name>" per unit of a run of several (none for the one "0"). */
static int full_run_text(ur_buf *out, const char *run_text, const char *const *units,
                         size_t n_units, ur_err *err)
{
    int rc = ur_buf_append(out, run_text, strlen(run_text), err);
    for (size_t k = 0; k < n_units && n_units > 1 && rc == UR_OK; k++) {
        rc = ur_buf_printf(out, err, "unit %s\n", units[k]);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(out, "", 1, err);
        out->len--;
    }
    return rc;
}

/* The staged units' directories (their items/ for step units): not once a finisher began to
 * publish them. */
static int make_units(ur_job_share *s, ur_err *err)
{
    int rc = UR_OK;
    if (units_taken(s)) {
        return UR_OK; /* finish() publishes the rest, or says it is published */
    }
    for (size_t k = 0; k < s->n_units && rc == UR_OK; k++) {
        char *dir = ur_job_finish_is_step(s->units[k])
                        ? ur_path_join(s->staged[k], "items")
                        : ur_strndup(s->staged[k],
                                     (size_t)(strrchr(s->staged[k], '/') - s->staged[k]));
        rc = dir != NULL ? ur_fs_mkdirs(dir, err) : ur_err_oom(err);
        ur_free(dir);
    }
    return rc;
}

int ur_job_share_open_units(ur_job_share **out, const char *dest, const char *const *units,
                            size_t n_units, int count, int index, const char *run_text,
                            ur_err *err)
{
    ur_job_share *s = NULL;
    ur_job_run_info info;
    ur_buf have, text;
    char *shares = NULL;
    int rc, created = 0;

    if (count < 1 || count > UR_JOB_SHARE_MAX || index < 0 || index >= count) {
        return ur_err_set(err, UR_EINVAL, "process index %d of %d processes is out of range",
                          index, count);
    }
    rc = share_new(&s, dest, units, n_units, err);
    if (rc < 0) {
        return rc;
    }
    s->count = count;
    s->index = index;
    rc = ur_job_run_info_parse(&info, run_text, s->staging, err);
    s->input = info.input; /* what the finish's overlap check compares the destination with */
    info.input = NULL;
    ur_job_run_info_dispose(&info);
    shares = rc == UR_OK ? ur_path_join(s->staging, "shares") : NULL;
    if (rc == UR_OK && (s->input == NULL || shares == NULL)) {
        rc = s->input == NULL
                 ? ur_err_set(err, UR_EINVAL, "%s: the run's text names no input", s->staging)
                 : ur_err_oom(err);
    }
    if (rc < 0) {
        ur_free(shares);
        ur_job_share_close(s);
        return rc;
    }
    ur_buf_init(&have, 0);
    ur_buf_init(&text, 0);
    rc = full_run_text(&text, run_text, units, n_units, err);
    if (rc == UR_OK && !ur_fs_exists(s->staging)) {
        rc = find_own_publication(s, (const char *)text.data, &have, err);
        if (rc == UR_OK && s->published) {
            goto out; /* a rerun of a process whose run is published: nothing to stage */
        }
    }
    if (rc == UR_OK) {
        rc = ur_fs_mkdirs(shares, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_file_open(&s->kv, s->staging, 1, err);
    }
    if (rc == UR_OK) {
        rc = recover_units(s, 0, err);
    }
    if (rc == UR_OK) {
        rc = make_units(s, err);
    }
    if (rc == UR_OK) {
        rc = ur_job_ledger_run_create(s->kv, (const char *)text.data, &created, err);
    }
    if (rc == UR_OK && created) { /* the run starts now (_CHECKPOINT_METADATA) */
        int64_t started;
        rc = ur_job_ledger_started(s->kv, s->staging, &started, err);
    }
    if (rc == UR_OK && !created) {
        char what[512];
        rc = read_run(s, &have, err);
        if (rc == UR_OK && strcmp((const char *)have.data, (const char *)text.data) != 0 &&
            ur_job_run_change((const char *)have.data, (const char *)text.data, what,
                              sizeof what)) {
            rc = ur_err_set(err, UR_EINVAL,
                            "%s/run.txt: input changed since the run started: %s; the run "
                            "staged there read the old one (remove %s to start over)",
                            s->staging, what, s->staging);
        } else if (rc == UR_OK && strcmp((const char *)have.data, (const char *)text.data) != 0) {
            rc = ur_err_set(err, UR_EINVAL,
                            "%s/run.txt: a multi-process run with other arguments or another "
                            "input is staged there (remove %s to start over)",
                            s->staging, s->staging);
        }
    }
out:
    ur_buf_dispose(&have);
    ur_buf_dispose(&text);
    ur_free(shares);
    if (rc < 0) {
        ur_job_share_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

int ur_job_share_published(const ur_job_share *s)
{
    return s->published;
}

int ur_job_share_open(ur_job_share **out, const char *dest, int count, int index,
                      const char *run_text, ur_err *err)
{
    return ur_job_share_open_units(out, dest, NULL, 0, count, index, run_text, err);
}

int ur_job_share_is_done(const ur_job_share *s, int i)
{
    int done = 0;
    ur_err ignored;
    return ur_job_ledger_is_done(s->kv, i, &done, NULL, &ignored) == UR_OK && done;
}

const char *ur_job_share_step(const ur_job_share *s)
{
    return s->step;
}

const char *ur_job_share_unit_path(const ur_job_share *s, size_t k)
{
    return s->staged[k];
}

/* shares/<index><what>, where unit k > 0 adds ".u<k>" (unit 0 keeps the one-unit names). */
static char *unit_file(const ur_job_share *s, size_t k, const char *what)
{
    return k == 0 ? ur_path_joinf(s->staging, "shares/%d%s", s->index, what)
                  : ur_path_joinf(s->staging, "shares/%d.u%zu%s", s->index, k, what);
}

char *ur_job_share_unit_meta_dir(const ur_job_share *s, size_t k)
{
    return unit_file(s, k, "");
}

static char *progress_path(const ur_job_share *s, size_t k)
{
    return unit_file(s, k, ".progress");
}

/* The saved resume point of unit k, 0 when none (or unreadable: the unit is then redone). */
static uint64_t saved_progress(const ur_job_share *s, size_t k)
{
    char *p = progress_path(s, k),
         *db = ur_path_joinf(s->staged[k], "items/ocdbt.process_%d/manifest.ocdbt", s->index);
    uint64_t v = 0;
    ur_buf b;
    ur_err ignored;
    ur_buf_init(&b, 0);
    if (p != NULL && db != NULL && ur_fs_exists(db) &&
        ur_fs_read_file(&b, p, 256, &ignored) == UR_OK &&
        ur_buf_append(&b, "", 1, &ignored) == UR_OK) {
        const char *t = (const char *)b.data;
        size_t n = strcspn(t, "\n");
        uint64_t at = 0;
        if (n > 10 && strncmp(t, "next_item ", 10) == 0 &&
            ur_num_parse_u64(t + 10, n - 10, &at) == 0) {
            v = at;
        }
    }
    ur_buf_dispose(&b);
    ur_free(p);
    ur_free(db);
    return v;
}

uint64_t ur_job_share_saved_progress(const ur_job_share *s)
{
    return saved_progress(s, s->cur);
}

uint64_t ur_job_share_unit_saved_progress(const ur_job_share *s, size_t k)
{
    return saved_progress(s, k);
}

/* Hold shares/<index>.lock while the share runs: the same index started twice (a launcher
 * misconfigured, a rerun while the first still runs) would write one database twice. */
static int lock_share(ur_job_share *s, ur_err *err)
{
    char *p = ur_path_joinf(s->staging, "shares/%d.lock", s->index);
    int rc = p != NULL ? ur_fs_lock_try(p, &s->share_fd, err) : ur_err_oom(err);
    if (rc == UR_OK && s->share_fd < 0) {
        rc = ur_err_set(err, UR_EIO, "%s: share %d is being run by another process", p, s->index);
    }
    ur_free(p);
    return rc;
}

int ur_job_share_lock(ur_job_share *s, ur_err *err)
{
    /* held already when the caller took it before replacing its tree (job_site_bucket.c) */
    int rc = s->share_fd >= 0 ? UR_OK : lock_share(s, err);
    return rc == UR_OK ? ur_job_ledger_clear_done(s->kv, s->index, err) : rc;
}

int ur_job_share_unit_is_done(const ur_job_share *s, size_t k)
{
    char *p = unit_file(s, k, ".unit-done");
    int done = p != NULL && ur_fs_exists(p);
    ur_free(p);
    return done;
}

int ur_job_share_unit_mark_done(ur_job_share *s, size_t k, ur_err *err)
{
    char *p = unit_file(s, k, ".unit-done"), *dir = ur_path_join(s->staging, "shares");
    int rc = p != NULL && dir != NULL ? ur_fs_write_file(p, "", 0, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(dir, err);
    }
    ur_free(p);
    ur_free(dir);
    return rc;
}

int ur_job_share_unit_undo(ur_job_share *s, size_t k, ur_err *err)
{
    char *p = unit_file(s, k, ".unit-done");
    int rc = p != NULL ? ur_fs_remove_tree(p, err) : ur_err_oom(err);
    ur_free(p);
    return rc;
}

int ur_job_share_unit_begin(ur_job_share *s, size_t k, const char **meta_dir,
                            uint64_t *resume_from, ur_err *err)
{
    char *prog;
    int rc = UR_OK;
    ur_free(s->meta_dir);
    s->cur = k;
    s->meta_dir = unit_file(s, k, "");
    prog = progress_path(s, k);
    if (s->meta_dir == NULL || prog == NULL) {
        ur_free(prog);
        return ur_err_oom(err);
    }
    *resume_from = saved_progress(s, k);
    if (*resume_from == 0) {
        rc = ur_fs_remove_tree(prog, err);
        if (rc == UR_OK) {
            rc = ur_fs_remove_tree(s->meta_dir, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_fs_mkdirs(s->meta_dir, err);
    }
    ur_free(prog);
    *meta_dir = s->meta_dir;
    return rc;
}

int ur_job_share_begin(ur_job_share *s, const char **meta_dir, uint64_t *resume_from, ur_err *err)
{
    int rc = ur_job_share_lock(s, err);
    *resume_from = 0;
    *meta_dir = NULL;
    return rc == UR_OK ? ur_job_share_unit_begin(s, 0, meta_dir, resume_from, err) : rc;
}

int ur_job_share_save_progress(ur_job_share *s, uint64_t next_item, ur_err *err)
{
    return ur_job_share_unit_save_progress(s, s->cur, next_item, err);
}

int ur_job_share_unit_save_progress(ur_job_share *s, size_t k, uint64_t next_item, ur_err *err)
{
    char *p = progress_path(s, k), *tmp = unit_file(s, k, ".progress.tmp");
    char text[64];
    int rc = p != NULL && tmp != NULL ? UR_OK : ur_err_oom(err);
    snprintf(text, sizeof text, "next_item %llu\n", (unsigned long long)next_item);
    if (rc == UR_OK) {
        rc = ur_fs_write_file(tmp, text, strlen(text), err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_rename(tmp, p, err);
    }
    ur_free(p);
    ur_free(tmp);
    return rc;
}

int ur_job_share_mark_done(ur_job_share *s, const char *summary, ur_err *err)
{
    return ur_job_ledger_mark_done(s->kv, s->index, summary, err);
}

/* The finisher's liveness in a directory (job_ledger.h): FINISH_LOCK, taken before the claim
 * and held until the process ends, so a claim found while holding it is a dead finisher's. */
static int finish_enter(void *ctx, int *busy, ur_err *err)
{
    ur_job_share *s = ctx;
    char *p;
    int rc;
    *busy = 0;
    if (s->finish_fd >= 0) {
        return UR_OK;
    }
    p = ur_path_join(s->staging, FINISH_LOCK);
    rc = p != NULL ? ur_fs_lock_try(p, &s->finish_fd, err) : ur_err_oom(err);
    /* the staging directory gone: the finisher that held the lock published and removed it */
    *busy = rc == UR_ENOTFOUND || (rc == UR_OK && s->finish_fd < 0);
    ur_free(p);
    return rc == UR_ENOTFOUND ? UR_OK : rc;
}

static int finish_holder_dead(void *ctx, const char *have)
{
    (void)ctx;
    (void)have;
    return 1; /* its holder would hold FINISH_LOCK, which this process holds */
}

static int claim(ur_job_share *s, int *won, ur_err *err)
{
    ur_job_liveness live = {finish_enter, finish_holder_dead, s};
    char who[256];
    int took_over = 0;
    ur_job_ledger_who(who, sizeof who, s->index, s->count);
    return ur_job_ledger_claim(s->kv, who, &live, won, &took_over, err);
}

/* Remove the staging directory of a published run: first renamed, in one step, to the name
 * of a dead run's publication staging (`<C>.<pid>.unroll-tmp`, which the next run to C
 * removes under its lock if this removal is cut short), so that a kill meanwhile never
 * leaves a half-removed run that looks staged. */
static void remove_staging(const ur_job_share *s)
{
    char *trash = ur_malloc(strlen(s->dest) + 40);
    ur_err ignored;
    if (trash == NULL) {
        return;
    }
    snprintf(trash, strlen(s->dest) + 40, "%s.%ld.unroll-tmp", s->dest, (long)getpid());
    if (ur_fs_rename(s->staging, trash, &ignored) == UR_OK) {
        ur_fs_remove_tree(trash, &ignored); /* the claim goes with it */
    } else {
        ur_fs_remove_tree(s->staging, &ignored); /* the name is taken: in place, then */
    }
    ur_free(trash);
}

/* The journal line of unit k: its identity and where it goes first. */
static int journal_line(const ur_job_share *s, size_t k, const char *to, ur_buf *j, ur_err *err)
{
    unsigned long long dev = 0, ino = 0;
    int rc = ur_fs_identity(s->staged[k], &dev, &ino, err);
    return rc == UR_OK ? ur_buf_printf(j, err, "%zu %llu %llu %s\n", k, dev, ino, to) : rc;
}

/* A publication that failed after the units were moved into its staging directory: they
 * come back (the journal says from where) before that directory is removed. */
static void take_units_back(void *ctx)
{
    ur_err ignored;
    (void)recover_units(ctx, 1, &ignored);
}

/* Move the finished units still staged (all of them, unless a killed finisher published some:
 * recover_units) into place under C together (unroll/job_publish.h) and remove the staging
 * directory. */
static int publish(ur_job_share *s, const volatile sig_atomic_t *cancel, char **published_to,
                   ur_err *err)
{
    const char **units = ur_calloc(s->n_units, sizeof *units);
    size_t *which = ur_calloc(s->n_units, sizeof *which), n = 0;
    const char *inputs[1] = {s->input};
    /* the overlap rules concern local paths (an object-store input cannot be under C) */
    size_t n_inputs = ur_kvstore_location_can(s->input, UR_KV_IS_PATH) ? 1 : 0;
    ur_job_publish *pub = NULL;
    ur_buf j;
    int rc = units != NULL && which != NULL ? UR_OK : ur_err_oom(err);

    ur_buf_init(&j, 0);
    for (size_t k = 0; units != NULL && which != NULL && k < s->n_units; k++) {
        if (ur_fs_exists(s->staged[k])) {
            which[n] = k;
            units[n++] = s->units[k];
        }
    }
    if (rc == UR_OK) {
        rc = ur_job_publish_begin(&pub, s->dest, units, n, inputs, n_inputs, err);
    }
    if (rc == UR_OK) {
        *published_to = ur_strdup(ur_job_publish_dest(pub));
        rc = *published_to != NULL ? UR_OK : ur_err_oom(err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = journal_line(s, which[i], ur_job_publish_staged(pub, i), &j, err);
    }
    if (rc == UR_OK) { /* where the units go, for a rerun after a kill (recover_units) */
        rc = ur_fs_write_file_in(s->staging, PUBLISHING_FILE, j.data, j.len, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(s->staging, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        rc = ur_fs_rename(s->staged[which[i]], ur_job_publish_staged(pub, i), err);
    }
    if (rc == UR_OK) {
        ur_job_publish_on_failure(pub, take_units_back, s);
        rc = ur_job_publish_commit(pub, cancel, err);
        pub = NULL;
    }
    if (rc < 0 && pub != NULL) {
        ur_err ignored;
        (void)recover_units(s, 1, &ignored); /* what was moved comes back for a rerun */
    }
    ur_job_publish_abort(pub);
    if (rc == UR_OK) {
        remove_staging(s);
    }
    ur_buf_dispose(&j);
    ur_free(units);
    ur_free(which);
    return rc;
}

/* The directory's publisher (job_finish.h): each unit built where the shares staged it, then
 * all of them published by rename (publish). */
static int dir_unit(void *ctx, size_t k, const char **dir, const char **shares_at, const char **as,
                    int *skip, ur_err *err)
{
    ur_job_share *s = ctx;
    /* a unit gone from the staging directory was published by a finisher killed since; a file
     * unit is staged in place by the shares */
    *skip = !ur_fs_exists(s->staged[k]) || !ur_job_finish_is_step(s->units[k]);
    *dir = s->staged[k];
    *shares_at = NULL;
    ur_free(s->unit_as);
    s->unit_as = ur_path_join(s->dest, s->units[k]);
    *as = s->unit_as;
    return s->unit_as != NULL ? UR_OK : ur_err_oom(err);
}

static int dir_commit(void *ctx, const volatile sig_atomic_t *cancel, ur_err *err)
{
    ur_job_share *s = ctx;
    return publish(s, cancel, &s->published_to, err);
}

static int finish(ur_job_share *s, const volatile sig_atomic_t *cancel, char **published_to,
                  ur_err *err)
{
    size_t staged = 0;
    int rc = recover_units(s, 1, err);
    for (size_t k = 0; k < s->n_units && rc == UR_OK; k++) {
        char *out;
        if (ur_fs_exists(s->staged[k])) {
            staged++;
            continue;
        }
        /* published by a finisher killed before it removed the staging directory */
        out = ur_path_join(s->dest, s->units[k]);
        if (out == NULL) {
            rc = ur_err_oom(err);
        } else if (!ur_fs_exists(out)) {
            rc = ur_err_set(err, UR_EIO,
                            "%s: the finished %s is gone and %s was not published: "
                            "remove %s and run every share again",
                            s->staging, s->units[k], out, s->staging);
        }
        ur_free(out);
    }
    if (rc == UR_OK && staged == 0) {
        const char *inputs[1] = {s->input};
        *published_to = ur_strdup(s->dest);
        /* the killed finisher's lock file and publication staging directory (first: its
         * name may be the one remove_staging renames to, the pid of a container's process
         * being the same on every run) */
        ur_job_publish_tidy(s->dest, (const char *const *)s->units, s->n_units, inputs,
                            ur_kvstore_location_can(s->input, UR_KV_IS_PATH) ? 1 : 0);
        remove_staging(s);
        return *published_to != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        ur_job_publisher pub = {dir_unit, dir_commit, s};
        rc = ur_job_finish_run(s->kv, s->staging, s->count, (const char *const *)s->units,
                               s->n_units, &pub, cancel, err);
        *published_to = s->published_to;
        s->published_to = NULL;
    }
    return rc;
}

int ur_job_share_finish(ur_job_share *s, const volatile sig_atomic_t *cancel, int *published,
                        int *missing, char **published_to, ur_err *err)
{
    int won = 0, rc = ur_job_ledger_missing(s->kv, s->count, NULL, missing, err);
    *published = 0;
    *published_to = NULL;
    if (rc < 0 || *missing != 0) {
        return rc;
    }
    rc = claim(s, &won, err);
    if (rc < 0 || !won) {
        return rc;
    }
    rc = finish(s, cancel, published_to, err);
    *published = rc == UR_OK;
    return rc;
}

/* Open a staged run from its run.txt (path: C or its staging directory), as `unroll merge`
 * or status (process index -1: no share of its own). */
static int open_staged(ur_job_share **out, const char *path, ur_err *err)
{
    ur_job_share *s = NULL;
    ur_job_run_info info;
    ur_buf run;
    char *dest;
    size_t n = ur_path_trimmed_len(path), sl = strlen(UR_JOB_SHARE_SUFFIX);
    int rc;

    if (n > sl && memcmp(path + n - sl, UR_JOB_SHARE_SUFFIX, sl) == 0) {
        n -= sl;
    }
    dest = ur_strndup(path, n);
    if (dest == NULL) {
        return ur_err_oom(err);
    }
    rc = share_new(&s, dest, NULL, 0, err);
    ur_free(dest);
    if (rc < 0) {
        return rc;
    }
    s->index = -1;
    memset(&info, 0, sizeof info);
    ur_buf_init(&run, 0);
    if (!ur_fs_is_dir(s->staging)) {
        rc = ur_err_set(err, UR_EINVAL, "%s: no multi-process run is staged there", s->staging);
    } else {
        rc = ur_kvstore_file_open(&s->kv, s->staging, 1, err);
    }
    if (rc == UR_OK) {
        rc = read_run(s, &run, err);
    }
    if (rc == UR_OK) {
        rc = ur_job_run_info_parse(&info, (const char *)run.data, s->staging, err);
    }
    if (rc == UR_OK && info.input == NULL) {
        rc = ur_err_set(err, UR_ECORRUPT, "%s/run.txt: no input", s->staging);
    }
    if (rc == UR_OK) {
        s->count = info.count;
        s->input = info.input;
        info.input = NULL;
        rc = info.n_units == 0 ? UR_OK : replace_units(s, &info, err);
    }
    ur_job_run_info_dispose(&info);
    ur_buf_dispose(&run);
    if (rc < 0) {
        ur_job_share_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

int ur_job_share_merge(const char *path, const volatile sig_atomic_t *cancel, char **published_to,
                       ur_err *err)
{
    ur_job_share *s = NULL;
    ur_buf names;
    int rc = open_staged(&s, path, err), won = 0, missing = 0;

    *published_to = NULL;
    if (rc < 0) {
        return rc;
    }
    ur_buf_init(&names, 0);
    rc = ur_job_ledger_missing(s->kv, s->count, &names, &missing, err);
    if (rc == UR_OK && missing > 0) {
        ur_buf_append(&names, "", 1, err);
        rc = ur_err_set(err, UR_EIO,
                        "%s: %d of %d shares are not complete (process index %s): rerun them "
                        "with --process-index, then merge",
                        s->staging, missing, s->count, (const char *)names.data);
    }
    if (rc == UR_OK) {
        rc = claim(s, &won, err);
    }
    if (rc == UR_OK && !won) {
        rc = ur_err_set(err, UR_EIO, "%s/" FINISH_LOCK ": another process is finishing this run",
                        s->staging);
    }
    if (rc == UR_OK) {
        rc = finish(s, cancel, published_to, err);
    }
    ur_buf_dispose(&names);
    ur_job_share_close(s);
    return rc;
}

int ur_job_share_status(const char *path, ur_buf *out, ur_err *err)
{
    ur_job_share *s = NULL;
    int rc = open_staged(&s, path, err);
    if (rc == UR_OK) {
        rc = ur_job_ledger_status(s->kv, s->count, s->staging, out, err);
    }
    ur_job_share_close(s);
    return rc;
}
