/* File-system helpers shared by the layers that touch disk. Every failure names the path
 * and carries errno (UR_EIO, or UR_ENOTFOUND for a missing file). Paths are '/'-separated. */
#ifndef UNROLL_FS_H
#define UNROLL_FS_H

#include "unroll/buf.h"
#include "unroll/err.h"

#include <stddef.h>
#include <stdint.h>

/* "a" + "b" -> "a/b" (no doubled '/'); a new string the caller frees with ur_free. */
char *ur_path_join(const char *a, const char *b);
/* Length of `path` without its trailing slashes, keeping "/" itself (a location or URL
 * too: "s3://b/p/" -> "s3://b/p"). */
size_t ur_path_trimmed_len(const char *path);
/* Like ur_path_join with printf formatting of the second part. */
char *ur_path_joinf(const char *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Read a whole file, failing with UR_ECORRUPT when it is larger than max_bytes. Only a
 * regular file is read: a directory, FIFO, device or socket is UR_EIO ("not a regular
 * file"), found without blocking (the file is opened O_NONBLOCK before it is checked). */
int ur_fs_read_file(ur_buf *out, const char *path, size_t max_bytes, ur_err *err);

/* ---- Reading beneath a root directory ------------------------------------------------------
 * Every file of a checkpoint is opened beneath the checkpoint's directory (its root), by a
 * path relative to it that comes from the checkpoint itself (kvstore keys, OCDBT data-file
 * paths) or from the code (_METADATA):
 *  - the relative path must pass ur_fs_relpath_validate (no "..", no absolute path...);
 *  - it is resolved with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS): a relative
 *    symbolic link that stays inside the root is followed, one that leads out of it (or any
 *    absolute one) is refused. On a kernel without openat2 (before Linux 5.6) every
 *    component is opened O_NOFOLLOW instead, so any symbolic link below the root is refused;
 *  - only a regular file is accepted, checked with fstat on a descriptor opened O_NONBLOCK,
 *    so a FIFO or a device never blocks the caller.
 * The root itself (and the path to it) may go through symbolic links. */

/* A relative path of n bytes is safe to resolve beneath a root: not empty, no NUL byte, not
 * absolute, no empty, "." or ".." component, no trailing '/'. UR_OK, else UR_ECORRUPT with
 * the path and the reason. */
int ur_fs_relpath_validate(const char *p, size_t n, ur_err *err);

/* Open a directory to serve as a root (following symbolic links in `path`). */
int ur_fs_dir_open(int *fd_out, const char *path, ur_err *err);

/* Open the regular file `rel` beneath the open directory `dirfd` (whose path is `dir`, for
 * messages) for reading, as described above. `what` names the file's role in a failure
 * ("cannot open <what>"; NULL: "file"). UR_ENOTFOUND when absent; a path refused by
 * ur_fs_relpath_validate is UR_ECORRUPT; a symbolic link out of the root, a file that is not
 * regular and any other failure are UR_EIO. The failure names dir/rel. */
int ur_fs_open_beneath(int *fd_out, int dirfd, const char *dir, const char *rel, const char *what,
                       ur_err *err);

/* As ur_fs_open_beneath for a directory: UR_ENOTFOUND when absent or not a directory (a
 * listing of a name that is a file finds nothing there). */
int ur_fs_open_dir_beneath(int *fd_out, int dirfd, const char *dir, const char *rel, ur_err *err);

/* Read the whole regular file open on `fd` (from ur_fs_open_beneath) as ur_fs_read_file
 * does; `path` names it in a failure. */
int ur_fs_read_fd(ur_buf *out, int fd, const char *path, size_t max_bytes, ur_err *err);

/* ur_fs_read_file of `rel` opened beneath `dir` (see ur_fs_open_beneath). */
int ur_fs_read_file_beneath(ur_buf *out, const char *dir, const char *rel, size_t max_bytes,
                            ur_err *err);

/* Copy the file `rel`, opened beneath `dir`, to `to` (created or truncated; a symbolic link
 * at `to` is not followed), fsynced. The copy never gets more permissions than the source:
 * its mode is the source's read/write bits within 0644, less the umask. */
int ur_fs_copy_file_beneath(const char *dir, const char *rel, const char *to, size_t max_bytes,
                            ur_err *err);

/* Tests only: 1 makes ur_fs_open_beneath take the path used where openat2 is missing. */
void ur_fs__beneath_force_fallback(int on);
/* Tests only: 1 when this kernel (or valgrind, which lacks it) runs openat2, i.e. when
 * links inside a root are followed. */
int ur_fs__beneath_has_openat2(void);
/* Read exactly n bytes at offset from an open descriptor (pread loop). A short file is
 * UR_ECORRUPT ("truncated"); `path` names it in the error. */
int ur_fs_pread_full(int fd, void *dst, size_t n, uint64_t offset, const char *path, ur_err *err);
/* A read-only private mapping of bytes [offset, offset + n) of an open file: `data` points
 * at them (the page cache's own pages, populated up front: no copy, no fault per page). A
 * file shorter than offset + n is UR_ECORRUPT, as for ur_fs_pread_full. The mapping outlives
 * the descriptor; release it with ur_fs_unmap. If the file shrinks while mapped, touching the
 * lost pages raises SIGBUS; ur_fs_mapped_path() names the file this thread mapped last, for
 * the message of a signal handler. */
typedef struct {
    const uint8_t *data;
    size_t len;
    void *base_; /* the mapping: whole pages around data */
    size_t base_len_;
} ur_fs_map;
int ur_fs_map_range(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m,
                    ur_err *err);
/* As ur_fs_map_range for bytes read once, front to back (an upload): nothing is read in up
 * front, so pages come in as they are used, and ur_fs_map_forget gives them back. */
int ur_fs_map_range_once(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m,
                         ur_err *err);
/* Give back the mapped pages wholly before data + upto (they stay in the page cache; a later
 * touch maps them again), so a mapping read front to back holds only the pages ahead. */
void ur_fs_map_forget(ur_fs_map *m, size_t upto);
/* NULL-safe, idempotent. */
void ur_fs_unmap(ur_fs_map *m);
/* The path of this thread's latest ur_fs_map_range or ur_fs_map_write ("" if none), and
 * whether that mapping was for writing; async-signal-safe. */
const char *ur_fs_mapped_path(void);
int ur_fs_mapped_for_write(void);

/* A shared writable mapping of bytes [offset, offset + n) of a file opened for reading and
 * writing, whose blocks ur_fs_reserve reserved (so that storing into a page cannot meet a full
 * disk: that would be SIGBUS): stores go to the page cache as pwrite's would, without a
 * system call per run of bytes. Release with ur_fs_unmap (the bytes stay in the page cache). */
int ur_fs_map_write(int fd, uint64_t offset, size_t n, const char *path, ur_fs_map *m,
                    ur_err *err);
/* Reserve the blocks of [0, size) of an open file (fallocate). UR_EUNSUPPORTED when the file
 * system cannot (the caller writes with pwrite instead); no space is UR_EIO naming the file. */
int ur_fs_reserve(int fd, uint64_t size, const char *path, ur_err *err);

/* Create `path` (UR_EEXIST naming it when something is there), `size` bytes long (sparse:
 * nothing written yet), for reading and writing at offsets; *fd_out is closed by the
 * caller. */
int ur_fs_create_sized(int *fd_out, const char *path, uint64_t size, ur_err *err);
/* Write all n bytes at `offset` (pwrite loop). */
int ur_fs_pwrite_full(int fd, const void *src, size_t n, uint64_t offset, const char *path,
                      ur_err *err);
/* fsync, then close (closed whatever the outcome). */
int ur_fs_sync_close(int fd, const char *path, ur_err *err);
/* Write all n bytes (write loop). */
int ur_fs_write_full(int fd, const void *src, size_t n, const char *path, ur_err *err);
/* Create (truncate) `path`, write the bytes, fsync, close. */
int ur_fs_write_file(const char *path, const void *data, size_t n, ur_err *err);
/* The same for the file `name` in directory `dir`. */
int ur_fs_write_file_in(const char *dir, const char *name, const void *data, size_t n,
                        ur_err *err);
/* mkdir -p. */
int ur_fs_mkdirs(const char *path, ur_err *err);
/* mkdir -p of `path` inside `root`, which must already be a directory: only the components
 * below root are created. A writer calls this while it runs, so a root removed under it
 * (say, a staging directory deleted by someone else) is an error, never quietly re-created.
 * `path` must start with `root`. */
int ur_fs_mkdirs_under(const char *root, const char *path, ur_err *err);
/* fsync a directory so a rename or create inside it is durable. */
int ur_fs_fsync_dir(const char *path, ur_err *err);
/* rename(from, to) (not made durable: see ur_fs_rename_into_place). UR_EIO naming `from`
 * and `to` when it fails (UR_ENOTFOUND when `from` is not there). */
int ur_fs_rename(const char *from, const char *to, ur_err *err);
/* The identity of what `path` names itself (lstat: a link is not followed), which a rename
 * keeps: its device and inode. UR_ENOTFOUND when nothing is there. */
int ur_fs_identity(const char *path, unsigned long long *dev, unsigned long long *ino,
                   ur_err *err);
/* rename(from, to), then fsync of to's parent directory, so the new name is durable (the
 * publication of a finished directory). UR_EIO naming `to` when the rename fails. */
int ur_fs_rename_into_place(const char *from, const char *to, ur_err *err);
/* Called with the name of each entry of a directory but "." and "..", in readdir's order. A
 * nonzero return stops the listing and is returned by ur_fs_list_names. */
typedef int (*ur_fs_name_fn)(void *ctx, const char *name);
/* One level of the directory `path`, for callers that walk a local directory by name. When it
 * cannot be opened: UR_ENOTFOUND (not there) or UR_EIO, naming path, "cannot open <what>". */
int ur_fs_list_names(const char *path, const char *what, ur_fs_name_fn fn, void *ctx, ur_err *err);
/* A new private directory $TMPDIR/<stem>.XXXXXX (/tmp without TMPDIR), for a run's local
 * scratch; *out is ur_free'd by the caller (after ur_fs_remove_tree). `what` names it in errors.
 */
int ur_fs_make_temp_dir(char **out, const char *stem, const char *what, ur_err *err);
/* The private directory $TMPDIR/<name> (/tmp without TMPDIR), for scratch a rerun of the same
 * work on this machine finds again: made (mode 0700, *created = 1) when absent; one that exists
 * is taken only when it is a directory, not a link, of this user with no access for others
 * (else UR_EIO: the caller falls back to ur_fs_make_temp_dir). *out as for that function. */
int ur_fs_make_named_temp_dir(char **out, const char *name, int *created, const char *what,
                              ur_err *err);
/* Take an exclusive advisory lock (flock) on the file `path`, created when absent, without
 * waiting: *fd_out is the descriptor that holds it (close it to let go), or -1 when another
 * open file holds it, or when the file was unlinked or replaced as it was locked (its holder
 * removed it: what was locked is no longer the lock at that name). UR_ENOTFOUND when the
 * directory holding `path` is gone; UR_EIO naming path for any other failure. */
int ur_fs_lock_try(const char *path, int *fd_out, ur_err *err);
/* ur_fs_lock_try for a lock that says who holds it. Once the lock is taken, the file's content
 * becomes `holder` (say "pid 12 on host\n"). When another open file holds it, *fd_out is -1
 * and `held_by` (n > 0 bytes) gets what that holder wrote, on one line (control characters as
 * spaces; "holder not yet recorded" when it wrote nothing yet). When the file was unlinked or
 * replaced as it was locked, *fd_out is -1 and held_by is "": try again. UR_ENOTFOUND when the
 * directory holding `path` is gone; UR_EIO naming path for any other failure ("cannot open the
 * lock file", "cannot lock", "cannot write the lock file"). */
int ur_fs_lock_take(const char *path, const char *holder, int *fd_out, char *held_by, size_t n,
                    ur_err *err);
/* Let go of a lock taken by ur_fs_lock_take (fd >= 0): unlink `path` while still holding the
 * lock, but only when the name still refers to the file locked on fd, then close fd. A run
 * waiting on the old file then finds the name changed and tries again. fd < 0: nothing. */
void ur_fs_lock_release(const char *path, int fd);
/* Close a descriptor a helper here returned (a held directory); fd < 0: nothing. */
void ur_fs_close(int fd);
/* Create the directory `path` (mode 0755, its parent must exist) and keep it open, so its
 * inode cannot be reused by another directory while *fd_out is held (close it with
 * ur_fs_close): *dev and *ino are its identity, as ur_fs_identity gives it. A link is not
 * followed. UR_EIO naming path: "cannot create <what>" (errno EEXIST when something is there
 * already), or "cannot open <what>", after which the new directory is removed again. */
int ur_fs_mkdir_held(const char *path, const char *what, int *fd_out, unsigned long long *dev,
                     unsigned long long *ino, ur_err *err);
/* Remove the directory `path` if it is empty: UR_OK when removed or not there; UR_EIO naming
 * path ("cannot remove directory", errno ENOTEMPTY when it holds anything) otherwise. */
int ur_fs_remove_empty_dir(const char *path, ur_err *err);
/* What a path names itself (lstat: a symbolic link is UR_FS_OTHER, never followed). */
typedef enum {
    UR_FS_MISSING = 0, /* nothing there */
    UR_FS_FILE,        /* a regular file */
    UR_FS_DIR,         /* a directory */
    UR_FS_OTHER        /* a link, FIFO, device or socket */
} ur_fs_kind;
/* *kind_out for `path`: UR_OK (UR_FS_MISSING when nothing is there, errno ENOENT); UR_EIO
 * naming path ("cannot stat", with its errno: ENOTDIR below a file, EACCES...) otherwise. */
int ur_fs_kind_of(ur_fs_kind *kind_out, const char *path, ur_err *err);
/* The first head_n bytes and the last min(size, *tail_n) bytes of the regular file `path`
 * (*tail_n becomes that count; *size_out is its size), without reading what lies between:
 * the cheap check that a file was written whole. A link is not followed and the file is
 * opened O_NONBLOCK, so a FIFO never blocks. UR_ENOTFOUND (absent) or UR_EIO naming path
 * ("cannot open", "not a regular file", "read failed"); UR_ECORRUPT when it holds fewer
 * than head_n bytes. */
int ur_fs_read_ends(const char *path, void *head, size_t head_n, void *tail, size_t *tail_n,
                    uint64_t *size_out, ur_err *err);
/* How ur_fs_swap_in put `from` at `to`, for ur_fs_swap_back. */
typedef enum {
    UR_FS_MOVED_NOT = 0,
    UR_FS_MOVED_EXCHANGED, /* what was at `to` is now at `from` */
    UR_FS_MOVED_IN,        /* nothing was at `to` */
    UR_FS_MOVED_ASIDE      /* no exchange on this file system: the earlier one is at `aside` */
} ur_fs_moved;
/* Put the new output `from` at `to` with no moment where `to` holds neither: an earlier
 * output there is exchanged with it atomically (renameat2 RENAME_EXCHANGE: it is then at
 * `from`); where the file system has no exchange, the earlier output is first renamed to
 * `aside`, then `from` to `to` (and, when that fails, `aside` back). With nothing at `to`,
 * `from` never replaces something that appeared there meanwhile (RENAME_NOREPLACE, where the
 * file system has it). Nothing is made durable: fsync `to`'s parent (ur_fs_fsync_dir). *how
 * says what was done, UR_FS_MOVED_NOT on failure: UR_EIO naming `to` ("cannot swap in the new
 * output from <from>", "cannot move the earlier output aside", "cannot move the new output
 * in"). */
int ur_fs_swap_in(const char *from, const char *to, const char *aside, ur_fs_moved *how,
                  ur_err *err);
/* Undo ur_fs_swap_in (best effort: the same renames, reversed); *how becomes
 * UR_FS_MOVED_NOT. */
void ur_fs_swap_back(const char *from, const char *to, const char *aside, ur_fs_moved *how);
/* The absolute canonical form of `path` in *out (ur_free it): its longest existing prefix
 * resolved by realpath (symbolic links followed), the rest normalized lexically ("." dropped,
 * ".." removes the last component, never above "/"). With resolve_last == 0 the last component
 * itself is not resolved (a link there is what a rename would replace). A relative path is
 * taken from the working directory. UR_EIO naming path ("cannot resolve a relative path",
 * "cannot resolve"). */
int ur_fs_canonical(char **out, const char *path, int resolve_last, ur_err *err);
/* rm -rf; a missing path is not an error. Never follows symlinks out of the tree. */
int ur_fs_remove_tree(const char *path, ur_err *err);
/* 1 when path exists (any type), 0 when not. */
int ur_fs_exists(const char *path);
/* 1 when path is a directory. */
int ur_fs_is_dir(const char *path);
/* Size of a regular file. */
int ur_fs_file_size(const char *path, uint64_t *size_out, ur_err *err);
/* Bytes an unprivileged process may still write on the file system that `path` would be
 * created on (statvfs of its nearest existing ancestor; `path` need not exist). UR_EIO
 * naming the ancestor when it cannot be queried. */
int ur_fs_free_space(const char *path, uint64_t *free_out, ur_err *err);
/* Refuse, before anything is written, an output of up to `need` bytes that may not fit where
 * `path` will be created: UR_EIO with ENOSPC naming `path` and both sizes (or the error of
 * ur_fs_free_space). */
int ur_fs_space_check(const char *path, uint64_t need, ur_err *err);

#endif
