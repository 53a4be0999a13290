/*
 * Agent uploader: POSTs each profile to <agent>/profiling/v1/input as
 * multipart (event.json, profile.pprof, code-provenance.json), driving
 * libcurl's multi-socket API with the profiler loop's libuv handles.
 *
 * Threading: the profiler loop thread only; never blocks it.
 * Policy: at most one upload in flight; a profile ready meanwhile waits,
 * and a newer one replaces it (the older is dropped and counted). Timeouts,
 * refused connections and 5xx are retried once, 4xx never; then the
 * profile is dropped, counted and logged (one line a minute per cause).
 * Memory: the uploader owns what is submitted; curl_global_init must have
 * run in the process before.
 */

#ifndef PROF_UPLOAD_H
#define PROF_UPLOAD_H

#include <stdint.h>
#include <uv.h>

#include "buffer.h"
#include "diagnostics.h"
#include "log.h"


typedef struct {
    const char          *url;       /* http://h:p, https://h:p, unix:/path */
    int64_t              timeout_ms;
    const char          *origin;            /* DD-EVP-ORIGIN */
    const char          *origin_version;    /* DD-EVP-ORIGIN-VERSION */
    prof_diagnostics_t  *diagnostics;
    prof_log_t          *log;
} prof_upload_conf_t;


typedef struct prof_upload_s  prof_upload_t;

struct prof_upload_s {
    prof_upload_t   *next;
    uint64_t         sequence;
    prof_buffer_t    event;             /* event.json */
    prof_buffer_t    pprof;             /* gzip pprof */
    prof_buffer_t    provenance;        /* code-provenance.json */
    unsigned         attempts;
};


typedef struct prof_uploader_s  prof_uploader_t;


prof_uploader_t *prof_uploader_create(uv_loop_t *loop,
    const prof_upload_conf_t *conf);

/* Takes up (allocated with malloc) whatever happens. */
void prof_uploader_submit(prof_uploader_t *u, prof_upload_t *up);

/*
 * No retry from now on; what still runs after deadline_ms is aborted.
 * closed(data) runs once every handle is closed; the uploader is freed.
 */
void prof_uploader_close(prof_uploader_t *u, int64_t deadline_ms,
    void (*closed)(void *data), void *data);

void prof_upload_free(prof_upload_t *up);


#endif /* PROF_UPLOAD_H */
