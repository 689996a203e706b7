/* The directory kvstore: round trip, ordered listing, ranges, and keys that would escape. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"
#include "unroll/kvstore.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char scratch[256];

static int setup(void **state)
{
    (void)state;
    strcpy(scratch, "/tmp/ur_kvfile_test_XXXXXX");
    return mkdtemp(scratch) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return ur_fs_remove_tree(scratch, NULL) == UR_OK ? 0 : -1;
}

typedef struct {
    char keys[16][64];
    uint64_t sizes[16];
    int n;
} listing;

static int collect(void *ctx, const char *key, uint64_t size)
{
    listing *l = ctx;
    if (l->n < 16) {
        snprintf(l->keys[l->n], sizeof l->keys[0], "%s", key);
        l->sizes[l->n++] = size;
    }
    return 0;
}

/* Entries of a one-level listing, as "name/" for a directory. */
typedef struct {
    char names[8][32];
    int n;
} dir_listing;

static int collect_dir(void *ctx, const char *name, int is_dir)
{
    dir_listing *l = ctx;
    if (l->n < 8) {
        snprintf(l->names[l->n++], sizeof l->names[0], "%s%s", name, is_dir ? "/" : "");
    }
    return 0;
}

static void test_kvstore_file__write_read_list(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    ur_buf b;
    listing l = {0};
    dir_listing d = {0};
    ur_kvstore *view = NULL;
    uint8_t range[3];
    uint64_t size;
    char *p;
    char *root = ur_path_join(scratch, "db");
    (void)state;

    assert_int_equal(ur_kvstore_file_open(&kv, root, 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "b.c/0", "xyz", 3, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "a/zarr.json", "{}", 2, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "a/c/0/1", "0123456789", 10, &err), UR_OK);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);

    assert_int_equal(ur_kvstore_file_open(&kv, root, 0, &err), UR_OK);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "b.c/0", &b, &err), UR_OK);
    assert_memory_equal(b.data, "xyz", 3);
    assert_int_equal(ur_kvstore_read_range(kv, "a/c/0/1", 4, 3, range, &err), UR_OK);
    assert_memory_equal(range, "456", 3);
    assert_int_equal(ur_kvstore_read_range(kv, "a/c/0/1", 8, 3, range, &err), UR_ECORRUPT);
    assert_int_equal(ur_kvstore_size(kv, "a/zarr.json", &size, &err), UR_OK);
    assert_int_equal(size, 2);
    assert_int_equal(ur_kvstore_size(kv, "a/missing", &size, &err), UR_ENOTFOUND);

    assert_int_equal(ur_kvstore_list(kv, "", collect, &l, &err), UR_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.keys[0], "a/c/0/1");
    assert_string_equal(l.keys[1], "a/zarr.json");
    assert_string_equal(l.keys[2], "b.c/0");
    l.n = 0;
    assert_int_equal(ur_kvstore_list(kv, "a/", collect, &l, &err), UR_OK);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.sizes[0], 10);

    /* one level: one directory read, an empty directory too */
    p = ur_path_join(root, "empty");
    assert_int_equal(ur_fs_mkdirs(p, &err), UR_OK);
    ur_free(p);
    assert_int_equal(ur_kvstore_list_dir(kv, "", collect_dir, &d, &err), UR_OK);
    assert_int_equal(d.n, 3);
    assert_string_equal(d.names[0], "a/");
    assert_string_equal(d.names[1], "b.c/");
    assert_string_equal(d.names[2], "empty/");
    memset(&d, 0, sizeof d);
    assert_int_equal(ur_kvstore_list_dir(kv, "a/", collect_dir, &d, &err), UR_OK);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.names[0], "c/");
    assert_string_equal(d.names[1], "zarr.json");
    memset(&d, 0, sizeof d);
    assert_int_equal(ur_kvstore_list_dir(kv, "empty/", collect_dir, &d, &err), UR_OK);
    assert_int_equal(d.n, 0);
    assert_int_equal(ur_kvstore_list_dir(kv, "a/zarr.json/", collect_dir, &d, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_list_dir(kv, "missing/", collect_dir, &d, &err), UR_ENOTFOUND);
    assert_int_equal(ur_kvstore_list_dir(kv, "../", collect_dir, &d, &err), UR_ECORRUPT);
    assert_int_equal(ur_kvstore_prefix_open(&view, kv, "a/", 0, &err), UR_OK);
    assert_int_equal(ur_kvstore_list_dir(view, "c/0/", collect_dir, &d, &err), UR_OK);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.names[0], "1");
    ur_kvstore_close(view);

    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    ur_free(root);
}

