/* The ordered-commit scheduler and the memory budget (see exec_sched.h). */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP (glibc) */
#include "exec_sched.h"

#include "unroll/alloc.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

struct ur_sched {
    const ur_sched_cfg *cfg;
    pthread_mutex_t lock;
    pthread_cond_t turn;  /* signalled on every commit, update and failure */
    uint64_t next_claim;  /* next item a worker takes */
    uint64_t next_commit; /* next item allowed to commit */
    void **parked;        /* done jobs waiting for their turn, NULL where free */
    uint64_t *parked_item;
    int n_parked;
    void **pool;          /* jobs not in use */
    int n_pool, cap_pool;
    int writing;          /* a worker is committing (outside the lock) */
    int failed;
    ur_err err;           /* the first failure */
};

typedef struct {
    ur_sched *s;
    int index;
    void *job; /* the job this worker fills next */
} sched_worker;

void ur_sched_fail(ur_sched *s, const ur_err *e)
{
    pthread_mutex_lock(&s->lock);
    if (!s->failed) {
        s->failed = 1;
        s->err = *e;
    }
    pthread_cond_broadcast(&s->turn);
    pthread_mutex_unlock(&s->lock);
}

int ur_sched_wait(ur_sched *s, int (*ready)(void *arg), void *arg)
{
    int failed;
    pthread_mutex_lock(&s->lock);
    while (!s->failed && !ready(arg)) {
        pthread_cond_wait(&s->turn, &s->lock);
    }
    failed = s->failed;
    pthread_mutex_unlock(&s->lock);
    return failed ? UR_SCHED_STOPPED : UR_OK;
}

void ur_sched_update(ur_sched *s, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&s->lock);
    fn(arg);
    pthread_cond_broadcast(&s->turn);
    pthread_mutex_unlock(&s->lock);
}

void ur_sched_locked(ur_sched *s, void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&s->lock);
    fn(arg);
    pthread_mutex_unlock(&s->lock);
}

/* The lock is taken a few times an item and held for a few instructions; with many small
 * items a waiter that goes to sleep at once costs two context switches an item. An adaptive
 * mutex (glibc) spins a little first. */
static void init_lock(pthread_mutex_t *m)
{
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) == 0) {
        int ok = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP) == 0 &&
                 pthread_mutex_init(m, &a) == 0;
        pthread_mutexattr_destroy(&a);
        if (ok) {
            return;
        }
    }
#endif
    pthread_mutex_init(m, NULL);
}

/* Under the lock: a job from the pool, or a new one (NULL when out of memory). */
static void *take_job(ur_sched *s)
{
    if (s->n_pool > 0) {
        return s->pool[--s->n_pool];
    }
    return s->cfg->ops->job_new(s->cfg->user);
}

/* Under the lock: back to the pool (which has room for every job there can be). */
static void give_job(ur_sched *s, void *job)
{
    if (s->n_pool < s->cap_pool) {
        s->pool[s->n_pool++] = job;
    } else {
        s->cfg->ops->job_free(s->cfg->user, job);
    }
}

static void record(ur_sched *s, int rc, const ur_err *e)
{
    if (rc < 0 && !s->failed) {
        s->failed = 1;
        s->err = *e;
    }
}

/* Hand in the finished job of worker wk (see exec_sched.h). */
static int hand_in(sched_worker *wk, uint64_t item, ur_err *err)
{
    ur_sched *s = wk->s;
    const ur_sched_ops *ops = s->cfg->ops;
    void *job = wk->job;
    int rc;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        if (s->failed) {
            pthread_mutex_unlock(&s->lock);
            return UR_SCHED_STOPPED;
        }
        if (item == s->next_commit && !s->writing) {
            break;
        }
        for (int i = 0; i < s->n_parked; i++) {
            if (s->parked[i] == NULL) {
                void *next = take_job(s);
                if (next == NULL) {
                    break; /* wait for our turn instead */
                }
                s->parked[i] = job;
                s->parked_item[i] = item;
                wk->job = next;
                pthread_cond_broadcast(&s->turn);
                pthread_mutex_unlock(&s->lock);
                return UR_OK;
            }
        }
        pthread_cond_wait(&s->turn, &s->lock);
    }
    s->writing = 1;
    pthread_mutex_unlock(&s->lock);

    rc = ops->commit(s->cfg->user, s, job, err);
    pthread_mutex_lock(&s->lock);
    record(s, rc, err);
    if (rc == UR_OK) {
        s->next_commit++;
    }
    while (rc == UR_OK && !s->failed) {
        void *mine = NULL;
        for (int i = 0; i < s->n_parked; i++) {
            if (s->parked[i] != NULL && s->parked_item[i] == s->next_commit) {
                mine = s->parked[i];
                s->parked[i] = NULL; /* the place is free again */
                break;
            }
        }
        if (mine == NULL) {
            break;
        }
        pthread_cond_broadcast(&s->turn);
        pthread_mutex_unlock(&s->lock);
        rc = ops->commit(s->cfg->user, s, mine, err);
        pthread_mutex_lock(&s->lock);
        give_job(s, mine);
        record(s, rc, err);
        if (rc == UR_OK) {
            s->next_commit++;
        }
    }
    s->writing = 0;
    pthread_cond_broadcast(&s->turn);
    pthread_mutex_unlock(&s->lock);
    return rc < 0 ? UR_SCHED_STOPPED : rc; /* recorded above */
}

