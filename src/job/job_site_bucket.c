/* ur_job_site_bucket (job_shares.h): a run into an object store (s3://, gs://), its objects under
 * the first unit's prefix (unroll/job_share_remote.h). The share converts in a private local
 * tree (a local ur_job_share in $TMPDIR that a rerun on this machine continues), each step
 * unit's progress uploaded at each commit (a rerun elsewhere continues from it too), and the
 * complete share is uploaded. */
#include "job_shares.h"

#include "unroll/alloc.h"
#include "unroll/crc32c.h"
#include "unroll/fs.h"
#include "unroll/job_share_remote.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    ur_job_local local; /* first: the local tree's unit steps (ur_job_local_*) */
    const ur_job *j;
    ur_job_rshare *rs;
    ur_job_rprogress *prog; /* the current step unit's progress in the store (else NULL) */
    char *step;               /* the first unit's prefix S */
    ur_buf store_text;        /* the run's text in the store (portable) */
    char *root;               /* the private local tree (NULL: none, or removed) */
    int named;                /* a rerun on this machine finds `root` (kept after a failure) */
    char *db, *meta;          /* the current step unit's local database and metadata */
} bucket_job;

static int bucket_open(void **d, const ur_job *j, int *published, ur_err *err)
{
    const ur_settings *s = j->s;
    const ur_plan_units *u = &j->units;
    bucket_job *bj;
    int rc;

    if (j->o->replace && u->n_units > 1) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "--replace with a %s run into an object store: delete %s/base/0 and "
                          "%s/loras/ first (no process may clear what the others write)",
                          j->count > 1 ? "multi-process" : "resumable", s->checkpoint_dir,
                          s->checkpoint_dir);
    }
    if (j->o->replace) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "--replace with a %s run into an object store: delete %s/0 first (no "
                          "process may clear what the others write)",
                          j->count > 1 ? "multi-process" : "resumable", s->checkpoint_dir);
    }
    bj = ur_calloc(1, sizeof *bj);
    if (bj == NULL) {
        return ur_err_oom(err);
    }
    bj->j = j;
    ur_buf_init(&bj->store_text, 0);
    bj->step = ur_path_join(s->checkpoint_dir, u->units[0]);
    rc = bj->step != NULL ? ur_job_text(&bj->store_text, j, 1, err) : ur_err_oom(err);
    /* one unit: the step S alone (its run text names no unit); several: S = the first unit's,
     * the others below the checkpoint directory */
    if (rc == UR_OK && u->n_units == 1) {
        rc = ur_job_rshare_open(&bj->rs, bj->step, j->count, j->index,
                                (const char *)bj->store_text.data, published, err);
    } else if (rc == UR_OK) {
        rc = ur_job_rshare_open_units(&bj->rs, s->checkpoint_dir, u->units, u->n_units, j->count,
                                      j->index, (const char *)bj->store_text.data, published, err);
    }
    *d = bj;
    return rc;
}

static int bucket_is_done(void *d, int i, int *done, ur_err *err)
{
    return ur_job_rshare_is_done(((bucket_job *)d)->rs, i, done, err);
}

/* The private local tree a share converts in: $TMPDIR/unroll-share-<key>-<i> where key is the
 * CRC-32C of the local tree's run text (which holds the run's text in the store) and of the
 * destination, so a rerun of the share on this machine finds what a killed attempt committed
 * and continues from there; when that name is not ours to take, a new mkdtemp tree (*named =
 * 0: no rerun will find it). */
static int share_scratch(char **root, int *named, const ur_buf *local_text,
                         const char *checkpoint_dir, int index, ur_err *err)
{
    char name[64];
    int created = 0;
    ur_err ignored;
    snprintf(name, sizeof name, "unroll-share-%08x%08x-%d",
             ur_crc32c(0, local_text->data, local_text->len),
             ur_crc32c(0, checkpoint_dir, ur_path_trimmed_len(checkpoint_dir)), index);
    *named = ur_fs_make_named_temp_dir(root, name, &created, "the share's staging directory",
                                       &ignored) == UR_OK;
    return *named ? UR_OK
                  : ur_fs_make_temp_dir(root, "unroll-share", "the staging directory", err);
}

