/* AWS Signature Version 4 for S3 requests, with OpenSSL's SHA-256 and HMAC.
 * Spec: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html
 *
 *   canonical request = METHOD \n /canonical/uri \n sorted&encoded=query \n
 *                       host:..\n x-amz-content-sha256:..\n x-amz-date:..\n
 *                       [x-amz-security-token:..\n] \n
 *                       signed;header;names \n hex(sha256(payload))
 *   string to sign    = AWS4-HMAC-SHA256 \n <amz date> \n
 *                       <date>/<region>/s3/aws4_request \n
 *                       hex(sha256(canonical request))
 *   signing key       = HMAC(HMAC(HMAC(HMAC("AWS4" + secret, date), region), "s3"),
 *                            "aws4_request")
 *
 * The caller builds the URI and query in canonical form already (encoded once, query keys
 * sorted), so the bytes signed are the bytes sent. */
#include "s3_impl.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[2 * n] = '\0';
}

void ur_s3__sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];
    SHA256(data != NULL ? data : (const void *)"", n, md);
    hex(md, sizeof md, out);
}

static void hmac(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
    unsigned int olen = 32;
    HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg), out, &olen);
}

int ur_s3__signature(const ur_s3_creds *c, const char *region, const char *method,
                     const char *host, const char *canon_uri, const char *canon_query,
                     const char *payload_hash, time_t now, char amz_date[20], char sig[65],
                     ur_err *err)
{
    struct tm tm;
    char date[10], creq_hash[65];
    unsigned char k[32], k2[32];
    char secret_key[300];
    ur_buf creq, sts;
    int rc;

    gmtime_r(&now, &tm);
    strftime(amz_date, 20, "%Y%m%dT%H%M%SZ", &tm);
    strftime(date, sizeof date, "%Y%m%d", &tm);
    ur_buf_init(&creq, 0);
    ur_buf_init(&sts, 0);
    rc = ur_buf_printf(&creq, err, "%s\n%s\n%s\nhost:%s\nx-amz-content-sha256:%s\nx-amz-date:%s\n",
                       method, canon_uri, canon_query, host, payload_hash, amz_date);
    if (rc == UR_OK && c->token[0]) {
        rc = ur_buf_printf(&creq, err, "x-amz-security-token:%s\n", c->token);
    }
    if (rc == UR_OK) {
        rc = ur_buf_printf(&creq, err, "\n%s\n%s", ur_s3__signed_headers(c), payload_hash);
    }
    if (rc < 0) {
        goto out;
    }
    ur_s3__sha256_hex(creq.data, creq.len, creq_hash);
    rc = ur_buf_printf(&sts, err, "AWS4-HMAC-SHA256\n%s\n%s/%s/s3/aws4_request\n%s", amz_date,
                       date, region, creq_hash);
    if (rc < 0) {
        goto out;
    }
    snprintf(secret_key, sizeof secret_key, "AWS4%s", c->secret);
    hmac(secret_key, strlen(secret_key), date, k);
    hmac(k, 32, region, k2);
    hmac(k2, 32, "s3", k);
    hmac(k, 32, "aws4_request", k2);
    {
        unsigned char s[32];
        unsigned int olen = 32;
        HMAC(EVP_sha256(), k2, 32, sts.data, sts.len, s, &olen);
        hex(s, 32, sig);
    }
out:
    memset(secret_key, 0, sizeof secret_key);
    memset(k, 0, sizeof k);
    memset(k2, 0, sizeof k2);
    ur_buf_dispose(&creq);
    ur_buf_dispose(&sts);
    return rc;
}

const char *ur_s3__signed_headers(const ur_s3_creds *c)
{
    return c->token[0] ? "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
                       : "host;x-amz-content-sha256;x-amz-date";
}

int ur_s3__sign(const ur_s3_creds *c, const char *region, const char *method, const char *host,
                const char *canon_uri, const char *canon_query, const char *payload_hash,
                time_t now, ur_http_headers *hs, ur_err *err)
{
    char amz_date[20], sig[65];
    int rc = ur_s3__signature(c, region, method, host, canon_uri, canon_query, payload_hash, now,
                              amz_date, sig, err);

    if (rc == UR_OK) {
        rc = ur_http_headers_add(hs, err, "x-amz-date: %s", amz_date);
    }
    if (rc == UR_OK) {
        rc = ur_http_headers_add(hs, err, "x-amz-content-sha256: %s", payload_hash);
    }
    if (rc == UR_OK && c->token[0]) {
        rc = ur_http_headers_add(hs, err, "x-amz-security-token: %s", c->token);
    }
    if (rc == UR_OK) {
        /* amz_date's first 8 characters are the scope's date */
        rc = ur_http_headers_add(hs, err,
                                 "Authorization: AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/s3/"
                                 "aws4_request, SignedHeaders=%s, Signature=%s",
                                 c->key_id, amz_date, region, ur_s3__signed_headers(c), sig);
    }
    return rc;
}
