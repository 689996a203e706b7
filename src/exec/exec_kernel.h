/* The executor's kernels: how one kept input leaf is cut into work items and how an item's
 * input bytes become encoded output chunks (a cast, or a split along the layer axes), fed by
 * exec.c through the scheduler and encoded by the output sink.
 *
 * A chunk is processed in slabs: slab = the chunk's box [origin, origin + slab_shape) with
 * extent 1 on the axes before `k`, `h` on axis k and the whole chunk after k, so every slab is
 * one contiguous run of the chunk's C-order bytes. When the chunk fits the worker's share of
 * the memory budget the slab is the whole chunk (k = 0, h = chunk_shape[0]); otherwise the
 * chunk is streamed slab by slab. The output chunk shape is the slab shape without the layer
 * axes, so each slab yields whole output chunks. */
#ifndef UR_EXEC_KERNEL_H
#define UR_EXEC_KERNEL_H

#include "unroll/buf.h"
#include "unroll/plan.h"
#include "unroll/sink.h"
#include "unroll/tensor.h"
#include "unroll/zarr.h"

/* A leaf being worked on. Only the leaves with items in flight have one. */
typedef struct ur_kern_task {
    const ur_plan_action *act;
    ur_zarr_info info;   /* of the input array */
    int axis;            /* UNSTACK: the (last) layer axis, else -1 */
    int n_axes;          /* UNSTACK: layer axes (several for pipeline stacks) */
    int axes[UR_PLAN_MAX_LAYER_AXES];
    uint64_t lstride[UR_PLAN_MAX_LAYER_AXES]; /* weight of each in the output index */
    uint8_t is_layer_axis[UR_MAX_RANK];
    int k;               /* slab axis (-1 for rank 0) */
    uint64_t slab_shape[UR_MAX_RANK];
    uint64_t slab_grid[UR_MAX_RANK + 1]; /* slabs per chunk along axes 0..k */
    uint64_t slabs_per_chunk;
    size_t slab_bytes;   /* decoded input bytes of one slab */
    uint64_t n_items;    /* info.chunk_count * slabs_per_chunk */
    size_t out_chunk_bytes;
    int out_rank;
    uint64_t out_shape[UR_MAX_RANK];
    uint64_t out_chunk_shape[UR_MAX_RANK];
    /* Set up by exec.c when the leaf's first item is claimed. */
    ur_zarr_array *src;
    ur_sink_array **dst; /* act->n_out */
} ur_kern_task;

/* One work item: a slab of a chunk. */
typedef struct ur_kern_item {
    const ur_kern_task *t;
    uint64_t rel;                 /* index among the task's items */
    uint64_t chunk;               /* linear chunk index within the task */
    uint64_t slab;                /* slab index within the chunk */
    uint64_t idx[UR_MAX_RANK];    /* chunk grid index */
    uint64_t global[UR_MAX_RANK]; /* global coordinates of the slab's first element */
    int beyond_edge;              /* the slab lies wholly in the chunk's edge padding */
} ur_kern_item;

/* An item's encoded output chunks: enc[k] goes to output array ix[k] (a cast encodes once:
 * enc[0] goes to every output). */
typedef struct ur_kern_out {
    size_t n_out;
    ur_buf *enc;
    size_t n_enc, cap_enc;
    size_t *ix;
    size_t cap_ix;
} ur_kern_out;

/* Per-worker scratch, grown as needed and reused across items. */
typedef struct ur_kern_worker {
    ur_buf in;  /* decoded input slab */
    ur_buf out; /* raw output chunks, back to back */
    ur_tensor_view *views; /* fused splits: the output chunks, then their row slices */
    size_t cap_views;
} ur_kern_worker;

/* The geometry of leaf `act` whose input array is `info`: layer axes (checked against the
 * plan), slabs that fit `budget` bytes, output shapes. UR_ECORRUPT / UR_EINTERNAL. */
int ur_kern_task_init(ur_kern_task *t, const ur_plan_action *act, const ur_zarr_info *info,
                      uint64_t budget, ur_err *err);
/* Item `rel` of task t. */
void ur_kern_describe(const ur_kern_task *t, uint64_t rel, ur_kern_item *it);
/* The output chunk grid index of an item's chunks. */
void ur_kern_out_index(const ur_kern_item *it, uint64_t *out_idx);

/* 1 when the item is read and split in one pass (ur_kern_fused). */
int ur_kern_fusable(const ur_kern_item *it);
/* Read the item's chunk from t->src, casting or splitting it as it is decoded, and encode
 * the output chunks into *o. */
int ur_kern_fused(ur_kern_worker *wk, const ur_kern_item *it, const ur_sink *sink, ur_kern_out *o,
                  ur_err *err);
/* The slab is in wk->in (ur_kern_in_buffer): cast or split it and encode into *o. */
int ur_kern_produce(ur_kern_worker *wk, const ur_kern_item *it, const ur_sink *sink,
                    ur_kern_out *o, ur_err *err);
/* wk->in sized for one slab of task t. */
int ur_kern_in_buffer(ur_kern_worker *wk, const ur_kern_task *t, ur_err *err);

void ur_kern_worker_dispose(ur_kern_worker *wk);
void ur_kern_out_dispose(ur_kern_out *o);

#endif
