/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Tests of shared/profiler/upload.h: the real uploader on a real libuv loop
 * against an agent played by a thread of this process on 127.0.0.1,
 * which answers each connection as the test scripts it (a status, maybe
 * late; never; a closed connection), or a closed port. Every outcome is
 * checked against the counters' definitions (upload.h): each profile ends
 * in exactly one outcome, and bytes_sent is what the agent received.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <curl/curl.h>

#include "profiler/upload.h"


#define SCRIPT_MAX       8
#define HEAD_MAX         16384
#define PPROF_BYTES      (96 * 1024)


/* the agent */

typedef enum {
    ANSWER_STATUS = 0,      /* reads the request, then answers status */
    ANSWER_NEVER,           /* reads until the client goes away */
    ANSWER_CLOSE            /* closes the connection at once (reset) */
} answer_kind_e;


typedef struct {
    answer_kind_e    kind;
    int              status;
    int              delay_ms;      /* before the answer */
} answer_t;


typedef struct {
    int              listen_fd;
    uint16_t         port;
    pthread_t        thread;
    int              running;               /* the test thread's */

    /* the fields below are protected by mutex */
    pthread_mutex_t  mutex;
    pthread_cond_t   changed;
    answer_t         script[SCRIPT_MAX];    /* by connection; past the
                                               end, the last one */
    unsigned         script_length;
    unsigned         accepted;
    unsigned         served;                /* connections closed */
    unsigned         requests;              /* heads read */
    uint64_t         body_bytes;            /* after the heads, all of
                                               them */
    char             head[HEAD_MAX];        /* the last request's */
    int              stop;
} agent_t;


/* the uploader under test, on its loop */

typedef struct {
    uv_loop_t            loop;
    uv_timer_t           tick;
    prof_diagnostics_t   diag;
    prof_log_t           log;
    prof_uploader_t     *uploader;
    char                 url[64];           /* the uploader's, as long */
    unsigned             submitted;
    int                  closed;
    char                 logged[4096];      /* every line, one a line */
} harness_t;


static agent_t    agent;
static harness_t  h;


static int64_t
now_ms(void)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);

    return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}


static int
agent_stopping(void)
{
    int  stop;

    pthread_mutex_lock(&agent.mutex);
    stop = agent.stop;
    pthread_mutex_unlock(&agent.mutex);

    return stop;
}


/* Waits for fd to be readable, checking for the end of the test. */

static int
agent_wait_readable(int fd)
{
    int            rc;
    struct pollfd  pfd;

    for ( ;; ) {
        if (agent_stopping()) {
            return -1;
        }

        pfd.fd = fd;
        pfd.events = POLLIN;
        pfd.revents = 0;

        rc = poll(&pfd, 1, 20);
        if (rc > 0) {
            return 0;
        }
        if (rc < 0 && errno != EINTR) {
            return -1;
        }
    }
}


static void
agent_count_body(size_t n)
{
    pthread_mutex_lock(&agent.mutex);
    agent.body_bytes += n;
    pthread_mutex_unlock(&agent.mutex);
}


/* Reads a request: its head, then its body (to its end, or to EOF). */

static void
agent_read(int fd, const answer_t *answer)
{
    char     buf[HEAD_MAX], *end, *cl;
    size_t   used, body, length;
    ssize_t  n;

    used = 0;
    end = NULL;

    while (end == NULL) {
        if (used == sizeof(buf) - 1 || agent_wait_readable(fd) != 0) {
            return;
        }

        n = recv(fd, buf + used, sizeof(buf) - 1 - used, 0);
        if (n <= 0) {
            return;
        }

        used += n;
        buf[used] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }

    end += 4;
    body = used - (end - buf);
    agent_count_body(body);

    pthread_mutex_lock(&agent.mutex);
    agent.requests++;
    memcpy(agent.head, buf, end - buf);
    agent.head[end - buf] = '\0';
    pthread_mutex_unlock(&agent.mutex);

    cl = strcasestr(buf, "\r\ncontent-length:");
    length = (cl != NULL && cl < end) ? strtoull(cl + 17, NULL, 10) : 0;

    /* an agent that never answers reads until the client leaves */
    if (answer->kind == ANSWER_NEVER) {
        length = SIZE_MAX;
    }

    while (body < length) {
        if (agent_wait_readable(fd) != 0) {
            return;
        }

        n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            return;
        }

        body += n;
        agent_count_body(n);
    }
}


