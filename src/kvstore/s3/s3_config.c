/* Where the S3 driver finds credentials, region and endpoint: the AWS SDKs' order (s3_impl.h).
 * The shared files are INI: "[name]" sections (in config: "[profile name]", "[default]"),
 * "key = value" lines, '#' or ';' comments. */
#define _POSIX_C_SOURCE 200809L
#include "s3_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

static char *trim(char *s)
{
    char *e;
    while (*s == ' ' || *s == '\t') {
        s++;
    }
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) {
        *--e = '\0';
    }
    return s;
}

/* Copy `key`'s value in section `section` of INI file `path` to out. 1 found, 0 not (file or
 * key absent). `*section_seen` is set when the section exists. */
static int ini_get(const char *path, const char *section, const char *key, char *out, size_t n,
                   int *section_seen)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int in = 0, found = 0;
    if (f == NULL) {
        return 0;
    }
    while (!found && fgets(line, sizeof line, f) != NULL) {
        char *s = trim(line), *eq;
        if (s[0] == '#' || s[0] == ';' || s[0] == '\0') {
            continue;
        }
        if (s[0] == '[') {
            char *e = strchr(s, ']');
            if (e != NULL) {
                *e = '\0';
                in = strcmp(trim(s + 1), section) == 0;
                if (in && section_seen != NULL) {
                    *section_seen = 1;
                }
            }
            continue;
        }
        eq = strchr(s, '=');
        if (in && eq != NULL) {
            *eq = '\0';
            if (strcmp(trim(s), key) == 0) {
                snprintf(out, n, "%s", trim(eq + 1));
                found = 1;
            }
        }
    }
    fclose(f);
    return found;
}

static void home_file(char *out, size_t n, const char *env_name, const char *rel)
{
    const char *p = env(env_name), *home = env("HOME");
    if (p != NULL) {
        snprintf(out, n, "%s", p);
    } else {
        snprintf(out, n, "%s/%s", home != NULL ? home : ".", rel);
    }
}

int ur_s3__config_load(ur_s3_config *c, const char *bucket, ur_err *err)
{
    const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
    const char *profile = env("AWS_PROFILE"), *v;
    char cred_path[1024], cfg_path[1024], section[300];
    int seen = 0;

    memset(c, 0, sizeof *c);
    home_file(cred_path, sizeof cred_path, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    home_file(cfg_path, sizeof cfg_path, "AWS_CONFIG_FILE", ".aws/config");
    if ((id != NULL) != (secret != NULL)) {
        return ur_err_set(err, UR_EINVAL,
                          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
    }
    if (id != NULL) {
        snprintf(c->creds.key_id, sizeof c->creds.key_id, "%s", id);
        snprintf(c->creds.secret, sizeof c->creds.secret, "%s", secret);
        if ((v = env("AWS_SESSION_TOKEN")) != NULL) {
            snprintf(c->creds.token, sizeof c->creds.token, "%s", v);
        }
        snprintf(c->creds_from, sizeof c->creds_from, "AWS_ACCESS_KEY_ID");
    } else {
        const char *name = profile != NULL ? profile : "default";
        int has_id = ini_get(cred_path, name, "aws_access_key_id", c->creds.key_id,
                             sizeof c->creds.key_id, &seen);
        int has_secret = ini_get(cred_path, name, "aws_secret_access_key", c->creds.secret,
                                 sizeof c->creds.secret, NULL);
        (void)ini_get(cred_path, name, "aws_session_token", c->creds.token, sizeof c->creds.token,
                      NULL);
        if (profile != NULL && !seen) {
            return ur_err_set(err, UR_EINVAL, "AWS_PROFILE '%s' is not a section of %s", profile,
                              cred_path);
        }
        if (has_id != has_secret) {
            return ur_err_set(err, UR_EINVAL,
                              "%s [%s]: aws_access_key_id and aws_secret_access_key must be set "
                              "together",
                              cred_path, name);
        }
        c->anonymous = !has_id;
        snprintf(c->creds_from, sizeof c->creds_from, "%s [%s]", cred_path, name);
    }
    if ((v = env("AWS_REGION")) != NULL || (v = env("AWS_DEFAULT_REGION")) != NULL) {
        snprintf(c->region, sizeof c->region, "%s", v);
    } else {
        const char *name = profile != NULL ? profile : "default";
        if (strcmp(name, "default") == 0) {
            snprintf(section, sizeof section, "default");
        } else {
            snprintf(section, sizeof section, "profile %s", name);
        }
        if (!ini_get(cfg_path, section, "region", c->region, sizeof c->region, NULL)) {
            snprintf(c->region, sizeof c->region, "us-east-1");
        }
    }
    if ((v = env("AWS_ENDPOINT_URL_S3")) != NULL || (v = env("AWS_ENDPOINT_URL")) != NULL) {
        size_t n;
        if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) {
            return ur_err_set(err, UR_EINVAL,
                              "S3 endpoint '%s' must start with http:// or https://", v);
        }
        snprintf(c->endpoint, sizeof c->endpoint, "%s", v);
        n = strlen(c->endpoint);
        while (n > 0 && c->endpoint[n - 1] == '/') {
            c->endpoint[--n] = '\0';
        }
        c->path_style = 1;
    }
    if (strchr(bucket, '.') != NULL) {
        c->path_style = 1; /* a dotted bucket breaks the wildcard TLS certificate */
    }
    if ((v = env("UNROLL_S3_ADDRESSING")) != NULL) {
        if (strcmp(v, "path") == 0) {
            c->path_style = 1;
        } else if (strcmp(v, "virtual") == 0) {
            c->path_style = 0;
        } else {
            return ur_err_set(err, UR_EINVAL,
                              "UNROLL_S3_ADDRESSING must be path or virtual, not '%s'", v);
        }
    }
    return UR_OK;
}
