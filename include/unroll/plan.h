/* The plan (src/maxtext/): the mapping from the leaves of an input checkpoint to the leaves of the
 * param-only output (which leaves are dropped, copied, or unstacked along their layer axis into
 * one leaf per layer), as MaxText's generate_param_only_checkpoint.py with force_unroll=true does
 * it (docs/maxtext-checkpoints.md §3, §6).
 *
 * No I/O happens here: the plan is a pure function of the input's leaf list and the
 * settings (unroll/config.h). */
#ifndef UNROLL_PLAN_H
#define UNROLL_PLAN_H

#include "unroll/config.h"
#include "unroll/dtype.h"
#include "unroll/err.h"
#include "unroll/pool.h"

#include <stddef.h>
#include <stdint.h>

/* ---- plan (src/maxtext/plan.c) ----------------------------------------------------------- */

typedef enum {
    UR_PLAN_INPUT_FULL_STATE, /* load_full_state_path: a training state with opt_state */
    UR_PLAN_INPUT_PARAMS, /* load_parameters_path: a param-only checkpoint */
    UR_PLAN_INPUT_LORA /* one LoRA adapter under lora_input_adapters_path */
} ur_plan_input;

/* One leaf of the input checkpoint. */
typedef struct {
    const char *const *path; /* key components, e.g. {"params","params","decoder",...} */
    size_t path_len;
    /* Per component: 1 for a list index (Orbax key type SEQUENCE), 0 for a dict key; NULL
     * when every component is a dict key. The output keeps them: a list stays a list. */
    const unsigned char *seq;
    ur_dtype dtype; /* UR_DT_INVALID: not an array (empty {} / None entry, opaque value) */
    /* For a non-array leaf: the empty entry it is (carried into the output as the same
     * entry, e.g. the None leaves of a LoRA adapter), or UR_PLAN_NOT_PLACEHOLDER. */
    int placeholder;
    size_t rank; /* at most UR_MAX_RANK */
    /* rank entries (NULL when rank is 0), borrowed like the path: a checkpoint of 100,000
     * leaves keeps its shapes once, not in a rank-32 array per leaf. */
    const uint64_t *shape;
    int has_spec; /* a partition spec was stored for this leaf */
    /* rank entries when has_spec (else NULL): the mesh axis name, NULL for None, tuple
     * entries joined by ',' ("fsdp,expert"). Entries past the stored spec's length are NULL. */
    const char *const *spec;
} ur_plan_leaf;

/* Most layer axes one leaf can be unstacked over (pipeline: repeats, stage, layers_per_stage). */
#define UR_PLAN_MAX_LAYER_AXES 4

/* ur_plan_leaf.placeholder */
enum {
    UR_PLAN_NOT_PLACEHOLDER = 0,
    UR_PLAN_PLACEHOLDER_NONE,
    UR_PLAN_PLACEHOLDER_EMPTY_DICT,
    UR_PLAN_PLACEHOLDER_EMPTY_LIST
};

typedef enum {
    UR_PLAN_DROP, /* not in the output */
    UR_PLAN_COPY, /* out[0] = leaf (cast) */
    UR_PLAN_UNSTACK, /* out[i] = take(leaf, i, axis) (cast), i < n_out; a slice whose out[i]
                      * has len 0 is discarded (not written: the multi-token-prediction
                      * block's layers an unscanned MTP layer has no place for) */
    UR_PLAN_REPLICATE /* an empty entry ({}, None) of a scanned group: the same entry in
                       * every layer. An array without a layer axis is an error instead. */
} ur_plan_kind;

/* Owned by the plan's pool: components are interned, so equal ones share an address. */
typedef struct {
    const char *const *comp;
    size_t len;
    const unsigned char *seq; /* NULL, or per component 1 for a list index (ur_plan_leaf.seq) */
} ur_plan_path;

typedef struct {
    ur_plan_kind kind;
    const char *why; /* DROP: static reason ("opt_state", "step", "nnx_aux", "rng", ...) */
    ur_dtype out_dtype; /* bfloat16 for float inputs, else the input dtype; UR_DT_INVALID
                         * for a placeholder leaf (written as the same empty entry) */
    size_t axis; /* UNSTACK: the layer axis (with n_axes > 1: axes[n_axes - 1]) */
    /* UNSTACK over several layer axes (pipeline stacks [repeats, stages, ...,
     * layers_per_stage, ...], nested scans): n_axes > 1 and axes[] increasing. out[] is then
     * indexed by the C-order linear index of (i_axes[0], ..., i_axes[n_axes-1]) and n_out is
     * the product of those axes' lengths. n_axes is 0 or 1 for a single layer axis. */
    size_t n_axes;
    size_t axes[UR_PLAN_MAX_LAYER_AXES];
    int group; /* UNSTACK/REPLICATE: index into ur_plan.groups, else -1 */
    size_t n_out;
    ur_plan_path *out; /* n_out output key paths (UNSTACK: len 0 for a discarded slice) */
} ur_plan_action;

typedef enum {
    UR_PLAN_EXTRA_ZERO_SCALAR, /* `step` = 0 */
    UR_PLAN_EXTRA_EMPTY_DICT /* `opt_state` = {} */
} ur_plan_extra_kind;

typedef struct {
    ur_plan_extra_kind kind;
    ur_plan_path path;
} ur_plan_extra;

typedef enum {
    UR_PLAN_LAYOUT_LINEN, /* params/params/... (+ step, opt_state, nnx_aux) */
    UR_PLAN_LAYOUT_NNX_LEGACY, /* model/.../value + optimizer/... */
    UR_PLAN_LAYOUT_NNX_PARAMS, /* .../value, optionally under base/ (NNX decode layout) */
    UR_PLAN_LAYOUT_LORA_LINEN, /* params/params/... adapter */
    UR_PLAN_LAYOUT_LORA_NNX /* params/... adapter (single-nested) */
} ur_plan_layout;

