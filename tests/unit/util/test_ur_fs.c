/* ur_fs: paths, whole-file reads, mkdirs and tree removal in a scratch directory. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/alloc.h"
#include "unroll/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Trailing slashes off, "/" and "" kept as they are, URLs alike. */
static void test_ur_fs__path_trimmed_len(void **state)
{
    (void)state;
    assert_int_equal(ur_path_trimmed_len("a/b//"), 3);
    assert_int_equal(ur_path_trimmed_len("a/b"), 3);
    assert_int_equal(ur_path_trimmed_len("///"), 1);
    assert_int_equal(ur_path_trimmed_len("/"), 1);
    assert_int_equal(ur_path_trimmed_len(""), 0);
    assert_int_equal(ur_path_trimmed_len("s3://b/p/"), 8);
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

/* A named scratch directory in $TMPDIR: made private, found again by a second call; a link or
 * a directory open to others at the name is not taken. */
static void test_ur_fs__named_temp_dir(void **state)
{
    char *dir = NULL, *again = NULL, *none = NULL, *link_to = ur_path_join(scratch, "elsewhere");
    char *open_dir = ur_path_join(scratch, "open");
    int created = -1;
    struct stat st;
    ur_err err;
    (void)state;
    assert_int_equal(setenv("TMPDIR", scratch, 1), 0);
    assert_int_equal(ur_fs_make_named_temp_dir(&dir, "named", &created, "scratch", NULL), UR_OK);
    assert_int_equal(created, 1);
    assert_int_equal(lstat(dir, &st), 0);
    assert_true(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    assert_int_equal(ur_fs_make_named_temp_dir(&again, "named", &created, "scratch", NULL), UR_OK);
    assert_int_equal(created, 0);
    assert_string_equal(dir, again);

    assert_int_equal(mkdir(link_to, 0700), 0);
    assert_int_equal(symlink(link_to, open_dir), 0);
    ur_err_clear(&err);
    assert_int_equal(ur_fs_make_named_temp_dir(&none, "open", &created, "scratch", &err), UR_EIO);
    assert_non_null(strstr(err.msg, "not a private directory"));
    assert_int_equal(unlink(open_dir), 0);
    assert_int_equal(mkdir(open_dir, 0755), 0);
    assert_int_equal(chmod(open_dir, 0755), 0);
    assert_int_equal(ur_fs_make_named_temp_dir(&none, "open", &created, "scratch", &err), UR_EIO);
    assert_null(none);
    unsetenv("TMPDIR");
    ur_free(dir);
    ur_free(again);
    ur_free(link_to);
    ur_free(open_dir);
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

/* The one check every relative path from a checkpoint goes through (kvstore keys, OCDBT
 * data-file paths): what it accepts and what it refuses, and why. */
static void test_ur_fs__relpath_validate_table(void **state)
{
    static const char *const good[] = {
        "a", "a/b", "ocdbt.process_0/d/3f2a", "...", ".a", "a..", "..a/b", "a b/c", "d/x.y.z",
    };
    static const struct {
        const char *p;
        size_t n;
        const char *why;
    } bad[] = {
        {"", 0, "empty"},     {"a/", 2, "ends in '/'"},
        {"/", 1, "absolute"}, {"/etc/passwd", 11, "absolute"},
        {"..", 2, "'..'"},    {".", 1, "'..'"},
        {"../x", 4, "'..'"},  {"a/../../b", 9, "'..'"},
        {"a/..", 4, "'..'"},  {"./a", 3, "'..'"},
        {"a/./b", 5, "'..'"}, {"a//b", 4, "empty component"},
        {"a\0b", 3, "NUL"},   {"a/b\0", 4, "NUL"},
    };
    ur_err err;
    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        assert_int_equal(ur_fs_relpath_validate(good[i], strlen(good[i]), &err), UR_OK);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ur_err_clear(&err);
        assert_int_equal(ur_fs_relpath_validate(bad[i].p, bad[i].n, &err), UR_ECORRUPT);
        if (strstr(err.msg, bad[i].why) == NULL) {
            fail_msg("'%s': message '%s' does not say '%s'", bad[i].p, err.msg, bad[i].why);
        }
    }
    assert_int_equal(ur_fs_relpath_validate("../x", 4, NULL), UR_ECORRUPT);
}

/* A file in scratch/<rel> with bytes `text` and mode `mode`. */
static char *put(const char *rel, const char *text, mode_t mode)
{
    char *path = ur_path_join(scratch, rel);
    assert_int_equal(ur_fs_write_file(path, text, strlen(text), NULL), UR_OK);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

static void link_at(const char *target, const char *rel)
{
    char *path = ur_path_join(scratch, rel);
    assert_int_equal(symlink(target, path), 0);
    ur_free(path);
}

/* Open `rel` beneath scratch/root; the code, and on success the first byte is `first`. */
static int open_rel(const char *rel, char first, ur_err *err)
{
    char *root = ur_path_join(scratch, "root");
    int dfd = -1, fd = -1;
    int rc = ur_fs_dir_open(&dfd, root, err);
    if (rc == UR_OK) {
        rc = ur_fs_open_beneath(&fd, dfd, root, rel, "test file", err);
        close(dfd);
    }
    if (rc == UR_OK) {
        char c = 0;
        assert_int_equal(pread(fd, &c, 1, 0), 1);
        assert_int_equal(c, first);
        close(fd);
    } else {
        assert_int_equal(fd, -1);
    }
    ur_free(root);
    return rc;
}

/* ur_fs_open_beneath with openat2 and with the walk used where the kernel lacks it: links
 * inside the root are followed (openat2) or refused (walk), links out of it are always
 * refused naming the file, and a FIFO or a directory is refused at once. */
static void test_ur_fs__open_beneath(void **state)
{
    char *root = ur_path_join(scratch, "root");
    char *sub = ur_path_join(scratch, "root/sub");
    char *outdir = ur_path_join(scratch, "outdir");
    char *fifo = ur_path_join(scratch, "root/fifo");
    char *secret, *in, *deep, *other, *abs_secret;
    char *want;
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_mkdirs(sub, NULL), UR_OK);
    assert_int_equal(ur_fs_mkdirs(outdir, NULL), UR_OK);
    secret = put("secret", "S", 0600);
    in = put("root/f", "F", 0644);
    deep = put("root/sub/g", "G", 0644);
    other = put("outdir/x", "X", 0644);
    abs_secret = ur_path_join(scratch, "secret");
    link_at("f", "root/in_link");
    link_at("../f", "root/sub/up_link");
    link_at("sub", "root/dir_link");
    link_at("../secret", "root/out_rel");
    link_at(abs_secret, "root/out_abs");
    link_at("../outdir", "root/out_dir");
    link_at("nothing", "root/dangling");
    link_at("root", "rootlink");
    assert_int_equal(mkfifo(fifo, 0644), 0);

    for (int fallback = 0; fallback < 2; fallback++) {
        /* valgrind 3.19 does not know openat2: the walk is taken either way there */
        int walks = fallback || !ur_fs__beneath_has_openat2();
        ur_fs__beneath_force_fallback(fallback);
        assert_int_equal(open_rel("f", 'F', &err), UR_OK);
        assert_int_equal(open_rel("sub/g", 'G', &err), UR_OK);
        /* inside links: followed by openat2, not by the walk */
        assert_int_equal(open_rel("in_link", 'F', &err), walks ? UR_EIO : UR_OK);
        assert_int_equal(open_rel("sub/up_link", 'F', &err), walks ? UR_EIO : UR_OK);
        assert_int_equal(open_rel("dir_link/g", 'G', &err), walks ? UR_EIO : UR_OK);
        /* links out of the root */
        static const char *const out[] = {"out_rel", "out_abs", "out_dir/x"};
        for (size_t i = 0; i < 3; i++) {
            ur_err_clear(&err);
            assert_int_equal(open_rel(out[i], 0, &err), UR_EIO);
            want = ur_path_join(root, out[i]);
            assert_string_equal(err.where, want);
            ur_free(want);
            assert_non_null(strstr(err.msg, "symbolic link"));
        }
        /* a FIFO: refused without waiting for a writer; a directory; nothing */
        assert_int_equal(open_rel("fifo", 0, &err), UR_EIO);
        assert_non_null(strstr(err.msg, "not a regular file (a FIFO)"));
        assert_int_equal(open_rel("sub", 0, &err), UR_EIO);
        assert_non_null(strstr(err.msg, "a directory"));
        assert_int_equal(open_rel("missing", 0, &err), UR_ENOTFOUND);
        assert_non_null(strstr(err.msg, "cannot open test file"));
        assert_int_not_equal(open_rel("dangling", 0, &err), UR_OK);
        assert_int_equal(open_rel("../secret", 0, &err), UR_ECORRUPT);
        assert_int_equal(open_rel("/etc/passwd", 0, &err), UR_ECORRUPT);
    }
    ur_fs__beneath_force_fallback(0);

    /* The root itself may be a link. */
    {
        char *rl = ur_path_join(scratch, "rootlink");
        ur_buf b;
        ur_buf_init(&b, 0);
        assert_int_equal(ur_fs_read_file_beneath(&b, rl, "sub/g", 10, &err), UR_OK);
        assert_memory_equal(b.data, "G", 1);
        ur_buf_reset(&b);
        assert_int_equal(ur_fs_read_file_beneath(&b, rl, "out_rel", 10, &err), UR_EIO);
        assert_int_equal(b.len, 0);
        ur_buf_dispose(&b);
        ur_free(rl);
    }
    ur_free(secret);
    ur_free(in);
    ur_free(deep);
    ur_free(other);
    ur_free(abs_secret);
    ur_free(fifo);
    ur_free(outdir);
    ur_free(sub);
    ur_free(root);
}

/* ur_fs_read_file (the config's reader) refuses a FIFO, a directory and a device at once. */
static void test_ur_fs__read_file_refuses_special_files(void **state)
{
    char *fifo = ur_path_join(scratch, "cfg.fifo");
    ur_buf b;
    ur_err err;
    (void)state;
    assert_int_equal(mkfifo(fifo, 0644), 0);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, fifo, 100, &err), UR_EIO);
    assert_string_equal(err.where, fifo);
    assert_non_null(strstr(err.msg, "a FIFO"));
    assert_int_equal(ur_fs_read_file(&b, scratch, 100, &err), UR_EIO);
    assert_non_null(strstr(err.msg, "a directory"));
    assert_int_equal(ur_fs_read_file(&b, "/dev/zero", 100, &err), UR_EIO);
    assert_non_null(strstr(err.msg, "a character device"));
    assert_int_equal(b.len, 0);
    ur_buf_dispose(&b);
    ur_free(fifo);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return st.st_mode & 07777;
}

