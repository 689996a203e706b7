/* Base64 in both alphabets: RFC 4648 test vectors, round trips, and rejected input. */
#include "ur_test.h"

#include "unroll/b64.h"

static void check(const char *plain, const char *enc, ur_b64_alphabet abc)
{
    ur_buf b;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_b64_encode(&b, plain, strlen(plain), abc, NULL), UR_OK);
    assert_int_equal(b.len, strlen(enc));
    assert_memory_equal(b.data, enc, b.len);
    ur_buf_reset(&b);
    assert_int_equal(ur_b64_decode(&b, enc, strlen(enc), abc, NULL), UR_OK);
    assert_int_equal(b.len, strlen(plain));
    assert_memory_equal(b.data, plain, b.len);
    ur_buf_dispose(&b);
}

static void test_ur_b64__rfc4648_vectors(void **state)
{
    (void)state;
    check("", "", UR_B64_STD);
    check("f", "Zg==", UR_B64_STD);
    check("fo", "Zm8=", UR_B64_STD);
    check("foo", "Zm9v", UR_B64_STD);
    check("foob", "Zm9vYg==", UR_B64_STD);
    check("fooba", "Zm9vYmE=", UR_B64_STD);
    check("foobar", "Zm9vYmFy", UR_B64_STD);
}

static void test_ur_b64__alphabets_differ_in_two_characters(void **state)
{
    (void)state;
    check("\xfb\xff\xbf", "+/+/", UR_B64_STD);
    check("\xfb\xff\xbf", "-_-_", UR_B64_URL);
}

static void test_ur_b64__bad_input_is_corrupt(void **state)
{
    static const char *bad[] = {"Zg=", "Zg=a", "=Zg=", "Z===", "Zm9v!A==", "Zm9vYg==Zg=="};
    ur_buf b;
    ur_err err;
    (void)state;
    ur_buf_init(&b, 0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ur_b64_decode(&b, bad[i], strlen(bad[i]), UR_B64_STD, &err), UR_ECORRUPT);
    }
    assert_int_equal(ur_b64_decode(&b, "-_-_", 4, UR_B64_STD, &err), UR_ECORRUPT);
    assert_int_equal(ur_b64_decode(&b, "+/+/", 4, UR_B64_URL, &err), UR_ECORRUPT);
    ur_buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ur_b64__rfc4648_vectors),
        cmocka_unit_test(test_ur_b64__alphabets_differ_in_two_characters),
        cmocka_unit_test(test_ur_b64__bad_input_is_corrupt),
    };
    return cmocka_run_group_tests_name("ur_b64", tests, NULL, NULL);
}