/* A scanned group decoder/<name>, as a layout family (src/maxtext/family_*.c) sets it up.
 * Plain (cycle 1): slice i of a leaf decoder/<name>/R is
 * decoder/<name>_<i>/R. Blocks of `cycle` = K sub-layers (decoder/<name>/layers_<j>/R or
 * .../layer_<j>/R): slice b of sub-layer j is decoder/<out_name>_<first_out + b*K + j>/R. */
typedef struct {
    const char *name; /* "layers", "dense_layers", "moe_layers", "scanned_blocks" */
    int64_t n_layers; /* expected length of the layer axis (blocks when cycle > 1) */
    size_t n_leaves; /* leaves unstacked or replicated */
    size_t n_axis[UR_MAX_RANK]; /* how many leaves were sliced on each axis */
    int present; /* the input has decoder/<name> */
    int64_t cycle; /* sub-layers per block; 1: a plain group */
    int64_t first_out; /* global index of the first output layer (deepseek4 hash layers) */
    const char *out_name; /* output layer prefix ("layers" for a block group) */
} ur_plan_group;

typedef struct {
    size_t leaves_in, leaves_kept, leaves_dropped;
    size_t leaves_copied, leaves_unstacked, leaves_replicated;
    size_t leaves_out; /* array leaves written (extras not counted) */
    uint64_t bytes_in; /* all input array leaves */
    uint64_t bytes_read; /* kept input leaves */
    uint64_t bytes_out; /* output array leaves */
    /* Of the dropped: model arrays the output's model has no place for (DeepSeek's Engram
     * weights), and why; the run says so (a note), not only the dry run's plan. */
    size_t leaves_left_out;
    const char *left_out_why;
} ur_plan_summary;

typedef struct {
    ur_plan_layout layout;
    int unrolled; /* scan_layers && force_unroll */
    int nnx_output; /* NNX decode layout ({value} leaves, no params wrapper) */
    size_t n_actions;
    ur_plan_action *actions; /* one per input leaf, in input order */
    size_t n_extras;
    ur_plan_extra *extras;
    size_t n_groups;
    ur_plan_group groups[3]; /* the most: pipelined DeepSeek (stack, dense, MoE outside) */
    ur_plan_summary summary;
    ur_pool pool; /* the output paths: their arrays and components */
} ur_plan;

/* The scan (layer) axis of a leaf: the axis whose spec entry names layers_per_stage, layers
 * or circular_repeats, or a mesh axis the settings' logical_axis_rules map one of those to;
 * else 0 for a rank-1 leaf; else param_scan_axis when rank > param_scan_axis; else -1 (not
 * scanned). Used for base parameters and LoRA adapters alike. */
int ur_plan_scan_axis(const ur_plan_leaf *leaf, const ur_settings *s);

/* Build the plan for `n` input leaves. Owned by the caller (ur_plan_free).
 * Layer groups (docs/maxtext-checkpoints.md §5): decoder_block deepseek -> dense_layers,
 * moe_layers; gemma3 -> blocks of 6 in decoder/layers + decoder/layers_remainder;
 * deepseek4 -> first_num_hash_layers unscanned layers + blocks of 2 in scanned_blocks;
 * gemma4 -> scanned_blocks/{local_layers (block axis at param_scan_axis, the nested scan's 5
 * local layers right after it), global_layer} (block b: layers 6b..6b+4, 6b+5) +
 * layers_remainder/local_layers (N % 6); pipeline parallelism (ici * dcn pipeline > 1) ->
 * decoder/pipeline_module + layers_outside_pipeline (src/maxtext/family_pipeline.c);
 * inhomogeneous_layer_cycle_interval K > 1 -> blocks of K in decoder/layers; else layers.
 * Each family is a descriptor of its own, src/maxtext/family_<name>.c, chosen in family.c.
 * UR_EINVAL: a full-state input without opt_state, a missing layer group, a leaf whose
 * layer axis length differs from its group's layer count (message names leaf, shape, axis
 * and expected length), a leaf of a block group outside layers_<j>/layer_<j> (j < K), a
 * layer count the blocks do not divide, an unrecognised layout, a pipeline_module the
 * pipeline settings do not fit; UR_EUNSUPPORTED: pipeline stacks of deepseek, gemma3/4,
 * deepseek4 or inhomogeneous cycles; UR_EINVAL also: DeepSeek Engram chunks the config does not
 * describe (engram_layers), a family's config key of s->config (ur_plan_validate_keys) of the
 * wrong type or out of range (message names the key); UR_ENOMEM. */
int ur_plan_build(ur_plan **out, const ur_plan_leaf *leaves, size_t n, const ur_settings *s,
                  ur_plan_input input, ur_err *err);
/* The config keys only some layout families read (first_num_dense_layers, the pipeline keys,
 * engram_layers, ...: each family declares its own, src/maxtext/family_<name>.c), read from
 * s->config and checked as ur_plan_build checks them, for a caller that wants a bad value
 * refused right after ur_config_load, before any I/O. UR_EINVAL: a value of the wrong type
 * or out of range (message names the key); UR_ENOMEM. */
int ur_plan_validate_keys(const ur_settings *s, ur_err *err);
void ur_plan_free(ur_plan *plan);

/* "a/b/c" for a path, into buf (truncated to n). Returns buf. */
char *ur_plan_path_format(const char *const *comp, size_t len, char *buf, size_t n);

#endif
