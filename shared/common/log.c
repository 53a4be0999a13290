/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Logging through the server's handler, on the server's thread only, and
 * rate-limited per cause.
 */

#define _GNU_SOURCE

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/diagnostics.h"
#include "common/log.h"


#define PROF_LOG_EVERY_NS  (60 * 1000000000LL)


typedef struct {
    int     level;
    char    text[PROF_LOG_MESSAGE_MAX];
} prof_log_message_t;


int
prof_log_init(prof_log_t *log)
{
    log->server_tid = (pid_t) syscall(SYS_gettid);

    return prof_spsc_init(&log->queue, PROF_LOG_MESSAGES,
                          sizeof(prof_log_message_t));
}


void
prof_log_free(prof_log_t *log)
{
    prof_spsc_free(&log->queue);
}


static void
prof_log_va(prof_log_t *log, int level, const char *fmt, va_list args)
{
    int                  report;
    char                 text[2048];
    size_t               n;
    prof_log_message_t  *m;

    if (log->handler == NULL) {
        return;
    }

    report = level & PROF_LOG_REPORT;
    level &= ~PROF_LOG_REPORT;

    if ((pid_t) syscall(SYS_gettid) == log->server_tid) {
        vsnprintf(text, sizeof(text), fmt, args);
        log->handler(log->data, level, text);
        return;
    }

    m = (log->queue.items != NULL) ? prof_spsc_reserve(&log->queue) : NULL;
    if (m == NULL) {
        prof_counter_add(log->dropped, 1);
        return;
    }

    m->level = level;
    vsnprintf(m->text, sizeof(m->text), fmt, args);

    /* The last error, for the status page (this thread's only). */
    if (level <= PROF_LOG_WARN && !report) {
        log->last_error_ns = prof_clock_ns(CLOCK_REALTIME);
        n = strnlen(m->text, sizeof(log->last_error) - 1);
        memcpy(log->last_error, m->text, n);
        log->last_error[n] = '\0';
    }

    (void) prof_spsc_commit(&log->queue);

    if (log->notify != NULL) {
        log->notify(log->notify_data);
    }
}


void
prof_log(prof_log_t *log, int level, const char *fmt, ...)
{
    va_list  args;

    va_start(args, fmt);
    prof_log_va(log, level, fmt, args);
    va_end(args);
}


void
prof_log_limited(prof_log_t *log, unsigned cause, int level,
    const char *fmt, ...)
{
    int64_t          now_ns;
    va_list          args;

    now_ns = prof_clock_ns(CLOCK_MONOTONIC);

    if (log->last_ns[cause] != 0
        && now_ns - log->last_ns[cause] < PROF_LOG_EVERY_NS)
    {
        return;
    }

    log->last_ns[cause] = now_ns;

    va_start(args, fmt);
    prof_log_va(log, level, fmt, args);
    va_end(args);
}


void
prof_log_deliver(prof_log_t *log)
{
    prof_log_message_t  *m;

    if (log->queue.items == NULL) {
        return;
    }

    while ((m = prof_spsc_peek(&log->queue)) != NULL) {
        if (log->handler != NULL) {
            log->handler(log->data, m->level, m->text);
        }
        prof_spsc_release(&log->queue);
    }
}
