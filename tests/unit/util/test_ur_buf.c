/* ur_buf: growth, limits, encoders and the out-of-memory path. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/rd.h"

#include <string.h>

static void test_ur_buf__append_grows_and_detach_terminates(void **state)
{
    ur_buf b;
    char *s;
    size_t n;
    (void)state;
    ur_buf_init(&b, 0);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(ur_buf_append_str(&b, "ab", NULL), UR_OK);
    }
    assert_int_equal(b.len, 2000);
    assert_int_equal(ur_buf_printf(&b, NULL, "%d-%s", 42, "x"), UR_OK);
    s = ur_buf_detach(&b, &n);
    assert_non_null(s);
    assert_int_equal(n, 2004);
    assert_string_equal(s + 2000, "42-x");
    assert_null(b.data);
    ur_free(s);
}

static void test_ur_buf__limit_is_enforced(void **state)
{
    ur_buf b;
    ur_err err;
    (void)state;
    ur_buf_init(&b, 10);
    assert_int_equal(ur_buf_append(&b, "0123456789", 10, &err), UR_OK);
    assert_int_equal(ur_buf_append_byte(&b, 'x', &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "limit"));
    assert_int_equal(b.len, 10);
    ur_buf_dispose(&b);
}

static void test_ur_buf__encoders_round_trip_through_rd(void **state)
{
    static const uint64_t vals[] = {0, 1, 127, 128, 300, 1ull << 32, UINT64_MAX};
    ur_buf b;
    ur_rd rd;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_buf_put_u32le(&b, 0xdeadbeef, NULL), UR_OK);
    assert_int_equal(ur_buf_put_u32be(&b, 0x0cdb20de, NULL), UR_OK);
    assert_int_equal(ur_buf_put_u64le(&b, 0x0102030405060708ull, NULL), UR_OK);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        assert_int_equal(ur_buf_put_varint(&b, vals[i], NULL), UR_OK);
    }
    assert_int_equal(b.data[4], 0x0c);
    ur_rd_init(&rd, b.data, b.len);
    assert_int_equal(ur_rd_u32le(&rd), 0xdeadbeef);
    assert_int_equal(ur_rd_u32be(&rd), 0x0cdb20de);
    assert_true(ur_rd_u64le(&rd) == 0x0102030405060708ull);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        assert_true(ur_rd_varint64(&rd) == vals[i]);
    }
    assert_int_equal(ur_rd_finish(&rd, "enc", NULL), UR_OK);
    ur_buf_dispose(&b);
}

static void test_ur_buf__varint_is_shortest(void **state)
{
    ur_buf b;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_buf_put_varint(&b, 127, NULL), UR_OK);
    assert_int_equal(b.len, 1);
    assert_int_equal(ur_buf_put_varint(&b, 128, NULL), UR_OK);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data + 1, "\x80\x01", 2);
    ur_buf_dispose(&b);
}

static void test_ur_buf__put_dec_matches_printf(void **state)
{
    const uint64_t vals[] = {0, 7, 10, 99, 100, 4294967295u, 18446744073709551615ull};
    ur_buf b, want;
    (void)state;
    ur_buf_init(&b, 0);
    ur_buf_init(&want, 0);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        assert_int_equal(ur_buf_put_dec(&b, vals[i], NULL), UR_OK);
        assert_int_equal(ur_buf_printf(&want, NULL, "%llu", (unsigned long long)vals[i]), UR_OK);
    }
    assert_int_equal(b.len, want.len);
    assert_memory_equal(b.data, want.data, b.len);
    ur_buf_dispose(&b);
    ur_buf_dispose(&want);
}

static void test_ur_buf__oom_loop(void **state)
{
    /* Fail allocation n for n = 0, 1, ... until the operation succeeds: every failure
     * must be reported as UR_ENOMEM and leave a buffer that can be disposed. */
    (void)state;
    for (long n = 0;; n++) {
        ur_buf b;
        ur_err err;
        int rc = UR_OK;
        ur_buf_init(&b, 0);
        ur_alloc_fail_after(n);
        for (int i = 0; i < 100 && rc == UR_OK; i++) {
            rc = ur_buf_append(&b, "0123456789abcdef", 16, &err);
        }
        ur_alloc_fail_after(-1);
        ur_buf_dispose(&b);
        if (rc == UR_OK) {
            assert_true(n > 0);
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        assert_int_equal(err.code, UR_ENOMEM);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_buf__append_grows_and_detach_terminates),
        cmocka_unit_test(test_ur_buf__limit_is_enforced),
        cmocka_unit_test(test_ur_buf__encoders_round_trip_through_rd),
        cmocka_unit_test(test_ur_buf__varint_is_shortest),
        cmocka_unit_test(test_ur_buf__put_dec_matches_printf),
        cmocka_unit_test(test_ur_buf__oom_loop),
    };
    return cmocka_run_group_tests_name("ur_buf", tests, NULL, NULL);
}
