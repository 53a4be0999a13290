/*
 * Logging from the profiler: through the embedding server's log, with at
 * most one line a minute per cause for what can repeat (export failures).
 *
 * Threading: prof_log may be called from any thread (the handler must be
 * safe for that); prof_log_limited only from the profiler loop thread,
 * which owns the limiter's state.
 */

#ifndef PROF_LOG_H
#define PROF_LOG_H

#include <stdint.h>


enum {
    PROF_LOG_ERR = 0,
    PROF_LOG_WARN,
    PROF_LOG_NOTICE,
    PROF_LOG_INFO
};

enum {
    PROF_CAUSE_ENCODE = 0,
    PROF_CAUSE_FILE,
    PROF_CAUSE_MEMORY,
    PROF_CAUSE_UPLOAD_CONNECT,
    PROF_CAUSE_UPLOAD_TIMEOUT,
    PROF_CAUSE_UPLOAD_404,
    PROF_CAUSE_UPLOAD_4XX,
    PROF_CAUSE_UPLOAD_5XX,
    PROF_CAUSE_UPLOAD_OTHER,
    PROF_CAUSE_UPLOAD_DROPPED,
    PROF_CAUSES
};


typedef void (*prof_log_pt)(void *data, int level, const char *message);

typedef struct {
    prof_log_pt   handler;
    void         *data;
    int64_t       last_ns[PROF_CAUSES];
} prof_log_t;


void prof_log(prof_log_t *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void prof_log_limited(prof_log_t *log, unsigned cause, int level,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));


#endif /* PROF_LOG_H */
