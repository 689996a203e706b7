/* Checkpoint open/write: writer -> reader round trips in the four layouts, the commit
 * protocol, damaged metadata in a written checkpoint, and OOM while opening. */
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/orbax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ur_test_orbax_ckpt.%ld", (long)getpid());
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

/* params.w: float32[5, 3] chunked [2, 3], spec ('x', None); step: int64 scalar 7;
 * opt_state: {}; layers: [bfloat16[4]]. */
static void write_small(const char *step_dir, int ocdbt, int zarr3)
{
    ur_err err;
    ur_orbax_write_opts o;
    ur_orbax_write_opts_init(&o);
    o.use_ocdbt = ocdbt;
    o.use_zarr3 = zarr3;
    ur_orbax_writer *w = NULL;
    assert_int_equal(ur_orbax_writer_create(&w, step_dir, &o, &err), UR_OK);

    ur_orbax_key pw[2] = {{"params", UR_ORBAX_KEY_DICT}, {"w", UR_ORBAX_KEY_DICT}};
    uint64_t shape[2] = {5, 3};
    uint64_t chunk[2] = {2, 3};
    const char *spec[2] = {"x", NULL};
    ur_zarr_array *arr = NULL;
    assert_int_equal(
        ur_orbax_writer_add_array(w, pw, 2, UR_DT_FLOAT32, 2, shape, chunk, spec, &arr, &err),
        UR_OK);
    for (uint64_t g = 0; g < 3; g++) {
        float buf[6];
        for (int i = 0; i < 6; i++) {
            buf[i] = (float)(g * 6 + (uint64_t)i);
        }
        uint64_t idx[2] = {g, 0};
        assert_int_equal(ur_zarr_array_write_chunk(arr, idx, buf, &err), UR_OK);
    }
    ur_orbax_key ps[1] = {{"step", UR_ORBAX_KEY_DICT}};
    int64_t seven = 7;
    assert_int_equal(ur_orbax_writer_add_scalar(w, ps, 1, UR_DT_INT64, &seven, &err), UR_OK);
    ur_orbax_key po[1] = {{"opt_state", UR_ORBAX_KEY_DICT}};
    assert_int_equal(ur_orbax_writer_add_empty(w, po, 1, UR_ORBAX_VALUE_EMPTY_DICT, &err), UR_OK);
    ur_orbax_key pl[2] = {{"layers", UR_ORBAX_KEY_DICT}, {"0", UR_ORBAX_KEY_SEQUENCE}};
    uint64_t s4[1] = {4};
    assert_int_equal(
        ur_orbax_writer_add_array(w, pl, 2, UR_DT_BFLOAT16, 1, s4, s4, NULL, &arr, &err), UR_OK);
    uint16_t bf[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    uint64_t z[1] = {0};
    assert_int_equal(ur_zarr_array_write_chunk(arr, z, bf, &err), UR_OK);
    /* Misuse is refused. */
    assert_int_equal(ur_orbax_writer_add_empty(w, po, 1, UR_ORBAX_VALUE_EMPTY_DICT, &err),
                     UR_EINVAL);
    const char *badspec[1] = {"nope"};
    ur_orbax_key pb[1] = {{"b", UR_ORBAX_KEY_DICT}};
    assert_int_equal(
        ur_orbax_writer_add_array(w, pb, 1, UR_DT_INT8, 1, s4, s4, badspec, &arr, &err),
        UR_EINVAL);
    assert_non_null(strstr(err.msg, "'nope' is not a mesh axis"));
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_OK);
}

/* flags: ur_orbax_ckpt_open's (the side files read beside _METADATA or after it: the same
 * leaves either way). */
