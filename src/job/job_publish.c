/* Publishing a conversion's output unit by unit, under a lock: see unroll/job_publish.h
 * for the promises. Doc: orbax-layout.md §1.3-1.5 (what a step directory holds). */
#define _GNU_SOURCE /* gethostname */
#include "unroll/job_publish.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"
#include "unroll/orbax.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define LOCK_SUFFIX ".unroll-lock"
#define STAGING_SUFFIX ".unroll-tmp"
#define ASIDE_SUFFIX ".unroll-old"

typedef struct {
    char *staged;  /* where the run writes it */
    char *final;   /* C/<rel>: where it is published */
    char *aside;   /* staged + ASIDE_SUFFIX */
    char *created; /* the outermost directory above `final` this run created, or NULL */
    ur_fs_moved how; /* EXCHANGED: the earlier unit is now at `staged`; ASIDE: at `aside` */
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
    unsigned long long staging_dev;
    unsigned long long staging_ino;
    void (*on_failure)(void *ctx); /* ur_job_publish_on_failure */
    void *on_failure_ctx;
    int (*check)(const char *staged, ur_err *err); /* ur_job_publish_set_check */
};

/* ---- canonical paths -------------------------------------------------------------------- */

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
    ur_fs_close(p->staging_fd);
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
    int rc;

    p->lock_fd = -1;
    p->staging_fd = -1;
    rc = ur_fs_canonical(&p->dest, dest, 1, err);
    if (rc < 0) {
        return rc;
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
        rc = ur_fs_canonical(&p->inputs[p->n_inputs], inputs[p->n_inputs], 1, err);
        if (rc < 0) {
            return rc;
        }
    }
    for (; p->n_units < n_units; p->n_units++) {
        unit *u = &p->units[p->n_units];
        int whole = units[p->n_units][0] == '\0'; /* C itself, staged under its own name */
        char *joined;
        rc = whole ? UR_OK : check_rel(units[p->n_units], err);
        if (rc < 0) {
            return rc;
        }
        joined = whole ? ur_strdup(p->dest) : ur_path_join(p->dest, units[p->n_units]);
        u->staged = ur_path_join(p->staging, whole ? name : units[p->n_units]);
        if (joined == NULL || u->staged == NULL) {
            ur_free(joined);
            return ur_err_oom(err);
        }
        /* a symlinked directory on the way (say, loras/) counts where it points */
        rc = ur_fs_canonical(&u->final, joined, 0, err);
        ur_free(joined);
        if (rc < 0) {
            return rc;
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
        if (ur_fs_remove_empty_dir(p, NULL) < 0) {
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

static int take_lock(ur_job_publish *p, ur_err *err)
{
    char me[256], host[128];

    if (gethostname(host, sizeof host) != 0) {
        snprintf(host, sizeof host, "?");
    }
    host[sizeof host - 1] = '\0';
    snprintf(me, sizeof me, "pid %ld on %s\n", (long)getpid(), host);
    /* Each retry follows a holder that unlinked the file as we opened it: a few suffice. */
    for (int attempt = 0; attempt < 64; attempt++) {
        char who[256];
        int fd = -1, rc = ur_fs_lock_take(p->lock_path, me, &fd, who, sizeof who, err);
        if (rc == UR_ENOTFOUND) {
            /* C's parent was removed by another run cleaning up after a failure */
            rc = ur_fs_mkdirs(p->parent, err);
            if (rc < 0) {
                return rc;
            }
            continue;
        }
        if (rc < 0) {
            return rc;
        }
        if (fd >= 0) {
            p->lock_fd = fd;
            return UR_OK;
        }
        if (who[0] != '\0') {
            return ur_err_set_os(err, UR_EIO, 0, p->lock_path,
                                 "%s is being written by another unroll run (%s): "
                                 "try again when it has finished",
                                 p->dest, who);
        }
        /* its holder removed it: what we locked is no longer the lock */
    }
    return ur_err_set_os(err, UR_EIO, 0, p->lock_path, "cannot take the lock");
}

/* Unlink the lock file while still holding it (only if the path still names our file),
 * then release it. A run waiting on the old file notices the path changed and retries. */
static void release_lock(ur_job_publish *p)
{
    ur_fs_lock_release(p->lock_path, p->lock_fd);
    p->lock_fd = -1;
}

/* ---- staging ---------------------------------------------------------------------------- */

/* 1 when the staging path still names the directory this run created. Its identity alone
 * tells: the directory is held open (staging_fd), so no other file can take its inode. */
static int staging_is_ours(const ur_job_publish *p)
{
    unsigned long long dev, ino;
    return p->have_staging && ur_fs_identity(p->staging, &dev, &ino, NULL) == UR_OK &&
           dev == p->staging_dev && ino == p->staging_ino;
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

typedef struct {
    const ur_job_publish *p;
    const char *name; /* C's name in its parent */
} stale_walk;

static int remove_if_stale(void *ctx, const char *entry)
{
    const stale_walk *w = ctx;
    char *path;
    int used = 0;
    if (!is_staging_name(entry, w->name)) {
        return 0;
    }
    path = ur_path_join(w->p->parent, entry);
    if (path == NULL) {
        return 1;
    }
    for (size_t j = 0; j < w->p->n_inputs; j++) {
        used |= inside(w->p->inputs[j], path);
    }
    if (!used) { /* our own name too: a dead run with the same pid */
        (void)ur_fs_remove_tree(path, NULL);
    }
    ur_free(path);
    return 0;
}

/* Under the lock: staging directories of runs that died. Best effort: a leftover that cannot
 * be removed is no reason to fail this run. One an input lies in is kept. */
static void remove_stale_staging(const ur_job_publish *p)
{
    stale_walk w = {p, strrchr(p->dest, '/') + 1};
    (void)ur_fs_list_names(p->parent, "directory", remove_if_stale, &w, NULL);
}

int ur_job_publish_begin(ur_job_publish **out, const char *dest, const char *const *units,
                         size_t n_units, const char *const *inputs, size_t n_inputs, ur_err *err)
{
    ur_job_publish *p = ur_calloc(1, sizeof *p);
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
    rc = ur_fs_mkdir_held(p->staging, "the staging directory", &p->staging_fd, &p->staging_dev,
                          &p->staging_ino, err);
    if (rc < 0) {
        goto fail;
    }
    p->have_staging = 1;
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
    ur_fs_kind kind = UR_FS_MISSING;
    char *path = ur_path_join(dir, name);
    int ok = path != NULL && ur_fs_kind_of(&kind, path, NULL) == UR_OK &&
             kind == (want_dir ? UR_FS_DIR : UR_FS_FILE);
    ur_free(path);
    return ok;
}

/* `path` is a regular file holding one JSON object: its first byte is '{' and its last
 * non-blank byte '}' (what a file cut short, or emptied, does not have). */
static int json_object_file(const char *path)
{
    char head = 0, tail[64];
    size_t got = sizeof tail;
    uint64_t size = 0;

    if (ur_fs_read_ends(path, &head, 1, tail, &got, &size, NULL) < 0 || size <= 1 || head != '{') {
        return 0;
    }
    while (got > 0 && (tail[got - 1] == '\n' || tail[got - 1] == ' ' || tail[got - 1] == '\r' ||
                       tail[got - 1] == '\t')) {
        got--;
    }
    return got > 0 && tail[got - 1] == '}';
}

/* `items/rel`, when there is one, is a whole JSON object (json_object_file). */
static int optional_json_ok(const char *items, const char *rel)
{
    ur_fs_kind kind = UR_FS_MISSING;
    char *path = ur_path_join(items, rel);
    int ok = path != NULL && ur_fs_kind_of(&kind, path, NULL) == UR_OK &&
             (kind == UR_FS_MISSING || json_object_file(path));
    ur_free(path);
    return ok;
}

/* An OCDBT item's database reads back: its manifest, version tree and every B+tree node,
 * one node at a time (ur_ocdbt_count_keys, on two threads). Opening the whole checkpoint
 * again, as this check did, held the output's metadata twice over (a quarter of the CPU and
 * the run's peak of memory with 100,000 leaves). */
static int check_database(const char *items, ur_err *why)
{
    ur_kvstore *kv = NULL;
    uint64_t keys = 0;
    int rc = ur_ocdbt_open(&kv, items, why);
    if (rc == UR_OK) {
        rc = ur_ocdbt_count_keys(kv, &keys, why);
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
    ur_fs_kind kind = UR_FS_MISSING;
    char *meta, *items, *md = NULL;
    ur_orbax_ckpt *ck = NULL;
    ur_err why;
    int rc = UR_OK;

    ur_err_clear(&why);
    rc = ur_fs_kind_of(&kind, u->staged, &why);
    if (rc < 0 || kind == UR_FS_MISSING) {
        return ur_err_set_os(err, UR_EIO, rc < 0 ? why.os_errno : ENOENT, u->staged,
                             "staged output missing: nothing published");
    }
    if (kind == UR_FS_FILE) {
        return UR_OK;
    }
    if (kind != UR_FS_DIR) {
        return ur_err_set_os(err, UR_EIO, 0, u->staged,
                             "staged output is not a file or directory: nothing published");
    }
    meta = ur_path_join(u->staged, "_CHECKPOINT_METADATA");
    items = ur_path_join(u->staged, "items");
    md = items != NULL ? ur_path_join(items, "_METADATA") : NULL;
    if (meta == NULL || items == NULL || md == NULL) {
        rc = ur_err_oom(err);
    } else if (ur_fs_kind_of(&kind, meta, NULL) < 0 || kind != UR_FS_FILE) {
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
    ur_fs_kind a = UR_FS_MISSING, b = UR_FS_MISSING;
    int rc = ur_fs_kind_of(&b, u->final, err);
    if (rc < 0 || b == UR_FS_MISSING) {
        return rc;
    }
    if (ur_fs_kind_of(&a, u->staged, NULL) == UR_OK && a != UR_FS_MISSING &&
        (a == UR_FS_DIR ? b == UR_FS_DIR : b == UR_FS_FILE)) {
        return UR_OK;
    }
    return ur_err_set_os(err, UR_EIO, 0, u->final,
                         a == UR_FS_DIR ? "exists and is not a checkpoint directory: not "
                                          "replaced"
                                        : "exists and is not a regular file: not replaced");
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

void ur_job_publish_set_check(ur_job_publish *p, int (*check)(const char *staged, ur_err *err))
{
    p->check = check;
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
        if (p->check == NULL) {
            rc = check_staged(&p->units[i], err);
        } else if (!ur_fs_is_dir(p->units[i].staged)) {
            rc = ur_err_set_os(err, UR_EIO, ENOENT, p->units[i].staged,
                               "staged output missing: nothing published");
        } else {
            rc = p->check(p->units[i].staged, err);
        }
    }
    for (size_t i = 0; i < p->n_units && rc == UR_OK; i++) {
        rc = check_final(&p->units[i], err);
    }
    for (size_t i = 0; i < p->n_units && rc == UR_OK; i++) {
        rc = make_final_parent(&p->units[i], err);
    }
    for (; moved_n < p->n_units && rc == UR_OK; moved_n++) {
        unit *u = &p->units[moved_n];
        rc = ur_fs_swap_in(u->staged, u->final, u->aside, &u->how, err);
        if (rc < 0) {
            break;
        }
    }
    if (rc == UR_OK && cancel != NULL && *cancel) {
        rc = ur_err_set(err, UR_ECANCELED, "interrupted");
    }
    if (rc < 0) {
        while (moved_n-- > 0) {
            unit *u = &p->units[moved_n];
            ur_fs_swap_back(u->staged, u->final, u->aside, &u->how); /* best effort */
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
