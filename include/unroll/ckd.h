/* Checked size arithmetic (docs/conventions.md §4). Each returns nonzero on overflow and then
 * leaves *out unspecified; every size or offset computed from input goes through these. */
#ifndef UNROLL_CKD_H
#define UNROLL_CKD_H

#include <stddef.h>
#include <stdint.h>

static inline int ur_ckd_add(size_t *out, size_t a, size_t b)
{
    return __builtin_add_overflow(a, b, out);
}

static inline int ur_ckd_mul(size_t *out, size_t a, size_t b)
{
    return __builtin_mul_overflow(a, b, out);
}

static inline int ur_ckd_add64(uint64_t *out, uint64_t a, uint64_t b)
{
    return __builtin_add_overflow(a, b, out);
}

static inline int ur_ckd_mul64(uint64_t *out, uint64_t a, uint64_t b)
{
    return __builtin_mul_overflow(a, b, out);
}

#endif
