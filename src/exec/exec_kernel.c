/* The executor's kernels: cutting a leaf into items, and casting or splitting an item into
 * encoded output chunks (see exec_kernel.h). */
#include "exec_kernel.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/phase.h"

#include <string.h>

void ur_kern_describe(const ur_kern_task *t, uint64_t rel, ur_kern_item *it)
{
    const ur_zarr_info *in = &t->info;
    uint64_t c, s;
    uint64_t pos[UR_MAX_RANK + 1];

    memset(it, 0, sizeof *it);
    it->t = t;
    it->rel = rel;
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

static int ensure_enc(ur_kern_out *o, size_t n, ur_err *err)
{
    if (n > o->cap_enc) {
        size_t had = o->cap_enc;
        ur_buf *e = ur_grow_to(o->enc, &o->cap_enc, n, sizeof *e);
        if (e == NULL) {
            return ur_err_oom(err);
        }
        for (size_t i = had; i < n; i++) {
            ur_buf_init(&e[i], 0);
        }
        o->enc = e;
    }
    for (size_t i = 0; i < n; i++) {
        ur_buf_reset(&o->enc[i]);
    }
    o->n_enc = n;
    return UR_OK;
}

static int ensure_size(ur_buf *b, size_t n, ur_err *err)
{
    ur_buf_reset(b);
    return ur_buf_reserve(b, n, err);
}

static int ensure_ix(ur_kern_out *o, size_t n, ur_err *err)
{
    /* NULL also when ix is NULL and n is 0 (ur_grow_to gives items back) */
    size_t *ix = ur_grow_to(o->ix, &o->cap_ix, n, sizeof *ix);
    if (ix == NULL && n > 0) {
        return ur_err_oom(err);
    }
    o->ix = ix;
    return UR_OK;
}

static int encode(const ur_sink *sink, ur_sink_array *dst, const ur_kern_item *it, const void *raw,
                  ur_buf *out, ur_err *err)
{
    uint64_t idx[UR_MAX_RANK];
    ur_phase_mark m;
    int rc;
    if (dst == NULL) {
        out->len = 0; /* a discarded slice (an UNSTACK output with an empty path): not written */
        return UR_OK;
    }
    ur_kern_out_index(it, idx);
    ur_phase_begin(&m);
    rc = sink->ops->encode_chunk(sink->self, dst, idx, raw, out, err);
    ur_phase_end(UR_PHASE_ENCODE, &m);
    return rc;
}

/* ---- decoding and splitting in one pass ----------------------------------------------------
 * A whole chunk of a cast (COPY) or of a single layer axis (UNSTACK) is split while it is
 * decoded: each time the decoder reports more final bytes, the complete rows among them
 * (indices of axis 0; single elements for a cast) are cast or split at once, while they are
 * still in the CPU's caches, instead of reading the whole decoded chunk back from memory
 * afterwards. The result is the same as splitting it whole. */
typedef struct {
    ur_kern_worker *wk;
    const ur_kern_task *t;
    ur_tensor_view src;  /* UNSTACK: the chunk, layers past the array's edge cut off */
    uint64_t layers;     /* UNSTACK: output chunks (layers in the chunk) */
    uint64_t rows;       /* rows to process */
    size_t row_bytes;    /* decoded bytes per row */
    uint64_t done;       /* rows processed */
} fused;

int ur_kern_fusable(const ur_kern_item *it)
{
    const ur_kern_task *t = it->t;
    if (t->slabs_per_chunk != 1 || it->beyond_edge || t->info.rank == 0) {
        return 0;
    }
    return t->axis < 0 ? t->act->out_dtype != t->info.dtype : t->n_axes == 1;
}

static int ensure_views(ur_kern_worker *wk, size_t n, ur_err *err)
{
    ur_tensor_view *v = ur_grow_to(wk->views, &wk->cap_views, n, sizeof *v);
    if (v == NULL && n > 0) {
        return ur_err_oom(err);
    }
    wk->views = v;
    return UR_OK;
}

/* Set up the output buffers and views for a fused split of item `it`. */
static int fused_prepare(ur_kern_worker *wk, const ur_kern_item *it, ur_kern_out *o, fused *f,
                         ur_err *err)
{
    const ur_kern_task *t = it->t;
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
        rc = ensure_ix(o, (size_t)f->layers, err);
    }
    if (rc == UR_OK) {
        rc = ensure_views(wk, 2 * (size_t)f->layers, err);
    }
    for (uint64_t j = 0; rc == UR_OK && j < f->layers; j++) {
        rc = ur_tensor_view_init_dense(&wk->views[j], t->act->out_dtype, t->out_rank,
                                       t->out_chunk_shape, wk->out.data + j * t->out_chunk_bytes,
                                       err);
        o->ix[j] = (size_t)(it->global[a] + j);
    }
    return rc;
}