static void test_kvstore_file__keys_cannot_escape_the_root(void **state)
{
    static const char *bad[] = {"../x", "/etc/passwd", "a//b", "a/./b", "a/..", "", "a/"};
    ur_kvstore *kv = NULL;
    ur_buf b;
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_file_open(&kv, scratch, 0, &err), UR_OK);
    ur_buf_init(&b, 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ur_kvstore_read(kv, bad[i], &b, &err), UR_ECORRUPT);
    }
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
}

static void test_kvstore_file__missing_directory(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_file_open(&kv, "/nonexistent/unroll/dir", 0, &err), UR_ENOTFOUND);
    assert_string_equal(err.where, "/nonexistent/unroll/dir");
    assert_null(kv);
}

/* Whole-file views: a small file is read, a large one mapped; same bytes either way. */
static void test_kvstore_file__views(void **state)
{
    char *root = ur_path_join(scratch, "views");
    size_t big = 2 * 1048576 + 7;
    uint8_t *val = malloc(big);
    ur_kvstore *kv = NULL;
    ur_kvstore_view v;
    ur_err err;
    (void)state;
    assert_non_null(val);
    for (size_t j = 0; j < big; j++) {
        val[j] = (uint8_t)(j * 7 + 3);
    }
    assert_int_equal(ur_kvstore_file_open(&kv, root, 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "small", val, 10, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "a/big", val, big, &err), UR_OK);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
    assert_int_equal(ur_kvstore_file_open(&kv, root, 0, &err), UR_OK);
    ur_kvstore_prefetch(kv, "a/big", 1 << 20); /* hints: never fail */
    ur_kvstore_prefetch(kv, "a/none", 1 << 20);
    ur_kvstore_prefetch(kv, "../escape", 1 << 20);
    assert_int_equal(ur_kvstore_read_view(kv, "small", 0, &v, &err), UR_OK);
    assert_int_equal(v.len, 10);
    assert_null(v.map_.base_);
    assert_memory_equal(v.data, val, 10);
    ur_kvstore_view_release(&v);
    assert_int_equal(ur_kvstore_read_view(kv, "a/big", 0, &v, &err), UR_OK);
    assert_int_equal(v.len, big);
    assert_non_null(v.map_.base_);
    assert_memory_equal(v.data, val, big);
    ur_kvstore_view_release(&v);
    assert_int_equal(ur_kvstore_read_view(kv, "a/big", 1048576, &v, &err), UR_ECORRUPT);
    assert_non_null(strstr(err.where, "a/big"));
    ur_kvstore_view_release(&v);
    assert_int_equal(ur_kvstore_read_view(kv, "a/none", 0, &v, &err), UR_ENOTFOUND);
    ur_kvstore_view_release(&v);
    ur_kvstore_close(kv);
    free(val);
    ur_free(root);
}

static void link_in(const char *root, const char *target, const char *name)
{
    char *at = ur_path_join(root, name);
    assert_int_equal(symlink(target, at), 0);
    ur_free(at);
}

/* A link inside the store is followed; a link out of it, a FIFO and a directory are refused
 * by every read (UR_EIO, never "not found", which would read as a missing chunk); a listing
 * shows neither links nor special files and does not enter linked directories. */
