/* Test-only references for the tensor layer, written independently of src/tensor/:
 * - nearest bfloat16 of a double by binary search over the ordered bfloat16 magnitudes
 *   (no bit tricks), ties to the even pattern, overflow to Inf as IEEE rounding defines it;
 * - a seeded PRNG and random strided layouts over guarded buffers;
 * - a naive index-by-index copy. */
#ifndef UNROLL_TEST_TENSOR_REF_H
#define UNROLL_TEST_TENSOR_REF_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unroll/tensor.h"

/* --- reference casts --------------------------------------------------------------------- */

/* Value of a positive bfloat16 magnitude pattern 0..0x7f80; 0x7f80 stands for 2^128, the
 * value the rounding boundary to Inf is measured against. */
static inline double ref_bf16_mag(unsigned k)
{
    unsigned e = k >> 7, m = k & 0x7f;

    if (e == 0) {
        return ldexp((double)m, -133);
    }
    return ldexp((double)(128 + m), (int)e - 134);
}

/* Nearest bfloat16 to v. NaN -> quiet NaN of v's sign (0x7fc0 | sign). */
static inline uint16_t ref_double_to_bf16(double v)
{
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    unsigned lo = 0, hi = 0x7f80, k;
    double dl, dh;

    if (isnan(v)) {
        return (uint16_t)(sign | 0x7fc0);
    }
    if (isinf(v)) {
        return (uint16_t)(sign | 0x7f80);
    }
    /* Largest k in [0, 0x7f80] with mag(k) <= a. */
    while (lo < hi) {
        unsigned mid = (lo + hi + 1) / 2;
        if (ref_bf16_mag(mid) <= a) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    k = lo;
    if (ref_bf16_mag(k) == a || k == 0x7f80) {
        return (uint16_t)(sign | k);
    }
    dl = a - ref_bf16_mag(k);
    dh = ref_bf16_mag(k + 1) - a;
    if (dh < dl || (dh == dl && (k & 1))) {
        k++;
    }
    return (uint16_t)(sign | k);
}

static inline double ref_f32_value(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return (double)f;
}

static inline uint16_t ref_f32_to_bf16(uint32_t u)
{
    return ref_double_to_bf16(ref_f32_value(u));
}

/* float16 decoded by its fields. */
static inline double ref_f16_value(uint16_t h)
{
    unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double s = (h & 0x8000) ? -1.0 : 1.0;

    if (e == 31) {
        return m ? copysign((double)NAN, s) : s * HUGE_VAL;
    }
    if (e == 0) {
        return s * ldexp((double)m, -24);
    }
    return s * ldexp((double)(1024 + m), (int)e - 25);
}

static inline uint16_t ref_f16_to_bf16(uint16_t h)
{
    return ref_double_to_bf16(ref_f16_value(h));
}

/* JAX's float64 -> bfloat16: through float32 (round to nearest even, subnormals kept). */
static inline uint16_t ref_f64_to_bf16(uint64_t b)
{
    double d;
    memcpy(&d, &b, sizeof d);
    if (isnan(d)) {
        return signbit(d) ? 0xffc0 : 0x7fc0;
    }
    return ref_double_to_bf16((double)(float)d);
}

/* --- PRNG ------------------------------------------------------------------------------- */

typedef struct {
    uint64_t s;
} ref_rng;

static inline uint64_t ref_next(ref_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static inline uint64_t ref_below(ref_rng *r, uint64_t n)
{
    return n ? ref_next(r) % n : 0;
}

/* Seed from UR_TEST_SEED, else the given default. */
static inline uint64_t ref_seed(uint64_t dflt)
{
    const char *s = getenv("UR_TEST_SEED");
    return s ? strtoull(s, NULL, 0) : dflt;
}

/* --- layouts ---------------------------------------------------------------------------- */

#define REF_GUARD 0xa5

/* A view over its own buffer, with padding between and around the elements. */
typedef struct {
    uint8_t *buf;
    size_t size;
    ur_tensor_view v;
} ref_layout;

enum {
    REF_DENSE = 0, /* dense C order */
    REF_RANDOM = 1 /* permuted dims, padding, negative strides, odd byte offset */
};

/* Element offsets (from v.data, in elements) of a multi-index. */
static inline int64_t ref_offset(const ur_tensor_view *v, const uint64_t *idx)
{
    int64_t off = 0;
    for (int d = 0; d < v->rank; d++) {
        off += (int64_t)idx[d] * v->strides[d];
    }
    return off;
}

/* Build a layout of the given dtype and shape; broadcast (zero strides) only if allowed. */
static inline void ref_layout_make(ref_layout *l, ref_rng *r, ur_dtype dt, int rank,
                                   const uint64_t *shape, int mode, int allow_broadcast)
{
    size_t esz = ur_dtype_size(dt);
    int perm[UR_MAX_RANK];
    uint64_t run = 1, lead, trail, base = 0;
    int64_t strides[UR_MAX_RANK];
    size_t bytes_off;

    for (int d = 0; d < rank; d++) {
        perm[d] = d;
    }
    if (mode == REF_RANDOM) {
        for (int d = rank - 1; d > 0; d--) {
            int j = (int)ref_below(r, (uint64_t)d + 1);
            int t = perm[d];
            perm[d] = perm[j];
            perm[j] = t;
        }
    }
    /* perm[rank-1] is the innermost dim in memory. */
    for (int i = rank - 1; i >= 0; i--) {
        int d = perm[i];
        uint64_t pad = mode == REF_RANDOM && ref_below(r, 2) ? ref_below(r, 3) : 0;
        uint64_t ext = (shape[d] ? shape[d] : 1) + pad;
        if (mode == REF_RANDOM && allow_broadcast && shape[d] > 1 && ref_below(r, 8) == 0) {
            strides[d] = 0;
            continue;
        }
        strides[d] = (int64_t)run;
        if (mode == REF_RANDOM && ref_below(r, 4) == 0) {
            strides[d] = -strides[d];
            base += (shape[d] ? shape[d] - 1 : 0) * run;
        }
        run *= ext;
    }
    lead = mode == REF_RANDOM ? ref_below(r, 4) : 0;
    trail = mode == REF_RANDOM ? ref_below(r, 4) : 0;
    bytes_off = mode == REF_RANDOM && ref_below(r, 4) == 0 ? 1 : 0; /* unaligned data */
    l->size = (size_t)(lead + run + trail) * esz + bytes_off;
    l->buf = malloc(l->size ? l->size : 1);
    memset(l->buf, REF_GUARD, l->size);
    memset(&l->v, 0, sizeof l->v);
    l->v.dtype = dt;
    l->v.rank = rank;
    for (int d = 0; d < rank; d++) {
        l->v.shape[d] = shape[d];
        l->v.strides[d] = strides[d];
    }
    l->v.data = l->buf + bytes_off + (size_t)(lead + base) * esz;
}

static inline void ref_layout_free(ref_layout *l)
{
    free(l->buf);
    l->buf = NULL;
}

static inline void ref_fill_random(ref_layout *l, ref_rng *r)
{
    for (size_t i = 0; i < l->size; i++) {
        l->buf[i] = (uint8_t)ref_next(r);
    }
}

static inline uint64_t ref_numel(int rank, const uint64_t *shape)
{
    uint64_t n = 1;
    for (int d = 0; d < rank; d++) {
        n *= shape[d];
    }
    return n;
}

/* Advance a multi-index in C order; 0 when it wrapped around. */
static inline int ref_next_index(uint64_t *idx, int rank, const uint64_t *shape)
{
    for (int d = rank - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) {
            return 1;
        }
        idx[d] = 0;
    }
    return 0;
}

/* Convert one element with the reference casts above, or a byte copy. */
static inline void ref_cast_one(uint8_t *dst, ur_dtype ddt, const uint8_t *src, ur_dtype sdt)
{
    if (ddt == sdt) {
        memcpy(dst, src, ur_dtype_size(sdt));
        return;
    }
    if (sdt == UR_DT_FLOAT32) {
        uint32_t u;
        uint16_t h;
        memcpy(&u, src, 4);
        h = ref_f32_to_bf16(u);
        memcpy(dst, &h, 2);
    } else if (sdt == UR_DT_FLOAT64) {
        uint64_t u;
        uint16_t h;
        memcpy(&u, src, 8);
        h = ref_f64_to_bf16(u);
        memcpy(dst, &h, 2);
    } else {
        uint16_t u, h;
        memcpy(&u, src, 2);
        h = ref_f16_to_bf16(u);
        memcpy(dst, &h, 2);
    }
}

/* Naive copy: every index of the shape, offsets from the strides. */
static inline void ref_copy(const ur_tensor_view *dst, const ur_tensor_view *src)
{
    uint64_t idx[UR_MAX_RANK] = {0};
    size_t ds = ur_dtype_size(dst->dtype), ss = ur_dtype_size(src->dtype);

    if (ref_numel(src->rank, src->shape) == 0) {
        return;
    }
    do {
        ref_cast_one((uint8_t *)dst->data + ref_offset(dst, idx) * (int64_t)ds, dst->dtype,
                     (const uint8_t *)src->data + ref_offset(src, idx) * (int64_t)ss, src->dtype);
    } while (ref_next_index(idx, src->rank, src->shape));
}

/* The dtype pairs the kernels support. */
static const ur_dtype ref_cast_srcs[] = {UR_DT_FLOAT32, UR_DT_FLOAT64, UR_DT_FLOAT16};

#endif
