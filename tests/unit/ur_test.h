/* Shared include for cmocka tests: cmocka needs these headers before its own. */
#ifndef UNROLL_UR_TEST_H
#define UNROLL_UR_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#endif
