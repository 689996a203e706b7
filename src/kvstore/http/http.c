/* libcurl behind unroll/http.h: a pool of easy handles (connection reuse), a counting gate
 * (requests in flight), and the retry loop (backoff with full jitter).
 *
 * Why a pool of easy handles and not one multi handle: the callers are the plan's worker
 * threads, each of which wants one blocking read at a time; an easy handle per request keeps
 * the code straight, and libcurl keeps each handle's connections open between requests, so a
 * handle returned to the pool is a warm connection for the next borrower. */
#define _POSIX_C_SOURCE 200809L
#include "unroll/http.h"

#include "unroll/alloc.h"
#include "unroll/clock.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

struct ur_http {
    ur_http_opts o;
    char ca[1024];       /* the CA bundle in effect, for messages ("" when unknown) */
    const char *ca_from; /* where it came from */
    int set_ca;          /* ca is passed as CURLOPT_CAINFO (not libcurl's own default) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned in_flight;
    CURL **idle; /* handles not in use, with their connections */
    size_t n_idle;
};

struct ur_http_headers {
    struct curl_slist *list;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static unsigned env_uint(const char *name, unsigned dflt)
{
    const char *s = getenv(name);
    char *end;
    unsigned long v;
    if (s == NULL || *s == '\0') {
        return dflt;
    }
    v = strtoul(s, &end, 10);
    return *end == '\0' && v <= 1000000ul ? (unsigned)v : dflt;
}

/* The default budget (unroll/http.h): a server that accepts and never answers costs at most
 * DEADLINE + FIRST_BYTE seconds (the last attempt starts before the deadline). */
enum { CONNECT_S = 10, FIRST_BYTE_S = 20, STALL_S = 30, DEADLINE_S = 60 };

void ur_http_opts_init(ur_http_opts *o)
{
    unsigned t = env_uint("UNROLL_HTTP_TIMEOUT_S", 0);
    o->max_in_flight = env_uint("UNROLL_HTTP_MAX_IN_FLIGHT", 32);
    o->retries = env_uint("UNROLL_HTTP_RETRIES", 8);
    o->backoff_base_ms = env_uint("UNROLL_HTTP_BACKOFF_MS", 200);
    o->backoff_max_ms = 20000;
    o->connect_timeout_s = env_uint("UNROLL_HTTP_CONNECT_TIMEOUT_S", t ? t : CONNECT_S);
    o->first_byte_s = env_uint("UNROLL_HTTP_FIRST_BYTE_S", t ? t : FIRST_BYTE_S);
    o->stall_s = env_uint("UNROLL_HTTP_STALL_S", t ? t : STALL_S);
    o->deadline_s = env_uint("UNROLL_HTTP_DEADLINE_S", DEADLINE_S);
    o->verbose = (int)env_uint("UNROLL_HTTP_VERBOSE", 0);
    if (o->max_in_flight == 0) {
        o->max_in_flight = 1;
    }
}

/* Where the distributions keep the system's CA bundle. A libcurl built on one distribution
 * (the wheel's, built on Debian) has that one's path compiled in, which another does not
 * have: there every HTTPS request would fail to load its CA file. */
static const char *const ca_places[] = {
    "/etc/ssl/certs/ca-certificates.crt",                /* Debian, Ubuntu */
    "/etc/pki/tls/certs/ca-bundle.crt",                  /* RHEL, Rocky, Fedora, Amazon */
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", /* RHEL, Fedora (the source) */
    "/etc/ssl/ca-bundle.pem",                            /* SUSE */
};

/* The CA bundle, as the curl tool chooses it: CURL_CA_BUNDLE, else SSL_CERT_FILE (libcurl
 * reads neither), else libcurl's compiled-in bundle when it exists here, else the first of
 * ca_places that exists, else libcurl's default as it is (the handshake then says why). */
static int choose_ca(ur_http *h, ur_err *err)
{
    static const char *const vars[] = {"CURL_CA_BUNDLE", "SSL_CERT_FILE"};
    const char *dflt = NULL;
    CURL *c;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && *v != '\0') {
            if (strlen(v) >= sizeof h->ca) {
                return ur_err_set(err, UR_EINVAL, "%s: path longer than %zu bytes", vars[i],
                                  sizeof h->ca - 1);
            }
            snprintf(h->ca, sizeof h->ca, "%s", v);
            h->ca_from = vars[i];
            h->set_ca = 1;
            return UR_OK;
        }
    }
    c = curl_easy_init();
    if (c == NULL) {
        return ur_err_oom(err);
    }