static void
agent_serve(int fd, const answer_t *answer)
{
    int            n;
    char           response[256];
    struct linger  reset = { 1, 0 };

    if (answer->kind == ANSWER_CLOSE) {
        (void) setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        return;
    }

    agent_read(fd, answer);

    if (answer->kind == ANSWER_NEVER) {
        return;
    }

    if (answer->delay_ms > 0) {
        usleep(answer->delay_ms * 1000);
    }

    n = snprintf(response, sizeof(response),
                 "HTTP/1.1 %d Scripted\r\nContent-Type: text/plain\r\n"
                 "Content-Length: 3\r\nConnection: close\r\n\r\nok\n",
                 answer->status);

    (void) send(fd, response, n, MSG_NOSIGNAL);
}


static void *
agent_main(void *arg)
{
    int            fd;
    answer_t       answer;
    struct pollfd  pfd;

    while (!agent_stopping()) {
        pfd.fd = agent.listen_fd;
        pfd.events = POLLIN;
        pfd.revents = 0;

        if (poll(&pfd, 1, 20) <= 0) {
            continue;
        }

        fd = accept(agent.listen_fd, NULL, NULL);
        if (fd < 0) {
            continue;
        }

        pthread_mutex_lock(&agent.mutex);
        answer = agent.script[agent.accepted < agent.script_length
                              ? agent.accepted : agent.script_length - 1];
        agent.accepted++;
        pthread_mutex_unlock(&agent.mutex);

        agent_serve(fd, &answer);
        close(fd);

        pthread_mutex_lock(&agent.mutex);
        agent.served++;
        pthread_cond_broadcast(&agent.changed);
        pthread_mutex_unlock(&agent.mutex);
    }

    return NULL;
}


/* A port of 127.0.0.1 that refuses connections (bound, not listening). */

static uint16_t
closed_port(int *fd)
{
    socklen_t           len;
    struct sockaddr_in  sin;

    *fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*fd >= 0);

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    assert_int_equal(bind(*fd, (struct sockaddr *) &sin, sizeof(sin)), 0);

    len = sizeof(sin);
    assert_int_equal(getsockname(*fd, (struct sockaddr *) &sin, &len), 0);

    return ntohs(sin.sin_port);
}


static void
agent_start(const answer_t *script, unsigned length)
{
    int                 one;
    socklen_t           len;
    struct sockaddr_in  sin;

    memset(&agent, 0, sizeof(agent));
    pthread_mutex_init(&agent.mutex, NULL);
    pthread_cond_init(&agent.changed, NULL);

    assert_true(length > 0 && length <= SCRIPT_MAX);
    memcpy(agent.script, script, length * sizeof(answer_t));
    agent.script_length = length;

    agent.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(agent.listen_fd >= 0);

    one = 1;
    (void) setsockopt(agent.listen_fd, SOL_SOCKET, SO_REUSEADDR, &one,
                      sizeof(one));

    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    assert_int_equal(bind(agent.listen_fd, (struct sockaddr *) &sin,
                          sizeof(sin)), 0);
    assert_int_equal(listen(agent.listen_fd, 16), 0);

    len = sizeof(sin);
    assert_int_equal(getsockname(agent.listen_fd, (struct sockaddr *) &sin,
                                 &len), 0);
    agent.port = ntohs(sin.sin_port);

    assert_int_equal(pthread_create(&agent.thread, NULL, agent_main, NULL),
                     0);
    agent.running = 1;
}


/* Waits until the agent has closed served connections (5 s at most). */

static void
agent_wait_served(unsigned served)
{
    int              rc;
    struct timespec  deadline;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 5;

    rc = 0;

    pthread_mutex_lock(&agent.mutex);
    while (agent.served < served && rc == 0) {
        rc = pthread_cond_timedwait(&agent.changed, &agent.mutex, &deadline);
    }
    pthread_mutex_unlock(&agent.mutex);

    if (rc != 0) {
        fail_msg("the agent served %u connections, not %u", agent.served,
                 served);
    }
}