/* A copy never has more permissions than its source (nor than the umask allows), also over
 * an existing, wider file; a source linked out of its directory is not copied. */
static void test_ur_fs__copy_keeps_permissions(void **state)
{
    char *dir = ur_path_join(scratch, "cp");
    char *to = ur_path_join(scratch, "cp/out.json");
    char *priv, *pub, *secret;
    mode_t old = umask(022);
    ur_err err;
    ur_buf b;
    (void)state;
    assert_int_equal(ur_fs_mkdirs(dir, NULL), UR_OK);
    priv = put("cp/private.json", "{\"r\": 8}", 0600);
    pub = put("cp/public.json", "{}", 0664);
    secret = put("cp-secret", "top secret", 0600);
    link_at("../cp-secret", "cp/linked.json");

    assert_int_equal(ur_fs_copy_file_beneath(dir, "private.json", to, 100, &err), UR_OK);
    assert_int_equal(mode_of(to), 0600);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, to, 100, &err), UR_OK);
    assert_memory_equal(b.data, "{\"r\": 8}", 8);
    ur_buf_dispose(&b);
    assert_int_equal(unlink(to), 0);
    assert_int_equal(ur_fs_copy_file_beneath(dir, "public.json", to, 100, &err), UR_OK);
    assert_int_equal(mode_of(to), 0644);
    /* over an existing 0666 file: narrowed to the source's 0600 */
    assert_int_equal(chmod(to, 0666), 0);
    assert_int_equal(ur_fs_copy_file_beneath(dir, "private.json", to, 100, &err), UR_OK);
    assert_int_equal(mode_of(to), 0600);
    assert_int_equal(unlink(to), 0);
    assert_int_equal(ur_fs_copy_file_beneath(dir, "linked.json", to, 100, &err), UR_EIO);
    assert_false(ur_fs_exists(to));
    umask(old);
    ur_free(priv);
    ur_free(pub);
    ur_free(secret);
    ur_free(to);
    ur_free(dir);
}

