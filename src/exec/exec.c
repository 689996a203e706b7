/* Running a plan (see include/unroll/exec.h): the leaves' items go through the scheduler
 * (exec_sched.c), are cut and cast by the kernels (exec_kernel.c) and land in the output sink.
 *
 * Nothing is held per leaf but its place in the item sequence: a leaf is set up (input array
 * opened, output arrays begun) by the worker that claims its first item, and released (output
 * arrays finished, input closed) when its last item is committed, so memory does not grow with
 * the number of leaves, and set-up is spread over the workers.
 *
 * A share of a multi-process run (opts->process_count > 1, unroll/job_share.h) or a resumed
 * one (opts->resume_from) runs the items [start, end) only; every other leaf's output arrays
 * are begun and finished without chunks, in plan order, so each process's metadata names
 * every array, the same in every process (declare_leaf). */
#include "unroll/exec.h"

#include "exec_kernel.h"
#include "exec_sched.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/phase.h"

#include <pthread.h>
#include <string.h>

/* A kept array leaf: where its items start in the run's sequence. */
typedef struct task task;
typedef struct {
    uint64_t first_item;
    size_t action;
    task *live; /* while some of its items are in flight (under the scheduler's lock) */
} leaf_ref;

struct task {
    ur_kern_task k;
    const ur_orbax_leaf *leaf;
    leaf_ref *ref;
    int ready; /* set up (under the lock) */
};

/* The decoding stream of a chunk read slab by slab; slabs are read in order, each by the
 * worker that claimed it, so decoding overlaps the other workers' casting and encoding. */
typedef struct {
    const task *t;
    uint64_t chunk;
    ur_zarr_chunk_stream *s;
    uint64_t next_slab; /* the slab whose bytes come next */
    int used;
} stream_slot;

typedef struct {
    const ur_plan *plan;
    ur_orbax_ckpt *in;
    const ur_sink *sink;
    const ur_exec_opts *opts;
    ur_exec_stats *stats;
    uint64_t budget; /* bytes of one worker's slab */
    leaf_ref *refs;
    size_t n_refs;
    uint64_t n_items;
    uint64_t bytes_total;
    uint64_t start, end;  /* the items this run works on (all of them but in a share/resume) */
    uint64_t piece_mark;  /* stats->bytes_in at the last opts->piece */
    stream_slot *slots; /* one per worker */
    int n_slots;
    ur_kern_worker *workers;
    /* the look-ahead thread (opts->look_ahead; look_ahead_run) */
    pthread_mutex_t la_mu;
    pthread_cond_t la_cv;
    uint64_t la_claimed; /* items before it are claimed by the workers */
    int la_stop;
} runner;

/* One item on its way: claimed, worked on, committed. */
typedef struct {
    task *t;
    uint64_t item;
    int setup; /* this job's worker sets the task up */
    stream_slot *slot;
    ur_kern_item it;
    ur_kern_out out;
} job;

/* ---- leaves ----------------------------------------------------------------------------- */

/* The input array as its leaf describes it (the checkpoint read it from the array's zarr
 * metadata when it was opened), so items are counted without opening any array. */
static int leaf_info(const ur_orbax_leaf *l, ur_zarr_info *info, ur_err *err)
{
    uint64_t count = 1, nb = ur_dtype_size(l->dtype), cb = nb;
    memset(info, 0, sizeof *info);
    info->dtype = l->dtype;
    info->rank = l->rank;
    for (int d = 0; d < l->rank; d++) {
        uint64_t c = l->chunk_shape[d];
        if (c == 0) {
            return ur_err_set(err, UR_ECORRUPT, "chunk shape 0 on axis %d", d);
        }
        info->shape[d] = l->shape[d];
        info->chunk_shape[d] = c;
        info->grid[d] = l->shape[d] / c + (l->shape[d] % c != 0);
        if (ur_ckd_mul64(&count, count, info->grid[d]) || ur_ckd_mul64(&cb, cb, c) ||
            ur_ckd_mul64(&nb, nb, l->shape[d]) || cb > SIZE_MAX) {
            return ur_err_set(err, UR_ECORRUPT, "sizes overflow");
        }
    }
    info->chunk_count = count;
    info->chunk_bytes = (size_t)cb;
    info->nbytes = nb;
    return UR_OK;
}

static int task_geometry(const runner *r, const leaf_ref *ref, ur_kern_task *k, ur_err *err)
{
    ur_zarr_info info;
    const ur_orbax_leaf *leaf = ur_orbax_ckpt_leaf(r->in, ref->action);
    int rc = leaf_info(leaf, &info, err);
    return rc == UR_OK
               ? ur_kern_task_init(k, &r->plan->actions[ref->action], &info, r->budget, err)
               : rc;
}

/* The leaf that item belongs to: the last whose first item is <= item. */
static leaf_ref *ref_of(const runner *r, uint64_t item)
{
    size_t lo = 0, hi = r->n_refs;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->refs[mid].first_item <= item) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return &r->refs[lo];
}

