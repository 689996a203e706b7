/* One conversion, `unroll base.yml key=value ...` without its command line: the input the
 * settings name, the units to publish, each unit converted into the staging directory, then
 * all of them published at once (include/unroll/plan_run.h, unroll/orbax_publish.h). */
#include "unroll/plan_run.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/orbax_publish.h"

#include <stdio.h>
#include <string.h>

int ur_plan_run_input(const char **path_out, ur_plan_input *kind_out, const ur_settings *s,
                      int dry_run, ur_err *err)
{
    if (s->load_full_state_path[0] != '\0' && s->load_parameters_path[0] != '\0') {
        return ur_err_set(err, UR_EINVAL,
                          "set only one of load_full_state_path and load_parameters_path");
    }
    if (s->load_full_state_path[0] != '\0') {
        *path_out = s->load_full_state_path;
        *kind_out = UR_PLAN_INPUT_FULL_STATE;
    } else if (s->load_parameters_path[0] != '\0') {
        *path_out = s->load_parameters_path;
        *kind_out = UR_PLAN_INPUT_PARAMS;
    } else {
        return ur_err_set(err, UR_EINVAL,
                          "no input: set load_full_state_path=<training checkpoint items dir> "
                          "(or load_parameters_path=)");
    }
    if (!s->enable_checkpointing && !dry_run) {
        return ur_err_set(err, UR_EINVAL,
                          "enable_checkpointing=false: MaxText would write no checkpoint");
    }
    return UR_OK;
}

static int check_cancel(const ur_run_opts *o, ur_err *err)
{
    return o->cancel != NULL && *o->cancel ? ur_err_set(err, UR_EINTERNAL, "interrupted") : UR_OK;
}

/* `in_path` converted into the step directory `step_dir`, created below `below` (the
 * staging directory, which must exist); in a dry run only its plan, handed to on_plan. */
