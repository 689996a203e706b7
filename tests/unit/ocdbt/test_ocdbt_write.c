/* ocdbt_write: every commit of a writer (ur_ocdbt_writer_snapshot, ur_kvstore_commit) is a new
 * generation of the database, the version tree written as TensorStore writes it (inline
 * versions, then version nodes once a bucket of 2^arity_log2 is full), each commit's tree the
 * previous one with the new entries merged in; a resumed writer continues the generations. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"
#include "unroll/ocdbt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void cleanup(const char *dir)
{
    assert_int_equal(ur_fs_remove_tree(dir, NULL), UR_OK);
}

/* The value of key i as of generation g: its length says whether it is stored inline. */
static size_t value_of(uint8_t *p, size_t cap, int i, int g)
{
    size_t n = i % 3 == 0 ? 2000 : (size_t)(i % 50) + 1;
    for (size_t k = 0; k < n && k < cap; k++) {
        p[k] = (uint8_t)(i * 13 + g * 7 + k);
    }
    return n;
}

/* The generations `unroll ls --manifest` lists (every version-tree node read and checked; the
 * inline ones first), sorted, with their key counts; returns how many, and how many version
 * nodes of height 1. */
static size_t dumped_generations(const char *db, uint64_t *gen, uint64_t *keys, size_t cap,
                                 size_t *height1)
{
    ur_kvstore *kv = NULL;
    ur_buf dump;
    ur_err err;
    size_t n = 0;
    const char *p;
    ur_buf_init(&dump, 0);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    assert_int_equal(ur_ocdbt_dump_manifest(kv, &dump, &err), UR_OK);
    assert_int_equal(ur_buf_append(&dump, "", 1, &err), UR_OK);
    *height1 = 0;
    for (p = (const char *)dump.data; (p = strstr(p, "version")) != NULL; p++) {
        if (strncmp(p, "version_node height=1 ", 22) == 0) {
            (*height1)++;
        }
        if (strncmp(p, "version generation=", 19) == 0 && n < cap) {
            const char *k = strstr(p, "num_keys=");
            gen[n] = strtoull(p + 19, NULL, 10);
            keys[n++] = k != NULL ? strtoull(k + 9, NULL, 10) : 0;
        }
    }
    for (size_t i = 1; i < n; i++) { /* insertion sort by generation */
        for (size_t j = i; j > 0 && gen[j - 1] > gen[j]; j--) {
            uint64_t t = gen[j], u = keys[j];
            gen[j] = gen[j - 1];
            keys[j] = keys[j - 1];
            gen[j - 1] = t;
            keys[j - 1] = u;
        }
    }
    ur_buf_dispose(&dump);
    ur_kvstore_close(kv);
    return n;
}

static unsigned latest_root_height(const char *db)
{
    ur_kvstore *kv = NULL;
    ur_buf dump;
    ur_err err;
    const char *p;
    unsigned h = 0;
    ur_buf_init(&dump, 0);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    assert_int_equal(ur_ocdbt_dump_manifest(kv, &dump, &err), UR_OK);
    assert_int_equal(ur_buf_append(&dump, "", 1, &err), UR_OK);
    p = strstr((const char *)dump.data, "root_height="); /* the first inline version's */
    assert_non_null(p);
    h = (unsigned)strtoul(p + 12, NULL, 10);
    ur_buf_dispose(&dump);
    ur_kvstore_close(kv);
    return h;
}

static void check_latest(const char *db, int n_keys, const int *gen_of)
{
    ur_kvstore *kv = NULL;
    uint8_t want[2000];
    char key[32];
    ur_buf b;
    ur_err err;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    for (int i = 0; i < n_keys; i++) {
        size_t len = value_of(want, sizeof want, i, gen_of[i]);
        snprintf(key, sizeof key, "k/%05d", i);
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_OK);
        assert_int_equal(b.len, len);
        assert_memory_equal(b.data, want, len);
    }
    snprintf(key, sizeof key, "k/%05d", n_keys);
    ur_buf_reset(&b);
    assert_int_equal(ur_kvstore_read(kv, key, &b, &err), UR_ENOTFOUND);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

/* 40 commits at arity 16: generations 33..40 inline, 1..32 in two height-0 nodes under one
 * height-1 node; a resume continues with generation 41. */
