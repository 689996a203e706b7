/* The memory kvstore: ordering, overwrite, fault injection, and the OOM path. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/kvstore.h"

static int count_keys(void *ctx, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
    (*(int *)ctx)++;
    return 0;
}

static void test_kvstore_mem__overwrite_and_prefix_listing(void **state)
{
    ur_kvstore *kv = NULL;
    ur_buf b;
    int n = 0;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "k/2", "two", 3, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "k/1", "one", 3, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "j", "", 0, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "k/1", "uno", 3, NULL), UR_OK);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "k/1", &b, NULL), UR_OK);
    assert_memory_equal(b.data, "uno", 3);
    assert_int_equal(ur_kvstore_list(kv, "k/", count_keys, &n, NULL), UR_OK);
    assert_int_equal(n, 2);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

/* Create only if absent: UR_EEXIST for a present key, its value kept; a deleted key can be
 * created again. */
static void test_kvstore_mem__create_if_absent(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    ur_buf b;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "claim", "a", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "claim", "b", 1, &err), UR_EEXIST);
    assert_string_equal(err.where, "claim");
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "claim", &b, NULL), UR_OK);
    assert_memory_equal(b.data, "a", 1);
    assert_int_equal(ur_kvstore_delete(kv, "claim", NULL), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "claim", "c", 1, &err), UR_OK);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_kvstore_mem__injected_faults(void **state)
{
    ur_kvstore *kv = NULL;
    ur_buf b;
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    ur_kvstore_mem_fail_at(kv, 2, 2);
    assert_int_equal(ur_kvstore_write(kv, "a", "1", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "b", "2", 1, &err), UR_EIO);
    assert_string_equal(err.where, "b");
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "a", &b, &err), UR_OK);
    assert_int_equal(ur_kvstore_read(kv, "a", &b, &err), UR_EIO);
    assert_int_equal(ur_kvstore_read(kv, "b", &b, &err), UR_ENOTFOUND);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_kvstore_mem__oom_loop(void **state)
{
    (void)state;
    for (long n = 0;; n++) {
        ur_kvstore *kv = NULL;
        int rc;
        ur_alloc_fail_after(n);
        rc = ur_kvstore_mem_new(&kv, NULL);
        for (int i = 0; rc == UR_OK && i < 20; i++) {
            char key[16];
            snprintf(key, sizeof key, "key%02d", i);
            rc = ur_kvstore_write(kv, key, "value", 5, NULL);
        }
        ur_alloc_fail_after(-1);
        ur_kvstore_close(kv);
        if (rc == UR_OK) {
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
    }
}

/* Streamed writes: a NEW value appears at finish, not before, and refuses a present key; an
 * ATOMIC one replaces; an aborted writer stores nothing; an injected write failure reaches
 * finish. */
static void test_kvstore_mem__streamed_writer(void **state)
{
    ur_kvstore *kv = NULL;
    ur_kvstore_writer *w = NULL;
    uint64_t size = 0;
    ur_err err;
    ur_buf b;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "d/x", UR_KVSTORE_WRITER_NEW, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "ab", 2, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "", 0, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "cde", 3, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_size(w), 5);
    assert_int_equal(ur_kvstore_size(kv, "d/x", &size, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_writer_finish(w, &err), UR_OK);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "d/x", &b, &err), UR_OK);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, "abcde", 5);
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "d/x", UR_KVSTORE_WRITER_NEW, &err),
                     UR_EEXIST);
    assert_string_equal(err.where, "d/x");
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "d/x", UR_KVSTORE_WRITER_ATOMIC, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "z", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_finish(w, &err), UR_OK);
    ur_buf_reset(&b);
    assert_int_equal(ur_kvstore_read(kv, "d/x", &b, &err), UR_OK);
    assert_true(b.len == 1 && b.data[0] == 'z');
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "d/y", UR_KVSTORE_WRITER_NEW, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "q", 1, &err), UR_OK);
    ur_kvstore_writer_abort(w);
    assert_int_equal(ur_kvstore_size(kv, "d/y", &size, &err), UR_ENOTFOUND);
    ur_kvstore_writer_abort(NULL);
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "d/y", 3, &err), UR_EINTERNAL);
    ur_kvstore_mem_fail_at(kv, 0, 1);
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "d/y", UR_KVSTORE_WRITER_NEW, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "q", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_finish(w, &err), UR_EIO);
    assert_int_equal(ur_kvstore_size(kv, "d/y", &size, &err), UR_ENOTFOUND);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

