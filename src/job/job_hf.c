/* `unroll to_huggingface`: a MaxText checkpoint to a Hugging Face folder (unroll/job.h,
 * ur_job_hf_run), published as unroll's other outputs are. The conversion's plan gives the
 * unscanned parameters, the export's plan (unroll/hf.h) their tensors; the executor streams the
 * input into the export's sink, which writes the shards in place.
 *
 *   local folder: staged beside it (<out>.<pid>.unroll-tmp/<name>), checked, swapped in whole
 *                 under the destination's lock (unroll/job_publish.h: the unit "" is the
 *                 folder itself);
 *   s3://, gs://: claimed (unroll/job_claim.h), staged in $TMPDIR, uploaded shards first and
 *                 the file that names the weights last (ur_hf_commit_phase). */
#include "unroll/job.h"

#include "job_impl.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/hf.h"
#include "unroll/job_claim.h"
#include "unroll/job_publish.h"
#include "unroll/job_upload.h"
#include "unroll/kvstore.h"
#include "unroll/verify.h"

#include <stdio.h>
#include <string.h>

/* A run's state, freed by run_dispose whatever the outcome. */
typedef struct {
    ur_config *cfg, *canonical_cfg;
    ur_settings s; /* the config's, force_unroll set and scan_layers the input's */
    const char *in_path;
    ur_plan_input kind;
    char *out;     /* the folder: base_output_directory, or tmp/<run_name> as MaxText's */
    ur_orbax_ckpt *ck;
    ur_plan_leaves leaves;
    ur_plan *plan;
    ur_hf_plan *hf;
    ur_job_publish *pub;
    ur_job_claim *claim;
    char *up_root; /* the local tree of an object-store output */
    char *staged;  /* the folder being written */
} hf_run;

static void run_dispose(hf_run *r)
{
    ur_job_publish_abort(r->pub);
    if (r->claim != NULL) {
        (void)ur_job_claim_release(r->claim, NULL);
    }
    if (r->up_root != NULL) {
        (void)ur_fs_remove_tree(r->up_root, NULL);
    }
    ur_free(r->up_root);
    ur_free(r->staged);
    ur_hf_plan_free(r->hf);
    ur_plan_free(r->plan);
    ur_plan_orbax_leaves_dispose(&r->leaves);
    ur_orbax_ckpt_close(r->ck);
    ur_free(r->out);
    ur_config_free(r->canonical_cfg);
    ur_config_free(r->cfg);
}

/* The folder MaxText's exporter writes: base_output_directory as given, else tmp/<run_name>. */
static int output_folder(hf_run *r, ur_err *err)
{
    const char *base = NULL;
    if (ur_config_get_str(r->cfg, "base_output_directory", &base, NULL) < 0 || base == NULL) {
        base = "";
    }
    r->out = base[0] != '\0' ? ur_strdup(base) : ur_path_joinf("tmp", "%s", r->s.run_name);
    if (r->out == NULL) {
        return ur_err_oom(err);
    }
    /* trailing slashes name the same folder */
    for (size_t n = strlen(r->out); n > 1 && r->out[n - 1] == '/'; n--) {
        r->out[n - 1] = '\0';
    }
    return ur_kvstore_location_kind(r->out, err) < 0 ? UR_EINVAL : UR_OK;
}

/* Whether the input's layers are stacked: MaxText's exporter reads it from the checkpoint
 * (verify_and_sync_scan_layers); here, from its leaves: decoder/layers (or another scanned
 * group) and no decoder/layers_<i>. */
/* 1 when g is <prefix><index> and nothing after: an unscanned layer (layers_3,
 * dense_layers_0, moe_layers_2; not DeepSeek Engram's scanned chunks, moe_layers_3_5). */
static int one_layer(const char *g, const char *prefix)
{
    size_t n = strlen(prefix), k = n;
    if (strncmp(g, prefix, n) != 0) {
        return 0;
    }
    while (g[k] >= '0' && g[k] <= '9') {
        k++;
    }
    return k > n && g[k] == '\0';
}