#if LIBCURL_VERSION_NUM >= 0x075400 /* 7.84.0: CURLINFO_CAINFO */
    if (curl_easy_getinfo(c, CURLINFO_CAINFO, &dflt) != CURLE_OK) {
        dflt = NULL;
    }
#endif
    h->ca_from = "libcurl's default";
    if (dflt != NULL) {
        snprintf(h->ca, sizeof h->ca, "%s", dflt);
    }
    if (dflt == NULL || access(dflt, R_OK) != 0) {
        for (size_t i = 0; i < sizeof ca_places / sizeof ca_places[0]; i++) {
            if (access(ca_places[i], R_OK) == 0) {
                snprintf(h->ca, sizeof h->ca, "%s", ca_places[i]);
                h->ca_from = "found on this system";
                h->set_ca = 1;
                break;
            }
        }
    }
    curl_easy_cleanup(c);
    return UR_OK;
}

int ur_http_new(ur_http **out, const ur_http_opts *opts, ur_err *err)
{
    int rc;
    ur_http *h;
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK) {
        return ur_err_set(err, UR_EIO, "libcurl initialisation failed: %s",
                          curl_easy_strerror(global_rc));
    }
    h = ur_calloc(1, sizeof *h);
    if (h == NULL) {
        return ur_err_oom(err);
    }
    if (opts != NULL) {
        h->o = *opts;
    } else {
        ur_http_opts_init(&h->o);
    }
    if (h->o.max_in_flight == 0) {
        h->o.max_in_flight = 1;
    }
    rc = choose_ca(h, err);
    if (rc < 0) {
        ur_free(h);
        return rc;
    }
    h->idle = ur_calloc(h->o.max_in_flight, sizeof *h->idle);
    if (h->idle == NULL) {
        ur_free(h);
        return ur_err_oom(err);
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    *out = h;
    return UR_OK;
}

void ur_http_free(ur_http *h)
{
    if (h == NULL) {
        return;
    }
    for (size_t i = 0; i < h->n_idle; i++) {
        curl_easy_cleanup(h->idle[i]);
    }
    ur_free(h->idle);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    ur_free(h);
}

/* Wait for a slot, then take an idle handle (or make one). NULL only when out of memory. */
static CURL *borrow(ur_http *h)
{
    CURL *c = NULL;
    pthread_mutex_lock(&h->lock);
    while (h->in_flight >= h->o.max_in_flight) {
        pthread_cond_wait(&h->cond, &h->lock);
    }
    h->in_flight++;
    if (h->n_idle > 0) {
        c = h->idle[--h->n_idle];
    }
    pthread_mutex_unlock(&h->lock);
    if (c == NULL) {
        c = curl_easy_init();
        if (c == NULL) {
            pthread_mutex_lock(&h->lock);
            h->in_flight--;
            pthread_cond_signal(&h->cond);
            pthread_mutex_unlock(&h->lock);
        }
    }
    return c;
}

static void give_back(ur_http *h, CURL *c)
{
    pthread_mutex_lock(&h->lock);
    h->in_flight--;
    if (h->n_idle < h->o.max_in_flight) {
        h->idle[h->n_idle++] = c;
        c = NULL;
    }
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
    if (c != NULL) {
        curl_easy_cleanup(c);
    }
}

int ur_http_headers_add(ur_http_headers *hs, ur_err *err, const char *fmt, ...)
{
    ur_buf b;
    va_list ap;
    struct curl_slist *l;
    int n;
    char small[512];

    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        return ur_err_set(err, UR_EINTERNAL, "http: bad header format");
    }
    if ((size_t)n < sizeof small) {
        l = curl_slist_append(hs->list, small);
    } else {
        ur_buf_init(&b, 0);
        if (ur_buf_reserve(&b, (size_t)n + 1, err) < 0) {
            return UR_ENOMEM;
        }
        va_start(ap, fmt);
        (void)vsnprintf((char *)b.data, (size_t)n + 1, fmt, ap);
        va_end(ap);
        l = curl_slist_append(hs->list, (const char *)b.data);
        ur_buf_dispose(&b);
    }
    if (l == NULL) {
        return ur_err_oom(err);
    }
    hs->list = l;
    return UR_OK;
}

