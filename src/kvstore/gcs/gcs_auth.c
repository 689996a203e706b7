/* Google credentials, found in the order of Google's client libraries (google-auth's
 * `default()`, TensorStore's google_auth_provider):
 *
 *   1. STORAGE_EMULATOR_HOST set: an emulator, no credentials at all;
 *   2. GOOGLE_APPLICATION_CREDENTIALS: a JSON file, "service_account" (a JWT signed RS256 with
 *      its private_key, exchanged at its token_uri) or "authorized_user" (`gcloud auth
 *      application-default login`: its refresh_token exchanged at its token_uri, by default
 *      Google's OAuth endpoint); a named file that is missing is an error, not a fall-through;
 *   3. the well-known ADC file $CLOUDSDK_CONFIG/application_default_credentials.json, else
 *      ~/.config/gcloud/application_default_credentials.json;
 *   4. the metadata server of GCE and TPU VMs (GCE_METADATA_HOST, else metadata.google.internal),
 *      tried when GCE_METADATA_HOST is set or the machine says it is a Google Compute Engine
 *      one (DMI product name, as google-auth checks); no probe of a link-local address
 *      elsewhere;
 *   5. anonymous (public buckets).
 *
 * An access token is cached and refreshed REFRESH_MARGIN_S before it expires. */
#include "gcs_impl.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"
#include "unroll/fs.h"
#include "unroll/json.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REFRESH_MARGIN_S 240 /* google-auth refreshes 3 min 45 s early */
#define CRED_FILE_MAX ((size_t)1 << 20)
#define DEFAULT_TOKEN_URI "https://oauth2.googleapis.com/token"
#define DEFAULT_METADATA "metadata.google.internal"
#define SCOPE_RW "https://www.googleapis.com/auth/devstorage.read_write"

typedef enum { K_EMULATOR, K_ANON, K_SERVICE, K_USER, K_METADATA } auth_kind;

struct gcs_auth {
    auth_kind kind;
    char *file;        /* the credentials file, for messages */
    char *token_uri;   /* service_account, authorized_user */
    char *email;       /* service_account: client_email */
    char *key_pem;     /* service_account: private_key */
    char *key_id;      /* service_account: private_key_id */
    char *client_id;   /* authorized_user */
    char *client_secret;
    char *refresh_token;
    char *metadata_url; /* metadata: the token URL */
    /* its own client: a token is fetched inside another request's auth hook, which holds
     * one of the storage client's slots */
    ur_http *http;
    pthread_mutex_t mu;
    char token[4096]; /* the current access token, "" when none */
    time_t expiry;    /* wall-clock seconds */
    unsigned refs;    /* stores sharing it (under g_share) */
};

/* One set of credentials per process (per emulator flag), shared by every store, as Google's
 * libraries share theirs: a run that opens several gs:// locations, and its parallel readers,
 * fetch one access token, not one each. */
static pthread_mutex_t g_share = PTHREAD_MUTEX_INITIALIZER;
static gcs_auth *g_shared[2];

static void auth_destroy(gcs_auth *a);

static char *json_str(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsString(v) ? ur_strdup(v->valuestring) : NULL;
}

static int need(const char *v, const char *file, const char *field, ur_err *err)
{
    if (v == NULL || v[0] == '\0') {
        return ur_err_set_os(err, UR_EINVAL, 0, file, "credentials file has no string \"%s\"",
                             field);
    }
    return UR_OK;
}

