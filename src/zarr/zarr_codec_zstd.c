/* zstd: zarr3 codec {"name":"zstd","configuration":{"level":L,"checksum":B}} and zarr2
 * compressor {"id":"zstd","level":L}. A value is one or more zstd frames (RFC 8878).
 *
 * Default levels, as TensorStore writes them when Orbax asks for plain "zstd":
 * zarr3 level 3 without checksum (tensorstore/driver/zarr3/codec/zstd.cc), zarr2 level 1
 * (tensorstore/driver/zarr/compressor.cc, zstd_compressor.h); ur_zarr_spec.zstd_level 0 picks
 * these. Decoding is capped at the
 * size the metadata implies, so a bad frame cannot make us allocate or write more. All
 * zstd memory goes through ur_malloc (ZSTD_customMem), so allocation-failure tests reach
 * it too. */
#define ZSTD_STATIC_LINKING_ONLY
#include "zarr_impl.h"

#include "unroll/alloc.h"

#include <pthread.h>
#include <zstd.h>
#include <zstd_errors.h>

static void *zalloc(void *opaque, size_t size)
{
    (void)opaque;
    return ur_malloc(size);
}

static void zfree(void *opaque, void *p)
{
    (void)opaque;
    ur_free(p);
}

static const ZSTD_customMem mem = {zalloc, zfree, NULL};

static ZSTD_DCtx *new_dctx(void)
{
    return ZSTD_createDCtx_advanced(mem);
}

/* Decompression contexts per thread, kept for the thread's life, for the same reason as the
 * compression contexts below (thread_cctx): one per chunk cost more than decoding a small
 * chunk (at 100,000 leaves of a few bytes, creating them was a sixth of the run). Two of
 * them: the one-shot decode's, and the progressive decode's, whose `ready` callback may
 * decode other values with the first while it is in the middle of a frame. */
enum { DCTX_ONE_SHOT, DCTX_PROGRESSIVE, DCTX_KINDS };
static pthread_key_t dctx_key[DCTX_KINDS];
static pthread_once_t dctx_once = PTHREAD_ONCE_INIT;
static int dctx_key_ok[DCTX_KINDS];

static void dctx_free(void *d)
{
    ZSTD_freeDCtx(d);
}

static void dctx_key_init(void)
{
    for (int k = 0; k < DCTX_KINDS; k++) {
        dctx_key_ok[k] = pthread_key_create(&dctx_key[k], dctx_free) == 0;
    }
}

/* This thread's context of `kind`, reset; NULL when out of memory. *owned: free it after
 * use. */
static ZSTD_DCtx *thread_dctx(int kind, int *owned)
{
    ZSTD_DCtx *d = NULL;
    pthread_once(&dctx_once, dctx_key_init);
    *owned = 0;
    if (dctx_key_ok[kind]) {
        d = pthread_getspecific(dctx_key[kind]);
    }
    if (d != NULL) {
        ZSTD_DCtx_reset(d, ZSTD_reset_session_and_parameters);
        return d;
    }
    d = new_dctx();
    if (d != NULL && (!dctx_key_ok[kind] || pthread_setspecific(dctx_key[kind], d) != 0)) {
        *owned = 1;
    }
    return d;
}

static int decode(const ur_zarr_b2b *b, const uint8_t *src, size_t n, uint8_t *dst, size_t cap,
                  size_t *len_out, ur_err *err)
{
    int owned;
    ZSTD_DCtx *d = thread_dctx(DCTX_ONE_SHOT, &owned);
    size_t r;

    (void)b;
    if (d == NULL) {
        return ur_err_oom(err);
    }
    r = ZSTD_decompressDCtx(d, dst, cap, src, n);
    if (owned) {
        ZSTD_freeDCtx(d);
    }
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall) {
            return ur_err_set(err, UR_ECORRUPT, "zstd: decoded data larger than %zu bytes", cap);
        }
        if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation) {
            return ur_err_oom(err);
        }
        return ur_err_set(err, UR_ECORRUPT, "zstd: %s", ZSTD_getErrorName(r));
    }
    *len_out = r;
    return UR_OK;
}

