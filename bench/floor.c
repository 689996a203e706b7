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
 * With -c OUTLIST (the codec floor): what libzstd alone needs, and nothing else. OUTLIST is
 * the chunk list of a converter's bfloat16 output (`make_checkpoint.py chunks` on its items).
 * The stored bytes are loaded into memory first, a batch of at most 1 GiB at a time (not
 * timed); then T threads decode every inner chunk of the input (ZSTD_decompressDCtx, one
 * context and one destination per thread, reused), and, the output's chunks decoded into
 * memory the same way (not timed), encode every one of them at the output's zstd level
 * (ZSTD_compressCCtx, reused). Each call is timed on its thread's CPU clock. No read, no
 * cast, no copy, no slicing, no allocation: the codec work any converter of this input into
 * this output must do. The floor of the machine is max(the cold read, codec CPU / cores).
 *
 * Build: cc -O3 -std=c11 -o floor bench/floor.c -lzstd -lpthread
 * Usage: floor [-m | -r] [-t THREADS] [-l LEVEL] LIST.tsv OUT
 *        floor -c OUTLIST [-t THREADS] [-l OUT_LEVEL] LIST.tsv
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

/* ---- the codec floor (-c) ----------------------------------------------------------------- */

static double now_s(void);

/* One inner chunk of a loaded batch: its stored bytes and, for the output, its decoded ones. */
struct piece {
    const unsigned char *src;
    size_t len;
    size_t decoded;
    unsigned char *raw; /* the output: decoded (untimed), then encoded (timed) */
};

struct codec_job {
    struct piece *pieces;
    size_t n;
    int encode; /* 0: decode the pieces; 1: encode their raw bytes */
    int level;
    atomic_size_t next;
    _Atomic uint64_t cpu_ns; /* thread CPU time inside the zstd calls */
    _Atomic uint64_t bytes;  /* decoded bytes handled */
    atomic_int failed;
};

static uint64_t thread_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *codec_worker(void *arg)
{
    struct codec_job *job = arg;
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    ZSTD_CCtx *cctx = ZSTD_createCCtx();
    unsigned char *dst = NULL;
    size_t cap = 0;
    uint64_t ns = 0, bytes = 0;
    if (!dctx || !cctx) {
        die("zstd context");
    }
    for (;;) {
        size_t i = atomic_fetch_add(&job->next, 1), got;
        if (i >= job->n) {
            break;
        }
        struct piece *p = &job->pieces[i];
        size_t need = job->encode ? ZSTD_compressBound(p->decoded) : p->decoded;
        if (need > cap) { /* outside the timed call */
            cap = need;
            dst = xrealloc(dst, cap);
        }
        uint64_t t0 = thread_ns();
        got = job->encode ? ZSTD_compressCCtx(cctx, dst, cap, p->raw, p->decoded, job->level)
                          : ZSTD_decompressDCtx(dctx, dst, p->decoded, p->src, p->len);
        ns += thread_ns() - t0;
        if (ZSTD_isError(got) || (!job->encode && got != p->decoded)) {
            fprintf(stderr, "floor: zstd: %s\n",
                    ZSTD_isError(got) ? ZSTD_getErrorName(got) : "wrong size");
            atomic_store(&job->failed, 1);
            break;
        }
        bytes += p->decoded;
    }
    atomic_fetch_add(&job->cpu_ns, ns);
    atomic_fetch_add(&job->bytes, bytes);
    free(dst);
    ZSTD_freeDCtx(dctx);
    ZSTD_freeCCtx(cctx);
    return NULL;
}

/* Run `job` on T threads; its wall seconds. */
static double codec_run(struct codec_job *job, long threads)
{
    pthread_t *tids = xrealloc(NULL, (size_t)threads * sizeof *tids);
    double t0 = now_s();
    atomic_store(&job->next, 0);
    for (long t = 0; t < threads; t++) {
        if (pthread_create(&tids[t], NULL, codec_worker, job) != 0) {
            die("pthread_create");
        }
    }
    for (long t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
    }
    free(tids);
    return now_s() - t0;
}

struct codec_side {
    double wall_s;
    uint64_t cpu_ns, bytes, stored;
    size_t pieces;
};

