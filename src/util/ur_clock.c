/* Wall-clock time (unroll/clock.h). */
#define _POSIX_C_SOURCE 200809L
#include "unroll/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

int64_t ur_clock_now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) {
        return 0;
    }
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The reproducible-builds convention: a decimal count of seconds, nothing else; anything
 * else (empty, negative, trailing text, past 2262 in nanoseconds) is ignored. */
int ur_clock_fixed_ns(int64_t *ns)
{
    const char *v = getenv("SOURCE_DATE_EPOCH");
    char *end = NULL;
    if (v == NULL || *v < '0' || *v > '9') {
        return 0;
    }
    errno = 0;
    unsigned long long s = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || s > (unsigned long long)(INT64_MAX / 1000000000)) {
        return 0;
    }
    *ns = (int64_t)s * 1000000000;
    return 1;
}

int64_t ur_clock_stamp_ns(void)
{
    int64_t ns;
    return ur_clock_fixed_ns(&ns) ? ns : ur_clock_now_ns();
}