static void roundtrip(int ocdbt, int zarr3, unsigned flags)
{
    char step[300];
    snprintf(step, sizeof step, "%s/rt%d%d%u/0", tmpdir, ocdbt, zarr3, flags);
    write_small(step, ocdbt, zarr3);
    char tmp[340];
    snprintf(tmp, sizeof tmp, "%s.orbax-checkpoint-tmp", step);
    assert_false(ur_fs_exists(tmp));

    ur_err err;
    ur_orbax_ckpt *ck = NULL;
    assert_int_equal(ur_orbax_ckpt_open(&ck, step, flags, &err), UR_OK);
    assert_int_equal(ur_orbax_ckpt_use_ocdbt(ck), ocdbt);
    assert_int_equal(ur_orbax_ckpt_use_zarr3(ck), zarr3);
    assert_true(ur_orbax_ckpt_store_fill_value(ck));
    assert_true(ur_orbax_ckpt_has_sharding_file(ck));
    const ur_orbax_step_meta *sm = ur_orbax_ckpt_step_meta(ck);
    assert_non_null(sm);
    assert_int_equal(sm->n_item_handlers, 1);
    assert_string_equal(sm->item_names[0], "items");
    assert_true(sm->has_commit_timestamp);
    assert_int_equal(ur_orbax_ckpt_leaf_count(ck), 4);
    /* tree order: layers.0, opt_state, params.w, step */
    const ur_orbax_leaf *l = ur_orbax_ckpt_leaf(ck, 0);
    assert_string_equal(l->name, "layers.0");
    assert_int_equal(l->path[1].type, UR_ORBAX_KEY_SEQUENCE);
    assert_int_equal(l->dtype, UR_DT_BFLOAT16);
    assert_int_equal(l->sharding.kind, UR_ORBAX_SHARDING_NAMED);
    assert_int_equal(l->sharding.mesh_shape[0], -1);
    assert_null(l->sharding.spec[0]);
    l = ur_orbax_ckpt_leaf(ck, 1);
    assert_string_equal(l->name, "opt_state");
    assert_int_equal(l->value_type, UR_ORBAX_VALUE_EMPTY_DICT);
    assert_false(l->has_array);
    l = ur_orbax_ckpt_leaf(ck, 2);
    assert_string_equal(l->name, "params.w");
    assert_int_equal(l->rank, 2);
    assert_int_equal(l->shape[0], 5);
    assert_int_equal(l->chunk_shape[0], 2);
    assert_int_equal(l->write_shape_rank, 2);
    assert_int_equal(l->array_meta_chunk_rank, 2);
    assert_int_equal(l->array_meta_chunk_shape[0], 2);
    assert_int_equal(l->array_meta_chunk_shape[1], 3);
    assert_string_equal(l->sharding.spec[0], "x");
    assert_string_equal(l->sharding.mesh_axis_names[0], "x");
    ur_zarr_array *arr = NULL;
    assert_int_equal(ur_orbax_ckpt_open_array(ck, l, &arr, &err), UR_OK);
    float all[15];
    uint64_t start[2] = {0, 0};
    uint64_t count[2] = {5, 3};
    assert_int_equal(ur_zarr_array_read_box(arr, start, count, all, &err), UR_OK);
    for (int i = 0; i < 15; i++) {
        assert_true(all[i] == (float)i);
    }
    ur_zarr_array_close(arr);
    l = ur_orbax_ckpt_leaf(ck, 3);
    assert_string_equal(l->name, "step");
    assert_int_equal(l->value_type, UR_ORBAX_VALUE_SCALAR);
    assert_int_equal(l->rank, 0);
    assert_int_equal(ur_orbax_ckpt_open_array(ck, l, &arr, &err), UR_OK);
    int64_t v = 0;
    assert_int_equal(ur_zarr_array_read_box(arr, start, count, &v, &err), UR_OK);
    assert_int_equal(v, 7);
    ur_zarr_array_close(arr);
    assert_int_equal(ur_orbax_ckpt_open_array(ck, ur_orbax_ckpt_leaf(ck, 1), &arr, &err),
                     UR_EINVAL);
    const ur_orbax_leaf *f = NULL;
    assert_int_equal(ur_orbax_ckpt_find(ck, "params.w", &f, &err), UR_OK);
    assert_int_equal(ur_orbax_ckpt_find(ck, "params", &f, &err), UR_ENOTFOUND);
    ur_orbax_ckpt_close(ck);

    /* The item directory opens the same checkpoint. */
    char item[320];
    snprintf(item, sizeof item, "%s/items", step);
    assert_int_equal(ur_orbax_ckpt_open(&ck, item, UR_ORBAX_OPEN_NO_ARRAYS, &err), UR_OK);
    assert_int_equal(ur_orbax_ckpt_leaf_count(ck), 4);
    assert_non_null(ur_orbax_ckpt_step_meta(ck));
    ur_orbax_ckpt_close(ck);
}

static void test_orbax_ckpt__roundtrip_layouts(void **state)
{
    (void)state;
    for (unsigned flags = 0; flags <= UR_ORBAX_OPEN_SIDE_AFTER;
         flags += UR_ORBAX_OPEN_SIDE_AFTER) {
        roundtrip(1, 1, flags);
        roundtrip(1, 0, flags);
        roundtrip(0, 1, flags);
        roundtrip(0, 0, flags);
    }
}