/* Whether the input holds stacked layers (1) or unscanned ones (0), by its decoder's names;
 * dflt when it has neither. */
static int input_scanned(const ur_plan_leaves *l, int dflt)
{
    int stacked = 0, unrolled = 0;
    for (size_t i = 0; i < l->n; i++) {
        const ur_plan_leaf *f = &l->leaves[i];
        for (size_t k = 0; k + 1 < f->path_len; k++) {
            if (strcmp(f->path[k], "decoder") != 0) {
                continue;
            }
            const char *g = f->path[k + 1];
            if (strcmp(g, "layers") == 0 || strcmp(g, "dense_layers") == 0 ||
                strcmp(g, "moe_layers") == 0 || strcmp(g, "scanned_blocks") == 0) {
                stacked = 1;
            } else if (one_layer(g, "layers_") || one_layer(g, "dense_layers_") ||
                       one_layer(g, "moe_layers_")) {
                unrolled = 1;
            }
        }
    }
    return stacked ? 1 : unrolled ? 0 : dflt;
}

/* The architecture MaxText's model file gives model_name, for the exporter's check. */
static int canonical(hf_run *r, const ur_config_opts *from, ur_err *err)
{
    ur_config_opts co = *from;
    char line[320];
    const char *ov[1];
    if (r->s.model_name[0] == '\0' || strcmp(r->s.model_name, "default") == 0) {
        return UR_OK;
    }
    snprintf(line, sizeof line, "model_name=%s", r->s.model_name);
    ov[0] = line;
    co.overrides = ov;
    co.n_overrides = 1;
    /* a model without a model file of its own has nothing to compare with */
    if (ur_config_load(&r->canonical_cfg, &co, err) != UR_OK) {
        r->canonical_cfg = NULL;
        ur_err_clear(err);
    }
    return UR_OK;
}

static int plan_export(hf_run *r, const ur_config_opts *co, uint64_t max_shard_size,
                       int override_architecture, ur_err *err)
{
    ur_hf_opts hopts;
    const char *wd = "float32";
    int rc = ur_orbax_ckpt_open(&r->ck, r->in_path, 0, err);
    if (rc == UR_OK) {
        rc = ur_plan_orbax_leaves(&r->leaves, r->ck, err);
    }
    if (rc < 0) {
        return rc;
    }
    r->s.scan_layers = input_scanned(&r->leaves, r->s.scan_layers);
    r->s.force_unroll = 1;
    rc = ur_plan_build(&r->plan, r->leaves.leaves, r->leaves.n, &r->s, r->kind, err);
    if (rc < 0) {
        return ur_err_wrap(err, "%s", r->in_path);
    }
    /* the executor keeps each parameter's dtype: the sink casts, after its arithmetic */
    for (size_t i = 0; i < r->plan->n_actions; i++) {
        if (r->plan->actions[i].out_dtype != UR_DT_INVALID) {
            r->plan->actions[i].out_dtype = r->leaves.leaves[i].dtype;
        }
    }
    memset(&hopts, 0, sizeof hopts);
    (void)ur_config_get_str(r->cfg, "weight_dtype", &wd, NULL);
    hopts.weight_dtype = ur_dtype_from_name(wd != NULL ? wd : "float32");
    hopts.max_shard_size = max_shard_size;
    hopts.override_architecture = override_architecture;
    rc = canonical(r, co, err);
    hopts.canonical = r->canonical_cfg != NULL ? ur_config_settings(r->canonical_cfg) : NULL;
    if (rc == UR_OK) {
        rc = ur_hf_plan_build(&r->hf, r->plan, r->leaves.leaves, &r->s, &hopts, err);
    }
    return rc;
}

/* The tokenizer's and processor's files of a local --hf_model_path, copied into the folder
 * (MaxText's exporter saves the tokenizer it loads from there). */
