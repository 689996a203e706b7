/* Reads from a store whose every read is a request over the network (s3://, gs://), kept in
 * flight on a few threads of this store, so that they no longer hang on the number of workers.
 *
 * Why: a worker that reads a chunk from a bucket waits a round trip per request, and one
 * connection carries a fraction of the bucket's bandwidth. Running many workers hid that, but
 * each held a chunk's buffers, so memory grew with the model. Here two things keep requests
 * in flight instead, with memory bounded whatever the number of workers:
 *
 *   - a large read (a whole chunk) is cut into parts fetched at once, each straight into the
 *     caller's buffer; the caller fetches parts too while it waits;
 *   - a reader announces what it will read next (ur_kvstore_prefetch_range: a chunk stream
 *     its next pieces, the executor the chunk after the ones in work): it is fetched into a
 *     cache of at most `budget` bytes, and the bytes of a read found there are copied out.
 *
 *   hint(key, off, len) -> cached pieces of at most AHEAD_PART_MAX (AHEAD_HINT_BYTES a hint)
 *       -> hint queue -> I/O thread: base read_range -> DONE (or FAILED, with its error)
 *   read_range(key, off, len) -> stretches: each from a cached piece (waited for, copied
 *       out; a read that reaches a piece's end uses it up and frees it) or a part (the part
 *       queue, served before the hints) -> all in: done. A read of at most 2 pieces with
 *       nothing cached is one request from the reader's own thread.
 *
 * A hint is best effort: when the cache is full it is dropped and the read goes to the base,
 * as it would without this store. Pieces nobody read are dropped once many reads were made
 * since they arrived (stale), so hints that were not followed cannot fill the cache for good. A
 * piece or part that failed gives its error (the base's, after its own retries) to the read that
 * wanted it. Every other operation goes to the base.
 *
 * Threads: the cache and the queues are under one mutex; bytes are fetched and copied outside
 * it (a cached piece stays alive while it has readers). Closing waits for the requests in
 * flight and drops the queued hints. */
#include "kvstore_impl.h"

