/* ur_clock: the wall clock, the recorded timestamps that SOURCE_DATE_EPOCH fixes, and the
 * monotonic and CPU clocks of durations. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/clock.h"

#include <stdlib.h>
#include <time.h>

static void test_ur_clock__stamp_is_now_without_source_date_epoch(void **state)
{
    int64_t ns = 0;
    (void)state;
    unsetenv("SOURCE_DATE_EPOCH");
    int64_t before = ur_clock_now_ns();
    int64_t stamp = ur_clock_stamp_ns();
    int64_t after = ur_clock_now_ns();
    assert_true(before > 1600000000LL * 1000000000LL); /* a real clock, after 2020 */
    assert_true(before <= stamp && stamp <= after);
    assert_int_equal(ur_clock_fixed_ns(&ns), 0);
}

static void test_ur_clock__source_date_epoch_fixes_the_stamp(void **state)
{
    int64_t ns = 0;
    (void)state;
    setenv("SOURCE_DATE_EPOCH", "1700000000", 1);
    assert_int_equal(ur_clock_stamp_ns(), 1700000000LL * 1000000000LL);
    assert_int_equal(ur_clock_fixed_ns(&ns), 1);
    assert_int_equal(ns, 1700000000LL * 1000000000LL);
    setenv("SOURCE_DATE_EPOCH", "0", 1);
    assert_int_equal(ur_clock_stamp_ns(), 0);
    unsetenv("SOURCE_DATE_EPOCH");
}

static void test_ur_clock__malformed_source_date_epoch_is_ignored(void **state)
{
    static const char *const bad[] = {"",          "-5",  "12x",
                                      " 12",       "1.5", "99999999999999999999",
                                      "9300000000"}; /* past 2262 in nanoseconds */
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ns = 0;
        setenv("SOURCE_DATE_EPOCH", bad[i], 1);
        assert_int_equal(ur_clock_fixed_ns(&ns), 0);
        assert_true(ur_clock_stamp_ns() > 1600000000LL * 1000000000LL);
    }
    unsetenv("SOURCE_DATE_EPOCH");
}

/* The other readings: seconds agree with the nanoseconds, the monotonic clock moves forward
 * over a 20 ms sleep (by about that much), and SOURCE_DATE_EPOCH changes none of them. */
static void test_ur_clock__durations_and_seconds(void **state)
{
    struct timespec pause = {0, 20000000};
    (void)state;
    setenv("SOURCE_DATE_EPOCH", "1", 1);
    time_t s = ur_clock_now_s();
    int64_t ns = ur_clock_now_ns();
    assert_true(s > 1600000000);
    assert_true(ns / 1000000000 - s <= 1 && ns / 1000000000 >= s);
    int64_t m0 = ur_clock_mono_ns();
    double s0 = ur_clock_mono_s();
    int64_t cpu = ur_clock_thread_cpu_ns();
    assert_true(m0 > 0);
    assert_true(s0 * 1e9 - (double)m0 > -1e6 && s0 * 1e9 - (double)m0 < 1e8);
    assert_true(cpu > 0);
    nanosleep(&pause, NULL);
    double took = ur_clock_mono_s() - s0;
    assert_true(took >= 0.019 && took < 5.0);
    assert_true(ur_clock_mono_ns() - m0 >= 19000000);
    assert_true(ur_clock_thread_cpu_ns() >= cpu);
    unsetenv("SOURCE_DATE_EPOCH");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_clock__stamp_is_now_without_source_date_epoch),
        cmocka_unit_test(test_ur_clock__source_date_epoch_fixes_the_stamp),
        cmocka_unit_test(test_ur_clock__malformed_source_date_epoch_is_ignored),
        cmocka_unit_test(test_ur_clock__durations_and_seconds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
