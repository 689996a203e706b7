/* tensor_cast: conversions to bfloat16 against the independent reference in tensor_ref.h,
 * exhaustively for float16 and on structured + random samples for float32 and float64; the
 * dense (vectorized) runs against the scalar conversions. */
#include "ur_test.h"

#include "tensor_ref.h"

static void test_tensor_cast__f16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        uint16_t want = ref_f16_to_bf16((uint16_t)h);
        uint16_t got = ur_tensor_cast_f16_to_bf16((uint16_t)h);
        if (got != want) {
            fail_msg("f16 0x%04x: got 0x%04x want 0x%04x", h, got, want);
        }
    }
}

static void check_f32(uint32_t u)
{
    uint16_t want = ref_f32_to_bf16(u);
    uint16_t got = ur_tensor_cast_f32_to_bf16(u);
    if (got != want) {
        fail_msg("f32 0x%08x: got 0x%04x want 0x%04x", u, got, want);
    }
}

/* Every high half (every sign, exponent, and bfloat16 mantissa, so every NaN/Inf/subnormal
 * class) with the low halves where rounding decides: 0, 1, just below/at/above the tie, max. */
static void test_tensor_cast__f32_every_high_half(void **state)
{
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000,
                                    0x8001, 0xffff, 0x4000, 0xc000};
    (void)state;
    for (uint32_t hi = 0; hi < 0x10000; hi++) {
        for (size_t i = 0; i < sizeof lows / sizeof lows[0]; i++) {
            check_f32(hi << 16 | lows[i]);
        }
    }
}

static void test_tensor_cast__f32_random(void **state)
{
    uint64_t seed = ref_seed(0x7e57ca57);
    ref_rng r = {seed};
    (void)state;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)ref_next(&r);
        uint16_t want = ref_f32_to_bf16(u);
        uint16_t got = ur_tensor_cast_f32_to_bf16(u);
        if (got != want) {
            fail_msg("seed 0x%llx: f32 0x%08x: got 0x%04x want 0x%04x", (unsigned long long)seed,
                     u, got, want);
        }
    }
}

static void test_tensor_cast__f32_known_values(void **state)
{
    (void)state;
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x3f800000), 0x3f80);      /* 1.0 */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x3f808000), 0x3f80);      /* tie -> even */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x3f818000), 0x3f82);      /* tie -> even up */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x3f808001), 0x3f81);      /* above tie */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x7f7fffff), 0x7f80);      /* overflow to Inf */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0xff7fffff), 0xff80);      /* to -Inf */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x7f7f7fff), 0x7f7f);      /* max finite */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x80000000), 0x8000);      /* -0 */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x00000001), 0x0000);      /* tiny -> 0 */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x00008000), 0x0000);      /* tie at 0 */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x00018000), 0x0002);      /* subnormal tie */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x007fffff), 0x0080);      /* to min normal */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x7f800001), 0x7fc0);      /* sNaN */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0xff800001), 0xffc0);      /* -sNaN */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x7fffffff), 0x7fc0);      /* NaN payload */
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0xffffffff), 0xffc0);
    assert_int_equal(ur_tensor_cast_f32_to_bf16(0x7f800000), 0x7f80);      /* Inf */
}

static void test_tensor_cast__f64_known_values(void **state)
{
    double d = 1.0 + 0x1p-8 + 0x1p-30; /* direct rounding gives 0x3f81, JAX 0x3f80 */
    uint64_t b;
    (void)state;
    memcpy(&b, &d, sizeof b);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(b), 0x3f80);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(0x7ff8000000000000ull), 0x7fc0);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(0xfff0000000000001ull), 0xffc0);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(0x7fffffffffffffffull), 0x7fc0);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(0x7ff0000000000000ull), 0x7f80);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(0x8000000000000000ull), 0x8000);
    d = 1e300; /* beyond float32: Inf */
    memcpy(&b, &d, sizeof b);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(b), 0x7f80);
    d = -1e-300; /* below float32's smallest subnormal: -0 */
    memcpy(&b, &d, sizeof b);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(b), 0x8000);
    d = 1e-39; /* float32 subnormal, kept (bf16 0x000b) */
    memcpy(&b, &d, sizeof b);
    assert_int_equal(ur_tensor_cast_f64_to_bf16(b), 0x000b);
}

/* Random doubles with exponents around float32's range (including its subnormals). */
static void test_tensor_cast__f64_random(void **state)
{
    uint64_t seed = ref_seed(0xd0b1e);
    ref_rng r = {seed};
    (void)state;
    for (int i = 0; i < 1000000; i++) {
        uint64_t b = ref_next(&r);
        uint64_t e = 1023 - 160 + ref_below(&r, 300);
        uint16_t want, got;
        if (i % 4) {
            b = (b & 0x800fffffffffffffull) | (e << 52);
        }
        want = ref_f64_to_bf16(b);
        got = ur_tensor_cast_f64_to_bf16(b);
        if (got != want) {
            fail_msg("seed 0x%llx: f64 0x%016llx: got 0x%04x want 0x%04x",
                     (unsigned long long)seed, (unsigned long long)b, got, want);
        }
    }
}

