/* The export as an output sink (unroll/sink.h): the shard files are made at their full size
 * when the sink opens (their headers, hence every tensor's place, are known from the plan), and
 * each chunk the executor makes is rearranged into its tensor's layout, given the tensor's
 * arithmetic and dtype, and written at its place from the worker's own thread. Nothing is
 * held but the chunk being placed; write_chunk has nothing left to do. */
#include "hf_plan.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <stdatomic.h>
#include <string.h>

typedef struct {
    ur_hf_plan *p;
    ur_st_file **files;
    _Atomic uint64_t *written; /* per tensor: bytes placed */
    void *written_block;       /* its allocation */
} hf_sink;

struct ur_sink_array {
    size_t param;  /* SIZE_MAX: a leaf the export leaves out */
    int rank;
    uint64_t shape[UR_MAX_RANK];
    uint64_t chunk[UR_MAX_RANK];
};

static int s_reserve(void *self, size_t n, ur_err *err)
{
    (void)self;
    (void)n;
    (void)err;
    return UR_OK;
}

/* The export has no place for the conversion's step and empty entries. */
static int s_add_scalar(void *self, const ur_sink_path *path, ur_dtype dtype, const void *value,
                        ur_err *err)
{
    (void)self;
    (void)path;
    (void)dtype;
    (void)value;
    (void)err;
    return UR_OK;
}

static int s_add_empty(void *self, const ur_sink_path *path, ur_sink_empty kind, ur_err *err)
{
    (void)self;
    (void)path;
    (void)kind;
    (void)err;
    return UR_OK;
}

static int s_begin_array(void *self, const ur_sink_path *path, ur_dtype dtype, int rank,
                         const uint64_t *shape, const uint64_t *chunk_shape, ur_sink_array **out,
                         ur_err *err)
{
    hf_sink *s = self;
    char *key = hf_sink_path(path->comp, path->len);
    ur_sink_array *a = ur_calloc(1, sizeof *a);
    size_t at = SIZE_MAX;
    if (key == NULL || a == NULL) {
        ur_free(key);
        ur_free(a);
        return ur_err_oom(err);
    }
    a->param = SIZE_MAX;
    if (ur_strmap_get(&s->p->by_sink_path, key, strlen(key), &at) == 1) {
        const hf_param *q = &s->p->params[at];
        int same = q->rank == rank && q->dtype == dtype;
        for (int d = 0; d < rank && same; d++) {
            same = q->shape[d] == shape[d];
        }
        if (!same) {
            ur_free(a);
            ur_free(key);
            return ur_err_set(err, UR_EINTERNAL,
                              "Hugging Face export: '%s' is not the array "
                              "the plan described",
                              q->path);
        }
        a->param = at;
    }
    ur_free(key);
    a->rank = rank;
    memcpy(a->shape, shape, (size_t)rank * sizeof *shape);
    memcpy(a->chunk, chunk_shape, (size_t)rank * sizeof *chunk_shape);
    *out = a;
    return UR_OK;
}

/* Runs shorter than this go through a mapping of the span they fall in (a system call each
 * would cost more than the bytes: a transposed kernel cut along its input axis gives rows of
 * a few hundred bytes); longer ones are written with pwrite. Measured (bench/README.md, "The
 * Hugging Face export"): 128-byte runs 2 KiB apart, 8.8 s of system time with pwrite, 4.3 s
 * mapped; 1.5 KiB runs 6 KiB apart, 5 GiB cold, 65 s with pwrite, 52 s mapped. */
#define SMALL_RUN_BYTES ((size_t)64 << 10)

/* A box whose elements land apart (an interleaved part: every n-th element of the tensor's
 * last axis), stored through a mapping of its span by the strided-copy kernel: only its own
 * elements are written, so another thread may place the other parts at the same time. Where
 * the file could not be mapped, element by element. */