/* The summary a complete share of the local tree keeps in its done marker, as one line. */
static int done_summary(const bucket_job *bj, char *line, size_t line_size, ur_err *err)
{
    char *p = ur_path_joinf(bj->root, "checkpoints" UR_JOB_SHARE_SUFFIX "/shares/%d.done",
                            bj->j->index);
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

/* Step unit k's progress in the store (bj->prog), with the local paths it mirrors (bj->db,
 * bj->meta); its mark's resume point into *stored. */
static int open_unit_progress(bucket_job *bj, size_t k, uint64_t *stored, ur_err *err)
{
    const ur_job *j = bj->j;
    ur_job_share *sh = bj->local.sh;
    char *at = ur_path_join(j->s->checkpoint_dir, j->units.units[k]);
    int rc;
    ur_job_rprogress_close(bj->prog);
    bj->prog = NULL;
    ur_free(bj->db);
    ur_free(bj->meta);
    bj->db = ur_path_joinf(ur_job_share_unit_path(sh, k), "items/ocdbt.process_%d", j->index);
    bj->meta = ur_job_share_unit_meta_dir(sh, k);
    rc = at != NULL && bj->db != NULL && bj->meta != NULL
             ? ur_job_rprogress_open_unit(&bj->prog, bj->step, k == 0 ? bj->step : at, j->index, k,
                                          err)
             : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_job_rprogress_read(bj->prog, stored, err);
    }
    ur_free(at);
    return rc;
}

/* When the store's progress mark of step unit k is further along than the local tree (a rerun
 * on another machine, or after a rerun there): the unit's local tree is replaced by the
 * store's database and metadata as of the mark, and continued from it. */
