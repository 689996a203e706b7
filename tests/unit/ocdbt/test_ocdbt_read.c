/* ocdbt_read / ocdbt_write / ur_kvstore_open_auto on real fixtures (tests/data/ocdbt) and on
 * databases written here: golden listings and values, corruption of every byte of a real
 * database, OOM loops, writer round trips. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA UR_TEST_DATA_DIR "/ocdbt"

typedef struct {
    char keys[4096];
    size_t n;
    uint64_t total;
} listing;

static int collect(void *ctx, const char *key, uint64_t size)
{
    listing *l = ctx;
    size_t used = strlen(l->keys);
    snprintf(l->keys + used, sizeof l->keys - used, "%s%s", l->n ? "," : "", key);
    l->n++;
    l->total += size;
    return 0;
}

static int list_all(ur_kvstore *kv, const char *prefix, listing *l, ur_err *err)
{
    memset(l, 0, sizeof *l);
    return ur_kvstore_list(kv, prefix, collect, l, err);
}

static void check_value(ur_kvstore *kv, const char *key, const char *value)
{
    ur_buf b;
    ur_err err;
    uint64_t size = 0;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
    assert_int_equal(b.len, strlen(value));
    if (b.len) {
        assert_memory_equal(b.data, value, b.len);
    }
    assert_int_equal(ur_kvstore_size(kv, key, &size, &err), UR_OK);
    assert_int_equal(size, strlen(value));
    ur_buf_dispose(&b);
}

static void check_files_db(const char *dir)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    listing l;
    char two[2];
    assert_int_equal(ur_kvstore_open_auto(&kv, dir, &err), UR_OK);
    assert_int_equal(list_all(kv, "", &l, &err), UR_OK);
    assert_string_equal(l.keys, "#,a,b,baz/first,baz/x,baz/z,c,empty");
    assert_int_equal(list_all(kv, "baz/", &l, &err), UR_OK);
    assert_string_equal(l.keys, "baz/first,baz/x,baz/z");
    assert_int_equal(list_all(kv, "b", &l, &err), UR_OK);
    assert_string_equal(l.keys, "b,baz/first,baz/x,baz/z");
    assert_int_equal(list_all(kv, "bz", &l, &err), UR_OK);
    assert_int_equal(l.n, 0);
    check_value(kv, "a", "abc");
    check_value(kv, "b", "abc");
    check_value(kv, "c", "bar");
    check_value(kv, "empty", "");
    check_value(kv, "#", "");
    assert_int_equal(ur_kvstore_read_range(kv, "c", 1, 2, two, &err), UR_OK);
    assert_memory_equal(two, "ar", 2);
    assert_int_equal(ur_kvstore_read_range(kv, "c", 2, 2, two, &err), UR_ECORRUPT);
    assert_int_equal(ur_kvstore_size(kv, "baz", NULL, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_size(kv, "d", NULL, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_size(kv, "", NULL, &err), UR_ENOTFOUND);
    ur_kvstore_close(kv);
}

static void test_ocdbt_read__golden_fixtures(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    listing l;
    (void)state;
    check_files_db(DATA "/files_high_arity.ocdbt");
    check_files_db(DATA "/files_min_arity.ocdbt");
    /* Orbax merged top-level database and its per-process database */
    assert_int_equal(ur_ocdbt_open(&kv, DATA "/orbax_state", &err), UR_OK);
    assert_int_equal(list_all(kv, "", &l, &err), UR_OK);
    assert_string_equal(l.keys, "a/.zarray,a/0,b.c/.zarray,b.c/0");
    assert_int_equal(l.total, 164 + 41 + 164 + 21);
    ur_kvstore_close(kv);
    assert_int_equal(ur_ocdbt_open(&kv, DATA "/orbax_state/ocdbt.process_0", &err), UR_OK);
    assert_int_equal(list_all(kv, "b.c/", &l, &err), UR_OK);
    assert_string_equal(l.keys, "b.c/.zarray,b.c/0");
    ur_kvstore_close(kv);
    /* not a database: the plain-directory store */
    assert_int_equal(ur_kvstore_open_auto(&kv, DATA "/orbax_state/d", &err), UR_OK);
    assert_int_equal(list_all(kv, "", &l, &err), UR_OK);
    assert_int_equal(l.n, 1);
    ur_kvstore_close(kv);
    assert_int_equal(ur_ocdbt_open(&kv, DATA "/nope", &err), UR_ENOTFOUND);
}

