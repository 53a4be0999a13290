/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * Logging from the profiler: through the embedding server's log, with at
 * most one line a minute per cause for what can repeat (export failures).
 *
 * The server's log objects are not thread-safe: the handler is only ever
 * called on the thread that called prof_log_init (the worker's thread; in
 * the profiler process, its main thread). A message from another thread
 * (the profiler process's loop thread) waits in a small queue; notify (if
 * set) tells that thread that one waits, and it hands them to the handler
 * with prof_log_deliver(). A full queue drops messages (counted).
 *
 * Threading: prof_log may be called from the thread that called
 * prof_log_init and from one other thread (the loop thread);
 * prof_log_limited only from that other thread, which owns the limiter's
 * state; prof_log_deliver from the thread that called prof_log_init.
 */

#ifndef PROF_LOG_H
#define PROF_LOG_H

#include <stdint.h>
#include <sys/types.h>

#include "common/spsc.h"


enum {
    PROF_LOG_ERR = 0,
    PROF_LOG_WARN,
    PROF_LOG_NOTICE,
    PROF_LOG_INFO
};

/* Or'ed into a level: a report at that level, not an error of the
   profiler's (not the status page's last error). */
#define PROF_LOG_REPORT  0x100

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
    PROF_CAUSE_PUSH_CONNECT,        /* the same seven, for Pyroscope */
    PROF_CAUSE_PUSH_TIMEOUT,
    PROF_CAUSE_PUSH_404,
    PROF_CAUSE_PUSH_4XX,
    PROF_CAUSE_PUSH_5XX,
    PROF_CAUSE_PUSH_OTHER,
    PROF_CAUSE_PUSH_DROPPED,
    PROF_CAUSE_PUSH_FOLDED,         /* endpoints past the bound */
    PROF_CAUSE_PUSH_TAGS,           /* tags no series label */
    PROF_CAUSE_OTLP_CONNECT,        /* the seven, for OTLP */
    PROF_CAUSE_OTLP_TIMEOUT,
    PROF_CAUSE_OTLP_404,
    PROF_CAUSE_OTLP_4XX,
    PROF_CAUSE_OTLP_5XX,
    PROF_CAUSE_OTLP_OTHER,
    PROF_CAUSE_OTLP_DROPPED,
    PROF_CAUSE_OTLP_PARTIAL,        /* answered with a partial success */
    PROF_CAUSE_OTLP_REASON,         /* a refusal's reason */
    PROF_CAUSES
};

#define PROF_LOG_MESSAGES      16
#define PROF_LOG_MESSAGE_MAX   1024


typedef void (*prof_log_pt)(void *data, int level, const char *message);

typedef struct {
    prof_log_pt   handler;
    void         *data;
    void        (*notify)(void *data);  /* any thread: a message waits */
    void         *notify_data;
    pid_t         server_tid;           /* the handler's thread: the one
                                           that called prof_log_init */
    prof_spsc_t   queue;                /* of prof_log_message_t */
    uint64_t      dropped;
    int64_t       last_ns[PROF_CAUSES];
    int64_t       last_error_ns;        /* the loop thread's last error */
    char          last_error[256];      /* or warning (unix ns, text) */
} prof_log_t;


/* Called on the thread whose messages go straight to the handler (the
   worker's; the profiler process's main thread). 0 or -ENOMEM. */
int prof_log_init(prof_log_t *log);
void prof_log_free(prof_log_t *log);

void prof_log(prof_log_t *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void prof_log_limited(prof_log_t *log, unsigned cause, int level,
    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* The thread that called prof_log_init: the messages waiting, to the
   handler. */
void prof_log_deliver(prof_log_t *log);


#endif /* PROF_LOG_H */