static int take_stored_progress(bucket_job *bj, size_t k, uint64_t stored, ur_err *err)
{
    ur_job_share *sh = bj->local.sh;
    int rc;
    if (stored <= ur_job_share_unit_saved_progress(sh, k)) {
        return UR_OK;
    }
    /* the share's lock first: another attempt of it running on this machine keeps its tree */
    rc = ur_job_share_lock(sh, err);
    if (rc == UR_OK) {
        rc = ur_fs_remove_tree(bj->db, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_remove_tree(bj->meta, err);
    }
    /* a killed attempt may have committed the unit whole here: it is continued as fetched */
    if (rc == UR_OK) {
        rc = ur_job_share_unit_undo(sh, k, err);
    }
    if (rc == UR_OK) {
        rc = ur_job_rprogress_fetch(bj->prog, bj->db, bj->meta, err);
    }
    if (rc == UR_OK) {
        rc = ur_job_share_unit_save_progress(sh, k, stored, err);
    }
    if (rc == UR_OK) {
        const ur_job *j = bj->j;
        if (j->units.n_units == 1) {
            ur_job_note(j,
                        "share %d of %d: fetched its progress from the store (work items "
                        "before %llu)",
                        j->index, j->count, (unsigned long long)stored);
        } else {
            ur_job_note(j,
                        "share %d of %d: fetched the progress of %s from the store (work items "
                        "before %llu)",
                        j->index, j->count, j->units.units[k], (unsigned long long)stored);
        }
    }
    return rc;
}

static int bucket_take(void *d, int *converted, char *line, size_t line_size, ur_err *err)
{
    bucket_job *bj = d;
    const ur_job *j = bj->j;
    const ur_plan_units *u = &j->units;
    char *dest = NULL;
    uint64_t stored = 0;
    ur_buf text;
    int rc;

    *converted = 0;
    /* the private tree is a local run's (run.txt with this machine's paths; the text in the
     * store is the same on every machine, and is part of it, so that a tree left by a run that
     * differs in what only that text records, the config's content, is not taken) */
    ur_buf_init(&text, 0);
    rc = ur_buf_printf(&text, err, "%sobject-store run:\n%s", (const char *)j->local_text.data,
                       (const char *)bj->store_text.data);
    if (rc == UR_OK) {
        rc = ur_buf_append(&text, "", 1, err); /* NUL-terminated */
        text.len--;
    }
    if (rc == UR_OK) {
        rc = share_scratch(&bj->root, &bj->named, &text, j->s->checkpoint_dir, j->index, err);
    }
    if (rc == UR_OK) {
        dest = ur_path_join(bj->root, "checkpoints");
        rc = dest != NULL
                 ? ur_job_share_open_units(&bj->local.sh, dest, u->units, u->n_units, j->count,
                                           j->index, (const char *)text.data, err)
                 : ur_err_oom(err);
    }
    /* a one-unit run's progress is also in the store (ur_job_rprogress; a run of several
     * units: as each begins, bucket_unit_begin) */
    if (rc == UR_OK && u->n_units == 1) {
        rc = open_unit_progress(bj, 0, &stored, err);
        if (rc == UR_OK && !ur_job_share_is_done(bj->local.sh, j->index)) {
            rc = take_stored_progress(bj, 0, stored, err);
        }
    }
    if (rc == UR_OK && ur_job_share_is_done(bj->local.sh, j->index)) {
        /* converted by a killed attempt that did not finish its upload */
        *converted = 1;
        rc = done_summary(bj, line, line_size, err);
    } else if (rc == UR_OK) {
        rc = ur_job_share_lock(bj->local.sh, err);
    }
    ur_buf_dispose(&text);
    ur_free(dest);
    return rc;
}

/* A run of several units: step unit k continued from the store's progress of it when that is
 * further along than the local tree (a rerun on a replacement machine). */
static int bucket_unit_begin(void *d, size_t k, const char **step_dir, const char **meta_dir,
                             uint64_t *resume_from, ur_err *err)
{
    bucket_job *bj = d;
    uint64_t stored = 0;
    int rc = UR_OK;
    if (bj->j->units.n_units > 1) {
        rc = open_unit_progress(bj, k, &stored, err);
        if (rc == UR_OK) {
            rc = take_stored_progress(bj, k, stored, err);
        }
    }
    return rc == UR_OK ? ur_job_local_unit_begin(d, k, step_dir, meta_dir, resume_from, err) : rc;
}

static int bucket_save_progress(void *d, uint64_t next_item, ur_err *err)
{
    bucket_job *bj = d;
    int rc = ur_job_share_save_progress(bj->local.sh, next_item, err);
    if (rc == UR_OK && bj->prog != NULL) {
        rc = ur_job_rprogress_save(bj->prog, bj->db, bj->meta, next_item, bj->j->o->cancel, err);
    }
    return rc;
}

static int bucket_mark_done(void *d, const char *summary, ur_err *err)
{
    return ur_job_share_mark_done(((bucket_job *)d)->local.sh, summary, err);
}

/* Upload every unit's share (a several-unit run: ur_job_rshare_upload_units), over what each
 * step unit's progress uploaded. */
static int upload_units(bucket_job *bj, const char *summary, ur_err *err)
{
    const ur_job *j = bj->j;
    size_t n = j->units.n_units;
    char **dirs = ur_calloc(n, sizeof *dirs), **metas = ur_calloc(n, sizeof *metas);
    ur_job_rprogress **progress = ur_calloc(n, sizeof *progress);
    int rc = dirs != NULL && metas != NULL && progress != NULL ? UR_OK : ur_err_oom(err);
    for (size_t k = 0; rc == UR_OK && k < n; k++) {
        uint64_t stored = 0;
        if (ur_job_is_step_unit(k)) {
            rc = open_unit_progress(bj, k, &stored, err);
            progress[k] = bj->prog; /* owned here now */
            bj->prog = NULL;
        }
    }
    for (size_t k = 0; dirs != NULL && metas != NULL && rc == UR_OK && k < n; k++) {
        const char *at = ur_job_share_unit_path(bj->local.sh, k);
        dirs[k] = ur_job_is_step_unit(k) ? ur_path_joinf(at, "items/ocdbt.process_%d", j->index)
                                         : ur_strdup(at);
        metas[k] = k == 0 ? ur_path_joinf(bj->root, "checkpoints" UR_JOB_SHARE_SUFFIX "/shares/%d",
                                          j->index)
                          : ur_path_joinf(bj->root,
                                          "checkpoints" UR_JOB_SHARE_SUFFIX "/shares/%d.u%zu",
                                          j->index, k);
        rc = dirs[k] != NULL && metas[k] != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = ur_job_rshare_upload_units(bj->rs, (const char *const *)dirs,
                                        (const char *const *)metas, progress, summary,
                                        j->o->cancel, err);
    }
    for (size_t k = 0; progress != NULL && k < n; k++) {
        ur_job_rprogress_close(progress[k]);
    }
    ur_free(progress);
    for (size_t k = 0; k < n; k++) {
        ur_free(dirs != NULL ? dirs[k] : NULL);
        ur_free(metas != NULL ? metas[k] : NULL);
    }
    ur_free(dirs);
    ur_free(metas);
    return rc;
}

/* The complete share uploaded, then its local tree removed (not needed any more). */
static int bucket_send(void *d, const char *summary, ur_err *err)
{
    bucket_job *bj = d;
    const ur_job *j = bj->j;
    int rc;
    ur_job_note(j, "share %d of %d: uploading it to %.*s", j->index, j->count,
                (int)ur_path_trimmed_len(j->s->checkpoint_dir), j->s->checkpoint_dir);
    rc = j->units.n_units == 1
             ? ur_job_rshare_upload(bj->rs, bj->prog, bj->db, bj->meta, summary, j->o->cancel, err)
             : upload_units(bj, summary, err);
    if (rc == UR_OK) {
        ur_job_rprogress_close(bj->prog);
        bj->prog = NULL;
        ur_job_share_close(bj->local.sh);
        bj->local.sh = NULL;
        (void)ur_fs_remove_tree(bj->root, NULL);
        ur_free(bj->root);
        bj->root = NULL;
    }
    return rc;
}

static int bucket_finish(void *d, const volatile sig_atomic_t *cancel, int *published,
                         int *missing, int *took_over, char **to, ur_err *err)
{
    bucket_job *bj = d;
    int rc = ur_job_rshare_finish(bj->rs, cancel, published, missing, err);
    *took_over = rc == UR_OK && ur_job_rshare_took_over(bj->rs);
    *to = NULL;
    if (rc == UR_OK && *published) {
        *to = ur_strdup(bj->j->s->checkpoint_dir);
        rc = *to != NULL ? UR_OK : ur_err_oom(err);
    }
    return rc;
}

static void bucket_close(void *d, int rc)
{
    bucket_job *bj = d;
    ur_job_rprogress_close(bj->prog);
    ur_job_share_close(bj->local.sh);
    /* a named tree is kept after a failure: the rerun continues from it (and it may be in use
     * by another attempt of this share, whose lock refused this one) */
    if (bj->root != NULL && (rc == UR_OK || !bj->named)) {
        (void)ur_fs_remove_tree(bj->root, NULL);
    }
    ur_job_rshare_close(bj->rs);
    ur_buf_dispose(&bj->store_text);
    ur_free(bj->root);
    ur_free(bj->step);
    ur_free(bj->db);
    ur_free(bj->meta);
    ur_free(bj);
}

const ur_job_site ur_job_site_bucket = {
    .open = bucket_open,
    .is_done = bucket_is_done,
    .take = bucket_take,
    .unit_is_done = ur_job_local_unit_is_done,
    .unit_begin = bucket_unit_begin,
    .save_progress = bucket_save_progress,
    .unit_done = ur_job_local_unit_done,
    .unit_path = ur_job_local_unit_path,
    .mark_done = bucket_mark_done,
    .send = bucket_send,
    .finish = bucket_finish,
    .close = bucket_close,
};
