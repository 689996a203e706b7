/* `unroll verify`'s value comparison on the cores (see verify_compare.h). */
#include "verify_compare.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/ckd.h"
#include "unroll/tensor.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Comparisons queued at once: enough to keep the helpers busy while the matching thread
 * finds the next pairs; each holds its two names (~2 KB) and its issues (~4 KB). */
#define QUEUE 64

/* The buffers of one thread: output box, input box, cast input box. */
typedef struct {
    ur_buf bo, bi, be;
} boxes;

typedef struct {
    int done;
    size_t tag;
    ur_vcmp_req req;
    char oname[1024];
    char src[1200];
    ur_vcmp_result res;
    int rc;
    ur_err err;
} job;

struct ur_vcmp {
    ur_orbax_ckpt *in, *out;
    ur_vcmp_apply_fn apply;
    void *ctx;
    pthread_mutex_t lock;
    pthread_cond_t cv; /* a job queued, a job done, or the end */
    job *ring;
    uint64_t head; /* next job to hand back */
    uint64_t take; /* next job to run */
    uint64_t tail; /* next place to fill */
    int end;       /* no more jobs: helpers leave once the queue is empty */
    int failed;    /* a job handed back failed: the rest are not applied */
    pthread_t *tids;
    int n_tids;
    boxes mine; /* the submitting thread's */
};

static void boxes_init(boxes *b)
{
    ur_buf_init(&b->bo, 0);
    ur_buf_init(&b->bi, 0);
    ur_buf_init(&b->be, 0);
}

static void boxes_dispose(boxes *b)
{
    ur_buf_dispose(&b->bo);
    ur_buf_dispose(&b->bi);
    ur_buf_dispose(&b->be);
}

static void format_value(char *buf, size_t n, ur_dtype dt, const unsigned char *p)
{
    size_t sz = ur_dtype_size(dt);
    uint64_t bits = 0;
    memcpy(&bits, p, sz < 8 ? sz : 8);
    if (dt == UR_DT_BFLOAT16 || dt == UR_DT_FLOAT32) {
        uint32_t f32 = dt == UR_DT_BFLOAT16 ? (uint32_t)bits << 16 : (uint32_t)bits;
        float f;
        memcpy(&f, &f32, sizeof f);
        snprintf(buf, n, "0x%0*" PRIx64 " (%.9g)", (int)(2 * sz), bits, (double)f);
    } else if (dt == UR_DT_FLOAT64) {
        double d;
        memcpy(&d, &bits, sizeof d);
        snprintf(buf, n, "0x%016" PRIx64 " (%.17g)", bits, d);
    } else {
        snprintf(buf, n, "0x%0*" PRIx64, (int)(2 * (sz ? sz : 1)), bits);
    }
}

/* The elements of one output chunk that differ from what the input says, into res. */
static void note_differences(const ur_vcmp_req *q, ur_vcmp_result *res, const unsigned char *exp,
                             const unsigned char *got, uint64_t nel, size_t osz, int rank,
                             const uint64_t *start, const uint64_t *count)
{
    for (uint64_t e = 0; e < nel; e++) {
        ur_verify_issue *is;
        uint64_t r2 = e;
        if (memcmp(exp + e * osz, got + e * osz, osz) == 0) {
            continue;
        }
        res->elements_bad++;
        res->bad_leaf = 1;
        if (res->n_value >= UR_VCMP_VALUE_ISSUES) {
            continue;
        }
        is = &res->value[res->n_value++];
        memset(is, 0, sizeof *is);
        is->kind = UR_VERIFY_VALUE;
        snprintf(is->leaf, sizeof is->leaf, "%s", q->oname);
        snprintf(is->source, sizeof is->source, "%s", q->src);
        is->rank = rank;
        for (int d = rank - 1; d >= 0; d--) {
            is->index[d] = start[d] + r2 % count[d];
            r2 /= count[d];
        }
        format_value(is->expected, sizeof is->expected, q->want, exp + e * osz);
        format_value(is->got, sizeof is->got, q->want, got + e * osz);
    }
}