/* A prefix view: its keys are the base's under the prefix, writes (whole and streamed) land
 * there, and listing strips the prefix and sees nothing outside it. */
static void test_kvstore_mem__prefix_view(void **state)
{
    ur_kvstore *kv = NULL, *items = NULL;
    ur_kvstore_writer *w = NULL;
    uint64_t size = 0;
    ur_err err;
    ur_buf b;
    int n = 0;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, NULL), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "itemsX", "no", 2, &err), UR_OK);
    assert_int_equal(ur_kvstore_prefix_open(&items, kv, "items/", 0, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(items, "a/b", "ab", 2, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_open(&w, items, "d/1", UR_KVSTORE_WRITER_NEW, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "xyz", 3, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_finish(w, &err), UR_OK);
    assert_int_equal(ur_kvstore_size(kv, "items/d/1", &size, &err), UR_OK);
    assert_int_equal(size, 3);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "items/a/b", &b, &err), UR_OK);
    assert_int_equal(ur_kvstore_size(items, "X", &size, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_list(items, "", count_keys, &n, &err), UR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ur_kvstore_commit(items, &err), UR_OK);
    ur_kvstore_close(items); /* the base stays */
    assert_int_equal(ur_kvstore_size(kv, "items/a/b", &size, &err), UR_OK);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

/* Entries of a one-level listing, as "name/" for a directory. */
typedef struct {
    char names[8][32];
    int n;
    int stop_after; /* 0: never */
} dir_listing;

static int collect_dir(void *ctx, const char *name, int is_dir)
{
    dir_listing *l = ctx;
    if (l->n < 8) {
        snprintf(l->names[l->n++], sizeof l->names[0], "%s%s", name, is_dir ? "/" : "");
    }
    return l->stop_after != 0 && l->n == l->stop_after ? 7 : 0;
}

/* A store without its own one-level listing filters the full one: each directory once,
 * however many keys lie below it, none absent and no directory that is absent. */
static void test_kvstore_mem__list_dir(void **state)
{
    static const char *const keys[] = {"a/x", "a/y/z", "a/y/w", "a/yy", "b", "c/d/e"};
    ur_kvstore *kv = NULL, *view = NULL;
    dir_listing l = {0};
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_mem_new(&kv, &err), UR_OK);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        assert_int_equal(ur_kvstore_write(kv, keys[i], "v", 1, &err), UR_OK);
    }
    assert_int_equal(ur_kvstore_list_dir(kv, "", collect_dir, &l, &err), UR_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.names[0], "a/");
    assert_string_equal(l.names[1], "b");
    assert_string_equal(l.names[2], "c/");
    memset(&l, 0, sizeof l);
    assert_int_equal(ur_kvstore_list_dir(kv, "a/", collect_dir, &l, &err), UR_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.names[0], "x");
    assert_string_equal(l.names[1], "y/");
    assert_string_equal(l.names[2], "yy");
    memset(&l, 0, sizeof l);
    l.stop_after = 1;
    assert_int_equal(ur_kvstore_list_dir(kv, "a/", collect_dir, &l, &err), 7);
    assert_int_equal(l.n, 1);
    assert_int_equal(ur_kvstore_list_dir(kv, "q/", collect_dir, &l, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_list_dir(kv, "b/", collect_dir, &l, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_list_dir(kv, "a", collect_dir, &l, &err), UR_EINVAL);

    /* through a prefix view: the same names */
    assert_int_equal(ur_kvstore_prefix_open(&view, kv, "a/", 1, &err), UR_OK);
    memset(&l, 0, sizeof l);
    assert_int_equal(ur_kvstore_list_dir(view, "y/", collect_dir, &l, &err), UR_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.names[0], "w");
    assert_string_equal(l.names[1], "z");
    ur_kvstore_close(view);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvstore_mem__overwrite_and_prefix_listing),
        cmocka_unit_test(test_kvstore_mem__create_if_absent),
        cmocka_unit_test(test_kvstore_mem__injected_faults),
        cmocka_unit_test(test_kvstore_mem__oom_loop),
        cmocka_unit_test(test_kvstore_mem__streamed_writer),
        cmocka_unit_test(test_kvstore_mem__prefix_view),
        cmocka_unit_test(test_kvstore_mem__list_dir),
    };
    return cmocka_run_group_tests_name("kvstore_mem", tests, NULL, NULL);
}
