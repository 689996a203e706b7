/* plan: the scan-axis resolver and the leaf -> output mapping for every input layout. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/config.h"
#include "unroll/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXL 32

/* A test leaf: its path as one '/'-separated string split in place. */
typedef struct {
    char buf[256];
    const char *comp[24];
    uint64_t shape[UR_MAX_RANK];
    const char *spec[UR_MAX_RANK];
    ur_plan_leaf leaf;
} tleaf;

typedef struct {
    tleaf t[MAXL];
    ur_plan_leaf leaves[MAXL];
    size_t n;
} tset;

static const char *const k_stage[] = {"stage"};
static const char *const k_fsdp[] = {"fsdp"};
static const ur_axis_rule k_rules[] = {
    {"layers", k_stage, 1},
    {"circular_repeats", NULL, 0},
    {"embed", k_fsdp, 1},
};

/* ---- the layout families' config keys ---------------------------------------------------- */

/* Each family declares and reads its own keys (src/maxtext/family_<name>.c) from the config the
 * settings came from, s->config. A test sets one with set_key(&s, "key=value"): a config is
 * loaded from k_family_yml with the overrides s's config had plus this one (the key replaced),
 * and s points at it. The configs live until the group's teardown. */
#define MAX_CFGS 160
#define MAX_OV 12

typedef struct {
    ur_config *cfg;
    char ov[MAX_OV][96];
    size_t n;
} tcfg;

static tcfg g_cfgs[MAX_CFGS];
static size_t g_n_cfgs;
static char g_dir[64];
static char g_yml[128];

/* The families' keys at MaxText's defaults (base.yml): an override must name a config key. */
static const char k_family_yml[] = "decoder_block: \"llama2\"\n"
                                   "first_num_dense_layers: 0\n"
                                   "inhomogeneous_layer_cycle_interval: 1\n"
                                   "first_num_hash_layers: 0\n"
                                   "ici_pipeline_parallelism: 1\n"
                                   "dcn_pipeline_parallelism: 1\n"
                                   "num_layers_per_pipeline_stage: 1\n"
                                   "num_pipeline_repeats: -1\n"
                                   "pipeline_parallel_layers: -1\n"
                                   "scan_layers_per_stage: false\n"
                                   "engram_layers: []\n";

static int group_setup(void **state)
{
    FILE *f;
    (void)state;
    ur_test_scratch_dir(g_dir, sizeof g_dir, "plan");
    snprintf(g_yml, sizeof g_yml, "%s/base.yml", g_dir);
    f = fopen(g_yml, "w");
    if (f == NULL || fputs(k_family_yml, f) < 0 || fclose(f) != 0) {
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < g_n_cfgs; i++) {
        ur_config_free(g_cfgs[i].cfg);
    }
    g_n_cfgs = 0;
    remove(g_yml);
    rmdir(g_dir);
    return 0;
}

/* A config of k_family_yml with the overrides s's config had and `kv`; UR_OK and s->config
 * set, or the load's error. */
static int load_key(ur_settings *s, const char *kv, ur_err *err)
{
    tcfg *c = &g_cfgs[g_n_cfgs];
    const char *ov[MAX_OV];
    size_t klen = strcspn(kv, "=");
    ur_config_opts o;
    int rc;
    assert_true(g_n_cfgs < MAX_CFGS);
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < g_n_cfgs && s->config != NULL; i++) {
        if (g_cfgs[i].cfg == s->config) {
            for (size_t j = 0; j < g_cfgs[i].n; j++) {
                if (strncmp(g_cfgs[i].ov[j], kv, klen + 1) != 0) {
                    snprintf(c->ov[c->n++], sizeof c->ov[0], "%s", g_cfgs[i].ov[j]);
                }
            }
        }
    }
    assert_true(c->n < MAX_OV);
    snprintf(c->ov[c->n++], sizeof c->ov[0], "%s", kv);
    for (size_t j = 0; j < c->n; j++) {
        ov[j] = c->ov[j];
    }
    memset(&o, 0, sizeof o);
    o.config_path = g_yml;
    o.overrides = ov;
    o.n_overrides = c->n;
    o.cwd = "/tmp";
    o.now = 1700000000;
    rc = ur_config_load(&c->cfg, &o, err);
    if (rc == UR_OK) {
        s->config = c->cfg;
        g_n_cfgs++;
    }
    return rc;
}

static void set_key(ur_settings *s, const char *kv)
{
    ur_err err;
    if (load_key(s, kv, &err) != UR_OK) {
        fail_msg("config with %s: %s", kv, err.msg);
    }
}

static ur_settings base_settings(void)
{
    ur_settings s;
    memset(&s, 0, sizeof s);
    s.load_full_state_path = "";
    s.load_parameters_path = "";
    s.lora_input_adapters_path = "";
    s.base_output_directory = "/out";
    s.run_name = "r";
    s.checkpoint_dir = "/out/r/checkpoints/";
    s.model_name = "default";
    s.decoder_block = "llama2";
    s.scan_layers = 1;
    s.force_unroll = 1;
    s.pure_nnx = 1;
    s.enable_nnx = 1;
    s.enable_checkpointing = 1;
    s.param_scan_axis = 1;
    s.global_parameter_scale = 1;
    s.base_num_decoder_layers = 4;
    s.num_decoder_layers = 4;
    s.axis_rules = k_rules;
    s.n_axis_rules = sizeof k_rules / sizeof k_rules[0];
    return s;
}

/* add(set, "a/b/c", dtype, "6,4,16", spec) - spec: per-axis names separated by ' ' with "-"
 * for None, or NULL for no spec. */
static void add(tset *ts, const char *path, ur_dtype dt, const char *shape, const char *spec)
{
    tleaf *t = &ts->t[ts->n];
    ur_plan_leaf *l = &t->leaf;
    char *p;
    size_t k = 0;
    assert_true(ts->n < MAXL);
    memset(t, 0, sizeof *t);
    snprintf(t->buf, sizeof t->buf, "%s", path);
    p = t->buf;
    for (;;) {
        char *slash = strchr(p, '/');
        t->comp[k++] = p;
        if (!slash) {
            break;
        }
        *slash = '\0';
        p = slash + 1;
    }
    l->path = t->comp;
    l->path_len = k;
    l->dtype = dt;
    l->shape = t->shape;
    if (shape && shape[0]) {
        const char *q = shape;
        while (*q) {
            char *end;
            t->shape[l->rank++] = strtoull(q, &end, 10);
            q = *end == ',' ? end + 1 : end;
        }
    }
    if (spec) {
        static char specbuf[MAXL][128];
        char *sp = specbuf[ts->n];
        size_t a = 0;
        snprintf(sp, 128, "%s", spec);
        l->has_spec = 1;
        l->spec = t->spec;
        for (char *tok = sp; tok && *tok && a < l->rank; a++) {
            char *sp2 = strchr(tok, ' ');
            if (sp2) {
                *sp2 = '\0';
            }
            t->spec[a] = strcmp(tok, "-") == 0 ? NULL : tok;
            tok = sp2 ? sp2 + 1 : NULL;
        }
    }
    ts->n++;
}

static ur_plan *build_ok(tset *ts, const ur_settings *s, ur_plan_input in)
{
    ur_plan *plan = NULL;
    ur_err err;
    int rc;
    for (size_t i = 0; i < ts->n; i++) {
        ts->leaves[i] = ts->t[i].leaf;
    }
    rc = ur_plan_build(&plan, ts->leaves, ts->n, s, in, &err);
    if (rc != UR_OK) {
        fail_msg("plan failed: %s", err.msg);
    }
    assert_int_equal(plan->n_actions, ts->n);
    return plan;
}

static int build_fail(tset *ts, const ur_settings *s, ur_plan_input in, ur_err *err)
{
    ur_plan *plan = NULL;
    int rc;
    for (size_t i = 0; i < ts->n; i++) {
        ts->leaves[i] = ts->t[i].leaf;
    }
    rc = ur_plan_build(&plan, ts->leaves, ts->n, s, in, err);
    assert_true(rc < 0);
    assert_null(plan);
    return rc;
}

static const char *fmt(const ur_plan_path *p)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    return ur_plan_path_format((const char *const *)p->comp, p->len, buf[k], sizeof buf[k]);
}

static void expect_unstack(const ur_plan *plan, size_t i, size_t axis, size_t n, const char *first,
                           const char *last)
{
    const ur_plan_action *a = &plan->actions[i];
    assert_int_equal(a->kind, UR_PLAN_UNSTACK);
    assert_int_equal(a->axis, axis);
    assert_int_equal(a->n_out, n);
    assert_string_equal(fmt(&a->out[0]), first);
    assert_string_equal(fmt(&a->out[n - 1]), last);
}

static void expect_copy(const ur_plan *plan, size_t i, const char *to)
{
    const ur_plan_action *a = &plan->actions[i];
    assert_int_equal(a->kind, UR_PLAN_COPY);
    assert_int_equal(a->n_out, 1);
    assert_string_equal(fmt(&a->out[0]), to);
}

static void expect_drop(const ur_plan *plan, size_t i, const char *why)
{
    const ur_plan_action *a = &plan->actions[i];
    assert_int_equal(a->kind, UR_PLAN_DROP);
    assert_int_equal(a->n_out, 0);
    assert_string_equal(a->why, why);
}

/* ---- resolver -------------------------------------------------------------------------- */

static int axis_of(const char *shape, const char *spec, const ur_settings *s)
{
    tset ts;
    ts.n = 0;
    add(&ts, "x", UR_DT_FLOAT32, shape, spec);
    return ur_plan_scan_axis(&ts.t[0].leaf, s);
}

