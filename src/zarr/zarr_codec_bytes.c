/* zarr3 "bytes" codec (and zarr2's dtype byte order): elements are stored as their
 * little- or big-endian bytes, in the chunk's (possibly transposed) C order. In memory
 * unroll always holds little-endian, so big-endian data is swapped in place. Complex
 * numbers swap each of their two halves. */
#include "zarr_impl.h"

void ur_zarr_codec_bytes__swap(uint8_t *p, size_t n, size_t itemsize, int is_complex)
{
    size_t w = is_complex ? itemsize / 2 : itemsize;

    if (w <= 1) {
        return;
    }
    for (size_t off = 0; off + w <= n; off += w) {
        for (size_t i = 0; i < w / 2; i++) {
            uint8_t t = p[off + i];
            p[off + i] = p[off + w - 1 - i];
            p[off + w - 1 - i] = t;
        }
    }
}