static void test_ocdbt_write__generations_across_version_nodes(void **state)
{
    char dir[64], db[300], key[32];
    uint64_t gen[64], keys[64];
    int gen_of[64];
    uint8_t v[2000];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    size_t n, h1 = 0, kept = 0;
    ur_err err;
    (void)state;
    ur_test_scratch_dir(dir, sizeof dir, "ocdbt_write_gen");
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.seed = 11;
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    for (int g = 1; g <= 40; g++) {
        snprintf(key, sizeof key, "k/%05d", g - 1);
        gen_of[g - 1] = g;
        assert_int_equal(ur_kvstore_write(kv, key, v, value_of(v, sizeof v, g - 1, g), &err),
                         UR_OK);
        if (g % 5 == 0) { /* an older key rewritten: the new value wins */
            int i = g / 5 - 1;
            snprintf(key, sizeof key, "k/%05d", i);
            gen_of[i] = g;
            assert_int_equal(ur_kvstore_write(kv, key, v, value_of(v, sizeof v, i, g), &err),
                             UR_OK);
        }
        assert_int_equal(ur_ocdbt_writer_snapshot(kv, &err), UR_OK);
    }
    ur_kvstore_close(kv); /* killed after the 40th piece */
    n = dumped_generations(db, gen, keys, 64, &h1);
    assert_int_equal(n, 40);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(gen[i], i + 1);
        assert_int_equal(keys[i], i + 1);
    }
    assert_int_equal(h1, 1);
    check_latest(db, 40, gen_of);

    assert_int_equal(ur_ocdbt_resume(&kv, db, &o, &kept, &err), UR_OK);
    assert_int_equal(kept, 40);
    snprintf(key, sizeof key, "k/%05d", 40);
    gen_of[40] = 41;
    assert_int_equal(ur_kvstore_write(kv, key, v, value_of(v, sizeof v, 40, 41), &err), UR_OK);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
    n = dumped_generations(db, gen, keys, 64, &h1);
    assert_int_equal(n, 41);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(gen[i], i + 1);
    }
    check_latest(db, 41, gen_of);
    cleanup(dir);
}

/* Small nodes make a tree of several levels; keys arrive in a scrambled order over 25
 * commits (some rewritten), so every commit rewrites some paths and keeps other subtrees:
 * after each, the latest generation holds exactly what was written. */
static void test_ocdbt_write__commits_merge_into_a_deep_tree(void **state)
{
    enum { N = 3000, COMMITS = 25 };
    char dir[64], db[300], key[32];
    static int gen_of[N];
    uint8_t v[2000];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    int written = 0;
    ur_err err;
    (void)state;
    ur_test_scratch_dir(dir, sizeof dir, "ocdbt_write_cow");
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.seed = 5;
    o.max_decoded_node_bytes = 600;
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    for (int g = 1; g <= COMMITS; g++) {
        int upto = N * g / COMMITS;
        for (; written < upto; written++) {
            int i = (written * 1777) % N; /* a permutation of 0..N-1 (1777 is prime to N) */
            snprintf(key, sizeof key, "k/%05d", i);
            gen_of[i] = g;
            assert_int_equal(ur_kvstore_write(kv, key, v, value_of(v, sizeof v, i, g), &err),
                             UR_OK);
        }
        for (int r = 0; r < 20 && g > 1; r++) { /* rewrite some keys of earlier commits */
            int i = (int)(((unsigned)(r * 131 + g) * 2654435761u) % N);
            if (gen_of[i] != 0) {
                snprintf(key, sizeof key, "k/%05d", i);
                gen_of[i] = g;
                assert_int_equal(ur_kvstore_write(kv, key, v, value_of(v, sizeof v, i, g), &err),
                                 UR_OK);
            }
        }
        assert_int_equal(ur_ocdbt_writer_snapshot(kv, &err), UR_OK);
        if (g % 6 == 0 || g == COMMITS) {
            ur_kvstore *rd = NULL;
            uint8_t want[2000];
            ur_buf b;
            int present = 0;
            ur_buf_init(&b, 0);
            assert_int_equal(ur_ocdbt_open(&rd, db, &err), UR_OK);
            for (int i = 0; i < N; i++) {
                int rc;
                snprintf(key, sizeof key, "k/%05d", i);
                ur_buf_reset(&b);
                rc = ur_kvstore_read(rd, key, &b, &err);
                if (gen_of[i] == 0) {
                    assert_int_equal(rc, UR_ENOTFOUND);
                    continue;
                }
                assert_int_equal(rc, UR_OK);
                assert_int_equal(b.len, value_of(want, sizeof want, i, gen_of[i]));
                assert_memory_equal(b.data, want, b.len);
                present++;
            }
            assert_int_equal(present, written);
            ur_buf_dispose(&b);
            ur_kvstore_close(rd);
        }
    }
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK); /* nothing new: no generation */
    ur_kvstore_close(kv);
    {
        uint64_t gen[32], keys[32];
        size_t h1 = 0, n = dumped_generations(db, gen, keys, 32, &h1);
        assert_int_equal(n, COMMITS);
        assert_int_equal(keys[COMMITS - 1], N);
        assert_true(latest_root_height(db) >= 2);
    }
    cleanup(dir);
}