/* The outputs an action writes: n_out less its discarded slices (an empty path). */
static size_t written(const ur_plan_action *a)
{
    size_t n = 0;
    for (size_t i = 0; i < a->n_out; i++) {
        n += a->out[i].len > 0;
    }
    return n;
}

static ur_sink_path out_path(const ur_plan_path *p)
{
    ur_sink_path sp;
    sp.comp = (const char *const *)p->comp;
    sp.seq = p->seq;
    sp.len = p->len;
    return sp;
}

/* Open the input array (it must be what the leaf said) and begin the outputs. Any worker. */
static int task_setup(runner *r, task *t, ur_err *err)
{
    const ur_plan_action *a = t->k.act;
    const ur_zarr_info *got;
    int rc = ur_orbax_ckpt_open_array(r->in, t->leaf, &t->k.src, err);
    if (rc < 0) {
        return rc;
    }
    got = ur_zarr_array_info(t->k.src);
    if (got->dtype != t->k.info.dtype || got->rank != t->k.info.rank ||
        memcmp(got->shape, t->k.info.shape, (size_t)got->rank * sizeof got->shape[0]) != 0 ||
        memcmp(got->chunk_shape, t->k.info.chunk_shape,
               (size_t)got->rank * sizeof got->shape[0]) != 0) {
        return ur_err_set(err, UR_ECORRUPT, "the array changed since the checkpoint was opened");
    }
    t->k.dst = ur_calloc(a->n_out ? a->n_out : 1, sizeof *t->k.dst);
    if (t->k.dst == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < a->n_out && rc == UR_OK; i++) {
        ur_sink_path p = out_path(&a->out[i]);
        if (a->out[i].len == 0) {
            continue; /* a discarded slice: dst[i] stays NULL */
        }
        rc = r->sink->ops->begin_array(r->sink->self, &p, a->out_dtype, t->k.out_rank,
                                       t->k.out_shape, t->k.out_chunk_shape, &t->k.dst[i], err);
    }
    return rc;
}

/* Finish (ok) or drop the outputs, close the input, free. */
static int task_release(runner *r, task *t, int ok, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; t->k.dst != NULL && i < t->k.act->n_out; i++) {
        if (t->k.dst[i] == NULL) {
            continue; /* discarded, or never begun */
        }
        if (ok && rc == UR_OK) {
            rc = r->sink->ops->finish_array(r->sink->self, t->k.dst[i], err);
        } else {
            r->sink->ops->drop_array(r->sink->self, t->k.dst[i]);
        }
    }
    ur_zarr_array_close(t->k.src);
    ur_free(t->k.dst);
    ur_free(t);
    return rc;
}

/* ---- streamed chunks -------------------------------------------------------------------- */

/* Under the lock: the stream slot of a streamed chunk (taken by its first slab). Claims are
 * handed out in order and each worker holds one, so a chunk's first slab is claimed before
 * its others and at most n_slots chunks are open at once. */
static stream_slot *slot_for(runner *r, const task *t, uint64_t chunk)
{
    stream_slot *free_slot = NULL;
    for (int i = 0; i < r->n_slots; i++) {
        stream_slot *s = &r->slots[i];
        if (s->used && s->t == t && s->chunk == chunk) {
            return s;
        }
        if (!s->used && free_slot == NULL) {
            free_slot = s;
        }
    }
    if (free_slot != NULL) {
        free_slot->used = 1;
        free_slot->t = t;
        free_slot->chunk = chunk;
        free_slot->next_slab = 0;
        free_slot->s = NULL;
    }
    return free_slot;
}

typedef struct {
    job *j;
    int rc;
} slab_turn;

static int slab_is_next(void *arg)
{
    const job *j = arg;
    return j->slot->next_slab == j->it.slab;
}

static void slab_done(void *arg)
{
    slab_turn *st = arg;
    stream_slot *slot = st->j->slot;
    slot->next_slab++;
    if (slot->next_slab == st->j->t->k.slabs_per_chunk || st->rc < 0) {
        ur_zarr_chunk_stream_close(slot->s);
        slot->s = NULL;
        slot->used = st->rc < 0; /* a failed stream stays claimed: the run is over */
    }
}

/* Read the item's slab into the worker's input buffer: the whole chunk with one read, or the
 * next slab of the chunk's stream once every earlier slab of it has been read. */