static void test_kvstore_file__links_and_special_files(void **state)
{
    char *root = ur_path_join(scratch, "confined");
    char *outside = ur_path_join(scratch, "outside");
    char *p;
    static const char *const refused[] = {"out", "dir_out/x", "fifo", "sub"};
    dir_listing d = {0};
    ur_kvstore *kv = NULL;
    ur_kvstore_view v;
    listing l = {0};
    uint64_t size;
    uint8_t byte;
    ur_err err;
    ur_buf b;
    (void)state;
    assert_int_equal(ur_kvstore_file_open(&kv, root, 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "a", "A", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "sub/b", "B", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_commit(kv, &err), UR_OK);
    ur_kvstore_close(kv);
    assert_int_equal(ur_fs_mkdirs(outside, &err), UR_OK);
    p = ur_path_join(outside, "x");
    assert_int_equal(ur_fs_write_file(p, "X", 1, &err), UR_OK);
    ur_free(p);
    link_in(root, "a", "in");
    link_in(root, "../outside/x", "out");
    link_in(root, "../outside", "dir_out");
    p = ur_path_join(root, "fifo");
    assert_int_equal(mkfifo(p, 0644), 0);
    ur_free(p);

    assert_int_equal(ur_kvstore_file_open(&kv, root, 0, &err), UR_OK);
    ur_buf_init(&b, 0);
    if (ur_fs__beneath_has_openat2()) { /* else (valgrind 3.19) no link is followed */
        assert_int_equal(ur_kvstore_read(kv, "in", &b, &err), UR_OK);
        assert_memory_equal(b.data, "A", 1);
    } else {
        assert_int_equal(ur_kvstore_read(kv, "in", &b, &err), UR_EIO);
    }
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        ur_buf_reset(&b);
        assert_int_equal(ur_kvstore_read(kv, refused[i], &b, &err), UR_EIO);
        assert_non_null(strstr(err.where, refused[i]));
        assert_int_equal(ur_kvstore_size(kv, refused[i], &size, &err), UR_EIO);
        assert_int_equal(ur_kvstore_read_range(kv, refused[i], 0, 1, &byte, &err), UR_EIO);
        assert_int_equal(ur_kvstore_read_view(kv, refused[i], 0, &v, &err), UR_EIO);
        ur_kvstore_view_release(&v);
        ur_kvstore_prefetch(kv, refused[i], 1 << 20);
    }
    assert_int_equal(ur_kvstore_list(kv, "", collect, &l, &err), UR_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.keys[0], "a");
    assert_string_equal(l.keys[1], "sub/b");
    /* one level: a link counts as what it leads to inside the root, else it is left out,
     * as are special files; a linked directory out of the root is not listed */
    assert_int_equal(ur_kvstore_list_dir(kv, "", collect_dir, &d, &err), UR_OK);
    if (ur_fs__beneath_has_openat2()) {
        assert_int_equal(d.n, 3);
        assert_string_equal(d.names[1], "in");
        assert_string_equal(d.names[2], "sub/");
    } else {
        assert_int_equal(d.n, 2);
        assert_string_equal(d.names[1], "sub/");
    }
    assert_string_equal(d.names[0], "a");
    assert_int_equal(ur_kvstore_list_dir(kv, "dir_out/", collect_dir, &d, &err), UR_EIO);
    assert_non_null(strstr(err.where, "dir_out"));
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    ur_free(outside);
    ur_free(root);
}

static int count_name(void *ctx, const char *name)
{
    (void)name;
    (*(int *)ctx)++;
    return 0;
}

/* The conditional create: the first create wins and a second leaves the value alone; a
 * symbolic link at the name counts as present and its target is not written; a link on the way
 * is refused, so nothing is created outside the root. */
