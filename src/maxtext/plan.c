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
 * MaxText runs them.
 *
 * What is particular to one MaxText family (its groups, their names in the output, its layer
 * index formula, the leaf shapes only it has) is in its descriptor, src/maxtext/family_<name>.c,
 * chosen through the table in family.c; this file is the walk those descriptors feed. */
#include "family.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"
#include "unroll/plan.h"
#include "unroll/tensor.h"

#include <assert.h>
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

void ur_plan__shape_format(const ur_plan_leaf *leaf, char *buf, size_t n)
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

void ur_plan_free(ur_plan *plan)
{
    if (!plan) {
        return;
    }
    ur_free(plan->actions);
    ur_free(plan->extras);
    ur_pool_dispose(&plan->pool);
    ur_free(plan);
}

/* A path from up to four pieces: prefix + middle + tail + suffix. `seq` (NULL: all dict
 * keys) marks the list indices among c[0..n). */
typedef ur_plan_span span;

/* Components [from, to) of a leaf's path, list indices kept: they stay lists in the output. */
ur_plan_span ur_plan__leaf_span(const ur_plan_leaf *l, size_t from, size_t to)
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

static int path_build(ur_plan *plan, ur_plan_path *out, const span *parts, size_t n_parts,
                      ur_err *err)
{
    size_t len = 0;
    size_t k = 0;
    const char **comp;
    unsigned char *seq = NULL;
    for (size_t i = 0; i < n_parts; i++) {
        len += parts[i].n;
    }
    comp = ur_pool_alloc(&plan->pool, (len ? len : 1) * sizeof *comp, err);
    if (comp == NULL) {
        return UR_ENOMEM;
    }
    if (any_seq(parts, n_parts)) {
        seq = ur_pool_alloc(&plan->pool, len, err);
        if (seq == NULL) {
            return UR_ENOMEM;
        }
    }
    for (size_t i = 0; i < n_parts; i++) {
        for (size_t j = 0; j < parts[i].n; j++) {
            comp[k] = ur_pool_intern(&plan->pool, parts[i].c[j], strlen(parts[i].c[j]), err);
            if (comp[k] == NULL) {
                return UR_ENOMEM;
            }
            if (seq != NULL && parts[i].seq != NULL) {
                seq[k] = parts[i].seq[j];
            }
            k++;
        }
    }
    out->comp = comp;
    out->seq = seq;
    out->len = len;
    return UR_OK;
}

/* "<name>_<index>" into buf (n >= 96 bytes: a name of up to 64 bytes, then the number), as
 * snprintf would write it: a layer loop formats one per output path. */