static int convert(const char *in_path, const char *step_dir, const char *below,
                   ur_plan_input kind, const ur_settings *s, const ur_run_opts *o,
                   const char *what, ur_exec_stats *total, ur_err *err)
{
    ur_orbax_ckpt *ck = NULL;
    ur_plan *plan = NULL;
    ur_orbax_writer *w = NULL;
    ur_plan_leaves leaves = {0};
    ur_orbax_write_opts wo;
    ur_exec_opts eo;
    ur_exec_stats st;
    int rc;

    rc = ur_orbax_ckpt_open(&ck, in_path, 0, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_plan_orbax_leaves(&leaves, ck, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_plan_build(&plan, leaves.leaves, leaves.n, s, kind, err);
    if (rc < 0) {
        ur_err_wrap(err, "%s", in_path);
        goto out;
    }
    if (o->dry_run) {
        if (o->on_plan != NULL) {
            o->on_plan(o->ctx, what, plan, leaves.leaves);
        }
        goto out;
    }

    /* The output's uncompressed size is an upper bound (zstd rarely shrinks trained bf16
     * weights by much, so a smaller guess would let a run fill the disk and fail late);
     * arrays of the fill value compress to almost nothing but are refused all the same when
     * they would not fit as stored uncompressed, so a few-KB input declaring a 1 TB array
     * cannot fill the disk. */
    rc = ur_fs_space_check(step_dir, plan->summary.bytes_out, err);
    if (rc < 0) {
        goto out;
    }
    ur_orbax_write_opts_init(&wo);
    wo.use_ocdbt = s->use_ocdbt;
    wo.use_zarr3 = s->use_zarr3;
    wo.create_below = below;
    /* Reproducible data-file names: the same input gives the same output bytes. */
    wo.ocdbt.seed = 0x756e726f6c6c0001ull;
    if (s->target_data_file_size > 0) {
        wo.ocdbt.target_data_file_size = (uint64_t)s->target_data_file_size;
    }
    rc = ur_orbax_writer_create(&w, step_dir, &wo, err);
    if (rc < 0) {
        goto out;
    }
    memset(&eo, 0, sizeof eo);
    eo.threads = o->threads;
    eo.memory_limit = o->memory_limit;
    eo.cancel = o->cancel;
    eo.progress = o->progress;
    eo.progress_ctx = o->ctx;
    if (o->on_begin != NULL) {
        o->on_begin(o->ctx, what);
    }
    rc = ur_plan_exec_run(plan, ck, w, &eo, &st, err);
    if (rc < 0) {
        goto out;
    }
    /* The input is read: free it before the commit, the run's peak of memory. */
    ur_plan_free(plan);
    plan = NULL;
    ur_plan_orbax_leaves_dispose(&leaves);
    ur_orbax_ckpt_close(ck);
    ck = NULL;
    rc = ur_orbax_writer_commit(w, err);
    w = NULL; /* commit frees the writer either way */
    if (rc < 0) {
        goto out;
    }
    total->tensors_in += st.tensors_in;
    total->tensors_out += st.tensors_out;
    total->bytes_in += st.bytes_in;
    total->bytes_out += st.bytes_out;
    total->threads = st.threads;
out:
    ur_orbax_writer_abort(w);
    ur_plan_free(plan);
    ur_plan_orbax_leaves_dispose(&leaves);
    ur_orbax_ckpt_close(ck);
    return rc;
}

/* Copy a small file byte for byte (adapter_config.json), read beneath its own directory
 * (no link out of the adapter) and never given more permissions than it has. */
static int copy_file(const char *from, const char *to, ur_err *err)
{
    const char *slash = strrchr(from, '/');
    char *dir = slash != NULL ? ur_strndup(from, (size_t)(slash - from)) : ur_strdup(".");
    int rc = dir != NULL ? ur_fs_copy_file_beneath(dir, slash != NULL ? slash + 1 : from, to,
                                                   16u << 20, err)
                         : ur_err_oom(err);
    ur_free(dir);
    return rc;
}

/* Each adapter `<adapters>/<id>/0/items` into the staged unit 1 + 2i, its adapter_config.json
 * copied into unit 2 + 2i (in a dry run: only the plans). */
static int convert_loras(const char *adapters, const ur_plan_units *u,
                         const ur_orbax_publish *pub, const ur_settings *s, const ur_run_opts *o,
                         ur_exec_stats *total, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < u->n_ids && rc == UR_OK; i++) {
        char *in = ur_path_joinf(adapters, "%s/0/items", u->ids[i]);
        char *cfg_in = ur_path_joinf(adapters, "%s/adapter_config.json", u->ids[i]);
        const char *out = pub != NULL ? ur_orbax_publish_staged(pub, 1 + 2 * i) : NULL;
        char what[300];
        snprintf(what, sizeof what, "lora %s", u->ids[i]);
        rc = check_cancel(o, err);
        if (rc == UR_OK && (in == NULL || cfg_in == NULL)) {
            rc = ur_err_oom(err);
        } else if (rc == UR_OK) {
            rc = convert(in, out, pub != NULL ? ur_orbax_publish_staging(pub) : NULL,
                         UR_PLAN_INPUT_LORA, s, o, what, total, err);
            if (rc == UR_OK && pub != NULL) {
                rc = copy_file(cfg_in, ur_orbax_publish_staged(pub, 2 + 2 * i), err);
            }
        }
        ur_free(in);
        ur_free(cfg_in);
    }
    return rc;
}

void ur_plan_run_report_dispose(ur_run_report *rep)
{
    ur_free(rep->dest);
    rep->dest = NULL;
}

int ur_plan_run(ur_run_report *rep, const ur_run_opts *o, ur_err *err)
{
    ur_config *cfg = NULL;
    const ur_settings *s;
    ur_orbax_publish *pub = NULL;
    ur_plan_units units;
    const char *in_path = NULL, *inputs[2];
    size_t n_inputs = 1;
    ur_plan_input kind = UR_PLAN_INPUT_FULL_STATE;
    int rc;

    memset(rep, 0, sizeof *rep);
    memset(&units, 0, sizeof units);
    rc = ur_plan_config_load(&cfg, &o->config, err);
    if (rc < 0) {
        goto out;
    }
    s = ur_plan_config_settings(cfg);
    rc = ur_plan_run_input(&in_path, &kind, s, o->dry_run, err);
    if (rc < 0) {
        goto out;
    }
    inputs[0] = in_path;
    if (s->lora_input_adapters_path[0] != '\0') {
        inputs[n_inputs++] = s->lora_input_adapters_path;
    }
    rc = ur_plan_lora_units(&units, s->lora_input_adapters_path, err);
    if (rc < 0) {
        goto out;
    }

    /* Only the units are replaced (checkpoint_dir/0, or base/0 and loras/<id>/...); the
     * lock, the staging directory and the overlap rules: unroll/orbax_publish.h. */
    if (o->dry_run) {
        rc = ur_orbax_publish_check(s->checkpoint_dir, units.units, units.n_units, inputs,
                                    n_inputs, err);
    } else {
        rc = ur_orbax_publish_begin(&pub, s->checkpoint_dir, units.units, units.n_units,
                                    inputs, n_inputs, err);
        if (rc == UR_OK) {
            rep->dest = ur_strdup(ur_orbax_publish_dest(pub));
            rc = rep->dest != NULL ? UR_OK : ur_err_oom(err);
        }
    }
    if (rc == UR_OK) {
        rc = convert(in_path, pub != NULL ? ur_orbax_publish_staged(pub, 0) : NULL,
                     pub != NULL ? ur_orbax_publish_staging(pub) : NULL, kind, s, o, "base",
                     &rep->total, err);
    }
    if (rc == UR_OK && units.n_ids > 0) {
        rc = convert_loras(s->lora_input_adapters_path, &units, pub, s, o, &rep->total, err);
    }
    if (rc == UR_OK && pub != NULL) {
        rc = ur_orbax_publish_commit(pub, o->cancel, err);
        pub = NULL; /* commit frees it either way */
    }
out:
    ur_orbax_publish_abort(pub); /* after a failure: staging, lock, created directories */
    ur_plan_lora_units_dispose(&units);
    ur_plan_config_free(cfg);
    return rc;
}
