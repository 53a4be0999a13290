/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Uploader: libcurl multi-socket driven by libuv poll and timer handles
 * on the profiler loop, one transfer at a time.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "common/clock.h"
#include "profiler/upload.h"


#define PROF_CONNECT_TIMEOUT_MS  2000
#define PROF_UPLOAD_PATH         "/profiling/v1/input"
#define PROF_ANSWER_MAX          4096       /* bytes of an answer kept */


struct prof_uploader_s {
    prof_upload_conf_t   conf;
    const char          *server;            /* in the log */
    char                *url;
    char                *unix_path;         /* NULL: TCP */
    uv_loop_t           *loop;
    CURLM               *multi;
    uv_timer_t           curl_timer;
    uv_timer_t           deadline_timer;

    prof_upload_t       *in_flight;
    CURL                *easy;
    curl_mime           *mime;
    struct curl_slist   *headers;
    prof_upload_t       *waiting;           /* the next one, at most one */
    prof_buffer_t        answer;            /* the try's answer's body,
                                               with conf.answer */

    unsigned             closing:1;
    unsigned             finished:1;
    unsigned             open_handles;
    void               (*closed)(void *data);
    void                *closed_data;

    int64_t              last_ns;           /* the last outcome: unix ns */
    char                 last[160];
};


typedef struct {
    uv_poll_t            poll;
    prof_uploader_t     *uploader;
    curl_socket_t        fd;
} prof_upload_socket_t;


static void prof_uploader_check(prof_uploader_t *u);
static unsigned prof_upload_cause(prof_uploader_t *u, unsigned cause);
static void prof_uploader_next(prof_uploader_t *u);
static void prof_uploader_finish(prof_uploader_t *u);


/* The uploader's log cause for one of the agent's. */
static unsigned
prof_upload_cause(prof_uploader_t *u, unsigned cause)
{
    return u->conf.cause + (cause - PROF_CAUSE_UPLOAD_CONNECT);
}


void
prof_upload_free(prof_upload_t *up)
{
    if (up == NULL) {
        return;
    }

    prof_buffer_free(&up->event);
    prof_buffer_free(&up->pprof);
    prof_buffer_free(&up->provenance);
    free(up);
}


static void
prof_handle_closed(uv_handle_t *handle)
{
    prof_uploader_t  *u = handle->data;

    if (handle->type == UV_POLL) {
        free(handle);
    }

    if (--u->open_handles > 0) {
        return;
    }

    if (u->closed != NULL) {
        u->closed(u->closed_data);
    }

    free(u->url);
    free(u->unix_path);
    prof_buffer_free(&u->answer);
    free(u);
}


static void
prof_on_poll(uv_poll_t *handle, int status, int events)
{
    int                    running, flags;
    prof_upload_socket_t  *s = (prof_upload_socket_t *) handle;

    flags = 0;
    if (status < 0) {
        flags = CURL_CSELECT_ERR;
    }
    if (events & UV_READABLE) {
        flags |= CURL_CSELECT_IN;
    }
    if (events & UV_WRITABLE) {
        flags |= CURL_CSELECT_OUT;
    }

    (void) curl_multi_socket_action(s->uploader->multi, s->fd, flags,
                                    &running);
    prof_uploader_check(s->uploader);
}