static void *work(void *arg)
{
    sched_worker *wk = arg;
    ur_sched *s = wk->s;
    const ur_sched_cfg *cfg = s->cfg;
    ur_err err;

    ur_err_clear(&err);
    for (;;) {
        uint64_t item;
        int rc;

        if (cfg->cancel != NULL && *cfg->cancel) {
            ur_err_set(&err, UR_ECANCELED, "interrupted");
            ur_sched_fail(s, &err);
            break;
        }
        pthread_mutex_lock(&s->lock);
        if (s->failed || s->next_claim >= cfg->n_items) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        if (wk->job == NULL) {
            wk->job = take_job(s);
        }
        item = s->next_claim;
        rc = wk->job == NULL ? ur_err_oom(&err)
                             : cfg->ops->claim(cfg->user, s, item, wk->job, &err);
        if (rc == UR_OK) {
            s->next_claim++;
        }
        record(s, rc, &err);
        pthread_mutex_unlock(&s->lock);
        if (rc < 0) {
            pthread_cond_broadcast(&s->turn);
            break;
        }
        rc = cfg->ops->run(cfg->user, s, wk->index, wk->job, &err);
        if (rc == UR_OK) {
            rc = hand_in(wk, item, &err);
        }
        if (rc < 0) {
            ur_sched_fail(s, &err);
        }
        if (rc != UR_OK) {
            break;
        }
    }
    return NULL;
}

int ur_sched_run(const ur_sched_cfg *cfg, ur_err *err)
{
    ur_sched s;
    sched_worker *workers;
    pthread_t *tids;
    int n = cfg->threads > 0 ? cfg->threads : 1, started = 0, rc;

    memset(&s, 0, sizeof s);
    s.cfg = cfg;
    s.next_claim = s.next_commit = cfg->first_item;
    s.n_parked = n;
    s.cap_pool = 2 * n + 1;
    workers = ur_calloc((size_t)n, sizeof *workers);
    tids = ur_calloc((size_t)n, sizeof *tids);
    s.parked = ur_calloc((size_t)n, sizeof *s.parked);
    s.parked_item = ur_calloc((size_t)n, sizeof *s.parked_item);
    s.pool = ur_calloc((size_t)s.cap_pool, sizeof *s.pool);
    if (workers == NULL || tids == NULL || s.parked == NULL || s.parked_item == NULL ||
        s.pool == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    init_lock(&s.lock);
    pthread_cond_init(&s.turn, NULL);
    for (int i = 0; i < n; i++) {
        workers[i].s = &s;
        workers[i].index = i;
    }
    for (int i = 1; i < n; i++) {
        if (pthread_create(&tids[i], NULL, work, &workers[i]) != 0) {
            break; /* fewer threads: the output is the same */
        }
        started = i;
    }
    work(&workers[0]);
    for (int i = 1; i <= started; i++) {
        pthread_join(tids[i], NULL);
    }
    rc = UR_OK;
    if (s.failed) {
        *err = s.err;
        rc = s.err.code < 0 ? s.err.code : UR_EINTERNAL;
    } else if (s.next_commit != cfg->n_items) {
        rc = ur_err_set(err, UR_EINTERNAL, "%llu of %llu items committed",
                        (unsigned long long)(s.next_commit - cfg->first_item),
                        (unsigned long long)(cfg->n_items - cfg->first_item));
    }
    for (int i = 0; i < n; i++) {
        if (workers[i].job != NULL) {
            cfg->ops->job_free(cfg->user, workers[i].job);
        }
        if (s.parked[i] != NULL) {
            cfg->ops->job_free(cfg->user, s.parked[i]);
        }
    }
    for (int i = 0; i < s.n_pool; i++) {
        cfg->ops->job_free(cfg->user, s.pool[i]);
    }
    pthread_cond_destroy(&s.turn);
    pthread_mutex_destroy(&s.lock);
out:
    ur_free(workers);
    ur_free(tids);
    ur_free(s.parked);
    ur_free(s.parked_item);
    ur_free(s.pool);
    return rc;
}

/* ---- memory budget ---------------------------------------------------------------------- */

uint64_t ur_sched_default_memory(int threads, uint64_t phys_bytes, uint64_t floor)
{
    uint64_t want = (uint64_t)(threads > 0 ? threads : 1) * ((uint64_t)128 << 20);
    uint64_t cap = phys_bytes / 4;
    if (phys_bytes != 0 && want > cap) {
        want = cap;
    }
    return want < floor ? floor : want;
}

uint64_t ur_sched_physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

int ur_sched_cores(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 ? (int)cores : 1;
}

uint64_t ur_sched_share(uint64_t limit, int threads)
{
    uint64_t share = limit / (uint64_t)(threads > 0 ? threads : 1);
    return share < 16 ? 16 : share;
}
