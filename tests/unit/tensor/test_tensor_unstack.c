/* tensor_unstack: ur_tensor_unstack against take + the naive reference copy, on seeded random
 * shapes (rank 1-6), every axis, every supported dtype pair, with destinations that share one
 * layout at random offsets in one buffer (the fused pass) or each have their own layout or
 * dtype (the per-slice fallback). UR_TEST_SEED=<n> replays a run; failures print the seed. */
#include "ur_test.h"

#include "tensor_ref.h"

#define MAX_N 48

/* n destinations: either one layout repeated at random spots of one buffer, or n layouts. */
typedef struct {
    ref_layout own[MAX_N]; /* per-destination buffers (mode 1) */
    uint8_t *shared;       /* one buffer for all (mode 0) */
    size_t shared_size;
    ur_tensor_view v[MAX_N];
    size_t n;
    int mode;
} dst_set;

static void dst_set_make(dst_set *s, ref_rng *r, int mode, size_t n, ur_dtype ddt, int rank,
                         const uint64_t *shape, int layout_mode)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->mode = mode;
    if (mode == 0) {
        ref_layout t;
        size_t gap;
        ref_layout_make(&t, r, ddt, rank, shape, layout_mode, 0);
        gap = t.size + ref_below(r, 3) * ur_dtype_size(ddt);
        s->shared_size = gap * n + 8;
        s->shared = malloc(s->shared_size);
        memset(s->shared, REF_GUARD, s->shared_size);
        /* Slices in a shuffled order, so dsts[i] are not simply one strided view. */
        for (size_t i = 0; i < n; i++) {
            size_t slot = (i * 7 + 3) % n;
            if (n % 7 == 0) {
                slot = n - 1 - i;
            }
            s->v[i] = t.v;
            s->v[i].data = s->shared + slot * gap + (size_t)((uint8_t *)t.v.data - t.buf);
        }
        ref_layout_free(&t);
    } else {
        for (size_t i = 0; i < n; i++) {
            ref_layout_make(&s->own[i], r, ddt, rank, shape, layout_mode, 0);
            s->v[i] = s->own[i].v;
        }
    }
}

/* A twin set with the same layouts and offsets, in fresh buffers. */
static void dst_set_twin(dst_set *t, const dst_set *s)
{
    *t = *s;
    if (s->mode == 0) {
        t->shared = malloc(s->shared_size);
        memset(t->shared, REF_GUARD, s->shared_size);
        for (size_t i = 0; i < s->n; i++) {
            t->v[i].data = t->shared + ((uint8_t *)s->v[i].data - s->shared);
        }
    } else {
        for (size_t i = 0; i < s->n; i++) {
            t->own[i].buf = malloc(s->own[i].size ? s->own[i].size : 1);
            memset(t->own[i].buf, REF_GUARD, s->own[i].size);
            t->v[i].data = t->own[i].buf + ((uint8_t *)s->v[i].data - s->own[i].buf);
        }
    }
}

static void dst_set_free(dst_set *s)
{
    free(s->shared);
    for (size_t i = 0; i < s->n; i++) {
        if (s->mode == 1) {
            free(s->own[i].buf);
        }
    }
}

static void dst_set_check(const dst_set *got, const dst_set *want, uint64_t seed, int iter,
                          const char *what)
{
    if (got->mode == 0) {
        for (size_t i = 0; i < got->shared_size; i++) {
            if (got->shared[i] != want->shared[i]) {
                fail_msg("seed 0x%llx iter %d (%s): shared byte %zu: got 0x%02x want 0x%02x",
                         (unsigned long long)seed, iter, what, i, got->shared[i], want->shared[i]);
            }
        }
        return;
    }
    for (size_t k = 0; k < got->n; k++) {
        for (size_t i = 0; i < got->own[k].size; i++) {
            if (got->own[k].buf[i] != want->own[k].buf[i]) {
                fail_msg("seed 0x%llx iter %d (%s): dst %zu byte %zu: got 0x%02x want 0x%02x",
                         (unsigned long long)seed, iter, what, k, i, got->own[k].buf[i],
                         want->own[k].buf[i]);
            }
        }
    }
}