static void
agent_stop(void)
{
    if (!agent.running) {
        return;
    }

    agent.running = 0;

    pthread_mutex_lock(&agent.mutex);
    agent.stop = 1;
    pthread_mutex_unlock(&agent.mutex);

    pthread_join(agent.thread, NULL);
    close(agent.listen_fd);
    pthread_mutex_destroy(&agent.mutex);
    pthread_cond_destroy(&agent.changed);
}


static uint64_t
agent_body_bytes(void)
{
    uint64_t  n;

    pthread_mutex_lock(&agent.mutex);
    n = agent.body_bytes;
    pthread_mutex_unlock(&agent.mutex);

    return n;
}


/* the uploader's side */

static void
on_log(void *data, int level, const char *message)
{
    harness_t  *hs = data;
    size_t      used;

    used = strlen(hs->logged);
    snprintf(hs->logged + used, sizeof(hs->logged) - used, "%s\n", message);
}


static void
on_tick(uv_timer_t *timer)
{
    /* only wakes uv_run up */
}


static void
on_closed(void *data)
{
    harness_t  *hs = data;

    hs->closed = 1;
}


/* The uploader as the agent's (body NULL), or another server's. */

typedef struct {
    const char          *prefix;            /* after the URL's port */
    const char          *path;
    const char          *content_type;
    const char          *server;
    const char * const  *headers;
    size_t               header_count;
} body_conf_t;


static void
harness_start_for(uint16_t port, int64_t timeout_ms, const body_conf_t *b)
{
    prof_upload_conf_t  conf;

    memset(&h, 0, sizeof(h));
    assert_int_equal(uv_loop_init(&h.loop), 0);
    assert_int_equal(uv_timer_init(&h.loop, &h.tick), 0);
    assert_int_equal(uv_timer_start(&h.tick, on_tick, 5, 5), 0);

    /* this thread is the server's: lines reach on_log at once */
    assert_int_equal(prof_log_init(&h.log), 0);
    h.log.handler = on_log;
    h.log.data = &h;

    snprintf(h.url, sizeof(h.url), "http://127.0.0.1:%u%s", (unsigned) port,
             b != NULL ? b->prefix : "");

    memset(&conf, 0, sizeof(conf));
    conf.url = h.url;
    conf.timeout_ms = timeout_ms;
    conf.origin = "test-profiler";
    conf.origin_version = "0.0.1";
    conf.counters = &h.diag.uploads;
    conf.log = &h.log;

    if (b != NULL) {
        conf.path = b->path;
        conf.content_type = b->content_type;
        conf.server = b->server;
        conf.headers = b->headers;
        conf.header_count = b->header_count;
    }

    h.uploader = prof_uploader_create(&h.loop, &conf);
    assert_non_null(h.uploader);
}


static void
harness_start(uint16_t port, int64_t timeout_ms)
{
    harness_start_for(port, timeout_ms, NULL);
}


/* A profile of known sizes: its multipart body is the same every time. */

static void
submit(uint64_t sequence)
{
    size_t          i;
    prof_upload_t  *up;

    up = calloc(1, sizeof(prof_upload_t));
    assert_non_null(up);

    up->sequence = sequence;

    assert_int_equal(prof_buffer_append_str(&up->event,
                         "{\"attachments\":[\"profile.pprof\"]}"), 0);
    assert_int_equal(prof_buffer_reserve(&up->pprof, PPROF_BYTES), 0);
    for (i = 0; i < PPROF_BYTES; i++) {
        up->pprof.data[i] = (unsigned char) (i * 2654435761u >> 13);
    }
    up->pprof.length = PPROF_BYTES;
    assert_int_equal(prof_buffer_append_str(&up->provenance,
                                            "{\"v1\":[]}"), 0);

    h.submitted++;
    prof_uploader_submit(h.uploader, up);
}


static uint64_t
outcomes(void)
{
    const prof_diagnostics_t  *d = &h.diag;

    return prof_counter_get(d->uploads.succeeded)
           + prof_counter_get(d->uploads.failed_connect)
           + prof_counter_get(d->uploads.failed_timeout)
           + prof_counter_get(d->uploads.failed_4xx)
           + prof_counter_get(d->uploads.failed_5xx)
           + prof_counter_get(d->uploads.failed_other)
           + prof_counter_get(d->uploads.dropped);
}


/* Runs the loop until every profile submitted has its outcome. */

