/* plan_config: MaxText pyconfig semantics over the small configs in tests/data/maxtext/. */
#include "ur_test.h"

#include "config/config_impl.h"

#include "unroll/alloc.h"
#include "unroll/plan.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DATA UR_TEST_DATA_DIR "/maxtext/"

static int load_env(ur_config **cfg, const char *file, const char *const *ov, size_t n,
                    const char *const *envp, ur_err *err)
{
    ur_config_opts o;
    memset(&o, 0, sizeof o);
    o.config_path = file;
    o.overrides = ov;
    o.n_overrides = n;
    o.envp = envp;
    o.cwd = "/work/here";
    o.now = 1700000000; /* 2023-11-14 22:13:20 UTC */
    return ur_config_load(cfg, &o, err);
}

static ur_config *load_ok(const char *file, const char *const *ov, size_t n)
{
    ur_config *cfg = NULL;
    ur_err err;
    int rc = load_env(&cfg, file, ov, n, NULL, &err);
    if (rc != UR_OK) {
        fail_msg("load %s failed: %s", file, err.msg);
    }
    return cfg;
}

static void expect_fail(const char *file, const char *const *ov, size_t n, int code,
                        const char *needle)
{
    ur_config *cfg = NULL;
    ur_err err;
    int rc = load_env(&cfg, file, ov, n, NULL, &err);
    assert_int_equal(rc, code);
    assert_null(cfg);
    if (!strstr(err.msg, needle)) {
        fail_msg("error '%s' lacks '%s'", err.msg, needle);
    }
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_config__base_values_are_typed(void **state)
{
    ur_config *cfg = load_ok(DATA "base.yml", NULL, 0);
    const ur_yval *root = ur_config__root(cfg);
    double f = 0;
    int64_t i = 0;
    int b = 0;
    const char *s = NULL;
    (void)state;
    assert_int_equal(ur_config_get_float(cfg, "learning_rate", &f, NULL), UR_OK);
    assert_true(f == 3e-5);
    assert_int_equal(ur_config_yaml_get(root, "adam_eps")->kind, UR_Y_FLOAT);
    assert_int_equal(ur_config_get_int(cfg, "hex_value", &i, NULL), UR_OK);
    assert_int_equal(i, 31);
    assert_int_equal(ur_config_get_int(cfg, "octal_value", &i, NULL), UR_OK);
    assert_int_equal(i, 15);
    assert_int_equal(ur_config_get_int(cfg, "sexagesimal", &i, NULL), UR_OK);
    assert_int_equal(i, 90);
    assert_int_equal(ur_config_get_str(cfg, "date_like", &s, NULL), UR_OK);
    assert_string_equal(s, "2024-01-02");
    assert_int_equal(ur_config_get_bool(cfg, "yes_flag", &b, NULL), UR_OK);
    assert_int_equal(b, 1);
    assert_int_equal(ur_config_get_bool(cfg, "off_flag", &b, NULL), UR_OK);
    assert_int_equal(b, 0);
    assert_int_equal(ur_config_yaml_get(root, "null_tilde")->kind, UR_Y_NULL);
    assert_int_equal(ur_config_yaml_get(root, "empty_value")->kind, UR_Y_NULL);
    assert_int_equal(ur_config_get_str(cfg, "quoted_number", &s, NULL), UR_OK);
    assert_string_equal(s, "42");
    /* pydantic lax mode: "42" is a fine int, 'true' a fine bool */
    assert_int_equal(ur_config_get_int(cfg, "quoted_number", &i, NULL), UR_OK);
    assert_int_equal(i, 42);
    assert_int_equal(ur_config_get_bool(cfg, "single_quoted", &b, NULL), UR_OK);
    assert_int_equal(b, 1);
    /* "None" (any case) is None, as pyconfig's _prepare_for_pydantic makes it */
    assert_int_equal(ur_config_yaml_get(root, "none_string")->kind, UR_Y_NULL);
    assert_int_equal(ur_config_yaml_get(ur_config_yaml_get(root, "nested"), "inner")->i, 1);
    ur_config_free(cfg);
}

static void test_config__getters_refuse_wrong_types(void **state)
{
    ur_config *cfg = load_ok(DATA "base.yml", NULL, 0);
    ur_err err;
    int64_t i;
    int b;
    const char *s;
    (void)state;
    assert_int_equal(ur_config_get_int(cfg, "attention", &i, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "'attention'"));
    assert_int_equal(ur_config_get_int(cfg, "learning_rate", &i, &err), UR_EINVAL);
    assert_int_equal(ur_config_get_bool(cfg, "hex_value", &b, &err), UR_EINVAL);
    assert_int_equal(ur_config_get_str(cfg, "hex_value", &s, &err), UR_EINVAL);
    assert_int_equal(ur_config_get_str(cfg, "no_such_key", &s, &err), UR_ENOTFOUND);
    ur_config_free(cfg);
}

/* pydantic list[int] in lax mode: items coerced one by one; null and [] are empty. */
static void test_config__int_list_getter(void **state)
{
    const char *lax[] = {"first_num_dense_layers=[1, '2', 3]"};
    const char *bad_item[] = {"first_num_dense_layers=[1, x]"};
    ur_config *cfg = load_ok(DATA "base.yml", NULL, 0);
    ur_err err;
    int64_t *v = NULL;
    size_t n = 7;
    (void)state;
    assert_int_equal(ur_config_get_int_list(cfg, "null_tilde", &v, &n, &err), UR_OK);
    assert_null(v);
    assert_int_equal(n, 0);
    assert_int_equal(ur_config_get_int_list(cfg, "mesh_axes", &v, &n, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "config key 'mesh_axes': expected an int"));
    assert_int_equal(ur_config_get_int_list(cfg, "hex_value", &v, &n, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "config key 'hex_value': expected a list of ints"));
    assert_int_equal(ur_config_get_int_list(cfg, "no_such_key", &v, &n, &err), UR_ENOTFOUND);
    ur_config_free(cfg);
    cfg = load_ok(DATA "base.yml", lax, N(lax));
    assert_int_equal(ur_config_get_int_list(cfg, "first_num_dense_layers", &v, &n, &err), UR_OK);
    assert_int_equal(n, 3);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[1], 2);
    assert_int_equal(v[2], 3);
    ur_free(v);
    ur_config_free(cfg);
    /* the config loads (the key is known); the getter refuses the item, naming the key */
    cfg = load_ok(DATA "base.yml", bad_item, N(bad_item));
    v = NULL;
    assert_int_equal(ur_config_get_int_list(cfg, "first_num_dense_layers", &v, &n, &err),
                     UR_EINVAL);
    assert_null(v);
    assert_non_null(strstr(err.msg, "config key 'first_num_dense_layers': expected an int, got "
                                    "str 'x'"));
    ur_config_free(cfg);
}

