/* Time, in one place (src/util/ur_clock.c): every reading of a clock goes through here.
 *
 * Two kinds of "now": the moment itself (a claim's start time, a progress line), and a
 * timestamp recorded in the output (_CHECKPOINT_METADATA's init and commit times, an OCDBT
 * manifest's commit_time). The second honours SOURCE_DATE_EPOCH (seconds since the epoch, the
 * reproducible-builds convention): with it set, the same input and settings give the same
 * output bytes, timestamps included. */
#ifndef UNROLL_CLOCK_H
#define UNROLL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since the epoch, now (CLOCK_REALTIME; 0 when the clock cannot be read). */
int64_t ur_clock_now_ns(void);

/* A timestamp for the output, in nanoseconds since the epoch: SOURCE_DATE_EPOCH * 1e9 when
 * that variable holds a whole number of seconds, else ur_clock_now_ns(). */
int64_t ur_clock_stamp_ns(void);

/* 1 and *ns = SOURCE_DATE_EPOCH * 1e9 when that variable is set as above, else 0: for a
 * recorded time taken from elsewhere than the clock (a file's mtime) when it is not set. */
int ur_clock_fixed_ns(int64_t *ns);

/* Whole seconds since the epoch, now (time(NULL)): a credential's expiry, a signed request's
 * date, a claim's start. Not for the output (ur_clock_stamp_ns). */
time_t ur_clock_now_s(void);

/* Durations: the monotonic clock, which never goes back when the wall clock is set. In
 * nanoseconds (0 when it cannot be read), and in seconds for a difference of two readings
 * (a progress line's rate, a request's deadline). */
int64_t ur_clock_mono_ns(void);
double ur_clock_mono_s(void);

/* CPU time of the calling thread in nanoseconds (0 when unknown): phase timings. */
int64_t ur_clock_thread_cpu_ns(void);

#endif
