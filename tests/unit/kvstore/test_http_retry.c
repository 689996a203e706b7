/* The HTTP client's retry policy (unroll/http.h) against a scripted server on 127.0.0.1: which
 * answers are retried (408, 429, 5xx, a connection closed without an answer) and which end the
 * request at once (403, 404, an accepted 412); a PUT body sent whole again on every attempt;
 * the retry count; and the deadline, past which no retry starts however many are left. */
#define _POSIX_C_SOURCE 200809L
#include "ur_test.h"

#include "unroll/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_SCRIPT 16
#define DROP 0 /* a script entry: close the connection without answering */

/* A server that answers request i with script[min(i, n - 1)] and counts what it got. */
typedef struct server {
    int fd;
    int port;
    long script[MAX_SCRIPT];
    size_t n_script;
    int requests;        /* requests read */
    size_t body_bytes[MAX_SCRIPT]; /* body bytes of request i */
    pthread_t thread;
} server;

/* Read one request's head and body from c into the counters; 0 at end of stream. */
static int read_request(server *s, int c)
{
    char buf[8192];
    size_t have = 0, want = 0;
    char *end = NULL;
    while (end == NULL) {
        ssize_t r = recv(c, buf + have, sizeof buf - 1 - have, 0);
        if (r <= 0) {
            return 0;
        }
        have += (size_t)r;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    {
        const char *cl = strstr(buf, "Content-Length: ");
        want = cl != NULL && cl < end ? strtoul(cl + 16, NULL, 10) : 0;
    }
    {
        size_t got = have - (size_t)(end + 4 - buf);
        while (got < want) {
            ssize_t r = recv(c, buf, sizeof buf, 0);
            if (r <= 0) {
                return 0;
            }
            got += (size_t)r;
        }
        if (s->requests < MAX_SCRIPT) {
            s->body_bytes[s->requests] = got;
        }
    }
    return 1;
}

static void answer(int c, long status)
{
    char head[256];
    const char *body = "{\"error\": \"scripted\"}";
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %ld Scripted\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     status, strlen(body), body);
    (void)!write(c, head, (size_t)n);
}

static void *serve(void *arg)
{
    server *s = arg;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        long status;
        if (c < 0) {
            return NULL;
        }
        if (!read_request(s, c)) {
            close(c);
            continue;
        }
        status =
            s->script[(size_t)s->requests < s->n_script ? (size_t)s->requests : s->n_script - 1];
        s->requests++;
        if (status != DROP) {
            answer(c, status);
        }
        close(c);
    }
}

static void server_start(server *s, const long *script, size_t n)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(s, 0, sizeof *s);
    memcpy(s->script, script, n * sizeof *script);
    s->n_script = n;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s->fd >= 0);
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->fd, 16), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_stop(server *s)
{
    shutdown(s->fd, SHUT_RDWR);
    close(s->fd);
    pthread_join(s->thread, NULL);
}

typedef struct outcome {
    int rc;
    long status;
    char message[1024];
    char where[256];
    double seconds;
} outcome;

