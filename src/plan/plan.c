/* The unroll plan: for every leaf of the input checkpoint, drop it, copy it, or unstack it
 * along its layer axis into one leaf per layer, with the output key paths MaxText's
 * generate_param_only_checkpoint.py writes (docs/maxtext-checkpoints.md §3, §4):
 *
 *   input layout                         kept                     dropped
 *   Linen / current NNX training state   params/params/P,         opt_state, step, RNG state,
 *                                        nnx_aux/model/P (is_aux) other nnx_aux
 *   older NNX training state             model/P/value            optimizer, RNG variables
 *   NNX param-only (decode) checkpoint   [base/]P/value
 *   LoRA adapter                         params/params/P or params/P
 *
 *   output: pure_nnx=true  -> P'/value                       (NNX decode layout)
 *           pure_nnx=false -> params/params/P', step=0, opt_state={}   (Linen decode layout)
 *           LoRA           -> params/params/P' (Linen) or params/P' (NNX), step=0, opt_state={}
 *
 * where P' = P with decoder/<group>/R replaced by decoder/<group>_<i>/R for each layer i when
 * scan_layers and force_unroll are set. Groups: decoder/layers (num_decoder_layers), or for
 * decoder_block=deepseek decoder/dense_layers (first_num_dense_layers) and decoder/moe_layers
 * (the rest, indices restarting at 0). Blocks of sub-layers (inhomogeneous cycles, gemma3,
 * gemma4's nested local_layers scan, deepseek4) and pipeline stacks (decoder/pipeline_module,
 * [repeats,] stages[, layers_per_stage]) map to decoder/layers_<global layer> in the order
 * MaxText runs them (setup_groups, gemma4_leaf, pipe_leaf). */
#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/plan.h"
#include "unroll/tensor.h"

#include <stdio.h>
#include <string.h>

static const char *const k_scan_names[] = {"layers_per_stage", "layers", "circular_repeats"};

/* Does a spec entry ("fsdp" or "fsdp,expert") name `name`? */
static int entry_names(const char *entry, const char *name)
{
    size_t n = strlen(name);
    const char *p = entry;
    if (!entry) {
        return 0;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && memcmp(p, name, n) == 0) {
            return 1;
        }
        if (!comma) {
            return 0;
        }
        p = comma + 1;
    }
}

static int spec_axis_of(const ur_plan_leaf *leaf, const char *name)
{
    for (size_t a = 0; a < leaf->rank; a++) {
        if (entry_names(leaf->spec[a], name)) {
            return (int)a;
        }
    }
    return -1;
}

/* The layer axis the leaf's own partition spec names (directly, or through a mesh axis the
 * rules map a layer axis to), or -1. */
static int spec_scan_axis(const ur_plan_leaf *leaf, const ur_settings *s)
{
    if (!leaf->has_spec) {
        return -1;
    }
    for (size_t k = 0; k < sizeof k_scan_names / sizeof k_scan_names[0]; k++) {
        int a = spec_axis_of(leaf, k_scan_names[k]);
        if (a >= 0) {
            return a;
        }
    }
    /* physical specs name mesh axes: those the rules map a layer axis to ("stage") */
    for (size_t k = 0; k < sizeof k_scan_names / sizeof k_scan_names[0]; k++) {
        for (size_t r = 0; r < s->n_axis_rules; r++) {
            const ur_axis_rule *rule = &s->axis_rules[r];
            if (strcmp(rule->name, k_scan_names[k]) != 0) {
                continue;
            }
            for (size_t m = 0; m < rule->n_mesh; m++) {
                int a = spec_axis_of(leaf, rule->mesh[m]);
                if (a >= 0) {
                    return a;
                }
            }
        }
    }
    return -1;
}

int ur_plan_scan_axis(const ur_plan_leaf *leaf, const ur_settings *s)
{
    int64_t psa = s->param_scan_axis;
    int a = spec_scan_axis(leaf, s);
    if (a >= 0) {
        return a;
    }
    if (leaf->rank == 1) {
        return 0; /* NNX non-parameter state (RNG counts) is stacked on axis 0 */
    }
    if (psa < 0) {
        psa += (int64_t)leaf->rank; /* jnp.take's negative axis */
        return psa >= 0 ? (int)psa : -1;
    }
    if ((int64_t)leaf->rank > psa) {
        return (int)psa;
    }
    return -1;
}

char *ur_plan_path_format(const char *const *comp, size_t len, char *buf, size_t n)
{
    size_t used = 0;
    if (n == 0) {
        return buf;
    }
    buf[0] = '\0';
    for (size_t i = 0; i < len && used < n; i++) {
        int k = snprintf(buf + used, n - used, "%s%s", i ? "/" : "", comp[i]);
        if (k < 0) {
            break;
        }
        used += (size_t)k;
    }
    return buf;
}

static void shape_format(const ur_plan_leaf *leaf, char *buf, size_t n)
{
    size_t used = 0;
    int k = snprintf(buf, n, "[");
    used = k > 0 ? (size_t)k : 0;
    for (size_t a = 0; a < leaf->rank && used < n; a++) {
        k = snprintf(buf + used, n - used, "%s%llu", a ? ", " : "",
                     (unsigned long long)leaf->shape[a]);
        used += k > 0 ? (size_t)k : 0;
    }
    if (used < n) {
        snprintf(buf + used, n - used, "]");
    }
}

static void path_dispose(ur_plan_path *p)
{
    for (size_t i = 0; i < p->len; i++) {
        ur_free(p->comp[i]);
    }
    ur_free(p->comp);
    ur_free(p->seq);
    p->comp = NULL;
    p->seq = NULL;
    p->len = 0;
}

void ur_plan_free(ur_plan *plan)
{
    if (!plan) {
        return;
    }
    for (size_t i = 0; i < plan->n_actions; i++) {
        ur_plan_action *a = &plan->actions[i];
        for (size_t j = 0; j < a->n_out; j++) {
            path_dispose(&a->out[j]);
        }
        ur_free(a->out);
    }
    ur_free(plan->actions);
    for (size_t i = 0; i < plan->n_extras; i++) {
        path_dispose(&plan->extras[i].path);
    }
    ur_free(plan->extras);
    ur_free(plan);
}

/* A path from up to four pieces: prefix + middle + tail + suffix. `seq` (NULL: all dict
 * keys) marks the list indices among c[0..n). */
typedef struct {
    const char *const *c;
    size_t n;
    const unsigned char *seq;
} span;

/* Components [from, to) of a leaf's path, list indices kept: they stay lists in the output. */
static span leaf_span(const ur_plan_leaf *l, size_t from, size_t to)
{
    span s = {l->path + from, to - from, l->seq != NULL ? l->seq + from : NULL};
    return s;
}

