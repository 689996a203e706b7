/* tensor_view: dense construction, numel/nbytes, take, slice, is_dense. */
#include "ur_test.h"

#include <string.h>

#include "unroll/tensor.h"

static void test_tensor_view__dense_c_order(void **state)
{
    uint64_t shape[3] = {2, 3, 4};
    float buf[24];
    ur_tensor_view v;
    uint64_t n;
    size_t b;
    (void)state;
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_FLOAT32, 3, shape, buf, NULL), UR_OK);
    assert_int_equal(v.rank, 3);
    assert_int_equal(v.strides[0], 12);
    assert_int_equal(v.strides[1], 4);
    assert_int_equal(v.strides[2], 1);
    assert_ptr_equal(v.data, buf);
    assert_int_equal(ur_tensor_view_numel(&n, &v, NULL), UR_OK);
    assert_int_equal(n, 24);
    assert_int_equal(ur_tensor_view_nbytes(&b, &v, NULL), UR_OK);
    assert_int_equal(b, 96);
    assert_true(ur_tensor_view_is_dense(&v));
    /* rank 0 is one element */
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_BFLOAT16, 0, NULL, buf, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_numel(&n, &v, NULL), UR_OK);
    assert_int_equal(n, 1);
}

static void test_tensor_view__dense_rejects_bad_input(void **state)
{
    uint64_t big[2] = {1ull << 40, 1ull << 40};
    uint64_t huge[3] = {1ull << 62, 4, 0};
    uint64_t shape[1] = {3};
    ur_tensor_view v;
    ur_err err;
    (void)state;
    memset(&v, 0x11, sizeof v);
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_FLOAT32, 2, big, NULL, &err), UR_EINVAL);
    assert_int_equal(v.rank, 0x11111111); /* untouched */
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_FLOAT32, 3, huge, NULL, &err), UR_EINVAL);
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_INVALID, 1, shape, NULL, &err),
                     UR_EINVAL);
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_FLOAT32, -1, shape, NULL, &err),
                     UR_EINVAL);
    assert_int_equal(
        ur_tensor_view_init_dense(&v, UR_DT_FLOAT32, UR_MAX_RANK + 1, shape, NULL, &err),
        UR_EINVAL);
    /* 2^62 float32 elements: the element count fits, the byte size does not */
    huge[2] = 1;
    huge[1] = 1;
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_FLOAT32, 3, huge, NULL, &err), UR_EINVAL);
}

static void test_tensor_view__take_every_axis(void **state)
{
    uint64_t shape[3] = {2, 3, 4};
    int32_t buf[24];
    ur_tensor_view v, t;
    (void)state;
    for (int i = 0; i < 24; i++) {
        buf[i] = i;
    }
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_INT32, 3, shape, buf, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_take(&t, &v, 1, 2, NULL), UR_OK);
    assert_int_equal(t.rank, 2);
    assert_int_equal(t.shape[0], 2);
    assert_int_equal(t.shape[1], 4);
    assert_int_equal(t.strides[0], 12);
    assert_int_equal(t.strides[1], 1);
    assert_int_equal(*(int32_t *)t.data, 8);
    assert_false(ur_tensor_view_is_dense(&t));
    assert_int_equal(ur_tensor_view_take(&t, &v, 0, 1, NULL), UR_OK);
    assert_true(ur_tensor_view_is_dense(&t));
    assert_int_equal(*(int32_t *)t.data, 12);
    /* aliasing out and in, down to a scalar */
    t = v;
    assert_int_equal(ur_tensor_view_take(&t, &t, 2, 3, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_take(&t, &t, 0, 1, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_take(&t, &t, 0, 2, NULL), UR_OK);
    assert_int_equal(t.rank, 0);
    assert_int_equal(*(int32_t *)t.data, 12 + 8 + 3);
    assert_int_equal(ur_tensor_view_take(&t, &v, 3, 0, NULL), UR_EINVAL);
    assert_int_equal(ur_tensor_view_take(&t, &v, 1, 3, NULL), UR_EINVAL);
    assert_int_equal(ur_tensor_view_take(&t, &v, -1, 0, NULL), UR_EINVAL);
}

static void test_tensor_view__slice_box(void **state)
{
    uint64_t shape[2] = {4, 5};
    uint64_t start[2] = {1, 2}, count[2] = {2, 3};
    uint16_t buf[20];
    ur_tensor_view v, s;
    ur_err err;
    (void)state;
    for (int i = 0; i < 20; i++) {
        buf[i] = (uint16_t)i;
    }
    assert_int_equal(ur_tensor_view_init_dense(&v, UR_DT_BFLOAT16, 2, shape, buf, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_slice(&s, &v, start, count, NULL), UR_OK);
    assert_int_equal(s.shape[0], 2);
    assert_int_equal(s.shape[1], 3);
    assert_int_equal(s.strides[0], 5);
    assert_int_equal(*(uint16_t *)s.data, 7);
    assert_false(ur_tensor_view_is_dense(&s));
    /* a full-width box of rows stays dense */
    start[1] = 0;
    count[1] = 5;
    assert_int_equal(ur_tensor_view_slice(&s, &v, start, count, NULL), UR_OK);
    assert_true(ur_tensor_view_is_dense(&s));
    /* empty box at the end is fine, past the end is not */
    start[0] = 4;
    count[0] = 0;
    assert_int_equal(ur_tensor_view_slice(&s, &v, start, count, NULL), UR_OK);
    count[0] = 1;
    assert_int_equal(ur_tensor_view_slice(&s, &v, start, count, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "dim 0"));
    start[0] = UINT64_MAX;
    assert_int_equal(ur_tensor_view_slice(&s, &v, start, count, &err), UR_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_view__dense_c_order),
        cmocka_unit_test(test_tensor_view__dense_rejects_bad_input),
        cmocka_unit_test(test_tensor_view__take_every_axis),
        cmocka_unit_test(test_tensor_view__slice_box),
    };
    return cmocka_run_group_tests_name("tensor_view", tests, NULL, NULL);
}