/* The dense runs (vectorized) agree with the scalar conversions, at every alignment and for
 * lengths around the vector widths. */
static void test_tensor_cast__dense_runs_match_scalar(void **state)
{
    enum { N = 1100 };
    uint64_t seed = ref_seed(0xde45e);
    ref_rng r = {seed};
    uint8_t src[N * 8 + 16], dst[N * 2 + 16];
    (void)state;
    for (size_t s = 0; s < sizeof ref_cast_srcs / sizeof ref_cast_srcs[0]; s++) {
        ur_dtype sdt = ref_cast_srcs[s];
        size_t ssz = ur_dtype_size(sdt);
        for (size_t n = 0; n < N; n += 1 + n / 8) {
            size_t soff = ref_below(&r, 8), doff = ref_below(&r, 8);
            for (size_t i = 0; i < sizeof src; i++) {
                src[i] = (uint8_t)ref_next(&r);
            }
            memset(dst, REF_GUARD, sizeof dst);
            assert_int_equal(
                ur_tensor_cast_dense(dst + doff, UR_DT_BFLOAT16, src + soff, sdt, n, NULL), UR_OK);
            for (size_t i = 0; i < n; i++) {
                uint16_t got, want;
                memcpy(&got, dst + doff + 2 * i, 2);
                if (sdt == UR_DT_FLOAT32) {
                    uint32_t u;
                    memcpy(&u, src + soff + ssz * i, 4);
                    want = ur_tensor_cast_f32_to_bf16(u);
                } else if (sdt == UR_DT_FLOAT64) {
                    uint64_t u;
                    memcpy(&u, src + soff + ssz * i, 8);
                    want = ur_tensor_cast_f64_to_bf16(u);
                } else {
                    uint16_t u;
                    memcpy(&u, src + soff + ssz * i, 2);
                    want = ur_tensor_cast_f16_to_bf16(u);
                }
                if (got != want) {
                    fail_msg("seed 0x%llx: %s n=%zu i=%zu: got 0x%04x want 0x%04x",
                             (unsigned long long)seed, ur_dtype_name(sdt), n, i, got, want);
                }
            }
            for (size_t i = 0; i < sizeof dst; i++) {
                if ((i < doff || i >= doff + 2 * n) && dst[i] != REF_GUARD) {
                    fail_msg("%s n=%zu: byte %zu outside the run written", ur_dtype_name(sdt), n,
                             i);
                }
            }
        }
    }
}

/* bfloat16 -> float32 is exact, every one of the 65,536 codes (NaN payloads kept), dense and
 * through a strided copy; and back to bfloat16 gives the same code but for NaN payloads. */
static void test_tensor_cast__bf16_widens_exactly(void **state)
{
    uint16_t *h = malloc(65536 * 2);
    uint32_t *f = malloc(65536 * 4), *g = malloc(65536 * 4);
    uint16_t *back = malloc(65536 * 2);
    ur_tensor_view src, dst;
    uint64_t n = 65536;
    (void)state;
    assert_non_null(h);
    assert_non_null(f);
    assert_non_null(g);
    assert_non_null(back);
    for (uint32_t i = 0; i < 65536; i++) {
        h[i] = (uint16_t)i;
    }
    assert_int_equal(ur_tensor_cast_dense(f, UR_DT_FLOAT32, h, UR_DT_BFLOAT16, 65536, NULL),
                     UR_OK);
    assert_int_equal(ur_tensor_view_init_dense(&src, UR_DT_BFLOAT16, 1, &n, h, NULL), UR_OK);
    assert_int_equal(ur_tensor_view_init_dense(&dst, UR_DT_FLOAT32, 1, &n, g, NULL), UR_OK);
    src.shape[0] = dst.shape[0] = 32768; /* every other code, strided on both sides */
    src.strides[0] = dst.strides[0] = 2;
    assert_int_equal(ur_tensor_copy(&dst, &src, NULL), UR_OK);
    assert_int_equal(ur_tensor_cast_dense(back, UR_DT_BFLOAT16, f, UR_DT_FLOAT32, 65536, NULL),
                     UR_OK);
    for (uint32_t i = 0; i < 65536; i++) {
        int nan = (i & 0x7f80) == 0x7f80 && (i & 0x7f) != 0;
        assert_int_equal(f[i], i << 16);
        if (i % 2 == 0) {
            assert_int_equal(g[i], i << 16);
        }
        if (!nan) {
            assert_int_equal(back[i], i);
        }
    }
    free(h);
    free(f);
    free(g);
    free(back);
}

