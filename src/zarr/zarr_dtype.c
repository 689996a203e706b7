/* Zarr data types: zarr2 dtype strings and zarr3 data_type names <-> ur_dtype, and the
 * float encodings fill values need.
 *
 * zarr2 (tensorstore/driver/zarr/dtype.cc): NumPy typestrings "<f4", ">i8", "|b1", "|u1",
 * "<c8"; the ml_dtypes extension types are written bare ("bfloat16", "float8_e4m3fn",
 * "int4") and are always little-endian. int4 takes one byte per element (low nibble), as
 * in memory. zarr3 (tensorstore/driver/zarr3/dtype.cc): TensorStore's names.
 *
 * Small float formats, as ml_dtypes defines them:
 *   IEEE-like (inf and NaN at the top exponent): float16 1.5.10, bfloat16 1.8.7,
 *     float8_e3m4 1.3.4, float8_e4m3 1.4.3, float8_e5m2 1.5.2
 *   "fn" (no inf; NaN = all ones): float8_e4m3fn 1.4.3
 *   "fnuz" (no inf, no -0; NaN = 0x80): e4m3fnuz (bias 8), e4m3b11fnuz (bias 11),
 *     e5m2fnuz (bias 16)
 *   float8_e8m0fnu: 8 exponent bits, no sign or mantissa, 2^(e-127); 0xff = NaN. */
#include "zarr_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { FK_IEEE, FK_FN, FK_FNUZ, FK_E8M0 } float_kind;

typedef struct float_fmt {
    int bits; /* 8 or 16 */
    int ebits;
    int mbits;
    int bias;
    float_kind kind;
    uint32_t nan; /* canonical NaN code (ml_dtypes quiet_NaN) */
} float_fmt;

static int small_fmt(ur_dtype dt, float_fmt *f)
{
    static const struct {
        ur_dtype dt;
        float_fmt f;
    } tab[] = {
        {UR_DT_FLOAT16, {16, 5, 10, 15, FK_IEEE, 0x7e00}},
        {UR_DT_BFLOAT16, {16, 8, 7, 127, FK_IEEE, 0x7fc0}},
        {UR_DT_FLOAT8_E3M4, {8, 3, 4, 3, FK_IEEE, 0x78}},
        {UR_DT_FLOAT8_E4M3, {8, 4, 3, 7, FK_IEEE, 0x7c}},
        {UR_DT_FLOAT8_E4M3FN, {8, 4, 3, 7, FK_FN, 0x7f}},
        {UR_DT_FLOAT8_E4M3FNUZ, {8, 4, 3, 8, FK_FNUZ, 0x80}},
        {UR_DT_FLOAT8_E4M3B11FNUZ, {8, 4, 3, 11, FK_FNUZ, 0x80}},
        {UR_DT_FLOAT8_E5M2, {8, 5, 2, 15, FK_IEEE, 0x7e}},
        {UR_DT_FLOAT8_E5M2FNUZ, {8, 5, 2, 16, FK_FNUZ, 0x80}},
        {UR_DT_FLOAT8_E8M0FNU, {8, 8, 0, 127, FK_E8M0, 0xff}},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        if (tab[i].dt == dt) {
            *f = tab[i].f;
            return 1;
        }
    }
    return 0;
}

/* Decode a small-float code; sets *special to 1 for NaN, 2 for inf. */
static double small_decode(const float_fmt *f, uint32_t code, int *special)
{
    uint32_t emax = (1u << f->ebits) - 1;
    uint32_t mmask = (1u << f->mbits) - 1;
    uint32_t sign, e, mant;
    double v;

    *special = 0;
    if (f->kind == FK_E8M0) {
        if (code == 0xff) {
            *special = 1;
            return (double)NAN;
        }
        return ldexp(1.0, (int)code - 127);
    }
    sign = (code >> (f->ebits + f->mbits)) & 1u;
    e = (code >> f->mbits) & emax;
    mant = code & mmask;
    if (f->kind == FK_FNUZ && code == 0x80) {
        *special = 1;
        return (double)NAN;
    }
    if (f->kind == FK_IEEE && e == emax) {
        *special = mant == 0 ? 2 : 1;
        return mant == 0 ? (sign ? -(double)INFINITY : (double)INFINITY) : (double)NAN;
    }
    if (f->kind == FK_FN && e == emax && mant == mmask) {
        *special = 1;
        return (double)NAN;
    }
    if (e == 0) {
        v = ldexp((double)mant, 1 - f->bias - f->mbits);
    } else {
        v = ldexp((double)(mant | (1u << f->mbits)), (int)e - f->bias - f->mbits);
    }
    return sign ? -v : v;
}

