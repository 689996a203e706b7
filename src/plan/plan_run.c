/* One conversion, `unroll base.yml key=value ...` without its command line: the input the
 * settings name, the units to publish, each unit converted into the staging directory, then
 * all of them published at once (include/unroll/plan_run.h, unroll/orbax_publish.h). */
#include "unroll/plan_run.h"

#include "plan_run_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/orbax_publish.h"
#include "unroll/orbax_share.h"
#include "unroll/orbax_upload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Default worker count when the input is on an object store (see convert). */
#define REMOTE_THREADS 16

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

typedef struct {
    ur_orbax_writer *w;
    ur_orbax_share *share;
} share_piece_ctx;

/* ur_exec_opts.piece of a share: snapshot its database, then record the resume point. */
static int share_piece(void *ctx, uint64_t next_item, ur_err *err)
{
    share_piece_ctx *p = ctx;
    int rc = ur_orbax_writer_snapshot(p->w, err);
    return rc == UR_OK ? ur_orbax_share_save_progress(p->share, next_item, err) : rc;
}

/* The share's settings of the writer and the executor (sh NULL: an ordinary run). */
static void share_opts(const ur_run_share *sh, ur_orbax_write_opts *wo, ur_exec_opts *eo,
                       share_piece_ctx *piece)
{
    if (sh == NULL) {
        return;
    }
    if (wo != NULL) {
        wo->share_index = sh->index;
        wo->share_meta_dir = sh->meta_dir;
        wo->ocdbt.seed += (uint64_t)(sh->index + 1) << 16; /* distinct names */
        wo->share_resume = sh->resume_from > 0;
        return;
    }
    eo->process_count = sh->count;
    eo->process_index = sh->index;
    eo->slab_budget = sh->slab_budget;
    eo->piece = share_piece;
    eo->piece_ctx = piece;
    eo->piece_bytes = sh->commit_every;
    eo->resume_from = sh->resume_from;
}

/* `in_path` converted into the step directory `step_dir`, created below `below` (the
 * staging directory, which must exist); in a dry run only its plan, handed to on_plan. With
 * `sh`, only a share of it (plan_run_impl.h). */
int ur_plan_run_convert(const char *in_path, const char *step_dir, const char *below,
                        ur_plan_input kind, const ur_settings *s, const ur_run_opts *o,
                        const ur_run_share *sh, const char *what, ur_exec_stats *total,
                        ur_err *err)
{
    share_piece_ctx piece;
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
    ur_alloc_trim(); /* what opening the input's arrays on every core freed */
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
    share_opts(sh, &wo, NULL, NULL);
    rc = ur_orbax_writer_create(&w, step_dir, &wo, err);
    if (rc < 0) {
        goto out;
    }
    memset(&eo, 0, sizeof eo);
    eo.threads = o->threads;
    /* From an object store each worker waits on one request at a time: more workers keep
     * more requests in flight (the HTTP layer caps them, UNROLL_HTTP_MAX_IN_FLIGHT). */
    if (eo.threads == 0 && ur_kvstore_location_is_remote(in_path)) {
        eo.threads = REMOTE_THREADS;
    }
    eo.memory_limit = o->memory_limit;
    eo.cancel = o->cancel;
    eo.progress = o->progress;
    eo.progress_ctx = o->ctx;
    if (sh != NULL) {
        piece.w = w;
        piece.share = sh->share;
        share_opts(sh, NULL, &eo, &piece);
    }
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
    ur_alloc_trim();
    rc = ur_orbax_writer_commit(w, err);
    w = NULL; /* commit frees the writer either way */
    ur_alloc_trim();
    if (rc < 0) {
        goto out;
    }
    total->tensors_in += st.tensors_in;
    total->tensors_out += st.tensors_out;
    total->bytes_in += st.bytes_in;
    total->bytes_out += st.bytes_out;
    total->threads = st.threads;
    total->share_bytes += st.share_bytes;
    total->all_bytes += st.all_bytes;
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
static int convert_loras(const char *adapters, const ur_plan_units *u, const ur_orbax_publish *pub,
                         const ur_settings *s, const ur_run_opts *o, ur_exec_stats *total,
                         ur_err *err)
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
            rc = ur_plan_run_convert(in, out, pub != NULL ? ur_orbax_publish_staging(pub) : NULL,
                                     UR_PLAN_INPUT_LORA, s, o, NULL, what, total, err);
            if (rc == UR_OK && pub != NULL) {
                rc = copy_file(cfg_in, ur_orbax_publish_staged(pub, 2 + 2 * i), err);
            }
        }
        ur_free(in);
        ur_free(cfg_in);
    }
    return rc;
}