static int any_seq(const span *parts, size_t n_parts)
{
    for (size_t i = 0; i < n_parts; i++) {
        for (size_t j = 0; parts[i].seq != NULL && j < parts[i].n; j++) {
            if (parts[i].seq[j]) {
                return 1;
            }
        }
    }
    return 0;
}

static int path_build(ur_plan_path *out, const span *parts, size_t n_parts, ur_err *err)
{
    size_t len = 0;
    size_t k = 0;
    for (size_t i = 0; i < n_parts; i++) {
        len += parts[i].n;
    }
    out->seq = NULL;
    out->comp = ur_calloc(len ? len : 1, sizeof *out->comp);
    if (!out->comp) {
        return ur_err_oom(err);
    }
    out->len = 0;
    if (any_seq(parts, n_parts)) {
        out->seq = ur_calloc(len, 1);
        if (!out->seq) {
            path_dispose(out);
            return ur_err_oom(err);
        }
    }
    for (size_t i = 0; i < n_parts; i++) {
        for (size_t j = 0; j < parts[i].n; j++) {
            out->comp[k] = ur_strdup(parts[i].c[j]);
            if (!out->comp[k]) {
                out->len = k;
                path_dispose(out);
                return ur_err_oom(err);
            }
            if (out->seq != NULL && parts[i].seq != NULL) {
                out->seq[k] = parts[i].seq[j];
            }
            k++;
        }
    }
    out->len = len;
    return UR_OK;
}

static int path_is(const ur_plan_leaf *l, size_t i, const char *s)
{
    return l->path_len > i && strcmp(l->path[i], s) == 0;
}

/* Non-parameter variables: MaxText's NNX training state saves every persistent variable that
 * is not an nnx.Param (the DeepSeek router bias MoEBiasVar, deepseek4's Tid2EidVar; RNG state,
 * which is dropped) under nnx_aux/model/P, beside params/params/P (train_state_nnx.py
 * to_checkpoint_dict). The decode model restores them at P like its params (from_pretrained
 * restores every variable but RNG, cache, intermediate and batch-stat state), so they are kept
 * at P, unstacked like the params, and in their stored dtype: they are not weights to cast
 * (Tid2EidVar holds expert ids as float32). A scan stacks them on axis 0, not param_scan_axis
 * (nnx.StateAxes({nnx.Param: param_scan_axis, ...: 0}) in nnx_decoders.py). */
static int is_aux(const ur_plan_leaf *l, ur_plan_layout layout)
{
    return layout == UR_PLAN_LAYOUT_LINEN && path_is(l, 0, "nnx_aux");
}

static int aux_scan_axis(const ur_plan_leaf *leaf, const ur_settings *s)
{
    int a = spec_scan_axis(leaf, s);
    if (a >= 0) {
        return a;
    }
    return leaf->rank >= 1 ? 0 : -1;
}

static int has_array_under(const ur_plan_leaf *leaves, size_t n, const char *a, const char *b)
{
    for (size_t i = 0; i < n; i++) {
        if (leaves[i].dtype != UR_DT_INVALID && path_is(&leaves[i], 0, a) &&
            (!b || path_is(&leaves[i], 1, b))) {
            return 1;
        }
    }
    return 0;
}

static int detect_layout(ur_plan_layout *out, const ur_plan_leaf *leaves, size_t n,
                         ur_plan_input input, ur_err *err)
{
    int any_value = 0;
    if (input == UR_PLAN_INPUT_LORA) {
        for (size_t i = 0; i < n; i++) {
            if (path_is(&leaves[i], 0, "params") && path_is(&leaves[i], 1, "params")) {
                *out = UR_PLAN_LAYOUT_LORA_LINEN;
                return UR_OK;
            }
        }
        for (size_t i = 0; i < n; i++) {
            if (path_is(&leaves[i], 0, "params") && leaves[i].path_len > 1) {
                *out = UR_PLAN_LAYOUT_LORA_NNX;
                return UR_OK;
            }
        }
        return ur_err_set(err, UR_EINVAL, "LoRA adapter checkpoint has no params/ tree");
    }
    for (size_t i = 0; i < n; i++) {
        if (path_is(&leaves[i], 0, "params") && path_is(&leaves[i], 1, "params")) {
            *out = UR_PLAN_LAYOUT_LINEN;
            return UR_OK;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (path_is(&leaves[i], 0, "model") && leaves[i].path_len > 1) {
            *out = UR_PLAN_LAYOUT_NNX_LEGACY;
            return UR_OK;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const ur_plan_leaf *l = &leaves[i];
        if (l->path_len > 1 && strcmp(l->path[l->path_len - 1], "value") == 0) {
            any_value = 1;
        }
    }
    if (any_value) {
        *out = UR_PLAN_LAYOUT_NNX_PARAMS;
        return UR_OK;
    }
    return ur_err_set(err, UR_EINVAL,
                      "unrecognised checkpoint layout: no params/params/..., model/... or "
                      ".../value leaves");
}

/* The model-relative path of a kept leaf ([*start, *end) of its components), or a reason to
 * drop it. */
static const char *model_path(const ur_plan_leaf *l, ur_plan_layout layout, size_t *start,
                              size_t *end)
{
    size_t s = 0;
    size_t e = l->path_len;
    int strip_value = 0;
    switch (layout) {
    case UR_PLAN_LAYOUT_LINEN:
    case UR_PLAN_LAYOUT_LORA_LINEN:
        if (path_is(l, 0, "params")) {
            if (!path_is(l, 1, "params")) {
                return "not the params collection";
            }
            s = 2;
            break;
        }
        if (path_is(l, 0, "opt_state")) {
            return "opt_state";
        }
        if (path_is(l, 0, "step")) {
            return "step";
        }
        if (path_is(l, 0, "nnx_aux")) {
            if (layout != UR_PLAN_LAYOUT_LINEN || !path_is(l, 1, "model")) {
                return "nnx_aux";
            }
            s = 2; /* a non-parameter variable of the model (RNG state dropped below) */
            break;
        }
        return "outside params";
    case UR_PLAN_LAYOUT_LORA_NNX:
        if (!path_is(l, 0, "params")) {
            return path_is(l, 0, "opt_state") ? "opt_state"
                   : path_is(l, 0, "step")    ? "step"
                                              : "outside params";
        }
        s = 1;
        break;
    case UR_PLAN_LAYOUT_NNX_LEGACY:
        if (!path_is(l, 0, "model")) {
            return path_is(l, 0, "optimizer") ? "optimizer" : "outside model";
        }
        s = 1;
        strip_value = 1;
        break;
    case UR_PLAN_LAYOUT_NNX_PARAMS:
        s = path_is(l, 0, "base") ? 1 : 0;
        strip_value = 1;
        break;
    }
    if (strip_value && e > s && strcmp(l->path[e - 1], "value") == 0) {
        e--;
    }
    for (size_t i = s; i < e; i++) {
        if (strcmp(l->path[i], "rngs") == 0) {
            return "rng";
        }
    }
    if (e <= s) {
        return "empty path";
    }
    if (l->dtype == UR_DT_INVALID && l->placeholder == UR_PLAN_NOT_PLACEHOLDER) {
        return "not an array";
    }
    *start = s;
    *end = e;
    return NULL;
}

static int leaf_elems(const ur_plan_leaf *l, uint64_t *out, ur_err *err)
{
    uint64_t n = 1;
    char name[512];
    for (size_t a = 0; a < l->rank; a++) {
        if (ur_ckd_mul64(&n, n, l->shape[a])) {
            return ur_err_set(err, UR_ECORRUPT, "leaf '%s': shape overflows",
                              ur_plan_path_format(l->path, l->path_len, name, sizeof name));
        }
    }
    *out = n;
    return UR_OK;
}

static int add_bytes(uint64_t *acc, uint64_t elems, size_t itemsize, uint64_t times,
                     ur_err *err)
{
    uint64_t b;
    if (ur_ckd_mul64(&b, elems, (uint64_t)itemsize) || ur_ckd_mul64(&b, b, times) ||
        ur_ckd_add64(acc, *acc, b)) {
        return ur_err_set(err, UR_ECORRUPT, "checkpoint size overflows");
    }
    return UR_OK;
}

/* "layers_<j>" or "layer_<j>" with j < k: 1 and j. */
static int sub_layer(const char *c, int64_t k, int64_t *j)
{
    const char *p;
    int64_t v = 0;
    if (strncmp(c, "layers_", 7) == 0) {
        p = c + 7;
    } else if (strncmp(c, "layer_", 6) == 0) {
        p = c + 6;
    } else {
        return 0;
    }
    if (*p == '\0' || (p[0] == '0' && p[1] != '\0')) {
        return 0;
    }
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || v > k) {
            return 0;
        }
        v = v * 10 + (*p - '0');
    }
    if (v >= k) {
        return 0;
    }
    *j = v;
    return 1;
}