static int
prof_on_socket(CURL *easy, curl_socket_t fd, int what, void *data,
    void *socket_data)
{
    int                    events;
    prof_uploader_t       *u = data;
    prof_upload_socket_t  *s = socket_data;

    if (what == CURL_POLL_REMOVE) {
        if (s != NULL) {
            uv_poll_stop(&s->poll);
            uv_close((uv_handle_t *) &s->poll, prof_handle_closed);
            curl_multi_assign(u->multi, fd, NULL);
        }
        return 0;
    }

    if (s == NULL) {
        s = calloc(1, sizeof(prof_upload_socket_t));
        if (s == NULL) {
            return -1;
        }

        if (uv_poll_init_socket(u->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }

        s->poll.data = u;
        s->uploader = u;
        s->fd = fd;
        u->open_handles++;
        curl_multi_assign(u->multi, fd, s);
    }

    events = 0;
    if (what & CURL_POLL_IN) {
        events |= UV_READABLE;
    }
    if (what & CURL_POLL_OUT) {
        events |= UV_WRITABLE;
    }

    (void) uv_poll_start(&s->poll, events, prof_on_poll);

    return 0;
}


static void
prof_on_curl_timer(uv_timer_t *timer)
{
    int               running;
    prof_uploader_t  *u = timer->data;

    (void) curl_multi_socket_action(u->multi, CURL_SOCKET_TIMEOUT, 0,
                                    &running);
    prof_uploader_check(u);
}


static int
prof_on_timer_change(CURLM *multi, long timeout_ms, void *data)
{
    prof_uploader_t  *u = data;

    if (timeout_ms < 0) {
        uv_timer_stop(&u->curl_timer);

    } else {
        uv_timer_start(&u->curl_timer, prof_on_curl_timer, timeout_ms, 0);
    }

    return 0;
}


static size_t
prof_discard_body(char *data, size_t size, size_t n, void *user)
{
    return size * n;
}


/* The answer's body, its first PROF_ANSWER_MAX bytes, for conf.answer. */
static size_t
prof_keep_body(char *data, size_t size, size_t n, void *user)
{
    size_t            room;
    prof_uploader_t  *u = user;

    room = PROF_ANSWER_MAX - u->answer.length;
    if (room > size * n) {
        room = size * n;
    }

    if (room > 0) {
        (void) prof_buffer_append(&u->answer, data, room);
    }

    return size * n;
}


static int
prof_mime_part(curl_mime *mime, const char *name, const char *filename,
    const char *type, const prof_buffer_t *b)
{
    curl_mimepart  *part;

    part = curl_mime_addpart(mime);

    if (part == NULL
        || curl_mime_name(part, name) != CURLE_OK
        || curl_mime_filename(part, filename) != CURLE_OK
        || curl_mime_type(part, type) != CURLE_OK
        || curl_mime_data(part, (const char *) b->data, b->length)
           != CURLE_OK)
    {
        return -ENOMEM;
    }

    return 0;
}


static void
prof_uploader_release_transfer(prof_uploader_t *u)
{
    if (u->easy != NULL) {
        curl_multi_remove_handle(u->multi, u->easy);
        curl_easy_cleanup(u->easy);
        u->easy = NULL;
    }

    curl_mime_free(u->mime);
    u->mime = NULL;
    curl_slist_free_all(u->headers);
    u->headers = NULL;
}


/* The agent's headers: its origin, and the container it tags with. */
static struct curl_slist *
prof_uploader_agent_headers(prof_uploader_t *u)
{
    char                origin[256], version[256], header[256];
    struct curl_slist  *h;

    snprintf(origin, sizeof(origin), "DD-EVP-ORIGIN: %s", u->conf.origin);
    snprintf(version, sizeof(version), "DD-EVP-ORIGIN-VERSION: %s",
             u->conf.origin_version);

    h = curl_slist_append(NULL, origin);
    if (h != NULL) {
        u->headers = h;
        h = curl_slist_append(u->headers, version);
    }

    /* The agent tags what it forwards with the container. */
    if (h != NULL && u->conf.container_id && u->conf.container_id[0]) {
        snprintf(header, sizeof(header), "Datadog-Container-ID: %s",
                 u->conf.container_id);
        h = curl_slist_append(u->headers, header);
    }

    if (h != NULL && u->conf.entity_id && u->conf.entity_id[0]) {
        snprintf(header, sizeof(header), "Datadog-Entity-ID: %s",
                 u->conf.entity_id);
        h = curl_slist_append(u->headers, header);
    }

    return h;
}


/* The agent's multipart body: event.json, the pprof, the provenance. */
static int
prof_uploader_agent_body(prof_uploader_t *u, prof_upload_t *up)
{
    u->mime = curl_mime_init(u->easy);

    if (u->mime == NULL
        || prof_mime_part(u->mime, "event", "event.json",
                          "application/json", &up->event) != 0
        || prof_mime_part(u->mime, "profile.pprof", "profile.pprof",
                          "application/octet-stream", &up->pprof) != 0
        || prof_mime_part(u->mime, "code-provenance.json",
                          "code-provenance.json", "application/json",
                          &up->provenance) != 0)
    {
        return -ENOMEM;
    }

    curl_easy_setopt(u->easy, CURLOPT_MIMEPOST, u->mime);

    return 0;
}


/* Another server's headers: its content type, and the configuration's. */
static struct curl_slist *
prof_uploader_body_headers(prof_uploader_t *u)
{
    char                type[128];
    size_t              i;
    struct curl_slist  *h;

    snprintf(type, sizeof(type), "Content-Type: %s", u->conf.content_type);

    h = curl_slist_append(NULL, type);
    u->headers = h;

    if (h != NULL && u->conf.content_encoding != NULL) {
        snprintf(type, sizeof(type), "Content-Encoding: %s",
                 u->conf.content_encoding);
        h = curl_slist_append(u->headers, type);
    }

    for (i = 0; h != NULL && i < u->conf.header_count; i++) {
        h = curl_slist_append(u->headers, u->conf.headers[i]);
    }

    return h;
}


static int
prof_uploader_start(prof_uploader_t *u, prof_upload_t *up)
{
    int                 rc;
    CURL               *easy;
    struct curl_slist  *h;

    easy = curl_easy_init();
    if (easy == NULL) {
        return -ENOMEM;
    }

    u->easy = easy;

    if (u->conf.content_type == NULL) {
        h = prof_uploader_agent_headers(u);
        rc = (h != NULL) ? prof_uploader_agent_body(u, up) : -ENOMEM;

    } else {
        h = prof_uploader_body_headers(u);
        rc = (h != NULL) ? 0 : -ENOMEM;

        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t) up->pprof.length);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, up->pprof.data);
    }

    if (rc == 0) {
        h = curl_slist_append(u->headers, "Expect:");
    }

    if (h == NULL) {
        prof_uploader_release_transfer(u);
        return -ENOMEM;
    }

    curl_easy_setopt(easy, CURLOPT_URL, u->url);
    if (u->unix_path != NULL) {
        curl_easy_setopt(easy, CURLOPT_UNIX_SOCKET_PATH, u->unix_path);
    }
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, u->headers);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, u->conf.origin);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long) u->conf.timeout_ms);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS,
                     (long) (u->conf.timeout_ms < PROF_CONNECT_TIMEOUT_MS
                             ? u->conf.timeout_ms : PROF_CONNECT_TIMEOUT_MS));
    if (u->conf.answer != NULL) {
        u->answer.length = 0;
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, prof_keep_body);
        curl_easy_setopt(easy, CURLOPT_WRITEDATA, u);

    } else {
        curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, prof_discard_body);
    }
    curl_easy_setopt(easy, CURLOPT_PRIVATE, up);

    if (curl_multi_add_handle(u->multi, easy) != CURLM_OK) {
        prof_uploader_release_transfer(u);
        return -ENOMEM;
    }

    up->attempts++;
    u->in_flight = up;
    prof_counter_add(u->conf.counters->attempted, 1);

    return 0;
}


