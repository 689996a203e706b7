/* The signed JWT of Google's service-account flow (RFC 7523 "JWT bearer" grant):
 *
 *   base64url(header) "." base64url(claims) "." base64url(RSASSA-PKCS1-v1_5-SHA256(first two))
 *
 * header {"alg":"RS256","typ":"JWT","kid":<private_key_id>}, claims {"iss":<client_email>,
 * "scope":..., "aud":<token_uri>, "iat":now, "exp":now+3600}; the token endpoint checks the
 * signature with the account's public key and answers with an access token. */
#include "gcs_impl.h"

#include "unroll/b64.h"

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <string.h>

int ur_gcs_b64url(ur_buf *out, const void *p, size_t n, ur_err *err)
{
    int rc = ur_b64_encode(out, p, n, UR_B64_URL, err);
    while (rc == UR_OK && out->len > 0 && out->data[out->len - 1] == '=') {
        out->len--;
    }
    return rc;
}

/* Append base64url(JSON text of j). */
static int b64url_json(ur_buf *out, const cJSON *j, ur_err *err)
{
    char *text = cJSON_PrintUnformatted(j);
    int rc;
    if (text == NULL) {
        return ur_err_oom(err);
    }
    rc = ur_gcs_b64url(out, text, strlen(text), err);
    cJSON_free(text);
    return rc;
}

static int rs256(ur_buf *sig, const char *pem_key, const void *msg, size_t n, ur_err *err)
{
    BIO *bio = BIO_new_mem_buf(pem_key, -1);
    EVP_PKEY *key = NULL;
    EVP_MD_CTX *md = NULL;
    size_t len = 0;
    int rc = UR_OK;

    if (bio == NULL) {
        return ur_err_oom(err);
    }
    key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
    if (key == NULL) {
        rc = ur_err_set(err, UR_EINVAL, "private_key is not a PEM private key OpenSSL can read");
        goto out;
    }
    if (EVP_PKEY_base_id(key) != EVP_PKEY_RSA) {
        rc = ur_err_set(err, UR_EINVAL, "private_key is not an RSA key (RS256 needs one)");
        goto out;
    }
    md = EVP_MD_CTX_new();
    if (md == NULL || EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
        EVP_DigestSign(md, NULL, &len, msg, n) != 1) {
        rc = ur_err_set(err, UR_EINVAL, "cannot sign the JWT with private_key");
        goto out;
    }
    rc = ur_buf_reserve(sig, len, err);
    if (rc < 0) {
        goto out;
    }
    if (EVP_DigestSign(md, sig->data + sig->len, &len, msg, n) != 1) {
        rc = ur_err_set(err, UR_EINVAL, "cannot sign the JWT with private_key");
        goto out;
    }
    sig->len += len;
out:
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(key);
    BIO_free(bio);
    return rc;
}

int ur_gcs_jwt_sign(ur_buf *out, const char *pem_key, const char *key_id, const char *iss,
                    const char *scope, const char *aud, int64_t iat, ur_err *err)
{
    cJSON *hdr = cJSON_CreateObject();
    cJSON *claims = cJSON_CreateObject();
    ur_buf sig;
    size_t start = out->len;
    int rc;

    ur_buf_init(&sig, 0);
    if (hdr == NULL || claims == NULL || !cJSON_AddStringToObject(hdr, "alg", "RS256") ||
        !cJSON_AddStringToObject(hdr, "typ", "JWT") ||
        (key_id != NULL && key_id[0] != '\0' && !cJSON_AddStringToObject(hdr, "kid", key_id)) ||
        !cJSON_AddStringToObject(claims, "iss", iss) ||
        !cJSON_AddStringToObject(claims, "scope", scope) ||
        !cJSON_AddStringToObject(claims, "aud", aud) ||
        !cJSON_AddNumberToObject(claims, "iat", (double)iat) ||
        !cJSON_AddNumberToObject(claims, "exp", (double)(iat + 3600))) {
        rc = ur_err_oom(err);
        goto out;
    }
    rc = b64url_json(out, hdr, err);
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, '.', err);
    }
    if (rc == UR_OK) {
        rc = b64url_json(out, claims, err);
    }
    if (rc == UR_OK) {
        rc = rs256(&sig, pem_key, out->data + start, out->len - start, err);
    }
    if (rc == UR_OK) {
        rc = ur_buf_append_byte(out, '.', err);
    }
    if (rc == UR_OK) {
        rc = ur_gcs_b64url(out, sig.data, sig.len, err);
    }
out:
    if (rc < 0) {
        out->len = start;
    }
    ur_buf_dispose(&sig);
    cJSON_Delete(hdr);
    cJSON_Delete(claims);
    return rc;
}
