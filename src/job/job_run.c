/* One conversion, `unroll base.yml key=value ...` without its command line: the input the
 * settings name, the units to publish, each unit converted into the staging directory, then
 * all of them published at once (include/unroll/job.h, unroll/job_publish.h). */
#include "unroll/job.h"

#include "job_shares.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/job_claim.h"
#include "unroll/job_publish.h"
#include "unroll/job_share.h"
#include "unroll/job_stream.h"
#include "unroll/job_upload.h"
#include "unroll/kvstore.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Data files streamed to an object-store output at once (job_stream.h). */
#define STREAM_PENDING 2

int ur_job_run_input(const char **path_out, ur_plan_input *kind_out, const ur_settings *s,
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
    return o->cancel != NULL && *o->cancel ? ur_err_set(err, UR_ECANCELED, "interrupted") : UR_OK;
}

typedef struct {
    ur_orbax_writer *w;
    const ur_run_share *sh;
} share_piece_ctx;

/* ur_exec_opts.piece of a share: snapshot its database, then record the resume point. */
static int share_piece(void *ctx, uint64_t next_item, ur_err *err)
{
    share_piece_ctx *p = ctx;
    int rc = ur_orbax_writer_snapshot(p->w, err);
    if (rc == UR_OK) {
        rc = p->sh->save_progress(p->sh->progress_ctx, next_item, err);
    }
    return rc;
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
    eo->share_before = sh->share_before;
    eo->share_total = sh->share_total;
}

/* ur_ocdbt_write_opts.on_data_file of one unit: the file's key below checkpoint_dir is the
 * unit, the item and the file's name ("0/items/d/<hex>"), whatever temporary directory the
 * writer uses until its commit. */
typedef struct {
    const ur_run_opts *o;
    const char *unit; /* the step directory below the staging directory ("0", "base/0") */
    const char *item; /* "items" */
} data_file_ctx;

static int on_data_file(void *ctx, const char *dir, const char *name, ur_err *err)
{
    data_file_ctx *d = ctx;
    char *path = ur_path_join(dir, name);
    char *key = ur_path_joinf(d->unit, "%s/%s", d->item, name);
    int rc = path != NULL && key != NULL ? d->o->on_data_file(d->o->data_file_ctx, path, key, err)
                                         : ur_err_oom(err);
    ur_free(path);
    ur_free(key);
    return rc;
}

/* Local disk a conversion needs: the output, or with its data files streamed away as they
 * are finished (job_stream.h) the one being written, the STREAM_PENDING ones going up and
 * the last ones, which hold the B-tree. */
static uint64_t local_bytes(uint64_t bytes_out, const ur_orbax_write_opts *wo)
{
    uint64_t streamed = (STREAM_PENDING + 2) * wo->ocdbt.target_data_file_size;
    /* plain zarr: chunks leave as they are stored, but how large the largest one is, is not
     * known here: the whole output, to be safe */
    return wo->use_ocdbt && wo->ocdbt.on_data_file != NULL && streamed < bytes_out ? streamed
                                                                                   : bytes_out;
}

/* `in_path` converted into the step directory `step_dir`, created below `below` (the
 * staging directory, which must exist); in a dry run only its plan, handed to on_plan. With
 * `sh`, only a share of it (job_impl.h). */