static void layer_name(char *buf, size_t n, const char *name, int64_t index)
{
    char digits[24];
    size_t len = strlen(name), d = 0;
    uint64_t v = index < 0 ? 0 - (uint64_t)index : (uint64_t)index;
    if (len + sizeof digits + 2 > n) {
        snprintf(buf, n, "%s_%lld", name, (long long)index);
        return;
    }
    do {
        digits[d++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    memcpy(buf, name, len);
    buf[len++] = '_';
    if (index < 0) {
        buf[len++] = '-';
    }
    while (d > 0) {
        buf[len++] = digits[--d];
    }
    buf[len] = '\0';
}

/* Output path li of a layer loop, whose parts differ from one layer to the next only in the
 * layer component (at index `at`, named `layer`): the first is built, the others copy it and
 * intern that one component (interning every component of every layer again was most of the
 * plan's time, on one core, with many leaves). The list-index marks are shared. */
static int layer_path(ur_plan *plan, ur_plan_action *a, uint64_t li, const span *parts,
                      size_t n_parts, size_t at, const char *layer, ur_err *err)
{
    const ur_plan_path *first = &a->out[0];
    const char **comp;
    if (li == 0) {
        return path_build(plan, &a->out[0], parts, n_parts, err);
    }
    comp = ur_pool_alloc(&plan->pool, first->len * sizeof *comp, err);
    if (comp == NULL) {
        return UR_ENOMEM;
    }
    memcpy(comp, first->comp, first->len * sizeof *comp);
    comp[at] = ur_pool_intern(&plan->pool, layer, strlen(layer), err);
    if (comp[at] == NULL) {
        return UR_ENOMEM;
    }
    a->out[li].comp = comp;
    a->out[li].len = first->len;
    a->out[li].seq = first->seq;
    return UR_OK;
}

/* n_out empty paths for `a`, owned by the plan. */
static int out_paths(ur_plan *plan, ur_plan_action *a, uint64_t n_out, ur_err *err)
{
    if (n_out > SIZE_MAX / sizeof *a->out) {
        return ur_err_oom(err);
    }
    a->out = ur_pool_alloc(&plan->pool, (n_out ? (size_t)n_out : 1) * sizeof *a->out, err);
    return a->out != NULL ? UR_OK : UR_ENOMEM;
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
static int is_aux(const ur_plan_walk *w, const ur_plan_family *fam, const ur_plan_leaf *l,
                  size_t st, size_t en)
{
    if (w->plan->layout == UR_PLAN_LAYOUT_LINEN && path_is(l, 0, "nnx_aux")) {
        return 1;
    }
    /* a param-only checkpoint holds them at their parameter paths */
    return w->params_only && fam->aux_leaf != NULL && fam->aux_leaf(l, st, en);
}

int ur_plan__router_bias(const ur_plan_leaf *l, size_t st, size_t en)
{
    return en >= st + 3 && strcmp(l->path[en - 3], "MoeBlock_0") == 0 &&
           strcmp(l->path[en - 2], "gate") == 0 && strcmp(l->path[en - 1], "bias") == 0;
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

static int add_bytes(uint64_t *acc, uint64_t elems, size_t itemsize, uint64_t times, ur_err *err)
{
    uint64_t b;
    if (ur_ckd_mul64(&b, elems, (uint64_t)itemsize) || ur_ckd_mul64(&b, b, times) ||
        ur_ckd_add64(acc, *acc, b)) {
        return ur_err_set(err, UR_ECORRUPT, "checkpoint size overflows");
    }
    return UR_OK;
}

int ur_plan__sub_layer(const char *c, int64_t k, int64_t *j)
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

int64_t ur_plan__cycle(const ur_family_keys *k)
{
    int64_t c = ur_family_int(k, &ur_key_inhomogeneous_layer_cycle_interval);
    return c > 1 ? c : 1;
}

void ur_plan__group_set(ur_plan_group *g, const char *name, int64_t n_layers, int64_t cycle,
                        int64_t first_out, const char *out_name)
{
    g->name = name;
    g->n_layers = n_layers;
    g->cycle = cycle;
    g->first_out = first_out;
    g->out_name = out_name;
}

/* Stacks under decoder/ that the config's family does not read, refused before the groups
 * are set up: a pipeline stack when the config has no pipeline; DeepSeek Engram chunks
 * (dense_layers_<a>_<b>, moe_layers_engram_<k>, ...) when the config has no engram_layers
 * (family_deepseek_engram.c reads them when it has). */
static int refuse_foreign_stacks(const ur_plan_walk *w, ur_err *err)
{
    const ur_settings *s = w->s;
    size_t n_engram = 0;
    int has_pipe = 0;
    (void)ur_family_list(w->k, &ur_key_engram_layers, &n_engram);
    for (size_t i = 0; i < w->n && w->plan->unrolled; i++) {
        const ur_plan_leaf *l = &w->leaves[i];
        for (size_t c = 0; c + 1 < l->path_len; c++) {
            if (strcmp(l->path[c], "decoder") != 0) {
                continue;
            }
            if (strcmp(l->path[c + 1], "pipeline_module") == 0) {
                has_pipe = 1;
            }
            if ((strncmp(l->path[c + 1], "dense_layers_", 13) == 0 ||
                 strncmp(l->path[c + 1], "moe_layers_", 11) == 0) &&
                (n_engram == 0 || strcmp(s->decoder_block, "deepseek") != 0)) {
                return ur_err_set(err, UR_EINVAL,
                                  "decoder/%s: the checkpoint has DeepSeek Engram layer chunks "
                                  "but the config has no engram_layers (decoder_block=%s)",
                                  l->path[c + 1], s->decoder_block);
            }
        }
    }
    if (has_pipe) {
        return ur_err_set(err, UR_EINVAL,
                          "the checkpoint has a pipeline stack (decoder/pipeline_module) but the "
                          "config has no pipeline parallelism (ici_pipeline_parallelism=%lld, "
                          "dcn_pipeline_parallelism=%lld)",
                          (long long)ur_family_int(w->k, &ur_key_ici_pipeline_parallelism),
                          (long long)ur_family_int(w->k, &ur_key_dcn_pipeline_parallelism));
    }
    return UR_OK;
}

/* Layer counts a family's formula gave that no checkpoint can have. */
static int check_group_counts(const ur_plan *plan, const ur_settings *s, const ur_family_keys *k,
                              ur_err *err)
{
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
                              (long long)ur_family_int(k, &ur_key_first_num_dense_layers));
        }
    }
    return UR_OK;
}

/* The scanned groups of the config's family (docs/maxtext-checkpoints.md §5; MaxText
 * nnx_decoders.py _init_scanned_*), checked against the tree for layouts not handled. */
static int setup_groups(ur_plan_walk *w, const ur_plan_family *fam, ur_err *err)
{
    int rc;
    if (!fam->pipeline) {
        rc = refuse_foreign_stacks(w, err);
        if (rc < 0) {
            return rc;
        }
    }
    rc = fam->setup(w, err);
    if (rc < 0 || fam->pipeline) {
        return rc;
    }
    return check_group_counts(w->plan, w->s, w->k, err);
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
    rc = out_paths(plan, a, 1, err);
    if (rc < 0) {
        return rc;
    }
    a->n_out = 1;
    rc = path_build(plan, &a->out[0], parts, n_parts, err);
    if (rc < 0) {
        return rc;
    }
    plan->summary.leaves_copied++;
    plan->summary.leaves_out++;
    return add_bytes(&plan->summary.bytes_out, elems, ur_dtype_size(a->out_dtype), 1, err);
}

void ur_plan__drop(ur_plan_walk *w, const ur_plan_item *it, const char *why)
{
    it->a->kind = UR_PLAN_DROP;
    it->a->why = why;
    w->plan->summary.leaves_kept--;
    w->plan->summary.leaves_dropped++;
}

void ur_plan__leave_out(ur_plan_walk *w, const ur_plan_item *it, const char *why)
{
    ur_plan__drop(w, it, why);
    w->plan->summary.leaves_left_out++;
    w->plan->summary.left_out_why = why;
}

int ur_plan__copy_to_layer(ur_plan_walk *w, const ur_plan_item *it, const char *layer, size_t rest,
                           ur_err *err)
{
    const char *mid[2] = {"decoder", layer};
    span parts[4] = {w->prefix,
                     {mid, 2, NULL},
                     ur_plan__leaf_span(it->l, rest, it->en),
                     w->suffix};
    return set_copy(w->plan, it->a, parts, 4, it->elems, err);
}

int ur_plan__unstack(ur_plan_walk *w, const ur_plan_item *it, int g, size_t rest, uint64_t n_out,
                     int64_t div, int64_t mul, int64_t add, ur_err *err)
{
    ur_plan *plan = w->plan;
    ur_plan_action *a = it->a;
    ur_plan_group *grp = &plan->groups[g];
    int rc;
    grp->present = 1;
    grp->n_leaves++;
    grp->n_axis[a->axes[a->n_axes - 1]]++;
    a->group = g;
    a->kind = UR_PLAN_UNSTACK;
    a->axis = a->axes[a->n_axes - 1];
    plan->summary.leaves_unstacked++;
    rc = add_bytes(&plan->summary.bytes_out, it->elems, ur_dtype_size(a->out_dtype), 1, err);
    if (rc < 0) {
        return rc;
    }
    rc = out_paths(plan, a, n_out, err);
    if (rc < 0) {
        return rc;
    }
    for (uint64_t li = 0; li < n_out; li++) {
        char layer[96];
        const char *mid[2] = {"decoder", layer};
        span parts[4] = {w->prefix,
                         {mid, 2, NULL},
                         ur_plan__leaf_span(it->l, rest, it->en),
                         w->suffix};
        int64_t gl = ((int64_t)li / div) * mul + (int64_t)li % div + add;
        layer_name(layer, sizeof layer, grp->out_name ? grp->out_name : "layers", gl);
        rc = layer_path(plan, a, li, parts, 4, w->prefix.n + 1, layer, err);
        if (rc < 0) {
            return rc;
        }
        a->n_out++;
    }
    plan->summary.leaves_out += (size_t)n_out;
    return UR_OK;
}

int ur_plan__take(ur_plan_walk *w, const ur_plan_item *it, size_t axis, uint64_t keep, size_t rest,
                  ur_err *err)
{
    ur_plan *plan = w->plan;
    ur_plan_action *a = it->a;
    uint64_t n = it->l->shape[axis];
    span parts[4] = {w->prefix, ur_plan__leaf_span(it->l, it->st, rest),
                     ur_plan__leaf_span(it->l, rest + 1, it->en), w->suffix};
    int rc;
    assert(axis < it->l->rank && keep < n && rest < it->en);
    a->kind = UR_PLAN_UNSTACK;
    a->axis = axis;
    a->n_axes = 0;
    a->group = -1;
    rc = out_paths(plan, a, n, err);
    if (rc < 0) {
        return rc;
    }
    a->n_out = (size_t)n; /* the others stay empty paths: discarded */
    rc = path_build(plan, &a->out[keep], parts, 4, err);
    if (rc < 0) {
        return rc;
    }
    plan->summary.leaves_unstacked++;
    plan->summary.leaves_out++;
    return add_bytes(&plan->summary.bytes_out, it->elems / n, ur_dtype_size(a->out_dtype), 1, err);
}

int ur_plan__mtp_layer(const ur_plan_leaf *l, size_t st, size_t en, size_t *rest)
{
    const char *layer;
    const char *c;
    size_t n;
    if (en - st < 4 || strcmp(l->path[st], "mtp_block") != 0 ||
        strncmp(l->path[st + 1], "mtp_layer_", 10) != 0) {
        return 0;
    }
    layer = l->path[st + 1] + 10; /* "<k>" of mtp_layer_<k> */
    n = strlen(layer);
    c = l->path[st + 2];
    if (n == 0 || strncmp(c, "mtp_", 4) != 0 || strncmp(c + 4, layer, n) != 0 ||
        strcmp(c + 4 + n, "_transformer_layer") != 0) {
        return 0;
    }
    *rest = st + 3;
    return 1;
}

/* maxtext 0.2.5: models.py:145-153 builds the MTP layer from get_decoder_layers()[-1], the
 * scannable block when scan_layers is true (nnx_decoders.py:1220-1221, :1234-1252), and
 * multi_token_prediction.py:215-220 passes it (config, mesh, model_mode, rngs) only: gpt_oss.py
 * GptOssDecoderLayer needs attention_type, qwen3.py Qwen3NextDecoderLayer layer_idx (TypeError,
 * re-proved by tests/maxtext test_maxtext_mtp_unscanned_blocked); deepseek4 refuses MTP
 * (configs/types.py:5532-5533). */
int ur_plan__mtp_unsupported(ur_plan_walk *w, const ur_plan_item *it, ur_err *err)
{
    char name[512];
    return ur_err_set(err, UR_EUNSUPPORTED,
                      "leaf '%s': multi-token prediction (mtp_num_layers > 0) of a %s model "
                      "with scan_layers=true builds its MTP layer as a whole scanned block "
                      "(get_decoder_layers()[-1] in MaxText's models.py), the unscanned model "
                      "as one decoder layer with default arguments, which MaxText 0.2.5 cannot "
                      "build for gpt_oss, olmo3, qwen3_next and qwen3_5 (a required argument "
                      "is missing) and which no sub-layer of the block is known to be for the "
                      "others: unrolling it is not supported",
                      ur_plan_path_format(it->l->path, it->l->path_len, name, sizeof name),
                      w->s->decoder_block);
}

/* A leaf of scanned stack decoder/<stack> with no layer axis. Rank 0: no scanned model stores
 * one (the scan adds the layer axis to every parameter), so the input is inconsistent.
 * Otherwise param_scan_axis (from the config) lies past the leaf's last axis. */
static int no_layer_axis(const ur_plan_leaf *l, const ur_settings *s, const char *stack,
                         ur_err *err)
{
    char name[512];
    char shape[256];
    ur_plan_path_format(l->path, l->path_len, name, sizeof name);
    if (l->rank == 0) {
        return ur_err_set(err, UR_ECORRUPT,
                          "leaf '%s': rank-0 leaf under the scanned group decoder/%s has no "
                          "layer axis (a scanned model stacks every parameter of the group)",
                          name, stack);
    }
    ur_plan__shape_format(l, shape, sizeof shape);
    return ur_err_set(err, UR_EINVAL,
                      "leaf '%s' shape %s under the scanned group decoder/%s: no axis %lld "
                      "(param_scan_axis) to take the layers from",
                      name, shape, stack, (long long)s->param_scan_axis);
}

/* A leaf decoder/<stack>/[layers_<sub>/]R of a stack of nl layers: UNSTACK on its layer axis
 * (or REPLICATE an empty entry), slice i to decoder/<out_name>_<first + i * step>/R,
 * R = path[rest..en). */
static int stack_leaf(ur_plan_walk *w, const ur_plan_item *it, const char *stack, int64_t nl,
                      const char *out_name, int64_t first, int64_t step, size_t rest, ur_err *err)
{
    const ur_plan_leaf *l = it->l;
    ur_plan_action *a = it->a;
    ur_plan *plan = w->plan;
    const ur_settings *s = w->s;
    int axis = it->aux ? aux_scan_axis(l, s) : ur_plan_scan_axis(l, s);
    int rc;
    if (axis >= 0) {
        if (l->shape[axis] != (uint64_t)nl) {
            char name[512];
            char shape[256];
            ur_plan__shape_format(l, shape, sizeof shape);
            /* The checkpoint contradicts itself when its own spec names this axis as the
             * layer axis and the group's other leaves have the expected count: a damaged
             * input. Otherwise the config does not fit it. */
            int damaged = spec_scan_axis(l, s) == axis &&
                          sibling_has_length(w->leaves, w->n, l, it->st + 2, s, (uint64_t)nl);
            return ur_err_set(err, damaged ? UR_ECORRUPT : UR_EINVAL,
                              "leaf '%s' shape %s: axis %d has length %llu, expected %lld "
                              "(the layer count of decoder/%s)",
                              ur_plan_path_format(l->path, l->path_len, name, sizeof name), shape,
                              axis, (unsigned long long)l->shape[axis], (long long)nl, stack);
        }
        a->kind = UR_PLAN_UNSTACK;
        a->axis = (size_t)axis;
        plan->summary.leaves_unstacked++;
        rc = add_bytes(&plan->summary.bytes_out, it->elems, ur_dtype_size(a->out_dtype), 1, err);
    } else if (l->dtype != UR_DT_INVALID) {
        /* MaxText scans with variable_axes={'params': param_scan_axis}: every array of the
         * group is stacked, and generate_param_only_checkpoint takes layer i with jnp.take on
         * that axis, which fails for an array without it. Copying it into every layer would
         * invent an answer MaxText never gives. */
        return no_layer_axis(l, s, stack, err);
    } else {
        /* an empty entry ({} or None): tree_map keeps it in every layer */
        a->kind = UR_PLAN_REPLICATE;
        plan->summary.leaves_replicated++;
        rc = add_bytes(&plan->summary.bytes_out, it->elems, ur_dtype_size(a->out_dtype),
                       (uint64_t)nl, err);
    }
    if (rc < 0) {
        return rc;
    }
    rc = out_paths(plan, a, (uint64_t)nl, err);
    if (rc < 0) {
        return rc;
    }
    for (int64_t li = 0; li < nl; li++) {
        char layer[96];
        const char *mid[2] = {"decoder", layer};
        span parts[4] = {w->prefix,
                         {mid, 2, NULL},
                         ur_plan__leaf_span(l, rest, it->en),
                         w->suffix};
        layer_name(layer, sizeof layer, out_name, first + li * step);
        rc = layer_path(plan, a, (uint64_t)li, parts, 4, w->prefix.n + 1, layer, err);
        if (rc < 0) {
            return rc;
        }
        a->n_out++;
    }
    plan->summary.leaves_out += (size_t)nl;
    return UR_OK;
}

int ur_plan__unstack_to(ur_plan_walk *w, const ur_plan_item *it, const char *stack, int64_t nl,
                        const char *out_name, int64_t first, size_t rest, ur_err *err)
{
    it->a->group = -1;
    return stack_leaf(w, it, stack, nl, out_name, first, 1, rest, err);
}

/* A leaf decoder/<group>/[layers_<sub>/]R of a plain or block group: UNSTACK on its layer axis
 * (or REPLICATE an empty entry) into the group's output names, path[rest..en) kept. */
static int group_leaf(ur_plan_walk *w, const ur_plan_item *it, int64_t sub, size_t rest,
                      ur_err *err)
{
    ur_plan_group *grp = &w->plan->groups[it->g];
    int rc;
    grp->present = 1;
    grp->n_leaves++;
    it->a->group = it->g;
    /* a plain group's layer i is <name>_<i>; a block's sub-layer `sub` of block b is
     * <out_name>_<first_out + b * cycle + sub> */
    rc = stack_leaf(w, it, grp->name, grp->n_layers, grp->out_name ? grp->out_name : grp->name,
                    grp->out_name ? grp->first_out + sub : 0, grp->out_name ? grp->cycle : 1, rest,
                    err);
    if (rc == UR_OK && it->a->kind == UR_PLAN_UNSTACK) {
        grp->n_axis[it->a->axis]++;
    }
    return rc;
}

/* A kept leaf whose model path is path[st..en): through the family's hook, then a group of
 * the family, else a copy. */
static int model_leaf(ur_plan_walk *w, const ur_plan_family *fam, ur_plan_item *it, ur_err *err)
{
    const ur_plan_leaf *l = it->l;
    ur_plan *plan = w->plan;
    size_t st = it->st;
    size_t en = it->en;
    size_t rest = st + 2;
    int64_t sub = 0;
    size_t mtp_rest;
    int rc;
    if (plan->unrolled && fam->mtp_leaf != NULL && ur_plan__mtp_layer(l, st, en, &mtp_rest)) {
        int done = 0;
        rc = fam->mtp_leaf(w, it, mtp_rest, &done, err);
        if (rc < 0 || done) {
            return rc;
        }
    }
    if (plan->unrolled && en - st >= 3 && strcmp(l->path[st], "decoder") == 0) {
        for (size_t k = 0; k < plan->n_groups; k++) {
            if (strcmp(l->path[st + 1], plan->groups[k].name) == 0) {
                it->g = (int)k;
            }
        }
        if (fam->leaf != NULL) {
            int done = 0;
            if (it->aux && (fam->pipeline || fam->nested)) {
                /* the family's layer axes are those of its params (param_scan_axis); where
                 * MaxText's nested or pipeline scans put a variable's is not known */
                char name[512];
                return ur_err_set(err, UR_EUNSUPPORTED,
                                  "leaf '%s': a non-parameter variable (nnx_aux) of a %s "
                                  "scan: its layer axes there are not known to unroll",
                                  ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                                  fam->pipeline ? "pipeline" : "nested");
            }
            rc = fam->leaf(w, it, &done, err);
            if (rc < 0 || done) {
                return rc;
            }
        }
        if (it->g >= 0 && plan->groups[it->g].cycle > 1) {
            /* a block of K sub-layers: decoder/<group>/layers_<j>/R */
            const ur_plan_group *grp = &plan->groups[it->g];
            if (en - st < 4 || !ur_plan__sub_layer(l->path[st + 2], grp->cycle, &sub)) {
                char name[512];
                return ur_err_set(err, UR_EINVAL,
                                  "leaf '%s': decoder/%s holds blocks of %lld sub-layers, but "
                                  "this leaf is not under layers_<j> or layer_<j> (j < %lld)",
                                  ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                                  grp->name, (long long)grp->cycle, (long long)grp->cycle);
            }
            rest = st + 3;
        }
    }
    if (it->g < 0) {
        span parts[3] = {w->prefix, ur_plan__leaf_span(l, st, en), w->suffix};
        return set_copy(plan, it->a, parts, 3, it->elems, err);
    }
    return group_leaf(w, it, sub, rest, err);
}

/* Leaf i: dropped (outside the model, optimizer state, RNG), or kept and planned. */
static int plan_leaf(ur_plan_walk *w, const ur_plan_family *fam, size_t i, ur_err *err)
{
    const ur_plan_leaf *l = &w->leaves[i];
    ur_plan *plan = w->plan;
    ur_plan_item it = {l, &plan->actions[i], 0, 0, -1, 0, 0};
    ur_plan_action *a = it.a;
    const char *why;
    int rc;
    a->group = -1;
    a->out_dtype = l->dtype;
    if (l->rank > UR_MAX_RANK) {
        return ur_err_set(err, UR_EINVAL, "leaf rank %zu > %d", l->rank, UR_MAX_RANK);
    }
    if (l->dtype != UR_DT_INVALID) {
        rc = leaf_elems(l, &it.elems, err);
        if (rc == UR_OK) {
            rc = add_bytes(&plan->summary.bytes_in, it.elems, ur_dtype_size(l->dtype), 1, err);
        }
        if (rc < 0) {
            return rc;
        }
    }
    why = model_path(l, plan->layout, &it.st, &it.en);
    if (why) {
        a->kind = UR_PLAN_DROP;
        a->why = why;
        plan->summary.leaves_dropped++;
        return UR_OK;
    }
    plan->summary.leaves_kept++;
    rc = add_bytes(&plan->summary.bytes_read, it.elems, ur_dtype_size(l->dtype), 1, err);
    if (rc < 0) {
        return rc;
    }
    it.aux = is_aux(w, fam, l, it.st, it.en);
    if (ur_dtype_is_float(l->dtype) && !it.aux) {
        a->out_dtype = UR_DT_BFLOAT16;
    }
    /* the run would refuse it chunk by chunk: say so now, and in the dry run */
    if (l->dtype != UR_DT_INVALID && !ur_tensor_cast_supported(a->out_dtype, l->dtype)) {
        char name[512];
        return ur_err_set(err, UR_EUNSUPPORTED, "leaf '%s': no conversion from %s to %s",
                          ur_plan_path_format(l->path, l->path_len, name, sizeof name),
                          ur_dtype_name(l->dtype), ur_dtype_name(a->out_dtype));
    }
    return model_leaf(w, fam, &it, err);
}

/* generate_param_only_checkpoint asserts the training state has an optimizer state */
static int check_opt_state(const ur_plan *plan, const ur_plan_leaf *leaves, size_t n, ur_err *err)
{
    int has_opt = 0;
    if (plan->layout == UR_PLAN_LAYOUT_LINEN) {
        has_opt = has_array_under(leaves, n, "opt_state", NULL);
    } else if (plan->layout == UR_PLAN_LAYOUT_NNX_LEGACY) {
        has_opt = has_array_under(leaves, n, "optimizer", "opt_state");
    }
    if (!has_opt) {
        return ur_err_set(err, UR_EINVAL,
                          "missing opt_state in training checkpoint: load_full_state_path "
                          "needs a full training state (use load_parameters_path for a "
                          "param-only checkpoint)");
    }
    return UR_OK;
}

/* The output wrapper around each model path. */
static void set_wrapper(ur_plan_walk *w)
{
    static const char *const k_params2[] = {"params", "params"};
    static const char *const k_value[] = {"value"};
    if (w->lora) {
        /* the NNX branch saves the single-nested adapter tree under a TrainState */
        w->prefix.c = k_params2;
        w->prefix.n = w->s->pure_nnx ? 1 : 2;
    } else if (w->plan->nnx_output) {
        w->suffix.c = k_value;
        w->suffix.n = 1;
    } else {
        w->prefix.c = k_params2;
        w->prefix.n = 2;
    }
}

/* generate_param_only_checkpoint raises "Missing <group>" for the base model; LoRA adapters
 * without a group are skipped. */
static int check_groups_present(const ur_plan_walk *w, ur_err *err)
{
    const ur_plan *plan = w->plan;
    if (!plan->unrolled || w->lora) {
        return UR_OK;
    }
    for (size_t g = 0; g < plan->n_groups; g++) {
        if (!plan->groups[g].present && plan->groups[g].n_layers > 0) {
            return ur_err_set(err, UR_EINVAL,
                              "missing decoder/%s in the input checkpoint (scan_layers=true "
                              "and force_unroll=true need a scanned checkpoint)",
                              plan->groups[g].name);
        }
    }
    return UR_OK;
}

/* the Linen decode state: TrainState(step=0, params=..., opt_state={}) */
static int add_linen_extras(ur_plan *plan, ur_err *err)
{
    static const char *const k_step[] = {"step"};
    static const char *const k_opt[] = {"opt_state"};
    span p1 = {k_step, 1, NULL};
    span p2 = {k_opt, 1, NULL};
    int rc;
    plan->extras = ur_calloc(2, sizeof *plan->extras);
    if (!plan->extras) {
        return ur_err_oom(err);
    }
    plan->extras[0].kind = UR_PLAN_EXTRA_ZERO_SCALAR;
    rc = path_build(plan, &plan->extras[0].path, &p1, 1, err);
    if (rc < 0) {
        return rc;
    }
    plan->n_extras = 1;
    plan->extras[1].kind = UR_PLAN_EXTRA_EMPTY_DICT;
    rc = path_build(plan, &plan->extras[1].path, &p2, 1, err);
    if (rc < 0) {
        return rc;
    }
    plan->n_extras = 2;
    return UR_OK;
}

int ur_plan_validate_keys(const ur_settings *s, ur_err *err)
{
    ur_family_keys k;
    int rc = ur_family_keys_resolve(&k, s->config, err);
    ur_family_keys_dispose(&k);
    return rc;
}

int ur_plan_build(ur_plan **out, const ur_plan_leaf *leaves, size_t n, const ur_settings *s,
                  ur_plan_input input, ur_err *err)
{
    const ur_plan_family *fam;
    ur_family_keys keys;
    ur_plan_walk w;
    ur_plan *plan = NULL;
    int rc;

    memset(&w, 0, sizeof w);
    /* the families' own keys, typed and checked once for the whole walk */
    rc = ur_family_keys_resolve(&keys, s->config, err);
    if (rc < 0) {
        goto out;
    }
    fam = ur_family_find(s, &keys);
    plan = ur_calloc(1, sizeof *plan);
    if (!plan) {
        rc = ur_err_oom(err);
        goto out;
    }
    ur_pool_init(&plan->pool);
    plan->actions = ur_calloc(n ? n : 1, sizeof *plan->actions);
    if (!plan->actions) {
        rc = ur_err_oom(err);
        goto out;
    }
    w.plan = plan;
    w.s = s;
    w.k = &keys;
    w.leaves = leaves;
    w.n = n;
    w.lora = input == UR_PLAN_INPUT_LORA;
    w.params_only = input == UR_PLAN_INPUT_PARAMS;
    rc = detect_layout(&plan->layout, leaves, n, input, err);
    if (rc < 0) {
        goto out;
    }
    plan->unrolled = s->scan_layers && s->force_unroll;
    plan->nnx_output = s->pure_nnx && !w.lora;
    if (input == UR_PLAN_INPUT_FULL_STATE) {
        rc = check_opt_state(plan, leaves, n, err);
        if (rc < 0) {
            goto out;
        }
    }
    rc = setup_groups(&w, fam, err);
    if (rc < 0) {
        goto out;
    }
    set_wrapper(&w);
    plan->n_actions = n;
    plan->summary.leaves_in = n;
    for (size_t i = 0; i < n; i++) {
        rc = plan_leaf(&w, fam, i, err);
        if (rc < 0) {
            goto out;
        }
    }
    rc = check_groups_present(&w, err);
    if (rc == UR_OK && fam->finish != NULL) {
        rc = fam->finish(&w, err);
    }
    if (rc == UR_OK && !plan->nnx_output) {
        rc = add_linen_extras(plan, err);
    }
    if (rc < 0) {
        goto out;
    }
    *out = plan;
    plan = NULL;
    rc = UR_OK;
out:
    ur_plan_free(plan);
    ur_family_keys_dispose(&keys);
    return rc;
}
