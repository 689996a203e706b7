/* job_run, plan_orbax, plan_lora, verify_config: a run and what it reads, as library
 * functions (include/unroll/job.h, plan_orbax.h, verify.h), on the example checkpoint in
 * tests/data/example and on adapter directories made in a scratch directory. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/job.h"
#include "unroll/verify.h"

#include <stdlib.h>
#include <string.h>

#define EXAMPLE UR_TEST_DATA_DIR "/example"
#define EXAMPLE_ITEMS EXAMPLE "/checkpoints/9/items"

static char scratch[256];

static int setup(void **state)
{
    (void)state;
    snprintf(scratch, sizeof scratch, "/tmp/ur_job_run_XXXXXX");
    return mkdtemp(scratch) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return ur_fs_remove_tree(scratch, NULL) == UR_OK ? 0 : -1;
}

static ur_settings settings_with(const char *full, const char *params, int ckpt)
{
    ur_settings s;
    memset(&s, 0, sizeof s);
    s.load_full_state_path = full;
    s.load_parameters_path = params;
    s.lora_input_adapters_path = "";
    s.enable_checkpointing = ckpt;
    return s;
}

/* ---- ur_job_run_input ------------------------------------------------------------------ */

static void test_job_run__input_is_one_of_the_two_paths(void **state)
{
    const char *path = NULL;
    ur_plan_input kind;
    ur_settings s;
    ur_err err;
    (void)state;

    s = settings_with("/a", "", 1);
    assert_int_equal(ur_job_run_input(&path, &kind, &s, 0, &err), UR_OK);
    assert_string_equal(path, "/a");
    assert_int_equal(kind, UR_PLAN_INPUT_FULL_STATE);
    s = settings_with("", "/b", 1);
    assert_int_equal(ur_job_run_input(&path, &kind, &s, 0, &err), UR_OK);
    assert_string_equal(path, "/b");
    assert_int_equal(kind, UR_PLAN_INPUT_PARAMS);

    s = settings_with("/a", "/b", 1);
    assert_int_equal(ur_job_run_input(&path, &kind, &s, 1, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "only one of"));
    s = settings_with("", "", 1);
    assert_int_equal(ur_job_run_input(&path, &kind, &s, 1, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "no input"));
    /* enable_checkpointing=false: MaxText writes nothing; a dry run may still show the plan */
    s = settings_with("/a", "", 0);
    assert_int_equal(ur_job_run_input(&path, &kind, &s, 0, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "enable_checkpointing"));
    assert_int_equal(ur_job_run_input(&path, &kind, &s, 1, &err), UR_OK);
}

/* ---- ur_plan_orbax_leaves ----------------------------------------------------------------- */

static void test_job_run__orbax_leaves_index_for_index(void **state)
{
    ur_orbax_ckpt *ck = NULL;
    ur_plan_leaves l;
    ur_err err;
    int seen_layers = 0, seen_step = 0;
    (void)state;

    assert_int_equal(ur_orbax_ckpt_open(&ck, EXAMPLE_ITEMS, 0, &err), UR_OK);
    assert_int_equal(ur_plan_orbax_leaves(&l, ck, &err), UR_OK);
    assert_int_equal(l.n, ur_orbax_ckpt_leaf_count(ck));
    for (size_t i = 0; i < l.n; i++) {
        const ur_orbax_leaf *o = ur_orbax_ckpt_leaf(ck, i);
        const ur_plan_leaf *p = &l.leaves[i];
        assert_int_equal(p->path_len, o->depth);
        for (size_t k = 0; k < o->depth; k++) {
            assert_string_equal(p->path[k], o->path[k].key);
            assert_int_equal(p->seq[k], o->path[k].type == UR_ORBAX_KEY_SEQUENCE);
        }
        if (o->has_array) {
            assert_int_equal(p->dtype, o->dtype);
            assert_int_equal(p->rank, (size_t)o->rank);
            assert_memory_equal(p->shape, o->shape, p->rank * sizeof p->shape[0]);
        } else {
            assert_int_equal(p->dtype, UR_DT_INVALID);
            assert_int_equal(p->rank, 0);
        }
        seen_layers |= o->depth >= 3 && strcmp(p->path[2], "decoder") == 0 && o->rank == 3;
        seen_step |= o->depth == 1 && strcmp(p->path[0], "step") == 0;
    }
    assert_true(seen_layers && seen_step);
    ur_plan_orbax_leaves_dispose(&l);
    ur_plan_orbax_leaves_dispose(&l); /* disposed twice: a no-op */
    ur_orbax_ckpt_close(ck);
}

