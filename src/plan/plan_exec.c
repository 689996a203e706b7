/* Running a plan: a pool of workers, each taking the next input chunk, splitting or casting
 * it into output chunks and encoding them; results are written strictly in work-item
 * order (a ticket per item), so the output bytes do not depend on the thread count.
 * See include/unroll/plan_exec.h. */
#include "unroll/plan_exec.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/tensor.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

/* One kept input leaf: where it comes from, the arrays it becomes, and how its chunks are
 * cut. A chunk is processed in slabs: slab = the chunk's box [origin, origin + slab_shape)
 * with extent 1 on the axes before `k`, `h` on axis k and the whole chunk after k, so every
 * slab is one contiguous run of the chunk's C-order bytes. When the chunk fits the memory
 * budget the slab is the whole chunk (k = 0, h = chunk_shape[0]); otherwise the chunk is
 * streamed slab by slab. The output chunk shape is the slab shape without the layer axis,
 * so each slab yields whole output chunks. */
typedef struct {
    const ur_plan_action *act;
    const ur_orbax_leaf *leaf;
    ur_zarr_array *src;
    ur_zarr_info info;   /* of src */
    ur_zarr_array **dst; /* act->n_out output arrays */
    int axis;            /* UNSTACK: the (last) layer axis, else -1 */
    int n_axes;          /* UNSTACK: layer axes (several for pipeline stacks) */
    int axes[UR_PLAN_MAX_LAYER_AXES];
    uint64_t lstride[UR_PLAN_MAX_LAYER_AXES]; /* weight of each in the output index */
    uint8_t is_layer_axis[UR_MAX_RANK];
    int k;               /* slab axis (-1 for rank 0) */
    uint64_t slab_shape[UR_MAX_RANK];
    uint64_t slab_grid[UR_MAX_RANK + 1]; /* slabs per chunk along axes 0..k */
    uint64_t slabs_per_chunk;
    size_t slab_bytes;   /* decoded input bytes of one slab */
    uint64_t first_item; /* global index of this task's first slab */
    uint64_t n_task_items; /* its slabs: chunk_count * slabs_per_chunk */
    size_t out_chunk_bytes;
    int out_rank;
    uint64_t out_chunk_shape[UR_MAX_RANK];
} task;

/* The decoding stream of a chunk being read slab by slab; slabs are read in order, each by
 * the worker that claimed it, so decoding overlaps the other workers' casting and encoding. */
typedef struct {
    const task *t;
    uint64_t chunk;
    ur_zarr_chunk_stream *s;
    uint64_t next_slab; /* the slab whose bytes come next */
    int used;
} stream_slot;

/* A finished item waiting for its turn to be written (it owns its encoded chunks). */
typedef struct parked parked;
/* Buffers of a written parked item, kept for the next worker that parks. */
typedef struct {
    ur_buf *enc;
    size_t cap_enc;
    size_t *ix;
    size_t cap_ix;
} spare;


typedef struct {
    task *tasks;
    size_t n_tasks;
    uint64_t n_items;
    uint64_t item_end; /* this process's share ends before it (n_items: all of it) */
    uint64_t piece_mark; /* stats->bytes_in at the last opts->piece */
    uint64_t bytes_total;

    pthread_mutex_t lock;
    pthread_cond_t turn;  /* signalled on every commit, stream step and failure */
    uint64_t next_claim;  /* next item a worker takes */
    uint64_t next_commit; /* next item allowed to write */
    stream_slot *slots;   /* one per worker */
    int n_slots;
    parked *parked;       /* finished items waiting for their turn, one slot per worker */
    int n_parked;
    spare *spares;        /* up to n_parked sets of buffers to reuse */
    int n_spare;
    int writing;          /* a worker is writing items (outside the lock) */
    int failed;
    ur_err err; /* the first failure */

    ur_exec_stats *stats;
    const ur_exec_opts *opts;
    ur_orbax_writer *w;
} runner;

/* Per-worker scratch, grown as needed and reused across items. */
typedef struct {
    runner *r;
    ur_buf in;   /* decoded input slab */
    ur_buf out;  /* raw output chunks, back to back */
    ur_buf *enc; /* encoded output chunks */
    size_t n_enc, cap_enc;
    size_t *ix;  /* output array of each encoded chunk */
    size_t cap_ix;
    ur_tensor_view *views; /* fused splits: the output chunks, then their row slices */
    size_t cap_views;
} worker;

/* What one work item is. */
typedef struct {
    const task *t;
    uint64_t item;
    uint64_t chunk;                /* linear chunk index within the task */
    uint64_t slab;                 /* slab index within the chunk */
    uint64_t idx[UR_MAX_RANK];     /* chunk grid index */
    uint64_t global[UR_MAX_RANK];  /* global coordinates of the slab's first element */
    int beyond_edge;               /* the slab lies wholly in the chunk's edge padding */
    stream_slot *slot;             /* streamed chunks only */
} item_info;

struct parked {
    int used;
    item_info it;
    size_t n_out;
    size_t *ix;  /* owned: output array of each encoded chunk */
    size_t cap_ix;
    ur_buf *enc; /* owned */
    size_t cap_enc;
};


/* Returned (positive) by a step that stops because another worker failed: that worker's
 * error is the one reported. */
#define STOPPED 1

static void fail(runner *r, const ur_err *e)
{
    pthread_mutex_lock(&r->lock);
    if (!r->failed) {
        r->failed = 1;
        r->err = *e;
    }
    pthread_cond_broadcast(&r->turn);
    pthread_mutex_unlock(&r->lock);
}

static const task *task_of(const runner *r, uint64_t item)
{
    size_t lo = 0, hi = r->n_tasks;
    /* Largest task whose first_item <= item. */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->tasks[mid].first_item <= item) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return &r->tasks[lo];
}

/* Fill in everything about work item `item` but its stream slot. */
static void describe_item(const runner *r, uint64_t item, item_info *it)
{
    const task *t = task_of(r, item);
    const ur_zarr_info *in = &t->info;
    uint64_t rel = item - t->first_item, c, s;
    uint64_t pos[UR_MAX_RANK + 1];

    memset(it, 0, sizeof *it);
    it->t = t;
    it->item = item;
    it->chunk = c = rel / t->slabs_per_chunk;
    it->slab = s = rel % t->slabs_per_chunk;
    for (int d = in->rank - 1; d >= 0; d--) {
        it->idx[d] = c % in->grid[d];
        c /= in->grid[d];
    }
    for (int d = t->k; d >= 0; d--) {
        pos[d] = s % t->slab_grid[d];
        s /= t->slab_grid[d];
    }
    for (int d = 0; d < in->rank; d++) {
        uint64_t origin = d <= t->k ? pos[d] * t->slab_shape[d] : 0;
        it->global[d] = it->idx[d] * in->chunk_shape[d] + origin;
        if (it->global[d] >= in->shape[d]) {
            it->beyond_edge = 1;
        }
    }
}

