/* Rearrangements (unroll/tensor.h): patterns read as einops reads them, and boxes of the input
 * placed where an element-by-element reference places them (each input element's output index
 * computed from its parts directly), for the Hugging Face export's patterns and random ones. */
#include "ur_test.h"

#include "unroll/tensor.h"

/* The output's linear index of the input element at `in` (multi-index), computed from the parts
 * one element at a time: the reference. */
static uint64_t ref_index(const ur_rearrange *r, const uint64_t *in)
{
    uint64_t part_idx[UR_MAX_RANK], lin = 0;
    /* split each input index into its parts, the first part outermost */
    for (int p = r->n_parts - 1; p >= 0; p--) {
        int a = r->part_axis[p];
        int last = p == r->n_parts - 1 || r->part_axis[p + 1] != a;
        static uint64_t rest[UR_MAX_RANK];
        if (last) {
            rest[a] = in[a];
        }
        part_idx[p] = rest[a] % r->part_size[p];
        rest[a] /= r->part_size[p];
    }
    for (int k = 0; k < r->n_parts; k++) {
        lin = lin * r->part_size[r->perm[k]] + part_idx[r->perm[k]];
    }
    return lin;
}

/* Where element x of a part joined in runs of `inner` at `at` of runs of `run` lands,
 * computed by hand. */
static uint64_t joined(uint64_t x, uint64_t inner, uint64_t run, uint64_t at)
{
    return (x / inner) * run + at + x % inner;
}

/* ref_index for an output keeping ranges of its parts (r->cut_lo, r->cut_len): the index in
 * that output, or UINT64_MAX when the element is left out. */
static uint64_t ref_index_cut(const ur_rearrange *r, const uint64_t *in)
{
    uint64_t part_idx[UR_MAX_RANK], rest[UR_MAX_RANK] = {0}, lin = 0;
    for (int p = r->n_parts - 1; p >= 0; p--) {
        int a = r->part_axis[p];
        if (p == r->n_parts - 1 || r->part_axis[p + 1] != a) {
            rest[a] = in[a];
        }
        part_idx[p] = rest[a] % r->part_size[p];
        rest[a] /= r->part_size[p];
    }
    for (int k = 0; k < r->n_parts; k++) {
        int i = r->perm[k];
        if (part_idx[i] < r->cut_lo[i] || part_idx[i] >= r->cut_lo[i] + r->cut_len[i]) {
            return UINT64_MAX;
        }
        lin = lin * r->cut_len[i] + (part_idx[i] - r->cut_lo[i]);
    }
    return lin;
}

/* Place the box [start, start + count) of `in` (shape) via ur_rearrange_box + ur_tensor_copy
 * into `out`, as runs of `inner` at `at` of runs of `run` (ur_rearrange_box_join; run 0: the
 * whole output), and check every kept element against the reference (ref_index_cut: an output
 * keeping ranges of its parts). */
