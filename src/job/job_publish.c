/* Publishing a conversion's output unit by unit, under a lock: see unroll/job_publish.h
 * for the promises. Doc: orbax-layout.md §1.3-1.5 (what a step directory holds). */
#define _GNU_SOURCE /* renameat2 (RENAME_EXCHANGE, RENAME_NOREPLACE) */
#include "unroll/job_publish.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"
#include "unroll/orbax.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOCK_SUFFIX ".unroll-lock"
#define STAGING_SUFFIX ".unroll-tmp"
#define ASIDE_SUFFIX ".unroll-old"

typedef enum {
    MOVED_NOT = 0,
    MOVED_EXCHANGED, /* the earlier unit is now at `staged` */
    MOVED_IN,        /* there was no earlier unit */
    MOVED_ASIDE      /* no exchange on this file system: the earlier unit is at `aside` */
} moved;

typedef struct {
    char *staged;  /* where the run writes it */
    char *final;   /* C/<rel>: where it is published */
    char *aside;   /* staged + ASIDE_SUFFIX */
    char *created; /* the outermost directory above `final` this run created, or NULL */
    moved how;
} unit;

struct ur_job_publish {
    char *dest;         /* C, canonical */
    char *parent;       /* C's parent directory */
    char *lock_path;    /* <parent>/<name>.unroll-lock */
    char *staging;      /* <parent>/<name>.<pid>.unroll-tmp */
    char *created_from; /* the outermost directory above C's parent this run created */
    char **inputs;      /* canonical */
    size_t n_inputs;
    unit *units;
    size_t n_units;
    size_t cap_units; /* entries allocated (and to free) */
    int lock_fd;
    int staging_fd; /* held open so that its inode cannot be reused by a new directory */
    int have_staging;
    dev_t staging_dev;
    ino_t staging_ino;
    void (*on_failure)(void *ctx); /* ur_job_publish_on_failure */
    void *on_failure_ctx;
};

/* ---- canonical paths -------------------------------------------------------------------- */

/* Append the components of `rest` to the absolute path `out` lexically ("." dropped, ".."
 * removes the last component, never above "/"). `out` has room for strlen(out) +
 * strlen(rest) + 2 bytes. */
static void append_lexical(char *out, const char *rest)
{
    const char *s = rest;
    while (*s != '\0') {
        const char *e = strchr(s, '/');
        size_t n = e != NULL ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 1 && s[0] == '.')) {
            /* nothing */
        } else if (n == 2 && s[0] == '.' && s[1] == '.') {
            char *slash = strrchr(out, '/');
            if (slash != NULL) {
                slash[slash == out ? 1 : 0] = '\0';
            }
        } else {
            size_t len = strlen(out);
            if (len > 0 && out[len - 1] != '/') {
                out[len++] = '/';
            }
            memcpy(out + len, s, n);
            out[len + n] = '\0';
        }
        s += n;
        if (*s == '/') {
            s++;
        }
    }
}

/* The absolute canonical form of `path`: its longest existing prefix resolved by realpath
 * (symlinks followed), the rest normalized lexically. With resolve_last == 0 the last
 * component itself is not resolved (a symlink there is what a rename would replace). */
