/* CRC-32C check values, incremental use, and agreement with a bitwise reference. */
#include "ur_test.h"

#include "unroll/crc32c.h"

#include <stdlib.h>

/* Independent bit-at-a-time implementation. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        }
    }
    return ~c;
}

static void test_ur_crc32c__check_value(void **state)
{
    (void)state;
    assert_int_equal(ur_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(ur_crc32c(0, "", 0), 0);
}

static void test_ur_crc32c__incremental_equals_one_shot(void **state)
{
    uint8_t buf[1000];
    unsigned seed = 12345;
    (void)state;
    for (size_t i = 0; i < sizeof buf; i++) {
        seed = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
    for (size_t len = 0; len <= sizeof buf; len += 37) {
        for (size_t cut = 0; cut <= len; cut += 13) {
            uint32_t a = ur_crc32c(ur_crc32c(0, buf, cut), buf + cut, len - cut);
            assert_int_equal(a, crc_bitwise(buf, len));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_crc32c__check_value),
        cmocka_unit_test(test_ur_crc32c__incremental_equals_one_shot),
    };
    return cmocka_run_group_tests_name("ur_crc32c", tests, NULL, NULL);
}
