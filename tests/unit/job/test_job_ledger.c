/* The ledger of a shared run (src/job/job_ledger.h) over the memory store: run.txt created
 * once, the start time, the shares' done marks, the status text, and the claim with either
 * liveness (a lock held; a claim naming this process index), also with each of its store
 * operations failing in turn. */
#include "ur_test.h"

#include "job/job_ledger.h"

#include "unroll/alloc.h"
#include "unroll/buf.h"
#include "unroll/kvstore.h"

#include <stdlib.h>
#include <string.h>

static ur_kvstore *mem(void)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    assert_int_equal(ur_kvstore_mem_new(&kv, &err), UR_OK);
    return kv;
}

static void read_key(ur_kvstore *kv, const char *key, ur_buf *out)
{
    ur_err err;
    ur_buf_reset(out);
    assert_int_equal(ur_kvstore_read(kv, key, out, &err), UR_OK);
    assert_int_equal(ur_buf_append(out, "", 1, &err), UR_OK);
}

static void test_job_ledger__run_created_once(void **state)
{
    ur_kvstore *kv = mem();
    ur_buf b;
    ur_err err;
    int created = -1, found = -1;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_job_ledger_run_read(kv, &b, &found, &err), UR_OK);
    assert_int_equal(found, 0);
    assert_int_equal(ur_job_ledger_run_create(kv, "processes 2\ninput /a\n", &created, &err),
                     UR_OK);
    assert_int_equal(created, 1);
    /* a second process's create leaves the first text */
    assert_int_equal(ur_job_ledger_run_create(kv, "processes 3\ninput /b\n", &created, &err),
                     UR_OK);
    assert_int_equal(created, 0);
    assert_int_equal(ur_job_ledger_run_read(kv, &b, &found, &err), UR_OK);
    assert_int_equal(found, 1);
    assert_string_equal((const char *)b.data, "processes 2\ninput /a\n");
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_job_ledger__run_text_parsed(void **state)
{
    ur_job_run_info info;
    ur_err err;
    (void)state;
    assert_int_equal(ur_job_run_info_parse(&info,
                                           "unroll multi-process run 1\nprocesses 4\n"
                                           "input s3://b/in\nunit base/0\nunit loras/x/0\n",
                                           "/stage", &err),
                     UR_OK);
    assert_int_equal(info.count, 4);
    assert_string_equal(info.input, "s3://b/in");
    assert_int_equal(info.n_units, 2);
    assert_string_equal(info.units[0], "base/0");
    assert_string_equal(info.units[1], "loras/x/0");
    ur_job_run_info_dispose(&info);
    /* no units: the one step */
    assert_int_equal(ur_job_run_info_parse(&info, "processes 1\n", "/stage", &err), UR_OK);
    assert_int_equal(info.n_units, 0);
    assert_null(info.input);
    ur_job_run_info_dispose(&info);
    /* no count, a count out of range, trailing bytes */
    const char *bad[] = {"input /a\n", "processes 0\n", "processes 65537\n", "processes 2x\n",
                         "processes \n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(ur_job_run_info_parse(&info, bad[i], "/stage", &err), UR_ECORRUPT);
        assert_non_null(strstr(err.msg, "/stage/run.txt"));
        assert_null(info.units);
    }
    /* the first "input" line is the input */
    assert_int_equal(
        ur_job_run_info_parse(&info, "processes 2\ninput /x/y\ninput /z\n", "/stage", &err),
        UR_OK);
    assert_string_equal(info.input, "/x/y");
    ur_job_run_info_dispose(&info);
}