static void group_set(ur_plan_group *g, const char *name, int64_t n_layers, int64_t cycle,
                      int64_t first_out, const char *out_name)
{
    g->name = name;
    g->n_layers = n_layers;
    g->cycle = cycle;
    g->first_out = first_out;
    g->out_name = out_name;
}

/* Pipeline parallelism as MaxText's types.py derives it (using_pipeline_parallelism,
 * pipeline_parallel_layers, num_pipeline_repeats) and the groups nnx_decoders.py
 * _init_pipeline_generic builds: decoder/pipeline_module (the first pipeline_parallel_layers
 * layers) and decoder/layers_outside_pipeline (the rest, run after the pipeline). */
static int setup_pipeline(ur_plan *plan, const ur_settings *s, ur_err *err)
{
    int64_t nl = s->num_decoder_layers;
    int64_t st, lps, p, r;
    if (s->ici_pipeline_parallelism <= 1 && s->dcn_pipeline_parallelism <= 1) {
        return UR_OK; /* types.py: using_pipeline_parallelism = ici > 1 or dcn > 1 */
    }
    if (s->ici_pipeline_parallelism < 1 || s->dcn_pipeline_parallelism < 1) {
        return ur_err_set(err, UR_EINVAL,
                          "ici_pipeline_parallelism=%lld, dcn_pipeline_parallelism=%lld: must "
                          "be >= 1",
                          (long long)s->ici_pipeline_parallelism,
                          (long long)s->dcn_pipeline_parallelism);
    }
    if (strcmp(s->decoder_block, "deepseek") == 0 || strcmp(s->decoder_block, "gemma3") == 0 ||
        strcmp(s->decoder_block, "gemma4") == 0 || strcmp(s->decoder_block, "deepseek4") == 0 ||
        s->inhomogeneous_layer_cycle_interval > 1) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "pipeline-parallel checkpoint with decoder_block %s%s: unrolling its "
                          "pipeline stacks is not supported",
                          s->decoder_block,
                          s->inhomogeneous_layer_cycle_interval > 1
                              ? " and inhomogeneous_layer_cycle_interval > 1"
                              : "");
    }
    if (__builtin_mul_overflow(s->ici_pipeline_parallelism, s->dcn_pipeline_parallelism, &st) ||
        st > (1 << 20)) {
        return ur_err_set(err, UR_EINVAL, "pipeline stages overflow");
    }
    lps = s->num_layers_per_pipeline_stage;
    p = s->pipeline_parallel_layers == -1 ? nl : s->pipeline_parallel_layers;
    if (lps < 1 || lps > (1 << 20) || p < 1 || p > nl || p > (1 << 20)) {
        return ur_err_set(err, UR_EINVAL,
                          "num_layers_per_pipeline_stage=%lld, pipeline_parallel_layers=%lld "
                          "do not fit num_decoder_layers=%lld",
                          (long long)lps, (long long)p, (long long)nl);
    }
    r = s->num_pipeline_repeats;
    if (r == -1) {
        r = p / (st * lps);
    }
    if (r < 1 || r > (1 << 20) || r * st * lps != p) {
        return ur_err_set(err, UR_EINVAL,
                          "pipeline stages (%lld) x repeats (%lld) x layers per stage (%lld) "
                          "must equal pipeline_parallel_layers (%lld)",
                          (long long)st, (long long)s->num_pipeline_repeats, (long long)lps,
                          (long long)p);
    }
    plan->pipelined = 1;
    plan->pipe_stages = st;
    plan->pipe_repeats = r;
    plan->pipe_lps = lps;
    plan->pipe_scanned = lps > 1 && s->scan_layers_per_stage;
    plan->n_groups = 1;
    group_set(&plan->groups[0], "pipeline_module", p, 1, 0, "layers");
    if (nl > p) {
        plan->n_groups = 2;
        group_set(&plan->groups[1], "layers_outside_pipeline", nl - p, 1, p, "layers");
    }
    return UR_OK;
}

/* The scanned groups the config calls for (docs/maxtext-checkpoints.md §5; MaxText
 * nnx_decoders.py _init_scanned_*), checked against the tree for layouts not handled. */