static char *canonical(const char *path, int resolve_last, ur_err *err)
{
    char *abs = NULL, *out = NULL, *cut, *real;
    char buf[PATH_MAX];
    size_t n;

    if (path[0] == '/') {
        abs = ur_strdup(path);
    } else {
        if (getcwd(buf, sizeof buf) == NULL) {
            ur_err_set_os(err, UR_EIO, errno, path, "cannot resolve a relative path");
            return NULL;
        }
        abs = ur_path_join(buf, path);
    }
    if (abs == NULL) {
        ur_err_oom(err);
        return NULL;
    }
    n = strlen(abs);
    while (n > 1 && abs[n - 1] == '/') {
        abs[--n] = '\0';
    }
    if (!resolve_last) {
        char *slash = strrchr(abs, '/');
        const char *base = slash + 1;
        if (slash != abs && strcmp(base, ".") != 0 && strcmp(base, "..") != 0) {
            *slash = '\0';
            out = canonical(abs, 1, err);
            if (out != NULL) {
                char *joined = ur_path_join(out, base);
                ur_free(out);
                out = joined;
                if (out == NULL) {
                    ur_err_oom(err);
                }
            }
            ur_free(abs);
            return out;
        }
    }
    /* Cut components off the end until what is left resolves ("/" always does). */
    cut = abs + n;
    for (;;) {
        char saved = *cut;
        *cut = '\0';
        real = realpath(cut == abs ? "/" : abs, buf);
        *cut = saved;
        if (real != NULL || cut == abs) {
            break;
        }
        while (cut > abs && *--cut != '/') {
        }
    }
    if (real == NULL) {
        ur_err_set_os(err, UR_EIO, errno, path, "cannot resolve");
        ur_free(abs);
        return NULL;
    }
    n = strlen(real);
    out = ur_malloc(n + strlen(cut) + 2);
    if (out == NULL) {
        ur_err_oom(err);
    } else {
        memcpy(out, real, n + 1);
        append_lexical(out, cut);
    }
    ur_free(abs);
    return out;
}

/* 1 when `a` is `b` or lies below it (both canonical). */
static int inside(const char *a, const char *b)
{
    size_t nb = strlen(b);
    if (nb == 1 && b[0] == '/') {
        return 1;
    }
    return strncmp(a, b, nb) == 0 && (a[nb] == '\0' || a[nb] == '/');
}

/* ---- set-up ----------------------------------------------------------------------------- */

static void publish_free(ur_job_publish *p)
{
    for (size_t i = 0; i < p->n_inputs; i++) {
        ur_free(p->inputs[i]);
    }
    for (size_t i = 0; i < p->cap_units && p->units != NULL; i++) {
        ur_free(p->units[i].staged);
        ur_free(p->units[i].final);
        ur_free(p->units[i].aside);
        ur_free(p->units[i].created);
    }
    ur_free(p->inputs);
    ur_free(p->units);
    ur_free(p->dest);
    ur_free(p->parent);
    ur_free(p->lock_path);
    ur_free(p->staging);
    ur_free(p->created_from);
    if (p->staging_fd >= 0) {
        close(p->staging_fd);
    }
    ur_free(p);
}

/* A unit is a relative path of plain components (no "", ".", ".."). */
static int check_rel(const char *rel, ur_err *err)
{
    const char *s = rel;
    for (;;) {
        size_t n = strcspn(s, "/");
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.')) {
            return ur_err_set(err, UR_EINTERNAL, "bad unit path '%s'", rel);
        }
        if (s[n] == '\0') {
            return UR_OK;
        }
        s += n + 1;
    }
}