static int load_file(gcs_auth *a, const char *path, ur_err *err)
{
    ur_buf b;
    cJSON *j = NULL;
    char *type = NULL;
    int rc;

    ur_buf_init(&b, CRED_FILE_MAX);
    a->file = ur_strdup(path);
    if (a->file == NULL) {
        rc = ur_err_oom(err);
        goto out;
    }
    rc = ur_fs_read_file(&b, path, CRED_FILE_MAX, err);
    if (rc < 0) {
        /* A named file that cannot be read is a configuration error, as a malformed one. */
        if (rc == UR_ENOTFOUND && err != NULL) {
            rc = err->code = UR_EINVAL;
        }
        ur_err_wrap(err, "Google credentials file");
        goto out;
    }
    rc = ur_json_parse(&j, (const char *)b.data, b.len, err);
    if (rc < 0) {
        ur_err_set_where(err, path);
        ur_err_wrap(err, "Google credentials file");
        rc = err != NULL ? (err->code = UR_EINVAL) : UR_EINVAL;
        goto out;
    }
    type = json_str(j, "type");
    if (type != NULL && strcmp(type, "service_account") == 0) {
        a->kind = K_SERVICE;
        a->email = json_str(j, "client_email");
        a->key_pem = json_str(j, "private_key");
        a->key_id = json_str(j, "private_key_id");
        a->token_uri = json_str(j, "token_uri");
        rc = need(a->email, path, "client_email", err);
        if (rc == UR_OK) {
            rc = need(a->key_pem, path, "private_key", err);
        }
        ur_http_secret_add(a->key_pem); /* never quoted back from a server's text */
    } else if (type != NULL && strcmp(type, "authorized_user") == 0) {
        a->kind = K_USER;
        a->client_id = json_str(j, "client_id");
        a->client_secret = json_str(j, "client_secret");
        a->refresh_token = json_str(j, "refresh_token");
        a->token_uri = json_str(j, "token_uri");
        rc = need(a->client_id, path, "client_id", err);
        if (rc == UR_OK) {
            rc = need(a->client_secret, path, "client_secret", err);
        }
        if (rc == UR_OK) {
            rc = need(a->refresh_token, path, "refresh_token", err);
        }
        ur_http_secret_add(a->client_secret);
        ur_http_secret_add(a->refresh_token);
    } else {
        rc = ur_err_set_os(err, UR_EUNSUPPORTED, 0, path,
                           "credentials of type \"%s\" are not supported (service_account and "
                           "authorized_user are)",
                           type != NULL ? type : "(none)");
    }
    if (rc == UR_OK && a->token_uri == NULL) {
        a->token_uri = ur_strdup(DEFAULT_TOKEN_URI);
        if (a->token_uri == NULL) {
            rc = ur_err_oom(err);
        }
    }
out:
    ur_free(type);
    cJSON_Delete(j);
    ur_buf_dispose(&b);
    return rc;
}

/* google-auth's residency check: /sys/class/dmi/id/product_name starts with "Google". */
static int on_gce(void)
{
    char line[64] = "";
    FILE *f = fopen("/sys/class/dmi/id/product_name", "r");
    if (f == NULL) {
        return 0;
    }
    if (fgets(line, sizeof line, f) == NULL) {
        line[0] = '\0';
    }
    fclose(f);
    return strncmp(line, "Google", 6) == 0;
}

static int set_metadata(gcs_auth *a, const char *host, ur_err *err)
{
    ur_buf b;
    int rc;
    ur_buf_init(&b, 0);
    rc = ur_buf_printf(&b, err, "%s%s/computeMetadata/v1/instance/service-accounts/default/token",
                       strstr(host, "://") != NULL ? "" : "http://", host);
    if (rc == UR_OK) {
        a->kind = K_METADATA;
        a->metadata_url = ur_buf_detach(&b, NULL);
        if (a->metadata_url == NULL) {
            rc = ur_err_oom(err);
        }
    }
    ur_buf_dispose(&b);
    return rc;
}

static int discover(gcs_auth *a, ur_err *err)
{
    const char *env = getenv("GOOGLE_APPLICATION_CREDENTIALS");
    const char *meta = getenv("GCE_METADATA_HOST");
    char *wk = NULL;
    int rc;

    if (env != NULL && env[0] != '\0') {
        return load_file(a, env, err);
    }
    env = getenv("CLOUDSDK_CONFIG");
    if (env != NULL && env[0] != '\0') {
        wk = ur_path_join(env, "application_default_credentials.json");
    } else if ((env = getenv("HOME")) != NULL && env[0] != '\0') {
        wk = ur_path_join(env, ".config/gcloud/application_default_credentials.json");
    }
    if (wk != NULL && ur_fs_exists(wk)) {
        rc = load_file(a, wk, err);
        ur_free(wk);
        return rc;
    }
    ur_free(wk);
    if (meta != NULL && meta[0] != '\0') {
        return set_metadata(a, meta, err);
    }
    if (on_gce()) {
        return set_metadata(a, DEFAULT_METADATA, err);
    }
    a->kind = K_ANON;
    return UR_OK;
}

