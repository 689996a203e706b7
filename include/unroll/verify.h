/* `unroll verify`: an independent check of an unrolled checkpoint against the scanned one.
 *
 * The correspondence is worked out from the output's own names and shapes, not from the
 * plan (src/maxtext/plan.c), so a mistake in the plan shows up here:
 *
 *   output P                  <- input P (same shape), cast
 *   output D/X_<g>/R          <- input D/X/R, layer g on the axis whose removal gives the
 *                                output shape and whose length is the group's layer count
 *   output D/layers_<g>/R     <- input D/layers/layers_<j>/R (or layer_<j>, or
 *                                D/scanned_blocks/layers_<j>/R), block b, where
 *                                g = H + b*K + j (K sub-layers per block, H unscanned
 *                                D/layers_<i> before the blocks), or
 *                                D/layers_remainder/layers_<j>/R for the layers after the
 *                                last block
 *   output D/layers_<g>/R     <- a pipeline stack D/pipeline_module/layers/... of shape
 *                                [R?, S, ..., lps?, ...], g = (r*S + s)*lps + j, then
 *                                D/layers_outside_pipeline/R for the layers after it
 *   output D/layers_<g>/R     <- gemma4 D/scanned_blocks/local_layers/R (two axes: block b,
 *                                local i, g = 6b + i) and D/scanned_blocks/global_layer/R
 *                                (g = 6b + 5)
 *
 * "the cast": float leaves must be bfloat16 and equal ur_tensor_cast_* of the input; other
 * dtypes are copied unchanged. The model path P is the leaf's path without its wrapper
 * (params/params/..., params/..., model/.../value, [base/].../value); optimizer state, step,
 * nnx_aux and RNG variables of the input are not compared. A Linen-layout output must hold
 * step = 0 and opt_state = {}.
 *
 * Values are compared one output chunk at a time (the matching box of the input is read with
 * ur_zarr_array_read_box), so memory stays at about two output chunks. */
#ifndef UNROLL_VERIFY_H
#define UNROLL_VERIFY_H

#include "unroll/config.h"
#include "unroll/dtype.h"
#include "unroll/err.h"
#include "unroll/orbax.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    UR_VERIFY_VALUE,   /* an element differs */
    UR_VERIFY_MISSING, /* an output leaf the input calls for is absent */
    UR_VERIFY_EXTRA,   /* an output leaf with no source in the input */
    UR_VERIFY_SHAPE,   /* shape does not fit the source (or no layer axis fits) */
    UR_VERIFY_DTYPE,   /* dtype is not the cast of the source's */
    UR_VERIFY_KIND     /* array vs empty entry, or a wrong step / opt_state */
} ur_verify_issue_kind;

typedef struct {
    ur_verify_issue_kind kind;
    char leaf[512];   /* the output leaf ("a/b/c"), for MISSING the absent one */
    char source[600]; /* where the expected value comes from, e.g. "decoder/layers/x[layer 2,
                       * axis 1]"; "" when there is none */
    int rank;         /* VALUE: the element's index in the output leaf */
    uint64_t index[UR_MAX_RANK];
    char expected[128]; /* VALUE: "0x3f80 (1)"; SHAPE/DTYPE/KIND: what was expected */
    char got[128];
} ur_verify_issue;

typedef struct {
    /* Preferred layer axis when several axes fit (as MaxText's param_scan_axis); default 1. */
    int64_t param_scan_axis;
    /* > 0: the unrolled layers of all groups of the same parent must add up to this (the
     * config's num_decoder_layers); 0: not checked. */
    int64_t num_decoder_layers;
    size_t max_issues; /* issues kept in the report (0: 20); all are counted */
    /* Input bytes decoded at a time per thread when the output's chunks allow it (0: 16 MiB;
     * src/verify/verify_compare.h); smaller in tests, to cut chunks into pieces. */
    uint64_t piece_bytes;
} ur_verify_opts;

typedef struct {
    size_t leaves_out; /* output leaves seen */
    size_t leaves_in; /* input leaves that must appear in the output */
    size_t arrays_compared; /* output arrays whose values were compared */
    uint64_t elements; /* elements compared */
    uint64_t elements_bad; /* elements that differ */
    uint64_t chunks_decoded; /* input chunks decoded (each once per group of output leaves that
                              * come from it: src/verify/verify_compare.h) */
    size_t n_issues_total; /* every issue found */
    size_t n_issues; /* kept (first ones) */
    ur_verify_issue *issues; /* owned; ur_verify_report_dispose */
} ur_verify_report;

/* Defaults: param_scan_axis 1, num_decoder_layers 0, max_issues 20. */
void ur_verify_opts_init(ur_verify_opts *opts);

/* Compare every leaf of `out` with the input. Returns UR_OK when the check ran (whatever it
 * found: rep->n_issues_total == 0 means every leaf matches); a negative code when it could
 * not (I/O: UR_EIO/UR_ENOTFOUND, damaged data: UR_ECORRUPT, UR_ENOMEM). `rep` is filled in
 * either case and must be disposed. */
int ur_verify_run(ur_verify_report *rep, ur_orbax_ckpt *in, ur_orbax_ckpt *out,
                  const ur_verify_opts *opts, ur_err *err);

void ur_verify_report_dispose(ur_verify_report *rep);

/* A one-line description of an issue, into buf (truncated to n). Returns buf. */
char *ur_verify_issue_format(const ur_verify_issue *is, char *buf, size_t n);

/* ---- a Hugging Face folder (src/verify/verify_hf.c) --------------------------------------
 * `unroll to_huggingface`'s output against the input: each of the n tensors `t` (what the
 * export's plan says the folder holds: name, dtype, shape, its MaxText parameter, its
 * rearrangement and arithmetic; unroll/hf.h) must be in the folder's shards (the index's, or
 * model.safetensors) with that dtype and shape, and hold, element by element, the parameter's
 * slice of the input (found by the verifier's own pairing, as for an Orbax output), cast,
 * with its arithmetic, at the place its rearrangement gives (computed here element by element,
 * not by the export's code); a tensor the folder holds beyond them is extra. Memory: one piece
 * of a tensor (piece_bytes) and its input box. Returns as ur_verify_run. */
struct ur_hf_tensor_info;
struct ur_kvstore;
int ur_verify_hf_run(ur_verify_report *rep, ur_orbax_ckpt *in, const struct ur_hf_tensor_info *t,
                     size_t n, struct ur_kvstore *folder, const ur_verify_opts *opts, ur_err *err);

/* ---- `unroll verify`'s settings (src/verify/verify_config.c) --------------------------- */

/* param_scan_axis and num_decoder_layers for ur_verify_run: from the config `config`
 * with `overrides` (read as `unroll` reads them, environment `envp`), or, without a config,
 * from the overrides alone, where only param_scan_axis=N and num_decoder_layers=N
 * (base_num_decoder_layers=N) are accepted. Other fields of `vo` are left alone.
 * Errors: UR_EINVAL (an unknown key or a value that is not an integer), those of
 * ur_config_load. */
int ur_verify_config_read(ur_verify_opts *vo, const char *config, const char *const *overrides,
                          size_t n_overrides, const char *const *envp, ur_err *err);

#endif