/* ur_fs_list_names callback: counts the names, stops (returning 7) at "stop". */
static int count_name(void *ctx, const char *name)
{
    int *n = ctx;
    assert_true(strcmp(name, ".") != 0 && strcmp(name, "..") != 0);
    (*n)++;
    return strcmp(name, "stop") == 0 ? 7 : 0;
}

/* Every name but "." and "..", a stop returned as is, a missing directory UR_ENOTFOUND with
 * its path and what it is; a rename into place moves the directory whole. */
static void test_ur_fs__list_names_and_rename_into_place(void **state)
{
    char *dir = ur_path_join(scratch, "l"), *a = ur_path_join(scratch, "l/a");
    char *b = ur_path_join(scratch, "l/b"), *moved = ur_path_join(scratch, "moved");
    char *stop = ur_path_join(scratch, "l/a/stop");
    int n = 0;
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_mkdirs(a, NULL), UR_OK);
    assert_int_equal(ur_fs_write_file(b, "x", 1, NULL), UR_OK);
    assert_int_equal(ur_fs_list_names(dir, "the test directory", count_name, &n, &err), UR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ur_fs_write_file(stop, "", 0, NULL), UR_OK);
    n = 0;
    assert_int_equal(ur_fs_list_names(a, "the test directory", count_name, &n, &err), 7);
    assert_int_equal(n, 1);
    assert_int_equal(ur_fs_rename_into_place(dir, moved, &err), UR_OK);
    assert_false(ur_fs_exists(dir));
    assert_int_equal(ur_fs_list_names(dir, "the test directory", count_name, &n, &err),
                     UR_ENOTFOUND);
    assert_non_null(strstr(err.where, "/l"));
    assert_non_null(strstr(err.msg, "cannot open the test directory"));
    assert_int_equal(ur_fs_rename_into_place(dir, moved, &err), UR_EIO);
    assert_non_null(strstr(err.msg, "into place"));
    n = 0;
    assert_int_equal(ur_fs_list_names(moved, "the test directory", count_name, &n, &err), UR_OK);
    assert_int_equal(n, 2);
    ur_free(stop);
    ur_free(moved);
    ur_free(b);
    ur_free(a);
    ur_free(dir);
}

