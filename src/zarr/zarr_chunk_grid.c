/* The regular chunk grid: chunk keys and box copies between dense C-order arrays.
 *
 * Keys (relative to the array's prefix), for grid index (i, j):
 *   zarr3 "default" encoding:  "c/i/j" (separator "/" or "."), rank 0: "c"
 *   zarr2 and zarr3 "v2":      "i.j"   (separator "." or "/"), rank 0: "0" */
#include "zarr_impl.h"

#include <stdio.h>
#include <string.h>

int ur_zarr_chunk_grid__key(const ur_zarr_meta *m, const uint64_t *idx, char *key, size_t key_size,
                            ur_err *err)
{
    size_t pos = 0;
    int n;

    if (key_size == 0) {
        return ur_err_set(err, UR_EINVAL, "chunk key buffer is empty");
    }
    if (!m->v2_keys) {
        n = snprintf(key, key_size, "c");
        pos = (size_t)n;
    } else if (m->rank == 0) {
        n = snprintf(key, key_size, "0");
        pos = (size_t)n;
    }
    for (int d = 0; d < m->rank && pos < key_size; d++) {
        int first = d == 0 && m->v2_keys;
        n = snprintf(key + pos, key_size - pos, "%s%llu", first ? "" : (m->sep == '.' ? "." : "/"),
                     (unsigned long long)idx[d]);
        if (n < 0) {
            break;
        }
        pos += (size_t)n;
    }
    if (pos >= key_size) {
        return ur_err_set(err, UR_EINVAL, "chunk key longer than %zu bytes", key_size);
    }
    return UR_OK;
}

void ur_zarr_chunk_grid__fill(uint8_t *dst, uint64_t n, const uint8_t *fill, size_t itemsize)
{
    size_t i, total = (size_t)n * itemsize;
    int zero = 1;

    for (i = 0; i < itemsize; i++) {
        zero &= fill[i] == 0;
    }
    if (zero || total == 0) {
        memset(dst, 0, total);
        return;
    }
    memcpy(dst, fill, itemsize);
    /* Doubling copies: log2(n) memcpy calls. */
    for (i = itemsize; i < total;) {
        size_t c = i <= total - i ? i : total - i;
        memcpy(dst + i, dst, c);
        i += c;
    }
}

void ur_zarr_chunk_grid__copy_box(uint8_t *dst, const uint64_t *dst_shape,
                                  const uint64_t *dst_start, const uint8_t *src,
                                  const uint64_t *src_shape, const uint64_t *src_start,
                                  const uint64_t *count, int rank, size_t itemsize)
{
    uint64_t dst_stride[UR_MAX_RANK], src_stride[UR_MAX_RANK], pos[UR_MAX_RANK];
    size_t doff = 0, soff = 0, row;
    int inner;

    if (rank == 0) {
        memcpy(dst, src, itemsize);
        return;
    }
    for (int d = 0; d < rank; d++) {
        if (count[d] == 0) {
            return;
        }
    }
    dst_stride[rank - 1] = itemsize;
    src_stride[rank - 1] = itemsize;
    for (int d = rank - 1; d > 0; d--) {
        dst_stride[d - 1] = dst_stride[d] * dst_shape[d];
        src_stride[d - 1] = src_stride[d] * src_shape[d];
    }
    /* Merge trailing axes that are whole in both arrays into one contiguous row. */
    inner = rank - 1;
    row = (size_t)count[inner] * itemsize;
    while (inner > 0 && count[inner] == dst_shape[inner] && count[inner] == src_shape[inner] &&
           dst_start[inner] == 0 && src_start[inner] == 0) {
        inner--;
        row *= (size_t)count[inner];
    }
    for (int d = 0; d < rank; d++) {
        doff += (size_t)(dst_start[d] * dst_stride[d]);
        soff += (size_t)(src_start[d] * src_stride[d]);
        pos[d] = 0;
    }
    for (;;) {
        memcpy(dst + doff, src + soff, row);
        int d = inner - 1;
        for (; d >= 0; d--) {
            pos[d]++;
            doff += (size_t)dst_stride[d];
            soff += (size_t)src_stride[d];
            if (pos[d] < count[d]) {
                break;
            }
            doff -= (size_t)(dst_stride[d] * count[d]);
            soff -= (size_t)(src_stride[d] * count[d]);
            pos[d] = 0;
        }
        if (d < 0) {
            return;
        }
    }
}

void ur_zarr_chunk_grid__fill_box(uint8_t *dst, const uint64_t *shape, const uint64_t *start,
                                  const uint64_t *count, int rank, const uint8_t *fill,
                                  size_t itemsize)
{
    uint64_t stride[UR_MAX_RANK], pos[UR_MAX_RANK];
    size_t off = 0;

    if (rank == 0) {
        memcpy(dst, fill, itemsize);
        return;
    }
    for (int d = 0; d < rank; d++) {
        if (count[d] == 0) {
            return;
        }
    }
    stride[rank - 1] = itemsize;
    for (int d = rank - 1; d > 0; d--) {
        stride[d - 1] = stride[d] * shape[d];
    }
    for (int d = 0; d < rank; d++) {
        off += (size_t)(start[d] * stride[d]);
        pos[d] = 0;
    }
    for (;;) {
        ur_zarr_chunk_grid__fill(dst + off, count[rank - 1], fill, itemsize);
        int d = rank - 2;
        for (; d >= 0; d--) {
            pos[d]++;
            off += (size_t)stride[d];
            if (pos[d] < count[d]) {
                break;
            }
            off -= (size_t)(stride[d] * count[d]);
            pos[d] = 0;
        }
        if (d < 0) {
            return;
        }
    }
}