static void test_plan__scan_axis_resolver(void **state)
{
    ur_settings s = base_settings();
    ur_settings no_rules = base_settings();
    ur_settings psa0 = base_settings();
    ur_settings psa2 = base_settings();
    ur_settings psa_neg = base_settings();
    (void)state;
    no_rules.n_axis_rules = 0;
    psa0.param_scan_axis = 0;
    psa2.param_scan_axis = 2;
    psa_neg.param_scan_axis = -1;
    /* a logical name in the spec wins over param_scan_axis */
    assert_int_equal(axis_of("6,16,4", "fsdp - layers", &s), 2);
    assert_int_equal(axis_of("4,6", "layers_per_stage fsdp", &s), 0);
    assert_int_equal(axis_of("2,4,6", "circular_repeats - -", &s), 0);
    /* name order: layers_per_stage, layers, circular_repeats */
    assert_int_equal(axis_of("2,4,6", "circular_repeats layers -", &s), 1);
    /* a tuple entry matches when any of its names does */
    assert_int_equal(axis_of("4,6,8", "fsdp,layers - -", &s), 0);
    /* a mesh axis the rules map a layer axis to ("stage") */
    assert_int_equal(axis_of("6,16,4", "fsdp - stage", &s), 2);
    assert_int_equal(axis_of("6,16,4", "fsdp - tensor,stage", &s), 2);
    assert_int_equal(axis_of("6,16,4", "fsdp - stage", &no_rules), 1);
    /* names match whole: no prefix matches */
    assert_int_equal(axis_of("6,4,16", "layers_0 - -", &s), 1);
    assert_int_equal(axis_of("6,4,16", "stages - -", &s), 1);
    /* rank 1 is stacked on axis 0 (NNX non-parameter state) */
    assert_int_equal(axis_of("4", NULL, &s), 0);
    assert_int_equal(axis_of("4", "-", &s), 0);
    assert_int_equal(axis_of("4", NULL, &psa2), 0);
    /* fallback param_scan_axis when the rank allows it */
    assert_int_equal(axis_of("6,4,16", NULL, &s), 1);
    assert_int_equal(axis_of("6,4,16", "fsdp - tensor", &s), 1);
    assert_int_equal(axis_of("4,6,16", NULL, &psa0), 0);
    assert_int_equal(axis_of("6,4", NULL, &psa2), -1);
    assert_int_equal(axis_of("6,16,4", NULL, &psa2), 2);
    assert_int_equal(axis_of("6,16,4", NULL, &psa_neg), 2);
    assert_int_equal(axis_of("", NULL, &s), -1);
    /* a spec not present is not consulted */
    {
        tset ts;
        ts.n = 0;
        add(&ts, "x", UR_DT_FLOAT32, "6,16,4", "- - layers");
        ts.t[0].leaf.has_spec = 0;
        assert_int_equal(ur_plan_scan_axis(&ts.t[0].leaf, &s), 1);
    }
}

/* ---- layouts ---------------------------------------------------------------------------- */

static void linen_full_state(tset *ts)
{
    ts->n = 0;
    add(ts, "params/params/token_embedder/embedding", UR_DT_FLOAT32, "32,6", "tensor fsdp");
    add(ts, "params/params/decoder/decoder_norm/scale", UR_DT_FLOAT32, "6", "tensor");
    add(ts, "params/params/decoder/layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,4,16",
        "fsdp - tensor");
    add(ts, "params/params/decoder/layers/pre_self_attention_layer_norm/scale", UR_DT_FLOAT32,
        "6,4", NULL);
    add(ts, "params/params/decoder/layers/self_attention/query/kernel", UR_DT_BFLOAT16, "6,4,2,3",
        "fsdp stage tensor -");
    add(ts, "opt_state/0/mu/params/decoder/layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,4,16", NULL);
    add(ts, "opt_state/0/count", UR_DT_INT32, "", NULL);
    add(ts, "opt_state/1", UR_DT_INVALID, "", NULL);
    add(ts, "step", UR_DT_INT32, "", NULL);
}

static void test_plan__linen_full_state_to_linen_decode(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    s.pure_nnx = 0;
    linen_full_state(&ts);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    assert_int_equal(plan->layout, UR_PLAN_LAYOUT_LINEN);
    assert_true(plan->unrolled);
    assert_false(plan->nnx_output);
    expect_copy(plan, 0, "params/params/token_embedder/embedding");
    assert_int_equal(plan->actions[0].out_dtype, UR_DT_BFLOAT16);
    expect_copy(plan, 1, "params/params/decoder/decoder_norm/scale");
    expect_unstack(plan, 2, 1, 4, "params/params/decoder/layers_0/mlp/wi_0/kernel",
                   "params/params/decoder/layers_3/mlp/wi_0/kernel");
    assert_int_equal(plan->actions[2].out_dtype, UR_DT_BFLOAT16);
    assert_int_equal(plan->actions[2].group, 0);
    expect_unstack(plan, 3, 1, 4,
                   "params/params/decoder/layers_0/pre_self_attention_layer_norm/scale",
                   "params/params/decoder/layers_3/pre_self_attention_layer_norm/scale");
    expect_unstack(plan, 4, 1, 4, "params/params/decoder/layers_0/self_attention/query/kernel",
                   "params/params/decoder/layers_3/self_attention/query/kernel");
    expect_drop(plan, 5, "opt_state");
    expect_drop(plan, 6, "opt_state");
    expect_drop(plan, 7, "opt_state");
    expect_drop(plan, 8, "step");
    /* the Linen decode state: step = 0 and an empty opt_state */
    assert_int_equal(plan->n_extras, 2);
    assert_int_equal(plan->extras[0].kind, UR_PLAN_EXTRA_ZERO_SCALAR);
    assert_string_equal(fmt(&plan->extras[0].path), "step");
    assert_int_equal(plan->extras[1].kind, UR_PLAN_EXTRA_EMPTY_DICT);
    assert_string_equal(fmt(&plan->extras[1].path), "opt_state");
    /* summary */
    assert_int_equal(plan->summary.leaves_in, 9);
    assert_int_equal(plan->summary.leaves_kept, 5);
    assert_int_equal(plan->summary.leaves_dropped, 4);
    assert_int_equal(plan->summary.leaves_copied, 2);
    assert_int_equal(plan->summary.leaves_unstacked, 3);
    assert_int_equal(plan->summary.leaves_out, 2 + 3 * 4);
    assert_true(plan->summary.bytes_in ==
                (32 * 6 + 6 + 6 * 4 * 16 + 6 * 4 + 6 * 4 * 16) * 4 + 6 * 4 * 2 * 3 * 2 + 4 + 4);
    assert_true(plan->summary.bytes_read == (32 * 6 + 6 + 6 * 4 * 16 + 6 * 4) * 4 + 144 * 2);
    assert_true(plan->summary.bytes_out == (32 * 6 + 6 + 6 * 4 * 16 + 6 * 4 + 144) * 2);
    assert_int_equal(plan->n_groups, 1);
    assert_string_equal(plan->groups[0].name, "layers");
    assert_int_equal(plan->groups[0].n_layers, 4);
    assert_int_equal(plan->groups[0].n_leaves, 3);
    assert_int_equal(plan->groups[0].n_axis[1], 3);
    ur_plan_free(plan);
}

static void test_plan__linen_full_state_to_nnx_decode(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    linen_full_state(&ts);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    assert_true(plan->nnx_output);
    expect_copy(plan, 0, "token_embedder/embedding/value");
    expect_unstack(plan, 2, 1, 4, "decoder/layers_0/mlp/wi_0/kernel/value",
                   "decoder/layers_3/mlp/wi_0/kernel/value");
    assert_int_equal(plan->n_extras, 0);
    ur_plan_free(plan);
}

