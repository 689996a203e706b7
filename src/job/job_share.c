/* A conversion shared by several processes: the staging directory, the shares' completion
 * markers, the exclusive claim of the finish, and the finish itself (merge + metadata +
 * publication). See include/unroll/job_share.h. */
#define _GNU_SOURCE /* gethostname in older glibc headers */

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/fs.h"
#include "unroll/job_publish.h"
#include "unroll/job_share.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"
#include "unroll/orbax.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CLAIM_GRACE_MS 300 /* see creator_gone */
#define PUBLISHING_FILE "publishing.txt"

#define STANDARD_HANDLER                                                                          \
    "orbax.checkpoint._src.handlers.standard_checkpoint_handler.StandardCheckpointHandler"
#define MAX_META ((size_t)1 << 30)

struct ur_job_share {
    char *dest;     /* C, as given (trailing '/' removed) */
    char *staging;  /* <C>.unroll-multi */
    char *step;     /* unit 0's staged step: staging/step, or staging/units/base/0 */
    char *items;    /* step/items */
    char *input;    /* from run.txt's "input " line */
    int count, index;
    int claim_fd;
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
};

/* A unit that is a step directory ("0", "base/0", "loras/<id>/0"), not a file. */
static int is_step_unit(const char *unit)
{
    const char *slash = strrchr(unit, '/');
    return strcmp(slash != NULL ? slash + 1 : unit, "0") == 0;
}

void ur_job_share_close(ur_job_share *s)
{
    if (s == NULL) {
        return;
    }
    if (s->claim_fd >= 0) {
        close(s->claim_fd); /* releases the flock */
    }
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
    ur_free(s);
}

