/* Shared include for cmocka tests: cmocka needs these headers before its own. */
#ifndef UNROLL_UR_TEST_H
#define UNROLL_UR_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A fresh, empty scratch directory for one test, /tmp/ur_<stem>_ plus six random characters
 * (mkdtemp fills in the template's X's), written into buf; the test fails when it cannot be
 * made. */
static inline void ur_test_scratch_dir(char *buf, size_t cap, const char *stem)
{
    int n = snprintf(buf, cap, "/tmp/ur_%s_XXXXXX", stem);
    assert_true(n > 0 && (size_t)n < cap);
    assert_non_null(mkdtemp(buf));
}

/* Set by scripts/sanitize.sh for its valgrind pass: a test sized for a native run (hundreds
 * of MiB, thousands of damaged inputs) takes a smaller case there, where each instruction
 * costs ~50x; the native run (ctest) keeps the full case. */
static inline int ur_test_under_valgrind(void)
{
    return getenv("UNROLL_UNDER_VALGRIND") != NULL;
}

#endif
