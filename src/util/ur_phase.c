/* Phase counters (unroll/phase.h): relaxed atomic sums, written by every worker, read once
 * at the end of the run. */
#define _POSIX_C_SOURCE 200809L
#include "unroll/phase.h"

#include "unroll/clock.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Atomic uint64_t wall_sum[UR_PHASE_N];
static _Atomic uint64_t cpu_sum[UR_PHASE_N];
static atomic_int state; /* 0: not read yet, 1: off, 2: on */

int ur_phase_on(void)
{
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s == 0) {
        const char *v = getenv("UNROLL_PHASES");
        s = v != NULL && v[0] != '\0' && strcmp(v, "0") != 0 ? 2 : 1;
        atomic_store_explicit(&state, s, memory_order_relaxed);
    }
    return s == 2;
}

void ur_phase_begin(ur_phase_mark *m)
{
    if (!ur_phase_on()) {
        return;
    }
    m->wall_ns = ur_clock_mono_ns();
    m->cpu_ns = ur_clock_thread_cpu_ns();
}

static uint64_t since(int64_t now, int64_t then)
{
    return now > then ? (uint64_t)(now - then) : 0;
}

void ur_phase_end(ur_phase p, const ur_phase_mark *m)
{
    if (!ur_phase_on() || p < 0 || p >= UR_PHASE_N) {
        return;
    }
    atomic_fetch_add_explicit(&wall_sum[p], since(ur_clock_mono_ns(), m->wall_ns),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&cpu_sum[p], since(ur_clock_thread_cpu_ns(), m->cpu_ns),
                              memory_order_relaxed);
}

void ur_phase_totals(uint64_t wall_ns[UR_PHASE_N], uint64_t cpu_ns[UR_PHASE_N])
{
    for (int p = 0; p < UR_PHASE_N; p++) {
        wall_ns[p] = atomic_load_explicit(&wall_sum[p], memory_order_relaxed);
        cpu_ns[p] = atomic_load_explicit(&cpu_sum[p], memory_order_relaxed);
    }
}