static void put_file(const char *dir, const char *name, const char *text)
{
    char *p = ur_path_join(dir, name);
    ur_err err;
    assert_int_equal(ur_fs_write_file(p, text, strlen(text), &err), UR_OK);
    ur_free(p);
}

/* With the side files read beside _METADATA and after it: one fault, the same error. */
static void expect_open_fails(const char *step, int code, const char *needle)
{
    for (unsigned flags = 0; flags <= UR_ORBAX_OPEN_SIDE_AFTER;
         flags += UR_ORBAX_OPEN_SIDE_AFTER) {
        ur_orbax_ckpt *ck = NULL;
        ur_err err;
        ur_err_clear(&err);
        int rc = ur_orbax_ckpt_open(&ck, step, flags, &err);
        if (rc != code || strstr(err.msg, needle) == NULL) {
            fail_msg("flags %u: rc %d msg '%s' where '%s', expected '%s'", flags, rc, err.msg,
                     err.where, needle);
        }
        assert_null(ck);
    }
}

static void test_orbax_ckpt__damaged(void **state)
{
    (void)state;
    char step[300];
    char item[320];
    snprintf(step, sizeof step, "%s/dmg/0", tmpdir);
    snprintf(item, sizeof item, "%s/items", step);
    write_small(step, 0, 0);

    /* _sharding without the entry of an array. */
    put_file(item, "_sharding", "{}");
    expect_open_fails(step, UR_ECORRUPT, "_sharding: no entry for array 'layers.0'");
    /* partition_spec longer than the array's rank: "bGF5ZXJzLjA=" = "layers.0" */
    put_file(item, "_sharding",
             "{\"bGF5ZXJzLjA=\": \"{\\\"sharding_type\\\": \\\"NamedSharding\\\", \\\"shape\\\": "
             "[1], \\\"axis_names\\\": [\\\"x\\\"], \\\"partition_spec\\\": [null, null]}\", "
             "\"cGFyYW1zLnc=\": \"\"}");
    expect_open_fails(step, UR_ECORRUPT, "'layers.0': partition_spec has 2 entries for a rank-1");
    put_file(item, "_sharding", "{\"bGF5ZXJzLjA=\": \"\", \"cGFyYW1zLnc=\": \"\"}");
    ur_orbax_ckpt *ck = NULL;
    ur_err err;
    assert_int_equal(ur_orbax_ckpt_open(&ck, step, 0, &err), UR_OK);
    ur_orbax_ckpt_close(ck);
    /* The zarr metadata of one array damaged: the error names the array. */
    char zarray[400];
    snprintf(zarray, sizeof zarray, "%s/params.w", item);
    put_file(zarray, ".zarray", "{\"zarr_format\": 2, \"shape\": [-5]}");
    expect_open_fails(step, UR_ECORRUPT, "params.w");
    put_file(item, "_METADATA", "{\"tree_metadata\": 5}");
    expect_open_fails(step, UR_ECORRUPT, "_METADATA: tree_metadata");
    put_file(item, "_CHECKPOINT_METADATA", "");
    put_file(step, "_CHECKPOINT_METADATA", "[");
    expect_open_fails(step, UR_ECORRUPT, "_CHECKPOINT_METADATA: invalid JSON");
    /* Not a checkpoint; a temporary directory. */
    expect_open_fails(tmpdir, UR_ENOTFOUND, "not an Orbax checkpoint");
    snprintf(step, sizeof step, "%s/x/1.orbax-checkpoint-tmp", tmpdir);
    expect_open_fails(step, UR_ECORRUPT, "unfinished Orbax save (a temporary");
}

static void remove_file(const char *dir, const char *name)
{
    char *p = ur_path_join(dir, name);
    assert_int_equal(unlink(p), 0);
    ur_free(p);
}

static void make_dir(const char *dir, const char *name)
{
    char *p = ur_path_join(dir, name);
    ur_err err;
    assert_int_equal(ur_fs_mkdirs(p, &err), UR_OK);
    ur_free(p);
}

/* The states a commit-file save (Orbax on object stores) passes through, newest file first
 * removed: each is refused as unfinished, whichever directory is given. */
