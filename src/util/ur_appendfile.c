/* Append-only file with a background writer and direct I/O; see include/unroll/appendfile.h.
 *
 * Two aligned buffers: the caller fills one while the writer thread writes the other. Every
 * block but the last is a whole buffer (a multiple of ALIGN) at an offset that is a multiple
 * of ALIGN, which is what O_DIRECT asks for; the last one, of any length, is written
 * through the page cache. */
#define _GNU_SOURCE /* O_DIRECT */
#include "unroll/appendfile.h"

#include "unroll/alloc.h"
#include "unroll/phase.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define ALIGN ((size_t)4096)
#define BUF_BYTES ((size_t)8 << 20)

struct ur_appendfile {
    char *path;
    int fd;
    int direct; /* O_DIRECT still set on fd (the writer clears it if the fs refuses) */
    uint8_t *mem;  /* one allocation holding both buffers */
    uint8_t *buf[2];
    int cur;       /* the buffer the caller fills */
    size_t fill;
    uint64_t handed; /* bytes handed to the writer (file offset of buf[cur]) */

    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int pending;     /* a block waits for or is being written */
    int stop;
    const uint8_t *job;
    size_t job_len;
    uint64_t job_off;
    int werr;        /* errno of the first failed write; 0 */
};

/* Write a block at off, clearing O_DIRECT once if the file system refuses it. */
static int write_block(ur_appendfile *f, const uint8_t *p, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwrite(f->fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR) {
                continue;
            }
            if (errno == EINVAL && f->direct) {
                int fl = fcntl(f->fd, F_GETFL);
                if (fl >= 0 && fcntl(f->fd, F_SETFL, fl & ~O_DIRECT) == 0) {
                    f->direct = 0;
                    continue;
                }
            }
            return errno;
        }
        if (w == 0) {
            return EIO;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

static void *writer_main(void *arg)
{
    ur_appendfile *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->pending && !f->stop) {
            pthread_cond_wait(&f->cv, &f->mu);
        }
        if (!f->pending) {
            break;
        }
        {
            const uint8_t *p = f->job;
            size_t n = f->job_len;
            uint64_t off = f->job_off;
            int e = 0;
            int skip = f->werr != 0; /* after a failure nothing more is written */
            pthread_mutex_unlock(&f->mu);
            if (!skip) {
                ur_phase_mark m;
                ur_phase_begin(&m);
                e = write_block(f, p, n, off);
                ur_phase_end(UR_PHASE_WRITE, &m);
            }
            pthread_mutex_lock(&f->mu);
            if (e != 0 && f->werr == 0) {
                f->werr = e;
            }
        }
        f->pending = 0;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static int write_error(const ur_appendfile *f, int e, ur_err *err)
{
    return ur_err_set_os(err, UR_EIO, e, f->path, "write failed");
}

/* Wait until the writer is idle; its error, if any. */
static int wait_idle(ur_appendfile *f, ur_err *err)
{
    int e;
    pthread_mutex_lock(&f->mu);
    while (f->pending) {
        pthread_cond_wait(&f->cv, &f->mu);
    }
    e = f->werr;
    pthread_mutex_unlock(&f->mu);
    return e != 0 ? write_error(f, e, err) : UR_OK;
}

/* Hand buf[cur][0, n) to the writer (writing at f->handed) and switch buffers. */
static int submit(ur_appendfile *f, size_t n, ur_err *err)
{
    int rc = wait_idle(f, err);
    if (rc < 0) {
        return rc;
    }
    pthread_mutex_lock(&f->mu);
    f->job = f->buf[f->cur];
    f->job_len = n;
    f->job_off = f->handed;
    f->pending = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    f->cur ^= 1;
    f->fill = 0;
    return UR_OK;
}

int ur_appendfile_create(ur_appendfile **out, const char *path, ur_err *err)
{
    ur_appendfile *f = ur_calloc(1, sizeof *f);
    int rc = UR_OK;

    *out = NULL;
    if (f == NULL) {
        return ur_err_oom(err);
    }
    f->fd = -1;
    f->path = ur_strdup(path);
    f->mem = ur_malloc(2 * BUF_BYTES + ALIGN);
    if (f->path == NULL || f->mem == NULL) {
        rc = ur_err_oom(err);
        goto fail;
    }
    f->buf[0] = f->mem + (ALIGN - (uintptr_t)f->mem % ALIGN) % ALIGN;
    f->buf[1] = f->buf[0] + BUF_BYTES;
    /* Create first, then ask for direct I/O: on a file system without it, open(O_DIRECT)
     * may create the file and still fail (ramfs). */
    f->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, path, "cannot create file");
        goto fail;
    }
    {
        int fl = fcntl(f->fd, F_GETFL);
        f->direct = fl >= 0 && fcntl(f->fd, F_SETFL, fl | O_DIRECT) == 0;
    }
    if (pthread_mutex_init(&f->mu, NULL) != 0) {
        rc = ur_err_set(err, UR_EINTERNAL, "%s: cannot create a mutex", path);
        goto fail;
    }
    if (pthread_cond_init(&f->cv, NULL) != 0) {
        pthread_mutex_destroy(&f->mu);
        rc = ur_err_set(err, UR_EINTERNAL, "%s: cannot create a condition variable", path);
        goto fail;
    }
    if (pthread_create(&f->thread, NULL, writer_main, f) != 0) {
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
        rc = ur_err_set(err, UR_EINTERNAL, "%s: cannot start the writer thread", path);
        goto fail;
    }
    f->started = 1;
    *out = f;
    return UR_OK;
