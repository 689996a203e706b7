/* The finished step of one unit of a shared run, built from its shares. See job_finish.h. */
#include "job_finish.h"

#include "job_ledger.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/clock.h"
#include "unroll/fs.h"
#include "unroll/job_share.h"
#include "unroll/ocdbt.h"
#include "unroll/orbax.h"

#include <stdio.h>
#include <string.h>

#define MAX_META ((size_t)1 << 30)
#define MERGE_SEED 0x756e726f6c6c00ffull /* the same shares give the same bytes */

/* The key of share i's metadata file `name` in the ledger: shares/<i>/ for the first unit,
 * shares/<i>.u<k>/ for unit k of a run of several. */
static void meta_key(char *key, size_t size, size_t k, int i, const char *name)
{
    if (k == 0) {
        snprintf(key, size, "shares/%d/%s", i, name);
    } else {
        snprintf(key, size, "shares/%d.u%zu/%s", i, k, name);
    }
}

/* Share 0's metadata file `name` (checked the same in every share) into `first`; *has0:
 * whether share 0 has it (every share then must). */
static int share0_metadata(const ur_job_finish_unit *u, const char *name, ur_buf *first, int *has0,
                           ur_err *err)
{
    ur_buf other;
    char key[300];
    int rc, has = 0;
    ur_buf_init(&other, 0);
    meta_key(key, sizeof key, u->k, 0, name);
    rc = ur_kvstore_read_opt(u->ledger, key, MAX_META, first, has0, err);
    for (int i = 1; i < u->count && rc == UR_OK; i++) {
        meta_key(key, sizeof key, u->k, i, name);
        rc = ur_kvstore_read_opt(u->ledger, key, MAX_META, &other, &has, err);
        if (rc == UR_OK && (has != *has0 || other.len != first->len ||
                            memcmp(other.data, first->data, first->len) != 0)) {
            rc = ur_err_set(err, UR_ECORRUPT,
                            "%s/%s: %s of %s differs from share 0's: the shares come from "
                            "different plans",
                            u->where, key, name, u->unit);
        }
    }
    ur_buf_dispose(&other);
    return rc;
}

/* Share 0's metadata file `name` (checked) written to `as` of the step; `required`: its
 * absence is an error. */
static int copy_metadata(const ur_job_finish_unit *u, ur_kvstore *step, const char *name,
                         const char *as, int required, ur_err *err)
{
    ur_buf first;
    char key[300];
    int has0 = 0, rc;
    ur_buf_init(&first, 0);
    rc = share0_metadata(u, name, &first, &has0, err);
    if (rc == UR_OK && required && !has0) {
        meta_key(key, sizeof key, u->k, 0, name);
        rc = ur_err_set(err, UR_EIO, "%s/%s: the %s of %s is missing", u->where, key, name,
                        u->unit);
    }
    if (rc == UR_OK && has0) {
        rc = ur_kvstore_write(step, as, first.data, first.len, err);
    }
    ur_buf_dispose(&first);
    return rc;
}

static int collect_key(void *ctx, const char *key, uint64_t size)
{
    (void)size;
    return ur_buf_append(ctx, key, strlen(key) + 1, NULL) == UR_OK ? 0 : UR_ENOMEM;
}

/* What an earlier finish that died may have left in the step: every key but the shares'
 * databases (and the run's text, rewritten below). */
static int clear_earlier_finish(ur_kvstore *step, ur_err *err)
{
    ur_buf keys;
    int rc;
    ur_buf_init(&keys, 0);
    rc = ur_kvstore_list(step, "", collect_key, &keys, err);
    for (size_t at = 0; rc == UR_OK && at < keys.len;) {
        const char *key = (const char *)keys.data + at;
        if (strncmp(key, "items/ocdbt.process_", 20) != 0) {
            rc = ur_kvstore_delete(step, key, err);
        }
        at += strlen(key) + 1;
    }
    ur_buf_dispose(&keys);
    return rc == UR_ENOMEM ? ur_err_oom(err) : rc;
}

