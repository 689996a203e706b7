/* A share's progress kept in the object store, so that a share killed on one machine is
 * continued on another (include/unroll/job_share_remote.h, "progress"). */
#include "unroll/alloc.h"
#include "unroll/b64.h"
#include "unroll/buf.h"
#include "unroll/crc32c.h"
#include "unroll/fs.h"
#include "unroll/job_share_remote.h"
#include "unroll/job_upload.h"
#include "unroll/kvstore.h"
#include "unroll/strmap.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of a local data file summed between two returns of its pages (local_crc). */
#define CRC_STEP ((size_t)16 << 20)

#define MAX_MARK ((size_t)64 << 20)

/* A data file of the share's database: as the store's mark lists it, and as found here. */
typedef struct {
    char *name; /* "d/<hex>" */
    uint64_t size;
    uint32_t crc;       /* the store's copy (in_store) */
    uint32_t local_crc; /* the local file's (local_known) */
    int in_store, local_known, listed;
} pfile;

struct ur_job_rprogress {
    ur_kvstore *kv; /* the step S */
    char *db_url, *meta_url, *meta_key, *mark_key;
    pfile *f;
    size_t n, cap;
    ur_strmap by_name; /* name -> index into f */
    ur_kvstore *local; /* the local database while an upload asks sent() */
    int failed;        /* sent() could not read a local file: treated as not sent */
    /* The manifest the store's mark carries: the database as of the mark. The store's
     * manifest.ocdbt may be a later generation's (a save killed between its manifest and its
     * mark), whose data files the mark does not list. has_manifest 0: a mark without one. */
    ur_buf manifest;
    int has_manifest;
};

void ur_job_rprogress_close(ur_job_rprogress *p)
{
    if (p != NULL) {
        for (size_t i = 0; i < p->n; i++) {
            ur_free(p->f[i].name);
        }
        ur_free(p->f);
        ur_strmap_dispose(&p->by_name);
        ur_kvstore_close(p->kv);
        ur_free(p->db_url);
        ur_free(p->meta_url);
        ur_free(p->meta_key);
        ur_free(p->mark_key);
        ur_buf_dispose(&p->manifest);
        ur_free(p);
    }
}

int ur_job_rprogress_open(ur_job_rprogress **out, const char *step, int index, ur_err *err)
{
    return ur_job_rprogress_open_unit(out, step, step, index, 0, err);
}

int ur_job_rprogress_open_unit(ur_job_rprogress **out, const char *step, const char *unit_at,
                               int index, size_t k, ur_err *err)
{
    char share[48];
    ur_job_rprogress *p = ur_calloc(1, sizeof *p);
    int rc;
    if (p == NULL) {
        return ur_err_oom(err);
    }
    ur_strmap_init(&p->by_name);
    ur_buf_init(&p->manifest, MAX_MARK);
    if (k == 0) {
        snprintf(share, sizeof share, "%d", index);
    } else {
        snprintf(share, sizeof share, "%d.u%zu", index, k);
    }
    p->db_url = ur_path_joinf(unit_at, "items/ocdbt.process_%d", index);
    p->meta_key = ur_path_joinf(UR_JOB_RSHARE_DIR, "shares/%s/", share);
    p->mark_key = ur_path_joinf(UR_JOB_RSHARE_DIR, "shares/%s.progress", share);
    p->meta_url = ur_path_joinf(step, UR_JOB_RSHARE_DIR "/shares/%s", share);
    rc = p->db_url != NULL && p->meta_key != NULL && p->mark_key != NULL && p->meta_url != NULL
             ? ur_kvstore_open_url(&p->kv, step, 1, err)
             : ur_err_oom(err);
    if (rc < 0) {
        ur_job_rprogress_close(p);
        return rc;
    }
    *out = p;
    return UR_OK;
}

/* The entry of `name`, added when absent. */
static pfile *entry(ur_job_rprogress *p, const char *name, size_t len, ur_err *err)
{
    size_t at;
    pfile *f;
    if (ur_strmap_get(&p->by_name, name, len, &at) == 1) {
        return &p->f[at];
    }
    f = ur_grow(p->f, &p->cap, p->n, sizeof *f, 64);
    if (f == NULL) {
        ur_err_oom(err);
        return NULL;
    }
    p->f = f;
    memset(&p->f[p->n], 0, sizeof p->f[p->n]);
    p->f[p->n].name = ur_strndup(name, len);
    if (p->f[p->n].name == NULL ||
        ur_strmap_put(&p->by_name, p->f[p->n].name, len, p->n, NULL, err) < 0) {
        ur_free(p->f[p->n].name);
        if (p->f[p->n].name == NULL) {
            ur_err_oom(err);
        }
        return NULL;
    }
    return &p->f[p->n++];
}

/* The mark's "\nmanifest <base64>" line at *t, if any, decoded into p->manifest; *t moves
 * past it. */