/* Canonical paths of C, its units, lock, staging and the inputs; then the overlap rules. */
static int resolve(ur_job_publish *p, const char *dest, const char *const *units, size_t n_units,
                   const char *const *inputs, size_t n_inputs, ur_err *err)
{
    const char *name;
    char *slash;

    p->lock_fd = -1;
    p->staging_fd = -1;
    p->dest = canonical(dest, 1, err);
    if (p->dest == NULL) {
        return err != NULL ? err->code : UR_EIO;
    }
    slash = strrchr(p->dest, '/');
    name = slash + 1;
    if (*name == '\0') {
        return ur_err_set(err, UR_EINVAL, "'%s' cannot be a checkpoint directory", dest);
    }
    p->parent = slash == p->dest ? ur_strdup("/") : ur_strndup(p->dest, (size_t)(slash - p->dest));
    p->lock_path = ur_path_joinf(p->parent, "%s" LOCK_SUFFIX, name);
    p->staging = ur_path_joinf(p->parent, "%s.%ld" STAGING_SUFFIX, name, (long)getpid());
    p->inputs = ur_calloc(n_inputs ? n_inputs : 1, sizeof *p->inputs);
    p->units = ur_calloc(n_units ? n_units : 1, sizeof *p->units);
    if (p->parent == NULL || p->lock_path == NULL || p->staging == NULL || p->inputs == NULL ||
        p->units == NULL) {
        return ur_err_oom(err);
    }
    p->cap_units = n_units;
    for (; p->n_inputs < n_inputs; p->n_inputs++) {
        p->inputs[p->n_inputs] = canonical(inputs[p->n_inputs], 1, err);
        if (p->inputs[p->n_inputs] == NULL) {
            return err != NULL ? err->code : UR_EIO;
        }
    }
    for (; p->n_units < n_units; p->n_units++) {
        unit *u = &p->units[p->n_units];
        char *joined;
        int rc = check_rel(units[p->n_units], err);
        if (rc < 0) {
            return rc;
        }
        joined = ur_path_join(p->dest, units[p->n_units]);
        u->staged = ur_path_join(p->staging, units[p->n_units]);
        if (joined == NULL || u->staged == NULL) {
            ur_free(joined);
            return ur_err_oom(err);
        }
        /* a symlinked directory on the way (say, loras/) counts where it points */
        u->final = canonical(joined, 0, err);
        ur_free(joined);
        if (u->final == NULL) {
            return err != NULL ? err->code : UR_EIO;
        }
        u->aside = ur_malloc(strlen(u->staged) + sizeof ASIDE_SUFFIX);
        if (u->aside == NULL) {
            return ur_err_oom(err);
        }
        snprintf(u->aside, strlen(u->staged) + sizeof ASIDE_SUFFIX, "%s" ASIDE_SUFFIX, u->staged);
    }

    for (size_t j = 0; j < p->n_inputs; j++) {
        const char *in = p->inputs[j];
        for (size_t i = 0; i < p->n_units; i++) {
            if (inside(in, p->units[i].final)) {
                return ur_err_set(err, UR_EINVAL,
                                  "the input %s lies inside %s, which this run would replace: "
                                  "refused",
                                  in, p->units[i].final);
            }
            if (inside(p->units[i].final, in)) {
                return ur_err_set(err, UR_EINVAL,
                                  "the output %s would be written inside the input %s: refused",
                                  p->units[i].final, in);
            }
        }
        if (inside(p->staging, in) || inside(p->lock_path, in)) {
            return ur_err_set(err, UR_EINVAL,
                              "the output %s would be written inside the input %s: refused",
                              p->dest, in);
        }
    }
    return UR_OK;
}

int ur_job_publish_check(const char *dest, const char *const *units, size_t n_units,
                         const char *const *inputs, size_t n_inputs, ur_err *err)
{
    ur_job_publish *p = ur_calloc(1, sizeof *p);
    int rc;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    rc = resolve(p, dest, units, n_units, inputs, n_inputs, err);
    publish_free(p);
    return rc;
}

/* The outermost directory on the way to `path` that does not exist (path itself when only
 * it is missing); NULL when path exists or out of memory. */
static char *first_missing(const char *path)
{
    char *p = ur_strdup(path), *best = NULL;
    while (p != NULL && !ur_fs_exists(p)) {
        char *slash = strrchr(p, '/');
        ur_free(best);
        best = ur_strdup(p);
        if (slash == NULL || slash == p) {
            break;
        }
        *slash = '\0';
    }
    ur_free(p);
    return best;
}

/* Remove the now empty directories from `path` up to and including `top`, which this run
 * created; one that is not empty (someone else's files) stays. */
static void remove_created(const char *path, const char *top)
{
    size_t top_len;
    char *p;
    if (top == NULL) {
        return;
    }
    top_len = strlen(top);
    p = ur_strdup(path);
    while (p != NULL && inside(p, top)) {
        char *slash;
        if (rmdir(p) != 0 && errno != ENOENT) {
            break;
        }
        slash = strrchr(p, '/');
        if (slash == NULL || (size_t)(slash - p) < top_len) {
            break;
        }
        *slash = '\0';
    }
    ur_free(p);
}