static void test_plan__nnx_current_with_rank1_rng_counts(void **state)
{
    /* the seed case: NNX training state = Linen layout + nnx_aux with [L] RNG counts */
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    linen_full_state(&ts);
    add(&ts, "nnx_aux/model/decoder/layers/dropout/rngs/params/count", UR_DT_UINT32, "4", NULL);
    add(&ts, "nnx_aux/model/decoder/layers/self_attention/rngs/dropout/key", UR_DT_INVALID, "4",
        NULL);
    add(&ts, "nnx_aux/model/decoder/rngs/params/count", UR_DT_UINT32, "", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_drop(plan, 9, "rng");
    expect_drop(plan, 10, "rng");
    expect_drop(plan, 11, "rng");
    assert_int_equal(plan->summary.leaves_unstacked, 3);
    ur_plan_free(plan);
}

/* Non-parameter variables in nnx_aux (DeepSeek's MoEBiasVar router bias, deepseek4's
 * Tid2EidVar): kept at their model path, unstacked on axis 0 (where a scan stacks non-Params,
 * whatever param_scan_axis is), in their stored dtype; RNG state still dropped. */
static void test_plan__nnx_aux_variables_kept(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    linen_full_state(&ts);
    /* [layers=4, experts=4]: param_scan_axis (1) would fit the length too, and be wrong */
    add(&ts, "nnx_aux/model/decoder/layers/MoeBlock_0/gate/bias", UR_DT_FLOAT32, "4,4", NULL);
    add(&ts, "nnx_aux/model/decoder/layers/MoeBlock_0/rngs/params/count", UR_DT_UINT32, "4", NULL);
    add(&ts, "nnx_aux/model/decoder/hash_layer/tid2eid", UR_DT_FLOAT32, "32,2", NULL);
    add(&ts, "nnx_aux/other/x", UR_DT_FLOAT32, "3", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_unstack(plan, 9, 0, 4, "decoder/layers_0/MoeBlock_0/gate/bias/value",
                   "decoder/layers_3/MoeBlock_0/gate/bias/value");
    assert_int_equal(plan->actions[9].out_dtype, UR_DT_FLOAT32);
    expect_drop(plan, 10, "rng");
    expect_copy(plan, 11, "decoder/hash_layer/tid2eid/value");
    assert_int_equal(plan->actions[11].out_dtype, UR_DT_FLOAT32);
    expect_drop(plan, 12, "nnx_aux");
    /* the params beside them are still cast */
    assert_int_equal(plan->actions[2].out_dtype, UR_DT_BFLOAT16);
    ur_plan_free(plan);
    /* the Linen decode layout: beside the params, where MaxText's loaders look them up */
    s.pure_nnx = 0;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_unstack(plan, 9, 0, 4, "params/params/decoder/layers_0/MoeBlock_0/gate/bias",
                   "params/params/decoder/layers_3/MoeBlock_0/gate/bias");
    ur_plan_free(plan);
    /* scanned output: copied whole, stacked as the scanned model holds it */
    s.pure_nnx = 1;
    s.force_unroll = 0;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_copy(plan, 9, "decoder/layers/MoeBlock_0/gate/bias/value");
    ur_plan_free(plan);
    /* a wrong layer count on axis 0 is an error naming the leaf */
    s.force_unroll = 1;
    linen_full_state(&ts);
    add(&ts, "nnx_aux/model/decoder/layers/MoeBlock_0/gate/bias", UR_DT_FLOAT32, "3,4", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "nnx_aux/model/decoder/layers/MoeBlock_0/gate/bias"));
}

/* Under a nested (gemma4) or pipeline scan the non-Param layer axes are not known: refused,
 * never dropped. */
static void test_plan__nnx_aux_nested_refused(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_err err;
    (void)state;
    s.decoder_block = "gemma4";
    s.num_decoder_layers = 12;
    ts.n = 0;
    add(&ts, "params/params/decoder/scanned_blocks/local_layers/mlp/wi", UR_DT_FLOAT32, "6,2,5,16",
        NULL);
    add(&ts, "params/params/decoder/scanned_blocks/global_layer/mlp/wi", UR_DT_FLOAT32, "6,2,16",
        NULL);
    add(&ts, "opt_state/0/count", UR_DT_INT32, "", NULL);
    add(&ts, "nnx_aux/model/decoder/scanned_blocks/local_layers/gate/bias", UR_DT_FLOAT32, "2,5,4",
        NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "scanned_blocks/local_layers/gate/bias"));

    /* pipelined DeepSeek's router bias (routed_bias=true), outside the stack as in it */
    s.decoder_block = "deepseek";
    s.num_decoder_layers = 3;
    set_key(&s, "first_num_dense_layers=1");
    set_key(&s, "ici_pipeline_parallelism=2");
    set_key(&s, "dcn_pipeline_parallelism=1");
    set_key(&s, "num_layers_per_pipeline_stage=1");
    set_key(&s, "num_pipeline_repeats=-1");
    set_key(&s, "pipeline_parallel_layers=-1");
    ts.n = 0;
    add(&ts, "params/params/decoder/dense_layers/mlp/wi", UR_DT_FLOAT32, "6,1,16", NULL);
    add(&ts, "params/params/decoder/pipeline_module/layers/mlp/wi", UR_DT_FLOAT32, "2,6,16", NULL);
    add(&ts, "opt_state/0/count", UR_DT_INT32, "", NULL);
    add(&ts,
        "nnx_aux/model/decoder/pipeline_module/layers/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias",
        UR_DT_FLOAT32, "2,4", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "pipeline_module/layers/DeepSeekMoeBlock_0/MoeBlock_0/gate"));
}

static void nnx_legacy(tset *ts)
{
    ts->n = 0;
    add(ts, "model/token_embedder/embedding/value", UR_DT_FLOAT32, "32,6", NULL);
    add(ts, "model/decoder/layers/mlp/wi_0/kernel/value", UR_DT_FLOAT32, "6,4,16", NULL);
    add(ts, "model/decoder/layers/self_attention/rngs/params/count/value", UR_DT_UINT32, "4",
        NULL);
    add(ts, "model/decoder/layers/moe_bias/value", UR_DT_FLOAT32, "4", NULL);
    add(ts, "model/decoder/rngs/params/key/value", UR_DT_UINT32, "2", NULL);
    add(ts, "optimizer/opt_state/0/mu/decoder/layers/mlp/wi_0/kernel/value", UR_DT_FLOAT32,
        "6,4,16", NULL);
    add(ts, "optimizer/step/value", UR_DT_UINT32, "", NULL);
}

static void test_plan__older_nnx_layout(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    nnx_legacy(&ts);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    assert_int_equal(plan->layout, UR_PLAN_LAYOUT_NNX_LEGACY);
    expect_copy(plan, 0, "token_embedder/embedding/value");
    expect_unstack(plan, 1, 1, 4, "decoder/layers_0/mlp/wi_0/kernel/value",
                   "decoder/layers_3/mlp/wi_0/kernel/value");
    expect_drop(plan, 2, "rng");
    /* a rank-1 [L] non-RNG variable is stacked on axis 0 */
    expect_unstack(plan, 3, 0, 4, "decoder/layers_0/moe_bias/value",
                   "decoder/layers_3/moe_bias/value");
    expect_drop(plan, 4, "rng");
    expect_drop(plan, 5, "optimizer");
    expect_drop(plan, 6, "optimizer");
    ur_plan_free(plan);

    s.pure_nnx = 0;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_copy(plan, 0, "params/params/token_embedder/embedding");
    expect_unstack(plan, 1, 1, 4, "params/params/decoder/layers_0/mlp/wi_0/kernel",
                   "params/params/decoder/layers_3/mlp/wi_0/kernel");
    assert_int_equal(plan->n_extras, 2);
    ur_plan_free(plan);
}

static void test_plan__param_only_inputs(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    /* NNX decode layout, under an RL "base" key */
    ts.n = 0;
    add(&ts, "base/token_embedder/embedding/value", UR_DT_BFLOAT16, "32,6", NULL);
    add(&ts, "base/decoder/layers/mlp/wi_0/kernel/value", UR_DT_BFLOAT16, "6,4,16", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    assert_int_equal(plan->layout, UR_PLAN_LAYOUT_NNX_PARAMS);
    expect_copy(plan, 0, "token_embedder/embedding/value");
    expect_unstack(plan, 1, 1, 4, "decoder/layers_0/mlp/wi_0/kernel/value",
                   "decoder/layers_3/mlp/wi_0/kernel/value");
    ur_plan_free(plan);
    /* ... is not a full state */
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing opt_state"));

    /* a Linen decode checkpoint: step, params, empty opt_state */
    ts.n = 0;
    add(&ts, "step", UR_DT_INT64, "", NULL);
    add(&ts, "params/params/decoder/layers/mlp/wi_0/kernel", UR_DT_BFLOAT16, "6,4,16", NULL);
    add(&ts, "opt_state", UR_DT_INVALID, "", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing opt_state in training checkpoint"));
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_drop(plan, 0, "step");
    expect_unstack(plan, 1, 1, 4, "decoder/layers_0/mlp/wi_0/kernel/value",
                   "decoder/layers_3/mlp/wi_0/kernel/value");
    expect_drop(plan, 2, "opt_state");
    ur_plan_free(plan);
}

static void test_plan__length_mismatch_is_an_error(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_err err;
    (void)state;
    /* one leaf disagrees with the rest of its group on the axis its own spec names as the
     * layer axis: the checkpoint is damaged */
    linen_full_state(&ts);
    ts.t[2].shape[1] = 3;
    ts.t[2].leaf.has_spec = 1;
    ts.t[2].leaf.spec = ts.t[2].spec;
    ts.t[2].spec[1] = "layers";
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "params/params/decoder/layers/mlp/wi_0/kernel"));
    assert_non_null(strstr(err.msg, "[6, 3, 16]"));
    assert_non_null(strstr(err.msg, "axis 1"));
    assert_non_null(strstr(err.msg, "expected 4"));
    /* every leaf disagrees with the config's layer count: the config is wrong */
    linen_full_state(&ts);
    s.num_decoder_layers = 5;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "expected 5"));
    s = base_settings();
    /* with param_scan_axis=0 the [E, L] norm scale is read on axis 0 and does not fit */
    linen_full_state(&ts);
    s.param_scan_axis = 0;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "axis 0"));
}

static void test_plan__missing_group_and_no_unroll(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    ts.n = 0;
    add(&ts, "params/params/decoder/layers_0/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,16", NULL);
    add(&ts, "opt_state/0/count", UR_DT_INT32, "", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing decoder/layers"));
    /* without force_unroll everything is copied, scanned or not */
    s.force_unroll = 0;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    assert_false(plan->unrolled);
    expect_copy(plan, 0, "decoder/layers_0/mlp/wi_0/kernel/value");
    ur_plan_free(plan);
    linen_full_state(&ts);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_copy(plan, 2, "decoder/layers/mlp/wi_0/kernel/value");
    ur_plan_free(plan);
}

static void test_plan__replicate_and_dtypes(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    ts.n = 0;
    add(&ts, "params/params/decoder/layers/mlp/wi_0/kernel", UR_DT_FLOAT64, "6,4,16", NULL);
    add(&ts, "params/params/decoder/layers/empty", UR_DT_INVALID, "", NULL);
    ts.t[1].leaf.placeholder = UR_PLAN_PLACEHOLDER_EMPTY_DICT;
    add(&ts, "params/params/decoder/positions", UR_DT_INT32, "8", NULL);
    add(&ts, "params/params/decoder/layers/gate/kernel", UR_DT_FLOAT16, "6,16,4", "fsdp - layers");
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    assert_int_equal(plan->actions[0].out_dtype, UR_DT_BFLOAT16);
    /* an empty entry is kept in every layer, as jax.tree_util.tree_map keeps it */
    assert_int_equal(plan->actions[1].kind, UR_PLAN_REPLICATE);
    assert_int_equal(plan->actions[1].n_out, 4);
    assert_string_equal(fmt(&plan->actions[1].out[2]), "decoder/layers_2/empty/value");
    expect_copy(plan, 2, "decoder/positions/value");
    assert_int_equal(plan->actions[2].out_dtype, UR_DT_INT32);
    expect_unstack(plan, 3, 2, 4, "decoder/layers_0/gate/kernel/value",
                   "decoder/layers_3/gate/kernel/value");
    assert_int_equal(plan->summary.leaves_replicated, 1);
    assert_true(plan->summary.bytes_out == (6 * 4 * 16 + 6 * 16 * 4) * 2 + 8 * 4);
    ur_plan_free(plan);
}

/* An array of a scanned group without the layer axis: MaxText stacks every parameter of the
 * group and unrolls with jnp.take on param_scan_axis, so it never copies one into every
 * layer. Rank 0 cannot come from a scanned model (exit 4); a param_scan_axis past the leaf's
 * axes is a config that does not fit (exit 2). */
static void test_plan__array_without_layer_axis_is_refused(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_err err;
    (void)state;
    ts.n = 0;
    add(&ts, "params/params/decoder/layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,4,16", NULL);
    add(&ts, "params/params/decoder/layers/some_scalar", UR_DT_FLOAT32, "", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_ECORRUPT);
    assert_string_equal(err.msg, "leaf 'params/params/decoder/layers/some_scalar': rank-0 leaf "
                                 "under the scanned group decoder/layers has no layer axis (a "
                                 "scanned model stacks every parameter of the group)");
    ts.n = 1;
    add(&ts, "params/params/decoder/layers/norm/scale", UR_DT_FLOAT32, "16,4", NULL);
    s.param_scan_axis = 2;
    ts.t[0].shape[2] = 4;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "norm/scale' shape [16, 4] under the scanned group "
                                    "decoder/layers: no axis 2 (param_scan_axis)"));
}