/* End of the whole blocks that start at `at` and hold at least `step` bytes (or up to the
 * last block); 0 when a block header is cut off. *last says the last block was reached. */
static size_t blocks_end(const uint8_t *src, size_t n, size_t at, size_t step, int *last)
{
    size_t end = at;
    *last = 0;
    while (end - at < step && !*last) {
        uint32_t h;
        size_t body;
        if (n - end < 3) {
            return 0;
        }
        h = (uint32_t)src[end] | (uint32_t)src[end + 1] << 8 | (uint32_t)src[end + 2] << 16;
        *last = (int)(h & 1);
        body = ((h >> 1) & 3) == 1 ? 1 : h >> 3; /* an RLE block stores one byte */
        if (n - end - 3 < body) {
            return 0;
        }
        end += 3 + body;
    }
    return end;
}

static int decode_progressive(const uint8_t *src, size_t n, uint8_t *dst, size_t cap, size_t step,
                              ur_zarr_ready_fn ready, void *ctx, ur_err *err)
{
    ZSTD_DCtx *d;
    ZSTD_inBuffer in = {src, 0, 0};
    ZSTD_outBuffer out = {dst, cap, 0};
    size_t at = ZSTD_frameHeaderSize(src, n), reported = 0;
    int rc = 1, last = 0, owned;

    if (ZSTD_isError(at) || at > n) {
        return 1;
    }
    d = thread_dctx(DCTX_PROGRESSIVE, &owned);
    if (d == NULL) {
        return ur_err_oom(err);
    }
    /* Decode straight into dst (no window buffer), and from src (the input is handed over in
     * whole blocks, so the decoder never copies a partial one). */
    if (ZSTD_isError(ZSTD_DCtx_setParameter(d, ZSTD_d_stableOutBuffer, 1))) {
        goto out;
    }
    while (!last) {
        size_t end = blocks_end(src, n, at, step, &last), r;
        if (end == 0) {
            goto out;
        }
        if (last) {
            end = n; /* the frame's checksum, if any, and anything after it */
        }
        in.size = end;
        do {
            r = ZSTD_decompressStream(d, &out, &in);
        } while (!ZSTD_isError(r) && r != 0 && in.pos < in.size);
        if (ZSTD_isError(r) || (r == 0) != last) {
            goto out; /* the one-shot decode reports it */
        }
        at = end;
        if (out.pos > reported && !last) {
            reported = out.pos;
            rc = ready(ctx, reported, err);
            if (rc != UR_OK) {
                goto out;
            }
            rc = 1;
        }
    }
    /* one frame, all of the input, exactly cap bytes: done; the final report is the caller's */
    rc = in.pos == n && out.pos == cap ? UR_OK : 1;
out:
    if (owned) {
        ZSTD_freeDCtx(d);
    }
    return rc;
}

/* One compression context per thread, kept for the thread's life: creating one per chunk
 * allocates and faults in a few hundred KB of tables each time (unmapped again on free),
 * which for many small chunks cost about as much as compressing them. The output does not
 * depend on the reuse: every frame starts from a reset context with its own parameters. */
static pthread_key_t cctx_key;
static pthread_once_t cctx_once = PTHREAD_ONCE_INIT;
static int cctx_key_ok;

static void cctx_free(void *c)
{
    ZSTD_freeCCtx(c);
}

static void cctx_key_init(void)
{
    cctx_key_ok = pthread_key_create(&cctx_key, cctx_free) == 0;
}

/* This thread's context, reset; NULL when out of memory. *owned: free it after use (when
 * it could not be kept). */
static ZSTD_CCtx *thread_cctx(int *owned)
{
    ZSTD_CCtx *c = NULL;
    pthread_once(&cctx_once, cctx_key_init);
    *owned = 0;
    if (cctx_key_ok) {
        c = pthread_getspecific(cctx_key);
    }
    if (c != NULL) {
        ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
        return c;
    }
    c = ZSTD_createCCtx_advanced(mem);
    if (c != NULL && (!cctx_key_ok || pthread_setspecific(cctx_key, c) != 0)) {
        *owned = 1;
    }
    return c;
}