static void
run_until_ended(int64_t timeout_ms)
{
    int64_t  deadline;

    deadline = now_ms() + timeout_ms;

    while (outcomes() < h.submitted) {
        if (now_ms() > deadline) {
            fail_msg("%llu outcomes of %u profiles after %lld ms",
                     (unsigned long long) outcomes(), h.submitted,
                     (long long) timeout_ms);
        }

        (void) uv_run(&h.loop, UV_RUN_ONCE);
    }
}


/* Runs the loop until the agent has read bytes of a request. */

static void
run_until_agent_reads(int64_t timeout_ms)
{
    int64_t  deadline;

    deadline = now_ms() + timeout_ms;

    while (agent_body_bytes() == 0) {
        if (now_ms() > deadline) {
            fail_msg("the agent read nothing in %lld ms",
                     (long long) timeout_ms);
        }

        (void) uv_run(&h.loop, UV_RUN_ONCE);
    }
}


/* Closes the uploader (deadline_ms), and the loop once it is closed. */

static void
harness_close(int64_t deadline_ms)
{
    int64_t  deadline;

    prof_uploader_close(h.uploader, deadline_ms, on_closed, &h);

    deadline = now_ms() + deadline_ms + 5000;

    while (!h.closed) {
        if (now_ms() > deadline) {
            fail_msg("the uploader did not close");
        }

        (void) uv_run(&h.loop, UV_RUN_ONCE);
    }

    h.uploader = NULL;

    uv_close((uv_handle_t *) &h.tick, NULL);
    (void) uv_run(&h.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&h.loop), 0);

    prof_log_free(&h.log);
}


typedef struct {
    uint64_t  succeeded;
    uint64_t  failed_connect;
    uint64_t  failed_timeout;
    uint64_t  failed_4xx;
    uint64_t  failed_5xx;
    uint64_t  failed_other;
    uint64_t  dropped;
    uint64_t  attempted;
    uint64_t  retried;
} expected_t;


/* The counters, and the identity of upload.h. */

static void
assert_counters(const expected_t *e)
{
    const prof_diagnostics_t  *d = &h.diag;

    assert_int_equal(prof_counter_get(d->uploads.succeeded), e->succeeded);
    assert_int_equal(prof_counter_get(d->uploads.failed_connect),
                     e->failed_connect);
    assert_int_equal(prof_counter_get(d->uploads.failed_timeout),
                     e->failed_timeout);
    assert_int_equal(prof_counter_get(d->uploads.failed_4xx),
                     e->failed_4xx);
    assert_int_equal(prof_counter_get(d->uploads.failed_5xx),
                     e->failed_5xx);
    assert_int_equal(prof_counter_get(d->uploads.failed_other),
                     e->failed_other);
    assert_int_equal(prof_counter_get(d->uploads.dropped), e->dropped);
    assert_int_equal(prof_counter_get(d->uploads.attempted), e->attempted);
    assert_int_equal(prof_counter_get(d->uploads.retried), e->retried);

    assert_int_equal(outcomes(), h.submitted);
}


/* bytes_sent is what the agent read of the bodies, once it has closed
   served connections. */

static void
assert_bytes_received(unsigned served)
{
    agent_wait_served(served);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     agent_body_bytes());
}


/* A test that failed leaves its agent running: stopped here. */

static int
teardown(void **state)
{
    agent_stop();

    return 0;
}


#define UPLOAD_TEST(f)  cmocka_unit_test_teardown(f, teardown)


/* The body of one profile, as the agent reads it when answering 200. */

static uint64_t  one_body_bytes;


static int
group_setup(void **state)
{
    answer_t  ok = { ANSWER_STATUS, 200, 0 };

    agent_start(&ok, 1);
    harness_start(agent.port, 5000);
    submit(1);
    run_until_ended(5000);
    harness_close(0);
    agent_wait_served(1);
    one_body_bytes = agent_body_bytes();
    agent_stop();

    return (one_body_bytes > PPROF_BYTES) ? 0 : -1;
}