static void place_part(const ur_rearrange *r, const float *in, const uint64_t *shape,
                       const uint64_t *start, const uint64_t *count, float *out, uint64_t inner,
                       uint64_t run, uint64_t at)
{
    int rank = r->in_rank;
    uint64_t buf_shape[UR_MAX_RANK], n = 1, idx[UR_MAX_RANK] = {0};
    ur_rearrange_box_map m;
    ur_tensor_view src, dst;
    float *box;
    for (int d = 0; d < rank; d++) {
        /* padded past the box on the last axis (by 2: a split in pairs still divides it) */
        buf_shape[d] = count[d] + (d == rank - 1 && rank > 1 ? 2 : 0);
        n *= buf_shape[d];
    }
    box = calloc(n ? n : 1, sizeof *box);
    assert_non_null(box);
    /* the box's elements at the start of a buffer of buf_shape */
    for (;;) {
        uint64_t bl = 0, il = 0;
        for (int d = 0; d < rank; d++) {
            bl = bl * buf_shape[d] + idx[d];
            il = il * shape[d] + start[d] + idx[d];
        }
        box[bl] = in[il];
        int d = rank - 1;
        while (d >= 0 && ++idx[d] == count[d]) {
            idx[d--] = 0;
        }
        if (d < 0) {
            break;
        }
    }
    assert_int_equal(ur_rearrange_box(r, start, count, buf_shape, &m, NULL), UR_OK);
    if (run > 0) {
        assert_int_equal(ur_rearrange_box_join(&m, inner, run, at, NULL), UR_OK);
    }
    memset(&src, 0, sizeof src);
    memset(&dst, 0, sizeof dst);
    src.dtype = dst.dtype = UR_DT_FLOAT32;
    src.rank = dst.rank = m.rank;
    memcpy(src.shape, m.shape, sizeof m.shape);
    memcpy(dst.shape, m.shape, sizeof m.shape);
    memcpy(src.strides, m.src_stride, sizeof m.src_stride);
    memcpy(dst.strides, m.dst_stride, sizeof m.dst_stride);
    src.data = box + m.src_offset;
    dst.data = out + m.offset;
    assert_int_equal(ur_tensor_copy(&dst, &src, NULL), UR_OK);
    memset(idx, 0, sizeof idx);
    for (;;) {
        uint64_t in_idx[UR_MAX_RANK], il = 0;
        for (int d = 0; d < rank; d++) {
            in_idx[d] = start[d] + idx[d];
            il = il * shape[d] + in_idx[d];
        }
        uint64_t x = ref_index_cut(r, in_idx);
        if (x != UINT64_MAX) {
            assert_true(out[run > 0 ? joined(x, inner, run, at) : x] == in[il]);
        }
        int d = rank - 1;
        while (d >= 0 && ++idx[d] == count[d]) {
            idx[d--] = 0;
        }
        if (d < 0) {
            break;
        }
    }
    free(box);
}

static void place_and_check(const ur_rearrange *r, const float *in, const uint64_t *shape,
                            const uint64_t *start, const uint64_t *count, float *out)
{
    place_part(r, in, shape, start, count, out, 1, 0, 0);
}

static void check_whole(const char *pattern, int rank, const uint64_t *shape, int out_rank,
                        const uint64_t *out_shape)
{
    ur_rearrange r;
    uint64_t n = 1, start[UR_MAX_RANK] = {0};
    float *in, *out;
    assert_int_equal(ur_rearrange_parse(&r, pattern, rank, shape, NULL), UR_OK);
    assert_int_equal(r.out_rank, out_rank);
    for (int d = 0; d < out_rank; d++) {
        assert_int_equal(r.out_shape[d], out_shape[d]);
    }
    for (int d = 0; d < rank; d++) {
        n *= shape[d];
    }
    in = malloc(n * sizeof *in);
    out = calloc(n, sizeof *out);
    for (uint64_t i = 0; i < n; i++) {
        in[i] = (float)i + 0.5f;
    }
    place_and_check(&r, in, shape, start, shape, out);
    free(in);
    free(out);
}

/* The export's patterns: a query kernel [emb 6, heads 3, head_dim 4] to [12, 6], with and
 * without the evens-then-odds order; out [3, 4, 6] to [6, 12]; a transpose; a copy. */
static void test_rearrange__export_patterns(void **state)
{
    const uint64_t q[3] = {6, 3, 4}, o[3] = {3, 4, 6}, w[2] = {6, 5}, v[1] = {7};
    (void)state;
    check_whole("e h d -> (h d) e", 3, q, 2, (const uint64_t[]){12, 6});
    check_whole("e h (k 2) -> (h 2 k) e", 3, q, 2, (const uint64_t[]){12, 6});
    check_whole("h d e -> e (h d)", 3, o, 2, (const uint64_t[]){6, 12});
    check_whole("e m -> m e", 2, w, 2, (const uint64_t[]){5, 6});
    check_whole("e -> e", 1, v, 1, (const uint64_t[]){7});
}

