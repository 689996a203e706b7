/* Test-only driver for the config room, used by tests/interop/test_config.py.
 *
 *   config_tool config <config.yml> [key=value ...]
 *
 * prints {"config": <merged config>, "settings": <resolved settings>} as JSON on stdout. The
 * layout families' own keys are checked as the planner checks them (ur_plan_validate_keys),
 * and first_num_dense_layers, one of them, is printed among the settings as the config has it.
 * On failure it prints "error: <message>" on stderr and exits 2 for a bad configuration
 * (UR_EINVAL, as MaxText's pyconfig exits 2), 3 for I/O errors, 1 otherwise. */
#include "config/config_impl.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/plan.h"

#include <stdio.h>
#include <string.h>

extern char **environ;

static int emit_str(ur_buf *b, const char *key, const char *v, ur_err *err)
{
    ur_yval s = {0};
    int rc = ur_buf_printf(b, err, "\"%s\": ", key);
    s.kind = UR_Y_STR;
    s.s = (char *)(uintptr_t)v;
    if (rc == UR_OK) {
        rc = ur_config_yaml_emit_json(b, &s, err);
    }
    return rc == UR_OK ? ur_buf_append_str(b, ", ", err) : rc;
}

static int emit_settings(ur_buf *b, const ur_config *cfg, const ur_settings *s, ur_err *err)
{
    int64_t dense = 0; /* MaxText's default when the config lacks it */
    int rc = ur_config_get_int(cfg, "first_num_dense_layers", &dense, err);
    rc = rc == UR_ENOTFOUND ? UR_OK : rc;
    if (rc == UR_OK) {
        rc = ur_buf_append_str(b, "{", err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "load_full_state_path", s->load_full_state_path, err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "load_parameters_path", s->load_parameters_path, err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "lora_input_adapters_path", s->lora_input_adapters_path, err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "base_output_directory", s->base_output_directory, err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "run_name", s->run_name, err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "checkpoint_dir", s->checkpoint_dir, err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "model_name", s->model_name, err);
    }
    if (rc == UR_OK) {
        rc = emit_str(b, "decoder_block", s->decoder_block, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(
            b, err,
            "\"force_unroll\": %s, \"scan_layers\": %s, \"pure_nnx\": %s, \"enable_nnx\": %s, "
            "\"enable_checkpointing\": %s, \"checkpoint_storage_use_ocdbt\": %s, "
            "\"checkpoint_storage_use_zarr3\": %s, "
            "\"checkpoint_storage_target_data_file_size_bytes\": %lld, "
            "\"param_scan_axis\": %lld, \"global_parameter_scale\": %lld, "
            "\"base_num_decoder_layers\": %lld, \"num_decoder_layers\": %lld, "
            "\"first_num_dense_layers\": %lld, \"logical_axis_rules\": [",
            s->force_unroll ? "true" : "false", s->scan_layers ? "true" : "false",
            s->pure_nnx ? "true" : "false", s->enable_nnx ? "true" : "false",
            s->enable_checkpointing ? "true" : "false", s->use_ocdbt ? "true" : "false",
            s->use_zarr3 ? "true" : "false", (long long)s->target_data_file_size,
            (long long)s->param_scan_axis, (long long)s->global_parameter_scale,
            (long long)s->base_num_decoder_layers, (long long)s->num_decoder_layers,
            (long long)dense);
    }
    for (size_t i = 0; rc == UR_OK && i < s->n_axis_rules; i++) {
        const ur_axis_rule *r = &s->axis_rules[i];
        rc = ur_buf_printf(b, err, "%s[\"%s\", [", i ? ", " : "", r->name);
        for (size_t j = 0; rc == UR_OK && j < r->n_mesh; j++) {
            rc = ur_buf_printf(b, err, "%s\"%s\"", j ? ", " : "", r->mesh[j]);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_str(b, "]]", err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(b, "]}", err);
    }
    return rc;
}

static int exit_status(int rc)
{
    switch (rc) {
    case UR_EINVAL:
        return 2;
    case UR_EIO:
    case UR_ENOTFOUND:
        return 3;
    default:
        return 1;
    }
}

int main(int argc, char **argv)
{
    ur_config_opts opts;
    ur_config *cfg = NULL;
    ur_err err;
    ur_buf b;
    int rc;
    if (argc < 3 || strcmp(argv[1], "config") != 0) {
        fprintf(stderr, "usage: config_tool config <config.yml> [key=value ...]\n");
        return 2;
    }
    memset(&opts, 0, sizeof opts);
    ur_err_clear(&err);
    opts.config_path = argv[2];
    opts.overrides = (const char *const *)(argv + 3);
    opts.n_overrides = (size_t)(argc - 3);
    opts.envp = (const char *const *)environ;
    rc = ur_config_load(&cfg, &opts, &err);
    if (rc == UR_OK) {
        rc = ur_plan_validate_keys(ur_config_settings(cfg), &err);
    }
    if (rc < 0) {
        fprintf(stderr, "error: %s\n", err.msg);
        ur_config_free(cfg);
        return exit_status(rc);
    }
    ur_buf_init(&b, 0);
    rc = ur_buf_append_str(&b, "{\"config\": ", &err);
    if (rc == UR_OK) {
        rc = ur_config_yaml_emit_json(&b, ur_config__root(cfg), &err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(&b, ", \"settings\": ", &err);
    }
    if (rc == UR_OK) {
        rc = emit_settings(&b, cfg, ur_config_settings(cfg), &err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_str(&b, "}\n", &err);
    }
    if (rc == UR_OK) {
        fwrite(b.data, 1, b.len, stdout);
    } else {
        fprintf(stderr, "error: %s\n", err.msg);
    }
    ur_buf_dispose(&b);
    ur_config_free(cfg);
    return rc == UR_OK ? 0 : exit_status(rc);
}