/* ---- one attempt ---- */

typedef struct {
    const ur_http_req *req;
    CURL *c;
    unsigned first_byte_s;
    double wait_from;  /* when the last request byte went out (or the attempt started) */
    curl_off_t ul_last; /* request bytes sent at the last progress call */
    int answered;      /* a response byte came */
    int no_answer;     /* the attempt was aborted: no answer within first_byte_s */
    size_t out_start; /* req->out->len before the attempt (rewind point) */
    size_t got;       /* body bytes of a 2xx answer */
    ur_buf errbody;   /* the start of a non-2xx body, for the message */
    ur_buf headers;   /* the final response's header lines */
    size_t sent;      /* request body bytes handed to curl */
    int overflow;     /* the body did not fit where it was to go */
    ur_err *err;
    char curl_msg[CURL_ERROR_SIZE]; /* libcurl's own words for a failed attempt */
} attempt;

static long status_of(CURL *c)
{
    long st = 0;
    (void)curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    return st;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    attempt *a = ud;
    size_t n = size * nmemb;
    long st = status_of(a->c);
    if (st < 200 || st > 299) {
        if (a->errbody.len < 2048) {
            size_t k = n < 2048 - a->errbody.len ? n : 2048 - a->errbody.len;
            (void)ur_buf_append(&a->errbody, p, k, NULL);
        }
        return n;
    }
    if (a->req->dst != NULL) {
        if (a->got + n > a->req->dst_len) {
            a->overflow = 1;
            return 0;
        }
        memcpy((uint8_t *)a->req->dst + a->got, p, n);
    } else if (a->req->out != NULL) {
        if (ur_buf_append(a->req->out, p, n, a->err) < 0) {
            a->overflow = 1;
            return 0;
        }
    }
    a->got += n;
    return n;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
    attempt *a = ud;
    size_t n = size * nmemb;
    a->answered = 1;
    if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        ur_buf_reset(&a->headers); /* a new response (after 100 Continue, a redirect) */
    }
    if (ur_buf_append(&a->headers, p, n, NULL) < 0) {
        return 0;
    }
    return n;
}

static size_t on_send(char *p, size_t size, size_t nmemb, void *ud)
{
    attempt *a = ud;
    size_t n = size * nmemb, left = a->req->body_len - a->sent;
    if (n > left) {
        n = left;
    }
    if (n > 0) {
        memcpy(p, (const uint8_t *)a->req->body + a->sent, n);
        a->sent += n;
    }
    return n;
}

/* libcurl resends a request by itself when a reused connection turns out dead; the body
 * must then start again from where it asks (always 0 in practice). */
static int on_seek(void *ud, curl_off_t off, int origin)
{
    attempt *a = ud;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > a->req->body_len) {
        return CURL_SEEKFUNC_FAIL;
    }
    a->sent = (size_t)off;
    return CURL_SEEKFUNC_OK;
}

/* The first-byte timeout: libcurl calls this at least once a second. The clock restarts
 * while the request body is still going out, so only the server's silence counts. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    attempt *a = ud;
    double t;
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    if (a->answered || a->first_byte_s == 0) {
        return 0;
    }
    t = ur_clock_mono_s();
    if (ulnow != a->ul_last) {
        a->ul_last = ulnow;
        a->wait_from = t;
    }
    if (t - a->wait_from >= (double)a->first_byte_s) {
        a->no_answer = 1;
        return 1;
    }
    return 0;
}

/* UNROLL_HTTP_VERBOSE: curl's informational lines and the headers both ways, scrubbed. */
static int on_debug(CURL *c, curl_infotype type, char *p, size_t n, void *ud)
{
    char text[8192];
    const char *tag = type == CURLINFO_TEXT ? "* " : type == CURLINFO_HEADER_IN ? "< " : "> ";
    const char *s = text;
    (void)c;
    (void)ud;
    if (type != CURLINFO_TEXT && type != CURLINFO_HEADER_IN && type != CURLINFO_HEADER_OUT) {
        return 0;
    }
    ur_http_redact(p, n, text, sizeof text);
    while (*s != '\0') {
        size_t k = strcspn(s, "\n");
        fprintf(stderr, "%s%.*s\n", tag, (int)k, s);
        s += k + (s[k] == '\n');
    }
    return 0;
}