static void
test_200_succeeds(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 200, 0 } };
    expected_t  e = { .succeeded = 1, .attempted = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(1);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     one_body_bytes);

    /* what was sent, and where */
    assert_int_equal(agent.requests, 1);
    assert_non_null(strstr(agent.head, "POST /profiling/v1/input "));
    assert_non_null(strstr(agent.head, "DD-EVP-ORIGIN: test-profiler\r\n"));
    assert_non_null(strstr(agent.head,
                           "DD-EVP-ORIGIN-VERSION: 0.0.1\r\n"));
    assert_non_null(strstr(agent.head,
                           "Content-Type: multipart/form-data"));
    assert_string_equal(h.logged, "");

    agent_stop();
}


static void
test_404_fails_4xx_without_retry(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 404, 0 } };
    expected_t  e = { .failed_4xx = 1, .attempted = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(1);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     one_body_bytes);
    assert_non_null(strstr(h.logged, "answered 404: agent too old"));

    agent_stop();
}


static void
test_403_fails_4xx_without_retry(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 403, 0 } };
    expected_t  e = { .failed_4xx = 1, .attempted = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(1);
    assert_non_null(strstr(h.logged, "answered 403"));

    agent_stop();
}


static void
test_500_then_200_succeeds_on_the_retry(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 500, 0 },
                             { ANSWER_STATUS, 200, 0 } };
    expected_t  e = { .succeeded = 1, .attempted = 2, .retried = 1 };

    agent_start(script, 2);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(2);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     2 * one_body_bytes);
    assert_string_equal(h.logged, "");

    agent_stop();
}


static void
test_500_twice_fails_5xx_once(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 500, 0 } };
    expected_t  e = { .failed_5xx = 1, .attempted = 2, .retried = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(2);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     2 * one_body_bytes);
    assert_non_null(strstr(h.logged, "answered 500 (tries: 2)"));

    agent_stop();
}


static void
test_503_then_404_fails_4xx(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 503, 0 },
                             { ANSWER_STATUS, 404, 0 } };
    expected_t  e = { .failed_4xx = 1, .attempted = 2, .retried = 1 };

    agent_start(script, 2);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(2);

    agent_stop();
}


static void
test_refused_twice_fails_connect(void **state)
{
    int         fd;
    uint16_t    port;
    expected_t  e = { .failed_connect = 1, .attempted = 2, .retried = 1 };

    port = closed_port(&fd);
    harness_start(port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);
    close(fd);

    assert_counters(&e);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     0);
    assert_non_null(strstr(h.logged, "Couldn't connect to server, "
                                     "tries: 2"));
}


static void
test_reset_connections_fail_connect(void **state)
{
    answer_t    script[] = { { ANSWER_CLOSE, 0, 0 } };
    expected_t  e = { .failed_connect = 1, .attempted = 2, .retried = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);

    /* the agent read nothing; what curl wrote before the reset, if
       anything, was sent all the same */
    agent_wait_served(2);
    assert_int_equal(agent.requests, 0);
    assert_true(prof_counter_get(h.diag.uploads.bytes_sent)
                <= 2 * one_body_bytes);

    agent_stop();
}


static void
test_silent_agent_times_out_twice(void **state)
{
    answer_t    script[] = { { ANSWER_NEVER, 0, 0 } };
    expected_t  e = { .failed_timeout = 1, .attempted = 2, .retried = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 300);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(2);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     2 * one_body_bytes);
    assert_non_null(strstr(h.logged, "timed out after 300 ms (tries: 2)"));

    agent_stop();
}


static void
test_a_waiting_profile_is_replaced(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 200, 0 } };
    expected_t  e = { .succeeded = 2, .dropped = 1, .attempted = 2 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    /* 1 in flight, 2 waits, 3 replaces it */
    submit(1);
    submit(2);
    submit(3);
    assert_int_equal(prof_counter_get(h.diag.uploads.dropped), 1);
    assert_non_null(strstr(h.logged, "profile 2 dropped"));

    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(2);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     2 * one_body_bytes);

    agent_stop();
}


static void
test_close_deadline_drops_what_is_in_flight(void **state)
{
    answer_t    script[] = { { ANSWER_NEVER, 0, 0 } };
    expected_t  e = { .dropped = 2, .attempted = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 10000);

    submit(1);
    submit(2);
    run_until_agent_reads(5000);

    /* 1 in flight, 2 waiting: both given up at the deadline */
    harness_close(100);

    assert_counters(&e);
    assert_bytes_received(1);
    assert_true(prof_counter_get(h.diag.uploads.bytes_sent) > 0);
    /* one line a minute per cause: the first drop only */
    assert_non_null(strstr(h.logged, "profile 1 dropped: still uploading"));
    assert_null(strstr(h.logged, "profile 2"));

    agent_stop();
}


