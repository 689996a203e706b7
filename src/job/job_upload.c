/* The upload of a staged checkpoint tree to an object store (unroll/job_upload.h). */
#define _POSIX_C_SOURCE 200809L
#include "unroll/job_upload.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/job_claim.h"
#include "unroll/kvstore.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARKER "commit_success.txt"

typedef struct {
    char *key;
    uint64_t size;
    int phase; /* 0 data, 1 manifest, 2 item metadata, 3 step metadata, 4 marker */
    int depth; /* '/' in the key */
    int written;
} item;

typedef struct {
    item *v;
    size_t n, cap;
    int (*phase_of)(const char *key); /* the output format's (ur_job_upload_opts), or Orbax's */
} item_list;

static void items_dispose(item_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        ur_free(l->v[i].key);
    }
    ur_free(l->v);
}

static const char *base_name(const char *key)
{
    const char *s = strrchr(key, '/');
    return s != NULL ? s + 1 : key;
}

#define PHASE_MARKER 4

/* Orbax's commit-file order: every byte of every item (data, manifests, then each item's
 * _METADATA), then the step's _CHECKPOINT_METADATA, which says "a step saved here", then the
 * markers; a kill between two uploads never leaves a step that looks saved beside an
 * unfinished item. */
static int phase_of(const char *key)
{
    const char *b = base_name(key);
    if (strcmp(b, MARKER) == 0) {
        return PHASE_MARKER;
    }
    if (strcmp(b, "_CHECKPOINT_METADATA") == 0) {
        return 3;
    }
    if (strcmp(b, "_METADATA") == 0) {
        return 2;
    }
    if (strncmp(b, "manifest.", 9) == 0) {
        return 1;
    }
    return 0;
}

static int collect(void *ctx, const char *key, uint64_t size)
{
    item_list *l = ctx;
    item *it, *v;
    if (strcmp(key, UR_JOB_CLAIM_NAME) == 0) {
        return 0; /* the running conversion's claim (job_claim.h): not the step's content */
    }
    v = ur_grow(l->v, &l->cap, l->n, sizeof *v, 64);
    if (v == NULL) {
        return UR_ENOMEM;
    }
    l->v = v;
    it = &l->v[l->n];
    memset(it, 0, sizeof *it);
    it->key = ur_strdup(key);
    if (it->key == NULL) {
        return UR_ENOMEM;
    }
    it->size = size;
    it->phase = l->phase_of != NULL ? l->phase_of(key) : phase_of(key);
    for (const char *p = key; *p; p++) {
        it->depth += *p == '/';
    }
    l->n++;
    return 0;
}

/* Upload order: by phase; markers deepest first. Sorted stably enough: ties by key. */
static int cmp_upload(const void *pa, const void *pb)
{
    const item *a = pa, *b = pb;
    if (a->phase != b->phase) {
        return a->phase - b->phase;
    }
    if (a->phase == PHASE_MARKER && a->depth != b->depth) {
        return b->depth - a->depth;
    }
    return strcmp(a->key, b->key);
}

static int list_all(ur_kvstore *kv, item_list *l, ur_err *err)
{
    int rc = ur_kvstore_list(kv, "", collect, l, err);
    if (rc == UR_ENOMEM) {
        return ur_err_oom(err);
    }
    return rc;
}

/* ur_kvstore_list of one unit: the key `unit` itself or keys below `unit/` (not a sibling
 * that merely starts with the same bytes, "0" vs "0.tmp"). */
typedef struct {
    item_list *l;
    size_t len;
} unit_ctx;

static int collect_unit(void *ctx, const char *key, uint64_t size)
{
    unit_ctx *u = ctx;
    if (key[u->len] != '\0' && key[u->len] != '/') {
        return 0;
    }
    if (key[u->len] == '/' && strcmp(key + u->len + 1, UR_JOB_CLAIM_NAME) == 0) {
        return 0; /* as in collect */
    }
    return collect(u->l, key, size);
}

