/* ocdbt_codec: varints, CRC-32C, the envelope (raw and zstd) and its corruption checks. */
#include "ur_test.h"

#include "ocdbt_format.h"
#include "unroll/alloc.h"
#include "unroll/crc32c.h"

#include <string.h>

static void test_ocdbt_codec__crc32c_check_value(void **state)
{
    (void)state;
    assert_int_equal(ur_crc32c(0, "123456789", 9), 0xE3069283U);
}

static void test_ocdbt_codec__varints(void **state)
{
    static const uint8_t ok[] = {0x00, 0x7f, 0x80, 0x01, 0xff, 0xff, 0x03, 0x80, 0x80, 0x80, 0x04};
    static const uint8_t too_big16[] = {0x80, 0x80, 0x04}; /* 65536 */
    static const uint8_t long32[] = {0xff, 0xff, 0xff, 0xff, 0x10}; /* 5th byte >= 0x10 */
    static const uint8_t max32[] = {0xff, 0xff, 0xff, 0xff, 0x0f};
    static const uint8_t long64[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    static const uint8_t cut[] = {0x80};
    ur_rd rd;
    ur_buf b;
    (void)state;

    ur_rd_init(&rd, ok, sizeof ok);
    assert_int_equal(ur_ocdbt_codec_varint16(&rd), 0);
    assert_int_equal(ur_ocdbt_codec_varint16(&rd), 127);
    assert_int_equal(ur_ocdbt_codec_varint16(&rd), 128);
    assert_int_equal(ur_ocdbt_codec_varint16(&rd), 65535);
    assert_int_equal(ur_rd_varint32(&rd), 8388608);
    assert_int_equal(ur_rd_finish(&rd, "v", NULL), UR_OK);

    ur_rd_init(&rd, too_big16, sizeof too_big16);
    (void)ur_ocdbt_codec_varint16(&rd);
    assert_true(rd.failed);
    ur_rd_init(&rd, long32, sizeof long32);
    (void)ur_rd_varint32(&rd);
    assert_true(rd.failed);
    ur_rd_init(&rd, max32, sizeof max32);
    assert_int_equal(ur_rd_varint32(&rd), 0xffffffffU);
    assert_false(rd.failed);
    ur_rd_init(&rd, long64, sizeof long64);
    (void)ur_rd_varint64(&rd);
    assert_true(rd.failed);
    ur_rd_init(&rd, cut, sizeof cut);
    (void)ur_rd_varint64(&rd);
    assert_true(rd.failed);

    /* shortest encodings on the way out */
    ur_buf_init(&b, 0);
    assert_int_equal(ur_buf_put_varint(&b, 300, NULL), UR_OK);
    assert_int_equal(b.len, 2);
    assert_int_equal(b.data[0], 0xac);
    assert_int_equal(b.data[1], 0x02);
    ur_buf_dispose(&b);
}

static void roundtrip(int compress)
{
    uint8_t body[3000];
    ur_buf obj, out;
    int compressed = -1;
    for (size_t i = 0; i < sizeof body; i++) {
        body[i] = (uint8_t)(i % 7);
    }
    ur_buf_init(&obj, 0);
    ur_buf_init(&out, 0);
    assert_int_equal(
        ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_BTREE, body, sizeof body, compress, 0, NULL),
        UR_OK);
    assert_int_equal(obj.data[12], 0);
    assert_int_equal(obj.data[13], compress);
    assert_int_equal(ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_BTREE, "t",
                                           &compressed, NULL),
                     UR_OK);
    assert_int_equal(compressed, compress);
    assert_int_equal(out.len, sizeof body);
    assert_memory_equal(out.data, body, sizeof body);
    /* the wrong magic is refused */
    assert_int_equal(
        ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_MANIFEST, "t", NULL, NULL),
        UR_ECORRUPT);
    ur_buf_dispose(&obj);
    ur_buf_dispose(&out);
}

static void test_ocdbt_codec__roundtrip_raw(void **state)
{
    (void)state;
    roundtrip(0);
}

static void test_ocdbt_codec__roundtrip_zstd(void **state)
{
    (void)state;
    roundtrip(1);
}

/* Every cut and every flipped byte must fail cleanly. */
static void corrupt_all(int compress)
{
    static const uint8_t body[] = "some body bytes, some body bytes, some body bytes";
    ur_buf obj, out;
    ur_err err;
    ur_buf_init(&obj, 0);
    ur_buf_init(&out, 0);
    assert_int_equal(
        ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_MANIFEST, body, sizeof body, compress, 3, NULL),
        UR_OK);
    for (size_t cut = 0; cut < obj.len; cut++) {
        assert_int_equal(
            ur_ocdbt_codec_decode(&out, obj.data, cut, UR_OCDBT_MAGIC_MANIFEST, "m", NULL, &err),
            UR_ECORRUPT);
    }
    for (size_t i = 0; i < obj.len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            obj.data[i] ^= (uint8_t)(1u << bit);
            assert_int_equal(ur_ocdbt_codec_decode(&out, obj.data, obj.len,
                                                   UR_OCDBT_MAGIC_MANIFEST, "m", NULL, &err),
                             UR_ECORRUPT);
            obj.data[i] ^= (uint8_t)(1u << bit);
        }
    }
    ur_buf_dispose(&obj);
    ur_buf_dispose(&out);
}

