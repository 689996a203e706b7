/* Scrubbing credentials out of server text before it is printed (unroll/http.h).
 *
 * Why both a registry and shapes: a server or proxy that echoes the request back in its error
 * body hands us our own credentials; the registry catches exactly those (whatever they look
 * like), the shapes catch the ones we never saw as such (a token minted by a helper, a header
 * a proxy added) and the encodings the registry does not list. Text only ever gets shorter
 * in meaning: a false positive blanks a word of an error message, which is cheap. */
#define _POSIX_C_SOURCE 200809L
#include "unroll/http.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define SECRET_SLOTS 32
#define SECRET_MAX 4200 /* a PEM RSA-4096 key is about 3.3 KB */
#define SECRET_MIN 6
#define TAIL_MIN 8 /* a secret cut by the end of the text: this much of it is enough */

static const char REDACTED[] = "[redacted]";

static pthread_mutex_t secrets_lock = PTHREAD_MUTEX_INITIALIZER;
static char secrets[SECRET_SLOTS][SECRET_MAX];
static size_t secret_len[SECRET_SLOTS];
static unsigned n_secrets, next_slot;

/* Add one string (locked by the caller); a duplicate is not stored twice. */
static void add_locked(const char *s)
{
    if (strlen(s) < SECRET_MIN) {
        return;
    }
    for (unsigned i = 0; i < n_secrets; i++) {
        if (strncmp(secrets[i], s, SECRET_MAX - 1) == 0) {
            return;
        }
    }
    snprintf(secrets[next_slot], SECRET_MAX, "%s", s);
    secret_len[next_slot] = strlen(secrets[next_slot]);
    next_slot = (next_slot + 1) % SECRET_SLOTS;
    if (n_secrets < SECRET_SLOTS) {
        n_secrets++;
    }
}

void ur_http_secret_add(const char *secret)
{
    char enc[SECRET_MAX];
    size_t k = 0;
    if (secret == NULL) {
        return;
    }
    /* the form a form body or a query carries it in (RFC 3986 unreserved kept) */
    for (const char *p = secret; *p != '\0' && k + 4 < sizeof enc; p++) {
        unsigned char ch = (unsigned char)*p;
        if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            enc[k++] = (char)ch;
        } else {
            k += (size_t)snprintf(enc + k, sizeof enc - k, "%%%02X", ch);
        }
    }
    enc[k] = '\0';
    pthread_mutex_lock(&secrets_lock);
    add_locked(secret);
    add_locked(enc);
    pthread_mutex_unlock(&secrets_lock);
}

/* The output being built: bounded, always NUL-terminated. */
typedef struct {
    char *p;
    size_t n, len;
} sink;

static void put(sink *o, const char *s, size_t k)
{
    size_t room = o->n - 1 - o->len;
    if (k > room) {
        k = room;
    }
    memcpy(o->p + o->len, s, k);
    o->len += k;
    o->p[o->len] = '\0';
}

/* Length of the registered secret at in[i..n), or of its start cut off by the end; 0: none. */
static size_t secret_at(const char *in, size_t i, size_t n)
{
    size_t best = 0;
    for (unsigned s = 0; s < n_secrets; s++) {
        size_t k = secret_len[s];
        if (k <= n - i && memcmp(in + i, secrets[s], k) == 0) {
            best = k > best ? k : best;
        } else if (k > n - i && n - i >= TAIL_MIN && memcmp(in + i, secrets[s], n - i) == 0) {
            best = n - i;
        }
    }
    return best;
}

static int starts_ci(const char *in, size_t i, size_t n, const char *kw)
{
    size_t k = strlen(kw);
    return k <= n - i && strncasecmp(in + i, kw, k) == 0;
}

static int token_char(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == '~' || c == '+' || c == '/' || c == '=' ||
           c == '%';
}

static size_t token_end(const char *in, size_t i, size_t n)
{
    while (i < n && token_char(in[i])) {
        i++;
    }
    return i;
}

/* PEM block at i: its end (past the closing "-----"), or the end of the text. */
static size_t pem_end(const char *in, size_t i, size_t n)
{
    for (size_t j = i + 11; j + 9 <= n; j++) {
        if (memcmp(in + j, "-----END ", 9) == 0) {
            for (size_t e = j + 9; e + 5 <= n; e++) {
                if (memcmp(in + e, "-----", 5) == 0) {
                    return e + 5;
                }
            }
            break;
        }
    }
    return n;
}

