/* Pipeline parallelism (scan_layers and force_unroll with ici_pipeline_parallelism *
 * dcn_pipeline_parallelism = stages > 1), as MaxText's types.py derives it
 * (using_pipeline_parallelism, pipeline_parallel_layers, num_pipeline_repeats) and
 * nnx_decoders.py _init_pipeline_layers builds it. decoder/pipeline_module holds
 * P = pipeline_parallel_layers layers; the others are plain scanned groups:
 *   - the plain family (_init_pipeline_generic): the stack holds layers 0..P-1, and
 *     decoder/layers_outside_pipeline the rest (run after the pipeline), output names from P;
 *   - DeepSeek (_init_pipeline_deepseek; P defaults to the MoE layers): decoder/dense_layers,
 *     then decoder/moe_layers_outside_pipeline (the first M - P of the M MoE layers), both run
 *     before the pipeline (nnx_decoders.py __call__, get_layers), and the stack holds MoE
 *     layers M - P..M-1; the unpipelined model names them dense_layers_<i>, moe_layers_<i>.
 *
 * A leaf decoder/pipeline_module/layers/<stage>/R has shape [repeats (when > 1), stages, ...];
 * <stage> is the layer itself (layers_per_stage 1), scanned_layers/ (scan_layers_per_stage: a
 * layers_per_stage axis at param_scan_axis of the stage leaf) or layers_<j>/. The C-order
 * linear index over those layer axes is the pipelined layer (pipeline.py: repeat_ids index
 * axis 0, stages axis 1; a microbatch runs stages 0..S-1 of repeat 0, then of repeat 1, ...):
 * layer (r * stages + s) * layers_per_stage + j of the stack. */
#include "family.h"

#include <stdint.h>
#include <string.h>

/* Raw config values, derived in setup as types.py derives them; the parallelism ones are read
 * by the walk's messages too (family.h). */
const ur_family_key ur_key_ici_pipeline_parallelism = {"ici_pipeline_parallelism",
                                                       UR_FAMILY_KEY_INT, 1, INT64_MIN};
const ur_family_key ur_key_dcn_pipeline_parallelism = {"dcn_pipeline_parallelism",
                                                       UR_FAMILY_KEY_INT, 1, INT64_MIN};
static const ur_family_key k_layers_per_stage = {"num_layers_per_pipeline_stage",
                                                 UR_FAMILY_KEY_INT, 1, INT64_MIN};
/* -1: pipeline_parallel_layers / (stages * layers per stage) */
static const ur_family_key k_repeats = {"num_pipeline_repeats", UR_FAMILY_KEY_INT, -1, INT64_MIN};
/* -1: num_decoder_layers (DeepSeek: its MoE layers) */
static const ur_family_key k_parallel_layers = {"pipeline_parallel_layers", UR_FAMILY_KEY_INT, -1,
                                                INT64_MIN};
static const ur_family_key k_scan_per_stage = {"scan_layers_per_stage", UR_FAMILY_KEY_BOOL, 0,
                                               INT64_MIN};

static const ur_family_key *const k_keys[] = {&ur_key_ici_pipeline_parallelism,
                                              &ur_key_dcn_pipeline_parallelism,
                                              &k_layers_per_stage,
                                              &k_repeats,
                                              &k_parallel_layers,
                                              &k_scan_per_stage,
                                              NULL};

typedef struct {
    int64_t repeats, stages, lps;
    int scanned; /* scan_layers_per_stage with lps > 1 */
} pipe_state;
UR_FAMILY_STATE_FITS(pipe_state);

static int applies(const ur_settings *s, const ur_family_keys *k)
{
    return s->scan_layers && s->force_unroll &&
           (ur_family_int(k, &ur_key_ici_pipeline_parallelism) > 1 ||
            ur_family_int(k, &ur_key_dcn_pipeline_parallelism) > 1);
}

/* The groups besides the stack (group 0, P layers): DeepSeek's dense layers and MoE layers
 * outside the pipeline, which come first; the plain family's layers after it. */