static void test_config__defaults_and_derived(void **state)
{
    ur_config *cfg;
    const ur_settings *s;
    (void)state;
    setenv("TZ", "UTC", 1);
    tzset();
    cfg = load_ok(DATA "base.yml", NULL, 0);
    s = ur_config_settings(cfg);
    assert_string_equal(s->base_output_directory, "/work/here/maxtext_output");
    assert_string_equal(s->run_name, "default_2023-11-14-22-13");
    assert_string_equal(s->checkpoint_dir,
                        "/work/here/maxtext_output/default_2023-11-14-22-13/checkpoints/");
    assert_int_equal(s->num_decoder_layers, 16);
    assert_int_equal(s->param_scan_axis, 1);
    assert_true(s->scan_layers);
    assert_false(s->force_unroll);
    assert_true(s->pure_nnx);   /* absent from this base.yml: NNX-only MaxText */
    assert_true(s->enable_nnx);
    assert_true(s->use_ocdbt);
    assert_true(s->use_zarr3);
    assert_true(s->target_data_file_size == 2147483648LL);
    assert_string_equal(s->decoder_block, "llama2");
    assert_string_equal(s->load_full_state_path, "");
    assert_int_equal(s->n_axis_rules, 5);
    assert_string_equal(s->axis_rules[1].name, "layers");
    assert_int_equal(s->axis_rules[1].n_mesh, 1);
    assert_string_equal(s->axis_rules[1].mesh[0], "stage");
    assert_int_equal(s->axis_rules[2].n_mesh, 0);
    assert_int_equal(s->axis_rules[0].n_mesh, 2);
    ur_config_free(cfg);
}