/* How a try ended. */
typedef enum {
    PROF_UPLOAD_SUCCEEDED = 0,
    PROF_UPLOAD_FAILED_CONNECT,
    PROF_UPLOAD_FAILED_TIMEOUT,
    PROF_UPLOAD_FAILED_4XX,
    PROF_UPLOAD_FAILED_5XX,
    PROF_UPLOAD_FAILED_OTHER
} prof_upload_outcome_e;


static prof_upload_outcome_e
prof_upload_outcome(CURLcode result, long status)
{
    switch (result) {

    case CURLE_OK:
        if (status >= 200 && status < 300) {
            return PROF_UPLOAD_SUCCEEDED;
        }
        if (status >= 400 && status < 500) {
            return PROF_UPLOAD_FAILED_4XX;
        }
        if (status >= 500 && status < 600) {
            return PROF_UPLOAD_FAILED_5XX;
        }
        return PROF_UPLOAD_FAILED_OTHER;

    case CURLE_OPERATION_TIMEDOUT:
        return PROF_UPLOAD_FAILED_TIMEOUT;

    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
        return PROF_UPLOAD_FAILED_CONNECT;

    default:
        return PROF_UPLOAD_FAILED_OTHER;
    }
}


/* What the last profile became, for the status page. */
static void
prof_uploader_note(prof_uploader_t *u, const char *fmt, ...)
{
    va_list          args;

    u->last_ns = prof_clock_ns(CLOCK_REALTIME);

    va_start(args, fmt);
    vsnprintf(u->last, sizeof(u->last), fmt, args);
    va_end(args);
}


