/* ur_fs_space: free space where a path will be created, and the check a run makes before it
 * writes anything. */
#include "ur_test.h"

#include "unroll/fs.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static void test_ur_fs_space__free_space_of_a_path_not_yet_created(void **state)
{
    uint64_t a = 0, b = 0;
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_free_space(".", &a, &err), UR_OK);
    /* the nearest existing ancestor answers for a path that does not exist */
    assert_int_equal(ur_fs_free_space("./no/such/dir/below", &b, &err), UR_OK);
    assert_true(a > 0 && b > 0);
    assert_int_equal(ur_fs_free_space("no-such-relative-dir", &b, &err), UR_OK);
    assert_int_equal(ur_fs_free_space("", &b, &err), UR_OK);
}

static void test_ur_fs_space__check_refuses_what_cannot_fit(void **state)
{
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_space_check("./out/step", 0, &err), UR_OK);
    assert_int_equal(ur_fs_space_check("./out/step", 4096, &err), UR_OK);
    ur_err_clear(&err);
    assert_int_equal(ur_fs_space_check("./out/step", UINT64_MAX, &err), UR_EIO);
    assert_int_equal(err.os_errno, ENOSPC);
    assert_string_equal(err.where, "./out/step");
    assert_non_null(strstr(err.msg, "not enough free space: the output needs up to "
                                    "18446744073709551615 bytes"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_fs_space__free_space_of_a_path_not_yet_created),
        cmocka_unit_test(test_ur_fs_space__check_refuses_what_cannot_fit),
    };
    return cmocka_run_group_tests_name("ur_fs_space", tests, NULL, NULL);
}