/* A lock says who holds it: a second taker gets the holder's line (control characters as
 * spaces), or "holder not yet recorded" when nothing is written yet; a release unlinks the
 * lock file only while its name still refers to the file that was locked. */
static void test_ur_fs__lock_take_holder_and_release(void **state)
{
    char *lock = ur_path_join(scratch, "k.lock"), *gone = ur_path_join(scratch, "nodir/k.lock");
    char held_by[64], small[8];
    ur_buf b;
    ur_err err;
    int fd = -1, fd2 = -1;
    (void)state;
    assert_int_equal(ur_fs_lock_take(lock, "pid 1 on\thost\n", &fd, held_by, sizeof held_by, &err),
                     UR_OK);
    assert_true(fd >= 0);
    assert_string_equal(held_by, "");
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, lock, 100, &err), UR_OK);
    assert_int_equal(b.len, strlen("pid 1 on\thost\n"));
    assert_memory_equal(b.data, "pid 1 on\thost\n", b.len);
    ur_buf_dispose(&b);
    /* flock is per open file: the same process opening the file again is another taker */
    assert_int_equal(ur_fs_lock_take(lock, "pid 2\n", &fd2, held_by, sizeof held_by, &err), UR_OK);
    assert_int_equal(fd2, -1);
    assert_string_equal(held_by, "pid 1 on host");
    assert_int_equal(ur_fs_lock_take(lock, "pid 2\n", &fd2, small, sizeof small, &err), UR_OK);
    assert_string_equal(small, "pid 1 o");
    assert_int_equal(ur_fs_lock_try(lock, &fd2, &err), UR_OK);
    assert_int_equal(fd2, -1);
    ur_fs_lock_release(lock, fd);
    assert_false(ur_fs_exists(lock));

    /* taken but not yet written */
    assert_int_equal(ur_fs_lock_try(lock, &fd, &err), UR_OK);
    assert_true(fd >= 0);
    assert_int_equal(ur_fs_lock_take(lock, "pid 2\n", &fd2, held_by, sizeof held_by, &err), UR_OK);
    assert_int_equal(fd2, -1);
    assert_string_equal(held_by, "holder not yet recorded");
    /* the name now refers to another file: the release leaves that one alone */
    assert_int_equal(unlink(lock), 0);
    assert_int_equal(ur_fs_write_file(lock, "other\n", 6, &err), UR_OK);
    ur_fs_lock_release(lock, fd);
    assert_true(ur_fs_exists(lock));
    ur_fs_lock_release(lock, -1);
    assert_true(ur_fs_exists(lock));
    /* that file is not locked by anyone: it is taken, and its text replaced */
    assert_int_equal(ur_fs_lock_take(lock, "pid 3\n", &fd, held_by, sizeof held_by, &err), UR_OK);
    assert_true(fd >= 0);
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, lock, 100, &err), UR_OK);
    assert_int_equal(b.len, 6);
    assert_memory_equal(b.data, "pid 3\n", 6);
    ur_buf_dispose(&b);
    ur_fs_lock_release(lock, fd);
    assert_false(ur_fs_exists(lock));

    assert_int_equal(ur_fs_lock_take(gone, "x\n", &fd, held_by, sizeof held_by, &err),
                     UR_ENOTFOUND);
    assert_int_equal(fd, -1);
    assert_string_equal(err.where, gone);
    assert_non_null(strstr(err.msg, "cannot open the lock file"));
    ur_free(gone);
    ur_free(lock);
}