static void test_plan__deepseek_groups(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    s.decoder_block = "deepseek";
    s.num_decoder_layers = 5;
    set_key(&s, "first_num_dense_layers=2");
    s.pure_nnx = 0;
    ts.n = 0;
    add(&ts, "params/params/decoder/dense_layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,2,16", NULL);
    add(&ts, "params/params/decoder/moe_layers/DeepSeekMoeBlock_0/MoeBlock_0/wi_0", UR_DT_FLOAT32,
        "8,3,6,16", NULL);
    add(&ts, "params/params/decoder/moe_layers/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias",
        UR_DT_FLOAT32, "8,3", NULL);
    add(&ts, "params/params/decoder/decoder_norm/scale", UR_DT_FLOAT32, "6", NULL);
    add(&ts, "opt_state/0/count", UR_DT_INT32, "", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    assert_int_equal(plan->n_groups, 2);
    expect_unstack(plan, 0, 1, 2, "params/params/decoder/dense_layers_0/mlp/wi_0/kernel",
                   "params/params/decoder/dense_layers_1/mlp/wi_0/kernel");
    /* the MoE index restarts at 0 */
    expect_unstack(plan, 1, 1, 3,
                   "params/params/decoder/moe_layers_0/DeepSeekMoeBlock_0/MoeBlock_0/wi_0",
                   "params/params/decoder/moe_layers_2/DeepSeekMoeBlock_0/MoeBlock_0/wi_0");
    expect_unstack(plan, 2, 1, 3,
                   "params/params/decoder/moe_layers_0/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias",
                   "params/params/decoder/moe_layers_2/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias");
    assert_int_equal(plan->actions[1].group, 1);
    assert_int_equal(plan->groups[1].n_leaves, 2);
    expect_copy(plan, 3, "params/params/decoder/decoder_norm/scale");
    ur_plan_free(plan);
    /* a wrong MoE count names the group */
    ts.t[1].shape[1] = 5;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "moe_layers"));
    assert_non_null(strstr(err.msg, "expected 3"));
    /* no moe_layers at all */
    ts.n = 1;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing decoder/moe_layers"));
    /* a param-only checkpoint holds the router bias (a non-parameter variable, stacked on
     * axis 0 by the scan, unlike a parameter) at its parameter path: [layers, experts], kept
     * in its dtype; a partition spec still says where its layer axis is */
    ts.n = 0;
    add(&ts, "params/params/decoder/dense_layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,2,16", NULL);
    add(&ts, "params/params/decoder/moe_layers/DeepSeekMoeBlock_0/MoeBlock_0/wi_0", UR_DT_FLOAT32,
        "8,3,6,16", NULL);
    add(&ts, "params/params/decoder/moe_layers/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias",
        UR_DT_FLOAT32, "3,8", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_unstack(plan, 2, 0, 3,
                   "params/params/decoder/moe_layers_0/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias",
                   "params/params/decoder/moe_layers_2/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias");
    assert_int_equal(plan->actions[2].out_dtype, UR_DT_FLOAT32);
    assert_int_equal(plan->actions[1].out_dtype, UR_DT_BFLOAT16);
    ur_plan_free(plan);
    ts.t[2].shape[0] = 8;
    ts.t[2].shape[1] = 3; /* the bias with its spec: [experts, layers] */
    ts.t[2].leaf.has_spec = 1;
    ts.t[2].spec[0] = "expert";
    ts.t[2].spec[1] = "stage";
    ts.t[2].leaf.spec = ts.t[2].spec;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_unstack(plan, 2, 1, 3,
                   "params/params/decoder/moe_layers_0/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias",
                   "params/params/decoder/moe_layers_2/DeepSeekMoeBlock_0/MoeBlock_0/gate/bias");
    ur_plan_free(plan);
}

static void lora_adapter(tset *ts, const char *root)
{
    char p[256];
    ts->n = 0;
    snprintf(p, sizeof p, "%s/decoder/layers/self_attention/query/lora_a.kernel", root);
    add(ts, p, UR_DT_FLOAT32, "6,4,2", NULL);
    snprintf(p, sizeof p, "%s/decoder/layers/self_attention/query/lora_b.kernel", root);
    add(ts, p, UR_DT_FLOAT32, "2,4,3,5", NULL);
    snprintf(p, sizeof p, "%s/decoder/layers/self_attention/out/lora_b.kernel", root);
    add(ts, p, UR_DT_FLOAT32, "2,4,6", "- stage fsdp");
    snprintf(p, sizeof p, "%s/decoder/layers/mlp/wi_0/kernel", root);
    add(ts, p, UR_DT_INVALID, "", NULL); /* None: not a LoRA target */
    add(ts, "step", UR_DT_INT64, "", NULL);
}

static void test_plan__lora_adapters(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    s.pure_nnx = 0;
    lora_adapter(&ts, "params/params");
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_LORA);
    assert_int_equal(plan->layout, UR_PLAN_LAYOUT_LORA_LINEN);
    expect_unstack(plan, 0, 1, 4,
                   "params/params/decoder/layers_0/self_attention/query/lora_a.kernel",
                   "params/params/decoder/layers_3/self_attention/query/lora_a.kernel");
    expect_unstack(plan, 1, 1, 4,
                   "params/params/decoder/layers_0/self_attention/query/lora_b.kernel",
                   "params/params/decoder/layers_3/self_attention/query/lora_b.kernel");
    expect_unstack(plan, 2, 1, 4,
                   "params/params/decoder/layers_0/self_attention/out/lora_b.kernel",
                   "params/params/decoder/layers_3/self_attention/out/lora_b.kernel");
    expect_drop(plan, 3, "not an array");
    expect_drop(plan, 4, "step");
    assert_int_equal(plan->n_extras, 2);
    ur_plan_free(plan);
    /* NNX: single-nested adapter tree, saved under a TrainState */
    s.pure_nnx = 1;
    lora_adapter(&ts, "params");
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_LORA);
    assert_int_equal(plan->layout, UR_PLAN_LAYOUT_LORA_NNX);
    expect_unstack(plan, 0, 1, 4, "params/decoder/layers_0/self_attention/query/lora_a.kernel",
                   "params/decoder/layers_3/self_attention/query/lora_a.kernel");
    assert_int_equal(plan->n_extras, 2);
    ur_plan_free(plan);
    /* an adapter without the layer group is skipped, not refused */
    ts.n = 0;
    add(&ts, "params/params/decoder/other/lora_a.kernel", UR_DT_FLOAT32, "6,2", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_LORA);
    expect_copy(plan, 0, "params/decoder/other/lora_a.kernel");
    ur_plan_free(plan);
}

static void test_plan__unrecognised_layout(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_err err;
    (void)state;
    ts.n = 0;
    add(&ts, "weights/w", UR_DT_FLOAT32, "4", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "unrecognised checkpoint layout"));
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_LORA, &err), UR_EINVAL);
    s.num_decoder_layers = 1;
    s.decoder_block = "deepseek";
    set_key(&s, "first_num_dense_layers=2");
    linen_full_state(&ts);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "-1 layers"));
}

static void test_plan__oom_loop(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    int ok = 0;
    (void)state;
    s.pure_nnx = 0;
    linen_full_state(&ts);
    for (size_t i = 0; i < ts.n; i++) {
        ts.leaves[i] = ts.t[i].leaf;
    }
    for (long n = 0; n < 10000 && !ok; n++) {
        ur_plan *plan = NULL;
        ur_err err;
        int rc;
        ur_alloc_fail_after(n);
        rc = ur_plan_build(&plan, ts.leaves, ts.n, &s, UR_PLAN_INPUT_FULL_STATE, &err);
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            assert_int_equal(plan->summary.leaves_out, 14);
            ok = 1;
        } else {
            assert_int_equal(rc, UR_ENOMEM);
            assert_null(plan);
        }
        ur_plan_free(plan);
    }
    assert_true(ok);
}

/* ---- block layouts (docs/maxtext-checkpoints.md §5.2) --------------------------------- */

/* Every output path of action i, in order. */
static void expect_out(const ur_plan *plan, size_t i, const char *const *want, size_t n)
{
    const ur_plan_action *a = &plan->actions[i];
    assert_int_equal(a->n_out, n);
    for (size_t k = 0; k < n; k++) {
        assert_string_equal(fmt(&a->out[k]), want[k]);
    }
}