int ur_job_run_convert(const char *in_path, const char *step_dir, const char *below,
                       const char *published_as, ur_plan_input kind, const ur_settings *s,
                       const ur_run_opts *o, const ur_run_share *sh, const char *what,
                       ur_exec_stats *total, ur_err *err)
{
    share_piece_ctx piece;
    data_file_ctx dfc;
    ur_orbax_ckpt *ck = NULL;
    ur_plan *plan = NULL;
    ur_orbax_writer *w = NULL;
    ur_plan_leaves leaves = {0};
    char *custom = NULL;
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
    if (plan->summary.leaves_left_out > 0 && o->on_note != NULL) {
        /* trained weights not written: said on every run, not only in the dry run's plan */
        char line[512];
        snprintf(line, sizeof line, "note: %s: %zu model leaves not written (%s)", what,
                 plan->summary.leaves_left_out, plan->summary.left_out_why);
        o->on_note(o->ctx, line);
    }
    if (o->dry_run) {
        if (o->on_plan != NULL) {
            o->on_plan(o->ctx, what, plan, leaves.leaves);
        }
        goto out;
    }
    /* The plan holds its own copies of what it took from the leaves' view (paths interned in
     * its pool), and the executor works from the plan and the checkpoint. */
    ur_plan_orbax_leaves_dispose(&leaves);
    ur_alloc_trim(); /* that, and what opening the input's arrays on every core freed */

    ur_orbax_write_opts_init(&wo);
    wo.use_ocdbt = s->use_ocdbt;
    wo.use_zarr3 = s->use_zarr3;
    wo.create_below = below;
    wo.published_as = published_as;
    /* Reproducible data-file names: the same input gives the same output bytes. */
    wo.ocdbt.seed = 0x756e726f6c6c0001ull;
    if (s->target_data_file_size > 0) {
        wo.ocdbt.target_data_file_size = (uint64_t)s->target_data_file_size;
    }
    if (o->on_data_file != NULL && below != NULL && strncmp(step_dir, below, strlen(below)) == 0 &&
        step_dir[strlen(below)] == '/') {
        dfc.o = o;
        dfc.unit = step_dir + strlen(below) + 1;
        dfc.item = wo.item_name;
        wo.ocdbt.on_data_file = on_data_file;
        wo.ocdbt.on_data_file_ctx = &dfc;
    }
    share_opts(sh, &wo, NULL, NULL);
    /* The output's uncompressed size is an upper bound (zstd rarely shrinks trained bf16
     * weights by much, so a smaller guess would let a run fill the disk and fail late);
     * arrays of the fill value compress to almost nothing but are refused all the same when
     * they would not fit as stored uncompressed, so a few-KB input declaring a 1 TB array
     * cannot fill the disk. Streamed data files leave the disk as they are finished. */
    rc = ur_fs_space_check(step_dir, local_bytes(plan->summary.bytes_out, &wo), err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_orbax_writer_create(&w, step_dir, &wo, err);
    if (rc < 0) {
        goto out;
    }
    /* the output's layers are scanned unless this run unrolls them (a scan_layers=false
     * input stays unscanned) */
    rc = ur_plan_orbax_custom_metadata(&custom, ck, s->scan_layers && !plan->unrolled, err);
    if (rc == UR_OK) {
        rc = ur_orbax_writer_set_custom_metadata(w, custom, err);
    }
    if (rc < 0) {
        goto out;
    }
    memset(&eo, 0, sizeof eo);
    /* one worker per core, also from an object store: the chunk streams announce what they
     * read next and the input's read-ahead store keeps those requests in flight
     * (kvstore_ahead.c), so more workers would only hold more chunks in memory */
    eo.threads = o->threads;
    if (ur_kvstore_location_can(in_path, UR_KV_NETWORK)) {
        eo.look_ahead = ur_kvstore_read_ahead() / 4 * 3; /* the rest for the chunk streams */
    }
    eo.memory_limit = o->memory_limit;
    eo.cancel = o->cancel;
    eo.progress = o->progress;
    eo.progress_ctx = o->ctx;
    if (sh != NULL) {
        piece.w = w;
        piece.sh = sh;
        share_opts(sh, NULL, &eo, &piece);
    }
    if (o->on_begin != NULL) {
        o->on_begin(o->ctx, what);
    }
    rc = ur_exec_run(plan, ck, w, &eo, &st, err);
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
    ur_free(custom);
    ur_plan_free(plan);
    ur_plan_orbax_leaves_dispose(&leaves);
    ur_orbax_ckpt_close(ck);
    return rc;
}

/* An adapter_config.json in an object store (`from` a location), copied byte for byte. */
static int copy_remote_file(const char *from, const char *to, ur_err *err)
{
    const char *slash = strrchr(from, '/');
    char *dir = ur_strndup(from, (size_t)(slash - from));
    ur_kvstore *kv = NULL;
    ur_buf b;
    int rc;
    ur_buf_init(&b, 16u << 20);
    rc = dir != NULL ? ur_kvstore_open_url(&kv, dir, 0, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_kvstore_read(kv, slash + 1, &b, err);
        if (rc < 0) {
            ur_err_wrap(err, "%s", from);
        }
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file(to, b.data, b.len, err);
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    ur_free(dir);
    return rc;
}

/* Copy a small local file byte for byte (adapter_config.json), read beneath its own
 * directory (no link out of the adapter) and never given more permissions than it has. */
static int copy_local_file(const char *from, const char *to, ur_err *err)
{
    const char *slash = strrchr(from, '/');
    char *dir = slash != NULL ? ur_strndup(from, (size_t)(slash - from)) : ur_strdup(".");
    int rc = dir != NULL ? ur_fs_copy_file_beneath(dir, slash != NULL ? slash + 1 : from, to,
                                                   16u << 20, err)
                         : ur_err_oom(err);
    ur_free(dir);
    return rc;
}

int ur_job_run_copy_file(const char *from, const char *to, ur_err *err)
{
    return ur_kvstore_location_can(from, UR_KV_IS_PATH) ? copy_local_file(from, to, err)
                                                        : copy_remote_file(from, to, err);
}

/* Each adapter `<adapters>/<id>/0/items` into the staged unit 1 + 2i, its adapter_config.json
 * copied into unit 2 + 2i (in a dry run: only the plans). */
static int convert_loras(const char *adapters, const ur_plan_units *u, const ur_job_publish *pub,
                         const ur_settings *s, const ur_run_opts *o, ur_exec_stats *total,
                         ur_err *err)
{
    int rc = UR_OK;
    for (size_t i = 0; i < u->n_ids && rc == UR_OK; i++) {
        char *in = ur_path_joinf(adapters, "%s/0/items", u->ids[i]);
        char *cfg_in = ur_path_joinf(adapters, "%s/adapter_config.json", u->ids[i]);
        const char *out = pub != NULL ? ur_job_publish_staged(pub, 1 + 2 * i) : NULL;
        char *final = pub != NULL ? ur_path_join(ur_job_publish_dest(pub), u->units[1 + 2 * i])
                                  : NULL;
        char what[300];
        snprintf(what, sizeof what, "lora %s", u->ids[i]);
        rc = check_cancel(o, err);
        if (rc == UR_OK && (in == NULL || cfg_in == NULL || (pub != NULL && final == NULL))) {
            rc = ur_err_oom(err);
        } else if (rc == UR_OK) {
            rc = ur_job_run_convert(in, out, pub != NULL ? ur_job_publish_staging(pub) : NULL,
                                    final, UR_PLAN_INPUT_LORA, s, o, NULL, what, total, err);
            if (rc == UR_OK && pub != NULL) {
                rc = ur_job_run_copy_file(cfg_in, ur_job_publish_staged(pub, 2 + 2 * i), err);
            }
        }
        ur_free(in);
        ur_free(cfg_in);
        ur_free(final);
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
    }
    if (rc >= 0) {
        rc = ur_kvstore_location_kind(s->checkpoint_dir, err);
    }
    return rc;
}

/* For an object-store output: the local tree the run converts into before uploading
 * ($TMPDIR/unroll-upload.XXXXXX; its checkpoints/ stands for the remote checkpoint dir). */
static int make_upload_root(char **root_out, char **ckdir_out, ur_err *err)
{
    char *root = NULL;
    int rc = ur_fs_make_temp_dir(&root, "unroll-upload", "the staging directory", err);
    if (rc < 0) {
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

/* 1 when location `a` is `b` or below it ("s3://b/x/0" is not below "s3://b/x/0.old"). */
static int inside(const char *a, const char *b)
{
    size_t n = strlen(b);
    while (n > 0 && b[n - 1] == '/') {
        n--;
    }
    return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

/* 1 when the remote location `in` and checkpoint_dir/unit are one inside the other. */
static int overlaps(const char *in, const char *checkpoint_dir, const char *unit)
{
    char *dest;
    int hit;
    if (ur_kvstore_location_can(in, UR_KV_IS_PATH)) {
        return 0; /* "" (no adapters) or local: the local overlap rules apply */
    }
    dest = remote_unit(checkpoint_dir, unit);
    hit = dest != NULL && (inside(in, dest) || inside(dest, in));
    ur_free(dest);
    return hit;
}

/* Refused (UR_EINVAL) when an object-store unit checkpoint_dir/<unit> and a remote input
 * (in_path, the adapters) are one inside the other. */
static int check_remote_overlap(const ur_settings *s, const char *in_path,
                                const char *const *units, size_t n_units, ur_err *err)
{
    const char *ins[2] = {in_path, s->lora_input_adapters_path};
    for (size_t i = 0; i < n_units; i++) {
        for (size_t k = 0; k < 2; k++) {
            if (ins[k] != NULL && overlaps(ins[k], s->checkpoint_dir, units[i])) {
                char *dest = remote_unit(s->checkpoint_dir, units[i]);
                int rc = ur_err_set(err, UR_EINVAL, "the output %s and the input %s overlap",
                                    dest != NULL ? dest : units[i], ins[k]);
                ur_free(dest);
                return rc;
            }
        }
    }
    return UR_OK;
}

/* The destination's claim (unroll/job_claim.h) on its first unit, for this run's identity
 * (its run text, as a --resume run's: ur_job_multi_run_text). */
static int claim_destination(const ur_settings *s, const char *in_path, const ur_plan_units *u,
                             const ur_run_opts *o, ur_job_claim **claim, int *took_over,
                             ur_err *err)
{
    char *step = remote_unit(s->checkpoint_dir, u->units[0]);
    ur_buf identity;
    int rc;
    ur_buf_init(&identity, 0);
    rc = step != NULL ? ur_job_multi_run_text(&identity, 1, 0, in_path, o->config.config_path,
                                              o->config.overrides, o->config.n_overrides, 1, err)
                      : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = ur_job_claim_take(claim, step, (const char *)identity.data, took_over, err);
    }
    ur_buf_dispose(&identity);
    ur_free(step);
    return rc;
}

/* An object-store destination (its units: "0", or base/0 and the loras/<id> of a LoRA run):
 * refused when a unit overlaps an input; outside a dry run, claimed (*claim), then refused
 * when a unit already holds objects unless o->replace or they are what a dead attempt of this
 * run left (*replace then 1: the upload deletes them first), and the local tree to convert
 * into (*up_root, whose checkpoints/ is *up_ckdir). */
static int remote_begin(const ur_settings *s, const char *in_path, const ur_plan_units *u,
                        const ur_run_opts *o, ur_job_claim **claim, int *replace, char **up_root,
                        char **up_ckdir, int *empty, ur_err *err)
{
    size_t held = 0;
    int took_over = 0;
    int rc = check_remote_overlap(s, in_path, u->units, u->n_units, err);
    if (rc < 0) {
        return rc;
    }
    /* before anything is written: a second run into this destination stops here */
    if (!o->dry_run) {
        rc = claim_destination(s, in_path, u, o, claim, &took_over, err);
        if (rc < 0) {
            return rc;
        }
    }
    *replace = o->replace || took_over;
    /* refused before any work: a destination that holds objects (unless --replace) */
    rc = ur_job_upload_count_units(s->checkpoint_dir, u->units, u->n_units, &held, err);
    *empty = rc == UR_OK && held == 0;
    if (rc == UR_OK && held > 0) {
        rc = ur_job_upload_check_units(s->checkpoint_dir, u->units, u->n_units, *replace, err);
    }
    if (rc == UR_OK && !o->dry_run) {
        rc = make_upload_root(up_root, up_ckdir, err);
    }
    return rc;
}

/* The finished local units, uploaded in Orbax's commit-file order, with a progress line of
 * their own ("upload") where the conversion has one. */
static int remote_finish(const char *up_ckdir, const ur_settings *s, const ur_plan_units *u,
                         const ur_run_opts *o, int replace, ur_job_stream *stream, ur_err *err)
{
    ur_job_upload_opts uo;
    char *dest;
    int rc = stream != NULL ? ur_job_stream_finish(stream, err) : UR_OK;
    if (rc < 0) {
        return rc; /* every streamed data file is up before any manifest */
    }
    dest = remote_unit(s->checkpoint_dir, NULL); /* the markers name it */
    if (dest == NULL) {
        return ur_err_oom(err);
    }
    memset(&uo, 0, sizeof uo);
    uo.replace = replace;
    uo.threads = o->threads > 0 ? (unsigned)o->threads * 4 : 16;
    uo.units = u->units;
    uo.n_units = u->n_units;
    uo.add = stream != NULL;
    if (o->progress != NULL) {
        uo.progress = o->progress;
        uo.progress_ctx = o->ctx;
        if (o->on_begin != NULL) {
            o->on_begin(o->ctx, "upload");
        }
    }
    rc = ur_job_upload(up_ckdir, dest, &uo, o->cancel, err);
    ur_free(dest);
    return rc;
}

/* An output to an object-store destination found empty: its data files (OCDBT) or its
 * arrays' values (plain zarr: chunks, zarr.json) go up while the conversion runs
 * (job_stream.h). *ro is then *o with on_data_file set; *st NULL: not streamed. */
static int stream_begin(ur_job_stream **st, const ur_settings *s, const ur_run_opts *o,
                        ur_run_opts *ro, ur_err *err)
{
    char *dest;
    int rc;
    *st = NULL;
    *ro = *o;
    dest = remote_unit(s->checkpoint_dir, NULL);
    if (dest == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_job_stream_create(st, dest, STREAM_PENDING, STREAM_PENDING, err);
    ur_free(dest);
    if (rc == UR_OK) {
        ro->on_data_file = ur_job_stream_push;
        ro->data_file_ctx = *st;
    }
    return rc;
}

/* After a failure: the streamed data files deleted, and the error says whether that worked. */
static void stream_undo(ur_job_stream *st, ur_err *err)
{
    ur_err first;
    size_t n = ur_job_stream_count(st), failed;
    ur_err_clear(&first);
    failed = ur_job_stream_undo(st, &first);
    if (failed > 0) {
        ur_err_wrap(err, "%zu of the %zu data files streamed could not be deleted (%s)", failed, n,
                    first.msg);
    } else if (n > 0) {
        ur_err_wrap(err, "the %zu data file%s streamed during the conversion %s deleted", n,
                    n == 1 ? "" : "s", n == 1 ? "was" : "were");
    }
}

void ur_job_run_report_dispose(ur_run_report *rep)
{
    ur_free(rep->dest);
    rep->dest = NULL;
}

int ur_job_run_by_rename(const char *checkpoint_dir)
{
    /* the site follows the store's capabilities, never its scheme */
    return ur_kvstore_location_can(checkpoint_dir, UR_KV_CAN_RENAME | UR_KV_CAN_LOCK);
}

int ur_job_run(ur_run_report *rep, const ur_run_opts *o, ur_err *err)
{
    ur_config *cfg = NULL;
    const ur_settings *s;
    ur_job_publish *pub = NULL;
    ur_plan_units units;
    const char *in_path = NULL, *inputs[2];
    const char *out_dir;
    char *up_root = NULL, *up_ckdir = NULL;
    char *final = NULL; /* where the base unit is published (its markers name it) */
    ur_job_stream *stream = NULL;
    ur_job_claim *claim = NULL;
    ur_run_opts ro;
    int remote_out = 0, remote_empty = 0, remote_replace = 0;
    size_t n_inputs = 0;
    ur_plan_input kind = UR_PLAN_INPUT_FULL_STATE;
    int rc;

    memset(rep, 0, sizeof *rep);
    memset(&units, 0, sizeof units);
    /* an object-store input's read-ahead takes a quarter of the memory limit beside it */
    ur_kvstore_set_read_ahead((o->memory_limit ? o->memory_limit : UR_EXEC_DEFAULT_MEMORY) / 4);
    rc = ur_config_load(&cfg, &o->config, err);
    if (rc < 0) {
        goto out;
    }
    s = ur_config_settings(cfg);
    /* the families' own keys, refused as the others are: before any I/O */
    rc = ur_plan_validate_keys(s, err);
    if (rc < 0) {
        goto out;
    }
    rc = ur_job_run_input(&in_path, &kind, s, o->dry_run, err);
    if (rc < 0) {
        goto out;
    }
    rc = check_locations(s, in_path, err);
    if (rc < 0) {
        goto out;
    }
    out_dir = s->checkpoint_dir;
    remote_out = !ur_job_run_by_rename(out_dir);
    /* the overlap rules of job_publish.h concern local paths */
    if (ur_kvstore_location_can(in_path, UR_KV_IS_PATH)) {
        inputs[n_inputs++] = in_path;
    }
    if (s->lora_input_adapters_path[0] != '\0' &&
        ur_kvstore_location_can(s->lora_input_adapters_path, UR_KV_IS_PATH)) {
        inputs[n_inputs++] = s->lora_input_adapters_path;
    }
    if (ur_job_multi_wanted(o, s)) {
        /* a share of a multi-process run, or a resumable one (job_shares.c); an input on an
         * object store is read from there, each process reading its share's chunks */
        if (!ur_kvstore_location_can(s->lora_input_adapters_path, UR_KV_IS_PATH)) {
            rc = ur_err_set(err, UR_EUNSUPPORTED,
                            "%s: a multi-process or resumable run (--process-count, --resume) "
                            "reads LoRA adapters from a local directory only, not s3:// or gs://",
                            s->lora_input_adapters_path);
        } else {
            /* where the run is staged and published: chosen here, once (job_shares.h) */
            rc = remote_out ? check_remote_overlap(s, in_path, (const char *const[]){"0"}, 1, err)
                            : UR_OK;
            if (rc == UR_OK) {
                rc = ur_job_shares_run(rep, o, s, in_path, kind,
                                       remote_out ? &ur_job_site_bucket : &ur_job_site_dir, inputs,
                                       n_inputs, err);
            }
        }
        goto out;
    }
    rc = ur_plan_lora_units(&units, s->lora_input_adapters_path, err);
    if (rc < 0) {
        goto out;
    }
    if (remote_out) {
        rc = remote_begin(s, in_path, &units, o, &claim, &remote_replace, &up_root, &up_ckdir,
                          &remote_empty, err);
        if (rc < 0) {
            goto out;
        }
        out_dir = up_ckdir;
    }

    /* Only the units are replaced (checkpoint_dir/0, or base/0 and loras/<id>/...); the
     * lock, the staging directory and the overlap rules: unroll/job_publish.h. */
    if (o->dry_run) {
        rc = ur_job_publish_check(remote_out ? "/nonexistent/unroll-remote" : out_dir, units.units,
                                  units.n_units, inputs, n_inputs, err);
    } else {
        rc = ur_job_publish_begin(&pub, out_dir, units.units, units.n_units, inputs, n_inputs,
                                  err);
        if (rc == UR_OK) {
            rep->dest = remote_out ? remote_unit(s->checkpoint_dir, NULL)
                                   : ur_strdup(ur_job_publish_dest(pub));
            rc = rep->dest != NULL ? UR_OK : ur_err_oom(err);
        }
        if (rc == UR_OK && remote_out && remote_empty) {
            rc = stream_begin(&stream, s, o, &ro, err);
            o = stream != NULL ? &ro : o;
        }
    }
    if (rc == UR_OK && pub != NULL) {
        final = ur_path_join(ur_job_publish_dest(pub), units.units[0]);
        rc = final != NULL ? UR_OK : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = ur_job_run_convert(in_path, pub != NULL ? ur_job_publish_staged(pub, 0) : NULL,
                                pub != NULL ? ur_job_publish_staging(pub) : NULL, final, kind, s,
                                o, NULL, "base", &rep->total, err);
    }
    if (rc == UR_OK && units.n_ids > 0) {
        rc = convert_loras(s->lora_input_adapters_path, &units, pub, s, o, &rep->total, err);
    }
    if (rc == UR_OK && stream != NULL) {
        /* before the staged units move: the uploads read them there */
        rc = ur_job_stream_finish(stream, err);
    }
    if (rc == UR_OK && pub != NULL) {
        rc = ur_job_publish_commit(pub, o->cancel, err);
        pub = NULL; /* commit frees it either way */
    }
    if (rc == UR_OK && remote_out && !o->dry_run) {
        rc = remote_finish(up_ckdir, s, &units, o, remote_replace, stream, err);
    }
out:
    if (rc < 0 && stream != NULL) {
        stream_undo(stream, err);
    }
    /* after the markers, or after a failure once what was written is deleted; a failed delete
     * of a published run's claim is left for its rerun to take over (best effort) */
    (void)ur_job_claim_release(claim, NULL);
    ur_job_stream_free(stream);
    ur_job_publish_abort(pub); /* after a failure: staging, lock, created directories */
    if (up_root != NULL) {
        (void)ur_fs_remove_tree(up_root, NULL);
    }
    ur_free(up_root);
    ur_free(up_ckdir);
    ur_free(final);
    ur_plan_lora_units_dispose(&units);
    ur_config_free(cfg);
    return rc;
}
