/*
 * floor: the lower bound for converting the parameter chunks of a checkpoint.
 *
 * Input: a chunk list written by `make_checkpoint.py chunks` (tab-separated: data file path,
 * offset, length, decoded bytes per inner chunk, inner chunks, output bytes; a
 * "# zstd_level N" line). Each row is one zarr3 shard (`sharding_indexed`) as Orbax stores it:
 * zstd-compressed inner chunks followed by the shard index (inner_chunks x {offset, nbytes},
 * little-endian uint64, then a CRC-32C).
 *
 * With T threads taking rows (largest first) from a shared counter, for every row: pread the
 * stored bytes, for every inner chunk ZSTD_decompress it into a buffer of its decoded size,
 * cast the float32 values to bfloat16 (round to nearest even, NaN kept quiet), ZSTD_compress
 * the bf16 bytes at the input's zstd level, and pwrite the frame to OUT at a reserved offset.
 *
 * Left out, on purpose (that is what makes it a floor): the OCDBT B+tree and manifest, zarr
 * and Orbax metadata, the index CRC-32C, the per-layer strided slicing, output B+tree and
 * metadata, fsync.
 *
 * With -m (the codec floor): the stored bytes are not copied but mapped (mmap with
 * MAP_POPULATE, the page cache's own pages), and the compressed frames are counted, not
 * written: what is left is the codec work and the cast alone.
 *
 * With -r (the read floor): each row's stored bytes are read with pread into a buffer and
 * nothing else is done (OUT is not written): from a cold page cache, the time any converter
 * needs to get the parameter bytes off the disk in this order with T threads.
 *
 * Build: cc -O3 -std=c11 -o floor bench/floor.c -lzstd -lpthread
 * Usage: floor [-m | -r] [-t THREADS] [-l LEVEL] LIST.tsv OUT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>

struct row {
    int fd;
    uint64_t offset;
    uint64_t length;
    uint64_t inner_bytes;
    uint64_t inner_chunks;
};

struct job {
    struct row *rows;
    size_t nrows;
    int level;
    int out_fd;
    int map; /* -m */
    int read_only; /* -r */
    atomic_size_t next;
    atomic_uint_fast64_t out_offset;
    atomic_uint_fast64_t bytes_read;
    atomic_uint_fast64_t bytes_decoded;
    atomic_uint_fast64_t bytes_written;
    atomic_int failed;
};

static void die(const char *what)
{
    fprintf(stderr, "floor: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        die("out of memory");
    }
    return q;
}

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static int pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

static int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return -1;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* float32 -> bfloat16, round to nearest even; NaN stays NaN (quiet). Branch-free so that the
 * loop vectorizes. */