static void test_orbax_ckpt__unfinished(void **state)
{
    (void)state;
    char step[300];
    char item[320];
    ur_orbax_ckpt *ck = NULL;
    ur_err err;
    snprintf(step, sizeof step, "%s/unf/0", tmpdir);
    snprintf(item, sizeof item, "%s/items", step);
    write_small(step, 1, 1);
    /* The per-process database of a save, never merged: manifest.ocdbt is the merge's. */
    make_dir(item, "ocdbt.process_0");
    assert_int_equal(ur_orbax_ckpt_open(&ck, step, 0, &err), UR_OK);
    ur_orbax_ckpt_close(ck);
    /* Items finalized, the step not yet. */
    remove_file(step, "commit_success.txt");
    expect_open_fails(step, UR_ECORRUPT, "no commit_success.txt in the step directory");
    expect_open_fails(item, UR_ECORRUPT, "no commit_success.txt in the step directory");
    /* _METADATA written, the merge not done. */
    remove_file(item, "commit_success.txt");
    remove_file(item, "manifest.ocdbt");
    expect_open_fails(step, UR_ECORRUPT, "no manifest.ocdbt (the 1 ocdbt.process_*");
    /* Data being written: no _METADATA yet. ocdbt.process_0 is never taken as the item. */
    remove_file(item, "_METADATA");
    expect_open_fails(step, UR_ECORRUPT, "items: unfinished Orbax save: no _METADATA");
    expect_open_fails(item, UR_ECORRUPT, "items: unfinished Orbax save: no _METADATA");
    remove_file(item, "_sharding");
    expect_open_fails(item, UR_ECORRUPT, "items: unfinished Orbax save: no _METADATA");
    /* An item that only has its per-process database so far. */
    snprintf(step, sizeof step, "%s/unf/1", tmpdir);
    snprintf(item, sizeof item, "%s/state", step);
    make_dir(item, "ocdbt.process_0");
    put_file(step, "_CHECKPOINT_METADATA", "{\"init_timestamp_nsecs\": 1}");
    expect_open_fails(step, UR_ECORRUPT, "state: unfinished Orbax save: no _METADATA");
    /* A plain (non-OCDBT) item written by two processes with no commit mark. */
    snprintf(step, sizeof step, "%s/unf/2", tmpdir);
    snprintf(item, sizeof item, "%s/items", step);
    write_small(step, 0, 0);
    char am[400];
    snprintf(am, sizeof am, "%s/array_metadatas", item);
    put_file(am, "process_1", "{\"array_metadatas\": []}");
    assert_int_equal(ur_orbax_ckpt_open(&ck, step, UR_ORBAX_OPEN_NO_ARRAYS, &err), UR_OK);
    ur_orbax_ckpt_close(ck);
    remove_file(step, "commit_success.txt");
    remove_file(item, "commit_success.txt");
    put_file(step, "_CHECKPOINT_METADATA", "{\"init_timestamp_nsecs\": 1}");
    expect_open_fails(step, UR_ECORRUPT, "2 processes wrote arrays");
    /* ... which a commit timestamp (set at finalize, in either mode) vouches for. */
    put_file(step, "_CHECKPOINT_METADATA",
             "{\"init_timestamp_nsecs\": 1, \"commit_timestamp_nsecs\": 2}");
    assert_int_equal(ur_orbax_ckpt_open(&ck, step, UR_ORBAX_OPEN_NO_ARRAYS, &err), UR_OK);
    ur_orbax_ckpt_close(ck);
}

static void test_orbax_ckpt__abort_and_existing(void **state)
{
    (void)state;
    char step[300];
    snprintf(step, sizeof step, "%s/ab/3", tmpdir);
    ur_err err;
    ur_orbax_writer *w = NULL;
    assert_int_equal(ur_orbax_writer_create(&w, step, NULL, &err), UR_OK);
    char tmp[340];
    snprintf(tmp, sizeof tmp, "%s.orbax-checkpoint-tmp", step);
    assert_true(ur_fs_is_dir(tmp));
    ur_orbax_writer_abort(w);
    assert_false(ur_fs_exists(tmp));
    assert_false(ur_fs_exists(step));
    /* A commit with no leaves fails and cleans up. */
    assert_int_equal(ur_orbax_writer_create(&w, step, NULL, &err), UR_OK);
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_EINVAL);
    assert_false(ur_fs_exists(tmp));
    /* A list with a gap cannot be restored by Orbax: refused at commit. */
    assert_int_equal(ur_orbax_writer_create(&w, step, NULL, &err), UR_OK);
    ur_orbax_key gap[2] = {{"l", UR_ORBAX_KEY_DICT}, {"1", UR_ORBAX_KEY_SEQUENCE}};
    assert_int_equal(ur_orbax_writer_add_empty(w, gap, 2, UR_ORBAX_VALUE_NONE, &err), UR_OK);
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "out of sequence"));
    assert_false(ur_fs_exists(tmp));
    /* An existing step is never overwritten. */
    assert_int_equal(ur_fs_mkdirs(step, &err), UR_OK);
    assert_int_equal(ur_orbax_writer_create(&w, step, NULL, &err), UR_EINVAL);
}

