/* The strided copy kernel: a loop nest over src in its memory order whose innermost loop is
 * one run of a per-dtype-pair kernel (tensor_cast.c).
 *
 * Building the nest: dims of size 1 are dropped; the rest are ordered by decreasing |src
 * stride| (src is read in memory order, which for the dense chunks the streaming code passes
 * is sequential); then neighbours that are contiguous in both src and dst are merged, so a
 * dense-to-dense copy is one run and an unstack of a dense [A, L, B] chunk on axis 1 is A * L
 * runs of B elements. When the innermost dim has unit steps on both sides the dense run
 * (memcpy or a vectorized cast) is used. The unstack's split axis stays a dim of its own: at
 * that dim the loop moves to the next destination view instead of stepping a dst pointer. */
#include "unroll/tensor.h"

#include "unroll/ckd.h"

#include "tensor_impl.h"

static uint64_t abs64(int64_t v)
{
    return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

/* Byte stride = elements * size, and the span (n - 1) * |stride| must fit int64: views with
 * such strides cannot describe real memory. */
static int byte_stride(int64_t *out, int64_t elems, uint64_t n, size_t size, ur_err *err)
{
    int64_t b;
    uint64_t span;

    if (__builtin_mul_overflow(elems, (int64_t)size, &b) || ur_ckd_mul64(&span, abs64(b), n - 1) ||
        span > (uint64_t)INT64_MAX) {
        return ur_err_set(err, UR_EINVAL, "tensor: stride %lld x %llu elements overflows",
                          (long long)elems, (unsigned long long)n);
    }
    *out = b;
    return UR_OK;
}

/* outer == inner * n, without overflow. */
static int contiguous(int64_t outer, int64_t inner, uint64_t n)
{
    int64_t p;

    return n <= (uint64_t)INT64_MAX && !__builtin_mul_overflow(inner, (int64_t)n, &p) &&
           p == outer;
}

/* Ordering key: outer dims first. Larger |src stride| is outer; on a tie (broadcast src, or
 * equal strides) larger |dst stride| is outer; otherwise the original order is kept. */
static int goes_before(const ur_tensor__loop *lp, int a, int b)
{
    uint64_t sa = abs64(lp->ss[a]), sb = abs64(lp->ss[b]);
    uint64_t da = a == lp->split ? 0 : abs64(lp->ds[a]);
    uint64_t db = b == lp->split ? 0 : abs64(lp->ds[b]);

    if (sa != sb) {
        return sa > sb;
    }
    return da > db;
}

int ur_tensor__loop_build(ur_tensor__loop *lp, int *empty, const ur_tensor_view *dst,
                          const ur_tensor_view *src, int axis, const ur_tensor__kernel *k,
                          ur_err *err)
{
    ur_tensor__loop t;
    uint64_t numel, sspan = 0, dspan = 0;
    int order[UR_MAX_RANK];
    int nd = 0;
    int rc;

    rc = ur_tensor_view_numel(&numel, src, err);
    if (rc < 0) {
        return rc;
    }
    *empty = numel == 0;
    if (numel == 0) {
        return UR_OK;
    }
    t.split = -1;
    for (int d = 0, o = 0; d < src->rank; d++) {
        int is_split = d == axis;
        int od = is_split ? -1 : o++;

        if (src->shape[d] == 1) {
            continue;
        }
        t.n[nd] = src->shape[d];
        rc = byte_stride(&t.ss[nd], src->strides[d], src->shape[d], k->ssize, err);
        if (rc < 0) {
            return rc;
        }
        if (is_split) {
            t.ds[nd] = 0;
            t.split = nd;
        } else {
            rc = byte_stride(&t.ds[nd], dst->strides[od], src->shape[d], k->dsize, err);
            if (rc < 0) {
                return rc;
            }
        }
        /* The offsets the loop reaches on each side must fit ptrdiff_t. */
        if (ur_ckd_add64(&sspan, sspan, abs64(t.ss[nd]) * (t.n[nd] - 1)) ||
            ur_ckd_add64(&dspan, dspan, abs64(t.ds[nd]) * (t.n[nd] - 1)) ||
            sspan > (uint64_t)PTRDIFF_MAX || dspan > (uint64_t)PTRDIFF_MAX) {
            return ur_err_set(err, UR_EINVAL, "tensor: view spans overflow at dim %d", d);
        }
        nd++;
    }
    /* Insertion sort of at most UR_MAX_RANK dims; stable. */
    for (int i = 0; i < nd; i++) {
        int j = i;

        while (j > 0 && goes_before(&t, i, order[j - 1])) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    /* Emit in order, merging each dim into the previous (outer) one when the pair is
     * contiguous on both sides: outer stride == inner stride * inner size. */
    lp->nd = 0;
    lp->split = -1;
    for (int i = 0; i < nd; i++) {
        int d = order[i];
        int m = lp->nd - 1;

        if (m >= 0 && d != t.split && m != lp->split && contiguous(lp->ss[m], t.ss[d], t.n[d]) &&
            contiguous(lp->ds[m], t.ds[d], t.n[d])) {
            /* Fits: n[m] * n[d] <= numel, and the new strides are the inner ones. */
            lp->n[m] *= t.n[d];
            lp->ss[m] = t.ss[d];
            lp->ds[m] = t.ds[d];
            continue;
        }
        lp->n[lp->nd] = t.n[d];
        lp->ss[lp->nd] = t.ss[d];
        lp->ds[lp->nd] = t.ds[d];
        if (d == t.split) {
            lp->split = lp->nd;
        }
        lp->nd++;
    }
    /* The innermost dim must step a dst pointer: if it is the split dim (or there are no
     * dims at all: one element), add a unit dim inside it. */
    if (lp->nd == 0 || lp->split == lp->nd - 1) {
        lp->n[lp->nd] = 1;
        lp->ss[lp->nd] = (int64_t)k->ssize;
        lp->ds[lp->nd] = (int64_t)k->dsize;
        lp->nd++;
    }
    return UR_OK;
}

void ur_tensor__loop_run(const ur_tensor__loop *lp, const ur_tensor__kernel *k,
                         const ur_tensor_view *dsts, const void *src)
{
    uint64_t idx[UR_MAX_RANK + 1] = {0};
    const int in = lp->nd - 1;
    const size_t run_n = (size_t)lp->n[in];
    const ptrdiff_t run_ss = (ptrdiff_t)lp->ss[in];
    const ptrdiff_t run_ds = (ptrdiff_t)lp->ds[in];
    const ur_tensor__run_fn fn = run_ss == (ptrdiff_t)k->ssize && run_ds == (ptrdiff_t)k->dsize
                                     ? k->dense
                                     : k->strided;
    const char *s = (const char *)src;
    ptrdiff_t doff = 0;
    size_t sel = 0;

    for (;;) {
        int d;

        fn((char *)dsts[sel].data + doff, run_ds, s, run_ss, run_n);
        for (d = in - 1; d >= 0; d--) {
            if (++idx[d] < lp->n[d]) {
                s += lp->ss[d];
                if (d == lp->split) {
                    sel++;
                } else {
                    doff += (ptrdiff_t)lp->ds[d];
                }
                break;
            }
            idx[d] = 0;
            s -= lp->ss[d] * (int64_t)(lp->n[d] - 1);
            if (d == lp->split) {
                sel = 0;
            } else {
                doff -= (ptrdiff_t)lp->ds[d] * (ptrdiff_t)(lp->n[d] - 1);
            }
        }
        if (d < 0) {
            return;
        }
    }
}

int ur_tensor_copy(const ur_tensor_view *dst, const ur_tensor_view *src, ur_err *err)
{
    ur_tensor__kernel k = {0};
    ur_tensor__loop lp;
    int empty;
    int rc;

    rc = ur_tensor__check_view(dst, "copy dst", err);
    if (rc < 0) {
        return rc;
    }
    rc = ur_tensor__check_view(src, "copy src", err);
    if (rc < 0) {
        return rc;
    }
    if (dst->rank != src->rank) {
        return ur_err_set(err, UR_EINVAL, "tensor: copy rank %d into rank %d", src->rank,
                          dst->rank);
    }
    for (int d = 0; d < src->rank; d++) {
        if (dst->shape[d] != src->shape[d]) {
            return ur_err_set(err, UR_EINVAL, "tensor: copy dim %d: %llu into %llu", d,
                              (unsigned long long)src->shape[d],
                              (unsigned long long)dst->shape[d]);
        }
    }
    rc = ur_tensor__kernel_get(&k, dst->dtype, src->dtype, err);
    if (rc < 0) {
        return rc;
    }
    rc = ur_tensor__loop_build(&lp, &empty, dst, src, -1, &k, err);
    if (rc < 0 || empty) {
        return rc;
    }
    ur_tensor__loop_run(&lp, &k, dst, src->data);
    return UR_OK;
}
