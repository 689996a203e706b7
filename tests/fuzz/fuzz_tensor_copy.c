/* Differential fuzz target for the tensor kernels: ur_tensor_copy and ur_tensor_unstack against
 * the naive index-by-index reference of tests/unit/tensor/tensor_ref.h, a part placed
 * among others joined into one tensor (ur_rearrange_box_join, then ur_tensor_copy) against
 * the position arithmetic done by hand, and a box of a tensor whose rearrangement keeps a
 * range of one axis (ur_rearrange_box with "[lo:hi]") against the element-wise reference.
 *
 * Input bytes, in order: op (copy / unstack / unsupported pair / join: the axis byte gives the
 * parts, the position, the axis joined on and the gap after the last part / cut: the axis byte
 * the axis cut and the order), rank, axis, dtype pair, one
 * byte per dim for the shape, layout modes, 8 bytes seeding the layout details (permutation,
 * padding, negative and broadcast strides, byte offsets), then the source element bytes
 * (cycled). Any difference, including a write outside the destination views, aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/tensor/tensor_ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_bytes;

static unsigned fz_u8(fz_bytes *b)
{
    unsigned v = 0;
    if (b->n > 0) {
        v = *b->p++;
        b->n--;
    }
    return v;
}

static void fz_fill(ref_layout *l, const fz_bytes *b)
{
    for (size_t i = 0; i < l->size; i++) {
        l->buf[i] = b->n ? b->p[i % b->n] : (uint8_t)(i * 131u + 7u);
    }
}

static void fz_check(int cond)
{
    if (!cond) {
        abort();
    }
}

static void fz_copy(fz_bytes *b, int rank, const uint64_t *shape, ur_dtype ddt, ur_dtype sdt,
                    int dmode, int smode, ref_rng *r, int expect_ok)
{
    ref_layout src, dst, want;
    ref_rng twin;
    int rc;

    ref_layout_make(&src, r, sdt, rank, shape, smode, 1);
    twin = *r;
    ref_layout_make(&dst, r, ddt, rank, shape, dmode, 0);
    ref_layout_make(&want, &twin, ddt, rank, shape, dmode, 0);
    fz_fill(&src, b);
    rc = ur_tensor_copy(&dst.v, &src.v, NULL);
    if (expect_ok) {
        fz_check(rc == UR_OK);
        ref_copy(&want.v, &src.v);
    } else {
        fz_check(rc == UR_EUNSUPPORTED);
    }
    fz_check(memcmp(dst.buf, want.buf, dst.size) == 0);
    ref_layout_free(&src);
    ref_layout_free(&dst);
    ref_layout_free(&want);
}

static void fz_unstack(fz_bytes *b, int rank, int axis, const uint64_t *shape, ur_dtype ddt,
                       ur_dtype sdt, int dmode, int smode, int own, ref_rng *r)
{
    enum { MAXN = 16 };
    uint64_t dshape[UR_MAX_RANK];
    ref_layout src, got[MAXN], want[MAXN];
    ur_tensor_view dv[MAXN], wv[MAXN];
    size_t n = (size_t)shape[axis];
    ref_rng twin;
    int rc;

    for (int d = 0, o = 0; d < rank; d++) {
        if (d != axis) {
            dshape[o++] = shape[d];
        }
    }
    ref_layout_make(&src, r, sdt, rank, shape, smode, 1);
    fz_fill(&src, b);
    for (size_t i = 0; i < n; i++) {
        /* own: a layout per destination; else one layout repeated in separate buffers. */
        ref_rng lay = *r;
        twin = *r;
        ref_layout_make(&got[i], &lay, ddt, rank - 1, dshape, dmode, 0);
        ref_layout_make(&want[i], &twin, ddt, rank - 1, dshape, dmode, 0);
        if (own || i + 1 == n) {
            *r = lay;
        }
        dv[i] = got[i].v;
        wv[i] = want[i].v;
    }
    rc = ur_tensor_unstack(dv, n, &src.v, axis, NULL);
    fz_check(rc == UR_OK);
    for (size_t i = 0; i < n; i++) {
        ur_tensor_view slice;
        fz_check(ur_tensor_view_take(&slice, &src.v, axis, i, NULL) == UR_OK);
        ref_copy(&wv[i], &slice);
        fz_check(memcmp(got[i].buf, want[i].buf, got[i].size) == 0);
        ref_layout_free(&got[i]);
        ref_layout_free(&want[i]);
    }
    ref_layout_free(&src);
}