static void test_plan__inhomogeneous_cycle(void **state)
{
    static const char *const j1[] = {"decoder/layers_1/mlp/wi_0/kernel/value",
                                     "decoder/layers_5/mlp/wi_0/kernel/value"};
    static const char *const j3[] = {"decoder/layers_3/moe/gate/kernel/value",
                                     "decoder/layers_7/moe/gate/kernel/value"};
    static const char *const q2[] = {"decoder/layers_2/attn/scale/value",
                                     "decoder/layers_5/attn/scale/value",
                                     "decoder/layers_8/attn/scale/value"};
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    /* llama4: K = 4, 8 layers -> 2 blocks; block b of layers_<j> is layer b*4 + j */
    s.decoder_block = "llama4";
    s.num_decoder_layers = 8;
    set_key(&s, "inhomogeneous_layer_cycle_interval=4");
    ts.n = 0;
    add(&ts, "params/params/decoder/layers/layers_1/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,2,16",
        NULL);
    add(&ts, "params/params/decoder/layers/layers_3/moe/gate/kernel", UR_DT_FLOAT32, "6,2,3",
        NULL);
    add(&ts, "params/params/decoder/decoder_norm/scale", UR_DT_FLOAT32, "6", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    assert_int_equal(plan->actions[0].kind, UR_PLAN_UNSTACK);
    assert_int_equal(plan->actions[0].axis, 1);
    expect_out(plan, 0, j1, 2);
    expect_out(plan, 1, j3, 2);
    expect_copy(plan, 2, "decoder/decoder_norm/scale/value");
    assert_int_equal(plan->groups[0].n_layers, 2);
    assert_int_equal(plan->groups[0].cycle, 4);
    ur_plan_free(plan);
    /* K unknown (1): the block axis has 2, not 8 -> error naming the leaf, never NaN slices */
    set_key(&s, "inhomogeneous_layer_cycle_interval=1");
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "decoder/layers/layers_1/mlp"));
    assert_non_null(strstr(err.msg, "expected 8"));
    /* N not a multiple of K */
    set_key(&s, "inhomogeneous_layer_cycle_interval=3");
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "not a multiple"));
    /* a sub-layer index >= K (layers_3 with K = 2; 4 layers -> 2 blocks) */
    set_key(&s, "inhomogeneous_layer_cycle_interval=2");
    s.num_decoder_layers = 4;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "layers_<j> or layer_<j>"));
    /* qwen3-next: singular layer_<j>, K = 3 here, 9 layers -> 3 blocks */
    ts.n = 0;
    add(&ts, "params/params/decoder/layers/layer_2/attn/scale", UR_DT_BFLOAT16, "6,3", NULL);
    s.decoder_block = "qwen3_next";
    set_key(&s, "inhomogeneous_layer_cycle_interval=3");
    s.num_decoder_layers = 9;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_out(plan, 0, q2, 3);
    ur_plan_free(plan);
}

static void test_plan__gemma3_blocks_and_remainder(void **state)
{
    static const char *const b5[] = {"params/params/decoder/layers_5/mlp/wo/kernel",
                                     "params/params/decoder/layers_11/mlp/wo/kernel"};
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    s.decoder_block = "gemma3";
    s.num_decoder_layers = 14; /* 2 blocks of 6 + 2 */
    s.pure_nnx = 0;
    ts.n = 0;
    add(&ts, "params/params/decoder/layers/layers_5/mlp/wo/kernel", UR_DT_FLOAT32, "4,2,6", NULL);
    add(&ts, "params/params/decoder/layers_remainder/layers_1/mlp/wo/kernel", UR_DT_FLOAT32, "4,6",
        NULL);
    add(&ts, "params/params/decoder/layers_remainder/layers_0/pre_ffw_norm/scale", UR_DT_FLOAT32,
        "6", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_out(plan, 0, b5, 2);
    expect_copy(plan, 1, "params/params/decoder/layers_13/mlp/wo/kernel");
    expect_copy(plan, 2, "params/params/decoder/layers_12/pre_ffw_norm/scale");
    ur_plan_free(plan);
    /* 13 layers: one remainder layer, so layers_remainder/layers_1 is wrong */
    s.num_decoder_layers = 13;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "layers_remainder/layers_1"));
    /* 14 layers but no remainder in the tree */
    s.num_decoder_layers = 14;
    ts.n = 1;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing decoder/layers_remainder"));
}

/* use_multimodal=true: MaxText 0.2.5 builds the vision encoder's layers as separate submodules
 * whether or not scan_layers is set, so vision_encoder/ is copied whole, even where a layer is
 * named layers_<j> (llama4's Llama4VisionEncoder_0) and an axis has the block count. */