/* One PUT of 100,000 bytes (so a retry must send the body again) under opts o. */
static outcome put(server *s, const ur_http_opts *o)
{
    static char body[100000];
    static const long accept_412[] = {412};
    char url[64];
    ur_http *h = NULL;
    ur_http_req req;
    ur_err err;
    outcome out;
    struct timespec t0, t1;
    memset(&out, 0, sizeof out);
    memset(body, 'x', sizeof body);
    ur_err_clear(&err);
    assert_int_equal(ur_http_new(&h, o, &err), UR_OK);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/b/key", s->port);
    memset(&req, 0, sizeof req);
    req.method = "PUT";
    req.url = url;
    req.body = body;
    req.body_len = sizeof body;
    req.what = "s3://b/key";
    req.accept = accept_412;
    req.n_accept = 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    out.rc = ur_http_perform(h, &req, &out.status, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    out.seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    snprintf(out.message, sizeof out.message, "%s", err.msg);
    snprintf(out.where, sizeof out.where, "%s", err.where);
    ur_http_free(h);
    return out;
}

static ur_http_opts fast_opts(unsigned retries)
{
    ur_http_opts o;
    ur_http_opts_init(&o);
    o.retries = retries;
    o.backoff_base_ms = 1;
    o.backoff_max_ms = 5;
    o.connect_timeout_s = 5;
    o.first_byte_s = 5;
    o.deadline_s = 60;
    return o;
}

static void test_http_retry__transient_answers_are_retried_with_the_whole_body(void **state)
{
    static const long script[] = {503, 429, 408, DROP, 500, 200};
    server s;
    ur_http_opts o = fast_opts(8);
    outcome r;
    (void)state;
    server_start(&s, script, sizeof script / sizeof script[0]);
    r = put(&s, &o);
    server_stop(&s);
    assert_int_equal(r.rc, UR_OK);
    assert_int_equal(r.status, 200);
    assert_int_equal(s.requests, 6);
    for (int i = 0; i < s.requests; i++) {
        assert_int_equal(s.body_bytes[i], 100000);
    }
}

static void test_http_retry__final_answers_are_not_retried(void **state)
{
    static const struct {
        long status;
        int rc;
    } cases[] = {{403, UR_EIO}, {404, UR_ENOTFOUND}, {400, UR_EIO}, {412, UR_OK}};
    ur_http_opts o = fast_opts(8);
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        server s;
        outcome r;
        server_start(&s, &cases[i].status, 1);
        r = put(&s, &o);
        server_stop(&s);
        assert_int_equal(r.rc, cases[i].rc);
        assert_int_equal(s.requests, 1);
        assert_int_equal(r.status, cases[i].status);
        if (r.rc == UR_EIO) {
            char want[16];
            snprintf(want, sizeof want, "%ld", cases[i].status);
            assert_string_equal(r.where, "s3://b/key");
            assert_non_null(strstr(r.message, want));
        }
    }
}

static void test_http_retry__retries_run_out_and_the_error_says_so(void **state)
{
    static const long script[] = {503};
    server s;
    ur_http_opts o = fast_opts(3);
    outcome r;
    (void)state;
    server_start(&s, script, 1);
    r = put(&s, &o);
    server_stop(&s);
    assert_int_equal(r.rc, UR_EIO);
    assert_int_equal(s.requests, 4); /* the first attempt and 3 retries */
    assert_non_null(strstr(r.message, "503"));
    assert_non_null(strstr(r.message, "4 attempts"));
    assert_int_equal(strchr(r.message, '\n') == NULL, 1);
}

static void test_http_retry__no_retry_starts_past_the_deadline(void **state)
{
    static const long script[] = {503};
    server s;
    ur_http_opts o = fast_opts(1000);
    outcome r;
    (void)state;
    /* waits of up to 400 ms against a 1 s deadline: a handful of attempts, not 1001 */
    o.backoff_base_ms = 400;
    o.backoff_max_ms = 400;
    o.deadline_s = 1;
    server_start(&s, script, 1);
    r = put(&s, &o);
    server_stop(&s);
    assert_int_equal(r.rc, UR_EIO);
    assert_true(s.requests >= 2);
    assert_true(s.requests < 100);
    /* the last wait ends before the deadline; slack for a slow machine (valgrind) */
    assert_true(r.seconds < 1.0 + 10.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_retry__transient_answers_are_retried_with_the_whole_body),
        cmocka_unit_test(test_http_retry__final_answers_are_not_retried),
        cmocka_unit_test(test_http_retry__retries_run_out_and_the_error_says_so),
        cmocka_unit_test(test_http_retry__no_retry_starts_past_the_deadline),
    };
    return cmocka_run_group_tests_name("http_retry", tests, NULL, NULL);
}