static int read_slab(ur_sched *s, ur_kern_worker *wk, job *j, ur_err *err)
{
    const ur_kern_task *t = &j->t->k;
    slab_turn st;
    int rc = ur_kern_in_buffer(wk, t, err);
    if (rc < 0) {
        return rc;
    }
    if (j->slot == NULL) {
        ur_phase_mark m;
        ur_phase_begin(&m);
        rc = ur_zarr_array_read_chunk(t->src, j->it.idx, wk->in.data, err);
        ur_phase_end(UR_PHASE_READ, &m);
        return rc;
    }
    rc = ur_sched_wait(s, slab_is_next, j);
    if (rc != UR_OK) {
        return rc;
    }
    /* This worker alone touches the stream until it moves next_slab on. */
    if (j->it.slab == 0) {
        rc = ur_zarr_chunk_stream_open(&j->slot->s, t->src, j->it.idx, err);
    }
    if (rc == UR_OK) {
        ur_phase_mark m;
        ur_phase_begin(&m);
        rc = ur_zarr_chunk_stream_read(j->slot->s, wk->in.data, t->slab_bytes, err);
        ur_phase_end(UR_PHASE_READ, &m);
    }
    st.j = j;
    st.rc = rc;
    ur_sched_update(s, slab_done, &st);
    return rc;
}

/* ---- the look-ahead (opts->look_ahead) ----------------------------------------------------
 * The workers' own hint (prefetch_ahead) reaches only the next chunk of a leaf already set up,
 * one item-time ahead: too little to hide a network round trip, and nothing across leaves.
 * A thread of the run walks the chunks in run order instead, opening each leaf's input array
 * itself, and announces each chunk's first LOOK_AHEAD_HINT bytes while the announced chunks
 * the workers have not claimed yet hold at most opts->look_ahead bytes. It only hints: a leaf it
 * cannot open is skipped (the worker that sets the leaf up reports the error). */
#define LOOK_AHEAD_HINT ((size_t)16 << 20)
#define LOOK_AHEAD_ITEMS 64

static int ref_in_run(const runner *r, size_t i);

typedef struct {
    uint64_t item[LOOK_AHEAD_ITEMS];
    uint64_t bytes[LOOK_AHEAD_ITEMS];
    size_t head, n;
    uint64_t total; /* bytes of the announced chunks not claimed yet */
} la_window;

/* Under la_mu: wait until a chunk of `bytes` fits the window; 0 when the run is stopping. */
static int la_wait_room(runner *r, la_window *w, uint64_t bytes)
{
    for (;;) {
        while (w->n > 0 && w->item[w->head] < r->la_claimed) {
            w->total -= w->bytes[w->head];
            w->head = (w->head + 1) % LOOK_AHEAD_ITEMS;
            w->n--;
        }
        if (r->la_stop) {
            return 0;
        }
        if (w->n == 0 || (w->n < LOOK_AHEAD_ITEMS && w->total + bytes <= r->opts->look_ahead)) {
            return 1;
        }
        pthread_cond_wait(&r->la_cv, &r->la_mu);
    }
}

/* Announce the chunks of kept leaf i (its input opened here) that the workers have not
 * claimed yet; 0 when the run is stopping. */
static int la_leaf(runner *r, size_t i, la_window *w)
{
    const ur_orbax_leaf *leaf = ur_orbax_ckpt_leaf(r->in, r->refs[i].action);
    ur_zarr_array *arr = NULL;
    ur_kern_task k;
    int going = 1;

    if (!ref_in_run(r, i) || task_geometry(r, &r->refs[i], &k, NULL) < 0 ||
        ur_orbax_ckpt_open_array(r->in, leaf, &arr, NULL) < 0) {
        return 1;
    }
    for (uint64_t rel = 0; rel < k.n_items && going; rel += k.slabs_per_chunk) {
        uint64_t item = r->refs[i].first_item + rel;
        size_t bytes = k.info.chunk_bytes < LOOK_AHEAD_HINT ? k.info.chunk_bytes : LOOK_AHEAD_HINT;
        ur_kern_item it;
        if (item >= r->end) {
            break;
        }
        pthread_mutex_lock(&r->la_mu);
        going = item < r->start || item < r->la_claimed || la_wait_room(r, w, bytes);
        if (going && item >= r->start && item >= r->la_claimed) {
            size_t at = (w->head + w->n) % LOOK_AHEAD_ITEMS;
            w->item[at] = item;
            w->bytes[at] = bytes;
            w->n++;
            w->total += bytes;
        } else {
            item = UINT64_MAX; /* nothing to announce */
        }
        pthread_mutex_unlock(&r->la_mu);
        ur_kern_describe(&k, rel, &it);
        if (item != UINT64_MAX && !it.beyond_edge) {
            ur_zarr_array_prefetch_chunk(arr, it.idx, bytes);
        }
    }
    ur_zarr_array_close(arr);
    return going;
}

static void *look_ahead_run(void *arg)
{
    runner *r = arg;
    la_window w;
    memset(&w, 0, sizeof w);
    for (size_t i = 0; i < r->n_refs && la_leaf(r, i, &w); i++) {
    }
    return NULL;
}

/* From claim (under the scheduler's lock): the workers are at `item`. */
static void look_ahead_claimed(runner *r, uint64_t item)
{
    if (r->opts->look_ahead > 0) {
        pthread_mutex_lock(&r->la_mu);
        r->la_claimed = item + 1;
        pthread_cond_signal(&r->la_cv);
        pthread_mutex_unlock(&r->la_mu);
    }
}