static int write_strided(ur_st_file *f, const hf_tensor *t, const ur_rearrange_box_map *m,
                         const uint8_t *box, ur_err *err)
{
    size_t item = ur_dtype_size(t->dtype);
    uint64_t last = 0, idx[UR_MAX_RANK] = {0};
    ur_fs_map view;
    ur_tensor_view src, dst;
    int rc;

    for (int d = 0; d < m->rank; d++) {
        last += (m->shape[d] - 1) * (uint64_t)m->dst_stride[d];
    }
    memset(&view, 0, sizeof view);
    rc = ur_st_file_map(f, t->offset + m->offset * item, (size_t)((last + 1) * item), &view, err);
    if (rc == UR_OK && view.data != NULL) {
        rc = ur_tensor_view_init_dense(&src, t->dtype, m->rank, m->shape, (void *)(uintptr_t)box,
                                       err);
        dst = src;
        dst.data = (void *)(uintptr_t)view.data;
        memcpy(dst.strides, m->dst_stride, sizeof m->dst_stride);
        if (rc == UR_OK) {
            rc = ur_tensor_copy(&dst, &src, err);
        }
        ur_fs_unmap(&view);
        return rc;
    }
    for (size_t at = 0; rc == UR_OK; at += item) {
        uint64_t elem = 0;
        int d = m->rank - 1;
        for (int k = 0; k < m->rank; k++) {
            elem += idx[k] * (uint64_t)m->dst_stride[k];
        }
        rc = ur_st_file_write(f, t->offset + (m->offset + elem) * item, box + at, item, err);
        while (d >= 0 && ++idx[d] == m->shape[d]) {
            idx[d--] = 0;
        }
        if (d < 0) {
            break;
        }
    }
    return rc;
}

/* The placed box's bytes (dense, in the map's order, `item` bytes an element) written to the
 * file: runs of the map's trailing dimensions that are contiguous in the tensor. */
static int write_runs(ur_st_file *f, const hf_tensor *t, const ur_rearrange_box_map *m,
                      const uint8_t *box, size_t item, ur_err *err)
{
    int j = m->rank - 1;
    uint64_t run = m->rank > 0 ? m->shape[m->rank - 1] : 1, idx[UR_MAX_RANK] = {0}, last = 0;
    uint64_t n_runs = 1;
    size_t at = 0;
    ur_fs_map view;
    int rc = UR_OK;

    while (j > 0 && (uint64_t)m->dst_stride[j - 1] == m->shape[j] * (uint64_t)m->dst_stride[j]) {
        j--;
        run *= m->shape[j];
    }
    if (m->rank == 0) {
        j = 0;
    }
    for (int d = 0; d < j; d++) {
        n_runs *= m->shape[d];
        last += (m->shape[d] - 1) * (uint64_t)m->dst_stride[d];
    }
    memset(&view, 0, sizeof view);
    if (n_runs > 1 && run * item < SMALL_RUN_BYTES) {
        /* the span from the first run to the end of the last */
        rc = ur_st_file_map(f, t->offset + m->offset * item, (size_t)((last + run) * item), &view,
                            err);
    }
    for (; rc == UR_OK;) {
        uint64_t elem = 0;
        for (int d = 0; d < j; d++) {
            elem += idx[d] * (uint64_t)m->dst_stride[d];
        }
        if (view.data != NULL) {
            memcpy((uint8_t *)(uintptr_t)view.data + elem * item, box + at, (size_t)(run * item));
        } else {
            rc = ur_st_file_write(f, t->offset + (m->offset + elem) * item, box + at,
                                  (size_t)(run * item), err);
        }
        at += (size_t)(run * item);
        int d = j - 1;
        while (d >= 0 && ++idx[d] == m->shape[d]) {
            idx[d--] = 0;
        }
        if (d < 0) {
            break;
        }
    }
    ur_fs_unmap(&view);
    return rc;
}

/* Elements of the part of a box placed at once (its buffers are this size, whatever the
 * chunk's). */
#define PIECE_BYTES ((size_t)4 << 20)

/* Place one piece: the sub-box m (src: the raw chunk at src_at elements) rearranged and cast
 * into a dense buffer, its arithmetic applied, written in runs. The cast comes first, as in
 * MaxText's exporter (its checkpoint is restored in weight_dtype, then its hooks compute in
 * float32 and round back), so the bytes are its bytes whatever the two dtypes. */
static int place(const hf_sink *s, const hf_tensor *t, const ur_rearrange_box_map *m,
                 const void *raw, uint64_t src_at, uint8_t *box, ur_err *err)
{
    ur_tensor_view src, dst;
    uint64_t n = 1;
    int rc;

    for (int d = 0; d < m->rank; d++) {
        n *= m->shape[d];
    }
    memset(&src, 0, sizeof src);
    src.dtype = t->in_dtype;
    src.rank = m->rank;
    src.data = (void *)((uintptr_t)raw + src_at * ur_dtype_size(t->in_dtype));
    memcpy(src.shape, m->shape, sizeof m->shape);
    memcpy(src.strides, m->src_stride, sizeof m->src_stride);
    rc = ur_tensor_view_init_dense(&dst, t->dtype, m->rank, m->shape, box, err);
    if (rc == UR_OK) {
        rc = ur_tensor_copy(&dst, &src, err);
    }
    if (rc == UR_OK && t->op != UR_TENSOR_OP_NONE) {
        rc = ur_tensor_apply(box, t->dtype, (size_t)n, t->op, t->op_value, err);
    }
    if (rc == UR_OK && m->rank > 0 && m->dst_stride[m->rank - 1] != 1) {
        return write_strided(s->files[t->shard], t, m, box, err);
    }
    return rc == UR_OK ? write_runs(s->files[t->shard], t, m, box, ur_dtype_size(t->dtype), err)
                       : rc;
}

