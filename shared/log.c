/*
 * Logging through the server's handler, rate-limited per cause.
 */

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "log.h"


#define PROF_LOG_EVERY_NS  (60 * 1000000000LL)


static void
prof_log_va(prof_log_t *log, int level, const char *fmt, va_list args)
{
    char  msg[1024];

    if (log->handler == NULL) {
        return;
    }

    vsnprintf(msg, sizeof(msg), fmt, args);
    log->handler(log->data, level, msg);
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
    struct timespec  ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    now_ns = (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;

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