static void run_case(ref_rng *r, uint64_t seed, int iter)
{
    int rank = 1 + (int)ref_below(r, 6);
    int axis = (int)ref_below(r, (uint64_t)rank);
    uint64_t shape[UR_MAX_RANK], dshape[UR_MAX_RANK];
    ur_dtype sdt, ddt;
    ref_layout src;
    dst_set got, want;
    int mode = (int)ref_below(r, 2);
    int mixed = mode == 1 && ref_below(r, 4) == 0;
    char what[128];
    ur_err err;
    int rc;

    if (ref_below(r, 2)) {
        sdt = ref_cast_srcs[ref_below(r, 3)];
        ddt = UR_DT_BFLOAT16;
    } else {
        sdt = (ur_dtype)(1 + ref_below(r, UR_DT_COUNT_ - 1));
        ddt = sdt;
    }
    for (int d = 0; d < rank; d++) {
        shape[d] = 1 + ref_below(r, d == axis ? 12 : (ref_below(r, 3) ? 6 : 30));
    }
    if (ref_below(r, 32) == 0) {
        shape[(axis + 1) % rank] = 0; /* empty slices (or an empty axis for rank 1) */
    }
    while (ref_numel(rank, shape) > 20000) {
        for (int d = 0; d < rank; d++) {
            shape[d] = (shape[d] + 1) / 2;
        }
    }
    for (int d = 0, o = 0; d < rank; d++) {
        if (d != axis) {
            dshape[o++] = shape[d];
        }
    }
    ref_layout_make(&src, r, sdt, rank, shape, ref_below(r, 3) ? REF_DENSE : REF_RANDOM, 1);
    ref_fill_random(&src, r);
    dst_set_make(&got, r, mode, (size_t)shape[axis], ddt, rank - 1, dshape,
                 ref_below(r, 2) ? REF_DENSE : REF_RANDOM);
    if (mixed && sdt != UR_DT_BFLOAT16 && ddt == UR_DT_BFLOAT16 && got.n > 1) {
        /* dst 0 keeps src's dtype (identity) while the others cast. */
        ref_layout_free(&got.own[0]);
        ref_layout_make(&got.own[0], r, sdt, rank - 1, dshape, REF_DENSE, 0);
        got.v[0] = got.own[0].v;
    }
    dst_set_twin(&want, &got);
    snprintf(what, sizeof what, "%s <- %s, rank %d, axis %d, n %zu, %s", ur_dtype_name(ddt),
             ur_dtype_name(sdt), rank, axis, got.n, mode ? "own layouts" : "shared layout");
    rc = ur_tensor_unstack(got.v, got.n, &src.v, axis, &err);
    if (rc != UR_OK) {
        fail_msg("seed 0x%llx iter %d (%s): rc %d: %s", (unsigned long long)seed, iter, what, rc,
                 err.msg);
    }
    for (size_t i = 0; i < want.n; i++) {
        ur_tensor_view slice;
        assert_int_equal(ur_tensor_view_take(&slice, &src.v, axis, i, NULL), UR_OK);
        ref_copy(&want.v[i], &slice);
    }
    dst_set_check(&got, &want, seed, iter, what);
    dst_set_free(&got);
    dst_set_free(&want);
    ref_layout_free(&src);
}

static void test_tensor_unstack__random_match_reference(void **state)
{
    uint64_t seed = ref_seed(0x57ac4);
    ref_rng r = {seed};
    (void)state;
    for (int iter = 0; iter < 2000; iter++) {
        run_case(&r, seed, iter);
    }
}

/* The streaming shape: a dense f32 [A, L, B] chunk split on axis 1 into L dense bf16 views
 * that sit inside larger per-layer buffers (offset rows, row pitch wider than B). */