static char *dirname_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL || slash == path) {
        return ur_strdup("/");
    }
    return ur_strndup(path, (size_t)(slash - path));
}

/* ---- the lock --------------------------------------------------------------------------- */

/* What the lock file says about its holder, for the message of a run that finds it held. */
static void read_holder(int fd, char *who, size_t n)
{
    ssize_t got = pread(fd, who, n - 1, 0);
    size_t len = got > 0 ? (size_t)got : 0;
    while (len > 0 && (who[len - 1] == '\n' || who[len - 1] == '\0')) {
        len--;
    }
    who[len] = '\0';
    for (size_t i = 0; i < len; i++) {
        if (who[i] == '\n' || (unsigned char)who[i] < 0x20) {
            who[i] = ' ';
        }
    }
    if (len == 0) {
        snprintf(who, n, "holder not yet recorded");
    }
}

static int take_lock(ur_job_publish *p, ur_err *err)
{
    /* Each retry follows a holder that unlinked the file as we opened it: a few suffice. */
    for (int attempt = 0; attempt < 64; attempt++) {
        struct stat held, named;
        char who[256], host[128];
        int fd = open(p->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 && errno == ENOENT) {
            /* C's parent was removed by another run cleaning up after a failure */
            int rc = ur_fs_mkdirs(p->parent, err);
            if (rc < 0) {
                return rc;
            }
            continue;
        }
        if (fd < 0) {
            return ur_err_set_os(err, UR_EIO, errno, p->lock_path, "cannot open the lock file");
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK) {
                read_holder(fd, who, sizeof who);
                close(fd);
                return ur_err_set_os(err, UR_EIO, 0, p->lock_path,
                                     "%s is being written by another unroll run (%s): "
                                     "try again when it has finished",
                                     p->dest, who);
            }
            close(fd);
            return ur_err_set_os(err, UR_EIO, e, p->lock_path, "cannot lock");
        }
        if (fstat(fd, &held) != 0 || stat(p->lock_path, &named) != 0 ||
            held.st_dev != named.st_dev || held.st_ino != named.st_ino) {
            close(fd); /* its holder removed it: what we locked is no longer the lock */
            continue;
        }
        if (gethostname(host, sizeof host) != 0) {
            snprintf(host, sizeof host, "?");
        }
        host[sizeof host - 1] = '\0';
        snprintf(who, sizeof who, "pid %ld on %s\n", (long)getpid(), host);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, who, strlen(who), 0) < 0) {
            int e = errno;
            close(fd);
            return ur_err_set_os(err, UR_EIO, e, p->lock_path, "cannot write the lock file");
        }
        p->lock_fd = fd;
        return UR_OK;
    }
    return ur_err_set_os(err, UR_EIO, 0, p->lock_path, "cannot take the lock");
}

/* Unlink the lock file while still holding it (only if the path still names our file),
 * then release it. A run waiting on the old file notices the path changed and retries. */