static int ensure_enc(worker *wk, size_t n, ur_err *err)
{
    if (n > wk->cap_enc) {
        ur_buf *e = ur_realloc(wk->enc, n * sizeof *e);
        if (e == NULL) {
            return ur_err_oom(err);
        }
        for (size_t i = wk->cap_enc; i < n; i++) {
            ur_buf_init(&e[i], 0);
        }
        wk->enc = e;
        wk->cap_enc = n;
    }
    for (size_t i = 0; i < n; i++) {
        ur_buf_reset(&wk->enc[i]);
    }
    wk->n_enc = n;
    return UR_OK;
}

static int ensure_size(ur_buf *b, size_t n, ur_err *err)
{
    ur_buf_reset(b);
    return ur_buf_reserve(b, n, err);
}

/* `arr` (of *cap elements of `size` bytes) grown to hold at least n: arr itself, a new
 * block (*cap updated), or NULL when out of memory (arr is then untouched) - or when arr is
 * NULL and n is 0. */
static void *grow(void *arr, size_t *cap, size_t n, size_t size)
{
    void *p = arr;
    if (n > *cap) {
        p = ur_realloc(arr, n * size);
        if (p != NULL) {
            *cap = n;
        }
    }
    return p;
}

static int ensure_ix(worker *wk, size_t n, ur_err *err)
{
    size_t *ix = grow(wk->ix, &wk->cap_ix, n, sizeof *ix);
    if (ix == NULL && n > 0) {
        return ur_err_oom(err);
    }
    wk->ix = ix;
    return UR_OK;
}

/* ---- decoding and splitting in one pass ----------------------------------------------------
 * A whole chunk of a cast (COPY) or of a single layer axis (UNSTACK) is split while it is
 * decoded: each time the decoder reports more final bytes, the complete rows among them
 * (indices of axis 0; single elements for a cast) are cast or split at once, while they are
 * still in the CPU's caches, instead of reading the whole decoded chunk back from memory
 * afterwards. The result is the same as splitting it whole. */
typedef struct {
    worker *wk;
    const task *t;
    ur_tensor_view src;  /* UNSTACK: the chunk, layers past the array's edge cut off */
    uint64_t layers;     /* UNSTACK: output chunks (layers in the chunk) */
    uint64_t rows;       /* rows to process */
    size_t row_bytes;    /* decoded bytes per row */
    uint64_t done;       /* rows processed */
} fused;

static int fusable(const item_info *it)
{
    const task *t = it->t;
    if (t->slabs_per_chunk != 1 || it->beyond_edge || t->info.rank == 0) {
        return 0;
    }
    return t->axis < 0 ? t->act->out_dtype != t->info.dtype : t->n_axes == 1;
}

static int ensure_views(worker *wk, size_t n, ur_err *err)
{
    ur_tensor_view *v = grow(wk->views, &wk->cap_views, n, sizeof *v);
    if (v == NULL && n > 0) {
        return ur_err_oom(err);
    }
    wk->views = v;
    return UR_OK;
}

/* Set up the output buffers and views for a fused split of item `it`. */
static int fused_prepare(worker *wk, const item_info *it, fused *f, ur_err *err)
{
    const task *t = it->t;
    const ur_zarr_info *in = &t->info;
    uint64_t start[UR_MAX_RANK] = {0}, count[UR_MAX_RANK];
    int a = t->axis, rc;

    memset(f, 0, sizeof *f);
    f->wk = wk;
    f->t = t;
    if (a < 0) { /* a cast: every element is a row */
        f->rows = t->slab_bytes / ur_dtype_size(in->dtype);
        f->row_bytes = ur_dtype_size(in->dtype);
        return ensure_size(&wk->out, t->out_chunk_bytes, err);
    }
    memcpy(count, t->slab_shape, sizeof count);
    f->layers = t->slab_shape[a];
    if (it->global[a] + f->layers > in->shape[a]) {
        f->layers = in->shape[a] - it->global[a]; /* the edge chunk's padding holds no layer */
    }
    count[a] = f->layers;
    f->rows = a == 0 ? f->layers : t->slab_shape[0];
    f->row_bytes = t->slab_bytes / t->slab_shape[0];
    rc = ur_tensor_view_init_dense(&f->src, in->dtype, in->rank, t->slab_shape, wk->in.data, err);
    if (rc == UR_OK) {
        rc = ur_tensor_view_slice(&f->src, &f->src, start, count, err);
    }
    if (rc == UR_OK) {
        rc = ensure_size(&wk->out, (size_t)f->layers * t->out_chunk_bytes, err);
    }
    if (rc == UR_OK) {
        rc = ensure_ix(wk, (size_t)f->layers, err);
    }
    if (rc == UR_OK) {
        rc = ensure_views(wk, 2 * (size_t)f->layers, err);
    }
    for (uint64_t j = 0; rc == UR_OK && j < f->layers; j++) {
        rc = ur_tensor_view_init_dense(&wk->views[j], t->act->out_dtype, t->out_rank,
                                       t->out_chunk_shape,
                                       wk->out.data + j * t->out_chunk_bytes, err);
        wk->ix[j] = (size_t)(it->global[a] + j);
    }
    return rc;
}

/* Cast or split rows [r0, r1). */
static int fused_rows(fused *f, uint64_t r0, uint64_t r1, ur_err *err)
{
    const task *t = f->t;
    worker *wk = f->wk;
    uint64_t start[UR_MAX_RANK] = {0}, count[UR_MAX_RANK];
    ur_tensor_view part, *sub = wk->views + f->layers;
    int a = t->axis, rc;

    if (a < 0) {
        size_t isz = ur_dtype_size(t->info.dtype), osz = ur_dtype_size(t->act->out_dtype);
        return ur_tensor_cast_dense(wk->out.data + r0 * osz, t->act->out_dtype,
                                    wk->in.data + r0 * isz, t->info.dtype, (size_t)(r1 - r0),
                                    err);
    }
    memcpy(count, f->src.shape, sizeof count);
    start[0] = r0;
    count[0] = r1 - r0;
    rc = ur_tensor_view_slice(&part, &f->src, start, count, err);
    if (rc < 0) {
        return rc;
    }
    if (a == 0) { /* rows are layers */
        return ur_tensor_unstack(wk->views + r0, (size_t)(r1 - r0), &part, 0, err);
    }
    /* the output's axis 0 is the input's: the same rows of every output chunk */
    for (uint64_t j = 0; j < f->layers && rc == UR_OK; j++) {
        uint64_t ostart[UR_MAX_RANK] = {0}, ocount[UR_MAX_RANK];
        memcpy(ocount, wk->views[j].shape, sizeof ocount);
        ostart[0] = r0;
        ocount[0] = r1 - r0;
        rc = ur_tensor_view_slice(&sub[j], &wk->views[j], ostart, ocount, err);
    }
    return rc == UR_OK ? ur_tensor_unstack(sub, (size_t)f->layers, &part, a, err) : rc;
}