static void test_config__overrides_use_yaml_typing(void **state)
{
    const char *ov[] = {"force_unroll=true",
                        "param_scan_axis=0",
                        "learning_rate=1e-3",
                        "run_name=my_run",
                        "base_output_directory=/out/",
                        "global_parameter_scale=8",
                        "load_full_state_path=gs://b/ckpt/5/items",
                        "mesh_axes=[data, fsdp]",
                        "nested.inner=7",
                        "attention=none",
                        "checkpoint_storage_use_zarr3=False",
                        "pure_nnx=false"};
    ur_config *cfg = load_ok(DATA "base.yml", ov, N(ov));
    const ur_settings *s = ur_config_settings(cfg);
    const ur_yval *root = ur_config__root(cfg);
    const ur_yval *mesh = ur_config_yaml_get(root, "mesh_axes");
    const ur_yval *nested = ur_config_yaml_get(root, "nested");
    double f;
    (void)state;
    assert_true(s->force_unroll);
    assert_int_equal(s->param_scan_axis, 0);
    assert_int_equal(ur_config_get_float(cfg, "learning_rate", &f, NULL), UR_OK);
    assert_true(f == 1e-3);
    assert_string_equal(s->run_name, "my_run");
    assert_string_equal(s->checkpoint_dir, "/out/my_run/checkpoints/");
    /* 2^(floor(log2 8) // 3) = 2 */
    assert_int_equal(s->num_decoder_layers, 32);
    assert_string_equal(s->load_full_state_path, "gs://b/ckpt/5/items");
    assert_int_equal(mesh->n, 2);
    assert_string_equal(mesh->vals[1]->s, "fsdp");
    /* dotted keys merge into the map */
    assert_int_equal(ur_config_yaml_get(nested, "inner")->i, 7);
    assert_non_null(ur_config_yaml_get(nested, "deeper"));
    assert_int_equal(ur_config_yaml_get(root, "attention")->kind, UR_Y_NULL);
    assert_false(s->use_zarr3);
    assert_false(s->pure_nnx);
    ur_config_free(cfg);
}

static void test_config__empty_override_values(void **state)
{
    /* "run_name=" is None for OmegaConf; pyconfig turns it into "" and the default applies */
    const char *ov[] = {"run_name=", "base_output_directory=/o"};
    ur_config *cfg;
    const char *envp[] = {"JOBSET_NAME=job7", NULL};
    ur_err err;
    (void)state;
    assert_int_equal(load_env(&cfg, DATA "base.yml", ov, N(ov), envp, &err), UR_OK);
    assert_string_equal(ur_config_settings(cfg)->run_name, "job7");
    assert_string_equal(ur_config_settings(cfg)->checkpoint_dir, "/o/job7/checkpoints/");
    ur_config_free(cfg);
}

static void test_config__unknown_keys_are_refused(void **state)
{
    const char *ov1[] = {"force_unroll=true", "not_a_key=1"};
    const char *ov2[] = {"nested_typo.inner=1"};
    const char *ov3[] = {"=1"};
    (void)state;
    expect_fail(DATA "base.yml", ov1, N(ov1), UR_EINVAL, "'not_a_key'");
    expect_fail(DATA "base.yml", ov2, N(ov2), UR_EINVAL, "'nested_typo'");
    expect_fail(DATA "base.yml", ov3, N(ov3), UR_EINVAL, "empty key");
}

static void test_config__bad_files(void **state)
{
    (void)state;
    expect_fail(DATA "missing.yml", NULL, 0, UR_EINVAL, "not found");
    expect_fail(DATA "bad_dup.yml", NULL, 0, UR_EINVAL, "duplicate key 'a'");
    expect_fail(DATA "bad_alias.yml", NULL, 0, UR_EINVAL, "aliases");
    expect_fail(DATA "bad_list.yml", NULL, 0, UR_EINVAL, "mapping");
    expect_fail(DATA "sub/loop.yml", NULL, 0, UR_EINVAL, "base_config");
    expect_fail(DATA "sub/orphan.yml", NULL, 0, UR_EINVAL, "'nowhere.yml' not found");
}

static void test_config__base_config_inheritance(void **state)
{
    const char *ov[] = {"model_name=tiny"};
    ur_config *cfg = load_ok(DATA "sub/child.yml", ov, N(ov));
    const ur_yval *root = ur_config__root(cfg);
    const ur_yval *nested = ur_config_yaml_get(root, "nested");
    const ur_settings *s = ur_config_settings(cfg);
    (void)state;
    /* child wins; maps merge key by key; lists are replaced */
    assert_string_equal(s->run_name, "child_run");
    assert_int_equal(ur_config_yaml_get(nested, "inner")->i, 2);
    assert_non_null(ur_config_yaml_get(nested, "deeper"));
    assert_int_equal(ur_config_yaml_get(root, "mesh_axes")->n, 1);
    assert_true(ur_config_yaml_get(root, "learning_rate")->f == 3e-5);
    /* the model file is found in ../models/ */
    assert_int_equal(s->num_decoder_layers, 4);
    ur_config_free(cfg);
    /* base_config "base.yml" from sub/ is found in the parent (MaxText's configs dir) */
    cfg = load_ok(DATA "sub/child2.yml", NULL, 0);
    assert_true(ur_config_settings(cfg)->force_unroll);
    assert_int_equal(ur_config_settings(cfg)->n_axis_rules, 5);
    ur_config_free(cfg);
}