static void release_lock(ur_job_publish *p)
{
    struct stat held, named;
    if (p->lock_fd < 0) {
        return;
    }
    if (fstat(p->lock_fd, &held) == 0 && stat(p->lock_path, &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
        (void)unlink(p->lock_path);
    }
    close(p->lock_fd);
    p->lock_fd = -1;
}

/* ---- staging ---------------------------------------------------------------------------- */

/* 1 when the staging path still names the directory this run created. */
static int staging_is_ours(const ur_job_publish *p)
{
    struct stat st;
    return p->have_staging && lstat(p->staging, &st) == 0 && S_ISDIR(st.st_mode) &&
           st.st_dev == p->staging_dev && st.st_ino == p->staging_ino;
}

/* `<name>.<digits>.unroll-tmp`: the staging directory of a run to the same destination. */
static int is_staging_name(const char *entry, const char *name)
{
    size_t n = strlen(name), k = 0;
    const char *s;
    if (strncmp(entry, name, n) != 0 || entry[n] != '.') {
        return 0;
    }
    s = entry + n + 1;
    while (s[k] >= '0' && s[k] <= '9') {
        k++;
    }
    return k > 0 && strcmp(s + k, STAGING_SUFFIX) == 0;
}

/* Under the lock: staging directories of runs that died. Best effort: a leftover that cannot
 * be removed is no reason to fail this run. One an input lies in is kept. */
static void remove_stale_staging(const ur_job_publish *p)
{
    const char *name = strrchr(p->dest, '/') + 1;
    DIR *d = opendir(p->parent);
    struct dirent *e;
    if (d == NULL) {
        return;
    }
    while ((e = readdir(d)) != NULL) {
        char *path;
        int used = 0;
        if (!is_staging_name(e->d_name, name)) {
            continue;
        }
        path = ur_path_join(p->parent, e->d_name);
        if (path == NULL) {
            break;
        }
        for (size_t j = 0; j < p->n_inputs; j++) {
            used |= inside(p->inputs[j], path);
        }
        if (!used) { /* our own name too: a dead run with the same pid */
            (void)ur_fs_remove_tree(path, NULL);
        }
        ur_free(path);
    }
    closedir(d);
}

int ur_job_publish_begin(ur_job_publish **out, const char *dest, const char *const *units,
                         size_t n_units, const char *const *inputs, size_t n_inputs, ur_err *err)
{
    ur_job_publish *p = ur_calloc(1, sizeof *p);
    struct stat st;
    int rc;

    *out = NULL;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    rc = resolve(p, dest, units, n_units, inputs, n_inputs, err);
    if (rc < 0) {
        goto fail;
    }
    if (ur_fs_exists(p->dest) && !ur_fs_is_dir(p->dest)) {
        rc = ur_err_set_os(err, UR_EIO, ENOTDIR, p->dest,
                           "exists and is not a checkpoint directory: not replaced");
        goto fail;
    }
    p->created_from = first_missing(p->parent);
    rc = ur_fs_mkdirs(p->parent, err);
    if (rc == UR_OK) {
        rc = take_lock(p, err);
    }
    if (rc < 0) {
        goto fail;
    }
    remove_stale_staging(p);
    if (mkdir(p->staging, 0755) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, p->staging, "cannot create the staging directory");
        goto fail;
    }
    p->staging_fd = open(p->staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (p->staging_fd < 0 || fstat(p->staging_fd, &st) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, p->staging, "cannot open the staging directory");
        (void)rmdir(p->staging);
        goto fail;
    }
    p->have_staging = 1;
    p->staging_dev = st.st_dev;
    p->staging_ino = st.st_ino;
    for (size_t i = 0; i < p->n_units; i++) {
        char *dir = dirname_of(p->units[i].staged);
        rc = dir != NULL ? ur_fs_mkdirs_under(p->staging, dir, err) : ur_err_oom(err);
        ur_free(dir);
        if (rc < 0) {
            goto fail;
        }
    }
    *out = p;
    return UR_OK;
fail:
    if (p->on_failure != NULL) {
        p->on_failure(p->on_failure_ctx); /* units the caller moved in go back first */
    }
    ur_job_publish_abort(p);
    return rc;
}

const char *ur_job_publish_staged(const ur_job_publish *p, size_t i)
{
    return p->units[i].staged;
}

const char *ur_job_publish_staging(const ur_job_publish *p)
{
    return p->staging;
}

const char *ur_job_publish_dest(const ur_job_publish *p)
{
    return p->dest;
}

