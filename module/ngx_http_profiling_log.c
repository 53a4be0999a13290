/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The profiler's messages in nginx's error log: the worker's, and those of
 * the profiler process it forks, which keeps the log's descriptors.
 */

#include "ngx_http_profiling_module.h"


/* This is the profiler process, whose nginx time cache froze at the fork. */
static ngx_uint_t  ngx_http_profiling_in_profiler_process;


/*
 * The profiler's messages: the worker's own, and in its profiler process
 * those of that process's main thread (nginx's logs are not thread-safe),
 * with nginx's time cache, frozen there since the fork, brought up to date.
 */
void
ngx_http_profiling_log_message(void *data, int level, const char *message)
{
    static const ngx_uint_t  levels[] = {
        NGX_LOG_ERR, NGX_LOG_WARN, NGX_LOG_NOTICE, NGX_LOG_INFO
    };

    if (ngx_http_profiling_in_profiler_process) {
        ngx_time_update();
    }

    ngx_log_error(levels[level], ngx_cycle->log, 0, "%s", message);
}


/*
 * The first thing in the profiler process forked by the worker: its
 * title ("nginx: profiler of worker 1234") and the descriptors of the
 * error log (files, syslog sockets), which it keeps; it closes the
 * others. Its log lines carry the worker's pid (ngx_pid, unchanged) and
 * its own as the thread id.
 */
int
ngx_http_profiling_profiler_process_init(void *data, int *keep, int max)
{
    int                  n;
    u_char               title[64];
    ngx_log_t           *log;
    ngx_syslog_peer_t   *peer;

    ngx_http_profiling_in_profiler_process = 1;

    (void) ngx_snprintf(title, sizeof(title), "profiler of worker %P%Z",
                        ngx_pid);
    ngx_setproctitle((char *) title);

    n = 0;

    for (log = ngx_cycle->log; log != NULL && n < max; log = log->next) {
        if (log->writer == ngx_syslog_writer) {
            /* Its socket, if nginx opened it already: kept too, lest the
               number be reused by one of the profiler's own. */
            peer = log->wdata;
            if (peer->conn.fd != (ngx_socket_t) -1) {
                keep[n++] = peer->conn.fd;
            }

        } else if (log->file != NULL && log->file->fd != NGX_INVALID_FILE) {
            keep[n++] = log->file->fd;
        }
    }

    return n;
}
