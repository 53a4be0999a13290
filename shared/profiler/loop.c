/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler loop thread (libuv): started and stopped by the process's
 * main thread; batches handed over drained, the status slot written as
 * its figures change (at most once a second), the last upload bounded at
 * the stop.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "common/clock.h"
#include "profiler/export.h"
#include "profiler/identify.h"
#include "profiler/loop.h"
#include "profiler/otlp.h"
#include "profiler/otlp_answer.h"
#include "profiler/pyroscope.h"
#include "profiler/queue_drain.h"
#include "profiler/status_publish.h"
#include "profiler/thread.h"


#define PROF_LOOP_NICE          10

/* How often the status slot is written at most, while figures change. */
#define PROF_STATUS_EVERY_MS    1000


static void
prof_on_status_timer(uv_timer_t *timer)
{
    prof_process_t  *p = timer->data;

    p->status_published_ms = uv_now(&p->loop);
    prof_publish_status(p);
}


/*
 * The figures changed (a drain): the status slot written now, or once a
 * second has passed since it last was. Nothing changes while the worker
 * is idle, and nothing is written then: no timer runs on its own.
 */
static void
prof_status_changed(prof_process_t *p)
{
    uint64_t  now, due;

    if (p->conf.status_slot == NULL) {
        return;
    }

    now = uv_now(&p->loop);
    due = p->status_published_ms + PROF_STATUS_EVERY_MS;

    if (now >= due) {
        p->status_published_ms = now;
        prof_publish_status(p);
        return;
    }

    if (!uv_is_active((uv_handle_t *) &p->status_timer)) {
        (void) uv_timer_start(&p->status_timer, prof_on_status_timer,
                              due - now, 0);
    }
}


static void
prof_on_batches_ready(uv_async_t *handle)
{
    prof_process_t  *p = handle->data;

    prof_drain_queue(p);

    if (__atomic_exchange_n(&p->status_due, 0, __ATOMIC_ACQ_REL)) {
        p->status_published_ms = uv_now(&p->loop);
        prof_publish_status(p);
        return;
    }

    prof_status_changed(p);
}


/* The first profile the agent took or refused completes the line; each
   one shows on the status page at once. */
static void
prof_on_upload_outcome(void *data, const char *text)
{
    prof_process_t  *p = data;

    prof_identify(p, text);

    if (p->conf.status_slot != NULL) {
        p->status_published_ms = uv_now(&p->loop);
        prof_publish_status(p);
    }
}


/* Pyroscope's and OTLP's outcomes: on the status page (the identify
   line is the agent's). */
static void
prof_on_push_outcome(void *data, const char *text)
{
    prof_process_t  *p = data;

    if (p->conf.status_slot != NULL) {
        p->status_published_ms = uv_now(&p->loop);
        prof_publish_status(p);
    }
}


/* Once both uploaders are closed: the loop's own handles. */
static void
prof_close_loop_handles(prof_process_t *p)
{
    if (p->uploader != NULL || p->pyroscope != NULL || p->otlp != NULL) {
        return;                         /* another uploader still runs */
    }

    prof_identify_close(p);

    if (p->conf.status_slot != NULL) {
        prof_publish_status(p);
        uv_timer_stop(&p->status_timer);
        uv_close((uv_handle_t *) &p->status_timer, NULL);
    }

    uv_close((uv_handle_t *) &p->batches_ready, NULL);
    uv_close((uv_handle_t *) &p->stop_requested, NULL);
}


/* Each uploader, freed once closed, is no longer named from then on: the
   other one's outcomes, still to come, read what is left. */
static void
prof_on_uploader_closed(void *data)
{
    prof_process_t  *p = data;

    p->uploader = NULL;
    prof_close_loop_handles(p);
}


static void
prof_on_pyroscope_closed(void *data)
{
    prof_process_t  *p = data;

    p->pyroscope = NULL;
    prof_close_loop_handles(p);
}


static void
prof_on_otlp_closed(void *data)
{
    prof_process_t  *p = data;

    p->otlp = NULL;
    prof_close_loop_handles(p);
}


