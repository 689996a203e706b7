/* The HTTP layer's pure parts (unroll/http.h): the scrubbing of credentials out of server
 * text, and the default time budget. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void redact(const char *in, char *out, size_t n)
{
    ur_http_redact(in, strlen(in), out, n);
}

/* `out` holds none of `secret` and says where it was cut. */
static void assert_scrubbed(const char *out, const char *secret)
{
    if (strstr(out, secret) != NULL) {
        fail_msg("'%s' still in '%s'", secret, out);
    }
    assert_non_null(strstr(out, "[redacted]"));
}

static void test_http__registered_secrets_are_removed(void **state)
{
    char out[512];
    (void)state;
    ur_http_secret_add("wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY");
    ur_http_secret_add("IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN");
    ur_http_secret_add("abc"); /* too short to register: ordinary text stays */
    redact("<Error><Message>echo: secret wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY and "
           "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKEN; abc</Message></Error>",
           out, sizeof out);
    assert_scrubbed(out, "wJalrXUtnFEMI");
    assert_scrubbed(out, "IQoJb3JpZ2lu");
    assert_non_null(strstr(out, "; abc</Message>"));
    /* percent-encoded, as a form body or query carries it */
    redact("x=wJalrXUtnFEMI%2FK7MDENG%2BbPxRfiCYzEXAMPLEKEY&y=1", out, sizeof out);
    assert_scrubbed(out, "wJalrXUtnFEMI");
    assert_non_null(strstr(out, "&y=1"));
    /* cut off by the end of the quoted text */
    redact("... IQoJb3JpZ2luX2Vj", out, sizeof out);
    assert_scrubbed(out, "IQoJb3JpZ2lu");
}

static void test_http__credential_shapes_are_removed(void **state)
{
    static const struct {
        const char *text, *secret, *kept;
    } cases[] = {
        {"GET / HTTP/1.1\r\nAuthorization: Bearer ya29.a0AfH6SMBunknown\r\nHost: x\r\n",
         "ya29.a0AfH6", "Host: x"},
        {"authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, "
         "SignedHeaders=host, Signature=f00dbeef0123\r\nx: y",
         "f00dbeef0123", "x: y"},
        {"x-amz-security-token:FwoGZXIvYXdzEXAMPLE\nhost:h", "FwoGZXIvYXdzEXAMPLE", "host:h"},
        {"/b/k?X-Amz-Security-Token=FwoGZXIv%2FYXdz&X-Amz-Signature=abcdef12&partNumber=1",
         "FwoGZXIv", "partNumber=1"},
        {"/b/k?X-Amz-Signature=abcdef1234567&x=1", "abcdef1234567", "x=1"},
        {"{\"client_id\": \"cid\", \"client_secret\": \"d-FL95Q19q7MQmFpd7hHD0Ty\"}",
         "d-FL95Q19q7MQmFpd7hHD0Ty", "\"cid\""},
        {"grant_type=refresh_token&client_id=cid&client_secret=GOCSPX-abc123&refresh_token=1%2F"
         "/0gLongRefresh",
         "GOCSPX-abc123", "client_id=cid"},
        {"grant_type=urn%3Aietf&assertion=eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0.c2lnbmF0dXJl",
         "eyJhbGciOiJSUzI1NiJ9", "grant_type="},
        {"token was eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.e30.sig in the echo",
         "eyJhbGciOiJSUzI1NiIs", "in the echo"},
        {"key: -----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\\n-----END PRIVATE "
         "KEY-----\\n\", next",
         "MIIEvQIBADANBgkq", "next"},
        {"a stray ya29.c.b0AXv0zTOKEN in text", "ya29.c.b0AXv0zTOKEN", "in text"},
        {"WWW-Authenticate: Bearer realm=x, Bearer abc.def-ghi", "abc.def-ghi", "WWW-"},
    };
    char out[1024];
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        redact(cases[i].text, out, sizeof out);
        assert_scrubbed(out, cases[i].secret);
        if (strstr(out, cases[i].kept) == NULL) {
            fail_msg("case %zu: '%s' lost from '%s'", i, cases[i].kept, out);
        }
    }
}

static void test_http__plain_error_text_is_kept(void **state)
{
    static const char *const plain[] = {
        ("<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we "
         "calculated does not match the signature you provided.</Message></Error>"),
        "{\"error\": {\"code\": 503, \"message\": \"injected fault\"}}",
        "<Code>AuthorizationHeaderMalformed</Code>",
    };
    char out[512];
    (void)state;
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        redact(plain[i], out, sizeof out);
        assert_string_equal(out, plain[i]);
    }
    /* the output is bounded and terminated */
    redact("0123456789", out, 5);
    assert_string_equal(out, "0123");
}

static void test_http__default_budget_fails_a_silent_server_in_under_two_minutes(void **state)
{
    static const char *const vars[] = {"UNROLL_HTTP_TIMEOUT_S", "UNROLL_HTTP_CONNECT_TIMEOUT_S",
                                       "UNROLL_HTTP_FIRST_BYTE_S", "UNROLL_HTTP_STALL_S",
                                       "UNROLL_HTTP_DEADLINE_S"};
    ur_http_opts o;
    (void)state;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        unsetenv(vars[i]);
    }
    ur_http_opts_init(&o);
    assert_true(o.connect_timeout_s > 0 && o.first_byte_s > 0 && o.stall_s > 0);
    /* the last attempt starts before the deadline and waits at most this long */
    assert_true(o.deadline_s + o.first_byte_s + o.connect_timeout_s < 120);
    assert_true(o.deadline_s + o.stall_s < 120);
    setenv("UNROLL_HTTP_TIMEOUT_S", "3", 1);
    setenv("UNROLL_HTTP_STALL_S", "7", 1);
    setenv("UNROLL_HTTP_DEADLINE_S", "9", 1);
    ur_http_opts_init(&o);
    assert_int_equal(o.connect_timeout_s, 3);
    assert_int_equal(o.first_byte_s, 3);
    assert_int_equal(o.stall_s, 7);
    assert_int_equal(o.deadline_s, 9);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        unsetenv(vars[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http__registered_secrets_are_removed),
        cmocka_unit_test(test_http__credential_shapes_are_removed),
        cmocka_unit_test(test_http__plain_error_text_is_kept),
        cmocka_unit_test(test_http__default_budget_fails_a_silent_server_in_under_two_minutes),
    };
    return cmocka_run_group_tests_name("http", tests, NULL, NULL);
}