#include "unroll/alloc.h"
#include "unroll/strmap.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* A hint covers at most this many bytes: the reader that gave it asks again as it goes, so
 * a large hint (the executor's look at a chunk ahead) does not take the whole cache. */
#define AHEAD_HINT_BYTES ((size_t)16 << 20)
/* A cached piece read by nobody while this many reads were made is stale. */
#define AHEAD_STALE_READS 256
/* The parts requests are cut into (part_size). */
#define AHEAD_PART_MIN ((size_t)4 << 20)
#define AHEAD_PART_MAX ((size_t)8 << 20)

/* Reads remembered, so that a late hint does not fetch them again. */
#define AHEAD_RECENT 512

enum { QUEUED, RUNNING, DONE, FAILED };

/* The parts of one large read (on its reader's stack). */
typedef struct {
    size_t left; /* parts not yet DONE or FAILED */
    int rc;
    ur_err err; /* the first failure */
} part_set;

typedef struct piece piece;
struct piece {
    piece *prev, *next; /* the cache, oldest first (cached pieces only) */
    piece *qnext;       /* a queue */
    const char *key;    /* a cached piece's own copy (owned_key); a part's reader's */
    char *owned_key;
    uint64_t off;
    size_t len;
    uint8_t *buf; /* owned by a cached piece; a part's points into its reader's buffer */
    int state;
    part_set *set; /* a part: its read; NULL: a cached piece */
    int readers;   /* reads copying out of it (outside the lock) */
    int used_up;   /* a read reached its end: freed when the last reader leaves */
    uint64_t done; /* ahead->reads when it arrived */
    ur_err err;
};

typedef struct {
    piece *head, *tail;
} queue;

typedef struct {
    ur_kvstore base;
    ur_kvstore *under;
    pthread_mutex_t mu;
    pthread_cond_t work, arrived;
    piece *head, *tail; /* the cache, oldest first */
    queue parts, hints; /* QUEUED work; parts first */
    size_t bytes, budget;
    uint64_t reads; /* read_range calls so far (a piece's age) */
    /* the latest reads (a ring): a hint that comes after the read it announces, from a
     * look-ahead that fell behind the workers, would fetch the bytes a second time */
    struct {
        uint64_t key, off, end;
    } recent[AHEAD_RECENT];
    size_t recent_at;
    pthread_t *threads;
    int n_threads, max_threads, idle, closing;
} ahead_store;

static _Atomic uint64_t default_budget = UR_KVSTORE_AHEAD_DEFAULT;

void ur_kvstore_set_read_ahead(uint64_t bytes)
{
    atomic_store(&default_budget, bytes);
}

uint64_t ur_kvstore_read_ahead(void)
{
    return atomic_load(&default_budget);
}

/* ---- queues and the cache (under the lock) ------------------------------------------------ */

/* A key's hash: the recent reads are told apart by it (a collision only drops a hint). */
static uint64_t key_hash(const char *key)
{
    return ur_strmap_hash(key, strlen(key));
}

/* Under the lock: remember a read of [off, off + len) of key. */
static void remember_read(ahead_store *a, const char *key, uint64_t off, size_t len)
{
    a->recent[a->recent_at].key = key_hash(key);
    a->recent[a->recent_at].off = off;
    a->recent[a->recent_at].end = off + len;
    a->recent_at = (a->recent_at + 1) % AHEAD_RECENT;
}

/* Under the lock: 1 when a recent read covered [off, off + len) of key. */
static int read_recently(const ahead_store *a, const char *key, uint64_t off, size_t len)
{
    uint64_t h = key_hash(key);
    for (size_t i = 0; i < AHEAD_RECENT; i++) {
        if (a->recent[i].end > 0 && a->recent[i].key == h && a->recent[i].off <= off &&
            off + len <= a->recent[i].end) {
            return 1;
        }
    }
    return 0;
}

static void push(queue *q, piece *p)
{
    p->qnext = NULL;
    *(q->tail != NULL ? &q->tail->qnext : &q->head) = p;
    q->tail = p;
}

/* Take p (QUEUED) off q. */
static void take(queue *q, piece *p)
{
    piece **at = &q->head, *last = NULL;
    while (*at != NULL && *at != p) {
        last = *at;
        at = &(*at)->qnext;
    }
    if (*at == p) {
        *at = p->qnext;
        if (q->tail == p) {
            q->tail = last;
        }
    }
}

static void unlink_piece(ahead_store *a, piece *p)
{
    *(p->prev != NULL ? &p->prev->next : &a->head) = p->next;
    *(p->next != NULL ? &p->next->prev : &a->tail) = p->prev;
    a->bytes -= p->len;
}

static void free_piece(piece *p)
{
    ur_free(p->owned_key);
    ur_free(p->buf);
    ur_free(p);
}

/* The cached piece holding [off, off + len) of key, if any. */
static piece *find(ahead_store *a, const char *key, uint64_t off, size_t len)
{
    for (piece *p = a->head; p != NULL; p = p->next) {
        if (!p->used_up && p->off <= off && off + len <= p->off + p->len &&
            strcmp(p->key, key) == 0) {
            return p;
        }
    }
    return NULL;
}

/* Free the cached pieces that arrived AHEAD_STALE_READS reads ago and were never read. */
static void drop_stale(ahead_store *a)
{
    piece *next;
    for (piece *p = a->head; p != NULL; p = next) {
        next = p->next;
        if ((p->state == DONE || p->state == FAILED) && p->readers == 0 &&
            a->reads - p->done > AHEAD_STALE_READS) {
            unlink_piece(a, p);
            free_piece(p);
        }
    }
}

/* ---- fetching ----------------------------------------------------------------------------- */

/* Under the lock, p taken off its queue: read it (outside the lock), then wake the readers. */
static void fetch(ahead_store *a, piece *p)
{
    int rc;
    p->state = RUNNING;
    pthread_mutex_unlock(&a->mu);
    rc = ur_kvstore_read_range(a->under, p->key, p->off, p->len, p->buf, &p->err);
    pthread_mutex_lock(&a->mu);
    p->state = rc == UR_OK ? DONE : FAILED;
    p->done = a->reads;
    if (p->set != NULL) {
        if (rc < 0 && p->set->rc == UR_OK) {
            p->set->rc = rc;
            p->set->err = p->err;
        }
        p->set->left--;
    }
    pthread_cond_broadcast(&a->arrived);
}

static void *io_thread(void *arg)
{
    ahead_store *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        queue *q;
        piece *p;
        while (a->parts.head == NULL && a->hints.head == NULL && !a->closing) {
            a->idle++;
            pthread_cond_wait(&a->work, &a->mu);
            a->idle--;
        }
        if (a->closing && a->parts.head == NULL) {
            break;
        }
        q = a->parts.head != NULL ? &a->parts : &a->hints;
        p = q->head;
        take(q, p);
        fetch(a, p);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* Under the lock: n more requests queued. Start threads for them while the pool is not full
 * (a thread that cannot start leaves its work to the others, or to the reader itself). */
static void wake_workers(ahead_store *a, size_t n)
{
    int want = a->idle;
    if (a->threads == NULL) {
        a->threads = ur_calloc((size_t)a->max_threads, sizeof *a->threads);
    }
    while (a->threads != NULL && (size_t)want < n && a->n_threads < a->max_threads &&
           pthread_create(&a->threads[a->n_threads], NULL, io_thread, a) == 0) {
        a->n_threads++;
        want++;
    }
    pthread_cond_broadcast(&a->work);
}

/* Under the lock: queue a cached piece [off, off + n) of key; 0 when the cache has no room. */
static int enqueue_hint(ahead_store *a, const char *key, uint64_t off, size_t n)
{
    piece *p;
    if (a->bytes + n > a->budget) {
        drop_stale(a);
        if (a->bytes + n > a->budget) {
            return 0;
        }
    }
    p = ur_calloc(1, sizeof *p);
    if (p == NULL || (p->owned_key = ur_strdup(key)) == NULL || (p->buf = ur_malloc(n)) == NULL) {
        if (p != NULL) {
            free_piece(p);
        }
        return 0;
    }
    p->key = p->owned_key;
    p->off = off;
    p->len = n;
    p->state = QUEUED;
    p->prev = a->tail;
    *(a->tail != NULL ? &a->tail->next : &a->head) = p;
    a->tail = p;
    a->bytes += n;
    push(&a->hints, p);
    wake_workers(a, 1);
    return 1;
}

/* The requests `len` bytes are cut into: one per thread (a connection's bandwidth is a
 * fraction of the store's: the parts of one read go in parallel), each at least
 * AHEAD_PART_MIN (every request pays a round trip: object stores advise ranges of megabytes)
 * and at most AHEAD_PART_MAX. */
static size_t part_size(const ahead_store *a, size_t len)
{
    size_t part = len / (size_t)a->max_threads + 1;
    return part < AHEAD_PART_MIN ? AHEAD_PART_MIN : part > AHEAD_PART_MAX ? AHEAD_PART_MAX : part;
}

/* ---- the operations ----------------------------------------------------------------------- */

static void a_prefetch_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len)
{
    ahead_store *a = (ahead_store *)kv;
    pthread_mutex_lock(&a->mu);
    if (len > AHEAD_HINT_BYTES) {
        len = AHEAD_HINT_BYTES;
    }
    size_t piece_len = part_size(a, len);
    while (len > 0 && !a->closing) {
        size_t n = len < piece_len ? len : piece_len;
        if (find(a, key, offset, n) == NULL && !read_recently(a, key, offset, n) &&
            !enqueue_hint(a, key, offset, n)) {
            break;
        }
        offset += n;
        len -= n;
    }
    pthread_mutex_unlock(&a->mu);
}

static void a_prefetch(ur_kvstore *kv, const char *key, size_t max_bytes)
{
    a_prefetch_range(kv, key, 0, max_bytes);
}

/* One stretch of a read: from a cached piece, or a part fetched for this read alone. */
typedef struct {
    piece *p;
    uint64_t off;
    size_t len;
    int cached;
} stretch;

/* Under the lock: the cached piece of key that holds byte `off`, if any. */
static piece *find_at(ahead_store *a, const char *key, uint64_t off)
{
    return find(a, key, off, 1);
}

/* Under the lock: where the next cached piece of key after `off` starts (else `end`). */
static uint64_t next_cached(ahead_store *a, const char *key, uint64_t off, uint64_t end)
{
    for (piece *p = a->head; p != NULL; p = p->next) {
        if (!p->used_up && p->off > off && p->off < end && strcmp(p->key, key) == 0) {
            end = p->off;
        }
    }
    return end;
}

/* Under the lock: cut [offset, offset + len) into stretches; NULL when out of memory. */
static stretch *plan_read(ahead_store *a, const char *key, uint64_t offset, size_t len,
                          size_t *n_out)
{
    uint64_t cur = offset, end = offset + len;
    size_t part = part_size(a, len), n = 0, cap = 0;
    stretch *st = NULL;

    while (cur < end) {
        piece *p = find_at(a, key, cur);
        uint64_t stop = p != NULL ? p->off + p->len : next_cached(a, key, cur, end);
        if (stop > end) {
            stop = end;
        }
        if (p == NULL && stop - cur > part) {
            stop = cur + part;
        }
        if (n == cap) {
            stretch *more = ur_grow_to(st, &cap, n + 1, sizeof *st);
            if (more == NULL) {
                ur_free(st);
                return NULL;
            }
            st = more;
        }
        st[n].p = p;
        st[n].off = cur;
        st[n].len = (size_t)(stop - cur);
        st[n].cached = p != NULL;
        n++;
        cur = stop;
    }
    *n_out = n;
    return st;
}

/* Under the lock: a reader is done with p; free it when it is used up and nobody else reads. */
static void leave(ahead_store *a, piece *p)
{
    p->readers--;
    if (p->used_up && p->readers == 0) {
        unlink_piece(a, p);
        free_piece(p);
    }
}

/* Under the lock: 1 while some stretch of the read is not in yet; a QUEUED one found on the
 * way is fetched by this thread (*helped). */
static int pending(ahead_store *a, stretch *st, size_t n, int *helped)
{
    int waiting = 0;
    *helped = 0;
    for (size_t i = 0; i < n; i++) {
        piece *p = st[i].p;
        if (p->state == QUEUED) {
            take(st[i].cached ? &a->hints : &a->parts, p);
            fetch(a, p);
            *helped = 1;
            return 1;
        }
        waiting |= p->state == RUNNING;
    }
    return waiting;
}

/* The read's stretches fetched at once (by the threads and this one), then the cached ones
 * copied out; the first failure is the one reported. */
static int read_stretches(ahead_store *a, const char *key, stretch *st, size_t n, uint64_t offset,
                          uint8_t *dst, ur_err *err)
{
    size_t n_parts = 0, k = 0;
    piece *parts;
    part_set set;
    int rc = UR_OK, helped;

    for (size_t i = 0; i < n; i++) {
        n_parts += !st[i].cached;
    }
    parts = n_parts > 0 ? ur_calloc(n_parts, sizeof *parts) : NULL;
    memset(&set, 0, sizeof set);
    set.left = n_parts;
    for (size_t i = 0; i < n && (parts != NULL || n_parts == 0); i++) {
        if (!st[i].cached) {
            piece *p = &parts[k++];
            p->key = key;
            p->off = st[i].off;
            p->len = st[i].len;
            p->buf = dst + (st[i].off - offset);
            p->set = &set;
            p->state = QUEUED;
            st[i].p = p;
            push(&a->parts, p);
        } else {
            st[i].p->readers++;
        }
    }
    if (n_parts > 0 && parts == NULL) {
        return UR_ENOMEM;
    }
    if (n_parts > 1) {
        wake_workers(a, n_parts - 1);
    }
    while (pending(a, st, n, &helped)) {
        if (!helped) {
            pthread_cond_wait(&a->arrived, &a->mu);
        }
    }
    for (size_t i = 0; i < n; i++) {
        piece *p = st[i].p;
        if (st[i].cached) {
            if (st[i].off + st[i].len == p->off + p->len || p->state == FAILED) {
                p->used_up = 1;
            }
        }
    }
    pthread_mutex_unlock(&a->mu);
    for (size_t i = 0; i < n; i++) {
        piece *p = st[i].p;
        if (!st[i].cached) {
            continue;
        }
        if (p->state == DONE) {
            memcpy(dst + (st[i].off - offset), p->buf + (st[i].off - p->off), st[i].len);
        } else if (rc == UR_OK) {
            rc = p->err.code != UR_OK ? (int)p->err.code : UR_EIO;
            if (err != NULL) {
                *err = p->err;
            }
        }
    }
    if (rc == UR_OK && set.rc < 0) {
        rc = set.rc;
        if (err != NULL) {
            *err = set.err;
        }
    }
    pthread_mutex_lock(&a->mu);
    for (size_t i = 0; i < n; i++) {
        if (st[i].cached) {
            leave(a, st[i].p);
        }
    }
    ur_free(parts);
    return rc;
}

static int a_read_range(ur_kvstore *kv, const char *key, uint64_t offset, size_t len, void *dst,
                        ur_err *err)
{
    ahead_store *a = (ahead_store *)kv;
    stretch *st;
    size_t n = 0;
    int rc;

    if (len == 0) {
        return ur_kvstore_read_range(a->under, key, offset, len, dst, err);
    }
    pthread_mutex_lock(&a->mu);
    a->reads++;
    remember_read(a, key, offset, len);
    st = plan_read(a, key, offset, len, &n);
    if (st == NULL || (n == 1 && !st[0].cached && len <= 2 * UR_KVSTORE_AHEAD_PIECE)) {
        /* nothing cached and too small to cut: one request, from this thread */
        pthread_mutex_unlock(&a->mu);
        ur_free(st);
        return ur_kvstore_read_range(a->under, key, offset, len, dst, err);
    }
    rc = read_stretches(a, key, st, n, offset, dst, err);
    pthread_mutex_unlock(&a->mu);
    ur_free(st);
    return rc == UR_ENOMEM ? ur_kvstore_read_range(a->under, key, offset, len, dst, err) : rc;
}

static void a_close(ur_kvstore *kv)
{
    ahead_store *a = (ahead_store *)kv;
    piece *next;
    pthread_mutex_lock(&a->mu);
    a->closing = 1;
    pthread_cond_broadcast(&a->work);
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < a->n_threads; i++) {
        pthread_join(a->threads[i], NULL);
    }
    for (piece *p = a->head; p != NULL; p = next) {
        next = p->next;
        free_piece(p);
    }
    pthread_cond_destroy(&a->work);
    pthread_cond_destroy(&a->arrived);
    pthread_mutex_destroy(&a->mu);
    ur_kvstore_close(a->under);
    ur_free(a->threads);
    ur_free(a);
}