/* ---- the scheduler's callbacks ---------------------------------------------------------- */

static int claim(void *user, ur_sched *s, uint64_t item, void *job_, ur_err *err)
{
    runner *r = user;
    job *j = job_;
    leaf_ref *ref = ref_of(r, item);
    task *t = ref->live;
    int rc;

    (void)s;
    j->setup = 0;
    if (t == NULL) {
        t = ur_calloc(1, sizeof *t);
        if (t == NULL) {
            return ur_err_oom(err);
        }
        rc = task_geometry(r, ref, &t->k, err);
        if (rc < 0) {
            ur_free(t);
            return ur_err_wrap(err, "tensor '%s'", ur_orbax_ckpt_leaf(r->in, ref->action)->name);
        }
        t->leaf = ur_orbax_ckpt_leaf(r->in, ref->action);
        t->ref = ref;
        ref->live = t;
        j->setup = 1;
    }
    j->t = t;
    j->item = item;
    look_ahead_claimed(r, item);
    ur_kern_describe(&t->k, item - ref->first_item, &j->it);
    j->slot = NULL;
    if (t->k.slabs_per_chunk > 1) {
        j->slot = slot_for(r, t, j->it.chunk);
        if (j->slot == NULL) {
            return ur_err_set(err, UR_EINTERNAL, "tensor '%s': no stream slot free",
                              t->leaf->name);
        }
    }
    return UR_OK;
}

static int task_ready(void *arg)
{
    return ((const task *)arg)->ready;
}

static void mark_ready(void *arg)
{
    ((task *)arg)->ready = 1;
}

/* The input chunk a worker will claim next, once every worker has moved on by one item, is
 * read ahead in the background now, so that on a cold page cache the disk works while the
 * workers decode and compress (when its leaf is set up already). Only its first
 * PREFETCH_BYTES: a larger chunk is streamed, and sequential reads are read ahead by the
 * kernel. */
#define PREFETCH_BYTES ((size_t)64 << 20)

typedef struct {
    runner *r;
    uint64_t item;
    ur_zarr_array *src;
    ur_kern_item it;
} ahead;

static void find_ahead(void *arg)
{
    ahead *a = arg;
    leaf_ref *ref = ref_of(a->r, a->item);
    if (ref->live != NULL && ref->live->ready) {
        ur_kern_describe(&ref->live->k, a->item - ref->first_item, &a->it);
        a->src = ref->live->k.src;
    }
}

static void prefetch_ahead(runner *r, ur_sched *s, uint64_t item)
{
    ahead a;
    memset(&a, 0, sizeof a);
    a.r = r;
    a.item = item + (uint64_t)r->n_slots;
    if (a.item >= r->end) {
        return;
    }
    ur_sched_locked(s, find_ahead, &a);
    /* the leaf stays set up until its items, a.item among them, are committed */
    if (a.src != NULL && a.it.slab == 0 && !a.it.beyond_edge) {
        ur_zarr_array_prefetch_chunk(a.src, a.it.idx, PREFETCH_BYTES);
    }
}

static int run(void *user, ur_sched *s, int w, void *job_, ur_err *err)
{
    runner *r = user;
    job *j = job_;
    ur_kern_worker *wk = &r->workers[w];
    int rc;

    if (j->setup) {
        rc = task_setup(r, j->t, err);
        if (rc < 0) {
            return ur_err_wrap(err, "tensor '%s'", j->t->leaf->name);
        }
        ur_sched_update(s, mark_ready, j->t);
    } else {
        rc = ur_sched_wait(s, task_ready, j->t);
        if (rc != UR_OK) {
            return rc;
        }
    }
    prefetch_ahead(r, s, j->item);
    if (ur_kern_fusable(&j->it)) {
        rc = ur_kern_fused(wk, &j->it, r->sink, &j->out, err);
    } else {
        rc = read_slab(s, wk, j, err);
        if (rc == UR_OK) {
            rc = ur_kern_produce(wk, &j->it, r->sink, &j->out, err);
        }
    }
    if (rc < 0) {
        ur_err_wrap(err, "tensor '%s'", j->t->leaf->name);
    }
    return rc;
}

static void unlink_task(void *arg)
{
    task *t = arg;
    t->ref->live = NULL;
}

/* From commit (one thread at a time, every item before next_item written, none being
 * written): a piece of the output made durable every opts->piece_bytes of input. */
static int maybe_piece(runner *r, uint64_t next_item, ur_err *err)
{
    if (r->opts->piece == NULL || r->opts->piece_bytes == 0 ||
        r->stats->bytes_in - r->piece_mark < r->opts->piece_bytes) {
        return UR_OK;
    }
    r->piece_mark = r->stats->bytes_in;
    return r->opts->piece(r->opts->piece_ctx, next_item, err);
}