static void
test_no_retry_once_closing(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 500, 200 } };
    expected_t  e = { .failed_5xx = 1, .attempted = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_agent_reads(5000);

    /* the answer comes within the deadline: the profile ends with it */
    harness_close(3000);

    assert_counters(&e);
    assert_bytes_received(1);
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     one_body_bytes);

    agent_stop();
}


static void
test_other_statuses_fail_other(void **state)
{
    answer_t    script[] = { { ANSWER_STATUS, 302, 0 } };
    expected_t  e = { .failed_other = 1, .attempted = 1 };

    agent_start(script, 1);
    harness_start(agent.port, 5000);

    submit(1);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    assert_bytes_received(1);
    assert_non_null(strstr(h.logged, "status 302"));

    agent_stop();
}


/*
 * Another server's upload: the body as it is (no multipart), to its path
 * after the URL's prefix, with its content type and headers, and the log
 * naming the server.
 */
static void
test_a_body_goes_as_it_is_to_its_path(void **state)
{
    answer_t             script[] = { { ANSWER_STATUS, 200, 0 },
                                      { ANSWER_STATUS, 429, 0 } };
    expected_t           e = { .succeeded = 1, .failed_4xx = 1,
                               .attempted = 2 };
    static const char   *headers[] = { "X-Scope-OrgID: t1",
                                       "Authorization: Bearer s3cret" };
    body_conf_t          b = { "/prefix/", "/push.v1.PusherService/Push",
                               "application/proto", "Pyroscope", headers,
                               2 };

    /* a prefix path in the URL, and a slash after it */
    agent_start(script, 2);
    harness_start_for(agent.port, 5000, &b);

    submit(1);
    run_until_ended(5000);
    assert_non_null(strstr(agent.head,
                           "POST /prefix/push.v1.PusherService/Push "));
    assert_non_null(strstr(agent.head,
                           "Content-Type: application/proto\r\n"));
    assert_non_null(strstr(agent.head, "X-Scope-OrgID: t1\r\n"));
    assert_non_null(strstr(agent.head,
                           "Authorization: Bearer s3cret\r\n"));
    assert_null(strstr(agent.head, "multipart"));
    assert_null(strstr(agent.head, "DD-EVP-ORIGIN"));

    submit(2);
    run_until_ended(5000);
    harness_close(0);

    assert_counters(&e);
    /* the body as it is: exactly the bytes of the profile, each time */
    assert_int_equal(prof_counter_get(h.diag.uploads.bytes_sent),
                     2 * PPROF_BYTES);
    assert_non_null(strstr(h.logged, "Pyroscope at \""));
    assert_non_null(strstr(h.logged, "answered 429"));
    assert_null(strstr(h.logged, "s3cret"));

    agent_stop();
}


int
main(void)
{
    int                      rc;
    const struct CMUnitTest  tests[] = {
        UPLOAD_TEST(test_200_succeeds),
        UPLOAD_TEST(test_404_fails_4xx_without_retry),
        UPLOAD_TEST(test_403_fails_4xx_without_retry),
        UPLOAD_TEST(test_500_then_200_succeeds_on_the_retry),
        UPLOAD_TEST(test_500_twice_fails_5xx_once),
        UPLOAD_TEST(test_503_then_404_fails_4xx),
        UPLOAD_TEST(test_refused_twice_fails_connect),
        UPLOAD_TEST(test_reset_connections_fail_connect),
        UPLOAD_TEST(test_silent_agent_times_out_twice),
        UPLOAD_TEST(test_a_waiting_profile_is_replaced),
        UPLOAD_TEST(test_close_deadline_drops_what_is_in_flight),
        UPLOAD_TEST(test_no_retry_once_closing),
        UPLOAD_TEST(test_other_statuses_fail_other),
        UPLOAD_TEST(test_a_body_goes_as_it_is_to_its_path),
    };

    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        return 1;
    }

    rc = cmocka_run_group_tests(tests, group_setup, NULL);

    curl_global_cleanup();

    return rc;
}