static void
prof_on_stop_requested(uv_async_t *handle)
{
    int64_t          upload_ms;
    prof_process_t  *p = handle->data;

    prof_drain_queue(p);

    if (p->uploader == NULL && p->pyroscope == NULL && p->otlp == NULL) {
        prof_close_loop_handles(p);
        return;
    }

    /* The last upload gets what the server allows, no more: what the
       wait for debug files left of it (the loop's clock moved on). */
    uv_update_time(&p->loop);

    upload_ms = __atomic_load_n(&p->stop_upload_ms, __ATOMIC_ACQUIRE)
                - (prof_clock_ns(CLOCK_MONOTONIC)
                   - __atomic_load_n(&p->stop_started_ns, __ATOMIC_ACQUIRE))
                  / 1000000;

    /* (Their closed callbacks run on a later turn of the loop, never
       from prof_uploader_close.) */
    if (p->uploader != NULL) {
        prof_uploader_close(p->uploader, upload_ms > 0 ? upload_ms : 0,
                            prof_on_uploader_closed, p);
    }

    if (p->pyroscope != NULL) {
        prof_uploader_close(p->pyroscope, upload_ms > 0 ? upload_ms : 0,
                            prof_on_pyroscope_closed, p);
    }

    if (p->otlp != NULL) {
        prof_uploader_close(p->otlp, upload_ms > 0 ? upload_ms : 0,
                            prof_on_otlp_closed, p);
    }
}


/* Pyroscope's uploader (pyroscope.h), beside the agent's or alone. */
static int
prof_start_pyroscope(prof_process_t *p)
{
    prof_upload_conf_t  uc;

    memset(&uc, 0, sizeof(uc));
    uc.url = p->pyroscope_url;
    uc.path = PROF_PYROSCOPE_PATH;
    uc.content_type = "application/proto";
    uc.server = "Pyroscope";
    uc.headers = (const char * const *) p->pyroscope_headers;
    uc.header_count = p->conf.pyroscope_header_count;
    uc.cause = PROF_CAUSE_PUSH_CONNECT;
    uc.timeout_ms = p->conf.upload_timeout_ms;
    uc.origin = PROF_ORIGIN;
    uc.origin_version = PROF_VERSION;
    uc.counters = &p->channel->diagnostics.pyroscope;
    uc.log = &p->log;
    uc.outcome = prof_on_push_outcome;
    uc.outcome_data = p;

    p->pyroscope = prof_uploader_create(&p->loop, &uc);

    return (p->pyroscope != NULL) ? 0 : -ENOMEM;
}


/*
 * An OTLP receiver's answer: a partial success (2xx) counted and logged,
 * a refusal's reason (4xx, a google.rpc.Status or text) logged.
 */
static void
prof_on_otlp_answer(void *data, uint64_t sequence, long status,
    const void *body, size_t length)
{
    char             message[256];
    int64_t          rejected;
    prof_process_t  *p = data;

    if (status >= 200 && status < 300) {
        if (prof_otlp_response(body, length, &rejected, message,
                               sizeof(message)) != 0
            || (rejected == 0 && message[0] == '\0'))
        {
            return;
        }

        prof_counter_add(p->channel->diagnostics.otlp_partial, 1);
        if (rejected > 0) {
            prof_counter_add(p->channel->diagnostics.otlp_rejected_profiles,
                             (uint64_t) rejected);
        }

        prof_log_limited(&p->log, PROF_CAUSE_OTLP_PARTIAL, PROF_LOG_WARN,
                         "profiling: the OTLP receiver at \"%s\" took "
                         "profile %llu in part: %lld profiles rejected "
                         "(\"%s\")", p->otlp_url,
                         (unsigned long long) sequence, (long long) rejected,
                         message);
        return;
    }

    if (status >= 400 && status < 500 && length > 0
        && prof_otlp_status_message(body, length, message, sizeof(message))
           == 0)
    {
        prof_log_limited(&p->log, PROF_CAUSE_OTLP_REASON, PROF_LOG_ERR,
                         "profiling: the OTLP receiver at \"%s\" refused "
                         "profile %llu (HTTP %ld): \"%s\"", p->otlp_url,
                         (unsigned long long) sequence, status, message);
    }
}