static int parse_manifest(ur_job_rprogress *p, const char **t, ur_err *err)
{
    const char *b64 = *t + 10, *eol;
    int rc;
    if (strncmp(*t, "\nmanifest ", 10) != 0) {
        return UR_OK;
    }
    eol = strchr(b64, '\n');
    if (eol == NULL) {
        return ur_err_set(err, UR_ECORRUPT, "%s: a malformed progress mark", p->mark_key);
    }
    ur_buf_reset(&p->manifest);
    rc = ur_b64_decode(&p->manifest, b64, (size_t)(eol - b64), UR_B64_STD, err);
    if (rc < 0) {
        ur_err_wrap(err, "%s: its manifest", p->mark_key);
        return rc;
    }
    p->has_manifest = 1;
    *t = eol;
    return UR_OK;
}

/* Parse a mark: "next_item <n>\n", "manifest <base64>\n" (the database's manifest as of the
 * mark; absent from marks of earlier versions), then "<name> <size> <crc32c hex>\n" per data
 * file. */
static int parse_mark(ur_job_rprogress *p, const char *t, uint64_t *next_item, ur_err *err)
{
    char *end;
    int rc;
    if (strncmp(t, "next_item ", 10) != 0 || t[10] < '0' || t[10] > '9') {
        return ur_err_set(err, UR_ECORRUPT, "%s: not a progress mark", p->mark_key);
    }
    errno = 0;
    *next_item = strtoull(t + 10, &end, 10);
    t = end;
    rc = errno == 0 ? parse_manifest(p, &t, err) : UR_OK;
    if (rc < 0) {
        return rc;
    }
    while (errno == 0 && *t == '\n' && t[1] != '\0') {
        const char *name = t + 1, *sp = strchr(name, ' ');
        unsigned long long size;
        unsigned long crc;
        pfile *f;
        if (sp == NULL || strncmp(name, "d/", 2) != 0) {
            break;
        }
        size = strtoull(sp + 1, &end, 10);
        if (*end != ' ') {
            break;
        }
        crc = strtoul(end + 1, &end, 16);
        f = entry(p, name, (size_t)(sp - name), err);
        if (f == NULL) {
            return UR_ENOMEM;
        }
        f->size = size;
        f->crc = (uint32_t)crc;
        f->in_store = 1;
        t = end;
    }
    if (errno != 0 || *t != '\n' || t[1] != '\0') {
        return ur_err_set(err, UR_ECORRUPT, "%s: a malformed progress mark", p->mark_key);
    }
    return UR_OK;
}

int ur_job_rprogress_read(ur_job_rprogress *p, uint64_t *next_item, ur_err *err)
{
    ur_buf b;
    int rc;
    *next_item = 0;
    ur_buf_init(&b, MAX_MARK);
    rc = ur_kvstore_read(p->kv, p->mark_key, &b, err);
    if (rc == UR_ENOTFOUND) {
        ur_buf_dispose(&b);
        return UR_OK;
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(&b, "", 1, err);
    }
    if (rc == UR_OK) {
        rc = parse_mark(p, (const char *)b.data, next_item, err);
    }
    ur_buf_dispose(&b);
    return rc;
}

/* Copy `key` from `from` to `to`, the same key. */
static int copy_key(ur_kvstore *from, ur_kvstore *to, const char *key, const char *to_key,
                    ur_err *err)
{
    ur_kvstore_view v;
    int rc = ur_kvstore_read_view_once(from, key, &v, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_write_view(to, to_key, &v, err);
    }
    ur_kvstore_view_release(&v);
    return rc;
}

typedef struct {
    ur_job_rprogress *p;
    ur_kvstore *to;
    int rc;
    ur_err *err;
} meta_copy;

static int copy_meta(void *ctx, const char *key, uint64_t size)
{
    meta_copy *m = ctx;
    (void)size;
    m->rc = copy_key(m->p->kv, m->to, key, key + strlen(m->p->meta_key), m->err);
    return m->rc < 0;
}

