/* ur_job_site_dir (job_shares.h): a run staged beside a local checkpoint directory C, in
 * `<C>.unroll-multi/`, and published into C by rename (unroll/job_share.h). */
#include "job_shares.h"

#include "unroll/alloc.h"
#include "unroll/job_publish.h"

#include <string.h>

typedef struct {
    ur_job_local local; /* first: the unit steps (ur_job_local_*) */
} dir_job;

static int dir_open(void **d, const ur_job *j, int *published, ur_err *err)
{
    const char *dest = j->s->checkpoint_dir;
    const ur_plan_units *u = &j->units;
    dir_job *dj = ur_calloc(1, sizeof *dj);
    int rc;

    if (dj == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_job_publish_check(dest, u->units, u->n_units, j->inputs, j->n_inputs, err);
    if (rc == UR_OK) {
        rc = ur_job_share_open_units(&dj->local.sh, dest, u->units, u->n_units, j->count, j->index,
                                     (const char *)j->local_text.data, err);
    }
    if (rc < 0) {
        ur_free(dj);
        return rc;
    }
    *published = ur_job_share_published(dj->local.sh);
    if (*published) { /* what a finisher killed after the publication left beside C */
        ur_job_publish_tidy(dest, (const char *const *)u->units, u->n_units, j->inputs,
                            j->n_inputs);
    }
    *d = dj;
    return UR_OK;
}

static int dir_is_done(void *d, int i, int *done, ur_err *err)
{
    (void)err;
    *done = ur_job_share_is_done(((dir_job *)d)->local.sh, i);
    return UR_OK;
}

static int dir_take(void *d, int *converted, char *line, size_t line_size, ur_err *err)
{
    (void)line;
    (void)line_size;
    *converted = 0;
    return ur_job_share_lock(((dir_job *)d)->local.sh, err);
}

static int dir_save_progress(void *d, uint64_t next_item, ur_err *err)
{
    return ur_job_share_save_progress(((dir_job *)d)->local.sh, next_item, err);
}

static int dir_mark_done(void *d, const char *summary, ur_err *err)
{
    return ur_job_share_mark_done(((dir_job *)d)->local.sh, summary, err);
}

/* The share is where the finisher reads it: staged beside C. */
static int dir_send(void *d, const char *summary, ur_err *err)
{
    (void)d;
    (void)summary;
    (void)err;
    return UR_OK;
}

static int dir_finish(void *d, const volatile sig_atomic_t *cancel, int *published, int *missing,
                      int *took_over, char **to, ur_err *err)
{
    *took_over = 0;
    return ur_job_share_finish(((dir_job *)d)->local.sh, cancel, published, missing, to, err);
}

static void dir_close(void *d, int rc)
{
    dir_job *dj = d;
    (void)rc;
    ur_job_share_close(dj->local.sh);
    ur_free(dj);
}

const ur_job_site ur_job_site_dir = {
    .open = dir_open,
    .is_done = dir_is_done,
    .take = dir_take,
    .unit_is_done = ur_job_local_unit_is_done,
    .unit_begin = ur_job_local_unit_begin,
    .save_progress = dir_save_progress,
    .unit_done = ur_job_local_unit_done,
    .unit_path = ur_job_local_unit_path,
    .mark_done = dir_mark_done,
    .send = dir_send,
    .finish = dir_finish,
    .close = dir_close,
};
