/* zarr_dtype: zarr2 dtype strings, zarr3 names, and float encodings for fill values. */
#include "ur_test.h"

#include "zarr/zarr_impl.h"

#include <math.h>
#include <string.h>

static void test_zarr_dtype__v2_names_round_trip(void **state)
{
    (void)state;
    for (int i = 1; i < UR_DT_COUNT_; i++) {
        ur_dtype dt;
        int big = 1;
        const char *s = ur_zarr_dtype__v2_name((ur_dtype)i);
        assert_int_equal(ur_zarr_dtype__parse_v2(s, &dt, &big, NULL), UR_OK);
        assert_int_equal(dt, i);
        assert_int_equal(big, 0);
        assert_int_equal(ur_zarr_dtype__parse_v3(ur_dtype_name((ur_dtype)i)), i);
    }
    assert_string_equal(ur_zarr_dtype__v2_name(UR_DT_BFLOAT16), "bfloat16");
    assert_string_equal(ur_zarr_dtype__v2_name(UR_DT_BOOL), "|b1");
    assert_string_equal(ur_zarr_dtype__v2_name(UR_DT_COMPLEX128), "<c16");
    assert_string_equal(ur_zarr_dtype__v2_name(UR_DT_FLOAT8_E4M3FN), "float8_e4m3fn");
}

static void test_zarr_dtype__v2_byte_order(void **state)
{
    ur_dtype dt;
    int big;
    ur_err err;
    (void)state;
    assert_int_equal(ur_zarr_dtype__parse_v2(">i8", &dt, &big, NULL), UR_OK);
    assert_int_equal(dt, UR_DT_INT64);
    assert_true(big);
    assert_int_equal(ur_zarr_dtype__parse_v2(">u1", &dt, &big, NULL), UR_OK);
    assert_false(big); /* one byte: order does not apply */
    assert_int_equal(ur_zarr_dtype__parse_v2("|i4", &dt, &big, &err), UR_EUNSUPPORTED);
    assert_int_equal(ur_zarr_dtype__parse_v2("<U4", &dt, &big, &err), UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "<U4"));
    assert_int_equal(ur_zarr_dtype__parse_v2("", &dt, &big, &err), UR_EUNSUPPORTED);
}

static unsigned enc(ur_dtype dt, double v)
{
    uint8_t b[8] = {0};
    assert_int_equal(ur_zarr_dtype__from_double(dt, v, b, NULL), UR_OK);
    return ur_dtype_size(dt) == 2 ? (unsigned)(b[0] | b[1] << 8) : b[0];
}

/* Expected codes from ml_dtypes (np.float32(v).astype(t).view(uint8/uint16)). */
static void test_zarr_dtype__small_float_encodings(void **state)
{
    (void)state;
    assert_int_equal(enc(UR_DT_BFLOAT16, 1.0), 0x3f80);
    assert_int_equal(enc(UR_DT_BFLOAT16, -0.0), 0x8000);
    assert_int_equal(enc(UR_DT_BFLOAT16, (double)INFINITY), 0x7f80);
    assert_int_equal(enc(UR_DT_FLOAT16, 1.0), 0x3c00);
    assert_int_equal(enc(UR_DT_FLOAT16, 65504.0), 0x7bff);
    assert_int_equal(enc(UR_DT_FLOAT16, 1e6), 0x7c00);
    assert_int_equal(enc(UR_DT_FLOAT16, 5.960464477539063e-08), 0x0001);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3FN, 448.0), 0x7e);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3FN, 1.0), 0x38);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3FN, 1000.0), 0x7f); /* no inf: NaN */
    assert_int_equal(enc(UR_DT_FLOAT8_E5M2, 1.0), 0x3c);
    assert_int_equal(enc(UR_DT_FLOAT8_E5M2, -(double)INFINITY), 0xfc);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3FNUZ, 1.0), 0x40);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3FNUZ, -0.0), 0x00);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3B11FNUZ, 1.0), 0x58);
    assert_int_equal(enc(UR_DT_FLOAT8_E5M2FNUZ, 1.0), 0x40);
    assert_int_equal(enc(UR_DT_FLOAT8_E3M4, 1.0), 0x30);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3, 1.0), 0x38);
    assert_int_equal(enc(UR_DT_FLOAT8_E8M0FNU, 1.0), 0x7f);
    assert_int_equal(enc(UR_DT_FLOAT8_E8M0FNU, 4.0), 0x81);
    /* ties to even: 1 + 2^-4 lies halfway between 0x38 and 0x39 in e4m3fn */
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3FN, 1.0625), 0x38);
    assert_int_equal(enc(UR_DT_FLOAT8_E4M3FN, 1.1875), 0x3a);
}

