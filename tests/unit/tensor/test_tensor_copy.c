/* tensor_copy: ur_tensor_copy against the naive index-by-index reference (tensor_ref.h) on
 * seeded random shapes (rank 0-6), layouts (permuted, padded, negative, broadcast src,
 * unaligned) and every supported dtype pair; bytes outside the dst view stay untouched.
 * UR_TEST_SEED=<n> replays a run; the seed is printed on failure. */
#include "ur_test.h"

#include "tensor_ref.h"

/* Compare dst (after the kernel) with a second buffer written by the reference. */
static void check_same(const ref_layout *got, const ref_layout *want, uint64_t seed, int iter,
                       const char *what)
{
    for (size_t i = 0; i < got->size; i++) {
        if (got->buf[i] != want->buf[i]) {
            fail_msg("seed 0x%llx iter %d (%s): byte %zu of dst buffer: got 0x%02x want 0x%02x",
                     (unsigned long long)seed, iter, what, i, got->buf[i], want->buf[i]);
        }
    }
}

static ur_dtype random_pair(ref_rng *r, ur_dtype *src)
{
    if (ref_below(r, 2)) {
        *src = ref_cast_srcs[ref_below(r, 3)];
        return UR_DT_BFLOAT16;
    }
    *src = (ur_dtype)(1 + ref_below(r, UR_DT_COUNT_ - 1));
    return *src;
}

static void random_shape(ref_rng *r, int rank, uint64_t *shape)
{
    for (int d = 0; d < rank; d++) {
        /* Mostly small; sometimes 1 (dropped by the kernel), rarely 0, sometimes long. */
        uint64_t k = ref_below(r, 16);
        shape[d] = k == 0                           ? 1
                   : k == 1 && ref_below(r, 8) == 0 ? 0
                   : k < 4                          ? 1 + ref_below(r, 40)
                                                    : 1 + ref_below(r, 5);
    }
    /* Keep the element count small enough for the slow reference. */
    while (ref_numel(rank, shape) > 20000) {
        for (int d = 0; d < rank; d++) {
            shape[d] = (shape[d] + 1) / 2;
        }
    }
}

static void run_copy_case(ref_rng *r, uint64_t seed, int iter, int dmode, int smode)
{
    uint64_t shape[UR_MAX_RANK];
    int rank = (int)ref_below(r, 7);
    ur_dtype sdt, ddt = random_pair(r, &sdt);
    ref_layout src, dst, want;
    ref_rng twin;
    ur_err err;
    char what[96];
    int rc;

    random_shape(r, rank, shape);
    ref_layout_make(&src, r, sdt, rank, shape, smode, 1);
    ref_fill_random(&src, r);
    twin = *r;
    ref_layout_make(&dst, r, ddt, rank, shape, dmode, 0);
    /* Same layout again (same PRNG state) for the reference's output. */
    ref_layout_make(&want, &twin, ddt, rank, shape, dmode, 0);
    snprintf(what, sizeof what, "%s <- %s, rank %d", ur_dtype_name(ddt), ur_dtype_name(sdt), rank);
    rc = ur_tensor_copy(&dst.v, &src.v, &err);
    if (rc != UR_OK) {
        fail_msg("seed 0x%llx iter %d (%s): rc %d: %s", (unsigned long long)seed, iter, what, rc,
                 err.msg);
    }
    ref_copy(&want.v, &src.v);
    check_same(&dst, &want, seed, iter, what);
    ref_layout_free(&src);
    ref_layout_free(&dst);
    ref_layout_free(&want);
}

static void test_tensor_copy__random_layouts_match_reference(void **state)
{
    uint64_t seed = ref_seed(0xc0b1e5);
    ref_rng r = {seed};
    (void)state;
    for (int iter = 0; iter < 3000; iter++) {
        run_copy_case(&r, seed, iter, (int)ref_below(&r, 2), (int)ref_below(&r, 2));
    }
}

static void test_tensor_copy__dense_to_dense_every_dtype(void **state)
{
    uint64_t seed = ref_seed(0xde05e);
    ref_rng r = {seed};
    (void)state;
    for (int dt = 1; dt < UR_DT_COUNT_; dt++) {
        uint64_t shape[3] = {3, 5, 7};
        ref_layout src, dst;
        ref_layout_make(&src, &r, (ur_dtype)dt, 3, shape, REF_DENSE, 0);
        ref_layout_make(&dst, &r, (ur_dtype)dt, 3, shape, REF_DENSE, 0);
        ref_fill_random(&src, &r);
        assert_int_equal(ur_tensor_copy(&dst.v, &src.v, NULL), UR_OK);
        assert_memory_equal(dst.buf, src.buf, src.size);
        ref_layout_free(&src);
        ref_layout_free(&dst);
    }
}

