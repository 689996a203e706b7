/* The executor's scheduler and memory budget, which know nothing of checkpoints: items
 * first_item .. n_items-1 are claimed in order by a pool of workers, worked on
 * concurrently, and committed strictly in order (a ticket per item), so what the commits
 * produce does not depend on the number of threads.
 *
 * Each item travels in a job (an object of the caller's, made by job_new): claim fills it
 * under the scheduler's lock, run works on it outside the lock, commit stores it. A worker
 * whose item is done before its turn parks the job (up to `threads` parked jobs) and takes
 * another from the pool, so it goes on working; it waits only when every parking place is
 * taken. Jobs are reused, never freed during a run, so the buffers they hold are too. */
#ifndef UR_EXEC_SCHED_H
#define UR_EXEC_SCHED_H

#include "unroll/err.h"

#include <signal.h>
#include <stdint.h>

/* Returned (positive) by a callback or a wait that stops because the run failed elsewhere:
 * the first failure is the one reported. */
#define UR_SCHED_STOPPED 1

typedef struct ur_sched ur_sched;

typedef struct ur_sched_ops {
    /* Under the lock, in item order: describe `item` in `job` (no I/O; keep it short). */
    int (*claim)(void *user, ur_sched *s, uint64_t item, void *job, ur_err *err);
    /* Outside the lock, on worker `w` (0 .. threads-1), concurrently with other items. */
    int (*run)(void *user, ur_sched *s, int w, void *job, ur_err *err);
    /* One thread at a time, in item order, outside the lock. */
    int (*commit)(void *user, ur_sched *s, void *job, ur_err *err);
    void *(*job_new)(void *user); /* NULL when out of memory */
    void (*job_free)(void *user, void *job);
} ur_sched_ops;

typedef struct ur_sched_cfg {
    uint64_t n_items;
    /* The items before it are not run (another process's share, or done before a resume):
     * claims and commits start there. 0: all of them. */
    uint64_t first_item;
    int threads; /* >= 1; the calling thread is one of them */
    const ur_sched_ops *ops;
    void *user;
    /* When set and *cancel becomes nonzero, the run stops at the next claim ("interrupted"). */
    const volatile sig_atomic_t *cancel;
} ur_sched_cfg;

/* Run every item from first_item on. UR_OK when all were committed, else the first
 * failure. */
int ur_sched_run(const ur_sched_cfg *cfg, ur_err *err);

/* From a callback: wait until ready(arg), evaluated under the lock, is nonzero; UR_OK, or
 * UR_SCHED_STOPPED when the run has failed. */
int ur_sched_wait(ur_sched *s, int (*ready)(void *arg), void *arg);
/* From a callback: fn(arg) under the lock, then wake every waiter. */
void ur_sched_update(ur_sched *s, void (*fn)(void *arg), void *arg);
/* From a callback: fn(arg) under the lock (a look-up; wakes no one). */
void ur_sched_locked(ur_sched *s, void (*fn)(void *arg), void *arg);
/* From a callback: record a failure (the first one wins) and wake every waiter. */
void ur_sched_fail(ur_sched *s, const ur_err *e);

/* ---- memory budget ---------------------------------------------------------------------- */

/* The memory limit when none is given: 128 MiB per thread, at least `floor`, and at most a
 * quarter of `phys_bytes` (0: unknown) unless that is below `floor`. */
uint64_t ur_sched_default_memory(int threads, uint64_t phys_bytes, uint64_t floor);
/* The machine's memory (0: unknown) and online cores (>= 1). */
uint64_t ur_sched_physical_memory(void);
int ur_sched_cores(void);
/* Each worker's share of `limit` (the limit is split, the thread count is not lowered): at
 * least 16 bytes. */
uint64_t ur_sched_share(uint64_t limit, int threads);

#endif