/* Compare the request one output chunk at a time. */
static int compare(ur_vcmp *c, boxes *bx, const ur_vcmp_req *q, ur_vcmp_result *res, ur_err *err)
{
    ur_zarr_array *ao = NULL, *ai = NULL;
    const ur_zarr_info *io;
    size_t isz = ur_dtype_size(q->i->dtype), osz = ur_dtype_size(q->want);
    int rc;

    memset(res, 0, sizeof *res);
    rc = ur_orbax_ckpt_open_array(c->out, q->o, &ao, err);
    if (rc == UR_OK) {
        rc = ur_orbax_ckpt_open_array(c->in, q->i, &ai, err);
    }
    if (rc < 0) {
        goto out;
    }
    io = ur_zarr_array_info(ao);
    for (uint64_t ch = 0; ch < io->chunk_count; ch++) {
        uint64_t idx[UR_MAX_RANK], start[UR_MAX_RANK], count[UR_MAX_RANK];
        uint64_t istart[UR_MAX_RANK], icount[UR_MAX_RANK];
        uint64_t rem = ch, nel = 1;
        size_t bytes_o, bytes_i;
        const unsigned char *exp;
        int k = 0, m = 0;
        for (int d = io->rank - 1; d >= 0; d--) {
            idx[d] = rem % io->grid[d];
            rem /= io->grid[d];
        }
        for (int d = 0; d < io->rank; d++) {
            start[d] = idx[d] * io->chunk_shape[d];
            count[d] = io->shape[d] - start[d];
            if (count[d] > io->chunk_shape[d]) {
                count[d] = io->chunk_shape[d];
            }
            nel *= count[d];
        }
        for (int d = 0; d < (int)q->i->rank; d++) {
            if (m < q->nfix && d == q->fax[m]) {
                istart[d] = (uint64_t)q->fidx[m++];
                icount[d] = 1;
            } else {
                istart[d] = start[k];
                icount[d] = count[k];
                k++;
            }
        }
        if (ur_ckd_mul(&bytes_o, (size_t)nel, osz) || ur_ckd_mul(&bytes_i, (size_t)nel, isz)) {
            rc = ur_err_set(err, UR_ECORRUPT, "chunk size overflows");
            goto out;
        }
        ur_buf_reset(&bx->bo);
        ur_buf_reset(&bx->bi);
        ur_buf_reset(&bx->be);
        if ((rc = ur_buf_reserve(&bx->bo, bytes_o, err)) < 0 ||
            (rc = ur_buf_reserve(&bx->bi, bytes_i, err)) < 0 ||
            (rc = ur_buf_reserve(&bx->be, bytes_o, err)) < 0) {
            goto out;
        }
        rc = ur_zarr_array_read_box(ao, start, count, bx->bo.data, err);
        if (rc == UR_OK) {
            rc = ur_zarr_array_read_box(ai, istart, icount, bx->bi.data, err);
        }
        if (rc < 0) {
            goto out;
        }
        exp = bx->bi.data;
        if (q->want != q->i->dtype) {
            rc = ur_tensor_cast_dense(bx->be.data, q->want, bx->bi.data, q->i->dtype, (size_t)nel,
                                      err);
            if (rc < 0) {
                goto out;
            }
            exp = bx->be.data;
        }
        res->elements += nel;
        if (memcmp(exp, bx->bo.data, bytes_o) != 0) {
            note_differences(q, res, exp, bx->bo.data, nel, osz, io->rank, start, count);
        }
    }
out:
    ur_zarr_array_close(ao);
    ur_zarr_array_close(ai);
    if (rc < 0) {
        ur_err_wrap(err, "verify '%s'", q->oname);
    }
    return rc;
}

static void run_job(ur_vcmp *c, boxes *bx, job *j)
{
    ur_err_clear(&j->err);
    j->rc = compare(c, bx, &j->req, &j->res, &j->err);
}

/* Under the lock: the next queued job, marked taken (NULL: none queued). */
static job *take_job(ur_vcmp *c)
{
    if (c->take == c->tail) {
        return NULL;
    }
    return &c->ring[c->take++ % QUEUE];
}

static void *helper(void *arg)
{
    ur_vcmp *c = arg;
    boxes bx;
    boxes_init(&bx);
    pthread_mutex_lock(&c->lock);
    for (;;) {
        job *j = take_job(c);
        if (j == NULL) {
            if (c->end) {
                break;
            }
            pthread_cond_wait(&c->cv, &c->lock);
            continue;
        }
        pthread_mutex_unlock(&c->lock);
        run_job(c, &bx, j);
        pthread_mutex_lock(&c->lock);
        j->done = 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->lock);
    boxes_dispose(&bx);
    return NULL;
}

/* Under the lock: hand back the finished jobs at the head, in order (the lock is let go
 * around `apply`; the job's place is not reused before head moves past it). A failure. */
static int hand_back(ur_vcmp *c, ur_err *err)
{
    int rc = UR_OK;
    while (c->head < c->tail && c->ring[c->head % QUEUE].done) {
        job *j = &c->ring[c->head % QUEUE];
        if (!c->failed && j->rc < 0) {
            c->failed = 1;
            *err = j->err;
            rc = j->rc;
        } else if (!c->failed) {
            pthread_mutex_unlock(&c->lock);
            c->apply(c->ctx, j->tag, &j->res);
            pthread_mutex_lock(&c->lock);
        }
        c->head++;
    }
    return rc;
}

