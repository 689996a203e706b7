/* The RS256 JWT of the service-account flow: its three parts, its claims, and a signature
 * that OpenSSL verifies with the public half of a key generated here. */
#include "gcs_impl.h"
#include "ur_test.h"

#include "unroll/b64.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <string.h>

static EVP_PKEY *g_key;
static char *g_pem;

static int setup(void **state)
{
    BIO *bio = BIO_new(BIO_s_mem());
    BUF_MEM *mem;
    (void)state;
    g_key = EVP_RSA_gen(2048);
    if (g_key == NULL || bio == NULL ||
        PEM_write_bio_PrivateKey(bio, g_key, NULL, NULL, 0, NULL, NULL) != 1) {
        return -1;
    }
    BIO_get_mem_ptr(bio, &mem);
    g_pem = calloc(1, mem->length + 1);
    memcpy(g_pem, mem->data, mem->length);
    BIO_free(bio);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    EVP_PKEY_free(g_key);
    free(g_pem);
    return 0;
}

/* Decode one base64url part (no padding) into out. */
static void b64url_decode(ur_buf *out, const char *s, size_t n)
{
    char tmp[4096];
    assert_true(n + 4 < sizeof tmp);
    memcpy(tmp, s, n);
    while (n % 4 != 0) {
        tmp[n++] = '=';
    }
    assert_int_equal(ur_b64_decode(out, tmp, n, UR_B64_URL, NULL), UR_OK);
}

static void test_gcs_jwt__signature_verifies(void **state)
{
    ur_buf jwt, part, sig;
    ur_err err;
    const char *d1, *d2;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    (void)state;
    ur_buf_init(&jwt, 0);
    ur_buf_init(&part, 0);
    ur_buf_init(&sig, 0);
    assert_int_equal(ur_gcs_jwt_sign(&jwt, g_pem, "kid1", "sa@p.iam.gserviceaccount.com",
                                     "https://www.googleapis.com/auth/devstorage.read_write",
                                     "http://127.0.0.1:1/token", 1700000000, &err),
                     UR_OK);
    ur_buf_append_byte(&jwt, '\0', NULL);
    d1 = strchr((const char *)jwt.data, '.');
    assert_non_null(d1);
    d2 = strchr(d1 + 1, '.');
    assert_non_null(d2);
    assert_null(strchr((const char *)jwt.data, '='));

    b64url_decode(&part, (const char *)jwt.data, (size_t)(d1 - (const char *)jwt.data));
    ur_buf_append_byte(&part, '\0', NULL);
    assert_string_equal((const char *)part.data,
                        "{\"alg\":\"RS256\",\"typ\":\"JWT\",\"kid\":\"kid1\"}");
    ur_buf_reset(&part);
    b64url_decode(&part, d1 + 1, (size_t)(d2 - d1 - 1));
    ur_buf_append_byte(&part, '\0', NULL);
    assert_non_null(strstr((const char *)part.data, "\"iss\":\"sa@p.iam.gserviceaccount.com\""));
    assert_non_null(strstr((const char *)part.data, "\"aud\":\"http://127.0.0.1:1/token\""));
    assert_non_null(strstr((const char *)part.data, "\"iat\":1700000000"));
    assert_non_null(strstr((const char *)part.data, "\"exp\":1700003600"));

    b64url_decode(&sig, d2 + 1, strlen(d2 + 1));
    assert_int_equal(sig.len, 256);
    assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, g_key), 1);
    assert_int_equal(
        EVP_DigestVerify(md, sig.data, sig.len, jwt.data, (size_t)(d2 - (const char *)jwt.data)),
        1);
    /* A flipped byte of the signed text no longer verifies. */
    jwt.data[3] ^= 1;
    assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, g_key), 1);
    assert_int_not_equal(
        EVP_DigestVerify(md, sig.data, sig.len, jwt.data, (size_t)(d2 - (const char *)jwt.data)),
        1);
    EVP_MD_CTX_free(md);
    ur_buf_dispose(&jwt);
    ur_buf_dispose(&part);
    ur_buf_dispose(&sig);
}

static void test_gcs_jwt__bad_key_is_einval(void **state)
{
    ur_buf jwt;
    ur_err err;
    (void)state;
    ur_buf_init(&jwt, 0);
    assert_int_equal(ur_gcs_jwt_sign(&jwt,
                                     "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE "
                                     "KEY-----\n",
                                     NULL, "a", "s", "u", 1, &err),
                     UR_EINVAL);
    assert_non_null(strstr(err.msg, "private_key"));
    assert_int_equal(jwt.len, 0);
    ur_buf_dispose(&jwt);
}

static void test_gcs_jwt__b64url_unpadded(void **state)
{
    ur_buf b;
    (void)state;
    ur_buf_init(&b, 0);
    assert_int_equal(ur_gcs_b64url(&b, "\xfb\xff", 2, NULL), UR_OK);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "-_8", 3);
    ur_buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gcs_jwt__signature_verifies),
        cmocka_unit_test(test_gcs_jwt__bad_key_is_einval),
        cmocka_unit_test(test_gcs_jwt__b64url_unpadded),
    };
    return cmocka_run_group_tests_name("gcs_jwt", tests, setup, teardown);
}