int ur_job_rprogress_fetch(ur_job_rprogress *p, const char *db_dir, const char *meta_dir,
                           ur_err *err)
{
    ur_kvstore *db = NULL, *local = NULL, *meta = NULL;
    int rc = ur_fs_mkdirs(db_dir, err);
    if (rc == UR_OK) {
        rc = ur_fs_mkdirs(meta_dir, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_open_url(&db, p->db_url, 0, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_file_open(&local, db_dir, 1, err);
    }
    /* the data files the mark lists (the database's, as of the mark), then its manifest */
    for (size_t i = 0; i < p->n && rc == UR_OK; i++) {
        if (p->f[i].in_store) {
            rc = copy_key(db, local, p->f[i].name, p->f[i].name, err);
        }
    }
    if (rc == UR_OK && p->has_manifest) {
        rc = ur_kvstore_write(local, "manifest.ocdbt", p->manifest.data, p->manifest.len, err);
    } else if (rc == UR_OK) {
        rc = copy_key(db, local, "manifest.ocdbt", "manifest.ocdbt", err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_file_open(&meta, meta_dir, 1, err);
    }
    if (rc == UR_OK) {
        meta_copy m = {p, meta, UR_OK, err};
        rc = ur_kvstore_list(p->kv, p->meta_key, copy_meta, &m, err);
        rc = m.rc < 0 ? m.rc : rc;
    }
    if (rc < 0) {
        ur_err_wrap(err, "fetching the share's progress from %s", p->db_url);
    }
    ur_kvstore_close(db);
    ur_kvstore_close(local);
    ur_kvstore_close(meta);
    return rc;
}

/* The CRC-32C of local data file f (computed once: a closed data file never changes). */
static int local_crc(ur_job_rprogress *p, pfile *f, ur_err *err)
{
    ur_kvstore_view v;
    int rc;
    if (f->local_known) {
        return UR_OK;
    }
    rc = ur_kvstore_read_view_once(p->local, f->name, &v, err);
    if (rc == UR_OK) {
        /* a data file of gigabytes: its pages given back as the sum goes */
        uint32_t crc = 0;
        for (size_t at = 0; at < v.len; at += CRC_STEP) {
            size_t n = v.len - at < CRC_STEP ? v.len - at : CRC_STEP;
            crc = ur_crc32c(crc, v.data + at, n);
            ur_fs_map_forget(&v.map_, at + n);
        }
        f->local_crc = crc;
        f->local_known = 1;
    }
    ur_kvstore_view_release(&v);
    return rc;
}

/* ur_job_upload_opts.sent: the store holds this very file (name, size and CRC-32C). */
static int sent(void *ctx, const char *key, uint64_t size)
{
    ur_job_rprogress *p = ctx;
    size_t at;
    ur_err ignored;
    if (ur_strmap_get(&p->by_name, key, strlen(key), &at) != 1 || !p->f[at].in_store ||
        p->f[at].size != size) {
        return 0;
    }
    return local_crc(p, &p->f[at], &ignored) == UR_OK && p->f[at].local_crc == p->f[at].crc;
}

typedef struct {
    ur_job_rprogress *p;
    ur_buf *mark;
    int rc;
    ur_err *err;
} mark_ctx;

static int add_to_mark(void *ctx, const char *key, uint64_t size)
{
    mark_ctx *m = ctx;
    pfile *f = entry(m->p, key, strlen(key), m->err);
    m->rc = f != NULL ? local_crc(m->p, f, m->err) : UR_ENOMEM;
    if (m->rc == UR_OK) {
        f->size = size;
        f->listed = 1;
        m->rc = ur_buf_printf(m->mark, m->err, "%s %" PRIu64 " %08" PRIx32 "\n", key, size,
                              f->local_crc);
    }
    return m->rc < 0;
}

int ur_job_rprogress_upload(ur_job_rprogress *p, const char *db_dir, const char *meta_dir,
                            int prune, const volatile sig_atomic_t *cancel, ur_err *err)
{
    ur_job_upload_opts uo;
    int rc;
    memset(&uo, 0, sizeof uo);
    uo.threads = 16;
    uo.sent = sent;
    uo.sent_ctx = p;
    uo.prune = prune;
    rc = ur_kvstore_file_open(&p->local, db_dir, 0, err);
    if (rc == UR_OK) {
        rc = ur_job_upload(db_dir, p->db_url, &uo, cancel, err);
    }
    ur_kvstore_close(p->local);
    p->local = NULL;
    return rc == UR_OK ? ur_job_upload(meta_dir, p->meta_url, &uo, cancel, err) : rc;
}

int ur_job_rprogress_save(ur_job_rprogress *p, const char *db_dir, const char *meta_dir,
                          uint64_t next_item, const volatile sig_atomic_t *cancel, ur_err *err)
{
    ur_buf mark;
    int rc = ur_job_rprogress_upload(p, db_dir, meta_dir, 0, cancel, err);
    ur_buf_init(&mark, 0);
    if (rc == UR_OK) {
        rc = ur_buf_printf(&mark, err, "next_item %" PRIu64 "\nmanifest ", next_item);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_file_open(&p->local, db_dir, 0, err);
    }
    if (rc == UR_OK) { /* the mark carries the manifest it matches (see parse_manifest) */
        ur_kvstore_view v;
        rc = ur_kvstore_read_view(p->local, "manifest.ocdbt", 0, &v, err);
        if (rc == UR_OK) {
            rc = ur_b64_encode(&mark, v.data, v.len, UR_B64_STD, err);
            ur_kvstore_view_release(&v);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_append(&mark, "\n", 1, err);
    }
    for (size_t i = 0; i < p->n; i++) {
        p->f[i].listed = 0;
    }
    if (rc == UR_OK) {
        mark_ctx m = {p, &mark, UR_OK, err};
        rc = ur_kvstore_list(p->local, "d/", add_to_mark, &m, err);
        rc = m.rc < 0 ? m.rc : rc;
    }
    ur_kvstore_close(p->local);
    p->local = NULL;
    if (rc == UR_OK) {
        rc = ur_kvstore_write(p->kv, p->mark_key, mark.data, mark.len, err);
    }
    if (rc == UR_OK) { /* the store now holds what the mark lists */
        for (size_t i = 0; i < p->n; i++) {
            p->f[i].in_store = p->f[i].listed;
            p->f[i].crc = p->f[i].local_crc;
        }
    }
    ur_buf_dispose(&mark);
    return rc;
}
