/* Element conversions to bfloat16 and the per-dtype-pair run kernels.
 *
 * bfloat16 is the top half of a float32: sign, 8 exponent bits, 7 mantissa bits. Rounding a
 * float32 u to nearest even is (u + 0x7fff + lsb) >> 16, where lsb is bit 16 of u: the carry
 * out of the low half rounds up, ties go to the even result, a carry into the exponent is
 * the correct next binade, and the largest finite values round up into +-Inf (0x7f80) as
 * IEEE overflow requires. NaNs are tested first: ml_dtypes and XLA return the quiet NaN of
 * the same sign, 0x7fc0 | sign, whatever the payload (checked against jax 0.10.2 /
 * ml_dtypes 0.7.0, tests/interop/test_tensor_cast.py).
 *
 * float16 -> bfloat16 widens to float32 exactly first (every float16 is a float32), then
 * rounds as above. float64 -> bfloat16 rounds to float32 first (the C conversion: nearest
 * even, subnormals kept) and then to bfloat16, as JAX does (see unroll/tensor.h).
 *
 * The loops are written so gcc/clang vectorize them (branch-free selects, memcpy loads that
 * allow any alignment); this file is compiled with -O3 outside Debug builds. */
#include "unroll/tensor.h"

#include <string.h>

#include "unroll/ckd.h"

#include "tensor_impl.h"

/* On x86-64 the dense cast runs are also compiled for AVX2 and picked at load time (an ifunc):
 * the baseline SSE2 has no 32 -> 16 bit pack, which halves the throughput of these loops. */
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) &&     \
    !defined(UR_TENSOR_NO_CLONES)
#define UR_VEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define UR_VEC_CLONES
#endif

static inline uint16_t f32_bf16(uint32_t u)
{
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t qnan = ((u >> 16) & 0x8000u) | 0x7fc0u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? qnan : rounded);
}

/* Exact float16 -> float32 bits. Normal halves and Inf/NaN only need their exponent rebiased
 * (+112, or to 255); a subnormal half m * 2^-24 is made by converting the integer m to float
 * and scaling by 2^-24, both exact and free of subnormal operands (which cost a microcode
 * assist per element on x86). */
static inline uint32_t f16_f32(uint32_t h)
{
    uint32_t e = h & 0x7c00u;
    uint32_t is_sub = 0u - (uint32_t)(e == 0);       /* all ones or zero: masks, not */
    uint32_t is_top = 0u - (uint32_t)(e == 0x7c00u); /* branches, so the loop vectorizes */
    uint32_t norm = ((h & 0x7fffu) << 13) + 0x38000000u + (is_top & 0x38000000u);
    float sub = (float)(int32_t)(h & 0x3ffu) * 0x1p-24f;
    uint32_t sub_bits;

    memcpy(&sub_bits, &sub, sizeof sub_bits);
    return (sub_bits & is_sub) | (norm & ~is_sub) | ((h & 0x8000u) << 16);
}

static inline uint32_t f64_f32(uint64_t b)
{
    double d;
    float f;
    uint32_t r;

    memcpy(&d, &b, sizeof d);
    f = (float)d;
    memcpy(&r, &f, sizeof r);
    return r;
}

uint16_t ur_tensor_cast_f32_to_bf16(uint32_t f32_bits)
{
    return f32_bf16(f32_bits);
}

uint16_t ur_tensor_cast_f64_to_bf16(uint64_t f64_bits)
{
    return f32_bf16(f64_f32(f64_bits));
}

uint16_t ur_tensor_cast_f16_to_bf16(uint16_t f16_bits)
{
    return f32_bf16(f16_f32(f16_bits));
}

/* One dense and one strided run function per conversion. `restrict`: dst and src never
 * overlap (documented in tensor.h), which lets the compiler vectorize the dense loops. */