/* The keys of the units (n == 0: every key of kv). */
static int list_units(ur_kvstore *kv, const char *const *units, size_t n, item_list *l,
                      ur_err *err)
{
    int rc = UR_OK;
    if (n == 0) {
        return list_all(kv, l, err);
    }
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        unit_ctx u = {l, strlen(units[i])};
        rc = ur_kvstore_list(kv, units[i], collect_unit, &u, err);
        if (rc == UR_ENOMEM) {
            rc = ur_err_oom(err);
        }
    }
    return rc;
}

int ur_job_upload_check_dest(const char *dest, int replace, ur_err *err)
{
    return ur_job_upload_check_units(dest, NULL, 0, replace, err);
}

int ur_job_upload_count_units(const char *dest, const char *const *units, size_t n_units,
                              size_t *count, ur_err *err)
{
    ur_kvstore *kv = NULL;
    item_list l = {0};
    int rc = ur_kvstore_open_url(&kv, dest, 0, err);
    if (rc == UR_OK) {
        rc = list_units(kv, units, n_units, &l, err);
    }
    *count = l.n;
    items_dispose(&l);
    ur_kvstore_close(kv);
    return rc;
}

int ur_job_upload_check_units(const char *dest, const char *const *units, size_t n_units,
                              int replace, ur_err *err)
{
    ur_kvstore *kv = NULL;
    item_list l = {0};
    int rc = ur_kvstore_open_url(&kv, dest, 0, err);
    if (rc == UR_OK) {
        rc = list_units(kv, units, n_units, &l, err);
    }
    if (rc == UR_OK && l.n > 0 && !replace) {
        rc = ur_err_set(err, UR_EINVAL,
                        "%s already holds %zu object%s (e.g. %s): refusing to write over them "
                        "(--replace deletes them first)",
                        dest, l.n, l.n == 1 ? "" : "s", l.v[0].key);
    }
    items_dispose(&l);
    ur_kvstore_close(kv);
    return rc;
}

/* ---- the upload ---- */

typedef struct {
    ur_kvstore *src, *dst;
    item_list *l;
    size_t next, end; /* the range of the current phase */
    pthread_mutex_t lock;
    const volatile sig_atomic_t *cancel;
    const char *dest;
    int rc;
    ur_err err;
    uint64_t done, total; /* bytes, for opts->progress */
    const ur_job_upload_opts *opts;
} job;

static int put_one(job *j, item *it, ur_err *err)
{
    ur_kvstore_view v;
    int rc;
    if (it->phase == PHASE_MARKER) {
        /* Orbax's marker names where the step was committed: the final location. */
        ur_buf text;
        size_t n = strlen(it->key) - strlen(MARKER);
        ur_buf_init(&text, 0);
        rc = ur_buf_printf(&text, err, "Checkpoint commit was successful to %s%s%.*s", j->dest,
                           n > 0 ? "/" : "", n > 0 ? (int)(n - 1) : 0, it->key);
        if (rc == UR_OK) {
            rc = ur_kvstore_write(j->dst, it->key, text.data, text.len, err);
        }
        ur_buf_dispose(&text);
        return rc;
    }
    rc = ur_kvstore_read_view_once(j->src, it->key, &v, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_write_view(j->dst, it->key, &v, err);
    }
    ur_kvstore_view_release(&v);
    return rc;
}

/* One more object written (the caller holds j->lock, so progress is called by one thread at
 * a time and sees `done` grow). */
static void report_progress(job *j, uint64_t bytes)
{
    j->done += bytes;
    if (j->opts != NULL && j->opts->progress != NULL) {
        j->opts->progress(j->opts->progress_ctx, j->done, j->total);
    }
}

/* The object a worker is uploading, for the kvstore's stored hook: the pieces of a large
 * object move the progress as they go up; `counted` never passes the object's size (a
 * marker's text is not the staged file's). */
typedef struct {
    job *j;
    const item *it;
    uint64_t counted;
} piece_ctx;

