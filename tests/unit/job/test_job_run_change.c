/* ur_job_run_change (unroll/job_share.h): which change of the input's or the config's
 * identity two run texts show, and none when other arguments differ. */
#include "ur_test.h"

#include "unroll/job_share.h"

#include <string.h>

#define HEAD "unroll multi-process run 1\nprocesses 2\nslab_budget 1\ninput /in\n"
#define FILES                                                                                     \
    "file _METADATA size=10 v=1.000000001:7\n"                                                    \
    "file d/aa size=100 v=1.000000002:8\n"                                                        \
    "content _METADATA crc32c=0000abcd size=10\n"
#define TAIL "config /c/unroll.yml\ncontent config:unroll.yml crc32c=00001234 size=50\n"

static void expect(const char *have, const char *want, const char *what)
{
    char got[512] = "";
    assert_int_equal(ur_job_run_change(have, want, got, sizeof got), 1);
    assert_string_equal(got, what);
}

static void test_job_run_change__names_the_change(void **state)
{
    (void)state;
    const char *base = HEAD FILES TAIL;
    char got[512];
    assert_int_equal(ur_job_run_change(base, base, got, sizeof got), 0);
    /* a value's size */
    expect(base,
           HEAD "file _METADATA size=10 v=1.000000001:7\nfile d/aa size=120 v=2.0:9\n"
                "content _METADATA crc32c=0000abcd size=10\n" TAIL,
           "d/aa (size 100 -> 120)");
    /* written again, same size */
    expect(base,
           HEAD "file _METADATA size=10 v=1.000000001:7\nfile d/aa size=100 v=3.5:8\n"
                "content _METADATA crc32c=0000abcd size=10\n" TAIL,
           "d/aa (rewritten, same size: version 1.000000002:8 -> 3.5:8)");
    /* a new data file and one gone: the new one named, both counted; a version-only change
     * comes after the others */
    expect(base,
           HEAD "file _METADATA size=10 v=9.0:7\nfile d/bb size=100 v=1.000000002:8\n"
                "content _METADATA crc32c=0000abcd size=10\n" TAIL,
           "d/bb (new) and 2 other changes");
    expect(
        base,
        HEAD
        "file _METADATA size=10 v=1.000000001:7\ncontent _METADATA crc32c=0000abcd size=10\n" TAIL,
        "d/aa (removed)");
    /* contents */
    expect(base,
           HEAD "file _METADATA size=10 v=1.000000001:7\nfile d/aa size=100 v=1.000000002:8\n"
                "content _METADATA crc32c=0000ffff size=10\n" TAIL,
           "_METADATA (content)");
    expect(base, HEAD FILES "config /c/unroll.yml\ncontent config:unroll.yml crc32c=99 size=51\n",
           "the config file unroll.yml (content)");
}

static void test_job_run_change__other_arguments(void **state)
{
    (void)state;
    const char *base = HEAD FILES TAIL;
    char got[512];
    /* another input location, another override: not an input change (the caller's message) */
    assert_int_equal(ur_job_run_change(base, HEAD FILES TAIL "override a=b\n", got, sizeof got),
                     0);
    assert_int_equal(ur_job_run_change(base,
                                       "unroll multi-process run 1\nprocesses 2\n"
                                       "slab_budget 1\ninput /other\n" FILES TAIL,
                                       got, sizeof got),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_run_change__names_the_change),
        cmocka_unit_test(test_job_run_change__other_arguments),
    };
    return cmocka_run_group_tests_name("job_run_change", tests, NULL, NULL);
}