static void test_ocdbt_codec__corrupt_raw(void **state)
{
    (void)state;
    corrupt_all(0);
}

static void test_ocdbt_codec__corrupt_zstd(void **state)
{
    (void)state;
    corrupt_all(1);
}

/* Build an envelope around an arbitrary payload with a correct CRC. */
static void wrap(ur_buf *obj, uint8_t format, const uint8_t *payload, size_t n)
{
    ur_buf_reset(obj);
    assert_int_equal(ur_buf_put_u32be(obj, UR_OCDBT_MAGIC_BTREE, NULL), UR_OK);
    assert_int_equal(ur_buf_put_u64le(obj, 14 + n + 4, NULL), UR_OK);
    assert_int_equal(ur_buf_append_byte(obj, 0, NULL), UR_OK);
    assert_int_equal(ur_buf_append_byte(obj, format, NULL), UR_OK);
    assert_int_equal(ur_buf_append(obj, payload, n, NULL), UR_OK);
    assert_int_equal(ur_buf_put_u32le(obj, ur_crc32c(0, obj->data, obj->len), NULL), UR_OK);
}

static void test_ocdbt_codec__zstd_exactly_one_frame(void **state)
{
    static const uint8_t body[] = "hello hello hello";
    ur_buf frame, two, obj, out;
    ur_err err;
    (void)state;
    ur_buf_init(&frame, 0);
    ur_buf_init(&two, 0);
    ur_buf_init(&obj, 0);
    ur_buf_init(&out, 0);
    /* take the frame out of a valid compressed object */
    assert_int_equal(
        ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_BTREE, body, sizeof body, 1, 0, NULL), UR_OK);
    assert_int_equal(ur_buf_append(&frame, obj.data + 14, obj.len - 18, NULL), UR_OK);
    wrap(&obj, 1, frame.data, frame.len);
    assert_int_equal(
        ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_BTREE, "n", NULL, &err),
        UR_OK);
    /* two frames back to back */
    assert_int_equal(ur_buf_append(&two, frame.data, frame.len, NULL), UR_OK);
    assert_int_equal(ur_buf_append(&two, frame.data, frame.len, NULL), UR_OK);
    wrap(&obj, 1, two.data, two.len);
    assert_int_equal(
        ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_BTREE, "n", NULL, &err),
        UR_ECORRUPT);
    assert_non_null(strstr(err.msg, "after the zstd frame"));
    /* a trailing byte */
    assert_int_equal(ur_buf_append_byte(&frame, 0, NULL), UR_OK);
    wrap(&obj, 1, frame.data, frame.len);
    assert_int_equal(
        ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_BTREE, "n", NULL, &err),
        UR_ECORRUPT);
    /* unknown compression format, nonzero version */
    wrap(&obj, 2, body, sizeof body);
    assert_int_equal(
        ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_BTREE, "n", NULL, &err),
        UR_ECORRUPT);
    assert_int_equal(err.offset, 13);
    wrap(&obj, 0, body, sizeof body);
    obj.data[12] = 1;
    assert_int_equal(
        ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_BTREE, "n", NULL, &err),
        UR_ECORRUPT);
    ur_buf_dispose(&frame);
    ur_buf_dispose(&two);
    ur_buf_dispose(&obj);
    ur_buf_dispose(&out);
}

static void test_ocdbt_codec__oom(void **state)
{
    static const uint8_t body[] = "0123456789012345678901234567890123456789";
    ur_buf obj, out;
    int rc = UR_ENOMEM;
    (void)state;
    ur_buf_init(&obj, 0);
    assert_int_equal(
        ur_ocdbt_codec_encode(&obj, UR_OCDBT_MAGIC_BTREE, body, sizeof body, 1, 0, NULL), UR_OK);
    for (long n = 0; rc == UR_ENOMEM && n < 100; n++) {
        ur_buf_init(&out, 0);
        ur_alloc_fail_after(n);
        rc = ur_ocdbt_codec_decode(&out, obj.data, obj.len, UR_OCDBT_MAGIC_BTREE, "n", NULL, NULL);
        ur_alloc_fail_after(-1);
        ur_buf_dispose(&out);
    }
    assert_int_equal(rc, UR_OK);
    ur_buf_dispose(&obj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ocdbt_codec__crc32c_check_value),
        cmocka_unit_test(test_ocdbt_codec__varints),
        cmocka_unit_test(test_ocdbt_codec__roundtrip_raw),
        cmocka_unit_test(test_ocdbt_codec__roundtrip_zstd),
        cmocka_unit_test(test_ocdbt_codec__corrupt_raw),
        cmocka_unit_test(test_ocdbt_codec__corrupt_zstd),
        cmocka_unit_test(test_ocdbt_codec__zstd_exactly_one_frame),
        cmocka_unit_test(test_ocdbt_codec__oom),
    };
    return cmocka_run_group_tests_name("ocdbt_codec", tests, NULL, NULL);
}
