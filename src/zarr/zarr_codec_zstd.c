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

int ur_zarr_codec_zstd__decode(const uint8_t *src, size_t n, uint8_t *dst, size_t cap,
                               size_t *len_out, ur_err *err)
{
    ZSTD_DCtx *d = ZSTD_createDCtx_advanced(mem);
    size_t r;

    if (d == NULL) {
        return ur_err_oom(err);
    }
    r = ZSTD_decompressDCtx(d, dst, cap, src, n);
    ZSTD_freeDCtx(d);
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

int ur_zarr_codec_zstd__encode(const uint8_t *src, size_t n, int level, int checksum,
                               ur_buf *out, ur_err *err)
{
    ZSTD_CCtx *c;
    size_t bound = ZSTD_compressBound(n), r;
    int rc;

    rc = ur_buf_reserve(out, bound, err);
    if (rc < 0) {
        return rc;
    }
    c = ZSTD_createCCtx_advanced(mem);
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
    ZSTD_freeCCtx(c);
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation) {
            return ur_err_oom(err);
        }
        return ur_err_set(err, UR_EINTERNAL, "zstd compression failed: %s", ZSTD_getErrorName(r));
    }
    out->len += r;
    return UR_OK;
}