static int setup_groups(ur_plan *plan, const ur_plan_leaf *leaves, size_t n, const ur_settings *s,
                        ur_err *err)
{
    int64_t nl = s->num_decoder_layers;
    int64_t k = s->inhomogeneous_layer_cycle_interval > 1 ? s->inhomogeneous_layer_cycle_interval
                                                          : 1;
    int has_pipe = 0;
    int rc;
    if (plan->unrolled) {
        rc = setup_pipeline(plan, s, err);
        if (rc < 0 || plan->pipelined) {
            return rc;
        }
    }
    for (size_t i = 0; i < n && plan->unrolled; i++) {
        const ur_plan_leaf *l = &leaves[i];
        for (size_t c = 0; c + 1 < l->path_len; c++) {
            if (strcmp(l->path[c], "decoder") != 0) {
                continue;
            }
            if (strcmp(l->path[c + 1], "pipeline_module") == 0) {
                has_pipe = 1;
            }
            if (strncmp(l->path[c + 1], "dense_layers_", 13) == 0 ||
                strncmp(l->path[c + 1], "moe_layers_", 11) == 0) {
                return ur_err_set(err, UR_EUNSUPPORTED,
                                  "decoder/%s: DeepSeek engram layer chunks are not supported",
                                  l->path[c + 1]);
            }
        }
    }
    if (has_pipe) {
        return ur_err_set(err, UR_EINVAL,
                          "the checkpoint has a pipeline stack (decoder/pipeline_module) but the "
                          "config has no pipeline parallelism (ici_pipeline_parallelism=%lld, "
                          "dcn_pipeline_parallelism=%lld)",
                          (long long)s->ici_pipeline_parallelism,
                          (long long)s->dcn_pipeline_parallelism);
    }
    if (strcmp(s->decoder_block, "deepseek") == 0) {
        plan->n_groups = 2;
        group_set(&plan->groups[0], "dense_layers", s->first_num_dense_layers, 1, 0, NULL);
        group_set(&plan->groups[1], "moe_layers", nl - s->first_num_dense_layers, 1, 0, NULL);
    } else if (strcmp(s->decoder_block, "gemma3") == 0) {
        /* GEMMA3_ATTENTION_PATTERN: 5 local + 1 global */
        plan->n_groups = 1;
        group_set(&plan->groups[0], "layers", nl / 6, 6, 0, "layers");
        plan->n_remainder = nl % 6;
        plan->remainder_first = nl / 6 * 6;
    } else if (strcmp(s->decoder_block, "gemma4") == 0) {
        /* GEMMA4_ATTENTION_PATTERN: 5 local + 1 global; scanned_blocks of N // 6 blocks
         * (local_layers nested scan of 5 + global_layer), layers_remainder for N % 6 */
        plan->n_groups = 1;
        group_set(&plan->groups[0], "scanned_blocks", nl / 6, 6, 0, "layers");
        plan->n_remainder = nl % 6;
        plan->remainder_first = nl / 6 * 6;
        if (plan->unrolled && s->param_scan_axis < 0) {
            return ur_err_set(err, UR_EUNSUPPORTED,
                              "gemma4 with a negative param_scan_axis (%lld): the nested scan's "
                              "axes are not worked out for it",
                              (long long)s->param_scan_axis);
        }
    } else if (strcmp(s->decoder_block, "deepseek4") == 0) {
        int64_t h = s->first_num_hash_layers;
        if (h < 0 || h > nl) {
            return ur_err_set(err, UR_EINVAL,
                              "first_num_hash_layers=%lld does not fit num_decoder_layers=%lld",
                              (long long)h, (long long)nl);
        }
        plan->n_groups = 1;
        group_set(&plan->groups[0], "scanned_blocks", (nl - h) / 2, 2, h, "layers");
        if ((nl - h) % 2 != 0 && plan->unrolled) {
            return ur_err_set(err, UR_EINVAL,
                              "deepseek4: %lld layers after %lld hash layers is odd; MaxText "
                              "scans them in blocks of 2",
                              (long long)(nl - h), (long long)h);
        }
    } else if (k > 1 && strcmp(s->decoder_block, "qwen3_next") == 0) {
        /* _init_scanned_qwen3_next: N // K blocks (local_layers nested scan of K - 1 linear-
         * attention layers + global_layer), layers_remainder for the N % K last ones */
        plan->n_groups = 1;
        group_set(&plan->groups[0], "layers", nl / k, k, 0, "layers");
        plan->n_remainder = nl % k;
        plan->remainder_first = nl / k * k;
        if (plan->unrolled && s->param_scan_axis < 0) {
            return ur_err_set(err, UR_EUNSUPPORTED,
                              "qwen3_next with a negative param_scan_axis (%lld): the nested "
                              "scan's axes are not worked out for it",
                              (long long)s->param_scan_axis);
        }
    } else if (k > 1) {
        plan->n_groups = 1;
        group_set(&plan->groups[0], "layers", nl / k, k, 0, "layers");
        if (nl % k != 0 && plan->unrolled) {
            return ur_err_set(err, UR_EINVAL,
                              "num_decoder_layers=%lld is not a multiple of "
                              "inhomogeneous_layer_cycle_interval=%lld: MaxText's scan would "
                              "drop the last %lld layers",
                              (long long)nl, (long long)k, (long long)(nl % k));
        }
    } else {
        plan->n_groups = 1;
        group_set(&plan->groups[0], "layers", nl, 1, 0, NULL);
    }
    for (size_t g = 0; g < plan->n_groups; g++) {
        if (plan->unrolled && plan->groups[g].n_layers > (1 << 20)) {
            return ur_err_set(err, UR_EINVAL, "decoder/%s: %lld layers is not plausible",
                              plan->groups[g].name, (long long)plan->groups[g].n_layers);
        }
        if (plan->unrolled && plan->groups[g].n_layers < 0) {
            return ur_err_set(err, UR_EINVAL,
                              "decoder/%s would have %lld layers (num_decoder_layers=%lld, "
                              "first_num_dense_layers=%lld)",
                              plan->groups[g].name, (long long)plan->groups[g].n_layers,
                              (long long)s->num_decoder_layers,
                              (long long)s->first_num_dense_layers);
        }
    }
    return UR_OK;
}

/* 1 when another array leaf sharing l's first `depth` key components has length `nl` on
 * its own layer axis. */
static int sibling_has_length(const ur_plan_leaf *leaves, size_t n, const ur_plan_leaf *l,
                              size_t depth, const ur_settings *s, uint64_t nl)
{
    for (size_t i = 0; i < n; i++) {
        const ur_plan_leaf *o = &leaves[i];
        int axis;
        size_t k;
        if (o == l || o->dtype == UR_DT_INVALID || o->path_len < depth) {
            continue;
        }
        for (k = 0; k < depth && strcmp(o->path[k], l->path[k]) == 0; k++) {
        }
        if (k < depth) {
            continue;
        }
        axis = ur_plan_scan_axis(o, s);
        if (axis >= 0 && o->shape[axis] == nl) {
            return 1;
        }
    }
    return 0;
}