/* Names whose value is a credential (longest first where one starts another). */
static const char *const KEYS[] = {
    "x-amz-security-token",
    "x-amz-credential",
    "x-amz-signature",
    "aws_secret_access_key",
    "aws_session_token",
    "authorization",
    "client_secret",
    "refresh_token",
    "access_token",
    "private_key_id",
    "private_key",
    "sessiontoken",
    "signature",
    "assertion",
    "password",
    "secret",
    "token",
};

/* A "name<sep>value" at i: the value's [*vs, *ve) and 1, or 0. The separator is ':' or '='
 * after an optional closing quote and blanks; a quoted value ends at its quote, a header
 * value at the end of its line, a query or form value at '&' or a blank. */
static int keyed_value(const char *in, size_t i, size_t n, size_t *vs, size_t *ve)
{
    for (size_t k = 0; k < sizeof KEYS / sizeof KEYS[0]; k++) {
        size_t j = i + strlen(KEYS[k]);
        char sep, quote = 0;
        if (!starts_ci(in, i, n, KEYS[k])) {
            continue;
        }
        while (j < n && (in[j] == '"' || in[j] == '\'' || in[j] == ' ' || in[j] == '\t')) {
            j++;
        }
        if (j >= n || (in[j] != ':' && in[j] != '=')) {
            return 0;
        }
        sep = in[j++];
        while (j < n && (in[j] == ' ' || in[j] == '\t')) {
            j++;
        }
        if (j < n && (in[j] == '"' || in[j] == '\'')) {
            quote = in[j++];
        }
        *vs = j;
        while (j < n) {
            char c = in[j];
            if (quote != 0 ? c == quote && in[j - 1] != '\\'
                           : c == '\r' || c == '\n' || c == '<' || c == '"' ||
                                 (sep == '=' && (c == '&' || c == ' ' || c == ',' || c == ';'))) {
                break;
            }
            j++;
        }
        *ve = j;
        return j > *vs;
    }
    return 0;
}

/* What to cut at in[i..n): 1 with [*keep_to, *cut_to) when in[i..keep_to) stays and
 * in[keep_to..cut_to) becomes "[redacted]"; 0 when nothing starts here. */
static int shape_at(const char *in, size_t i, size_t n, size_t *keep_to, size_t *cut_to)
{
    size_t e;
    if (starts_ci(in, i, n, "-----BEGIN ")) {
        *keep_to = i;
        *cut_to = pem_end(in, i, n);
        return 1;
    }
    if (starts_ci(in, i, n, "bearer ")) {
        size_t s = i + 7;
        while (s < n && in[s] == ' ') {
            s++;
        }
        e = token_end(in, s, n);
        if (e > s) {
            *keep_to = s;
            *cut_to = e;
            return 1;
        }
    }
    if (starts_ci(in, i, n, "ya29.") ||
        (n - i >= 3 && memcmp(in + i, "eyJ", 3) == 0 && token_end(in, i, n) >= i + 12)) {
        *keep_to = i;
        *cut_to = token_end(in, i, n);
        return 1;
    }
    if (keyed_value(in, i, n, keep_to, cut_to)) {
        return 1;
    }
    return 0;
}

void ur_http_redact(const char *in, size_t n, char *out, size_t out_n)
{
    sink o = {out, out_n, 0};
    size_t i = 0;
    if (out_n == 0) {
        return;
    }
    out[0] = '\0';
    pthread_mutex_lock(&secrets_lock);
    while (i < n && o.len + 1 < o.n) {
        size_t keep_to, cut_to, k = secret_at(in, i, n);
        if (k > 0) {
            put(&o, REDACTED, sizeof REDACTED - 1);
            i += k;
        } else if (shape_at(in, i, n, &keep_to, &cut_to)) {
            put(&o, in + i, keep_to - i);
            put(&o, REDACTED, sizeof REDACTED - 1);
            i = cut_to;
        } else {
            put(&o, in + i, 1);
            i++;
        }
    }
    pthread_mutex_unlock(&secrets_lock);
}