/* items/: the shares' databases merged into the top-level one. */
static int merge(const ur_job_finish_unit *u, ur_kvstore *step, const char *step_dir,
                 const char *items, ur_err *err)
{
    char **names = ur_calloc((size_t)u->count, sizeof *names);
    ur_ocdbt_write_opts o;
    int rc = names != NULL ? UR_OK : ur_err_oom(err);

    for (int i = 0; i < u->count && rc == UR_OK; i++) {
        names[i] = ur_malloc(32);
        if (names[i] == NULL) {
            rc = ur_err_oom(err);
            break;
        }
        snprintf(names[i], 32, "ocdbt.process_%d", i);
        if (u->dbs == NULL) { /* in the step: each share's committed database is there */
            char key[64];
            uint64_t size;
            snprintf(key, sizeof key, "items/%s/manifest.ocdbt", names[i]);
            rc = ur_kvstore_size(step, key, &size, err);
            if (rc == UR_ENOTFOUND) {
                rc = ur_err_set(err, UR_EIO, "%s/%s: share %d has no database", step_dir, key, i);
            }
        }
    }
    if (rc == UR_OK) {
        ur_ocdbt_write_opts_init(&o);
        o.seed = MERGE_SEED;
        rc = ur_ocdbt_merge_from(items, u->dbs, (const char *const *)names, (size_t)u->count, &o,
                                 err);
    }
    for (int i = 0; names != NULL && i < u->count; i++) {
        ur_free(names[i]);
    }
    ur_free(names);
    return rc;
}