/* The evens-then-odds order by hand: HF row h*4 + p*2 + k is MaxText's [e, h, 2k + p]. */
static void test_rearrange__rope_pairs_by_hand(void **state)
{
    const uint64_t shape[3] = {1, 1, 4};
    ur_rearrange r;
    uint64_t in_idx[3] = {0, 0, 0};
    (void)state;
    assert_int_equal(ur_rearrange_parse(&r, "e h (k 2) -> (h 2 k) e", 3, shape, NULL), UR_OK);
    /* head_dim 4: MaxText's 0 1 2 3 (pairs (0,1), (2,3)) -> 0 2 1 3 */
    const uint64_t want[4] = {0, 2, 1, 3};
    for (uint64_t d = 0; d < 4; d++) {
        in_idx[2] = d;
        assert_int_equal(ref_index(&r, in_idx), want[d]);
    }
}

/* Boxes of random shapes placed one by one tile the output exactly. */
static void test_rearrange__boxes(void **state)
{
    const uint64_t shape[3] = {10, 4, 6};
    const char *const patterns[] = {"a b c -> (b c) a", "a b (k 2) -> (b 2 k) a",
                                    "a (x 2) c -> c (2 x) a", "a b c -> c a b"};
    (void)state;
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
        ur_rearrange r;
        float in[240], out[240];
        for (int i = 0; i < 240; i++) {
            in[i] = (float)i;
            out[i] = -1.0f;
        }
        assert_int_equal(ur_rearrange_parse(&r, patterns[p], 3, shape, NULL), UR_OK);
        /* chunks of 3 x 2 x 6 (edge chunks cut short on axis 0), all of the parts of axis 2 */
        for (uint64_t a = 0; a < 10; a += 3) {
            for (uint64_t b = 0; b < 4; b += 2) {
                const uint64_t start[3] = {a, b, 0};
                const uint64_t count[3] = {a + 3 <= 10 ? 3 : 10 - a, 2, 6};
                place_and_check(&r, in, shape, start, count, out);
            }
        }
        for (int i = 0; i < 240; i++) {
            assert_true(out[i] >= 0.0f); /* every output element placed */
        }
    }
}

/* Parameters joined into one tensor, interleaved along the output's last axis (gpt-oss's
 * fused gate and up: 2 parts; and 3) or concatenated along each of its axes (Gemma 4's, along
 * the rows), each placed in boxes by chunks of its own, last part first: every element of the
 * joined tensor comes from the part its position names, at the element the reference gives;
 * bad parts and strides are refused. */
