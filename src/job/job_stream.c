/* Data files uploaded in the background while the conversion runs (unroll/job_stream.h). */
#define _POSIX_C_SOURCE 200809L
#include "unroll/job_stream.h"

#include "unroll/alloc.h"
#include "unroll/kvstore.h"

#include <pthread.h>
#include <string.h>

#define MAX_THREADS 8

typedef struct {
    char **v;
    size_t n, cap;
} str_list;

/* A file handed over: its bytes viewed (mapped) through the file store, its name already
 * removed, so its blocks are freed when the view is released after the upload. */
typedef struct {
    ur_kvstore_view view;
    int held; /* view holds something to release */
    char *key;
} pending;

struct ur_job_stream {
    ur_kvstore *dst;
    pthread_mutex_t lock;
    pthread_cond_t cv; /* the queue or `busy` changed */
    pending *queue;    /* waiting, oldest first from `head` */
    size_t head, n, cap;
    str_list sent;  /* keys written (or being written): what undo deletes */
    unsigned busy;  /* uploads going on */
    unsigned max_pending;
    int stop;
    int rc; /* the first failure */
    ur_err err;
    pthread_t threads[MAX_THREADS];
    unsigned n_threads;
};

static int list_add(str_list *l, const char *s)
{
    char **v = ur_grow(l->v, &l->cap, l->n, sizeof *v, 16);
    if (v == NULL) {
        return UR_ENOMEM;
    }
    l->v = v;
    l->v[l->n] = ur_strdup(s);
    if (l->v[l->n] == NULL) {
        return UR_ENOMEM;
    }
    l->n++;
    return UR_OK;
}

static void list_dispose(str_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        ur_free(l->v[i]);
    }
    ur_free(l->v);
    memset(l, 0, sizeof *l);
}

/* Upload one file from its view (mapped: a data file can be gigabytes). */
static int send_one(ur_job_stream *st, pending *p, ur_err *err)
{
    return ur_kvstore_write_view(st->dst, p->key, &p->view, err);
}

static void pending_dispose(pending *p)
{
    if (p->held) {
        ur_kvstore_view_release(&p->view);
    }
    ur_free(p->key);
    p->held = 0;
    p->key = NULL;
}

static void *worker(void *arg)
{
    ur_job_stream *st = arg;
    pthread_mutex_lock(&st->lock);
    for (;;) {
        pending p;
        ur_err err;
        int rc;
        while (st->head == st->n && !st->stop) {
            pthread_cond_wait(&st->cv, &st->lock);
        }
        if (st->head == st->n) {
            break; /* stopping, nothing left */
        }
        p = st->queue[st->head++];
        if (st->rc != UR_OK) {
            pending_dispose(&p); /* after a failure nothing more goes up */
            pthread_cond_broadcast(&st->cv);
            continue;
        }
        rc = list_add(&st->sent, p.key);
        st->busy++;
        pthread_mutex_unlock(&st->lock);
        ur_err_clear(&err);
        rc = rc == UR_OK ? send_one(st, &p, &err) : ur_err_oom(&err);
        pending_dispose(&p); /* the file's blocks go with its last descriptor */
        pthread_mutex_lock(&st->lock);
        st->busy--;
        if (rc < 0 && st->rc == UR_OK) {
            st->rc = rc;
            st->err = err;
        }
        pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->lock);
    return NULL;
}

int ur_job_stream_create(ur_job_stream **out, const char *dest, unsigned threads,
                         unsigned max_pending, ur_err *err)
{
    ur_job_stream *st = ur_calloc(1, sizeof *st);
    int rc;
    *out = NULL;
    if (st == NULL) {
        return ur_err_oom(err);
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->cv, NULL);
    ur_err_clear(&st->err);
    threads = threads == 0 ? 2 : threads > MAX_THREADS ? MAX_THREADS : threads;
    st->max_pending = max_pending == 0 ? threads : max_pending;
    rc = ur_kvstore_open_url(&st->dst, dest, 1, err);
    for (unsigned i = 0; rc == UR_OK && i < threads; i++) {
        if (pthread_create(&st->threads[i], NULL, worker, st) != 0) {
            rc = ur_err_set(err, UR_EINTERNAL, "cannot start an upload thread");
            break;
        }
        st->n_threads++;
    }
    if (rc < 0) {
        ur_job_stream_free(st);
        return rc;
    }
    *out = st;
    return UR_OK;
}