/* The outcome noted, once it is logged too. */
static void
prof_uploader_tell(prof_uploader_t *u)
{
    if (u->conf.outcome != NULL) {
        u->conf.outcome(u->conf.outcome_data, u->last);
    }
}


/* Counts and logs the one outcome of a profile, and frees it. */
static void
prof_uploader_end(prof_uploader_t *u, prof_upload_t *up,
    prof_upload_outcome_e outcome, CURLcode result, long status)
{
    prof_log_t          *log = u->conf.log;
    prof_upload_counters_t  *d = u->conf.counters;

    switch (outcome) {

    case PROF_UPLOAD_SUCCEEDED:
        prof_counter_add(d->succeeded, 1);
        prof_uploader_note(u, "uploaded (HTTP %ld)", status);
        break;

    case PROF_UPLOAD_FAILED_4XX:
        prof_counter_add(d->failed_4xx, 1);
        prof_uploader_note(u, "failed: %s answered %ld%s", u->server,
                           status,
                           (status == 404 && u->conf.path == NULL)
                           ? " (agent too old or APM disabled)" : "");

        if (status == 404) {
            prof_log_limited(log,
                             prof_upload_cause(u, PROF_CAUSE_UPLOAD_404),
                             PROF_LOG_ERR,
                             "profiling: %s at \"%s\" answered 404%s, "
                             "profile %llu not uploaded", u->server,
                             u->conf.url, u->conf.path == NULL
                                          ? ": agent too old or APM "
                                            "disabled" : "",
                             (unsigned long long) up->sequence);
        } else {
            prof_log_limited(log,
                             prof_upload_cause(u, PROF_CAUSE_UPLOAD_4XX),
                             PROF_LOG_ERR,
                             "profiling: %s at \"%s\" answered %ld, "
                             "profile %llu not uploaded", u->server,
                             u->conf.url,
                             status, (unsigned long long) up->sequence);
        }

        break;

    case PROF_UPLOAD_FAILED_5XX:
        prof_counter_add(d->failed_5xx, 1);
        prof_uploader_note(u, "failed: %s answered %ld (tries: %u)",
                           u->server, status, up->attempts);
        prof_log_limited(log,
                         prof_upload_cause(u, PROF_CAUSE_UPLOAD_5XX),
                         PROF_LOG_ERR,
                         "profiling: %s at \"%s\" answered %ld "
                         "(tries: %u), profile %llu not uploaded",
                         u->server, u->conf.url, status, up->attempts,
                         (unsigned long long) up->sequence);
        break;

    case PROF_UPLOAD_FAILED_TIMEOUT:
        prof_counter_add(d->failed_timeout, 1);
        prof_uploader_note(u, "failed: timed out after %lld ms (tries: %u)",
                           (long long) u->conf.timeout_ms, up->attempts);
        prof_log_limited(log,
                         prof_upload_cause(u, PROF_CAUSE_UPLOAD_TIMEOUT),
                         PROF_LOG_ERR,
                         "profiling: upload to \"%s\" timed out after "
                         "%lld ms (tries: %u), profile %llu not uploaded",
                         u->conf.url, (long long) u->conf.timeout_ms,
                         up->attempts, (unsigned long long) up->sequence);
        break;

    case PROF_UPLOAD_FAILED_CONNECT:
        prof_counter_add(d->failed_connect, 1);
        prof_uploader_note(u, "failed: %s (tries: %u)",
                           curl_easy_strerror(result), up->attempts);
        prof_log_limited(log,
                         prof_upload_cause(u, PROF_CAUSE_UPLOAD_CONNECT),
                         PROF_LOG_ERR,
                         "profiling: upload to \"%s\" failed (%s, tries: "
                         "%u), profile %llu not uploaded", u->conf.url,
                         curl_easy_strerror(result), up->attempts,
                         (unsigned long long) up->sequence);
        break;

    default:
        prof_counter_add(d->failed_other, 1);
        prof_uploader_note(u, "failed: %s (HTTP %ld)",
                           curl_easy_strerror(result), status);
        prof_log_limited(log,
                         prof_upload_cause(u, PROF_CAUSE_UPLOAD_OTHER),
                         PROF_LOG_ERR,
                         "profiling: upload to \"%s\" failed (%s, status "
                         "%ld), profile %llu not uploaded", u->conf.url,
                         curl_easy_strerror(result), status,
                         (unsigned long long) up->sequence);
    }

    prof_uploader_tell(u);
    prof_upload_free(up);
}