static void test_rearrange__join(void **state)
{
    enum { N = 120, MAXP = 3 };
    const uint64_t shape[3] = {5, 4, 6};
    const char *const patterns[] = {"x e m -> x e m", "a b c -> c (a b)", "a b (k 2) -> (b 2 k) a",
                                    "x e m -> x m e"};
    ur_rearrange_box_map m;
    (void)state;
    for (size_t p = 0; p < sizeof patterns / sizeof patterns[0]; p++) {
        ur_rearrange r;
        assert_int_equal(ur_rearrange_parse(&r, patterns[p], 3, shape, NULL), UR_OK);
        /* axis r.out_rank: interleaved (inner 1); else concatenated along that axis */
        for (int axis = 0; axis <= r.out_rank; axis++) {
            uint64_t inner = 1;
            for (int d = axis; d < r.out_rank; d++) {
                inner *= r.out_shape[d];
            }
            for (uint32_t parts = 2; parts <= MAXP; parts++) {
                float in[MAXP][N], out[MAXP * N];
                for (int i = 0; i < MAXP * N; i++) {
                    out[i] = -1.0f;
                }
                for (uint32_t k = parts; k-- > 0;) {
                    for (int i = 0; i < N; i++) {
                        in[k][i] = (float)(k * 1000 + (uint32_t)i);
                    }
                    for (uint64_t a = 0; a < 5; a += 2) {
                        for (uint64_t b = 0; b < 4; b += 3) {
                            const uint64_t start[3] = {a, b, 0};
                            const uint64_t count[3] = {a + 2 <= 5 ? 2 : 5 - a,
                                                       b + 3 <= 4 ? 3 : 4 - b, 6};
                            place_part(&r, in[k], shape, start, count, out, inner, parts * inner,
                                       k * inner);
                        }
                    }
                }
                /* the tensor is whole: position y holds part (y / inner) % parts */
                for (uint32_t y = 0; y < parts * N; y++) {
                    assert_true(out[y] >= 0.0f);
                    assert_int_equal((uint32_t)out[y] / 1000, (y / inner) % parts);
                }
            }
        }
    }
    memset(&m, 0, sizeof m);
    assert_int_equal(ur_rearrange_box_join(&m, 1, 2, 2, NULL), UR_EINVAL);
    assert_int_equal(ur_rearrange_box_join(&m, 3, 2, 0, NULL), UR_EINVAL);
    assert_int_equal(ur_rearrange_box_join(&m, 0, 2, 0, NULL), UR_EINVAL);
    assert_int_equal(ur_rearrange_box_join(&m, 2, 5, UINT64_MAX, NULL), UR_EINVAL);
    m.rank = 1;
    m.shape[0] = 2;
    m.dst_stride[0] = 6; /* across runs of 4: not a multiple */
    assert_int_equal(ur_rearrange_box_join(&m, 4, 8, 4, NULL), UR_EINVAL);
    m.dst_stride[0] = INT64_MAX / 2;
    assert_int_equal(ur_rearrange_box_join(&m, 1, 4, 1, NULL), UR_EINVAL);
    m.shape[0] = 1; /* the stride alone would overflow */
    assert_int_equal(ur_rearrange_box_join(&m, 1, 4, 1, NULL), UR_EINVAL);
}

/* A fused kernel [emb, heads * (q + k + v)] cut into its pieces, as Qwen3.5's in_proj_qkvz:
 * each piece keeps a range of every head's block ("(4 b[lo:hi])" on the output side), and the
 * pieces of unequal sizes are joined along the rows of one tensor, in boxes that cut the heads
 * (and boxes that miss a piece's range entirely): every element of the tensor comes from the piece
 * and the element the reference names, and a piece's own layout is checked alone. */