/* Make `a` a COPY to the path made of `parts`, and count it in the summary. */
static int set_copy(ur_plan *plan, ur_plan_action *a, const span *parts, size_t n_parts,
                    uint64_t elems, ur_err *err)
{
    int rc;
    a->kind = UR_PLAN_COPY;
    a->out = ur_calloc(1, sizeof *a->out);
    if (!a->out) {
        return ur_err_oom(err);
    }
    a->n_out = 1;
    rc = path_build(&a->out[0], parts, n_parts, err);
    if (rc < 0) {
        return rc;
    }
    plan->summary.leaves_copied++;
    plan->summary.leaves_out++;
    return add_bytes(&plan->summary.bytes_out, elems, ur_dtype_size(a->out_dtype), 1, err);
}

/* Make `a` an UNSTACK over its layer axes a->axes[0..n_axes) (already set, n_out index tuples)
 * of group `g`, out[lin] = decoder/layers_<(lin / div) * mul + lin % div + add>/<path[rest..en)>
 * for the C-order linear index lin, and count it in the summary. */
static int set_unstack(ur_plan *plan, ur_plan_action *a, const ur_plan_leaf *l, int g,
                       size_t rest, size_t en, span prefix, span suffix, uint64_t elems,
                       uint64_t n_out, int64_t div, int64_t mul, int64_t add, ur_err *err)
{
    ur_plan_group *grp = &plan->groups[g];
    int rc;
    grp->present = 1;
    grp->n_leaves++;
    grp->n_axis[a->axes[a->n_axes - 1]]++;
    a->group = g;
    a->kind = UR_PLAN_UNSTACK;
    a->axis = a->axes[a->n_axes - 1];
    plan->summary.leaves_unstacked++;
    rc = add_bytes(&plan->summary.bytes_out, elems, ur_dtype_size(a->out_dtype), 1, err);
    if (rc < 0) {
        return rc;
    }
    a->out = ur_calloc(n_out ? (size_t)n_out : 1, sizeof *a->out);
    if (!a->out) {
        return ur_err_oom(err);
    }
    for (uint64_t li = 0; li < n_out; li++) {
        char layer[96];
        const char *mid[2] = {"decoder", layer};
        span parts[4] = {prefix, {mid, 2, NULL}, leaf_span(l, rest, en), suffix};
        int64_t gl = ((int64_t)li / div) * mul + (int64_t)li % div + add;
        snprintf(layer, sizeof layer, "layers_%lld", (long long)gl);
        rc = path_build(&a->out[li], parts, 4, err);
        if (rc < 0) {
            return rc;
        }
        a->n_out++;
    }
    plan->summary.leaves_out += (size_t)n_out;
    return UR_OK;
}

/* Blocks of K layers with a nested scan over the K - 1 local ones, the way MaxText 0.2.5 builds
 * gemma4 (gemma4.py Gemma4ScannableBlock, nnx_decoders.py _init_scanned_gemma4: K = 6, group
 * scanned_blocks) and qwen3-next (qwen3.py Qwen3NextScannableBlock, _init_scanned_qwen3_next:
 * K = inhomogeneous_layer_cycle_interval, group layers, linear-attention layers local, the
 * full-attention layer last): decoder/<group>/local_layers/R has the block axis at
 * param_scan_axis and the nested scan's K - 1 local layers right after it (block b, local i ->
 * layer Kb + i); decoder/<group>/global_layer/R the block axis (-> layer Kb + K - 1);
 * decoder/layers_remainder/local_layers/R the last N % K layers (all local: blocks start on a
 * cycle boundary) at param_scan_axis. */
static int nested_leaf(ur_plan *plan, ur_plan_action *a, const ur_plan_leaf *l, size_t st,
                       size_t en, const ur_settings *s, span prefix, span suffix,
                       uint64_t elems, int *remainder_seen, ur_err *err)
{
    int blocks = strcmp(l->path[st + 1], plan->groups[0].name) == 0;
    size_t psa = (size_t)s->param_scan_axis;
    int64_t nb = plan->groups[0].n_layers;
    uint64_t kk = (uint64_t)plan->groups[0].cycle;
    int local = en - st >= 4 && strcmp(l->path[st + 2], "local_layers") == 0;
    int global = en - st >= 4 && strcmp(l->path[st + 2], "global_layer") == 0;
    uint64_t want[2];
    char name[512];
    char shape[256];

    ur_plan_path_format(l->path, l->path_len, name, sizeof name);
    if (!blocks && plan->n_remainder == 0 && l->dtype == UR_DT_INVALID) {
        a->kind = UR_PLAN_DROP; /* the empty remainder block NNX builds */
        a->why = "empty layers_remainder";
        plan->summary.leaves_kept--;
        plan->summary.leaves_dropped++;
        return UR_OK;
    }
    if (!local && !(blocks && global)) {
        return ur_err_set(err, UR_EINVAL,
                          "leaf '%s': %s holds its layers under decoder/%s/"
                          "{local_layers,global_layer}/ and decoder/layers_remainder/"
                          "local_layers/",
                          name, s->decoder_block, plan->groups[0].name);
    }
    a->n_axes = 0;
    if (blocks) {
        want[a->n_axes] = (uint64_t)nb;
        a->axes[a->n_axes++] = psa;
        if (local) {
            want[a->n_axes] = kk - 1;
            a->axes[a->n_axes++] = psa + 1;
        }
    } else {
        want[a->n_axes] = (uint64_t)plan->n_remainder;
        a->axes[a->n_axes++] = psa;
        *remainder_seen = 1;
    }
    for (size_t m = 0; m < a->n_axes; m++) {
        if (l->dtype == UR_DT_INVALID || a->axes[m] >= l->rank ||
            l->shape[a->axes[m]] != want[m]) {
            shape_format(l, shape, sizeof shape);
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s' shape %s: expected length %llu on axis %zu (%s with "
                              "num_decoder_layers=%lld: %lld blocks of %llu local + 1 global "
                              "layers, %lld remainder layers)",
                              name, shape, (unsigned long long)want[m], a->axes[m],
                              s->decoder_block, (long long)s->num_decoder_layers, (long long)nb,
                              (unsigned long long)(kk - 1),
                              (long long)plan->n_remainder);
        }
    }
    if (!blocks) {
        return set_unstack(plan, a, l, 0, st + 3, en, prefix, suffix, elems, want[0], 1, 1,
                           plan->remainder_first, err);
    }
    if (local) {
        return set_unstack(plan, a, l, 0, st + 3, en, prefix, suffix, elems, want[0] * (kk - 1),
                           (int64_t)(kk - 1), (int64_t)kk, 0, err);
    }
    return set_unstack(plan, a, l, 0, st + 3, en, prefix, suffix, elems, want[0], 1, (int64_t)kk,
                       (int64_t)(kk - 1), err);
}

/* Whether a decoder leaf is one of nested_leaf's: every gemma4 block or remainder leaf;
 * qwen3-next's under decoder/layers/{local_layers,global_layer} or decoder/layers_remainder
 * (what maxtext 0.2.5 writes; its older decoder/layers/layers_<j> blocks go the generic way). */