static const char *const TOKENIZER_FILES[] = {"tokenizer.json",
                                              "tokenizer_config.json",
                                              "special_tokens_map.json",
                                              "tokenizer.model",
                                              "vocab.json",
                                              "vocab.txt",
                                              "merges.txt",
                                              "added_tokens.json",
                                              "chat_template.jinja",
                                              "chat_template.json",
                                              "preprocessor_config.json",
                                              "processor_config.json",
                                              "video_preprocessor_config.json",
                                              "generation_config.json"};

static int copy_tokenizer(const char *from, const char *to, ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < sizeof TOKENIZER_FILES / sizeof TOKENIZER_FILES[0] && rc == UR_OK;
         i++) {
        char *src = ur_path_join(from, TOKENIZER_FILES[i]);
        char *dst = ur_path_join(to, TOKENIZER_FILES[i]);
        if (src == NULL || dst == NULL) {
            rc = ur_err_oom(err);
        } else if (ur_fs_exists(src)) {
            rc = ur_job_run_copy_file(src, dst, err);
        }
        ur_free(src);
        ur_free(dst);
    }
    return rc;
}

/* Where the folder is staged: beside it under its lock, or in $TMPDIR for an object store
 * (claimed first, and refused when it holds objects unless --replace). */
static int stage(hf_run *r, const ur_hf_run_opts *ho, int remote, int *replace, ur_err *err)
{
    const ur_run_opts *o = &ho->run;
    const char *inputs[2];
    const char *whole = "";
    size_t n_inputs = 0;
    int rc, took_over = 0;

    if (!remote) {
        if (ur_kvstore_location_can(r->in_path, UR_KV_IS_PATH)) {
            inputs[n_inputs++] = r->in_path;
        }
        if (ho->hf_model_path != NULL) {
            inputs[n_inputs++] = ho->hf_model_path;
        }
        rc = ur_job_publish_begin(&r->pub, r->out, &whole, 1, inputs, n_inputs, err);
        if (rc == UR_OK) {
            ur_job_publish_set_check(r->pub, ur_hf_check_folder);
            r->staged = ur_strdup(ur_job_publish_staged(r->pub, 0));
            rc = r->staged != NULL ? ur_fs_mkdirs(r->staged, err) : ur_err_oom(err);
        }
        return rc;
    }
    if (!ur_kvstore_location_can(r->in_path, UR_KV_IS_PATH) &&
        (strncmp(r->in_path, r->out, strlen(r->out)) == 0 ||
         strncmp(r->out, r->in_path, strlen(r->in_path)) == 0)) {
        return ur_err_set(err, UR_EINVAL, "the output %s and the input %s overlap", r->out,
                          r->in_path);
    }
    {
        ur_buf identity;
        ur_buf_init(&identity, 0);
        rc = ur_job_multi_run_text(&identity, 1, 0, r->in_path, o->config.config_path,
                                   o->config.overrides, o->config.n_overrides, 1, err);
        if (rc == UR_OK) {
            rc = ur_buf_printf(&identity, err, "to_huggingface\n");
        }
        if (rc == UR_OK) {
            rc = ur_job_claim_take(&r->claim, r->out, (const char *)identity.data, &took_over,
                                   err);
        }
        ur_buf_dispose(&identity);
    }
    *replace = o->replace || took_over;
    if (rc == UR_OK) {
        rc = ur_job_upload_check_dest(r->out, *replace, err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_make_temp_dir(&r->up_root, "unroll-hf", "the staging directory", err);
    }
    if (rc == UR_OK) {
        r->staged = ur_path_join(r->up_root, "folder");
        rc = r->staged != NULL ? ur_fs_mkdirs(r->staged, err) : ur_err_oom(err);
    }
    return rc;
}

/* The input streamed into the folder's shards. */
static int convert(hf_run *r, const ur_hf_run_opts *ho, ur_hf_run_report *rep, ur_err *err)
{
    const ur_run_opts *o = &ho->run;
    ur_exec_opts eo;
    ur_sink sink;
    ur_hf_summary sum;
    int rc;

    ur_hf_plan_summary(r->hf, &sum);
    rc = ur_fs_space_check(r->staged, sum.bytes, err);
    if (rc == UR_OK) {
        rc = ur_hf_sink_open(&sink, r->hf, r->staged, err);
    }
    if (rc < 0) {
        return rc;
    }
    memset(&eo, 0, sizeof eo);
    eo.threads = o->threads;
    eo.memory_limit = o->memory_limit;
    eo.cancel = o->cancel;
    eo.progress = o->progress;
    eo.progress_ctx = o->ctx;
    if (ur_kvstore_location_can(r->in_path, UR_KV_NETWORK)) {
        eo.look_ahead = ur_kvstore_read_ahead() / 4 * 3;
    }
    if (o->on_begin != NULL) {
        o->on_begin(o->ctx, "to_huggingface");
    }
    rc = ur_exec_run_sink(r->plan, r->ck, &sink, &eo, &rep->total, err);
    if (rc == UR_OK) {
        rc = sink.ops->finish(sink.self, err);
    } else {
        sink.ops->abort(sink.self);
    }
    if (rc == UR_OK) {
        rc = ur_hf_write_meta(r->hf, r->staged, err);
    }
    if (rc == UR_OK && ho->hf_model_path != NULL) {
        rc = copy_tokenizer(ho->hf_model_path, r->staged, err);
    }
    return rc;
}

static int publish(hf_run *r, const ur_hf_run_opts *ho, int remote, int replace, ur_err *err)
{
    const ur_run_opts *o = &ho->run;
    ur_job_upload_opts uo;
    int rc;
    if (!remote) {
        rc = ur_job_publish_commit(r->pub, o->cancel, err);
        r->pub = NULL; /* freed either way */
        return rc;
    }
    memset(&uo, 0, sizeof uo);
    uo.replace = replace;
    uo.threads = o->threads > 0 ? (unsigned)o->threads * 4 : 16;
    uo.phase_of = ur_hf_commit_phase;
    if (o->progress != NULL) {
        uo.progress = o->progress;
        uo.progress_ctx = o->ctx;
        if (o->on_begin != NULL) {
            o->on_begin(o->ctx, "upload");
        }
    }
    rc = ur_job_upload(r->staged, r->out, &uo, o->cancel, err);
    if (rc == UR_OK) {
        rc = ur_job_claim_release(r->claim, err);
        r->claim = NULL;
    }
    return rc;
}

int ur_job_hf_run(ur_hf_run_report *rep, const ur_hf_run_opts *ho, ur_err *err)
{
    const ur_run_opts *o = &ho->run;
    hf_run r;
    int rc, remote = 0, replace = 0;

    memset(rep, 0, sizeof *rep);
    memset(&r, 0, sizeof r);
    ur_kvstore_set_read_ahead((o->memory_limit ? o->memory_limit : UR_EXEC_DEFAULT_MEMORY) / 4);
    rc = ur_config_load(&r.cfg, &o->config, err);
    if (rc == UR_OK) {
        r.s = *ur_config_settings(r.cfg);
        rc = ur_job_run_input(&r.in_path, &r.kind, &r.s, o->dry_run, err);
    }
    if (rc == UR_OK && ur_kvstore_location_kind(r.in_path, err) < 0) {
        rc = UR_EINVAL;
    }
    if (rc == UR_OK && ho->hf_model_path != NULL && !ur_fs_is_dir(ho->hf_model_path)) {
        rc = ur_err_set(err, UR_EINVAL,
                        "--hf_model_path %s is not a local folder (unroll copies the tokenizer "
                        "from one; it does not download from the Hub)",
                        ho->hf_model_path);
    }
    if (rc == UR_OK) {
        rc = output_folder(&r, err);
        remote = rc == UR_OK && !ur_job_run_by_rename(r.out);
    }
    if (rc == UR_OK) {
        rc = plan_export(&r, &o->config, ho->max_shard_size, ho->override_architecture, err);
    }
    if (rc == UR_OK) {
        ur_hf_plan_summary(r.hf, &rep->hf);
    }
    if (rc == UR_OK && o->dry_run) {
        ur_hf_tensor_info t;
        for (size_t i = 0; ho->on_tensor != NULL && ur_hf_plan_tensor(r.hf, i, &t); i++) {
            ho->on_tensor(o->ctx, &t);
        }
        run_dispose(&r);
        return UR_OK;
    }
    if (rc == UR_OK) {
        rc = stage(&r, ho, remote, &replace, err);
    }
    if (rc == UR_OK) {
        rc = convert(&r, ho, rep, err);
    }
    if (rc == UR_OK) {
        rc = publish(&r, ho, remote, replace, err);
    }
    if (rc == UR_OK) {
        rep->dest = ur_strdup(r.out);
    }
    run_dispose(&r);
    return rc;
}

void ur_job_hf_report_dispose(ur_hf_run_report *rep)
{
    ur_free(rep->dest);
    rep->dest = NULL;
}

/* A checkpoint is a training state when it holds the optimizer's state. */
static ur_plan_input input_kind(const ur_plan_leaves *l)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->leaves[i].path_len > 0 && strcmp(l->leaves[i].path[0], "opt_state") == 0) {
            return UR_PLAN_INPUT_FULL_STATE;
        }
    }
    return UR_PLAN_INPUT_PARAMS;
}

