/* ur_num_parse_i64 / _u64: exactly the bytes given, in range, or refused. */
#include "ur_test.h"

#include "unroll/num.h"

#include <string.h>

static void test_ur_num__parses_exactly(void **state)
{
    int64_t i = 5;
    uint64_t u = 5;
    (void)state;
    assert_int_equal(ur_num_parse_i64("42", 2, &i), 0);
    assert_int_equal(i, 42);
    assert_int_equal(ur_num_parse_i64("-7", 2, &i), 0);
    assert_int_equal(i, -7);
    assert_int_equal(ur_num_parse_i64("123\n", 3, &i), 0); /* the n bytes only */
    assert_int_equal(i, 123);
    assert_int_equal(ur_num_parse_i64("9223372036854775807", 19, &i), 0);
    assert_true(i == INT64_MAX);
    assert_int_equal(ur_num_parse_i64("-9223372036854775808", 20, &i), 0);
    assert_true(i == INT64_MIN);
    assert_int_equal(ur_num_parse_u64("18446744073709551615", 20, &u), 0);
    assert_true(u == UINT64_MAX);
}

static void test_ur_num__refuses(void **state)
{
    const char *bad[] = {"", "-", "12x", " 12", "+1", "1 ", "9223372036854775808", "1.5"};
    int64_t i = 5;
    uint64_t u = 5;
    (void)state;
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        assert_int_equal(ur_num_parse_i64(bad[k], strlen(bad[k]), &i), -1);
    }
    assert_int_equal(i, 5); /* untouched */
    assert_int_equal(ur_num_parse_i64("-9223372036854775809", 20, &i), -1);
    assert_int_equal(ur_num_parse_u64("-1", 2, &u), -1);
    assert_int_equal(ur_num_parse_u64("18446744073709551616", 20, &u), -1);
    assert_int_equal(u, 5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_num__parses_exactly),
        cmocka_unit_test(test_ur_num__refuses),
    };
    return cmocka_run_group_tests_name("ur_num", tests, NULL, NULL);
}
