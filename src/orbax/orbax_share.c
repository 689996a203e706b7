/* A conversion shared by several processes: the staging directory, the shares' completion
 * markers, the exclusive claim of the finish, and the finish itself (merge + metadata +
 * publication). See include/unroll/orbax_share.h. */
#define _GNU_SOURCE /* gethostname in older glibc headers */
#include "orbax_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/ocdbt.h"
#include "unroll/orbax_publish.h"
#include "unroll/orbax_share.h"

#include <errno.h>
#include <fcntl.h>
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

struct ur_orbax_share {
    char *dest;     /* C, as given (trailing '/' removed) */
    char *staging;  /* <C>.unroll-multi */
    char *step;     /* staging/step */
    char *items;    /* staging/step/items */
    char *meta_dir; /* staging/shares/<index> */
    char *input;    /* from run.txt's "input " line */
    int count, index;
    int claim_fd;
    int share_fd; /* shares/<index>.lock, held while this share runs */
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ur_orbax_share_close(ur_orbax_share *s)
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

static int share_new(ur_orbax_share **out, const char *dest, ur_err *err)
{
    ur_orbax_share *s = ur_calloc(1, sizeof *s);
    size_t n = strlen(dest);
    if (s == NULL) {
        return ur_err_oom(err);
    }
    s->claim_fd = -1;
    s->share_fd = -1;
    while (n > 1 && dest[n - 1] == '/') {
        n--;
    }
    s->dest = ur_strndup(dest, n);
    s->staging = ur_malloc(n + sizeof UR_ORBAX_SHARE_SUFFIX);
    if (s->staging != NULL) {
        memcpy(s->staging, dest, n);
        memcpy(s->staging + n, UR_ORBAX_SHARE_SUFFIX, sizeof UR_ORBAX_SHARE_SUFFIX);
        s->step = ur_path_join(s->staging, "step");
    }
    if (s->step != NULL) {
        s->items = ur_path_join(s->step, "items");
    }
    if (s->dest == NULL || s->items == NULL) {
        ur_orbax_share_close(s);
        return ur_err_oom(err);
    }
    *out = s;
    return UR_OK;
}

/* Read run.txt of the staging directory into out. */
static int read_run(const ur_orbax_share *s, ur_buf *out, ur_err *err)
{
    char *path = ur_path_join(s->staging, "run.txt");
    int rc = path != NULL ? ur_fs_read_file(out, path, 1 << 20, err) : ur_err_oom(err);
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
static int create_run(const ur_orbax_share *s, const char *text, int *created, ur_err *err)
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

/* staging/publishing.txt: where publish() moved the finished step (written before the move) */
static char *publishing_path(const ur_orbax_share *s)
{
    return ur_path_join(s->staging, PUBLISHING_FILE);
}

/* 1 when a finisher moved the step out to publish it (the step is gone and publishing.txt
 * names where it went), 0 when the step is the run's own (or not made yet). */
static int step_taken(const ur_orbax_share *s)
{
    char *note = publishing_path(s);
    int taken = note != NULL && !ur_fs_is_dir(s->step) && ur_fs_exists(note);
    ur_free(note);
    return taken;
}

/* A finisher killed between moving the finished step into its publication staging directory
 * and the commit leaves the step there: move it back, so that a rerun finishes the run again
 * instead of re-creating an empty step that lacks every other share's database. Only when no
 * finisher is alive (finish.claim not locked); when the step is not there any more the
 * publication completed (finish() then reports it). */
static int recover_step(ur_orbax_share *s, ur_err *err)
{
    char *note = publishing_path(s), *claim_path = ur_path_join(s->staging, "finish.claim");
    ur_buf where;
    int fd = -1, rc = UR_OK;

    ur_buf_init(&where, 0);
    if (note == NULL || claim_path == NULL) {
        rc = ur_err_oom(err);
    } else if (!ur_fs_is_dir(s->step) && ur_fs_exists(note)) {
        fd = open(claim_path, O_RDWR | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
            rc = ur_err_set(err, UR_EIO, "%s: another process is publishing this run", claim_path);
        }
        if (rc == UR_OK) {
            rc = ur_fs_read_file(&where, note, 4096, err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append(&where, "", 1, err);
        }
        if (rc == UR_OK && ur_fs_is_dir((const char *)where.data)) {
            if (rename((const char *)where.data, s->step) != 0) {
                rc = ur_err_set_os(err, UR_EIO, errno, (const char *)where.data,
                                   "cannot move the finished step back to %s", s->step);
            } else {
                (void)unlink(note);
                rc = ur_fs_fsync_dir(s->staging, err);
            }
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    ur_buf_dispose(&where);
    ur_free(note);
    ur_free(claim_path);
    return rc;
}

int ur_orbax_share_open(ur_orbax_share **out, const char *dest, int count, int index,
                        const char *run_text, ur_err *err)
{
    ur_orbax_share *s = NULL;
    ur_buf have;
    char *shares = NULL;
    int rc, created = 0;

    if (count < 1 || count > UR_ORBAX_SHARE_MAX || index < 0 || index >= count) {
        return ur_err_set(err, UR_EINVAL, "process index %d of %d processes is out of range",
                          index, count);
    }
    rc = share_new(&s, dest, err);
    if (rc < 0) {
        return rc;
    }
    s->count = count;
    s->index = index;
    s->input = line_value(run_text, "input");
    shares = ur_path_join(s->staging, "shares");
    s->meta_dir = shares != NULL ? ur_path_joinf(shares, "%d", index) : NULL;
    if (s->input == NULL || s->meta_dir == NULL) {
        ur_free(shares);
        ur_orbax_share_close(s);
        return ur_err_oom(err);
    }
    ur_buf_init(&have, 0);
    rc = ur_fs_mkdirs(shares, err);
    if (rc == UR_OK) {
        rc = recover_step(s, err);
    }
    if (rc == UR_OK && (rc = step_taken(s)) == 0) {
        rc = ur_fs_mkdirs(s->items, err);
    } else if (rc > 0) {
        rc = UR_OK; /* published already: finish() says so and removes the staging */
    }
    if (rc == UR_OK) {
        rc = create_run(s, run_text, &created, err);
    }
    if (rc == UR_OK && !created) {
        rc = read_run(s, &have, err);
        if (rc == UR_OK && strcmp((const char *)have.data, run_text) != 0) {
            rc = ur_err_set(err, UR_EINVAL,
                            "%s/run.txt: a multi-process run with other arguments or another "
                            "input is staged there (remove %s to start over)",
                            s->staging, s->staging);
        }
    }
    ur_buf_dispose(&have);
    ur_free(shares);
    if (rc < 0) {
        ur_orbax_share_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

static char *done_path(const ur_orbax_share *s, int i)
{
    return ur_path_joinf(s->staging, "shares/%d.done", i);
}

int ur_orbax_share_is_done(const ur_orbax_share *s, int i)
{
    char *p = done_path(s, i);
    int done = p != NULL && ur_fs_exists(p);
    ur_free(p);
    return done;
}

const char *ur_orbax_share_step(const ur_orbax_share *s)
{
    return s->step;
}

static char *progress_path(const ur_orbax_share *s)
{
    return ur_path_joinf(s->staging, "shares/%d.progress", s->index);
}

/* The saved resume point, 0 when none (or unreadable: the share is then redone). */
static uint64_t saved_progress(const ur_orbax_share *s)
{
    char *p = progress_path(s),
         *db = ur_path_joinf(s->items, "ocdbt.process_%d/manifest.ocdbt", s->index);
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

/* Hold shares/<index>.lock while the share runs: the same index started twice (a launcher
 * misconfigured, a rerun while the first still runs) would write one database twice. */
static int lock_share(ur_orbax_share *s, ur_err *err)
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

int ur_orbax_share_begin(ur_orbax_share *s, const char **meta_dir, uint64_t *resume_from,
                         ur_err *err)
{
    char *p = done_path(s, s->index), *prog = progress_path(s);
    int rc = p != NULL && prog != NULL ? lock_share(s, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_fs_remove_tree(p, err);
    }
    *resume_from = rc == UR_OK ? saved_progress(s) : 0;
    if (rc == UR_OK && *resume_from == 0) {
        rc = ur_fs_remove_tree(prog, err);
        if (rc == UR_OK) {
            rc = ur_fs_remove_tree(s->meta_dir, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_fs_mkdirs(s->meta_dir, err);
    }
    ur_free(p);
    ur_free(prog);
    *meta_dir = s->meta_dir;
    return rc;
}

int ur_orbax_share_save_progress(ur_orbax_share *s, uint64_t next_item, ur_err *err)
{
    char *p = progress_path(s),
         *tmp = ur_path_joinf(s->staging, "shares/%d.progress.tmp", s->index);
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

int ur_orbax_share_mark_done(ur_orbax_share *s, const char *summary, ur_err *err)
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

static int claim(ur_orbax_share *s, int force, int *won, ur_err *err)
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

/* Read staging/shares/<i>/<name> (absent: empty, *present = 0). */
static int read_share_file(const ur_orbax_share *s, int i, const char *name, ur_buf *out,
                           int *present, ur_err *err)
{
    char *p = ur_path_joinf(s->staging, "shares/%d/%s", i, name);
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
static int same_metadata(const ur_orbax_share *s, const char *name, ur_buf *first, int *present,
                         ur_err *err)
{
    ur_buf other;
    int rc = read_share_file(s, 0, name, first, present, err), has = 0;
    ur_buf_init(&other, 0);
    for (int i = 1; i < s->count && rc == UR_OK; i++) {
        rc = read_share_file(s, i, name, &other, &has, err);
        if (rc == UR_OK && (has != *present || other.len != first->len ||
                            memcmp(other.data, first->data, first->len) != 0)) {
            rc = ur_err_set(err, UR_ECORRUPT,
                            "%s/shares/%d/%s differs from share 0's: the shares come from "
                            "different plans",
                            s->staging, i, name);
        }
    }
    ur_buf_dispose(&other);
    return rc;
}

static int write_in(const char *dir, const char *name, const void *p, size_t n, ur_err *err)
{
    char *path = ur_path_join(dir, name);
    int rc = path != NULL ? ur_fs_write_file(path, p, n, err) : ur_err_oom(err);
    ur_free(path);
    return rc;
}

/* What an earlier finisher that died may have left in the step. */
static int clear_finish(const ur_orbax_share *s, ur_err *err)
{
    static const char *const item_files[] = {
        "manifest.ocdbt",  "manifest.ocdbt.partial", "d", "_METADATA", "_sharding",
        "array_metadatas", "commit_success.txt"};
    static const char *const step_files[] = {"_CHECKPOINT_METADATA", "commit_success.txt"};
    int rc = UR_OK;
    for (size_t i = 0; i < sizeof item_files / sizeof *item_files && rc == UR_OK; i++) {
        char *p = ur_path_join(s->items, item_files[i]);
        rc = p != NULL ? ur_fs_remove_tree(p, err) : ur_err_oom(err);
        ur_free(p);
    }
    for (size_t i = 0; i < sizeof step_files / sizeof *step_files && rc == UR_OK; i++) {
        char *p = ur_path_join(s->step, step_files[i]);
        rc = p != NULL ? ur_fs_remove_tree(p, err) : ur_err_oom(err);
        ur_free(p);
    }
    return rc;
}

static int merge_databases(const ur_orbax_share *s, ur_err *err)
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
        m = ur_path_joinf(s->items, "%s/manifest.ocdbt", names[i]);
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
        rc = ur_ocdbt_merge(s->items, (const char *const *)names, (size_t)s->count, &o, err);
    }
    for (int i = 0; names != NULL && i < s->count; i++) {
        ur_free(names[i]);
    }
    ur_free(names);
    return rc;
}

/* Top-level metadata from share 0's (checked equal in every share). */
static int write_item_metadata(const ur_orbax_share *s, ur_err *err)
{
    ur_buf b;
    int present = 0, rc;
    char *dir = NULL;

    ur_buf_init(&b, 0);
    rc = same_metadata(s, "_METADATA", &b, &present, err);
    if (rc == UR_OK && !present) {
        rc = ur_err_set(err, UR_EIO, "%s/shares/0/_METADATA is missing", s->staging);
    }
    if (rc == UR_OK) {
        rc = write_in(s->items, "_METADATA", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = same_metadata(s, "_sharding", &b, &present, err);
    }
    if (rc == UR_OK && present) {
        rc = write_in(s->items, "_sharding", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = same_metadata(s, "array_metadatas.json", &b, &present, err);
    }
    if (rc == UR_OK && present) {
        dir = ur_path_join(s->items, "array_metadatas");
        rc = dir != NULL ? ur_fs_mkdirs(dir, err) : ur_err_oom(err);
        if (rc == UR_OK) {
            rc = write_in(dir, "process_0", b.data, b.len, err);
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
 * CheckpointManager writes them for step 0. */
static int write_step_metadata(const ur_orbax_share *s, ur_err *err)
{
    const char *item_names[1] = {"items"};
    const char *handlers[1] = {STANDARD_HANDLER};
    ur_orbax_step_meta sm;
    struct stat st;
    ur_buf b;
    char *run = ur_path_join(s->staging, "run.txt");
    int rc;

    ur_buf_init(&b, 0);
    memset(&sm, 0, sizeof sm);
    sm.n_item_handlers = 1;
    sm.item_names = item_names;
    sm.item_handlers = handlers;
    sm.has_init_timestamp = 1;
    /* the run started when its first process created run.txt */
    sm.init_timestamp_nsecs = run != NULL && stat(run, &st) == 0
                                  ? (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec
                                  : now_ns();
    sm.has_commit_timestamp = 1;
    sm.commit_timestamp_nsecs = now_ns();
    rc = ur_buf_printf(&b, err, "Checkpoint commit was successful to %s/0", s->dest);
    if (rc == UR_OK) {
        rc = write_in(s->items, "commit_success.txt", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = write_in(s->step, "commit_success.txt", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        ur_buf_reset(&b);
        rc = ur_orbax_ckpt_meta_emit(&b, &sm, err);
    }
    if (rc == UR_OK) {
        rc = write_in(s->step, "_CHECKPOINT_METADATA", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(s->items, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(s->step, err);
    }
    ur_free(run);
    ur_buf_dispose(&b);
    return rc;
}

/* Remove the staging directory of a published run: first renamed, in one step, to the name
 * of a dead run's publication staging (`<C>.<pid>.unroll-tmp`, which the next run to C
 * removes under its lock if this removal is cut short), so that a kill meanwhile never
 * leaves a half-removed run that looks staged. */
static void remove_staging(const ur_orbax_share *s)
{
    char *trash = ur_malloc(strlen(s->dest) + 40);
    ur_err ignored;
    if (trash == NULL) {
        return;
    }
    snprintf(trash, strlen(s->dest) + 40, "%s.%ld.unroll-tmp", s->dest, (long)getpid());
    if (rename(s->staging, trash) == 0) {
        ur_fs_remove_tree(trash, &ignored); /* the claim goes with it */
    }
    ur_free(trash);
}

/* Move the finished step into place as C/0 (unroll/orbax_publish.h) and remove the staging
 * directory. */
static int publish(ur_orbax_share *s, const volatile sig_atomic_t *cancel, char **published_to,
                   ur_err *err)
{
    const char *units[1] = {"0"};
    const char *inputs[1] = {s->input};
    ur_orbax_publish *pub = NULL;
    int rc = ur_orbax_publish_begin(&pub, s->dest, units, 1, inputs, 1, err);

    if (rc == UR_OK) {
        *published_to = ur_strdup(ur_orbax_publish_dest(pub));
        rc = *published_to != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) { /* where the step goes, for a rerun after a kill (recover_step) */
        const char *to = ur_orbax_publish_staged(pub, 0);
        rc = write_in(s->staging, PUBLISHING_FILE, to, strlen(to), err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_fsync_dir(s->staging, err);
    }
    if (rc == UR_OK && rename(s->step, ur_orbax_publish_staged(pub, 0)) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, s->step, "cannot move to %s",
                           ur_orbax_publish_staged(pub, 0));
    }
    if (rc == UR_OK) {
        rc = ur_orbax_publish_commit(pub, cancel, err);
        pub = NULL;
    }
    ur_orbax_publish_abort(pub);
    if (rc == UR_OK) {
        remove_staging(s);
    }
    return rc;
}

static int finish(ur_orbax_share *s, const volatile sig_atomic_t *cancel, char **published_to,
                  ur_err *err)
{
    int rc;
    if (!ur_fs_is_dir(s->step)) {
        /* published by a finisher killed before it removed the staging directory */
        char *out = ur_path_join(s->dest, "0/items");
        int there = out != NULL && ur_fs_is_dir(out);
        ur_free(out);
        if (!there) {
            return ur_err_set(err, UR_EIO,
                              "%s: the finished step is gone and %s/0 was not published: "
                              "remove %s and run every share again",
                              s->staging, s->dest, s->staging);
        }
        *published_to = ur_strdup(s->dest);
        remove_staging(s);
        return *published_to != NULL ? UR_OK : ur_err_oom(err);
    }
    rc = clear_finish(s, err);
    if (rc == UR_OK) {
        rc = write_item_metadata(s, err); /* first: it checks the shares agree */
    }
    if (rc == UR_OK) {
        rc = merge_databases(s, err);
    }
    if (rc == UR_OK) {
        rc = write_step_metadata(s, err);
    }
    if (rc == UR_OK && cancel != NULL && *cancel) {
        rc = ur_err_set(err, UR_EINTERNAL, "interrupted");
    }
    if (rc == UR_OK) {
        rc = publish(s, cancel, published_to, err);
    }
    return rc;
}

static int count_missing(const ur_orbax_share *s, ur_buf *names, ur_err *err)
{
    int missing = 0, rc = UR_OK;
    for (int i = 0; i < s->count; i++) {
        if (!ur_orbax_share_is_done(s, i)) {
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

int ur_orbax_share_finish(ur_orbax_share *s, const volatile sig_atomic_t *cancel, int *published,
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

/* Open a staged run from its run.txt (path: C or its staging directory). */
static int open_staged(ur_orbax_share **out, const char *path, ur_err *err)
{
    ur_orbax_share *s = NULL;
    ur_buf run;
    char *dest, *count = NULL;
    size_t n = strlen(path), sl = strlen(UR_ORBAX_SHARE_SUFFIX);
    int rc;

    while (n > 1 && path[n - 1] == '/') {
        n--;
    }
    if (n > sl && memcmp(path + n - sl, UR_ORBAX_SHARE_SUFFIX, sl) == 0) {
        n -= sl;
    }
    dest = ur_strndup(path, n);
    if (dest == NULL) {
        return ur_err_oom(err);
    }
    rc = share_new(&s, dest, err);
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
        if (s->input == NULL || count == NULL || *end != '\0' || c < 1 || c > UR_ORBAX_SHARE_MAX) {
            rc = ur_err_set(err, UR_ECORRUPT, "%s/run.txt: no process count or input", s->staging);
        }
        s->count = (int)c;
    }
    ur_free(count);
    ur_buf_dispose(&run);
    if (rc < 0) {
        ur_orbax_share_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

int ur_orbax_share_merge(const char *path, const volatile sig_atomic_t *cancel,
                         char **published_to, ur_err *err)
{
    ur_orbax_share *s = NULL;
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
    ur_orbax_share_close(s);
    return rc;
}

int ur_orbax_share_status(const char *path, ur_buf *out, ur_err *err)
{
    ur_orbax_share *s = NULL;
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
    ur_orbax_share_close(s);
    return rc;
}