static int setup(attempt *a, ur_http *h, ur_http_headers *hs, char *range, size_t range_n)
{
    const ur_http_req *r = a->req;
    CURL *c = a->c;
    ur_err *err = a->err;
    int rc = UR_OK;

    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, r->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    a->curl_msg[0] = '\0';
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, a->curl_msg);
    if (h->set_ca) {
        curl_easy_setopt(c, CURLOPT_CAINFO, h->ca);
    }
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)h->o.connect_timeout_s);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)h->o.stall_s);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, a);
    if (h->o.verbose) {
        curl_easy_setopt(c, CURLOPT_DEBUGFUNCTION, on_debug);
        curl_easy_setopt(c, CURLOPT_VERBOSE, 1L);
    }
    if (strcmp(r->method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (strcmp(r->method, "PUT") == 0) {
        curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_send);
        curl_easy_setopt(c, CURLOPT_READDATA, a);
        curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(c, CURLOPT_SEEKDATA, a);
        curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->body != NULL ? r->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
    } else if (strcmp(r->method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
    }
    if (r->has_range) {
        snprintf(range, range_n, "%llu-%llu", (unsigned long long)r->range_off,
                 (unsigned long long)(r->range_off + r->range_len - 1));
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    /* No "Expect: 100-continue" round trip before a PUT body. */
    rc = ur_http_headers_add(hs, err, "Expect:");
    for (size_t i = 0; rc == UR_OK && i < r->n_headers; i++) {
        rc = ur_http_headers_add(hs, err, "%s", r->headers[i]);
    }
    if (rc == UR_OK && r->auth != NULL) {
        rc = r->auth(r->auth_ctx, r, hs, err);
    }
    if (rc == UR_OK) {
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hs->list);
    }
    return rc;
}

static int retryable_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_FAIL_REWIND:
        return 1;
    default:
        return 0;
    }
}

static int retryable_status(long st)
{
    return st == 408 || st == 429 || (st >= 500 && st <= 599);
}