static int commit(void *user, ur_sched *s, void *job_, ur_err *err)
{
    runner *r = user;
    job *j = job_;
    task *t = j->t;
    const ur_kern_task *k = &t->k;
    const char *name = t->leaf->name; /* the leaf outlives its task */
    uint64_t out_idx[UR_MAX_RANK];
    size_t n_skipped = 0;
    int rc = UR_OK;

    ur_kern_out_index(&j->it, out_idx);
    for (size_t i = 0; i < j->out.n_out && rc == UR_OK; i++) {
        /* COPY/REPLICATE encode once and write the same bytes to each output. */
        const ur_buf *e = &j->out.enc[k->axis < 0 ? 0 : i];
        if (k->dst[j->out.ix[i]] == NULL) {
            n_skipped++; /* a discarded slice */
            continue;
        }
        ur_phase_mark m;
        ur_phase_begin(&m);
        rc = r->sink->ops->write_chunk(r->sink->self, k->dst[j->out.ix[i]], out_idx, e->data,
                                       e->len, err);
        ur_phase_end(UR_PHASE_COMMIT, &m);
    }
    if (rc == UR_OK) {
        ur_exec_stats *st = r->stats;
        if (j->it.slab + 1 == k->slabs_per_chunk) {
            st->chunks_in++;
        }
        st->chunks_out += j->out.n_out - n_skipped;
        st->bytes_in += k->slab_bytes;
        st->bytes_out += (uint64_t)(j->out.n_out - n_skipped) * k->out_chunk_bytes;
        if (j->it.rel + 1 == k->n_items) {
            /* its last item: no worker holds the leaf any more */
            ur_sched_update(s, unlink_task, t);
            j->t = NULL;
            rc = task_release(r, t, 1, err);
        }
    }
    if (rc == UR_OK && r->opts->progress != NULL) {
        r->opts->progress(r->opts->progress_ctx, r->stats->bytes_in, r->bytes_total);
    }
    if (rc < 0) {
        return ur_err_wrap(err, "tensor '%s'", name);
    }
    return maybe_piece(r, j->item + 1, err);
}

static void *job_new(void *user)
{
    (void)user;
    return ur_calloc(1, sizeof(job));
}

static void job_free(void *user, void *job_)
{
    job *j = job_;
    (void)user;
    ur_kern_out_dispose(&j->out);
    ur_free(j);
}

static const ur_sched_ops exec_ops = {claim, run, commit, job_new, job_free};

/* ---- set-up ----------------------------------------------------------------------------- */

