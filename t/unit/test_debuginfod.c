/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Debug files fetched by build id (shared/profiler/debuginfod.c) from a small
 * debuginfod stand-in served by a thread of the test: a file it has is
 * fetched once and kept, one it lacks is not asked again within the retry
 * time, an unreachable server fails every build id at once, and the cache
 * keeps to its bound.
 */

#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "unit.h"
#include "profiler/debuginfod.h"


#define SERVED_ID    "0123456789abcdef0123456789abcdef01234567"
#define MISSING_ID   "fedcba9876543210fedcba9876543210fedcba98"
#define SERVED_BODY  "debug file of " SERVED_ID


typedef struct {
    int          listen_fd;
    int          port;
    int          requests;          /* atomic */
    int          stop;              /* atomic */
    uv_thread_t  thread;
} server_t;


/* One request a connection: the served build id's file, else 404. */
static void
server_main(void *arg)
{
    int         fd;
    char        req[4096], resp[512];
    ssize_t     n;
    size_t      len;
    server_t   *s = arg;

    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        fd = accept(s->listen_fd, NULL, NULL);
        if (fd < 0) {
            continue;
        }

        len = 0;
        while (len < sizeof(req) - 1
               && (n = read(fd, req + len, sizeof(req) - 1 - len)) > 0)
        {
            len += n;
            req[len] = '\0';
            if (strstr(req, "\r\n\r\n") != NULL) {
                break;
            }
        }
        req[len] = '\0';

        if (strncmp(req, "GET /quit", 9) == 0) {
            close(fd);
            break;
        }

        __atomic_fetch_add(&s->requests, 1, __ATOMIC_ACQ_REL);

        if (strstr(req, "GET /buildid/" SERVED_ID "/debuginfo ") != NULL) {
            len = snprintf(resp, sizeof(resp), "HTTP/1.1 200 OK\r\n"
                           "Content-Length: %zu\r\nConnection: close\r\n\r\n"
                           "%s", sizeof(SERVED_BODY) - 1, SERVED_BODY);
        } else {
            len = snprintf(resp, sizeof(resp), "HTTP/1.1 404 Not Found\r\n"
                           "Content-Length: 0\r\nConnection: close\r\n\r\n");
        }

        (void) write(fd, resp, len);
        close(fd);
    }
}


static void
server_start(server_t *s)
{
    int                 one = 1;
    socklen_t           alen;
    struct sockaddr_in  a;

    memset(s, 0, sizeof(*s));
    s->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(s->listen_fd >= 0);
    (void) setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one,
                      sizeof(one));

    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(s->listen_fd, (struct sockaddr *) &a, sizeof(a)),
                     0);
    assert_int_equal(listen(s->listen_fd, 16), 0);

    alen = sizeof(a);
    assert_int_equal(getsockname(s->listen_fd, (struct sockaddr *) &a,
                                 &alen), 0);
    s->port = ntohs(a.sin_port);

    assert_int_equal(uv_thread_create(&s->thread, server_main, s), 0);
}


static void
server_stop(server_t *s)
{
    int                 fd;
    struct sockaddr_in  a;

    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);

    /* Wakes its accept(). */
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(s->port);
    (void) connect(fd, (struct sockaddr *) &a, sizeof(a));
    (void) write(fd, "GET /quit\r\n\r\n", 13);
    close(fd);

    (void) uv_thread_join(&s->thread);
    close(s->listen_fd);
}


typedef struct {
    char                    cache[64];
    char                    urls[64];
    prof_diagnostics_t      diag;
    prof_debuginfod_conf_t  conf;
} fixture_t;


static void
fixture_init(fixture_t *f, int port, uint64_t cache_max_bytes)
{
    memset(f, 0, sizeof(*f));
    snprintf(f->cache, sizeof(f->cache), "/tmp/prof-debuginfod-XXXXXX");
    assert_non_null(mkdtemp(f->cache));
    snprintf(f->urls, sizeof(f->urls), "http://127.0.0.1:%d", port);

    f->conf.urls = f->urls;
    f->conf.cache_dir = f->cache;
    f->conf.cache_max_bytes = cache_max_bytes;
    f->conf.timeout_ms = 5000;
    f->conf.retry_ms = 60000;
    f->conf.diagnostics = &f->diag;

    assert_int_equal(prof_debuginfod_setenv(&f->conf), 0);
}


static void
fixture_free(fixture_t *f)
{
    char  cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->cache);
    assert_int_equal(system(cmd), 0);
}


static int64_t
deadline_ns(int seconds)
{
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((int64_t) ts.tv_sec + seconds) * 1000000000 + ts.tv_nsec;
}


