/* A codec chain over one chunk: [transpose] -> bytes (endianness) -> bytes->bytes codecs
 * (each found in the codec table, zarr_codec_table.c), encoded in list order and decoded in
 * reverse. The sharding
 * codec is handled in zarr_codec_sharding.c and zarr_array.c; its inner and index chains
 * are chains of this kind.
 *
 * Decoding writes exactly the chunk's bytes: every decompressor is capped at the size the
 * next stage needs (known exactly when only crc32c lies between it and the bytes codec),
 * and a chunk whose decoded size differs from the metadata is UR_ECORRUPT. */
#include "zarr_impl.h"

#include "unroll/alloc.h"
#include "unroll/ckd.h"

#include <string.h>

/* The table entry of every codec of the chain, or UR_EUNSUPPORTED. */
static int codecs_of(const ur_zarr_chain *c, const ur_zarr_b2b_codec **k, ur_err *err)
{
    for (int i = 0; i < c->n_b2b; i++) {
        int rc = ur_zarr_codec__b2b_get(&c->b2b[i], &k[i], err);
        if (rc != UR_OK) {
            return rc;
        }
    }
    return UR_OK;
}

int ur_zarr_codec__decode(const ur_zarr_chain *c, int rank, const uint64_t *shape, size_t itemsize,
                          const uint8_t *src, size_t n, uint8_t *dst, size_t dst_size, ur_err *err)
{
    const uint8_t *cur = src;
    size_t cur_n = n, known = dst_size, len;
    int known_ok = 1, rc = UR_OK;
    uint8_t *owned = NULL;

    /* known: the exact size stage i must decode to, while it is known. */
    size_t want[UR_ZARR_MAX_B2B];
    int want_ok[UR_ZARR_MAX_B2B];
    const ur_zarr_b2b_codec *k[UR_ZARR_MAX_B2B];
    rc = codecs_of(c, k, err);
    if (rc != UR_OK) {
        return rc;
    }
    for (int i = 0; i < c->n_b2b; i++) {
        want[i] = known;
        want_ok[i] = known_ok;
        if (k[i]->trailer > 0) {
            known_ok = known_ok && !ur_ckd_add(&known, known, k[i]->trailer);
        } else {
            known_ok = 0;
        }
    }
    for (int i = c->n_b2b - 1; i >= 0; i--) {
        const ur_zarr_b2b *b = &c->b2b[i];
        if (k[i]->trailer > 0) {
            rc = k[i]->strip(cur, cur_n, &cur_n, err);
            if (rc < 0) {
                goto out;
            }
            continue;
        }
        size_t cap = want[i];
        if (!want_ok[i] && (ur_ckd_mul(&cap, dst_size, 2) || ur_ckd_add(&cap, cap, 1 << 20))) {
            rc = ur_err_set(err, UR_ECORRUPT, "chunk too large");
            goto out;
        }
        uint8_t *next;
        int direct = i == 0 && !c->has_transpose && want_ok[i];
        if (direct) {
            next = dst;
        } else {
            next = ur_malloc(cap);
            if (next == NULL) {
                rc = ur_err_oom(err);
                goto out;
            }
        }
        rc = k[i]->decode(b, cur, cur_n, next, cap, &len, err);
        if (rc < 0) {
            if (!direct) {
                ur_free(next);
            }
            goto out;
        }
        ur_free(owned);
        owned = direct ? NULL : next;
        cur = next;
        cur_n = len;
        if (want_ok[i] && len != want[i]) {
            break; /* reported below, or by the next stage */
        }
    }
    if (cur_n != dst_size) {
        rc = ur_err_set(err, UR_ECORRUPT, "decoded chunk is %zu bytes, expected %zu", cur_n,
                        dst_size);
        goto out;
    }
    if (cur != dst) {
        if (c->has_transpose) {
            ur_zarr_codec_transpose__decode(dst, cur, rank, shape, c->perm, itemsize);
        } else {
            memcpy(dst, cur, dst_size);
        }
    }
    if (c->big_endian) {
        ur_zarr_codec_bytes__swap(dst, dst_size, itemsize, c->is_complex);
    }
out:
    ur_free(owned);
    return rc;
}