static int auth_create(gcs_auth **out, int emulator, ur_err *err)
{
    gcs_auth *a = ur_calloc(1, sizeof *a);
    int rc = UR_OK;
    if (a == NULL) {
        return ur_err_oom(err);
    }
    pthread_mutex_init(&a->mu, NULL);
    a->kind = K_EMULATOR;
    if (!emulator) {
        rc = discover(a, err);
    }
    if (rc < 0) {
        auth_destroy(a);
        return rc;
    }
    *out = a;
    return UR_OK;
}

int ur_gcs_auth_new(gcs_auth **out, int emulator, ur_err *err)
{
    int rc = UR_OK;
    emulator = emulator != 0;
    pthread_mutex_lock(&g_share);
    if (g_shared[emulator] == NULL) {
        rc = auth_create(&g_shared[emulator], emulator, err);
    }
    if (rc == UR_OK) {
        g_shared[emulator]->refs++;
        *out = g_shared[emulator];
    }
    pthread_mutex_unlock(&g_share);
    return rc;
}

/* Append `name=<escaped value>` (with '&' before all but the first) to a form body. */
static int form_add(ur_buf *b, const char *name, const char *value, ur_err *err)
{
    int rc = ur_buf_printf(b, err, "%s%s=", b->len > 0 ? "&" : "", name);
    return rc < 0 ? rc : ur_gcs_http_escape(b, value, err);
}

static int form_body(gcs_auth *a, ur_buf *body, ur_err *err)
{
    int rc;
    if (a->kind == K_SERVICE) {
        ur_buf jwt;
        ur_buf_init(&jwt, 0);
        rc = ur_gcs_jwt_sign(&jwt, a->key_pem, a->key_id, a->email, SCOPE_RW, a->token_uri,
                             (int64_t)ur_clock_now_s(), err);
        if (rc < 0) {
            ur_err_set_where(err, a->file);
        }
        if (rc == UR_OK) {
            rc = form_add(body, "grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer", err);
        }
        if (rc == UR_OK) {
            rc = ur_buf_append_byte(&jwt, '\0', err);
        }
        if (rc == UR_OK) {
            ur_http_secret_add((const char *)jwt.data);
        }
        if (rc == UR_OK) {
            rc = form_add(body, "assertion", (const char *)jwt.data, err);
        }
        ur_buf_dispose(&jwt);
        return rc;
    }
    rc = form_add(body, "grant_type", "refresh_token", err);
    if (rc == UR_OK) {
        rc = form_add(body, "client_id", a->client_id, err);
    }
    if (rc == UR_OK) {
        rc = form_add(body, "client_secret", a->client_secret, err);
    }
    if (rc == UR_OK) {
        rc = form_add(body, "refresh_token", a->refresh_token, err);
    }
    return rc;
}

/* Take access_token and expires_in from a token endpoint's JSON answer. */
static int take_token(gcs_auth *a, const ur_buf *body, const char *what, ur_err *err)
{
    cJSON *j = NULL;
    const cJSON *tok, *exp;
    int rc = ur_json_parse(&j, (const char *)body->data, body->len, err);
    if (rc < 0) {
        return ur_err_set_os(err, UR_EIO, 0, what, "token endpoint answered with no JSON");
    }
    tok = cJSON_GetObjectItemCaseSensitive(j, "access_token");
    exp = cJSON_GetObjectItemCaseSensitive(j, "expires_in");
    if (!cJSON_IsString(tok) || tok->valuestring[0] == '\0' ||
        strlen(tok->valuestring) >= sizeof a->token || strpbrk(tok->valuestring, "\r\n") != NULL) {
        rc = ur_err_set_os(err, UR_EIO, 0, what,
                           "token endpoint answered with no usable "
                           "access_token");
    } else {
        double secs = cJSON_IsNumber(exp) ? exp->valuedouble : 3600.0;
        snprintf(a->token, sizeof a->token, "%s", tok->valuestring);
        ur_http_secret_add(a->token);
        if (secs < 0 || secs > 86400.0 * 366) {
            secs = 3600.0;
        }
        a->expiry = ur_clock_now_s() + (time_t)secs;
    }
    cJSON_Delete(j);
    return rc;
}