static void test_plan__vision_encoder_copied(void **state)
{
    static const char *const j0[] = {"decoder/layers_0/mlp/wi_0/kernel/value",
                                     "decoder/layers_4/mlp/wi_0/kernel/value"};
    static const char *const g5[] = {"decoder/layers_5/mlp/wo/kernel/value"};
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    s.decoder_block = "llama4";
    s.num_decoder_layers = 8; /* 2 blocks of 4 */
    set_key(&s, "inhomogeneous_layer_cycle_interval=4");
    ts.n = 0;
    add(&ts, "params/params/decoder/layers/layers_0/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,2,16",
        NULL);
    add(&ts,
        "params/params/vision_encoder/Llama4VisionModel_0/Llama4VisionEncoder_0/layers_1/"
        "self_attention_vision/query/kernel",
        UR_DT_FLOAT32, "16,2,8", NULL);
    add(&ts, "params/params/vision_encoder/Llama4VisionModel_0/positional_embedding_vlm",
        UR_DT_FLOAT32, "577,16", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_out(plan, 0, j0, 2);
    expect_copy(plan, 1,
                "vision_encoder/Llama4VisionModel_0/Llama4VisionEncoder_0/layers_1/"
                "self_attention_vision/query/kernel/value");
    assert_int_equal(plan->actions[1].out_dtype, UR_DT_BFLOAT16);
    expect_copy(plan, 2, "vision_encoder/Llama4VisionModel_0/positional_embedding_vlm/value");
    ur_plan_free(plan);
    /* gemma3, 7 layers: a block of 6 and a remainder of 1; encoderblock_<i> beside them */
    s.decoder_block = "gemma3";
    s.num_decoder_layers = 7;
    set_key(&s, "inhomogeneous_layer_cycle_interval=0");
    ts.n = 0;
    add(&ts, "params/params/decoder/layers/layers_5/mlp/wo/kernel", UR_DT_FLOAT32, "4,1,6", NULL);
    add(&ts, "params/params/decoder/layers_remainder/layers_0/mlp/wo/kernel", UR_DT_FLOAT32, "4,6",
        NULL);
    add(&ts,
        "params/params/vision_encoder/Gemma3VisionEncoderLayer_0/Transformer/encoderblock_1/"
        "MlpBlockViT_0/Dense_0/kernel",
        UR_DT_FLOAT32, "16,1", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_out(plan, 0, g5, 1);
    expect_copy(plan, 1, "decoder/layers_6/mlp/wo/kernel/value");
    expect_copy(plan, 2,
                "vision_encoder/Gemma3VisionEncoderLayer_0/Transformer/encoderblock_1/"
                "MlpBlockViT_0/Dense_0/kernel/value");
    ur_plan_free(plan);
}

static void test_plan__deepseek4_hash_layers_and_blocks(void **state)
{
    static const char *const b1[] = {"decoder/layers_2/attn/wq/value",
                                     "decoder/layers_4/attn/wq/value"};
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    s.decoder_block = "deepseek4";
    s.num_decoder_layers = 5;
    set_key(&s, "first_num_hash_layers=1");
    ts.n = 0;
    add(&ts, "params/params/decoder/layers_0/attn/wq", UR_DT_FLOAT32, "4,6", NULL);
    add(&ts, "params/params/decoder/scanned_blocks/layers_1/attn/wq", UR_DT_FLOAT32, "4,2,6",
        NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_copy(plan, 0, "decoder/layers_0/attn/wq/value");
    expect_out(plan, 1, b1, 2);
    ur_plan_free(plan);
}

static void expect_axes(const ur_plan *plan, size_t i, size_t n, size_t a0, size_t a1, size_t a2)
{
    const ur_plan_action *a = &plan->actions[i];
    size_t want[3] = {a0, a1, a2};
    assert_int_equal(a->kind, UR_PLAN_UNSTACK);
    assert_int_equal(a->n_axes, n);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(a->axes[k], want[k]);
    }
    assert_int_equal(a->axis, want[n - 1]);
}

/* Pipeline stacks: global layer (r * S + s) * lps + j, then layers_outside_pipeline. */
static void test_plan__pipeline_stacks(void **state)
{
    char want[12][64];
    const char *w[12];
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    for (int k = 0; k < 12; k++) {
        w[k] = want[k];
    }
    /* R=2, S=2, lps=3 scanned: [R, S, E, lps, M], axes {0, 1, 3}; 2 layers outside */
    set_key(&s, "ici_pipeline_parallelism=2");
    set_key(&s, "dcn_pipeline_parallelism=1");
    set_key(&s, "num_layers_per_pipeline_stage=3");
    set_key(&s, "num_pipeline_repeats=-1");
    set_key(&s, "pipeline_parallel_layers=12");
    set_key(&s, "scan_layers_per_stage=1");
    s.num_decoder_layers = 14;
    ts.n = 0;
    add(&ts, "decoder/pipeline_module/layers/scanned_layers/mlp/wi_0/kernel/value", UR_DT_FLOAT32,
        "2,2,6,3,16", NULL);
    add(&ts, "decoder/layers_outside_pipeline/mlp/wi_0/kernel/value", UR_DT_FLOAT32, "6,2,16",
        NULL);
    add(&ts, "decoder/decoder_norm/scale/value", UR_DT_FLOAT32, "6", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_axes(plan, 0, 3, 0, 1, 3);
    for (int k = 0; k < 12; k++) {
        snprintf(want[k], sizeof want[k], "decoder/layers_%d/mlp/wi_0/kernel/value", k);
    }
    expect_out(plan, 0, w, 12);
    assert_int_equal(plan->actions[1].kind, UR_PLAN_UNSTACK);
    assert_int_equal(plan->actions[1].axis, 1);
    for (int k = 0; k < 2; k++) {
        snprintf(want[k], sizeof want[k], "decoder/layers_%d/mlp/wi_0/kernel/value", 12 + k);
    }
    expect_out(plan, 1, w, 2);
    expect_copy(plan, 2, "decoder/decoder_norm/scale/value");
    ur_plan_free(plan);

    /* no repeats (R=1), one layer per stage: [S, ...] on axis 0 */
    set_key(&s, "num_layers_per_pipeline_stage=1");
    set_key(&s, "scan_layers_per_stage=0");
    set_key(&s, "pipeline_parallel_layers=-1");
    set_key(&s, "num_pipeline_repeats=-1");
    s.num_decoder_layers = 2;
    ts.n = 0;
    add(&ts, "params/params/decoder/pipeline_module/layers/mlp/wi_0/kernel", UR_DT_FLOAT32,
        "2,6,16", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_axes(plan, 0, 1, 0, 0, 0);
    snprintf(want[0], sizeof want[0], "decoder/layers_0/mlp/wi_0/kernel/value");
    snprintf(want[1], sizeof want[1], "decoder/layers_1/mlp/wi_0/kernel/value");
    expect_out(plan, 0, w, 2);
    ur_plan_free(plan);

    /* sequential stage of 2 (layers_<j>), R=2, S=2: out[r*S + s] = layers_<(r*S+s)*2 + j> */
    set_key(&s, "num_layers_per_pipeline_stage=2");
    s.num_decoder_layers = 8;
    ts.n = 0;
    add(&ts, "decoder/pipeline_module/layers/layers_1/attn/wq/value", UR_DT_FLOAT32, "2,2,6,4",
        NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_axes(plan, 0, 2, 0, 1, 0);
    for (int k = 0; k < 4; k++) {
        snprintf(want[k], sizeof want[k], "decoder/layers_%d/attn/wq/value", k * 2 + 1);
    }
    expect_out(plan, 0, w, 4);
    ur_plan_free(plan);
}

/* Pipelined DeepSeek (nnx_decoders.py _init_pipeline_deepseek): dense_layers, then the first
 * MoE layers in moe_layers_outside_pipeline, both before the stack of the last MoE layers. */
static void test_plan__pipeline_deepseek(void **state)
{
    char want[4][64];
    const char *w[4];
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    (void)state;
    for (int k = 0; k < 4; k++) {
        w[k] = want[k];
    }
    /* 1 dense + 6 MoE layers; 4 pipelined (S=2, R=2): MoE layers 2..5 <- (r * 2 + s) + 2 */
    s.decoder_block = "deepseek";
    s.num_decoder_layers = 7;
    set_key(&s, "first_num_dense_layers=1");
    set_key(&s, "ici_pipeline_parallelism=2");
    set_key(&s, "dcn_pipeline_parallelism=1");
    set_key(&s, "num_layers_per_pipeline_stage=1");
    set_key(&s, "num_pipeline_repeats=-1");
    set_key(&s, "pipeline_parallel_layers=4");
    ts.n = 0;
    add(&ts, "params/params/decoder/pipeline_module/layers/mlp/wi_0/kernel", UR_DT_FLOAT32,
        "2,2,6,16", NULL);
    add(&ts, "params/params/decoder/moe_layers_outside_pipeline/mlp/wi_0/kernel", UR_DT_FLOAT32,
        "6,2,16", NULL);
    add(&ts, "params/params/decoder/dense_layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,1,16", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_axes(plan, 0, 2, 0, 1, 0);
    for (int k = 0; k < 4; k++) {
        snprintf(want[k], sizeof want[k], "decoder/moe_layers_%d/mlp/wi_0/kernel/value", 2 + k);
    }
    expect_out(plan, 0, w, 4);
    assert_int_equal(plan->actions[1].axis, 1);
    for (int k = 0; k < 2; k++) {
        snprintf(want[k], sizeof want[k], "decoder/moe_layers_%d/mlp/wi_0/kernel/value", k);
    }
    expect_out(plan, 1, w, 2);
    snprintf(want[0], sizeof want[0], "decoder/dense_layers_0/mlp/wi_0/kernel/value");
    expect_out(plan, 2, w, 1);
    ur_plan_free(plan);

    /* pipeline_parallel_layers -1: every MoE layer (types.py), none outside */
    s.num_decoder_layers = 5;
    set_key(&s, "pipeline_parallel_layers=-1");
    ts.n = 0;
    add(&ts, "params/params/decoder/pipeline_module/layers/mlp/wi_0/kernel", UR_DT_FLOAT32,
        "2,2,6,16", NULL);
    add(&ts, "params/params/decoder/dense_layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,1,16", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    for (int k = 0; k < 4; k++) {
        snprintf(want[k], sizeof want[k], "decoder/moe_layers_%d/mlp/wi_0/kernel/value", k);
    }
    expect_out(plan, 0, w, 4);
    ur_plan_free(plan);
}

static void test_plan__pipeline_errors(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_err err;
    (void)state;
    ts.n = 0;
    add(&ts, "params/params/decoder/pipeline_module/layers/mlp/wi_0/kernel", UR_DT_FLOAT32,
        "2,2,6,16", NULL);
    /* a pipeline stack with no pipeline in the config */
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "pipeline_module"));
    /* 4 layers, S=2, lps=1 -> R=2: fits; S=4 -> R=1 but the leaf has [2, 2]: shape error */
    set_key(&s, "ici_pipeline_parallelism=2");
    set_key(&s, "dcn_pipeline_parallelism=1");
    set_key(&s, "num_layers_per_pipeline_stage=1");
    set_key(&s, "num_pipeline_repeats=-1");
    set_key(&s, "pipeline_parallel_layers=-1");
    ur_plan_free(build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS));
    set_key(&s, "ici_pipeline_parallelism=4");
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "expected 4"));
    /* stages x repeats x lps must equal the pipelined layers */
    set_key(&s, "ici_pipeline_parallelism=3");
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "must equal"));
    /* a scanned stage must be under scanned_layers */
    set_key(&s, "ici_pipeline_parallelism=2");
    set_key(&s, "num_layers_per_pipeline_stage=2");
    set_key(&s, "num_pipeline_repeats=1");
    set_key(&s, "scan_layers_per_stage=1");
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "scanned_layers"));
    /* DeepSeek pipelines only its MoE layers; a pipelined gemma4 is refused */
    s.decoder_block = "deepseek";
    set_key(&s, "num_pipeline_repeats=-1");
    set_key(&s, "num_layers_per_pipeline_stage=1");
    set_key(&s, "scan_layers_per_stage=0");
    set_key(&s, "first_num_dense_layers=1");
    set_key(&s, "pipeline_parallel_layers=4");
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "MoE layers"));
    s.decoder_block = "gemma4";
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EUNSUPPORTED);
}

/* qwen3-next as maxtext 0.2.5 writes it: decoder/layers/local_layers (block axis at
 * param_scan_axis, the nested scan of K - 1 linear-attention layers after it),
 * decoder/layers/global_layer (layer Kb + K - 1) and, for N % K layers, layers_remainder. */
static void test_plan__qwen3_next_nested_blocks(void **state)
{
    char want[8][64];
    const char *w[8];
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    for (int k = 0; k < 8; k++) {
        w[k] = want[k];
    }
    s.decoder_block = "qwen3_next";
    set_key(&s, "inhomogeneous_layer_cycle_interval=4");
    s.num_decoder_layers = 10; /* 2 blocks + 2 remainder layers */
    ts.n = 0;
    add(&ts, "decoder/layers/local_layers/mlp/wi/value", UR_DT_FLOAT32, "6,2,3,16", NULL);
    add(&ts, "decoder/layers/global_layer/attention/key/value", UR_DT_FLOAT32, "6,2,16", NULL);
    add(&ts, "decoder/layers_remainder/local_layers/mlp/wi/value", UR_DT_FLOAT32, "6,2,16", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_axes(plan, 0, 2, 1, 2, 0);
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < 3; i++) {
            snprintf(want[b * 3 + i], sizeof want[0], "decoder/layers_%d/mlp/wi/value", b * 4 + i);
        }
    }
    expect_out(plan, 0, w, 6);
    snprintf(want[0], sizeof want[0], "decoder/layers_3/attention/key/value");
    snprintf(want[1], sizeof want[1], "decoder/layers_7/attention/key/value");
    expect_out(plan, 1, w, 2);
    snprintf(want[0], sizeof want[0], "decoder/layers_8/mlp/wi/value");
    snprintf(want[1], sizeof want[1], "decoder/layers_9/mlp/wi/value");
    expect_out(plan, 2, w, 2);
    ur_plan_free(plan);
    /* 9 layers: one remainder layer expected, the checkpoint has 2 */
    s.num_decoder_layers = 9;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "layers_remainder/local_layers"));
    /* the remainder missing altogether */
    s.num_decoder_layers = 10;
    ts.n = 2;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing decoder/layers_remainder/local_layers"));
    /* the nested scan must hold K - 1 local layers */
    s.num_decoder_layers = 8;
    ts.n = 0;
    add(&ts, "decoder/layers/local_layers/mlp/wi/value", UR_DT_FLOAT32, "6,2,4,16", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "expected length 3 on axis 2"));
}

