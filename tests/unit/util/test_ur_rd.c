/* ur_rd: the sticky cursor over untrusted bytes. */
#include "ur_test.h"

#include "unroll/rd.h"

static void test_ur_rd__fixed_width_little_and_big_endian(void **state)
{
    static const uint8_t b[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                                0x0c, 0xdb, 0x3a, 0x2a, 0xff, 0x10, 0x20};
    ur_rd rd;
    (void)state;
    ur_rd_init(&rd, b, sizeof b);
    assert_int_equal(ur_rd_u64le(&rd), 0x0807060504030201ull);
    assert_int_equal(ur_rd_u32be(&rd), 0x0cdb3a2au);
    assert_int_equal(ur_rd_u8(&rd), 0xff);
    assert_int_equal(ur_rd_u16le(&rd), 0x2010);
    assert_int_equal(ur_rd_finish(&rd, "blob", NULL), UR_OK);
}

static void test_ur_rd__underrun_is_sticky_and_reports_offset(void **state)
{
    static const uint8_t b[] = {1, 2, 3};
    ur_rd rd;
    ur_err err;
    (void)state;
    ur_rd_init(&rd, b, sizeof b);
    assert_int_equal(ur_rd_u8(&rd), 1);
    assert_int_equal(ur_rd_u32le(&rd), 0);
    assert_true(rd.failed);
    /* Later reads that would fit still fail: the cursor stays failed. */
    assert_int_equal(ur_rd_u8(&rd), 0);
    assert_int_equal(ur_rd_finish(&rd, "node", &err), UR_ECORRUPT);
    assert_int_equal(err.offset, 1);
    assert_non_null(strstr(err.msg, "node"));
}

static void test_ur_rd__trailing_bytes_fail_finish_not_check(void **state)
{
    static const uint8_t b[] = {1, 2};
    ur_rd rd;
    ur_err err;
    (void)state;
    ur_rd_init(&rd, b, sizeof b);
    (void)ur_rd_u8(&rd);
    assert_int_equal(ur_rd_check(&rd, "x", &err), UR_OK);
    assert_int_equal(ur_rd_finish(&rd, "x", &err), UR_ECORRUPT);
    assert_int_equal(err.offset, 1);
}

static void test_ur_rd__varint_values_and_limits(void **state)
{
    static const uint8_t ok[] = {0x00, 0x7f, 0x80, 0x01, 0xe5, 0x8e, 0x26};
    static const uint8_t max64[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t over64[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    static const uint8_t max32[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    static const uint8_t over32[] = {0xff, 0xff, 0xff, 0xff, 0x10};
    static const uint8_t unterminated[] = {0x80, 0x80};
    /* Non-shortest encodings are accepted, as riegeli accepts them. */
    static const uint8_t padded[] = {0x81, 0x80, 0x00};
    ur_rd rd;
    (void)state;

    ur_rd_init(&rd, ok, sizeof ok);
    assert_int_equal(ur_rd_varint64(&rd), 0);
    assert_int_equal(ur_rd_varint64(&rd), 127);
    assert_int_equal(ur_rd_varint64(&rd), 128);
    assert_int_equal(ur_rd_varint32(&rd), 624485);
    assert_int_equal(ur_rd_finish(&rd, "v", NULL), UR_OK);

    ur_rd_init(&rd, max64, sizeof max64);
    assert_true(ur_rd_varint64(&rd) == UINT64_MAX);
    assert_false(rd.failed);
    ur_rd_init(&rd, over64, sizeof over64);
    (void)ur_rd_varint64(&rd);
    assert_true(rd.failed);

    ur_rd_init(&rd, max32, sizeof max32);
    assert_true(ur_rd_varint32(&rd) == UINT32_MAX);
    assert_false(rd.failed);
    ur_rd_init(&rd, over32, sizeof over32);
    (void)ur_rd_varint32(&rd);
    assert_true(rd.failed);

    ur_rd_init(&rd, unterminated, sizeof unterminated);
    (void)ur_rd_varint64(&rd);
    assert_true(rd.failed);

    ur_rd_init(&rd, padded, sizeof padded);
    assert_int_equal(ur_rd_varint64(&rd), 1);
    assert_false(rd.failed);
}

static void test_ur_rd__bytes_borrow_the_input(void **state)
{
    static const uint8_t b[] = {9, 8, 7};
    ur_rd rd;
    (void)state;
    ur_rd_init(&rd, b, sizeof b);
    assert_ptr_equal(ur_rd_bytes(&rd, 2), b);
    assert_null(ur_rd_bytes(&rd, 2));
    assert_int_equal(ur_rd_remaining(&rd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_rd__fixed_width_little_and_big_endian),
        cmocka_unit_test(test_ur_rd__underrun_is_sticky_and_reports_offset),
        cmocka_unit_test(test_ur_rd__trailing_bytes_fail_finish_not_check),
        cmocka_unit_test(test_ur_rd__varint_values_and_limits),
        cmocka_unit_test(test_ur_rd__bytes_borrow_the_input),
    };
    return cmocka_run_group_tests_name("ur_rd", tests, NULL, NULL);
}