/* Locations: every path the run takes is local, s3:// or gs:// (anything else "scheme://" is
 * refused, never made a local directory). Returns the kind of the output location. */
static int check_locations(const ur_settings *s, const char *in_path, ur_err *err)
{
    int rc = ur_kvstore_location_kind(in_path, err);
    if (rc >= 0 && s->lora_input_adapters_path[0] != '\0') {
        rc = ur_kvstore_location_kind(s->lora_input_adapters_path, err);
        if (rc > 0) {
            rc = ur_err_set(err, UR_EUNSUPPORTED,
                            "%s: LoRA adapters are read from local directories only",
                            s->lora_input_adapters_path);
        }
    }
    if (rc >= 0) {
        rc = ur_kvstore_location_kind(s->checkpoint_dir, err);
    }
    if (rc > 0 && s->lora_input_adapters_path[0] != '\0') {
        rc = ur_err_set(err, UR_EUNSUPPORTED,
                        "%s: LoRA output is written to local directories only", s->checkpoint_dir);
    }
    return rc;
}

/* For an object-store output: the local tree the run converts into before uploading
 * ($TMPDIR/unroll-upload.XXXXXX; its checkpoints/ stands for the remote checkpoint dir). */
static int make_upload_root(char **root_out, char **ckdir_out, ur_err *err)
{
    const char *tmp = getenv("TMPDIR");
    char *root = ur_path_join(tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp",
                              "unroll-upload.XXXXXX");
    if (root == NULL) {
        return ur_err_oom(err);
    }
    if (mkdtemp(root) == NULL) {
        int rc = ur_err_set_os(err, UR_EIO, errno, root, "cannot create the staging directory");
        ur_free(root);
        return rc;
    }
    *root_out = root;
    *ckdir_out = ur_path_join(root, "checkpoints");
    return *ckdir_out != NULL ? UR_OK : ur_err_oom(err);
}

/* checkpoint_dir without its trailing slashes, then "/" + unit (unit NULL: nothing more). */
static char *remote_unit(const char *checkpoint_dir, const char *unit)
{
    size_t n = strlen(checkpoint_dir), m = unit != NULL ? strlen(unit) : 0;
    char *out;
    while (n > 0 && checkpoint_dir[n - 1] == '/') {
        n--;
    }
    out = ur_malloc(n + m + 2);
    if (out != NULL) {
        memcpy(out, checkpoint_dir, n);
        out[n] = '\0';
        if (unit != NULL) {
            out[n] = '/';
            memcpy(out + n + 1, unit, m + 1);
        }
    }
    return out;
}

/* An object-store destination: refused when it overlaps the input or already holds objects
 * (unless o->replace); outside a dry run, the local tree to convert into (*up_root, whose
 * checkpoints/ is *out_dir). */
static int remote_begin(const ur_settings *s, const char *in_path, const ur_run_opts *o,
                        char **up_dest, char **up_root, char **up_ckdir, ur_err *err)
{
    int rc;
    *up_dest = remote_unit(s->checkpoint_dir, "0");
    if (*up_dest == NULL) {
        return ur_err_oom(err);
    }
    if (ur_kvstore_location_is_remote(in_path) &&
        (strncmp(in_path, *up_dest, strlen(*up_dest)) == 0 ||
         strncmp(*up_dest, in_path, strlen(in_path)) == 0)) {
        return ur_err_set(err, UR_EINVAL, "the output %s and the input %s overlap", *up_dest,
                          in_path);
    }
    /* refused before any work: a destination that holds objects (unless --replace) */
    rc = ur_orbax_upload_check_dest(*up_dest, o->replace, err);
    if (rc == UR_OK && !o->dry_run) {
        rc = make_upload_root(up_root, up_ckdir, err);
    }
    return rc;
}