static void on_stored(void *ctx, uint64_t bytes)
{
    piece_ctx *p = ctx;
    uint64_t upto = bytes < p->it->size ? bytes : p->it->size;
    if (upto > p->counted) {
        pthread_mutex_lock(&p->j->lock);
        report_progress(p->j, upto - p->counted);
        pthread_mutex_unlock(&p->j->lock);
        p->counted = upto;
    }
}

static void *worker(void *arg)
{
    job *j = arg;
    piece_ctx piece;
    for (;;) {
        item *it;
        ur_err err;
        int rc;
        pthread_mutex_lock(&j->lock);
        if (j->rc != UR_OK || j->next >= j->end || (j->cancel != NULL && *j->cancel)) {
            if (j->rc == UR_OK && j->cancel != NULL && *j->cancel) {
                j->rc = ur_err_set(&j->err, UR_ECANCELED, "interrupted");
            }
            pthread_mutex_unlock(&j->lock);
            return NULL;
        }
        it = &j->l->v[j->next++];
        it->written = 1; /* deleted on failure even if the PUT half-happened */
        pthread_mutex_unlock(&j->lock);
        ur_err_clear(&err);
        piece.j = j;
        piece.it = it;
        piece.counted = 0;
        ur_kvstore_set_stored_hook(on_stored, &piece);
        rc = put_one(j, it, &err);
        ur_kvstore_set_stored_hook(NULL, NULL);
        pthread_mutex_lock(&j->lock);
        if (rc < 0 && j->rc == UR_OK) {
            j->rc = rc;
            j->err = err;
        } else if (rc == UR_OK) {
            report_progress(j, it->size - piece.counted);
        }
        pthread_mutex_unlock(&j->lock);
    }
}

static int run_phase(job *j, size_t begin, size_t end, unsigned threads)
{
    pthread_t t[64];
    unsigned n = 0;
    j->next = begin;
    j->end = end;
    if (threads > 64) {
        threads = 64;
    }
    if (threads > end - begin) {
        threads = (unsigned)(end - begin);
    }
    for (unsigned i = 1; i < threads; i++) {
        if (pthread_create(&t[n], NULL, worker, j) == 0) {
            n++;
        }
    }
    worker(j);
    for (unsigned i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
    }
    return j->rc;
}

/* Delete what was written, markers first (reverse upload order). Returns how many deletes
 * failed; the first failure in *first. */
static size_t undo(job *j, ur_err *first)
{
    size_t failed = 0;
    for (size_t i = j->l->n; i-- > 0;) {
        if (j->l->v[i].written) {
            ur_err e;
            ur_err_clear(&e);
            if (ur_kvstore_delete(j->dst, j->l->v[i].key, &e) < 0) {
                if (failed++ == 0) {
                    *first = e;
                }
            }
        }
    }
    return failed;
}

/* Delete what dest holds (its units): markers first, so no reader takes a half-deleted
 * step. */
static int clear_dest(ur_kvstore *dst, const ur_job_upload_opts *opts, ur_err *err)
{
    item_list old = {0};
    int rc = list_units(dst, opts->units, opts->n_units, &old, err);
    if (rc == UR_OK && old.n > 0) {
        qsort(old.v, old.n, sizeof *old.v, cmp_upload);
        for (size_t i = old.n; rc == UR_OK && i-- > 0;) {
            rc = ur_kvstore_delete(dst, old.v[i].key, err);
        }
        if (rc < 0) {
            ur_err_wrap(err, "replacing what the destination held");
        }
    }
    items_dispose(&old);
    return rc;
}

/* ---- an upload over an earlier one (ur_job_upload_opts.sent) ---- */

/* Drop from l the data objects opts->sent says are at dest already. */
static void skip_sent(item_list *l, const ur_job_upload_opts *opts)
{
    size_t kept = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (l->v[i].phase == 0 && opts->sent(opts->sent_ctx, l->v[i].key, l->v[i].size)) {
            ur_free(l->v[i].key);
        } else {
            l->v[kept++] = l->v[i];
        }
    }
    l->n = kept;
}