void ur_job_publish_abort(ur_job_publish *p)
{
    if (p == NULL) {
        return;
    }
    if (staging_is_ours(p)) {
        (void)ur_fs_remove_tree(p->staging, NULL);
    }
    for (size_t i = p->n_units; i-- > 0;) {
        char *dir = dirname_of(p->units[i].final);
        if (dir != NULL) {
            remove_created(dir, p->units[i].created);
        }
        ur_free(dir);
    }
    release_lock(p);
    remove_created(p->parent, p->created_from);
    publish_free(p);
}

void ur_job_publish_tidy(const char *dest, const char *const *units, size_t n_units,
                         const char *const *inputs, size_t n_inputs)
{
    ur_job_publish *p = NULL;
    if (ur_job_publish_begin(&p, dest, units, n_units, inputs, n_inputs, NULL) == UR_OK) {
        ur_job_publish_abort(p);
    }
}

/* ---- publishing ------------------------------------------------------------------------- */

/* `dir/name` is a regular file (want_dir == 0) or a directory. */
static int has(const char *dir, const char *name, int want_dir)
{
    struct stat st;
    char *path = ur_path_join(dir, name);
    int ok = path != NULL && lstat(path, &st) == 0 &&
             (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
    ur_free(path);
    return ok;
}

/* `path` is a regular file holding one JSON object: its first byte is '{' and its last
 * non-blank byte '}' (what a file cut short, or emptied, does not have). */
static int json_object_file(const char *path)
{
    char head = 0, tail[64];
    struct stat st;
    ssize_t got;
    int ok = 0, fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
        return 0;
    }
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 1 &&
        pread(fd, &head, 1, 0) == 1 && head == '{') {
        off_t at = st.st_size > (off_t)sizeof tail ? st.st_size - (off_t)sizeof tail : 0;
        got = pread(fd, tail, sizeof tail, at);
        while (got > 0 && (tail[got - 1] == '\n' || tail[got - 1] == ' ' ||
                           tail[got - 1] == '\r' || tail[got - 1] == '\t')) {
            got--;
        }
        ok = got > 0 && tail[got - 1] == '}';
    }
    close(fd);
    return ok;
}

/* `items/rel`, when there is one, is a whole JSON object (json_object_file). */
static int optional_json_ok(const char *items, const char *rel)
{
    struct stat st;
    char *path = ur_path_join(items, rel);
    int ok = path != NULL && (lstat(path, &st) != 0 ? errno == ENOENT : json_object_file(path));
    ur_free(path);
    return ok;
}

static int count_key(void *ctx, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
    ++*(size_t *)ctx;
    return 0;
}

/* An OCDBT item's database reads back: its manifest, version tree and every B+tree node
 * (a listing of all keys), one node at a time. Opening the whole checkpoint again, as this
 * check did, held the output's metadata twice over (a quarter of the CPU and the run's peak
 * of memory with 100,000 leaves). */
static int check_database(const char *items, ur_err *why)
{
    ur_kvstore *kv = NULL;
    size_t keys = 0;
    int rc = ur_ocdbt_open(&kv, items, why);
    if (rc == UR_OK) {
        rc = ur_kvstore_list(kv, "", count_key, &keys, why);
    }
    if (rc == UR_OK && keys == 0) {
        rc = ur_err_set(why, UR_ECORRUPT, "the OCDBT database is empty");
    }
    ur_kvstore_close(kv);
    return rc;
}

/* A staged step directory is complete: `_CHECKPOINT_METADATA` beside an `items/` that holds
 * a whole `_METADATA` and, for OCDBT, a database that reads back (check_database); a plain
 * (non-OCDBT) item opens as an Orbax checkpoint. */