static void test_ocdbt_read__upstream_multi_version(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    listing l;
    ur_buf dump;
    (void)state;
    if (!ur_fs_is_dir(UR_UPSTREAM_DATA_DIR)) {
        fail_msg("upstream test data missing at %s", UR_UPSTREAM_DATA_DIR);
    }
    assert_int_equal(ur_ocdbt_open(&kv,
                                   UR_UPSTREAM_DATA_DIR "/neuroglancer-ocdbt/kvstore/ocdbt/"
                                                        "multi_version_low_arity.ocdbt",
                                   &err),
                     UR_OK);
    assert_int_equal(list_all(kv, "key19", &l, &err), UR_OK);
    assert_string_equal(l.keys, "key19,key190,key191,key192,key193,key194,key195,key196,key197,"
                                "key198,key199");
    check_value(kv, "key7", "version 7");
    ur_buf_init(&dump, 0);
    assert_int_equal(ur_ocdbt_dump_manifest(kv, &dump, &err), UR_OK);
    assert_int_equal(ur_buf_append_byte(&dump, 0, &err), UR_OK);
    /* all 200 versions reached through the version tree */
    {
        size_t count = 0;
        const char *p = (const char *)dump.data;
        for (; (p = strstr(p, "version generation=")) != NULL; p++) {
            count++;
        }
        assert_int_equal(count, 200);
    }
    ur_buf_dispose(&dump);
    ur_kvstore_close(kv);
}

/* copy a directory tree with cp (test helper only) */
static void copy_db(const char *src, const char *dst)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dst, src, dst);
    assert_int_equal(system(cmd), 0);
}