#define UR_CAST_RUNS(name, stype, ssz, conv)                                                      \
    UR_VEC_CLONES static void name##_dense(char *restrict dst, ptrdiff_t dstep,                   \
                                           const char *restrict src, ptrdiff_t sstep, size_t n)   \
    {                                                                                             \
        (void)dstep;                                                                              \
        (void)sstep;                                                                              \
        for (size_t i = 0; i < n; i++) {                                                          \
            stype v;                                                                              \
            uint16_t h;                                                                           \
            memcpy(&v, src + i * (ssz), sizeof v);                                                \
            h = conv(v);                                                                          \
            memcpy(dst + i * 2, &h, sizeof h);                                                    \
        }                                                                                         \
    }                                                                                             \
    static void name##_strided(char *restrict dst, ptrdiff_t dstep, const char *restrict src,     \
                               ptrdiff_t sstep, size_t n)                                         \
    {                                                                                             \
        for (size_t i = 0; i < n; i++) {                                                          \
            stype v;                                                                              \
            uint16_t h;                                                                           \
            memcpy(&v, src, sizeof v);                                                            \
            h = conv(v);                                                                          \
            memcpy(dst, &h, sizeof h);                                                            \
            src += sstep;                                                                         \
            dst += dstep;                                                                         \
        }                                                                                         \
    }

static inline uint16_t conv_f32(uint32_t v)
{
    return f32_bf16(v);
}

static inline uint16_t conv_f64(uint64_t v)
{
    return f32_bf16(f64_f32(v));
}

static inline uint16_t conv_f16(uint16_t v)
{
    return f32_bf16(f16_f32(v));
}

UR_CAST_RUNS(f32_bf16, uint32_t, 4, conv_f32)
UR_CAST_RUNS(f64_bf16, uint64_t, 8, conv_f64)
UR_CAST_RUNS(f16_bf16, uint16_t, 2, conv_f16)

/* float8 -> bfloat16 is exact: every float8 value (at most 4 mantissa bits, exponents within
 * 2^-17 .. 2^15, and 2^-127 .. 2^127 for e8m0) is a bfloat16 (2^-127 as a subnormal), so the
 * bits are rebuilt directly, no rounding. Formats as ml_dtypes defines them (zarr_dtype.c):
 * IEEE-like ones have Inf and NaNs at the top exponent; "fn" only NaN = S.1111.111; "fnuz" one
 * NaN (0x80) and no -0; e8m0fnu is a bare exponent, 0xff = NaN. A NaN becomes the quiet NaN of
 * its sign, and the fnuz/e8m0 NaN, which has no sign, +NaN (0x7fc0): what JAX 0.10.2's
 * astype(bfloat16) gives for all 256 codes of each format (tests/interop/test_tensor_cast.py;
 * ml_dtypes' own numpy cast gives 0xffc0 for the fnuz NaN, JAX does not). */
typedef enum { F8_IEEE, F8_FN, F8_FNUZ } f8_kind;

static inline uint16_t f8_bf16(uint8_t c, unsigned mbits, int bias, f8_kind kind)
{
    unsigned ebits = 7 - mbits;
    uint32_t sign = (uint32_t)(c & 0x80u) << 8;
    uint32_t emax = (1u << ebits) - 1;
    uint32_t e = ((uint32_t)c >> mbits) & emax;
    uint32_t m = c & ((1u << mbits) - 1);
    int exp = (int)e - bias;

    if (kind == F8_FNUZ && c == 0x80) {
        return 0x7fc0;
    }
    if ((kind == F8_FN && (c & 0x7fu) == 0x7fu) || (kind == F8_IEEE && e == emax && m != 0)) {
        return (uint16_t)(sign | 0x7fc0u);
    }
    if (kind == F8_IEEE && e == emax) {
        return (uint16_t)(sign | 0x7f80u);
    }
    if (e == 0) {
        if (m == 0) {
            return (uint16_t)sign;
        }
        /* subnormal m * 2^(1 - bias - mbits): shift the leading one into the hidden bit */
        exp = 1 - bias;
        while ((m & (1u << mbits)) == 0) {
            m <<= 1;
            exp--;
        }
        m &= (1u << mbits) - 1;
    }
    return (uint16_t)(sign | (uint32_t)(exp + 127) << 7 | m << (7 - mbits));
}

static inline uint16_t conv_e3m4(uint8_t v)
{
    return f8_bf16(v, 4, 3, F8_IEEE);
}

static inline uint16_t conv_e4m3(uint8_t v)
{
    return f8_bf16(v, 3, 7, F8_IEEE);
}

static inline uint16_t conv_e4m3fn(uint8_t v)
{
    return f8_bf16(v, 3, 7, F8_FN);
}

static inline uint16_t conv_e4m3fnuz(uint8_t v)
{
    return f8_bf16(v, 3, 8, F8_FNUZ);
}

