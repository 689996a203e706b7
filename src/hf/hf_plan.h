/* The export's plan as the room's files see it (not installed). */
#ifndef UR_HF_PLAN_H
#define UR_HF_PLAN_H

#include "hf_impl.h"

#include "unroll/safetensors.h"

#include <stdatomic.h>

/* A parameter of the model: one output leaf of the conversion plan. */
typedef struct {
    char *sink_path; /* the leaf's path as the sink is told it, '/'-joined */
    char *path;      /* below the model: "decoder/layers_0/mlp/wi_0/kernel" */
    ur_dtype dtype;
    int rank;
    uint64_t shape[UR_MAX_RANK];
    /* its tensors (indexes into t, by name): one, or the pieces of a fused kernel */
    size_t tensor[HF_MAX_PIECES];
    int n_tensors;
    /* split by experts (an "{e}" rule): expert e's tensor is experts[e], one per index of
     * the parameter's axis 0, and tensor[0] is expert 0's; NULL: not split */
    size_t *experts;
} hf_param;

typedef struct {
    size_t param;
    int64_t expert; /* the parameter's index on axis 0 it is the slice of; -1: all of it */
    const hf_rule *rule;
    char *name;
    char *pattern;    /* the rule's, its sizes ("{name}") written out */
    ur_rearrange re;  /* from the parameter's shape to the tensor's (its piece's) */
    ur_dtype in_dtype;
    ur_dtype dtype;
    ur_tensor_op op;
    float op_value;
    size_t shard;
    uint64_t offset;  /* of its bytes in the shard file */
    uint64_t nbytes;
    uint64_t keep;    /* input rows (axis 0) written, the rest left out; 0: all */
    uint64_t placed;  /* the bytes the input gives it (less than nbytes where zeros pad it,
                      * or where it is one of the pieces joined into the tensor) */
    /* piece `part` of `parts` joined into the tensor (ur_rearrange_box_join: runs of `inner`
     * elements of the piece at `at` of runs of `run` of the tensor; parts 1: the whole
     * tensor): each piece is an entry of its own, by name then piece, and the first (piece 0)
     * stands for the tensor in the shards, the layout and the index */
    int parts, part;
    uint64_t inner, run, at;
    uint64_t shape[UR_MAX_RANK]; /* the tensor's (the pieces' re.out_shape, joined) */
} hf_tensor;

typedef struct {
    char *file; /* "model-00001-of-00002.safetensors" */
    ur_st_layout layout;
} hf_shard;

struct ur_hf_plan {
    const hf_family *fam;
    hf_model model;
    hf_param *params;
    size_t n_params, cap_params;
    ur_strmap by_sink_path;
    hf_tensor *t; /* sorted by name, then part */
    size_t n, cap;
    size_t n_tensors; /* the folder's: t less the later parts */
    hf_shard *shards;
    size_t n_shards;
    ur_dtype dtype;
    uint64_t bytes;
    hf_json *config;
};

/* The '/'-joined path of len components (ur_free it), NULL when out of memory. */
char *hf_sink_path(const char *const *comp, size_t len);

#endif