/* Leaves in the latest tree of db (`unroll ls --tree`). */
static size_t count_leaves(const char *db)
{
    ur_kvstore *kv = NULL;
    ur_buf dump;
    ur_err err;
    size_t n = 0;
    ur_buf_init(&dump, 0);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    assert_int_equal(ur_ocdbt_dump_tree(kv, &dump, &err), UR_OK);
    assert_int_equal(ur_buf_append(&dump, "", 1, &err), UR_OK);
    for (const char *p = (const char *)dump.data; (p = strstr(p, "node height=0 ")) != NULL; p++) {
        n++;
    }
    ur_buf_dispose(&dump);
    ur_kvstore_close(kv);
    return n;
}

/* Keys arriving in order inside full leaves (every array's metadata first, then its chunks,
 * a few per commit, as a share writes them): an overflowing leaf is split evenly, so leaves
 * stay at least about a third full (not a tiny leaf left behind per commit). */
static void test_ocdbt_write__commits_keep_leaves_full(void **state)
{
    char dir[64], db[300], key[32];
    uint8_t v[485];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL, *once = NULL;
    size_t grown, fresh;
    ur_err err;
    (void)state;
    ur_test_scratch_dir(dir, sizeof dir, "ocdbt_write_full");
    memset(v, 'z', sizeof v);
    ur_ocdbt_write_opts_init(&o);
    o.max_decoded_node_bytes = 20000;
    snprintf(db, sizeof db, "%s/grown", dir);
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    snprintf(db, sizeof db, "%s/once", dir);
    assert_int_equal(ur_ocdbt_create(&once, db, &o, &err), UR_OK);
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "k%04d/z", i);
        assert_int_equal(ur_kvstore_write(kv, key, v, sizeof v, &err), UR_OK);
        assert_int_equal(ur_kvstore_write(once, key, v, sizeof v, &err), UR_OK);
    }
    for (int i = 0; i < 200; i++) {
        if (i % 8 == 0) {
            assert_int_equal(ur_ocdbt_writer_snapshot(kv, &err), UR_OK);
        }
        snprintf(key, sizeof key, "k%04d/c", i);
        assert_int_equal(ur_kvstore_write(kv, key, v, 37, &err), UR_OK);
        assert_int_equal(ur_kvstore_write(once, key, v, 37, &err), UR_OK);
    }
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    assert_int_equal(ur_kvstore_commit(once, &err), UR_OK);
    ur_kvstore_close(kv);
    ur_kvstore_close(once);
    snprintf(db, sizeof db, "%s/grown", dir);
    grown = count_leaves(db);
    snprintf(db, sizeof db, "%s/once", dir);
    fresh = count_leaves(db);
    assert_true(fresh >= 5);
    assert_true(grown <= 3 * fresh); /* 16 and 6 here; a full leaf and the rest: 26 */
    cleanup(dir);
}

/* Resume a database and commit twice (the second commit crossing into a new version bucket),
 * as a rerun of a killed share does. */
static int resume_and_commit(const char *db, const ur_ocdbt_write_opts *o, int g0, ur_err *err)
{
    ur_kvstore *kv = NULL;
    uint8_t v[2000];
    char key[32];
    size_t kept = 0;
    int rc = ur_ocdbt_resume(&kv, db, o, &kept, err);
    for (int g = g0; g < g0 + 2 && rc == UR_OK; g++) {
        snprintf(key, sizeof key, "k/%05d", g - 1);
        rc = ur_kvstore_write(kv, key, v, value_of(v, sizeof v, g - 1, g), err);
        if (rc == UR_OK) {
            rc = g == g0 ? ur_ocdbt_writer_snapshot(kv, err) : ur_kvstore_commit(kv, err);
        }
    }
    ur_kvstore_close(kv);
    return rc;
}

/* Allocation failures all through a resume and its two commits: each fails cleanly
 * with UR_ENOMEM and leaves the database at a generation it had, all of them readable (the
 * next try resumes from there); once nothing fails, every key is there. */