static void cast_bf16(const unsigned char *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x;
        memcpy(&x, in + 4 * i, 4);
        uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
        uint32_t quiet = (x >> 16) | 0x0040u;
        out[i] = (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

static void *worker(void *arg)
{
    struct job *job = arg;
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    unsigned char *in = NULL, *dec = NULL, *cmp = NULL;
    uint16_t *half = NULL;
    size_t in_cap = 0, dec_cap = 0, cmp_cap = 0;
    if (!dctx || !cctx) {
        die("zstd context");
    }
    for (;;) {
        size_t i = atomic_fetch_add(&job->next, 1);
        if (i >= job->nrows || atomic_load(&job->failed)) {
            break;
        }
        const struct row *r = &job->rows[i];
        uint64_t index_bytes = r->inner_chunks * 16 + 4;
        if (r->length < index_bytes) {
            fprintf(stderr, "floor: row %zu: %" PRIu64 " bytes, shorter than its index\n", i,
                    r->length);
            atomic_store(&job->failed, 1);
            break;
        }
        if (!job->map && r->length > in_cap) {
            in_cap = r->length;
            in = xrealloc(in, in_cap);
        }
        if (r->inner_bytes > dec_cap) {
            dec_cap = r->inner_bytes;
            dec = xrealloc(dec, dec_cap);
            half = xrealloc(half, dec_cap / 2 + 2);
            cmp_cap = ZSTD_compressBound(dec_cap / 2);
            cmp = xrealloc(cmp, cmp_cap);
        }
        void *map = NULL;
        size_t map_len = 0;
        if (job->map) {
            uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), start = r->offset / page * page;
            map_len = (size_t)(r->offset - start + r->length);
            map = mmap(NULL, map_len, PROT_READ, MAP_PRIVATE | MAP_POPULATE, r->fd, (off_t)start);
            if (map == MAP_FAILED) {
                die("mmap");
            }
            in = (unsigned char *)map + (r->offset - start);
        } else if (pread_all(r->fd, in, r->length, r->offset) != 0) {
            die("pread");
        }
        atomic_fetch_add(&job->bytes_read, r->length);
        if (job->read_only) {
            continue;
        }
        const unsigned char *index = in + r->length - index_bytes;
        for (uint64_t c = 0; c < r->inner_chunks; c++) {
            uint64_t off = le64(index + 16 * c);
            uint64_t len = le64(index + 16 * c + 8);
            if (off == UINT64_MAX && len == UINT64_MAX) {
                memset(dec, 0, r->inner_bytes); /* missing inner chunk: fill value 0 */
            } else {
                if (off > r->length - index_bytes || len > r->length - index_bytes - off) {
                    fprintf(stderr, "floor: row %zu: inner chunk %" PRIu64 " out of range\n", i,
                            c);
                    atomic_store(&job->failed, 1);
                    break;
                }
                size_t got = ZSTD_decompressDCtx(dctx, dec, r->inner_bytes, in + off, len);
                if (ZSTD_isError(got) || got != r->inner_bytes) {
                    fprintf(stderr, "floor: row %zu: zstd: %s\n", i,
                            ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
                    atomic_store(&job->failed, 1);
                    break;
                }
            }
            atomic_fetch_add(&job->bytes_decoded, r->inner_bytes);
            size_t n = r->inner_bytes / 4;
            cast_bf16(dec, half, n);
            size_t csize = ZSTD_compressCCtx(cctx, cmp, cmp_cap, half, 2 * n, job->level);
            if (ZSTD_isError(csize)) {
                fprintf(stderr, "floor: zstd compress: %s\n", ZSTD_getErrorName(csize));
                atomic_store(&job->failed, 1);
                break;
            }
            uint64_t at = atomic_fetch_add(&job->out_offset, csize);
            if (!job->map && pwrite_all(job->out_fd, cmp, csize, at) != 0) {
                die("pwrite");
            }
            atomic_fetch_add(&job->bytes_written, csize);
        }
        if (map != NULL) {
            munmap(map, map_len);
            in = NULL;
        }
    }
    free(in);
    free(dec);
    free(half);
    free(cmp);
    ZSTD_freeDCtx(dctx);
    ZSTD_freeCCtx(cctx);
    return NULL;
}

struct file {
    char *path;
    int fd;
};

static int open_cached(struct file **files, size_t *nfiles, const char *path)
{
    for (size_t i = 0; i < *nfiles; i++) {
        if (strcmp((*files)[i].path, path) == 0) {
            return (*files)[i].fd;
        }
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        die(path);
    }
    *files = xrealloc(*files, (*nfiles + 1) * sizeof **files);
    (*files)[*nfiles].path = strdup(path);
    (*files)[*nfiles].fd = fd;
    (*nfiles)++;
    return fd;
}

/* largest decoded size first, so that the last rows taken are the small ones */
static int cmp_rows(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    uint64_t sx = x->inner_bytes * x->inner_chunks, sy = y->inner_bytes * y->inner_chunks;
    return sx < sy ? 1 : sx > sy ? -1 : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void)
{
    fprintf(stderr, "usage: floor [-m | -r] [-t THREADS] [-l LEVEL] LIST.tsv OUT\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long threads = 1;
    int level = -1000;
    int opt, map = 0, read_only = 0;
    while ((opt = getopt(argc, argv, "mrt:l:")) != -1) {
        if (opt == 'm') {
            map = 1;
        } else if (opt == 'r') {
            read_only = 1;
        } else if (opt == 't') {
            threads = strtol(optarg, NULL, 10);
        } else if (opt == 'l') {
            level = (int)strtol(optarg, NULL, 10);
        } else {
            usage();
        }
    }
    if (argc - optind != 2 || threads < 1 || threads > 1024 || (map && read_only)) {
        usage();
    }
    FILE *list = fopen(argv[optind], "r");
    if (!list) {
        die(argv[optind]);
    }
    struct row *rows = NULL;
    size_t nrows = 0;
    struct file *files = NULL;
    size_t nfiles = 0;
    uint64_t total_out = 0;
    char line[8192];
    while (fgets(line, sizeof line, list)) {
        if (line[0] == '#') {
            int lv;
            if (sscanf(line, "# zstd_level %d", &lv) == 1 && level == -1000) {
                level = lv;
            }
            continue;
        }
        char *path = strtok(line, "\t\n");
        if (!path) {
            continue;
        }
        char *f[5];
        for (int k = 0; k < 5; k++) {
            f[k] = strtok(NULL, "\t\n");
            if (!f[k]) {
                fprintf(stderr, "floor: bad line in %s\n", argv[optind]);
                return 1;
            }
        }
        rows = xrealloc(rows, (nrows + 1) * sizeof *rows);
        struct row *r = &rows[nrows++];
        r->fd = open_cached(&files, &nfiles, path);
        r->offset = strtoull(f[0], NULL, 10);
        r->length = strtoull(f[1], NULL, 10);
        r->inner_bytes = strtoull(f[2], NULL, 10);
        r->inner_chunks = strtoull(f[3], NULL, 10);
        total_out += strtoull(f[4], NULL, 10);
        if (r->inner_bytes % 4 != 0 || r->inner_chunks == 0) {
            fprintf(stderr, "floor: bad row %zu\n", nrows);
            return 1;
        }
    }
    fclose(list);
    qsort(rows, nrows, sizeof *rows, cmp_rows);
    if (level == -1000) {
        level = 3;
    }
    int out_fd = open(argv[optind + 1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0) {
        die(argv[optind + 1]);
    }
    struct job job = {.rows = rows,
                      .nrows = nrows,
                      .level = level,
                      .out_fd = out_fd,
                      .map = map,
                      .read_only = read_only};
    atomic_init(&job.next, 0);
    atomic_init(&job.out_offset, 0);
    atomic_init(&job.bytes_read, 0);
    atomic_init(&job.bytes_decoded, 0);
    atomic_init(&job.bytes_written, 0);
    atomic_init(&job.failed, 0);

    double t0 = now_s();
    pthread_t *tids = xrealloc(NULL, (size_t)threads * sizeof *tids);
    for (long t = 0; t < threads; t++) {
        if (pthread_create(&tids[t], NULL, worker, &job) != 0) {
            die("pthread_create");
        }
    }
    for (long t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
    }
    if (close(out_fd) != 0) {
        die("close");
    }
    double dt = now_s() - t0;
    if (atomic_load(&job.failed)) {
        return 1;
    }
    uint64_t dec = atomic_load(&job.bytes_decoded);
    if (!read_only && dec / 2 != total_out) {
        fprintf(stderr, "floor: decoded %" PRIu64 " bytes, list promised %" PRIu64 " out\n", dec,
                total_out * 2);
        return 1;
    }
    printf("{\"read_only\": %s, \"mapped_and_discarded\": %s, \"chunks\": %zu, \"threads\": %ld, "
           "\"zstd_level\": %d, "
           "\"bytes_read\": %" PRIu64 ", \"bytes_decoded\": %" PRIu64
           ", \"bytes_written\": %" PRIu64 ", \"seconds\": %.3f}\n",
           read_only ? "true" : "false", map ? "true" : "false", nrows, threads, level,
           (uint64_t)atomic_load(&job.bytes_read), dec, (uint64_t)atomic_load(&job.bytes_written),
           dt);
    for (size_t i = 0; i < nfiles; i++) {
        close(files[i].fd);
        free(files[i].path);
    }
    free(files);
    free(rows);
    free(tids);
    return 0;
}