static int check_staged(const unit *u, ur_err *err)
{
    struct stat st;
    char *meta, *items, *md = NULL;
    ur_orbax_ckpt *ck = NULL;
    ur_err why;
    int rc = UR_OK;

    ur_err_clear(&why);
    if (lstat(u->staged, &st) != 0) {
        return ur_err_set_os(err, UR_EIO, errno, u->staged,
                             "staged output missing: nothing published");
    }
    if (S_ISREG(st.st_mode)) {
        return UR_OK;
    }
    if (!S_ISDIR(st.st_mode)) {
        return ur_err_set_os(err, UR_EIO, 0, u->staged,
                             "staged output is not a file or directory: nothing published");
    }
    meta = ur_path_join(u->staged, "_CHECKPOINT_METADATA");
    items = ur_path_join(u->staged, "items");
    md = items != NULL ? ur_path_join(items, "_METADATA") : NULL;
    if (meta == NULL || items == NULL || md == NULL) {
        rc = ur_err_oom(err);
    } else if (lstat(meta, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = ur_err_set_os(err, UR_EIO, 0, meta, "staged output incomplete: nothing published");
    } else if (!has(items, "_METADATA", 0)) {
        rc = ur_err_set_os(err, UR_EIO, 0, items,
                           "staged output incomplete: no _METADATA: nothing published");
    } else if (!json_object_file(md)) {
        rc = ur_err_set_os(err, UR_EIO, 0, md,
                           "staged output incomplete: _METADATA cut short: nothing published");
    } else if (!optional_json_ok(items, "_sharding") ||
               !optional_json_ok(items, "array_metadatas/process_0")) {
        rc = ur_err_set_os(err, UR_EIO, 0, items,
                           "staged output incomplete: _sharding or array_metadatas cut short: "
                           "nothing published");
    } else if (has(items, "d", 1) && !has(items, "manifest.ocdbt", 0)) {
        rc = ur_err_set_os(err, UR_EIO, 0, items,
                           "staged output incomplete: no manifest.ocdbt: nothing published");
    } else if (has(items, "manifest.ocdbt", 0) ? check_database(items, &why) < 0
                                               : ur_orbax_ckpt_open(&ck, items, 0, &why) < 0) {
        rc = ur_err_set_os(err, why.code == UR_ENOMEM ? UR_ENOMEM : UR_EIO, 0, items,
                           "staged output incomplete (%s%s%s): nothing published", why.where,
                           why.where[0] ? ": " : "", why.msg);
    }
    ur_orbax_ckpt_close(ck);
    ur_free(meta);
    ur_free(items);
    ur_free(md);
    return rc;
}

/* The earlier unit, if any, must be of the same kind as the new one (a directory for a step,
 * a regular file for a file): anything else is not ours to replace. */
static int check_final(const unit *u, ur_err *err)
{
    struct stat a, b;
    if (lstat(u->final, &b) != 0) {
        return errno == ENOENT ? UR_OK
                               : ur_err_set_os(err, UR_EIO, errno, u->final, "cannot stat");
    }
    if (lstat(u->staged, &a) == 0 &&
        (S_ISDIR(a.st_mode) ? S_ISDIR(b.st_mode) : S_ISREG(b.st_mode))) {
        return UR_OK;
    }
    return ur_err_set_os(err, UR_EIO, 0, u->final,
                         S_ISDIR(a.st_mode) ? "exists and is not a checkpoint directory: not "
                                              "replaced"
                                            : "exists and is not a regular file: not replaced");
}

static int move_in(unit *u, ur_err *err)
{
    if (ur_fs_exists(u->final)) {
        if (renameat2(AT_FDCWD, u->staged, AT_FDCWD, u->final, RENAME_EXCHANGE) == 0) {
            u->how = MOVED_EXCHANGED;
            return UR_OK;
        }
        if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
            return ur_err_set_os(err, UR_EIO, errno, u->final,
                                 "cannot swap in the new output from %s", u->staged);
        }
        /* No exchange on this file system: move the earlier unit aside first. */
        if (rename(u->final, u->aside) != 0) {
            return ur_err_set_os(err, UR_EIO, errno, u->final,
                                 "cannot move the earlier output aside");
        }
        if (rename(u->staged, u->final) != 0) {
            int e = errno;
            (void)rename(u->aside, u->final);
            return ur_err_set_os(err, UR_EIO, e, u->final, "cannot move the new output in");
        }
        u->how = MOVED_ASIDE;
        return UR_OK;
    }
    if (renameat2(AT_FDCWD, u->staged, AT_FDCWD, u->final, RENAME_NOREPLACE) == 0 ||
        ((errno == EINVAL || errno == ENOSYS) && rename(u->staged, u->final) == 0)) {
        u->how = MOVED_IN;
        return UR_OK;
    }
    return ur_err_set_os(err, UR_EIO, errno, u->final, "cannot move the new output in");
}