/* src (any layout) placed as part k of n joined into a dense tensor whose other bytes hold a
 * sentinel, concatenated along axis a (inner: the part's elements from axis a on) or
 * interleaved along the last (a = rank: inner 1), each run of the joined tensor `gap` elements
 * longer than the n parts' (another part of a different size after them): element x of the
 * part lands on (x / inner) * run + k * inner + x % inner, nothing else is written. */
static void fz_join(fz_bytes *b, int rank, const uint64_t *shape, ur_dtype dt, int smode,
                    unsigned byte, ref_rng *r)
{
    uint32_t n = 1 + byte % 4, k = (byte >> 2) % n;
    int a = (int)((byte >> 4) % (unsigned)(rank + 1));
    size_t item = ur_dtype_size(dt);
    uint64_t count = ref_numel(rank, shape), idx[UR_MAX_RANK] = {0};
    uint64_t inner = ref_numel(rank - a, shape + a) > 0 ? ref_numel(rank - a, shape + a) : 1;
    uint64_t run = n * inner + (byte >> 6), total = count / inner * run;
    ref_layout src;
    ur_rearrange_box_map m;
    ur_tensor_view dst;
    uint8_t *full = malloc(total * item + 1);
    int64_t s = 1;

    fz_check(full != NULL);
    memset(full, 0xA5, total * item + 1);
    ref_layout_make(&src, r, dt, rank, shape, smode, 1);
    fz_fill(&src, b);
    memset(&m, 0, sizeof m);
    m.rank = rank;
    for (int d = rank - 1; d >= 0; d--) {
        m.shape[d] = shape[d];
        m.src_stride[d] = src.v.strides[d];
        m.dst_stride[d] = s;
        s *= (int64_t)shape[d];
    }
    fz_check(ur_rearrange_box_join(&m, inner, run, k * inner, NULL) == UR_OK);
    dst = src.v;
    dst.data = full + m.offset * item;
    memcpy(dst.strides, m.dst_stride, sizeof m.dst_stride);
    fz_check(ur_tensor_copy(&dst, &src.v, NULL) == UR_OK);
    for (uint64_t x = 0; x < total; x++) {
        if (x % run / inner != k || x % run >= n * inner) {
            for (size_t i = 0; i < item; i++) {
                fz_check(full[x * item + i] == 0xA5);
            }
        }
    }
    for (uint64_t x = 0; count > 0; x++) {
        const uint8_t *want = (const uint8_t *)src.v.data +
                              ref_offset(&src.v, idx) * (int64_t)item;
        uint64_t y = x / inner * run + k * inner + x % inner;
        fz_check(memcmp(full + y * item, want, item) == 0);
        if (!ref_next_index(idx, rank, shape)) {
            break;
        }
    }
    fz_check(full[total * item] == 0xA5);
    ref_layout_free(&src);
    free(full);
}

/* A box of a tensor of `shape` (its elements from the input bytes) placed through a
 * rearrangement that keeps the range [lo, hi) of axis `ax` and keeps the axes in order or
 * reverses them: every element of the box in the range lands where the element-wise reference
 * puts it, and nothing else is written. */
