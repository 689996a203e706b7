/* ocdbt_merge: Orbax's merge of per-process databases (values referred to in place through
 * "ocdbt.process_<i>/", duplicates kept once when equal, refused when not), and the writer's
 * snapshot + resume (a database continued after a kill keeps its committed values). */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(uint8_t *p, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = (uint8_t)(seed * 31 + i * 7);
    }
}

/* Process i's database: a shared key, a small (inline) value and a large one. */
static void write_child(const char *dir, int i, const char *shared_value)
{
    char db[300], key[64];
    uint8_t big[3000];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    ur_err err;
    snprintf(db, sizeof db, "%s/ocdbt.process_%d", dir, i);
    ur_ocdbt_write_opts_init(&o);
    o.seed = 1; /* the same file names in every child: told apart by their base path */
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    assert_int_equal(
        ur_kvstore_write(kv, "shared/zarr.json", shared_value, strlen(shared_value), &err), UR_OK);
    snprintf(key, sizeof key, "a%d/small", i);
    assert_int_equal(ur_kvstore_write(kv, key, "xyz", 3, &err), UR_OK);
    snprintf(key, sizeof key, "a%d/big", i);
    fill(big, sizeof big, i);
    assert_int_equal(ur_kvstore_write(kv, key, big, sizeof big, &err), UR_OK);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
}

static void cleanup(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_ocdbt_merge__values_referred_in_place(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_mergeXXXXXX";
    const char *children[3] = {"ocdbt.process_0", "ocdbt.process_1", "ocdbt.process_2"};
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    uint8_t want[3000];
    ur_err err;
    ur_buf b;
    (void)state;
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < 3; i++) {
        write_child(dir, i, "{\"same\": 1}");
    }
    ur_ocdbt_write_opts_init(&o);
    assert_int_equal(ur_ocdbt_merge(dir, children, 3, &o, &err), UR_OK);
    assert_int_equal(ur_ocdbt_open(&kv, dir, &err), UR_OK);
    ur_buf_init(&b, 0);
    for (int i = 0; i < 3; i++) {
        char key[64];
        snprintf(key, sizeof key, "a%d/big", i);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        fill(want, sizeof want, i);
        assert_int_equal(b.len, sizeof want);
        assert_memory_equal(b.data, want, sizeof want);
        snprintf(key, sizeof key, "a%d/small", i);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        assert_int_equal(b.len, 3);
    }
    ur_buf_reset(&b);
    assert_int_equal(ur_kvstore_read(kv, "shared/zarr.json", &b, &err), UR_OK);
    assert_int_equal(b.len, 11);
    /* the big values stay in the children's files */
    ur_buf_reset(&b);
    assert_int_equal(ur_ocdbt_dump_tree(kv, &b, &err), UR_OK);
    assert_int_equal(ur_buf_append(&b, "", 1, &err), UR_OK);
    assert_non_null(strstr((const char *)b.data, "value:ocdbt.process_2/:d/"));
    assert_null(strstr((const char *)b.data, "\"shared/zarr.json\" inline 11 bytes\n  \"shared"));
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    cleanup(dir);
}

static void test_ocdbt_merge__different_values_refused(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_merge2XXXXXX", path[300];
    const char *children[2] = {"ocdbt.process_0", "ocdbt.process_1"};
    ur_ocdbt_write_opts o;
    ur_err err;
    (void)state;
    assert_non_null(mkdtemp(dir));
    write_child(dir, 0, "{\"v\": 1}");
    write_child(dir, 1, "{\"v\": 2}");
    ur_ocdbt_write_opts_init(&o);
    assert_int_equal(ur_ocdbt_merge(dir, children, 2, &o, &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "key 'shared/zarr.json' has different values"));
    snprintf(path, sizeof path, "%s/manifest.ocdbt", dir);
    assert_false(ur_fs_exists(path));
    cleanup(dir);
}

static void test_ocdbt_merge__snapshot_then_resume(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_resumeXXXXXX", db[300], key[64];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    uint8_t big[5000];
    size_t kept = 0;
    ur_err err;
    ur_buf b;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.seed = 7;
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "k%02d", i);
        fill(big, sizeof big, i);
        assert_int_equal(ur_kvstore_write(kv, key, big, i % 2 ? sizeof big : 10, &err), UR_OK);
    }
    assert_int_equal(ur_ocdbt_writer_snapshot(kv, &err), UR_OK);
    /* written after the snapshot, then "killed": lost, its file removed on resume */
    fill(big, sizeof big, 99);
    assert_int_equal(ur_kvstore_write(kv, "lost", big, sizeof big, &err), UR_OK);
    ur_kvstore_close(kv);
    kv = NULL;

    assert_int_equal(ur_ocdbt_resume(&kv, db, &o, &kept, &err), UR_OK);
    assert_int_equal(kept, 10);
    fill(big, sizeof big, 10);
    assert_int_equal(ur_kvstore_write(kv, "k10", big, sizeof big, &err), UR_OK);
    fill(big, sizeof big, 3);
    assert_int_equal(ur_kvstore_write(kv, "k03", big, 100, &err), UR_OK); /* rewritten */
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);

    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    ur_buf_init(&b, 0);
    for (int i = 0; i <= 10; i++) {
        uint8_t want[5000];
        size_t len = i == 3 ? 100 : (i % 2 || i == 10 ? sizeof big : 10);
        snprintf(key, sizeof key, "k%02d", i);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        fill(want, sizeof want, i);
        assert_int_equal(b.len, len);
        assert_memory_equal(b.data, want, len);
    }
    ur_buf_reset(&b);
    assert_int_equal(ur_kvstore_read(kv, "lost", &b, &err), UR_ENOTFOUND);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    cleanup(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ocdbt_merge__values_referred_in_place),
        cmocka_unit_test(test_ocdbt_merge__different_values_refused),
        cmocka_unit_test(test_ocdbt_merge__snapshot_then_resume),
    };
    return cmocka_run_group_tests_name("ocdbt_merge", tests, NULL, NULL);
}