/* The value of the line "<key> <value>" in text, ur_free it; NULL when absent. */
static char *line_value(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; p != NULL && *p != '\0';) {
        const char *nl = strchr(p, '\n');
        size_t n = nl != NULL ? (size_t)(nl - p) : strlen(p);
        if (n > kl && strncmp(p, key, kl) == 0 && p[kl] == ' ') {
            return ur_strndup(p + kl + 1, n - kl - 1);
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
    return NULL;
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

static int share_new(ur_job_share **out, const char *dest, const char *const *units,
                     size_t n_units, ur_err *err)
{
    ur_job_share *s = ur_calloc(1, sizeof *s);
    size_t n = ur_path_trimmed_len(dest);
    if (s == NULL) {
        return ur_err_oom(err);
    }
    s->claim_fd = -1;
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

/* Read run.txt of the staging directory into out. */
static int read_run(const ur_job_share *s, ur_buf *out, ur_err *err)
{
    char *path = ur_path_join(s->staging, "run.txt");
    int rc = path != NULL ? ur_fs_read_file(out, path, (size_t)16 << 20, err) : ur_err_oom(err);
    ur_free(path);
    if (rc == UR_OK) {
        rc = ur_buf_append(out, "", 1, err); /* NUL-terminated */
        out->len--;
    }
    return rc;
}

/* Create run.txt holding `text`, exclusively: a complete temporary file linked to the name,
 * so a reader never sees it half written and only one process creates it. *created = 1 when
 * this call did; otherwise the existing run.txt was left alone. */
static int create_run(const ur_job_share *s, const char *text, int *created, ur_err *err)
{
    char host[64] = "";
    char *tmp, *path = ur_path_join(s->staging, "run.txt");
    int rc;

    gethostname(host, sizeof host - 1);
    tmp = ur_path_joinf(s->staging, "run.txt.%s.%ld.tmp", host, (long)getpid());
    if (path == NULL || tmp == NULL) {
        ur_free(path);
        ur_free(tmp);
        return ur_err_oom(err);
    }
    *created = 0;
    rc = ur_fs_write_file(tmp, text, strlen(text), err);
    if (rc == UR_OK) {
        if (link(tmp, path) == 0) {
            *created = 1;
        } else if (errno != EEXIST) {
            rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot create");
        }
    }
    unlink(tmp);
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(s->staging, err);
    }
    ur_free(path);
    ur_free(tmp);
    return rc;
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
    struct stat st;
    return lstat(path, &st) == 0 && (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

/* One decimal field of a journal line and the spaces after it; false when there is none (a
 * line the finisher's write was cut short in). */
static bool journal_number(const char **p, unsigned long long *v)
{
    char *end;
    if (**p < '0' || **p > '9') {
        return false;
    }
    errno = 0;
    *v = strtoull(*p, &end, 10);
    if (errno != 0 || *end != ' ') {
        return false;
    }
    while (*end == ' ') {
        end++;
    }
    *p = end;
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
        if (rename(where, s->staged[k]) != 0) {
            return ur_err_set_os(err, UR_EIO, errno, where,
                                 "cannot move the finished unit back to %s", s->staged[k]);
        }
    }
    return UR_OK;
}

/* A finisher killed while it published leaves the journal: every unit it had moved into its
 * publication staging directory but not yet into C goes back, so that a rerun publishes the
 * rest (the units in C already stay: a unit whose staged path is gone is published) instead
 * of re-creating empty units that lack every other share's database. Only when no finisher is
 * alive (finish.claim not locked, or `held`: this process holds it). */
static int recover_units(ur_job_share *s, int held, ur_err *err)
{
    char *note = publishing_path(s), *claim_path = ur_path_join(s->staging, "finish.claim");
    ur_buf text;
    int fd = -1, rc = UR_OK;

    ur_buf_init(&text, 0);
    if (note == NULL || claim_path == NULL) {
        rc = ur_err_oom(err);
    } else if (ur_fs_exists(note)) {
        fd = held ? -1 : open(claim_path, O_RDWR | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
            rc = ur_err_set(err, UR_EIO, "%s: another process is publishing this run", claim_path);
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
    if (fd >= 0) {
        close(fd);
    }
    ur_buf_dispose(&text);
    ur_free(note);
    ur_free(claim_path);
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
        char *dir = is_step_unit(s->units[k])
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
    s->input = line_value(run_text, "input");
    shares = ur_path_join(s->staging, "shares");
    if (s->input == NULL || shares == NULL) {
        ur_free(shares);
        ur_job_share_close(s);
        return ur_err_oom(err);
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
        rc = recover_units(s, 0, err);
    }
    if (rc == UR_OK) {
        rc = make_units(s, err);
    }
    if (rc == UR_OK) {
        rc = create_run(s, (const char *)text.data, &created, err);
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

static char *done_path(const ur_job_share *s, int i)
{
    return ur_path_joinf(s->staging, "shares/%d.done", i);
}

int ur_job_share_is_done(const ur_job_share *s, int i)
{
    char *p = done_path(s, i);
    int done = p != NULL && ur_fs_exists(p);
    ur_free(p);
    return done;
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

static char *progress_path(const ur_job_share *s)
{
    return unit_file(s, s->cur, ".progress");
}

/* The saved resume point of the current unit, 0 when none (or unreadable: the unit is then
 * redone). */
static uint64_t saved_progress(const ur_job_share *s)
{
    char *p = progress_path(s),
         *db = ur_path_joinf(s->staged[s->cur], "items/ocdbt.process_%d/manifest.ocdbt", s->index);
    uint64_t v = 0;
    ur_buf b;
    ur_err ignored;
    ur_buf_init(&b, 0);
    if (p != NULL && db != NULL && ur_fs_exists(db) &&
        ur_fs_read_file(&b, p, 256, &ignored) == UR_OK &&
        ur_buf_append(&b, "", 1, &ignored) == UR_OK) {
        const char *t = (const char *)b.data;
        if (strncmp(t, "next_item ", 10) == 0 && t[10] >= '0' && t[10] <= '9') {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(t + 10, &end, 10);
            v = errno == 0 && (*end == '\0' || *end == '\n') ? n : 0;
        }
    }
    ur_buf_dispose(&b);
    ur_free(p);
    ur_free(db);
    return v;
}

uint64_t ur_job_share_saved_progress(const ur_job_share *s)
{
    return saved_progress(s);
}

/* Hold shares/<index>.lock while the share runs: the same index started twice (a launcher
 * misconfigured, a rerun while the first still runs) would write one database twice. */
static int lock_share(ur_job_share *s, ur_err *err)
{
    char *p = ur_path_joinf(s->staging, "shares/%d.lock", s->index);
    int fd, rc = UR_OK;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, p, "cannot open");
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        rc = ur_err_set(err, UR_EIO, "%s: share %d is being run by another process", p, s->index);
    } else {
        s->share_fd = fd;
    }
    ur_free(p);
    return rc;
}

int ur_job_share_lock(ur_job_share *s, ur_err *err)
{
    char *p = done_path(s, s->index);
    /* held already when the caller took it before replacing its tree (job_site_bucket.c) */
    int rc = p == NULL ? ur_err_oom(err) : s->share_fd >= 0 ? UR_OK : lock_share(s, err);
    if (rc == UR_OK) {
        rc = ur_fs_remove_tree(p, err);
    }
    ur_free(p);
    return rc;
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
    prog = progress_path(s);
    if (s->meta_dir == NULL || prog == NULL) {
        ur_free(prog);
        return ur_err_oom(err);
    }
    *resume_from = saved_progress(s);
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
    char *p = progress_path(s), *tmp = unit_file(s, s->cur, ".progress.tmp");
    char text[64];
    int rc = p != NULL && tmp != NULL ? UR_OK : ur_err_oom(err);
    snprintf(text, sizeof text, "next_item %llu\n", (unsigned long long)next_item);
    if (rc == UR_OK) {
        rc = ur_fs_write_file(tmp, text, strlen(text), err);
    }
    if (rc == UR_OK && rename(tmp, p) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, p, "cannot rename %s into place", tmp);
    }
    ur_free(p);
    ur_free(tmp);
    return rc;
}

int ur_job_share_mark_done(ur_job_share *s, const char *summary, ur_err *err)
{
    char *p = done_path(s, s->index), *tmp = NULL, *dir = NULL;
    int rc = UR_OK;
    if (p != NULL) {
        tmp = ur_path_joinf(s->staging, "shares/%d.done.tmp", s->index);
        dir = ur_path_join(s->staging, "shares");
    }
    if (p == NULL || tmp == NULL || dir == NULL) {
        rc = ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file(tmp, summary, strlen(summary), err);
    }
    if (rc == UR_OK && rename(tmp, p) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, p, "cannot rename %s into place", tmp);
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(dir, err);
    }
    ur_free(p);
    ur_free(tmp);
    ur_free(dir);
    return rc;
}

/* The exclusive claim of the finish: finish.claim created with O_EXCL (the first process
 * to see every share done) and flock'ed for as long as it finishes. A claim file whose lock
 * can be taken belongs to a finisher that died: taken over when it names its holder (the
 * holder writes its name only once locked), or when `force` (unroll merge). */
/* An empty claim file whose lock this process holds: its creator is between its exclusive
 * create and its lock (a moment), or was killed there and will never finish. Let go, give it
 * CLAIM_GRACE_MS, and lock again: 1 (locked again: the creator is gone, take the claim over)
 * or 0 (the creator took its lock: it finishes). */
static int creator_gone(int fd)
{
    struct timespec grace = {0, CLAIM_GRACE_MS * 1000000L};
    (void)flock(fd, LOCK_UN);
    nanosleep(&grace, NULL);
    return flock(fd, LOCK_EX | LOCK_NB) == 0;
}

static int claim(ur_job_share *s, int force, int *won, ur_err *err)
{
    char *path = ur_path_join(s->staging, "finish.claim");
    char who[128], host[64] = "";
    struct stat st;
    int fd, rc = UR_OK, fresh = 1;

    *won = 0;
    if (path == NULL) {
        return ur_err_oom(err);
    }
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST) {
        fresh = 0;
        fd = open(path, O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot open");
        goto out;
    }
    /* the creator waits out a process that locked the fresh, still empty file for a moment
     * (it lets go, seeing it empty) */
    if (flock(fd, fresh ? LOCK_EX : LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) { /* not "another process is finishing": nobody would */
            rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot lock");
        }
        close(fd); /* another process is finishing */
        goto out;
    }
    if (fresh && (fstat(fd, &st) != 0 || st.st_nlink == 0 || st.st_size > 0)) {
        close(fd); /* while it waited, the claim was taken over (its creator seemed dead) */
        goto out;
    }
    if (!fresh && !force && (fstat(fd, &st) != 0 || st.st_size == 0) && !creator_gone(fd)) {
        close(fd); /* just created by another process, which now holds it */
        goto out;
    }
    gethostname(host, sizeof host - 1);
    snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, who, strlen(who), 0) < 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot write");
        close(fd);
        goto out;
    }
    s->claim_fd = fd;
    *won = 1;
out:
    ur_free(path);
    return rc;
}

/* Read share i's metadata file `name` of unit k, staging/shares/<i>[.u<k>]/<name> (absent:
 * empty, *present = 0). */
static int read_share_file(const ur_job_share *s, size_t k, int i, const char *name, ur_buf *out,
                           int *present, ur_err *err)
{
    char *p = k == 0 ? ur_path_joinf(s->staging, "shares/%d/%s", i, name)
                     : ur_path_joinf(s->staging, "shares/%d.u%zu/%s", i, k, name);
    int rc = UR_OK;
    out->len = 0;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    *present = ur_fs_exists(p);
    if (*present) {
        rc = ur_fs_read_file(out, p, MAX_META, err);
    }
    ur_free(p);
    return rc;
}

/* Every share's metadata must be share 0's (the same plan), which is returned. */
static int same_metadata(const ur_job_share *s, size_t k, const char *name, ur_buf *first,
                         int *present, ur_err *err)
{
    ur_buf other;
    int rc = read_share_file(s, k, 0, name, first, present, err), has = 0;
    ur_buf_init(&other, 0);
    for (int i = 1; i < s->count && rc == UR_OK; i++) {
        rc = read_share_file(s, k, i, name, &other, &has, err);
        if (rc == UR_OK && (has != *present || other.len != first->len ||
                            memcmp(other.data, first->data, first->len) != 0)) {
            rc = ur_err_set(err, UR_ECORRUPT,
                            "%s/shares/%d: %s of %s differs from share 0's: the shares come "
                            "from different plans",
                            s->staging, i, name, s->units[k]);
        }
    }
    ur_buf_dispose(&other);
    return rc;
}

/* What an earlier finisher that died may have left in unit k's step. */
static int clear_finish(const ur_job_share *s, size_t k, const char *items, ur_err *err)
{
    static const char *const item_files[] = {
        "manifest.ocdbt",  "manifest.ocdbt.partial", "d", "_METADATA", "_sharding",
        "array_metadatas", "commit_success.txt"};
    static const char *const step_files[] = {"_CHECKPOINT_METADATA", "commit_success.txt"};
    int rc = UR_OK;
    for (size_t i = 0; i < sizeof item_files / sizeof *item_files && rc == UR_OK; i++) {
        char *p = ur_path_join(items, item_files[i]);
        rc = p != NULL ? ur_fs_remove_tree(p, err) : ur_err_oom(err);
        ur_free(p);
    }
    for (size_t i = 0; i < sizeof step_files / sizeof *step_files && rc == UR_OK; i++) {
        char *p = ur_path_join(s->staged[k], step_files[i]);
        rc = p != NULL ? ur_fs_remove_tree(p, err) : ur_err_oom(err);
        ur_free(p);
    }
    return rc;
}

static int merge_databases(const ur_job_share *s, const char *items, ur_err *err)
{
    char **names = ur_calloc((size_t)s->count, sizeof *names);
    ur_ocdbt_write_opts o;
    int rc = names != NULL ? UR_OK : ur_err_oom(err);

    for (int i = 0; i < s->count && rc == UR_OK; i++) {
        char *m;
        names[i] = ur_malloc(32);
        if (names[i] == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        snprintf(names[i], 32, "ocdbt.process_%d", i);
        m = ur_path_joinf(items, "%s/manifest.ocdbt", names[i]);
        if (m == NULL) {
            rc = ur_err_oom(err);
        } else if (!ur_fs_exists(m)) {
            rc = ur_err_set(err, UR_EIO, "%s: share %d has no database", m, i);
        }
        ur_free(m);
    }
    if (rc == UR_OK) {
        ur_ocdbt_write_opts_init(&o);
        o.seed = 0x756e726f6c6c00ffull; /* the same shares give the same bytes */
        rc = ur_ocdbt_merge(items, (const char *const *)names, (size_t)s->count, &o, err);
    }
    for (int i = 0; names != NULL && i < s->count; i++) {
        ur_free(names[i]);
    }
    ur_free(names);
    return rc;
}

/* Unit k's top-level metadata from share 0's (checked equal in every share). */
static int write_item_metadata(const ur_job_share *s, size_t k, const char *items, ur_err *err)
{
    ur_buf b;
    int present = 0, rc;
    char *dir = NULL;

    ur_buf_init(&b, 0);
    rc = same_metadata(s, k, "_METADATA", &b, &present, err);
    if (rc == UR_OK && !present) {
        rc = ur_err_set(err, UR_EIO, "%s/shares/0: the _METADATA of %s is missing", s->staging,
                        s->units[k]);
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file_in(items, "_METADATA", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = same_metadata(s, k, "_sharding", &b, &present, err);
    }
    if (rc == UR_OK && present) {
        rc = ur_fs_write_file_in(items, "_sharding", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = same_metadata(s, k, "array_metadatas.json", &b, &present, err);
    }
    if (rc == UR_OK && present) {
        dir = ur_path_join(items, "array_metadatas");
        rc = dir != NULL ? ur_fs_mkdirs(dir, err) : ur_err_oom(err);
        if (rc == UR_OK) {
            rc = ur_fs_write_file_in(dir, "process_0", b.data, b.len, err);
        }
        if (rc == UR_OK) {
            rc = ur_fs_fsync_dir(dir, err);
        }
    }
    ur_free(dir);
    ur_buf_dispose(&b);
    return rc;
}

/* commit_success.txt in items and step, _CHECKPOINT_METADATA in step, as Orbax's
 * CheckpointManager writes them for step 0 (unit k's step). */
static int write_step_metadata(const ur_job_share *s, size_t k, const char *items, ur_err *err)
{
    const char *step = s->staged[k];
    const char *item_names[1] = {"items"};
    const char *handlers[1] = {STANDARD_HANDLER};
    ur_orbax_step_meta sm;
    struct stat st;
    ur_buf b, custom;
    char *run = ur_path_join(s->staging, "run.txt");
    int rc, has_custom = 0;

    ur_buf_init(&b, 0);
    ur_buf_init(&custom, 0);
    memset(&sm, 0, sizeof sm);
    sm.n_item_handlers = 1;
    sm.item_names = item_names;
    sm.item_handlers = handlers;
    sm.has_init_timestamp = 1;
    /* the run started when its first process created run.txt */
    if (!ur_clock_fixed_ns(&sm.init_timestamp_nsecs)) {
        sm.init_timestamp_nsecs = run != NULL && stat(run, &st) == 0
                                      ? (int64_t)st.st_mtim.tv_sec * 1000000000 +
                                            st.st_mtim.tv_nsec
                                      : ur_clock_now_ns();
    }
    sm.has_commit_timestamp = 1;
    sm.commit_timestamp_nsecs = ur_clock_stamp_ns();
    rc = same_metadata(s, k, UR_ORBAX_CUSTOM_METADATA_FILE, &custom, &has_custom, err);
    if (rc == UR_OK && has_custom) { /* absent: a share of an older unroll, {} as it wrote */
        rc = ur_buf_append_byte(&custom, '\0', err);
        sm.custom_metadata_json = (const char *)custom.data;
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(&b, err, "Checkpoint commit was successful to %s/%s", s->dest,
                           s->units[k]);
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file_in(items, "commit_success.txt", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file_in(step, "commit_success.txt", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        ur_buf_reset(&b);
        rc = ur_orbax_ckpt_meta_emit(&b, &sm, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file_in(step, "_CHECKPOINT_METADATA", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(items, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(step, err);
    }
    ur_free(run);
    ur_buf_dispose(&b);
    ur_buf_dispose(&custom);
    return rc;
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
    if (rename(s->staging, trash) == 0) {
        ur_fs_remove_tree(trash, &ignored); /* the claim goes with it */
    } else {
        ur_fs_remove_tree(s->staging, &ignored); /* the name is taken: in place, then */
    }
    ur_free(trash);
}

/* The journal line of unit k: its identity and where it goes first. */
static int journal_line(const ur_job_share *s, size_t k, const char *to, ur_buf *j, ur_err *err)
{
    struct stat st;
    if (lstat(s->staged[k], &st) != 0) {
        return ur_err_set_os(err, UR_EIO, errno, s->staged[k], "cannot stat");
    }
    return ur_buf_printf(j, err, "%zu %llu %llu %s\n", k, (unsigned long long)st.st_dev,
                         (unsigned long long)st.st_ino, to);
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
        if (rename(s->staged[which[i]], ur_job_publish_staged(pub, i)) != 0) {
            rc = ur_err_set_os(err, UR_EIO, errno, s->staged[which[i]], "cannot move to %s",
                               ur_job_publish_staged(pub, i));
        }
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

/* Unit k's top-level database and metadata (an earlier finisher's leftovers cleared first). */
static int finish_unit(ur_job_share *s, size_t k, ur_err *err)
{
    char *items = ur_path_join(s->staged[k], "items");
    int rc = items != NULL ? clear_finish(s, k, items, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = write_item_metadata(s, k, items, err); /* first: it checks the shares agree */
    }
    if (rc == UR_OK) {
        rc = merge_databases(s, items, err);
    }
    if (rc == UR_OK) {
        rc = write_step_metadata(s, k, items, err);
    }
    ur_free(items);
    return rc;
}

/* run.txt's text into the first unit's staged step, published with it (kept_run_path). */
static int keep_run_text(const ur_job_share *s, ur_err *err)
{
    ur_buf text;
    int rc;
    ur_buf_init(&text, 0);
    rc = read_run(s, &text, err);
    if (rc == UR_OK) {
        rc = ur_fs_write_file_in(s->staged[0], UR_JOB_SHARE_RUN_KEPT, text.data, text.len, err);
    }
    ur_buf_dispose(&text);
    return rc;
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
    for (size_t k = 0; k < s->n_units && rc == UR_OK; k++) {
        if (is_step_unit(s->units[k]) && ur_fs_exists(s->staged[k])) {
            rc = finish_unit(s, k, err);
        }
    }
    if (rc == UR_OK && ur_fs_exists(s->staged[0])) {
        rc = keep_run_text(s, err);
    }
    if (rc == UR_OK && cancel != NULL && *cancel) {
        rc = ur_err_set(err, UR_ECANCELED, "interrupted");
    }
    if (rc == UR_OK) {
        rc = publish(s, cancel, published_to, err);
    }
    return rc;
}

static int count_missing(const ur_job_share *s, ur_buf *names, ur_err *err)
{
    int missing = 0, rc = UR_OK;
    for (int i = 0; i < s->count; i++) {
        if (!ur_job_share_is_done(s, i)) {
            missing++;
            if (names != NULL && missing <= 16) {
                rc = ur_buf_printf(names, err, "%s%d", missing > 1 ? ", " : "", i);
            }
        }
    }
    if (names != NULL && missing > 16 && rc == UR_OK) {
        rc = ur_buf_printf(names, err, ", ...");
    }
    return rc < 0 ? rc : missing;
}

int ur_job_share_finish(ur_job_share *s, const volatile sig_atomic_t *cancel, int *published,
                        int *missing, char **published_to, ur_err *err)
{
    int won = 0, rc;
    *published = 0;
    *published_to = NULL;
    *missing = count_missing(s, NULL, err);
    if (*missing != 0) {
        return UR_OK;
    }
    rc = claim(s, 0, &won, err);
    if (rc < 0 || !won) {
        return rc;
    }
    rc = finish(s, cancel, published_to, err);
    *published = rc == UR_OK;
    return rc;
}

/* The units named by run.txt's "unit <name>" lines (none: the one "0"), in place of the
 * ones share_new set. */
static int units_from_run(ur_job_share *s, const char *text, ur_err *err)
{
    char **units = NULL;
    size_t n = 0, cap = 0;
    int rc = UR_OK;
    for (const char *p = text; p != NULL && *p != '\0' && rc == UR_OK;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        if (len > 5 && strncmp(p, "unit ", 5) == 0) {
            char **more = ur_grow(units, &cap, n, sizeof *more, 8);
            if (more == NULL) {
                rc = ur_err_oom(err);
                break;
            }
            units = more;
            units[n] = ur_strndup(p + 5, len - 5);
            rc = units[n++] != NULL ? UR_OK : ur_err_oom(err);
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
    if (rc == UR_OK && n > 0) {
        for (size_t k = 0; k < s->n_units; k++) {
            ur_free(s->units[k]);
            ur_free(s->staged[k]);
        }
        ur_free(s->units);
        ur_free(s->staged);
        s->units = NULL;
        s->staged = NULL;
        s->n_units = 0;
        rc = set_units(s, (const char *const *)units, n) == UR_OK ? UR_OK : ur_err_oom(err);
    }
    for (size_t k = 0; k < n; k++) {
        ur_free(units[k]);
    }
    ur_free(units);
    return rc;
}

/* Open a staged run from its run.txt (path: C or its staging directory). */
static int open_staged(ur_job_share **out, const char *path, ur_err *err)
{
    ur_job_share *s = NULL;
    ur_buf run;
    char *dest, *count = NULL;
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
    ur_buf_init(&run, 0);
    if (!ur_fs_is_dir(s->staging)) {
        rc = ur_err_set(err, UR_EINVAL, "%s: no multi-process run is staged there", s->staging);
    } else {
        rc = read_run(s, &run, err);
    }
    if (rc == UR_OK) {
        char *end = NULL;
        long c;
        count = line_value((const char *)run.data, "processes");
        s->input = line_value((const char *)run.data, "input");
        c = count != NULL ? strtol(count, &end, 10) : 0;
        if (s->input == NULL || count == NULL || *end != '\0' || c < 1 || c > UR_JOB_SHARE_MAX) {
            rc = ur_err_set(err, UR_ECORRUPT, "%s/run.txt: no process count or input", s->staging);
        }
        s->count = (int)c;
    }
    if (rc == UR_OK) {
        rc = units_from_run(s, (const char *)run.data, err);
    }
    ur_free(count);
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
    int rc = open_staged(&s, path, err), won = 0, missing;

    *published_to = NULL;
    if (rc < 0) {
        return rc;
    }
    ur_buf_init(&names, 0);
    missing = count_missing(s, &names, err);
    rc = missing < 0 ? missing : UR_OK;
    if (missing > 0) {
        ur_buf_append(&names, "", 1, err);
        rc = ur_err_set(err, UR_EIO,
                        "%s: %d of %d shares are not complete (process index %s): rerun them "
                        "with --process-index, then merge",
                        s->staging, missing, s->count, (const char *)names.data);
    }
    if (rc == UR_OK) {
        rc = claim(s, 1, &won, err);
    }
    if (rc == UR_OK && !won) {
        rc = ur_err_set(err, UR_EIO, "%s/finish.claim: another process is finishing this run",
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
    ur_buf summary;
    int rc = open_staged(&s, path, err), done = 0;

    if (rc < 0) {
        return rc;
    }
    ur_buf_init(&summary, 0);
    for (int i = 0; i < s->count && rc == UR_OK; i++) {
        char *p = done_path(s, i);
        if (p == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        if (ur_fs_exists(p)) {
            done++;
            rc = ur_fs_read_file(&summary, p, 4096, err);
            while (rc == UR_OK && summary.len > 0 && summary.data[summary.len - 1] == '\n') {
                summary.len--;
            }
            if (rc == UR_OK) {
                rc = ur_buf_printf(out, err, "share %d: complete: %.*s\n", i, (int)summary.len,
                                   (const char *)summary.data);
            }
        } else {
            rc = ur_buf_printf(out, err, "share %d: not complete\n", i);
        }
        ur_free(p);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(out, err,
                           "%d of %d shares complete; %s: not a checkpoint until the last "
                           "share (or unroll merge) publishes it\n",
                           done, s->count, s->staging);
    }
    ur_buf_dispose(&summary);
    ur_job_share_close(s);
    return rc;
}