static void
test_a_served_debug_file_is_fetched_once_and_kept(void **state)
{
    int                 fd;
    char                body[128];
    ssize_t             n;
    server_t            s;
    fixture_t           f;
    prof_debuginfod_t  *d;

    server_start(&s);
    fixture_init(&f, s.port, 0);

    d = prof_debuginfod_create(&f.conf);
    assert_non_null(d);

    assert_int_equal(prof_debuginfod_ask(d, SERVED_ID),
                     PROF_DEBUGINFOD_PENDING);
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(10)), 0);

    assert_int_equal(prof_debuginfod_take(d, SERVED_ID, &fd),
                     PROF_DEBUGINFOD_FOUND);
    n = pread(fd, body, sizeof(body), 0);
    close(fd);
    assert_int_equal(n, sizeof(SERVED_BODY) - 1);
    assert_memory_equal(body, SERVED_BODY, n);

    /* Asked again: what it became, nothing fetched. */
    assert_int_equal(prof_debuginfod_ask(d, SERVED_ID),
                     PROF_DEBUGINFOD_FOUND);
    assert_int_equal(prof_debuginfod_take(d, SERVED_ID, &fd),
                     PROF_DEBUGINFOD_FOUND);
    close(fd);

    assert_int_equal(__atomic_load_n(&s.requests, __ATOMIC_ACQUIRE), 1);
    assert_int_equal(f.diag.debuginfod_asked, 1);
    assert_int_equal(f.diag.debuginfod_found, 1);
    assert_int_equal(f.diag.debuginfod_failed, 0);

    prof_debuginfod_destroy(d);
    server_stop(&s);
    fixture_free(&f);
}


static void
test_a_missing_build_id_is_not_asked_again_before_the_retry(void **state)
{
    int                 fd;
    server_t            s;
    fixture_t           f;
    prof_debuginfod_t  *d;

    server_start(&s);
    fixture_init(&f, s.port, 0);

    d = prof_debuginfod_create(&f.conf);
    assert_non_null(d);

    assert_int_equal(prof_debuginfod_ask(d, MISSING_ID),
                     PROF_DEBUGINFOD_PENDING);
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(10)), 0);
    assert_int_equal(prof_debuginfod_take(d, MISSING_ID, &fd),
                     PROF_DEBUGINFOD_FAILED);
    assert_int_equal(fd, -1);

    assert_int_equal(prof_debuginfod_ask(d, MISSING_ID),
                     PROF_DEBUGINFOD_FAILED);
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(10)), 0);

    /* "Not found" is no server down: another build id is asked. */
    assert_int_equal(prof_debuginfod_ask(d, SERVED_ID),
                     PROF_DEBUGINFOD_PENDING);
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(10)), 0);
    assert_int_equal(prof_debuginfod_take(d, SERVED_ID, &fd),
                     PROF_DEBUGINFOD_FOUND);
    close(fd);

    assert_int_equal(__atomic_load_n(&s.requests, __ATOMIC_ACQUIRE), 2);
    assert_int_equal(f.diag.debuginfod_asked, 2);
    assert_int_equal(f.diag.debuginfod_failed, 1);

    prof_debuginfod_destroy(d);
    server_stop(&s);
    fixture_free(&f);
}


static void
test_an_unreachable_server_fails_every_build_id_at_once(void **state)
{
    int                 fd, port;
    server_t            s;
    fixture_t           f;
    prof_debuginfod_t  *d;

    /* A port that was free a moment ago. */
    server_start(&s);
    port = s.port;
    server_stop(&s);

    fixture_init(&f, port, 0);

    d = prof_debuginfod_create(&f.conf);
    assert_non_null(d);

    assert_int_equal(prof_debuginfod_ask(d, MISSING_ID),
                     PROF_DEBUGINFOD_PENDING);
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(10)), 0);
    assert_int_equal(prof_debuginfod_take(d, MISSING_ID, &fd),
                     PROF_DEBUGINFOD_FAILED);

    /* The server is down for the retry time: not tried for another. */
    (void) prof_debuginfod_ask(d, SERVED_ID);
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(10)), 0);
    assert_int_equal(prof_debuginfod_take(d, SERVED_ID, &fd),
                     PROF_DEBUGINFOD_FAILED);

    assert_int_equal(f.diag.debuginfod_failed, 2);
    assert_int_equal(f.diag.debuginfod_found, 0);

    prof_debuginfod_destroy(d);
    fixture_free(&f);
}