static void test_config__model_file_and_rules(void **state)
{
    const char *ov[] = {"model_name=tiny-Instruct"};
    const char *ov2[] = {"model_name=deepseek-tiny", "logical_axis_rules=[['embed', 'data']]"};
    const char *ov3[] = {"model_name=tiny", "logical_axis_rules=[['embed', 'data']]"};
    ur_config *cfg = load_ok(DATA "base.yml", ov, N(ov));
    const ur_settings *s = ur_config_settings(cfg);
    int64_t emb = 0;
    (void)state;
    assert_int_equal(ur_config_get_int(cfg, "base_emb_dim", &emb, NULL), UR_OK);
    assert_int_equal(emb, 64);
    assert_int_equal(s->num_decoder_layers, 4);
    assert_string_equal(s->model_name, "tiny-Instruct");
    /* base rules minus those the model file renames, then the model's */
    assert_int_equal(s->n_axis_rules, 6);
    assert_string_equal(s->axis_rules[0].name, "activation_batch");
    assert_string_equal(s->axis_rules[1].name, "layers");
    assert_string_equal(s->axis_rules[2].name, "circular_repeats");
    assert_string_equal(s->axis_rules[3].name, "embed");
    assert_string_equal(s->axis_rules[4].name, "norm");
    assert_string_equal(s->axis_rules[4].mesh[0], "fsdp");
    assert_string_equal(s->axis_rules[5].name, "mlp");
    ur_config_free(cfg);
    /* then the command line's */
    cfg = load_ok(DATA "base.yml", ov2, N(ov2));
    s = ur_config_settings(cfg);
    assert_int_equal(s->n_axis_rules, 5);
    assert_string_equal(s->axis_rules[3].name, "norm");
    assert_string_equal(s->axis_rules[4].name, "embed");
    assert_string_equal(s->axis_rules[4].mesh[0], "data");
    ur_config_free(cfg);
    /* rules in both the model file and on the command line are a conflict, as in MaxText */
    expect_fail(DATA "base.yml", ov3, N(ov3), UR_EINVAL, "['logical_axis_rules']");
}

static void test_config__override_logical_axis_rules(void **state)
{
    const char *ov[] = {"override_logical_axis_rules=true", "logical_axis_rules=[[layers, x]]"};
    ur_config *cfg = load_ok(DATA "base.yml", ov, N(ov));
    const ur_settings *s = ur_config_settings(cfg);
    (void)state;
    assert_int_equal(s->n_axis_rules, 1);
    assert_string_equal(s->axis_rules[0].mesh[0], "x");
    ur_config_free(cfg);
}

static void test_config__model_conflicts(void **state)
{
    const char *conflict[] = {"model_name=tiny", "base_emb_dim=128", "base_num_decoder_layers=8"};
    const char *same[] = {"model_name=tiny", "base_emb_dim=64.0"};
    const char *forced[] = {"model_name=tiny", "override_model_config=true",
                            "base_num_decoder_layers=8"};
    const char *missing[] = {"model_name=nosuchmodel"};
    const char *deepseek[] = {"model_name=deepseek-tiny"};
    ur_config *cfg;
    (void)state;
    expect_fail(DATA "base.yml", conflict, N(conflict), UR_EINVAL,
                "Keys ['base_emb_dim', 'base_num_decoder_layers'] are overridden");
    /* equal values (64 == 64.0 in Python) are no conflict */
    cfg = load_ok(DATA "base.yml", same, N(same));
    ur_config_free(cfg);
    cfg = load_ok(DATA "base.yml", forced, N(forced));
    assert_int_equal(ur_config_settings(cfg)->num_decoder_layers, 8);
    ur_config_free(cfg);
    expect_fail(DATA "base.yml", missing, N(missing), UR_EINVAL, "nosuchmodel");
    cfg = load_ok(DATA "base.yml", deepseek, N(deepseek));
    assert_string_equal(ur_config_settings(cfg)->decoder_block, "deepseek");
    /* a key only a layout family reads is the family's to type (src/maxtext/); the model
     * file's value is in the config */
    {
        int64_t d = 0;
        assert_int_equal(ur_config_get_int(cfg, "first_num_dense_layers", &d, NULL), UR_OK);
        assert_int_equal(d, 2);
    }
    assert_int_equal(ur_config_settings(cfg)->num_decoder_layers, 5);
    ur_config_free(cfg);
}