static void test_orbax_ckpt__open_oom(void **state)
{
    (void)state;
    char step[300];
    snprintf(step, sizeof step, "%s/oom/0", tmpdir);
    write_small(step, 1, 1);
    for (unsigned flags = 0; flags <= UR_ORBAX_OPEN_SIDE_AFTER;
         flags += UR_ORBAX_OPEN_SIDE_AFTER) {
        for (long n = 0;; n++) {
            ur_orbax_ckpt *ck = NULL;
            ur_err err;
            ur_alloc_fail_after(n);
            int rc = ur_orbax_ckpt_open(&ck, step, flags, &err);
            ur_alloc_fail_after(-1);
            if (rc == UR_OK) {
                assert_int_equal(ur_orbax_ckpt_leaf_count(ck), 4);
                ur_orbax_ckpt_close(ck);
                break;
            }
            assert_null(ck);
            assert_int_equal(rc, UR_ENOMEM);
            assert_true(n < 100000);
        }
    }
}

/* Many arrays are described on several threads: every leaf gets its shapes, and with two
 * damaged arrays the error names the first of them, as a single thread would. */
static void test_orbax_ckpt__many_arrays(void **state)
{
    enum { N = 1100 };
    char step[512], items[560], bad[640];
    ur_orbax_write_opts o;
    ur_orbax_writer *w = NULL;
    ur_orbax_ckpt *ck = NULL;
    ur_err err;
    (void)state;
    snprintf(step, sizeof step, "%s/many/0", tmpdir);
    snprintf(items, sizeof items, "%s/items", step);
    ur_orbax_write_opts_init(&o);
    o.use_ocdbt = 0; /* plain files, so that one array's metadata can be damaged */
    assert_int_equal(ur_orbax_writer_create(&w, step, &o, &err), UR_OK);
    for (int i = 0; i < N; i++) {
        char name[16];
        ur_orbax_key p[2] = {{"p", UR_ORBAX_KEY_DICT}, {name, UR_ORBAX_KEY_DICT}};
        uint64_t shape[2] = {(uint64_t)i % 3 + 1, 3}, chunk[2] = {3, 3}, idx[2] = {0, 0};
        float v[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        ur_zarr_array *arr = NULL;
        snprintf(name, sizeof name, "a%04d", i);
        assert_int_equal(
            ur_orbax_writer_add_array(w, p, 2, UR_DT_FLOAT32, 2, shape, chunk, NULL, &arr, &err),
            UR_OK);
        assert_int_equal(ur_zarr_array_write_chunk(arr, idx, v, &err), UR_OK);
        ur_orbax_writer_done_array(w, arr);
    }
    assert_int_equal(ur_orbax_writer_commit(w, &err), UR_OK);

    assert_int_equal(ur_orbax_ckpt_open(&ck, items, 0, &err), UR_OK);
    assert_int_equal(ur_orbax_ckpt_leaf_count(ck), N);
    for (size_t i = 0; i < N; i++) {
        const ur_orbax_leaf *l = ur_orbax_ckpt_leaf(ck, i);
        assert_true(l->has_array);
        assert_int_equal(l->rank, 2);
        assert_int_equal(l->shape[0], i % 3 + 1);
        assert_int_equal(l->shape[1], 3);
        assert_int_equal(l->chunk_shape[0], 3);
    }
    ur_orbax_ckpt_close(ck);

    /* damage two, far apart (in different threads' ranges) */
    for (int k = 0; k < 2; k++) {
        FILE *f;
        snprintf(bad, sizeof bad, "%s/p.a%04d/zarr.json", items, k == 0 ? 1000 : 600);
        f = fopen(bad, "w");
        assert_non_null(f);
        fputs("{not json", f);
        fclose(f);
    }
    assert_int_equal(ur_orbax_ckpt_open(&ck, items, 0, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "p.a0600"));
    assert_null(strstr(err.msg, "p.a1000"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orbax_ckpt__roundtrip_layouts),
        cmocka_unit_test(test_orbax_ckpt__damaged),
        cmocka_unit_test(test_orbax_ckpt__unfinished),
        cmocka_unit_test(test_orbax_ckpt__abort_and_existing),
        cmocka_unit_test(test_orbax_ckpt__open_oom),
        cmocka_unit_test(test_orbax_ckpt__many_arrays),
    };
    return cmocka_run_group_tests_name("orbax_ckpt", tests, setup, teardown);
}
