/* The claim a single-process conversion takes on its object-store destination
 * (include/unroll/job_claim.h). */
#define _GNU_SOURCE /* gethostname */
#include "unroll/job_claim.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/clock.h"
#include "unroll/kvstore.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLAIM ((size_t)1 << 20)
#define HOLDER_HEAD "unroll single-process run, pid "

struct ur_job_claim {
    ur_kvstore *kv; /* the step S */
    char *step;
};

static void claim_free(ur_job_claim *c)
{
    if (c != NULL) {
        ur_kvstore_close(c->kv);
        ur_free(c->step);
        ur_free(c);
    }
}

/* A number drawn for each claim taken: the claim found at S is this attempt's own (a create
 * retried after its answer was lost) only when it holds this number. pid, host and time
 * alone do not tell: a container restarted in its pod has the same host name and often the
 * same pid, and two attempts can start in one second. */
static unsigned long long attempt_number(void)
{
    unsigned long long n = 0;
    if (getrandom(&n, sizeof n, 0) != (ssize_t)sizeof n) {
        int64_t ns = ur_clock_now_ns();
        n = ((unsigned long long)(ns / 1000000000) << 30) ^ (unsigned long long)(ns % 1000000000) ^
            ((unsigned long long)getpid() << 40);
    }
    return n;
}

/* Our claim's text: the holder line, then the identity. */
static int claim_text(ur_buf *out, const char *identity, ur_err *err)
{
    char host[256] = "", when[32] = "?";
    time_t now = ur_clock_now_s();
    struct tm tm;
    (void)gethostname(host, sizeof host - 1);
    if (gmtime_r(&now, &tm) != NULL) {
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    }
    return ur_buf_printf(out, err, HOLDER_HEAD "%ld on %s, started %s, attempt %016llx\n%s",
                         (long)getpid(), host, when, attempt_number(), identity);
}

/* 1 when the holder line `have` ("... pid <pid> on <host>, started ...") names a process
 * alive on this host (not this one). */
static int holder_alive_here(const char *have)
{
    char host[256] = "";
    const char *at;
    char *end;
    size_t n;
    long pid;
    if (strncmp(have, HOLDER_HEAD, sizeof HOLDER_HEAD - 1) != 0) {
        return 0;
    }
    errno = 0;
    pid = strtol(have + sizeof HOLDER_HEAD - 1, &end, 10);
    if (errno != 0 || pid <= 0 || pid == (long)getpid() || strncmp(end, " on ", 4) != 0) {
        return 0;
    }
    at = end + 4;
    (void)gethostname(host, sizeof host - 1);
    n = strlen(host);
    if (strncmp(at, host, n) != 0 || at[n] != ',') {
        return 0;
    }
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

/* The claim found at S (`have`, NUL-terminated): taken over (*took_over) when it is a dead
 * attempt of this run, else refused. */
static int claim_held(ur_job_claim *c, const char *have, const ur_buf *mine, const char *identity,
                      int *took_over, ur_err *err)
{
    const char *nl = strchr(have, '\n');
    int same = nl != NULL && strcmp(nl + 1, identity) == 0;
    int len = nl != NULL ? (int)(nl - have) : (int)strlen(have);
    if (strcmp(have, (const char *)mine->data) == 0) {
        return UR_OK; /* our create retried after its answer was lost: ours */
    }
    if (same && !holder_alive_here(have)) {
        int rc = ur_kvstore_write(c->kv, UR_JOB_CLAIM_NAME, mine->data, mine->len, err);
        *took_over = rc == UR_OK;
        return rc;
    }
    return ur_err_set(
        err, UR_EIO,
        "%s is being written by another run (%.*s%s; its claim: %s/" UR_JOB_CLAIM_NAME
        "): two runs into one destination would mix their objects. Once that run "
        "is dead, rerun it (the same input and arguments take its claim over), or "
        "delete %s/" UR_JOB_CLAIM_NAME " and rerun with --replace",
        c->step, len > 300 ? 300 : len, have, same ? ", alive on this host" : "", c->step,
        c->step);
}

int ur_job_claim_take(ur_job_claim **out, const char *step, const char *identity, int *took_over,
                      ur_err *err)
{
    ur_job_claim *c = ur_calloc(1, sizeof *c);
    size_t n = strlen(step);
    ur_buf mine, have;
    int rc;

    *out = NULL;
    *took_over = 0;
    if (c == NULL) {
        return ur_err_oom(err);
    }
    while (n > 0 && step[n - 1] == '/') {
        n--;
    }
    ur_buf_init(&mine, 0);
    ur_buf_init(&have, MAX_CLAIM);
    c->step = ur_strndup(step, n);
    rc = c->step != NULL ? ur_kvstore_open_url(&c->kv, c->step, 1, err) : ur_err_oom(err);
    if (rc == UR_OK) {
        rc = claim_text(&mine, identity, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_create(c->kv, UR_JOB_CLAIM_NAME, mine.data, mine.len, err);
    }
    if (rc == UR_EEXIST) {
        rc = ur_kvstore_read(c->kv, UR_JOB_CLAIM_NAME, &have, err);
        if (rc == UR_ENOTFOUND) { /* released in between */
            rc = ur_err_set(err, UR_EIO,
                            "%s: another run's claim came and went while this one was taken "
                            "(rerun)",
                            c->step);
        } else if (rc == UR_OK) {
            rc = ur_buf_append(&have, "", 1, err);
            if (rc == UR_OK) {
                rc = claim_held(c, (const char *)have.data, &mine, identity, took_over, err);
            }
        } else {
            ur_err_wrap(err, "claiming %s", c->step);
        }
    } else if (rc < 0 && c->step != NULL) {
        ur_err_wrap(err, "claiming %s", c->step);
    }
    ur_buf_dispose(&mine);
    ur_buf_dispose(&have);
    if (rc < 0) {
        claim_free(c);
        return rc;
    }
    *out = c;
    return UR_OK;
}

/* A claim create whose first attempt the HTTP layer gave up on (no answer within the
 * first-byte timeout) may still be applied by the server after the run's delete, bringing
 * the claim back: the delete is checked, and redone a few times over about a second. A
 * server slower than that still leaves the claim behind (seen with SeaweedFS under load and
 * a 3 s timeout); the rerun of the same command takes it over, any other run is refused until
 * it is deleted by hand. Known defect: a tombstone instead of a delete would close it. */
#define RELEASE_ROUNDS 4
#define RELEASE_WAIT_NS 250000000L

int ur_job_claim_release(ur_job_claim *c, ur_err *err)
{
    int rc = UR_OK;
    for (int round = 0; c != NULL && round < RELEASE_ROUNDS; round++) {
        uint64_t size;
        if (round > 0) {
            struct timespec wait = {0, RELEASE_WAIT_NS};
            nanosleep(&wait, NULL);
        }
        int drc = ur_kvstore_delete(c->kv, UR_JOB_CLAIM_NAME, round == 0 ? err : NULL);
        if (drc < 0 && drc != UR_ENOTFOUND) {
            /* the first delete failing leaves the claim (the rerun takes it over); a later
             * one only repeats a delete that was answered */
            if (round == 0) {
                rc = drc;
                ur_err_wrap(err, "deleting the run's claim %s/" UR_JOB_CLAIM_NAME, c->step);
            }
            break;
        }
        if (ur_kvstore_size(c->kv, UR_JOB_CLAIM_NAME, &size, NULL) == UR_ENOTFOUND) {
            break; /* gone */
        }
    }
    claim_free(c);
    return rc;
}