/* Under the lock: run a queued job here, or wait for one to finish. */
static void help_or_wait(ur_vcmp *c)
{
    job *j = take_job(c);
    if (j == NULL) {
        pthread_cond_wait(&c->cv, &c->lock);
        return;
    }
    pthread_mutex_unlock(&c->lock);
    run_job(c, &c->mine, j);
    pthread_mutex_lock(&c->lock);
    j->done = 1;
    pthread_cond_broadcast(&c->cv);
}

int ur_vcmp_create(ur_vcmp **out_cmp, ur_orbax_ckpt *in, ur_orbax_ckpt *out, int helpers,
                   ur_vcmp_apply_fn apply, void *ctx, ur_err *err)
{
    ur_vcmp *c = ur_calloc(1, sizeof *c);
    if (c == NULL) {
        return ur_err_oom(err);
    }
    c->in = in;
    c->out = out;
    c->apply = apply;
    c->ctx = ctx;
    boxes_init(&c->mine);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cv, NULL);
    if (helpers > 0) {
        c->ring = ur_calloc(QUEUE, sizeof *c->ring);
        c->tids = ur_calloc((size_t)helpers, sizeof *c->tids);
        if (c->ring == NULL || c->tids == NULL) {
            ur_vcmp_free(c);
            return ur_err_oom(err);
        }
        for (int i = 0; i < helpers; i++) {
            if (pthread_create(&c->tids[i], NULL, helper, c) != 0) {
                break; /* fewer helpers (or none: the submitting thread runs them all) */
            }
            c->n_tids++;
        }
    }
    *out_cmp = c;
    return UR_OK;
}

/* Under the lock: every queued job run and handed back. The first failure. */
static int drain(ur_vcmp *c, ur_err *err)
{
    int rc = UR_OK;
    for (;;) {
        int r = hand_back(c, err);
        rc = rc == UR_OK ? r : rc;
        if (c->head == c->tail) {
            return rc;
        }
        help_or_wait(c);
    }
}

int ur_vcmp_submit(ur_vcmp *c, size_t tag, const ur_vcmp_req *req, ur_err *err)
{
    job *j;
    int rc;
    if (c->ring != NULL && req->exclusive) {
        pthread_mutex_lock(&c->lock);
        rc = drain(c, err);
        if (rc == UR_OK && c->failed) {
            rc = UR_EINTERNAL; /* reported by the hand-back that saw it */
        }
        pthread_mutex_unlock(&c->lock);
        if (rc < 0) {
            return rc;
        }
    }
    if (c->ring == NULL || req->exclusive) { /* here and now */
        ur_vcmp_result res;
        rc = compare(c, &c->mine, req, &res, err);
        if (rc == UR_OK) {
            c->apply(c->ctx, tag, &res);
        } else if (c->ring != NULL) {
            c->failed = 1; /* the queue is empty: no helper reads it */
        }
        return rc;
    }
    pthread_mutex_lock(&c->lock);
    rc = hand_back(c, err);
    while (rc == UR_OK && !c->failed && c->tail - c->head == QUEUE) {
        help_or_wait(c);
        rc = hand_back(c, err);
    }
    if (rc == UR_OK && c->failed) {
        rc = UR_EINTERNAL; /* reported by the hand-back that saw it */
    }
    if (rc == UR_OK) {
        j = &c->ring[c->tail % QUEUE];
        j->done = 0;
        j->tag = tag;
        j->req = *req;
        snprintf(j->oname, sizeof j->oname, "%s", req->oname);
        snprintf(j->src, sizeof j->src, "%s", req->src);
        j->req.oname = j->oname;
        j->req.src = j->src;
        c->tail++;
        pthread_cond_signal(&c->cv);
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int ur_vcmp_finish(ur_vcmp *c, ur_err *err)
{
    int rc = UR_OK;
    if (c->ring == NULL) {
        return UR_OK;
    }
    pthread_mutex_lock(&c->lock);
    rc = drain(c, err);
    pthread_mutex_unlock(&c->lock);
    return rc;
}

void ur_vcmp_free(ur_vcmp *c)
{
    if (c == NULL) {
        return;
    }
    pthread_mutex_lock(&c->lock);
    c->end = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; i < c->n_tids; i++) {
        pthread_join(c->tids[i], NULL);
    }
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    boxes_dispose(&c->mine);
    ur_free(c->ring);
    ur_free(c->tids);
    ur_free(c);
}
