/* Running a plan: stream every kept input tensor chunk by chunk into an output sink.
 *
 * The unit of work is one input chunk (the zarr read unit). A worker decodes it, splits it
 * into the per-layer output chunks (or casts it, for a copied leaf) with the tensor kernel,
 * and has the sink encode them; output chunking is the input chunking with the layer axis
 * removed, so every input chunk yields whole output chunks and nothing is held across chunks.
 * Workers run on a thread pool; their results are written in a fixed order, so the output does
 * not depend on the thread count. The memory limit is split evenly between the threads (the
 * thread count is not lowered): a chunk larger than a thread's share is streamed in slabs that
 * fit it. A leaf is set up when its first chunk is taken and released when its last is
 * written, so memory does not grow with the number of leaves.
 *
 * Layout: exec_sched.c (ordered-commit scheduler and memory budget, knows nothing of
 * checkpoints), exec_kernel.c (items, casting and splitting), exec.c (leaves through the
 * scheduler into the sink); unroll/sink.h is the sink interface, ur_orbax_sink_init the Orbax
 * writer's. */
#ifndef UNROLL_EXEC_H
#define UNROLL_EXEC_H

#include "unroll/err.h"
#include "unroll/orbax.h"
#include "unroll/plan.h"
#include "unroll/sink.h"

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
    /* Multi-process runs (unroll/job_share.h): with process_count > 1 only this process's
     * share of the work items is run (see ur_exec_share_range); the output arrays of the
     * leaves outside it (or written before resume_from) are begun and finished without
     * chunks, in plan order, so each process's metadata is complete and the same. 0 or 1:
     * all of it. */
    int process_count;
    int process_index;
    /* A run of several units (LoRA: the base and each adapter) cut as one: with
     * share_total > 0 this plan's chunks are bytes [share_before, share_before + its bytes)
     * of a stream of share_total bytes, and the cut is over that stream
     * (ur_exec_share_range_at); 0: over this plan alone. */
    uint64_t share_before, share_total;
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
    /* Input bytes announced ahead of the workers (ur_kvstore_prefetch_range), in run order,
     * across leaves, by a thread of the run: an input over the network fetches them while the
     * workers decode (kvstore_ahead.c). 0: only the chunks just ahead of the workers. */
    uint64_t look_ahead;
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
int ur_exec_run(const ur_plan *plan, ur_orbax_ckpt *in, ur_orbax_writer *w,
                const ur_exec_opts *opts, ur_exec_stats *stats, ur_err *err);

/* The same into any sink (unroll/sink.h): the sink's leaves are added, its arrays begun,
 * written and finished; the caller finishes (or aborts) the sink. */
int ur_exec_run_sink(const ur_plan *plan, ur_orbax_ckpt *in, const ur_sink *sink,
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
 * indices over groups g[0..n). (src/exec/exec_share.c) */
void ur_exec_share_range(const ur_exec_chunks *g, size_t n, int count, int index, uint64_t *lo,
                         uint64_t *hi);

/* The same for a plan whose chunks are bytes [before, before + its bytes) of a stream of
 * `total` bytes cut as one (several units of one run): the chunk that starts at byte B of
 * this plan belongs to process floor((before + B) * count / total). The shares of the
 * units' ranges partition each unit's chunks, whatever the numbers. */
void ur_exec_share_range_at(const ur_exec_chunks *g, size_t n, int count, int index,
                            uint64_t before, uint64_t total, uint64_t *lo, uint64_t *hi);

/* The decoded input bytes a share cut counts for `plan` over `in` (every kept array's
 * chunks: the same sum every process computes; ur_exec_share_range's total). */
int ur_exec_input_bytes(const ur_plan *plan, const ur_orbax_ckpt *in, uint64_t *bytes,
                        ur_err *err);

#endif