/* Delete the data objects dest holds (`old`) that src does not. */
static int prune_stale(job *j, const item_list *old, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < old->n && rc == UR_OK; i++) {
        uint64_t size;
        ur_err ignored;
        if (old->v[i].phase == 0 &&
            ur_kvstore_size(j->src, old->v[i].key, &size, &ignored) == UR_ENOTFOUND) {
            rc = ur_kvstore_delete(j->dst, old->v[i].key, err);
        }
    }
    return rc;
}

int ur_job_upload(const char *src, const char *dest, const ur_job_upload_opts *opts,
                  const volatile sig_atomic_t *cancel, ur_err *err)
{
    job j;
    item_list l = {0};
    item_list old = {0}; /* with opts->sync: what dest holds */
    unsigned threads = opts != NULL && opts->threads > 0 ? opts->threads : 8;
    int sync = opts != NULL && opts->sent != NULL;
    int rc;

    memset(&j, 0, sizeof j);
    pthread_mutex_init(&j.lock, NULL);
    j.cancel = cancel;
    j.dest = dest;
    l.phase_of = opts != NULL ? opts->phase_of : NULL;
    j.l = &l;
    j.opts = opts;
    ur_err_clear(&j.err);
    rc = ur_kvstore_file_open(&j.src, src, 0, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_open_url(&j.dst, dest, 1, err);
    }
    if (rc == UR_OK) {
        rc = opts != NULL ? list_units(j.src, opts->units, opts->n_units, &l, err)
                          : list_all(j.src, &l, err);
    }
    if (rc == UR_OK && sync) {
        skip_sent(&l, opts);
    }
    if (rc == UR_OK && sync && opts->prune) {
        rc = list_all(j.dst, &old, err);
    }
    if (rc == UR_OK && !(opts != NULL && (opts->add || sync))) {
        rc = opts != NULL
                 ? ur_job_upload_check_units(dest, opts->units, opts->n_units, opts->replace, err)
                 : ur_job_upload_check_dest(dest, 0, err);
    }
    if (rc == UR_OK && opts != NULL && opts->replace && !opts->add && !sync) {
        rc = clear_dest(j.dst, opts, err);
    }
    if (rc < 0) {
        goto out;
    }
    if (l.n > 0) { /* nothing left to send (a share whose files are all in the store) */
        qsort(l.v, l.n, sizeof *l.v, cmp_upload);
    }
    for (size_t i = 0; i < l.n; i++) {
        j.total += l.v[i].size;
    }
    {
        size_t data_end = 0;
        while (data_end < l.n && l.v[data_end].phase == 0) {
            data_end++;
        }
        /* data in parallel; manifests, metadata and markers one at a time, in order */
        rc = run_phase(&j, 0, data_end, threads);
        if (rc == UR_OK) {
            rc = run_phase(&j, data_end, l.n, 1);
        }
    }
    if (rc == UR_OK && sync && opts->prune) {
        rc = prune_stale(&j, &old, err);
    }
    if (rc < 0 && sync) {
        if (err != NULL && j.rc < 0) {
            *err = j.err;
        }
    } else if (rc < 0) {
        ur_err e;
        size_t written = 0, failed;
        for (size_t i = 0; i < l.n; i++) {
            written += l.v[i].written;
        }
        if (err != NULL) {
            *err = j.err;
        }
        ur_err_clear(&e);
        failed = undo(&j, &e);
        if (failed == 0) {
            ur_err_wrap(err, "nothing published (the %zu object%s written to %s were deleted)",
                        written, written == 1 ? "" : "s", dest);
        } else {
            ur_err_wrap(err,
                        "nothing published, but %zu of the %zu objects written to %s could not "
                        "be deleted (%s); no commit marker was written",
                        failed, written, dest, e.msg);
        }
    }
out:
    items_dispose(&l);
    items_dispose(&old);
    ur_kvstore_close(j.src);
    ur_kvstore_close(j.dst);
    pthread_mutex_destroy(&j.lock);
    return rc;
}