/* Open, list and read everything; returns the first error code. */
static int read_everything(const char *dir, ur_err *err)
{
    ur_kvstore *kv = NULL;
    listing l;
    ur_buf b;
    const char *keys[] = {"#", "a", "b", "baz/first", "baz/x", "baz/z", "c", "empty"};
    int rc = ur_ocdbt_open(&kv, dir, err);
    ur_buf_init(&b, 0);
    if (rc == UR_OK) {
        rc = list_all(kv, "", &l, err);
    }
    for (size_t i = 0; i < 8 && rc == UR_OK; i++) {
        rc = ur_kvstore_read(kv, keys[i], &b, err);
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    return rc;
}

/* ur_ocdbt_count_keys (two threads) reads back what a listing (one thread) does: the same
 * count, or the same first error, each on a fresh open (no node cached). */
static void count_agrees_with_listing(const char *dir)
{
    ur_kvstore *kv = NULL;
    ur_err el, ec;
    listing l;
    uint64_t n = 0;
    int rl = ur_ocdbt_open(&kv, dir, &el), rcount;
    if (rl == UR_OK) {
        rl = list_all(kv, "", &l, &el);
    }
    ur_kvstore_close(kv);
    kv = NULL;
    rcount = ur_ocdbt_open(&kv, dir, &ec);
    if (rcount == UR_OK) {
        rcount = ur_ocdbt_count_keys(kv, &n, &ec);
    }
    ur_kvstore_close(kv);
    assert_int_equal(rcount, rl);
    if (rl == UR_OK) {
        assert_int_equal(n, l.n);
    } else {
        assert_string_equal(ec.where, el.where);
        assert_int_equal(ec.offset, el.offset);
        assert_string_equal(ec.msg, el.msg);
    }
}

static void test_ocdbt_read__corrupt_every_byte(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_corruptXXXXXX";
    char db[256], path[512];
    const char *files[2] = {"manifest.ocdbt", "d/f6d9da936d3f6f58b667ca9d54a38667"};
    ur_err err;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/db", dir);
    for (int f = 0; f < 2; f++) {
        ur_buf orig;
        ur_buf_init(&orig, 0);
        copy_db(DATA "/files_min_arity.ocdbt", db);
        snprintf(path, sizeof path, "%s/%s", db, files[f]);
        assert_int_equal(ur_fs_read_file(&orig, path, 1 << 20, &err), UR_OK);
        for (size_t i = 0; i < orig.len; i++) {
            int rc;
            orig.data[i] ^= 0x10;
            assert_int_equal(ur_fs_write_file(path, orig.data, orig.len, &err), UR_OK);
            rc = read_everything(db, &err);
            count_agrees_with_listing(db);
            orig.data[i] ^= 0x10;
            /* in a data file, bytes between objects are never read; objects are CRC'd */
            if (rc != UR_OK) {
                assert_int_equal(rc, UR_ECORRUPT);
                assert_true(strstr(err.where, files[f]) != NULL);
                assert_true(err.offset != UR_ERR_NO_OFFSET);
            }
            if (f == 0) {
                assert_int_equal(rc, UR_ECORRUPT); /* every manifest byte matters */
            }
        }
        /* truncation at every length */
        for (size_t cut = 0; cut < orig.len; cut += 1) {
            int rc;
            assert_int_equal(ur_fs_write_file(path, orig.data, cut, &err), UR_OK);
            rc = read_everything(db, &err);
            assert_int_equal(rc, UR_ECORRUPT);
            count_agrees_with_listing(db);
        }
        ur_buf_dispose(&orig);
    }
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    assert_int_equal(system(path), 0);
}

static void test_ocdbt_read__oom(void **state)
{
    ur_err err;
    int rc = UR_ENOMEM;
    (void)state;
    for (long n = 0; rc == UR_ENOMEM && n < 2000; n++) {
        ur_alloc_fail_after(n);
        rc = read_everything(DATA "/files_min_arity.ocdbt", &err);
        ur_alloc_fail_after(-1);
    }
    assert_int_equal(rc, UR_OK);
}

static int write_db(const char *dir, const ur_ocdbt_write_opts *o, size_t n, ur_err *err)
{
    ur_kvstore *kv = NULL;
    char key[64];
    uint8_t *val = ur_malloc(5000);
    int rc = val ? ur_ocdbt_create(&kv, dir, o, err) : ur_err_oom(err);
    for (size_t i = 0; i < n && rc == UR_OK; i++) {
        size_t len = (i * 37) % 5000;
        snprintf(key, sizeof key, "p%zu/k%06zu", i % 5, (i * 7919) % n);
        memset(val, (int)(i & 0xff), len);
        rc = ur_kvstore_write(kv, key, val, len, err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_commit(kv, err);
    }
    ur_kvstore_close(kv);
    ur_free(val);
    return rc;
}

static void test_ocdbt_write__roundtrip(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_writeXXXXXX";
    char db[256], cmd[300], key[64];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    ur_err err;
    listing l;
    ur_buf b;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.max_decoded_node_bytes = 300; /* many nodes: a tree of height >= 2 */
    o.max_inline_value_bytes = 100;
    o.target_data_file_size = 20000;
    assert_int_equal(write_db(db, &o, 500, &err), UR_OK);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    assert_int_equal(ur_kvstore_list(kv, "", collect, memset(&l, 0, sizeof l), &err), UR_OK);
    assert_int_equal(l.n, 500);
    count_agrees_with_listing(db);
    ur_buf_init(&b, 0);
    for (size_t i = 0; i < 500; i++) {
        size_t len = (i * 37) % 5000;
        snprintf(key, sizeof key, "p%zu/k%06zu", i % 5, (i * 7919) % 500);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        assert_int_equal(b.len, len);
        for (size_t j = 0; j < len; j++) {
            assert_int_equal(b.data[j], i & 0xff);
        }
    }
    ur_buf_reset(&b);
    assert_int_equal(ur_ocdbt_dump_tree(kv, &b, &err), UR_OK);
    assert_non_null(strstr((const char *)b.data, "node height=2"));
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    /* a second create on the same directory is refused */
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_EINVAL);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_ocdbt_write__no_commit_no_manifest(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_nocommitXXXXXX";
    char db[256], cmd[300];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    ur_err err;
    uint8_t big[2000] = {0};
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "x", big, sizeof big, &err), UR_OK);
    ur_kvstore_close(kv);
    snprintf(cmd, sizeof cmd, "%s/manifest.ocdbt", db);
    assert_false(ur_fs_exists(cmd));
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_ENOTFOUND);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Many small (inline-sized) values: the writer never holds more of them than its budget,
 * whatever their number (the rest go to the data files as indirect values), and every value
 * reads back. Before the budget a writer held all of them until commit. */