static void fz_cut(fz_bytes *b, int rank, const uint64_t *shape, unsigned byte)
{
    static const char *const names[UR_MAX_RANK] = {"a", "b", "c", "d", "f", "g"};
    int ax = (int)(byte % (unsigned)rank), reversed = (int)(byte >> 3 & 1);
    uint64_t lo = fz_u8(b) % shape[ax], hi = lo + 1 + fz_u8(b) % (shape[ax] - lo);
    uint64_t start[UR_MAX_RANK], count[UR_MAX_RANK], out_shape[UR_MAX_RANK], idx[UR_MAX_RANK];
    uint64_t n_box, n_out;
    char pattern[160];
    size_t at = 0;
    ur_rearrange re;
    ur_rearrange_box_map m;
    ur_tensor_view src, dst;
    float *box, *out;

    for (int d = 0; d < rank; d++) {
        at += (size_t)snprintf(pattern + at, sizeof pattern - at, "%s ", names[d]);
    }
    at += (size_t)snprintf(pattern + at, sizeof pattern - at, "->");
    for (int j = 0; j < rank; j++) {
        int d = reversed ? rank - 1 - j : j;
        at += (size_t)snprintf(pattern + at, sizeof pattern - at, " %s", names[d]);
        if (d == ax) {
            at += (size_t)snprintf(pattern + at, sizeof pattern - at, "[%llu:%llu]",
                                   (unsigned long long)lo, (unsigned long long)hi);
        }
        out_shape[j] = d == ax ? hi - lo : shape[d];
    }
    fz_check(ur_rearrange_parse(&re, pattern, rank, shape, NULL) == UR_OK);
    for (int d = 0; d < rank; d++) {
        start[d] = fz_u8(b) % shape[d];
        count[d] = 1 + fz_u8(b) % (shape[d] - start[d]);
    }
    n_box = ref_numel(rank, count);
    n_out = ref_numel(rank, out_shape);
    box = malloc(n_box * sizeof *box);
    out = malloc((n_out + 1) * sizeof *out);
    fz_check(box != NULL && out != NULL);
    for (uint64_t i = 0; i < n_box; i++) {
        box[i] = (float)(i + 1);
    }
    for (uint64_t i = 0; i <= n_out; i++) {
        out[i] = -1.0f;
    }
    fz_check(ur_rearrange_box(&re, start, count, count, &m, NULL) == UR_OK);
    memset(&src, 0, sizeof src);
    src.dtype = UR_DT_FLOAT32;
    src.rank = m.rank;
    memcpy(src.shape, m.shape, sizeof m.shape);
    memcpy(src.strides, m.src_stride, sizeof m.src_stride);
    src.data = box + m.src_offset;
    dst = src;
    memcpy(dst.strides, m.dst_stride, sizeof m.dst_stride);
    dst.data = out + m.offset;
    if (ref_numel(m.rank, m.shape) > 0) {
        fz_check(ur_tensor_copy(&dst, &src, NULL) == UR_OK);
    }
    /* each box element: in the range, at its reference place; the rest untouched */
    uint64_t placed = 0;
    memset(idx, 0, sizeof idx);
    for (uint64_t i = 0; i < n_box; i++) {
        uint64_t in = start[ax] + idx[ax], lin = 0;
        if (in >= lo && in < hi) {
            for (int j = 0; j < rank; j++) {
                int d = reversed ? rank - 1 - j : j;
                lin = lin * out_shape[j] + (d == ax ? in - lo : start[d] + idx[d]);
            }
            fz_check(out[lin] == box[i]);
            placed++;
        }
        ref_next_index(idx, rank, count);
    }
    for (uint64_t i = 0; i <= n_out; i++) {
        placed -= out[i] >= 0.0f;
    }
    fz_check(placed == 0);
    (void)b;
    free(box);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes b = {data, size};
    uint64_t shape[UR_MAX_RANK] = {0};
    unsigned op = fz_u8(&b) % 5;
    int rank = (int)(fz_u8(&b) % 7);
    unsigned axis_byte = fz_u8(&b);
    unsigned pair = fz_u8(&b);
    ur_dtype sdt, ddt;
    unsigned modes;
    ref_rng r = {0};
    int axis;

    if ((op == 1 || op == 3 || op == 4) && rank == 0) {
        rank = 1;
    }
    axis = rank > 0 ? (int)(axis_byte % (unsigned)rank) : 0;
    if (pair & 0x80) {
        sdt = ref_cast_srcs[(pair & 0x7f) % 3];
        ddt = UR_DT_BFLOAT16;
    } else {
        sdt = (ur_dtype)(1 + pair % (UR_DT_COUNT_ - 1));
        ddt = sdt;
    }
    for (int d = 0; d < rank; d++) {
        shape[d] = fz_u8(&b) % 9; /* 0 .. 8, so empty views too */
    }
    if (op == 1) {
        shape[axis] = shape[axis] % 16;
    }
    if (ref_numel(rank, shape) > 4096 || (op == 4 && ref_numel(rank, shape) == 0)) {
        return 0;
    }
    modes = fz_u8(&b);
    for (int i = 0; i < 8; i++) {
        r.s = r.s << 8 | fz_u8(&b);
    }
    if (op == 0) {
        fz_copy(&b, rank, shape, ddt, sdt, (int)(modes & 1), (int)(modes >> 1 & 1), &r, 1);
    } else if (op == 1) {
        fz_unstack(&b, rank, axis, shape, ddt, sdt, (int)(modes & 1), (int)(modes >> 1 & 1),
                   (int)(modes >> 2 & 1), &r);
    } else if (op == 3) {
        fz_join(&b, rank, shape, sdt, (int)(modes >> 1 & 1), axis_byte, &r);
    } else if (op == 4) {
        fz_cut(&b, rank, shape, axis_byte);
    } else if (sdt != UR_DT_FLOAT16) {
        /* float16 <- anything but float16 is never supported: the kernel must refuse it and
         * leave dst alone. */
        fz_copy(&b, rank, shape, UR_DT_FLOAT16, sdt, (int)(modes & 1), (int)(modes >> 1 & 1), &r,
                0);
    }
    return 0;
}