static void test_job_ledger__started_once(void **state)
{
    ur_kvstore *kv = mem();
    ur_err err;
    ur_buf b;
    int64_t first = 0, again = 0;
    (void)state;
    unsetenv("SOURCE_DATE_EPOCH");
    ur_buf_init(&b, 0);
    assert_int_equal(ur_job_ledger_started(kv, "/stage", &first, &err), UR_OK);
    assert_true(first > 1600000000LL * 1000000000LL);
    /* every later process reads the first one's time */
    assert_int_equal(ur_kvstore_write(kv, "started", "12345\n", 6, &err), UR_OK);
    assert_int_equal(ur_job_ledger_started(kv, "/stage", &again, &err), UR_OK);
    assert_int_equal(again, 12345);
    assert_int_equal(ur_kvstore_write(kv, "started", "soon\n", 5, &err), UR_OK);
    assert_int_equal(ur_job_ledger_started(kv, "/stage", &again, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "/stage/started"));
    ur_kvstore_close(kv);
    /* SOURCE_DATE_EPOCH: that time, and nothing written */
    kv = mem();
    setenv("SOURCE_DATE_EPOCH", "7", 1);
    assert_int_equal(ur_job_ledger_started(kv, "/stage", &again, &err), UR_OK);
    unsetenv("SOURCE_DATE_EPOCH");
    assert_int_equal(again, 7000000000LL);
    assert_int_equal(ur_kvstore_read(kv, "started", &b, &err), UR_ENOTFOUND);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_job_ledger__done_marks_and_status(void **state)
{
    ur_kvstore *kv = mem();
    ur_buf names, out, summary;
    ur_err err;
    int done = -1, missing = -1;
    (void)state;
    ur_buf_init(&names, 0);
    ur_buf_init(&out, 0);
    ur_buf_init(&summary, 0);
    assert_int_equal(ur_job_ledger_mark_done(kv, 1, "12 arrays, 3 MiB\n", &err), UR_OK);
    assert_int_equal(ur_job_ledger_is_done(kv, 1, &done, &summary, &err), UR_OK);
    assert_int_equal(done, 1);
    assert_string_equal((const char *)summary.data, "12 arrays, 3 MiB");
    assert_int_equal(ur_job_ledger_is_done(kv, 0, &done, NULL, &err), UR_OK);
    assert_int_equal(done, 0);
    assert_int_equal(ur_job_ledger_missing(kv, 3, &names, &missing, &err), UR_OK);
    assert_int_equal(missing, 2);
    assert_int_equal(ur_buf_append(&names, "", 1, &err), UR_OK);
    assert_string_equal((const char *)names.data, "0, 2");
    assert_int_equal(ur_job_ledger_status(kv, 3, "/stage", &out, &err), UR_OK);
    assert_int_equal(ur_buf_append(&out, "", 1, &err), UR_OK);
    assert_string_equal((const char *)out.data,
                        "share 0: not complete\nshare 1: complete: 12 arrays, 3 MiB\n"
                        "share 2: not complete\n1 of 3 shares complete; /stage: not a "
                        "checkpoint until the last share (or unroll merge) publishes it\n");
    /* redone: the mark goes */
    assert_int_equal(ur_job_ledger_clear_done(kv, 1, &err), UR_OK);
    assert_int_equal(ur_job_ledger_missing(kv, 3, NULL, &missing, &err), UR_OK);
    assert_int_equal(missing, 3);
    /* many missing: the first 16 named */
    ur_buf_reset(&names);
    assert_int_equal(ur_job_ledger_missing(kv, 40, &names, &missing, &err), UR_OK);
    assert_int_equal(missing, 40);
    assert_int_equal(ur_buf_append(&names, "", 1, &err), UR_OK);
    assert_string_equal((const char *)names.data,
                        "0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, ...");
    /* a store that cannot say is an error, not "missing" */
    ur_kvstore_mem_fault(kv, 1, 1);
    assert_int_equal(ur_job_ledger_missing(kv, 3, NULL, &missing, &err), UR_EIO);
    ur_kvstore_mem_fault(kv, 0, 0);
    ur_buf_dispose(&names);
    ur_buf_dispose(&out);
    ur_buf_dispose(&summary);
    ur_kvstore_close(kv);
}

/* A liveness for the tests: `busy` as enter's answer, `dead` as holder_dead's. */
typedef struct {
    int busy, dead, entered;
    char seen[256];
} fake_live;

static int fake_enter(void *ctx, int *busy, ur_err *err)
{
    fake_live *f = ctx;
    (void)err;
    f->entered++;
    *busy = f->busy;
    return UR_OK;
}

static int fake_dead(void *ctx, const char *have)
{
    fake_live *f = ctx;
    snprintf(f->seen, sizeof f->seen, "%s", have);
    return f->dead;
}

static void test_job_ledger__claim(void **state)
{
    ur_kvstore *kv = mem();
    fake_live f = {0};
    ur_job_liveness live = {fake_enter, fake_dead, &f};
    ur_buf b;
    ur_err err;
    int won = -1, took = -1;
    (void)state;
    ur_buf_init(&b, 0);
    /* a live process is finishing: nothing is created */
    f.busy = 1;
    assert_int_equal(ur_job_ledger_claim(kv, "A\n", &live, &won, &took, &err), UR_OK);
    assert_int_equal(won, 0);
    assert_int_equal(f.entered, 1);
    assert_int_equal(ur_kvstore_read(kv, UR_JOB_LEDGER_CLAIM, &b, &err), UR_ENOTFOUND);
    /* the first claim wins */
    f.busy = 0;
    assert_int_equal(ur_job_ledger_claim(kv, "A\n", &live, &won, &took, &err), UR_OK);
    assert_int_equal(won, 1);
    assert_int_equal(took, 0);
    /* its own create retried after a lost answer: still its claim */
    assert_int_equal(ur_job_ledger_claim(kv, "A\n", &live, &won, &took, &err), UR_OK);
    assert_int_equal(won, 1);
    assert_int_equal(took, 0);
    /* another process, the holder alive: not won, the claim kept */
    assert_int_equal(ur_job_ledger_claim(kv, "B\n", &live, &won, &took, &err), UR_OK);
    assert_int_equal(won, 0);
    assert_string_equal(f.seen, "A\n");
    read_key(kv, UR_JOB_LEDGER_CLAIM, &b);
    assert_string_equal((const char *)b.data, "A\n");
    /* the holder dead: taken over, the new holder named */
    f.dead = 1;
    assert_int_equal(ur_job_ledger_claim(kv, "B\n", &live, &won, &took, &err), UR_OK);
    assert_int_equal(won, 1);
    assert_int_equal(took, 1);
    read_key(kv, UR_JOB_LEDGER_CLAIM, &b);
    assert_string_equal((const char *)b.data, "B\n");
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

/* The claim with its k-th store operation failing (alone, or with every later one): an error
 * or no claim, never a claim won with the error; and a retry without faults wins it. */
static void test_job_ledger__claim_faults(void **state)
{
    fake_live f = {0};
    ur_job_liveness live = {fake_enter, fake_dead, &f};
    unsigned ops;
    ur_err err;
    int won, took;
    (void)state;
    for (int taken = 0; taken < 2; taken++) {
        ur_kvstore *kv = mem();
        if (taken) { /* a dead holder's claim is there: the takeover path */
            assert_int_equal(ur_kvstore_write(kv, UR_JOB_LEDGER_CLAIM, "A\n", 2, &err), UR_OK);
            f.dead = 1;
        }
        ur_kvstore_mem_fault(kv, 0, 0);
        assert_int_equal(ur_job_ledger_claim(kv, "B\n", &live, &won, &took, &err), UR_OK);
        assert_int_equal(won, 1);
        ops = ur_kvstore_mem_ops(kv);
        assert_true(ops >= 1);
        ur_kvstore_close(kv);
        for (unsigned k = 1; k <= ops; k++) {
            for (int once = 0; once < 2; once++) {
                int rc;
                kv = mem();
                if (taken) {
                    assert_int_equal(ur_kvstore_write(kv, UR_JOB_LEDGER_CLAIM, "A\n", 2, &err),
                                     UR_OK);
                }
                ur_kvstore_mem_fault(kv, k, once);
                won = -1;
                rc = ur_job_ledger_claim(kv, "B\n", &live, &won, &took, &err);
                assert_true(rc == UR_EIO || rc == UR_OK);
                if (rc < 0) {
                    assert_int_equal(won, 0);
                }
                ur_kvstore_mem_fault(kv, 0, 0);
                assert_int_equal(ur_job_ledger_claim(kv, "B\n", &live, &won, &took, &err), UR_OK);
                assert_int_equal(won, 1);
                ur_kvstore_close(kv);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_ledger__run_created_once),
        cmocka_unit_test(test_job_ledger__run_text_parsed),
        cmocka_unit_test(test_job_ledger__started_once),
        cmocka_unit_test(test_job_ledger__done_marks_and_status),
        cmocka_unit_test(test_job_ledger__claim),
        cmocka_unit_test(test_job_ledger__claim_faults),
    };
    return cmocka_run_group_tests_name("job_ledger", tests, NULL, NULL);
}