static int fetch_token(gcs_auth *a, ur_err *err)
{
    ur_buf form, body;
    gcs_http_resp resp;
    gcs_http_req req;
    const char *form_hdrs[] = {"Content-Type: application/x-www-form-urlencoded", NULL};
    const char *meta_hdrs[] = {"Metadata-Flavor: Google", NULL};
    const char *what = a->kind == K_METADATA ? a->metadata_url : a->token_uri;
    char who[1200];
    int rc = UR_OK;

    ur_buf_init(&form, 0);
    ur_buf_init(&body, (size_t)1 << 20);
    memset(&req, 0, sizeof req);
    if (a->http == NULL) {
        rc = ur_http_new(&a->http, NULL, err);
    }
    req.http = a->http;
    req.url = what;
    req.what = what;
    req.body = &body;
    if (a->kind == K_METADATA) {
        req.method = "GET";
        req.headers = meta_hdrs;
    } else {
        if (rc == UR_OK) {
            rc = form_body(a, &form, err);
        }
        req.method = "POST";
        req.headers = form_hdrs;
        req.data = form.data;
        req.data_len = form.len;
    }
    if (rc == UR_OK) {
        rc = ur_gcs_http_do(&req, &resp, err);
        if (rc < 0 && rc != UR_ENOMEM) {
            /* A token endpoint that refuses is a credentials failure: I/O, exit status 3. */
            ur_gcs_auth_describe(a, who, sizeof who);
            if (err != NULL) {
                err->code = UR_EIO;
            }
            rc = ur_err_wrap(err, "Google credentials (%s): token request failed", who);
        }
    }
    if (rc == UR_OK) {
        rc = take_token(a, &body, what, err);
    }
    ur_buf_dispose(&form);
    ur_buf_dispose(&body);
    return rc;
}

void ur_gcs_auth_describe(const gcs_auth *a, char *dst, size_t n)
{
    snprintf(dst, n, "%s%s%s", ur_gcs_auth_kind(a), a->file != NULL ? " from " : "",
             a->file != NULL ? a->file : "");
}

int ur_gcs_auth_header(gcs_auth *a, char *line, size_t n, ur_err *err)
{
    int rc = UR_OK;
    line[0] = '\0';
    if (a->kind == K_EMULATOR || a->kind == K_ANON) {
        return UR_OK;
    }
    pthread_mutex_lock(&a->mu);
    if (a->token[0] == '\0' || ur_clock_now_s() + REFRESH_MARGIN_S >= a->expiry) {
        a->token[0] = '\0';
        rc = fetch_token(a, err);
    }
    if (rc == UR_OK) {
        snprintf(line, n, "Authorization: Bearer %s", a->token);
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

void ur_gcs_auth_invalidate(gcs_auth *a)
{
    pthread_mutex_lock(&a->mu);
    a->token[0] = '\0';
    pthread_mutex_unlock(&a->mu);
}

const char *ur_gcs_auth_kind(const gcs_auth *a)
{
    static const char *const names[] = {"emulator", "anonymous", "service_account",
                                        "authorized_user", "metadata"};
    return names[a->kind];
}

void ur_gcs_auth_free(gcs_auth *a)
{
    int last;
    if (a == NULL) {
        return;
    }
    pthread_mutex_lock(&g_share);
    last = --a->refs == 0;
    if (last) {
        g_shared[a->kind == K_EMULATOR] = NULL;
    }
    pthread_mutex_unlock(&g_share);
    if (last) {
        auth_destroy(a);
    }
}

static void auth_destroy(gcs_auth *a)
{
    ur_free(a->file);
    ur_free(a->token_uri);
    ur_free(a->email);
    if (a->key_pem != NULL) {
        /* The private key does not outlive its use in memory we free. */
        memset(a->key_pem, 0, strlen(a->key_pem));
        ur_free(a->key_pem);
    }
    ur_free(a->key_id);
    ur_free(a->client_id);
    ur_free(a->client_secret);
    ur_free(a->refresh_token);
    ur_free(a->metadata_url);
    ur_http_free(a->http);
    pthread_mutex_destroy(&a->mu);
    memset(a->token, 0, sizeof a->token);
    ur_free(a);
}