/* A try ended: the profile is tried once more, or ends. */
static void
prof_uploader_check(prof_uploader_t *u)
{
    int                    pending;
    long                   status;
    CURLMsg               *msg;
    CURLcode               result;
    curl_off_t             sent;
    prof_upload_t         *up;
    prof_upload_outcome_e  outcome;

    while ((msg = curl_multi_info_read(u->multi, &pending)) != NULL) {
        if (msg->msg != CURLMSG_DONE || msg->easy_handle != u->easy) {
            continue;
        }

        result = msg->data.result;
        status = 0;
        sent = 0;
        curl_easy_getinfo(u->easy, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(u->easy, CURLINFO_SIZE_UPLOAD_T, &sent);

        up = u->in_flight;
        u->in_flight = NULL;
        prof_uploader_release_transfer(u);

        if (sent > 0) {
            prof_counter_add(u->conf.counters->bytes_sent,
                             (uint64_t) sent);
        }

        outcome = prof_upload_outcome(result, status);

        if ((outcome == PROF_UPLOAD_FAILED_CONNECT
             || outcome == PROF_UPLOAD_FAILED_TIMEOUT
             || outcome == PROF_UPLOAD_FAILED_5XX)
            && up->attempts < 2 && !u->closing
            && prof_uploader_start(u, up) == 0)
        {
            prof_counter_add(u->conf.counters->retried, 1);
            return;
        }

        if (u->conf.answer != NULL && result == CURLE_OK) {
            u->conf.answer(u->conf.outcome_data, up->sequence, status,
                           u->answer.data, u->answer.length);
        }

        prof_uploader_end(u, up, outcome, result, status);
        prof_uploader_next(u);
        return;
    }
}


static void
prof_uploader_next(prof_uploader_t *u)
{
    prof_upload_t  *up;

    while (u->in_flight == NULL && u->waiting != NULL) {
        up = u->waiting;
        u->waiting = NULL;

        if (prof_uploader_start(u, up) != 0) {
            prof_uploader_end(u, up, PROF_UPLOAD_FAILED_OTHER,
                              CURLE_OUT_OF_MEMORY, 0);
        }
    }

    if (u->closing && u->in_flight == NULL) {
        prof_uploader_finish(u);
    }
}


/* A profile given up: replaced, or still there at the close. */
static void
prof_uploader_drop(prof_uploader_t *u, prof_upload_t *up, const char *why)
{
    prof_counter_add(u->conf.counters->dropped, 1);
    prof_uploader_note(u, "dropped: %s", why);
    prof_log_limited(u->conf.log,
                     prof_upload_cause(u, PROF_CAUSE_UPLOAD_DROPPED),
                     PROF_LOG_WARN,
                     "profiling: profile %llu dropped: %s",
                     (unsigned long long) up->sequence, why);
    prof_uploader_tell(u);
    prof_upload_free(up);
}


void
prof_uploader_submit(prof_uploader_t *u, prof_upload_t *up)
{
    if (u->finished) {
        prof_uploader_drop(u, up, "the uploader is closed");
        return;
    }

    if (u->waiting != NULL) {
        /* The agent is slower than the period: keep the newest. */
        prof_uploader_drop(u, u->waiting,
                           "the previous upload is still running");
    }

    u->waiting = up;
    prof_uploader_next(u);
}


static int
prof_uploader_set_url(prof_uploader_t *u, const char *url)
{
    size_t       n, m;
    const char  *path;

    path = (u->conf.path != NULL) ? u->conf.path : PROF_UPLOAD_PATH;
    m = strlen(path);

    if (strncmp(url, "unix:", 5) == 0) {
        u->unix_path = strdup(url + 5);
        if (u->unix_path == NULL) {
            return -ENOMEM;
        }
        url = "http://localhost";
    }

    n = strlen(url);
    while (n > 0 && url[n - 1] == '/') {
        n--;
    }

    u->url = malloc(n + m + 1);
    if (u->url == NULL) {
        return -ENOMEM;
    }

    memcpy(u->url, url, n);
    memcpy(u->url + n, path, m + 1);

    return 0;
}


prof_uploader_t *
prof_uploader_create(uv_loop_t *loop, const prof_upload_conf_t *conf)
{
    prof_uploader_t  *u;

    u = calloc(1, sizeof(prof_uploader_t));
    if (u == NULL) {
        return NULL;
    }

    u->conf = *conf;
    u->loop = loop;
    u->server = (conf->server != NULL) ? conf->server : "the agent";

    if (u->conf.cause == 0) {
        u->conf.cause = PROF_CAUSE_UPLOAD_CONNECT;
    }

    if (prof_uploader_set_url(u, conf->url) != 0) {
        goto failed;
    }

    u->multi = curl_multi_init();
    if (u->multi == NULL) {
        goto failed;
    }

    curl_multi_setopt(u->multi, CURLMOPT_SOCKETFUNCTION, prof_on_socket);
    curl_multi_setopt(u->multi, CURLMOPT_SOCKETDATA, u);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERFUNCTION, prof_on_timer_change);
    curl_multi_setopt(u->multi, CURLMOPT_TIMERDATA, u);

    uv_timer_init(loop, &u->curl_timer);
    uv_timer_init(loop, &u->deadline_timer);
    u->curl_timer.data = u;
    u->deadline_timer.data = u;
    u->open_handles = 2;

    return u;

failed:

    free(u->url);
    free(u->unix_path);
    free(u);
    return NULL;
}


