/* Whole numbers from text: a count in a config override, a resume point or a time in a run's
 * bookkeeping. One strict parser, so that "12x", " 12", "" or a value past the type's range is
 * refused the same way everywhere (strtoll alone takes leading spaces and stops at junk). */
#ifndef UNROLL_NUM_H
#define UNROLL_NUM_H

#include <stddef.h>
#include <stdint.h>

/* The decimal integer that is exactly the n bytes at s (an optional '-', then digits): 0 and
 * *out set, or -1 (*out untouched) when those bytes are anything else or out of range. */
int ur_num_parse_i64(const char *s, size_t n, int64_t *out);

/* The same for an unsigned value (digits only). */
int ur_num_parse_u64(const char *s, size_t n, uint64_t *out);

#endif