/* A held directory: its identity is the one ur_fs_identity sees, a second one at the name is
 * refused with EEXIST, and one whose parent is missing is UR_EIO naming it. */
static void test_ur_fs__mkdir_held(void **state)
{
    char *dir = ur_path_join(scratch, "held"), *orphan = ur_path_join(scratch, "no/held");
    unsigned long long dev = 0, ino = 0, dev2 = 0, ino2 = 0;
    int fd = -1, fd2 = -1;
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_mkdir_held(dir, "the test directory", &fd, &dev, &ino, &err), UR_OK);
    assert_true(fd >= 0);
    assert_true(ur_fs_is_dir(dir));
    assert_int_equal(ur_fs_identity(dir, &dev2, &ino2, &err), UR_OK);
    assert_true(dev == dev2 && ino == ino2);
    assert_int_equal(ur_fs_mkdir_held(dir, "the test directory", &fd2, &dev2, &ino2, &err),
                     UR_EIO);
    assert_int_equal(fd2, -1);
    assert_int_equal(err.os_errno, EEXIST);
    assert_string_equal(err.where, dir);
    assert_non_null(strstr(err.msg, "cannot create the test directory"));
    /* removed and made again while the first is held: a new inode */
    assert_int_equal(ur_fs_remove_empty_dir(dir, &err), UR_OK);
    assert_int_equal(ur_fs_mkdir_held(dir, "the test directory", &fd2, &dev2, &ino2, &err), UR_OK);
    assert_false(dev == dev2 && ino == ino2);
    ur_fs_close(fd2);
    ur_fs_close(fd);
    ur_fs_close(-1);
    assert_int_equal(ur_fs_mkdir_held(orphan, "the test directory", &fd, &dev, &ino, &err),
                     UR_EIO);
    assert_int_equal(err.os_errno, ENOENT);
    assert_string_equal(err.where, orphan);
    ur_free(orphan);
    ur_free(dir);
}