/* The box start/count of a parameter's chunk (dense in buf, of shape buf_shape: rank axes)
 * placed in tensor ti. */
static int place_box(hf_sink *s, size_t ti, int rank, const uint64_t *start, const uint64_t *count,
                     const uint64_t *buf_shape, const void *raw, ur_err *err)
{
    const hf_tensor *t = &s->p->t[ti];
    uint64_t n = 1, inner = 1, at[UR_MAX_RANK] = {0};
    ur_rearrange_box_map m, piece;
    uint8_t *box;
    int rc, k;

    for (int d = 0; d < rank; d++) {
        n *= count[d];
    }
    if (n == 0) {
        return UR_OK;
    }
    rc = ur_rearrange_box(&t->re, start, count, buf_shape, &m, err);
    if (rc == UR_OK && t->parts > 1) {
        rc = ur_rearrange_box_join(&m, t->inner, t->run, t->at, err);
    }
    if (rc < 0) {
        return ur_err_wrap(err, "tensor %s", t->name);
    }
    n = 1; /* the box's elements the tensor keeps (a piece keeps its range of them) */
    for (int d = 0; d < m.rank; d++) {
        n *= m.shape[d];
    }
    if (n == 0) {
        return UR_OK;
    }
    /* pieces: the trailing dimensions that fit PIECE_BYTES, one piece per index of the rest */
    k = m.rank;
    while (k > 0 && inner * m.shape[k - 1] * ur_dtype_size(t->dtype) <= PIECE_BYTES) {
        inner *= m.shape[--k];
    }
    box = ur_malloc((size_t)inner * ur_dtype_size(t->dtype) + 1);
    rc = box != NULL ? UR_OK : ur_err_oom(err);
    piece = m;
    piece.rank = m.rank - k;
    memmove(piece.shape, m.shape + k, (size_t)piece.rank * sizeof m.shape[0]);
    memmove(piece.src_stride, m.src_stride + k, (size_t)piece.rank * sizeof m.src_stride[0]);
    memmove(piece.dst_stride, m.dst_stride + k, (size_t)piece.rank * sizeof m.dst_stride[0]);
    while (rc == UR_OK) {
        uint64_t src_at = m.src_offset;
        piece.offset = m.offset;
        for (int d = 0; d < k; d++) {
            src_at += at[d] * (uint64_t)m.src_stride[d];
            piece.offset += at[d] * (uint64_t)m.dst_stride[d];
        }
        rc = place(s, t, &piece, raw, src_at, box, err);
        int d = k - 1;
        while (d >= 0 && ++at[d] == m.shape[d]) {
            at[d--] = 0;
        }
        if (d < 0) {
            break;
        }
    }
    if (rc == UR_OK) {
        atomic_fetch_add(&s->written[ti], n * ur_dtype_size(t->dtype));
    } else {
        ur_err_wrap(err, "tensor %s", t->name);
    }
    ur_free(box);
    return rc;
}

/* A chunk of a parameter split by experts: each expert's slice of it (the chunk less its
 * axis 0, dense at e * the slice's elements) placed in that expert's tensor. */
static int place_experts(hf_sink *s, const hf_param *q, const ur_sink_array *a,
                         const uint64_t *start, const uint64_t *count, const void *raw,
                         ur_err *err)
{
    uint64_t slice = ur_dtype_size(q->dtype);
    int rc = UR_OK;
    for (int d = 1; d < a->rank; d++) {
        slice *= a->chunk[d];
    }
    for (uint64_t e = 0; e < count[0] && rc == UR_OK; e++) {
        const void *at = (const uint8_t *)raw + e * slice;
        rc = place_box(s, q->experts[start[0] + e], a->rank - 1, start + 1, count + 1,
                       a->chunk + 1, at, err);
    }
    return rc;
}

