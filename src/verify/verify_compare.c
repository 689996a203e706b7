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

/* The buffers of one thread: a piece of an input chunk, an output box, what it must hold,
 * and a strided row of the input. */
typedef struct {
    ur_buf bi, bo, bg, be;
} boxes;

/* A queued group. A group of one (most of them) keeps its member, names and result here; a
 * larger one has them in `many` (members, then results, then names: one allocation). */
typedef struct {
    int done;
    ur_vcmp_group g;
    ur_vcmp_member one;
    char oname[1024];
    char src[1200];
    ur_vcmp_result res1;
    ur_vcmp_result *res;
    void *many;
    uint64_t decoded;
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
    uint64_t decoded;     /* input chunks decoded by the jobs handed back */
    uint64_t piece_bytes; /* see choose_piece */
    pthread_t *tids;
    int n_tids;
    boxes mine; /* the submitting thread's */
};

static void boxes_init(boxes *b)
{
    ur_buf_init(&b->bi, 0);
    ur_buf_init(&b->bo, 0);
    ur_buf_init(&b->bg, 0);
    ur_buf_init(&b->be, 0);
}

static void boxes_dispose(boxes *b)
{
    ur_buf_dispose(&b->bi);
    ur_buf_dispose(&b->bo);
    ur_buf_dispose(&b->bg);
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

/* Where output element gi falls in output-chunk order: its chunk (C order over the grid)
 * and its place in that chunk's part inside the array (C order). */
static void place_of(const ur_zarr_info *io, const uint64_t *gi, uint64_t at[2])
{
    uint64_t q = 0, e = 0;
    for (int d = 0; d < io->rank; d++) {
        uint64_t qd = gi[d] / io->chunk_shape[d], lo = qd * io->chunk_shape[d];
        uint64_t n = io->shape[d] - lo < io->chunk_shape[d] ? io->shape[d] - lo
                                                            : io->chunk_shape[d];
        q = q * io->grid[d] + qd;
        e = e * n + (gi[d] - lo);
    }
    at[0] = q;
    at[1] = e;
}

static int before(const uint64_t *a, const uint64_t *b)
{
    return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]);
}

/* The elements of the output box [start, start+count) that differ from what the input says,
 * into res: counted, and the first UR_VCMP_VALUE_ISSUES in output-chunk order kept. */
static void note_differences(const ur_vcmp_member *m, ur_dtype want, const ur_zarr_info *io,
                             ur_vcmp_result *res, const unsigned char *exp,
                             const unsigned char *got, uint64_t nel, size_t osz,
                             const uint64_t *start, const uint64_t *count)
{
    for (uint64_t e = 0; e < nel; e++) {
        uint64_t gi[UR_MAX_RANK], r2 = e, at[2];
        ur_verify_issue *is;
        int k;
        if (memcmp(exp + e * osz, got + e * osz, osz) == 0) {
            continue;
        }
        res->elements_bad++;
        res->bad_leaf = 1;
        for (int d = io->rank - 1; d >= 0; d--) {
            gi[d] = start[d] + r2 % count[d];
            r2 /= count[d];
        }
        place_of(io, gi, at);
        k = res->n_value;
        if (k == UR_VCMP_VALUE_ISSUES) {
            if (!before(at, res->at[k - 1])) {
                continue;
            }
            k--; /* the last one kept is found to come after this one */
        } else {
            res->n_value++;
        }
        for (; k > 0 && before(at, res->at[k - 1]); k--) {
            res->value[k] = res->value[k - 1];
            memcpy(res->at[k], res->at[k - 1], sizeof at);
        }
        memcpy(res->at[k], at, sizeof at);
        is = &res->value[k];
        memset(is, 0, sizeof *is);
        is->kind = UR_VERIFY_VALUE;
        snprintf(is->leaf, sizeof is->leaf, "%s", m->oname);
        snprintf(is->source, sizeof is->source, "%s", m->src);
        is->rank = io->rank;
        memcpy(is->index, gi, (size_t)io->rank * sizeof gi[0]);
        format_value(is->expected, sizeof is->expected, want, exp + e * osz);
        format_value(is->got, sizeof is->got, want, got + e * osz);
    }
}

/* What the output box (count[0..rank), C order) must hold, into dst: the input's elements
 * in the decoded piece (the box's first at element `base`, stride[k] elements between
 * neighbours on box axis k) cast to `want`, row by row; a strided row is gathered into
 * `row` first (its last axis is not the input's last). */