/* ---- the rest goes to the base ------------------------------------------------------------ */

#define UNDER(kv) (((ahead_store *)(kv))->under)

static int a_read(ur_kvstore *kv, const char *key, ur_buf *out, ur_err *err)
{
    return ur_kvstore_read(UNDER(kv), key, out, err);
}

static int a_size(ur_kvstore *kv, const char *key, uint64_t *size_out, ur_err *err)
{
    return ur_kvstore_size(UNDER(kv), key, size_out, err);
}

static int a_list(ur_kvstore *kv, const char *prefix, ur_kvstore_list_fn fn, void *ctx,
                  ur_err *err)
{
    return ur_kvstore_list(UNDER(kv), prefix, fn, ctx, err);
}

static int a_list_dir(ur_kvstore *kv, const char *prefix, ur_kvstore_list_dir_fn fn, void *ctx,
                      ur_err *err)
{
    return ur_kvstore_list_dir(UNDER(kv), prefix, fn, ctx, err);
}

static int a_list_versions(ur_kvstore *kv, const char *prefix, ur_kvstore_list_version_fn fn,
                           void *ctx, ur_err *err)
{
    return ur_kvstore_list_versions(UNDER(kv), prefix, fn, ctx, err);
}

static int a_write(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    return ur_kvstore_write(UNDER(kv), key, data, n, err);
}