fail:
    if (f->fd >= 0) {
        close(f->fd);
    }
    ur_free(f->mem);
    ur_free(f->path);
    ur_free(f);
    return rc;
}

int ur_appendfile_write(ur_appendfile *f, const void *data, size_t n, ur_err *err)
{
    const uint8_t *p = data;
    while (n > 0) {
        size_t k = BUF_BYTES - f->fill;
        if (k > n) {
            k = n;
        }
        memcpy(f->buf[f->cur] + f->fill, p, k);
        f->fill += k;
        p += k;
        n -= k;
        if (f->fill == BUF_BYTES) {
            int rc = submit(f, BUF_BYTES, err);
            if (rc < 0) {
                return rc;
            }
            f->handed += BUF_BYTES;
        }
    }
    return UR_OK;
}

uint64_t ur_appendfile_size(const ur_appendfile *f)
{
    return f->handed + f->fill;
}

/* Stop and join the writer thread, free everything but the descriptor's outcome. */
static void release(ur_appendfile *f)
{
    if (f->started) {
        pthread_mutex_lock(&f->mu);
        f->stop = 1;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->thread, NULL);
        pthread_cond_destroy(&f->cv);
        pthread_mutex_destroy(&f->mu);
    }
    ur_free(f->mem);
    ur_free(f->path);
    ur_free(f);
}

int ur_appendfile_finish(ur_appendfile *f, ur_err *err)
{
    int rc = UR_OK;

    if (f->fill > 0) {
        /* The tail goes through the page cache at its true length: no padding to truncate
         * afterwards, and a file-size limit is met exactly. The writer is idle after
         * wait_idle, so the descriptor's flags are the caller's to change. */
        rc = wait_idle(f, err);
        if (rc == UR_OK && f->direct) {
            int fl = fcntl(f->fd, F_GETFL);
            if (fl < 0 || fcntl(f->fd, F_SETFL, fl & ~O_DIRECT) != 0) {
                rc = ur_err_set_os(err, UR_EIO, errno, f->path, "cannot clear O_DIRECT");
            }
            f->direct = 0;
        }
        if (rc == UR_OK) {
            rc = submit(f, f->fill, err);
        }
    }
    if (rc == UR_OK) {
        rc = wait_idle(f, err);
    }
    if (rc == UR_OK && fsync(f->fd) != 0) {
        rc = ur_err_set_os(err, UR_EIO, errno, f->path, "fsync failed");
    }
    if (close(f->fd) != 0 && rc == UR_OK) {
        rc = ur_err_set_os(err, UR_EIO, errno, f->path, "close failed");
    }
    f->fd = -1;
    release(f);
    return rc;
}

void ur_appendfile_abort(ur_appendfile *f)
{
    if (f == NULL) {
        return;
    }
    pthread_mutex_lock(&f->mu);
    while (f->pending) {
        pthread_cond_wait(&f->cv, &f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    close(f->fd);
    release(f);
}