/* Only an empty directory goes; an absent one is no error; one with a file stays. */
static void test_ur_fs__remove_empty_dir(void **state)
{
    char *dir = ur_path_join(scratch, "e"), *file = ur_path_join(scratch, "e/f");
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_mkdirs(dir, &err), UR_OK);
    assert_int_equal(ur_fs_write_file(file, "x", 1, &err), UR_OK);
    assert_int_equal(ur_fs_remove_empty_dir(dir, &err), UR_EIO);
    assert_int_equal(err.os_errno, ENOTEMPTY);
    assert_string_equal(err.where, dir);
    assert_true(ur_fs_exists(file));
    assert_int_equal(unlink(file), 0);
    assert_int_equal(ur_fs_remove_empty_dir(dir, &err), UR_OK);
    assert_false(ur_fs_exists(dir));
    assert_int_equal(ur_fs_remove_empty_dir(dir, &err), UR_OK);
    ur_free(file);
    ur_free(dir);
}

/* What a name is, a link not followed; a path below a file is an error with its errno. */
static void test_ur_fs__kind_of(void **state)
{
    char *file = ur_path_join(scratch, "kf"), *dir = ur_path_join(scratch, "kd");
    char *link = ur_path_join(scratch, "kl"), *below = ur_path_join(scratch, "kf/x");
    char *none = ur_path_join(scratch, "kn");
    ur_fs_kind k = UR_FS_OTHER;
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_write_file(file, "x", 1, &err), UR_OK);
    assert_int_equal(ur_fs_mkdirs(dir, &err), UR_OK);
    assert_int_equal(symlink(dir, link), 0);
    assert_int_equal(ur_fs_kind_of(&k, file, &err), UR_OK);
    assert_int_equal(k, UR_FS_FILE);
    assert_int_equal(ur_fs_kind_of(&k, dir, &err), UR_OK);
    assert_int_equal(k, UR_FS_DIR);
    assert_int_equal(ur_fs_kind_of(&k, link, &err), UR_OK);
    assert_int_equal(k, UR_FS_OTHER);
    assert_int_equal(ur_fs_kind_of(&k, none, &err), UR_OK);
    assert_int_equal(k, UR_FS_MISSING);
    k = UR_FS_FILE;
    assert_int_equal(ur_fs_kind_of(&k, below, &err), UR_EIO);
    assert_int_equal(k, UR_FS_MISSING);
    assert_int_equal(err.os_errno, ENOTDIR);
    assert_string_equal(err.where, below);
    ur_free(none);
    ur_free(below);
    ur_free(link);
    ur_free(dir);
    ur_free(file);
}

/* Both ends of a file, the tail cut to its size; too short, a link, a FIFO, a directory or
 * nothing at all is an error naming the path. */