/* Rows [*at, ...) of total stored size at most `batch` (at least one) loaded into `buf`, their
 * inner chunks listed in `job`; for the output (`raw`) each decoded into memory too. */
static void load_batch(const struct row *rows, size_t nrows, size_t *at, uint64_t batch,
                       unsigned char **buf, struct codec_job *job, int raw, ZSTD_DCtx *dctx)
{
    uint64_t total = 0;
    size_t end = *at, n = 0;
    while (end < nrows && (end == *at || total + rows[end].length <= batch)) {
        total += rows[end].length;
        n += rows[end].inner_chunks;
        end++;
    }
    *buf = xrealloc(*buf, total);
    job->pieces = xrealloc(job->pieces, n * sizeof *job->pieces);
    job->n = 0;
    for (uint64_t off = 0; *at < end; (*at)++) {
        const struct row *r = &rows[*at];
        unsigned char *in = *buf + off;
        uint64_t index_bytes = r->inner_chunks * 16 + 4;
        if (pread_all(r->fd, in, r->length, r->offset) != 0 || r->length < index_bytes) {
            die("pread");
        }
        for (uint64_t c = 0; c < r->inner_chunks; c++) {
            const unsigned char *index = in + r->length - index_bytes;
            uint64_t o = le64(index + 16 * c), len = le64(index + 16 * c + 8);
            if (o == UINT64_MAX && len == UINT64_MAX) {
                continue; /* missing: nothing to decode */
            }
            struct piece *p = &job->pieces[job->n++];
            p->src = in + o;
            p->len = len;
            p->decoded = r->inner_bytes;
            p->raw = NULL;
            if (raw) {
                p->raw = xrealloc(NULL, p->decoded);
                if (ZSTD_decompressDCtx(dctx, p->raw, p->decoded, p->src, p->len) != p->decoded) {
                    fprintf(stderr, "floor: output chunk does not decode\n");
                    exit(1);
                }
            }
        }
        off += r->length;
    }
}

/* Every inner chunk of `rows` decoded (encode 0) or, decoded first, encoded at `level`, batch
 * by batch. */
static struct codec_side codec_side(const struct row *rows, size_t nrows, int encode, int level,
                                    long threads)
{
    struct codec_side side = {0};
    struct codec_job job = {.encode = encode, .level = level};
    unsigned char *buf = NULL;
    ZSTD_DCtx *dctx = ZSTD_createDCtx();
    atomic_init(&job.cpu_ns, 0);
    atomic_init(&job.bytes, 0);
    atomic_init(&job.failed, 0);
    for (size_t at = 0; at < nrows;) {
        size_t first = at;
        load_batch(rows, nrows, &at, (uint64_t)1 << 30, &buf, &job, encode, dctx);
        for (size_t i = first; i < at; i++) {
            side.stored += rows[i].length;
        }
        side.wall_s += codec_run(&job, threads);
        side.pieces += job.n;
        for (size_t i = 0; i < job.n; i++) {
            free(job.pieces[i].raw);
        }
        if (atomic_load(&job.failed)) {
            exit(1);
        }
    }
    side.cpu_ns = atomic_load(&job.cpu_ns);
    side.bytes = atomic_load(&job.bytes);
    free(buf);
    free(job.pieces);
    ZSTD_freeDCtx(dctx);
    return side;
}

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

/* The rows of a chunk list (the "# zstd_level" line into *level unless set), each inner chunk
 * a multiple of `unit` bytes. */
