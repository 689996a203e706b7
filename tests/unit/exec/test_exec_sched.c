/* The executor's scheduler on its own (it knows nothing of checkpoints): items of uneven cost
 * on 1-4 threads are committed exactly once each and strictly in order; a failure in run or
 * commit stops the run with that error and commits nothing after it; a cancel flag stops it;
 * jobs are reused rather than made per item; the memory budget is split, not the threads; a
 * run from first_item (a process's share, a resume) claims and commits only the items from
 * there. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "exec/exec_sched.h"
#include "unroll/alloc.h"

#include <pthread.h>
#include <time.h>

typedef struct {
    uint64_t item;
} job;

typedef struct {
    uint64_t *log; /* committed items, in commit order */
    uint64_t n_log;
    uint64_t fail_run, fail_commit; /* item that fails (UINT64_MAX: none) */
    volatile sig_atomic_t cancel;
    uint64_t cancel_at;
    int jobs_made;
    pthread_mutex_t lock;
} ctx;

static int claim(void *user, ur_sched *s, uint64_t item, void *j, ur_err *err)
{
    (void)user, (void)s, (void)err;
    ((job *)j)->item = item;
    return UR_OK;
}

static int run(void *user, ur_sched *s, int w, void *j, ur_err *err)
{
    ctx *c = user;
    uint64_t item = ((job *)j)->item;
    struct timespec ts = {0, (long)((item * 7919) % 5) * 20000};
    (void)s, (void)w;
    nanosleep(&ts, NULL); /* uneven costs: items finish out of order */
    if (item == c->cancel_at) {
        c->cancel = 1;
    }
    if (item == c->fail_run) {
        return ur_err_set(err, UR_EIO, "run failed at %llu", (unsigned long long)item);
    }
    return UR_OK;
}

static int commit(void *user, ur_sched *s, void *j, ur_err *err)
{
    ctx *c = user;
    uint64_t item = ((job *)j)->item;
    (void)s;
    if (item == c->fail_commit) {
        return ur_err_set(err, UR_ECORRUPT, "commit failed at %llu", (unsigned long long)item);
    }
    c->log[c->n_log++] = item; /* one committer at a time: no lock */
    return UR_OK;
}

static void *job_new(void *user)
{
    ctx *c = user;
    pthread_mutex_lock(&c->lock);
    c->jobs_made++;
    pthread_mutex_unlock(&c->lock);
    return ur_calloc(1, sizeof(job));
}

static void job_free(void *user, void *j)
{
    (void)user;
    ur_free(j);
}

static const ur_sched_ops ops = {claim, run, commit, job_new, job_free};

static int go_from(ctx *c, uint64_t first, uint64_t n, int threads, ur_err *err)
{
    ur_sched_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.n_items = n;
    cfg.first_item = first;
    cfg.threads = threads;
    cfg.ops = &ops;
    cfg.user = c;
    cfg.cancel = &c->cancel;
    c->log = ur_calloc(n ? n : 1, sizeof *c->log);
    c->n_log = 0;
    c->jobs_made = 0;
    c->cancel = 0;
    pthread_mutex_init(&c->lock, NULL);
    return ur_sched_run(&cfg, err);
}

static int go(ctx *c, uint64_t n, int threads, ur_err *err)
{
    return go_from(c, 0, n, threads, err);
}

static void done(ctx *c)
{
    ur_free(c->log);
    pthread_mutex_destroy(&c->lock);
}

static void test_exec_sched__in_order(void **state)
{
    (void)state;
    for (int t = 1; t <= 4; t++) {
        ctx c = {.fail_run = UINT64_MAX, .fail_commit = UINT64_MAX, .cancel_at = UINT64_MAX};
        ur_err err;
        assert_int_equal(go(&c, 500, t, &err), UR_OK);
        assert_int_equal(c.n_log, 500);
        for (uint64_t i = 0; i < 500; i++) {
            assert_int_equal(c.log[i], i);
        }
        assert_true(c.jobs_made <= 2 * t + 1);
        done(&c);
    }
}

static void test_exec_sched__first_item(void **state)
{
    (void)state;
    for (int t = 1; t <= 4; t++) {
        ctx c = {.fail_run = UINT64_MAX, .fail_commit = UINT64_MAX, .cancel_at = UINT64_MAX};
        ur_err err;
        assert_int_equal(go_from(&c, 137, 400, t, &err), UR_OK);
        assert_int_equal(c.n_log, 400 - 137);
        for (uint64_t i = 0; i < c.n_log; i++) {
            assert_int_equal(c.log[i], 137 + i);
        }
        done(&c);
        /* an empty range: nothing claimed, nothing committed */
        assert_int_equal(go_from(&c, 50, 50, t, &err), UR_OK);
        assert_int_equal(c.n_log, 0);
        done(&c);
    }
}

static void test_exec_sched__no_items(void **state)
{
    ctx c = {.fail_run = UINT64_MAX, .fail_commit = UINT64_MAX, .cancel_at = UINT64_MAX};
    ur_err err;
    (void)state;
    assert_int_equal(go(&c, 0, 3, &err), UR_OK);
    assert_int_equal(c.n_log, 0);
    done(&c);
}

static void test_exec_sched__failures(void **state)
{
    (void)state;
    for (int t = 1; t <= 4; t++) {
        ctx c = {.fail_run = 123, .fail_commit = UINT64_MAX, .cancel_at = UINT64_MAX};
        ur_err err;
        assert_int_equal(go(&c, 300, t, &err), UR_EIO);
        assert_non_null(strstr(err.msg, "run failed at 123"));
        assert_true(c.n_log <= 123);
        for (uint64_t i = 0; i < c.n_log; i++) {
            assert_int_equal(c.log[i], i);
        }
        done(&c);

        ctx d = {.fail_run = UINT64_MAX, .fail_commit = 77, .cancel_at = UINT64_MAX};
        assert_int_equal(go(&d, 300, t, &err), UR_ECORRUPT);
        assert_non_null(strstr(err.msg, "commit failed at 77"));
        assert_int_equal(d.n_log, 77);
        done(&d);

        ctx e = {.fail_run = UINT64_MAX, .fail_commit = UINT64_MAX, .cancel_at = 50};
        assert_int_equal(go(&e, 300, t, &err), UR_ECANCELED);
        assert_non_null(strstr(err.msg, "interrupted"));
        assert_true(e.n_log < 300);
        done(&e);
    }
}

static void test_exec_sched__budget(void **state)
{
    const uint64_t MiB = 1 << 20, GiB = MiB << 10;
    (void)state;
    assert_int_equal(ur_sched_share(256 * MiB, 2), 128 * MiB); /* split, not fewer threads */
    assert_int_equal(ur_sched_share(256 * MiB, 0), 256 * MiB);
    assert_int_equal(ur_sched_share(20, 4), 16); /* at least 16 bytes each */
    assert_int_equal(ur_sched_default_memory(8, 16 * GiB, 256 * MiB), 1024 * MiB);
    assert_int_equal(ur_sched_default_memory(64, 16 * GiB, 256 * MiB), 4 * GiB);
    assert_true(ur_sched_cores() >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exec_sched__in_order), cmocka_unit_test(test_exec_sched__first_item),
        cmocka_unit_test(test_exec_sched__no_items), cmocka_unit_test(test_exec_sched__failures),
        cmocka_unit_test(test_exec_sched__budget),
    };
    return cmocka_run_group_tests_name("exec_sched", tests, NULL, NULL);
}