static int add_extras(const ur_plan *plan, const ur_sink *sink, ur_err *err)
{
    for (size_t i = 0; i < plan->n_extras; i++) {
        const ur_plan_extra *x = &plan->extras[i];
        ur_sink_path p = out_path(&x->path);
        int64_t zero = 0;
        int rc = x->kind == UR_PLAN_EXTRA_ZERO_SCALAR
                     ? sink->ops->add_scalar(sink->self, &p, UR_DT_INT64, &zero, err)
                     : sink->ops->add_empty(sink->self, &p, UR_SINK_EMPTY_DICT, err);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

static int empty_kind(ur_orbax_value_type vt, ur_sink_empty *out)
{
    switch (vt) {
    case UR_ORBAX_VALUE_EMPTY_DICT:
        *out = UR_SINK_EMPTY_DICT;
        return 1;
    case UR_ORBAX_VALUE_EMPTY_LIST:
        *out = UR_SINK_EMPTY_LIST;
        return 1;
    case UR_ORBAX_VALUE_EMPTY_TUPLE:
        *out = UR_SINK_EMPTY_TUPLE;
        return 1;
    case UR_ORBAX_VALUE_NONE:
        *out = UR_SINK_EMPTY_NONE;
        return 1;
    case UR_ORBAX_VALUE_EMPTY_NAMED_TUPLE:
        *out = UR_SINK_EMPTY_NAMED_TUPLE;
        return 1;
    default:
        return 0;
    }
}

/* An empty entry (None, {}, []) kept in the output: the same entry at every output path. */
static int add_placeholders(const ur_plan_action *a, const ur_orbax_leaf *leaf,
                            const ur_sink *sink, ur_err *err)
{
    ur_sink_empty kind;
    if (!empty_kind(leaf->value_type, &kind)) {
        return ur_err_set(err, UR_EINVAL, "tensor '%s': not an empty-node kind: %s", leaf->name,
                          ur_orbax_value_type_name(leaf->value_type));
    }
    for (size_t i = 0; i < a->n_out; i++) {
        ur_sink_path p = out_path(&a->out[i]);
        int rc;
        if (a->out[i].len == 0) {
            continue;
        }
        rc = sink->ops->add_empty(sink->self, &p, kind, err);
        if (rc < 0) {
            return ur_err_wrap(err, "tensor '%s'", leaf->name);
        }
    }
    return UR_OK;
}

/* Set up and finish at once the outputs of a leaf with no chunk (an axis of length 0). */
static int empty_array(runner *r, const ur_kern_task *k, const ur_orbax_leaf *leaf, ur_err *err)
{
    task *t = ur_calloc(1, sizeof *t);
    int rc;
    if (t == NULL) {
        return ur_err_oom(err);
    }
    t->k = *k;
    t->leaf = leaf;
    rc = task_setup(r, t, err);
    if (rc < 0) {
        task_release(r, t, 0, NULL);
        return rc;
    }
    return task_release(r, t, 1, err);
}

/* The leaves without arrays go to the sink now; the kept arrays get their place in the item
 * sequence (their geometry is checked now, so a plan that does not fit fails before any
 * work). */
static int index_leaves(runner *r, ur_err *err)
{
    const ur_plan *plan = r->plan;
    size_t n_out = plan->n_extras;
    int rc;

    for (size_t i = 0; i < plan->n_actions; i++) {
        n_out += plan->actions[i].kind == UR_PLAN_DROP ? 0 : written(&plan->actions[i]);
    }
    rc = r->sink->ops->reserve(r->sink->self, n_out, err);
    if (rc == UR_OK) {
        rc = add_extras(plan, r->sink, err);
    }
    if (rc < 0) {
        return rc;
    }
    r->refs = ur_calloc(plan->n_actions ? plan->n_actions : 1, sizeof *r->refs);
    if (r->refs == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < plan->n_actions; i++) {
        const ur_plan_action *a = &plan->actions[i];
        const ur_orbax_leaf *leaf = ur_orbax_ckpt_leaf(r->in, i);
        leaf_ref *ref;
        ur_kern_task k;
        if (a->kind == UR_PLAN_DROP) {
            continue;
        }
        if (a->out_dtype == UR_DT_INVALID) {
            rc = add_placeholders(a, leaf, r->sink, err);
            if (rc < 0) {
                return rc;
            }
            continue;
        }
        if (!leaf->has_array) {
            return ur_err_set(err, UR_EUNSUPPORTED, "tensor '%s': kept leaf stores no array",
                              leaf->name);
        }
        ref = &r->refs[r->n_refs];
        ref->first_item = r->n_items;
        ref->action = i;
        rc = task_geometry(r, ref, &k, err);
        if (rc < 0) {
            return ur_err_wrap(err, "tensor '%s'", leaf->name);
        }
        if (k.n_items == 0) { /* an empty array: no item will set it up or finish it */
            rc = empty_array(r, &k, leaf, err);
            if (rc < 0) {
                return ur_err_wrap(err, "tensor '%s'", leaf->name);
            }
            continue;
        }
        r->n_refs++;
        if (ur_ckd_add64(&r->n_items, r->n_items, k.n_items)) {
            return ur_err_set(err, UR_ECORRUPT, "tensor '%s': too many chunks", leaf->name);
        }
        r->bytes_total += k.info.chunk_count * k.info.chunk_bytes;
        r->stats->tensors_in++;
        r->stats->tensors_out += written(a);
    }
    return UR_OK;
}

/* ---- shares and resumes ------------------------------------------------------------------ */

/* The output arrays of a leaf none of whose items this run works on (another process's, or
 * written before a resume): begun and finished without chunks, so that the output's metadata
 * names every array, as a run of all the items would. */
static int declare_leaf(runner *r, const leaf_ref *ref, ur_err *err)
{
    const ur_plan_action *a = &r->plan->actions[ref->action];
    ur_kern_task k;
    int rc = task_geometry(r, ref, &k, err);
    for (size_t i = 0; i < a->n_out && rc == UR_OK; i++) {
        ur_sink_path p = out_path(&a->out[i]);
        ur_sink_array *dst = NULL;
        if (a->out[i].len == 0) {
            continue; /* a discarded slice */
        }
        rc = r->sink->ops->begin_array(r->sink->self, &p, a->out_dtype, k.out_rank, k.out_shape,
                                       k.out_chunk_shape, &dst, err);
        if (rc == UR_OK) {
            rc = r->sink->ops->finish_array(r->sink->self, dst, err);
        }
    }
    if (rc < 0) {
        ur_err_wrap(err, "tensor '%s'", ur_orbax_ckpt_leaf(r->in, ref->action)->name);
    }
    return rc;
}

/* 1 when leaf i has an item in [r->start, r->end). */
static int ref_in_run(const runner *r, size_t i)
{
    uint64_t first = r->refs[i].first_item;
    uint64_t last = i + 1 < r->n_refs ? r->refs[i + 1].first_item : r->n_items;
    return r->start < r->end && first < r->end && last > r->start;
}

/* A kept leaf's input geometry, as the share cut and the resume need it. */
typedef struct {
    ur_exec_chunks g;
    uint64_t slabs_per_chunk;
    uint64_t slab_bytes;
} ref_geom;

/* The first item of global input chunk c (n_items past the last chunk). */
static uint64_t item_of_chunk(const runner *r, const ref_geom *gm, uint64_t c)
{
    uint64_t chunk0 = 0;
    for (size_t i = 0; i < r->n_refs; i++) {
        if (c < chunk0 + gm[i].g.n) {
            return r->refs[i].first_item + (c - chunk0) * gm[i].slabs_per_chunk;
        }
        chunk0 += gm[i].g.n;
    }
    return r->n_items;
}

/* The items this run works on: this process's share (whole input chunks, cut by
 * ur_exec_share_range; a streamed chunk's slabs stay together), less the items a resumed run
 * wrote before (counted as done). All of them in an ordinary run. */
static int select_share(runner *r, ur_err *err)
{
    const ur_exec_opts *o = r->opts;
    ur_exec_stats *st = r->stats;
    ref_geom *gm;
    uint64_t lo = 0, hi = UINT64_MAX, chunk0 = 0;
    int rc = UR_OK;

    r->start = 0;
    r->end = r->n_items;
    st->all_bytes = st->share_bytes = r->bytes_total;
    if (o->process_count <= 1 && o->resume_from == 0) {
        return UR_OK;
    }
    if (o->process_count > 1 && (o->process_index < 0 || o->process_index >= o->process_count)) {
        return ur_err_set(err, UR_EINVAL, "process index %d is not below the process count %d",
                          o->process_index, o->process_count);
    }
    gm = ur_calloc(r->n_refs ? r->n_refs : 1, sizeof *gm);
    if (gm == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < r->n_refs && rc == UR_OK; i++) {
        ur_kern_task k;
        rc = task_geometry(r, &r->refs[i], &k, err);
        gm[i].g.n = k.info.chunk_count;
        gm[i].g.chunk_bytes = k.info.chunk_bytes;
        gm[i].slabs_per_chunk = k.slabs_per_chunk;
        gm[i].slab_bytes = k.slab_bytes;
    }
    if (rc < 0) {
        ur_free(gm);
        return rc;
    }
    if (o->process_count > 1) {
        ur_exec_chunks *g = ur_calloc(r->n_refs ? r->n_refs : 1, sizeof *g);
        if (g == NULL) {
            ur_free(gm);
            return ur_err_oom(err);
        }
        for (size_t i = 0; i < r->n_refs; i++) {
            g[i] = gm[i].g;
        }
        if (o->share_total > 0) {
            ur_exec_share_range_at(g, r->n_refs, o->process_count, o->process_index,
                                   o->share_before, o->share_total, &lo, &hi);
        } else {
            ur_exec_share_range(g, r->n_refs, o->process_count, o->process_index, &lo, &hi);
        }
        ur_free(g);
        r->start = item_of_chunk(r, gm, lo);
        r->end = item_of_chunk(r, gm, hi);
    }
    st->share_bytes = 0;
    for (size_t i = 0; i < r->n_refs; i++) {
        uint64_t a = lo > chunk0 ? lo - chunk0 : 0, b = hi > chunk0 ? hi - chunk0 : 0;
        a = a < gm[i].g.n ? a : gm[i].g.n;
        b = b < gm[i].g.n ? b : gm[i].g.n;
        st->share_bytes += (b > a ? b - a : 0) * gm[i].g.chunk_bytes;
        chunk0 += gm[i].g.n;
    }
    r->bytes_total = st->share_bytes;
    /* Resume: the items of the share before resume_from are in the output already. */
    if (o->resume_from > r->start && o->resume_from <= r->end) {
        for (size_t i = 0; i < r->n_refs; i++) {
            uint64_t a = r->refs[i].first_item;
            uint64_t b = a + gm[i].g.n * gm[i].slabs_per_chunk;
            a = a > r->start ? a : r->start;
            b = b < o->resume_from ? b : o->resume_from;
            st->bytes_in += (b > a ? b - a : 0) * gm[i].slab_bytes;
        }
        r->start = o->resume_from;
        r->piece_mark = st->bytes_in;
    }
    ur_free(gm);
    return UR_OK;
}

/* Before the run (before = 1): declare the leaves wholly before its items; after it: finish
 * the leaf its last item was in (when the share ends inside it) and declare the leaves after.
 * In plan order, so every process's output lists its arrays in the same order. */
static int declare_others(runner *r, int before, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < r->n_refs && rc == UR_OK; i++) {
        leaf_ref *ref = &r->refs[i];
        int is_before = ref->first_item < r->start && !ref_in_run(r, i);
        int declare = before ? is_before : !is_before && !ref_in_run(r, i) && ref->live == NULL;
        if (!before && ref->live != NULL) {
            task *t = ref->live;
            ref->live = NULL;
            rc = task_release(r, t, 1, err);
            if (rc < 0) {
                ur_err_wrap(err, "tensor '%s'", t->leaf->name);
            }
        } else if (declare) {
            rc = declare_leaf(r, ref, err);
        }
    }
    return rc;
}

int ur_exec_input_bytes(const ur_plan *plan, const ur_orbax_ckpt *in, uint64_t *bytes, ur_err *err)
{
    *bytes = 0;
    for (size_t i = 0; i < plan->n_actions; i++) {
        const ur_plan_action *a = &plan->actions[i];
        const ur_orbax_leaf *leaf = ur_orbax_ckpt_leaf(in, i);
        ur_zarr_info info;
        int rc;
        /* the leaves index_leaves gives items (an empty array has no chunk) */
        if (a->kind == UR_PLAN_DROP || a->out_dtype == UR_DT_INVALID || !leaf->has_array) {
            continue;
        }
        rc = leaf_info(leaf, &info, err);
        if (rc < 0) {
            return ur_err_wrap(err, "tensor '%s'", leaf->name);
        }
        *bytes += info.chunk_count * info.chunk_bytes;
    }
    return UR_OK;
}

uint64_t ur_exec_default_memory(int threads, uint64_t phys_bytes)
{
    return ur_sched_default_memory(threads, phys_bytes, UR_EXEC_DEFAULT_MEMORY);
}

int ur_exec_run_sink(const ur_plan *plan, ur_orbax_ckpt *in, const ur_sink *sink,
                     const ur_exec_opts *opts, ur_exec_stats *stats, ur_err *err)
{
    runner r;
    ur_sched_cfg cfg;
    pthread_t la_tid;
    int n_threads = opts->threads > 0 ? opts->threads : ur_sched_cores(), rc, look;
    uint64_t limit = opts->memory_limit
                         ? opts->memory_limit
                         : ur_exec_default_memory(n_threads, ur_sched_physical_memory());

    memset(&r, 0, sizeof r);
    memset(stats, 0, sizeof *stats);
    r.plan = plan;
    r.in = in;
    r.sink = sink;
    r.opts = opts;
    r.stats = stats;
    /* Each worker gets an equal share of the memory limit for its slab (in a multi-process
     * run the same in every process: the output chunking follows it). */
    r.budget = opts->slab_budget ? ur_sched_share(opts->slab_budget, 1)
                                 : ur_sched_share(limit, n_threads);
    rc = index_leaves(&r, err);
    if (rc == UR_OK) {
        rc = select_share(&r, err);
    }
    if (rc == UR_OK) {
        rc = declare_others(&r, 1, err);
    }
    if (rc < 0) {
        goto out;
    }
    if ((uint64_t)n_threads > r.end - r.start && r.end > r.start) {
        n_threads = (int)(r.end - r.start);
    }
    stats->threads = n_threads;
    r.n_slots = n_threads;
    r.slots = ur_calloc((size_t)n_threads, sizeof *r.slots);
    r.workers = ur_calloc((size_t)n_threads, sizeof *r.workers);
    if (r.slots == NULL || r.workers == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    memset(&cfg, 0, sizeof cfg);
    cfg.n_items = r.end;
    cfg.first_item = r.start;
    cfg.threads = n_threads;
    cfg.ops = &exec_ops;
    cfg.user = &r;
    cfg.cancel = opts->cancel;
    pthread_mutex_init(&r.la_mu, NULL);
    pthread_cond_init(&r.la_cv, NULL);
    r.la_claimed = r.start;
    look = opts->look_ahead > 0 && pthread_create(&la_tid, NULL, look_ahead_run, &r) == 0;
    rc = ur_sched_run(&cfg, err);
    if (look) {
        pthread_mutex_lock(&r.la_mu);
        r.la_stop = 1;
        pthread_cond_signal(&r.la_cv);
        pthread_mutex_unlock(&r.la_mu);
        pthread_join(la_tid, NULL);
    }
    pthread_cond_destroy(&r.la_cv);
    pthread_mutex_destroy(&r.la_mu);
    if (rc == UR_OK) {
        rc = declare_others(&r, 0, err);
    }
out:
    for (size_t i = 0; i < r.n_refs; i++) {
        if (r.refs[i].live != NULL) { /* a failed run */
            task_release(&r, r.refs[i].live, 0, NULL);
        }
    }
    for (int i = 0; i < r.n_slots && r.slots != NULL; i++) {
        ur_zarr_chunk_stream_close(r.slots[i].s);
    }
    for (int i = 0; i < n_threads && r.workers != NULL; i++) {
        ur_kern_worker_dispose(&r.workers[i]);
    }
    ur_free(r.slots);
    ur_free(r.workers);
    ur_free(r.refs);
    return rc;
}

int ur_exec_run(const ur_plan *plan, ur_orbax_ckpt *in, ur_orbax_writer *w,
                const ur_exec_opts *opts, ur_exec_stats *stats, ur_err *err)
{
    ur_sink sink;
    ur_orbax_sink_init(&sink, w);
    return ur_exec_run_sink(plan, in, &sink, opts, stats, err);
}