static int s_encode_chunk(void *self, ur_sink_array *a, const uint64_t *idx, const void *raw,
                          ur_buf *out, ur_err *err)
{
    hf_sink *s = self;
    const hf_param *q;
    uint64_t start[UR_MAX_RANK], count[UR_MAX_RANK];
    uint64_t keep;

    (void)out;
    if (a->param == SIZE_MAX) {
        return UR_OK; /* left out */
    }
    q = &s->p->params[a->param];
    keep = q->experts == NULL ? s->p->t[q->tensor[0]].keep : 0;
    for (int d = 0; d < a->rank; d++) {
        /* rows past those kept (a vocabulary MaxText padded) are left out */
        uint64_t end = d == 0 && keep > 0 ? keep : a->shape[d];
        start[d] = idx[d] * a->chunk[d];
        count[d] = start[d] >= end                ? 0
                   : end - start[d] < a->chunk[d] ? end - start[d]
                                                  : a->chunk[d];
    }
    if (q->experts != NULL) {
        return place_experts(s, q, a, start, count, raw, err);
    }
    int rc = UR_OK;
    for (int k = 0; k < q->n_tensors && rc == UR_OK; k++) {
        rc = place_box(s, q->tensor[k], a->rank, start, count, a->chunk, raw, err);
    }
    return rc;
}

static int s_write_chunk(void *self, ur_sink_array *a, const uint64_t *idx, const void *enc,
                         size_t len, ur_err *err)
{
    (void)self;
    (void)a;
    (void)idx;
    (void)enc;
    (void)len;
    (void)err;
    return UR_OK; /* placed by encode_chunk */
}

static int s_finish_array(void *self, ur_sink_array *a, ur_err *err)
{
    (void)self;
    (void)err;
    ur_free(a);
    return UR_OK;
}

static void s_drop_array(void *self, ur_sink_array *a)
{
    (void)self;
    ur_free(a);
}

static void sink_free(hf_sink *s)
{
    ur_free(s->files);
    ur_free(s->written_block);
    ur_free(s);
}

static void s_abort(void *self)
{
    hf_sink *s = self;
    for (size_t i = 0; i < s->p->n_shards; i++) {
        ur_st_file_abort(s->files[i]);
    }
    sink_free(s);
}

/* Every tensor placed whole, then the files made durable. */
static int s_finish(void *self, ur_err *err)
{
    hf_sink *s = self;
    int rc = UR_OK;
    for (size_t i = 0; i < s->p->n && rc == UR_OK; i++) {
        uint64_t got = atomic_load(&s->written[i]);
        if (got != s->p->t[i].placed) {
            rc = ur_err_set(
                err, UR_EINTERNAL, "Hugging Face export: tensor %s has %llu of its %llu bytes",
                s->p->t[i].name, (unsigned long long)got, (unsigned long long)s->p->t[i].placed);
        }
    }
    for (size_t i = 0; i < s->p->n_shards; i++) {
        if (rc == UR_OK) {
            rc = ur_st_file_finish(s->files[i], err);
        } else {
            ur_st_file_abort(s->files[i]);
        }
        s->files[i] = NULL;
    }
    sink_free(s);
    return rc;
}

static const ur_sink_ops hf_sink_ops = {
    s_reserve,     s_add_scalar,   s_add_empty,  s_begin_array, s_encode_chunk,
    s_write_chunk, s_finish_array, s_drop_array, s_finish,      s_abort,
};

int ur_hf_sink_open(ur_sink *out, ur_hf_plan *p, const char *dir, ur_err *err)
{
    hf_sink *s = ur_calloc(1, sizeof *s);
    int rc = s != NULL ? UR_OK : ur_err_oom(err);
    if (rc == UR_OK) {
        s->p = p;
        s->files = ur_calloc(p->n_shards ? p->n_shards : 1, sizeof *s->files);
        s->written_block = ur_calloc(p->n ? p->n : 1, sizeof *s->written);
        s->written = s->written_block;
        rc = s->files != NULL && s->written != NULL ? UR_OK : ur_err_oom(err);
    }
    for (size_t i = 0; i < p->n_shards && rc == UR_OK; i++) {
        char *path = ur_path_join(dir, p->shards[i].file);
        rc = path != NULL ? ur_st_file_create(&s->files[i], path, &p->shards[i].layout, err)
                          : ur_err_oom(err);
        ur_free(path);
    }
    if (rc < 0) {
        if (s != NULL && s->files != NULL) {
            for (size_t i = 0; i < p->n_shards; i++) {
                ur_st_file_abort(s->files[i]);
            }
        }
        if (s != NULL) {
            sink_free(s);
        }
        return rc;
    }
    out->ops = &hf_sink_ops;
    out->self = s;
    return UR_OK;
}
