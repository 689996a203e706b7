/* Publishing (unroll/job_publish.h) without a conversion: the overlap rules on canonical
 * paths, the lock against a second publisher, staging that must still be the run's own, the
 * check of a staged unit, and that siblings of the units survive. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/job_publish.h"
#include "unroll/orbax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ur_test_orbax_publish.%ld", (long)getpid());
    ur_err err;
    ur_fs_remove_tree(tmpdir, &err);
    return ur_fs_mkdirs(tmpdir, &err) == UR_OK ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    ur_err err;
    return ur_fs_remove_tree(tmpdir, &err) == UR_OK ? 0 : -1;
}

static void put(const char *rel, const char *text)
{
    char path[512];
    ur_err err;
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    assert_int_equal(ur_fs_write_file(path, text, strlen(text), &err), UR_OK);
}

static void mk(const char *rel)
{
    char path[512];
    ur_err err;
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    assert_int_equal(ur_fs_mkdirs(path, &err), UR_OK);
}

static int exists(const char *rel)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, rel);
    return ur_fs_exists(path);
}

/* A complete one-leaf step written by the real writer at `step_dir`. */
static void write_step(const char *step_dir)
{
    ur_orbax_writer *w = NULL;
    ur_orbax_key k[1] = {{"x", UR_ORBAX_KEY_DICT}};
    int32_t v = 7;
    ur_err err;
    assert_int_equal(ur_orbax_writer_create(&w, step_dir, NULL, &err), UR_OK);
    assert_int_equal(ur_orbax_writer_add_scalar(w, k, 1, UR_DT_INT32, &v, &err), UR_OK);
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_OK);
}

static void test_job_publish__overlap(void **state)
{
    (void)state;
    char dest[400], in[400], link[400];
    const char *units[1] = {"0"};
    const char *inputs[1] = {in};
    ur_err err;
    mk("o/run/checkpoints/0/items");
    mk("o/run/checkpoints/9/items");
    snprintf(dest, sizeof dest, "%s/o/run/checkpoints/", tmpdir);
    /* a training step beside the unit: fine */
    snprintf(in, sizeof in, "%s/o/run/checkpoints/9/items", tmpdir);
    assert_int_equal(ur_job_publish_check(dest, units, 1, inputs, 1, &err), UR_OK);
    /* the unit itself, spelled with "..", ".", a doubled '/' and a symlink */
    snprintf(in, sizeof in, "%s/o/run/x/../checkpoints/./0//items/", tmpdir);
    assert_int_equal(ur_job_publish_check(dest, units, 1, inputs, 1, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "/o/run/checkpoints/0/items lies inside"));
    snprintf(link, sizeof link, "%s/l", tmpdir);
    snprintf(in, sizeof in, "%s/o/run", tmpdir);
    assert_int_equal(symlink(in, link), 0);
    snprintf(in, sizeof in, "%s/l/checkpoints/0/items", tmpdir);
    assert_int_equal(ur_job_publish_check(dest, units, 1, inputs, 1, &err), UR_EINVAL);
    /* an output inside the input (the output does not exist yet) */
    snprintf(in, sizeof in, "%s/o/run/checkpoints/9/items", tmpdir);
    snprintf(dest, sizeof dest, "%s/o/run/checkpoints/9/items/new/../sub/run/checkpoints", tmpdir);
    assert_int_equal(ur_job_publish_check(dest, units, 1, inputs, 1, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "inside the input"));
    assert_false(exists("o/run/checkpoints/9/items/sub"));
}