/* The commit markers and _CHECKPOINT_METADATA, as Orbax's CheckpointManager writes them. */
static int write_step_files(const ur_job_finish_unit *u, ur_kvstore *step, ur_err *err)
{
    ur_buf b, custom;
    int rc, has_custom = 0;

    ur_buf_init(&b, 0);
    ur_buf_init(&custom, 0);
    rc = share0_metadata(u, UR_ORBAX_CUSTOM_METADATA_FILE, &custom, &has_custom, err);
    if (rc == UR_OK && has_custom) { /* absent: a share of an older unroll, {} as it wrote */
        rc = ur_buf_append_byte(&custom, '\0', err);
    }
    if (rc == UR_OK && u->run_text != NULL) {
        rc = ur_kvstore_write(step, UR_JOB_SHARE_RUN_KEPT, u->run_text, strlen(u->run_text), err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(&b, err, "Checkpoint commit was successful to %s", u->published_as);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_write(step, "items/commit_success.txt", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_write(step, "commit_success.txt", b.data, b.len, err);
    }
    if (rc == UR_OK) {
        ur_buf_reset(&b);
        rc = ur_orbax_ckpt_meta_emit_standard(&b, "items", u->init_ns,
                                              has_custom ? (const char *)custom.data : NULL, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_write(step, "_CHECKPOINT_METADATA", b.data, b.len, err);
    }
    ur_buf_dispose(&b);
    ur_buf_dispose(&custom);
    return rc;
}

int ur_job_finish_build(const ur_job_finish_unit *u, const char *step_dir, ur_err *err)
{
    ur_kvstore *step = NULL;
    char *items = ur_path_join(step_dir, "items");
    int rc = items != NULL ? ur_kvstore_file_open(&step, step_dir, 1, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = clear_earlier_finish(step, err);
    }
    /* first: it checks the shares agree */
    if (rc == UR_OK) {
        rc = copy_metadata(u, step, "_METADATA", "items/_METADATA", 1, err);
    }
    if (rc == UR_OK) {
        rc = copy_metadata(u, step, "_sharding", "items/_sharding", 0, err);
    }
    if (rc == UR_OK) {
        rc = copy_metadata(u, step, "array_metadatas.json", "items/array_metadatas/process_0", 0,
                           err);
    }
    if (rc == UR_OK) {
        rc = merge(u, step, step_dir, items, err);
    }
    if (rc == UR_OK) {
        rc = write_step_files(u, step, err);
    }
    if (rc == UR_OK) { /* durable before it is published */
        rc = ur_kvstore_commit(step, err);
    }
    ur_kvstore_close(step);
    ur_free(items);
    return rc;
}

int ur_job_finish_is_step(const char *unit)
{
    const char *slash = strrchr(unit, '/');
    return strcmp(slash != NULL ? slash + 1 : unit, "0") == 0;
}

/* The shares' databases of a unit in the store `at` (items/ocdbt.process_<i>/), opened for
 * reading into dbs[count]. */
static int open_shares(ur_kvstore **dbs, int count, const char *at, ur_err *err)
{
    int rc = UR_OK;
    for (int i = 0; i < count && rc == UR_OK; i++) {
        char *url = ur_path_joinf(at, "items/ocdbt.process_%d", i);
        rc = url != NULL ? ur_kvstore_open_url(&dbs[i], url, 0, err) : ur_err_oom(err);
        ur_free(url);
    }
    return rc;
}

/* A file unit (an adapter's config), the one copy the shares put in the ledger, to `path`. */
static int fetch_file_unit(ur_kvstore *ledger, const char *where, const char *unit,
                           const char *path, ur_err *err)
{
    char *key = ur_path_join("units", unit), *dir = NULL;
    ur_buf b;
    int found = 0, rc = key != NULL ? UR_OK : ur_err_oom(err);
    ur_buf_init(&b, 0);
    if (rc == UR_OK) {
        rc = ur_kvstore_read_opt(ledger, key, MAX_META, &b, &found, err);
    }
    if (rc == UR_OK && !found) {
        rc = ur_err_set(err, UR_EIO, "%s/%s is missing", where, key);
    }
    if (rc == UR_OK) {
        dir = ur_strndup(path, (size_t)(strrchr(path, '/') - path));
        rc = dir != NULL ? ur_fs_mkdirs(dir, err) : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        rc = ur_fs_write_file(path, b.data, b.len, err);
    }
    ur_buf_dispose(&b);
    ur_free(dir);
    ur_free(key);
    return rc;
}

/* Unit k of the run built where the publisher says. */
static int finish_one(ur_job_finish_unit *u, const ur_job_publisher *pub, ur_err *err)
{
    const char *dir = NULL, *shares_at = NULL, *as = NULL;
    ur_kvstore **dbs = NULL;
    int skip = 0, rc = pub->unit(pub->ctx, u->k, &dir, &shares_at, &as, &skip, err);
    if (rc < 0 || skip) {
        return rc;
    }
    if (!ur_job_finish_is_step(u->unit)) {
        return fetch_file_unit(u->ledger, u->where, u->unit, dir, err);
    }
    if (shares_at != NULL) {
        dbs = ur_calloc((size_t)u->count, sizeof *dbs);
        rc = dbs != NULL ? open_shares(dbs, u->count, shares_at, err) : ur_err_oom(err);
    }
    if (rc == UR_OK) {
        u->dbs = dbs;
        u->published_as = as;
        rc = ur_job_finish_build(u, dir, err);
    }
    for (int i = 0; dbs != NULL && i < u->count; i++) {
        ur_kvstore_close(dbs[i]);
    }
    ur_free(dbs);
    return rc;
}

int ur_job_finish_run(ur_kvstore *ledger, const char *where, int count, const char *const *units,
                      size_t n_units, const ur_job_publisher *pub,
                      const volatile sig_atomic_t *cancel, ur_err *err)
{
    ur_job_finish_unit u;
    ur_buf run;
    int found = 0, rc;

    memset(&u, 0, sizeof u);
    u.ledger = ledger;
    u.where = where;
    u.count = count;
    ur_buf_init(&run, 0);
    rc = ur_job_ledger_started(ledger, where, &u.init_ns, err);
    if (rc == UR_OK) {
        rc = ur_job_ledger_run_read(ledger, &run, &found, err);
    }
    if (rc == UR_OK && !found) {
        rc = ur_err_set(err, UR_EIO, "%s/" UR_JOB_LEDGER_RUN " is missing", where);
    }
    for (size_t k = 0; k < n_units && rc == UR_OK; k++) {
        u.k = k;
        u.unit = units[k];
        u.run_text = k == 0 ? (const char *)run.data : NULL;
        rc = finish_one(&u, pub, err);
    }
    ur_buf_dispose(&run);
    if (rc == UR_OK && cancel != NULL && *cancel) {
        rc = ur_err_set(err, UR_ECANCELED, "interrupted");
    }
    return rc == UR_OK ? pub->commit(pub->ctx, cancel, err) : rc;
}