static int setup_groups(ur_plan_walk *w, int64_t p, ur_err *err)
{
    const ur_settings *s = w->s;
    ur_plan *plan = w->plan;
    int64_t nl = s->num_decoder_layers;
    int64_t d = ur_family_int(w->k, &ur_key_first_num_dense_layers);
    int64_t moe = nl - d;
    plan->n_groups = 1;
    if (strcmp(s->decoder_block, "deepseek") != 0) {
        ur_plan__group_set(&plan->groups[0], "pipeline_module", p, 1, 0, "layers");
        if (nl > p) {
            plan->n_groups = 2;
            ur_plan__group_set(&plan->groups[1], "layers_outside_pipeline", nl - p, 1, p,
                               "layers");
        }
        return UR_OK;
    }
    if (moe < 0 || p > moe) {
        return ur_err_set(err, UR_EINVAL,
                          "pipeline_parallel_layers=%lld: DeepSeek pipelines only its MoE layers "
                          "(num_decoder_layers=%lld - first_num_dense_layers=%lld)",
                          (long long)p, (long long)nl, (long long)d);
    }
    ur_plan__group_set(&plan->groups[0], "pipeline_module", p, 1, moe - p, "moe_layers");
    ur_plan__group_set(&plan->groups[1], "dense_layers", d, 1, 0, NULL);
    plan->n_groups = 2;
    if (moe > p) {
        plan->n_groups = 3;
        ur_plan__group_set(&plan->groups[2], "moe_layers_outside_pipeline", moe - p, 1, 0,
                           "moe_layers");
    }
    return UR_OK;
}

static int setup(ur_plan_walk *w, ur_err *err)
{
    pipe_state *ps = UR_FAMILY_STATE(pipe_state, w);
    const ur_settings *s = w->s;
    int64_t nl = s->num_decoder_layers;
    int deepseek = strcmp(s->decoder_block, "deepseek") == 0;
    int64_t ici = ur_family_int(w->k, &ur_key_ici_pipeline_parallelism);
    int64_t dcn = ur_family_int(w->k, &ur_key_dcn_pipeline_parallelism);
    int64_t repeats = ur_family_int(w->k, &k_repeats);
    int64_t st, lps, p, r;
    if (ici < 1 || dcn < 1) {
        return ur_err_set(err, UR_EINVAL,
                          "ici_pipeline_parallelism=%lld, dcn_pipeline_parallelism=%lld: must "
                          "be >= 1",
                          (long long)ici, (long long)dcn);
    }
    if (!ur_family_find_block(s, w->k)->pipelinable) {
        return ur_err_set(err, UR_EUNSUPPORTED,
                          "pipeline-parallel checkpoint with decoder_block %s%s: unrolling its "
                          "pipeline stacks is not supported",
                          s->decoder_block,
                          ur_plan__cycle(w->k) > 1 ? " and inhomogeneous_layer_cycle_interval > 1"
                                                   : "");
    }
    if (__builtin_mul_overflow(ici, dcn, &st) || st > (1 << 20)) {
        return ur_err_set(err, UR_EINVAL, "pipeline stages overflow");
    }
    lps = ur_family_int(w->k, &k_layers_per_stage);
    /* types.py: -1 pipelines every layer, DeepSeek's MoE layers */
    p = ur_family_int(w->k, &k_parallel_layers);
    if (p == -1) {
        p = deepseek ? nl - ur_family_int(w->k, &ur_key_first_num_dense_layers) : nl;
    }
    if (lps < 1 || lps > (1 << 20) || p < 1 || p > nl || p > (1 << 20)) {
        return ur_err_set(err, UR_EINVAL,
                          "num_layers_per_pipeline_stage=%lld, pipeline_parallel_layers=%lld "
                          "do not fit num_decoder_layers=%lld",
                          (long long)lps, (long long)p, (long long)nl);
    }
    r = repeats;
    if (r == -1) {
        r = p / (st * lps);
    }
    if (r < 1 || r > (1 << 20) || r * st * lps != p) {
        return ur_err_set(err, UR_EINVAL,
                          "pipeline stages (%lld) x repeats (%lld) x layers per stage (%lld) "
                          "must equal pipeline_parallel_layers (%lld)",
                          (long long)st, (long long)repeats, (long long)lps, (long long)p);
    }
    ps->stages = st;
    ps->repeats = r;
    ps->lps = lps;
    ps->scanned = lps > 1 && ur_family_int(w->k, &k_scan_per_stage);
    return setup_groups(w, p, err);
}

