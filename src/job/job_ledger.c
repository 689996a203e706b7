/* The ledger of a shared run over a store: run.txt, the shares' done marks, the finish's claim.
 * See job_ledger.h. */
#define _GNU_SOURCE /* gethostname in older glibc headers */

#include "job_ledger.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/job_share.h"
#include "unroll/num.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_RUN_TEXT ((size_t)16 << 20)
#define MAX_SUMMARY 4096
#define MAX_CLAIM 4096

void ur_job_run_info_dispose(ur_job_run_info *info)
{
    for (size_t k = 0; k < info->n_units; k++) {
        ur_free(info->units[k]);
    }
    ur_free(info->units);
    ur_free(info->input);
    memset(info, 0, sizeof *info);
}

/* Each line of text: "key value" with its value (n bytes); a nonzero return stops. */
static int add_line(ur_job_run_info *info, size_t *cap, const char *p, size_t len, ur_err *err)
{
    if (len > 5 && strncmp(p, "unit ", 5) == 0) {
        char **more = ur_grow(info->units, cap, info->n_units, sizeof *more, 4);
        if (more == NULL) {
            return ur_err_oom(err);
        }
        info->units = more;
        info->units[info->n_units] = ur_strndup(p + 5, len - 5);
        return info->units[info->n_units++] != NULL ? UR_OK : ur_err_oom(err);
    }
    if (len > 6 && strncmp(p, "input ", 6) == 0 && info->input == NULL) {
        info->input = ur_strndup(p + 6, len - 6);
        return info->input != NULL ? UR_OK : ur_err_oom(err);
    }
    if (len > 10 && strncmp(p, "processes ", 10) == 0 && info->count == 0) {
        int64_t c = 0;
        info->count = ur_num_parse_i64(p + 10, len - 10, &c) == 0 && c >= 1 &&
                              c <= UR_JOB_SHARE_MAX
                          ? (int)c
                          : -1;
    }
    return UR_OK;
}

int ur_job_run_info_parse(ur_job_run_info *info, const char *text, const char *where, ur_err *err)
{
    size_t cap = 0;
    int rc = UR_OK;
    memset(info, 0, sizeof *info);
    for (const char *p = text; p != NULL && *p != '\0' && rc == UR_OK;) {
        const char *nl = strchr(p, '\n');
        rc = add_line(info, &cap, p, nl != NULL ? (size_t)(nl - p) : strlen(p), err);
        p = nl != NULL ? nl + 1 : NULL;
    }
    if (rc == UR_OK && info->count < 1) {
        rc = ur_err_set(err, UR_ECORRUPT, "%s/" UR_JOB_LEDGER_RUN ": no process count", where);
    }
    if (rc < 0) {
        ur_job_run_info_dispose(info);
    }
    return rc;
}

int ur_job_ledger_run_create(ur_kvstore *kv, const char *text, int *created, ur_err *err)
{
    int rc = ur_kvstore_create(kv, UR_JOB_LEDGER_RUN, text, strlen(text), err);
    *created = rc == UR_OK;
    return rc == UR_EEXIST ? UR_OK : rc;
}

int ur_job_ledger_run_read(ur_kvstore *kv, ur_buf *out, int *found, ur_err *err)
{
    return ur_kvstore_read_opt(kv, UR_JOB_LEDGER_RUN, MAX_RUN_TEXT, out, found, err);
}

int ur_job_ledger_started(ur_kvstore *kv, const char *where, int64_t *ns, ur_err *err)
{
    char text[32];
    ur_buf have;
    int64_t v = 0;
    int found = 0, rc;
    if (ur_clock_fixed_ns(ns)) {
        return UR_OK;
    }
    *ns = ur_clock_now_ns();
    snprintf(text, sizeof text, "%lld\n", (long long)*ns);
    rc = ur_kvstore_create(kv, "started", text, strlen(text), err);
    if (rc != UR_EEXIST) {
        return rc;
    }
    ur_buf_init(&have, 0);
    rc = ur_kvstore_read_opt(kv, "started", 64, &have, &found, err);
    if (rc == UR_OK && found && have.len > 0 && have.data[have.len - 1] == '\n') {
        have.len--; /* written with a newline */
    }
    if (rc == UR_OK && found &&
        (ur_num_parse_i64((const char *)have.data, have.len, &v) < 0 || v <= 0)) {
        rc = ur_err_set(err, UR_ECORRUPT, "%s/started: not a time", where);
    }
    if (rc == UR_OK && found) {
        *ns = v;
    }
    ur_buf_dispose(&have);
    return rc;
}

static void done_key(char *key, size_t size, int i)
{
    snprintf(key, size, "shares/%d.done", i);
}

