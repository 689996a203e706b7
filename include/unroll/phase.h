/* Where a run's time goes, for the benchmark (src/util/ur_phase.c).
 *
 * With UNROLL_PHASES set in the environment (to anything but "" or "0"), the workers add the
 * wall and thread-CPU time of each step (reading and decoding an input chunk, casting,
 * encoding, handing the encoded chunk to the output, the data-file writer's writes) to
 * process-wide counters, and `unroll` prints them at the end. Without it each mark is one
 * test of a flag: the counters cost nothing in ordinary runs. The counters are sums over
 * threads, so with T threads they can add up to T times the run's wall time. */
#ifndef UNROLL_PHASE_H
#define UNROLL_PHASE_H

#include <stdint.h>

typedef enum {
    /* an input chunk's read call: page faults (disk), zstd decoding, and the fused cast or
     * split it calls back (UR_PHASE_CAST_FUSED) */
    UR_PHASE_READ,
    UR_PHASE_CAST_FUSED, /* casting or splitting rows as they are decoded (inside READ) */
    UR_PHASE_CAST,       /* casting or splitting a decoded slab (not fused) */
    UR_PHASE_ENCODE,     /* zstd encoding and shard framing of output chunks */
    UR_PHASE_COMMIT,     /* handing encoded chunks to the output (waits when the writer lags) */
    UR_PHASE_WRITE,      /* the data-file writer thread's pwrite calls */
    UR_PHASE_N
} ur_phase;

typedef struct {
    int64_t wall_ns;
    int64_t cpu_ns; /* this thread's CPU time */
} ur_phase_mark;

/* 1 when UNROLL_PHASES asks for the counters (read once). */
int ur_phase_on(void);

/* Start timing on this thread (nothing when the counters are off). */
void ur_phase_begin(ur_phase_mark *m);

/* Add the time since `m` to phase p's counters. */
void ur_phase_end(ur_phase p, const ur_phase_mark *m);

/* The counters so far, in nanoseconds, summed over threads. */
void ur_phase_totals(uint64_t wall_ns[UR_PHASE_N], uint64_t cpu_ns[UR_PHASE_N]);

#endif