static void test_ocdbt_write__held_inline_bytes_are_bounded(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_heldXXXXXX";
    char db[256], cmd[300], key[64];
    enum { N = 20000, LEN = 500, BUDGET = 64 << 10 };
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    uint8_t val[LEN];
    uint64_t peak = 0;
    ur_err err;
    ur_buf b;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.max_held_inline_bytes = BUDGET;
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    for (size_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "a/c/%zu", i);
        memset(val, (int)(i * 13 & 0xff), LEN);
        assert_int_equal(ur_kvstore_write(kv, key, val, LEN, &err), UR_OK);
        uint64_t held = ur_ocdbt_writer_held_bytes(kv);
        peak = held > peak ? held : peak;
    }
    /* 10 MB written, at most the budget held; and the budget is used */
    assert_true(peak <= BUDGET);
    assert_true(peak > BUDGET - LEN);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    assert_int_equal(ur_ocdbt_writer_held_bytes(kv), 0); /* not a writer */
    ur_buf_init(&b, 0);
    for (size_t i = 0; i < N; i += 97) {
        snprintf(key, sizeof key, "a/c/%zu", i);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        assert_int_equal(b.len, LEN);
        assert_int_equal(b.data[0], i * 13 & 0xff);
        assert_int_equal(b.data[LEN - 1], i * 13 & 0xff);
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The same inline value under many keys (every array of a shape has the same zarr.json) is
 * held once; each key reads it back, a rewritten key its last value. */
static void test_ocdbt_write__repeated_values_are_held_once(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_poolXXXXXX";
    char db[256], cmd[300], key[64];
    enum { N = 3000, LEN = 300 };
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    uint8_t val[LEN], other[LEN];
    ur_err err;
    ur_buf b;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    memset(val, 'v', LEN);
    memset(other, 'o', LEN);
    for (size_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "a%zu/zarr.json", i);
        assert_int_equal(ur_kvstore_write(kv, key, val, LEN, &err), UR_OK);
    }
    assert_int_equal(ur_ocdbt_writer_held_bytes(kv), LEN); /* was N * LEN */
    assert_int_equal(ur_kvstore_write(kv, "a7/zarr.json", other, LEN, &err), UR_OK);
    assert_int_equal(ur_ocdbt_writer_held_bytes(kv), 2 * LEN);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    ur_buf_init(&b, 0);
    for (size_t i = 0; i < N; i += 7) {
        snprintf(key, sizeof key, "a%zu/zarr.json", i);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        assert_int_equal(b.len, LEN);
        assert_memory_equal(b.data, i == 7 ? other : val, LEN);
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_ocdbt_write__oom(void **state)
{
    char dir[] = "/tmp/ur_ocdbt_woomXXXXXX";
    char db[256], cmd[300];
    ur_ocdbt_write_opts o;
    ur_err err;
    int rc = UR_ENOMEM;
    (void)state;
    assert_non_null(mkdtemp(dir));
    ur_ocdbt_write_opts_init(&o);
    o.max_decoded_node_bytes = 200;
    o.compress = 0; /* zstd allocates outside ur_malloc */
    for (long n = 0; rc == UR_ENOMEM && n < 5000; n++) {
        snprintf(db, sizeof db, "%s/db%ld", dir, n);
        ur_alloc_fail_after(n);
        rc = write_db(db, &o, 40, &err);
        ur_alloc_fail_after(-1);
    }
    assert_int_equal(rc, UR_OK);
    assert_int_equal(read_everything(db, &err), UR_ENOTFOUND); /* other keys; opens fine */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* Whole-value views: small and inline values are read, values of 1 MiB and more are mapped
 * from their data file (at any offset in it); both hold the value's bytes. A data file cut
 * short is UR_ECORRUPT naming it, and a value over the limit is refused. */
static void test_ocdbt_read__views(void **state)
{
    static const struct {
        const char *key;
        size_t len;
        int mapped;
    } vals[] = {{"a/inline", 100, 0},
                {"b/read", 5000, 0},
                {"c/big", 3 * 1048576 + 123, 1},
                {"d/big", 2 * 1048576 + 1, 1}};
    char dir[] = "/tmp/ur_ocdbt_viewXXXXXX";
    char db[256], cmd[600];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    ur_kvstore_view v;
    ur_err err;
    uint8_t *val = malloc(4 << 20);
    (void)state;
    assert_non_null(val);
    assert_non_null(mkdtemp(dir));
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.target_data_file_size = 5000 + vals[2].len + vals[3].len; /* the tree goes to a 2nd file */
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    for (size_t i = 0; i < 4; i++) {
        for (size_t j = 0; j < vals[i].len; j++) {
            val[j] = (uint8_t)(j * 131 + i);
        }
        assert_int_equal(ur_kvstore_write(kv, vals[i].key, val, vals[i].len, &err), UR_OK);
    }
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);

    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    for (size_t i = 0; i < 4; i++) {
        ur_kvstore_prefetch(kv, vals[i].key, 1 << 20); /* a hint: never fails */
    }
    ur_kvstore_prefetch(kv, "nope", 1 << 20);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(ur_kvstore_read_view(kv, vals[i].key, 0, &v, &err), UR_OK);
        assert_int_equal(v.len, vals[i].len);
        assert_int_equal(v.map_.base_ != NULL, vals[i].mapped);
        for (size_t j = 0; j < vals[i].len; j++) {
            if (v.data[j] != (uint8_t)(j * 131 + i)) {
                fail_msg("%s: byte %zu differs", vals[i].key, j);
            }
        }
        ur_kvstore_view_release(&v);
    }
    assert_int_equal(ur_kvstore_read_view(kv, "c/big", 1 << 20, &v, &err), UR_ECORRUPT);
    ur_kvstore_view_release(&v);
    assert_int_equal(ur_kvstore_read_view(kv, "nope", 0, &v, &err), UR_ENOTFOUND);
    ur_kvstore_view_release(&v);
    ur_kvstore_close(kv);

    /* the values were written in this order: cutting their data file (the larger of the two)
     * after 4 MiB loses the end of d/big */
    snprintf(cmd, sizeof cmd, "cd %s/d && truncate -s 4194304 \"$(ls -S | head -n 1)\"", db);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    assert_int_equal(ur_kvstore_read_view(kv, "c/big", 0, &v, &err), UR_OK);
    ur_kvstore_view_release(&v);
    assert_int_equal(ur_kvstore_read_view(kv, "d/big", 0, &v, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.where, "/d/"));
    assert_non_null(strstr(err.msg, "truncated"));
    ur_kvstore_view_release(&v);
    ur_kvstore_close(kv);
    free(val);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static int collect_mem_key(void *ctx, const char *key, uint64_t size)
{
    listing *l = ctx;
    (void)size;
    l->n += strcmp(key, "manifest.ocdbt") == 0 || strncmp(key, "d/", 2) == 0 ? 1 : 1000;
    return 0;
}

/* The writer on a base store with no files at all (the memory store): every byte of the
 * database goes through the base, and the reader on the same base gets every value back.
 * A write failure of the base fails the commit and leaves no manifest. */
static void test_ocdbt_write__on_a_memory_store(void **state)
{
    ur_ocdbt_write_opts o;
    ur_kvstore *mem = NULL, *kv = NULL;
    uint8_t val[5000];
    char key[64];
    uint64_t size = 0;
    listing l;
    ur_err err;
    ur_buf b;
    int rc = UR_OK;
    (void)state;
    ur_ocdbt_write_opts_init(&o);
    o.max_decoded_node_bytes = 300;
    o.max_inline_value_bytes = 100;
    o.target_data_file_size = 20000; /* several data files */
    o.seed = 7;
    assert_int_equal(ur_kvstore_mem_new(&mem, &err), UR_OK);
    assert_int_equal(ur_ocdbt_create_kv(&kv, mem, 0, "mem", &o, &err), UR_OK);
    for (size_t i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "k%04zu", (i * 7919) % 300);
        memset(val, (int)(i & 0xff), (i * 37) % 5000);
        assert_int_equal(ur_kvstore_write(kv, key, val, (i * 37) % 5000, &err), UR_OK);
    }
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
    memset(&l, 0, sizeof l);
    assert_int_equal(ur_kvstore_list(mem, "", collect_mem_key, &l, &err), UR_OK);
    assert_true(l.n > 3 && l.n < 1000); /* the manifest and several d/ files, nothing else */
    assert_int_equal(ur_ocdbt_open_kv(&kv, mem, 0, "mem", &err), UR_OK);
    ur_buf_init(&b, 0);
    for (size_t i = 0; i < 300; i++) {
        snprintf(key, sizeof key, "k%04zu", (i * 7919) % 300);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        assert_int_equal(b.len, (i * 37) % 5000);
        for (size_t j = 0; j < b.len; j++) {
            assert_int_equal(b.data[j], i & 0xff);
        }
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    /* a database is there: a second create is refused */
    assert_int_equal(ur_ocdbt_create_kv(&kv, mem, 0, "mem", &o, &err), UR_EINVAL);
    ur_kvstore_close(mem);

    assert_int_equal(ur_kvstore_mem_new(&mem, &err), UR_OK);
    ur_kvstore_mem_fail_at(mem, 0, 2); /* the second data file */
    assert_int_equal(ur_ocdbt_create_kv(&kv, mem, 1, "mem", &o, &err), UR_OK);
    for (size_t i = 0; i < 300 && rc == UR_OK; i++) {
        snprintf(key, sizeof key, "k%04zu", i);
        rc = ur_kvstore_write(kv, key, val, 3000, &err);
    }
    if (rc == UR_OK) {
        rc = ur_kvstore_commit(kv, &err);
    }
    assert_int_equal(rc, UR_EIO);
    assert_int_equal(ur_kvstore_size(mem, "manifest.ocdbt", &size, &err), UR_ENOTFOUND);
    ur_kvstore_close(kv); /* closes mem */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ocdbt_read__golden_fixtures),
        cmocka_unit_test(test_ocdbt_read__upstream_multi_version),
        cmocka_unit_test(test_ocdbt_read__corrupt_every_byte),
        cmocka_unit_test(test_ocdbt_read__oom),
        cmocka_unit_test(test_ocdbt_write__roundtrip),
        cmocka_unit_test(test_ocdbt_write__no_commit_no_manifest),
        cmocka_unit_test(test_ocdbt_write__oom),
        cmocka_unit_test(test_ocdbt_write__held_inline_bytes_are_bounded),
        cmocka_unit_test(test_ocdbt_write__repeated_values_are_held_once),
        cmocka_unit_test(test_ocdbt_read__views),
        cmocka_unit_test(test_ocdbt_write__on_a_memory_store),
    };
    return cmocka_run_group_tests_name("ocdbt_read", tests, NULL, NULL);
}