int ur_zarr_codec__encode(const ur_zarr_chain *c, int rank, const uint64_t *shape, size_t itemsize,
                          const uint8_t *src, size_t n, ur_buf *out, ur_err *err)
{
    ur_buf a, b;
    const uint8_t *cur = src;
    size_t cur_n = n;
    const ur_zarr_b2b_codec *k[UR_ZARR_MAX_B2B];
    int rc = codecs_of(c, k, err);

    if (rc != UR_OK) {
        return rc;
    }
    ur_buf_init(&a, 0);
    ur_buf_init(&b, 0);
    if (c->has_transpose || c->big_endian) {
        rc = ur_buf_reserve(&a, n, err);
        if (rc < 0) {
            goto out;
        }
        if (c->has_transpose) {
            ur_zarr_codec_transpose__encode(a.data, src, rank, shape, c->perm, itemsize);
        } else {
            memcpy(a.data, src, n);
        }
        a.len = n;
        if (c->big_endian) {
            ur_zarr_codec_bytes__swap(a.data, n, itemsize, c->is_complex);
        }
        cur = a.data;
    }
    for (int i = 0; i < c->n_b2b; i++) {
        const ur_zarr_b2b *x = &c->b2b[i];
        ur_buf *dst = i == c->n_b2b - 1 ? out : (cur == a.data ? &b : &a);
        if (dst != out) {
            ur_buf_reset(dst);
        }
        rc = k[i]->encode(x, cur, cur_n, dst, err);
        if (rc < 0) {
            goto out;
        }
        cur = dst->data;
        cur_n = dst->len;
    }
    if (c->n_b2b == 0) {
        rc = ur_buf_append(out, cur, cur_n, err);
    }
out:
    ur_buf_dispose(&a);
    ur_buf_dispose(&b);
    return rc;
}

int ur_zarr_codec__fixed_size(const ur_zarr_chain *c, size_t decoded, size_t *out, ur_err *err)
{
    size_t n = decoded;

    for (int i = 0; i < c->n_b2b; i++) {
        const ur_zarr_b2b_codec *k = ur_zarr_codec__b2b(c->b2b[i].kind);
        if (k == NULL || k->trailer == 0) {
            return ur_err_set(err, UR_EUNSUPPORTED,
                              "sharding index codecs must have a fixed size (bytes, crc32c)");
        }
        if (ur_ckd_add(&n, n, k->trailer)) {
            return ur_err_set(err, UR_ECORRUPT, "shard index too large");
        }
    }
    *out = n;
    return UR_OK;
}

/* Compressed input handed to the zstd decoder per step: small enough that the bytes it
 * decodes to (a few times more) are still in the caches when the caller reads them. */
#define PROGRESS_STEP ((size_t)256 << 10)

int ur_zarr_codec__decode_progressive(const ur_zarr_chain *c, int rank, const uint64_t *shape,
                                      size_t itemsize, const uint8_t *src, size_t n, uint8_t *dst,
                                      size_t dst_size, ur_zarr_ready_fn ready, void *ctx,
                                      ur_err *err)
{
    const ur_zarr_b2b_codec *k = c->n_b2b == 1 ? ur_zarr_codec__b2b(c->b2b[0].kind) : NULL;
    int rc = 1;
    if (k != NULL && k->decode_progressive != NULL && !c->has_transpose && !c->big_endian) {
        rc = k->decode_progressive(src, n, dst, dst_size, PROGRESS_STEP, ready, ctx, err);
    }
    if (rc == 1) {
        rc = ur_zarr_codec__decode(c, rank, shape, itemsize, src, n, dst, dst_size, err);
    }
    return rc == UR_OK ? ready(ctx, dst_size, err) : rc;
}