/* The wait before retry number attempt_no + 1, in ms. */
static uint64_t backoff_ms(const ur_http *h, unsigned attempt_no)
{
    uint64_t cap = h->o.backoff_base_ms, ms;
    for (unsigned i = 0; i < attempt_no && cap < h->o.backoff_max_ms; i++) {
        cap *= 2;
    }
    if (cap > h->o.backoff_max_ms) {
        cap = h->o.backoff_max_ms;
    }
    /* full jitter: uniform in [0, cap]; the seed mixes the clock and the attempt */
    {
        uint64_t x = (uint64_t)(ur_clock_mono_ns() % 1000000000) * 0x9E3779B97F4A7C15ull +
                     attempt_no;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        ms = cap ? x % (cap + 1) : 0;
    }
    return ms;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts;
    ts.tv_sec = (time_t)(ms / 1000);
    ts.tv_nsec = (long)(ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

/* The URL without its query string (which may hold a signature), for messages. */
static void url_for_msg(const char *url, char *out, size_t n)
{
    size_t k = strcspn(url, "?");
    snprintf(out, n, "%.*s", (int)(k < 400 ? k : 400), url);
}

/* "scheme://host:port" of the URL (the port made explicit), for transport failures. */
static void endpoint_of(const char *url, char *out, size_t n)
{
    const char *sep = strstr(url, "://");
    const char *host = sep != NULL ? sep + 3 : url;
    size_t hl = strcspn(host, "/?#");
    const char *at = memchr(host, '@', hl);
    const char *close = NULL, *colon;
    if (at != NULL) { /* no userinfo in messages */
        hl -= (size_t)(at + 1 - host);
        host = at + 1;
    }
    close = memchr(host, ']', hl);
    colon = memchr(close != NULL ? close : host, ':',
                   hl - (size_t)((close ? close : host) - host));
    snprintf(out, n, "%.*s%.*s%s", sep != NULL ? (int)(sep + 3 - url) : 0, url,
             (int)(hl < 300 ? hl : 300), host,
             colon != NULL                                      ? ""
             : sep != NULL && strncasecmp(url, "https", 5) == 0 ? ":443"
                                                                : ":80");
}

/* memmem is a GNU extension; this is the portable few lines. */
static const char *find_bytes(const char *s, size_t len, const char *pat)
{
    size_t n = strlen(pat);
    for (size_t i = 0; n <= len && i <= len - n; i++) {
        if (memcmp(s + i, pat, n) == 0) {
            return s + i;
        }
    }
    return NULL;
}

/* One readable line from an error body: S3's <Code>/<Message>, GCS's "message", else the
 * start of the body with control characters blanked. */
static void body_summary(const char *s, size_t len, char *out, size_t n)
{
    size_t k = 0;
    char code[96] = "", msg[256] = "";
    out[0] = '\0';
    if (len == 0) {
        return;
    }
    for (int pass = 0; pass < 2; pass++) {
        const char *tag = pass == 0 ? "<Code>" : "<Message>";
        const char *p = find_bytes(s, len, tag);
        if (p != NULL) {
            const char *q = p + strlen(tag);
            const char *e = memchr(q, '<', len - (size_t)(q - s));
            if (e != NULL) {
                snprintf(pass == 0 ? code : msg, pass == 0 ? sizeof code : sizeof msg, "%.*s",
                         (int)(e - q), q);
            }
        }
    }
    if (code[0] != '\0') {
        snprintf(out, n, "%s%s%s", code, msg[0] ? ": " : "", msg);
    } else {
        for (size_t i = 0; i < len && k + 1 < n && k < 200; i++) {
            unsigned char ch = (unsigned char)s[i];
            out[k++] = ch < 32 || ch > 126 ? ' ' : (char)ch;
        }
        out[k] = '\0';
    }
}

int ur_http_perform(ur_http *h, const ur_http_req *req, long *status_out, ur_err *err)
{
    attempt a;
    CURL *c;
    unsigned tries = 0;
    long st = 0;
    CURLcode cc = CURLE_OK;
    int rc = UR_OK;
    double start;
    char range[64], where[420], summary[300], endpoint[420];

    if (status_out != NULL) {
        *status_out = 0;
    }
    url_for_msg(req->url, where, sizeof where);
    endpoint_of(req->url, endpoint, sizeof endpoint);
    c = borrow(h);
    if (c == NULL) {
        return ur_err_oom(err);
    }
    memset(&a, 0, sizeof a);
    a.req = req;
    a.c = c;
    a.err = err;
    a.out_start = req->out != NULL ? req->out->len : 0;
    ur_buf_init(&a.errbody, 0);
    ur_buf_init(&a.headers, 0);
    a.first_byte_s = h->o.first_byte_s;
    start = ur_clock_mono_s();
    for (;;) {
        ur_http_headers hs = {NULL};
        int retry = 0;
        uint64_t wait_ms = 0;
        a.got = 0;
        a.sent = 0;
        a.overflow = 0;
        a.answered = 0;
        a.no_answer = 0;
        a.ul_last = 0;
        a.wait_from = ur_clock_mono_s();
        ur_buf_reset(&a.errbody);
        ur_buf_reset(&a.headers);
        if (req->out != NULL) {
            req->out->len = a.out_start;
        }
        rc = setup(&a, h, &hs, range, sizeof range);
        if (rc < 0) {
            curl_slist_free_all(hs.list);
            break;
        }
        cc = curl_easy_perform(c);
        curl_slist_free_all(hs.list);
        tries++;
        st = status_of(c);
        if (a.overflow) {
            rc = req->dst != NULL
                     ? ur_err_set(err, UR_EIO, "more bytes than the %zu expected", req->dst_len)
                     : (err != NULL && err->code != UR_OK ? err->code
                                                          : ur_err_set(err, UR_EIO, "too large"));
            break;
        }
        if (cc != CURLE_OK) {
            retry = retryable_curl(cc) || a.no_answer;
        } else if (st >= 200 && st <= 299) {
            if (req->dst != NULL && strcmp(req->method, "HEAD") != 0 && a.got != req->dst_len) {
                /* a short body on a complete response: the object changed or the server
                 * ignored the range; retrying gives the same answer */
                rc = ur_err_set(err, UR_EIO, "got %zu bytes, expected %zu (HTTP %ld)", a.got,
                                req->dst_len, st);
                break;
            }
            if (req->has_range && st != 206 && req->range_off != 0) {
                rc = ur_err_set(err, UR_EIO, "server ignored the Range header (HTTP %ld)", st);
                break;
            }
            rc = UR_OK;
            break;
        } else {
            int accepted = 0;
            for (size_t i = 0; i < req->n_accept; i++) {
                accepted |= req->accept[i] == st;
            }
            if (accepted) {
                rc = UR_OK;
                break;
            }
            retry = retryable_status(st);
        }
        if (retry && tries <= h->o.retries) {
            wait_ms = backoff_ms(h, tries - 1);
            /* no retry that would start past the deadline */
            retry = ur_clock_mono_s() - start + (double)wait_ms / 1000.0 < (double)h->o.deadline_s;
        }
        if (!retry || tries > h->o.retries) {
            char scrubbed[2100];
            double took = ur_clock_mono_s() - start;
            ur_http_redact((const char *)a.errbody.data, a.errbody.len, scrubbed, sizeof scrubbed);
            body_summary(scrubbed, strlen(scrubbed), summary, sizeof summary);
            if (a.no_answer) {
                rc = ur_err_set(
                    err, UR_EIO, "%s: no answer from %s within %u s (%u attempt%s in %.0f s)",
                    req->method, endpoint, h->o.first_byte_s, tries, tries == 1 ? "" : "s", took);
            } else if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE) {
                /* no retry helps; say which CA bundle, and how to name another */
                rc = ur_err_set(err, UR_EIO,
                                "%s %s: %s (CA bundle %s, %s; SSL_CERT_FILE or CURL_CA_BUNDLE "
                                "names another)",
                                req->method, endpoint,
                                a.curl_msg[0] != '\0' ? a.curl_msg : curl_easy_strerror(cc),
                                h->ca[0] != '\0' ? h->ca : "none", h->ca_from);
            } else if (cc != CURLE_OK) {
                rc = ur_err_set(err, UR_EIO,
                                "%s %s: %s after %u attempt%s in %.0f s (last HTTP status %ld)",
                                req->method, endpoint, curl_easy_strerror(cc), tries,
                                tries == 1 ? "" : "s", took, st);
            } else if (st == 404) {
                rc = ur_err_set(err, UR_ENOTFOUND, "%s: not found (HTTP 404)", req->method);
            } else {
                rc = ur_err_set(err, UR_EIO, "%s failed with HTTP %ld after %u attempt%s%s%s",
                                req->method, st, tries, tries == 1 ? "" : "s",
                                summary[0] ? ": " : "", summary);
            }
            break;
        }
        sleep_ms(wait_ms);
    }
    if (rc < 0 && rc != UR_ENOMEM && err != NULL) {
        ur_err_set_where(err, req->what != NULL ? req->what : where);
    }
    if (rc == UR_OK && req->resp_headers != NULL) {
        ur_buf_reset(req->resp_headers);
        rc = ur_buf_append(req->resp_headers, a.headers.data, a.headers.len, err);
    }
    if (status_out != NULL) {
        /* only the status of an answer that came whole: a cut one says nothing of the
         * object (a 206 cut short is not a short object) */
        *status_out = cc == CURLE_OK ? st : 0;
    }
    ur_buf_dispose(&a.errbody);
    ur_buf_dispose(&a.headers);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL); /* a.curl_msg ends here */
    give_back(h, c);
    return rc;
}