static void test_ocdbt_write__resume_and_commit_out_of_memory(void **state)
{
    char dir[64], db[300], key[32];
    static uint64_t gen[512], keys[512];
    int gen_of[32];
    uint8_t v[2000];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    size_t h1 = 0, n = 0;
    ur_err err;
    int rc = UR_ENOMEM;
    long k;
    (void)state;
    ur_test_scratch_dir(dir, sizeof dir, "ocdbt_write_oom");
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.compress = 0; /* zstd allocates outside ur_malloc */
    o.max_decoded_node_bytes = 300;
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    for (int g = 1; g <= 15; g++) {
        snprintf(key, sizeof key, "k/%05d", g - 1);
        gen_of[g - 1] = g;
        assert_int_equal(ur_kvstore_write(kv, key, v, value_of(v, sizeof v, g - 1, g), &err),
                         UR_OK);
        assert_int_equal(ur_ocdbt_writer_snapshot(kv, &err), UR_OK);
    }
    ur_kvstore_close(kv);
    /* about 1700 allocations: every 29th fails (each try syncs files, and CI time counts) */
    for (k = 0; rc == UR_ENOMEM && k < 20000; k += 29) {
        ur_alloc_fail_after(k);
        rc = resume_and_commit(db, &o, 16, &err);
        ur_alloc_fail_after(-1);
        assert_true(rc == UR_OK || rc == UR_ENOMEM);
        n = dumped_generations(db, gen, keys, 512, &h1);
        assert_true(n >= 15 && n < 512); /* each try that got its first commit through adds one */
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(gen[i], i + 1);
        }
    }
    assert_int_equal(rc, UR_OK);
    assert_true(k > 10);
    assert_true(n >= 17);
    gen_of[15] = 16;
    gen_of[16] = 17;
    check_latest(db, 17, gen_of);
    cleanup(dir);
}

/* Keys are held packed against the key written before them until a commit: keys that
 * share nothing, all, a prefix of the one before, that extend it, a rewrite, the longest
 * key there can be, refused writes between them, and writes after a snapshot all read back
 * as written (the last write of a key winning). */
static void read_back(const char *db, const char *const *keys, const uint8_t *vals, size_t n)
{
    ur_kvstore *kv = NULL;
    ur_buf b;
    ur_err err;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_ocdbt_open(&kv, db, &err), UR_OK);
    for (size_t i = 0; i < n; i++) {
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, keys[i], &b, &err), UR_OK);
        assert_int_equal(b.len, 1);
        assert_int_equal(b.data[0], vals[i]);
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_ocdbt_write__packed_keys(void **state)
{
    static char longest[65536], too_long[65537];
    const char *keys[] = {"", /* the empty key, first: nothing to remember */
                          "params.decoder.layers_0.w/c/0",
                          "params.decoder.layers_0.w/zarr.json",
                          "params.decoder.layers_1.w/c/0",
                          "params.decoder.layers_1.w", /* a prefix of the key before */
                          "params.decoder.layers_1.w/c/0/0/0/1", /* extends it */
                          "zzz", /* shares nothing */
                          "params.decoder.layers_0.w/c/0", /* a rewrite */
                          longest,
                          "params.decoder.layers_0.w/c/1"};
    uint8_t vals[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    size_t n = sizeof keys / sizeof keys[0];
    char dir[64], db[300];
    ur_ocdbt_write_opts o;
    ur_kvstore *kv = NULL;
    ur_err err;
    (void)state;
    memset(longest, 'p', sizeof longest - 1);
    memcpy(longest, "params.decoder.", 15);
    memset(too_long, 'p', sizeof too_long - 1);
    ur_test_scratch_dir(dir, sizeof dir, "ocdbt_write_packed");
    snprintf(db, sizeof db, "%s/db", dir);
    ur_ocdbt_write_opts_init(&o);
    o.max_decoded_node_bytes = 400; /* several nodes: keys cut by their common prefixes */
    assert_int_equal(ur_ocdbt_create(&kv, db, &o, &err), UR_OK);
    for (size_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)(i == 7 ? 100 : vals[i]); /* rewritten below */
        assert_int_equal(ur_kvstore_write(kv, keys[i], &v, 1, &err), UR_OK);
        assert_int_equal(ur_kvstore_write(kv, too_long, &v, 1, &err), UR_EINVAL);
        if (i == 5) {
            assert_int_equal(ur_ocdbt_writer_snapshot(kv, &err), UR_OK);
        }
    }
    /* keys 1 and 7 are one key: its last write is vals[7] */
    vals[1] = vals[7];
    assert_int_equal(ur_kvstore_write(kv, keys[7], &vals[7], 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
    read_back(db, keys, vals, n);
    cleanup(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ocdbt_write__generations_across_version_nodes),
        cmocka_unit_test(test_ocdbt_write__commits_merge_into_a_deep_tree),
        cmocka_unit_test(test_ocdbt_write__commits_keep_leaves_full),
        cmocka_unit_test(test_ocdbt_write__resume_and_commit_out_of_memory),
        cmocka_unit_test(test_ocdbt_write__packed_keys),
    };
    return cmocka_run_group_tests_name("ocdbt_write", tests, NULL, NULL);
}