static int expected_values(unsigned char *dst, ur_dtype want, const unsigned char *piece,
                           ur_dtype have, ur_buf *row, uint64_t base, int rank,
                           const uint64_t *count, const uint64_t *stride, ur_err *err)
{
    uint64_t pos[UR_MAX_RANK] = {0};
    uint64_t inner = rank > 0 ? count[rank - 1] : 1, s = rank > 0 ? stride[rank - 1] : 1;
    size_t isz = ur_dtype_size(have), osz = ur_dtype_size(want);
    int rc;

    if (rank < 0 || rank > UR_MAX_RANK) {
        return ur_err_set(err, UR_EINTERNAL, "rank %d", rank);
    }
    if (s != 1) {
        ur_buf_reset(row);
        if ((rc = ur_buf_reserve(row, (size_t)inner * isz, err)) < 0) {
            return rc;
        }
    }
    for (;;) {
        const unsigned char *src;
        uint64_t off = base;
        int k;
        for (k = 0; k + 1 < rank; k++) {
            off += pos[k] * stride[k];
        }
        src = piece + off * isz;
        if (s != 1) {
            for (uint64_t e = 0; e < inner; e++) {
                memcpy(row->data + e * isz, piece + (off + e * s) * isz, isz);
            }
            src = row->data;
        }
        if (want == have) {
            memcpy(dst, src, (size_t)inner * isz);
        } else if ((rc = ur_tensor_cast_dense(dst, want, src, have, (size_t)inner, err)) < 0) {
            return rc;
        }
        dst += inner * osz;
        for (k = rank - 2; k >= 0 && ++pos[k] == count[k]; k--) {
            pos[k] = 0;
        }
        if (k < 0) {
            return UR_OK;
        }
    }
}

/* The arrays must be what the leaves' metadata said when the pair was made. */
static int check_member(const ur_vcmp_group *g, const ur_vcmp_member *m, const ur_zarr_info *ii,
                        const ur_zarr_info *io, ur_err *err)
{
    int ok = ii->dtype == g->i->dtype && io->dtype == g->want && m->nfix >= 0 &&
             m->nfix <= UR_VCMP_MAX_FIX && io->rank + m->nfix == ii->rank;
    for (int d = 0, k = 0, f = 0; ok && d < ii->rank; d++) {
        if (f < m->nfix && d == m->fax[f]) {
            ok = m->fidx[f] >= 0 && (uint64_t)m->fidx[f] < ii->shape[d];
            f++;
        } else {
            ok = io->shape[k++] == ii->shape[d];
        }
    }
    if (!ok) {
        return ur_err_set(err, UR_ECORRUPT,
                          "the arrays' zarr metadata (dtype %s, rank %d; input %s, rank %d) do "
                          "not fit the slice the checkpoint metadata named",
                          ur_dtype_name(io->dtype), io->rank, ur_dtype_name(ii->dtype), ii->rank);
    }
    return UR_OK;
}

static int member_in_chunk(const ur_vcmp_member *m, const uint64_t *cs, const uint64_t *cc)
{
    for (int f = 0; f < m->nfix; f++) {
        uint64_t x = (uint64_t)m->fidx[f];
        int d = m->fax[f];
        if (x < cs[d] || x >= cs[d] + cc[d]) {
            return 0;
        }
    }
    return 1;
}

/* Member m against its part of a piece of an input chunk: the box [bs, bs+bc) of the
 * input, decoded into bx->bi in a buffer of shape bshape (the piece's full shape, its first
 * element at bs), one output chunk of that part at a time. When the output's chunks split
 * the pieces (as unroll writes them: see choose_piece), each output chunk is read once over
 * the whole group; one that straddles pieces is read once per piece it meets. */