static void
prof_uploader_finish(prof_uploader_t *u)
{
    curl_off_t  sent;

    if (u->finished) {
        return;
    }

    u->finished = 1;

    if (u->in_flight != NULL) {
        /* what the aborted try sent was sent all the same */
        sent = 0;
        curl_easy_getinfo(u->easy, CURLINFO_SIZE_UPLOAD_T, &sent);
        if (sent > 0) {
            prof_counter_add(u->conf.counters->bytes_sent,
                             (uint64_t) sent);
        }

        prof_uploader_drop(u, u->in_flight,
                           "still uploading at the close deadline");
        u->in_flight = NULL;
    }

    if (u->waiting != NULL) {
        prof_uploader_drop(u, u->waiting,
                           "still waiting at the close deadline");
        u->waiting = NULL;
    }

    /* Removing the transfer closes its sockets' poll handles. */
    prof_uploader_release_transfer(u);
    curl_multi_cleanup(u->multi);
    u->multi = NULL;

    uv_timer_stop(&u->curl_timer);
    uv_timer_stop(&u->deadline_timer);
    uv_close((uv_handle_t *) &u->curl_timer, prof_handle_closed);
    uv_close((uv_handle_t *) &u->deadline_timer, prof_handle_closed);
}


static void
prof_on_deadline(uv_timer_t *timer)
{
    prof_uploader_finish(timer->data);
}


void
prof_uploader_close(prof_uploader_t *u, int64_t deadline_ms,
    void (*closed)(void *data), void *data)
{
    u->closing = 1;
    u->closed = closed;
    u->closed_data = data;

    if (u->in_flight == NULL && u->waiting == NULL) {
        prof_uploader_finish(u);
        return;
    }

    uv_timer_start(&u->deadline_timer, prof_on_deadline, deadline_ms, 0);
}


const char *
prof_uploader_last(prof_uploader_t *u, int64_t *at_ns)
{
    *at_ns = u->last_ns;

    return u->last;
}