static inline uint16_t conv_e4m3b11fnuz(uint8_t v)
{
    return f8_bf16(v, 3, 11, F8_FNUZ);
}

static inline uint16_t conv_e5m2(uint8_t v)
{
    return f8_bf16(v, 2, 15, F8_IEEE);
}

static inline uint16_t conv_e5m2fnuz(uint8_t v)
{
    return f8_bf16(v, 2, 16, F8_FNUZ);
}

/* 2^(v - 127): the bfloat16 exponent field is v itself; 2^-127 is the subnormal 0x0040. */
static inline uint16_t conv_e8m0fnu(uint8_t v)
{
    if (v == 0xff) {
        return 0x7fc0;
    }
    return v == 0 ? (uint16_t)0x0040 : (uint16_t)((unsigned)v << 7);
}

UR_CAST_RUNS(e3m4_bf16, uint8_t, 1, conv_e3m4)
UR_CAST_RUNS(e4m3_bf16, uint8_t, 1, conv_e4m3)
UR_CAST_RUNS(e4m3fn_bf16, uint8_t, 1, conv_e4m3fn)
UR_CAST_RUNS(e4m3fnuz_bf16, uint8_t, 1, conv_e4m3fnuz)
UR_CAST_RUNS(e4m3b11fnuz_bf16, uint8_t, 1, conv_e4m3b11fnuz)
UR_CAST_RUNS(e5m2_bf16, uint8_t, 1, conv_e5m2)
UR_CAST_RUNS(e5m2fnuz_bf16, uint8_t, 1, conv_e5m2fnuz)
UR_CAST_RUNS(e8m0fnu_bf16, uint8_t, 1, conv_e8m0fnu)

/* The run pair converting `src` to bfloat16, or 0 when there is none. */
static int bf16_runs(ur_dtype src, ur_tensor__kernel *k)
{
#define UR_RUNS_CASE(dt, name)                                                                    \
    case dt:                                                                                      \
        k->dense = name##_dense;                                                                  \
        k->strided = name##_strided;                                                              \
        return 1;
    switch (src) {
        UR_RUNS_CASE(UR_DT_FLOAT32, f32_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT64, f64_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT16, f16_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E3M4, e3m4_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E4M3, e4m3_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E4M3FN, e4m3fn_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E4M3FNUZ, e4m3fnuz_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E4M3B11FNUZ, e4m3b11fnuz_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E5M2, e5m2_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E5M2FNUZ, e5m2fnuz_bf16)
        UR_RUNS_CASE(UR_DT_FLOAT8_E8M0FNU, e8m0fnu_bf16)
    default:
        return 0;
    }
#undef UR_RUNS_CASE
}

/* Identity: the dense run is a memcpy of n elements; the element size is known only at run
 * time, so it is passed through the step (the dense run's steps equal the element size). */
static void same_dense(char *restrict dst, ptrdiff_t dstep, const char *restrict src,
                       ptrdiff_t sstep, size_t n)
{
    (void)sstep;
    memcpy(dst, src, n * (size_t)dstep);
}

#define UR_SAME_STRIDED(name, sz)                                                                 \
    static void name(char *restrict dst, ptrdiff_t dstep, const char *restrict src,               \
                     ptrdiff_t sstep, size_t n)                                                   \
    {                                                                                             \
        for (size_t i = 0; i < n; i++) {                                                          \
            memcpy(dst, src, (sz));                                                               \
            src += sstep;                                                                         \
            dst += dstep;                                                                         \
        }                                                                                         \
    }

UR_SAME_STRIDED(same1_strided, 1)
UR_SAME_STRIDED(same2_strided, 2)
UR_SAME_STRIDED(same4_strided, 4)
UR_SAME_STRIDED(same8_strided, 8)
UR_SAME_STRIDED(same16_strided, 16)

/* bfloat16 -> float32: exact (the bits, shifted); what astype(float32) gives, NaN payloads kept.
 */
static void bf16_f32_dense(char *restrict dst, ptrdiff_t dstep, const char *restrict src,
                           ptrdiff_t sstep, size_t n)
{
    (void)dstep;
    (void)sstep;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        uint32_t f;
        memcpy(&h, src + 2 * i, 2);
        f = (uint32_t)h << 16;
        memcpy(dst + 4 * i, &f, 4);
    }
}