/* A leaf of decoder/pipeline_module: UNSTACK over [repeats,] stages[, layers_per_stage], times
 * layers_per_stage plus j for the sequential stage's layers_<j>, from the stack's first output
 * layer on. */
static int pipe_leaf(ur_plan_walk *w, const ur_plan_item *it, ur_err *err)
{
    const pipe_state *ps = UR_FAMILY_STATE(pipe_state, w);
    const ur_plan_leaf *l = it->l;
    ur_plan_action *a = it->a;
    size_t st = it->st;
    size_t en = it->en;
    size_t lead = ps->repeats > 1 ? 2 : 1;
    size_t rest = st + 3;
    int64_t j = 0;
    int64_t per = 1; /* layers per index tuple of the layer axes */
    uint64_t want[UR_PLAN_MAX_LAYER_AXES] = {0};
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
        want[a->n_axes] = (uint64_t)ps->repeats;
        a->axes[a->n_axes++] = 0;
    }
    want[a->n_axes] = (uint64_t)ps->stages;
    a->axes[a->n_axes++] = lead - 1;
    if (ps->scanned) {
        int64_t psa = w->s->param_scan_axis;
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
                              name, l->rank, (long long)w->s->param_scan_axis);
        }
        want[a->n_axes] = (uint64_t)ps->lps;
        a->axes[a->n_axes++] = lead + (size_t)psa;
        rest = st + 4;
    } else if (ps->lps > 1) {
        if (en - st < 5 || !ur_plan__sub_layer(l->path[st + 3], ps->lps, &j) ||
            strncmp(l->path[st + 3], "layers_", 7) != 0) {
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s': a pipeline stage of %lld unscanned layers holds "
                              "layers_0..layers_%lld (set scan_layers_per_stage if the stage "
                              "is scanned)",
                              name, (long long)ps->lps, (long long)ps->lps - 1);
        }
        per = ps->lps;
        rest = st + 4;
    }
    if (l->dtype == UR_DT_INVALID || l->rank < lead) {
        return ur_err_set(err, UR_EINVAL, "leaf '%s': not a pipeline-stacked array", name);
    }
    for (size_t m = 0; m < a->n_axes; m++) {
        if (l->shape[a->axes[m]] != want[m]) {
            ur_plan__shape_format(l, shape, sizeof shape);
            return ur_err_set(err, UR_EINVAL,
                              "leaf '%s' shape %s: axis %zu has length %llu, expected %llu "
                              "(pipeline repeats %lld, stages %lld, layers per stage %lld)",
                              name, shape, a->axes[m], (unsigned long long)l->shape[a->axes[m]],
                              (unsigned long long)want[m], (long long)ps->repeats,
                              (long long)ps->stages, (long long)ps->lps);
        }
        n_out *= want[m];
    }
    return ur_plan__unstack(w, it, 0, rest, n_out, 1, per, w->plan->groups[0].first_out + j, err);
}

/* decoder/pipeline_module is the stack; the other groups are plain */
static int leaf(ur_plan_walk *w, const ur_plan_item *it, int *done, ur_err *err)
{
    if (it->g != 0) {
        return UR_OK;
    }
    *done = 1;
    return pipe_leaf(w, it, err);
}

const ur_plan_family ur_family_pipeline = {
    .name = "pipeline",
    .keys = k_keys,
    .applies = applies,
    .setup = setup,
    .leaf = leaf,
    .pipeline = 1,
};