/* The OTLP exporter's uploader (otlp.h), beside the others or alone. */
static int
prof_start_otlp(prof_process_t *p)
{
    prof_upload_conf_t  uc;

    memset(&uc, 0, sizeof(uc));
    uc.url = p->otlp_url;
    uc.path = PROF_OTLP_PATH;
    uc.content_type = "application/x-protobuf";
    uc.content_encoding = "gzip";
    uc.server = "the OTLP receiver";
    uc.headers = (const char * const *) p->otlp_headers;
    uc.header_count = p->conf.otlp_header_count;
    uc.cause = PROF_CAUSE_OTLP_CONNECT;
    uc.timeout_ms = p->conf.upload_timeout_ms;
    uc.origin = PROF_ORIGIN;
    uc.origin_version = PROF_VERSION;
    uc.counters = &p->channel->diagnostics.otlp;
    uc.log = &p->log;
    uc.outcome = prof_on_push_outcome;
    uc.outcome_data = p;
    uc.answer = prof_on_otlp_answer;

    p->otlp = prof_uploader_create(&p->loop, &uc);

    return (p->otlp != NULL) ? 0 : -ENOMEM;
}


static void
prof_loop_main(void *arg)
{
    prof_process_t  *p = arg;

    /* Encoding and uploading yield to the workers when CPU is short. */
    prof_thread_settle("prof-loop", PROF_LOOP_NICE);

    prof_read_maps(p);

    prof_identify_start(p);

    (void) uv_run(&p->loop, UV_RUN_DEFAULT);

    uv_mutex_lock(&p->done_mutex);
    __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
    uv_cond_signal(&p->done_cond);
    uv_mutex_unlock(&p->done_mutex);
}


void
prof_loop_notify(void *data)
{
    prof_process_t  *p = data;

    (void) uv_async_send(&p->batches_ready);
}