static int compare_in_piece(boxes *bx, const ur_vcmp_group *g, const ur_vcmp_member *m,
                            ur_zarr_array *ao, int irank, const uint64_t *bshape,
                            const uint64_t *bs, const uint64_t *bc, ur_vcmp_result *res,
                            ur_err *err)
{
    const ur_zarr_info *io = ur_zarr_array_info(ao);
    size_t osz = ur_dtype_size(g->want);
    uint64_t st[UR_MAX_RANK] = {0}, rs[UR_MAX_RANK] = {0}, re[UR_MAX_RANK] = {0};
    uint64_t q0[UR_MAX_RANK] = {0}, nq[UR_MAX_RANK] = {0}, ostride[UR_MAX_RANK] = {0};
    uint64_t base = 0, total = 1, s = 1;
    int rc;

    for (int d = irank - 1; d >= 0; d--) {
        st[d] = s; /* the buffer's strides, in elements */
        s *= bshape[d];
    }
    for (int d = 0, k = 0, f = 0; d < irank; d++) {
        if (f < m->nfix && d == m->fax[f]) {
            base += ((uint64_t)m->fidx[f] - bs[d]) * st[d];
            f++;
            continue;
        }
        rs[k] = bs[d];
        re[k] = bs[d] + bc[d];
        q0[k] = rs[k] / io->chunk_shape[k];
        nq[k] = (re[k] - 1) / io->chunk_shape[k] + 1 - q0[k];
        ostride[k] = st[d];
        total *= nq[k];
        k++;
    }
    for (uint64_t t = 0; t < total; t++) {
        uint64_t start[UR_MAX_RANK] = {0}, count[UR_MAX_RANK] = {0}, qidx[UR_MAX_RANK] = {0};
        uint64_t rem = t, nel = 1, off = base;
        size_t bytes_o;
        const unsigned char *exp;
        int whole = 1; /* the box is a whole output chunk inside the array */
        for (int k = io->rank - 1; k >= 0; k--) {
            uint64_t lo, hi;
            qidx[k] = q0[k] + rem % nq[k];
            rem /= nq[k];
            lo = qidx[k] * io->chunk_shape[k];
            hi = lo + io->chunk_shape[k];
            whole &= lo >= rs[k] && hi <= re[k];
            lo = lo > rs[k] ? lo : rs[k];
            hi = hi < re[k] ? hi : re[k];
            start[k] = lo;
            count[k] = hi - lo;
            nel *= count[k];
            off += (lo - rs[k]) * ostride[k];
        }
        if (ur_ckd_mul(&bytes_o, (size_t)nel, osz)) {
            return ur_err_set(err, UR_ECORRUPT, "chunk size overflows");
        }
        ur_buf_reset(&bx->bo);
        ur_buf_reset(&bx->be);
        if ((rc = ur_buf_reserve(&bx->bo, bytes_o, err)) < 0 ||
            (rc = ur_buf_reserve(&bx->be, bytes_o, err)) < 0) {
            return rc;
        }
        /* a whole chunk is decoded in place; a part goes through read_box's chunk buffer */
        rc = whole ? ur_zarr_array_read_chunk(ao, qidx, bx->bo.data, err)
                   : ur_zarr_array_read_box(ao, start, count, bx->bo.data, err);
        if (rc == UR_OK) {
            rc = expected_values(bx->be.data, g->want, bx->bi.data, g->i->dtype, &bx->bg, off,
                                 io->rank, count, ostride, err);
        }
        if (rc < 0) {
            return rc;
        }
        exp = bx->be.data;
        res->elements += nel;
        if (memcmp(exp, bx->bo.data, bytes_o) != 0) {
            note_differences(m, g->want, io, res, exp, bx->bo.data, nel, osz, start, count);
        }
    }
    return UR_OK;
}

/* How an input chunk is read: in pieces of its decoded stream (C order), each `e` indices
 * on axis k, the whole chunk on the axes after k and one index on those before (k -1: the
 * whole chunk, rank 0). As large as piece_bytes allows, but never cutting an output chunk
 * of a member (members in[m] != 0) where it can be helped: the outer axes are cut only where every
 * output chunk is one index thick, axis k at multiples of the largest output chunk. */