static void put_code(uint8_t *out, const float_fmt *f, uint32_t code)
{
    out[0] = (uint8_t)(code & 0xff);
    if (f->bits == 16) {
        out[1] = (uint8_t)(code >> 8);
    }
}

/* Nearest code by search over all codes (ties to the even code). Fill values are parsed
 * once per array, so 65536 steps for float16 cost nothing that matters. */
static uint32_t small_encode(const float_fmt *f, double v)
{
    uint32_t ncodes = 1u << f->bits, best = 0, inf_code = 0;
    double best_d = (double)INFINITY, maxfin = 0;
    int has_inf = 0, special;

    if (isnan(v)) {
        return f->nan;
    }
    if (v == 0 && f->kind != FK_E8M0) {
        return (signbit(v) && f->kind != FK_FNUZ) ? 1u << (f->bits - 1) : 0;
    }
    for (uint32_t c = 0; c < ncodes; c++) {
        double d = small_decode(f, c, &special);
        if (special == 2 && d > 0) {
            has_inf = 1;
            inf_code = c;
        }
        if (special) {
            continue;
        }
        if (d > maxfin) {
            maxfin = d;
        }
        double dist = fabs(d - v);
        if (dist < best_d || (dist == best_d && (c & 1u) == 0 && (best & 1u) != 0)) {
            best_d = dist;
            best = c;
        }
    }
    if (fabs(v) > maxfin) {
        /* Past the largest finite value by half an ulp or more: overflow. */
        double top_ulp = ldexp(1.0, (int)floor(log2(maxfin)) - f->mbits);
        if (fabs(v) >= maxfin + top_ulp / 2) {
            if (has_inf) {
                return v > 0 ? inf_code : (inf_code | (1u << (f->bits - 1)));
            }
            if (f->kind != FK_E8M0) {
                return f->nan;
            }
        }
    }
    return best;
}

int ur_zarr_dtype__from_double(ur_dtype dt, double v, uint8_t *out, ur_err *err)
{
    float_fmt f;

    if (dt == UR_DT_FLOAT32) {
        float x = (float)v;
        memcpy(out, &x, 4);
        return UR_OK;
    }
    if (dt == UR_DT_FLOAT64) {
        memcpy(out, &v, 8);
        return UR_OK;
    }
    if (!small_fmt(dt, &f)) {
        return ur_err_set(err, UR_EINVAL, "dtype %s is not a float type", ur_dtype_name(dt));
    }
    put_code(out, &f, small_encode(&f, v));
    return UR_OK;
}

int ur_zarr_dtype__nan(ur_dtype dt, uint8_t *out, ur_err *err)
{
    float_fmt f;

    if (dt == UR_DT_FLOAT32) {
        const uint8_t b[4] = {0x00, 0x00, 0xc0, 0x7f};
        memcpy(out, b, 4);
        return UR_OK;
    }
    if (dt == UR_DT_FLOAT64) {
        const uint8_t b[8] = {0, 0, 0, 0, 0, 0, 0xf8, 0x7f};
        memcpy(out, b, 8);
        return UR_OK;
    }
    if (!small_fmt(dt, &f)) {
        return ur_err_set(err, UR_EINVAL, "dtype %s has no NaN", ur_dtype_name(dt));
    }
    put_code(out, &f, f.nan);
    return UR_OK;
}