static void test_job_run__custom_metadata_states_the_layers(void **state)
{
    ur_orbax_ckpt *ck = NULL;
    char *cm = NULL;
    ur_err err;
    (void)state;

    /* the example records custom_metadata {}: the output's is scan_layers alone */
    assert_int_equal(ur_orbax_ckpt_open(&ck, EXAMPLE_ITEMS, 0, &err), UR_OK);
    assert_int_equal(ur_plan_orbax_custom_metadata(&cm, ck, 0, &err), UR_OK);
    assert_string_equal(cm, "{\"scan_layers\": false}");
    ur_free(cm);
    assert_int_equal(ur_plan_orbax_custom_metadata(&cm, ck, 1, &err), UR_OK);
    assert_string_equal(cm, "{\"scan_layers\": true}");
    ur_free(cm);
    for (long n = 0;; n++) { /* every allocation failure is UR_ENOMEM, nothing leaks */
        ur_alloc_fail_after(n);
        int rc = ur_plan_orbax_custom_metadata(&cm, ck, 0, &err);
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            ur_free(cm);
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
    }
    ur_orbax_ckpt_close(ck);
}

/* ---- ur_plan_lora_units ------------------------------------------------------------------- */

static void put(const char *rel, const char *text)
{
    char *p = ur_path_joinf(scratch, "%s", rel);
    char *slash = strrchr(p, '/');
    *slash = '\0';
    assert_int_equal(ur_fs_mkdirs(p, NULL), UR_OK);
    *slash = '/';
    assert_int_equal(ur_fs_write_file(p, text, strlen(text), NULL), UR_OK);
    ur_free(p);
}

static void test_job_run__lora_units_sorted_ids_only_with_config(void **state)
{
    ur_plan_units u;
    ur_err err;
    char *dir = ur_path_joinf(scratch, "adapters");
    static const char *const want[] = {
        "base/0",
        "loras/a/0",
        "loras/a/adapter_config.json",
        "loras/b/0",
        "loras/b/adapter_config.json",
    };
    (void)state;

    put("adapters/b/adapter_config.json", "{}");
    put("adapters/a/adapter_config.json", "{}");
    put("adapters/c/notes.txt", "no config: not an adapter");
    put("adapters/.hidden/adapter_config.json", "{}");
    assert_int_equal(ur_plan_lora_units(&u, dir, &err), UR_OK);
    assert_int_equal(u.n_ids, 2);
    assert_string_equal(u.ids[0], "a");
    assert_string_equal(u.ids[1], "b");
    assert_int_equal(u.n_units, 5);
    for (size_t i = 0; i < u.n_units; i++) {
        assert_string_equal(u.units[i], want[i]);
    }
    ur_plan_lora_units_dispose(&u);

    /* no adapters directory given: the step "0" alone */
    assert_int_equal(ur_plan_lora_units(&u, "", &err), UR_OK);
    assert_int_equal(u.n_ids, 0);
    assert_int_equal(u.n_units, 1);
    assert_string_equal(u.units[0], "0");
    ur_plan_lora_units_dispose(&u);
    ur_free(dir);
}

