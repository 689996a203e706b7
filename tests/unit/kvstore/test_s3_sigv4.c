/* SigV4 for S3 (src/kvstore/s3/s3_sigv4.c) against signatures computed by others: AWS's
 * published examples in "Signature Calculations for the Authorization Header" of the S3 API
 * reference (GET Bucket Lifecycle, GET Bucket list), and botocore 1.43's S3SigV4Auth for the
 * cases those examples lack (a session token, a PUT with a body, a key that needs encoding,
 * another region, a host with a port). A wrong byte anywhere in the canonical request, the
 * string to sign or the key derivation changes every signature. */
#include "s3_impl.h"

#include "unroll/buf.h"
#include "unroll/http.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define HELLO_SHA256 "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
#define T_20130524 ((time_t)1369353600) /* 2013-05-24T00:00:00Z, the examples' date */

static ur_s3_creds example_creds(const char *token)
{
    ur_s3_creds c;
    memset(&c, 0, sizeof c);
    strcpy(c.key_id, "AKIAIOSFODNN7EXAMPLE");
    strcpy(c.secret, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
    strcpy(c.token, token);
    return c;
}

static void check(const ur_s3_creds *c, const char *region, const char *method, const char *host,
                  const char *uri, const char *query, const char *payload_hash, const char *want)
{
    char amz_date[20], sig[65];
    ur_err err;
    ur_err_clear(&err);
    assert_int_equal(ur_s3__signature(c, region, method, host, uri, query, payload_hash,
                                      T_20130524, amz_date, sig, &err),
                     UR_OK);
    assert_string_equal(amz_date, "20130524T000000Z");
    assert_string_equal(sig, want);
}

static void test_s3_sigv4__aws_published_examples(void **state)
{
    ur_s3_creds c = example_creds("");
    (void)state;
    /* GET Bucket Lifecycle: GET /?lifecycle */
    check(&c, "us-east-1", "GET", "examplebucket.s3.amazonaws.com", "/",
          "lifecycle=", EMPTY_SHA256,
          "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
    /* Get Bucket (List Objects): GET /?max-keys=2&prefix=J */
    check(&c, "us-east-1", "GET", "examplebucket.s3.amazonaws.com", "/", "max-keys=2&prefix=J",
          EMPTY_SHA256, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
    assert_string_equal(ur_s3__signed_headers(&c), "host;x-amz-content-sha256;x-amz-date");
}

static void test_s3_sigv4__botocore_session_token_put_and_list(void **state)
{
    ur_s3_creds c = example_creds("FwoGZXIvYXdzEXAMPLETOKEN//+=");
    ur_buf uri, query;
    ur_err err;
    (void)state;
    ur_err_clear(&err);
    ur_buf_init(&uri, 0);
    ur_buf_init(&query, 0);
    /* the key "dir/a b+c.txt" in path style: encoded once, '/' kept */
    assert_int_equal(ur_buf_printf(&uri, &err, "/bucket/"), UR_OK);
    assert_int_equal(ur_http_encode(&uri, "dir/a b+c.txt", 1, &err), UR_OK);
    assert_int_equal(ur_buf_append(&uri, "", 1, &err), UR_OK);
    assert_string_equal((const char *)uri.data, "/bucket/dir/a%20b%2Bc.txt");
    check(&c, "eu-west-1", "PUT", "127.0.0.1:8333", (const char *)uri.data, "", HELLO_SHA256,
          "b8d107f1dd92f8d01b66ce2b9f66fb9bdda1d9f50f959b3c49a9b4f51ebdb17e");
    /* a listing: a query value's '/' is encoded */
    assert_int_equal(ur_buf_printf(&query, &err, "list-type=2&prefix="), UR_OK);
    assert_int_equal(ur_http_encode(&query, "dir/", 0, &err), UR_OK);
    assert_int_equal(ur_buf_append(&query, "", 1, &err), UR_OK);
    assert_string_equal((const char *)query.data, "list-type=2&prefix=dir%2F");
    check(&c, "eu-west-1", "GET", "127.0.0.1:8333", "/bucket", (const char *)query.data,
          EMPTY_SHA256, "af71f742826800f0358182c0524f91177fc8bceccab9cf4098d13d8d90df6d04");
    assert_string_equal(ur_s3__signed_headers(&c),
                        "host;x-amz-content-sha256;x-amz-date;x-amz-security-token");
    ur_buf_dispose(&uri);
    ur_buf_dispose(&query);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_s3_sigv4__aws_published_examples),
        cmocka_unit_test(test_s3_sigv4__botocore_session_token_put_and_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