static void test_rearrange__cut_pieces(void **state)
{
    enum { EMB = 3, HEADS = 4, Q = 2, K = 2, V = 3, B = Q + K + V, N = EMB * HEADS * B };
    const uint64_t shape[2] = {HEADS * B, EMB}; /* the kernel, fused axis first */
    const char *const pieces[3] = {"(4 b) e -> (4 b[0:2]) e", "(4 b) e -> (4 b[2:4]) e",
                                   "(4 b) e -> (4 b[4:]) e"};
    const uint64_t rows[3] = {HEADS * Q, HEADS * K, HEADS * V};
    float in[N], out[N];
    uint64_t at = 0;
    (void)state;
    for (int i = 0; i < N; i++) {
        in[i] = (float)i;
        out[i] = -1.0f;
    }
    for (int k = 0; k < 3; k++) {
        ur_rearrange r;
        assert_int_equal(ur_rearrange_parse(&r, pieces[k], 2, shape, NULL), UR_OK);
        assert_int_equal(r.out_rank, 2);
        assert_int_equal(r.out_shape[0], rows[k]);
        assert_int_equal(r.out_shape[1], EMB);
        /* boxes of one to four heads' blocks, whole rows of emb */
        for (uint64_t h = 0; h < HEADS; h += 1 + (uint64_t)k) {
            uint64_t n = h + 1 + (uint64_t)k <= HEADS ? 1 + (uint64_t)k : HEADS - h;
            const uint64_t start[2] = {h * B, 0}, count[2] = {n * B, EMB};
            place_part(&r, in, shape, start, count, out, rows[k] * EMB, N, at);
        }
        at += rows[k] * EMB;
    }
    /* row y of the joined tensor: head (y' / piece) of the piece holding y, its element */
    for (uint64_t y = 0, base = 0, k = 0; y < HEADS * B; y++) {
        if (y - base == rows[k]) {
            base += rows[k++];
        }
        uint64_t lo = k == 0 ? 0 : k == 1 ? Q : Q + K, w = rows[k] / HEADS, row = y - base;
        for (uint64_t e = 0; e < EMB; e++) {
            uint64_t col = row / w * B + lo + row % w;
            assert_true(out[y * EMB + e] == in[col * EMB + e]);
        }
    }
    /* a box wholly outside a piece's range keeps nothing */
    {
        ur_rearrange r;
        ur_rearrange_box_map m;
        const uint64_t one[2] = {EMB, HEADS * B};
        const uint64_t start[2] = {0, 0}, count[2] = {EMB, HEADS * B};
        assert_int_equal(ur_rearrange_parse(&r, "e (h 7) -> h 7[5:] e", 2, one, NULL), UR_OK);
        assert_int_equal(ur_rearrange_box(&r, start, count, one, &m, NULL), UR_OK);
        assert_int_equal(m.shape[1], 2);
        assert_int_equal(m.src_offset, 5);
        assert_int_equal(
            ur_rearrange_parse(&r, "(a 2) b -> a[1:] 2 b", 2, (const uint64_t[2]){4, 3}, NULL),
            UR_OK);
        assert_int_equal(ur_rearrange_box(&r, (const uint64_t[2]){0, 0}, (const uint64_t[2]){2, 3},
                                          (const uint64_t[2]){2, 3}, &m, NULL),
                         UR_OK);
        assert_int_equal(m.shape[0], 0);
    }
}

/* A box that cuts a split axis inside a part is refused, not placed wrongly. */
static void test_rearrange__cut_inside_a_part(void **state)
{
    const uint64_t shape[2] = {4, 6};
    const uint64_t start[2] = {0, 1}, count[2] = {4, 2}, buf[2] = {4, 2};
    ur_rearrange r;
    ur_rearrange_box_map m;
    ur_err err;
    (void)state;
    assert_int_equal(ur_rearrange_parse(&r, "a (k 2) -> (2 k) a", 2, shape, NULL), UR_OK);
    assert_int_equal(ur_rearrange_box(&r, start, count, buf, &m, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "axis 1"));
}

static void test_rearrange__bad_patterns(void **state)
{
    const uint64_t shape[3] = {6, 3, 4};
    const char *const bad[] = {"e h -> h e",
                               "e h d x -> d h e",
                               "e h d -> h e",
                               "e h d -> (h d) e e",
                               "e h (k 3) -> h k e",
                               "e h (k m) -> h k m e",
                               "e h d (h e)",
                               "e h d -> (h d e",
                               "e e d -> e d",
                               "e h d -> (h d) x",
                               "e h (k 2) -> (h 3 k) e",
                               "e h (k 2x) -> h k 2x e",
                               "e h (k 2) -> h k 2x e",
                               "e h d -> h d[2:1] e",
                               "e h d -> h d[0:5] e",
                               "e h d -> h d[1 e",
                               "e h d -> h d[:2] e",
                               "e h d -> h d[1:2 e"};
    ur_rearrange r;
    ur_err err;
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ur_rearrange_parse(&r, bad[i], 3, shape, &err), UR_EINVAL);
        assert_non_null(strstr(err.msg, bad[i]));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rearrange__export_patterns),
        cmocka_unit_test(test_rearrange__rope_pairs_by_hand),
        cmocka_unit_test(test_rearrange__boxes),
        cmocka_unit_test(test_rearrange__join),
        cmocka_unit_test(test_rearrange__cut_pieces),
        cmocka_unit_test(test_rearrange__cut_inside_a_part),
        cmocka_unit_test(test_rearrange__bad_patterns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