int ur_job_ledger_is_done(ur_kvstore *kv, int i, int *done, ur_buf *summary, ur_err *err)
{
    char key[48];
    uint64_t size;
    int rc;
    done_key(key, sizeof key, i);
    if (summary != NULL) {
        rc = ur_kvstore_read_opt(kv, key, MAX_SUMMARY, summary, done, err);
        while (rc == UR_OK && summary->len > 0 && summary->data[summary->len - 1] == '\n') {
            summary->data[--summary->len] = '\0';
        }
        return rc;
    }
    rc = ur_kvstore_size(kv, key, &size, err);
    *done = rc == UR_OK;
    return rc == UR_ENOTFOUND ? UR_OK : rc;
}

int ur_job_ledger_mark_done(ur_kvstore *kv, int i, const char *summary, ur_err *err)
{
    ur_kvstore_writer *w = NULL;
    char key[48];
    int rc;
    done_key(key, sizeof key, i);
    rc = ur_kvstore_writer_open(&w, kv, key, UR_KVSTORE_WRITER_ATOMIC, err);
    if (rc == UR_OK) {
        rc = ur_kvstore_writer_append(w, summary, strlen(summary), err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_writer_finish(w, err);
        w = NULL;
    }
    ur_kvstore_writer_abort(w);
    return rc;
}

int ur_job_ledger_clear_done(ur_kvstore *kv, int i, ur_err *err)
{
    char key[48];
    done_key(key, sizeof key, i);
    return ur_kvstore_delete(kv, key, err);
}

int ur_job_ledger_missing(ur_kvstore *kv, int count, ur_buf *names, int *missing, ur_err *err)
{
    int rc = UR_OK;
    *missing = 0;
    for (int i = 0; i < count && rc == UR_OK; i++) {
        int done = 0;
        rc = ur_job_ledger_is_done(kv, i, &done, NULL, err);
        if (rc < 0 || done) {
            continue;
        }
        ++*missing;
        if (names != NULL && *missing <= 16) {
            rc = ur_buf_printf(names, err, "%s%d", *missing > 1 ? ", " : "", i);
        } else if (names != NULL && *missing == 17) {
            rc = ur_buf_printf(names, err, ", ...");
        }
    }
    return rc;
}

int ur_job_ledger_status(ur_kvstore *kv, int count, const char *where, ur_buf *out, ur_err *err)
{
    ur_buf summary;
    int rc = UR_OK, complete = 0;
    ur_buf_init(&summary, 0);
    for (int i = 0; i < count && rc == UR_OK; i++) {
        int done = 0;
        rc = ur_job_ledger_is_done(kv, i, &done, &summary, err);
        if (rc == UR_OK && done) {
            complete++;
            rc = ur_buf_printf(out, err, "share %d: complete: %s\n", i,
                               (const char *)summary.data);
        } else if (rc == UR_OK) {
            rc = ur_buf_printf(out, err, "share %d: not complete\n", i);
        }
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(out, err,
                           "%d of %d shares complete; %s: not a checkpoint until the last "
                           "share (or unroll merge) publishes it\n",
                           complete, count, where);
    }
    ur_buf_dispose(&summary);
    return rc;
}

void ur_job_ledger_who(char *out, size_t size, int index, int count)
{
    char host[64] = "";
    long long started = (long long)(ur_clock_now_ns() / 1000000000);
    gethostname(host, sizeof host - 1);
    if (index >= 0) {
        snprintf(out, size, "process %d of %d, pid %ld on %s, started %lld\n", index, count,
                 (long)getpid(), host, started);
    } else {
        snprintf(out, size, "unroll merge, pid %ld on %s, started %lld\n", (long)getpid(), host,
                 started);
    }
}

int ur_job_ledger_claim(ur_kvstore *kv, const char *who, const ur_job_liveness *live, int *won,
                        int *took_over, ur_err *err)
{
    ur_buf have;
    int busy = 0, found = 0, rc;

    *won = *took_over = 0;
    rc = live->enter != NULL ? live->enter(live->ctx, &busy, err) : UR_OK;
    if (rc < 0 || busy) {
        return rc;
    }
    rc = ur_kvstore_create(kv, UR_JOB_LEDGER_CLAIM, who, strlen(who), err);
    if (rc != UR_EEXIST) {
        *won = rc == UR_OK;
        return rc;
    }
    ur_buf_init(&have, 0);
    rc = ur_kvstore_read_opt(kv, UR_JOB_LEDGER_CLAIM, MAX_CLAIM, &have, &found, err);
    if (rc == UR_OK && found && strcmp((const char *)have.data, who) == 0) {
        *won = 1; /* our own create, retried after its answer was lost */
    } else if (rc == UR_OK && live->holder_dead(live->ctx, found ? (const char *)have.data : "")) {
        /* our name in the claim, for the next one to find */
        rc = ur_kvstore_write(kv, UR_JOB_LEDGER_CLAIM, who, strlen(who), err);
        *won = *took_over = rc == UR_OK;
    }
    ur_buf_dispose(&have);
    return rc;
}