static void choose_piece(const ur_vcmp_group *g, ur_zarr_array *const *ao, const uint8_t *in,
                         const ur_zarr_info *ii, uint64_t piece_bytes, int *k_out, uint64_t *e_out)
{
    uint64_t u[UR_MAX_RANK] = {0}, tail[UR_MAX_RANK + 1] = {0}, budget, row;
    int k;

    if (ii->rank == 0) {
        *k_out = -1;
        *e_out = 1;
        return;
    }
    for (int d = 0; d < ii->rank; d++) {
        u[d] = 1;
    }
    for (size_t m = 0; m < g->n; m++) {
        const ur_zarr_info *io = ur_zarr_array_info(ao[m]);
        if (!in[m]) {
            continue;
        }
        for (int d = 0, j = 0, f = 0; d < ii->rank; d++) {
            if (f < g->m[m].nfix && d == g->m[m].fax[f]) {
                f++;
            } else {
                uint64_t c = io->chunk_shape[j] < io->shape[j] ? io->chunk_shape[j] : io->shape[j];
                u[d] = c > u[d] ? c : u[d];
                j++;
            }
        }
    }
    tail[ii->rank] = 1;
    for (int d = ii->rank - 1; d >= 0; d--) {
        tail[d] = tail[d + 1] * ii->chunk_shape[d]; /* <= the chunk's elements */
    }
    budget = piece_bytes / ur_dtype_size(ii->dtype);
    budget = budget ? budget : 1;
    for (k = 0; k + 1 < ii->rank && u[k] == 1 && tail[k + 1] > budget; k++) {
        /* the rows of axis k are still too large, and it can be cut anywhere */
    }
    if (u[k] > ii->chunk_shape[k]) {
        u[k] = ii->chunk_shape[k];
    }
    u[k] = u[k] ? u[k] : 1;
    row = tail[k + 1] ? tail[k + 1] : 1; /* chunk_shape entries are >= 1 */
    *k_out = k;
    *e_out = budget / row / u[k] * u[k];
    if (*e_out < u[k]) {
        *e_out = u[k]; /* an output chunk is larger than the budget */
    }
    if (*e_out > ii->chunk_shape[k]) {
        *e_out = ii->chunk_shape[k];
    }
}

/* Compare the members in[m] != 0 against input chunk idx (box cs, cc inside the array),
 * decoded once, piece by piece (choose_piece). */
static int compare_chunk(ur_vcmp *c, boxes *bx, const ur_vcmp_group *g, ur_zarr_array *ai,
                         ur_zarr_array *const *ao, const uint8_t *in, const uint64_t *idx,
                         const uint64_t *cs, const uint64_t *cc, ur_vcmp_result *res, size_t *who,
                         ur_err *err)
{
    const ur_zarr_info *ii = ur_zarr_array_info(ai);
    ur_zarr_chunk_stream *s = NULL;
    uint64_t bshape[UR_MAX_RANK], pos[UR_MAX_RANK] = {0}, e;
    size_t isz = ur_dtype_size(ii->dtype), bytes;
    int k, rc, whole;

    choose_piece(g, ao, in, ii, c->piece_bytes, &k, &e);
    whole = k <= 0 && e == (k < 0 ? 1 : ii->chunk_shape[0]);
    /* one piece: decoded in one call (a stream's set-up costs more than a small chunk) */
    rc = whole ? UR_OK : ur_zarr_chunk_stream_open(&s, ai, idx, err);
    for (;;) {
        uint64_t bs[UR_MAX_RANK] = {0}, bc[UR_MAX_RANK] = {0}, n = 1;
        int inside = 1;
        if (rc < 0) {
            break;
        }
        /* the piece at pos: its full shape (in the stream) and its box inside the array */
        for (int d = 0; d < ii->rank; d++) {
            uint64_t ext = d < k ? 1
                           : d == k
                               ? (ii->chunk_shape[d] - pos[d] < e ? ii->chunk_shape[d] - pos[d]
                                                                  : e)
                               : ii->chunk_shape[d];
            bshape[d] = ext;
            n *= ext;
            bs[d] = cs[d] + pos[d];
            inside &= pos[d] < cc[d];
            bc[d] = cc[d] - (inside ? pos[d] : 0);
            bc[d] = bc[d] < ext ? bc[d] : ext;
        }
        bytes = (size_t)n * isz; /* <= chunk_bytes */
        ur_buf_reset(&bx->bi);
        rc = ur_buf_reserve(&bx->bi, bytes, err);
        if (rc == UR_OK) {
            rc = whole ? ur_zarr_array_read_chunk(ai, idx, bx->bi.data, err)
                       : ur_zarr_chunk_stream_read(s, bx->bi.data, bytes, err);
        }
        for (size_t m = 0; rc == UR_OK && inside && m < g->n; m++) {
            if (in[m] && member_in_chunk(&g->m[m], bs, bc)) {
                *who = m;
                rc = compare_in_piece(bx, g, &g->m[m], ao[m], ii->rank, bshape, bs, bc, &res[m],
                                      err);
            }
        }
        /* the next piece: axis k by e, then the axes before it one by one */
        if (rc < 0 || k < 0) {
            break;
        }
        pos[k] += e;
        for (int d = k; d > 0 && pos[d] >= ii->chunk_shape[d]; d--) {
            pos[d] = 0;
            pos[d - 1]++;
        }
        if (pos[0] >= ii->chunk_shape[0]) {
            break;
        }
    }
    ur_zarr_chunk_stream_close(s);
    return rc;
}