static void test_ur_fs__read_ends(void **state)
{
    char *file = ur_path_join(scratch, "j"), *link = ur_path_join(scratch, "jl");
    char *fifo = ur_path_join(scratch, "jf"), *none = ur_path_join(scratch, "jn");
    char head[3], tail[8];
    size_t tn = sizeof tail;
    uint64_t size = 0;
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_write_file(file, "{\"a\": 12345}\n", 13, &err), UR_OK);
    assert_int_equal(ur_fs_read_ends(file, head, 3, tail, &tn, &size, &err), UR_OK);
    assert_int_equal(size, 13);
    assert_memory_equal(head, "{\"a", 3);
    assert_int_equal(tn, 8);
    assert_memory_equal(tail, " 12345}\n", 8);
    assert_int_equal(ur_fs_write_file(file, "{}", 2, &err), UR_OK);
    tn = sizeof tail;
    assert_int_equal(ur_fs_read_ends(file, head, 1, tail, &tn, &size, &err), UR_OK);
    assert_int_equal(size, 2);
    assert_int_equal(tn, 2);
    assert_memory_equal(tail, "{}", 2);
    tn = sizeof tail;
    assert_int_equal(ur_fs_read_ends(file, head, 3, tail, &tn, &size, &err), UR_ECORRUPT);
    assert_string_equal(err.where, file);
    assert_int_equal(symlink(file, link), 0);
    assert_int_equal(ur_fs_read_ends(link, head, 1, tail, &tn, &size, &err), UR_EIO);
    assert_int_equal(err.os_errno, ELOOP);
    assert_string_equal(err.where, link);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(ur_fs_read_ends(fifo, head, 1, tail, &tn, &size, &err), UR_EIO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(ur_fs_read_ends(scratch, head, 1, tail, &tn, &size, &err), UR_EIO);
    assert_int_equal(ur_fs_read_ends(none, head, 1, tail, &tn, &size, &err), UR_ENOTFOUND);
    assert_string_equal(err.where, none);
    ur_free(none);
    ur_free(fifo);
    ur_free(link);
    ur_free(file);
}

static void assert_content(const char *path, const char *want)
{
    ur_buf b;
    ur_err err;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_fs_read_file(&b, path, 100, &err), UR_OK);
    assert_int_equal(b.len, strlen(want));
    assert_memory_equal(b.data, want, b.len);
    ur_buf_dispose(&b);
}

/* A new output swapped in for an earlier one and back again; moved in where there was none
 * and back out; a missing new output is UR_EIO naming the destination, nothing moved. */
static void test_ur_fs__swap_in_and_back(void **state)
{
    char *from = ur_path_join(scratch, "new"), *to = ur_path_join(scratch, "to");
    char *aside = ur_path_join(scratch, "new.old");
    ur_fs_moved how = UR_FS_MOVED_IN;
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_write_file(from, "new", 3, &err), UR_OK);
    assert_int_equal(ur_fs_write_file(to, "old", 3, &err), UR_OK);
    assert_int_equal(ur_fs_swap_in(from, to, aside, &how, &err), UR_OK);
    assert_content(to, "new");
    if (how == UR_FS_MOVED_EXCHANGED) {
        assert_content(from, "old");
        assert_false(ur_fs_exists(aside));
    } else { /* a file system without RENAME_EXCHANGE */
        assert_int_equal(how, UR_FS_MOVED_ASIDE);
        assert_content(aside, "old");
        assert_false(ur_fs_exists(from));
    }
    ur_fs_swap_back(from, to, aside, &how);
    assert_int_equal(how, UR_FS_MOVED_NOT);
    assert_content(to, "old");
    assert_content(from, "new");
    assert_false(ur_fs_exists(aside));

    assert_int_equal(unlink(to), 0);
    assert_int_equal(ur_fs_swap_in(from, to, aside, &how, &err), UR_OK);
    assert_int_equal(how, UR_FS_MOVED_IN);
    assert_content(to, "new");
    assert_false(ur_fs_exists(from));
    ur_fs_swap_back(from, to, aside, &how);
    assert_int_equal(how, UR_FS_MOVED_NOT);
    assert_content(from, "new");
    assert_false(ur_fs_exists(to));
    ur_fs_swap_back(from, to, aside, &how); /* nothing to undo */
    assert_content(from, "new");

    assert_int_equal(unlink(from), 0);
    how = UR_FS_MOVED_IN;
    assert_int_equal(ur_fs_swap_in(from, to, aside, &how, &err), UR_EIO);
    assert_int_equal(how, UR_FS_MOVED_NOT);
    assert_int_equal(err.os_errno, ENOENT);
    assert_string_equal(err.where, to);
    assert_non_null(strstr(err.msg, "cannot move the new output in"));
    assert_false(ur_fs_exists(to));
    ur_free(aside);
    ur_free(to);
    ur_free(from);
}

