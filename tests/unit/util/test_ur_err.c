/* ur_err: messages, wrapping, paths, offsets and formatting. */
#include "ur_test.h"

#include "unroll/err.h"

#include <errno.h>
#include <string.h>

static void test_ur_err__set_returns_code_and_formats(void **state)
{
    ur_err err;
    char line[1200];
    (void)state;
    ur_err_clear(&err);
    assert_int_equal(ur_err_set_at(&err, UR_ECORRUPT, 42, "btree: key length %u > %u", 9u, 8u),
                     UR_ECORRUPT);
    ur_err_set_where(&err, "d/abc");
    ur_err_set_where(&err, "ignored: the innermost path wins");
    assert_string_equal(ur_err_format(&err, line, sizeof line),
                        "d/abc: btree: key length 9 > 8 (at byte 42)");
}

static void test_ur_err__wrap_prefixes_context(void **state)
{
    ur_err err;
    (void)state;
    ur_err_set(&err, UR_ENOTFOUND, "no such key");
    assert_int_equal(ur_err_wrap(&err, "array '%s'", "params.x"), UR_ENOTFOUND);
    assert_string_equal(err.msg, "array 'params.x': no such key");
}

static void test_ur_err__os_error_names_path_and_errno(void **state)
{
    ur_err err;
    (void)state;
    ur_err_set_os(&err, UR_EIO, ENOSPC, "/out/d/1", "write failed");
    assert_string_equal(err.where, "/out/d/1");
    assert_int_equal(err.os_errno, ENOSPC);
    assert_non_null(strstr(err.msg, strerror(ENOSPC)));
}

static void test_ur_err__null_err_is_allowed(void **state)
{
    (void)state;
    assert_int_equal(ur_err_set(NULL, UR_EINVAL, "x"), UR_EINVAL);
    assert_int_equal(ur_err_oom(NULL), UR_ENOMEM);
    ur_err_clear(NULL);
}

static void test_ur_err__long_messages_are_cut_not_overflowed(void **state)
{
    ur_err err;
    char big[2000];
    (void)state;
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ur_err_set(&err, UR_ECORRUPT, "%s", big);
    ur_err_wrap(&err, "%s", big);
    assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_err__set_returns_code_and_formats),
        cmocka_unit_test(test_ur_err__wrap_prefixes_context),
        cmocka_unit_test(test_ur_err__os_error_names_path_and_errno),
        cmocka_unit_test(test_ur_err__null_err_is_allowed),
        cmocka_unit_test(test_ur_err__long_messages_are_cut_not_overflowed),
    };
    return cmocka_run_group_tests_name("ur_err", tests, NULL, NULL);
}