static void test_kvstore_file__create_if_absent(void **state)
{
    char *root = ur_path_join(scratch, "excl");
    char *outside = ur_path_join(scratch, "excl_out");
    char *p;
    ur_kvstore *kv = NULL;
    ur_err err;
    ur_buf b;
    int names = 0;
    (void)state;
    assert_int_equal(ur_kvstore_file_open(&kv, root, 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "run/finish.claim", "one", 3, &err), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "run/finish.claim", "two", 3, &err), UR_EEXIST);
    assert_non_null(strstr(err.where, "run/finish.claim"));
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "run/finish.claim", &b, &err), UR_OK);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "one", 3);
    /* written whole under a temporary name, then linked: none of those names is left */
    p = ur_path_join(root, "run");
    assert_int_equal(ur_fs_list_names(p, "run", count_name, &names, &err), 0);
    assert_int_equal(names, 1);
    ur_free(p);
    /* an empty value is a value */
    assert_int_equal(ur_kvstore_create(kv, "empty", "", 0, &err), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "empty", "x", 1, &err), UR_EEXIST);
    /* keys that leave the root are refused before anything is created */
    assert_true(ur_kvstore_create(kv, "../escape", "x", 1, &err) < 0);
    assert_true(ur_kvstore_create(kv, "/abs", "x", 1, &err) < 0);
    p = ur_path_join(scratch, "escape");
    assert_false(ur_fs_exists(p));
    ur_free(p);

    assert_int_equal(ur_fs_mkdirs(outside, &err), UR_OK);
    link_in(root, "../excl_out/target", "at_link");
    link_in(root, "../excl_out", "dir_link");
    assert_int_equal(ur_kvstore_create(kv, "at_link", "x", 1, &err), UR_EEXIST);
    p = ur_path_join(outside, "target");
    assert_false(ur_fs_exists(p));
    ur_free(p);
    assert_int_equal(ur_kvstore_create(kv, "dir_link/claim", "x", 1, &err), UR_EIO);
    p = ur_path_join(outside, "claim");
    assert_false(ur_fs_exists(p));
    ur_free(p);
    ur_kvstore_close(kv);

    /* a reader cannot create */
    assert_int_equal(ur_kvstore_file_open(&kv, root, 0, &err), UR_OK);
    assert_int_equal(ur_kvstore_create(kv, "other", "x", 1, &err), UR_EINTERNAL);
    ur_kvstore_close(kv);
    ur_buf_dispose(&b);
    ur_free(outside);
    ur_free(root);
}

/* Several processes creating one key at once: exactly one of them succeeds, every other one
 * is told the key exists, and the value is the winner's. */
static void test_kvstore_file__create_race(void **state)
{
    enum { N = 8 };
    char *root = ur_path_join(scratch, "race");
    pid_t pids[N];
    int won = 0, exists = 0;
    ur_kvstore *kv = NULL;
    ur_err err;
    ur_buf b;
    (void)state;
    assert_int_equal(ur_fs_mkdirs(root, &err), UR_OK);
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            char v[8];
            int rc;
            snprintf(v, sizeof v, "p%d", i);
            if (ur_kvstore_file_open(&kv, root, 1, &err) != UR_OK) {
                _exit(3);
            }
            rc = ur_kvstore_create(kv, "claim", v, strlen(v), &err);
            _exit(rc == UR_OK ? 0 : rc == UR_EEXIST ? 1 : 2);
        }
    }
    for (int i = 0; i < N; i++) {
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st));
        won += WEXITSTATUS(st) == 0;
        exists += WEXITSTATUS(st) == 1;
    }
    assert_int_equal(won, 1);
    assert_int_equal(exists, N - 1);
    assert_int_equal(ur_kvstore_file_open(&kv, root, 0, &err), UR_OK);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "claim", &b, &err), UR_OK);
    assert_true(b.len == 2 && b.data[0] == 'p');
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    ur_free(root);
}

/* Streamed writes into a directory: a NEW value is appended in place below created
 * directories and refuses an existing file (UR_EEXIST naming it); an ATOMIC one replaces the
 * file through "<key>.partial", which does not stay. */