int ur_job_hf_verify(ur_verify_report *rep, const char *in, const char *folder,
                     const ur_config_opts *co, const ur_verify_opts *vo, ur_err *err)
{
    hf_run r;
    ur_kvstore *kv = NULL;
    ur_hf_tensor_info *t = NULL;
    size_t n = 0;
    int rc;

    memset(rep, 0, sizeof *rep);
    memset(&r, 0, sizeof r);
    rc = ur_config_load(&r.cfg, co, err);
    if (rc == UR_OK) {
        r.s = *ur_config_settings(r.cfg);
        r.in_path = in;
        rc = ur_orbax_ckpt_open(&r.ck, in, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_plan_orbax_leaves(&r.leaves, r.ck, err);
    }
    if (rc == UR_OK) {
        r.kind = input_kind(&r.leaves);
        ur_orbax_ckpt_close(r.ck); /* opened again by plan_export */
        r.ck = NULL;
        ur_plan_orbax_leaves_dispose(&r.leaves);
        /* the folder is checked whatever model_name's own architecture is */
        rc = plan_export(&r, co, 0, 1, err);
    }
    if (rc == UR_OK) {
        ur_hf_tensor_info one;
        size_t cap = 0;
        /* every entry: a tensor joined from pieces is one per piece */
        while (rc == UR_OK && ur_hf_plan_tensor(r.hf, n, &one)) {
            ur_hf_tensor_info *more = n + 1 > cap ? ur_grow_to(t, &cap, n + 1, sizeof *t) : t;
            if (more == NULL) {
                rc = ur_err_oom(err);
                break;
            }
            t = more;
            t[n++] = one;
        }
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_open_url(&kv, folder, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_verify_hf_run(rep, r.ck, t, n, kv, vo, err);
    }
    ur_kvstore_close(kv);
    ur_free(t);
    run_dispose(&r);
    return rc;
}

int ur_job_hf_is_folder(const char *path)
{
    ur_kvstore *kv = NULL;
    ur_buf b;
    ur_err err;
    int config = 0, meta = 0;
    ur_buf_init(&b, 0);
    if (ur_kvstore_open_url(&kv, path, 0, &err) == UR_OK &&
        ur_kvstore_read_opt(kv, "config.json", (size_t)16 << 20, &b, &config, &err) == UR_OK &&
        config) {
        if (ur_kvstore_read_opt(kv, "_METADATA", 1, &b, &meta, &err) < 0) {
            meta = 1; /* there, and larger */
        }
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    return config && !meta;
}
