/* Whole numbers from text (include/unroll/num.h). */
#include "unroll/num.h"

int ur_num_parse_u64(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    if (n == 0) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || __builtin_mul_overflow(v, 10u, &v) ||
            __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v)) {
            return -1;
        }
    }
    *out = v;
    return 0;
}

int ur_num_parse_i64(const char *s, size_t n, int64_t *out)
{
    int neg = n > 0 && s[0] == '-';
    uint64_t v;
    if (ur_num_parse_u64(s + neg, n - (size_t)neg, &v) < 0 ||
        v > (uint64_t)INT64_MAX + (uint64_t)neg) {
        return -1;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}
