/* Internals of the S3 driver (src/kvstore/s3/): credentials, configuration and SigV4.
 * Not part of the cross-layer API: the driver is reached through ur_kvstore_open_url. */
#ifndef UNROLL_S3_IMPL_H
#define UNROLL_S3_IMPL_H

#include "unroll/err.h"
#include "unroll/http.h"

#include <stddef.h>
#include <time.h>

typedef struct ur_s3_creds {
    char key_id[128];
    char secret[256];
    char token[2048]; /* "" when none */
} ur_s3_creds;

typedef struct ur_s3_config {
    ur_s3_creds creds;
    int anonymous;       /* no credentials found: requests go unsigned */
    char region[64];
    char endpoint[512];  /* "" for AWS itself; else scheme://host[:port] without a trailing / */
    int path_style;      /* 1: endpoint/bucket/key; 0: bucket.endpoint/key */
    char creds_from[1400]; /* where the credentials came from, for messages */
} ur_s3_config;

/* The configuration as the AWS SDKs find it: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
 * AWS_SESSION_TOKEN, else the profile AWS_PROFILE (or "default") of ~/.aws/credentials
 * (AWS_SHARED_CREDENTIALS_FILE), else anonymous; region from AWS_REGION, AWS_DEFAULT_REGION,
 * the profile in ~/.aws/config (AWS_CONFIG_FILE), else us-east-1; endpoint from
 * AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL. Addressing: UNROLL_S3_ADDRESSING=path|virtual, else
 * path-style for a custom endpoint or a bucket name with a dot, virtual-hosted otherwise.
 * UR_EINVAL for a half-set pair of keys or a named profile that is not there. */
int ur_s3__config_load(ur_s3_config *c, const char *bucket, ur_err *err);

/* Lowercase hex SHA-256 of n bytes. */
void ur_s3__sha256_hex(const void *data, size_t n, char out[65]);

/* The request's x-amz-date ("20130524T000000Z") and its SigV4 signature (64 hex digits) for
 * the signed headers below; the canonical request and the key derivation are in s3_sigv4.c.
 * Pure: what the unit test checks against AWS's published examples. UR_ENOMEM. */
int ur_s3__signature(const ur_s3_creds *c, const char *region, const char *method,
                     const char *host, const char *canon_uri, const char *canon_query,
                     const char *payload_hash, time_t now, char amz_date[20], char sig[65],
                     ur_err *err);

/* "host;x-amz-content-sha256;x-amz-date", with ";x-amz-security-token" when c has a token. */
const char *ur_s3__signed_headers(const ur_s3_creds *c);

/* Add x-amz-date, x-amz-content-sha256, [x-amz-security-token] and Authorization headers
 * that sign the request (see s3_sigv4.c). */
int ur_s3__sign(const ur_s3_creds *c, const char *region, const char *method, const char *host,
                const char *canon_uri, const char *canon_query, const char *payload_hash,
                time_t now, ur_http_headers *hs, ur_err *err);

#endif