static void test_tensor_cast__supported_pairs(void **state)
{
    ur_err err;
    uint8_t a[16] = {0}, b[16] = {0};
    (void)state;
    for (int d = 0; d < UR_DT_COUNT_; d++) {
        for (int s = 0; s < UR_DT_COUNT_; s++) {
            int want = d != UR_DT_INVALID && s != UR_DT_INVALID &&
                       (d == s || (d == UR_DT_BFLOAT16 && ur_dtype_is_float((ur_dtype)s)) ||
                        (d == UR_DT_FLOAT32 && s == UR_DT_BFLOAT16));
            assert_int_equal(ur_tensor_cast_supported((ur_dtype)d, (ur_dtype)s), want);
            if (!want) {
                assert_int_equal(ur_tensor_cast_dense(a, (ur_dtype)d, b, (ur_dtype)s, 1, &err),
                                 UR_EUNSUPPORTED);
            }
        }
    }
    assert_int_equal(ur_tensor_cast_dense(a, UR_DT_FLOAT16, b, UR_DT_FLOAT32, 1, &err),
                     UR_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "float32"));
    assert_non_null(strstr(err.msg, "float16"));
    /* Identity of every dtype is a byte copy. */
    for (int i = 0; i < 16; i++) {
        b[i] = (uint8_t)(i * 37 + 1);
    }
    assert_int_equal(ur_tensor_cast_dense(a, UR_DT_COMPLEX128, b, UR_DT_COMPLEX128, 1, NULL),
                     UR_OK);
    assert_memory_equal(a, b, 16);
}

/* float8 -> bfloat16 is exact; the full 256-code sweep against JAX is in
 * tests/interop/test_tensor_cast.py. Here: the extremes and specials of each format. */
static void test_tensor_cast__float8_known_values(void **state)
{
    static const struct {
        ur_dtype dt;
        uint8_t in;
        uint16_t want;
    } k[] = {
        {UR_DT_FLOAT8_E4M3FN, 0x7e, 0x43e0},       /* 448, the largest */
        {UR_DT_FLOAT8_E4M3FN, 0x01, 0x3b00},       /* 2^-9, the smallest subnormal */
        {UR_DT_FLOAT8_E4M3FN, 0x06, 0x3c40},       /* 6 * 2^-9 = 1.5 * 2^-7 */
        {UR_DT_FLOAT8_E4M3FN, 0xff, 0xffc0},       /* -NaN */
        {UR_DT_FLOAT8_E4M3FN, 0x80, 0x8000},       /* -0 */
        {UR_DT_FLOAT8_E5M2, 0x7c, 0x7f80},         /* +Inf */
        {UR_DT_FLOAT8_E5M2, 0xfd, 0xffc0},         /* -NaN */
        {UR_DT_FLOAT8_E5M2, 0x7b, 0x4760},         /* 57344 */
        {UR_DT_FLOAT8_E5M2FNUZ, 0x80, 0x7fc0},     /* the one NaN: +NaN, as JAX gives */
        {UR_DT_FLOAT8_E4M3FNUZ, 0xff, 0xc370},     /* -240 */
        {UR_DT_FLOAT8_E4M3B11FNUZ, 0x01, 0x3900},  /* 2^-13 */
        {UR_DT_FLOAT8_E3M4, 0x70, 0x7f80},         /* +Inf */
        {UR_DT_FLOAT8_E3M4, 0x6f, 0x4178},         /* 15.5 */
        {UR_DT_FLOAT8_E4M3, 0x78, 0x7f80},         /* +Inf */
        {UR_DT_FLOAT8_E8M0FNU, 0x00, 0x0040},      /* 2^-127, a bfloat16 subnormal */
        {UR_DT_FLOAT8_E8M0FNU, 0xfe, 0x7f00},      /* 2^127 */
        {UR_DT_FLOAT8_E8M0FNU, 0xff, 0x7fc0},      /* NaN */
    };
    (void)state;
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        uint16_t got = 0;
        assert_int_equal(ur_tensor_cast_dense(&got, UR_DT_BFLOAT16, &k[i].in, k[i].dt, 1, NULL),
                         UR_OK);
        if (got != k[i].want) {
            fail_msg("%s 0x%02x: got 0x%04x, want 0x%04x", ur_dtype_name(k[i].dt), k[i].in, got,
                     k[i].want);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_cast__f16_exhaustive),
        cmocka_unit_test(test_tensor_cast__f32_every_high_half),
        cmocka_unit_test(test_tensor_cast__f32_random),
        cmocka_unit_test(test_tensor_cast__f32_known_values),
        cmocka_unit_test(test_tensor_cast__f64_known_values),
        cmocka_unit_test(test_tensor_cast__f64_random),
        cmocka_unit_test(test_tensor_cast__dense_runs_match_scalar),
        cmocka_unit_test(test_tensor_cast__supported_pairs),
        cmocka_unit_test(test_tensor_cast__bf16_widens_exactly),
        cmocka_unit_test(test_tensor_cast__float8_known_values),
    };
    return cmocka_run_group_tests_name("tensor_cast", tests, NULL, NULL);
}