/* Canonical paths: links on the way followed, "." and ".." and doubled or trailing slashes
 * gone, the missing part kept lexically, the last component not resolved on request, a
 * relative path taken from the working directory. */
static void test_ur_fs__canonical(void **state)
{
    char *real = NULL, *dir = ur_path_join(scratch, "c/real"),
         *link = ur_path_join(scratch, "c/ln");
    char *in = NULL, *want = NULL, *out = NULL, cwd[4096];
    ur_err err;
    (void)state;
    assert_int_equal(ur_fs_mkdirs(dir, &err), UR_OK);
    assert_int_equal(symlink(dir, link), 0);
    /* scratch itself may sit below a link (/tmp): compare with its canonical form */
    assert_int_equal(ur_fs_canonical(&real, scratch, 1, &err), UR_OK);
    assert_int_equal(real[0], '/');

    in = ur_path_joinf(scratch, "c/./ln//missing/../m2/");
    want = ur_path_joinf(real, "c/real/m2");
    assert_int_equal(ur_fs_canonical(&out, in, 1, &err), UR_OK);
    assert_string_equal(out, want);
    ur_free(out);
    ur_free(want);
    ur_free(in);

    want = ur_path_joinf(real, "c/real");
    assert_int_equal(ur_fs_canonical(&out, link, 1, &err), UR_OK);
    assert_string_equal(out, want);
    ur_free(out);
    ur_free(want);
    want = ur_path_joinf(real, "c/ln");
    assert_int_equal(ur_fs_canonical(&out, link, 0, &err), UR_OK);
    assert_string_equal(out, want);
    ur_free(out);
    ur_free(want);

    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(dir), 0);
    want = ur_path_joinf(real, "c/x");
    assert_int_equal(ur_fs_canonical(&out, "../x", 1, &err), UR_OK);
    assert_int_equal(chdir(cwd), 0);
    assert_string_equal(out, want);
    ur_free(out);
    ur_free(want);
    assert_int_equal(ur_fs_canonical(&out, "/..", 1, &err), UR_OK);
    assert_string_equal(out, "/");
    ur_free(out);
    ur_free(real);
    ur_free(link);
    ur_free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_fs__path_join),
        cmocka_unit_test(test_ur_fs__path_trimmed_len),
        cmocka_unit_test(test_ur_fs__write_read_and_limits),
        cmocka_unit_test(test_ur_fs__missing_file_is_not_found_with_path),
        cmocka_unit_test(test_ur_fs__remove_tree),
        cmocka_unit_test(test_ur_fs__named_temp_dir),
        cmocka_unit_test(test_ur_fs__map_range),
        cmocka_unit_test(test_ur_fs__relpath_validate_table),
        cmocka_unit_test(test_ur_fs__open_beneath),
        cmocka_unit_test(test_ur_fs__read_file_refuses_special_files),
        cmocka_unit_test(test_ur_fs__copy_keeps_permissions),
        cmocka_unit_test(test_ur_fs__list_names_and_rename_into_place),
        cmocka_unit_test(test_ur_fs__lock_take_holder_and_release),
        cmocka_unit_test(test_ur_fs__mkdir_held),
        cmocka_unit_test(test_ur_fs__remove_empty_dir),
        cmocka_unit_test(test_ur_fs__kind_of),
        cmocka_unit_test(test_ur_fs__read_ends),
        cmocka_unit_test(test_ur_fs__swap_in_and_back),
        cmocka_unit_test(test_ur_fs__canonical),
    };
    return cmocka_run_group_tests_name("ur_fs", tests, setup, teardown);
}