static void test_kvstore_file__streamed_writer(void **state)
{
    char *root = ur_path_join(scratch, "streamed"), *partial = ur_path_join(root, "a/m.partial");
    ur_kvstore *kv = NULL;
    ur_kvstore_writer *w = NULL;
    static uint8_t big[(9 << 20) + 5]; /* more than one block of the background writer */
    ur_err err;
    ur_buf b;
    (void)state;
    for (size_t i = 0; i < sizeof big; i++) {
        big[i] = (uint8_t)(i * 131u >> 3);
    }
    assert_int_equal(ur_kvstore_file_open(&kv, root, 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "a/b/big", UR_KVSTORE_WRITER_NEW, &err),
                     UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, big, 4097, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, big + 4097, sizeof big - 4097, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_size(w), sizeof big);
    assert_int_equal(ur_kvstore_writer_finish(w, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "a/b/big", UR_KVSTORE_WRITER_NEW, &err),
                     UR_EEXIST);
    assert_non_null(strstr(err.where, "a/b/big"));
    assert_int_equal(ur_kvstore_write(kv, "a/m", "old", 3, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_open(&w, kv, "a/m", UR_KVSTORE_WRITER_ATOMIC, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_append(w, "new!", 4, &err), UR_OK);
    assert_int_equal(ur_kvstore_writer_finish(w, &err), UR_OK);
    assert_false(ur_fs_exists(partial));
    ur_kvstore_close(kv);
    assert_int_equal(ur_kvstore_file_open(&kv, root, 0, &err), UR_OK);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_kvstore_read(kv, "a/b/big", &b, &err), UR_OK);
    assert_int_equal(b.len, sizeof big);
    assert_memory_equal(b.data, big, sizeof big);
    ur_buf_reset(&b);
    assert_int_equal(ur_kvstore_read(kv, "a/m", &b, &err), UR_OK);
    assert_true(b.len == 4 && memcmp(b.data, "new!", 4) == 0);
    ur_buf_dispose(&b);
    ur_kvstore_close(kv);
    ur_free(partial);
    ur_free(root);
}

/* The version of each file (ur_kvstore_list_versions): the same while the file is left alone,
 * another once it is written again, even with the same size and bytes. */
typedef struct {
    char version[4][64];
    uint64_t size[4];
    int n;
} versions;

static int collect_version(void *ctx, const char *key, uint64_t size, const char *version)
{
    versions *v = ctx;
    (void)key;
    if (v->n < 4) {
        snprintf(v->version[v->n], sizeof v->version[0], "%s", version);
        v->size[v->n++] = size;
    }
    return 0;
}

static void test_kvstore_file__versions(void **state)
{
    (void)state;
    char root[300];
    ur_kvstore *kv;
    ur_err err;
    versions a = {0}, b = {0}, c = {0};
    struct timespec pause = {0, 20 * 1000 * 1000};
    snprintf(root, sizeof root, "%s/versions", scratch);
    assert_int_equal(ur_kvstore_file_open(&kv, root, 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "d/x", "0123", 4, &err), UR_OK);
    assert_int_equal(ur_kvstore_write(kv, "manifest.ocdbt", "m", 1, &err), UR_OK);
    assert_int_equal(ur_kvstore_list_versions(kv, "", collect_version, &a, &err), UR_OK);
    assert_int_equal(ur_kvstore_list_versions(kv, "", collect_version, &b, &err), UR_OK);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.size[0], 4);
    assert_non_null(strchr(a.version[0], ':')); /* "<s>.<ns>:<inode>" */
    assert_string_equal(a.version[0], b.version[0]);
    assert_string_equal(a.version[1], b.version[1]);
    nanosleep(&pause, NULL); /* a coarse file system clock ticks */
    assert_int_equal(ur_kvstore_write(kv, "d/x", "0123", 4, &err), UR_OK);
    assert_int_equal(ur_kvstore_list_versions(kv, "", collect_version, &c, &err), UR_OK);
    assert_int_equal(c.size[0], 4);
    assert_string_not_equal(a.version[0], c.version[0]);
    assert_string_equal(a.version[1], c.version[1]);
    ur_kvstore_close(kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvstore_file__write_read_list),
        cmocka_unit_test(test_kvstore_file__versions),
        cmocka_unit_test(test_kvstore_file__keys_cannot_escape_the_root),
        cmocka_unit_test(test_kvstore_file__missing_directory),
        cmocka_unit_test(test_kvstore_file__views),
        cmocka_unit_test(test_kvstore_file__links_and_special_files),
        cmocka_unit_test(test_kvstore_file__create_if_absent),
        cmocka_unit_test(test_kvstore_file__create_race),
        cmocka_unit_test(test_kvstore_file__streamed_writer),
    };
    return cmocka_run_group_tests_name("kvstore_file", tests, setup, teardown);
}