/* Compare a group input chunk by input chunk: each chunk that some member takes a slice of
 * is decoded once, and every such member compared against it (*decoded: the chunks). */
static int compare_group(ur_vcmp *c, boxes *bx, const ur_vcmp_group *g, ur_vcmp_result *res,
                         uint64_t *decoded, ur_err *err)
{
    ur_zarr_array *ai = NULL, *one = NULL, **ao;
    uint8_t one_in = 0, *in;
    const ur_zarr_info *ii;
    size_t who = 0; /* the member an error is reported for */
    int rc = UR_OK;

    *decoded = 0;
    memset(res, 0, g->n * sizeof *res);
    ao = g->n > 1 ? ur_calloc(g->n, sizeof *ao) : &one;
    in = g->n > 1 ? ur_calloc(g->n, 1) : &one_in;
    if (ao == NULL || in == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    for (size_t k = 0; rc == UR_OK && k < g->n; k++) {
        who = k;
        rc = ur_orbax_ckpt_open_array(c->out, g->m[k].o, &ao[k], err);
    }
    if (rc == UR_OK) {
        who = 0;
        rc = ur_orbax_ckpt_open_array(c->in, g->i, &ai, err);
    }
    if (rc < 0) {
        goto out;
    }
    ii = ur_zarr_array_info(ai);
    for (size_t k = 0; rc == UR_OK && k < g->n; k++) {
        who = k;
        rc = check_member(g, &g->m[k], ii, ur_zarr_array_info(ao[k]), err);
    }
    for (uint64_t ch = 0; rc == UR_OK && ch < ii->chunk_count; ch++) {
        uint64_t idx[UR_MAX_RANK] = {0}, cs[UR_MAX_RANK] = {0}, cc[UR_MAX_RANK] = {0}, rem = ch;
        size_t first = g->n;
        for (int d = ii->rank - 1; d >= 0; d--) {
            idx[d] = rem % ii->grid[d];
            rem /= ii->grid[d];
            cs[d] = idx[d] * ii->chunk_shape[d];
            cc[d] = ii->shape[d] - cs[d] < ii->chunk_shape[d] ? ii->shape[d] - cs[d]
                                                              : ii->chunk_shape[d];
        }
        for (size_t k = 0; k < g->n; k++) {
            in[k] = (uint8_t)member_in_chunk(&g->m[k], cs, cc);
            first = in[k] && first == g->n ? k : first;
        }
        if (first == g->n) {
            continue; /* no member takes a slice of it */
        }
        who = first;
        rc = compare_chunk(c, bx, g, ai, ao, in, idx, cs, cc, res, &who, err);
        (*decoded)++;
    }
out:
    if (ao != NULL) {
        for (size_t k = 0; k < g->n; k++) {
            ur_zarr_array_close(ao[k]);
        }
        if (ao != &one) {
            ur_free(ao);
        }
    }
    if (in != &one_in) {
        ur_free(in);
    }
    ur_zarr_array_close(ai);
    if (rc < 0) {
        ur_err_wrap(err, "verify '%s'", g->n > 0 ? g->m[who].oname : "");
    }
    return rc;
}

/* Copy group g into job j (names included). */
static int job_fill(job *j, const ur_vcmp_group *g, ur_err *err)
{
    size_t names = 0, bytes, at;
    ur_vcmp_member *mm;
    char *p;

    j->g = *g;
    j->many = NULL;
    j->decoded = 0;
    j->rc = UR_OK;
    if (g->n == 1) {
        j->one = g->m[0];
        snprintf(j->oname, sizeof j->oname, "%s", g->m[0].oname);
        snprintf(j->src, sizeof j->src, "%s", g->m[0].src);
        j->one.oname = j->oname;
        j->one.src = j->src;
        j->g.m = &j->one;
        j->res = &j->res1;
        return UR_OK;
    }
    for (size_t k = 0; k < g->n; k++) {
        names += strlen(g->m[k].oname) + strlen(g->m[k].src) + 2;
    }
    /* members, then results (both 8-byte aligned structs), then the names */
    if (ur_ckd_mul(&bytes, g->n, sizeof *mm + sizeof *j->res) ||
        ur_ckd_add(&bytes, bytes, names)) {
        return ur_err_set(err, UR_ENOMEM, "a group of %zu output leaves", g->n);
    }
    j->many = ur_malloc(bytes ? bytes : 1);
    if (j->many == NULL) {
        return ur_err_oom(err);
    }
    mm = j->many;
    j->res = (ur_vcmp_result *)(void *)(mm + g->n);
    p = (char *)(j->res + g->n);
    for (size_t k = 0; k < g->n; k++) {
        mm[k] = g->m[k];
        at = strlen(g->m[k].oname) + 1;
        memcpy(p, g->m[k].oname, at);
        mm[k].oname = p;
        p += at;
        at = strlen(g->m[k].src) + 1;
        memcpy(p, g->m[k].src, at);
        mm[k].src = p;
        p += at;
    }
    j->g.m = mm;
    return UR_OK;
}

static void run_job(ur_vcmp *c, boxes *bx, job *j)
{
    ur_err_clear(&j->err);
    j->rc = compare_group(c, bx, &j->g, j->res, &j->decoded, &j->err);
}

/* Apply a finished job's results, member by member, and let its storage go. */
static void apply_job(ur_vcmp *c, job *j)
{
    for (size_t k = 0; k < j->g.n; k++) {
        c->apply(c->ctx, j->g.m[k].tag, &j->res[k]);
    }
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
        c->decoded += j->decoded;
        if (!c->failed && j->rc < 0) {
            c->failed = 1;
            *err = j->err;
            rc = j->rc;
        } else if (!c->failed) {
            pthread_mutex_unlock(&c->lock);
            apply_job(c, j);
            pthread_mutex_lock(&c->lock);
        }
        ur_free(j->many);
        j->many = NULL;
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
                   uint64_t piece_bytes, ur_vcmp_apply_fn apply, void *ctx, ur_err *err)
{
    ur_vcmp *c = ur_calloc(1, sizeof *c);
    if (c == NULL) {
        return ur_err_oom(err);
    }
    c->in = in;
    c->out = out;
    c->piece_bytes = piece_bytes ? piece_bytes : UR_VCMP_PIECE_BYTES;
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

/* Run group g here and now (no helpers, or a group that runs alone). */
static int run_here(ur_vcmp *c, const ur_vcmp_group *g, ur_err *err)
{
    job j;
    int rc;
    memset(&j, 0, sizeof j);
    rc = job_fill(&j, g, err);
    if (rc == UR_OK) {
        rc = compare_group(c, &c->mine, &j.g, j.res, &j.decoded, err);
    }
    pthread_mutex_lock(&c->lock);
    c->decoded += j.decoded;
    if (rc < 0 && c->ring != NULL) {
        c->failed = 1; /* the queue is empty: no helper reads it */
    }
    pthread_mutex_unlock(&c->lock);
    if (rc == UR_OK) {
        apply_job(c, &j);
    }
    ur_free(j.many);
    return rc;
}

int ur_vcmp_submit(ur_vcmp *c, const ur_vcmp_group *g, ur_err *err)
{
    job *j;
    int rc;
    if (g->n == 0) {
        return UR_OK;
    }
    if (c->ring != NULL && g->exclusive) {
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
    if (c->ring == NULL || g->exclusive) {
        return run_here(c, g, err);
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
        rc = job_fill(j, g, err);
    }
    if (rc == UR_OK) {
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

uint64_t ur_vcmp_chunks_decoded(ur_vcmp *c)
{
    uint64_t n;
    pthread_mutex_lock(&c->lock);
    n = c->decoded;
    pthread_mutex_unlock(&c->lock);
    return n;
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
    if (c->ring != NULL) {
        for (int i = 0; i < QUEUE; i++) {
            ur_free(c->ring[i].many); /* jobs never handed back (after a failure) */
        }
    }
    ur_free(c->ring);
    ur_free(c->tids);
    ur_free(c);
}