static int a_create(ur_kvstore *kv, const char *key, const void *data, size_t n, ur_err *err)
{
    return ur_kvstore_create(UNDER(kv), key, data, n, err);
}

static int a_delete(ur_kvstore *kv, const char *key, ur_err *err)
{
    return ur_kvstore_delete(UNDER(kv), key, err);
}

static int a_commit(ur_kvstore *kv, ur_err *err)
{
    return ur_kvstore_commit(UNDER(kv), err);
}

static int a_writer_open(ur_kvstore_writer **out, ur_kvstore *kv, const char *key, int flags,
                         ur_err *err)
{
    return ur_kvstore_writer_open(out, UNDER(kv), key, flags, err);
}

static const ur_kvstore_ops ahead_ops = {
    .name = "read-ahead",
    .read = a_read,
    .read_range = a_read_range,
    .size = a_size,
    .list = a_list,
    .write = a_write,
    .commit = a_commit,
    .close = a_close,
    .prefetch = a_prefetch,
    .del = a_delete,
    .prefetch_range = a_prefetch_range,
    .create = a_create,
    .writer_open = a_writer_open,
    .list_dir = a_list_dir,
    .list_versions = a_list_versions,
};

int ur_kvstore_ahead_open(ur_kvstore **out, ur_kvstore *base, uint64_t budget, int threads,
                          ur_err *err)
{
    ahead_store *a = ur_calloc(1, sizeof *a);
    *out = NULL; /* also when out points at base: base is the caller's copy */
    if (a == NULL) {
        ur_kvstore_close(base);
        return ur_err_oom(err);
    }
    a->base.ops = &ahead_ops;
    snprintf(a->base.desc, sizeof a->base.desc, "%s", base->desc);
    a->under = base;
    a->budget = budget > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)budget;
    a->max_threads = threads > 0 ? threads : 1;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->work, NULL);
    pthread_cond_init(&a->arrived, NULL);
    *out = &a->base;
    return UR_OK;
}