/* A long contiguous run through the vectorized casts, and a transpose (strided inner). */
static void test_tensor_copy__long_runs_and_transpose(void **state)
{
    uint64_t seed = ref_seed(0x10c0);
    ref_rng r = {seed};
    (void)state;
    for (size_t s = 0; s < 3; s++) {
        uint64_t shape[2] = {67, 129};
        uint64_t tshape[2] = {129, 67};
        ref_layout src, dst, want;
        ur_tensor_view t;
        ref_layout_make(&src, &r, ref_cast_srcs[s], 2, shape, REF_DENSE, 0);
        ref_fill_random(&src, &r);
        ref_layout_make(&dst, &r, UR_DT_BFLOAT16, 2, shape, REF_DENSE, 0);
        ref_layout_make(&want, &r, UR_DT_BFLOAT16, 2, shape, REF_DENSE, 0);
        assert_int_equal(ur_tensor_copy(&dst.v, &src.v, NULL), UR_OK);
        ref_copy(&want.v, &src.v);
        assert_memory_equal(dst.buf, want.buf, want.size);
        ref_layout_free(&dst);
        ref_layout_free(&want);
        /* dst[j][i] = src[i][j]: a transposed dst view over a dense [129, 67] buffer. */
        ref_layout_make(&dst, &r, UR_DT_BFLOAT16, 2, tshape, REF_DENSE, 0);
        ref_layout_make(&want, &r, UR_DT_BFLOAT16, 2, tshape, REF_DENSE, 0);
        t = dst.v;
        t.shape[0] = 67;
        t.shape[1] = 129;
        t.strides[0] = 1;
        t.strides[1] = 67;
        assert_int_equal(ur_tensor_copy(&t, &src.v, NULL), UR_OK);
        t.data = want.v.data;
        ref_copy(&t, &src.v);
        assert_memory_equal(dst.buf, want.buf, want.size);
        ref_layout_free(&src);
        ref_layout_free(&dst);
        ref_layout_free(&want);
    }
}

static void test_tensor_copy__errors_write_nothing(void **state)
{
    uint64_t shape[2] = {2, 3}, other[2] = {3, 2};
    float src[6] = {1, 2, 3, 4, 5, 6};
    uint16_t dst[6] = {0};
    uint16_t zero[6] = {0};
    ur_tensor_view s, d;
    ur_err err;
    (void)state;
    assert_int_equal(ur_tensor_view_init_dense(&s, UR_DT_FLOAT32, 2, shape, src, NULL), UR_OK);
    /* float32 -> float16 is not supported */
    assert_int_equal(ur_tensor_view_init_dense(&d, UR_DT_FLOAT16, 2, shape, dst, NULL), UR_OK);
    assert_int_equal(ur_tensor_copy(&d, &s, &err), UR_EUNSUPPORTED);
    assert_int_equal(err.code, UR_EUNSUPPORTED);
    /* shape mismatch */
    assert_int_equal(ur_tensor_view_init_dense(&d, UR_DT_BFLOAT16, 2, other, dst, NULL), UR_OK);
    assert_int_equal(ur_tensor_copy(&d, &s, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "dim 0"));
    /* rank mismatch */
    assert_int_equal(ur_tensor_view_init_dense(&d, UR_DT_BFLOAT16, 1, shape, dst, NULL), UR_OK);
    assert_int_equal(ur_tensor_copy(&d, &s, &err), UR_EINVAL);
    /* bad rank, bad dtype */
    d = s;
    d.rank = UR_MAX_RANK + 1;
    assert_int_equal(ur_tensor_copy(&d, &s, &err), UR_EINVAL);
    d = s;
    d.dtype = UR_DT_INVALID;
    assert_int_equal(ur_tensor_copy(&d, &s, &err), UR_EINVAL);
    /* a byte stride that overflows int64, and strides whose spans add up past it */
    assert_int_equal(ur_tensor_view_init_dense(&d, UR_DT_BFLOAT16, 2, shape, dst, NULL), UR_OK);
    d.strides[0] = INT64_MAX / 2 + 1;
    assert_int_equal(ur_tensor_copy(&d, &s, &err), UR_EINVAL);
    d.strides[0] = INT64_MAX / 4;
    d.strides[1] = -(INT64_MAX / 4);
    assert_int_equal(ur_tensor_copy(&d, &s, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "overflow"));
    assert_memory_equal(dst, zero, sizeof dst);
}

static void test_tensor_copy__empty_and_scalar(void **state)
{
    uint64_t shape[2] = {4, 0};
    float f = 1.5f;
    uint16_t h = 0;
    ur_tensor_view s, d;
    (void)state;
    assert_int_equal(ur_tensor_view_init_dense(&s, UR_DT_FLOAT32, 2, shape, NULL, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_init_dense(&d, UR_DT_BFLOAT16, 2, shape, NULL, NULL), UR_OK);
    assert_int_equal(ur_tensor_copy(&d, &s, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_init_dense(&s, UR_DT_FLOAT32, 0, NULL, &f, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_init_dense(&d, UR_DT_BFLOAT16, 0, NULL, &h, NULL), UR_OK);
    assert_int_equal(ur_tensor_copy(&d, &s, NULL), UR_OK);
    assert_int_equal(h, 0x3fc0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_copy__random_layouts_match_reference),
        cmocka_unit_test(test_tensor_copy__dense_to_dense_every_dtype),
        cmocka_unit_test(test_tensor_copy__long_runs_and_transpose),
        cmocka_unit_test(test_tensor_copy__errors_write_nothing),
        cmocka_unit_test(test_tensor_copy__empty_and_scalar),
    };
    return cmocka_run_group_tests_name("tensor_copy", tests, NULL, NULL);
}