static void test_job_publish__lock_and_publish(void **state)
{
    (void)state;
    char dest[400], in[400];
    const char *units[1] = {"0"};
    const char *inputs[1] = {in};
    ur_job_publish *a = NULL, *b = NULL;
    ur_err err;
    snprintf(dest, sizeof dest, "%s/p/run/checkpoints", tmpdir);
    snprintf(in, sizeof in, "%s/elsewhere/items", tmpdir);
    mk("p/run/checkpoints/0");
    put("p/run/checkpoints/0/old", "earlier");
    mk("p/run/checkpoints/9");
    put("p/run/checkpoints/9/keep", "training step");
    assert_int_equal(ur_job_publish_begin(&a, dest, units, 1, inputs, 1, &err), UR_OK);
    /* a second publisher (another open file description) finds the lock held */
    assert_int_equal(ur_job_publish_begin(&b, dest, units, 1, inputs, 1, &err), UR_EIO);
    assert_non_null(strstr(err.msg, "another unroll run (pid "));
    assert_non_null(strstr(err.where, "checkpoints.unroll-lock"));
    assert_null(b);
    /* nothing staged yet: not published, the earlier unit stays */
    assert_int_equal(ur_job_publish_commit(a, NULL, &err), UR_EIO);
    assert_true(exists("p/run/checkpoints/0/old"));
    assert_false(exists("p/run/checkpoints.unroll-lock"));
    /* a complete step is */
    assert_int_equal(ur_job_publish_begin(&a, dest, units, 1, inputs, 1, &err), UR_OK);
    write_step(ur_job_publish_staged(a, 0));
    assert_int_equal(ur_job_publish_commit(a, NULL, &err), UR_OK);
    assert_false(exists("p/run/checkpoints/0/old"));
    assert_true(exists("p/run/checkpoints/0/items/_METADATA"));
    assert_true(exists("p/run/checkpoints/9/keep"));
    assert_false(exists("p/run/checkpoints.unroll-lock"));
}

static void test_job_publish__cancel_and_replaced_staging(void **state)
{
    (void)state;
    char dest[400], in[400], staging[400];
    const char *units[3] = {"base/0", "loras/a/0", "loras/a/adapter_config.json"};
    const char *inputs[1] = {in};
    volatile sig_atomic_t cancel = 0;
    ur_job_publish *p = NULL;
    ur_err err;
    snprintf(dest, sizeof dest, "%s/c/run/checkpoints", tmpdir);
    snprintf(in, sizeof in, "%s/elsewhere/items", tmpdir);
    /* cancelled: nothing published, the directories this run made are gone */
    assert_int_equal(ur_job_publish_begin(&p, dest, units, 3, inputs, 1, &err), UR_OK);
    write_step(ur_job_publish_staged(p, 0));
    write_step(ur_job_publish_staged(p, 1));
    put("c/run/checkpoints.", ""); /* a stray file the cleanup must leave alone */
    assert_int_equal(ur_fs_write_file(ur_job_publish_staged(p, 2), "{}", 2, &err), UR_OK);
    cancel = 1;
    assert_int_equal(ur_job_publish_commit(p, &cancel, &err), UR_ECANCELED);
    assert_false(exists("c/run/checkpoints"));
    assert_true(exists("c/run/checkpoints."));
    /* a staging directory replaced under the run: not published, not removed */
    assert_int_equal(ur_job_publish_begin(&p, dest, units, 3, inputs, 1, &err), UR_OK);
    snprintf(staging, sizeof staging, "%s", ur_job_publish_staging(p));
    assert_int_equal(ur_fs_remove_tree(staging, &err), UR_OK);
    assert_int_equal(ur_fs_mkdirs(staging, &err), UR_OK);
    assert_int_equal(ur_job_publish_commit(p, NULL, &err), UR_EIO);
    assert_non_null(strstr(err.msg, "removed or replaced"));
    assert_true(ur_fs_is_dir(staging));
    assert_false(exists("c/run/checkpoints"));
    /* all three units */
    assert_int_equal(ur_job_publish_begin(&p, dest, units, 3, inputs, 1, &err), UR_OK);
    /* the dead run's staging (same pid) was removed under the lock: this one is fresh */
    assert_true(ur_fs_is_dir(ur_job_publish_staged(p, 0)) == 0);
    snprintf(staging, sizeof staging, "%s/base", ur_job_publish_staging(p));
    assert_true(ur_fs_is_dir(staging));
    write_step(ur_job_publish_staged(p, 0));
    write_step(ur_job_publish_staged(p, 1));
    assert_int_equal(ur_fs_write_file(ur_job_publish_staged(p, 2), "{}", 2, &err), UR_OK);
    cancel = 0;
    assert_int_equal(ur_job_publish_commit(p, &cancel, &err), UR_OK);
    assert_true(exists("c/run/checkpoints/base/0/items/_METADATA"));
    assert_true(exists("c/run/checkpoints/loras/a/0/_CHECKPOINT_METADATA"));
    assert_true(exists("c/run/checkpoints/loras/a/adapter_config.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_publish__overlap),
        cmocka_unit_test(test_job_publish__lock_and_publish),
        cmocka_unit_test(test_job_publish__cancel_and_replaced_staging),
    };
    return cmocka_run_group_tests_name("job_publish", tests, setup, teardown);
}