/* Put back the earlier unit (best effort: the same renames, reversed). */
static void move_back(unit *u)
{
    switch (u->how) {
    case MOVED_EXCHANGED:
        (void)renameat2(AT_FDCWD, u->staged, AT_FDCWD, u->final, RENAME_EXCHANGE);
        break;
    case MOVED_IN:
        (void)rename(u->final, u->staged);
        break;
    case MOVED_ASIDE:
        if (rename(u->final, u->staged) == 0) {
            (void)rename(u->aside, u->final);
        }
        break;
    case MOVED_NOT:
        break;
    }
    u->how = MOVED_NOT;
}

static int make_final_parent(unit *u, ur_err *err)
{
    char *dir = dirname_of(u->final);
    int rc;
    if (dir == NULL) {
        return ur_err_oom(err);
    }
    u->created = first_missing(dir);
    rc = ur_fs_mkdirs(dir, err);
    ur_free(dir);
    return rc;
}

void ur_job_publish_on_failure(ur_job_publish *p, void (*fn)(void *ctx), void *ctx)
{
    p->on_failure = fn;
    p->on_failure_ctx = ctx;
}

int ur_job_publish_commit(ur_job_publish *p, const volatile sig_atomic_t *cancel, ur_err *err)
{
    size_t moved_n = 0;
    int rc = UR_OK;

    if (cancel != NULL && *cancel) {
        rc = ur_err_set(err, UR_ECANCELED, "interrupted");
        goto fail;
    }
    if (!staging_is_ours(p)) {
        rc = ur_err_set_os(err, UR_EIO, 0, p->staging,
                           "staging directory removed or replaced during the run: nothing "
                           "published");
        goto fail;
    }
    for (size_t i = 0; i < p->n_units && rc == UR_OK; i++) {
        rc = check_staged(&p->units[i], err);
    }
    for (size_t i = 0; i < p->n_units && rc == UR_OK; i++) {
        rc = check_final(&p->units[i], err);
    }
    for (size_t i = 0; i < p->n_units && rc == UR_OK; i++) {
        rc = make_final_parent(&p->units[i], err);
    }
    for (; moved_n < p->n_units && rc == UR_OK; moved_n++) {
        rc = move_in(&p->units[moved_n], err);
        if (rc < 0) {
            break;
        }
    }
    if (rc == UR_OK && cancel != NULL && *cancel) {
        rc = ur_err_set(err, UR_ECANCELED, "interrupted");
    }
    if (rc < 0) {
        while (moved_n-- > 0) {
            move_back(&p->units[moved_n]);
        }
        goto fail;
    }
    /* Published. Make the renames durable, then drop the earlier units (now staged). */
    for (size_t i = 0; i < p->n_units; i++) {
        char *dir = dirname_of(p->units[i].final);
        if (dir != NULL) {
            (void)ur_fs_fsync_dir(dir, NULL);
        }
        ur_free(dir);
        ur_free(p->units[i].created);
        p->units[i].created = NULL; /* now holds the output: never removed */
    }
    ur_free(p->created_from);
    p->created_from = NULL;
    if (staging_is_ours(p)) {
        (void)ur_fs_remove_tree(p->staging, NULL);
    }
    p->have_staging = 0;
    release_lock(p);
    publish_free(p);
    return UR_OK;
fail:
    if (p->on_failure != NULL) {
        p->on_failure(p->on_failure_ctx); /* units the caller moved in go back first */
    }
    ur_job_publish_abort(p);
    return rc;
}
