/* ur_fs: paths, whole-file reads, mkdirs and tree removal in a scratch directory. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

static char scratch[256];

static int setup(void **state)
{
    (void)state;
    strcpy(scratch, "/tmp/ur_fs_test_XXXXXX");
    return mkdtemp(scratch) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return ur_fs_remove_tree(scratch, NULL) == UR_OK ? 0 : -1;
}

static void test_ur_fs__path_join(void **state)
{
    char *p;
    (void)state;
    p = ur_path_join("a/", "/b");
    assert_string_equal(p, "a/b");
    ur_free(p);
    p = ur_path_join("a", "");
    assert_string_equal(p, "a");
    ur_free(p);
    p = ur_path_joinf("/root", "ocdbt.process_%d/d", 3);
    assert_string_equal(p, "/root/ocdbt.process_3/d");
    ur_free(p);
}

static void test_ur_fs__write_read_and_limits(void **state)
{
    char *dir = ur_path_join(scratch, "x/y/z");
    char *file = ur_path_join(dir, "f");
    ur_buf b;
    ur_err err;
    uint64_t size = 0;
    (void)state;
    assert_int_equal(ur_fs_mkdirs(dir, &err), UR_OK);
    assert_int_equal(ur_fs_mkdirs(dir, &err), UR_OK);
    assert_int_equal(ur_fs_write_file(file, "hello", 5, &err), UR_OK);
    assert_int_equal(ur_fs_file_size(file, &size, &err), UR_OK);
    assert_int_equal(size, 5);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, file, 5, &err), UR_OK);
    assert_memory_equal(b.data, "hello", 5);
    ur_buf_reset(&b);
    assert_int_equal(ur_fs_read_file(&b, file, 4, &err), UR_ECORRUPT);
    assert_string_equal(err.where, file);
    ur_buf_dispose(&b);
    ur_free(file);
    ur_free(dir);
}

static void test_ur_fs__missing_file_is_not_found_with_path(void **state)
{
    char *file = ur_path_join(scratch, "nope");
    ur_buf b;
    ur_err err;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, file, 100, &err), UR_ENOTFOUND);
    assert_string_equal(err.where, file);
    assert_false(ur_fs_exists(file));
    ur_buf_dispose(&b);
    ur_free(file);
}

static void test_ur_fs__remove_tree(void **state)
{
    char *dir = ur_path_join(scratch, "t/u");
    char *file = ur_path_join(dir, "f");
    char *top = ur_path_join(scratch, "t");
    (void)state;
    assert_int_equal(ur_fs_mkdirs(dir, NULL), UR_OK);
    assert_int_equal(ur_fs_write_file(file, "x", 1, NULL), UR_OK);
    assert_int_equal(ur_fs_remove_tree(top, NULL), UR_OK);
    assert_false(ur_fs_exists(top));
    assert_int_equal(ur_fs_remove_tree(top, NULL), UR_OK);
    ur_free(top);
    ur_free(file);
    ur_free(dir);
}

/* Mappings at page-aligned and unaligned offsets hold the file's bytes; a range past the
 * end is "truncated", naming the file. */
static void test_ur_fs__map_range(void **state)
{
    char *file = ur_path_join(scratch, "mapped");
    size_t n = 3 * 4096 + 100;
    uint8_t buf[3 * 4096 + 100];
    static const uint64_t offs[] = {0, 1, 4095, 4096, 5000};
    ur_fs_map m;
    ur_err err;
    int fd;
    (void)state;
    for (size_t i = 0; i < n; i++) {
        buf[i] = (uint8_t)(i * 13 + 5);
    }
    assert_int_equal(ur_fs_write_file(file, buf, n, &err), UR_OK);
    fd = open(file, O_RDONLY);
    assert_true(fd >= 0);
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        size_t len = n - offs[i];
        assert_int_equal(ur_fs_map_range(fd, offs[i], len, file, &m, &err), UR_OK);
        assert_int_equal(m.len, len);
        assert_memory_equal(m.data, buf + offs[i], len);
        assert_string_equal(ur_fs_mapped_path(), file);
        ur_fs_unmap(&m);
        ur_fs_unmap(&m);
    }
    assert_int_equal(ur_fs_map_range(fd, 10, 0, file, &m, &err), UR_OK);
    assert_int_equal(m.len, 0);
    ur_fs_unmap(&m);
    assert_int_equal(ur_fs_map_range(fd, 100, n, file, &m, &err), UR_ECORRUPT);
    assert_string_equal(err.where, file);
    assert_non_null(strstr(err.msg, "truncated: 100 bytes missing"));
    assert_int_equal(ur_fs_map_range(fd, n + 5, 1, file, &m, &err), UR_ECORRUPT);
    close(fd);
    ur_free(file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_fs__path_join),
        cmocka_unit_test(test_ur_fs__write_read_and_limits),
        cmocka_unit_test(test_ur_fs__missing_file_is_not_found_with_path),
        cmocka_unit_test(test_ur_fs__remove_tree),
        cmocka_unit_test(test_ur_fs__map_range),
    };
    return cmocka_run_group_tests_name("ur_fs", tests, setup, teardown);
}
