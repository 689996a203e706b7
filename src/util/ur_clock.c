/* Wall-clock time (unroll/clock.h). */
#define _POSIX_C_SOURCE 200809L
#include "unroll/clock.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) {
        return 0;
    }
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t ur_clock_now_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

time_t ur_clock_now_s(void)
{
    return time(NULL);
}

int64_t ur_clock_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

double ur_clock_mono_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        return 0.0;
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t ur_clock_thread_cpu_ns(void)
{
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
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
