/* The work split of a multi-process run (include/unroll/exec.h, ur_exec_share_range).
 *
 * Contiguous runs rather than, say, a greedy bin packing of tensors: a share then reads a
 * few whole tensors and the ends of two, its output keys are a contiguous key range of the
 * plan, and one tensor larger than total / count (an embedding) is still cut, so the balance
 * is bounded by the largest chunk rather than the largest tensor. */
#include "unroll/exec.h"

__extension__ typedef unsigned __int128 u128; /* B * count: up to 2^64 * 2^31 */

/* The first global chunk index whose start byte B has (before + B) * count >= target
 * (count * total bytes fit in 128 bits). */
static uint64_t first_at_least(const ur_exec_chunks *g, size_t n, uint64_t count, uint64_t before,
                               u128 target)
{
    uint64_t chunk0 = 0, byte0 = before;
    for (size_t i = 0; i < n; i++) {
        u128 start = (u128)byte0 * count;
        u128 step = (u128)g[i].chunk_bytes * count;
        if (g[i].n > 0) {
            if (start >= target) {
                return chunk0;
            }
            if (step > 0) {
                u128 k = (target - start + step - 1) / step;
                if (k < g[i].n) {
                    return chunk0 + (uint64_t)k;
                }
            }
        }
        chunk0 += g[i].n;
        byte0 += g[i].n * g[i].chunk_bytes;
    }
    return chunk0;
}

void ur_exec_share_range_at(const ur_exec_chunks *g, size_t n, int count, int index,
                            uint64_t before, uint64_t total, uint64_t *lo, uint64_t *hi)
{
    uint64_t chunks = 0;
    for (size_t i = 0; i < n; i++) {
        chunks += g[i].n;
    }
    if (count <= 1) {
        *lo = 0;
        *hi = chunks;
        return;
    }
    /* chunk with start B belongs to floor((before + B) * count / total): share i starts at
     * the first chunk with (before + B) * count >= i * total; the first and last shares take
     * the ends whatever the numbers say, so the shares partition the chunks */
    *lo = index == 0 ? 0 : first_at_least(g, n, (uint64_t)count, before, (u128)index * total);
    *hi = index + 1 >= count
              ? chunks
              : first_at_least(g, n, (uint64_t)count, before, (u128)(index + 1) * total);
    if (total == 0) { /* only empty chunks: all to the first process */
        *lo = index == 0 ? 0 : chunks;
        *hi = chunks;
    }
}

void ur_exec_share_range(const ur_exec_chunks *g, size_t n, int count, int index, uint64_t *lo,
                         uint64_t *hi)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        total += g[i].n * g[i].chunk_bytes;
    }
    ur_exec_share_range_at(g, n, count, index, 0, total, lo, hi);
}