/* gemma4: blocks of (5 local layers, nested scan) + 1 global, then the remainder. */
static void test_plan__gemma4_nested_blocks(void **state)
{
    char want[12][64];
    const char *w[12];
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    (void)state;
    for (int k = 0; k < 12; k++) {
        w[k] = want[k];
    }
    s.decoder_block = "gemma4";
    s.num_decoder_layers = 14; /* 2 blocks + 2 remainder layers */
    ts.n = 0;
    add(&ts, "decoder/scanned_blocks/local_layers/mlp/wi/value", UR_DT_FLOAT32, "6,2,5,16", NULL);
    add(&ts, "decoder/scanned_blocks/global_layer/mlp/wi/value", UR_DT_FLOAT32, "6,2,16", NULL);
    add(&ts, "decoder/layers_remainder/local_layers/mlp/wi/value", UR_DT_FLOAT32, "6,2,16", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_axes(plan, 0, 2, 1, 2, 0);
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < 5; i++) {
            snprintf(want[b * 5 + i], sizeof want[0], "decoder/layers_%d/mlp/wi/value", b * 6 + i);
        }
    }
    expect_out(plan, 0, w, 10);
    expect_axes(plan, 1, 1, 1, 0, 0);
    snprintf(want[0], sizeof want[0], "decoder/layers_5/mlp/wi/value");
    snprintf(want[1], sizeof want[1], "decoder/layers_11/mlp/wi/value");
    expect_out(plan, 1, w, 2);
    snprintf(want[0], sizeof want[0], "decoder/layers_12/mlp/wi/value");
    snprintf(want[1], sizeof want[1], "decoder/layers_13/mlp/wi/value");
    expect_out(plan, 2, w, 2);
    ur_plan_free(plan);
    /* 13 layers: one remainder layer expected, the checkpoint has 2 */
    s.num_decoder_layers = 13;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "layers_remainder/local_layers"));
    /* the remainder missing altogether */
    s.num_decoder_layers = 14;
    ts.n = 2;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing decoder/layers_remainder/local_layers"));
    /* 12 layers: no remainder; an empty placeholder one is dropped */
    s.num_decoder_layers = 12;
    add(&ts, "decoder/layers_remainder/local_layers", UR_DT_INVALID, "", NULL);
    ts.t[2].leaf.placeholder = UR_PLAN_PLACEHOLDER_NONE;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    assert_int_equal(plan->actions[2].kind, UR_PLAN_DROP);
    ur_plan_free(plan);
    /* anything else under scanned_blocks */
    ts.n = 0;
    add(&ts, "decoder/scanned_blocks/layers_0/mlp/wi/value", UR_DT_FLOAT32, "6,2,16", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "global_layer"));
}

/* Multi-token prediction: the MTP layer is built from get_decoder_layers()[-1] (MaxText
 * models.py). deepseek: the same layer class scanned or not, copied; gemma4: the scanned block,
 * of which local layer 0 is the unscanned MTP layer (the rest not written); the other block
 * families: refused. */
static void test_plan__mtp_layer(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_plan *plan;
    ur_err err;
    const ur_plan_action *a;
    (void)state;
    s.decoder_block = "deepseek";
    s.num_decoder_layers = 2;
    set_key(&s, "first_num_dense_layers=1");
    ts.n = 0;
    add(&ts, "decoder/dense_layers/mlp/wi/value", UR_DT_FLOAT32, "6,1,16", NULL);
    add(&ts, "decoder/moe_layers/mlp/wi/value", UR_DT_FLOAT32, "6,1,16", NULL);
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/self_attention/wq_a/kernel/value",
        UR_DT_FLOAT32, "6,4", NULL);
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_projection/kernel/value", UR_DT_FLOAT32, "12,6", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_copy(plan, 2,
                "mtp_block/mtp_layer_1/mtp_1_transformer_layer/self_attention/wq_a/kernel/value");
    expect_copy(plan, 3, "mtp_block/mtp_layer_1/mtp_1_projection/kernel/value");
    ur_plan_free(plan);

    s.decoder_block = "gemma4";
    s.num_decoder_layers = 6;
    ts.n = 0;
    add(&ts, "decoder/scanned_blocks/local_layers/mlp/wi/value", UR_DT_FLOAT32, "6,1,5,16", NULL);
    add(&ts, "decoder/scanned_blocks/global_layer/mlp/wi/value", UR_DT_FLOAT32, "6,1,16", NULL);
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/local_layers/mlp/wi/value",
        UR_DT_FLOAT32, "6,5,16", NULL);
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/local_layers/norm/scale/value",
        UR_DT_FLOAT32, "6,5", NULL);
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/global_layer/mlp/wi/value",
        UR_DT_FLOAT32, "6,16", NULL);
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_final_norm/scale/value", UR_DT_FLOAT32, "6", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    for (size_t i = 2; i < 4; i++) {
        a = &plan->actions[i];
        assert_int_equal(a->kind, UR_PLAN_UNSTACK);
        assert_int_equal(a->axis, 1);
        assert_int_equal(a->n_out, 5);
        for (size_t k = 1; k < 5; k++) {
            assert_int_equal(a->out[k].len, 0); /* discarded */
        }
    }
    assert_string_equal(fmt(&plan->actions[2].out[0]),
                        "mtp_block/mtp_layer_1/mtp_1_transformer_layer/mlp/wi/value");
    assert_string_equal(fmt(&plan->actions[3].out[0]),
                        "mtp_block/mtp_layer_1/mtp_1_transformer_layer/norm/scale/value");
    assert_int_equal(plan->actions[4].kind, UR_PLAN_DROP);
    assert_non_null(strstr(plan->actions[4].why, "global layer"));
    expect_copy(plan, 5, "mtp_block/mtp_layer_1/mtp_1_final_norm/scale/value");
    /* 5 leaves written from the blocks' 2, one each from the MTP's local layers, 1 copy */
    assert_int_equal(plan->summary.leaves_out, 5 + 1 + 1 + 1 + 1);
    assert_int_equal(plan->summary.bytes_out, (6 * 5 * 16 + 6 * 16 + 6 * 16 + 6 + 6) * 2);
    ur_plan_free(plan);
    /* not unrolled: the scanned MTP block as it is */
    s.force_unroll = 0;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_copy(plan, 2,
                "mtp_block/mtp_layer_1/mtp_1_transformer_layer/local_layers/mlp/wi/value");
    ur_plan_free(plan);
    s.force_unroll = 1;
    /* a local stack not of 5 layers on param_scan_axis */
    ts.t[2].shape[1] = 4;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "5 local layers"));
    ts.t[2].shape[1] = 5;
    /* another module of the scanned MTP block */
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/layers_0/mlp/wi/value", UR_DT_FLOAT32,
        "6,16", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "local_layers/ and global_layer/"));

    /* gpt-oss: MaxText cannot build its unscanned MTP layer */
    s.decoder_block = "gpt_oss";
    set_key(&s, "inhomogeneous_layer_cycle_interval=2");
    s.num_decoder_layers = 2;
    ts.n = 0;
    add(&ts, "decoder/layers/layers_0/mlp/wi/value", UR_DT_FLOAT32, "6,1,16", NULL);
    add(&ts, "decoder/layers/layers_1/mlp/wi/value", UR_DT_FLOAT32, "6,1,16", NULL);
    add(&ts, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/layers_0/mlp/wi/value", UR_DT_FLOAT32,
        "6,16", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "multi-token prediction"));
    /* a cycle of a decoder block with one layer class: copied */
    s.decoder_block = "llama2";
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_copy(plan, 2, "mtp_block/mtp_layer_1/mtp_1_transformer_layer/layers_0/mlp/wi/value");
    ur_plan_free(plan);
    /* qwen3-next, deepseek4 */
    s.decoder_block = "qwen3_next";
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EUNSUPPORTED);
    /* a name that only looks like the MTP layer is an ordinary leaf */
    ts.n = 2;
    add(&ts, "mtp_block/mtp_layer_1/mtp_2_transformer_layer/x/value", UR_DT_FLOAT32, "6", NULL);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_PARAMS);
    expect_copy(plan, 2, "mtp_block/mtp_layer_1/mtp_2_transformer_layer/x/value");
    ur_plan_free(plan);
}

/* DeepSeek Engram: scanned chunks named by absolute layer index around unscanned Engram layers
 * (6 layers, 3 dense, Engram on 1 and 3), into the scan_layers=false model's dense_layers_<i>
 * and moe_layers_<i - 3>, the Engram weights dropped (that model has none). */
static ur_settings engram_settings(void)
{
    ur_settings s = base_settings();
    s.decoder_block = "deepseek";
    s.num_decoder_layers = 6;
    set_key(&s, "first_num_dense_layers=3");
    set_key(&s, "engram_layers=[1, 3]");
    s.pure_nnx = 0;
    return s;
}

static void engram_tree(tset *ts)
{
    ts->n = 0;
    add(ts, "params/params/decoder/dense_layers_0_0/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,1,16",
        NULL);
    add(ts, "params/params/decoder/dense_layers_engram_1/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,16",
        NULL);
    add(ts, "params/params/decoder/dense_layers_engram_1/engram/value_proj/kernel", UR_DT_FLOAT32,
        "32,6", NULL);
    add(ts, "params/params/decoder/dense_layers_engram_1/engram_layer_norm/scale", UR_DT_FLOAT32,
        "6", NULL);
    add(ts, "params/params/decoder/dense_layers_2_2/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,1,16",
        NULL);
    add(ts, "params/params/decoder/moe_layers_engram_3/self_attention/wq_a/kernel", UR_DT_FLOAT32,
        "6,8", NULL);
    add(ts, "params/params/decoder/moe_layers_4_5/self_attention/wq_a/kernel", UR_DT_FLOAT32,
        "6,2,8", NULL);
    add(ts, "params/params/decoder/decoder_norm/scale", UR_DT_FLOAT32, "6", NULL);
    add(ts, "opt_state/0/count", UR_DT_INT32, "", NULL);
}