static int fused_ready(void *ctx, size_t n, ur_err *err)
{
    fused *f = ctx;
    uint64_t r = n / f->row_bytes;
    int rc = UR_OK;
    if (r > f->rows) {
        r = f->rows;
    }
    if (r > f->done) {
        rc = fused_rows(f, f->done, r, err);
        f->done = r;
    }
    return rc;
}

/* Read and split a fusable item; its *n_chunks output chunks are then ready to encode. */
static int read_fused(worker *wk, const item_info *it, size_t *n_chunks, ur_err *err)
{
    fused f;
    int rc = ensure_size(&wk->in, it->t->slab_bytes, err);
    if (rc == UR_OK) {
        rc = fused_prepare(wk, it, &f, err);
    }
    if (rc == UR_OK) {
        rc = ur_zarr_array_read_chunk_progressive(it->t->src, it->idx, wk->in.data, fused_ready,
                                                  &f, err);
    }
    if (rc == UR_OK && f.done != f.rows) {
        rc = ur_err_set(err, UR_EINTERNAL, "split %llu of %llu rows",
                        (unsigned long long)f.done, (unsigned long long)f.rows);
    }
    *n_chunks = it->t->axis < 0 ? 1 : (size_t)f.layers;
    return rc;
}

/* Encode the n output chunks of a fused item. */
static int encode_fused(worker *wk, const item_info *it, size_t n, size_t *n_out, ur_err *err)
{
    const task *t = it->t;
    int rc = ensure_enc(wk, n, err);
    if (rc == UR_OK && t->axis < 0) { /* a cast: the one chunk goes to every output */
        rc = ensure_ix(wk, t->act->n_out, err);
        for (size_t i = 0; rc == UR_OK && i < t->act->n_out; i++) {
            wk->ix[i] = i;
        }
    }
    for (size_t k = 0; rc == UR_OK && k < n; k++) {
        rc = ur_zarr_array_encode_chunk(t->dst[t->axis < 0 ? 0 : wk->ix[k]],
                                        wk->out.data + k * t->out_chunk_bytes, &wk->enc[k], err);
    }
    *n_out = t->axis < 0 ? t->act->n_out : n;
    return rc;
}

/* Read the item's slab into wk->in: the whole chunk with one read, or the next slab of the
 * chunk's stream once every earlier slab of it has been read. */
