/* Locations (kvstore_url.c) and the S3 driver's configuration (s3_config.c): which driver a
 * path goes to, what is refused, and where credentials, region and endpoint come from. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "kvstore/s3/s3_impl.h"
#include "unroll/kvstore.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_kvstore_url__kinds(void **state)
{
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_location_kind("ckpt/items", NULL), UR_LOC_LOCAL);
    assert_int_equal(ur_kvstore_location_kind("/abs/gs:/x", NULL), UR_LOC_LOCAL);
    assert_int_equal(ur_kvstore_location_kind("s3://b/p", NULL), UR_LOC_S3);
    assert_int_equal(ur_kvstore_location_kind("gs://b", NULL), UR_LOC_GCS);
    assert_int_equal(ur_kvstore_location_kind("gcs://b/out", &err), UR_EINVAL);
    assert_non_null(strstr(err.msg, "gcs://"));
    assert_int_equal(ur_kvstore_location_kind("s3://", &err), UR_EINVAL);
    assert_int_equal(ur_kvstore_location_kind("s3:///key", &err), UR_EINVAL);
}

/* The capability table: only a local path renames, locks and resolves; object stores are
 * reached over the network; the memory store and unknown schemes can do none of it. */
static void test_kvstore_url__caps(void **state)
{
    const unsigned local = UR_KV_CAN_RENAME | UR_KV_CAN_LOCK | UR_KV_IS_PATH;
    (void)state;
    assert_int_equal(ur_kvstore_location_caps("ckpt/items"), local);
    assert_int_equal(ur_kvstore_location_caps("/abs/gs:/x"), local);
    assert_int_equal(ur_kvstore_location_caps(""), local);
    assert_int_equal(ur_kvstore_location_caps("s3://b/p"), UR_KV_NETWORK);
    assert_int_equal(ur_kvstore_location_caps("gs://b"), UR_KV_NETWORK);
    assert_int_equal(ur_kvstore_location_caps("mem://faults/out"), 0);
    assert_int_equal(ur_kvstore_location_caps("gcs://b/out"), 0);
    assert_int_equal(ur_kvstore_location_caps("ftp://b"), 0);
    assert_int_equal(ur_kvstore_location_caps("./s3:/x"), local);
}

static void test_kvstore_url__unknown_scheme_opens_nothing(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_open_url(&kv, "gcs://bucket/out", 1, &err), UR_EINVAL);
    assert_null(kv);
    assert_int_equal(access("gcs:", F_OK), -1); /* no local directory made */
}

static void test_kvstore_url__local_path_is_the_file_store(void **state)
{
    ur_kvstore *kv = NULL;
    ur_err err;
    (void)state;
    assert_int_equal(ur_kvstore_open_url(&kv, UR_TEST_DATA_DIR, 0, &err), UR_OK);
    assert_non_null(strstr(ur_kvstore_describe(kv), "file:"));
    ur_kvstore_close(kv);
}

static void clear_aws_env(void)
{
    static const char *const names[] = {"AWS_ACCESS_KEY_ID",    "AWS_SECRET_ACCESS_KEY",
                                        "AWS_SESSION_TOKEN",    "AWS_PROFILE",
                                        "AWS_REGION",           "AWS_DEFAULT_REGION",
                                        "AWS_ENDPOINT_URL",     "AWS_ENDPOINT_URL_S3",
                                        "UNROLL_S3_ADDRESSING", "AWS_SHARED_CREDENTIALS_FILE",
                                        "AWS_CONFIG_FILE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        unsetenv(names[i]);
    }
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
}

static void test_kvstore_url__s3_config_from_environment(void **state)
{
    ur_s3_config c;
    ur_err err;
    (void)state;
    clear_aws_env();
    assert_int_equal(ur_s3__config_load(&c, "bucket", &err), UR_OK);
    assert_true(c.anonymous);
    assert_string_equal(c.region, "us-east-1");
    assert_false(c.path_style);
    setenv("AWS_ACCESS_KEY_ID", "AK", 1);
    assert_int_equal(ur_s3__config_load(&c, "bucket", &err), UR_EINVAL); /* half a pair */
    setenv("AWS_SECRET_ACCESS_KEY", "SK", 1);
    setenv("AWS_SESSION_TOKEN", "TOK", 1);
    setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
    assert_int_equal(ur_s3__config_load(&c, "bucket", &err), UR_OK);
    assert_false(c.anonymous);
    assert_string_equal(c.creds.key_id, "AK");
    assert_string_equal(c.creds.token, "TOK");
    assert_string_equal(c.region, "eu-west-3");
    assert_string_equal(c.endpoint, "http://127.0.0.1:9000");
    assert_true(c.path_style);
    setenv("AWS_ENDPOINT_URL_S3", "https://s3.example", 1);
    setenv("UNROLL_S3_ADDRESSING", "virtual", 1);
    assert_int_equal(ur_s3__config_load(&c, "bucket", &err), UR_OK);
    assert_string_equal(c.endpoint, "https://s3.example");
    assert_false(c.path_style);
    setenv("AWS_ENDPOINT_URL_S3", "s3.example", 1);
    assert_int_equal(ur_s3__config_load(&c, "bucket", &err), UR_EINVAL);
    clear_aws_env();
}

static void test_kvstore_url__s3_config_from_profile_files(void **state)
{
    char dir[] = "/tmp/ur-s3cfg-XXXXXX", cred[300], cfg[300];
    FILE *f;
    ur_s3_config c;
    ur_err err;
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(cred, sizeof cred, "%s/credentials", dir);
    snprintf(cfg, sizeof cfg, "%s/config", dir);
    f = fopen(cred, "w");
    assert_non_null(f);
    fputs("[default]\naws_access_key_id = DEF\naws_secret_access_key = DEFSECRET\n\n"
          "# a comment\n[work]\naws_access_key_id=WORK\naws_secret_access_key=WS\n"
          "aws_session_token = WT\n",
          f);
    fclose(f);
    f = fopen(cfg, "w");
    assert_non_null(f);
    fputs("[default]\nregion = us-west-2\n[profile work]\nregion = ap-south-1\n", f);
    fclose(f);
    clear_aws_env();
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", cfg, 1);
    assert_int_equal(ur_s3__config_load(&c, "b.with.dots", &err), UR_OK);
    assert_string_equal(c.creds.key_id, "DEF");
    assert_string_equal(c.creds.secret, "DEFSECRET");
    assert_string_equal(c.region, "us-west-2");
    assert_true(c.path_style); /* a dotted bucket */
    setenv("AWS_PROFILE", "work", 1);
    assert_int_equal(ur_s3__config_load(&c, "bucket", &err), UR_OK);
    assert_string_equal(c.creds.key_id, "WORK");
    assert_string_equal(c.creds.token, "WT");
    assert_string_equal(c.region, "ap-south-1");
    setenv("AWS_PROFILE", "nope", 1);
    assert_int_equal(ur_s3__config_load(&c, "bucket", &err), UR_EINVAL);
    clear_aws_env();
    unlink(cred);
    unlink(cfg);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvstore_url__kinds),
        cmocka_unit_test(test_kvstore_url__caps),
        cmocka_unit_test(test_kvstore_url__unknown_scheme_opens_nothing),
        cmocka_unit_test(test_kvstore_url__local_path_is_the_file_store),
        cmocka_unit_test(test_kvstore_url__s3_config_from_environment),
        cmocka_unit_test(test_kvstore_url__s3_config_from_profile_files),
    };
    return cmocka_run_group_tests_name("kvstore_url", tests, NULL, NULL);
}