static void test_plan__deepseek_engram(void **state)
{
    tset ts;
    ur_settings s = engram_settings();
    ur_plan *plan;
    const char *why;
    (void)state;
    engram_tree(&ts);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    assert_int_equal(plan->n_groups, 0);
    expect_unstack(plan, 0, 1, 1, "params/params/decoder/dense_layers_0/mlp/wi_0/kernel",
                   "params/params/decoder/dense_layers_0/mlp/wi_0/kernel");
    expect_copy(plan, 1, "params/params/decoder/dense_layers_1/mlp/wi_0/kernel");
    why = plan->actions[2].why;
    assert_non_null(why);
    assert_non_null(strstr(why, "no Engram"));
    expect_drop(plan, 2, why);
    expect_drop(plan, 3, why);
    expect_unstack(plan, 4, 1, 1, "params/params/decoder/dense_layers_2/mlp/wi_0/kernel",
                   "params/params/decoder/dense_layers_2/mlp/wi_0/kernel");
    /* the MoE names restart at 0: layer 3 is moe_layers_0, the chunk 4..5 moe_layers_1..2 */
    expect_copy(plan, 5, "params/params/decoder/moe_layers_0/self_attention/wq_a/kernel");
    expect_unstack(plan, 6, 1, 2, "params/params/decoder/moe_layers_1/self_attention/wq_a/kernel",
                   "params/params/decoder/moe_layers_2/self_attention/wq_a/kernel");
    expect_copy(plan, 7, "params/params/decoder/decoder_norm/scale");
    assert_int_equal(plan->summary.leaves_dropped, 3);
    /* of which the two Engram arrays are left out (the run says so), the optimizer not */
    assert_int_equal(plan->summary.leaves_left_out, 2);
    assert_ptr_equal(plan->summary.left_out_why, why);
    ur_plan_free(plan);
    /* param_scan_axis 0: the chunk's first axis */
    s.param_scan_axis = 0;
    ts.t[0].shape[0] = ts.t[4].shape[0] = 1;
    ts.t[0].shape[1] = ts.t[4].shape[1] = 6;
    ts.t[6].shape[0] = 2;
    ts.t[6].shape[1] = 6;
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_unstack(plan, 6, 0, 2, "params/params/decoder/moe_layers_1/self_attention/wq_a/kernel",
                   "params/params/decoder/moe_layers_2/self_attention/wq_a/kernel");
    ur_plan_free(plan);
    /* not converted: a scanned param-only output keeps the chunks */
    s = engram_settings();
    s.force_unroll = 0;
    engram_tree(&ts);
    plan = build_ok(&ts, &s, UR_PLAN_INPUT_FULL_STATE);
    expect_copy(plan, 6, "params/params/decoder/moe_layers_4_5/self_attention/wq_a/kernel");
    expect_copy(plan, 2, "params/params/decoder/dense_layers_engram_1/engram/value_proj/kernel");
    ur_plan_free(plan);
}

static void test_plan__deepseek_engram_errors(void **state)
{
    tset ts;
    ur_settings s = engram_settings();
    ur_err err;
    (void)state;
    /* a chunk length the config does not give */
    engram_tree(&ts);
    ts.t[6].shape[1] = 3;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "expected 2"));
    assert_non_null(strstr(err.msg, "moe_layers_4_5"));
    /* a chunk MaxText does not build for these engram_layers */
    set_key(&s, "engram_layers=[3]");
    engram_tree(&ts);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "decoder/dense_layers_0_0: not a layer stack"));
    assert_non_null(strstr(err.msg, "engram_layers=[3]"));
    /* a chunk or an Engram layer missing */
    s = engram_settings();
    engram_tree(&ts);
    ts.t[4] = ts.t[8];
    ts.n = 8;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing decoder/dense_layers_2_2"));
    engram_tree(&ts);
    ts.t[5] = ts.t[8];
    ts.n = 8;
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_FULL_STATE, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "missing decoder/moe_layers_engram_3"));
    /* the plain DeepSeek groups under an Engram config */
    ts.n = 0;
    add(&ts, "params/params/decoder/dense_layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,3,16", NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "decoder/dense_layers: not a layer stack"));
    /* names that only look like chunks */
    ts.n = 0;
    add(&ts, "params/params/decoder/dense_layers_2_0/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,3,16",
        NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "not a layer stack"));
    ts.n = 0;
    add(&ts, "params/params/decoder/dense_layers_00_0/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,1,16",
        NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "dense_layers_00_0: not a layer stack"));
    /* first_num_dense_layers past the layers */
    set_key(&s, "first_num_dense_layers=7");
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "first_num_dense_layers=7"));
}

/* Engram chunks under a config without engram_layers: the config does not describe the
 * checkpoint (exit 2), whatever the decoder block. */
static void test_plan__unsupported_stacks(void **state)
{
    tset ts;
    ur_settings s = base_settings();
    ur_err err;
    (void)state;
    ts.n = 0;
    s.decoder_block = "deepseek";
    add(&ts, "params/params/decoder/dense_layers_0_2/mlp/wi_0/kernel", UR_DT_FLOAT32, "6,3,16",
        NULL);
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "decoder/dense_layers_0_2: the checkpoint has DeepSeek "
                                    "Engram layer chunks but the config has no engram_layers"));
    s = engram_settings();
    s.decoder_block = "llama2";
    assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "no engram_layers (decoder_block=llama2)"));
}

/* A family's key is typed and checked by the planner (the config loads: the key is one of
 * its keys), whichever family the config turns out to be; the message names the key. A key
 * no config has is refused by the load, as before. */
static void test_plan__family_keys_checked(void **state)
{
    static const struct {
        const char *kv, *msg;
    } k_bad[] = {
        {"first_num_dense_layers=abc",
         "config key 'first_num_dense_layers': expected an int, got str 'abc'"},
        {"first_num_dense_layers=-1",
         "config key 'first_num_dense_layers': must be >= 0 (got -1)"},
        {"engram_layers=[1, x]", "config key 'engram_layers': expected an int, got str 'x'"},
        {"engram_layers=5", "config key 'engram_layers': expected a list of ints, got int"},
        {"scan_layers_per_stage=maybe", "config key 'scan_layers_per_stage': expected a bool"},
        {"first_num_hash_layers=1.5", "config key 'first_num_hash_layers': expected an int"},
        {"ici_pipeline_parallelism=null",
         "config key 'ici_pipeline_parallelism': expected an int"},
    };
    tset ts;
    ur_err err;
    (void)state;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        ur_settings s = base_settings(); /* llama2: none of these is its family's */
        ts.n = 0;
        add(&ts, "params/params/decoder/layers/mlp/wi_0/kernel", UR_DT_FLOAT32, "16,4,16", NULL);
        assert_int_equal(load_key(&s, k_bad[i].kv, &err), UR_OK);
        assert_int_equal(build_fail(&ts, &s, UR_PLAN_INPUT_PARAMS, &err), UR_EINVAL);
        if (!strstr(err.msg, k_bad[i].msg)) {
            fail_msg("%s: '%s' lacks '%s'", k_bad[i].kv, err.msg, k_bad[i].msg);
        }
        memset(&err, 0, sizeof err);
        assert_int_equal(ur_plan_validate_keys(&s, &err), UR_EINVAL);
        assert_non_null(strstr(err.msg, k_bad[i].msg));
    }
    /* good values pass, and so does a config-less settings (every key at its default) */
    {
        ur_settings s = base_settings();
        assert_int_equal(ur_plan_validate_keys(&s, &err), UR_OK);
        set_key(&s, "first_num_dense_layers='2'");
        set_key(&s, "engram_layers=null");
        assert_int_equal(ur_plan_validate_keys(&s, &err), UR_OK);
    }
    /* a key no family (and no config) has: the load refuses it, naming it */
    {
        ur_settings s = base_settings();
        assert_int_equal(load_key(&s, "first_num_sparse_layers=1", &err), UR_EINVAL);
        assert_non_null(strstr(err.msg, "unknown config key 'first_num_sparse_layers'"));
        assert_null(s.config);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan__scan_axis_resolver),
        cmocka_unit_test(test_plan__linen_full_state_to_linen_decode),
        cmocka_unit_test(test_plan__linen_full_state_to_nnx_decode),
        cmocka_unit_test(test_plan__nnx_current_with_rank1_rng_counts),
        cmocka_unit_test(test_plan__nnx_aux_variables_kept),
        cmocka_unit_test(test_plan__nnx_aux_nested_refused),
        cmocka_unit_test(test_plan__older_nnx_layout),
        cmocka_unit_test(test_plan__param_only_inputs),
        cmocka_unit_test(test_plan__length_mismatch_is_an_error),
        cmocka_unit_test(test_plan__missing_group_and_no_unroll),
        cmocka_unit_test(test_plan__replicate_and_dtypes),
        cmocka_unit_test(test_plan__array_without_layer_axis_is_refused),
        cmocka_unit_test(test_plan__deepseek_groups),
        cmocka_unit_test(test_plan__lora_adapters),
        cmocka_unit_test(test_plan__unrecognised_layout),
        cmocka_unit_test(test_plan__oom_loop),
        cmocka_unit_test(test_plan__inhomogeneous_cycle),
        cmocka_unit_test(test_plan__gemma3_blocks_and_remainder),
        cmocka_unit_test(test_plan__vision_encoder_copied),
        cmocka_unit_test(test_plan__deepseek4_hash_layers_and_blocks),
        cmocka_unit_test(test_plan__pipeline_stacks),
        cmocka_unit_test(test_plan__pipeline_deepseek),
        cmocka_unit_test(test_plan__pipeline_errors),
        cmocka_unit_test(test_plan__gemma4_nested_blocks),
        cmocka_unit_test(test_plan__mtp_layer),
        cmocka_unit_test(test_plan__qwen3_next_nested_blocks),
        cmocka_unit_test(test_plan__deepseek_engram),
        cmocka_unit_test(test_plan__deepseek_engram_errors),
        cmocka_unit_test(test_plan__unsupported_stacks),
        cmocka_unit_test(test_plan__family_keys_checked),
    };
    return cmocka_run_group_tests_name("plan", tests, group_setup, group_teardown);
}
