/* zarr3 "transpose" codec (and zarr2 order "F"): the encoded array's axis j is the decoded
 * array's axis perm[j], so encoded shape[j] = shape[perm[j]]; both are dense C order.
 * zarr2 order F is perm = (rank-1, ..., 0). */
#include "zarr_impl.h"

#include <string.h>

/* Walk the encoded array in C order; `off` tracks the matching decoded offset. */
static void walk(uint8_t *dst, const uint8_t *src, int rank, const uint64_t *shape,
                 const int *perm, size_t itemsize, int to_encoded)
{
    uint64_t dstride[UR_MAX_RANK + 1], estride[UR_MAX_RANK + 1], eshape[UR_MAX_RANK + 1];
    uint64_t pos[UR_MAX_RANK + 1];
    size_t off = 0, eoff = 0, total = 1;

    for (int d = 0; d < rank; d++) {
        total *= (size_t)shape[d];
    }
    if (total == 0) {
        return;
    }
    if (rank == 0) {
        memcpy(dst, src, itemsize);
        return;
    }
    dstride[rank - 1] = itemsize;
    for (int d = rank - 1; d > 0; d--) {
        dstride[d - 1] = dstride[d] * shape[d];
    }
    for (int j = 0; j < rank; j++) {
        eshape[j] = shape[perm[j]];
        estride[j] = dstride[perm[j]];
        pos[j] = 0;
    }
    for (size_t k = 0; k < total; k++) {
        if (to_encoded) {
            memcpy(dst + eoff, src + off, itemsize);
        } else {
            memcpy(dst + off, src + eoff, itemsize);
        }
        eoff += itemsize;
        for (int j = rank - 1; j >= 0; j--) {
            pos[j]++;
            off += (size_t)estride[j];
            if (pos[j] < eshape[j]) {
                break;
            }
            off -= (size_t)(estride[j] * eshape[j]);
            pos[j] = 0;
        }
    }
}

void ur_zarr_codec_transpose__encode(uint8_t *dst, const uint8_t *src, int rank,
                                     const uint64_t *shape, const int *perm, size_t itemsize)
{
    walk(dst, src, rank, shape, perm, itemsize, 1);
}

void ur_zarr_codec_transpose__decode(uint8_t *dst, const uint8_t *src, int rank,
                                     const uint64_t *shape, const int *perm, size_t itemsize)
{
    walk(dst, src, rank, shape, perm, itemsize, 0);
}