static void test_tensor_unstack__chunk_into_buffers(void **state)
{
    enum { A = 5, L = 4, B = 33, PITCH = 40, ROWS = 9, R0 = 2, C0 = 3 };
    static float src[A][L][B];
    static uint16_t out[L][ROWS][PITCH];
    ur_tensor_view s, d[L];
    uint64_t shape[3] = {A, L, B};
    (void)state;
    for (int a = 0; a < A; a++) {
        for (int l = 0; l < L; l++) {
            for (int b = 0; b < B; b++) {
                src[a][l][b] = (float)(a * 1000 + l * 100 + b) + 0.25f;
            }
        }
    }
    memset(out, 0xee, sizeof out);
    assert_int_equal(ur_tensor_view_init_dense(&s, UR_DT_FLOAT32, 3, shape, src, NULL), UR_OK);
    for (int l = 0; l < L; l++) {
        d[l].dtype = UR_DT_BFLOAT16;
        d[l].rank = 2;
        d[l].shape[0] = A;
        d[l].shape[1] = B;
        d[l].strides[0] = PITCH;
        d[l].strides[1] = 1;
        d[l].data = &out[l][R0][C0];
    }
    assert_int_equal(ur_tensor_unstack(d, L, &s, 1, NULL), UR_OK);
    for (int l = 0; l < L; l++) {
        for (int row = 0; row < ROWS; row++) {
            for (int c = 0; c < PITCH; c++) {
                int in = row >= R0 && row < R0 + A && c >= C0 && c < C0 + B;
                uint16_t want = 0xeeee;
                if (in) {
                    uint32_t u;
                    memcpy(&u, &src[row - R0][l][c - C0], 4);
                    want = ref_f32_to_bf16(u);
                }
                assert_int_equal(out[l][row][c], want);
            }
        }
    }
}

/* Rank-1 [L] (NNX RNG counts): every element becomes a scalar destination. */
static void test_tensor_unstack__rank1_to_scalars(void **state)
{
    uint32_t src[6] = {10, 11, 12, 13, 14, 15};
    uint32_t out[6] = {0};
    uint64_t shape[1] = {6};
    ur_tensor_view s, d[6];
    (void)state;
    assert_int_equal(ur_tensor_view_init_dense(&s, UR_DT_UINT32, 1, shape, src, NULL), UR_OK);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(
            ur_tensor_view_init_dense(&d[i], UR_DT_UINT32, 0, NULL, &out[5 - i], NULL), UR_OK);
    }
    assert_int_equal(ur_tensor_unstack(d, 6, &s, 0, NULL), UR_OK);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(out[5 - i], 10 + i);
    }
}

static void test_tensor_unstack__errors_write_nothing(void **state)
{
    float src[2][3] = {{1, 2, 3}, {4, 5, 6}};
    uint16_t out[3][2];
    uint16_t guard[3][2];
    uint64_t shape[2] = {2, 3}, dshape[1] = {2};
    ur_tensor_view s, d[3];
    ur_err err;
    (void)state;
    memset(out, 0x5a, sizeof out);
    memcpy(guard, out, sizeof out);
    assert_int_equal(ur_tensor_view_init_dense(&s, UR_DT_FLOAT32, 2, shape, src, NULL), UR_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ur_tensor_view_init_dense(&d[i], UR_DT_BFLOAT16, 1, dshape, out[i], NULL),
                         UR_OK);
    }
    /* wrong count, bad axis */
    assert_int_equal(ur_tensor_unstack(d, 2, &s, 1, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "axis 1 has 3"));
    assert_int_equal(ur_tensor_unstack(d, 3, &s, 2, &err), UR_EINVAL);
    assert_int_equal(ur_tensor_unstack(d, 3, &s, -1, &err), UR_EINVAL);
    /* the last destination has a dtype float32 cannot be cast to */
    d[2].dtype = UR_DT_FLOAT16;
    assert_int_equal(ur_tensor_unstack(d, 3, &s, 1, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "dst 2"));
    d[2].dtype = UR_DT_BFLOAT16;
    /* the last destination has the wrong shape */
    d[2].shape[0] = 3;
    assert_int_equal(ur_tensor_unstack(d, 3, &s, 1, &err), UR_EINVAL);
    d[2].shape[0] = 2;
    d[1].rank = 2;
    assert_int_equal(ur_tensor_unstack(d, 3, &s, 1, &err), UR_EINVAL);
    assert_memory_equal(out, guard, sizeof out);
    d[1].rank = 1;
    assert_int_equal(ur_tensor_unstack(d, 3, &s, 1, &err), UR_OK);
    assert_int_equal(out[2][1], 0x40c0); /* 6.0 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_unstack__random_match_reference),
        cmocka_unit_test(test_tensor_unstack__chunk_into_buffers),
        cmocka_unit_test(test_tensor_unstack__rank1_to_scalars),
        cmocka_unit_test(test_tensor_unstack__errors_write_nothing),
    };
    return cmocka_run_group_tests_name("tensor_unstack", tests, NULL, NULL);
}