/* Polls until build_id is no longer being fetched, at most seconds. */
static int
poll_not_pending(prof_debuginfod_t *d, const char *build_id, int seconds)
{
    int              fd;
    int64_t          end;
    struct timespec  pause = { 0, 20 * 1000 * 1000 };

    end = deadline_ns(seconds);

    while (prof_debuginfod_take(d, build_id, &fd)
           == PROF_DEBUGINFOD_PENDING)
    {
        if (deadline_ns(0) >= end) {
            return 0;
        }
        nanosleep(&pause, NULL);
    }

    if (fd >= 0) {
        close(fd);
    }

    return 1;
}


typedef struct {
    prof_debuginfod_t  *d;
} ender_t;


static void
ender_main(void *arg)
{
    ender_t          *e = arg;
    struct timespec   pause = { 0, 100 * 1000 * 1000 };

    nanosleep(&pause, NULL);
    prof_debuginfod_end_waits(e->d, deadline_ns(0) + 100 * 1000 * 1000);
}


static void
test_a_wait_under_way_ends_when_waits_are_ended(void **state)
{
    int                 fd;
    server_t            s;
    ender_t             e;
    fixture_t           f;
    uv_thread_t         ender;
    prof_debuginfod_t  *d;

    /* A server that takes the connection and never answers. */
    server_start(&s);
    fixture_init(&f, s.port, 0);
    f.conf.timeout_ms = 1000;
    assert_int_equal(prof_debuginfod_setenv(&f.conf), 0);

    /* Its thread stopped, a second descriptor keeps the listening socket:
       nothing accepts. */
    fd = fcntl(s.listen_fd, F_DUPFD_CLOEXEC, 0);
    assert_true(fd >= 0);
    server_stop(&s);

    d = prof_debuginfod_create(&f.conf);
    assert_non_null(d);

    assert_int_equal(prof_debuginfod_ask(d, SERVED_ID),
                     PROF_DEBUGINFOD_PENDING);

    e.d = d;
    assert_int_equal(uv_thread_create(&ender, ender_main, &e), 0);

    /* Cut short: the fetch is still under way when the wait returns. */
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(30)), 1);
    (void) uv_thread_join(&ender);

    /* And so are the waits to come. */
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(30)), 1);

    /* The fetch ends at its timeout: then everything can go. */
    close(fd);
    assert_true(poll_not_pending(d, SERVED_ID, 30));

    prof_debuginfod_destroy(d);
    fixture_free(&f);
}


static void
test_the_cache_keeps_to_its_bound(void **state)
{
    int                 fd;
    char                path[160];
    server_t            s;
    fixture_t           f;
    struct stat         st;
    struct timespec     old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
    prof_debuginfod_t  *d;
    static char         big[2 << 20];

    server_start(&s);
    fixture_init(&f, s.port, 1 << 20);

    /* An old entry of 2 MB, and a settings file that must stay. */
    snprintf(path, sizeof(path), "%s/%s", f.cache, MISSING_ID);
    assert_int_equal(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/%s/debuginfo", f.cache, MISSING_ID);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, big, sizeof(big)), sizeof(big));
    assert_int_equal(futimens(fd, old), 0);
    close(fd);
    snprintf(path, sizeof(path), "%s/max_unused_age_s", f.cache);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    close(fd);

    d = prof_debuginfod_create(&f.conf);
    assert_non_null(d);

    (void) prof_debuginfod_ask(d, SERVED_ID);
    assert_int_equal(prof_debuginfod_wait(d, deadline_ns(10)), 0);
    assert_int_equal(prof_debuginfod_take(d, SERVED_ID, &fd),
                     PROF_DEBUGINFOD_FOUND);
    close(fd);

    snprintf(path, sizeof(path), "%s/%s", f.cache, MISSING_ID);
    assert_int_equal(stat(path, &st), -1);
    snprintf(path, sizeof(path), "%s/%s/debuginfo", f.cache, SERVED_ID);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof(path), "%s/max_unused_age_s", f.cache);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(f.diag.debuginfod_evicted, 1);

    prof_debuginfod_destroy(d);
    server_stop(&s);
    fixture_free(&f);
}


int
main(void)
{
    const struct CMUnitTest  tests[] = {
        cmocka_unit_test(test_a_served_debug_file_is_fetched_once_and_kept),
        cmocka_unit_test(
            test_a_missing_build_id_is_not_asked_again_before_the_retry),
        cmocka_unit_test(
            test_an_unreachable_server_fails_every_build_id_at_once),
        cmocka_unit_test(test_the_cache_keeps_to_its_bound),
        cmocka_unit_test(test_a_wait_under_way_ends_when_waits_are_ended),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