static int nested_layout(int gemma4, int qwen3_next, int g, const ur_plan_leaf *l, size_t st,
                         size_t en)
{
    int rem = strcmp(l->path[st + 1], "layers_remainder") == 0;
    if (gemma4) {
        return g == 0 || rem;
    }
    if (!qwen3_next) {
        return 0;
    }
    return rem || (g == 0 && en - st >= 4 &&
                   (strcmp(l->path[st + 2], "local_layers") == 0 ||
                    strcmp(l->path[st + 2], "global_layer") == 0));
}

/* A leaf of decoder/pipeline_module: UNSTACK over [repeats,] stages[, layers_per_stage]. The
 * C-order linear index over those axes is the global layer (pipeline.py: repeat_ids index axis
 * 0, stages axis 1; a microbatch runs stages 0..S-1 of repeat 0, then of repeat 1, ...), times
 * layers_per_stage plus j for the sequential stage's layers_<j>. */
static int pipe_leaf(ur_plan *plan, ur_plan_action *a, const ur_plan_leaf *l, size_t st,
                     size_t en, const ur_settings *s, span prefix, span suffix, uint64_t elems,
                     ur_err *err)
{
    size_t lead = plan->pipe_repeats > 1 ? 2 : 1;
    size_t rest = st + 3;
    int64_t j = 0;
    int64_t per = 1; /* layers per index tuple of the layer axes */
    uint64_t want[UR_PLAN_MAX_LAYER_AXES];
    uint64_t n_out = 1;
    char name[512];
    char shape[256];

    ur_plan_path_format(l->path, l->path_len, name, sizeof name);
    if (en - st < 4 || strcmp(l->path[st + 2], "layers") != 0) {
        return ur_err_set(err, UR_EINVAL,
                          "leaf '%s': expected decoder/pipeline_module/layers/... (the pipeline "
                          "stage module)",
                          name);
    }
    a->n_axes = 0;
    if (lead == 2) {
        want[a->n_axes] = (uint64_t)plan->pipe_repeats;
        a->axes[a->n_axes++] = 0;
    }
    want[a->n_axes] = (uint64_t)plan->pipe_stages;
    a->axes[a->n_axes++] = lead - 1;
    if (plan->pipe_scanned) {
        int64_t psa = s->param_scan_axis;
        int64_t srank = (int64_t)l->rank - (int64_t)lead;
        if (strcmp(l->path[st + 3], "scanned_layers") != 0 || en - st < 5) {
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s': scan_layers_per_stage=true puts the stage's layers "
                              "under decoder/pipeline_module/layers/scanned_layers/",
                              name);
        }
        if (psa < 0) {
            psa += srank;
        }
        if (psa < 0 || psa >= srank) {
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s' rank %zu: no layers_per_stage axis at param_scan_axis "
                              "%lld",
                              name, l->rank, (long long)s->param_scan_axis);
        }
        want[a->n_axes] = (uint64_t)plan->pipe_lps;
        a->axes[a->n_axes++] = lead + (size_t)psa;
        rest = st + 4;
    } else if (plan->pipe_lps > 1) {
        if (en - st < 5 || !sub_layer(l->path[st + 3], plan->pipe_lps, &j) ||
            strncmp(l->path[st + 3], "layers_", 7) != 0) {
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s': a pipeline stage of %lld unscanned layers holds "
                              "layers_0..layers_%lld (set scan_layers_per_stage if the stage "
                              "is scanned)",
                              name, (long long)plan->pipe_lps, (long long)plan->pipe_lps - 1);
        }
        per = plan->pipe_lps;
        rest = st + 4;
    }
    if (l->dtype == UR_DT_INVALID || l->rank < lead) {
        return ur_err_set(err, UR_EINVAL, "leaf '%s': not a pipeline-stacked array", name);
    }
    for (size_t m = 0; m < a->n_axes; m++) {
        if (l->shape[a->axes[m]] != want[m]) {
            shape_format(l, shape, sizeof shape);
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s' shape %s: axis %zu has length %llu, expected %llu "
                              "(pipeline repeats %lld, stages %lld, layers per stage %lld)",
                              name, shape, a->axes[m], (unsigned long long)l->shape[a->axes[m]],
                              (unsigned long long)want[m], (long long)plan->pipe_repeats,
                              (long long)plan->pipe_stages, (long long)plan->pipe_lps);
        }
        n_out *= want[m];
    }
    return set_unstack(plan, a, l, 0, rest, en, prefix, suffix, elems, n_out, 1, per, j, err);
}

/* A leaf of scanned group `grp` with no layer axis. Rank 0: no scanned model stores one (the
 * scan adds the layer axis to every parameter), so the input is inconsistent. Otherwise
 * param_scan_axis (from the config) lies past the leaf's last axis. */
static int no_layer_axis(const ur_plan_leaf *l, const ur_settings *s, const ur_plan_group *grp,
                         ur_err *err)
{
    char name[512];
    char shape[256];
    ur_plan_path_format(l->path, l->path_len, name, sizeof name);
    if (l->rank == 0) {
        return ur_err_set(err, UR_ECORRUPT,
                          "leaf '%s': rank-0 leaf under the scanned group decoder/%s has no "
                          "layer axis (a scanned model stacks every parameter of the group)",
                          name, grp->name);
    }
    shape_format(l, shape, sizeof shape);
    return ur_err_set(err, UR_EINVAL,
                      "leaf '%s' shape %s under the scanned group decoder/%s: no axis %lld "
                      "(param_scan_axis) to take the layers from",
                      name, shape, grp->name, (long long)s->param_scan_axis);
}