static void test_job_run__lora_units_missing_or_empty_is_not_found(void **state)
{
    ur_plan_units u;
    ur_err err;
    char *missing = ur_path_joinf(scratch, "none");
    char *empty = ur_path_joinf(scratch, "empty");
    (void)state;

    ur_err_clear(&err);
    assert_int_equal(ur_plan_lora_units(&u, missing, &err), UR_ENOTFOUND);
    assert_string_equal(err.where, missing);
    ur_plan_lora_units_dispose(&u);
    put("empty/x/readme", "");
    ur_err_clear(&err);
    assert_int_equal(ur_plan_lora_units(&u, empty, &err), UR_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no LoRA adapter"));
    ur_plan_lora_units_dispose(&u);
    ur_free(missing);
    ur_free(empty);
}

/* ---- ur_verify_config_read ----------------------------------------------------------- */

static void test_job_run__verify_config_from_overrides_or_config(void **state)
{
    static const char *const good[] = {"param_scan_axis=2", "base_num_decoder_layers=7"};
    static const char *const unknown[] = {"scan_layers=1"};
    static const char *const not_int[] = {"param_scan_axis=x"};
    static const char *const with_cfg[] = {"base_num_decoder_layers=5"};
    static const char *const bad_key[] = {"no_such_key=5"};
    ur_verify_opts vo;
    ur_err err;
    (void)state;

    ur_verify_opts_init(&vo);
    assert_int_equal(ur_verify_config_read(&vo, NULL, good, 2, NULL, &err), UR_OK);
    assert_int_equal(vo.param_scan_axis, 2);
    assert_int_equal(vo.num_decoder_layers, 7);
    assert_int_equal(ur_verify_config_read(&vo, NULL, unknown, 1, NULL, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "without a config"));
    assert_int_equal(ur_verify_config_read(&vo, NULL, not_int, 1, NULL, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "not an integer"));

    ur_verify_opts_init(&vo);
    assert_int_equal(ur_verify_config_read(&vo, EXAMPLE "/unroll.yml", with_cfg, 1, NULL, &err),
                     UR_OK);
    assert_int_equal(vo.param_scan_axis, 1);
    assert_int_equal(vo.num_decoder_layers, 5);
    /* with a config, an override is read as the config reads it: unknown keys are refused */
    assert_int_equal(ur_verify_config_read(&vo, EXAMPLE "/unroll.yml", bad_key, 1, NULL, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "no_such_key"));
}

/* ---- ur_job_run -------------------------------------------------------------------------- */

typedef struct {
    int plans, begins;
    size_t leaves_in;
    char what[32];
} seen;

static void on_plan(void *ctx, const char *what, const ur_plan *plan, const ur_plan_leaf *leaves)
{
    seen *s = ctx;
    s->plans++;
    s->leaves_in = plan->summary.leaves_in;
    snprintf(s->what, sizeof s->what, "%s", what);
    assert_non_null(leaves);
}

static void on_begin(void *ctx, const char *what)
{
    seen *s = ctx;
    s->begins++;
    snprintf(s->what, sizeof s->what, "%s", what);
}

static void run_example(ur_run_report *rep, ur_run_opts *o, seen *s, const char **ov, size_t n,
                        int want)
{
    ur_err err;
    memset(o, 0, sizeof *o);
    memset(s, 0, sizeof *s);
    o->config.config_path = EXAMPLE "/unroll.yml";
    o->config.overrides = ov;
    o->config.n_overrides = n;
    o->on_plan = on_plan;
    o->on_begin = on_begin;
    o->ctx = s;
    o->threads = 2;
    assert_int_equal(ur_job_run(rep, o, &err), want);
}

static void test_job_run__dry_run_hands_the_plan_over(void **state)
{
    char *out = ur_path_joinf(scratch, "dry2");
    char *arg = ur_path_joinf("base_output_directory=", "%s", out);
    const char *ov[] = {"load_full_state_path=" EXAMPLE_ITEMS, arg, "run_name=r",
                        "force_unroll=true"};
    ur_run_opts o;
    ur_run_report rep;
    seen s;
    ur_err err;
    (void)state;

    memset(&o, 0, sizeof o);
    memset(&s, 0, sizeof s);
    o.config.config_path = EXAMPLE "/unroll.yml";
    o.config.overrides = ov;
    o.config.n_overrides = 4;
    o.dry_run = 1;
    o.on_plan = on_plan;
    o.on_begin = on_begin;
    o.ctx = &s;
    assert_int_equal(ur_job_run(&rep, &o, &err), UR_OK);
    assert_int_equal(s.plans, 1);
    assert_int_equal(s.begins, 0);
    assert_string_equal(s.what, "base");
    assert_true(s.leaves_in > 0);
    assert_null(rep.dest);
    assert_false(ur_fs_exists(out));
    ur_job_run_report_dispose(&rep);
    ur_free(arg);
    ur_free(out);
}

static void test_job_run__run_publishes_and_reports(void **state)
{
    char *out = ur_path_joinf(scratch, "real");
    char *arg = ur_path_joinf("base_output_directory=", "%s", out);
    char *step = ur_path_joinf(out, "r/checkpoints/0/items");
    const char *ov[] = {"load_full_state_path=" EXAMPLE_ITEMS, arg, "run_name=r",
                        "force_unroll=true"};
    ur_run_opts o;
    ur_run_report rep;
    seen s;
    (void)state;

    run_example(&rep, &o, &s, ov, 4, UR_OK);
    assert_non_null(rep.dest);
    assert_non_null(strstr(rep.dest, "/r/checkpoints"));
    assert_true(rep.total.tensors_out > rep.total.tensors_in);
    assert_true(rep.total.bytes_out > 0);
    assert_true(ur_fs_is_dir(step));
    { /* the output says where MaxText reads it back that its layers are unrolled */
        char *meta = ur_path_joinf(out, "r/checkpoints/0/_CHECKPOINT_METADATA");
        ur_buf b;
        ur_buf_init(&b, 0);
        assert_int_equal(ur_fs_read_file(&b, meta, 1 << 20, NULL), UR_OK);
        assert_int_equal(ur_buf_append_byte(&b, 0, NULL), UR_OK);
        assert_non_null(
            strstr((const char *)b.data, "\"custom_metadata\": {\"scan_layers\": false}}"));
        ur_buf_dispose(&b);
        ur_free(meta);
    }
    ur_job_run_report_dispose(&rep);
    ur_free(step);
    ur_free(arg);
    ur_free(out);
}

static void test_job_run__bad_settings_fail_before_anything_is_made(void **state)
{
    char *out = ur_path_joinf(scratch, "bad");
    char *arg = ur_path_joinf("base_output_directory=", "%s", out);
    const char *both[] = {"load_full_state_path=" EXAMPLE_ITEMS, "load_parameters_path=/x", arg};
    const char *none[] = {arg};
    const char *unknown[] = {"no_such_key=1", arg};
    static volatile sig_atomic_t stop = 1;
    const char *cancel[] = {"load_full_state_path=" EXAMPLE_ITEMS, arg, "run_name=r",
                            "force_unroll=true"};
    ur_run_opts o;
    ur_run_report rep;
    seen s;
    ur_err err;
    (void)state;

    run_example(&rep, &o, &s, both, 3, UR_EINVAL);
    ur_job_run_report_dispose(&rep);
    run_example(&rep, &o, &s, none, 1, UR_EINVAL);
    ur_job_run_report_dispose(&rep);
    run_example(&rep, &o, &s, unknown, 2, UR_EINVAL);
    ur_job_run_report_dispose(&rep);
    assert_false(ur_fs_exists(out));

    /* cancelled: nothing published, and the earlier state (nothing) is kept */
    memset(&o, 0, sizeof o);
    o.config.config_path = EXAMPLE "/unroll.yml";
    o.config.overrides = cancel;
    o.config.n_overrides = 4;
    o.cancel = &stop;
    ur_err_clear(&err);
    assert_int_equal(ur_job_run(&rep, &o, &err), UR_ECANCELED);
    assert_non_null(strstr(err.msg, "interrupted"));
    ur_job_run_report_dispose(&rep);
    {
        char *step = ur_path_joinf(out, "r/checkpoints/0");
        assert_false(ur_fs_exists(step));
        ur_free(step);
    }
    ur_free(arg);
    ur_free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_run__input_is_one_of_the_two_paths),
        cmocka_unit_test(test_job_run__orbax_leaves_index_for_index),
        cmocka_unit_test(test_job_run__custom_metadata_states_the_layers),
        cmocka_unit_test(test_job_run__lora_units_sorted_ids_only_with_config),
        cmocka_unit_test(test_job_run__lora_units_missing_or_empty_is_not_found),
        cmocka_unit_test(test_job_run__verify_config_from_overrides_or_config),
        cmocka_unit_test(test_job_run__dry_run_hands_the_plan_over),
        cmocka_unit_test(test_job_run__run_publishes_and_reports),
        cmocka_unit_test(test_job_run__bad_settings_fail_before_anything_is_made),
    };
    return cmocka_run_group_tests_name("job_run", tests, setup, teardown);
}