int
prof_start_loop(prof_process_t *p)
{
    int                     rc;
    prof_upload_conf_t      uc;
    prof_aggregator_conf_t  ac;

    p->symbolizer = prof_symbolizer_create();
    if (p->symbolizer == NULL) {
        return -ENOMEM;
    }

    prof_symbolizer_set_pid(p->symbolizer, p->pid);

    if (p->conf.symbol_store_fd > 0) {
        p->store = prof_symbol_store_open(p->conf.symbol_store_fd);
        prof_symbolizer_set_store(p->symbolizer, p->store);
    }

    if (p->debuginfod != NULL) {
        prof_symbolizer_set_debuginfod(p->symbolizer, p->debuginfod,
                                       p->conf.upload_timeout_ms);
    }

    memset(&ac, 0, sizeof(ac));
    ac.symbolizer = p->symbolizer;
    ac.diagnostics = &p->channel->diagnostics;
    ac.naming_since = &p->naming_since;
    p->naming_since = -1;
    ac.period_ns = p->conf.interval_ns;
    ac.thread_id = p->pid;              /* the worker's only thread */
    ac.thread_name = p->thread_name;
    ac.start_realtime_ns = p->start_realtime_ns;
    ac.start_monotonic_ns = p->start_monotonic_ns;
    ac.timeline = p->conf.timeline;
    ac.lua = p->lua;
    ac.on_profile = prof_export_profile;
    ac.on_profile_data = p;

    p->aggregator = prof_aggregator_create(&ac);
    if (p->aggregator == NULL) {
        return -ENOMEM;
    }

    rc = uv_loop_init(&p->loop);
    if (rc != 0) {
        return rc;
    }

    p->batches_ready.data = p;
    p->stop_requested.data = p;

    if (uv_mutex_init(&p->done_mutex) != 0) {
        uv_loop_close(&p->loop);
        return -ENOMEM;
    }

    if (uv_cond_init(&p->done_cond) != 0) {
        uv_mutex_destroy(&p->done_mutex);
        uv_loop_close(&p->loop);
        return -ENOMEM;
    }

    if (p->agent_url != NULL) {
        memset(&uc, 0, sizeof(uc));
        uc.url = p->agent_url;
        uc.timeout_ms = p->conf.upload_timeout_ms;
        uc.origin = PROF_ORIGIN;
        uc.origin_version = PROF_VERSION;
        uc.container_id = p->container.container_id;
        uc.entity_id = p->container.entity_id;
        uc.counters = &p->channel->diagnostics.uploads;
        uc.log = &p->log;
        uc.outcome = prof_on_upload_outcome;
        uc.outcome_data = p;

        p->uploader = prof_uploader_create(&p->loop, &uc);
        if (p->uploader == NULL) {
            uv_cond_destroy(&p->done_cond);
            uv_mutex_destroy(&p->done_mutex);
            uv_loop_close(&p->loop);
            return -ENOMEM;
        }
    }

    if ((p->pyroscope_url != NULL && prof_start_pyroscope(p) != 0)
        || (p->otlp_url != NULL && prof_start_otlp(p) != 0))
    {
        if (p->uploader != NULL) {
            prof_uploader_close(p->uploader, 0, NULL, NULL);
            p->uploader = NULL;
        }
        if (p->pyroscope != NULL) {
            prof_uploader_close(p->pyroscope, 0, NULL, NULL);
            p->pyroscope = NULL;
        }
        (void) uv_run(&p->loop, UV_RUN_DEFAULT);
        uv_cond_destroy(&p->done_cond);
        uv_mutex_destroy(&p->done_mutex);
        uv_loop_close(&p->loop);
        return -ENOMEM;
    }

    (void) uv_async_init(&p->loop, &p->batches_ready, prof_on_batches_ready);
    (void) uv_async_init(&p->loop, &p->stop_requested,
                         prof_on_stop_requested);

    /* The status page's slot: written as its figures change. */
    p->started_ns = prof_clock_ns(CLOCK_REALTIME);

    if (p->conf.status_slot != NULL) {
        (void) uv_timer_init(&p->loop, &p->status_timer);
        p->status_timer.data = p;
    }

    rc = prof_thread_create(&p->loop_thread, prof_loop_main, p);
    if (rc != 0) {
        if (p->uploader != NULL) {
            prof_uploader_close(p->uploader, 0, NULL, NULL);
            p->uploader = NULL;
        }
        if (p->pyroscope != NULL) {
            prof_uploader_close(p->pyroscope, 0, NULL, NULL);
            p->pyroscope = NULL;
        }
        if (p->otlp != NULL) {
            prof_uploader_close(p->otlp, 0, NULL, NULL);
            p->otlp = NULL;
        }
        uv_close((uv_handle_t *) &p->batches_ready, NULL);
        uv_close((uv_handle_t *) &p->stop_requested, NULL);
        if (p->conf.status_slot != NULL) {
            uv_close((uv_handle_t *) &p->status_timer, NULL);
        }
        (void) uv_run(&p->loop, UV_RUN_DEFAULT);
        uv_loop_close(&p->loop);
        uv_cond_destroy(&p->done_cond);
        uv_mutex_destroy(&p->done_mutex);
        return rc;
    }

    return 0;
}


int
prof_stop_loop(prof_process_t *p, int64_t timeout_ms)
{
    int       rc;
    uint64_t  deadline_ns, now_ns;

    (void) uv_async_send(&p->stop_requested);

    deadline_ns = uv_hrtime() + (uint64_t) timeout_ms * 1000000;
    rc = 0;

    uv_mutex_lock(&p->done_mutex);

    while (!p->done) {
        now_ns = uv_hrtime();
        if (now_ns >= deadline_ns) {
            rc = -ETIMEDOUT;
            break;
        }
        (void) uv_cond_timedwait(&p->done_cond, &p->done_mutex,
                                 deadline_ns - now_ns);
    }

    uv_mutex_unlock(&p->done_mutex);

    if (rc != 0) {
        return rc;
    }

    (void) uv_thread_join(&p->loop_thread);
    uv_loop_close(&p->loop);
    uv_cond_destroy(&p->done_cond);
    uv_mutex_destroy(&p->done_mutex);

    return 0;
}