int ur_plan_build(ur_plan **out, const ur_plan_leaf *leaves, size_t n, const ur_settings *s,
                  ur_plan_input input, ur_err *err)
{
    static const char *const k_params2[] = {"params", "params"};
    static const char *const k_value[] = {"value"};
    ur_plan *plan = NULL;
    int lora = input == UR_PLAN_INPUT_LORA;
    int gemma3 = strcmp(s->decoder_block, "gemma3") == 0;
    int gemma4 = strcmp(s->decoder_block, "gemma4") == 0;
    int qwen3_next = strcmp(s->decoder_block, "qwen3_next") == 0;
    int remainder_seen = 0;
    span prefix = {NULL, 0, NULL};
    span suffix = {NULL, 0, NULL};
    int rc;

    plan = ur_calloc(1, sizeof *plan);
    if (!plan) {
        return ur_err_oom(err);
    }
    plan->actions = ur_calloc(n ? n : 1, sizeof *plan->actions);
    if (!plan->actions) {
        rc = ur_err_oom(err);
        goto out;
    }
    rc = detect_layout(&plan->layout, leaves, n, input, err);
    if (rc < 0) {
        goto out;
    }
    plan->unrolled = s->scan_layers && s->force_unroll;
    plan->nnx_output = s->pure_nnx && !lora;

    /* generate_param_only_checkpoint asserts the training state has an optimizer state */
    if (input == UR_PLAN_INPUT_FULL_STATE) {
        int has_opt = 0;
        if (plan->layout == UR_PLAN_LAYOUT_LINEN) {
            has_opt = has_array_under(leaves, n, "opt_state", NULL);
        } else if (plan->layout == UR_PLAN_LAYOUT_NNX_LEGACY) {
            has_opt = has_array_under(leaves, n, "optimizer", "opt_state");
        }
        if (!has_opt) {
            rc = ur_err_set(err, UR_EINVAL,
                            "missing opt_state in training checkpoint: load_full_state_path "
                            "needs a full training state (use load_parameters_path for a "
                            "param-only checkpoint)");
            goto out;
        }
    }

    /* layer groups */
    rc = setup_groups(plan, leaves, n, s, err);
    if (rc < 0) {
        goto out;
    }

    /* output prefix and suffix */
    if (lora) {
        /* the NNX branch saves the single-nested adapter tree under a TrainState */
        prefix.c = k_params2;
        prefix.n = s->pure_nnx ? 1 : 2;
    } else if (plan->nnx_output) {
        suffix.c = k_value;
        suffix.n = 1;
    } else {
        prefix.c = k_params2;
        prefix.n = 2;
    }

    plan->n_actions = n;
    plan->summary.leaves_in = n;
    for (size_t i = 0; i < n; i++) {
        const ur_plan_leaf *l = &leaves[i];
        ur_plan_action *a = &plan->actions[i];
        size_t st = 0;
        size_t en = 0;
        uint64_t elems = 0;
        int g = -1;
        int64_t sub = 0;
        size_t rest = 0;
        int remainder = 0;
        int aux = 0;
        char rem_layer[64];
        const char *why;
        a->group = -1;
        a->out_dtype = l->dtype;
        if (l->rank > UR_MAX_RANK) {
            rc = ur_err_set(err, UR_EINVAL, "leaf rank %zu > %d", l->rank, UR_MAX_RANK);
            goto out;
        }
        if (l->dtype != UR_DT_INVALID) {
            rc = leaf_elems(l, &elems, err);
            if (rc == UR_OK) {
                rc = add_bytes(&plan->summary.bytes_in, elems, ur_dtype_size(l->dtype), 1, err);
            }
            if (rc < 0) {
                goto out;
            }
        }
        why = model_path(l, plan->layout, &st, &en);
        if (why) {
            a->kind = UR_PLAN_DROP;
            a->why = why;
            plan->summary.leaves_dropped++;
            continue;
        }
        plan->summary.leaves_kept++;
        rc = add_bytes(&plan->summary.bytes_read, elems, ur_dtype_size(l->dtype), 1, err);
        if (rc < 0) {
            goto out;
        }
        aux = is_aux(l, plan->layout);
        if (ur_dtype_is_float(l->dtype) && !aux) {
            a->out_dtype = UR_DT_BFLOAT16;
        }
        /* the run would refuse it chunk by chunk: say so now, and in the dry run */
        if (l->dtype != UR_DT_INVALID && !ur_tensor_cast_supported(a->out_dtype, l->dtype)) {
            char name[512];
            rc = ur_err_set(err, UR_EUNSUPPORTED, "leaf '%s': no conversion from %s to %s",
                            ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                            ur_dtype_name(l->dtype), ur_dtype_name(a->out_dtype));
            goto out;
        }
        rest = st + 2;
        if (plan->unrolled && en - st >= 3 && strcmp(l->path[st], "decoder") == 0) {
            for (size_t k = 0; k < plan->n_groups; k++) {
                if (strcmp(l->path[st + 1], plan->groups[k].name) == 0) {
                    g = (int)k;
                }
            }
            int pipe = g == 0 && plan->pipelined;
            if (aux && (pipe || nested_layout(gemma4, qwen3_next, g, l, st, en))) {
                char name[512];
                rc = ur_err_set(err, UR_EUNSUPPORTED,
                                "leaf '%s': a non-parameter variable (nnx_aux) of a %s scan: "
                                "its layer axes there are not known to unroll",
                                ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                                pipe ? "pipeline" : "nested");
                goto out;
            }
            if (nested_layout(gemma4, qwen3_next, g, l, st, en)) {
                rc = nested_leaf(plan, a, l, st, en, s, prefix, suffix, elems, &remainder_seen,
                                 err);
                if (rc < 0) {
                    goto out;
                }
                continue;
            }
            if (g == 0 && plan->pipelined) {
                rc = pipe_leaf(plan, a, l, st, en, s, prefix, suffix, elems, err);
                if (rc < 0) {
                    goto out;
                }
                continue;
            }
            if (g >= 0 && plan->groups[g].cycle > 1) {
                /* a block of K sub-layers: decoder/<group>/layers_<j>/R */
                if (en - st < 4 || !sub_layer(l->path[st + 2], plan->groups[g].cycle, &sub)) {
                    char name[512];
                    rc = ur_err_set(err, UR_EINVAL,
                                    "leaf '%s': decoder/%s holds blocks of %lld sub-layers, but "
                                    "this leaf is not under layers_<j> or layer_<j> (j < %lld)",
                                    ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                                    plan->groups[g].name, (long long)plan->groups[g].cycle,
                                    (long long)plan->groups[g].cycle);
                    goto out;
                }
                rest = st + 3;
            }
            if (g < 0 && gemma3 && strcmp(l->path[st + 1], "layers_remainder") == 0) {
                int64_t j = 0;
                char name[512];
                if (en - st >= 4 && strncmp(l->path[st + 2], "layers_", 7) == 0 &&
                    sub_layer(l->path[st + 2], plan->n_remainder, &j)) {
                    snprintf(rem_layer, sizeof rem_layer, "layers_%lld",
                             (long long)(plan->remainder_first + j));
                    remainder = 1;
                } else if (plan->n_remainder == 0 && l->dtype == UR_DT_INVALID) {
                    a->kind = UR_PLAN_DROP; /* the empty remainder block NNX builds */
                    a->why = "empty layers_remainder";
                    plan->summary.leaves_kept--;
                    plan->summary.leaves_dropped++;
                    continue;
                } else {
                    rc = ur_err_set(err, UR_EINVAL,
                                    "leaf '%s': gemma3 with num_decoder_layers=%lld has %lld "
                                    "remainder layers (decoder/layers_remainder/layers_0..%lld)",
                                    ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                                    (long long)s->num_decoder_layers,
                                    (long long)plan->n_remainder,
                                    (long long)plan->n_remainder - 1);
                    goto out;
                }
            }
        }
        if (remainder) {
            const char *mid[2] = {"decoder", rem_layer};
            span parts[4] = {prefix, {mid, 2, NULL}, leaf_span(l, st + 3, en), suffix};
            rc = set_copy(plan, a, parts, 4, elems, err);
            if (rc < 0) {
                goto out;
            }
            continue;
        }
        if (g < 0) {
            span parts[3] = {prefix, leaf_span(l, st, en), suffix};
            rc = set_copy(plan, a, parts, 3, elems, err);
            if (rc < 0) {
                goto out;
            }
            continue;
        }
        {
            ur_plan_group *grp = &plan->groups[g];
            int axis = aux ? aux_scan_axis(l, s) : ur_plan_scan_axis(l, s);
            uint64_t nl = (uint64_t)grp->n_layers;
            grp->present = 1;
            grp->n_leaves++;
            a->group = g;
            if (axis >= 0) {
                if (l->shape[axis] != nl) {
                    char name[512];
                    char shape[256];
                    shape_format(l, shape, sizeof shape);
                    /* The checkpoint contradicts itself when its own spec names this
                     * axis as the layer axis and the group's other leaves have the expected
                     * count: a damaged input. Otherwise the config does not fit it. */
                    int damaged = spec_scan_axis(l, s) == axis &&
                                  sibling_has_length(leaves, n, l, st + 2, s, nl);
                    rc = ur_err_set(err, damaged ? UR_ECORRUPT : UR_EINVAL,
                                    "leaf '%s' shape %s: axis %d has length %llu, expected %lld "
                                    "(the layer count of decoder/%s)",
                                    ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                                    shape, axis, (unsigned long long)l->shape[axis],
                                    (long long)grp->n_layers, grp->name);
                    goto out;
                }
                a->kind = UR_PLAN_UNSTACK;
                a->axis = (size_t)axis;
                grp->n_axis[axis]++;
                plan->summary.leaves_unstacked++;
                rc = add_bytes(&plan->summary.bytes_out, elems, ur_dtype_size(a->out_dtype), 1,
                               err);
            } else if (l->dtype != UR_DT_INVALID) {
                /* MaxText scans with variable_axes={'params': param_scan_axis}: every array
                 * of the group is stacked, and generate_param_only_checkpoint takes layer i
                 * with jnp.take on that axis, which fails for an array without it. Copying
                 * it into every layer would invent an answer MaxText never gives. */
                rc = no_layer_axis(l, s, grp, err);
                goto out;
            } else {
                /* an empty entry ({} or None): tree_map keeps it in every layer */
                a->kind = UR_PLAN_REPLICATE;
                plan->summary.leaves_replicated++;
                rc = add_bytes(&plan->summary.bytes_out, elems, ur_dtype_size(a->out_dtype), nl,
                               err);
            }
            if (rc < 0) {
                goto out;
            }
            a->out = ur_calloc(nl ? nl : 1, sizeof *a->out);
            if (!a->out) {
                rc = ur_err_oom(err);
                goto out;
            }
            for (uint64_t li = 0; li < nl; li++) {
                char layer[96];
                const char *mid[2] = {"decoder", layer};
                if (grp->out_name) {
                    snprintf(layer, sizeof layer, "%s_%lld", grp->out_name,
                             (long long)(grp->first_out + (int64_t)li * grp->cycle + sub));
                } else {
                    snprintf(layer, sizeof layer, "%s_%llu", grp->name, (unsigned long long)li);
                }
                {
                    span parts[4] = {prefix, {mid, 2, NULL}, leaf_span(l, rest, en), suffix};
                    rc = path_build(&a->out[li], parts, 4, err);
                }
                if (rc < 0) {
                    goto out;
                }
                a->n_out++;
            }
            plan->summary.leaves_out += (size_t)nl;
        }
    }

    /* generate_param_only_checkpoint raises "Missing <group>" for the base model; LoRA
     * adapters without a group are skipped. */
    if (plan->unrolled && !lora) {
        for (size_t g = 0; g < plan->n_groups; g++) {
            if (!plan->groups[g].present && plan->groups[g].n_layers > 0) {
                rc = ur_err_set(err, UR_EINVAL,
                                "missing decoder/%s in the input checkpoint (scan_layers=true "
                                "and force_unroll=true need a scanned checkpoint)",
                                plan->groups[g].name);
                goto out;
            }
        }
    }

    if (plan->unrolled && !lora && (gemma4 || qwen3_next) && plan->n_remainder > 0 &&
        !remainder_seen) {
        rc = ur_err_set(err, UR_EINVAL,
                        "missing decoder/layers_remainder/local_layers in the input checkpoint "
                        "(%s with num_decoder_layers=%lld has %lld layers after the blocks "
                        "of %lld)",
                        s->decoder_block, (long long)s->num_decoder_layers,
                        (long long)plan->n_remainder, (long long)plan->groups[0].cycle);
        goto out;
    }
    if (plan->unrolled && !lora && gemma3 && plan->n_remainder > 0) {
        int found = 0;
        for (size_t i = 0; i < n && !found; i++) {
            found = plan->actions[i].kind == UR_PLAN_COPY && plan->actions[i].n_out == 1 &&
                    leaves[i].path_len > 2;
            if (found) {
                found = 0;
                for (size_t c = 0; c + 1 < leaves[i].path_len; c++) {
                    found |= strcmp(leaves[i].path[c], "decoder") == 0 &&
                             strcmp(leaves[i].path[c + 1], "layers_remainder") == 0;
                }
            }
        }
        if (!found) {
            rc = ur_err_set(err, UR_EINVAL,
                            "missing decoder/layers_remainder in the input checkpoint (gemma3 "
                            "with num_decoder_layers=%lld has %lld layers after the blocks of 6)",
                            (long long)s->num_decoder_layers, (long long)plan->n_remainder);
            goto out;
        }
    }

    /* the Linen decode state: TrainState(step=0, params=..., opt_state={}) */
    if (!plan->nnx_output) {
        static const char *const k_step[] = {"step"};
        static const char *const k_opt[] = {"opt_state"};
        span p1 = {k_step, 1, NULL};
        span p2 = {k_opt, 1, NULL};
        plan->extras = ur_calloc(2, sizeof *plan->extras);
        if (!plan->extras) {
            rc = ur_err_oom(err);
            goto out;
        }
        plan->extras[0].kind = UR_PLAN_EXTRA_ZERO_SCALAR;
        rc = path_build(&plan->extras[0].path, &p1, 1, err);
        if (rc < 0) {
            goto out;
        }
        plan->n_extras = 1;
        plan->extras[1].kind = UR_PLAN_EXTRA_EMPTY_DICT;
        rc = path_build(&plan->extras[1].path, &p2, 1, err);
        if (rc < 0) {
            goto out;
        }
        plan->n_extras = 2;
    }
    *out = plan;
    plan = NULL;
    rc = UR_OK;
out:
    ur_plan_free(plan);
    return rc;
}