static void test_config__invalid_combinations(void **state)
{
    const char *both[] = {"load_full_state_path=a", "load_parameters_path=b"};
    const char *nockpt[] = {"load_full_state_path=a", "enable_checkpointing=false"};
    const char *scale3[] = {"global_parameter_scale=3"};
    const char *scale0[] = {"global_parameter_scale=0"};
    const char *badbool[] = {"force_unroll=maybe"};
    const char *strint[] = {"run_name=123"};
    (void)state;
    expect_fail(DATA "base.yml", both, N(both), UR_EINVAL, "At most one of");
    expect_fail(DATA "base.yml", nockpt, N(nockpt), UR_EINVAL, "enable_checkpointing=True");
    expect_fail(DATA "base.yml", scale3, N(scale3), UR_EINVAL, "power of two");
    expect_fail(DATA "base.yml", scale0, N(scale0), UR_EINVAL, "cannot be zero");
    expect_fail(DATA "base.yml", badbool, N(badbool), UR_EINVAL, "'force_unroll'");
    /* pydantic does not turn an int into a str field */
    expect_fail(DATA "base.yml", strint, N(strint), UR_EINVAL, "'run_name'");
}

static void test_config__environment_overrides(void **state)
{
    const char *envp[] = {"M_FORCE_UNROLL=true", "M_PARAM_SCAN_AXIS=0", "M_RUN_NAME=envrun",
                          "OTHER=1", NULL};
    const char *envp_bad[] = {"M_PARAM_SCAN_AXIS=x", NULL};
    const char *ov[] = {"run_name=cli"};
    ur_config *cfg = NULL;
    ur_err err;
    (void)state;
    assert_int_equal(load_env(&cfg, DATA "base.yml", NULL, 0, envp, &err), UR_OK);
    assert_true(ur_config_settings(cfg)->force_unroll);
    assert_int_equal(ur_config_settings(cfg)->param_scan_axis, 0);
    assert_string_equal(ur_config_settings(cfg)->run_name, "envrun");
    ur_config_free(cfg);
    cfg = NULL;
    assert_int_equal(load_env(&cfg, DATA "base.yml", ov, 1, envp, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "both CLI/kwargs and environment"));
    assert_int_equal(load_env(&cfg, DATA "base.yml", NULL, 0, envp_bad, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "param_scan_axis"));
}

static void test_config__oom_loop(void **state)
{
    const char *ov[] = {"model_name=tiny", "force_unroll=true", "nested.inner=3",
                        "override_model_config=true", "logical_axis_rules=[[a, b]]"};
    int ok = 0;
    (void)state;
    for (long n = 0; n < 100000 && !ok; n++) {
        ur_config *cfg = NULL;
        ur_err err;
        int rc;
        ur_alloc_fail_after(n);
        rc = load_env(&cfg, DATA "sub/child.yml", ov, N(ov), NULL, &err);
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            assert_true(ur_config_settings(cfg)->force_unroll);
            ok = 1;
        } else if (rc != UR_ENOMEM) {
            fail_msg("allocation %ld: rc %d (%s)", n, rc, err.msg);
        }
        ur_config_free(cfg);
    }
    assert_true(ok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config__base_values_are_typed),
        cmocka_unit_test(test_config__getters_refuse_wrong_types),
        cmocka_unit_test(test_config__int_list_getter),
        cmocka_unit_test(test_config__defaults_and_derived),
        cmocka_unit_test(test_config__overrides_use_yaml_typing),
        cmocka_unit_test(test_config__empty_override_values),
        cmocka_unit_test(test_config__unknown_keys_are_refused),
        cmocka_unit_test(test_config__bad_files),
        cmocka_unit_test(test_config__base_config_inheritance),
        cmocka_unit_test(test_config__model_file_and_rules),
        cmocka_unit_test(test_config__override_logical_axis_rules),
        cmocka_unit_test(test_config__model_conflicts),
        cmocka_unit_test(test_config__invalid_combinations),
        cmocka_unit_test(test_config__environment_overrides),
        cmocka_unit_test(test_config__oom_loop),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