static void test_zarr_dtype__canonical_nans(void **state)
{
    static const struct {
        ur_dtype dt;
        unsigned code;
    } want[] = {
        {UR_DT_FLOAT16, 0x7e00},          {UR_DT_BFLOAT16, 0x7fc0},
        {UR_DT_FLOAT8_E3M4, 0x78},        {UR_DT_FLOAT8_E4M3, 0x7c},
        {UR_DT_FLOAT8_E4M3FN, 0x7f},      {UR_DT_FLOAT8_E4M3FNUZ, 0x80},
        {UR_DT_FLOAT8_E4M3B11FNUZ, 0x80}, {UR_DT_FLOAT8_E5M2, 0x7e},
        {UR_DT_FLOAT8_E5M2FNUZ, 0x80},    {UR_DT_FLOAT8_E8M0FNU, 0xff},
    };
    uint8_t b[8];
    (void)state;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        memset(b, 0, sizeof b);
        assert_int_equal(ur_zarr_dtype__nan(want[i].dt, b, NULL), UR_OK);
        assert_int_equal(ur_dtype_size(want[i].dt) == 2 ? (unsigned)(b[0] | b[1] << 8) : b[0],
                         want[i].code);
        assert_true(isnan(ur_zarr_dtype__to_double(want[i].dt, b)));
        assert_int_equal(enc(want[i].dt, (double)NAN), want[i].code);
    }
    assert_int_equal(ur_zarr_dtype__nan(UR_DT_INT32, b, NULL), UR_EINVAL);
}

/* Every finite code of every small float decodes and encodes back to itself. */
static void test_zarr_dtype__encode_decode_all_codes(void **state)
{
    static const ur_dtype dts[] = {
        UR_DT_FLOAT16,         UR_DT_BFLOAT16,        UR_DT_FLOAT8_E3M4,        UR_DT_FLOAT8_E4M3,
        UR_DT_FLOAT8_E4M3FN,   UR_DT_FLOAT8_E4M3FNUZ, UR_DT_FLOAT8_E4M3B11FNUZ, UR_DT_FLOAT8_E5M2,
        UR_DT_FLOAT8_E5M2FNUZ, UR_DT_FLOAT8_E8M0FNU};
    (void)state;
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        unsigned n = ur_dtype_size(dts[i]) == 2 ? 65536u : 256u;
        unsigned step = n == 65536u ? 97u : 1u; /* a sample of float16/bfloat16 */
        for (unsigned c = 0; c < n; c += step) {
            uint8_t b[2] = {(uint8_t)c, (uint8_t)(c >> 8)};
            double v = ur_zarr_dtype__to_double(dts[i], b);
            if (isnan(v)) {
                continue;
            }
            if (enc(dts[i], v) != c) {
                fail_msg("%s code 0x%x -> %g -> 0x%x", ur_dtype_name(dts[i]), c, v,
                         enc(dts[i], v));
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zarr_dtype__v2_names_round_trip),
        cmocka_unit_test(test_zarr_dtype__v2_byte_order),
        cmocka_unit_test(test_zarr_dtype__small_float_encodings),
        cmocka_unit_test(test_zarr_dtype__canonical_nans),
        cmocka_unit_test(test_zarr_dtype__encode_decode_all_codes),
    };
    return cmocka_run_group_tests_name("zarr_dtype", tests, NULL, NULL);
}