/* The finished local step, uploaded in Orbax's commit-file order. */
static int remote_finish(const char *up_ckdir, const char *up_dest, const ur_run_opts *o,
                         ur_err *err)
{
    ur_orbax_upload_opts uo;
    char *local_step = ur_path_join(up_ckdir, "0");
    int rc;
    memset(&uo, 0, sizeof uo);
    uo.replace = o->replace;
    uo.threads = o->threads > 0 ? (unsigned)o->threads * 4 : 16;
    rc = local_step != NULL ? ur_orbax_upload(local_step, up_dest, &uo, o->cancel, err)
                            : ur_err_oom(err);
    ur_free(local_step);
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
    const char *out_dir;
    char *up_root = NULL, *up_ckdir = NULL, *up_dest = NULL;
    int remote_out = 0;
    size_t n_inputs = 0;
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
    rc = check_locations(s, in_path, err);
    if (rc < 0) {
        goto out;
    }
    remote_out = rc != UR_LOC_LOCAL;
    out_dir = s->checkpoint_dir;
    /* the overlap rules of orbax_publish.h concern local paths */
    if (!ur_kvstore_location_is_remote(in_path)) {
        inputs[n_inputs++] = in_path;
    }
    if (s->lora_input_adapters_path[0] != '\0') {
        inputs[n_inputs++] = s->lora_input_adapters_path;
    }
    if (ur_plan_multi_wanted(o, s)) {
        /* a share of a multi-process run, or a resumable one (plan_multi.c) */
        if (ur_kvstore_location_is_remote(in_path)) {
            rc = ur_err_set(err, UR_EUNSUPPORTED,
                            "%s: a multi-process or resumable run (--process-count, --resume) "
                            "reads a local directory only, not s3:// or gs://",
                            in_path);
        } else if (remote_out) {
            rc = ur_plan_multi_run_remote(rep, o, s, in_path, kind, err);
        } else {
            rc = ur_plan_multi_run(rep, o, s, in_path, kind, inputs, n_inputs, err);
        }
        goto out;
    }
    if (remote_out) {
        rc = remote_begin(s, in_path, o, &up_dest, &up_root, &up_ckdir, err);
        if (rc < 0) {
            goto out;
        }
        out_dir = up_ckdir;
    }
    rc = ur_plan_lora_units(&units, s->lora_input_adapters_path, err);
    if (rc < 0) {
        goto out;
    }

    /* Only the units are replaced (checkpoint_dir/0, or base/0 and loras/<id>/...); the
     * lock, the staging directory and the overlap rules: unroll/orbax_publish.h. */
    if (o->dry_run) {
        rc = ur_orbax_publish_check(remote_out ? "/nonexistent/unroll-remote" : out_dir,
                                    units.units, units.n_units, inputs, n_inputs, err);
    } else {
        rc = ur_orbax_publish_begin(&pub, out_dir, units.units, units.n_units, inputs, n_inputs,
                                    err);
        if (rc == UR_OK) {
            rep->dest = remote_out ? remote_unit(s->checkpoint_dir, NULL)
                                   : ur_strdup(ur_orbax_publish_dest(pub));
            rc = rep->dest != NULL ? UR_OK : ur_err_oom(err);
        }
    }
    if (rc == UR_OK) {
        rc = ur_plan_run_convert(in_path, pub != NULL ? ur_orbax_publish_staged(pub, 0) : NULL,
                                 pub != NULL ? ur_orbax_publish_staging(pub) : NULL, kind, s, o,
                                 NULL, "base", &rep->total, err);
    }
    if (rc == UR_OK && units.n_ids > 0) {
        rc = convert_loras(s->lora_input_adapters_path, &units, pub, s, o, &rep->total, err);
    }
    if (rc == UR_OK && pub != NULL) {
        rc = ur_orbax_publish_commit(pub, o->cancel, err);
        pub = NULL; /* commit frees it either way */
    }
    if (rc == UR_OK && remote_out && !o->dry_run) {
        rc = remote_finish(up_ckdir, up_dest, o, err);
    }
out:
    ur_orbax_publish_abort(pub); /* after a failure: staging, lock, created directories */
    if (up_root != NULL) {
        (void)ur_fs_remove_tree(up_root, NULL);
    }
    ur_free(up_root);
    ur_free(up_ckdir);
    ur_free(up_dest);
    ur_plan_lora_units_dispose(&units);
    ur_plan_config_free(cfg);
    return rc;
}
