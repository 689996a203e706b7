/* Running a plan: stream every kept input tensor chunk by chunk into the output checkpoint.
 *
 * The unit of work is one input chunk (the zarr read unit). A worker decodes it, splits it
 * into the per-layer output chunks (or casts it, for a copied leaf) with the tensor kernel,
 * and encodes them; output chunking is the input chunking with the layer axis removed, so
 * every input chunk yields whole output chunks and nothing is held across chunks. Workers
 * run on a thread pool; their results are written in a fixed order, so the output does not
 * depend on the thread count. Peak memory is about threads × (one input chunk + its output
 * chunks, raw and encoded), and the thread count is lowered to fit the memory limit. */
#ifndef UNROLL_PLAN_EXEC_H
#define UNROLL_PLAN_EXEC_H

#include "unroll/err.h"
#include "unroll/orbax.h"
#include "unroll/plan.h"

#include <signal.h>
#include <stdint.h>

typedef struct ur_exec_opts {
    int threads;           /* worker threads; 0: one per online core */
    uint64_t memory_limit; /* bytes of chunk buffers in flight; 0: ur_exec_default_memory */
    /* Called after each work item is written (under the writer's lock, so keep it short). */
    void (*progress)(void *ctx, uint64_t bytes_done, uint64_t bytes_total);
    void *progress_ctx;
    /* When set and *cancel becomes nonzero (a signal handler's flag), the workers stop at
     * their next work item and the run fails with "interrupted". */
    const volatile sig_atomic_t *cancel;
    /* Multi-process runs (unroll/orbax_share.h): with process_count > 1 only this process's
     * share of the work items is run (see ur_exec_share_range); every output array is still
     * created, so each process's metadata is complete. 0 or 1: all of it. */
    int process_count;
    int process_index;
    /* Bytes of input one worker's slab may take; 0: memory_limit / threads. The output chunk
     * shape follows the slabs, so every process of a multi-process run must use the same. */
    uint64_t slab_budget;
    /* Resume (multi-process shares): work items before `resume_from` (a value `piece` was
     * given earlier for this plan) are in the output already and are skipped. */
    uint64_t resume_from;
    /* When set, called every `piece_bytes` of input written, with every item before
     * `next_item` written and no write in progress, to make them durable (a snapshot of the
     * output database); an error stops the run. */
    int (*piece)(void *ctx, uint64_t next_item, ur_err *err);
    void *piece_ctx;
    uint64_t piece_bytes;
} ur_exec_opts;

#define UR_EXEC_DEFAULT_MEMORY ((uint64_t)256 << 20)

/* The memory limit when none is given: 128 MiB per worker thread (so that a worker's share
 * holds a typical Orbax chunk whole however many cores there are), at least
 * UR_EXEC_DEFAULT_MEMORY, and at most a quarter of the machine's memory `phys_bytes` (0:
 * unknown) unless that is below UR_EXEC_DEFAULT_MEMORY. */
uint64_t ur_exec_default_memory(int threads, uint64_t phys_bytes);

typedef struct ur_exec_stats {
    size_t tensors_in;   /* input leaves read */
    size_t tensors_out;  /* output arrays written */
    uint64_t bytes_in;   /* decoded bytes of the input chunks read */
    uint64_t bytes_out;  /* decoded bytes of the output chunks written */
    uint64_t chunks_in;  /* input chunks decoded */
    uint64_t chunks_out; /* output chunks written */
    int threads;         /* worker threads used */
    uint64_t share_bytes; /* decoded input bytes of this process's share */
    uint64_t all_bytes;   /* ... of every share together */
} ur_exec_stats;

/* Create the output leaves of `plan` in `w` (arrays, plus the plan's extras such as step = 0
 * and opt_state = {}) and fill them from `in`. Does not commit the writer: the caller
 * commits on success and aborts on failure. Errors name the input or output tensor. */
int ur_plan_exec_run(const ur_plan *plan, ur_orbax_ckpt *in, ur_orbax_writer *w,
                     const ur_exec_opts *opts, ur_exec_stats *stats, ur_err *err);

/* A run of equal chunks in plan order (one input tensor's). */
typedef struct ur_exec_chunks {
    uint64_t n;           /* chunks */
    uint64_t chunk_bytes; /* decoded bytes of each */
} ur_exec_chunks;

/* The share of process `index` of `count`: the plan's input chunks, in order, cut into
 * `count` contiguous runs of about equal decoded bytes (the chunk that starts at byte B of
 * the plan's `total` belongs to process floor(B * count / total)), so a share is within one
 * chunk's bytes of total / count. A deterministic function of the plan: every process
 * computes the same cut without talking to the others. Sets [*lo, *hi), global chunk
 * indices over groups g[0..n). (src/plan/plan_share.c) */
void ur_exec_share_range(const ur_exec_chunks *g, size_t n, int count, int index, uint64_t *lo,
                         uint64_t *hi);

#endif