/* View the file `path` through a file store on its directory and delete its name there:
 * the pending upload holds the bytes. */
static int take_file(pending *p, const char *path, const char *key, ur_err *err)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash != NULL ? ur_strndup(path, (size_t)(slash - path + (slash == path))) : NULL;
    const char *name = slash != NULL ? slash + 1 : path;
    ur_kvstore *src = NULL;
    int rc;

    p->key = ur_strdup(key);
    if (p->key == NULL || (slash != NULL && dir == NULL)) {
        ur_free(dir);
        return ur_err_oom(err);
    }
    rc = ur_kvstore_file_open(&src, dir != NULL ? dir : ".", 1, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_read_view_once(src, name, &p->view, err);
        p->held = 1; /* released also after a failed read */
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_delete(src, name, err);
    }
    ur_kvstore_close(src);
    ur_free(dir);
    if (rc < 0) {
        pending_dispose(p);
    }
    return rc;
}

int ur_job_stream_push(void *stream, const char *path, const char *key, ur_err *err)
{
    ur_job_stream *st = stream;
    pending p;
    int rc;

    memset(&p, 0, sizeof p);
    pthread_mutex_lock(&st->lock);
    while (st->rc == UR_OK && (st->n - st->head) + st->busy >= st->max_pending) {
        pthread_cond_wait(&st->cv, &st->lock);
    }
    rc = st->rc;
    if (rc < 0 && err != NULL) {
        *err = st->err;
    }
    pthread_mutex_unlock(&st->lock);
    if (rc == UR_OK) {
        rc = take_file(&p, path, key, err);
    }
    if (rc < 0) {
        return rc;
    }
    pthread_mutex_lock(&st->lock);
    pending *q = ur_grow(st->queue, &st->cap, st->n, sizeof *q, 16);
    if (q == NULL) {
        pthread_mutex_unlock(&st->lock);
        pending_dispose(&p);
        return ur_err_oom(err);
    }
    st->queue = q;
    st->queue[st->n++] = p;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->lock);
    return UR_OK;
}

int ur_job_stream_finish(ur_job_stream *st, ur_err *err)
{
    int rc;
    pthread_mutex_lock(&st->lock);
    while (st->head < st->n || st->busy > 0) {
        pthread_cond_wait(&st->cv, &st->lock);
    }
    rc = st->rc;
    if (rc < 0 && err != NULL) {
        *err = st->err;
    }
    pthread_mutex_unlock(&st->lock);
    return rc;
}

size_t ur_job_stream_count(const ur_job_stream *st)
{
    return st->sent.n;
}

size_t ur_job_stream_undo(ur_job_stream *st, ur_err *first)
{
    size_t failed = 0;
    (void)ur_job_stream_finish(st, NULL);
    for (size_t i = 0; i < st->sent.n; i++) {
        ur_err e;
        ur_err_clear(&e);
        if (ur_kvstore_delete(st->dst, st->sent.v[i], &e) < 0 && failed++ == 0 && first != NULL) {
            *first = e;
        }
    }
    return failed;
}

void ur_job_stream_free(ur_job_stream *st)
{
    if (st == NULL) {
        return;
    }
    pthread_mutex_lock(&st->lock);
    st->stop = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->lock);
    for (unsigned i = 0; i < st->n_threads; i++) {
        pthread_join(st->threads[i], NULL);
    }
    for (size_t i = st->head; i < st->n; i++) {
        pending_dispose(&st->queue[i]);
    }
    ur_free(st->queue);
    list_dispose(&st->sent);
    ur_kvstore_close(st->dst);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->lock);
    ur_free(st);
}