double ur_zarr_dtype__to_double(ur_dtype dt, const uint8_t *p)
{
    float_fmt f;
    int special;

    if (dt == UR_DT_FLOAT32) {
        float x;
        memcpy(&x, p, 4);
        return (double)x;
    }
    if (dt == UR_DT_FLOAT64) {
        double x;
        memcpy(&x, p, 8);
        return x;
    }
    if (!small_fmt(dt, &f)) {
        return 0.0;
    }
    return small_decode(&f, f.bits == 16 ? (uint32_t)(p[0] | (p[1] << 8)) : p[0], &special);
}

/* Extension types zarr2 writes bare; the rest are NumPy typestrings. */
static const ur_dtype bare_v2[] = {
    UR_DT_BFLOAT16,        UR_DT_INT4,
    UR_DT_UINT4,           UR_DT_FLOAT8_E3M4,
    UR_DT_FLOAT8_E4M3,     UR_DT_FLOAT8_E4M3FN,
    UR_DT_FLOAT8_E4M3FNUZ, UR_DT_FLOAT8_E4M3B11FNUZ,
    UR_DT_FLOAT8_E5M2,     UR_DT_FLOAT8_E5M2FNUZ,
    UR_DT_FLOAT8_E8M0FNU,
};

static const struct {
    const char *code; /* kind + size, after the byte-order character */
    ur_dtype dt;
} numpy_v2[] = {
    {"b1", UR_DT_BOOL},      {"i1", UR_DT_INT8},        {"i2", UR_DT_INT16},
    {"i4", UR_DT_INT32},     {"i8", UR_DT_INT64},       {"u1", UR_DT_UINT8},
    {"u2", UR_DT_UINT16},    {"u4", UR_DT_UINT32},      {"u8", UR_DT_UINT64},
    {"f2", UR_DT_FLOAT16},   {"f4", UR_DT_FLOAT32},     {"f8", UR_DT_FLOAT64},
    {"c8", UR_DT_COMPLEX64}, {"c16", UR_DT_COMPLEX128},
};

int ur_zarr_dtype__parse_v2(const char *s, ur_dtype *dt_out, int *big_endian_out, ur_err *err)
{
    for (size_t i = 0; i < sizeof(bare_v2) / sizeof(bare_v2[0]); i++) {
        if (strcmp(s, ur_dtype_name(bare_v2[i])) == 0) {
            *dt_out = bare_v2[i];
            *big_endian_out = 0;
            return UR_OK;
        }
    }
    if (s[0] == '<' || s[0] == '>' || s[0] == '|') {
        for (size_t i = 0; i < sizeof(numpy_v2) / sizeof(numpy_v2[0]); i++) {
            if (strcmp(s + 1, numpy_v2[i].code) == 0) {
                /* '|' (not applicable) is only valid for one-byte types. */
                if (s[0] == '|' && ur_dtype_size(numpy_v2[i].dt) != 1) {
                    break;
                }
                *dt_out = numpy_v2[i].dt;
                *big_endian_out = s[0] == '>' && ur_dtype_size(numpy_v2[i].dt) > 1;
                return UR_OK;
            }
        }
    }
    return ur_err_set(err, UR_EUNSUPPORTED, "unsupported zarr2 dtype \"%.64s\"", s);
}

const char *ur_zarr_dtype__v2_name(ur_dtype dt)
{
    switch (dt) {
    case UR_DT_BOOL:
        return "|b1";
    case UR_DT_INT8:
        return "|i1";
    case UR_DT_UINT8:
        return "|u1";
    case UR_DT_INT16:
        return "<i2";
    case UR_DT_INT32:
        return "<i4";
    case UR_DT_INT64:
        return "<i8";
    case UR_DT_UINT16:
        return "<u2";
    case UR_DT_UINT32:
        return "<u4";
    case UR_DT_UINT64:
        return "<u8";
    case UR_DT_FLOAT16:
        return "<f2";
    case UR_DT_FLOAT32:
        return "<f4";
    case UR_DT_FLOAT64:
        return "<f8";
    case UR_DT_COMPLEX64:
        return "<c8";
    case UR_DT_COMPLEX128:
        return "<c16";
    default:
        return ur_dtype_name(dt);
    }
}

ur_dtype ur_zarr_dtype__parse_v3(const char *s)
{
    return ur_dtype_from_name(s);
}
