/* A multi-process conversion into an object store: the run's objects under the step prefix,
 * the conditional creates that decide who starts the run and who finishes it, and the finish
 * (merge from the store, metadata, upload in commit-file order). See
 * include/unroll/job_share_remote.h. */
#define _GNU_SOURCE /* gethostname */

#include "job_finish.h"
#include "job_ledger.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/fs.h"
#include "unroll/job_claim.h"
#include "unroll/job_share.h"
#include "unroll/job_share_remote.h"
#include "unroll/job_upload.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"
#include "unroll/orbax.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RUN_KEY UR_JOB_RSHARE_DIR "/run.txt"
/* The run's identity kept beside the published step (a file: Orbax takes only the step's
 * directories for items), so that a rerun with other arguments is refused after publication. */
#define RUN_KEPT_KEY UR_JOB_RSHARE_RUN_KEPT
#define MAX_META ((size_t)1 << 30)

struct ur_job_rshare {
    char *step; /* S, without a trailing '/' */
    /* A run of several units (LoRA, ur_job_rshare_open_units): the checkpoint directory
     * (S is its first unit, base/0) and the units below it; n_units 0: the one step S. */
    char *root;
    char **units;
    size_t n_units, cap_units;
    char *run_text; /* run.txt's text (NULL: not known) */
    ur_kvstore *kv;
    ur_kvstore *ledger; /* S/unroll-multi/: the run's ledger (job_ledger.h) */
    char *where;        /* its location, "S/unroll-multi", named in messages */
    int count, index;
    int took_over; /* the finish was taken over from a dead attempt of this index */
};

int ur_job_rshare_took_over(const ur_job_rshare *s)
{
    return s->took_over;
}

void ur_job_rshare_close(ur_job_rshare *s)
{
    if (s != NULL) {
        for (size_t k = 0; k < s->n_units; k++) {
            ur_free(s->units[k]);
        }
        ur_free(s->units);
        ur_free(s->root);
        ur_kvstore_close(s->ledger);
        ur_free(s->where);
        ur_kvstore_close(s->kv);
        ur_free(s->run_text);
        ur_free(s->step);
        ur_free(s);
    }
}