int ur_zarr_codec_zstd__encode(const uint8_t *src, size_t n, int level, int checksum, ur_buf *out,
                               ur_err *err)
{
    ZSTD_CCtx *c;
    int owned;
    size_t bound = ZSTD_compressBound(n), r;
    int rc;

    rc = ur_buf_reserve(out, bound, err);
    if (rc < 0) {
        return rc;
    }
    c = thread_cctx(&owned);
    if (c == NULL) {
        return ur_err_oom(err);
    }
    r = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r)) {
        r = ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum ? 1 : 0);
    }
    if (!ZSTD_isError(r)) {
        r = ZSTD_compress2(c, out->data + out->len, bound, src, n);
    }
    if (owned) {
        ZSTD_freeCCtx(c);
    }
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation) {
            return ur_err_oom(err);
        }
        return ur_err_set(err, UR_EINTERNAL, "zstd compression failed: %s", ZSTD_getErrorName(r));
    }
    out->len += r;
    return UR_OK;
}

static int encode(const ur_zarr_b2b *b, const uint8_t *src, size_t n, ur_buf *out, ur_err *err)
{
    return ur_zarr_codec_zstd__encode(src, n, b->level, b->checksum, out, err);
}

/* ---- streaming decoder (zarr_stream.c) ----------------------------------------------------- */

struct ur_zarr_b2b_stream {
    ZSTD_DCtx *d;
    int frame_open; /* inside a frame (not yet complete) */
};

static int stream_open(ur_zarr_b2b_stream **out, const ur_zarr_b2b *b, ur_err *err)
{
    ur_zarr_b2b_stream *s = ur_calloc(1, sizeof *s);
    (void)b;
    if (s == NULL) {
        return ur_err_oom(err);
    }
    s->d = new_dctx();
    if (s->d == NULL) {
        ur_free(s);
        return ur_err_oom(err);
    }
    *out = s;
    return UR_OK;
}

/* A frame that declares more than the chunk is damage: say so before decoding it. */
static int stream_head(const uint8_t *p, size_t n, size_t total, ur_err *err)
{
    unsigned long long fcs = ZSTD_getFrameContentSize(p, n);
    if (fcs != ZSTD_CONTENTSIZE_UNKNOWN && fcs != ZSTD_CONTENTSIZE_ERROR && fcs > total) {
        return ur_err_set(err, UR_ECORRUPT, "zstd: decoded data larger than %zu bytes", total);
    }
    return UR_OK;
}

static int stream_step(ur_zarr_b2b_stream *s, ur_zarr_b2b_io *io, ur_err *err)
{
    ZSTD_outBuffer ob = {io->out, io->out_n, 0};
    ZSTD_inBuffer ib = {io->in, io->in_n, 0};
    size_t r = ZSTD_decompressStream(s->d, &ob, &ib);
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation) {
            return ur_err_oom(err);
        }
        return ur_err_set(err, UR_ECORRUPT, "zstd: %s", ZSTD_getErrorName(r));
    }
    io->in_used = ib.pos;
    io->made = ob.pos;
    io->ended = s->frame_open && r == 0;
    s->frame_open = r != 0;
    return UR_OK;
}

static int stream_done(const ur_zarr_b2b_stream *s)
{
    return !s->frame_open;
}

static void stream_close(ur_zarr_b2b_stream *s)
{
    if (s != NULL) {
        ZSTD_freeDCtx(s->d);
        ur_free(s);
    }
}

const ur_zarr_b2b_codec ur_zarr_codec_zstd__entry = {
    .kind = UR_ZARR_B2B_ZSTD,
    .name = "zstd",
    .v3_name = "zstd",
    .v2_id = "zstd",
    .has_level = 1,
    .has_checksum = 1,
    .level_v3 = UR_ZARR_ZSTD_DEFAULT_LEVEL_V3,
    .level_v2 = UR_ZARR_ZSTD_DEFAULT_LEVEL_V2,
    .level_min = -131072,
    .level_max = 22,
    .decode = decode,
    .encode = encode,
    .decode_progressive = decode_progressive,
    .stream_open = stream_open,
    .stream_head = stream_head,
    .stream_step = stream_step,
    .stream_done = stream_done,
    .stream_close = stream_close,
};