static void bf16_f32_strided(char *restrict dst, ptrdiff_t dstep, const char *restrict src,
                             ptrdiff_t sstep, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        uint32_t f;
        memcpy(&h, src, 2);
        f = (uint32_t)h << 16;
        memcpy(dst, &f, 4);
        src += sstep;
        dst += dstep;
    }
}

int ur_tensor_cast_supported(ur_dtype dst, ur_dtype src)
{
    if (ur_dtype_size(dst) == 0 || ur_dtype_size(src) == 0) {
        return 0;
    }
    if (dst == src) {
        return 1;
    }
    ur_tensor__kernel k;
    return (dst == UR_DT_BFLOAT16 && bf16_runs(src, &k)) ||
           (dst == UR_DT_FLOAT32 && src == UR_DT_BFLOAT16);
}

int ur_tensor__kernel_get(ur_tensor__kernel *out, ur_dtype dst, ur_dtype src, ur_err *err)
{
    ur_tensor__kernel k = {0};

    if (!ur_tensor_cast_supported(dst, src)) {
        return ur_err_set(err, UR_EUNSUPPORTED, "tensor: no conversion from %s to %s",
                          ur_dtype_name(src), ur_dtype_name(dst));
    }
    k.dsize = ur_dtype_size(dst);
    k.ssize = ur_dtype_size(src);
    if (dst == src) {
        k.dense = same_dense;
        switch (k.ssize) {
        case 1:
            k.strided = same1_strided;
            break;
        case 2:
            k.strided = same2_strided;
            break;
        case 4:
            k.strided = same4_strided;
            break;
        case 8:
            k.strided = same8_strided;
            break;
        case 16:
            k.strided = same16_strided;
            break;
        default:
            return ur_err_set(err, UR_EINTERNAL, "tensor: element size %zu", k.ssize);
        }
    } else if (dst == UR_DT_FLOAT32) {
        k.dense = bf16_f32_dense;
        k.strided = bf16_f32_strided;
    } else {
        bf16_runs(src, &k);
    }
    *out = k;
    return UR_OK;
}

int ur_tensor_cast_dense(void *dst, ur_dtype dst_dtype, const void *src, ur_dtype src_dtype,
                         size_t n, ur_err *err)
{
    ur_tensor__kernel k = {0};
    size_t bytes;
    int rc = ur_tensor__kernel_get(&k, dst_dtype, src_dtype, err);

    if (rc < 0) {
        return rc;
    }
    if (ur_ckd_mul(&bytes, n, k.dsize > k.ssize ? k.dsize : k.ssize)) {
        return ur_err_set(err, UR_EINVAL, "tensor: %zu elements overflow size_t", n);
    }
    if (n > 0) {
        k.dense((char *)dst, (ptrdiff_t)k.dsize, (const char *)src, (ptrdiff_t)k.ssize, n);
    }
    return UR_OK;
}

int ur_tensor_apply(void *data, ur_dtype dtype, size_t n, ur_tensor_op op, float c, ur_err *err)
{
    uint8_t *b = data;
    if (op == UR_TENSOR_OP_NONE) {
        return UR_OK;
    }
    if (dtype != UR_DT_FLOAT32 && dtype != UR_DT_BFLOAT16) {
        return ur_err_set(err, UR_EUNSUPPORTED, "arithmetic on %s elements", ur_dtype_name(dtype));
    }
    for (size_t i = 0; i < n; i++) {
        float x;
        if (dtype == UR_DT_FLOAT32) {
            memcpy(&x, b + 4 * i, 4);
        } else {
            uint32_t bits = (uint32_t)b[2 * i] << 16 | (uint32_t)b[2 * i + 1] << 24;
            memcpy(&x, &bits, 4);
        }
        x = op == UR_TENSOR_OP_MUL ? x * c : op == UR_TENSOR_OP_DIV ? x / c : x + c;
        if (dtype == UR_DT_FLOAT32) {
            memcpy(b + 4 * i, &x, 4);
        } else {
            uint32_t bits;
            uint16_t h;
            memcpy(&bits, &x, 4);
            h = ur_tensor_cast_f32_to_bf16(bits);
            b[2 * i] = (uint8_t)h;
            b[2 * i + 1] = (uint8_t)(h >> 8);
        }
    }
    return UR_OK;
}