/* Cast or split rows [r0, r1). */
static int fused_rows(fused *f, uint64_t r0, uint64_t r1, ur_err *err)
{
    const ur_kern_task *t = f->t;
    ur_kern_worker *wk = f->wk;
    uint64_t start[UR_MAX_RANK] = {0}, count[UR_MAX_RANK];
    ur_tensor_view part, *sub = wk->views + f->layers;
    int a = t->axis, rc;

    if (a < 0) {
        size_t isz = ur_dtype_size(t->info.dtype), osz = ur_dtype_size(t->act->out_dtype);
        return ur_tensor_cast_dense(wk->out.data + r0 * osz, t->act->out_dtype,
                                    wk->in.data + r0 * isz, t->info.dtype, (size_t)(r1 - r0), err);
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
        ur_phase_mark m;
        ur_phase_begin(&m);
        rc = fused_rows(f, f->done, r, err);
        ur_phase_end(UR_PHASE_CAST_FUSED, &m);
        f->done = r;
    }
    return rc;
}

/* Read and split a fusable item; its *n_chunks output chunks are then ready to encode. */
static int read_fused(ur_kern_worker *wk, const ur_kern_item *it, ur_kern_out *o, size_t *n_chunks,
                      ur_err *err)
{
    fused f;
    int rc = ensure_size(&wk->in, it->t->slab_bytes, err);
    if (rc == UR_OK) {
        rc = fused_prepare(wk, it, o, &f, err);
    }
    if (rc == UR_OK) {
        ur_phase_mark m;
        ur_phase_begin(&m);
        rc = ur_zarr_array_read_chunk_progressive(it->t->src, it->idx, wk->in.data, fused_ready,
                                                  &f, err);
        ur_phase_end(UR_PHASE_READ, &m);
    }
    if (rc == UR_OK && f.done != f.rows) {
        rc = ur_err_set(err, UR_EINTERNAL, "split %llu of %llu rows", (unsigned long long)f.done,
                        (unsigned long long)f.rows);
    }
    *n_chunks = it->t->axis < 0 ? 1 : (size_t)f.layers;
    return rc;
}

/* Encode the n output chunks of a fused item. */
static int encode_fused(const ur_kern_worker *wk, const ur_kern_item *it, const ur_sink *sink,
                        ur_kern_out *o, size_t n, ur_err *err)
{
    const ur_kern_task *t = it->t;
    int rc = ensure_enc(o, n, err);
    if (rc == UR_OK && t->axis < 0) { /* a cast: the one chunk goes to every output */
        rc = ensure_ix(o, t->act->n_out, err);
        for (size_t i = 0; rc == UR_OK && i < t->act->n_out; i++) {
            o->ix[i] = i;
        }
    }
    for (size_t k = 0; rc == UR_OK && k < n; k++) {
        rc = encode(sink, t->dst[t->axis < 0 ? 0 : o->ix[k]], it,
                    wk->out.data + k * t->out_chunk_bytes, &o->enc[k], err);
    }
    o->n_out = t->axis < 0 ? t->act->n_out : n;
    return rc;
}

/* COPY or REPLICATE: one output chunk (the slab, cast), written to every output array. */
static int produce_copy(ur_kern_worker *wk, const ur_kern_item *it, const ur_sink *sink,
                        ur_kern_out *o, ur_err *err)
{
    const ur_kern_task *t = it->t;
    const ur_zarr_info *in = &t->info;
    ur_dtype out_dt = t->act->out_dtype;
    const void *bytes = wk->in.data;
    int rc;

    if (out_dt != in->dtype) {
        rc = ensure_size(&wk->out, t->out_chunk_bytes, err);
        if (rc == UR_OK) {
            ur_phase_mark m;
            ur_phase_begin(&m);
            rc = ur_tensor_cast_dense(wk->out.data, out_dt, wk->in.data, in->dtype,
                                      t->slab_bytes / ur_dtype_size(in->dtype), err);
            ur_phase_end(UR_PHASE_CAST, &m);
        }
        if (rc < 0) {
            return rc;
        }
        bytes = wk->out.data;
    }
    rc = ensure_enc(o, 1, err);
    if (rc == UR_OK) {
        rc = ensure_ix(o, t->act->n_out, err);
    }
    if (rc == UR_OK) {
        rc = encode(sink, t->dst[0], it, bytes, &o->enc[0], err);
    }
    for (size_t i = 0; rc == UR_OK && i < t->act->n_out; i++) {
        o->ix[i] = i;
    }
    o->n_out = t->act->n_out;
    return rc;
}

/* UNSTACK: split the slab along its layer axes. The last layer axis is split by the kernel
 * in one pass; the other ones (pipeline stacks) are fixed one index tuple at a time. Output
 * chunk k of this item goes to output array o->ix[k]. */
