/* ur_appendfile: the file holds exactly the appended bytes, in pieces of every size (smaller
 * than, equal to and spanning the 8 MiB blocks), on a file system with direct I/O (the
 * scratch directory under /tmp) on tmpfs (/dev/shm) and on ramfs, which refuses it; a write past a
 * file-size limit fails naming the file; an existing file is not overwritten. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/appendfile.h"
#include "unroll/fs.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static char scratch[256];

static int setup(void **state)
{
    (void)state;
    strcpy(scratch, "/tmp/ur_appendfile_test_XXXXXX");
    return mkdtemp(scratch) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return ur_fs_remove_tree(scratch, NULL) == UR_OK ? 0 : -1;
}

/* Deterministic bytes that differ at every offset of interest. */
static void pattern(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (uint8_t)(x >> 24);
    }
}

/* Append `total` bytes in pieces cycling through `sizes`, then compare the file. */
static void roundtrip(const char *dir, size_t total, const size_t *sizes, size_t n_sizes)
{
    char *path = ur_path_join(dir, "data");
    uint8_t *src = malloc(total);
    ur_appendfile *f = NULL;
    ur_buf back;
    ur_err err;
    size_t at = 0, k = 0;

    assert_non_null(src);
    pattern(src, total, (uint32_t)total);
    assert_int_equal(ur_appendfile_create(&f, path, &err), UR_OK);
    while (at < total) {
        size_t n = sizes[k++ % n_sizes];
        if (n > total - at) {
            n = total - at;
        }
        assert_int_equal(ur_appendfile_write(f, src + at, n, &err), UR_OK);
        at += n;
        assert_int_equal(ur_appendfile_size(f), at);
    }
    assert_int_equal(ur_appendfile_finish(f, &err), UR_OK);
    ur_buf_init(&back, 0);
    assert_int_equal(ur_fs_read_file(&back, path, total + 1, &err), UR_OK);
    assert_int_equal(back.len, total);
    assert_memory_equal(back.data, src, total);
    ur_buf_dispose(&back);
    unlink(path);
    ur_free(path);
    free(src);
}

static void check_sizes(const char *dir)
{
    static const size_t odd[] = {1, 4095, 4097, 3 * MIB + 17, 8 * MIB, 9 * MIB + 1, 0, 12345};
    static const size_t block[] = {8 * MIB};
    roundtrip(dir, 0, odd, 1);
    roundtrip(dir, 1, odd, 1);
    roundtrip(dir, 8 * MIB, block, 1);          /* exactly one block, no tail */
    roundtrip(dir, 16 * MIB + 5, block, 1);     /* two blocks and a tail */
    roundtrip(dir, 41 * MIB + 333, odd, sizeof odd / sizeof odd[0]);
}

static void test_ur_appendfile__bytes_on_a_disk_file_system(void **state)
{
    (void)state;
    check_sizes(scratch);
}

static void test_ur_appendfile__bytes_on_tmpfs(void **state)
{
    char dir[64];
    (void)state;
    strcpy(dir, "/dev/shm/ur_appendfile_XXXXXX");
    if (mkdtemp(dir) == NULL) {
        strcpy(dir, scratch); /* no /dev/shm: the disk case again */
        check_sizes(dir);
        return;
    }
    check_sizes(dir);
    assert_int_equal(ur_fs_remove_tree(dir, NULL), UR_OK);
}

/* ramfs has no direct I/O at all (open with O_DIRECT fails with EINVAL): the fallback
 * through the page cache. Mounting needs root; elsewhere the test is reported skipped. */
static void test_ur_appendfile__bytes_without_direct_io(void **state)
{
    char *dir = ur_path_join(scratch, "ramfs");
    (void)state;
    assert_int_equal(ur_fs_mkdirs(dir, NULL), UR_OK);
    if (mount("ramfs", dir, "ramfs", 0, NULL) != 0) {
        ur_free(dir);
        skip();
    }
    check_sizes(dir);
    assert_int_equal(umount(dir), 0);
    ur_free(dir);
}

static void test_ur_appendfile__existing_file_is_refused(void **state)
{
    char *path = ur_path_join(scratch, "there");
    ur_appendfile *f = NULL;
    ur_err err;
    ur_buf back;
    (void)state;
    assert_int_equal(ur_fs_write_file(path, "keep", 4, &err), UR_OK);
    assert_int_equal(ur_appendfile_create(&f, path, &err), UR_EIO);
    assert_null(f);
    assert_string_equal(err.where, path);
    ur_buf_init(&back, 0);
    assert_int_equal(ur_fs_read_file(&back, path, 16, &err), UR_OK);
    assert_memory_equal(back.data, "keep", 4);
    ur_buf_dispose(&back);
    ur_free(path);
}

/* A background write that fails (EFBIG past RLIMIT_FSIZE, as on a full disk) is reported
 * by a later write or by finish, with the file's path. */
static void test_ur_appendfile__write_error_names_the_file(void **state)
{
    char *path = ur_path_join(scratch, "limited");
    uint8_t *src = calloc(1, 24 * MIB);
    struct rlimit old, lim;
    ur_appendfile *f = NULL;
    ur_err err;
    int rc = UR_OK;
    (void)state;
    assert_non_null(src);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 10 * MIB;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    assert_int_equal(ur_appendfile_create(&f, path, &err), UR_OK);
    for (int i = 0; i < 3 && rc == UR_OK; i++) {
        rc = ur_appendfile_write(f, src + (size_t)i * 8 * MIB, 8 * MIB, &err);
    }
    if (rc == UR_OK) {
        rc = ur_appendfile_finish(f, &err);
    } else {
        ur_appendfile_abort(f);
    }
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(rc, UR_EIO);
    assert_string_equal(err.where, path);
    assert_non_null(strstr(err.msg, "write failed"));
    free(src);
    ur_free(path);
}

/* Allocation failures while creating are reported, and leak nothing (valgrind/ASan). */
static void test_ur_appendfile__out_of_memory(void **state)
{
    char *path = ur_path_join(scratch, "oom");
    ur_err err;
    (void)state;
    for (long n = 0;; n++) {
        ur_appendfile *f = NULL;
        int rc;
        ur_alloc_fail_after(n);
        rc = ur_appendfile_create(&f, path, &err);
        ur_alloc_fail_after(-1);
        if (rc == UR_OK) {
            assert_int_equal(ur_appendfile_write(f, "abc", 3, &err), UR_OK);
            assert_int_equal(ur_appendfile_finish(f, &err), UR_OK);
            break;
        }
        assert_int_equal(rc, UR_ENOMEM);
        assert_null(f);
    }
    unlink(path);
    ur_free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_appendfile__bytes_on_a_disk_file_system),
        cmocka_unit_test(test_ur_appendfile__bytes_on_tmpfs),
        cmocka_unit_test(test_ur_appendfile__bytes_without_direct_io),
        cmocka_unit_test(test_ur_appendfile__existing_file_is_refused),
        cmocka_unit_test(test_ur_appendfile__write_error_names_the_file),
        cmocka_unit_test(test_ur_appendfile__out_of_memory),
    };
    return cmocka_run_group_tests_name("ur_appendfile", tests, setup, teardown);
}