static int rshare_new(ur_job_rshare **out, const char *step, ur_err *err)
{
    ur_job_rshare *s = ur_calloc(1, sizeof *s);
    size_t n = strlen(step);
    int rc;
    if (s == NULL) {
        return ur_err_oom(err);
    }
    while (n > 0 && step[n - 1] == '/') {
        n--;
    }
    s->step = ur_strndup(step, n);
    rc = s->step != NULL ? ur_kvstore_open_url(&s->kv, s->step, 1, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_kvstore_prefix_open(&s->ledger, s->kv, UR_JOB_RSHARE_DIR "/", 0, err);
    }
    if (rc == UR_OK) {
        s->where = ur_path_join(s->step, UR_JOB_RSHARE_DIR);
        rc = s->where != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc < 0) {
        ur_job_rshare_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

/* 1 when `key` is in the store, 0 when not, < 0 when the store cannot say. */
static int present(ur_kvstore *kv, const char *key, ur_err *err)
{
    uint64_t size;
    int rc = ur_kvstore_size(kv, key, &size, err);
    return rc == UR_OK ? 1 : rc == UR_ENOTFOUND ? 0 : rc;
}

typedef struct {
    size_t n;
    int run;
    char first[256];
} census;

static int count_objects(void *ctx, const char *key, uint64_t size)
{
    census *c = ctx;
    (void)size;
    if (strcmp(key, RUN_KEY) == 0) {
        c->run = 1;
    } else if (c->n++ == 0) {
        snprintf(c->first, sizeof c->first, "%s", key);
    }
    return 0;
}

static void remove_run_objects(ur_job_rshare *s);

int ur_job_rshare_open(ur_job_rshare **out, const char *step, int count, int index,
                       const char *run_text, int *published, ur_err *err)
{
    ur_job_rshare *s = NULL;
    census c;
    ur_buf have;
    ur_err ignored;
    int rc, found = 0;

    *published = 0;
    if (count < 1 || count > UR_JOB_SHARE_MAX || index < 0 || index >= count) {
        return ur_err_set(err, UR_EINVAL, "process index %d of %d processes is out of range",
                          index, count);
    }
    rc = rshare_new(&s, step, err);
    if (rc < 0) {
        return rc;
    }
    s->count = count;
    s->index = index;
    s->run_text = ur_strdup(run_text);
    ur_buf_init(&have, 0);
    rc = s->run_text != NULL ? present(s->kv, "commit_success.txt", err) : ur_err_oom(err);
    if (rc == 1) {
        /* published: by this run, or (its identity kept beside it differs) by another */
        *published = 1;
        rc = ur_kvstore_read_opt(s->kv, RUN_KEPT_KEY, MAX_META, &have, &found, err);
        if (rc == UR_OK && found && strcmp((const char *)have.data, run_text) != 0) {
            rc = ur_err_set(err, UR_EINVAL,
                            "%s/" RUN_KEPT_KEY ": %s was published by a multi-process run with "
                            "other arguments or another input (delete %s/ to convert again)",
                            s->step, s->step, s->step);
        }
        if (rc == UR_OK) {
            /* a finisher that died after the marker, or whose deletes failed, left some of
             * the run's objects (any of them, run.txt or not: one listing finds them): they
             * go (best effort, as after a finish) */
            remove_run_objects(s);
        }
        goto out;
    }
    /* objects there that no run of ours put: refused as for a single-process output (listed
     * only while the run has not started: later the shares' objects are there) */
    memset(&c, 0, sizeof c);
    if (rc == UR_OK) {
        rc = present(s->kv, RUN_KEY, err);
        c.run = rc == 1;
        rc = rc < 0 ? rc : UR_OK;
    }
    if (rc == UR_OK && !c.run) {
        rc = ur_kvstore_list(s->kv, "", count_objects, &c, err);
    }
    if (rc == UR_OK && c.n > 0 && !c.run) {
        rc = ur_err_set(err, UR_EINVAL,
                        "%s already holds %zu object%s (e.g. %s) and no multi-process run: "
                        "refusing to write over them",
                        s->step, c.n, c.n == 1 ? "" : "s", c.first);
    }
    if (rc == UR_OK) {
        int created = 0;
        rc = ur_job_ledger_run_create(s->ledger, run_text, &created, err);
        if (rc == UR_OK && created && present(s->kv, UR_JOB_CLAIM_NAME, &ignored) == 1) {
            /* a single-process run claimed S between the listing and the create (it looks
             * for run.txt after its claim, so one of the two sees the other) */
            (void)ur_kvstore_delete(s->kv, RUN_KEY, &ignored);
            rc = ur_err_set(
                err, UR_EIO,
                "%s is being written by a single-process run (its claim: %s/" UR_JOB_CLAIM_NAME
                ")",
                s->step, s->step);
        }
        if (rc == UR_OK && created) { /* the run starts now (_CHECKPOINT_METADATA) */
            int64_t started;
            rc = ur_job_ledger_started(s->ledger, s->where, &started, err);
        }
        if (rc == UR_OK && !created) {
            char what[512];
            rc = ur_job_ledger_run_read(s->ledger, &have, &found, err);
            if (rc == UR_OK && found && strcmp((const char *)have.data, run_text) != 0 &&
                ur_job_run_change((const char *)have.data, run_text, what, sizeof what)) {
                rc = ur_err_set(err, UR_EINVAL,
                                "%s/" RUN_KEY ": input changed since the run started: %s; the "
                                "run staged there read the old one (delete %s/" UR_JOB_RSHARE_DIR
                                "/ and the shares' objects to start over)",
                                s->step, what, s->step);
            } else if (rc == UR_OK && (!found || strcmp((const char *)have.data, run_text) != 0)) {
                rc = ur_err_set(err, UR_EINVAL,
                                "%s/" RUN_KEY ": a multi-process run with other arguments or "
                                "another input is staged there (delete %s/" UR_JOB_RSHARE_DIR
                                "/ and the shares' objects to start over)",
                                s->step, s->step);
            }
        }
    }
out:
    ur_buf_dispose(&have);
    if (rc < 0) {
        ur_job_rshare_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

int ur_job_rshare_is_done(ur_job_rshare *s, int i, int *done, ur_err *err)
{
    return ur_job_ledger_is_done(s->ledger, i, done, NULL, err);
}

int ur_job_rshare_upload(ur_job_rshare *s, ur_job_rprogress *progress, const char *db_dir,
                         const char *meta_dir, const char *summary,
                         const volatile sig_atomic_t *cancel, ur_err *err)
{
    ur_job_upload_opts uo;
    char *db_url = ur_path_joinf(s->step, "items/ocdbt.process_%d", s->index);
    char *meta_url = ur_path_joinf(s->step, UR_JOB_RSHARE_DIR "/shares/%d", s->index);
    int rc = db_url != NULL && meta_url != NULL ? UR_OK : ur_err_oom(err);

    memset(&uo, 0, sizeof uo);
    uo.replace = 1; /* what a killed attempt of this share left */
    uo.threads = 16;
    if (rc == UR_OK) {
        rc = ur_job_ledger_clear_done(s->ledger, s->index, err);
    }
    if (rc == UR_OK && progress != NULL) {
        rc = ur_job_rprogress_upload(progress, db_dir, meta_dir, 1, cancel, err);
    } else if (rc == UR_OK) {
        rc = ur_job_upload(db_dir, db_url, &uo, cancel, err);
        if (rc == UR_OK) {
            rc = ur_job_upload(meta_dir, meta_url, &uo, cancel, err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_job_ledger_mark_done(s->ledger, s->index, summary, err);
    }
    ur_free(db_url);
    ur_free(meta_url);
    return rc;
}

/* The key of share i's metadata file `name` of unit k: shares/<i>/ for the first unit,
 * shares/<i>.u<k>/ for unit k of a run of several (as the local staging names them). */
static void meta_key(char *key, size_t size, size_t k, int i, const char *name)
{
    if (k == 0) {
        snprintf(key, size, UR_JOB_RSHARE_DIR "/shares/%d/%s", i, name);
    } else {
        snprintf(key, size, UR_JOB_RSHARE_DIR "/shares/%d.u%zu/%s", i, k, name);
    }
}

/* Where unit k is in the store: S for the first (or only) unit, else root/<unit>. */
static char *unit_url(const ur_job_rshare *s, size_t k)
{
    return k == 0 ? ur_strdup(s->step) : ur_path_join(s->root, s->units[k]);
}

static int collect_run_key(void *ctx, const char *key, uint64_t size)
{
    ur_buf *keys = ctx;
    (void)size;
    return ur_buf_append(keys, key, strlen(key) + 1, NULL) == UR_OK ? 0 : UR_ENOMEM;
}

/* After the commit marker: the run's own objects go (best effort: a reader ignores them). */
static void remove_run_objects(ur_job_rshare *s)
{
    ur_buf keys;
    ur_err ignored;
    ur_buf_init(&keys, 0);
    if (ur_kvstore_list(s->kv, UR_JOB_RSHARE_DIR "/", collect_run_key, &keys, &ignored) == UR_OK) {
        for (size_t at = 0; at < keys.len; at += strlen((const char *)keys.data + at) + 1) {
            (void)ur_kvstore_delete(s->kv, (const char *)keys.data + at, &ignored);
        }
    }
    ur_buf_dispose(&keys);
}

/* The key under S of file unit k as the shares staged it. */
static void unit_file_key(char *key, size_t size, const ur_job_rshare *s, size_t k)
{
    snprintf(key, size, UR_JOB_RSHARE_DIR "/units/%s", s->units[k]);
}

/* The finish's local tree `from` uploaded under `to`, beside the shares' databases (with the
 * units of a run of several, `units_of` non-NULL), unless the run was interrupted first. */
static int upload_finish(const char *from, const char *to, const ur_job_rshare *units_of,
                         const volatile sig_atomic_t *cancel, ur_err *err)
{
    ur_job_upload_opts uo;
    if (cancel != NULL && *cancel) {
        return ur_err_set(err, UR_ECANCELED, "interrupted");
    }
    memset(&uo, 0, sizeof uo);
    uo.add = 1;
    uo.threads = 16;
    if (units_of != NULL) {
        uo.units = (const char *const *)units_of->units;
        uo.n_units = units_of->n_units;
    }
    return ur_job_upload(from, to, &uo, cancel, err);
}

/* The object store's publisher (job_finish.h): each unit built in the local tree `root` (the
 * one step in root/step; a run of several units in root/checkpoints/<unit>), its shares'
 * databases read from the store, then everything uploaded in one upload below the checkpoint
 * directory: every unit's data before any manifest, every marker last, S's own (the first
 * unit's) at the very end (unroll/job_upload.h), so S's marker says the whole set is there. */
typedef struct {
    ur_job_rshare *s;
    const char *root;
    char *dir, *as; /* the unit's, for the last call */
} bucket_pub;

static int bucket_unit(void *ctx, size_t k, const char **dir, const char **shares_at,
                       const char **as, int *skip, ur_err *err)
{
    bucket_pub *b = ctx;
    ur_free(b->dir);
    ur_free(b->as);
    b->dir = b->s->n_units == 0 ? ur_path_join(b->root, "step")
                                : ur_path_joinf(b->root, "checkpoints/%s", b->s->units[k]);
    b->as = unit_url(b->s, k);
    *dir = b->dir;
    *as = *shares_at = b->as;
    *skip = 0;
    return b->dir != NULL && b->as != NULL ? UR_OK : ur_err_oom(err);
}

static int bucket_commit(void *ctx, const volatile sig_atomic_t *cancel, ur_err *err)
{
    bucket_pub *b = ctx;
    char *from = ur_path_join(b->root, b->s->n_units == 0 ? "step" : "checkpoints");
    int rc = from == NULL         ? ur_err_oom(err)
             : b->s->n_units == 0 ? upload_finish(from, b->s->step, NULL, cancel, err)
                                  : upload_finish(from, b->s->root, b->s, cancel, err);
    if (rc == UR_OK) {
        remove_run_objects(b->s);
    }
    ur_free(from);
    return rc;
}

static int finish(ur_job_rshare *s, const volatile sig_atomic_t *cancel, ur_err *err)
{
    static const char *const one[1] = {"0"};
    char *root = NULL;
    bucket_pub b = {s, NULL, NULL, NULL};
    ur_job_publisher pub = {bucket_unit, bucket_commit, &b};
    int rc = ur_fs_make_temp_dir(&root, "unroll-finish", "the finish's directory", err);

    if (rc < 0) {
        return rc;
    }
    b.root = root;
    rc = ur_job_finish_run(s->ledger, s->where, s->count,
                           s->n_units > 0 ? (const char *const *)s->units : one,
                           s->n_units > 0 ? s->n_units : 1, &pub, cancel, err);
    (void)ur_fs_remove_tree(root, NULL);
    ur_free(b.dir);
    ur_free(b.as);
    ur_free(root);
    return rc;
}

/* The liveness of an object store's finisher (job_ledger.h): no lock tells a dead process
 * from a live one, so a claim naming this very process index is an earlier attempt of it, dead
 * since (a process index runs once at a time: a rerun is what Slurm or Kubernetes does after a
 * failure); `unroll merge` (index -1) takes any claim over (run it once no finisher is alive). */
static int claim_holder_dead(void *ctx, const char *have)
{
    const ur_job_rshare *s = ctx;
    char head[48];
    int n;
    if (s->index < 0) {
        return 1;
    }
    n = snprintf(head, sizeof head, "process %d of %d,", s->index, s->count);
    return strncmp(have, head, (size_t)n) == 0;
}

static int claim(ur_job_rshare *s, int *won, ur_err *err)
{
    ur_job_liveness live = {NULL, claim_holder_dead, s};
    char who[256];
    int took_over = 0, rc;
    ur_job_ledger_who(who, sizeof who, s->index, s->count);
    rc = ur_job_ledger_claim(s->ledger, who, &live, won, &took_over, err);
    s->took_over = took_over;
    return rc;
}

int ur_job_rshare_finish(ur_job_rshare *s, const volatile sig_atomic_t *cancel, int *published,
                         int *missing, ur_err *err)
{
    int won = 0, rc = ur_job_ledger_missing(s->ledger, s->count, NULL, missing, err);
    *published = 0;
    if (rc < 0 || *missing > 0) {
        return rc;
    }
    rc = claim(s, &won, err);
    if (rc < 0 || !won) {
        return rc;
    }
    rc = finish(s, cancel, err);
    *published = rc == UR_OK;
    return rc;
}

/* Open the run staged at `checkpoint_dir`/0 (or at the step itself) from its run.txt:
 * *found = 0 when there is none. */
static int open_staged_one(ur_job_rshare **out, const char *checkpoint_dir, int *found,
                           ur_err *err)
{
    ur_job_rshare *s = NULL;
    ur_buf run;
    size_t n = strlen(checkpoint_dir);
    char *step;
    int rc;

    *found = 0;
    while (n > 0 && checkpoint_dir[n - 1] == '/') {
        n--;
    }
    step = n >= 2 && checkpoint_dir[n - 1] == '0' && checkpoint_dir[n - 2] == '/'
               ? ur_strndup(checkpoint_dir, n)
               : ur_path_join(checkpoint_dir, "0");
    /* (a LoRA run's step is <dir>/base/0: open_staged) */
    if (step == NULL) {
        return ur_err_oom(err);
    }
    rc = rshare_new(&s, step, err);
    ur_free(step);
    if (rc < 0) {
        return rc;
    }
    s->index = -1; /* not a process of the run: `unroll merge` or ls */
    ur_buf_init(&run, 0);
    rc = ur_job_ledger_run_read(s->ledger, &run, found, err);
    if (rc == UR_OK && *found) {
        ur_job_run_info info;
        rc = ur_job_run_info_parse(&info, (const char *)run.data, s->where, err);
        if (rc == UR_OK) { /* the units: a LoRA run's (none: the one step) */
            s->count = info.count;
            s->units = info.units;
            s->n_units = s->cap_units = info.n_units;
            info.units = NULL;
            info.n_units = 0;
            ur_job_run_info_dispose(&info);
            s->run_text = ur_strdup((const char *)run.data);
            rc = s->run_text != NULL ? UR_OK : ur_err_oom(err);
        }
    }
    ur_buf_dispose(&run);
    if (rc < 0) {
        ur_job_rshare_close(s);
        return rc;
    }
    *out = s;
    return UR_OK;
}

/* As open_staged_one, for `checkpoint_dir` or a step in it: the run staged at <dir>/0, else a
 * LoRA run's at <dir>/base/0 (its units and checkpoint directory from its run.txt). */
static int open_staged(ur_job_rshare **out, const char *checkpoint_dir, int *found, ur_err *err)
{
    size_t n = strlen(checkpoint_dir);
    char *base = NULL;
    int rc = open_staged_one(out, checkpoint_dir, found, err);
    while (n > 0 && checkpoint_dir[n - 1] == '/') {
        n--;
    }
    if (rc == UR_OK && !*found && !(n >= 2 && strncmp(checkpoint_dir + n - 2, "/0", 2) == 0)) {
        ur_job_rshare_close(*out);
        *out = NULL;
        base = ur_malloc(n + 8);
        if (base == NULL) {
            return ur_err_oom(err);
        }
        memcpy(base, checkpoint_dir, n);
        memcpy(base + n, "/base/0", 8);
        rc = open_staged_one(out, base, found, err);
    }
    if (rc == UR_OK && *found) {
        if ((*out)->n_units > 0) {
            size_t sl = strlen((*out)->step), ul = strlen((*out)->units[0]);
            (*out)->root = sl > ul + 1 ? ur_strndup((*out)->step, sl - ul - 1) : NULL;
            rc = (*out)->root != NULL ? UR_OK : ur_err_oom(err);
        }
        if (rc < 0) {
            ur_job_rshare_close(*out);
            *out = NULL;
        }
    }
    ur_free(base);
    return rc;
}

int ur_job_rshare_status(const char *checkpoint_dir, ur_buf *out, int *staged, ur_err *err)
{
    ur_job_rshare *s = NULL;
    int found = 0, rc = open_staged(&s, checkpoint_dir, &found, err);

    *staged = 0;
    if (rc < 0) {
        return rc;
    }
    if (found) {
        rc = present(s->kv, "commit_success.txt", err);
        *staged = rc == 0;
        rc = rc < 0 ? rc : UR_OK;
    }
    if (rc == UR_OK && *staged) {
        rc = ur_job_ledger_status(s->ledger, s->count, s->step, out, err);
    }
    ur_job_rshare_close(s);
    return rc;
}

int ur_job_rshare_merge(const char *checkpoint_dir, const volatile sig_atomic_t *cancel,
                        char **published_to, ur_err *err)
{
    ur_job_rshare *s = NULL;
    ur_buf names;
    int rc, found = 0, missing = 0, won = 0;

    *published_to = NULL;
    rc = open_staged(&s, checkpoint_dir, &found, err);
    if (rc < 0) {
        return rc;
    }
    ur_buf_init(&names, 0);
    if (!found) {
        rc = ur_err_set(err, UR_EINVAL, "%s: no multi-process run is staged there (no %s)",
                        s->step, RUN_KEY);
    }
    if (rc == UR_OK) {
        rc = ur_job_ledger_missing(s->ledger, s->count, &names, &missing, err);
    }
    if (rc == UR_OK && missing > 0) {
        ur_buf_append(&names, "", 1, err);
        rc = ur_err_set(err, UR_EIO,
                        "%s: %d of %d shares are not complete (process index %s): rerun them "
                        "with --process-index, then merge",
                        s->step, missing, s->count, (const char *)names.data);
    }
    if (rc == UR_OK) {
        rc = claim(s, &won, err); /* a claim left by a finisher that died is taken over */
    }
    if (rc == UR_OK) {
        rc = finish(s, cancel, err);
    }
    if (rc == UR_OK) {
        *published_to = ur_strdup(s->step);
        rc = *published_to != NULL ? UR_OK : ur_err_oom(err);
    }
    ur_buf_dispose(&names);
    ur_job_rshare_close(s);
    return rc;
}

/* ---- a run of several units (LoRA) ---- */

/* The objects the units after the first hold (before a run starts there, they must be none:
 * the finish adds to them). */
static int refuse_held_units(ur_job_rshare *s, ur_err *err)
{
    ur_kvstore *kv = NULL;
    census c;
    int rc = ur_kvstore_open_url(&kv, s->root, 0, err);
    memset(&c, 0, sizeof c);
    for (size_t k = 1; k < s->n_units && rc == UR_OK; k++) {
        size_t len = strlen(s->units[k]);
        char *prefix = ur_malloc(len + 2); /* a step's objects, not a sibling "0.tmp" */
        if (prefix == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        memcpy(prefix, s->units[k], len);
        prefix[len] = ur_job_finish_is_step(s->units[k]) ? '/' : '\0';
        prefix[len + 1] = '\0';
        rc = ur_kvstore_list(kv, prefix, count_objects, &c, err);
        ur_free(prefix);
    }
    if (rc == UR_OK && c.n > 0 && present(s->kv, RUN_KEY, err) == 0) {
        rc = ur_err_set(err, UR_EINVAL,
                        "%s already holds %zu object%s (e.g. %s) where the run would publish its "
                        "adapters: refusing to write over them (delete them first)",
                        s->root, c.n, c.n == 1 ? "" : "s", c.first);
    }
    ur_kvstore_close(kv);
    return rc;
}

int ur_job_rshare_open_units(ur_job_rshare **out, const char *checkpoint_dir,
                             const char *const *units, size_t n_units, int count, int index,
                             const char *run_text, int *published, ur_err *err)
{
    ur_job_rshare *s = NULL;
    ur_buf text;
    char *step = NULL, *root = NULL;
    size_t n = strlen(checkpoint_dir);
    int rc;

    while (n > 0 && checkpoint_dir[n - 1] == '/') {
        n--;
    }
    ur_buf_init(&text, 0);
    root = ur_strndup(checkpoint_dir, n);
    step = root != NULL ? ur_path_join(root, units[0]) : NULL;
    rc = step != NULL ? ur_buf_append(&text, run_text, strlen(run_text), err) : ur_err_oom(err);
    for (size_t k = 0; k < n_units && rc == UR_OK; k++) {
        rc = ur_buf_printf(&text, err, "unit %s\n", units[k]);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(&text, "", 1, err);
    }
    if (rc == UR_OK) {
        rc = rshare_new(&s, step, err);
    }
    if (rc == UR_OK) {
        s->root = root;
        root = NULL;
        s->units = ur_calloc(n_units, sizeof *s->units);
        s->cap_units = n_units;
        rc = s->units != NULL ? UR_OK : ur_err_oom(err);
        for (size_t k = 0; k < n_units && rc == UR_OK; k++) {
            s->units[k] = ur_strdup(units[k]);
            s->n_units++;
            rc = s->units[k] != NULL ? UR_OK : ur_err_oom(err);
        }
    }
    if (rc == UR_OK) { /* not once published (a rerun then does nothing) or started */
        rc = present(s->kv, "commit_success.txt", err);
        rc = rc == 0 ? present(s->kv, RUN_KEY, err) : rc < 0 ? rc : 1;
        rc = rc == 0 ? refuse_held_units(s, err) : rc < 0 ? rc : UR_OK;
    }
    if (rc == UR_OK) {
        ur_job_rshare *opened = NULL;
        rc = ur_job_rshare_open(&opened, step, count, index, (const char *)text.data, published,
                                err);
        if (rc == UR_OK) { /* the units go to the opened run */
            opened->root = s->root;
            opened->units = s->units;
            opened->n_units = s->n_units;
            opened->cap_units = s->cap_units;
            s->root = NULL;
            s->units = NULL;
            s->n_units = s->cap_units = 0;
            *out = opened;
        }
    }
    ur_job_rshare_close(s);
    ur_buf_dispose(&text);
    ur_free(step);
    ur_free(root);
    return rc;
}

int ur_job_rshare_upload_units(ur_job_rshare *s, const char *const *dirs,
                               const char *const *meta_dirs, ur_job_rprogress *const *progress,
                               const char *summary, const volatile sig_atomic_t *cancel,
                               ur_err *err)
{
    ur_job_upload_opts uo;
    ur_buf b;
    char key[1024];
    int rc;

    memset(&uo, 0, sizeof uo);
    uo.replace = 1; /* what a killed attempt of this share left */
    uo.threads = 16;
    ur_buf_init(&b, 0);
    rc = ur_job_ledger_clear_done(s->ledger, s->index, err);
    for (size_t k = 0; k < s->n_units && rc == UR_OK; k++) {
        if (ur_job_finish_is_step(s->units[k]) && progress != NULL && progress[k] != NULL) {
            rc = ur_job_rprogress_upload(progress[k], dirs[k], meta_dirs[k], 1, cancel, err);
        } else if (ur_job_finish_is_step(s->units[k])) {
            char *at = unit_url(s, k), *db = NULL, *meta = NULL;
            char mk[64];
            meta_key(mk, sizeof mk, k, s->index, "");
            mk[strlen(mk) - 1] = '\0'; /* no trailing '/' */
            db = at != NULL ? ur_path_joinf(at, "items/ocdbt.process_%d", s->index) : NULL;
            meta = ur_path_join(s->step, mk);
            rc = db != NULL && meta != NULL ? ur_job_upload(dirs[k], db, &uo, cancel, err)
                                            : ur_err_oom(err);
            if (rc == UR_OK) {
                rc = ur_job_upload(meta_dirs[k], meta, &uo, cancel, err);
            }
            ur_free(at);
            ur_free(db);
            ur_free(meta);
        } else if (s->index == 0) { /* the same file in every share: one copy is enough */
            ur_buf_reset(&b);
            b.limit = MAX_META;
            rc = ur_fs_read_file(&b, dirs[k], MAX_META, err);
            unit_file_key(key, sizeof key, s, k);
            if (rc == UR_OK) {
                rc = ur_kvstore_write(s->kv, key, b.data, b.len, err);
            }
        }
    }
    if (rc == UR_OK) {
        rc = ur_job_ledger_mark_done(s->ledger, s->index, summary, err);
    }
    ur_buf_dispose(&b);
    return rc;
}