static int produce_unstack(ur_kern_worker *wk, const ur_kern_item *it, const ur_sink *sink,
                           ur_kern_out *o, ur_err *err)
{
    const ur_kern_task *t = it->t;
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
        rc = ensure_enc(o, (size_t)total, err);
    }
    if (rc == UR_OK) {
        rc = ensure_ix(o, (size_t)total, err);
    }
    if (rc == UR_OK && c[n_ax - 1] > 64) {
        dsts = ur_malloc((size_t)c[n_ax - 1] * sizeof *dsts);
        if (dsts == NULL) {
            rc = ur_err_oom(err);
        }
    }
    for (uint64_t q = 0; rc == UR_OK && q < n_outer; q++) {
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
            size_t k = (size_t)(q * c[n_ax - 1] + j);
            rc = ur_tensor_view_init_dense(&dsts[j], t->act->out_dtype, t->out_rank,
                                           t->out_chunk_shape,
                                           wk->out.data + k * t->out_chunk_bytes, err);
            o->ix[k] = (size_t)(base + g[n_ax - 1] + j);
        }
        if (rc == UR_OK) {
            ur_phase_mark m;
            ur_phase_begin(&m);
            rc = ur_tensor_unstack(dsts, (size_t)c[n_ax - 1], &v, last - (n_ax - 1), err);
            ur_phase_end(UR_PHASE_CAST, &m);
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
        rc = encode(sink, t->dst[o->ix[k]], it, wk->out.data + k * t->out_chunk_bytes, &o->enc[k],
                    err);
    }
    o->n_out = (size_t)total;
    return rc;
}

int ur_kern_produce(ur_kern_worker *wk, const ur_kern_item *it, const ur_sink *sink,
                    ur_kern_out *o, ur_err *err)
{
    if (it->beyond_edge) {
        o->n_out = 0;
        return UR_OK;
    }
    return it->t->axis < 0 ? produce_copy(wk, it, sink, o, err)
                           : produce_unstack(wk, it, sink, o, err);
}

int ur_kern_fused(ur_kern_worker *wk, const ur_kern_item *it, const ur_sink *sink, ur_kern_out *o,
                  ur_err *err)
{
    size_t n_chunks = 0;
    int rc = read_fused(wk, it, o, &n_chunks, err);
    return rc == UR_OK ? encode_fused(wk, it, sink, o, n_chunks, err) : rc;
}

int ur_kern_in_buffer(ur_kern_worker *wk, const ur_kern_task *t, ur_err *err)
{
    return ensure_size(&wk->in, t->slab_bytes, err);
}

void ur_kern_out_index(const ur_kern_item *it, uint64_t *out_idx)
{
    const ur_kern_task *t = it->t;
    int k = 0;
    for (int d = 0; d < t->info.rank; d++) {
        if (!t->is_layer_axis[d]) {
            out_idx[k++] = it->global[d] / t->slab_shape[d];
        }
    }
}

static void dispose_bufs(ur_buf *enc, size_t cap)
{
    for (size_t j = 0; j < cap; j++) {
        ur_buf_dispose(&enc[j]);
    }
    ur_free(enc);
}

void ur_kern_worker_dispose(ur_kern_worker *wk)
{
    ur_buf_dispose(&wk->in);
    ur_buf_dispose(&wk->out);
    ur_free(wk->views);
}

void ur_kern_out_dispose(ur_kern_out *o)
{
    dispose_bufs(o->enc, o->cap_enc);
    ur_free(o->ix);
}

/* Bytes a worker holds for a slab of `elems` input elements: the decoded input, the raw
 * output, the encoded output, and the encoded output of an item it parked (compression
 * rarely grows data by much). */
static uint64_t slab_cost(const ur_kern_task *t, uint64_t elems)
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
static int choose_slabs(ur_kern_task *t, uint64_t budget, ur_err *err)
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
static int layer_axes(ur_kern_task *t, ur_err *err)
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
        return ur_err_set(err, UR_ECORRUPT,
                          "the layer axes hold %llu layers, the plan expects %zu",
                          (unsigned long long)n, a->n_out);
    }
    return UR_OK;
}

int ur_kern_task_init(ur_kern_task *t, const ur_plan_action *act, const ur_zarr_info *info,
                      uint64_t budget, ur_err *err)
{
    int rc, k = 0;

    memset(t, 0, sizeof *t);
    t->act = act;
    t->info = *info;
    rc = layer_axes(t, err);
    if (rc == UR_OK) {
        rc = choose_slabs(t, budget, err);
    }
    if (rc < 0) {
        return rc;
    }
    for (int d = 0; d < info->rank; d++) {
        if (!t->is_layer_axis[d]) {
            t->out_shape[k] = info->shape[d];
            t->out_chunk_shape[k++] = t->slab_shape[d];
        }
    }
    t->out_rank = k;
    t->out_chunk_bytes = ur_dtype_size(act->out_dtype);
    for (int d = 0; d < k; d++) {
        if (ur_ckd_mul(&t->out_chunk_bytes, t->out_chunk_bytes, (size_t)t->out_chunk_shape[d])) {
            return ur_err_set(err, UR_ECORRUPT, "output chunk size overflows");
        }
    }
    if (ur_ckd_mul64(&t->n_items, info->chunk_count, t->slabs_per_chunk)) {
        return ur_err_set(err, UR_ECORRUPT, "chunk count overflows");
    }
    return UR_OK;
}