static int read_slab(worker *wk, item_info *it, ur_err *err)
{
    runner *r = wk->r;
    const task *t = it->t;
    stream_slot *slot = it->slot;
    int rc;

    rc = ensure_size(&wk->in, t->slab_bytes, err);
    if (rc < 0) {
        return rc;
    }
    if (slot == NULL) {
        return ur_zarr_array_read_chunk(t->src, it->idx, wk->in.data, err);
    }
    pthread_mutex_lock(&r->lock);
    while (!r->failed && slot->next_slab != it->slab) {
        pthread_cond_wait(&r->turn, &r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    if (r->failed) {
        return STOPPED;
    }
    /* This worker alone touches the stream until it moves next_slab on. */
    if (it->slab == 0) {
        rc = ur_zarr_chunk_stream_open(&slot->s, t->src, it->idx, err);
    }
    if (rc == UR_OK) {
        rc = ur_zarr_chunk_stream_read(slot->s, wk->in.data, t->slab_bytes, err);
    }
    pthread_mutex_lock(&r->lock);
    slot->next_slab++;
    if (slot->next_slab == t->slabs_per_chunk || rc < 0) {
        ur_zarr_chunk_stream_close(slot->s);
        slot->s = NULL;
        slot->used = rc < 0; /* a failed stream stays claimed: the run is over */
    }
    pthread_cond_broadcast(&r->turn);
    pthread_mutex_unlock(&r->lock);
    return rc;
}


/* COPY or REPLICATE: one output chunk (the slab, cast), written to every output array. */
static int produce_copy(worker *wk, const task *t, size_t *n_out, ur_err *err)
{
    const ur_zarr_info *in = &t->info;
    ur_dtype out_dt = t->act->out_dtype;
    const void *bytes = wk->in.data;
    int rc;

    if (out_dt != in->dtype) {
        rc = ensure_size(&wk->out, t->out_chunk_bytes, err);
        if (rc == UR_OK) {
            rc = ur_tensor_cast_dense(wk->out.data, out_dt, wk->in.data, in->dtype,
                                      t->slab_bytes / ur_dtype_size(in->dtype), err);
        }
        if (rc < 0) {
            return rc;
        }
        bytes = wk->out.data;
    }
    rc = ensure_enc(wk, 1, err);
    if (rc == UR_OK) {
        rc = ensure_ix(wk, t->act->n_out, err);
    }
    if (rc == UR_OK) {
        rc = ur_zarr_array_encode_chunk(t->dst[0], bytes, &wk->enc[0], err);
    }
    for (size_t i = 0; rc == UR_OK && i < t->act->n_out; i++) {
        wk->ix[i] = i;
    }
    *n_out = t->act->n_out;
    return rc;
}

/* UNSTACK: split the slab along its layer axes. The last layer axis is split by the kernel
 * in one pass; the other ones (pipeline stacks) are fixed one index tuple at a time. Output
 * chunk k of this item goes to output array wk->ix[k]. */
static int produce_unstack(worker *wk, const item_info *it, size_t *n_out, ur_err *err)
{
    const task *t = it->t;
    const ur_zarr_info *in = &t->info;
    int n_ax = t->n_axes, last = t->axes[n_ax - 1];
    uint64_t g[UR_PLAN_MAX_LAYER_AXES], c[UR_PLAN_MAX_LAYER_AXES], i_out[UR_PLAN_MAX_LAYER_AXES];
    uint64_t start[UR_MAX_RANK] = {0}, count[UR_MAX_RANK];
    uint64_t total = 1, n_outer = 1;
    ur_tensor_view src, dsts_stack[64];
    ur_tensor_view *dsts = dsts_stack;
    size_t bytes;
    int rc;

    memcpy(count, t->slab_shape, sizeof count);
    for (int m = 0; m < n_ax; m++) {
        int a = t->axes[m];
        g[m] = it->global[a];
        c[m] = t->slab_shape[a];
        if (g[m] + c[m] > in->shape[a]) {
            c[m] = in->shape[a] - g[m]; /* the edge chunk's padding holds no layer */
        }
        count[a] = c[m];
        total *= c[m];
        if (m < n_ax - 1) {
            n_outer *= c[m];
        }
        i_out[m] = 0;
    }
    rc = ur_tensor_view_init_dense(&src, in->dtype, in->rank, t->slab_shape, wk->in.data, err);
    if (rc == UR_OK) {
        rc = ur_tensor_view_slice(&src, &src, start, count, err);
    }
    if (rc == UR_OK && ur_ckd_mul(&bytes, (size_t)total, t->out_chunk_bytes)) {
        rc = ur_err_set(err, UR_ECORRUPT, "output chunk size overflows");
    }
    if (rc == UR_OK) {
        rc = ensure_size(&wk->out, bytes, err);
    }
    if (rc == UR_OK) {
        rc = ensure_enc(wk, (size_t)total, err);
    }
    if (rc == UR_OK) {
        rc = ensure_ix(wk, (size_t)total, err);
    }
    if (rc == UR_OK && c[n_ax - 1] > 64) {
        dsts = ur_malloc((size_t)c[n_ax - 1] * sizeof *dsts);
        if (dsts == NULL) {
            rc = ur_err_oom(err);
        }
    }
    for (uint64_t o = 0; rc == UR_OK && o < n_outer; o++) {
        ur_tensor_view v = src;
        uint64_t base = 0;
        /* fix the outer layer axes, highest first so lower axis numbers stay valid */
        for (int m = n_ax - 2; m >= 0 && rc == UR_OK; m--) {
            rc = ur_tensor_view_take(&v, &v, t->axes[m], i_out[m], err);
        }
        for (int m = 0; m < n_ax - 1; m++) {
            base += (g[m] + i_out[m]) * t->lstride[m];
        }
        for (uint64_t j = 0; rc == UR_OK && j < c[n_ax - 1]; j++) {
            size_t k = (size_t)(o * c[n_ax - 1] + j);
            rc = ur_tensor_view_init_dense(&dsts[j], t->act->out_dtype, t->out_rank,
                                           t->out_chunk_shape,
                                           wk->out.data + k * t->out_chunk_bytes, err);
            wk->ix[k] = (size_t)(base + g[n_ax - 1] + j);
        }
        if (rc == UR_OK) {
            rc = ur_tensor_unstack(dsts, (size_t)c[n_ax - 1], &v, last - (n_ax - 1), err);
        }
        /* next tuple of outer indices (odometer, last outer axis fastest) */
        for (int m = n_ax - 2; m >= 0; m--) {
            if (++i_out[m] < c[m]) {
                break;
            }
            i_out[m] = 0;
        }
    }
    if (dsts != dsts_stack) {
        ur_free(dsts);
    }
    for (uint64_t k = 0; rc == UR_OK && k < total; k++) {
        rc = ur_zarr_array_encode_chunk(t->dst[wk->ix[k]], wk->out.data + k * t->out_chunk_bytes,
                                        &wk->enc[k], err);
    }
    *n_out = (size_t)total;
    return rc;
}

/* Cast or split the slab in wk->in and encode its output chunks into wk->enc; wk->ix names
 * the output array of each. */
static int produce(worker *wk, const item_info *it, size_t *n_out, ur_err *err)
{
    return it->t->axis < 0 ? produce_copy(wk, it->t, n_out, err)
                           : produce_unstack(wk, it, n_out, err);
}

/* Store an item's encoded chunks (no lock held: only the one writer calls this). */
static int write_item(const item_info *it, const size_t *ix, size_t n_out, const ur_buf *enc,
                      ur_err *err)
{
    const task *t = it->t;
    uint64_t out_idx[UR_MAX_RANK];
    int rc = UR_OK;
    int k = 0;

    for (int d = 0; d < t->info.rank; d++) {
        if (!t->is_layer_axis[d]) {
            out_idx[k++] = it->global[d] / t->slab_shape[d];
        }
    }
    for (size_t i = 0; i < n_out && rc == UR_OK; i++) {
        /* COPY/REPLICATE encode once and write the same bytes to each output. */
        const ur_buf *e = &enc[t->axis < 0 ? 0 : i];
        rc = ur_zarr_array_write_encoded(t->dst[ix[i]], out_idx, e->data, e->len, err);
    }
    return rc;
}

/* Every item of task t is written (items are written in order, so no worker reads it any
 * more): close its arrays now rather than at the end, so that the handles held do not grow
 * with the number of arrays. */
static void release_task(task *t, ur_orbax_writer *w)
{
    for (size_t i = 0; i < t->act->n_out; i++) {
        ur_orbax_writer_done_array(w, t->dst[i]);
        t->dst[i] = NULL;
    }
    ur_zarr_array_close(t->src);
    t->src = NULL;
}

/* Under the lock: count a written item and report progress. */
static void account(runner *r, const item_info *it, size_t n_out)
{
    const task *t = it->t;
    r->next_commit++;
    if (it->slab + 1 == t->slabs_per_chunk) {
        r->stats->chunks_in++;
    }
    r->stats->chunks_out += n_out;
    r->stats->bytes_in += t->slab_bytes;
    r->stats->bytes_out += (uint64_t)n_out * t->out_chunk_bytes;
    if (it->item + 1 == t->first_item + t->n_task_items) {
        release_task((task *)(uintptr_t)t, r->w);
    }
    if (r->opts->progress != NULL) {
        r->opts->progress(r->opts->progress_ctx, r->stats->bytes_in, r->bytes_total);
    }
}

static void dispose_bufs(ur_buf *enc, size_t cap)
{
    for (size_t j = 0; j < cap; j++) {
        ur_buf_dispose(&enc[j]);
    }
    ur_free(enc);
}

/* Under the lock: the parked result of item `item`, or NULL. */
static parked *parked_find(runner *r, uint64_t item)
{
    for (int i = 0; i < r->n_parked; i++) {
        if (r->parked[i].used && r->parked[i].it.item == item) {
            return &r->parked[i];
        }
    }
    return NULL;
}

static parked *parked_free_slot(runner *r)
{
    for (int i = 0; i < r->n_parked; i++) {
        if (!r->parked[i].used) {
            return &r->parked[i];
        }
    }
    return NULL;
}

/* Under the lock, by the one writer (r->writing): a piece of the output made durable every
 * opts->piece_bytes of input (the lock is let go meanwhile; no write can start). */
static int maybe_piece(runner *r, ur_err *err)
{
    int rc;
    if (r->opts->piece == NULL || r->opts->piece_bytes == 0 ||
        r->stats->bytes_in - r->piece_mark < r->opts->piece_bytes) {
        return UR_OK;
    }
    r->piece_mark = r->stats->bytes_in;
    pthread_mutex_unlock(&r->lock);
    rc = r->opts->piece(r->opts->piece_ctx, r->next_commit, err);
    pthread_mutex_lock(&r->lock);
    return rc;
}

/* Hand in a finished item. Items are written strictly in order by one writer at a time:
 * the item whose turn it is is written now, by this worker, followed by any parked items
 * that come next; an item finished early is parked (its encoded chunks move to the parked
 * slot) so the worker can go on, and waits only when every parking slot is taken. */
static int commit(worker *wk, const item_info *it, size_t n_out, ur_err *err)
{
    runner *r = wk->r;
    int rc;

    pthread_mutex_lock(&r->lock);
    for (;;) {
        parked *p;
        if (r->failed) {
            pthread_mutex_unlock(&r->lock);
            return STOPPED;
        }
        if (it->item == r->next_commit && !r->writing) {
            break;
        }
        p = parked_free_slot(r);
        if (p != NULL) {
            p->used = 1;
            p->it = *it;
            p->n_out = n_out;
            p->enc = wk->enc;
            p->cap_enc = wk->cap_enc;
            p->ix = wk->ix;
            p->cap_ix = wk->cap_ix;
            /* take back buffers an earlier parked item left, so they are reused rather than
             * freed and faulted in again */
            if (r->n_spare > 0) {
                spare *sp = &r->spares[--r->n_spare];
                wk->enc = sp->enc;
                wk->cap_enc = sp->cap_enc;
                wk->ix = sp->ix;
                wk->cap_ix = sp->cap_ix;
            } else {
                wk->enc = NULL;
                wk->cap_enc = 0;
                wk->ix = NULL;
                wk->cap_ix = 0;
            }
            wk->n_enc = 0;
            pthread_cond_broadcast(&r->turn);
            pthread_mutex_unlock(&r->lock);
            return UR_OK;
        }
        pthread_cond_wait(&r->turn, &r->lock);
    }
    r->writing = 1;
    pthread_mutex_unlock(&r->lock);

    rc = write_item(it, wk->ix, n_out, wk->enc, err);
    pthread_mutex_lock(&r->lock);
    if (rc == UR_OK) {
        account(r, it, n_out);
        rc = maybe_piece(r, err);
    }
    while (rc == UR_OK && !r->failed) {
        parked *p = parked_find(r, r->next_commit);
        parked mine;
        if (p == NULL) {
            break;
        }
        mine = *p;
        memset(p, 0, sizeof *p); /* the slot is free again */
        pthread_cond_broadcast(&r->turn);
        pthread_mutex_unlock(&r->lock);
        rc = write_item(&mine.it, mine.ix, mine.n_out, mine.enc, err);
        if (rc < 0) {
            ur_err_wrap(err, "tensor '%s'", mine.it.t->leaf->name);
        }
        pthread_mutex_lock(&r->lock);
        if (r->n_spare < r->n_parked) {
            spare *sp = &r->spares[r->n_spare++];
            sp->enc = mine.enc;
            sp->cap_enc = mine.cap_enc;
            sp->ix = mine.ix;
            sp->cap_ix = mine.cap_ix;
        } else {
            dispose_bufs(mine.enc, mine.cap_enc);
            ur_free(mine.ix);
        }
        if (rc == UR_OK) {
            account(r, &mine.it, mine.n_out);
            rc = maybe_piece(r, err);
        }
        if (rc < 0) {
            /* already named its tensor: record the failure here */
            if (!r->failed) {
                r->failed = 1;
                r->err = *err;
            }
            rc = STOPPED;
        }
    }
    r->writing = 0;
    pthread_cond_broadcast(&r->turn);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* Under the runner's lock: the stream slot of a streamed chunk (made by its first slab). */
static stream_slot *slot_for(runner *r, const item_info *it)
{
    stream_slot *free_slot = NULL;
    for (int i = 0; i < r->n_slots; i++) {
        stream_slot *s = &r->slots[i];
        if (s->used && s->t == it->t && s->chunk == it->chunk) {
            return s;
        }
        if (!s->used && free_slot == NULL) {
            free_slot = s;
        }
    }
    /* Claims are handed out in order and each worker holds one, so a chunk's first slab is
     * claimed before its others and at most n_slots chunks are open at once. */
    if (free_slot != NULL) {
        free_slot->used = 1;
        free_slot->t = it->t;
        free_slot->chunk = it->chunk;
        free_slot->next_slab = 0;
        free_slot->s = NULL;
    }
    return free_slot;
}

/* The input chunk a worker will claim next, once every worker has moved on by one item, is
 * read ahead in the background now, so that on a cold page cache the disk works while the
 * workers decode and compress. Only its first PREFETCH_BYTES: a larger chunk is streamed,
 * and sequential reads are read ahead by the kernel. */
#define PREFETCH_BYTES ((size_t)64 << 20)

static void prefetch_ahead(const runner *r, uint64_t item)
{
    item_info next;
    uint64_t ahead = item + (uint64_t)r->n_slots;
    if (ahead >= r->item_end) {
        return;
    }
    describe_item(r, ahead, &next);
    if (next.slab == 0 && !next.beyond_edge) {
        ur_zarr_array_prefetch_chunk(next.t->src, next.idx, PREFETCH_BYTES);
    }
}

static void *work(void *arg)
{
    worker *wk = arg;
    runner *r = wk->r;
    ur_err err;

    ur_err_clear(&err);
    for (;;) {
        item_info it;
        size_t n_out = 0;
        int rc;

        if (r->opts->cancel != NULL && *r->opts->cancel) {
            ur_err_set(&err, UR_EINTERNAL, "interrupted");
            fail(r, &err);
            break;
        }
        pthread_mutex_lock(&r->lock);
        if (r->failed || r->next_claim >= r->item_end) {
            pthread_mutex_unlock(&r->lock);
            break;
        }
        describe_item(r, r->next_claim++, &it);
        if (it.t->slabs_per_chunk > 1) {
            it.slot = slot_for(r, &it);
        }
        pthread_mutex_unlock(&r->lock);
        prefetch_ahead(r, it.item);

        if (it.t->slabs_per_chunk > 1 && it.slot == NULL) {
            rc = ur_err_set(&err, UR_EINTERNAL, "no stream slot free");
        } else if (fusable(&it)) {
            size_t n_chunks = 0;
            rc = read_fused(wk, &it, &n_chunks, &err);
            if (rc == UR_OK) {
                rc = encode_fused(wk, &it, n_chunks, &n_out, &err);
            }
        } else {
            rc = read_slab(wk, &it, &err);
            if (rc == UR_OK && !it.beyond_edge) {
                rc = produce(wk, &it, &n_out, &err);
            }
        }
        if (rc == UR_OK) {
            rc = commit(wk, &it, n_out, &err);
        }
        if (rc == STOPPED) {
            break;
        }
        if (rc < 0) {
            ur_err_wrap(&err, "tensor '%s'", it.t->leaf->name);
            fail(r, &err);
            break;
        }
    }
    return NULL;
}

/* ---- setup ------------------------------------------------------------------------------ */

/* The writer's key path of `p` (ur_free it), NULL when out of memory. Sized to the path: a
 * MaxText tree has no depth limit, so neither has the output. */
static ur_orbax_key *path_keys(const ur_plan_path *p)
{
    ur_orbax_key *keys = ur_calloc(p->len ? p->len : 1, sizeof *keys);
    if (keys == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < p->len; i++) {
        keys[i].key = p->comp[i];
        keys[i].type = p->seq != NULL && p->seq[i] ? UR_ORBAX_KEY_SEQUENCE : UR_ORBAX_KEY_DICT;
    }
    return keys;
}

static int add_extras(const ur_plan *plan, ur_orbax_writer *w, ur_err *err)
{
    for (size_t i = 0; i < plan->n_extras; i++) {
        const ur_plan_extra *x = &plan->extras[i];
        ur_orbax_key *keys = path_keys(&x->path);
        int64_t zero = 0;
        int rc;
        if (keys == NULL) {
            return ur_err_oom(err);
        }
        if (x->kind == UR_PLAN_EXTRA_ZERO_SCALAR) {
            rc = ur_orbax_writer_add_scalar(w, keys, x->path.len, UR_DT_INT64, &zero, err);
        } else {
            rc = ur_orbax_writer_add_empty(w, keys, x->path.len, UR_ORBAX_VALUE_EMPTY_DICT, err);
        }
        ur_free(keys);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

/* An empty entry (None, {}, []) kept in the output: the same entry at every output path. */
static int add_placeholders(const ur_plan_action *a, const ur_orbax_leaf *leaf,
                            ur_orbax_writer *w, ur_err *err)
{
    for (size_t i = 0; i < a->n_out; i++) {
        ur_orbax_key *keys = path_keys(&a->out[i]);
        int rc;
        if (keys == NULL) {
            return ur_err_oom(err);
        }
        rc = ur_orbax_writer_add_empty(w, keys, a->out[i].len, leaf->value_type, err);
        ur_free(keys);
        if (rc < 0) {
            return ur_err_wrap(err, "tensor '%s'", leaf->name);
        }
    }
    return UR_OK;
}

/* Bytes a worker holds for a slab of `elems` input elements: the decoded input, the raw
 * output, the encoded output, and the encoded output of an item it parked (compression
 * rarely grows data by much). */
static uint64_t slab_cost(const task *t, uint64_t elems)
{
    uint64_t in = ur_dtype_size(t->info.dtype), out = ur_dtype_size(t->act->out_dtype);
    return elems * (in + 3 * out); /* + a parked encoded copy */
}

/* Largest divisor of n that is <= cap (1 when cap < 1). */
static uint64_t largest_divisor_at_most(uint64_t n, uint64_t cap)
{
    uint64_t best = 1;
    if (cap >= n) {
        return n;
    }
    for (uint64_t d = 1; d * d <= n; d++) {
        if (n % d == 0) {
            if (d <= cap && d > best) {
                best = d;
            }
            if (n / d <= cap && n / d > best) {
                best = n / d;
            }
        }
    }
    return best;
}

/* Cut the chunk into slabs that fit `budget` bytes (see `task`). Slab boundaries must be
 * chunk-aligned in every output array, so h divides the chunk extent on axis k. */
static int choose_slabs(task *t, uint64_t budget, ur_err *err)
{
    const ur_zarr_info *in = &t->info;
    uint64_t tail = 1; /* elements of the chunk after axis k */
    int k;

    if (in->rank == 0) {
        t->k = -1;
        t->slabs_per_chunk = 1;
        t->slab_bytes = in->chunk_bytes;
        return UR_OK;
    }
    for (k = in->rank - 1; k >= 0; k--) {
        /* find the outermost axis whose rows fit: scan from the innermost outwards */
        if (slab_cost(t, tail * in->chunk_shape[k]) > budget) {
            break;
        }
        tail *= in->chunk_shape[k];
    }
    if (k < 0) {
        k = 0; /* the whole chunk fits */
        tail /= in->chunk_shape[0];
    }
    t->k = k;
    for (int d = 0; d < in->rank; d++) {
        t->slab_shape[d] = d < k ? 1 : in->chunk_shape[d];
    }
    {
        uint64_t per_row = slab_cost(t, tail);
        uint64_t cap = per_row >= budget ? 1 : budget / per_row;
        t->slab_shape[k] = largest_divisor_at_most(in->chunk_shape[k], cap);
    }
    t->slabs_per_chunk = 1;
    for (int d = 0; d <= k; d++) {
        t->slab_grid[d] = in->chunk_shape[d] / t->slab_shape[d];
        if (ur_ckd_mul64(&t->slabs_per_chunk, t->slabs_per_chunk, t->slab_grid[d])) {
            return ur_err_set(err, UR_ECORRUPT, "chunk shape overflows");
        }
    }
    t->slab_bytes = ur_dtype_size(in->dtype);
    for (int d = 0; d < in->rank; d++) {
        t->slab_bytes *= (size_t)t->slab_shape[d]; /* <= chunk_bytes: cannot overflow */
    }
    return UR_OK;
}

/* The action's layer axes (one, or several for pipeline stacks), checked against the
 * array's shape: their lengths must multiply to the number of outputs. */
static int layer_axes(task *t, ur_err *err)
{
    const ur_plan_action *a = t->act;
    uint64_t n = 1;

    t->axis = -1;
    t->n_axes = 0;
    if (a->kind != UR_PLAN_UNSTACK) {
        return UR_OK;
    }
    if (a->n_axes > UR_PLAN_MAX_LAYER_AXES) {
        return ur_err_set(err, UR_EINTERNAL, "%zu layer axes", a->n_axes);
    }
    t->n_axes = a->n_axes > 1 ? (int)a->n_axes : 1;
    for (int m = 0; m < t->n_axes; m++) {
        size_t ax = a->n_axes > 1 ? a->axes[m] : a->axis;
        if ((int)ax >= t->info.rank || (m > 0 && (int)ax <= t->axes[m - 1])) {
            return ur_err_set(err, UR_EINTERNAL, "bad layer axis %zu for rank %d", ax,
                              t->info.rank);
        }
        t->axes[m] = (int)ax;
        t->is_layer_axis[ax] = 1;
        n *= t->info.shape[ax];
    }
    t->axis = t->axes[t->n_axes - 1];
    for (int m = t->n_axes - 1; m >= 0; m--) {
        t->lstride[m] = m == t->n_axes - 1 ? 1 : t->lstride[m + 1] * t->info.shape[t->axes[m + 1]];
    }
    if (n != (uint64_t)a->n_out) {
        return ur_err_set(err, UR_ECORRUPT, "the layer axes hold %llu layers, the plan expects %zu",
                          (unsigned long long)n, a->n_out);
    }
    return UR_OK;
}

/* Open the input array, check it is what the plan was built from, cut its chunks into slabs
 * that fit `budget`, and create the outputs. */
static int setup_task(task *t, ur_orbax_ckpt *in, ur_orbax_writer *w, uint64_t budget,
                      ur_err *err)
{
    const ur_plan_action *a = t->act;
    uint64_t out_shape[UR_MAX_RANK];
    int rc, k = 0;

    rc = ur_orbax_ckpt_open_array(in, t->leaf, &t->src, err);
    if (rc < 0) {
        return rc;
    }
    t->info = *ur_zarr_array_info(t->src);
    rc = layer_axes(t, err);
    if (rc < 0) {
        return rc;
    }
    rc = choose_slabs(t, budget, err);
    if (rc < 0) {
        return rc;
    }
    for (int d = 0; d < t->info.rank; d++) {
        if (!t->is_layer_axis[d]) {
            out_shape[k] = t->info.shape[d];
            t->out_chunk_shape[k++] = t->slab_shape[d];
        }
    }
    t->out_rank = k;
    t->out_chunk_bytes = ur_dtype_size(a->out_dtype);
    for (int d = 0; d < k; d++) {
        if (ur_ckd_mul(&t->out_chunk_bytes, t->out_chunk_bytes, (size_t)t->out_chunk_shape[d])) {
            return ur_err_set(err, UR_ECORRUPT, "output chunk size overflows");
        }
    }
    t->dst = ur_calloc(a->n_out ? a->n_out : 1, sizeof *t->dst);
    if (t->dst == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < a->n_out; i++) {
        ur_orbax_key *keys = path_keys(&a->out[i]);
        if (keys == NULL) {
            return ur_err_oom(err);
        }
        /* Replicated spec (NULL): restorable on any mesh; MaxText reshards on load. */
        rc = ur_orbax_writer_add_array(w, keys, a->out[i].len, a->out_dtype, k, out_shape,
                                       t->out_chunk_shape, NULL, &t->dst[i], err);
        ur_free(keys);
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

/* The first work item of global input chunk c (n_items past the last chunk). */
static uint64_t item_of_chunk(const runner *r, uint64_t c)
{
    uint64_t chunk0 = 0;
    for (size_t i = 0; i < r->n_tasks; i++) {
        const task *t = &r->tasks[i];
        if (c < chunk0 + t->info.chunk_count) {
            return t->first_item + (c - chunk0) * t->slabs_per_chunk;
        }
        chunk0 += t->info.chunk_count;
    }
    return r->n_items;
}

/* Resume: the items of the share before opts->resume_from are written already. */
static void skip_done(runner *r, const ur_exec_opts *opts)
{
    if (opts->resume_from > r->next_claim && opts->resume_from <= r->item_end) {
        for (uint64_t i = r->next_claim; i < opts->resume_from; i++) {
            r->stats->bytes_in += task_of(r, i)->slab_bytes; /* counted as done */
        }
        r->next_claim = r->next_commit = opts->resume_from;
        r->piece_mark = r->stats->bytes_in;
    }
}

/* This process's share of the items (all of them in a single-process run): whole input
 * chunks, cut by ur_exec_share_range; a streamed chunk's slabs stay together. */
static int select_share(runner *r, const ur_exec_opts *opts, ur_err *err)
{
    ur_exec_chunks *g;
    uint64_t lo = 0, hi = 0, chunk0 = 0;

    r->next_claim = r->next_commit = 0;
    r->item_end = r->n_items;
    r->stats->all_bytes = r->bytes_total;
    r->stats->share_bytes = r->bytes_total;
    if (opts->process_count <= 1) {
        skip_done(r, opts);
        return UR_OK;
    }
    if (opts->process_index < 0 || opts->process_index >= opts->process_count) {
        return ur_err_set(err, UR_EINVAL, "process index %d is not below the process count %d",
                          opts->process_index, opts->process_count);
    }
    g = ur_calloc(r->n_tasks ? r->n_tasks : 1, sizeof *g);
    if (g == NULL) {
        return ur_err_oom(err);
    }
    for (size_t i = 0; i < r->n_tasks; i++) {
        g[i].n = r->tasks[i].info.chunk_count;
        g[i].chunk_bytes = r->tasks[i].info.chunk_bytes;
    }
    ur_exec_share_range(g, r->n_tasks, opts->process_count, opts->process_index, &lo, &hi);
    ur_free(g);
    r->next_claim = item_of_chunk(r, lo);
    r->item_end = item_of_chunk(r, hi);
    r->stats->share_bytes = 0;
    for (size_t i = 0; i < r->n_tasks; i++) {
        const task *t = &r->tasks[i];
        uint64_t a = lo > chunk0 ? lo - chunk0 : 0, b = hi > chunk0 ? hi - chunk0 : 0;
        a = a < t->info.chunk_count ? a : t->info.chunk_count;
        b = b < t->info.chunk_count ? b : t->info.chunk_count;
        r->stats->share_bytes += (b > a ? b - a : 0) * t->info.chunk_bytes;
        chunk0 += t->info.chunk_count;
    }
    r->next_commit = r->next_claim;
    r->bytes_total = r->stats->share_bytes;
    skip_done(r, opts);
    return UR_OK;
}

static int requested_threads(const ur_exec_opts *opts)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return opts->threads > 0 ? opts->threads : (cores > 0 ? (int)cores : 1);
}

uint64_t ur_exec_default_memory(int threads, uint64_t phys_bytes)
{
    uint64_t want = (uint64_t)(threads > 0 ? threads : 1) * ((uint64_t)128 << 20);
    uint64_t cap = phys_bytes / 4;
    if (phys_bytes != 0 && want > cap) {
        want = cap;
    }
    return want < UR_EXEC_DEFAULT_MEMORY ? UR_EXEC_DEFAULT_MEMORY : want;
}

static uint64_t physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

int ur_plan_exec_run(const ur_plan *plan, ur_orbax_ckpt *in, ur_orbax_writer *w,
                     const ur_exec_opts *opts, ur_exec_stats *stats, ur_err *err)
{
    runner r;
    worker *workers = NULL;
    pthread_t *tids = NULL;
    int n_threads = requested_threads(opts), started = 0, rc;
    uint64_t limit = opts->memory_limit ? opts->memory_limit
                                        : ur_exec_default_memory(n_threads, physical_memory());
    uint64_t budget;

    memset(&r, 0, sizeof r);
    memset(stats, 0, sizeof *stats);
    pthread_mutex_init(&r.lock, NULL);
    pthread_cond_init(&r.turn, NULL);
    r.stats = stats;
    r.opts = opts;
    r.w = w;
    /* Each worker gets an equal share of the memory limit for its slab. */
    budget = opts->slab_budget ? opts->slab_budget : limit / (uint64_t)n_threads;
    if (budget < 16) {
        budget = 16;
    }

    {
        size_t n_out = plan->n_extras;
        for (size_t i = 0; i < plan->n_actions; i++) {
            n_out += plan->actions[i].kind == UR_PLAN_DROP ? 0 : plan->actions[i].n_out;
        }
        rc = ur_orbax_writer_reserve(w, n_out, err);
    }
    if (rc == UR_OK) {
        rc = add_extras(plan, w, err);
    }
    if (rc < 0) {
        goto out;
    }
    r.tasks = ur_calloc(plan->n_actions ? plan->n_actions : 1, sizeof *r.tasks);
    if (r.tasks == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    for (size_t i = 0; i < plan->n_actions; i++) {
        const ur_plan_action *a = &plan->actions[i];
        const ur_orbax_leaf *leaf = ur_orbax_ckpt_leaf(in, i);
        task *t;
        if (a->kind == UR_PLAN_DROP) {
            continue;
        }
        if (a->out_dtype == UR_DT_INVALID) {
            rc = add_placeholders(a, leaf, w, err);
            if (rc < 0) {
                goto out;
            }
            continue;
        }
        if (!leaf->has_array) {
            rc = ur_err_set(err, UR_EUNSUPPORTED, "tensor '%s': kept leaf stores no array",
                            leaf->name);
            goto out;
        }
        t = &r.tasks[r.n_tasks++];
        t->act = a;
        t->leaf = leaf;
        t->first_item = r.n_items;
        rc = setup_task(t, in, w, budget, err);
        if (rc < 0) {
            ur_err_wrap(err, "tensor '%s'", leaf->name);
            goto out;
        }
        t->n_task_items = t->info.chunk_count * t->slabs_per_chunk;
        r.n_items += t->n_task_items;
        r.bytes_total += t->info.chunk_count * t->info.chunk_bytes;
        stats->tensors_in++;
        stats->tensors_out += a->n_out;
    }

    rc = select_share(&r, opts, err);
    if (rc < 0) {
        goto out;
    }
    if ((uint64_t)n_threads > r.item_end - r.next_claim && r.item_end > r.next_claim) {
        n_threads = (int)(r.item_end - r.next_claim);
    }
    stats->threads = n_threads;
    workers = ur_calloc((size_t)n_threads, sizeof *workers);
    tids = ur_calloc((size_t)n_threads, sizeof *tids);
    r.slots = ur_calloc((size_t)n_threads, sizeof *r.slots);
    r.n_slots = n_threads;
    r.parked = ur_calloc((size_t)n_threads, sizeof *r.parked);
    r.n_parked = n_threads;
    r.spares = ur_calloc((size_t)n_threads, sizeof *r.spares);
    if (workers == NULL || tids == NULL || r.slots == NULL || r.parked == NULL ||
        r.spares == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    for (int i = 0; i < n_threads; i++) {
        workers[i].r = &r;
        ur_buf_init(&workers[i].in, 0);
        ur_buf_init(&workers[i].out, 0);
    }
    for (int i = 1; i < n_threads; i++) {
        if (pthread_create(&tids[i], NULL, work, &workers[i]) != 0) {
            break;
        }
        started = i;
    }
    work(&workers[0]);
    for (int i = 1; i <= started; i++) {
        pthread_join(tids[i], NULL);
    }
    rc = UR_OK;
    if (r.failed) {
        *err = r.err;
        rc = r.err.code;
    } else if (r.next_commit != r.item_end) {
        rc = ur_err_set(err, UR_EINTERNAL, "%llu of %llu chunks written",
                        (unsigned long long)r.next_commit, (unsigned long long)r.item_end);
    }
out:
    for (int i = 0; i < n_threads && workers != NULL; i++) {
        ur_buf_dispose(&workers[i].in);
        ur_buf_dispose(&workers[i].out);
        dispose_bufs(workers[i].enc, workers[i].cap_enc);
        ur_free(workers[i].ix);
        ur_free(workers[i].views);
    }
    for (int i = 0; i < r.n_slots; i++) {
        ur_zarr_chunk_stream_close(r.slots[i].s);
    }
    ur_free(r.slots);
    for (int i = 0; i < r.n_parked; i++) {
        if (r.parked[i].used) {
            dispose_bufs(r.parked[i].enc, r.parked[i].cap_enc);
            ur_free(r.parked[i].ix);
        }
    }
    ur_free(r.parked);
    for (int i = 0; i < r.n_spare; i++) {
        dispose_bufs(r.spares[i].enc, r.spares[i].cap_enc);
        ur_free(r.spares[i].ix);
    }
    ur_free(r.spares);
    ur_free(workers);
    ur_free(tids);
    for (size_t i = 0; i < r.n_tasks; i++) {
        /* Output arrays belong to the writer; only the input handles are ours. */
        ur_zarr_array_close(r.tasks[i].src);
        ur_free(r.tasks[i].dst);
    }
    ur_free(r.tasks);
    pthread_cond_destroy(&r.turn);
    pthread_mutex_destroy(&r.lock);
    return rc;
}
