/* A MaxText model as a Hugging Face folder (src/hf/, docs/huggingface.md): which Hugging Face
 * tensor each of the model's parameters becomes and how (a family's table of name patterns and
 * rearrangements, src/hf/hf_family_<name>.c), config.json, the shards and their index, and an
 * output sink (unroll/sink.h) that writes the executor's chunks straight into the shards.
 *
 *   the conversion plan (each kept leaf's unscanned paths, unroll/plan.h)
 *     -> ur_hf_plan_build: the family, each leaf's tensor (name, shape, dtype, rearrangement,
 *        arithmetic), the shards (sorted by name, cut at max_shard_size, as MaxText's exporter
 *        cuts them), config.json
 *     -> ur_hf_sink_open: the shard files created at their full size; each chunk the executor
 *        makes is rearranged, cast and written at its place, from the worker's thread
 *     -> ur_hf_write_meta: config.json, model.safetensors.index.json (several shards)
 *
 * No I/O here but the staged folder's files. What the folder is published as, and how, is the
 * job room's (unroll/job.h: ur_job_hf_run). */
#ifndef UNROLL_HF_H
#define UNROLL_HF_H

#include "unroll/config.h"
#include "unroll/dtype.h"
#include "unroll/err.h"
#include "unroll/plan.h"
#include "unroll/sink.h"

#include <stddef.h>
#include <stdint.h>

/* MaxText's exporter's shard size (3 GiB). */
#define UR_HF_MAX_SHARD_DEFAULT ((uint64_t)3 << 30)

typedef struct {
    ur_dtype weight_dtype;       /* every tensor's dtype: float32 or bfloat16 (weight_dtype) */
    uint64_t max_shard_size;     /* bytes; 0: UR_HF_MAX_SHARD_DEFAULT */
    int override_architecture;   /* --override_model_architecture */
    /* The architecture MaxText's model file gives model_name (the model's Hugging Face
     * checkpoint), when it has one: a run whose settings differ is refused unless
     * override_architecture (as MaxText's exporter refuses). NULL: none to compare with. */
    const ur_settings *canonical;
} ur_hf_opts;

typedef struct ur_hf_plan ur_hf_plan;

/* The export of the model whose conversion plan is `plan` (its actions' output paths are the
 * unscanned parameters; `leaves` its input leaves, index for index). UR_EUNSUPPORTED, naming
 * it: a model whose family has no Hugging Face mapping, a parameter the family does not map;
 * UR_EINVAL: an architecture that differs from the model's Hugging Face checkpoint
 * (mismatches named) without override_architecture, a weight_dtype other than float32 or
 * bfloat16, a tensor the family expects and the checkpoint lacks. */
int ur_hf_plan_build(ur_hf_plan **out, const ur_plan *plan, const ur_plan_leaf *leaves,
                     const ur_settings *s, const ur_hf_opts *o, ur_err *err);
void ur_hf_plan_free(ur_hf_plan *p);

/* What the plan writes, for the report and the dry run. */
typedef struct {
    const char *family;       /* "llama" */
    const char *architecture; /* "LlamaForCausalLM" */
    size_t n_tensors, n_shards;
    uint64_t bytes;           /* the tensors' bytes */
} ur_hf_summary;
void ur_hf_plan_summary(const ur_hf_plan *p, ur_hf_summary *out);

/* The arithmetic a tensor undergoes after the cast to its dtype, in float32, rounded back
 * (the value MaxText stores -> the one transformers expects). */
typedef enum {
    UR_HF_ARITH_NONE = 0,
    UR_HF_ARITH_MUL_SQRT_HEAD_DIM, /* x * float32(sqrt(head_dim)), head_dim the source's last
                                    * axis: MaxText folds 1/sqrt(head_dim) into the query */
    UR_HF_ARITH_SUB_ONE,           /* x - 1: a Gemma RMSNorm scale (Hugging Face's plus one) */
    UR_HF_ARITH_DIV_SQRT_EMB_BF16, /* x / bfloat16(sqrt(emb)), as jax divides: times the float32
                                    * reciprocal (an embedding MaxText stores scaled) */
    UR_HF_ARITH_DIV_SQRT_EMB       /* the same with float32(sqrt(emb)) */
} ur_hf_arith;

/* Tensor i (in name order), for a dry run and for `unroll verify`: its name, shape, dtype,
 * the MaxText parameter it comes from (path, shape, dtype), its rearrangement and arithmetic;
 * 0 past the last. */
typedef struct ur_hf_tensor_info {
    const char *name;
    const char *source;  /* "decoder/layers_3/self_attention/query/kernel" */
    const char *pattern; /* "e h (k 2) -> (h 2 k) e" */
    const char *op;      /* "", "x * sqrt(head_dim)", ... */
    ur_hf_arith arith;   /* the same */
    ur_dtype dtype;
    int rank;
    const uint64_t *shape;
    const char *shard;   /* the file it goes to */
    /* the parameter's index on axis 0 (its experts) whose slice the tensor is, the
     * rearrangement applying to that slice; -1: the whole parameter */
    int64_t expert;
    /* piece `part` of `parts` joined into the tensor, runs of `inner` elements of it at `at`
     * of runs of `run` of the tensor (ur_rearrange_box_join: element x of the piece's
     * rearrangement is the tensor's (x / inner) * run + at + x % inner); parts 1: the whole
     * tensor. The tensor is listed once per piece, each with its parameter and pattern (a
     * piece of a fused kernel keeps a range of it: "b[lo:hi]"). */
    int parts, part;
    uint64_t inner, run, at;
    int src_rank;
    const uint64_t *src_shape;
    ur_dtype src_dtype;
    /* a vocabulary resized (MaxText pads Gemma's): the parameter's axis 0 counts vocab_rows
     * rows in the tensor (0: as it is), of which the first src_rows come from it (the rest,
     * if any, zeros) */
    uint64_t vocab_rows;
    uint64_t src_rows;
} ur_hf_tensor_info;
int ur_hf_plan_tensor(const ur_hf_plan *p, size_t i, ur_hf_tensor_info *out);

/* A sink writing the plan's shards into the directory `dir` (which exists). Its arrays are the
 * conversion plan's output leaves; a leaf the plan does not export is accepted and dropped.
 * finish fails (UR_EINTERNAL) when a tensor was not written whole. */
int ur_hf_sink_open(ur_sink *out, ur_hf_plan *p, const char *dir, ur_err *err);

/* config.json and, with several shards, model.safetensors.index.json, into `dir`. */
int ur_hf_write_meta(const ur_hf_plan *p, const char *dir, ur_err *err);

/* A staged folder is complete: config.json a JSON object, every shard of the index (or
 * model.safetensors) present with a header that reads and covers the file. UR_EIO naming what
 * is missing or cut short. */
int ur_hf_check_folder(const char *dir, ur_err *err);

/* The commit phase of a file of the folder, for an upload to an object store
 * (ur_job_upload_opts.phase_of): the shards first (in parallel), then the other files, then
 * config.json, then the file that names the weights (the index, or the only shard) last, so
 * that a folder cut short never looks loadable. */
int ur_hf_commit_phase(const char *key);

#endif
