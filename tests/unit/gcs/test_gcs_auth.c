/* Where Google credentials come from (gcs_auth.c), decided without any network: the order of
 * the sources, and the errors for unusable files. Token fetching is covered against a real
 * local token endpoint in tests/interop/test_gcs.py. */
#include "gcs_impl.h"
#include "ur_test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[] = "/tmp/ur-gcs-auth-XXXXXX";

static void write_file(const char *rel, const char *text)
{
    char path[512];
    FILE *f;
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    char path[512];
    (void)state;
    if (mkdtemp(g_dir) == NULL) {
        return -1;
    }
    snprintf(path, sizeof path, "%s/home/.config/gcloud", g_dir);
    for (char *p = path + strlen(g_dir) + 1; *p; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
    mkdir(path, 0700);
    return 0;
}

static int teardown(void **state)
{
    char cmd[600];
    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A clean environment: no Google variables, HOME in the scratch dir (no ADC file yet). */
static int clean(void **state)
{
    char home[512], adc[600];
    (void)state;
    unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
    unsetenv("GCE_METADATA_HOST");
    unsetenv("CLOUDSDK_CONFIG");
    snprintf(home, sizeof home, "%s/home", g_dir);
    setenv("HOME", home, 1);
    snprintf(adc, sizeof adc, "%s/.config/gcloud/application_default_credentials.json", home);
    unlink(adc);
    return 0;
}

static const char *kind_of(int emulator, int expect_rc, ur_err *err)
{
    static char kind[32];
    gcs_auth *a = NULL;
    int rc = ur_gcs_auth_new(&a, emulator, err);
    assert_int_equal(rc, expect_rc);
    if (rc < 0) {
        assert_null(a);
        return NULL;
    }
    snprintf(kind, sizeof kind, "%s", ur_gcs_auth_kind(a));
    ur_gcs_auth_free(a);
    return kind;
}

static void test_gcs_auth__emulator_needs_nothing(void **state)
{
    ur_err err;
    (void)state;
    setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/sa.json", 1);
    assert_string_equal(kind_of(1, UR_OK, &err), "emulator");
}

static void test_gcs_auth__anonymous_when_nothing_found(void **state)
{
    ur_err err;
    char line[64];
    gcs_auth *a;
    (void)state;
    /* This test machine is no GCE VM: no DMI "Google" product name. */
    assert_string_equal(kind_of(0, UR_OK, &err), "anonymous");
    assert_int_equal(ur_gcs_auth_new(&a, 0, &err), UR_OK);
    assert_int_equal(ur_gcs_auth_header(a, line, sizeof line, &err), UR_OK);
    assert_string_equal(line, "");
    ur_gcs_auth_free(a);
}

static void test_gcs_auth__metadata_host(void **state)
{
    ur_err err;
    (void)state;
    setenv("GCE_METADATA_HOST", "127.0.0.1:1", 1);
    assert_string_equal(kind_of(0, UR_OK, &err), "metadata");
}

static void test_gcs_auth__well_known_file_before_metadata(void **state)
{
    ur_err err;
    (void)state;
    setenv("GCE_METADATA_HOST", "127.0.0.1:1", 1);
    write_file("home/.config/gcloud/application_default_credentials.json",
               "{\"type\":\"authorized_user\",\"client_id\":\"c\",\"client_secret\":\"s\","
               "\"refresh_token\":\"r\"}");
    assert_string_equal(kind_of(0, UR_OK, &err), "authorized_user");
}

static void test_gcs_auth__env_file_first(void **state)
{
    ur_err err;
    char path[512];
    (void)state;
    write_file("home/.config/gcloud/application_default_credentials.json",
               "{\"type\":\"authorized_user\",\"client_id\":\"c\",\"client_secret\":\"s\","
               "\"refresh_token\":\"r\"}");
    write_file("sa.json", "{\"type\":\"service_account\",\"client_email\":\"a@b\","
                          "\"private_key\":\"-----BEGIN PRIVATE KEY-----\\n\"}");
    snprintf(path, sizeof path, "%s/sa.json", g_dir);
    setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
    assert_string_equal(kind_of(0, UR_OK, &err), "service_account");
}

static void test_gcs_auth__unusable_files(void **state)
{
    ur_err err;
    char path[512];
    (void)state;
    snprintf(path, sizeof path, "%s/missing.json", g_dir);
    setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
    assert_null(kind_of(0, UR_EINVAL, &err));
    assert_non_null(strstr(err.where, "missing.json"));

    write_file("bad.json", "{\"type\":\"service_account\",\"client_email\":\"a@b\"}");
    snprintf(path, sizeof path, "%s/bad.json", g_dir);
    setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
    assert_null(kind_of(0, UR_EINVAL, &err));
    assert_non_null(strstr(err.msg, "\"private_key\""));

    write_file("notjson.json", "{\"type\":");
    snprintf(path, sizeof path, "%s/notjson.json", g_dir);
    setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
    assert_null(kind_of(0, UR_EINVAL, &err));

    write_file("ext.json", "{\"type\":\"external_account\"}");
    snprintf(path, sizeof path, "%s/ext.json", g_dir);
    setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
    assert_null(kind_of(0, UR_EUNSUPPORTED, &err));
    assert_non_null(strstr(err.msg, "external_account"));
}

static void test_gcs_auth__bad_private_key_fails_at_token_time(void **state)
{
    ur_err err;
    char path[512], line[64];
    gcs_auth *a;
    (void)state;
    write_file("sa.json", "{\"type\":\"service_account\",\"client_email\":\"a@b\","
                          "\"private_key\":\"not a key\",\"token_uri\":\"http://127.0.0.1:1/t\"}");
    snprintf(path, sizeof path, "%s/sa.json", g_dir);
    setenv("GOOGLE_APPLICATION_CREDENTIALS", path, 1);
    assert_int_equal(ur_gcs_auth_new(&a, 0, &err), UR_OK);
    /* Signing fails before any request: the key file is named. */
    assert_int_equal(ur_gcs_auth_header(a, line, sizeof line, &err), UR_EINVAL);
    assert_non_null(strstr(err.where, "sa.json"));
    assert_non_null(strstr(err.msg, "private_key"));
    ur_gcs_auth_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_gcs_auth__emulator_needs_nothing, clean),
        cmocka_unit_test_setup(test_gcs_auth__anonymous_when_nothing_found, clean),
        cmocka_unit_test_setup(test_gcs_auth__metadata_host, clean),
        cmocka_unit_test_setup(test_gcs_auth__well_known_file_before_metadata, clean),
        cmocka_unit_test_setup(test_gcs_auth__env_file_first, clean),
        cmocka_unit_test_setup(test_gcs_auth__unusable_files, clean),
        cmocka_unit_test_setup(test_gcs_auth__bad_private_key_fails_at_token_time, clean),
    };
    return cmocka_run_group_tests_name("gcs_auth", tests, setup, teardown);
}