int ur_http_header_get(const ur_buf *raw, const char *name, char *out, size_t n)
{
    const char *p = (const char *)raw->data, *end = p + raw->len;
    size_t nl = strlen(name);
    while (p != NULL && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *le = eol != NULL ? eol : end;
        if ((size_t)(le - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1;
            while (v < le && (*v == ' ' || *v == '\t')) {
                v++;
            }
            while (le > v && (le[-1] == '\r' || le[-1] == ' ' || le[-1] == '\t')) {
                le--;
            }
            snprintf(out, n, "%.*s", (int)(le - v), v);
            return 1;
        }
        p = eol != NULL ? eol + 1 : NULL;
    }
    return 0;
}

int ur_http_encode(ur_buf *b, const char *s, int keep_slash, ur_err *err)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~' ||
                    (keep_slash && ch == '/');
        int rc;
        if (plain) {
            rc = ur_buf_append_byte(b, ch, err);
        } else {
            char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
            rc = ur_buf_append(b, e, 3, err);
        }
        if (rc < 0) {
            return rc;
        }
    }
    return UR_OK;
}

const char *ur_http_curl_version(void)
{
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    return v != NULL && v->version != NULL ? v->version : "?";
}

const char *ur_http_tls_version(void)
{
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    return v != NULL && v->ssl_version != NULL ? v->ssl_version : "none";
}