static void read_list(const char *path, struct row **rows_out, size_t *nrows_out,
                      struct file **files, size_t *nfiles, int *level, uint64_t *total_out,
                      uint64_t unit)
{
    FILE *list = fopen(path, "r");
    struct row *rows = NULL;
    size_t nrows = 0;
    char line[8192];
    if (!list) {
        die(path);
    }
    while (fgets(line, sizeof line, list)) {
        if (line[0] == '#') {
            int lv;
            if (sscanf(line, "# zstd_level %d", &lv) == 1 && *level == -1000) {
                *level = lv;
            }
            continue;
        }
        char *file = strtok(line, "\t\n");
        if (!file) {
            continue;
        }
        char *f[5];
        for (int k = 0; k < 5; k++) {
            f[k] = strtok(NULL, "\t\n");
            if (!f[k]) {
                fprintf(stderr, "floor: bad line in %s\n", path);
                exit(1);
            }
        }
        rows = xrealloc(rows, (nrows + 1) * sizeof *rows);
        struct row *r = &rows[nrows++];
        r->fd = open_cached(files, nfiles, file);
        r->offset = strtoull(f[0], NULL, 10);
        r->length = strtoull(f[1], NULL, 10);
        r->inner_bytes = strtoull(f[2], NULL, 10);
        r->inner_chunks = strtoull(f[3], NULL, 10);
        *total_out += strtoull(f[4], NULL, 10);
        if (r->inner_bytes % unit != 0 || r->inner_chunks == 0) {
            fprintf(stderr, "floor: bad row %zu of %s\n", nrows, path);
            exit(1);
        }
    }
    fclose(list);
    *rows_out = rows;
    *nrows_out = nrows;
}

/* -c: decode the input's chunks, encode the output's at `level` (-1000: the level OUTLIST
 * names); print the figures as one JSON line. */
static int codec_floor(struct row *rows, size_t nrows, const char *out_list, struct file **files,
                       size_t *nfiles, int level, long threads)
{
    struct row *out = NULL;
    size_t nout = 0;
    uint64_t unused = 0;
    read_list(out_list, &out, &nout, files, nfiles, &level, &unused, 2);
    if (level == -1000) {
        level = 3;
    }
    struct codec_side dec = codec_side(rows, nrows, 0, level, threads);
    struct codec_side enc = codec_side(out, nout, 1, level, threads);
    double cpu = (double)(dec.cpu_ns + enc.cpu_ns) * 1e-9;
    printf("{\"codec_floor\": true, \"threads\": %ld, "
           "\"decode\": {\"chunks\": %zu, \"stored_bytes\": %" PRIu64
           ", \"decoded_bytes\": %" PRIu64 ", \"cpu_s\": %.3f, \"wall_s\": %.3f, "
           "\"mb_per_cpu_s\": %.1f}, "
           "\"encode\": {\"level\": %d, \"chunks\": %zu, \"raw_bytes\": %" PRIu64
           ", \"cpu_s\": %.3f, \"wall_s\": %.3f, \"mb_per_cpu_s\": %.1f}, "
           "\"codec_cpu_s\": %.3f, \"codec_cpu_per_thread_s\": %.3f}\n",
           threads, dec.pieces, dec.stored, dec.bytes, (double)dec.cpu_ns * 1e-9, dec.wall_s,
           (double)dec.bytes / 1e6 / ((double)dec.cpu_ns * 1e-9 + 1e-12), level, enc.pieces,
           enc.bytes, (double)enc.cpu_ns * 1e-9, enc.wall_s,
           (double)enc.bytes / 1e6 / ((double)enc.cpu_ns * 1e-9 + 1e-12), cpu,
           cpu / (double)threads);
    free(out);
    return 0;
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
    fprintf(stderr, "usage: floor [-m | -r] [-t THREADS] [-l LEVEL] LIST.tsv OUT\n"
                    "       floor -c OUTLIST [-t THREADS] [-l OUT_LEVEL] LIST.tsv\n");
    exit(2);
}

int main(int argc, char **argv)
{
    long threads = 1;
    int level = -1000;
    int opt, map = 0, read_only = 0;
    const char *out_list = NULL;
    while ((opt = getopt(argc, argv, "mrc:t:l:")) != -1) {
        if (opt == 'c') {
            out_list = optarg;
        } else if (opt == 'm') {
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
    if (argc - optind != (out_list != NULL ? 1 : 2) || threads < 1 || threads > 1024 ||
        (map && read_only) || (out_list != NULL && (map || read_only))) {
        usage();
    }
    struct row *rows = NULL;
    size_t nrows = 0;
    struct file *files = NULL;
    size_t nfiles = 0;
    uint64_t total_out = 0;
    int level_opt = level; /* -l, before the list's line */
    read_list(argv[optind], &rows, &nrows, &files, &nfiles, &level, &total_out, 4);
    if (out_list != NULL) {
        return codec_floor(rows, nrows, out_list, &files, &nfiles, level_opt, threads);
    }
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
